//! `taskdiag pidof`: procps-ng 4.0.2's pidof on one batched taskdiag snapshot.
//!
//! procps reads /proc/PID/stat and cmdline and readlinks /proc/PID/exe (and, with -c,
//! /proc/PID/root) of every process, once per program named; this takes one snapshot of the
//! processes with BASE (the name), CMDLINE (argv) and PATHS (exe and root, as readlink returns
//! them) and matches every program against it exactly as procps' `select_procs` does: `argv[0]`
//! (a login shell's `-` dropped) or its basename, the executable's path or basename, the name
//! with -w or when `argv[0]` holds a space (setproctitle), `argv[1]` of a script's interpreter with
//! -x, the same root as ours with -c (root only). Output is procps': per program, the matches
//! from the highest pid down (one with -s), joined by the separator, one newline at the end;
//! exit status 0 if anything matched, 1 if not or on a bad command line.
//!
//! This module owns pidof's command line, matching and output; the snapshot is
//! [`crate::snapshot`]'s, the escaping of names [`crate::text`]'s.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use taskdiag::Group;

use crate::cnum::strtoul;
use crate::getopt::{Getopt, HasArg, LongOpt};
use crate::snapshot::{Query, Source, Task};
use crate::text;

/// The name messages start with.
const PROG: &str = "pidof";

/// procps' `EXIT_FAILURE`: nothing found, a bad command line, or a failure.
const EXIT_FAILURE: i32 = 1;

/// `taskdiag pidof --help` (`-?` and mistakes print it on standard error).
pub const PIDOF_HELP: &str = "
Usage:
 pidof [options] [program [...]]

Print the ids of the processes running each program named: a process runs <program> when
its argv[0], the basename of its argv[0], its executable's path or that path's basename is
<program> (or, when <program> is a path, argv[0] is its basename). Ids are printed from the
highest down, program after program, on one line. Process data come from one batched
taskdiag snapshot (TASKDIAG_BACKEND=auto|bpf|daemon|procfs).

Options:
 -s, --single-shot         return one PID only
 -c, --check-root          omit processes with different root
 -q,                       quiet mode, only set the exit code
 -w, --with-workers        show kernel workers too
 -x                        also find shells running the named scripts
 -o, --omit-pid <PID,...>  omit processes with PID
 -S, --separator SEP       use SEP as separator put between PIDs
 -h, --help     display this help and exit
 -V, --version  output version information and exit

-n and -m are accepted and ignored, as procps does. -c applies only when run as root; -o
%PPID omits this command's parent.

This is procps's pidof. Debian's pidof is another program, sysvinit-utils' (pidof(8)), which
init scripts rely on: the Debian package leaves it alone, and offers this one as taskdiag
pidof only.

Exit status: 0 at least one process found, 1 none found or a bad command line.
";

/// procps 4.0.2's short options.
const SHORTOPTS: &[u8] = b"scnqxwmo:S:?Vh";

/// procps 4.0.2's long options, in its order (which ambiguity messages list).
const LONGOPTS: &[LongOpt] = &[
    LongOpt::new("check-root", HasArg::No, b'c' as u32),
    LongOpt::new("single-shot", HasArg::No, b's' as u32),
    LongOpt::new("omit-pid", HasArg::Required, b'o' as u32),
    LongOpt::new("separator", HasArg::Required, b'S' as u32),
    LongOpt::new("quiet", HasArg::No, b'q' as u32),
    LongOpt::new("with-workers", HasArg::No, b'w' as u32),
    LongOpt::new("help", HasArg::No, b'h' as u32),
    LongOpt::new("version", HasArg::No, b'V' as u32),
];

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// -s (also set by -q): one pid per program.
    pub single_shot: bool,
    /// -x: also shells running scripts of that name.
    pub scripts_too: bool,
    /// -c, given as root: only processes with our root directory.
    pub rootdir_check: bool,
    /// -w: kernel workers too (the name is compared).
    pub with_workers: bool,
    /// -q: print nothing.
    pub quiet: bool,
    /// -o: pids left out (as C's `pid_t`, so `-1` and wrapped values are kept as given).
    pub omitted: Vec<i32>,
    /// -S: what goes between pids.
    pub separator: Vec<u8>,
    /// The programs, in order.
    pub programs: Vec<Vec<u8>>,
}

/// What parsing decided.
#[derive(Debug)]
pub enum Parsed {
    /// Go ahead.
    Run(Opts),
    /// Stop now with this exit status (help, version, or a mistake already reported).
    Exit(i32),
}

