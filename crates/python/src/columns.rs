//! The columns a snapshot can carry: their names (psutil's, dotted for the fields of psutil's
//! named tuples: `cpu_times.user`), the psutil attribute each belongs to, the taskdiag groups
//! that fill it, and how a value is made from a decoded task, with psutil's units and rules.
//!
//! One table, [`COLUMNS`]: the Python layer learns attributes and columns from it
//! ([`attributes`]), the [`Builder`] fills them. A value psutil's `as_dict` would give
//! as its `ad_value` (AccessDenied: /proc refused the file; ZombieProcess: the method raises
//! it for a zombie) is null here.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, ListBuilder, UInt32Builder,
    UInt64Builder,
};
use arrow_array::ArrayRef;
use taskdiag_proto::task::Task;
use taskdiag_proto::Group;

/// What psutil and the machine say about units and names, for one snapshot: each file read
/// when a column first needs it (a one-process call asking for a name reads neither
/// /proc/stat nor /proc/meminfo).
pub struct Ctx {
    /// Clock ticks per second.
    hz: u64,
    /// Boot time as psutil reads it (`btime` of /proc/stat), seconds since the epoch; `None`
    /// where it cannot be read.
    boot_time: OnceCell<Option<f64>>,
    /// Physical memory (MemTotal), bytes: psutil's `virtual_memory().total`.
    mem_total: OnceCell<Option<u64>>,
    /// Terminal paths by device number, as psutil maps them (`/dev/tty*`, then `/dev/pts/*`,
    /// by `st_rdev`; a later path wins); listed when a terminal column is first made.
    ttys: Option<HashMap<u64, Vec<u8>>>,
    /// User names by uid, looked up as met (psutil: `pwd.getpwuid`, else the number).
    pub users: HashMap<u32, Vec<u8>>,
    /// Whether this kernel's /proc refuses (ESRCH) the environment of a task without an
    /// address space (a kernel thread, a zombie) rather than reading it empty; learned from
    /// the first such task met.
    mmless_environ: Option<bool>,
}

impl Ctx {
    /// Nothing read yet.
    pub fn new() -> Ctx {
        Ctx {
            hz: taskdiag_procfs::clock_ticks(),
            boot_time: OnceCell::new(),
            mem_total: OnceCell::new(),
            ttys: None,
            users: HashMap::new(),
            mmless_environ: None,
        }
    }

    fn boot_time(&self) -> Option<f64> {
        *self.boot_time.get_or_init(|| {
            let stat = std::fs::read("/proc/stat").ok()?;
            Some(taskdiag_procfs::system::boot_time(&stat).ok()? as f64)
        })
    }

    fn mem_total(&self) -> Option<u64> {
        *self.mem_total.get_or_init(|| {
            let meminfo = std::fs::read("/proc/meminfo").ok()?;
            Some(taskdiag_procfs::system::parse_meminfo(&meminfo).mem_total? * 1024)
        })
    }

    fn ticks(&self, ns: u64) -> u64 {
        ns / (1_000_000_000 / self.hz)
    }

    /// Seconds from nanoseconds at tick resolution, as psutil divides ticks.
    fn secs(&self, ns: u64) -> f64 {
        self.ticks(ns) as f64 / self.hz as f64
    }

    /// Whether /proc refuses the environment of `pid`, a task without an address space:
    /// newer kernels answer ESRCH where older ones read it empty (the ENVIRON group reads
    /// it empty everywhere).
    fn environ_refused_without_mm(&mut self, pid: u32) -> bool {
        if let Some(known) = self.mmless_environ {
            return known;
        }
        match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(_) => self.mmless_environ = Some(false),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => self.mmless_environ = Some(true),
            // Gone, or refused: the next such task tells.
            Err(_) => return false,
        }
        self.mmless_environ == Some(true)
    }

    fn user(&mut self, uid: u32) -> &[u8] {
        self.users.entry(uid).or_insert_with(|| {
            taskdiag_tools::names::user_name(uid)
                .unwrap_or_else(|| uid.to_string())
                .into_bytes()
        })
    }
}

/// psutil's `_psposix.get_terminal_map()`: `st_rdev` of `/dev/tty*` and `/dev/pts/*`.
fn terminal_map() -> HashMap<u64, Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let mut map = HashMap::new();
    let list = |dir: &str, prefix: &[u8]| -> Vec<Vec<u8>> {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        rd.flatten()
            .map(|e| e.file_name().as_bytes().to_vec())
            .filter(|n| n.starts_with(prefix) && !n.starts_with(b"."))
            .map(|n| [dir.as_bytes(), b"/", &n].concat())
            .collect()
    };
    for path in list("/dev", b"tty")
        .into_iter()
        .chain(list("/dev/pts", b""))
    {
        if let Ok(md) = std::fs::metadata(std::ffi::OsStr::from_bytes(&path)) {
            map.insert(md.rdev(), path);
        }
    }
    map
}

