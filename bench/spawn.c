// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * spawn: the load generator of the task_diag experiments (`fork nproc [threads]`).
 *
 *   spawn NPROC [THREADS]
 *
 * Forks NPROC processes that sleep in pause(), each with THREADS-1 extra threads (default 1:
 * no extra thread), prints "ready N" on stdout, then waits until its standard input closes or
 * it gets SIGINT/SIGTERM, kills exactly the processes it forked (by pid) and reaps them.
 * Raises /proc/sys/kernel/pid_max when needed and restores it on exit.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t *kids;
static long nkids;
static long old_pid_max;

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static void write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fprintf(f, "%ld\n", v);
		fclose(f);
	}
}

static void *sleeper(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static void child(int threads)
{
	pthread_attr_t a;
	pthread_t t;
	int i;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 * 1024);
	for (i = 1; i < threads; i++)
		pthread_create(&t, &a, sleeper, NULL);
	for (;;)
		pause();
}

static void cleanup(void)
{
	long i;

	for (i = 0; i < nkids; i++)
		kill(kids[i], SIGKILL);
	for (i = 0; i < nkids; i++)
		waitpid(kids[i], NULL, 0);
	nkids = 0;
	if (old_pid_max > 0)
		write_long("/proc/sys/kernel/pid_max", old_pid_max);
}

static void on_signal(int sig)
{
	(void)sig;
	cleanup();
	_exit(0);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 50000, i;
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	long need = (n * (threads > 0 ? threads : 1)) * 2 + 10000;
	char c;

	if (n <= 0 || threads <= 0) {
		fprintf(stderr, "usage: spawn NPROC [THREADS]\n");
		return 2;
	}
	old_pid_max = read_long("/proc/sys/kernel/pid_max");
	if (old_pid_max > 0 && old_pid_max < need)
		write_long("/proc/sys/kernel/pid_max", need > 4194304 ? 4194304 : need);
	else
		old_pid_max = -1;
	kids = calloc(n, sizeof(*kids));
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < n; i++) {
		pid_t p = fork();

		if (p < 0) {
			fprintf(stderr, "spawn: fork %ld: %s\n", i, strerror(errno));
			cleanup();
			return 1;
		}
		if (p == 0)
			child(threads);
		kids[nkids++] = p;
	}
	printf("ready %ld\n", nkids);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	cleanup();
	return 0;
}
