//! `taskdiag pstree`: psmisc-compatible process trees from one batched dump.
//!
//! psmisc pstree opens /proc/PID/stat, stats /proc/PID, lists /proc/PID/task and, with
//! `-a`, reads /proc/PID/cmdline for every process, then builds its tree with a linear
//! search per process (and stats the eight /proc/PID/ns links of each, whatever the options);
//! at tens of thousands of processes that takes seconds. This one asks taskdiag for BASE (plus
//! CRED for owners, CMDLINE only with `-a`, NS only with `-S` or `-N`, SECURITY only with
//! `-Z`, and threads unless
//! `-T`) in one dump, builds the same tree in O(n log n) ([`tree`]) and prints it byte for
//! byte as psmisc 23.6 does ([`render`]), with the same options and exit statuses
//! ([`opts`]). The differential tests in the CLI crate hold it to that.
//!
//! Known differences: `-Z` shows the context as psmisc does without SELinux or AppArmor
//! libraries (from /proc/PID/attr/current, as those read it too); `--help` prints our manual
//! instead of an error; `-V` names this implementation; a usage error's text (psmisc's, after
//! getopt's message) is in English whatever the locale, where psmisc translates it. Process
//! owners are effective uids, which is what psmisc's stat of the /proc/PID directory reports
//! (the kernel gives world-readable /proc directories the task's euid even when it is not
//! dumpable). `-h`/`-H` get their terminal strings from the
//! system's terminfo library, loaded only then ([`term`]).
//!
//! This module owns pstree's entry point, help and environment (width, locale, terminal);
//! the snapshot, names and text helpers are shared with the other tools.

pub mod opts;
pub mod render;
pub mod term;
pub mod tree;

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;

use taskdiag::Group;

use self::opts::{Action, Env, Opts, Target};
use self::render::{Out, Printer};
use self::tree::{Build, Tree};
use crate::cnum::strtol_whole;
use crate::snapshot::{self, Query};

/// `taskdiag pstree --help`.
pub const HELP: &str = "\
Usage: pstree [-aAcglnpsStTuUZ] [-C age] [-G] [-h | -H PID] [PID | USER]
       pstree -V

Display the processes as a tree: each process under its parent, threads in braces under
their process, siblings sorted by name. Output is byte for byte that of psmisc pstree 23.6
for the same processes, read from one batched taskdiag dump instead of /proc file by file.

Identical sibling subtrees are shown once, prefixed with their count: 3*[sleep] stands for
three sleep processes, 4*[{worker}] for four threads of that name.

OPERAND
  PID                 show the tree rooted at this process (or thread) instead of at
                      process 1 (0 where /proc/0 exists); a missing PID shows nothing
  USER                show every tree rooted at a process of this user, one after another

