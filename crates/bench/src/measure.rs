//! Running rows of commands, interleaved, and measuring each run from outside: wall time,
//! user and system CPU (`wait4`), peak RSS (GNU time's `%M`, which sees the command itself
//! rather than the forked parent it started as), and optionally system calls and kernel
//! allocations with `perf stat` tracepoints.

use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One command to measure.
#[derive(Debug, Clone)]
pub struct Row {
    /// Short key (also used to name its baseline).
    pub key: String,
    /// What the row is.
    pub label: String,
    /// The command; `None` when the tool is not installed.
    pub argv: Option<Vec<String>>,
    /// Key of the row this one is compared with.
    pub baseline: Option<String>,
    /// Keys of further rows it is compared with (a ratio to each, after the baseline's).
    pub also: Vec<String>,
}

/// One run of a row.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Wall time, s.
    pub wall: f64,
    /// User CPU, s.
    pub user: f64,
    /// System CPU, s.
    pub sys: f64,
    /// Peak RSS, MiB, when GNU time is available.
    pub rss_mib: Option<f64>,
}

/// perf tracepoint counts of one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// `raw_syscalls:sys_enter`.
    pub syscalls: u64,
    /// `kmem:kmalloc`.
    pub kmalloc: u64,
    /// `kmem:kmem_cache_alloc`.
    pub kmem_cache_alloc: u64,
}

/// Everything measured for a row.
#[derive(Debug, Clone)]
pub struct RowResult {
    /// The row.
    pub row: Row,
    /// Its runs (warm-up excluded).
    pub samples: Vec<Sample>,
    /// perf counts, if perf ran.
    pub counts: Option<Counts>,
    /// Why the row has no samples, if it has none.
    pub error: Option<String>,
}

const GNU_TIME: &str = "/usr/bin/time";

fn run_once(argv: &[String], rss_file: &Path) -> io::Result<Sample> {
    let gnu_time = Path::new(GNU_TIME).exists();
    let mut cmd = if gnu_time {
        let mut c = Command::new(GNU_TIME);
        c.args(["-f", "%M", "-o"]).arg(rss_file).args(argv);
        c
    } else {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let t0 = Instant::now();
    let child = cmd.spawn()?;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let wall = t0.elapsed().as_secs_f64();
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(io::Error::other(format!(
            "`{}` exited with status {status:#x}",
            argv.join(" ")
        )));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let rss_mib = if gnu_time {
        std::fs::read_to_string(rss_file)
            .ok()
            .and_then(|s| s.split_whitespace().last()?.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    } else {
        None
    };
    Ok(Sample {
        wall,
        user: tv(ru.ru_utime),
        sys: tv(ru.ru_stime),
        rss_mib,
    })
}

/// Counts of one run under `perf stat`, or `None` if perf is missing or refuses.
pub fn perf_counts(argv: &[String]) -> Option<Counts> {
    let out = Command::new("perf")
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            "raw_syscalls:sys_enter,kmem:kmalloc,kmem:kmem_cache_alloc",
        ])
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .ok()?;
    let mut c = Counts::default();
    let mut seen = false;
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(v), Some(ev)) = (f.first().and_then(|v| v.trim().parse().ok()), f.get(2)) else {
            continue;
        };
        seen = true;
        match *ev {
            "raw_syscalls:sys_enter" => c.syscalls = v,
            "kmem:kmalloc" => c.kmalloc = v,
            "kmem:kmem_cache_alloc" => c.kmem_cache_alloc = v,
            _ => {}
        }
    }
    seen.then_some(c)
}

/// Runs every installed row `runs` times, round-robin so that drift hits all rows alike,
/// after one discarded warm-up round (`warmup`). Stops early when `stop` is set.
pub fn run_rows(
    rows: Vec<Row>,
    runs: usize,
    warmup: bool,
    perf: bool,
    stop: &AtomicBool,
) -> Vec<RowResult> {
    let rss_file = std::env::temp_dir().join(format!("taskdiag-bench-rss-{}", std::process::id()));
    let mut res: Vec<RowResult> = rows
        .into_iter()
        .map(|row| RowResult {
            error: row.argv.is_none().then(|| "not installed".to_string()),
            row,
            samples: Vec::new(),
            counts: None,
        })
        .collect();
    for round in 0..runs + usize::from(warmup) {
        for r in res.iter_mut().filter(|r| r.error.is_none()) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Some(argv) = &r.row.argv else { continue };
            match run_once(argv, &rss_file) {
                Ok(s) if !(warmup && round == 0) => r.samples.push(s),
                Ok(_) => {}
                Err(e) => r.error = Some(e.to_string()),
            }
        }
    }
    if perf {
        for r in res.iter_mut().filter(|r| r.error.is_none()) {
            if let Some(argv) = &r.row.argv {
                r.counts = perf_counts(argv);
            }
        }
    }
    let _ = std::fs::remove_file(&rss_file);
    res
}
