//! One look at the processes: what process-exporter reads from /proc/PID/{stat,status,io,
//! fd,limits,wchan,cmdline,cgroup,smaps_rollup} and /proc/PID/task/*, taken from taskdiag
//! dumps instead and reduced to [`ProcSample`]s.
//!
//! A collection is one whole-system dump of processes (BASE, CRED, STAT, STATM, IO, FILES,
//! and WCHAN for wait channels), then the command lines of the processes not seen before,
//! which the rules name (CMDLINE, and CGROUP only when a rule or a name reads cgroups: one
//! request per process for a few, one dump for many), then the threads of the multi-threaded processes the caller asks
//! about (one dump per process where that costs about the process alone, else one dump of
//! every thread), then smaps_rollup of the processes asked about when proportional sizes are
//! gathered (the one file read here: no taskdiag group carries the rollup's Pss, and
//! /proc/PID/smaps_rollup shows the reader exactly what its /proc allows). Tasks that exit
//! between reads are left out, never half-filled.
//!
//! smaps_rollup walks the page tables of every mapping: [`crate::rollup`] keeps each process's
//! read and decides when it is read again, and by whom.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::rollup::Rollups;
use taskdiag_proto::task::Task;
use taskdiag_proto::{Group, FILES_F_FDS_HIDDEN};
use taskdiag_tools::snapshot::{proc_order, Error as SnapshotError, Machine, Query, Source};

/// RLIMIT_NOFILE's index among FILES's limits.
const RLIMIT_NOFILE: usize = 7;

/// The counters process-exporter keeps per process, thread and group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// User CPU time, ns (clock-tick resolution).
    pub cpu_user_ns: u64,
    /// System CPU time, ns.
    pub cpu_system_ns: u64,
    /// Bytes fetched from storage (/proc/PID/io read_bytes).
    pub read_bytes: u64,
    /// Bytes sent to storage (write_bytes).
    pub write_bytes: u64,
    /// Major page faults.
    pub major_faults: u64,
    /// Minor page faults.
    pub minor_faults: u64,
    /// Voluntary context switches.
    pub ctx_voluntary: u64,
    /// Involuntary context switches.
    pub ctx_nonvoluntary: u64,
}

impl Counts {
    /// `self - older`, each counter at least 0 (a counter that went back, as a process's sum
    /// of its live threads' context switches does when a thread exits, adds nothing; Go's
    /// unsigned subtraction wraps there).
    pub fn since(&self, older: &Counts) -> Counts {
        Counts {
            cpu_user_ns: self.cpu_user_ns.saturating_sub(older.cpu_user_ns),
            cpu_system_ns: self.cpu_system_ns.saturating_sub(older.cpu_system_ns),
            read_bytes: self.read_bytes.saturating_sub(older.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(older.write_bytes),
            major_faults: self.major_faults.saturating_sub(older.major_faults),
            minor_faults: self.minor_faults.saturating_sub(older.minor_faults),
            ctx_voluntary: self.ctx_voluntary.saturating_sub(older.ctx_voluntary),
            ctx_nonvoluntary: self.ctx_nonvoluntary.saturating_sub(older.ctx_nonvoluntary),
        }
    }

    /// Adds `d` to every counter.
    pub fn add(&mut self, d: &Counts) {
        self.cpu_user_ns += d.cpu_user_ns;
        self.cpu_system_ns += d.cpu_system_ns;
        self.read_bytes += d.read_bytes;
        self.write_bytes += d.write_bytes;
        self.major_faults += d.major_faults;
        self.minor_faults += d.minor_faults;
        self.ctx_voluntary += d.ctx_voluntary;
        self.ctx_nonvoluntary += d.ctx_nonvoluntary;
    }
}

/// Memory in use, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Resident set (stat's rss × page size).
    pub resident: u64,
    /// Virtual size (stat's vsize).
    pub virtual_: u64,
    /// Swapped out (status VmSwap).
    pub swapped: u64,
    /// smaps_rollup Pss (0 unless gathered).
    pub proportional_resident: u64,
    /// smaps_rollup SwapPss (0 unless gathered).
    pub proportional_swapped: u64,
}