fn err_bytes(parts: &[&[u8]]) {
    let mut e = io::stderr().lock();
    for p in parts {
        let _ = e.write_all(p);
    }
    let _ = e.flush();
}

/// procps' `usage`: to standard output and status 0 for -h, else standard error and 1.
fn usage(to_stdout: bool) -> Parsed {
    if to_stdout {
        let mut o = io::stdout().lock();
        let _ = o.write_all(PIDOF_HELP.as_bytes());
        let _ = o.flush();
        Parsed::Exit(0)
    } else {
        err_bytes(&[PIDOF_HELP.as_bytes()]);
        Parsed::Exit(EXIT_FAILURE)
    }
}

/// procps' `add_to_omit_list`: members separated by any of `,;:` (empty ones skipped), each
/// `%PPID` (our parent) or a number as `strtoul` reads it, stored into a `pid_t`; anything
/// else is reported (with procps' extra newline) and skipped.
fn add_to_omit_list(arg: &[u8], omitted: &mut Vec<i32>, ppid: impl Fn() -> i32) {
    for part in arg
        .split(|&c| c == b',' || c == b';' || c == b':')
        .filter(|p| !p.is_empty())
    {
        if part == b"%PPID" {
            omitted.push(ppid());
            continue;
        }
        let (v, used) = strtoul(part, 10);
        if used == part.len() {
            omitted.push(v as u32 as i32);
        } else {
            err_bytes(&[
                PROG.as_bytes(),
                b": illegal omit pid value (",
                part,
                b")!\n\n",
            ]);
        }
    }
}

/// Reads pidof's command line as procps 4.0.2 does: each option acted on in order (an -o
/// member reported as soon as it is read, -h and -V ending the run at once).
pub fn parse(args: &[OsString]) -> Parsed {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.clone().into_vec()).collect();
    let posixly = std::env::var_os("POSIXLY_CORRECT").is_some();
    let mut g = Getopt::new(&args, SHORTOPTS, LONGOPTS, posixly);
    let mut o = Opts {
        single_shot: false,
        scripts_too: false,
        rootdir_check: false,
        with_workers: false,
        quiet: false,
        omitted: Vec::new(),
        separator: b" ".to_vec(),
        programs: Vec::new(),
    };
    // SAFETY: getppid and geteuid cannot fail and touch no memory.
    let ppid = || unsafe { libc::getppid() };
    for got in g.by_ref() {
        let (code, arg) = match got {
            Ok(x) => x,
            Err(e) => {
                let mut m = e.message(PROG);
                m.push(b'\n');
                err_bytes(&[&m]);
                return usage(false);
            }
        };
        let arg = arg.unwrap_or_default();
        match u8::try_from(code).unwrap_or(b'?') {
            b'q' => {
                o.quiet = true;
                o.single_shot = true;
            }
            b's' => o.single_shot = true,
            b'o' => add_to_omit_list(arg, &mut o.omitted, ppid),
            b'x' => o.scripts_too = true,
            b'w' => o.with_workers = true,
            // SAFETY: see above.
            b'c' => o.rootdir_check |= unsafe { libc::geteuid() } == 0,
            b'S' => o.separator = arg.to_vec(),
            b'V' => {
                let mut out = io::stdout().lock();
                let _ = writeln!(
                    out,
                    "{PROG} from taskdiag {} (procps-ng 4.0.2 compatible)",
                    env!("CARGO_PKG_VERSION")
                );
                let _ = out.flush();
                return Parsed::Exit(0);
            }
            b'h' => return usage(true),
            // -n and -m: compatibility only.
            b'n' | b'm' => {}
            _ => return usage(false),
        }
    }
    o.programs = g.operands().iter().map(|p| p.to_vec()).collect();
    Parsed::Run(o)
}

/// What is after the last `/` (all of `s` without one).
fn basename(s: &[u8]) -> &[u8] {
    match s.iter().rposition(|&c| c == b'/') {
        Some(i) => &s[i + 1..],
        None => s,
    }
}

/// A process as procps' pidof sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its id.
    pub pid: i32,
    /// Its name as procps escapes it (`PIDS_CMD`).
    pub cmd: Vec<u8>,
    /// Its arguments as libproc2 splits /proc/PID/cmdline (`PIDS_CMDLINE_V`).
    pub argv: Vec<Vec<u8>>,
    /// readlink /proc/PID/exe, empty where that fails.
    pub exe: Vec<u8>,
    /// readlink /proc/PID/root, empty where that fails.
    pub root: Vec<u8>,
}

