//! taskdiag with a process whose memory-map lock is wedged (issue 41): a process faulting on a
//! file of a hung FUSE mount (taskdiag_test_support::wedge, a real one: the kernel never gets
//! the READ answered), whose command line, environment and smaps no reader can get at. Every
//! tool must still answer at once, with everybody else's arguments intact and the wedged
//! process shown as procps shows a process without a command line (`[wedge-target]`), its
//! groups answered with the busy error (`taskdiag_proto::ERRNO_MM_BUSY`): as root on each
//! backend, as an unprivileged user through a real taskdiagd, from the exporter and from the
//! Python module; another user's request through the daemon is not held up by requests stuck
//! on the wedged process (also with a deadline longer than the bound); eight wedged processes
//! (a hung NFS mount wedges every process that faults on it) cost no more than the bound; once
//! the lock is released the daemon has no reader left asleep and answers as before; and
//! without /dev/fuse the tests skip, except under CI.
//!
//! A test binary of its own: while one of its fixtures runs, procps's ps, pgrep and top (and
//! anything else that reads every process's /proc/PID/cmdline) hang on the wedged process, so
//! the suites that compare taskdiag with procps must never run at the same time as these
//! tests. The tests here run one at a time (`serial`), so each one's timings are its own, and
//! never run a system tool that would read the wedged process.
//!
//! Each command is killed after [`HARD_LIMIT`] (a regression that hangs fails instead of
//! hanging the suite) and must finish within [`LIMIT`]: the fix gives up on a read after
//! 250 ms, so a healthy command takes well under a second even on a loaded two-core machine
//! (0.25-0.5 s measured here with one process wedged). Tasks that vanish while they are
//! compared with /proc are skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use taskdiag_test_support::bins::workspace_bin;
use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{
    self, output_within, stderr, stdout, wait_exec, Notify, Spawned,
};
use taskdiag_test_support::python::PYTHON;
use taskdiag_test_support::tasks;
use taskdiag_test_support::users::{self, NOBODY_UID, OTHER, USER};
use taskdiag_test_support::wedge::Wedged;

const BIN: &str = env!("CARGO_BIN_EXE_taskdiag");

/// How long a command may take with a process wedged: the bound the tests assert.
const LIMIT: Duration = Duration::from_secs(2);

/// When a command that has not finished is killed and its test failed.
const HARD_LIMIT: Duration = Duration::from_secs(10);

/// The variables that choose a backend or a daemon: cleared for every command, then set as
/// the test means.
const CLIENT_ENV: [&str; 5] = [
    "TASKDIAG_BACKEND",
    "TASKDIAG_SOCKET",
    "TASKDIAG_DAEMON_USER",
    "TASKDIAG_MM_TIMEOUT_MS",
    "TASKDIAG_BPF_DISABLE",
];

/// The text of a group answered busy (what JSON's `errors` holds for it).
fn busy() -> String {
    taskdiag_proto::errno_text(taskdiag_proto::ERRNO_MM_BUSY)
}

/// Held by every test: one wedged fixture (and one set of commands) at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fixture process with a distinctive command line (spaces in arguments, and
/// `wedge-target` in one so that `pgrep -f wedge-target` lists it beside the wedged one),
/// run by root or by a test user; killed on drop.
struct Distinct {
    proc: Spawned,
    argv: Vec<String>,
}

impl Distinct {
    fn start(user: Option<&str>, tag: &str) -> Distinct {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let argv: Vec<String> = vec![
            PYTHON.into(),
            "-c".into(),
            "import time; time.sleep(1000)".into(),
            "--distinct".into(),
            format!(
                "wedge-target-other-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
            "two words".into(),
        ];
        let mut c = match user {
            Some(u) => users::as_user(u, PYTHON),
            None => Command::new(PYTHON),
        };
        c.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = Spawned::spawn(&mut c);
        wait_exec(proc.pid(), "python3");
        Distinct { proc, argv }
    }

    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The command line as ps and pgrep -a print it: the arguments joined by spaces.
    fn args(&self) -> String {
        self.argv.join(" ")
    }

    /// The unique argument.
    fn token(&self) -> &str {
        &self.argv[4]
    }
}

/// Who runs a command and which backend answers it.
#[derive(Clone, Copy)]
enum Via<'a> {
    /// Root, with `-b`/`TASKDIAG_BACKEND` this backend.
    Root(&'static str),
    /// Test user `user` through the daemon listening on `socket`.
    Daemon { user: &'a str, socket: &'a Path },
}

impl Via<'_> {
    fn backend(&self) -> &'static str {
        match self {
            Via::Root(b) => b,
            Via::Daemon { .. } => "daemon",
        }
    }

    /// `prog` run as this one says, with the backend in the environment (as the tools take it).
    fn command(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = match self {
            Via::Root(_) => Command::new(prog),
            Via::Daemon { user, .. } => users::as_user(user, prog),
        };
        for v in CLIENT_ENV {
            c.env_remove(v);
        }
        c.env("TASKDIAG_BACKEND", self.backend());
        if let Via::Daemon { socket, .. } = self {
            c.env("TASKDIAG_SOCKET", socket);
        }
        // Wide enough that nothing is cut (top cuts at the width; ps and pstree are told below).
        c.env("COLUMNS", "512").current_dir("/");
        c
    }

    /// taskdiag with `args`; `dump` and `maps` are given `-b` (and `--socket`) as well.
    fn taskdiag(&self, args: &[&str]) -> Command {
        let mut c = self.command(BIN);
        c.args(args);
        if matches!(args.first(), Some(&"dump" | &"maps")) {
            c.args(["-b", self.backend()]);
            if let Via::Daemon { socket, .. } = self {
                c.arg("--socket").arg(socket);
            }
        }
        c
    }

    fn label(&self, args: &[&str]) -> String {
        match self {
            Via::Root(b) => format!("[root, {b}] taskdiag {}", args.join(" ")),
            Via::Daemon { user, .. } => format!("[{user}, daemon] taskdiag {}", args.join(" ")),
        }
    }
}

