//! Differential tests of `taskdiag pstree` against psmisc pstree 23.6 (/usr/bin/pstree): the
//! same arguments and environment on a fixture tree of processes in awkward states (names
//! with spaces, parentheses, backslashes, control characters, non-ASCII and invalid UTF-8,
//! 15- and 16-byte names; identical sibling subtrees; threads with their own names; processes
//! of another user, one that changed uid without exec; long and odd command lines; a zombie; a
//! deep chain wider than the screen), must print the same bytes and exit with the same status,
//! on both backends, in the C and a UTF-8 locale, at several widths, on a terminal, as an
//! unprivileged user and in a child pid namespace.
//!
//! Trees are rooted at the fixture (or, with -s, trimmed to its ancestors) because the rest of
//! the system changes between two runs; where the system changed anyway, psmisc is run again
//! after ours and ours must match one of the two runs around it (a difference on a system that
//! did not change fails at once: taskdiag_test_support::compare).

use std::process::{Command, Stdio};

use taskdiag_test_support::compare::{agree, agree_by, Mismatch};
use taskdiag_test_support::process::{ensure_installed, Spawned};
use taskdiag_test_support::python;
use taskdiag_test_support::tasks;
use taskdiag_test_support::users::{as_user_sh, user};

use super::BIN;

const BACKENDS: [&str; 2] = ["bpf", "procfs"];

/// The owner of the fixture's processes of "another user": a user of their own, so that
/// selecting that user's processes selects only fixtures (nobody's would include any daemon
/// of another test that comes and goes meanwhile).
const TREE_USER: &str = "taskdiag-tree";

/// The fixture: builds the tree, waits until every process and thread has its final name and
/// every exec has happened, then prints "ready".
const FIXTURE: &str = r#"
import os, sys, threading, time
OTHER = int(sys.argv[1])  # the uid of "another user's" processes
from tdtest import Ready, die_with_parent, set_name as setname, wait_zombie
done = Ready()
def ready():
    done.signal()
def forever():
    while True:
        time.sleep(1000)
def fork(fn):
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent()
            fn()
        finally:
            os._exit(0)
    return pid
# Specs: ("named", name, [kids]) | ("threads", name, [thread names]) | ("setuid", name)
#      | ("zparent",) | ("unshare", name, CLONE_* flags, [kids])
def count(spec):
    if spec[0] == "named":
        return 1 + sum(count(k) for k in spec[2])
    if spec[0] == "unshare":
        return 1 + sum(count(k) for k in spec[3])
    if spec[0] == "threads":
        return 1 + len(spec[2])
    return 1
def run(spec):
    kind = spec[0]
    if kind == "named":
        setname(spec[1])
        for k in spec[2]:
            fork(lambda k=k: run(k))
        ready()
    elif kind == "threads":
        setname(spec[1])
        def t(n):
            setname(n)
            ready()
            forever()
        for n in spec[2]:
            threading.Thread(target=t, args=(n,), daemon=True).start()
        ready()
    elif kind == "setuid":
        os.setgid(OTHER)
        os.setuid(OTHER)
        setname(spec[1])
        ready()
    elif kind == "unshare":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(spec[2]) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        setname(spec[1])
        for k in spec[3]:
            fork(lambda k=k: run(k))
        ready()
    elif kind == "zparent":
        setname(b"zparent")
        wait_zombie(fork(lambda: None))
        ready()
    forever()
def leaf(n):
    return ("named", n, [])
