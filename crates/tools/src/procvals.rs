//! Values libproc2 derives from a task's raw data that both `ps` and `top` show, made here
//! once from decoded taskdiag records: the cgroup string and name (`fill_cgroup_cvt`), the
//! LXC container name (`lxc_containers`), the environment (`fill_environ_cvt`), the
//! executable path (`readlink_exe`), namespace inodes as libproc2's stat() of the links gives
//! them, and the kernel function a task sleeps in (`lookup_wchan`, from SCHED or, for ps, read
//! from /proc per task as procps does) and the system call it is in (top's SYSCALL).
//!
//! Every function takes the record's group as fetched: `None` (the group was not asked for)
//! gives `None`, so a caller can print `-` instead of a value it never read.

use taskdiag_proto::task::{Cgroup, Ns, Paths, Sched};
use taskdiag_proto::IoRec;

use crate::text::{lib_escape, unvector, CMDLINE_MAX};

/// /proc/PID/cgroup's bytes: empty where the group was fetched but the file could not be read
/// (procps reads nothing then); `None` when it was not fetched.
pub fn cgroup_text(cg: Option<&Cgroup>, fetched: bool) -> Option<&[u8]> {
    match cg {
        Some(c) => Some(&c.text),
        None => fetched.then_some(&[][..]),
    }
}

/// procps' cgroup string (`fill_cgroup_cvt`): the file's lines, at newlines and NULs, but the
/// empty ones and those ending in `/` (a root cgroup), each escaped by the library, joined by
/// `,`; `-` when none is left.
pub fn cgroup(text: &[u8], utf8: bool) -> Vec<u8> {
    // read_unvectored() reads at most MAX_BUFSZ - 1 bytes.
    let text = &text[..text.len().min(128 * 1024 - 1)];
    let mut out = Vec::new();
    for line in text.split(|&c| c == b'\n' || c == 0) {
        if line.is_empty() || line.ends_with(b"/") {
            continue;
        }
        if !out.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(&lib_escape(line, utf8));
    }
    if out.is_empty() {
        out.push(b'-');
    }
    out
}

/// procps' cgname: what follows the first `:name=` of a [`cgroup`] string when something
/// does, else all of it.
pub fn cgname(cg: Vec<u8>) -> Vec<u8> {
    match memchr::memmem::find(&cg, b":name=") {
        Some(i) if i + 6 < cg.len() => cg[i + 6..].to_vec(),
        _ => cg,
    }
}

/// procps' `lxc_containers`: the name after the innermost `lxc.payload.` (else
/// `lxc.payload/`, else `lxc/`) on the first line that has one, up to a `/`; `-` if none.
pub fn lxc(text: &[u8]) -> Vec<u8> {
    // file2str() stops at the first NUL.
    let text = &text[..text.iter().position(|&c| c == 0).unwrap_or(text.len())];
    for delim in [&b"lxc.payload."[..], b"lxc.payload/", b"lxc/"] {
        let Some(at) = memchr::memmem::find(text, delim) else {
            continue;
        };
        let line = &text[at..];
        let line = &line[..memchr::memchr(b'\n', line).unwrap_or(line.len())];
        let mut name = &line[delim.len()..];
        while let Some(next) = memchr::memmem::find(name, delim) {
            name = &name[next + delim.len()..];
        }
        let name = &name[..memchr::memchr(b'/', name).unwrap_or(name.len())];
        return name.to_vec();
    }
    b"-".to_vec()
}

/// readlink /proc/PID/exe as libproc2's `readlink_exe` keeps it (escaped), `-` where it does
/// not resolve; `None` when PATHS was not fetched.
pub fn exe(paths: Option<&Paths>, fetched: bool, utf8: bool) -> Option<Vec<u8>> {
    if !fetched {
        return None;
    }
    Some(match paths.map(|p| &p.exe) {
        Some(Ok(e)) if !e.is_empty() => lib_escape(e, utf8),
        _ => b"-".to_vec(),
    })
}