/// Runs `cmd` (killed after [`HARD_LIMIT`]): its output and how long it took.
fn timed(cmd: &mut Command) -> (Output, Duration) {
    let t0 = Instant::now();
    let o = output_within(cmd, HARD_LIMIT);
    (o, t0.elapsed())
}

/// What a command printed, for a failure message (a long output's start and end).
fn shown(o: &Output) -> String {
    let cut = |s: String| {
        if s.len() <= 6000 {
            return s;
        }
        let (mut a, mut b) = (4000, s.len() - 2000);
        while !s.is_char_boundary(a) {
            a -= 1;
        }
        while !s.is_char_boundary(b) {
            b += 1;
        }
        format!("{}\n[... {} bytes ...]\n{}", &s[..a], b - a, &s[b..])
    };
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        cut(stdout(o)),
        cut(stderr(o))
    )
}

/// Asserts that a command finished within [`LIMIT`].
fn assert_quick(label: &str, o: &Output, took: Duration) {
    assert!(
        took < LIMIT,
        "{label} took {took:?} with a process wedged (limit {LIMIT:?})\n{}",
        shown(o)
    );
}

/// Runs taskdiag with `args` as `via` says; it must exit 0 within [`LIMIT`]. Its stdout.
fn run_ok(via: Via, args: &[&str]) -> String {
    let label = via.label(args);
    let (o, took) = timed(&mut via.taskdiag(args));
    eprintln!("{label}: {took:?}");
    assert!(o.status.success(), "{label} failed\n{}", shown(&o));
    assert_quick(&label, &o, took);
    stdout(&o)
}

/// The lines of `out` whose whitespace-separated field `col` is `pid`.
fn lines_of(out: &str, col: usize, pid: u32) -> Vec<&str> {
    let pid = pid.to_string();
    out.lines()
        .filter(|l| l.split_whitespace().nth(col) == Some(pid.as_str()))
        .collect()
}

/// Asserts that the one line of `out` for `pid` (field `col`) ends with `want`.
fn assert_line_ends(what: &str, out: &str, col: usize, pid: u32, want: &str) {
    let lines = lines_of(out, col, pid);
    assert!(
        lines.len() == 1 && lines[0].trim_end().ends_with(want),
        "{what}: process {pid}'s line does not end with {want:?}: {lines:?}\n--- output\n{out}"
    );
}

/// Asserts that some line of `out` ends with `want`.
fn assert_some_line_ends(what: &str, out: &str, want: &str) {
    assert!(
        out.lines().any(|l| l.trim_end().ends_with(want)),
        "{what}: no line ends with {want:?}\n--- output\n{out}"
    );
}

/// The JSON lines of a dump, by pid.
fn dump_tasks(out: &str) -> BTreeMap<u64, Value> {
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .map(|v| (v["pid"].as_u64().expect("a pid"), v))
        .collect()
}

/// /proc/PID/cmdline's arguments, read on a thread of its own and waited for at most 2 s
/// (`None` then, or if the process is gone): the test itself never hangs on a wedged process.
fn proc_cmdline(pid: u32) -> Option<Vec<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(tasks::read(format!("/proc/{pid}/cmdline")));
    });
    let raw = rx.recv_timeout(Duration::from_secs(2)).ok()??;
    let mut args: Vec<String> = raw
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if args.last().is_some_and(String::is_empty) {
        args.pop();
    }
    Some(args)
}

/// A JSON task's arguments (`cmdline`), as strings.
fn json_args(t: &Value) -> Option<Vec<String>> {
    let a = t.get("cmdline")?.as_array()?;
    Some(
        a.iter()
            .map(|s| s.as_str().expect("a string argument").to_owned())
            .collect(),
    )
}

