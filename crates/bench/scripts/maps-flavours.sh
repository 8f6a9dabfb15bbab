#!/usr/bin/env bash
# Memory maps at N processes (issue 40): the BPF map walk in each flavour (dump_vma with
# bpf_d_path(), dump_vma_walk with probe reads) against the /proc completion a kernel that
# refuses the walk got, the procfs backend and the procfs floor (taskdiag-bench loop maps);
# interleaved runs of one-shot commands (load and verification included: TASKDIAG_BPF_PIN=0).
# As root, after `make build`: crates/bench/scripts/maps-flavours.sh [N [RUNS]]; one line per
# run: row, wall s, system s, peak RSS KiB.
set -euo pipefail
N=${1:-10000}; RUNS=${2:-5}
B=${B:-$(cd "$(dirname "$0")/../../.." && pwd)/target/release}
coproc HOLD { "$B/taskdiag-bench" hold --tasks "$N"; }
read -r line <&"${HOLD[0]}"; echo "hold: $line ($(ls /proc | grep -c '^[0-9]') processes)" >&2
export TASKDIAG_BPF_PIN=0
row() { # name, env, command...
    local name=$1 env=$2; shift 2
    local t
    /usr/bin/time -o /tmp/maps-bench.t -f "%e %S %M" env $env "$@" >/dev/null 2>/dev/null
    t=$(tail -1 /tmp/maps-bench.t)
    echo "$name $t"
}
for r in $(seq "$RUNS"); do
    row P-loop-maps "X=1" "$B/taskdiag-bench" loop maps
    row B5-dump_vma "X=1" "$B/taskdiag" dump --all --groups vma --format raw --backend bpf
    row B5w-dump_vma_walk "TASKDIAG_BPF_DISABLE=d_path" "$B/taskdiag" dump --all --groups vma --format raw --backend bpf
    row B5p-no-map-walk "TASKDIAG_BPF_DISABLE=maps" "$B/taskdiag" dump --all --groups vma --format raw --backend bpf
    row F4-procfs "X=1" "$B/taskdiag" dump --all --groups vma --format raw --backend procfs
    row B6-vma_stat "X=1" "$B/taskdiag" dump --all --groups vma_stat --format raw --backend bpf
    row B6w-vma_stat-walk "TASKDIAG_BPF_DISABLE=d_path" "$B/taskdiag" dump --all --groups vma_stat --format raw --backend bpf
    row B6p-vma_stat-no-map-walk "TASKDIAG_BPF_DISABLE=maps" "$B/taskdiag" dump --all --groups vma_stat --format raw --backend bpf
done
exec {HOLD[1]}>&-
wait
