//! The procfs backend of taskdiag: /proc read as fast as a correct reader can, into the taskdiag
//! wire format.
//!
//! [`parse`] holds pure parsers (bytes in, fields out); [`reader`] does the file access: it opens
//! only the files the requested groups need, relative to one open /proc directory descriptor,
//! reads each with one `read()` into reused buffers, and spreads large walks over the CPUs while
//! keeping the output in increasing pid order. The wire format itself belongs to
//! `taskdiag-proto`; choosing between this backend and BPF belongs to the `taskdiag` crate.
//!
//! Which files each group needs:
//!
//! | group   | files                   |
//! |---------|-------------------------|
//! | BASE    | stat, status (TracerPid)|
//! | CRED    | status                  |
//! | STAT    | stat, status (ctxt switches) |
//! | STATM   | status                  |
//! | CMDLINE | cmdline (status to tell "no address space" from "empty") |

pub mod maps;
pub mod parse;
pub mod reader;

pub use reader::{ProcReader, ProcfsError};
