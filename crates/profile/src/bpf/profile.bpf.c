// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * taskdiag profile: one sample of every thread in scope at the same rate, on CPU or off.
 *
 * on_cpu (perf_event, one cpu-clock event per CPU at F Hz) samples the thread each CPU is
 * running, with its kernel and user stacks taken in context, and counts a period (1/F s) for
 * it. off_cpu (the task iterator, walked by user space) looks at every thread *not* on a CPU:
 * its state, the system call it is blocked in, its kernel stack (bpf_get_task_stack) and, in
 * off_cpu_user (sleepable, 5.18+), its user stack by a frame-pointer walk of its saved
 * registers; and counts for it the time it spent off CPU since the previous walk: the wall time
 * between the two walks less the CPU time it used meanwhile (sum_exec_runtime), which its
 * perf_event samples counted. So every thread's counts add up to its wall-clock time however
 * often the walks come: user space spaces them so that walking costs a bounded share of a CPU.
 * A thread that did not run between two walks (same switch count and state) was off CPU all
 * along, in the same state, with the same stacks: exact, and not unwound again (`seen`).
 *
 * Counts are kept in the kernel, in nanoseconds: `counts` maps a td_prof_key (thread, state,
 * system call, stack ids) to a time; `stacks` maps a stack id (a hash of its addresses, seeded
 * with the process for user stacks) to the addresses, stored once. A new user stack's id is
 * also written to `fresh`, a ring buffer user space drains (woken by the first record after a
 * drain, then at most every 0.1 s) to symbolize it while its process lives.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "taskdiag_wire.h"
#include "task_state.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAX_PIDNS_LEVEL 32
#define TD_E2BIG 7
#define BPF_F_USER_STACK (1ULL << 8)

/* Set by user space before the load. */
/* The pid namespace whose threads are sampled and whose pids they are shown with (its inode). */
const volatile __u32 cfg_ns_inum = 0;
/* The profiler's own pid namespace, and how many levels above it /proc's is (key.proc_pid,
 * proc_tgid): 0 but in a shell that entered a child namespace and kept its parent's /proc. */
const volatile __u32 cfg_caller_ns_inum = 0;
const volatile __u32 cfg_proc_up = 0;
/* Only threads in this cgroup (v2, its id) or below, if not 0. */
const volatile __u64 cfg_cgroup_id = 0;
/* The profiler itself (its pid in /proc's namespace), never sampled. */
const volatile __u32 cfg_self = 0;
/* Only the processes in `tgids` (pids in cfg_ns_inum's namespace). */
const volatile bool cfg_only_tgids = false;
/* The sampling period, 1/F s in nanoseconds: what an on-CPU sample counts. */
const volatile __u64 cfg_period_ns = 20408163;
/* When the profile began (CLOCK_BOOTTIME, ns; set by user space before the first walk), and
 * when it ends (set at the beginning with -d, else when it has ended; 0 until then): on-CPU
 * samples are counted between the two only, and the last walk, which may come later, counts
 * time off CPU up to the end only. */
__u64 cfg_begin_ns = 0;
__u64 cfg_end_ns = 0;

/* What happened, for the summary line. The off-CPU counters are written by the iterator alone,
 * which only the profiler's thread runs: plain increments. */
__u64 n_on_cpu = 0, n_dropped = 0, n_stacks_lost = 0;
__u64 n_off_cpu = 0, n_reused = 0;

struct prof_stack {
	struct td_prof_stack_hdr hdr;
	__u64 ips[TD_PROF_STACK_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct td_prof_key);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct prof_stack);
} stacks SEC(".maps");

/*
 * New user stacks, each a td_prof_fresh (its id and the process whose addresses they are),
 * which user space reads every period without a system call (a hash map's keys cost a walk
 * of every bucket, full or not, at each drain). Sized by user space.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 19);
} fresh SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} tgids SEC(".maps");

/*
 * An off-CPU thread's last sample: reused while it has not run since. Its samples under `key`
 * are counted here (`pending`), not in `counts`, while it sleeps on: one look-up a period. They
 * move to `counts` when its key changes; user space adds what is left at the end. Not an LRU
 * map: an evicted entry would lose its pending samples (a full map sends new threads to
 * `counts` directly).
 */
