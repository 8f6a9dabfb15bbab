//! Rendering decoded tasks as text (one block per task) or JSON Lines (one object per task).
//!
//! Both formats print the same fields under the same names: each group's fields are listed
//! once ([`base_fields`], [`cred_fields`], ...) and each renderer walks those lists. The JSON
//! shape is documented field by field in docs/JSON.md (a test keeps the two in step).
//!
//! Names, command lines and mapping paths are bytes, not text. Text output escapes them
//! (`\n`, `\t`, `\\`, `\x20` for a space, `\xNN` for anything not printable ASCII). JSON output
//! keeps them exactly, as ripgrep's JSON printer does: a JSON string when the bytes are valid
//! UTF-8, else an object `{"bytes": "<base64>"}` (standard alphabet, padded).

use std::borrow::Cow;
use std::io::{self, Write};

use base64::Engine as _;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use taskdiag_procfs::parse::stack_frames;
use taskdiag_proto::task::{
    Base, Cgroup, Cred, Event, Files, Ns, Paths, Sched, Security, Task, Vma,
};
use taskdiag_proto::{
    state_char, BackendId, DelayRec, Group, IoRec, SignalRec, StatRec, StatmRec, VmaStatRec,
};

/// Renders a stream's events.
pub struct Renderer {
    json: bool,
    done_error: i32,
}

impl Renderer {
    /// A renderer of text, or of JSON Lines when `json`.
    pub fn new(json: bool) -> Self {
        Renderer {
            json,
            done_error: 0,
        }
    }

    /// The DONE message's error (0 if none or not seen).
    pub fn done_error(&self) -> i32 {
        self.done_error
    }

    /// Writes one event: a header line (text), one task, or the DONE line (text).
    pub fn event(&mut self, w: &mut dyn Write, ev: &Event) -> io::Result<()> {
        match ev {
            Event::Start(s) if !self.json => {
                let b = BackendId::from_u16(s.backend).map_or("?", |b| b.name());
                writeln!(
                    w,
                    "# taskdiag stream v{} backend {b} show_flags {:#x}",
                    s.version, s.show_flags
                )
            }
            Event::Start(_) => Ok(()),
            Event::Task(t) if self.json => json_line(w, &JsonTask(t)),
            Event::Task(t) => text_task(w, t),
            Event::Done(d) => {
                self.done_error = d.error;
                if !self.json {
                    writeln!(w, "# done: {} tasks, error {}", d.tasks, d.error)?;
                }
                Ok(())
            }
        }
    }
}

/// One value, as both renderers print it.
#[derive(Debug, Clone)]
pub(crate) enum Val<'a> {
    /// A number.
    Int(i128),
    /// A yes/no property.
    Bool(bool),
    /// A bit set printed in hex in text (`0x…`), a number in JSON.
    Flags(u64),
    /// A 64-bit capability set: 16 hex digits in both formats (a JSON string, since JSON
    /// numbers above 2^53 lose precision in most readers).
    Mask(u64),
    /// One letter (the task state).
    Char(char),
    /// Bytes (names, paths).
    Bytes(&'a [u8]),
    /// A list of ids (supplementary groups, a task's pids in nested namespaces).
    Ids(Cow<'a, [u32]>),
    /// Text made here (a mapping's permissions and device).
    Text(String),
    /// A resource limit: `unlimited` (text) / `"unlimited"` (JSON) for RLIM_INFINITY.
    Limit(u64),
    /// Lines of bytes (a cgroup file's hierarchies): a JSON array, comma-separated in text.
    Lines(Vec<&'a [u8]>),
}

/// A group's fields in order.
pub(crate) type Fields<'a> = Vec<(&'static str, Val<'a>)>;

/// BASE.
pub(crate) fn base_fields(b: &Base) -> Fields<'_> {
    let r = &b.rec;
    vec![
        ("ppid", Val::Int(r.ppid.into())),
        ("tpid", Val::Int(r.tpid.into())),
        ("sid", Val::Int(r.sid.into())),
        ("pgid", Val::Int(r.pgid.into())),
        ("tty_nr", Val::Int(r.tty_nr.into())),
        ("tpgid", Val::Int(r.tpgid.into())),
        ("state", Val::Char(state_char(r.state))),
        ("task_flags", Val::Flags(r.task_flags.into())),
        (
            "kthread",
            Val::Bool(r.flags & taskdiag_proto::BASE_F_KTHREAD != 0),
        ),
        (
            "leader",
            Val::Bool(r.flags & taskdiag_proto::BASE_F_LEADER != 0),
        ),
        ("start_time_ns", Val::Int(r.start_time_ns.into())),
        ("comm", Val::Bytes(&b.comm)),
    ]
}

/// CRED.
pub(crate) fn cred_fields(c: &Cred) -> Fields<'_> {
    let r = &c.rec;
    vec![
        ("uid", Val::Int(r.uid.into())),
        ("euid", Val::Int(r.euid.into())),
        ("suid", Val::Int(r.suid.into())),
        ("fsuid", Val::Int(r.fsuid.into())),
        ("gid", Val::Int(r.gid.into())),
        ("egid", Val::Int(r.egid.into())),
        ("sgid", Val::Int(r.sgid.into())),
        ("fsgid", Val::Int(r.fsgid.into())),
        ("groups", Val::Ids(Cow::Borrowed(&c.groups))),
        ("cap_inheritable", Val::Mask(r.cap_inheritable)),
        ("cap_permitted", Val::Mask(r.cap_permitted)),
        ("cap_effective", Val::Mask(r.cap_effective)),
        ("cap_bset", Val::Mask(r.cap_bset)),
        ("cap_ambient", Val::Mask(r.cap_ambient)),
    ]
}

