#!/usr/bin/env python3
"""Fixture for the ps differential tests: a new session of quiescent processes in known,
awkward states. Prints one JSON line ({"sid": ..., "pids": {...}, "tty": ...}) once every
process is in place (each says so on a pipe once set up: named, scheduled, its threads named,
its program executed), then waits until standard input closes and kills them all.

Run as root (it changes scheduling classes, users and memory locks), with tdtest.py on
PYTHONPATH."""
import ctypes
import json
import os
import pty
import signal
import sys
import threading
import time

from tdtest import Ready, die_with_parent, libc, set_name, wait_zombie

ready = Ready()
# The descriptor an executed program says it is ready on (it inherits it).
READY_FD = 9


def child(name=None, setup=None, exec_argv=None):
    """Forks a child that names itself, runs setup, says it is ready, then sleeps; or execs
    a program that says so itself on READY_FD."""
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
            os.dup2(ready.wr, READY_FD)
            os.execv(exec_argv[0], exec_argv)
        ready.signal()
        while True:
            signal.pause()
    finally:
        os._exit(0)


def threaded():
    names = [b"worker-0", b"worker (1)", b"w\xc3\xa9rker"]
    named = threading.Barrier(len(names) + 1)

    def run(n):
        set_name(n)
        named.wait()
        while True:
            time.sleep(1000)

    for n in names:
        threading.Thread(target=run, args=(n,), daemon=True).start()
    named.wait()


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
    # The grandchild says it is ready for itself.
    child(b"grandchild")


def own_namespaces():
    # New network, UTS and IPC namespaces (CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC).
    if libc.unshare(0x40000000 | 0x04000000 | 0x08000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare")


def zombie_parent():
    pid = os.fork()
    if pid == 0:
        set_name(b"zombie")
        os._exit(0)
    # never reaped: stays a zombie while we live
    wait_zombie(pid)


def main():
    os.setsid()
    set_name(b"fixture")
    me = sys.executable
    says_ready = "import os\nos.write(%d, b'x')\nos.close(%d)\n" % (READY_FD, READY_FD)
    sleeper = [me, "-c", says_ready + "import signal\nwhile True: signal.pause()"]
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
    pids["netns"] = child(b"netns", own_namespaces)
    pids["argv"] = child(
        None,
        None,
        sleeper + ["A" * 3000, "tab\there", "new\nline", "esc\x1b[1m", "ünï", "B" * 3000],
    )
    pids["badargv"] = child(None, None, [me.encode(), b"-c", (says_ready + "import signal\nsignal.pause()").encode(), b"\xff\xfe bytes"])
    # The grandchild of "middle" says it is ready too.
    expected = len(pids) + 1
    pids["stopped"] = child(b"stopped", lambda: os.kill(os.getpid(), signal.SIGSTOP))
    os.waitpid(pids["stopped"], os.WUNTRACED)
    # A session of its own with a controlling terminal, in the foreground.
    pty_pid, master = pty.fork()
    if pty_pid == 0:
        die_with_parent()
        set_name(b"on-a-tty")
        ready.signal()
        while True:
            signal.pause()
    pids["tty"] = pty_pid
    ready.wait(expected + 1)
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