/// A task and what turns it into values.
pub struct Row<'a> {
    /// The task.
    pub t: &'a Task,
}

type Out<'a> = &'a mut Vec<u8>;

/// Where a list column's items go, one call each.
type Items<'a> = &'a mut dyn FnMut(&[u8]);

/// How a column's value is made; `None` / `false`: null.
pub enum Get {
    /// A u32.
    U32(fn(&Row) -> Option<u32>),
    /// An i32.
    I32(fn(&Row) -> Option<i32>),
    /// A u64.
    U64(fn(&Row, &Ctx) -> Option<u64>),
    /// An f64.
    F64(fn(&Row, &Ctx) -> Option<f64>),
    /// A bool.
    Bool(fn(&Row) -> Option<bool>),
    /// A string, written to the buffer.
    Str(fn(&Row, &mut Ctx, Out) -> bool),
    /// A list of strings, each handed to the callback.
    StrList(fn(&Row, &mut Ctx, Items) -> bool),
    /// A list of u32.
    U32List(fn(&Row, &mut Vec<u32>) -> bool),
}

impl Get {
    /// The Python type of a value, as `taskdiag.columns()` names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Get::U32(_) | Get::I32(_) | Get::U64(_) => "int",
            Get::F64(_) => "float",
            Get::Bool(_) => "bool",
            Get::Str(_) => "str",
            Get::StrList(_) => "list[str]",
            Get::U32List(_) => "list[int]",
        }
    }
}

/// One column.
pub struct Def {
    /// Its name.
    pub name: &'static str,
    /// The psutil attribute (or taskdiag extra) it belongs to.
    pub attr: &'static str,
    /// The groups its value comes from (BASE is always read).
    pub groups: u64,
    /// How its value is made.
    pub get: Get,
    /// One line saying what it is, in which unit.
    pub doc: &'static str,
}

const BASE: u64 = 1 << Group::Base as u32;
const CRED: u64 = 1 << Group::Cred as u32;
const STAT: u64 = 1 << Group::Stat as u32;
const STATM: u64 = 1 << Group::Statm as u32;
const CMDLINE: u64 = 1 << Group::Cmdline as u32;
const FILES: u64 = 1 << Group::Files as u32;
const IO: u64 = 1 << Group::Io as u32;
const PATHS: u64 = 1 << Group::Paths as u32;
const SCHED: u64 = 1 << Group::Sched as u32;
const DELAY: u64 = 1 << Group::Delay as u32;
const ENVIRON: u64 = 1 << Group::Environ as u32;

fn zombie(r: &Row) -> bool {
    r.t.base
        .as_ref()
        .is_some_and(|b| taskdiag_proto::state_char(b.rec.state) == 'Z')
}

fn kthread(r: &Row) -> bool {
    r.t.base
        .as_ref()
        .is_some_and(|b| b.rec.flags & taskdiag_proto::BASE_F_KTHREAD != 0)
}

/// psutil's `cmdline()` split of /proc/PID/cmdline: by NUL when it ends with one, else by
/// spaces (a process that rewrote its title); one NUL-ended argument with spaces is split
/// by spaces too. `None` for a zombie (ZombieProcess), an empty list for no command line.
fn cmdline_args(r: &Row, _: &mut Ctx, f: &mut dyn FnMut(&[u8])) -> bool {
    let Some(data) = r.t.cmdline.as_deref() else {
        // No address space: a kernel thread's empty command line, a zombie's refusal.
        return !zombie(r) && !r.t.failed(Group::Cmdline);
    };
    if data.is_empty() {
        return !zombie(r);
    }
    let sep = if data.ends_with(b"\0") { b'\0' } else { b' ' };
    let data = data.strip_suffix(&[sep]).unwrap_or(data);
    if sep == b'\0' && !data.contains(&b'\0') && data.contains(&b' ') {
        data.split(|&c| c == b' ').for_each(f);
    } else {
        data.split(|&c| c == sep).for_each(f);
    }
    true
}

