"""Compares taskdiag.psutil with psutil itself, in this process (as root or as a test user).

``parity.py BACKEND PIDS_JSON`` checks, for each pid: the bulk answer (process_iter's info),
Process.as_dict, and every method called alone (its value, or which exception it raises).
``parity.py BACKEND all`` checks the attributes that do not change while a process lives for
every process both see. Prints JSON: the backend that answered, how many values were
compared, and every mismatch as [pid, what, ours, psutil's] (reprs).
"""

import json
import os
import sys

import psutil

import taskdiag
import taskdiag.psutil as tp

# Attributes that do not change while a process lives (for "all": processes the test does
# not control).
STABLE = ["pid", "ppid", "create_time", "uids", "gids", "username", "exe", "terminal"]


def shape(maps):
    """memory_maps' paths and sizes (or the outcome, for a method's)."""
    if isinstance(maps, tuple) and maps and maps[0] == "value":
        return ("value", shape(maps[1]))
    if isinstance(maps, list):
        return [(m.path, m.size) for m in maps]
    if hasattr(maps, "uss"):
        return tuple(maps)[:7] + (maps.swap,)
    return maps


def outcome(f):
    try:
        return ("value", f())
    except psutil.ZombieProcess:
        return ("ZombieProcess", None)
    except psutil.NoSuchProcess:
        return ("NoSuchProcess", None)
    except psutil.AccessDenied:
        return ("AccessDenied", None)
    except Exception as e:  # noqa: BLE001 - reported as a mismatch
        return ("error", f"{type(e).__name__}: {e}")


def main():
    backend, which = sys.argv[1], sys.argv[2]
    tp.BACKEND = backend
    answered = taskdiag.snapshot(["pid"], backend=backend).backend
    # Every attribute (open_files, net_connections and ionice are psutil's own Process's,
    # through taskdiag.psutil's checks of the process's identity).
    attrs = sorted(psutil.Process().as_dict().keys() - {"cpu_percent"})
    me = os.getpid()
    mismatches, checked = [], 0

    def same(pid, what, ours, theirs):
        nonlocal checked
        checked += 1
        if "memory_maps" in what or "memory_full_info" in what:
            # Pss, uss and the shared counts move whenever another process maps the same
            # pages (this very script does): the mappings themselves must agree.
            ours, theirs = shape(ours), shape(theirs)
        if ours != theirs:
            mismatches.append([pid, what, repr(ours), repr(theirs)])

    if which == "all":
        # Read before and after psutil's read: a process that changed in between (executed,
        # was reparented, ended and its pid was reused) is not compared.
        before = {p.pid: dict(p.info) for p in tp.process_iter(STABLE, ad_value="AD")}
        theirs = {}
        for pid in before:
            try:
                theirs[pid] = psutil.Process(pid).as_dict(STABLE, ad_value="AD")
            except psutil.NoSuchProcess:
                continue
        tp.process_iter.cache_clear()
        after = {p.pid: p.info for p in tp.process_iter(STABLE, ad_value="AD")}
        for pid, info in before.items():
            if pid == me or pid not in theirs or after.get(pid) != info:
                continue
            for a in STABLE:
                same(pid, a, info[a], theirs[pid][a])
    else:
        pids = json.loads(which)
        bulk = {p.pid: p.info for p in tp.process_iter(attrs, ad_value="AD")}
        for pid in pids:
            theirs = psutil.Process(pid).as_dict(attrs, ad_value="AD")
            if pid not in bulk:
                mismatches.append([pid, "process_iter", "missing", "present"])
                continue
            ours = tp.Process(pid)
            mine = ours.as_dict(attrs, ad_value="AD")
            for a in attrs:
                same(pid, f"process_iter {a}", bulk[pid][a], theirs[a])
                same(pid, f"as_dict {a}", mine[a], theirs[a])
                ref = psutil.Process(pid)
                o, t = outcome(getattr(ours, a)), outcome(getattr(ref, a))
                if a == "pid":
                    o, t = ("value", ours.pid), ("value", ref.pid)
                same(pid, f"{a}()", o, t)
            # Single calls raise psutil's exception classes (subclasses of them).
            for m in ("exe", "cmdline", "environ", "cwd", "io_counters", "num_fds"):
                try:
                    getattr(ours, m)()
                except psutil.Error as e:
                    same(pid, f"{m}() raises a psutil.Error", True, isinstance(e, psutil.Error))
                except tp.Error as e:
                    mismatches.append([pid, f"{m}() raises", repr(e), "a psutil.Error"])
    json.dump({"backend": answered, "checked": checked, "mismatches": mismatches}, sys.stdout)


if __name__ == "__main__":
    main()
