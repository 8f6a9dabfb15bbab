/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types taskdiag's BPF programs read, declared by hand.
 *
 * Every struct is marked preserve_access_index, so each field access is a CO-RE relocation that
 * libbpf resolves against the running kernel's BTF at load time: field order, offsets and the
 * presence of unlisted fields here do not matter, only names and types. Fields that moved
 * between kernel versions have "flavor" structs (name___suffix) and are chosen at run time with
 * bpf_core_field_exists(); each says which kernel change it covers.
 */
#ifndef TASKDIAG_VMLINUX_MIN_H
#define TASKDIAG_VMLINUX_MIN_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s64 s64;
typedef __s32 s32;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

/* Map and program types used by the bpf_helpers.h macros. */
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};
enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
};
enum {
	BPF_RB_AVAIL_DATA = 0,
	BPF_RB_RING_SIZE = 1,
};
enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct list_head {
	struct list_head *next, *prev;
};

typedef struct {
	unsigned long sig[1];
} sigset_t;

struct sigpending {
	struct list_head list;
	sigset_t signal;
};

typedef struct {
	int counter;
} atomic_t;

typedef struct {
	s64 counter;
} atomic64_t;

typedef atomic64_t atomic_long_t;

typedef struct {
	u32 val;
} kuid_t;

typedef struct {
	u32 val;
} kgid_t;

typedef struct {
	u64 val;
} kernel_cap_t;

struct ns_common {
	unsigned int inum;
};

struct task_struct;

struct pid_namespace {
	struct ns_common ns;
	unsigned int level;
	struct task_struct *child_reaper;
};

/* The namespaces a task's nsproxy holds (each embeds its ns_common as `ns`). */
struct uts_namespace {
	struct ns_common ns;
};
struct ipc_namespace {
	struct ns_common ns;
};
struct mnt_namespace {
	struct ns_common ns;
};
struct net {
	struct ns_common ns;
};
struct time_namespace {
	struct ns_common ns;
};
struct css_set;
struct cgroup_namespace {
	struct ns_common ns;
	struct css_set *root_cset;
};

/* The cgroup a task is in, in the unified hierarchy: css_set.dfl_cgrp, its kernfs directory
 * (whose id is the cgroup's id and the directory's inode number, 5.5+) and whether it is
 * online (cgroup_is_dead()). */
struct kernfs_node {
	struct kernfs_node *__parent;
	const char *name;
	u64 id;
};

/* Before 6.15 (633488947ef6 "kernfs: Use RCU to access kernfs_node::parent"). */
struct kernfs_node___pre615 {
	struct kernfs_node *parent;
};

struct cgroup_subsys {
	const char *legacy_name;
};

struct cgroup_subsys_state {
	struct cgroup_subsys *ss;
	unsigned int flags;
	/* The parent cgroup's own css (its `self`, at offset 0 of struct cgroup): taskdiag
	 * profile's --cgroup walks up with it. */
	struct cgroup_subsys_state *parent;
};

/* A hierarchy (cgroup v1's; hierarchy_id 0 is the unified one). */
struct cgroup_root {
	unsigned int subsys_mask;
	int hierarchy_id;
	char name[64];
};

struct cgroup {
	struct cgroup_subsys_state self;
	struct kernfs_node *kn;
	struct cgroup_root *root;
};

/* One per hierarchy on a css_set's cgrp_links: the set's cgroup there. */
struct cgrp_cset_link {
	struct cgroup *cgrp;
	struct list_head cgrp_link;
};

struct css_set {
	struct cgroup_subsys_state *subsys[16];
	struct cgroup *dfl_cgrp;
	struct list_head cgrp_links;
};

struct nsproxy {
	struct uts_namespace *uts_ns;
	struct ipc_namespace *ipc_ns;
	struct mnt_namespace *mnt_ns;
	struct pid_namespace *pid_ns_for_children;
	struct net *net_ns;
	struct time_namespace *time_ns;
	struct time_namespace *time_ns_for_children;
	struct cgroup_namespace *cgroup_ns;
};

