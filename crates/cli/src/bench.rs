//! `taskdiag bench`: the seed article's experiments on this machine, in one run.
//!
//! Spawns the processes (`taskdiag_bench::spawn`), then measures, interleaved, the procfs floor
//! (this binary's hidden `bench-loop`, a raw-syscall loop), taskdiag with each backend for the
//! article's requests, and the tools people use when they are installed. The machinery is in
//! the `taskdiag-bench` crate; this module only chooses the rows.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use taskdiag_bench::measure::RowResult;
use taskdiag_bench::measure::{run_rows, Row};
use taskdiag_bench::{baseline, report, spawn, svg};

/// Arguments of `taskdiag bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Processes to spawn (the article used 50,000).
    #[arg(long, default_value_t = 50_000)]
    tasks: usize,
    /// Threads per spawned process.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Measured runs per row (after one warm-up run).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// A few hundred tasks, one run, no perf counts: a smoke test of the whole bench (CI).
    #[arg(long)]
    quick: bool,
    /// Output: md (a Markdown table) or json.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Md)]
    format: Format,
    /// Measure at each of these task counts (comma-separated, e.g. 1000,10000,50000,100000)
    /// instead of once: the scaling curves. Processes per size = tasks / --threads.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    scale: Vec<usize>,
    /// With --scale: also write a log-log chart of wall time against tasks to this SVG file.
    #[arg(long, value_name = "FILE", requires = "scale")]
    svg: Option<std::path::PathBuf>,
    /// Measure only these rows (comma-separated keys such as T1,D1; include the rows named in
    /// the ratio column to get ratios).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    rows: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Md,
    Json,
}

/// Arguments of the hidden `bench-clients`.
#[derive(clap::Args)]
pub struct ClientsArgs {
    /// Concurrent clients, each on its own connection.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Requests per client.
    #[arg(long, default_value_t = 1)]
    requests: usize,
    /// Groups each request asks for.
    #[arg(long, default_value = "base,cred")]
    groups: String,
    /// The daemon's socket.
    #[arg(long)]
    socket: std::path::PathBuf,
}

/// Arguments of the hidden `bench-loop`.
#[derive(clap::Args)]
pub struct LoopArgs {
    /// Open and close only.
    #[arg(long)]
    noread: bool,
    /// Every thread's files (/proc/PID/task/TID/FILE) instead of every process's.
    #[arg(long)]
    threads: bool,
    /// /proc/PID files to read.
    #[arg(required = true)]
    files: Vec<String>,
}

/// Runs the procfs floor loop.
pub fn bench_loop(a: LoopArgs) -> anyhow::Result<ExitCode> {
    let files: Vec<&str> = a.files.iter().map(String::as_str).collect();
    let c = baseline::proc_loop(&files, a.noread, a.threads).context("/proc")?;
    eprintln!("tasks: {} (vanished: {})", c.tasks, c.vanished);
    Ok(ExitCode::SUCCESS)
}

