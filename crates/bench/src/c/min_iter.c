// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * min_iter: loads min_iter.bpf.o, reads its iterator to the end and counts records.
 *
 *   min_iter PATH/min_iter.bpf.o
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	static char buf[65536];
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_link *link;
	long total = 0;
	ssize_t n;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: min_iter OBJ\n");
		return 2;
	}
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "min_iter: cannot load %s\n", argv[1]);
		return 1;
	}
	prog = bpf_object__find_program_by_name(obj, "min_iter");
	link = prog ? bpf_program__attach_iter(prog, NULL) : NULL;
	fd = link ? bpf_iter_create(bpf_link__fd(link)) : -1;
	if (fd < 0) {
		fprintf(stderr, "min_iter: cannot create the iterator\n");
		return 1;
	}
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		total += n;
	fprintf(stderr, "tasks: %ld\n", total / 32);
	close(fd);
	bpf_link__destroy(link);
	bpf_object__close(obj);
	return n < 0;
}
