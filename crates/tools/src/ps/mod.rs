//! `taskdiag ps`: procps-compatible process listings from one batched dump.
//!
//! procps ps opens three to five /proc files per process; this one asks taskdiag for the
//! groups its columns need (BASE always; CRED, STAT, STATM, CMDLINE only when a column,
//! selection or sort key uses them) in one dump, then selects, sorts and prints exactly as
//! procps ps 4.0.2 does: same options ([`args`]), same columns ([`specs`]), same layout
//! ([`output`]). The differential tests in the CLI crate hold it to byte-identical output.
//!
//! Known differences: options and columns whose data taskdiag does not carry are refused
//! by name (see `taskdiag ps --help`); the WCHAN column still reads /proc/TID/wchan for
//! each task shown. Where procps 4.0.2 itself misbehaves, taskdiag prints what it meant: with
//! m/-m, thread lines show the real scheduling class, priority, processor and WCHAN (procps
//! never reads those there and prints leftovers, or crashes on WCHAN), and a thread selected
//! without its process (`ps -m -C threadname`) is listed once (procps loops forever). EIP and
//! ESP are zero as /proc shows them, except for a task caught exiting (`-`).

pub mod args;
pub mod output;
pub mod specs;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;

use taskdiag::Group;
use taskdiag_procfs::parse::parse_stat;

use self::args::{ArgError, Env, Heading, Opts, SelKind};
use self::output::{Ctx, Line, Printer, Row, FOREST_MAX};
use self::specs::{Pr, Sr};
use crate::snapshot::{self, Machine, Query};

const USAGE: &str = "
Usage:
 ps [options]

 Try 'ps --help <simple|list|output|threads|misc|all>'
  or 'ps --help <s|l|o|t|m|a>'
 for additional help text.

For more details see ps(1).
";

/// `taskdiag ps --help`.
pub const HELP: &str = "\
Usage: taskdiag ps [options]

Report a snapshot of the current processes, as procps-ng ps 4.0.2 does and with its options,
from one batched taskdiag dump instead of reading /proc process by process.

Options may be UNIX (grouped, preceded by a dash), BSD (grouped, no dash) or GNU long options
(two dashes), mixed freely. Output is byte-for-byte that of procps ps for the same processes.

SIMPLE PROCESS SELECTION
  -A, -e            all processes
  -a                all with a terminal, except session leaders
  a                 all with a terminal, including other users
  -d                all except session leaders
  -N, --deselect    negate the selection
  r                 only running processes
  T                 all processes on this terminal
  x                 processes without a terminal too

PROCESS SELECTION BY LIST
  -C <command>      command name           -G, --Group <GID>   real group id or name
  -g, --group <group>  session or effective group name
  -p, p, --pid <PID>   process id          --ppid <PID>         parent process id
  -q, q, --quick-pid <PID>  process id, quick mode
  -s, --sid <session>  session id          -t, t, --tty <tty>   terminal
  -u, U, --user <UID>  effective user      -U, --User <UID>     real user
  PID, -PGID, +SID     trailing ids: process, process group (-), session (+)

OUTPUT FORMATS
  -F  extra full          -f  full-format, including command lines
  f, --forest  ASCII art process tree      -H  show process hierarchy
  -j  jobs format         j   BSD job control format
  -l  long format         l   BSD long format
  -M, Z  security label column added       -O <format>  preloaded with default columns
  O <format>  as -O, with BSD personality  -o, o, --format <format>  user-defined format
  s  signal format                         u  user-oriented format
  v  virtual memory format                X  register format
  -y  do not show flags, show rss vs. addr (used with -l)
  --context  display security context
  --headers  repeat header lines, one per page
  --no-headers  do not print a header line at all
  --cols, --columns, --width <num>  set screen width
  --rows, --lines <num>  set screen height
  c  true command name    n  numeric WCHAN and USER    S  include dead children
  -c  scheduling class    -P  processor column          -w, w  wide output (twice: unlimited)
  k, --sort <spec>  sort order, e.g. --sort=-pcpu,+pid

THREADS
  H   threads as if they were processes
  -L  possibly with LWP and NLWP columns
  -T  possibly with SPID column
  -m, m  threads after processes (m alone is procps' memory format under the old, debian
         and gnu personalities)

