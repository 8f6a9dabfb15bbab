//! Opening, loading and attaching the programs.
//!
//! A load opens the skeleton with only the programs the expected requests need (verifying a
//! program is most of a one-shot dump's cost), resolves CO-RE relocations against a reduced
//! copy of the kernel's BTF when it can (`btf_min`) and writes the machine constants the
//! programs need. Which programs load is found out by loading them, not from the kernel's
//! version: libbpf stops at the first program the kernel rejects and names it, and the next
//! attempt goes without it ([`Plan::after_failure`]; the modern task program is replaced by its
//! bounded flavour), so a rejected program costs only its own groups, and a load where
//! everything verifies is one attempt. What was rejected is remembered for the process's next
//! loads. Attaching creates an iterator link, with the kernel's tid/pid link parameters when a
//! walk is for one task or one thread group.

use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::mem::MaybeUninit;
use std::sync::Mutex;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use taskdiag_proto::msg::StreamReader;
use taskdiag_proto::Group;

use crate::btf_min;
use crate::pin;
use crate::probe::{
    disable_from_env, env_disables, is_perm, kernel_btf_present, may_load_bpf, possible_cpus,
    possible_nodes,
};
use crate::progs::{IterLink, Programs};
use crate::skel::{TaskdiagSkel, TaskdiagSkelBuilder};
use crate::{BpfError, CgroupHierarchies, Features, TaskIter, View};

/// Which program to attach.
#[derive(Clone, Copy)]
pub(crate) enum Prog {
    Task,
    /// `dump_task_both` (TD_STRATEGY_ALL_WITH_THREADS).
    Both,
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

/// The task program's flavours (see taskdiag.bpf.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFlavour {
    /// `dump_task`: bpf_loop(), per-CPU counters, the current task through BTF (5.19+).
    Loop,
    /// `dump_task_bounded`: bounded loops and probe reads, for older kernels (5.8+); a process
    /// with more threads than its loop covers gets its STAT from /proc.
    Bounded,
}

/// The programs one load attempt asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The task program (always loaded: every request walks tasks).
    pub(crate) task: TaskFlavour,
    /// `dump_task_cmdline`, the sleepable program that also reads the task's own memory
    /// (CMDLINE, ENVIRON: [`crate::dump::USER_MEMORY_GROUPS`]).
    pub(crate) cmdline: bool,
    /// `dump_vma` and `task_root` (memory maps and the root directory they are named from).
    pub(crate) maps: bool,
    /// The map walk as `dump_vma_walk`, which names files with probe reads, instead of
    /// `dump_vma` (bpf_d_path()): where the kernel's verifier refuses `dump_vma`, or
    /// `TASKDIAG_BPF_DISABLE` names "d_path".
    pub(crate) vma_walk: bool,
    /// `sched_text_bounds`, the system-call program that finds the scheduler's text for the
    /// wait channel of SCHED and WCHAN (needs BPF_PROG_TYPE_SYSCALL and
    /// bpf_kallsyms_lookup_name(), 5.16+).
    pub(crate) sched: bool,
    /// CO-RE against the reduced copy of the kernel's BTF (`btf_min`).
    pub(crate) reduced_btf: bool,
    /// `dump_task_both` (ALL_WITH_THREADS in one walk; twice the task program to verify:
    /// only on request).
    pub(crate) both: bool,
}

impl Plan {
    /// The programs for requests of `groups`, the modern flavour first.
    pub(crate) fn for_groups(groups: u64, reduced_btf: bool) -> Self {
        Plan {
            task: TaskFlavour::Loop,
            cmdline: groups & crate::dump::USER_MEMORY_GROUPS != 0,
            maps: groups & taskdiag_proto::SHOW_MAPS != 0,
            vma_walk: env_disables("d_path"),
            sched: groups & SCHED_TEXT_GROUPS != 0,
            reduced_btf,
            both: false,
        }
    }

