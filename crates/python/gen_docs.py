"""Renders docs/python.md from the package's own docstrings and column table.

    target/python/bin/python crates/python/gen_docs.py > docs/python.md

tests/test_docs.py checks that docs/python.md is what this prints.
"""

import inspect

import taskdiag
import taskdiag.psutil as tp

INTRO = """\
# Python: `import taskdiag`

Every process as columns, in one request through taskdiag's backends (BPF, taskdiagd,
/proc), and a psutil-compatible layer. Built as one abi3 wheel for CPython 3.9 and later;
no runtime dependency (numpy only for `to_numpy()`).

```sh
make python                      # builds the wheel, installs it into target/python
target/python/bin/python -c 'import taskdiag; print(taskdiag.snapshot())'
make python-install              # or into the python3 on PATH (pip)
```

This file is generated from the package's docstrings (`crates/python/gen_docs.py`); a test
keeps it current.
"""

SIDE_BY_SIDE = """\
## From psutil to taskdiag

`import taskdiag.psutil as psutil` keeps a psutil program's code; the columnar API is what to
move to where many processes are read.

| psutil | taskdiag.psutil (same code) | taskdiag (columns) |
|---|---|---|
| `psutil.process_iter(['pid', 'name'])` | the same: one request for every process | `taskdiag.snapshot(['pid', 'name'])` |
| `p.info['name']` for each `p` | the same | `t.column('name')`, `polars.DataFrame(t)['name']` |
| `p.as_dict(attrs, ad_value=x)` | the same | `t.to_dicts()` (None where psutil gives `ad_value`) |
| `p.cpu_times().user` | the same | column `cpu_times.user` |
| `p.memory_info().rss` | the same | column `memory_info.rss` (`to_numpy()`: no copy) |
| `p.uids().real`, `p.username()` | the same | columns `uids.real`, `username` |
| `p.cmdline()`, `p.name()` (15-character rule) | the same | columns `cmdline`, `name` |
| `p.status() == psutil.STATUS_ZOMBIE` | the same | column `status` (`'zombie'`) |
| `p.children(recursive=True)` | the same, from one request | `ppid` column |
| `p.memory_maps()`, `p.memory_full_info()`, `p.rlimit()` | the same (VMA and VMA_STAT groups; prlimit) | - |
| `p.send_signal(sig)`, `kill()`, `terminate()` | through a pidfd: a reused pid is never signalled | - |
| `p.open_files()`, `p.net_connections()`, `p.ionice()` | psutil's own Process of the same process (pid and start time checked after each answer) | - |
| `psutil.Popen(args, ...)` | taskdiag's Process wrapping a subprocess.Popen | - |
| `psutil.cpu_count()`, `virtual_memory()`, `net_connections()`, `CONN_*`, `__version__` | psutil's own, passed through (psutil imported when first asked for) | - |
| `except psutil.NoSuchProcess` | catches taskdiag.psutil's too (subclasses) | - |
| - | - | extras: `tgid`, `pgid`, `sid`, `tpgid`, `tty_nr`, `kthread`, `caps.*`, `groups`, `refused_groups` |

Where taskdiag.psutil differs from psutil:

- A process whose memory-map lock something stuck holds (a page fault on a hung FUSE or NFS
  file): psutil's `cmdline()`, `environ()`, `memory_maps()` hang with it; here they raise
  AccessDenied after at most 250 ms (`TASKDIAG_MM_TIMEOUT_MS`; at once for a process already
  found so), `ad_value` in bulk, and `snapshot()`'s column is None (docs/SECURITY.md, "Reads
  that wait on another process").
- `environ()` of a kernel thread on a kernel whose /proc refuses it (ESRCH): psutil raises
  NoSuchProcess (and `process_iter(['environ'])` drops every kernel thread); here it is
  AccessDenied (`ad_value` in bulk).
- `memory_full_info()` sums the mappings' counters, which smaps shows in kB each; psutil reads
  smaps_rollup's totals: uss and pss can differ by a few kB.
- `cpu_percent()`: the BPF backend's user/system split can move back a tick between two reads
  (it cannot record the split /proc remembers); the layer never reports below 0.
- The caller's own `num_fds()` and `memory_maps()` (and so `memory_full_info()`, and
  `num_fds` in `as_dict` and `process_iter`) close taskdiag's kept backend first, whose BPF
  programs and maps (an `anon_inode:bpf-map` mapping), daemon socket or /proc directories are
  this process's: the answer is the program's own, as psutil reports it in a program that
  never used taskdiag. The next call opens the backend again (about 3 ms with BPF, 1 ms with
  /proc): a loop over the caller's own `num_fds()` pays that each time.
- A read of a process's memory (its command line, environment, mappings) runs on a helper
  thread, `taskdiag-mm`, one per calling thread, which ends 250 ms after its last read: the
  caller's own `num_threads()` and `threads()` count it meanwhile, as psutil's do.
- `psutil.PROCFS_PATH` is psutil's: taskdiag reads the kernel's processes (BPF, taskdiagd,
  /proc), not another procfs mounted elsewhere.
- Without psutil installed, psutil's own names and the methods psutil answers raise
  `PsutilNotInstalled`, a ModuleNotFoundError naming psutil and `pip install psutil`:
  `from taskdiag.psutil import cpu_count` says so, and `hasattr(psutil, "cpu_count")` raises it
  rather than answer False (hasattr only swallows AttributeError: a program that needs
  psutil's functions is told to install psutil, not that its platform lacks them).
- A method a subclass overrides (or a test patches) is called by `as_dict()`, `process_iter`
  and `str()`, as psutil's are; the others come from one request.
- `Process` methods read through a backend kept open per thread (a one-process call costs
  about what psutil's does); a process that forks opens its own in the child.
- psutil's own tests pass but those listed, with why, in
  `crates/python/tests/psutil_suite/expected_failures.txt` (below).
"""

