//! Giving up privileges once the BPF programs are loaded, and confining what is left.
//!
//! Loading and verifying the programs needs CAP_BPF and CAP_PERFMON (or root). Running them
//! needs nothing: creating an iterator from a loaded program, reading it, and writing the
//! programs' configuration through their memory-mapped global data are not privileged
//! operations. So after loading, the daemon optionally switches to an unprivileged user, and
//! then empties every capability set it has (effective, permitted, inheritable, ambient and the
//! bounding set) and sets no_new_privs, so that nothing it executes or is tricked into doing
//! later runs with privilege. This must run while the process has one thread: capability sets
//! are per thread, and every thread started afterwards inherits the empty sets.
//!
//! Around that:
//!
//! * [`close_inherited_fds`] first: nothing the parent left open (a terminal, a file of
//!   root's) stays within reach of a compromised daemon.
//! * [`private_proc`]: an unprivileged daemon could not read its clients' /proc entries where
//!   /proc hides other users' processes (`hidepid=`, or its `gid=` group it is not in), and
//!   would refuse every client. So, while still privileged, it mounts a procfs instance of its
//!   own (each mount is one since Linux 5.8), without hidepid, over /proc in a mount namespace
//!   of its own; the host's mounts are untouched.
//! * [`default_user`]: the daemon switches to a dedicated user unless told otherwise
//!   (`taskdiag`, else `nobody`): one that kept uid 0 without capabilities could still read
//!   /etc/shadow and write root's files if it were compromised.
//! * [`timens_shifts_start_times`]: whether the kernel's /proc shows a client in a time
//!   namespace start times with its offset added (since 5.11), asked of the kernel itself by
//!   a child in a time namespace of its own (CAP_SYS_ADMIN).
//! * [`confine`] last: a seccomp filter that leaves the system calls serving needs and refuses
//!   the rest with EPERM (executing programs, new processes, mounts, ptrace, namespaces,
//!   sockets of any other kind, ...).

use std::ffi::CString;
use std::io;

