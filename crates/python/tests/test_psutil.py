"""taskdiag.psutil against psutil itself, on the hostile fixture: every attribute, in bulk
(process_iter), through as_dict and called alone, as root (BPF and /proc) and as an
unprivileged user (taskdiagd and /proc): the same values, and AccessDenied, ZombieProcess and
None exactly where psutil gives them."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import taskdiag.psutil as tp
from conftest import USER, run_script

ROLES = ["space", "parens", "newline", "nonutf8", "long", "bigargv", "title", "threads",
         "zombie", "other", "fixture"]


def check(result, backend):
    assert result["backend"] == backend, result
    assert result["checked"] > 0
    assert result["mismatches"] == [], "\n".join(map(str, result["mismatches"]))


@pytest.mark.parametrize("backend", ["bpf", "procfs"])
def test_root_sees_what_psutil_sees(hostile, backend):
    pids = [hostile[r] for r in ROLES]
    check(run_script(None, "parity.py", backend, json.dumps(pids)), backend)
    check(run_script(None, "parity.py", backend, "all"), backend)


@pytest.mark.parametrize("backend", ["daemon", "procfs"])
def test_a_user_sees_what_psutil_shows_that_user(hostile, daemon, backend):
    pids = [hostile[r] for r in ROLES]
    env = {"TASKDIAG_SOCKET": daemon}
    r = run_script(USER, "parity.py", backend, json.dumps(pids), env=env)
    check(r, backend)
    check(run_script(USER, "parity.py", backend, "all", env=env), backend)


def test_the_fixture_is_hostile(hostile):
    """The fixture does what the parity tests rely on (else they would compare little)."""
    p = psutil.Process
    assert p(hostile["space"]).name() == "with space"
    assert p(hostile["newline"]).name() == "new\nline"
    assert p(hostile["long"]).name() == "taskdiag-fixture-long-name-sleeper"
    assert len(" ".join(p(hostile["bigargv"]).cmdline())) > 60_000
    assert p(hostile["title"]).cmdline()[:5] == ["fixture:", "proc", "title", "with", "spaces"]
    assert p(hostile["zombie"]).status() == psutil.STATUS_ZOMBIE
    assert p(hostile["threads"]).num_threads() == 4
    assert p(hostile["other"]).username() == "taskdiag-other"


def test_names_and_command_lines_are_psutils(hostile):
    assert tp.Process(hostile["long"]).name() == "taskdiag-fixture-long-name-sleeper"
    assert tp.Process(hostile["nonutf8"]).name() == psutil.Process(hostile["nonutf8"]).name()
    assert tp.Process(hostile["title"]).cmdline() == psutil.Process(hostile["title"]).cmdline()
    with pytest.raises(tp.ZombieProcess) as e:
        tp.Process(hostile["zombie"]).cmdline()
    assert isinstance(e.value, psutil.ZombieProcess)
    assert e.value.pid == hostile["zombie"] and e.value.ppid == hostile["fixture"]


def test_exceptions_are_caught_by_psutils_except_clauses():
    for ours, theirs in [(tp.NoSuchProcess, psutil.NoSuchProcess),
                         (tp.ZombieProcess, psutil.NoSuchProcess),
                         (tp.ZombieProcess, psutil.ZombieProcess),
                         (tp.AccessDenied, psutil.AccessDenied),
                         (tp.TimeoutExpired, psutil.TimeoutExpired),
                         (tp.AccessDenied, psutil.Error)]:
        assert issubclass(ours, theirs), (ours, theirs)
    e = tp.ZombieProcess(5, "x", 1)
    assert (e.pid, e.name, e.ppid) == (5, "x", 1)
    assert str(e) == str(psutil.ZombieProcess(5, "x", 1))
    assert str(tp.TimeoutExpired(3, 7, "y")) == str(psutil.TimeoutExpired(3, 7, "y"))


def test_a_missing_pid_and_bad_arguments():
    pid = 4_000_000  # above any pid_max
    with pytest.raises(tp.NoSuchProcess) as e:
        tp.Process(pid)
    assert e.value.pid == pid
    with pytest.raises(psutil.NoSuchProcess):
        tp.Process(pid)
    with pytest.raises(ValueError):
        tp.Process(-1)
    with pytest.raises(TypeError):
        tp.Process("1")
    assert not tp.pid_exists(pid)
    assert tp.pid_exists(os.getpid())
    with pytest.raises(ValueError, match="invalid attr name 'nosuch'.*valid are: .*cmdline"):
        list(tp.process_iter(["name", "nosuch"]))
    with pytest.raises(ValueError, match="invalid attr name"):
        tp.Process().as_dict(["nosuch"])
    with pytest.raises(ValueError, match="timeout must be a positive integer, got -1"):
        tp.wait_procs([tp.Process()], timeout=-1)
    with pytest.raises(TypeError, match="is not a callable"):
        tp.wait_procs([tp.Process()], callback=1)


def test_process_iter_matches_psutils_listing():
    ours = [p.pid for p in tp.process_iter()]
    assert ours == sorted(ours)
    theirs = set(psutil.pids())
    # Processes start and end between the two reads: the long-lived ones agree.
    stable = [p for p in ours if p in theirs]
    assert len(stable) > 0.9 * len(ours)
    again = list(tp.process_iter())
    same = {p.pid: p for p in again}
    # Process objects are kept across calls while their process lives.
    first = {p.pid: p for p in tp.process_iter()}
    assert any(first[pid] is same[pid] for pid in first.keys() & same.keys())


def test_family_and_identity(hostile):
    fixture = tp.Process(hostile["fixture"])
    kids = {p.pid for p in fixture.children()}
    theirs = {p.pid for p in psutil.Process(hostile["fixture"]).children()}
    assert kids == theirs and hostile["zombie"] in kids
    me = tp.Process()
    assert me.parent().pid == os.getppid()
    assert tp.Process(hostile["space"]).parent() == fixture
    assert tp.Process(hostile["space"]) == tp.Process(hostile["space"])
    assert hash(fixture) == hash(tp.Process(hostile["fixture"]))
    assert all(p.pid in {c.pid for c in fixture.children(recursive=True)} for p in fixture.children())
    assert fixture.is_running()
    assert tp.Process(hostile["zombie"]).is_running()  # as psutil: a zombie still runs


def test_signals_go_by_pidfd_and_a_reused_pid_is_never_signalled():
    child = subprocess.Popen(["sleep", "1000"])
    p = tp.Process(child.pid)
    assert p.is_running()
    p.terminate()
    assert p.wait(timeout=10) == -signal.SIGTERM
    assert not p.is_running()
    with pytest.raises(tp.NoSuchProcess):
        p.kill()
    # A Process whose pid now names another process (its start time differs) refuses, and
    # its wait() neither waits for nor reaps the process that has the pid now.
    other = subprocess.Popen(["sleep", "1000"])
    try:
        stale = tp.Process(other.pid)
        stale._ident = (stale.pid, stale._start - 1.0)  # an earlier process of that pid
        with pytest.raises(tp.NoSuchProcess):
            stale.kill()
        assert other.poll() is None
        for m in (stale.name, stale.threads, stale.memory_maps, stale.cpu_times):
            with pytest.raises(tp.NoSuchProcess):
                m()
        assert stale.wait(timeout=5) is None
        assert other.poll() is None and tp.Process(other.pid).is_running()
    finally:
        other.kill()
        other.wait()


def test_wait_times_out_and_reaps_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"])
    p = tp.Process(child.pid)
    with pytest.raises(tp.TimeoutExpired) as e:
        p.wait(timeout=0.01)
    assert isinstance(e.value, psutil.TimeoutExpired) and e.value.seconds == 0.01
    assert p.wait(timeout=30) == 3
    gone, alive = tp.wait_procs([p], timeout=1)
    assert [g.pid for g in gone] == [child.pid] and alive == []


def test_cpu_percent_follows_psutils_definition():
    """The CPU time the process took between two calls over the wall time between them, in %
    of one CPU (psutil's scale): checked against its stat file read around the calls, so a
    busy machine, which gives the burner less than a CPU, changes both alike."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    tick = os.sysconf("SC_CLK_TCK")

    def used():
        with open(f"/proc/{burner.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return time.monotonic(), (int(fields[11]) + int(fields[12])) / tick

    def around(call):
        (t0, c0), got, (t1, c1) = used(), call(), used()
        return got, 100 * (c1 - c0) / (t1 - t0), t1 - t0

    try:
        p = tp.Process(burner.pid)
        t0, c0 = used()
        assert p.cpu_percent() == 0.0  # the first call has nothing to compare with
        time.sleep(0.5)
        got = p.cpu_percent()
        t1, c1 = used()
        # Two ticks of rounding at each end, over the interval.
        slack = 100 * 4 / tick / (t1 - t0) + 5
        assert abs(got - 100 * (c1 - c0) / (t1 - t0)) <= slack, (got, c1 - c0, t1 - t0)
        got, want, took = around(lambda: p.cpu_percent(interval=0.5))
        assert abs(got - want) <= 100 * 4 / tick / took + 5, (got, want, took)
        assert got > 0
    finally:
        burner.kill()
        burner.wait()


def test_a_process_that_ends_raises_no_such_process():
    child = subprocess.Popen(["sleep", "1000"])
    p = tp.Process(child.pid)
    child.kill()
    child.wait()
    for m in (p.name, p.cmdline, p.memory_info, p.status):
        with pytest.raises(tp.NoSuchProcess):
            m()
    assert not tp.pid_exists(child.pid) or tp.Process(child.pid)._start != p._start


def test_oneshot_reads_once_and_identity_is_always_read_fresh(hostile, monkeypatch):
    calls = []

    def counting(real):
        def counted(*args):
            calls.append(args)
            return real(*args)
        return counted

    for name in ("snapshot", "task"):
        monkeypatch.setattr(tp._taskdiag, name, counting(getattr(tp._taskdiag, name)))
    p = tp.Process(hostile["space"])
    calls.clear()
    with p.oneshot():
        a = (p.name(), p.cpu_times(), p.memory_info(), p.uids(), p.status())
        assert len(calls) == 1
    assert a == (p.name(), p.cpu_times(), p.memory_info(), p.uids(), p.status())
    # Inside oneshot, whether the process still runs is asked of the system, not the read.
    child = subprocess.Popen(["sleep", "1000"])
    q = tp.Process(child.pid)
    with q.oneshot():
        child.kill()
        child.wait()
        assert not q.is_running()
        with pytest.raises(tp.NoSuchProcess):
            q.kill()


def test_memory_maps_are_psutils(hostile):
    """Every mapping of a sleeping process, with the counters that do not depend on which
    other processes share its pages (pss and the shared/private split do)."""
    pid = hostile["long"]

    def fixed(maps):
        return [(m.path, m.size, m.rss, m.anonymous, m.swap, getattr(m, "addr", None),
                 getattr(m, "perms", None)) for m in maps]

    for grouped in (True, False):
        ours = tp.Process(pid).memory_maps(grouped=grouped)
        theirs = psutil.Process(pid).memory_maps(grouped=grouped)
        assert len(ours) > 5 and fixed(ours) == fixed(theirs)
        assert type(ours[0]).__name__ == type(theirs[0]).__name__
    with pytest.raises(tp.ZombieProcess):
        tp.Process(hostile["zombie"]).memory_maps()
    if os.path.exists("/proc/2/stat"):  # kthreadd: no address space
        assert tp.Process(2).memory_maps() == psutil.Process(2).memory_maps() == []


def test_threads_have_their_own_times():
    """A leader's entry in threads() is its own thread's time, not its process's (psutil reads
    /proc/PID/task/TID/stat): here a second thread burns the CPU while the leader sleeps."""
    burner = subprocess.Popen([sys.executable, "-c",
                               "import threading, time\n"
                               "def burn():\n"
                               "    while True: pass\n"
                               "threading.Thread(target=burn, daemon=True).start()\n"
                               "time.sleep(1000)\n"])
    try:
        p = tp.Process(burner.pid)
        deadline = time.monotonic() + 20
        while p.cpu_times().user < 0.5:
            assert time.monotonic() < deadline, "the burner did not burn"
            time.sleep(0.05)
        ours = {t.id: t for t in p.threads()}
        theirs = {t.id: t for t in psutil.Process(burner.pid).threads()}
        assert ours.keys() == theirs.keys() and len(ours) == 2
        leader, worker = ours[burner.pid], next(t for i, t in ours.items() if i != burner.pid)
        assert leader.user_time < 0.3 <= worker.user_time, ours
        assert abs(leader.user_time - theirs[burner.pid].user_time) <= 0.05
    finally:
        burner.kill()
        burner.wait()


def test_a_thread_id_is_a_process_as_psutil_reads_it():
    """psutil.Process(TID) reads /proc/TID, which shows the thread's own name, state and start
    but its process's counters: the same answers here, threads() lists the whole process's,
    and pid_exists() and process_iter() still know only processes."""
    holder = subprocess.Popen([sys.executable, "-c",
                               "import threading, time\n"
                               "def burn():\n"
                               "    t = time.time()\n"
                               "    while time.time() - t < 0.3: pass\n"
                               "    time.sleep(1000)\n"
                               "threading.Thread(target=burn, name='worker').start()\n"
                               "time.sleep(1000)\n"])
    try:
        deadline = time.monotonic() + 20
        while len(os.listdir(f"/proc/{holder.pid}/task")) < 2:
            assert time.monotonic() < deadline, "the thread did not start"
            time.sleep(0.05)
        tid = max(int(t) for t in os.listdir(f"/proc/{holder.pid}/task"))
        assert tid != holder.pid
        ours, theirs = tp.Process(tid), psutil.Process(tid)
        for attr in ["name", "status", "ppid", "create_time", "num_threads", "cmdline",
                     "uids", "nice"]:
            assert getattr(ours, attr)() == getattr(theirs, attr)(), attr
        assert ours.pid == tid
        assert ours.memory_info().rss == theirs.memory_info().rss
        assert abs(ours.cpu_times().user - theirs.cpu_times().user) <= 0.05
        assert sorted(t.id for t in ours.threads()) == sorted(t.id for t in theirs.threads())
        assert ours.is_running()
        assert tp.pid_exists(tid) == psutil.pid_exists(tid)
        assert tid not in {p.pid for p in tp.process_iter()}
    finally:
        holder.kill()
        holder.wait()
