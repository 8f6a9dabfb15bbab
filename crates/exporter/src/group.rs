//! Which processes are tracked, under which group name, and the per-group accumulators that
//! keep counters from ever going down: process-exporter 0.7.10's tracker and grouper
//! (proc/tracker.go, proc/grouper.go), with its meanings.
//!
//! * A process is named once, when first seen (identity: pid and start time): by the first
//!   rule that matches it, else, with `children`, by the group of its nearest tracked
//!   ancestor; a process neither matches nor descends from a tracked one is ignored from
//!   then on (with `recheck`, or without `children`, it is tried again at each collection).
//! * A group's counters are the sum of what its processes' counters grew by between
//!   collections, added to what the group had: a process that exits takes nothing away. A
//!   process already running at the first collection counts from then on; one started
//!   later counts whole (what it did before it was first seen too).
//! * Per-thread counters are kept the same way by (group, thread name).
//!
//! Where this differs from 0.7.10, on purpose: a counter that goes back between two
//! collections (a process's context switches summed over its live threads, when one exits)
//! adds nothing, where Go's unsigned subtraction wraps to about 1.8e19; and a thread name's
//! accumulator is kept while its group lives, so per-thread counters never go down either
//! (0.7.10 restarts one at 0 when no thread of that name was seen at a collection).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use taskdiag_tools::snapshot::proc_order;

use crate::config::{Config, ProcAttrs};
use crate::sample::{Counts, Id, IdMap, Memory, ProcSample, States, ThreadSample};

/// A process the tracker knows: tracked under a group, or ignored (`group: None`).
#[derive(Debug, Clone)]
struct Tracked {
    /// The group's name, one allocation per name ([`Grouper::intern`]): a collection sums
    /// its processes by the name's address, not by comparing names.
    group: Option<Arc<str>>,
    /// The last sample.
    sample: ProcSample,
    /// What its counters grew by at the last collection.
    latest: Counts,
    /// What each of its sample's threads (index for index, when it has two or more) grew by
    /// at the last collection.
    thread_latest: Vec<Counts>,
    /// The collection that last saw it.
    seen: u64,
}

/// One group's sums at a collection, before its accumulators are added: its name, its
/// processes' metrics, and each of their threads' name and growth.
struct Sum<'a> {
    name: &'a Arc<str>,
    g: GroupMetrics,
    /// Its threads by name (built as the processes are summed: collecting every thread
    /// first grew a list of 150,000 at 15,000 x 10).
    threads: BTreeMap<&'a str, ThreadGroup>,
}

/// Per thread name: how many threads, and their accumulated counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadGroup {
    /// The thread name.
    pub name: String,
    /// Threads of that name in the group now.
    pub count: u64,
    /// Accumulated counters.
    pub counts: Counts,
}

/// One group's metrics at a collection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupMetrics {
    /// Accumulated counters.
    pub counts: Counts,
    /// Processes in the group now.
    pub procs: u64,
    /// Their memory.
    pub memory: Memory,
    /// Their open descriptors (those that could be counted).
    pub open_fds: u64,
    /// The largest open/limit ratio among them.
    pub worst_fd_ratio: f64,
    /// The oldest start time among them, seconds since the epoch; `None` for an empty group.
    pub oldest_start: Option<i64>,
    /// Threads.
    pub num_threads: u64,
    /// Tasks by state.
    pub states: States,
    /// Tasks by wait channel.
    pub wchans: BTreeMap<String, u64>,
    /// Threads by name (multi-threaded processes only).
    pub threads: Vec<ThreadGroup>,
}

/// Options of [`Grouper`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupOptions {
    /// Untracked children of tracked processes join their ancestor's group.
    pub children: bool,
    /// Processes that matched nothing are tried again at each collection.
    pub recheck: bool,
    /// Groups without processes are forgotten (0.8's -remove-empty-groups).
    pub remove_empty_groups: bool,
}

