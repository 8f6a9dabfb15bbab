//! `taskdiag profile`: the seeds' situations reproduced (a hot function, threads blocked in
//! known calls, CPU burned in the kernel for a process and by a kernel thread, a program in its
//! own pid namespace profiled from the host and from a shell inside it), agreement with perf,
//! every output format, and the errors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{ensure_installed, stderr, stdout, Spawned};

use super::{run, run_as_user, BIN};

/// profile_fixture.c built with frame pointers into `dir` (a directory of the test's own: the
/// kernel matrix's guests see the source tree read-only).
fn build_fixture(dir: &TempDir) -> PathBuf {
    build_fixture_at(&dir.join("profile_fixture"), &[])
}

/// The fixture built at `exe` with `extra` compiler options.
fn build_fixture_at(exe: &Path, extra: &[&str]) -> PathBuf {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/profile_fixture.c"
    );
    let o = Command::new("cc")
        .args([
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-mno-omit-leaf-frame-pointer",
            "-pthread",
        ])
        .args(extra)
        .arg("-o")
        .arg(exe)
        .arg(src)
        .output()
        .expect("running cc (gcc and libc6-dev build the profile fixture)");
    assert!(o.status.success(), "cc: {}", stderr(&o));
    exe.to_path_buf()
}

/// The fixture's name as the kernel shows it (comm: 15 bytes).
const COMM: &str = "profile_fixture";

/// The fixture running in a mode, killed on drop, then its directory removed.
struct Fixture {
    proc: Spawned,
    _dir: TempDir,
}

impl Fixture {
    fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// The fixture in `mode`, started by `prefix` (e.g. unshare), ready when it returns.
fn fixture(prefix: &[&str], mode: &str) -> Fixture {
    let dir = TempDir::new("profile-fixture");
    let exe = build_fixture(&dir);
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    let mut proc = Spawned::spawn(cmd.arg(mode).stdout(Stdio::piped()));
    proc.expect_line("ready");
    Fixture { proc, _dir: dir }
}

/// One folded line: frames root first (kernel frames without their `_[k]`, flagged) and the
/// count.
#[derive(Debug)]
struct Line {
    frames: Vec<(String, bool)>,
    count: u64,
}

impl Line {
    fn state(&self) -> &str {
        &self.frames[0].0
    }
    fn thread(&self) -> &str {
        &self.frames[1].0
    }
    fn user(&self) -> impl Iterator<Item = &str> {
        self.frames[2..]
            .iter()
            .filter(|f| !f.1)
            .map(|f| f.0.as_str())
    }
    fn kernel(&self) -> Vec<&str> {
        self.frames[2..]
            .iter()
            .filter(|f| f.1)
            .map(|f| f.0.as_str())
            .collect()
    }
    /// The innermost frame, user or kernel.
    fn leaf(&self) -> &str {
        &self.frames.last().expect("a frame").0
    }
}

fn folded(text: &str) -> Vec<Line> {
    text.lines()
        .map(|l| {
            let (stack, n) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad folded line {l:?}"));
            Line {
                frames: stack
                    .split(';')
                    .map(|f| match f.strip_suffix("_[k]") {
                        Some(k) => (k.to_owned(), true),
                        None => (f.to_owned(), false),
                    })
                    .collect(),
                count: n.parse().unwrap_or_else(|_| panic!("bad count in {l:?}")),
            }
        })
        .collect()
}

/// The samples of `lines` whose innermost user frame is `leaf`, and all their samples.
fn leaf_share<'a>(lines: impl IntoIterator<Item = &'a Line>, leaf: &str) -> (u64, u64) {
    lines.into_iter().fold((0, 0), |(hit, total), l| {
        let hit = hit
            + if l.user().last() == Some(leaf) {
                l.count
            } else {
                0
            };
        (hit, total + l.count)
    })
}

/// `taskdiag profile ARGS -f folded`, which must succeed.
fn profile(args: &[&str]) -> Vec<Line> {
    let o = run(&[&["profile", "-f", "folded"], args].concat());
    assert!(o.status.success(), "profile {args:?}: {}", stderr(&o));
    assert!(
        stderr(&o).contains(" samples of 1/"),
        "no summary line: {}",
        stderr(&o)
    );
    folded(&stdout(&o))
}

