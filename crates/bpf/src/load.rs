//! Opening, loading and attaching the programs.
//!
//! A load opens the skeleton with only the programs the expected requests need (verifying a
//! program is most of a one-shot dump's cost), resolves CO-RE relocations against a reduced
//! copy of the kernel's BTF when it can (`btf_min`), falls back step by step (full BTF, then
//! without the sleepable CMDLINE program) and writes the machine constants the programs need.
//! Attaching creates an iterator link, with the kernel's tid/pid link parameters when a walk is
//! for one task or one thread group.

use std::collections::HashSet;
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::Link;
use taskdiag_proto::msg::StreamReader;
use taskdiag_proto::Group;

use crate::btf_min;
use crate::probe::{disable_from_env, is_perm, may_load_bpf, possible_cpus};
use crate::skel::{TaskdiagSkel, TaskdiagSkelBuilder};
use crate::{BpfError, Features, TaskIter, View};

/// Which program to attach.
#[derive(Clone, Copy)]
pub(crate) enum Prog {
    Task,
    Cmdline,
    Vma,
    Root,
}

/// Which tasks an iterator link walks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TaskFilter {
    /// Every task.
    None,
    /// One task, by its id in the reader's pid namespace.
    Tid(u32),
    /// One thread group, by its id in the reader's pid namespace.
    Pid(u32),
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
        // /proc's rule on current kernels, until a comparison with /proc says otherwise
        // (TaskIter::set_rss_sum).
        b.cfg_rss_sum = 1;
        b.cfg_wq_full_id = u32::from(btf_min::kernel_facts().wq_worker_full_id);
    }
    open.load()
}

impl TaskIter {
    /// Loads and verifies every program.
    pub fn load() -> Result<Self, BpfError> {
        Self::load_for(taskdiag_proto::SHOW_SUPPORTED)
    }

    /// Loads only the programs that requests for `show_flags` need. Verifying a program is
    /// most of a one-shot dump's cost, so a command that wants no CMDLINE skips the sleepable
    /// program. Requests for other groups are still answered (CMDLINE then comes from /proc,
    /// see [`crate::DumpReport::missing_groups`]).
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
            reader: StreamReader::new(),
        };
        it.features.task_params = it.probe_task_params();
        disable_from_env(&mut it.features);
        Ok(it)
    }

    /// Attaches the task program (with CMDLINE or without) for `filter`.
    pub(crate) fn attach(&self, cmdline: bool, filter: TaskFilter) -> Result<Link, BpfError> {
        self.attach_prog(if cmdline { Prog::Cmdline } else { Prog::Task }, filter)
    }

    /// Attaches `which` for `filter`: a new iterator link, with the kernel's link parameters
    /// for one task or one thread group.
    pub(crate) fn attach_prog(&self, which: Prog, filter: TaskFilter) -> Result<Link, BpfError> {
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
}

/// Routes libbpf's own messages to standard error only when `TASKDIAG_DEBUG` is set. Failures
/// reach callers as [`BpfError`]s; libbpf's lines ("failed to load BPF skeleton ...") would
/// otherwise reach the terminal of every unprivileged user whose `auto` backend falls back to
/// /proc.
pub(crate) fn quiet_libbpf() {
    fn print(_level: libbpf_rs::PrintLevel, msg: String) {
        if std::env::var_os("TASKDIAG_DEBUG").is_some() {
            eprint!("{msg}");
        }
    }
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, print)));
}
