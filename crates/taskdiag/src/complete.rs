//! Completion from /proc: what the BPF programs could not put in a message, filled per task
//! and per group after checking that /proc still shows the same task (same start time).
//!
//! Also, for a daemon's answers, the groups of a task a client reads from its own /proc where
//! the daemon's programs could not write them ([`CallerGroups`]). For BPF, three cases: a
//! group this kernel or this load cannot produce at all
//! ([`taskdiag_bpf::DumpReport::missing_groups`]), a record that did not fit the iterator's buffer
//! (a GROUP_ERROR with [`ERRNO_NEEDS_PROCFS`] on a message flagged [`MSG_F_FIXUP`]), and tasks the
//! iterator never shows (pid 1 on some hosts, see [`init_if_hidden`]), merged into the stream in
//! pid order. Memory maps from the BPF map walk are spliced in here too. Everything but
//! [`bpf_tasks`] works on byte streams and a [`ProcReader`], so it is tested on synthetic
//! streams against a fake /proc.

use std::cell::RefCell;
use std::io;

use taskdiag_bpf::{BpfError, TaskIter};
use taskdiag_procfs::{ProcReader, ProcfsError};
use taskdiag_proto::msg::{mark_processes, write_start, Message, Messages, TaskWriter};
use taskdiag_proto::task::{GroupError, Task, TaskAssembler};
use taskdiag_proto::{
    Group, GroupErrorRec, MsgType, Request, Start, Strategy, ATTR_ACCESS, ATTR_GROUP_ERROR,
    BASE_F_KTHREAD, ERRNO_NEEDS_PROCFS, MSG_F_CONTINUED, MSG_F_FIXUP, MSG_F_PROCESS, SHOW_MAPS,
};

use crate::vma_walk::VmaStream;
use crate::Error;

/// The /proc that completes BPF records, and how it names their tasks.
#[derive(Clone, Copy)]
pub(crate) struct ProcSource<'a> {
    /// `None` when there is no /proc to read.
    pub reader: Option<&'a ProcReader>,
    pub naming: Naming,
}

/// How the /proc that completes BPF records names their tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Naming {
    /// By the records' own ids: /proc and the stream are of our pid namespace.
    Same,
    /// The stream is numbered in a viewer's pid namespace (below ours): the ACCESS attribute
    /// carries the ids in ours, and stays for the viewer's checks.
    Viewer,
    /// /proc is of a pid namespace above ours (ours has none mounted: `unshare --pid` without
    /// `--mount-proc`): every record carries ACCESS only for its ids there, removed once read.
    Above,
}

