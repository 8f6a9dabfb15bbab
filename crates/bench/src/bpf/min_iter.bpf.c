// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The "bare minimal iterator" floor (row B0): iter/task writing a fixed 32-byte record (pid,
 * tgid, ppid, uid, comm) per thread-group leader into the seq file. No namespaces, no
 * fallbacks: what any BPF task dump costs at least. Read by src/c/min_iter.c.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * vmlinux_min.h (crates/bpf) leaves out task_struct's global ids, which taskdiag reads through
 * the task's struct pid; this program copies them as they are. A CO-RE flavor of task_struct.
 */
struct task_struct___ids {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

struct rec {
	__u32 pid, tgid, ppid, uid;
	char comm[16];
};

SEC("iter/task")
int min_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct task_struct___ids *ids = (void *)t;
	struct rec r = {};

	if (!t || t->group_leader != t)
		return 0;
	r.pid = ids->pid;
	r.tgid = ids->tgid;
	r.ppid = ((struct task_struct___ids *)t->real_parent)->tgid;
	r.uid = t->real_cred->uid.val;
	__builtin_memcpy(r.comm, t->comm, sizeof(r.comm));
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
