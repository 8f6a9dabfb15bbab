//! Command-line parsing for `taskdiag pstree`: psmisc 23.6's options, read with GNU
//! `getopt_long` ([`crate::getopt`]: clustered short options, unambiguous prefixes of long
//! options, options after the operand, `--`), its error messages and its exit statuses.
//!
//! This module only turns arguments into [`Opts`]; it reads nothing from the system except
//! through the [`Env`] it is given (terminal capabilities for `-h`/`-H`, user names for a USER
//! operand). Building and printing the tree is left to the other modules.

use super::term::Caps;
use crate::getopt::{Getopt, HasArg, LongOpt};

/// Line-drawing characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sym {
    /// `|-`, `` `- ``, `-+-`.
    Ascii,
    /// Box-drawing characters in UTF-8.
    Utf,
    /// The VT100 graphics character set, switched in and out around each symbol.
    Vt100,
}

/// What the tree starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The root process (1, or 0 where /proc/0 exists).
    Root,
    /// A PID operand (as psmisc converts it: `strtol`, then truncated to `pid_t`).
    Pid(i32),
    /// A USER operand: every tree rooted at a process of this user.
    User(u32),
}

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// `-a`: command lines.
    pub args: bool,
    /// Merge identical sibling subtrees (cleared by `-c` and `-p`).
    pub compact: bool,
    /// `-u`: uid transitions.
    pub user_change: bool,
    /// `-p`: pids.
    pub pids: bool,
    /// `-g`: process group ids.
    pub pgids: bool,
    /// `-s`: ancestors of the PID operand.
    pub show_parents: bool,
    /// `-n`: siblings by pid instead of by name.
    pub by_pid: bool,
    /// Truncate lines to the output width (cleared by `-l`).
    pub trunc: bool,
    /// `-t`: threads under their own names.
    pub thread_names: bool,
    /// `-T`: no threads.
    pub hide_threads: bool,
    /// Line-drawing characters.
    pub sym: Sym,
    /// `-C age`: color by process age.
    pub color_age: bool,
    /// `-h`/`-H PID`: the process to highlight with its ancestors (0: none).
    pub highlight: i32,
    /// Terminal strings for highlighting, when highlighting.
    pub caps: Option<Caps>,
    /// What to show.
    pub target: Target,
    /// `-S`: namespace transitions.
    pub ns_change: bool,
    /// `-Z`: each process's security context.
    pub scontext: bool,
    /// `-N TYPE`: trees grouped by this namespace (an index into [`NAMESPACES`]).
    pub ns_sort: Option<usize>,
}

/// psmisc's namespace types, in its order (`-S` prints transitions in this order).
pub const NAMESPACES: [&str; 8] = ["cgroup", "ipc", "mnt", "net", "pid", "user", "uts", "time"];

/// What the caller must do after parsing.
#[derive(Debug)]
pub enum Action {
    /// Build and print the tree.
    Run(Box<Opts>),
    /// Print `text` on standard output and exit 0 (`--help`).
    Help,
    /// Print the version on standard error and exit 0 (`-V`, as psmisc).
    Version,
    /// Print `msg` on standard error; with `usage`, the short usage too; exit with `code`.
    Fail {
        /// The message (may be empty).
        msg: Vec<u8>,
        /// Print the usage summary after it.
        usage: bool,
        /// Exit status.
        code: i32,
    },
}

/// The parts of the environment parsing depends on.
pub struct Env<'a> {
    /// Standard output is a terminal.
    pub tty: bool,
    /// The locale's character set is UTF-8.
    pub utf8: bool,
    /// `$TERM`, if set.
    pub term: Option<&'a [u8]>,
    /// `$POSIXLY_CORRECT` is set (options end at the first operand).
    pub posixly_correct: bool,
    /// The pid of this process (what `-h` highlights).
    pub self_pid: i32,
    /// Loads terminal capabilities (`tgetent`); `None` when the terminal is unknown.
    pub load_caps: &'a dyn Fn(&[u8]) -> Option<Caps>,
    /// Looks up a user name (`getpwnam`).
    pub user_uid: &'a dyn Fn(&[u8]) -> Option<u32>,
    /// Whether this process has /proc/self/ns/TYPE (what `-N` checks).
    pub ns_available: &'a dyn Fn(&str) -> bool,
}

/// The code of `--help` (ours; psmisc has none).
const HELP: u32 = 1;