specs = [
    ("named", b"twin", [leaf(b"leafa"), leaf(b"leafb")]),
    ("named", b"twin", [leaf(b"leafa"), leaf(b"leafb")]),
    ("named", b"twin", [leaf(b"leafa")]),
    ("named", b"branchy", [
        ("named", b"b2", [leaf(b"b3"), leaf(b"b3"), ("named", b"b3", [leaf(b"b4")])]),
        ("named", b"c2", [("named", b"c3", [leaf(b"c4"), leaf(b"c4x")])]),
    ]),
    leaf(b"a b"), leaf(b"x(y)z"), leaf(b"back\\slash"), leaf(b"new\nline"), leaf(b"tab\tx"),
    leaf(b"\x1b[1mesc"), leaf(b"fifteen_chars_x"), leaf(b"sixteen_chars_xy"),
    leaf("é名字ü".encode()), leaf(b"\xff\xfe"), leaf(b"a"), leaf(b"-"),
    ("threads", b"threaded", [b"worker-1", b"worker-1", b"worker-2", b"io thread", b"x(y)",
                              "thré".encode()]),
    ("threads", b"solo", [b"solo"]),
    ("setuid", b"user-noexec"),
    ("zparent",),
    # Namespace transitions (-S, -N): net and uts, then ipc below; a new pid namespace for
    # the children (CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID).
    ("unshare", b"netuts", 0x40000000 | 0x04000000, [
        leaf(b"inside"), ("unshare", b"ipcns", 0x08000000, [leaf(b"deeper")])]),
    ("unshare", b"pidns", 0x20000000, [leaf(b"pidkid")]),
]
chain = leaf(b"a_fairly_long_process_name")
for _ in range(8):
    chain = ("named", b"a_fairly_long_process_name", [chain])
specs.append(chain)
setname(b"fixture-root")
die_with_parent()
expected = 0
for s in specs:
    expected += count(s)
    fork(lambda s=s: run(s))
py = sys.executable
execs = []
def execer(argv, uid=None):
    def f():
        if uid is not None:
            os.setgid(uid)
            os.setuid(uid)
            die_with_parent()
        os.execv(argv[0], argv)
    execs.append((fork(f), os.path.basename(argv[0])[:15].encode()))
sleep = "/usr/bin/sleep" if os.path.exists("/usr/bin/sleep") else "/bin/sleep"
# The other user's sleep first: only the uid orders it after root's (psmisc sorts equal
# names by uid).
execer([sleep, "100001"], OTHER)
for _ in range(3):
    execer([sleep, "100000"])
odd = ["a b", "", "", "back\\slash", "tab\there", "\x1b[31mred", "é", "new\nline"]
execer([py, "-c", "import time\ntime.sleep(1e6)"] + odd + ["arg%d" % i for i in range(40)])
execer([py, "-c", "import time; time.sleep(1e6)", "y" * 9000, "end"])
execer([py, "-c", "import time; time.sleep(1e6)", "short", ""])
done.wait(expected)
for pid, comm in execs:
    while True:
        with open("/proc/%d/comm" % pid, "rb") as f:
            if f.read().rstrip(b"\n") == comm:
                break
        time.sleep(0.01)
print("ready", flush=True)
forever()
"#;

fn ensure_psmisc() {
    ensure_installed("/usr/bin/pstree", "psmisc");
}

/// The fixture in a session of its own; killed with its whole process group on drop.
struct Fixture {
    proc: Spawned,
}

impl Fixture {
    fn start() -> Fixture {
        ensure_psmisc();
        let mut proc = Spawned::spawn_session(
            python::code(FIXTURE)
                .arg(user(TREE_USER).to_string())
                .stdout(Stdio::piped()),
        );
        proc.expect_line("ready");
        Fixture { proc }
    }

    fn pid(&self) -> String {
        self.proc.pid().to_string()
    }
}

/// One run's stdout, stderr and exit status.
#[derive(PartialEq, Eq)]
struct Run {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: Option<i32>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.status,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr)
        )
    }
}

/// How to run both tools: through a wrapper command (setpriv, nsenter, script) and with an
/// environment.
#[derive(Clone, Copy)]
struct How<'a> {
    wrap: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    backend: &'a str,
}

fn run_one(how: How, tool: &[&str], args: &[&str]) -> Run {
    let mut cmd = Command::new(how.wrap.first().copied().unwrap_or(tool[0]));
    if !how.wrap.is_empty() {
        cmd.args(&how.wrap[1..]).arg(tool[0]);
    }
    cmd.args(&tool[1..])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("TASKDIAG_BACKEND", how.backend);
    for (k, v) in how.env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run pstree");
    Run {
        stdout: o.stdout,
        stderr: o.stderr,
        status: o.status.code(),
    }
}