impl Memory {
    /// Adds `m`.
    pub fn add(&mut self, m: &Memory) {
        self.resident += m.resident;
        self.virtual_ += m.virtual_;
        self.swapped += m.swapped;
        self.proportional_resident += m.proportional_resident;
        self.proportional_swapped += m.proportional_swapped;
    }
}

/// How many tasks are in each state, as process-exporter buckets stat's state letter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct States {
    /// R.
    pub running: u64,
    /// S.
    pub sleeping: u64,
    /// D.
    pub waiting: u64,
    /// Z.
    pub zombie: u64,
    /// Every other letter (T, t, X, I, P...).
    pub other: u64,
}

impl States {
    /// Counts one task in state `c` (a /proc state letter).
    pub fn count(&mut self, c: char) {
        match c {
            'R' => self.running += 1,
            'S' => self.sleeping += 1,
            'D' => self.waiting += 1,
            'Z' => self.zombie += 1,
            _ => self.other += 1,
        }
    }

    /// Adds `s`.
    pub fn add(&mut self, s: &States) {
        self.running += s.running;
        self.sleeping += s.sleeping;
        self.waiting += s.waiting;
        self.zombie += s.zombie;
        self.other += s.other;
    }
}

/// A task's identity: its id and its start time since boot (a reused id starts later).
pub type Id = (u32, u64);

/// A hasher for task identities and ids: FxHash's multiply-and-rotate, where std's SipHash
/// was a tenth of the exporter's own work at 50,000 processes (a collection looks every
/// process up several times). The keys are the kernel's ids and start times, which the
/// processes measured do not choose.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// A map keyed by [`Id`] (or by id alone), hashed with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Thread names and wait channels, each kept once for all the tasks that have it.
///
/// Kept per thread, they were two of the 300,000 small allocations a collection of
/// 15,000 x 10 made, each freed a collection later, when the samples are replaced: with the
/// allocator's consolidation that followed, a quarter of the exporter's CPU. The decoded
/// task's copy is now freed at once, where the allocator reuses it for the next.
#[derive(Debug, Default)]
pub struct Names {
    set: HashSet<Arc<str>>,
    /// The last name asked for: a process's threads mostly share theirs.
    last: Option<Arc<str>>,
}

impl Names {
    /// `bytes` as text (U+FFFD for what is not UTF-8), interned.
    pub fn get(&mut self, bytes: &[u8]) -> Arc<str> {
        let s = String::from_utf8_lossy(bytes);
        if let Some(l) = self.last.as_ref().filter(|l| ***l == *s) {
            return Arc::clone(l);
        }
        let a = match self.set.get(&*s) {
            Some(a) => Arc::clone(a),
            None => {
                let a: Arc<str> = Arc::from(&*s);
                self.set.insert(Arc::clone(&a));
                a
            }
        };
        self.last = Some(Arc::clone(&a));
        a
    }

    /// Forgets the names no sample holds any more (threads come and go by name too).
    pub fn forget_unused(&mut self) {
        self.last = None;
        self.set.retain(|a| Arc::strong_count(a) > 1);
    }
}

/// One thread of a multi-threaded process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadSample {
    /// Thread id and start time.
    pub id: Id,
    /// Its name (comm), interned ([`Names`]).
    pub name: Arc<str>,
    /// Its own counters (CPU times, faults, context switches, I/O when asked for).
    pub counts: Counts,
    /// Where it sleeps, interned; `None` when running or hidden (moved to its process's
    /// `wchans` when [`fold_threads`] folds it in).
    pub wchan: Option<Arc<str>>,
    /// Its state letter.
    pub state: char,
}

