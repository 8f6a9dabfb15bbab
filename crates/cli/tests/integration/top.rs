//! Tests of `taskdiag top`: batch output compared with procps top and with /proc for fixture
//! processes (a CPU burner, sleepers, a threaded process) on both backends, as an
//! unprivileged user and in a child pid namespace; and the interactive screen driven as a
//! person drives it, through tmux (keys in, screen captured), including that the terminal
//! is given back on `q` and on SIGTERM.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use taskdiag_test_support::compare::agree;
use taskdiag_test_support::process::{
    ensure_installed, wait_for, wait_pid_exit, wait_until, Spawned, PATIENCE,
};
use taskdiag_test_support::tasks;

use super::{stderr, stdout, test_user, BIN, TEST_USER};

const BACKENDS: [&str; 2] = ["bpf", "procfs"];

/// A process of ours in its own session, killed with its process group on drop.
type Fixture = Spawned;

/// Spawns `cmd` in a session of its own and waits until it is named `comm` (it has exec'd).
fn spawn(cmd: &mut Command, comm: &str) -> Fixture {
    let f = Spawned::spawn_session(cmd.stdin(Stdio::null()).stdout(Stdio::null()));
    let pid = f.pid();
    wait_for(&format!("fixture {pid} to be named {comm}"), || {
        tasks::comm(pid).as_deref() == Some(comm)
    });
    f
}

fn burner() -> Fixture {
    spawn(Command::new("sh").args(["-c", "while :; do :; done"]), "sh")
}

fn sleeper() -> Fixture {
    spawn(Command::new("sleep").arg("1000"), "sleep")
}

fn user_sleeper() -> Fixture {
    spawn(super::as_test_user("sleep").arg("1000"), "sleep")
}

/// A threaded python process named `name` (its threads too), running `body` after
/// `import threading, time`.
fn python_named(name: &str, body: &str) -> Fixture {
    let code =
        format!("import threading,time\nopen('/proc/self/comm','w').write('{name}')\n{body}");
    spawn(Command::new("python3").args(["-c", &code]), name)
}

/// A python process named `tdtopthr` with three extra threads (all named alike).
fn threaded() -> Fixture {
    let f = python_named(
        "tdtopthr",
        "[threading.Thread(target=time.sleep,args=(1000,),daemon=True).start() for _ in range(3)]\n\
         time.sleep(1000)",
    );
    let pid = f.pid();
    wait_for("the fixture's threads", || tids(pid).len() == 4);
    // Every thread asleep, so that their CPU times stay put.
    wait_for("the fixture's threads to sleep", || {
        tids(pid)
            .iter()
            .all(|&t| tasks::task_stat(pid, t).is_some_and(|f| f[0] == "S"))
    });
    settle(pid);
    f
}

/// Waits until process `pid` uses no more CPU: its utime + stime the same over 200 ms. (The
/// comparisons that follow read procps around ours, so a tick more is not a failure.)
fn settle(pid: u32) {
    let mut last = tasks::cpu_ticks(pid);
    wait_until(PATIENCE, || {
        std::thread::sleep(Duration::from_millis(200));
        let now = tasks::cpu_ticks(pid);
        std::mem::replace(&mut last, now) == now
    });
}

fn tids(pid: u32) -> Vec<u32> {
    tasks::tids(pid)
}

/// The width procps top gives its pid columns (PID, PPID, ...) on this machine: as many digits
/// as pid_max has when that is 6 to 10, else 5 (procps-ng 4.0.2 top.c, from
/// /proc/sys/kernel/pid_max). A benchmark that raised pid_max to 4,194,304 makes them 7 wide.
fn pid_col_width() -> usize {
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max").expect("pid_max");
    match max.trim().len() {
        n @ 6..=10 => n,
        _ => 5,
    }
}

/// A pid column's heading as procps top right-aligns it: `  PID` at the usual width.
fn pid_heading(name: &str) -> String {
    format!("{name:>w$}", w = pid_col_width())
}

/// Fields of /proc/PID/stat after the name (field 3 is index 0) of a fixture, which lives.
fn proc_stat(pid: u32) -> Vec<String> {
    tasks::stat(pid).unwrap_or_else(|| panic!("fixture {pid} vanished"))
}

/// The name of a task that lives throughout the test.
fn comm(pid: u32) -> String {
    tasks::comm(pid).unwrap_or_else(|| panic!("task {pid} vanished"))
}

fn top(backend: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .env("TASKDIAG_BACKEND", backend)
        .arg("top")
        .args(args)
        .output()
        .expect("taskdiag top")
}

fn procps_top(args: &[&str]) -> Output {
    Command::new("top").args(args).output().expect("procps top")
}

/// A task line of top's table.
#[derive(Debug, Clone, PartialEq)]
struct TRow {
    pid: u32,
    user: String,
    pr: String,
    ni: String,
    res: String,
    state: String,
    cpu: f64,
    time: String,
    command: String,
    line: String,
}

fn parse_row(line: &str) -> Option<TRow> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 12 {
        return None;
    }
    Some(TRow {
        pid: f[0].parse().ok()?,
        user: f[1].into(),
        pr: f[2].into(),
        ni: f[3].into(),
        res: f[5].into(),
        state: f[7].into(),
        cpu: f[8].parse().ok()?,
        time: f[10].into(),
        command: f[11..].join(" "),
        line: line.to_string(),
    })
}

/// The rows of the last frame of batch output.
fn last_frame_rows(out: &str) -> Vec<TRow> {
    let at = out.rfind("  PID USER").expect("heading");
    out[at..].lines().skip(1).filter_map(parse_row).collect()
}

/// A batch frame, compared by what procps top and ours must print alike: every line but the
/// clock, CPU and memory summaries, and the uptime.
#[derive(Debug)]
struct Frame(String);

impl Frame {
    fn key(&self) -> (Vec<&str>, Option<&str>) {
        let lines = self
            .0
            .lines()
            .filter(|l| !l.starts_with("top -") && !l.starts_with("%Cpu") && !l.starts_with("MiB"))
            .collect();
        let up = self
            .0
            .lines()
            .next()
            .and_then(|l| l.split_once(" up "))
            .and_then(|(_, r)| r.split_once(",  load average: "))
            .map(|(u, _)| u);
        (lines, up)
    }
}

impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        self.key() == other.key()
    }
}

/// The line of `what` in the last frame (the summary line starting so).
fn last_line<'a>(out: &'a str, what: &str) -> &'a str {
    out.lines()
        .rev()
        .find(|l| l.starts_with(what))
        .unwrap_or("")
}

