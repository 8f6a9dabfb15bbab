"""A pytest plugin that runs psutil's own tests against taskdiag.psutil: psutil's Process,
process_iter, pids, pid_exists and wait_procs are replaced by taskdiag.psutil's before the
tests import them (everything else, such as system-wide functions, stays psutil's)."""

import psutil

import taskdiag.psutil as tp

for name in ("Process", "process_iter", "pids", "pid_exists", "wait_procs"):
    setattr(psutil, name, getattr(tp, name))