/// One process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcSample {
    /// Process id and start time since boot, ns.
    pub id: Id,
    /// Parent's process id.
    pub ppid: u32,
    /// Task name.
    pub comm: String,
    /// Command line, split at NULs.
    pub cmdline: Vec<String>,
    /// Effective uid.
    pub euid: u32,
    /// Cgroup paths of every hierarchy, and the v2 one (empty unless read).
    pub cgroups: Vec<String>,
    /// The cgroup v2 path ("" unless read).
    pub cgroup: String,
    /// Start time, seconds since the epoch and nanoseconds.
    pub start_time: (i64, u32),
    /// Counters: the process's totals (context switches: the leader's, or the sum over its
    /// threads when it has several, as process-exporter counts them).
    pub counts: Counts,
    /// Memory.
    pub memory: Memory,
    /// Open descriptors; `None` where they cannot be counted.
    pub open_fds: Option<u64>,
    /// RLIMIT_NOFILE's soft limit; `None` where unknown.
    pub fd_limit: Option<u64>,
    /// Threads in the process.
    pub num_threads: u64,
    /// The leader's state letter (/proc/PID/stat's).
    pub state: char,
    /// The leader's state, plus each thread's when there are several (process-exporter's
    /// count: a multi-threaded process's leader counts twice).
    pub states: States,
    /// The leader's wait channel, and each thread's when there are several: how many of the
    /// process's tasks wait in each.
    pub wchans: Vec<Arc<str>>,
    /// Threads, when the process has two or more and they were read.
    pub threads: Vec<ThreadSample>,
    /// Some value could not be read (I/O counters, descriptors, wait channel, rollup).
    pub partial: bool,
}

/// What a collection reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Want {
    /// Cgroup paths (a rule or name reads them).
    pub cgroups: bool,
    /// Threads' I/O counters (per-thread metrics are on).
    pub thread_io: bool,
    /// smaps_rollup's Pss and SwapPss.
    pub smaps: bool,
    /// Wait channels (WCHAN: an unwind of every sleeping task's kernel stack, the costliest
    /// group of a dump).
    pub wchan: bool,
}

/// Reads samples through a kept backend.
pub struct Reader {
    src: Source,
    kind: taskdiag::BackendKind,
    machine: Machine,
    want: Want,
    /// Tasks the last dumps returned (processes and threads), for the exporter's metrics.
    pub tasks_scanned: u64,
    /// Processes the last collection's walk returned.
    processes_scanned: u64,
    /// The proportional sizes of the processes asked about.
    rollups: Rollups,
    /// Whether a request for a few processes costs about those processes, where the backend
    /// cannot say (taskdiagd): measured on the first such request.
    few_cheap: Option<bool>,
    /// Whether the last collection read threads in a walk of every task: this one then reads
    /// processes and threads in one walk ([`Source::for_each_with_threads`]), where a process
    /// walk and a thread walk each visited every task (~85 ms apiece at 150,000 tasks).
    threads_in_walk: bool,
    /// The threads the one walk of this collection read, by process, for
    /// [`Reader::complete`] (`None`: a process with one thread, whose thread was not kept).
    walked_threads: Option<IdMap<u32, Option<Vec<ThreadSample>>>>,
    /// The thread names and wait channels of the samples.
    names: Names,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("backend", &self.src.backend_name())
            .field("want", &self.want)
            .finish()
    }
}

/// Every group a collection may ask for, which the backend is prepared for.
fn all_groups() -> u64 {
    let all = Want {
        cgroups: true,
        thread_io: true,
        smaps: true,
        wchan: true,
    };
    process_groups(all) | naming_groups(all) | thread_groups(all)
}

/// What every collection reads of every process.
fn process_groups(want: Want) -> u64 {
    let mut g = Group::Base.flag()
        | Group::Cred.flag()
        | Group::Stat.flag()
        | Group::Statm.flag()
        | Group::Io.flag()
        | Group::Files.flag();
    if want.wchan {
        g |= Group::Wchan.flag();
    }
    g
}

