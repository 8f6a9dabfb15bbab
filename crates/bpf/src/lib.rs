//! The BPF backend of taskdiag: eBPF task iterators that write taskdiag messages in the kernel.
//!
//! This crate owns the BPF C programs (`src/bpf/`) and the libbpf glue that loads them once,
//! configures them per request, attaches iterators (with the kernel's tid/pid link parameters for
//! ONE and THREAD, so those never walk every task) and streams what they write. The record
//! layouts come from `taskdiag-proto` through a generated C header; turning the stream into
//! output, and filling the groups a kernel cannot provide from /proc, is the `taskdiag` crate's
//! job: this crate reports those cases (see [`DumpReport`] and [`MSG_F_FIXUP`]) and does no /proc
//! I/O itself.
//!
//! Kernel requirements: BTF and `iter/task` (5.8+); CMDLINE needs sleepable iterators with
//! `bpf_copy_from_user_task` (5.18+); ONE/THREAD need task iterator link parameters (6.1+).
//! Where a feature is missing, [`Features`] says so and the affected work is reported as not
//! done, never answered with zeros.

use std::collections::HashSet;
use std::io::{self, Read};
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Iter, Link};
use taskdiag_proto::msg::{message_len, DecodeError};
use taskdiag_proto::{Group, MsgHeader, Request, Strategy};

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
}

mod btf_min;

use skel::{TaskdiagSkel, TaskdiagSkelBuilder};

/// Message flag set by the BPF program on a message that carries a GROUP_ERROR with
/// [`taskdiag_proto::ERRNO_NEEDS_PROCFS`]: a group did not fit and must be read from /proc.
/// Internal to taskdiag; the library clears it before output.
pub const MSG_F_FIXUP: u16 = 0x8000;

/// Errors of the BPF backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BpfError {
    /// The caller may not load BPF programs.
    #[error(
        "loading BPF programs needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, i.e. root): {0}"
    )]
    PermissionDenied(#[source] libbpf_rs::Error),
    /// Loading or verifying the programs failed for another reason.
    #[error("loading the taskdiag BPF programs: {0}")]
    Load(#[source] libbpf_rs::Error),
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

/// What this kernel lets the programs do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// CMDLINE (sleepable iterator with `bpf_copy_from_user_task`).
    pub cmdline: bool,
    /// Task iterator link parameters (tid/pid), for ONE and THREAD.
    pub task_params: bool,
    /// Output through a BPF ring buffer (a few read()s per dump) rather than the iterator's
    /// seq file (one read() per 32 KiB).
    pub ringbuf: bool,
    /// CO-RE relocations were resolved against a reduced copy of the kernel's BTF (faster to
    /// load; see btf_min.rs) rather than the whole of it.
    pub reduced_btf: bool,
}

/// The outcome of a dump.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpReport {
    /// Tasks written.
    pub tasks: u64,
    /// Requested groups this kernel could not produce at all (e.g. CMDLINE before 5.18): the
    /// caller must fill them for every task.
    pub missing_groups: u64,
    /// Whether some message carries [`MSG_F_FIXUP`].
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
}

/// Which program to attach.
#[derive(Clone, Copy)]
enum Prog {
    Task,
    Cmdline,
    Vma,
    Root,
}

/// The loaded task iterator programs. Load once, dump many times.
pub struct TaskIter {
    view: View,
    skel: TaskdiagSkel<'static>,
    /// Groups the programs were loaded for.
    groups: u64,
    features: Features,
    link_all: Option<Link>,
    link_all_cmdline: Option<Link>,
    buf: Vec<u8>,
}

/// Whether a load failure is for lack of privilege (rather than, say, a verifier rejection,
/// which the kernel also reports as EACCES).
fn is_perm(e: &libbpf_rs::Error) -> bool {
    matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied) && !may_load_bpf()
}

/// Whether this process has CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON, in its effective set.
pub fn may_load_bpf() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two `Data` entries for _LINUX_CAPABILITY_VERSION_3 into `d`.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    if r != 0 {
        return false;
    }
    let eff = (d[1].effective as u64) << 32 | d[0].effective as u64;
    let has = |c: u32| eff & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// The essential names of the types the programs' BTF defines: what CO-RE may relocate.