/// The environment as libproc2 makes it (`fill_environ_cvt`): /proc/PID/environ's strings
/// joined by spaces and escaped, `-` when empty or unreadable; `None` when ENVIRON was not
/// fetched.
pub fn environ(env: Option<&[u8]>, fetched: bool, utf8: bool) -> Option<Vec<u8>> {
    if !fetched {
        return None;
    }
    let v = lib_escape(&unvector(env.unwrap_or_default(), CMDLINE_MAX), utf8);
    Some(if v.is_empty() { b"-".to_vec() } else { v })
}

/// The inode of namespace `name` (a link name in /proc/PID/ns) of task `tid`, 0 where the
/// link is absent or withheld, as libproc2's stat() of it gives 0 when it fails. Where the
/// record withholds the links, what that stat() gives this caller: nothing on most kernels
/// (EACCES), but Linux 5.10 resolves a link it refuses to the ns directory itself, whose inode
/// procps then prints. `None` when NS was not fetched or could not be read.
pub fn ns_inode(ns: Option<&Ns>, absent_ok: bool, tid: u32, name: &str) -> Option<u32> {
    match ns {
        Some(n) if n.rec.flags & taskdiag_proto::NS_F_HIDDEN != 0 => Some(
            crate::snapshot::proc_stat_ino(tid, &format!("ns/{name}"))
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(0),
        ),
        Some(n) => n.inode(name),
        None => absent_ok.then_some(0),
    }
}

/// The kernel function task `tid` sleeps in, as procps' lookup_wchan: "-" when running,
/// "?" when unreadable.
pub fn wchan(tid: u32) -> String {
    wchan_text(crate::snapshot::proc_file(tid, "wchan").as_deref())
}

/// /proc/PID/wchan's bytes as procps' lookup_wchan shows them: "-" when running, "?" when
/// unreadable (`None`) or empty.
pub fn wchan_text(raw: Option<&[u8]>) -> String {
    use taskdiag_procfs::parse::{parse_wchan, Wchan};
    match raw.map(parse_wchan) {
        Some(Wchan::Running) => "-".into(),
        None | Some(Wchan::Unknown) => "?".into(),
        Some(Wchan::Name(n)) => String::from_utf8_lossy(n).into_owned(),
    }
}

/// The kernel function a task sleeps in from SCHED's copy of /proc/PID/wchan, as [`wchan`]
/// shows the file: "?" where SCHED was fetched but could not be read; `None` when SCHED was
/// not fetched.
pub fn sched_wchan(sched: Option<&Sched>, fetched: bool) -> Option<String> {
    match sched {
        Some(s) => Some(wchan_text(Some(&s.wchan))),
        None => fetched.then(|| "?".into()),
    }
}

/// The system call a task is in, from SCHED's copy of /proc/PID/syscall (`NR ARGS... SP PC`,
/// `-1 SP PC` or `running`): its name ([`taskdiag_procfs::syscalls::name`]; the number where
/// there is none), `running` for a task on a CPU, `-` for one blocked outside a system call,
/// for a kernel thread (`kthread`: it makes none, and its file reads as system call 0) and
/// where the file is withheld or could not be read. `None` when SCHED was not fetched.
pub fn sched_syscall(sched: Option<&Sched>, fetched: bool, kthread: bool) -> Option<String> {
    let Some(s) = sched else {
        return fetched.then(|| "-".into());
    };
    let text = &s.syscall;
    if kthread || s.rec.flags & taskdiag_proto::SCHED_F_SYSCALL_HIDDEN != 0 {
        return Some("-".into());
    }
    if text.starts_with(b"running") {
        return Some("running".into());
    }
    let nr = text
        .split(|&c| c == b' ')
        .next()
        .and_then(|w| std::str::from_utf8(w).ok())
        .and_then(|w| w.parse::<i64>().ok());
    Some(match nr {
        Some(nr) if nr >= 0 => taskdiag_procfs::syscalls::name(nr)
            .map(str::to_string)
            .unwrap_or_else(|| nr.to_string()),
        _ => "-".into(),
    })
}

