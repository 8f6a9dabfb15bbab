//! Programs verified once per boot, not once per process: loaded instances pinned in bpffs and
//! reused by this machine's later privileged processes.
//!
//! Loading (CO-RE relocation and verification) is most of what a one-shot dump costs on an
//! ordinary host (~30-60 ms against ~1 ms of walking a few hundred tasks). So the first
//! privileged process that loads the programs for every group pins them, with the maps user
//! space needs, under `/sys/fs/bpf/taskdiag/KEY/SLOT/`, and later ones open the pins instead
//! of loading.
//!
//! * **KEY** names this build's programs (a digest of the object and of this crate's sources,
//!   see build.rs) and the running kernel (its release and version): programs pinned by
//!   another build or for another kernel are never used, and are removed by the next process
//!   that pins, once nobody holds them.
//! * **SLOT** (0..[`SLOTS`]): one loaded instance each. An instance's configuration globals,
//!   ring buffer and scratch maps serve one walk at a time, so a process holds its slot with an
//!   exclusive `flock` on the slot's directory for as long as it keeps the programs; a second
//!   process finds the next free slot, pins a new one, or loads privately when all are held.
//!   The lock dies with its holder, whatever way it ends; a holder killed mid-walk can leave
//!   records in the ring buffer and a probe switched on, which the next holder clears
//!   ([`Slot::open`]).
//! * A slot is built in a temporary directory, `new-PID` (bpffs refuses names with a dot),
//!   locked before anything is pinned in it and renamed into place, so nobody ever opens a
//!   half-pinned slot; two first loads racing each pin their own slot.
//!
//! No new privilege: the directories are root's, mode 0700, and a process uses pins only if it
//! could load the programs itself ([`crate::may_load_bpf`]). bpffs is mounted at /sys/fs/bpf
//! when it is not (as systemd does at boot, and bpftool when it pins); where that fails, or with
//! `TASKDIAG_BPF_PIN=0`, every process loads its own programs as before.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use libbpf_rs::{MapCore, MapHandle};

use crate::load::{Prog, TaskFlavour};
use crate::skel::types;

include!(concat!(env!("OUT_DIR"), "/object_key.rs"));

/// Where bpffs is mounted, by convention.
const BPFFS: &str = "/sys/fs/bpf";
/// Our directory in it.
const PIN_ROOT: &str = "/sys/fs/bpf/taskdiag";
/// `statfs` magic of bpffs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// Instances per key: concurrent privileged readers beyond this load their own.
pub(crate) const SLOTS: u32 = 4;

/// The pinned programs' names: the skeleton's program names.
pub(crate) fn prog_name(p: Prog, flavour: TaskFlavour) -> &'static str {
    match p {
        Prog::Task if flavour == TaskFlavour::Bounded => "dump_task_bounded",
        Prog::Task => "dump_task",
        Prog::Both => "dump_task_both",
        Prog::Cmdline => "dump_task_cmdline",
        Prog::Vma => "dump_vma",
        Prog::Root => "task_root",
    }
}
const MAP_BSS: &str = "bss";
const MAP_DATA: &str = "data";
const MAP_RING: &str = "out_rb";

/// Whether sharing is wanted and allowed: not switched off (`TASKDIAG_BPF_PIN=0`), and none
/// of the test hooks that change what a load produces is set (those loads stay private).
pub(crate) fn wanted() -> bool {
    let off = |v: &str| std::env::var_os(v).is_some();
    std::env::var("TASKDIAG_BPF_PIN").map_or(true, |v| v != "0")
        && !off("TASKDIAG_BPF_DISABLE")
        && !off("TASKDIAG_BPF_RINGBUF_SIZE")
        && !off("TASKDIAG_BPF_FULL_BTF")
}

/// Whether this process could pin programs now: sharing wanted, the privilege to load, bpffs
/// (mounted if need be), our directories, and a slot number not yet taken (with every slot
/// pinned and held, a load stays private and need not load more than its own groups).
pub(crate) fn possible() -> bool {
    let key = key_dir();
    wanted()
        && crate::may_load_bpf()
        && ensure_dirs(key).is_ok()
        && (0..SLOTS).any(|n| !key.join(n.to_string()).exists())
}