/// psmisc 23.6's long options, in its order (which ambiguity messages list), and `--help`.
const LONG: &[LongOpt] = &[
    LongOpt::new("arguments", HasArg::No, b'a' as u32),
    LongOpt::new("ascii", HasArg::No, b'A' as u32),
    LongOpt::new("compact-not", HasArg::No, b'c' as u32),
    LongOpt::new("color", HasArg::Required, b'C' as u32),
    LongOpt::new("vt100", HasArg::No, b'G' as u32),
    LongOpt::new("highlight-all", HasArg::No, b'h' as u32),
    LongOpt::new("highlight-pid", HasArg::Required, b'H' as u32),
    LongOpt::new("long", HasArg::No, b'l' as u32),
    LongOpt::new("numeric-sort", HasArg::No, b'n' as u32),
    LongOpt::new("ns-sort", HasArg::Required, b'N' as u32),
    LongOpt::new("show-pids", HasArg::No, b'p' as u32),
    LongOpt::new("show-pgids", HasArg::No, b'g' as u32),
    LongOpt::new("show-parents", HasArg::No, b's' as u32),
    LongOpt::new("ns-changes", HasArg::No, b'S' as u32),
    LongOpt::new("thread-names", HasArg::No, b't' as u32),
    LongOpt::new("hide-threads", HasArg::No, b'T' as u32),
    LongOpt::new("uid-changes", HasArg::No, b'u' as u32),
    LongOpt::new("unicode", HasArg::No, b'U' as u32),
    LongOpt::new("version", HasArg::No, b'V' as u32),
    LongOpt::new("security-context", HasArg::No, b'Z' as u32),
    LongOpt::new("help", HasArg::No, HELP),
];

/// Short options (getopt syntax).
const SHORT: &[u8] = b"aAcC:GhH:nN:pglsStTuUVZ";

const PROG: &str = "pstree";

fn usage_fail(msg: impl Into<Vec<u8>>) -> Action {
    Action::Fail {
        msg: msg.into(),
        usage: true,
        code: 1,
    }
}

fn fail(msg: impl Into<Vec<u8>>) -> Action {
    Action::Fail {
        msg: msg.into(),
        usage: false,
        code: 1,
    }
}

