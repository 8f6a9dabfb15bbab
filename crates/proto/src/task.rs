//! Typed tasks: assembling CONTINUED messages into a [`Task`], and encoding a [`Task`] back.
//!
//! [`TaskAssembler`] is the one place where pieces of a split task are joined; every consumer
//! (the CLI, the daemon client, tests) goes through it, so none of them can mix two tasks' data.
//! [`StreamDecoder`] adds the START/DONE envelope. Neither does I/O: they take byte slices.

use crate::msg::{DecodeError, Message, Messages, TaskWriter};
use crate::{
    align4, AccessRec, BaseRec, CgroupRec, CredRec, DelayRec, Done, FilesRec, Group, GroupErrorRec,
    IoRec, LimitRec, MsgType, NsIdsRec, NsRec, PathsRec, SchedRec, SecurityRec, SignalRec, Start,
    StatRec, StatmRec, VmaRec, VmaStatRec, ATTR_ACCESS, ATTR_GROUP_ERROR, ATTR_VMA_ACCESS,
    COMM_MAX,
};

/// BASE: the record and the task's name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Base {
    /// The fixed fields.
    pub rec: BaseRec,
    /// The name, as /proc/PID/stat shows it between the parentheses (raw bytes, up to 63).
    pub comm: Vec<u8>,
}

/// CRED: the record and the supplementary groups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cred {
    /// The fixed fields (`rec.ngroups == groups.len()`).
    pub rec: CredRec,
    /// Supplementary group ids.
    pub groups: Vec<u32>,
}

/// NS: the namespaces and the task's ids at each level of nested pid namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ns {
    /// The namespaces (`rec.levels == ids.len()`).
    pub rec: NsRec,
    /// The task's ids in each pid namespace from the reader's down to the task's own: one
    /// column of status NSpid, NStgid, NSpgid and NSsid each.
    pub ids: Vec<NsIdsRec>,
}

impl Ns {
    /// The most levels a record can carry: a task at the deepest pid namespace level
    /// (MAX_PID_NS_LEVEL, 32) seen from the initial namespace (level 0). More are malformed.
    pub const MAX_LEVELS: usize = crate::NS_MAX_LEVELS;

    /// The namespace inodes in the order of [`Ns::NAMES`].
    pub fn inodes(&self) -> [u32; 10] {
        let r = &self.rec;
        [
            r.pid,
            r.pid_for_children,
            r.mnt,
            r.net,
            r.ipc,
            r.uts,
            r.user,
            r.cgroup,
            r.time,
            r.time_for_children,
        ]
    }

    /// The inode of the namespace whose link in /proc/PID/ns is `name` (`None` for a name
    /// that is not there).
    pub fn inode(&self, name: &str) -> Option<u32> {
        let i = Self::NAMES.iter().position(|&n| n == name)?;
        Some(self.inodes()[i])
    }

    /// Mutable references to the namespace inodes, in the order of [`Ns::NAMES`].
    pub fn inodes_mut(&mut self) -> [&mut u32; 10] {
        let r = &mut self.rec;
        [
            &mut r.pid,
            &mut r.pid_for_children,
            &mut r.mnt,
            &mut r.net,
            &mut r.ipc,
            &mut r.uts,
            &mut r.user,
            &mut r.cgroup,
            &mut r.time,
            &mut r.time_for_children,
        ]
    }

    /// The names of the links in /proc/PID/ns, in the order of the record's fields.
    pub const NAMES: [&'static str; 10] = [
        "pid",
        "pid_for_children",
        "mnt",
        "net",
        "ipc",
        "uts",
        "user",
        "cgroup",
        "time",
        "time_for_children",
    ];
}

/// FILES: the descriptor count and the resource limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Files {
    /// The fixed part (`rec.nlimits == limits.len()`).
    pub rec: FilesRec,
    /// The limits, in /proc/PID/limits order.
    pub limits: Vec<LimitRec>,
}

impl Files {
    /// The limits' names as /proc/PID/limits shows them, in record order.
    pub const NAMES: [&'static str; crate::FILES_NLIMITS] = [
        "Max cpu time",
        "Max file size",
        "Max data size",
        "Max stack size",
        "Max core file size",
        "Max resident set",
        "Max processes",
        "Max open files",
        "Max locked memory",
        "Max address space",
        "Max file locks",
        "Max pending signals",
        "Max msgqueue size",
        "Max nice priority",
        "Max realtime priority",
        "Max realtime timeout",
    ];

    /// Limit `i` (an RLIMIT_* number), if the record has it.
    pub fn limit(&self, i: usize) -> Option<LimitRec> {
        self.limits.get(i).copied()
    }
}

/// CGROUP: the unified hierarchy's cgroup id and the text of /proc/PID/cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cgroup {
    /// The fixed part.
    pub rec: CgroupRec,
    /// /proc/PID/cgroup's bytes, every line with its newline.
    pub text: Vec<u8>,
}

impl Cgroup {
    /// The lines of the text (`ID:CONTROLLERS:PATH`), without their newlines.
    pub fn lines(&self) -> impl Iterator<Item = &[u8]> {
        self.text.split(|&b| b == b'\n').filter(|l| !l.is_empty())
    }

    /// The path in the unified (v2) hierarchy: the `0::PATH` line's PATH.
    pub fn unified(&self) -> Option<&[u8]> {
        self.lines().find_map(|l| l.strip_prefix(b"0::"))
    }
}

impl IoRec {
    /// The seven counters in /proc/PID/io's order (rchar, wchar, syscr, syscw, read_bytes,
    /// write_bytes, cancelled_write_bytes).
    pub fn counters(&self) -> [u64; 7] {
        [
            self.rchar,
            self.wchar,
            self.syscr,
            self.syscw,
            self.read_bytes,
            self.write_bytes,
            self.cancelled_write_bytes,
        ]
    }
}

