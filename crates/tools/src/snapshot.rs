//! One look at the tasks: a batched dump decoded into [`Task`] records, plus the few
//! machine-wide values (clock ticks, page size, total memory, boot time, uptime, pid length)
//! that turn those records into what procps prints.
//!
//! The backend comes from `TASKDIAG_BACKEND` (a `taskdiag::BackendKind` name: `auto`, `bpf`,
//! `daemon` or `procfs`; default `auto`: BPF when this process may load it, else the daemon,
//! else /proc), so every tool can be pinned to a backend for tests and comparisons. Records
//! come out sorted like a /proc directory listing: processes in pid order, and with threads,
//! each process's leader first and then its threads by tid.
//!
//! Reading the records is `taskdiag`'s job; what the tools make of them is theirs.

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

pub use taskdiag::CpuTime;
use taskdiag::{BackendKind, Dumper, Group, Request, Strategy, UnknownBackend};
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::StreamDecoder;
pub use taskdiag_proto::task::Task;

/// Errors of taking a snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `TASKDIAG_BACKEND` names no backend.
    #[error("TASKDIAG_BACKEND={:?}: {}", .0.0, .0)]
    BadBackend(UnknownBackend),
    /// The backend could not be opened.
    #[error("opening the {backend} backend: {source}")]
    Open {
        /// Which backend.
        backend: &'static str,
        /// Why.
        #[source]
        source: taskdiag::Error,
    },
    /// The dump failed.
    #[error("reading tasks: {0}")]
    Dump(#[source] taskdiag::Error),
    /// The consumer of a streamed dump failed (writing the output, say).
    #[error("{0}")]
    Sink(#[source] io::Error),
    /// A machine-wide file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A machine-wide file has an unexpected format.
    #[error("{path}: {what}")]
    Parse {
        /// The file.
        path: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

/// The backend `TASKDIAG_BACKEND` asks for (`auto` when unset or empty).
pub fn backend_from_env() -> Result<BackendKind, Error> {
    match std::env::var("TASKDIAG_BACKEND").as_deref() {
        Err(_) | Ok("") => Ok(BackendKind::Auto),
        Ok(name) => name.parse().map_err(Error::BadBackend),
    }
}

/// Machine-wide constants, read once.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, USER_HZ).
    pub hz: u64,
    /// Page size in bytes.
    pub page_size: u64,
    /// MemTotal from /proc/meminfo, KiB.
    pub mem_total_kib: u64,
    /// Boot time, seconds since the epoch (`btime` in /proc/stat).
    pub boot_time: u64,
}

fn read_file(path: &'static str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read { path, source })
}

impl Machine {
    /// Reads the constants.
    pub fn read() -> Result<Machine, Error> {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let meminfo = taskdiag_procfs::system::parse_meminfo(&read_file("/proc/meminfo")?);
        let stat = read_file("/proc/stat")?;
        Ok(Machine {
            hz: clock_ticks(),
            page_size: u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096),
            mem_total_kib: meminfo.mem_total.ok_or(Error::Parse {
                path: "/proc/meminfo",
                what: "no MemTotal line",
            })?,
            boot_time: taskdiag_procfs::system::boot_time(&stat).map_err(|e| Error::Parse {
                path: "/proc/stat",
                what: e.what,
            })?,
        })
    }

    /// Nanoseconds per clock tick.
    pub fn ns_per_tick(&self) -> u64 {
        1_000_000_000 / self.hz
    }
}

pub use taskdiag_procfs::clock_ticks;

/// Seconds since boot as /proc/uptime reports them (centisecond resolution), the clock
/// procps measures elapsed times and %CPU against.
pub fn uptime() -> Result<f64, Error> {
    let path = "/proc/uptime";
    taskdiag_procfs::system::parse_uptime(&read_file(path)?)
        .map_err(|e| Error::Parse { path, what: e.what })
}

/// How many characters the largest pid can have (`procps_pid_length`: the length of
/// /proc/sys/kernel/pid_max); `None` when that cannot be read.
pub fn pid_length() -> Option<usize> {
    taskdiag_procfs::system::pid_length(&std::fs::read("/proc/sys/kernel/pid_max").ok()?)
}

/// Seconds since the epoch, now.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Which tasks and groups a tool needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// Every thread instead of one record per process.
    pub threads: bool,
    /// Show flags (`Group::flag()` bits); BASE is always included.
    pub groups: u64,
}