/// STAT.
pub(crate) fn stat_fields(s: &StatRec) -> Fields<'static> {
    vec![
        ("minflt", Val::Int(s.minflt.into())),
        ("cminflt", Val::Int(s.cminflt.into())),
        ("majflt", Val::Int(s.majflt.into())),
        ("cmajflt", Val::Int(s.cmajflt.into())),
        ("utime_ns", Val::Int(s.utime_ns.into())),
        ("stime_ns", Val::Int(s.stime_ns.into())),
        ("cutime_ns", Val::Int(s.cutime_ns.into())),
        ("cstime_ns", Val::Int(s.cstime_ns.into())),
        ("nvcsw", Val::Int(s.nvcsw.into())),
        ("nivcsw", Val::Int(s.nivcsw.into())),
        ("threads", Val::Int(s.threads.into())),
        ("priority", Val::Int(s.priority.into())),
        ("nice", Val::Int(s.nice.into())),
        ("policy", Val::Int(s.policy.into())),
        ("rt_priority", Val::Int(s.rt_priority.into())),
        ("processor", Val::Int(s.processor.into())),
    ]
}

/// SIGNAL (masks as /proc/PID/status prints them).
pub(crate) fn signal_fields(s: &SignalRec) -> Fields<'static> {
    vec![
        ("pending", Val::Mask(s.pending)),
        ("shared_pending", Val::Mask(s.shared_pending)),
        ("blocked", Val::Mask(s.blocked)),
        ("ignored", Val::Mask(s.ignored)),
        ("caught", Val::Mask(s.caught)),
    ]
}

/// NS: each namespace link that exists (by its name in /proc/PID/ns), `hidden` when they are
/// withheld, then the ids at each pid namespace level as status NSpid, NStgid, NSpgid, NSsid.
pub(crate) fn ns_fields(n: &Ns) -> Fields<'static> {
    let mut f: Fields = Ns::NAMES
        .iter()
        .zip(n.inodes())
        .filter(|&(_, ino)| ino != 0)
        .map(|(&name, ino)| (name, Val::Int(ino.into())))
        .collect();
    f.push((
        "hidden",
        Val::Bool(n.rec.flags & taskdiag_proto::NS_F_HIDDEN != 0),
    ));
    let col = |get: fn(&taskdiag_proto::NsIdsRec) -> u32| {
        Val::Ids(Cow::Owned(n.ids.iter().map(get).collect()))
    };
    f.push(("nspid", col(|l| l.pid)));
    f.push(("nstgid", col(|l| l.tgid)));
    f.push(("nspgid", col(|l| l.pgid)));
    f.push(("nssid", col(|l| l.sid)));
    f
}

/// FILES: the descriptor count (absent where withheld, with `fds_hidden`), then each limit
/// as `<name>_soft` and `<name>_hard` ([`Val::Limit`]: a number, or `unlimited`).
pub(crate) fn files_fields(f: &Files) -> Fields<'static> {
    let mut v: Fields = Vec::with_capacity(2 + 2 * f.limits.len());
    if f.rec.flags & taskdiag_proto::FILES_F_FDS_HIDDEN == 0 {
        v.push(("fds", Val::Int(f.rec.fds.into())));
    }
    v.push((
        "fds_hidden",
        Val::Bool(f.rec.flags & taskdiag_proto::FILES_F_FDS_HIDDEN != 0),
    ));
    for (name, l) in LIMIT_KEYS.iter().zip(&f.limits) {
        v.push((name.0, Val::Limit(l.soft)));
        v.push((name.1, Val::Limit(l.hard)));
    }
    v
}

/// CGROUP: the unified hierarchy's id (0: unknown) and path (absent without one), then every
/// line of /proc/PID/cgroup.
pub(crate) fn cgroup_fields(c: &Cgroup) -> Fields<'_> {
    let mut v: Fields = vec![("id", Val::Int(c.rec.id.into()))];
    if let Some(p) = c.unified() {
        v.push(("path", Val::Bytes(p)));
    }
    v.push(("lines", Val::Lines(c.lines().collect())));
    v
}

