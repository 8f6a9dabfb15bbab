"""The swap that runs a psutil program against taskdiag.psutil: psutil's process API, in the
psutil module itself, replaced by taskdiag.psutil's (its Process, Popen, process_iter, pids,
pid_exists, wait_procs, and process_iter's cache, ``_pmap``, which psutil's tests read and
clear). Everything else (system-wide functions, the exceptions, which taskdiag's subclass,
the constants) stays psutil's."""

import os
import sys

import taskdiag.psutil as tp

NAMES = ("Process", "Popen", "process_iter", "pids", "pid_exists", "wait_procs")


def swap(psutil):
    """Replaces ``psutil``'s process API with taskdiag.psutil's (again after a reload, which
    restores psutil's own)."""
    own = psutil.Process
    if not (isinstance(own, type) and issubclass(own, tp.Process)):
        # psutil's own Process (a reload makes a new one), for what taskdiag.psutil asks of
        # psutil itself (open_files, net_connections, ionice): taken before it is replaced.
        tp._bind_psutil(psutil, own)
    for name in NAMES:
        setattr(psutil, name, getattr(tp, name))
    psutil._pmap = tp._cache
    log = os.environ.get("TASKDIAG_SWAP_LOG")
    if log and not getattr(swap, "logged", False):
        # Which programs ran through the swap (the gate checks psutil's scripts did).
        swap.logged = True
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {os.path.basename(sys.argv[0]) if sys.argv else '?'}\n")