struct user_namespace {
	struct ns_common ns;
	struct user_namespace *parent;
	kuid_t owner;
};

struct upid {
	int nr;
	struct pid_namespace *ns;
};

struct pid {
	unsigned int level;
	struct upid numbers[1];
};

enum pid_type {
	PIDTYPE_PID,
	PIDTYPE_TGID,
	PIDTYPE_PGID,
	PIDTYPE_SID,
	PIDTYPE_MAX,
};

struct tty_driver {
	int major;
	int minor_start;
};

struct tty_struct {
	int index;
	struct tty_driver *driver;
	struct {
		struct pid *pgrp;
	} ctrl;
};

struct tty_struct___pre60 {
	struct pid *pgrp;
};

struct prev_cputime {
	u64 utime;
	u64 stime;
};

/* The owner word is non-zero while the mutex is held. */
struct mutex {
	atomic_long_t owner;
};

struct rlimit {
	unsigned long rlim_cur, rlim_max;
};

struct fdtable {
	unsigned int max_fds;
	unsigned long *open_fds;
};

struct files_struct {
	struct fdtable *fdt;
};

/* CONFIG_TASK_XACCT's four and CONFIG_TASK_IO_ACCOUNTING's three counters (/proc/PID/io). */
struct task_io_accounting {
	u64 rchar, wchar, syscr, syscw;
	u64 read_bytes, write_bytes, cancelled_write_bytes;
};

struct signal_struct {
	int nr_threads;
	struct list_head thread_head;
	struct pid *pids[PIDTYPE_MAX];
	struct tty_struct *tty;
	u64 utime, stime, cutime, cstime;
	struct prev_cputime prev_cputime;
	unsigned long min_flt, maj_flt, cmin_flt, cmaj_flt;
	unsigned long long sum_sched_runtime;
	/* Held while a thread of the process executes a program (and while a tracer attaches). */
	struct mutex cred_guard_mutex;
	struct sigpending shared_pending;
	struct rlimit rlim[16];
	/* The I/O of the process's dead threads. */
	struct task_io_accounting ioac;
	/* SCHED: threads not yet exited, the autogroup (CONFIG_SCHED_AUTOGROUP), the OOM
	 * adjustment. */
	atomic_t live;
	struct autogroup *autogroup;
	short oom_score_adj;
};

/* SCHED's autogroup (kernel/sched/autogroup.h): an autogroup's task group points back at it. */
struct task_group {
	struct autogroup *autogroup;
};

struct autogroup {
	struct task_group *tg;
	unsigned long id;
	int nice;
};

/* The bitmaps of SCHED's Cpus_allowed_list and Mems_allowed_list (sized by the kernel). */
struct cpumask {
	unsigned long bits[1];
};

typedef struct {
	unsigned long bits[1];
} nodemask_t;

/* SCHED's system call (x86-64's saved user registers). */
struct pt_regs {
	unsigned long r10, r9, r8, dx, si, di, orig_ax, ip, sp;
	/* taskdiag profile's frame-pointer walk of a blocked task's user stack. */
	unsigned long bp;
};

struct group_info {
	int ngroups;
	kgid_t gid[];
};

struct cred {
	kuid_t uid, suid, euid, fsuid;
	kgid_t gid, sgid, egid, fsgid;
	kernel_cap_t cap_inheritable, cap_permitted, cap_effective, cap_bset, cap_ambient;
	struct group_info *group_info;
	struct user_namespace *user_ns;
};

struct percpu_counter {
	s64 count;
	s32 *counters;
};

typedef struct {
	unsigned long __mm_flags[1];
} mm_flags_t;

/* Since 6.2 (f1a7941243c1 "mm: convert mm's rss stats into percpu_counter"). */
/* The count word of a (non-PREEMPT_RT) rwsem: RWSEM_WRITER_LOCKED is bit 0, RWSEM_FLAG_WAITERS
 * bit 1, RWSEM_FLAG_HANDOFF bit 2 (kernel/locking/rwsem.c, 5.3+), readers above. */