SUITE = """\
## psutil's own test suite

Every test file of psutil 7.2.2's sdist (`tests/`, 19 files) and its example scripts
(`scripts/`) run against taskdiag.psutil (`crates/python/tests/test_psutil_suite.py`, part of
`scripts/python test`): psutil's process API (`Process`, `Popen`, `process_iter`, `pids`,
`pid_exists`, `wait_procs`, process_iter's cache `_pmap`) is swapped for taskdiag.psutil's in
the psutil module itself, before each test's setup and call and after every
`importlib.reload(psutil)` (psutil's test_linux.py reloads it), and in every Python the tests
start (psutil's scripts: a `sitecustomize` swaps psutil as it is imported); the exceptions
stay psutil's (taskdiag's are their subclasses), the system-wide functions too. Every result
counts, each subtest's too; what fails must be exactly the reviewed list
(`psutil_suite/expected_failures.txt`: tests that mock psutil's own /proc parser or read its
internals, races in the tests, this machine), and a listed one that passes fails the gate.
The example scripts psutil's `test_scripts.py` only parses (`top.py`, `iotop.py`, `nettop.py`,
`cpu_distribution.py` on a terminal of their own, `killall.py` on a process of ours) or skips
here (the hardware ones) run through the swap too.

SUITE_TABLE

`psleak`'s memory-leak tests run with 20 calls a measurement instead of 200, the objects made
before each left out of its garbage collections (`gc.freeze`), and taskdiag's backend opened
before each (psleak counts descriptors around one call); psleak measures with psutil's own
Process, not counting taskdiag's `taskdiag-mm` helper thread. One test is left out:
test_memleaks.py's system-wide `net_connections` (psutil's own function, not swapped; it
retries for 30-40 s on a busy machine, with psutil itself as much). The suite runs without
CAP_SYS_TIME: psutil's `test_sudo.py` would set the machine's clock an hour ahead; psutil skips
those tests then.
"""

MEASURED = """\
## Measurements

`crates/python/bench/psutil_module.py` (as root): whole `python -c` runs, interpreter start and
import included, each case run in turn (interleaved), medians.

MEASURED_TABLES
"""


# Measured (see the sections' text for how); filled in from the runs' output.
SUITE_TABLE = """
`target/python/bin/python crates/python/tests/test_psutil_suite.py` (psutil 7.2.2, pytest 9.2,
this 2-core machine, as root; wall time of the two pytest runs side by side):

| psutil's suite run against | tests passed | failed | skipped | subtests passed | subtests failed | wall |
|---|---|---|---|---|---|---|
| psutil itself | 518 | 9 | 176 | 462 | 0 | 30.6 s |
| taskdiag.psutil | 487 | 41 | 175 | 453 | 0 | 33.9 s |

The 9 psutil fails here fail against taskdiag.psutil too (or 8: psutil's own test_all fails on
kthreadd's environ, taskdiag.psutil may pass it), listed as `environment:`; the other 32 mock
or read psutil's internals (31) or set psutil's `PROCFS_PATH` (1), and up to 6 more are races
of the tests with a child's exec (`flaky:`, 1 in that run). The example scripts psutil's
suite does not run here (9) all pass through the swap. Before (issue 42), the gate ran 6 of
the 19 files, 76 of test_linux.py's 113 tests against psutil itself after its reload, and did
not count 43 failed subtests: the present gate, its swap adapted to the former module (which
had no Popen), fails on that code with 72 results not in the list, 24 of them subtests. `scripts/python test` runs it in 37 s here (the former 6-file gate
took 55 s in the same interleaved runs).
"""

