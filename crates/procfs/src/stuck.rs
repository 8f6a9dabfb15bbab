//! Reads of another process's memory that give up instead of waiting with it.
//!
//! /proc/PID/cmdline, environ, maps, smaps and smaps_rollup take the process's memory-map lock
//! (`mmap_read_lock_killable`), and a process can hold that lock for ever: one thread faulting
//! on a file of a hung FUSE or NFS mount keeps it read-locked, and then any thread of it that
//! maps or unmaps waits for it write-locked, and every later reader queues behind that writer.
//! Such a reader sleeps until the file system answers, and only a fatal signal wakes it; there
//! is no non-blocking read of those files. So taskdiag makes those reads where it can walk away
//! from them:
//!
//! * A read made on its own ([`read_bounded`]: completing one task from /proc, the tools'
//!   smaps_rollup, the profiler's maps) is handed to a helper thread of the calling thread and
//!   waited for at most [`deadline()`].
//! * The procfs backend's walks (`reader`) make them on their worker threads, which note in a
//!   `Slot` which process they are reading and since when; the thread that collects the
//!   workers' output gives up on a worker past the deadline and has the rest of its share
//!   read by a new one.
//!
//! A read given up on is a thread left asleep in the kernel. The process it reads is then
//! [stuck](is_stuck): every later read of its memory in this process (taskdiagd's, an
//! exporter's) is answered at once with [`MmBusy`] instead of leaving another thread with it,
//! until the sleeping read returns (the lock came free, or the process died), and at most
//! [`MAX_STUCK`] threads are ever left so: past that, every read of another process's memory
//! is answered busy. A short-lived tool's sleeping threads go with it at exit (exit_group()
//! is a fatal signal to them). The error's errno in a TASK message is
//! [`taskdiag_proto::ERRNO_MM_BUSY`].

use std::any::Any;
use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a read of another process's memory is waited for, unless `TASKDIAG_MM_TIMEOUT_MS`
/// says otherwise: a resident page is read in microseconds and one swapped out in
/// milliseconds, while a lock held by a hung file system is held for minutes or for ever.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(250);

/// The most threads this process leaves asleep in reads it gave up on.
pub const MAX_STUCK: usize = 16;

/// A read of a process's memory was not made, or not waited for: its memory-map lock is held
/// by something stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "process {pid}: its memory-map lock did not come free within {} ms (a page fault or a \
     mapping change of it is stuck, e.g. on a hung FUSE or NFS file); not waited for",
    deadline().as_millis()
)]
pub struct MmBusy {
    /// The process (thread-group id).
    pub pid: u32,
}

/// The deadline of a read of another process's memory: `TASKDIAG_MM_TIMEOUT_MS` (1 to
/// 60,000 ms), else [`DEFAULT_DEADLINE`]; a tenth of it (at least 10 ms) while a read this
/// process gave up on still sleeps. A hung file system seldom wedges one process alone (every
/// process that faults on its files waits with it): once one read has been given up on, the
/// next stuck process costs a tenth of the wait, so that a walk past many of them still
/// answers in about the time of one.
pub fn deadline() -> Duration {
    static D: OnceLock<Duration> = OnceLock::new();
    let full = *D.get_or_init(|| {
        std::env::var("TASKDIAG_MM_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|ms| (1..=60_000).contains(ms))
            .map_or(DEFAULT_DEADLINE, Duration::from_millis)
    });
    if ASLEEP.load(Ordering::Acquire) > 0 {
        (full / 10).max(Duration::from_millis(10)).min(full)
    } else {
        full
    }
}

/// The processes with a read of theirs asleep, and how many such reads each has.
struct Registry {
    pids: BTreeMap<u32, usize>,
    threads: usize,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pids: BTreeMap::new(),
    threads: 0,
});

/// Reads asleep, all processes together: 0 is the usual case, checked without the lock.
static ASLEEP: AtomicUsize = AtomicUsize::new(0);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // A panic elsewhere while holding it leaves counts that are still right.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a read of process `pid`'s memory is answered busy without being made: a read of it
/// is asleep already, or [`MAX_STUCK`] reads are.
pub fn is_stuck(pid: u32) -> bool {
    if ASLEEP.load(Ordering::Acquire) == 0 {
        return false;
    }
    let r = registry();
    r.threads >= MAX_STUCK || r.pids.contains_key(&pid)
}

