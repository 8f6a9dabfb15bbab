// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The "bare minimal iterator" baseline: iter/task writing a fixed 32-byte record (pid, tgid,
 * ppid, uid, comm) per thread-group leader into the seq file. No namespaces, no CO-RE care.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct rec {
	__u32 pid, tgid, ppid, uid;
	char comm[16];
};

SEC("iter/task")
int min_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct rec r = {};

	if (!t || t->group_leader != t)
		return 0;
	r.pid = t->pid;
	r.tgid = t->tgid;
	r.ppid = t->real_parent->tgid;
	r.uid = t->real_cred->uid.val;
	__builtin_memcpy(r.comm, t->comm, sizeof(r.comm));
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
