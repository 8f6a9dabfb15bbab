// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * taskdiag task iterators: one TASK message per task, in the taskdiag wire format
 * (taskdiag_wire.h, generated from crates/proto), written straight into the iterator's seq file.
 *
 * Three programs share one body, emit():
 *   dump_task          iter/task    BASE, CRED, STAT, STATM, SIGNAL, NS, FILES, CGROUP, IO,
 *                                   PATHS, SECURITY, DELAY, with bpf_loop() (5.17+),
 *                                   bpf_map_lookup_percpu_elem() (5.19+) and
 *                                   bpf_get_current_task_btf() (5.11+)
 *   dump_task_bounded  iter/task    the same groups for older kernels (5.8+): bounded
 *                                   loops instead of bpf_loop(), probe reads of the current
 *                                   task; a process with more threads than its loop covers
 *                                   gets its STAT and IO from /proc (TD_MSG_F_FIXUP), and so
 *                                   does CGROUP where cgroup v1 hierarchies are mounted, and
 *                                   PATHS always. User space loads it only where the kernel
 *                                   rejects dump_task.
 *   dump_task_cmdline  iter.s/task  the same as dump_task plus CMDLINE and ENVIRON, which need
 *                                   bpf_copy_from_user_task() and therefore a sleepable
 *                                   program (Linux 5.18+)
 * Which flavour a function is compiled for is the constant `bounded`, passed down from the
 * program through __always_inline code (and global functions made once per flavour), so clang
 * leaves no bpf_loop() callback, per-CPU lookup or kfunc call in dump_task_bounded: an older
 * kernel rejects a program that merely contains them. The memory-map programs (dump_vma,
 * task_root) need iter/task_vma and bpf_d_path() in iterators (5.12+), a kernel that has
 * bpf_get_current_task_btf(), and are loaded (or rejected) on their own.
 *
 * Every value is computed the way fs/proc computes it (fs/proc/array.c do_task_stat and
 * proc_pid_status, fs/proc/task_mmu.c task_mem, fs/proc/base.c get_mm_cmdline,
 * kernel/sched/cputime.c cputime_adjust), so the BPF and procfs backends agree field for field.
 * Ids are translated into the reader's pid namespace (the iterator only walks that namespace), or
 * into a descendant namespace named by cfg_target_ns_* (a server answering a caller there).
 *
 * A message must fit the iterator's 32 KiB seq buffer. When a task's record would not (more than
 * TD_BPF_MAX_GROUPS supplementary groups, a command line over TD_BPF_CMDLINE_MAX bytes, more
 * threads than a walk covers), the group is replaced by a GROUP_ERROR attribute with
 * TD_ERRNO_NEEDS_PROCFS and the message is flagged TD_MSG_F_FIXUP: user space then reads that
 * one group of that one task from /proc. Nothing is truncated silently.
 *
 * The configuration globals below are written by user space before each iterator is created.
 * One loaded instance serves one dump at a time (the Rust side enforces it with &mut), which is
 * also what makes the single scratch buffer safe. The one exception: a memory-map walk
 * (dump_vma) may be read while a task walk runs, so it has buffers of its own (vma_pend,
 * vma_scratch) and reads only globals the task walk does not change.
 *
 * PATHS (exe, cwd, root) is written without bpf_d_path(), though iterators may call it:
 * d_path() follows the path it is given without fault protection, and another task's fs_struct
 * and mm_struct are freed at its exit without waiting for RCU (SLUB then writes its free
 * pointer over fs->root), so a d_path() of a task that exits meanwhile can walk freed memory.
 * /proc holds task_lock and takes references; a task iterator can do neither. (A kernel 6.1
 * guest ran into a soft lockup in taskdiag with it.) path_text() does d_path()'s walk with
 * probe reads instead, and the text is dropped when the task changed under it (see
 * put_paths_attr()). The file names of a memory-map walk are safe with bpf_d_path(): the walk
 * holds the address space's lock, which pins each mapping's file.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "taskdiag_wire.h"
#include "task_state.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/*
 * Every constant shared with user space (message types and flags, group ids, errno markers,
 * the kernel flags the Rust side tests too) comes from taskdiag_wire.h, generated from
 * crates/proto. The ones below are this program's own: buffer limits and kernel values only
 * the BPF side reads.
 */
#define TD_BPF_MAX_GROUPS 256
#define TD_BPF_CMDLINE_MAX 16384
#define TD_BPF_MAX_THREADS 65536
#define TD_BPF_MAX_CPUS 8192
/* ENVIRON in the message: shorter than this, and only as much as fits after the command line. */
#define TD_BPF_ENVIRON_MAX 16384
/* CGROUP's walk up the cgroup tree, and a kernfs name's size with its NUL (NAME_MAX + 1). */
#define TD_CGROUP_DEPTH 32
#define TD_KERNFS_NAME 256
/* path_text()'s walk: the components of a path (a power of two). */
#define TD_ROOT_DEPTH 64
/* Room for everything but the command line and the environment: header + BASE + name + ACCESS +
 * CRED + groups + STAT + STATM + SIGNAL + NS + FILES + IO + DELAY + SECURITY (at most ~2,900
 * bytes), then CGROUP's text as far as it fits (else it comes from /proc). */
#define TD_FIXED_ROOM 4096
#define SCRATCH_SIZE (2 * TD_FIXED_ROOM + 2 * TD_BPF_CMDLINE_MAX + TD_BPF_ENVIRON_MAX)
/* sizeof(struct k_sigaction) on x86-64 and arm64 (handler, flags, restorer, mask); put_signal()
 * leaves SIGNAL to /proc on a kernel where the BTF says otherwise. */
#define TD_KSIGACTION_SIZE 32

#define PF_WQ_WORKER 0x00000020
#define CSS_ONLINE (1 << 1)

enum { MM_FILEPAGES, MM_ANONPAGES, MM_SWAPENTS, MM_SHMEMPAGES };

/*
 * Groups this instance was loaded for (set before load). The verifier treats it as a constant
 * and skips the code of every other group, so a one-shot dump verifies only what it uses.
 */
const volatile __u64 ro_groups = ~0ULL;

/* WCHAN's memo has this many slots less one (a power of two, set before load: wchan_memo). */
const volatile __u32 ro_wchan_memo_mask = 0;

/* Configuration (user space writes these before creating an iterator). */
__u64 cfg_show_flags = 0;
/* TD_STRATEGY_ALL_WITH_THREADS: the groups of each process's own record (cfg_show_flags are
 * its threads'). */
__u64 cfg_show_process = 0;
__u32 cfg_strategy = 0;
__u32 cfg_parent = 0;
/* Without iterator link parameters (before 6.1), ONE and THREAD filter a full walk instead. */
__u32 cfg_only_pid = 0;
__u32 cfg_only_tgid = 0;
/* The memory-map walk's own filter (the same without link parameters; 0: every process). A task
 * walk read at the same time configures the others, never this one. */
__u32 cfg_vma_tgid = 0;
__u64 cfg_ns_per_tick = 10000000;
__u32 cfg_page_shift = 12;
/*
 * How /proc counts rss where the counters are per-CPU (6.2+): the sum of the per-CPU deltas
 * (6.16+, and stable kernels that took "mm: fix the inaccurate memory statistics issue for
 * users", e.g. 6.12.38+), or else the approximate total. That is inline code, invisible in
 * BTF: user space decides by comparing a process's two values with its /proc. With
 * cfg_rss_probe the walk also records both values into rss_probe.
 */
__u32 cfg_rss_sum = 0;
__u32 cfg_rss_probe = 0;
/*
 * For user space only, kept here so that processes reusing pinned programs need not read the
 * kernel's BTF again: whether the counters are per-CPU (set at load), and whether
 * cfg_rss_sum was decided by a comparison with /proc (set by the process that decided).
 */
__u32 cfg_rss_percpu = 0;
__u32 cfg_rss_known = 0;
/* Workqueue workers' /proc name is their full worker id (6.10+: wq_worker_comm() calls
 * format_worker_id(), whose presence in the kernel's BTF user space looks for), not comm. */
__u32 cfg_wq_full_id = 0;
__u32 cfg_nr_cpus = 1;
/* The boottime offset of the time namespace the answer is for (the reader's, or a server's
 * caller's), in ns: what /proc adds to a task's start time for a reader there. */
__s64 cfg_boottime_off = 0;
/*
 * The pid namespace to answer in, for a server answering a caller in another namespace
 * (taskdiagd): its inode number and level. 0: the reader's own namespace. Tasks without a pid
 * there are skipped, as that namespace's /proc does not list them.
 */
__u32 cfg_target_ns_inum = 0;
__u32 cfg_target_ns_level = 0;
/* Add a td_access attribute (what procfs's permission checks look at) to every message. */
__u32 cfg_access = 0;
/*
 * With cfg_access: the ids td_access carries are those of the pid namespace this many levels
 * above the reader's, the namespace of the /proc the reader completes records from when it has
 * none of its own (unshare --pid without --mount-proc). 0: the reader's own.
 */
__u32 cfg_proc_up = 0;

/*
 * Output channel. Through the seq file every read() returns at most one 32 KiB buffer, which
 * costs one system call per ~200 tasks. Through this ring buffer one read() walks as many tasks
 * as fit (user space sizes it, 4 MiB by default): when it is full the program returns 1, the
 * kernel ends the read() with EAGAIN and retries that task on the next read(), after user
 * space has drained the ring.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} out_rb SEC(".maps");

__u32 cfg_ringbuf = 0;

/* The counters STAT sums over a process's threads (sum_one_thread()). */
struct thread_sum {
	struct list_head *head;
	struct list_head *pos;
	__u64 min_flt, maj_flt, utime, stime, rtime;
	bool done;
};

/* sum_io_thread()'s walk over a process's threads, adding their I/O to @acc (@tmp: add_io()'s
 * copy). */
struct io_sum {
	struct list_head *head;
	struct list_head *pos;
	struct td_io *acc, *tmp;
	bool done;
};

/*
 * cgroup_attr()'s walks' state, in the scratch map: the verifier tracks no value there, so the
 * loops' states converge at once (on the stack, every position written was a new state, and
 * nested loops multiplied them past the verifier's limit).
 */
struct cg_state {
	/* Where the text goes next: an index into the scratch buffer. */
	__u32 at;
	/* One path: walking up from kn to stop, recording depth nodes; then down writing them. */
	__u32 depth;
	__u64 kn, stop;
	/* 1 when a walk ended where it should, -1 when it cannot be done here. */
	int end;
	/* The hierarchies: the task's links and the namespace root's, walked backwards. */
	__u64 task_head, task_at, ns_head, ns_at, cset;
	__u32 mask, exiting;
};

/*
 * The last CGROUP text written, by css_set: tasks share a few css_sets (a css_set is one
 * tuple of cgroups, one per hierarchy), so most texts are copies of the one before. Only
 * within one walk (cfg_walk_gen): a cgroup renamed or removed shows from the next walk on, as
 * for a /proc read made just before. Not for exiting tasks, whose v1 lines differ.
 */
#define TD_CG_CACHE_MAX 2048

struct cg_cache {
	__u32 gen, len;
	__u64 cset, ns_cset, id;
	__u8 text[TD_CG_CACHE_MAX];
};

/*
 * PATHS' texts by path (dentry and mount), without " (deleted)", which is looked at each time:
 * most tasks share their root, many their working directory and executable. Direct-mapped
 * by the dentry's address; only within one walk (cfg_walk_gen), as struct cg_cache.
 */
#define TD_PW_CACHE 32
#define TD_PW_CACHE_TEXT 256

struct pw_cache {
	__u64 dentry, mnt;
	__u32 gen, len;
	__u8 text[TD_PW_CACHE_TEXT];
};

/*
 * SCHED's Cpus_allowed_list and Mems_allowed_list by bitmap: tasks share a few masks, so the
 * last list of each is kept with its bitmap and copied when the next task has the same (within
 * one walk, as struct cg_cache). Bitmaps of up to TD_MASK_WORDS words (1,024 CPUs or nodes);
 * a list longer than TD_MASK_TEXT, or a larger bitmap, comes from /proc.
 */
#define TD_MASK_WORDS 16
#define TD_MASK_TEXT 512
/* The kernel stack frames SCHED's wchan looks at. */
#define TD_SCHED_STACK 32
/* The most a wchan or syscall text takes (KSYM_NAME_LEN is 512, but no wchan is that long). */
#define TD_SCHED_TEXT 256
/* The frames /proc/PID/stack shows at most (MAX_STACK_TRACE_DEPTH). */
#define TD_KSTACK_DEPTH 64

struct mask_cache {
	__u32 gen, nbits, len, reserved;
	__u64 words[TD_MASK_WORDS];
	__u8 text[TD_MASK_TEXT];
};

/*
 * The wait channels named in this walk (SCHED's and WCHAN's), by address: most tasks wait in
 * a few functions, and naming an address (bpf_snprintf()'s %ps: kallsyms' binary search and
 * the name's decompression, then the formatting) was a third of writing a wait channel. A
 * direct-mapped table, only within one walk (cfg_walk_gen, as struct cg_cache: a module
 * unloaded meanwhile cannot leave its names behind); an address whose slot another took is
 * simply named again, and a name longer than TD_WCHAN_NAME is never kept.
 */
#define TD_WCHAN_SLOTS 64
#define TD_WCHAN_NAME 64

struct wchan_cache {
	__u64 ip;
	__u32 gen, len;
	__u8 text[TD_WCHAN_NAME];
};