/// psutil's `environ()` parse of /proc/PID/environ, as `KEY=VALUE` entries: up to the first
/// empty entry or an unterminated tail, entries without a key left out.
fn environ(r: &Row, m: &mut Ctx, f: &mut dyn FnMut(&[u8])) -> bool {
    let Some(data) = r.t.environ.as_deref() else {
        return false;
    };
    if data.is_empty() && (zombie(r) || kthread(r)) && m.environ_refused_without_mm(r.t.pid) {
        return false;
    }
    let mut rest = data;
    while let Some(end) = rest.iter().position(|&c| c == 0) {
        if end == 0 {
            break;
        }
        let entry = &rest[..end];
        if entry
            .iter()
            .position(|&c| c == b'=')
            .is_some_and(|eq| eq > 0)
        {
            f(entry);
        }
        rest = &rest[end + 1..];
    }
    true
}

/// psutil's `name()`: the kernel's name, or, when that is 15 characters or more, the base
/// name of the first argument if it begins with it (`gnome-keyring-d` → `gnome-keyring-daemon`).
fn name(r: &Row, m: &mut Ctx, out: Out) -> bool {
    let Some(b) = &r.t.base else { return false };
    out.extend_from_slice(&b.comm);
    // psutil compares decoded names: a kernel name cut inside a character ends in a lone
    // surrogate, which no argument's name begins with.
    let comm = fs_chars(&b.comm);
    if comm.len() < 15 {
        return true;
    }
    let mut first = None;
    cmdline_args(r, m, &mut |a| {
        if first.is_none() {
            first = Some(a.to_vec());
        }
    });
    if let Some(arg0) = first {
        let base = arg0.rsplit(|&c| c == b'/').next().unwrap_or(&arg0);
        if fs_chars(base).starts_with(&comm) {
            out.clear();
            out.extend_from_slice(base);
        }
    }
    true
}

/// Bytes as Python decodes file names (UTF-8, `surrogateescape`), as code points: each byte
/// that is not part of a character stands for itself (U+DC80..U+DCFF).
fn fs_chars(b: &[u8]) -> Vec<u32> {
    let mut out = Vec::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        out.extend(chunk.valid().chars().map(|c| c as u32));
        out.extend(chunk.invalid().iter().map(|&x| 0xDC00 + x as u32));
    }
    out
}

fn status(r: &Row, _: &mut Ctx, out: Out) -> bool {
    let Some(b) = &r.t.base else { return false };
    out.extend_from_slice(status_name(taskdiag_proto::state_char(b.rec.state)).as_bytes());
    true
}

/// psutil's status strings, by /proc/PID/stat's state letter.
pub fn status_name(c: char) -> &'static str {
    match c {
        'R' => "running",
        'S' => "sleeping",
        'D' => "disk-sleep",
        'T' => "stopped",
        't' => "tracing-stop",
        'Z' => "zombie",
        'X' | 'x' => "dead",
        'K' => "wake-kill",
        'W' => "waking",
        'I' => "idle",
        'P' => "parked",
        _ => "?",
    }
}

fn terminal(r: &Row, m: &mut Ctx, out: Out) -> bool {
    let Some(b) = &r.t.base else { return false };
    if b.rec.tty_nr == 0 {
        return false;
    }
    match m
        .ttys
        .get_or_insert_with(terminal_map)
        .get(&(b.rec.tty_nr as u64))
    {
        Some(p) => {
            out.extend_from_slice(p);
            true
        }
        None => false,
    }
}

fn username(r: &Row, m: &mut Ctx, out: Out) -> bool {
    let Some(c) = &r.t.cred else { return false };
    out.extend_from_slice(m.user(c.rec.uid));
    true
}

/// psutil's `exe()` and `cwd()`: the link, `""` where it does not resolve (a kernel thread),
/// null where /proc refuses it or the process is a zombie.
fn path(
    r: &Row,
    which: fn(&taskdiag_proto::task::Paths) -> &Result<Vec<u8>, u8>,
    out: Out,
) -> bool {
    let Some(p) = &r.t.paths else { return false };
    match which(p) {
        Ok(v) => {
            // psutil's readlink(): up to a NUL, and without a " (deleted)" the path does not
            // have (a deleted file's; a file that exists under the longer name keeps it).
            let v = v.split(|&c| c == 0).next().unwrap_or(v);
            match v.strip_suffix(b" (deleted)") {
                Some(short) if !exists(v) => out.extend_from_slice(short),
                _ => out.extend_from_slice(v),
            }
            true
        }
        Err(e) if *e as i32 == libc::ENOENT => !zombie(r),
        Err(_) => false,
    }
}

fn exists(path: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    std::fs::metadata(std::ffi::OsStr::from_bytes(path)).is_ok()
}