    /// The next attempt after this one failed in program `failed` (as libbpf named it; `None`
    /// when no program was named; `refused`: by the kernel's verifier, not for a missing attach
    /// target or helper): without that program (the task program's bounded flavour instead of
    /// the modern one, the map walk that names files by probe reads instead of bpf_d_path()),
    /// or once without the reduced BTF; `None` when nothing is left to try. Only what failed
    /// is given up: a rejected CMDLINE program costs CMDLINE alone.
    pub(crate) fn after_failure(self, failed: Option<&str>, refused: bool) -> Option<Self> {
        let mut next = self;
        match failed {
            Some("dump_task") if self.task == TaskFlavour::Loop => {
                next.task = TaskFlavour::Bounded;
            }
            Some("dump_task_cmdline") if self.cmdline => next.cmdline = false,
            // bpf_d_path() refused the mapping's file (kernels tighten which pointers helpers
            // take): the same walk, naming files with probe reads.
            Some("dump_vma") if self.maps && !self.vma_walk && refused => next.vma_walk = true,
            Some("dump_vma" | "dump_vma_walk" | "task_root") if self.maps => next.maps = false,
            Some("sched_text_bounds") if self.sched => next.sched = false,
            Some("dump_task_both") if self.both => next.both = false,
            _ if self.reduced_btf => next.reduced_btf = false,
            _ => return None,
        }
        Some(next)
    }

    /// This plan without what earlier loads in this process found the kernel rejects.
    fn without(self, rejected: &Plan) -> Self {
        Plan {
            task: if rejected.task == TaskFlavour::Bounded {
                TaskFlavour::Bounded
            } else {
                self.task
            },
            cmdline: self.cmdline && !rejected.cmdline,
            maps: self.maps && !rejected.maps,
            vma_walk: self.vma_walk || rejected.vma_walk,
            sched: self.sched && !rejected.sched,
            reduced_btf: self.reduced_btf && !rejected.reduced_btf,
            both: self.both && !rejected.both,
        }
    }

    /// Records in `rejected` what this plan gave up compared with `first`.
    fn note_rejected(self, first: Plan, rejected: &mut Plan) {
        if first.task != self.task {
            rejected.task = self.task;
        }
        rejected.cmdline |= first.cmdline && !self.cmdline;
        rejected.maps |= first.maps && !self.maps;
        rejected.vma_walk |= self.vma_walk && !first.vma_walk;
        rejected.sched |= first.sched && !self.sched;
        rejected.reduced_btf |= first.reduced_btf && !self.reduced_btf;
        rejected.both |= first.both && !self.both;
    }
}

/// What loads in this process found the kernel rejects (`true`: rejected; `task` Bounded: the
/// modern task program was), so that the next load (taskdiagd loads one instance per worker)
/// asks only for what loads.
static REJECTED: Mutex<Plan> = Mutex::new(NOTHING_REJECTED);

/// [`REJECTED`] before any load: nothing.
const NOTHING_REJECTED: Plan = Plan {
    task: TaskFlavour::Loop,
    cmdline: false,
    maps: false,
    vma_walk: false,
    sched: false,
    reduced_btf: false,
    both: false,
};

/// The groups whose wait channel needs the scheduler's text sections (`sched_text_bounds`):
/// written by the bpf_loop() flavour only, and from /proc where the sections were not found.
pub(crate) const SCHED_TEXT_GROUPS: u64 = Group::Sched.flag() | Group::Wchan.flag();

/// The program a libbpf warning says failed (`prog 'NAME': failed to ...`).
pub(crate) fn failed_program(msg: &str) -> Option<&str> {
    let rest = &msg[msg.find("prog '")? + 6..];
    let end = rest.find('\'')?;
    rest[end..]
        .starts_with("': failed to ")
        .then_some(&rest[..end])
}