struct scratch {
	__u8 buf[SCRATCH_SIZE];
	/* Where forget_u32() and as_number() park values (see there). */
	__u32 off_slot;
	__u64 addr_slot;
	/* dump_vma: the ids of the task whose mappings it is walking (see there). */
	__u64 vma_task;
	__u32 vma_gen, vma_pid, vma_tgid;
	/* sum_threads_bounded()'s result. */
	struct thread_sum threads;
	/* io_counters()'s result, and add_io()'s copy. */
	struct td_io io, io_tmp;
	/* delay_counters()'s result. */
	struct td_delay delay;
	/* cgroup_attr(): the kernfs nodes from the task's cgroup up to the reader's root, and the
	 * walks' state. */
	__u64 kn_chain[TD_CGROUP_DEPTH];
	struct cg_state cg;
	struct cg_cache cg_cache;
	/* path_text() (PATHS, task_root()): the dentries from a path up to the reader's root, the
	 * parent each had, the reader's root, the paths of PATHS, and the walk's state. */
	__u64 root_chain[TD_ROOT_DEPTH];
	__u64 parent_chain[TD_ROOT_DEPTH];
	struct path pw_root;
	struct path pw_paths[4];
	__u32 pw_len[4];
	__u64 pw_mm, pw_fs, pw_exec_id;
	/* recheck_access(): where the message's ACCESS is, and the credentials it describes. */
	__u32 access_off;
	__u64 access_cred;
	struct pw_cache pw_cache[TD_PW_CACHE];
	struct {
		__u64 dentry, mnt;
		__u32 n, at;
		int end;
	} rw;
	/* put_signal(): a copy of the 64 signal actions. */
	__u8 sigact[64 * TD_KSIGACTION_SIZE];
	/* task_stack(): the kernel stack of the task being written (SCHED's and WCHAN's wchan,
	 * KSTACK), its frames (or its error), whether it was taken for this task yet, and
	 * whether the walk wants it whole (KSTACK) or only its first frame. */
	__u64 kstack[TD_KSTACK_DEPTH];
	__s64 kstack_n;
	bool kstack_taken;
	bool kstack_whole;
	/* In a walk of TD_STRATEGY_ALL_WITH_THREADS: the record being written is a thread's own
	 * (not its process's), for the groups that read the strategy themselves (IO, SCHED). */
	bool thread_pass;
	/* SCHED (sched_attr()): bpf_snprintf()'s arguments, the bitmap being written as a list,
	 * the texts' cursor, and the last list of each bitmap. */
	__u64 sched_args[12];
	__s64 oom_rss[4];
	__u64 mask_words[TD_MASK_WORDS];
	struct {
		__u32 at, begin, nbits, start, in_run, found;
		int end;
	} ms;
	struct mask_cache mask_cache[2];
	struct wchan_cache wchan_cache[TD_WCHAN_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

/* pid_nr_ns(): the number of @pid in namespace @ns at @level, 0 if it has none there. */
static __always_inline __u32 pid_nr_ns(struct pid *pid, __u32 level, struct pid_namespace *ns)
{
	struct upid up = {};

	if (!pid || pid->level < level)
		return 0;
	if (level == 0) {
		/* The common case, with plain loads. The barriers keep clang from merging these
		 * kernel loads with the stack loads below into one instruction, which the
		 * verifier refuses ("same insn cannot be used with different pointers"). */
		__u32 nr = pid->numbers[0].nr;
		struct pid_namespace *pns = pid->numbers[0].ns;

		barrier_var(nr);
		barrier_var(pns);
		return pns == ns ? nr : 0;
	}
	bpf_probe_read_kernel(&up, sizeof(up), __builtin_preserve_access_index(&pid->numbers[level]));
	return up.ns == ns ? up.nr : 0;
}

struct ns_ctx {
	__u32 level;
	struct pid_namespace *ns;
};

static __always_inline __u32 task_tgid_nr(struct task_struct *t, struct ns_ctx *n)
{
	if (!t || !t->thread_pid)
		return 0;
	return pid_nr_ns(t->signal->pids[PIDTYPE_TGID], n->level, n->ns);
}

struct div128 {
	__u64 r, lo, c, q;
};

/* One step of restoring division of r:lo by c (bit 63 - i of the quotient). */
static long div_step(__u64 i, struct div128 *d)
{
	__u64 top = d->r >> 63;

	d->r = (d->r << 1) | ((d->lo >> (63 - (i & 63))) & 1);
	d->q <<= 1;
	if (top || d->r >= d->c) {
		d->r -= d->c;
		d->q |= 1;
	}
	return 0;
}

/*
 * mul_u64_u64_div_u64(): a * b / c with a 128-bit intermediate, as the kernel computes it.
 * The 64-step division runs under bpf_loop() so the verifier checks one step, not 64 copies;
 * @bounded (kernels without bpf_loop()) makes it a loop the verifier walks 64 times.
 */
static __always_inline __u64 mul_div(__u64 a, __u64 b, __u64 c, bool bounded)
{
	__u64 al = a & 0xffffffff, ah = a >> 32, bl = b & 0xffffffff, bh = b >> 32;
	__u64 ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
	__u64 mid = (ll >> 32) + (lh & 0xffffffff) + (hl & 0xffffffff);
	struct div128 d = {
		.lo = (mid << 32) | (ll & 0xffffffff),
		.r = hh + (lh >> 32) + (hl >> 32) + (mid >> 32),
		.c = c,
	};

	if (!c)
		return 0;
	if (!d.r)
		return d.lo / c;
	if (d.r >= c)
		return ~0ULL;
	if (bounded) {
		for (__u64 i = 0; i < 64; i++)
			div_step(i, &d);
	} else {
		bpf_loop(64, div_step, &d, 0);
	}
	return d.q;
}

/* cputime_adjust() from kernel/sched/cputime.c, without updating @prev. */
static __always_inline void cputime_adjust(__u64 utime, __u64 stime, __u64 rtime,
					   __u64 prev_ut, __u64 prev_st, __u64 *ut, __u64 *st,
					   bool bounded)
{
	if (prev_st + prev_ut >= rtime) {
		*ut = prev_ut;
		*st = prev_st;
		return;
	}
	if (stime == 0) {
		utime = rtime;
	} else if (utime == 0) {
		stime = rtime;
	} else {
		stime = mul_div(stime, rtime, stime + utime, bounded);
		if (stime > rtime)
			stime = rtime;
	}
	if (stime < prev_st)
		stime = prev_st;
	utime = rtime - stime;
	if (utime < prev_ut) {
		utime = prev_ut;
		stime = rtime - utime;
	}
	*ut = utime;
	*st = stime;
}

/*
 * bpf_rdonly_cast() (6.2+): an untrusted, typed view of a kernel address, whose loads are
 * inline probing loads instead of a helper call each. Weak: where the kernel lacks it,
 * bpf_ksym_exists() is a constant 0 and the verifier drops the code that calls it.
 */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* The task whose thread_node is at @pos, as a bpf_rdonly_cast() view. */
static __always_inline struct task_struct *thread_view(struct list_head *pos)
{
	return bpf_rdonly_cast((void *)pos - bpf_core_field_offset(struct task_struct, thread_node),
			       bpf_core_type_id_kernel(struct task_struct));
}

/*
 * sum_one_thread() with plain loads through bpf_rdonly_cast() views, for kernels that have it:
 * the process walk of a host of multi-threaded processes spent a tenth of its time in the
 * six probe-read helper calls per thread (perf, 15,000 processes of 10 threads).
 */
static long sum_one_thread_cast(__u64 i, struct thread_sum *s)
{
	struct task_struct *t;

	if (s->pos == s->head) {
		s->done = true;
		return 1;
	}
	t = thread_view(s->pos);
	s->min_flt += t->min_flt;
	s->maj_flt += t->maj_flt;
	s->utime += t->utime;
	s->stime += t->stime;
	s->rtime += t->se.sum_exec_runtime;
	s->pos = t->thread_node.next;
	return 0;
}

static long sum_one_thread(__u64 i, struct thread_sum *s)
{
	struct task_struct *t;

	if (s->pos == s->head) {
		s->done = true;
		return 1;
	}
	t = (void *)s->pos - bpf_core_field_offset(struct task_struct, thread_node);
	s->min_flt += BPF_CORE_READ(t, min_flt);
	s->maj_flt += BPF_CORE_READ(t, maj_flt);
	s->utime += BPF_CORE_READ(t, utime);
	s->stime += BPF_CORE_READ(t, stime);
	s->rtime += BPF_CORE_READ(t, se.sum_exec_runtime);
	s->pos = BPF_CORE_READ(t, thread_node.next);
	return 0;
}

/*
 * Adds the I/O counters at kernel address @from (a struct task_io_accounting, laid out as
 * struct td_io: put_io() checks its size) to @to, copied in one read into @tmp, scratch-map
 * memory (on the stack, the copy would cost the thread walk's three frames more than BPF
 * allows; read counter by counter, seven helper calls instead of one).
 */
static __always_inline bool add_io(struct td_io *to, const void *from, struct td_io *tmp)
{
	__u64 *dst = (__u64 *)to, *src = (__u64 *)tmp;

	if (bpf_probe_read_kernel(tmp, sizeof(*tmp), from))
		return false;
#pragma unroll
	for (int i = 0; i < sizeof(*to) / 8; i++)
		dst[i] += src[i];
	return true;
}

/* sum_io_thread() stepping with a plain load (see sum_one_thread_cast()). */
static long sum_io_thread_cast(__u64 i, struct io_sum *s)
{
	struct task_struct *t;

	if (s->pos == s->head) {
		s->done = true;
		return 1;
	}
	t = thread_view(s->pos);
	if (!add_io(s->acc, __builtin_preserve_access_index(&t->ioac), s->tmp))
		return 1;
	s->pos = t->thread_node.next;
	return 0;
}

/* bpf_loop() step: adds the I/O of the thread at @s->pos, then moves on. */
static long sum_io_thread(__u64 i, struct io_sum *s)
{
	struct task_struct *t;

	if (s->pos == s->head) {
		s->done = true;
		return 1;
	}
	t = (void *)s->pos - bpf_core_field_offset(struct task_struct, thread_node);
	if (!add_io(s->acc, __builtin_preserve_access_index(&t->ioac), s->tmp))
		return 1;
	s->pos = BPF_CORE_READ(t, thread_node.next);
	return 0;
}

/*
 * The offset, masked so the verifier can bound buf + off. Callers have already checked
 * off <= TD_FIXED_ROOM, so the mask changes nothing; the barrier stops clang from dropping it
 * on that knowledge, which the verifier does not share.
 */
static __always_inline __u32 room_mask(__u32 off)
{
	barrier_var(off);
	return off & (TD_FIXED_ROOM * 2 - 1);
}

struct out {
	__u8 *buf;
	__u32 off;
	bool fixup;
};

/*
 * Makes the verifier forget what it knows about o->off. After each group the offset's range
 * depends on which groups came before; with that knowledge the verifier would walk every
 * combination of groups separately (seconds of load time). A value that went through map
 * memory is just "some u32", bounded again by the checks in put(), so all paths merge.
 */
static __always_inline __u32 forget_u32(struct out *o, __u32 v)
{
	struct scratch *sc = (void *)o->buf;

	sc->off_slot = v;
	return *(volatile __u32 *)&sc->off_slot;
}

/* A pointer as a plain number, parked in @slot (map memory: the verifier allows no arithmetic
 * or comparison on pointers). */
static __always_inline __u64 addr_of(__u64 *slot, const void *p)
{
	*slot = (__u64)p;
	return *(volatile __u64 *)slot;
}

/* A pointer as a plain number, for passing to a global function. */
static __always_inline __u64 as_number(struct out *o, const void *p)
{
	struct scratch *sc = (void *)o->buf;

	return addr_of(&sc->addr_slot, p);
}

static __always_inline void forget_off(struct out *o)
{
	o->off = forget_u32(o, o->off);
}

/* Appends @len (a constant) bytes from @src. Returns false if it would overflow. */
static __always_inline bool put(struct out *o, const void *src, __u32 len)
{
	__u32 off = o->off;

	if (off > TD_FIXED_ROOM)
		return false;
	bpf_probe_read_kernel(o->buf + (room_mask(off)), len, src);
	o->off = off + len;
	return true;
}

/*
 * A record is filled in place in the scratch map, not on the stack: the verifier tracks every
 * constant stored on the stack, so building records there makes it walk each combination of
 * field values (task states, flags, ...) separately. Map memory it does not track.
 * Returns NULL when @off is past the room for fixed records.
 */
static __always_inline void *rec_at(struct out *o, __u32 off)
{
	if (off > TD_FIXED_ROOM)
		return 0;
	return o->buf + room_mask(off);
}

static __always_inline bool put_attr_hdr(struct out *o, __u32 payload_len, __u16 type)
{
	struct td_attr a = { .len = sizeof(struct td_attr) + payload_len, .attr_type = type };

	return put(o, &a, sizeof(a));
}

static __always_inline void pad4(struct out *o)
{
	o->off = (o->off + 3) & ~3u;
}

static __always_inline bool needs_procfs(struct out *o, __u16 group)
{
	struct td_group_error e = { .group = group, .errno = TD_ERRNO_NEEDS_PROCFS };

	o->fixup = true;
	return put_attr_hdr(o, sizeof(e), TD_ATTR_GROUP_ERROR) && put(o, &e, sizeof(e));
}

/* The name /proc/PID/stat shows: proc_task_name() with wq_worker_comm()/get_kthread_comm(). */
/*
 * A global (non-static) function is verified once, on its own, and its callers continue on one
 * path whatever happened inside: this keeps the many naming cases from multiplying the
 * verifier's work in the rest of the program. So it takes the task as a number and reads it
 * with probe reads, and finds the scratch buffer itself.
 */
__noinline int put_name(__u64 task, __u32 flags, __u32 off)
{
	struct task_struct *t = (void *)task;
	__u32 zero = 0, n;
	__u8 *dst;
	void *kt = 0;
	long r;

	dst = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!dst || off > TD_FIXED_ROOM)
		return 0;
	dst += room_mask(off);
	if (flags & (TD_PF_KTHREAD | PF_WQ_WORKER)) {
		if (bpf_core_field_exists(t->worker_private)) {
			kt = BPF_CORE_READ(t, worker_private);
		} else {
			struct task_struct___pre517 *o517 = (void *)t;
			kt = (void *)BPF_CORE_READ(o517, set_child_tid);
		}
	}
	/* A workqueue worker's name starts with its comm before 6.10 and with its full worker
	 * id (format_worker_id(), the kthread's full name but for a dying worker) since; other
	 * kernel threads show their full name (5.17+, get_kthread_comm()). */
	if ((flags & TD_PF_KTHREAD) && kt && bpf_core_field_exists(struct kthread, full_name) &&
	    (!(flags & PF_WQ_WORKER) || cfg_wq_full_id)) {
		char *full = BPF_CORE_READ((struct kthread *)kt, full_name);

		if (full)
			r = bpf_probe_read_kernel_str(dst, TD_COMM_MAX, full);
		else
			r = bpf_probe_read_kernel_str(dst, 16, &t->comm);
	} else {
		r = bpf_probe_read_kernel_str(dst, 16, &t->comm);
	}
	n = (r > 0 ? r - 1 : 0) & (TD_COMM_MAX - 1);
	if ((flags & PF_WQ_WORKER) && kt && n < TD_COMM_MAX - 2) {
		/* wq_worker_comm(): "+desc" while running a work item, "-desc" after. */
		struct worker *w = BPF_CORE_READ((struct kthread *)kt, data);
		char first = 0;

		if (w && BPF_CORE_READ(w, pool)) {
			bpf_probe_read_kernel(&first, 1, &w->desc);
			if (first) {
				char sign = BPF_CORE_READ(w, current_work) ? '+' : '-';

				bpf_probe_read_kernel(dst + n, 1, &sign);
				r = bpf_probe_read_kernel_str(dst + n + 1, (TD_COMM_MAX - 1 - n) & (TD_COMM_MAX - 1), &w->desc);
				if (r > 0)
					n += r;
			}
		}
	}
	return n;
}

/* The terminal's foreground process group (tty_get_pgrp() without its lock: a racing change
 * shows the old or the new group, as a /proc read just before or after it would). Linux 6.0
 * moved the field into tty->ctrl. */
static __always_inline struct pid *tty_pgrp(struct tty_struct *tty)
{
	if (bpf_core_field_exists(tty->ctrl))
		return tty->ctrl.pgrp;
	return ((struct tty_struct___pre60 *)tty)->pgrp;
}

static __always_inline bool put_base(struct out *o, struct task_struct *t, struct ns_ctx *ns,
				     bool leader)
{
	struct td_base *b;
	struct signal_struct *sig = t->signal;
	struct tty_struct *tty;
	__u32 hdr = o->off, flags = t->flags, name_len;

	/* Name first, after room for the header and record; then the record with its length. */
	o->off = hdr + sizeof(struct td_attr) + sizeof(*b);
	name_len = put_name(as_number(o, t), flags, o->off) & (TD_COMM_MAX - 1);
	b = rec_at(o, hdr + sizeof(struct td_attr));
	if (!b)
		return false;
	__builtin_memset(b, 0, sizeof(*b));
	b->tpgid = -1;

	if (t->thread_pid && t->ptrace) {
		struct task_struct *tracer = t->parent;

		if (tracer)
			b->tpid = pid_nr_ns(tracer->thread_pid, ns->level, ns->ns);
	}
	/* do_task_stat() reads these under lock_task_sighand(): a task past __exit_signal()
	 * (no sighand) shows none of them (-1/0 in /proc; 0 here). */
	if (!t->sighand)
		goto ids_done;
	if (t->thread_pid)
		b->ppid = task_tgid_nr(t->real_parent, ns);
	b->sid = pid_nr_ns(sig->pids[PIDTYPE_SID], ns->level, ns->ns);
	b->pgid = pid_nr_ns(sig->pids[PIDTYPE_PGID], ns->level, ns->ns);
	tty = sig->tty;
	if (tty) {
		__u32 major = tty->driver->major;
		__u32 minor = tty->driver->minor_start + tty->index;

		b->tty_nr = (minor & 0xff) | (major << 8) | ((minor & ~0xffu) << 12);
		b->tpgid = pid_nr_ns(tty_pgrp(tty), ns->level, ns->ns);
	}
ids_done:
	b->task_flags = flags;
	b->state = state_index(t);
	b->flags = ((flags & TD_PF_KTHREAD) ? TD_BASE_F_KTHREAD : 0) | (leader ? TD_BASE_F_LEADER : 0);
	b->comm_len = name_len;
	/* As /proc/PID/stat shows it to the reader: in its time namespace (timens_add_boottime_ns()),
	 * at clock-tick resolution. */
	b->start_time_ns = (t->start_boottime + cfg_boottime_off) / cfg_ns_per_tick * cfg_ns_per_tick;

	o->off = hdr;
	if (!put_attr_hdr(o, sizeof(*b) + name_len, TD_GROUP_BASE))
		return false;
	o->off += sizeof(*b) + name_len;
	pad4(o);
	return true;
}

static __always_inline bool put_cred(struct out *o, struct task_struct *t)
{
	const struct cred *c = t->real_cred;
	struct group_info *gi = c->group_info;
	struct td_cred *r = rec_at(o, o->off + sizeof(struct td_attr));
	__u32 n = gi ? gi->ngroups : 0, off;

	if (!r)
		return false;
	__builtin_memset(r, 0, sizeof(*r));

	if (n > TD_BPF_MAX_GROUPS)
		return needs_procfs(o, TD_GROUP_CRED);
	r->uid = c->uid.val;
	r->euid = c->euid.val;
	r->suid = c->suid.val;
	r->fsuid = c->fsuid.val;
	r->gid = c->gid.val;
	r->egid = c->egid.val;
	r->sgid = c->sgid.val;
	r->fsgid = c->fsgid.val;
	r->cap_inheritable = *(__u64 *)&c->cap_inheritable;
	r->cap_permitted = *(__u64 *)&c->cap_permitted;
	r->cap_effective = *(__u64 *)&c->cap_effective;
	r->cap_bset = *(__u64 *)&c->cap_bset;
	r->cap_ambient = *(__u64 *)&c->cap_ambient;
	r->ngroups = n;
	if (!put_attr_hdr(o, sizeof(*r) + 4 * n, TD_GROUP_CRED))
		return false;
	off = o->off + sizeof(*r);
	if (n && off <= TD_FIXED_ROOM) {
		bpf_probe_read_kernel(o->buf + (room_mask(off)),
				      (4 * n) & (4 * TD_BPF_MAX_GROUPS * 2 - 1), &gi->gid);
	}
	o->off = off + 4 * n;
	return true;
}

/* get_dumpable(): the low bits of the first word of mm->flags (a bitmap since 6.18). */
static __always_inline __u8 mm_dumpable(struct mm_struct *mm)
{
	unsigned long w = 0;

	if (bpf_core_field_exists(mm->flags.__mm_flags))
		w = mm->flags.__mm_flags[0];
	else if (bpf_core_field_exists(((struct mm_struct___word_flags *)mm)->flags))
		w = ((struct mm_struct___word_flags *)mm)->flags;
	return w & 3;
}

static __always_inline __u32 userns_inum(struct user_namespace *ns)
{
	return ns ? ns->ns.inum : 0;
}

/*
 * What procfs's permission checks look at for task @t with address space @mm, now: its
 * objective credentials, namespaces and dumpability (what __ptrace_may_access() and
 * has_pid_permissions() look at), its exec identity (which program image: self_exec_id, the
 * address space, the process's start), whether an exec is under way (cred_guard_mutex held:
 * procfs then waits before it reads memory maps), and its ids in the reader's pid namespace
 * (to complete the record from the reader's /proc). @slot parks pointers as numbers.
 */
static __always_inline void fill_access(struct td_access *a, struct task_struct *t,
					struct mm_struct *mm, __u32 reader_pid, __u32 reader_tgid,
					__u64 *slot)
{
	const struct cred *c = t->real_cred;
	struct pid *tp = t->thread_pid;
	struct signal_struct *sig = t->signal;

	__builtin_memset(a, 0, sizeof(*a));
	a->reader_pid = reader_pid;
	a->reader_tgid = reader_tgid;
	a->uid = c->uid.val;
	a->euid = c->euid.val;
	a->suid = c->suid.val;
	a->gid = c->gid.val;
	a->egid = c->egid.val;
	a->sgid = c->sgid.val;
	a->cap_permitted = *(__u64 *)&c->cap_permitted;
	a->userns = userns_inum(c->user_ns);
	if (c->user_ns) {
		a->userns_owner = c->user_ns->owner.val;
		a->userns_parent = userns_inum(c->user_ns->parent);
	}
	if (tp) {
		/* task_active_pid_ns(): the namespace of the task's own (deepest) number. */
		struct upid up = {};
		__u32 lvl = tp->level & 31;

		bpf_probe_read_kernel(&up, sizeof(up), __builtin_preserve_access_index(&tp->numbers[lvl]));
		if (up.ns)
			a->pidns = BPF_CORE_READ(up.ns, ns.inum);
		a->pidns_level = lvl;
	}
	if (mm) {
		a->has_mm = 1;
		a->mm_userns = userns_inum(mm->user_ns);
		a->dumpable = mm_dumpable(mm);
		a->mm_id = addr_of(slot, mm);
	}
	a->exec_id = t->self_exec_id;
	a->tg_start_ns = t->group_leader->start_boottime;
	if (sig && sig->cred_guard_mutex.owner.counter)
		a->flags |= TD_ACCESS_F_EXEC;
}

/* The internal ACCESS attribute (fill_access()) of a task message. */
static __always_inline bool put_access(struct out *o, struct task_struct *t, struct mm_struct *mm,
				       __u32 reader_pid, __u32 reader_tgid)
{
	struct td_access *a = rec_at(o, o->off + sizeof(struct td_attr));
	struct scratch *sc = (void *)o->buf;

	if (!a)
		return false;
	sc->access_off = o->off + sizeof(struct td_attr);
	fill_access(a, t, mm, reader_pid, reader_tgid, &sc->addr_slot);
	sc->access_cred = addr_of(&sc->addr_slot, t->real_cred);
	if (!put_attr_hdr(o, sizeof(*a), TD_ATTR_ACCESS))
		return false;
	o->off += sizeof(*a);
	return true;
}

/*
 * ACCESS checked again once the task's groups are read. They are read without the locks procfs
 * takes (cred_guard_mutex, exec_update_lock) while the task runs on: an exec (of a set-user-ID
 * program), a change of credentials or of dumpability in between would pair data of one state
 * with another's permission. Credentials are never changed in place (commit_creds() installs
 * new ones), and an address space's user namespace and a task's pid namespace and start never
 * change, so what ACCESS describes is the same if the task still has the same credentials,
 * address space, exec count and dumpability, and is not executing now. Otherwise that ACCESS is
 * flagged TD_ACCESS_F_CHANGED: a server decides nothing on it (procfs would have waited for
 * the exec, or checked the new state).
 */
static __always_inline void recheck_access(struct out *o, struct task_struct *t)
{
	struct scratch *sc = (void *)o->buf;
	struct td_access *a = rec_at(o, sc->access_off);
	struct mm_struct *mm = (t->flags & TD_PF_KTHREAD) ? 0 : t->mm;
	struct signal_struct *sig = t->signal;

	if (!a)
		return;
	if (addr_of(&sc->addr_slot, t->real_cred) != sc->access_cred ||
	    (mm ? addr_of(&sc->addr_slot, mm) : 0) != a->mm_id || t->self_exec_id != a->exec_id ||
	    (mm && mm_dumpable(mm) != a->dumpable) || (sig && sig->cred_guard_mutex.owner.counter))
		a->flags |= TD_ACCESS_F_CHANGED;
}

/*
 * cputime_adjust() for the td_stat record at @off of the scratch buffer, whose utime_ns and
 * stime_ns hold the previous adjusted values on entry and the result, in whole clock ticks, on
 * return. Called through a global function per flavour (below), so its branches and its 64-step
 * division are verified once.
 */
static __always_inline int adjust_times(__u64 utime, __u64 stime, __u64 rtime, __u32 off,
					bool bounded)
{
	__u32 zero = 0;
	__u8 *buf = bpf_map_lookup_elem(&scratch_map, &zero);
	struct td_stat *s;
	__u64 ut, st, npt = cfg_ns_per_tick;

	if (!buf || off > TD_FIXED_ROOM || !npt)
		return 0;
	s = (void *)(buf + room_mask(off));
	cputime_adjust(utime, stime, rtime, s->utime_ns, s->stime_ns, &ut, &st, bounded);
	s->utime_ns = ut / npt * npt;
	s->stime_ns = st / npt * npt;
	return 0;
}

__noinline int adjust_times_loop(__u64 utime, __u64 stime, __u64 rtime, __u32 off)
{
	return adjust_times(utime, stime, rtime, off, false);
}

__noinline int adjust_times_bounded(__u64 utime, __u64 stime, __u64 rtime, __u32 off)
{
	return adjust_times(utime, stime, rtime, off, true);
}

/*
 * The threads a bounded walk sums (kernels without bpf_loop()); a process with more gets its
 * STAT from /proc. The verifier walks each step, so this is what it can afford.
 */
#define TD_BOUNDED_MAX_THREADS 256

/*
 * sum_one_thread() over the thread list of the signal_struct at @sig, up to
 * TD_BOUNDED_MAX_THREADS threads, into the scratch buffer's thread_sum. Returns whether the
 * list ended. Global, so the loop is verified once.
 */
__noinline int sum_threads_bounded(__u64 sig)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch_map, &zero);
	struct signal_struct *sg = (void *)sig;
	struct thread_sum *s;

	if (!sc)
		return 0;
	s = &sc->threads;
	__builtin_memset(s, 0, sizeof(*s));
	s->head = __builtin_preserve_access_index(&sg->thread_head);
	s->pos = BPF_CORE_READ(sg, thread_head.next);
	for (int i = 0; i < TD_BOUNDED_MAX_THREADS; i++) {
		if (sum_one_thread(i, s))
			break;
	}
	return s->done;
}

