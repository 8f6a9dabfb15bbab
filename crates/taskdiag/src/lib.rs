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
//! * [`BackendKind::Auto`]: BPF when it loads, else the daemon when its socket answers, else
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

use std::io;
use std::path::{Path, PathBuf};

pub mod client;
pub mod view;
mod vma_walk;

use client::DaemonClient;
pub use taskdiag_bpf::PidNs;
use taskdiag_bpf::{BpfError, TaskIter, MSG_F_FIXUP};
use taskdiag_procfs::{ProcReader, ProcfsError};
pub use taskdiag_proto as proto;
use taskdiag_proto::msg::{write_done, write_start, DecodeError, Messages, TaskWriter};
use taskdiag_proto::task::{Task, TaskAssembler};
pub use taskdiag_proto::{BackendId, Group, Request, Strategy};
use taskdiag_proto::{
    Done, MsgType, Start, ATTR_ACCESS, ERRNO_NEEDS_PROCFS, MSG_F_CONTINUED, SHOW_MAPS, VERSION,
};
use view::Viewer;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// BPF if it loads, else procfs.
    Auto,
    /// eBPF task iterators; fails without the privilege to load them.
    Bpf,
    /// taskdiagd, over its Unix socket ([`client::socket_path`]).
    Daemon,
    /// /proc.
    Procfs,
}

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

enum Backend {
    Bpf(Box<TaskIter>),
    Procfs(ProcReader),
    Daemon(DaemonClient),
}

// A server keeps a pool of loaded dumpers and lends them to its connection threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Dumper>();
};

/// Answers requests with one backend, loaded once. `Send`: it may move between threads, and
/// serves one request at a time (`&mut self`).
pub struct Dumper {
    backend: Backend,
    /// /proc, for completing BPF records; `None` when it belongs to another pid namespace.
    procfs: Option<ProcReader>,
    /// Why BPF was not used under `Auto`, if it was not.
    bpf_unavailable: Option<String>,
}

impl Dumper {
    /// Opens the backend, ready for any request.
    pub fn open(kind: BackendKind) -> Result<Self, Error> {
        Self::open_for(kind, taskdiag_proto::SHOW_SUPPORTED)
    }

    /// Opens the backend, prepared for requests of `show_flags` (other requests still work,
    /// perhaps more slowly). With BPF this loads only the programs those groups need.
    pub fn open_for(kind: BackendKind, show_flags: u64) -> Result<Self, Error> {
        Self::open_with(kind, show_flags, None)
    }

    /// Like [`Dumper::open_for`], with the daemon's socket given explicitly (a `--socket`
    /// option); `None` means [`client::socket_path`]'s default.
    pub fn open_with(
        kind: BackendKind,
        show_flags: u64,
        socket: Option<&Path>,
    ) -> Result<Self, Error> {
        let daemon = || DaemonClient::connect(&client::socket_path(socket));
        match kind {
            BackendKind::Daemon => Ok(Dumper {
                backend: Backend::Daemon(daemon()?),
                procfs: None,
                bpf_unavailable: None,
            }),
            BackendKind::Procfs => Ok(Dumper {
                backend: Backend::Procfs(ProcReader::open()?),
                procfs: None,
                bpf_unavailable: None,
            }),
            BackendKind::Bpf => Ok(Dumper {
                backend: Backend::Bpf(Box::new(TaskIter::load_for(show_flags)?)),
                procfs: ProcReader::open().ok(),
                bpf_unavailable: None,
            }),
            BackendKind::Auto => match TaskIter::load_for(show_flags) {
                Ok(it) => Ok(Dumper {
                    backend: Backend::Bpf(Box::new(it)),
                    procfs: ProcReader::open().ok(),
                    bpf_unavailable: None,
                }),
                Err(e) => Ok(Dumper {
                    backend: match daemon() {
                        Ok(c) => Backend::Daemon(c),
                        Err(_) => Backend::Procfs(ProcReader::open()?),
                    },
                    procfs: None,
                    bpf_unavailable: Some(e.to_string()),
                }),
            },
        }
    }