MEASURED_TABLES = """
`target/python/bin/python crates/python/bench/psutil_module.py 21` (21 runs of each case, 5
at 20,000 processes; load average 0.18 at the start; auto picked BPF, programs pinned by
taskdiagd's tests):

| `python -c` | median (ms) | vs `import psutil` |
|---|---|---|
| `pass` (the interpreter alone) | 11.5 | 0.32 |
| `import psutil` | 35.3 | 1.00 |
| `import taskdiag.psutil` | 18.7 | 0.53 |

`import taskdiag.psutil` no longer imports psutil (it did until issue 42): psutil is imported
when one of its own names is first used.

`python -c "import psutil; list(psutil.process_iter(['pid', 'name', 'username', 'cpu_times',
'memory_info']))"` against the same with `import taskdiag.psutil as psutil`, the machine's
processes topped up with sleeping ones (taskdiag-bench hold):

| processes | psutil | taskdiag.psutil | ratio |
|---|---|---|---|
| 100 | 0.053 s | 0.021 s | 0.40 (1/2.5) |
| 1,000 | 0.173 s | 0.038 s | 0.22 (1/4.5) |
| 20,000 | 3.098 s | 0.215 s | 0.07 (1/14.4) |

Before issue 42's changes (the previous taskdiag.psutil, measured beside them in one more
interleaved run): 0.82 of psutil's time at 100 processes (0.043 s against 0.052 s; the
current one 0.42) and 0.08 at 20,000 (0.222 s against 2.612 s; the current one 0.08): the
small-host gain is the import of psutil it no longer makes.
"""


def doc(obj):
    return inspect.cleandoc(obj.__doc__ or "")


def signature(name, fn):
    try:
        return f"{name}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        # Native functions carry theirs in the docstring's first line (`--` below it).
        return name


def native_doc(fn):
    text = inspect.cleandoc(fn.__doc__ or "")
    if "\n--\n" in text:
        text = text.split("\n--\n", 1)[1]
    return text.strip()


def main():
    out = [INTRO]
    out.append("## `taskdiag`\n")
    out.append(doc(taskdiag) + "\n")
    out.append(f"### `{signature('snapshot', taskdiag.snapshot)}`\n")
    out.append(doc(taskdiag.snapshot) + "\n")
    out.append("### `ProcTable`\n")
    out.append(doc(taskdiag.ProcTable) + "\n")
    for name, member in sorted(vars(taskdiag.ProcTable).items()):
        if name.startswith("_") and not name.startswith("__arrow"):
            continue
        text = native_doc(member)
        if text:
            kind = "property" if not callable(member) else "method"
            out.append(f"- `{name}` ({kind}): {' '.join(text.split())}")
    out.append("- `len(t)`: the number of rows.\n")
    out.append("### `columns()`, `attributes()`\n")
    out.append(native_doc(taskdiag.columns) + " " + native_doc(taskdiag.attributes) + "\n")
    out.append("| column | attribute | type | what |")
    out.append("|---|---|---|---|")
    for name, attr, kind, what in taskdiag.columns():
        out.append(f"| `{name}` | `{attr}` | {kind} | {what} |")
    out.append("")
    out.append("## `taskdiag.psutil`\n")
    out.append(doc(tp) + "\n")
    for name in ("process_iter", "pids", "pid_exists", "wait_procs"):
        fn = getattr(tp, name)
        out.append(f"### `{signature(name, fn)}`\n")
        out.append(doc(fn) + "\n")
    out.append(f"### `{signature('Process', tp.Process)}`\n")
    out.append(doc(tp.Process) + "\n")
    for name, member in sorted(vars(tp.Process).items()):
        if name.startswith("_") or not (callable(member) or isinstance(member, property)):
            continue
        fn = member.fget if isinstance(member, property) else member
        sig = name if isinstance(member, property) else signature(name, fn).replace("(self, ", "(").replace("(self)", "()")
        out.append(f"- `{sig}`: {' '.join(doc(fn).split())}")
    out.append("")
    out.append("### `Popen(*args, **kwargs)`\n")
    out.append(doc(tp.Popen) + "\n")
    out.append("Exceptions: `Error`, `NoSuchProcess(pid, name=None, msg=None)`, "
               "`ZombieProcess(pid, name=None, ppid=None, msg=None)`, "
               "`AccessDenied(pid=None, name=None, msg=None)`, "
               "`TimeoutExpired(seconds, pid=None, name=None)`: psutil's signatures, and "
               "subclasses of psutil's own once psutil is imported. `PsutilNotInstalled`: "
               + " ".join(doc(tp.PsutilNotInstalled).split()) + "\n")
    out.append(SIDE_BY_SIDE)
    out.append(SUITE.replace("SUITE_TABLE", SUITE_TABLE.strip()))
    out.append(MEASURED.replace("MEASURED_TABLES", MEASURED_TABLES.strip()))
    print("\n".join(out).rstrip() + "")


if __name__ == "__main__":
    main()