static __always_inline bool put_stat(struct out *o, struct task_struct *t, bool whole,
				     bool bounded)
{
	struct signal_struct *sig = t->signal;
	struct td_stat *s = rec_at(o, o->off + sizeof(struct td_attr));
	__u64 ut, st, rtime, put_ = 0, pst = 0, npt = cfg_ns_per_tick;

	if (!s)
		return false;
	__builtin_memset(s, 0, sizeof(*s));

	s->cminflt = sig->cmin_flt;
	s->cmajflt = sig->cmaj_flt;
	s->cutime_ns = sig->cutime / npt * npt;
	s->cstime_ns = sig->cstime / npt * npt;
	s->threads = sig->nr_threads;
	if (whole) {
		struct thread_sum sum = {}, *sp = &sum;

		if (!bounded && sig->nr_threads == 1 && sig->thread_head.next == &t->thread_node &&
		    t->thread_node.next == &sig->thread_head) {
			/* Most processes: @t is the one thread on the list, so the sum is its own
			 * counters, read with plain loads instead of a walk of probe reads. (The
			 * barriers keep clang from merging these loads with the stack loads below,
			 * which the verifier refuses, as in pid_nr_ns().) */
			__u64 mf = t->min_flt, jf = t->maj_flt, u = t->utime, st_ = t->stime;
			__u64 rt = t->se.sum_exec_runtime;

			barrier_var(mf);
			barrier_var(jf);
			barrier_var(u);
			barrier_var(st_);
			barrier_var(rt);
			sum.min_flt = mf;
			sum.maj_flt = jf;
			sum.utime = u;
			sum.stime = st_;
			sum.rtime = rt;
		} else if (bounded) {
			struct scratch *sc = (void *)o->buf;

			if (!sum_threads_bounded(as_number(o, sig)))
				return needs_procfs(o, TD_GROUP_STAT);
			sp = &sc->threads;
		} else {
			sum.head = __builtin_preserve_access_index(&sig->thread_head);
			sum.pos = sig->thread_head.next;
			if (bpf_ksym_exists(bpf_rdonly_cast))
				bpf_loop(TD_BPF_MAX_THREADS, sum_one_thread_cast, &sum, 0);
			else
				bpf_loop(TD_BPF_MAX_THREADS, sum_one_thread, &sum, 0);
			if (!sum.done)
				return needs_procfs(o, TD_GROUP_STAT);
		}
		s->minflt = sig->min_flt + sp->min_flt;
		s->majflt = sig->maj_flt + sp->maj_flt;
		ut = sig->utime + sp->utime;
		st = sig->stime + sp->stime;
		rtime = sig->sum_sched_runtime + sp->rtime;
		put_ = sig->prev_cputime.utime;
		pst = sig->prev_cputime.stime;
	} else {
		s->minflt = t->min_flt;
		s->majflt = t->maj_flt;
		ut = t->utime;
		st = t->stime;
		rtime = t->se.sum_exec_runtime;
		put_ = t->prev_cputime.utime;
		pst = t->prev_cputime.stime;
	}
	/* adjust_times() reads prev from, and writes the result to, these two fields. */
	s->utime_ns = put_;
	s->stime_ns = pst;
	if (bounded)
		adjust_times_bounded(ut, st, rtime, o->off + sizeof(struct td_attr));
	else
		adjust_times_loop(ut, st, rtime, o->off + sizeof(struct td_attr));
	s->nvcsw = t->nvcsw;
	s->nivcsw = t->nivcsw;
	s->priority = t->prio - 100;
	s->nice = t->static_prio - 120;
	s->policy = t->policy;
	s->rt_priority = t->rt_priority;
	if (bpf_core_field_exists(t->thread_info.cpu)) {
		s->processor = t->thread_info.cpu;
	} else {
		struct task_struct___pre516 *o516 = (void *)t;
		s->processor = o516->cpu;
	}
	if (!put_attr_hdr(o, sizeof(*s), TD_GROUP_STAT))
		return false;
	o->off += sizeof(*s);
	return true;
}

/*
 * Per-CPU offsets, for summing percpu_counter deltas as /proc does since 6.16 and where that
 * was backported (get_mm_counter_sum(), see cfg_rss_sum). BPF has no per_cpu_ptr() for an arbitrary kernel pointer, and the
 * offsets' usual symbols (__per_cpu_offset, this_cpu_off) are not in kallsyms everywhere. So we
 * learn them from a per-CPU array of our own: bpf_map_lookup_percpu_elem() returns
 * base + offset[cpu], and the base is the array's pptrs[0]. Learned once per loaded instance.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} pcpu_probe SEC(".maps");

struct cpu_offsets {
	__u64 off[TD_BPF_MAX_CPUS];
	__u64 addr; /* a pointer stored here reads back as a plain number */
	__u32 ready;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_offsets);
} cpu_offsets SEC(".maps");

/* A pointer stored in a map value and read back is a plain number (ours to do arithmetic on). */
static __always_inline __u64 launder(struct cpu_offsets *co, const void *p)
{
	co->addr = (__u64)p;
	return *(volatile __u64 *)&co->addr;
}

struct off_fill {
	struct cpu_offsets *co;
	__u64 base;
};

static long fill_one_offset(__u64 cpu, struct off_fill *f)
{
	__u32 zero = 0;
	void *p;

	if (cpu >= cfg_nr_cpus || cpu >= TD_BPF_MAX_CPUS)
		return 1;
	p = bpf_map_lookup_percpu_elem(&pcpu_probe, &zero, cpu);
	if (!p)
		return 0;
	f->co->off[cpu & (TD_BPF_MAX_CPUS - 1)] = launder(f->co, p) - f->base;
	return 0;
}

static __always_inline struct cpu_offsets *cpu_offsets_get(void)
{
	__u32 zero = 0;
	struct cpu_offsets *co = bpf_map_lookup_elem(&cpu_offsets, &zero);
	struct off_fill f = {};

	if (!co)
		return 0;
	if (co->ready)
		return co;
	bpf_probe_read_kernel(&f.base, sizeof(f.base),
			      (void *)launder(co, &pcpu_probe) + bpf_core_field_offset(struct bpf_array, pptrs));
	if (!f.base)
		return 0;
	f.co = co;
	bpf_loop(TD_BPF_MAX_CPUS, fill_one_offset, &f, 0);
	co->ready = 1;
	return co;
}

struct cpu_sum {
	struct cpu_offsets *co;
	/* Each counter's per-CPU s32 (0: none to add); adjacent: all four in one per-CPU area,
	 * in MM_* order (percpu_counter_init_many(), 6.7+), read with one copy per CPU. */
	__u64 counters[4];
	s64 sum[4];
	bool adjacent;
};

static long add_cpu(__u64 cpu, struct cpu_sum *s)
{
	s32 v[4] = {};
	__u64 off;

	if (cpu >= cfg_nr_cpus)
		return 1;
	off = s->co->off[cpu & (TD_BPF_MAX_CPUS - 1)];
	if (s->adjacent) {
		bpf_probe_read_kernel(v, sizeof(v), (void *)(s->counters[0] + off));
	} else {
		for (int i = 0; i < 4; i++)
			if (s->counters[i])
				bpf_probe_read_kernel(&v[i], sizeof(v[i]), (void *)(s->counters[i] + off));
	}
	for (int i = 0; i < 4; i++)
		s->sum[i] += v[i];
	return 0;
}

/* The per-CPU counters of the last task the walk saw with cfg_rss_probe, both ways (indexed
 * by MM_*PAGES, in pages); seen says whether there was one. */
struct rss_probe {
	__u64 approx[4];
	__u64 sum[4];
	__u32 seen;
} rss_probe = {};

/*
 * The four rss counters of @mm (indexed by MM_*), in pages, as /proc shows them: the
 * approximate totals, or on kernels whose /proc sums the per-CPU deltas (cfg_rss_sum) the sums.
 * @bounded: with probe reads and without the per-CPU sum, which needs bpf_loop() and
 * bpf_map_lookup_percpu_elem() (kernels before 6.2, which dump_task_bounded is for, have no
 * per-CPU RSS counters anyway). Otherwise @mm's fields are read with plain loads, and the
 * per-CPU deltas of all four counters in one walk of the CPUs.
 */
static __always_inline void mm_counters(struct mm_struct *mm, __u64 *c, bool bounded)
{
	struct cpu_sum cs = {};
	s64 v[4];

	if (bpf_core_type_exists(struct mm_rss_stat___pre62)) {
		struct mm_struct___pre62 *o = (void *)mm;

		/* One copy of the four atomic_long_t (6.1's verifier refuses plain loads through
		 * that typedef in an array). */
		bpf_probe_read_kernel(v, sizeof(v), __builtin_preserve_access_index(&o->rss_stat));
	} else {
		/* Index by the kernel's struct size, not this header's (arrays are not relocated). */
		__u64 size = bpf_core_type_size(struct percpu_counter);
		void *rss = (void *)mm + bpf_core_field_offset(struct mm_struct, rss_stat);

		for (int i = 0; i < 4; i++) {
			struct percpu_counter *pc = rss + i * size;

			if (bounded)
				bpf_probe_read_kernel(&v[i], sizeof(v[i]), &pc->count);
			else
				v[i] = pc->count;
		}
		if (!bounded && (cfg_rss_sum || cfg_rss_probe)) {
			cs.co = cpu_offsets_get();
			for (int i = 0; i < 4; i++) {
				struct percpu_counter *pc = rss + i * size;

				/* A number, whatever type the kernel's BTF gives the field. */
				cs.counters[i] = cs.co ? launder(cs.co, pc->counters) : 0;
				cs.sum[i] = v[i];
			}
			cs.adjacent = cs.counters[0] && cs.counters[1] == cs.counters[0] + 4 &&
				      cs.counters[2] == cs.counters[0] + 8 &&
				      cs.counters[3] == cs.counters[0] + 12;
			if (cs.co)
				bpf_loop(TD_BPF_MAX_CPUS, add_cpu, &cs, 0);
			for (int i = 0; i < 4; i++) {
				if (cfg_rss_probe) {
					rss_probe.approx[i] = v[i] > 0 ? v[i] : 0;
					rss_probe.sum[i] = cs.sum[i] > 0 ? cs.sum[i] : 0;
					rss_probe.seen = 1;
				}
				if (cfg_rss_sum)
					v[i] = cs.sum[i];
			}
		}
	}
	for (int i = 0; i < 4; i++)
		c[i] = v[i] > 0 ? v[i] : 0;
}

/*
 * SIGNAL, as task_sig() (fs/proc/array.c) reads it under lock_task_sighand(): all zero for a
 * task past __exit_signal() (no sighand); ignored and caught from the 64 handlers as
 * collect_sigign_sigcatch(): SIG_IGN (1) is ignored, anything but SIG_DFL (0) caught. The
 * actions are copied in one read (2 KiB) and scanned in the scratch map.
 */
static __always_inline bool put_signal(struct out *o, struct task_struct *t)
{
	struct td_signal *r = rec_at(o, o->off + sizeof(struct td_attr));
	struct scratch *sc = (void *)o->buf;
	struct sighand_struct *sh = t->sighand;
	__u32 i;

	if (!r)
		return false;
	__builtin_memset(r, 0, sizeof(*r));
	if (sh) {
		if (bpf_core_type_size(struct k_sigaction) != TD_KSIGACTION_SIZE)
			return needs_procfs(o, TD_GROUP_SIGNAL);
		r->pending = t->pending.signal.sig[0];
		r->shared_pending = t->signal->shared_pending.signal.sig[0];
		r->blocked = t->blocked.sig[0];
		if (bpf_probe_read_kernel(sc->sigact, sizeof(sc->sigact),
					  __builtin_preserve_access_index(&sh->action)))
			return needs_procfs(o, TD_GROUP_SIGNAL);
		for (i = 0; i < 64; i++) {
			__u64 h = *(__u64 *)(sc->sigact + i * TD_KSIGACTION_SIZE);

			if (h == 1)
				r->ignored |= 1ULL << i;
			else if (h)
				r->caught |= 1ULL << i;
		}
	}
	if (!put_attr_hdr(o, sizeof(*r), TD_GROUP_SIGNAL))
		return false;
	o->off += sizeof(*r);
	return true;
}

/*
 * The number of @p in the namespace @ns at @level (pid_nr_ns()), 0 if it has none there, with
 * probe reads and no branch: a NULL @p reads as zeros, and the two tests are masks. (Each
 * branch here multiplied the paths the verifier walks, per level.)
 */
static __always_inline __u32 pid_nr_at(struct pid *p, __u32 level, struct pid_namespace *ns)
{
	struct upid u = {};
	__u64 lvl = BPF_CORE_READ(p, level), d, ne, lt;

	bpf_probe_read_kernel(&u, sizeof(u), __builtin_preserve_access_index(&p->numbers[level & 63]));
	d = (__u64)u.ns ^ (__u64)ns;
	ne = (d | -d) >> 63;			/* u.ns != ns */
	lt = (lvl - (__u64)level) >> 63;	/* lvl < level */
	return u.nr & (__u32)((ne | lt) - 1);
}

/*
 * NS's levels: the ids of the task at @task in each pid namespace from level @level down to its
 * own, as the NSpid, NStgid, NSpgid and NSsid lines of /proc/PID/status list them, written as
 * td_ns_ids at @off in the scratch buffer; returns how many. Global, so the loop is verified
 * once (see put_name()), with probe reads and one branch per level.
 */
__noinline int put_ns_levels(__u64 task, __u32 level, __u32 off)
{
	struct task_struct *t = (void *)task;
	struct signal_struct *sig = BPF_CORE_READ(t, signal);
	struct pid *tp = BPF_CORE_READ(t, thread_pid);
	struct pid *tgid = BPF_CORE_READ(sig, pids[PIDTYPE_TGID]);
	struct pid *pgid = BPF_CORE_READ(sig, pids[PIDTYPE_PGID]);
	struct pid *sid = BPF_CORE_READ(sig, pids[PIDTYPE_SID]);
	__u32 zero = 0, top, i, n = 0;
	__u8 *buf = bpf_map_lookup_elem(&scratch_map, &zero);

	if (!buf || !tp || off > TD_FIXED_ROOM)
		return 0;
	buf += room_mask(off);
	top = BPF_CORE_READ(tp, level);
	for (i = 0; i < TD_NS_MAX_LEVELS; i++) {
		struct td_ns_ids *l = (void *)(buf + i * sizeof(*l));
		__u32 g = level + i;
		struct upid up = {};

		if (g > top)
			break;
		bpf_probe_read_kernel(&up, sizeof(up),
				      __builtin_preserve_access_index(&tp->numbers[g & 63]));
		l->pid = up.nr;
		l->tgid = pid_nr_at(tgid, g, up.ns);
		l->pgid = pid_nr_at(pgid, g, up.ns);
		l->sid = pid_nr_at(sid, g, up.ns);
		n++;
	}
	return n;
}

/*
 * NS, as the links in /proc/PID/ns (each namespace type's ->get()) and the NS* lines of
 * /proc/PID/status (proc_pid_status()) show them: pid from the task's own pid (the namespace it
 * is active in), user from its credentials, the others from its nsproxy (none for a task past
 * exit_task_namespaces()), pid_for_children only once that namespace has a child reaper
 * (pidns_for_children_get()); then the task's ids at each level from @ns's down to its own
 * (put_ns_levels()).
 */
static __always_inline bool put_ns(struct out *o, struct task_struct *t, struct ns_ctx *ns)
{
	struct td_ns *r = rec_at(o, o->off + sizeof(struct td_attr));
	struct nsproxy *nsp = t->nsproxy;
	struct pid *tp = t->thread_pid;
	struct pid_namespace *pc;
	struct upid up = {};
	__u32 n = 0, top = 0, len;

	if (!r)
		return false;
	__builtin_memset(r, 0, sizeof(*r));
	if (tp) {
		top = tp->level;
		bpf_probe_read_kernel(&up, sizeof(up),
				      __builtin_preserve_access_index(&tp->numbers[top & 63]));
		r->pid = up.ns ? BPF_CORE_READ(up.ns, ns.inum) : 0;
	}
	r->user = t->real_cred->user_ns->ns.inum;
	if (nsp) {
		pc = nsp->pid_ns_for_children;
		r->pid_for_children = pc && pc->child_reaper ? pc->ns.inum : 0;
		r->mnt = nsp->mnt_ns->ns.inum;
		r->net = nsp->net_ns->ns.inum;
		r->ipc = nsp->ipc_ns->ns.inum;
		r->uts = nsp->uts_ns->ns.inum;
		r->cgroup = nsp->cgroup_ns->ns.inum;
		if (bpf_core_field_exists(nsp->time_ns)) {
			r->time = nsp->time_ns->ns.inum;
			r->time_for_children = nsp->time_ns_for_children->ns.inum;
		}
	}
	/* In a global function on every kernel: inline, the levels' branches made 6.1's verifier
	 * walk 120,000 more instructions of the task program (6.18's, 14,000). */
	if (tp)
		n = put_ns_levels(as_number(o, t), ns->level,
				  o->off + sizeof(struct td_attr) + sizeof(*r));
	if (n > TD_NS_MAX_LEVELS)
		return false;
	r->levels = n;
	len = sizeof(*r) + n * sizeof(struct td_ns_ids);
	if (!put_attr_hdr(o, len, TD_GROUP_NS))
		return false;
	o->off += len;
	return true;
}

/*
 * FILES' descriptor count: the bits set in the open-descriptor bitmap (what /proc/PID/fd
 * lists, but for a descriptor reserved and not yet installed), @words words at @bits, one word
 * (64 descriptors) per step.
 */
struct fd_count {
	unsigned long *bits;
	__u32 words;
	__u32 n;
};

static long count_fds(__u64 i, struct fd_count *c)
{
	unsigned long w = 0;

	/* Only the bitmap's own words: a small one is followed by other fields. */
	if (i >= c->words)
		return 1;
	bpf_probe_read_kernel(&w, sizeof(w), c->bits + i);
	c->n += __builtin_popcountll(w);
	return 0;
}

/*
 * The bitmap words counted here: 256, 16,384 descriptors; a process with a larger table gets
 * FILES from /proc. (A bpf_loop() over the words, unbounded, made the verifier walk 14,000
 * more instructions of the task program: this global function is verified once, alone.)
 */
#define TD_FD_WORDS 256

/* The count, or -1 for more than TD_FD_WORDS words. */
__noinline int count_fds_words(__u64 bits, __u32 words)
{
	struct fd_count c = { .bits = (void *)bits, .words = words };

	if (words > TD_FD_WORDS)
		return -1;
	for (__u32 i = 0; i < TD_FD_WORDS; i++) {
		if (count_fds(i, &c))
			break;
	}
	return c.n;
}

/*
 * FILES, as /proc/PID/fd lists and /proc/PID/limits prints: the open descriptors of the task's
 * files_struct (none without one: a zombie, some kernel threads) and its process's sixteen
 * resource limits, copied in one read.
 */
static __always_inline bool put_files(struct out *o, struct task_struct *t)
{
	struct td_files *r = rec_at(o, o->off + sizeof(struct td_attr));
	struct files_struct *files = t->files;
	struct signal_struct *sig = t->signal;
	struct fdtable *fdt;
	__u32 len = sizeof(*r) + TD_FILES_NLIMITS * sizeof(struct td_limit);

	if (!r)
		return false;
	if (bpf_core_field_size(sig->rlim) != TD_FILES_NLIMITS * sizeof(struct td_limit))
		return needs_procfs(o, TD_GROUP_FILES);
	__builtin_memset(r, 0, sizeof(*r));
	r->nlimits = TD_FILES_NLIMITS;
	fdt = files ? files->fdt : 0;
	if (fdt) {
		__u32 words = (fdt->max_fds + 63) / 64;
		unsigned long *bits = fdt->open_fds;

		int n = count_fds_words(as_number(o, bits), words);

		if (n < 0)
			return needs_procfs(o, TD_GROUP_FILES);
		r->fds = n;
	}
	if (bpf_probe_read_kernel((void *)(r + 1), TD_FILES_NLIMITS * sizeof(struct td_limit),
				  __builtin_preserve_access_index(&sig->rlim)))
		return needs_procfs(o, TD_GROUP_FILES);
	if (!put_attr_hdr(o, len, TD_GROUP_FILES))
		return false;
	o->off += len;
	return true;
}

/*
 * IO's counters into the scratch buffer's td_io, as /proc/PID/io prints them for the task at
 * @task: its own (for the thread strategies), or its process's: its dead threads' counters (in the
 * signal_struct) and each live thread's, walked with bpf_loop() unless @bounded (kernels
 * without it), where only a process of one thread is summed. Returns whether the counters
 * are complete. Global, so the verifier checks it once rather than on every path of the
 * program (inline, it cost 42,000 more instructions).
 */
static __always_inline int io_counters(__u64 task, bool bounded)
{
	/* Read here, not passed: keeping the strategy live in the caller until IO split its
	 * paths by strategy all the way there (42,000 more instructions to verify). */
	__u32 strategy = cfg_strategy;
	bool whole = strategy != TD_STRATEGY_THREAD && strategy != TD_STRATEGY_ALL_THREAD;
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch_map, &zero);
	struct task_struct *t = (void *)task;
	struct signal_struct *sg;
	struct list_head *head, *next;
	/* On the stack: bpf_loop() takes no other context; the sum is in the scratch map. */
	struct io_sum s = {};

	if (!sc)
		return 0;
	if (strategy == TD_STRATEGY_ALL_WITH_THREADS && sc->thread_pass)
		whole = false;
	if (!whole)
		return !bpf_probe_read_kernel(&sc->io, sizeof(sc->io),
					      __builtin_preserve_access_index(&t->ioac));
	sg = BPF_CORE_READ(t, signal);
	if (bpf_probe_read_kernel(&sc->io, sizeof(sc->io),
				  __builtin_preserve_access_index(&sg->ioac)))
		return 0;
	head = __builtin_preserve_access_index(&sg->thread_head);
	next = BPF_CORE_READ(sg, thread_head.next);
	if (next == __builtin_preserve_access_index(&t->thread_node) &&
	    BPF_CORE_READ(t, thread_node.next) == head)
		/* Most processes: @t is the one live thread. */
		return add_io(&sc->io, __builtin_preserve_access_index(&t->ioac), &sc->io_tmp);
	if (bounded)
		return 0;
	s.acc = &sc->io;
	s.tmp = &sc->io_tmp;
	s.head = head;
	s.pos = next;
	if (bpf_ksym_exists(bpf_rdonly_cast))
		bpf_loop(TD_BPF_MAX_THREADS, sum_io_thread_cast, &s, 0);
	else
		bpf_loop(TD_BPF_MAX_THREADS, sum_io_thread, &s, 0);
	return s.done;
}

