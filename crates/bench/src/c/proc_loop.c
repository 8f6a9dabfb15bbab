// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * proc_loop: the procfs floor, as the task_diag article's task_proc_all measured it.
 *
 *   proc_loop [--noread] FILE...
 *
 * readdir(/proc); for each process, for every FILE given, in order:
 *   FILE            open("/proc/PID/FILE"), one read() of up to 16 KiB (none with --noread),
 *                   more only while a read fills the buffer (a longer file is read to its
 *                   end), close();
 *   readlink:FILE   readlink("/proc/PID/FILE") (e.g. readlink:ns/net, as lsns and ps do).
 * Vanished processes are counted, not fatal. Prints "tasks: N" on standard error.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LINK_PREFIX "readlink:"

int main(int argc, char **argv)
{
	static char buf[16384], path[512];
	int noread = 0, first = 1, i, n = 0, gone = 0;
	struct dirent *e;
	DIR *d;

	if (argc > 1 && !strcmp(argv[1], "--noread")) {
		noread = 1;
		first = 2;
	}
	if (first >= argc) {
		fprintf(stderr, "usage: proc_loop [--noread] [readlink:]FILE...\n");
		return 2;
	}
	d = opendir("/proc");
	if (!d) {
		perror("/proc");
		return 1;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		for (i = first; i < argc; i++) {
			const char *f = argv[i];
			ssize_t got;
			int fd;

			if (!strncmp(f, LINK_PREFIX, strlen(LINK_PREFIX))) {
				snprintf(path, sizeof(path), "/proc/%s/%s", e->d_name,
					 f + strlen(LINK_PREFIX));
				if (readlink(path, buf, sizeof(buf)) < 0)
					gone++;
				continue;
			}
			snprintf(path, sizeof(path), "/proc/%s/%s", e->d_name, f);
			fd = open(path, O_RDONLY);
			if (fd < 0) {
				gone++;
				continue;
			}
			do {
				got = noread ? 0 : read(fd, buf, sizeof(buf));
			} while (got == (ssize_t)sizeof(buf));
			if (got < 0)
				gone++;
			close(fd);
		}
		n++;
	}
	closedir(d);
	fprintf(stderr, "tasks: %d (vanished: %d)\n", n, gone);
	return 0;
}
