"""A pytest plugin that runs psutil's own tests against taskdiag.psutil (see taskdiag_swap)
where $TASKDIAG_PSUTIL_SWAP is set: the swap is applied when the plugin loads, before the tests
import psutil, again before each test's setup and call, and after every importlib.reload of
psutil (psutil's test_linux reloads it, which would restore psutil's own Process). Every
result is recorded, each subtest's too, in the JSON file $TASKDIAG_SUITE_RESULTS: {"results": {"id":
outcome}, "subtest_reports": {outcome: count}, "why": {"id": a failure's report}}, outcome "passed", "failed" or "skipped", a
subtest's id being its test's followed by its description (the parameters that vary from run
to run left out, so that one id may stand for several of pytest's subtest reports)."""

import gc
import importlib
import json
import os

import psutil
import pytest
import taskdiag_swap

# Without $TASKDIAG_PSUTIL_SWAP, psutil itself runs (the results are recorded all the same).
SWAP = bool(os.environ.get("TASKDIAG_PSUTIL_SWAP"))
if SWAP:
    taskdiag_swap.swap(psutil)

try:
    import psleak
except ImportError:
    psleak = None


class _Measured:
    """psutil's own Process of this process, as psleak measures it (memory, descriptors,
    threads): what is measured is not what measures. taskdiag's helper threads are not
    counted: a read of a process's memory runs on one (taskdiag-mm, one per calling thread,
    started when none is alive, ended 250 ms after its last read: bounded, not leaked), so
    psleak's count of threads before and after one call would move with the clock."""

    def __init__(self, proc):
        self._proc = proc

    def __getattr__(self, name):
        return getattr(self._proc, name)

    def threads(self):
        out = []
        for t in self._proc.threads():
            try:
                with open(f"/proc/self/task/{t.id}/comm") as f:
                    if f.read().strip() == "taskdiag-mm":
                        continue
            except OSError:
                continue  # ended meanwhile
            out.append(t)
        return out

    def num_threads(self):
        return len(self.threads())


if SWAP and psleak is not None:
    psleak.thisproc = _Measured(taskdiag_swap.tp._Psutil.process())

_reload = importlib.reload


def _reload_and_swap(module):
    module = _reload(module)
    if SWAP and getattr(module, "__name__", None) == "psutil":
        taskdiag_swap.swap(module)
    return module


importlib.reload = _reload_and_swap


# psutil's memory-leak tests (test_memleaks.py, psleak) call each function 200 times, then
# half as many again on each of up to 30 retries while memory moves: $TASKDIAG_LEAK_TIMES
# calls instead (each test's descriptor and thread checks are unchanged).
LEAK_TIMES = int(os.environ.get("TASKDIAG_LEAK_TIMES") or 0)
if LEAK_TIMES and psleak is not None:
    psleak.MemoryLeakTestCase.times = LEAK_TIMES
    psleak.MemoryLeakTestCase.warmup_times = max(1, LEAK_TIMES // 10)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if SWAP:
        taskdiag_swap.swap(psutil)
        if psleak is not None and isinstance(item.cls, type) and issubclass(
            item.cls, psleak.MemoryLeakTestCase
        ):
            # psleak counts descriptors before and after one call, before its warm-up:
            # taskdiag's backend, kept open between calls, is opened first (as by the first
            # of a program's calls), else that call's opening would count as a leak.
            taskdiag_swap.tp.pids()
    if psleak is not None and isinstance(item.cls, type) and issubclass(
        item.cls, psleak.MemoryLeakTestCase
    ):
        # psleak collects garbage before and after each run of calls, which walks every
        # object of this process (pytest's, the suite's: ~40 ms a time, two thirds of
        # test_memleaks.py's time): those made before the test are left out of it.
        gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if SWAP:
        taskdiag_swap.swap(psutil)


_results = {}
# Every subtest report, before ids are merged (pytest's own count of subtests).
_subtests = {}
# A subtest's parameters that name it; the others (a process's str(), a user) vary by run.
_NAMING = ("name", "prio")


# A failure's report (its end), by id: what the gate shows of a result nobody expected.
_why = {}


def _record(key, outcome, report=None):
    if outcome == "failed" and report is not None and key not in _why:
        _why[key] = str(report.longrepr)[-1500:]
    # A test is failed if any of its phases failed, skipped if one skipped and none failed.
    before = _results.get(key)
    if before == "failed" or (before == "skipped" and outcome == "passed"):
        return
    _results[key] = outcome


def pytest_runtest_logreport(report):
    ctx = getattr(report, "context", None)
    if ctx is not None and hasattr(ctx, "kwargs"):
        parts = [] if ctx.msg is None else [str(ctx.msg)]
        parts += [f"{k}={v}" for k, v in (ctx.kwargs or {}).items() if k in _NAMING]
        _record(f"{report.nodeid} [{', '.join(parts)}]", report.outcome, report)
        _subtests[report.outcome] = _subtests.get(report.outcome, 0) + 1
        return
    if report.when == "call" or report.outcome != "passed":
        _record(report.nodeid, report.outcome, report)


def pytest_collectreport(report):
    if report.failed:
        _record(report.nodeid, "failed", report)


def pytest_sessionfinish(session):
    path = os.environ.get("TASKDIAG_SUITE_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump({"results": _results, "subtest_reports": _subtests, "why": _why}, f,
                      indent=0, sort_keys=True)