/// Checks a `dump --all -g all,vma,vma_stat -f json` made while `w` is wedged: the wedged
/// process's cmdline, environ and vma are the busy error (`environ` and `vma` may instead
/// be refused, for a user who may not read them); every other process's groups are
/// answered (no busy error) and, where /proc shows a command line, the dump has one: the same
/// one for the `ours` fixtures.
fn check_dump(label: &str, out: &str, w: &Wedged, ours: &[&Distinct], root: bool) {
    let busy = busy();
    let all = dump_tasks(out);
    let t = all
        .get(&u64::from(w.pid))
        .unwrap_or_else(|| panic!("{label}: the wedged process {} is missing", w.pid));
    let errors = &t["errors"];
    assert_eq!(errors["cmdline"], busy.as_str(), "{label}: {t}");
    assert!(t.get("cmdline").is_none(), "{label}: {t}");
    for g in ["environ", "vma"] {
        assert!(
            t.get(g).is_none(),
            "{label}: {g} of the wedged process: {t}"
        );
        if root {
            assert_eq!(errors[g], busy.as_str(), "{label}: {t}");
        } else {
            let e = errors[g].as_str().unwrap_or_default();
            assert!(
                e == busy || e.contains("Permission denied"),
                "{label}: {g} of the wedged process: {t}"
            );
        }
    }
    // The rest of the wedged process is there.
    assert_eq!(t["base"]["comm"], "wedge-target", "{label}: {t}");
    assert!(
        t.get("stat").is_some() && t.get("cred").is_some(),
        "{label}: {t}"
    );

    for d in ours {
        let t = all
            .get(&u64::from(d.pid()))
            .unwrap_or_else(|| panic!("{label}: fixture {} is missing", d.pid()));
        assert_eq!(json_args(t).as_ref(), Some(&d.argv), "{label}: {t}");
        assert_eq!(proc_cmdline(d.pid()).as_ref(), Some(&d.argv), "{label}");
        if root {
            assert!(t.get("environ").is_some(), "{label}: no environ: {t}");
        }
    }
    let mut compared = 0;
    for (&pid, t) in &all {
        let pid = pid as u32;
        // Wedged processes (ours, or another test run's) are left alone.
        if t["base"]["comm"] == "wedge-target" {
            continue;
        }
        if let Some(e) = t.get("errors").and_then(Value::as_object) {
            assert!(
                !e.values().any(|v| *v == busy.as_str()),
                "{label}: process {pid}, not wedged, answered busy: {t}"
            );
        }
        let Some(args) = proc_cmdline(pid) else {
            continue;
        };
        if args.is_empty() || tasks::comm(pid).is_none() {
            continue;
        }
        let start = t["base"]["start_time_ns"].as_u64().unwrap_or(0);
        let ticks = tasks::start_ticks(pid).unwrap_or(0);
        if start / (1_000_000_000 / taskdiag_procfs::clock_ticks()) != ticks {
            continue; // another process by now
        }
        assert!(
            json_args(t).is_some_and(|a| !a.is_empty()),
            "{label}: process {pid} has a command line ({args:?}) but the dump none: {t}"
        );
        compared += 1;
    }
    assert!(
        compared > 3,
        "{label}: only {compared} command lines compared"
    );
}