/// How many reads this process gave up on are still asleep.
pub fn asleep() -> usize {
    ASLEEP.load(Ordering::Acquire)
}

/// A read given up on while it sleeps: counted in the registry until dropped, which its
/// thread does once the read returns.
#[derive(Debug)]
pub(crate) struct Asleep {
    pid: u32,
}

impl Asleep {
    fn new(pid: u32) -> Self {
        let mut r = registry();
        *r.pids.entry(pid).or_insert(0) += 1;
        r.threads += 1;
        ASLEEP.fetch_add(1, Ordering::AcqRel);
        Asleep { pid }
    }
}

impl Drop for Asleep {
    fn drop(&mut self) {
        let mut r = registry();
        if let Some(n) = r.pids.get_mut(&self.pid) {
            *n -= 1;
            if *n == 0 {
                r.pids.remove(&self.pid);
            }
        }
        r.threads -= 1;
        ASLEEP.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where a thread that may be given up on says what it is reading: the process and since when
/// (nanoseconds since [`epoch`], 0 while it reads none), and, once given up on, the
/// registration it drops when its read returns.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    since: AtomicU64,
    pid: AtomicU32,
    /// `Some(None)` once given up on: the thread stops at its next step. `Some(Some(_))` while
    /// the read it was given up in still sleeps.
    given_up: Mutex<Option<Option<Asleep>>>,
}

/// The clock of [`Slot`]s: an instant of this process's first use.
fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    // At least 1: 0 means no read under way.
    (epoch().elapsed().as_nanos() as u64).max(1)
}

impl Slot {
    /// Runs `read` of process `pid`'s memory, noted in the slot meanwhile.
    pub(crate) fn read<T>(&self, pid: u32, read: impl FnOnce() -> T) -> T {
        self.pid.store(pid, Ordering::Relaxed);
        self.since.store(now_ns(), Ordering::Release);
        let r = read();
        // Under the lock: a collector that gives up on this read either saw it still under way
        // and registered it (dropped here), or sees it over.
        let mut g = self.given_up.lock().unwrap_or_else(|p| p.into_inner());
        self.since.store(0, Ordering::Release);
        if let Some(asleep) = g.as_mut() {
            asleep.take();
        }
        r
    }

    /// Says that the read under way moved on (one `read()` of several returned): the deadline
    /// counts from here, so only a read that stops moving is given up on, not a long one.
    pub(crate) fn progress(&self) {
        if self.since.load(Ordering::Relaxed) != 0 {
            self.since.store(now_ns(), Ordering::Release);
        }
    }

    /// Whether this slot's thread is in a read.
    fn is_reading(&self) -> bool {
        self.since.load(Ordering::Acquire) != 0
    }

