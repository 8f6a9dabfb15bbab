//! The command line of `pgrep` and `pkill`, read as procps-ng 4.0.2 reads it: GNU
//! `getopt_long` ([`crate::getopt`]: options anywhere, clustered short options, unique
//! prefixes of long ones, `--` ending options, `POSIXLY_CORRECT`), pkill's `-SIGNAL` taken
//! out of the arguments first, lists split at commas, user and group names looked up, and the
//! same messages and exit statuses for everything wrong.
//!
//! The result is an [`Opts`]; selecting and signalling processes is left to the caller.
//! Messages go to standard error as soon as a problem is found, as procps prints them.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;

use crate::cnum::{atoi, is_space, strict_atol, strtoul};
use crate::getopt::{Getopt, HasArg, LongOpt};
use crate::signal::signal_number;

/// Exit status of a usage error.
pub const EXIT_USAGE: i32 = 2;
/// Exit status of a failure other than a usage error or no match.
pub const EXIT_FATAL: i32 = 3;

/// Which tool is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// List matching processes.
    Pgrep,
    /// Signal matching processes.
    Pkill,
    /// Wait until the matching processes have exited.
    Pidwait,
}

impl Mode {
    /// The name messages start with.
    pub fn prog(self) -> &'static str {
        match self {
            Mode::Pgrep => "pgrep",
            Mode::Pkill => "pkill",
            Mode::Pidwait => "pidwait",
        }
    }
}

/// Namespaces `--ns` compares, in procps' order (bit i of [`Opts::ns_flags`]).
pub const NAMESPACES: [&str; 6] = ["ipc", "mnt", "net", "pid", "user", "uts"];

/// Everything the command line asked for.
#[derive(Debug, Clone)]
pub struct Opts {
    /// pgrep or pkill.
    pub mode: Mode,
    /// -f: match the command line instead of the name.
    pub full: bool,
    /// -l: print the name after the pid.
    pub long: bool,
    /// -a: print the command line after the pid.
    pub longlong: bool,
    /// -o: only the oldest match.
    pub oldest: bool,
    /// -n: only the newest match.
    pub newest: bool,
    /// -v: select what does not match.
    pub negate: bool,
    /// -x: the pattern must match the whole name (or command line).
    pub exact: bool,
    /// -c: print the number of matches.
    pub count: bool,
    /// -e: pkill prints what it signalled.
    pub echo: bool,
    /// -w: threads (pgrep; pkill through --lightweight).
    pub threads: bool,
    /// -i: case-insensitive pattern.
    pub icase: bool,
    /// -O: only processes at least this many seconds old (0: no condition).
    pub older: i32,
    /// The signal pkill sends.
    pub signal: i32,
    /// -q: send with sigqueue and this value.
    pub queue: Option<i32>,
    /// --ns: the reference process (0: none).
    pub ns_pid: i32,
    /// Which of [`NAMESPACES`] --ns compares.
    pub ns_flags: u32,
    /// -d: what separates pids (the last one is followed by a newline).
    pub delim: Vec<u8>,
    /// -g: process groups.
    pub pgrp: Option<Vec<i64>>,
    /// -G: real groups.
    pub rgid: Option<Vec<i64>>,
    /// -F: the pid read from the pid file (matched against the thread-group id).
    pub pid: Option<Vec<i64>>,
    /// -P: parents.
    pub ppid: Option<Vec<i64>>,
    /// -s: sessions.
    pub sid: Option<Vec<i64>>,
    /// -u: effective users.
    pub euid: Option<Vec<i64>>,
    /// -U: real users.
    pub ruid: Option<Vec<i64>>,
    /// -t: terminal names as ps prints them (`pts/3`, `tty1`, `?`).
    pub term: Option<Vec<Vec<u8>>>,
    /// --cgroup: cgroup v2 paths.
    pub cgroup: Option<Vec<Vec<u8>>>,
    /// -A: leave out our ancestors.
    pub ignore_ancestors: bool,
    /// The pattern, if one was given.
    pub pattern: Option<Vec<u8>>,
    /// -r: state letters to select.
    pub runstates: Option<Vec<u8>>,
}

