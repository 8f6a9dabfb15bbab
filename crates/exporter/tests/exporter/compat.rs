//! Against the real thing: Debian's prometheus-process-exporter (0.7.10 on Debian 12) run
//! with the same config over the same fixture, and Debian's Prometheus scraping our
//! exporter and answering PromQL. Both are installed by the test (apt-get) when missing; a
//! test skips, saying why, only when apt cannot install them.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::*;
use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{wait_for, wait_until, Spawned};

/// Installs `package` unless `path` exists; `false` (with the reason printed) when apt
/// cannot.
fn installed(path: &str, package: &str) -> bool {
    if Path::new(path).exists() {
        return true;
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get")
            .arg("update")
            .stdout(Stdio::null())
            .status();
        if !install() {
            eprintln!("skipped: {package} is not installed and apt-get could not install it");
            return false;
        }
    }
    Path::new(path).exists()
}

/// A loopback port free now.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Starts a server that listens on `addr` and waits until `path` answers 200.
fn start_listening(mut cmd: Command, addr: SocketAddr, path: &str, what: &str) -> Spawned {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut p = Spawned::spawn(&mut cmd);
    wait_for(&format!("{what} on {addr}"), || {
        if let Ok(Some(st)) = p.child().try_wait() {
            panic!("{what} exited: {st}");
        }
        std::net::TcpStream::connect(addr).is_ok() && get(addr, path, None).status == 200
    });
    p
}

/// Waits until both exporters' fixture group satisfy `cond`; returns their scrapes.
fn both_until(
    a: SocketAddr,
    b: SocketAddr,
    what: &str,
    cond: impl Fn(&BTreeMap<String, f64>) -> bool,
) {
    scrape_until(a, &format!("process-exporter: {what}"), &cond);
    scrape_until(b, &format!("taskdiag exporter: {what}"), &cond);
}

/// How far apart two values of `series` may be: what can change between two scrapes of an
/// idle fixture (none of its counters moves; proportional sizes follow other processes'
/// sharing), and for the resident size what the kernel's per-CPU RSS counters explain:
/// process-exporter reads /proc/PID/stat's rss, an approximate read of three per-CPU
/// counters (each off by up to its batch, max(32, 2 × CPUs) pages, per CPU), where taskdiag
/// reports their exact sum as /proc/PID/status does (the two differ on Linux 6.x).
fn tolerance(series: &str, v: f64) -> f64 {
    if series.contains("proportional") {
        v * 0.05 + 65536.0
    } else if series.contains("memtype=\"resident\"") {
        // SAFETY: sysconf has no memory-safety preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as f64;
        let batch = (2.0 * cpus).max(32.0);
        v * 0.01 + 3.0 * batch * cpus * 4096.0
    } else if series.contains("cpu_seconds") {
        0.02
    } else {
        0.0
    }
}

