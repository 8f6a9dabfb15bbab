//! The proportional sizes (smaps_rollup's Pss and SwapPss) of the processes a collection asks
//! about, kept between collections, and the thread that reads the aged ones again between
//! scrapes.
//!
//! smaps_rollup walks the page tables of every mapping (30-50 µs for a small idle process):
//! read for every process at every scrape it was 80% of a collection. So a collection reads a
//! process's rollup only where the process is new here, or its resident size or fault counts
//! changed since the last read (what it maps changed, and its proportional sizes with it).
//! Those of a process that changed in neither move only as the processes it shares pages with
//! come and go: 30-60 s after its read (spread by pid, so that a host of idle processes is not
//! due all at once), a background thread at nice 19 reads it again, and collections keep the
//! last value meanwhile. A scrape does not wait for those reads (at a one-minute interval they
//! were every process's, over a second of a scrape of 50,000), unless the thread fell behind (a
//! host too busy to give a nice-19 thread time, or scrapes closer than its reads take): the
//! thread is handed one collection's aged rollups at a time, and one it was handed and has not
//! read by the next collection, or one that aged while it was still reading an earlier hand-
//! over and is still due at the next collection, is read by that collection. So the thread's
//! queue holds one hand-over at most, and a value is at most one scrape interval older than
//! the 30-60 s.
//!
//! A read answers for whatever process has the pid when it is made: one made after the process
//! exited (and its pid was taken again) is kept under the exited process's identity, which no
//! collection asks about again, and is forgotten with it.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::sample::{Id, IdMap, ProcSample};

/// Reads process `pid`'s Pss and SwapPss, bytes; `None` where they cannot be read.
pub type ReadFn = fn(u32) -> Option<(u64, u64)>;

/// smaps_rollup's Pss and SwapPss of process `pid`, bytes; `None` where it cannot be read.
fn read_rollup(pid: u32) -> Option<(u64, u64)> {
    let r = taskdiag_tools::procvals::read_smaps_rollup(pid)?;
    Some((r.pss * 1024, r.swap_pss * 1024))
}

/// `read` of each of `pids`, in order, on one thread the caller can give up on: a read that
/// waits on a process's memory-map lock held by something stuck is answered `None` after the
/// deadline of taskdiag_procfs::stuck (reads on their own would cost a thread hand-over each,
/// 15% of a first scrape of 50,000 processes).
fn read_batch(pids: &[u32], read: ReadFn) -> Vec<Option<(u64, u64)>> {
    taskdiag_procfs::stuck::bounded_each(pids, read)
        .into_iter()
        .map(Option::flatten)
        .collect()
}

/// How long after its read a process's proportional sizes are read again while its resident
/// size and fault counts stay the same: 30 to 60 s, spread by pid.
fn max_age(pid: u32) -> Duration {
    Duration::from_secs(30 + u64::from(pid % 31))
}

/// Reads handed to the thread at a time, and answered at a time.
const BATCH: usize = 512;

/// One process's last read, and what the process looked like then.
#[derive(Debug, Clone, Copy)]
struct Entry {
    readable: bool,
    pss: u64,
    swap_pss: u64,
    resident: u64,
    faults: u64,
    read_at: Instant,
    /// The last collection that asked about it.
    gen: u64,
    /// Handed to the thread, and not answered yet.
    queued: bool,
    /// Aged at a collection while the thread was still reading an earlier hand-over.
    deferred: bool,
}

impl Entry {
    /// A read made at `at` of a process with resident size `resident` and `faults` faults.
    fn new(read: Option<(u64, u64)>, at: Instant, resident: u64, faults: u64) -> Entry {
        let mut e = Entry {
            readable: false,
            pss: 0,
            swap_pss: 0,
            resident,
            faults,
            read_at: at,
            gen: 0,
            queued: false,
            deferred: false,
        };
        e.set(read, at);
        e
    }

    /// Keeps `read`, made at `at`.
    fn set(&mut self, read: Option<(u64, u64)>, at: Instant) {
        self.readable = read.is_some();
        self.pss = read.map_or(0, |r| r.0);
        self.swap_pss = read.map_or(0, |r| r.1);
        self.read_at = at;
    }
}

/// What a collection does about one process's rollup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// The last read stands.
    Fresh,
    /// The last read stands for this collection; the thread reads it again.
    Background,
    /// The collection reads it.
    Now,
}

