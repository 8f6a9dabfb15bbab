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
pub mod names;
pub mod pgrep;
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
