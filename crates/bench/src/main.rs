//! `taskdiag-bench`: taskdiag's benchmark harness, built and run apart from what taskdiag ships
//! (`make bench` runs the task_diag article's table; docs/BENCHMARKS.md has every command).
//!
//! It spawns the sleeping processes ([`spawn`]), then measures, interleaved, the procfs floor
//! (the `loop` mode, a raw-syscall loop, [`baseline`]; and the article's C loop), the bare BPF
//! iterator read, taskdiag with each backend for the article's requests, the daemon as an
//! unprivileged user, and the tools people use when they are installed ([`rows`]). Every row is a
//! command line run as its own process and measured from outside the same way ([`measure`]),
//! reported as Markdown or JSON ([`report`]) and, for the scaling curves, as an SVG chart
//! ([`svg`]). The C floors and the bench's BPF programs are built by build.rs; taskdiag itself
//! is only ever run, never linked, except for the daemon client of the `clients` mode.

mod baseline;
mod bpf_lines;
mod daemon;
mod measure;
mod report;
mod rows;
mod spawn;
mod svg;
mod vma_floor;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::{Parser, Subcommand};

use measure::{run_rows, Row, RowResult};
use rows::Programs;

/// Reproduce the task_diag article's measurements on this machine (needs root).
///
/// Spawns --tasks sleeping processes, then times, interleaved, loops over /proc files (in Rust
/// and in C), a bare BPF iterator, taskdiag with each backend, taskdiagd as an unprivileged
/// user, and procps/psmisc/psutil when installed; reports wall, CPU, peak RSS, system calls
/// and kernel allocations (with perf), and ratios to the baselines. The spawned processes are
/// killed on exit, Ctrl-C or failure.
#[derive(Parser)]
#[command(
    name = "taskdiag-bench",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    bench: BenchArgs,
}

/// Commands the rows run (also useful alone, e.g. under perf).
#[derive(Subcommand)]
enum Mode {
    /// The procfs floor (P rows): open, one read, close per /proc file of every process.
    Loop(LoopArgs),
    /// The raw memory-map iterator read with an empty program (row B7).
    VmaFloor,
    /// Concurrent taskdiagd clients (rows S10, S100).
    Clients(daemon::ClientsArgs),
    /// Spawns sleeping processes, prints "ready" and keeps them until standard input ends or
    /// SIGTERM/SIGINT, then kills them (for measurements made outside this binary, e.g.
    /// scripts/top-cpu.sh).
    Hold(HoldArgs),
    /// Where a loaded BPF program spends its time per source line: reads `perf script -F
    /// ip,sym` on standard input (e.g. of `perf record -F 20000 taskdiag dump --all --repeat
    /// 40`) and charges each sample in the program to its line through the jited line info.
    BpfLines(bpf_lines::BpfLinesArgs),
}

/// Arguments of the `hold` mode.
#[derive(clap::Args)]
struct HoldArgs {
    /// Processes to spawn.
    #[arg(long)]
    tasks: usize,
    /// Threads per process.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// Arguments of a benchmark run.
#[derive(clap::Args)]
struct BenchArgs {
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
    svg: Option<PathBuf>,
    /// Measure only these rows (comma-separated keys such as T1,D1, or key prefixes ending in
    /// `*` such as 'Gns.*', every row of the NS group, or 'G*', every new group's; include
    /// the rows named in the ratio column to get ratios).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    rows: Vec<String>,
    /// Where the taskdiag and taskdiagd binaries to measure are [default: this binary's
    /// directory].
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Md,
    Json,
}

/// Arguments of the `loop` mode.
#[derive(clap::Args)]
struct LoopArgs {
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

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

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

/// Whether the `--rows` entry `pattern` names the row `key`: the key itself, or a prefix of it
/// followed by `*`.
fn selects(pattern: &str, key: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => pattern == key,
    }
}

/// Spawns `procs` processes of `threads` threads, measures the rows (`only`, or all) on them,
/// and returns the processes seen in /proc with the results.
fn measure_at(
    p: &Programs,
    procs: usize,
    threads: usize,
    runs: usize,
    warmup: bool,
    perf: bool,
    only: Option<&[&str]>,
) -> anyhow::Result<(usize, Vec<RowResult>)> {
    let selected = |r: &Row| only.is_none_or(|o| o.iter().any(|k| selects(k, &r.key)));
    // The new groups' rows only when named (--rows), and per process: at 50,000 tasks their
    // readlink loops would add minutes to every full table.
    let group_rows = match only {
        Some(_) if threads <= 1 => rows::new_group_rows(p),
        _ => Vec::new(),
    };
    let mut rows: Vec<Row> = rows::rows(p, threads > 1)
        .into_iter()
        .chain(group_rows)
        .filter(selected)
        .collect();
    let wants_daemon = only.is_none_or(|o| o.iter().any(|k| k.starts_with(['S', 'U', 'H'])));
    let runs_taskdiag = rows
        .iter()
        .any(|r| r.argv.as_ref().is_some_and(|a| a.contains(&p.taskdiag)));
    anyhow::ensure!(
        !(wants_daemon || runs_taskdiag) || Path::new(&p.taskdiag).is_file(),
        "{} not found (build the workspace first, or give --bin-dir)",
        p.taskdiag
    );
    let spawned = spawn::Spawned::new(procs, threads)
        .with_context(|| format!("spawning {procs} processes (needs root to raise pid_max)"))?;
    let in_proc = tasks_in_proc();
    let daemon = if wants_daemon {
        Some(daemon::BenchDaemon::start(&p.taskdiagd())?)
    } else {
        None
    };
    if let Some(d) = &daemon {
        let socket = d.socket().display().to_string();
        rows.extend(
            rows::daemon_rows(p, threads > 1, &socket)
                .into_iter()
                // The everyday-host rows only when named (--rows): at 50,000 tasks they
                // would add minutes of procps and psmisc runs to every full table.
                .chain(
                    only.map(|_| rows::host_rows(p, &socket))
                        .unwrap_or_default(),
                )
                .filter(selected),
        );
    }
    let perf = perf && rows::which("perf").is_some();
    let results = run_rows(rows, runs, warmup, perf, &STOP);
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

/// The `hold` mode: the processes live until standard input ends or a signal asks to stop.
fn hold(a: &HoldArgs) -> anyhow::Result<()> {
    install_signals();
    let spawned = spawn::Spawned::new(a.tasks, a.threads).with_context(|| {
        format!(
            "spawning {} processes (needs root to raise pid_max)",
            a.tasks
        )
    })?;
    println!("ready");
    std::io::stdout().flush().context("standard output")?;
    // A thread waits for the end of standard input; the main thread for either.
    let eof = std::sync::Arc::new(AtomicBool::new(false));
    let e = eof.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        e.store(true, Ordering::Relaxed);
    });
    while !STOP.load(Ordering::Relaxed) && !eof.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(spawned);
    Ok(())
}

