//! Who is on the other end of a connection, as the kernel says, and what its /proc would show.
//!
//! Identity comes only from the kernel: SO_PEERCRED (pid, uid, gid at connect()), SO_PEERGROUPS
//! (supplementary groups) and SO_PEERPIDFD (a pidfd for that process, Linux 6.5+). Nothing the
//! client writes is trusted. The rest of the caller's view is read from its own entries:
//! namespaces and capabilities from the task iterator (the daemon's `identify`), the options of
//! the /proc mounted in its mount namespace from /proc/PID/mountinfo, its id maps from
//! /proc/PID/uid_map and gid_map. Those files are read by pid, so after reading them the pidfd
//! must show the process still alive: a pid is only reused after its process is gone.
//! Applying the view to records is `taskdiag::view`'s job.
//!
//! Two things the kernel does not hand over at connect() are checked rather than assumed:
//!
//! * **Capabilities** come from the iterator's record of the peer, read when the connection is
//!   served, which may be well after connect() (a connection waits in the listen backlog until
//!   it is accepted). A client that connects and then executes a set-user-ID program would
//!   otherwise be served with that program's capabilities under its own connect-time uid. So
//!   the record's effective uid and gid must still be those SO_PEERCRED reported; if they
//!   changed, the connection is refused.
//! * **The /proc options** are those of the procfs on the peer's /proc, but a procfs instance
//!   belongs to one pid namespace, and a caller in a user namespace of its own can have a
//!   mount namespace of its own with, on /proc, a procfs of another (say, empty) pid namespace
//!   mounted without hidepid, while the daemon answers in the caller's own pid namespace. Such a
//!   mount's options say nothing about what the caller may see there. They are trusted when the
//!   caller is in the daemon's user namespace (its mount namespace can then only have been set
//!   up by privileged processes) or when the mount is the very procfs instance the daemon's own
//!   /proc is (same device: same instance, the daemon's pid namespace); otherwise the caller is
//!   served as under `hidepid=ptraceable`, the strictest mode: what any /proc of its pid
//!   namespace would show it.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use taskdiag::proto::layout::CredRec;
use taskdiag::proto::task::Task;
use taskdiag::proto::AccessRec;
use taskdiag::view::{HidePid, IdMap, ProcMount, Viewer};
use taskdiag::PidNs;
use taskdiag_procfs::parse::timens_boottime_offset;
use taskdiag_procfs::system::parse_mountinfo;

/// SO_PEERGROUPS (asm-generic/socket.h), in case libc lacks it.
const SO_PEERGROUPS: libc::c_int = 59;
/// SO_PEERPIDFD (Linux 6.5).
const SO_PEERPIDFD: libc::c_int = 77;

/// Errors identifying a peer. Each names the pid or file involved.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// A getsockopt() on the connection failed.
    #[error("reading the peer's credentials ({what}): {source}")]
    Sockopt {
        /// The option.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The peer is in a pid namespace the daemon cannot see.
    #[error("the client's process is not visible in the daemon's pid namespace")]
    Invisible,
    /// The peer exited while it was being identified.
    #[error("client process {pid} exited while it was being identified")]
    Gone {
        /// Its pid.
        pid: u32,
    },
    /// One of the peer's /proc files could not be read.
    #[error("{path}: {source}")]
    Proc {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// One of the peer's /proc files did not parse.
    #[error("{path}: unexpected format")]
    Format {
        /// The file.
        path: String,
    },
    /// The peer is not what it was when it was identified (see [`Peer::revalidate`]).
    #[error("client process {pid} {what} since it connected; connect again")]
    Changed {
        /// Its pid.
        pid: u32,
        /// What changed.
        what: &'static str,
    },
    /// Looking the peer up failed.
    #[error("identifying client process {pid}: {message}")]
    Identify {
        /// Its pid.
        pid: u32,
        /// The error.
        message: String,
    },
    /// The peer's credentials are no longer those it connected with (it executed a
    /// set-user-ID or set-group-ID program, or changed ids, since connect()).
    #[error(
        "client process {pid} changed its credentials since it connected (uid {uid} gid {gid} \
         at connect(), euid {euid} egid {egid} now); connect again"
    )]
    CredentialsChanged {
        /// Its pid.
        pid: u32,
        /// Effective uid at connect().
        uid: u32,
        /// Effective gid at connect().
        gid: u32,
        /// Effective uid now.
        euid: u32,
        /// Effective gid now.
        egid: u32,
    },
}