/// Parses the arguments (without the program name).
pub fn parse(args: &[Vec<u8>], env: &Env) -> Action {
    let mut o = Opts {
        args: false,
        compact: true,
        user_change: false,
        pids: false,
        pgids: false,
        show_parents: false,
        by_pid: false,
        trunc: true,
        thread_names: false,
        hide_threads: false,
        // psmisc's default: UTF-8 symbols on a terminal in a UTF-8 locale, else ASCII (it
        // considers VT100 graphics and then deliberately keeps ASCII).
        sym: if env.tty && env.utf8 {
            Sym::Utf
        } else {
            Sym::Ascii
        },
        color_age: false,
        highlight: 0,
        caps: None,
        target: Target::Root,
        ns_change: false,
        scontext: false,
        ns_sort: None,
    };
    let mut g = Getopt::new(args, SHORT, LONG, env.posixly_correct);
    for got in g.by_ref() {
        let (code, val) = match got {
            Ok(o) => o,
            // The option's bytes as given (psmisc prints them raw, even when not UTF-8).
            Err(e) => return usage_fail(e.message(PROG)),
        };
        let val = val.unwrap_or_default();
        if code == HELP {
            return Action::Help;
        }
        match char::from_u32(code).unwrap_or('?') {
            'a' => o.args = true,
            'A' => o.sym = Sym::Ascii,
            'c' => o.compact = false,
            'C' if val.eq_ignore_ascii_case(b"age") => o.color_age = true,
            'C' => return usage_fail(String::new()),
            'G' => o.sym = Sym::Vt100,
            'h' => {
                if o.highlight != 0 {
                    return usage_fail(String::new());
                }
                if let Some(caps) = env.term.and_then(|t| (env.load_caps)(t)) {
                    o.highlight = env.self_pid;
                    o.caps = Some(caps);
                }
            }
            'H' => {
                if o.highlight != 0 {
                    return usage_fail(String::new());
                }
                let Some(term) = env.term else {
                    return fail("TERM is not set");
                };
                let Some(caps) = (env.load_caps)(term) else {
                    return fail("Can't get terminal capabilities");
                };
                o.highlight = crate::cnum::atoi(val);
                if o.highlight == 0 {
                    return usage_fail(String::new());
                }
                o.caps = Some(caps);
            }
            'l' => o.trunc = false,
            'n' => o.by_pid = true,
            'N' => {
                let Some(i) = NAMESPACES.iter().position(|n| n.as_bytes() == val) else {
                    return usage_fail(String::new());
                };
                if !(env.ns_available)(NAMESPACES[i]) {
                    return fail(format!(
                        "procfs file for {} namespace not available",
                        NAMESPACES[i]
                    ));
                }
                o.ns_sort = Some(i);
            }
            'p' => {
                o.pids = true;
                o.compact = false;
            }
            'g' => o.pgids = true,
            's' => o.show_parents = true,
            'S' => o.ns_change = true,
            't' => o.thread_names = true,
            'T' => o.hide_threads = true,
            'u' => o.user_change = true,
            'U' => o.sym = Sym::Utf,
            'V' => return Action::Version,
            'Z' => o.scontext = true,
            _ => return usage_fail(String::new()),
        }
    }
    match g.operands() {
        [] => {}
        [one] => {
            if one.first().is_some_and(u8::is_ascii_digit) {
                if !one.iter().all(u8::is_ascii_digit) {
                    return usage_fail(String::new());
                }
                // strtol saturates at LONG_MAX; the result is then stored in a pid_t.
                o.target = Target::Pid(crate::cnum::strtol(one, 10).0 as i32);
            } else {
                match (env.user_uid)(one) {
                    Some(uid) => o.target = Target::User(uid),
                    None => return fail([&b"No such user name: "[..], one].concat()),
                }
            }
        }
        _ => return usage_fail(String::new()),
    }
    Action::Run(Box::new(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(_: &[u8]) -> Option<Caps> {
        Some(Caps::default())
    }

    fn user(n: &[u8]) -> Option<u32> {
        (n == b"root").then_some(0)
    }

    fn run(args: &[&str]) -> Action {
        run_bytes(
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
    }

    fn run_bytes(args: &[Vec<u8>]) -> Action {
        let env = Env {
            tty: false,
            utf8: true,
            term: Some(b"xterm"),
            posixly_correct: false,
            self_pid: 77,
            load_caps: &caps,
            user_uid: &user,
            ns_available: &|n| n != "time",
        };
        parse(args, &env)
    }

    #[test]
    fn bytes_that_are_not_utf8_reach_the_message_unchanged() {
        for (arg, want) in [
            (
                b"-\xff".to_vec(),
                b"pstree: invalid option -- '\xff'".to_vec(),
            ),
            (
                b"no\xffbody".to_vec(),
                b"No such user name: no\xffbody".to_vec(),
            ),
        ] {
            match run_bytes(&[arg]) {
                Action::Fail { msg, .. } => assert_eq!(msg, want),
                other => panic!("{other:?}"),
            }
        }
    }

    fn opts(args: &[&str]) -> Opts {
        match run(args) {
            Action::Run(o) => *o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn failure(args: &[&str]) -> (String, bool, i32) {
        match run(args) {
            Action::Fail { msg, usage, code } => {
                (String::from_utf8(msg).expect("UTF-8"), usage, code)
            }
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn clusters_long_prefixes_and_permutation() {
        let o = opts(&["-apu", "--numeric", "42", "-l"]);
        assert!(o.args && o.pids && !o.compact && o.user_change && o.by_pid && !o.trunc);
        assert_eq!(o.target, Target::Pid(42));
        assert_eq!(failure(&["--", "-5"]).0, "No such user name: -5");
        let o = opts(&["-H1", "-Cage"]);
        assert_eq!((o.highlight, o.color_age), (1, true));
        assert_eq!(opts(&["--highlight-pid", "9"]).highlight, 9);
        assert_eq!(opts(&["-h"]).highlight, 77);
        assert_eq!(opts(&["root"]).target, Target::User(0));
        assert_eq!(opts(&["-A", "-U"]).sym, Sym::Utf);
        assert_eq!(opts(&["-U", "-G"]).sym, Sym::Vt100);
    }

    #[test]
    fn pid_operands_convert_like_strtol_into_pid_t() {
        assert_eq!(opts(&["99999999999999999999"]).target, Target::Pid(-1));
        assert_eq!(opts(&["4294967297"]).target, Target::Pid(1));
        assert_eq!(failure(&["12a"]).2, 1);
    }

    #[test]
    fn errors_read_like_getopt_and_exit_1() {
        assert_eq!(
            failure(&["-x"]),
            ("pstree: invalid option -- 'x'".into(), true, 1)
        );
        assert!(failure(&["--show-p"])
            .0
            .contains("is ambiguous; possibilities:"));
        assert_eq!(
            failure(&["--long=3"]).0,
            "pstree: option '--long' doesn't allow an argument"
        );
        assert_eq!(
            failure(&["-H"]).0,
            "pstree: option requires an argument -- 'H'"
        );
        assert_eq!(
            failure(&["--color"]).0,
            "pstree: option '--color' requires an argument"
        );
        assert_eq!(failure(&["nosuch"]).0, "No such user name: nosuch");
        assert!(failure(&["1", "2"]).1);
        assert!(failure(&["-h", "-h"]).1);
        assert!(failure(&["-H", "0"]).1);
        assert!(failure(&["-C", "size"]).1);
        assert!(opts(&["-Z"]).scontext && opts(&["--security-context"]).scontext);
        assert!(failure(&["-N", "bogus"]).1);
        assert_eq!(
            failure(&["-N", "time"]),
            (
                "procfs file for time namespace not available".into(),
                false,
                1
            )
        );
        let Action::Run(o) = run(&["-S", "-N", "net"]) else {
            panic!("-S -N net")
        };
        assert_eq!((o.ns_change, o.ns_sort), (true, Some(3)));
        assert!(matches!(run(&["-V", "-x"]), Action::Version));
        assert!(matches!(run(&["--help"]), Action::Help));
    }
}
