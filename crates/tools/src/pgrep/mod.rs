//! `taskdiag pgrep` and `taskdiag pkill`: procps-ng 4.0.2's process lookup and signalling on
//! one batched taskdiag snapshot.
//!
//! procps reads /proc/PID/stat, status and cmdline for every process on every run; these
//! take one snapshot with only the groups the options need (BASE always, CRED only for -u,
//! -U and -G, CMDLINE only for -f with a pattern or -a, NS only for --ns, CGROUP only for
//! --cgroup), then select exactly
//! as procps does:
//! the same regular expressions (the C library's, see [`regex`]), the same escaped names and
//! command lines, the same -n/-o tie-breaking, the same output and exit statuses, including
//! procps 4.0.2's quirks (see [`args`]). Only -t, when the terminal name needs a lookup,
//! reads /proc, and only for the processes that passed every other test.
//!
//! pkill signals through pidfds and never hits a reused pid ([`kill`]).
//!
//! The command line is [`args`]' business; terminal and user names are [`crate::names`]'; the
//! escaping of names and command lines is [`crate::text`]'.

pub mod args;
use crate::signal as kill;
pub mod regex;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::AsRawFd;

use taskdiag::Group;
use taskdiag_procfs::parse::cgroup_v2_paths;

use self::args::{Mode, Opts, Parsed, EXIT_FATAL, EXIT_USAGE, NAMESPACES};
use self::kill::{Holder, Outcome};
use self::regex::Regex;
use crate::names::{Abbrev, Ttys};
use crate::snapshot::{self, Query, Source, Task};
use crate::text;

/// pidfds held open at once by pkill while it checks that their processes are unchanged.
const BATCH: usize = 256;

/// Runs `taskdiag pgrep`; returns the exit status.
pub fn pgrep_main(args: &[OsString]) -> i32 {
    run(Mode::Pgrep, args)
}

/// Runs `taskdiag pkill`; returns the exit status.
pub fn pkill_main(args: &[OsString]) -> i32 {
    run(Mode::Pkill, args)
}

/// Runs `taskdiag pidwait`; returns the exit status.
pub fn pidwait_main(args: &[OsString]) -> i32 {
    run(Mode::Pidwait, args)
}

/// A selected task.
#[derive(Debug, Clone)]
struct Sel {
    /// Its id (a thread id with -w).
    pid: u32,
    /// Its process.
    tgid: u32,
    /// What -l, -a or pkill -e print for it.
    text: Option<Vec<u8>>,
}

/// The namespace inode numbers of a task for the namespaces in `flags`, from its NS group, as
/// procps' stat of /proc/PID/ns/NAME gives them to this caller ([`crate::procvals::ns_inode`]):
/// 0 where it has no such link or stat fails on a withheld one (on Linux 5.10, the inode of the
/// withheld link's directory).
fn ns_ids(t: &Task, flags: u32) -> [u32; 6] {
    let mut ids = [0u32; 6];
    for (i, name) in NAMESPACES.iter().enumerate() {
        if flags & (1 << i) != 0 {
            ids[i] = crate::procvals::ns_inode(t.ns.as_ref(), true, t.pid, name).unwrap_or(0);
        }
    }
    ids
}

/// Whether the cgroup file of a task (its CGROUP group) lists one of `paths` as its cgroup v2
/// path ("0::PATH"), looking at lines until the first empty one, as procps does; false where
/// the file could not be read.
fn in_cgroups(t: &Task, paths: &[Vec<u8>]) -> bool {
    t.cgroup
        .as_ref()
        .is_some_and(|c| cgroup_v2_paths(&c.text).any(|path| paths.iter().any(|p| p == path)))
}

/// procps' "long simple match" test: more than 15 bytes and no `|` or `[`.
fn is_long_match(p: &[u8]) -> bool {
    p.len() > 15 && !p.iter().any(|&c| c == b'|' || c == b'[')
}

