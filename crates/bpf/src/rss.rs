//! Which resident-set count /proc shows, where the kernel keeps it in per-CPU counters (6.2+).
//!
//! Each counter has an approximate total and per-CPU deltas not yet folded into it. /proc shows
//! the total plus every delta since 6.16 (get_mm_counter_sum(), "mm: fix the inaccurate memory
//! statistics issue for users"), and so do stable kernels that took that change (Debian's
//! 6.12.38+); before, the approximate total. The difference is inline code: neither BTF nor the
//! version number shows it. So the caller compares: [`TaskIter::rss_sample`] reads one
//! process's counters both ways, the caller compares them with that process's /proc (this crate
//! does no /proc I/O) and sets the rule with [`TaskIter::set_rss_sum`]. Until then STATM carries
//! the sums, the rule of current kernels.

use taskdiag_proto::{Group, Request, Strategy};

use crate::TaskIter;

/// One process's rss counters read both ways, in bytes: `[anon, file, shmem]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RssSample {
    /// The counters' approximate totals.
    pub approx: [u64; 3],
    /// The totals with every CPU's pending delta added.
    pub sum: [u64; 3],
}

impl TaskIter {
    /// Reads the rss counters of process `pid` (in the reader's pid namespace) both ways.
    /// `None` when there is nothing to compare: counters that are not per-CPU (before 6.2, where
    /// both ways are the same), no address space, no such process, an instance not loaded for
    /// STATM, or a kernel without task iterator link parameters (a whole walk for one process
    /// would cost more than the comparison is worth there).
    pub fn rss_sample(&mut self, pid: u32) -> Option<RssSample> {
        // Whether the counters are per-CPU: as found in the kernel's BTF when the programs
        // were loaded (perhaps by another process: see `pin`).
        let percpu = self.progs.bss().is_some_and(|b| b.cfg_rss_percpu != 0);
        if !percpu || !self.features.task_params || self.groups & Group::Statm.flag() == 0 {
            return None;
        }
        let b = self.progs.bss_mut()?;
        b.cfg_rss_probe = 1;
        b.rss_probe = Default::default();
        let req = Request::new(Strategy::One, pid, Group::Statm.flag());
        let walked = self.dump(&req, &mut |_| Ok(()));
        let shift = self.progs.data()?.cfg_page_shift;
        let b = self.progs.bss_mut()?;
        b.cfg_rss_probe = 0;
        let p = &b.rss_probe;
        // Indexed by the kernel's MM_FILEPAGES, MM_ANONPAGES, MM_SWAPENTS, MM_SHMEMPAGES.
        let ours = |v: &[u64; 4]| [v[1], v[0], v[3]].map(|pages| pages << shift);
        (walked.is_ok() && p.seen != 0).then(|| RssSample {
            approx: ours(&p.approx),
            sum: ours(&p.sum),
        })
    }

    /// Makes STATM's rss fields the per-CPU sums (`true`, the default) or the approximate
    /// totals, as this kernel's /proc shows them (see the module documentation). The rule is
    /// then known to every process sharing these programs ([`TaskIter::rss_sum_known`]).
    pub fn set_rss_sum(&mut self, sum: bool) {
        if let Some(b) = self.progs.bss_mut() {
            b.cfg_rss_sum = u32::from(sum);
            b.cfg_rss_known = 1;
        }
    }

    /// The rule [`TaskIter::set_rss_sum`] set, if it was set for these programs (by this
    /// process, or by another one sharing them).
    pub fn rss_sum_known(&self) -> Option<bool> {
        let b = self.progs.bss()?;
        (b.cfg_rss_known != 0).then_some(b.cfg_rss_sum != 0)
    }
}