/// A connected client, as the kernel identifies it.
#[derive(Debug)]
pub struct Peer {
    /// What the task iterator said of it when it was identified ([`Peer::viewer`]), for
    /// [`Peer::revalidate`] to compare with.
    identified: std::sync::OnceLock<Identity>,
    /// Its thread-group id in the daemon's pid namespace.
    pub pid: u32,
    /// Its effective uid at connect() (in the daemon's user namespace).
    pub uid: u32,
    /// Its effective gid at connect().
    pub gid: u32,
    /// Its supplementary groups at connect().
    pub groups: Vec<u32>,
    pidfd: Option<OwnedFd>,
}

fn sockopt<T>(fd: i32, opt: libc::c_int, what: &'static str, v: &mut T) -> Result<u32, PeerError> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a valid, writable T of `len` bytes; the kernel writes at most `len` bytes
    // and reports how many it wrote.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (v as *mut T).cast::<libc::c_void>(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(PeerError::Sockopt {
            what,
            source: io::Error::last_os_error(),
        });
    }
    Ok(len)
}

impl Peer {
    /// The peer of a connected Unix stream socket.
    pub fn of(sock: &UnixStream) -> Result<Peer, PeerError> {
        let fd = sock.as_raw_fd();
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        sockopt(fd, libc::SO_PEERCRED, "SO_PEERCRED", &mut cred)?;
        if cred.pid <= 0 {
            return Err(PeerError::Invisible);
        }
        let mut groups = [0u32; 1024];
        let mut len = std::mem::size_of_val(&groups) as libc::socklen_t;
        // SAFETY: `groups` is writable for `len` bytes; the kernel reports the length used (or
        // ERANGE with the length needed, which we treat as an error).
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast::<libc::c_void>(),
                &mut len,
            )
        };
        let groups = if r == 0 {
            groups[..(len as usize / 4).min(groups.len())].to_vec()
        } else {
            return Err(PeerError::Sockopt {
                what: "SO_PEERGROUPS",
                source: io::Error::last_os_error(),
            });
        };
        let mut pidfd: libc::c_int = -1;
        let pidfd = match sockopt(fd, SO_PEERPIDFD, "SO_PEERPIDFD", &mut pidfd) {
            // SAFETY: a successful SO_PEERPIDFD returns a new file descriptor that we own.
            Ok(_) if pidfd >= 0 => Some(unsafe { OwnedFd::from_raw_fd(pidfd) }),
            // Before 6.5: a pidfd opened now. The pid could have been reused since connect()
            // only if the client exited, and then the connection is dead anyway.
            _ => pidfd_open(cred.pid as u32),
        };
        Ok(Peer {
            identified: std::sync::OnceLock::new(),
            pid: cred.pid as u32,
            uid: cred.uid,
            gid: cred.gid,
            groups,
            pidfd,
        })
    }

    /// Whether the peer process still exists (so what was read by its pid was its own). A
    /// pidfd becomes readable when its process exits; polling it needs no permission over the
    /// process (signal 0 would, and the daemon has none).
    pub fn alive(&self) -> bool {
        let Some(fd) = &self.pidfd else { return false };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r == 0
    }

    fn read(&self, file: &str) -> Result<Vec<u8>, PeerError> {
        let path = format!("/proc/{}/{file}", self.pid);
        fs::read(&path).map_err(|source| PeerError::Proc { path, source })
    }

    /// The peer's view: `me` is the task record of the peer from the daemon's iterator
    /// (`Dumper::identify`), `root` its root directory as the daemon's paths name it (`/` for
    /// the daemon's own; `None` where the programs cannot tell: `Dumper::root_of`), `own` the
    /// daemon's own namespaces.
    pub fn viewer(
        &self,
        me: &Task,
        root: Option<Vec<u8>>,
        own: &OwnNamespaces,
    ) -> Result<Viewer, PeerError> {
        let access = me.access.ok_or(PeerError::Gone { pid: self.pid })?;
        if unsettled(&access) {
            return Err(PeerError::Changed {
                pid: self.pid,
                what: "began executing a program",
            });
        }
        // The capabilities of the process now are those it connected with only if it has not
        // executed a set-user-ID or set-group-ID program meanwhile (see the module doc). Without
        // a CRED record, no capabilities.
        let cap_effective = match me.cred.as_ref() {
            Some(c) if c.rec.euid != self.uid || c.rec.egid != self.gid => {
                return Err(PeerError::CredentialsChanged {
                    pid: self.pid,
                    uid: self.uid,
                    gid: self.gid,
                    euid: c.rec.euid,
                    egid: c.rec.egid,
                })
            }
            Some(c) => c.rec.cap_effective,
            None => 0,
        };
        let init_userns = access.userns == own.userns;
        let mountinfo = self.read("mountinfo")?;
        let (mut proc_mount, proc_dev) =
            topmost_proc(&mountinfo).ok_or_else(|| PeerError::Format {
                path: format!("/proc/{}/mountinfo", self.pid),
            })?;
        if !init_userns && (proc_dev.is_none() || proc_dev != own.proc_dev) {
            // A /proc the caller's own user namespace may have put there (see the module doc).
            proc_mount = ProcMount {
                hidepid: HidePid::Ptraceable,
                gid: None,
            };
        }
        let map = |file: &str| -> Result<Option<IdMap>, PeerError> {
            let text = self.read(file)?;
            let m = std::str::from_utf8(&text).ok().and_then(IdMap::parse);
            let m = m.ok_or_else(|| PeerError::Format {
                path: format!("/proc/{}/{file}", self.pid),
            })?;
            Ok((!m.is_identity()).then_some(m))
        };
        let (uid_map, gid_map) = (map("uid_map")?, map("gid_map")?);
        // The caller's /proc shows start times in its time namespace (where the kernel's does):
        // ours are shifted by the difference of the two namespaces' boottime offsets.
        let boottime_shift_ns = if own.shifts_start_times {
            let path = format!("/proc/{}/timens_offsets", self.pid);
            boottime_offset(&path).map_err(|source| PeerError::Proc { path, source })?
                - own.boottime_offset_ns
        } else {
            0
        };
        if !self.alive() {
            return Err(PeerError::Gone { pid: self.pid });
        }
        let _ = self.identified.set(Identity::of(me, access));
        Ok(Viewer {
            tgid: self.pid,
            tg_start_ns: access.tg_start_ns,
            exec_id: access.exec_id,
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
            cap_effective,
            userns: access.userns,
            init_userns,
            pidns: (access.pidns != own.pidns).then_some(PidNs {
                inum: access.pidns,
                level: u32::from(access.pidns_level),
            }),
            proc_mount,
            root: root.clone().filter(|r| r != b"/"),
            root_unknown: root.is_none(),
            uid_map,
            gid_map,
            foreign_cgroupns: Some(cgroupns_of(me)).filter(|&c| c != own.cgroupns),
            boottime_shift_ns,
            attach_as_read: attach_as_read()?,
        })
    }
}

