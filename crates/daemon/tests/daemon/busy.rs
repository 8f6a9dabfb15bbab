//! A daemon that cannot answer, and what its clients do then (issue 41): a worker held by a
//! request that blocks (a process whose command line cannot be read, as on a hung FUSE or NFS
//! mount) is let go at the request's deadline, one uid never holds every worker, a busy daemon
//! says so at once, a stopped daemon fails its clients within their own deadline, and `auto`
//! answers from the caller's own /proc in both cases, as `--backend procfs` does.
//!
//! A blocking read is the daemon's test hook (`TASKDIAGD_TEST_WEDGE_PID`): a worker writing
//! that process's record for a request with CMDLINE waits until the process is gone, heeding no
//! deadline, as a read stuck in the kernel does, on any kernel. Bounds are asserted with the
//! slack a loaded machine needs; what is checked is the outcome (busy, answered, cut, the
//! message).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::*;

/// A third unprivileged user (created if missing).
const THIRD: &str = "taskdiag-flood1";

/// What "at once" may take on a loaded machine: far below the daemon's timeout and a client's
/// default deadline (5 s), far above the busy wait (0.5 s).
const QUICK: Duration = Duration::from_secs(4);

/// What a well-behaved user's request may take however another user's requests block.
const PROMPT: Duration = Duration::from_secs(2);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `taskdiag args...` as `user` with `env`; its output and how long it took.
fn run_as(user: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let mut c = as_user(user, cli());
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let t = Instant::now();
    let o = output_within(&mut c, PATIENCE);
    (o, t.elapsed())
}

/// The pids in a text dump.
fn pids(out: &str) -> BTreeSet<u32> {
    out.lines()
        .filter_map(|l| l.strip_prefix("pid ")?.split(' ').next()?.parse().ok())
        .collect()
}

/// The processes in this pid namespace now.
fn proc_pids() -> BTreeSet<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Checks that `out`, an answer `auto` gave `user` from /proc, lists the processes `--backend
/// procfs` lists for that user: the same set among those that lived through both dumps.
fn same_as_procfs(user: &str, out: &str, before: &BTreeSet<u32>) {
    let (p, _) = run_as(user, &["dump", "--backend", "procfs"], &[]);
    assert!(p.status.success(), "procfs: {}", text(&p.stderr));
    let now = proc_pids();
    let stable: BTreeSet<u32> = before.intersection(&now).copied().collect();
    let auto: BTreeSet<u32> = pids(out).intersection(&stable).copied().collect();
    let procfs: BTreeSet<u32> = pids(&text(&p.stdout))
        .intersection(&stable)
        .copied()
        .collect();
    assert!(
        !auto.is_empty() && auto.contains(&1),
        "auto's answer: {out}"
    );
    assert_eq!(
        auto, procfs,
        "auto's /proc answer differs from --backend procfs"
    );
}

/// A process whose command line "blocks" the daemon's workers until it is killed.
fn wedge() -> Spawned {
    let w = Spawned::spawn(
        Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    );
    wait_exec(w.pid(), "sleep");
    w
}

/// A daemon whose workers block on `w`'s command line.
fn wedged_daemon(w: &Spawned, extra: &[&str]) -> Daemon {
    let pid = w.pid().to_string();
    Daemon::start_with(extra, |c| {
        c.env("TASKDIAGD_TEST_WEDGE_PID", &pid);
    })
}

/// `dump --backend daemon` with command lines as `user`, in the background: it blocks a
/// worker on the wedge until the daemon's deadline.
fn blocked_ps(d: &Daemon, user: &str) -> std::thread::JoinHandle<(Output, Duration)> {
    let args = d.dump_args(&["--groups", "base,cmdline"]);
    let user = user.to_string();
    std::thread::spawn(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run_as(&user, &a, &[])
    })
}

