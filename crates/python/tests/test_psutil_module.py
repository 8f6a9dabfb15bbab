"""taskdiag.psutil as psutil's whole module: psutil's names passed through (lazily: importing
taskdiag.psutil does not import psutil), an ImportError naming psutil without it, Popen,
psutil's own Process for the methods no taskdiag group carries (never for a reused pid), a
thread id's memory maps, and the caller's own descriptors and mappings as psutil sees them
under the BPF backend."""

import os
import subprocess
import sys
import textwrap
import threading

import psutil
import pytest

import taskdiag.psutil as tp


def run(code, env=None):
    """Runs ``code`` in a fresh interpreter (root's environment, no TASKDIAG_ variable but
    ``env``); its stdout."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TASKDIAG_")}
    clean.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=clean,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_name_of_psutil_is_there_and_psutil_is_imported_only_when_one_is_asked_for():
    out = run("""
        import sys
        import taskdiag.psutil as tp
        assert "psutil" not in sys.modules, "imported with taskdiag.psutil"
        tp.Process().name(), tp.pids(), list(tp.process_iter(["name"]))
        try:
            tp.Process(4_000_000)
        except tp.NoSuchProcess:
            pass
        assert "psutil" not in sys.modules, "imported by taskdiag's own API"
        n = tp.cpu_count()
        assert "psutil" in sys.modules
        import psutil
        assert n == psutil.cpu_count()
        print("ok")
    """)
    assert out.strip() == "ok"
    ours = set(vars(tp))
    public = [n for n in dir(psutil) if not n.startswith("_")] + ["__version__"]
    assert len(public) >= 111
    for name in public:
        value = getattr(tp, name)
        if name in ours:
            continue
        assert value is getattr(psutil, name), name
    assert tp.__version__ == psutil.__version__ and tp.version_info == psutil.version_info
    assert tp.RLIMIT_NOFILE == psutil.RLIMIT_NOFILE and tp.CONN_LISTEN == psutil.CONN_LISTEN
    assert set(psutil.__all__) <= set(dir(tp)) and set(psutil.__all__) <= set(tp.__all__)
    assert tp.Popen is not psutil.Popen and issubclass(tp.Popen, tp.Process)
    from taskdiag.psutil import virtual_memory, IOPRIO_CLASS_BE  # noqa: F401
    with pytest.raises(AttributeError):
        tp.no_such_name  # noqa: B018


def test_without_psutil_its_names_raise_an_import_error_naming_it():
    out = run("""
        import sys
        sys.modules["psutil"] = None  # as if it were not installed: import psutil fails
        import taskdiag.psutil as tp
        for get in (lambda: tp.cpu_count, lambda: hasattr(tp, "virtual_memory"),
                    lambda: tp.__version__, lambda: tp.Process().open_files(),
                    lambda: tp.Process().ionice(), lambda: tp.Process().net_connections(),
                    lambda: list(tp.process_iter(["open_files"]))):
            try:
                get()
            except ImportError as e:
                assert isinstance(e, tp.PsutilNotInstalled), type(e)
                assert "psutil" in str(e) and "pip install psutil" in str(e), str(e)
            else:
                raise AssertionError("no ImportError")
        try:
            from taskdiag.psutil import cpu_count
        except ImportError as e:
            assert "pip install psutil" in str(e), str(e)
        try:
            tp.no_such_name
        except AttributeError as e:
            assert not isinstance(e, ImportError)
        # What taskdiag carries works without it.
        me = tp.Process()
        assert me.name() and me.rlimit(tp.RLIMIT_NOFILE) and tp.LINUX and tp.STATUS_ZOMBIE
        d = me.as_dict()
        assert "name" in d and "open_files" not in d, sorted(d)
        with tp.Popen(["true"]) as p:
            assert p.wait() == 0
        try:
            tp.Process(4_000_000)
        except tp.NoSuchProcess as e:
            assert str(e) == "process PID not found (pid=4000000)", str(e)
        print("ok")
    """)
    assert out.strip() == "ok"


def test_the_exceptions_become_psutils_when_psutil_is_imported_later():
    out = run("""
        import taskdiag.psutil as tp
        import psutil
        try:
            tp.Process(4_000_000)
        except psutil.NoSuchProcess as e:
            assert isinstance(e, tp.NoSuchProcess)
            print("ok")
    """)
    assert out.strip() == "ok"


def test_popen_is_a_process_and_a_subprocess():
    with tp.Popen([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as p:
        assert isinstance(p, tp.Process)
        assert p.name().startswith("python") and p.ppid() == os.getpid()
        out, _ = p.communicate("hi")
        assert out.strip() == "HI" and p.returncode == 0 and p.wait() == 0
    q = tp.Popen(["sleep", "1000"])
    assert q.poll() is None and q.is_running()
    q.kill()
    assert q.wait(timeout=10) == -9 and q.returncode == -9
    assert "communicate" in dir(q) and "memory_maps" in dir(q)
    with pytest.raises(AttributeError):
        q.no_such_attribute  # noqa: B018


def test_open_files_connections_and_ionice_are_psutils_and_never_for_a_reused_pid(tmp_path):
    path = tmp_path / "open"
    path.write_text("x")
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys, time\n"
         f"f = open({str(path)!r})\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print('ready', flush=True); time.sleep(1000)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        ours, theirs = tp.Process(child.pid), psutil.Process(child.pid)
        assert ours.open_files() == theirs.open_files() and str(path) in {
            f.path for f in ours.open_files()}
        assert ours.net_connections() == theirs.net_connections() != []
        assert ours.ionice() == theirs.ionice()
        ours.ionice(psutil.IOPRIO_CLASS_IDLE)
        assert theirs.ionice().ioclass == psutil.IOPRIO_CLASS_IDLE
        d = ours.as_dict(["open_files", "net_connections", "ionice"])
        assert d == theirs.as_dict(["open_files", "net_connections", "ionice"])
        # A Process whose pid now names another process (an earlier start time) answers
        # nothing of the new one's.
        stale = tp.Process(child.pid)
        stale._ident = (stale.pid, stale._start - 1.0)
        for m in (stale.open_files, stale.net_connections, stale.ionice):
            with pytest.raises(tp.NoSuchProcess):
                m()
        with pytest.raises(tp.NoSuchProcess):
            stale.ionice(psutil.IOPRIO_CLASS_BE, 0)
        assert theirs.ionice().ioclass == psutil.IOPRIO_CLASS_IDLE
    finally:
        child.kill()
        child.wait()
    with pytest.raises(tp.NoSuchProcess):
        ours.open_files()


def test_a_thread_ids_memory_maps_are_its_processs():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        tid = t.native_id
        assert tid != os.getpid()
        ours, theirs = tp.Process(tid), psutil.Process(tid)
        paths = {m.path for m in ours.memory_maps()}
        assert paths == {m.path for m in theirs.memory_maps()} and len(paths) > 5
        assert ours.memory_full_info().rss > 0
        assert ours.as_dict()["memory_maps"]
    finally:
        stop.set()
        t.join()


def test_the_callers_own_descriptors_and_maps_are_its_programs_under_bpf():
    """taskdiag's backend, kept open between calls, is descriptors and mappings of this
    process (BPF programs and maps, an anon_inode:bpf-map): the caller's own num_fds() and
    memory_maps() are what psutil reports of a program that never used taskdiag."""
    out = run("""
        import os, psutil
        before = psutil.Process().num_fds()
        import taskdiag
        import taskdiag.psutil as tp
        assert taskdiag.snapshot(["pid"], backend="bpf").backend == "bpf"
        list(tp.process_iter(["name", "num_fds"]))
        me = tp.Process()
        assert me.num_fds() == psutil.Process().num_fds() == before
        list(tp.process_iter(["name"]))
        ours = {m.path for m in me.memory_maps()}
        theirs = {m.path for m in psutil.Process().memory_maps()}
        assert ours == theirs and not any("bpf" in p for p in ours), ours ^ theirs
        list(tp.process_iter(["name"]))
        assert me.as_dict(["num_fds"])["num_fds"] == before
        list(tp.process_iter(["name"]))
        iter_fds = {p.pid: p.info["num_fds"] for p in tp.process_iter(["num_fds"])}
        assert iter_fds[os.getpid()] == before, (iter_fds[os.getpid()], before)
        print("ok")
    """, env={"TASKDIAG_BACKEND": "bpf"})
    assert out.strip() == "ok"


def test_no_method_is_left_unimplemented():
    me = tp.Process()
    d = me.as_dict()
    assert d.keys() == psutil.Process().as_dict().keys()
    for name in dir(tp.Process):
        # Not the signals, nor connections() (net_connections() under its deprecated name).
        if name.startswith("_") or name in ("send_signal", "suspend", "resume", "terminate",
                                            "kill", "wait", "connections"):
            continue
        m = getattr(me, name)
        if callable(m):
            try:
                m()
            except TypeError:
                pass  # needs an argument (rlimit)