/// The tracker and grouper: fed one collection at a time.
#[derive(Debug)]
pub struct Grouper {
    config: Config,
    opts: GroupOptions,
    tracked: IdMap<Id, Tracked>,
    /// pid → identity of every process known, to find a parent.
    pids: IdMap<u32, Id>,
    /// Time since boot of the first collection, at the start times' resolution: processes
    /// started then or later count whole.
    first: Option<u64>,
    generation: u64,
    group_accum: HashMap<String, Counts>,
    thread_accum: HashMap<String, HashMap<String, Counts>>,
    /// The name of every group a tracked process is in, once.
    names: HashSet<Arc<str>>,
    /// Euid → user name.
    users: HashMap<u32, String>,
    needs_username: bool,
}

impl Grouper {
    /// A grouper naming processes by `config`.
    pub fn new(config: Config, opts: GroupOptions) -> Grouper {
        let needs_username = config.needs().username;
        Grouper {
            config,
            opts,
            tracked: IdMap::default(),
            pids: IdMap::default(),
            first: None,
            generation: 0,
            group_accum: HashMap::new(),
            thread_accum: HashMap::new(),
            names: HashSet::new(),
            users: HashMap::new(),
            needs_username,
        }
    }

    /// Replaces the config (a reload): processes already named keep their names, as they
    /// would in process-exporter, which names a process once.
    pub fn set_config(&mut self, config: Config) {
        self.needs_username = config.needs().username;
        self.config = config;
    }

    /// The indexes of `procs` not known yet (the rules will name them, from their command
    /// lines and cgroups, which the collection reads for these only), and of those whose
    /// threads and rollups the collection should read (tracked or not yet known: an ignored
    /// process is not read further).
    pub fn classify(&self, procs: &[ProcSample]) -> (Vec<usize>, Vec<usize>) {
        let (mut unknown, mut wanted) = (Vec::new(), Vec::with_capacity(procs.len()));
        for (i, p) in procs.iter().enumerate() {
            match self.tracked.get(&p.id) {
                None => {
                    unknown.push(i);
                    wanted.push(i);
                }
                Some(t) if t.group.is_some() => wanted.push(i),
                Some(_) => {}
            }
        }
        (unknown, wanted)
    }

    /// Takes one collection; `now_boot_ns` is the time since boot it was taken at, cut to the
    /// resolution of the samples' start times (a clock tick: a process started within the
    /// tick after the first collection would otherwise show a start time before it). Returns
    /// every group's metrics by name, and how many tracked or new processes had values that
    /// could not be read.
    pub fn update(
        &mut self,
        procs: Vec<ProcSample>,
        now_boot_ns: u64,
    ) -> (BTreeMap<String, GroupMetrics>, u64) {
        let first = *self.first.get_or_insert(now_boot_ns);
        self.generation += 1;
        let gen = self.generation;
        let mut partial = 0;
        let mut new = Vec::new();
        for p in procs {
            match self.tracked.get_mut(&p.id) {
                Some(t) if t.group.is_none() => t.seen = gen,
                Some(t) => {
                    partial += u64::from(p.partial);
                    t.latest = p.counts.since(&t.sample.counts);
                    thread_growth(p.id.0, &t.sample.threads, &p.threads, &mut t.thread_latest);
                    t.sample = p;
                    t.seen = gen;
                }
                None => {
                    partial += u64::from(p.partial);
                    if let Some(old) = self.pids.insert(p.id.0, p.id) {
                        if old != p.id {
                            self.tracked.remove(&old);
                        }
                    }
                    new.push(p);
                }
            }
        }
        let pids = &mut self.pids;
        self.tracked.retain(|id, t| {
            let keep = t.seen == gen;
            if !keep && pids.get(&id.0) == Some(id) {
                pids.remove(&id.0);
            }
            keep
        });
        // Processes not seen this time and never tracked (without children they are not
        // kept as ignored) leave their pid behind: forget those too. (Only where there are
        // such: every pid is otherwise a tracked process's or a new one's.)
        if self.pids.len() != self.tracked.len() + new.len() {
            let tracked = &self.tracked;
            let new_ids: HashSet<Id> = new.iter().map(|p| p.id).collect();
            self.pids
                .retain(|_, id| tracked.contains_key(id) || new_ids.contains(id));
        }

        // Step 1: name the new processes the rules match.
        let mut untracked: HashMap<Id, ProcSample> = HashMap::new();
        for p in new {
            let attrs = self.attrs(&p);
            match self.config.match_and_name(&attrs) {
                Some(name) => {
                    let name = self.intern(name);
                    self.track(name, p, first, gen)
                }
                None => {
                    untracked.insert(p.id, p);
                }
            }
        }
        // Step 2: the others join a tracked ancestor's group.
        if self.opts.children {
            let mut ids: Vec<Id> = untracked.keys().copied().collect();
            ids.sort_unstable();
            for id in ids {
                if !self.tracked.contains_key(&id) {
                    self.check_ancestry(id, &untracked, first, gen, 0);
                }
            }
        }
        // Names no tracked process is in any more (the set's own reference is the last).
        self.names.retain(|n| Arc::strong_count(n) > 1);
        (self.groups(), partial)
    }

