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
    let opts = ProgInfoQueryOptions::default()
        .include_line_info(true)
        .include_jited_line_info(true)
        .include_jited_ksyms(true)
        .include_jited_func_lens(true);
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
    let mut ips = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("standard input")?;
        ips.extend(
            line.split_whitespace()
                .next()
                .and_then(|w| u64::from_str_radix(w, 16).ok()),
        );
    }
    let all = ips.len() as u64;
    let per_line = charge(&starts, end, &ips);
    let mine: u64 = per_line.values().sum();
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

/// Samples per source line: each of `ips` within the program (from its lowest line start up to
/// `end`) charged to the line whose jited code starts at or below it. `starts`: (jited address,
/// line), sorted by address.
fn charge(starts: &[(u64, u32)], end: u64, ips: &[u64]) -> HashMap<u32, u64> {
    let lowest = starts.first().map_or(0, |s| s.0);
    let mut per_line = HashMap::new();
    for &ip in ips.iter().filter(|&&ip| ip >= lowest && ip < end) {
        let i = starts.partition_point(|s| s.0 <= ip);
        *per_line.entry(starts[i - 1].1).or_default() += 1;
    }
    per_line
}

/// The id of the program pinned at `path`.
fn prog_id(path: &Path) -> anyhow::Result<u32> {
    let fd = libbpf_rs::Program::fd_from_pinned_path(path)
        .with_context(|| format!("{}: not a pinned program", path.display()))?;
    let id = libbpf_rs::Program::id_from_fd(std::os::fd::AsFd::as_fd(&fd))
        .with_context(|| format!("{}: its id", path.display()))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_go_to_the_line_whose_code_starts_at_or_below_them() {
        let starts = [(0x100, 10), (0x110, 12), (0x130, 10), (0x140, 20)];
        // Outside the program (below it, at or past its end) counts for no line.
        let ips = [
            0xff, 0x100, 0x10f, 0x110, 0x12f, 0x130, 0x145, 0x150, 0x1000,
        ];
        let got = charge(&starts, 0x150, &ips);
        let want = HashMap::from([(10, 3), (12, 2), (20, 1)]);
        assert_eq!(got, want);
        assert!(charge(&[], 0, &ips).is_empty());
    }
}