struct rw_semaphore {
	atomic_long_t count;
};

struct mm_struct {
	struct rw_semaphore mmap_lock;
	unsigned long total_vm, locked_vm, data_vm, exec_vm, stack_vm;
	unsigned long hiwater_rss, hiwater_vm;
	atomic64_t pinned_vm;
	atomic_long_t pgtables_bytes;
	unsigned long start_code, end_code;
	unsigned long arg_start, arg_end, env_start, env_end;
	struct percpu_counter rss_stat[4];
	struct user_namespace *user_ns;
	mm_flags_t flags;
	unsigned long start_brk, brk, start_stack;
	struct file *exe_file;
};

/* Before 6.18 ("mm: convert mm->flags to a bitmap") mm->flags was one word. The dumpable bits
 * are the low bits of the first word either way. */
struct mm_struct___word_flags {
	unsigned long flags;
};

/* Before 6.2: struct mm_rss_stat { atomic_long_t count[NR_MM_COUNTERS]; }. */
struct mm_rss_stat___pre62 {
	atomic_long_t count[4];
};

struct mm_struct___pre62 {
	struct mm_rss_stat___pre62 rss_stat;
};

struct sched_entity {
	u64 sum_exec_runtime;
};

/* CONFIG_SCHED_INFO: what /proc/PID/schedstat prints after sum_exec_runtime. */
struct sched_info {
	unsigned long pcount;
	unsigned long long run_delay;
};

/* CONFIG_TASK_DELAY_ACCT's totals (ns) and counts; compact_* since 5.14, wpcopy_* since 6.0,
 * irq_* since 6.8 (checked with bpf_core_field_exists()). */
struct task_delay_info {
	u64 blkio_delay, swapin_delay;
	u32 blkio_count, swapin_count;
	u64 freepages_delay, thrashing_delay, compact_delay, wpcopy_delay, irq_delay;
	u32 freepages_count, thrashing_count, compact_count, wpcopy_count, irq_count;
};

/* Since 5.16 (bcf9033e5449 "sched: move CPU field back into thread_info"), x86 keeps cpu here. */
struct thread_info {
	u32 cpu;
	/* TS_COMPAT: a 32-bit system call (x86). */
	u32 status;
};

struct kthread {
	void *data;
	char *full_name;
};

struct worker_pool;
struct work_struct;

struct worker {
	struct work_struct *current_work;
	struct worker_pool *pool;
	char desc[32];
};

struct sigaction {
	void *sa_handler;
};

struct k_sigaction {
	struct sigaction sa;
};

struct sighand_struct {
	struct k_sigaction action[64];
};

/* filter_count since 5.9 (c818c03b661c "seccomp: Report number of loaded filters in
 * /proc/$pid/status"). */
struct seccomp {
	int mode;
	atomic_t filter_count;
};

struct task_struct {
	struct thread_info thread_info;
	struct sighand_struct *sighand;
	unsigned int __state;
	unsigned int flags;
	/* Whether the task is on a CPU (CONFIG_SMP): taskdiag profile leaves those to perf_event. */
	int on_cpu;
	/* Its id in the initial pid namespace (taskdiag profile's per-thread memory). */
	int pid;
	unsigned int ptrace;
	int prio, static_prio;
	unsigned int rt_priority;
	unsigned int policy;
	struct sched_entity se;
	struct mm_struct *mm;
	int exit_state;
	struct task_struct *real_parent;
	struct task_struct *parent;
	struct task_struct *group_leader;
	struct pid *thread_pid;
	struct list_head thread_node;
	void *worker_private;
	u64 utime, stime;
	struct prev_cputime prev_cputime;
	unsigned long nvcsw, nivcsw;
	u64 start_boottime;
	unsigned long min_flt, maj_flt;
	const struct cred *real_cred;
	char comm[16];
	struct signal_struct *signal;
	/* Incremented by every exec (u64 since 5.7). */
	u64 self_exec_id;
	struct fs_struct *fs;
	sigset_t blocked;
	struct sigpending pending;
	struct nsproxy *nsproxy;
	struct css_set *cgroups;
	struct files_struct *files;
	struct task_io_accounting ioac;
	struct sched_info sched_info;
	struct task_delay_info *delays;
	unsigned long atomic_flags;
	struct seccomp seccomp;
	/* SCHED: the kernel stack (NULL once freed at exit), a vfork child's completion, the
	 * audit login uid and session (CONFIG_AUDIT), the CPUs and memory nodes allowed (the
	 * affinity mask, which /proc and sched_getaffinity() report: cpus_ptr points at one CPU
	 * while a task that disabled migration, as around a BPF program's run, is off its CPU). */
	void *stack;
	int on_rq;
	int tgid;
	void *vfork_done;
	kuid_t loginuid;
	unsigned int sessionid;
	struct cpumask cpus_mask;
	nodemask_t mems_allowed;
};

