//! Pure parsers for a task's own files, /proc/PID/{stat,status,children,cgroup,stack,...}: bytes in,
//! fields out. No I/O, no allocation except the supplementary group list, which goes into a
//! caller-owned `Vec`. (Memory maps are parsed in [`crate::maps`], machine-wide files in
//! [`crate::system`].)
//!
//! Field positions follow proc(5) and fs/proc/array.c (`do_task_stat`, `proc_pid_status`,
//! `task_mem` in fs/proc/task_mmu.c). The name in /proc/PID/stat is taken between the first `(`
//! and the *last* `)`, so a task named `(a) b)` or containing newlines parses correctly.

use thiserror::Error;

use crate::scan::{err, err_in, hex, int, uint, uint32, words};

/// What is wrong with a /proc file's text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{what}{}", field.map(|f| format!(" in field {f}")).unwrap_or_default())]
pub struct ParseError {
    /// Description of the defect.
    pub what: &'static str,
    /// The field (of /proc/PID/stat) or key (of a `Key: value` file) it was found in, if one.
    pub field: Option<&'static str>,
}

/// The fields of /proc/PID/stat that taskdiag uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatLine {
    /// Field 1.
    pub pid: u32,
    /// Field 2, without the parentheses (at most 64 bytes are kept).
    pub comm: [u8; 64],
    /// Length of `comm`.
    pub comm_len: usize,
    /// Field 3, the state letter.
    pub state: u8,
    /// Field 4.
    pub ppid: u32,
    /// Field 5.
    pub pgrp: u32,
    /// Field 6.
    pub session: u32,
    /// Field 7.
    pub tty_nr: u32,
    /// Field 8, the terminal's foreground process group (-1: no terminal).
    pub tpgid: i32,
    /// Field 9 (PF_* flags).
    pub flags: u32,
    /// Field 10.
    pub minflt: u64,
    /// Field 11.
    pub cminflt: u64,
    /// Field 12.
    pub majflt: u64,
    /// Field 13.
    pub cmajflt: u64,
    /// Field 14, clock ticks.
    pub utime: u64,
    /// Field 15, clock ticks.
    pub stime: u64,
    /// Field 16, clock ticks.
    pub cutime: u64,
    /// Field 17, clock ticks.
    pub cstime: u64,
    /// Field 18.
    pub priority: i64,
    /// Field 19.
    pub nice: i64,
    /// Field 20.
    pub num_threads: u32,
    /// Field 22, clock ticks since boot.
    pub starttime: u64,
    /// Field 26, startcode (1 where /proc withholds it, 0 without an address space).
    pub startcode: u64,
    /// Field 27, endcode (the same).
    pub endcode: u64,
    /// Field 28, startstack (0 where withheld).
    pub startstack: u64,
    /// Field 39.
    pub processor: i64,
    /// Field 40.
    pub rt_priority: u32,
    /// Field 41.
    pub policy: u32,
    /// Field 42, delayacct_blkio_ticks: clock ticks spent waiting for block I/O (0 without
    /// delay accounting).
    pub blkio_ticks: u64,
}

impl Default for StatLine {
    fn default() -> Self {
        StatLine {
            pid: 0,
            comm: [0; 64],
            comm_len: 0,
            state: 0,
            ppid: 0,
            pgrp: 0,
            session: 0,
            tty_nr: 0,
            tpgid: -1,
            flags: 0,
            minflt: 0,
            cminflt: 0,
            majflt: 0,
            cmajflt: 0,
            utime: 0,
            stime: 0,
            cutime: 0,
            cstime: 0,
            priority: 0,
            nice: 0,
            num_threads: 0,
            starttime: 0,
            startcode: 0,
            endcode: 0,
            startstack: 0,
            processor: 0,
            rt_priority: 0,
            policy: 0,
            blkio_ticks: 0,
        }
    }
}

impl StatLine {
    /// The name as bytes.
    pub fn comm(&self) -> &[u8] {
        &self.comm[..self.comm_len]
    }
}

/// The error for a malformed numeric field of /proc/PID/stat, naming the field (proc(5)).
fn field_err(n: usize) -> ParseError {
    const NAMES: [&str; 42] = [
        "",
        "pid",
        "comm",
        "state",
        "ppid",
        "pgrp",
        "session",
        "tty_nr",
        "tpgid",
        "flags",
        "minflt",
        "cminflt",
        "majflt",
        "cmajflt",
        "utime",
        "stime",
        "cutime",
        "cstime",
        "priority",
        "nice",
        "num_threads",
        "itrealvalue",
        "starttime",
        "vsize",
        "rss",
        "rsslim",
        "startcode",
        "endcode",
        "startstack",
        "kstkesp",
        "kstkeip",
        "signal",
        "blocked",
        "sigignore",
        "sigcatch",
        "wchan",
        "nswap",
        "cnswap",
        "exit_signal",
        "processor",
        "rt_priority",
        "policy",
    ];
    ParseError {
        what: "bad number",
        field: Some(NAMES.get(n).copied().unwrap_or("past 41")),
    }
}

