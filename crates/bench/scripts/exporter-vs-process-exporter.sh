#!/bin/bash
# taskdiag exporter against Debian's prometheus-process-exporter (0.7.10) on TASKS sleeping
# processes (issue 20): per scrape, wall time (curl) and the exporter's CPU time (utime+stime of
# /proc/PID/stat before and after), the same over the whole run divided by the scrapes (with what
# it does between them: ours reads aged smaps rollups again in the background), and each
# exporter's peak memory (VmHWM) at the end. Both run with the same config (every process with a
# command line, grouped by name: process-exporter's packaged config) and the same flags; the
# scrapes alternate between them. Ours is measured as root (BPF) and as an unprivileged user
# through taskdiagd. Run as root from the repository after `cargo build --release --workspace`:
#
#   crates/bench/scripts/exporter-vs-process-exporter.sh [TASKS] [RUNS] [EXTRA FLAGS...]
#   crates/bench/scripts/exporter-vs-process-exporter.sh 50000 5 -gather-smaps=false
#
# EXPORTERS (default "pe bpf daemon") chooses which run; GAP seconds between rounds (default 0);
# THREADS threads in each held process (default 1; the thread metrics, -threads, are on).
# `EXPORTERS="bpf daemon" GAP=1` is ours alone in the steady state of a short scrape interval
# (process-exporter's 70 s scrapes otherwise space ours 70 s apart). The daemon row's CPU is
# the exporter's plus taskdiagd's. AGAIN=K (default 0) scrapes each of ours K more times, 1 s
# apart, right after its scrape in a round, and reports those scrapes in rows of their own: the
# steady state of a short scrape interval (rollups and wait channels reused), in the same run
# as process-exporter's.
set -eu
TASKS=${1:-50000} RUNS=${2:-5} EXPORTERS=${EXPORTERS:-pe bpf daemon} GAP=${GAP:-0} THREADS=${THREADS:-1}
AGAIN=${AGAIN:-0}
HZ=$(getconf CLK_TCK)
[ "$RUNS" -ge 1 ] || { echo "RUNS must be at least 1" >&2; exit 2; }
shift $(( $# > 2 ? 2 : $# ))
FLAGS=("$@")
here=$(cd "$(dirname "$0")/../../.." && pwd)
rel=$here/target/release
. "$here/crates/bench/scripts/hold.sh"
command -v prometheus-process-exporter >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus-process-exporter >/dev/null
id taskdiag-bench >/dev/null 2>&1 ||
    useradd --system --no-create-home --shell /usr/sbin/nologin taskdiag-bench
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    unhold
}
trap cleanup EXIT
hold "$rel/taskdiag-bench" "$TASKS" "$THREADS"
chmod 755 "$dir"
printf 'process_names:\n  - name: "{{.Comm}}"\n    cmdline: [".+"]\n' > "$dir/all.yml"
chmod 644 "$dir/all.yml"

"$rel/taskdiagd" --foreground --socket "$dir/td.sock" 2>"$dir/td.err" &
pid_taskdiagd=$!
pids+=($pid_taskdiagd)
until [ -S "$dir/td.sock" ]; do sleep 0.1; done

# name port command...
start() {
    local name=$1 port=$2
    shift 2
    "$@" -config.path "$dir/all.yml" -web.listen-address "127.0.0.1:$port" "${FLAGS[@]}" \
        >/dev/null 2>"$dir/$name.err" &
    local pid=$!
    pids+=($pid)
    eval "pid_$name=$pid port_$name=$port"
    until curl -sf -o /dev/null "http://127.0.0.1:$port/"; do
        kill -0 "$pid" || { cat "$dir/$name.err" >&2; exit 1; }
        sleep 0.2
    done
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for name in $EXPORTERS; do
    case $name in
    pe) start pe 19301 prometheus-process-exporter ;;
    bpf) start bpf 19302 "$rel/taskdiag-exporter" -backend bpf ;;
    daemon)
        start daemon 19303 env TASKDIAG_SOCKET="$dir/td.sock" \
            setpriv --reuid taskdiag-bench --regid taskdiag-bench --init-groups --inh-caps=-all \
            "$rel/taskdiag-exporter" -backend daemon
        ;;
    *) echo "unknown exporter $name (pe, bpf, daemon)" >&2; exit 2 ;;
    esac
done

