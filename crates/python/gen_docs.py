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
| `p.memory_maps()`, `p.memory_full_info()` | the same (VMA and VMA_STAT groups) | - |
| `p.send_signal(sig)`, `kill()`, `terminate()` | through a pidfd: a reused pid is never signalled | - |
| `p.open_files()`, `p.net_connections()`, `p.ionice()` | NotImplementedError (no group carries them) | - |
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
- The caller's own address space maps taskdiag's BPF maps (`anon_inode:bpf-map`) once the BPF
  backend was used.
- `Process` methods read through a backend kept open per thread (a one-process call costs
  about what psutil's does); a process that forks opens its own in the child.
- psutil's own tests that exercise this surface pass but those listed, with why, in
  `crates/python/tests/psutil_suite/expected_failures.txt`.
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
    out.append("Exceptions: `Error`, `NoSuchProcess(pid, name=None, msg=None)`, "
               "`ZombieProcess(pid, name=None, ppid=None, msg=None)`, "
               "`AccessDenied(pid=None, name=None, msg=None)`, "
               "`TimeoutExpired(seconds, pid=None, name=None)`: psutil's signatures, and "
               "subclasses of psutil's own when psutil is importable.\n")
    out.append(SIDE_BY_SIDE)
    print("\n".join(out).rstrip() + "")


if __name__ == "__main__":
    main()