/// The scaling curves: the rows measured at each `--scale` size.
fn scaling(a: &BenchArgs, p: &Programs) -> anyhow::Result<()> {
    let threads = a.threads.max(1);
    let runs = a.runs.max(1);
    let only: Vec<&str> = if a.rows.is_empty() {
        rows::SCALE_ROWS.to_vec()
    } else {
        a.rows.iter().map(String::as_str).collect()
    };
    let mut sizes = Vec::new();
    for &tasks in &a.scale {
        let procs = (tasks / threads).max(1);
        let (in_proc, rows) = measure_at(p, procs, threads, runs, true, false, Some(&only))?;
        sizes.push(report::Size {
            tasks,
            in_proc,
            rows,
        });
    }
    let out = match a.format {
        Format::Json => report::scale_json(&sizes, threads),
        Format::Md => report::scale_markdown(&sizes, runs, threads),
    };
    std::io::stdout().lock().write_all(out.as_bytes())?;
    if let Some(path) = &a.svg {
        let title =
            format!("taskdiag vs /proc: wall time by task count ({threads} thread(s)/process)");
        std::fs::write(path, svg::chart(&title, &report::scale_series(&sizes)))
            .with_context(|| format!("{}", path.display()))?;
    }
    Ok(())
}

/// Runs the benchmark: one table, or the scaling curves with --scale.
fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let (tasks, runs, perf) = if a.quick {
        (300, 1, false)
    } else {
        (a.tasks, a.runs.max(1), true)
    };
    let me = std::env::current_exe().context("finding this executable")?;
    let bin_dir = match &a.bin_dir {
        Some(d) => d.clone(),
        None => me.parent().context("this executable's directory")?.into(),
    };
    let p = Programs {
        bench: me.display().to_string(),
        taskdiag: bin_dir.join("taskdiag").display().to_string(),
    };
    install_signals();
    if !a.scale.is_empty() {
        return scaling(&a, &p);
    }
    let only: Vec<&str> = a.rows.iter().map(String::as_str).collect();
    let only = (!only.is_empty()).then_some(only.as_slice());
    let (in_proc, results) = measure_at(&p, tasks, a.threads, runs, !a.quick, perf, only)?;
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
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.mode {
        None => bench(cli.bench),
        Some(Mode::Loop(a)) => {
            let files: Vec<&str> = a.files.iter().map(String::as_str).collect();
            let c = baseline::proc_loop(&files, a.noread, a.threads).context("/proc")?;
            eprintln!("tasks: {} (vanished: {})", c.tasks, c.vanished);
            Ok(())
        }
        Some(Mode::VmaFloor) => {
            eprintln!("mappings: {}", vma_floor::walk()?);
            Ok(())
        }
        Some(Mode::Clients(a)) => daemon::clients(a),
        Some(Mode::Hold(a)) => hold(&a),
        Some(Mode::BpfLines(a)) => bpf_lines::run(&a),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("taskdiag-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::selects;

    #[test]
    fn rows_are_selected_by_key_or_by_prefix() {
        assert!(selects("B1", "B1"));
        assert!(!selects("B1", "B1u"));
        assert!(selects("B1*", "B1u"));
        assert!(selects("Gns.*", "Gns.Cl"));
        assert!(!selects("Gns.*", "Gsignal.C"));
        assert!(selects("G*", "Gsignal.C"));
    }
}