/// IO (as /proc/PID/io names its counters).
pub(crate) fn io_fields(io: &IoRec) -> Fields<'static> {
    taskdiag_procfs::parse::IO_NAMES
        .iter()
        .zip(io.counters())
        .map(|(&k, n)| (k, Val::Int(n.into())))
        .collect()
}

/// PATHS: `exe`, `cwd`, `root` where readlink resolves them, else `<name>_error` with why.
pub(crate) fn paths_fields(p: &Paths) -> Fields<'_> {
    let mut v = Fields::new();
    for (name, err, path) in [
        ("exe", "exe_error", &p.exe),
        ("cwd", "cwd_error", &p.cwd),
        ("root", "root_error", &p.root),
    ] {
        match path {
            Ok(b) => v.push((name, Val::Bytes(b))),
            Err(e) => v.push((err, Val::Text(errno_text(i32::from(*e))))),
        }
    }
    v
}

/// SCHED: the number files, the autogroup (absent where the kernel has none), wchan, syscall
/// (absent where withheld, with `syscall_hidden`) and the affinity lists.
pub(crate) fn sched_fields(s: &Sched) -> Fields<'_> {
    let r = &s.rec;
    let mut v: Fields = vec![
        ("oom_score", Val::Int(r.oom_score.into())),
        ("oom_score_adj", Val::Int(r.oom_score_adj.into())),
        ("loginuid", Val::Int(r.loginuid.into())),
        ("sessionid", Val::Int(r.sessionid.into())),
    ];
    if r.flags & taskdiag_proto::SCHED_F_NO_AUTOGROUP == 0 {
        v.push(("autogroup", Val::Int(r.autogroup.into())));
        v.push(("autogroup_nice", Val::Int(r.autogroup_nice.into())));
    }
    v.push(("wchan", Val::Bytes(&s.wchan)));
    let hidden = r.flags & taskdiag_proto::SCHED_F_SYSCALL_HIDDEN != 0;
    if !hidden {
        v.push(("syscall", Val::Bytes(&s.syscall)));
    }
    v.push(("syscall_hidden", Val::Bool(hidden)));
    v.push(("cpus_allowed", Val::Bytes(&s.cpus_allowed)));
    v.push(("mems_allowed", Val::Bytes(&s.mems_allowed)));
    v
}

/// SECURITY: seccomp mode and filters, no_new_privs, and the label (`label_error` where
/// /proc/PID/attr/current cannot be read: EINVAL without a security module).
pub(crate) fn security_fields(s: &Security) -> Fields<'_> {
    let r = &s.rec;
    let mut v: Fields = vec![
        ("seccomp", Val::Int(r.seccomp.into())),
        ("seccomp_filters", Val::Int(r.seccomp_filters.into())),
        ("no_new_privs", Val::Bool(r.no_new_privs != 0)),
    ];
    match r.label_errno {
        0 => v.push(("label", Val::Bytes(&s.label))),
        e => v.push(("label_error", Val::Text(errno_text(i32::from(e))))),
    }
    v
}

/// DELAY: schedstat's three numbers and stat's block I/O ticks, then, where they were read
/// (`counters`), the delay-accounting totals (ns) and counts.
pub(crate) fn delay_fields(d: &DelayRec) -> Fields<'static> {
    let mut v: Fields = vec![
        ("run_ns", Val::Int(d.run_ns.into())),
        ("wait_ns", Val::Int(d.wait_ns.into())),
        ("timeslices", Val::Int(d.timeslices.into())),
        ("blkio_ticks", Val::Int(d.blkio_ticks.into())),
    ];
    let counters = d.flags & taskdiag_proto::DELAY_F_COUNTERS != 0;
    v.push(("counters", Val::Bool(counters)));
    if counters {
        for (k, n) in d.named_pairs() {
            v.push((k, Val::Int(n.into())));
        }
    }
    v
}

/// JSON and text names of the limits, soft and hard, in RLIMIT_* order.
const LIMIT_KEYS: [(&str, &str); taskdiag_proto::FILES_NLIMITS] = [
    ("cpu_soft", "cpu_hard"),
    ("fsize_soft", "fsize_hard"),
    ("data_soft", "data_hard"),
    ("stack_soft", "stack_hard"),
    ("core_soft", "core_hard"),
    ("rss_soft", "rss_hard"),
    ("nproc_soft", "nproc_hard"),
    ("nofile_soft", "nofile_hard"),
    ("memlock_soft", "memlock_hard"),
    ("as_soft", "as_hard"),
    ("locks_soft", "locks_hard"),
    ("sigpending_soft", "sigpending_hard"),
    ("msgqueue_soft", "msgqueue_hard"),
    ("nice_soft", "nice_hard"),
    ("rtprio_soft", "rtprio_hard"),
    ("rttime_soft", "rttime_hard"),
];