impl crate::DelayRec {
    /// The seven delay-accounting pairs by name, in the record's order (the totals in ns and
    /// the counts: what taskstats reports).
    pub fn named_pairs(&self) -> [(&'static str, u64); 14] {
        [
            ("blkio_delay_ns", self.blkio_delay_ns),
            ("blkio_count", self.blkio_count),
            ("swapin_delay_ns", self.swapin_delay_ns),
            ("swapin_count", self.swapin_count),
            ("freepages_delay_ns", self.freepages_delay_ns),
            ("freepages_count", self.freepages_count),
            ("thrashing_delay_ns", self.thrashing_delay_ns),
            ("thrashing_count", self.thrashing_count),
            ("compact_delay_ns", self.compact_delay_ns),
            ("compact_count", self.compact_count),
            ("wpcopy_delay_ns", self.wpcopy_delay_ns),
            ("wpcopy_count", self.wpcopy_count),
            ("irq_delay_ns", self.irq_delay_ns),
            ("irq_count", self.irq_count),
        ]
    }

    /// The record without its delay-accounting pairs (and [`crate::DELAY_F_COUNTERS`]): what
    /// /proc shows of it, schedstat's numbers and the block I/O ticks.
    pub fn without_counters(&self) -> Self {
        crate::DelayRec {
            run_ns: self.run_ns,
            wait_ns: self.wait_ns,
            timeslices: self.timeslices,
            blkio_ticks: self.blkio_ticks,
            ..Default::default()
        }
    }
}

/// PATHS: the executable, working directory and root of a task, each with why it is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// The executable (readlink /proc/PID/exe), or the errno readlink fails with.
    pub exe: Result<Vec<u8>, u8>,
    /// The working directory (readlink /proc/PID/cwd), or the errno.
    pub cwd: Result<Vec<u8>, u8>,
    /// The root directory (readlink /proc/PID/root), or the errno.
    pub root: Result<Vec<u8>, u8>,
}

impl Paths {
    /// Encodes the record and the three paths as one attribute payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let len = |p: &Result<Vec<u8>, u8>| {
            p.as_ref()
                .map_or(0, |v| v.len().min(u16::MAX as usize) as u16)
        };
        let errno = |p: &Result<Vec<u8>, u8>| match p {
            Ok(_) => 0,
            Err(e) => *e,
        };
        PathsRec {
            exe_len: len(&self.exe),
            cwd_len: len(&self.cwd),
            root_len: len(&self.root),
            exe_errno: errno(&self.exe),
            cwd_errno: errno(&self.cwd),
            root_errno: errno(&self.root),
            ..PathsRec::default()
        }
        .write_to(out);
        for p in [&self.exe, &self.cwd, &self.root].into_iter().flatten() {
            out.extend_from_slice(&p[..p.len().min(u16::MAX as usize)]);
        }
    }

    /// Decodes an attribute payload written by [`Paths::encode`].
    pub fn decode(p: &[u8]) -> Result<Self, &'static str> {
        let rec = PathsRec::read_from(p).ok_or("short record")?;
        let mut rest = &p[PathsRec::SIZE..];
        let mut take = |len: u16, errno: u8| -> Result<Result<Vec<u8>, u8>, &'static str> {
            if errno != 0 {
                if len != 0 {
                    return Err("a path with an errno");
                }
                return Ok(Err(errno));
            }
            let (a, b) = rest
                .split_at_checked(len as usize)
                .ok_or("paths run past the attribute")?;
            rest = b;
            Ok(Ok(a.to_vec()))
        };
        let exe = take(rec.exe_len, rec.exe_errno)?;
        let cwd = take(rec.cwd_len, rec.cwd_errno)?;
        let root = take(rec.root_len, rec.root_errno)?;
        Ok(Paths { exe, cwd, root })
    }
}

/// SCHED: the record and its four texts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sched {
    /// The fixed part (its lengths are the texts').
    pub rec: SchedRec,
    /// /proc/PID/wchan.
    pub wchan: Vec<u8>,
    /// /proc/PID/syscall, without its newline (empty when withheld).
    pub syscall: Vec<u8>,
    /// status's Cpus_allowed_list.
    pub cpus_allowed: Vec<u8>,
    /// status's Mems_allowed_list.
    pub mems_allowed: Vec<u8>,
}

impl Sched {
    /// Encodes the record and the texts as one attribute payload (each text cut at 64 KiB).
    pub fn encode(&self, out: &mut Vec<u8>) {
        fn cut(v: &[u8]) -> &[u8] {
            &v[..v.len().min(u16::MAX as usize)]
        }
        let mut rec = self.rec;
        rec.wchan_len = cut(&self.wchan).len() as u16;
        rec.syscall_len = cut(&self.syscall).len() as u16;
        rec.cpus_len = cut(&self.cpus_allowed).len() as u16;
        rec.mems_len = cut(&self.mems_allowed).len() as u16;
        rec.write_to(out);
        for v in [
            &self.wchan,
            &self.syscall,
            &self.cpus_allowed,
            &self.mems_allowed,
        ] {
            out.extend_from_slice(cut(v));
        }
    }

    /// Decodes an attribute payload written by [`Sched::encode`].
    pub fn decode(p: &[u8]) -> Result<Self, &'static str> {
        let rec = SchedRec::read_from(p).ok_or("short record")?;
        let mut rest = &p[SchedRec::SIZE..];
        let mut take = |len: u16| -> Result<Vec<u8>, &'static str> {
            let (a, b) = rest
                .split_at_checked(len as usize)
                .ok_or("texts run past the attribute")?;
            rest = b;
            Ok(a.to_vec())
        };
        Ok(Sched {
            wchan: take(rec.wchan_len)?,
            syscall: take(rec.syscall_len)?,
            cpus_allowed: take(rec.cpus_len)?,
            mems_allowed: take(rec.mems_len)?,
            rec,
        })
    }
}