/// Every tool, each within [`LIMIT`], while `w` is wedged: the wedged process shown without
/// arguments, the `ours` processes with theirs. `maps_of` is a process whose maps the caller
/// may read.
fn check_tools(via: Via, w: &Wedged, ours: &[&Distinct], maps_of: &Distinct) {
    let root = matches!(via, Via::Root(_));
    let wedged = w.pid;
    let bracketed = "[wedge-target]";

    let out = run_ok(via, &["ps", "aux"]);
    assert_line_ends("ps aux", &out, 1, wedged, bracketed);
    for d in ours {
        assert_line_ends("ps aux", &out, 1, d.pid(), &d.args());
    }

    // Our own fixture is found by its arguments; the wedged one by its name (no arguments).
    let out = run_ok(via, &["pgrep", "-f", "wedge-target"]);
    let pids: Vec<&str> = out.lines().collect();
    for pid in std::iter::once(wedged).chain(ours.iter().map(|d| d.pid())) {
        assert!(
            pids.contains(&pid.to_string().as_str()),
            "pgrep -f wedge-target: {pid} missing\n{out}"
        );
    }
    let out = run_ok(via, &["pgrep", "-af", "wedge-target"]);
    assert_line_ends(
        "pgrep -af",
        &out,
        0,
        wedged,
        &format!("{wedged} {bracketed}"),
    );
    for d in ours {
        let want = format!("{} {}", d.pid(), d.args());
        assert_line_ends("pgrep -af", &out, 0, d.pid(), &want);
    }
    let out = run_ok(via, &["pgrep", "-af", ours[0].token()]);
    assert_eq!(
        out,
        format!("{} {}\n", ours[0].pid(), ours[0].args()),
        "pgrep -af TOKEN"
    );

    let out = run_ok(via, &["top", "-b", "-n", "1", "-c", "-w", "512"]);
    assert_line_ends("top -b -n 1 -c", &out, 0, wedged, bracketed);
    for d in ours {
        assert_line_ends("top -b -n 1 -c", &out, 0, d.pid(), &d.args());
    }

    // -l: lines not cut at a width; -p: pids, to find our lines.
    let out = run_ok(via, &["pstree", "-a", "-l", "-p"]);
    assert_some_line_ends("pstree -a", &out, &format!("-(wedge-target,{wedged})"));
    for d in ours {
        let want = format!("-python3,{} {}", d.pid(), d.argv[1..].join(" "));
        assert_some_line_ends("pstree -a", &out, &want);
    }

    // taskdiagd does not serve vma_stat (smaps): its callers get it from /proc themselves.
    let groups = if root { "all,vma,vma_stat" } else { "all,vma" };
    let args = ["dump", "--all", "--groups", groups, "-f", "json"];
    let out = run_ok(via, &args);
    check_dump(&via.label(&args), &out, w, ours, root);

    // The wedged process's maps (/proc/PID/maps reads them under per-VMA locks where the
    // kernel does, as 6.18 does; else the busy error), and another process's, whole.
    let pid = wedged.to_string();
    let args = ["maps", pid.as_str()];
    let label = via.label(&args);
    let (o, took) = timed(&mut via.taskdiag(&args));
    eprintln!("{label}: {took:?}");
    assert_quick(&label, &o, took);
    if root {
        assert!(o.status.success(), "{label}\n{}", shown(&o));
        let mount = w.mount.join("file");
        assert!(
            stdout(&o).contains(mount.to_str().expect("a UTF-8 path")),
            "{label}: the FUSE file's mapping is missing\n{}",
            shown(&o)
        );
    } else {
        // Another user's process: refused, as /proc/PID/maps is.
        assert_eq!(o.status.code(), Some(3), "{label}\n{}", shown(&o));
        assert!(
            stderr(&o).contains("ermission denied"),
            "{label}\n{}",
            shown(&o)
        );
    }
    let pid = maps_of.pid().to_string();
    let out = run_ok(via, &["maps", &pid]);
    let want = tasks::read_string(format!("/proc/{pid}/maps")).expect("the fixture's maps");
    assert_eq!(out, want, "maps {pid}");
}

fn root_tools(backend: &'static str) {
    let _g = serial();
    let Some(w) = Wedged::start_or_skip() else {
        return;
    };
    let d = Distinct::start(None, "root");
    check_tools(Via::Root(backend), &w, &[&d], &d);
    assert!(w.is_wedged(), "the fixture came unwedged during the test");
}

#[test]
fn root_tools_on_bpf_answer_at_once() {
    root_tools("bpf");
}

#[test]
fn root_tools_on_procfs_answer_at_once() {
    root_tools("procfs");
}

#[test]
fn root_tools_on_auto_answer_at_once() {
    root_tools("auto");
}

/// A taskdiagd started for a test, on a socket of its own; killed (by pid) on drop.
struct Daemon {
    proc: Spawned,
    socket: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    /// `taskdiagd --foreground --socket <private path>` with `env`, once it says it is ready
    /// (sd_notify: privileges dropped).
    fn start(env: &[(&str, &str)]) -> Daemon {
        let dir = TempDir::new("wedge-daemon");
        // The daemon's user (nobody, where there is no taskdiag user) removes its socket.
        std::os::unix::fs::chown(dir.path(), Some(NOBODY_UID), Some(NOBODY_UID)).expect("chown");
        let socket = dir.join("taskdiag.sock");
        let mut c = Command::new(workspace_bin("taskdiagd"));
        for v in CLIENT_ENV {
            c.env_remove(v);
        }
        c.envs(env.iter().copied())
            .arg("--foreground")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let ready = Notify::new();
        ready.give(&mut c);
        let mut proc = Spawned::spawn(&mut c);
        ready.wait_ready(&mut proc, "taskdiagd");
        Daemon {
            proc,
            socket,
            _dir: dir,
        }
    }

    fn via<'a>(&'a self, user: &'a str) -> Via<'a> {
        Via::Daemon {
            user,
            socket: &self.socket,
        }
    }

