"""taskdiag.snapshot and ProcTable: the columns, the Arrow PyCapsule interface (pyarrow,
polars, pandas), numpy without copies, threads and pid selection, bad input, processes that
end while they are read, and an unreachable daemon."""

import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import taskdiag
from conftest import USER, as_user

ALL = [c[0] for c in taskdiag.columns()]


@pytest.mark.parametrize("backend", ["bpf", "procfs"])
def test_a_snapshot_has_every_column_in_pid_order(backend):
    t = taskdiag.snapshot(backend=backend)
    assert t.backend == backend
    assert t.columns == ALL and t.columns[0] == "pid"
    pids = t.column("pid")
    assert len(t) == len(pids) > 1 and pids == sorted(pids)
    assert os.getpid() in pids
    rows = t.to_dicts()
    assert len(rows) == len(t) and list(rows[0]) == ALL
    for name in ("name", "cmdline", "memory_info.rss", "uids.real"):
        assert [r[name] for r in rows] == t.column(name)
    me = rows[pids.index(os.getpid())]
    assert me["cmdline"][0] == sys.argv[0] or me["exe"] == os.path.realpath(sys.executable)
    assert me["uids.real"] == os.getuid() and me["ppid"] == os.getppid()


def test_attributes_select_columns_and_bad_names_are_refused():
    t = taskdiag.snapshot(["memory_info", "name"])
    assert t.columns == ["pid", "name"] + [f"memory_info.{f}" for f in
                                           ("rss", "vms", "shared", "text", "lib", "data", "dirty")]
    assert taskdiag.snapshot(["cpu_times.user"]).columns == ["pid", "cpu_times.user"]
    assert taskdiag.attributes()["uids"] == ["uids.real", "uids.effective", "uids.saved"]
    with pytest.raises(ValueError, match=r'"nosuch"; valid are: pid, ppid, name.*cmdline'):
        taskdiag.snapshot(["name", "nosuch"])
    with pytest.raises(TypeError):
        taskdiag.snapshot("name")
    with pytest.raises(ValueError, match="backend"):
        taskdiag.snapshot(["pid"], backend="nosuch")
    with pytest.raises(KeyError, match='no column "cmdline"'):
        t.column("cmdline")


def test_arrow_consumers_read_the_table():
    t = taskdiag.snapshot(["name", "cmdline", "memory_info", "create_time", "kthread"])
    at = pa.table(t)
    assert at.column_names == t.columns and at.num_rows == len(t)
    assert at.schema.field("pid").type == pa.uint32()
    assert at.schema.field("cmdline").type == pa.list_(pa.string())
    assert at.schema.field("create_time").type == pa.float64()
    assert at.column("memory_info.rss").to_pylist() == t.column("memory_info.rss")
    df = pl.DataFrame(t)
    assert df.shape == (len(t), len(t.columns))
    assert df["pid"].to_list() == t.column("pid")
    # Arrow strings are UTF-8: bytes that are not are replaced (a zombie's command line: null).
    assert df["cmdline"].to_list() == [
        None if c is None else
        [a.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for a in c]
        for c in t.column("cmdline")]
    pdf = pd.DataFrame.from_arrow(t)
    assert list(pdf.columns) == t.columns and len(pdf) == len(t)
    assert pdf["kthread"].tolist() == t.column("kthread")
    # What docs/python.md shows for pandas 2 (no DataFrame.from_arrow): through pyarrow.
    assert pa.table(t).to_pandas()["pid"].tolist() == pdf["pid"].tolist()
    # A stream can be taken more than once: each is the same snapshot.
    assert pa.table(t).equals(at)


def test_numpy_columns_are_views_of_the_table():
    t = taskdiag.snapshot(["memory_info", "nice", "create_time", "name"])
    a = t.to_numpy(["memory_info.rss"])["memory_info.rss"]
    b = t.to_numpy()["memory_info.rss"]
    assert a.dtype == np.uint64 and a.tolist() == t.column("memory_info.rss")
    # Two conversions share the table's memory: nothing was copied.
    assert np.shares_memory(a, b)
    assert not a.flags.writeable
    assert t.to_numpy(["nice"])["nice"].dtype == np.int32
    assert t.to_numpy(["create_time"])["create_time"].dtype == np.float64
    names = t.to_numpy(["name"])["name"]
    assert names.dtype == object and names.tolist() == t.column("name")
    # The arrays hold the table's memory through the view objects they were made from.
    assert type(a.base).__name__ == "NumpyView" and type(b.base).__name__ == "NumpyView"
    expected = t.column("memory_info.rss")
    del t
    assert a.tolist() == expected