/// The function names of a thread's /proc/PID/task/TID/stack, innermost first.
fn proc_stack(pid: u32, tid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stack")).ok()?;
    Some(
        text.lines()
            .filter_map(|l| {
                let f = l.split_once("] ")?.1;
                Some(f.split(['+', ' ']).next()?.to_owned())
            })
            .collect(),
    )
}

/// The fixture's threads: tid → name.
fn threads(pid: u32) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the fixture's threads") {
        let Ok(e) = e else { continue };
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Ok(c) = std::fs::read_to_string(e.path().join("comm")) {
            out.insert(tid, c.trim_end().to_owned());
        }
    }
    out
}

#[test]
fn on_cpu_samples_of_a_frame_pointer_program_end_in_its_hot_function() {
    let p = fixture(&[], "burn");
    let pid = p.pid().to_string();
    let lines = profile(&["-p", &pid, "--on-cpu", "-F", "99", "-d", "3"]);
    let mine: Vec<&Line> = lines.iter().filter(|l| l.thread() == COMM).collect();
    let total: u64 = mine.iter().map(|l| l.count).sum();
    assert!(
        total >= 50,
        "too few samples of the burning fixture: {lines:?}"
    );
    assert!(
        lines.iter().all(|l| l.thread() == COMM),
        "another process sampled: {lines:?}"
    );
    assert!(mine.iter().all(|l| l.state() == "[running]"), "{mine:?}");
    // The innermost user frame: interrupts may add kernel frames above it.
    let hot: u64 = mine
        .iter()
        .filter(|l| l.user().last() == Some("hot_function"))
        .map(|l| l.count)
        .sum();
    assert!(
        hot * 100 >= total * 80,
        "only {hot} of {total} samples end in hot_function: {mine:?}"
    );
    assert!(
        mine.iter()
            .any(|l| l.user().last() == Some("cold_function")),
        "cold_function never sampled: {mine:?}"
    );
}