MISCELLANEOUS
  L               list format specifiers
  --info          print the personality's formats and settings (to standard error)
  -V, V, --version  display version information and exit
  --help          display this help and exit

COLUMNS
  Every procps column name works with -o, and so do AIX descriptors (-o '%p %u %c');
  `taskdiag ps L` lists the names. Each prints what procps 4.0.2 prints: signal masks,
  namespaces (the inode, or - where the link cannot be read), cgroups, labels, I/O counters,
  code and stack addresses, OOM scores, autogroups, the login uid, the executable; pss and uss
  from smaps_rollup; the systemd columns (unit, uunit, slice, lsession, machine, ouid, seat)
  from libsystemd's sd-login, as procps built with systemd (? for each without libsystemd).

ENVIRONMENT
  TASKDIAG_BACKEND  auto (default), bpf, daemon or procfs
  COLUMNS, LINES    screen size          PS_FORMAT  default output format
  PS_PERSONALITY, CMD_ENV  as procps: bsd, old, linux, posix, sunos4, aix, hpux, irix,
                    svr4, debian, gnu, tru64, os390, ... (_XPG and I_WANT_A_BROKEN_PS too)

EXIT STATUS
  0 at least one process listed; 1 none, a usage error, or a failure.
";

fn gather_env(pid_width: i32) -> Env {
    let var = |k: &str| std::env::var(k).ok();
    // SAFETY: isatty has no memory-safety preconditions.
    let stdout_tty = unsafe { libc::isatty(1) } == 1;
    let mut winsize = None;
    for fd in [1, 2, 0] {
        // SAFETY: an all-zero winsize is a valid out-parameter for TIOCGWINSZ.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: fd is an open descriptor or the call fails harmlessly; ws is writable.
        let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
        if r != -1 && ws.ws_col > 0 && ws.ws_row > 0 {
            winsize = Some((ws.ws_col as i32, ws.ws_row as i32));
            break;
        }
    }
    // Bytes that are not UTF-8 name no personality, as in procps.
    let lossy = |k: &str| {
        std::env::var_os(k)
            .filter(|s| !s.is_empty())
            .map(|s| s.to_string_lossy().into_owned())
    };
    let personality = lossy("PS_PERSONALITY").or_else(|| lossy("CMD_ENV"));
    Env {
        winsize,
        stdout_tty,
        columns: var("COLUMNS"),
        lines: var("LINES"),
        ps_format: var("PS_FORMAT"),
        personality,
        xpg: lossy("_XPG"),
        // argv[0] as glibc keeps it, when this binary runs as `ps` (a symlink); else `ps`.
        program: std::env::args_os()
            .next()
            .filter(|a| std::path::Path::new(a).file_name() == Some("ps".as_ref()))
            .map_or_else(|| "ps".into(), |a| a.to_string_lossy().into_owned()),
        broken: std::env::var_os("I_WANT_A_BROKEN_PS").is_some(),
        // SAFETY: geteuid cannot fail.
        euid: unsafe { libc::geteuid() },
        tty: own_tty(),
        pid_width,
    }
}

/// Our own controlling terminal (tty_nr of /proc/self/stat; 0 if it cannot be read).
fn own_tty() -> u32 {
    std::fs::read("/proc/self/stat")
        .ok()
        .and_then(|stat| parse_stat(&stat).ok())
        .map_or(0, |s| s.tty_nr)
}

/// Runs `taskdiag ps` with `args` (without the program name); returns the exit status.
pub fn ps_main(args: &[OsString]) -> i32 {
    let utf8 = crate::text::init_locale();
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    let env = gather_env(snapshot::pid_length().map_or(5, |n| n as i32));
    let (parsed, warnings) = args::parse_with_warnings(&args, &env);
    for w in &warnings {
        eprintln!("{w}");
    }
    let o = match parsed {
        Ok(o) => o,
        Err(ArgError::Procps(m)) => {
            eprintln!("error: {m}");
            eprint!("{USAGE}");
            return 1;
        }
        Err(ArgError::Fatal(m)) => {
            eprintln!("{m}");
            return 1;
        }
    };
    if o.help {
        print!("{HELP}");
        return 0;
    }
    if o.version {
        println!(
            "ps from taskdiag {} (procps-ng 4.0.2 compatible)",
            env!("CARGO_PKG_VERSION")
        );
        return 0;
    }
    if o.info {
        eprint!("{}", o.info());
        return 0;
    }
    if o.list_specs {
        let mut out = io::stdout().lock();
        for s in specs::SPECS {
            if s.pr != Pr::Nop {
                let _ = writeln!(out, "{:<12.12} {:<8.8}", s.name, s.head);
            }
        }
        return 0;
    }
    match run(&o, utf8) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("taskdiag ps: {e}");
            1
        }
    }
}

