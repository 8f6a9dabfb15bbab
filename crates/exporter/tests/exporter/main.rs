//! Integration tests of the exporter: the real binary on a loopback port over a fixture
//! process with known CPU time, I/O, descriptors, threads and a child that exits; bad input;
//! a user served by taskdiagd; and comparisons with Debian's process-exporter and a real
//! Prometheus server (`compat`).

mod compat;
mod harness;

use std::process::Command;

use harness::*;
use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{signal, wait_for};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// What the tests check through one backend.
fn fixture_values(backend: &str, g: &str) {
    let dir = TempDir::new("exporter-values");
    let cfg = fixture_config(&dir, g);
    let ex = start_ours(
        ours(),
        &[
            "-config.path",
            cfg.to_str().expect("UTF-8"),
            "-backend",
            backend,
        ],
    );
    let info = format!("taskdiag_exporter_info{{backend=\"{backend}\"}}");
    assert_eq!(
        scrape(ex.addr).get(&info),
        Some(&1.0),
        "answered by {backend}"
    );
    let mut fx = Fixture::start(g, None);

    // Idle: three named workers, 40 extra descriptors, 16 MiB of touched memory. Idle means
    // every task asleep, counted as process-exporter counts them: the process's state and
    // each of its four threads'.
    let waiting = |s: &std::collections::BTreeMap<String, f64>| -> f64 {
        group_series(s, g)
            .iter()
            .filter(|(k, _)| k.starts_with("namedprocess_namegroup_threads_wchan{"))
            .map(|(_, v)| v)
            .sum()
    };
    let s = scrape_until(ex.addr, "the fixture with its threads, asleep", |s| {
        value(s, g, "num_procs", "") == 1.0
            && value(s, g, "thread_count", "threadname=\"tdx-worker\"") == 3.0
            && value(s, g, "states", "state=\"Sleeping\"") == 5.0
            && waiting(s) == 5.0
    });
    assert_eq!(value(&s, g, "num_threads", ""), 4.0);
    assert_eq!(value(&s, g, "open_filedesc", ""), fx.fds() as f64);
    let rss = value(&s, g, "memory_bytes", "memtype=\"resident\"");
    assert!(rss >= (16 << 20) as f64, "resident {rss}");
    let vm_rss = fx.rss() as f64;
    assert!(
        (rss - vm_rss).abs() < vm_rss * 0.1,
        "resident {rss}, VmRSS {vm_rss}"
    );
    let start = value(&s, g, "oldest_start_time_seconds", "");
    let now = epoch();
    assert!(
        start <= now && start > now - 600.0,
        "start {start}, now {now}"
    );

    // Work: 0.3 s of CPU in each of four threads, 1 MiB written and read back, a child that
    // burnt 0.3 s and waits.
    let busy = fx.cmd(&format!("go {}", dir.path().display()));
    let child: u32 = busy
        .strip_prefix("busy ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the fixture said {busy:?}"));
    let child_ticks = cpu_ticks(child);
    let want = (fx.cpu_ticks() + child_ticks) as f64 / 100.0;
    assert!(want >= 1.5, "the fixture burnt {want} s");
    let s = scrape_until(ex.addr, "the work and the child", |s| {
        value(s, g, "num_procs", "") == 2.0 && (cpu(s, g) - want).abs() < 0.015
    });
    assert!(value(&s, g, "write_bytes_total", "") >= (1 << 20) as f64);
    assert!(value(&s, g, "read_bytes_total", "") >= (1 << 20) as f64);
    let worker_cpu = value(
        &s,
        g,
        "thread_cpu_seconds_total",
        "mode=\"user\",threadname=\"tdx-worker\"",
    ) + value(
        &s,
        g,
        "thread_cpu_seconds_total",
        "mode=\"system\",threadname=\"tdx-worker\"",
    );
    assert!(worker_cpu >= 0.85, "the workers' CPU: {worker_cpu}");
    assert!(value(&s, g, "minor_page_faults_total", "") > 0.0);

    // The child exits: its CPU time stays in the group.
    let before = cpu(&s, g);
    assert_eq!(fx.cmd("release"), "released");
    let s = scrape_until(ex.addr, "the child's exit", |s| {
        value(s, g, "num_procs", "") == 1.0
    });
    assert!(cpu(&s, g) >= before, "{} < {before}", cpu(&s, g));

    // Everything exits: the group stays with its counters, gauges at zero.
    drop(fx);
    let s = scrape_until(ex.addr, "the fixture's exit", |s| {
        value(s, g, "num_procs", "") == 0.0
    });
    assert!(cpu(&s, g) >= before);
    assert_eq!(
        value(&s, g, "oldest_start_time_seconds", ""),
        -62_135_596_800.0
    );
    assert_eq!(value(&s, g, "num_threads", ""), 0.0);
}