/// What to do about a process whose last read is `e` (`None`: never read), with resident size
/// `resident` and `faults` faults now, at `now`. One handed to the thread at an earlier
/// collection and not read since, or left to it while it was busy (the thread is behind), is
/// read now.
fn due(e: Option<&Entry>, pid: u32, resident: u64, faults: u64, now: Instant) -> Due {
    let Some(e) = e else { return Due::Now };
    if e.resident != resident || e.faults != faults || e.queued || e.deferred {
        return Due::Now;
    }
    if now.saturating_duration_since(e.read_at) < max_age(pid) {
        Due::Fresh
    } else {
        Due::Background
    }
}

/// Reads answered by the thread: the process, what was read, and when.
type Answers = Vec<(Id, Option<(u64, u64)>, Instant)>;

/// The background reader: batches of identities go in, their reads come out.
#[derive(Debug)]
struct Refresher {
    todo: mpsc::Sender<Vec<Id>>,
    done: mpsc::Receiver<Answers>,
}

impl Refresher {
    /// Starts the thread, which reads with `read` until either end is dropped. It is started
    /// from a collection, whose thread blocks the signals the exporter's signal thread takes,
    /// and inherits that.
    fn start(read: ReadFn) -> std::io::Result<Refresher> {
        let (todo, todo_rx) = mpsc::channel::<Vec<Id>>();
        let (done_tx, done) = mpsc::channel::<Answers>();
        std::thread::Builder::new()
            .name("rollups".into())
            .spawn(move || {
                // SAFETY: gettid and setpriority take and return plain integers; on Linux
                // PRIO_PROCESS with a thread id sets that thread's nice value alone. Failure
                // leaves the thread at the process's priority, which is harmless.
                unsafe {
                    libc::setpriority(libc::PRIO_PROCESS as _, libc::gettid() as libc::id_t, 19);
                }
                while let Ok(ids) = todo_rx.recv() {
                    for chunk in ids.chunks(BATCH) {
                        let pids: Vec<u32> = chunk.iter().map(|id| id.0).collect();
                        let answers = chunk
                            .iter()
                            .zip(read_batch(&pids, read))
                            .map(|(&id, r)| (id, r, Instant::now()))
                            .collect();
                        if done_tx.send(answers).is_err() {
                            return;
                        }
                    }
                }
            })?;
        Ok(Refresher { todo, done })
    }
}

/// The kept rollups of the processes collections ask about.
#[derive(Debug)]
pub struct Rollups {
    cache: IdMap<Id, Entry>,
    /// Numbers the collections.
    gen: u64,
    read: ReadFn,
    /// Started when a first rollup ages; `None` before, or where it could not start (the
    /// collections then read aged rollups themselves).
    refresher: Option<Refresher>,
    /// Whether starting it failed (it is not tried again).
    no_refresher: bool,
    /// Reads handed to the thread and not answered yet.
    in_flight: usize,
}

impl Default for Rollups {
    fn default() -> Rollups {
        Rollups::with_reader(read_rollup)
    }
}

impl Rollups {
    /// Rollups read with `read` (tests give their own).
    pub fn with_reader(read: ReadFn) -> Rollups {
        Rollups {
            cache: IdMap::default(),
            gen: 0,
            read,
            refresher: None,
            no_refresher: false,
            in_flight: 0,
        }
    }

