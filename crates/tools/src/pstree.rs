//! `taskdiag pstree`: psmisc-compatible process trees (being written; see issue 4).

use std::ffi::OsString;

/// Runs `taskdiag pstree`; returns the exit status.
pub fn pstree_main(_args: &[OsString]) -> i32 {
    eprintln!("taskdiag pstree: not available in this build yet");
    1
}