__noinline int io_counters_loop(__u64 task)
{
	return io_counters(task, false);
}

__noinline int io_counters_bounded(__u64 task)
{
	return io_counters(task, true);
}

/*
 * IO, as /proc/PID/io prints it (see io_counters()). A kernel whose task_io_accounting is not
 * the seven counters (one built without CONFIG_TASK_XACCT or CONFIG_TASK_IO_ACCOUNTING) gets it
 * from /proc, and so, on kernels without bpf_loop(), does a process of more than one thread.
 */
static __always_inline bool put_io(struct out *o, struct task_struct *t, bool bounded)
{
	struct td_io *r = rec_at(o, o->off + sizeof(struct td_attr));
	struct scratch *sc = (void *)o->buf;
	int ok;

	if (!r)
		return false;
	if (bpf_core_type_size(struct task_io_accounting) != sizeof(*r))
		return needs_procfs(o, TD_GROUP_IO);
	if (bounded)
		ok = io_counters_bounded(as_number(o, t));
	else
		ok = io_counters_loop(as_number(o, t));
	if (!ok || bpf_probe_read_kernel(r, sizeof(*r), &sc->io))
		return needs_procfs(o, TD_GROUP_IO);
	if (!put_attr_hdr(o, sizeof(*r), TD_GROUP_IO))
		return false;
	o->off += sizeof(*r);
	return true;
}

/*
 * DELAY's numbers for the task at @task into the scratch buffer's td_delay: schedstat's three
 * (sum_exec_runtime, sched_info's run_delay and pcount), stat field 42 (the block I/O delay in
 * clock ticks: with the swap-in delay before 5.14, whose task_delay_info has no compact_delay)
 * and the delay-accounting totals and counts this kernel has. Global, so the verifier checks it
 * once. Returns whether the record is complete.
 */
__noinline int delay_counters(__u64 task)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch_map, &zero);
	struct task_struct *t = (void *)task;
	struct task_delay_info *d;
	struct td_delay *r;
	__u64 npt = cfg_ns_per_tick ?: 1, blkio;

	if (!sc)
		return 0;
	r = &sc->delay;
	__builtin_memset(r, 0, sizeof(*r));
	r->run_ns = BPF_CORE_READ(t, se.sum_exec_runtime);
	if (bpf_core_field_exists(t->sched_info)) {
		r->wait_ns = BPF_CORE_READ(t, sched_info.run_delay);
		r->timeslices = BPF_CORE_READ(t, sched_info.pcount);
	}
	if (!bpf_core_field_exists(t->delays))
		return 1;
	d = BPF_CORE_READ(t, delays);
	if (!d)
		return 1;
	r->flags = TD_DELAY_F_COUNTERS;
	r->blkio_delay_ns = BPF_CORE_READ(d, blkio_delay);
	r->blkio_count = BPF_CORE_READ(d, blkio_count);
	r->swapin_delay_ns = BPF_CORE_READ(d, swapin_delay);
	r->swapin_count = BPF_CORE_READ(d, swapin_count);
	r->freepages_delay_ns = BPF_CORE_READ(d, freepages_delay);
	r->freepages_count = BPF_CORE_READ(d, freepages_count);
	r->thrashing_delay_ns = BPF_CORE_READ(d, thrashing_delay);
	r->thrashing_count = BPF_CORE_READ(d, thrashing_count);
	blkio = r->blkio_delay_ns;
	if (bpf_core_field_exists(d->compact_delay)) {
		r->compact_delay_ns = BPF_CORE_READ(d, compact_delay);
		r->compact_count = BPF_CORE_READ(d, compact_count);
	} else {
		blkio += r->swapin_delay_ns;
	}
	if (bpf_core_field_exists(d->wpcopy_delay)) {
		r->wpcopy_delay_ns = BPF_CORE_READ(d, wpcopy_delay);
		r->wpcopy_count = BPF_CORE_READ(d, wpcopy_count);
	}
	if (bpf_core_field_exists(d->irq_delay)) {
		r->irq_delay_ns = BPF_CORE_READ(d, irq_delay);
		r->irq_count = BPF_CORE_READ(d, irq_count);
	}
	/* nsec_to_clock_t() */
	r->blkio_ticks = blkio / npt;
	return 1;
}

/* DELAY (see delay_counters()). */
static __always_inline bool put_delay(struct out *o, struct task_struct *t)
{
	struct td_delay *r = rec_at(o, o->off + sizeof(struct td_attr));
	struct scratch *sc = (void *)o->buf;

	if (!r)
		return false;
	if (!delay_counters(as_number(o, t)) ||
	    bpf_probe_read_kernel(r, sizeof(*r), &sc->delay))
		return needs_procfs(o, TD_GROUP_DELAY);
	if (!put_attr_hdr(o, sizeof(*r), TD_GROUP_DELAY))
		return false;
	o->off += sizeof(*r);
	return true;
}

/*
 * CGROUP: the text of /proc/PID/cgroup (proc_cgroup_show()) and the task's cgroup id.
 *
 * A line per hierarchy, "ID:CONTROLLERS:PATH\n", the unified one as "0::PATH\n" and last, PATH
 * being the task's cgroup relative to the cgroup the reader's cgroup namespace is rooted at
 * (kernfs_path_from_node()), " (deleted)" after it where a unified cgroup is gone, "/" for an
 * exiting task in a v1 hierarchy. The kernel prints the hierarchies newest first; each
 * css_set links its cgroups in the order the hierarchies were made (link_css_set() appends, a
 * new hierarchy is appended to every set), so the program walks the task's links and those of
 * the reader's namespace root backwards, side by side. The unified line is left out where
 * cgroup2 was never mounted (cgrp_dfl_visible, which user space reads from its own file:
 * cfg_cgroup_no_unified). Where the unified hierarchy is the only one (cfg_cgroup_v1 0) that
 * line alone is written, from the task's dfl_cgrp; the bounded flavour does only that.
 *
 * The id is the unified cgroup's kernfs node id (its directory's inode number), 0 for a deleted
 * cgroup as for /proc's reader, which finds no directory. Writes the attribute (header,
 * td_cgroup, text) at @off of the scratch buffer and returns its length, or 0 where /proc must
 * say it: a cgroup outside the reader's namespace (a path through ".."), one deeper than
 * TD_CGROUP_DEPTH, more than TD_CGROUP_ROOTS hierarchies, a text that does not fit.
 * Made global once per flavour, so verified once; it reads with probe reads, the current task
 * included, as the bounded flavour must.
 */
__u32 cfg_cgroup_v1 = 0;
__u32 cfg_cgroup_no_unified = 0;
/* Numbers the walks, for the texts kept within one walk (struct cg_cache, struct pw_cache). */
__u32 cfg_walk_gen = 0;

#define TD_CGROUP_ROOTS 32
#define TD_CGROUP_SUBSYS 16
#define PF_EXITING 0x00000004

/*
 * A kernfs node's parent. Each read is a subprogram of its own, called only on the path this
 * kernel's BTF selects: inline, clang hoists the two field offsets out of the loops that call
 * this, and the relocation of the field this kernel lacks (an invalid instruction) would then
 * be on the path taken.
 */
static __noinline struct kernfs_node *kn_parent_615(struct kernfs_node *kn)
{
	return BPF_CORE_READ(kn, __parent);
}

static __noinline struct kernfs_node *kn_parent_pre615(struct kernfs_node___pre615 *kn)
{
	return BPF_CORE_READ(kn, parent);
}

static __always_inline struct kernfs_node *kn_parent(struct kernfs_node *kn)
{
	if (bpf_core_field_exists(kn->__parent))
		return kn_parent_615(kn);
	return kn_parent_pre615((void *)kn);
}

/* The callbacks' context (bpf_loop() takes a stack pointer). */
struct cg_ctx {
	struct scratch *sc;
};

/* Where text goes next at cursor @at of the scratch buffer (CGROUP's, PATHS', SCHED's), masked
 * for the verifier (the barrier keeps clang from dropping the mask where it knows the value). */
static __always_inline __u32 text_at(__u32 at)
{
	barrier_var(at);
	return at & (2 * TD_FIXED_ROOM - 1);
}

/* Appends @c at cursor @at. */
static __always_inline void text_put_char(struct scratch *sc, __u32 *at, char c)
{
	sc->buf[text_at(*at)] = c;
	(*at)++;
}

/* Appends a NUL-terminated kernel string of at most @max bytes; false if the text is full. */
static __always_inline bool cg_put_str(struct scratch *sc, const char *str, __u32 max)
{
	long r = bpf_probe_read_kernel_str(sc->buf + text_at(sc->cg.at), max, str);

	if (r <= 0)
		return false;
	sc->cg.at += r - 1;
	return sc->cg.at < 2 * TD_FIXED_ROOM - 2 * TD_KERNFS_NAME;
}

static long cg_up(__u64 i, struct cg_ctx *c)
{
	struct scratch *sc = c->sc;
	struct kernfs_node *kn = (void *)sc->cg.kn;

	if (sc->cg.kn == sc->cg.stop) {
		sc->cg.depth = i;
		sc->cg.end = 1;
		return 1;
	}
	sc->kn_chain[i & (TD_CGROUP_DEPTH - 1)] = sc->cg.kn;
	sc->cg.kn = (__u64)kn_parent(kn);
	if (!sc->cg.kn || i >= TD_CGROUP_DEPTH) {
		sc->cg.end = -1;
		return 1;
	}
	return 0;
}

static long cg_down(__u64 i, struct cg_ctx *c)
{
	struct scratch *sc = c->sc;
	struct kernfs_node *kn;

	if (i >= sc->cg.depth) {
		sc->cg.end = 1;
		return 1;
	}
	if (i)
		text_put_char(sc, &sc->cg.at, '/');
	kn = (void *)sc->kn_chain[(sc->cg.depth - 1 - i) & (TD_CGROUP_DEPTH - 1)];
	if (!cg_put_str(sc, BPF_CORE_READ(kn, name), TD_KERNFS_NAME)) {
		sc->cg.end = -1;
		return 1;
	}
	return 0;
}

/* Appends the path from cg.stop down to cg.kn ("/" for the same node). */
static __always_inline bool cg_path(struct cg_ctx *c, bool bounded)
{
	struct scratch *sc = c->sc;
	__u32 i;

	text_put_char(sc, &sc->cg.at, '/');
	sc->cg.end = 0;
	if (bounded) {
		for (i = 0; i < TD_CGROUP_DEPTH + 1 && !sc->cg.end; i++)
			cg_up(i, c);
	} else {
		bpf_loop(TD_CGROUP_DEPTH + 1, cg_up, c, 0);
	}
	if (sc->cg.end != 1)
		return false;
	sc->cg.end = 0;
	if (bounded) {
		for (i = 0; i < TD_CGROUP_DEPTH + 1 && !sc->cg.end; i++)
			cg_down(i, c);
	} else {
		bpf_loop(TD_CGROUP_DEPTH + 1, cg_down, c, 0);
	}
	return sc->cg.end == 1;
}

/* One controller of a v1 hierarchy's list: its legacy name, comma-separated. */
static long cg_subsys(__u64 i, struct cg_ctx *c)
{
	struct scratch *sc = c->sc;
	struct cgroup_subsys_state *css = 0;
	struct cgroup_subsys *ss;

	if (i >= TD_CGROUP_SUBSYS)
		return 1;
	if (!(sc->cg.mask & (1u << i)))
		return 0;
	bpf_probe_read_kernel(&css, sizeof(css),
			      (void *)sc->cg.cset + bpf_core_field_offset(struct css_set, subsys) + i * 8);
	ss = BPF_CORE_READ(css, ss);
	if (sc->buf[(sc->cg.at - 1) & (2 * TD_FIXED_ROOM - 1)] != ':')
		text_put_char(sc, &sc->cg.at, ',');
	if (!ss || !cg_put_str(sc, BPF_CORE_READ(ss, legacy_name), 32)) {
		sc->cg.end = -1;
		return 1;
	}
	return 0;
}

/* One line, for the next hierarchy back on both lists; ends the walk at their heads. */
static long cg_line(__u64 i, struct cg_ctx *c)
{
	struct scratch *sc = c->sc;
	struct list_head *t_at = (void *)sc->cg.task_at, *n_at = (void *)sc->cg.ns_at;
	__u64 link_off = bpf_core_field_offset(struct cgrp_cset_link, cgrp_link);
	struct cgroup *cg, *ns_cg;
	struct cgroup_root *root;
	__u32 n;
	int id;

	t_at = BPF_CORE_READ(t_at, prev);
	n_at = BPF_CORE_READ(n_at, prev);
	if ((__u64)t_at == sc->cg.task_head || (__u64)n_at == sc->cg.ns_head) {
		sc->cg.end = (__u64)t_at == sc->cg.task_head && (__u64)n_at == sc->cg.ns_head ? 1 : -1;
		return 1;
	}
	sc->cg.task_at = (__u64)t_at;
	sc->cg.ns_at = (__u64)n_at;
	cg = BPF_CORE_READ((struct cgrp_cset_link *)((void *)t_at - link_off), cgrp);
	ns_cg = BPF_CORE_READ((struct cgrp_cset_link *)((void *)n_at - link_off), cgrp);
	root = BPF_CORE_READ(cg, root);
	if (!root || root != BPF_CORE_READ(ns_cg, root))
		goto fail;
	id = BPF_CORE_READ(root, hierarchy_id);
	if (id == 0 && cfg_cgroup_no_unified)
		return 0;
	if (id < 0 || id > 999)
		goto fail;
	n = id;
	if (n >= 100)
		text_put_char(sc, &sc->cg.at, '0' + n / 100);
	if (n >= 10)
		text_put_char(sc, &sc->cg.at, '0' + n / 10 % 10);
	text_put_char(sc, &sc->cg.at, '0' + n % 10);
	text_put_char(sc, &sc->cg.at, ':');
	if (id) {
		sc->cg.mask = BPF_CORE_READ(root, subsys_mask);
		sc->cg.end = 0;
		bpf_loop(TD_CGROUP_SUBSYS, cg_subsys, c, 0);
		if (sc->cg.end < 0)
			goto fail;
		if (BPF_CORE_READ(root, name[0])) {
			if (sc->cg.mask)
				text_put_char(sc, &sc->cg.at, ',');
			text_put_char(sc, &sc->cg.at, 'n');
			text_put_char(sc, &sc->cg.at, 'a');
			text_put_char(sc, &sc->cg.at, 'm');
			text_put_char(sc, &sc->cg.at, 'e');
			text_put_char(sc, &sc->cg.at, '=');
			if (!cg_put_str(sc, (void *)root + bpf_core_field_offset(struct cgroup_root, name), 64))
				goto fail;
		}
	}
	text_put_char(sc, &sc->cg.at, ':');
	if (id && sc->cg.exiting) {
		text_put_char(sc, &sc->cg.at, '/');
	} else {
		sc->cg.kn = (__u64)BPF_CORE_READ(cg, kn);
		sc->cg.stop = (__u64)BPF_CORE_READ(ns_cg, kn);
		if (!sc->cg.kn || !sc->cg.stop || !cg_path(c, false))
			goto fail;
	}
	if (id == 0 && !(BPF_CORE_READ(cg, self.flags) & CSS_ONLINE)) {
		__builtin_memcpy(sc->buf + text_at(sc->cg.at), " (deleted)", 10);
		sc->cg.at += 10;
	}
	text_put_char(sc, &sc->cg.at, '\n');
	return 0;
fail:
	sc->cg.end = -1;
	return 1;
}

static __always_inline int cgroup_attr(__u64 task, __u32 off, bool bounded)
{
	struct task_struct *t = (void *)task;
	struct task_struct *cur = (void *)bpf_get_current_task();
	struct td_attr a = { .attr_type = TD_GROUP_CGROUP };
	struct css_set *cset, *ns_cset;
	struct td_cgroup rec = {};
	struct cg_ctx c = {};
	struct scratch *sc;
	__u32 zero = 0, len, text;
	struct cgroup *cg;
	bool exiting;
	__u8 *dst;

	sc = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!sc || off > TD_FIXED_ROOM)
		return 0;
	c.sc = sc;
	cset = BPF_CORE_READ(t, cgroups);
	ns_cset = BPF_CORE_READ(cur, nsproxy, cgroup_ns, root_cset);
	cg = BPF_CORE_READ(cset, dfl_cgrp);
	if (!cset || !ns_cset || !cg)
		return 0;
	exiting = BPF_CORE_READ(t, flags) & PF_EXITING;
	dst = sc->buf + room_mask(off);
	if (!exiting && sc->cg_cache.gen == cfg_walk_gen && sc->cg_cache.cset == (__u64)cset &&
	    sc->cg_cache.ns_cset == (__u64)ns_cset) {
		len = sc->cg_cache.len;
		if (len > TD_CG_CACHE_MAX - 1 || off + sizeof(a) + sizeof(rec) + len > TD_FIXED_ROOM)
			return 0;
		rec.id = sc->cg_cache.id;
		bpf_probe_read_kernel(dst + sizeof(a) + sizeof(rec), len & (TD_CG_CACHE_MAX - 1),
				      sc->cg_cache.text);
		len += sizeof(a) + sizeof(rec);
		a.len = len;
		__builtin_memcpy(dst, &a, sizeof(a));
		__builtin_memcpy(dst + sizeof(a), &rec, sizeof(rec));
		return len;
	}
	if (BPF_CORE_READ(cg, self.flags) & CSS_ONLINE)
		rec.id = BPF_CORE_READ(cg, kn, id);
	sc->cg.at = off + sizeof(a) + sizeof(rec);
	if (cfg_cgroup_v1 && !bounded) {
		sc->cg.cset = (__u64)cset;
		sc->cg.exiting = exiting;
		sc->cg.task_head = (__u64)__builtin_preserve_access_index(&cset->cgrp_links);
		sc->cg.ns_head = (__u64)__builtin_preserve_access_index(&ns_cset->cgrp_links);
		sc->cg.task_at = sc->cg.task_head;
		sc->cg.ns_at = sc->cg.ns_head;
		sc->cg.end = 0;
		bpf_loop(TD_CGROUP_ROOTS, cg_line, &c, 0);
		if (sc->cg.end != 1)
			return 0;
	} else if (cfg_cgroup_v1) {
		return 0;
	} else if (!cfg_cgroup_no_unified) {
		__builtin_memcpy(sc->buf + text_at(sc->cg.at), "0::", 3);
		sc->cg.at += 3;
		sc->cg.kn = (__u64)BPF_CORE_READ(cg, kn);
		sc->cg.stop = (__u64)BPF_CORE_READ(ns_cset, dfl_cgrp, kn);
		if (!sc->cg.kn || !sc->cg.stop || !cg_path(&c, bounded))
			return 0;
		if (rec.id == 0) {
			__builtin_memcpy(sc->buf + text_at(sc->cg.at), " (deleted)", 10);
			sc->cg.at += 10;
		}
		text_put_char(sc, &sc->cg.at, '\n');
	}
	len = sc->cg.at - off;
	if (sc->cg.at > TD_FIXED_ROOM || len > TD_FIXED_ROOM)
		return 0;
	a.len = len;
	__builtin_memcpy(dst, &a, sizeof(a));
	__builtin_memcpy(dst + sizeof(a), &rec, sizeof(rec));
	/* Remembered for the next task of this css_set. */
	text = len - sizeof(a) - sizeof(rec);
	if (!exiting && text < TD_CG_CACHE_MAX) {
		sc->cg_cache.gen = cfg_walk_gen;
		sc->cg_cache.cset = (__u64)cset;
		sc->cg_cache.ns_cset = (__u64)ns_cset;
		sc->cg_cache.id = rec.id;
		sc->cg_cache.len = text;
		bpf_probe_read_kernel(sc->cg_cache.text, text & (TD_CG_CACHE_MAX - 1),
				      dst + sizeof(a) + sizeof(rec));
	}
	return len;
}

__noinline int put_cgroup_attr_loop(__u64 task, __u32 off)
{
	return cgroup_attr(task, off, false);
}

__noinline int put_cgroup_attr_bounded(__u64 task, __u32 off)
{
	return cgroup_attr(task, off, true);
}

/* The sequence count of @fs, odd while its root or working directory changes. */
static __always_inline __u32 fs_seq(struct fs_struct *fs)
{
	struct fs_struct___seqlock *fs2 = (void *)fs;

	if (bpf_core_field_exists(fs2->seq.seqcount.seqcount.sequence))
		return BPF_CORE_READ(fs2, seq.seqcount.seqcount.sequence);
	return BPF_CORE_READ(fs, seq.seqcount.sequence);
}

/* The reader's root directory, read with probe reads of the current task. */
static __always_inline bool reader_root(struct path *r)
{
	struct task_struct *cur = (void *)bpf_get_current_task();
	struct fs_struct *fs = BPF_CORE_READ(cur, fs);

	return fs && !bpf_probe_read_kernel(r, sizeof(*r), __builtin_preserve_access_index(&fs->root));
}