/// STATM (bytes).
pub(crate) fn statm_fields(s: &StatmRec) -> Fields<'static> {
    vec![
        ("vm_size", Val::Int(s.vm_size.into())),
        ("vm_peak", Val::Int(s.vm_peak.into())),
        ("rss_anon", Val::Int(s.rss_anon.into())),
        ("rss_file", Val::Int(s.rss_file.into())),
        ("rss_shmem", Val::Int(s.rss_shmem.into())),
        ("rss_peak", Val::Int(s.rss_peak.into())),
        ("swap", Val::Int(s.swap.into())),
        ("text", Val::Int(s.text.into())),
        ("lib", Val::Int(s.lib.into())),
        ("data", Val::Int(s.data.into())),
        ("stack", Val::Int(s.stack.into())),
        ("locked", Val::Int(s.locked.into())),
        ("pinned", Val::Int(s.pinned.into())),
        ("page_tables", Val::Int(s.page_tables.into())),
        ("code_start", Val::Int(s.code_start.into())),
        ("code_end", Val::Int(s.code_end.into())),
        ("stack_start", Val::Int(s.stack_start.into())),
    ]
}

/// VMA_STAT counters of one mapping, by their smaps names (bytes).
pub(crate) fn vma_stat_fields(s: &VmaStatRec) -> Fields<'static> {
    vec![
        ("rss", Val::Int(s.rss.into())),
        ("pss", Val::Int(s.pss.into())),
        ("pss_dirty", Val::Int(s.pss_dirty.into())),
        ("shared_clean", Val::Int(s.shared_clean.into())),
        ("shared_dirty", Val::Int(s.shared_dirty.into())),
        ("private_clean", Val::Int(s.private_clean.into())),
        ("private_dirty", Val::Int(s.private_dirty.into())),
        ("referenced", Val::Int(s.referenced.into())),
        ("anonymous", Val::Int(s.anonymous.into())),
        ("anon_huge", Val::Int(s.anon_huge.into())),
        ("swap", Val::Int(s.swap.into())),
        ("swap_pss", Val::Int(s.swap_pss.into())),
        ("locked", Val::Int(s.locked.into())),
    ]
}

/// One mapping: its /proc/PID/maps fields, then the VMA_STAT counters when present. (Text
/// output prints the maps line itself instead of the first fields; see [`text_task`].)
pub(crate) fn vma_fields(m: &Vma) -> Fields<'_> {
    let r = &m.rec;
    let perms = taskdiag_proto::vma_flags::perms(r.vm_flags);
    let mut f = vec![
        ("start", Val::Int(r.start.into())),
        ("end", Val::Int(r.end.into())),
        (
            "perms",
            Val::Text(String::from_utf8_lossy(&perms).into_owned()),
        ),
        ("flags", Val::Int(r.vm_flags.into())),
        ("flags_known", Val::Int(r.vm_flags_known.into())),
        ("pgoff", Val::Int(r.pgoff.into())),
        (
            "dev",
            Val::Text(format!("{:02x}:{:02x}", r.dev_major, r.dev_minor)),
        ),
        ("inode", Val::Int(r.inode.into())),
        ("name", Val::Bytes(&m.name)),
    ];
    if let Some(st) = &m.stat {
        f.extend(vma_stat_fields(st));
    }
    f
}

/// The arguments of a NUL-separated command line; a final NUL ends the last argument rather
/// than starting one.
fn split_cmdline(c: &[u8]) -> impl Iterator<Item = &[u8]> {
    let c = c.strip_suffix(b"\0").unwrap_or(c);
    let empty = c.is_empty();
    c.split(|&b| b == 0).filter(move |_| !empty)
}

/// One indented line `  name: item item ...`, each item escaped.
fn text_list<'a>(
    w: &mut dyn Write,
    name: &str,
    items: impl Iterator<Item = &'a [u8]>,
) -> io::Result<()> {
    write!(w, "  {name}:")?;
    for item in items {
        w.write_all(b" ")?;
        escape_text(w, item)?;
    }
    writeln!(w)
}

/// The message of a group error.
fn errno_text(errno: i32) -> String {
    taskdiag_proto::errno_text(errno)
}

// ---- text ----

fn escape_text(w: &mut dyn Write, b: &[u8]) -> io::Result<()> {
    for &c in b {
        match c {
            b'\n' => w.write_all(b"\\n")?,
            b'\t' => w.write_all(b"\\t")?,
            b'\\' => w.write_all(b"\\\\")?,
            b' ' => w.write_all(b"\\x20")?,
            0x21..=0x7e => w.write_all(&[c])?,
            _ => write!(w, "\\x{c:02x}")?,
        }
    }
    Ok(())
}

