//! Loading the profiler's programs, sampling, and reading what they counted.
//!
//! [`Sampler::start`] loads `profile.bpf.c` for a [`Scope`], opens one cpu-clock perf event per
//! online CPU at the rate (on-CPU samples, counted by the kernel from then on) and attaches the
//! off-CPU iterator. [`Sampler::walk`] walks the tasks once (each thread off CPU counted for
//! its time off CPU since the walk before); [`Sampler::fresh_reader`] gives another thread
//! the user stacks seen for the first time, as they come, for symbolizing while their
//! processes live.
//! [`Sampler::counts`] and [`Sampler::stack`] read the result.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{self, Read};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, RingBuffer, RingBufferBuilder};
use taskdiag_bpf::IterLink;
use taskdiag_proto::prof::PROF_STACK_DEPTH;
use taskdiag_proto::{ProfFresh, ProfKey, ProfSeenHdr, ProfStackHdr};

use crate::error::ProfileError;
use crate::skel::{ProfileSkel, ProfileSkelBuilder};

/// Which threads are sampled and which pids they are shown with.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// The pid namespace (its inode number) whose threads are sampled, shown with its pids.
    pub ns_inum: u32,
    /// The profiler's own pid namespace (its inode number): at or above `ns_inum`'s.
    pub caller_ns_inum: u32,
    /// How many levels above the profiler's namespace /proc's is: the pids symbolization
    /// opens are those of /proc's namespace.
    pub proc_up: u32,
    /// The profiler's own pid in /proc's namespace: its threads are never sampled.
    pub self_proc_pid: u32,
    /// Only these processes (pids in `ns_inum`'s namespace), if not empty.
    pub tgids: Vec<u32>,
    /// Only threads in this cgroup v2 (its id, the directory's inode number) or below.
    pub cgroup_id: Option<u64>,
}

/// What to sample, how often.
#[derive(Clone, Debug)]
pub struct Options {
    /// Samples per second, per thread.
    pub hz: u64,
    /// Sample threads on a CPU (perf_event).
    pub on_cpu: bool,
    /// Sample threads off CPU (the task iterator).
    pub off_cpu: bool,
    /// Which threads.
    pub scope: Scope,
    /// Room for distinct (thread, state, stacks) keys.
    pub max_keys: u32,
    /// Room for distinct stacks (at least; more on a host with many threads).
    pub max_stacks: u32,
}

/// A stack read from the stack map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawStack {
    /// Addresses, innermost first.
    pub ips: Vec<u64>,
    /// `PROF_STACK_*` flags.
    pub flags: u32,
}

/// The programs' own counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Samples of threads on a CPU.
    pub on_cpu: u64,
    /// Threads looked at by the off-CPU walks (one per thread per walk).
    pub off_cpu: u64,
    /// Of those, threads that had not run since the walk before (not unwound again).
    pub reused: u64,
    /// Stacks left out of samples because the stack map was full.
    pub stacks_lost: u64,
    /// Samples lost because the count map was full (of 1/hz s; off-CPU time rounded up).
    pub dropped: u64,
}

/// The loaded programs, their perf events and the iterator.
pub struct Sampler {
    skel: ProfileSkel<'static>,
    /// The perf events and their programs' links (on-CPU sampling), until [`Sampler::stop`].
    perf: Vec<(OwnedFd, Link)>,
    /// The off-CPU walk: one link for every task, or one per process of `-p` (6.1+).
    iters: Vec<IterLink>,
    /// Whether off-CPU samples have user stacks (a sleepable iterator, 5.18+).
    pub user_stacks_off_cpu: bool,
    hz: u64,
    /// When the profile began ([`Sampler::begin`]; CLOCK_BOOTTIME, ns).
    begun_ns: u64,
    /// When the profile ended ([`Sampler::end`]; 0 until then).
    ended_ns: u64,
}

/// The stack with this id in stack map `map`.
fn read_stack(map: &dyn MapCore, id: u64) -> Option<RawStack> {
    let v = map.lookup(&id.to_ne_bytes(), MapFlags::ANY).ok()??;
    let hdr = ProfStackHdr::read_from(&v)?;
    let nr = (hdr.nr as usize).min(PROF_STACK_DEPTH);
    let ips = v[ProfStackHdr::SIZE..]
        .chunks_exact(8)
        .take(nr)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
        .collect();
    Some(RawStack {
        ips,
        flags: hdr.flags,
    })
}

/// What a thread needs to read the user stacks first seen: handles on the ring buffer they
/// are announced in and on the stack map (sent to that thread, which makes its
/// [`FreshReader`]).
pub struct FreshSource {
    ring: MapHandle,
    stacks: MapHandle,
}

/// The user stacks first seen, read on the thread that made it.
pub struct FreshReader {
    ring: RingBuffer<'static>,
    read: Rc<RefCell<Vec<ProfFresh>>>,
    stacks: MapHandle,
}