/// Errors dropping privileges.
#[derive(Debug, thiserror::Error)]
pub enum PrivError {
    /// No such user.
    #[error("user {0:?} does not exist")]
    NoUser(String),
    /// None of the default users exists.
    #[error("neither of the users {} exists (create one, or name another with --user)", DEFAULT_USERS.join(" and "))]
    NoDefaultUser,
    /// The seccomp filter could not be built or installed.
    #[error("installing the system call filter: {0}")]
    Seccomp(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn check(r: libc::c_long, what: &'static str) -> Result<(), PrivError> {
    if r < 0 {
        return Err(PrivError::Sys {
            what,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The user the daemon switches to when `--user` is not given: `taskdiag` if that user exists
/// (a package creates it), else `nobody`.
pub const DEFAULT_USERS: [&str; 2] = ["taskdiag", "nobody"];

/// The uid and gid to switch to: `user` if given (`root` keeps uid 0), else the first of
/// [`DEFAULT_USERS`] that exists; `None` to stay as we are (we are not root, as under
/// systemd's `DynamicUser=`, so there is nothing to switch from, or `--user root`).
pub fn default_user(user: Option<&str>) -> Result<Option<(u32, u32)>, PrivError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    match user {
        Some("root") => Ok(None),
        Some(u) => lookup_user(u).map(Some),
        None => DEFAULT_USERS
            .iter()
            .find_map(|u| lookup_user(u).ok())
            .map(Some)
            .ok_or(PrivError::NoDefaultUser),
    }
}

/// Closes every descriptor above standard error, except systemd's listening socket (fd 3)
/// when `keep` names it.
pub fn close_inherited_fds(keep: Option<i32>) {
    let first = if keep == Some(3) { 4 } else { 3 };
    // SAFETY: close_range on descriptors this process owns and no Rust object holds: it runs
    // first thing in main, before anything is opened (Linux 5.9; on failure, one by one).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) };
    if r != 0 {
        let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        for fd in fds.into_iter().filter(|&fd| fd >= first) {
            // SAFETY: as above; the directory's own descriptor is already closed.
            unsafe { libc::close(fd) };
        }
    }
}

/// Whether the kernel's /proc adds a reader's time namespace boottime offset to the start
/// times it shows (and takes it from /proc/stat's `btime`; one change, Linux 5.11), asked of
/// the kernel: a child enters a new time namespace whose boot time is a day later than ours
/// (`own_offset_ns`, our own namespace's offset, plus a day) and compares /proc/stat's `btime`
/// there with ours. `None` if it cannot tell: no time namespaces, or no privilege to make one.
/// The child allocates nothing (its buffers are made before the fork), so any process may call
/// this.
pub fn timens_shifts_start_times(own_offset_ns: i64) -> Option<bool> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    const DAY: u64 = 86_400;
    let stat = std::fs::read("/proc/stat").ok()?;
    let ours = taskdiag_procfs::system::boot_time(&stat).ok()?;
    let mut buf = vec![0u8; 2 * stat.len() + 65536];
    let secs = own_offset_ns.div_euclid(1_000_000_000) + DAY as i64;
    let nsecs = own_offset_ns.rem_euclid(1_000_000_000);
    let offsets = format!("boottime {secs} {nsecs}");
    // SAFETY: the child makes system calls only (no allocation, no lock another thread of
    // ours could hold) and ends with _exit without returning.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return None;
    }
    if pid == 0 {
        let mut enter = || -> io::Result<u64> {
            // SAFETY: unshare with a flag; the child has one thread.
            if unsafe { libc::unshare(libc::CLONE_NEWTIME) } != 0 {
                return Err(io::Error::last_os_error());
            }
            std::fs::write("/proc/self/timens_offsets", &offsets)?;
            let ns = std::fs::File::open("/proc/self/ns/time_for_children")?;
            // SAFETY: setns with a namespace descriptor we hold; the child has one thread.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWTIME) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut f = std::fs::File::open("/proc/stat")?;
            let mut len = 0;
            while len < buf.len() {
                match f.read(&mut buf[len..])? {
                    0 => break,
                    n => len += n,
                }
            }
            taskdiag_procfs::system::boot_time(&buf[..len])
                .map_err(|_| io::ErrorKind::InvalidData.into())
        };
        let code = match enter() {
            Ok(theirs) if ours.abs_diff(theirs) <= 1 => 1,
            Ok(theirs) if ours.abs_diff(theirs + DAY) <= 1 => 0,
            _ => 2,
        };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked, into a local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Some(true),
        Some(1) => Some(false),
        _ => None,
    }
}

/// Mounts a procfs instance of the daemon's own, without hidepid, over /proc in a private
/// mount namespace (see the module doc). Returns false, changing nothing, without the
/// privilege to (CAP_SYS_ADMIN): the daemon then serves through the host's /proc, and
/// refuses clients it cannot see there. Must run while the process has one thread (a mount
/// namespace is per thread until then) and before anything opens /proc for later use.
pub fn private_proc() -> Result<bool, PrivError> {
    // SAFETY: unshare with a flag; affects only this (single-threaded) process.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EPERM) {
            return Ok(false);
        }
        return Err(PrivError::Sys {
            what: "unshare(CLONE_NEWNS)",
            source: e,
        });
    }
    // SAFETY: mount(2) with valid NUL-terminated strings (or NULL where allowed); in our own
    // mount namespace: nothing propagates back to the host's (MS_PRIVATE first).
    unsafe {
        check(
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) as _,
            "making the mount namespace private",
        )?;
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"hidepid=0".as_ptr().cast(),
        ) != 0
        {
            let e = io::Error::last_os_error();
            // A system call filter of our service manager's may allow the one and not the
            // other: then /proc stays the host's, as without the privilege.
            if e.raw_os_error() == Some(libc::EPERM) {
                return Ok(false);
            }
            return Err(PrivError::Sys {
                what: "mounting a procfs instance of our own on /proc",
                source: e,
            });
        }
    }
    Ok(true)
}