#[test]
fn batch_rows_match_procps_top_and_proc() {
    let s1 = sleeper();
    let s2 = sleeper();
    let list = format!("{},{}", s1.pid(), s2.pid());
    let args = ["-b", "-n", "1", "-w", "200", "-p", &list];
    for backend in BACKENDS {
        // Everything but the clock, CPU and memory summary lines must be the same bytes (task
        // counts, heading and both sleepers' lines, ties in -p order), and the uptime.
        let o = agree(
            || Frame(stdout(&procps_top(&args))),
            || {
                let ours = top(backend, &args);
                assert!(ours.status.success(), "{backend}: {}", stderr(&ours));
                Frame(stdout(&ours))
            },
        )
        .unwrap_or_else(|m| panic!("{backend}: output differs from procps top: {m}"))
        .0;
        let t = stdout(&procps_top(&args));
        assert!(o.ends_with('\n') && !o.ends_with("\n\n"), "{o:?}");
        // The summary lines have procps' shape.
        for (prefix, words) in [
            (
                "%Cpu(s):",
                &[
                    " us,", " sy,", " ni,", " id,", " wa,", " hi,", " si,", " st ",
                ][..],
            ),
            (
                "MiB Mem : ",
                &["total,", "free,", "used,", "buff/cache     "],
            ),
            ("MiB Swap: ", &["total,", "free,", "used.", "avail Mem "]),
        ] {
            let ol = last_line(&o, prefix);
            let tl = last_line(&t, prefix);
            assert_eq!(ol.len(), tl.len(), "{backend}: {ol:?} vs {tl:?}");
            for w in words {
                assert_eq!(ol.find(w), tl.find(w), "{backend}: {w} in {ol:?} vs {tl:?}");
            }
        }
        let total = |s: &str| {
            last_line(s, "MiB Mem : ")
                .split_whitespace()
                .nth(3)
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(total(&o), total(&t));
        // And the numbers are those of /proc.
        let out = stdout(&top(backend, &["-b", "-n", "1", "-p", &list]));
        let rows = last_frame_rows(&out);
        assert_eq!(rows.len(), 2, "{out}");
        for r in &rows {
            let st = proc_stat(r.pid);
            assert_eq!(r.state, st[0], "{r:?}");
            assert_eq!(r.pr, st[15], "{r:?}");
            assert_eq!(r.ni, st[16], "{r:?}");
            assert_eq!(r.user, "root");
            assert_eq!(r.command, comm(r.pid));
            assert_eq!(r.cpu, 0.0, "a sleeper uses no CPU: {r:?}");
            let rss_kib = std::fs::read_to_string(format!("/proc/{}/statm", r.pid))
                .ok()
                .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
                .map(|pages| pages * 4)
                .expect("statm");
            assert_eq!(r.res, rss_kib.to_string(), "{r:?}");
        }
    }
}

#[test]
fn batch_burner_uses_cpu_and_sleeper_none() {
    let b = burner();
    let s = sleeper();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |pid: u32| -> f64 {
        let st = proc_stat(pid);
        st[11].parse::<f64>().expect("utime") + st[12].parse::<f64>().expect("stime")
    };
    let list = format!("{},{}", b.pid(), s.pid());
    for backend in BACKENDS {
        let (t0, c0) = (std::time::Instant::now(), ticks(b.pid()));
        let o = top(backend, &["-b", "-n", "2", "-d", "0.5", "-p", &list]);
        let truth = (ticks(b.pid()) - c0) * 100.0 / hz / t0.elapsed().as_secs_f64();
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let out = stdout(&o);
        assert_eq!(out.matches("  PID USER").count(), 2, "two frames: {out}");
        assert!(out.contains(" zombie\n%Cpu(s):"), "{out}");
        let rows = last_frame_rows(&out);
        let br = rows.iter().find(|r| r.pid == b.pid()).expect("burner row");
        let sr = rows.iter().find(|r| r.pid == s.pid()).expect("sleeper row");
        eprintln!(
            "{backend}: burner {} %CPU, measured from /proc {truth:.1}",
            br.cpu
        );
        assert_eq!(br.state, "R", "{br:?}");
        assert_eq!(br.command, "sh");
        assert_eq!(sr.cpu, 0.0, "{sr:?}");
        assert_eq!(sr.state, "S");
        // The burner is first (sorted by %CPU) and close to what /proc says it used; on an
        // idle enough machine that is most of a CPU.
        assert_eq!(rows[0].pid, b.pid(), "{out}");
        assert!(
            (br.cpu - truth).abs() < 30.0,
            "{backend}: {} vs {truth}",
            br.cpu
        );
        if truth > 70.0 {
            assert!(br.cpu > 50.0, "{backend}: {br:?}");
        }
        assert!(br.cpu > 5.0, "{backend}: {br:?}");
        let tasks = last_line(&out, "Tasks:");
        assert!(
            tasks.contains("  2 total") && tasks.contains("  1 running"),
            "{tasks}"
        );
    }
}

/// A python process named `tdtopbusy` whose one extra thread burns ~0.3 s of CPU, then sleeps.
fn busy_threaded() -> Fixture {
    let f = python_named(
        "tdtopbusy",
        "def busy():\n    t = time.time()\n    while time.time() - t < 0.3: pass\n    time.sleep(1000)\n\
         threading.Thread(target=busy, daemon=True).start()\n\
         time.sleep(1000)",
    );
    let pid = f.pid();
    wait_for("the fixture's busy thread", || tids(pid).len() == 2);
    settle(pid);
    f
}

#[test]
fn with_h_a_leaders_line_shows_its_whole_process_like_procps() {
    let f = busy_threaded();
    let pid = f.pid().to_string();
    let args = ["-b", "-n", "1", "-H", "-w", "200", "-p", pid.as_str()];
    // TIME+ of the leader's line and of the other thread's.
    let times = |out: Output| {
        let rows = last_frame_rows(&stdout(&out));
        let time = |leader: bool| {
            rows.iter()
                .find(|r| (r.pid == f.pid()) == leader)
                .map(|r| r.time.clone())
        };
        (time(true), time(false))
    };
    let theirs = times(procps_top(&args));
    // The busy thread's time is in the leader's line too: it is the process's.
    assert_ne!(theirs.0, Some("0:00.00".to_string()), "{theirs:?}");
    for backend in BACKENDS {
        agree(|| times(procps_top(&args)), || times(top(backend, &args)))
            .unwrap_or_else(|m| panic!("{backend}: TIME+ of the leader and the thread: {m}"));
    }
}

#[test]
fn batch_shows_kernel_threads_and_threads_with_h() {
    // A kernel thread from /proc (PF_KTHREAD in the flags).
    // The first, kthreadd, which lives as long as the system and keeps its name (a worker
    // thread may end, or change its name, between two looks).
    let kthread = tasks::pids()
        .into_iter()
        .filter(|&p| p > 1)
        .find(|&p| {
            tasks::stat(p)
                .and_then(|f| f.get(6)?.parse::<u64>().ok())
                .is_some_and(|fl| fl & 0x0020_0000 != 0)
        })
        .expect("a kernel thread");
    let th = threaded();
    for backend in BACKENDS {
        let out = stdout(&top(backend, &["-b", "-n", "1", "-w", "512"]));
        let rows = last_frame_rows(&out);
        let k = rows
            .iter()
            .find(|r| r.pid == kthread)
            .unwrap_or_else(|| panic!("{backend}: kernel thread {kthread} missing"));
        assert_eq!(k.command, comm(kthread));
        assert_eq!(k.res, "0");
        let total: usize = last_line(&out, "Tasks:")
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .expect("total");
        // (Pids wider than pid_max's digits end in '+', as with procps, so count lines: a
        // task started while pid_max was higher, e.g. a kernel worker during a benchmark of
        // 150,000 tasks, keeps its wide pid after pid_max is put back.)
        let at = out.rfind("  PID USER").expect("heading");
        let lines: Vec<&str> = out[at..]
            .lines()
            .skip(1)
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(total, lines.len(), "{backend}: every task has a line");
        let cut = lines
            .iter()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|p| p.ends_with('+'))
            })
            .count();
        assert!(
            rows.len() + cut + 10 > lines.len(),
            "{backend}: unreadable lines"
        );
        // With -c, kernel threads show [name].
        let out = stdout(&top(
            backend,
            &[
                "-b",
                "-n",
                "1",
                "-c",
                "-w",
                "512",
                "-p",
                &kthread.to_string(),
            ],
        ));
        assert_eq!(
            last_frame_rows(&out)[0].command,
            format!("[{}]", comm(kthread))
        );
        // -H: one line per thread, as procps top shows them (once the fixture has stopped
        // using CPU: TIME+ would otherwise differ between the two looks).
        settle(th.pid());
        let pid = th.pid().to_string();
        let args = ["-b", "-n", "1", "-H", "-w", "200", "-p", &pid];
        let ours = stdout(&top(backend, &args));
        let rows = last_frame_rows(&ours);
        let mut got: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        got.sort_unstable();
        assert_eq!(got, tids(th.pid()), "{backend}: {ours}");
        assert!(rows.iter().all(|r| r.command == "tdtopthr"), "{ours}");
        assert!(last_line(&ours, "Threads:").contains("  4 total"), "{ours}");
        let body = |o: Output| {
            stdout(&o)
                .lines()
                .skip(5)
                .map(String::from)
                .collect::<Vec<_>>()
        };
        agree(|| body(procps_top(&args)), || body(top(backend, &args)))
            .unwrap_or_else(|m| panic!("{backend}: -H lines differ from procps top: {m}"));
        // Without -H, the process is one line.
        let out = stdout(&top(backend, &["-b", "-n", "1", "-p", &pid]));
        assert_eq!(last_frame_rows(&out).len(), 1);
    }
}