/// psmisc (as `pstree`, found on PATH, so messages name it alike) and taskdiag.
fn both(how: How, args: &[&str]) -> (Run, Run) {
    (
        run_one(how, &["pstree"], args),
        run_one(how, &[BIN, "pstree"], args),
    )
}

/// psmisc and taskdiag print the same bytes and exit alike (psmisc read around ours).
fn assert_same(how: How, args: &[&str]) {
    if let Err(m) = agree(
        || run_one(how, &["pstree"], args),
        || run_one(how, &[BIN, "pstree"], args),
    ) {
        fail(&format!("pstree {args:?}"), how, m);
    }
}

/// Fails the test with a mismatch of the two tools.
fn fail(what: &str, how: How, m: Mismatch<Run>) -> ! {
    panic!(
        "{what} differs ({}, env {:?}, wrap {:?}): {}",
        how.backend, how.env, how.wrap, m
    )
}

/// Option sets compared on the fixture.
const FORMS: &[&[&str]] = &[
    &[],
    &["-p"],
    &["-a"],
    &["-u"],
    &["-c"],
    &["-l"],
    &["-n"],
    &["-g"],
    &["-t"],
    &["-T"],
    &["-A"],
    &["-U"],
    &["-G"],
    &["-ap"],
    &["-au"],
    &["-apu"],
    &["-acl"],
    &["-al"],
    &["-at"],
    &["-aT"],
    &["-pn"],
    &["-pg"],
    &["-pt"],
    &["-ut"],
    &["-un"],
    &["-cu"],
    &["-Tu"],
    &["-nl"],
    &["-U", "-p"],
    &["-G", "-a"],
    &["-G", "-l"],
    &["--arguments", "--show-pids", "--uid-changes"],
    &["--compact-not", "--thread-names", "--numeric-sort"],
    &["-S"],
    &["-Sp"],
    &["-Sa"],
    &["-Su"],
    &["--ns-changes", "-c"],
    // Security contexts: every process on its own line, as with -a.
    &["-Z"],
    &["-Zp"],
    &["-Za"],
    &["-ZSu"],
    &["--security-context", "-c", "-T"],
];

#[test]
fn pstree_is_byte_identical_to_psmisc_on_a_fixture_tree() {
    let fx = Fixture::start();
    let root = fx.pid();
    // The fixture exercises what it is meant to (psmisc's own output shows it).
    let how = How {
        wrap: &[],
        env: &[("LANG", "C")],
        backend: "procfs",
    };
    let show = |args: &[&str]| {
        let mut a = args.to_vec();
        a.push(&root);
        String::from_utf8_lossy(&run_one(how, &["pstree"], &a).stdout).into_owned()
    };
    let plain = show(&[]);
    for part in [
        "2*[twin-+-leafa]",
        "`-leafb]",
        "4*[sleep]",
        "6*[{threaded}]",
        "a b",
        "x(y)z",
        "back\\\\slash",
        "new\\012line",
        "\\303\\251",
        "\\377\\376",
        "sixteen_chars_x\n",
        "zparent---zparent",
        "+\n",
    ] {
        assert!(plain.contains(part), "fixture lacks {part:?}:\n{plain}");
    }
    assert!(show(&["-t"]).contains("2*[{worker-1}]"));
    let ns = show(&["-S"]);
    assert!(
        ns.contains("netuts(net,uts)-+-inside") && ns.contains("ipcns(ipc)---deeper"),
        "{ns}"
    );
    assert!(ns.contains("pidns---pidkid(pid)"), "{ns}");
    let u = show(&["-u"]);
    assert!(
        u.contains(&format!("sleep({TREE_USER})"))
            && u.contains(&format!("user-noexec({TREE_USER})")),
        "{u}"
    );
    let a = show(&["-a"]);
    assert!(
        a.contains("(zparent)") && a.contains("...") && a.contains("a b   back"),
        "{a}"
    );
    for backend in BACKENDS {
        for lang in ["C.UTF-8", "C"] {
            let env = [("LANG", lang)];
            let how = How {
                wrap: &[],
                env: &env,
                backend,
            };
            let few: &[&[&str]] = &[&[], &["-a"], &["-apu"], &["-U"], &["-G"]];
            for form in if lang == "C" { few } else { FORMS } {
                let mut a = form.to_vec();
                a.push(&root);
                assert_same(how, &a);
            }
        }
        // Widths from $COLUMNS (read by strtol with base 0), narrow to wider than any line.
        for cols in ["1", "40", "57", "200", "0x50", "010", "junk"] {
            let env = [("LANG", "C.UTF-8"), ("COLUMNS", cols)];
            let how = How {
                wrap: &[],
                env: &env,
                backend,
            };
            for form in [
                &[][..],
                &["-p"],
                &["-a"],
                &["-apu"],
                &["-U"],
                &["-G"],
                &["-aU"],
                &["-l"],
                &["-al"],
            ] {
                let mut a = form.to_vec();
                a.push(&root);
                assert_same(how, &a);
            }
        }
    }
}

