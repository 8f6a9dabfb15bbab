//! System call names for the numbers /proc/PID/syscall gives (top's SYSCALL field, the
//! profiler's state table): the kernel's x86-64 table (arch/x86/entry/syscalls/syscall_64.tbl, up to 470, `listns`). Other
//! architectures have no table here: their numbers are shown as numbers.
//!
//! A 32-bit task on a 64-bit kernel reports its own (i386) numbers, which the file does not
//! mark; their names here would be wrong, as they would be in any table keyed by the number
//! alone.

/// The name of system call `nr` of this architecture, if known.
pub fn name(nr: i64) -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let n = usize::try_from(nr).ok()?;
        if n < X86_64_LOW.len() {
            return Some(X86_64_LOW[n]);
        }
        n.checked_sub(X86_64_HIGH_FIRST)
            .and_then(|i| X86_64_HIGH.get(i))
            .copied()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = nr;
        None
    }
}

/// x86-64 system calls 0 to 336; 337 to 423 are unused, kept free to align with the other
/// architectures.
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const X86_64_LOW: [&str; 337] = [
    /*   0 */ "read", "write", "open", "close", "stat", "fstat", "lstat", "poll", "lseek", "mmap",
    /*  10 */ "mprotect", "munmap", "brk", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
    /*  16 */ "ioctl", "pread64", "pwrite64", "readv", "writev", "access", "pipe", "select",
    /*  24 */ "sched_yield", "mremap", "msync", "mincore", "madvise", "shmget", "shmat", "shmctl",
    /*  32 */ "dup", "dup2", "pause", "nanosleep", "getitimer", "alarm", "setitimer", "getpid",
    /*  40 */ "sendfile", "socket", "connect", "accept", "sendto", "recvfrom", "sendmsg", "recvmsg",
    /*  48 */ "shutdown", "bind", "listen", "getsockname", "getpeername", "socketpair",
    /*  54 */ "setsockopt", "getsockopt", "clone", "fork", "vfork", "execve", "exit", "wait4",
    /*  62 */ "kill", "uname", "semget", "semop", "semctl", "shmdt", "msgget", "msgsnd", "msgrcv",
    /*  71 */ "msgctl", "fcntl", "flock", "fsync", "fdatasync", "truncate", "ftruncate", "getdents",
    /*  79 */ "getcwd", "chdir", "fchdir", "rename", "mkdir", "rmdir", "creat", "link", "unlink",
    /*  88 */ "symlink", "readlink", "chmod", "fchmod", "chown", "fchown", "lchown", "umask",
    /*  96 */ "gettimeofday", "getrlimit", "getrusage", "sysinfo", "times", "ptrace", "getuid",
    /* 103 */ "syslog", "getgid", "setuid", "setgid", "geteuid", "getegid", "setpgid", "getppid",
    /* 111 */ "getpgrp", "setsid", "setreuid", "setregid", "getgroups", "setgroups", "setresuid",
    /* 118 */ "getresuid", "setresgid", "getresgid", "getpgid", "setfsuid", "setfsgid", "getsid",
    /* 125 */ "capget", "capset", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
    /* 130 */ "rt_sigsuspend", "sigaltstack", "utime", "mknod", "uselib", "personality", "ustat",
    /* 137 */ "statfs", "fstatfs", "sysfs", "getpriority", "setpriority", "sched_setparam",
    /* 143 */ "sched_getparam", "sched_setscheduler", "sched_getscheduler",
    /* 146 */ "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "mlock",
    /* 150 */ "munlock", "mlockall", "munlockall", "vhangup", "modify_ldt", "pivot_root", "_sysctl",
    /* 157 */ "prctl", "arch_prctl", "adjtimex", "setrlimit", "chroot", "sync", "acct",
    /* 164 */ "settimeofday", "mount", "umount2", "swapon", "swapoff", "reboot", "sethostname",
    /* 171 */ "setdomainname", "iopl", "ioperm", "create_module", "init_module", "delete_module",
    /* 177 */ "get_kernel_syms", "query_module", "quotactl", "nfsservctl", "getpmsg", "putpmsg",
    /* 183 */ "afs_syscall", "tuxcall", "security", "gettid", "readahead", "setxattr", "lsetxattr",
    /* 190 */ "fsetxattr", "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr",
    /* 196 */ "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "tkill", "time", "futex",
    /* 203 */ "sched_setaffinity", "sched_getaffinity", "set_thread_area", "io_setup", "io_destroy",
    /* 208 */ "io_getevents", "io_submit", "io_cancel", "get_thread_area", "lookup_dcookie",
    /* 213 */ "epoll_create", "epoll_ctl_old", "epoll_wait_old", "remap_file_pages", "getdents64",
    /* 218 */ "set_tid_address", "restart_syscall", "semtimedop", "fadvise64", "timer_create",
    /* 223 */ "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete", "clock_settime",
    /* 228 */ "clock_gettime", "clock_getres", "clock_nanosleep", "exit_group", "epoll_wait",
    /* 233 */ "epoll_ctl", "tgkill", "utimes", "vserver", "mbind", "set_mempolicy", "get_mempolicy",
    /* 240 */ "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    /* 245 */ "mq_getsetattr", "kexec_load", "waitid", "add_key", "request_key", "keyctl",
    /* 251 */ "ioprio_set", "ioprio_get", "inotify_init", "inotify_add_watch", "inotify_rm_watch",
    /* 256 */ "migrate_pages", "openat", "mkdirat", "mknodat", "fchownat", "futimesat",
    /* 262 */ "newfstatat", "unlinkat", "renameat", "linkat", "symlinkat", "readlinkat", "fchmodat",
    /* 269 */ "faccessat", "pselect6", "ppoll", "unshare", "set_robust_list", "get_robust_list",
    /* 275 */ "splice", "tee", "sync_file_range", "vmsplice", "move_pages", "utimensat",
    /* 281 */ "epoll_pwait", "signalfd", "timerfd_create", "eventfd", "fallocate",
    /* 286 */ "timerfd_settime", "timerfd_gettime", "accept4", "signalfd4", "eventfd2",
    /* 291 */ "epoll_create1", "dup3", "pipe2", "inotify_init1", "preadv", "pwritev",
    /* 297 */ "rt_tgsigqueueinfo", "perf_event_open", "recvmmsg", "fanotify_init", "fanotify_mark",
    /* 302 */ "prlimit64", "name_to_handle_at", "open_by_handle_at", "clock_adjtime", "syncfs",
    /* 307 */ "sendmmsg", "setns", "getcpu", "process_vm_readv", "process_vm_writev", "kcmp",
    /* 313 */ "finit_module", "sched_setattr", "sched_getattr", "renameat2", "seccomp", "getrandom",
    /* 319 */ "memfd_create", "kexec_file_load", "bpf", "execveat", "userfaultfd", "membarrier",
    /* 325 */ "mlock2", "copy_file_range", "preadv2", "pwritev2", "pkey_mprotect", "pkey_alloc",
    /* 331 */ "pkey_free", "statx", "io_pgetevents", "rseq", "uretprobe", "uprobe",
];

