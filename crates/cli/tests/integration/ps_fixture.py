#!/usr/bin/env python3
"""Fixture for the ps differential tests: a new session of quiescent processes in known,
awkward states. Prints one JSON line ({"sid": ..., "pids": {...}, "tty": ...}) once every
process is in place, then waits until standard input closes and kills them all.

Run as root (it changes scheduling classes, users and memory locks)."""
import ctypes
import json
import os
import pty
import signal
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1


def set_name(name: bytes):
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def die_with_parent():
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def child(name=None, setup=None, exec_argv=None):
    """Forks a child that names itself, runs setup, then sleeps (or execs)."""
    pid = os.fork()
    if pid:
        return pid
    try:
        die_with_parent()
        if name is not None:
            set_name(name)
        if setup is not None:
            setup()
        if exec_argv is not None:
            os.execv(exec_argv[0], exec_argv)
        while True:
            signal.pause()
    finally:
        os._exit(0)


def threaded():
    names = [b"worker-0", b"worker (1)", b"w\xc3\xa9rker"]

    def run(n):
        set_name(n)
        while True:
            time.sleep(1000)

    for n in names:
        threading.Thread(target=run, args=(n,), daemon=True).start()
    time.sleep(0.2)


def nobody():
    os.setgid(65534)
    os.setuid(65534)


def euid_nobody():
    os.setresgid(0, 65534, 0)
    os.setresuid(0, 65534, 0)


def sched(policy, prio):
    def f():
        os.sched_setscheduler(0, policy, os.sched_param(prio))
    return f


def nice_by(n):
    def f():
        os.setpriority(os.PRIO_PROCESS, 0, n)
    return f


def locked():
    libc.mlockall(1)  # MCL_CURRENT


def middle():
    child(b"grandchild")


def zombie_parent():
    pid = os.fork()
    if pid == 0:
        set_name(b"zombie")
        os._exit(0)
    # never waited for: stays a zombie while we live


def main():
    os.setsid()
    set_name(b"fixture")
    me = sys.executable
    sleeper = [me, "-c", "import signal\nwhile True: signal.pause()"]
    pids = {}
    pids["hostile"] = child(b"(a) b)")
    pids["newline"] = child(b"new\nline")
    pids["long"] = child(b"0123456789abcdefXYZ")
    pids["ctl"] = child(b"ctl\x1b[31m")
    pids["utf8"] = child("ünï😀".encode())
    pids["badutf8"] = child(b"bad\xff\xfe")
    pids["twin1"] = child(b"twin")
    pids["twin2"] = child(b"twin")
    pids["nice5"] = child(b"niced", nice_by(5))
    pids["nice-5"] = child(b"hurried", nice_by(-5))
    pids["batch"] = child(b"batch", sched(os.SCHED_BATCH, 0))
    pids["idle"] = child(b"idle", sched(os.SCHED_IDLE, 0))
    pids["fifo"] = child(b"fifo", sched(os.SCHED_FIFO, 10))
    pids["rr"] = child(b"rr", sched(os.SCHED_RR, 20))
    pids["threads"] = child(b"threaded", threaded)
    pids["nobody"] = child(b"nobody", nobody)
    pids["euid"] = child(b"euid", euid_nobody)
    pids["locked"] = child(b"locked", locked)
    pids["middle"] = child(b"middle", middle)
    pids["zparent"] = child(b"zparent", zombie_parent)
    pids["argv"] = child(
        None,
        None,
        sleeper + ["A" * 3000, "tab\there", "new\nline", "esc\x1b[1m", "ünï", "B" * 3000],
    )
    pids["badargv"] = child(None, None, [me.encode(), b"-c", b"import signal\nsignal.pause()", b"\xff\xfe bytes"])
    pids["stopped"] = child(b"stopped", lambda: os.kill(os.getpid(), signal.SIGSTOP))
    os.waitpid(pids["stopped"], os.WUNTRACED)
    # A session of its own with a controlling terminal, in the foreground.
    pty_pid, master = pty.fork()
    if pty_pid == 0:
        die_with_parent()
        set_name(b"on-a-tty")
        while True:
            signal.pause()
    pids["tty"] = pty_pid
    time.sleep(0.5)
    tty = os.readlink(f"/proc/{pty_pid}/fd/0").removeprefix("/dev/")
    print(json.dumps({"sid": os.getpid(), "pids": pids, "tty": tty}), flush=True)
    try:
        sys.stdin.read()
    finally:
        for p in pids.values():
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.close(master)


if __name__ == "__main__":
    main()