    /// Sets the proportional sizes of `procs[i]` for every `i` in `which`, from the kept reads
    /// and those due now (see the module's description); marks as partial a process whose
    /// rollup this reader may not read. Processes not in `which` are forgotten.
    pub fn fill(&mut self, procs: &mut [ProcSample], which: &[usize], now: Instant) {
        self.take_answers();
        self.gen = self.gen.wrapping_add(1);
        let gen = self.gen;
        let mut aged = Vec::new();
        // Still reading an earlier hand-over: this collection's aged rollups wait for the next.
        let busy = self.in_flight > 0;
        // What each process is due for, and the reads due now made in one batch: one at a
        // time, each would be a hand-over to a thread of its own (see read_batch).
        let mut dues = Vec::with_capacity(which.len());
        for &i in which {
            let p = &procs[i];
            let faults = p.counts.minor_faults + p.counts.major_faults;
            let mut d = due(
                self.cache.get(&p.id),
                p.id.0,
                p.memory.resident,
                faults,
                now,
            );
            if d == Due::Background && !self.can_queue() {
                d = Due::Now;
            }
            dues.push(d);
        }
        let now_pids: Vec<u32> = which
            .iter()
            .zip(&dues)
            .filter(|(_, d)| **d == Due::Now)
            .map(|(&i, _)| procs[i].id.0)
            .collect();
        let mut read_now = read_batch(&now_pids, self.read).into_iter();
        for (&i, d) in which.iter().zip(dues) {
            let p = &mut procs[i];
            let faults = p.counts.minor_faults + p.counts.major_faults;
            let e = match d {
                Due::Now => {
                    let got = read_now.next().flatten();
                    let read = Entry::new(got, now, p.memory.resident, faults);
                    self.cache.entry(p.id).insert_entry(read).into_mut()
                }
                // (Kept: `due` says Now for a process never read.)
                Due::Fresh | Due::Background => match self.cache.get_mut(&p.id) {
                    Some(e) => e,
                    None => continue,
                },
            };
            e.gen = gen;
            if d == Due::Background {
                if busy {
                    e.deferred = true;
                } else {
                    e.queued = true;
                    aged.push(p.id);
                }
            }
            // One this reader may not read (another user's, through taskdiagd) is asked
            // again no sooner than a readable one: the refusal counts at each collection.
            p.partial |= !e.readable;
            p.memory.proportional_resident = e.pss;
            p.memory.proportional_swapped = e.swap_pss;
        }
        // Those not asked about this time (gone, or no longer tracked) are forgotten.
        if self.cache.len() > which.len() {
            self.cache.retain(|_, e| e.gen == gen);
        }
        if !aged.is_empty() {
            let n = aged.len();
            let sent = self.refresher.as_ref().map(|r| r.todo.send(aged));
            if matches!(sent, Some(Ok(()))) {
                self.in_flight += n;
            } else {
                // The thread is gone: the collections read aged rollups from now on (those
                // just marked queued are read by the next).
                self.refresher = None;
                self.no_refresher = true;
            }
        }
    }

    /// Whether aged rollups can go to the thread (starting it the first time).
    fn can_queue(&mut self) -> bool {
        if self.refresher.is_none() && !self.no_refresher {
            match Refresher::start(self.read) {
                Ok(r) => self.refresher = Some(r),
                Err(_) => self.no_refresher = true,
            }
        }
        self.refresher.is_some()
    }

    /// Keeps what the thread has read so far.
    fn take_answers(&mut self) {
        let Some(r) = &self.refresher else { return };
        while let Ok(answers) = r.done.try_recv() {
            keep(&mut self.cache, &mut self.in_flight, answers);
        }
    }

    /// Waits until the thread has answered every read handed to it (tests).
    #[cfg(test)]
    fn settle(&mut self) {
        while self.in_flight > 0 {
            let Some(r) = &self.refresher else { return };
            let Ok(answers) = r.done.recv_timeout(Duration::from_secs(10)) else {
                return;
            };
            keep(&mut self.cache, &mut self.in_flight, answers);
        }
    }
}