/// The verifier's own words for program `prog` in libbpf's warnings: the last line of its log
/// (`R1 type=untrusted_ptr_ expected=...`), without the statistics after it; `None` when the
/// verifier did not refuse it (its attach target or a helper is missing, say).
pub(crate) fn verifier_reason(warnings: &[String], prog: &str) -> Option<String> {
    let begin = format!("prog '{prog}': -- BEGIN PROG LOAD LOG --");
    let log = warnings
        .iter()
        .find_map(|m| Some(&m[m.find(&begin)? + begin.len()..]))?;
    let log = log.split("-- END PROG LOAD LOG --").next().unwrap_or(log);
    let stats = [
        "processed ",
        "verification time ",
        "stack depth ",
        "mark_precise",
    ];
    log.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !stats.iter().any(|s| l.starts_with(s)))
        .map(str::to_owned)
}

/// A program the running kernel refused to load, and why (the verifier's last line, or
/// libbpf's error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The program's name (`dump_vma`, `dump_task_cmdline`, ...).
    pub program: String,
    /// The verifier's last line where it refused the program; otherwise libbpf's error.
    pub reason: String,
}

/// The programs loads in this process found the kernel refuses, each once.
static REFUSALS: Mutex<Vec<Refusal>> = Mutex::new(Vec::new());

