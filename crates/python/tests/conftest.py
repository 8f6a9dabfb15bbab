"""Fixtures of the Python package's tests: the hostile processes, a real taskdiagd, and running
this interpreter as an unprivileged user. The tests run as root (as CI does) and drop to
the test users with setpriv for the unprivileged paths."""

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
USER = "taskdiag-test"
OTHER = "taskdiag-other"


def ensure_user(name):
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=False,
        )
        return pwd.getpwnam(name).pw_uid


def pytest_collection_modifyitems(items):
    """psutil's own suite (test_psutil_suite.py) first: before the hostile fixture's processes
    exist, whose names psutil's test_scripts.py would fail to decode (it reads every process's
    name, through psutil's pstree.py, as UTF-8)."""
    items.sort(key=lambda item: os.path.basename(str(item.fspath)) != "test_psutil_suite.py")


@pytest.fixture(scope="session", autouse=True)
def root():
    if os.geteuid() != 0:
        pytest.skip("the tests run as root (they start taskdiagd and drop to test users)")
    ensure_user(USER)
    ensure_user(OTHER)


@pytest.fixture(scope="session")
def hostile(root):
    """The hostile fixture's processes, by role (see hostile.py)."""
    with tempfile.TemporaryDirectory(prefix="td-hostile-") as tmp:
        os.chmod(tmp, 0o755)
        p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "hostile.py"), OTHER, tmp],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        roles = {}
        for line in p.stdout:
            line = line.strip()
            if line == "ready":
                break
            role, pid = line.split()
            roles[role] = int(pid)
        assert "other" in roles, f"the fixture did not start: {roles}"
        # The other user's process has executed setpriv's sleep once its uid changed.
        deadline = time.monotonic() + 10
        while os.stat(f"/proc/{roles['other']}").st_uid != pwd.getpwnam(OTHER).pw_uid:
            assert time.monotonic() < deadline, "the other user's process did not start"
            time.sleep(0.01)
        roles["fixture"] = p.pid
        yield roles
        p.stdin.close()
        p.wait(timeout=30)


@pytest.fixture(scope="session")
def daemon(root):
    """A real taskdiagd (target/release/taskdiagd) on a socket of its own, once it says it is
    ready (sd_notify: privileges dropped); its socket's path."""
    binary = os.path.join(REPO, "target", "release", "taskdiagd")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: cargo build --release -p taskdiag-daemon")
    with tempfile.TemporaryDirectory(prefix="td-daemon-") as tmp:
        os.chmod(tmp, 0o755)
        sock = os.path.join(tmp, "taskdiag.sock")
        # An abstract socket: the daemon says READY=1 after it dropped its privileges, as a
        # user no file socket of ours would let in.
        name = f"taskdiag-pytest-notify-{os.getpid()}"
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind("\0" + name)
        notify.settimeout(60)
        env = dict(os.environ, NOTIFY_SOCKET="@" + name)
        p = subprocess.Popen(
            [binary, "--foreground", "--socket", sock],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            while True:
                try:
                    msg = notify.recv(4096).decode()
                except socket.timeout:
                    p.kill()
                    pytest.fail(f"taskdiagd did not get ready: {p.stderr.read().decode()}")
                if "READY=1" in msg.split("\n"):
                    break
            yield sock
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            notify.close()


def as_user(user, args, env=None, timeout=120):
    """Runs this interpreter with ``args`` as ``user`` (no capabilities, no groups); its
    CompletedProcess."""
    cmd = [
        "setpriv",
        f"--reuid={user}",
        f"--regid={user}",
        "--clear-groups",
        "--inh-caps=-all",
        "--",
        sys.executable,
        *args,
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TASKDIAG_")}
    clean.update(env or {})
    clean["HOME"] = "/"
    return subprocess.run(cmd, env=clean, capture_output=True, text=True, timeout=timeout, cwd="/")


def run_script(user, script, *args, env=None):
    """Runs tests/``script`` with ``args`` (as ``user``, or as root for None) and returns
    the JSON it prints."""
    path = os.path.join(HERE, script)
    if user is None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("TASKDIAG_")}
        clean.update(env or {})
        r = subprocess.run(
            [sys.executable, path, *args], env=clean, capture_output=True, text=True, timeout=120
        )
    else:
        r = as_user(user, [path, *args], env=env)
    assert r.returncode == 0, f"{script} {args} as {user or 'root'}: {r.stderr}"
    return json.loads(r.stdout)
