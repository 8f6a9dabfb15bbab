//! taskdiag: batched, binary process information on stock Linux kernels.
//!
//! A [`Request`] names a set of tasks (a [`Strategy`]) and attribute groups (show flags); a
//! [`Dumper`] answers with a stream in the taskdiag wire format (see `taskdiag_proto`): START,
//! one TASK message per task, DONE. This crate chooses the backend and hides the difference:
//!
//! * [`BackendKind::Bpf`]: eBPF task iterators (`taskdiag_bpf`), for callers that may load BPF.
//! * [`BackendKind::Procfs`]: the /proc reader (`taskdiag_procfs`), for everyone else.
//! * [`BackendKind::Auto`]: BPF when it loads, else procfs.
//!
//! Whatever the BPF programs cannot put in a message (a group this kernel lacks, a record too big
//! for the iterator's buffer) is filled here from /proc, per group and per task, after checking
//! that the /proc entry is still the same task (same start time). Callers never learn where a
//! value came from, and never get zeros in place of a value.
//!
//! Decoding a stream is `taskdiag_proto::task::StreamDecoder`'s job; rendering is the CLI's.

use std::io;

use taskdiag_bpf::{BpfError, TaskIter, MSG_F_FIXUP};
use taskdiag_procfs::{ProcReader, ProcfsError};
pub use taskdiag_proto as proto;
use taskdiag_proto::msg::{write_done, write_start, DecodeError, Messages};
use taskdiag_proto::task::{Task, TaskAssembler};
pub use taskdiag_proto::{BackendId, Group, Request, Strategy};
use taskdiag_proto::{Done, Start, ERRNO_NEEDS_PROCFS, VERSION};

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// BPF if it loads, else procfs.
    Auto,
    /// eBPF task iterators; fails without the privilege to load them.
    Bpf,
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
}

enum Backend {
    Bpf(Box<TaskIter>),
    Procfs(ProcReader),
}

/// Answers requests with one backend, loaded once.
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
        match kind {
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
                    backend: Backend::Procfs(ProcReader::open()?),
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
        let mut head = Vec::with_capacity(64);
        write_start(
            &mut head,
            &Start {
                version: VERSION,
                backend: self.backend() as u16,
                strategy: req.strategy,
                show_flags: req.show_flags,
                pid: req.pid,
                reserved: 0,
            },
        );
        out(&head).map_err(Error::Sink)?;
        let res = match &mut self.backend {
            Backend::Procfs(p) => p.dump(&req, out).map_err(Error::from),
            Backend::Bpf(it) => {
                let missing = it.missing_groups(req.show_flags);
                let procfs = self.procfs.as_ref();
                let mut fix_err = None;
                let mut fixed = Vec::new();
                let mut first = true;
                let mut hidden = Hidden::default();
                let r = it.dump(&req, &mut |chunk| {
                    if std::mem::take(&mut first) {
                        hidden = init_if_hidden(&req, chunk, procfs);
                    }
                    if missing == 0 && !has_fixups(chunk) {
                        return hidden.merge(chunk, out);
                    }
                    fixed.clear();
                    if let Err(e) = complete(chunk, &req, missing, procfs, &mut fixed) {
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
                    (_, Some(e)) => Err(Error::Internal(e)),
                    (Ok(rep), None) => Ok(rep.tasks + extra),
                    (Err(BpfError::Sink(e)), None) => Err(Error::Sink(e)),
                    // A task the iterator cannot see (pid 1 on some hosts) may still be in
                    // /proc: ask it before answering "no such process".
                    (Err(BpfError::NoSuchTask { pid }), None) => match procfs {
                        Some(p) => p.dump(&req, out).map_err(|e| match e {
                            ProcfsError::NoSuchTask { .. } => Error::NoSuchTask { pid },
                            e => Error::Procfs(e),
                        }),
                        None => Err(Error::NoSuchTask { pid }),
                    },
                    (Err(e), None) => Err(Error::Bpf(e)),
                }
            }
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

/// Re-encodes `chunk` with every placeholder group read from /proc instead.
fn complete(
    chunk: &[u8],
    req: &Request,
    missing: u64,
    procfs: Option<&ProcReader>,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    let per_thread = req.strategy().is_some_and(Strategy::per_thread);
    let mut asm = TaskAssembler::new();
    for m in Messages::new(chunk) {
        let m = m?;
        let start = out.len();
        if m.header.flags & MSG_F_FIXUP == 0 && missing == 0 {
            out.extend_from_slice(&chunk[m.offset..m.offset + m.header.len as usize]);
            continue;
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
            let mm_only = matches!(g, Group::Cmdline | Group::Statm);
            if missing & g.flag() != 0 && (!mm_only || may_have_cmdline(&task)) {
                groups.push(g);
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
    let tid = if per_thread { Some(task.pid) } else { None };
    let found = procfs.map(|p| p.task_message(task.tgid, tid, show, &mut buf));
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
        p.pid == task.pid
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
                    _ => {}
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