/// What naming a process reads: only for processes not seen before.
fn naming_groups(want: Want) -> u64 {
    let mut g = Group::Base.flag() | Group::Cmdline.flag();
    if want.cgroups {
        g |= Group::Cgroup.flag();
    }
    g
}

fn thread_groups(want: Want) -> u64 {
    let mut g = Group::Base.flag() | Group::Stat.flag();
    if want.wchan {
        g |= Group::Wchan.flag();
    }
    if want.thread_io {
        g |= Group::Io.flag();
    }
    g
}

impl Reader {
    /// Opens the backend `kind` for what `want` needs.
    pub fn open(kind: taskdiag::BackendKind, want: Want) -> Result<Reader, SnapshotError> {
        let src = Source::open_kind(kind, all_groups())?;
        Ok(Reader {
            src,
            kind,
            machine: Machine::read()?,
            want,
            tasks_scanned: 0,
            processes_scanned: 0,
            rollups: Rollups::default(),
            few_cheap: None,
            threads_in_walk: false,
            walked_threads: None,
            names: Names::default(),
        })
    }

    /// The backend answering, by name.
    pub fn backend_name(&self) -> &'static str {
        self.src.backend_name()
    }

    /// Opens the backend again (taskdiagd closes a connection idle longer than its
    /// `--timeout`, 30 s by default: longer than many scrape intervals).
    pub fn reopen(&mut self) -> Result<(), SnapshotError> {
        self.src = Source::open_kind(self.kind, all_groups())?;
        self.few_cheap = None;
        Ok(())
    }

    /// The resolution of the samples' start times, ns: a clock tick, as /proc/PID/stat gives
    /// them (every backend cuts them to it).
    pub fn start_time_resolution_ns(&self) -> u64 {
        self.machine.ns_per_tick().max(1)
    }

    /// What collections read.
    pub fn want(&self) -> Want {
        self.want
    }

    /// Changes what collections read (a reloaded config may read cgroups).
    pub fn set_want(&mut self, want: Want) {
        self.want = want;
    }

    /// Hands `f` the tasks of `q` for the processes `tgids`, and perhaps others (the caller
    /// picks its own), each as it is decoded, none kept: a few processes are asked for one by
    /// one where that costs about each process, many (or where it would walk every task each
    /// time) in one walk of all. Returns how many tasks `f` was handed, and whether they came
    /// from a walk of all.
    fn for_some(
        &mut self,
        q: &Query,
        tgids: &[u32],
        f: &mut dyn FnMut(Task),
    ) -> Result<(u64, bool), SnapshotError> {
        let mut n = 0u64;
        let mut each = |t: Task| {
            n += 1;
            f(t);
        };
        // The tasks of `tgids[..asked]`, read one by one to find out whether that is cheap.
        let (mut read, mut asked) = (Vec::new(), 0);
        let one_by_one = if self.few_are_cheap(tgids.len()) {
            true
        } else if tgids.len() > FEW
            || self.few_cheap.is_some()
            || self.src.single_task_reads_are_cheap()
        {
            false
        } else {
            // The backend cannot say (taskdiagd: it depends on the server's kernel): time one.
            let t0 = Instant::now();
            (read, asked) = (self.src.take_tgids_own(q, &tgids[..1])?, 1);
            let cheap = t0.elapsed() < Duration::from_millis(20);
            self.few_cheap = Some(cheap);
            cheap
        };
        if one_by_one {
            read.extend(self.src.take_tgids_own(q, &tgids[asked..])?);
            read.into_iter().for_each(each);
        } else {
            // (A process already read comes again in the walk of all.)
            self.src.for_each_task(q.threads, q.groups, &mut |t| {
                each(t);
                Ok(())
            })?;
        }
        Ok((n, !one_by_one))
    }

    /// Whether `n` processes are read one process at a time for less than a walk of every
    /// task, as far as is known ([`Reader::for_some`] measures it where the backend cannot
    /// say; until then: not).
    fn few_are_cheap(&self, n: usize) -> bool {
        n <= FEW
            && (self.few_cheap == Some(true)
                || (self.few_cheap.is_none() && self.src.single_task_reads_are_cheap()))
    }

    /// Reads the command lines (and cgroups, when a rule or name reads them) of
    /// `procs[i]` for every `i` in `which`: the processes not seen before, which the rules
    /// are to name. A process whose pid now names another is left without them.
    pub fn name_details(
        &mut self,
        procs: &mut [ProcSample],
        which: &[usize],
    ) -> Result<(), SnapshotError> {
        if which.is_empty() {
            return Ok(());
        }
        let want = self.want;
        let q = Query {
            threads: false,
            groups: naming_groups(want),
        };
        let tgids: Vec<u32> = which.iter().map(|&i| procs[i].id.0).collect();
        let at: IdMap<u32, usize> = which.iter().map(|&i| (procs[i].id.0, i)).collect();
        self.for_some(&q, &tgids, &mut |t| {
            let Some(&i) = at.get(&t.pid) else {
                return;
            };
            let p = &mut procs[i];
            if t.base.as_ref().map(|b| b.rec.start_time_ns) != Some(p.id.1) {
                return;
            }
            p.cmdline = t.cmdline.as_deref().map(split_cmdline).unwrap_or_default();
            if want.cgroups {
                (p.cgroups, p.cgroup) = cgroups_of(&t);
            }
        })?;
        Ok(())
    }

    /// Every process, in pid order, without threads (where the last collection read threads
    /// in a walk of every task, they are read in the same walk, for [`Reader::complete`]).
    pub fn processes(&mut self) -> Result<Vec<ProcSample>, SnapshotError> {
        // The last collection's count: the vector is not moved as it grows.
        let mut out = Vec::with_capacity(self.processes_scanned as usize + 1024);
        let boot = self.machine.boot_time as i64;
        let page = self.machine.page_size;
        let want = self.want;
        self.walked_threads = None;
        self.names.forget_unused();
        let names = &mut self.names;
        if self.threads_in_walk {
            // Per process: its threads, sized for the count its own record gives, or `None`
            // for one with a single thread, whose thread record is not kept (it is not
            // folded in). A process's record comes before its threads' from BPF; a thread
            // that comes first is kept. (Growing the lists, and keeping every single-threaded
            // process's one thread, were a tenth of the exporter's CPU at 15,000 x 10.)
            let mut threads: IdMap<u32, Option<Vec<ThreadSample>>> = IdMap::default();
            let mut n = 0u64;
            self.src.for_each_with_threads(
                thread_groups(want),
                process_groups(want),
                &mut |t| {
                    n += 1;
                    if t.process {
                        let p = process_sample(t, boot, page, want, names);
                        let nt = p.num_threads as usize;
                        let e = threads.entry(p.id.0).or_insert(None);
                        match e {
                            Some(v) => v.reserve(nt.min(MAX_PRESIZE).saturating_sub(v.len())),
                            None if nt > 1 => *e = Some(Vec::with_capacity(nt.min(MAX_PRESIZE))),
                            None => {}
                        }
                        out.push(p);
                    } else {
                        let tgid = t.tgid;
                        match threads.get_mut(&tgid) {
                            Some(None) => {}
                            Some(Some(v)) => v.extend(thread_sample(t, names)),
                            None => {
                                let v = thread_sample(t, names).into_iter().collect();
                                threads.insert(tgid, Some(v));
                            }
                        }
                    }
                    Ok(())
                },
            )?;
            // The backend's order (BPF: by thread id); processes as a process walk gives them.
            out.sort_unstable_by_key(|p| p.id.0);
            self.walked_threads = Some(threads);
            self.tasks_scanned = n;
        } else {
            self.src.for_each_process(process_groups(want), &mut |t| {
                out.push(process_sample(t, boot, page, want, names));
                Ok(())
            })?;
            self.tasks_scanned = out.len() as u64;
        }
        self.processes_scanned = out.len() as u64;
        Ok(out)
    }

    /// Reads the threads of `procs[i]` for every `i` in `which` (or, with `every_thread`, of
    /// every process) that has several, and folds them in as process-exporter does; then
    /// smaps_rollup of those in `which` when asked for. A process whose threads are gone
    /// keeps its own values.
    pub fn complete(
        &mut self,
        procs: &mut [ProcSample],
        which: &[usize],
        every_thread: bool,
    ) -> Result<(), SnapshotError> {
        let multi: Vec<usize> = if every_thread {
            (0..procs.len())
                .filter(|&i| procs[i].num_threads > 1)
                .collect()
        } else {
            which
                .iter()
                .copied()
                .filter(|&i| procs[i].num_threads > 1)
                .collect()
        };
        if let Some(mut walked) = self.walked_threads.take() {
            // Read with the processes, in one walk of every task.
            for &i in &multi {
                let p = &mut procs[i];
                fold_threads(p, walked.remove(&p.id.0).flatten().unwrap_or_default());
            }
            self.threads_in_walk = !multi.is_empty() && !self.few_are_cheap(multi.len());
        } else if !multi.is_empty() {
            let q = Query {
                threads: true,
                groups: thread_groups(self.want),
            };
            let tgids: Vec<u32> = multi.iter().map(|&i| procs[i].id.0).collect();
            // Only the processes asked about; each thread is reduced as it is decoded (at
            // 150,000 threads, keeping the decoded tasks took 0.4 GB and half a collection's
            // time in moving them). Each list is sized for the threads the process walk
            // counted (growing them was 1% of a collection of 15,000 x 10).
            let mut by_tgid: IdMap<u32, Vec<ThreadSample>> = multi
                .iter()
                .map(|&i| {
                    let n = procs[i].num_threads as usize;
                    (procs[i].id.0, Vec::with_capacity(n.min(MAX_PRESIZE)))
                })
                .collect();
            // (Lent to the reader's closure, and given back whatever the walk gave.)
            let mut names = std::mem::take(&mut self.names);
            let read = self.for_some(&q, &tgids, &mut |t| {
                if let Some(v) = by_tgid.get_mut(&t.tgid) {
                    v.extend(thread_sample(t, &mut names));
                }
            });
            self.names = names;
            let (n, walked_all) = read?;
            self.tasks_scanned += n;
            self.threads_in_walk = walked_all;
            for &i in &multi {
                let p = &mut procs[i];
                fold_threads(p, by_tgid.remove(&p.id.0).unwrap_or_default());
            }
        }
        if self.want.smaps {
            self.rollups.fill(procs, which, Instant::now());
        }
        Ok(())
    }
}