fn local_type_names() -> Option<HashSet<Vec<u8>>> {
    let mut obj = MaybeUninit::uninit();
    let open = TaskdiagSkelBuilder::default().open(&mut obj).ok()?;
    let raw = libbpf_rs::AsRawLibbpf::as_libbpf_object(open.open_object());
    // SAFETY: `raw` is the open object, alive until `open` is dropped below; the BTF it
    // returns belongs to it, and every pointer read from it is checked for NULL.
    unsafe {
        let btf = libbpf_sys::bpf_object__btf(raw.as_ptr());
        if btf.is_null() {
            return None;
        }
        let mut names = HashSet::new();
        for id in 1..libbpf_sys::btf__type_cnt(btf) {
            let t = libbpf_sys::btf__type_by_id(btf, id);
            if t.is_null() {
                continue;
            }
            let name = libbpf_sys::btf__name_by_offset(btf, (*t).name_off);
            if !name.is_null() {
                let s = std::ffi::CStr::from_ptr(name).to_bytes();
                if !s.is_empty() {
                    names.insert(btf_min::essential(s).to_vec());
                }
            }
        }
        Some(names)
    }
}

/// Opens and loads the programs; with `min_btf`, CO-RE against that reduced kernel BTF.
fn open_skel(
    with_cmdline: bool,
    groups: u64,
    min_btf: Option<&btf_min::MinBtf>,
) -> Result<TaskdiagSkel<'static>, libbpf_rs::Error> {
    // The skeleton borrows its object for as long as it lives; a loaded TaskIter is meant to
    // live as long as the process (load once, reuse), so the object is leaked on purpose.
    let obj: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
        Box::leak(Box::new(MaybeUninit::uninit()));
    let opts = libbpf_sys::bpf_object_open_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_object_open_opts>() as _,
        btf_custom_path: min_btf.map_or(std::ptr::null(), |m| m.path.as_ptr()),
        ..Default::default()
    };
    let mut open = match min_btf {
        Some(_) => TaskdiagSkelBuilder::default().open_opts(opts, obj)?,
        None => TaskdiagSkelBuilder::default().open(obj)?,
    };
    open.progs.dump_task_cmdline.set_autoload(with_cmdline);
    open.progs.walk_vma_floor.set_autoload(false);
    open.progs
        .task_root
        .set_autoload(groups & taskdiag_proto::SHOW_MAPS != 0);
    open.progs
        .dump_vma
        .set_autoload(groups & taskdiag_proto::SHOW_MAPS != 0);
    // Test hook: a small ring exercises the full-ring/retry path with few tasks.
    if let Some(size) = std::env::var("TASKDIAG_BPF_RINGBUF_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        open.maps.out_rb.set_max_entries(size)?;
    }
    if let Some(r) = open.maps.rodata_data.as_deref_mut() {
        r.ro_groups = groups;
    }
    // SAFETY: sysconf and getpagesize have no memory-safety preconditions.
    let (tck, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if let Some(d) = open.maps.data_data.as_deref_mut() {
        d.cfg_ns_per_tick = 1_000_000_000 / if tck > 0 { tck as u64 } else { 100 };
        d.cfg_page_shift = if page > 0 {
            (page as u64).trailing_zeros()
        } else {
            12
        };
        d.cfg_nr_cpus = possible_cpus();
    }
    if let Some(b) = open.maps.bss_data.as_deref_mut() {
        b.cfg_rss_sum = u32::from(kernel_at_least(6, 16));
    }
    open.load()
}

/// The memory-map iterator's own cost, for benchmarks ("a raw iterator read"): loads only a
/// program that visits every mapping of every process and writes nothing, reads the iterator to
/// its end, and returns the number of mappings visited.
pub fn vma_walk_floor() -> Result<u64, BpfError> {
    quiet_libbpf();
    let mut obj = MaybeUninit::uninit();
    let open_floor = |obj| -> Result<TaskdiagSkel<'_>, libbpf_rs::Error> {
        let mut open = TaskdiagSkelBuilder::default().open(obj)?;
        open.progs.dump_task.set_autoload(false);
        open.progs.dump_task_cmdline.set_autoload(false);
        open.progs.dump_vma.set_autoload(false);
        open.load()
    };
    let skel = open_floor(&mut obj).map_err(|e| match is_perm(&e) {
        true => BpfError::PermissionDenied(e),
        false => BpfError::Load(e),
    })?;
    let attach_err = |e: libbpf_rs::Error| BpfError::Attach {
        what: "walk_vma_floor".into(),
        source: io::Error::other(e),
    };
    let link = skel.progs.walk_vma_floor.attach().map_err(attach_err)?;
    let mut it = Iter::new(&link).map_err(attach_err)?;
    let mut buf = [0u8; 4096];
    loop {
        match it.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(BpfError::Read(e)),
        }
    }
    Ok(skel.maps.bss_data.as_deref().map_or(0, |b| b.floor_vmas))
}