/// The cgroup namespace of a task record's NS group; 0 without one (or where withheld).
fn cgroupns_of(t: &Task) -> u32 {
    t.ns.as_ref().map_or(0, |n| n.rec.cgroup)
}

/// What identifies a caller beyond its pid: which process and program image it is, and with
/// which credentials and namespaces. Anything else may change between requests.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    tg_start_ns: u64,
    exec_id: u64,
    userns: u32,
    pidns: u32,
    /// The cgroup namespace (0 if the NS record was missing).
    cgroupns: u32,
    cred: Option<CredRec>,
    groups: Vec<u32>,
    /// The credentials in ACCESS (always there, CRED or not).
    ids: [u32; 6],
    cap_permitted: u64,
    /// The process was executing a program, or changed while its record was read
    /// (ACCESS_F_EXEC, ACCESS_F_CHANGED): its credentials and program may not belong together.
    unsettled: bool,
}

impl Identity {
    fn of(t: &Task, a: AccessRec) -> Identity {
        Identity {
            tg_start_ns: a.tg_start_ns,
            exec_id: a.exec_id,
            userns: a.userns,
            pidns: a.pidns,
            cgroupns: cgroupns_of(t),
            cred: t.cred.as_ref().map(|c| c.rec),
            groups: t.cred.as_ref().map_or_else(Vec::new, |c| c.groups.clone()),
            ids: [a.uid, a.euid, a.suid, a.gid, a.egid, a.sgid],
            cap_permitted: a.cap_permitted,
            unsettled: unsettled(&a),
        }
    }

