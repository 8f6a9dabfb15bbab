//! File access for the procfs backend: walking /proc and turning each task's files into one
//! taskdiag TASK message.
//!
//! Consistency per task: all of a task's files are *opened* before any is *read*. A /proc file
//! descriptor stays bound to the task it was opened for, and reading it after that task has died
//! fails with ESRCH. So if the pid was reused between two opens, the read of the first file
//! fails and the task is skipped as gone: one message never mixes two tasks. Tasks that vanish
//! mid-dump are skipped, like `readdir(/proc)` does; so are tasks whose files /proc refuses to
//! show us (`hidepid=noaccess`).
//!
//! Namespaces: ids in /proc are those of the pid namespace /proc was mounted for. [`ProcReader::open`]
//! refuses a /proc that belongs to another namespace than the caller's (the seed-002 pitfall:
//! `unshare --pid --fork` without `--mount-proc`), rather than answer with the wrong numbers.
//!
//! DELAY's delay-accounting pairs come from no file but from the kernel's taskstats interface
//! ([`crate::taskstats`]), which names tasks by their ids in the caller's pid namespace: only a
//! reader [`ProcReader::open`] made (its /proc is the caller's namespace's) asks it. Each reader
//! thread of a dump opens its own socket at its first DELAY task (none without DELAY), asked
//! after the task's status file is opened and before it is read, so that a pid reused meanwhile
//! is caught as above. Where the kernel refuses (no CAP_NET_ADMIN) or has no taskstats, the pairs
//! stay 0 and [`taskdiag_proto::DELAY_F_COUNTERS`] clear, as for a task gone meanwhile and one
//! with nothing accounted (see [`crate::taskstats`] for why).

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use taskdiag_proto::msg::{mark_processes, TaskWriter};
use taskdiag_proto::task::Ns;
use taskdiag_proto::{
    state_index, BaseRec, CgroupRec, CredRec, DelayRec, FilesRec, Group, LimitRec, NsIdsRec, NsRec,
    PathsRec, Request, SchedRec, SecurityRec, SignalRec, StatRec, StatmRec, Strategy,
    BASE_F_KTHREAD, BASE_F_LEADER, FILES_F_FDS_HIDDEN, FILES_NLIMITS, NS_F_HIDDEN, PF_KTHREAD,
};

use crate::taskstats::{Delays, Taskstats, TaskstatsError};

use crate::parse::{
    parse_children, parse_limits, parse_stat, parse_status, parse_status_until, status_value,
    ParseError, StatLine, Status, Vm,
};

/// Errors of the procfs backend. Each names the path or pid involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcfsError {
    /// A system call on a /proc path failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A /proc file did not parse.
    #[error("{path}: unexpected format: {source}")]
    Parse {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: ParseError,
    },
    /// ONE, THREAD or CHILDREN named a pid that does not exist (ESRCH).
    #[error("no such process: {pid}")]
    NoSuchTask {
        /// The pid.
        pid: u32,
    },
    /// /proc belongs to another pid namespace than the caller's.
    #[error(
        "{root} belongs to another pid namespace than this process (NSpid of {root}/self has \
         {levels} levels): its pids would be wrong here; mount a procfs for this namespace \
         (unshare --pid --fork --mount-proc) or use the BPF backend"
    )]
    ForeignPidNamespace {
        /// The procfs root.
        root: PathBuf,
        /// Levels of NSpid seen (0: this process is not visible at all).
        levels: usize,
    },
    /// The consumer of the output failed (a closed pipe, say).
    #[error("writing the output: {0}")]
    Sink(#[source] io::Error),
    /// The taskstats interface failed in an unexpected way for a task (not for a task that is
    /// gone, nor for a caller it refuses: those leave DELAY's pairs unread).
    #[error(transparent)]
    Taskstats(#[from] TaskstatsError),
}

type Result<T> = std::result::Result<T, ProcfsError>;

/// A task path relative to the /proc fd: `PID/` or `PID/task/TID/`, plus a file name.
struct TaskPath {
    buf: [u8; 96],
    len: usize,
    dir_len: usize,
}

impl TaskPath {
    fn new() -> Self {
        TaskPath {
            buf: [0; 96],
            len: 0,
            dir_len: 0,
        }
    }

    fn push_num(&mut self, mut n: u32) {
        let mut tmp = [0u8; 10];
        let mut i = tmp.len();
        loop {
            i -= 1;
            tmp[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&tmp[i..]);
    }

    fn push(&mut self, s: &[u8]) {
        self.buf[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }

    /// Sets the directory part: `pid/` or `pid/task/tid/`.
    fn set_dir(&mut self, pid: u32, tid: Option<u32>) {
        self.len = 0;
        self.push_num(pid);
        self.push(b"/");
        if let Some(t) = tid {
            self.push(b"task/");
            self.push_num(t);
            self.push(b"/");
        }
        self.dir_len = self.len;
    }

    /// The NUL-terminated path of `file` in the current directory.
    fn file(&mut self, file: &[u8]) -> &CStr {
        self.len = self.dir_len;
        self.push(file);
        self.buf[self.len] = 0;
        // The buffer holds digits, '/', ASCII file names and one NUL at `len`.
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).unwrap_or(c"")
    }

    fn display(&self, root: &Path) -> PathBuf {
        root.join(String::from_utf8_lossy(&self.buf[..self.len]).as_ref())
    }
}

fn openat(dir: RawFd, path: &CStr, flags: i32) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a valid NUL-terminated string; openat does not keep the pointer.
    let fd = unsafe { libc::openat(dir, path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The target of symbolic link `path` (relative to `dir`) into `buf`; the length read.
fn readlinkat(dir: RawFd, path: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `path` is NUL-terminated and `buf` is writable for its length; the kernel writes
    // at most that many bytes and keeps neither pointer.
    let n = unsafe { libc::readlinkat(dir, path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The whole of a small /proc file (`/proc/PID/wchan`, `/proc/PID/smaps_rollup`): one `read()`
/// where it fits 4 KiB, and the one that returns its end. `std::fs::read` first asks the
/// file's size (0 for /proc) and then reads in growing steps: a statx and seven reads for a
/// smaps_rollup.
pub fn read_small_file(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let fd: OwnedFd = std::fs::File::open(path)?.into();
    let mut buf = Vec::with_capacity(4096);
    read_seq(&fd, &mut buf)?;
    Ok(buf)
}

/// Reads a whole /proc file into `buf` (replacing its contents) with as few `read()`s as
/// possible: a read that does not fill the space offered is the last one (seq_file and cmdline
/// reads return everything they can).
fn read_all(fd: &OwnedFd, buf: &mut Vec<u8>) -> io::Result<()> {
    read_into(fd, buf, false)
}

/// Reads a seq_file (maps, smaps) to its end: unlike stat or status, one read() returns as
/// many whole lines as fit the kernel's buffer, so only a read of 0 ends it.
fn read_seq(fd: &OwnedFd, buf: &mut Vec<u8>) -> io::Result<()> {
    read_into(fd, buf, true)
}

/// Reads `fd` into `buf` (cleared first): until a short read (files /proc prints whole in one
/// read, such as stat and status) or, with `to_eof`, until a read returns 0.
pub(crate) fn read_into(fd: &OwnedFd, buf: &mut Vec<u8>, to_eof: bool) -> io::Result<()> {
    read_steps(fd, buf, to_eof, usize::MAX, || {})
}

/// The most a read of another process's memory (cmdline, environ, maps, smaps) asks of one
/// `read()`: each is a step its deadline is counted from ([`crate::stuck`]), so a long file
/// (60,000 mappings are 4 MB of maps) is not taken for a stuck one however slow the machine,
/// while a `read()` that sleeps in the memory-map lock still is. 256 KiB is ~3,500 lines of
/// maps, a millisecond or two here; a whole maps file costs a `read()` per 256 KiB more.
pub(crate) const MM_STEP: usize = 256 << 10;

/// [`read_into`] with at most `step` bytes asked of each `read()`, and `progress` called after
/// each that another follows (not after the last: a one-`read()` file costs nothing more).
pub(crate) fn read_steps(
    fd: &OwnedFd,
    buf: &mut Vec<u8>,
    to_eof: bool,
    step: usize,
    mut progress: impl FnMut(),
) -> io::Result<()> {
    buf.clear();
    loop {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(buf.capacity().max(4096));
        }
        let spare = buf.spare_capacity_mut();
        let room = spare.len().min(step);
        // SAFETY: the spare capacity is writable memory of at least `room` bytes owned by
        // `buf`; read() writes at most `room` bytes into it.
        let n =
            retry_eintr(|| unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), room) })?;
        let full = n == room;
        // SAFETY: read() initialized the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        if n == 0 || (!to_eof && !full) {
            return Ok(());
        }
        progress();
    }
}

/// Reads `fd`, a file of process `tgid` that takes its memory-map lock (cmdline, environ, maps,
/// smaps), into `buf` as [`read_into`] does, without waiting with a lock held by something
/// stuck ([`crate::stuck`]): under this worker's `slot`, where the collecting thread watches
/// it, or else on a helper thread with a deadline. A read not made or not waited for fails
/// with the errno [`taskdiag_proto::ERRNO_MM_BUSY`].
pub(crate) fn read_mm(
    slot: Option<&crate::stuck::Slot>,
    tgid: u32,
    fd: &OwnedFd,
    buf: &mut Vec<u8>,
    to_eof: bool,
) -> io::Result<()> {
    let busy = || io::Error::from_raw_os_error(taskdiag_proto::ERRNO_MM_BUSY);
    if crate::stuck::is_stuck(tgid) {
        buf.clear();
        return Err(busy());
    }
    match slot {
        Some(s) => s.read(tgid, || {
            read_steps(fd, buf, to_eof, MM_STEP, || s.progress())
        }),
        // (A failure without an errno, a helper thread gone, is EIO: the callers take an error
        // without one for none.)
        None => match crate::stuck::read_bounded(tgid, fd.try_clone()?, buf, to_eof) {
            Ok(Err(e)) if e.raw_os_error().is_none() => {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            Ok(r) => r,
            Err(_) => Err(busy()),
        },
    }
}

/// The byte count a system call `call` returns, made again while a signal interrupts it.
pub(crate) fn retry_eintr(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Lists the numeric entries of a directory (processes of /proc, threads of task/).
fn list_numeric(dir: &OwnedFd, buf: &mut Vec<u8>, out: &mut Vec<u32>) -> io::Result<()> {
    out.clear();
    // SAFETY: lseek on a directory fd we own; rewinds so the fd can be listed again.
    if unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if buf.len() < 65536 {
        buf.resize(65536, 0);
    }
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(());
        }
        // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        let mut pos = 0usize;
        let n = n as usize;
        while pos + 19 <= n {
            let reclen = u16::from_ne_bytes([buf[pos + 16], buf[pos + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &buf[pos + 19..(pos + reclen).min(n)];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
                let mut v: u64 = 0;
                for &c in name {
                    v = v * 10 + (c - b'0') as u64;
                }
                if let Ok(v) = u32::try_from(v) {
                    out.push(v);
                }
            }
            pos += reclen;
        }
    }
}

/// Whether a task's /proc file failed because the task is not there for us: it exited
/// (ENOENT, ESRCH), or /proc hides it from us (EPERM, EACCES: `hidepid=noaccess` lists other
/// users' directories but refuses their contents). Either way the task is skipped, as ps does.
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ESRCH) | Some(libc::EPERM) | Some(libc::EACCES)
    )
}

/// Per-worker buffers, reused from task to task.
struct Scratch {
    path: TaskPath,
    stat: Vec<u8>,
    status: Vec<u8>,
    cmdline: Vec<u8>,
    maps: Vec<u8>,
    dents: Vec<u8>,
    groups: Vec<u32>,
    tids: Vec<u32>,
    /// FILES: the descriptors listed, and the limits file.
    fds: Vec<u32>,
    limits: Vec<u8>,
    /// A small file of a group of its own (io).
    own: Vec<u8>,
    /// PATHS: readlink's buffer.
    link: Vec<u8>,
    /// CGROUP: the ids of the cgroups seen so far, by path.
    cgroup_ids: own_files::CgroupIds,
    /// DELAY: this thread's taskstats socket, opened at its first DELAY task.
    taskstats: TaskstatsUse,
    /// Where a walk's worker notes the reads of other processes' memory it makes, for the
    /// thread that collects its output to give up on one stuck; `None` on a thread nobody
    /// watches, whose reads go to a helper thread ([`read_mm`]).
    slot: Option<std::sync::Arc<crate::stuck::Slot>>,
}

/// Whether a reader thread asks taskstats for DELAY's pairs.
enum TaskstatsUse {
    /// Not yet: no DELAY task so far.
    Untried,
    /// Through this socket.
    Open(Taskstats),
    /// Not in this dump: refused, unavailable, or not this reader's to ask.
    Off,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            path: TaskPath::new(),
            stat: Vec::with_capacity(4096),
            status: Vec::with_capacity(4096),
            cmdline: Vec::with_capacity(4096),
            maps: Vec::new(),
            dents: Vec::new(),
            groups: Vec::new(),
            tids: Vec::new(),
            fds: Vec::new(),
            limits: Vec::new(),
            own: Vec::new(),
            link: Vec::new(),
            cgroup_ids: own_files::CgroupIds::default(),
            taskstats: TaskstatsUse::Untried,
            slot: None,
        }
    }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, USER_HZ), the unit of /proc's times; 100
