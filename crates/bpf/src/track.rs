//! Which tasks may have changed since the last look: the change tracker (`src/bpf/track.bpf.c`),
//! for a refresh that re-reads only those tasks instead of walking every one (`taskdiag top`).
//!
//! A [`Tracker`] loads its three small programs privately (it is one per long-running reader,
//! so unlike the task programs it is not worth pinning), attaches them to the scheduler's
//! tracepoints for as long as it lives, and on [`Tracker::take`] drains the tasks marked since
//! the previous call. What it cannot see (a change to a task that does not run: renicing by
//! another process, memory reclaim, a zombie reaped) is the caller's to bound, with a periodic
//! full walk; [`Changes::complete`] is false when marks were lost.

use std::ffi::c_void;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU32, Ordering};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags};

use crate::load::quiet_libbpf;
use crate::probe::is_perm;
use crate::BpfError;

use crate::skel::track::{TrackSkel, TrackSkelBuilder};

/// How many distinct tasks can be marked between two looks; more set the overflow flag (the
/// caller then walks every task, which is cheaper by then anyway).
const CAPACITY: u32 = 65536;
/// Keys per batch system call when draining.
const BATCH: usize = 4096;

/// What changed since the previous [`Tracker::take`] (or since [`Tracker::start`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// (tid, tgid) in the reader's pid namespace of every task that ran, started or began to
    /// exit, and of those on a CPU now; sorted, without duplicates.
    pub tasks: Vec<(u32, u32)>,
    /// False when marks were lost (more tasks changed than the tracker holds): only a walk of
    /// every task is then complete.
    pub complete: bool,
}

/// The change tracker, attached for as long as it lives.
pub struct Tracker {
    skel: TrackSkel<'static>,
    _links: Vec<Link>,
    keys: Vec<u32>,
    values: Vec<u32>,
}

impl Tracker {
    /// Loads and attaches the tracker for the calling process's pid namespace. Needs the
    /// privilege to load BPF programs and a kernel with BTF-typed tracepoints (5.5+).
    pub fn start() -> Result<Tracker, BpfError> {
        quiet_libbpf();
        let ns = std::fs::metadata("/proc/self/ns/pid").map_err(|source| BpfError::Attach {
            what: "the change tracker: /proc/self/ns/pid".into(),
            source,
        })?;
        let load_err = |source: libbpf_rs::Error| {
            if is_perm(&source) {
                BpfError::PermissionDenied(source)
            } else {
                BpfError::Load {
                    program: Some("track_switch".into()),
                    source,
                }
            }
        };
        // The skeleton borrows its object for as long as it lives; a tracker lives as long as
        // the tool that started it, so the object is leaked on purpose (as load.rs does).
        let obj: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = TrackSkelBuilder::default().open(obj).map_err(load_err)?;
        open.maps
            .changed
            .set_max_entries(CAPACITY)
            .map_err(load_err)?;
        if let Some(b) = open.maps.bss_data.as_deref_mut() {
            // Inode numbers of namespaces fit in 32 bits (the kernel's ns_common.inum).
            b.cfg_ns_inum = ns.ino() as u32;
        }
        let skel = open.load().map_err(load_err)?;
        let attach_err = |what: &str, source: libbpf_rs::Error| BpfError::Attach {
            what: format!("the change tracker: {what}"),
            source: io::Error::other(source),
        };
        let links = vec![
            skel.progs
                .track_switch
                .attach()
                .map_err(|e| attach_err("sched_switch", e))?,
            skel.progs
                .track_fork
                .attach()
                .map_err(|e| attach_err("sched_process_fork", e))?,
            skel.progs
                .track_exit
                .attach()
                .map_err(|e| attach_err("sched_process_exit", e))?,
        ];
        Ok(Tracker {
            skel,
            _links: links,
            keys: vec![0; BATCH],
            values: vec![0; BATCH],
        })
    }

    /// Drains the marks: the tasks that may have changed since the previous call. Read the
    /// tasks after this returns: a change made after the drain is marked for the next call.
    pub fn take(&mut self) -> Result<Changes, BpfError> {
        // Read and cleared in one step: a mark that fails meanwhile sets it again.
        let overflow = self.skel.maps.bss_data.as_deref_mut().is_some_and(|b| {
            // SAFETY: `overflow` is an aligned u32 in the mapped .bss, which lives as long as
            // the skeleton; the programs only ever store 1 into it.
            let flag = unsafe { AtomicU32::from_ptr(&mut b.overflow) };
            flag.swap(0, Ordering::SeqCst) != 0
        });
        let mut tasks = Vec::new();
        let drained = self.drain(&mut tasks);
        // On a CPU now: such a task may not have left its CPU since the last look.
        let zero = 0u32.to_ne_bytes();
        if let Ok(Some(per_cpu)) = self.skel.maps.running.lookup_percpu(&zero, MapFlags::ANY) {
            for v in per_cpu {
                if v.len() >= 8 {
                    let tid = u32::from_ne_bytes([v[0], v[1], v[2], v[3]]);
                    let tgid = u32::from_ne_bytes([v[4], v[5], v[6], v[7]]);
                    if tid != 0 {
                        tasks.push((tid, tgid));
                    }
                }
            }
        }
        tasks.sort_unstable();
        tasks.dedup();
        Ok(Changes {
            tasks,
            complete: !overflow && drained.is_ok(),
        })
    }

    /// Moves every mark of `changed` into `out` (lookup-and-delete in batches). An error
    /// (a kernel without batch operations, 5.6+) leaves the rest marked.
    fn drain(&mut self, out: &mut Vec<(u32, u32)>) -> io::Result<()> {
        let fd = self.skel.maps.changed.as_fd().as_raw_fd();
        let opts = libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        // The kernel's opaque position in the hash table (a bucket index, u32).
        let mut token = [0u8; 8];
        let mut first = true;
        loop {
            let mut count = BATCH as u32;
            let in_batch = if first {
                std::ptr::null_mut()
            } else {
                token.as_mut_ptr().cast::<c_void>()
            };
            // SAFETY: `keys` and `values` hold BATCH u32s each (the map's key and value size)
            // and `count` tells the kernel so; `token` outlives the call and is large enough for
            // a hash map's batch position; `opts` is initialized with its size.
            let r = unsafe {
                libbpf_sys::bpf_map_lookup_and_delete_batch(
                    fd,
                    in_batch,
                    token.as_mut_ptr().cast::<c_void>(),
                    self.keys.as_mut_ptr().cast::<c_void>(),
                    self.values.as_mut_ptr().cast::<c_void>(),
                    &mut count,
                    &opts,
                )
            };
            first = false;
            let n = (count as usize).min(BATCH);
            out.extend(
                self.keys[..n]
                    .iter()
                    .copied()
                    .zip(self.values[..n].iter().copied()),
            );
            if r == 0 {
                continue;
            }
            // ENOENT: the end of the table, reached in this call.
            return if -r == libc::ENOENT {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(-r))
            };
        }
    }
}