fn exe(r: &Row, _: &mut Ctx, out: Out) -> bool {
    path(r, |p| &p.exe, out)
}

fn cwd(r: &Row, _: &mut Ctx, out: Out) -> bool {
    path(r, |p| &p.cwd, out)
}

fn root(r: &Row, _: &mut Ctx, out: Out) -> bool {
    path(r, |p| &p.root, out)
}

/// `Cpus_allowed_list` (`0-3,8`) as CPU numbers.
fn cpu_affinity(r: &Row, out: &mut Vec<u32>) -> bool {
    let Some(s) = &r.t.sched else { return false };
    for part in s.cpus_allowed.split(|&c| c == b',') {
        let text = String::from_utf8_lossy(part);
        let mut ends = text.trim().splitn(2, '-').map(|x| x.parse::<u32>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), None) => out.push(a),
            (Some(Ok(a)), Some(Ok(b))) if a <= b => out.extend(a..=b),
            _ => {}
        }
    }
    true
}

fn statm(r: &Row) -> taskdiag_proto::StatmRec {
    // No address space (a kernel thread, a zombie): /proc/PID/statm reads all zeros.
    r.t.statm.unwrap_or_default()
}

/// Every column, in the order a table lists them.
pub static COLUMNS: &[Def] = &[
    Def { name: "pid", attr: "pid", groups: BASE, get: Get::U32(|r| Some(r.t.pid)),
          doc: "task id: the process id (of a thread with threads=True)" },
    Def { name: "ppid", attr: "ppid", groups: BASE, get: Get::U32(|r| Some(r.t.base.as_ref()?.rec.ppid)),
          doc: "parent process id (0 outside the caller's pid namespace)" },
    Def { name: "name", attr: "name", groups: BASE | CMDLINE, get: Get::Str(name),
          doc: "process name, psutil's rule: a 15-character kernel name is completed from the command line" },
    Def { name: "status", attr: "status", groups: BASE, get: Get::Str(status),
          doc: "psutil's status string: running, sleeping, disk-sleep, stopped, zombie, idle..." },
    Def { name: "create_time", attr: "create_time", groups: BASE,
          get: Get::F64(|r, m| Some(m.secs(r.t.base.as_ref()?.rec.start_time_ns) + m.boot_time()?)),
          doc: "start time, seconds since the epoch (boot time + start ticks / CLK_TCK)" },
    Def { name: "terminal", attr: "terminal", groups: BASE, get: Get::Str(terminal),
          doc: "controlling terminal's path, null without one" },
    Def { name: "uids.real", attr: "uids", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.uid)),
          doc: "real uid" },
    Def { name: "uids.effective", attr: "uids", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.euid)),
          doc: "effective uid" },
    Def { name: "uids.saved", attr: "uids", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.suid)),
          doc: "saved uid" },
    Def { name: "gids.real", attr: "gids", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.gid)),
          doc: "real gid" },
    Def { name: "gids.effective", attr: "gids", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.egid)),
          doc: "effective gid" },
    Def { name: "gids.saved", attr: "gids", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.sgid)),
          doc: "saved gid" },
    Def { name: "username", attr: "username", groups: CRED, get: Get::Str(username),
          doc: "name of the real uid's user (the number where it has none)" },
    Def { name: "cpu_times.user", attr: "cpu_times", groups: STAT,
          get: Get::F64(|r, m| Some(m.secs(r.t.stat.as_ref()?.utime_ns))), doc: "user CPU time, s" },
    Def { name: "cpu_times.system", attr: "cpu_times", groups: STAT,
          get: Get::F64(|r, m| Some(m.secs(r.t.stat.as_ref()?.stime_ns))), doc: "system CPU time, s" },
    Def { name: "cpu_times.children_user", attr: "cpu_times", groups: STAT,
          get: Get::F64(|r, m| Some(m.secs(r.t.stat.as_ref()?.cutime_ns))),
          doc: "user CPU time of waited-for children, s" },
    Def { name: "cpu_times.children_system", attr: "cpu_times", groups: STAT,
          get: Get::F64(|r, m| Some(m.secs(r.t.stat.as_ref()?.cstime_ns))),
          doc: "system CPU time of waited-for children, s" },
    Def { name: "cpu_times.iowait", attr: "cpu_times", groups: STAT | DELAY,
          get: Get::F64(|r, m| Some(r.t.delay.as_ref()?.blkio_ticks as f64 / m.hz as f64)),
          doc: "time waiting for block I/O, s (delay accounting)" },
    Def { name: "cpu_num", attr: "cpu_num", groups: STAT, get: Get::I32(|r| Some(r.t.stat.as_ref()?.processor)),
          doc: "CPU the task last ran on" },
    Def { name: "num_threads", attr: "num_threads", groups: STAT, get: Get::U32(|r| Some(r.t.stat.as_ref()?.threads)),
          doc: "threads in the process" },
    Def { name: "nice", attr: "nice", groups: STAT, get: Get::I32(|r| Some(r.t.stat.as_ref()?.nice)),
          doc: "nice value, -20..19" },
    Def { name: "page_faults.minor", attr: "page_faults", groups: STAT,
          get: Get::U64(|r, _| Some(r.t.stat.as_ref()?.minflt)), doc: "minor page faults" },
    Def { name: "page_faults.major", attr: "page_faults", groups: STAT,
          get: Get::U64(|r, _| Some(r.t.stat.as_ref()?.majflt)), doc: "major page faults" },
    Def { name: "num_ctx_switches.voluntary", attr: "num_ctx_switches", groups: STAT,
          get: Get::U64(|r, _| Some(r.t.stat.as_ref()?.nvcsw)),
          doc: "voluntary context switches (of the task itself, as /proc/PID/status)" },
    Def { name: "num_ctx_switches.involuntary", attr: "num_ctx_switches", groups: STAT,
          get: Get::U64(|r, _| Some(r.t.stat.as_ref()?.nivcsw)), doc: "involuntary context switches" },
    Def { name: "memory_info.rss", attr: "memory_info", groups: STATM,
          get: Get::U64(|r, _| { let s = statm(r); Some(s.rss_anon + s.rss_file + s.rss_shmem) }),
          doc: "resident set size, bytes" },
    Def { name: "memory_info.vms", attr: "memory_info", groups: STATM,
          get: Get::U64(|r, _| Some(statm(r).vm_size)), doc: "virtual memory size, bytes" },
    Def { name: "memory_info.shared", attr: "memory_info", groups: STATM,
          get: Get::U64(|r, _| { let s = statm(r); Some(s.rss_file + s.rss_shmem) }),
          doc: "resident shared (file-backed and shmem) memory, bytes" },
    Def { name: "memory_info.text", attr: "memory_info", groups: STATM,
          get: Get::U64(|r, _| Some(statm(r).text)), doc: "program text, bytes" },
    Def { name: "memory_info.lib", attr: "memory_info", groups: STATM,
          get: Get::U64(|_, _| Some(0)), doc: "0 (statm's lib, unused since Linux 2.6)" },
    Def { name: "memory_info.data", attr: "memory_info", groups: STATM,
          get: Get::U64(|r, _| { let s = statm(r); Some(s.data + s.stack) }), doc: "data and stack, bytes" },
    Def { name: "memory_info.dirty", attr: "memory_info", groups: STATM,
          get: Get::U64(|_, _| Some(0)), doc: "0 (statm's dt, unused since Linux 2.6)" },
    Def { name: "memory_percent", attr: "memory_percent", groups: STATM,
          get: Get::F64(|r, m| { let s = statm(r); Some((s.rss_anon + s.rss_file + s.rss_shmem) as f64 / m.mem_total()? as f64 * 100.0) }),
          doc: "resident set size as a percentage of physical memory" },
    Def { name: "cmdline", attr: "cmdline", groups: CMDLINE, get: Get::StrList(cmdline_args),
          doc: "command line arguments, split as psutil splits them" },
    Def { name: "exe", attr: "exe", groups: PATHS, get: Get::Str(exe),
          doc: "executable's path (\"\" for a kernel thread)" },
    Def { name: "cwd", attr: "cwd", groups: PATHS, get: Get::Str(cwd),
          doc: "working directory (\"\" for a kernel thread)" },
    Def { name: "environ", attr: "environ", groups: ENVIRON, get: Get::StrList(environ),
          doc: "environment as KEY=VALUE entries (taskdiag.psutil makes psutil's dict of them)" },
    Def { name: "num_fds", attr: "num_fds", groups: FILES,
          get: Get::U32(|r| { let f = r.t.files.as_ref()?; (f.rec.flags & taskdiag_proto::FILES_F_FDS_HIDDEN == 0).then_some(f.rec.fds) }),
          doc: "open file descriptors" },
    Def { name: "io_counters.read_count", attr: "io_counters", groups: IO,
          get: Get::U64(|r, _| Some(r.t.io.as_ref()?.syscr)), doc: "read-like system calls" },
    Def { name: "io_counters.write_count", attr: "io_counters", groups: IO,
          get: Get::U64(|r, _| Some(r.t.io.as_ref()?.syscw)), doc: "write-like system calls" },
    Def { name: "io_counters.read_bytes", attr: "io_counters", groups: IO,
          get: Get::U64(|r, _| Some(r.t.io.as_ref()?.read_bytes)), doc: "bytes fetched from storage" },
    Def { name: "io_counters.write_bytes", attr: "io_counters", groups: IO,
          get: Get::U64(|r, _| Some(r.t.io.as_ref()?.write_bytes)), doc: "bytes sent to storage" },
    Def { name: "io_counters.read_chars", attr: "io_counters", groups: IO,
          get: Get::U64(|r, _| Some(r.t.io.as_ref()?.rchar)), doc: "bytes passed to read-like calls" },
    Def { name: "io_counters.write_chars", attr: "io_counters", groups: IO,
          get: Get::U64(|r, _| Some(r.t.io.as_ref()?.wchar)), doc: "bytes passed to write-like calls" },
    Def { name: "cpu_affinity", attr: "cpu_affinity", groups: SCHED, get: Get::U32List(cpu_affinity),
          doc: "CPUs the task may run on" },
    // taskdiag's extras.
    Def { name: "tgid", attr: "tgid", groups: BASE, get: Get::U32(|r| Some(r.t.tgid)),
          doc: "thread-group (process) id" },
    Def { name: "pgid", attr: "pgid", groups: BASE, get: Get::U32(|r| Some(r.t.base.as_ref()?.rec.pgid)),
          doc: "process group id" },
    Def { name: "sid", attr: "sid", groups: BASE, get: Get::U32(|r| Some(r.t.base.as_ref()?.rec.sid)),
          doc: "session id" },
    Def { name: "tpgid", attr: "tpgid", groups: BASE, get: Get::I32(|r| Some(r.t.base.as_ref()?.rec.tpgid)),
          doc: "terminal's foreground process group (-1 without a terminal)" },
    Def { name: "tty_nr", attr: "tty_nr", groups: BASE, get: Get::U32(|r| Some(r.t.base.as_ref()?.rec.tty_nr)),
          doc: "controlling terminal's device number, 0 without one" },
    Def { name: "tracer_pid", attr: "tracer_pid", groups: BASE, get: Get::U32(|r| Some(r.t.base.as_ref()?.rec.tpid)),
          doc: "ptrace tracer's id, 0 when not traced" },
    Def { name: "kthread", attr: "kthread", groups: BASE, get: Get::Bool(|r| Some(kthread(r))),
          doc: "whether the task is a kernel thread" },
    Def { name: "start_time_ns", attr: "start_time_ns", groups: BASE,
          get: Get::U64(|r, _| Some(r.t.base.as_ref()?.rec.start_time_ns)),
          doc: "start time since boot, ns at clock-tick resolution" },
    Def { name: "fsuid", attr: "fsuid", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.fsuid)),
          doc: "filesystem uid" },
    Def { name: "fsgid", attr: "fsgid", groups: CRED, get: Get::U32(|r| Some(r.t.cred.as_ref()?.rec.fsgid)),
          doc: "filesystem gid" },
    Def { name: "groups", attr: "groups", groups: CRED,
          get: Get::U32List(|r, out| match &r.t.cred { Some(c) => { out.extend_from_slice(&c.groups); true } None => false }),
          doc: "supplementary group ids" },
    Def { name: "caps.effective", attr: "caps", groups: CRED,
          get: Get::U64(|r, _| Some(r.t.cred.as_ref()?.rec.cap_effective)), doc: "effective capabilities (bit mask)" },
    Def { name: "caps.permitted", attr: "caps", groups: CRED,
          get: Get::U64(|r, _| Some(r.t.cred.as_ref()?.rec.cap_permitted)), doc: "permitted capabilities" },
    Def { name: "caps.inheritable", attr: "caps", groups: CRED,
          get: Get::U64(|r, _| Some(r.t.cred.as_ref()?.rec.cap_inheritable)), doc: "inheritable capabilities" },
    Def { name: "caps.bounding", attr: "caps", groups: CRED,
          get: Get::U64(|r, _| Some(r.t.cred.as_ref()?.rec.cap_bset)), doc: "capability bounding set" },
    Def { name: "caps.ambient", attr: "caps", groups: CRED,
          get: Get::U64(|r, _| Some(r.t.cred.as_ref()?.rec.cap_ambient)), doc: "ambient capabilities" },
    Def { name: "priority", attr: "priority", groups: STAT, get: Get::I32(|r| Some(r.t.stat.as_ref()?.priority)),
          doc: "priority as /proc/PID/stat shows it" },
    Def { name: "policy", attr: "policy", groups: STAT, get: Get::U32(|r| Some(r.t.stat.as_ref()?.policy)),
          doc: "scheduling policy (SCHED_*)" },
    Def { name: "root", attr: "root", groups: PATHS, get: Get::Str(root),
          doc: "root directory" },
    Def { name: "refused_groups", attr: "refused_groups", groups: BASE,
          get: Get::U64(|r, _| Some(refused(r.t))),
          doc: "taskdiag groups /proc refused this caller for the task (bit 1 << group): why values are null" },
];