    /// Its threads reading another process's memory and asleep in the kernel there (their
    /// kernel stacks in `__access_remote_vm`), with their stacks.
    fn remote_readers(&self) -> Vec<(u32, String)> {
        let pid = self.proc.pid();
        tasks::tids(pid)
            .into_iter()
            .filter_map(|tid| {
                let stack = tasks::read_string(format!("/proc/{pid}/task/{tid}/stack"))?;
                let wchan =
                    tasks::read_string(format!("/proc/{pid}/task/{tid}/wchan")).unwrap_or_default();
                (stack.contains("access_remote_vm") || wchan.contains("access_remote_vm"))
                    .then(|| (tid, format!("wchan {wchan}\n{stack}")))
            })
            .collect()
    }
}

#[test]
fn unprivileged_tools_through_taskdiagd_answer_at_once() {
    let _g = serial();
    let Some(w) = Wedged::start_or_skip() else {
        return;
    };
    let daemon = Daemon::start(&[]);
    let root = Distinct::start(None, "root");
    let mine = Distinct::start(Some(USER), "user");
    check_tools(daemon.via(USER), &w, &[&root, &mine], &mine);
    assert!(w.is_wedged(), "the fixture came unwedged during the test");
}

/// Four `ps aux` through `a` at once, each on a thread of its own, with `auto`: one uid holds
/// at most all workers but one, so the daemon answers the ones it has no worker for busy at
/// once, and auto then reads their caller's /proc.
fn four_ps_aux(a: &Via<'_>) -> Vec<std::thread::JoinHandle<(Output, Duration)>> {
    (0..4)
        .map(|_| {
            let mut c = a.taskdiag(&["ps", "aux"]);
            c.env("TASKDIAG_BACKEND", "auto");
            std::thread::spawn(move || timed(&mut c))
        })
        .collect()
}

/// Four `ps aux` as user A through a fresh daemon (`env` for it) with `auto` (those it has no
/// worker for read their own /proc), one stuck on the wedged process at first, and `after`
/// later a BASE-only dump of every process as user B, which must be answered within
/// [`LIMIT`]: how long each A took (after checking what it printed).
fn a_and_b(w: &Wedged, d: &Distinct, env: &[(&str, &str)], after: Duration) -> Vec<Duration> {
    let daemon = Daemon::start(env);
    let a = daemon.via(USER);
    let b = daemon.via(OTHER);
    let ps = four_ps_aux(&a);
    std::thread::sleep(after);
    let args = ["dump", "--all", "-g", "base", "-f", "json"];
    let label = format!("{} {env:?}", b.label(&args));
    let (o, b_took) = timed(&mut b.taskdiag(&args));
    eprintln!("{label}, asked {after:?} after the A's: {b_took:?}");
    assert!(o.status.success(), "{label}\n{}", shown(&o));
    let all = dump_tasks(&stdout(&o));
    assert!(
        all.contains_key(&u64::from(w.pid)) && all.contains_key(&u64::from(d.pid())),
        "{label}: the wedged process or the fixture is missing\n{}",
        shown(&o)
    );
    assert_quick(&label, &o, b_took);
    let mut a_took = Vec::new();
    for (i, h) in ps.into_iter().enumerate() {
        let (o, took) = h.join().expect("a ps thread");
        let label = format!("{} #{i} {env:?}", a.label(&["ps", "aux"]));
        eprintln!("{label}: {took:?}");
        assert!(o.status.success(), "{label}\n{}", shown(&o));
        let out = stdout(&o);
        assert_line_ends(&label, &out, 1, w.pid, "[wedge-target]");
        assert_line_ends(&label, &out, 1, d.pid(), &d.args());
        a_took.push(took);
    }
    a_took
}

#[test]
fn wedged_requests_do_not_delay_another_users_request() {
    let _g = serial();
    let Some(w) = Wedged::start_or_skip() else {
        return;
    };
    let d = Distinct::start(None, "root");
    // B asked while the A's wait for the wedged process (the daemon's 250 ms).
    let a_took = a_and_b(&w, &d, &[], Duration::from_millis(100));
    for took in a_took {
        assert!(took < LIMIT, "ps aux as {USER} took {took:?}");
    }
}

/// As above with the daemon's deadline 3 s (TASKDIAG_MM_TIMEOUT_MS=3000), longer than a
/// request may take: B, asked while the A's are held, must still be answered within [`LIMIT`].
#[test]
fn wedged_requests_do_not_delay_another_users_request_under_a_long_deadline() {
    let _g = serial();
    let Some(w) = Wedged::start_or_skip() else {
        return;
    };
    let d = Distinct::start(None, "root");
    let a_took = a_and_b(
        &w,
        &d,
        &[("TASKDIAG_MM_TIMEOUT_MS", "3000")],
        Duration::from_millis(500),
    );
    // The test's premise: the A's were held by the wedged process while B asked.
    let slowest = a_took.into_iter().max().unwrap_or_default();
    assert!(
        slowest >= Duration::from_millis(2500),
        "with a 3 s deadline no ps aux waited for the wedged process ({slowest:?})"
    );
}