/// The groups the columns, selections and sort keys need.
fn needed_groups(o: &Opts) -> u64 {
    let mut g = Group::Base.flag();
    // Selections by user or group (-e/-A select everything without looking).
    let by_id = o.selection.iter().any(|s| {
        matches!(
            s.kind,
            SelKind::Ruid | SelKind::Euid | SelKind::Rgid | SelKind::Egid
        )
    });
    if by_id || (o.table_needs_euid() && !o.all_processes) {
        g |= Group::Cred.flag();
    }
    for c in &o.format {
        if let Some(s) = c.spec {
            g |= s.pr.groups(o.bsd_c_option, o.unix_f_option, o.bsd_e_option);
        }
    }
    for k in &o.sort {
        g |= k.sr.groups();
    }
    g
}

/// procps want_this_proc.
fn want(o: &Opts, r: &Row, utf8: bool) -> bool {
    let mut accepted = true;
    'finish: {
        if o.all_processes {
            break 'finish;
        }
        if (o.simple_select != 0 || o.selection.is_empty()) && simple_accept(o, r) {
            break 'finish;
        }
        if listed(o, r, utf8) {
            break 'finish;
        }
        accepted = false;
    }
    if o.running_only && !matches!(r.state(), Some(b'R' | b'D')) {
        accepted = false;
    }
    if o.negate_selection {
        !accepted
    } else {
        accepted
    }
}

/// procps table_accept. A value that was not read counts as not ours (and a terminal that was
/// not read as none).
fn simple_accept(o: &Opts, r: &Row) -> bool {
    o.table_accepts(
        r.euid() == Some(o.cached_euid),
        r.session() == Some(r.tgid()),
        r.tty().is_none_or(|t| t == 0),
        r.tty() == Some(o.cached_tty),
    )
}

fn listed(o: &Opts, r: &Row, utf8: bool) -> bool {
    for sn in &o.selection {
        let v = match sn.kind {
            SelKind::Ruid => r.ruid(),
            SelKind::Euid => r.euid(),
            SelKind::Rgid => r.rgid(),
            SelKind::Egid => r.egid(),
            SelKind::Pgrp => r.pgrp(),
            SelKind::Pid | SelKind::PidQuick => Some(r.tgid()),
            SelKind::Ppid => r.ppid(),
            SelKind::Tty => r.tty(),
            SelKind::Sess => r.session(),
            SelKind::Comm => {
                // Names are at most 15 bytes: a longer pattern matches on its first 15.
                let Some(cmd) = r.cmd(utf8) else {
                    continue;
                };
                let hit = |c: &Vec<u8>| {
                    *c == cmd || (cmd.len() == 15 && c.len() >= 15 && c[..15] == cmd[..])
                };
                if sn.cmds.iter().any(hit) {
                    return true;
                }
                continue;
            }
        };
        if v.is_some_and(|v| sn.ids.contains(&v)) {
            return true;
        }
    }
    false
}