/// The groups /proc refused the caller for `t`, as show-flag bits: the group's error
/// EACCES, or a part of it withheld (a path refused, the descriptor count hidden).
fn refused(t: &Task) -> u64 {
    let mut m = t
        .errors
        .iter()
        .filter(|e| e.errno == libc::EACCES && e.group < 64)
        .fold(0, |m, e| m | 1 << e.group);
    if let Some(p) = &t.paths {
        if [&p.exe, &p.cwd, &p.root]
            .iter()
            .any(|x| **x == Err(libc::EACCES as u8))
        {
            m |= PATHS;
        }
    }
    if let Some(f) = &t.files {
        if f.rec.flags & taskdiag_proto::FILES_F_FDS_HIDDEN != 0 {
            m |= FILES;
        }
    }
    m
}

/// A task's start time (ns since boot: with the pid, its identity) and its status as
/// psutil names it.
pub fn identity(t: &Task) -> (u64, &'static str) {
    let b = t.base.as_ref().map(|b| b.rec).unwrap_or_default();
    (
        b.start_time_ns,
        status_name(taskdiag_proto::state_char(b.state)),
    )
}

/// One mapping as psutil's memory_maps() reads it from smaps: the path (`[anon]` for none;
/// a " (deleted)" the file does not have taken off), and rss, size, pss, shared_clean,
/// shared_dirty, private_clean, private_dirty, referenced, anonymous, swap in bytes.
pub fn psutil_map(v: &taskdiag_proto::task::Vma) -> (Vec<u8>, [u64; 10]) {
    let name = v.name.trim_ascii();
    let path = if name.is_empty() {
        b"[anon]".to_vec()
    } else {
        match name.strip_suffix(b" (deleted)") {
            Some(short) if !exists(name) => short.to_vec(),
            _ => name.to_vec(),
        }
    };
    let s = v.stat.unwrap_or_default();
    let size = v.rec.end - v.rec.start;
    (
        path,
        [
            s.rss,
            size,
            s.pss,
            s.shared_clean,
            s.shared_dirty,
            s.private_clean,
            s.private_dirty,
            s.referenced,
            s.anonymous,
            s.swap,
        ],
    )
}