impl Opts {
    fn new(mode: Mode) -> Opts {
        Opts {
            mode,
            full: false,
            long: false,
            longlong: false,
            oldest: false,
            newest: false,
            negate: false,
            exact: false,
            count: false,
            echo: false,
            threads: false,
            icase: false,
            older: 0,
            signal: libc::SIGTERM,
            queue: None,
            ns_pid: 0,
            ns_flags: 0x3f,
            delim: b"\n".to_vec(),
            pgrp: None,
            rgid: None,
            pid: None,
            ppid: None,
            sid: None,
            euid: None,
            ruid: None,
            term: None,
            cgroup: None,
            ignore_ancestors: false,
            pattern: None,
            runstates: None,
        }
    }
}

/// The matching options pgrep and pkill share, before -n/-o (whose wording differs).
macro_rules! matching_head {
    () => {
        " -f, --full                match <pattern> against the whole command line
 -x, --exact               the pattern must match the whole name (or command line)
 -i, --ignore-case         ignore upper and lower case
"
    };
}

/// The matching options pgrep and pkill share, after -n/-o, and the help lines.
macro_rules! matching_tail {
    () => {
        " -O, --older <seconds>     only processes at least <seconds> old
 -g, --pgroup <PGID,...>   only these process groups (0: our own)
 -G, --group <GID,...>     only these real groups (names or numbers)
 -P, --parent <PPID,...>   only children of these processes
 -s, --session <SID,...>   only these sessions (0: our own)
 -t, --terminal <tty,...>  only processes with these controlling terminals (pts/0, tty1)
 -u, --euid <ID,...>       only these effective users (names or numbers)
 -U, --uid <ID,...>        only these real users (names or numbers)
 -r, --runstates <state>   only processes in one of these states (letters: R S D Z T ...)
 -F, --pidfile <file>      only the process whose id is in <file>
 -L, --logpidfile          with -F: fail unless <file> is locked by its owner
 -A, --ignore-ancestors    leave out this command's own ancestors
     --cgroup <path,...>   only processes in these cgroup v2 paths
     --ns <PID>            only processes in the same namespaces as <PID>
     --nslist <ns,...>     which namespaces --ns compares: ipc, mnt, net, pid, user, uts

 -h, --help     show this text and exit
 -V, --version  show the version and exit
"
    };
}

/// `taskdiag pgrep --help`.
pub const PGREP_HELP: &str = concat!(
    "
Usage:
 pgrep [options] <pattern>

Print the ids of the processes whose name matches <pattern>, a POSIX extended regular
expression, and which meet every other condition given. Process data come from one batched
taskdiag snapshot (TASKDIAG_BACKEND=auto|bpf|daemon|procfs).

Output:
 -d, --delimiter <string>  put <string> between ids instead of a newline
 -l, --list-name           print the process name after each id
 -a, --list-full           print the full command line after each id
 -c, --count               print only how many processes matched
 -v, --inverse             select the processes that do not match
 -w, --lightweight         look at every thread, and print thread ids

Matching:
",
    matching_head!(),
    " -n, --newest              keep only the most recently started match
 -o, --oldest              keep only the least recently started match
",
    matching_tail!(),
    "
Exit status: 0 something matched, 1 nothing matched, 2 bad command line, 3 fatal error.
The command itself is never listed. Names are the kernel's 15-byte ones: use -f for more.
"
);

/// `taskdiag pkill --help`.
pub const PKILL_HELP: &str = concat!(
    "
Usage:
 pkill [options] <pattern>

Send a signal (TERM unless told otherwise) to the processes whose name matches <pattern>,
a POSIX extended regular expression, and which meet every other condition given. Each
process is signalled through a pidfd after checking it is still the process that matched,
so a process id reused in the meantime is never hit.

Signal:
 -<sig>, --signal <sig>    the signal, by name (KILL, SIGHUP, rtmin+2) or number
 -q, --queue <value>       send it as sigqueue(3) would, carrying <value>
 -e, --echo                print each process signalled
 -c, --count               print how many processes matched

Matching:
",
    matching_head!(),
    " -n, --newest              only the most recently started match
 -o, --oldest              only the least recently started match
",
    matching_tail!(),
    "
Exit status: 0 at least one process was signalled, 1 none was, 2 bad command line, 3 fatal
error. The command itself is never signalled; its parent and other ancestors are, if they
match (use -A to spare them).
"
);