#[test]
fn batch_options_and_errors() {
    let s = sleeper();
    let pid = s.pid().to_string();
    for backend in BACKENDS {
        // Sorting by PID lowest first; user filter; iterations.
        let out = stdout(&top(backend, &["-b", "-n", "1", "-o", "-PID", "-w", "300"]));
        let pids: Vec<u32> = last_frame_rows(&out).iter().map(|r| r.pid).collect();
        assert!(
            pids.windows(2).all(|w| w[0] < w[1]),
            "{backend}: not by pid"
        );
        let out = stdout(&top(backend, &["-b", "-n", "1", "-u", TEST_USER]));
        assert!(
            last_frame_rows(&out).iter().all(|r| r.user == "taskdia+"),
            "{out}"
        );
        let out = stdout(&top(backend, &["-b", "-n", "3", "-d", "0.1", "-p", &pid]));
        assert_eq!(out.matches("\ntop - ").count() + 1, 3, "{out}");
        assert!(
            out.contains(" sleep\n\ntop - "),
            "frames separated by one blank line: {out}"
        );
        // -w: lines are cut to the width, and a long COMMAND ends in '+'.
        let out = stdout(&top(backend, &["-b", "-n", "1", "-w", "70", "-p", &pid]));
        assert!(out.lines().all(|l| l.len() <= 70), "{out}");
        // Just wide enough for COMMAND's 8 cells: "sleep 1000" becomes "sleep 1+".
        let pid_w = tasks::pid_max().to_string().len().max(5);
        let w = (pid_w + 73).to_string();
        let out = stdout(&top(
            backend,
            &["-b", "-n", "1", "-c", "-w", &w, "-p", &pid],
        ));
        assert_eq!(last_frame_rows(&out)[0].command, "sleep 1+", "{out}");
    }
    let bad = |args: &[&str], code: i32, msg: &str| {
        let o = top("procfs", args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
        let p = procps_top(args);
        assert_eq!(p.status.code(), Some(code), "procps {args:?}");
    };
    bad(&["-b", "-n", "0"], 1, "bad iterations argument '0'");
    bad(&["-b", "-d", "-1"], 1, "-d requires positive argument");
    bad(&["-b", "-p", "abc"], 1, "bad pid 'abc'");
    bad(&["-b", "-u", "no-such-user-here"], 1, "Invalid user");
    bad(&["-b", "-o", "NOPE"], 1, "unrecognized field name 'NOPE'");
    bad(&["-b", "-x"], 0, "invalid option");
    let h = top("procfs", &["--help"]);
    assert!(h.status.success() && stdout(&h).contains("INTERACTIVE COMMANDS"));
    // Interactive mode needs a terminal.
    let o = Command::new(BIN)
        .args(["top"])
        .stdin(Stdio::null())
        .output()
        .expect("top");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("failed tty get"), "{}", stderr(&o));
}

#[test]
fn batch_as_unprivileged_user_and_in_a_pid_namespace() {
    let uid = test_user();
    let us = user_sleeper();
    let pid = us.pid().to_string();
    let as_user = |prog: &str, args: &[&str]| -> Output {
        super::as_test_user(prog)
            .args(args)
            .output()
            .expect("setpriv")
    };
    // auto picks /proc for an unprivileged user; the user's own tasks are there.
    let o = as_user(BIN, &["top", "-b", "-n", "1", "-w", "200"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = last_frame_rows(&stdout(&o));
    let mine = rows
        .iter()
        .find(|r| r.pid == us.pid())
        .expect("the user's sleeper");
    assert_eq!(
        (mine.user.as_str(), mine.command.as_str()),
        ("taskdia+", "sleep")
    );
    assert!(
        rows.iter()
            .any(|r| r.command == "taskdiag" && r.user == "taskdia+"),
        "top itself"
    );
    let _ = uid;
    // Same line as procps top run by the same user.
    let rows = |o: Output| last_frame_rows(&stdout(&o));
    let a = agree(
        || rows(as_user("top", &["-b", "-n", "1", "-w", "200", "-p", &pid])),
        || {
            rows(as_user(
                BIN,
                &["top", "-b", "-n", "1", "-w", "200", "-p", &pid],
            ))
        },
    )
    .unwrap_or_else(|m| panic!("unprivileged line differs from procps top: {m:?}"));
    assert_eq!(a.len(), 1, "{a:?}");
    let o = as_user(BIN, &["top", "-b", "-n", "1"]);
    assert!(o.status.success());
    let o = super::as_test_user(BIN)
        .env("TASKDIAG_BACKEND", "bpf")
        .args(["top", "-b", "-n", "1"])
        .output()
        .expect("setpriv");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("top: opening the bpf backend"),
        "{}",
        stderr(&o)
    );

    // A child pid namespace: only its tasks, in its numbers, like procps top there.
    for backend in BACKENDS {
        let script = format!(
            "{waits}sleep 100 & a=$!; sleep 100 & b=$!; wait_comm $a sleep; wait_comm $b sleep; \
             TASKDIAG_BACKEND={backend} {BIN} top -b -n 1 -w 200; echo ===; \
             TASKDIAG_BACKEND={backend} {BIN} top -b -n 1 -w 200 -p $a,$b; echo ===; \
             top -b -n 1 -w 200 -p $a,$b; kill $a $b",
            waits = taskdiag_test_support::process::sh_waits()
        );
        let o = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
            .output()
            .expect("unshare");
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let out = stdout(&o);
        let parts: Vec<&str> = out.split("===\n").collect();
        assert_eq!(parts.len(), 3, "{out}");
        let rows = last_frame_rows(parts[0]);
        assert!(
            rows.iter().all(|r| r.pid < 20),
            "{backend}: tasks of the parent namespace: {out}"
        );
        let sleeps: Vec<u32> = rows
            .iter()
            .filter(|r| r.command == "sleep")
            .map(|r| r.pid)
            .collect();
        assert_eq!(sleeps, [2, 3], "{backend}: {out}");
        assert!(rows.iter().any(|r| r.command == "taskdiag"), "{out}");
        let body = |s: &str| s.lines().skip(5).map(String::from).collect::<Vec<_>>();
        assert_eq!(
            body(parts[1]),
            body(parts[2]),
            "{backend}: differs from procps top"
        );
    }
}

/// A tmux server of our own running one pane; killed on drop.
struct Tmux {
    socket: String,
    conf: std::path::PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f"]).arg(&self.conf);
        c
    }

    /// Starts `shell_cmd` in a 160x50 pane.
    fn start(tag: &str, shell_cmd: &str) -> Tmux {
        ensure_installed("/usr/bin/tmux", "tmux");
        let socket = format!("taskdiag-top-{tag}-{}", std::process::id());
        let conf = std::env::temp_dir().join(format!("{socket}.conf"));
        std::fs::write(&conf, "set -g remain-on-exit on\nset -g status off\n").expect("conf");
        let t = Tmux { socket, conf };
        let o = t
            .cmd()
            .args([
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "160",
                "-y",
                "50",
                shell_cmd,
            ])
            .output()
            .expect("tmux");
        assert!(o.status.success(), "tmux: {}", stderr(&o));
        t
    }

    fn screen(&self) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .expect("capture");
        stdout(&o)
    }

    fn keys(&self, keys: &[&str]) {
        let o = self
            .cmd()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .output()
            .expect("keys");
        assert!(o.status.success(), "send-keys {keys:?}");
        std::thread::sleep(Duration::from_millis(150));
    }

    /// Types `text` literally.
    fn type_text(&self, text: &str) {
        let o = self
            .cmd()
            .args(["send-keys", "-t", "t", "-l", text])
            .output()
            .expect("keys");
        assert!(o.status.success());
        std::thread::sleep(Duration::from_millis(150));
    }

    fn var(&self, name: &str) -> String {
        let o = self
            .cmd()
            .args(["display-message", "-p", "-t", "t", &format!("#{{{name}}}")])
            .output()
            .expect("display");
        stdout(&o).trim().to_string()
    }

    /// Waits until the screen satisfies `pred`; the last screen either way.
    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let mut s = self.screen();
        let seen = wait_until(PATIENCE, || {
            s = self.screen();
            pred(&s)
        });
        assert!(seen, "timed out waiting for {what}; screen:\n{s}");
        s
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
        let _ = std::fs::remove_file(&self.conf);
    }
}

/// Task rows on a captured screen (below the heading).
fn screen_rows(screen: &str) -> Vec<TRow> {
    match screen.find("  PID USER") {
        Some(at) => screen[at..].lines().skip(1).filter_map(parse_row).collect(),
        None => Vec::new(),
    }
}