#[test]
fn off_cpu_samples_show_blocked_threads_with_their_state_wchan_syscall_and_kernel_stack() {
    let p = fixture(&[], "block");
    let pid = p.pid();
    let names = threads(pid);
    let by_name: HashMap<&str, u32> = names.iter().map(|(t, n)| (n.as_str(), *t)).collect();
    for n in ["td-pipe", "td-futex", "td-sleep"] {
        assert!(by_name.contains_key(n), "no thread {n}: {names:?}");
    }
    let before: HashMap<u32, Option<Vec<String>>> =
        names.keys().map(|&t| (t, proc_stack(pid, t))).collect();
    let lines = profile(&["-p", &pid.to_string(), "--off-cpu", "-d", "1", "--tid"]);
    let table = run(&[
        "profile",
        "-p",
        &pid.to_string(),
        "--off-cpu",
        "-d",
        "0.5",
        "-f",
        "table",
    ]);
    assert!(table.status.success(), "{}", stderr(&table));
    // Before 5.18 the off-CPU walk reads no saved registers: no system call (the summary
    // line says so).
    let with_syscall = !stderr(&table).contains("need Linux 5.18");
    let table = stdout(&table);
    for (&tid, name) in &names {
        let label = format!("{name}-{pid}/{tid}");
        let mine: Vec<&Line> = lines.iter().filter(|l| l.thread() == label).collect();
        assert_eq!(
            mine.len(),
            1,
            "one stack for {label}, blocked all along: {lines:?}"
        );
        let l = mine[0];
        assert_eq!(l.state(), "[sleeping]", "{l:?}");
        // Its time off CPU, the whole second: 49 samples of 1/49 s (the walks' rounding).
        assert!(
            (47..=51).contains(&l.count),
            "{label}: {} samples in 1 s at 49 Hz",
            l.count
        );
        // The kernel stack is /proc's, which did not change while the thread stayed blocked.
        let Some(Some(stack)) = before.get(&tid) else {
            continue;
        };
        if proc_stack(pid, tid).as_ref() != Some(stack) {
            continue;
        }
        let mut kernel: Vec<&str> = l.kernel();
        kernel.reverse();
        assert_eq!(
            kernel, *stack,
            "{label}: kernel frames against /proc/{pid}/task/{tid}/stack"
        );
        // The table's wchan and system call are /proc's wchan and syscall.
        let wchan =
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/wchan")).unwrap_or_default();
        let nr: i64 = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
            .unwrap_or_default()
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1);
        let syscall = taskdiag_procfs::syscalls::name(nr).expect("a known system call");
        let row = table
            .lines()
            .find(|r| r.split_whitespace().last() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("no table row for {name}: {table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[2], "sleeping", "{row}");
        assert_eq!(cols[3], if with_syscall { syscall } else { "-" }, "{row}");
        // /proc's wchan; where the kernel's own says "0" (ORC kernels before 5.16 could not
        // tell: bc9bbb81730e "x86: Fix get_wchan() to support the ORC unwinder"), a function
        // of the stack compared above (the first outside the scheduler).
        if wchan == "0" {
            assert!(
                stack.iter().any(|f| f == cols[4]),
                "{row} against {stack:?}"
            );
        } else {
            assert_eq!(cols[4], wchan, "{row}");
        }
    }
}

#[test]
fn every_threads_samples_add_up_to_its_wall_clock_time_on_and_off_cpu() {
    // A thread that burns (on a CPU, and runnable when preempted) and threads that block,
    // profiled together: each one's samples of both kinds are its 2 s of wall-clock time.
    let burn = fixture(&[], "burn");
    let block = fixture(&[], "block");
    let pids = format!("{},{}", burn.pid(), block.pid());
    let lines = profile(&["-p", &pids, "-d", "2", "--tid"]);
    let mut per_thread: BTreeMap<&str, u64> = BTreeMap::new();
    for l in &lines {
        *per_thread.entry(l.thread()).or_default() += l.count;
    }
    assert_eq!(per_thread.len(), 5, "{per_thread:?}");
    for (t, n) in &per_thread {
        // 98 samples of 1/49 s; the on-CPU ones are samples, so some noise (more on an
        // emulated CPU: 108 seen in a 6.1 guest under TCG).
        assert!(
            (84..=114).contains(n),
            "{t}: {n} samples in 2 s at 49 Hz: {lines:?}"
        );
    }
    let burning = format!("{COMM}-{0}/{0}", burn.pid());
    assert!(
        lines
            .iter()
            .any(|l| l.thread() == burning && l.state() == "[running]"),
        "{lines:?}"
    );
}

/// Whether `taskdiag profile` (process `pid`) has begun its profile: its symbolizing thread
/// starts just before (its perf events, opened at the load, count nothing until then).
fn begun(pid: u32) -> bool {
    threads(pid).values().any(|n| n == "symbolize")
}

#[test]
fn a_profile_late_to_end_reports_its_window_not_its_wall_time() {
    // A profiler held up past its end (stopped here; starved of CPU on a loaded machine) must
    // count samples over -d only, and say so: its duration is -d, and four threads blocked
    // the whole time average 4.00 active threads, not 4 x 1 s over the time it took.
    let block = fixture(&[], "block");
    let pid = block.pid().to_string();
    let run = profile_begun(&["profile", "-p", &pid, "-d", "1", "-f", "table"]);
    let profiler = run.id();
    std::thread::sleep(std::time::Duration::from_millis(200));
    taskdiag_test_support::process::signal(profiler, libc::SIGSTOP);
    std::thread::sleep(std::time::Duration::from_secs(2));
    taskdiag_test_support::process::signal(profiler, libc::SIGCONT);
    let o = run.wait_with_output().expect("taskdiag profile");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(" s in 1.00 s ("),
        "the duration is not -d: {}",
        stderr(&o)
    );
    let table = stdout(&o);
    let threads: f64 = table
        .lines()
        .skip(1)
        .filter_map(|r| r.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum();
    assert!(
        (3.8..=4.05).contains(&threads),
        "{threads} average threads for 4 blocked ones:\n{table}"
    );
}

/// Process `pid`'s CPU time so far (utime + stime of /proc/PID/stat), in clock ticks; 0 once
/// it is gone.
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
        return 0;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

/// Waits until process `pid` has used `secs` more seconds of CPU: what a sample count is
/// asserted against, whatever else the machine runs (a wall-clock wait on a busy machine gave
/// a CPU-bound fixture too little CPU time for its samples).
fn burn_for(pid: u32, secs: f64) {
    let hz = taskdiag_procfs::clock_ticks() as f64;
    let want = cpu_ticks(pid) + (secs * hz).ceil() as u64;
    taskdiag_test_support::process::wait_for("the fixture to use its CPU time", || {
        cpu_ticks(pid) >= want
    });
}

/// `taskdiag ARGS` (a profile) started, once its profile has begun.
fn profile_begun(args: &[&str]) -> std::process::Child {
    let run = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("taskdiag profile");
    let profiler = run.id();
    taskdiag_test_support::process::wait_for("the profiler to sample", || begun(profiler));
    run
}

/// `taskdiag profile ARGS -f folded -q` until SIGINT (as Ctrl-C), which comes once it has begun
/// (a TCG guest loads it for seconds) and `during` has returned; it must succeed.
fn profile_around(args: &[&str], during: impl FnOnce()) -> Vec<Line> {
    let run = profile_begun(&[&["profile", "-f", "folded", "-q"], args].concat());
    let profiler = run.id();
    during();
    taskdiag_test_support::process::signal(profiler, libc::SIGINT);
    let o = run.wait_with_output().expect("taskdiag profile");
    assert!(o.status.success(), "profile {args:?}: {}", stderr(&o));
    folded(&stdout(&o))
}

#[test]
fn a_process_that_exits_during_the_profile_keeps_its_names() {
    // Its stacks are symbolized when first seen, while it lives: after it is gone, its frames
    // still have their names. The profile runs until SIGINT (Ctrl-C), then writes.
    let p = fixture(&[], "burn");
    let pid = p.pid();
    let pid_arg = pid.to_string();
    let lines = profile_around(
        &["-p", &pid_arg, "--on-cpu", "-F", "99", "--per-pid"],
        || {
            // 0.8 s of CPU: ~80 samples at 99 Hz.
            burn_for(pid, 0.8);
            drop(p);
            assert!(
                taskdiag_test_support::process::wait_pid_exit(
                    pid,
                    std::time::Duration::from_secs(5)
                ),
                "the fixture did not exit"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        },
    );
    let label = format!("{COMM}-{pid}");
    let mine: Vec<&Line> = lines.iter().filter(|l| l.thread() == label).collect();
    let (hot, total) = leaf_share(mine.iter().copied(), "hot_function");
    let (cold, _) = leaf_share(mine.iter().copied(), "cold_function");
    assert!(
        total >= 20,
        "{total} samples of the exited {pid}: {lines:?}"
    );
    // What is asserted is that its frames are named, not how its time divides: ~90% of it is
    // in hot_function, and 80% of ~50 samples fails about one run in a hundred by chance alone.
    assert!(
        (hot + cold) * 100 >= total * 95 && hot > cold,
        "{hot} of {total} in hot_function and {cold} in cold_function for the exited {pid}: \
         {mine:?}"
    );
}

#[test]
fn a_process_that_execs_gets_the_names_of_its_new_program() {
    // The fixture built twice non-PIE (its code at the same fixed addresses), the second with
    // hot_function named other_hot: the same addresses, other names. The first burns, then
    // executes the second: the same pid and start time, so only the exec tells the processes
    // apart (names kept from before the exec would call the second's samples hot_function).
    let dir = TempDir::new("profile-exec");
    for sub in ["a", "b"] {
        std::fs::create_dir(dir.join(sub)).expect("a directory for a build");
    }
    let first = build_fixture_at(&dir.join("a").join(COMM), &["-no-pie", "-static"]);
    let second = build_fixture_at(
        &dir.join("b").join(COMM),
        &["-no-pie", "-static", "-Dhot_function=other_hot"],
    );
    let mut proc = Spawned::spawn(
        Command::new(&first)
            .arg("exec")
            .arg(&second)
            .stdout(Stdio::piped()),
    );
    proc.expect_line("ready");
    // The exec once the profiler samples, the end once the second program has burned as long.
    let pid = proc.pid();
    let lines = profile_around(&["-p", &pid.to_string(), "--on-cpu", "-F", "99"], || {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        taskdiag_test_support::process::signal(pid, libc::SIGUSR1);
        std::thread::sleep(std::time::Duration::from_millis(1500));
    });
    let mine: Vec<&Line> = lines.iter().filter(|l| l.thread() == COMM).collect();
    let (before, total) = leaf_share(mine.iter().copied(), "hot_function");
    let (after, _) = leaf_share(mine.iter().copied(), "other_hot");
    assert!(
        before >= 20 && after >= 20,
        "{before} samples in hot_function before the exec and {after} in other_hot after, of \
         {total}: {mine:?}"
    );
}

/// KSM's settings, restored on drop.
struct Ksm(Vec<(PathBuf, String)>);

impl Ksm {
    /// Runs ksmd flat out.
    fn busy() -> Ksm {
        let dir = Path::new("/sys/kernel/mm/ksm");
        let mut saved = Vec::new();
        for (name, value) in [
            ("pages_to_scan", "10000"),
            ("sleep_millisecs", "0"),
            ("run", "1"),
        ] {
            let path = dir.join(name);
            let old = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!("{}: {e} (a kernel with KSM is needed)", path.display())
            });
            saved.push((path.clone(), old.trim().to_owned()));
            std::fs::write(&path, value).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        Ksm(saved)
    }
}

impl Drop for Ksm {
    fn drop(&mut self) {
        // "run" back first (saved last), then the rates.
        for (path, old) in self.0.iter().rev() {
            let _ = std::fs::write(path, old);
        }
    }
}

#[test]
fn cpu_burned_in_the_kernel_for_a_process_and_by_a_kernel_thread_is_seen() {
    // Seed 004: a read of /dev/urandom burns CPU in the kernel's random generator, on behalf of
    // the process.
    let p = fixture(&[], "urandom");
    let pid = p.pid();
    // 1.2 s of its CPU: ~59 samples at 49 Hz.
    let lines = profile_around(&["-p", &pid.to_string(), "--on-cpu"], || burn_for(pid, 1.2));
    let total: u64 = lines.iter().map(|l| l.count).sum();
    let random: u64 = lines
        .iter()
        .filter(|l| {
            l.kernel()
                .iter()
                .any(|f| f.contains("random") || f.contains("chacha"))
        })
        .map(|l| l.count)
        .sum();
    assert!(total >= 30, "too few samples: {lines:?}");
    assert!(
        random * 2 >= total,
        "{random} of {total} samples in the random generator: {lines:?}"
    );
    drop(p);

    // And a kernel thread the test makes busy: ksmd merging a region of identical pages.
    let _ksm = Ksm::busy();
    let _merge = fixture(&[], "merge");
    let lines = profile(&["-a", "--on-cpu", "-d", "3", "--tid"]);
    let ksmd: Vec<&Line> = lines
        .iter()
        .filter(|l| l.thread().starts_with("ksmd-"))
        .collect();
    let n: u64 = ksmd.iter().map(|l| l.count).sum();
    assert!(
        n >= 10,
        "ksmd sampled {n} times in 3 s while busy: {ksmd:?}"
    );
    for l in &ksmd {
        assert_eq!(l.state(), "[running]");
        assert_eq!(
            l.user().count(),
            0,
            "a kernel thread has no user frames: {l:?}"
        );
    }
    assert!(
        ksmd.iter()
            .any(|l| l.kernel().iter().any(|f| f.starts_with("ksm_"))),
        "no ksm_ function in ksmd's stacks: {ksmd:?}"
    );
}

/// The pid of `parent`'s only child.
fn child_of(parent: u32) -> u32 {
    let mut pid = None;
    taskdiag_test_support::process::wait_for("unshare's child", || {
        pid = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        pid.is_some()
    });
    pid.expect("a child")
}

/// `taskdiag profile --pidns PID --on-cpu` at 99 Hz for 3 s, by thread: enough samples that
/// 90% is far from 80% even on a busy machine.
fn profile_pidns(pid: u32) -> Vec<Line> {
    profile(&[
        "--pidns",
        &pid.to_string(),
        "--on-cpu",
        "-F",
        "99",
        "-d",
        "3",
        "--tid",
    ])
}

/// Checks that the burning fixture is its namespace's pid 1, sampled enough, ≥ 80% of its
/// samples ending in hot_function (symbolized), and that `lines` show only its namespace's
/// threads (none with `host_pid`).
fn pid1_burns_in_hot_function(lines: &[Line], host_pid: u32, how: &str) {
    let label = format!("{COMM}-1/1");
    let mine: Vec<&Line> = lines.iter().filter(|l| l.thread() == label).collect();
    let (hot, total) = leaf_share(mine.iter().copied(), "hot_function");
    assert!(total >= 30, "{how}: pid 1 sampled {total} times: {lines:?}");
    assert!(
        hot * 100 >= total * 80,
        "{how}: {hot} of {total} in hot_function: {mine:?}"
    );
    let host = host_pid.to_string();
    assert!(
        lines.iter().all(|l| !l.thread().contains(&host)),
        "{how}: a host pid shown: {lines:?}"
    );
}

#[test]
fn a_pid_namespace_is_profiled_with_its_own_pids_from_the_host_and_from_inside() {
    // Seed 002: a program in its own pid namespace (a Nix build sandbox).
    let sandbox = fixture(
        &["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"],
        "burn",
    );
    let host_pid = child_of(sandbox.pid());
    let from_host = profile_pidns(host_pid);
    pid1_burns_in_hot_function(&from_host, host_pid, "--pidns from the host");
    // A shell that entered only the pid namespace: /proc is still the host's.
    let o = Command::new("nsenter")
        .args(["--target", &host_pid.to_string(), "--pid", "--", BIN])
        .args([
            "profile", "-a", "--on-cpu", "-F", "99", "-d", "3", "--tid", "-f", "folded",
        ])
        .output()
        .expect("nsenter");
    assert!(
        o.status.success(),
        "nsenter --pid taskdiag profile: {}",
        stderr(&o)
    );
    pid1_burns_in_hot_function(
        &folded(&stdout(&o)),
        host_pid,
        "-a inside the namespace with the host's /proc",
    );
}

/// `sh -c SCRIPT sh ARGS...` in a mount namespace (private) and a pid namespace of its own,
/// ready when a fixture it starts says so.
fn in_own_mount_and_pid_namespaces(script: &str, args: &[&Path]) -> Spawned {
    let mut proc = Spawned::spawn(
        Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "--kill-child",
            ])
            .args(["sh", "-c", script, "sh"])
            .args(args)
            .stdout(Stdio::piped()),
    );
    proc.expect_line("ready");
    proc
}

