//! Integration tests of the `taskdiag` binary: formats, exit codes, errors, pid namespaces and
//! unprivileged use (as a real unprivileged user, created if missing). They run as root, as CI
//! does.

mod daemon_trust;
mod maps;
mod pgrep;
mod pidof;
mod pinned;
mod profile;
mod ps;
mod pstree;
mod top;

use std::process::{Command, Output};

use taskdiag_test_support::process::{stderr, stdout, Spawned};
use taskdiag_test_support::tasks;
use taskdiag_test_support::users::{self, USER as TEST_USER};

const BIN: &str = env!("CARGO_BIN_EXE_taskdiag");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run taskdiag")
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// The unprivileged test user's uid (created if missing).
fn test_user() -> u32 {
    users::user(TEST_USER)
}

/// A command running `prog` as the unprivileged test user (created if missing), with no
/// capabilities to inherit.
fn as_test_user(prog: &str) -> Command {
    users::as_user(TEST_USER, prog)
}

fn run_as_user(args: &[&str]) -> Output {
    as_test_user(BIN).args(args).output().expect("setpriv")
}

#[test]
fn json_has_every_requested_group_for_this_process() {
    let me = std::process::id().to_string();
    for backend in ["bpf", "procfs"] {
        let o = run(&[
            "dump", "--pid", &me, "--groups", "all", "--format", "json", "-b", backend,
        ]);
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let v = json_lines(&o);
        assert_eq!(v.len(), 1);
        let t = &v[0];
        assert_eq!(t["pid"], std::process::id());
        assert_eq!(t["tgid"], std::process::id());
        for g in ["base", "cred", "stat", "statm", "cmdline"] {
            assert!(t.get(g).is_some(), "{backend}: no {g} in {t}");
        }
        assert_eq!(t["base"]["state"].as_str().map(str::len), Some(1));
        assert_eq!(t["cred"]["cap_effective"].as_str().map(str::len), Some(16));
        let argv0 = std::env::args().next().expect("argv0");
        assert_eq!(t["cmdline"][0], argv0.as_str());
    }
}