/// if it cannot be read.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

/// The number of tasks (threads, in every pid namespace) on the host now, from /proc/loadavg;
/// `None` if it cannot be read.
pub fn host_tasks() -> Option<u32> {
    let buf = std::fs::read("/proc/loadavg").ok()?;
    crate::system::parse_loadavg_tasks(&buf).ok()
}

/// Raises this process's soft limit on open files to its hard one (nothing if it cannot): for
/// the programs that hold a descriptor per client (taskdiagd) or per binary (the profiler),
/// beside [`clock_ticks`], the other process-wide fact their /proc work depends on.
pub fn raise_nofile_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write only the rlimit passed, which lives here.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// Whether the running kernel's /proc adds a reader's time namespace boottime offset to the
/// start times it shows, judged by its release ([`crate::system::timens_shifts_start_times`]):
/// for where its answers cannot tell ([`crate::system::btime_shifted`]: no offset of one's
/// own to look at). Read once; a release that cannot be read or parsed counts as a current
/// kernel's (it does).
pub fn release_shifts_start_times() -> bool {
    static SHIFTS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SHIFTS.get_or_init(|| {
        std::fs::read("/proc/sys/kernel/osrelease")
            .ok()
            .and_then(|b| crate::system::kernel_version(&b))
            .is_none_or(crate::system::timens_shifts_start_times)
    })
}

/// CLOCK_REALTIME − CLOCK_BOOTTIME now, ns: the boot's epoch time as this time namespace sees
/// it.
fn boot_epoch_ns() -> i128 {
    let ns = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    ns(libc::CLOCK_REALTIME) - ns(libc::CLOCK_BOOTTIME)
}

/// A task's CPU time and identity, from its stat file alone ([`ProcReader::cpu_times`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTime {
    /// Thread-group id.
    pub tgid: u32,
    /// Task id (the tgid for a process).
    pub pid: u32,
    /// Start time since boot, ns (as BASE's `start_time_ns`).
    pub start_ns: u64,
    /// User and system time, ns (as STAT's `utime_ns + stime_ns`).
    pub cpu_ns: u64,
}

impl CpuTime {
    const SIZE: usize = 24;

    // The parallel walk passes bytes between threads; these are its encoding.
    fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..4].copy_from_slice(&self.tgid.to_ne_bytes());
        b[4..8].copy_from_slice(&self.pid.to_ne_bytes());
        b[8..16].copy_from_slice(&self.start_ns.to_ne_bytes());
        b[16..].copy_from_slice(&self.cpu_ns.to_ne_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Self {
        let u32_at = |i: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[i..i + 4]);
            u32::from_ne_bytes(a)
        };
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_ne_bytes(a)
        };
        CpuTime {
            tgid: u32_at(0),
            pid: u32_at(4),
            start_ns: u64_at(8),
            cpu_ns: u64_at(16),
        }
    }
}

/// Reads tasks from a procfs mount into taskdiag messages. A clone shares the open /proc and
/// what was looked up in it (a walk's worker threads each hold one).
#[derive(Clone)]
pub struct ProcReader {
    root: PathBuf,
    dir: std::sync::Arc<OwnedFd>,
    ns_per_tick: u64,
    workers: usize,
    /// The cgroup2 mount that gives CGROUP its ids, looked up on first use.
    cgroup2: std::sync::Arc<std::sync::OnceLock<Option<own_files::Cgroup2>>>,
    /// Whether DELAY asks taskstats for its pairs: /proc is the caller's pid namespace's,
    /// whose ids taskstats takes ([`ProcReader::open`]).
    taskstats: bool,
    /// The TASKSTATS generic netlink family's id, once a socket looked it up.
    taskstats_family: std::sync::Arc<std::sync::OnceLock<u16>>,
    /// Our own time namespace's boottime offset, once read ([`ProcReader::own_boottime_offset`]).
    own_boottime: std::sync::Arc<std::sync::OnceLock<i64>>,
}

/// Number of processes one unit of parallel work covers.
const CHUNK: usize = 128;

