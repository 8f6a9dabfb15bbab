"""Helpers shared by taskdiag's Python fixture scripts (the Rust side is taskdiag-test-support).

Fixtures put processes in known states and say when they are in them: a fixture that prints
"ready" before its processes are set up makes the tests that compare two reads of them flaky.
So every helper here returns only once what it set up is in place (a name set, a child a
zombie, a thread named), and `Ready` lets a fixture's processes tell their parent so.
"""
import ctypes
import mmap
import os
import random
import signal
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

PAGE = mmap.PAGESIZE
PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE = 1, 2, 0x20, 0x4000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NAME = 1, 4, 15


def set_name(name):
    """Names the calling thread (prctl PR_SET_NAME; the kernel keeps 15 bytes)."""
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def die_with_parent():
    """Makes the kernel kill this process when its parent exits."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def pause_forever():
    while True:
        signal.pause()


class Ready:
    """A pipe on which a fixture's processes (forked after it is made) each say they are set
    up; the fixture waits for all of them before it says it is ready itself."""

    def __init__(self):
        self.rd, self.wr = os.pipe()

    def signal(self):
        os.write(self.wr, b"x")

    def wait(self, n):
        got = 0
        while got < n:
            b = os.read(self.rd, n - got)
            if not b:
                raise EOFError("a fixture process ended before it was ready")
            got += len(b)


def wait_zombie(pid):
    """Returns once child `pid` has exited, leaving it a zombie (not reaped)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def map_pieces(n, prot=PROT_READ):
    """Maps `n` one-page mappings, alternately with `prot` and none (so that they do not
    merge): 2n pages reserved, never touched. Returns the first page's address."""
    base = libc.mmap(None, 2 * n * PAGE, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    for i in range(0, 2 * n, 2):
        libc.mprotect(base + i * PAGE, PAGE, PROT_NONE)
    return base


def setuid_execs(program, running, kids, arg="0.03", counted=lambda n: None):
    """While `running()`, forks `kids` processes at a time that each run as the caller for a
    random moment (up to 10 ms) and then execute the set-user-ID `program` with `arg`; waits
    for each batch and tells `counted` its size. Returns how many executed."""
    execs = 0
    while running():
        pids = []
        for _ in range(kids):
            pid = os.fork()
            if pid == 0:
                end = time.time() + random.uniform(0, 0.01)
                while time.time() < end:
                    pass
                os.execv(program, [program, arg])
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        execs += len(pids)
        counted(len(pids))
    return execs
