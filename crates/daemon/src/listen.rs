//! The listening socket: systemd socket activation, or a socket of our own; readiness
//! notification.
//!
//! Under socket activation (`LISTEN_PID` = our pid, `LISTEN_FDS` = 1) the socket is fd 3 and
//! systemd owns its path and mode. Otherwise the daemon binds the path itself, world-connectable
//! (mode 0666: who may see what is decided per request, not by who may connect), after making
//! sure no other daemon answers there; a stale socket file left by a dead daemon is replaced.

use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// The first descriptor systemd passes (SD_LISTEN_FDS_START).
const LISTEN_FDS_START: RawFd = 3;

/// Errors setting up the socket. Each names the path.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Another process answers on the path.
    #[error("{}: another taskdiagd is already listening there", .0.display())]
    InUse(PathBuf),
    /// The path exists and is not a socket.
    #[error("{}: exists and is not a socket; not replacing it", .0.display())]
    NotSocket(PathBuf),
    /// A system call on the path failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// LISTEN_FDS names something we cannot use.
    #[error("socket activation: {0}")]
    Activation(String),
}

/// Where the daemon listens.
pub struct Listening {
    /// The listener.
    pub listener: UnixListener,
    /// The path we created (to remove at exit); `None` under socket activation.
    pub created: Option<PathBuf>,
}

/// The descriptor systemd passes if this process was socket-activated (`LISTEN_PID` is ours,
/// `LISTEN_FDS` is 1), checked without taking it: for closing every other inherited one.
pub fn activation_fd() -> Option<RawFd> {
    let pid = std::env::var("LISTEN_PID").ok()?.parse::<u32>().ok()?;
    (pid == std::process::id() && std::env::var("LISTEN_FDS").ok()? == "1")
        .then_some(LISTEN_FDS_START)
}

/// The socket systemd passed, if we were socket-activated.
pub fn activated() -> Result<Option<UnixListener>, ListenError> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(None);
    };
    if pid.parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(None);
    }
    // Not for our children.
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    if fds != "1" {
        return Err(ListenError::Activation(format!(
            "LISTEN_FDS={fds}: expected exactly one socket"
        )));
    }
    let fd = LISTEN_FDS_START;
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `ty` is a writable c_int of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 || ty != libc::SOCK_STREAM {
        return Err(ListenError::Activation(
            "fd 3 is not a stream socket (ListenStream= in the .socket unit)".into(),
        ));
    }
    // SAFETY: fd 3 is ours by the socket activation protocol (LISTEN_PID is our pid), and it
    // is a listening stream socket; nothing else in this process owns it.
    let l = unsafe { UnixListener::from_raw_fd(fd) };
    // systemd's NonBlocking=yes would make accept() fail with EAGAIN; we block in accept().
    l.set_nonblocking(false)
        .map_err(|e| ListenError::Activation(format!("fd 3: {e}")))?;
    // SAFETY: FD_CLOEXEC on a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(Some(l))
}

/// Binds `path`, world-connectable.
pub fn bind(path: &Path) -> Result<Listening, ListenError> {
    let io_err = |source| ListenError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => return Err(ListenError::NotSocket(path.into())),
        Ok(_) => {
            if UnixStream::connect(path).is_ok() {
                return Err(ListenError::InUse(path.into()));
            }
            std::fs::remove_file(path).map_err(io_err)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(io_err)?;
    Ok(Listening {
        listener,
        created: Some(path.to_path_buf()),
    })
}

/// How to tell systemd we are ready (Type=notify), if it asked (`NOTIFY_SOCKET`). Made before
/// the daemon confines itself: the system call filter allows sending, not making a socket.
#[derive(Debug)]
pub struct Notifier(Option<(UnixDatagram, std::ffi::OsString)>);

impl Notifier {
    /// The socket to notify on, from the environment.
    pub fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET");
        Notifier(target.and_then(|t| Some((UnixDatagram::unbound().ok()?, t))))
    }

    /// Says READY=1 (best effort: nothing to do if it fails).
    pub fn ready(&self) {
        let Some((sock, target)) = &self.0 else {
            return;
        };
        let msg = b"READY=1";
        if let Some(name) = target.as_encoded_bytes().strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
                let _ = sock.send_to_addr(msg, &addr);
            }
        } else {
            let _ = sock.send_to(msg, Path::new(target));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_socket_is_not_stolen_and_a_stale_one_is_replaced() {
        let dir = std::env::temp_dir().join(format!("taskdiagd-listen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.sock");
        let first = bind(&p).unwrap();
        assert!(matches!(bind(&p), Err(ListenError::InUse(_))));
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666);
        drop(first);
        // The file stays after the listener is gone: stale, replaced. (Another test of this
        // binary forks, and its child holds a copy of every descriptor until it exits a few
        // milliseconds later: the listener may live that long.)
        let mut replaced = bind(&p);
        taskdiag_test_support::process::wait_until(std::time::Duration::from_secs(5), || {
            replaced = bind(&p);
            !matches!(replaced, Err(ListenError::InUse(_)))
        });
        if let Err(e) = replaced {
            panic!("a stale socket was not replaced: {e}");
        }
        let f = dir.join("file");
        std::fs::write(&f, b"x").unwrap();
        assert!(matches!(bind(&f), Err(ListenError::NotSocket(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