/// Whether the running kernel is at least `major.minor` (from uname).
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid utsname to write into.
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    let rel: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let rel = String::from_utf8_lossy(&rel);
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// Number of possible CPUs (highest id + 1), from /sys/devices/system/cpu/possible.
fn possible_cpus() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.rsplit('-').next()?.parse::<u32>().ok())
                .max()
        })
        .map_or(1, |m| m + 1)
}

impl TaskIter {
    /// Loads and verifies every program.
    pub fn load() -> Result<Self, BpfError> {
        Self::load_for(taskdiag_proto::SHOW_SUPPORTED)
    }

    /// Loads only the programs that requests for `show_flags` need. Verifying a program is
    /// most of a one-shot dump's cost, so a command that wants no CMDLINE skips the sleepable
    /// program. Requests for other groups are still answered (CMDLINE then comes from /proc,
    /// see [`DumpReport::missing_groups`]).
    pub fn load_for(show_flags: u64) -> Result<Self, BpfError> {
        quiet_libbpf();
        let want_cmdline = show_flags & Group::Cmdline.flag() != 0;
        let groups = show_flags | Group::Base.flag();
        // CO-RE against a reduced copy of the kernel's BTF (see btf_min); if that fails for
        // any reason, the load is tried again the usual way before anything else is given up.
        // Not built for a caller the kernel will refuse anyway (reading the kernel's BTF is
        // most of what a refused load would cost).
        let min_btf = match std::env::var_os("TASKDIAG_BPF_FULL_BTF") {
            None if may_load_bpf() => local_type_names().and_then(|n| btf_min::for_names(&n)),
            _ => None,
        };
        let mut reduced_btf = min_btf.is_some();
        let first = match open_skel(want_cmdline, groups, min_btf.as_ref()) {
            Err(e) if min_btf.is_some() && !is_perm(&e) => {
                reduced_btf = false;
                open_skel(want_cmdline, groups, None)
            }
            r => r,
        };
        let (skel, cmdline) = match first {
            Ok(s) => (s, want_cmdline),
            Err(e) if is_perm(&e) => return Err(BpfError::PermissionDenied(e)),
            // Without sleepable iterators the second program fails to load: go on without it.
            Err(_) => match open_skel(false, groups, None) {
                Ok(s) => {
                    reduced_btf = false;
                    (s, false)
                }
                Err(e) if is_perm(&e) => return Err(BpfError::PermissionDenied(e)),
                Err(e) => return Err(BpfError::Load(e)),
            },
        };
        let mut it = TaskIter {
            view: View::default(),
            skel,
            groups,
            features: Features {
                cmdline,
                task_params: true,
                ringbuf: true,
                reduced_btf,
            },
            link_all: None,
            link_all_cmdline: None,
            buf: vec![0; 1 << 16],
        };
        it.features.task_params = it.probe_task_params();
        // Lets tests run the paths of older kernels on this one: a comma list of features to
        // treat as missing ("cmdline", "task_params").
        if let Ok(off) = std::env::var("TASKDIAG_BPF_DISABLE") {
            for f in off.split(',') {
                match f.trim() {
                    "cmdline" => it.features.cmdline = false,
                    "task_params" => it.features.task_params = false,
                    "ringbuf" => it.features.ringbuf = false,
                    _ => {}
                }
            }
        }
        Ok(it)
    }

    /// Makes the following dumps for `view` (until changed).
    pub fn set_view(&mut self, view: View) {
        self.view = view;
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
        let mut have = self.groups & !taskdiag_proto::SHOW_MAPS;
        if !self.features.cmdline {
            have &= !Group::Cmdline.flag();
        }
        show_flags & !have
    }

    fn probe_task_params(&self) -> bool {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.attach(false, TaskFilter::Tid(tid)).is_ok()
    }

    fn attach(&self, cmdline: bool, filter: TaskFilter) -> Result<Link, BpfError> {
        self.attach_prog(if cmdline { Prog::Cmdline } else { Prog::Task }, filter)
    }