/* path_text()'s callbacks' context (bpf_loop() takes a stack pointer). */
struct pw_ctx {
	struct scratch *sc;
};

/*
 * One step of __prepend_path()'s walk up: from a mount's root to its mountpoint in the parent
 * mount, else from a dentry to its parent (remembered, with the parent it had). Ends at the
 * reader's root, at the top of the mount tree (where d_path() stops too), at a dentry that is
 * its own parent (escaped), or past TD_ROOT_DEPTH components (-1: /proc's answer is wanted).
 */
static long pw_up(__u64 i, struct pw_ctx *c)
{
	struct scratch *sc = c->sc;
	struct dentry *dentry = (void *)sc->rw.dentry, *parent;
	struct mount *mnt = (void *)sc->rw.mnt, *up;
	__u64 mnt_off = bpf_core_field_offset(struct mount, mnt);

	if ((void *)dentry == sc->pw_root.dentry && (void *)mnt + mnt_off == sc->pw_root.mnt)
		goto done;
	if (dentry == BPF_CORE_READ(mnt, mnt.mnt_root)) {
		up = BPF_CORE_READ(mnt, mnt_parent);
		if (up == mnt || !up)
			goto done;
		sc->rw.dentry = (__u64)BPF_CORE_READ(mnt, mnt_mountpoint);
		sc->rw.mnt = (__u64)up;
		return 0;
	}
	parent = BPF_CORE_READ(dentry, d_parent);
	if (parent == dentry)
		goto done;
	if (!parent || sc->rw.n >= TD_ROOT_DEPTH) {
		sc->rw.end = -1;
		return 1;
	}
	sc->root_chain[sc->rw.n & (TD_ROOT_DEPTH - 1)] = (__u64)dentry;
	sc->parent_chain[sc->rw.n & (TD_ROOT_DEPTH - 1)] = (__u64)parent;
	sc->rw.n++;
	sc->rw.dentry = (__u64)parent;
	return 0;
done:
	sc->rw.end = 1;
	return 1;
}

/*
 * One component on the way back down: "/" and its name. A dentry moved (another parent) or
 * renamed (another name or hash) since the walk up ends the walk with -1, where d_path()
 * would have retried under rename_lock: /proc's answer is wanted then.
 */
static long pw_down(__u64 i, struct pw_ctx *c)
{
	struct scratch *sc = c->sc;
	const unsigned char *name;
	struct dentry *dentry;
	__u32 j, hash;
	long r;

	if (i >= sc->rw.n) {
		sc->rw.end = 1;
		return 1;
	}
	j = (sc->rw.n - 1 - i) & (TD_ROOT_DEPTH - 1);
	dentry = (void *)sc->root_chain[j];
	name = BPF_CORE_READ(dentry, d_name.name);
	hash = BPF_CORE_READ(dentry, d_name.hash);
	if ((__u64)BPF_CORE_READ(dentry, d_parent) != sc->parent_chain[j])
		goto fail;
	sc->buf[text_at(sc->rw.at)] = '/';
	sc->rw.at++;
	r = bpf_probe_read_kernel_str(sc->buf + text_at(sc->rw.at), TD_KERNFS_NAME, name);
	if (r <= 0 || BPF_CORE_READ(dentry, d_name.name) != name ||
	    BPF_CORE_READ(dentry, d_name.hash) != hash)
		goto fail;
	sc->rw.at += r - 1;
	if (sc->rw.at >= 2 * TD_FIXED_ROOM - TD_KERNFS_NAME - 16)
		goto fail;
	return 0;
fail:
	sc->rw.end = -1;
	return 1;
}

/*
 * d_path() of the path (@dentry_n, @vfsmnt_n) for the reader (relative to sc->pw_root, its root
 * directory), appended at sc->rw.at: __prepend_path() done with probe reads, which cannot
 * fault — from the dentry up through parents and mountpoints, the names back down (the caller
 * adds " (deleted)": pw_deleted()). Returns the length, or -1 where /proc's answer is wanted:
 * a name made up by the file system (d_dname: pipes, sockets, anonymous files), a path deeper
 * than TD_ROOT_DEPTH components or longer than the room, a rename during the walk. On freed
 * memory (see the top of this file) a wrong path at worst, which the caller discards when the
 * task's fs_struct or mm_struct changed meanwhile. @bounded: loops instead of bpf_loop().
 */
static __always_inline int path_text(struct pw_ctx *c, __u64 dentry_n, __u64 vfsmnt_n,
				     bool bounded)
{
	struct scratch *sc = c->sc;
	struct dentry *start = (void *)dentry_n;
	const struct dentry_operations *op;
	__u32 begin = sc->rw.at, i;

	if (!dentry_n || !vfsmnt_n)
		return -1;
	op = BPF_CORE_READ(start, d_op);
	if (op && BPF_CORE_READ(op, d_dname))
		return -1;
	/* The walk's state is in map memory, which the verifier does not track: its states at the
	 * loop's head then differ by the counter alone (on the stack, each branch taken made new
	 * ones, past the verifier's limit). */
	sc->rw.dentry = dentry_n;
	sc->rw.mnt = vfsmnt_n - bpf_core_field_offset(struct mount, mnt);
	sc->rw.n = 0;
	sc->rw.end = 0;
	if (bounded) {
		for (i = 0; i < 2 * TD_ROOT_DEPTH && !sc->rw.end; i++)
			pw_up(i, c);
	} else {
		bpf_loop(2 * TD_ROOT_DEPTH, pw_up, c, 0);
	}
	if (sc->rw.end != 1)
		return -1;
	if (!sc->rw.n) {
		sc->buf[text_at(sc->rw.at)] = '/';
		sc->rw.at++;
	}
	sc->rw.end = 0;
	if (bounded) {
		for (i = 0; i < TD_ROOT_DEPTH + 1 && !sc->rw.end; i++)
			pw_down(i, c);
	} else {
		bpf_loop(TD_ROOT_DEPTH + 1, pw_down, c, 0);
	}
	if (sc->rw.end != 1)
		return -1;
	return sc->rw.at - begin;
}

/* Appends " (deleted)" after the path of @dentry_n if it is unlinked (d_unlinked(): hashed out
 * of the dcache but not a root); returns the bytes added. */
static __always_inline int pw_deleted(struct scratch *sc, __u64 dentry_n)
{
	struct dentry *d = (void *)dentry_n;

	if (BPF_CORE_READ(d, d_parent) == d || BPF_CORE_READ(d, d_hash.pprev))
		return 0;
	__builtin_memcpy(sc->buf + text_at(sc->rw.at), " (deleted)", 10);
	sc->rw.at += 10;
	return 10;
}

/* The text of PATHS's path @k (0 exe, 1 cwd, 2 root) into scratch_map: from struct pw_cache,
 * else by path_text() with bpf_loop(); its length is also left in pw_len. Global: verified
 * once. */
__noinline int path_text_loop(__u32 k)
{
	struct pw_ctx c = {};
	struct pw_cache *e;
	struct scratch *sc;
	__u64 dentry, mnt;
	__u32 zero = 0, begin, len;
	int n;

	sc = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!sc)
		return -1;
	c.sc = sc;
	k &= 3;
	dentry = (__u64)sc->pw_paths[k].dentry;
	mnt = (__u64)sc->pw_paths[k].mnt;
	e = &sc->pw_cache[((dentry >> 6) ^ (dentry >> 12)) & (TD_PW_CACHE - 1)];
	begin = sc->rw.at;
	if (e->gen == cfg_walk_gen && e->dentry == dentry && e->mnt == mnt) {
		len = e->len & (TD_PW_CACHE_TEXT - 1);
		bpf_probe_read_kernel(sc->buf + text_at(sc->rw.at), len, e->text);
		sc->rw.at += len;
		n = len;
	} else {
		n = path_text(&c, dentry, mnt, false);
		if (n < 0)
			return -1;
		if (n < TD_PW_CACHE_TEXT) {
			e->gen = cfg_walk_gen;
			e->dentry = dentry;
			e->mnt = mnt;
			e->len = n;
			len = n;
			barrier_var(len);
			bpf_probe_read_kernel(e->text, len & (TD_PW_CACHE_TEXT - 1),
					      sc->buf + (begin & (2 * TD_FIXED_ROOM - 1)));
		}
	}
	n += pw_deleted(sc, dentry);
	sc->pw_len[k] = n;
	return n;
}

/*
 * PATHS: exe, cwd and root as readlink() of /proc/PID/{exe,cwd,root} returns them
 * (proc_exe_link(), proc_cwd_link(), proc_root_link(): ENOENT for a kernel thread's exe, and
 * without an address space or fs_struct, i.e. for a zombie), relative to the reader's root.
 * Written by path_text() with probe reads, not bpf_d_path(): the fs_struct and mm_struct are
 * read without the locks and references /proc takes (see the top of this file).
 *
 * paths_begin() takes the three paths, the working directory and root under fs_struct's
 * sequence count as get_fs_pwd() takes them under its lock, and returns which the task has
 * (bit 0 exe, bit 1 cwd and root), or -1 where /proc must say it; path_text_loop() writes each
 * after the attribute's header at @off; paths_end() keeps the text only if the task still has
 * the same fs_struct, address space and exec count (a task exiting, executing or unsharing
 * meanwhile: /proc says what is true now), writes the header and returns the attribute's
 * length, or 0. Three global functions called one after the other from emit(): nested,
 * their frames and the walk's on top of emit()'s passed the verifier's 512 bytes of stack.
 */
#define TD_ENOENT 2

__noinline int paths_begin(__u64 task, __u32 off)
{
	struct task_struct *t = (void *)task;
	struct mm_struct *mm;
	struct fs_struct *fs;
	struct scratch *sc;
	struct file *f = 0;
	__u32 zero = 0, seq;

	sc = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!sc || off > TD_FIXED_ROOM || !reader_root(&sc->pw_root))
		return -1;
	__builtin_memset(sc->pw_paths, 0, sizeof(sc->pw_paths));
	sc->pw_exec_id = BPF_CORE_READ(t, self_exec_id);
	mm = BPF_CORE_READ(t, mm);
	fs = BPF_CORE_READ(t, fs);
	sc->pw_mm = (__u64)mm;
	sc->pw_fs = (__u64)fs;
	if (mm && !(BPF_CORE_READ(t, flags) & TD_PF_KTHREAD))
		f = BPF_CORE_READ(mm, exe_file);
	if (f && bpf_probe_read_kernel(&sc->pw_paths[0], sizeof(struct path),
				       __builtin_preserve_access_index(&f->f_path)))
		return -1;
	if (fs) {
		seq = fs_seq(fs);
		if ((seq & 1) ||
		    bpf_probe_read_kernel(&sc->pw_paths[1], sizeof(struct path),
					  __builtin_preserve_access_index(&fs->pwd)) ||
		    bpf_probe_read_kernel(&sc->pw_paths[2], sizeof(struct path),
					  __builtin_preserve_access_index(&fs->root)) ||
		    fs_seq(fs) != seq)
			return -1;
	}
	sc->rw.at = off + sizeof(struct td_attr) + sizeof(struct td_paths);
	return (f ? 1 : 0) | (fs ? 2 : 0);
}

__noinline int paths_end(__u64 task, __u32 off, __u32 has)
{
	struct task_struct *t = (void *)task;
	struct td_attr a = { .attr_type = TD_GROUP_PATHS };
	struct td_paths rec = {
		.exe_errno = TD_ENOENT, .cwd_errno = TD_ENOENT, .root_errno = TD_ENOENT
	};
	struct scratch *sc;
	__u32 zero = 0, len;

	sc = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!sc || off > TD_FIXED_ROOM)
		return 0;
	if ((__u64)BPF_CORE_READ(t, mm) != sc->pw_mm || (__u64)BPF_CORE_READ(t, fs) != sc->pw_fs ||
	    BPF_CORE_READ(t, self_exec_id) != sc->pw_exec_id)
		return 0;
	if (has & 1) {
		rec.exe_len = sc->pw_len[0];
		rec.exe_errno = 0;
	}
	if (has & 2) {
		rec.cwd_len = sc->pw_len[1];
		rec.root_len = sc->pw_len[2];
		rec.cwd_errno = rec.root_errno = 0;
	}
	len = sc->rw.at - off;
	if (sc->rw.at > TD_FIXED_ROOM || len > TD_FIXED_ROOM)
		return 0;
	a.len = len;
	__builtin_memcpy(sc->buf + room_mask(off), &a, sizeof(a));
	__builtin_memcpy(sc->buf + room_mask(off) + sizeof(a), &rec, sizeof(rec));
	return len;
}

/* PATHS (see paths_begin()); from /proc on kernels without bpf_loop(). */
static __always_inline bool put_paths(struct out *o, struct task_struct *t, bool bounded)
{
	int has, n;

	if (bounded)
		return needs_procfs(o, TD_GROUP_PATHS);
	has = paths_begin(as_number(o, t), o->off);
	if (has < 0)
		return needs_procfs(o, TD_GROUP_PATHS);
	if ((has & 1) && path_text_loop(0) < 0)
		return needs_procfs(o, TD_GROUP_PATHS);
	if ((has & 2) && (path_text_loop(1) < 0 || path_text_loop(2) < 0))
		return needs_procfs(o, TD_GROUP_PATHS);
	n = paths_end(as_number(o, t), o->off, has);
	if (n <= 0)
		return needs_procfs(o, TD_GROUP_PATHS);
	o->off += n;
	pad4(o);
	return true;
}

/* CGROUP (see cgroup_attr()). */
static __always_inline bool put_cgroup(struct out *o, struct task_struct *t, bool bounded)
{
	int n = bounded ? put_cgroup_attr_bounded(as_number(o, t), o->off)
			: put_cgroup_attr_loop(as_number(o, t), o->off);

	if (n <= 0)
		return needs_procfs(o, TD_GROUP_CGROUP);
	o->off += n;
	pad4(o);
	return true;
}


/*
 * SECURITY where no security module gives tasks a label (cfg_lsm_no_label, which user space
 * learns from its own /proc/self/attr/current failing with EINVAL, as it then does for every
 * task): status's Seccomp, Seccomp_filters (5.9+; 0 before, as /proc's reader takes a missing
 * line) and NoNewPrivs, and the label's EINVAL. Where tasks have labels, each is the
 * module's own text, and the group comes from /proc.
 */
__u32 cfg_lsm_no_label = 0;

#define TD_EINVAL 22
#define PFA_NO_NEW_PRIVS 0

static __always_inline bool put_security(struct out *o, struct task_struct *t)
{
	struct td_security *r = rec_at(o, o->off + sizeof(struct td_attr));

	if (!r)
		return false;
	if (!cfg_lsm_no_label)
		return needs_procfs(o, TD_GROUP_SECURITY);
	__builtin_memset(r, 0, sizeof(*r));
	if (bpf_core_field_exists(t->seccomp)) {
		r->seccomp = t->seccomp.mode;
		if (bpf_core_field_exists(t->seccomp.filter_count))
			r->seccomp_filters = t->seccomp.filter_count.counter;
	}
	r->no_new_privs = (t->atomic_flags >> PFA_NO_NEW_PRIVS) & 1;
	r->label_errno = TD_EINVAL;
	if (!put_attr_hdr(o, sizeof(*r), TD_GROUP_SECURITY))
		return false;
	o->off += sizeof(*r);
	return true;
}

/*
 * SCHED: what /proc/PID/{oom_score,oom_score_adj,loginuid,sessionid,autogroup,wchan,syscall}
 * and status's Cpus_allowed_list and Mems_allowed_list say, computed as those files compute
 * it (fs/proc/base.c, mm/oom_kill.c oom_badness(), kernel/sched/autogroup.c,
 * arch/x86/kernel/process.c get_wchan(), lib/syscall.c task_current_syscall()). Only in the
 * bpf_loop() flavour, and only where sched_text_bounds() found the scheduler's text sections
 * (wchan skips the frames in them): else SCHED comes from /proc.
 *
 * cfg_oom_totalpages is RAM + swap in pages (totalram_pages() + total_swap_pages, which
 * user space reads with sysinfo(2) before each walk); cfg_nr_nodes is nr_node_ids (the
 * bitmap's length in Mems_allowed_list; cfg_nr_cpus is nr_cpu_ids).
 */
__u64 cfg_oom_totalpages = 0;
__u32 cfg_nr_nodes = 1;
/* in_sched_functions()'s sections: __sched_text_start, __sched_text_end, __lock_text_start,
 * __lock_text_end (0 until sched_text_bounds() ran). */
__u64 sched_text[4] = {};

/* Run once by user space after the load (BPF_PROG_RUN): the four symbols' addresses from
 * kallsyms. Returns 0 when all four were found. */
SEC("syscall")
int sched_text_bounds(void *ctx)
{
	static const char s0[] = "__sched_text_start", s1[] = "__sched_text_end",
			  s2[] = "__lock_text_start", s3[] = "__lock_text_end";
	long r = 0;

	r |= bpf_kallsyms_lookup_name(s0, sizeof(s0), 0, &sched_text[0]);
	r |= bpf_kallsyms_lookup_name(s1, sizeof(s1), 0, &sched_text[1]);
	r |= bpf_kallsyms_lookup_name(s2, sizeof(s2), 0, &sched_text[2]);
	r |= bpf_kallsyms_lookup_name(s3, sizeof(s3), 0, &sched_text[3]);
	return r || !sched_text[0] || !sched_text[1] || !sched_text[2] || !sched_text[3];
}

#define TD_TASK_WAKING 0x0200
#define TD_TS_COMPAT 0x0002
#define TD_MMF_OOM_SKIP 21
#define TD_OOM_SCORE_ADJ_MIN (-1000)

/* A bit number (below 100,000), in decimal. */
static __always_inline void ms_put_num(struct scratch *sc, __u32 n)
{
	__u32 div = 10000;
	bool started = false;

	for (int i = 0; i < 5; i++) {
		__u32 d = n / div % 10;

		if (d || started || div == 1) {
			text_put_char(sc, &sc->ms.at, '0' + d);
			started = true;
		}
		div /= 10;
	}
}

/* One bit of bitmap_list_string() ("%*pbl"): a run of set bits is written when it ends, as
 * "N" or "N-M", comma-separated; the call past the last bit ends the last run. */
static long mask_bit(__u64 i, struct pw_ctx *c)
{
	struct scratch *sc = c->sc;
	bool bit = false;

	if (i < sc->ms.nbits)
		bit = (sc->mask_words[(i >> 6) & (TD_MASK_WORDS - 1)] >> (i & 63)) & 1;
	if (bit && !sc->ms.in_run) {
		sc->ms.in_run = 1;
		sc->ms.start = i;
	} else if (!bit && sc->ms.in_run) {
		sc->ms.in_run = 0;
		if (sc->ms.at != sc->ms.begin)
			text_put_char(sc, &sc->ms.at, ',');
		ms_put_num(sc, sc->ms.start);
		if (i - 1 > sc->ms.start) {
			text_put_char(sc, &sc->ms.at, '-');
			ms_put_num(sc, i - 1);
		}
		if (sc->ms.at - sc->ms.begin > TD_MASK_TEXT - 16) {
			sc->ms.end = -1;
			return 1;
		}
	}
	return i >= sc->ms.nbits;
}

/* The list of the @nbits-bit kernel bitmap at @bits, appended at ms.at (kept in
 * mask_cache[@k]); its length, or -1 where /proc must say it. */
static __always_inline int sched_mask(struct scratch *sc, const void *bits, __u32 nbits, __u32 k)
{
	struct mask_cache *mc = &sc->mask_cache[k & 1];
	struct pw_ctx c = { .sc = sc };
	__u32 words = (nbits + 63) / 64, len, i;
	bool same;

	if (!bits || words > TD_MASK_WORDS)
		return -1;
	__builtin_memset(sc->mask_words, 0, sizeof(sc->mask_words));
	len = words * 8;
	barrier_var(len);
	if (bpf_probe_read_kernel(sc->mask_words, len & (2 * TD_MASK_WORDS * 8 - 1), bits))
		return -1;
	same = mc->gen == cfg_walk_gen && mc->nbits == nbits;
	for (i = 0; i < TD_MASK_WORDS; i++)
		same = same && mc->words[i] == sc->mask_words[i];
	if (same) {
		len = mc->len & (TD_MASK_TEXT - 1);
		bpf_probe_read_kernel(sc->buf + text_at(sc->ms.at), len, mc->text);
		sc->ms.at += len;
		return len;
	}
	sc->ms.begin = sc->ms.at;
	sc->ms.nbits = nbits;
	sc->ms.in_run = 0;
	sc->ms.end = 0;
	bpf_loop(TD_MASK_WORDS * 64 + 1, mask_bit, &c, 0);
	if (sc->ms.end < 0)
		return -1;
	len = sc->ms.at - sc->ms.begin;
	if (len >= TD_MASK_TEXT)
		return -1;
	mc->gen = cfg_walk_gen;
	mc->nbits = nbits;
	mc->len = len;
	bpf_probe_read_kernel(mc->words, sizeof(mc->words), sc->mask_words);
	barrier_var(len);
	bpf_probe_read_kernel(mc->text, len & (TD_MASK_TEXT - 1),
			      sc->buf + (sc->ms.begin & (2 * TD_FIXED_ROOM - 1)));
	return len;
}