struct seen {
	/* start, switches, pending, state, out (not sampled: decided again when it has run). */
	struct td_prof_seen_hdr h;
	struct td_prof_key key;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct seen);
} seen SEC(".maps");

struct scratch {
	struct prof_stack s;
	struct td_prof_key key;
	struct seen seen;
};

/* One per CPU for on_cpu (it may interrupt anything on its CPU); one for the iterator, which
 * only the profiler's own thread reads. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} on_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} off_scratch SEC(".maps");

/* @p's number at @level (0 if it has none there). */
static __always_inline __u32 nr_at(struct pid *p, __u32 level)
{
	struct upid up = {};

	bpf_probe_read_kernel(&up, sizeof(up), __builtin_preserve_access_index(&p->numbers[level & (MAX_PIDNS_LEVEL - 1)]));
	return up.nr;
}

/*
 * Fills key->pid/tgid with @t's ids in the profiled namespace and proc_pid/proc_tgid with its
 * ids in /proc's (cfg_proc_up levels above the profiler's own); false if the thread is not in
 * the profiled namespace.
 */
static __always_inline bool ns_ids(struct task_struct *t, struct td_prof_key *key)
{
	struct pid *p = BPF_CORE_READ(t, thread_pid);
	struct pid *lp = BPF_CORE_READ(t, group_leader, thread_pid);
	__u32 level = BPF_CORE_READ(p, level);
	__u32 i, inum, caller = MAX_PIDNS_LEVEL;
	bool found = false;
	struct upid up;

	for (i = 0; i < MAX_PIDNS_LEVEL; i++) {
		if (i > level)
			break;
		if (bpf_probe_read_kernel(&up, sizeof(up), __builtin_preserve_access_index(&p->numbers[i])))
			return false;
		inum = BPF_CORE_READ(up.ns, ns.inum);
		if (inum == cfg_caller_ns_inum)
			caller = i;
		if (inum == cfg_ns_inum) {
			key->pid = up.nr;
			key->tgid = nr_at(lp, i);
			found = true;
			break;
		}
	}
	if (!found)
		return false;
	if (caller < MAX_PIDNS_LEVEL && caller >= cfg_proc_up) {
		key->proc_pid = nr_at(p, caller - cfg_proc_up);
		key->proc_tgid = nr_at(lp, caller - cfg_proc_up);
	}
	return true;
}

/* Whether @t is in cgroup cfg_cgroup_id or below it (unified hierarchy). */
static __always_inline bool in_cgroup(struct task_struct *t)
{
	struct cgroup *cg = BPF_CORE_READ(t, cgroups, dfl_cgrp);
	struct cgroup_subsys_state *css;
	__u32 i;

	for (i = 0; i < 64 && cg; i++) {
		if (BPF_CORE_READ(cg, kn, id) == cfg_cgroup_id)
			return true;
		css = BPF_CORE_READ(cg, self.parent);
		if (!css)
			break;
		cg = (void *)css - bpf_core_field_offset(struct cgroup, self);
	}
	return false;
}

/* Whether @t is profiled; fills the key's ids, name and flags if so. */
static __always_inline bool in_scope(struct task_struct *t, struct td_prof_key *key)
{
	__builtin_memset(key, 0, sizeof(*key));
	if (!ns_ids(t, key) || (cfg_self && key->proc_tgid == cfg_self))
		return false;
	if (cfg_only_tgids && !bpf_map_lookup_elem(&tgids, &key->tgid))
		return false;
	if (cfg_cgroup_id && !in_cgroup(t))
		return false;
	bpf_probe_read_kernel(&key->comm_lo, 16, __builtin_preserve_access_index(&t->comm));
	if (BPF_CORE_READ(t, flags) & TD_PF_KTHREAD)
		key->flags |= TD_PROF_F_KTHREAD;
	key->syscall = -1;
	return true;
}

