#!/usr/bin/env bash
# The steady-state CPU of an interactive top refreshing every second, over TASKS sleeping
# processes: each top runs alone in a tmux session (a real terminal, 200x50), is left WARMUP
# seconds to settle, then its CPU ticks (utime + stime of /proc/PID/stat, the whole process) are
# counted over SECONDS. Measures taskdiag top, procps top and htop (installed with apt if
# missing), one after the other on the same processes. Needs root (pid_max, apt) and the
# release build (taskdiag-bench spawns the processes).
#
# Usage: crates/bench/scripts/top-cpu.sh TASKS [SECONDS] [TASKDIAG_BINARY]
# Prints one line per top: "name: P% of a CPU (T ticks in S s)", and for taskdiag top also
# the CPU its change tracker used outside it: the BPF programs on the scheduler's tracepoints
# run at every context switch, charged to whichever task switches, so their run time is read
# from the kernel's BPF statistics (kernel.bpf_stats_enabled, switched on for the run).
set -euo pipefail

tasks=${1:?usage: top-cpu.sh TASKS [SECONDS] [TASKDIAG]}
secs=${2:-20}
td=${3:-$(dirname "$0")/../../../target/release/taskdiag}
warmup=5
hz=$(getconf CLK_TCK)

command -v htop >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq htop >/dev/null
command -v tmux >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
command -v bpftool >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftool >/dev/null

# The sleepers (hold.sh).
. "$(dirname "$0")/hold.sh"
sessions=()
cleanup() {
    for s in "${sessions[@]}"; do tmux kill-session -t "$s" 2>/dev/null || true; done
    [ -z "${stats_were:-}" ] || sysctl -qw kernel.bpf_stats_enabled="$stats_were"
    unhold
}
trap cleanup EXIT
hold "$(dirname "$td")/taskdiag-bench" "$tasks"
echo "$(ls /proc | grep -c '^[0-9]') processes in /proc; $(uname -r); $(nproc) CPUs"

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# Nanoseconds the change tracker's programs have run (0 when none is loaded).
tracker_ns() {
    bpftool -j prog show 2>/dev/null | python3 -c 'import json, sys
print(sum(p.get("run_time_ns", 0) for p in json.load(sys.stdin) if p.get("name", "").startswith("track_")))'
}
stats_were=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1

measure() {
    local name=$1
    shift
    local s="topcpu$$-${#sessions[@]}"
    sessions+=("$s")
    tmux new-session -d -s "$s" -x 200 -y 50 "$@"
    sleep 1
    local pid
    pid=$(tmux list-panes -t "$s" -F '#{pane_pid}')
    sleep "$warmup"
    local a b ta tb
    a=$(ticks "$pid")
    ta=$(tracker_ns)
    sleep "$secs"
    b=$(ticks "$pid")
    tb=$(tracker_ns)
    tmux kill-session -t "$s"
    awk -v n="$name" -v t=$((b - a)) -v s="$secs" -v hz="$hz" -v tr=$((tb - ta)) \
        'BEGIN { printf "%s: %.1f%% of a CPU (%d ticks in %d s)", n, 100 * t / hz / s, t, s
                 if (tr > 0) printf "; its change tracker %.2f%% more, in other tasks", 100 * tr / 1e9 / s
                 printf "\n" }'
}

"$td" ps -e > /dev/null # the programs pinned before any top starts
measure "taskdiag top -d 1" "$td" top -d 1
measure "taskdiag top -d 1, without the change tracker" env TASKDIAG_TOP_TRACK=0 "$td" top -d 1
measure "procps top -d 1" top -d 1
measure "htop -d 10" htop -d 10