/// Keeps the thread's reads of the processes still asked about, and counts them off
/// `in_flight`; a read older than the kept one is dropped (the collection read that process
/// itself meanwhile).
fn keep(cache: &mut IdMap<Id, Entry>, in_flight: &mut usize, answers: Answers) {
    *in_flight -= answers.len().min(*in_flight);
    for (id, read, at) in answers {
        let Some(e) = cache.get_mut(&id) else {
            continue;
        };
        e.queued = false;
        if at > e.read_at {
            e.set(read, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn proc(pid: u32, resident: u64) -> ProcSample {
        let mut p = ProcSample {
            id: (pid, 1000 + u64::from(pid)),
            ..ProcSample::default()
        };
        p.memory.resident = resident;
        p
    }

    fn entry(resident: u64, faults: u64, read_at: Instant) -> Entry {
        Entry {
            readable: true,
            pss: 1,
            swap_pss: 0,
            resident,
            faults,
            read_at,
            gen: 0,
            queued: false,
            deferred: false,
        }
    }

    #[test]
    fn a_rollup_is_read_when_new_or_changed_or_the_thread_is_behind_and_by_the_thread_when_aged() {
        let t = Instant::now();
        let pid = 62; // max age 30 s
        let e = entry(4096, 7, t);
        assert_eq!(due(None, pid, 4096, 7, t), Due::Now);
        assert_eq!(due(Some(&e), pid, 8192, 7, t), Due::Now);
        assert_eq!(due(Some(&e), pid, 4096, 8, t), Due::Now);
        let s = Duration::from_secs;
        assert_eq!(due(Some(&e), pid, 4096, 7, t + s(29)), Due::Fresh);
        assert_eq!(due(Some(&e), pid, 4096, 7, t + s(30)), Due::Background);
        assert_eq!(due(Some(&e), pid, 4096, 7, t + s(3600)), Due::Background);
        // Handed to the thread, and not read by the next collection: the thread is behind.
        let queued = Entry { queued: true, ..e };
        assert_eq!(due(Some(&queued), pid, 4096, 7, t + s(1)), Due::Now);
        let deferred = Entry {
            deferred: true,
            ..e
        };
        assert_eq!(due(Some(&deferred), pid, 4096, 7, t + s(1)), Due::Now);
        // Spread by pid: 30 to 60 s.
        assert_eq!(due(Some(&e), 92, 4096, 7, t + s(59)), Due::Fresh);
    }

    // Each test's reader has its own version: the Pss it reads is pid * 1000 + version.
    static AGED: AtomicU64 = AtomicU64::new(1);
    fn read_aged(pid: u32) -> Option<(u64, u64)> {
        Some((u64::from(pid) * 1000 + AGED.load(Ordering::SeqCst), 5))
    }

    #[test]
    fn an_aged_rollup_keeps_its_value_for_the_collection_and_the_thread_reads_it_again() {
        let mut r = Rollups::with_reader(read_aged);
        let t = Instant::now();
        let mut procs = vec![proc(62, 4096), proc(63, 4096)];
        r.fill(&mut procs, &[0, 1], t);
        assert_eq!(procs[0].memory.proportional_resident, 62_001);
        assert_eq!(procs[1].memory.proportional_resident, 63_001);
        assert_eq!(procs[0].memory.proportional_swapped, 5);
        assert!(r.refresher.is_none(), "nothing aged: no thread");

        AGED.store(2, Ordering::SeqCst);
        // 30 s on: 62's is aged (max age 30 s), 63's is not (31 s). Neither is read by the
        // collection.
        let mut procs = vec![proc(62, 4096), proc(63, 4096)];
        r.fill(&mut procs, &[0, 1], t + Duration::from_secs(30));
        assert_eq!(procs[0].memory.proportional_resident, 62_001);
        assert_eq!(procs[1].memory.proportional_resident, 63_001);
        assert!(r.refresher.is_some());
        r.settle();

        let mut procs = vec![proc(62, 4096), proc(63, 4096)];
        r.fill(&mut procs, &[0, 1], t + Duration::from_millis(30_500));
        assert_eq!(
            procs[0].memory.proportional_resident, 62_002,
            "the thread's read"
        );
        assert_eq!(procs[1].memory.proportional_resident, 63_001);
        assert!(!r.cache[&(63, 1063)].queued);
    }

    static CHANGED: AtomicU64 = AtomicU64::new(1);
    fn read_changed(pid: u32) -> Option<(u64, u64)> {
        (pid != 7).then(|| (u64::from(pid) * 1000 + CHANGED.load(Ordering::SeqCst), 0))
    }

    #[test]
    fn a_changed_process_is_read_in_the_collection_and_the_gone_are_forgotten() {
        let mut r = Rollups::with_reader(read_changed);
        let t = Instant::now();
        let mut procs = vec![proc(62, 4096), proc(7, 4096), proc(63, 4096)];
        r.fill(&mut procs, &[0, 1, 2], t);
        assert!(!procs[0].partial);
        assert!(
            procs[1].partial,
            "an unreadable rollup makes the process partial"
        );
        assert_eq!(procs[1].memory.proportional_resident, 0);

        CHANGED.store(2, Ordering::SeqCst);
        // 62 grew; 7 is still unreadable, and partial at each collection; 63 is not asked.
        let mut procs = vec![proc(62, 8192), proc(7, 4096), proc(63, 4096)];
        r.fill(&mut procs, &[0, 1], t + Duration::from_secs(1));
        assert_eq!(procs[0].memory.proportional_resident, 62_002);
        assert!(procs[1].partial);
        assert_eq!(r.cache.len(), 2);
        assert!(!r.cache.contains_key(&(63, 1063)));
        assert!(r.refresher.is_none());
    }

    #[test]
    fn a_read_older_than_the_kept_one_is_dropped_and_one_of_a_gone_process_ignored() {
        let t = Instant::now();
        let mut cache = IdMap::default();
        cache.insert((62, 1062), entry(4096, 0, t));
        cache.get_mut(&(62, 1062)).unwrap().queued = true;
        let mut in_flight = 3;
        keep(
            &mut cache,
            &mut in_flight,
            vec![
                ((62, 1062), Some((9, 9)), t - Duration::from_secs(1)),
                ((63, 1063), Some((9, 9)), t + Duration::from_secs(1)),
            ],
        );
        let e = cache[&(62, 1062)];
        assert!(!e.queued);
        assert_eq!(e.pss, 1, "the older read is dropped");
        assert_eq!(cache.len(), 1);
        keep(
            &mut cache,
            &mut in_flight,
            vec![((62, 1062), None, t + Duration::from_secs(1))],
        );
        assert!(!cache[&(62, 1062)].readable);
    }

    // The thread's reads wait until the test lets them go; the collection's do not.
    static BEHIND: AtomicU64 = AtomicU64::new(1);
    static HELD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
    fn read_behind(pid: u32) -> Option<(u64, u64)> {
        if std::thread::current().name() == Some("rollups") {
            while HELD.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Some((u64::from(pid) * 1000 + BEHIND.load(Ordering::SeqCst), 0))
    }

    #[test]
    fn a_thread_behind_leaves_the_reads_to_the_collection_and_holds_one_hand_over() {
        let mut r = Rollups::with_reader(read_behind);
        let t = Instant::now();
        let mut procs = vec![proc(62, 4096), proc(63, 4096)];
        r.fill(&mut procs, &[0, 1], t);
        BEHIND.store(2, Ordering::SeqCst);
        // 62 aged: handed to the thread, which does not answer.
        r.fill(&mut procs, &[0, 1], t + Duration::from_secs(30));
        assert_eq!(procs[0].memory.proportional_resident, 62_001);
        assert_eq!(r.in_flight, 1);
        // The next collection reads 62 itself; 63 has aged meanwhile, but the thread is still
        // busy: it is not handed over, and keeps its value.
        BEHIND.store(3, Ordering::SeqCst);
        r.fill(&mut procs, &[0, 1], t + Duration::from_secs(31));
        assert_eq!(procs[0].memory.proportional_resident, 62_003);
        assert_eq!(procs[1].memory.proportional_resident, 63_001);
        assert!(r.cache[&(63, 1063)].deferred);
        assert_eq!(r.in_flight, 1, "one hand-over at a time");
        // Still busy at the next: the collection reads 63 too.
        BEHIND.store(4, Ordering::SeqCst);
        r.fill(&mut procs, &[0, 1], t + Duration::from_millis(31_500));
        assert_eq!(procs[1].memory.proportional_resident, 63_004);
        // Let go, the thread's late read of 62 is older than the collection's and is dropped.
        HELD.store(false, Ordering::SeqCst);
        r.settle();
        assert_eq!(r.in_flight, 0);
        r.fill(&mut procs, &[0, 1], t + Duration::from_millis(31_600));
        assert_eq!(procs[0].memory.proportional_resident, 62_003);
    }

    #[test]
    fn the_thread_reads_this_process_rollup() {
        let mut r = Rollups::default();
        let me = std::process::id();
        let t = Instant::now();
        let mut procs = vec![ProcSample {
            id: (me, 1),
            ..ProcSample::default()
        }];
        r.fill(&mut procs, &[0], t);
        assert!(procs[0].memory.proportional_resident > 0);
        r.cache.get_mut(&(me, 1)).unwrap().pss = 0;
        r.fill(&mut procs, &[0], t + max_age(me));
        assert_eq!(procs[0].memory.proportional_resident, 0);
        r.settle();
        r.fill(&mut procs, &[0], t + max_age(me));
        assert!(procs[0].memory.proportional_resident > 0);
    }
}