/* The first ' ' of the text at ms.at (a module symbol's " [module]"), up to ms.nbits bytes. */
static long find_space(__u64 i, struct pw_ctx *c)
{
	struct scratch *sc = c->sc;

	if (i >= sc->ms.nbits)
		return 1;
	if (sc->buf[(sc->ms.at + i) & (2 * TD_FIXED_ROOM - 1)] == ' ') {
		sc->ms.found = i;
		return 1;
	}
	return 0;
}

/*
 * /proc/PID/wchan: the symbol of the first return address on the task's kernel stack (the
 * @nframes in kstack) outside the scheduler's and the locks' text, as get_wchan() and
 * lookup_symbol_name() give it (%ps adds " [module]" for a module's symbol: cut), or "0" for a
 * task that runs (@zero), has no stack, or whose address has no symbol.
 */
static __always_inline int sched_wchan(struct scratch *sc, __s64 nframes, bool zero)
{
	static const char fmt[] = "%ps";
	struct pw_ctx c = { .sc = sc };
	struct wchan_cache *wc;
	__u64 ip = 0;
	long n;
	__u32 i;

	for (i = 0; i < TD_SCHED_STACK && !zero; i++) {
		if (i >= nframes)
			break;
		ip = sc->kstack[i];
		if (!ip)
			break;
		if ((ip >= sched_text[0] && ip < sched_text[1]) ||
		    (ip >= sched_text[2] && ip < sched_text[3]))
			continue;
		break;
	}
	if (zero || !ip)
		goto none;
	wc = &sc->wchan_cache[((ip >> 4) ^ (ip >> 12)) & (TD_WCHAN_SLOTS - 1)];
	if (wc->gen == cfg_walk_gen && wc->ip == ip) {
		/* Named earlier in this walk ("0" when the address has no symbol). */
		n = wc->len & (TD_WCHAN_NAME - 1);
		bpf_probe_read_kernel(sc->buf + text_at(sc->ms.at), n, wc->text);
		sc->ms.at += n;
		return n;
	}
	sc->sched_args[0] = ip;
	n = bpf_snprintf((char *)sc->buf + text_at(sc->ms.at), TD_SCHED_TEXT, fmt, sc->sched_args, 8);
	if (n <= 1 || n >= TD_SCHED_TEXT)
		return -1;
	n--;
	if (sc->buf[text_at(sc->ms.at)] == '0' && sc->buf[(text_at(sc->ms.at) + 1) & (2 * TD_FIXED_ROOM - 1)] == 'x') {
		sc->buf[text_at(sc->ms.at)] = '0';
		n = 1;
		goto keep;
	}
	if (sc->buf[(text_at(sc->ms.at) + n - 1) & (2 * TD_FIXED_ROOM - 1)] == ']') {
		sc->ms.nbits = n;
		sc->ms.found = n;
		bpf_loop(TD_SCHED_TEXT, find_space, &c, 0);
		n = sc->ms.found;
	}
keep:
	if (n > 0 && n < TD_WCHAN_NAME) {
		__u32 len = n;

		wc->gen = cfg_walk_gen;
		wc->ip = ip;
		wc->len = n;
		/* The compiler knows the mask changes nothing here and drops it; 6.1's and 6.12's
		 * verifiers do not carry the test above to this copy of n ("R2 unbounded memory
		 * access"): the barrier keeps the mask. */
		barrier_var(len);
		bpf_probe_read_kernel(wc->text, len & (TD_WCHAN_NAME - 1), sc->buf + text_at(sc->ms.at));
	}
	sc->ms.at += n;
	return n;
none:
	text_put_char(sc, &sc->ms.at, '0');
	return 1;
}

/* /proc/PID/syscall without its newline (x86-64): "running", or the number, the six
 * arguments, the stack pointer and the instruction pointer of the task's saved user
 * registers at @regs_n, as collect_syscall() takes them; "-1 0x0 0x0" without a stack. A
 * 32-bit system call (other registers): -1, for /proc. */
static __always_inline int sched_syscall(struct scratch *sc, struct task_struct *t, __u64 regs_n,
					 bool running)
{
	static const char fmt3[] = "%d 0x%llx 0x%llx";
	static const char fmt9[] = "%d 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx 0x%llx";
	struct pt_regs *regs = (void *)regs_n;
	int nr = -1;
	long n;

	if (running) {
		__builtin_memcpy(sc->buf + text_at(sc->ms.at), "running", 7);
		sc->ms.at += 7;
		return 7;
	}
	__builtin_memset(sc->sched_args, 0, sizeof(sc->sched_args));
	if (BPF_CORE_READ(t, stack)) {
		if (!regs || !bpf_core_field_exists(regs->orig_ax))
			return -1;
		if (bpf_core_field_exists(t->thread_info.status) &&
		    (BPF_CORE_READ(t, thread_info.status) & TD_TS_COMPAT))
			return -1;
		nr = BPF_CORE_READ(regs, orig_ax);
		if (nr != -1) {
			sc->sched_args[1] = BPF_CORE_READ(regs, di);
			sc->sched_args[2] = BPF_CORE_READ(regs, si);
			sc->sched_args[3] = BPF_CORE_READ(regs, dx);
			sc->sched_args[4] = BPF_CORE_READ(regs, r10);
			sc->sched_args[5] = BPF_CORE_READ(regs, r8);
			sc->sched_args[6] = BPF_CORE_READ(regs, r9);
		}
		sc->sched_args[7] = BPF_CORE_READ(regs, sp);
		sc->sched_args[8] = BPF_CORE_READ(regs, ip);
	}
	sc->sched_args[0] = (__u64)(__s64)nr;
	if (nr < 0) {
		sc->sched_args[1] = sc->sched_args[7];
		sc->sched_args[2] = sc->sched_args[8];
		n = bpf_snprintf((char *)sc->buf + text_at(sc->ms.at), TD_SCHED_TEXT, fmt3, sc->sched_args,
				 3 * 8);
	} else {
		n = bpf_snprintf((char *)sc->buf + text_at(sc->ms.at), TD_SCHED_TEXT, fmt9, sc->sched_args,
				 9 * 8);
	}
	if (n <= 1 || n >= TD_SCHED_TEXT)
		return -1;
	sc->ms.at += n - 1;
	return n - 1;
}

/* mm->flags' first word (a bitmap since 6.18), read with a probe read. */
static __always_inline unsigned long mm_flags_probed(struct mm_struct *mm)
{
	if (bpf_core_field_exists(mm->flags.__mm_flags))
		return BPF_CORE_READ(mm, flags.__mm_flags[0]);
	return BPF_CORE_READ((struct mm_struct___word_flags *)mm, flags);
}

/* /proc/PID/oom_score: oom_badness() scaled to 0..2000 as proc_oom_score() does; -1 where
 * /proc must say it (a process whose thread with an address space is not this one). */
static __always_inline long oom_score(struct scratch *sc, struct task_struct *t,
				       struct signal_struct *sig)
{
	struct mm_struct *mm = BPF_CORE_READ(t, mm);
	__u64 total = cfg_oom_totalpages, q;
	__s64 adj, badness;

	if (!total)
		return -1;
	if ((BPF_CORE_READ(t, flags) & TD_PF_KTHREAD) || BPF_CORE_READ(t, tgid) == 1)
		return 0;
	if (!mm)
		return BPF_CORE_READ(sig, live.counter) ? -1 : 0;
	adj = BPF_CORE_READ(sig, oom_score_adj);
	if (adj == TD_OOM_SCORE_ADJ_MIN || ((mm_flags_probed(mm) >> TD_MMF_OOM_SKIP) & 1))
		return 0;
	/* in_vfork() */
	if (BPF_CORE_READ(t, vfork_done) && BPF_CORE_READ(t, real_parent, mm) == mm)
		return 0;
	/* get_mm_counter(): the counters' approximate totals, never the per-CPU sums. */
	if (bpf_core_type_exists(struct mm_rss_stat___pre62)) {
		bpf_probe_read_kernel(sc->oom_rss, sizeof(sc->oom_rss),
				      __builtin_preserve_access_index(
					      &((struct mm_struct___pre62 *)mm)->rss_stat));
	} else {
		void *rss = (void *)mm + bpf_core_field_offset(struct mm_struct, rss_stat);
		__u64 size = bpf_core_type_size(struct percpu_counter);

		for (int i = 0; i < 4; i++)
			bpf_probe_read_kernel(&sc->oom_rss[i], sizeof(sc->oom_rss[i]),
					      &((struct percpu_counter *)(rss + i * size))->count);
	}
	badness = ((__u64)BPF_CORE_READ(mm, pgtables_bytes.counter) >> (cfg_page_shift & 31));
	for (int i = 0; i < 4; i++)
		badness += sc->oom_rss[i] > 0 ? sc->oom_rss[i] : 0;
	badness += adj * (__s64)(total / 1000);
	/* (1000 + badness * 1000 / totalpages) * 2 / 3, in signed arithmetic (BPF's division is
	 * unsigned: by magnitude, then the sign). */
	q = (badness < 0 ? -badness : badness) * 1000 / total;
	badness = 1000 + (badness < 0 ? -(__s64)q : (__s64)q);
	if (badness < 0)
		return -1;
	return (__u64)badness * 2 / 3;
}

/*
 * Writes SCHED for task @task at @off (the record, then the wchan, syscall, Cpus and Mems
 * texts) and returns the attribute's length, or 0 where /proc must say it. @nframes: the
 * frames task_stack() left in kstack (<= 0: none); @regs: the task's saved user
 * registers (bpf_task_pt_regs()); both taken by emit(), which has the task's trusted pointer.
 * Global: verified once.
 */
__noinline int put_sched_attr(__u64 task, __u32 off, __s64 nframes, __u64 regs)
{
	struct task_struct *t = (void *)task;
	struct signal_struct *sig = BPF_CORE_READ(t, signal);
	struct td_sched *rec;
	struct td_attr *a;
	struct autogroup *ag;
	struct scratch *sc;
	__u32 zero = 0, state, len;
	bool current, running;
	long score;
	int n;

	/* The header and record are written in place (this frame comes on top of emit()'s). */
	sc = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!sc || off > TD_FIXED_ROOM || !sig || !sched_text[0])
		return 0;
	a = (void *)(sc->buf + room_mask(off));
	rec = (void *)(sc->buf + room_mask(off) + sizeof(*a));
	__builtin_memset(rec, 0, sizeof(*rec));
	current = (__u64)t == bpf_get_current_task();
	state = BPF_CORE_READ(t, __state);
	running = !current && state == 0;
	score = oom_score(sc, t, sig);
	if (score < 0)
		return 0;
	rec->oom_score = score;
	rec->oom_score_adj = BPF_CORE_READ(sig, oom_score_adj);
	rec->loginuid = rec->sessionid = 0xffffffff;
	if (bpf_core_field_exists(t->loginuid)) {
		rec->loginuid = BPF_CORE_READ(t, loginuid.val);
		rec->sessionid = BPF_CORE_READ(t, sessionid);
	}
	/* A thread's directory (task/TID) has no autogroup file, as a kernel without autogroups. */
	if (!bpf_core_field_exists(sig->autogroup) || cfg_strategy == TD_STRATEGY_THREAD ||
	    cfg_strategy == TD_STRATEGY_ALL_THREAD ||
	    (cfg_strategy == TD_STRATEGY_ALL_WITH_THREADS && sc->thread_pass)) {
		rec->flags |= TD_SCHED_F_NO_AUTOGROUP;
	} else {
		ag = BPF_CORE_READ(sig, autogroup);
		if (ag && BPF_CORE_READ(ag, tg, autogroup)) {
			rec->autogroup = BPF_CORE_READ(ag, id);
			rec->autogroup_nice = BPF_CORE_READ(ag, nice);
		}
	}
	sc->ms.at = off + sizeof(*a) + sizeof(*rec);
	/* get_wchan(): 0 for the reader itself, a task that runs, wakes or is queued to run. */
	n = sched_wchan(sc, nframes,
			current || state == 0 || (state & TD_TASK_WAKING) || BPF_CORE_READ(t, on_rq));
	if (n < 0)
		return 0;
	rec->wchan_len = n;
	n = sched_syscall(sc, t, regs, running);
	if (n < 0)
		return 0;
	rec->syscall_len = n;
	n = sched_mask(sc, __builtin_preserve_access_index(&t->cpus_mask), cfg_nr_cpus, 0);
	if (n < 0)
		return 0;
	rec->cpus_len = n;
	n = sched_mask(sc, __builtin_preserve_access_index(&t->mems_allowed), cfg_nr_nodes, 1);
	if (n < 0)
		return 0;
	rec->mems_len = n;
	len = sc->ms.at - off;
	if (sc->ms.at > TD_FIXED_ROOM || len > TD_FIXED_ROOM)
		return 0;
	a->len = len;
	a->attr_type = TD_GROUP_SCHED;
	return len;
}

/*
 * The kernel stack of @task (its trusted pointer) in kstack, as stack_trace_save_tsk() gives it
 * (/proc/PID/stack's frames, and get_wchan()'s): the number of frames, or an error. Unwound
 * once for the task being written, however many of its groups want it (emit() clears
 * kstack_taken for each task).
 *
 * stack_trace_save_tsk() leaves out the frames in the scheduler's and the locks' text
 * (stack_trace_consume_entry_nosched()), so its first frame is get_wchan()'s, and it stops
 * unwinding once the buffer is full: without KSTACK, one frame is all that is unwound. (The
 * whole stack's last steps, a failed look-up of the user-space return address in every table
 * of kernel text, ftrace trampolines and BPF programs included, were half of an unwind.)
 */
static __always_inline __s64 task_stack(struct scratch *sc, struct task_struct *task)
{
	__s64 n;

	if (sc->kstack_taken)
		return sc->kstack_n;
	n = bpf_get_task_stack(task, sc->kstack, sc->kstack_whole ? sizeof(sc->kstack) : 8, 0);
	sc->kstack_n = n < 0 ? n : (__s64)((__u64)n / 8);
	sc->kstack_taken = true;
	return sc->kstack_n;
}

/* SCHED (see put_sched_attr()); the kernel stack and registers are taken here, with the
 * task's trusted pointer, for a task that may have them (not running, with a stack). */
static __always_inline bool put_sched(struct out *o, struct task_struct *task,
				      struct task_struct *t, bool bounded)
{
	struct scratch *sc = (void *)o->buf;
	__s64 nframes = 0;
	__u64 regs = 0;
	int n;

	if (bounded)
		return needs_procfs(o, TD_GROUP_SCHED);
	if (t->stack && t->__state) {
		nframes = task_stack(sc, task);
		nframes = nframes > 0 ? nframes : 0;
	}
	if (t->stack)
		regs = as_number(o, (void *)bpf_task_pt_regs(task));
	n = put_sched_attr(as_number(o, t), o->off, nframes, regs);
	if (n <= 0)
		return needs_procfs(o, TD_GROUP_SCHED);
	o->off += n;
	pad4(o);
	return true;
}

/* bpf_loop() callback of put_kstack_attr(): frame @i's line at ms.at. */
static long kstack_line(__u64 i, struct pw_ctx *c)
{
	static const char fmt[] = "[<0>] %pB\n";
	struct scratch *sc = c->sc;
	long n;

	if (i >= sc->ms.nbits || i >= TD_KSTACK_DEPTH || sc->ms.at > TD_FIXED_ROOM) {
		sc->ms.found = i < sc->ms.nbits;
		return 1;
	}
	sc->sched_args[0] = sc->kstack[i & (TD_KSTACK_DEPTH - 1)];
	n = bpf_snprintf((char *)sc->buf + text_at(sc->ms.at), TD_SCHED_TEXT, fmt, sc->sched_args, 8);
	if (n <= 1 || n >= TD_SCHED_TEXT) {
		sc->ms.found = 1;
		return 1;
	}
	sc->ms.at += n - 1;
	return 0;
}

/*
 * Writes KSTACK at @off: /proc/PID/stack (proc_pid_stack()), "[<0>] %pB\n" for each of the
 * @nframes return addresses bpf_get_task_stack() left in kstack, which takes them as the file
 * does (stack_trace_save_tsk(): none for a task running on another CPU, whose stack the
 * unwinder refuses). Returns the attribute's length, or 0 where /proc must say it (a text that
 * does not fit). Global: verified once.
 */
__noinline int put_kstack_attr(__u32 off, __s64 nframes)
{
	struct scratch *sc;
	struct td_attr *a;
	__u32 zero = 0, len;
	struct pw_ctx c;

	sc = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!sc || off > TD_FIXED_ROOM)
		return 0;
	c.sc = sc;
	a = (void *)(sc->buf + room_mask(off));
	sc->ms.at = off + sizeof(*a);
	sc->ms.nbits = nframes > 0 ? nframes : 0;
	sc->ms.found = 0;
	bpf_loop(TD_KSTACK_DEPTH, kstack_line, &c, 0);
	len = sc->ms.at - off;
	if (sc->ms.found || sc->ms.at > TD_FIXED_ROOM || len > TD_FIXED_ROOM)
		return 0;
	a->len = len;
	a->attr_type = TD_GROUP_KSTACK;
	return len;
}

/* KSTACK (see put_kstack_attr()); the stack is taken here, with the task's trusted pointer.
 * The reader's own stack would be this walk's, not what its /proc/PID/stack reads: /proc. */
static __always_inline bool put_kstack(struct out *o, struct task_struct *task,
				       struct task_struct *t, bool bounded)
{
	struct scratch *sc = (void *)o->buf;
	__s64 nframes = 0;
	int n;

	if (bounded || (__u64)t == bpf_get_current_task())
		return needs_procfs(o, TD_GROUP_KSTACK);
	if (t->stack) {
		nframes = task_stack(sc, task);
		if (nframes < 0)
			return needs_procfs(o, TD_GROUP_KSTACK);
	}
	n = put_kstack_attr(o->off, nframes);
	if (n <= 0)
		return needs_procfs(o, TD_GROUP_KSTACK);
	o->off += n;
	pad4(o);
	return true;
}

/*
 * Writes WCHAN for task @task at @off: /proc/PID/wchan alone (sched_wchan(), as SCHED's first
 * text), for readers that need nothing else of SCHED (its OOM score, system call and affinity
 * lists were most of its cost). @nframes as for put_sched_attr(). Returns the attribute's
 * length, or 0 where /proc must say it. Global: verified once.
 */
__noinline int put_wchan_attr(__u64 task, __u32 off, __s64 nframes)
{
	struct task_struct *t = (void *)task;
	struct scratch *sc;
	struct td_attr *a;
	__u32 zero = 0, state, len;
	bool current;
	int n;

	sc = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!sc || off > TD_FIXED_ROOM || !sched_text[0])
		return 0;
	a = (void *)(sc->buf + room_mask(off));
	current = (__u64)t == bpf_get_current_task();
	state = BPF_CORE_READ(t, __state);
	sc->ms.at = off + sizeof(*a);
	/* get_wchan(): 0 for the reader itself, a task that runs, wakes or is queued to run. */
	n = sched_wchan(sc, nframes,
			current || state == 0 || (state & TD_TASK_WAKING) || BPF_CORE_READ(t, on_rq));
	if (n < 0)
		return 0;
	len = sc->ms.at - off;
	if (sc->ms.at > TD_FIXED_ROOM || len > TD_FIXED_ROOM)
		return 0;
	a->len = len;
	a->attr_type = TD_GROUP_WCHAN;
	return len;
}

/*
 * Where each task waited when a walk last unwound it for WCHAN, and how many times it had
 * left a CPU then (nvcsw + nivcsw): a task that has not run since sleeps where it slept (it
 * leaves a CPU, and counts it, before it can wait anywhere else), so its wait channel is that
 * address again without an unwind, which was a quarter of a dump of the exporter's groups
 * at 50,000 idle processes.
 *
 * A direct-mapped array indexed by the task's pid in the initial namespace (unique among live
 * tasks; a walk meets them in pid order, so its slots are read in order), sized by user space
 * at load for twice the tasks there are then (ro_wchan_memo_mask). A slot names its task by
 * pid and start time, and is written so that one half-written by another walk of the same
 * programs, or shared by two tasks whose pids collide, never passes for a task's: @check
 * covers the other fields and the pid, and is cleared first. A task whose slot another holds
 * is unwound, as it was before the memo. (Task-local storage was its first home: three
 * dependent cache misses per task, 14% of taskdiagd's time in a walk of 150,000 threads.)
 */
struct wchan_memo_slot {
	__u64 start;
	__u64 switches;
	__u64 ip;
	__u64 check;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set before load */
	__type(key, __u32);
	__type(value, struct wchan_memo_slot);
} wchan_memo SEC(".maps");

static __always_inline __u64 memo_check(__u64 start, __u64 switches, __u64 ip, __u32 pid)
{
	return (start * 0x9e3779b97f4a7c15ULL) ^ (switches * 0xc2b2ae3d27d4eb4fULL) ^
	       (ip * 0x165667b19e3779f9ULL) ^ pid;
}

/* The memo's address for the task (@pid, @start) if it has not left a CPU since (@switches),
 * else 0. This and wchan_memo_put() are global functions, verified once: inline, the slot's
 * branches made 6.1's verifier walk the task program in 178,000 instructions, not 102,000. */