    fn attach_prog(&self, which: Prog, filter: TaskFilter) -> Result<Link, BpfError> {
        let prog = match which {
            Prog::Cmdline => &self.skel.progs.dump_task_cmdline,
            Prog::Task => &self.skel.progs.dump_task,
            Prog::Vma => &self.skel.progs.dump_vma,
            Prog::Root => &self.skel.progs.task_root,
        };
        let what = format!("{filter:?}");
        let mut info = libbpf_sys::bpf_iter_link_info::default();
        match filter {
            TaskFilter::None => {}
            TaskFilter::Tid(t) => info.task.tid = t,
            TaskFilter::Pid(p) => info.task.pid = p,
        }
        let opts = libbpf_sys::bpf_iter_attach_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_iter_attach_opts>() as _,
            link_info: if matches!(filter, TaskFilter::None) {
                std::ptr::null_mut()
            } else {
                &mut info
            },
            link_info_len: if matches!(filter, TaskFilter::None) {
                0
            } else {
                std::mem::size_of::<libbpf_sys::bpf_iter_link_info>() as _
            },
            ..Default::default()
        };
        let raw = libbpf_rs::AsRawLibbpf::as_libbpf_object(prog);
        // SAFETY: `raw` is a loaded program owned by the skeleton; `opts` and `info` outlive the
        // call, which copies what it needs.
        let ptr = unsafe { libbpf_sys::bpf_program__attach_iter(raw.as_ptr(), &opts) };
        match NonNull::new(ptr) {
            // SAFETY: a non-NULL return is a new link that we now own.
            Some(p) => Ok(unsafe { Link::from_ptr(p) }),
            None => Err(BpfError::Attach {
                what,
                source: io::Error::last_os_error(),
            }),
        }
    }

    fn configure(&mut self, strategy: Strategy, show: u64, parent: u32) {
        self.configure_filter(strategy, show, parent, 0, 0);
    }

    fn configure_filter(
        &mut self,
        strategy: Strategy,
        show: u64,
        parent: u32,
        pid: u32,
        tgid: u32,
    ) {
        if let Some(b) = self.skel.maps.bss_data.as_deref_mut() {
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
    ) -> Result<(u64, bool), BpfError> {
        // The link parameters name tasks in the reader's namespace; for another namespace the
        // program filters on the numbers it computes there.
        if self.features.task_params && self.view.pidns.is_none() {
            self.configure(strategy, show, 0);
            // One task or one thread group: through the seq file. Setting up the ring
            // buffer's mapping (~0.5 ms) would cost more than the few reads it saves.
            if let Some(b) = self.skel.maps.bss_data.as_deref_mut() {
                b.cfg_ringbuf = 0;
            }
            let link = self.attach(cmdline, filter)?;
            return self.run(LinkRef::Owned(&link), sink);
        }
        let (pid, tgid) = match filter {
            TaskFilter::Tid(t) => (t, 0),
            TaskFilter::Pid(p) => (0, p),
            TaskFilter::None => (0, 0),
        };
        // A full walk of ALL_THREAD visits every task; the filter keeps the wanted ones.
        self.configure_filter(Strategy::AllThread, show, 0, pid, tgid);
        if let Some(b) = self.skel.maps.bss_data.as_deref_mut() {
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
    /// Messages flagged [`MSG_F_FIXUP`] and groups listed in [`DumpReport::missing_groups`]
    /// are left for the caller to complete.
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
        let want_cmdline = req.wants(Group::Cmdline);
        let cmdline = want_cmdline && self.features.cmdline;
        let mut report = DumpReport {
            missing_groups: self.missing_groups(req.show_flags),
            ..DumpReport::default()
        };
        let show = req.show_flags;
        let (tasks, fixups) = match strategy {
            Strategy::All | Strategy::AllThread => {
                self.configure(strategy, show, 0);
                let link = self.shared_link(cmdline)?;
                self.run(link, sink)?
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
                if r.0 == 0 {
                    return Err(BpfError::NoSuchTask { pid: req.pid });
                }
                r
            }
        };
        report.tasks = tasks;
        report.fixups = fixups;
        Ok(report)
    }

    /// Whether the memory-map program is loaded (requests with VMA).
    pub fn has_vma(&self) -> bool {
        self.groups & taskdiag_proto::SHOW_MAPS != 0
    }

    /// Walks memory mappings: of thread group `tgid` (in the caller's namespace) or, with
    /// `None`, of every process. Passes chunks of [`taskdiag_proto::MSG_VMA_PIECE`] messages
    /// to `sink`: each holds back-to-back entries (a `td_vma` with the kernel's raw
    /// `vm_flags`, the raw name, padding to 4) of one process, in kernel order; a process with
    /// a large map comes in consecutive pieces. Returns the number of pieces. An entry for a
    /// file already named in this walk has no name but `reserved` 1 and, in `reserved2`, the
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
        if let Some(b) = self.skel.maps.bss_data.as_deref_mut() {
            b.cfg_vma_tgid = tgid.unwrap_or(0);
            // A new walk: every file's name is written again once (see dump_vma).
            b.cfg_vma_gen = b.cfg_vma_gen.wrapping_add(1).max(1);
        }
        let link = self.attach_prog(Prog::Vma, filter)?;
        let it = Iter::new(&link).map_err(|e| BpfError::Attach {
            what: "bpf_iter_create".into(),
            source: io::Error::other(e),
        })?;
        Ok(VmaWalk {
            it,
            _link: link,
            buf: vec![0; 1 << 16],
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
            for m in taskdiag_proto::msg::Messages::new(b).flatten() {
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
        if let Some(b) = self.skel.maps.bss_data.as_deref_mut() {
            b.cfg_root_tid = if self.features.task_params { 0 } else { pid };
        }
        let link = self.attach_prog(Prog::Root, filter)?;
        let mut it = Iter::new(&link).map_err(|e| BpfError::Attach {
            what: "bpf_iter_create".into(),
            source: io::Error::other(e),
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

    /// Reads one iterator to the end. Returns (tasks, any fixup flagged).
    fn run(
        &mut self,
        link: LinkRef<'_>,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(u64, bool), BpfError> {
        let link = match link {
            LinkRef::Owned(l) => l,
            LinkRef::Shared(true) => self.link_all_cmdline.as_ref().ok_or_else(no_link)?,
            LinkRef::Shared(false) => self.link_all.as_ref().ok_or_else(no_link)?,
        };
        let mut it = Iter::new(link).map_err(|e| BpfError::Attach {
            what: "bpf_iter_create".into(),
            source: io::Error::other(e),
        })?;
        // As configured for this walk (configure_filter).
        let ring = self
            .skel
            .maps
            .bss_data
            .as_deref()
            .is_some_and(|b| b.cfg_ringbuf != 0);
        if ring {
            return read_ringbuf(&mut it, &self.skel.maps.out_rb, sink);
        }
        let mut buf = std::mem::take(&mut self.buf);
        let r = read_messages(&mut it, &mut buf, sink);
        self.buf = buf;
        r
    }
}

/// A memory-map walk being read ([`TaskIter::vma_walk`]).
pub struct VmaWalk {
    it: Iter,
    _link: Link,
    buf: Vec<u8>,
}

impl VmaWalk {
    /// Reads the walk to its end, passing chunks of whole messages to `sink`; returns the
    /// number of pieces. Through the seq file, whatever the task walk uses: the program
    /// gathers a process's entries and writes them at the next task, so its last write is in
    /// the call that ends the walk, which the kernel retries only for the seq buffer.
    pub fn read_all(
        mut self,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, BpfError> {
        read_messages(&mut self.it, &mut self.buf, sink).map(|(n, _)| n)
    }
}

/// Counts the messages of a chunk of whole messages, and whether any needs a fixup.
fn account(chunk: &[u8], offset: usize) -> Result<(u64, bool), BpfError> {
    let (mut tasks, mut fixups, mut pos) = (0u64, false, 0usize);
    while pos < chunk.len() {
        let len = message_len(&chunk[pos..], offset + pos).map_err(BpfError::Decode)?;
        if pos + len > chunk.len() {
            let have = chunk.len() - pos;
            return Err(BpfError::Decode(DecodeError::Truncated {
                offset: offset + pos,
                need: len,
                have,
            }));
        }
        fixups |= u16::from_ne_bytes([chunk[pos + 6], chunk[pos + 7]]) & MSG_F_FIXUP != 0;
        tasks += 1;
        pos += len;
    }
    Ok((tasks, fixups))
}

/// Drives an iterator whose program writes to the ring buffer: each read() walks tasks until
/// the ring is full (EAGAIN) or the walk ends (0); the ring is drained after each.
fn read_ringbuf(
    it: &mut Iter,
    map: &libbpf_rs::MapMut<'_>,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<(u64, bool), BpfError> {
    use std::cell::RefCell;
    let chunk = RefCell::new(Vec::<u8>::with_capacity(1 << 20));
    let mut builder = libbpf_rs::RingBufferBuilder::new();
    builder
        .add(map, |rec: &[u8]| {
            chunk.borrow_mut().extend_from_slice(rec);
            0
        })
        .map_err(|e| BpfError::Attach {
            what: "ring buffer".into(),
            source: io::Error::other(e),
        })?;
    let rb = builder.build().map_err(|e| BpfError::Attach {
        what: "ring buffer".into(),
        source: io::Error::other(e),
    })?;
    let (mut tasks, mut fixups, mut offset) = (0u64, false, 0usize);
    let mut seq = [0u8; 64];
    loop {
        let r = it.read(&mut seq);
        rb.consume()
            .map_err(|e| BpfError::Read(io::Error::other(e)))?;
        let mut c = chunk.borrow_mut();
        let drained = !c.is_empty();
        if drained {
            let (n, f) = account(&c, offset)?;
            tasks += n;
            fixups |= f;
            offset += c.len();
            sink(&c).map_err(BpfError::Sink)?;
            c.clear();
        }
        match r {
            Ok(0) => return Ok((tasks, fixups)),
            // The program writes nothing to the seq file in this mode.
            Ok(_) => return Err(BpfError::Read(io::Error::other("unexpected seq output"))),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The ring was full: drained above, and the task is retried by this read().
            // Or a million tasks were walked without output (the kernel's per-read limit).
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(e) => return Err(BpfError::Read(e)),
        }
    }
}

/// Reads an iterator to the end, passing complete messages to `sink`.
fn read_messages(
    it: &mut Iter,
    buf: &mut Vec<u8>,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<(u64, bool), BpfError> {
    {
        let mut tasks = 0u64;
        let mut fixups = false;
        let mut have = 0usize;
        let mut offset = 0usize;
        loop {
            if buf.len() - have < taskdiag_proto::MSG_MAX {
                buf.resize(buf.len() * 2, 0);
            }
            let n = match it.read(&mut buf[have..]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(BpfError::Read(e)),
            };
            have += n;
            // Walk the complete messages; keep a partial one for the next read.
            let mut pos = 0usize;
            while pos < have {
                let len = match message_len(&buf[pos..have], offset + pos) {
                    Ok(len) if pos + len <= have => len,
                    Ok(_) | Err(DecodeError::Truncated { .. }) => break,
                    Err(e) => return Err(BpfError::Decode(e)),
                };
                let flags = u16::from_ne_bytes([buf[pos + 6], buf[pos + 7]]);
                fixups |= flags & MSG_F_FIXUP != 0;
                tasks += 1;
                pos += len;
            }
            if pos > 0 {
                sink(&buf[..pos]).map_err(BpfError::Sink)?;
                buf.copy_within(pos..have, 0);
                have -= pos;
                offset += pos;
            }
        }
        if have != 0 {
            return Err(BpfError::Decode(DecodeError::Truncated {
                offset,
                need: 16,
                have,
            }));
        }
        Ok((tasks, fixups))
    }
}

fn no_link() -> BpfError {
    BpfError::Attach {
        what: "shared link".into(),
        source: io::Error::from_raw_os_error(libc::EBADF),
    }
}

enum LinkRef<'a> {
    Owned(&'a Link),
    Shared(bool),
}

#[derive(Debug, Clone, Copy)]
enum TaskFilter {
    None,
    Tid(u32),
    Pid(u32),
}

/// Routes libbpf's own messages to standard error only when `TASKDIAG_DEBUG` is set. Failures
/// reach callers as [`BpfError`]s; libbpf's lines ("failed to load BPF skeleton ...") would
/// otherwise reach the terminal of every unprivileged user whose `auto` backend falls back to
/// /proc.
fn quiet_libbpf() {
    fn print(_level: libbpf_rs::PrintLevel, msg: String) {
        if std::env::var_os("TASKDIAG_DEBUG").is_some() {
            eprint!("{msg}");
        }
    }
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, print)));
}