/// The raw memory-map iterator read: its program left the production BPF object, and the
/// benchmark harness (crates/bench) carries it with its own.
pub fn bench_vma_floor() -> anyhow::Result<ExitCode> {
    anyhow::bail!("the raw iter/task_vma walk is measured by the benchmark harness (crates/bench)")
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn which(tool: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

fn row(key: &str, label: &str, argv: Option<Vec<String>>, baseline: Option<&str>) -> Row {
    Row {
        key: key.into(),
        label: label.into(),
        argv,
        baseline: baseline.map(Into::into),
    }
}

/// The rows; `per_thread` makes every row list threads rather than processes (loops over
/// /proc/PID/task/TID, `dump --all-threads`, `ps -L`, `top -H`).
fn rows(exe: &str, per_thread: bool) -> Vec<Row> {
    let s = |v: &[&str]| -> Vec<String> { v.iter().map(|x| x.to_string()).collect() };
    let t = if per_thread { "/task/*" } else { "" };
    let all = if per_thread { " --all-threads" } else { "" };
    let lp = |files: &[&str]| -> Vec<String> {
        let mode: &[&str] = if per_thread { &["--threads"] } else { &[] };
        [exe, "bench-loop"]
            .iter()
            .chain(mode)
            .chain(files)
            .map(|x| x.to_string())
            .collect()
    };
    let dump = |groups: &str, backend: &str| {
        s(&[
            exe,
            "dump",
            if per_thread { "--all-threads" } else { "--all" },
            "--groups",
            groups,
            "--format",
            "raw",
            "--backend",
            backend,
        ])
    };
    let tool = |name: &str, args: &[&str]| which(name).map(|p| [vec![p], s(args)].concat());
    let psutil = which("python3").filter(|py| {
        std::process::Command::new(py)
            .args(["-c", "import psutil"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|st| st.success())
    });
    let psutil_code = "import psutil\nfor p in psutil.process_iter(['pid','ppid','name','username','cmdline']): p.info";
    vec![
        row(
            "P0",
            &format!("loop: open+close /proc/*{t}/stat (no read)"),
            Some(lp(&["--noread", "stat"])),
            None,
        ),
        row(
            "P1",
            &format!("loop: /proc/*{t}/stat"),
            Some(lp(&["stat"])),
            None,
        ),
        row(
            "P2",
            &format!("loop: /proc/*{t}/status"),
            Some(lp(&["status"])),
            None,
        ),
        row(
            "P3",
            &format!("loop: /proc/*{t}/cmdline"),
            Some(lp(&["cmdline"])),
            None,
        ),
        row(
            "P4",
            &format!("loop: /proc/*{t}/stat + cmdline"),
            Some(lp(&["stat", "cmdline"])),
            None,
        ),
        row(
            "P5",
            &format!("loop: /proc/*{t}/stat + status"),
            Some(lp(&["stat", "status"])),
            None,
        ),
        // The files the procfs backend reads for BASE/CRED (+ CMDLINE): its fair floor.
        row(
            "P6",
            &format!("loop: /proc/*{t}/stat + status + cmdline"),
            Some(lp(&["stat", "status", "cmdline"])),
            None,
        ),
        row(
            "P7",
            &format!("loop: /proc/*{t}/maps"),
            Some(lp(&["maps"])),
            None,
        ),
        row(
            "P8",
            &format!("loop: /proc/*{t}/smaps"),
            Some(lp(&["smaps"])),
            None,
        ),
        row(
            "T8",
            "cat /proc/*/maps",
            which("sh").map(|sh| {
                vec![
                    sh,
                    "-c".into(),
                    "cat /proc/[0-9]*/maps 2>/dev/null || true".into(),
                ]
            }),
            Some("P7"),
        ),
        row(
            "B5",
            &format!("taskdiag bpf base,vma{all}"),
            Some(dump("vma", "bpf")),
            Some("P7"),
        ),
        row(
            "F4",
            &format!("taskdiag procfs base,vma{all}"),
            Some(dump("vma", "procfs")),
            Some("P7"),
        ),
        row(
            "B6",
            &format!("taskdiag bpf base,vma_stat{all}"),
            Some(dump("vma_stat", "bpf")),
            Some("P8"),
        ),
        row(
            "B1",
            &format!("taskdiag bpf base,cred{all}"),
            Some(dump("base,cred", "bpf")),
            Some("P2"),
        ),
        row(
            "B2",
            &format!("taskdiag bpf base,cmdline{all}"),
            Some(dump("base,cmdline", "bpf")),
            Some("P4"),
        ),
        row(
            "B3",
            &format!("taskdiag bpf base{all}"),
            Some(dump("base", "bpf")),
            Some("P1"),
        ),
        row(
            "F1",
            &format!("taskdiag procfs base,cred{all}"),
            Some(dump("base,cred", "procfs")),
            Some("P5"),
        ),
        row(
            "F2",
            &format!("taskdiag procfs base,cmdline{all}"),
            Some(dump("base,cmdline", "procfs")),
            Some("P6"),
        ),
        row(
            "F3",
            &format!("taskdiag procfs base{all}"),
            Some(dump("base", "procfs")),
            Some("P5"),
        ),
        row(
            "T1",
            if per_thread {
                "procps ps -eL -o pid,lwp,ppid,pgid,sid,comm"
            } else {
                "procps ps -e -o pid,ppid,pgid,sid,comm"
            },
            if per_thread {
                tool("ps", &["-eL", "-o", "pid,lwp,ppid,pgid,sid,comm"])
            } else {
                tool("ps", &["-e", "-o", "pid,ppid,pgid,sid,comm"])
            },
            Some("P1"),
        ),
        row(
            "T2",
            if per_thread {
                "procps ps auxH"
            } else {
                "procps ps aux"
            },
            tool("ps", &[if per_thread { "auxH" } else { "aux" }]),
            Some("P1"),
        ),
        row(
            "T3",
            if per_thread {
                "procps top -H -b -n 1"
            } else {
                "procps top -b -n 1"
            },
            if per_thread {
                tool("top", &["-H", "-b", "-n", "1"])
            } else {
                tool("top", &["-b", "-n", "1"])
            },
            Some("P1"),
        ),
        row(
            "T4",
            "procps pgrep -c -f taskdiag",
            tool("pgrep", &["-c", "-f", "taskdiag"]),
            Some("P3"),
        ),
        row(
            "T5",
            "psmisc pstree -p",
            tool("pstree", &["-p"]),
            Some("P1"),
        ),
        row(
            "T6",
            "psutil process_iter(pid,ppid,name,username,cmdline)",
            psutil.map(|py| vec![py, "-c".into(), psutil_code.into()]),
            Some("P5"),
        ),
        row(
            "D1",
            if per_thread {
                "taskdiag ps -eL -o pid,lwp,ppid,pgid,sid,comm"
            } else {
                "taskdiag ps -e -o pid,ppid,pgid,sid,comm"
            },
            Some(if per_thread {
                s(&[exe, "ps", "-eL", "-o", "pid,lwp,ppid,pgid,sid,comm"])
            } else {
                s(&[exe, "ps", "-e", "-o", "pid,ppid,pgid,sid,comm"])
            }),
            Some("T1"),
        ),
        row(
            "D2",
            if per_thread {
                "taskdiag ps auxH"
            } else {
                "taskdiag ps aux"
            },
            Some(s(&[exe, "ps", if per_thread { "auxH" } else { "aux" }])),
            Some("T2"),
        ),
        row(
            "D3",
            if per_thread {
                "taskdiag top -H -b -n 1"
            } else {
                "taskdiag top -b -n 1"
            },
            Some(if per_thread {
                s(&[exe, "top", "-H", "-b", "-n", "1"])
            } else {
                s(&[exe, "top", "-b", "-n", "1"])
            }),
            Some("T3"),
        ),
        row(
            "D4",
            "taskdiag pgrep -c -f taskdiag",
            Some(s(&[exe, "pgrep", "-c", "-f", "taskdiag"])),
            Some("T4"),
        ),
        row(
            "D5",
            "taskdiag pstree -p",
            Some(s(&[exe, "pstree", "-p"])),
            Some("T5"),
        ),
        // Steady state of a refreshing top: four frames a second apart; the CPU of three
        // refreshes is this row's CPU minus the one-frame row's.
        row(
            "T7",
            "procps top -b -n 4 -d 1",
            tool("top", &["-b", "-n", "4", "-d", "1"]),
            Some("T3"),
        ),
        row(
            "D7",
            "taskdiag top -b -n 4 -d 1",
            Some(s(&[exe, "top", "-b", "-n", "4", "-d", "1"])),
            Some("T7"),
        ),
    ]
}

/// The unprivileged user the daemon rows run as (`nobody` exists everywhere; its id is the
/// overflow id on Debian and most distributions).
const BENCH_UID: &str = "65534";

/// Rows that need a running taskdiagd; `daemon` is its socket.
fn daemon_rows(exe: &str, per_thread: bool, socket: &str) -> Vec<Row> {
    let setpriv = which("setpriv");
    let as_nobody = |v: &[&str]| -> Option<Vec<String>> {
        let sp = setpriv.clone()?;
        let mut a = vec![
            sp,
            "--reuid".into(),
            BENCH_UID.into(),
            "--regid".into(),
            BENCH_UID.into(),
            "--clear-groups".into(),
            "--inh-caps=-all".into(),
            "--".into(),
        ];
        a.extend(v.iter().map(|x| x.to_string()));
        Some(a)
    };
    let sel = if per_thread { "--all-threads" } else { "--all" };
    let all = if per_thread { " --all-threads" } else { "" };
    let dump_argv = |backend: &str| -> Vec<String> {
        let mut v: Vec<String> = [exe, "dump", sel, "--groups", "base,cred", "--format", "raw"]
            .iter()
            .map(|x| x.to_string())
            .collect();
        v.extend(["--backend".to_string(), backend.to_string()]);
        if backend == "daemon" {
            v.extend(["--socket".to_string(), socket.to_string()]);
        }
        v
    };
    let dump = |backend: &str| {
        let v = dump_argv(backend);
        as_nobody(&v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let repeat = |v: Option<Vec<String>>| {
        v.map(|mut v| {
            v.extend(["--repeat".to_string(), "20".to_string()]);
            v
        })
    };
    let clients = |n: &str| {
        as_nobody(&[
            exe,
            "bench-clients",
            "--clients",
            n,
            "--groups",
            "base,cred",
            "--socket",
            socket,
        ])
    };
    vec![
        row(
            "U1",
            &format!("taskdiag procfs base,cred{all}, as nobody"),
            dump("procfs"),
            Some("P5"),
        ),
        row(
            "S1",
            &format!("taskdiag daemon base,cred{all}, as nobody"),
            dump("daemon"),
            Some("U1"),
        ),
        // The same, compared with the in-process BPF dump as root.
        row(
            "S2",
            &format!("taskdiag daemon base,cred{all}, as nobody (vs bpf as root)"),
            dump("daemon"),
            Some("B1"),
        ),
        // Twenty requests on one connection / with programs loaded once: the per-request cost
        // without process start-up or program loading (divide the wall time by 20).
        row(
            "S3",
            &format!("taskdiag daemon base,cred{all} --repeat 20, as nobody"),
            repeat(dump("daemon")),
            None,
        ),
        row(
            "B4",
            &format!("taskdiag bpf base,cred{all} --repeat 20, as root"),
            repeat(Some(dump_argv("bpf"))),
            None,
        ),
        row(
            "S10",
            "10 concurrent daemon clients, base,cred each, as nobody",
            clients("10"),
            Some("S1"),
        ),
        row(
            "S100",
            "100 concurrent daemon clients, base,cred each, as nobody",
            clients("100"),
            Some("S1"),
        ),
    ]
}

/// A taskdiagd started for the daemon rows; killed (by pid) when dropped.
struct BenchDaemon {
    child: std::process::Child,
    socket: std::path::PathBuf,
}

impl BenchDaemon {
    fn start(exe: &str) -> anyhow::Result<BenchDaemon> {
        let bin = std::path::Path::new(exe).with_file_name("taskdiagd");
        let socket =
            std::env::temp_dir().join(format!("taskdiag-bench-{}.sock", std::process::id()));
        let child = std::process::Command::new(&bin)
            .arg("--foreground")
            .arg("--socket")
            .arg(&socket)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let d = BenchDaemon { child, socket };
        let t0 = std::time::Instant::now();
        while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
            anyhow::ensure!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "taskdiagd did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(d)
    }
}

impl Drop for BenchDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Runs `--clients` concurrent daemon clients, each sending `--requests` ALL requests, and
/// checks every response ended with DONE and no error.
pub fn bench_clients(a: ClientsArgs) -> anyhow::Result<ExitCode> {
    let show = crate::parse_groups(&a.groups)?;
    let req = taskdiag::Request::new(taskdiag::Strategy::All, 0, show);
    let handles: Vec<_> = (0..a.clients.max(1))
        .map(|_| {
            let socket = a.socket.clone();
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let mut c = taskdiag::client::DaemonClient::connect(&socket)?;
                let mut n = 0;
                for _ in 0..a.requests.max(1) {
                    n += c.dump(&req, &mut |_| Ok(()))?;
                }
                Ok(n)
            })
        })
        .collect();
    let mut tasks = 0;
    for h in handles {
        tasks += h
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
    }
    anyhow::ensure!(tasks > 0, "no tasks reported");
    Ok(ExitCode::SUCCESS)
}

/// Rows of the scaling curves unless --rows says otherwise: the floor loops, taskdiag, and ps
/// (the slow tools would take minutes at 100,000 tasks).
const SCALE_ROWS: [&str; 10] = ["P1", "P2", "P4", "P5", "B1", "B2", "F1", "F3", "T1", "D1"];

fn install_signals() {
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

fn tasks_in_proc() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .count()
        })
        .unwrap_or(0)
}

fn measure_at(
    exe: &str,
    procs: usize,
    threads: usize,
    runs: usize,
    warmup: bool,
    perf: bool,
    only: Option<&[&str]>,
) -> anyhow::Result<(usize, Vec<RowResult>)> {
    let spawned = spawn::Spawned::new(procs, threads)
        .with_context(|| format!("spawning {procs} processes (needs root to raise pid_max)"))?;
    let in_proc = tasks_in_proc();
    let wants_daemon = only.is_none_or(|o| o.iter().any(|k| k.starts_with(['S', 'U'])));
    let daemon = if wants_daemon {
        Some(BenchDaemon::start(exe)?)
    } else {
        None
    };
    let socket = daemon
        .as_ref()
        .map_or(String::new(), |d| d.socket.display().to_string());
    let mut all = rows(exe, threads > 1);
    if daemon.is_some() {
        all.extend(daemon_rows(exe, threads > 1, &socket));
    }
    let rows: Vec<Row> = all
        .into_iter()
        .filter(|r| only.is_none_or(|o| o.contains(&r.key.as_str())))
        .collect();
    let results = run_rows(rows, runs, warmup, perf && which("perf").is_some(), &STOP);
    drop(daemon);
    drop(spawned);
    anyhow::ensure!(
        !STOP.load(Ordering::Relaxed),
        "interrupted; the spawned processes were killed"
    );
    let failed: Vec<_> = results
        .iter()
        .filter(|r| r.error.as_deref().is_some_and(|e| e != "not installed"))
        .map(|r| format!("{}: {}", r.row.key, r.error.as_deref().unwrap_or("")))
        .collect();
    anyhow::ensure!(failed.is_empty(), "rows failed: {}", failed.join("; "));
    Ok((in_proc, results))
}

fn scaling(a: &BenchArgs, exe: &str) -> anyhow::Result<ExitCode> {
    let threads = a.threads.max(1);
    let runs = a.runs.max(1);
    let mut sizes = Vec::new();
    let only: Vec<&str> = if a.rows.is_empty() {
        SCALE_ROWS.to_vec()
    } else {
        a.rows.iter().map(String::as_str).collect()
    };
    for &n in &a.scale {
        let (in_proc, res) = measure_at(
            exe,
            (n / threads).max(1),
            threads,
            runs,
            true,
            false,
            Some(&only),
        )?;
        sizes.push((n, in_proc, res));
    }
    let mut out = std::io::stdout().lock();
    let label = |r: &RowResult| format!("{} {}", r.row.key, r.row.label);
    if a.format == Format::Json {
        write!(out, "{{\"threads\":{threads},\"sizes\":[")?;
        for (i, (n, in_proc, res)) in sizes.iter().enumerate() {
            let doc = report::json(res, *in_proc);
            write!(
                out,
                "{}{{\"tasks\":{n},\"result\":{}}}",
                if i > 0 { "," } else { "" },
                doc.trim_end()
            )?;
        }
        writeln!(out, "]}}")?;
    } else {
        writeln!(
            out,
            "Median wall time (s), {runs} run(s) per point, {threads} thread(s) per process.\n"
        )?;
        write!(out, "| row |")?;
        for (n, ..) in &sizes {
            write!(out, " {n} tasks |")?;
        }
        writeln!(out, "\n|---|{}", "---|".repeat(sizes.len()))?;
        if let Some((_, _, first)) = sizes.first() {
            for (i, r) in first.iter().enumerate() {
                write!(out, "| {} |", label(r))?;
                for (_, _, res) in &sizes {
                    match report::stats(&res[i]) {
                        Some(st) => write!(out, " {:.4} |", st.wall)?,
                        None => write!(out, " {} |", res[i].error.as_deref().unwrap_or("-"))?,
                    }
                }
                writeln!(out)?;
            }
        }
    }
    if let Some(path) = &a.svg {
        let series: Vec<svg::Series> = sizes
            .first()
            .map(|(_, _, first)| {
                (0..first.len())
                    .map(|i| svg::Series {
                        label: label(&first[i]),
                        points: sizes
                            .iter()
                            .filter_map(|(n, _, res)| {
                                Some((*n as f64, report::stats(&res[i])?.wall))
                            })
                            .collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let title =
            format!("taskdiag vs /proc: wall time by task count ({threads} thread(s)/process)");
        std::fs::write(path, svg::chart(&title, &series))
            .with_context(|| format!("{}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the benchmark.
pub fn bench(a: BenchArgs) -> anyhow::Result<ExitCode> {
    let (tasks, runs, perf) = if a.quick {
        (300, 1, false)
    } else {
        (a.tasks, a.runs.max(1), true)
    };
    let exe = std::env::current_exe().context("finding this executable")?;
    let exe = exe.display().to_string();
    install_signals();
    if !a.scale.is_empty() {
        return scaling(&a, &exe);
    }
    let only: Vec<&str> = a.rows.iter().map(String::as_str).collect();
    let only = (!only.is_empty()).then_some(only.as_slice());
    let (in_proc, results) = measure_at(&exe, tasks, a.threads, runs, !a.quick, perf, only)?;
    let mut out = std::io::stdout().lock();
    match a.format {
        Format::Json => out.write_all(report::json(&results, in_proc).as_bytes())?,
        Format::Md => {
            writeln!(
                out,
                "{} processes in /proc ({tasks} spawned x {} threads); {runs} run(s) per row{}; \
                 kernel {}; {} CPUs.\n",
                in_proc,
                a.threads.max(1),
                if a.quick {
                    ""
                } else {
                    ", interleaved, after a warm-up round"
                },
                std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim(),
                std::thread::available_parallelism().map_or(0, |n| n.get()),
            )?;
            out.write_all(report::markdown(&results).as_bytes())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