/* The stack's id: FNV-1a over its addresses and flags, seeded (a user stack with its process,
 * whose addresses they are); never 0, which means "no stack". */
static __always_inline __u64 stack_id(struct prof_stack *s, __u64 seed)
{
	__u64 h = 0xcbf29ce484222325ULL ^ seed;
	__u32 nr = s->hdr.nr, i;

	for (i = 0; i < TD_PROF_STACK_DEPTH; i++) {
		if (i >= nr)
			break;
		h = (h ^ s->ips[i]) * 0x100000001b3ULL;
	}
	h = (h ^ s->hdr.flags) * 0x100000001b3ULL;
	return h ? h : 1;
}

/*
 * Stores @s once and returns its id (0 for an empty stack). A user stack (@t non-NULL) is of
 * @t's process: its id is seeded with the process's pid, start and exec count (the same
 * addresses are other code in another process, or after an exec), and a new one is written to
 * `fresh` with them.
 */
static __always_inline __u64 put_stack(struct prof_stack *s, struct task_struct *t,
				       __u32 proc_tgid)
{
	struct td_prof_fresh f = {};
	struct task_struct *leader;
	__u64 id, seed = 0;
	long err;

	if (!s->hdr.nr)
		return 0;
	if (t) {
		leader = BPF_CORE_READ(t, group_leader);
		f.proc_start = BPF_CORE_READ(leader, start_boottime);
		f.exec_id = BPF_CORE_READ(leader, self_exec_id);
		seed = ((__u64)proc_tgid << 32 | 1) ^ (f.proc_start + f.exec_id * 0x9e3779b97f4a7c15ULL);
	}
	id = stack_id(s, seed);
	err = bpf_map_update_elem(&stacks, &id, s, BPF_NOEXIST);
	if (err == 0 && t) {
		f.id = id;
		f.proc_tgid = proc_tgid;
		/* The kernel's adaptive wake-up: user space is woken by the first record after it
		 * drained the ring, not by each (and drains at most every 0.1 s). Full (not
		 * drained for a long time): the stack is named at the end, if its process lives. */
		bpf_ringbuf_output(&fresh, &f, sizeof(f), 0);
	}
	if (err == -TD_E2BIG) {
		/* The stack map is full: the sample is kept, without this stack. */
		__sync_fetch_and_add(&n_stacks_lost, 1);
		return 0;
	}
	/* Stored now or before (-EEXIST); another error (a busy bucket) leaves the stack to the
	 * next sample of it. */
	return id;
}

/* @add more samples for @key. */
static __always_inline void count_n(struct td_prof_key *key, __u64 add)
{
	__u64 *n;

	n = bpf_map_lookup_elem(&counts, key);
	if (n) {
		__sync_fetch_and_add(n, add);
		return;
	}
	if (bpf_map_update_elem(&counts, key, &add, BPF_NOEXIST)) {
		n = bpf_map_lookup_elem(&counts, key);
		if (n)
			__sync_fetch_and_add(n, add);
		else
			__sync_fetch_and_add(&n_dropped, add);
	}
}


/* A stack from bpf_get_stack()/bpf_get_task_stack()'s byte count @n. */
static __always_inline void took(struct prof_stack *s, long n)
{
	s->hdr.nr = n > 0 ? (__u32)((__u64)n / 8) : 0;
	s->hdr.flags = s->hdr.nr >= TD_PROF_STACK_DEPTH ? TD_PROF_STACK_TRUNCATED : 0;
}