/// RES as KiB (with procps' m/g/t suffixes).
fn res_kib(s: &str) -> f64 {
    let (num, mul) = match s.chars().last() {
        Some('m') => (&s[..s.len() - 1], 1024.0),
        Some('g') => (&s[..s.len() - 1], 1024.0 * 1024.0),
        Some('t') => (&s[..s.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (s, 1.0),
    };
    num.parse::<f64>().unwrap_or(f64::NAN) * mul
}

/// TIME+ as seconds (m:ss.hh, m:ss or h,mm).
fn time_secs(s: &str) -> f64 {
    if let Some((m, rest)) = s.split_once(':') {
        return m.parse::<f64>().unwrap_or(0.0) * 60.0 + rest.parse::<f64>().unwrap_or(0.0);
    }
    if let Some((h, m)) = s.split_once(',') {
        return h.parse::<f64>().unwrap_or(0.0) * 3600.0 + m.parse::<f64>().unwrap_or(0.0) * 60.0;
    }
    f64::MAX
}

/// A process named `name` below `root` in the process tree.
fn descendant(root: u32, name: &str) -> Option<u32> {
    let ppid = |p: u32| -> Option<u32> {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        s[s.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .find(|&p| {
            let mut q = p;
            for _ in 0..10 {
                match ppid(q) {
                    Some(pp) if pp == root => return true,
                    Some(pp) if pp > 1 => q = pp,
                    _ => return false,
                }
            }
            false
        })
}

/// Starts `taskdiag top -d 0.5` in tmux under a shell that reports how the terminal was
/// left when top ends.
fn interactive(backend: &str, tag: &str) -> (Tmux, u32) {
    let cmd = format!(
        "sh -c 'echo BEFORE-TOP; TASKDIAG_BACKEND={backend} {BIN} top -d 0.5; \
         echo \"TOP-EXIT=$?\"; stty -a | tr \" ;\" \"\\n\\n\" | grep -Ex -- \"-?(icanon|echo)\"; echo STTY-DONE; sleep 600'"
    );
    let t = Tmux::start(tag, &cmd);
    t.wait_for("the task table", |s| {
        s.contains("  PID USER") && s.contains("Tasks:") && screen_rows(s).len() > 3
    });
    let shell: u32 = t.var("pane_pid").parse().expect("pane pid");
    let top = descendant(shell, "taskdiag").expect("top under the shell");
    (t, top)
}

/// After top ended: it exited 0, the shell's screen is back (not the alternate one) with
/// the cursor shown and the terminal out of raw mode.
fn assert_restored(t: &Tmux) {
    let s = t.wait_for("top to exit", |s| s.contains("TOP-EXIT="));
    assert!(s.contains("TOP-EXIT=0"), "{s}");
    assert!(
        s.contains("BEFORE-TOP"),
        "the screen before top is back: {s}"
    );
    assert!(!s.contains("  PID USER"), "top's screen is gone: {s}");
    // Until stty's lines are all there (waiting for the first one alone saw `icanon` and
    // not yet `echo`: make test, 2026-11-28).
    let s = t.wait_for("stty", |s| s.contains("STTY-DONE"));
    assert!(
        s.lines().any(|l| l.trim() == "icanon") && s.lines().any(|l| l.trim() == "echo"),
        "cooked mode: {s}"
    );
    assert_eq!(t.var("alternate_on"), "0");
    assert_eq!(t.var("cursor_flag"), "1", "cursor shown");
    assert_eq!(t.var("pane_dead"), "0");
}

#[test]
fn interactive_keys_as_a_person_uses_them() {
    let b = burner();
    let th = threaded();
    let us = user_sleeper();
    for backend in BACKENDS {
        let mut victim = sleeper();
        let renicee = sleeper();
        let (t, _top) = interactive(backend, &format!("keys-{backend}"));
        let s = t.screen();
        assert!(s.starts_with("top - "), "{s}");
        assert!(
            s.contains("%Cpu(s):") && s.contains("MiB Mem :") && s.contains("MiB Swap:"),
            "{s}"
        );

        // P: busiest first; the burner is near the top with a real share of a CPU.
        t.keys(&["P"]);
        let s = t.wait_for("the burner near the top", |s| {
            screen_rows(s)
                .iter()
                .take(15)
                .any(|r| r.pid == b.pid() && r.cpu > 5.0)
        });
        let cpus: Vec<f64> = screen_rows(&s).iter().map(|r| r.cpu).collect();
        assert!(
            cpus.windows(2).all(|w| w[0] + 1.0 >= w[1]),
            "not by %CPU: {s}"
        );

        // M: by resident memory.
        t.keys(&["M"]);
        let s = t.wait_for("memory order", |s| {
            let r: Vec<f64> = screen_rows(s).iter().map(|r| res_kib(&r.res)).collect();
            r.len() > 3 && r.windows(2).all(|w| w[0] >= w[1])
        });
        assert!(screen_rows(&s).len() > 10, "{s}");
        // T: by CPU time; N: by pid; R: reversed.
        t.keys(&["T"]);
        t.wait_for("time order", |s| {
            let r: Vec<f64> = screen_rows(s).iter().map(|r| time_secs(&r.time)).collect();
            r.len() > 3 && r.windows(2).all(|w| w[0] >= w[1])
        });
        t.keys(&["N"]);
        t.wait_for("pid order", |s| {
            let r: Vec<u32> = screen_rows(s).iter().map(|r| r.pid).collect();
            r.len() > 3 && r.windows(2).all(|w| w[0] > w[1])
        });
        t.keys(&["R"]);
        t.wait_for("reversed pid order", |s| {
            let r: Vec<u32> = screen_rows(s).iter().map(|r| r.pid).collect();
            r.len() > 3 && r.windows(2).all(|w| w[0] < w[1])
        });
        t.keys(&["R", "P"]);

        // o: a filter on the command; H: the threads of the threaded fixture.
        t.keys(&["o"]);
        t.wait_for("the filter prompt", |s| s.contains("add filter #1"));
        t.type_text("COMMAND=tdtopthr");
        t.keys(&["Enter"]);
        let s = t.wait_for("the filtered process", |s| {
            let r = screen_rows(s);
            r.len() == 1 && r[0].pid == th.pid()
        });
        assert!(s.contains("Tasks:"), "{s}");
        t.keys(&["H"]);
        let s = t.wait_for("its threads", |s| {
            let mut p: Vec<u32> = screen_rows(s).iter().map(|r| r.pid).collect();
            p.sort_unstable();
            p == tids(th.pid())
        });
        assert!(s.contains("Threads:"), "{s}");
        t.keys(&["H", "="]);
        t.wait_for("all tasks again", |s| {
            s.contains("Tasks:") && screen_rows(s).len() > 10
        });

        // u: one user's tasks.
        t.keys(&["u"]);
        t.wait_for("the user prompt", |s| {
            s.contains("Which user (blank for all)")
        });
        t.type_text(TEST_USER);
        t.keys(&["Enter"]);
        let s = t.wait_for("the user's tasks", |s| {
            let r = screen_rows(s);
            !r.is_empty()
                && r.iter().all(|r| r.user == "taskdia+")
                && r.iter().any(|r| r.pid == us.pid())
        });
        assert!(!screen_rows(&s).iter().any(|r| r.pid == b.pid()), "{s}");
        t.keys(&["u", "Enter"]);
        t.wait_for("everyone again", |s| {
            screen_rows(s).iter().any(|r| r.user == "root")
        });

        // r: renice a fixture.
        t.keys(&["r"]);
        t.wait_for("the renice prompt", |s| {
            s.contains("PID to renice [default pid = ")
        });
        t.type_text(&renicee.pid().to_string());
        t.keys(&["Enter"]);
        t.wait_for("the value prompt", |s| {
            s.contains(&format!("Renice PID {} to value", renicee.pid()))
        });
        t.type_text("7");
        t.keys(&["Enter"]);
        wait_for("renice to take effect", || {
            proc_stat(renicee.pid())[16] == "7"
        });

        // k: kill a fixture (default signal SIGTERM).
        t.keys(&["k"]);
        t.wait_for("the kill prompt", |s| {
            s.contains("PID to signal/kill [default pid = ")
        });
        t.type_text(&victim.pid().to_string());
        t.keys(&["Enter"]);
        t.wait_for("the signal prompt", |s| {
            s.contains(&format!("Send pid {} signal [15/sigterm]", victim.pid()))
        });
        t.keys(&["Enter"]);
        let st = victim.wait_exit(PATIENCE).expect("the victim died");
        assert_eq!(st.signal(), Some(libc::SIGTERM));

        // d: delay, shown on the help screen; h and any key back.
        t.keys(&["d"]);
        t.wait_for("the delay prompt", |s| {
            s.contains("Change delay from 0.5 to")
        });
        t.type_text("1.5");
        t.keys(&["Enter", "h"]);
        t.wait_for("help", |s| {
            s.contains("Help for Interactive Commands") && s.contains("Delay 1.5 secs")
        });
        t.keys(&["Space"]);
        t.wait_for("the table again", |s| s.contains("  PID USER"));
        t.keys(&["Z"]);
        t.wait_for("a message for an unsupported key", |s| {
            s.contains("'Z' is not available in taskdiag top")
        });

        // q: quit, and the terminal is as it was.
        t.keys(&["q"]);
        assert_restored(&t);
    }
}

#[test]
fn interactive_sigterm_restores_the_terminal() {
    for backend in BACKENDS {
        let (t, top) = interactive(backend, &format!("term-{backend}"));
        // SAFETY: kill has no memory-safety preconditions; `top` is our child's child.
        assert_eq!(unsafe { libc::kill(top as i32, libc::SIGTERM) }, 0);
        assert_restored(&t);
    }
}

#[test]
fn interactive_top_exits_when_its_terminal_goes_away() {
    // Closing the terminal (here: killing the tmux session) must end top, not leave it
    // polling a hung-up descriptor forever.
    let (t, top) = interactive("procfs", "hangup");
    drop(t);
    let alive = !wait_pid_exit(top, PATIENCE);
    if alive {
        // SAFETY: kill has no memory-safety preconditions; `top` is the top we started.
        unsafe { libc::kill(top as i32, libc::SIGKILL) };
    }
    assert!(
        !alive,
        "top (pid {top}) still runs after its terminal went away"
    );
}

/// What interactive `taskdiag top` wrote on a pseudo-terminal that answers nothing, and how it
/// ended.
struct SilentPty {
    /// Every byte top wrote.
    out: Vec<u8>,
    /// Whether it drew the task table's heading.
    drawn: bool,
    /// Its exit status (after `q`, when it drew); `None`: still running after [`PATIENCE`].
    status: Option<std::process::ExitStatus>,
}

impl SilentPty {
    /// The screen's rows: the lowest row a cursor move (`ESC[row;colH`) went to.
    fn rows(&self) -> usize {
        String::from_utf8_lossy(&self.out)
            .split("\x1b[")
            .filter_map(|seq| {
                let (row, rest) = seq.split_once(';')?;
                rest.split_once('H')?.0.parse::<usize>().ok()?;
                row.parse::<usize>().ok()
            })
            .max()
            .unwrap_or(0)
    }

    /// The screen's columns: the column heading, drawn reversed from `  PID USER` up to the
    /// next escape sequence, is as wide as the screen where COMMAND fits (that last column takes
    /// what the others leave: 80 columns and more).
    fn cols(&self) -> usize {
        let s = String::from_utf8_lossy(&self.out);
        let reversed = "\x1b[7m";
        let Some(at) = s.find(&format!("{reversed}{}", pid_heading("PID"))) else {
            return 0;
        };
        let line = &s[at + reversed.len()..];
        line[..line.find('\x1b').unwrap_or(line.len())]
            .chars()
            .count()
    }
}

/// Runs interactive `taskdiag top` on a new pseudo-terminal of `winsize` (columns, rows; none:
/// 0x0, which is what a serial line reports) as its controlling terminal, with `env` and no
/// other COLUMNS or LINES. The terminal never answers the cursor-position query (`ESC[6n`) that
/// a terminal emulator answers. Waits for the task table, types `q` and waits for top to end.
fn top_on_a_silent_pty(winsize: Option<(u16, u16)>, env: &[(&str, &str)]) -> SilentPty {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::sync::{Arc, Mutex};

    let cloexec = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // Both sides close-on-exec from the start: another test's child must not keep either open.
    // SAFETY: posix_openpt takes flags only.
    let m = unsafe { libc::posix_openpt(cloexec) };
    assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
    // SAFETY: posix_openpt gave us this descriptor.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    let mut name = [0 as libc::c_char; 64];
    // SAFETY: a master descriptor of ours and a buffer of the length given.
    let ok = unsafe {
        libc::grantpt(m) == 0
            && libc::unlockpt(m) == 0
            && libc::ptsname_r(m, name.as_mut_ptr(), name.len()) == 0
    };
    assert!(ok, "pty: {}", std::io::Error::last_os_error());
    // SAFETY: ptsname_r wrote a NUL-terminated path into `name`.
    let s = unsafe { libc::open(name.as_ptr(), cloexec) };
    assert!(s >= 0, "open pty: {}", std::io::Error::last_os_error());
    // SAFETY: open gave us this descriptor.
    let slave = unsafe { OwnedFd::from_raw_fd(s) };
    if let Some((cols, rows)) = winsize {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize, which lives through the call.
        assert_eq!(unsafe { libc::ioctl(s, libc::TIOCSWINSZ, &ws) }, 0);
    }
    let mut cmd = Command::new(BIN);
    cmd.args(["top", "-d", "0.5"])
        .env_remove("COLUMNS")
        .env_remove("LINES")
        .env("TASKDIAG_BACKEND", "procfs")
        .envs(env.iter().copied())
        .stdin(slave.try_clone().expect("dup"))
        .stdout(slave.try_clone().expect("dup"))
        .stderr(slave);
    // SAFETY: setsid and ioctl are async-signal-safe and touch only the child.
    unsafe {
        cmd.pre_exec(|| {
            // The terminal is the new session's controlling terminal, as a login's is.
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut top = Spawned::spawn(&mut cmd).leads_own_group();
    // The command's copies of the slave side closed: the master reads EIO once top is gone.
    drop(cmd);
    let out = Arc::new(Mutex::new(Vec::new()));
    let mut reader = std::fs::File::from(master.try_clone().expect("dup"));
    let sink = Arc::clone(&out);
    let drain = std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            sink.lock().expect("lock").extend_from_slice(&buf[..n]);
        }
    });
    let head = format!("{} USER", pid_heading("PID"));
    let has_head = |o: &[u8]| o.windows(head.len()).any(|w| w == head.as_bytes());
    // Until the table is drawn, or top has ended (a zombie, not reaped until wait_exit).
    wait_until(PATIENCE, || {
        has_head(&out.lock().expect("lock")) || tasks::state(top.pid()).is_none_or(|s| s == 'Z')
    });
    let drawn = has_head(&out.lock().expect("lock"));
    // Open until top has ended: closing it would hang the terminal up, which ends top too.
    let mut keys = std::fs::File::from(master);
    if drawn {
        keys.write_all(b"q").expect("type q");
    }
    let status = top.wait_exit(PATIENCE);
    drop((top, keys));
    drain.join().expect("drain");
    let out = std::mem::take(&mut *out.lock().expect("lock"));
    SilentPty { out, drawn, status }
}

/// A terminal that never answers the cursor-position query (serial consoles, some multiplexers
/// and web terminals) gets top's screen as procps top draws it there: sized from the terminal
/// (TIOCGWINSZ, even with COLUMNS and LINES set), else from COLUMNS and LINES, else 80x24; and
/// `q` ends it with status 0. Top never sends that query.
#[test]
fn interactive_top_on_a_terminal_that_answers_nothing() {
    for (winsize, env, want) in [
        (
            Some((100, 20)),
            &[("COLUMNS", "60"), ("LINES", "14")][..],
            (100, 20),
        ),
        (None, &[("COLUMNS", "90"), ("LINES", "16")], (90, 16)),
        (None, &[], (80, 24)),
    ] {
        let t0 = std::time::Instant::now();
        let r = top_on_a_silent_pty(winsize, env);
        let took = t0.elapsed();
        let shown = String::from_utf8_lossy(&r.out);
        assert!(
            r.drawn,
            "{winsize:?} {env:?}: no task table ({:?}): {shown:?}",
            r.status
        );
        assert_eq!(r.status.and_then(|s| s.code()), Some(0), "{shown:?}");
        assert!(!shown.contains("\x1b[6n"), "the cursor was asked for");
        assert_eq!((r.cols(), r.rows()), want, "{winsize:?} {env:?}: {shown:?}");
        eprintln!("{winsize:?} {env:?}: drawn and quit in {took:?}");
    }
}

/// With the change tracker (TASKDIAG_TOP_TRACK=1 requires it, and re-reads only what changed
/// at every refresh between its walks of every task), frames must still follow a process
/// started while top runs, one that exits, a zombie until it is reaped (which marks only its
/// parent), a busy process's %CPU, and for a process that slept throughout show the very line
/// a top without the tracker prints. Top runs ahead of the test (its output is buffered, and a
/// fixture may take seconds to start on a slow machine), so each change is checked as a state
/// that, once a frame shows it, every later frame shows, and that the last frame shows.
#[test]
fn batch_frames_with_the_change_tracker_follow_every_change() {
    use std::io::{BufRead, BufReader};
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let b = burner();
    let quiet = sleeper();
    settle(quiet.pid());
    for backend in BACKENDS {
        if backend == "bpf" && !tasks::kernel_at_least(6, 1) {
            // Before 6.1 a BPF request for one process walks every task: no tracker there.
            eprintln!("bpf: skipped, the kernel has no task iterator link parameters");
            continue;
        }
        let mut doomed = Some(sleeper());
        let doomed_pid = doomed.as_ref().map_or(0, |d| d.pid());
        let mut child = Command::new(BIN)
            .env("TASKDIAG_BACKEND", backend)
            .env("TASKDIAG_TOP_TRACK", "1")
            .args(["top", "-b", "-n", "40", "-d", "0.2", "-w", "200"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("taskdiag top");
        let reader = BufReader::new(child.stdout.take().expect("stdout"));
        let (mut born, mut parent, mut zombie, mut reaped) = (None, None::<Fixture>, 0, false);
        let mut frames: Vec<String> = Vec::new();
        let shows_zombie = |f: &str, zombie: u32| {
            zombie != 0
                && last_frame_rows(f)
                    .iter()
                    .any(|r| r.pid == zombie && r.state == "Z")
        };
        for l in reader.lines() {
            let l = l.expect("read top");
            if l.starts_with("top - ") {
                // The frame before is complete.
                if let (Some(f), Some(p)) = (frames.last(), &parent) {
                    if !reaped && shows_zombie(f, zombie) {
                        // SAFETY: kill takes plain integers; the parent is our live child.
                        unsafe { libc::kill(p.pid() as i32, libc::SIGUSR1) };
                        wait_for("the zombie to be reaped", || tasks::stat(zombie).is_none());
                        reaped = true;
                    }
                }
                frames.push(String::new());
                if frames.len() == 2 {
                    born = Some(sleeper());
                    drop(doomed.take());
                    // A child that exits at once, reaped only on SIGUSR1.
                    let p = python_named(
                        "tdzparent",
                        "import os,signal\npid=os.fork()\nif pid==0: os._exit(0)\n\
                         signal.signal(signal.SIGUSR1,lambda *a: os.waitpid(pid,0))\n\
                         time.sleep(1000)",
                    );
                    let pp = p.pid();
                    wait_for("the zombie", || {
                        let kids =
                            std::fs::read_to_string(format!("/proc/{pp}/task/{pp}/children"))
                                .unwrap_or_default();
                        zombie = kids.trim().parse().unwrap_or(0);
                        zombie != 0 && tasks::stat(zombie).is_some_and(|f| f[0] == "Z")
                    });
                    parent = Some(p);
                }
            }
            if let Some(f) = frames.last_mut() {
                f.push_str(&l);
                f.push('\n');
            }
        }
        let o = child.wait_with_output().expect("wait top");
        let burner_end = tasks::cpu_ticks(b.pid());
        let err = stderr(&o);
        assert!(o.status.success(), "{backend}: {err}");
        assert!(reaped, "{backend}: no frame showed the zombie");
        // Refreshes after the first read only what changed, but for a walk every 10 s.
        let counts: Vec<u64> = err
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        assert!(
            counts.len() == 2 && counts[0] + counts[1] == 40 && counts[1] >= 30,
            "{backend}: {err}"
        );
        let rows: Vec<Vec<TRow>> = frames.iter().map(|f| last_frame_rows(f)).collect();
        let has = |i: usize, pid: u32| rows[i].iter().any(|r| r.pid == pid);
        // From the first frame that shows `holds` on, every frame does, the last one too.
        let settled = |what: &str, holds: &dyn Fn(usize) -> bool| {
            let first = (0..rows.len()).find(|&i| holds(i));
            let first = first.unwrap_or_else(|| panic!("{backend}: no frame shows {what}"));
            for (i, f) in frames.iter().enumerate().skip(first) {
                assert!(
                    holds(i),
                    "{backend}: {what} in frame {first}, not in {i}: {f}"
                );
            }
        };
        let born = born.expect("a second frame").pid();
        settled("the new process", &|i| has(i, born));
        settled("the exited process gone", &|i| !has(i, doomed_pid));
        // The zombie (its pid may show first as the child before it exits): Z from some frame
        // on, until it is gone, then gone for good.
        let zstate = |i: usize| {
            rows[i]
                .iter()
                .find(|r| r.pid == zombie)
                .map(|r| r.state.as_str())
        };
        let z_first = (0..rows.len()).find(|&i| zstate(i) == Some("Z"));
        let z_first = z_first.unwrap_or_else(|| panic!("{backend}: no frame shows the zombie"));
        settled("the reaped zombie gone", &|i| {
            i > z_first && zstate(i).is_none()
        });
        let z_gone = (z_first..rows.len())
            .find(|&i| zstate(i).is_none())
            .unwrap_or(rows.len());
        for (i, f) in frames.iter().enumerate().take(z_gone).skip(z_first) {
            assert_eq!(zstate(i), Some("Z"), "{backend}, frame {i}: {f}");
        }
        // The busy process: re-read at every refresh (it is on a CPU or leaves one), so its
        // TIME+ never falls behind and its %CPU shows in the frames (a loaded machine may give
        // it nothing in one 0.2 s interval, not in most); its last TIME+ is /proc's of the end.
        let burner: Vec<&TRow> = rows
            .iter()
            .skip(1)
            .map(|r| r.iter().find(|r| r.pid == b.pid()).expect("burner row"))
            .collect();
        let hundredths = |t: &str| -> u64 {
            let (m, s) = t.split_once(':').expect("TIME+ m:ss.hh");
            let (s, h) = s.split_once('.').expect("TIME+ m:ss.hh");
            (m.parse::<u64>().expect("m") * 60 + s.parse::<u64>().expect("s")) * 100
                + h.parse::<u64>().expect("hh")
        };
        let times: Vec<u64> = burner.iter().map(|r| hundredths(&r.time)).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "{backend}: {times:?}"
        );
        let busy = burner.iter().filter(|r| r.cpu > 0.0).count();
        assert!(2 * busy >= burner.len(), "{backend}: {burner:?}");
        let end = burner_end.expect("the burner's /proc stat") * 100 / hz;
        let last = times[times.len() - 1];
        assert!(
            last <= end && end - last <= 100,
            "{backend}: TIME+ {last} at the last frame, {end} in /proc after it"
        );
        let q = rows[rows.len() - 1]
            .iter()
            .find(|r| r.pid == quiet.pid())
            .expect("sleeper row");
        let walked = top(
            backend,
            &["-b", "-n", "1", "-w", "200", "-p", &quiet.pid().to_string()],
        );
        let w = last_frame_rows(&stdout(&walked));
        assert_eq!(q.line, w[0].line, "{backend}");
    }
}

/// A home directory holding a `.toprc` that shows `shown` (field names, in this order) and
/// sorts by `sort`, written as procps-ng 4.0.2's `W` writes it; removed on drop. taskdiag's
/// own field (SYSCALL) is the first of procps' padding values; a file showing it is one for
/// taskdiag top only.
struct TopHome(std::path::PathBuf);

impl TopHome {
    fn new(tag: &str, shown: &[&str], sort: &str) -> TopHome {
        let dir = std::env::temp_dir().join(format!("taskdiag-top-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("home");
        let names_out = stdout(&procps_top(&["-O"]));
        let mut names: Vec<&str> = names_out.lines().collect();
        assert_eq!(names.len(), 78, "procps top -O: {names_out}");
        names.push("SYSCALL");
        let idx = |n: &str| {
            names
                .iter()
                .position(|x| *x == n)
                .unwrap_or_else(|| panic!("no field {n}"))
        };
        let mut order: Vec<usize> = shown.iter().map(|n| idx(n)).collect();
        let rest: Vec<usize> = (0..names.len()).filter(|i| !order.contains(i)).collect();
        order.extend(rest);
        // fieldscur: (field + '%') << 1, | 1 when shown; 100 values, the unused ones last.
        let vals: Vec<usize> = order
            .iter()
            .map(|&i| ((i + 37) << 1) | usize::from(shown.contains(&names[i])))
            .chain((names.len()..100).map(|i| (i + 37) << 1))
            .collect();
        let mut fc = String::new();
        for (j, v) in vals.iter().enumerate() {
            if j > 0 && j % 20 == 0 {
                fc.push_str("\n\t\t  ");
            }
            fc.push_str(&format!("{v:4} "));
        }
        let mut rc = String::from(
            "top's Config File (Linux processes with windows)\n\
             Id:k, Mode_altscr=0, Mode_irixps=1, Delay_time=3.0, Curwin=0\n",
        );
        for (w, sortindx) in [("Def", idx(sort)), ("Job", 0), ("Mem", 21), ("Usr", 3)] {
            rc.push_str(&format!(
                "{w}\tfieldscur={fc}\n\twinflags=193844, sortindx={sortindx}, maxtasks=0, \
                 graph_cpus=0, graph_mems=0, double_up=0, combine_cpus=0, core_types=0\n\
                 \tsummclr=1, msgsclr=1, headclr=3, taskclr=1\n"
            ));
        }
        rc.push_str(
            "Fixed_widest=0, Summ_mscale=1, Task_mscale=0, Zero_suppress=0, Tics_scaled=0\n",
        );
        std::fs::write(dir.join(".toprc"), rc).expect("toprc");
        TopHome(dir)
    }
}

impl Drop for TopHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn top_at(home: &TopHome, backend: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .env("HOME", &home.0)
        .env_remove("XDG_CONFIG_HOME")
        .env("TASKDIAG_BACKEND", backend)
        .arg("top")
        .args(args)
        .output()
        .expect("taskdiag top")
}

fn procps_top_at(home: &TopHome, args: &[&str]) -> Output {
    Command::new("top")
        .env("HOME", &home.0)
        .env_remove("XDG_CONFIG_HOME")
        .args(args)
        .output()
        .expect("procps top")
}

/// Fields turned on in a toprc print the same bytes as procps top's for quiescent fixtures
/// (namespaces, cgroups, groups, the environment, the executable, faults and their deltas,
/// memory sizes, the wait channel), whatever the width, sorted by a text or a number field.
#[test]
fn batch_fields_from_a_toprc_match_procps_top() {
    // One with an environment of its own, one in another session with nothing in it.
    let s1 = spawn(
        Command::new("sleep")
            .arg("1000")
            .env_clear()
            .env("TDTOP_A", "1")
            .env("TDTOP_B", "two words")
            .env("PATH", "/usr/bin:/bin"),
        "sleep",
    );
    let s2 = spawn(Command::new("sleep").arg("1001").env_clear(), "sleep");
    settle(s1.pid());
    settle(s2.pid());
    let list = format!("{},{}", s1.pid(), s2.pid());
    let sets: [(&str, &[&str], &str); 4] = [
        (
            "ns",
            &[
                "PID", "PPID", "USER", "nsIPC", "nsMNT", "nsNET", "nsPID", "nsUSER", "nsUTS",
                "nsCGROUP", "nsTIME", "nMaj", "nMin", "vMj", "vMn", "SWAP", "CODE", "DATA", "USED",
                "RSan", "RSfd", "RSlk", "RSsh", "LXC", "WCHAN", "Flags", "S", "COMMAND",
            ],
            "PID",
        ),
        (
            "ids",
            &[
                "PID", "TGID", "PGRP", "SID", "TPGID", "TTY", "UID", "RUID", "RUSER", "SUID",
                "SUSER", "GID", "GROUP", "PR", "NI", "nTH", "P", "TIME", "nDRT", "S", "CGROUPS",
                "SUPGIDS", "SUPGRPS", "CGNAME", "EXE", "ENVIRON", "COMMAND",
            ],
            "nMin",
        ),
        (
            "text",
            &[
                "PID", "ENVIRON", "EXE", "CGNAME", "STARTED", "ioR", "ioRop", "ioW", "ioWop",
            ],
            "ENVIRON",
        ),
        (
            "sched",
            &[
                "PID", "OOMa", "OOMs", "LOGID", "AGID", "AGNI", "NI", "COMMAND",
            ],
            "OOMs",
        ),
    ];
    for (tag, shown, sort) in sets {
        let home = TopHome::new(tag, shown, sort);
        for width in ["512", "200", "80"] {
            let args = ["-b", "-n", "1", "-w", width, "-p", &list];
            for backend in BACKENDS {
                let o = agree(
                    || Frame(stdout(&procps_top_at(&home, &args))),
                    || {
                        let ours = top_at(&home, backend, &args);
                        assert!(ours.status.success(), "{backend}: {}", stderr(&ours));
                        Frame(stdout(&ours))
                    },
                )
                .unwrap_or_else(|m| {
                    panic!("{tag} -w {width} {backend}: output differs from procps top: {m}")
                })
                .0;
                // The fields are there, with the fixture's values.
                let pid_h = pid_heading("PID");
                let heading = o.lines().find(|l| l.starts_with(&pid_h)).expect("heading");
                assert!(heading.contains(shown[1]), "{tag}: {heading}");
                if tag == "text" && width == "512" {
                    assert!(o.contains("TDTOP_A=1 TDTOP_B=two words"), "{o}");
                    let exe = std::fs::read_link(format!("/proc/{}/exe", s1.pid())).expect("exe");
                    assert!(o.contains(&*exe.to_string_lossy()), "{o}");
                }
                if tag == "ns" {
                    let ipc = std::fs::metadata(format!("/proc/{}/ns/ipc", s1.pid()))
                        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                        .expect("ns");
                    assert!(o.contains(&format!(" {ipc} ")), "{o}");
                }
            }
        }
    }
}

/// NU and the smaps_rollup fields (RSS, PSS, PSan, PSfd, PSsh, USS) as procps top shows them,
/// sorted by PSS, for a static program (its proportional sizes do not depend on which top
/// looks: the sleepers above share libc with both) and its threads.
#[test]
fn batch_smaps_and_numa_fields_match_procps_top() {
    let low = super::maps::NoPie::start(super::daemon_trust::as_root, 2, &[]);
    let pid = low.proc.pid().to_string();
    let shown = [
        "PID", "NU", "RSS", "PSS", "PSan", "PSfd", "PSsh", "USS", "RES", "COMMAND",
    ];
    let home = TopHome::new("smaps", &shown, "PSS");
    for args in [
        &["-b", "-n", "1", "-w", "512", "-p", &pid][..],
        &["-b", "-n", "1", "-w", "80", "-H", "-p", &pid],
    ] {
        for backend in BACKENDS {
            let o = agree(
                || Frame(stdout(&procps_top_at(&home, args))),
                || {
                    let ours = top_at(&home, backend, args);
                    assert!(ours.status.success(), "{backend}: {}", stderr(&ours));
                    Frame(stdout(&ours))
                },
            )
            .unwrap_or_else(|m| panic!("{args:?} {backend}: differs from procps top: {m}"));
            assert!(o.0.contains(" PSan "), "{}", o.0);
        }
    }
}

/// -O lists every field as procps top does, then taskdiag's own; -o takes any of them.
#[test]
fn every_field_name_like_procps() {
    let ours = top("procfs", &["-O"]);
    assert!(ours.status.success());
    assert_eq!(stdout(&ours), stdout(&procps_top(&["-O"])) + "SYSCALL\n");
    let s = sleeper();
    let pid = s.pid().to_string();
    for name in stdout(&ours).lines() {
        let o = top("procfs", &["-b", "-n", "1", "-o", name, "-p", &pid]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let w = pid_col_width();
        assert!(stdout(&o).contains(&format!("\n{pid:>w$} ")), "{name}");
    }
    let o = top("procfs", &["-b", "-n", "1", "-o", "NOPE"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "top: unrecognized field name 'NOPE'\n");
}

/// The field-management screen (f) looks as procps top's and works as it does: toggling a
/// field, choosing the sort field and moving a field change the screen and then the task
/// table alike.
#[test]
fn interactive_field_management_like_procps() {
    let home = TopHome::new(
        "fscreen",
        &[
            "PID", "USER", "PR", "NI", "VIRT", "RES", "SHR", "S", "%CPU", "%MEM", "TIME+",
            "COMMAND",
        ],
        "%CPU",
    );
    let h = home.0.display();
    let ours = Tmux::start(
        "f-ours",
        &format!("env HOME={h} TASKDIAG_BACKEND=procfs {BIN} top -d 100"),
    );
    let theirs = Tmux::start("f-procps", &format!("env HOME={h} top -d 100"));
    for t in [&ours, &theirs] {
        t.wait_for("the task table", |s| s.contains("  PID USER"));
        t.keys(&["f"]);
        t.wait_for("the fields screen", |s| s.contains("Fields Management"));
    }
    // Ours lists taskdiag's SYSCALL after procps' fields: left out of the comparison.
    let fields_screen = |t: &Tmux| {
        let s = t.wait_for("the fields", |s| {
            s.contains("nsTIME   = TIME namespace Inode")
        });
        s.lines()
            .map(|l| match l.find(" SYSCALL  = Current System Call") {
                Some(at) => l[..at.saturating_sub(1)].trim_end(),
                None => l.trim_end(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(fields_screen(&ours), fields_screen(&theirs));
    // The cursor starts on the sort field (%CPU). Home, down to NI, turn it off; down to the
    // first hidden field (PPID), turn it on and sort by it; pick it up and move it up two
    // places.
    let keys: Vec<&str> = ["Home"]
        .into_iter()
        .chain(["Down"; 3])
        .chain(["d"])
        .chain(["Down"; 9])
        .chain(["Space", "s", "Right", "Up", "Up", "Enter"])
        .collect();
    for t in [&ours, &theirs] {
        for k in &keys {
            t.keys(&[k]);
        }
    }
    let s = fields_screen(&ours);
    assert!(s.contains("whose current sort field is PPID"), "{s}");
    assert!(s.contains("  NI       = Nice Value"), "NI off: {s}");
    assert_eq!(s, fields_screen(&theirs));
    for t in [&ours, &theirs] {
        t.keys(&["q"]);
        t.wait_for("the task table", |s| s.contains("  PID USER"));
    }
    let (pid_h, ppid_h) = (pid_heading("PID"), pid_heading("PPID"));
    let heading = |t: &Tmux| {
        t.screen()
            .lines()
            .find(|l| l.starts_with(&format!("{pid_h} USER")))
            .map(|l| l.trim_end().to_string())
            .expect("heading")
    };
    let h = heading(&ours);
    assert!(
        h == format!(
            "{pid_h} USER      PR    VIRT    RES    SHR S  %CPU  %MEM {ppid_h}     TIME+ COMMAND"
        ),
        "{h}"
    );
    assert_eq!(h, heading(&theirs));
    for t in [&ours, &theirs] {
        t.keys(&["q"]);
    }
}

/// WCHAN as procps shows /proc/PID/wchan: `-` for 0, one leading `.` and every leading `_`
/// dropped, cut to its 10 columns with `+`; `None` when the task vanished.
fn proc_wchan(pid: u32) -> Option<String> {
    let raw = tasks::read_string(format!("/proc/{pid}/wchan"))?;
    let mut w = raw.strip_prefix('.').unwrap_or(&raw);
    w = w.trim_start_matches('_');
    Some(match w {
        "0" => "-".to_string(),
        w if w.chars().count() > 10 => format!("{}+", w.chars().take(9).collect::<String>()),
        w => w.to_string(),
    })
}

/// The system call number /proc/PID/syscall gives (`None`: running, or the task vanished).
fn proc_syscall_nr(pid: u32) -> Option<i64> {
    let s = tasks::read_string(format!("/proc/{pid}/syscall"))?;
    s.split_whitespace().next()?.parse().ok()
}

/// WCHAN and SYSCALL, turned on in a toprc, show what /proc/PID/wchan and /proc/PID/syscall
/// say: a sleeper in `hrtimer_nanosleep` and `clock_nanosleep` (or `nanosleep`, as its number
/// names it), a kernel thread with no system call, a busy loop on a CPU; and the default fields
/// read neither.
#[test]
fn batch_wchan_and_syscall_fields_match_proc() {
    let s = sleeper();
    let b = burner();
    settle(s.pid());
    let home = TopHome::new("wchan", &["PID", "S", "WCHAN", "SYSCALL", "COMMAND"], "PID");
    // kthreadd, where this pid namespace shows the kernel's threads.
    let kthread = (tasks::comm(2).as_deref() == Some("kthreadd")).then_some(2u32);
    let mut pids = vec![s.pid(), b.pid()];
    pids.extend(kthread);
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let list = list.join(",");
    let expect_nr = proc_syscall_nr(s.pid()).expect("the sleeper's system call");
    let expect_name = match expect_nr {
        35 => "nanosleep",
        230 => "clock_nanosleep",
        nr => panic!("sleep(1) blocked in system call {nr}"),
    };
    for backend in BACKENDS {
        for threads in [false, true] {
            let mut args = vec!["-b", "-n", "1", "-w", "512", "-p", &list];
            if threads {
                args.push("-H");
            }
            let o = top_at(&home, backend, &args);
            assert!(o.status.success(), "{backend}: {}", stderr(&o));
            let out = stdout(&o);
            let at = out
                .rfind("  PID S WCHAN      SYSCALL         COMMAND")
                .unwrap_or_else(|| panic!("{backend}: heading: {out}"));
            let rows: Vec<Vec<&str>> = out[at..]
                .lines()
                .skip(1)
                .map(|l| l.split_whitespace().collect())
                .collect();
            let row = |pid: u32| {
                rows.iter()
                    .find(|r| r[0] == pid.to_string())
                    .unwrap_or_else(|| panic!("{backend}: no row for {pid}: {out}"))
            };
            let r = row(s.pid());
            assert_eq!(
                r[1..],
                [
                    "S",
                    proc_wchan(s.pid()).unwrap().as_str(),
                    expect_name,
                    "sleep"
                ]
            );
            assert_eq!(
                proc_syscall_nr(s.pid()),
                Some(expect_nr),
                "the sleeper slept on"
            );
            // On a CPU, or between two of its turns (outside any system call).
            let r = row(b.pid());
            assert_eq!((r[1], r[2]), ("R", "-"), "{backend}: {out}");
            assert!(["running", "-"].contains(&r[3]), "{backend}: {out}");
            if let Some(k) = kthread {
                let r = row(k);
                assert_eq!(r[2..], [proc_wchan(k).unwrap().as_str(), "-", "kthreadd"]);
            }
        }
        // Default fields: neither heading.
        let o = top(backend, &["-b", "-n", "1", "-w", "512", "-p", &list]);
        let out = stdout(&o);
        assert!(o.status.success() && out.contains("  PID USER"), "{out}");
        assert!(!out.contains("WCHAN") && !out.contains("SYSCALL"), "{out}");
    }
}

/// K shows the kernel stack of the task asked for (the top line by default), a frame a line
/// as /proc/PID/stack without `[<0>] `, until a key is pressed; to another user than root it
/// says that the stack is root's only, as /proc/PID/stack is.
#[test]
fn interactive_kernel_stack_key_like_proc_stack() {
    let s = sleeper();
    settle(s.pid());
    let pid = s.pid().to_string();
    // The function names of /proc/PID/stack's frames.
    let names = |frames: &[&str]| -> Vec<String> {
        frames
            .iter()
            .map(|f| f.split('+').next().unwrap_or(f).to_string())
            .collect()
    };
    let proc_stack = || {
        let st = tasks::read_string(format!("/proc/{pid}/stack")).expect("the sleeper's stack");
        let frames: Vec<&str> = st
            .lines()
            .map(|l| l.strip_prefix("[<0>] ").unwrap_or(l))
            .collect();
        names(&frames)
    };
    let expect = proc_stack();
    assert!(expect.len() > 1, "{expect:?}");
    for backend in BACKENDS {
        let (t, _top) = interactive(backend, &format!("kstack-{backend}"));
        t.keys(&["K"]);
        t.wait_for("the kernel stack prompt", |s| {
            s.contains("PID to show kernel stack [default pid = ")
        });
        t.type_text(&pid);
        t.keys(&["Enter"]);
        let title = format!("Kernel stack of PID {pid} (sleep), state S, wchan ");
        let scr = t.wait_for("the stack", |s| {
            s.contains(&title) && s.contains("Type any key to continue")
        });
        let lines: Vec<&str> = scr.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with(&title))
            .expect("title");
        let frames: Vec<&str> = lines[at + 2..]
            .iter()
            .map(|l| l.trim_end())
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(names(&frames), expect, "{backend}: {scr}");
        assert_eq!(proc_stack(), expect, "the sleeper slept on");
        assert!(
            lines[at].contains("syscall clock_nanosleep")
                || lines[at].contains("syscall nanosleep"),
            "{scr}"
        );
        // Any key: the table again, which refreshes as before.
        t.keys(&["Space"]);
        t.wait_for("the table again", |s| {
            s.contains("  PID USER") && !s.contains(&title)
        });
        // Enter takes the top line, and a pid that names no task says so.
        t.keys(&["K", "Enter"]);
        t.wait_for("the first task's stack", |s| {
            s.contains("Kernel stack of PID ") && s.contains("Type any key to continue")
        });
        t.keys(&["q"]);
        t.keys(&["K"]);
        t.type_text(&tasks::missing_pid().to_string());
        t.keys(&["Enter"]);
        t.wait_for("no such task", |s| s.contains("no such task"));
        t.keys(&["q", "q"]);
        assert_restored(&t);
    }

    // Another user: its own tasks' stacks are refused too (CAP_SYS_ADMIN), and said so.
    let us = user_sleeper();
    let t = Tmux::start(
        "kstack-user",
        &format!(
            "{} {BIN} top -d 0.5",
            taskdiag_test_support::users::as_user_sh(TEST_USER)
        ),
    );
    t.wait_for("the task table", |s| s.contains("  PID USER"));
    for p in [s.pid(), us.pid()] {
        t.keys(&["K"]);
        t.wait_for("the kernel stack prompt", |s| {
            s.contains("PID to show kernel stack")
        });
        t.type_text(&p.to_string());
        t.keys(&["Enter"]);
        let scr = t.wait_for("the refusal", |s| s.contains("Type any key to continue"));
        assert!(
            scr.contains(&format!("Kernel stack of PID {p} (sleep)"))
                && scr.contains("permission denied (root only, like /proc/PID/stack)"),
            "{scr}"
        );
        t.keys(&["Space"]);
        t.wait_for("the table again", |s| s.contains("  PID USER"));
    }
    t.keys(&["q"]);
}