/// The parent of each process in the snapshot.
fn parents(tasks: &[Task]) -> HashMap<u32, u32> {
    tasks
        .iter()
        .filter(|t| t.pid == t.tgid)
        .filter_map(|t| t.base.as_ref().map(|b| (t.pid, b.rec.ppid)))
        .collect()
}

/// The ancestors of `me`, nearest first (procps' -A list, from the same snapshot).
fn ancestors(tasks: &[Task], me: u32) -> HashSet<u32> {
    let parent = parents(tasks);
    let mut out = HashSet::new();
    let mut cur = me;
    while let Some(&pp) = parent.get(&cur) {
        if !out.insert(pp) {
            break;
        }
        cur = pp;
    }
    out
}

/// Everything selection needs besides the options.
struct Selector<'a> {
    o: &'a Opts,
    re: Option<&'a Regex>,
    utf8: bool,
    ns_ref: Option<[u32; 6]>,
    ttys: Ttys,
    /// (uptime seconds, ticks per second) for -O.
    clock: Option<(f64, f64)>,
    ns_per_tick: u64,
    /// Scratch for C strings.
    buf: Vec<u8>,
}

impl Selector<'_> {
    /// Every test but the pattern (procps' `match` before its regexec).
    fn criteria(&mut self, t: &Task) -> bool {
        let o = self.o;
        let Some(base) = t.base.as_ref() else {
            return false;
        };
        let r = &base.rec;
        let has = |l: &Option<Vec<i64>>, v: i64| l.as_ref().is_none_or(|l| l.contains(&v));
        if !has(&o.ppid, i64::from(r.ppid))
            || !has(&o.pid, i64::from(t.tgid))
            || !has(&o.pgrp, i64::from(r.pgid))
            || !has(&o.sid, i64::from(r.sid))
        {
            return false;
        }
        if o.euid.is_some() || o.ruid.is_some() || o.rgid.is_some() {
            let Some(c) = t.cred.as_ref() else {
                return false;
            };
            if !has(&o.euid, i64::from(c.rec.euid))
                || !has(&o.ruid, i64::from(c.rec.uid))
                || !has(&o.rgid, i64::from(c.rec.gid))
            {
                return false;
            }
        }
        if let (true, Some((up, hz))) = (o.older != 0, self.clock) {
            let began = (r.start_time_ns / self.ns_per_tick) as f64 / hz;
            let elapsed = if up >= began { up - began } else { 0.0 };
            if (elapsed as i32) < o.older {
                return false;
            }
        }
        if let Some(states) = &o.runstates {
            let c = taskdiag_proto::state_char(r.state) as u8;
            if !states.contains(&c) {
                return false;
            }
        }
        if let Some(want) = self.ns_ref {
            if ns_ids(t, o.ns_flags) != want {
                return false;
            }
        }
        // The test below reads /proc: only for tasks that passed the others.
        if let Some(terms) = &o.term {
            let name = self.ttys.name(r.tty_nr, t.pid, 63, Abbrev::Dev);
            if !terms.iter().any(|n| n.as_slice() == name.as_bytes()) {
                return false;
            }
        }
        if let Some(paths) = &o.cgroup {
            if !in_cgroups(t, paths) {
                return false;
            }
        }
        true
    }

    /// procps' select_procs over the snapshot, in its order.
    fn select(&mut self, tasks: &[Task], me: u32, skip: &HashSet<u32>) -> Vec<Sel> {
        let o = self.o;
        let mut saved_start: u64 = if o.newest { 0 } else { u64::MAX };
        let mut saved_pid: i64 = if o.oldest { i64::from(i32::MAX) } else { 0 };
        // What procps keeps in its output buffer: it is only refreshed for some tasks, and
        // pkill -e prints whatever it holds (empty at first).
        let mut shown: Vec<u8> = Vec::new();
        let mut list: Vec<Sel> = Vec::new();
        for t in tasks {
            // This command (all its threads) is never selected.
            if t.tgid == me || skip.contains(&t.pid) {
                continue;
            }
            let Some(base) = t.base.as_ref() else {
                continue;
            };
            let start = base.rec.start_time_ns;
            let pid = i64::from(t.pid);
            // With -n (-o), what started before (after) the best so far cannot win.
            let beaten = (o.newest && start < saved_start) || (o.oldest && start > saved_start);
            let mut matched = !beaten && self.criteria(t);
            let zombie = taskdiag_proto::state_char(base.rec.state) == 'Z';
            let mut cmdline: Option<Vec<u8>> = None;
            let mut comm: Option<Vec<u8>> = None;
            let utf8 = self.utf8;
            // Only what is printed is formatted (-l, -a, pkill -e); procps refreshes its
            // buffer in these cases whether or not it prints it.
            let printed = o.long || o.longlong || o.echo;
            if printed && (o.long || o.longlong || (matched && o.pattern.is_some())) {
                shown = if o.longlong {
                    cmdline
                        .get_or_insert_with(|| {
                            text::command_line(t.cmdline.as_deref(), &base.comm, zombie, utf8)
                        })
                        .clone()
                } else {
                    comm.get_or_insert_with(|| text::lib_escape(&base.comm, utf8))
                        .clone()
                };
            }
            if matched {
                if let Some(re) = self.re {
                    let hay: &[u8] = if o.full {
                        cmdline.get_or_insert_with(|| {
                            text::command_line(t.cmdline.as_deref(), &base.comm, zombie, utf8)
                        })
                    } else {
                        comm.get_or_insert_with(|| text::lib_escape(&base.comm, utf8))
                    };
                    if !re.is_match_bytes(hay, &mut self.buf) {
                        matched = false;
                    }
                }
            }
            if matched != o.negate {
                if o.newest {
                    if saved_start == start && saved_pid > pid {
                        continue;
                    }
                    saved_start = start;
                    saved_pid = pid;
                    list.clear();
                }
                if o.oldest {
                    if saved_start == start && saved_pid < pid {
                        continue;
                    }
                    saved_start = start;
                    saved_pid = pid;
                    list.clear();
                }
                let text = (o.long || o.longlong || o.echo).then(|| shown.clone());
                list.push(Sel {
                    pid: t.pid,
                    tgid: t.tgid,
                    text,
                });
            }
        }
        list
    }
}