SEC("perf_event")
int on_cpu(void *ctx)
{
	struct task_struct *t;
	struct scratch *sc;
	__u32 zero = 0;
	__u64 now;
	long n;

	if ((__u32)bpf_get_current_pid_tgid() == 0)
		return 0; /* the idle task */
	/* Only inside the profile's window: the events fire from the load on, and go on until
	 * the profiler, perhaps late on a loaded machine, closes them. */
	now = bpf_ktime_get_boot_ns();
	if (!cfg_begin_ns || now < cfg_begin_ns || (cfg_end_ns && now > cfg_end_ns))
		return 0;
	sc = bpf_map_lookup_elem(&on_scratch, &zero);
	if (!sc)
		return 0;
	t = (void *)bpf_get_current_task();
	if (!in_scope(t, &sc->key))
		return 0;
	sc->key.state = TD_PROF_RUNNING;
	n = bpf_get_stack(ctx, sc->s.ips, sizeof(sc->s.ips), 0);
	took(&sc->s, n);
	sc->key.kstack = put_stack(&sc->s, NULL, 0);
	if (!(sc->key.flags & TD_PROF_F_KTHREAD)) {
		n = bpf_get_stack(ctx, sc->s.ips, sizeof(sc->s.ips), BPF_F_USER_STACK);
		took(&sc->s, n);
		sc->key.ustack = put_stack(&sc->s, t, sc->key.proc_tgid);
	}
	count_n(&sc->key, cfg_period_ns);
	__sync_fetch_and_add(&n_on_cpu, 1);
	return 0;
}

/*
 * The user stack of blocked @task from its saved user registers: the instruction pointer, the
 * word at the stack pointer (a frameless leaf's return address, perhaps: user space decides),
 * then the return addresses of the frame-pointer chain.
 */
static __always_inline void user_stack(struct task_struct *task, struct prof_stack *s,
				       struct td_prof_key *key)
{
	struct pt_regs *regs = (void *)bpf_task_pt_regs(task);
	__u64 bp, fr[2], word;
	__u32 i, nr;

	key->syscall = key->state == TD_PROF_RUNNABLE ? -1 : (int)BPF_CORE_READ(regs, orig_ax);
	s->hdr.nr = 0;
	s->hdr.flags = 0;
	s->ips[0] = BPF_CORE_READ(regs, ip);
	if (!s->ips[0])
		return;
	nr = 1;
	if (!bpf_copy_from_user_task(&word, sizeof(word), (void *)BPF_CORE_READ(regs, sp), task, 0) && word) {
		s->ips[1] = word;
		s->hdr.flags |= TD_PROF_STACK_LEAF_SP;
		nr = 2;
	}
	bp = BPF_CORE_READ(regs, bp);
	for (i = 0; i < TD_PROF_STACK_DEPTH; i++) {
		if (!bp)
			break; /* the outermost frame */
		if (nr >= TD_PROF_STACK_DEPTH) {
			s->hdr.flags |= TD_PROF_STACK_TRUNCATED;
			break;
		}
		/* A frame that cannot be read, or that does not lead outwards, ends the walk: a
		 * function without a frame pointer (user space sees where the stack ended). */
		if (bpf_copy_from_user_task(fr, sizeof(fr), (void *)bp, task, 0) || !fr[1])
			break;
		s->ips[nr++] = fr[1];
		if (fr[0] && fr[0] <= bp)
			break;
		bp = fr[0];
	}
	s->hdr.nr = nr;
}