__noinline __u64 wchan_memo_get(__u32 pid, __u64 start, __u64 switches)
{
	__u32 idx = pid & ro_wchan_memo_mask;
	struct wchan_memo_slot *ws = bpf_map_lookup_elem(&wchan_memo, &idx);
	__u64 ip;

	if (!ws)
		return 0;
	ip = *(volatile __u64 *)&ws->ip;
	if (ip && ws->start == start && ws->switches == switches &&
	    ws->check == memo_check(start, switches, ip, pid))
		return ip;
	return 0;
}

/* Remembers @ip for the task (@pid, @start) as it is now (@switches); see wchan_memo. */
__noinline int wchan_memo_put(__u32 pid, __u64 start, __u64 switches, __u64 ip)
{
	__u32 idx = pid & ro_wchan_memo_mask;
	struct wchan_memo_slot *ws = bpf_map_lookup_elem(&wchan_memo, &idx);

	if (!ws)
		return 0;
	ws->check = 0;
	ws->start = start;
	ws->switches = switches;
	ws->ip = ip;
	ws->check = memo_check(start, switches, ip, pid);
	return 0;
}

/* The first frame get_wchan() looks at for @task (trusted pointer) in kstack[0], or 0 frames:
 * from wchan_memo for a task that has not left a CPU since it was unwound (and is on none
 * now: one being switched out has not counted its switch yet), else from an unwind, which is
 * remembered. @memo: the program keeps the memo (not the sleepable one). */
static __always_inline __s64 wchan_frame(struct scratch *sc, struct task_struct *task,
					 struct task_struct *t, bool memo)
{
	__u64 switches = t->nvcsw + t->nivcsw;
	__u64 start = t->start_boottime;
	__u32 pid = t->pid;
	bool kept = memo && !sc->kstack_taken && !(bpf_core_field_exists(t->on_cpu) && t->on_cpu);
	__u64 ip;
	__s64 n;

	if (kept) {
		ip = wchan_memo_get(pid, start, switches);
		if (ip) {
			sc->kstack[0] = ip;
			return 1;
		}
	}
	n = task_stack(sc, task);
	if (n <= 0)
		return 0;
	if (kept)
		wchan_memo_put(pid, start, switches, sc->kstack[0]);
	return n;
}

/* WCHAN (see put_wchan_attr()); the kernel stack is taken here, with the task's trusted
 * pointer, only for a task that may wait somewhere (not running, with a stack): SCHED's or
 * KSTACK's unwind of the same task is reused, and a task that has not run since the last
 * WCHAN walk is not unwound again (wchan_frame()). */
static __always_inline bool put_wchan(struct out *o, struct task_struct *task,
				      struct task_struct *t, bool memo, bool bounded)
{
	struct scratch *sc = (void *)o->buf;
	__s64 nframes = 0;
	int n;

	if (bounded)
		return needs_procfs(o, TD_GROUP_WCHAN);
	if (t->stack && t->__state && !t->on_rq)
		nframes = wchan_frame(sc, task, t, memo);
	n = put_wchan_attr(as_number(o, t), o->off, nframes);
	if (n <= 0)
		return needs_procfs(o, TD_GROUP_WCHAN);
	o->off += n;
	pad4(o);
	return true;
}

static __always_inline bool put_statm(struct out *o, struct mm_struct *mm, bool bounded)
{
	struct td_statm *m = rec_at(o, o->off + sizeof(struct td_attr));
	__u32 ps = cfg_page_shift & 31;
	__u64 c[4];
	__u64 anon, file, shmem, total_rss;
	__u64 total_vm = mm->total_vm, hw_vm = mm->hiwater_vm;
	__u64 hw_rss = mm->hiwater_rss, exec_vm = mm->exec_vm;
	__u64 page = 1ULL << ps, start_code = mm->start_code;
	__u64 text = ((mm->end_code + page - 1) & ~(page - 1)) - (start_code & ~(page - 1));

	if (!m)
		return false;
	/* /proc sums per-CPU counters here, which the bounded flavour cannot (see mm_counters()). */
	if (bounded && cfg_rss_sum)
		return needs_procfs(o, TD_GROUP_STATM);
	mm_counters(mm, c, bounded);
	anon = c[MM_ANONPAGES];
	file = c[MM_FILEPAGES];
	shmem = c[MM_SHMEMPAGES];
	total_rss = anon + file + shmem;
	__builtin_memset(m, 0, sizeof(*m));
	if (text > exec_vm << ps)
		text = exec_vm << ps;
	m->vm_size = total_vm << ps;
	m->vm_peak = (hw_vm > total_vm ? hw_vm : total_vm) << ps;
	m->rss_anon = anon << ps;
	m->rss_file = file << ps;
	m->rss_shmem = shmem << ps;
	m->rss_peak = (hw_rss > total_rss ? hw_rss : total_rss) << ps;
	m->swap = c[MM_SWAPENTS] << ps;
	/* /proc prints these three from bytes, in whole kB. */
	m->text = text >> 10 << 10;
	m->lib = ((exec_vm << ps) - text) >> 10 << 10;
	m->page_tables = (__u64)mm->pgtables_bytes.counter >> 10 << 10;
	m->data = mm->data_vm << ps;
	m->stack = mm->stack_vm << ps;
	m->locked = mm->locked_vm << ps;
	m->pinned = (__u64)mm->pinned_vm.counter << ps;
	/* Raw, as root reads them from stat: a server withholds them from other callers. */
	m->code_start = start_code;
	m->code_end = mm->end_code;
	m->stack_start = mm->start_stack;
	if (!put_attr_hdr(o, sizeof(*m), TD_GROUP_STATM))
		return false;
	o->off += sizeof(*m);
	return true;
}

/*
 * Whether a read of @mm would wait for its memory-map lock: a writer holds it, or waits for it
 * (readers then queue behind), or a waiter was handed it. bpf_copy_from_user_task() takes the
 * lock with mmap_read_lock_killable() and sleeps as long as it is held, and a process can hold
 * it for ever (one thread faulting on a hung FUSE or NFS file keeps it read-locked, and a thread
 * of it that maps or unmaps then waits write-locked). Such a group goes to user space, which
 * reads it from /proc on a thread it can give up on (crates/procfs/src/stuck.rs). A lock that
 * turns busy just after this look is still waited for: the race is user space's to bound.
 * PREEMPT_RT's rwsems have no count word: there, nothing is looked at.
 */
static __always_inline bool mm_lock_busy(struct mm_struct *mm)
{
	if (!bpf_core_field_exists(mm->mmap_lock.count))
		return false;
	return BPF_CORE_READ(mm, mmap_lock.count.counter) & 7;
}

struct nul_scan {
	__u8 *buf;
	__u32 len;
	__u32 found;
};

static long find_nul(__u64 i, struct nul_scan *s)
{
	__u8 c = 1;

	if (i >= s->len)
		return 1;
	bpf_probe_read_kernel(&c, 1, s->buf + (i & (TD_BPF_CMDLINE_MAX - 1)));
	if (!c) {
		s->found = i;
		return 1;
	}
	return 0;
}

/* get_mm_cmdline() from fs/proc/base.c, including the setproctitle() case. */
static __always_inline bool put_cmdline(struct out *o, struct task_struct *t, struct mm_struct *mm)
{
	__u64 arg_start = mm->arg_start, arg_end = mm->arg_end;
	__u64 env_start = mm->env_start, env_end = mm->env_end;
	__u64 len = 0, limit = 0;
	__u32 off;
	__u8 *dst;
	char last = 0;

	if (env_end && arg_start < arg_end) {
		if (env_start != arg_end || env_end < env_start)
			env_end = arg_end;
		limit = env_end - arg_start;
		len = arg_end - arg_start;
	}
	if (len > TD_BPF_CMDLINE_MAX || (len && mm_lock_busy(mm)))
		return needs_procfs(o, TD_GROUP_CMDLINE);
	off = o->off + sizeof(struct td_attr);
	if (off > TD_FIXED_ROOM)
		return false;
	dst = o->buf + (room_mask(off));
	if (len) {
		/* One copy of argv; its last byte then tells the setproctitle() case, in which the
		 * kernel returns one page from arg_start, up to and including a NUL. */
		if (bpf_copy_from_user_task(dst, len & (2 * TD_BPF_CMDLINE_MAX - 1), (void *)arg_start,
					    t, 0))
			return needs_procfs(o, TD_GROUP_CMDLINE);
		last = dst[(len - 1) & (2 * TD_BPF_CMDLINE_MAX - 1)];
		if (last) {
			__u64 plen = limit < 4096 ? limit : 4096;

			/* Keeps clang from dropping the mask below, which it knows changes nothing: the
			 * 6.1 verifier does not know it (plen is reloaded from the stack without the
			 * bounds the comparison gave) and rejects the copy ("R2 min value is negative"). */
			barrier_var(plen);
			if (plen > len &&
			    bpf_copy_from_user_task(dst, plen & (2 * TD_BPF_CMDLINE_MAX - 1),
						    (void *)arg_start, t, 0))
				return needs_procfs(o, TD_GROUP_CMDLINE);
			len = plen;
			struct nul_scan s = { .buf = dst, .len = len, .found = len };

			bpf_loop(TD_BPF_CMDLINE_MAX, find_nul, &s, 0);
			if (s.found < len)
				len = s.found + 1;
		}
	}
	if (!put_attr_hdr(o, len, TD_GROUP_CMDLINE))
		return false;
	o->off += len;
	pad4(o);
	return true;
}

/*
 * An attribute header at o->off anywhere in the message (past the room for fixed records: after
 * the command line), for @payload bytes that must still fit. Returns false if they would not.
 */
static __always_inline bool put_far_hdr(struct out *o, __u32 payload, __u16 type)
{
	struct td_attr a = { .len = sizeof(a) + payload, .attr_type = type };
	__u32 off = o->off;

	if (off + sizeof(a) + payload > TD_MSG_MAX - 4)
		return false;
	bpf_probe_read_kernel(o->buf + (off & (TD_MSG_MAX - 1)), sizeof(a), &a);
	o->off = off + sizeof(a);
	return true;
}

/*
 * ENVIRON: the bytes of /proc/PID/environ (environ_read(): env_start to env_end of the address
 * space; nothing without one, or before exec has set it), for the sleepable program. An
 * environment that does not fit after the command line is read from /proc.
 */
static __always_inline bool put_environ(struct out *o, struct task_struct *t, struct mm_struct *mm)
{
	struct td_group_error e = { .group = TD_GROUP_ENVIRON, .errno = TD_ERRNO_NEEDS_PROCFS };
	__u64 start = 0, end = 0, len = 0;
	__u32 off;

	if (mm && mm->env_end) {
		start = mm->env_start;
		end = mm->env_end;
	}
	if (end > start)
		len = end - start;
	off = o->off + sizeof(struct td_attr);
	if (len >= TD_BPF_ENVIRON_MAX || off + len > TD_MSG_MAX - 4 || (len && mm_lock_busy(mm)) ||
	    (len && bpf_copy_from_user_task(o->buf + (off & (TD_MSG_MAX - 1)),
					    len & (TD_BPF_ENVIRON_MAX - 1), (void *)start, t, 0))) {
		o->fixup = true;
		if (!put_far_hdr(o, sizeof(e), TD_ATTR_GROUP_ERROR))
			return false;
		off = o->off;
		/* (clang knows the mask changes nothing; the verifier does not.) */
		barrier_var(off);
		bpf_probe_read_kernel(o->buf + (off & (TD_MSG_MAX - 1)), sizeof(e), &e);
		o->off = off + sizeof(e);
		return true;
	}
	if (!put_far_hdr(o, len, TD_GROUP_ENVIRON))
		return false;
	o->off += len;
	pad4(o);
	return true;
}

/*
 * Reading through a *trusted* task pointer makes the verifier look up, for every pointer field
 * loaded, whether that field is allow-listed as trusted: a linear search of the kernel's BTF
 * each time (btf_nested_type_is_trusted, ~1.5 ms per load instruction here). Through an
 * untrusted view of the same task the loads are the same fast probing loads and need no such
 * search, so emit() works on views made by bpf_rdonly_cast() where the kernel has it (6.2+;
 * older kernels do not do the search either).
 */
static __always_inline struct task_struct *untrusted(struct out *o, struct task_struct *t)
{
	if (!bpf_ksym_exists(bpf_rdonly_cast))
		return t;
	return bpf_rdonly_cast((void *)as_number(o, t), bpf_core_type_id_kernel(struct task_struct));
}

/* The reader's active pid namespace, task_active_pid_ns(current), for @cur (an untrusted view
 * of the current task), or its ancestor @above levels up (the root namespace if fewer). */
static __always_inline void reader_ns(struct task_struct *cur, struct ns_ctx *ns, __u32 above)
{
	struct pid *cur_pid = cur->thread_pid;
	struct upid up = {};
	__u32 lvl = cur_pid->level;

	lvl = above < lvl ? lvl - above : 0;
	if (lvl == 0)
		up.ns = cur_pid->numbers[0].ns;
	else
		bpf_probe_read_kernel(&up, sizeof(up), __builtin_preserve_access_index(&cur_pid->numbers[lvl]));
	ns->level = lvl;
	ns->ns = up.ns;
}

/* reader_ns() without bpf_get_current_task_btf() (kernels before 5.11): the current task read
 * with probe reads. */
static __always_inline void reader_ns_probed(struct ns_ctx *ns, __u32 above)
{
	struct task_struct *cur = (void *)bpf_get_current_task();
	struct pid *cur_pid = BPF_CORE_READ(cur, thread_pid);
	struct upid up = {};
	__u32 lvl = BPF_CORE_READ(cur_pid, level);

	lvl = (above < lvl ? lvl - above : 0) & 31;

	bpf_probe_read_kernel(&up, sizeof(up), __builtin_preserve_access_index(&cur_pid->numbers[lvl]));
	ns->level = lvl;
	ns->ns = up.ns;
}

/*
 * Loads, close together, a word of each cache line the groups of @show read outside the task's
 * first lines and the ids emit() has read (its signal_struct, credentials, address space, its
 * own scheduling and fault counters): independent loads, whose cache misses the CPU
 * overlaps, where the groups would otherwise wait for each one in turn. Over thousands of tasks
 * those lines are not in the cache: a line-level profile of the walk (perf's samples mapped to
 * source lines through the program's jited line info) put most of the program's own time on
 * the first read of each of these structures.
 */
static __always_inline void warm(struct task_struct *t, struct mm_struct *mm, __u32 show)
{
	struct signal_struct *sig = t->signal;
	__u64 x = t->start_boottime;

	if (show & (1 << TD_GROUP_CRED))
		x += t->real_cred->uid.val;
	if (show & (1 << TD_GROUP_STAT))
		x += sig->nr_threads + sig->cmin_flt + sig->utime + sig->sum_sched_runtime +
		     sig->prev_cputime.utime + t->min_flt + t->utime + t->se.sum_exec_runtime +
		     t->policy + t->nvcsw + t->prev_cputime.utime;
	if ((show & (1 << TD_GROUP_STATM)) && mm) {
		x += mm->start_code + mm->total_vm + mm->pgtables_bytes.counter;
		/* The rss counters (mm_counters()): the first and last of four, over 2-3 lines.
		 * (Before 6.2 they are one line, which 6.1's verifier will not let a plain load
		 * into: its BTF walk stops at the typedef atomic_long_t.) */
		if (!bpf_core_type_exists(struct mm_rss_stat___pre62)) {
			__u64 size = bpf_core_type_size(struct percpu_counter);
			void *rss = (void *)mm + bpf_core_field_offset(struct mm_struct, rss_stat);

			x += ((struct percpu_counter *)rss)->count +
			     ((struct percpu_counter *)(rss + 3 * size))->count;
		}
	}
	barrier_var(x);
}

/* Which record emit() writes: the one the strategy asks for, or one of the two of
 * TD_STRATEGY_ALL_WITH_THREADS. */
#define TD_PASS_ONE 0
#define TD_PASS_PROCESS 1
#define TD_PASS_THREAD 2

/*
 * One TASK message for @task. @with_cmdline: the sleepable program, which adds CMDLINE and
 * ENVIRON.
 * @bounded: the flavour for kernels without bpf_loop() (see the top of this file).
 */
static __always_inline int emit(struct seq_file *seq, struct task_struct *task, bool with_cmdline,
				bool bounded, int pass)
{
	struct task_struct *cur, *t;
	struct td_msg h = { .msg_type = TD_MSG_TASK };
	struct ns_ctx ns = {};
	struct upid up = {};
	struct mm_struct *mm;
	struct out o = {};
	__u32 zero = 0, strategy = cfg_strategy, flags, lvl, reader_pid, reader_tgid;
	__u64 show = (pass == TD_PASS_PROCESS ? cfg_show_process : cfg_show_flags) & ro_groups;
	bool is_leader;

	if (!task)
		return 0;
	/* The groups dump_task_both writes: the others' frames on top of its two records' passed
	 * the verifier's 512 bytes of stack. */
	if (pass != TD_PASS_ONE)
		show &= TD_SHOW_ONE_WALK;
	/* First: a process walk steps over every task that is not a leader (135,000 of 150,000
	 * tasks on a host of 10-thread processes), and the set-up below cost a tenth of it. The
	 * strategy is read again (volatile) rather than tested in @strategy: refined here, it
	 * split the rest of the program by strategy for 6.1's verifier (162,000 instructions
	 * verified instead of 102,000). */
	if (task->group_leader != task) {
		__u32 s = *(volatile __u32 *)&cfg_strategy;

		if (s == TD_STRATEGY_ALL || s == TD_STRATEGY_CHILDREN)
			return 0;
	}
	o.buf = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!o.buf)
		return 0;
	if (bounded) {
		t = task;
		reader_ns_probed(&ns, 0);
	} else {
		t = untrusted(&o, task);
		cur = untrusted(&o, bpf_get_current_task_btf());
		if (!t || !cur)
			return 0;
		reader_ns(cur, &ns, 0);
	}
	is_leader = t->group_leader == t;
	if ((strategy == TD_STRATEGY_ALL || strategy == TD_STRATEGY_CHILDREN) && !is_leader)
		return 0;

	reader_pid = pid_nr_ns(t->thread_pid, ns.level, ns.ns);
	reader_tgid = task_tgid_nr(t, &ns);

	if (cfg_target_ns_inum) {
		/* Another namespace: the task's own number at that level names it, if it is there. */
		struct pid *tp = t->thread_pid;

		lvl = cfg_target_ns_level & 31;
		if (!tp || tp->level < lvl)
			return 0;
		bpf_probe_read_kernel(&up, sizeof(up), __builtin_preserve_access_index(&tp->numbers[lvl]));
		if (!up.ns || BPF_CORE_READ(up.ns, ns.inum) != cfg_target_ns_inum)
			return 0;
		ns.level = lvl;
		ns.ns = up.ns;
		h.pid = up.nr;
		h.tgid = task_tgid_nr(t, &ns);
	} else {
		h.pid = reader_pid;
		h.tgid = reader_tgid;
	}
	if (!h.pid)
		return 0;
	if (strategy == TD_STRATEGY_CHILDREN && task_tgid_nr(t->real_parent, &ns) != cfg_parent)
		return 0;
	if ((cfg_only_pid && h.pid != cfg_only_pid) || (cfg_only_tgid && h.tgid != cfg_only_tgid))
		return 0;

	flags = t->flags;
	mm = (flags & TD_PF_KTHREAD) ? 0 : t->mm;
	/* Only for a task that is written (not for those a filter above skips). warm() tests a
	 * copy of show the verifier cannot link to show: tests of show itself would refine it
	 * differently on each path, and the paths would no longer merge after each group (the
	 * load took 6x longer, 0.44 s for top's four groups). */
	if (!bounded)
		warm(t, mm, forget_u32(&o, (__u32)show));
	o.off = sizeof(h);
	((struct scratch *)o.buf)->kstack_taken = false;
	((struct scratch *)o.buf)->kstack_whole = show & (1 << TD_GROUP_KSTACK);
	/* (@pass is a constant: the program a walk of the strategy asks for has nothing more
	 * to verify.) */
	if (pass != TD_PASS_ONE)
		((struct scratch *)o.buf)->thread_pass = pass == TD_PASS_THREAD;
	if ((show & (1 << TD_GROUP_BASE)) && !put_base(&o, t, &ns, is_leader))
		return 0;
	forget_off(&o);
	if (cfg_access && cfg_proc_up) {
		/* The ids in the namespace of the reader's /proc, above its own. */
		struct ns_ctx pns = {};

		if (bounded)
			reader_ns_probed(&pns, cfg_proc_up);
		else
			reader_ns(cur, &pns, cfg_proc_up);
		reader_pid = pid_nr_ns(t->thread_pid, pns.level, pns.ns);
		reader_tgid = task_tgid_nr(t, &pns);
	}
	if (cfg_access && !put_access(&o, t, mm, reader_pid, reader_tgid))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_CRED)) && !put_cred(&o, t))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_STAT)) &&
	    !put_stat(&o, t,
		      pass == TD_PASS_ONE ?
			      strategy != TD_STRATEGY_THREAD && strategy != TD_STRATEGY_ALL_THREAD :
			      pass == TD_PASS_PROCESS,
		      bounded))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_STATM)) && mm && !put_statm(&o, mm, bounded))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_SIGNAL)) && !put_signal(&o, t))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_NS)) && !put_ns(&o, t, &ns))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_FILES)) && !put_files(&o, t))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_IO)) && !put_io(&o, t, bounded))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_DELAY)) && !put_delay(&o, t))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_SECURITY)) && !put_security(&o, t))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_CGROUP)) && !put_cgroup(&o, t, bounded))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_PATHS)) && !put_paths(&o, t, bounded))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_SCHED)) && !put_sched(&o, task, t, bounded))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_KSTACK)) && !put_kstack(&o, task, t, bounded))
		return 0;
	forget_off(&o);
	if ((show & (1 << TD_GROUP_WCHAN)) && !put_wchan(&o, task, t, !with_cmdline, bounded))
		return 0;
	forget_off(&o);
	if (with_cmdline && (show & (1 << TD_GROUP_CMDLINE)) && mm && !put_cmdline(&o, task, mm))
		return 0;
	forget_off(&o);
	if (with_cmdline && (show & (1 << TD_GROUP_ENVIRON)) && !put_environ(&o, task, mm))
		return 0;
	if (cfg_access)
		recheck_access(&o, t);

	h.len = o.off;
	h.flags = (o.fixup ? TD_MSG_F_FIXUP : 0) | (pass == TD_PASS_PROCESS ? TD_MSG_F_PROCESS : 0);
	bpf_probe_read_kernel(o.buf, sizeof(h), &h);
	if (cfg_ringbuf)
		return bpf_ringbuf_output(&out_rb, o.buf, o.off & (TD_MSG_MAX - 1), BPF_RB_NO_WAKEUP) ? 1 : 0;
	bpf_seq_write(seq, o.buf, o.off & (TD_MSG_MAX - 1));
	return 0;
}