fn run(o: &Opts, utf8: bool) -> io::Result<bool> {
    let m = Machine::read().map_err(io::Error::other)?;
    let now = snapshot::now();
    let fancy_listing = o.forest_type != 0 || !o.sort.is_empty();
    // Sorted and forest listings show threads only with H: procps reaps processes alone for
    // them even with -L, -T or m.
    let shown = if fancy_listing {
        args::tf::LOOSE_TASKS
    } else {
        args::tf::LOOSE_TASKS | args::tf::SHOW_TASK
    };
    let threads = o.thread_flags & shown != 0;
    let q = Query {
        threads,
        groups: needed_groups(o),
    };
    let mut source = snapshot::Source::open(q.groups).map_err(io::Error::other)?;
    // procps reads the uptime just before reading the tasks.
    let up = snapshot::uptime().map_err(io::Error::other)?;
    let boot_tics = (up * m.hz as f64) as u64;
    let mut ctx = Ctx::new(m, boot_tics, now, utf8);
    ctx.include_dead_children = o.include_dead_children;
    ctx.unix_f_option = o.unix_f_option;
    ctx.bsd_c_option = o.bsd_c_option;
    ctx.bsd_e_option = o.bsd_e_option;
    ctx.user_is_number = o.user_is_number;
    ctx.wchan_is_number = o.wchan_is_number;
    ctx.forest_type = o.forest_type;

    let out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut p = Printer::new(o.format.clone(), o.screen_cols, out);
    // check_headers
    match o.header {
        Heading::Multi => p.set_header_gap((o.screen_rows - 1) as i64),
        Heading::None => p.no_header(),
        Heading::Single => {
            if !o
                .format
                .iter()
                .any(|c| c.spec.is_some() && !c.name.is_empty())
            {
                p.no_header();
            }
        }
    }
    let quick = o.selection.iter().find(|s| s.kind == SelKind::PidQuick);
    if !threads && !fancy_listing && quick.is_none() {
        // A plain listing: print each process as it is decoded, in pid order.
        let res = source.for_each_process(q.groups, &mut |t| {
            let r = Row {
                t: &t,
                fetched: q.groups,
            };
            if want(o, &r, utf8) {
                p.show(&mut ctx, &r)?;
            }
            Ok(())
        });
        return match res {
            Ok(()) => p.finish(&mut ctx),
            Err(snapshot::Error::Sink(e)) => Err(e),
            Err(e) => Err(io::Error::other(e)),
        };
    }
    let tasks = source.take_with_leaders(&q).map_err(io::Error::other)?;
    let rows: Vec<Row> = tasks
        .iter()
        .map(|t| Row {
            t,
            fetched: q.groups,
        })
        .collect();
    if fancy_listing {
        fancy(o, &mut ctx, &mut p, &rows)?;
    } else if o.thread_flags & args::tf::SHOW_BOTH != 0 {
        // With -q, the processes asked for, in the order procps reads them.
        let listed: Vec<&Row> = match quick {
            Some(q) => q
                .ids
                .iter()
                .flat_map(|&pid| rows.iter().filter(move |r| r.tgid() == pid))
                .collect(),
            None => rows.iter().collect(),
        };
        threads_after_processes(o, &mut ctx, &mut p, listed)?;
    } else if let Some(q) = quick {
        for &pid in &q.ids {
            for r in rows.iter().filter(|r| r.tgid() == pid) {
                if (threads || r.tid() == r.tgid()) && want(o, r, utf8) {
                    p.show(&mut ctx, r)?;
                }
            }
        }
    } else {
        for r in &rows {
            if want(o, r, utf8) {
                p.show(&mut ctx, r)?;
            }
        }
    }
    p.finish(&mut ctx)
}

fn sort_rows(ctx: &mut Ctx, rows: &mut Vec<&Row>, sr: Sr, reverse: bool) {
    let mut keyed: Vec<(Option<output::SortVal>, &Row)> =
        rows.iter().map(|r| (ctx.sort_value(sr, r), *r)).collect();
    keyed.sort_by(|a, b| {
        let c = output::SortVal::compare_missing_first(&a.0, &b.0);
        if reverse {
            c.reverse()
        } else {
            c
        }
    });
    rows.clear();
    rows.extend(keyed.into_iter().map(|(_, r)| r));
}

/// procps simple_spew for m/-m: the tasks by process, each process's in the order they
/// started, and every wanted process's line followed by a line for each of its threads (its
/// leader first), the process line with the process-only columns and the thread lines with the
/// thread-only ones.
fn threads_after_processes<W: Write>(
    o: &Opts,
    ctx: &mut Ctx,
    p: &mut Printer<W>,
    mut rows: Vec<&Row>,
) -> io::Result<()> {
    // Two stable sorts, as procps makes them.
    sort_rows(ctx, &mut rows, Sr::TicsBegan, false);
    sort_rows(ctx, &mut rows, Sr::IdTgid, false);
    let mut i = 0;
    while i < rows.len() {
        let r = rows[i];
        if !want(o, r, ctx.utf8) {
            i += 1;
            continue;
        }
        let process = r.tid();
        p.show_as(ctx, r, Line::Process)?;
        let first = i;
        while i < rows.len() && rows[i].tgid() == process {
            p.show_as(ctx, rows[i], Line::Thread)?;
            i += 1;
        }
        if i == first {
            // A thread selected without its process (-C with a thread's own name, say):
            // procps would print its process line forever; once is enough.
            i += 1;
        }
    }
    Ok(())
}

