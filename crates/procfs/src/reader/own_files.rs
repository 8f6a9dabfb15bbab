//! The groups /proc keeps in files of their own, each read, refused or missing on its own:
//! CGROUP (`cgroup`, and the inode of the task's directory in the cgroup2 mount for its id),
//! IO (`io`), PATHS (the `exe`, `cwd` and `root` links), ENVIRON (`environ`), SCHED
//! (`wchan`, `syscall`, `oom_score`, `oom_score_adj`, `loginuid`, `sessionid`, `autogroup`; its
//! affinity lines come from status, read by the caller), SECURITY's label (`attr/current`;
//! its seccomp lines come from status too), KSTACK (`stack`) and WCHAN (`wchan`).
//!
//! [`ProcReader::task`] calls these between opening status and reading it, like NS and FILES:
//! if the pid was reused meanwhile, the read of status fails and the task is skipped, so no
//! message mixes two tasks. That read, not these, also tells a task that is gone: a file that
//! fails with ENOENT or ESRCH fails so for a zombie as well (environ and the links, on recent
//! kernels). A file /proc refuses (EACCES or EPERM: the reader may not ptrace-read the task)
//! is a refusal of that group alone.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::AsRawFd;

use taskdiag_proto::task::{Paths, Sched};
use taskdiag_proto::{IoRec, SchedRec, SCHED_F_NO_AUTOGROUP, SCHED_F_SYSCALL_HIDDEN};

use super::{openat, read_all, read_mm, read_seq, readlinkat, ProcReader, ProcfsError, Result};
use super::{Scratch, TaskPath};
use crate::parse::{
    cgroup_v2_paths, parse_autogroup, parse_io, parse_number_file, parse_schedstat,
};
use crate::system::{parse_mountinfo, unescape_octal};

/// What reading one group's file gave.
pub(super) enum Got<T> {
    /// The data.
    Read(T),
    /// /proc refused it with this errno (EACCES, EPERM; ENOENT, ESRCH where the task has
    /// nothing to show, or is gone, which the read of status tells).
    Refused(i32),
}

/// The unified cgroup hierarchy as mounted for this reader: where a task's `0::PATH` names a
/// directory whose inode number is the cgroup's id.
pub(super) struct Cgroup2 {
    /// Where it is mounted. (A path, not an open directory: a reader kept for long, as
    /// taskdiagd's, holds no descriptor for it.)
    mount_point: Vec<u8>,
    /// The cgroup directory at the mount's root, as /proc/PID/cgroup paths name it.
    root: Vec<u8>,
}

impl Cgroup2 {
    /// The first cgroup2 mount of `mountinfo` that shows the whole hierarchy this reader's
    /// cgroup namespace sees (root `/`), else the first one at all.
    pub(super) fn find(mountinfo: &[u8]) -> Option<Self> {
        let mounts: Vec<_> = parse_mountinfo(mountinfo)
            .filter_map(|m| m.ok())
            .filter(|m| m.fstype == b"cgroup2")
            .collect();
        let m = mounts.iter().find(|m| m.root == b"/").or(mounts.first())?;
        Some(Cgroup2 {
            mount_point: unescape_octal(m.mount_point),
            root: unescape_octal(m.root),
        })
    }

    /// The directory of the cgroup at `path` (as /proc/PID/cgroup names it) under this mount;
    /// `None` if it is not under this mount.
    pub(super) fn dir(&self, path: &[u8]) -> Option<Vec<u8>> {
        let rel = match path.strip_prefix(&self.root[..]) {
            Some(r) if self.root == b"/" || r.is_empty() || r.starts_with(b"/") => r,
            _ => return None,
        };
        let rel = rel.strip_prefix(b"/").unwrap_or(rel);
        if rel.split(|&c| c == b'/').any(|c| c == b"..") {
            return None;
        }
        let mut full = self.mount_point.clone();
        if !rel.is_empty() {
            full.push(b'/');
            full.extend_from_slice(rel);
        }
        Some(full)
    }