#[test]
fn group_names_are_taken_in_any_case_as_the_docs_write_them() {
    // "BASE group", "all": the same groups whatever the case; an unknown one still refused.
    let me = std::process::id().to_string();
    let groups = |list: &str| {
        let o = run(&[
            "dump", "--pid", &me, "--groups", list, "--format", "json", "-b", "procfs",
        ]);
        assert!(o.status.success(), "--groups {list}: {}", stderr(&o));
        let v = json_lines(&o);
        let mut keys: Vec<String> = v[0].as_object().expect("a task").keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(groups("BASE,Cred,CMDLINE"), groups("base,cred,cmdline"));
    assert_eq!(groups("ALL"), groups("all"));
    let o = run(&["dump", "--groups", "BOGUS"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown group 'BOGUS'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn dump_help_describes_auto_as_it_chooses() {
    // The order README.md gives and Dumper::open_auto follows, with its threshold.
    let o = run(&["dump", "--help"]);
    let help = stdout(&o);
    let n = taskdiag::AUTO_PROCFS_BELOW;
    let threshold = format!("{},{:03}", n / 1000, n % 1000);
    let auto = help
        .split("\n  auto ")
        .nth(1)
        .and_then(|t| t.split("\n  bpf ").next())
        .expect("auto in BACKENDS");
    let auto = auto.split_whitespace().collect::<Vec<_>>().join(" ");
    let pinned = auto.find("pinned").expect("pinned programs first");
    let daemon = auto.find("daemon").expect("then the daemon");
    let small = auto
        .find(&format!("fewer than {threshold} tasks"))
        .unwrap_or_else(|| panic!("then procfs below {threshold} tasks: {auto}"));
    let load = auto.find("loaded now").expect("then BPF loaded now");
    assert!(pinned < daemon && daemon < small && small < load, "{auto}");
}

#[test]
fn raw_stream_decodes_to_the_same_text() {
    // A sleeper, whose BASE and CRED stay the same between the two dumps (this test process's
    // main thread may be running in one and sleeping in the other).
    let sleeper = Spawned::spawn(Command::new("sleep").arg("1000"));
    taskdiag_test_support::process::wait_exec(sleeper.pid(), "sleep");
    let me = sleeper.pid().to_string();
    let args = [
        "dump",
        "--pid",
        &me,
        "--groups",
        "base,cred",
        "-b",
        "procfs",
    ];
    let text = run(&[&args[..], &["--format", "text"]].concat());
    let raw = run(&[&args[..], &["--format", "raw"]].concat());
    assert!(raw.status.success());
    let path = std::env::temp_dir().join(format!("taskdiag-raw-{me}.bin"));
    std::fs::write(&path, &raw.stdout).expect("write");
    let dec = run(&["decode", path.to_str().expect("path")]);
    assert!(dec.status.success(), "{}", stderr(&dec));
    assert_eq!(stdout(&dec), stdout(&text));
    // A truncated stream is an error naming the file, not a partial success.
    std::fs::write(&path, &raw.stdout[..raw.stdout.len() - 8]).expect("write");
    let dec = run(&["decode", path.to_str().expect("path")]);
    assert_eq!(dec.status.code(), Some(3));
    assert!(stderr(&dec).contains("taskdiag-raw-"), "{}", stderr(&dec));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn exit_codes_and_messages() {
    let o = run(&["dump", "--pid", "5000000000"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "pid out of range is a usage error: {}",
        stderr(&o)
    );
    for backend in ["bpf", "procfs"] {
        let missing = tasks::missing_pid().to_string();
        let o = run(&["dump", "--pid", &missing, "-b", backend]);
        assert_eq!(o.status.code(), Some(1), "{backend}");
        assert!(
            stderr(&o).contains(&format!("no such process: {missing}")),
            "{}",
            stderr(&o)
        );
    }
    let o = run(&["dump", "--groups", "base,bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown group 'bogus'"),
        "{}",
        stderr(&o)
    );
    let o = run(&["dump", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["dump", "--pid", "1", "--all-threads"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "conflicting selections: {}",
        stderr(&o)
    );
    let o = run(&["dump", "--help"]);
    assert!(o.status.success() && stdout(&o).contains("EXIT STATUS"));
}

#[test]
fn closed_pipe_is_not_an_error() {
    use std::io::Read;
    let mut child = Command::new(BIN)
        .args(["dump", "--all-threads", "--groups", "all"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("read");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
}

#[test]
fn bpf_answers_in_a_new_pid_namespace() {
    // Without --mount-proc /proc still shows the parent namespace (seed article 002).
    let o = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            BIN,
            "dump",
            "--format",
            "json",
            "--summary",
        ])
        .output()
        .expect("unshare");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("via bpf"), "{}", stderr(&o));
    let v = json_lines(&o);
    // Only this namespace's tasks, numbered from 1: taskdiag itself is pid 1 there.
    assert!(
        v.len() <= 1,
        "saw tasks of the parent namespace: {}",
        v.len()
    );
    for t in &v {
        assert_eq!(t["pid"], 1);
        assert_eq!(t["base"]["ppid"], 0);
    }
    let o = Command::new("unshare")
        .args([
            "--pid", "--fork", BIN, "dump", "--pid", "1", "--format", "json",
        ])
        .output()
        .expect("unshare");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_lines(&o)[0]["pid"], 1);
}

/// In a time namespace whose boot time is a day later, start times are those its /proc shows
/// (the offset added since Linux 5.11, not before), from every backend: BPF's records as
/// /proc/2/stat there, and ps's start column as procps prints it there.
#[test]
fn start_times_follow_the_readers_time_namespace() {
    let in_timens = |cmd: &[&str]| -> Output {
        let o = Command::new("unshare")
            .args(["--time", "--fork", "--boottime", "86400"])
            .args(cmd)
            .output()
            .expect("unshare");
        assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
        o
    };
    // kthreadd (pid 2) started with the kernel: its start time is the offset plus a moment.
    let start = |backend: &str| {
        let o = in_timens(&[
            BIN, "dump", "-b", backend, "-g", "base", "--pid", "2", "-f", "json",
        ]);
        json_lines(&o)[0]["base"]["start_time_ns"]
            .as_u64()
            .expect("start_time_ns")
    };
    let (bpf, procfs) = (start("bpf"), start("procfs"));
    assert_eq!(bpf, procfs);
    let stat = stdout(&in_timens(&["cat", "/proc/2/stat"]));
    let ticks: u64 = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split(' ').nth(19)?.parse().ok())
        .unwrap_or_else(|| panic!("no start time in {stat:?}"));
    assert_eq!(
        bpf / (1_000_000_000 / taskdiag_procfs::clock_ticks()),
        ticks
    );
    // The namespace's offset shows where the kernel adds it (the test's own check of its setup).
    assert_eq!(
        bpf >= 86_400_000_000_000,
        tasks::kernel_at_least(5, 11),
        "{bpf}"
    );
    let ps = |prog: &[&str]| {
        let cmd = [prog, &["-o", "pid,lstart", "-p", "2"]].concat();
        stdout(&in_timens(&cmd))
    };
    assert_eq!(ps(&[BIN, "ps"]), ps(&["ps"]));
}

#[test]
fn procfs_refuses_a_proc_of_another_pid_namespace() {
    let o = Command::new("unshare")
        .args(["--pid", "--fork", BIN, "dump", "--backend", "procfs"])
        .output()
        .expect("unshare");
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("another pid namespace"),
        "{}",
        stderr(&o)
    );
    // With its own /proc it answers, in its own numbers.
    let o = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            BIN,
            "dump",
            "-b",
            "procfs",
            "-f",
            "json",
        ])
        .output()
        .expect("unshare");
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_lines(&o);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["pid"], 1);
}

#[test]
fn unprivileged_user_gets_procfs_and_a_clear_bpf_error() {
    let uid = test_user();
    let o = run_as_user(&[
        "dump",
        "--groups",
        "base,cred",
        "--format",
        "json",
        "--summary",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("via procfs"), "{}", stderr(&o));
    let v = json_lines(&o);
    let me: Vec<_> = v.iter().filter(|t| t["cred"]["uid"] == uid).collect();
    assert!(!me.is_empty(), "the user's own taskdiag process is missing");
    let o = run_as_user(&["dump", "--backend", "bpf"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("CAP_BPF"), "{}", stderr(&o));
}

/// `taskdiag` (or another workspace binary) with `args`, run where the kernel's BTF is hidden:
/// /dev/null bound over /sys/kernel/btf/vmlinux in a mount namespace of its own (private, so
/// the host never sees it).
fn without_btf(bin: &str, args: &[&str]) -> Output {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind /dev/null /sys/kernel/btf/vmlinux && exec \"$@\"")
        .args(["sh", bin])
        .args(args)
        .output()
        .expect("unshare")
}

#[test]
fn a_kernel_without_btf_is_answered_from_procfs_and_says_why() {
    let me = std::process::id().to_string();
    let o = without_btf(BIN, &["dump", "--pid", &me, "-s", "-f", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stderr(&o);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("via procfs"), "{line}");
    assert!(
        line.contains("bpf not used: the kernel has no BTF"),
        "{line}"
    );
    assert_eq!(json_lines(&o)[0]["pid"], std::process::id());
    // Asked for BPF by name: a clear error, status 3.
    let o = without_btf(BIN, &["dump", "--pid", &me, "-b", "bpf"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("no BTF"), "{}", stderr(&o));
    // taskdiagd has nothing to serve: one line, a failure status, no socket.
    let dir = taskdiag_test_support::dir::TempDir::new("nobtf");
    let sock = dir.path().join("td.sock");
    let daemon = taskdiag_test_support::bins::workspace_bin("taskdiagd");
    let o = without_btf(
        daemon.to_str().expect("path"),
        &["--foreground", "--socket", sock.to_str().expect("path")],
    );
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("no BTF"), "{}", stderr(&o));
    assert!(!sock.exists());
}

#[test]
fn a_missing_pid_is_status_1_whichever_programs_load() {
    // Every flavour and subset of the programs a kernel may accept.
    for disable in ["", "loop", "loop,cmdline,maps,task_params"] {
        for backend in ["bpf", "procfs", "auto"] {
            let o = Command::new(BIN)
                .env("TASKDIAG_BPF_DISABLE", disable)
                .args(["dump", "--pid", "999999", "-b", backend])
                .output()
                .expect("run");
            assert_eq!(
                o.status.code(),
                Some(1),
                "{backend} {disable}: {}",
                stderr(&o)
            );
            assert!(
                stderr(&o).contains("no such process: 999999"),
                "{}",
                stderr(&o)
            );
        }
    }
}

/// A task's JSON with DELAY's pairs left out where every one is 0 (and `counters` false): taskstats
/// answers zeros alike for a task without delay accounting and for one that has not waited yet,
/// so the procfs backend claims the pairs only where one is nonzero, where BPF reads the
/// task's `task_delay_info` and claims them whenever it has one (Linux before 5.14 gives every
/// task one, unless booted with `nodelayacct`). See crates/procfs/src/taskstats.rs.
fn unclaimed_zero_delays(mut t: serde_json::Value) -> serde_json::Value {
    let Some(d) = t.get_mut("delay").and_then(|d| d.as_object_mut()) else {
        return t;
    };
    let pair = |k: &str| k.ends_with("_count") || k.ends_with("_delay_ns");
    if d.iter().all(|(k, v)| !pair(k) || v == 0) {
        d.retain(|k, _| !pair(k));
        d.insert("counters".into(), false.into());
    }
    t
}

#[test]
fn kernels_without_sleepable_iterators_or_link_params_give_the_same_answers() {
    // TASKDIAG_BPF_DISABLE makes the BPF backend take the paths of older kernels: CMDLINE
    // from /proc, ONE/THREAD as a filtered full walk, the bounded task program (5.8-5.18).
    // Answers must not change.
    let child = Spawned::spawn(Command::new("sleep").arg("1000"));
    taskdiag_test_support::process::wait_exec(child.pid(), "sleep");
    // Asleep in nanosleep (35) or clock_nanosleep (230): until then its wait channel is 0,
    // and /proc's answer, read first, may say so where the walks after it do not.
    taskdiag_test_support::process::wait_for("sleep to wait in its system call", || {
        std::fs::read_to_string(format!("/proc/{}/syscall", child.pid()))
            .is_ok_and(|s| matches!(s.split(' ').next(), Some("35" | "230")))
    });
    let pid = child.pid().to_string();
    let dump = |backend: &str, disable: &str, sel: &[&str]| {
        let o = Command::new(BIN)
            .env("TASKDIAG_BPF_DISABLE", disable)
            .args(["dump", "--groups", "all", "--format", "json", "-b", backend])
            .args(sel)
            .output()
            .expect("run");
        assert!(
            o.status.success(),
            "{backend} {disable} {sel:?}: {}",
            stderr(&o)
        );
        json_lines(&o)
            .into_iter()
            .filter(|t| t["tgid"] == child.pid())
            .map(unclaimed_zero_delays)
            .collect::<Vec<_>>()
    };
    for sel in [&["--pid", &pid][..], &["--threads-of", &pid], &[]] {
        let want = dump("procfs", "", sel);
        assert_eq!(want.len(), 1, "{sel:?}");
        for disable in [
            "",
            "cmdline",
            "task_params",
            "ringbuf",
            "cmdline,task_params,ringbuf",
            "loop",
            "loop,cmdline,maps,task_params",
        ] {
            assert_eq!(dump("bpf", disable, sel), want, "disable={disable} {sel:?}");
        }
    }
}

#[test]
fn a_full_ring_buffer_loses_and_repeats_no_task() {
    // A one-page ring fills every few dozen tasks: each time the kernel ends the read() and
    // retries the task that did not fit. Every long-lived task must appear exactly once.
    let pids = |o: &Output| -> Vec<u64> {
        json_lines(o)
            .iter()
            .map(|t| t["pid"].as_u64().expect("pid"))
            .collect()
    };
    let before = run(&["dump", "-b", "procfs", "-f", "json"]);
    let small = Command::new(BIN)
        .env("TASKDIAG_BPF_RINGBUF_SIZE", "4096")
        .args(["dump", "-b", "bpf", "-g", "base,cred,stat", "-f", "json"])
        .output()
        .expect("run");
    assert!(small.status.success(), "{}", stderr(&small));
    let after = run(&["dump", "-b", "procfs", "-f", "json"]);
    let got = pids(&small);
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "duplicates or disorder"
    );
    let after = pids(&after);
    let stable: Vec<u64> = pids(&before)
        .into_iter()
        .filter(|p| after.contains(p))
        .collect();
    for p in &stable {
        // PID 1, where task iterators hide it (as on these sandbox machines), is read from
        // /proc and merged in: it is there too.
        assert!(got.contains(p), "task {p} lost with a full ring");
    }
    assert!(got.len() > 30, "only {} tasks", got.len());
}

/// CGROUP for a reader in a cgroup namespace of its own: the BPF program writes paths relative
/// to that namespace's root cgroup (in every hierarchy) and leaves a task outside it (whose
/// /proc path climbs with `..`) to /proc, so both backends print what the reader's /proc shows.
/// The reader is moved into a cgroup of its own under the cgroup2 mount and unshares there; a
/// sleeper in that cgroup shows as `0::/`. The id may differ: the procfs backend finds a cgroup's
/// directory through a cgroup2 mount, and every mount's root is above this namespace's, so it
/// cannot tell which directory `/` is and says 0 (unknown); the program reads the id itself.
#[test]
fn cgroup_paths_follow_the_readers_cgroup_namespace() {
    /// The cgroup, removed on drop (also when an assertion fails) once its tasks are gone.
    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            for _ in 0..100 {
                if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
    let base = tasks::cgroup2_mount().expect("a cgroup2 mount");
    let guard = Dir(base.join(format!("taskdiag-cgns-{}", std::process::id())));
    let dir = &guard.0;
    std::fs::create_dir(dir).expect("mkdir");
    // Declared after the guard: dropped (killed) before the cgroup is removed.
    let sleeper = Spawned::spawn(Command::new("sleep").arg("1000"));
    std::fs::write(dir.join("cgroup.procs"), sleeper.pid().to_string()).expect("move sleeper");
    let dump = |backend: &str| {
        // The shell moves itself into the cgroup, then becomes unshare, then taskdiag.
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec unshare --cgroup {BIN} dump --groups cgroup \
             --format json -b {backend}",
            dir.display()
        );
        let o = Command::new("sh")
            .args(["-c", &script])
            .output()
            .expect("sh");
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        json_lines(&o)
            .into_iter()
            .filter_map(|v| Some((v["pid"].as_u64()?, v.get("cgroup")?.clone())))
            .collect::<std::collections::BTreeMap<u64, serde_json::Value>>()
    };
    let (bpf, procfs) = (dump("bpf"), dump("procfs"));
    let s = sleeper.pid() as u64;
    assert_eq!(bpf[&s]["path"], "/", "{:?}", bpf[&s]);
    let mut compared = 0;
    for (pid, cg) in &bpf {
        // The readers themselves differ between the two runs; kernel workers may move.
        let Some(other) = procfs.get(pid) else {
            continue;
        };
        if tasks::comm(*pid as u32).is_some_and(|c| c == "taskdiag" || c.starts_with("kworker")) {
            continue;
        }
        assert_eq!(cg["lines"], other["lines"], "pid {pid}");
        assert_eq!(cg["path"], other["path"], "pid {pid}");
        if other["id"] != 0 {
            assert_eq!(cg["id"], other["id"], "pid {pid}");
        }
        compared += 1;
    }
    assert!(compared > 3, "only {compared} tasks in both dumps");
    // Somebody outside the namespace's root: a path that climbs out of it.
    assert!(
        bpf.values()
            .any(|c| c["path"].as_str().is_some_and(|p| p.starts_with("/.."))),
        "no task outside the reader's cgroup namespace"
    );
}