/// The TASK messages of `req` from the BPF programs, completed from /proc where they could not
/// fill a group, with the memory maps of `maps` when the request has VMA.
pub(crate) fn bpf_tasks(
    it: &mut TaskIter,
    req: &Request,
    maps: Option<&RefCell<VmaStream>>,
    src: ProcSource,
    out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<u64, Error> {
    // /proc's pid 1 is our init only when /proc and the stream are of our namespace (another
    // namespace has its own, which the iterator shows).
    let our_numbers = src.naming == Naming::Same;
    // The lines CGROUP's text has: those of the hierarchies our own /proc/PID/cgroup lists.
    if req.wants(Group::Cgroup) {
        if let Some(h) = src.reader.and_then(|p| p.cgroup_hierarchies()) {
            it.set_cgroup_hierarchies(h.v1, h.unified);
        }
    }
    // SECURITY's label: the programs can only say there is none.
    if req.wants(Group::Security) {
        let labels = src.reader.and_then(|p| p.lsm_labels());
        it.set_lsm_labels(labels != Some(false));
    }
    let mut missing = it.missing_groups(req.all_groups());
    if maps.is_some() {
        missing &= !SHOW_MAPS;
    }
    let mut fix_err = None;
    let mut fixed = Vec::new();
    let mut first = true;
    let mut hidden = Hidden::default();
    let r = it.dump(req, &mut |chunk| {
        if std::mem::take(&mut first) && our_numbers {
            hidden = init_if_hidden(req, chunk, src.reader);
        }
        if missing == 0 && maps.is_none() && src.naming != Naming::Above && !has_fixups(chunk) {
            return hidden.merge(chunk, out);
        }
        fixed.clear();
        let mut flush = |b: &[u8]| hidden.merge(b, out);
        if let Err(e) = complete(chunk, req, missing, maps, src, &mut fixed, &mut flush) {
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
        (Err(BpfError::NoSuchTask { pid }), None) => match src.reader {
            Some(p) if our_numbers => p.dump(req, out).map_err(|e| match e {
                ProcfsError::NoSuchTask { .. } => Error::NoSuchTask { pid },
                e => Error::Procfs(e),
            }),
            _ => Err(Error::NoSuchTask { pid }),
        },
        (Err(e), None) => Err(Error::Bpf(e)),
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
    // Its records as the request's: with ALL_WITH_THREADS, its process's (marked) and then
    // its threads'.
    let asks: &[(Strategy, u64)] = match req.strategy() {
        Some(Strategy::All) => &[(Strategy::One, req.show_flags)],
        Some(Strategy::AllThread) => &[(Strategy::Thread, req.show_flags)],
        Some(Strategy::AllWithThreads) => &[
            (Strategy::One, req.show_process),
            (Strategy::Thread, req.show_flags),
        ],
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
    for (i, &(strategy, show)) in asks.iter().enumerate() {
        let from = buf.len();
        let Ok(n) = procfs.dump(&Request::new(strategy, 1, show), &mut |b| {
            buf.extend_from_slice(b);
            Ok(())
        }) else {
            return Hidden::default();
        };
        if asks.len() > 1 && i == 0 {
            mark_processes(&mut buf[from..]);
        }
        hidden.tasks += n;
    }
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
    vmas: Option<&RefCell<VmaStream>>,
    src: ProcSource,
    out: &mut Vec<u8>,
    flush: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<(), Error> {
    // A chunk may hold thousands of tasks (a ring-buffer read), each grown by what /proc adds
    // (smaps' counters are ~10 KB a process): passed on every MiB, between tasks.
    const FLUSH_AT: usize = 1 << 20;
    let strategy = req.strategy().unwrap_or(Strategy::All);
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
        // What /proc adds to this record: of the groups its kind of record asks for.
        let missing = missing & req.groups_of(m.header.flags);
        if whole && missing == 0 && src.naming != Naming::Above {
            match vmas {
                None => {
                    out.extend_from_slice(bytes);
                    continue;
                }
                // Memory maps only on a record that stands for its process (threads share them).
                Some(_)
                    if !strategy.record_stands_for_process(
                        m.header.pid,
                        m.header.tgid,
                        m.header.flags,
                    ) =>
                {
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
        let flags = if task.process { MSG_F_PROCESS } else { 0 };
        let per_thread = strategy.record_per_thread(flags);
        // The task's ids in our /proc.
        let ids = match src.naming {
            Naming::Above => task.access.take(),
            _ => task.access,
        }
        .map_or((task.pid, task.tgid), |a| (a.reader_pid, a.reader_tgid));
        let mut groups: Vec<Group> = task
            .errors
            .iter()
            .filter(|e| e.errno == ERRNO_NEEDS_PROCFS)
            .filter_map(|e| Group::from_u16(e.group))
            .collect();
        task.errors.retain(|e| e.errno != ERRNO_NEEDS_PROCFS);
        // Memory maps only on a record that stands for its process (threads share them), and
        // only for a task with an address space.
        let maps_here = may_have_cmdline(&task)
            && strategy.record_stands_for_process(task.pid, task.tgid, flags);
        for g in Group::SUPPORTED {
            let here = match g {
                Group::Vma | Group::VmaStat => maps_here,
                Group::Cmdline | Group::Statm => may_have_cmdline(&task),
                _ => true,
            };
            if missing & g.flag() != 0 && here {
                groups.push(g);
            }
        }
        if let (Some(map), true) = (vmas, maps_here) {
            // The walk numbers processes in our pid namespace; a stream numbered in another
            // carries our numbers in ACCESS. (With /proc of a namespace above ours, ACCESS was
            // for that /proc, and is gone.)
            let key = task.access.map_or(task.tgid, |a| a.reader_tgid);
            let got = map.borrow_mut().take_decoded(key)?;
            let given_up = map.borrow().given_up();
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
                // A name the walk could not write: the client reads the maps (and their
                // counters) from its own /proc (CallerGroups), with its own rights.
                (Some(_), Some((maps, _))) if maps.names_missing() => {
                    defer_maps(&mut task, &mut groups);
                }
                (Some(a), Some((maps, v))) if maps.same_image(&a) => {
                    task.vmas = Some(v);
                    task.vma_access = Some(maps.access);
                }
                // The walk was given up on (a process's memory-map lock held by something
                // stuck): the client reads the maps from its own /proc, on threads it can give
                // up on too; this server reads nothing with its own rights for a caller.
                (Some(_), None) if given_up => {
                    defer_maps(&mut task, &mut groups);
                }
                // It executed a program (or started) between the walks: ask again.
                (Some(_), _) => task.errors.push(GroupError {
                    group: Group::Vma as u16,
                    errno: libc::EAGAIN,
                }),
            }
        }
        // For another caller (a server): a group whose file /proc guards per reader is not read
        // with the server's rights where the programs could not write it (IO of a process of
        // many threads on kernels without bpf_loop(), PATHS of a memfd executable, ...): its
        // client reads it from its own /proc ([`CallerGroups`]).
        if task.access.is_some() {
            groups.retain(|&g| {
                let theirs = SHOW_SERVER_DEFERS & g.flag() != 0;
                if theirs {
                    task.errors.push(GroupError {
                        group: g as u16,
                        errno: libc::EOPNOTSUPP,
                    });
                }
                !theirs
            });
        }
        fill_from_procfs(&mut task, ids, &groups, per_thread, src.reader);
        out.truncate(start);
        task.encode(out);
    }
    Ok(())
}

/// Groups a server answers from its programs but, where they could not write one for a task,
/// leaves to its client (a GROUP_ERROR with EOPNOTSUPP) rather than read /proc with its own
/// rights: what /proc guards with the reader's identity (ptrace-read, the owner of a file of
/// mode 0400, a security module's policy, CAP_SYS_ADMIN): IO, PATHS, ENVIRON, SCHED (wchan and
/// syscall), SECURITY (the label), KSTACK and WCHAN. taskdiagd, without capabilities and with a
/// security context of its own, could only read them from /proc with its own rights; its
/// clients read them from their own /proc (the library does it for them), which shows them
/// exactly what they may see. Where the programs wrote them, the server's view of the caller
/// decides ([`crate::view`]).
pub const SHOW_SERVER_DEFERS: u64 = Group::Io.flag()
    | Group::Paths.flag()
    | Group::Environ.flag()
    | Group::Sched.flag()
    | Group::Security.flag()
    | Group::Kstack.flag()
    | Group::Wchan.flag();

/// Completes a daemon's answer with the groups it deferred to the caller for some tasks
/// ([`SHOW_SERVER_DEFERS`]: a GROUP_ERROR with EOPNOTSUPP): the daemon is asked with BASE too
/// (its start time tells a reused pid), each such task gets them from this process's /proc if
/// /proc still shows the same task, else a GROUP_ERROR (ESRCH; EOPNOTSUPP without a /proc of
/// our own pid namespace), and the START message names the groups of the caller's request
/// again.
pub(crate) struct CallerGroups<'a> {
    req: Request,
    reader: Option<&'a ProcReader>,
    asm: TaskAssembler,
    buf: Vec<u8>,
}

impl<'a> CallerGroups<'a> {
    /// For the caller's request `req`, read from `reader`; with the request to send the
    /// daemon instead.
    pub(crate) fn new(req: &Request, reader: Option<&'a ProcReader>) -> (Self, Request) {
        let mut sent = *req;
        sent.show_flags |= Group::Base.flag();
        if req.strategy() == Some(Strategy::AllWithThreads) {
            sent.show_process |= Group::Base.flag();
        }
        let c = CallerGroups {
            req: *req,
            reader,
            asm: TaskAssembler::new(),
            buf: Vec::new(),
        };
        (c, sent)
    }

    /// Passes on one chunk of whole messages of the daemon's answer, completed.
    pub(crate) fn chunk(
        &mut self,
        chunk: &[u8],
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        // Nearly every chunk has nothing to complete: it is passed on as it came, not decoded
        // and encoded again (that was a third of an unprivileged exporter's time).
        if Messages::new(chunk).all(|m| m.is_ok_and(|m| self.passes(&m))) {
            return out(chunk);
        }
        self.buf.clear();
        let strategy = self.req.strategy().unwrap_or(Strategy::All);
        for m in Messages::new(chunk) {
            let m = m.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let raw = &chunk[m.offset..m.offset + m.header.len as usize];
            match m.msg_type() {
                Some(MsgType::Start) => {
                    let mut s = Start::read_from(m.payload).ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "short START message")
                    })?;
                    s.show_flags = self.req.show_flags;
                    write_start(&mut self.buf, &s);
                }
                Some(MsgType::Task) if self.passes(&m) => self.buf.extend_from_slice(raw),
                Some(MsgType::Task) => {
                    let t = self
                        .asm
                        .push(&m)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    if let Some(mut t) = t {
                        let flags = if t.process { MSG_F_PROCESS } else { 0 };
                        let per_thread = strategy.record_per_thread(flags);
                        let ids = (t.pid, t.tgid);
                        let groups: Vec<Group> = t
                            .errors
                            .iter()
                            .filter(|e| deferred(e.group, e.errno))
                            .filter_map(|e| Group::from_u16(e.group))
                            .collect();
                        t.errors.retain(|e| !deferred(e.group, e.errno));
                        fill_from_procfs(&mut t, ids, &groups, per_thread, self.reader);
                        if self.strips_base(flags) {
                            t.base = None;
                        }
                        t.encode(&mut self.buf);
                    }
                }
                _ => self.buf.extend_from_slice(raw),
            }
        }
        out(&self.buf)
    }

    /// Whether message `m` goes to the caller as it came: any but START and TASK, and a TASK
    /// that is whole in it (no task being assembled, not CONTINUED), with no group deferred to
    /// the caller and BASE asked for by the caller. An attribute that does not decode is not
    /// passed (the decoding path reports it).
    fn passes(&self, m: &Message<'_>) -> bool {
        match m.msg_type() {
            Some(MsgType::Start) => false,
            Some(MsgType::Task) => {
                !self.strips_base(m.header.flags)
                    && !m.continued()
                    && self.asm.pending().is_none()
                    && m.attrs().all(|a| {
                        a.is_ok_and(|a| {
                            a.attr_type != ATTR_GROUP_ERROR
                                || GroupErrorRec::read_from(a.payload)
                                    .is_some_and(|e| !deferred(e.group, e.errno))
                        })
                    })
            }
            _ => true,
        }
    }
}

impl CallerGroups<'_> {
    /// Whether a record whose message has `flags` loses the BASE the daemon was asked for
    /// besides the caller's groups (it tells a reused pid).
    fn strips_base(&self, flags: u16) -> bool {
        self.req.groups_of(flags) & Group::Base.flag() == 0
    }
}

/// Whether a GROUP_ERROR of `group` with `errno` is the daemon's deferral of a group to the
/// caller's own /proc ([`CALLER_COMPLETES`]).
fn deferred(group: u16, errno: i32) -> bool {
    errno == libc::EOPNOTSUPP
        && Group::from_u16(group).is_some_and(|g| CALLER_COMPLETES & g.flag() != 0)
}

/// Leaves `task`'s memory maps (and their counters, if `groups` wanted them from /proc) to a
/// server's caller, who reads them from its own /proc with its own rights.
fn defer_maps(task: &mut Task, groups: &mut Vec<Group>) {
    let stat = groups.contains(&Group::VmaStat);
    groups.retain(|&g| g != Group::VmaStat);
    for g in std::iter::once(Group::Vma).chain(stat.then_some(Group::VmaStat)) {
        task.errors.push(GroupError {
            group: g as u16,
            errno: libc::EOPNOTSUPP,
        });
    }
}

/// The groups a daemon may leave to its client's own /proc, task by task: those it never reads
/// for another caller ([`SHOW_SERVER_DEFERS`]), and the memory maps of a process its map walk
/// could not name (VMA, with VMA_STAT's counters).
pub(crate) const CALLER_COMPLETES: u64 =
    SHOW_SERVER_DEFERS | Group::Vma.flag() | Group::VmaStat.flag();

/// Nanoseconds per clock tick, the resolution of /proc's start times.
fn ns_per_tick() -> u64 {
    (1_000_000_000 / taskdiag_procfs::clock_ticks()).max(1)
}

/// Whether the task may have a command line: it is not a kernel thread.
fn may_have_cmdline(t: &Task) -> bool {
    t.base
        .as_ref()
        .is_none_or(|b| b.rec.flags & BASE_F_KTHREAD == 0)
}

/// Reads `groups` of `task` from /proc, which knows it as `(pid, tgid)`, if /proc still shows
/// the same task.
fn fill_from_procfs(
    task: &mut Task,
    (pid, tgid): (u32, u32),
    groups: &[Group],
    per_thread: bool,
    procfs: Option<&ProcReader>,
) {
    if groups.is_empty() {
        return;
    }
    let show = groups.iter().fold(Group::Base.flag(), |a, g| a | g.flag());
    let mut buf = Vec::new();
    // A per-thread record from the thread's entry under its process; any other from /proc/PID,
    // also a thread asked for by its own id (ONE), whose /proc/TID stands for its process as
    // the record does (the process's STAT totals, its memory maps), as the procfs backend reads it.
    let found = procfs.map(|p| match per_thread {
        true => p.task_message(tgid, Some(pid), show, &mut buf),
        false => p.task_message(pid, None, show, &mut buf),
    });
    let got = match found {
        Some(Ok(true)) => {
            let mut asm = TaskAssembler::new();
            Messages::new(&buf)
                .filter_map(|m| asm.push(&m.ok()?).ok().flatten())
                .next()
        }
        _ => None,
    };
    // The same task: same id and start time (a reused pid has another start time). A record
    // without BASE is checked against its ACCESS where it stands for its process (a server
    // always has it): ACCESS's start is the thread group's.
    // ACCESS's is exact, /proc's at clock-tick resolution: the same start is the tick that
    // contains ACCESS's.
    let exact = task.base.is_none();
    let started = task.base.as_ref().map(|b| b.rec.start_time_ns).or_else(|| {
        task.access
            .filter(|_| task.pid == task.tgid)
            .map(|a| a.tg_start_ns)
    });
    let same = |p: &Task| {
        p.pid == pid
            && match (&p.base, started) {
                (Some(a), Some(s)) if exact => {
                    // ACCESS's start is the kernel's; /proc's has our time namespace's
                    // boottime offset added.
                    let off = procfs.map_or(0, ProcReader::own_boottime_offset);
                    let s = s.wrapping_add_signed(off);
                    let tick = ns_per_tick();
                    a.rec.start_time_ns == s / tick * tick
                }
                (Some(a), Some(s)) => a.rec.start_time_ns == s,
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
                    Group::Signal => task.signal = p.signal,
                    Group::Ns => task.ns = p.ns.clone(),
                    Group::Files => task.files = p.files.clone(),
                    Group::Cgroup => task.cgroup = p.cgroup.clone(),
                    Group::Io => task.io = p.io,
                    Group::Paths => task.paths = p.paths.clone(),
                    Group::Environ => task.environ = p.environ.clone(),
                    Group::Sched => task.sched = p.sched.clone(),
                    Group::Security => task.security = p.security.clone(),
                    Group::Delay => task.delay = p.delay,
                    Group::Kstack => task.kstack = p.kstack.clone(),
                    Group::Wchan => task.wchan = p.wchan.clone(),
                    Group::Vma | Group::VmaStat => task.vmas = p.vmas.clone(),
                    Group::Base => {}
                }
                // What /proc could not give (EACCES for another user's maps, say) says why.
                // (The procfs backend says it of the maps as VMA's, with VMA_STAT too.)
                let maps = [Group::Vma as u16, Group::VmaStat as u16];
                let of_g = |e: &&GroupError| {
                    e.group == g as u16 || (maps.contains(&(g as u16)) && maps.contains(&e.group))
                };
                if let Some(e) = p.errors.iter().find(of_g) {
                    if !task.errors.iter().any(|x| x.group == e.group) {
                        task.errors.push(*e);
                    }
                }
                continue;
            }
            _ => libc::ESRCH,
        };
        task.errors.push(GroupError {
            group: g as u16,
            errno,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_proc::{FakeProc, FakeTask};
    use taskdiag_proto::task::Base;
    use taskdiag_proto::{AccessRec, BaseRec, MsgHeader};

    /// The BASE group the BPF programs would write for `t`.
    fn base_of(t: &FakeTask) -> Base {
        Base {
            rec: BaseRec {
                ppid: t.ppid,
                flags: if t.flags & taskdiag_proto::PF_KTHREAD != 0 {
                    BASE_F_KTHREAD
                } else {
                    0
                },
                start_time_ns: t.start_ns(),
                comm_len: t.comm.len() as u16,
                ..BaseRec::default()
            },
            comm: t.comm.as_bytes().to_vec(),
        }
    }

    /// A message as the BPF programs write it: BASE, plus for each of `placeholders` a
    /// GROUP_ERROR asking for /proc, then flagged MSG_F_FIXUP.
    fn bpf_message(out: &mut Vec<u8>, t: &FakeTask, placeholders: &[Group]) {
        let start = out.len();
        Task {
            pid: t.pid,
            tgid: t.tgid,
            base: Some(base_of(t)),
            errors: placeholders
                .iter()
                .map(|&g| GroupError {
                    group: g as u16,
                    errno: ERRNO_NEEDS_PROCFS,
                })
                .collect(),
            ..Task::default()
        }
        .encode(out);
        if !placeholders.is_empty() {
            let h = MsgHeader::read_from(&out[start..]).expect("a header");
            let flags = h.flags | MSG_F_FIXUP;
            out[start + 6..start + 8].copy_from_slice(&flags.to_ne_bytes());
        }
    }

    /// Runs [`complete`] on `chunk`; returns the tasks of its output and the output.
    fn run(
        chunk: &[u8],
        strategy: Strategy,
        show: u64,
        missing: u64,
        procfs: Option<&ProcReader>,
    ) -> (Vec<Task>, Vec<u8>) {
        let src = ProcSource {
            reader: procfs,
            naming: Naming::Same,
        };
        run_from(chunk, strategy, show, missing, src)
    }

    /// [`run`] with /proc naming tasks as `src` says.
    fn run_from(
        chunk: &[u8],
        strategy: Strategy,
        show: u64,
        missing: u64,
        src: ProcSource,
    ) -> (Vec<Task>, Vec<u8>) {
        let req = Request::new(strategy, 0, show);
        let mut out = Vec::new();
        let mut flushed = Vec::new();
        complete(chunk, &req, missing, None, src, &mut out, &mut |b| {
            flushed.extend_from_slice(b);
            Ok(())
        })
        .expect("a valid chunk");
        flushed.extend_from_slice(&out);
        let mut asm = TaskAssembler::new();
        let tasks = Messages::new(&flushed)
            .filter_map(|m| asm.push(&m.expect("whole messages")).expect("valid"))
            .collect();
        (tasks, flushed)
    }

    fn errno(t: &Task, g: Group) -> Option<i32> {
        t.errors
            .iter()
            .find(|e| e.group == g as u16)
            .map(|e| e.errno)
    }

    const BASE_CRED: u64 = 0b11;

    #[test]
    fn a_placeholder_is_read_from_proc_and_the_fixup_flag_cleared() {
        let mut t = FakeTask::process(100);
        t.uid = 1234;
        t.groups = vec![5, 6];
        let other = FakeTask::process(200);
        let proc = FakeProc::with(&[t.clone(), other.clone()]);
        let mut chunk = Vec::new();
        bpf_message(&mut chunk, &t, &[Group::Cred]);
        bpf_message(&mut chunk, &other, &[]);
        assert!(has_fixups(&chunk));
        let (tasks, out) = run(&chunk, Strategy::All, BASE_CRED, 0, Some(&proc.reader()));
        assert!(!has_fixups(&out));
        assert_eq!(tasks.len(), 2);
        let cred = tasks[0].cred.as_ref().expect("CRED from /proc");
        assert_eq!((cred.rec.uid, cred.rec.euid), (1234, 1234));
        assert_eq!(cred.groups, [5, 6]);
        assert!(tasks[0].errors.is_empty(), "{:?}", tasks[0].errors);
        assert_eq!(tasks[0].base, Some(base_of(&t)));
        // A message that needed nothing passes through as it was.
        let mut rest = Vec::new();
        bpf_message(&mut rest, &other, &[]);
        assert!(out.ends_with(&rest));
    }

    /// For a server (records with ACCESS), IO the programs could not write is left to the
    /// client (EOPNOTSUPP), never read from /proc with the server's rights; other groups are
    /// still completed.
    #[test]
    fn a_server_defers_io_to_its_client() {
        let t = FakeTask::process(100);
        let proc = FakeProc::with(std::slice::from_ref(&t));
        let mut chunk = Vec::new();
        bpf_message(&mut chunk, &t, &[Group::Io, Group::Cred]);
        // The message as a server asks for it: with the task's ACCESS.
        let mut asm = TaskAssembler::new();
        let mut task = Messages::new(&chunk)
            .find_map(|m| asm.push(&m.expect("message")).expect("valid"))
            .expect("task");
        task.access = Some(AccessRec {
            reader_pid: 100,
            reader_tgid: 100,
            ..AccessRec::default()
        });
        let mut with_access = Vec::new();
        task.encode(&mut with_access);
        let h = MsgHeader::read_from(&with_access).expect("a header");
        with_access[6..8].copy_from_slice(&(h.flags | MSG_F_FIXUP).to_ne_bytes());
        let show = BASE_CRED | Group::Io.flag();
        let (tasks, _) = run(&with_access, Strategy::All, show, 0, Some(&proc.reader()));
        assert_eq!(errno(&tasks[0], Group::Io), Some(libc::EOPNOTSUPP));
        assert!(tasks[0].io.is_none());
        assert!(tasks[0].cred.is_some(), "{:?}", tasks[0].errors);
        // Without ACCESS (the caller's own dump) IO is read from /proc as any other group (the
        // fake /proc has no io file: ENOENT says it was tried).
        let (tasks, _) = run(&chunk, Strategy::All, show, 0, Some(&proc.reader()));
        assert_eq!(errno(&tasks[0], Group::Io), Some(libc::ENOENT));
    }

    #[test]
    fn a_reused_pid_or_a_gone_task_is_not_completed() {
        let t = FakeTask::process(100);
        let gone = FakeTask::process(300);
        // /proc has another task under pid 100 now: same pid, later start.
        let reused = FakeTask {
            start_ticks: t.start_ticks + 50,
            uid: 0,
            ..t.clone()
        };
        let proc = FakeProc::with(&[reused]);
        let mut chunk = Vec::new();
        bpf_message(&mut chunk, &t, &[Group::Cred]);
        bpf_message(&mut chunk, &gone, &[Group::Cred]);
        let (tasks, _) = run(&chunk, Strategy::All, BASE_CRED, 0, Some(&proc.reader()));
        for t in &tasks {
            assert!(t.cred.is_none());
            assert_eq!(errno(t, Group::Cred), Some(libc::ESRCH), "task {}", t.pid);
        }
        // Without a /proc of our namespace, it cannot be read at all.
        let (tasks, _) = run(&chunk, Strategy::All, BASE_CRED, 0, None);
        assert!(tasks
            .iter()
            .all(|t| errno(t, Group::Cred) == Some(libc::EOPNOTSUPP)));
    }

    #[test]
    fn missing_groups_are_filled_but_not_for_kernel_threads() {
        let user = FakeTask::process(100);
        let kthread = FakeTask {
            flags: taskdiag_proto::PF_KTHREAD,
            cmdline: b"",
            ..FakeTask::process(2)
        };
        let proc = FakeProc::with(&[user.clone(), kthread.clone()]);
        let mut chunk = Vec::new();
        bpf_message(&mut chunk, &kthread, &[]);
        bpf_message(&mut chunk, &user, &[]);
        let show = Group::Base.flag() | Group::Cmdline.flag();
        let (tasks, _) = run(
            &chunk,
            Strategy::All,
            show,
            Group::Cmdline.flag(),
            Some(&proc.reader()),
        );
        assert_eq!(tasks[0].pid, 2);
        assert!(tasks[0].cmdline.is_none() && tasks[0].errors.is_empty());
        assert_eq!(tasks[1].cmdline.as_deref(), Some(user.cmdline));
        assert!(tasks[1].errors.is_empty());
    }

    #[test]
    fn a_proc_above_our_namespace_is_read_by_the_ids_there_and_access_removed() {
        // /proc shows the tasks our namespace numbers 2 and 3 as 1002 and 1003; 1003 is
        // another process by now (same pid, later start).
        let host = FakeTask::process(1002);
        let reused_host = FakeTask {
            start_ticks: host.start_ticks + 50,
            ..FakeTask::process(1003)
        };
        let proc = FakeProc::with(&[host.clone(), reused_host]);
        let ours = |t: &FakeTask, pid: u32| FakeTask {
            pid,
            tgid: pid,
            start_ticks: host.start_ticks,
            ..t.clone()
        };
        let mut chunk = Vec::new();
        for (pid, host_pid) in [(2, 1002), (3, 1003)] {
            let t = ours(&host, pid);
            Task {
                pid,
                tgid: pid,
                base: Some(base_of(&t)),
                access: Some(AccessRec {
                    reader_pid: host_pid,
                    reader_tgid: host_pid,
                    ..AccessRec::default()
                }),
                ..Task::default()
            }
            .encode(&mut chunk);
        }
        let src = ProcSource {
            reader: Some(&proc.reader()),
            naming: Naming::Above,
        };
        let show = Group::Base.flag() | Group::Cmdline.flag();
        let (tasks, _) = run_from(&chunk, Strategy::All, show, Group::Cmdline.flag(), src);
        assert_eq!(tasks.iter().map(|t| t.pid).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(tasks[0].cmdline.as_deref(), Some(host.cmdline));
        assert!(tasks[0].errors.is_empty(), "{:?}", tasks[0].errors);
        assert!(tasks[1].cmdline.is_none());
        assert_eq!(errno(&tasks[1], Group::Cmdline), Some(libc::ESRCH));
        // The ids were for us: no record passes them on, also with nothing to complete.
        assert!(tasks.iter().all(|t| t.access.is_none()));
        let (tasks, _) = run_from(&chunk, Strategy::All, Group::Base.flag(), 0, src);
        assert_eq!(tasks.len(), 2);
        assert!(tasks
            .iter()
            .all(|t| t.access.is_none() && t.errors.is_empty()));
    }

    #[test]
    fn with_threads_only_the_leader_gets_the_memory_maps() {
        let leader = FakeTask::process(100);
        let thread = FakeTask::thread(101, 100);
        let proc = FakeProc::with(&[leader.clone(), thread.clone()]);
        let mut chunk = Vec::new();
        bpf_message(&mut chunk, &leader, &[]);
        bpf_message(&mut chunk, &thread, &[]);
        let show = Group::Base.flag() | Group::Vma.flag();
        let reader = proc.reader();
        let missing = Group::Vma.flag();
        let (tasks, _) = run(&chunk, Strategy::AllThread, show, missing, Some(&reader));
        let vmas = tasks[0].vmas.as_ref().expect("the leader's maps");
        assert_eq!(vmas.len(), 1);
        assert_eq!(vmas[0].name, b"/usr/bin/fake");
        assert_eq!((vmas[0].rec.start, vmas[0].rec.end), (0x40_0000, 0x45_2000));
        assert_eq!(tasks[1].pid, 101);
        assert!(tasks[1].vmas.is_none() && tasks[1].errors.is_empty());
        // Per process, the record stands for its process.
        let mut chunk = Vec::new();
        bpf_message(&mut chunk, &leader, &[]);
        let (tasks, _) = run(&chunk, Strategy::All, show, missing, Some(&reader));
        assert_eq!(tasks[0].vmas.as_ref().map(Vec::len), Some(1));
    }

    /// Messages of tasks `pids` (each its own process), as a chunk.
    fn chunk_of(pids: &[u32]) -> Vec<u8> {
        let mut c = Vec::new();
        for &p in pids {
            bpf_message(&mut c, &FakeTask::process(p), &[]);
        }
        c
    }

    fn pids(b: &[u8]) -> Vec<u32> {
        Messages::new(b)
            .map(|m| m.expect("whole").header.pid)
            .collect()
    }

    #[test]
    fn a_hidden_init_is_read_from_proc_and_merged_in_pid_order() {
        let proc = FakeProc::with(&[FakeTask::process(1), FakeTask::process(40)]);
        let reader = proc.reader();
        let all = Request::new(Strategy::All, 0, Group::Base.flag());
        let first = chunk_of(&[5, 9]);
        let mut hidden = init_if_hidden(&all, &first, Some(&reader));
        assert_eq!(hidden.tasks, 1);
        let mut out = Vec::new();
        let mut sink = |b: &[u8]| {
            out.extend_from_slice(b);
            Ok(())
        };
        hidden.merge(&first, &mut sink).unwrap();
        hidden.merge(&chunk_of(&[12]), &mut sink).unwrap();
        hidden.flush(&mut sink).unwrap();
        assert_eq!(pids(&out), [1, 5, 9, 12]);
        // Shown by the iterator: nothing to add. Not a whole-system dump: nothing either.
        assert_eq!(
            init_if_hidden(&all, &chunk_of(&[1, 5]), Some(&reader)).tasks,
            0
        );
        let one = Request::new(Strategy::One, 5, Group::Base.flag());
        assert_eq!(init_if_hidden(&one, &first, Some(&reader)).tasks, 0);
        assert_eq!(init_if_hidden(&all, &first, None).tasks, 0);
    }

    #[test]
    fn pending_tasks_go_before_the_first_larger_pid_and_the_rest_at_the_end() {
        let mut h = Hidden {
            pending: vec![(50, chunk_of(&[50])), (3, chunk_of(&[3]))],
            tasks: 2,
        };
        let mut out = Vec::new();
        let mut sink = |b: &[u8]| {
            out.extend_from_slice(b);
            Ok(())
        };
        h.merge(&chunk_of(&[1, 2, 7]), &mut sink).unwrap();
        h.merge(&chunk_of(&[8]), &mut sink).unwrap();
        h.flush(&mut sink).unwrap();
        assert_eq!(pids(&out), [1, 2, 3, 7, 8, 50]);
    }

    /// A daemon's answer goes to the caller as it came, not decoded and encoded again, where
    /// nothing in it is the caller's to complete: unknown attributes and all. A task with a
    /// deferred group is completed from the caller's /proc, and START names the caller's groups.
    #[test]
    fn a_daemon_answer_passes_unchanged_but_for_what_the_caller_completes() {
        let (a, b) = (FakeTask::process(100), FakeTask::process(200));
        let proc = FakeProc::with(&[a.clone(), b.clone()]);
        let reader = proc.reader();
        let caller = Request::new(Strategy::All, 0, Group::Base.flag() | Group::Io.flag());
        let (mut cg, sent) = CallerGroups::new(&caller, Some(&reader));
        // A: BASE and an attribute this version does not know. B: IO deferred to the caller.
        let mut known = Vec::new();
        Task {
            pid: a.pid,
            tgid: a.tgid,
            base: Some(base_of(&a)),
            ..Task::default()
        }
        .encode(&mut known);
        let mut plain = Vec::new();
        let mut w = TaskWriter::resume(&mut plain, &known).expect("one whole TASK message");
        w.attr(0x7ffe, b"from a newer daemon");
        w.finish();
        let mut deferring = Vec::new();
        Task {
            pid: b.pid,
            tgid: b.tgid,
            base: Some(base_of(&b)),
            errors: vec![GroupError {
                group: Group::Io as u16,
                errno: libc::EOPNOTSUPP,
            }],
            ..Task::default()
        }
        .encode(&mut deferring);

        // A chunk with nothing to complete is the very slice received.
        let mut passed = None;
        cg.chunk(&plain, &mut |o| {
            passed = Some((o.as_ptr(), o.len()));
            Ok(())
        })
        .expect("a valid chunk");
        assert_eq!(passed, Some((plain.as_ptr(), plain.len())));

        // One with START and a deferred group: START rewritten, A as it came, B completed.
        let mut chunk = Vec::new();
        write_start(
            &mut chunk,
            &Start {
                version: taskdiag_proto::VERSION,
                show_flags: sent.show_flags | Group::Cred.flag(),
                ..Start::default()
            },
        );
        chunk.extend_from_slice(&plain);
        chunk.extend_from_slice(&deferring);
        let mut out = Vec::new();
        cg.chunk(&chunk, &mut |o| {
            out.extend_from_slice(o);
            Ok(())
        })
        .expect("a valid chunk");
        let msgs: Vec<_> = Messages::new(&out).map(|m| m.expect("whole")).collect();
        assert_eq!(msgs.len(), 3);
        let start = Start::read_from(msgs[0].payload).expect("START");
        assert_eq!(start.show_flags, caller.show_flags);
        assert_eq!(&out[msgs[1].offset..msgs[2].offset], &plain[..]);
        let t = TaskAssembler::new()
            .push(&msgs[2])
            .expect("valid")
            .expect("whole");
        // Tried in the caller's /proc (the fake one has no io file), no longer deferred.
        assert_eq!(errno(&t, Group::Io), Some(libc::ENOENT));
    }
}
