//! taskdiag: batched, binary process information on stock Linux kernels.
//!
//! A [`Request`] names a set of tasks (a [`Strategy`]) and attribute groups (show flags); a
//! [`Dumper`] answers with a stream in the taskdiag wire format (see `taskdiag_proto`): START,
//! one TASK message per task, DONE. This crate chooses the backend and hides the difference:
//!
//! * [`BackendKind::Bpf`]: eBPF task iterators (`taskdiag_bpf`), for callers that may load BPF.
//! * [`BackendKind::Daemon`]: taskdiagd over its Unix socket ([`client`]), for callers that may
//!   not, with what their /proc would show them.
//! * [`BackendKind::Procfs`]: the /proc reader (`taskdiag_procfs`), for everyone else.
//! * [`BackendKind::Auto`]: the fastest way to the same answer: BPF programs already loaded
//!   and pinned by an earlier process, else the daemon when its socket answers, else procfs on
//!   a host with few tasks ([`AUTO_PROCFS_BELOW`]), else BPF loaded now (and pinned), else
//!   procfs.
//!
//! A server answering for someone else (the daemon) calls [`Dumper::dump_for`] with a
//! [`view::Viewer`]: the stream is then numbered in the caller's pid namespace and filtered and
//! rewritten by procfs's permission rules for that caller.
//!
//! Whatever the BPF programs cannot put in a message (a group this kernel lacks, a record too big
//! for the iterator's buffer) is filled here from /proc, per group and per task, after checking
//! that the /proc entry is still the same task (same start time). Callers never learn where a
//! value came from, and never get zeros in place of a value.
//!
//! Decoding a stream is `taskdiag_proto::task::StreamDecoder`'s job; rendering is the CLI's.
//!
//! The crate's modules: `backend` (which backend, by name), `dumper` (the [`Dumper`] facade:
//! opening a backend and answering requests with the START/DONE envelope), `complete`
//! (finishing what the BPF programs wrote: groups and hidden tasks read from /proc, memory maps
//! from the map walk), `calibrate` (kernel rules learned by comparing BPF with /proc once per
//! load), `filter` and [`view`] (a server's caller shown what its /proc would show
//! it), [`client`] (the daemon backend) and `vma_walk` (the BPF map walk's reader).

use std::io;
use std::path::PathBuf;

mod backend;
mod calibrate;
pub mod client;
mod complete;
mod dumper;
#[cfg(test)]
mod fake_proc;
mod filter;
pub mod view;
mod vma_walk;

pub use backend::{BackendKind, UnknownBackend};
pub use complete::SHOW_SERVER_DEFERS;
pub use dumper::{Dumper, AUTO_PROCFS_BELOW};
use taskdiag_bpf::BpfError;
pub use taskdiag_bpf::{may_load_bpf, Changes, PidNs, Tracker};
pub use taskdiag_procfs::CpuTime;
use taskdiag_procfs::ProcfsError;
pub use taskdiag_proto as proto;
use taskdiag_proto::msg::DecodeError;
pub use taskdiag_proto::{BackendId, Group, Request, Strategy};

/// Errors of a dump.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The BPF backend failed.
    #[error(transparent)]
    Bpf(#[from] BpfError),
    /// The procfs backend failed.
    #[error(transparent)]
    Procfs(#[from] ProcfsError),
    /// The request is invalid.
    #[error("invalid request: {0}")]
    Request(#[from] taskdiag_proto::msg::RequestError),
    /// ONE, THREAD or CHILDREN named a pid that does not exist (the stream ends with -ESRCH).
    #[error("no such process: {pid}")]
    NoSuchTask {
        /// The pid.
        pid: u32,
    },
    /// A backend produced an invalid record (a bug).
    #[error("internal error: invalid record: {0}")]
    Internal(#[from] DecodeError),
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Sink(#[source] io::Error),
    /// Talking to taskdiagd failed.
    #[error("taskdiagd at {}: {source}", socket.display())]
    Daemon {
        /// The daemon's socket.
        socket: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// taskdiagd is busy (DONE `-EBUSY`): no worker it may use came free for the request at
    /// once. The caller may read its own /proc instead ([`BackendKind::Auto`] does).
    #[error("taskdiagd at {}: {message}", socket.display())]
    DaemonBusy {
        /// The daemon's socket.
        socket: PathBuf,
        /// The daemon's explanation.
        message: String,
    },
    /// taskdiagd did not answer within the client's own deadline ([`client::TIMEOUT_ENV`]):
    /// it did not accept the connection, take the request, or send the next part of the
    /// answer. [`BackendKind::Auto`] then reads /proc, if nothing of the answer was passed on.
    #[error("taskdiagd at {} {what}", socket.display())]
    DaemonTimeout {
        /// The daemon's socket.
        socket: PathBuf,
        /// What did not happen, and for how long, e.g. "accepted the connection but sent
        /// nothing for 5 s (...)".
        what: String,
        /// How long the client waited.
        waited: std::time::Duration,
    },
    /// taskdiagd refused the request.
    #[error("taskdiagd at {}: {message}", socket.display())]
    Refused {
        /// The daemon's socket.
        socket: PathBuf,
        /// Positive errno.
        errno: i32,
        /// The daemon's explanation.
        message: String,
    },
    /// The process serving taskdiagd's socket is not one a client may believe (root, or the
    /// user `$TASKDIAG_DAEMON_USER` names; see [`client`]). Nothing was sent to it.
    #[error(
        "taskdiagd at {}: refusing a server run by uid {uid}{}: a taskdiag daemon must run as \
         {expected}",
        socket.display(),
        client::owner_detail(user.as_deref(), *pid)
    )]
    UntrustedDaemon {
        /// The socket.
        socket: PathBuf,
        /// The uid that listened on it, as this process's user namespace shows it.
        uid: u32,
        /// That uid's user name, if it has one.
        user: Option<String>,
        /// The process that listened on it; 0 if it is not in this pid namespace.
        pid: u32,
        /// Who may serve, e.g. "root (or as the user named by $TASKDIAG_DAEMON_USER)".
        expected: String,
    },
    /// The request cannot be answered by this backend (say, for another caller without BPF).
    #[error("{0}")]
    Unsupported(&'static str),
}