/// A loaded backend, ready to take snapshots (a long-running tool such as `top` keeps one).
pub struct Source {
    dumper: Dumper,
}

impl Source {
    /// Opens the backend named by `TASKDIAG_BACKEND`, prepared for `groups`.
    pub fn open(groups: u64) -> Result<Source, Error> {
        Source::open_kind(backend_from_env()?, groups)
    }

    /// Opens the backend `kind`, prepared for `groups`.
    pub fn open_kind(kind: BackendKind, groups: u64) -> Result<Source, Error> {
        let dumper =
            Dumper::open_for(kind, groups | Group::Base.flag()).map_err(|source| Error::Open {
                backend: kind.name(),
                source,
            })?;
        Ok(Source { dumper })
    }

    /// The backend answering, by name.
    pub fn backend_name(&self) -> &'static str {
        self.dumper.backend().name()
    }

    /// Hands each process of a whole-system dump to `f` as it is decoded, in pid order (the
    /// order both backends produce for processes), without collecting them: for tools that
    /// print a plain listing. An error from `f` stops the dump and is returned as
    /// [`Error::Sink`].
    pub fn for_each_process(
        &mut self,
        groups: u64,
        f: &mut dyn FnMut(Task) -> io::Result<()>,
    ) -> Result<(), Error> {
        self.for_each_task(false, groups, f)
    }

    /// [`Source::for_each_process`], or with `threads` every thread of every process, each as
    /// /proc/PID/task/TID shows it (a leader's STAT its own), in the backend's order: the BPF
    /// walk goes by thread id, so one process's threads may come between another's, and a
    /// caller that groups them by process must not rely on their order.
    pub fn for_each_task(
        &mut self,
        threads: bool,
        groups: u64,
        f: &mut dyn FnMut(Task) -> io::Result<()>,
    ) -> Result<(), Error> {
        let strategy = if threads {
            Strategy::AllThread
        } else {
            Strategy::All
        };
        self.for_each_of(&Request::new(strategy, 0, groups | Group::Base.flag()), f)
    }

    /// Every thread of every process with `thread_groups`, and each process's own record
    /// ([`Task::process`]) with `process_groups`, each handed to `f` as it is decoded, in the
    /// backend's order (a process's record before its leader's): a process walk and a thread
    /// walk in one, where the backend can (BPF visits each task once).
    pub fn for_each_with_threads(
        &mut self,
        thread_groups: u64,
        process_groups: u64,
        f: &mut dyn FnMut(Task) -> io::Result<()>,
    ) -> Result<(), Error> {
        let req = Request::all_with_threads(
            thread_groups | Group::Base.flag(),
            process_groups | Group::Base.flag(),
        );
        self.for_each_of(&req, f)
    }

    /// The tasks of `req`, each handed to `f` as it is decoded.
    fn for_each_of(
        &mut self,
        req: &Request,
        f: &mut dyn FnMut(Task) -> io::Result<()>,
    ) -> Result<(), Error> {
        let mut dec = StreamDecoder::new();
        let mut bad = None;
        let mut sink_err = None;
        let res = self.dumper.dump(req, &mut |chunk| {
            for m in Messages::new(chunk) {
                // Each task is handed on from where it is decoded (not returned as an event);
                // a message holds at most one, and the walk ends at the first the sink refuses.
                let mut each = |t| {
                    if let Err(e) = f(t) {
                        sink_err = Some(e);
                    }
                };
                if let Err(e) = m.and_then(|m| dec.push_to(&m, &mut each)) {
                    bad = Some(e);
                    return Err(io::Error::other("invalid record"));
                }
                if let Some(e) = &sink_err {
                    return Err(io::Error::from(e.kind()));
                }
            }
            Ok(())
        });
        if let Some(e) = sink_err {
            return Err(Error::Sink(e));
        }
        if let Some(e) = bad {
            return Err(Error::Dump(taskdiag::Error::Internal(e)));
        }
        res.map(|_| ()).map_err(Error::Dump)
    }

    /// Dumps the tasks of `q`, sorted like /proc lists them.
    pub fn take(&mut self, q: &Query) -> Result<Vec<Task>, Error> {
        let strategy = if q.threads {
            Strategy::AllThread
        } else {
            Strategy::All
        };
        let mut tasks = Vec::new();
        self.collect(&Request::new(strategy, 0, q.groups), &mut tasks)?;
        sort_like_proc(&mut tasks);
        Ok(tasks)
    }

    /// [`Source::take`], and with `q.threads` and STAT each leader's STAT its process's
    /// ([`Source::leaders_as_processes`]): the listing procps's `ps -L` and `top -H` show.
    pub fn take_with_leaders(&mut self, q: &Query) -> Result<Vec<Task>, Error> {
        let mut tasks = self.take(q)?;
        if q.threads && q.groups & Group::Stat.flag() != 0 {
            self.leaders_as_processes(&mut tasks)?;
        }
        Ok(tasks)
    }

    /// Whether [`Source::take_tgids`] of a few processes costs about those processes alone
    /// (`Dumper::single_task_reads_are_cheap`).
    pub fn single_task_reads_are_cheap(&self) -> bool {
        self.dumper.single_task_reads_are_cheap()
    }

    /// Dumps the processes `tgids` as [`Source::take`] would show them (with `q.threads`, every
    /// thread of each, a leader's STAT being its process's), sorted like /proc lists them. A
    /// process that is gone is left out.
    pub fn take_tgids(&mut self, q: &Query, tgids: &[u32]) -> Result<Vec<Task>, Error> {
        let mut tasks = self.take_tgids_own(q, tgids)?;
        if q.threads && q.groups & Group::Stat.flag() != 0 {
            self.leaders_as_processes_of(&mut tasks, tgids)?;
        }
        Ok(tasks)
    }

    /// [`Source::take_tgids`] with every thread's own values, a leader's STAT its own as in
    /// /proc/PID/task/PID/stat (not its process's, as procps shows it).
    pub fn take_tgids_own(&mut self, q: &Query, tgids: &[u32]) -> Result<Vec<Task>, Error> {
        let strategy = if q.threads {
            Strategy::Thread
        } else {
            Strategy::One
        };
        let mut tasks = Vec::new();
        for &tgid in tgids {
            let from = tasks.len();
            match self.collect(&Request::new(strategy, tgid, q.groups), &mut tasks) {
                Ok(()) => {}
                Err(Error::Dump(taskdiag::Error::NoSuchTask { .. })) => continue,
                Err(e) => return Err(e),
            }
            // ONE of a pid reused by a thread of another process since it was marked would
            // answer for that thread (THREAD, for its process): keep only this process's.
            let mut i = from;
            while i < tasks.len() {
                if tasks[i].tgid == tgid {
                    i += 1;
                } else {
                    tasks.swap_remove(i);
                }
            }
        }
        sort_like_proc(&mut tasks);
        Ok(tasks)
    }

    /// The task `pid` (a process, or any thread by its id) with `groups`; `None` if there is
    /// no such task.
    pub fn one(&mut self, pid: u32, groups: u64) -> Result<Option<Task>, Error> {
        let mut tasks = Vec::new();
        match self.collect(&Request::new(Strategy::One, pid, groups), &mut tasks) {
            Ok(()) => Ok(tasks.into_iter().find(|t| t.pid == pid)),
            Err(Error::Dump(taskdiag::Error::NoSuchTask { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Appends the tasks of `req`'s answer to `tasks`, decoded.
    fn collect(&mut self, req: &Request, tasks: &mut Vec<Task>) -> Result<(), Error> {
        let req = Request::new(
            req.strategy().unwrap_or(Strategy::All),
            req.pid,
            req.show_flags | Group::Base.flag(),
        );
        let mut dec = StreamDecoder::new();
        let mut bad = None;
        let res = self.dumper.dump(&req, &mut |chunk| {
            for m in Messages::new(chunk) {
                if let Err(e) = m.and_then(|m| dec.push_to(&m, &mut |t| tasks.push(t))) {
                    bad = Some(e);
                    return Err(io::Error::other("invalid record"));
                }
            }
            Ok(())
        });
        if let Some(e) = bad {
            return Err(Error::Dump(taskdiag::Error::Internal(e)));
        }
        res.map(|_| ()).map_err(Error::Dump)
    }
}

impl Source {
    /// Every task's CPU time (`threads`: every thread's, a leader's being its process's), for a
    /// %CPU baseline: from the stat files alone when the backend reads /proc
    /// (`Dumper::proc_cpu_times`), else from a BASE|STAT snapshot.
    pub fn cpu_times(&mut self, threads: bool) -> Result<Vec<CpuTime>, Error> {
        if let Some(r) = self.dumper.proc_cpu_times(threads) {
            return r.map_err(Error::Dump);
        }
        let tasks = self.take_with_leaders(&Query {
            threads,
            groups: Group::Base.flag() | Group::Stat.flag(),
        })?;
        Ok(tasks
            .iter()
            .filter_map(|t| {
                let (b, s) = (t.base.as_ref()?, t.stat.as_ref()?);
                Some(CpuTime {
                    tgid: t.tgid,
                    pid: t.pid,
                    start_ns: b.rec.start_time_ns,
                    cpu_ns: s.utime_ns + s.stime_ns,
                })
            })
            .collect())
    }

    /// Gives each thread-group leader of a per-thread snapshot its whole process's STAT, as
    /// procps shows it: procps reads a leader's line from /proc/PID, not /proc/PID/task/PID,
    /// so its times and fault counts are the process's (`ps -L`, `top -H`). Takes a second,
    /// per-process snapshot; a leader whose pid was reused in between keeps its own.
    pub fn leaders_as_processes(&mut self, tasks: &mut [Task]) -> Result<(), Error> {
        let procs = self.take(&Query {
            threads: false,
            groups: Group::Base.flag() | Group::Stat.flag(),
        })?;
        patch_leaders(tasks, &procs);
        Ok(())
    }

    /// [`Source::leaders_as_processes`] for a snapshot of the processes `tgids` only.
    fn leaders_as_processes_of(&mut self, tasks: &mut [Task], tgids: &[u32]) -> Result<(), Error> {
        let q = Query {
            threads: false,
            groups: Group::Base.flag() | Group::Stat.flag(),
        };
        let procs = self.take_tgids(&q, tgids)?;
        patch_leaders(tasks, &procs);
        Ok(())
    }
}

/// Gives each leader of the per-thread `tasks` the STAT of its process in `procs`, unless the
/// pid was reused in between (another start time).
fn patch_leaders(tasks: &mut [Task], procs: &[Task]) {
    let start = |t: &Task| t.base.as_ref().map(|b| b.rec.start_time_ns);
    let totals: std::collections::HashMap<u32, &Task> = procs.iter().map(|t| (t.tgid, t)).collect();
    // The snapshot is per thread: the records that stand for their process are leaders'.
    let listing = Strategy::AllThread;
    for t in tasks
        .iter_mut()
        .filter(|t| listing.stands_for_process(t.pid, t.tgid))
    {
        if let Some(p) = totals.get(&t.tgid).filter(|p| start(p) == start(t)) {
            t.stat = p.stat;
        }
    }
}

/// Sorts processes by pid and, within a process, the leader first and then threads by tid.
pub fn sort_like_proc(tasks: &mut [Task]) {
    tasks.sort_by_key(|t| proc_order(t.tgid, t.pid));
}

/// The key of [`sort_like_proc`]'s order for task `pid` of process `tgid`.
pub fn proc_order(tgid: u32, pid: u32) -> (u32, bool, u32) {
    (tgid, pid != tgid, pid)
}

/// Opens a source for `q` and takes one snapshot.
pub fn take(q: &Query) -> Result<Vec<Task>, Error> {
    Source::open(q.groups)?.take(q)
}

/// Reads a small text file of a task (`/proc/PID/wchan`, say) as bytes; `None` if it cannot
/// be read.
pub fn proc_file(pid: u32, name: &str) -> Option<Vec<u8>> {
    taskdiag_procfs::read_small_file(format!("/proc/{pid}/{name}")).ok()
}

/// The inode number stat() gives for `/proc/PID/NAME` (following links), as procps reads a
/// namespace (`procps_ns_read_pid`); `None` where stat fails.
pub fn proc_stat_ino(pid: u32, name: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/{name}"))
        .ok()
        .map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(pid: u32, tgid: u32) -> Task {
        Task {
            pid,
            tgid,
            ..Task::default()
        }
    }

    #[test]
    fn threads_follow_their_leader() {
        let mut v = vec![
            task(12, 10),
            task(5, 5),
            task(10, 10),
            task(11, 10),
            task(3, 3),
        ];
        sort_like_proc(&mut v);
        let order: Vec<u32> = v.iter().map(|t| t.pid).collect();
        assert_eq!(order, [3, 5, 10, 11, 12]);
        // A leader whose tid is larger than its threads' (pid wrap) still comes first.
        let mut v = vec![task(7, 900), task(900, 900)];
        sort_like_proc(&mut v);
        assert_eq!(v[0].pid, 900);
    }

    #[test]
    fn machine_constants_are_sane() {
        let m = Machine::read().expect("machine");
        assert!(m.hz >= 100 && m.page_size >= 4096 && m.mem_total_kib > 0);
        assert!(m.boot_time > 1_000_000_000 && (m.boot_time as i64) < now());
        assert!(uptime().expect("uptime") > 0.0);
        assert!(pid_length().expect("pid_max") >= 3);
    }

    /// Every thread of a dump of threads, each once, with its process; none in a dump of
    /// processes: three threads of this process, through /proc and (as root) BPF.
    #[test]
    fn each_task_is_every_thread_once_or_only_processes() {
        use std::sync::{mpsc, Arc, Barrier};
        let done = Arc::new(Barrier::new(4));
        let (tx, rx) = mpsc::channel();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (tx, done) = (tx.clone(), done.clone());
                std::thread::spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tx.send(unsafe { libc::gettid() } as u32).expect("send");
                    done.wait();
                })
            })
            .collect();
        let tids: Vec<u32> = rx.iter().take(3).collect();
        let me = std::process::id();
        for kind in [BackendKind::Procfs, BackendKind::Bpf] {
            let Ok(mut src) = Source::open_kind(kind, Group::Base.flag()) else {
                eprintln!("{kind:?}: not available here");
                continue;
            };
            for threads in [true, false] {
                let mut seen = std::collections::HashMap::new();
                src.for_each_task(threads, Group::Base.flag(), &mut |t| {
                    *seen.entry(t.pid).or_insert(0) += 1;
                    if t.pid == me || tids.contains(&t.pid) {
                        assert_eq!(t.tgid, me, "{kind:?}: task {}", t.pid);
                    }
                    Ok(())
                })
                .expect("dump");
                assert!(seen.values().all(|&n| n == 1), "{kind:?}: a task twice");
                assert_eq!(seen.get(&me), Some(&1), "{kind:?}: this process");
                for t in &tids {
                    assert_eq!(
                        seen.contains_key(t),
                        threads,
                        "{kind:?} {threads}: thread {t}"
                    );
                }
            }
        }
        done.wait();
        threads.into_iter().for_each(|t| t.join().expect("join"));
    }

    #[test]
    fn a_bad_backend_is_named_with_the_known_ones() {
        let e = Error::BadBackend("bfp".parse::<BackendKind>().unwrap_err());
        assert_eq!(
            e.to_string(),
            "TASKDIAG_BACKEND=\"bfp\": expected auto, bpf, daemon or procfs"
        );
    }
}