/// SECURITY: seccomp, no_new_privs and the security module's label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// The fixed part (`label_len` is the label's).
    pub rec: SecurityRec,
    /// /proc/PID/attr/current's bytes (empty with `rec.label_errno`).
    pub label: Vec<u8>,
}

/// A group that is missing for a task, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupError {
    /// The group.
    pub group: u16,
    /// Positive errno.
    pub errno: i32,
}

/// One memory mapping of a VMA attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vma {
    /// The record. Its `vma_len`, `name_len` and `stat_len` frame the entry on the wire: they
    /// are computed when encoding and 0 after decoding.
    pub rec: VmaRec,
    /// VMA_STAT counters, when requested.
    pub stat: Option<VmaStatRec>,
    /// The name as /proc/PID/maps prints it (empty for an anonymous mapping).
    pub name: Vec<u8>,
}

impl Vma {
    /// Appends the mapping as one entry of a VMA attribute payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let stat_len = if self.stat.is_some() {
            VmaStatRec::SIZE
        } else {
            0
        };
        // Names are at most a path (4096) plus " (deleted)"; longer ones are cut.
        let name = &self.name[..self.name.len().min(8192)];
        let len = align4(VmaRec::SIZE + stat_len + name.len());
        let mut r = self.rec;
        r.vma_len = len as u16;
        r.name_len = name.len() as u16;
        r.stat_len = stat_len as u16;
        let start = out.len();
        r.write_to(out);
        if let Some(st) = &self.stat {
            st.write_to(out);
        }
        out.extend_from_slice(name);
        out.resize(start + len, 0);
    }

    /// Decodes the entries of a VMA attribute payload.
    pub fn decode_all(mut p: &[u8]) -> Result<Vec<Vma>, &'static str> {
        let mut v = Vec::new();
        while !p.is_empty() {
            let rec = VmaRec::read_from(p).ok_or("short vma record")?;
            let len = rec.vma_len as usize;
            let (sl, nl) = (rec.stat_len as usize, rec.name_len as usize);
            if len < VmaRec::SIZE + sl + nl || len > p.len() || !len.is_multiple_of(4) {
                return Err("vma entry length inconsistent with its contents");
            }
            let stat = match sl {
                0 => None,
                n if n == VmaStatRec::SIZE => VmaStatRec::read_from(&p[VmaRec::SIZE..]),
                _ => return Err("unknown vma_stat size"),
            };
            let name = p[VmaRec::SIZE + sl..VmaRec::SIZE + sl + nl].to_vec();
            // The lengths frame the entry; `stat` and `name` carry what they described.
            let rec = VmaRec {
                vma_len: 0,
                name_len: 0,
                stat_len: 0,
                ..rec
            };
            v.push(Vma { rec, stat, name });
            p = &p[len..];
        }
        Ok(v)
    }
}

/// Everything a response says about one task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Task {
    /// Task (thread) id.
    pub pid: u32,
    /// Thread-group id.
    pub tgid: u32,
    /// BASE, if requested and available.
    pub base: Option<Base>,
    /// CRED, if requested and available.
    pub cred: Option<Cred>,
    /// STAT, if requested and available.
    pub stat: Option<StatRec>,
    /// STATM, if requested and the task has an address space.
    pub statm: Option<StatmRec>,
    /// CMDLINE, if requested and the task has an address space.
    pub cmdline: Option<Vec<u8>>,
    /// SIGNAL, if requested and available.
    pub signal: Option<SignalRec>,
    /// NS, if requested and available.
    pub ns: Option<Ns>,
    /// FILES, if requested and available.
    pub files: Option<Files>,
    /// CGROUP, if requested and available.
    pub cgroup: Option<Cgroup>,
    /// IO, if requested and available (refused with EACCES where /proc refuses it).
    pub io: Option<IoRec>,
    /// PATHS, if requested and available.
    pub paths: Option<Paths>,
    /// ENVIRON, if requested and available (refused with EACCES where /proc refuses it;
    /// empty for a task without an address space, as /proc/PID/environ reads).
    pub environ: Option<Vec<u8>>,
    /// SCHED, if requested and available.
    pub sched: Option<Sched>,
    /// SECURITY, if requested and available.
    pub security: Option<Security>,
    /// DELAY, if requested and available.
    pub delay: Option<DelayRec>,
    /// KSTACK, if requested and available (refused with EACCES where /proc refuses it).
    pub kstack: Option<Vec<u8>>,
    /// WCHAN, if requested and available: /proc/PID/wchan's bytes.
    pub wchan: Option<Vec<u8>>,
    /// VMA (with VMA_STAT inside each entry when requested), if requested and the task has an
    /// address space; with thread strategies only on the thread-group leader.
    pub vmas: Option<Vec<Vma>>,
    /// Requested groups the backend could not read for this task.
    pub errors: Vec<GroupError>,
    /// The internal ACCESS attribute ([`crate::ATTR_ACCESS`]), when the library asked for it.
    pub access: Option<AccessRec>,
    /// The internal VMA_ACCESS attribute ([`crate::ATTR_VMA_ACCESS`]): the task as it was while
    /// its memory maps were read, when the library checks them for another caller.
    pub vma_access: Option<AccessRec>,
    /// Whether this is a process's own record in a walk of
    /// [`crate::Strategy::AllWithThreads`] ([`crate::MSG_F_PROCESS`]): its leader's own record
    /// comes besides it.
    pub process: bool,
}