/// Parses /proc/PID/stat (or /proc/PID/task/TID/stat).
pub fn parse_stat(buf: &[u8]) -> Result<StatLine, ParseError> {
    let open = buf
        .iter()
        .position(|&c| c == b'(')
        .ok_or(err("no '(' before the name"))?;
    let close = buf
        .iter()
        .rposition(|&c| c == b')')
        .ok_or(err("no ')' after the name"))?;
    if close < open {
        return Err(err("')' before '('"));
    }
    let mut s = StatLine {
        pid: uint(buf[..open].strip_suffix(b" ").ok_or(err("no pid"))?)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(err("bad pid"))?,
        ..StatLine::default()
    };
    let name = &buf[open + 1..close];
    s.comm_len = name.len().min(s.comm.len());
    s.comm[..s.comm_len].copy_from_slice(&name[..s.comm_len]);

    // Fields from 3 on, space separated, after ") ".
    let rest = buf.get(close + 2..).ok_or(err("nothing after the name"))?;
    let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
    for (n, f) in (3usize..).zip(rest.split(|&c| c == b' ')) {
        let u = || uint(f).ok_or(field_err(n));
        let i = || int(f).ok_or(field_err(n));
        let u32_ = || u().and_then(|v| u32::try_from(v).map_err(|_| err("number out of range")));
        match n {
            3 => s.state = *f.first().ok_or(err("empty state"))?,
            4 => s.ppid = u32_()?,
            // A task past exit (state X) has no signal struct and /proc prints -1 for
            // these; taskdiag reports "none" as 0, as for ids outside the namespace.
            5 => s.pgrp = u32::try_from(i()?).unwrap_or(0),
            6 => s.session = u32::try_from(i()?).unwrap_or(0),
            // tty_nr is printed with %d but is a dev_t encoding; keep its bits.
            7 => s.tty_nr = i()? as u32,
            8 => s.tpgid = i32::try_from(i()?).map_err(|_| err("number out of range"))?,
            9 => s.flags = u32_()?,
            10 => s.minflt = u()?,
            11 => s.cminflt = u()?,
            12 => s.majflt = u()?,
            13 => s.cmajflt = u()?,
            14 => s.utime = u()?,
            15 => s.stime = u()?,
            16 => s.cutime = u()?,
            17 => s.cstime = u()?,
            18 => s.priority = i()?,
            19 => s.nice = i()?,
            20 => s.num_threads = u32_()?,
            22 => s.starttime = u()?,
            26 => s.startcode = u()?,
            27 => s.endcode = u()?,
            28 => s.startstack = u()?,
            39 => s.processor = i()?,
            40 => s.rt_priority = u32_()?,
            41 => s.policy = u32_()?,
            42 => {
                s.blkio_ticks = u()?;
                return Ok(s);
            }
            _ => {}
        }
    }
    Err(err("fewer than 42 fields"))
}

/// The fields of /proc/PID/status that taskdiag uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// `Tgid`.
    pub tgid: u32,
    /// `TracerPid`.
    pub tracer_pid: u32,
    /// `Uid`: real, effective, saved, fs.
    pub uid: [u32; 4],
    /// `Gid`: real, effective, saved, fs.
    pub gid: [u32; 4],
    /// `CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb`.
    pub caps: [u64; 5],
    /// Whether the `Vm*` lines are present (the task has an address space).
    pub has_mm: bool,
    /// `VmPeak`, `VmSize`, `VmLck`, `VmPin`, `VmHWM`, `RssAnon`, `RssFile`, `RssShmem`,
    /// `VmData`, `VmStk`, `VmExe`, `VmLib`, `VmPTE`, `VmSwap`, in kB, indexed by [`Vm`].
    pub vm_kb: [u64; Vm::COUNT],
    /// `voluntary_ctxt_switches`.
    pub nvcsw: u64,
    /// `nonvoluntary_ctxt_switches`.
    pub nivcsw: u64,
    /// `SigPnd`, `ShdPnd`, `SigBlk`, `SigIgn`, `SigCgt` (bit N-1: signal N).
    pub sig: [u64; 5],
    /// `NSpid`, `NStgid`, `NSpgid`, `NSsid`: the task's ids in /proc's pid namespace, then in
    /// each nested one down to its own (`ns_ids[level] = [pid, tgid, pgid, sid]`).
    pub ns_ids: NsIds,
    /// Number of valid `ns_ids` entries (the length of the `NSpid` line).
    pub ns_levels: usize,
}

/// The soft and hard limits of /proc/PID/limits, in RLIMIT_* order (`u64::MAX` for
/// "unlimited"), found by their names; a limit the file lacks stays `None`.
pub fn parse_limits(
    buf: &[u8],
) -> Result<[Option<(u64, u64)>; taskdiag_proto::FILES_NLIMITS], ParseError> {
    let mut out = [None; taskdiag_proto::FILES_NLIMITS];
    let value = |v: &[u8]| {
        if v == b"unlimited" {
            Some(u64::MAX)
        } else {
            uint(v)
        }
    };
    for line in buf.split(|&c| c == b'\n') {
        let Some(i) = taskdiag_proto::task::Files::NAMES
            .iter()
            .position(|n| line.starts_with(n.as_bytes()) && line.get(n.len()) == Some(&b' '))
        else {
            continue;
        };
        let rest = &line[taskdiag_proto::task::Files::NAMES[i].len()..];
        let mut words = rest.split(|&c| c == b' ').filter(|w| !w.is_empty());
        let soft = words.next().and_then(value).ok_or(err("bad soft limit"))?;
        let hard = words.next().and_then(value).ok_or(err("bad hard limit"))?;
        out[i] = Some((soft, hard));
    }
    Ok(out)
}