fn text_val(w: &mut dyn Write, v: &Val) -> io::Result<()> {
    match *v {
        Val::Int(n) => write!(w, "{n}"),
        Val::Bool(b) => write!(w, "{b}"),
        Val::Flags(f) => write!(w, "{f:#x}"),
        Val::Mask(m) => write!(w, "{m:016x}"),
        Val::Char(c) => write!(w, "{c}"),
        Val::Bytes(b) => escape_text(w, b),
        Val::Ids(ref ids) if ids.is_empty() => write!(w, "-"),
        Val::Ids(ref ids) => {
            for (i, g) in ids.iter().enumerate() {
                write!(w, "{}{g}", if i > 0 { "," } else { "" })?;
            }
            Ok(())
        }
        Val::Text(ref t) => escape_text(w, t.as_bytes()),
        Val::Limit(u64::MAX) => write!(w, "unlimited"),
        Val::Limit(n) => write!(w, "{n}"),
        Val::Lines(ref lines) if lines.is_empty() => write!(w, "-"),
        Val::Lines(ref lines) => {
            for (i, l) in lines.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                escape_text(w, l)?;
            }
            Ok(())
        }
    }
}

/// ` name value` for each field.
fn text_fields(w: &mut dyn Write, f: &Fields) -> io::Result<()> {
    for (k, v) in f {
        write!(w, " {k} ")?;
        text_val(w, v)?;
    }
    Ok(())
}

/// A task as text: `pid N tgid N` and BASE on the first line, then one indented line per
/// group (`  cred: uid 0 …`), one per mapping (`  vma: <its /proc/PID/maps line> rss …`), and
/// one per group that could not be read.
fn text_task(w: &mut dyn Write, t: &Task) -> io::Result<()> {
    write!(w, "pid {} tgid {}", t.pid, t.tgid)?;
    if let Some(b) = &t.base {
        text_fields(w, &base_fields(b))?;
    }
    writeln!(w)?;
    let groups: [(&str, Option<Fields>); 12] = [
        ("cred", t.cred.as_ref().map(cred_fields)),
        ("stat", t.stat.as_ref().map(stat_fields)),
        ("statm", t.statm.as_ref().map(statm_fields)),
        ("signal", t.signal.as_ref().map(signal_fields)),
        ("ns", t.ns.as_ref().map(ns_fields)),
        ("files", t.files.as_ref().map(files_fields)),
        ("cgroup", t.cgroup.as_ref().map(cgroup_fields)),
        ("io", t.io.as_ref().map(io_fields)),
        ("paths", t.paths.as_ref().map(paths_fields)),
        ("sched", t.sched.as_ref().map(sched_fields)),
        ("security", t.security.as_ref().map(security_fields)),
        ("delay", t.delay.as_ref().map(delay_fields)),
    ];
    for (name, f) in groups {
        if let Some(f) = f {
            write!(w, "  {name}:")?;
            text_fields(w, &f)?;
            writeln!(w)?;
        }
    }
    if let Some(v) = &t.vmas {
        // /proc/PID/maps lines (the name as the kernel prints it), then smaps counters.
        let mut b = Vec::new();
        taskdiag_procfs::maps::format_maps(v, &mut b);
        for (line, m) in b.split(|&c| c == b'\n').zip(v) {
            w.write_all(b"  vma: ")?;
            w.write_all(line)?;
            if let Some(st) = &m.stat {
                text_fields(w, &vma_stat_fields(st))?;
            }
            writeln!(w)?;
        }
    }
    if let Some(c) = &t.cmdline {
        text_list(w, "cmdline", split_cmdline(c))?;
    }
    if let Some(e) = &t.environ {
        text_list(w, "environ", split_cmdline(e))?;
    }
    if let Some(k) = &t.kstack {
        text_list(w, "kstack", stack_frames(k))?;
    }
    if let Some(c) = &t.wchan {
        text_list(w, "wchan", std::iter::once(&c[..]))?;
    }
    for e in &t.errors {
        let g = Group::from_u16(e.group).map_or("?", |g| g.name());
        writeln!(w, "  {g}: unavailable: {}", errno_text(e.errno))?;
    }
    Ok(())
}

// ---- JSON ----

/// Bytes as JSON: a string when they are UTF-8, else `{"bytes": base64}`.
struct JsonBytes<'a>(&'a [u8]);

impl Serialize for JsonBytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(
                    "bytes",
                    &base64::engine::general_purpose::STANDARD.encode(self.0),
                )?;
                m.end()
            }
        }
    }
}

impl Serialize for Val<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Val::Int(n) => s.serialize_i128(n),
            Val::Bool(b) => s.serialize_bool(b),
            Val::Flags(f) => s.serialize_u64(f),
            Val::Mask(m) => s.serialize_str(&format!("{m:016x}")),
            Val::Char(c) => s.serialize_char(c),
            Val::Bytes(b) => JsonBytes(b).serialize(s),
            Val::Ids(ref ids) => ids.serialize(s),
            Val::Text(ref t) => s.serialize_str(t),
            Val::Limit(u64::MAX) => s.serialize_str("unlimited"),
            Val::Limit(n) => s.serialize_u64(n),
            Val::Lines(ref lines) => {
                let mut seq = s.serialize_seq(Some(lines.len()))?;
                for l in lines {
                    seq.serialize_element(&JsonBytes(l))?;
                }
                seq.end()
            }
        }
    }
}

