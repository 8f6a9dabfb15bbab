//! Differential tests of `taskdiag pgrep` and `taskdiag pkill` against procps-ng 4.0.2's
//! (/usr/bin/pgrep, /usr/bin/pkill): the same arguments on the same processes must give the
//! same output, messages and exit status, on both backends, as root, as an unprivileged user
//! and in a child pid namespace.
//!
//! The processes are a fixture session (FIXTURE below): names with spaces and parentheses,
//! exactly 15 and 16 bytes long, UTF-8 and UTF-8 cut by the kernel's 15-byte limit, control
//! characters, a 20,000-byte command line, other users (nobody; real nobody with effective
//! root; the test user), its own process group, another network namespace, named threads, a
//! zombie and a process on a pty. Comparisons are restricted to the fixture (by session,
//! parent, terminal or pid file) because the rest of the system changes between two runs;
//! where it changed anyway, procps is run again after ours and ours must agree with one of the
//! two runs around it (taskdiag_test_support::compare).
//!
//! pkill is compared on two identical fixtures, one for each tool: the echoed lines (with pids
//! mapped back to fixture roles), the messages, the exit status and which processes died must
//! be the same.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use taskdiag_test_support::compare::agree;
use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{output_in_own_group, output_within, wait_for, Spawned};
use taskdiag_test_support::tasks;
use taskdiag_test_support::users::user_gid;

use super::{test_user, BIN, TEST_USER};

/// The fixture session: forks the processes, prints their pids as JSON, then waits. It never
/// reaps its children, so the zombie stays and killed children remain visible as zombies.
const FIXTURE: &str = r#"
import os, sys, json, time, signal, ctypes, threading, pty
d, test_uid, test_gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SLEEP = "/bin/sleep"
pids = {}

def fork(key, fn):
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    pids[key] = pid

def run(path, argv, ids=None, pgrp=False, netns=False):
    def f():
        if pgrp:
            os.setpgid(0, 0)
        if netns:
            if ctypes.CDLL(None, use_errno=True).unshare(0x40000000) != 0:
                os._exit(1)
        if ids:
            ruid, euid, rgid, egid = ids
            os.setgroups([])
            os.setresgid(rgid, egid, egid)
            os.setresuid(ruid, euid, euid)
        os.execv(path, argv)
    return f

