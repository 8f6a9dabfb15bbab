"""Every process on the machine as columns, in one request.

taskdiag reads tasks through eBPF task iterators (root, or CAP_BPF + CAP_PERFMON), through the
taskdiagd service (other users: BPF speed, exactly what their own /proc would show them), or
from /proc, and hands them to Python as columns with psutil's names and units::

    import taskdiag
    t = taskdiag.snapshot(["pid", "ppid", "name", "username", "cmdline", "memory_info"])
    len(t)                      # processes
    t.column("name")            # a list
    t.to_dicts()                # a list of dicts, one per process
    t.to_numpy()["memory_info.rss"]   # numpy, without copying
    polars.DataFrame(t)         # or pyarrow.table(t), pandas.DataFrame.from_arrow(t)
    pyarrow.table(t).to_pandas()      # pandas 2 (DataFrame.from_arrow is pandas 3's)

A psutil program switches with ``import taskdiag.psutil as psutil`` (see taskdiag.psutil).

Columns are named after psutil's attributes; the fields of an attribute psutil returns as a
named tuple are columns of their own, ``cpu_times.user``, ``memory_info.rss``. ``columns()``
lists every column with its type and meaning, ``attributes()`` every attribute with its
columns. A value /proc would refuse the caller, or psutil would raise ZombieProcess for, is
null (None). A process that exits while it is read is left out, never half-filled.
"""

from ._taskdiag import ProcTable, attributes, columns
from ._taskdiag import snapshot as _snapshot

__all__ = ["ProcTable", "attributes", "columns", "snapshot"]


def snapshot(attrs=None, threads=False, pids=None, backend="auto"):
    """Take one look at the tasks and return it as a ProcTable, one row per task in pid order.

    attrs
        Attribute or column names (``"cpu_times"`` or ``"cpu_times.user"``; see
        ``attributes()``); None for every column. ``pid`` is always the first column. An
        unknown name raises ValueError listing the valid ones.
    threads
        One row per thread instead of per process (``pid`` is then the thread's id, ``tgid``
        its process's), each with its own counters (a leader's CPU times are its own, as in
        /proc/PID/task/PID/stat, not its process's).
    pids
        Only these processes (with ``threads``, every thread of each); a pid that does not
        exist is left out.
    backend
        ``"auto"`` (BPF programs already loaded, else taskdiagd if it answers, else /proc on a
        small host, else BPF loaded now, else /proc), ``"bpf"``, ``"daemon"`` or ``"procfs"``.
        ``ProcTable.backend`` says which one answered.

    The GIL is released while the tasks are read. Raises OSError when the backend cannot be
    opened or read (a forced backend this caller may not use, for one).
    """
    if isinstance(attrs, (str, bytes)):
        raise TypeError(f"attrs must be a list of names, not {type(attrs).__name__}")
    if attrs is not None:
        attrs = list(attrs)
    if pids is not None:
        pids = [int(p) for p in pids]
    return _snapshot(attrs, bool(threads), pids, backend)