/// What [`many_wedged_processes_answer_within_the_bound`] checks of one `ps aux`: success,
/// every wedged process as `[wedge-target]`, ours with its arguments; `slow` gets it if it
/// took [`LIMIT`] or more.
fn check_many(
    label: &str,
    o: &Output,
    took: Duration,
    ws: &[Wedged],
    d: &Distinct,
    slow: &mut Vec<String>,
) {
    assert!(o.status.success(), "{label}\n{}", shown(o));
    let out = stdout(o);
    for w in ws {
        assert_line_ends(label, &out, 1, w.pid, "[wedge-target]");
    }
    assert_line_ends(label, &out, 1, d.pid(), &d.args());
    if took >= LIMIT {
        slow.push(format!("{label}: {took:?}"));
    }
}

/// How many processes [`many_wedged_processes_answer_within_the_bound`] wedges: a hung NFS
/// or FUSE mount wedges every process that faults on it, not one.
const MANY: usize = 8;

/// With [`MANY`] processes wedged, each command must still finish within [`LIMIT`]: root's
/// `ps aux` on each backend, and through taskdiagd four `ps aux` of user A with a BASE-only
/// dump of user B asked while they run. Every timing is measured before any is asserted, so
/// that a failure reports them all.
#[test]
fn many_wedged_processes_answer_within_the_bound() {
    let _g = serial();
    let mut ws = Vec::new();
    for _ in 0..MANY {
        match Wedged::start_or_skip() {
            Some(w) => ws.push(w),
            None => return,
        }
    }
    let d = Distinct::start(None, "many");
    let mut slow = Vec::new();
    for b in ["bpf", "procfs", "auto"] {
        let via = Via::Root(b);
        let args = ["ps", "aux"];
        let label = via.label(&args);
        let (o, took) = timed(&mut via.taskdiag(&args));
        eprintln!("{label} with {MANY} wedged: {took:?}");
        check_many(&label, &o, took, &ws, &d, &mut slow);
    }
    let daemon = Daemon::start(&[]);
    let (a, b) = (daemon.via(USER), daemon.via(OTHER));
    let ps = four_ps_aux(&a);
    std::thread::sleep(Duration::from_millis(100));
    let args = ["dump", "--all", "-g", "base", "-f", "json"];
    let label = format!("{}, asked 100 ms after 4 ps aux of {USER}", b.label(&args));
    let (o, took) = timed(&mut b.taskdiag(&args));
    eprintln!("{label} with {MANY} wedged: {took:?}");
    assert!(o.status.success(), "{label}\n{}", shown(&o));
    if took >= LIMIT {
        slow.push(format!("{label}: {took:?}"));
    }
    for (i, h) in ps.into_iter().enumerate() {
        let (o, took) = h.join().expect("a ps thread");
        let label = format!("{} #{i}", a.label(&["ps", "aux"]));
        eprintln!("{label} with {MANY} wedged: {took:?}");
        check_many(&label, &o, took, &ws, &d, &mut slow);
    }
    assert!(
        slow.is_empty(),
        "with {MANY} processes wedged, past {LIMIT:?}:\n{}",
        slow.join("\n")
    );
}

/// A config naming our fixture's group by its command line, and the wedged process's by its
/// name.
fn exporter_config(dir: &TempDir, d: &Distinct) -> PathBuf {
    let p = dir.join("exporter.yml");
    std::fs::write(
        &p,
        format!(
            "process_names:\n  - name: \"td-distinct\"\n    cmdline: ['{}']\n  - name: \
             \"td-wedged\"\n    comm: [wedge-target]\n",
            d.token()
        ),
    )
    .expect("writing the config");
    p
}

#[test]
fn an_exporter_scrape_answers_at_once() {
    let _g = serial();
    let Some(w) = Wedged::start_or_skip() else {
        return;
    };
    let daemon = Daemon::start(&[]);
    let dir = TempDir::new("wedge-exporter");
    let d = Distinct::start(None, "exporter");
    let config = exporter_config(&dir, &d);
    let exporter = workspace_bin("taskdiag-exporter");
    for via in [
        Via::Root("bpf"),
        Via::Root("procfs"),
        Via::Root("auto"),
        daemon.via(USER),
    ] {
        let mut c = via.command(&exporter);
        c.args(["-once-to-stdout-delay", "1s", "-backend", via.backend()])
            .arg("-config.path")
            .arg(&config);
        let label = match via {
            Via::Root(b) => format!("[root] taskdiag-exporter -backend {b}"),
            Via::Daemon { user, .. } => format!("[{user}] taskdiag-exporter -backend daemon"),
        };
        let (o, took) = timed(&mut c);
        eprintln!("{label}: {took:?}");
        assert!(o.status.success(), "{label}\n{}", shown(&o));
        // One second of it is the delay asked for.
        assert!(
            took < LIMIT + Duration::from_secs(1),
            "{label} took {took:?} with a process wedged\n{}",
            shown(&o)
        );
        let out = stdout(&o);
        let gauge = |group: &str| -> Option<u64> {
            let key = format!("namedprocess_namegroup_num_procs{{groupname=\"{group}\"}} ");
            out.lines()
                .find_map(|l| l.strip_prefix(&key))
                .and_then(|v| v.trim().parse().ok())
        };
        assert_eq!(gauge("td-distinct"), Some(1), "{label}\n{out}");
        assert!(
            gauge("td-wedged").is_some_and(|n| n >= 1),
            "{label}: the wedged process's group\n{out}"
        );
        assert!(
            out.contains("namedprocess_scrape_errors 0"),
            "{label}\n{out}"
        );
    }
    assert!(w.is_wedged(), "the fixture came unwedged during the test");
}