/// The programs loads in this process found the running kernel refuses, and why: what `-s`
/// says about groups that came from /proc (or from another flavour of a program) instead.
pub fn refusals() -> Vec<Refusal> {
    REFUSALS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn note_refusal(program: &str, reason: String) {
    let mut r = REFUSALS.lock().unwrap_or_else(|e| e.into_inner());
    if !r.iter().any(|x| x.program == program) {
        r.push(Refusal {
            program: program.to_owned(),
            reason,
        });
    }
}

thread_local! {
    /// libbpf's warnings during a load on this thread (`Some` while one runs).
    static WARNINGS: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Why a load attempt failed: libbpf's error, the program libbpf named as the one that failed,
/// and whether the kernel's verifier refused it (rather than an attach target or helper the
/// kernel lacks).
struct LoadFailure {
    error: libbpf_rs::Error,
    program: Option<String>,
    refused: bool,
}

/// Opens and loads the programs of `plan`; with `min_btf`, CO-RE against that reduced kernel
/// BTF. A program that failed is recorded with its reason ([`refusals`]).
fn open_skel(
    plan: Plan,
    groups: u64,
    min_btf: Option<&btf_min::MinBtf>,
) -> Result<TaskdiagSkel<'static>, LoadFailure> {
    WARNINGS.with(|w| *w.borrow_mut() = Some(Vec::new()));
    let r = open_skel_inner(plan, groups, min_btf);
    let warnings = WARNINGS.with(|w| w.borrow_mut().take()).unwrap_or_default();
    r.map_err(|error| {
        let program = warnings
            .iter()
            .find_map(|m| failed_program(m))
            .map(str::to_owned);
        let reason = program
            .as_deref()
            .and_then(|p| verifier_reason(&warnings, p));
        if let (Some(p), false) = (&program, is_perm(&error)) {
            let why = reason.clone().unwrap_or_else(|| error.to_string());
            note_refusal(p, why);
        }
        LoadFailure {
            error,
            program,
            refused: reason.is_some(),
        }
    })
}

fn open_skel_inner(
    plan: Plan,
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
    open.progs
        .dump_task
        .set_autoload(plan.task == TaskFlavour::Loop);
    open.progs
        .dump_task_bounded
        .set_autoload(plan.task == TaskFlavour::Bounded);
    open.progs.dump_task_cmdline.set_autoload(plan.cmdline);
    open.progs
        .dump_task_both
        .set_autoload(plan.both && plan.task == TaskFlavour::Loop);
    open.progs.task_root.set_autoload(plan.maps);
    open.progs
        .dump_vma
        .set_autoload(plan.maps && !plan.vma_walk);
    open.progs
        .dump_vma_walk
        .set_autoload(plan.maps && plan.vma_walk);
    // WCHAN's memo is kept by the bpf_loop() flavour only.
    let memo_slots = if plan.task == TaskFlavour::Loop {
        wchan_memo_slots()
    } else {
        1
    };
    open.maps.wchan_memo.set_max_entries(memo_slots)?;
    // SCHED is written by the bpf_loop() flavour only.
    open.progs
        .sched_text_bounds
        .set_autoload(plan.sched && plan.task == TaskFlavour::Loop);
    // Test hook: a small ring exercises the full-ring/retry path with few tasks.
    if let Some(size) = std::env::var("TASKDIAG_BPF_RINGBUF_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        open.maps.out_rb.set_max_entries(size)?;
    }
    if let Some(r) = open.maps.rodata_data.as_deref_mut() {
        r.ro_groups = groups;
        r.ro_wchan_memo_mask = memo_slots - 1;
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
        d.cfg_nr_nodes = possible_nodes();
    }
    if let Some(b) = open.maps.bss_data.as_deref_mut() {
        // Reading the kernel's BTF for its facts is not worth it for a caller the kernel will
        // refuse anyway (every unprivileged run of a tool comes here before falling back).
        let facts = if may_load_bpf() {
            btf_min::kernel_facts()
        } else {
            btf_min::KernelFacts::default()
        };
        // /proc's rule on current kernels, until a comparison with /proc says otherwise
        // (TaskIter::set_rss_sum); nothing to sum where the counters are not per-CPU (before
        // 6.2), which the bounded flavour's STATM relies on (it cannot sum, see put_statm).
        b.cfg_rss_sum = u32::from(facts.rss_percpu);
        b.cfg_rss_percpu = u32::from(facts.rss_percpu);
        b.cfg_wq_full_id = u32::from(facts.wq_worker_full_id);
    }
    let mut skel = open.load()?;
    if plan.sched && plan.task == TaskFlavour::Loop {
        find_sched_text(&mut skel);
    }
    Ok(skel)
}

/// The slots of WCHAN's memo (`wchan_memo` in the BPF C): a power of two, twice the tasks
/// there are now, at least 4,096 (128 KiB) and at most 2^20 (32 MiB, at 500,000 tasks). Task
/// ids that collide in it share a slot (each unwound when the other holds it): a host whose
/// tasks multiply after the programs were loaded keeps the memo for part of them.
fn wchan_memo_slots() -> u32 {
    taskdiag_procfs::host_tasks()
        .unwrap_or(0)
        .saturating_mul(2)
        .clamp(1 << 12, 1 << 20)
        .next_power_of_two()
}

/// Runs `sched_text_bounds` once: it leaves the scheduler's text sections in the programs'
/// globals (or zeros, and SCHED then comes from /proc: kallsyms hides addresses, say).
fn find_sched_text(skel: &mut TaskdiagSkel<'static>) {
    let ran = skel
        .progs
        .sched_text_bounds
        .test_run(libbpf_rs::ProgramInput::default());
    let found = matches!(ran, Ok(ref out) if out.return_value == 0);
    if !found {
        if let Some(b) = skel.maps.bss_data.as_deref_mut() {
            b.sched_text = [0; 4];
        }
    }
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
        Self::load_planned(show_flags, false)
    }

    /// [`TaskIter::load_for`] with `dump_task_both`, the program that answers
    /// ALL_WITH_THREADS in one walk, and without the CMDLINE and memory-map programs: for a
    /// long-lived reader of every thread and every process (the exporter). Where the kernel
    /// refuses that program, the instance has the others ([`Features::both`] false).
    pub fn load_with_threads(show_flags: u64) -> Result<Self, BpfError> {
        Self::load_planned(
            show_flags & !crate::dump::USER_MEMORY_GROUPS & !taskdiag_proto::SHOW_MAPS,
            true,
        )
    }

    /// [`TaskIter::load_for`] with `dump_task_both` too (where the kernel takes it): for a
    /// server, which loads once for its life and cannot load later (it gives up its
    /// privileges), so that its clients' ALL_WITH_THREADS is one walk.
    pub fn load_serving(show_flags: u64) -> Result<Self, BpfError> {
        Self::load_planned(show_flags, true)
    }

    fn load_planned(show_flags: u64, both: bool) -> Result<Self, BpfError> {
        quiet_libbpf();
        // Task iterators are BTF-typed programs: without the kernel's BTF none loads.
        if !kernel_btf_present() {
            return Err(BpfError::NoBtf);
        }
        let groups = show_flags | Group::Base.flag();
        // CO-RE against a reduced copy of the kernel's BTF (see btf_min); if a load fails and
        // no program is to blame, it is tried once more the usual way. Not built for a caller
        // the kernel will refuse anyway (reading the kernel's BTF is most of what a refused
        // load would cost).
        let min_btf = match std::env::var_os("TASKDIAG_BPF_FULL_BTF") {
            None if may_load_bpf() => local_type_names().and_then(|n| btf_min::for_names(&n)),
            _ => None,
        };
        let known = *REJECTED.lock().unwrap_or_else(|e| e.into_inner());
        let mut first = Plan::for_groups(groups, min_btf.is_some());
        first.both = both;
        let mut first = first.without(&known);
        if env_disables("loop") {
            first.task = TaskFlavour::Bounded;
        }
        let mut plan = first;
        // One attempt when everything loads; each program the kernel rejects costs one more
        // (libbpf stops at the first), and only its own groups.
        let skel = loop {
            let btf = if plan.reduced_btf {
                min_btf.as_ref()
            } else {
                None
            };
            match open_skel(plan, groups, btf) {
                Ok(s) => break s,
                Err(f) if is_perm(&f.error) => return Err(BpfError::PermissionDenied(f.error)),
                Err(f) => match plan.after_failure(f.program.as_deref(), f.refused) {
                    Some(next) => plan = next,
                    None => {
                        return Err(BpfError::Load {
                            program: f.program,
                            source: f.error,
                        })
                    }
                },
            }
        };
        plan.note_rejected(
            first,
            &mut REJECTED.lock().unwrap_or_else(|e| e.into_inner()),
        );
        let progs = Programs::Own {
            skel: Box::new(skel),
            pinned: None,
        };
        let mut it = TaskIter::new(
            progs,
            groups,
            plan.task,
            plan.cmdline,
            plan.maps,
            plan.reduced_btf,
        );
        if plan.both && plan.task == TaskFlavour::Loop {
            it.features.both = true;
            disable_from_env(&mut it.features);
        }
        Ok(it)
    }

    /// An instance of loaded `progs` (for `groups`; which task flavour, and whether the CMDLINE
    /// and map programs are there), its link parameters probed and the environment's
    /// disabled features applied.
    fn new(
        progs: Programs,
        groups: u64,
        task: TaskFlavour,
        cmdline: bool,
        maps: bool,
        reduced_btf: bool,
    ) -> Self {
        let vma_walk = maps && progs.vma_is_walk();
        let mut it = TaskIter {
            view: View::default(),
            progs,
            groups,
            features: Features {
                task,
                cmdline,
                maps,
                vma_walk,
                task_params: true,
                ringbuf: true,
                reduced_btf,
                sched: false,
                both: false,
            },
            link_all: None,
            link_all_cmdline: None,
            reader: StreamReader::new(),
            cgroup: CgroupHierarchies {
                v1: false,
                unified: true,
            },
            lsm_labels: true,
            last_walk: [None; 2],
            both: None,
            ring_at: if std::env::var_os("TASKDIAG_BPF_RINGBUF_SIZE").is_some() {
                0
            } else {
                crate::dump::RING_AT
            },
        };
        // Found when these programs were loaded (by this process or the one that pinned them).
        it.features.sched = task == TaskFlavour::Loop
            && groups & SCHED_TEXT_GROUPS != 0
            && it.progs.bss().is_some_and(|b| b.sched_text[0] != 0);
        it.features.task_params = it.probe_task_params();
        disable_from_env(&mut it.features);
        it
    }

    /// Programs an earlier process of this build verified on this boot and pinned (see
    /// `pin`), in a slot no other process holds: no loading at all. `None` when there are none
    /// to take, or this process could not load the programs itself (no new privilege).
    pub fn reuse_pinned() -> Option<Self> {
        // A kernel without BTF has none to reuse (and a test hiding it means "no BTF").
        if !kernel_btf_present() {
            return None;
        }
        Self::from_slot(pin::Slot::open()?)
    }

    /// The programs of a slot this process holds; `None` if it has no task program.
    pub(crate) fn from_slot(slot: pin::Slot) -> Option<Self> {
        quiet_libbpf();
        let task = slot.flavour()?;
        let has = |p| slot.prog(pin::prog_name(p, task)).is_some();
        let (cmdline, maps) = (has(Prog::Cmdline), has(Prog::Vma) && has(Prog::Root));
        let groups = taskdiag_proto::SHOW_SUPPORTED | Group::Base.flag();
        let progs = Programs::Pinned(Box::new(slot));
        Some(TaskIter::new(progs, groups, task, cmdline, maps, false))
    }

    /// Programs verified once per boot: pinned ones when a slot is free
    /// ([`TaskIter::reuse_pinned`]), else [`TaskIter::load_and_pin`].
    pub fn load_shared(show_flags: u64) -> Result<Self, BpfError> {
        match Self::reuse_pinned() {
            Some(it) => Ok(it),
            None => Self::load_and_pin(show_flags),
        }
    }

    /// For a caller that found no pinned programs to reuse: every program loaded and pinned
    /// for later processes; or, where programs cannot be shared (bpffs unavailable,
    /// `TASKDIAG_BPF_PIN=0`, a caller without the privilege to load, every slot pinned), only
    /// those `show_flags` needs, as [`TaskIter::load_for`].
    pub fn load_and_pin(show_flags: u64) -> Result<Self, BpfError> {
        if !pin::possible() {
            return Self::load_for(show_flags);
        }
        let mut it = Self::load_for(taskdiag_proto::SHOW_SUPPORTED)?;
        it.progs.pin();
        Ok(it)
    }

    /// Where the programs in use are pinned, if they are (shared with other processes).
    pub fn pinned_at(&self) -> Option<&std::path::Path> {
        self.progs.pinned_at()
    }

    /// How many instructions the kernel's verifier processed to accept the task program
    /// (`bpf_prog_info.verified_insns`, Linux 5.16+; `None` before): its load cost, in a unit
    /// that does not depend on the machine's speed.
    pub fn task_verified_insns(&self) -> Option<u32> {
        let fd = self
            .progs
            .prog(pin::prog_name(Prog::Task, self.features.task))?;
        crate::progs::prog_info(fd)
            .map(|info| info.verified_insns)
            .filter(|&n| n > 0)
    }

    /// Attaches the task program (with CMDLINE or without) for `filter`.
    pub(crate) fn attach(&self, cmdline: bool, filter: TaskFilter) -> Result<IterLink, BpfError> {
        self.attach_prog(if cmdline { Prog::Cmdline } else { Prog::Task }, filter)
    }

    /// Attaches `which` for `filter`: a new iterator link, with the kernel's link parameters
    /// for one task or one thread group.
    pub(crate) fn attach_prog(
        &self,
        which: Prog,
        filter: TaskFilter,
    ) -> Result<IterLink, BpfError> {
        let what = format!("{filter:?}");
        let name = pin::prog_name(which, self.features.task);
        let prog = self.progs.prog(name).ok_or_else(|| BpfError::Attach {
            what: format!("{what}: program {name} not loaded"),
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        })?;
        let mut info = libbpf_sys::bpf_iter_link_info::default();
        let info = match filter {
            TaskFilter::None => None,
            TaskFilter::Tid(t) => {
                info.task.tid = t;
                Some(&mut info)
            }
            TaskFilter::Pid(p) => {
                info.task.pid = p;
                Some(&mut info)
            }
        };
        IterLink::attach(prog, info).map_err(|source| BpfError::Attach { what, source })
    }
}

