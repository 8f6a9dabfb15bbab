//! The procfs backend of taskdiag: /proc read as fast as a correct reader can, into the taskdiag
//! wire format.
//!
//! [`parse`], [`maps`] and [`system`] hold pure parsers (bytes in, fields out) for a task's files,
//! its memory maps and the machine-wide files; the tools and the daemon parse their /proc text
//! with them too, and do only the reading themselves. [`reader`] does the file access for task
//! records: it opens only the files the requested groups need, relative to one open /proc
//! directory descriptor, reads each with one `read()` into reused buffers, and spreads large
//! walks over the CPUs while keeping the output in increasing pid order. The wire format itself
//! belongs to `taskdiag-proto`; choosing between this backend and BPF belongs to the `taskdiag`
//! crate.
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
//! | VMA     | maps (of the thread-group leader) |
//! | VMA_STAT| smaps (of the thread-group leader) |
//! | DELAY   | stat, schedstat; the delay-accounting pairs from [`taskstats`] (netlink) |

pub mod maps;
pub mod parse;
pub mod procmap;
pub mod reader;
mod scan;
pub mod stuck;
pub mod syscalls;
pub mod system;
pub mod taskstats;

pub use reader::{
    clock_ticks, host_tasks, raise_nofile_limit, read_small_file, release_shifts_start_times,
    CpuTime, ProcReader, ProcfsError,
};