/// libnuma's two functions libproc2 asks, where `libnuma.so` or `libnuma.so.1` loads with both.
struct Numa {
    max_node: unsafe extern "C" fn() -> libc::c_int,
    node_of_cpu: unsafe extern "C" fn(libc::c_int) -> libc::c_int,
}

/// Symbol `name` of the library `h` as a function pointer of type `T`; `None` if it is missing.
///
/// # Safety
///
/// `h` must be a live dlopen handle and `T` the pointer type of that C function's signature.
unsafe fn dl_fn<T: Copy>(h: *mut libc::c_void, name: &std::ffi::CStr) -> Option<T> {
    // SAFETY: h is live and name NUL-terminated (the caller's promise and CStr's).
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    // SAFETY: a function pointer is pointer-sized, and T is this symbol's type (the caller's
    // promise).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut libc::c_void, T>(&p) })
}

/// libnuma, loaded once as libproc2 loads it (dlopen, no link-time dependency).
fn numa() -> Option<&'static Numa> {
    static LIBNUMA: std::sync::OnceLock<Option<Numa>> = std::sync::OnceLock::new();
    LIBNUMA
        .get_or_init(|| {
            for name in [c"libnuma.so", c"libnuma.so.1"] {
                // SAFETY: name is NUL-terminated; dlopen has no other precondition.
                let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY) };
                if h.is_null() {
                    continue;
                }
                // SAFETY: h is a live handle (never closed); libnuma declares
                // `int numa_max_node(void)` and `int numa_node_of_cpu(int cpu)`. As libproc2:
                // a library that loaded but lacks either means no NUMA.
                return unsafe {
                    Some(Numa {
                        max_node: dl_fn(h, c"numa_max_node")?,
                        node_of_cpu: dl_fn(h, c"numa_node_of_cpu")?,
                    })
                };
            }
            None
        })
        .as_ref()
}

/// The NUMA node of `cpu`, asked of libnuma exactly as libproc2 asks it (ps `numa`, top
/// `NU`); -1 without libnuma.
pub fn numa_node_of_cpu(cpu: i32) -> i32 {
    match numa() {
        // SAFETY: a plain C function taking and returning int.
        Some(n) => unsafe { (n.node_of_cpu)(cpu) },
        None => -1,
    }
}

/// How many NUMA nodes libnuma says there are (`numa_max_node() + 1`, top's
/// `Numa_node_tot`); 0 without libnuma.
pub fn numa_nodes() -> i32 {
    match numa() {
        // SAFETY: a plain C function returning int.
        Some(n) => (unsafe { (n.max_node)() }) + 1,
        None => 0,
    }
}

/// The sd-login(3) answers procps shows in its systemd columns (`lsession`, `machine`,
/// `ouid`, `seat`, `slice`, `unit`, `uunit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdField {
    /// sd_pid_get_session.
    Session,
    /// sd_pid_get_machine_name.
    Machine,
    /// sd_pid_get_owner_uid.
    OwnerUid,
    /// sd_session_get_seat of the task's session.
    Seat,
    /// sd_pid_get_slice.
    Slice,
    /// sd_pid_get_unit.
    Unit,
    /// sd_pid_get_user_unit.
    UserUnit,
}

type SdPidStr = unsafe extern "C" fn(libc::pid_t, *mut *mut libc::c_char) -> libc::c_int;
type SdPidUid = unsafe extern "C" fn(libc::pid_t, *mut libc::uid_t) -> libc::c_int;
type SdSessStr = unsafe extern "C" fn(*const libc::c_char, *mut *mut libc::c_char) -> libc::c_int;

/// The sd-login functions procps calls (`sd2proc` in libproc2's readproc.c).
struct SdLogin {
    session: SdPidStr,
    machine: SdPidStr,
    owner_uid: SdPidUid,
    seat: SdSessStr,
    slice: SdPidStr,
    unit: SdPidStr,
    user_unit: SdPidStr,
}

