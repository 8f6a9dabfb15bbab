//! The library facade: [`Dumper`] opens a backend once and answers requests with a whole
//! stream (START, TASK messages, DONE), for the caller itself or, in a server, for another
//! process ([`Dumper::dump_for`]).
//!
//! Choosing the backend by name is `backend`'s job; completing what the BPF programs could not
//! write is `complete`'s; what another caller may see is `view`'s and `filter`'s.

use std::io;
use std::path::Path;

use taskdiag_bpf::{BpfError, TaskIter};
use taskdiag_procfs::{CpuTime, ProcReader, ProcfsError};
use taskdiag_proto::msg::{write_done, write_start, Messages};
use taskdiag_proto::task::{Task, TaskAssembler};
use taskdiag_proto::{
    BackendId, Done, Group, MsgType, Request, Start, Strategy, SHOW_MAPS, VERSION,
};

use crate::calibrate;
use crate::client::{self, DaemonClient};
use crate::complete::{bpf_tasks, CallerGroups, Naming, ProcSource, CALLER_COMPLETES};
use crate::filter::ViewFilter;
use crate::view::Viewer;
use crate::{vma_walk, BackendKind, Error};

/// Below this many tasks on the host (threads, every pid namespace: /proc/loadavg), `Auto`
/// without programs already loaded reads /proc: loading them costs more than the faster walk
/// saves. Measured in docs/BENCHMARKS.md ("Small hosts").
pub const AUTO_PROCFS_BELOW: u32 = 2000;