/// The uid and gid of `user`.
pub fn lookup_user(user: &str) -> Result<(u32, u32), PrivError> {
    let name = CString::new(user).map_err(|_| PrivError::NoUser(user.into()))?;
    // SAFETY: getpwnam returns NULL or a pointer to static storage valid until the next call;
    // the daemon calls it once, before starting threads, and copies the fields out at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(PrivError::NoUser(user.into()));
    }
    // SAFETY: non-NULL: a valid passwd record.
    Ok(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// Switches to `user` if given, then drops every capability and sets no_new_privs.
pub fn drop_privileges(user: Option<(u32, u32)>) -> Result<(), PrivError> {
    // The bounding set first: dropping from it needs CAP_SETPCAP, which goes next.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability ends the loop.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            // EPERM: we never had CAP_SETPCAP (not started as root); the bounding set is
            // already what our parent allowed, and the permitted set is emptied below.
            if e.raw_os_error() == Some(libc::EPERM) {
                break;
            }
            return Err(PrivError::Sys {
                what: "prctl(PR_CAPBSET_DROP)",
                source: e,
            });
        }
    }
    if let Some((uid, gid)) = user {
        // SAFETY: plain system calls with integer arguments (setgroups with an empty list).
        unsafe {
            check(libc::setgroups(0, std::ptr::null()) as _, "setgroups")?;
            check(libc::setresgid(gid, gid, gid) as _, "setresgid")?;
            check(libc::setresuid(uid, uid, uid) as _, "setresuid")?;
        }
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let d = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset with a version-3 header and two data words, as the kernel expects.
    check(
        unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) },
        "capset",
    )?;
    // SAFETY: prctl with integer arguments.
    unsafe {
        check(
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            ) as _,
            "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
        )?;
        check(
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as _,
            "prctl(PR_SET_NO_NEW_PRIVS)",
        )?;
    }
    Ok(())
}

/// The system calls serving needs, once the programs are loaded, the socket is bound and the
/// daemon has detached: reading iterators and /proc, memory, threads, the sockets it has,
/// timers and signals, and `bpf` (links and iterators from the programs it loaded; with no
/// capability left, the kernel allows nothing more). `clone` (threads only) and `prctl`
/// (thread names only) are checked further in [`confine`].
const SERVING_SYSCALLS: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_openat,
    // /proc/PID/ns/* links (NS of a task the iterator cannot show, read from /proc).
    libc::SYS_readlinkat,
    libc::SYS_close,
    libc::SYS_lseek,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_getdents64,
    libc::SYS_fcntl,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_getrandom,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_tgkill,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    // SCHED's oom_score divides by RAM + swap, which sysinfo tells, once a walk.
    libc::SYS_sysinfo,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_eventfd2,
    libc::SYS_pipe2,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_shutdown,
    libc::SYS_getsockopt,
    libc::SYS_setsockopt,
    libc::SYS_pidfd_open,
    libc::SYS_bpf,
];