impl Task {
    /// Whether group `g` was asked for and could not be read (it is in [`Task::errors`]).
    pub fn failed(&self, g: Group) -> bool {
        self.errors.iter().any(|e| e.group == g as u16)
    }

    /// Appends the task as TASK message(s).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = TaskWriter::begin(out, self.pid, self.tgid);
        if self.process {
            w.add_flags(crate::MSG_F_PROCESS);
        }
        if let Some(a) = &self.access {
            w.attr(ATTR_ACCESS, &a.to_bytes());
        }
        if let Some(a) = &self.vma_access {
            w.attr(ATTR_VMA_ACCESS, &a.to_bytes());
        }
        if let Some(b) = &self.base {
            let mut rec = b.rec;
            rec.comm_len = b.comm.len() as u16;
            let mut fixed = Vec::with_capacity(BaseRec::SIZE);
            rec.write_to(&mut fixed);
            w.attr_parts(Group::Base as u16, &[&fixed, &b.comm]);
        }
        if let Some(c) = &self.cred {
            let mut rec = c.rec;
            rec.ngroups = c.groups.len() as u32;
            let mut v = Vec::with_capacity(CredRec::SIZE + 4 * c.groups.len());
            rec.write_to(&mut v);
            for g in &c.groups {
                v.extend_from_slice(&g.to_ne_bytes());
            }
            w.attr(Group::Cred as u16, &v);
        }
        if let Some(s) = &self.stat {
            let mut v = Vec::with_capacity(StatRec::SIZE);
            s.write_to(&mut v);
            w.attr(Group::Stat as u16, &v);
        }
        if let Some(s) = &self.statm {
            let mut v = Vec::with_capacity(StatmRec::SIZE);
            s.write_to(&mut v);
            w.attr(Group::Statm as u16, &v);
        }
        if let Some(c) = &self.cmdline {
            w.attr(Group::Cmdline as u16, c);
        }
        if let Some(s) = &self.signal {
            let mut v = Vec::with_capacity(SignalRec::SIZE);
            s.write_to(&mut v);
            w.attr(Group::Signal as u16, &v);
        }
        if let Some(n) = &self.ns {
            let mut rec = n.rec;
            rec.levels = n.ids.len() as u32;
            let mut v = Vec::with_capacity(NsRec::SIZE + NsIdsRec::SIZE * n.ids.len());
            rec.write_to(&mut v);
            for l in &n.ids {
                l.write_to(&mut v);
            }
            w.attr(Group::Ns as u16, &v);
        }
        if let Some(f) = &self.files {
            let mut rec = f.rec;
            rec.nlimits = f.limits.len() as u32;
            let mut v = Vec::with_capacity(FilesRec::SIZE + LimitRec::SIZE * f.limits.len());
            rec.write_to(&mut v);
            for l in &f.limits {
                l.write_to(&mut v);
            }
            w.attr(Group::Files as u16, &v);
        }
        if let Some(c) = &self.cgroup {
            w.attr_parts(Group::Cgroup as u16, &[&c.rec.to_bytes(), &c.text]);
        }
        if let Some(io) = &self.io {
            w.attr(Group::Io as u16, &io.to_bytes());
        }
        if let Some(p) = &self.paths {
            let mut v = Vec::with_capacity(PathsRec::SIZE + 64);
            p.encode(&mut v);
            w.attr(Group::Paths as u16, &v);
        }
        if let Some(e) = &self.environ {
            w.attr(Group::Environ as u16, e);
        }
        if let Some(s) = &self.sched {
            let mut v = Vec::with_capacity(SchedRec::SIZE + 64);
            s.encode(&mut v);
            w.attr(Group::Sched as u16, &v);
        }
        if let Some(d) = &self.delay {
            w.attr(Group::Delay as u16, &d.to_bytes());
        }
        if let Some(k) = &self.kstack {
            w.attr(Group::Kstack as u16, k);
        }
        if let Some(c) = &self.wchan {
            w.attr(Group::Wchan as u16, c);
        }
        if let Some(s) = &self.security {
            let mut rec = s.rec;
            rec.label_len = s.label.len() as u32;
            w.attr_parts(Group::Security as u16, &[&rec.to_bytes(), &s.label]);
        }
        // The memory maps last: the one attribute that may run over several messages.
        if let Some(vmas) = &self.vmas {
            let mut v = Vec::with_capacity(vmas.len() * (VmaRec::SIZE + 64));
            for m in vmas {
                m.encode(&mut v);
            }
            w.attr(Group::Vma as u16, &v);
        }
        for e in &self.errors {
            let mut b = Vec::with_capacity(GroupErrorRec::SIZE);
            GroupErrorRec {
                group: e.group,
                reserved: 0,
                errno: e.errno,
            }
            .write_to(&mut b);
            w.attr(ATTR_GROUP_ERROR, &b);
        }
        w.finish();
    }
}

/// Joins a task's messages (one, or several CONTINUED ones) into a [`Task`].
#[derive(Default)]
pub struct TaskAssembler {
    current: Option<(u32, u32)>,
    /// Whether the task being assembled is a process's own record (MSG_F_PROCESS).
    process: bool,
    parts: [Vec<u8>; Group::SUPPORTED.len()],
    seen: u32,
    errors: Vec<GroupError>,
    access: Option<AccessRec>,
    vma_access: Option<AccessRec>,
}

impl TaskAssembler {
    /// A new assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one TASK message; returns the task when its last message has arrived.
    pub fn push(&mut self, m: &Message<'_>) -> Result<Option<Task>, DecodeError> {
        let mut out = None;
        self.push_to(m, &mut |t| out = Some(t))?;
        Ok(out)
    }