OPTIONS
  -a, --arguments     show each process's command line; processes without one (kernel
                      threads, zombies) in parentheses; turns off merging of processes
  -A, --ascii         draw lines with ASCII characters
  -c, --compact-not   do not merge identical subtrees
  -C, --color=age     color names by process age: green under a minute, yellow under an
                      hour, red older
  -g, --show-pgids    show process group ids in parentheses
  -G, --vt100         draw lines with the VT100 graphics character set
  -h, --highlight-all highlight this pstree process and its ancestors (needs TERM)
  -H, --highlight-pid=PID
                      highlight process PID and its ancestors (needs TERM)
  -l, --long          do not cut lines (or command lines) at the output width
  -n, --numeric-sort  sort siblings by pid instead of by name
  -N, --ns-sort=TYPE  show the trees of each TYPE namespace (cgroup, ipc, mnt, net, pid,
                      user, uts, time) under its inode number in brackets, from process 1
                      down: a process whose namespace differs from its parent's starts a
                      tree of its own; the PID or USER operand is ignored
  -p, --show-pids     show pids in parentheses; turns off merging
  -s, --show-parents  show the ancestors of PID too
  -S, --ns-changes    show, in parentheses, the namespaces in which a process differs from
                      its parent (where both can be read; only root reads others')
  -t, --thread-names  show threads under their own names instead of their process's
  -T, --hide-threads  show processes only
  -u, --uid-changes   show the user in parentheses where it differs from the parent's
  -U, --unicode       draw lines with UTF-8 box-drawing characters
  -V, --version       show the version (on standard error) and exit
      --help          show this help and exit

  -Z, --security-context
                      show each process's security context, as /proc/PID/attr/current
                      gives it, in parentheses (each process on a line of its own, as -a)

OUTPUT
  Names and arguments are escaped: a backslash doubles, and bytes outside printable ASCII
  appear as \\ooo (octal). Lines are cut at the output width with a final '+', unless -l is
  given; the width is $COLUMNS, else the terminal's width, else 132. Lines are drawn with
  UTF-8 characters when the output is a terminal and the locale uses UTF-8, else ASCII.

ENVIRONMENT
  COLUMNS             output width
  TERM                terminal type, for -h and -H
  TASKDIAG_BACKEND    auto (default), bpf, daemon or procfs

EXIT STATUS
  0 the tree was shown (also when PID does not exist), 1 a usage error, an unknown user, no
  process of USER, -s with a missing PID, -N with a namespace type this kernel lacks, or a
  failure to read the processes.

EXAMPLES
  pstree -p $$        the tree under this shell, with pids
  pstree -aps $$      this shell's ancestors and descendants with their command lines
  pstree -u root      every tree of root's processes, with user changes
";

/// psmisc 23.6's usage text (its `usage()`, as its C locale prints it), which follows a bad
/// option's message.
const USAGE: &str = "\
Usage: pstree [-acglpsStTuZ] [ -h | -H PID ] [ -n | -N type ]
              [ -A | -G | -U ] [ PID | USER ]
   or: pstree -V

Display a tree of processes.

  -a, --arguments     show command line arguments
  -A, --ascii         use ASCII line drawing characters
  -c, --compact-not   don't compact identical subtrees
  -C, --color=TYPE    color process by attribute
                      (age)
  -g, --show-pgids    show process group ids; implies -c
  -G, --vt100         use VT100 line drawing characters
  -h, --highlight-all highlight current process and its ancestors
  -H PID, --highlight-pid=PID
                      highlight this process and its ancestors
  -l, --long          don't truncate long lines
  -n, --numeric-sort  sort output by PID
  -N TYPE, --ns-sort=TYPE
                      sort output by this namespace type
                              (cgroup, ipc, mnt, net, pid, time, user, uts)
  -p, --show-pids     show PIDs; implies -c
  -s, --show-parents  show parents of the selected process
  -S, --ns-changes    show namespace transitions
  -t, --thread-names  show full thread names
  -T, --hide-threads  hide threads, show only processes
  -u, --uid-changes   show uid transitions
  -U, --unicode       use UTF-8 (Unicode) line drawing characters
  -V, --version       display version information
  -Z, --security-context
                      show security attributes

  PID    start at this PID; default is 1 (init)
  USER   show only trees rooted at processes of this user

";

/// psmisc's output width: `$COLUMNS` (a whole number as `strtol` with base 0 reads it),
/// else the terminal's width, else 132.
fn output_width() -> usize {
    if let Some(v) = std::env::var_os("COLUMNS").filter(|v| !v.is_empty()) {
        if let Some(t) = strtol_whole(v.as_bytes(), 0) {
            if t > 0 && t < 0x7fff_ffff {
                return t as usize;
            }
        }
    }
    // SAFETY: an all-zero winsize is a valid out-parameter for TIOCGWINSZ.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: fd 1 and a valid winsize pointer; the ioctl only writes the struct.
    let r = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) };
    if r >= 0 && ws.ws_col > 0 {
        return usize::from(ws.ws_col);
    }
    132
}

fn isatty(fd: i32) -> bool {
    // SAFETY: isatty has no memory-safety preconditions.
    unsafe { libc::isatty(fd) == 1 }
}

