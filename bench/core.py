#!/usr/bin/env python3
"""Core-dump benchmark: taskdiag against the procfs floor and a bare BPF iterator, in one run.

Spawns N sleeping processes (bench/spawn), then runs every row K times, interleaved round-robin
after one warm-up round, and prints a Markdown table: median/min/max wall time, median user and
system time, peak RSS, and the ratio of each row to its baseline. With perf available it adds
system-call and kernel-allocation counts. Kills exactly what it spawned, whatever happens.

Run through scripts/bench-core, which builds everything first.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = os.path.join(ROOT, "target", "bench")
TD = os.path.join(ROOT, "target", "release", "taskdiag")


def dump(groups, backend, extra=()):
    return [TD, "dump", "--all", "--groups", groups, "--format", "raw", "--backend", backend, *extra]


def rows():
    loop = os.path.join(B, "proc_loop")
    return [
        # (key, label, argv, baseline key)
        ("A", "taskdiag bpf base,cred", dump("base,cred", "bpf"), "B"),
        ("B", "bare minimal iterator (C, libbpf)", [os.path.join(B, "min_iter"), os.path.join(B, "min_iter.bpf.o")], None),
        ("C", "C loop /proc/*/status", [loop, "status"], None),
        ("D", "taskdiag bpf base,cmdline", dump("base,cmdline", "bpf"), "E"),
        ("E", "C loop /proc/*/stat + cmdline", [loop, "stat", "cmdline"], None),
        ("F", "taskdiag procfs base", dump("base", "procfs"), "G"),
        ("G", "C loop /proc/*/stat", [loop, "stat"], None),
        ("H", "C loop /proc/*/stat + status", [loop, "stat", "status"], None),
        ("N", "C loop open+close /proc/*/stat (--noread)", [loop, "--noread", "stat"], None),
    ]


RSS_FILE = "/tmp/taskdiag-bench-rss"


def run_once(argv):
    # /usr/bin/time reports the peak RSS of the command itself (a child forked from this
    # Python process would count Python's memory from before its exec). Its own cost is a
    # fork+exec, the same for every row.
    t0 = time.perf_counter()
    p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", RSS_FILE, *argv],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if status != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {err.strip()}")
    with open(RSS_FILE) as f:
        rss_kb = int(f.read().split()[-1])
    return wall, ru.ru_utime, ru.ru_stime, rss_kb / 1024.0


def steady(groups, backend, repeat=20):
    """Per-dump time with the backend loaded once (--repeat), from --summary."""
    out = subprocess.run(dump(groups, backend, ("--repeat", str(repeat), "--summary")),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    m = re.search(r"in ([0-9.]+) ms \(backend setup ([0-9.]+) ms\)", out.stderr.decode())
    return float(m.group(1)) / 1e3, float(m.group(2)) / 1e3


def perf_counts(argv):
    if not shutil.which("perf"):
        return None
    ev = "raw_syscalls:sys_enter,kmem:kmalloc,kmem:kmem_cache_alloc"
    p = subprocess.run(["perf", "stat", "-x", ",", "-e", ev, *argv],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    counts = {}
    for line in p.stderr.decode().splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].strip().isdigit():
            counts[f[2]] = int(f[0])
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=50000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()

    spawner = subprocess.Popen([os.path.join(B, "spawn"), str(a.tasks), str(a.threads)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        line = spawner.stdout.readline().decode()
        if not line.startswith("ready"):
            sys.exit(f"spawn failed: {line!r}")
        ntasks = sum(1 for d in os.listdir("/proc") if d.isdigit())
        R = rows()
        res = {k: [] for k, *_ in R}
        for rnd in range(a.runs + 1):  # round 0 warms caches and is discarded
            for k, _, argv, _ in R:
                r = run_once(argv)
                if rnd:
                    res[k].append(r)
        st = {g: [steady(g, "bpf") for _ in range(3)] for g in ("base,cred", "base,cmdline")}
        counts = {k: perf_counts(argv) for k, _, argv, _ in R if k in "ACDG"}
        counts["A-loaded"] = None
    finally:
        spawner.stdin.close()
        spawner.wait()
    left = sum(1 for d in os.listdir("/proc") if d.isdigit())

    med = lambda xs: statistics.median(xs)
    print(f"Processes in /proc during the run: {ntasks} (after: {left}); {a.runs} runs per row, interleaved, after one warm-up round.\n")
    print("| row | command | wall median s | min | max | user s | sys s | peak RSS MiB | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    walls = {k: med([r[0] for r in v]) for k, v in res.items()}
    for k, label, argv, base in R:
        v = res[k]
        ratio = f"{walls[k] / walls[base]:.2f}x {base}" if base else ""
        print(f"| {k} | {label} | {walls[k]:.3f} | {min(r[0] for r in v):.3f} | {max(r[0] for r in v):.3f} | "
              f"{med([r[1] for r in v]):.3f} | {med([r[2] for r in v]):.3f} | {max(r[3] for r in v):.1f} | {ratio} |")
    print()
    for g, xs in st.items():
        d = med([x[0] for x in xs])
        s = med([x[1] for x in xs])
        print(f"- taskdiag bpf {g} with the programs already loaded (`--repeat 20`): {d*1e3:.1f} ms per dump; loading them: {s*1e3:.0f} ms")
    print()
    print("Ratios the core issue asks for:")
    print(f"- A/B bpf base,cred vs bare iterator: {walls['A']/walls['B']:.2f}x (whole process); "
          f"{med([x[0] for x in st['base,cred']])/walls['B']:.2f}x (dump only, programs loaded)")
    print(f"- C/A status loop vs bpf base,cred: {walls['C']/walls['A']:.1f}x faster")
    print(f"- E/D stat+cmdline loop vs bpf base,cmdline: {walls['E']/walls['D']:.1f}x faster")
    print(f"- F/G procfs base vs stat loop: {walls['F']/walls['G']:.2f}; F/H vs stat+status loop: {walls['F']/walls['H']:.2f}")
    print()
    if any(counts.values()):
        print("| row | syscalls | kmalloc | kmem_cache_alloc |")
        print("|---|---|---|---|")
        for k in "ACDG":
            c = counts.get(k) or {}
            print(f"| {k} | {c.get('raw_syscalls:sys_enter','-')} | {c.get('kmem:kmalloc','-')} | {c.get('kmem:kmem_cache_alloc','-')} |")


if __name__ == "__main__":
    main()