impl FreshSource {
    /// The reader (on the thread that reads).
    pub fn reader(self) -> Result<FreshReader, ProfileError> {
        let read = Rc::new(RefCell::new(Vec::new()));
        let out = Rc::clone(&read);
        let mut b = RingBufferBuilder::new();
        b.add(&self.ring, move |data: &[u8]| {
            if let Some(f) = ProfFresh::read_from(data) {
                out.borrow_mut().push(f);
            }
            0
        })
        .map_err(ProfileError::Load)?;
        // The ring buffer maps the map's memory: the handle may go once it is built.
        let ring = b.build().map_err(ProfileError::Load)?;
        Ok(FreshReader {
            ring,
            read,
            stacks: self.stacks,
        })
    }
}

impl FreshReader {
    /// Waits until a user stack not seen before is announced, or `timeout` has passed (the
    /// kernel wakes the reader at the first record after a drain, not at each one).
    pub fn wait(&self, timeout: Duration) {
        // An error is an interrupted wait (a signal): the caller looks at its own flags.
        let _ = self.ring.poll(timeout);
    }

    /// The user stacks first seen since the last call, with their processes and addresses.
    /// Read from the ring buffer's memory (no system call), each stack from the stack map.
    pub fn take(&self) -> Vec<(ProfFresh, RawStack)> {
        // An error here is the ring buffer's memory being inconsistent, which the kernel
        // prevents; the stacks it would have given are named at the end instead.
        let _ = self.ring.consume();
        std::mem::take(&mut *self.read.borrow_mut())
            .into_iter()
            .filter_map(|f| Some((f, read_stack(&self.stacks, f.id)?)))
            .collect()
    }
}