/// The names of /proc/PID/io's seven counters, in the file's (and [`taskdiag_proto::IoRec`]'s)
/// order.
pub const IO_NAMES: [&str; 7] = [
    "rchar",
    "wchar",
    "syscr",
    "syscw",
    "read_bytes",
    "write_bytes",
    "cancelled_write_bytes",
];

/// The counters of /proc/PID/io (`name: value` lines), in [`IO_NAMES`] order, found by name.
/// Every kernel prints all seven (0 where its accounting is configured out); one missing is a
/// malformed file.
pub fn parse_io(buf: &[u8]) -> Result<[u64; 7], ParseError> {
    let mut out = [None; 7];
    for line in buf.split(|&c| c == b'\n') {
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let Some(i) = IO_NAMES.iter().position(|n| n.as_bytes() == &line[..colon]) else {
            continue;
        };
        let v = line[colon + 1..].trim_ascii_start();
        out[i] = Some(uint(v).ok_or(err_in("bad number", IO_NAMES[i]))?);
    }
    let mut v = [0; 7];
    for (i, o) in out.into_iter().enumerate() {
        v[i] = o.ok_or(err_in("missing", IO_NAMES[i]))?;
    }
    Ok(v)
}

/// A number file of /proc/PID (oom_score, oom_score_adj, loginuid, sessionid): one decimal
/// number and a newline (loginuid and sessionid print an unset id as 4294967295).
pub fn parse_number_file(buf: &[u8]) -> Result<i64, ParseError> {
    let s = buf.strip_suffix(b"\n").unwrap_or(buf);
    int(s).ok_or(err("not a decimal number"))
}

/// /proc/PID/autogroup: `/autogroup-ID nice N` (the task's autogroup and its nice value), or
/// nothing when the task is not in one (`None`).
pub fn parse_autogroup(buf: &[u8]) -> Result<Option<(u32, i32)>, ParseError> {
    let s = buf.strip_suffix(b"\n").unwrap_or(buf);
    if s.is_empty() {
        return Ok(None);
    }
    let rest = s
        .strip_prefix(b"/autogroup-")
        .ok_or(err("no /autogroup- prefix"))?;
    let mut w = rest.split(|&c| c == b' ');
    let id = w
        .next()
        .and_then(uint32)
        .ok_or(err_in("bad number", "id"))?;
    if w.next() != Some(b"nice") {
        return Err(err("no nice"));
    }
    let nice = w
        .next()
        .and_then(int)
        .and_then(|n| i32::try_from(n).ok())
        .ok_or(err_in("bad number", "nice"))?;
    Ok(Some((id, nice)))
}

/// The value of line `key` of /proc/PID/status (`Key:\tvalue`), if it has one.
pub fn status_value<'a>(buf: &'a [u8], key: &str) -> Option<&'a [u8]> {
    buf.split(|&c| c == b'\n').find_map(|l| {
        l.strip_prefix(key.as_bytes())?
            .strip_prefix(b":")
            .map(|v| v.trim_ascii_start())
    })
}

/// The frames of a /proc/PID/stack text (proc_pid_stack(): `[<0>] %pB` a line): each line
/// without its `[<0>] ` (the address the kernel no longer shows) and newline, innermost first.
pub fn stack_frames(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    buf.split(|&c| c == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_prefix(b"[<0>] ").unwrap_or(l))
}

/// /proc/PID/schedstat: nanoseconds on a CPU, nanoseconds waiting on a run queue, and the
/// number of timeslices run.
pub fn parse_schedstat(buf: &[u8]) -> Result<[u64; 3], ParseError> {
    let s = buf.strip_suffix(b"\n").unwrap_or(buf);
    let mut w = s.split(|&c| c == b' ');
    let mut v = [0; 3];
    for (i, name) in ["run time", "wait time", "timeslices"]
        .into_iter()
        .enumerate()
    {
        v[i] = w.next().and_then(uint).ok_or(err_in("bad number", name))?;
    }
    Ok(v)
}

/// The inode number in a /proc/PID/ns/NAME link's text (`net:[4026531840]`).
pub fn parse_ns_link(link: &[u8]) -> Option<u32> {
    let open = link.iter().position(|&c| c == b'[')?;
    let inner = link.get(open + 1..)?.strip_suffix(b"]")?;
    uint(inner).and_then(|x| u32::try_from(x).ok())
}

/// The most pid namespace levels a status file can list: levels 0 to the kernel's
/// MAX_PID_NS_LEVEL (32).
pub const MAX_PID_NS_LEVELS: usize = taskdiag_proto::task::Ns::MAX_LEVELS;

/// [`Status::ns_ids`]: `[pid, tgid, pgid, sid]` per pid namespace level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsIds(pub [[u32; 4]; MAX_PID_NS_LEVELS]);

impl Default for NsIds {
    fn default() -> Self {
        NsIds([[0; 4]; MAX_PID_NS_LEVELS])
    }
}