    /// The one allocation of group name `name`.
    fn intern(&mut self, name: String) -> Arc<str> {
        if let Some(n) = self.names.get(name.as_str()) {
            return n.clone();
        }
        let n: Arc<str> = name.into();
        self.names.insert(n.clone());
        n
    }

    fn attrs(&mut self, p: &ProcSample) -> ProcAttrs {
        let username = if self.needs_username {
            self.users
                .entry(p.euid)
                .or_insert_with(|| {
                    taskdiag_tools::names::user_name(p.euid).unwrap_or_else(|| p.euid.to_string())
                })
                .clone()
        } else {
            String::new()
        };
        ProcAttrs {
            comm: p.comm.clone(),
            cmdline: p.cmdline.clone(),
            cgroups: p.cgroups.clone(),
            cgroup: p.cgroup.clone(),
            username,
            pid: p.id.0,
            start_time: p.start_time,
        }
    }

    fn track(&mut self, group: Arc<str>, p: ProcSample, first: u64, gen: u64) {
        // Started after the first collection: everything it did happened since, and counts.
        // In the same clock tick (start times have that resolution) it counts whole too: what
        // one started before did in that tick is the error, not what one started after did
        // before it was first seen, which can be a whole scrape interval.
        let latest = if p.id.1 >= first {
            p.counts
        } else {
            Counts::default()
        };
        let mut thread_latest = Vec::new();
        thread_growth(p.id.0, &[], &p.threads, &mut thread_latest);
        self.tracked.insert(
            p.id,
            Tracked {
                group: Some(group),
                sample: p,
                latest,
                thread_latest,
                seen: gen,
            },
        );
    }

    fn ignore(&mut self, p: &ProcSample, gen: u64) {
        if !self.opts.recheck {
            self.tracked.insert(
                p.id,
                Tracked {
                    group: None,
                    sample: ProcSample {
                        id: p.id,
                        ..ProcSample::default()
                    },
                    latest: Counts::default(),
                    thread_latest: Vec::new(),
                    seen: gen,
                },
            );
        }
    }

    /// Walks up from a new untracked process to a tracked ancestor; tracks the lineage under
    /// its group, or ignores the process. `depth` bounds the walk (a pid cycle cannot occur
    /// in one snapshot, but the data is not trusted).
    fn check_ancestry(
        &mut self,
        id: Id,
        untracked: &HashMap<Id, ProcSample>,
        first: u64,
        gen: u64,
        depth: usize,
    ) -> Option<Arc<str>> {
        let p = untracked.get(&id)?;
        let parent = self.pids.get(&p.ppid).copied().filter(|_| p.ppid >= 1);
        let Some(parent) = parent else {
            self.ignore(p, gen);
            return None;
        };
        if let Some(pt) = self.tracked.get(&parent) {
            return match pt.group.clone() {
                Some(g) => {
                    self.track(g.clone(), p.clone(), first, gen);
                    Some(g)
                }
                None => {
                    self.ignore(p, gen);
                    None
                }
            };
        }
        if depth < 4096 && untracked.contains_key(&parent) {
            if let Some(g) = self.check_ancestry(parent, untracked, first, gen, depth + 1) {
                self.track(g.clone(), p.clone(), first, gen);
                return Some(g);
            }
        }
        self.ignore(p, gen);
        None
    }