    /// Feeds one TASK message; hands the task to `f` when its last message has arrived.
    ///
    /// A [`Task`] is ~1.4 KB: returned through `Result<Option<…>>` and the stream's event, it
    /// was copied at each layer, a tenth of the exporter's CPU at 165,000 tasks a scrape.
    /// Handed on from where it is built, it is not.
    pub fn push_to(&mut self, m: &Message<'_>, f: &mut dyn FnMut(Task)) -> Result<(), DecodeError> {
        let (pid, tgid) = (m.header.pid, m.header.tgid);
        match self.current {
            Some((p, _)) if p != pid => {
                let e = DecodeError::Interleaved { pid: p, next: pid };
                self.reset();
                return Err(e);
            }
            // A task in one message (nearly every one): its attributes are decoded where they
            // are, not copied out first.
            None if !m.continued() => {
                if Self::single(m, f)? {
                    return Ok(());
                }
                self.current = Some((pid, tgid));
                self.process = m.header.flags & crate::MSG_F_PROCESS != 0;
            }
            None => {
                self.current = Some((pid, tgid));
                self.process = m.header.flags & crate::MSG_F_PROCESS != 0;
            }
            _ => {}
        }
        for a in m.attrs() {
            let a = a?;
            if let Some(i) = Group::from_u16(a.attr_type).map(|g| g as usize) {
                if i < self.parts.len() {
                    self.parts[i].extend_from_slice(a.payload);
                    self.seen |= 1 << i;
                }
            } else {
                let mut o = Other {
                    errors: &mut self.errors,
                    access: &mut self.access,
                    vma_access: &mut self.vma_access,
                };
                o.take(pid, &a)?;
            }
            // Unknown attribute types are skipped: newer writers may add groups.
        }
        if m.continued() {
            return Ok(());
        }
        let parts = Parts {
            seen: self.seen,
            part: |i: usize| self.parts[i].as_slice(),
        };
        let mut t = Task {
            pid,
            tgid,
            errors: std::mem::take(&mut self.errors),
            access: self.access.take(),
            vma_access: self.vma_access.take(),
            process: self.process,
            ..Task::default()
        };
        let built = build(&mut t, &parts);
        self.reset();
        built?;
        f(t);
        Ok(())
    }

    /// The task of message `m`, which is the whole of it, decoded in place and handed to `f`;
    /// false where a group's attribute comes twice (one payload in pieces: assembled by the
    /// caller).
    fn single(m: &Message<'_>, f: &mut dyn FnMut(Task)) -> Result<bool, DecodeError> {
        let pid = m.header.pid;
        let mut slices: [&[u8]; Group::SUPPORTED.len()] = [&[]; Group::SUPPORTED.len()];
        let mut seen = 0u32;
        let (mut errors, mut access, mut vma_access) = (Vec::new(), None, None);
        for a in m.attrs() {
            let a = a?;
            if let Some(i) = Group::from_u16(a.attr_type).map(|g| g as usize) {
                if i < slices.len() {
                    if seen & (1 << i) != 0 {
                        return Ok(false);
                    }
                    slices[i] = a.payload;
                    seen |= 1 << i;
                }
            } else {
                let mut o = Other {
                    errors: &mut errors,
                    access: &mut access,
                    vma_access: &mut vma_access,
                };
                o.take(pid, &a)?;
            }
        }
        let parts = Parts {
            seen,
            part: |i: usize| slices[i],
        };
        let mut t = Task {
            pid,
            tgid: m.header.tgid,
            errors,
            access,
            vma_access,
            process: m.header.flags & crate::MSG_F_PROCESS != 0,
            ..Task::default()
        };
        build(&mut t, &parts)?;
        f(t);
        Ok(true)
    }

    /// Whether a task is half-assembled (a CONTINUED message without its end).
    pub fn pending(&self) -> Option<u32> {
        self.current.map(|(p, _)| p)
    }

    fn reset(&mut self) {
        self.current = None;
        self.process = false;
        for p in &mut self.parts {
            p.clear();
        }
        self.seen = 0;
        self.errors.clear();
        self.access = None;
        self.vma_access = None;
    }
}

/// Where the attributes that are not groups go (GROUP_ERROR, ACCESS, VMA_ACCESS).
struct Other<'a> {
    errors: &'a mut Vec<GroupError>,
    access: &'a mut Option<AccessRec>,
    vma_access: &'a mut Option<AccessRec>,
}

impl Other<'_> {
    /// Takes attribute `a` of task `pid` if it is one of those; others are skipped.
    fn take(&mut self, pid: u32, a: &crate::msg::Attr<'_>) -> Result<(), DecodeError> {
        if a.attr_type == ATTR_GROUP_ERROR {
            let r = GroupErrorRec::read_from(a.payload).ok_or(DecodeError::BadRecord {
                pid,
                group: "group_error",
                what: "short record",
            })?;
            self.errors.push(GroupError {
                group: r.group,
                errno: r.errno,
            });
        } else if a.attr_type == ATTR_ACCESS {
            *self.access = AccessRec::read_from(a.payload);
        } else if a.attr_type == ATTR_VMA_ACCESS {
            *self.vma_access = AccessRec::read_from(a.payload);
        }
        Ok(())
    }
}

/// A task's group payloads, by group index: which were seen, and each one's bytes.
struct Parts<F> {
    seen: u32,
    part: F,
}

impl<'p, F: Fn(usize) -> &'p [u8]> Parts<F> {
    /// Group `g`'s payload, if the task has the group.
    fn get(&self, g: Group) -> Option<&'p [u8]> {
        (self.seen & (1 << g as usize) != 0).then(|| (self.part)(g as usize))
    }
}