#[test]
fn a_container_two_namespaces_deep_with_its_own_root_is_symbolized() {
    // A static fixture alone on a tmpfs mounted in a mount namespace of its own, which becomes
    // its root, two pid namespaces down: the host cannot reach its binary by any path (the
    // tmpfs is in no mount tree the host sees), only through /proc/PID/map_files.
    let dir = TempDir::new("profile-root");
    let exe = build_fixture_at(&dir.join("profile_fixture"), &["-static"]);
    let root = dir.join("root");
    std::fs::create_dir(&root).expect("the container's root");
    let proc = in_own_mount_and_pid_namespaces(
        "mount -t tmpfs tmpfs \"$1\" && cp \"$2\" \"$1/\" && \
         exec unshare --pid --fork --kill-child --root=\"$1\" /profile_fixture burn",
        &[&root, &exe],
    );
    let host_pid = child_of(child_of(proc.pid()));
    let lines = profile_pidns(host_pid);
    assert!(
        lines.iter().all(|l| l.thread() == format!("{COMM}-1/1")),
        "{lines:?}"
    );
    pid1_burns_in_hot_function(&lines, host_pid, "its own root");
}

#[test]
fn a_jit_in_a_container_is_named_from_the_perf_map_it_wrote_inside() {
    // A JIT writes /tmp/perf-PID.map with PID as its namespace numbers it (1 here), in its own
    // /tmp (a tmpfs of its mount namespace): the host finds no /tmp/perf-<host pid>.map; the
    // map is read through /proc/PID/root with the inner pid.
    let dir = TempDir::new("profile-jit");
    let exe = build_fixture(&dir);
    let proc = in_own_mount_and_pid_namespaces(
        "exec 3<\"$1\" && mount -t tmpfs tmpfs /tmp && exec /proc/self/fd/3 jit",
        &[&exe],
    );
    let host_pid = child_of(proc.pid());
    assert!(!Path::new(&format!("/tmp/perf-{host_pid}.map")).exists());
    let lines = profile_pidns(host_pid);
    let (jitted, total) = leaf_share(&lines, "jitted_loop");
    assert!(total >= 30, "sampled {total} times: {lines:?}");
    assert!(
        jitted * 100 >= total * 80,
        "{jitted} of {total} in jitted_loop: {lines:?}"
    );
}