/// `taskdiag pidwait --help`.
pub const PIDWAIT_HELP: &str = concat!(
    "
Usage:
 pidwait [options] <pattern>

Wait until every process whose name matches <pattern>, a POSIX extended regular
expression, and which meets every other condition given, has exited. Each process is
watched through a pidfd opened after checking it is still the process that matched, so a
process id reused in the meantime is never waited for.

Output:
 -e, --echo                print each process before waiting for it
 -c, --count               print how many processes matched

Matching:
",
    matching_head!(),
    " -n, --newest              only the most recently started match
 -o, --oldest              only the least recently started match
",
    matching_tail!(),
    "
Exit status: 0 at least one process was waited for, 1 none was (nothing matched, or every
match had exited already), 2 bad command line, 3 fatal error. The command itself is never
waited for.
"
);

const SIGNAL_OPT: u32 = 256;
const NS_OPT: u32 = 257;
const NSLIST_OPT: u32 = 258;
const CGROUP_OPT: u32 = 259;

/// A long option that takes an argument (`arg`) or none.
const fn lo(name: &'static str, arg: bool, code: u32) -> LongOpt {
    let has_arg = if arg { HasArg::Required } else { HasArg::No };
    LongOpt::new(name, has_arg, code)
}

/// procps 4.0.2's long options, in its order (which ambiguity messages list).
const LONGOPTS: &[LongOpt] = &[
    lo("signal", true, SIGNAL_OPT),
    lo("ignore-ancestors", false, b'A' as u32),
    lo("count", false, b'c' as u32),
    lo("cgroup", true, CGROUP_OPT),
    lo("delimiter", true, b'd' as u32),
    lo("list-name", false, b'l' as u32),
    lo("list-full", false, b'a' as u32),
    lo("full", false, b'f' as u32),
    lo("pgroup", true, b'g' as u32),
    lo("group", true, b'G' as u32),
    lo("ignore-case", false, b'i' as u32),
    lo("newest", false, b'n' as u32),
    lo("oldest", false, b'o' as u32),
    lo("older", true, b'O' as u32),
    lo("parent", true, b'P' as u32),
    lo("session", true, b's' as u32),
    lo("terminal", true, b't' as u32),
    lo("euid", true, b'u' as u32),
    lo("uid", true, b'U' as u32),
    lo("inverse", false, b'v' as u32),
    lo("lightweight", false, b'w' as u32),
    lo("exact", false, b'x' as u32),
    lo("pidfile", true, b'F' as u32),
    lo("logpidfile", false, b'L' as u32),
    lo("echo", false, b'e' as u32),
    lo("ns", true, NS_OPT),
    lo("nslist", true, NSLIST_OPT),
    lo("queue", true, b'q' as u32),
    lo("runstates", true, b'r' as u32),
    lo("help", false, b'h' as u32),
    lo("version", false, b'V' as u32),
];

/// Short options (getopt syntax) of each tool.
fn shortopts(mode: Mode) -> &'static [u8] {
    match mode {
        Mode::Pgrep => b"lad:vwLF:cfinoxP:O:Ag:s:u:U:G:t:r:?Vh",
        Mode::Pkill => b"eq:LF:cfinoxP:O:Ag:s:u:U:G:t:r:?Vh",
        Mode::Pidwait => b"eLF:cfinoxP:O:Ag:s:u:U:G:t:r:?Vh",
    }
}

/// Writes raw bytes to standard error (messages may quote arguments that are not UTF-8).
pub fn err_bytes(parts: &[&[u8]]) {
    let mut e = std::io::stderr().lock();
    for p in parts {
        let _ = e.write_all(p);
    }
    let _ = e.flush();
}

/// Prints `prog: msg` on standard error.
fn warnx(mode: Mode, msg: &[u8]) {
    err_bytes(&[mode.prog().as_bytes(), b": ", msg, b"\n"]);
}

/// What parsing decided.
pub enum Parsed {
    /// Go ahead with these options.
    Run(Box<Opts>),
    /// Stop now with this exit status (help, version, or an error already reported).
    Exit(i32),
}