/// Waits until a BASE dump of `user` through `d` is answered busy; returns its output and time.
fn until_busy(d: &Daemon, user: &str) -> (Output, Duration) {
    let args = d.dump_args(&[]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    loop {
        let (o, took) = run_as(user, &a, &[]);
        if !o.status.success() && text(&o.stderr).contains("taskdiagd is busy") {
            return (o, took);
        }
        assert!(
            t0.elapsed() < PATIENCE,
            "never busy: {} {}",
            o.status,
            text(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_busy_daemon_says_so_at_once_stuck_workers_are_let_go_and_auto_reads_proc() {
    let _heavy = heavy();
    let mut w = wedge();
    // (A deadline well under a client's own, 5 s, so that the daemon's answer comes first.)
    let d = wedged_daemon(&w, &["--workers", "2", "--timeout", "3"]);
    // Two users' `ps aux` hold both workers (one each: a uid holds at most one of two).
    let t0 = Instant::now();
    let held = [blocked_ps(&d, USER), blocked_ps(&d, OTHER)];
    let (o, took) = until_busy(&d, THIRD);
    let err = text(&o.stderr);
    println!("busy answer in {took:?}: {err}");
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("taskdiagd at {}", d.socket.display()))
            && err.contains("2 of its 2 workers are answering others")
            && err.contains("read /proc instead"),
        "{err}"
    );
    assert!(took < QUICK, "the busy answer took {took:?}");
    // auto answers from the caller's /proc, as the procfs backend does, and says why.
    let before = proc_pids();
    let sock = d.socket.display().to_string();
    let (o, took) = run_as(THIRD, &["dump", "--summary", "--socket", &sock], &[]);
    let err = text(&o.stderr);
    println!("auto with a busy daemon: {took:?}: {err}");
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("via procfs") && err.contains("taskdiagd not used") && err.contains("busy"),
        "{err}"
    );
    // (BPF was not used because the daemon was chosen: no reason of its own beside that.)
    assert!(!err.contains("bpf not used"), "{err}");
    same_as_procfs(THIRD, &text(&o.stdout), &before);
    // At the deadline the blocked clients are told, by the event loop, though their workers
    // are still blocked.
    for h in held {
        let (o, took) = h.join().expect("a blocked client");
        let err = text(&o.stderr);
        println!("blocked client ended after {took:?}: {err}");
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(
            // The event loop's words (the worker still blocked), or, if it came back in time
            // on a loaded machine, the worker's.
            err.contains("taskdiagd could not finish"),
            "{err}"
        );
        assert!(
            took < Duration::from_secs(20),
            "cut after {took:?} with --timeout 3"
        );
    }
    println!(
        "both blocked clients ended {:?} after they asked",
        t0.elapsed()
    );
    // The stuck workers get nothing new while they are stuck: still busy.
    let (o, _) = until_busy(&d, THIRD);
    assert!(text(&o.stderr).contains("stuck"), "{}", text(&o.stderr));
    // Once the process answers (is gone) they are back.
    signal(w.pid(), libc::SIGKILL);
    let _ = w.wait_exit(PATIENCE);
    let args = d.dump_args(&["--groups", "base,cmdline"]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(
        wait_until(PATIENCE, || run_as(THIRD, &a, &[]).0.status.success()),
        "the workers did not come back"
    );
}

#[test]
fn one_uid_blocking_many_requests_cannot_keep_another_uid_from_being_served() {
    let _heavy = heavy();
    let mut w = wedge();
    // A uid may ask for 8 workers; with 2 it holds at most 1 whatever it asks.
    let d = wedged_daemon(
        &w,
        &[
            "--workers",
            "2",
            "--max-requests-per-uid",
            "8",
            "--timeout",
            "3",
        ],
    );
    let t0 = Instant::now();
    let held: Vec<_> = (0..6).map(|_| blocked_ps(&d, USER)).collect();
    // Another user's BASE dumps, all the while the blocking uid's requests come in.
    let args = d.dump_args(&[]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let (o, took) = run_as(OTHER, &a, &[]);
        assert!(
            o.status.success(),
            "another uid refused: {}",
            text(&o.stderr)
        );
        slowest = slowest.max(took);
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "another uid's BASE dumps while one uid blocks 6 requests: at most {slowest:?} (over \
         {:?})",
        t0.elapsed()
    );
    assert!(slowest < PROMPT, "another uid waited {slowest:?}");
    // One of the blocking uid's requests held a worker until its deadline; the others were
    // told at once that the daemon is busy for that uid.
    let (mut busy, mut cut) = (0, 0);
    for h in held {
        let (o, took) = h.join().expect("a blocked client");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{err}");
        if err.contains("taskdiagd is busy") {
            assert!(err.contains("as many as one uid may (1 of the 2)"), "{err}");
            assert!(took < QUICK, "busy after {took:?}");
            busy += 1;
        } else {
            // The event loop's words (the worker still blocked), or the worker's (it was
            // back in time to say so itself).
            assert!(err.contains("taskdiagd could not finish"), "{err}");
            cut += 1;
        }
    }
    println!("the blocking uid: {busy} requests answered busy, {cut} cut at its deadline");
    assert_eq!((busy, cut), (5, 1));
    signal(w.pid(), libc::SIGKILL);
    let _ = w.wait_exit(PATIENCE);
}

#[test]
fn a_stopped_daemon_fails_its_clients_within_their_deadline_and_auto_reads_proc() {
    let d = Daemon::start(&[]);
    signal(d.pid(), libc::SIGSTOP);
    let sock = d.socket.display().to_string();
    let timeout = [("TASKDIAG_TIMEOUT", "1")];
    let (o, took) = run_as(
        USER,
        &["dump", "--backend", "daemon", "--socket", &sock],
        &timeout,
    );
    let err = text(&o.stderr);
    println!("stopped daemon, --backend daemon: {took:?}: {err}");
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "taskdiagd at {sock} accepted the connection but sent nothing for 1 s"
        )),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "failed after {took:?}");
    let before = proc_pids();
    let (o, took) = run_as(USER, &["dump", "--summary", "--socket", &sock], &timeout);
    let err = text(&o.stderr);
    println!("stopped daemon, auto: {took:?}: {err}");
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("via procfs")
            && err.contains("taskdiagd not used")
            && err.contains("sent nothing"),
        "{err}"
    );
    assert!(!err.contains("bpf not used"), "{err}");
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    same_as_procfs(USER, &text(&o.stdout), &before);
    signal(d.pid(), libc::SIGCONT);
}

#[test]
fn a_socket_that_is_no_daemon_is_explained() {
    let dir = TempDir::new("nosock");
    let file = dir.join("file");
    std::fs::write(&file, b"").expect("a file");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod");
    let missing = dir.join("missing.sock");
    let dump = |p: &Path, backend: &str| {
        let s = p.display().to_string();
        let env = [("TASKDIAG_SOCKET", s.as_str())];
        run_as(USER, &["dump", "--summary", "--backend", backend], &env).0
    };
    let o = dump(&file, "daemon");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "taskdiagd at {}: not a socket (a regular file)",
            file.display()
        )) && err.contains("TASKDIAG_SOCKET"),
        "{err}"
    );
    let o = dump(&missing, "daemon");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "taskdiagd at {}: no such socket",
            missing.display()
        )) && err.contains("is taskdiagd running?")
            && err.contains("start it as root"),
        "{err}"
    );
    // auto reads /proc, and -s says why the daemon was not used.
    let o = dump(&missing, "auto");
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("via procfs")
            && err.contains("taskdiagd not used")
            && err.contains("no such socket"),
        "{err}"
    );
}