/// perf's samples of process `pid` by innermost function, from `perf script`.
fn perf_leaves(data: &Path, pid: u32) -> BTreeMap<String, u64> {
    let o = Command::new("perf")
        .args(["script", "-F", "pid,ip,sym", "-i"])
        .arg(data)
        .output()
        .expect("perf script");
    assert!(o.status.success(), "perf script: {}", stderr(&o));
    let mut out = BTreeMap::new();
    let mut want = false;
    let mut first = false;
    for l in stdout(&o).lines() {
        if l.trim().is_empty() {
            continue;
        }
        if !l.starts_with('\t') {
            want = l.trim().parse::<u32>().ok() == Some(pid);
            first = true;
            continue;
        }
        if want && first {
            let sym = l.split_whitespace().nth(1).unwrap_or("[unknown]");
            *out.entry(sym.to_owned()).or_default() += 1;
        }
        first = false;
    }
    out
}

/// Kernel functions by the name of the first symbol at their address (/proc/kallsyms): where two
/// symbols share an address (5.10's `__do_softirq` and `__softirqentry_text_start`), perf and
/// taskdiag may each print another.
fn kernel_aliases() -> HashMap<String, String> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let mut first: HashMap<&str, &str> = HashMap::new();
    let mut out = HashMap::new();
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let (Some(addr), Some(_), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if addr.bytes().all(|b| b == b'0') {
            continue;
        }
        let canon = *first.entry(addr).or_insert(name);
        out.insert(name.to_owned(), canon.to_owned());
    }
    out
}