/// Each attribute with the groups its columns come from (BASE left out).
pub fn attribute_groups() -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    for d in COLUMNS {
        let g = d.groups & !BASE;
        match out.iter_mut().find(|(a, _)| *a == d.attr) {
            Some((_, m)) => *m |= g,
            None => out.push((d.attr, g)),
        }
    }
    out
}

/// Each attribute with its columns, in table order (for the Python layer).
pub fn attributes() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for d in COLUMNS {
        match out.iter_mut().find(|(a, _)| *a == d.attr) {
            Some((_, cols)) => cols.push(d.name),
            None => out.push((d.attr, vec![d.name])),
        }
    }
    out
}

/// A bad name: the names that exist, for the error.
#[derive(Debug)]
pub struct UnknownName(pub String);

/// The columns `names` select (attributes or column names, any order; the table keeps
/// [`COLUMNS`]' order), with `pid` always first; all columns for `None`.
pub fn select(names: Option<&[String]>) -> Result<Vec<&'static Def>, UnknownName> {
    let Some(names) = names else {
        return Ok(COLUMNS.iter().collect());
    };
    let mut want = vec![false; COLUMNS.len()];
    want[0] = true;
    for n in names {
        let mut found = false;
        for (i, d) in COLUMNS.iter().enumerate() {
            if d.name == n || d.attr == n {
                want[i] = true;
                found = true;
            }
        }
        if !found {
            return Err(UnknownName(n.clone()));
        }
    }
    Ok(COLUMNS
        .iter()
        .zip(want)
        .filter_map(|(d, w)| w.then_some(d))
        .collect())
}

