//! `taskdiag top`: an interactive task monitor (being written; see issue 4).

use std::ffi::OsString;

/// Runs `taskdiag top`; returns the exit status.
pub fn top_main(_args: &[OsString]) -> i32 {
    eprintln!("taskdiag top: not available in this build yet");
    1
}