#[test]
fn the_fixtures_values_through_procfs() {
    fixture_values("procfs", "tdx-val-procfs");
}

#[test]
fn the_fixtures_values_through_bpf() {
    if !is_root() {
        eprintln!("skipped: the BPF backend needs root (CI runs as root)");
        return;
    }
    fixture_values("bpf", "tdx-val-bpf");
}

#[test]
fn a_bad_config_names_file_line_and_field_and_exits_2() {
    let dir = TempDir::new("exporter-badcfg");
    let cfg = dir.join("bad.yml");
    std::fs::write(
        &cfg,
        "process_names:\n  - name: x\n    comm: [a]\n  - cmdline: ['ok', '(unclosed']\n",
    )
    .unwrap();
    let out = ours()
        .args(["-config.path", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:4:", cfg.display()))
            && err.contains("process_names[1].cmdline")
            && err.contains("unclosed group"),
        "{err}"
    );
    let out = ours()
        .args(["-config.path", "/nonexistent.yml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.yml: "));
    let out = ours().arg("-no-such-flag").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // `taskdiag exporter` is the same program.
    let cli = taskdiag_test_support::bins::workspace_bin("taskdiag");
    let out = Command::new(cli)
        .args(["exporter", "-config.path", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = ours().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "EXIT STATUS",
        "EXAMPLES",
    ] {
        assert!(help.contains(&format!("\n{section}\n")) || help.starts_with(section));
    }
}

#[test]
fn paths_and_formats() {
    let ex = start_ours(ours(), &["-threads=false", "-gather-smaps=false"]);
    let a = get(ex.addr, "/nope", None);
    assert_eq!(a.status, 404);
    let a = get(ex.addr, "/", None);
    assert_eq!(a.status, 200);
    assert!(a.body.contains("href=\"/metrics\""));
    let a = get(ex.addr, "/metrics", None);
    assert_eq!(a.content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(a
        .body
        .contains("# TYPE namedprocess_scrape_errors counter\n"));
    assert!(!a.body.contains("thread_count") && !a.body.contains("proportionalResident"));
    // Prometheus's Accept header (2.42's) asks for OpenMetrics first: by default it gets the
    // 0.0.4 text all the same, as from process-exporter.
    let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let a = get(ex.addr, "/metrics", Some(prom));
    assert_eq!(a.content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(a
        .body
        .contains("# TYPE namedprocess_scrape_errors counter\nnamedprocess_scrape_errors 0\n"));
    // With -web.enable-openmetrics it gets OpenMetrics, the error counters under their
    // 0.0.4 names; curl still gets the text.
    let ex = start_ours(
        ours(),
        &[
            "-threads=false",
            "-gather-smaps=false",
            "-web.enable-openmetrics",
        ],
    );
    let a = get(ex.addr, "/metrics", Some(prom));
    assert_eq!(
        a.content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(a.body.ends_with("# EOF\n"), "{}", a.body);
    assert!(a
        .body
        .contains("# TYPE namedprocess_namegroup_cpu_seconds counter\n"));
    assert!(
        a.body
            .contains("# TYPE namedprocess_scrape_errors unknown\nnamedprocess_scrape_errors 0"),
        "{}",
        a.body
    );
    assert!(!a.body.contains("errors_total"), "{}", a.body);
    let a = get(ex.addr, "/metrics", Some("*/*"));
    assert_eq!(a.content_type, "text/plain; version=0.0.4; charset=utf-8");
}

#[test]
fn node_processes_counts_every_process_and_thread() {
    let ex = start_ours(ours(), &["-node-processes", "-gather-smaps=false"]);
    let fx = Fixture::start("tdx-node", None);
    let s = scrape_until(ex.addr, "the fixture's threads", |s| {
        value(s, "tdx-node", "num_threads", "") == 4.0
    });
    let pids = s["node_processes_pids"];
    let threads = s["node_processes_threads"];
    let states: f64 = s
        .iter()
        .filter(|(k, _)| k.starts_with("node_processes_state{"))
        .map(|(_, v)| v)
        .sum();
    let thread_states: f64 = s
        .iter()
        .filter(|(k, _)| k.starts_with("node_processes_threads_state{"))
        .map(|(_, v)| v)
        .sum();
    assert!(pids >= 2.0 && threads >= pids + 3.0, "{pids} {threads}");
    assert_eq!(states, pids);
    // Threads born or gone between the two dumps of a collection may differ by a few.
    assert!(
        (thread_states - threads).abs() <= 8.0,
        "{thread_states} {threads}"
    );
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max").expect("pid_max");
    assert_eq!(
        s["node_processes_max_processes"],
        max.trim().parse::<f64>().expect("a number")
    );
    drop(fx);
}

#[test]
fn top_bounds_the_groups() {
    let ex = start_ours(ours(), &["-top", "2", "-threads=false"]);
    for _ in 0..3 {
        let s = scrape(ex.addr);
        let groups: std::collections::BTreeSet<&str> = s
            .keys()
            .filter_map(|k| k.split("groupname=\"").nth(1)?.split('"').next())
            .collect();
        assert!(!groups.is_empty() && groups.len() <= 2, "{groups:?}");
    }
}

#[test]
fn concurrent_scrapes_get_whole_answers() {
    let ex = start_ours(ours(), &[]);
    let addr = ex.addr;
    let answers: Vec<_> = (0..6)
        .map(|_| std::thread::spawn(move || scrape(addr)))
        .collect();
    for a in answers {
        let s = a.join().unwrap();
        assert!(s.contains_key("namedprocess_scrape_errors"));
        assert_eq!(s.get("namedprocess_scrape_errors"), Some(&0.0));
    }
}

#[test]
fn a_failed_reload_keeps_the_old_config() {
    let g = "tdx-reload";
    let dir = TempDir::new("exporter-reload");
    let cfg = fixture_config(&dir, g);
    let ex = start_ours(ours(), &["-config.path", cfg.to_str().unwrap()]);
    let _a = Fixture::start(g, None);
    scrape_until(ex.addr, "the first fixture", |s| {
        value(s, g, "num_procs", "") == 1.0
    });

    std::fs::write(
        &cfg,
        format!("process_names:\n  - comm: [{g}]\n    bogus: 1\n"),
    )
    .unwrap();
    signal(ex.proc.pid(), libc::SIGHUP);
    let said = |what: &str| ex.log.lock().unwrap().iter().any(|l| l.contains(what));
    wait_for("the failed reload's message", || {
        said("reload failed, old config kept") && said(&format!("{}:3:", cfg.display()))
    });
    let _b = Fixture::start(g, None);
    scrape_until(
        ex.addr,
        "the second fixture, named by the old config",
        |s| value(s, g, "num_procs", "") == 2.0,
    );

    std::fs::write(
        &cfg,
        format!("process_names:\n  - name: 'renamed-{{{{.Comm}}}}'\n    comm: [{g}]\n"),
    )
    .unwrap();
    signal(ex.proc.pid(), libc::SIGHUP);
    wait_for("the reload", || said("config reloaded"));
    let _c = Fixture::start(g, None);
    let s = scrape_until(ex.addr, "the third fixture, named by the new config", |s| {
        s.get(&format!(
            "namedprocess_namegroup_num_procs{{groupname=\"renamed-{g}\"}}"
        )) == Some(&1.0)
    });
    // Processes already named keep their group.
    assert_eq!(value(&s, g, "num_procs", ""), 2.0);
}

/// The exporter run as an unprivileged user through taskdiagd sees what that user's /proc
/// shows: its own fixture's descriptors, none of another user's (their /proc/PID/fd cannot
/// be listed), both processes and their memory.
#[test]
fn a_user_served_by_taskdiagd_sees_what_its_proc_shows() {
    use taskdiag_test_support::process::Notify;
    use taskdiag_test_support::users::{as_user, OTHER, USER};
    if !is_root() {
        eprintln!("skipped: starting taskdiagd and switching users needs root (CI runs as root)");
        return;
    }
    let g = "tdx-unpriv";
    let dir = TempDir::new("exporter-unpriv");
    let socket = dir.join("taskdiag.sock");
    let mut d = Command::new(taskdiag_test_support::bins::workspace_bin("taskdiagd"));
    // Idle connections close after 1 s: the exporter must open its backend again.
    d.arg("--foreground")
        .arg("--socket")
        .arg(&socket)
        .args(["--timeout", "1"]);
    let ready = Notify::new();
    ready.give(&mut d);
    let mut daemon = taskdiag_test_support::process::Spawned::spawn(&mut d);
    ready.wait_ready(&mut daemon, "taskdiagd");

    let cfg = dir.join("exporter.yml");
    std::fs::write(
        &cfg,
        format!("process_names:\n  - name: '{{{{.Comm}}}}-{{{{.Username}}}}'\n    comm: [{g}]\n"),
    )
    .expect("writing the config");
    let mine = Fixture::start(g, Some(as_user(USER, "/usr/bin/env")));
    let theirs = Fixture::start(g, Some(as_user(OTHER, "/usr/bin/env")));
    let mut ex_cmd = as_user(USER, env!("CARGO_BIN_EXE_taskdiag-exporter"));
    ex_cmd.env("TASKDIAG_SOCKET", &socket);
    let ex = start_ours(
        ex_cmd,
        &[
            "-config.path",
            cfg.to_str().expect("UTF-8"),
            "-backend",
            "daemon",
        ],
    );
    let (my_group, their_group) = (format!("{g}-{USER}"), format!("{g}-{OTHER}"));
    let s = scrape_until(ex.addr, "both fixtures", |s| {
        value(s, &my_group, "num_procs", "") == 1.0
            && value(s, &their_group, "num_procs", "") == 1.0
            && value(s, &my_group, "num_threads", "") == 4.0
    });
    assert_eq!(
        s.get("taskdiag_exporter_info{backend=\"daemon\"}"),
        Some(&1.0)
    );
    // What that user's /proc shows of the two.
    let listable = |pid: u32| {
        as_user(USER, "/bin/ls")
            .arg(format!("/proc/{pid}/fd"))
            .output()
            .expect("ls")
            .status
            .success()
    };
    assert!(listable(mine.pid) && !listable(theirs.pid));
    assert_eq!(value(&s, &my_group, "open_filedesc", ""), mine.fds() as f64);
    assert_eq!(value(&s, &their_group, "open_filedesc", ""), 0.0);
    assert!(value(&s, &their_group, "memory_bytes", "memtype=\"resident\"") >= (16 << 20) as f64);
    assert!(s
        .get("namedprocess_scrape_partial_errors")
        .is_some_and(|&v| v >= 1.0));
    // Past the daemon's idle timeout, the kept connection is gone: the next scrape still
    // collects (the backend is opened again), with no scrape error.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let s = scrape(ex.addr);
    assert_eq!(s.get("namedprocess_scrape_errors"), Some(&0.0));
    assert_eq!(value(&s, &my_group, "num_procs", ""), 1.0);
}

/// The cgroup v2 mount point, from /proc/self/mountinfo.
fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        right
            .starts_with("cgroup2 ")
            .then(|| left.split(' ').nth(4).map(std::path::PathBuf::from))?
    })
}

/// A cgroup of the test's own, removed on drop (once its processes are gone).
struct Cgroup(std::path::PathBuf);

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ =
            taskdiag_test_support::process::wait_until(std::time::Duration::from_secs(10), || {
                std::fs::remove_dir(&self.0).is_ok()
            });
    }
}