/// The Python package as `import taskdiag` finds it: the sources of crates/python/python and
/// the native module cargo built beside the binaries (`lib_taskdiag.so`, the release build's
/// `cargo build --workspace`), in a directory the test users can read.
fn python_package() -> TempDir {
    let dir = TempDir::new("wedge-python");
    let pkg = dir.join("taskdiag");
    std::fs::create_dir(&pkg).expect("mkdir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/python/taskdiag");
    for f in ["__init__.py", "psutil.py"] {
        std::fs::copy(src.join(f), pkg.join(f))
            .unwrap_or_else(|e| panic!("copying {}: {e}", src.join(f).display()));
    }
    let lib = workspace_bin("lib_taskdiag.so");
    std::fs::copy(&lib, pkg.join("_taskdiag.abi3.so"))
        .unwrap_or_else(|e| panic!("copying {}: {e}", lib.display()));
    dir
}

/// Prints, as JSON, the snapshot's backend and the cmdline column of the pids given.
const SNAPSHOT: &str = r#"
import json, sys, taskdiag
t = taskdiag.snapshot(["pid", "name", "cmdline"], backend=sys.argv[1])
want = [int(p) for p in sys.argv[2:]]
rows = {r["pid"]: r for r in t.to_dicts() if r["pid"] in want}
print(json.dumps({"backend": t.backend, "rows": {str(p): r for p, r in rows.items()}}))
"#;

#[test]
fn a_python_snapshot_answers_at_once() {
    let _g = serial();
    let Some(w) = Wedged::start_or_skip() else {
        return;
    };
    let daemon = Daemon::start(&[]);
    let pkg = python_package();
    let d = Distinct::start(None, "python");
    for via in [
        Via::Root("bpf"),
        Via::Root("procfs"),
        Via::Root("auto"),
        daemon.via(USER),
    ] {
        let mut c = via.command(PYTHON);
        c.env("PYTHONPATH", pkg.path())
            .env("HOME", "/")
            .args(["-c", SNAPSHOT, via.backend()])
            .arg(w.pid.to_string())
            .arg(d.pid().to_string());
        let label = format!("python snapshot, backend {}", via.backend());
        let (o, took) = timed(&mut c);
        eprintln!("{label}: {took:?}");
        assert!(o.status.success(), "{label}\n{}", shown(&o));
        assert_quick(&label, &o, took);
        let v: Value = serde_json::from_str(&stdout(&o))
            .unwrap_or_else(|e| panic!("{label}: {e}\n{}", shown(&o)));
        if via.backend() != "auto" {
            assert_eq!(v["backend"], via.backend(), "{label}: {v}");
        }
        let row = |pid: u32| &v["rows"][pid.to_string()];
        assert_eq!(row(w.pid)["name"], "wedge-target", "{label}: {v}");
        assert_eq!(row(w.pid)["cmdline"], Value::Null, "{label}: {v}");
        assert_eq!(
            row(d.pid())["cmdline"],
            serde_json::json!(d.argv),
            "{label}: {v}"
        );
    }
    assert!(w.is_wedged(), "the fixture came unwedged during the test");
}