echo "$(ls /proc | grep -c '^[0-9]') processes in /proc, $(awk '{sub(/.*\//, "", $4); print $4}' /proc/loadavg) tasks; $RUNS scrape(s) each after a warm-up; flags: ${FLAGS[*]:-(defaults)}; kernel $(uname -r); $(nproc) CPUs"
echo
echo "| exporter | wall per scrape (s), median [min-max] | CPU per scrape (s), median [min-max] | CPU per scrape (s), mean | CPU per scrape (s), whole run | peak memory (VmHWM) | series |"
echo "|---|---|---|---|---|---|---|"
declare -A wall cpu since
for name in $EXPORTERS; do wall[$name]=""; cpu[$name]=""; wall[$name+]=""; cpu[$name+]=""; done
# An exporter's CPU from the end of the warm-up round to the end of the run (with taskdiagd's
# for the daemon row): what it does between scrapes as well (the rollups it reads again in the
# background), divided by its scrapes.
total_ticks() {
    local pid t
    eval "pid=\$pid_$1"
    t=$(ticks "$pid")
    [ "$1" = daemon ] && t=$((t + $(ticks "$pid_taskdiagd")))
    echo "$t"
}
# scrape NAME KEY: one scrape of exporter NAME, its wall and CPU time added to KEY's lists
# (after the warm-up round).
scrape() {
    local name=$1 key=$2 pid port t0 t1 w
    eval "pid=\$pid_$name port=\$port_$name"
    t0=$(ticks "$pid")
    [ "$name" = daemon ] && t0=$((t0 + $(ticks "$pid_taskdiagd")))
    w=$(curl -s -o "$dir/$name.out" -w '%{time_total}' "http://127.0.0.1:$port/metrics")
    t1=$(ticks "$pid")
    [ "$name" = daemon ] && t1=$((t1 + $(ticks "$pid_taskdiagd")))
    if [ "$r" -gt 0 ]; then
        wall[$key]+="$w "
        cpu[$key]+="$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" 'BEGIN{printf "%.2f", (b-a)/hz}') "
    fi
}
for r in $(seq 0 "$RUNS"); do
    for name in $EXPORTERS; do
        scrape "$name" "$name"
        if [ "$name" != pe ]; then
            for _ in $(seq "$AGAIN"); do sleep 1; scrape "$name" "$name+"; done
        fi
    done
    if [ "$r" = 0 ]; then
        for name in $EXPORTERS; do since[$name]=$(total_ticks "$name"); done
    fi
    sleep "$GAP"
done
# The last round's background reads end before the figures are taken: until no exporter's CPU
# time moves for 2 s (60 s at most).
settled=0 last=""
for _ in $(seq 60); do
    now=""
    for name in $EXPORTERS; do now+="$(total_ticks "$name") "; done
    if [ "$now" = "$last" ]; then settled=$((settled + 1)); else settled=0; fi
    [ "$settled" -ge 2 ] && break
    last=$now
    sleep 1
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END{printf "%s [%s-%s]", v[int((NR+1)/2)], v[1], v[NR]}'; }
# The mean of per-scrape CPU times, to the millisecond: each is whole clock ticks (10 ms), so
# at a few ticks a scrape only the mean over many scrapes resolves a ratio.
mean() { tr ' ' '\n' | grep . | awk '{s+=$1} END{printf "%.3f", s/NR}'; }
for name in $EXPORTERS; do
    eval "pid=\$pid_$name"
    label=$name
    case $name in
        pe) label="process-exporter 0.7.10 (root)" ;;
        bpf) label="taskdiag exporter, BPF (root)" ;;
        daemon) label="taskdiag exporter, taskdiagd (user; CPU with the daemon's)" ;;
    esac
    hwm=$(awk '/VmHWM/{printf "%.0f MiB", $2/1024}' "/proc/$pid/status")
    n=$(grep -c '^namedprocess_namegroup_' "$dir/$name.out" || true)
    scrapes=$RUNS
    [ "$name" != pe ] && scrapes=$((RUNS * (1 + AGAIN)))
    whole=$(awk -v a="${since[$name]}" -v b="$(total_ticks "$name")" -v n="$scrapes" \
        -v hz="$HZ" 'BEGIN{printf "%.3f", (b-a)/hz/n}')
    echo "| $label | $(echo "${wall[$name]}" | median) | $(echo "${cpu[$name]}" | median) | $(echo "${cpu[$name]}" | mean) | $whole | $hwm | $n |"
    if [ -n "${wall[$name+]}" ]; then
        echo "| the same, scraped again 1 s later | $(echo "${wall[$name+]}" | median) | $(echo "${cpu[$name+]}" | median) | $(echo "${cpu[$name+]}" | mean) | (above) | | |"
    fi
done