/// Decodes task `t`'s groups from their payloads (its ids and other attributes are set).
fn build<'p, F: Fn(usize) -> &'p [u8]>(t: &mut Task, parts: &Parts<F>) -> Result<(), DecodeError> {
    let pid = t.pid;
    let bad = |group: Group, what| DecodeError::BadRecord {
        pid,
        group: group.name(),
        what,
    };
    if let Some(p) = parts.get(Group::Base) {
        let rec = BaseRec::read_from(p).ok_or(bad(Group::Base, "short record"))?;
        let n = rec.comm_len as usize;
        if n > COMM_MAX {
            return Err(bad(Group::Base, "name longer than 64 bytes"));
        }
        let comm = p
            .get(BaseRec::SIZE..BaseRec::SIZE + n)
            .ok_or(bad(Group::Base, "name runs past the attribute"))?;
        t.base = Some(Base {
            rec,
            comm: comm.to_vec(),
        });
    }
    if let Some(p) = parts.get(Group::Cred) {
        let rec = CredRec::read_from(p).ok_or(bad(Group::Cred, "short record"))?;
        let n = rec.ngroups as usize;
        let gb = p
            .get(CredRec::SIZE..)
            .and_then(|g| g.get(..n.checked_mul(4)?))
            .ok_or(bad(Group::Cred, "groups run past the attribute"))?;
        let groups = gb
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        t.cred = Some(Cred { rec, groups });
    }
    if let Some(p) = parts.get(Group::Stat) {
        t.stat = Some(StatRec::read_from(p).ok_or(bad(Group::Stat, "short record"))?);
    }
    if let Some(p) = parts.get(Group::Statm) {
        t.statm = Some(StatmRec::read_from(p).ok_or(bad(Group::Statm, "short record"))?);
    }
    t.cmdline = parts.get(Group::Cmdline).map(<[u8]>::to_vec);
    if let Some(p) = parts.get(Group::Signal) {
        t.signal = Some(SignalRec::read_from(p).ok_or(bad(Group::Signal, "short record"))?);
    }
    if let Some(p) = parts.get(Group::Ns) {
        let rec = NsRec::read_from(p).ok_or(bad(Group::Ns, "short record"))?;
        let n = rec.levels as usize;
        if n > Ns::MAX_LEVELS {
            return Err(bad(Group::Ns, "more than 33 pid namespace levels"));
        }
        let lb = p
            .get(NsRec::SIZE..NsRec::SIZE + n * NsIdsRec::SIZE)
            .ok_or(bad(Group::Ns, "levels run past the attribute"))?;
        // (Sized first: filter_map's lower bound is 0, so collect() grew it step by step.)
        let mut ids = Vec::with_capacity(n);
        ids.extend(
            lb.chunks_exact(NsIdsRec::SIZE)
                .filter_map(NsIdsRec::read_from),
        );
        t.ns = Some(Ns { rec, ids });
    }
    if let Some(p) = parts.get(Group::Files) {
        let rec = FilesRec::read_from(p).ok_or(bad(Group::Files, "short record"))?;
        let n = rec.nlimits as usize;
        if n > 64 {
            return Err(bad(Group::Files, "more than 64 limits"));
        }
        let lb = p
            .get(FilesRec::SIZE..FilesRec::SIZE + n * LimitRec::SIZE)
            .ok_or(bad(Group::Files, "limits run past the attribute"))?;
        // (Sized first: growing it took three reallocations per process.)
        let mut limits = Vec::with_capacity(n);
        limits.extend(
            lb.chunks_exact(LimitRec::SIZE)
                .filter_map(LimitRec::read_from),
        );
        t.files = Some(Files { rec, limits });
    }
    if let Some(p) = parts.get(Group::Cgroup) {
        let rec = CgroupRec::read_from(p).ok_or(bad(Group::Cgroup, "short record"))?;
        let text = p[CgroupRec::SIZE..].to_vec();
        t.cgroup = Some(Cgroup { rec, text });
    }
    if let Some(p) = parts.get(Group::Io) {
        t.io = Some(IoRec::read_from(p).ok_or(bad(Group::Io, "short record"))?);
    }
    if let Some(p) = parts.get(Group::Paths) {
        t.paths = Some(Paths::decode(p).map_err(|what| bad(Group::Paths, what))?);
    }
    t.environ = parts.get(Group::Environ).map(<[u8]>::to_vec);
    if let Some(p) = parts.get(Group::Sched) {
        t.sched = Some(Sched::decode(p).map_err(|what| bad(Group::Sched, what))?);
    }
    if let Some(p) = parts.get(Group::Delay) {
        t.delay = Some(DelayRec::read_from(p).ok_or(bad(Group::Delay, "short record"))?);
    }
    t.kstack = parts.get(Group::Kstack).map(<[u8]>::to_vec);
    t.wchan = parts.get(Group::Wchan).map(<[u8]>::to_vec);
    if let Some(p) = parts.get(Group::Security) {
        let rec = SecurityRec::read_from(p).ok_or(bad(Group::Security, "short record"))?;
        let label = p
            .get(SecurityRec::SIZE..SecurityRec::SIZE + rec.label_len as usize)
            .ok_or(bad(Group::Security, "label runs past the attribute"))?
            .to_vec();
        t.security = Some(Security { rec, label });
    }
    if let Some(p) = parts.get(Group::Vma) {
        t.vmas = Some(Vma::decode_all(p).map_err(|what| bad(Group::Vma, what))?);
    }
    Ok(())
}

/// One event of a decoded stream.
// Tasks are nearly every event; boxing them would cost an allocation per task.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The START message.
    Start(Start),
    /// A complete task.
    Task(Task),
    /// The DONE message.
    Done(Done),
}