fn usage(mode: Mode, to_stdout: bool) -> Parsed {
    let text = match mode {
        Mode::Pgrep => PGREP_HELP,
        Mode::Pkill => PKILL_HELP,
        Mode::Pidwait => PIDWAIT_HELP,
    };
    if to_stdout {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
        Parsed::Exit(0)
    } else {
        err_bytes(&[text.as_bytes()]);
        Parsed::Exit(EXIT_USAGE)
    }
}

/// Why a list could not be read.
enum ListError {
    /// The argument was empty: procps shows its usage.
    Empty,
    /// A member was bad; the message is printed already.
    Bad,
}

/// procps' `split_list`: commas separate members, each converted by `conv`.
fn split_list<T>(
    arg: &[u8],
    mut conv: impl FnMut(&[u8]) -> Option<T>,
) -> Result<Vec<T>, ListError> {
    if arg.is_empty() {
        return Err(ListError::Empty);
    }
    let mut v = Vec::new();
    for part in arg.split(|&c| c == b',') {
        v.push(conv(part).ok_or(ListError::Bad)?);
    }
    Ok(v)
}

fn conv_uid(mode: Mode, s: &[u8]) -> Option<i64> {
    if let Some(n) = strict_atol(s) {
        return Some(n);
    }
    let found = std::str::from_utf8(s).ok().and_then(crate::names::uid_of);
    if found.is_none() {
        warnx(mode, &[b"invalid user name: ", s].concat());
    }
    found.map(i64::from)
}

fn conv_gid(mode: Mode, s: &[u8]) -> Option<i64> {
    if let Some(n) = strict_atol(s) {
        return Some(n);
    }
    let found = std::str::from_utf8(s).ok().and_then(crate::names::gid_of);
    if found.is_none() {
        warnx(mode, &[b"invalid group name: ", s].concat());
    }
    found.map(i64::from)
}

fn conv_num(mode: Mode, s: &[u8], what: &str, zero: impl Fn() -> i64) -> Option<i64> {
    match strict_atol(s) {
        Some(0) => Some(zero()),
        Some(n) => Some(n),
        None => {
            warnx(mode, &[what.as_bytes(), b": ", s].concat());
            None
        }
    }
}

/// Reads a pid file as procps 4.0.2 does: a regular, non-empty file whose first 11 bytes
/// start with a positive number (after blanks) followed by a blank or the end; with `lock`,
/// the file must be locked by someone else (flock or fcntl).
fn read_pidfile(path: &[u8], lock: bool) -> Option<i64> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(OsStr::from_bytes(path))
        .ok()?;
    let md = f.metadata().ok()?;
    if !md.is_file() || md.len() < 1 {
        return None;
    }
    if lock && !has_flock(&f) && !has_fcntl(&f) {
        return None;
    }
    let mut buf = [0u8; 11];
    let n = loop {
        match f.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r.ok()?,
        }
    };
    if n < 1 {
        return None;
    }
    let s = &buf[..n];
    // strtoul: blanks, a sign, digits (11 bytes cannot overflow); a minus negates modulo 2^64.
    let (v, i) = strtoul(s, 10);
    if i == 0 {
        return None;
    }
    // Stored into an int.
    let pid = v as u32 as i32;
    if pid < 1 {
        return None;
    }
    if i < s.len() && s[i] != 0 && !is_space(s[i]) {
        return None;
    }
    Some(i64::from(pid))
}

fn has_flock(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

fn has_fcntl(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero flock struct is valid; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_RDLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_SETLK reads the flock struct, which lives across the call.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &fl) };
    let e = std::io::Error::last_os_error().raw_os_error();
    r == -1 && (e == Some(libc::EACCES) || e == Some(libc::EAGAIN))
}

/// procps' `signal_option`: the first argument `-X` where X is a signal is taken out and
/// names the signal (wherever it stands, even after `--`).
fn take_signal_arg(args: &mut Vec<Vec<u8>>) -> Option<i32> {
    for i in 0..args.len() {
        if args[i].first() == Some(&b'-') {
            let sig = signal_number(&args[i][1..]);
            if sig > -1 {
                args.remove(i);
                return Some(sig);
            }
        }
    }
    None
}

fn try_help(mode: Mode) -> Vec<u8> {
    format!("\nTry `{} --help' for more information.", mode.prog()).into_bytes()
}

