#!/usr/bin/env bash
# What each group costs a BPF walk: over TASKS sleeping processes, `dump --all --groups G
# --format raw --repeat N` (programs loaded once, N walks) for G = base, base,cred,
# base,stat, base,statm, and top's base,cred,stat,statm, with each given taskdiag binary,
# interleaved, RUNS times. Prints, per binary and groups, the median CPU (user + system) of one
# walk in ms. Needs root (the BPF backend) and the release build (taskdiag-bench spawns the
# processes). Compare two builds by giving both, e.g. a copy of the previous one first.
#
# Usage: crates/bench/scripts/group-cost.sh TASKS RUNS TASKDIAG_BINARY...
set -euo pipefail

tasks=${1:?usage: group-cost.sh TASKS RUNS TASKDIAG...}
runs=${2:?usage: group-cost.sh TASKS RUNS TASKDIAG...}
shift 2
[ $# -gt 0 ] || { echo "usage: group-cost.sh TASKS RUNS TASKDIAG..." >&2; exit 2; }
. "$(dirname "$0")/hold.sh"
trap unhold EXIT
hold "$(dirname "$0")/../../../target/release/taskdiag-bench" "$tasks"
hz=$(getconf CLK_TCK)

groups=(base base,cred base,stat base,statm base,cred,stat,statm)
# Each run loads its own programs (TASKDIAG_BPF_PIN=0: binaries with other programs would
# remove each other's pins); a walk's cost is the difference between 21 walks and one, / 20.
cpu_ms() { # BINARY GROUPS REPEAT -> CPU ms of the whole run
    TASKDIAG_BPF_PIN=0 /usr/bin/time -f "%U %S" -o "$dir/t" "$1" dump --all --groups "$2" \
        --format raw --backend bpf --repeat "$3" > /dev/null
    awk '{print ($1 + $2) * 1000}' "$dir/t"
}
for ((r = 0; r < runs; r++)); do
    for b in "$@"; do
        for g in "${groups[@]}"; do
            one=$(cpu_ms "$b" "$g" 1)
            many=$(cpu_ms "$b" "$g" 21)
            awk -v b="$b" -v g="$g" -v one="$one" -v many="$many" \
                'BEGIN {print b, g, (many - one) / 20}' >> "$dir/res"
        done
    done
done
echo "$(cut -d' ' -f4 /proc/loadavg | cut -d/ -f2) tasks on the host; CPU (user + system) per walk \
in ms: (21 walks - 1 walk) / 20, GNU time's 1/$hz s resolution; median of $runs runs"
for b in "$@"; do
    for g in "${groups[@]}"; do
        med=$(awk -v b="$b" -v g="$g" '$1 == b && $2 == g {print $3}' "$dir/res" | sort -n |
            awk '{v[NR] = $1} END {printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
        printf '%-40s %-22s %8s ms\n' "$b" "$g" "$med"
    done
done