/// Index of a `Vm*`/`Rss*` line in [`Status::vm_kb`].
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy)]
pub enum Vm {
    Peak,
    Size,
    Lck,
    Pin,
    Hwm,
    RssAnon,
    RssFile,
    RssShmem,
    Data,
    Stk,
    Exe,
    Lib,
    Pte,
    Swap,
}

impl Vm {
    /// Number of tracked lines.
    pub const COUNT: usize = 14;
}

fn ids4(v: &[u8]) -> Result<[u32; 4], ParseError> {
    let mut out = [0u32; 4];
    let mut it = v.split(|&c| c == b'\t');
    for o in &mut out {
        *o = it
            .next()
            .and_then(uint)
            .and_then(|x| u32::try_from(x).ok())
            .ok_or(err("bad Uid/Gid line"))?;
    }
    Ok(out)
}

fn kb(v: &[u8]) -> Result<u64, ParseError> {
    let t = v.trim_ascii_start();
    let t = t.strip_suffix(b" kB").ok_or(err("Vm line without kB"))?;
    uint(t).ok_or(err("bad Vm value"))
}

/// Parses /proc/PID/status. Supplementary groups (the `Groups` line) go to `groups`, cleared
/// first. The `Name` line is not used: its escaping loses bytes, /proc/PID/stat has the name raw.
pub fn parse_status(buf: &[u8], groups: &mut Vec<u32>) -> Result<Status, ParseError> {
    parse_status_until(buf, groups, None)
}

/// Like [`parse_status`], but stops after the line with key `last` (e.g. `b"Uid"` when only
/// `Tgid`, `TracerPid` and `Uid` are wanted): status is long, and the early lines are cheap.
pub fn parse_status_until(
    buf: &[u8],
    groups: &mut Vec<u32>,
    last: Option<&[u8]>,
) -> Result<Status, ParseError> {
    let mut s = Status::default();
    groups.clear();
    let mut seen_uid = false;
    for line in buf.split(|&c| c == b'\n') {
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            continue;
        };
        let key = &line[..colon];
        let val = line.get(colon + 1..).unwrap_or_default();
        let v = val.strip_prefix(b"\t").unwrap_or(val);
        let num = || uint(v.trim_ascii()).ok_or(err("bad number"));
        let num32 = || num().and_then(|x| u32::try_from(x).map_err(|_| err("number out of range")));
        let mut vm = |i: Vm| -> Result<(), ParseError> {
            s.vm_kb[i as usize] = kb(v)?;
            s.has_mm = true;
            Ok(())
        };
        match key {
            b"Tgid" => s.tgid = num32()?,
            b"TracerPid" => s.tracer_pid = num32()?,
            b"Uid" => {
                s.uid = ids4(v)?;
                seen_uid = true;
            }
            b"Gid" => s.gid = ids4(v)?,
            b"Groups" => {
                for g in v.split(|&c| c == b' ').filter(|g| !g.is_empty()) {
                    let g = uint(g).and_then(|x| u32::try_from(x).ok());
                    groups.push(g.ok_or(err("bad Groups line"))?);
                }
            }
            b"NSpid" | b"NStgid" | b"NSpgid" | b"NSsid" => {
                let col = match key {
                    b"NSpid" => 0,
                    b"NStgid" => 1,
                    b"NSpgid" => 2,
                    _ => 3,
                };
                let mut n = 0;
                for (i, p) in v.split(|&c| c == b'\t').enumerate() {
                    let id = uint(p.trim_ascii()).and_then(|x| u32::try_from(x).ok());
                    let slot = s.ns_ids.0.get_mut(i).ok_or(err("more than 33 NS levels"))?;
                    slot[col] = id.ok_or(err("bad NS id line"))?;
                    n = i + 1;
                }
                if col == 0 {
                    s.ns_levels = n;
                }
            }
            b"VmPeak" => vm(Vm::Peak)?,
            b"VmSize" => vm(Vm::Size)?,
            b"VmLck" => vm(Vm::Lck)?,
            b"VmPin" => vm(Vm::Pin)?,
            b"VmHWM" => vm(Vm::Hwm)?,
            b"RssAnon" => vm(Vm::RssAnon)?,
            b"RssFile" => vm(Vm::RssFile)?,
            b"RssShmem" => vm(Vm::RssShmem)?,
            b"VmData" => vm(Vm::Data)?,
            b"VmStk" => vm(Vm::Stk)?,
            b"VmExe" => vm(Vm::Exe)?,
            b"VmLib" => vm(Vm::Lib)?,
            b"VmPTE" => vm(Vm::Pte)?,
            b"VmSwap" => vm(Vm::Swap)?,
            b"CapInh" => s.caps[0] = hex(v).ok_or(err("bad CapInh"))?,
            b"CapPrm" => s.caps[1] = hex(v).ok_or(err("bad CapPrm"))?,
            b"CapEff" => s.caps[2] = hex(v).ok_or(err("bad CapEff"))?,
            b"CapBnd" => s.caps[3] = hex(v).ok_or(err("bad CapBnd"))?,
            b"CapAmb" => s.caps[4] = hex(v).ok_or(err("bad CapAmb"))?,
            b"SigPnd" => s.sig[0] = hex(v).ok_or(err("bad SigPnd"))?,
            b"ShdPnd" => s.sig[1] = hex(v).ok_or(err("bad ShdPnd"))?,
            b"SigBlk" => s.sig[2] = hex(v).ok_or(err("bad SigBlk"))?,
            b"SigIgn" => s.sig[3] = hex(v).ok_or(err("bad SigIgn"))?,
            b"SigCgt" => s.sig[4] = hex(v).ok_or(err("bad SigCgt"))?,
            b"voluntary_ctxt_switches" => s.nvcsw = num()?,
            b"nonvoluntary_ctxt_switches" => s.nivcsw = num()?,
            _ => {}
        }
        if last == Some(key) {
            break;
        }
    }
    if !seen_uid {
        return Err(err("no Uid line"));
    }
    Ok(s)
}