    /// The backend in use.
    pub fn backend(&self) -> BackendId {
        match self.backend {
            Backend::Bpf(_) => BackendId::Bpf,
            Backend::Procfs(_) => BackendId::Procfs,
            Backend::Daemon(_) => BackendId::Daemon,
        }
    }

    /// Why `Auto` did not choose BPF, if it did not.
    pub fn bpf_unavailable(&self) -> Option<&str> {
        self.bpf_unavailable.as_deref()
    }

    /// Answers `req` with a complete stream (START, tasks, DONE) written to `out` in chunks of
    /// whole messages. Returns the number of tasks. For a missing pid the stream ends with
    /// DONE(-ESRCH) and the result is [`Error::NoSuchTask`].
    pub fn dump(
        &mut self,
        req: &Request,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        let req = Request::parse(&req.to_bytes())?;
        if let Backend::Daemon(c) = &mut self.backend {
            return c.dump(&req, out);
        }
        self.answer(&req, None, out)
    }

    /// Answers `req` for another process, `viewer`: numbered in its pid namespace and showing
    /// exactly what its /proc would show it (see [`view`]). The START message names the daemon
    /// as the backend. Needs the BPF backend when the viewer's view differs from ours.
    pub fn dump_for(
        &mut self,
        req: &Request,
        viewer: &Viewer,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        let req = Request::parse(&req.to_bytes())?;
        self.answer(&req, Some(viewer), out)
    }

    fn answer(
        &mut self,
        req: &Request,
        viewer: Option<&Viewer>,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        let mut head = Vec::with_capacity(64);
        let backend = if viewer.is_some() {
            BackendId::Daemon
        } else {
            self.backend()
        };
        write_start(
            &mut head,
            &Start {
                version: VERSION,
                backend: backend as u16,
                strategy: req.strategy,
                show_flags: req.show_flags,
                pid: req.pid,
                reserved: 0,
            },
        );
        out(&head).map_err(Error::Sink)?;
        // Memory maps are checked per task (ptrace-read), so they always go through the view.
        let maps = req.show_flags & SHOW_MAPS != 0;
        let res = match viewer.filter(|v| v.rewrites() || maps) {
            // No task has pid 0, in any backend or namespace.
            _ if req.pid == 0 && req.strategy().is_some_and(Strategy::takes_pid) => {
                Err(Error::NoSuchTask { pid: 0 })
            }
            None => self.tasks(req, None, out),
            Some(v) => self.tasks_for(req, v, out),
        };
        let res = match res {
            Err(Error::Procfs(ProcfsError::NoSuchTask { pid })) => Err(Error::NoSuchTask { pid }),
            Err(Error::Procfs(ProcfsError::Sink(e))) => Err(Error::Sink(e)),
            r => r,
        };
        let (error, tasks) = match &res {
            Ok(n) => (0, *n),
            Err(Error::NoSuchTask { .. }) => (-libc::ESRCH, 0),
            Err(Error::Sink(_)) => return res,
            Err(_) => (-libc::EIO, 0),
        };
        let mut tail = Vec::with_capacity(32);
        write_done(
            &mut tail,
            &Done {
                error,
                reserved: 0,
                tasks,
            },
        );
        out(&tail).map_err(Error::Sink)?;
        res
    }

    /// The TASK messages for a viewer whose view differs from ours, through [`ViewFilter`].
    fn tasks_for(
        &mut self,
        req: &Request,
        viewer: &Viewer,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        let Backend::Bpf(it) = &mut self.backend else {
            return Err(Error::Unsupported(
                "answering for a process in another namespace or behind hidepid needs the BPF \
                 backend",
            ));
        };
        it.set_view(taskdiag_bpf::View {
            pidns: viewer.pidns,
            access: viewer.needs_access() || req.show_flags & SHOW_MAPS != 0,
        });
        let r = self.viewed_tasks(req, viewer, out);
        self.reset_view();
        r
    }

