//! The tools people run, on top of taskdiag: `ps`, `pstree`, `pgrep`/`pkill` and `top`.
//!
//! Each tool takes one [`snapshot`] of the tasks it needs (one batched dump through the best
//! backend the caller may use: BPF, the daemon, or procfs) and then works on decoded records
//! only; none of them walks /proc per process. What they print follows procps-ng 4.0.2 and
//! psmisc 23.6 byte for byte where the tasks are the same (differential tests in the CLI
//! crate), so scripts written for those tools keep working.
//!
//! This crate owns argument parsing and output of the tools. It leaves the wire format to
//! `taskdiag_proto`, backends to `taskdiag`, and process-wide concerns (`argv[0]` dispatch, the
//! exit status of a broken pipe) to the `taskdiag` binary.

pub mod cnum;
pub mod getopt;
pub mod names;
pub mod pgrep;
pub mod pidof;
pub mod procvals;
pub mod ps;
pub mod pstree;
pub mod signal;
pub mod snapshot;
pub mod text;
pub mod top;

/// Prints `prog: msg` on standard error, as the tools report problems.
pub fn warn(prog: &str, msg: impl std::fmt::Display) {
    eprintln!("{prog}: {msg}");
}

/// C's `strerror` text for an error number, as the C tools print it ("No such process",
/// "Unknown error 999"), without Rust's " (os error N)".
pub fn strerror(errno: i32) -> String {
    let mut buf = [0 as libc::c_char; 256];
    // SAFETY: `buf` is writable for its length; the XSI strerror_r NUL-terminates it.
    let rc = unsafe { libc::strerror_r(errno, buf.as_mut_ptr(), buf.len()) };
    if rc != 0 {
        return format!("Unknown error {errno}");
    }
    // SAFETY: strerror_r succeeded and wrote a NUL-terminated string into `buf`.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    s.to_string_lossy().into_owned()
}
