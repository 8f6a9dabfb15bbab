// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Which tasks may have changed since user space last looked: for a refresh that re-reads only
 * those (taskdiag top) instead of walking every task.
 *
 *   track_switch  tp_btf/sched_switch         the task leaving a CPU ran: it is marked; the
 *                                             one entering is remembered as the CPU's current
 *                                             task (a task that runs through a whole interval
 *                                             never leaves its CPU, so user space reads these
 *                                             too)
 *   track_fork    tp_btf/sched_process_fork   a new task
 *   track_exit    tp_btf/sched_process_exit   a task exiting (its pid is still attached here,
 *                                             unlike at its last switch)
 *
 * A mark is the task's id and its thread group's id in the reader's pid namespace
 * (cfg_ns_inum), in the hash map `changed`; tasks without a pid there are not marked (the reader
 * cannot see them). User space drains `changed` (lookup-and-delete) before it reads the
 * marked tasks, so a change after the drain is marked for the next round and none is lost.
 * When `changed` is full a mark fails and `overflow` is set: user space then walks every task.
 *
 * What changes while a task does not run is not marked (another process renicing it, the
 * kernel reclaiming its memory, a zombie being reaped): user space bounds that with a periodic
 * full walk. Cost: one hash update per context switch (~0.1-0.2 us), for as long as the
 * programs are attached, which is as long as the process that attached them lives.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* A task's id and its thread group's, in the reader's pid namespace. */
struct ids {
	__u32 tid;
	__u32 tgid;
};

/* tid -> tgid of the tasks marked since the last drain. Resized by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} changed SEC(".maps");

/* Each CPU's current task (zeros: the idle task, or one the reader cannot see). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ids);
} running SEC(".maps");

/* The inode number of the reader's pid namespace. */
__u32 cfg_ns_inum = 0;
/* Set when a mark did not fit in `changed`; user space clears it. */
__u32 overflow = 0;

/*
 * @pid's number in the reader's namespace, 0 if it has none there: the namespace is found by
 * its inode among those @pid has a number in (one, on a host; one per level of nesting in a
 * container), as user space knows the reader's namespace only by its inode.
 */
static __always_inline __u32 nr_in(struct pid *pid)
{
	struct upid up = {};
	__u32 level, i;

	if (!pid)
		return 0;
	level = BPF_CORE_READ(pid, level);
	for (i = 0; i < 32; i++) {
		if (i > level)
			break;
		bpf_probe_read_kernel(&up, sizeof(up),
				      __builtin_preserve_access_index(&pid->numbers[i]));
		if (up.ns && BPF_CORE_READ(up.ns, ns.inum) == cfg_ns_inum)
			return up.nr;
	}
	return 0;
}

static __always_inline bool ids_of(struct task_struct *t, struct ids *i)
{
	i->tid = nr_in(BPF_CORE_READ(t, thread_pid));
	i->tgid = i->tid ? nr_in(BPF_CORE_READ(t, signal, pids[PIDTYPE_TGID])) : 0;
	return i->tid && i->tgid;
}

static __always_inline void mark(struct task_struct *t)
{
	struct ids i;

	if (!ids_of(t, &i))
		return;
	/* Most switches are of tasks marked already: a lookup is cheaper than an update. */
	if (bpf_map_lookup_elem(&changed, &i.tid))
		return;
	if (bpf_map_update_elem(&changed, &i.tid, &i.tgid, BPF_ANY))
		overflow = 1;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(track_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 zero = 0;
	struct ids *cur = bpf_map_lookup_elem(&running, &zero);

	mark(prev);
	if (cur && !ids_of(next, cur)) {
		cur->tid = 0;
		cur->tgid = 0;
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(track_fork, struct task_struct *parent, struct task_struct *child)
{
	mark(child);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(track_exit, struct task_struct *t)
{
	mark(t);
	return 0;
}