    /// [`Self::tasks_for`] once the BPF programs are set for the viewer.
    fn viewed_tasks(
        &mut self,
        req: &Request,
        viewer: &Viewer,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        let strategy = req.strategy();
        // CHILDREN of a task the viewer may not see is "no such process", as in its /proc.
        if strategy == Some(Strategy::Children) && viewer.needs_access() {
            let one = Request::new(Strategy::One, req.pid, 0);
            let mut f = ViewFilter::new(viewer);
            let r = self.tasks(&one, Some(viewer), &mut |c| f.push(c, &mut |_| Ok(())));
            if matches!(r, Err(Error::NoSuchTask { .. })) || (r.is_ok() && f.passed == 0) {
                return Err(Error::NoSuchTask { pid: req.pid });
            }
            r?;
        }
        let mut f = ViewFilter::new(viewer);
        let r = self.tasks(req, Some(viewer), &mut |c| f.push(c, out));
        if let Some(e) = f.error {
            return Err(Error::Internal(e));
        }
        r?;
        if f.passed == 0
            && strategy.is_some_and(Strategy::takes_pid)
            && strategy != Some(Strategy::Children)
        {
            return Err(Error::NoSuchTask { pid: req.pid });
        }
        Ok(f.passed)
    }

    /// The task `pid` (in our pid namespace) with its BASE and CRED groups and the internal
    /// ACCESS attribute: what a server needs to know about a client (its namespaces, its
    /// capabilities). Needs the BPF backend.
    pub fn identify(&mut self, pid: u32) -> Result<Task, Error> {
        let Backend::Bpf(it) = &mut self.backend else {
            return Err(Error::Unsupported(
                "identifying a client needs the BPF backend",
            ));
        };
        it.set_view(taskdiag_bpf::View {
            pidns: None,
            access: true,
        });
        let req = Request::new(Strategy::One, pid, Group::Base.flag() | Group::Cred.flag());
        let mut asm = TaskAssembler::new();
        let mut task = None;
        let mut bad = None;
        let r = it.dump(&req, &mut |chunk| {
            for m in Messages::new(chunk) {
                match m.and_then(|m| asm.push(&m)) {
                    Ok(Some(t)) => task = Some(t),
                    Ok(None) => {}
                    Err(e) => bad = Some(e),
                }
            }
            Ok(())
        });
        self.reset_view();
        if let Some(e) = bad {
            return Err(Error::Internal(e));
        }
        match (r, task) {
            (Ok(_), Some(t)) if t.access.is_some() => Ok(t),
            (Ok(_), _) | (Err(BpfError::NoSuchTask { .. }), _) => Err(Error::NoSuchTask { pid }),
            (Err(e), _) => Err(Error::Bpf(e)),
        }
    }

    /// The root directory of task `pid` (in our pid namespace) as our paths name it, when it
    /// is not ours: the prefix that file names in memory maps carry for us and not for that
    /// task's /proc (a task in a chroot). `None` for our own root, or when the BPF backend
    /// cannot tell (without the memory-map program). Needs the BPF backend.
    pub fn root_of(&mut self, pid: u32) -> Result<Option<Vec<u8>>, Error> {
        let Backend::Bpf(it) = &mut self.backend else {
            return Err(Error::Unsupported(
                "finding a client's root directory needs the BPF backend",
            ));
        };
        match it.root_of(pid) {
            Ok(Some(r)) if r != b"/" => Ok(Some(r)),
            Ok(_) => Ok(None),
            Err(BpfError::NoSuchTask { pid }) => Err(Error::NoSuchTask { pid }),
            Err(e) => Err(Error::Bpf(e)),
        }
    }

    fn reset_view(&mut self) {
        if let Backend::Bpf(it) = &mut self.backend {
            it.set_view(taskdiag_bpf::View::default());
        }
    }