    /// How `now` differs from this identity, in words, if it does.
    fn change(&self, now: &Identity) -> Option<&'static str> {
        if now.tg_start_ns != self.tg_start_ns {
            Some("exited (its pid now names another process)")
        } else if now.unsettled {
            Some("began executing a program")
        } else if now.exec_id != self.exec_id {
            Some("executed a program")
        } else if now.cred != self.cred
            || now.groups != self.groups
            || now.ids != self.ids
            || now.cap_permitted != self.cap_permitted
        {
            Some("changed its credentials")
        } else if now.userns != self.userns
            || now.pidns != self.pidns
            || now.cgroupns != self.cgroupns
        {
            Some("changed its namespaces")
        } else {
            None
        }
    }
}

impl Peer {
    /// Checks, before a request is answered, that the caller is still who it was when it was
    /// identified: `now` is the task iterator's record of the peer's pid taken now
    /// (`Dumper::identify`). The process must be alive (its pidfd), be the same process (its
    /// start time), run the same program (no exec since: a set-user-ID program would
    /// otherwise be served as its own under the caller's view) with the same credentials and
    /// namespaces. Else the request is refused: the caller connects again and is identified
    /// anew. `NoSuchTask` from the iterator is [`PeerError::Gone`].
    pub fn revalidate(&self, now: Result<Task, taskdiag::Error>) -> Result<(), PeerError> {
        let gone = PeerError::Gone { pid: self.pid };
        let Some(before) = self.identified.get() else {
            return Err(gone);
        };
        let now = match now {
            Ok(t) => t,
            Err(taskdiag::Error::NoSuchTask { .. }) => return Err(gone),
            Err(e) => {
                return Err(PeerError::Identify {
                    pid: self.pid,
                    message: e.to_string(),
                })
            }
        };
        let Some(access) = now.access else {
            return Err(gone);
        };
        if !self.alive() {
            return Err(gone);
        }
        match before.change(&Identity::of(&now, access)) {
            None => Ok(()),
            Some(what) => Err(PeerError::Changed {
                pid: self.pid,
                what,
            }),
        }
    }
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative return is a new descriptor that we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The daemon's own namespaces, to tell whether a client shares them.
#[derive(Debug, Clone, Copy)]
pub struct OwnNamespaces {
    /// Inode number of the daemon's pid namespace.
    pub pidns: u32,
    /// Inode number of its user namespace.
    pub userns: u32,
    /// Inode number of its cgroup namespace.
    pub cgroupns: u32,
    /// Device (major, minor) of the procfs instance on the daemon's /proc, if any.
    pub proc_dev: Option<(u32, u32)>,
    /// The boottime offset of its time namespace (ns; 0 in the initial one, or without time
    /// namespaces): its answers' start times have it added, as its /proc shows them.
    pub boottime_offset_ns: i64,
    /// Whether the kernel's /proc adds a reader's boottime offset to the start times it shows
    /// (since 5.11): by its release here; the daemon asks the kernel itself at start-up, while
    /// it may ([`crate::privs::timens_shifts_start_times`]).
    pub shifts_start_times: bool,
}

impl OwnNamespaces {
    /// Reads them from /proc/self/ns and /proc/self/mountinfo.
    pub fn read() -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let ino = |p: &str| fs::metadata(p).map(|m| m.ino() as u32);
        let mountinfo = fs::read("/proc/self/mountinfo")?;
        Ok(OwnNamespaces {
            pidns: ino("/proc/self/ns/pid")?,
            userns: ino("/proc/self/ns/user")?,
            cgroupns: ino("/proc/self/ns/cgroup")?,
            proc_dev: topmost_proc(&mountinfo).and_then(|(_, dev)| dev),
            boottime_offset_ns: boottime_offset("/proc/self/timens_offsets")?,
            shifts_start_times: taskdiag_procfs::release_shifts_start_times(),
        })
    }
}