/// Processes whose threads [`Reader::for_some`] may read one by one, where that is cheap.
const FEW: usize = 256;

/// The most threads a process's list is sized for before its walk (a process's thread count
/// is its own to set: one claiming millions is given room as its threads come).
const MAX_PRESIZE: usize = 4096;

/// Folds a process's threads into it as process-exporter 0.7.10 does when it finds two or
/// more: context switches become the sum over the threads, every thread's state and wait
/// channel is counted besides the leader's. The threads are kept in /proc's order, whatever
/// order the backend gave (the tracker merges them with the last collection's by that order).
pub fn fold_threads(p: &mut ProcSample, mut threads: Vec<ThreadSample>) {
    if threads.len() < 2 {
        return;
    }
    threads.sort_unstable_by_key(|t| proc_order(p.id.0, t.id.0));
    p.counts.ctx_voluntary = threads.iter().map(|t| t.counts.ctx_voluntary).sum();
    p.counts.ctx_nonvoluntary = threads.iter().map(|t| t.counts.ctx_nonvoluntary).sum();
    p.wchans.reserve(threads.len());
    for t in &mut threads {
        p.states.count(t.state);
        if let Some(w) = t.wchan.take() {
            p.wchans.push(w);
        }
    }
    p.threads = threads;
}

/// A wait channel as process-exporter keeps it: none for a task that is not waiting ("0").
fn wchan_of(t: &Task, names: &mut Names) -> Option<Arc<str>> {
    match t.wchan.as_deref() {
        Some(w) if !w.is_empty() && w != b"0" => Some(names.get(w)),
        _ => None,
    }
}