/// /proc/PID/cmdline split as libproc2's `file2strvec` splits it: at NULs and newlines, after
/// a final NUL is supplied if missing; a file that is empty or cannot be read is `["-"]`.
pub fn strvec(raw: Option<&[u8]>) -> Vec<Vec<u8>> {
    match raw {
        None | Some([]) => vec![b"-".to_vec()],
        Some(r) => {
            let r = r.strip_suffix(b"\0").unwrap_or(r);
            r.split(|&c| c == 0 || c == b'\n')
                .map(<[u8]>::to_vec)
                .collect()
        }
    }
}

/// A readlink result as procps' `pid_link` keeps it: the path, or empty where it failed.
fn link(p: Option<&Result<Vec<u8>, u8>>) -> Vec<u8> {
    p.and_then(|r| r.as_ref().ok()).cloned().unwrap_or_default()
}

impl Proc {
    /// The process as pidof sees it, from a snapshot record with BASE, CMDLINE and PATHS;
    /// `None` for a record without BASE (a task that went away while it was read).
    pub fn from_task(t: &Task, utf8: bool) -> Option<Proc> {
        let base = t.base.as_ref()?;
        let paths = t.paths.as_ref();
        Some(Proc {
            pid: t.pid as i32,
            cmd: text::lib_escape(&base.comm, utf8),
            argv: strvec(t.cmdline.as_deref()),
            exe: link(paths.map(|p| &p.exe)),
            root: link(paths.map(|p| &p.root)),
        })
    }
}

/// procps' match of one process against `program` (`select_procs`' test, after the root and
/// omitted-pid checks).
pub fn matches(program: &[u8], p: &Proc, scripts_too: bool, with_workers: bool) -> bool {
    let program_base = basename(program);
    let mut arg0: &[u8] = p.argv.first().map_or(&b""[..], Vec::as_slice);
    // Login shells.
    if let Some(rest) = arg0.strip_prefix(b"-") {
        arg0 = rest;
    }
    let arg0_base = basename(arg0);
    let exe_base = basename(&p.exe);
    let mut matched = program == arg0_base
        || program_base == arg0
        || program == arg0
        || (with_workers && program == p.cmd.as_slice())
        || program == exe_base
        || program == p.exe.as_slice();
    if !matched && scripts_too {
        if let Some(arg1) = p.argv.get(1) {
            let arg1_base = basename(arg1);
            // A script's interpreter is named after the script.
            matched = arg1_base.starts_with(&p.cmd)
                && (program == arg1_base || program_base == arg1.as_slice() || program == arg1);
        }
    }
    // A space in argv[0]: probably setproctitle; the name is compared instead.
    if !matched && arg0.contains(&b' ') {
        matched = program == p.cmd.as_slice();
    }
    matched
}

/// The pids procps prints for `programs` (empty ones skipped), in its order: per program, the
/// matching processes of `procs` (in pid order) from the last down, only the first of them
/// with -s. `our_root` is readlink of our own root (with -c).
pub fn select(o: &Opts, procs: &[Proc], our_root: &[u8]) -> Vec<i32> {
    let mut out = Vec::new();
    for program in o.programs.iter().filter(|p| !p.is_empty()) {
        let found: Vec<i32> = procs
            .iter()
            .filter(|p| !o.rootdir_check || p.root == our_root)
            .filter(|p| !o.omitted.contains(&p.pid))
            .filter(|p| matches(program, p, o.scripts_too, o.with_workers))
            .map(|p| p.pid)
            .collect();
        let rev = found.iter().rev();
        if o.single_shot {
            out.extend(rev.take(1));
        } else {
            out.extend(rev);
        }
    }
    out
}

/// What pidof prints for `pids`: joined by the separator, a newline after; nothing with -q
/// or when nothing was found.
pub fn render(o: &Opts, pids: &[i32]) -> Vec<u8> {
    let mut v = Vec::new();
    if o.quiet || pids.is_empty() {
        return v;
    }
    for (i, pid) in pids.iter().enumerate() {
        if i > 0 {
            v.extend_from_slice(&o.separator);
        }
        v.extend_from_slice(pid.to_string().as_bytes());
    }
    v.push(b'\n');
    v
}

/// C's `strerror` text for an error (without Rust's "(os error N)").
fn strerror(e: &io::Error) -> String {
    e.raw_os_error()
        .map_or_else(|| e.to_string(), crate::strerror)
}