/// Whether the process was executing a program, or changed while its record was read
/// (ACCESS_F_EXEC, ACCESS_F_CHANGED): its credentials and program may not belong together.
fn unsettled(a: &AccessRec) -> bool {
    a.flags & (taskdiag::proto::ACCESS_F_EXEC | taskdiag::proto::ACCESS_F_CHANGED) != 0
}

/// Whether ptrace-attach is decided as ptrace-read is: without Yama (no such file) or with its
/// ptrace_scope 0. Read when a caller is identified (root may change the scope at any time).
fn attach_as_read() -> Result<bool, PeerError> {
    const PATH: &str = "/proc/sys/kernel/yama/ptrace_scope";
    match fs::read(PATH) {
        Ok(text) => Ok(taskdiag_procfs::system::parse_sysctl_number(&text) == Ok(0)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(PeerError::Proc {
            path: PATH.into(),
            source,
        }),
    }
}

/// The boottime offset in a timens_offsets file; 0 where there is none (a kernel without time
/// namespaces).
fn boottime_offset(path: &str) -> io::Result<i64> {
    match fs::read(path) {
        Ok(text) => timens_boottime_offset(&text)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {e}"))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// The options of the procfs mounted on /proc in a mountinfo listing (the last such mount, the
/// one on top). No procfs on /proc: default options. `None` if the listing does not parse.
pub fn proc_mount(mountinfo: &[u8]) -> Option<ProcMount> {
    topmost_proc(mountinfo).map(|(m, _)| m)
}

/// [`proc_mount`] and the device (major, minor) of that procfs instance (`None` without one).
pub fn topmost_proc(mountinfo: &[u8]) -> Option<(ProcMount, Option<(u32, u32)>)> {
    let mut found = (ProcMount::default(), None);
    for m in parse_mountinfo(mountinfo) {
        let m = m.ok()?;
        if m.mount_point == b"/proc" && m.fstype == b"proc" {
            let opts = std::str::from_utf8(m.super_options).ok()?;
            found = (ProcMount::parse_options(opts)?, Some((m.major, m.minor)));
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topmost_proc_mount_decides() {
        let mi = b"22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                   30 22 0:40 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n\
                   41 22 0:45 / /proc rw,nosuid - proc proc rw,hidepid=invisible,gid=27\n";
        let m = proc_mount(mi).unwrap();
        assert_eq!(m.hidepid, HidePid::Invisible);
        assert_eq!(m.gid, Some(27));
        assert_eq!(proc_mount(b"").unwrap(), ProcMount::default());
        assert_eq!(proc_mount(b"garbage"), None);
        assert_eq!(topmost_proc(mi).unwrap().1, Some((0, 45)));
        assert_eq!(topmost_proc(b"").unwrap().1, None);
        // A mount point that is not UTF-8 does not stop the listing from parsing.
        assert_eq!(
            topmost_proc(b"50 22 0:46 / /mnt/\xff rw - tmpfs tmpfs rw\n").unwrap(),
            (ProcMount::default(), None)
        );
    }

    #[test]
    fn a_connected_socket_names_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = Peer::of(&a).unwrap();
        assert_eq!(p.pid, std::process::id());
        // SAFETY: geteuid has no preconditions.
        assert_eq!(p.uid, unsafe { libc::geteuid() });
        assert!(p.alive());
    }
}
