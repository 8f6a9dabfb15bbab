#!/bin/bash
# `ps aux` and one exporter scrape on TASKS sleeping processes, before and after a change, and
# with a process whose memory-map lock is wedged (issue 41): each command's wall time (median
# [min-max] of RUNS after one warm-up run, a command's runs back to back: two builds' programs
# are pinned under different keys, each load replacing the other's, so alternating builds would
# verify the programs again at every run), procps's `ps aux` in the same run as the reference.
# With WEDGE=1, the same again once a wedge fixture (the test suite's
# crates/test-support/src/wedge_fixture.c: a FUSE READ never answered under the process's
# mmap_lock) runs; every command runs under `timeout -s KILL LIMIT` (default 20 s): one that
# hangs shows as "timed out". Run as root from the repository after
# `cargo build --release --workspace`; OLD is the target/release directory of the build to
# compare with (optional):
#
#   OLD=/work/old/target/release crates/bench/scripts/wedge.sh 1000 9
#   WEDGE=1 crates/bench/scripts/wedge.sh 50000 5
set -eu
TASKS=${1:-1000} RUNS=${2:-5} WEDGE=${WEDGE:-0} LIMIT=${LIMIT:-20} OLD=${OLD:-}
here=$(cd "$(dirname "$0")/../../.." && pwd)
rel=$here/target/release
. "$here/crates/bench/scripts/hold.sh"
fixture_pid=
cleanup() {
    [ -n "$fixture_pid" ] && kill -TERM "$fixture_pid" 2>/dev/null && wait "$fixture_pid" || true
    unhold
}
trap cleanup EXIT
hold "$rel/taskdiag-bench" "$TASKS"
printf 'process_names:\n  - name: "{{.Comm}}"\n    cmdline: [".+"]\n' > "$dir/all.yml"
procs=$(ls -d /proc/[0-9]* | wc -l)

names=() cmds=()
add() { names+=("$1"); shift; cmds+=("$*"); }
add "procps ps aux" ps aux
[ -n "$OLD" ] && add "taskdiag ps aux (before)" "$OLD/taskdiag" ps aux
add "taskdiag ps aux" "$rel/taskdiag" ps aux
[ -n "$OLD" ] && add "exporter scrape, auto (before)" "$OLD/taskdiag-exporter" \
    -config.path "$dir/all.yml" -once-to-stdout-delay 1ms
add "exporter scrape, auto" "$rel/taskdiag-exporter" -config.path "$dir/all.yml" \
    -once-to-stdout-delay 1ms

declare -A times
run() {
    local i=$1 t0 t1 rc=0
    t0=$(date +%s.%N)
    timeout -s KILL "$LIMIT" ${cmds[$i]} > /dev/null 2>&1 || rc=$?
    t1=$(date +%s.%N)
    [ "$rc" = 137 ] && times[$i]+=" timeout" || times[$i]+=" $(echo "$t1 - $t0" | bc)"
}
measure() {
    local wedged=$1
    for i in "${!cmds[@]}"; do
        run "$i"
        times[$i]=""
        for ((r = 0; r < RUNS; r++)); do run "$i"; done
    done
    echo "$procs processes (TASKS=$TASKS), wedged process: $wedged, $RUNS runs, $(uname -r)"
    echo
    echo "| command | wall (s), median [min-max] |"
    echo "|---|---|"
    for i in "${!cmds[@]}"; do
        if [[ ${times[$i]} == *timeout* ]]; then
            echo "| ${names[$i]} | timed out at ${LIMIT} s ($(echo "${times[$i]}" | grep -o timeout | wc -l) of $RUNS runs) |"
            continue
        fi
        read -r -a v <<< "$(echo "${times[$i]}" | tr ' ' '\n' | grep . | sort -g | tr '\n' ' ')"
        n=${#v[@]}
        printf '| %s | %.3f [%.3f-%.3f] |\n' "${names[$i]}" "${v[$((n / 2))]}" "${v[0]}" "${v[$((n - 1))]}"
    done
    echo
}
measure no
if [ "$WEDGE" = 1 ]; then
    cc -O1 -pthread -o "$dir/wedge_fixture" "$here/crates/test-support/src/wedge_fixture.c"
    mkdir "$dir/mnt"
    WEDGE_MARKER=bench "$dir/wedge_fixture" "$dir/mnt" > "$dir/wedge.out" 2>"$dir/wedge.err" &
    fixture_pid=$!
    until grep -q ready "$dir/wedge.out"; do
        kill -0 "$fixture_pid" 2>/dev/null || { cat "$dir/wedge.err" >&2; exit 1; }
        sleep 0.1
    done
    measure yes
fi
