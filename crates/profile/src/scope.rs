//! What a profile covers, from the command line's terms: the caller's pid namespace, another
//! process's (`--pidns PID`, at any nesting level), a cgroup, a list of processes.
//!
//! Namespaces are named to the programs by inode number. A pid given by the caller is a pid
//! of the caller's namespace, which need not be /proc's (a shell that entered only a pid
//! namespace, `nsenter --pid`, still sees the host's /proc): it is resolved through a pidfd.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::ProfileError;
use crate::sampler::Scope;

/// The inode number of a namespace link.
fn ns_inum(path: &Path) -> Result<u32, ProfileError> {
    let m = fs::metadata(path).map_err(|e| ProfileError::path(path, e))?;
    // Namespace inode numbers are 32-bit (ns_common.inum).
    Ok(m.ino() as u32)
}

/// How many pid-namespace levels above the caller's /proc's namespace is: none, but in a shell
/// that entered a child namespace and kept its parent's /proc. /proc/self/status's NSpid lists
/// the caller's pids from /proc's level down to its own.
fn proc_levels_up() -> Result<u32, ProfileError> {
    const STATUS: &str = "/proc/self/status";
    let status = fs::read_to_string(STATUS).map_err(|e| ProfileError::path(STATUS, e))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map_or(1, |v| v.split_whitespace().count())
        .saturating_sub(1) as u32)
}

/// The caller's pid as /proc knows it (/proc/self), 0 if it cannot tell.
fn self_proc_pid() -> u32 {
    fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// The caller's own pid namespace (its inode number).
fn caller_ns_inum() -> Result<u32, ProfileError> {
    ns_inum(Path::new("/proc/thread-self/ns/pid"))
}

/// Every thread of the caller's pid namespace, shown with its pids (the whole system for a
/// caller in the initial namespace).
pub fn caller() -> Result<Scope, ProfileError> {
    let own = caller_ns_inum()?;
    Ok(Scope {
        ns_inum: own,
        caller_ns_inum: own,
        proc_up: proc_levels_up()?,
        self_proc_pid: self_proc_pid(),
        ..Default::default()
    })
}

/// A pidfd for `pid` of the caller's pid namespace.
fn pidfd(pid: u32) -> Result<OwnedFd, ProfileError> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ESRCH) {
            ProfileError::NoSuchProcess(pid)
        } else {
            ProfileError::path(format!("pid {pid}"), e)
        });
    }
    // SAFETY: a new descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The /proc directory of `pid` (a pid of the caller's namespace): the pid /proc knows it by,
/// from the pidfd's fdinfo (which /proc writes in its own namespace's terms).
fn proc_dir_of(pid: u32) -> Result<PathBuf, ProfileError> {
    let fd = pidfd(pid)?;
    let info_path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let info = fs::read_to_string(&info_path).map_err(|e| ProfileError::path(&info_path, e))?;
    let proc_pid = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|&p| p > 0)
        .ok_or(ProfileError::NoSuchProcess(pid))?;
    Ok(PathBuf::from(format!("/proc/{proc_pid}")))
}

/// Every thread of `pid`'s pid namespace (the one it was born in, at any level), shown with
/// that namespace's pids.
pub fn pidns_of(pid: u32) -> Result<Scope, ProfileError> {
    let dir = proc_dir_of(pid)?;
    Ok(Scope {
        ns_inum: ns_inum(&dir.join("ns/pid"))?,
        caller_ns_inum: caller_ns_inum()?,
        proc_up: proc_levels_up()?,
        self_proc_pid: self_proc_pid(),
        ..Default::default()
    })
}

/// The id of cgroup `path`: a directory of a cgroup2 mount, or a cgroup path as
/// /proc/PID/cgroup shows it (`/system.slice/foo.service`), found on the cgroup2 mount (at
/// /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host).
pub fn cgroup_id(path: &Path) -> Result<u64, ProfileError> {
    use std::os::unix::ffi::OsStrExt;
    let on_mount = path.is_dir() && fs::metadata(path.join("cgroup.procs")).is_ok();
    let full = if on_mount {
        path.to_path_buf()
    } else {
        taskdiag_procfs::reader::cgroup2_dir(path.as_os_str().as_bytes()).ok_or_else(|| {
            ProfileError::path(path, io::Error::other("no cgroup2 mount shows this cgroup"))
        })?
    };
    let m = fs::metadata(&full).map_err(|e| ProfileError::path(&full, e))?;
    if !m.is_dir() {
        return Err(ProfileError::path(
            &full,
            io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    // A cgroup2 directory's inode number is the cgroup's id (kernfs, 5.5+).
    Ok(m.ino())
}

/// Checks that each pid of `pids` names a process of the caller's pid namespace.
pub fn check_pids(pids: &[u32]) -> Result<(), ProfileError> {
    for &p in pids {
        pidfd(p)?;
    }
    Ok(())
}