/// Routes libbpf's own messages to standard error only when `TASKDIAG_DEBUG` is set. Failures
/// reach callers as [`BpfError`]s; libbpf's lines ("failed to load BPF skeleton ...") would
/// otherwise reach the terminal of every unprivileged user whose `auto` backend falls back to
/// /proc.
pub fn quiet_libbpf() {
    fn print(level: libbpf_rs::PrintLevel, msg: String) {
        if std::env::var_os("TASKDIAG_DEBUG").is_some() {
            eprint!("{msg}");
        }
        // A load in progress on this thread keeps the warnings (open_skel looks for the
        // program that failed).
        if level == libbpf_rs::PrintLevel::Warn {
            WARNINGS.with(|w| {
                if let Some(w) = w.borrow_mut().as_mut() {
                    w.push(msg);
                }
            });
        }
    }
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, print)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wchan_memo_has_room_for_twice_the_tasks_within_its_bounds() {
        let tasks = taskdiag_procfs::host_tasks().expect("tasks in /proc/loadavg");
        let slots = wchan_memo_slots();
        assert!(slots.is_power_of_two(), "{slots}");
        assert!((1 << 12..=1 << 20).contains(&slots), "{slots}");
        // (Tasks come and go between the two reads: a margin of a quarter.)
        assert!(
            slots >= (tasks * 3 / 2).min(1 << 20),
            "{slots} slots for {tasks} tasks"
        );
    }

    #[test]
    fn libbpf_warnings_name_the_program_that_failed() {
        assert_eq!(
            failed_program("libbpf: prog 'dump_task_cmdline': failed to load: -EACCES\n"),
            Some("dump_task_cmdline")
        );
        assert_eq!(
            failed_program(
                "libbpf: prog 'dump_vma': failed to find kernel BTF type ID of \
                 'bpf_iter_task_vma': -ESRCH\n"
            ),
            Some("dump_vma")
        );
        // Other warnings about a program, and warnings about no program, name none.
        assert_eq!(
            failed_program("libbpf: prog 'dump_task': BPF program load failed: -EINVAL\n"),
            None
        );
        assert_eq!(
            failed_program("libbpf: failed to load object 'taskdiag_bpf'\n"),
            None
        );
        assert_eq!(failed_program("libbpf: prog '"), None);
    }

    #[test]
    fn the_verifiers_last_line_is_the_reason() {
        let log = "libbpf: prog 'dump_vma': -- BEGIN PROG LOAD LOG --\n\
                   0: R1=ctx() R10=fp0\n\
                   552: (85) call bpf_d_path#147\n\
                   R1 type=untrusted_ptr_ expected=ptr_, trusted_ptr_, rcu_ptr_\n\
                   processed 1719 insns (limit 1000000) max_states_per_insn 4\n\
                   -- END PROG LOAD LOG --\n";
        let w = vec![
            "libbpf: prog 'dump_vma': BPF program load failed: -EACCES\n".to_string(),
            log.to_string(),
            "libbpf: prog 'dump_vma': failed to load: -EACCES\n".to_string(),
        ];
        assert_eq!(
            verifier_reason(&w, "dump_vma").as_deref(),
            Some("R1 type=untrusted_ptr_ expected=ptr_, trusted_ptr_, rcu_ptr_")
        );
        // Another program's log, or none (a missing attach target): no reason.
        assert_eq!(verifier_reason(&w, "task_root"), None);
        assert_eq!(verifier_reason(&w[2..], "dump_vma"), None);
    }

    #[test]
    fn a_rejected_program_costs_only_its_own_groups() {
        let all = Plan::for_groups(taskdiag_proto::SHOW_SUPPORTED, true);
        assert_eq!(
            all,
            Plan {
                task: TaskFlavour::Loop,
                cmdline: true,
                maps: true,
                vma_walk: false,
                sched: true,
                reduced_btf: true,
                both: false,
            }
        );
        // The one-walk program, asked for, is dropped alone.
        let both = Plan { both: true, ..all };
        assert_eq!(both.after_failure(Some("dump_task_both"), true), Some(all));
        // Each program named drops that program (the modern task program: its bounded
        // flavour instead), and nothing else.
        let bounded = all.after_failure(Some("dump_task"), true).unwrap();
        assert_eq!(
            bounded,
            Plan {
                task: TaskFlavour::Bounded,
                ..all
            }
        );
        let no_cmdline = bounded
            .after_failure(Some("dump_task_cmdline"), true)
            .unwrap();
        assert_eq!(
            no_cmdline,
            Plan {
                cmdline: false,
                ..bounded
            }
        );
        // The map walk refused with bpf_d_path(): the walk that names files with probe reads;
        // that one refused too, or task_root: no map walk.
        let walk = all.after_failure(Some("dump_vma"), true).unwrap();
        assert_eq!(
            walk,
            Plan {
                vma_walk: true,
                ..all
            }
        );
        for (plan, p) in [
            (walk, "dump_vma_walk"),
            (walk, "task_root"),
            (all, "task_root"),
        ] {
            assert_eq!(
                plan.after_failure(Some(p), true),
                Some(Plan {
                    maps: false,
                    ..plan
                })
            );
        }
        // What this process found refused is not asked for again.
        let mut rejected = NOTHING_REJECTED;
        walk.note_rejected(all, &mut rejected);
        assert!(rejected.vma_walk && !rejected.maps);
        assert_eq!(all.without(&rejected), walk);
        assert_eq!(
            all.after_failure(Some("sched_text_bounds"), true),
            Some(Plan {
                sched: false,
                ..all
            })
        );
        // A failure no program is to blame for (or a program named twice): once more without
        // the reduced BTF, then nothing is left to try.
        let full = no_cmdline.after_failure(None, false).unwrap();
        assert_eq!(
            full,
            Plan {
                reduced_btf: false,
                ..no_cmdline
            }
        );
        assert_eq!(full.after_failure(None, false), None);
        assert_eq!(full.after_failure(Some("dump_task_cmdline"), true), None);
        assert_eq!(full.after_failure(Some("dump_task_bounded"), true), None);
        // The 5.10 sequence for every group: five attempts, ending with the bounded task
        // program alone.
        let mut p = all;
        for failed in [
            "sched_text_bounds",
            "dump_task",
            "dump_task_cmdline",
            "dump_vma",
        ] {
            // iter/task_vma is missing (the kernel names no verifier log): no second walk.
            p = p.after_failure(Some(failed), false).unwrap();
        }
        assert_eq!(
            p,
            Plan {
                task: TaskFlavour::Bounded,
                cmdline: false,
                maps: false,
                vma_walk: false,
                sched: false,
                reduced_btf: true,
                both: false,
            }
        );
    }

    #[test]
    fn later_loads_skip_what_the_kernel_rejected() {
        let all = Plan::for_groups(taskdiag_proto::SHOW_SUPPORTED, true);
        let loaded = Plan {
            task: TaskFlavour::Bounded,
            cmdline: false,
            ..all
        };
        let mut rejected = NOTHING_REJECTED;
        loaded.note_rejected(all, &mut rejected);
        assert_eq!(all.without(&rejected), loaded);
        // A load that did not ask for a program learns nothing about it.
        let base = Plan::for_groups(Group::Base.flag(), true);
        let mut none = rejected;
        none.cmdline = false;
        base.note_rejected(base, &mut none);
        assert!(!none.cmdline);
        assert_eq!(base.without(&rejected).task, TaskFlavour::Bounded);
        assert!(!base.without(&rejected).maps && !base.without(&rejected).cmdline);
    }
}
