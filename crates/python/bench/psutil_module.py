#!/usr/bin/env python3
"""taskdiag.psutil against psutil as a program sees them: whole ``python -c`` runs, interpreter
start and import included, interleaved run by run.

Usage (as root: 20,000 processes need kernel.pid_max raised, which taskdiag-bench hold does
and puts back):

    target/python/bin/python crates/python/bench/psutil_module.py [RUNS] [LEVELS]

RUNS (default 21) runs of each case, LEVELS (default 100,1000,20000) the machine's process
counts to measure ``process_iter`` at. Prints Markdown tables:

- import time: ``python -c "import taskdiag.psutil"`` against ``python -c "import psutil"``
  (and ``python -c pass``, the interpreter alone), the median wall time of each;
- ``python -c "import psutil; list(psutil.process_iter(ATTRS))"`` against the same with
  ``import taskdiag.psutil as psutil``, ATTRS = pid, name, username, cpu_times, memory_info,
  at each level: the processes are topped up to the level with sleeping ones
  (target/release/taskdiag-bench hold: forks of a small process in pause(); they are this
  script's, and it ends exactly them), with the median, its ratio to psutil's, the processes
  listed and the backend taskdiag used (auto, as root).
"""

import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BENCH = os.path.join(REPO, "target", "release", "taskdiag-bench")
ATTRS = ["pid", "name", "username", "cpu_times", "memory_info"]
ITER = f"n = len(list(psutil.process_iter({ATTRS!r}))); print(n)"
IMPORTS = {
    "python -c pass": "pass",
    "import psutil": "import psutil",
    "import taskdiag.psutil": "import taskdiag.psutil",
}
ITERS = {
    "psutil": "import psutil; " + ITER,
    "taskdiag.psutil": "import taskdiag.psutil as psutil; " + ITER,
}


def env():
    # Bytecode cached as an installed package has it (pip compiles it): a shell's
    # PYTHONDONTWRITEBYTECODE would have every run compile taskdiag.psutil again.
    return {k: v for k, v in os.environ.items()
            if not k.startswith("TASKDIAG_") and k != "PYTHONDONTWRITEBYTECODE"}


def timed(code):
    """One ``python -c code`` run: its wall time (s) and its output."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                       check=True)
    return time.perf_counter() - t0, r.stdout.strip()


def interleaved(cases, runs):
    """Each case run ``runs`` times, one of each in turn: {case: (median s, last output)}."""
    times = {c: [] for c in cases}
    outs = {}
    for code in cases.values():
        timed(code)  # warm: bytecode written, files in the page cache
    for _ in range(runs):
        for case, code in cases.items():
            took, outs[case] = timed(code)
            times[case].append(took)
    return {c: (statistics.median(t), outs[c]) for c, t in times.items()}


def processes():
    return sum(1 for d in os.listdir("/proc") if d.isdigit())


class Held:
    """``n`` sleeping processes of ours (taskdiag-bench hold) while the block runs."""

    def __init__(self, n):
        self.n, self.p = n, None

    def __enter__(self):
        if self.n <= 0:
            return self
        if not os.access(BENCH, os.X_OK):
            sys.exit(f"{BENCH} is missing: cargo build --release -p taskdiag-bench")
        self.p = subprocess.Popen([BENCH, "hold", "--tasks", str(self.n)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            self.p.kill()
            sys.exit(f"taskdiag-bench hold did not start: {line!r}")
        return self

    def __exit__(self, *exc):
        if self.p is not None:
            self.p.stdin.close()  # it ends exactly its own processes
            self.p.wait(timeout=120)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    levels = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "100,1000,20000").split(",")]
    print(f"{runs} runs of each, interleaved; load average {os.getloadavg()[0]:.2f} at the start")
    print()
    imports = interleaved(IMPORTS, runs)
    base = imports["import psutil"][0]
    print("| `python -c` | median (ms) | vs `import psutil` |")
    print("|---|---|---|")
    for case, (med, _) in imports.items():
        print(f"| `{case}` | {med * 1000:.1f} | {med / base:.2f} |")
    print()
    print(f"| processes | psutil (s) | taskdiag.psutil (s) | ratio | listed | backend |")
    print("|---|---|---|---|---|---|")
    for level in levels:
        with Held(level - processes()):
            backend = timed("import taskdiag; print(taskdiag.snapshot(['pid']).backend)")[1]
            got = interleaved(ITERS, runs if level <= 1000 else max(3, runs // 4))
            (ps, n_ps), (td, n_td) = got["psutil"], got["taskdiag.psutil"]
            print(f"| {level:,} | {ps:.3f} | {td:.3f} | {td / ps:.2f} (1/{ps / td:.1f}) "
                  f"| {n_ps} / {n_td} | {backend} |", flush=True)


if __name__ == "__main__":
    main()
