//! Machine-wide numbers for top's summary area: the clock, uptime and logged-in users, the
//! load averages (/proc/loadavg), CPU time per state (/proc/stat, turned into percentages of
//! the interval between two readings) and memory (/proc/meminfo).
//!
//! One small file each, read once per refresh; nothing here is per task. The files' text is
//! parsed by `taskdiag_procfs::system`; what procps derives from it is here. How the numbers
//! are laid out on screen is [`super::format`]'s job.

use taskdiag_procfs::system::{self, Meminfo};

pub use taskdiag_procfs::system::CpuTicks;

/// The `cpu` lines of /proc/stat: the total first, then one per online CPU (none if the file
/// cannot be read).
pub fn read_cpu() -> Vec<CpuTicks> {
    let text = std::fs::read("/proc/stat").unwrap_or_default();
    system::cpu_times(&text).unwrap_or_default()
}

/// Percentages of one CPU line over an interval: us sy ni id wa hi si st.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuPct {
    /// CPU number, `None` for the all-CPU line.
    pub id: Option<u32>,
    /// user, system, nice, idle, iowait, irq, softirq, steal (top's order).
    pub pct: [f32; 8],
}

/// The percentages between two readings, line by line (lines matched by CPU number).
pub fn cpu_pct(prev: &[CpuTicks], cur: &[CpuTicks]) -> Vec<CpuPct> {
    cur.iter()
        .map(|c| {
            let p = prev
                .iter()
                .find(|p| p.id == c.id)
                .copied()
                .unwrap_or_default();
            let d: Vec<i64> = (0..8)
                .map(|i| c.t[i].saturating_sub(p.t[i]) as i64)
                .collect();
            let mut tot: i64 = d.iter().sum();
            let mut idle = d[3];
            if tot < 1 {
                idle = 1;
                tot = 1;
            }
            let scale = 100.0f32 / tot as f32;
            let f = |x: i64| x as f32 * scale;
            CpuPct {
                id: c.id,
                // /proc/stat: user nice system idle iowait irq softirq steal.
                pct: [
                    f(d[0]),
                    f(d[2]),
                    f(d[1]),
                    f(idle),
                    f(d[4]),
                    f(d[5]),
                    f(d[6]),
                    f(d[7]),
                ],
            }
        })
        .collect()
}

/// Memory figures, KiB, as procps-ng 4.0.2 derives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mem {
    /// MemTotal.
    pub total: u64,
    /// MemFree.
    pub free: u64,
    /// MemTotal - MemAvailable.
    pub used: u64,
    /// Buffers + Cached + SReclaimable.
    pub buff_cache: u64,
    /// MemAvailable.
    pub avail: u64,
    /// SwapTotal.
    pub swap_total: u64,
    /// SwapFree.
    pub swap_free: u64,
    /// SwapTotal - SwapFree.
    pub swap_used: u64,
}

/// Reads /proc/meminfo (all 0 if it cannot be read).
pub fn read_mem() -> Mem {
    let text = std::fs::read("/proc/meminfo").unwrap_or_default();
    Mem::from(system::parse_meminfo(&text))
}

impl From<Meminfo> for Mem {
    /// procps' derivations from the /proc/meminfo lines (a missing line counts as 0).
    fn from(m: Meminfo) -> Mem {
        let total = m.mem_total.unwrap_or(0);
        let free = m.mem_free.unwrap_or(0);
        let cached = m.cached.unwrap_or(0) + m.s_reclaimable.unwrap_or(0);
        // Inside some containers MemAvailable exceeds MemTotal; procps then uses MemFree.
        let avail = m.mem_available.filter(|&a| a <= total).unwrap_or(free);
        let swap_total = m.swap_total.unwrap_or(0);
        let swap_free = m.swap_free.unwrap_or(0);
        Mem {
            total,
            free,
            used: total.saturating_sub(avail),
            buff_cache: m.buffers.unwrap_or(0) + cached,
            avail,
            swap_total,
            swap_free,
            swap_used: swap_total.saturating_sub(swap_free),
        }
    }
}

/// The three load averages of /proc/loadavg (0 if it cannot be read).
pub fn read_loadavg() -> [f64; 3] {
    let text = std::fs::read("/proc/loadavg").unwrap_or_default();
    system::parse_loadavg(&text).unwrap_or_default()
}