/// The groups `cols` need.
pub fn groups(cols: &[&Def]) -> u64 {
    cols.iter().fold(BASE, |g, d| g | d.groups)
}

/// Whether `t` is a whole record: BASE present, and no group lost because the task went
/// away while it was read (such a task is left out, not half-filled).
pub fn whole(t: &Task) -> bool {
    t.base.is_some()
        && !t.errors.iter().any(|e| {
            e.errno == libc::ESRCH || e.errno == libc::ENOENT && e.group == Group::Base as u16
        })
}

/// One column being filled.
enum Fill {
    U32(UInt32Builder),
    I32(Int32Builder),
    U64(UInt64Builder),
    F64(Float64Builder),
    Bool(BooleanBuilder),
    Str(BinaryBuilder),
    StrList(ListBuilder<BinaryBuilder>),
    U32List(ListBuilder<UInt32Builder>),
}

/// The selected columns, filled one task at a time as the dump decodes them: no task is kept
/// once its values are in (a snapshot of 50,000 processes held as decoded tasks took ~65 MB,
/// whose first touch cost a fifth of a BASE-only snapshot in page faults).
pub struct Builder {
    cols: Vec<(&'static Def, Fill)>,
    buf: Vec<u8>,
    u32s: Vec<u32>,
}

impl Builder {
    /// Empty columns `cols`, with room for about `n` rows.
    pub fn new(cols: &[&'static Def], n: usize) -> Self {
        let cols = cols
            .iter()
            .map(|&d| {
                let f = match d.get {
                    Get::U32(_) => Fill::U32(UInt32Builder::with_capacity(n)),
                    Get::I32(_) => Fill::I32(Int32Builder::with_capacity(n)),
                    Get::U64(_) => Fill::U64(UInt64Builder::with_capacity(n)),
                    Get::F64(_) => Fill::F64(Float64Builder::with_capacity(n)),
                    Get::Bool(_) => Fill::Bool(BooleanBuilder::with_capacity(n)),
                    Get::Str(_) => Fill::Str(BinaryBuilder::with_capacity(n, n * 16)),
                    Get::StrList(_) => {
                        Fill::StrList(ListBuilder::new(BinaryBuilder::with_capacity(n, n * 32)))
                    }
                    Get::U32List(_) => Fill::U32List(ListBuilder::new(UInt32Builder::new())),
                };
                (d, f)
            })
            .collect();
        Builder {
            cols,
            buf: Vec::new(),
            u32s: Vec::new(),
        }
    }

    /// Appends `t`'s values, if it is a whole record ([`whole`]); whether it did.
    pub fn push(&mut self, t: &Task, m: &mut Ctx) -> bool {
        if !whole(t) {
            return false;
        }
        let r = &Row { t };
        for (d, fill) in &mut self.cols {
            match (&d.get, fill) {
                (Get::U32(f), Fill::U32(b)) => b.append_option(f(r)),
                (Get::I32(f), Fill::I32(b)) => b.append_option(f(r)),
                (Get::U64(f), Fill::U64(b)) => b.append_option(f(r, m)),
                (Get::F64(f), Fill::F64(b)) => b.append_option(f(r, m)),
                (Get::Bool(f), Fill::Bool(b)) => b.append_option(f(r)),
                (Get::Str(f), Fill::Str(b)) => {
                    self.buf.clear();
                    if f(r, m, &mut self.buf) {
                        b.append_value(&self.buf);
                    } else {
                        b.append_null();
                    }
                }
                (Get::StrList(f), Fill::StrList(b)) => {
                    let ok = f(r, m, &mut |a| b.values().append_value(a));
                    b.append(ok);
                }
                (Get::U32List(f), Fill::U32List(b)) => {
                    self.u32s.clear();
                    let ok = f(r, &mut self.u32s);
                    b.values().append_slice(&self.u32s);
                    b.append(ok);
                }
                _ => unreachable!("a column's builder is made from its Get"),
            }
        }
        true
    }

    /// The columns, in the order selected.
    pub fn finish(self) -> Vec<ArrayRef> {
        self.cols
            .into_iter()
            .map(|(_, f)| -> ArrayRef {
                match f {
                    Fill::U32(mut b) => Arc::new(b.finish()),
                    Fill::I32(mut b) => Arc::new(b.finish()),
                    Fill::U64(mut b) => Arc::new(b.finish()),
                    Fill::F64(mut b) => Arc::new(b.finish()),
                    Fill::Bool(mut b) => Arc::new(b.finish()),
                    Fill::Str(mut b) => Arc::new(b.finish()),
                    Fill::StrList(mut b) => Arc::new(b.finish()),
                    Fill::U32List(mut b) => Arc::new(b.finish()),
                }
            })
            .collect()
    }
}