    /// Sums the tracked processes by group and adds the accumulators.
    fn groups(&mut self) -> BTreeMap<String, GroupMetrics> {
        // Summed by the name's address (names are interned): index in `sums`.
        let mut at: IdMap<usize, usize> = IdMap::default();
        let mut sums: Vec<Sum> = Vec::new();
        for t in self.tracked.values() {
            let Some(name) = &t.group else { continue };
            let i = *at
                .entry(Arc::as_ptr(name) as *const u8 as usize)
                .or_insert_with(|| {
                    sums.push(Sum {
                        name,
                        g: GroupMetrics::default(),
                        threads: BTreeMap::new(),
                    });
                    sums.len() - 1
                });
            let Sum { g, threads, .. } = &mut sums[i];
            let s = &t.sample;
            g.procs += 1;
            g.memory.add(&s.memory);
            if let Some(fds) = s.open_fds {
                g.open_fds += fds;
            }
            if let (Some(open), Some(limit)) = (s.open_fds, s.fd_limit) {
                let ratio = open as f64 / limit as f64;
                if g.worst_fd_ratio < ratio {
                    g.worst_fd_ratio = ratio;
                }
            }
            g.num_threads += s.num_threads;
            g.counts.add(&t.latest);
            g.states.add(&s.states);
            let start = s.start_time.0;
            if g.oldest_start.is_none_or(|o| start < o) {
                g.oldest_start = Some(start);
            }
            // Counted by runs of one wait channel (a pool's idle workers wait together), each
            // run looked up once.
            for run in s.wchans.chunk_by(|a, b| a == b) {
                let n = run.len() as u64;
                match g.wchans.get_mut(&*run[0]) {
                    Some(c) => *c += n,
                    None => {
                        g.wchans.insert(run[0].to_string(), n);
                    }
                }
            }
            debug_assert!(
                s.threads.len() < 2 || s.threads.len() == t.thread_latest.len(),
                "{:?}",
                s.id
            );
            if s.threads.len() > 1 {
                // Threads of one name tend to come together (a pool's workers): each run of
                // one name is looked up once.
                let mut at = 0;
                for run in s.threads.chunk_by(|a, b| a.name == b.name) {
                    let name = &*run[0].name;
                    let e = threads.entry(name).or_insert_with(|| ThreadGroup {
                        name: name.to_string(),
                        ..ThreadGroup::default()
                    });
                    e.count += run.len() as u64;
                    let latest = t.thread_latest.get(at..at + run.len()).unwrap_or(&[]);
                    for latest in latest {
                        e.counts.add(latest);
                    }
                    at += run.len();
                }
            }
        }
        let mut groups: BTreeMap<String, GroupMetrics> = BTreeMap::new();
        for Sum {
            name,
            mut g,
            threads,
        } in sums
        {
            let name = name.to_string();
            let acc = self.group_accum.entry(name.clone()).or_default();
            acc.add(&g.counts);
            g.counts = *acc;
            let hist = self.thread_accum.entry(name.clone()).or_default();
            let mut by_name = threads;
            for (tname, tg) in by_name.iter_mut() {
                let h = hist.entry(tname.to_string()).or_default();
                h.add(&tg.counts);
                tg.counts = *h;
            }
            g.threads = by_name.into_values().collect();
            groups.insert(name, g);
        }
        // Groups seen before with no process now: their counters stay (or they go).
        if self.opts.remove_empty_groups {
            self.group_accum.retain(|n, _| groups.contains_key(n));
            self.thread_accum.retain(|n, _| groups.contains_key(n));
        } else {
            for (name, acc) in &self.group_accum {
                groups.entry(name.clone()).or_insert_with(|| GroupMetrics {
                    counts: *acc,
                    ..GroupMetrics::default()
                });
            }
        }
        groups
    }
}

