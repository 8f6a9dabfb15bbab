//! The BPF backend of taskdiag: eBPF task iterators that write taskdiag messages in the kernel.
//!
//! This crate owns the BPF C programs (`src/bpf/`) and the libbpf glue that loads them once,
//! configures them per request, attaches iterators (with the kernel's tid/pid link parameters for
//! ONE and THREAD, so those never walk every task) and streams what they write. The record
//! layouts, and every constant the C shares with Rust, come from `taskdiag-proto` through a
//! generated C header; turning the stream into output, and filling the groups a kernel cannot
//! provide from /proc, is the `taskdiag` crate's job: this crate reports those cases (see
//! [`DumpReport`] and [`taskdiag_proto::MSG_F_FIXUP`]) and does no /proc I/O itself.
//!
//! Kernel requirements: BTF and `iter/task` (5.8+; before 5.19 the task program's bounded
//! flavour, see [`TaskFlavour`]); CMDLINE and ENVIRON need sleepable iterators with
//! `bpf_copy_from_user_task` (5.18+); memory maps need `iter/task_vma` (5.12+); ONE/THREAD
//! walk only the wanted tasks with task iterator link parameters (6.1+), else filter a full
//! walk. Each program loads or is rejected on its own: [`Features`] says what loaded, and the
//! groups of a rejected program are reported as not done ([`DumpReport::missing_groups`]),
//! never answered with zeros.
//!
//! The work is split by what it touches:
//!
//! * `probe`: what this process and this kernel allow (capabilities, CPUs, link parameters),
//!   facts only;
//! * `load`: opening and loading the skeleton (CO-RE against a reduced copy of the kernel's BTF,
//!   `btf_min`) and attaching iterators;
//! * `pin`: programs loaded once per boot, pinned in bpffs and reused by later privileged
//!   processes; `progs`: the loaded programs, own or pinned, behind one interface;
//! * `dump`: a request turned into the programs' configuration and an iterator run;
//! * `rss`: which rss count this kernel's /proc shows, learned by comparing with it;
//! * `read`: the iterators' output (seq file or ring buffer) cut into whole messages and
//!   accounted, with no libbpf state of its own;
//! * `track`: a separate small object on the scheduler's tracepoints that tells a long-running
//!   reader which tasks may have changed since it last looked (BTF tracepoints, 5.5+).

use std::io;

use taskdiag_proto::msg::{DecodeError, StreamReader};

// Generated code.
#[allow(
    clippy::all,
    clippy::unwrap_used,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    unused_imports,
    dead_code
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/taskdiag.skel.rs"));

    /// The change tracker's skeleton (src/track.rs).
    pub(crate) mod track {
        include!(concat!(env!("OUT_DIR"), "/track.skel.rs"));
    }
}

mod btf_min;
mod dump;
mod load;
mod pin;
mod probe;
mod progs;
mod read;
mod rss;
mod track;

pub use load::{quiet_libbpf, refusals, Refusal, TaskFlavour};
pub use probe::{kernel_btf_present, may_load_bpf};
pub use progs::IterLink;
pub use rss::RssSample;
pub use track::{Changes, Tracker};