def link(name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        os.symlink(SLEEP, p)
    return p

fork("plain", run(SLEEP, ["sleep", "1000"]))
fork("spaces", run(link("name with spaces"), ["name with spaces", "1000"]))
fork("fifteen", run(link("fifteen_chars_x"), ["fifteen_chars_x", "1000"]))
fork("sixteen", run(link("sixteen_chars_xy"), ["sixteen_chars_xy", "1000"]))
fork("parens", run(link("a) (b"), ["a) (b", "1000"]))
fork("utf8", run(link("h\u00e9llo w\u00f6rld"), ["h\u00e9llo w\u00f6rld", "1000"]))
fork("utf8cut", run(link("\u00e9" * 8), ["\u00e9" * 8, "1000"]))
fork("nobody", run(SLEEP, ["sleep", "1001"], ids=(65534, 65534, 65534, 65534)))
fork("setuid", run(SLEEP, ["sleep", "1002"], ids=(65534, 0, 65534, 0)))
fork("testuser", run(SLEEP, ["sleep", "1003"], ids=(test_uid, test_uid, test_gid, test_gid)))
fork("pgrp", run(SLEEP, ["sleep", "1004"], pgrp=True))
fork("netns", run(SLEEP, ["sleep", "1005"], netns=True))
fork("longcmd", run(sys.executable, [sys.executable, "-c", "import time; time.sleep(1000)", "x" * 20000]))

def ctrl():
    with open("/proc/self/comm", "w") as f:
        f.write("t\tab\nnl")
    time.sleep(1000)
fork("ctrl", ctrl)

def threads():
    def w(name):
        with open("/proc/self/task/%d/comm" % threading.get_native_id(), "w") as f:
            f.write(name)
        time.sleep(1000)
    for n in ("worker-a", "worker-b"):
        threading.Thread(target=w, args=(n,), daemon=True).start()
    time.sleep(1000)
fork("threads", threads)
fork("zombie", lambda: None)

pid, master = pty.fork()
if pid == 0:
    os.execv(link("ttysleep"), ["ttysleep", "1000"])
    os._exit(127)
pids["tty"] = pid

print(json.dumps(pids), flush=True)
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
while True:
    time.sleep(1000)
"#;

/// Names the fixture's processes have once they are ready.
const COMMS: &[(&str, &[u8])] = &[
    ("plain", b"sleep"),
    ("spaces", b"name with space"),
    ("fifteen", b"fifteen_chars_x"),
    ("sixteen", b"sixteen_chars_x"),
    ("parens", b"a) (b"),
    ("utf8", "h\u{e9}llo w\u{f6}rld".as_bytes()),
    // Eight two-byte characters cut to comm's 15 bytes, inside the eighth. (Before its exec
    // the child's command line is the fixture's, which names "name with spaces".)
    (
        "utf8cut",
        b"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3",
    ),
    ("nobody", b"sleep"),
    ("setuid", b"sleep"),
    ("testuser", b"sleep"),
    ("pgrp", b"sleep"),
    ("netns", b"sleep"),
    ("ctrl", b"t\tab\nnl"),
    ("tty", b"ttysleep"),
];

/// The fixture session; its processes are killed with the session's process group (the
/// leader's) on drop, and those that left it (the process group, pty and network namespace
/// ones) by pid before.
struct Fixture {
    _leader: Spawned,
    pids: HashMap<String, u32>,
    dir: TempDir,
}

fn comm(pid: u32) -> Option<Vec<u8>> {
    tasks::comm_bytes(pid)
}

fn state(pid: u32) -> Option<char> {
    tasks::state(pid)
}

impl Fixture {
    fn start() -> Fixture {
        let uid = test_user();
        let gid = user_gid(TEST_USER);
        let dir = TempDir::new("pgrep");
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg("-c")
            .arg(FIXTURE)
            .arg(dir.path())
            .arg(uid.to_string())
            .arg(gid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut leader = Spawned::spawn_session(&mut cmd);
        let line = leader.first_line();
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("fixture said {line:?}: {e}"));
        let mut pids: HashMap<String, u32> = v
            .as_object()
            .expect("object")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().expect("pid") as u32))
            .collect();
        pids.insert("leader".into(), leader.pid());
        let f = Fixture {
            _leader: leader,
            pids,
            dir,
        };
        wait_for("the pgrep fixture to be set up", || f.ready());
        f
    }

    /// Whether every process has its final name, the threads theirs, the long command line
    /// is in place and the zombie is one.
    fn ready(&self) -> bool {
        {
            let names_ok = COMMS
                .iter()
                .all(|(k, c)| comm(self.pid(k)).as_deref() == Some(*c));
            let threads_ok = std::fs::read_dir(format!("/proc/{}/task", self.pid("threads")))
                .map(|d| d.count() == 3)
                .unwrap_or(false);
            let long_ok = std::fs::read(format!("/proc/{}/cmdline", self.pid("longcmd")))
                .is_ok_and(|c| c.len() > 20000);
            let zombie_ok = state(self.pid("zombie")) == Some('Z');
            let workers_ok = threads_ok && {
                let tids: Vec<u32> = self.tids("threads");
                let names: BTreeSet<Vec<u8>> = tids
                    .iter()
                    .filter_map(|&t| comm(t))
                    .collect::<BTreeSet<_>>();
                names.contains(&b"worker-a"[..]) && names.contains(&b"worker-b"[..])
            };
            names_ok && workers_ok && long_ok && zombie_ok
        }
    }

    fn pid(&self, key: &str) -> u32 {
        *self.pids.get(key).unwrap_or_else(|| panic!("no {key}"))
    }

    fn tids(&self, key: &str) -> Vec<u32> {
        tasks::tids(self.pid(key))
    }

    fn sid(&self) -> String {
        self.pid("leader").to_string()
    }

    /// "pts/N" of the pty process.
    fn tty(&self) -> String {
        let l = std::fs::read_link(format!("/proc/{}/fd/0", self.pid("tty"))).expect("tty link");
        l.to_string_lossy()
            .strip_prefix("/dev/")
            .expect("/dev/ path")
            .to_string()
    }

    /// The fixture's roles by pid (the leader included); threads other than a process's
    /// first are "ROLE#1", "ROLE#2" in tid order.
    fn roles(&self) -> HashMap<u32, String> {
        let mut m = HashMap::new();
        for (k, &p) in &self.pids {
            m.insert(p, k.clone());
            let tids: Vec<u32> = self.tids(k).into_iter().filter(|&t| t != p).collect();
            for (i, t) in tids.into_iter().enumerate() {
                m.insert(t, format!("{k}#{}", i + 1));
            }
        }
        m
    }

    /// Which roles are dead (gone or zombies) now.
    fn dead(&self) -> BTreeSet<String> {
        self.pids
            .iter()
            .filter(|(k, _)| k.as_str() != "leader")
            .filter(|(_, &p)| matches!(state(p), None | Some('Z' | 'X')))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Whether every process of the fixture is done with the signals sent to it.
    fn quiet(&self) -> bool {
        self.pids.values().all(|&p| tasks::quiet(p))
    }

    /// Replaces `{sid}`, `{leader}`, `{pgrp}`, `{tty}`, `{netns}` in arguments.
    fn expand(&self, args: &[&str]) -> Vec<String> {
        args.iter()
            .map(|a| {
                a.replace("{sid}", &self.sid())
                    .replace("{leader}", &self.pid("leader").to_string())
                    .replace("{pgrp}", &self.pid("pgrp").to_string())
                    .replace("{netns}", &self.pid("netns").to_string())
                    .replace("{tty}", &self.tty())
            })
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for (k, &p) in &self.pids {
            if k != "leader" {
                // SAFETY: kill takes plain integers. The fixture never reaps its children, so
                // while its leader (our unreaped child) lives, their pids are theirs.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
        }
    }
}

/// How to run a tool.
#[derive(Clone, Copy)]
enum Who {
    Root,
    User,
}

/// `prog` with `args`, as root or as the test user; argv[0] is the program's name without
/// its directory, as when a script runs it through PATH (getopt's messages start with it).
fn command(prog: &str, args: &[String], who: Who) -> Command {
    match who {
        Who::Root => {
            let mut c = Command::new(prog);
            c.arg0(prog.rsplit('/').next().unwrap_or(prog)).args(args);
            c
        }
        Who::User => {
            let mut c = super::as_test_user(prog);
            c.args(args);
            c
        }
    }
}

/// Runs `cmd` in a process group of its own and collects its output; if it has not ended
/// after a minute, kills that group (only processes this test started) and fails, showing
/// what it printed (a hung tool must fail the test, not hang it).
fn output(cmd: &mut Command) -> Output {
    output_within(cmd, Duration::from_secs(60))
}

/// Runs procps' `tool` (pgrep or pkill).
fn procps(tool: &str, args: &[String], who: Who) -> Output {
    let prog = match who {
        Who::Root => format!("/usr/bin/{tool}"),
        // setpriv finds it through PATH and passes the name as argv[0].
        Who::User => tool.to_string(),
    };
    output(
        command(&prog, args, who)
            .env("LC_ALL", "C.UTF-8")
            .stdin(Stdio::null()),
    )
}

/// Runs `taskdiag tool` on `backend`.
fn ours(tool: &str, args: &[String], backend: &str, who: Who) -> Output {
    let mut all = vec![tool.to_string()];
    all.extend(args.iter().cloned());
    output(
        command(BIN, &all, who)
            .env("LC_ALL", "C.UTF-8")
            .env("TASKDIAG_BACKEND", backend)
            .stdin(Stdio::null()),
    )
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn same_output(a: &Output, b: &Output) -> bool {
    a.status.code() == b.status.code() && a.stdout == b.stdout && a.stderr == b.stderr
}

fn backends(who: Who) -> &'static [&'static str] {
    match who {
        Who::Root => &["bpf", "procfs"],
        // BPF needs privileges: the unprivileged user gets procfs (auto) only.
        Who::User => &["auto"],
    }
}

/// pgrep `args` must give the same status, output and messages from both tools. Returns
/// whether anything was printed (so callers can tell a vacuous agreement).
fn check_pgrep(args: &[String], who: Who) -> bool {
    let mut printed = false;
    for backend in backends(who) {
        let got = agree(
            || Shown(procps("pgrep", args, who)),
            || Shown(ours("pgrep", args, backend, who)),
        )
        .unwrap_or_else(|m| panic!("pgrep {args:?} on {backend}: {m}"));
        printed |= !got.0.stdout.is_empty();
    }
    printed
}

/// A tool's output, compared by status, output and messages, and shown as text.
struct Shown(Output);

impl PartialEq for Shown {
    fn eq(&self, other: &Shown) -> bool {
        same_output(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&show(&self.0))
    }
}

/// Like [`check_pgrep`], comparing only the lines about the processes in `pids`.
fn check_pgrep_within(args: &[String], pids: &BTreeSet<String>, who: Who) {
    let keep = |o: &Output| -> (Option<i32>, Vec<String>) {
        let lines = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| pids.contains(l.split(' ').next().unwrap_or("")))
            .map(str::to_string)
            .collect();
        (o.status.code(), lines)
    };
    for backend in backends(who) {
        let got = agree(
            || keep(&procps("pgrep", args, who)),
            || keep(&ours("pgrep", args, backend, who)),
        )
        .unwrap_or_else(|m| panic!("pgrep {args:?} on {backend}: {m}"));
        assert!(
            !got.1.is_empty(),
            "pgrep {args:?} on {backend}: nothing of the fixture"
        );
    }
}