fn fancy<W: Write>(o: &Opts, ctx: &mut Ctx, p: &mut Printer<W>, all: &[Row]) -> io::Result<()> {
    let mut rows: Vec<&Row> = all.iter().filter(|r| want(o, r, ctx.utf8)).collect();
    if rows.is_empty() {
        return Ok(());
    }
    let mut keys: Vec<(Sr, bool)> = o.sort.iter().map(|k| (k.sr, k.reverse)).collect();
    if o.forest_type != 0 {
        if keys.is_empty() {
            keys.push((Sr::TicsBegan, false));
        }
        keys.push((Sr::IdPpid, false));
    }
    for (sr, rev) in keys {
        sort_rows(ctx, &mut rows, sr, rev);
    }
    if o.forest_type == 0 {
        for r in rows {
            p.show(ctx, r)?;
        }
        return Ok(());
    }
    // show_forest: roots are tasks whose parent is not listed, scanned from the end.
    let pids: HashSet<u32> = rows.iter().map(|r| r.tid()).collect();
    // A task whose BASE is missing has no known parent: it is a root.
    let mut first_child: HashMap<u32, usize> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        if let Some(ppid) = r.ppid() {
            first_child.entry(ppid).or_insert(i);
        }
    }
    for i in (0..rows.len()).rev() {
        if rows[i].ppid().is_some_and(|pp| pids.contains(&pp)) {
            continue;
        }
        show_tree(ctx, p, &rows, &first_child, i)?;
    }
    Ok(())
}

/// procps show_tree, without recursion (a hostile chain of nested processes must not
/// overflow our stack).
fn show_tree<W: Write>(
    ctx: &mut Ctx,
    p: &mut Printer<W>,
    rows: &[&Row],
    first_child: &HashMap<u32, usize>,
    root: usize,
) -> io::Result<()> {
    struct Frame {
        level: usize,
        next: usize,
        pid: u32,
    }
    let n = rows.len();
    let mut stack: Vec<Frame> = Vec::new();
    // Visit: print a node and, if it has children, push a frame for them.
    let visit = |ctx: &mut Ctx,
                 p: &mut Printer<W>,
                 stack: &mut Vec<Frame>,
                 node: usize,
                 level: usize,
                 sibling: bool|
     -> io::Result<()> {
        if level > 0 {
            ctx.forest_prefix[level - 1] = if sibling { b'+' } else { b'L' };
        }
        ctx.forest_prefix[level] = 0;
        p.show(ctx, rows[node])?;
        let pid = rows[node].tid();
        let Some(&first) = first_child.get(&pid) else {
            return Ok(());
        };
        if first >= n || rows[first].ppid() != Some(pid) {
            return Ok(());
        }
        if level > 0 {
            ctx.forest_prefix[level - 1] = if sibling { b'|' } else { b' ' };
        }
        ctx.forest_prefix[level] = 0;
        stack.push(Frame {
            level,
            next: first,
            pid,
        });
        Ok(())
    };
    visit(ctx, p, &mut stack, root, 0, false)?;
    while let Some(top) = stack.last_mut() {
        if top.next < n && rows[top.next].ppid() == Some(top.pid) {
            let i = top.next;
            top.next += 1;
            let more = i + 1 < n && rows[i + 1].ppid() == Some(top.pid);
            // procps shows init's children at init's own level, except in -H trees.
            let adopted = top.pid == 1 && ctx.forest_type != b'u';
            let level = if adopted || top.level + 1 >= FOREST_MAX {
                top.level
            } else {
                top.level + 1
            };
            visit(ctx, p, &mut stack, i, level, more)?;
        } else {
            let level = top.level;
            stack.pop();
            ctx.forest_prefix[level] = 0;
        }
    }
    Ok(())
}