/// Errors of the BPF backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BpfError {
    /// The caller may not load BPF programs.
    #[error(
        "loading BPF programs needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, i.e. root): {0}"
    )]
    PermissionDenied(#[source] libbpf_rs::Error),
    /// The kernel has no BTF (`/sys/kernel/btf/vmlinux`), which task iterators need.
    #[error(
        "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing): BPF task iterators need a \
         kernel built with CONFIG_DEBUG_INFO_BTF"
    )]
    NoBtf,
    /// Loading or verifying the programs failed for another reason: the kernel rejected even
    /// the most basic task program, or something no program is to blame for.
    #[error("loading the taskdiag BPF programs{}: {source}",
        program.as_ref().map(|p| format!(" (the kernel rejected '{p}')")).unwrap_or_default())]
    Load {
        /// The program libbpf named as the one that failed, if any.
        program: Option<String>,
        /// The error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// Attaching or creating an iterator failed.
    #[error("attaching the task iterator ({what}): {source}")]
    Attach {
        /// What was attached.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Reading the iterator failed.
    #[error("reading the task iterator: {0}")]
    Read(#[source] io::Error),
    /// ONE, THREAD or CHILDREN named a pid that does not exist (ESRCH).
    #[error("no such process: {pid}")]
    NoSuchTask {
        /// The pid.
        pid: u32,
    },
    /// The BPF program wrote something that is not a valid message (a bug).
    #[error("the BPF program wrote an invalid message: {0}")]
    Decode(#[source] DecodeError),
    /// The consumer of the output failed.
    #[error("writing the output: {0}")]
    Sink(#[source] io::Error),
}

/// What this kernel lets the programs do: what loaded, as the kernel decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Which flavour of the task program loaded (BASE, CRED, STAT, STATM).
    pub task: TaskFlavour,
    /// CMDLINE (sleepable iterator with `bpf_copy_from_user_task`), if the load asked for it.
    pub cmdline: bool,
    /// The memory-map programs (`iter/task_vma`, and the task's root directory), if the load
    /// asked for them.
    pub maps: bool,
    /// The map walk names files with probe reads (`dump_vma_walk`), not bpf_d_path(): the
    /// kernel's verifier refused `dump_vma`, or `TASKDIAG_BPF_DISABLE` named "d_path". A
    /// process one of whose file names the walk cannot write (memfd, SysV shm: names the file
    /// system makes up) gets its maps from /proc.
    pub vma_walk: bool,
    /// Task iterator link parameters (tid/pid), for ONE and THREAD.
    pub task_params: bool,
    /// Output through a BPF ring buffer (a few read()s per dump) rather than the iterator's
    /// seq file (one read() per 32 KiB).
    pub ringbuf: bool,
    /// CO-RE relocations were resolved against a reduced copy of the kernel's BTF (faster to
    /// load; see btf_min.rs) rather than the whole of it.
    pub reduced_btf: bool,
    /// SCHED and WCHAN from the task program: its flavour has bpf_loop() and the scheduler's
    /// text sections were found (`sched_text_bounds`, for wchan), if the load asked for
    /// either.
    pub sched: bool,
    /// `dump_task_both`: ALL_WITH_THREADS in one walk ([`TaskIter::load_with_threads`]).
    pub both: bool,
}

/// The outcome of a dump.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpReport {
    /// Tasks written.
    pub tasks: u64,
    /// Requested groups this kernel could not produce at all (e.g. CMDLINE before 5.18): the
    /// caller must fill them for every task.
    pub missing_groups: u64,
    /// Whether some message carries [`taskdiag_proto::MSG_F_FIXUP`].
    pub fixups: bool,
}

/// A pid namespace, as the kernel names it: the inode number of its `/proc/PID/ns/pid` link
/// and its level (0 for the initial namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PidNs {
    /// Inode number.
    pub inum: u32,
    /// Nesting level.
    pub level: u32,
}

/// For whom a dump is made, when it is not the reading process itself (a server answering a
/// client: taskdiagd). The default is the reader's own view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct View {
    /// Answer in this pid namespace (a descendant of the reader's) instead of the reader's:
    /// ids are numbered there and tasks outside it are skipped.
    pub pidns: Option<PidNs>,
    /// Add the internal ACCESS attribute ([`taskdiag_proto::AccessRec`]) to every message.
    pub access: bool,
    /// With `access`: ACCESS's ids are those of the pid namespace this many levels above the
    /// reader's, the namespace of the /proc mounted where the reader has none of its own
    /// (`unshare --pid` without `--mount-proc`), so records can be completed from that /proc.
    /// 0: the reader's own namespace.
    pub proc_up: u32,
    /// Start times as a reader in a time namespace with this boottime offset sees them in
    /// /proc (ns; time_namespaces(7)): the reader's own offset, or a server's caller's.
    pub boottime_offset_ns: i64,
}

/// The loaded task iterator programs. Load once, dump many times.
pub struct TaskIter {
    view: View,
    progs: progs::Programs,
    /// Groups the programs were loaded for.
    groups: u64,
    features: Features,
    link_all: Option<progs::IterLink>,
    link_all_cmdline: Option<progs::IterLink>,
    /// Cuts the seq file's output into messages; kept between dumps for its buffer.
    reader: StreamReader,
    /// See [`TaskIter::set_cgroup_hierarchies`].
    cgroup: CgroupHierarchies,
    /// See [`TaskIter::set_lsm_labels`].
    lsm_labels: bool,
    /// Tasks the last whole-system walk of processes (0) and of threads (1) wrote, or the
    /// [`TaskIter::expect_tasks`] estimate before the first.
    last_walk: [Option<u64>; 2],
    /// The instance that answers ALL_WITH_THREADS in one walk, loaded at the first such
    /// request where this one has no `dump_task_both` (`Some(None)`: it could not be).
    both: Option<Option<Box<TaskIter>>>,
    /// Whole-system walks expected to write fewer tasks than this read the seq file:
    /// `dump::RING_AT`, or 0 (every walk on the ring) under `TASKDIAG_BPF_RINGBUF_SIZE`, the
    /// tests' small ring.
    ring_at: u64,
}

/// The cgroup hierarchies /proc/PID/cgroup lists ([`TaskIter::set_cgroup_hierarchies`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CgroupHierarchies {
    v1: bool,
    unified: bool,
}

/// A memory-map walk being read ([`TaskIter::vma_walk`]).
pub struct VmaWalk {
    it: std::fs::File,
    _link: progs::IterLink,
    reader: StreamReader,
}