/// `counts` with kernel aliases merged under one name.
fn merge_aliases(
    counts: BTreeMap<String, u64>,
    aliases: &HashMap<String, String>,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (k, n) in counts {
        let name = aliases.get(&k).cloned().unwrap_or(k);
        *out.entry(name).or_default() += n;
    }
    out
}

/// Each function's share in percent.
fn shares(counts: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    let total: u64 = counts.values().sum();
    counts
        .iter()
        .map(|(k, &n)| (k.clone(), 100.0 * n as f64 / total.max(1) as f64))
        .collect()
}

#[test]
fn on_cpu_shares_agree_with_perf_record() {
    ensure_installed("/usr/bin/perf", "linux-perf");
    let p = fixture(&[], "shares");
    let pid = p.pid();
    let dir = TempDir::new("perf");
    let data = dir.join("perf.data");
    // The same workload, sampled by both at once. At 999 Hz rather than 99, for 6 s, of two
    // threads: the shares of two independent samplings of ~300 samples each differ by up to 8
    // points by chance alone (binomial noise, ~4 points per standard deviation); ~6,000 each
    // bring a deviation to 0.9 point. On a machine so busy that far fewer samples come, the
    // 5 points widen to 4 deviations of chance (a share's noise over both counts).
    let mut perf = Command::new("perf")
        .args(["record", "-F", "999", "-a", "-g", "-q", "-o"])
        .arg(&data)
        .args(["--", "sleep", "6"])
        .stdout(Stdio::null())
        .spawn()
        .expect("perf record");
    let lines = profile(&["-p", &pid.to_string(), "--on-cpu", "-F", "999", "-d", "6"]);
    assert!(perf.wait().expect("perf record").success());
    let mut ours = BTreeMap::new();
    for l in &lines {
        *ours.entry(l.leaf().to_owned()).or_default() += l.count;
    }
    let aliases = kernel_aliases();
    let ours = merge_aliases(ours, &aliases);
    let theirs = merge_aliases(perf_leaves(&data, pid), &aliases);
    let (n1, n2) = (ours.values().sum::<u64>(), theirs.values().sum::<u64>());
    // (A guest under TCG gives a fraction of the samples asked for: 500 at least.)
    assert!(
        n1 >= 500 && n2 >= 500,
        "taskdiag: {ours:?}\nperf: {theirs:?}"
    );
    let (a, b) = (shares(&ours), shares(&theirs));
    let mut top: Vec<(&String, f64)> = a.iter().chain(&b).map(|(k, v)| (k, *v)).collect();
    top.sort_by(|x, y| y.1.total_cmp(&x.1));
    let top: BTreeSet<&String> = top.iter().map(|(k, _)| *k).take(10).collect();
    for f in top {
        let (x, y) = (
            a.get(f).copied().unwrap_or(0.0),
            b.get(f).copied().unwrap_or(0.0),
        );
        let p = (x + y) / 200.0;
        let chance = 400.0 * (p * (1.0 - p) * (1.0 / n1 as f64 + 1.0 / n2 as f64)).sqrt();
        assert!(
            (x - y).abs() <= chance.max(5.0),
            "{f}: taskdiag {x:.1}% perf {y:.1}% ({n1} and {n2} samples)\n{a:?}\n{b:?}"
        );
    }
    for f in ["share_a", "share_b", "share_c"] {
        assert!(a.get(f).copied().unwrap_or(0.0) > 5.0, "{f} missing: {a:?}");
    }
}