/// What each thread in `new` (a process's threads at this collection, in /proc's order, as
/// [`crate::sample::fold_threads`] sorts them) grew by since `old` (the same process's at the
/// last one): a thread seen then (same id and start time) by the growth of its counters, a new
/// one by nothing (counted from now on, as process-exporter does). None for a process with
/// fewer than two threads. A merge of the two ordered lists: at 150,000 threads, looking each
/// thread up in a map of the last collection's was a tenth of a collection (cache misses).
fn thread_growth(pid: u32, old: &[ThreadSample], new: &[ThreadSample], out: &mut Vec<Counts>) {
    out.clear();
    if new.len() < 2 {
        return;
    }
    let key = |th: &ThreadSample| proc_order(pid, th.id.0);
    debug_assert!(
        new.is_sorted_by_key(key),
        "threads of {pid} out of /proc's order"
    );
    let mut was = old.iter().peekable();
    out.extend(new.iter().map(|th| {
        let k = key(th);
        while was.next_if(|o| key(o) < k).is_some() {}
        match was.peek() {
            Some(o) if o.id == th.id => th.counts.since(&o.counts),
            _ => Counts::default(),
        }
    }));
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(yaml: &str) -> Config {
        Config::parse(yaml, Path::new("t.yml")).unwrap()
    }

    fn proc_(pid: u32, start: u64, ppid: u32, comm: &str, cpu_s: u64) -> ProcSample {
        let mut p = ProcSample {
            id: (pid, start),
            ppid,
            comm: comm.into(),
            cmdline: vec![comm.into()],
            start_time: (1_700_000_000 + (start / 1_000_000_000) as i64, 0),
            num_threads: 1,
            open_fds: Some(4),
            fd_limit: Some(1024),
            ..ProcSample::default()
        };
        p.counts.cpu_user_ns = cpu_s * 1_000_000_000;
        p.states.count('S');
        p
    }

    const BOOT_NOW: u64 = 100_000_000_000; // 100 s after boot

    fn by_comm(children: bool) -> Grouper {
        Grouper::new(
            config("process_names:\n  - name: '{{.Comm}}'\n    comm: [app, web]\n"),
            GroupOptions {
                children,
                ..GroupOptions::default()
            },
        )
    }

    fn cpu(g: &BTreeMap<String, GroupMetrics>, name: &str) -> u64 {
        g[name].counts.cpu_user_ns / 1_000_000_000
    }

    #[test]
    fn processes_running_at_the_first_collection_count_from_then_on() {
        let mut gr = by_comm(true);
        let (g, _) = gr.update(vec![proc_(10, 1_000, 1, "app", 50)], BOOT_NOW);
        assert_eq!(cpu(&g, "app"), 0);
        assert_eq!(g["app"].procs, 1);
        let (g, _) = gr.update(vec![proc_(10, 1_000, 1, "app", 53)], BOOT_NOW + 1);
        assert_eq!(cpu(&g, "app"), 3);
    }

    #[test]
    fn a_process_started_in_the_tick_of_the_first_collection_counts_whole() {
        let mut gr = by_comm(true);
        // The collection's time, cut to the tick; the process's start, cut the same way.
        gr.update(vec![proc_(10, 1_000, 1, "app", 50)], BOOT_NOW);
        let (g, _) = gr.update(
            vec![
                proc_(10, 1_000, 1, "app", 50),
                proc_(20, BOOT_NOW, 1, "app", 3),
            ],
            BOOT_NOW + 10_000_000,
        );
        assert_eq!(cpu(&g, "app"), 3);
    }

    #[test]
    fn a_process_started_later_counts_whole_and_its_exit_takes_nothing_away() {
        let mut gr = by_comm(true);
        gr.update(vec![proc_(10, 1_000, 1, "app", 50)], BOOT_NOW);
        let late = BOOT_NOW + 5_000_000_000;
        let (g, _) = gr.update(
            vec![proc_(10, 1_000, 1, "app", 51), proc_(20, late, 1, "app", 7)],
            late + 1,
        );
        assert_eq!(cpu(&g, "app"), 1 + 7);
        assert_eq!(g["app"].procs, 2);
        // pid 20 exits; pid 10 goes on: the group keeps 20's seconds.
        let (g, _) = gr.update(vec![proc_(10, 1_000, 1, "app", 52)], late + 2);
        assert_eq!(cpu(&g, "app"), 9);
        assert_eq!(g["app"].procs, 1);
        // Everything exits: the group stays, counters kept, gauges zero.
        let (g, _) = gr.update(vec![], late + 3);
        assert_eq!(cpu(&g, "app"), 9);
        assert_eq!(g["app"].procs, 0);
        assert_eq!(g["app"].oldest_start, None);
    }

    #[test]
    fn a_reused_pid_is_a_new_process_and_never_lowers_the_counters() {
        let mut gr = by_comm(true);
        gr.update(vec![proc_(10, 1_000, 1, "app", 50)], BOOT_NOW);
        let (g, _) = gr.update(vec![proc_(10, 1_000, 1, "app", 60)], BOOT_NOW + 1);
        assert_eq!(cpu(&g, "app"), 10);
        // pid 10 is now another process (a later start), with less CPU time.
        let restart = BOOT_NOW + 9_000_000_000;
        let (g, _) = gr.update(vec![proc_(10, restart, 1, "app", 2)], restart + 1);
        assert_eq!(cpu(&g, "app"), 12);
        let (g, _) = gr.update(vec![proc_(10, restart, 1, "app", 3)], restart + 2);
        assert_eq!(cpu(&g, "app"), 13);
    }

    #[test]
    fn children_join_their_ancestors_group_unless_they_match_a_rule() {
        let mut gr = by_comm(true);
        let t = BOOT_NOW + 1;
        let (g, _) = gr.update(
            vec![
                proc_(10, 1_000, 1, "app", 0),
                proc_(11, 2_000, 10, "sh", 0),
                proc_(12, 3_000, 11, "worker", 0),
                proc_(13, 4_000, 10, "web", 0),
                proc_(14, 5_000, 1, "other", 0),
            ],
            t,
        );
        assert_eq!(g["app"].procs, 3, "app, its child sh and grandchild worker");
        assert_eq!(g["web"].procs, 1, "web matches its own rule");
        assert_eq!(g.len(), 2);
        let mut gr = by_comm(false);
        let (g, _) = gr.update(
            vec![proc_(10, 1_000, 1, "app", 0), proc_(11, 2_000, 10, "sh", 0)],
            t,
        );
        assert_eq!(g["app"].procs, 1);
    }

    #[test]
    fn a_process_is_named_once_unless_rechecked() {
        let mut gr = by_comm(true);
        gr.update(vec![proc_(30, 1_000, 1, "bash", 0)], BOOT_NOW);
        // It execs into `app`: already ignored, it stays out.
        let (g, _) = gr.update(vec![proc_(30, 1_000, 1, "app", 0)], BOOT_NOW + 1);
        assert!(!g.contains_key("app"));
        let mut gr = Grouper::new(
            config("process_names:\n  - comm: [app]\n    name: x\n"),
            GroupOptions {
                children: true,
                recheck: true,
                ..GroupOptions::default()
            },
        );
        gr.update(vec![proc_(30, 1_000, 1, "bash", 0)], BOOT_NOW);
        let (g, _) = gr.update(vec![proc_(30, 1_000, 1, "app", 0)], BOOT_NOW + 1);
        assert_eq!(g["x"].procs, 1);
    }

    #[test]
    fn empty_groups_are_kept_or_forgotten() {
        let mut gr = Grouper::new(
            config("process_names:\n  - comm: [app]\n    name: app\n"),
            GroupOptions {
                children: true,
                remove_empty_groups: true,
                ..GroupOptions::default()
            },
        );
        gr.update(vec![proc_(10, 1_000, 1, "app", 0)], BOOT_NOW);
        let (g, _) = gr.update(vec![], BOOT_NOW + 1);
        assert!(g.is_empty());
    }

    #[test]
    fn gauges_sum_and_the_worst_fd_ratio_is_the_largest() {
        let mut gr = by_comm(true);
        let mut a = proc_(10, 1_000, 1, "app", 0);
        a.open_fds = Some(512);
        a.memory.resident = 100;
        let mut b = proc_(11, 500, 1, "app", 0);
        b.open_fds = None;
        b.memory.resident = 50;
        b.start_time.0 -= 10;
        let (g, _) = gr.update(vec![a, b], BOOT_NOW);
        let app = &g["app"];
        assert_eq!(app.open_fds, 512);
        assert_eq!(app.worst_fd_ratio, 0.5);
        assert_eq!(app.memory.resident, 150);
        assert_eq!(app.oldest_start, Some(1_700_000_000 - 10));
        assert_eq!(app.states.sleeping, 2);
    }

    #[test]
    fn thread_counters_accumulate_by_name_and_never_go_down() {
        let mut gr = by_comm(true);
        let th = |tid: u32, name: &str, cpu: u64| ThreadSample {
            id: (tid, 7),
            name: name.into(),
            counts: Counts {
                cpu_user_ns: cpu,
                ..Counts::default()
            },
            wchan: None,
            state: 'S',
        };
        let with = |threads: Vec<ThreadSample>| {
            let mut p = proc_(10, 1_000, 1, "app", 0);
            p.num_threads = threads.len() as u64;
            p.threads = threads;
            p
        };
        gr.update(
            vec![with(vec![th(10, "app", 5), th(11, "io", 5)])],
            BOOT_NOW,
        );
        let (g, _) = gr.update(
            vec![with(vec![th(10, "app", 8), th(11, "io", 9)])],
            BOOT_NOW + 1,
        );
        let t = &g["app"].threads;
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].name.as_str(), t[0].counts.cpu_user_ns), ("app", 3));
        assert_eq!((t[1].name.as_str(), t[1].counts.cpu_user_ns), ("io", 4));
        // The io thread exits; a new one of that name comes: its growth adds on.
        gr.update(
            vec![with(vec![th(10, "app", 8), th(12, "x", 0)])],
            BOOT_NOW + 2,
        );
        gr.update(
            vec![with(vec![th(10, "app", 8), th(13, "io", 1)])],
            BOOT_NOW + 3,
        );
        let (g, _) = gr.update(
            vec![with(vec![th(10, "app", 8), th(13, "io", 3)])],
            BOOT_NOW + 4,
        );
        let io = g["app"].threads.iter().find(|t| t.name == "io").unwrap();
        assert_eq!((io.count, io.counts.cpu_user_ns), (1, 6));
        // A thread that renames itself counts under its new name from then on.
        let (g, _) = gr.update(
            vec![with(vec![th(10, "app", 8), th(13, "io2", 4)])],
            BOOT_NOW + 5,
        );
        let names: Vec<_> = g["app"].threads.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["app", "io2"]);
        let io2 = &g["app"].threads[1];
        assert_eq!((io2.count, io2.counts.cpu_user_ns), (1, 1));
    }

    #[test]
    fn a_thread_grows_from_its_own_last_sample_and_a_reused_tid_starts_anew() {
        let th = |tid: u32, start: u64, cpu: u64| ThreadSample {
            id: (tid, start),
            name: "t".into(),
            counts: Counts {
                cpu_user_ns: cpu,
                ..Counts::default()
            },
            wchan: None,
            state: 'S',
        };
        let cpu = |v: &[Counts]| v.iter().map(|c| c.cpu_user_ns).collect::<Vec<_>>();
        let old = [th(10, 1, 5), th(11, 1, 5), th(12, 1, 5), th(14, 1, 5)];
        let mut out = vec![Counts::default(); 9];
        // 11 exited, 12's tid went to a thread started later, 13 is new, 15 follows 14.
        let new = [
            th(10, 1, 8),
            th(12, 2, 9),
            th(13, 2, 4),
            th(14, 1, 6),
            th(15, 2, 1),
        ];
        thread_growth(10, &old, &new, &mut out);
        assert_eq!(cpu(&out), [3, 0, 0, 1, 0]);
        // From nothing (a process first tracked): every thread starts at nothing.
        thread_growth(10, &[], &new, &mut out);
        assert_eq!(cpu(&out), [0, 0, 0, 0, 0]);
        // Fewer than two threads: none kept.
        thread_growth(10, &old, &new[..1], &mut out);
        assert!(out.is_empty());
    }
}