/// Our own root as procps reads it (`pid_link(getpid(), "root")`): from the snapshot, else
/// readlink; empty where that fails.
fn own_root(tasks: &[Task], me: u32) -> Vec<u8> {
    if let Some(Ok(r)) = tasks
        .iter()
        .find(|t| t.pid == me)
        .and_then(|t| t.paths.as_ref())
        .map(|p| &p.root)
    {
        return r.clone();
    }
    std::fs::read_link(format!("/proc/{me}/root"))
        .map(|p| p.as_os_str().as_bytes().to_vec())
        .unwrap_or_default()
}

/// Runs `taskdiag pidof`; returns the exit status.
pub fn pidof_main(args: &[OsString]) -> i32 {
    let utf8 = text::init_locale();
    let o = match parse(args) {
        Parsed::Run(o) => o,
        Parsed::Exit(code) => return code,
    };
    if o.programs.iter().all(|p| p.is_empty()) {
        return EXIT_FAILURE;
    }
    let groups = Group::Cmdline.flag() | Group::Paths.flag();
    let tasks = match Source::open(groups).and_then(|mut s| {
        s.take(&Query {
            threads: false,
            groups,
        })
    }) {
        Ok(t) => t,
        Err(e) => {
            crate::warn(PROG, e);
            return EXIT_FAILURE;
        }
    };
    let our_root = if o.rootdir_check {
        own_root(&tasks, std::process::id())
    } else {
        Vec::new()
    };
    let procs: Vec<Proc> = tasks
        .iter()
        .filter(|t| t.pid == t.tgid)
        .filter_map(|t| Proc::from_task(t, utf8))
        .collect();
    let pids = select(&o, &procs, &our_root);
    let out = render(&o, &pids);
    let mut so = io::stdout().lock();
    match so.write_all(&out).and_then(|()| so.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            crate::warn(PROG, format!("write error: {}", strerror(&e)));
            return EXIT_FAILURE;
        }
    }
    i32::from(pids.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_(pid: i32, cmd: &str, cmdline: Option<&[u8]>, exe: &str, root: &str) -> Proc {
        Proc {
            pid,
            cmd: cmd.as_bytes().to_vec(),
            argv: strvec(cmdline),
            exe: exe.as_bytes().to_vec(),
            root: root.as_bytes().to_vec(),
        }
    }

    fn opts(args: &[&str]) -> Opts {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        match parse(&argv) {
            Parsed::Run(o) => o,
            Parsed::Exit(c) => panic!("{args:?} exited {c}"),
        }
    }

    fn fixture() -> Vec<Proc> {
        vec![
            proc_(2, "kthreadd", None, "", "/"),
            proc_(
                10,
                "sleep",
                Some(b"sleep\x001000\x00"),
                "/usr/bin/sleep",
                "/",
            ),
            proc_(
                11,
                "sleep",
                Some(b"/bin/sleep\x001\x00"),
                "/usr/bin/sleep",
                "/",
            ),
            proc_(12, "bash", Some(b"-bash\x00"), "/usr/bin/bash", "/"),
            proc_(
                13,
                "myscript",
                Some(b"/bin/sh\x00./myscript\x00"),
                "/usr/bin/dash",
                "/",
            ),
            proc_(
                14,
                "sh",
                Some(b"sh\x00/tmp/myscript\x00"),
                "/usr/bin/dash",
                "/",
            ),
            proc_(
                15,
                "daemon",
                Some(b"daemon: worker x\x00"),
                "/usr/sbin/d",
                "/",
            ),
            proc_(
                16,
                "sleep",
                Some(b"sleep\x002\x00"),
                "/usr/bin/sleep",
                "/jail",
            ),
            proc_(17, "zombie", None, "", ""),
            proc_(
                18,
                "gone",
                Some(b"sleep\x00"),
                "/usr/bin/sleep (deleted)",
                "/",
            ),
        ]
    }

    fn pids(args: &[&str]) -> Vec<i32> {
        select(&opts(args), &fixture(), b"/")
    }

    #[test]
    fn command_lines_split_like_libproc2() {
        assert_eq!(strvec(None), [b"-".to_vec()]);
        assert_eq!(strvec(Some(b"")), [b"-".to_vec()]);
        assert_eq!(strvec(Some(b"a\0b\0")), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(strvec(Some(b"a\0b")), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(strvec(Some(b"a\nb c\0")), [b"a".to_vec(), b"b c".to_vec()]);
        assert_eq!(strvec(Some(b"a\n")), [b"a".to_vec(), b"".to_vec()]);
        assert_eq!(strvec(Some(b"\0")), [b"".to_vec()]);
        assert_eq!(
            strvec(Some(b"a\0\0b\0")),
            [b"a".to_vec(), b"".to_vec(), b"b".to_vec()]
        );
    }

    #[test]
    fn names_paths_and_basenames() {
        assert_eq!(pids(&["sleep"]), [18, 16, 11, 10]);
        assert_eq!(pids(&["/bin/sleep"]), [18, 16, 11, 10]);
        assert_eq!(pids(&["/usr/bin/sleep"]), [18, 16, 11, 10]);
        assert_eq!(pids(&["bash"]), [12]);
        assert_eq!(pids(&["--", "-bash"]), Vec::<i32>::new());
        assert_eq!(pids(&["kthreadd"]), Vec::<i32>::new());
        assert_eq!(pids(&["-w", "kthreadd"]), [2]);
        // -w compares the name of any process.
        assert_eq!(pids(&["-w", "myscript"]), [13]);
        // A path ending in '/' has an empty basename: every empty argv[0] matches.
        assert_eq!(pids(&["x/"]), [17, 2]);
        assert_eq!(pids(&["sleep (deleted)"]), [18]);
        assert_eq!(pids(&["nothing", ""]), Vec::<i32>::new());
    }

    #[test]
    fn scripts_and_setproctitle() {
        assert_eq!(pids(&["myscript"]), Vec::<i32>::new());
        // Only where the interpreter is named after the script.
        assert_eq!(pids(&["-x", "myscript"]), [13]);
        assert_eq!(pids(&["-x", "./myscript"]), [13]);
        assert_eq!(pids(&["-x", "/tmp/myscript"]), Vec::<i32>::new());
        assert_eq!(pids(&["daemon"]), [15]);
        assert_eq!(pids(&["daemon:"]), Vec::<i32>::new());
    }

    #[test]
    fn order_single_shot_omit_and_separator() {
        assert_eq!(pids(&["-s", "sleep", "bash"]), [18, 12]);
        assert_eq!(pids(&["sleep", "-o", "18;16,:x", "bash"]), [11, 10, 12]);
        // The same process twice when two programs match it.
        assert_eq!(
            pids(&["sleep", "/bin/sleep"]),
            [18, 16, 11, 10, 18, 16, 11, 10]
        );
        assert_eq!(pids(&["-s", "/usr/bin/sleep", "/bin/sleep"]), [18, 18]);
        assert_eq!(pids(&["-s", "/tmp/sleep"]), [18]);
        let o = opts(&["-S", "--", "-q", "sleep"]);
        assert!(o.quiet && o.single_shot);
        assert_eq!(render(&o, &[1, 2]), b"");
        let o = opts(&["-S", ", ", "sleep"]);
        assert_eq!(render(&o, &[3, 1, 2]), b"3, 1, 2\n");
        assert_eq!(render(&o, &[]), b"");
        assert_eq!(render(&opts(&["--separator="]), &[3, 1]), b"31\n");
    }

    #[test]
    fn root_check_keeps_our_root_only() {
        let mut o = opts(&["sleep"]);
        o.rootdir_check = true;
        assert_eq!(select(&o, &fixture(), b"/"), [18, 11, 10]);
        assert_eq!(select(&o, &fixture(), b"/jail"), [16]);
        // A root that cannot be read is "", which only an unreadable root of ours equals.
        o.programs = vec![b"x/".to_vec()];
        assert_eq!(select(&o, &fixture(), b""), [17]);
    }

    #[test]
    fn omit_lists_as_strtoul_reads_them() {
        let mut v = Vec::new();
        add_to_omit_list(
            b"1,, 2;+3:-1:%PPID:99999999999:99999999999999999999",
            &mut v,
            || 42,
        );
        assert_eq!(v, [1, 2, 3, -1, 42, 1_215_752_191, -1]);
        let mut v = Vec::new();
        add_to_omit_list(b"abc,1x,0x10,%PPIDx,4", &mut v, || 42);
        assert_eq!(v, [4]);
    }

    #[test]
    fn compatibility_options_and_mistakes() {
        let o = opts(&["-n", "-m", "-w", "-x", "a", "--", "-b"]);
        assert!(o.with_workers && o.scripts_too && !o.single_shot);
        assert_eq!(o.programs, [b"a".to_vec(), b"-b".to_vec()]);
        for bad in [&["-d", "x"][..], &["-o"], &["--s"], &["--quiet=1"], &["-?"]] {
            let argv: Vec<OsString> = bad.iter().map(OsString::from).collect();
            assert!(matches!(parse(&argv), Parsed::Exit(1)), "{bad:?}");
        }
    }
}
