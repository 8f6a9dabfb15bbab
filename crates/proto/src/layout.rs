//! Fixed-size record layouts, defined once for Rust and C.
//!
//! Every struct that crosses the wire is declared here with the `wire_structs!` macro, which emits
//! the `#[repr(C)]` Rust type, its byte codec and the C declaration that [`c_header`] writes for the
//! BPF programs. The BPF crate's build script calls [`c_header`], so the C side can never drift from
//! this file. Integers are in host byte order (like netlink: the stream never leaves the host),
//! every field is naturally aligned, and no struct has implicit padding (checked at compile time).
//!
//! This module owns layouts only; message framing is in [`crate::msg`], decoding of whole tasks in
//! [`crate::task`].

/// Maps a field kind to its Rust type, C type and size.
macro_rules! kind {
    (@c u8) => {
        "__u8"
    };
    (@c u16) => {
        "__u16"
    };
    (@c u32) => {
        "__u32"
    };
    (@c u64) => {
        "__u64"
    };
    (@c i32) => {
        "__s32"
    };
    (@c i64) => {
        "__s64"
    };
}

/// Declares wire structs: Rust type, codec, size assertions and C text, from one definition.
macro_rules! wire_structs {
    ($(
        $(#[doc = $doc:literal])*
        struct $name:ident = $cname:literal, size $size:literal {
            $( $(#[doc = $fdoc:literal])* $field:ident : $kind:ident ),* $(,)?
        }
    )*) => {
        $(
            $(#[doc = $doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
            pub struct $name {
                $( $(#[doc = $fdoc])* pub $field: $kind, )*
            }

            const _: () = {
                assert!(core::mem::size_of::<$name>() == $size);
                // No implicit padding: the fields add up to the struct size.
                assert!(0 $( + core::mem::size_of::<$kind>() )* == $size);
            };

            impl $name {
                /// Size of the record on the wire, in bytes.
                pub const SIZE: usize = $size;
                /// Name of the C struct in the generated header.
                pub const C_NAME: &'static str = $cname;
                const C_FIELDS: &'static [(&'static str, &'static str)] =
                    &[ $( (kind!(@c $kind), stringify!($field)) ),* ];

                /// Decodes the record from the first [`Self::SIZE`] bytes of `b`;
                /// `None` if `b` is shorter.
                pub fn read_from(b: &[u8]) -> Option<Self> {
                    let b = b.get(..$size)?;
                    let mut _off = 0usize;
                    Some(Self { $(
                        $field: {
                            const N: usize = core::mem::size_of::<$kind>();
                            let mut a = [0u8; N];
                            a.copy_from_slice(b.get(_off.._off + N)?);
                            _off += N;
                            $kind::from_ne_bytes(a)
                        },
                    )* })
                }

                /// Appends the record's [`Self::SIZE`] bytes to `out`.
                pub fn write_to(&self, out: &mut Vec<u8>) {
                    out.extend_from_slice(&self.to_bytes());
                }

                /// The record's bytes, without allocating.
                pub fn to_bytes(&self) -> [u8; $size] {
                    let mut b = [0u8; $size];
                    let mut _off = 0usize;
                    $(
                        let v = self.$field.to_ne_bytes();
                        b[_off.._off + v.len()].copy_from_slice(&v);
                        _off += v.len();
                    )*
                    b
                }
            }
        )*

        /// Every wire struct: (C name, size, fields as (C type, name)).
        const ALL_STRUCTS: &[(&str, usize, &[(&str, &str)])] =
            &[ $( ($cname, $size, $name::C_FIELDS) ),* ];
    };
}

wire_structs! {
    /// A request: which tasks (strategy, pid) and which attribute groups (show flags).
    struct Request = "td_request", size 32 {
        /// Total request length in bytes (32 for version 1).
        len: u32,
        /// Protocol version, [`crate::VERSION`].
        version: u16,
        /// Reserved request flags; must be 0.
        flags: u16,
        /// Bitmask of `1 << group id` (see [`crate::Group`]).
        show_flags: u64,
        /// A [`crate::Strategy`] value.
        strategy: u32,
        /// Target pid/tid for ONE, THREAD and CHILDREN, in the caller's pid namespace.
        pid: u32,
        /// ALL_WITH_THREADS: bitmask of the groups of each process's own record (show flags
        /// are its threads'); must be 0 for the other strategies.
        show_process: u64,
    }

    /// Header of every message in a response stream.
    struct MsgHeader = "td_msg", size 16 {
        /// Length of the message including this header; a multiple of 4.
        len: u32,
        /// A [`crate::MsgType`] value.
        msg_type: u16,
        /// [`crate::MSG_F_CONTINUED`] and future flags.
        flags: u16,
        /// Task id (thread id) in the caller's pid namespace; 0 for non-task messages.
        pid: u32,
        /// Thread-group id in the caller's pid namespace; 0 for non-task messages.
        tgid: u32,
    }

    /// Header of every attribute inside a task message (netlink `nlattr`).
    struct AttrHeader = "td_attr", size 4 {
        /// Length of header + payload, not counting the padding to 4 bytes.
        len: u16,
        /// Attribute type: a group id, or [`crate::ATTR_GROUP_ERROR`].
        attr_type: u16,
    }

    /// Payload of the START message that opens every response stream.
    struct Start = "td_start", size 24 {
        /// Protocol version of the stream.
        version: u16,
        /// Which backend produced the stream (a [`crate::BackendId`] value).
        backend: u16,
        /// Strategy of the request being answered.
        strategy: u32,
        /// Show flags of the request being answered.
        show_flags: u64,
        /// Pid of the request being answered.
        pid: u32,
        /// Reserved, 0.
        reserved: u32,
    }

    /// Payload of the DONE message that closes every response stream.
    struct Done = "td_done", size 16 {
        /// 0 on success, else a negative errno (`-ESRCH`: no such pid).
        error: i32,
        /// Reserved, 0.
        reserved: u32,
        /// Number of tasks reported (messages without CONTINUED).
        tasks: u64,
    }

    /// Payload of a GROUP_ERROR attribute: one group could not be read for this task.
    struct GroupErrorRec = "td_group_error", size 8 {
        /// The group id that is missing from this message.
        group: u16,
        /// Reserved, 0.
        reserved: u16,
        /// Positive errno: why (EACCES, ESRCH, ...).
        errno: i32,
    }

    /// BASE group: identity and state. Followed in the attribute by `comm_len` bytes of name.
    struct BaseRec = "td_base", size 40 {
        /// Thread-group id of the real parent; 0 if outside the caller's pid namespace.
        ppid: u32,
        /// Id of the ptrace tracer (a thread id), 0 if not traced.
        tpid: u32,
        /// Session id.
        sid: u32,
        /// Process group id.
        pgid: u32,
        /// Controlling terminal as /proc/PID/stat's tty_nr (new_encode_dev), 0 if none.
        tty_nr: u32,
        /// Kernel task flags (PF_*), as /proc/PID/stat field 9.
        task_flags: u32,
        /// State index: 0 R, 1 S, 2 D, 3 T, 4 t, 5 X, 6 Z, 7 P, 8 I (see [`crate::state_char`]).
        state: u8,
        /// [`crate::BASE_F_KTHREAD`], [`crate::BASE_F_LEADER`].
        flags: u8,
        /// Length of the name that follows the record (at most [`crate::COMM_MAX`]).
        comm_len: u16,
        /// Foreground process group of the controlling terminal (/proc/PID/stat's tpgid): -1
        /// without a terminal, 0 when that group is outside the caller's pid namespace.
        tpgid: i32,
        /// Start time since boot in nanoseconds, at clock-tick resolution (as /proc reports it).
        start_time_ns: u64,
    }

    /// CRED group: credentials. Followed in the attribute by `ngroups` u32 supplementary gids.
    struct CredRec = "td_cred", size 80 {
        /// Real uid.
        uid: u32,
        /// Effective uid.
        euid: u32,
        /// Saved uid.
        suid: u32,
        /// Filesystem uid.
        fsuid: u32,
        /// Real gid.
        gid: u32,
        /// Effective gid.
        egid: u32,
        /// Saved gid.
        sgid: u32,
        /// Filesystem gid.
        fsgid: u32,
        /// Inheritable capability set.
        cap_inheritable: u64,
        /// Permitted capability set.
        cap_permitted: u64,
        /// Effective capability set.
        cap_effective: u64,
        /// Bounding set.
        cap_bset: u64,
        /// Ambient set.
        cap_ambient: u64,
        /// Number of supplementary groups that follow.
        ngroups: u32,
        /// Reserved, 0.
        reserved: u32,
    }

    /// STAT group: scheduling and fault counters. Times are nanoseconds at clock-tick resolution.
    struct StatRec = "td_stat", size 104 {
        /// Minor faults (thread group total unless a thread strategy).
        minflt: u64,
        /// Minor faults of waited-for children.
        cminflt: u64,
        /// Major faults.
        majflt: u64,
        /// Major faults of waited-for children.
        cmajflt: u64,
        /// User CPU time, ns.
        utime_ns: u64,
        /// System CPU time, ns.
        stime_ns: u64,
        /// User CPU time of waited-for children, ns.
        cutime_ns: u64,
        /// System CPU time of waited-for children, ns.
        cstime_ns: u64,
        /// Voluntary context switches (of this task, as /proc/PID/status).
        nvcsw: u64,
        /// Involuntary context switches.
        nivcsw: u64,
        /// Threads in the thread group.
        threads: u32,
        /// Priority as /proc/PID/stat field 18.
        priority: i32,
        /// Nice value, -20..19.
        nice: i32,
        /// Scheduling policy (SCHED_*).
        policy: u32,
        /// Real-time priority, 0 for normal policies.
        rt_priority: u32,
        /// CPU the task last ran on.
        processor: i32,
    }

    /// Payload of an ACCESS attribute ([`crate::ATTR_ACCESS`]): what procfs's permission
    /// checks look at, for a server that answers on behalf of another caller (taskdiagd). Asked
    /// for by the library, never sent to clients.
    struct AccessRec = "td_access", size 96 {
        /// Task id in the pid namespace of the process that read the iterator (or of the
        /// /proc it reads, when that is of a namespace above its own: `cfg_proc_up`).
        reader_pid: u32,
        /// Thread-group id in that namespace.
        reader_tgid: u32,
        /// Real uid (kernel id, as in the initial user namespace).
        uid: u32,
        /// Effective uid.
        euid: u32,
        /// Saved uid.
        suid: u32,
        /// Real gid.
        gid: u32,
        /// Effective gid.
        egid: u32,
        /// Saved gid.
        sgid: u32,
        /// Permitted capability set.
        cap_permitted: u64,
        /// Inode number of the user namespace of the task's credentials.
        userns: u32,
        /// Inode number of the user namespace of its address space (0 without one).
        mm_userns: u32,
        /// Inode number of the task's own pid namespace (task_active_pid_ns).
        pidns: u32,
        /// Level of that pid namespace (0: the initial one).
        pidns_level: u16,
        /// get_dumpable(): 0 SUID_DUMP_DISABLE, 1 SUID_DUMP_USER, 2 SUID_DUMP_ROOT.
        dumpable: u8,
        /// 1 if the task has an address space (not a kernel thread, not exiting).
        has_mm: u8,
        /// Owner (kernel uid) of the user namespace of the task's credentials.
        userns_owner: u32,
        /// Inode number of that namespace's parent (0 for the initial namespace).
        userns_parent: u32,
        /// The task's `self_exec_id`: how many programs it has executed (an exec changes it).
        exec_id: u64,
        /// Identity of the address space the record describes (its kernel address; 0 without
        /// one). Compared, never shown.
        mm_id: u64,
        /// Start time (ns since boot) of the thread group's leader: with the thread-group id,
        /// names one process for its whole life (a reused pid has another).
        tg_start_ns: u64,
        /// [`crate::ACCESS_F_EXEC`], [`crate::ACCESS_F_MM_CHANGED`], [`crate::ACCESS_F_CHANGED`],
        /// [`crate::ACCESS_F_NAME_MISSING`].
        flags: u32,
        /// Zero.
        reserved: u32,
    }

    /// One memory mapping in a VMA attribute, followed by a [`VmaStatRec`] when `stat_len` is
    /// not 0 and by `name_len` name bytes; `vma_len` (a multiple of 4) steps to the next one.
    struct VmaRec = "td_vma", size 72 {
        /// First address.
        start: u64,
        /// One past the last address.
        end: u64,
        /// [`crate::vma_flags`] bits (task_diag's `TASK_DIAG_VMA_F_*` numbering).
        vm_flags: u64,
        /// Which bits of `vm_flags` the backend knew (/proc/PID/maps shows only rwxs).
        vm_flags_known: u64,
        /// File offset in bytes (`vm_pgoff << PAGE_SHIFT`), as /proc/PID/maps shows it.
        pgoff: u64,
        /// Inode number of the mapped file, 0 without one.
        inode: u64,
        /// Major number of the file's device.
        dev_major: u32,
        /// Minor number of the file's device.
        dev_minor: u32,
        /// Bytes of this entry: record, statistics, name, padding to 4.
        vma_len: u16,
        /// Bytes of name: the mapping's name exactly as /proc/PID/maps prints it (a file path
        /// with "\012" for newlines and " (deleted)", `[heap]`, `[stack]`, `[vdso]`,
        /// `[anon:NAME]`, ...).
        name_len: u16,
        /// Bytes of statistics that follow the record: 0 or the size of [`VmaStatRec`].
        stat_len: u16,
        /// Internal to the BPF map walk, 0 on the wire: [`crate::VMA_NAME_REF`] when the name
        /// is left out because this walk already gave it for the same file.
        name_ref: u16,
        /// Internal to the BPF map walk, 0 on the wire: the key (the file's dentry address) under
        /// which a name is given once per walk and referred to by later mappings.
        name_key: u64,
    }

    /// VMA_STAT counters of one mapping, in bytes, as /proc/PID/smaps shows them (in kB).
    struct VmaStatRec = "td_vma_stat", size 104 {
        /// Rss.
        rss: u64,
        /// Pss.
        pss: u64,
        /// Pss_Dirty.
        pss_dirty: u64,
        /// Shared_Clean.
        shared_clean: u64,
        /// Shared_Dirty.
        shared_dirty: u64,
        /// Private_Clean.
        private_clean: u64,
        /// Private_Dirty.
        private_dirty: u64,
        /// Referenced.
        referenced: u64,
        /// Anonymous.
        anonymous: u64,
        /// AnonHugePages.
        anon_huge: u64,
        /// Swap.
        swap: u64,
        /// SwapPss.
        swap_pss: u64,
        /// Locked.
        locked: u64,
    }

    /// SIGNAL group: signal masks (as /proc/PID/status SigPnd, ShdPnd, SigBlk, SigIgn,
    /// SigCgt; bit N-1 is signal N).
    struct SignalRec = "td_signal", size 40 {
        /// SigPnd: pending for this thread.
        pending: u64,
        /// ShdPnd: pending for the thread group.
        shared_pending: u64,
        /// SigBlk: blocked.
        blocked: u64,
        /// SigIgn: ignored (SIG_IGN).
        ignored: u64,
        /// SigCgt: caught (a handler).
        caught: u64,
    }

    /// NS group, fixed part: the task's namespaces, each as the inode number readlink
    /// /proc/PID/ns/NAME shows (`net:[4026531840]`); 0 where the link does not exist (a kernel
    /// without that namespace type, or a task past exit_task_namespaces(): only `pid` and
    /// `user` outlive it). Followed by `levels` [`NsIdsRec`]: the task's ids in each pid
    /// namespace from the reader's down to the task's own (status NSpid, NStgid, NSpgid, NSsid).
    struct NsRec = "td_ns", size 48 {
        /// pid: the namespace the task's pid belongs to.
        pid: u32,
        /// pid_for_children.
        pid_for_children: u32,
        /// mnt.
        mnt: u32,
        /// net.
        net: u32,
        /// ipc.
        ipc: u32,
        /// uts.
        uts: u32,
        /// user.
        user: u32,
        /// cgroup.
        cgroup: u32,
        /// time.
        time: u32,
        /// time_for_children.
        time_for_children: u32,
        /// [`crate::NS_F_HIDDEN`]: the links are withheld (all 0), as the reader may not
        /// ptrace-read the task (readlink fails with EACCES); the ids are not guarded.
        flags: u32,
        /// How many [`NsIdsRec`] follow.
        levels: u32,
    }

    /// NS group: the task's ids in one pid namespace (one column of status NSpid, NStgid,
    /// NSpgid, NSsid); 0 where an id has no number there.
    struct NsIdsRec = "td_ns_ids", size 16 {
        /// NSpid.
        pid: u32,
        /// NStgid.
        tgid: u32,
        /// NSpgid.
        pgid: u32,
        /// NSsid.
        sid: u32,
    }

    /// FILES group, fixed part: the number of open descriptors (the entries of /proc/PID/fd)
    /// and how many [`LimitRec`]s follow: the resource limits of /proc/PID/limits, in its
    /// order (RLIMIT_CPU, FSIZE, DATA, STACK, CORE, RSS, NPROC, NOFILE, MEMLOCK, AS, LOCKS,
    /// SIGPENDING, MSGQUEUE, NICE, RTPRIO, RTTIME).
    struct FilesRec = "td_files", size 16 {
        /// Open descriptors; 0 with [`crate::FILES_F_FDS_HIDDEN`].
        fds: u32,
        /// [`crate::FILES_F_FDS_HIDDEN`]: the count is withheld, as /proc/PID/fd cannot be
        /// listed by a reader that may not ptrace-read the task. The limits are not guarded.
        flags: u32,
        /// How many [`LimitRec`]s follow (16 on every kernel taskdiag knows).
        nlimits: u32,
        /// Zero.
        reserved: u32,
    }

    /// FILES group: one resource limit, soft and hard, in the unit /proc/PID/limits shows
    /// (`u64::MAX`: unlimited).
    struct LimitRec = "td_limit", size 16 {
        /// Soft limit (rlim_cur).
        soft: u64,
        /// Hard limit (rlim_max).
        hard: u64,
    }

    /// CGROUP group: the task's cgroup v2 id, followed in the attribute by the text of
    /// /proc/PID/cgroup as the reader's cgroup namespace shows it (every hierarchy, one
    /// `ID:CONTROLLERS:PATH` line each, the unified one as `0::PATH`).
    struct CgroupRec = "td_cgroup", size 16 {
        /// The id of the task's cgroup in the unified (v2) hierarchy, as
        /// bpf_get_current_cgroup_id() or name_to_handle_at() of its directory give it (the
        /// directory's inode number); 0 for a removed cgroup, and from /proc when unknown (no
        /// cgroup2 mount to find it under).
        id: u64,
        /// Zero.
        flags: u32,
        /// Zero.
        reserved: u32,
    }

    /// IO group: the task's I/O counters as /proc/PID/io prints them (the thread group's
    /// totals for a process, the thread's own for a thread).
    struct IoRec = "td_io", size 56 {
        /// Bytes passed to read-like system calls (rchar).
        rchar: u64,
        /// Bytes passed to write-like system calls (wchar).
        wchar: u64,
        /// Read-like system calls (syscr).
        syscr: u64,
        /// Write-like system calls (syscw).
        syscw: u64,
        /// Bytes the task caused to be fetched from storage (read_bytes).
        read_bytes: u64,
        /// Bytes the task caused to be sent to storage (write_bytes).
        write_bytes: u64,
        /// Written bytes whose writeback the task cancelled (cancelled_write_bytes).
        cancelled_write_bytes: u64,
    }

    /// PATHS group: the lengths of the three paths that follow in the attribute, in this
    /// order: exe, cwd, root, as readlink of /proc/PID/{exe,cwd,root} returns them (with
    /// " (deleted)" where the file is gone), relative to the reader's root. A path that
    /// readlink would not return has length 0 and its errno.
    struct PathsRec = "td_paths", size 16 {
        /// Length of the executable's path.
        exe_len: u16,
        /// Length of the working directory's path.
        cwd_len: u16,
        /// Length of the root directory's path.
        root_len: u16,
        /// Zero.
        reserved: u16,
        /// Why there is no executable path (ENOENT: a kernel thread or a zombie; EACCES:
        /// the reader may not ptrace-read the task), else 0.
        exe_errno: u8,
        /// Why there is no working directory, else 0.
        cwd_errno: u8,
        /// Why there is no root directory, else 0.
        root_errno: u8,
        /// Zero.
        reserved2: u8,
        /// Zero.
        reserved3: u32,
    }

    /// SCHED group: what /proc/PID's small scheduling and accounting files say, followed in the
    /// attribute by four texts of the lengths given, in this order: wchan (as /proc/PID/wchan:
    /// the function the task sleeps in, `0` when it runs or the reader may not ptrace-read
    /// it), syscall (as /proc/PID/syscall: `NR ARGS... SP PC`, `-1 SP PC`, or `running`; empty
    /// with [`crate::SCHED_F_SYSCALL_HIDDEN`]), and status's Cpus_allowed_list and
    /// Mems_allowed_list (`0-3,8`).
    struct SchedRec = "td_sched", size 40 {
        /// /proc/PID/oom_score.
        oom_score: u32,
        /// /proc/PID/oom_score_adj.
        oom_score_adj: i32,
        /// /proc/PID/loginuid (u32::MAX: unset), as the reader's user namespace maps it.
        loginuid: u32,
        /// /proc/PID/sessionid (u32::MAX: unset).
        sessionid: u32,
        /// The autogroup's id (/proc/PID/autogroup's `/autogroup-ID`); 0 outside one.
        autogroup: u32,
        /// The autogroup's nice value.
        autogroup_nice: i32,
        /// [`crate::SCHED_F_SYSCALL_HIDDEN`], [`crate::SCHED_F_NO_AUTOGROUP`].
        flags: u32,
        /// Length of the wchan text.
        wchan_len: u16,
        /// Length of the syscall text.
        syscall_len: u16,
        /// Length of Cpus_allowed_list.
        cpus_len: u16,
        /// Length of Mems_allowed_list.
        mems_len: u16,
        /// Zero.
        reserved: u32,
    }

    /// SECURITY group: the task's seccomp mode and filters and no_new_privs (status's Seccomp,
    /// Seccomp_filters, NoNewPrivs), followed in the attribute by `label_len` bytes of its
    /// Linux security module label, as /proc/PID/attr/current returns them.
    struct SecurityRec = "td_security", size 16 {
        /// Seccomp mode: 0 disabled, 1 strict, 2 filter.
        seccomp: u32,
        /// Seccomp filters attached (0 where the kernel does not count them, before 5.9).
        seccomp_filters: u32,
        /// NoNewPrivs: 1 if set.
        no_new_privs: u16,
        /// Why there is no label (EINVAL: no security module gives one; EACCES: refused),
        /// else 0.
        label_errno: u16,
        /// Length of the label that follows.
        label_len: u32,
    }

    /// DELAY group: where the task's time went, beyond STAT's CPU times: as /proc/PID/schedstat
    /// (exact time on a CPU, time waiting on a run queue, timeslices), stat field 42 (block
    /// I/O delay in clock ticks), and, with [`crate::DELAY_F_COUNTERS`], the delay-accounting
    /// totals and counts the taskstats interface reports (0 while delay accounting is off:
    /// sysctl kernel.task_delayacct).
    struct DelayRec = "td_delay", size 152 {
        /// Time on a CPU, ns (schedstat's first number).
        run_ns: u64,
        /// Time runnable but waiting for a CPU, ns (schedstat's second).
        wait_ns: u64,
        /// Timeslices run (schedstat's third).
        timeslices: u64,
        /// Block I/O delay, clock ticks (stat field 42, delayacct_blkio_ticks).
        blkio_ticks: u64,
        /// Waiting for block I/O, ns.
        blkio_delay_ns: u64,
        /// Block I/O waits.
        blkio_count: u64,
        /// Waiting for pages to be swapped in, ns.
        swapin_delay_ns: u64,
        /// Swap-in waits.
        swapin_count: u64,
        /// In memory reclaim, ns.
        freepages_delay_ns: u64,
        /// Memory reclaims.
        freepages_count: u64,
        /// Thrashing (refaulting pages of the working set), ns.
        thrashing_delay_ns: u64,
        /// Thrashing waits.
        thrashing_count: u64,
        /// In memory compaction, ns (Linux 5.14+).
        compact_delay_ns: u64,
        /// Compactions.
        compact_count: u64,
        /// Copying pages for write-protect faults, ns (Linux 6.0+).
        wpcopy_delay_ns: u64,
        /// Write-protect copies.
        wpcopy_count: u64,
        /// Interrupted by IRQs, ns (Linux 6.8+).
        irq_delay_ns: u64,
        /// IRQ interruptions.
        irq_count: u64,
        /// [`crate::DELAY_F_COUNTERS`].
        flags: u32,
        /// Zero.
        reserved: u32,
    }

    /// STATM group: memory use in bytes (as /proc/PID/status Vm* and Rss* lines).
    /// The last three are /proc/PID/stat's startcode, endcode and startstack: addresses
    /// /proc shows only to a reader that may ptrace-read the task (1, 1 and 0 to others).
    struct StatmRec = "td_statm", size 136 {
        /// VmSize.
        vm_size: u64,
        /// VmPeak.
        vm_peak: u64,
        /// RssAnon.
        rss_anon: u64,
        /// RssFile.
        rss_file: u64,
        /// RssShmem.
        rss_shmem: u64,
        /// VmHWM.
        rss_peak: u64,
        /// VmSwap.
        swap: u64,
        /// VmExe.
        text: u64,
        /// VmLib.
        lib: u64,
        /// VmData.
        data: u64,
        /// VmStk.
        stack: u64,
        /// VmLck.
        locked: u64,
        /// VmPin.
        pinned: u64,
        /// VmPTE.
        page_tables: u64,
        /// stat field 26, startcode: where the program's text starts.
        code_start: u64,
        /// stat field 27, endcode: where it ends.
        code_end: u64,
        /// stat field 28, startstack: the bottom of the main thread's stack.
        stack_start: u64,
    }

    /// `taskdiag profile`'s count key (not on the wire: the key of the profiler's in-kernel
    /// count map, read by its user space). One per distinct (thread, state, system call,
    /// stacks); its value is the wall-clock nanoseconds the thread was found so (a period per
    /// on-CPU sample; the time off CPU between two walks).
    struct ProfKey = "td_prof_key", size 64 {
        /// Thread id in the profiled pid namespace.
        pid: u32,
        /// Process id (thread-group id) in the profiled pid namespace.
        tgid: u32,
        /// Thread id in the pid namespace of the profiler's /proc (0 if it has none there).
        proc_pid: u32,
        /// Process id there: the /proc/PID whose address space the user stack is in.
        proc_tgid: u32,
        /// A [`crate::prof::ProfState`] value.
        state: u32,
        /// The system call the thread is blocked in (its number), -1 if none or unknown.
        syscall: i32,
        /// [`crate::prof::PROF_F_KTHREAD`] and the like.
        flags: u32,
        /// Reserved; 0.
        reserved: u32,
        /// Id of the kernel stack in the stack map, 0 if none.
        kstack: u64,
        /// Id of the user stack in the stack map, 0 if none.
        ustack: u64,
        /// The thread's name (comm), first 8 bytes.
        comm_lo: u64,
        /// Its last 8 bytes (NUL-padded).
        comm_hi: u64,
    }

    /// The profiler's memory of an off-CPU thread's last walk (its `seen` map, by thread id);
    /// a [`ProfKey`] follows: what the thread was last counted under.
    struct ProfSeenHdr = "td_prof_seen_hdr", size 48 {
        /// The thread's start time (tells a reused thread id).
        start: u64,
        /// Its voluntary + involuntary context switches then: the same number means it has not
        /// run since.
        switches: u64,
        /// Nanoseconds off CPU under the key not yet in the count map (moved there when the key
        /// changes; what is left is added by user space at the end).
        pending: u64,
        /// When it was last walked (CLOCK_BOOTTIME, ns).
        walked: u64,
        /// Its CPU time then (sum_exec_runtime, ns).
        runtime: u64,
        /// Its [`crate::prof::ProfState`] then.
        state: u32,
        /// 1 if it was out of the profile's scope.
        out: u32,
    }

    /// Header of a stack in the profiler's stack map; [`crate::prof::PROF_STACK_DEPTH`]
    /// addresses (u64) follow it, the first `nr` of them used, innermost first.
    struct ProfStackHdr = "td_prof_stack_hdr", size 8 {
        /// Addresses used.
        nr: u32,
        /// [`crate::prof::PROF_STACK_TRUNCATED`] and the like.
        flags: u32,
    }

    /// A user stack stored for the first time (the profiler's `fresh` ring buffer), to be
    /// symbolized while its process lives.
    struct ProfFresh = "td_prof_fresh", size 32 {
        /// Its id in the stack map.
        id: u64,
        /// Its process's start (the group leader's start_boottime, ns): with `exec_id`, which
        /// process the addresses are of, so a reused pid or an exec is told from the process
        /// whose names are known.
        proc_start: u64,
        /// Its process's exec count (the group leader's self_exec_id).
        exec_id: u64,
        /// Its process, a pid of the profiler's /proc.
        proc_tgid: u32,
        /// Reserved; 0.
        reserved: u32,
    }
}

/// Writes [`c_header`] as `taskdiag_wire.h` in `dir` (a build script's OUT_DIR, which it then
/// passes to clang with `-I`). Panics on failure, as build scripts do.
pub fn write_c_header(dir: &std::path::Path) {
    let path = dir.join("taskdiag_wire.h");
    std::fs::write(&path, c_header()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The C header shared with the BPF programs: constants and every wire struct.
///
/// The struct text is generated from the same definitions as the Rust types, so both sides agree
/// byte for byte; `_Static_assert`s repeat the sizes on the C side.
pub fn c_header() -> String {
    use std::fmt::Write;

    let mut h = String::from(
        "/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */\n\
         /* Generated by taskdiag-proto (crates/proto/src/layout.rs). Do not edit. */\n\
         #ifndef TASKDIAG_WIRE_H\n#define TASKDIAG_WIRE_H\n\n",
    );
    for (name, value) in crate::C_CONSTANTS {
        let _ = writeln!(h, "#define {name} {value}");
    }
    h.push('\n');
    for (cname, size, fields) in ALL_STRUCTS {
        let _ = writeln!(h, "struct {cname} {{");
        for (ctype, field) in fields.iter() {
            let _ = writeln!(h, "\t{ctype} {field};");
        }
        let _ = writeln!(h, "}};");
        let _ = writeln!(
            h,
            "_Static_assert(sizeof(struct {cname}) == {size}, \"struct {cname} size\");\n"
        );
    }
    h.push_str("#endif /* TASKDIAG_WIRE_H */\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_declares_every_struct_with_its_size() {
        let h = c_header();
        for (cname, size, fields) in ALL_STRUCTS {
            assert!(h.contains(&format!("struct {cname} {{")), "{cname}");
            assert!(h.contains(&format!("sizeof(struct {cname}) == {size}")));
            assert!(!fields.is_empty());
        }
        assert!(h.contains("\t__u64 start_time_ns;"));
    }

    #[test]
    fn header_defines_every_shared_constant_once() {
        let h = c_header();
        for (name, value) in crate::C_CONSTANTS {
            let line = format!("#define {name} {value}\n");
            assert_eq!(h.matches(&format!("#define {name} ")).count(), 1, "{name}");
            assert!(h.contains(&line), "{line}");
        }
        // The ones the BPF C once defined by hand.
        for name in [
            "TD_MSG_F_FIXUP",
            "TD_PF_KTHREAD",
            "TD_VM_SHARED",
            "TD_VMA_NAME_REF",
        ] {
            assert!(h.contains(&format!("#define {name} ")), "{name}");
        }
        assert!(h.contains(&format!("#define TD_MSG_F_FIXUP {}\n", crate::MSG_F_FIXUP)));
    }

    #[test]
    fn record_round_trips_through_bytes() {
        let b = BaseRec {
            ppid: 1,
            tpid: 2,
            sid: 3,
            pgid: 4,
            tty_nr: 0x8801,
            task_flags: 0x0040_0100,
            state: 1,
            flags: 2,
            comm_len: 5,
            tpgid: -1,
            start_time_ns: 123_456_789_000,
        };
        let mut v = Vec::new();
        b.write_to(&mut v);
        assert_eq!(v.len(), BaseRec::SIZE);
        assert_eq!(BaseRec::read_from(&v), Some(b));
        assert_eq!(BaseRec::read_from(&v[..BaseRec::SIZE - 1]), None);
    }
}
