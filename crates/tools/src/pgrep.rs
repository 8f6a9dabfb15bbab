//! `taskdiag pgrep` and `pkill`: procps-compatible process lookup and signalling (being
//! written; see issue 4).

use std::ffi::OsString;

/// Runs `taskdiag pgrep`; returns the exit status.
pub fn pgrep_main(_args: &[OsString]) -> i32 {
    eprintln!("taskdiag pgrep: not available in this build yet");
    2
}

/// Runs `taskdiag pkill`; returns the exit status.
pub fn pkill_main(_args: &[OsString]) -> i32 {
    eprintln!("taskdiag pkill: not available in this build yet");
    2
}