/// Bytes as text, moved where they are UTF-8 (nearly always: a task's name and wait channel
/// are copied for each of 150,000 threads at every collection), else with U+FFFD for what is
/// not.
fn text(v: Vec<u8>) -> String {
    String::from_utf8(v).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn state_of(t: &Task) -> char {
    t.base
        .as_ref()
        .map_or('?', |b| taskdiag_proto::state_char(b.rec.state))
}

fn counts_of(t: &Task) -> Counts {
    let mut c = Counts::default();
    if let Some(s) = &t.stat {
        c.cpu_user_ns = s.utime_ns;
        c.cpu_system_ns = s.stime_ns;
        c.major_faults = s.majflt;
        c.minor_faults = s.minflt;
        c.ctx_voluntary = s.nvcsw;
        c.ctx_nonvoluntary = s.nivcsw;
    }
    if let Some(io) = &t.io {
        c.read_bytes = io.read_bytes;
        c.write_bytes = io.write_bytes;
    }
    c
}

/// The command line as Go's procfs splits it: NUL-separated, trailing NULs dropped, none for
/// an empty one.
pub fn split_cmdline(raw: &[u8]) -> Vec<String> {
    let end = raw.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if end == 0 {
        return Vec::new();
    }
    raw[..end]
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn process_sample(mut t: Task, boot: i64, page: u64, want: Want, names: &mut Names) -> ProcSample {
    let (start_ns, ppid, comm) = match &mut t.base {
        Some(b) => (
            b.rec.start_time_ns,
            b.rec.ppid,
            text(std::mem::take(&mut b.comm)),
        ),
        None => (0, 0, String::new()),
    };
    let mut partial = false;
    let counts = counts_of(&t);
    if t.io.is_none() {
        partial = true;
    }
    let memory = t.statm.as_ref().map_or(Memory::default(), |m| Memory {
        // stat's rss: the anonymous, file and shmem pages (get_mm_rss), in pages.
        resident: (m.rss_anon + m.rss_file + m.rss_shmem) / page * page,
        virtual_: m.vm_size,
        swapped: m.swap,
        ..Memory::default()
    });
    let (open_fds, fd_limit) = match &t.files {
        Some(f) => (
            (f.rec.flags & FILES_F_FDS_HIDDEN == 0).then_some(u64::from(f.rec.fds)),
            f.limit(RLIMIT_NOFILE).map(|l| l.soft),
        ),
        None => (None, None),
    };
    if open_fds.is_none() || (want.wchan && t.wchan.is_none()) {
        partial = true;
    }
    let state = state_of(&t);
    let mut states = States::default();
    states.count(state);
    let wchan = wchan_of(&t, names);
    let (cgroups, cgroup) = if want.cgroups {
        cgroups_of(&t)
    } else {
        (Vec::new(), String::new())
    };
    ProcSample {
        id: (t.pid, start_ns),
        ppid,
        comm,
        cmdline: t.cmdline.as_deref().map(split_cmdline).unwrap_or_default(),
        euid: t.cred.as_ref().map_or(0, |c| c.rec.euid),
        cgroups,
        cgroup,
        start_time: (
            boot + (start_ns / 1_000_000_000) as i64,
            (start_ns % 1_000_000_000) as u32,
        ),
        counts,
        memory,
        open_fds,
        fd_limit,
        num_threads: t.stat.as_ref().map_or(1, |s| u64::from(s.threads)),
        state,
        states,
        wchans: wchan.into_iter().collect(),
        threads: Vec::new(),
        partial,
    }
}

/// Every cgroup path of a task's /proc/PID/cgroup, and the v2 one.
fn cgroups_of(t: &Task) -> (Vec<String>, String) {
    let Some(c) = &t.cgroup else {
        return (Vec::new(), String::new());
    };
    let all = c
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, |&b| b == b':');
            let _id = parts.next()?;
            let _controllers = parts.next()?;
            Some(String::from_utf8_lossy(parts.next()?).into_owned())
        })
        .collect();
    let v2 = c
        .unified()
        .map(|u| String::from_utf8_lossy(u).into_owned())
        .unwrap_or_default();
    (all, v2)
}