    /// The id of the cgroup at `path` (as /proc/PID/cgroup names it): its directory's inode
    /// number; 0 if it is not under this mount or no longer exists.
    fn id(&self, path: &[u8]) -> u64 {
        let Some(full) = self.dir(path) else { return 0 };
        let Ok(c) = CString::new(full) else { return 0 };
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `c` is NUL-terminated and `st` is writable for a `struct stat`; the kernel
        // keeps neither pointer.
        let r = unsafe {
            libc::fstatat(
                libc::AT_FDCWD,
                c.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return 0;
        }
        // SAFETY: fstatat succeeded, so it filled `st`.
        unsafe { st.assume_init() }.st_ino
    }
}

/// The directory of the cgroup `path` names (as /proc/PID/cgroup shows it, in this process's
/// cgroup namespace) on this process's cgroup2 mount (from /proc/self/mountinfo); `None`
/// without a cgroup2 mount.
pub fn cgroup2_dir(path: &[u8]) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let mountinfo = std::fs::read("/proc/self/mountinfo").ok()?;
    let dir = Cgroup2::find(&mountinfo)?.dir(path)?;
    Some(std::ffi::OsString::from_vec(dir).into())
}

/// Per-worker memory of cgroup ids by path: most tasks share a few cgroups.
#[derive(Default)]
pub(super) struct CgroupIds(HashMap<Vec<u8>, u64>);

impl ProcReader {
    /// The cgroup2 mount, found in /proc/self/mountinfo on first use.
    fn cgroup2(&self) -> Option<&Cgroup2> {
        self.cgroup2
            .get_or_init(|| {
                let path = self.root.join("self/mountinfo");
                std::fs::read(path).ok().and_then(|b| Cgroup2::find(&b))
            })
            .as_ref()
    }

    /// Opens and reads file `name` of the task in `path`'s directory into `buf`.
    fn own_file(
        &self,
        path: &mut TaskPath,
        name: &[u8],
        buf: &mut Vec<u8>,
        seq: bool,
    ) -> Result<Got<()>> {
        let io_err = |path: &mut TaskPath, source| {
            path.file(name);
            ProcfsError::Io {
                path: path.display(&self.root),
                source,
            }
        };
        let fd = match openat(self.dir.as_raw_fd(), path.file(name), libc::O_RDONLY) {
            Ok(fd) => fd,
            Err(e) => {
                return match refused(&e) {
                    Some(g) => Ok(g),
                    None => Err(io_err(path, e)),
                }
            }
        };
        let r = if seq {
            read_seq(&fd, buf)
        } else {
            read_all(&fd, buf)
        };
        match r {
            Ok(()) => Ok(Got::Read(())),
            Err(e) => match refused(&e) {
                Some(g) => Ok(g),
                None => Err(io_err(path, e)),
            },
        }
    }

    /// CGROUP: the id and the text of the task's cgroup file.
    pub(super) fn cgroup(&self, s: &mut Scratch) -> Result<Got<(u64, Vec<u8>)>> {
        let mut text = Vec::new();
        match self.own_file(&mut s.path, b"cgroup", &mut text, true)? {
            Got::Read(()) => {}
            Got::Refused(e) => return Ok(Got::Refused(e)),
        }
        let id = match (cgroup_v2_paths(&text).next(), self.cgroup2()) {
            (Some(p), Some(mount)) => match s.cgroup_ids.0.get(p) {
                Some(&id) => id,
                None => {
                    let id = mount.id(p);
                    s.cgroup_ids.0.insert(p.to_vec(), id);
                    id
                }
            },
            _ => 0,
        };
        Ok(Got::Read((id, text)))
    }

    /// IO: the counters of the task's io file.
    pub(super) fn io(&self, s: &mut Scratch) -> Result<Got<IoRec>> {
        let mut buf = std::mem::take(&mut s.own);
        let got = self.own_file(&mut s.path, b"io", &mut buf, false);
        let r = match got {
            Ok(Got::Read(())) => match parse_io(&buf) {
                Ok([rchar, wchar, syscr, syscw, read_bytes, write_bytes, cancelled]) => {
                    Ok(Got::Read(IoRec {
                        rchar,
                        wchar,
                        syscr,
                        syscw,
                        read_bytes,
                        write_bytes,
                        cancelled_write_bytes: cancelled,
                    }))
                }
                Err(source) => {
                    s.path.file(b"io");
                    Err(ProcfsError::Parse {
                        path: s.path.display(&self.root),
                        source,
                    })
                }
            },
            Ok(Got::Refused(e)) => Ok(Got::Refused(e)),
            Err(e) => Err(e),
        };
        s.own = buf;
        r
    }

