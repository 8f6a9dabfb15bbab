"""The hostile fixture: processes whose names, command lines and states trip parsers.

Run as root: ``python hostile.py OTHER_USER``. Starts the processes below, prints one line
``ROLE PID`` for each, then ``ready``, and waits; when its standard input closes (the test
ended, or died) it kills them all, by pid, and exits.

- ``space``, ``parens``, ``newline``, ``nonutf8``: kernel names with a space, parentheses,
  a newline, bytes that are not UTF-8 (PR_SET_NAME);
- ``long``: a program started through a link with a 34-character name, so its kernel name is
  cut to 15 characters and psutil completes it from the command line;
- ``bigargv``: a 60 KiB argument vector;
- ``title``: a process that rewrote its command line as one string with spaces and no NUL
  (setproctitle);
- ``zombie``: an exited child its parent (this process) does not reap;
- ``threads``: a process with four threads;
- ``other``: a process of another user.
"""

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_NAME = 15
libc = ctypes.CDLL(None, use_errno=True)
children = []


def say(role, pid):
    print(role, pid, flush=True)


def fork(body):
    pid = os.fork()
    if pid == 0:
        try:
            # Die with the fixture, whatever happens to it.
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            body()
        finally:
            os._exit(0)
    children.append(pid)
    return pid


def named(name):
    def body():
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
        while True:
            time.sleep(3600)

    return body


def exec_sleep(argv0, *args, path="/bin/sleep"):
    def body():
        os.execv(path, [argv0, *(args or ["100000"])])

    return body


def rewrite_title():
    # setproctitle(): overwrite argv in place with one string, no NUL at its end.
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])
    title = b"fixture: proc title with spaces"
    room = arg_end - arg_start
    data = (title + b" " * room)[:room]
    with open("/proc/self/mem", "r+b") as mem:
        mem.seek(arg_start)
        mem.write(data)
    while True:
        time.sleep(3600)


def many_threads():
    for _ in range(3):
        threading.Thread(target=lambda: time.sleep(1e6), daemon=True).start()
    while True:
        time.sleep(3600)


def main():
    other = sys.argv[1]
    tmp = sys.argv[2]
    say("space", fork(named(b"with space")))
    say("parens", fork(named(b"x) (y")))
    say("newline", fork(named(b"new\nline")))
    say("nonutf8", fork(named(b"bad\xff\xfename")))
    link = os.path.join(tmp, "taskdiag-fixture-long-name-sleeper")
    if not os.path.lexists(link):
        os.symlink("/bin/sleep", link)
    say("long", fork(exec_sleep(link, path=link)))
    say("bigargv", fork(exec_sleep(
        "python3", "-c", "import time; time.sleep(1e6)", *(["x" * 1023] * 60),
        path=sys.executable)))
    say("title", fork(rewrite_title))
    say("threads", fork(many_threads))
    zombie = fork(lambda: None)
    # Wait until it has exited (a zombie), without reaping it.
    while True:
        with open(f"/proc/{zombie}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        time.sleep(0.01)
    say("zombie", zombie)
    say("other", start_other(other))
    print("ready", flush=True)
    sys.stdin.read()
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_other(user):
    def body():
        os.execv(
            "/usr/bin/setpriv",
            ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
             "/bin/sleep", "100000"],
        )

    return fork(body)


if __name__ == "__main__":
    main()