/// Decodes a response stream fed in whole messages, checking START ... DONE framing.
#[derive(Default)]
pub struct StreamDecoder {
    started: bool,
    done: bool,
    tasks: TaskAssembler,
}

impl StreamDecoder {
    /// A decoder expecting a START message.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one message.
    pub fn push(&mut self, m: &Message<'_>) -> Result<Option<Event>, DecodeError> {
        let mut task = None;
        let ev = self.push_to(m, &mut |t| task = Some(t))?;
        Ok(task.map(Event::Task).or(ev))
    }

    /// Decodes one message, handing a complete task to `f` rather than returning it as an
    /// event (see [`TaskAssembler::push_to`]): the events returned are START and DONE.
    pub fn push_to(
        &mut self,
        m: &Message<'_>,
        f: &mut dyn FnMut(Task),
    ) -> Result<Option<Event>, DecodeError> {
        let bad = |what: &str| DecodeError::BadStream {
            what: what.to_string(),
        };
        if self.done {
            return Err(bad("message after DONE"));
        }
        match m.msg_type() {
            Some(MsgType::Start) => {
                if self.started {
                    return Err(bad("second START"));
                }
                let s = Start::read_from(m.payload).ok_or(bad("short START"))?;
                if s.version != crate::VERSION {
                    return Err(bad(&format!("stream version {}", s.version)));
                }
                self.started = true;
                Ok(Some(Event::Start(s)))
            }
            // A refused request is answered by a lone DONE carrying the error.
            Some(MsgType::Done) if !self.started => {
                let d = Done::read_from(m.payload).ok_or(bad("short DONE"))?;
                if d.error == 0 {
                    return Err(bad("stream does not begin with START"));
                }
                self.done = true;
                Ok(Some(Event::Done(d)))
            }
            _ if !self.started => Err(bad("stream does not begin with START")),
            Some(MsgType::Task) => self.tasks.push_to(m, f).map(|()| None),
            Some(MsgType::Done) => {
                if let Some(pid) = self.tasks.pending() {
                    return Err(DecodeError::Unfinished { pid });
                }
                self.done = true;
                Ok(Some(Event::Done(
                    Done::read_from(m.payload).ok_or(bad("short DONE"))?,
                )))
            }
            // Unknown message types are skipped, like unknown attributes.
            None => Ok(None),
        }
    }

    /// Whether DONE was seen.
    pub fn finished(&self) -> bool {
        self.done
    }

