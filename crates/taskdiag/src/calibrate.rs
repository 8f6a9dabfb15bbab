//! Kernel rules the BPF programs cannot read from the kernel's types, learned once per process
//! (by the first loaded instance that can tell) by comparing what they see with our own /proc
//! (never from a version number: distributions backport).
//!
//! Today one rule: whether /proc sums the per-CPU rss counters or shows their approximate
//! totals (see `taskdiag_bpf::RssSample`). A quiet process whose two values differ shows which
//! one /proc uses; a process whose two values are equal, or that changed while it was compared,
//! shows nothing, and the next candidate is tried. Without an answer the programs keep their
//! default (the sums, current kernels' rule).

use std::path::Path;
use std::sync::OnceLock;

use taskdiag_bpf::{RssSample, TaskIter};
use taskdiag_procfs::parse::{parse_status, Vm};

/// The rss rule once a process has told it: a fact of the kernel, the same for every later
/// instance of this process (taskdiagd loads one per worker).
static RSS_SUMS: OnceLock<bool> = OnceLock::new();

/// Sets the BPF programs' rss rule from the first candidate process that tells it: the pid
/// namespace's init, our parent (usually a shell waiting for us), ourselves. `same_numbers`:
/// `proc_root` numbers processes as the programs do (else it is of a pid namespace above ours,
/// where only ourselves, `self`, can be named).
pub(crate) fn rss_rule(it: &mut TaskIter, proc_root: &Path, same_numbers: bool) {
    if let Some(&sum) = RSS_SUMS.get() {
        it.set_rss_sum(sum);
        return;
    }
    // Programs shared with an earlier process that decided it.
    if let Some(sum) = it.rss_sum_known() {
        let _ = RSS_SUMS.set(sum);
        return;
    }
    // SAFETY: getppid and getpid have no preconditions.
    let (ppid, pid) = unsafe { (libc::getppid() as u32, libc::getpid() as u32) };
    let mut groups = Vec::new();
    // Each as the programs number it and as /proc names it: ourselves as `self`, which any
    // /proc that shows us resolves; the others only where /proc numbers as the programs do.
    let cands = [
        (1, "1".to_owned()),
        (ppid, ppid.to_string()),
        (pid, "self".to_owned()),
    ];
    let cands = if same_numbers {
        &cands[..]
    } else {
        &cands[2..]
    };
    for &(cand, ref name) in cands {
        let Some(before) = it.rss_sample(cand) else {
            continue;
        };
        // A vanished or unreadable process tells nothing: the next one is tried.
        let Ok(buf) = std::fs::read(proc_root.join(name).join("status")) else {
            continue;
        };
        let Ok(st) = parse_status(&buf, &mut groups) else {
            continue;
        };
        let Some(after) = it.rss_sample(cand) else {
            continue;
        };
        let shown = [Vm::RssAnon, Vm::RssFile, Vm::RssShmem].map(|v| st.vm_kb[v as usize] * 1024);
        if let Some(sum) = proc_sums(&before, shown, &after) {
            let _ = RSS_SUMS.set(sum);
            it.set_rss_sum(sum);
            return;
        }
    }
}

/// Whether /proc, showing `shown` (RssAnon, RssFile, RssShmem, in bytes) between the BPF
/// samples `before` and `after`, sums the per-CPU counters (`Some(true)`) or shows the
/// approximate totals (`Some(false)`); `None` if this process cannot tell: its counters changed
/// between the samples, its two values are equal, or /proc matches neither.
fn proc_sums(before: &RssSample, shown: [u64; 3], after: &RssSample) -> Option<bool> {
    if before != after || before.approx == before.sum {
        return None;
    }
    if shown == before.sum {
        Some(true)
    } else if shown == before.approx {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Counters of pid 1 in the Debian 6.12.117 guest, and its /proc/1/status (bytes).
    const GUEST_612: RssSample = RssSample {
        approx: [0, 524_288, 0],
        sum: [114_688, 638_976, 0],
    };

    #[test]
    fn a_process_whose_counts_differ_tells_the_rule() {
        let s = GUEST_612;
        assert_eq!(proc_sums(&s, [114_688, 638_976, 0], &s), Some(true));
        assert_eq!(proc_sums(&s, [0, 524_288, 0], &s), Some(false));
    }

    #[test]
    fn equal_counts_a_change_or_a_mismatch_tell_nothing() {
        let s = GUEST_612;
        let equal = RssSample {
            approx: [40_960, 81_920, 0],
            sum: [40_960, 81_920, 0],
        };
        // /proc matches both ways: either rule would be a guess for other processes.
        assert_eq!(proc_sums(&equal, [40_960, 81_920, 0], &equal), None);
        // The process faulted a page in between: /proc's value belongs to neither sample.
        let later = RssSample {
            sum: [118_784, 638_976, 0],
            ..s
        };
        assert_eq!(proc_sums(&s, [114_688, 638_976, 0], &later), None);
        assert_eq!(proc_sums(&s, [118_784, 638_976, 0], &s), None);
    }
}