/// Confines the daemon to `SERVING_SYSCALLS`: anything else fails with EPERM (a daemon
/// that errs on a call it should make answers with an error, it does not die). Threads may be
/// created but not processes, and no program executed. Needs no_new_privs (set by
/// [`drop_privileges`]); every thread started afterwards inherits the filter, so it runs after
/// `detach` (a fork) and before the first thread.
pub fn confine() -> Result<(), PrivError> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;
    fn err(e: impl std::fmt::Display) -> PrivError {
        PrivError::Seccomp(e.to_string())
    }
    let arch: TargetArch = std::env::consts::ARCH.try_into().map_err(err)?;
    let arg0 = |op, v: u64| -> Result<SeccompRule, PrivError> {
        SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            op,
            v,
        )
        .map_err(err)?])
        .map_err(err)
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        SERVING_SYSCALLS.iter().map(|&n| (n, Vec::new())).collect();
    // Answered by the clone3 filter below (when two filters refuse a call, the later one's
    // errno is returned: this one must let it through).
    rules.insert(libc::SYS_clone3, Vec::new());
    let thread = libc::CLONE_THREAD as u64;
    rules.insert(
        libc::SYS_clone,
        vec![arg0(SeccompCmpOp::MaskedEq(thread), thread)?],
    );
    rules.insert(
        libc::SYS_prctl,
        vec![
            arg0(SeccompCmpOp::Eq, libc::PR_SET_NAME as u64)?,
            arg0(SeccompCmpOp::Eq, libc::PR_GET_NAME as u64)?,
        ],
    );
    let serving = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .map_err(err)?;
    // clone3 passes its flags in memory that a filter cannot read: ENOSYS makes the C library
    // fall back to clone, whose flags it can. (Of two filters the stricter answer wins.)
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(err)?;
    // The serving filter last: it refuses installing filters.
    for f in [clone3, serving] {
        let prog: BpfProgram = f.try_into().map_err(err)?;
        seccompiler::apply_filter(&prog).map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's answer, as root (which the tests run as, in the initial time namespace):
    /// its /proc shifts start times since 5.11, where the change was made.
    #[test]
    fn the_kernel_says_whether_it_shifts_start_times() {
        let since = taskdiag_test_support::tasks::kernel_at_least(5, 11);
        assert_eq!(timens_shifts_start_times(0), Some(since));
    }

    /// Runs [`confined_child`] in a process of its own (this test binary again, that test
    /// alone) and reads what the confined process could do from its exit code. Not a fork of
    /// the harness: a forked copy of a process whose other threads hold locks (a test
    /// panicking, one printing) can wait on them forever, and it holds a copy of every other
    /// test's descriptors while it lives (a listener another test closes stays live).
    #[test]
    fn a_confined_process_serves_but_cannot_execute_fork_or_mount() {
        let exe = std::env::current_exe().expect("the running test executable");
        let out = taskdiag_test_support::process::output_within(
            std::process::Command::new(exe)
                .args(["--exact", "privs::tests::confined_child", "--ignored"])
                .args(["--nocapture", "--test-threads=1"])
                .env(CONFINED_CHILD, "1"),
            std::time::Duration::from_secs(60),
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "the confined process ended with {:?} (see the exit codes in confined_child): {}",
            out.status,
            taskdiag_test_support::process::stderr(&out)
        );
    }

    const CONFINED_CHILD: &str = "TASKDIAGD_TEST_CONFINED_CHILD";

    /// The confined process of the test above (run by it; a no-op otherwise): confines
    /// itself and ends with an exit code saying the first thing it could do that it should
    /// not, or could not do that it should, 0 if none.
    #[test]
    #[ignore = "a helper: run by a_confined_process_serves_but_cannot_execute_fork_or_mount"]
    fn confined_child() {
        if std::env::var_os(CONFINED_CHILD).is_none() {
            return;
        }
        // SAFETY: plain system calls; the process ends here with _exit, as its test expects.
        unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            if let Err(e) = confine() {
                eprintln!("{e}");
                libc::_exit(10);
            }
            // Threads still start (clone3 falls back to clone with CLONE_THREAD).
            let t = std::thread::spawn(|| 7).join();
            if t.ok() != Some(7) {
                libc::_exit(11);
            }
            // /proc is still read.
            if std::fs::read_to_string("/proc/self/stat").is_err() {
                libc::_exit(12);
            }
            // A process cannot be made, a program not executed, nothing mounted.
            if libc::fork() >= 0 {
                libc::_exit(13);
            }
            let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
            libc::execv(c"/bin/true".as_ptr(), argv.as_ptr());
            if *libc::__errno_location() != libc::EPERM {
                libc::_exit(14);
            }
            if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) >= 0 {
                libc::_exit(15);
            }
            libc::_exit(0);
        }
    }
}