/// A `cgroup:` rule names a process by its cgroup v2 path, with captures.
#[test]
fn a_cgroup_rule_names_by_the_v2_path() {
    let Some(mount) = cgroup2_mount().filter(|_| is_root()) else {
        eprintln!("skipped: needs root and a cgroup2 mount (CI has both)");
        return;
    };
    let name = format!("tdx-cg-{}", std::process::id());
    let path = mount.join(&name);
    if let Err(e) = std::fs::create_dir(&path) {
        eprintln!("skipped: cannot create a cgroup at {}: {e}", path.display());
        return;
    }
    let cg = Cgroup(path);
    let g = "tdx-cgroup";
    let fx = Fixture::start(g, None);
    std::fs::write(cg.0.join("cgroup.procs"), fx.pid.to_string()).expect("moving the fixture");
    let dir = TempDir::new("exporter-cgroup");
    let cfg = dir.join("exporter.yml");
    std::fs::write(
        &cfg,
        "process_names:\n  - name: 'cg:{{.Matches.cg}}'\n    cgroup: ['/(?P<cg>tdx-cg-[0-9]+)$']\n",
    )
    .expect("writing the config");
    // Started after the move: the fixture is named by its cgroup when first seen.
    let ex = start_ours(
        ours(),
        &[
            "-config.path",
            cfg.to_str().expect("UTF-8"),
            "-threads=false",
        ],
    );
    let key = format!("namedprocess_namegroup_num_procs{{groupname=\"cg:{name}\"}}");
    let s = scrape_until(ex.addr, "the fixture named by its cgroup", |s| {
        s.get(&key) == Some(&1.0)
    });
    let groups = s
        .keys()
        .filter(|k| k.starts_with("namedprocess_namegroup_num_procs{"))
        .count();
    assert_eq!(groups, 1, "only the fixture's cgroup matches: {s:?}");
    drop(ex);
    drop(fx);
}
