/* A process whose program is mapped low: built by the maps tests with `cc -no-pie -static`,
 * so its text, data, bss and heap sit at 0x400000 and up, where /proc/PID/maps pads
 * addresses to 8 hex digits.
 *
 * Usage: nopie_fixture [THREADS [ANYTHING...]]
 * Grows its heap by 1 MiB, starts THREADS threads that wait forever, prints "ready" and
 * waits until its standard input ends. Further arguments are ignored (tests pass odd bytes
 * to see command lines escaped). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *wait_forever(void *arg)
{
	for (;;)
		pause();
	return arg;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 0;
	char *heap = malloc(1 << 20);
	char c;

	if (!heap)
		return 1;
	memset(heap, 1, 1 << 20);
	for (int i = 0; i < threads; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, wait_forever, NULL))
			return 1;
	}
	printf("ready\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