/// Runs `taskdiag pstree`; returns the exit status.
pub fn pstree_main(args: &[OsString]) -> i32 {
    let width = output_width();
    let utf8 = crate::text::init_locale();
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    let term = std::env::var_os("TERM");
    let user_uid = |name: &[u8]| {
        std::str::from_utf8(name)
            .ok()
            .and_then(crate::names::uid_of)
    };
    let env = Env {
        tty: isatty(1),
        utf8,
        term: term.as_deref().map(|t| t.as_bytes()),
        posixly_correct: std::env::var_os("POSIXLY_CORRECT").is_some(),
        self_pid: std::process::id() as i32,
        load_caps: &term::load,
        user_uid: &user_uid,
        ns_available: &|name| std::fs::metadata(format!("/proc/self/ns/{name}")).is_ok(),
    };
    let o = match opts::parse(&args, &env) {
        Action::Run(o) => o,
        Action::Help => {
            let mut out = io::stdout().lock();
            return match out.write_all(HELP.as_bytes()).and_then(|()| out.flush()) {
                Ok(()) => 0,
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
                Err(_) => 1,
            };
        }
        Action::Version => {
            eprintln!(
                "pstree (taskdiag {}), compatible with pstree (PSmisc) 23.6",
                env!("CARGO_PKG_VERSION")
            );
            return 0;
        }
        Action::Fail { msg, usage, code } => {
            if !msg.is_empty() {
                let mut e = io::stderr().lock();
                let _ = e.write_all(&msg).and_then(|()| e.write_all(b"\n"));
            }
            if usage {
                eprint!("{USAGE}");
            }
            return code;
        }
    };
    match run(&o, width) {
        Ok(code) => code,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("pstree: {e}");
            1
        }
    }
}

/// The groups the options need: owners order same-named siblings, so CRED is needed
/// unless siblings sort by pid and no option shows or selects owners.
fn groups(o: &Opts) -> u64 {
    let mut g = Group::Base.flag();
    if !o.by_pid || o.user_change || matches!(o.target, Target::User(_)) {
        g |= Group::Cred.flag();
    }
    if o.args {
        g |= Group::Cmdline.flag();
    }
    if o.ns_change || o.ns_sort.is_some() {
        g |= Group::Ns.flag();
    }
    if o.scontext {
        g |= Group::Security.flag();
    }
    g
}

fn run(o: &Opts, width: usize) -> io::Result<i32> {
    let q = Query {
        threads: !o.hide_threads,
        groups: groups(o),
    };
    let tasks = snapshot::take(&q).map_err(io::Error::other)?;
    let root_pid = if std::fs::symlink_metadata("/proc/0").is_ok() {
        0
    } else {
        1
    };
    let clock = if o.color_age {
        Some((
            snapshot::uptime().map_err(io::Error::other)?,
            snapshot::clock_ticks(),
        ))
    } else {
        None
    };
    let mut tree = Tree::build(
        &tasks,
        &Build {
            args: o.args,
            trunc_width: o.trunc.then_some(width),
            thread_names: o.thread_names,
            by_pid: o.by_pid,
            root_pid,
            clock,
        },
    );
    drop(tasks);
    if o.highlight != 0 {
        tree.highlight(o.highlight);
    }
    let mut start = match o.target {
        Target::Pid(p) => p,
        _ => root_pid,
    };
    if o.show_parents {
        if let Target::Pid(p) = o.target {
            let Some(n) = tree.find(p) else {
                eprintln!("Process {p} not found.");
                return Ok(1);
            };
            tree.trim_to_ancestors(n);
            start = root_pid;
        }
    }
    let by_ns = o.ns_sort.map(|id| tree.sort_by_namespace(id));
    let out = Out::new(io::stdout().lock(), width, o.trunc);
    let mut p = Printer::new(out, &tree, o);
    let mut code = 0;
    match o.target {
        _ if by_ns.is_some() => p.dump_by_namespace(by_ns.as_deref().unwrap_or_default()),
        Target::User(uid) => {
            let root = tree.find(root_pid);
            if !root.is_some_and(|r| p.dump_by_user(r, uid)) {
                code = 1;
            }
        }
        _ => {
            if let Some(n) = tree.find(start) {
                p.dump(n, Some(0));
            }
        }
    }
    drop(p.out.finish()?);
    if code == 1 {
        eprintln!("No processes found.");
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_parse_like_strtol_base_0() {
        assert_eq!(strtol_whole(b"80", 0), Some(80));
        assert_eq!(strtol_whole(b" +80", 0), Some(80));
        assert_eq!(strtol_whole(b"010", 0), Some(8));
        assert_eq!(strtol_whole(b"0x50", 0), Some(80));
        assert_eq!(strtol_whole(b"0", 0), Some(0));
        assert_eq!(strtol_whole(b"0x", 0), None);
        assert_eq!(strtol_whole(b"80x", 0), None);
        assert_eq!(strtol_whole(b" ", 0), None);
        assert_eq!(strtol_whole(b"99999999999999999999999", 0), Some(i64::MAX));
    }
}
