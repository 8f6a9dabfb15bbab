#!/usr/bin/env bash
# The steady-state CPU of an interactive top refreshing every second, over TASKS sleeping
# processes: each top runs alone in a tmux session (a real terminal, 200x50), is left WARMUP
# seconds to settle, then its CPU ticks (utime + stime of /proc/PID/stat, the whole process) are
# counted over SECONDS. Measures taskdiag top, procps top and htop (installed with apt if
# missing), one after the other on the same processes. Needs root (pid_max, apt) and the
# release build (taskdiag-bench spawns the processes).
#
# Usage: crates/bench/scripts/top-cpu.sh TASKS [SECONDS] [TASKDIAG_BINARY]
# Prints one line per top: "name: P% of a CPU (T ticks in S s); machine +M%": the top's own
# CPU, and how much more the whole machine used (non-idle ticks of /proc/stat) during its window
# than during as long a window with no top running: that also counts what a top costs other
# tasks (taskdiag top's change tracker runs at every context switch, charged to whichever task
# is switching).
set -euo pipefail

tasks=${1:?usage: top-cpu.sh TASKS [SECONDS] [TASKDIAG]}
secs=${2:-20}
td=${3:-$(dirname "$0")/../../../target/release/taskdiag}
warmup=5
hz=$(getconf CLK_TCK)

command -v htop >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq htop >/dev/null
command -v tmux >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null

# The sleepers (hold.sh).
. "$(dirname "$0")/hold.sh"
sessions=()
cleanup() {
    for s in "${sessions[@]}"; do tmux kill-session -t "$s" 2>/dev/null || true; done
    unhold
}
trap cleanup EXIT
hold "$(dirname "$td")/taskdiag-bench" "$tasks"
echo "$(ls /proc | grep -c '^[0-9]') processes in /proc; $(uname -r); $(nproc) CPUs"

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# Non-idle ticks of the whole machine (user nice system irq softirq steal).
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }

# The machine's own load with no top, over the same window.
sleep "$warmup"
m0=$(busy)
sleep "$secs"
idle_busy=$(($(busy) - m0))
echo "no top: machine $(awk -v t="$idle_busy" -v s="$secs" -v hz="$hz" 'BEGIN { printf "%.1f%%", 100 * t / hz / s }') of a CPU"

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
    local a b ma mb
    a=$(ticks "$pid")
    ma=$(busy)
    sleep "$secs"
    b=$(ticks "$pid")
    mb=$(busy)
    tmux kill-session -t "$s"
    awk -v n="$name" -v t=$((b - a)) -v s="$secs" -v hz="$hz" -v m=$((mb - ma - idle_busy)) \
        'BEGIN { printf "%s: %.1f%% of a CPU (%d ticks in %d s); machine +%.1f%%\n", n, 100 * t / hz / s, t, s, 100 * m / hz / s }'
}

"$td" ps -e > /dev/null # the programs pinned before any top starts
measure "taskdiag top -d 1" "$td" top -d 1
measure "taskdiag top -d 1, without the change tracker" env TASKDIAG_TOP_TRACK=0 "$td" top -d 1
measure "procps top -d 1" top -d 1
measure "htop -d 10" htop -d 10
