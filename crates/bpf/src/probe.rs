//! What this process and this kernel allow: facts the loader decides on, read once per load.
//!
//! Capabilities (`capget`), the number of possible CPUs (sysfs) and whether the task iterator
//! takes link parameters (an attach that may fail). Nothing here changes what the programs do;
//! `load` and `dump` decide from these facts. (No kernel version: what a kernel does is
//! learned from its data, see `btf_min::kernel_facts` and `rss`.)

use crate::load::TaskFilter;
use crate::{Features, TaskIter};

/// Whether a load failure is for lack of privilege (rather than, say, a verifier rejection,
/// which the kernel also reports as EACCES).
pub(crate) fn is_perm(e: &libbpf_rs::Error) -> bool {
    matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied) && !may_load_bpf()
}

/// Whether this process has CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON, in its effective set.
pub fn may_load_bpf() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two `Data` entries for _LINUX_CAPABILITY_VERSION_3 into `d`.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    if r != 0 {
        return false;
    }
    let eff = (d[1].effective as u64) << 32 | d[0].effective as u64;
    let has = |c: u32| eff & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// Number of possible CPUs (highest id + 1), from /sys/devices/system/cpu/possible; 1 if it
/// cannot be read.
pub(crate) fn possible_cpus() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| cpu_list_len(&s))
        .unwrap_or(1)
}

/// Highest CPU id + 1 of a sysfs CPU list ("0-3,8-11", "0").
fn cpu_list_len(list: &str) -> Option<u32> {
    list.trim()
        .split(',')
        .filter_map(|r| r.rsplit('-').next()?.parse::<u32>().ok())
        .max()
        .map(|m| m + 1)
}

/// Kernel features the environment asks to treat as missing: `TASKDIAG_BPF_DISABLE`, a comma
/// list of "cmdline", "task_params", "ringbuf". Lets tests run the paths of older kernels on
/// this one.
pub(crate) fn disable_from_env(features: &mut Features) {
    let Ok(off) = std::env::var("TASKDIAG_BPF_DISABLE") else {
        return;
    };
    apply_disable(&off, features);
}

/// Clears the features `list` (see [`disable_from_env`]) names; unknown names are ignored.
fn apply_disable(list: &str, features: &mut Features) {
    for f in list.split(',') {
        match f.trim() {
            "cmdline" => features.cmdline = false,
            "task_params" => features.task_params = false,
            "ringbuf" => features.ringbuf = false,
            _ => {}
        }
    }
}

impl TaskIter {
    /// Whether the kernel takes task iterator link parameters (6.1+): attaching with this
    /// thread's id succeeds.
    pub(crate) fn probe_task_params(&self) -> bool {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.attach(false, TaskFilter::Tid(tid)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_give_the_highest_id_plus_one() {
        assert_eq!(cpu_list_len("0-1\n"), Some(2));
        assert_eq!(cpu_list_len("0"), Some(1));
        assert_eq!(cpu_list_len("0-3,8-11"), Some(12));
        assert_eq!(cpu_list_len(""), None);
        assert!(possible_cpus() >= 1);
    }

    #[test]
    fn disabled_features_are_cleared_and_unknown_names_ignored() {
        let all = Features {
            cmdline: true,
            task_params: true,
            ringbuf: true,
            reduced_btf: true,
        };
        let mut f = all;
        apply_disable("cmdline, ringbuf,bogus", &mut f);
        assert_eq!(
            f,
            Features {
                cmdline: false,
                ringbuf: false,
                ..all
            }
        );
        let mut f = all;
        apply_disable("task_params", &mut f);
        assert!(!f.task_params && f.cmdline && f.ringbuf && f.reduced_btf);
    }
}
