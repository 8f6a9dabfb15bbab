#!/usr/bin/env python3
"""What profiling costs: taskdiag profile and perf record at the same rate over sleeping tasks.

Usage: crates/bench/scripts/profile-cost.py PROCESSES THREADS [SECONDS] [RUNS] [HZ]

Starts PROCESSES sleeping processes of THREADS threads each (taskdiag-bench hold), and a
CPU-bound workload pinned to CPU 1 that counts loop iterations for SECONDS. For each profiler
configuration -- none, `taskdiag profile -a` (on and off CPU), `--on-cpu`, `--off-cpu`, and
`perf record -F HZ -a -g` -- run RUNS times, interleaved, it gives:

  * the profiler's own CPU time in the steady state (its threads' schedstat from 2 s after the
    start to just before the end) and over the whole run (wait4: loading the programs and the
    final symbolization included), as % of one CPU;
  * the time its perf_event program ran in the steady state in other tasks' context (it runs
    in the interrupted task, so no process's CPU time shows it; kernel.bpf_stats_enabled, read
    from the profiler's program descriptors' fdinfo), as % of one CPU;
  * the workload's slowdown: its iterations against the median of the runs without a profiler,
    over the whole run and over the steady window alone (the rate of its quarter-second slots
    there), and the share of the steady window it waited to run on its CPU (schedstat's
    run_delay: the time other tasks, the profiler's among them, took from it; interrupts, the
    perf_event program's among them, show only in the rate).

Needs root and the release build. Prints a Markdown table (medians over the runs).
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "..", "..", "..", "target", "release")
TASKDIAG = os.path.join(TARGET, "taskdiag")
BENCH = os.path.join(TARGET, "taskdiag-bench")

SPIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
/* Counts loop iterations for argv[1] seconds; prints the total, then the count of each
 * quarter-second slot, one a line. */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double start = now(), end = start + atof(argv[1]);
    volatile unsigned long x = 1;
    unsigned long n = 0, slots[4096] = {0};
    double t;
    while ((t = now()) < end) {
        for (int i = 0; i < 100000; i++) x = x * 6364136223846793005UL + 1;
        n++;
        int k = (int)((t - start) / 0.25);
        if (k < 4096) slots[k]++;
    }
    printf("%lu\n", n);
    for (int k = 0; k < 4096 && k * 0.25 < end - start; k++) printf("%lu\n", slots[k]);
    return 0;
}
"""


BPF_PROG_TYPE_PERF_EVENT = 7


def prog_run_ns(pid):
    """Sum of run_time_ns over the perf_event programs process `pid` holds: those run in the
    interrupted task (the iterator's run in the profiler's own read(), already in its CPU)."""
    total = 0
    d = f"/proc/{pid}/fdinfo"
    try:
        fds = os.listdir(d)
    except OSError:
        return 0
    for fd in fds:
        try:
            with open(os.path.join(d, fd)) as f:
                text = f.read()
        except OSError:
            continue
        t = re.search(r"prog_type:\s*(\d+)", text)
        if t and int(t.group(1)) == BPF_PROG_TYPE_PERF_EVENT:
            m = re.search(r"run_time_ns:\s*(\d+)", text)
            if m:
                total += int(m.group(1))
    return total


def cpu_ns(pid):
    """CPU time of every thread of process `pid` so far (schedstat), in nanoseconds, by thread
    name."""
    total = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    ns = int(f.read().split()[0])
                with open(f"/proc/{pid}/task/{t}/comm") as f:
                    name = f.read().strip()
                total[name] = total.get(name, 0) + ns
            except OSError:
                pass
    except OSError:
        pass
    return total


WARMUP = 2.0


