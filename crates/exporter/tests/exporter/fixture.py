"""The exporter tests' fixture: a process with known CPU time, I/O, descriptors, named
threads and a child, driven by commands on standard input; it reports on standard output.

Run through a symlink named tdxfix (so that its name is tdxfix from exec on). Commands:
  go DIR      burn 0.3 s of CPU in the main thread and in each worker, write 1 MiB to a file
              in DIR with fsync, drop it from the page cache and read it back; fork a child
              that burns 0.3 s and waits; print "busy CHILDPID" when all is done
  release     let the child exit, reap it, print "released"
  spin        a thread burns CPU until "stop"; prints "spinning"
  stop        print "stopped"
  quit        exit
Ready: "ready PID" once the 3 workers (named tdx-worker) sleep and 40 extra descriptors are
open.
"""
import ctypes
import os
import sys
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NAME = 15


def name_thread(name):
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()), 0, 0, 0)


def burn(seconds):
    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < seconds:
        x += 1
    return x


go = [threading.Event() for _ in range(3)]
done = [threading.Event() for _ in range(3)]


def worker(i):
    name_thread("tdx-worker")
    go[i].wait()
    burn(0.3)
    done[i].set()
    threading.Event().wait()


spin_stop = threading.Event()


def spinner():
    name_thread("tdx-spin")
    while not spin_stop.is_set():
        burn(0.05)


keep = [open("/dev/null") for _ in range(40)]
ballast = b"x" * (16 << 20)
for i in range(3):
    threading.Thread(target=worker, args=(i,), daemon=True).start()
print("ready", os.getpid(), flush=True)

child = None
child_w = None
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "go":
        burn(0.3)
        for e in go:
            e.set()
        for e in done:
            e.wait()
        path = os.path.join(cmd[1], "tdx-io")
        data = os.urandom(1 << 20)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        os.write(fd, data)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        fd = os.open(path, os.O_RDONLY)
        while os.read(fd, 1 << 16):
            pass
        os.close(fd)
        r, w = os.pipe()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            burn(0.3)
            os.write(ready_w, b"1")
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        os.read(ready_r, 1)
        os.close(ready_r)
        os.close(ready_w)
        child, child_w = pid, w
        print("busy", pid, flush=True)
    elif cmd[0] == "release":
        os.close(child_w)
        os.waitpid(child, 0)
        print("released", flush=True)
    elif cmd[0] == "spin":
        threading.Thread(target=spinner, daemon=True).start()
        print("spinning", flush=True)
    elif cmd[0] == "stop":
        spin_stop.set()
        print("stopped", flush=True)
    elif cmd[0] == "quit":
        break