SEC("iter/task")
int dump_task(struct bpf_iter__task *ctx)
{
	return emit(ctx->meta->seq, ctx->task, false, false, TD_PASS_ONE);
}

SEC("iter/task")
int dump_task_bounded(struct bpf_iter__task *ctx)
{
	return emit(ctx->meta->seq, ctx->task, false, true, TD_PASS_ONE);
}

SEC("iter.s/task")
int dump_task_cmdline(struct bpf_iter__task *ctx)
{
	return emit(ctx->meta->seq, ctx->task, true, false, TD_PASS_ONE);
}

/*
 * TD_STRATEGY_ALL_WITH_THREADS: each task's own record, and before a leader's its process's
 * (TD_MSG_F_PROCESS, the groups of cfg_show_process): one walk where a process walk and a
 * thread walk each visited every task. Twice the task program to verify: loaded only on
 * request.
 */
SEC("iter/task")
int dump_task_both(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (task && task->group_leader == task) {
		/* Both records or neither: a task the ring has no room for is retried once user
		 * space drains it, and its process's record must not come twice. (The seq file
		 * takes back what a retried task wrote.) */
		if (cfg_ringbuf && bpf_ringbuf_query(&out_rb, BPF_RB_RING_SIZE) -
					   bpf_ringbuf_query(&out_rb, BPF_RB_AVAIL_DATA) <
				   2 * (TD_MSG_MAX + 8))
			return 1;
		if (emit(ctx->meta->seq, task, false, false, TD_PASS_PROCESS))
			return 1;
	}
	return emit(ctx->meta->seq, task, false, false, TD_PASS_THREAD);
}

/*
 * Memory maps: TD_MSG_VMA_PIECE messages, each holding a td_access (the process's state as the
 * piece's first mapping was read: see vma_piece_start()) and back-to-back entries of one process
 * (tasks in pid order, each task's mappings by address; threads sharing an address space are
 * walked once). An entry is a td_vma with the kernel's raw vm_flags (vm_flags_known 0: user
 * space translates them) followed by the name as show_map_vma()/get_vma_name() compute it,
 * raw (user space escapes newlines in paths as seq_path() does), padded to 4 bytes.
 *
 * The iterator calls the program once per mapping, so entries are gathered in vma_pend and
 * written as one message when the walk moves to another task, when TD_VMA_PEND bytes are
 * pending (the rest of the task follows in further pieces), and at the end of the walk (the
 * call with no mapping). One bpf_seq_write() per call at most, and the pending state changes
 * only once it succeeded: when the seq buffer is full the kernel discards this call's output
 * and calls again with the same mapping in the next read(), which then redoes the same step.
 */
#define TD_VMA_NAME_MAX 4096
#define TD_VMA_PEND 16384
/* A piece's header: the message header and the piece's td_access. */
#define TD_VMA_HEAD (sizeof(struct td_msg) + sizeof(struct td_access))

/*
 * Most mappings of most processes are of the same few files (the C library, the loader):
 * d_path() of each is the walk's main cost. So a file's name is written only the first time
 * its dentry appears in a walk (cfg_vma_gen numbers the walks); later mappings of it carry the
 * dentry as a key (td_vma.name_key, with name_ref = TD_VMA_NAME_REF) for user space to look
 * the name up.
 * The dentries named are remembered in a direct-mapped table (vma_pend.names): a file whose
 * slot another took meanwhile is simply named again, which user space takes as the same name.
 */
#define TD_VMA_NAME_SLOTS 1024

__u32 cfg_vma_gen = 0;

struct vma_pend {
	/* The task whose entries are pending, and its ids in the reader's namespace. */
	__u64 task;
	__u32 pid, tgid;
	/* The walk (cfg_vma_gen) this state belongs to: anything older is dropped. */
	__u32 gen;
	/* Bytes in buf, the message header included: sizeof(struct td_msg) when empty. */
	__u32 len;
	/* The dentry of the last file mapping this walk wrote or referred to. */
	__u64 last_key;
	/* The address space the pending piece's entries come from, and where addr_of() parks. */
	__u64 mm, slot;
	/* Files named in this walk: dentry and walk number, by slot (see above). */
	__u64 name_key[TD_VMA_NAME_SLOTS];
	__u32 name_gen[TD_VMA_NAME_SLOTS];
	/* A message: header, td_access, entries. Room for one entry past TD_VMA_PEND, and for
	 * the masks. */
	__u8 buf[2 * TD_VMA_PEND + sizeof(struct td_vma) + TD_VMA_NAME_MAX + 16];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vma_pend);
} vma_pend SEC(".maps");

/* dump_vma's own scratch (for untrusted() and reader_ns()): user space reads the map walk while
 * the same instance answers a task walk, so the two programs share no buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} vma_scratch SEC(".maps");

static __always_inline __u32 put_str(__u8 *dst, const char *prefix, __u32 plen, const char *src)
{
	long r;

	if (plen)
		bpf_probe_read_kernel(dst, plen & 15, prefix);
	r = bpf_probe_read_kernel_str(dst + (plen & 15), 256, src);
	return plen + (r > 0 ? r - 1 : 0);
}

/* Writes the pending entries as one message. Returns false if the seq buffer had no room. */
static __always_inline bool vma_flush(struct seq_file *seq, struct vma_pend *p)
{
	struct td_msg *h = (void *)p->buf;
	__u32 len = p->len;

	if (len <= TD_VMA_HEAD)
		return true;
	h->len = len;
	h->msg_type = TD_MSG_VMA_PIECE;
	h->flags = 0;
	h->pid = p->pid;
	h->tgid = p->tgid;
	barrier_var(len);
	if (bpf_seq_write(seq, p->buf, len & (2 * TD_VMA_PEND - 1)))
		return false;
	p->len = sizeof(*h);
	return true;
}

/*
 * Starts a piece: its td_access, the state of @t (an untrusted view of the task) as its mappings
 * in @mm are read. Exec replaces a process's address space and then its credentials; the
 * iterator walks the address space it took when it reached the task (and takes the task's
 * address space again after each read() of a large map), so the record says whether that is
 * still the task's and whether an exec is under way: user space shows a piece only if neither.
 */
static __always_inline void vma_piece_start(struct vma_pend *p, struct task_struct *t,
					    struct mm_struct *mm, __u64 mm_id)
{
	struct td_access *a = (void *)(p->buf + sizeof(struct td_msg));

	fill_access(a, t, mm, p->pid, p->tgid, &p->slot);
	if (addr_of(&p->slot, t->mm) != mm_id)
		a->flags |= TD_ACCESS_F_MM_CHANGED;
	p->mm = mm_id;
	p->len = TD_VMA_HEAD;
}

/* Whether the kernel's vma->anon_name overlays vma->shared (5.17-6.1: named anonymous shared
 * memory came with 6.2, which gave the name a field of its own). */
static __always_inline bool anon_name_in_union(struct vm_area_struct *vma)
{
	return bpf_core_field_offset(vma->anon_name) == bpf_core_field_offset(vma->shared);
}

/* The name of a mapping without a file, as get_vma_name() gives it. */
static __always_inline __u32 vma_anon_name(struct vm_area_struct *vma, struct anon_vma_name *an,
					   __u8 *name)
{
	struct mm_struct *mm = vma->vm_mm;
	__u32 n = 0;

	if (vma->vm_ops && BPF_CORE_READ(vma, vm_ops, name)) {
		/* Special mappings ([vdso], [vvar], [uprobes]): vm_special_mapping's name. */
		struct vm_special_mapping *sm = vma->vm_private_data;

		if (sm)
			n = put_str(name, "", 0, BPF_CORE_READ(sm, name));
	} else if (!mm) {
		n = put_str(name, "", 0, "[vdso]");
	} else if (vma->vm_start <= mm->brk && vma->vm_end >= mm->start_brk) {
		n = put_str(name, "", 0, "[heap]");
	} else if (vma->vm_start <= mm->start_stack && vma->vm_end >= mm->start_stack) {
		n = put_str(name, "", 0, "[stack]");
	} else if (an) {
		n = put_str(name, "[anon:", 6, an->name);
		name[n & (TD_VMA_NAME_MAX - 1)] = ']';
		n++;
	}
	return n;
}

/*
 * A file mapping's name written without bpf_d_path(), for dump_vma_walk: d_path() of
 * (@dentry_n, @mnt_n) for the reader by path_text()'s probe reads, " (deleted)" included, at
 * @name_off of vma_pend's buffer. Returns its length, or -1 where the walk cannot write it (a
 * name the file system makes up: memfd, SysV shm, anonymous inodes; deeper than TD_ROOT_DEPTH
 * components, longer than TD_VMA_NAME_MAX, renamed meanwhile): the caller then flags the
 * listing for /proc. The file is pinned by the address space's lock the iterator holds, so the
 * walk reads live dentries. Global: verified once.
 */
__noinline int vma_name_walk(__u64 dentry_n, __u64 mnt_n, __u32 name_off)
{
	struct pw_ctx c = {};
	struct vma_pend *p;
	struct scratch *sc;
	__u32 zero = 0, len;
	int n;

	p = bpf_map_lookup_elem(&vma_pend, &zero);
	sc = bpf_map_lookup_elem(&vma_scratch, &zero);
	if (!p || !sc || name_off > TD_VMA_PEND + sizeof(struct td_vma) || !reader_root(&sc->pw_root))
		return -1;
	c.sc = sc;
	sc->rw.at = 0;
	n = path_text(&c, dentry_n, mnt_n, false);
	if (n < 0)
		return -1;
	n += pw_deleted(sc, dentry_n);
	if (n <= 0 || n >= TD_VMA_NAME_MAX)
		return -1;
	len = n;
	barrier_var(len);
	/* The masks for the verifier (clang would drop them where it knows the bounds). */
	barrier_var(name_off);
	bpf_probe_read_kernel(p->buf + (name_off & (2 * TD_VMA_PEND - 1)), len & (TD_VMA_NAME_MAX - 1),
			      sc->buf);
	return n;
}

/*
 * One mapping (the body of both map-walk programs). @walk (dump_vma_walk): file names by
 * vma_name_walk() instead of bpf_d_path(), for kernels whose verifier does not let this
 * program hand vma->vm_file to bpf_d_path() (see docs/KERNELS.md); a constant, so that each
 * program holds only its own way.
 */
static __always_inline int vma_entry(struct bpf_iter__task_vma *ctx, const bool walk)
{
	struct vm_area_struct *vma = ctx->vma;
	struct task_struct *task = ctx->task, *cur, *t = 0;
	struct anon_vma_name *an = 0;
	struct ns_ctx ns = {};
	struct vma_pend *p;
	struct file *file;
	struct td_vma *r;
	struct out o = {};
	__u32 zero = 0, name_len = 0, off, pid, tgid;
	__u64 mm_id;
	__u8 *name, *buf;
	bool fresh;
	long n;

	p = bpf_map_lookup_elem(&vma_pend, &zero);
	if (!p)
		return 0;
	if (p->gen != cfg_vma_gen) {
		/* A new walk: whatever an abandoned one left is dropped. */
		p->gen = cfg_vma_gen;
		p->task = 0;
		p->last_key = 0;
		p->len = sizeof(struct td_msg);
	}
	if (!vma || !task) {
		/* The end of the walk (also the call after a full seq buffer, until it fits). */
		vma_flush(ctx->meta->seq, p);
		return 0;
	}
	fresh = p->task != (__u64)task;
	mm_id = addr_of(&p->slot, vma->vm_mm);
	/* A large map goes out in pieces of this much; a piece holds one address space's. */
	if (!fresh && p->len > TD_VMA_HEAD && (p->len > TD_VMA_PEND || mm_id != p->mm) &&
	    !vma_flush(ctx->meta->seq, p))
		return 0;
	if (fresh || p->len <= TD_VMA_HEAD) {
		/* Through untrusted views, as for task messages. */
		buf = bpf_map_lookup_elem(&vma_scratch, &zero);
		if (!buf)
			return 0;
		o.buf = buf;
		t = untrusted(&o, task);
		if (!t)
			return 0;
	}
	if (fresh) {
		/* Ids in the reader's pid namespace, computed once per task: its mappings come one
		 * after another. */
		cur = untrusted(&o, bpf_get_current_task_btf());
		if (!cur || !t)
			return 0;
		reader_ns(cur, &ns, 0);
		pid = pid_nr_ns(t->thread_pid, ns.level, ns.ns);
		tgid = task_tgid_nr(t, &ns);
		/* Another task: the previous one's entries go out first. */
		if (!vma_flush(ctx->meta->seq, p))
			return 0;
		p->task = (__u64)task;
		p->pid = pid;
		p->tgid = tgid;
	}
	if (!p->pid)
		return 0;
	if (cfg_vma_tgid && p->tgid != cfg_vma_tgid)
		return 0;
	if (p->len <= TD_VMA_HEAD) {
		if (!t)
			return 0;
		vma_piece_start(p, t, vma->vm_mm, mm_id);
	}

	off = p->len;
	barrier_var(off);
	if (off > TD_VMA_PEND)
		return 0; /* cannot happen: flushed above */
	off &= 2 * TD_VMA_PEND - 1;
	r = (void *)(p->buf + off);
	name = p->buf + off + sizeof(*r);
	r->start = vma->vm_start;
	r->end = vma->vm_end;
	r->vm_flags = vma->vm_flags;
	r->vm_flags_known = 0;
	r->pgoff = 0;
	r->inode = 0;
	r->dev_major = 0;
	r->dev_minor = 0;
	r->stat_len = 0;
	r->name_ref = 0;
	r->name_key = 0;
	file = vma->vm_file;
	/* A file mapping has an anon_name only if it is anonymous shared memory (MAP_SHARED |
	 * MAP_ANONYMOUS, see replace_anon_vma_name()), so always VM_SHARED: other file mappings
	 * skip the load, which is on a cache line of its own. Before 6.2 the field shares a union
	 * with `shared` (the file's interval tree node) and means something only without a file:
	 * the layout of the kernel's own struct says which (anon_vma_name()). */
	if (bpf_core_field_exists(vma->anon_name) &&
	    (!file || ((vma->vm_flags & TD_VM_SHARED) && !anon_name_in_union(vma))))
		an = vma->anon_name;
	if (file) {
		struct inode *ino = file->f_inode;
		__u32 dev = ino->i_sb->s_dev;

		r->inode = ino->i_ino;
		r->dev_major = dev >> 20;
		r->dev_minor = dev & 0xfffff;
		r->pgoff = vma->vm_pgoff << cfg_page_shift;
		if (an) {
			name_len = put_str(name, "[anon_shmem:", 12, an->name);
			name[name_len & (TD_VMA_NAME_MAX - 1)] = ']';
			name_len++;
		} else {
			__u64 key;
			__u32 slot;

			/* The dentry's address as a number: through map memory, as the verifier
			 * allows no arithmetic on pointers. */
			r->name_key = (__u64)file->f_path.dentry;
			key = *(volatile __u64 *)&r->name_key;
			/* Dentries are cache-line aligned objects: the bits above those vary. */
			slot = (key >> 6) & (TD_VMA_NAME_SLOTS - 1);
			if (key == p->last_key) {
				r->name_ref = TD_VMA_NAME_REF;
			} else if (p->name_key[slot] == key && p->name_gen[slot] == cfg_vma_gen) {
				r->name_ref = TD_VMA_NAME_REF;
				p->last_key = key;
			} else {
				if (walk) {
					n = vma_name_walk(key, (__u64)BPF_CORE_READ(file, f_path.mnt),
							  off + sizeof(*r));
					/* bpf_d_path()'s count has the NUL. */
					n = n > 0 ? n + 1 : n;
				} else {
					n = bpf_d_path(&file->f_path, (char *)name, TD_VMA_NAME_MAX);
				}
				name_len = n > 0 ? n - 1 : 0;
				if (n > 0) {
					p->name_key[slot] = key;
					p->name_gen[slot] = cfg_vma_gen;
					p->last_key = key;
				} else {
					/* No name: this listing is not /proc's; /proc gives it. */
					struct td_access *a = (void *)(p->buf + sizeof(struct td_msg));

					a->flags |= TD_ACCESS_F_NAME_MISSING;
				}
			}
		}
	} else {
		name_len = vma_anon_name(vma, an, name);
	}
	name_len &= TD_VMA_NAME_MAX - 1;
	/* Zero padding: the buffer holds older entries, of other processes. */
	name[name_len] = 0;
	name[(name_len + 1) & (TD_VMA_NAME_MAX - 1)] = 0;
	name[(name_len + 2) & (TD_VMA_NAME_MAX - 1)] = 0;
	r->name_len = name_len;
	r->vma_len = (sizeof(*r) + name_len + 3) & ~3u;
	p->len = off + r->vma_len;
	return 0;
}

SEC("iter/task_vma")
int dump_vma(struct bpf_iter__task_vma *ctx)
{
	return vma_entry(ctx, false);
}

SEC("iter/task_vma")
int dump_vma_walk(struct bpf_iter__task_vma *ctx)
{
	return vma_entry(ctx, true);
}

/*
 * The root directory of one task (the link's tid; without link parameters the task numbered
 * cfg_root_tid in the reader's pid namespace), written as d_path() prints it for the reader:
 * for a server, the prefix that the file names of its map walk have and its client's
 * /proc/PID/maps does not show (a client in a chroot). Loaded with dump_vma.
 *
 * Not with bpf_d_path(): the task's fs_struct is read without its lock, and a task exiting
 * meanwhile frees it (see the top of this file), so d_path() could be handed freed memory.
 * path_text() walks it with probe reads, which cannot fault, in bounded loops; the root is
 * taken under fs_struct's sequence count and the text kept only if the task still has that
 * fs_struct afterwards. A path path_text() does not write (too deep, a rename meanwhile) is
 * not written: the caller takes none.
 */
__u32 cfg_root_tid = 0;

SEC("iter/task")
int task_root(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task, *t, *cur;
	struct pw_ctx c = {};
	struct ns_ctx ns = {};
	struct fs_struct *fs;
	struct scratch *sc;
	struct out o = {};
	struct path p = {};
	__u32 zero = 0, seq;
	int n;

	if (!task)
		return 0;
	sc = bpf_map_lookup_elem(&vma_scratch, &zero);
	if (!sc)
		return 0;
	o.buf = (void *)sc;
	c.sc = sc;
	t = untrusted(&o, task);
	cur = untrusted(&o, bpf_get_current_task_btf());
	if (!t || !cur)
		return 0;
	if (cfg_root_tid) {
		reader_ns(cur, &ns, 0);
		if (pid_nr_ns(t->thread_pid, ns.level, ns.ns) != cfg_root_tid)
			return 0;
	}
	fs = BPF_CORE_READ(t, fs);
	if (!fs || !reader_root(&sc->pw_root))
		return 0;
	seq = fs_seq(fs);
	if ((seq & 1) ||
	    bpf_probe_read_kernel(&p, sizeof(p), __builtin_preserve_access_index(&fs->root)) ||
	    fs_seq(fs) != seq)
		return 0;
	/* Bounded: this program loads on kernels without bpf_loop() too (5.12+). */
	sc->rw.at = 0;
	n = path_text(&c, (__u64)p.dentry, (__u64)p.mnt, true);
	if (n > 0)
		n += pw_deleted(sc, (__u64)p.dentry);
	if (n <= 0 || n >= TD_FIXED_ROOM || BPF_CORE_READ(t, fs) != fs)
		return 0;
	/* (The barrier keeps clang from dropping the mask the verifier needs.) */
	barrier_var(n);
	bpf_seq_write(ctx->meta->seq, sc->buf, n & (TD_FIXED_ROOM - 1));
	return 0;
}