/// Reads the command line of `mode`.
pub fn parse(mode: Mode, args: &[OsString]) -> Parsed {
    let mut args: Vec<Vec<u8>> = args.iter().map(|a| a.clone().into_vec()).collect();
    let mut o = Opts::new(mode);
    if mode == Mode::Pkill {
        if let Some(sig) = take_signal_arg(&mut args) {
            o.signal = sig;
        }
    }
    let mut criteria = 0usize;
    let mut pidfile: Option<Vec<u8>> = None;
    let mut lock = 0usize;
    let posixly = std::env::var_os("POSIXLY_CORRECT").is_some();
    let mut g = Getopt::new(&args, shortopts(mode), LONGOPTS, posixly);
    macro_rules! list {
        ($arg:expr, $conv:expr) => {
            match split_list(&$arg, $conv) {
                Ok(v) => v,
                Err(ListError::Empty) => return usage(mode, false),
                Err(ListError::Bad) => return Parsed::Exit(EXIT_USAGE),
            }
        };
    }
    for got in g.by_ref() {
        let (code, arg) = match got {
            Ok((c, a)) => (c, a.map(<[u8]>::to_vec).unwrap_or_default()),
            Err(e) => {
                let mut m = e.message(mode.prog());
                m.push(b'\n');
                err_bytes(&[&m]);
                return usage(mode, false);
            }
        };
        match code {
            SIGNAL_OPT => {
                o.signal = signal_number(&arg);
                if o.signal == -1 && arg.first().is_some_and(u8::is_ascii_digit) {
                    o.signal = atoi(&arg);
                }
            }
            NS_OPT => {
                o.ns_pid = atoi(&arg);
                if o.ns_pid == 0 {
                    // procps 4.0.2 falls through into -r here.
                    o.runstates = Some(arg);
                }
                criteria += 1;
            }
            NSLIST_OPT => {
                let _names = list!(arg, |s: &[u8]| {
                    // Each member resets the set: only the last one counts, as in procps.
                    let i = NAMESPACES.iter().position(|n| n.as_bytes() == s);
                    o.ns_flags = 0;
                    i.map(|i| o.ns_flags |= 1 << i)
                });
            }
            CGROUP_OPT => {
                o.cgroup = Some(list!(arg, |s: &[u8]| Some(s.to_vec())));
                criteria += 1;
            }
            c => match u8::try_from(c).unwrap_or(b'?') {
                b'e' => o.echo = true,
                b'F' => {
                    pidfile = Some(arg);
                    criteria += 1;
                }
                b'G' => {
                    o.rgid = Some(list!(arg, |s: &[u8]| conv_gid(mode, s)));
                    criteria += 1;
                }
                b'L' => lock += 1,
                b'P' => {
                    o.ppid = Some(list!(arg, |s: &[u8]| conv_num(
                        mode,
                        s,
                        "not a number",
                        || 0
                    )));
                    criteria += 1;
                }
                b'U' => {
                    o.ruid = Some(list!(arg, |s: &[u8]| conv_uid(mode, s)));
                    criteria += 1;
                }
                b'V' => {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(
                        out,
                        "{} from taskdiag {} (procps-ng 4.0.2 compatible)",
                        mode.prog(),
                        env!("CARGO_PKG_VERSION")
                    );
                    let _ = out.flush();
                    return Parsed::Exit(0);
                }
                b'c' => o.count = true,
                b'd' => o.delim = arg,
                b'f' => o.full = true,
                b'g' => {
                    o.pgrp = Some(list!(arg, |s: &[u8]| conv_num(
                        mode,
                        s,
                        "invalid process group",
                        // SAFETY: getpgrp cannot fail and touches no memory.
                        || i64::from(unsafe { libc::getpgrp() })
                    )));
                    criteria += 1;
                }
                b'i' => {
                    if o.icase {
                        // procps shows its usage on standard output here and exits 0.
                        return usage(mode, true);
                    }
                    o.icase = true;
                }
                b'l' => o.long = true,
                b'a' => o.longlong = true,
                b'A' => o.ignore_ancestors = true,
                b'n' | b'o' => {
                    if o.oldest || o.negate || o.newest {
                        return usage(mode, false);
                    }
                    if c == u32::from(b'n') {
                        o.newest = true;
                    } else {
                        o.oldest = true;
                    }
                    criteria += 1;
                }
                b'O' => {
                    o.older = atoi(&arg);
                    criteria += 1;
                }
                b's' => {
                    o.sid = Some(list!(arg, |s: &[u8]| conv_num(
                        mode,
                        s,
                        "invalid session id",
                        // SAFETY: getsid(0) asks about this process; no memory is passed.
                        || i64::from(unsafe { libc::getsid(0) })
                    )));
                    criteria += 1;
                }
                b't' => {
                    o.term = Some(list!(arg, |s: &[u8]| Some(s.to_vec())));
                    criteria += 1;
                }
                b'u' => {
                    o.euid = Some(list!(arg, |s: &[u8]| conv_uid(mode, s)));
                    criteria += 1;
                }
                b'v' => {
                    if o.oldest || o.negate || o.newest {
                        return usage(mode, false);
                    }
                    o.negate = true;
                }
                b'w' => o.threads = true,
                b'x' => o.exact = true,
                b'q' => o.queue = Some(atoi(&arg)),
                b'r' => {
                    o.runstates = Some(arg);
                    criteria += 1;
                }
                b'h' => return usage(mode, true),
                _ => return usage(mode, false),
            },
        }
    }
    let operands = g.operands();
    if lock > 0 && pidfile.is_none() {
        let mut m = b"-L without -F makes no sense".to_vec();
        m.extend(try_help(mode));
        warnx(mode, &m);
        return Parsed::Exit(EXIT_USAGE);
    }
    if let Some(path) = pidfile {
        match read_pidfile(&path, lock > 0) {
            Some(pid) => o.pid = Some(vec![pid]),
            None => {
                let mut m = b"pidfile not valid".to_vec();
                m.extend(try_help(mode));
                warnx(mode, &m);
                return Parsed::Exit(1);
            }
        }
    }
    match operands.len() {
        1 => o.pattern = Some(operands[0].to_vec()),
        0 if criteria == 0 => {
            let mut m = b"no matching criteria specified".to_vec();
            m.extend(try_help(mode));
            warnx(mode, &m);
            return Parsed::Exit(EXIT_USAGE);
        }
        0 => {}
        _ => {
            let mut m = b"only one pattern can be provided".to_vec();
            m.extend(try_help(mode));
            warnx(mode, &m);
            return Parsed::Exit(EXIT_USAGE);
        }
    }
    Parsed::Run(Box::new(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn run(mode: Mode, v: &[&str]) -> Result<Opts, i32> {
        match parse(mode, &args(v)) {
            Parsed::Run(o) => Ok(*o),
            Parsed::Exit(c) => Err(c),
        }
    }

    #[test]
    fn options_anywhere_and_clustered() {
        let o = run(Mode::Pgrep, &["sleep", "-lf", "-d,", "-P", "1,2"]).expect("ok");
        assert!(o.long && o.full);
        assert_eq!(o.delim, b",");
        assert_eq!(o.ppid, Some(vec![1, 2]));
        assert_eq!(o.pattern.as_deref(), Some(&b"sleep"[..]));
        let o = run(Mode::Pgrep, &["--parent=5", "--", "-x"]).expect("ok");
        assert_eq!(o.ppid, Some(vec![5]));
        assert_eq!(o.pattern.as_deref(), Some(&b"-x"[..]));
        let o = run(Mode::Pgrep, &["--pare", "7", "--li"]);
        // "--li" is ambiguous (list-name, list-full, lightweight).
        assert_eq!(o.err(), Some(EXIT_USAGE));
        let o = run(Mode::Pgrep, &["--pare", "7", "--list-n"]).expect("ok");
        assert!(o.long);
        assert_eq!(o.ppid, Some(vec![7]));
    }

    #[test]
    fn usage_errors_and_their_statuses() {
        assert_eq!(run(Mode::Pgrep, &[]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["a", "b"]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-z"]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-u"]).err(), Some(EXIT_USAGE));
        assert_eq!(
            run(Mode::Pgrep, &["--count=3", "x"]).err(),
            Some(EXIT_USAGE)
        );
        assert_eq!(run(Mode::Pgrep, &["-n", "-o"]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-v", "-n"]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-P", ""]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-P", "1,x"]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-L", "x"]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-F", "/nonexistent/pid"]).err(), Some(1));
        assert_eq!(run(Mode::Pgrep, &["-i", "-i", "x"]).err(), Some(0));
        assert_eq!(run(Mode::Pkill, &["-w", "x"]).err(), Some(EXIT_USAGE));
        assert_eq!(run(Mode::Pgrep, &["-e", "x"]).err(), Some(EXIT_USAGE));
        assert_eq!(
            run(Mode::Pgrep, &["--nslist", "pid,foo", "x"]).err(),
            Some(2)
        );
    }

    #[test]
    fn pkill_signals() {
        assert_eq!(run(Mode::Pkill, &["-9", "x"]).expect("ok").signal, 9);
        assert_eq!(run(Mode::Pkill, &["x", "-HUP"]).expect("ok").signal, 1);
        assert_eq!(
            run(Mode::Pkill, &["--signal", "KILL", "x"])
                .expect("ok")
                .signal,
            9
        );
        assert_eq!(
            run(Mode::Pkill, &["--signal=5x", "x"]).expect("ok").signal,
            5
        );
        // An unknown name is kept as -1: the kernel refuses it when signalling.
        assert_eq!(
            run(Mode::Pkill, &["--signal", "FOO", "x"])
                .expect("ok")
                .signal,
            -1
        );
        assert_eq!(run(Mode::Pkill, &["x"]).expect("ok").signal, libc::SIGTERM);
        // Only the first -SIG is a signal; the second is an (invalid) option.
        assert_eq!(run(Mode::Pkill, &["-0", "-9", "x"]).err(), Some(EXIT_USAGE));
        // pgrep has no -SIG.
        assert_eq!(run(Mode::Pgrep, &["-9", "x"]).err(), Some(EXIT_USAGE));
        let o = run(Mode::Pkill, &["-q", "12", "-e", "x"]).expect("ok");
        assert_eq!(o.queue, Some(12));
        assert!(o.echo);
    }

    #[test]
    fn lists_and_numbers() {
        let o = run(Mode::Pgrep, &["-u", "root,5,", "-U", "0", "-G", "root"]).expect("ok");
        assert_eq!(o.euid, Some(vec![0, 5, 0]));
        assert_eq!(o.ruid, Some(vec![0]));
        assert_eq!(o.rgid, Some(vec![0]));
        assert_eq!(run(Mode::Pgrep, &["-u", "no such user"]).err(), Some(2));
        // SAFETY: getsid(0) has no preconditions.
        let sid = i64::from(unsafe { libc::getsid(0) });
        assert_eq!(
            run(Mode::Pgrep, &["-s", "0,3"]).expect("ok").sid,
            Some(vec![sid, 3])
        );
    }

    #[test]
    fn ns_quirks_of_4_0_2() {
        let o = run(Mode::Pgrep, &["--ns", "1", "--nslist", "net,pid"]).expect("ok");
        assert_eq!(o.ns_pid, 1);
        assert_eq!(o.ns_flags, 1 << 3, "only the last namespace counts");
        let o = run(Mode::Pgrep, &["--ns", "S"]).expect("ok");
        assert_eq!(o.ns_pid, 0);
        assert_eq!(o.runstates.as_deref(), Some(&b"S"[..]));
    }

    #[test]
    fn pid_files() {
        let dir = std::env::temp_dir().join(format!("pgrep-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let cases: &[(&[u8], Option<i64>)] = &[
            (b"123\n", Some(123)),
            (b"  +77 trailing", Some(77)),
            (b"12x", None),
            (b"-1\n", None),
            (b"0\n", None),
            (b"", None),
            (b"abc", None),
            // Only 11 bytes are read; the number is stored into an int.
            (b"99999999999999999999", Some(1215752191)),
            (b"-4294967295", Some(1)),
        ];
        for (i, (content, want)) in cases.iter().enumerate() {
            let p = dir.join(format!("p{i}"));
            std::fs::write(&p, content).expect("write");
            let got = read_pidfile(p.as_os_str().as_bytes(), false);
            assert_eq!(got, *want, "{:?}", String::from_utf8_lossy(content));
        }
        // A directory or a missing file is not a pid file.
        assert_eq!(read_pidfile(dir.as_os_str().as_bytes(), false), None);
        // -L: an unlocked file fails.
        let p = dir.join("p0");
        assert_eq!(read_pidfile(p.as_os_str().as_bytes(), true), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