    /// ENVIRON: the bytes of the task's environ file; empty for a task without an address
    /// space, whose file reads empty (or, on recent kernels, fails with ESRCH).
    /// ENVIRON: the bytes of the task's environ file, a read of process `tgid`'s memory
    /// (bounded: see [`crate::stuck`]).
    pub(super) fn environ(&self, s: &mut Scratch, tgid: u32) -> Result<Got<Vec<u8>>> {
        let mut buf = Vec::new();
        let fd = match openat(
            self.dir.as_raw_fd(),
            s.path.file(b"environ"),
            libc::O_RDONLY,
        ) {
            Ok(fd) => fd,
            Err(e) => return self.environ_error(s, e),
        };
        match read_mm(s.slot.as_deref(), tgid, &fd, &mut buf, false) {
            Ok(()) => Ok(Got::Read(buf)),
            Err(e) => self.environ_error(s, e),
        }
    }

    fn environ_error(&self, s: &mut Scratch, e: std::io::Error) -> Result<Got<Vec<u8>>> {
        match refused(&e) {
            Some(Got::Refused(libc::ESRCH | libc::ENOENT)) => Ok(Got::Read(Vec::new())),
            Some(g) => Ok(g),
            None => Err(ProcfsError::Io {
                path: s.path.display(&self.root),
                source: e,
            }),
        }
    }

    /// KSTACK: the bytes of the task's stack file, refused (EACCES) to a reader without
    /// CAP_SYS_ADMIN, as the file is; empty for a task that has no stack to show.
    pub(super) fn kstack(&self, s: &mut Scratch) -> Result<Got<Vec<u8>>> {
        self.whole_file(s, b"stack")
    }

    /// WCHAN: the bytes of the task's wchan file (`0` where the reader may not ptrace-read the
    /// task, as the kernel prints it); empty without one (a kernel without CONFIG_KALLSYMS),
    /// as SCHED's wchan.
    pub(super) fn wchan(&self, s: &mut Scratch) -> Result<Got<Vec<u8>>> {
        self.whole_file(s, b"wchan")
    }

    /// The bytes of the task's file `name`, read whole; ESRCH or ENOENT (a task with nothing
    /// to show there) reads as empty.
    fn whole_file(&self, s: &mut Scratch, name: &[u8]) -> Result<Got<Vec<u8>>> {
        let mut buf = Vec::new();
        Ok(match self.own_file(&mut s.path, name, &mut buf, false)? {
            Got::Read(()) => Got::Read(buf),
            Got::Refused(libc::ESRCH | libc::ENOENT) => Got::Read(Vec::new()),
            Got::Refused(e) => Got::Refused(e),
        })
    }

    /// SCHED, but for the affinity lines of status (see [`ProcReader::task`]): its small
    /// scheduling and accounting files, each on its own (one that cannot be read keeps its
    /// default); syscall, refused to readers that may not ptrace-attach, is withheld
    /// ([`SCHED_F_SYSCALL_HIDDEN`]); without an autogroup file, [`SCHED_F_NO_AUTOGROUP`].
    pub(super) fn sched(&self, s: &mut Scratch) -> Result<Got<Sched>> {
        let mut buf = std::mem::take(&mut s.own);
        let r = self.sched_into(s, &mut buf);
        s.own = buf;
        r
    }

    fn sched_into(&self, s: &mut Scratch, buf: &mut Vec<u8>) -> Result<Got<Sched>> {
        let mut sc = Sched::default();
        let mut rec = SchedRec::default();
        let bad = |s: &mut Scratch, name: &[u8], source| {
            s.path.file(name);
            ProcfsError::Parse {
                path: s.path.display(&self.root),
                source,
            }
        };
        let number = |s: &mut Scratch, name: &[u8], buf: &mut Vec<u8>| -> Result<Got<i64>> {
            Ok(match self.own_file(&mut s.path, name, buf, false)? {
                Got::Read(()) => Got::Read(parse_number_file(buf).map_err(|e| bad(s, name, e))?),
                Got::Refused(e) => Got::Refused(e),
            })
        };
        // Each file on its own, as procps reads them: one a kernel lacks (loginuid and
        // sessionid without CONFIG_AUDIT) keeps procps' default, 0 or -1 (unset).
        let mut nums = [0i64, 0, u32::MAX.into(), u32::MAX.into()];
        for (i, name) in [
            &b"oom_score"[..],
            b"oom_score_adj",
            b"loginuid",
            b"sessionid",
        ]
        .into_iter()
        .enumerate()
        {
            if let Got::Read(v) = number(s, name, buf)? {
                nums[i] = v;
            }
        }
        rec.oom_score = nums[0] as u32;
        rec.oom_score_adj = nums[1] as i32;
        rec.loginuid = nums[2] as u32;
        rec.sessionid = nums[3] as u32;
        match self.own_file(&mut s.path, b"autogroup", buf, false)? {
            Got::Read(()) => {
                if let Some(ag) = parse_autogroup(buf).map_err(|e| bad(s, b"autogroup", e))? {
                    (rec.autogroup, rec.autogroup_nice) = ag;
                }
            }
            Got::Refused(_) => rec.flags |= SCHED_F_NO_AUTOGROUP,
        }
        // Without CONFIG_KALLSYMS there is no wchan file: an empty text.
        if let Got::Read(()) = self.own_file(&mut s.path, b"wchan", buf, false)? {
            sc.wchan = buf.clone();
        }
        match self.own_file(&mut s.path, b"syscall", buf, false)? {
            Got::Read(()) => sc.syscall = buf.strip_suffix(b"\n").unwrap_or(buf).to_vec(),
            Got::Refused(_) => rec.flags |= SCHED_F_SYSCALL_HIDDEN,
        }
        sc.rec = rec;
        Ok(Got::Read(sc))
    }