    /// The TASK messages of `req` from the backend, completed from /proc where the BPF
    /// programs could not fill a group. `viewer` (set for the BPF programs already) only
    /// changes which /proc entries may be consulted: ours, by the ids in our namespace.
    fn tasks(
        &mut self,
        req: &Request,
        viewer: Option<&Viewer>,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        let foreign_ns = viewer.is_some_and(|v| v.pidns.is_some());
        match &mut self.backend {
            Backend::Daemon(_) => Err(Error::Unsupported(
                "a daemon client cannot answer for another process",
            )),
            Backend::Procfs(p) => p.dump(req, out).map_err(Error::from),
            Backend::Bpf(it) => {
                let procfs = self.procfs.as_ref();
                // Memory maps from the BPF map walk (VMA alone: VMA_STAT's counters exist only
                // in smaps, read from /proc), read beside the task walk.
                if req.show_flags & SHOW_MAPS == Group::Vma.flag() && it.has_vma() {
                    vma_walk::VmaStream::with(it, req, |it, maps| {
                        bpf_tasks(it, req, foreign_ns, Some(maps), procfs, out)
                    })
                } else {
                    bpf_tasks(it, req, foreign_ns, None, procfs, out)
                }
            }
        }
    }
}

/// The TASK messages of `req` from the BPF programs, completed from /proc where they could not
/// fill a group, with the memory maps of `maps` when the request has VMA.
fn bpf_tasks(
    it: &mut TaskIter,
    req: &Request,
    foreign_ns: bool,
    maps: Option<&std::cell::RefCell<vma_walk::VmaStream>>,
    procfs: Option<&ProcReader>,
    out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<u64, Error> {
    let mut missing = it.missing_groups(req.show_flags);
    if maps.is_some() {
        missing &= !SHOW_MAPS;
    }
    let mut fix_err = None;
    let mut fixed = Vec::new();
    let mut first = true;
    let mut hidden = Hidden::default();
    let r = it.dump(req, &mut |chunk| {
        // The hidden init is ours; another namespace has its own, which the iterator shows.
        if std::mem::take(&mut first) && !foreign_ns {
            hidden = init_if_hidden(req, chunk, procfs);
        }
        if missing == 0 && maps.is_none() && !has_fixups(chunk) {
            return hidden.merge(chunk, out);
        }
        fixed.clear();
        let mut flush = |b: &[u8]| hidden.merge(b, out);
        if let Err(e) = complete(chunk, req, missing, maps, procfs, &mut fixed, &mut flush) {
            fix_err = Some(e);
            return Err(io::Error::other("invalid record"));
        }
        hidden.merge(&fixed, out)
    });
    let extra = hidden.tasks;
    let r = match r {
        Ok(rep) => hidden.flush(out).map(|()| rep).map_err(BpfError::Sink),
        e => e,
    };
    match (r, fix_err) {
        (_, Some(e)) => Err(e),
        (Ok(rep), None) => Ok(rep.tasks + extra),
        (Err(BpfError::Sink(e)), None) => Err(Error::Sink(e)),
        // A task the iterator cannot see (pid 1 on some hosts) may still be in /proc: ask it
        // before answering "no such process".
        (Err(BpfError::NoSuchTask { pid }), None) => match procfs {
            Some(p) if !foreign_ns => p.dump(req, out).map_err(|e| match e {
                ProcfsError::NoSuchTask { .. } => Error::NoSuchTask { pid },
                e => Error::Procfs(e),
            }),
            _ => Err(Error::NoSuchTask { pid }),
        },
        (Err(e), None) => Err(Error::Bpf(e)),
    }
}

/// Applies a [`Viewer`] to a stream of TASK messages: each task is decoded, dropped if the
/// viewer may not see it, else rewritten for it and encoded again.
struct ViewFilter<'v> {
    viewer: &'v Viewer,
    asm: TaskAssembler,
    buf: Vec<u8>,
    /// Tasks passed on.
    passed: u64,
    /// A record that did not decode (a bug; the dump is failed).
    error: Option<DecodeError>,
}