/// libsystemd, loaded once (dlopen: taskdiag has no link-time dependency on it).
fn sd_login() -> Option<&'static SdLogin> {
    static LIB: std::sync::OnceLock<Option<SdLogin>> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: the name is NUL-terminated; dlopen has no other precondition.
        let h = unsafe { libc::dlopen(c"libsystemd.so.0".as_ptr(), libc::RTLD_LAZY) };
        if h.is_null() {
            return None;
        }
        // SAFETY: h is a live handle (never closed); each symbol is the sd-login(3) function
        // of that name, whose C signature the field's type spells.
        unsafe {
            Some(SdLogin {
                session: dl_fn(h, c"sd_pid_get_session")?,
                machine: dl_fn(h, c"sd_pid_get_machine_name")?,
                owner_uid: dl_fn(h, c"sd_pid_get_owner_uid")?,
                seat: dl_fn(h, c"sd_session_get_seat")?,
                slice: dl_fn(h, c"sd_pid_get_slice")?,
                unit: dl_fn(h, c"sd_pid_get_unit")?,
                user_unit: dl_fn(h, c"sd_pid_get_user_unit")?,
            })
        }
    })
    .as_ref()
}

/// Calls an sd-login function that returns a malloc'ed string; `None` where it fails.
fn sd_string(f: impl FnOnce(*mut *mut libc::c_char) -> libc::c_int) -> Option<Vec<u8>> {
    let mut p: *mut libc::c_char = std::ptr::null_mut();
    let r = f(&mut p);
    if p.is_null() {
        return None;
    }
    // SAFETY: on success the function stored a NUL-terminated string it malloc'ed for the
    // caller, which is freed here once copied (also on a failure that left one).
    let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes().to_vec();
    // SAFETY: see above; p is not used again.
    unsafe { libc::free(p.cast()) };
    (r >= 0).then_some(s)
}

/// Field `f` of task `tid` as procps' `sd2proc` makes it: sd-login's answer, `-` where the
/// function fails (the seat too where the session is unknown), and `?` for every field where
/// libsystemd cannot be loaded (procps built without systemd). Read per task, as procps does:
/// sd-login reads /proc/TID/cgroup and /run/systemd itself.
pub fn sd_login_field(tid: u32, f: SdField) -> Vec<u8> {
    let Some(sd) = sd_login() else {
        return b"?".to_vec();
    };
    let pid = tid as libc::pid_t;
    // SAFETY (each call): the function takes a pid and writes a string pointer or a uid
    // through the valid pointer it is given.
    let v = match f {
        SdField::Session => sd_string(|p| unsafe { (sd.session)(pid, p) }),
        SdField::Machine => sd_string(|p| unsafe { (sd.machine)(pid, p) }),
        SdField::Slice => sd_string(|p| unsafe { (sd.slice)(pid, p) }),
        SdField::Unit => sd_string(|p| unsafe { (sd.unit)(pid, p) }),
        SdField::UserUnit => sd_string(|p| unsafe { (sd.user_unit)(pid, p) }),
        SdField::OwnerUid => {
            let mut uid: libc::uid_t = 0;
            let r = unsafe { (sd.owner_uid)(pid, &mut uid) };
            // procps: snprintf("%d", (int)uid).
            (r >= 0).then(|| (uid as i32).to_string().into_bytes())
        }
        SdField::Seat => sd_string(|p| unsafe { (sd.session)(pid, p) }).and_then(|sess| {
            let sess = std::ffi::CString::new(sess).ok()?;
            sd_string(|p| unsafe { (sd.seat)(sess.as_ptr(), p) })
        }),
    };
    v.unwrap_or_else(|| b"-".to_vec())
}