/// A field list as a JSON object.
struct JsonObject<'a>(&'a Fields<'a>);

impl Serialize for JsonObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// One mapping as a JSON object (also `taskdiag maps --format json`'s lines).
pub(crate) struct JsonVma<'a>(pub &'a Vma);

impl Serialize for JsonVma<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        JsonObject(&vma_fields(self.0)).serialize(s)
    }
}

/// Byte strings (the arguments of a command line, the frames of a stack) as a JSON array of
/// [`JsonBytes`]; the closure gives them anew for each serialization.
struct JsonList<F>(F);

impl<'a, F, I> Serialize for JsonList<F>
where
    F: Fn() -> I,
    I: Iterator<Item = &'a [u8]>,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for item in (self.0)() {
            seq.serialize_element(&JsonBytes(item))?;
        }
        seq.end()
    }
}

/// A task as one JSON object: `pid`, `tgid`, then one member per group present (`base`,
/// `cred`, `stat`, `statm` objects; `vma` an array of objects; `cmdline` an array of
/// arguments) and `errors` (group name → message) when a group could not be read.
pub(crate) struct JsonTask<'a>(pub &'a Task);

impl Serialize for JsonTask<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("pid", &t.pid)?;
        m.serialize_entry("tgid", &t.tgid)?;
        if let Some(b) = &t.base {
            m.serialize_entry("base", &JsonObject(&base_fields(b)))?;
        }
        if let Some(c) = &t.cred {
            m.serialize_entry("cred", &JsonObject(&cred_fields(c)))?;
        }
        if let Some(st) = &t.stat {
            m.serialize_entry("stat", &JsonObject(&stat_fields(st)))?;
        }
        if let Some(st) = &t.statm {
            m.serialize_entry("statm", &JsonObject(&statm_fields(st)))?;
        }
        if let Some(sg) = &t.signal {
            m.serialize_entry("signal", &JsonObject(&signal_fields(sg)))?;
        }
        if let Some(n) = &t.ns {
            m.serialize_entry("ns", &JsonObject(&ns_fields(n)))?;
        }
        if let Some(f) = &t.files {
            m.serialize_entry("files", &JsonObject(&files_fields(f)))?;
        }
        if let Some(c) = &t.cgroup {
            m.serialize_entry("cgroup", &JsonObject(&cgroup_fields(c)))?;
        }
        if let Some(io) = &t.io {
            m.serialize_entry("io", &JsonObject(&io_fields(io)))?;
        }
        if let Some(p) = &t.paths {
            m.serialize_entry("paths", &JsonObject(&paths_fields(p)))?;
        }
        if let Some(s) = &t.sched {
            m.serialize_entry("sched", &JsonObject(&sched_fields(s)))?;
        }
        if let Some(s) = &t.security {
            m.serialize_entry("security", &JsonObject(&security_fields(s)))?;
        }
        if let Some(d) = &t.delay {
            m.serialize_entry("delay", &JsonObject(&delay_fields(d)))?;
        }
        if let Some(v) = &t.vmas {
            let v: Vec<JsonVma> = v.iter().map(JsonVma).collect();
            m.serialize_entry("vma", &v)?;
        }
        if let Some(c) = &t.cmdline {
            m.serialize_entry("cmdline", &JsonList(|| split_cmdline(c)))?;
        }
        if let Some(e) = &t.environ {
            m.serialize_entry("environ", &JsonList(|| split_cmdline(e)))?;
        }
        if let Some(k) = &t.kstack {
            m.serialize_entry("kstack", &JsonList(|| stack_frames(k)))?;
        }
        if let Some(c) = &t.wchan {
            m.serialize_entry("wchan", &JsonBytes(c))?;
        }
        if !t.errors.is_empty() {
            let errors: Vec<(&str, String)> = t
                .errors
                .iter()
                .map(|e| {
                    let g = Group::from_u16(e.group).map_or("?", |g| g.name());
                    (g, errno_text(e.errno))
                })
                .collect();
            m.serialize_entry("errors", &JsonErrors(&errors))?;
        }
        m.end()
    }
}