/// The /proc that completes BPF records, and how many pid namespace levels above ours its
/// namespace is: ours (0); or, when ours has none mounted (`unshare --pid` without
/// `--mount-proc`), an ancestor's, which shows our tasks under other numbers (the BPF programs
/// then give each record's ids there); `None` for any other (it does not show us).
fn completing_proc() -> (Option<ProcReader>, u32) {
    match ProcReader::open() {
        Ok(p) => (Some(p), 0),
        Err(ProcfsError::ForeignPidNamespace { levels, .. }) if levels > 1 => {
            match ProcReader::open_unchecked(Path::new("/proc")) {
                Ok(p) => (Some(p), levels as u32 - 1),
                Err(_) => (None, 0),
            }
        }
        Err(_) => (None, 0),
    }
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
    /// /proc, for completing BPF records: ours, or that of a pid namespace `proc_up` levels
    /// above ours when ours has none mounted; `None` when it belongs to another namespace.
    procfs: Option<ProcReader>,
    /// See `procfs`.
    proc_up: u32,
    /// Why BPF was not used under `Auto`, if it was not.
    bpf_unavailable: Option<String>,
    /// Why the last request went to /proc after `Auto`'s daemon declined it, if it did.
    daemon_declined: Option<String>,
    /// Why `Auto` does not use taskdiagd (could not connect), or did not for the last request
    /// (busy, did not answer in time), if so.
    daemon_unavailable: Option<String>,
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
            BackendKind::Daemon => Ok(Self::with(Backend::Daemon(daemon()?), show_flags)),
            BackendKind::Procfs => Ok(Self::with(Backend::Procfs(ProcReader::open()?), show_flags)),
            BackendKind::Bpf => Ok(Self::with(
                Backend::Bpf(Box::new(TaskIter::load_shared(show_flags)?)),
                show_flags,
            )),
            BackendKind::Auto => Self::open_auto(show_flags, daemon),
        }
    }

    /// The BPF backend with programs loaded for this dumper alone (for `show_flags`), never
    /// shared through bpffs: for a server that loads once and keeps them for its life, and so
    /// should not hold a slot one-shot processes reuse.
    pub fn open_private_bpf(show_flags: u64) -> Result<Self, Error> {
        Ok(Self::with(
            Backend::Bpf(Box::new(TaskIter::load_for(show_flags)?)),
            show_flags,
        ))
    }

    /// [`Dumper::open_private_bpf`] for a server's workers: also with the program that
    /// answers [`taskdiag_proto::Strategy::AllWithThreads`] in one walk, which a server that
    /// gives up its privileges after loading could not load later.
    pub fn open_serving_bpf(show_flags: u64) -> Result<Self, Error> {
        Ok(Self::with(
            Backend::Bpf(Box::new(TaskIter::load_serving(show_flags)?)),
            show_flags,
        ))
    }

    /// `Auto`: the fastest way to the same answer on this host. Programs already verified
    /// (pinned by an earlier process) cost nothing to start at any size; a daemon has its own
    /// loaded; without either, loading costs more than it saves on a host with few tasks
    /// ([`AUTO_PROCFS_BELOW`]), where /proc is read directly, if it is this process's own;
    /// else the programs are loaded (and pinned for the next process), and /proc read only if
    /// they cannot be.
    fn open_auto(
        show_flags: u64,
        daemon: impl Fn() -> Result<DaemonClient, Error>,
    ) -> Result<Self, Error> {
        if let Some(it) = TaskIter::reuse_pinned() {
            return Ok(Self::with(Backend::Bpf(Box::new(it)), show_flags));
        }
        let daemon_unavailable = match daemon() {
            Ok(c) => {
                let why = "taskdiagd answers with its programs loaded".to_owned();
                return Ok(Dumper {
                    bpf_unavailable: Some(why),
                    ..Self::with(Backend::Daemon(c), show_flags)
                });
            }
            Err(e) => Some(e.to_string()),
        };
        let because = |backend, why: String| Dumper {
            bpf_unavailable: Some(why),
            daemon_unavailable: daemon_unavailable.clone(),
            ..Self::with(backend, show_flags)
        };
        if !taskdiag_bpf::kernel_btf_present() {
            let why = BpfError::NoBtf.to_string();
            return Ok(because(Backend::Procfs(ProcReader::open()?), why));
        }
        if let Some(n) = taskdiag_procfs::host_tasks().filter(|&n| n < AUTO_PROCFS_BELOW) {
            // A /proc of another pid namespace would answer for the wrong processes.
            if let Ok(p) = ProcReader::open() {
                let why = format!(
                    "{n} tasks on this host: reading /proc costs less than loading the programs \
                     (below {AUTO_PROCFS_BELOW})"
                );
                return Ok(because(Backend::Procfs(p), why));
            }
        }
        // (Nothing pinned to reuse: that was the first thing tried.)
        match TaskIter::load_and_pin(show_flags) {
            Ok(it) => Ok(Self::with(Backend::Bpf(Box::new(it)), show_flags)),
            Err(e) => Ok(because(Backend::Procfs(ProcReader::open()?), e.to_string())),
        }
    }

    /// A dumper answering with `backend` (prepared for `show_flags`); BPF's records are
    /// completed from our /proc, and follow its rules where only a comparison with it tells.
    fn with(mut backend: Backend, show_flags: u64) -> Self {
        let (procfs, proc_up) = match backend {
            Backend::Bpf(_) => completing_proc(),
            Backend::Procfs(_) | Backend::Daemon(_) => (None, 0),
        };
        if let (Backend::Bpf(it), Some(n)) = (&mut backend, taskdiag_procfs::host_tasks()) {
            it.expect_tasks(u64::from(n));
        }
        if let (Backend::Bpf(it), Some(p)) = (&mut backend, &procfs) {
            if show_flags & Group::Statm.flag() != 0 {
                calibrate::rss_rule(it, p.root(), proc_up == 0);
            }
        }
        let mut d = Dumper {
            backend,
            procfs,
            proc_up,
            bpf_unavailable: None,
            daemon_declined: None,
            daemon_unavailable: None,
        };
        d.reset_view();
        d
    }

    /// The boottime offset of our time namespace (from our /proc, which BPF's records are
    /// completed from): BPF's start times are written with it, as that /proc shows them.
    fn boottime_offset(&self) -> i64 {
        self.procfs
            .as_ref()
            .map_or(0, ProcReader::own_boottime_offset)
    }

    /// The view our own requests are answered in: ours, with ids for /proc when it is of a
    /// namespace above ours.
    fn own_view(&self) -> taskdiag_bpf::View {
        taskdiag_bpf::View {
            pidns: None,
            access: self.proc_up > 0,
            proc_up: self.proc_up,
            boottime_offset_ns: self.boottime_offset(),
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

    /// When this dumper reads /proc itself (the procfs backend), the CPU time of every task
    /// (`threads`: every thread, a leader's being its process's) from the stat files alone, as
    /// [`taskdiag_procfs::ProcReader::cpu_times`] reads it: a %CPU baseline for a third of a
    /// BASE|STAT dump's cost there. `None` for the other backends, where that dump costs no
    /// more than this would.
    pub fn proc_cpu_times(&self, threads: bool) -> Option<Result<Vec<CpuTime>, Error>> {
        match &self.backend {
            Backend::Procfs(p) => Some(p.cpu_times(threads).map_err(Error::from)),
            _ => None,
        }
    }

    /// Whether a request for one task (ONE, THREAD) costs about that task alone: /proc, or BPF
    /// with the kernel's iterator link parameters (6.1+). Elsewhere such a request walks every
    /// task, and a reader that wants a few tasks should rather walk once.
    pub fn single_task_reads_are_cheap(&self) -> bool {
        match &self.backend {
            Backend::Procfs(_) => true,
            Backend::Bpf(it) => it.features().task_params,
            Backend::Daemon(_) => false,
        }
    }

    /// Why `Auto` did not choose BPF, if it did not. Not that it chose taskdiagd when the
    /// daemon did not serve the last request: [`Dumper::daemon_unavailable`] says why /proc
    /// answered it.
    pub fn bpf_unavailable(&self) -> Option<&str> {
        if matches!(self.backend, Backend::Daemon(_)) && self.daemon_unavailable.is_some() {
            return None;
        }
        self.bpf_unavailable.as_deref()
    }

    /// The BPF programs this process found the running kernel refuses, each as "NAME: the
    /// verifier's last line" (their groups then came from /proc, or from another flavour of
    /// the program: `dump_vma_walk` for a refused `dump_vma`). Loads of pinned programs are
    /// another process's: empty then.
    pub fn bpf_refused(&self) -> Vec<String> {
        taskdiag_bpf::refusals()
            .into_iter()
            .map(|r| format!("{}: {}", r.program, r.reason))
            .collect()
    }

    /// Whether the BPF map walk in use names files with probe reads (`dump_vma_walk`: the
    /// kernel's verifier refused bpf_d_path() of a mapping's file) rather than bpf_d_path().
    pub fn maps_by_probe_reads(&self) -> bool {
        matches!(&self.backend, Backend::Bpf(it) if it.features().vma_walk)
    }

    /// Where the BPF programs in use are pinned, if they are shared with other processes.
    pub fn pinned_at(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Bpf(it) => it.pinned_at(),
            _ => None,
        }
    }

    /// Why the last request was answered from /proc rather than by the daemon `Auto` chose
    /// (the daemon's words), if it was.
    pub fn daemon_declined(&self) -> Option<&str> {
        self.daemon_declined.as_deref()
    }

    /// Why `Auto` read /proc rather than use taskdiagd, if it did: it could not connect (no
    /// daemon, a refused server: the error's words), or the daemon did not serve the last
    /// request (busy, or it did not answer within the client's deadline, after which this
    /// dumper reads /proc for good).
    pub fn daemon_unavailable(&self) -> Option<&str> {
        self.daemon_unavailable.as_deref()
    }

    /// The groups of `show_flags` the BPF backend fills from /proc for every task, because
    /// their programs were not loaded or this kernel rejected them (0 for other backends).
    pub fn completed_from_procfs(&self, show_flags: u64) -> u64 {
        let Backend::Bpf(it) = &self.backend else {
            return 0;
        };
        let missing = it.missing_groups(show_flags);
        if maps_from_walk(it, show_flags) {
            missing & !SHOW_MAPS
        } else {
            missing
        }
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
        self.daemon_declined = None;
        if let Backend::Daemon(c) = &mut self.backend {
            self.daemon_unavailable = None;
            // The groups the daemon could not read for us come from our own /proc, task by task.
            let own = req.all_groups() & CALLER_COMPLETES != 0;
            let reader = own.then(|| ProcReader::open().ok()).flatten();
            let (mut caller, sent) = CallerGroups::new(&req, reader.as_ref());
            let sent = if own { sent } else { req };
            let mut sink = |b: &[u8]| {
                if own {
                    caller.chunk(b, out)
                } else {
                    out(b)
                }
            };
            // `Auto`'s daemon: a request it declines (EOPNOTSUPP: a group it would have to read
            // from /proc with its own rights) is answered from our /proc instead, with ours;
            // so is one it is too busy for, or that it does not answer in time (then for good:
            // the connection is of no more use), before any task was passed on. An explicit
            // daemon backend reports it.
            let auto = self.bpf_unavailable.is_some();
            let (why, for_good) = match daemon_dump(c, &sent, &mut sink) {
                (
                    Err(Error::Refused {
                        errno: libc::EOPNOTSUPP,
                        message,
                        ..
                    }),
                    Some(_),
                ) if auto => {
                    self.daemon_declined = Some(message);
                    return Dumper::with(Backend::Procfs(ProcReader::open()?), 0)
                        .answer(&req, None, out);
                }
                (Err(e @ Error::DaemonBusy { .. }), Some(_)) if auto => (e.to_string(), false),
                (
                    Err(
                        e @ (Error::DaemonTimeout { .. }
                        | Error::Daemon { .. }
                        | Error::Refused {
                            errno: libc::EAGAIN | libc::ETIMEDOUT,
                            ..
                        }),
                    ),
                    Some(_),
                ) if auto => (e.to_string(), true),
                (r, held) => {
                    if let Some(h) = held.filter(|h| !h.is_empty()) {
                        sink(&h).map_err(Error::Sink)?;
                    }
                    return r;
                }
            };
            self.daemon_unavailable = Some(why);
            let mut procfs = Dumper::with(Backend::Procfs(ProcReader::open()?), 0);
            if !for_good {
                return procfs.answer(&req, None, out);
            }
            // (Its reason for not using BPF was the daemon: daemon_unavailable says why not.)
            *self = Dumper {
                daemon_unavailable: self.daemon_unavailable.take(),
                ..procfs
            };
        }
        self.answer(&req, None, out)
    }

    /// Answers `req` for another process, `viewer`: numbered in its pid namespace and showing
    /// exactly what its /proc would show it (see [`crate::view`]). The START message names the
    /// daemon as the backend. Needs the BPF backend when the viewer's view differs from ours.
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
        // Memory maps and namespace links are checked per task (ptrace-read), so they always
        // go through the view.
        let guarded = req.all_groups() & crate::view::SHOW_GUARDED != 0;
        let res = match viewer.filter(|v| v.rewrites() || guarded) {
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
        let boottime_offset_ns = self.boottime_offset();
        let Backend::Bpf(it) = &mut self.backend else {
            return Err(Error::Unsupported(
                "answering for a process in another namespace or behind hidepid needs the BPF \
                 backend",
            ));
        };
        it.set_view(taskdiag_bpf::View {
            pidns: viewer.pidns,
            access: viewer.needs_access() || req.all_groups() & crate::view::SHOW_GUARDED != 0,
            proc_up: 0,
            boottime_offset_ns,
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
        let boottime_offset_ns = self.boottime_offset();
        let Backend::Bpf(it) = &mut self.backend else {
            return Err(Error::Unsupported(
                "identifying a client needs the BPF backend",
            ));
        };
        it.set_view(taskdiag_bpf::View {
            pidns: None,
            access: true,
            proc_up: 0,
            boottime_offset_ns,
        });
        // NS: the caller's namespaces as the kernel has them (its cgroup namespace decides
        // whose paths CGROUP would show).
        let show = Group::Base.flag() | Group::Cred.flag() | Group::Ns.flag();
        let req = Request::new(Strategy::One, pid, show);
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

    /// The root directory of task `pid` (in our pid namespace) as our paths name it: `/` for
    /// our own, else the prefix that file names in memory maps and paths carry for us and not
    /// for that task's /proc (a task in a chroot). `None` when the BPF backend cannot tell
    /// (its programs lack `task_root`): never taken for our own root, which would show a
    /// chrooted client the host's paths. Needs the BPF backend.
    pub fn root_of(&mut self, pid: u32) -> Result<Option<Vec<u8>>, Error> {
        let Backend::Bpf(it) = &mut self.backend else {
            return Err(Error::Unsupported(
                "finding a client's root directory needs the BPF backend",
            ));
        };
        match it.root_of(pid) {
            Ok(r) => Ok(r),
            Err(BpfError::NoSuchTask { pid }) => Err(Error::NoSuchTask { pid }),
            Err(e) => Err(Error::Bpf(e)),
        }
    }

    fn reset_view(&mut self) {
        let view = self.own_view();
        if let Backend::Bpf(it) = &mut self.backend {
            it.set_view(view);
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
        let naming = match viewer {
            Some(v) if v.pidns.is_some() => Naming::Viewer,
            Some(_) => Naming::Same,
            None if self.proc_up > 0 => Naming::Above,
            None => Naming::Same,
        };
        // A viewer's records carry ACCESS in its own numbers (proc_up 0), not /proc's.
        let reader = self
            .procfs
            .as_ref()
            .filter(|_| viewer.is_none() || self.proc_up == 0);
        let src = ProcSource { reader, naming };
        match &mut self.backend {
            Backend::Daemon(_) => Err(Error::Unsupported(
                "a daemon client cannot answer for another process",
            )),
            Backend::Procfs(p) => p.dump(req, out).map_err(Error::from),
            Backend::Bpf(it) => {
                // Memory maps from the BPF map walk, read beside the task walk.
                if maps_from_walk(it, req.show_flags) {
                    vma_walk::VmaStream::with(it, req, |it, maps| {
                        bpf_tasks(it, req, Some(maps), src, out)
                    })
                } else {
                    bpf_tasks(it, req, None, src, out)
                }
            }
        }
    }
}

/// `c`'s answer to `req`, passed to `out` from its first task on: what comes before it (START,
/// then DONE if the daemon refuses) is returned instead when no task came, so that the caller
/// may answer a declined request from elsewhere and its consumer see only that answer.
fn daemon_dump(
    c: &mut DaemonClient,
    req: &Request,
    out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> (Result<u64, Error>, Option<Vec<u8>>) {
    // Some(bytes held back) until the first task.
    let mut held = Some(Vec::new());
    let r = c.dump(req, &mut |b| {
        if let Some(h) = &mut held {
            if !Messages::new(b).any(|m| m.is_ok_and(|m| m.msg_type() == Some(MsgType::Task))) {
                h.extend_from_slice(b);
                return Ok(());
            }
            out(h)?;
            held = None;
        }
        out(b)
    });
    (r, held)
}

/// Whether the memory maps of a request for `show_flags` come from the BPF map walk: VMA alone
/// (VMA_STAT's counters exist only in smaps, read from /proc), where the kernel loaded it.
fn maps_from_walk(it: &TaskIter, show_flags: u64) -> bool {
    show_flags & SHOW_MAPS == Group::Vma.flag() && it.has_vma()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_proc::{FakeProc, FakeTask};
    use crate::view::{HidePid, ProcMount};
    use taskdiag_proto::task::{Event, StreamDecoder};

    /// init, a process 10 with a thread 11, and 10's child 20.
    fn machine() -> FakeProc {
        FakeProc::with(&[
            FakeTask {
                ppid: 0,
                ..FakeTask::process(1)
            },
            FakeTask::process(10),
            FakeTask::thread(11, 10),
            FakeTask {
                ppid: 10,
                ..FakeTask::process(20)
            },
        ])
    }

    fn procfs(proc: &FakeProc) -> Dumper {
        Dumper::with(Backend::Procfs(proc.reader()), 0)
    }

    /// The result of `d.dump_for(req, viewer)` (or of `d.dump(req)` without one) and the
    /// stream it wrote, decoded.
    fn answer(
        d: &mut Dumper,
        req: &Request,
        viewer: Option<&Viewer>,
    ) -> (Result<u64, Error>, Vec<Event>) {
        let mut buf = Vec::new();
        let mut out = |b: &[u8]| {
            buf.extend_from_slice(b);
            Ok(())
        };
        let r = match viewer {
            Some(v) => d.dump_for(req, v, &mut out),
            None => d.dump(req, &mut out),
        };
        (r, StreamDecoder::decode_all(&buf).expect("a whole stream"))
    }

    fn task_ids(ev: &[Event]) -> Vec<(u32, u32)> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Task(t) => Some((t.pid, t.tgid)),
                _ => None,
            })
            .collect()
    }

    fn done(ev: &[Event]) -> Done {
        match ev.last() {
            Some(Event::Done(d)) => *d,
            e => panic!("the stream ends with {e:?}"),
        }
    }

    #[test]
    fn the_procfs_backend_answers_every_strategy_from_its_root() {
        let proc = machine();
        let mut d = procfs(&proc);
        assert_eq!(d.backend(), BackendId::Procfs);
        assert_eq!(d.bpf_unavailable(), None);
        let show = Group::Base.flag() | Group::Cred.flag();
        let cases = [
            (Strategy::All, 0, vec![(1, 1), (10, 10), (20, 20)]),
            (
                Strategy::AllThread,
                0,
                vec![(1, 1), (10, 10), (11, 10), (20, 20)],
            ),
            (Strategy::One, 10, vec![(10, 10)]),
            (Strategy::Thread, 10, vec![(10, 10), (11, 10)]),
            (Strategy::Children, 10, vec![(20, 20)]),
        ];
        for (strategy, pid, want) in cases {
            let req = Request::new(strategy, pid, show);
            let (r, ev) = answer(&mut d, &req, None);
            assert_eq!(r.ok(), Some(want.len() as u64), "{strategy:?}");
            let Some(Event::Start(s)) = ev.first() else {
                panic!("{strategy:?}: no START")
            };
            assert_eq!(
                (s.backend, s.strategy, s.show_flags, s.pid),
                (BackendId::Procfs as u16, strategy as u32, show, pid)
            );
            assert_eq!(task_ids(&ev), want, "{strategy:?}");
            let dn = done(&ev);
            assert_eq!((dn.error, dn.tasks), (0, want.len() as u64));
        }
    }

    #[test]
    fn a_missing_pid_ends_the_stream_with_esrch() {
        let proc = machine();
        let mut d = procfs(&proc);
        for (strategy, pid) in [
            (Strategy::One, 999),
            (Strategy::Thread, 999),
            (Strategy::Children, 999),
            (Strategy::One, 0),
        ] {
            let (r, ev) = answer(&mut d, &Request::new(strategy, pid, 1), None);
            assert!(
                matches!(r, Err(Error::NoSuchTask { pid: p }) if p == pid),
                "{strategy:?} {pid}: {r:?}"
            );
            assert!(task_ids(&ev).is_empty());
            assert_eq!(done(&ev).error, -libc::ESRCH);
        }
    }

    #[test]
    fn an_invalid_request_is_refused_before_any_output() {
        let proc = machine();
        let mut d = procfs(&proc);
        let mut req = Request::new(Strategy::All, 0, 1);
        req.show_flags = 1 << 40;
        let mut wrote = false;
        let r = d.dump(&req, &mut |_| {
            wrote = true;
            Ok(())
        });
        assert!(matches!(r, Err(Error::Request(_))), "{r:?}");
        assert!(!wrote);
    }

    #[test]
    fn a_failing_sink_is_the_callers_error() {
        let proc = machine();
        let mut d = procfs(&proc);
        let req = Request::new(Strategy::All, 0, 1);
        let r = d.dump(&req, &mut |_| Err(io::ErrorKind::BrokenPipe.into()));
        assert!(matches!(r, Err(Error::Sink(e)) if e.kind() == io::ErrorKind::BrokenPipe));
    }

    #[test]
    fn answering_for_another_caller_needs_bpf_unless_its_view_is_ours() {
        let proc = machine();
        let mut d = procfs(&proc);
        let req = Request::new(Strategy::All, 0, Group::Base.flag());
        // A caller whose /proc shows what ours shows: our records, from the daemon.
        let same = Viewer::default();
        let (r, ev) = answer(&mut d, &req, Some(&same));
        assert_eq!(r.ok(), Some(3));
        let Some(Event::Start(s)) = ev.first() else {
            panic!("no START")
        };
        assert_eq!(s.backend, BackendId::Daemon as u16);
        // Behind hidepid, each task must be checked: not from /proc.
        let hidden = Viewer {
            proc_mount: ProcMount {
                hidepid: HidePid::Invisible,
                gid: None,
            },
            ..Viewer::default()
        };
        let (r, ev) = answer(&mut d, &req, Some(&hidden));
        assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}");
        assert!(task_ids(&ev).is_empty());
        assert_eq!(done(&ev).error, -libc::EIO);
        assert!(matches!(d.identify(10), Err(Error::Unsupported(_))));
        assert!(matches!(d.root_of(10), Err(Error::Unsupported(_))));
    }
}