def test_nulls_are_masked_in_numpy_and_null_in_arrow(hostile, daemon):
    code = (
        "import taskdiag, pyarrow as pa, json, sys\n"
        f"t = taskdiag.snapshot(['io_counters', 'num_fds'], pids=[{hostile['other']}, {hostile['space']}], backend='daemon')\n"
        "n = t.to_numpy()\n"
        "print(json.dumps([t.column('num_fds'), n['num_fds'].mask.tolist(),\n"
        "                  pa.table(t).column('io_counters.read_bytes').null_count]))\n"
    )
    r = as_user(USER, ["-c", code], env={"TASKDIAG_SOCKET": daemon})
    assert r.returncode == 0, r.stderr
    fds, mask, nulls = __import__("json").loads(r.stdout)
    assert fds == [None, None] and mask == [True, True] and nulls == 2


def test_threads_and_pids(hostile):
    pid = hostile["threads"]
    t = taskdiag.snapshot(["tgid", "name", "cpu_times"], threads=True, pids=[pid])
    assert sorted(t.column("pid")) == sorted(int(x) for x in os.listdir(f"/proc/{pid}/task"))
    assert set(t.column("tgid")) == {pid} and len(t) == 4
    one = taskdiag.snapshot(["name"], pids=[pid, 4_000_000])
    assert one.column("pid") == [pid]
    assert len(taskdiag.snapshot(["name"], pids=[])) == 0


def test_names_that_are_not_utf8_keep_their_bytes(hostile):
    t = taskdiag.snapshot(["name"], pids=[hostile["nonutf8"]])
    assert t.column("name") == [os.fsdecode(b"bad\xff\xfename")]
    assert pa.table(t).column("name").to_pylist() == ["bad\ufffd\ufffdname"]


@pytest.mark.parametrize("backend", ["bpf", "procfs"])
def test_a_process_that_ends_while_it_is_read_is_left_out_never_half_filled(backend):
    churn = subprocess.Popen(
        # About 20 children at a time, each living 0-50 ms: some end while they are read.
        [sys.executable, "-c",
         "import os, random, time\n"
         "end = time.monotonic() + 30\n"
         "live = 0\n"
         "while time.monotonic() < end:\n"
         "    if live < 20:\n"
         "        if os.fork() == 0:\n"
         "            time.sleep(random.random() / 20)\n"
         "            os._exit(0)\n"
         "        live += 1\n"
         "    else:\n"
         "        os.wait()\n"
         "        live -= 1\n"],
    )
    try:
        must = ["uids.real", "cpu_times.user", "memory_info.rss", "cmdline", "num_threads",
                "cpu_affinity", "num_fds"]
        deadline = time.monotonic() + 20
        while churn.pid not in taskdiag.snapshot(["ppid"], backend=backend).column("ppid"):
            assert time.monotonic() < deadline, "the churn never forked"
        seen = churned = 0
        for _ in range(30):
            t = taskdiag.snapshot(["uids", "cpu_times", "memory_info", "cmdline", "status",
                                   "num_threads", "cpu_affinity", "num_fds", "ppid"],
                                  backend=backend)
            for row in t.to_dicts():
                if row["status"] == "zombie":
                    continue
                seen += 1
                churned += row["ppid"] == churn.pid
                missing = [c for c in must if row[c] is None]
                assert not missing, f"pid {row['pid']} half-filled: {missing} ({row})"
        # Short-lived processes were read (and more were listed and ended before they were
        # read: the backends leave those out).
        assert seen > 0 and churned > 0, (seen, churned)
    finally:
        churn.kill()
        churn.wait()


def test_an_unreachable_daemon_falls_back_like_the_cli():
    missing = "/nonexistent/taskdiag.sock"
    code = (
        "import taskdiag\n"
        "print(taskdiag.snapshot(['name']).backend)\n"
        "try:\n"
        "    taskdiag.snapshot(['name'], backend='daemon')\n"
        "except OSError as e:\n"
        "    print('OSError', e)\n"
    )
    r = as_user(USER, ["-c", code], env={"TASKDIAG_SOCKET": missing})
    assert r.returncode == 0, r.stderr
    auto, err = r.stdout.splitlines()
    assert auto == "procfs"
    assert err.startswith("OSError") and missing in err


def test_the_snapshot_runs_without_the_gil():
    """Another Python thread runs while a snapshot is taken (the GIL is released): with a
    short switch interval, no gap between its ticks comes near the snapshot's length (held,
    the native call would be one gap of nearly all of it)."""
    import threading

    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.perf_counter())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    th = threading.Thread(target=tick)
    th.start()
    try:
        while not ticks:
            time.sleep(0.001)
        start = time.perf_counter()
        taskdiag.snapshot(threads=True, backend="procfs")
        end = time.perf_counter()
    finally:
        done.set()
        th.join()
        sys.setswitchinterval(interval)
    points = [start] + [x for x in ticks if start < x < end] + [end]
    gap = max(b - a for a, b in zip(points, points[1:]))
    assert gap < 0.5 * (end - start), (gap, end - start, len(points))