/// Group errors as an object: group name → message.
struct JsonErrors<'a>(&'a [(&'a str, String)]);

impl Serialize for JsonErrors<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Writes `v` as one line of JSON.
pub(crate) fn json_line(w: &mut dyn Write, v: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *w, v).map_err(io::Error::other)?;
    w.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::task::GroupError;
    use taskdiag_proto::{BaseRec, CredRec, VmaRec};

    #[test]
    fn cmdline_splitting() {
        let v: Vec<_> = split_cmdline(b"a\0b c\0").collect();
        assert_eq!(v, vec![&b"a"[..], b"b c"]);
        assert_eq!(split_cmdline(b"").count(), 0);
        // setproctitle(): no trailing NUL.
        let v: Vec<_> = split_cmdline(b"nginx: worker").collect();
        assert_eq!(v, vec![&b"nginx: worker"[..]]);
    }

    fn json(v: &impl Serialize) -> String {
        let mut out = Vec::new();
        json_line(&mut out, v).expect("json");
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    #[test]
    fn json_keeps_every_byte() {
        // UTF-8: a plain string, with JSON's escapes.
        assert_eq!(
            json(&JsonBytes(b"(a) \"b\")\n\x01\xc3\xa9")),
            "\"(a) \\\"b\\\")\\n\\u0001\u{e9}\"\n"
        );
        // Not UTF-8: the exact bytes, base64.
        let raw = b"ab\xff\xfe\0c";
        let got: serde_json::Value = serde_json::from_str(&json(&JsonBytes(raw))).expect("parse");
        let b64 = got["bytes"].as_str().expect("bytes member");
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
            raw
        );
    }

    /// A task with every group, names that are not UTF-8, and an error.
    fn full_task() -> Task {
        Task {
            pid: 7,
            tgid: 5,
            base: Some(Base {
                rec: BaseRec {
                    ppid: 1,
                    tpgid: -1,
                    flags: taskdiag_proto::BASE_F_LEADER,
                    ..BaseRec::default()
                },
                comm: b"w\xffx".to_vec(),
            }),
            cred: Some(Cred {
                rec: CredRec {
                    cap_effective: u64::MAX,
                    ..CredRec::default()
                },
                groups: vec![4, 27],
            }),
            stat: Some(StatRec::default()),
            statm: Some(StatmRec::default()),
            signal: Some(SignalRec {
                blocked: 1 << 9,
                caught: 1 << 63,
                ..SignalRec::default()
            }),
            files: Some(Files {
                rec: taskdiag_proto::FilesRec {
                    fds: 12,
                    flags: 0,
                    nlimits: 16,
                    reserved: 0,
                },
                limits: (0..16)
                    .map(|i| taskdiag_proto::LimitRec {
                        soft: if i == 7 { 1024 } else { u64::MAX },
                        hard: if i == 7 { 524288 } else { u64::MAX },
                    })
                    .collect(),
            }),
            ns: Some(Ns {
                rec: taskdiag_proto::NsRec {
                    pid: 4026532301,
                    pid_for_children: 4026532301,
                    mnt: 4026531832,
                    net: 4026531833,
                    ipc: 4026531839,
                    uts: 4026531838,
                    user: 4026531837,
                    cgroup: 4026531835,
                    time: 4026531834,
                    time_for_children: 4026531834,
                    flags: 0,
                    levels: 2,
                },
                ids: vec![
                    taskdiag_proto::NsIdsRec {
                        pid: 900,
                        tgid: 900,
                        pgid: 0,
                        sid: 0,
                    },
                    taskdiag_proto::NsIdsRec {
                        pid: 1,
                        tgid: 1,
                        pgid: 0,
                        sid: 0,
                    },
                ],
            }),
            vmas: Some(vec![Vma {
                rec: VmaRec {
                    start: 0x1000,
                    end: 0x2000,
                    ..VmaRec::default()
                },
                stat: Some(VmaStatRec::default()),
                name: b"/tmp/\xfe".to_vec(),
            }]),
            cmdline: Some(b"a\0b\xff\0".to_vec()),
            cgroup: Some(Cgroup {
                rec: taskdiag_proto::CgroupRec {
                    id: 4242,
                    ..Default::default()
                },
                text: b"1:name=systemd:/user.slice\n0::/user.slice/x\xff.scope\n".to_vec(),
            }),
            io: Some(IoRec {
                rchar: 100,
                write_bytes: 4096,
                ..IoRec::default()
            }),
            paths: Some(Paths {
                exe: Ok(b"/usr/bin/x (deleted)".to_vec()),
                cwd: Err(libc::EACCES as u8),
                root: Ok(b"/".to_vec()),
            }),
            environ: Some(b"A=1\0B=\xfe\0".to_vec()),
            kstack: Some(b"[<0>] do_nanosleep+0x6b/0x190\n[<0>] x+0x1/0x2 [m\xff]\n".to_vec()),
            wchan: Some(b"do_nanosleep".to_vec()),
            sched: Some(Sched {
                rec: taskdiag_proto::SchedRec {
                    oom_score: 666,
                    loginuid: u32::MAX,
                    autogroup: 4,
                    ..Default::default()
                },
                wchan: b"do_select".to_vec(),
                syscall: b"7 0x3 0x7ffd".to_vec(),
                cpus_allowed: b"0-1".to_vec(),
                mems_allowed: b"0".to_vec(),
            }),
            security: Some(Security {
                rec: taskdiag_proto::SecurityRec {
                    seccomp: 2,
                    ..Default::default()
                },
                label: b"unconfined\n".to_vec(),
            }),
            delay: Some(DelayRec {
                run_ns: 5,
                flags: taskdiag_proto::DELAY_F_COUNTERS,
                ..Default::default()
            }),
            errors: vec![GroupError {
                group: Group::Cmdline as u16,
                errno: libc::EACCES,
            }],
            ..Task::default()
        }
    }

    /// Every member of the JSON of `v`, as dotted paths (`base.comm`, `vma[].rss`).
    fn paths(v: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) if !m.contains_key("bytes") => {
                for (k, x) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.push(p.clone());
                    if !(prefix.is_empty() && k == "errors") {
                        paths(x, &p, out);
                    }
                }
            }
            serde_json::Value::Array(a) => {
                if let Some(x) = a.first() {
                    paths(x, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }

    /// docs/JSON.md lists every member `dump --format json` prints (its table rows start with
    /// a member path in backquotes), and nothing else.
    #[test]
    fn the_json_reference_lists_every_member() {
        let doc = include_str!("../../../docs/JSON.md");
        let mut documented: Vec<String> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_string)
            .collect();
        documented.sort();
        // The full task, and the same with its resolved paths unresolved and the other way
        // round (`<name>_error` instead of `<name>`).
        let mut unresolved = full_task();
        unresolved.security = Some(Security {
            rec: taskdiag_proto::SecurityRec {
                label_errno: libc::EINVAL as u16,
                ..Default::default()
            },
            label: Vec::new(),
        });
        let e = Err(libc::ENOENT as u8);
        unresolved.paths = Some(Paths {
            exe: e.clone(),
            cwd: Ok(b"/tmp".to_vec()),
            root: e,
        });
        let mut printed = Vec::new();
        for t in [full_task(), unresolved] {
            let v: serde_json::Value = serde_json::from_str(&json(&JsonTask(&t))).expect("parse");
            paths(&v, "", &mut printed);
        }
        printed.sort();
        printed.dedup();
        assert_eq!(
            printed, documented,
            "docs/JSON.md and the JSON output differ"
        );
    }

    #[test]
    fn text_and_json_name_the_same_fields() {
        let t = full_task();
        let mut text = Vec::new();
        text_task(&mut text, &t).expect("text");
        // Lossy only for the maps line, which carries the path as the kernel prints it.
        let text = String::from_utf8_lossy(&text);
        let v: serde_json::Value = serde_json::from_str(&json(&JsonTask(&t))).expect("parse");
        let groups = [
            "base", "cred", "stat", "statm", "signal", "ns", "files", "cgroup", "io", "paths",
            "sched", "security", "delay",
        ];
        for group in groups {
            for k in v[group].as_object().expect(group).keys() {
                assert!(text.contains(&format!(" {k} ")), "text lacks {group}.{k}");
            }
        }
        assert!(text.contains(" comm w\\xffx"));
        assert!(text.contains("  cmdline: a b\\xff\n"));
        assert!(text.contains("  cmdline: unavailable: Permission denied"));
        assert_eq!(v["base"]["comm"]["bytes"], "d/94");
        assert_eq!(v["cmdline"][0], "a");
        assert_eq!(v["cred"]["cap_effective"], "ffffffffffffffff");
        assert_eq!(v["errors"]["cmdline"], "Permission denied (os error 13)");
        assert_eq!(v["ns"]["nspid"], serde_json::json!([900, 1]));
        assert!(text.contains(" net 4026531833 "));
        assert!(text.contains(" nspid 900,1 "));
        assert_eq!(v["files"]["nofile_soft"], 1024);
        assert_eq!(v["files"]["cpu_hard"], "unlimited");
        assert!(text.contains(" fds 12 ") && text.contains(" nofile_hard 524288 "));
        assert_eq!(v["cgroup"]["path"]["bytes"], "L3VzZXIuc2xpY2UveP8uc2NvcGU=");
        assert_eq!(v["cgroup"]["lines"][0], "1:name=systemd:/user.slice");
        assert!(text.contains(" lines 1:name=systemd:/user.slice,0::/user.slice/x\\xff.scope"));
        assert_eq!(v["io"]["write_bytes"], 4096);
        assert_eq!(v["paths"]["exe"], "/usr/bin/x (deleted)");
        assert_eq!(v["paths"]["cwd_error"], "Permission denied (os error 13)");
        assert!(text.contains(" exe /usr/bin/x\\x20(deleted) "));
        assert_eq!(v["environ"][0], "A=1");
        assert_eq!(v["kstack"][0], "do_nanosleep+0x6b/0x190");
        assert!(v["kstack"][1]["bytes"].is_string(), "{}", v["kstack"]);
        assert!(text.contains("  kstack: do_nanosleep+0x6b/0x190 x+0x1/0x2\\x20[m\\xff]\n"));
        assert_eq!(v["wchan"], "do_nanosleep");
        assert!(text.contains("  wchan: do_nanosleep\n"));
        assert!(text.contains("  environ: A=1 B=\\xfe\n"));
        assert_eq!(v["sched"]["loginuid"], 4294967295u32);
        assert_eq!(v["sched"]["syscall"], "7 0x3 0x7ffd");
        assert!(text.contains(" wchan do_select "));
    }
}