    /// Decodes a whole stream held in memory.
    pub fn decode_all(buf: &[u8]) -> Result<Vec<Event>, DecodeError> {
        let mut d = StreamDecoder::new();
        let mut ev = Vec::new();
        for m in Messages::new(buf) {
            if let Some(e) = d.push(&m?)? {
                ev.push(e);
            }
        }
        if !d.finished() {
            return Err(DecodeError::BadStream {
                what: "no DONE message".into(),
            });
        }
        Ok(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{write_done, write_start, TaskWriter};

    fn sample(pid: u32, cmd_len: usize) -> Task {
        Task {
            pid,
            tgid: pid,
            base: Some(Base {
                rec: BaseRec {
                    ppid: 1,
                    state: 1,
                    comm_len: 6,
                    ..Default::default()
                },
                comm: b"(a) b)".to_vec(),
            }),
            cred: Some(Cred {
                rec: CredRec {
                    uid: 1000,
                    ngroups: 2,
                    cap_bset: u64::MAX >> 23,
                    ..Default::default()
                },
                groups: vec![4, 27],
            }),
            stat: Some(StatRec {
                utime_ns: 10_000_000,
                threads: 3,
                ..Default::default()
            }),
            statm: None,
            cmdline: Some((0..cmd_len).map(|i| (i % 251) as u8).collect()),
            signal: Some(SignalRec {
                pending: 1 << 9,
                caught: 1 << 63,
                ..Default::default()
            }),
            ns: Some(Ns {
                rec: NsRec {
                    pid: 4026531836,
                    net: 4026531840,
                    levels: 2,
                    ..Default::default()
                },
                ids: vec![
                    NsIdsRec {
                        pid: pid + 100,
                        tgid: pid + 100,
                        pgid: 0,
                        sid: 1,
                    },
                    NsIdsRec {
                        pid,
                        tgid: pid,
                        pgid: 1,
                        sid: 1,
                    },
                ],
            }),
            files: Some(Files {
                rec: FilesRec {
                    fds: 10_000,
                    nlimits: 2,
                    ..Default::default()
                },
                limits: vec![
                    LimitRec {
                        soft: u64::MAX,
                        hard: u64::MAX,
                    },
                    LimitRec {
                        soft: 1024,
                        hard: 4096,
                    },
                ],
            }),
            cgroup: Some(Cgroup {
                rec: CgroupRec {
                    id: 8123,
                    ..Default::default()
                },
                text: b"1:name=systemd:/x\n0::/a/b\n".to_vec(),
            }),
            io: Some(IoRec {
                rchar: 5,
                cancelled_write_bytes: 4096,
                ..Default::default()
            }),
            paths: Some(Paths {
                exe: Ok(vec![b'e'; cmd_len.min(5000)]),
                cwd: Err(13),
                root: Ok(b"/".to_vec()),
            }),
            environ: Some((0..cmd_len).map(|i| (i % 13) as u8).collect()),
            kstack: Some(b"[<0>] do_nanosleep+0x6b/0x190\n".to_vec()),
            wchan: Some(b"do_nanosleep".to_vec()),
            sched: Some(Sched {
                rec: SchedRec {
                    oom_score: 666,
                    loginuid: u32::MAX,
                    autogroup: 4,
                    wchan_len: 9,
                    syscall_len: 7,
                    cpus_len: 3,
                    mems_len: 1,
                    ..Default::default()
                },
                wchan: b"do_select".to_vec(),
                syscall: b"running".to_vec(),
                cpus_allowed: b"0-1".to_vec(),
                mems_allowed: b"0".to_vec(),
            }),
            security: Some(Security {
                rec: SecurityRec {
                    seccomp: 2,
                    seccomp_filters: 1,
                    label_len: 11,
                    ..Default::default()
                },
                label: b"unconfined\n".to_vec(),
            }),
            delay: Some(DelayRec {
                run_ns: 12345,
                wait_ns: 6789,
                timeslices: 3,
                flags: 1,
                ..Default::default()
            }),
            errors: vec![GroupError {
                group: Group::Statm as u16,
                errno: 13,
            }],
            access: None,
            vma_access: None,
            process: false,
            vmas: Some(vec![Vma {
                rec: VmaRec {
                    start: 0x1000,
                    end: 0x3000,
                    vm_flags: 3,
                    inode: 7,
                    ..VmaRec::default()
                },
                stat: Some(VmaStatRec {
                    rss: 4096,
                    ..VmaStatRec::default()
                }),
                name: b"/bin/x (deleted)".to_vec(),
            }]),
        }
    }

    #[test]
    fn the_internal_access_records_round_trip() {
        let mut t = sample(9, 3);
        t.access = Some(AccessRec {
            reader_pid: 9,
            exec_id: 3,
            mm_id: 0xdead_beef,
            flags: crate::ACCESS_F_EXEC,
            ..AccessRec::default()
        });
        t.vma_access = Some(AccessRec {
            reader_pid: 9,
            exec_id: 4,
            ..AccessRec::default()
        });
        let mut b = Vec::new();
        t.encode(&mut b);
        let mut asm = TaskAssembler::new();
        let got: Vec<Task> = Messages::new(&b)
            .filter_map(|m| asm.push(&m.unwrap()).unwrap())
            .collect();
        assert_eq!(got, [t]);
    }

    #[test]
    fn tasks_round_trip_including_split_ones() {
        let mut buf = Vec::new();
        write_start(
            &mut buf,
            &Start {
                version: crate::VERSION,
                ..Default::default()
            },
        );
        let tasks = [sample(10, 5), sample(11, 200_000), sample(12, 0)];
        for t in &tasks {
            t.encode(&mut buf);
        }
        write_done(
            &mut buf,
            &Done {
                tasks: 3,
                ..Default::default()
            },
        );
        let ev = StreamDecoder::decode_all(&buf).unwrap();
        let got: Vec<_> = ev
            .into_iter()
            .filter_map(|e| {
                if let Event::Task(t) = e {
                    Some(t)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(got, tasks);
    }

    #[test]
    fn unknown_attributes_and_message_types_are_skipped() {
        // A newer writer: an attribute type and a message type this reader does not know.
        let t = sample(30, 3);
        let mut buf = Vec::new();
        write_start(
            &mut buf,
            &Start {
                version: crate::VERSION,
                ..Default::default()
            },
        );
        let mut w = TaskWriter::begin(&mut buf, 30, 30);
        w.attr(40, b"future group");
        w.finish();
        let mut known = Vec::new();
        t.encode(&mut known);
        // Splice the future attribute into the known message: same task, one more attribute.
        let fut = &buf[crate::MsgHeader::SIZE + Start::SIZE + crate::MsgHeader::SIZE..];
        let mut msg = known.clone();
        msg.extend_from_slice(fut);
        let len = msg.len() as u32;
        msg[..4].copy_from_slice(&len.to_ne_bytes());
        let mut stream = buf[..crate::MsgHeader::SIZE + Start::SIZE].to_vec();
        stream.extend_from_slice(&msg);
        // An unknown message type (9) between tasks.
        let mut odd = crate::MsgHeader {
            len: 20,
            msg_type: 9,
            flags: 0,
            pid: 0,
            tgid: 0,
        }
        .to_bytes()
        .to_vec();
        odd.extend_from_slice(&[0; 4]);
        stream.extend_from_slice(&odd);
        write_done(
            &mut stream,
            &Done {
                tasks: 1,
                ..Default::default()
            },
        );
        let ev = StreamDecoder::decode_all(&stream).unwrap();
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[1], Event::Task(t));
    }

    /// A group's attribute twice in one message is one payload in two pieces, as across
    /// CONTINUED messages; the task after it is decoded in place again.
    #[test]
    fn a_group_in_two_pieces_of_one_message_is_joined() {
        let mut buf = Vec::new();
        let mut w = TaskWriter::begin(&mut buf, 7, 7);
        w.attr(Group::Cmdline as u16, b"sleep\0");
        w.attr(Group::Cmdline as u16, b"100\0");
        w.finish();
        sample(8, 5).encode(&mut buf);
        let mut asm = TaskAssembler::new();
        let got: Vec<Task> = Messages::new(&buf)
            .filter_map(|m| asm.push(&m.unwrap()).unwrap())
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].cmdline.as_deref(), Some(&b"sleep\x00100\0"[..]));
        assert_eq!(got[1], sample(8, 5));
        assert_eq!(asm.pending(), None);
    }

    #[test]
    fn interleaved_continuation_is_refused() {
        let mut a = Vec::new();
        sample(20, 100_000).encode(&mut a);
        let first = Messages::new(&a).next().unwrap().unwrap();
        let mut b = Vec::new();
        sample(21, 1).encode(&mut b);
        let other = Messages::new(&b).next().unwrap().unwrap();
        let mut asm = TaskAssembler::new();
        assert_eq!(asm.push(&first).unwrap(), None);
        assert_eq!(
            asm.push(&other),
            Err(DecodeError::Interleaved { pid: 20, next: 21 })
        );
    }
}