/// The pids in /proc/PID/task/TID/children (space-separated, in the order the kernel lists
/// them). A word that is not a pid is skipped.
pub fn parse_children(buf: &[u8]) -> impl Iterator<Item = u32> + '_ {
    words(buf).filter_map(uint32)
}

/// What /proc/PID/wchan says a task sleeps in, as procps' `lookup_wchan` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wchan<'a> {
    /// Not sleeping ("0"): procps prints "-".
    Running,
    /// Nothing readable (an empty file): procps prints "?".
    Unknown,
    /// The kernel function's name, without procps' stripped prefixes ("." and leading "_").
    Name(&'a [u8]),
}

/// Parses /proc/PID/wchan's bytes as procps does: at most 63 bytes, "0" for a running task,
/// one leading "." and every leading "_" removed, the name ending at a NUL.
pub fn parse_wchan(buf: &[u8]) -> Wchan<'_> {
    let raw = &buf[..buf.len().min(63)];
    match raw.first() {
        None => Wchan::Unknown,
        Some(b'0') => Wchan::Running,
        Some(_) => {
            let mut s = raw.strip_prefix(b".").unwrap_or(raw);
            while let Some(rest) = s.strip_prefix(b"_") {
                s = rest;
            }
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            Wchan::Name(&s[..end])
        }
    }
}

/// The cgroup v2 paths of /proc/PID/cgroup: the `PATH` of each `0::PATH` line, read as procps
/// reads the file (lines end at a newline or a NUL, and the first empty line ends the list).
pub fn cgroup_v2_paths(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    buf.split(|&c| c == b'\n' || c == 0)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.strip_prefix(b"0::"))
}

/// The hierarchies a /proc/PID/cgroup text lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupHierarchies {
    /// cgroup v1 hierarchies (`ID:CONTROLLERS:PATH` lines with an ID other than 0).
    pub v1: bool,
    /// The unified hierarchy (its `0::PATH` line: absent until cgroup2 is first mounted).
    pub unified: bool,
}

/// The hierarchies `buf` (a /proc/PID/cgroup text) lists.
pub fn cgroup_hierarchies(buf: &[u8]) -> CgroupHierarchies {
    let lines = || buf.split(|&c| c == b'\n').filter(|l| !l.is_empty());
    CgroupHierarchies {
        v1: lines().any(|l| !l.starts_with(b"0::")),
        unified: lines().any(|l| l.starts_with(b"0::")),
    }
}

/// The boottime offset of /proc/PID/timens_offsets ("boottime SECS NSECS" among its lines,
/// time_namespaces(7)), in nanoseconds: what /proc adds to a task's start time for a reader in
/// that time namespace. 0 without the line.
pub fn timens_boottime_offset(buf: &[u8]) -> Result<i64, ParseError> {
    for line in buf.split(|&c| c == b'\n') {
        let mut w = words(line);
        if w.next() != Some(&b"boottime"[..]) {
            continue;
        }
        return match (w.next().and_then(int), w.next().and_then(int), w.next()) {
            (Some(secs), Some(nsecs), None) => secs
                .checked_mul(1_000_000_000)
                .and_then(|n| n.checked_add(nsecs))
                .ok_or(err_in("out of range", "boottime")),
            _ => Err(err_in("malformed line", "boottime")),
        };
    }
    Ok(0)
}

/// One line of /proc/PID/uid_map or gid_map (user_namespaces(7)): ids `inside ..
/// inside + count` of the namespace are `outside ..` in its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// First id inside the namespace.
    pub inside: u32,
    /// The id it is outside.
    pub outside: u32,
    /// How many ids follow.
    pub count: u32,
}

/// The ranges of /proc/PID/uid_map or gid_map text ("inside outside count" per line; blank
/// lines skipped).
pub fn parse_id_map(buf: &[u8]) -> Result<Vec<IdRange>, ParseError> {
    buf.split(|&c| c == b'\n')
        .filter(|l| words(l).next().is_some())
        .map(|l| {
            let mut w = words(l).map(uint32);
            match (w.next(), w.next(), w.next(), w.next()) {
                (Some(Some(inside)), Some(Some(outside)), Some(Some(count)), None) => Ok(IdRange {
                    inside,
                    outside,
                    count,
                }),
                _ => Err(err("an id map line is not three ids")),
            }
        })
        .collect()
}