/// The directory of this build's programs for the running kernel (worked out once per
/// process: reusing, checking and pinning all need it).
fn key_dir() -> &'static Path {
    static KEY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    KEY.get_or_init(kernel_key_dir)
}

fn kernel_key_dir() -> PathBuf {
    // SAFETY: uname fills the struct it is given; an all-zero utsname is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    unsafe { libc::uname(&mut u) };
    let field = |f: &[libc::c_char]| {
        // SAFETY: uname NUL-terminates every field within its array.
        unsafe { CStr::from_ptr(f.as_ptr()) }.to_bytes().to_vec()
    };
    let mut kernel = field(&u.release);
    kernel.push(b' ');
    kernel.extend(field(&u.version));
    // FNV-1a: a short, stable name for the kernel's release and build string.
    let digest = kernel.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    Path::new(PIN_ROOT).join(format!("{OBJECT_KEY}-{digest:016x}"))
}

/// Makes sure bpffs is mounted at /sys/fs/bpf and our directories exist (root's, 0700).
fn ensure_dirs(key: &Path) -> io::Result<()> {
    if !is_bpffs(Path::new(BPFFS)) {
        let c = |s: &str| CString::new(s).expect("no NUL");
        let (src, dst, fs, opts) = (c("bpf"), c(BPFFS), c("bpf"), c("mode=0700"));
        // SAFETY: every pointer is a NUL-terminated string alive for the call.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                dst.as_ptr(),
                fs.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                opts.as_ptr().cast(),
            )
        };
        if r != 0 || !is_bpffs(Path::new(BPFFS)) {
            return Err(io::Error::last_os_error());
        }
    }
    for d in [Path::new(PIN_ROOT), key] {
        match std::fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // Ours and private, or not used: someone else's directory there is not trusted.
        let m = std::fs::symlink_metadata(d)?;
        if !m.is_dir() || m.uid() != 0 || m.permissions().mode() & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is not root's private directory", d.display()),
            ));
        }
    }
    Ok(())
}