/// C's `strerror` text for an error (without Rust's "(os error N)").
fn strerror(e: &io::Error) -> String {
    e.raw_os_error()
        .map_or_else(|| e.to_string(), crate::strerror)
}

/// Writes the output; a closed pipe is not an error, others are reported as procps does
/// (exit status 1).
fn emit(prog: &str, out: &[u8]) -> Result<(), i32> {
    let mut so = io::stdout().lock();
    match so.write_all(out).and_then(|()| so.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => {
            crate::warn(prog, format!("write error: {}", strerror(&e)));
            Err(1)
        }
    }
}

fn run(mode: Mode, argv: &[OsString]) -> i32 {
    let utf8 = text::init_locale();
    let o = match args::parse(mode, argv) {
        Parsed::Run(o) => o,
        Parsed::Exit(code) => return code,
    };
    let prog = mode.prog();
    let re = match &o.pattern {
        Some(p) => {
            let pat = if o.exact {
                [&b"^("[..], p, b")$"].concat()
            } else {
                p.clone()
            };
            match Regex::new(&pat, o.icase) {
                Ok(r) => Some(r),
                Err(msg) => {
                    crate::warn(prog, format!("regex error: {msg}"));
                    return EXIT_USAGE;
                }
            }
        }
        None => None,
    };
    if o.ns_pid < 0 {
        crate::warn(prog, "Error reading reference namespace information\n");
        return EXIT_FATAL;
    }
    let mut groups = 0;
    if o.ns_pid > 0 {
        groups |= Group::Ns.flag();
    }
    if o.euid.is_some() || o.ruid.is_some() || o.rgid.is_some() {
        groups |= Group::Cred.flag();
    }
    if (o.full && o.pattern.is_some()) || o.longlong {
        groups |= Group::Cmdline.flag();
    }
    if o.cgroup.is_some() {
        groups |= Group::Cgroup.flag();
    }
    let q = Query {
        threads: o.threads,
        groups,
    };
    let mut source = match Source::open(groups) {
        Ok(s) => s,
        Err(e) => {
            crate::warn(prog, e);
            return EXIT_FATAL;
        }
    };
    let tasks = match source.take(&q) {
        Ok(t) => t,
        Err(e) => {
            crate::warn(prog, e);
            return EXIT_FATAL;
        }
    };
    // The reference: from the snapshot, else (a thread's id without -w, say) on its own; a
    // task that is not there compares as all 0, as in procps.
    let ns_ref = match u32::try_from(o.ns_pid) {
        Ok(0) | Err(_) => None,
        Ok(p) => match tasks.iter().find(|t| t.pid == p) {
            Some(t) => Some(ns_ids(t, o.ns_flags)),
            None => match source.one(p, Group::Ns.flag()) {
                Ok(t) => Some(t.map_or([0; 6], |t| ns_ids(&t, o.ns_flags))),
                Err(e) => {
                    crate::warn(prog, e);
                    return EXIT_FATAL;
                }
            },
        },
    };
    let hz = crate::snapshot::clock_ticks();
    let ns_per_tick = (1_000_000_000 / hz).max(1);
    let clock = if o.older != 0 {
        match snapshot::uptime() {
            Ok(up) => Some((up, hz as f64)),
            Err(e) => {
                crate::warn(prog, e);
                return EXIT_FATAL;
            }
        }
    } else {
        None
    };
    let me = std::process::id();
    let skip = if o.ignore_ancestors {
        ancestors(&tasks, me)
    } else {
        HashSet::new()
    };
    let mut sel = Selector {
        o: &o,
        re: re.as_ref(),
        utf8,
        ns_ref,
        ttys: Ttys::new(),
        clock,
        ns_per_tick,
        buf: Vec::new(),
    };
    let list = sel.select(&tasks, me, &skip);
    if list.is_empty() && !o.full && o.pattern.as_deref().is_some_and(is_long_match) {
        crate::warn(
            prog,
            format!(
                "pattern that searches for process name longer than 15 characters will \
                 result in zero matches\nTry `{prog} -f' option to match against the \
                 complete command line."
            ),
        );
    }
    match mode {
        Mode::Pgrep => {
            let mut out = Vec::new();
            if o.count {
                out.extend_from_slice(format!("{}\n", list.len()).as_bytes());
            } else {
                for (i, s) in list.iter().enumerate() {
                    out.extend_from_slice(s.pid.to_string().as_bytes());
                    if o.long || o.longlong {
                        out.push(b' ');
                        out.extend_from_slice(s.text.as_deref().unwrap_or_default());
                    }
                    if i + 1 == list.len() {
                        out.push(b'\n');
                    } else {
                        out.extend_from_slice(&o.delim);
                    }
                }
            }
            if let Err(code) = emit(prog, &out) {
                return code;
            }
            i32::from(list.is_empty())
        }
        Mode::Pkill => pkill(&o, &list, &starts(&tasks), &mut source, ns_per_tick),
        Mode::Pidwait => pidwait(&o, &list, &starts(&tasks), &mut source, ns_per_tick),
    }
}