static __always_inline int off_cpu(struct bpf_iter__task *ctx, bool user)
{
	struct task_struct *task = ctx->task;
	__u64 switches, start, now, runtime, off, from;
	__u32 zero = 0, st, state, tid;
	struct scratch *sc;
	struct seen *old;
	bool same;
	long n;

	/* Plain loads of the iterator's (trusted) task first: most threads slept since the last
	 * walk and are counted again under their previous key from these alone. */
	if (!task || task->exit_state)
		return 0;
	if (task->on_cpu) {
		/* perf_event counts it. A thread on a CPU when first walked gets a baseline (when,
		 * and its CPU time then): its time off CPU is counted from there, not from the
		 * profile's beginning. */
		tid = task->pid;
		if (!bpf_map_lookup_elem(&seen, &tid) &&
		    (sc = bpf_map_lookup_elem(&off_scratch, &zero))) {
			__builtin_memset(&sc->seen, 0, sizeof(sc->seen));
			sc->seen.h.start = task->start_boottime;
			sc->seen.h.walked = bpf_ktime_get_boot_ns();
			sc->seen.h.runtime = task->se.sum_exec_runtime;
			sc->seen.h.state = TD_PROF_RUNNING;
			bpf_map_update_elem(&seen, &tid, &sc->seen, BPF_NOEXIST);
		}
		return 0;
	}
	st = state_index(task);
	state = st == 0 ? TD_PROF_RUNNABLE : TD_PROF_STATE_INDEX + st;
	switches = task->nvcsw + task->nivcsw;
	start = task->start_boottime;
	runtime = task->se.sum_exec_runtime;
	tid = task->pid;
	now = bpf_ktime_get_boot_ns();
	if (cfg_end_ns && now > cfg_end_ns)
		now = cfg_end_ns;
	old = bpf_map_lookup_elem(&seen, &tid);
	same = old && old->h.start == start;
	if (same) {
		/* Off CPU since the last walk: the time between, less the CPU time it used. */
		off = now > old->h.walked ? now - old->h.walked : 0;
		off = off > runtime - old->h.runtime ? off - (runtime - old->h.runtime) : 0;
	} else {
		/* First seen: off CPU since the profile (or the thread) began, less its CPU time
		 * if it began since (before, its CPU time is not the profile's). */
		from = start > cfg_begin_ns ? start : cfg_begin_ns;
		off = now > from ? now - from : 0;
		if (start > cfg_begin_ns)
			off = off > runtime ? off - runtime : 0;
	}
	if (same && old->h.switches == switches && old->h.state == state) {
		/* It has not run since (a rename, a move to another namespace needs it to run):
		 * same key, or still out of scope. */
		old->h.walked = now;
		if (old->h.out)
			return 0;
		old->h.pending += off;
		n_off_cpu++;
		n_reused++;
		return 0;
	}
	/* It ran (or its id is another thread's now): what it was counted under so far goes to
	 * `counts`. */
	if (old && !old->h.out && old->h.pending)
		count_n(&old->key, old->h.pending);
	sc = bpf_map_lookup_elem(&off_scratch, &zero);
	if (!sc)
		return 0;
	sc->seen.h.start = start;
	sc->seen.h.switches = switches;
	sc->seen.h.state = state;
	sc->seen.h.walked = now;
	sc->seen.h.runtime = runtime;
	sc->seen.h.pending = 0;
	sc->seen.h.out = !in_scope(task, &sc->key);
	if (sc->seen.h.out) {
		bpf_map_update_elem(&seen, &tid, &sc->seen, BPF_ANY);
		return 0;
	}
	sc->key.state = state;
	n = bpf_get_task_stack(task, sc->s.ips, sizeof(sc->s.ips), 0);
	took(&sc->s, n);
	sc->key.kstack = put_stack(&sc->s, NULL, 0);
	if (user && !(sc->key.flags & TD_PROF_F_KTHREAD) && task->mm) {
		user_stack(task, &sc->s, &sc->key);
		sc->key.ustack = put_stack(&sc->s, task, sc->key.proc_tgid);
	}
	n_off_cpu++;
	sc->seen.key = sc->key;
	sc->seen.h.pending = off;
	/* A full map: counted directly, and unwound again next time. */
	if (bpf_map_update_elem(&seen, &tid, &sc->seen, BPF_ANY))
		count_n(&sc->key, off);
	return 0;
}

/* Kernels without sleepable iterators or bpf_copy_from_user_task (before 5.18): kernel stacks
 * only. */
SEC("iter/task")
int off_cpu_kernel(struct bpf_iter__task *ctx)
{
	return off_cpu(ctx, false);
}

SEC("iter.s/task")
int off_cpu_user(struct bpf_iter__task *ctx)
{
	return off_cpu(ctx, true);
}