impl ProcReader {
    /// Opens `/proc`, checking that it belongs to the caller's pid namespace.
    pub fn open() -> Result<Self> {
        let mut r = Self::open_unchecked(Path::new("/proc"))?;
        r.check_namespace()?;
        r.taskstats = true;
        Ok(r)
    }

    /// Opens a procfs (or a captured copy of one, for tests) without the namespace check. Its
    /// DELAY records have no delay-accounting pairs: taskstats would name other tasks by its ids.
    pub fn open_unchecked(root: &Path) -> Result<Self> {
        let io_err = |source| ProcfsError::Io {
            path: root.to_path_buf(),
            source,
        };
        let c = std::ffi::CString::new(root.as_os_str().as_encoded_bytes())
            .map_err(|_| io_err(io::Error::from(io::ErrorKind::InvalidInput)))?;
        let dir = openat(libc::AT_FDCWD, &c, libc::O_RDONLY | libc::O_DIRECTORY).map_err(io_err)?;
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(4);
        Ok(ProcReader {
            root: root.to_path_buf(),
            dir: std::sync::Arc::new(dir),
            ns_per_tick: 1_000_000_000 / clock_ticks(),
            workers,
            cgroup2: Default::default(),
            taskstats: false,
            taskstats_family: Default::default(),
            own_boottime: Default::default(),
        })
    }

    /// Limits the number of reader threads (1 = no parallelism).
    pub fn set_workers(&mut self, n: usize) {
        self.workers = n.max(1);
    }

    /// The procfs root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Fails with [`ProcfsError::ForeignPidNamespace`] unless /proc/self shows this process with
    /// a single NSpid level, which holds exactly when /proc is of the caller's pid namespace.
    pub fn check_namespace(&self) -> Result<()> {
        let mut buf = Vec::with_capacity(4096);
        let mut groups = Vec::new();
        let levels = match openat(self.dir.as_raw_fd(), c"self/status", libc::O_RDONLY) {
            Ok(fd) => {
                let path = self.root.join("self/status");
                read_all(&fd, &mut buf).map_err(|source| ProcfsError::Io {
                    path: path.clone(),
                    source,
                })?;
                let s = parse_status(&buf, &mut groups)
                    .map_err(|source| ProcfsError::Parse { path, source })?;
                s.ns_levels
            }
            Err(e) if is_gone(&e) => 0,
            Err(source) => {
                return Err(ProcfsError::Io {
                    path: self.root.join("self"),
                    source,
                })
            }
        };
        if levels == 1 {
            Ok(())
        } else {
            Err(ProcfsError::ForeignPidNamespace {
                root: self.root.clone(),
                levels,
            })
        }
    }

    /// The hierarchies /proc/PID/cgroup lists ([`crate::parse::cgroup_hierarchies`]). Every
    /// task's file lists the same ones, so our own tells; `None` when it cannot be read.
    pub fn cgroup_hierarchies(&self) -> Option<crate::parse::CgroupHierarchies> {
        let mut buf = Vec::with_capacity(512);
        let fd = openat(self.dir.as_raw_fd(), c"self/cgroup", libc::O_RDONLY).ok()?;
        read_all(&fd, &mut buf).ok()?;
        Some(crate::parse::cgroup_hierarchies(&buf))
    }

    /// What /proc adds to the start times it shows us: the boottime offset of our time
    /// namespace, from /proc/self/timens_offsets ([`crate::parse::timens_boottime_offset`]),
    /// where the kernel adds it (since 5.11): told from its `btime`
    /// ([`crate::system::btime_shifted`]), else from its release
    /// ([`release_shifts_start_times`]). Read once; 0 without time namespaces (no such file)
    /// or if it cannot be read.
    pub fn own_boottime_offset(&self) -> i64 {
        *self.own_boottime.get_or_init(|| {
            let read = |name: &CStr, buf: &mut Vec<u8>| {
                openat(self.dir.as_raw_fd(), name, libc::O_RDONLY)
                    .and_then(|fd| read_all(&fd, buf))
                    .ok()
            };
            let mut buf = Vec::with_capacity(128);
            let offset = read(c"self/timens_offsets", &mut buf)
                .and_then(|()| crate::parse::timens_boottime_offset(&buf).ok())
                .unwrap_or(0);
            if offset == 0 {
                return 0;
            }
            buf.clear();
            let shifted = read(c"stat", &mut buf)
                .and_then(|()| crate::system::boot_time(&buf).ok())
                .and_then(|btime| crate::system::btime_shifted(btime, boot_epoch_ns(), offset))
                .unwrap_or_else(release_shifts_start_times);
            if shifted {
                offset
            } else {
                0
            }
        })
    }