/// What smaps_rollup says, in kB, as libproc2 reads it (ps's pss and uss; top's RSS, PSS,
/// PSan, PSfd, PSsh and USS): 0 where the file cannot be read or has no such line (a kernel
/// thread's is empty), as procps leaves them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rollup {
    /// Rss.
    pub rss: u64,
    /// Pss: proportional set size.
    pub pss: u64,
    /// Pss_Anon.
    pub pss_anon: u64,
    /// Pss_File.
    pub pss_file: u64,
    /// Pss_Shmem.
    pub pss_shmem: u64,
    /// Private_Clean + Private_Dirty: the unique set size (`SMAP_PRV_TOTAL`).
    pub uss: u64,
    /// SwapPss: proportional swap (process-exporter's `proportionalSwapped`).
    pub swap_pss: u64,
}

/// [`Rollup`] of /proc/TID/smaps_rollup. Read by the printer, as procps reads it per task:
/// the sum of smaps' rounded per-mapping values (VMA_STAT) is not the rollup's Pss.
pub fn smaps_rollup(tid: u32) -> Rollup {
    read_smaps_rollup(tid).unwrap_or_default()
}

/// [`Rollup`] of /proc/TID/smaps_rollup; `None` where it cannot be read, or not now: the read
/// waits for the process's memory-map lock, and is given up on when something stuck holds it
/// (`taskdiag_procfs::stuck`).
pub fn read_smaps_rollup(tid: u32) -> Option<Rollup> {
    taskdiag_procfs::stuck::read_proc_file(tid, "smaps_rollup")
        .ok()
        .map(|b| parse_rollup(&b))
}