#[test]
fn pgrep_matches_procps_on_the_fixture() {
    let f = Fixture::start();
    // Old enough for -O 1: the leader (the oldest) started more than a second ago.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let uptime = || -> f64 {
        tasks::read_string("/proc/uptime")
            .and_then(|u| u.split_whitespace().next()?.parse().ok())
            .expect("/proc/uptime")
    };
    let started = |p: u32| -> f64 {
        tasks::stat(p)
            .and_then(|s| s.get(19)?.parse::<f64>().ok())
            .expect("the fixture's start time")
            / hz
    };
    let youngest = f.pids.values().map(|&p| started(p)).fold(0.0, f64::max);
    let age = uptime() - youngest;
    if age < 1.5 {
        std::thread::sleep(Duration::from_secs_f64(1.5 - age));
    }
    let pidfile = f.dir.join("pidfile");
    std::fs::write(&pidfile, format!("{}\n", f.pid("threads"))).expect("pidfile");
    let pidfile = pidfile.to_string_lossy().to_string();
    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .expect("cgroup")
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        .unwrap_or_else(|| "/".into());
    let s: &[&str] = &["-s", "{sid}"];
    let sets: Vec<Vec<&str>> = vec![
        vec![],
        vec!["-l"],
        vec!["-a"],
        vec!["-c"],
        vec!["-d", ","],
        vec!["-d", "::", "-l"],
        vec!["-w"],
        vec!["-w", "-l"],
        vec!["-w", "-a", "-d", " | "],
        vec!["-w", "-c", "worker"],
        vec!["-w", "-l", "-x", "worker-."],
        vec!["sleep"],
        vec!["-x", "sleep"],
        vec!["-x", "slee"],
        vec!["-f", "sleep 100[0-3]"],
        vec!["-f", "-x", "sleep 1000"],
        vec!["-f", "-a", "^/usr/bin/python3"],
        vec!["-i", "SLEEP"],
        vec!["-i", "-x", "H\u{c9}LLO W\u{d6}RLD"],
        vec!["-n"],
        vec!["-o"],
        vec!["-n", "-l", "sleep"],
        vec!["-o", "-a", "sleep"],
        vec!["-n", "-w"],
        vec!["-u", "nobody"],
        vec!["-u", "0", "-l"],
        vec!["-U", "nobody", "-l"],
        vec!["-U", "root,nobody", "-c"],
        vec!["-u", TEST_USER],
        vec!["-G", "nogroup"],
        vec!["-G", "0", "-l"],
        vec!["-g", "{pgrp}"],
        vec!["-g", "{leader},{pgrp}", "-l"],
        vec!["-P", "{leader}", "-l"],
        vec!["-r", "Z", "-l"],
        vec!["-r", "Z", "-a"],
        vec!["-r", "Z", "-f", "defunct"],
        vec!["-r", "SZ", "-c"],
        vec!["-r", "R"],
        vec!["-l", "-x", "name with space"],
        vec!["-a", "-f", "name with spaces"],
        vec!["-a", "-f", r"^a\) \(b 1000$"],
        vec!["-x", r"a\) \(b"],
        vec!["-l", "fifteen_chars_x"],
        vec!["-x", "sixteen_chars_xy"],
        vec!["sixteen_chars_xy"],
        vec!["-f", "sixteen_chars_xy"],
        vec!["-x", "sixteen_chars_x"],
        vec!["-l", "h\u{e9}llo"],
        vec!["-l", "\u{e9}"],
        vec!["-a", "-f", "\u{e9}"],
        vec!["-l", "t.ab.nl"],
        vec!["-l", "t\tab"],
        vec!["-l", "[?]"],
        vec!["-f", "-c", "x{2000}$"],
        vec!["-a", "-f", "x{20000}$"],
        vec!["-O", "0"],
        vec!["-O", "1", "-c"],
        vec!["-O", "100000"],
        vec!["--ns", "{leader}", "-l"],
        vec!["--ns", "{netns}", "--nslist", "net", "-l"],
        vec!["--ns", "{netns}", "--nslist", "net,pid", "-c"],
        vec!["--ns", "S", "-c"],
        vec!["--cgroup", &own_cgroup, "-c"],
        vec!["--cgroup", "/no/such/cgroup"],
        vec!["-t", "?", "-l"],
        vec!["-A", "-c"],
        vec!["--list-name", "--exact", "sleep"],
        vec!["--parent={leader}", "--count"],
        vec!["--runstates", "S", "--lightweight", "--delimiter", ";"],
        vec!["-lf", "-xi", "SLEEP 1001"],
    ];
    let mut printed = 0;
    for set in &sets {
        let mut args = set.clone();
        args.extend_from_slice(s);
        printed += usize::from(check_pgrep(&f.expand(&args), Who::Root));
    }
    // Most sets select something: agreement on nothing would prove little.
    assert!(
        printed >= 55,
        "only {printed} of {} sets printed anything",
        sets.len()
    );
    // -v negates the session test too, so it selects the rest of the system, which changes
    // between two runs: compare the fixture's part of the answers.
    let mine: BTreeSet<String> = f
        .pids
        .values()
        .flat_map(|&p| {
            let mut v = vec![p];
            v.extend(
                std::fs::read_dir(format!("/proc/{p}/task"))
                    .into_iter()
                    .flat_map(|d| {
                        d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    }),
            );
            v
        })
        .map(|p| p.to_string())
        .collect();
    for set in [
        &["-v", "sleep"][..],
        &["-v", "-l", "sleep"],
        &["-v", "-a", "-f", "sleep"],
        &["--inverse", "--full", "sleep", "-w", "-l"],
    ] {
        let mut args = set.to_vec();
        args.extend_from_slice(s);
        check_pgrep_within(&f.expand(&args), &mine, Who::Root);
    }
    // Kernel threads have no command line: -f and -a see "[name]".
    assert!(check_pgrep(
        &[
            "-a".into(),
            "-f".into(),
            "-x".into(),
            r"\[kthreadd\]".into(),
        ],
        Who::Root,
    ));
    // Restricted by other means than the session.
    for args in [
        &["-t", "{tty}", "-l"][..],
        &["-t", "{tty},tty63", "-a"],
        &["-P", "{leader}", "-n"],
        &["-F", &pidfile],
        &["-F", &pidfile, "-w", "-l"],
        &["-L", "-F", &pidfile],
        &["-g", "{pgrp}", "-l"],
    ] {
        let printed = check_pgrep(&f.expand(args), Who::Root);
        assert!(printed || args.contains(&"-L"), "{args:?} printed nothing");
    }
    // The same as an unprivileged user (procfs).
    for set in [
        &[][..],
        &["-l"],
        &["-a", "-w"],
        &["-u", TEST_USER, "-l"],
        &["-f", "x{20000}$", "-c"],
        &["--ns", "{leader}", "-c"],
    ] {
        let mut args = set.to_vec();
        args.extend_from_slice(s);
        assert!(check_pgrep(&f.expand(&args), Who::User), "{args:?}");
    }
    // -v selects the rest of the system (see above): the fixture's part of it.
    let mut args = vec!["-x", "sleep", "-v"];
    args.extend_from_slice(s);
    check_pgrep_within(&f.expand(&args), &mine, Who::User);
}