#[test]
fn taskdiagd_recovers_once_unwedged() {
    let _g = serial();
    let Some(mut w) = Wedged::start_or_skip() else {
        return;
    };
    let daemon = Daemon::start(&[]);
    let d = Distinct::start(None, "recover");
    let via = daemon.via(USER);
    let wedged = w.pid.to_string();
    let other = d.pid().to_string();

    // The daemon gives up on the wedged process's command line, and its reader stays asleep.
    let out = run_ok(via, &["ps", "aux"]);
    assert_line_ends("ps aux", &out, 1, w.pid, "[wedge-target]");
    assert!(
        process::wait_until(Duration::from_secs(5), || !daemon
            .remote_readers()
            .is_empty()),
        "no thread of taskdiagd {} is left reading the wedged process's memory",
        daemon.proc.pid()
    );
    // Later requests are answered busy at once.
    let out = run_ok(
        via,
        &["dump", "--pid", &wedged, "-g", "cmdline", "-f", "json"],
    );
    let t = &dump_tasks(&out)[&u64::from(w.pid)];
    assert_eq!(t["errors"]["cmdline"], busy().as_str(), "{t}");

    w.unwedge();
    let t0 = Instant::now();
    let back = process::wait_until(Duration::from_secs(5), || {
        daemon.remote_readers().is_empty()
    });
    assert!(
        back,
        "5 s after the lock was released, taskdiagd {} still has readers asleep: {:?}",
        daemon.proc.pid(),
        daemon.remote_readers()
    );
    eprintln!(
        "taskdiagd's reader came back {:?} after unwedge",
        t0.elapsed()
    );

    // The wedged process is gone (the fixture kills it): no such process, not busy.
    let args = ["dump", "--pid", wedged.as_str(), "-g", "cmdline"];
    let label = via.label(&args);
    let (o, took) = timed(&mut via.taskdiag(&args));
    assert_quick(&label, &o, took);
    assert_eq!(o.status.code(), Some(1), "{label}\n{}", shown(&o));
    assert!(
        stderr(&o).contains(&format!("no such process: {wedged}")),
        "{label}\n{}",
        shown(&o)
    );
    let out = run_ok(
        via,
        &["dump", "--pid", &other, "-g", "cmdline", "-f", "json"],
    );
    let t = &dump_tasks(&out)[&u64::from(d.pid())];
    assert_eq!(json_args(t).as_ref(), Some(&d.argv), "{t}");
    // Everyone's command lines, none busy (but another test run's wedged processes).
    let out = run_ok(via, &["dump", "--all", "-g", "cmdline", "-f", "json"]);
    for (pid, t) in dump_tasks(&out) {
        if t["base"]["comm"] != "wedge-target" {
            assert_ne!(
                t["errors"]["cmdline"],
                busy().as_str(),
                "process {pid}: {t}"
            );
        }
    }
    let out = run_ok(via, &["ps", "aux"]);
    assert_line_ends("ps aux", &out, 1, d.pid(), &d.args());
    assert!(lines_of(&out, 1, w.pid).is_empty(), "ps aux\n{out}");
    assert!(daemon.remote_readers().is_empty());
}

/// Where the child runs [`fuse_missing_child`] (in a mount namespace without /dev/fuse).
const CHILD_ENV: &str = "TASKDIAG_WEDGE_TEST_CHILD";

/// Not a test of its own: run by [`without_dev_fuse_the_tests_skip_but_fail_in_ci`] in a mount
/// namespace where /dev/fuse is missing. Does nothing when run otherwise.
#[test]
#[ignore = "run by without_dev_fuse_the_tests_skip_but_fail_in_ci"]
fn fuse_missing_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    assert!(!Path::new("/dev/fuse").exists(), "/dev/fuse is there");
    let w = Wedged::start_or_skip();
    assert!(w.is_none(), "a fixture started without /dev/fuse");
    println!("start_or_skip returned None");
}

#[test]
fn without_dev_fuse_the_tests_skip_but_fail_in_ci() {
    // /dev replaced by a tmpfs holding only the devices a test needs, in a private mount
    // namespace; then this test binary runs the child test there.
    let script = "set -e\n\
        d=$(mktemp -d)\n\
        mount --rbind /dev \"$d\"\n\
        mount -t tmpfs -o mode=755 none /dev\n\
        for n in null zero full random urandom; do\n\
          touch /dev/$n; mount --bind \"$d/$n\" /dev/$n\n\
        done\n\
        umount -l \"$d\"; rmdir \"$d\"\n\
        exec \"$@\"\n";
    let exe = std::env::current_exe().expect("this test binary");
    let run = |ci: Option<&str>| {
        let mut c = Command::new("unshare");
        c.args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(&exe)
        .args([
            "--exact",
            "fuse_missing_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, "1")
        .env_remove("CI");
        if let Some(v) = ci {
            c.env("CI", v);
        }
        let (o, _) = timed(&mut c);
        o
    };
    let o = run(None);
    assert!(o.status.success(), "without CI\n{}", shown(&o));
    assert!(
        stderr(&o).contains(
            "skipping a wedged-lock test: /dev/fuse: No such file or directory: the wedged-lock \
             tests need FUSE"
        ) && stdout(&o).contains("start_or_skip returned None")
            && stdout(&o).contains("1 passed"),
        "without CI\n{}",
        shown(&o)
    );
    let o = run(Some("1"));
    assert_eq!(o.status.code(), Some(101), "CI=1\n{}", shown(&o));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        all.contains("/dev/fuse: No such file or directory")
            && all.contains("CI is set, and CI must run the wedged-lock tests")
            && all.contains("1 failed"),
        "CI=1\n{}",
        shown(&o)
    );
}
