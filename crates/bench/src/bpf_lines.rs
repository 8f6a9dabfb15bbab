//! The `bpf-lines` mode: where a loaded BPF program spends its time, per source line.
//!
//! perf cannot annotate a JIT-compiled BPF program without libopcodes, which Debian's perf
//! lacks; but the kernel keeps, for each line-info record of a program, the address its jited
//! code starts at (`jited_line_info`). So the samples of `perf script -F ip,sym` that fall in
//! the program are charged to the line whose jited code starts at or below them. Cache misses
//! show as the line after the load that missed (skid), which is still enough to see which
//! structure a walk waits for.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};

/// Arguments of the `bpf-lines` mode.
#[derive(clap::Args)]
pub struct BpfLinesArgs {
    /// The program: a pinned path (e.g. /sys/fs/bpf/taskdiag/KEY/0/dump_task).
    #[arg(long)]
    pinned: PathBuf,
    /// Its C source, to print each line's text.
    #[arg(long)]
    source: Option<PathBuf>,
    /// Lines to print.
    #[arg(long, default_value_t = 30)]
    top: usize,
}

/// Reads `perf script -F ip,sym` from standard input and prints the program's hottest lines,
/// as shares of all samples.
pub fn run(a: &BpfLinesArgs) -> anyhow::Result<()> {
    let id = prog_id(&a.pinned)?;
    let opts = ProgInfoQueryOptions::default().include_all();
    let info = ProgInfoIter::with_query_opts(opts)
        .find(|p| p.id == id)
        .with_context(|| format!("program {id} ({}) not found", a.pinned.display()))?;
    // (jited address, source line), sorted by address.
    let mut starts: Vec<(u64, u32)> = info
        .jited_line_info
        .iter()
        .zip(&info.line_info)
        .map(|(addr, li)| (*addr as u64, li.line_num))
        .collect();
    starts.sort_unstable();
    let end: u64 = info
        .jited_ksyms
        .iter()
        .zip(&info.jited_func_lens)
        .map(|(k, len)| *k as u64 + u64::from(*len))
        .max()
        .unwrap_or(0);
    let lowest = starts.first().map_or(0, |s| s.0);
    let (mut all, mut mine) = (0u64, 0u64);
    let mut per_line: HashMap<u32, u64> = HashMap::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("standard input")?;
        let Some(ip) = line
            .split_whitespace()
            .next()
            .and_then(|w| u64::from_str_radix(w, 16).ok())
        else {
            continue;
        };
        all += 1;
        if ip < lowest || ip >= end {
            continue;
        }
        let i = starts.partition_point(|s| s.0 <= ip);
        if i > 0 {
            mine += 1;
            *per_line.entry(starts[i - 1].1).or_default() += 1;
        }
    }
    let text: Vec<String> = match &a.source {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| p.display().to_string())?
            .lines()
            .map(str::to_owned)
            .collect(),
        None => Vec::new(),
    };
    let mut lines: Vec<(u32, u64)> = per_line.into_iter().collect();
    lines.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let pct = |n: u64| 100.0 * n as f64 / all.max(1) as f64;
    println!(
        "{all} samples, {mine} ({:.1}%) in program {id} ({})",
        pct(mine),
        info.name.to_string_lossy()
    );
    for (line, n) in lines.into_iter().take(a.top) {
        let src = text
            .get((line as usize).wrapping_sub(1))
            .map_or("", |s| s.trim());
        println!("{:5.1}% {line:5} {src}", pct(n));
    }
    Ok(())
}

/// The id of the program pinned at `path`.
fn prog_id(path: &Path) -> anyhow::Result<u32> {
    let fd = libbpf_rs::Program::fd_from_pinned_path(path)
        .with_context(|| format!("{}: not a pinned program", path.display()))?;
    let id = libbpf_rs::Program::id_from_fd(std::os::fd::AsFd::as_fd(&fd))
        .with_context(|| format!("{}: its id", path.display()))?;
    Ok(id)
}