fn is_bpffs(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid value for statfs to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` writable.
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}

/// Opens directory `p` and takes its exclusive lock without waiting; `None` if it is held
/// (or the directory is gone).
fn lock_dir(p: &Path) -> Option<OwnedFd> {
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(p)
        .ok()?;
    // SAFETY: flock on a descriptor we own.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    (r == 0).then(|| f.into())
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// `bpf_obj_get`: a descriptor of the object pinned at `p`.
fn obj_get(p: &Path) -> io::Result<OwnedFd> {
    let c = cpath(p)?;
    // SAFETY: `c` is NUL-terminated; a non-negative return is a new descriptor we own.
    let fd = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `bpf_obj_pin`: pins the object of `fd` at `p`.
fn obj_pin(fd: BorrowedFd<'_>, p: &Path) -> io::Result<()> {
    let c = cpath(p)?;
    // SAFETY: `c` is NUL-terminated and `fd` a valid descriptor.
    let r = unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) };
    if r < 0 {
        return Err(io::Error::from_raw_os_error(-r));
    }
    Ok(())
}

/// A shared mapping of a global-data map (`.bss`, `.data`) as its skeleton type.
pub(crate) struct Mapped<T> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only reached through `&self`/`&mut self`.
unsafe impl<T: Send> Send for Mapped<T> {}

impl<T> Mapped<T> {
    /// Maps the value of the one-entry array map `map` (BPF_F_MMAPABLE, as libbpf creates
    /// global-data maps), which must be at least a `T`.
    fn new(map: &MapHandle) -> io::Result<Self> {
        // The map's value is the C section's size; the Rust type may add tail padding, which
        // the page-sized mapping covers.
        let value = (map.value_size() as usize).next_multiple_of(std::mem::align_of::<T>());
        if value < std::mem::size_of::<T>() {
            return Err(io::Error::other("pinned map smaller than its type"));
        }
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = (map.value_size() as usize).div_ceil(page) * page;
        // SAFETY: a fresh shared mapping of the map's value; the kernel checks the length and
        // that the map is mmapable.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapped {
            ptr: NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap gave NULL"))?,
            len,
        })
    }

    pub(crate) fn get(&self) -> &T {
        // SAFETY: the mapping holds a T (checked in `new`) for as long as `self` lives; the
        // programs write to it only during our own walks.
        unsafe { self.ptr.as_ref() }
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        // SAFETY: as in `get`, and `&mut self` makes this the only reference.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> Drop for Mapped<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no reference outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A pinned instance this process holds (its lock) and uses.
pub(crate) struct Slot {
    /// The slot's directory, locked.
    _lock: OwnedFd,
    path: PathBuf,
    /// Program descriptors, by [`prog_name`]; absent for a program the kernel rejected.
    progs: Vec<(&'static str, OwnedFd)>,
    pub(crate) bss: Mapped<types::bss>,
    pub(crate) data: Mapped<types::data>,
    pub(crate) ring: MapHandle,
}

/// Every program name a slot may hold.
pub(crate) const PROGS: [&str; 5] = [
    "dump_task",
    "dump_task_bounded",
    "dump_task_cmdline",
    "dump_vma",
    "task_root",
];

impl Slot {
    /// A free slot of this build for the running kernel, locked; `None` when there is none
    /// (nothing pinned yet, every slot held, sharing off or not possible here).
    pub(crate) fn open() -> Option<Slot> {
        if !wanted() || !crate::may_load_bpf() {
            return None;
        }
        let key = key_dir();
        for n in 0..SLOTS {
            let dir = key.join(n.to_string());
            let Some(lock) = lock_dir(&dir) else {
                continue;
            };
            match Self::open_locked(lock, dir.clone()) {
                Ok(s) => return Some(s),
                // Unusable (damaged, or of a layout this build does not expect): removed
                // under its lock, if nobody took it meanwhile, so that the number can be
                // pinned again.
                Err(_) => {
                    if let Some(_lock) = lock_dir(&dir) {
                        let _ = remove_slot(&dir);
                    }
                }
            }
        }
        None
    }

    /// The slot at `dir`, if it is free (locked for the caller).
    #[cfg(test)]
    pub(crate) fn open_at(dir: &Path) -> Option<Slot> {
        Self::open_locked(lock_dir(dir)?, dir.to_path_buf()).ok()
    }

    /// Opens the objects of the slot at `path`, whose `lock` the caller took.
    fn open_locked(lock: OwnedFd, path: PathBuf) -> io::Result<Slot> {
        let mut progs = Vec::new();
        for name in PROGS {
            match obj_get(&path.join(name)) {
                Ok(fd) => progs.push((name, fd)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let map = |n: &str| {
            MapHandle::from_pinned_path(path.join(n)).map_err(|e| io::Error::other(e.to_string()))
        };
        let (bss, data, ring) = (map(MAP_BSS)?, map(MAP_DATA)?, map(MAP_RING)?);
        let mut slot = Slot {
            _lock: lock,
            progs,
            bss: Mapped::new(&bss)?,
            data: Mapped::new(&data)?,
            ring,
            path,
        };
        slot.clear_leftovers();
        Ok(slot)
    }

    /// What a holder killed mid-walk may have left: the rss probe switched on. (Records it
    /// left in the ring buffer are dropped by the next ring walk as it starts, `read_ringbuf`;
    /// every other global is set before each walk that reads it.)
    fn clear_leftovers(&mut self) {
        self.bss.get_mut().cfg_rss_probe = 0;
    }

    /// The descriptor of program `name`, if the slot has it.
    pub(crate) fn prog(&self, name: &str) -> Option<BorrowedFd<'_>> {
        self.progs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.as_fd())
    }

    /// The task program's flavour in this slot.
    pub(crate) fn flavour(&self) -> Option<TaskFlavour> {
        [TaskFlavour::Loop, TaskFlavour::Bounded]
            .into_iter()
            .find(|&f| self.prog(prog_name(Prog::Task, f)).is_some())
    }

    /// Where it is pinned.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// What to pin: the loaded programs by name and the maps user space reads.
pub(crate) struct Objects<'a> {
    pub(crate) progs: Vec<(&'static str, BorrowedFd<'a>)>,
    pub(crate) bss: BorrowedFd<'a>,
    pub(crate) data: BorrowedFd<'a>,
    pub(crate) ring: BorrowedFd<'a>,
}

/// Pins `objs` as a new slot of this build and returns its lock, held; `None` when sharing is
/// off or not possible, or every slot is taken (the caller then keeps its programs to itself).
/// Removes what other builds or kernels pinned and nobody holds.
pub(crate) fn pin(objs: &Objects<'_>) -> Option<(OwnedFd, PathBuf)> {
    if !wanted() || !crate::may_load_bpf() {
        return None;
    }
    let key = key_dir();
    ensure_dirs(key).ok()?;
    remove_stale(key);
    // SAFETY: getpid has no preconditions.
    let tmp = key.join(format!("new-{}", unsafe { libc::getpid() }));
    let _ = remove_slot(&tmp);
    std::fs::DirBuilder::new().mode(0o700).create(&tmp).ok()?;
    let Some(lock) = lock_dir(&tmp) else {
        let _ = remove_slot(&tmp);
        return None;
    };
    let pinned = (|| -> io::Result<()> {
        for (name, fd) in &objs.progs {
            obj_pin(*fd, &tmp.join(name))?;
        }
        obj_pin(objs.bss, &tmp.join(MAP_BSS))?;
        obj_pin(objs.data, &tmp.join(MAP_DATA))?;
        obj_pin(objs.ring, &tmp.join(MAP_RING))
    })();
    if pinned.is_err() {
        let _ = remove_slot(&tmp);
        return None;
    }
    // rename(2) onto a slot that exists fails (EEXIST/ENOTEMPTY): the next number is tried.
    for n in 0..SLOTS {
        let dst = key.join(n.to_string());
        if std::fs::rename(&tmp, &dst).is_ok() {
            return Some((lock, dst));
        }
    }
    let _ = remove_slot(&tmp);
    None
}

/// Unpins a slot directory's objects and removes it.
fn remove_slot(dir: &Path) -> io::Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let _ = std::fs::remove_file(e.path());
    }
    std::fs::remove_dir(dir)
}

/// Removes, under [`PIN_ROOT`], the directories of other builds or kernels whose slots nobody
/// holds, and temporary slots whose builder is gone.
fn remove_stale(key: &Path) {
    let Ok(dirs) = std::fs::read_dir(PIN_ROOT) else {
        return;
    };
    for d in dirs.flatten() {
        let p = d.path();
        if p == key {
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                let s = e.path();
                let temp = s
                    .file_name()
                    .is_some_and(|n| n.as_bytes().starts_with(b"new-"));
                if temp && lock_dir(&s).is_some() {
                    let _ = remove_slot(&s);
                }
            }
            continue;
        }
        let slots: Vec<PathBuf> = std::fs::read_dir(&p)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        // Every slot's lock, taken and kept until all are removed.
        let locks: Option<Vec<OwnedFd>> = slots.iter().map(|s| lock_dir(s)).collect();
        if locks.is_some() {
            for s in &slots {
                let _ = remove_slot(s);
            }
            let _ = std::fs::remove_dir(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashSet;
    use std::io::Read;

    use taskdiag_proto::msg::Messages;
    use taskdiag_proto::{Group, Strategy};

    use crate::load::TaskFilter;
    use crate::TaskIter;

    /// Held by the tests that take slots, one at a time: a slot one of them frees is the
    /// lowest free one, which another's `pinned()` would take in between (the slot test then
    /// found its slot held: "the slot is free again" failed once in `make test`).
    static SLOTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn slots() -> std::sync::MutexGuard<'static, ()> {
        SLOTS.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Programs pinned for this test (loaded and pinned if no slot is free); `None` (the test
    /// then has nothing to check) only for a caller without the privilege to load.
    fn pinned() -> Option<TaskIter> {
        if !crate::may_load_bpf() {
            return None;
        }
        // Reused from an earlier process, or loaded and pinned now (this binary's tests hold
        // at most three of the four slots at once).
        let it = TaskIter::load_shared(taskdiag_proto::SHOW_SUPPORTED).expect("load");
        assert!(
            it.pinned_at().is_some(),
            "neither reused nor pinned (no bpffs at {BPFFS}?)"
        );
        Some(it)
    }

    /// The pids of a whole-system BASE walk; panics on a pid seen twice.
    fn walk_pids(it: &mut TaskIter) -> HashSet<u32> {
        let req = taskdiag_proto::Request::new(Strategy::All, 0, Group::Base.flag());
        let mut pids = HashSet::new();
        it.dump(&req, &mut |chunk| {
            for m in Messages::new(chunk) {
                let pid = m.expect("message").header.pid;
                assert!(pids.insert(pid), "pid {pid} twice in one walk");
            }
            Ok(())
        })
        .expect("dump");
        pids
    }

    #[test]
    fn a_slot_is_held_by_one_process_at_a_time_and_left_clean() {
        let _slots = slots();
        let Some(mut it) = pinned() else {
            return;
        };
        let path = it.pinned_at().expect("pinned").to_path_buf();
        // Held: nobody else gets it.
        assert!(Slot::open_at(&path).is_none(), "{path:?} opened twice");
        // A holder that stops reading mid-walk leaves records in the ring buffer (one read()
        // fills it with every task of this small host and the rest is never consumed).
        it.configure_filter(Strategy::All, Group::Base.flag(), 0, 0, 0);
        let link = it.attach(false, TaskFilter::None).expect("attach");
        let mut walk = link.walk().expect("walk");
        let _ = walk.read(&mut [0u8; 64]);
        drop((walk, link, it));
        // The next holder of that slot sees each task once: the leftovers are gone. (Freed
        // when the lock's descriptor is closed; a child another test forks holds a copy of it
        // until its exec closes it: asked again for up to 30 s.)
        let mut slot = None;
        let free =
            taskdiag_test_support::process::wait_until(std::time::Duration::from_secs(30), || {
                slot = Slot::open_at(&path);
                slot.is_some()
            });
        let slot = slot
            .filter(|_| free)
            .unwrap_or_else(|| panic!("{path:?} is not free again within 30 s"));
        let mut next = TaskIter::from_slot(slot).expect("a task program");
        let pids = walk_pids(&mut next);
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        assert!(pids.contains(&me), "{pids:?}");
    }

    #[test]
    fn only_what_nobody_holds_of_other_builds_is_removed() {
        let _slots = slots();
        if pinned().is_none() {
            return;
        }
        let key = key_dir();
        let other = |n: &str| Path::new(PIN_ROOT).join(format!("{n}-0000000000000000"));
        let (free, held) = (other("00000000000000f0"), other("00000000000000f1"));
        for d in [&free, &held] {
            std::fs::create_dir_all(d.join("0")).expect("mkdir");
            std::fs::create_dir_all(d.join("1")).expect("mkdir");
        }
        // A builder of this key that died mid-pin left its temporary slot.
        let orphan = key.join("new-4194305");
        std::fs::create_dir_all(&orphan).expect("mkdir");
        let lock = lock_dir(&held.join("1")).expect("lock");
        // Another test's pinning runs remove_stale() too, holding every slot's lock of a
        // directory while it looks: then this call skips it (and that one removes it, or skips
        // it for ours). Either way a free one goes within a few calls: tried for up to 30 s,
        // as under TCG on a loaded host a second of tries was once not enough (5.10).
        let removed = |dir: &Path| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                remove_stale(key);
                if !dir.exists() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            false
        };
        assert!(removed(&free), "{free:?} kept");
        assert!(!orphan.exists(), "{orphan:?} kept");
        assert!(held.join("1").exists(), "a held slot was removed");
        assert!(key.exists(), "this build's directory was removed");
        drop(lock);
        assert!(removed(&held), "{held:?} kept once free");
    }

    #[test]
    fn the_key_names_this_build_and_this_kernel() {
        let k = key_dir();
        let name = k.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(k.starts_with(PIN_ROOT), "{k:?}");
        let (obj, kernel) = name.split_once('-').unwrap();
        assert_eq!(obj, OBJECT_KEY);
        assert_eq!(obj.len(), 16);
        assert_eq!(kernel.len(), 16);
        assert!(kernel.bytes().all(|b| b.is_ascii_hexdigit()));
        // The same process, the same kernel: the same key.
        assert_eq!(kernel_key_dir(), k);
    }

    #[test]
    fn every_program_has_its_pin_name() {
        for (p, f) in [
            (Prog::Task, TaskFlavour::Loop),
            (Prog::Task, TaskFlavour::Bounded),
            (Prog::Cmdline, TaskFlavour::Loop),
            (Prog::Vma, TaskFlavour::Loop),
            (Prog::Root, TaskFlavour::Loop),
        ] {
            assert!(PROGS.contains(&prog_name(p, f)));
        }
    }
}