/* Before 5.14 (2f064a59a11f "sched: Change task_struct::state"). */
struct task_struct___pre514 {
	long state;
};

/* Before 5.16, task_struct had the cpu field (see thread_info above). */
struct task_struct___pre516 {
	unsigned int cpu;
};

/* Before 5.17 (e32cf5dfbe22 "kthread: Generalize pf_io_worker"), struct kthread hung here. */
struct task_struct___pre517 {
	int *set_child_tid;
};

/* Only to find a per-CPU array's per-CPU base pointer (see cpu_offset() in taskdiag.bpf.c). */
struct bpf_array {
	void *pptrs[1];
};

struct path {
	void *mnt;
	void *dentry;
};

/* fs_struct.seq's sequence (a seqcount_spinlock_t since 5.10): odd while root or pwd change. */
typedef struct seqcount {
	unsigned sequence;
} seqcount_t;

typedef struct seqcount_spinlock {
	seqcount_t seqcount;
} seqcount_spinlock_t;

struct fs_struct {
	seqcount_spinlock_t seq;
	struct path root, pwd;
};

/* Later kernels (6.18 has it) make it a seqlock_t. */
typedef struct {
	seqcount_spinlock_t seqcount;
} seqlock_t;

struct fs_struct___seqlock {
	seqlock_t seq;
};

/* What d_path() walks (path_text()): a dentry's parent, name, hash linkage (unhashed: deleted)
 * and operations (d_dname: a name made up, not walked), and a mount's parent, mountpoint and
 * root. */
struct dentry_operations {
	void *d_dname;
};

struct qstr {
	u32 hash;
	u32 len;
	const unsigned char *name;
};

struct hlist_bl_node {
	struct hlist_bl_node *next, **pprev;
};

struct dentry {
	struct hlist_bl_node d_hash;
	struct dentry *d_parent;
	struct qstr d_name;
	const struct dentry_operations *d_op;
};

struct vfsmount {
	struct dentry *mnt_root;
};

struct mount {
	struct mount *mnt_parent;
	struct dentry *mnt_mountpoint;
	struct vfsmount mnt;
};

struct super_block {
	u32 s_dev;
};

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
};

struct file {
	struct path f_path;
	struct inode *f_inode;
};

struct vm_special_mapping {
	const char *name;
};

struct vm_area_struct;

struct vm_operations_struct {
	const char *(*name)(struct vm_area_struct *vma);
};

struct anon_vma_name {
	char name[1];
};

struct vm_area_struct {
	unsigned long vm_start, vm_end;
	struct mm_struct *vm_mm;
	unsigned long vm_flags;
	unsigned long vm_pgoff;
	struct file *vm_file;
	void *vm_private_data;
	const struct vm_operations_struct *vm_ops;
	/* Before 6.2 anon_name shares a union with shared (valid only without vm_file). */
	struct {
		unsigned long rb_subtree_last;
	} shared;
	struct anon_vma_name *anon_name;
};

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	u64 session_id;
	u64 seq_num;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

struct bpf_iter__task_vma {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	struct vm_area_struct *vma;
};

#pragma clang attribute pop

#endif /* TASKDIAG_VMLINUX_MIN_H */