/// A cpu-clock perf event on `cpu` firing `hz` times a second (perf_event_open(2)).
fn cpu_clock_event(cpu: u32, hz: u64) -> io::Result<OwnedFd> {
    let mut attr = libbpf_sys::perf_event_attr {
        type_: libbpf_sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32,
        config: libbpf_sys::PERF_COUNT_SW_CPU_CLOCK as u64,
        ..Default::default()
    };
    // A period in nanoseconds of CPU time, rather than a frequency: every sample then weighs
    // exactly 1/hz s.
    attr.__bindgen_anon_1.sample_period = 1_000_000_000 / hz.max(1);
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares; pid -1 with a CPU
    // samples everything on that CPU; the returned descriptor is owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const libbpf_sys::perf_event_attr,
            -1i32,
            cpu as i32,
            -1i32,
            libc::c_ulong::from(libbpf_sys::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The `fresh` ring buffer's size for a stack map of `stacks`: a record (8-byte header and a
/// [`ProfFresh`]) for each, rounded up to a power of two, at least a page.
fn fresh_bytes(stacks: u32) -> u32 {
    let want = u64::from(stacks) * (8 + ProfFresh::SIZE as u64);
    want.next_power_of_two().clamp(4096, 1 << 30) as u32
}

/// CLOCK_BOOTTIME in nanoseconds: bpf_ktime_get_boot_ns()'s clock.
fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a timespec into `ts`, which is valid for it.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The number of threads now, 0 if unknown.
fn threads_now() -> u32 {
    taskdiag_procfs::host_tasks().unwrap_or(0)
}

/// The online CPUs, from /sys/devices/system/cpu/online ("0-3,8").
fn online_cpus() -> Result<Vec<u32>, ProfileError> {
    const PATH: &str = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(PATH).map_err(|e| ProfileError::path(PATH, e))?;
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || ProfileError::path(PATH, io::Error::other(format!("bad CPU list {text:?}")));
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

impl Sampler {
    /// Loads the programs for `opts` and starts sampling on CPU (if asked); off-CPU time is
    /// counted by [`Sampler::walk`].
    pub fn start(opts: &Options) -> Result<Self, ProfileError> {
        // libbpf's messages (a first load the kernel refuses) only with TASKDIAG_DEBUG.
        taskdiag_bpf::quiet_libbpf();
        // A sleepable iterator with user stacks first; without it (before 5.18, or a verifier
        // that refuses it), kernel stacks only.
        let (skel, user) = match Self::load(opts, true) {
            Ok(s) => (s, true),
            Err(ProfileError::PermissionDenied(e)) => {
                return Err(ProfileError::PermissionDenied(e))
            }
            Err(_) if opts.off_cpu => (Self::load(opts, false)?, false),
            Err(e) => return Err(e),
        };
        let zero = 0u8;
        for tgid in &opts.scope.tgids {
            skel.maps
                .tgids
                .update(&tgid.to_ne_bytes(), &[zero + 1], MapFlags::ANY)
                .map_err(ProfileError::Load)?;
        }
        let mut perf = Vec::new();
        if opts.on_cpu {
            for cpu in online_cpus()? {
                let fd = match cpu_clock_event(cpu, opts.hz) {
                    Ok(fd) => fd,
                    // Gone offline since the list was read.
                    Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
                    Err(source) => return Err(ProfileError::PerfEvent { cpu, source }),
                };
                let link = skel
                    .progs
                    .on_cpu
                    .attach_perf_event(fd.as_raw_fd())
                    .map_err(|e| ProfileError::PerfEvent {
                        cpu,
                        source: io::Error::other(e),
                    })?;
                perf.push((fd, link));
            }
        }
        let iters = if opts.off_cpu {
            let prog = if user {
                &skel.progs.off_cpu_user
            } else {
                &skel.progs.off_cpu_kernel
            };
            Self::iter_links(prog.as_fd(), &opts.scope)?
        } else {
            Vec::new()
        };
        Ok(Self {
            skel,
            perf,
            iters,
            user_stacks_off_cpu: user && opts.off_cpu,
            hz: opts.hz.max(1),
            begun_ns: 0,
            ended_ns: 0,
        })
    }

    /// The links of the off-CPU walk: for `-p` in the caller's own namespace, one per process,
    /// each walking only its threads (the kernel's link parameters, 6.1+); else, or where the
    /// kernel refuses them, one walking every task.
    fn iter_links(prog: BorrowedFd<'_>, scope: &Scope) -> Result<Vec<IterLink>, ProfileError> {
        if !scope.tgids.is_empty() && scope.ns_inum == scope.caller_ns_inum {
            let per_process: Result<Vec<IterLink>, io::Error> = scope
                .tgids
                .iter()
                .map(|&pid| {
                    let mut info = libbpf_sys::bpf_iter_link_info::default();
                    info.task.pid = pid;
                    IterLink::attach(prog, Some(&mut info))
                })
                .collect();
            if let Ok(links) = per_process {
                return Ok(links);
            }
        }
        Ok(vec![
            IterLink::attach(prog, None).map_err(ProfileError::Iter)?
        ])
    }

    fn load(opts: &Options, user: bool) -> Result<ProfileSkel<'static>, ProfileError> {
        let err = |e: libbpf_rs::Error| {
            if matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
                && !taskdiag_bpf::may_load_bpf()
            {
                ProfileError::PermissionDenied(e)
            } else {
                ProfileError::Load(e)
            }
        };
        // The skeleton borrows its object for as long as it lives; one profile per process,
        // so the object is leaked on purpose (as crates/bpf's loader does).
        let obj: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = ProfileSkelBuilder::default().open(obj).map_err(err)?;
        if let Some(r) = open.maps.rodata_data.as_deref_mut() {
            r.cfg_ns_inum = opts.scope.ns_inum;
            r.cfg_caller_ns_inum = opts.scope.caller_ns_inum;
            r.cfg_proc_up = opts.scope.proc_up;
            r.cfg_self = opts.scope.self_proc_pid;
            r.cfg_cgroup_id = opts.scope.cgroup_id.unwrap_or(0);
            r.cfg_only_tgids = !opts.scope.tgids.is_empty();
            r.cfg_period_ns = 1_000_000_000 / opts.hz.max(1);
        }
        open.maps
            .counts
            .set_max_entries(opts.max_keys)
            .map_err(err)?;
        // Room for a user and a kernel stack of every thread where there are many (each
        // process's user stacks are its own: 50,000 sleeping processes are 50,000 stacks), up
        // to 2^17 (~130 MiB of kernel memory, allocated with the map).
        let stacks = opts
            .max_stacks
            .max(threads_now().saturating_mul(2).min(1 << 17));
        open.maps.stacks.set_max_entries(stacks).map_err(err)?;
        // Room for every stack the map can take as new in one period (a ring buffer's size is
        // a power of two of pages; each record has an 8-byte header).
        open.maps
            .fresh
            .set_max_entries(fresh_bytes(stacks))
            .map_err(err)?;
        // Room for every thread's last sample, twice over (threads come and go).
        open.maps
            .seen
            .set_max_entries(threads_now().saturating_mul(2).max(65_536))
            .map_err(err)?;
        open.maps
            .tgids
            .set_max_entries((opts.scope.tgids.len() as u32).max(1))
            .map_err(err)?;
        open.progs.on_cpu.set_autoload(opts.on_cpu);
        open.progs.off_cpu_user.set_autoload(opts.off_cpu && user);
        open.progs
            .off_cpu_kernel
            .set_autoload(opts.off_cpu && !user);
        open.load().map_err(err)
    }

    /// The profile begins now, before the first walk: threads first seen by a walk count
    /// their time off CPU from here, not from the load, and on-CPU samples count from here
    /// (the perf events fire from [`Sampler::start`] on). With a `duration` (-d) it ends then
    /// whenever the profiler gets to look: samples after it are not counted (on a loaded
    /// machine the profiler's own thread may wake up seconds late).
    pub fn begin(&mut self, duration: Option<std::time::Duration>) {
        self.begun_ns = boottime_ns();
        let end = duration.map_or(0, |d| self.begun_ns.saturating_add(d.as_nanos() as u64));
        if let Some(b) = self.skel.maps.bss_data.as_deref_mut() {
            b.cfg_end_ns = end;
            b.cfg_begin_ns = self.begun_ns;
        }
    }

    /// The profile ends now, or `duration` after it began if that came first (-d): walks
    /// after this, the last one, count time off CPU up to there only (a last walk that comes
    /// late, on a loaded machine, would count past the end).
    pub fn end(&mut self, duration: Option<std::time::Duration>) {
        let now = boottime_ns();
        self.ended_ns = duration.map_or(now, |d| {
            now.min(self.begun_ns.saturating_add(d.as_nanos() as u64))
        });
        if let Some(b) = self.skel.maps.bss_data.as_deref_mut() {
            b.cfg_end_ns = self.ended_ns;
        }
    }

    /// The window sampled, from [`Sampler::begin`] to [`Sampler::end`]: what every sample
    /// was taken in, and what averages over time divide by.
    pub fn window(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.ended_ns.saturating_sub(self.begun_ns))
    }

    /// Ends on-CPU sampling (closes the perf events): at the end of the profile, so that what
    /// follows (a last walk, symbolizing what is left) is not sampled into it.
    pub fn stop(&mut self) {
        self.perf.clear();
    }

    /// Walks the tasks once: every thread not on a CPU is counted for its time off CPU since
    /// the previous walk.
    pub fn walk(&mut self) -> Result<(), ProfileError> {
        for link in &self.iters {
            let mut walk = link.walk().map_err(ProfileError::Iter)?;
            let mut buf = [0u8; 64];
            // The program writes nothing: one read() walks every task.
            while walk.read(&mut buf).map_err(ProfileError::Iter)? > 0 {}
        }
        Ok(())
    }

    /// A reader of the user stacks first seen, for another thread (the symbolizer's): its own
    /// handles on the `fresh` ring buffer and the stack map.
    pub fn fresh_reader(&self) -> Result<FreshSource, ProfileError> {
        Ok(FreshSource {
            ring: MapHandle::try_from(&self.skel.maps.fresh).map_err(ProfileError::Load)?,
            stacks: MapHandle::try_from(&self.skel.maps.stacks).map_err(ProfileError::Load)?,
        })
    }

    /// The stack with this id.
    pub fn stack(&self, id: u64) -> Option<RawStack> {
        read_stack(&self.skel.maps.stacks, id)
    }

    /// Every key counted so far, with its count in samples (its time / the period): the count
    /// map's, plus the time of threads that slept on under their last key (kept in `seen`
    /// until they run again).
    pub fn counts(&self) -> Vec<(ProfKey, u64)> {
        let mut all: HashMap<ProfKey, u64> = HashMap::new();
        let map = &self.skel.maps.counts;
        for k in map.keys() {
            let Ok(Some(v)) = map.lookup(&k, MapFlags::ANY) else {
                continue;
            };
            if let (Some(key), Ok(n)) = (ProfKey::read_from(&k), <[u8; 8]>::try_from(&v[..])) {
                *all.entry(key).or_default() += u64::from_ne_bytes(n);
            }
        }
        let seen = &self.skel.maps.seen;
        for k in seen.keys() {
            let Ok(Some(v)) = seen.lookup(&k, MapFlags::ANY) else {
                continue;
            };
            let (Some(h), Some(key)) = (
                ProfSeenHdr::read_from(&v),
                v.get(ProfSeenHdr::SIZE..).and_then(ProfKey::read_from),
            ) else {
                continue;
            };
            if h.out == 0 && h.pending > 0 {
                *all.entry(key).or_default() += h.pending;
            }
        }
        // Nanoseconds to samples of 1/hz s, rounded once per key.
        let hz = u128::from(self.hz);
        all.into_iter()
            .map(|(k, ns)| {
                (
                    k,
                    ((u128::from(ns) * hz + 500_000_000) / 1_000_000_000) as u64,
                )
            })
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// The programs' counters.
    pub fn stats(&self) -> Stats {
        self.skel
            .maps
            .bss_data
            .as_deref()
            .map(|b| Stats {
                stacks_lost: b.n_stacks_lost,
                on_cpu: b.n_on_cpu,
                off_cpu: b.n_off_cpu,
                reused: b.n_reused,
                // Nanoseconds of samples, as counted.
                dropped: (u128::from(b.n_dropped) * u128::from(self.hz)).div_ceil(1_000_000_000)
                    as u64,
            })
            .unwrap_or_default()
    }
}
