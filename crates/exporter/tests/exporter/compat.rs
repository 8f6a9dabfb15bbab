//! Against the real thing: Debian's prometheus-process-exporter (0.7.10 on Debian 12) run
//! with the same config over the same fixture; Debian's Prometheus (2.42) storing what it
//! scrapes from both, compared series by series through its HTTP API, in both formats it
//! can negotiate with ours; and Prometheus answering PromQL over our exporter. Both are
//! installed by the test (apt-get) when missing; a test skips, saying why, only when apt
//! cannot install them.

use std::collections::{BTreeMap, BTreeSet};
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

/// Debian 12's process-exporter.
const PE_BIN: &str = "/usr/bin/prometheus-process-exporter";

#[test]
fn the_same_series_as_debians_process_exporter() {
    let g = "tdx-compat";
    let pe_bin = PE_BIN;
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

/// Series as Prometheus stores them: each its labels, `__name__` included.
type SeriesSet = BTreeSet<BTreeMap<String, String>>;

/// A Prometheus scraping `jobs` (name, target) every second, on a port of its own, ready.
struct Prometheus {
    _proc: Spawned,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Prometheus {
    fn start(jobs: &[(&str, SocketAddr)]) -> Prometheus {
        let dir = TempDir::new("exporter-prometheus-server");
        let mut cfg = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
        );
        for (job, target) in jobs {
            cfg.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            ));
        }
        let prom_cfg = dir.join("prometheus.yml");
        std::fs::write(&prom_cfg, cfg).expect("writing prometheus.yml");
        let addr = free_port();
        let mut c = Command::new("/usr/bin/prometheus");
        c.arg(format!("--config.file={}", prom_cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"));
        let proc = start_listening(c, addr, "/-/ready", "prometheus");
        Prometheus {
            _proc: proc,
            addr,
            _dir: dir,
        }
    }

    /// GET an API path with `params` (URL-encoded here); its `data`.
    fn api(&self, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
            .collect();
        let a = get(self.addr, &format!("{path}?{}", query.join("&")), None);
        assert_eq!(a.status, 200, "{path} {params:?}: {}", a.body);
        let mut v: serde_json::Value = serde_json::from_str(&a.body).expect("JSON");
        assert_eq!(v["status"], "success", "{path}: {}", a.body);
        v["data"].take()
    }

    /// Every series stored from `job` (/api/v1/series), each as its labels, `__name__`
    /// included, without `job` and `instance` (which name the target).
    fn stored(&self, job: &str) -> SeriesSet {
        let sel = format!("{{job=\"{job}\"}}");
        let data = self.api("/api/v1/series", &[("match[]", &sel)]);
        data.as_array()
            .expect("a list of series")
            .iter()
            .map(|s| {
                s.as_object()
                    .expect("a series' labels")
                    .iter()
                    .filter(|(k, _)| *k != "job" && *k != "instance")
                    .map(|(k, v)| (k.clone(), v.as_str().expect("a label value").to_string()))
                    .collect()
            })
            .collect()
    }

    /// What Prometheus keeps of `job`'s families from its last scrape
    /// (/api/v1/targets/metadata): (name, type, help, unit).
    fn metadata(&self, job: &str) -> BTreeSet<[String; 4]> {
        let sel = format!("{{job=\"{job}\"}}");
        let data = self.api("/api/v1/targets/metadata", &[("match_target", &sel)]);
        data.as_array()
            .expect("a list of metadata")
            .iter()
            .map(|m| ["metric", "type", "help", "unit"].map(|k| m[k].as_str().unwrap_or("").into()))
            .collect()
    }
}

/// The families not compared, by name prefix, each only in one exporter's series, and why.
const NOT_COMPARED: &[(&str, &str, &str)] = &[
    (
        "go_",
        "process-exporter",
        "client_golang's Go runtime collector: taskdiag is not written in Go",
    ),
    (
        "process_",
        "process-exporter",
        "client_golang's process collector about the exporter itself (process_cpu_seconds_total, \
         process_open_fds, ...) and process_exporter_build_info: taskdiag's own are \
         taskdiag_exporter_*",
    ),
    (
        "promhttp_",
        "process-exporter",
        "client_golang's HTTP handler counting its own requests",
    ),
    (
        "taskdiag_exporter_",
        "taskdiag",
        "taskdiag's self metrics: collection time, collections, tasks scanned, backend",
    ),
];

fn compared(name: &str) -> bool {
    !NOT_COMPARED.iter().any(|(p, _, _)| name.starts_with(p))
}

/// The series of `stored` that are compared (see [`NOT_COMPARED`]).
fn comparable(stored: &SeriesSet) -> SeriesSet {
    stored
        .iter()
        .filter(|s| compared(&s["__name__"]))
        .cloned()
        .collect()
}

/// A series' labels as PromQL writes them.
fn show(s: &BTreeMap<String, String>) -> String {
    let labels: Vec<String> = s
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    format!("{}{{{}}}", s["__name__"], labels.join(","))
}

/// The series stored from process-exporter and not from `job`, and the reverse.
fn differences(pe: &SeriesSet, ours: &SeriesSet, job: &str) -> Vec<String> {
    let only = |a: &BTreeSet<_>, b: &BTreeSet<_>, who: &str| -> Vec<String> {
        a.difference(b)
            .map(|s| format!("only from {who}: {}", show(s)))
            .collect()
    };
    let mut v = only(pe, ours, "process-exporter");
    v.extend(only(ours, pe, job));
    v
}

/// The stored-series comparison's side: process-exporter and two of our exporters (the
/// default, and `-web.enable-openmetrics`), one config, one idle fixture.
struct Stored {
    _pe: Spawned,
    pe: SocketAddr,
    text: Running,
    om: Running,
    _fx: Fixture,
    _dir: TempDir,
}

impl Stored {
    const GROUP: &'static str = "tdx-stored";
    const JOBS: [&'static str; 3] = ["process-exporter", "taskdiag", "taskdiag-openmetrics"];

    /// Starts them and the fixture; returns once each exporter shows the fixture idle.
    fn start() -> Stored {
        let g = Self::GROUP;
        let dir = TempDir::new("exporter-stored");
        let cfg = fixture_config(&dir, g);
        let cfg_arg = cfg.to_str().expect("UTF-8");
        let pe = free_port();
        let mut c = Command::new(PE_BIN);
        c.args(["-config.path", cfg_arg])
            .args(["-web.listen-address", &pe.to_string()]);
        let pe_proc = start_listening(c, pe, "/metrics", "process-exporter");
        let text = start_ours(ours(), &["-config.path", cfg_arg]);
        let om = start_ours(
            ours(),
            &["-config.path", cfg_arg, "-web.enable-openmetrics"],
        );
        let fx = Fixture::start(g, None);
        // Every series Prometheus stores from then on is of the idle fixture: its four
        // threads asleep (process-exporter counts the process's state and each thread's),
        // each waiting in the kernel.
        let idle = |s: &BTreeMap<String, f64>| {
            let waiting: f64 = group_series(s, g)
                .iter()
                .filter(|(k, _)| k.starts_with("namedprocess_namegroup_threads_wchan{"))
                .map(|(_, v)| v)
                .sum();
            value(s, g, "num_procs", "") == 1.0
                && value(s, g, "thread_count", "threadname=\"tdx-worker\"") == 3.0
                && value(s, g, "states", "state=\"Sleeping\"") == 5.0
                && waiting == 5.0
        };
        for (who, addr) in [
            (Self::JOBS[0], pe),
            (Self::JOBS[1], text.addr),
            (Self::JOBS[2], om.addr),
        ] {
            scrape_until(addr, &format!("{who}: the idle fixture"), idle);
        }
        Stored {
            _pe: pe_proc,
            pe,
            text,
            om,
            _fx: fx,
            _dir: dir,
        }
    }

    fn targets(&self) -> [(&'static str, SocketAddr); 3] {
        [
            (Self::JOBS[0], self.pe),
            (Self::JOBS[1], self.text.addr),
            (Self::JOBS[2], self.om.addr),
        ]
    }

    /// What a real Prometheus stores from our exporter is what it stores from
    /// process-exporter: the same series (metric names, label names and values of the
    /// fixture's group, the scrape-error counters without `_total`), whichever format it
    /// negotiated. Prometheus 2.42 (Debian 12's) asks for OpenMetrics first and has no
    /// `scrape_protocols` (2.49) to ask otherwise; two of our exporters answer it, one as
    /// process-exporter does (the 0.0.4 text whatever Accept says: the default), one with
    /// `-web.enable-openmetrics` (OpenMetrics). The metadata Prometheus keeps of the
    /// families shows which format it parsed: OpenMetrics names a counter family without
    /// `_total`. Series not compared: [`NOT_COMPARED`].
    fn check(&self, prom: &Prometheus) {
        let jobs = Self::JOBS;
        // Once a series of a target's successful scrape is stored, so is the rest of that
        // scrape (one commit; a failed one stores only `up` and its like). A later scrape
        // adds nothing to an idle fixture's series: waiting for the sets to agree only lets
        // one target's first scrape catch up with another's.
        let mut stored: Vec<SeriesSet> = Vec::new();
        let scraped = |s: &SeriesSet| {
            s.iter()
                .any(|s| s["__name__"] == "namedprocess_namegroup_num_procs")
        };
        wait_for("Prometheus to store a scrape of each target", || {
            stored = jobs.iter().map(|j| prom.stored(j)).collect();
            stored.iter().all(scraped) || {
                std::thread::sleep(Duration::from_millis(200));
                false
            }
        });
        wait_until(Duration::from_secs(5), || {
            stored = jobs.iter().map(|j| prom.stored(j)).collect();
            let c: Vec<_> = stored.iter().map(comparable).collect();
            c[0] == c[1] && c[0] == c[2] || {
                std::thread::sleep(Duration::from_millis(200));
                false
            }
        });
        let pe = comparable(&stored[0]);
        let mut problems = differences(&pe, &comparable(&stored[1]), jobs[1]);
        problems.extend(differences(&pe, &comparable(&stored[2]), jobs[2]));
        assert!(
            problems.is_empty(),
            "series Prometheus stored differently:\n{}",
            problems.join("\n")
        );
        // Not a comparison of nothing: the fixture's group, its threads, the error counters.
        let names: BTreeSet<&str> = pe.iter().map(|s| s["__name__"].as_str()).collect();
        for name in [
            "namedprocess_scrape_errors",
            "namedprocess_scrape_partial_errors",
            "namedprocess_scrape_procread_errors",
            "namedprocess_namegroup_cpu_seconds_total",
            "namedprocess_namegroup_thread_count",
            "namedprocess_namegroup_threads_wchan",
        ] {
            assert!(names.contains(name), "{name} not stored: {names:?}");
        }
        let in_group = pe
            .iter()
            .filter(|s| s.get("groupname").map(String::as_str) == Some(Self::GROUP))
            .count();
        assert!(in_group > 30, "the fixture's stored series: {in_group}");
        // The series left out are each only in the exporter the list says.
        for (prefix, only_in, why) in NOT_COMPARED {
            let has = |i: usize| stored[i].iter().any(|s| s["__name__"].starts_with(prefix));
            let right = if *only_in == "taskdiag" {
                has(1) && has(2) && !has(0)
            } else {
                has(0) && !has(1) && !has(2)
            };
            assert!(
                right,
                "{prefix}* ({why}) should be only in {only_in}'s series"
            );
        }

        // Which format Prometheus parsed, by the metadata it kept: the default's is
        // process-exporter's, help texts included (the 0.0.4 text); OpenMetrics names
        // counter families without `_total` and has the error counters as `unknown`.
        let meta = |job: &str| -> BTreeSet<[String; 4]> {
            prom.metadata(job)
                .into_iter()
                .filter(|m| compared(&m[0]))
                .collect()
        };
        let (pe_meta, text_meta, om_meta) = (meta(jobs[0]), meta(jobs[1]), meta(jobs[2]));
        assert_eq!(pe_meta, text_meta, "the metadata of the 0.0.4 text");
        let has = |m: &BTreeSet<[String; 4]>, name: &str, kind: &str| {
            m.iter().any(|e| e[0] == name && e[1] == kind)
        };
        assert!(
            has(
                &text_meta,
                "namedprocess_namegroup_cpu_seconds_total",
                "counter"
            ) && has(&text_meta, "namedprocess_scrape_errors", "counter"),
            "{text_meta:?}"
        );
        assert!(
            has(&om_meta, "namedprocess_namegroup_cpu_seconds", "counter")
                && has(&om_meta, "namedprocess_scrape_errors", "unknown"),
            "Prometheus did not parse OpenMetrics from {}: {om_meta:?}",
            jobs[2]
        );
    }
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

/// The PromQL side: our exporter over a fixture that spins a thread.
struct Spinning {
    ours: Running,
    fx: Fixture,
    _dir: TempDir,
}

impl Spinning {
    const GROUP: &'static str = "tdx-prom";

    fn start() -> Spinning {
        let dir = TempDir::new("exporter-prometheus");
        let cfg = fixture_config(&dir, Self::GROUP);
        let ours = start_ours(ours(), &["-config.path", cfg.to_str().expect("UTF-8")]);
        let mut fx = Fixture::start(Self::GROUP, None);
        assert_eq!(fx.cmd("spin"), "spinning");
        Spinning {
            ours,
            fx,
            _dir: dir,
        }
    }

    /// Resident memory: what the exporter reports is what Prometheus answers, and the
    /// fixture's VmRSS.
    fn check_memory(&self, prom: &Prometheus) {
        let q = format!(
            "namedprocess_namegroup_memory_bytes{{groupname=\"{}\",memtype=\"resident\"}}",
            Self::GROUP
        );
        let mut prom_rss = None;
        wait_for("Prometheus to have the fixture's memory", || {
            prom_rss = promql(prom.addr, &q, None);
            prom_rss.is_some() || {
                std::thread::sleep(Duration::from_millis(200));
                false
            }
        });
        let prom_rss = prom_rss.expect("waited for");
        let vm_rss = self.fx.rss() as f64;
        assert!(
            (prom_rss - vm_rss).abs() < vm_rss * 0.05,
            "Prometheus says {prom_rss}, VmRSS {vm_rss}"
        );
    }

    /// Where the CPU window starts: epoch seconds, the fixture's CPU ticks, the instant.
    fn window(&self) -> (f64, u64, Instant) {
        (epoch(), self.fx.cpu_ticks(), Instant::now())
    }

    /// CPU: the spinning fixture's rate over 15 s from `window`, as /proc counts it over
    /// the same window.
    fn check_cpu(&mut self, prom: &Prometheus, (t0, c0, start): (f64, u64, Instant)) {
        wait_until(Duration::from_secs(30), || {
            std::thread::sleep(Duration::from_millis(200));
            start.elapsed() >= Duration::from_secs(15)
        });
        let (t1, c1) = (epoch(), self.fx.cpu_ticks());
        let want = (c1 - c0) as f64 / 100.0 / (t1 - t0);
        let q = format!(
            "sum(rate(namedprocess_namegroup_cpu_seconds_total{{groupname=\"{}\"}}[{}s]))",
            Self::GROUP,
            (t1 - t0).round()
        );
        // Prometheus may not have ingested the last scrape yet: wait for the answer at t1.
        let mut got = None;
        let close = |g: f64| (g - want).abs() < want * 0.25 + 0.05;
        wait_until(Duration::from_secs(60), || {
            got = promql(prom.addr, &q, Some(t1));
            got.is_some_and(close) || {
                std::thread::sleep(Duration::from_millis(500));
                false
            }
        });
        assert!(
            got.is_some_and(close),
            "{q} at {t1}: Prometheus says {got:?}, /proc says {want}"
        );
        // At least a tenth of a CPU: the machine may be busy (a load of 8 on 2 CPUs gave
        // 0.28), and a tenth is still a rate the comparison above tells from none.
        assert!(want > 0.1, "the spinner used {want} CPUs");
        assert_eq!(self.fx.cmd("stop"), "stopped");
    }
}

/// One Prometheus (its start and first scrape take ~6 s: discovery and the scrape manager
/// apply targets every 5 s) scraping both sides: the stored-series comparison
/// ([`Stored::check`]) runs inside the PromQL check's 15 s CPU window.
#[test]
fn prometheus_stores_process_exporters_series_from_it_and_answers_promql() {
    if !installed(PE_BIN, "prometheus-process-exporter")
        || !installed("/usr/bin/prometheus", "prometheus")
    {
        return;
    }
    let stored = Stored::start();
    let mut spinning = Spinning::start();
    let mut jobs = stored.targets().to_vec();
    jobs.push(("taskdiag-promql", spinning.ours.addr));
    let prom = Prometheus::start(&jobs);
    spinning.check_memory(&prom);
    let window = spinning.window();
    stored.check(&prom);
    spinning.check_cpu(&prom, window);
}