#[test]
fn pgrep_errors_match_procps() {
    // Status and first line of standard error (the usage text after it is our own).
    let cases: &[&[&str]] = &[
        &[],
        &["a("],
        &["-x", "[z-a]"],
        &["a", "b"],
        &["-L", "x"],
        &["-u", "no_such_user_xyz"],
        &["-U", "no_such_user_xyz", "x"],
        &["-G", "no_such_group_xyz"],
        &["-g", "x"],
        &["-s", "1,x"],
        &["-P", "1,x"],
        &["-P", ""],
        &["-z"],
        &["--count=4", "x"],
        &["--euid"],
        &["-u"],
        &["--n", "x"],
        &["--l", "x"],
        &["--foo=1"],
        &["-n", "-o"],
        &["-v", "-n"],
        &["-F", "/nonexistent/pidfile"],
        &["-F", "/dev/null"],
        &["--nslist", "pid,foo", "x"],
        &["--nslist", "", "x"],
        &["--ns", "-1", "x"],
        &["-?"],
    ];
    let first = |o: &Output| {
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    for tool in ["pgrep", "pkill"] {
        for case in cases {
            let args: Vec<String> = case.iter().map(|s| s.to_string()).collect();
            let want = procps(tool, &args, Who::Root);
            let got = ours(tool, &args, "procfs", Who::Root);
            assert_eq!(
                (want.status.code(), first(&want)),
                (got.status.code(), first(&got)),
                "{tool} {args:?}:\n=== procps\n{}=== taskdiag\n{}",
                show(&want),
                show(&got)
            );
            assert!(want.stdout.is_empty() && got.stdout.is_empty(), "{args:?}");
        }
    }
    // Options pkill has and pgrep has not (never run as pkill: they would signal).
    for case in [&["-e", "x"][..], &["-q", "1", "x"]] {
        let args: Vec<String> = case.iter().map(|s| s.to_string()).collect();
        let want = procps("pgrep", &args, Who::Root);
        let got = ours("pgrep", &args, "procfs", Who::Root);
        assert_eq!(
            (want.status.code(), first(&want)),
            (got.status.code(), first(&got)),
            "pgrep {args:?}"
        );
    }
    for case in [
        &["-FOO", "x"][..],
        &["-w", "x"],
        &["-v", "x"],
        &["-l", "x"],
        &["-0", "-9", "x"],
        &["--signal"],
    ] {
        let args: Vec<String> = case.iter().map(|s| s.to_string()).collect();
        let want = procps("pkill", &args, Who::Root);
        let got = ours("pkill", &args, "procfs", Who::Root);
        assert_eq!(
            (want.status.code(), first(&want)),
            (got.status.code(), first(&got)),
            "pkill {args:?}"
        );
    }
    // -i twice shows the usage on standard output and succeeds, as procps does.
    let o = ours(
        "pgrep",
        &["-i".into(), "-i".into(), "x".into()],
        "procfs",
        Who::Root,
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--list-full"));
    let o = ours("pkill", &["--help".into()], "procfs", Who::Root);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--signal"));
}

#[test]
fn pgrep_never_lists_itself_and_a_drops_ancestors() {
    // A shell in its own session runs the tool: without -A the shell (the tool's parent, in
    // the same session) is listed, with -A it is not; the tool itself never is.
    for (tool, backend) in [
        ("/usr/bin/pgrep", "".to_string()),
        (BIN, "bpf".to_string()),
        (BIN, "procfs".to_string()),
    ] {
        let sub = if tool == BIN { " pgrep" } else { "" };
        let script = format!(
            "echo $$; {tool}{sub} -s 0; echo rc=$?; {tool}{sub} -A -s 0; echo rc=$?; \
             {tool}{sub} -s 0 -f -- '-s 0'; echo rc=$?"
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]).env("TASKDIAG_BACKEND", &backend);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let o = output_in_own_group(&mut cmd, Duration::from_secs(60));
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let lines: Vec<&str> = text.lines().collect();
        let sh = lines[0];
        // The shell's own command line contains "-s 0" too: only it matches -f.
        assert_eq!(
            lines[1..],
            [sh, "rc=0", "rc=1", sh, "rc=0"],
            "{tool} {backend}: {text}"
        );
    }
}

#[test]
fn argv0_pgrep_is_pgrep() {
    let f = Fixture::start();
    let dir = f.dir.join("bin");
    std::fs::create_dir_all(&dir).expect("dir");
    let link = dir.join("pgrep");
    std::os::unix::fs::symlink(BIN, &link).expect("symlink");
    let args = f.expand(&["-l", "-s", "{sid}", "sleep"]);
    let want = procps("pgrep", &args, Who::Root);
    let got = output(Command::new(&link).args(&args).env("LC_ALL", "C.UTF-8"));
    assert!(same_output(&want, &got), "{}\n{}", show(&want), show(&got));
}

/// pkill `args` (with `{...}` placeholders) on two identical fixtures, one per tool: same
/// status, same output and messages once pids are mapped to roles, same processes dead.
fn check_pkill(args: &[&str], who: Who, backend: &str) {
    let a = Fixture::start();
    let b = Fixture::start();
    let (roles_a, roles_b) = (a.roles(), b.roles());
    let want = procps("pkill", &a.expand(args), who);
    let got = ours("pkill", &b.expand(args), backend, who);
    let norm = |o: &Output, roles: &HashMap<u32, String>| {
        let mut text = format!(
            "status {:?}\n{}\n{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        // Longest pids first, so that no pid is replaced inside a longer one.
        let mut pids: Vec<&u32> = roles.keys().collect();
        pids.sort_by_key(|p| std::cmp::Reverse(p.to_string().len()));
        for p in pids {
            text = text.replace(&format!("pid {p} "), &format!("pid <{}> ", roles[p]));
            text = text.replace(&format!("pid {p})"), &format!("pid <{}>)", roles[p]));
        }
        text
    };
    assert_eq!(
        norm(&want, &roles_a),
        norm(&got, &roles_b),
        "pkill {args:?} ({backend}, {})",
        match who {
            Who::Root => "root",
            Who::User => "user",
        }
    );
    // Signals act after kill() returns: wait until every process of both fixtures is done
    // with what it was sent, then compare who died.
    wait_for("the fixtures to take their signals", || {
        a.quiet() && b.quiet()
    });
    assert_eq!(
        a.dead(),
        b.dead(),
        "pkill {args:?}: procps killed these, taskdiag those"
    );
}

#[test]
fn pkill_matches_procps_as_root() {
    let cases: &[(&[&str], &str)] = &[
        (&["-e", "-s", "{sid}", "sleep"], "bpf"),
        (&["-e", "-s", "{sid}", "sleep"], "procfs"),
        (
            &["-9", "-e", "-s", "{sid}", "-f", "name with spaces"],
            "bpf",
        ),
        (
            &["-KILL", "-e", "-c", "-s", "{sid}", "-u", "nobody"],
            "procfs",
        ),
        (&["--signal", "SIGTERM", "-e", "-s", "{sid}", "-n"], "bpf"),
        (
            &["--signal=9", "-e", "-s", "{sid}", "-o", "-x", "sleep"],
            "procfs",
        ),
        (&["-e", "--list-full", "-s", "{sid}", "-x", "sleep"], "bpf"),
        // No pattern: procps echoes an empty name.
        (&["-0", "-e", "-s", "{sid}"], "bpf"),
        (&["-e", "-c", "-s", "{sid}", "-r", "Z"], "procfs"),
        (
            &[
                "-USR1",
                "-q",
                "7",
                "-e",
                "-s",
                "{sid}",
                "-x",
                "a\\) \\(b|fifteen.*",
            ],
            "bpf",
        ),
        (
            &["-e", "-P", "{leader}", "-x", "t.ab.nl|ttysleep"],
            "procfs",
        ),
        (&["-e", "-t", "{tty}"], "bpf"),
        (&["-e", "-s", "{sid}", "no-such-process"], "bpf"),
        (&["-c", "-s", "{sid}", "no-such-process"], "procfs"),
        // An unknown name is not refused: the kernel rejects the signal for each process.
        (
            &["--signal", "FOO", "-e", "-s", "{sid}", "-x", "sleep"],
            "bpf",
        ),
        (
            &["--signal", "200", "-c", "-s", "{sid}", "-x", "sleep"],
            "procfs",
        ),
        // Through the long option only: every thread listed, its process signalled (with a
        // signal that does not kill: after a fatal one, whether a later thread of the same
        // dying process is still there to be signalled is a race in procps too).
        (
            &[
                "-CONT",
                "-e",
                "--lightweight",
                "-s",
                "{sid}",
                "-x",
                "worker-b|python3",
            ],
            "bpf",
        ),
        (
            &["-e", "--lightweight", "-s", "{sid}", "-x", "worker-a"],
            "procfs",
        ),
        (&["-HUP", "-e", "-s", "{sid}", "-f", "x{20000}$"], "bpf"),
    ];
    for (args, backend) in cases {
        check_pkill(args, Who::Root, backend);
    }
}

#[test]
fn pkill_matches_procps_as_an_unprivileged_user() {
    // Only the test user's own process can be signalled; the others fail with EPERM.
    check_pkill(&["-e", "-s", "{sid}", "sleep"], Who::User, "auto");
    check_pkill(
        &["-0", "-e", "-s", "{sid}", "-u", "root"],
        Who::User,
        "auto",
    );
}

#[test]
fn pkill_kills_exactly_what_pgrep_selects() {
    let f = Fixture::start();
    let args = f.expand(&["-s", "{sid}", "-f", "sleep 100[0-2]|^a\\)"]);
    let want = procps("pgrep", &args, Who::Root);
    let listed: BTreeSet<String> = String::from_utf8_lossy(&want.stdout)
        .lines()
        .map(|p| f.roles()[&p.parse::<u32>().expect("pid")].clone())
        .collect();
    assert_eq!(
        listed,
        ["plain", "parens", "nobody", "setuid"]
            .into_iter()
            .map(String::from)
            .collect::<BTreeSet<_>>()
    );
    // The zombie is dead from the start.
    let listed: BTreeSet<String> = listed.union(&f.dead()).cloned().collect();
    let mut kill_args = vec!["-KILL".to_string()];
    kill_args.extend(args.iter().cloned());
    let o = ours("pkill", &kill_args, "bpf", Who::Root);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Once every process is done with its signals: the listed ones died, the others are
    // untouched.
    wait_for("the fixture to take its signals", || f.quiet());
    assert_eq!(f.dead(), listed);
}

/// The pids a namespace script printed in its `@@pids` section.
fn section_pids(s: &HashMap<String, String>) -> Vec<u32> {
    s["pids"]
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect()
}

fn ns_sections(o: &Output) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let mut out = HashMap::new();
    let mut key = String::new();
    for line in text.lines() {
        if let Some(k) = line.strip_prefix("@@") {
            key = k.to_string();
            out.insert(key.clone(), String::new());
        } else if let Some(s) = out.get_mut(&key) {
            s.push_str(line);
            s.push('\n');
        }
    }
    out
}

#[test]
fn child_pid_namespace_answers_in_its_own_numbers() {
    // With its own /proc both tools see the namespace; pgrep must agree with procps and
    // pkill must kill the right processes, by their numbers in the namespace.
    let script = r#"
sleep 1000 & a=$!
sleep 1001 & b=$!
sleep 1002 & c=$!
wait_comm $a sleep; wait_comm $b sleep; wait_comm $c sleep
echo "@@pids"; echo $a $b $c
echo "@@procps"; /usr/bin/pgrep -a -P 1; echo "rc=$?"
echo "@@bpf"; TASKDIAG_BACKEND=bpf "$BIN" pgrep -a -P 1; echo "rc=$?"
echo "@@procfs"; TASKDIAG_BACKEND=procfs "$BIN" pgrep -a -P 1; echo "rc=$?"
echo "@@pkill"; TASKDIAG_BACKEND=bpf "$BIN" pkill -e -f '^sleep 100[01]$'; echo "rc=$?"
wait $a $b
echo "@@after"; /usr/bin/pgrep -a -P 1; echo "rc=$?"
"#;
    let script = format!("{}{script}", taskdiag_test_support::process::sh_waits());
    let mut o = Command::new("unshare");
    o.args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
        .env("BIN", BIN)
        .env("LC_ALL", "C.UTF-8");
    let o = output(&mut o);
    let s = ns_sections(&o);
    let pids = section_pids(&s);
    assert!(
        pids.iter().all(|&p| p < 100),
        "not namespace pids: {pids:?}"
    );
    let want = format!(
        "{} sleep 1000\n{} sleep 1001\n{} sleep 1002\nrc=0\n",
        pids[0], pids[1], pids[2]
    );
    assert_eq!(s["procps"], want, "{}", show(&o));
    assert_eq!(s["bpf"], want);
    assert_eq!(s["procfs"], want);
    assert_eq!(
        s["pkill"],
        format!(
            "sleep killed (pid {})\nsleep killed (pid {})\nrc=0\n",
            pids[0], pids[1]
        )
    );
    assert_eq!(s["after"], format!("{} sleep 1002\nrc=0\n", pids[2]));
}

#[test]
fn pid_namespace_without_its_own_proc_uses_bpf_numbers() {
    in_pid_namespace_without_its_own_proc("");
}

#[test]
fn pid_namespace_without_its_own_proc_completes_from_the_parents_proc() {
    // As on 5.10 (no sleepable iterators, no bpf_loop): the command lines come from the
    // parent namespace's /proc, read by the tasks' numbers there.
    in_pid_namespace_without_its_own_proc("cmdline,loop");
}

/// pgrep and pkill in a pid namespace whose /proc is still the parent's, with the BPF features
/// `disable` names treated as missing.
fn in_pid_namespace_without_its_own_proc(disable: &str) {
    // /proc still shows the parent namespace here, so procps cannot answer; BPF answers in
    // the namespace's numbers, and pkill checks identities with a second snapshot.
    // The host's /proc cannot tell when the sleeps have executed: BPF, in the namespace's
    // numbers, can.
    let script = r#"
sleep 1000 & a=$!
sleep 1001 & b=$!
for p in $a $b; do
    until "$BIN" dump --pid $p --groups base 2>/dev/null | grep -q ' comm sleep$'; do sleep 0.01; done
done
echo "@@pids"; echo $a $b
echo "@@pgrep"; "$BIN" pgrep -l -P 1; echo "rc=$?"
echo "@@pkill"; "$BIN" pkill -e -x sleep -n; echo "rc=$?"
wait $b
echo "@@after"; "$BIN" pgrep -a -P 1; echo "rc=$?"
kill $a
"#;
    let mut o = Command::new("unshare");
    o.args(["--pid", "--fork", "sh", "-c", script])
        .env("BIN", BIN)
        .env("TASKDIAG_BACKEND", "bpf")
        .env("TASKDIAG_BPF_DISABLE", disable);
    let o = output(&mut o);
    let s = ns_sections(&o);
    let pids = section_pids(&s);
    assert_eq!(pids.len(), 2, "{}", show(&o));
    assert_eq!(
        s["pgrep"],
        format!("{} sleep\n{} sleep\nrc=0\n", pids[0], pids[1]),
        "{}",
        show(&o)
    );
    assert_eq!(
        s["pkill"],
        format!("sleep killed (pid {})\nrc=0\n", pids[1])
    );
    assert_eq!(s["after"], format!("{} sleep 1000\nrc=0\n", pids[0]));
}

/// pidwait waits until every process it selected has exited, and prints and exits as procps'
/// pidwait does: both run at once on the same sleepers (a name of this test's own) and must
/// still be waiting while the sleepers live, end once they are killed, and print the same.
#[test]
fn pidwait_waits_for_the_selected_processes_like_procps() {
    use std::io::Read;
    for backend in ["bpf", "procfs"] {
        let name = format!("pw{}{backend}", std::process::id());
        let sleepers: Vec<Spawned> = (0..3)
            .map(|_| {
                let mut c = Command::new("bash");
                c.args(["-c", &format!("exec -a {name} sleep 120")]);
                Spawned::spawn_group(&mut c)
            })
            .collect();
        for s in &sleepers {
            taskdiag_test_support::process::wait_exec(s.pid(), "sleep");
        }
        let args: Vec<String> = ["-e", "-c", "-f", &format!("^{name} ")]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let start = |c: &mut Command| {
            c.env("LC_ALL", "C.UTF-8")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            Spawned::spawn_group(c)
        };
        let mut theirs = start(&mut command("/usr/bin/pidwait", &args, Who::Root));
        let mut all = vec!["pidwait".to_string()];
        all.extend(args.iter().cloned());
        let mut ours = start(command(BIN, &all, Who::Root).env("TASKDIAG_BACKEND", backend));
        // Both have chosen and are waiting once they hold a pidfd for each sleeper (a loaded
        // or emulated machine may take a while to get there: no fixed delay).
        let pidfds = |pid: u32| {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|d| {
                    d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                        .filter(|l| l.as_os_str() == "anon_inode:[pidfd]")
                        .count()
                })
                .unwrap_or(0)
        };
        for p in [ours.pid(), theirs.pid()] {
            wait_for(&format!("{backend}: pidwait {p} to hold 3 pidfds"), || {
                pidfds(p) >= 3
            });
        }
        assert!(
            ours.child().try_wait().expect("wait").is_none(),
            "{backend}: ended early"
        );
        assert!(theirs.child().try_wait().expect("wait").is_none());
        for s in &sleepers {
            taskdiag_test_support::process::signal(s.pid(), libc::SIGKILL);
        }
        let limit = Duration::from_secs(10);
        let t = ours
            .wait_exit(limit)
            .expect("ours waits past the processes' exit");
        let p = theirs.wait_exit(limit).expect("procps ended");
        assert_eq!(t.code(), p.code(), "{backend}");
        let out = |s: &mut Spawned| {
            let mut v = Vec::new();
            let mut so = s.child().stdout.take().expect("stdout");
            so.read_to_end(&mut v).expect("read");
            String::from_utf8_lossy(&v).into_owned()
        };
        let (a, b) = (out(&mut ours), out(&mut theirs));
        assert_eq!(a, b, "{backend}");
        assert!(a.starts_with("3\nwaiting for sleep (pid "), "{a}");
    }
}

#[test]
fn pidwait_refuses_what_procps_refuses() {
    for args in [
        &["-w", "x"][..],
        &[],
        &["-l", "x"],
        &["-a", "x"],
        &["-d", ",", "x"],
    ] {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let want = procps("pidwait", &args, Who::Root);
        let got = ours("pidwait", &args, "procfs", Who::Root);
        assert_eq!(got.status.code(), want.status.code(), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&got.stderr).lines().next(),
            String::from_utf8_lossy(&want.stderr).lines().next(),
            "{args:?}"
        );
    }
}
