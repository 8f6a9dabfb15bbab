// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The workloads of taskdiag profile's tests, built with frame pointers:
 *   burn      ~90% of its CPU time in hot_function(), the rest in cold_function()
 *   shares    50% / 30% / 20% of its CPU in share_a(), share_b(), share_c(), in two threads
 *             (perf agreement: two CPUs' worth of samples)
 *   block     threads named td-pipe, td-futex, td-sleep blocked in a pipe read, a futex wait
 *             and nanosleep; the main thread waits in pause()
 *   urandom   reads /dev/urandom in a loop (CPU time in the kernel's random generator)
 *   merge     a large region of identical pages offered to KSM (keeps ksmd busy)
 *   jit       spins in code it wrote into anonymous memory, named `jitted_loop` in the perf
 *             map a JIT writes (/tmp/perf-PID.map, PID as its own pid namespace numbers it)
 *   exec P    burns as `burn` until SIGUSR1, then executes program P in mode burn (the tests give
 *             it this fixture built non-PIE with hot_function under another name: the same
 *             addresses, other names)
 * Prints "ready" once its threads are in place, then runs until killed.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

/* Spins for @units of work: the loop every function below calls (inlined: no frame of its own). */
static inline __attribute__((always_inline)) void spin(unsigned long units)
{
	unsigned long x = sink;

	for (unsigned long i = 0; i < units * 1000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}

__attribute__((noinline)) void hot_function(void) { spin(9); }
__attribute__((noinline)) void cold_function(void) { spin(1); }
__attribute__((noinline)) void share_a(void) { spin(5); }
__attribute__((noinline)) void share_b(void) { spin(3); }
__attribute__((noinline)) void share_c(void) { spin(2); }

static void ready(void)
{
	puts("ready");
	fflush(stdout);
}

static int pipe_fds[2];
static int futex_word;

static void *pipe_reader(void *arg)
{
	char c;

	(void)arg;
	pthread_setname_np(pthread_self(), "td-pipe");
	for (;;)
		if (read(pipe_fds[0], &c, 1) <= 0)
			pause();
	return NULL;
}

static void *futex_waiter(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "td-futex");
	for (;;)
		syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
	return NULL;
}

static void *sleeper(void *arg)
{
	struct timespec ts = { .tv_sec = 3600 };

	(void)arg;
	pthread_setname_np(pthread_self(), "td-sleep");
	for (;;)
		nanosleep(&ts, NULL);
	return NULL;
}

static void block(void)
{
	pthread_t t;

	if (pipe(pipe_fds) || pthread_create(&t, NULL, pipe_reader, NULL) ||
	    pthread_create(&t, NULL, futex_waiter, NULL) || pthread_create(&t, NULL, sleeper, NULL)) {
		perror("block");
		exit(1);
	}
	/* Let the threads name themselves and block before saying ready. */
	usleep(200 * 1000);
	ready();
	for (;;)
		pause();
}

static void urandom(void)
{
	static char buf[1 << 16];
	int fd = open("/dev/urandom", O_RDONLY);

	if (fd < 0) {
		perror("/dev/urandom");
		exit(1);
	}
	ready();
	for (;;)
		if (read(fd, buf, sizeof(buf)) < 0)
			exit(1);
}

static void merge(void)
{
	size_t len = 256UL << 20;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED || madvise(p, len, MADV_MERGEABLE)) {
		perror("merge");
		exit(1);
	}
	ready();
	/* Dirty the pages again and again: ksmd keeps finding them to merge. */
	for (unsigned long round = 0;; round++) {
		for (size_t off = 0; off < len; off += 4096)
			p[off] = (char)round;
		usleep(100 * 1000);
	}
}

static void jit(void)
{
	unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char path[64];
	FILE *f;

	if (code == MAP_FAILED) {
		perror("jit");
		exit(1);
	}
	code[0] = 0xeb; /* jmp . */
	code[1] = 0xfe;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	f = fopen(path, "w");
	if (!f || fprintf(f, "%lx 2 jitted_loop\n", (unsigned long)code) < 0 || fclose(f)) {
		perror(path);
		exit(1);
	}
	ready();
	((void (*)(void))code)();
}

static volatile sig_atomic_t exec_now;

static void on_usr1(int sig)
{
	(void)sig;
	exec_now = 1;
}

static void burn_then_exec(const char *prog)
{
	signal(SIGUSR1, on_usr1);
	ready();
	while (!exec_now) {
		hot_function();
		cold_function();
	}
	execl(prog, prog, "burn", (char *)NULL);
	perror(prog);
	exit(1);
}

static void *shares(void *arg)
{
	(void)arg;
	for (;;) {
		share_a();
		share_b();
		share_c();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "burn";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "block"))
		block();
	if (!strcmp(mode, "urandom"))
		urandom();
	if (!strcmp(mode, "merge"))
		merge();
	if (!strcmp(mode, "jit"))
		jit();
	if (!strcmp(mode, "exec") && argc > 2)
		burn_then_exec(argv[2]);
	if (!strcmp(mode, "shares")) {
		pthread_t t;

		if (pthread_create(&t, NULL, shares, NULL)) {
			perror("shares");
			exit(1);
		}
		ready();
		shares(NULL);
	}
	ready();
	for (;;) {
		hot_function();
		cold_function();
	}
}