/// The options of a procfs mount that decide visibility, as /proc/PID/mountinfo prints its
/// super options (`rw,hidepid=invisible,gid=27`): the `hidepid=` value as written (a name, or a
/// number as mount(8) takes it) and the `gid=` group. Other options are skipped.
pub fn proc_mount_options(opts: &[u8]) -> Result<(Option<&[u8]>, Option<u32>), ParseError> {
    let (mut hidepid, mut gid) = (None, None);
    for o in opts.split(|&c| c == b',') {
        if let Some(v) = o.strip_prefix(b"hidepid=") {
            hidepid = Some(v);
        } else if let Some(v) = o.strip_prefix(b"gid=") {
            gid = Some(uint32(v).ok_or(err_in("a gid that is not a number", "gid"))?);
        }
    }
    Ok((hidepid, gid))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_boottime_offset_is_read_in_nanoseconds() {
        let text = b"monotonic           0         0\nboottime        86400       500\n";
        assert_eq!(timens_boottime_offset(text), Ok(86_400_000_000_500));
        let negative = b"boottime      -3600         0\nmonotonic 0 0\n";
        assert_eq!(timens_boottime_offset(negative), Ok(-3_600_000_000_000));
        assert_eq!(timens_boottime_offset(b""), Ok(0));
        assert!(timens_boottime_offset(b"boottime 1\n").is_err());
        assert!(timens_boottime_offset(b"boottime x 0\n").is_err());
    }

    #[test]
    fn wchan_is_read_as_procps_reads_it() {
        assert_eq!(parse_wchan(b"0"), Wchan::Running);
        assert_eq!(parse_wchan(b""), Wchan::Unknown);
        assert_eq!(parse_wchan(b"do_epoll_wait"), Wchan::Name(b"do_epoll_wait"));
        assert_eq!(
            parse_wchan(b".__x64_sys_pause"),
            Wchan::Name(b"x64_sys_pause")
        );
        assert_eq!(parse_wchan(b"__do_sys\0junk"), Wchan::Name(b"do_sys"));
        let long = [b'a'; 80];
        assert_eq!(parse_wchan(&long), Wchan::Name(&long[..63]));
    }

    use super::*;

    #[test]
    fn stack_frames_drop_the_hidden_address() {
        let text = b"[<0>] do_nanosleep+0x6b/0x190\n[<0>] hrtimer_nanosleep+0xa1/0x160\n";
        let frames: Vec<&[u8]> = stack_frames(text).collect();
        assert_eq!(
            frames,
            [
                &b"do_nanosleep+0x6b/0x190"[..],
                b"hrtimer_nanosleep+0xa1/0x160"
            ]
        );
        assert_eq!(stack_frames(b"").count(), 0);
        assert_eq!(
            stack_frames(b"x+0x1/0x2 [m]\n").collect::<Vec<_>>(),
            [&b"x+0x1/0x2 [m]"[..]]
        );
    }

    #[test]
    fn schedstat() {
        assert_eq!(parse_schedstat(b"0 57435 1\n").unwrap(), [0, 57435, 1]);
        assert!(parse_schedstat(b"1 2\n").is_err());
    }

    #[test]
    fn sched_files() {
        assert_eq!(parse_number_file(b"4294967295\n").unwrap(), 4294967295);
        assert_eq!(parse_number_file(b"-1000\n").unwrap(), -1000);
        assert!(parse_number_file(b"x\n").is_err());
        assert_eq!(
            parse_autogroup(b"/autogroup-4 nice 0\n").unwrap(),
            Some((4, 0))
        );
        assert_eq!(
            parse_autogroup(b"/autogroup-12 nice -5\n").unwrap(),
            Some((12, -5))
        );
        assert_eq!(parse_autogroup(b"").unwrap(), None);
        assert!(parse_autogroup(b"/autogroup-x nice 0\n").is_err());
        let status =
            b"Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n";
        assert_eq!(status_value(status, "Cpus_allowed_list"), Some(&b"0-1"[..]));
        assert_eq!(status_value(status, "Mems_allowed_list"), Some(&b"0"[..]));
        assert_eq!(status_value(status, "Cpus"), None);
    }

    #[test]
    fn id_maps_and_proc_mount_options() {
        let m =
            parse_id_map(b"         0       1000          1\n         1     100000      65536\n")
                .expect("map");
        assert_eq!(
            m,
            [
                IdRange {
                    inside: 0,
                    outside: 1000,
                    count: 1
                },
                IdRange {
                    inside: 1,
                    outside: 100_000,
                    count: 65536
                }
            ]
        );
        assert_eq!(parse_id_map(b"").expect("empty"), []);
        assert!(parse_id_map(b"0 0\n").is_err());
        assert!(parse_id_map(b"0 0 4294967296\n").is_err());
        assert_eq!(
            proc_mount_options(b"rw,hidepid=invisible,gid=27").expect("opts"),
            (Some(&b"invisible"[..]), Some(27))
        );
        assert_eq!(proc_mount_options(b"rw").expect("opts"), (None, None));
        assert!(proc_mount_options(b"gid=x").is_err());
    }

    // Captured on Linux 6.18 (Debian 12 VM) from a process started as
    // `exec -a '(a) b)' sleep 1000`; the name field holds the hostile comm.
    const STAT_HOSTILE: &[u8] = b"4242 ((a) b)) S 1405 4242 1405 34816 4242 4194560 120 0 0 0 \
        3 1 0 0 20 0 1 0 372771 5771264 224 18446744073709551615 94591173840896 \
        94591173857393 140724125097680 0 0 0 0 0 0 1 0 0 17 1 0 0 0 0 0 94591173872176 \
        94591173873312 94591197040640 140724125103961 140724125103977 140724125103977 \
        140724125106159 0\n";

    #[test]
    fn stat_with_parentheses_in_the_name() {
        let s = parse_stat(STAT_HOSTILE).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm(), b"(a) b)");
        assert_eq!(s.state, b'S');
        assert_eq!(
            (s.ppid, s.pgrp, s.session, s.tty_nr, s.tpgid),
            (1405, 4242, 1405, 34816, 4242)
        );
        assert_eq!(s.flags, 4194560);
        assert_eq!((s.minflt, s.utime, s.stime), (120, 3, 1));
        assert_eq!((s.priority, s.nice, s.num_threads), (20, 0, 1));
        assert_eq!(s.starttime, 372771);
        assert_eq!((s.processor, s.rt_priority, s.policy), (1, 0, 0));
    }

    #[test]
    fn stat_with_newline_and_space_in_the_name() {
        let line = STAT_HOSTILE.to_vec();
        let fixed = String::from_utf8(line)
            .unwrap()
            .replace("((a) b))", "(x\ny ) z)");
        let s = parse_stat(fixed.as_bytes()).unwrap();
        assert_eq!(s.comm(), b"x\ny ) z");
        assert_eq!(s.ppid, 1405);
    }

    #[test]
    fn stat_of_a_task_past_exit() {
        // Captured from a task in EXIT_DEAD during the churn test (Linux 6.18).
        let dead =
            b"6770 (td_fixture) X 0 -1 -1 0 -1 4227084 72 0 0 0 0 0 0 0 20 0 0 0 897474 0 0 \
            0 0 0 0 0 0 0 0 0 0 1 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        let s = parse_stat(dead).unwrap();
        assert_eq!((s.state, s.ppid, s.pgrp, s.session), (b'X', 0, 0, 0));
    }

    #[test]
    fn stat_negative_fields_and_truncation() {
        // A real-time task: priority is negative.
        let rt = String::from_utf8(STAT_HOSTILE.to_vec())
            .unwrap()
            .replace(" 20 0 1 0 ", " -51 0 1 0 ");
        assert_eq!(parse_stat(rt.as_bytes()).unwrap().priority, -51);
        assert!(parse_stat(&STAT_HOSTILE[..60]).is_err());
        assert!(parse_stat(b"").is_err());
        assert!(parse_stat(b"12 (x").is_err());
    }

    // Captured from /proc/self/status of a shell on Linux 6.18, trimmed to the lines used.
    const STATUS: &[u8] = b"Name:\tbash\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t1405\n\
        Ngid:\t0\nPid:\t1405\nPPid:\t1404\nTracerPid:\t77\nUid:\t1000\t1001\t1002\t1003\n\
        Gid:\t100\t101\t102\t103\nFDSize:\t256\nGroups:\t4 27 100 \nNStgid:\t1405\n\
        NSpid:\t1405\t1\nNSpgid:\t1405\nNSsid:\t1405\nKthread:\t0\nVmPeak:\t    8760 kB\n\
        VmSize:\t    8728 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\nVmHWM:\t    5120 kB\n\
        VmRSS:\t    5120 kB\nRssAnon:\t    1792 kB\nRssFile:\t    3328 kB\nRssShmem:\t       0 kB\n\
        VmData:\t    1808 kB\nVmStk:\t     132 kB\nVmExe:\t     892 kB\nVmLib:\t    1816 kB\n\
        VmPTE:\t      56 kB\nVmSwap:\t       0 kB\nThreads:\t1\n\
        CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n\
        CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n\
        SigPnd:\t0000000000000100\nShdPnd:\t0000000000004000\nSigBlk:\t0000000000010000\n\
        SigIgn:\t0000000000384004\nSigCgt:\t000000004b813efb\n\
        voluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t3\n";

    #[test]
    fn limits_by_name() {
        let text =
            b"Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max file size             unlimited            unlimited            bytes     \n\
Max open files            1024                 524288               files     \n\
Max realtime timeout      unlimited            unlimited            us        \n";
        let l = parse_limits(text).unwrap();
        assert_eq!(l[0], Some((u64::MAX, u64::MAX)));
        assert_eq!(l[7], Some((1024, 524288)));
        assert_eq!(l[15], Some((u64::MAX, u64::MAX)));
        assert_eq!(l[2], None);
        assert!(parse_limits(b"Max open files            x   1\n").is_err());
    }

    #[test]
    fn ns_links_and_levels() {
        assert_eq!(parse_ns_link(b"net:[4026531840]"), Some(4026531840));
        assert_eq!(
            parse_ns_link(b"pid_for_children:[4026532301]"),
            Some(4026532301)
        );
        assert_eq!(parse_ns_link(b"net:[4026531840"), None);
        assert_eq!(parse_ns_link(b"/dev/null"), None);
        let st = b"Name:\tx\nUid:\t0\t0\t0\t0\nNStgid:\t700\t5\t1\nNSpid:\t701\t6\t2\n\
            NSpgid:\t700\t0\t0\nNSsid:\t690\t0\t0\n";
        let s = parse_status(st, &mut Vec::new()).unwrap();
        assert_eq!(s.ns_levels, 3);
        assert_eq!(s.ns_ids.0[0], [701, 700, 700, 690]);
        assert_eq!(s.ns_ids.0[2], [2, 1, 0, 0]);
        let deep: Vec<u8> = b"Uid:\t0\t0\t0\t0\nNSpid:"
            .iter()
            .copied()
            .chain((0..34).flat_map(|_| *b"\t1"))
            .collect();
        assert!(parse_status(&deep, &mut Vec::new()).is_err());
    }

    #[test]
    fn status_fields() {
        let mut g = vec![99];
        let s = parse_status(STATUS, &mut g).unwrap();
        assert_eq!(g, vec![4, 27, 100]);
        assert_eq!((s.tgid, s.tracer_pid), (1405, 77));
        assert_eq!(s.uid, [1000, 1001, 1002, 1003]);
        assert_eq!(s.gid, [100, 101, 102, 103]);
        assert_eq!(
            s.caps,
            [0, 0x1ff_ffff_ffff, 0x1ff_ffff_ffff, 0x1ff_ffff_ffff, 0]
        );
        assert!(s.has_mm);
        assert_eq!(s.vm_kb[Vm::Size as usize], 8728);
        assert_eq!(s.vm_kb[Vm::Pte as usize], 56);
        assert_eq!((s.nvcsw, s.nivcsw), (150, 3));
        assert_eq!(s.sig, [0x100, 0x4000, 0x1_0000, 0x38_4004, 0x4b81_3efb]);
        assert_eq!(s.ns_levels, 2);
        assert_eq!((s.ns_ids.0[0][0], s.ns_ids.0[1][0]), (1405, 1));
    }

    #[test]
    fn status_of_a_kernel_thread_has_no_mm() {
        let kthread = b"Name:\tkthreadd\nTgid:\t2\nTracerPid:\t0\nUid:\t0\t0\t0\t0\n\
            Gid:\t0\t0\t0\t0\nGroups:\t\nNSpid:\t2\n";
        let mut g = Vec::new();
        let s = parse_status(kthread, &mut g).unwrap();
        assert!(!s.has_mm);
        assert!(g.is_empty());
        assert!(parse_status(b"Name:\tx\n", &mut g).is_err());
        assert!(parse_status(b"Uid:\t1\t2\n", &mut g).is_err());
    }

    #[test]
    fn status_prefix_stops_after_the_key() {
        let mut g = Vec::new();
        let s = parse_status_until(STATUS, &mut g, Some(b"Uid")).unwrap();
        assert_eq!((s.tgid, s.tracer_pid, s.uid[0]), (1405, 77, 1000));
        assert_eq!((s.gid, s.has_mm, s.nvcsw), ([0; 4], false, 0));
    }
    #[test]
    fn kthreadd_as_captured() {
        let st = parse_stat(include_bytes!("../fixtures/linux-6.18/stat_kthreadd")).unwrap();
        assert_eq!(
            (st.pid, st.comm(), st.state, st.ppid),
            (2, &b"kthreadd"[..], b'S', 0)
        );
        assert_eq!((st.tty_nr, st.tpgid, st.num_threads), (0, -1, 1));
        assert_eq!(st.flags & 0x0020_0000, 0x0020_0000, "PF_KTHREAD");
        let mut g = vec![1];
        let s = parse_status(
            include_bytes!("../fixtures/linux-6.18/status_kthreadd"),
            &mut g,
        )
        .unwrap();
        assert_eq!((s.tgid, s.uid, s.has_mm), (2, [0; 4], false));
        assert!(g.is_empty());
        assert_eq!((s.ns_levels, s.ns_ids.0[0][0]), (1, 2));
    }

    #[test]
    fn children_lists_pids_and_skips_junk() {
        let v: Vec<u32> = parse_children(b"4242 17 99999 \n").collect();
        assert_eq!(v, [4242, 17, 99999]);
        assert_eq!(parse_children(b"").count(), 0);
        let v: Vec<u32> = parse_children(b"1  x 4294967296 2").collect();
        assert_eq!(v, [1, 2]);
    }

    #[test]
    fn cgroup_v2_paths_as_procps_reads_them() {
        let v: Vec<&[u8]> =
            cgroup_v2_paths(include_bytes!("../fixtures/linux-6.18/cgroup")).collect();
        assert_eq!(v, [&b"/"[..]]);
        // A path with spaces; NUL ends a line too; the first empty line ends the list.
        let v: Vec<&[u8]> =
            cgroup_v2_paths(b"1:cpu:/\n0::/a b.scope\x000::/c\n\n0::/not/read\n").collect();
        assert_eq!(v, [&b"/a b.scope"[..], b"/c"]);
        assert_eq!(cgroup_v2_paths(b"").count(), 0);
    }

    #[test]
    fn cgroup_v1_hierarchies_are_told_from_the_unified_one() {
        let h = |v1, unified| CgroupHierarchies { v1, unified };
        assert_eq!(
            cgroup_hierarchies(b"0::/user.slice/a.scope\n"),
            h(false, true)
        );
        assert_eq!(cgroup_hierarchies(b""), h(false, false));
        let hybrid = b"12:pids:/x\n1:name=systemd:/x\n0::/x\n";
        assert_eq!(cgroup_hierarchies(hybrid), h(true, true));
        assert_eq!(cgroup_hierarchies(b"1:cpu,cpuacct:/\n"), h(true, false));
    }
}
