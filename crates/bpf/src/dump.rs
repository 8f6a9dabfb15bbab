//! Answering requests: a request turned into the programs' configuration (the globals they
//! read before each walk), the link to walk (shared for whole-system walks, made per request
//! for one task), and the walk read to its end through `read`.

use std::io::{self, Read};

use taskdiag_proto::msg::{mark_processes, Messages, StreamReader};
use taskdiag_proto::{Group, MsgHeader, Request, Strategy, SHOW_ONE_WALK};

use crate::load::{Prog, TaskFilter, TaskFlavour};
use crate::progs::IterLink;
use crate::read::{read_messages, read_ringbuf, Tally};
use crate::{BpfError, CgroupHierarchies, DumpReport, Features, TaskIter, View, VmaWalk};

/// The groups the task programs write; any other is for the caller to fill.
const TASK_PROGRAM_GROUPS: u64 = Group::Base.flag()
    | Group::Cred.flag()
    | Group::Stat.flag()
    | Group::Statm.flag()
    | Group::Cmdline.flag()
    | Group::Signal.flag()
    | Group::Ns.flag()
    | Group::Files.flag()
    | Group::Cgroup.flag()
    | Group::Io.flag()
    | Group::Paths.flag()
    | Group::Sched.flag()
    | Group::Environ.flag()
    | Group::Security.flag()
    | Group::Delay.flag()
    | Group::Kstack.flag()
    | Group::Wchan.flag();

/// A whole-system walk expected to write fewer tasks than this reads its seq file, not the
/// ring buffer: mapping the 4 MiB ring costs about a millisecond a walk, more than the reads it
/// saves (one per 32 KiB: a few dozen here). Measured: docs/BENCHMARKS.md.
pub(crate) const RING_AT: u64 = 5000;

/// The groups only the sleepable program writes (it reads the task's memory): a request for
/// any of them walks with it.
pub(crate) const USER_MEMORY_GROUPS: u64 = Group::Cmdline.flag() | Group::Environ.flag();

impl TaskIter {
    /// Makes the following dumps for `view` (until changed).
    pub fn set_view(&mut self, view: View) {
        self.view = view;
    }

    /// The hierarchies /proc/PID/cgroup lists on this system (every task's file lists the
    /// same ones): cgroup v1 hierarchies (`v1`), and the unified one (`unified`: false where
    /// cgroup2 was never mounted). The programs write the lines the kernel would; the bounded
    /// flavour only the unified line, so on a system with v1 hierarchies its CGROUP is left
    /// to /proc ([`TaskIter::missing_groups`]). The caller, which reads /proc, says so before
    /// its dumps; the default is a unified-only system.
    pub fn set_cgroup_hierarchies(&mut self, v1: bool, unified: bool) {
        self.cgroup = CgroupHierarchies { v1, unified };
    }

    /// Whether a security module gives tasks labels (/proc/PID/attr/current reads; it fails
    /// with EINVAL for every task where none does): the programs write SECURITY only where
    /// none does, so with labels it is left to /proc ([`TaskIter::missing_groups`]). The
    /// caller, which reads /proc, says so before its dumps; the default is labels.
    pub fn set_lsm_labels(&mut self, labels: bool) {
        self.lsm_labels = labels;
    }

    /// What this kernel supports.
    pub fn features(&self) -> Features {
        self.features
    }

    /// Groups of `show_flags` these programs will not produce at all (not loaded for them, or
    /// beyond this kernel): the caller fills them for every task.
    pub fn missing_groups(&self, show_flags: u64) -> u64 {
        // Memory maps are never in the task messages: the library adds them from the map walk
        // ([`TaskIter::vma_walk`]) or, for VMA_STAT, from /proc.
        let mut have = self.groups & !taskdiag_proto::SHOW_MAPS & TASK_PROGRAM_GROUPS;
        // (A load that asked for CMDLINE and had it rejected: not in the messages either.)
        if !self.features.cmdline {
            have &= !USER_MEMORY_GROUPS;
        }
        if self.features.task == crate::TaskFlavour::Bounded {
            // PATHS's walk and KSTACK's lines need bpf_loop(); so does CGROUP's of the v1
            // hierarchies.
            have &= !(Group::Paths.flag() | Group::Kstack.flag());
            if self.cgroup.v1 {
                have &= !Group::Cgroup.flag();
            }
        }
        if self.lsm_labels {
            have &= !Group::Security.flag();
        }
        if !self.features.sched {
            have &= !crate::load::SCHED_TEXT_GROUPS;
        }
        show_flags & !have
    }

