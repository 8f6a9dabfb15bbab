//! Giving up privileges once the BPF programs are loaded.
//!
//! Loading and verifying the programs needs CAP_BPF and CAP_PERFMON (or root). Running them
//! needs nothing: creating an iterator from a loaded program, reading it, and writing the
//! programs' configuration through their memory-mapped global data are not privileged
//! operations. So after loading, the daemon optionally switches to an unprivileged user, and
//! then empties every capability set it has (effective, permitted, inheritable, ambient and the
//! bounding set) and sets no_new_privs, so that nothing it executes or is tricked into doing
//! later runs with privilege. This must run while the process has one thread: capability sets
//! are per thread, and every thread started afterwards inherits the empty sets.

use std::ffi::CString;
use std::io;

/// Errors dropping privileges.
#[derive(Debug, thiserror::Error)]
pub enum PrivError {
    /// No such user.
    #[error("user {0:?} does not exist")]
    NoUser(String),
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

/// The effective capability set of this thread, from /proc/thread-self/status.
pub fn effective_caps() -> io::Result<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| io::Error::other("no CapEff line"))
}