    /// Whether a security module gives tasks labels: our own /proc/PID/attr/current reads
    /// (where none does it fails with EINVAL, as for every task). `None` when that cannot be
    /// told (another error).
    pub fn lsm_labels(&self) -> Option<bool> {
        let mut buf = Vec::with_capacity(256);
        let r = openat(self.dir.as_raw_fd(), c"self/attr/current", libc::O_RDONLY)
            .and_then(|fd| read_all(&fd, &mut buf));
        match r {
            Ok(()) => Some(true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Some(false),
            Err(_) => None,
        }
    }

    /// Answers `req`, passing whole encoded TASK messages to `sink` in order. Returns the number
    /// of tasks written.
    pub fn dump(
        &self,
        req: &Request,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64> {
        let strategy = req.strategy().unwrap_or(Strategy::All);
        let show = req.show_flags;
        let mut s = Scratch::new();
        match strategy {
            Strategy::All | Strategy::AllThread => {
                let pids = self.processes(&mut s)?;
                if strategy == Strategy::All {
                    return self.dump_parallel(pids, sink, move |r, s, pid, out| {
                        r.task(s, pid, None, show, true, out).map(u64::from)
                    });
                }
                // Every thread, in increasing tid order like the kernel's task walk.
                let mut units = Vec::with_capacity(pids.len());
                for &pid in &pids {
                    if self.list_threads(&mut s, pid)? {
                        units.extend(s.tids.iter().map(|&tid| (tid, pid)));
                    }
                }
                units.sort_unstable();
                self.dump_parallel(units, sink, move |r, s, (tid, pid), out| {
                    r.task(s, pid, Some(tid), show, false, out).map(u64::from)
                })
            }
            Strategy::One => {
                let mut out = Vec::new();
                if !self.task(&mut s, req.pid, None, show, true, &mut out)? {
                    return Err(ProcfsError::NoSuchTask { pid: req.pid });
                }
                sink(&out).map_err(ProcfsError::Sink)?;
                Ok(1)
            }
            Strategy::Thread => {
                let tgid = self.tgid_of(&mut s, req.pid)?;
                let mut out = Vec::new();
                let n = self.process_threads(&mut s, tgid, show, &mut out)?;
                if n == 0 {
                    return Err(ProcfsError::NoSuchTask { pid: req.pid });
                }
                sink(&out).map_err(ProcfsError::Sink)?;
                Ok(n)
            }
            // Each process's own record (as ALL reads it), then its threads' (as ALL_THREAD),
            // in increasing tid order like the kernel's walk, a process's record just before
            // its leader's.
            Strategy::AllWithThreads => {
                let pids = self.processes(&mut s)?;
                let mut units = Vec::with_capacity(pids.len() * 2);
                for &pid in &pids {
                    units.push((pid, false, pid));
                    if self.list_threads(&mut s, pid)? {
                        units.extend(s.tids.iter().map(|&tid| (tid, true, pid)));
                    }
                }
                units.sort_unstable();
                let process = req.show_process;
                self.dump_parallel(units, sink, move |r, s, (tid, thread, pid), out| {
                    if thread {
                        return r.task(s, pid, Some(tid), show, false, out).map(u64::from);
                    }
                    let from = out.len();
                    let written = r.task(s, pid, None, process, true, out)?;
                    mark_processes(&mut out[from..]);
                    Ok(u64::from(written))
                })
            }
            Strategy::Children => {
                let children = self.children_of(&mut s, req.pid)?;
                let parent = req.pid;
                self.dump_parallel(children, sink, move |r, s, pid, out| {
                    // The child may have been reparented since it was listed.
                    r.task_if_child(s, pid, parent, show, out).map(u64::from)
                })
            }
        }
    }

    /// Appends one task's message: `tid` of process `tgid` when `tid` is given (per-thread
    /// view), else process `tgid` (thread-group view). Returns false if the task is gone.
    /// Used to complete records another backend could not provide.
    pub fn task_message(
        &self,
        tgid: u32,
        tid: Option<u32>,
        show: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let mut s = Scratch::new();
        self.task(&mut s, tgid, tid, show, tid.is_none(), out)
    }

    /// The processes /proc lists, in pid order.
    fn processes(&self, s: &mut Scratch) -> Result<Vec<u32>> {
        let mut pids = Vec::new();
        list_numeric(&self.dir, &mut s.dents, &mut pids).map_err(|source| ProcfsError::Io {
            path: self.root.clone(),
            source,
        })?;
        pids.sort_unstable();
        Ok(pids)
    }

    /// Reads file `name` of the task directory `path` is set to into `buf`; false if the task
    /// is gone (or /proc hides it from us).
    fn read_one(&self, path: &mut TaskPath, name: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
        let fd = match openat(self.dir.as_raw_fd(), path.file(name), libc::O_RDONLY) {
            Ok(fd) => fd,
            Err(e) if is_gone(&e) => return Ok(false),
            Err(source) => {
                return Err(ProcfsError::Io {
                    path: path.display(&self.root),
                    source,
                })
            }
        };
        match read_all(&fd, buf) {
            Ok(()) => Ok(true),
            Err(e) if is_gone(&e) => Ok(false),
            Err(source) => Err(ProcfsError::Io {
                path: path.display(&self.root),
                source,
            }),
        }
    }

    /// The thread-group id of task `pid`, or NoSuchTask.
    fn tgid_of(&self, s: &mut Scratch, pid: u32) -> Result<u32> {
        s.path.set_dir(pid, None);
        if !self.read_one(&mut s.path, b"status", &mut s.status)? {
            return Err(ProcfsError::NoSuchTask { pid });
        }
        let st = parse_status(&s.status, &mut s.groups).map_err(|source| ProcfsError::Parse {
            path: s.path.display(&self.root),
            source,
        })?;
        Ok(st.tgid)
    }

    /// Child processes of `pid`, from /proc/PID/task/*/children (sorted), or NoSuchTask.
    fn children_of(&self, s: &mut Scratch, pid: u32) -> Result<Vec<u32>> {
        let tgid = self.tgid_of(s, pid)?;
        s.path.set_dir(tgid, None);
        let task_dir = match openat(
            self.dir.as_raw_fd(),
            s.path.file(b"task"),
            libc::O_RDONLY | libc::O_DIRECTORY,
        ) {
            Ok(fd) => fd,
            Err(e) if is_gone(&e) => return Err(ProcfsError::NoSuchTask { pid }),
            Err(source) => {
                return Err(ProcfsError::Io {
                    path: s.path.display(&self.root),
                    source,
                })
            }
        };
        let mut tids = std::mem::take(&mut s.tids);
        list_numeric(&task_dir, &mut s.dents, &mut tids).map_err(|source| ProcfsError::Io {
            path: s.path.display(&self.root),
            source,
        })?;
        let mut children = Vec::new();
        for &tid in &tids {
            s.path.set_dir(tgid, Some(tid));
            let fd = match openat(
                self.dir.as_raw_fd(),
                s.path.file(b"children"),
                libc::O_RDONLY,
            ) {
                Ok(fd) => fd,
                Err(e) if is_gone(&e) && tid != tgid => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    // No CONFIG_PROC_CHILDREN: filter a full walk on ppid instead.
                    return self.children_by_walk(s, tgid);
                }
                Err(source) => {
                    return Err(ProcfsError::Io {
                        path: s.path.display(&self.root),
                        source,
                    })
                }
            };
            if read_all(&fd, &mut s.cmdline).is_err() {
                continue;
            }
            children.extend(parse_children(&s.cmdline));
        }
        s.tids = tids;
        children.sort_unstable();
        children.dedup();
        Ok(children)
    }

    fn children_by_walk(&self, s: &mut Scratch, tgid: u32) -> Result<Vec<u32>> {
        let pids = self.processes(s)?;
        Ok(pids
            .into_iter()
            .filter(|&p| self.read_stat_only(s, p).is_some_and(|st| st.ppid == tgid))
            .collect())
    }

    fn read_stat_only(&self, s: &mut Scratch, pid: u32) -> Option<StatLine> {
        s.path.set_dir(pid, None);
        let fd = openat(self.dir.as_raw_fd(), s.path.file(b"stat"), libc::O_RDONLY).ok()?;
        read_all(&fd, &mut s.stat).ok()?;
        parse_stat(&s.stat).ok()
    }

    fn task_if_child(
        &self,
        s: &mut Scratch,
        pid: u32,
        parent: u32,
        show: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let mark = out.len();
        let found = self.task(s, pid, None, show | Group::Base.flag(), true, out)?;
        let st = parse_stat(&s.stat).ok();
        if found && st.is_some_and(|st| st.ppid != parent) {
            out.truncate(mark);
            return Ok(false);
        }
        Ok(found)
    }

    /// Lists the threads of process `tgid` into `s.tids`, sorted. False if the process is gone.
    fn list_threads(&self, s: &mut Scratch, tgid: u32) -> Result<bool> {
        s.path.set_dir(tgid, None);
        let dirfd = self.dir.as_raw_fd();
        let dir = match openat(
            dirfd,
            s.path.file(b"task"),
            libc::O_RDONLY | libc::O_DIRECTORY,
        ) {
            Ok(fd) => fd,
            Err(e) if is_gone(&e) => return Ok(false),
            Err(source) => {
                return Err(ProcfsError::Io {
                    path: s.path.display(&self.root),
                    source,
                })
            }
        };
        match list_numeric(&dir, &mut s.dents, &mut s.tids) {
            Ok(()) => {}
            Err(e) if is_gone(&e) => return Ok(false),
            Err(source) => {
                return Err(ProcfsError::Io {
                    path: s.path.display(&self.root),
                    source,
                })
            }
        }
        s.tids.sort_unstable();
        Ok(true)
    }

    /// Writes one message per thread of process `tgid`; returns how many.
    fn process_threads(
        &self,
        s: &mut Scratch,
        tgid: u32,
        show: u64,
        out: &mut Vec<u8>,
    ) -> Result<u64> {
        if !self.list_threads(s, tgid)? {
            return Ok(0);
        }
        let tids = std::mem::take(&mut s.tids);
        let mut n = 0;
        let mut res = Ok(());
        for &tid in &tids {
            match self.task(s, tgid, Some(tid), show, false, out) {
                Ok(true) => n += 1,
                Ok(false) => {}
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        s.tids = tids;
        res.map(|()| n)
    }

    /// Reads one task and appends its message. `whole`: STAT covers the thread group (process
    /// view) rather than the one thread. Returns false if the task does not exist (any more).
    fn task(
        &self,
        s: &mut Scratch,
        pid: u32,
        tid: Option<u32>,
        show: u64,
        whole: bool,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let want = |g: Group| show & g.flag() != 0;
        let need_stat =
            want(Group::Base) || want(Group::Stat) || want(Group::Statm) || want(Group::Delay);
        let need_cmdline = want(Group::Cmdline);
        s.path.set_dir(pid, tid);
        let dirfd = self.dir.as_raw_fd();

        // Open everything first, read afterwards: see the module documentation.
        let open = |s: &mut Scratch, name: &[u8]| -> Result<Option<OwnedFd>> {
            match openat(dirfd, s.path.file(name), libc::O_RDONLY) {
                Ok(fd) => Ok(Some(fd)),
                Err(e) if is_gone(&e) => Ok(None),
                Err(source) => Err(ProcfsError::Io {
                    path: s.path.display(&self.root),
                    source,
                }),
            }
        };
        let Some(status_fd) = open(s, b"status")? else {
            return Ok(false);
        };
        let stat_fd = if need_stat {
            match open(s, b"stat")? {
                Some(fd) => Some(fd),
                None => return Ok(false),
            }
        } else {
            None
        };
        // Memory maps: smaps when VMA_STAT is wanted (it alone has the counters and every
        // flag), else the cheap maps. Only for a process or a thread-group leader (threads
        // share them). Refused (EACCES: maps need ptrace-read) is a group error, not a gone task.
        let want_maps = (want(Group::Vma) || want(Group::VmaStat)) && tid.is_none_or(|t| t == pid);
        let maps_name: &[u8] = if want(Group::VmaStat) {
            b"smaps"
        } else {
            b"maps"
        };
        let maps_fd = if want_maps {
            match openat(dirfd, s.path.file(maps_name), libc::O_RDONLY) {
                Ok(fd) => Ok(fd),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
                    return Ok(false)
                }
                Err(e) => Err(e),
            }
        } else {
            Err(io::Error::from_raw_os_error(0))
        };
        let cmdline_fd = if need_cmdline {
            match openat(dirfd, s.path.file(b"cmdline"), libc::O_RDONLY) {
                Ok(fd) => Ok(fd),
                Err(e) if is_gone(&e) => return Ok(false),
                Err(e) => Err(e),
            }
        } else {
            Err(io::Error::from_raw_os_error(0))
        };

        let read = |s: &mut Scratch, fd: &OwnedFd, which: u8, name: &[u8]| -> Result<bool> {
            let buf = match which {
                0 => &mut s.stat,
                1 => &mut s.status,
                _ => &mut s.cmdline,
            };
            match read_all(fd, buf) {
                Ok(()) => Ok(true),
                Err(e) if is_gone(&e) => Ok(false),
                Err(source) => {
                    s.path.file(name);
                    Err(ProcfsError::Io {
                        path: s.path.display(&self.root),
                        source,
                    })
                }
            }
        };
        // The namespace links are read by path, before status: if the pid was reused meanwhile,
        // the read of status (opened before them) fails and the task is skipped.
        let ns = if want(Group::Ns) {
            match self.ns_links(s)? {
                Some(n) => Some(n),
                None => return Ok(false),
            }
        } else {
            None
        };
        let files = if want(Group::Files) {
            match self.files(s)? {
                Some(f) => Some(f),
                None => return Ok(false),
            }
        } else {
            None
        };
        // The groups in files of their own, read now for the same reason.
        let cgroup = want(Group::Cgroup).then(|| self.cgroup(s)).transpose()?;
        let io = want(Group::Io).then(|| self.io(s)).transpose()?;
        let paths = want(Group::Paths).then(|| self.paths(s)).transpose()?;
        let environ = want(Group::Environ)
            .then(|| self.environ(s, pid))
            .transpose()?;
        let sched = want(Group::Sched).then(|| self.sched(s)).transpose()?;
        let label = want(Group::Security).then(|| self.label(s)).transpose()?;
        let schedstat = want(Group::Delay).then(|| self.schedstat(s)).transpose()?;
        let kstack = want(Group::Kstack).then(|| self.kstack(s)).transpose()?;
        let wchan = want(Group::Wchan).then(|| self.wchan(s)).transpose()?;
        // The delay-accounting pairs of the task the directory is (a process: its leader).
        let delays = match schedstat {
            Some(Got::Read(_)) => self.delay_totals(s, tid.unwrap_or(pid))?,
            _ => None,
        };
        // status was opened first and is read only now, after every other open: if the pid was
        // reused in between, status belongs to the dead task and this read fails with ESRCH.
        if !read(s, &status_fd, 1, b"status")? {
            return Ok(false);
        }
        if let Some(fd) = &stat_fd {
            if !read(s, fd, 0, b"stat")? {
                return Ok(false);
            }
        }
        let mut cmdline_err = None;
        match &cmdline_fd {
            Ok(fd) if need_cmdline => {
                match read_mm(s.slot.as_deref(), pid, fd, &mut s.cmdline, false) {
                    Ok(()) => {}
                    Err(e) if is_gone(&e) => return Ok(false),
                    Err(e) => cmdline_err = e.raw_os_error(),
                }
            }
            Err(e) if need_cmdline => cmdline_err = e.raw_os_error(),
            _ => {}
        }
        let mut vmas = None;
        let mut maps_err = None;
        match &maps_fd {
            Ok(fd) if want_maps => match read_mm(s.slot.as_deref(), pid, fd, &mut s.maps, true) {
                Ok(()) => {
                    let mut v = Vec::new();
                    let parsed = if want(Group::VmaStat) {
                        crate::maps::parse_smaps(&s.maps, &mut v)
                    } else {
                        crate::maps::parse_maps(&s.maps, &mut v)
                    };
                    parsed.map_err(|source| {
                        s.path.file(maps_name);
                        ProcfsError::Parse {
                            path: s.path.display(&self.root),
                            source,
                        }
                    })?;
                    vmas = Some(v);
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
                    return Ok(false)
                }
                Err(e) => maps_err = e.raw_os_error(),
            },
            Err(e) if want_maps => maps_err = e.raw_os_error(),
            _ => {}
        }
        drop((status_fd, stat_fd, cmdline_fd, maps_fd));

        // BASE alone needs only Tgid, TracerPid (and Uid, to know the file is whole).
        let base_only = show & !Group::Base.flag() == 0;
        let last: Option<&[u8]> = if base_only { Some(b"Uid") } else { None };
        let status = parse_status_until(&s.status, &mut s.groups, last).map_err(|source| {
            s.path.file(b"status");
            ProcfsError::Parse {
                path: s.path.display(&self.root),
                source,
            }
        })?;
        let stat = if need_stat {
            Some(parse_stat(&s.stat).map_err(|source| {
                s.path.file(b"stat");
                ProcfsError::Parse {
                    path: s.path.display(&self.root),
                    source,
                }
            })?)
        } else {
            None
        };
        let this = tid.unwrap_or(pid);
        let mut w = TaskWriter::begin(out, this, status.tgid);
        if let (true, Some(st)) = (want(Group::Base), &stat) {
            let comm = &st.comm()[..st.comm_len.min(taskdiag_proto::COMM_MAX - 1)];
            let kthread = if st.flags & PF_KTHREAD != 0 {
                BASE_F_KTHREAD
            } else {
                0
            };
            let leader = if this == status.tgid {
                BASE_F_LEADER
            } else {
                0
            };
            let rec = BaseRec {
                ppid: st.ppid,
                tpid: status.tracer_pid,
                sid: st.session,
                pgid: st.pgrp,
                tty_nr: st.tty_nr,
                task_flags: st.flags,
                state: state_index(st.state).unwrap_or(u8::MAX),
                flags: kthread | leader,
                comm_len: comm.len() as u16,
                tpgid: st.tpgid,
                start_time_ns: st.starttime * self.ns_per_tick,
            };
            w.attr_parts(Group::Base as u16, &[&rec.to_bytes(), comm]);
        }
        if want(Group::Cred) {
            let rec = CredRec {
                uid: status.uid[0],
                euid: status.uid[1],
                suid: status.uid[2],
                fsuid: status.uid[3],
                gid: status.gid[0],
                egid: status.gid[1],
                sgid: status.gid[2],
                fsgid: status.gid[3],
                cap_inheritable: status.caps[0],
                cap_permitted: status.caps[1],
                cap_effective: status.caps[2],
                cap_bset: status.caps[3],
                cap_ambient: status.caps[4],
                ngroups: s.groups.len() as u32,
                reserved: 0,
            };
            let groups: &[u8] = as_bytes(&s.groups);
            w.attr_parts(Group::Cred as u16, &[&rec.to_bytes(), groups]);
        }
        if let (true, Some(st)) = (want(Group::Stat), &stat) {
            let _ = whole; // /proc already reports the thread-group or thread view by path.
            let t = self.ns_per_tick;
            let rec = StatRec {
                minflt: st.minflt,
                cminflt: st.cminflt,
                majflt: st.majflt,
                cmajflt: st.cmajflt,
                utime_ns: st.utime * t,
                stime_ns: st.stime * t,
                cutime_ns: st.cutime * t,
                cstime_ns: st.cstime * t,
                nvcsw: status.nvcsw,
                nivcsw: status.nivcsw,
                threads: st.num_threads,
                priority: st.priority as i32,
                nice: st.nice as i32,
                policy: st.policy,
                rt_priority: st.rt_priority,
                processor: st.processor as i32,
            };
            w.attr(Group::Stat as u16, &rec.to_bytes());
        }
        if let (true, true, Some(st)) = (want(Group::Statm), status.has_mm, &stat) {
            w.attr(Group::Statm as u16, &statm_from(&status, st).to_bytes());
        }
        if want(Group::Signal) {
            let [pending, shared_pending, blocked, ignored, caught] = status.sig;
            let rec = SignalRec {
                pending,
                shared_pending,
                blocked,
                ignored,
                caught,
            };
            w.attr(Group::Signal as u16, &rec.to_bytes());
        }
        if let Some(mut rec) = ns {
            let ids = &status.ns_ids.0[..status.ns_levels];
            rec.levels = ids.len() as u32;
            let mut b = Vec::with_capacity(NsRec::SIZE + ids.len() * NsIdsRec::SIZE);
            b.extend_from_slice(&rec.to_bytes());
            for &[pid, tgid, pgid, sid] in ids {
                b.extend_from_slice(
                    &NsIdsRec {
                        pid,
                        tgid,
                        pgid,
                        sid,
                    }
                    .to_bytes(),
                );
            }
            w.attr(Group::Ns as u16, &b);
        }
        if let Some((rec, limits)) = files {
            let mut b = Vec::with_capacity(FilesRec::SIZE + limits.len() * LimitRec::SIZE);
            b.extend_from_slice(&rec.to_bytes());
            for l in &limits {
                b.extend_from_slice(&l.to_bytes());
            }
            w.attr(Group::Files as u16, &b);
        }
        match cgroup {
            Some(Got::Read((id, text))) => {
                let rec = CgroupRec {
                    id,
                    ..CgroupRec::default()
                };
                w.attr_parts(Group::Cgroup as u16, &[&rec.to_bytes(), &text]);
            }
            Some(Got::Refused(errno)) => w.group_error(Group::Cgroup, errno),
            None => {}
        }
        match io {
            Some(Got::Read(rec)) => w.attr(Group::Io as u16, &rec.to_bytes()),
            Some(Got::Refused(errno)) => w.group_error(Group::Io, errno),
            None => {}
        }
        if let Some(p) = paths {
            let mut b = Vec::with_capacity(PathsRec::SIZE + 256);
            p.encode(&mut b);
            w.attr(Group::Paths as u16, &b);
        }
        match environ {
            Some(Got::Read(env)) => w.attr(Group::Environ as u16, &env),
            Some(Got::Refused(errno)) => w.group_error(Group::Environ, errno),
            None => {}
        }
        match kstack {
            Some(Got::Read(k)) => w.attr(Group::Kstack as u16, &k),
            Some(Got::Refused(errno)) => w.group_error(Group::Kstack, errno),
            None => {}
        }
        match wchan {
            Some(Got::Read(c)) => w.attr(Group::Wchan as u16, &c),
            Some(Got::Refused(errno)) => w.group_error(Group::Wchan, errno),
            None => {}
        }
        match sched {
            Some(Got::Read(mut sc)) => {
                // The affinity lines of status, read above with the rest of it.
                let line = |k| status_value(&s.status, k).unwrap_or_default().to_vec();
                sc.cpus_allowed = line("Cpus_allowed_list");
                sc.mems_allowed = line("Mems_allowed_list");
                let mut b = Vec::with_capacity(SchedRec::SIZE + 64);
                sc.encode(&mut b);
                w.attr(Group::Sched as u16, &b);
            }
            Some(Got::Refused(errno)) => w.group_error(Group::Sched, errno),
            None => {}
        }
        match (schedstat, &stat) {
            (Some(Got::Read([run_ns, wait_ns, timeslices])), Some(st)) => {
                let mut rec = DelayRec {
                    run_ns,
                    wait_ns,
                    timeslices,
                    blkio_ticks: st.blkio_ticks,
                    ..DelayRec::default()
                };
                if let Some(d) = delays {
                    d.apply(&mut rec);
                }
                w.attr(Group::Delay as u16, &rec.to_bytes());
            }
            (Some(Got::Refused(errno)), _) => w.group_error(Group::Delay, errno),
            _ => {}
        }
        if let Some(label) = label {
            let num = |k| {
                status_value(&s.status, k)
                    .and_then(crate::scan::uint)
                    .unwrap_or(0)
            };
            let (label, errno) = match label {
                Ok(l) => (l, 0),
                Err(e) => (Vec::new(), e),
            };
            let rec = SecurityRec {
                seccomp: num("Seccomp") as u32,
                seccomp_filters: num("Seccomp_filters") as u32,
                no_new_privs: num("NoNewPrivs") as u16,
                label_errno: errno,
                label_len: label.len() as u32,
            };
            w.attr_parts(Group::Security as u16, &[&rec.to_bytes(), &label]);
        }
        if need_cmdline {
            match cmdline_err {
                None if status.has_mm => w.attr(Group::Cmdline as u16, &s.cmdline),
                None => {}
                Some(errno) => w.group_error(Group::Cmdline, errno),
            }
        }
        // The memory maps last, as Task::encode writes them.
        if want_maps && status.has_mm {
            match (&vmas, maps_err) {
                (Some(v), _) => {
                    let mut b = Vec::with_capacity(v.len() * 96);
                    for m in v {
                        m.encode(&mut b);
                    }
                    w.attr(Group::Vma as u16, &b);
                }
                (None, Some(errno)) => w.group_error(Group::Vma, errno),
                (None, None) => {}
            }
        }
        w.finish();
        Ok(true)
    }

    /// DELAY's delay-accounting pairs of task `id` from taskstats, on this reader thread's
    /// socket (opened now if this is its first DELAY task). `None` where they are not to be had:
    /// the reader may not ask ([`ProcReader::open_unchecked`]), the kernel refuses (no
    /// CAP_NET_ADMIN: then not asked again in this dump) or shows nothing accounted, the task
    /// is gone (the read of its status file then skips it).
    fn delay_totals(&self, s: &mut Scratch, id: u32) -> Result<Option<Delays>> {
        if let TaskstatsUse::Untried = s.taskstats {
            s.taskstats = self.open_taskstats();
        }
        let TaskstatsUse::Open(ts) = &mut s.taskstats else {
            return Ok(None);
        };
        match ts.delays(id) {
            Ok(d) => Ok(d),
            Err(e) if e.is_gone() => Ok(None),
            Err(e) if e.is_refused() => {
                s.taskstats = TaskstatsUse::Off;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn open_taskstats(&self) -> TaskstatsUse {
        if !self.taskstats {
            return TaskstatsUse::Off;
        }
        match Taskstats::open(self.taskstats_family.get().copied()) {
            Ok(ts) => {
                let _ = self.taskstats_family.set(ts.family());
                TaskstatsUse::Open(ts)
            }
            // No netlink (EAFNOSUPPORT; EPERM under a seccomp filter, as taskdiagd's), no
            // taskstats in this kernel or network namespace: the pairs cannot be had here, and
            // DELAY_F_COUNTERS says so. Not the dump's failure. (A caller without CAP_NET_ADMIN
            // opens the socket and is refused at its first query, above.)
            Err(_) => TaskstatsUse::Off,
        }
    }

    /// FILES of the task in `s.path`'s directory: the entries of its fd directory (withheld,
    /// with [`FILES_F_FDS_HIDDEN`], where /proc refuses to list them) and its limits file.
    /// `None` if the task is gone.
    fn files(&self, s: &mut Scratch) -> Result<Option<(FilesRec, Vec<LimitRec>)>> {
        let dirfd = self.dir.as_raw_fd();
        let mut rec = FilesRec {
            nlimits: FILES_NLIMITS as u32,
            ..FilesRec::default()
        };
        let io_err = |s: &mut Scratch, name: &[u8], source| {
            s.path.file(name);
            ProcfsError::Io {
                path: s.path.display(&self.root),
                source,
            }
        };
        match openat(
            dirfd,
            s.path.file(b"fd"),
            libc::O_RDONLY | libc::O_DIRECTORY,
        ) {
            Ok(fd) => match list_numeric(&fd, &mut s.dents, &mut s.fds) {
                Ok(()) => rec.fds = s.fds.len() as u32,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
                    return Ok(None)
                }
                Err(e) => return Err(io_err(s, b"fd", e)),
            },
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                rec.flags = FILES_F_FDS_HIDDEN;
            }
            Err(e) if is_gone(&e) => return Ok(None),
            Err(e) => return Err(io_err(s, b"fd", e)),
        }
        match openat(dirfd, s.path.file(b"limits"), libc::O_RDONLY) {
            Ok(fd) => match read_all(&fd, &mut s.limits) {
                Ok(()) => {}
                Err(e) if is_gone(&e) => return Ok(None),
                Err(e) => return Err(io_err(s, b"limits", e)),
            },
            Err(e) if is_gone(&e) => return Ok(None),
            Err(e) => return Err(io_err(s, b"limits", e)),
        }
        // Every kernel since 2.6.25 lists all sixteen; a file without one is malformed.
        let parsed = parse_limits(&s.limits).and_then(|l| {
            l.iter()
                .map(|l| {
                    let (soft, hard) = l.ok_or(crate::scan::err("a limit is missing"))?;
                    Ok(LimitRec { soft, hard })
                })
                .collect::<std::result::Result<Vec<_>, ParseError>>()
        });
        let limits = parsed.map_err(|source| {
            s.path.file(b"limits");
            ProcfsError::Parse {
                path: s.path.display(&self.root),
                source,
            }
        })?;
        Ok(Some((rec, limits)))
    }

    /// NS's namespace links of the task in `s.path`'s directory (`levels` left 0): each link's
    /// inode, 0 for a link that does not exist (a namespace type this kernel lacks, or a task
    /// past exit_task_namespaces()); all 0 with [`NS_F_HIDDEN`] when /proc refuses them
    /// (EACCES: the caller may not ptrace-read the task). `None` if the task is gone.
    fn ns_links(&self, s: &mut Scratch) -> Result<Option<NsRec>> {
        let mut ns_rec = Ns::default();
        let mut name = [0u8; 32];
        let mut link = [0u8; 64];
        for (i, ns) in Ns::NAMES.iter().enumerate() {
            name[..3].copy_from_slice(b"ns/");
            name[3..3 + ns.len()].copy_from_slice(ns.as_bytes());
            let path = s.path.file(&name[..3 + ns.len()]);
            let inode = match readlinkat(self.dir.as_raw_fd(), path, &mut link) {
                // Linux 5.10 answers a reader that may not ptrace-read the task with an empty
                // link rather than EACCES: withheld all the same.
                Ok(0) => {
                    return Ok(Some(NsRec {
                        flags: NS_F_HIDDEN,
                        ..NsRec::default()
                    }))
                }
                Ok(n) => {
                    crate::parse::parse_ns_link(&link[..n]).ok_or_else(|| ProcfsError::Parse {
                        path: s.path.display(&self.root),
                        source: crate::scan::err("not a namespace link"),
                    })?
                }
                // pid outlives every other link: without it the task is gone.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && *ns != "pid" => 0,
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                    return Ok(Some(NsRec {
                        flags: NS_F_HIDDEN,
                        ..NsRec::default()
                    }))
                }
                Err(e) if is_gone(&e) => return Ok(None),
                Err(source) => {
                    return Err(ProcfsError::Io {
                        path: s.path.display(&self.root),
                        source,
                    })
                }
            };
            *ns_rec.inodes_mut()[i] = inode;
        }
        Ok(Some(ns_rec.rec))
    }

    /// The CPU time of every process (`threads`: of every thread, a leader's being its
    /// process's, as /proc/PID/stat shows it) from the stat files alone, in /proc order. This is
    /// what a %CPU baseline needs (`top`'s first sample), at a fraction of a BASE|STAT dump's
    /// cost: that dump also reads status (TracerPid, context switches), which costs the kernel
    /// ~1.5x stat to format.
    pub fn cpu_times(&self, threads: bool) -> Result<Vec<CpuTime>> {
        let mut s = Scratch::new();
        let pids = self.processes(&mut s)?;
        let mut units: Vec<(u32, Option<u32>)> = Vec::with_capacity(pids.len());
        for &pid in &pids {
            units.push((pid, None));
            if threads && self.list_threads(&mut s, pid)? {
                units.extend(
                    s.tids
                        .iter()
                        .filter(|&&t| t != pid)
                        .map(|&t| (pid, Some(t))),
                );
            }
        }
        let mut out = Vec::with_capacity(units.len());
        self.dump_parallel(
            units,
            &mut |b| {
                out.extend(b.chunks_exact(CpuTime::SIZE).map(CpuTime::from_bytes));
                Ok(())
            },
            |r, s, (pid, tid), out| r.cpu_time(s, pid, tid, out),
        )?;
        Ok(out)
    }

    /// Appends task `tid` of `pid` (or process `pid`)'s [`CpuTime`] as bytes; returns 0 if the
    /// task is gone.
    fn cpu_time(
        &self,
        s: &mut Scratch,
        pid: u32,
        tid: Option<u32>,
        out: &mut Vec<u8>,
    ) -> Result<u64> {
        s.path.set_dir(pid, tid);
        if !self.read_one(&mut s.path, b"stat", &mut s.stat)? {
            return Ok(0);
        }
        let st = parse_stat(&s.stat).map_err(|source| ProcfsError::Parse {
            path: s.path.display(&self.root),
            source,
        })?;
        let t = self.ns_per_tick;
        let rec = CpuTime {
            tgid: pid,
            pid: tid.unwrap_or(pid),
            start_ns: st.starttime * t,
            cpu_ns: (st.utime + st.stime) * t,
        };
        out.extend_from_slice(&rec.to_bytes());
        Ok(1)
    }

    /// Runs `f` over `units` on up to `self.workers` threads, writing results in unit order.
    ///
    /// The workers are threads of their own, not joined: one may sleep in a read of a process
    /// whose memory-map lock is held by something stuck (see [`crate::stuck`]). This thread
    /// watches their [`Slot`](crate::stuck::Slot)s while it collects, gives up on a worker
    /// that has been in one read for longer than [`crate::stuck::deadline`] (its process is
    /// then stuck: every later read of it is answered busy at once), and has a new worker
    /// read that worker's share again.
    fn dump_parallel<U, F>(
        &self,
        units: Vec<U>,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
        f: F,
    ) -> Result<u64>
    where
        U: Copy + Send + Sync + 'static,
        F: Fn(&ProcReader, &mut Scratch, U, &mut Vec<u8>) -> Result<u64> + Send + Sync + 'static,
    {
        let chunks = units.len().div_ceil(CHUNK);
        if chunks == 0 {
            return Ok(0);
        }
        let walk = Arc::new(Walk {
            reader: self.clone(),
            units,
            f,
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::sync_channel::<Delivery>(self.workers * 4);
        let mut workers = Vec::new();
        let spawn = |first: Option<usize>| -> Result<Worker> {
            Walk::spawn(&walk, &tx, first).map_err(|source| ProcfsError::Io {
                path: self.root.clone(),
                source,
            })
        };
        for _ in 0..self.workers.min(chunks) {
            workers.push(spawn(None)?);
        }
        let mut pending = BTreeMap::new();
        let mut want = 0usize;
        let mut total = 0u64;
        let result = 'collect: loop {
            // (Shorter once a read sleeps: see crate::stuck::deadline.)
            let limit = crate::stuck::deadline();
            match rx.recv_timeout(limit / 4) {
                Ok(Delivery::Chunk(i, r)) => {
                    // A chunk read again after its first reader was given up on may come twice.
                    if i >= want {
                        pending.entry(i).or_insert(r);
                    }
                }
                Ok(Delivery::Panicked(p)) => {
                    walk.stop.store(true, Ordering::Relaxed);
                    std::panic::resume_unwind(p);
                }
                Err(_) => {}
            }
            while let Some(r) = pending.remove(&want) {
                want += 1;
                match r {
                    Ok((out, n)) => {
                        total += n;
                        if let Err(e) = sink(&out) {
                            break 'collect Err(ProcfsError::Sink(e));
                        }
                    }
                    Err(e) => break 'collect Err(e),
                }
            }
            if want == chunks {
                break Ok(total);
            }
            for w in &mut workers {
                if w.slot.give_up_after(limit).is_some() {
                    *w = match spawn(Some(w.chunk.load(Ordering::Acquire))) {
                        Ok(new) => new,
                        Err(e) => break 'collect Err(e),
                    };
                }
            }
        };
        walk.stop.store(true, Ordering::Relaxed);
        result
    }
}

/// What a walk's worker sends the collecting thread.
enum Delivery {
    /// Chunk `.0`'s messages and their count.
    Chunk(usize, Result<(Vec<u8>, u64)>),
    /// The worker panicked (the collector panics with it).
    Panicked(Box<dyn std::any::Any + Send>),
}

/// One parallel walk: what its workers share.
struct Walk<U, F> {
    reader: ProcReader,
    units: Vec<U>,
    f: F,
    /// The next chunk not taken yet.
    next: AtomicUsize,
    /// Set when the collector is done: workers stop at their next unit.
    stop: AtomicBool,
}

/// A worker of a walk as its collector sees it.
struct Worker {
    slot: Arc<crate::stuck::Slot>,
    /// The chunk it is reading.
    chunk: Arc<AtomicUsize>,
}

impl<U, F> Walk<U, F>
where
    U: Copy + Send + Sync + 'static,
    F: Fn(&ProcReader, &mut Scratch, U, &mut Vec<u8>) -> Result<u64> + Send + Sync + 'static,
{
    /// Starts a worker that reads chunk `first` (one given up on) if given, then takes chunks
    /// until none is left.
    fn spawn(
        walk: &Arc<Self>,
        tx: &mpsc::SyncSender<Delivery>,
        first: Option<usize>,
    ) -> io::Result<Worker> {
        let slot = Arc::new(crate::stuck::Slot::default());
        let chunk = Arc::new(AtomicUsize::new(first.unwrap_or(usize::MAX)));
        let (w, tx) = (Arc::clone(walk), tx.clone());
        let (my_slot, my_chunk) = (Arc::clone(&slot), Arc::clone(&chunk));
        std::thread::Builder::new()
            .name("taskdiag-proc".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    w.work(&tx, my_slot, &my_chunk, first)
                }));
                if let Err(p) = r {
                    let _ = tx.send(Delivery::Panicked(p));
                }
            })?;
        Ok(Worker { slot, chunk })
    }

    fn work(
        &self,
        tx: &mpsc::SyncSender<Delivery>,
        slot: Arc<crate::stuck::Slot>,
        chunk: &AtomicUsize,
        mut first: Option<usize>,
    ) {
        let mut s = Scratch::new();
        s.slot = Some(Arc::clone(&slot));
        let chunks = self.units.len().div_ceil(CHUNK);
        loop {
            let i = match first.take() {
                Some(i) => i,
                None => self.next.fetch_add(1, Ordering::Relaxed),
            };
            if i >= chunks || self.stop.load(Ordering::Relaxed) {
                return;
            }
            chunk.store(i, Ordering::Release);
            let units = &self.units[i * CHUNK..((i + 1) * CHUNK).min(self.units.len())];
            let mut out = Vec::with_capacity(units.len() * 512);
            let mut n = 0;
            let mut res = Ok(());
            for &u in units {
                match (self.f)(&self.reader, &mut s, u, &mut out) {
                    Ok(k) => n += k,
                    Err(e) => {
                        res = Err(e);
                        break;
                    }
                }
                // Given up on while asleep in a read: its chunk is another worker's now.
                if slot.is_given_up() || self.stop.load(Ordering::Relaxed) {
                    return;
                }
            }
            if tx.send(Delivery::Chunk(i, res.map(|()| (out, n)))).is_err() {
                return;
            }
        }
    }
}