    /// Tells the whole-system walks how many tasks (threads, every pid namespace's) there are,
    /// before the first: a walk expected to write fewer than 5,000 tasks (as many as the last
    /// one of its kind, or this) reads its seq file, a larger one the ring buffer.
    pub fn expect_tasks(&mut self, threads: u64) {
        for w in &mut self.last_walk {
            w.get_or_insert(threads);
        }
    }

    fn configure(&mut self, strategy: Strategy, show: u64, parent: u32) {
        self.configure_filter(strategy, show, parent, 0, 0);
    }

    /// Configures a walk of one task or one thread group (a link with parameters), or a small
    /// whole-system walk: through the seq file. Setting up the ring buffer's mapping (~0.5-1
    /// ms) would cost more than the few reads it saves.
    pub(crate) fn configure_seq(&mut self, strategy: Strategy, show: u64) {
        self.configure(strategy, show, 0);
        if let Some(b) = self.progs.bss_mut() {
            b.cfg_ringbuf = 0;
        }
    }

    /// Reads the walk of `link` (made by [`TaskIter::attach`]) to the end.
    pub(crate) fn run_link(
        &mut self,
        link: &IterLink,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<Tally, BpfError> {
        self.run(LinkRef::Owned(link), sink)
    }

    pub(crate) fn configure_filter(
        &mut self,
        strategy: Strategy,
        show: u64,
        parent: u32,
        pid: u32,
        tgid: u32,
    ) {
        if let Some(b) = self.progs.bss_mut() {
            b.cfg_strategy = strategy as u32;
            b.cfg_show_flags = show;
            b.cfg_parent = parent;
            b.cfg_only_pid = pid;
            b.cfg_only_tgid = tgid;
            b.cfg_ringbuf = u32::from(self.features.ringbuf);
            let ns = self.view.pidns;
            b.cfg_target_ns_inum = ns.map_or(0, |n| n.inum);
            b.cfg_target_ns_level = ns.map_or(0, |n| n.level);
            b.cfg_access = u32::from(self.view.access);
            b.cfg_cgroup_v1 = u32::from(self.cgroup.v1);
            b.cfg_cgroup_no_unified = u32::from(!self.cgroup.unified);
            b.cfg_lsm_no_label = u32::from(!self.lsm_labels);
            // A new walk: CGROUP's and PATHS' texts are read again (the program keeps them
            // per walk).
            b.cfg_walk_gen = b.cfg_walk_gen.wrapping_add(1).max(1);
            b.cfg_proc_up = self.view.proc_up;
            b.cfg_boottime_off = self.view.boottime_offset_ns;
            if show & Group::Sched.flag() != 0 {
                b.cfg_oom_totalpages = oom_totalpages();
            }
        }
    }

    /// Runs `strategy` for one task (`Tid`) or one thread group (`Pid`): through the kernel's
    /// link parameters when it has them, else by filtering a full walk in the program.
    fn run_filtered(
        &mut self,
        strategy: Strategy,
        show: u64,
        cmdline: bool,
        filter: TaskFilter,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<Tally, BpfError> {
        // The link parameters name tasks in the reader's namespace; for another namespace the
        // program filters on the numbers it computes there.
        if self.features.task_params && self.view.pidns.is_none() {
            self.configure_seq(strategy, show);
            let link = self.attach(cmdline, filter)?;
            return self.run_link(&link, sink);
        }
        let (pid, tgid) = match filter {
            TaskFilter::Tid(t) => (t, 0),
            TaskFilter::Pid(p) => (0, p),
            TaskFilter::None => (0, 0),
        };
        // A full walk of ALL_THREAD visits every task; the filter keeps the wanted ones.
        self.configure_filter(Strategy::AllThread, show, 0, pid, tgid);
        if let Some(b) = self.progs.bss_mut() {
            // STAT must still be the thread-group view for ONE.
            if strategy == Strategy::One {
                b.cfg_strategy = Strategy::One as u32;
            }
        }
        let link = self.shared_link(cmdline)?;
        self.run(link, sink)
    }

    /// Answers `req`, passing chunks of whole TASK messages to `sink`.
    ///
    /// Messages flagged [`taskdiag_proto::MSG_F_FIXUP`] and groups listed in
    /// [`DumpReport::missing_groups`] are left for the caller to complete.
    pub fn dump(
        &mut self,
        req: &Request,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<DumpReport, BpfError> {
        let strategy = req.strategy().unwrap_or(Strategy::All);
        // No task has pid 0 (the kernel's link parameters would take it as "no filter").
        if strategy.takes_pid() && req.pid == 0 {
            return Err(BpfError::NoSuchTask { pid: 0 });
        }
        let all = req.all_groups();
        let cmdline = all & USER_MEMORY_GROUPS != 0 && self.features.cmdline;
        let mut report = DumpReport {
            missing_groups: self.missing_groups(all),
            ..DumpReport::default()
        };
        // Nothing the caller fills is asked of the programs.
        let show = req.show_flags & !report.missing_groups;
        let tally = match strategy {
            Strategy::All | Strategy::AllThread => {
                let kind = usize::from(strategy == Strategy::AllThread);
                if self.last_walk[kind].is_some_and(|n| n < self.ring_at) {
                    self.configure_seq(strategy, show);
                } else {
                    self.configure(strategy, show, 0);
                }
                let link = self.shared_link(cmdline)?;
                let t = self.run(link, sink)?;
                self.last_walk[kind] = Some(t.messages);
                t
            }
            Strategy::AllWithThreads => {
                let process = req.show_process & !report.missing_groups;
                self.with_threads(show, process, cmdline, sink)?
            }
            Strategy::Children => {
                let tgid = self.tgid_of(req.pid)?;
                self.configure(strategy, show, tgid);
                let link = self.shared_link(cmdline)?;
                self.run(link, sink)?
            }
            Strategy::One | Strategy::Thread => {
                // The kernel's pid parameter wants a thread-group id; task_diag's THREAD
                // accepts any tid of the group, so resolve it first.
                let filter = if strategy == Strategy::One {
                    TaskFilter::Tid(req.pid)
                } else {
                    TaskFilter::Pid(self.tgid_of(req.pid)?)
                };
                let r = self.run_filtered(strategy, show, cmdline, filter, sink)?;
                if r.messages == 0 {
                    return Err(BpfError::NoSuchTask { pid: req.pid });
                }
                r
            }
        };
        report.tasks = tally.messages;
        report.fixups = tally.fixups;
        Ok(report)
    }

    /// ALL_WITH_THREADS: every thread's record (groups `show`), and each process's own
    /// (`process`, [`taskdiag_proto::MSG_F_PROCESS`]) before its leader's. In one walk where
    /// `dump_task_both` is loaded here, or in an instance of its own loaded at the first such
    /// request ([`TaskIter::load_with_threads`]: twice the task program to verify, which a
    /// process that never asks does not pay); else, and with CMDLINE or ENVIRON (the
    /// sleepable program's), a process walk with its records marked and a thread walk:
    /// the same records, each task visited twice.
    fn with_threads(
        &mut self,
        show: u64,
        process: u64,
        cmdline: bool,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<Tally, BpfError> {
        if !cmdline && (show | process) & !SHOW_ONE_WALK == 0 {
            if self.features.both {
                return self.both_walk(show, process, sink);
            }
            // (Not where this process may load nothing: a server that gave up its privileges.)
            if self.features.task == TaskFlavour::Loop && crate::may_load_bpf() {
                if self.both.is_none() {
                    let it = TaskIter::load_with_threads(self.groups).ok();
                    self.both = Some(it.filter(|it| it.features.both).map(Box::new));
                }
                if let Some(Some(it)) = &mut self.both {
                    it.view = self.view;
                    it.cgroup = self.cgroup;
                    it.lsm_labels = self.lsm_labels;
                    return it.both_walk(show, process, sink);
                }
            }
        }
        self.configure(Strategy::All, process, 0);
        let link = self.shared_link(cmdline)?;
        let mut marked = Vec::new();
        let procs = self.run(link, &mut |chunk| {
            marked.clear();
            marked.extend_from_slice(chunk);
            mark_processes(&mut marked);
            sink(&marked)
        })?;
        self.configure(Strategy::AllThread, show, 0);
        let link = self.shared_link(cmdline)?;
        let threads = self.run(link, sink)?;
        Ok(Tally {
            messages: procs.messages + threads.messages,
            fixups: procs.fixups || threads.fixups,
        })
    }

    /// One walk of `dump_task_both` (see [`TaskIter::with_threads`]).
    fn both_walk(
        &mut self,
        show: u64,
        process: u64,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<Tally, BpfError> {
        self.configure(Strategy::AllWithThreads, show, 0);
        if let Some(b) = self.progs.bss_mut() {
            b.cfg_show_process = process;
        }
        let link = self.attach_prog(Prog::Both, TaskFilter::None)?;
        self.run(LinkRef::Owned(&link), sink)
    }

    /// Whether the memory-map program is loaded (asked for by requests with VMA, and accepted
    /// by the kernel).
    pub fn has_vma(&self) -> bool {
        self.features.maps
    }

    /// Walks memory mappings: of thread group `tgid` (in the caller's namespace) or, with
    /// `None`, of every process. Passes chunks of [`taskdiag_proto::MSG_VMA_PIECE`] messages
    /// to `sink`: each holds back-to-back entries (a `td_vma` with the kernel's raw
    /// `vm_flags`, the raw name, padding to 4) of one process, in kernel order; a process with
    /// a large map comes in consecutive pieces. Returns the number of pieces. An entry for a
    /// file already named in this walk has no name but `name_ref` set and, in `name_key`, the
    /// key of the earlier entry that carried it.
    pub fn dump_vmas(
        &mut self,
        tgid: Option<u32>,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, BpfError> {
        let r = self.vma_walk(tgid)?.read_all(sink);
        self.configure_filter(Strategy::All, 0, 0, 0, 0);
        r
    }

    /// Starts the walk [`TaskIter::dump_vmas`] makes, to be read with
    /// [`VmaWalk::read_all`], on any thread and while this instance answers task walks: the
    /// map program has buffers of its own. It walks the processes as they are when it reaches
    /// them, as a task walk does.
    pub fn vma_walk(&mut self, tgid: Option<u32>) -> Result<VmaWalk, BpfError> {
        if !self.has_vma() {
            return Err(BpfError::Attach {
                what: "the memory-map program (not loaded for these groups)".into(),
                source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            });
        }
        let filter = match tgid {
            Some(t) if self.features.task_params => TaskFilter::Pid(t),
            _ => TaskFilter::None,
        };
        // Without link parameters the program filters by cfg_vma_tgid, which task walks read
        // meanwhile leave alone.
        if let Some(b) = self.progs.bss_mut() {
            b.cfg_vma_tgid = tgid.unwrap_or(0);
            // A new walk: every file's name is written again once (see dump_vma).
            b.cfg_vma_gen = b.cfg_vma_gen.wrapping_add(1).max(1);
        }
        let link = self.attach_prog(Prog::Vma, filter)?;
        let it = link.walk().map_err(|source| BpfError::Attach {
            what: "bpf_iter_create".into(),
            source,
        })?;
        Ok(VmaWalk {
            it,
            _link: link,
            reader: StreamReader::new(),
        })
    }

    /// The thread-group id of task `pid` (in the caller's namespace), or NoSuchTask.
    pub fn tgid_of(&mut self, pid: u32) -> Result<u32, BpfError> {
        if pid == 0 {
            return Err(BpfError::NoSuchTask { pid });
        }
        let mut tgid = None;
        self.run_filtered(Strategy::One, 0, false, TaskFilter::Tid(pid), &mut |b| {
            tgid = MsgHeader::read_from(b).map(|h| h.tgid);
            Ok(())
        })?;
        tgid.ok_or(BpfError::NoSuchTask { pid })
    }

    /// The thread-group id of task `pid` (numbered as the dumps number it: in the view's pid
    /// namespace) in the reader's own pid namespace, the numbering a memory-map walk filters
    /// by ([`TaskIter::vma_walk`]); NoSuchTask if it is not there.
    pub fn reader_tgid_of(&mut self, pid: u32) -> Result<u32, BpfError> {
        if self.view.pidns.is_none() {
            return self.tgid_of(pid);
        }
        // The ACCESS attribute carries the reader's numbers.
        let view = self.view;
        self.view.access = true;
        let mut tgid = None;
        let r = self.run_filtered(Strategy::One, 0, false, TaskFilter::Tid(pid), &mut |b| {
            for m in Messages::new(b).flatten() {
                for a in m.attrs().flatten() {
                    if a.attr_type == taskdiag_proto::ATTR_ACCESS {
                        tgid =
                            taskdiag_proto::AccessRec::read_from(a.payload).map(|a| a.reader_tgid);
                    }
                }
            }
            Ok(())
        });
        self.view = view;
        r?;
        tgid.ok_or(BpfError::NoSuchTask { pid })
    }

    /// The root directory of task `pid` (in the reader's pid namespace) as the reader's paths
    /// name it (`/` for the reader's own root), from the kernel (loaded with the memory-map
    /// program: `None` without it); NoSuchTask if there is no such task.
    pub fn root_of(&mut self, pid: u32) -> Result<Option<Vec<u8>>, BpfError> {
        if !self.has_vma() || pid == 0 {
            return Ok(None);
        }
        let filter = if self.features.task_params {
            TaskFilter::Tid(pid)
        } else {
            TaskFilter::None
        };
        if let Some(b) = self.progs.bss_mut() {
            b.cfg_root_tid = if self.features.task_params { 0 } else { pid };
        }
        let link = self.attach_prog(Prog::Root, filter)?;
        let mut it = link.walk().map_err(|source| BpfError::Attach {
            what: "bpf_iter_create".into(),
            source,
        })?;
        let mut path = Vec::new();
        it.read_to_end(&mut path).map_err(BpfError::Read)?;
        if path.is_empty() {
            return Err(BpfError::NoSuchTask { pid });
        }
        Ok(Some(path))
    }

    fn shared_link(&mut self, cmdline: bool) -> Result<LinkRef<'static>, BpfError> {
        let slot_empty = if cmdline {
            self.link_all_cmdline.is_none()
        } else {
            self.link_all.is_none()
        };
        if slot_empty {
            let l = self.attach(cmdline, TaskFilter::None)?;
            if cmdline {
                self.link_all_cmdline = Some(l);
            } else {
                self.link_all = Some(l);
            }
        }
        Ok(LinkRef::Shared(cmdline))
    }

    /// Reads one iterator to the end.
    fn run(
        &mut self,
        link: LinkRef<'_>,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<Tally, BpfError> {
        let link = match link {
            LinkRef::Owned(l) => l,
            LinkRef::Shared(true) => self.link_all_cmdline.as_ref().ok_or_else(no_link)?,
            LinkRef::Shared(false) => self.link_all.as_ref().ok_or_else(no_link)?,
        };
        let mut it = link.walk().map_err(|source| BpfError::Attach {
            what: "bpf_iter_create".into(),
            source,
        })?;
        // As configured for this walk (configure_filter).
        let ring = self.progs.bss().is_some_and(|b| b.cfg_ringbuf != 0);
        if ring {
            return read_ringbuf(&mut it, self.progs.ring(), sink);
        }
        read_messages(&mut it, &mut self.reader, sink)
    }
}

fn no_link() -> BpfError {
    BpfError::Attach {
        what: "shared link".into(),
        source: io::Error::from_raw_os_error(libc::EBADF),
    }
}

enum LinkRef<'a> {
    Owned(&'a IterLink),
    Shared(bool),
}

/// RAM + swap in pages, as proc_oom_score() divides by (totalram_pages() + total_swap_pages):
/// sysinfo(2) gives both, in bytes on 64-bit kernels (mem_unit 1) or in mem_unit units. 0
/// (SCHED then from /proc) if it fails.
fn oom_totalpages() -> u64 {
    // SAFETY: sysinfo only writes the struct it is given; zeroes are a valid sysinfo.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: `si` is a valid, writable sysinfo.
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return 0;
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page <= 0 {
        return 0;
    }
    let unit = u64::from(si.mem_unit.max(1));
    (si.totalram as u64 * unit + si.totalswap as u64 * unit) / page as u64
}
