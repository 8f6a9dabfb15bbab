#!/usr/bin/env python3
"""taskdiag's Python package against psutil, over PROCESSES sleeping processes.

Usage: target/python/bin/python crates/bench/scripts/python-vs-psutil.py PROCESSES [RUNS]

Starts PROCESSES sleeping processes (taskdiag-bench hold; as root, which raises pid_max for
it), then runs each case below RUNS times, interleaved, each run in a fresh interpreter (so
peak memory is the run's own), timing the call alone (imports and interpreter start left
out):

  psutil            list(psutil.process_iter(ATTRS))
  taskdiag.psutil   list(taskdiag.psutil.process_iter(ATTRS))
  polars            polars.DataFrame(taskdiag.snapshot(ATTRS))
  snapshot          taskdiag.snapshot(ATTRS)

with ATTRS = pid, ppid, name, username, cmdline (the issue's), and, as the floor under every
taskdiag case, the BPF walk alone that answers them (`taskdiag dump -b bpf --all -g
base,cred,cmdline -f raw -s`: the kernel's walk and its completion from /proc, as the dump
itself times them; no Python, no program loading). Prints a Markdown table: the
median time, its ratio to psutil's, the processes listed, the peak RSS of the run's
interpreter and how much the call added to it (ru_maxrss after the call less the RSS before),
and which backend taskdiag used.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "..", "target", "release", "taskdiag-bench")
TASKDIAG = os.path.join(HERE, "..", "..", "..", "target", "release", "taskdiag")
FLOOR = "walk alone (BPF, no Python)"
ATTRS = ["pid", "ppid", "name", "username", "cmdline"]

CASES = {
    "psutil": ("import psutil", "r = list(psutil.process_iter(ATTRS))", "len(r)", "'-'"),
    "taskdiag.psutil": (
        "import taskdiag, taskdiag.psutil as tp",
        "r = list(tp.process_iter(ATTRS))",
        "len(r)",
        "taskdiag.snapshot(['pid']).backend",
    ),
    "polars": (
        "import taskdiag, polars",
        "r = polars.DataFrame(taskdiag.snapshot(ATTRS))",
        "r.height",
        "taskdiag.snapshot(['pid']).backend",
    ),
    "snapshot": (
        "import taskdiag",
        "r = taskdiag.snapshot(ATTRS)",
        "len(r)",
        "taskdiag.snapshot(['pid']).backend",
    ),
}

RUN = """
import json, resource, time
ATTRS = {attrs!r}
{imports}
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * resource.getpagesize()
before = rss()
t0 = time.perf_counter()
{call}
t1 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"s": t1 - t0, "n": {count}, "peak": peak, "added": peak - before,
                  "backend": {backend}}}))
"""


def run(case):
    if case == FLOOR:
        out = subprocess.run([TASKDIAG, "dump", "-b", "bpf", "--all", "-g", "base,cred,cmdline",
                              "-f", "raw", "-s"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, check=True)
        m = re.search(r"(\d+) tasks via bpf in ([0-9.]+) ms", out.stderr)
        if not m:
            sys.exit(f"taskdiag dump -s: no timing in {out.stderr!r}")
        return {"s": float(m.group(2)) / 1000, "n": int(m.group(1))}
    imports, call, count, backend = CASES[case]
    code = RUN.format(attrs=ATTRS, imports=imports, call=call, count=count, backend=backend)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    procs = int(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory() as d:
        out = open(os.path.join(d, "out"), "w+")
        holder = subprocess.Popen([BENCH, "hold", "--tasks", str(procs)],
                                  stdin=subprocess.PIPE, stdout=out)
        try:
            while "ready" not in open(os.path.join(d, "out")).read():
                if holder.poll() is not None:
                    sys.exit("taskdiag-bench hold failed")
                time.sleep(0.2)
            results = {c: [] for c in [*CASES, FLOOR]}
            for _ in range(runs):
                for c in results:
                    results[c].append(run(c))
        finally:
            holder.stdin.close()
            holder.wait()
    base = statistics.median(r["s"] for r in results["psutil"])
    print(f"{procs} sleeping processes spawned; {runs} runs per case, interleaved; "
          f"medians; attrs {', '.join(ATTRS)}\n")
    print("| case | time (s) | x faster than psutil | processes | peak RSS (MiB) "
          "| added by the call (MiB) | backend |")
    print("|---|---|---|---|---|---|---|")
    for c, rs in results.items():
        s = statistics.median(r["s"] for r in rs)
        mib = lambda k: statistics.median(r[k] for r in rs) / 2**20  # noqa: E731
        if c == FLOOR:
            print(f"| {c} | {s:.4f} | {base / s:.1f} | {rs[0]['n']} tasks | - | - | bpf |")
            continue
        print(f"| {c} | {s:.4f} | {base / s:.1f} | {rs[0]['n']} | {mib('peak'):.0f} "
              f"| {mib('added'):.1f} | {rs[0]['backend']} |")


if __name__ == "__main__":
    main()