def run_delay_ns(pid):
    """How long process `pid` (one thread) has waited on a run queue so far, in nanoseconds."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1])
    except OSError:
        return 0


def run_once(config, seconds, spin, hz):
    """One run: the workload alone or beside a profiler. Returns a dict: iterations (whole run),
    rate (iterations a second over the steady window's whole slots), wait (% of the steady
    window the workload waited to run), whole (the profiler's CPU over the run, from wait4, %
    of one CPU), cpu and bpf (its CPU and its perf_event program's in the steady window, % of
    one CPU) and threads (steady CPU by thread name). The steady window runs from WARMUP
    seconds after the start to 0.3 s before the end (no loading, no final symbolization); it is
    the same in the runs without a profiler."""
    work = subprocess.Popen(["taskset", "-c", "1", spin, str(seconds)], stdout=subprocess.PIPE)
    start = time.monotonic()
    prof = None
    out = tempfile.NamedTemporaryFile(prefix="profile-cost-", delete=False)
    if config == "perf":
        prof = subprocess.Popen(
            ["perf", "record", "-F", str(hz), "-a", "-g", "-q", "-o", out.name, "--", "sleep", str(seconds)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elif config != "none":
        extra = {"both": [], "on": ["--on-cpu"], "off": ["--off-cpu"]}[config]
        prof = subprocess.Popen(
            [TASKDIAG, "profile", "-a", "-F", str(hz), "-d", str(seconds), "-q", "-o", out.name] + extra,
            stdout=subprocess.DEVNULL)
    r = {"cpu": 0.0, "bpf": 0.0, "threads": {}, "whole": 0.0}
    time.sleep(WARMUP)
    pid = prof.pid if prof else None
    c0, b0, d0, t0 = cpu_ns(pid) if pid else {}, prog_run_ns(pid) if pid else 0, run_delay_ns(work.pid), time.monotonic()
    time.sleep(max(seconds - WARMUP - 0.3, 0.1))
    c1, b1, d1, t1 = cpu_ns(pid) if pid else {}, prog_run_ns(pid) if pid else 0, run_delay_ns(work.pid), time.monotonic()
    if pid:
        r["threads"] = {k: 100.0 * (v - c0.get(k, 0)) / 1e9 / (t1 - t0) for k, v in c1.items()}
        r["cpu"] = sum(r["threads"].values())
        r["bpf"] = 100.0 * (b1 - b0) / 1e9 / (t1 - t0)
        _, status, ru = os.wait4(prof.pid, 0)
        if status != 0:
            sys.exit(f"{config}: the profiler failed (status {status})")
        r["whole"] = 100.0 * (ru.ru_utime + ru.ru_stime) / seconds
    r["wait"] = 100.0 * (d1 - d0) / 1e9 / (t1 - t0)
    lines = work.communicate()[0].split()
    r["iterations"] = int(lines[0])
    slots = [int(v) for v in lines[1:]]
    # Whole slots inside the window (the workload started a few ms before `start`).
    first, last = int((t0 - start) / 0.25) + 1, int((t1 - start) / 0.25) - 1
    window = slots[first:last]
    r["rate"] = sum(window) / (0.25 * len(window)) if window else 0.0
    os.unlink(out.name)
    return r


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    processes, threads = int(sys.argv[1]), int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    hz = int(sys.argv[5]) if len(sys.argv) > 5 else 49
    tmp = tempfile.mkdtemp(prefix="profile-cost-")
    spin = os.path.join(tmp, "spin")
    with open(spin + ".c", "w") as f:
        f.write(SPIN_C)
    subprocess.run(["cc", "-O2", "-o", spin, spin + ".c"], check=True)
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        stats_were = f.read().strip()
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
        f.write("1")
    hold = subprocess.Popen([BENCH, "hold", "--tasks", str(processes), "--threads", str(threads)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if "ready" not in hold.stdout.readline():
            sys.exit("taskdiag-bench hold failed")
        # The children make their threads after "ready": wait until they are all there.
        def count():
            n = 0
            for p in os.listdir("/proc"):
                try:
                    n += len(os.listdir(f"/proc/{p}/task")) if p.isdigit() else 0
                except FileNotFoundError:
                    pass
            return n
        tasks = count()
        for _ in range(600):
            if tasks >= processes * threads:
                break
            time.sleep(0.1)
            tasks = count()
        print(f"{processes} processes x {threads} threads held; {tasks} tasks in /proc; "
              f"{os.uname().release}; {os.cpu_count()} CPUs; {hz} Hz, {seconds} s x {runs} runs")
        configs = ["none", "both", "on", "off", "perf"]
        res = {c: [] for c in configs}
        for _ in range(runs):
            for c in configs:
                res[c].append(run_once(c, seconds, spin, hz))
        med = lambda c, k: statistics.median(r[k] for r in res[c])
        base, base_rate = med("none", "iterations"), med("none", "rate")
        names = {"none": "no profiler", "both": "taskdiag profile -a (on + off CPU)",
                 "on": "taskdiag profile -a --on-cpu", "off": "taskdiag profile -a --off-cpu",
                 "perf": f"perf record -F {hz} -a -g"}
        print()
        print("| profiler | steady: its CPU | steady: its perf_event program in other tasks | steady total "
              "(% of one CPU) | whole run incl. loading and symbolizing | workload slowdown, whole run "
              "| workload slowdown, steady | steady: workload waited |")
        print("|---|---|---|---|---|---|---|---|")
        for c in configs:
            cpu, bpf = med(c, "cpu"), med(c, "bpf")
            slow = 100.0 * (base - med(c, "iterations")) / base
            steady = 100.0 * (base_rate - med(c, "rate")) / base_rate
            print(f"| {names[c]} | {cpu:.2f}% | {bpf:.3f}% | **{cpu + bpf:.2f}%** | {med(c, 'whole'):.2f}% | "
                  f"{slow:+.2f}% | {steady:+.2f}% | {med(c, 'wait'):.3f}% |")
        print()
        print("Steady rate of each run (iterations/s), in run order:")
        for c in configs:
            print(f"- {names[c]}: " + ", ".join(f"{r['rate']:.0f}" for r in res[c]))
        print()
        print("Steady CPU by thread (medians, % of one CPU):")
        for c in configs:
            threads = sorted({k for r in res[c] for k in r["threads"]})
            if threads:
                split = ", ".join(f"{k} {statistics.median(r['threads'].get(k, 0.0) for r in res[c]):.2f}%"
                                  for k in threads)
                print(f"- {names[c]}: {split}")
    finally:
        hold.stdin.close()
        hold.wait()
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write(stats_were)
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