fn parse_rollup(buf: &[u8]) -> Rollup {
    let kb = |name: &[u8]| -> u64 {
        buf.split(|&c| c == b'\n')
            .find_map(|l| {
                let v = l.strip_prefix(name)?.strip_prefix(b":")?;
                std::str::from_utf8(v)
                    .ok()?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    Rollup {
        rss: kb(b"Rss"),
        pss: kb(b"Pss"),
        pss_anon: kb(b"Pss_Anon"),
        pss_file: kb(b"Pss_File"),
        pss_shmem: kb(b"Pss_Shmem"),
        uss: kb(b"Private_Clean") + kb(b"Private_Dirty"),
        swap_pss: kb(b"SwapPss"),
    }
}

/// /proc/PID/io's counters as libproc2 keeps them: 0 where the file could not be read (the
/// group fetched, no record); `None` where IO was not fetched.
pub fn io(io: Option<IoRec>, fetched: bool) -> Option<IoRec> {
    io.or_else(|| fetched.then(IoRec::default))
}

/// SCHED's numbers as libproc2 reads them for ps and top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedNumbers {
    /// oom_score.
    pub oom_score: i64,
    /// oom_score_adj.
    pub oom_adj: i64,
    /// The autogroup's id, -1 outside one.
    pub ag_id: i64,
    /// The autogroup's nice, 0 outside one.
    pub ag_nice: i64,
    /// loginuid as a C int: -1 when unset.
    pub luid: i64,
}

/// SCHED's numbers ([`SchedNumbers`]); where the files could not be read (the group fetched,
/// no record), what libproc2 is left with: 0, 0, -1, 0, -1. `None` where SCHED was not fetched.
pub fn sched_numbers(sched: Option<&Sched>, fetched: bool) -> Option<SchedNumbers> {
    let Some(s) = sched else {
        return fetched.then_some(SchedNumbers {
            oom_score: 0,
            oom_adj: 0,
            ag_id: -1,
            ag_nice: 0,
            luid: -1,
        });
    };
    let r = &s.rec;
    let in_group = r.flags & taskdiag_proto::SCHED_F_NO_AUTOGROUP == 0 && r.autogroup != 0;
    Some(SchedNumbers {
        oom_score: r.oom_score.into(),
        oom_adj: r.oom_score_adj.into(),
        ag_id: if in_group { r.autogroup.into() } else { -1 },
        ag_nice: if in_group { r.autogroup_nice.into() } else { 0 },
        luid: (r.loginuid as i32).into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollup_pss_and_uss_are_libproc2s() {
        let b = b"55a-7ff [rollup]\nRss:                3000 kB\nPss:                1234 kB\n\
                  Pss_Dirty:           100 kB\nPrivate_Clean:        40 kB\n\
                  Private_Dirty:       60 kB\nPrivate_Hugetlb:      8 kB\n";
        let r = parse_rollup(b);
        assert_eq!((r.rss, r.pss, r.pss_anon, r.uss), (3000, 1234, 0, 100));
        assert_eq!(parse_rollup(b""), Rollup::default());
    }

    #[test]
    fn cgroup_strings_follow_libproc2() {
        let hybrid =
            b"12:pids:/user.slice\n3:cpu:/\n1:name=systemd:/user.slice/s\x01.scope\n0::/\n";
        let cg = cgroup(hybrid, true);
        assert_eq!(
            cg,
            b"12:pids:/user.slice,1:name=systemd:/user.slice/s?.scope"
        );
        assert_eq!(cgname(cg), b"systemd:/user.slice/s?.scope");
        assert_eq!(lxc(hybrid), b"-");
        assert_eq!(cgroup(b"0::/\n", false), b"-");
        assert_eq!(cgroup(b"", false), b"-");
        let nested = b"0::/lxc.payload.outer/lxc.payload.inner/init.scope\n";
        assert_eq!(lxc(nested), b"inner");
        assert_eq!(cgname(cgroup(nested, false)), nested[..nested.len() - 1]);
        assert_eq!(
            environ(Some(b"A=1\0B=2\0"), true, false),
            Some(b"A=1 B=2".to_vec())
        );
        assert_eq!(environ(None, true, false), Some(b"-".to_vec()));
        assert_eq!(environ(None, false, false), None);
        assert_eq!(wchan(u32::MAX - 1), "?");
    }

    #[test]
    fn wchan_and_syscall_from_sched() {
        let sched = |wchan: &[u8], syscall: &[u8], flags: u32| Sched {
            rec: taskdiag_proto::SchedRec {
                flags,
                ..Default::default()
            },
            wchan: wchan.to_vec(),
            syscall: syscall.to_vec(),
            ..Default::default()
        };
        let s = sched(
            b"hrtimer_nanosleep",
            b"230 0x0 0x0 0x7ffc 0x7ffd 0x0 0x0 0x7ffc 0x7f00",
            0,
        );
        assert_eq!(
            sched_wchan(Some(&s), true).as_deref(),
            Some("hrtimer_nanosleep")
        );
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            sched_syscall(Some(&s), true, false).as_deref(),
            Some("clock_nanosleep")
        );
        // A kernel thread's file says system call 0 (its registers are zero).
        let k = sched(b"kthreadd", b"0 0x0 0x0 0x0 0x0 0x0 0x0 0x0 0x0", 0);
        assert_eq!(sched_syscall(Some(&k), true, true).as_deref(), Some("-"));
        let run = sched(b"0", b"running", 0);
        assert_eq!(sched_wchan(Some(&run), true).as_deref(), Some("-"));
        assert_eq!(
            sched_syscall(Some(&run), true, false).as_deref(),
            Some("running")
        );
        let blocked = sched(b"do_exit", b"-1 0x7ffc 0x7f00", 0);
        assert_eq!(
            sched_syscall(Some(&blocked), true, false).as_deref(),
            Some("-")
        );
        let hidden = sched(b"0", b"", taskdiag_proto::SCHED_F_SYSCALL_HIDDEN);
        assert_eq!(
            sched_syscall(Some(&hidden), true, false).as_deref(),
            Some("-")
        );
        let odd = sched(b"", b"999 0x0 0x0", 0);
        assert_eq!(sched_wchan(Some(&odd), true).as_deref(), Some("?"));
        assert_eq!(
            sched_syscall(Some(&odd), true, false).as_deref(),
            Some("999")
        );
        // Fetched without a record (the files could not be read); not fetched.
        assert_eq!(sched_wchan(None, true).as_deref(), Some("?"));
        assert_eq!(sched_syscall(None, true, false).as_deref(), Some("-"));
        assert_eq!(sched_wchan(None, false), None);
        assert_eq!(sched_syscall(None, false, false), None);
    }
}