/// The number of the first of [`X86_64_HIGH`].
#[cfg(target_arch = "x86_64")]
const X86_64_HIGH_FIRST: usize = 424;

/// x86-64 system calls 424 on, numbered alike on every architecture.
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const X86_64_HIGH: [&str; 47] = [
    /* 424 */ "pidfd_send_signal", "io_uring_setup", "io_uring_enter", "io_uring_register",
    /* 428 */ "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "pidfd_open",
    /* 435 */ "clone3", "close_range", "openat2", "pidfd_getfd", "faccessat2", "process_madvise",
    /* 441 */ "epoll_pwait2", "mount_setattr", "quotactl_fd", "landlock_create_ruleset",
    /* 445 */ "landlock_add_rule", "landlock_restrict_self", "memfd_secret", "process_mrelease",
    /* 449 */ "futex_waitv", "set_mempolicy_home_node", "cachestat", "fchmodat2",
    /* 453 */ "map_shadow_stack", "futex_wake", "futex_wait", "futex_requeue", "statmount",
    /* 458 */ "listmount", "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules", "mseal",
    /* 463 */ "setxattrat", "getxattrat", "listxattrat", "removexattrat", "open_tree_attr",
    /* 468 */ "file_getattr", "file_setattr", "listns",
];

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_c_library_numbers() {
        for (nr, n) in [
            (libc::SYS_read, "read"),
            (libc::SYS_nanosleep, "nanosleep"),
            (libc::SYS_wait4, "wait4"),
            (libc::SYS_futex, "futex"),
            (libc::SYS_restart_syscall, "restart_syscall"),
            (libc::SYS_epoll_wait, "epoll_wait"),
            (libc::SYS_clock_nanosleep, "clock_nanosleep"),
            (libc::SYS_epoll_pwait, "epoll_pwait"),
            (libc::SYS_ppoll, "ppoll"),
            (libc::SYS_accept4, "accept4"),
            (libc::SYS_rseq, "rseq"),
            (libc::SYS_pidfd_send_signal, "pidfd_send_signal"),
            (libc::SYS_io_uring_enter, "io_uring_enter"),
            (libc::SYS_futex_waitv, "futex_waitv"),
            (libc::SYS_set_mempolicy_home_node, "set_mempolicy_home_node"),
            (libc::SYS_fchmodat2, "fchmodat2"),
            (libc::SYS_mseal, "mseal"),
        ] {
            assert_eq!(name(nr), Some(n), "{nr}");
        }
        assert_eq!(name(470), Some("listns"));
        assert_eq!(name(336), Some("uprobe"));
        for unknown in [-1, 337, 423, 471, 1 << 30] {
            assert_eq!(name(unknown), None, "{unknown}");
        }
    }
}