#[test]
fn one_run_renders_as_svg_pprof_and_table() {
    let p = fixture(&[], "burn");
    let pid = p.pid().to_string();
    let dir = TempDir::new("profile-out");
    // One second of the fixture in `format`, written to `file`.
    let render = |format: &str, file: &str| {
        let path = dir.join(file);
        let o = run(&[
            "profile",
            "-p",
            &pid,
            "-d",
            "1",
            "-f",
            format,
            "-o",
            path.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{format}: {}", stderr(&o));
        path
    };
    let text = std::fs::read_to_string(render("svg", "p.svg")).expect("the svg");
    assert!(
        text.starts_with("<?xml") && text.trim_end().ends_with("</svg>"),
        "{text:.200}"
    );
    assert!(
        text.contains("hot_function") && text.contains("[running]"),
        "{text:.400}"
    );

    let pb = render("pprof", "p.pb.gz");
    // gzip of a profile.proto whose string table names the hot function (the profile crate's
    // own tests read such files with `go tool pprof`).
    let o = Command::new("gzip")
        .arg("-dc")
        .arg(&pb)
        .output()
        .expect("gzip");
    assert!(o.status.success(), "gzip -dc: {}", stderr(&o));
    let proto = String::from_utf8_lossy(&o.stdout);
    assert!(
        proto.contains("hot_function") && proto.contains("wall"),
        "{proto:.400}"
    );

    let o = run(&["profile", "-p", &pid, "-d", "1", "-f", "table", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "SAMPLES",
            "AVG_THREADS",
            "STATE",
            "SYSCALL",
            "WCHAN",
            "COMM"
        ]
    );
    // Running, and runnable when another test's work takes its CPU.
    assert!(table.lines().skip(1).all(|r| r.ends_with(COMM)), "{table}");
    assert!(
        table
            .lines()
            .any(|r| r.split_whitespace().nth(2) == Some("running")),
        "{table}"
    );
    assert!(stderr(&o).is_empty(), "-q: {}", stderr(&o));
}

#[test]
fn profile_errors_name_what_is_wrong_with_scripts_exit_codes() {
    let status = |o: &Output| o.status.code();
    // A pid that names no process: 1.
    let o = run(&["profile", "-p", "999999999", "-d", "0.1"]);
    assert_eq!(status(&o), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no process 999999999"),
        "{}",
        stderr(&o)
    );
    let o = run(&["profile", "--pidns", "999999999", "-d", "0.1"]);
    assert_eq!(status(&o), Some(1), "{}", stderr(&o));
    // Usage: 2.
    for args in [
        &["profile", "--on-cpu", "--off-cpu"][..],
        &["profile", "-F", "0"],
        &["profile", "-d", "-1"],
        &["profile", "-f", "dot"],
    ] {
        let o = run(args);
        assert_eq!(status(&o), Some(2), "{args:?}: {}", stderr(&o));
    }
    let o = run(&["profile", "--cgroup", "/no/such/cgroup", "-d", "0.1"]);
    assert_eq!(status(&o), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("/no/such/cgroup"), "{}", stderr(&o));
    // Without the privilege: a clear refusal, 3.
    let o = run_as_user(&["profile", "-d", "0.1"]);
    assert_eq!(status(&o), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("root, or CAP_BPF and CAP_PERFMON"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_cgroup_scope_samples_only_its_threads() {
    let mount = taskdiag_test_support::tasks::cgroup2_mount().expect("a cgroup2 mount");
    let dir = mount.join("taskdiag-profile-test");
    let _ = std::fs::create_dir(&dir);
    let p = fixture(&[], "burn");
    std::fs::write(dir.join("cgroup.procs"), p.pid().to_string()).expect("move the fixture");
    let other = fixture(&[], "burn");
    let want = format!("{COMM}-{}", p.pid());
    // By its path as /proc/PID/cgroup shows it, and by its directory.
    for scope in ["/taskdiag-profile-test", dir.to_str().expect("utf-8")] {
        let lines = profile(&["--cgroup", scope, "--on-cpu", "-d", "1", "--per-pid"]);
        assert!(
            lines.iter().any(|l| l.thread() == want),
            "{scope}: {lines:?}"
        );
        assert!(
            lines.iter().all(|l| l.thread() == want),
            "{scope}: outside the cgroup: {lines:?}"
        );
    }
    drop(p);
    drop(other);
    // Empty once the fixture is gone (its exit may take a moment to reach the cgroup).
    taskdiag_test_support::process::wait_for("the test cgroup to empty", || {
        std::fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|s| s.trim().is_empty())
    });
    let _ = std::fs::remove_dir(&dir);
}
