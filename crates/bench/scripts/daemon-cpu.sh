#!/bin/bash
# Interleaved CPU time of two taskdiagd builds answering the same requests (issue 13's
# before/after): per request, wall (ms), the client's CPU (ms, /usr/bin/time) and the daemon's
# CPU (ms, utime+stime of /proc/PID/stat before and after). CPU time, unlike wall time, stays
# comparable when the machine is busy. Run as root from the repository; N sleeping processes are
# forked by a small C program built here (the bench's own spawner lives inside taskdiag-bench)
# and killed, by pid, when standard input closes.
#
#   crates/bench/scripts/daemon-cpu.sh OLD_BIN_DIR NEW_BIN_DIR [N] [RUNS]
set -eu
OLD=$1 NEW=$2 N=${3:-50000} RUNS=${4:-11}
work=$(mktemp -d)
chmod 755 "$work" # the clients run as nobody
cc -O2 -x c -o "$work/spawn" - <<'C'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	long n = atol(argv[1]), i;
	pid_t *kids = calloc(n, sizeof(*kids));
	char c;
	for (i = 0; i < n; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			close(0);
			for (;;)
				pause();
		}
		if (kids[i] < 0)
			break;
	}
	printf("ready %ld\n", i);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	for (long j = 0; j < i; j++)
		kill(kids[j], SIGKILL);
	while (wait(NULL) > 0)
		;
	return 0;
}
C
exec 3> >("$work/spawn" "$N" > "$work/spawn.out")
until grep -q ready "$work/spawn.out" 2>/dev/null; do sleep 1; done
"$OLD/taskdiagd" --foreground --socket "$work/old.sock" </dev/null >/dev/null 2>&1 & OD=$!
"$NEW/taskdiagd" --foreground --socket "$work/new.sock" </dev/null >/dev/null 2>&1 & ND=$!
trap 'kill $OD $ND 2>/dev/null; exec 3>&-; rm -rf "$work"' EXIT
until [ -S "$work/old.sock" ] && [ -S "$work/new.sock" ]; do sleep 0.2; done
tck=$(getconf CLK_TCK)
dcpu() { awk -v t="$tck" '{ s = substr($0, index($0, ")") + 2); split(s, f, " "); print (f[12] + f[13]) * 1000 / t }' "/proc/$1/stat"; }
one() { # label bin-dir socket daemon-pid extra-args...
    local l=$1 b=$2 s=$3 d=$4; shift 4
    local c0 t0 t1 c1 u sy
    c0=$(dcpu "$d"); t0=$(date +%s%N)
    /usr/bin/time -f "%U %S" -o "$work/time" setpriv --reuid 65534 --regid 65534 --clear-groups \
        "$b/taskdiag" dump --backend daemon --socket "$s" --groups base,cred "$@" >/dev/null
    t1=$(date +%s%N); c1=$(dcpu "$d")
    read -r u sy < "$work/time"
    echo "$l wall_ms $(((t1 - t0) / 1000000)) client_cpu_ms $(echo "($u + $sy) * 1000" | bc) daemon_cpu_ms $(echo "$c1 - $c0" | bc)"
}
echo "# $(cat "$work/spawn.out"); $(ls /proc | grep -c '^[0-9]') processes"
for _ in $(seq "$RUNS"); do
    one "one old" "$OLD" "$work/old.sock" $OD
    one "one new" "$NEW" "$work/new.sock" $ND
    one "rep old" "$OLD" "$work/old.sock" $OD --repeat 20
    one "rep new" "$NEW" "$work/new.sock" $ND --repeat 20
done
