//! The event loop's system calls: an epoll set, an eventfd that other threads write to wake
//! it, and non-blocking sockets. Level-triggered; each registered descriptor carries a `u64`
//! token. Only calls the daemon's system call filter allows (`crate::privs`): non-blocking
//! mode through fcntl() and accept4(), not the ioctl() the standard library uses.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

/// Makes `fd` non-blocking.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor we own, with integer arguments.
    unsafe {
        let flags = check(libc::fcntl(fd, libc::F_GETFL))?;
        check(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)).map(drop)
    }
}

/// Accepts a connection on `listener` (non-blocking), as a non-blocking socket.
pub fn accept(listener: &UnixListener) -> io::Result<UnixStream> {
    // SAFETY: accept4 with null address pointers (the peer address is not wanted); returns a
    // new descriptor or -1.
    let fd = check(unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` is a new connected socket that nothing else owns.
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

/// A descriptor that is ready (for what it was registered for, or failed).
#[derive(Debug, Clone, Copy)]
pub struct Ready {
    /// Its token.
    pub token: u64,
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Epoll {
    /// A new, empty set.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes flags and returns a new descriptor or -1.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; the kernel copies it.
        check(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    /// Watches `fd` for `events`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes what `fd` is watched for.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits at most `timeout` (`None`: without limit) for readiness; fills `out`.
    pub fn wait(&self, out: &mut Vec<Ready>, timeout: Option<Duration>) -> io::Result<()> {
        out.clear();
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 256];
        let ms = timeout.map_or(-1, |t| {
            // Round up: waking early only to find nothing due would spin.
            (t.as_micros().div_ceil(1000)).min(i32::MAX as u128) as i32
        });
        // SAFETY: `evs` is a writable array of `evs.len()` events for the duration of the call.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as libc::c_int,
                ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(evs[..n as usize].iter().map(|e| Ready { token: e.u64 }));
        Ok(())
    }
}

/// An eventfd: [`Waker::wake`] from any thread makes it readable until [`Waker::reset`].
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new, unset one.
    pub fn new() -> io::Result<Waker> {
        // SAFETY: eventfd takes an initial value and flags and returns a new descriptor or -1.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        Ok(Waker {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Its descriptor, to watch for `EPOLLIN`.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes it readable.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64. It can only fail when the counter would
        // overflow, and then it is readable anyway.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes it unreadable again.
    pub fn reset(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; non-blocking, so it fails when not set.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_waker_wakes_the_set_until_reset() {
        let ep = Epoll::new().unwrap();
        let w = Waker::new().unwrap();
        ep.add(w.fd(), libc::EPOLLIN as u32, 7).unwrap();
        let mut out = Vec::new();
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty());
        w.wake();
        w.wake();
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert_eq!(out.iter().map(|r| r.token).collect::<Vec<_>>(), [7]);
        w.reset();
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty(), "level-triggered: quiet once reset");
    }

    #[test]
    fn sockets_are_watched_for_what_they_wait_for() {
        let ep = Epoll::new().unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        set_nonblocking(a.as_raw_fd()).unwrap();
        ep.add(a.as_raw_fd(), libc::EPOLLIN as u32, 1).unwrap();
        let mut out = Vec::new();
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty(), "nothing to read yet");
        b.write_all(b"x").unwrap();
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert_eq!(out.len(), 1);
        // Watched for writing instead: an empty socket buffer takes more at once.
        ep.modify(a.as_raw_fd(), libc::EPOLLOUT as u32, 2).unwrap();
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert_eq!(out.iter().map(|r| r.token).collect::<Vec<_>>(), [2]);
        ep.delete(a.as_raw_fd()).unwrap();
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn a_listener_accepts_non_blocking_connections() {
        let path = std::env::temp_dir().join(format!("taskdiagd-poll-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).unwrap();
        set_nonblocking(l.as_raw_fd()).unwrap();
        assert_eq!(
            accept(&l).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "no connection yet"
        );
        let _c = UnixStream::connect(&path).unwrap();
        let s = accept(&l).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(
            std::io::Read::read(&mut &s, &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "the accepted socket is non-blocking"
        );
        let _ = std::fs::remove_file(&path);
    }
}
