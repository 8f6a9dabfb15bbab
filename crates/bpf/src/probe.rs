//! What this process and this kernel allow: facts the loader decides on, read once per load.
//!
//! Capabilities (`capget`), the kernel's BTF, the number of possible CPUs (sysfs) and whether
//! the task iterator takes link parameters (a walk for one task). Nothing here changes what the
//! programs do; `load` and `dump` decide from these facts. (No kernel version: what a kernel does
//! is learned from its data, see `btf_min::kernel_facts` and `rss`.)

use std::io;

use taskdiag_proto::Strategy;

use crate::load::{Prog, TaskFilter};
use crate::{Features, TaskIter};

/// The kernel's BTF, as sysfs shows it.
pub(crate) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Whether the kernel shows its BTF (CONFIG_DEBUG_INFO_BTF): a non-empty
/// `/sys/kernel/btf/vmlinux` (sysfs gives its real size).
pub fn kernel_btf_present() -> bool {
    std::fs::metadata(VMLINUX_BTF).is_ok_and(|m| m.len() > 0)
}

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

/// The kernel's nr_node_ids: highest possible memory node + 1 (1 without NUMA, where the
/// file is missing).
pub(crate) fn possible_nodes() -> u32 {
    std::fs::read_to_string("/sys/devices/system/node/possible")
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
/// list of "cmdline", "maps", "task_params", "ringbuf", "both" (ALL_WITH_THREADS in two walks),
/// "loop" (the task program's bounded flavour) and "d_path" (the map walk that names files with
/// probe reads; these two chosen at load, see [`env_disables`]). Lets tests run
/// the paths of other kernels on this one.
pub(crate) fn disable_from_env(features: &mut Features) {
    let Ok(off) = std::env::var("TASKDIAG_BPF_DISABLE") else {
        return;
    };
    apply_disable(&off, features);
}

/// Whether `TASKDIAG_BPF_DISABLE` names `feature`: "loop" loads the bounded flavour of the task
/// program, as on a kernel without bpf_loop(); "d_path" loads `dump_vma_walk`, as on a kernel
/// whose verifier refuses `dump_vma`'s bpf_d_path() of a mapping's file.
pub(crate) fn env_disables(feature: &str) -> bool {
    std::env::var("TASKDIAG_BPF_DISABLE").is_ok_and(|l| names(&l).any(|f| f == feature))
}

fn names(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim)
}

/// Clears the features `list` (see [`disable_from_env`]) names; unknown names are ignored.
fn apply_disable(list: &str, features: &mut Features) {
    for f in names(list) {
        match f {
            "cmdline" => features.cmdline = false,
            "maps" => (features.maps, features.vma_walk) = (false, false),
            "task_params" => features.task_params = false,
            "ringbuf" => features.ringbuf = false,
            "both" => features.both = false,
            _ => {}
        }
    }
}

impl TaskIter {
    /// Whether the kernel takes task iterator link parameters (6.1+): a walk linked to this
    /// thread's id shows this thread alone. Attaching alone does not tell: older kernels accept
    /// the parameter and ignore it (it lands in the map iterator's field), so a walk is read,
    /// ids only, and stopped at the first task that is not this thread.
    pub(crate) fn probe_task_params(&mut self) -> bool {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let Ok(link) = self.attach_prog(Prog::Task, TaskFilter::Tid(tid)) else {
            return false;
        };
        self.configure_seq(Strategy::AllThread, 0);
        let mut seen = 0u32;
        let r = self.run_link(&link, &mut |chunk| {
            for m in taskdiag_proto::msg::Messages::new(chunk) {
                let pid = m.ok().map(|m| m.header.pid);
                seen += 1;
                if pid != Some(tid) || seen > 1 {
                    return Err(io::Error::other("the walk is not filtered"));
                }
            }
            Ok(())
        });
        r.is_ok() && seen == 1
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
            task: crate::TaskFlavour::Loop,
            maps: true,
            vma_walk: false,
            cmdline: true,
            task_params: true,
            ringbuf: true,
            reduced_btf: true,
            sched: true,
            both: true,
        };
        let mut f = all;
        apply_disable("cmdline, ringbuf,bogus,both", &mut f);
        assert_eq!(
            f,
            Features {
                cmdline: false,
                ringbuf: false,
                both: false,
                ..all
            }
        );
        let mut f = all;
        apply_disable("task_params", &mut f);
        assert!(!f.task_params && f.cmdline && f.ringbuf && f.reduced_btf);
        let mut f = all;
        apply_disable("maps,loop", &mut f);
        assert_eq!(f, Features { maps: false, ..all });
    }
}