#[test]
fn pstree_operands_parents_users_and_threads_match_psmisc() {
    let fx = Fixture::start();
    let root = fx.pid();
    // A thread of the fixture's threaded process, and a process deep in the tree.
    let named = |kids: &[u32], name: &str| {
        *kids
            .iter()
            .find(|&&p| tasks::comm(p).as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no {name} process"))
    };
    let kids = tasks::children(fx.proc.pid());
    let threaded = named(&kids, "threaded");
    let thread = *tasks::tids(threaded).last().expect("a thread");
    assert_ne!(thread, threaded);
    let branchy = named(&kids, "branchy");
    let deep = tasks::children(tasks::children(branchy)[0])[0].to_string();
    let thread = thread.to_string();
    let missing = tasks::missing_pid().to_string();
    for backend in BACKENDS {
        let env = [("LANG", "C.UTF-8")];
        let how = How {
            wrap: &[],
            env: &env,
            backend,
        };
        for a in [
            vec![thread.as_str()],
            vec!["-p", &thread],
            vec!["-t", &thread],
            vec!["-a", &thread],
            vec!["-p", &deep],
            vec!["-T", &thread],
            vec![&missing],
            vec!["-p", &missing],
            vec!["-s", &missing],
            vec!["-s", "99999999999999999999"],
            vec!["99999999999999999999"],
            vec![&root, "-p"],
            vec!["--", &root],
            vec!["-psu", TREE_USER],
            vec![TREE_USER],
            vec!["-u", TREE_USER],
            vec!["-ap", TREE_USER],
        ] {
            assert_same(how, &a);
        }
        // -s reaches process 1, which some hosts hide from BPF task iterators: the BPF
        // backend reads it from /proc then, so it is there on both backends.
        for a in [
            vec!["-s", &deep],
            vec!["-sp", &deep],
            vec!["-sa", &deep],
            vec!["-sA", &thread],
            vec!["-spu", &root],
        ] {
            assert_same(how, &a);
        }
    }
}

#[test]
fn pstree_highlight_color_and_terminal_drawing_match_psmisc() {
    let fx = Fixture::start();
    let root = fx.pid();
    let target = (fx.proc.pid() + 3).to_string();
    for backend in BACKENDS {
        for term in ["xterm", "vt100", "linux", "dumb"] {
            let env = [("LANG", "C.UTF-8"), ("TERM", term)];
            let how = How {
                wrap: &[],
                env: &env,
                backend,
            };
            for a in [
                vec!["-H", &target, &root],
                vec!["-H", &root, "-ap", &root],
                vec!["-h", &root],
                vec!["-C", "age", &root],
                vec!["-C", "AGE", "-H", &root, "-p", &root],
            ] {
                assert_same(how, &a);
            }
        }
        // Without TERM or with an unknown terminal, -H fails and -h is ignored.
        for env in [&[][..], &[("TERM", "no-such-terminal")], &[("TERM", "")]] {
            let how = How {
                wrap: &[],
                env,
                backend,
            };
            assert_same(how, &["-H", "1", &root]);
            assert_same(how, &["-h", &root]);
        }
        // On a terminal: the default line drawing follows the locale.
        let script = |args: &str| format!("pstree {args} {root}");
        for lang in ["C", "C.UTF-8"] {
            for args in ["", "-a", "-p", "-A", "-G", "-u"] {
                let env = [("LANG", lang), ("TERM", "xterm"), ("COLUMNS", "100")];
                // script runs the command through a shell: the same line for both tools,
                // with the binary's directory first on PATH for ours.
                let line = script(args);
                let ours_line = format!("{BIN} {line}");
                let on_tty = |line: &str| {
                    run_one(
                        How {
                            wrap: &["script", "-qec", line],
                            env: &env,
                            backend,
                        },
                        &["/dev/null"],
                        &[],
                    )
                };
                if let Err(m) = agree(|| on_tty(&line), || on_tty(&ours_line)) {
                    panic!("on a terminal, {lang} {args}: {m}");
                }
            }
        }
    }
}

#[test]
fn pstree_errors_and_exit_statuses_match_psmisc() {
    ensure_psmisc();
    let how = How {
        wrap: &[],
        env: &[("LC_ALL", "C")],
        backend: "procfs",
    };
    // getopt's message, then psmisc's usage text, byte for byte, on standard error; status 1.
    for a in [
        &["-x"][..],
        &["--badopt"],
        &["--bogus=1"],
        &["--show-p"],
        &["--long=1"],
        &["-H"],
        &["--highlight-pid"],
        &["-pX"],
    ] {
        let (theirs, _) = both(how, a);
        assert_eq!(theirs.status, Some(1), "{a:?}: psmisc {theirs:?}");
        assert!(
            String::from_utf8_lossy(&theirs.stderr).contains("\n  USER   show only trees"),
            "{a:?}: psmisc {theirs:?}"
        );
        assert_same(how, a);
    }
    // Usage errors without a message of their own: the usage text alone, the same.
    for a in [
        &["1", "2"][..],
        &["12a"],
        &["-C", "size"],
        &["-h", "-h"],
        &["-H", "1", "-H", "2"],
        &["-N", "foo"],
    ] {
        let env = [("LC_ALL", "C"), ("TERM", "xterm")];
        let (theirs, _) = both(How { env: &env, ..how }, a);
        assert_eq!(theirs.status, Some(1), "{a:?}: psmisc {theirs:?}");
        assert!(
            theirs.stderr.starts_with(b"Usage: pstree"),
            "{a:?}: {theirs:?}"
        );
        assert_same(How { env: &env, ..how }, a);
    }
    // Messages that are psmisc's own: the whole output and status.
    for a in [&["no-such-user-xyz"][..], &[""]] {
        assert_same(how, a);
    }
    // -V: version on stderr, status 0, even before a bad option.
    for a in [&["-V"][..], &["--version"], &["-V", "-x"]] {
        let (theirs, ours) = both(how, a);
        assert_eq!((ours.status, theirs.status), (Some(0), Some(0)), "{a:?}");
        assert!(ours.stdout.is_empty() && !ours.stderr.is_empty(), "{a:?}");
    }
    // --help is ours: a manual on stdout, status 0.
    let o = run_one(how, &[BIN, "pstree"], &["--help"]);
    assert_eq!(o.status, Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for word in [
        "--show-pids",
        "EXIT STATUS",
        "COLUMNS",
        "-s, --show-parents",
    ] {
        assert!(help.contains(word), "help lacks {word}");
    }
}

#[test]
fn pstree_as_an_unprivileged_user_matches_psmisc() {
    let user = super::TEST_USER;
    super::test_user();
    let fx = Fixture::start();
    let root = fx.pid();
    let setpriv = as_user_sh(user);
    let mut wrap: Vec<&str> = setpriv.split(' ').collect();
    wrap.push("--");
    let forms: [&[&str]; 8] = [
        &[],
        &["-p"],
        &["-apu"],
        &["-t"],
        &["-aT"],
        &["-s"],
        &["-u", TREE_USER],
        // Only its own processes' namespace links are readable to a user.
        &["-Sp"],
    ];
    let with_root = |a: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        if a.last().map(String::as_str) != Some(TREE_USER) {
            a.push(root.clone());
        }
        a
    };
    let how = How {
        wrap: &wrap,
        env: &[("LANG", "C.UTF-8")],
        backend: "procfs",
    };
    for a in forms {
        let a = with_root(a);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        assert_same(how, &a);
    }
    // The unprivileged user has no BPF: auto falls back to procfs. (libbpf reports its
    // failed attempt on stderr; that is taskdiag's backend selection, not pstree's output.)
    let how = How {
        backend: "auto",
        ..how
    };
    for a in forms {
        let a = with_root(a);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let same = |theirs: &Run, ours: &Run| {
            let noise = String::from_utf8_lossy(&ours.stderr)
                .lines()
                .all(|l| l.starts_with("libbpf: "));
            theirs.stdout == ours.stdout && theirs.status == ours.status && noise
        };
        if let Err(m) = agree_by(
            || run_one(how, &["pstree"], &a),
            || run_one(how, &[BIN, "pstree"], &a),
            same,
        ) {
            fail(&format!("auto as {user}: {a:?}"), how, m);
        }
    }
    // Asking for BPF is refused clearly.
    let o = run_one(
        How {
            wrap: &wrap,
            env: &[],
            backend: "bpf",
        },
        &[BIN, "pstree"],
        &[&root],
    );
    assert_eq!(o.status, Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bpf"), "{o:?}");
}

/// The fixture as process 1 of a new pid namespace with its own /proc. Killing unshare kills
/// the namespace's init (--kill-child), and that every process in it.
struct NsFixture {
    _unshare: Spawned,
    init: u32,
}

impl NsFixture {
    fn start() -> NsFixture {
        ensure_psmisc();
        let mut c = Command::new("unshare");
        python::with_helpers(&mut c)
            .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .args([python::PYTHON, "-c", FIXTURE])
            .arg(user(TREE_USER).to_string())
            .stdout(Stdio::piped());
        let mut unshare = Spawned::spawn(&mut c);
        unshare.expect_line("ready");
        // The namespace's init is unshare's only child.
        let init = tasks::children(unshare.pid())[0];
        NsFixture {
            _unshare: unshare,
            init,
        }
    }
}

#[test]
fn pstree_in_a_child_pid_namespace_matches_psmisc_there() {
    let ns = NsFixture::start();
    let target = ns.init.to_string();
    let wrap = ["nsenter", "--target", &target, "--pid", "--mount", "--"];
    for backend in BACKENDS {
        let how = How {
            wrap: &wrap,
            env: &[("LANG", "C.UTF-8")],
            backend,
        };
        for a in [
            &[][..],
            &["-p", "1"],
            &["-a", "1"],
            &["-apu", "1"],
            &["-pt", "1"],
            &["-spa", "5"],
            &["-S", "1"],
            &["-Sp", "1"],
            // -N shows every tree from pid 1, whatever the operand: here, the namespace's.
            &["-N", "net"],
            &["-N", "uts", "-p"],
            &["-N", "ipc", "-S"],
            &["-N", "pid", "-a"],
            &["-N", "mnt", "-l", "-c"],
            &["-N", "user"],
        ] {
            assert_same(how, a);
        }
        let (_, by_net) = both(how, &["-N", "net"]);
        let text = String::from_utf8_lossy(&by_net.stdout);
        assert_eq!(
            text.matches("\n[").count() + 1,
            3,
            "three net namespaces:\n{text}"
        );
        let (_, ours) = both(how, &["-p", "1"]);
        assert!(
            String::from_utf8_lossy(&ours.stdout).starts_with("fixture-root(1)"),
            "{ours:?}"
        );
    }
}