fn thread_sample(t: Task, names: &mut Names) -> Option<ThreadSample> {
    t.stat.as_ref()?;
    let b = t.base.as_ref()?;
    Some(ThreadSample {
        id: (t.pid, b.rec.start_time_ns),
        name: names.get(&b.comm),
        counts: counts_of(&t),
        state: state_of(&t),
        wchan: wchan_of(&t, names),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_as_go_procfs_splits_them() {
        assert_eq!(split_cmdline(b"sleep\x00100\x00"), ["sleep", "100"]);
        assert_eq!(split_cmdline(b"nginx: worker"), ["nginx: worker"]);
        assert_eq!(split_cmdline(b"a\x00\x00b\x00\x00"), ["a", "", "b"]);
        assert!(split_cmdline(b"").is_empty());
        assert!(split_cmdline(b"\x00\x00").is_empty());
    }

    #[test]
    fn counters_that_went_back_add_nothing() {
        let a = Counts {
            cpu_user_ns: 10,
            ctx_voluntary: 5,
            ..Counts::default()
        };
        let b = Counts {
            cpu_user_ns: 15,
            ctx_voluntary: 3,
            ..Counts::default()
        };
        let d = b.since(&a);
        assert_eq!((d.cpu_user_ns, d.ctx_voluntary), (5, 0));
    }

    #[test]
    fn names_are_kept_once_while_a_sample_holds_them() {
        let mut names = Names::default();
        let a = names.get(b"worker");
        names.get(b"other");
        let b = names.get(b"worker");
        assert!(Arc::ptr_eq(&a, &b), "the same name twice is one");
        assert_eq!(&*names.get(b"bad\xff"), "bad\u{fffd}");
        names.forget_unused();
        assert_eq!(names.set.len(), 1, "only the held name is kept");
        assert!(Arc::ptr_eq(&names.get(b"worker"), &a));
        drop((a, b));
        names.forget_unused();
        assert!(names.set.is_empty());
    }

    #[test]
    fn threads_fold_in_as_process_exporter_counts_them() {
        let mut p = ProcSample::default();
        p.states.count('S');
        p.counts.ctx_voluntary = 3;
        let th = |tid, state, wchan: &str, vol| ThreadSample {
            id: (tid, 1),
            name: "w".into(),
            counts: Counts {
                ctx_voluntary: vol,
                ..Counts::default()
            },
            wchan: (!wchan.is_empty()).then(|| wchan.into()),
            state,
        };
        fold_threads(&mut p, vec![th(1, 'S', "do_wait", 3)]);
        assert!(p.threads.is_empty(), "one thread is no thread list");
        fold_threads(&mut p, vec![th(1, 'S', "futex_wait", 3), th(2, 'R', "", 7)]);
        assert_eq!(p.counts.ctx_voluntary, 10);
        assert_eq!((p.states.sleeping, p.states.running), (2, 1));
        assert_eq!(p.wchans, [Arc::from("futex_wait")]);
        assert_eq!(p.threads.len(), 2);
    }
}