/// The gids as bytes in host order, as CRED carries them.
fn as_bytes(v: &[u32]) -> &[u8] {
    // SAFETY: u32 has no padding and any byte pattern is a valid u8; the slice covers exactly
    // the same memory, with u8's weaker alignment.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// STATM from the status `Vm*` lines (kB to bytes).
/// STATM from status's Vm* lines and stat's code and stack addresses.
fn statm_from(st: &Status, line: &StatLine) -> StatmRec {
    let b = |v: Vm| st.vm_kb[v as usize] * 1024;
    StatmRec {
        vm_size: b(Vm::Size),
        vm_peak: b(Vm::Peak),
        rss_anon: b(Vm::RssAnon),
        rss_file: b(Vm::RssFile),
        rss_shmem: b(Vm::RssShmem),
        rss_peak: b(Vm::Hwm),
        swap: b(Vm::Swap),
        text: b(Vm::Exe),
        lib: b(Vm::Lib),
        data: b(Vm::Data),
        stack: b(Vm::Stk),
        locked: b(Vm::Lck),
        pinned: b(Vm::Pin),
        page_tables: b(Vm::Pte),
        code_start: line.startcode,
        code_end: line.endcode,
        stack_start: line.startstack,
    }
}

mod own_files;
pub use own_files::cgroup2_dir;
use own_files::Got;

#[cfg(test)]
mod fake_proc;

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::msg::Messages;
    use taskdiag_proto::task::TaskAssembler;

    #[test]
    fn a_small_file_reads_whole_and_so_does_a_long_one() {
        let names = |b: &[u8]| -> Vec<Vec<u8>> {
            b.split(|&c| c == b'\n')
                .map(|l| l.split(|&c| c == b':').next().unwrap_or_default().to_vec())
                .collect()
        };
        // One read: the same fields as std reads, in the same order.
        let ours = read_small_file("/proc/self/smaps_rollup").unwrap();
        let std = std::fs::read("/proc/self/smaps_rollup").unwrap();
        assert!(ours.ends_with(b"\n") && names(&ours).len() > 10);
        assert_eq!(names(&ours), names(&std));
        // Many reads: smaps runs far past 4 KiB; each of its mappings ends with its VmFlags
        // line, the file's last line included.
        let ours = read_small_file("/proc/self/smaps").unwrap();
        assert!(ours.len() > 16384, "smaps: {} bytes only", ours.len());
        let text = String::from_utf8_lossy(&ours);
        let last = text.lines().last().unwrap_or_default();
        assert!(last.starts_with("VmFlags:"), "smaps ends with {last:?}");
        let mappings = |t: &str| t.lines().filter(|l| l.starts_with("VmFlags:")).count();
        let std = std::fs::read("/proc/self/smaps").unwrap();
        // (Another test's thread may map or unmap between the two reads.)
        assert!(mappings(&text).abs_diff(mappings(&String::from_utf8_lossy(&std))) < 8);
        assert_eq!(
            read_small_file("/proc/self/no-such-file")
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
    }

    fn dump(req: Request) -> Vec<taskdiag_proto::task::Task> {
        let r = ProcReader::open().unwrap();
        let mut buf = Vec::new();
        r.dump(&req, &mut |b| {
            buf.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        let mut asm = TaskAssembler::new();
        Messages::new(&buf)
            .filter_map(|m| asm.push(&m.unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn one_finds_this_process_with_its_own_ids() {
        let me = std::process::id();
        let t = dump(Request::new(
            Strategy::One,
            me,
            taskdiag_proto::SHOW_SUPPORTED,
        ));
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].pid, t[0].tgid), (me, me));
        let base = t[0].base.as_ref().unwrap();
        // SAFETY: getppid/getuid have no preconditions.
        assert_eq!(base.rec.ppid, unsafe { libc::getppid() } as u32);
        assert_eq!(t[0].cred.as_ref().unwrap().rec.euid, unsafe {
            libc::geteuid()
        });
        let argv0 = std::env::args().next().unwrap();
        assert!(t[0].cmdline.as_ref().unwrap().starts_with(argv0.as_bytes()));
    }

    #[test]
    fn all_is_sorted_by_tgid_without_duplicates() {
        let t = dump(Request::new(Strategy::All, 0, Group::Base.flag()));
        assert!(t.windows(2).all(|w| w[0].pid < w[1].pid));
        assert!(t.iter().all(|t| t.pid == t.tgid));
        assert!(t.iter().any(|t| t.pid == std::process::id()));
    }

    #[test]
    fn cpu_times_agree_with_a_base_stat_dump() {
        // A thread that burns CPU, so the leader's (process) time differs from its own.
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let burner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        let cpu = |t: &taskdiag_proto::task::Task| {
            let s = t.stat.as_ref().unwrap();
            s.utime_ns + s.stime_ns
        };
        let me = std::process::id();
        let burner_tid = {
            let d = dump(Request::new(Strategy::Thread, me, Group::Stat.flag()));
            // The thread with the most CPU time is the burner.
            d.iter().max_by_key(|t| cpu(t)).map(|t| t.pid).unwrap()
        };
        let flags = Group::Base.flag() | Group::Stat.flag();
        let r = ProcReader::open().unwrap();
        for threads in [false, true] {
            let strategy = if threads {
                Strategy::Thread
            } else {
                Strategy::One
            };
            let process_before = cpu(&dump(Request::new(Strategy::One, me, flags))[0]);
            let before = dump(Request::new(strategy, me, flags));
            let times = r.cpu_times(threads).unwrap();
            let after = dump(Request::new(strategy, me, flags));
            let process_after = cpu(&dump(Request::new(Strategy::One, me, flags))[0]);
            // Other tests' threads come and go: check those there before and after.
            for b in &before {
                let Some(a) = after.iter().find(|a| a.pid == b.pid) else {
                    continue;
                };
                let t = times
                    .iter()
                    .find(|t| t.pid == b.pid)
                    .unwrap_or_else(|| panic!("{} missing (threads: {threads})", b.pid));
                assert_eq!(t.tgid, me);
                assert_eq!(t.start_ns, b.base.as_ref().unwrap().rec.start_time_ns);
                // A leader's time is its process's, as in a per-process dump.
                let (lo, hi) = if threads && t.pid == me {
                    (process_before, process_after)
                } else {
                    (cpu(b), cpu(a))
                };
                assert!((lo..=hi).contains(&t.cpu_ns), "{t:?} not in {lo}..={hi}");
            }
            assert!(times.iter().any(|t| t.pid == burner_tid) == threads);
        }
        stop.store(true, Ordering::Relaxed);
        burner.join().unwrap();
        let all = r.cpu_times(false).unwrap();
        assert!(all.windows(2).all(|w| w[0].pid < w[1].pid));
        assert!(all.iter().all(|t| t.pid == t.tgid));
    }

    #[test]
    fn a_task_reaped_after_its_files_were_opened_reads_as_gone() {
        // What `task` relies on: a descriptor opened for a task fails to read once the task is
        // gone, with an error `is_gone` recognizes, so the task is skipped rather than mixed
        // with whoever reuses its pid.
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        let r = ProcReader::open().unwrap();
        let mut s = Scratch::new();
        s.path.set_dir(child.id(), None);
        let status = openat(r.dir.as_raw_fd(), s.path.file(b"status"), libc::O_RDONLY);
        let stat = openat(r.dir.as_raw_fd(), s.path.file(b"stat"), libc::O_RDONLY);
        let _ = child.kill();
        let _ = child.wait();
        for fd in [status.expect("open status"), stat.expect("open stat")] {
            let e = read_all(&fd, &mut s.status).expect_err("read after the task was reaped");
            assert!(is_gone(&e), "{e}");
        }
    }

    #[test]
    fn missing_pid_is_esrch() {
        let r = ProcReader::open().unwrap();
        let max = crate::system::parse_pid_max(&std::fs::read("/proc/sys/kernel/pid_max").unwrap())
            .unwrap();
        for s in [Strategy::One, Strategy::Thread, Strategy::Children] {
            let e = r
                .dump(&Request::new(s, max + 1, 1), &mut |_| Ok(()))
                .unwrap_err();
            assert!(
                matches!(e, ProcfsError::NoSuchTask { pid } if pid == max + 1),
                "{e}"
            );
        }
    }
}