/// Each process's start time (ns since boot), by pid: what identifies it when it is acted on.
fn starts(tasks: &[Task]) -> HashMap<u32, u64> {
    tasks
        .iter()
        .filter(|t| t.pid == t.tgid)
        .filter_map(|t| Some((t.pid, t.base.as_ref()?.rec.start_time_ns)))
        .collect()
}

/// Who holds each pid now: /proc when it is ours, else a snapshot taken now. Call after
/// opening the pidfds to check.
fn holder(source: &mut Source, ns_per_tick: u64) -> Result<Holder, snapshot::Error> {
    if kill::proc_is_ours() {
        return Ok(Holder::Proc);
    }
    let now = source.take(&Query {
        threads: false,
        groups: 0,
    })?;
    Ok(Holder::Snapshot(
        now.iter()
            .filter_map(|t| {
                t.base
                    .as_ref()
                    .map(|b| (t.pid, b.rec.start_time_ns / ns_per_tick))
            })
            .collect(),
    ))
}

/// Waits until the selected processes have exited (procps' pidwait, with pidfds checked to
/// be the processes that matched); returns the exit status.
fn pidwait(
    o: &Opts,
    list: &[Sel],
    starts: &HashMap<u32, u64>,
    source: &mut Source,
    ns_per_tick: u64,
) -> i32 {
    let prog = o.mode.prog();
    let mut out = Vec::new();
    if o.count {
        out.extend_from_slice(format!("{}\n", list.len()).as_bytes());
    }
    let mut fds = Vec::with_capacity(list.len());
    for s in list {
        if o.echo {
            out.extend_from_slice(b"waiting for ");
            out.extend_from_slice(s.text.as_deref().unwrap_or_default());
            out.extend_from_slice(format!(" (pid {})\n", s.pid).as_bytes());
        }
        match kill::pidfd_open(s.tgid) {
            Ok(fd) => fds.push((s.tgid, fd)),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => crate::warn(
                prog,
                format!("opening pid {} failed: {}", s.pid, strerror(&e)),
            ),
        }
    }
    if let Err(code) = emit(prog, &out) {
        return code;
    }
    // A pid reused since the snapshot names another process: that one is not waited for
    // (the one that matched has exited).
    let holder = match holder(source, ns_per_tick) {
        Ok(h) => h,
        Err(e) => {
            crate::warn(prog, e);
            return EXIT_FATAL;
        }
    };
    fds.retain(|(pid, _)| {
        starts
            .get(pid)
            .is_some_and(|&ns| holder.start_ticks(*pid) == Some(ns / ns_per_tick))
    });
    let waited = fds.len();
    // A pidfd polls readable once its process has exited.
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|(_, fd)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !polls.is_empty() {
        // SAFETY: `polls` is a valid array of pollfd of the length passed; the descriptors
        // stay open (owned by `fds`) until after the call.
        let r = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, -1) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            crate::warn(prog, format!("poll failed: {}", strerror(&e)));
            return EXIT_FATAL;
        }
        polls.retain(|p| p.revents == 0);
    }
    drop(fds);
    i32::from(waited == 0)
}