    /// DELAY's schedstat numbers (run, wait, timeslices); the caller adds stat field 42.
    pub(super) fn schedstat(&self, s: &mut Scratch) -> Result<Got<[u64; 3]>> {
        let mut buf = std::mem::take(&mut s.own);
        let got = self.own_file(&mut s.path, b"schedstat", &mut buf, false);
        let r = match got {
            Ok(Got::Read(())) => parse_schedstat(&buf).map(Got::Read).map_err(|source| {
                s.path.file(b"schedstat");
                ProcfsError::Parse {
                    path: s.path.display(&self.root),
                    source,
                }
            }),
            Ok(Got::Refused(e)) => Ok(Got::Refused(e)),
            Err(e) => Err(e),
        };
        s.own = buf;
        r
    }

    /// SECURITY's label: /proc/PID/attr/current's bytes, or why it cannot be read (EINVAL
    /// where no security module gives one). The status lines are the caller's.
    pub(super) fn label(&self, s: &mut Scratch) -> Result<std::result::Result<Vec<u8>, u16>> {
        let mut buf = Vec::new();
        match openat(
            self.dir.as_raw_fd(),
            s.path.file(b"attr/current"),
            libc::O_RDONLY,
        ) {
            Ok(fd) => match read_all(&fd, &mut buf) {
                Ok(()) => Ok(Ok(buf)),
                Err(e) => Ok(Err(e.raw_os_error().unwrap_or(libc::EIO) as u16)),
            },
            Err(e) => Ok(Err(e.raw_os_error().unwrap_or(libc::EIO) as u16)),
        }
    }

    /// PATHS: readlink of the task's exe, cwd and root. A link that does not resolve keeps its
    /// errno (ENOENT for a kernel thread's exe or a zombie's links, EACCES where the reader
    /// may not ptrace-read the task).
    pub(super) fn paths(&self, s: &mut Scratch) -> Result<Paths> {
        // One buffer per worker, kept across tasks: a path and " (deleted)" fit it.
        s.link.resize(libc::PATH_MAX as usize + 16, 0);
        let one = |s: &mut Scratch, name: &[u8]| -> Result<std::result::Result<Vec<u8>, u8>> {
            match readlinkat(self.dir.as_raw_fd(), s.path.file(name), &mut s.link) {
                Ok(n) => Ok(Ok(s.link[..n].to_vec())),
                // Whatever readlink says is that link's answer (ENAMETOOLONG for a directory
                // deeper than PATH_MAX, say), as procps keeps an empty or `-` path.
                Err(e) => match e.raw_os_error().and_then(|n| u8::try_from(n).ok()) {
                    Some(errno) if errno != 0 => Ok(Err(errno)),
                    _ => Err(ProcfsError::Io {
                        path: s.path.display(&self.root),
                        source: e,
                    }),
                },
            }
        };
        let exe = one(s, b"exe")?;
        let cwd = one(s, b"cwd")?;
        let root = one(s, b"root")?;
        // A zombie's links are ENOENT like a reaped task's; the read of status that follows
        // tells the two apart (it fails only for the reaped one).
        Ok(Paths { exe, cwd, root })
    }
}

/// EACCES, EPERM, ENOENT and ESRCH are refusals (see [`Got::Refused`]); `None` for others.
fn refused<T>(e: &std::io::Error) -> Option<Got<T>> {
    match e.raw_os_error() {
        Some(
            errno @ (libc::EACCES
            | libc::EPERM
            | libc::ENOENT
            | libc::ESRCH
            | taskdiag_proto::ERRNO_MM_BUSY),
        ) => Some(Got::Refused(errno)),
        _ => None,
    }
}