#[test]
fn the_same_series_as_debians_process_exporter() {
    let g = "tdx-compat";
    let pe_bin = "/usr/bin/prometheus-process-exporter";
    if !installed(pe_bin, "prometheus-process-exporter") {
        return;
    }
    let dir = TempDir::new("exporter-compat");
    let cfg = fixture_config(&dir, g);
    let pe_addr = free_port();
    let mut c = Command::new(pe_bin);
    c.args(["-config.path", cfg.to_str().unwrap()])
        .args(["-web.listen-address", &pe_addr.to_string()]);
    let _pe = start_listening(c, pe_addr, "/metrics", "process-exporter");
    let ours = start_ours(ours(), &["-config.path", cfg.to_str().unwrap()]);
    // process-exporter credits a process with what it did before it was first seen when it
    // started after the exporter's first collection, by start times computed from /proc/stat's
    // btime, whole seconds: a process started within a second of that collection may be
    // taken for an older one. The fixture starts well after.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut fx = Fixture::start(g, None);
    both_until(pe_addr, ours.addr, "the idle fixture", |s| {
        value(s, g, "num_procs", "") == 1.0
            && value(s, g, "thread_count", "threadname=\"tdx-worker\"") == 3.0
    });
    let busy = fx.cmd(&format!("go {}", dir.path().display()));
    assert!(busy.starts_with("busy "));
    both_until(pe_addr, ours.addr, "the work and the child", |s| {
        value(s, g, "num_procs", "") == 2.0 && cpu(s, g) >= 1.4
    });
    let before_pe = cpu(&scrape(pe_addr), g);
    let before_ours = cpu(&scrape(ours.addr), g);
    assert_eq!(fx.cmd("release"), "released");
    both_until(pe_addr, ours.addr, "the child's exit", |s| {
        value(s, g, "num_procs", "") == 1.0
    });

    // The fixture is idle now: its series stay put. Ours bracketed by two of theirs.
    let pe1 = group_series(&scrape(pe_addr), g);
    let ours_s = group_series(&scrape(ours.addr), g);
    let pe2 = group_series(&scrape(pe_addr), g);
    assert!(cpu(&ours_s, g) >= before_ours && cpu(&pe1, g) >= before_pe);
    let mut problems = Vec::new();
    for k in pe1.keys().chain(ours_s.keys()) {
        let (Some(a), Some(b)) = (pe1.get(k).or(pe2.get(k)), ours_s.get(k)) else {
            problems.push(format!(
                "{k}: process-exporter {:?}, taskdiag {:?}",
                pe1.get(k),
                ours_s.get(k)
            ));
            continue;
        };
        let a2 = pe2.get(k).copied().unwrap_or(*a);
        let (lo, hi) = (a.min(a2), a.max(a2));
        let tol = tolerance(k, hi.abs());
        if *b < lo - tol || *b > hi + tol {
            problems.push(format!("{k}: process-exporter {a} then {a2}, taskdiag {b}"));
        }
    }
    problems.dedup();
    assert!(
        problems.is_empty(),
        "series that differ:\n{}",
        problems.join("\n")
    );
    assert!(pe1.len() > 30, "the fixture's series: {pe1:?}");
    // The error counters exist in both (their values count other processes' hidden files).
    let (pe_all, ours_all) = (scrape(pe_addr), scrape(ours.addr));
    for k in [
        "namedprocess_scrape_errors",
        "namedprocess_scrape_partial_errors",
        "namedprocess_scrape_procread_errors",
    ] {
        assert!(pe_all.contains_key(k) && ours_all.contains_key(k), "{k}");
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant PromQL query's single value, if it has one.
fn promql(addr: SocketAddr, query: &str, at: Option<f64>) -> Option<f64> {
    let time = at.map_or(String::new(), |t| format!("&time={t:.3}"));
    let a = get(
        addr,
        &format!("/api/v1/query?query={}{time}", urlencode(query)),
        None,
    );
    if a.status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&a.body).ok()?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn prometheus_scrapes_it_and_answers_promql_with_the_fixtures_values() {
    let g = "tdx-prom";
    let prom_bin = "/usr/bin/prometheus";
    if !installed(prom_bin, "prometheus") {
        return;
    }
    let dir = TempDir::new("exporter-prometheus");
    let cfg = fixture_config(&dir, g);
    let ours = start_ours(ours(), &["-config.path", cfg.to_str().unwrap()]);
    let mut fx = Fixture::start(g, None);
    assert_eq!(fx.cmd("spin"), "spinning");
    let prom_cfg = dir.join("prometheus.yml");
    std::fs::write(
        &prom_cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
             - job_name: taskdiag\n    static_configs:\n      - targets: ['{}']\n",
            ours.addr
        ),
    )
    .unwrap();
    let prom_addr = free_port();
    let mut c = Command::new(prom_bin);
    c.arg(format!("--config.file={}", prom_cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={prom_addr}"));
    let _prom = start_listening(c, prom_addr, "/-/ready", "prometheus");

    // Resident memory: what the exporter reports is what Prometheus answers, and the
    // fixture's VmRSS.
    let q =
        format!("namedprocess_namegroup_memory_bytes{{groupname=\"{g}\",memtype=\"resident\"}}");
    let mut prom_rss = None;
    wait_for("Prometheus to have the fixture's memory", || {
        prom_rss = promql(prom_addr, &q, None);
        prom_rss.is_some() || {
            std::thread::sleep(Duration::from_millis(200));
            false
        }
    });
    let prom_rss = prom_rss.unwrap();
    let vm_rss = fx.rss() as f64;
    assert!(
        (prom_rss - vm_rss).abs() < vm_rss * 0.05,
        "Prometheus says {prom_rss}, VmRSS {vm_rss}"
    );

    // CPU: the spinning fixture's rate over 15 s, as /proc counts it over the same window.
    let (t0, c0) = (epoch(), fx.cpu_ticks());
    let start = Instant::now();
    wait_until(Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(200));
        start.elapsed() >= Duration::from_secs(15)
    });
    let (t1, c1) = (epoch(), fx.cpu_ticks());
    let want = (c1 - c0) as f64 / 100.0 / (t1 - t0);
    let q = format!(
        "sum(rate(namedprocess_namegroup_cpu_seconds_total{{groupname=\"{g}\"}}[{}s]))",
        (t1 - t0).round()
    );
    // Prometheus may not have ingested the last scrape yet: wait for the answer at t1.
    let mut got = None;
    let close = |g: f64| (g - want).abs() < want * 0.25 + 0.05;
    wait_until(Duration::from_secs(60), || {
        got = promql(prom_addr, &q, Some(t1));
        got.is_some_and(close) || {
            std::thread::sleep(Duration::from_millis(500));
            false
        }
    });
    assert!(
        got.is_some_and(close),
        "{q} at {t1}: Prometheus says {got:?}, /proc says {want}"
    );
    assert!(want > 0.3, "the spinner used {want} CPUs");
    assert_eq!(fx.cmd("stop"), "stopped");
}