/// Users logged in: utmp entries of type USER_PROCESS with a name, as procps counts them
/// when systemd-logind is not running.
pub fn count_users() -> u32 {
    let mut n = 0;
    // SAFETY: the utmpx functions have no preconditions; the returned pointer is valid until
    // the next call, and we only read from it before that.
    unsafe {
        libc::setutxent();
        loop {
            let ent = libc::getutxent();
            if ent.is_null() {
                break;
            }
            if (*ent).ut_type == libc::USER_PROCESS && (*ent).ut_user[0] != 0 {
                n += 1;
            }
        }
        libc::endutxent();
    }
    n
}

/// Local wall-clock time as (hour, minute, second).
pub fn local_hms() -> (i32, i32, i32) {
    // SAFETY: time(NULL) has no preconditions.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    // SAFETY: an all-zero tm is a valid out-parameter.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    let ok = unsafe { !libc::localtime_r(&now, &mut tm).is_null() };
    if ok {
        (tm.tm_hour, tm.tm_min, tm.tm_sec)
    } else {
        (0, 0, 0)
    }
}

/// Nanoseconds since boot on CLOCK_BOOTTIME, the clock task start times count on.
pub fn boottime_ns() -> u64 {
    // SAFETY: an all-zero timespec is a valid out-parameter.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is valid and writable.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The PID column's width: the length of pid_max when that is 6 to 10, else 5 (as procps
/// top widens its pid columns).
pub fn pid_width() -> usize {
    crate::snapshot::pid_length()
        .filter(|&n| n > 5 && n <= 10)
        .unwrap_or(5)
}

/// The signal a `k` command's answer names, as procps top reads it
/// ([`crate::signal::signal_number`]); `None` when it names none.
pub fn parse_signal(s: &str) -> Option<i32> {
    let n = crate::signal::signal_number(s.trim().as_bytes());
    (n >= 0).then_some(n)
}

pub use crate::strerror;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lines_parse_and_give_percentages() {
        let a = system::cpu_times(
            b"cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0\nintr 1\n",
        )
        .unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[0].id, None);
        assert_eq!(a[2].id, Some(1));
        let b = system::cpu_times(
            b"cpu  60 0 10 130 0 0 0 0 0 0\ncpu0 55 0 5 40 0 0 0 0\ncpu1 5 0 5 90 0 0 0 0\n",
        )
        .unwrap();
        let p = cpu_pct(&a, &b);
        assert_eq!(p[0].pct[0], 50.0);
        assert_eq!(p[0].pct[3], 50.0);
        assert_eq!(p[1].pct[0], 100.0);
        assert_eq!(p[2].pct[3], 100.0);
        // No time passed: all idle, as procps shows it.
        let p = cpu_pct(&b, &b);
        assert_eq!(p[0].pct[3], 100.0);
    }

    #[test]
    fn meminfo_derivations() {
        let m = Mem::from(system::parse_meminfo(
            b"MemTotal: 1000 kB\nMemFree: 300 kB\nMemAvailable: 600 kB\nBuffers: 10 kB\n\
              Cached: 100 kB\nSwapCached: 7 kB\nSReclaimable: 50 kB\nSwapTotal: 64 kB\n\
              SwapFree: 60 kB\n",
        ));
        assert_eq!(
            (m.total, m.free, m.used, m.buff_cache, m.avail),
            (1000, 300, 400, 160, 600)
        );
        assert_eq!((m.swap_total, m.swap_free, m.swap_used), (64, 60, 4));
        // MemAvailable above MemTotal (some containers), or missing: MemFree instead.
        let m = Mem::from(system::parse_meminfo(
            b"MemTotal: 1000 kB\nMemFree: 300 kB\nMemAvailable: 2000 kB\n",
        ));
        assert_eq!((m.avail, m.used), (300, 700));
        let m = Mem::from(system::parse_meminfo(
            b"MemTotal: 1000 kB\nMemFree: 300 kB\n",
        ));
        assert_eq!((m.avail, m.used, m.buff_cache), (300, 700, 0));
        assert_eq!(Mem::from(Meminfo::default()), Mem::default());
    }

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("9"), Some(9));
        assert_eq!(parse_signal("kill"), Some(libc::SIGKILL));
        assert_eq!(parse_signal(" SIGterm "), Some(libc::SIGTERM));
        assert_eq!(parse_signal("RTMIN+1"), Some(libc::SIGRTMIN() + 1));
        assert_eq!(parse_signal("iot"), Some(libc::SIGABRT));
        // As procps top: 0 (EXIT, NULL) sends nothing, and names it does not know are refused.
        assert_eq!(parse_signal("EXIT"), Some(0));
        assert_eq!(parse_signal("RTMAX"), None);
        assert_eq!(parse_signal("bogus"), None);
        assert_eq!(parse_signal("-3"), None);
    }
}