/// Signals the selected processes; returns the exit status.
fn pkill(
    o: &Opts,
    list: &[Sel],
    starts: &HashMap<u32, u64>,
    source: &mut Source,
    ns_per_tick: u64,
) -> i32 {
    let prog = o.mode.prog();
    let mut out = Vec::new();
    let mut killed = 0usize;
    for chunk in list.chunks(BATCH) {
        // Open every pidfd of the batch first; only then look at who holds the pids.
        let fds: Vec<io::Result<std::os::fd::OwnedFd>> =
            chunk.iter().map(|s| kill::pidfd_open(s.tgid)).collect();
        let holder = match holder(source, ns_per_tick) {
            Ok(h) => h,
            Err(e) => {
                crate::warn(prog, e);
                return EXIT_FATAL;
            }
        };
        for (s, fd) in chunk.iter().zip(fds) {
            // With --lightweight the whole process is signalled, as kill(2) on a thread id
            // does; its identity is its leader's start time.
            let outcome = match (fd, starts.get(&s.tgid)) {
                (Ok(fd), Some(&start)) => kill::signal_if_same(
                    &fd,
                    s.tgid,
                    start / ns_per_tick,
                    &holder,
                    o.signal,
                    o.queue,
                ),
                (Ok(_), None) => Outcome::Gone,
                (Err(e), _) if e.raw_os_error() == Some(libc::ESRCH) => Outcome::Gone,
                (Err(e), _) => Outcome::Failed(e),
            };
            match outcome {
                Outcome::Sent => {
                    if o.echo {
                        out.extend_from_slice(s.text.as_deref().unwrap_or_default());
                        out.extend_from_slice(format!(" killed (pid {})\n", s.pid).as_bytes());
                    }
                    killed += 1;
                }
                Outcome::Gone => {}
                Outcome::Failed(e) => {
                    crate::warn(
                        prog,
                        format!("killing pid {} failed: {}", s.pid, strerror(&e)),
                    );
                }
            }
        }
    }
    if o.count {
        out.extend_from_slice(format!("{}\n", list.len()).as_bytes());
    }
    if let Err(code) = emit(prog, &out) {
        return code;
    }
    i32::from(killed == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::task::Base;

    fn task(pid: u32, ppid: u32, comm: &str, cmdline: Option<&[u8]>, state: u8) -> Task {
        let mut b = Base {
            comm: comm.as_bytes().to_vec(),
            ..Base::default()
        };
        b.rec.ppid = ppid;
        b.rec.state = state;
        b.rec.start_time_ns = u64::from(pid) * 10_000_000;
        Task {
            pid,
            tgid: pid,
            base: Some(b),
            cmdline: cmdline.map(<[u8]>::to_vec),
            ..Task::default()
        }
    }

    #[test]
    fn ancestors_follow_parents() {
        let tasks = vec![
            task(1, 0, "init", None, 1),
            task(10, 1, "sh", None, 1),
            task(20, 10, "me", None, 1),
            task(30, 20, "child", None, 1),
        ];
        let a = ancestors(&tasks, 20);
        assert_eq!(a, [10, 1, 0].into_iter().collect());
    }

    #[test]
    fn long_patterns() {
        assert!(is_long_match(b"0123456789abcdef"));
        assert!(!is_long_match(b"0123456789abcde"));
        assert!(!is_long_match(b"0123456789abcdef|x"));
        assert!(!is_long_match(b"[0]123456789abcdef"));
    }

    fn select(tasks: &[Task], argv: &[&str]) -> Vec<u32> {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        let Parsed::Run(o) = args::parse(Mode::Pgrep, &argv) else {
            panic!("bad args");
        };
        let re = o.pattern.as_ref().map(|p| {
            let p = if o.exact {
                [&b"^("[..], p, b")$"].concat()
            } else {
                p.clone()
            };
            Regex::new(&p, o.icase).expect("regex")
        });
        let mut s = Selector {
            o: &o,
            re: re.as_ref(),
            utf8: true,
            ns_ref: None,
            ttys: Ttys::new(),
            clock: None,
            ns_per_tick: 10_000_000,
            buf: Vec::new(),
        };
        s.select(tasks, 999_999, &HashSet::new())
            .iter()
            .map(|s| s.pid)
            .collect()
    }

    #[test]
    fn newest_oldest_and_ties() {
        let mut tasks = vec![
            task(3, 1, "a", None, 1),
            task(4, 1, "a", None, 1),
            task(5, 1, "b", None, 1),
            task(6, 1, "a", None, 1),
        ];
        // 4 and 6 start together: the newest is the larger pid, the oldest the smaller.
        tasks[3].base.as_mut().expect("base").rec.start_time_ns = 40_000_000;
        assert_eq!(select(&tasks, &["-n", "a"]), [6]);
        assert_eq!(select(&tasks, &["-o", "a"]), [3]);
        assert_eq!(select(&tasks, &["-v", "a"]), [5]);
        assert_eq!(select(&tasks, &["-x", "a|b"]), [3, 4, 5, 6]);
        assert_eq!(select(&tasks, &["-x", "."]), [3, 4, 5, 6]);
        assert_eq!(select(&tasks, &["-P", "2"]), Vec::<u32>::new());
        assert_eq!(select(&tasks, &["-r", "S", "b"]), [5]);
        assert_eq!(select(&tasks, &["-r", "RZ"]), Vec::<u32>::new());
    }
}