    /// Whether this slot's thread was given up on (it should stop).
    pub(crate) fn is_given_up(&self) -> bool {
        self.given_up
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// The process this slot's thread has been reading for longer than `limit`, given up on
    /// and registered as stuck; `None` if it is reading nothing for that long.
    pub(crate) fn give_up_after(&self, limit: Duration) -> Option<u32> {
        let since = self.since.load(Ordering::Acquire);
        if since == 0 || now_ns().saturating_sub(since) < limit.as_nanos() as u64 {
            return None;
        }
        let mut g = self.given_up.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_some() || self.since.load(Ordering::Acquire) != since {
            return None;
        }
        let pid = self.pid.load(Ordering::Relaxed);
        *g = Some(Some(Asleep::new(pid)));
        Some(pid)
    }

    /// Gives this slot's thread up whatever it is doing, registering process `pid` as stuck
    /// until its current or next read returns; false if it was given up on already.
    fn give_up(&self, pid: u32) -> bool {
        let mut g = self.given_up.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_some() {
            return false;
        }
        *g = Some(Some(Asleep::new(pid)));
        true
    }
}

/// Work for a helper thread, and what it gives back.
type Job = Box<dyn FnOnce() -> Box<dyn Any + Send> + Send>;

/// A calling thread's helper: its channels, the slot it reads under, and whether it still
/// takes work (it ends after [`IDLE`] without any).
struct Helper {
    jobs: SyncSender<Job>,
    done: Receiver<Box<dyn Any + Send>>,
    slot: Arc<Slot>,
    alive: Arc<Mutex<bool>>,
}

/// How long a helper thread waits for work before it ends: a long-lived caller (taskdiagd's
/// workers) keeps no idle thread for each of its threads. Reads on their own come in bursts
/// (a walk's fix-ups); a new thread costs tens of microseconds.
const IDLE: Duration = Duration::from_millis(250);

impl Helper {
    fn spawn() -> io::Result<Helper> {
        let (jobs, job_rx) = sync_channel::<Job>(1);
        let (done_tx, done) = sync_channel(1);
        let slot = Arc::new(Slot::default());
        let alive = Arc::new(Mutex::new(true));
        let (s, a) = (Arc::clone(&slot), Arc::clone(&alive));
        std::thread::Builder::new()
            .name("taskdiag-mm".into())
            .spawn(move || {
                WATCHED.with(|w| *w.borrow_mut() = Some(Arc::clone(&s)));
                loop {
                    let job = match job_rx.recv_timeout(IDLE) {
                        Ok(job) => job,
                        Err(RecvTimeoutError::Disconnected) => return,
                        // Under the lock the caller sends with: no job is left behind.
                        Err(RecvTimeoutError::Timeout) => {
                            let mut alive = a.lock().unwrap_or_else(|p| p.into_inner());
                            match job_rx.try_recv() {
                                Ok(job) => job,
                                Err(_) => {
                                    *alive = false;
                                    return;
                                }
                            }
                        }
                    };
                    let pid = s.pid.load(Ordering::Relaxed);
                    let r = s.read(pid, job);
                    if s.is_given_up() || done_tx.send(r).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Helper {
            jobs,
            done,
            slot,
            alive,
        })
    }

    /// Hands `job` over, or back if the helper ended (idle) or is gone.
    fn send(&self, job: Job) -> Result<(), Job> {
        let alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
        if !*alive {
            return Err(job);
        }
        self.jobs.send(job).map_err(|e| e.0)
    }

    fn is_alive(&self) -> bool {
        *self.alive.lock().unwrap_or_else(|p| p.into_inner())
    }
}

thread_local! {
    static HELPER: std::cell::RefCell<Option<Helper>> = const { std::cell::RefCell::new(None) };
}

/// Runs `job`, which reads process `pid`'s memory (or anything that takes its memory-map
/// lock), on this thread's helper thread, waiting at most [`deadline()`]. `Err` when it was
/// not run ([`is_stuck`]) or not waited for; `Ok(Err)` when no helper thread could be made.
pub fn bounded<T: Send + 'static>(
    pid: u32,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<io::Result<T>, MmBusy> {
    if is_stuck(pid) {
        return Err(MmBusy { pid });
    }
    // On a thread of bounded_each, whose whole call is watched already.
    if WATCHED.with(|w| w.borrow().is_some()) {
        return Ok(Ok(job()));
    }
    let gone = || io::Error::other("the thread reading /proc for this one is gone");
    HELPER.with(|h| {
        let mut h = h.borrow_mut();
        let mut job: Job = Box::new(move || Box::new(job()) as Box<dyn Any + Send>);
        // A helper that ended idle gives the job back: a new one takes it.
        for _ in 0..2 {
            if h.as_ref().is_none_or(|h| !h.is_alive()) {
                match Helper::spawn() {
                    Ok(new) => *h = Some(new),
                    Err(e) => return Ok(Err(e)),
                }
            }
            let helper = h.as_ref().expect("spawned above");
            helper.slot.pid.store(pid, Ordering::Relaxed);
            match helper.send(job) {
                Ok(()) => break,
                Err(back) => {
                    job = back;
                    *h = None;
                }
            }
        }
        let Some(helper) = h.as_ref() else {
            return Ok(Err(gone()));
        };
        let limit = deadline();
        let started = Instant::now();
        let mut wait = limit;
        loop {
            match helper.done.recv_timeout(wait) {
                Ok(r) => {
                    return Ok(r.downcast::<T>().map(|b| *b).map_err(|_| gone()));
                }
                Err(RecvTimeoutError::Timeout) => {
                    // Past the deadline in the read itself (since it last moved on), or not
                    // started after four deadlines (a thread not scheduled for that long): left
                    // asleep with its registration, and the next read gets a new helper.
                    if helper.slot.give_up_after(limit).is_some()
                        || (started.elapsed() > limit * 4
                            && !helper.slot.is_reading()
                            && helper.slot.give_up(pid))
                    {
                        *h = None;
                        return Err(MmBusy { pid });
                    }
                    // Not started yet by the slot's clock, or just over: a little longer.
                    wait = limit / 8;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    *h = None;
                    return Ok(Err(gone()));
                }
            }
        }
    })
}

thread_local! {
    /// The slot of a thread whose caller watches it (a helper thread, a thread [`bounded_each`]
    /// runs): reads made on it need no helper of their own, and say on it when they move on.
    static WATCHED: std::cell::RefCell<Option<Arc<Slot>>> = const { std::cell::RefCell::new(None) };
}

/// Says, on a watched thread (a job of [`bounded`] or [`bounded_each`]), that its read of
/// another process's memory moved on: one step of several returned (a `read()` of a long
/// file, one query of many). Its deadline counts from the last step, so a long read is not
/// taken for a stuck one. Nothing elsewhere.
pub fn progress() {
    WATCHED.with(|w| {
        if let Some(s) = w.borrow().as_ref() {
            s.progress();
        }
    });
}

/// `f` of each of `pids`, in order, on one thread the caller watches: each call is taken to
/// read that process's memory (it may wait on its memory-map lock), and one that has not
/// returned after [`deadline()`] is given up on as [`bounded`] gives one up, its answer `None`
/// (also for a process already [stuck](is_stuck)), the rest made on a new thread. One
/// hand-over for the batch instead of one per read; [`bounded`] and [`read_proc_file`] called
/// within `f` run inline, under the batch's watch.
pub fn bounded_each<T: Send + 'static>(pids: &[u32], f: fn(u32) -> T) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = Vec::with_capacity(pids.len());
    while out.len() < pids.len() {
        let from = out.len();
        let todo: Vec<u32> = pids[from..].to_vec();
        let slot = Arc::new(Slot::default());
        // The answers go into a vector the caller takes at the end (or at a give-up): a
        // message per answer would wake the caller per read, as costly as a hand-over each.
        let answers: Arc<Mutex<Vec<Option<T>>>> = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, done) = sync_channel::<()>(1);
        let (s, a) = (Arc::clone(&slot), Arc::clone(&answers));
        let spawned = std::thread::Builder::new()
            .name("taskdiag-mm".into())
            .spawn(move || {
                WATCHED.with(|w| *w.borrow_mut() = Some(Arc::clone(&s)));
                for pid in todo {
                    let r = (!is_stuck(pid)).then(|| s.read(pid, || f(pid)));
                    if s.is_given_up() {
                        return;
                    }
                    a.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                }
                let _ = done_tx.send(());
            });
        if spawned.is_err() {
            break;
        }
        let take = |out: &mut Vec<Option<T>>| {
            out.append(&mut answers.lock().unwrap_or_else(|p| p.into_inner()));
        };
        loop {
            let limit = deadline();
            match done.recv_timeout(limit / 4) {
                Ok(()) => {
                    take(&mut out);
                    break;
                }
                // Ended without finishing (it panicked): none for the rest.
                Err(RecvTimeoutError::Disconnected) => {
                    take(&mut out);
                    out.resize_with(pids.len(), || None);
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if slot.give_up_after(limit).is_some() {
                        // The answers before the one it sleeps in, then none for that one.
                        take(&mut out);
                        if out.len() < pids.len() {
                            out.push(None);
                        }
                        break;
                    }
                }
            }
        }
    }
    out.resize_with(pids.len(), || None);
    out
}

/// Reads `fd`, a /proc file of process `pid` that takes its memory-map lock, whole into `buf`
/// (see `read_into`: to its end with `to_eof`, else until a short read) with [`bounded`]. `Err`
/// when the read was not made or not waited for; `buf` is then empty.
pub fn read_bounded(
    pid: u32,
    fd: OwnedFd,
    buf: &mut Vec<u8>,
    to_eof: bool,
) -> Result<io::Result<()>, MmBusy> {
    let mut b = std::mem::take(buf);
    let r = bounded(pid, move || {
        let r = crate::reader::read_steps(&fd, &mut b, to_eof, crate::reader::MM_STEP, progress);
        (b, r)
    })?;
    Ok(r.and_then(|(b, r)| {
        *buf = b;
        r
    }))
}

/// The whole of `/proc/PID/<name>` of process `pid` (a file that takes its memory-map lock:
/// maps, smaps, smaps_rollup, cmdline, environ), read with [`bounded`]. A read not made or not
/// waited for fails with [`io::ErrorKind::WouldBlock`] carrying [`MmBusy`].
pub fn read_proc_file(pid: u32, name: &str) -> io::Result<Vec<u8>> {
    let fd: OwnedFd = std::fs::File::open(format!("/proc/{pid}/{name}"))?.into();
    let mut buf = Vec::with_capacity(4096);
    match read_bounded(pid, fd, &mut buf, true) {
        Ok(r) => r.map(|()| buf),
        Err(busy) => Err(io::Error::new(io::ErrorKind::WouldBlock, busy)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_given_up_on_marks_its_process_until_it_returns() {
        let slot = Arc::new(Slot::default());
        let (go_tx, go_rx) = sync_channel::<()>(0);
        let s = Arc::clone(&slot);
        // A pid no real process has (above PID_MAX_LIMIT).
        let pid = 4_194_305;
        let t = std::thread::spawn(move || s.read(pid, || go_rx.recv()));
        while slot.since.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(slot.give_up_after(Duration::ZERO), Some(pid));
        assert!(is_stuck(pid));
        assert!(!is_stuck(pid + 1) || asleep() >= MAX_STUCK);
        // Given up on once only.
        assert_eq!(slot.give_up_after(Duration::ZERO), None);
        go_tx.send(()).unwrap();
        t.join().unwrap().unwrap();
        assert!(slot.is_given_up());
        assert!(!is_stuck(pid));
    }

    #[test]
    fn a_read_that_moves_on_is_timed_from_its_last_step() {
        let slot = Slot::default();
        let limit = Duration::from_millis(100);
        // A pid no real process has (above PID_MAX_LIMIT), and no other test uses.
        let pid = 4_194_310;
        slot.read(pid, || {
            for _ in 0..3 {
                std::thread::sleep(limit * 3 / 2);
                // Longer than the limit into the read, but it has just moved on.
                slot.progress();
                assert_eq!(slot.give_up_after(limit), None);
            }
        });
        assert!(!slot.is_given_up());
        assert!(!is_stuck(pid));
    }

    #[test]
    fn a_batch_gives_up_on_the_read_that_sleeps_and_answers_the_rest() {
        // Pids no real process has (above PID_MAX_LIMIT); the middle one "sleeps".
        const SLOW: u32 = 4_194_400;
        fn read(pid: u32) -> u32 {
            if pid == SLOW {
                std::thread::sleep(deadline() * 8);
            }
            pid + 1
        }
        let pids = [SLOW - 1, SLOW, SLOW + 1];
        let got = bounded_each(&pids, read);
        assert_eq!(got, vec![Some(SLOW), None, Some(SLOW + 2)]);
        // Known stuck until the sleep returns: answered at once.
        assert!(is_stuck(SLOW));
        assert_eq!(bounded_each(&[SLOW], read), vec![None]);
    }

    #[test]
    // (Not maps: other tests' threads map and unmap stacks between the two reads.)
    fn a_bounded_read_reads_a_whole_file() {
        let fd: OwnedFd = std::fs::File::open("/proc/self/cmdline").unwrap().into();
        let mut buf = Vec::new();
        read_bounded(std::process::id(), fd, &mut buf, true)
            .unwrap()
            .unwrap();
        assert_eq!(buf, std::fs::read("/proc/self/cmdline").unwrap());
    }
}