impl<'v> ViewFilter<'v> {
    fn new(viewer: &'v Viewer) -> Self {
        ViewFilter {
            viewer,
            asm: TaskAssembler::new(),
            buf: Vec::with_capacity(1 << 16),
            passed: 0,
            error: None,
        }
    }

    fn push(
        &mut self,
        chunk: &[u8],
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        self.buf.clear();
        for m in Messages::new(chunk) {
            let decoded = m.and_then(|m| {
                if m.msg_type() != Some(MsgType::Task) {
                    return Ok(None);
                }
                self.asm.push(&m)
            });
            match decoded {
                Ok(Some(mut t)) => {
                    if self.viewer.filter_task(&mut t) {
                        t.encode(&mut self.buf);
                        self.passed += 1;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.error = Some(e);
                    return Err(io::Error::other("invalid record"));
                }
            }
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        out(&self.buf)
    }
}

/// Messages of tasks the BPF iterator did not show, waiting for their place in the stream.
#[derive(Default)]
struct Hidden {
    /// (pid, message bytes), in decreasing pid order (the next one is last).
    pending: Vec<(u32, Vec<u8>)>,
    /// Tasks added.
    tasks: u64,
}

impl Hidden {
    /// Forwards `chunk`, inserting pending messages before the first message with a larger pid.
    fn merge(
        &mut self,
        chunk: &[u8],
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.pending.is_empty() {
            return out(chunk);
        }
        let mut from = 0;
        for m in Messages::new(chunk).flatten() {
            while self
                .pending
                .last()
                .is_some_and(|(pid, _)| *pid < m.header.pid)
            {
                if m.offset > from {
                    out(&chunk[from..m.offset])?;
                    from = m.offset;
                }
                if let Some((_, msg)) = self.pending.pop() {
                    out(&msg)?;
                }
            }
        }
        out(&chunk[from..])
    }

    /// Forwards what is still pending (tasks after the iterator's last one).
    fn flush(&mut self, out: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        while let Some((_, msg)) = self.pending.pop() {
            out(&msg)?;
        }
        Ok(())
    }
}

/// The pid namespace's init task (and, with threads, its threads), read from /proc when the
/// task iterator did not show it.
///
/// On some hosts the BPF task iterator never yields pid 1's thread group (seen with
/// firecracker's init). A listing without init would be wrong for every tool (pstree has no
/// root), so when a whole-system dump's first record (the lowest pid: the iterator walks in
/// pid order) is not pid 1, its thread group is read from /proc and merged into the stream in
/// pid order.
fn init_if_hidden(req: &Request, first_chunk: &[u8], procfs: Option<&ProcReader>) -> Hidden {
    let mut hidden = Hidden::default();
    let strategy = match req.strategy() {
        Some(Strategy::All) => Strategy::One,
        Some(Strategy::AllThread) => Strategy::Thread,
        _ => return hidden,
    };
    let Some(procfs) = procfs else { return hidden };
    let first_tgid = Messages::new(first_chunk)
        .next()
        .and_then(|m| m.ok())
        .map(|m| m.header.tgid);
    if first_tgid == Some(1) {
        return hidden;
    }
    let mut buf = Vec::new();
    let Ok(n) = procfs.dump(&Request::new(strategy, 1, req.show_flags), &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    }) else {
        return hidden;
    };
    hidden.tasks = n;
    // Whole messages, grouped per task (CONTINUED pieces stay with their task).
    let mut cur: Option<(u32, Vec<u8>)> = None;
    for m in Messages::new(&buf).flatten() {
        let bytes = &buf[m.offset..m.offset + m.header.len as usize];
        match &mut cur {
            Some((pid, v)) if *pid == m.header.pid => v.extend_from_slice(bytes),
            _ => {
                hidden.pending.extend(cur.take());
                cur = Some((m.header.pid, bytes.to_vec()));
            }
        }
    }
    hidden.pending.extend(cur);
    hidden.pending.sort_by_key(|p| std::cmp::Reverse(p.0));
    hidden
}

/// Whether any message in a chunk carries [`MSG_F_FIXUP`].
fn has_fixups(chunk: &[u8]) -> bool {
    Messages::new(chunk).any(|m| m.is_ok_and(|m| m.header.flags & MSG_F_FIXUP != 0))
}

/// Re-encodes `chunk` into `out` with every placeholder group read from /proc instead and the
/// memory maps added, passing `out` to `flush` (and clearing it) as it grows.
fn complete(
    chunk: &[u8],
    req: &Request,
    missing: u64,
    vmas: Option<&std::cell::RefCell<vma_walk::VmaStream>>,
    procfs: Option<&ProcReader>,
    out: &mut Vec<u8>,
    flush: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<(), Error> {
    // A chunk may hold thousands of tasks (a ring-buffer read), each grown by what /proc adds
    // (smaps' counters are ~10 KB a process): passed on every MiB, between tasks.
    const FLUSH_AT: usize = 1 << 20;
    let per_thread = req.strategy().is_some_and(Strategy::per_thread);
    let mut asm = TaskAssembler::new();
    for m in Messages::new(chunk) {
        let m = m?;
        if out.len() >= FLUSH_AT && asm.pending().is_none() {
            flush(out).map_err(Error::Sink)?;
            out.clear();
        }
        let start = out.len();
        let bytes = &chunk[m.offset..m.offset + m.header.len as usize];
        let whole =
            m.header.flags & (MSG_F_FIXUP | MSG_F_CONTINUED) == 0 && asm.pending().is_none();
        if whole && missing == 0 {
            match vmas {
                None => {
                    out.extend_from_slice(bytes);
                    continue;
                }
                // With thread strategies, memory maps only for the leader (threads share them).
                Some(_) if per_thread && m.header.pid != m.header.tgid => {
                    out.extend_from_slice(bytes);
                    continue;
                }
                // The common case: the process's maps appended to its message as they are.
                // (With ACCESS, the walk's numbers are in it: the general path below.)
                Some(w)
                    if !m
                        .attrs()
                        .any(|a| a.is_ok_and(|a| a.attr_type == ATTR_ACCESS)) =>
                {
                    let mut w = w.borrow_mut();
                    // A listing torn by an exec between two reads is read from /proc below.
                    if let Some(maps) = w.take(m.header.tgid)?.filter(|m| m.consistent()) {
                        if let Some(mut tw) = TaskWriter::resume(out, bytes) {
                            tw.attr_parts(Group::Vma as u16, &[&maps.entries, w.gate()]);
                            tw.finish();
                            continue;
                        }
                    }
                }
                Some(_) => {}
            }
        }
        let Some(mut task) = asm.push(&m)? else {
            continue;
        };
        let mut groups: Vec<Group> = task
            .errors
            .iter()
            .filter(|e| e.errno == ERRNO_NEEDS_PROCFS)
            .filter_map(|e| Group::from_u16(e.group))
            .collect();
        task.errors.retain(|e| e.errno != ERRNO_NEEDS_PROCFS);
        for g in Group::SUPPORTED {
            let mm_only = matches!(
                g,
                Group::Cmdline | Group::Statm | Group::Vma | Group::VmaStat
            );
            // With thread strategies, memory maps only for the leader (threads share them).
            let maps = matches!(g, Group::Vma | Group::VmaStat);
            let leader_only = maps && per_thread && task.pid != task.tgid;
            if missing & g.flag() != 0 && (!mm_only || may_have_cmdline(&task)) && !leader_only {
                groups.push(g);
            }
        }
        // With thread strategies, memory maps only for the leader (threads share them).
        let maps_here = may_have_cmdline(&task) && !(per_thread && task.pid != task.tgid);
        if let (Some(map), true) = (vmas, maps_here) {
            // The walk numbers processes in our pid namespace; a stream numbered in another
            // carries our numbers in ACCESS.
            let key = task.access.map_or(task.tgid, |a| a.reader_tgid);
            let got = map.borrow_mut().take_decoded(key)?;
            match (task.access, got) {
                (None, Some((maps, v))) if maps.consistent() => task.vmas = Some(v),
                // Started after the map walk, or torn by an exec: read its maps from /proc.
                (None, _) => groups.push(Group::Vma),
                // For another caller (a server), whose permission is checked against the task
                // as it was when its maps were read (the view's job): those maps and that
                // record, if they are of the image this message describes; never /proc, which
                // the server would read with its own rights, at another moment.
                // A process without an address space (a zombie leader) shows none, as /proc.
                (Some(a), _) if a.has_mm == 0 => {
                    task.vmas = Some(Vec::new());
                    task.vma_access = Some(a);
                }
                (Some(a), Some((maps, v))) if maps.same_image(&a) => {
                    task.vmas = Some(v);
                    task.vma_access = Some(maps.access);
                }
                // It executed a program (or started) between the walks: ask again.
                (Some(_), _) => task.errors.push(taskdiag_proto::task::GroupError {
                    group: Group::Vma as u16,
                    errno: libc::EAGAIN,
                }),
            }
        }
        fill_from_procfs(&mut task, &groups, per_thread, procfs);
        out.truncate(start);
        task.encode(out);
    }
    Ok(())
}

/// Whether the task may have a command line: it is not a kernel thread.
fn may_have_cmdline(t: &Task) -> bool {
    t.base
        .as_ref()
        .is_none_or(|b| b.rec.flags & taskdiag_proto::BASE_F_KTHREAD == 0)
}

/// Reads `groups` of `task` from /proc, if /proc still shows the same task.
fn fill_from_procfs(
    task: &mut Task,
    groups: &[Group],
    per_thread: bool,
    procfs: Option<&ProcReader>,
) {
    if groups.is_empty() {
        return;
    }
    let show = groups.iter().fold(Group::Base.flag(), |a, g| a | g.flag());
    let mut buf = Vec::new();
    // Our /proc knows the task by the ids in our namespace, which the ACCESS attribute carries
    // when the stream is numbered in another one.
    let (pid, tgid) = task
        .access
        .map_or((task.pid, task.tgid), |a| (a.reader_pid, a.reader_tgid));
    // A thread asked for by its own id (ONE) is read from its own entry, like a thread strategy.
    let tid = if per_thread || pid != tgid {
        Some(pid)
    } else {
        None
    };
    let found = procfs.map(|p| p.task_message(tgid, tid, show, &mut buf));
    let got = match found {
        Some(Ok(true)) => {
            let mut asm = TaskAssembler::new();
            Messages::new(&buf)
                .filter_map(|m| asm.push(&m.ok()?).ok().flatten())
                .next()
        }
        _ => None,
    };
    // The same task: same id and start time (a reused pid has another start time).
    let same = |p: &Task| {
        p.pid == pid
            && match (&p.base, &task.base) {
                (Some(a), Some(b)) => a.rec.start_time_ns == b.rec.start_time_ns,
                _ => true,
            }
    };
    for &g in groups {
        let errno = match &got {
            None if procfs.is_none() => libc::EOPNOTSUPP,
            Some(p) if same(p) => {
                match g {
                    Group::Cred => task.cred = p.cred.clone(),
                    Group::Stat => task.stat = p.stat,
                    Group::Statm => task.statm = p.statm,
                    Group::Cmdline => task.cmdline = p.cmdline.clone(),
                    Group::Vma | Group::VmaStat => task.vmas = p.vmas.clone(),
                    _ => {}
                }
                // What /proc could not give (EACCES for another user's maps, say) says why.
                if let Some(e) = p.errors.iter().find(|e| e.group == g as u16) {
                    if !task.errors.iter().any(|x| x.group == e.group) {
                        task.errors.push(*e);
                    }
                }
                continue;
            }
            _ => libc::ESRCH,
        };
        task.errors.push(taskdiag_proto::task::GroupError {
            group: g as u16,
            errno,
        });
    }
}
