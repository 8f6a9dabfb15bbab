//! The daemon's serving loop: connections, limits, the pool of loaded programs, and writing
//! responses to clients that may be slow, stalled or gone.
//!
//! One thread per connection. A connection is identified once ([`crate::peer`]), then answers
//! requests in turn: each waits for a per-uid request slot and a loaded [`Dumper`] from the
//! pool, and streams its response straight to the socket while the socket takes it. What the
//! socket does not take at once is kept in memory, within a daemon-wide budget, so that a slow
//! reader does not hold a dumper; over the budget the dump waits for the reader, at most
//! `timeout` per write, and a reader that does not move in that time is disconnected. A client
//! that disconnects ends its dump at the next write.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use taskdiag::proto::msg::write_done_error;
use taskdiag::view::Viewer;
use taskdiag::{Dumper, Error};

use crate::peer::{OwnNamespaces, Peer};

/// Show flag of VMA_STAT: its counters exist only in /proc/PID/smaps, which the daemon (without
/// capabilities) may not read for its callers.
const MAPS: u64 = 1 << taskdiag::Group::VmaStat as u16;
use crate::request::{next_frame, truncated, Frame, MAX_REQUEST};

/// Limits and timeouts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once, all users together.
    pub max_clients: usize,
    /// Connections open at once per uid.
    pub max_clients_per_uid: usize,
    /// Requests being answered at once per uid; more wait their turn.
    pub max_requests_per_uid: usize,
    /// How long a client may take to send a request once it started one, how long it may stay
    /// idle between requests, and how long one write to it may block.
    pub timeout: Duration,
    /// Bytes of responses held for slow readers, all connections together.
    pub buffer_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: 4096,
            max_clients_per_uid: 1024,
            max_requests_per_uid: 8,
            timeout: Duration::from_secs(30),
            buffer_limit: 256 << 20,
        }
    }
}

/// Counters, for tests and logs.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections open now.
    pub clients: AtomicUsize,
    /// Requests answered (completely or not).
    pub requests: AtomicUsize,
    /// Bytes held for slow readers now.
    pub buffered: AtomicUsize,
    /// Connections refused by a limit.
    pub refused: AtomicUsize,
}

#[derive(Default)]
struct PerUid {
    clients: usize,
    active: usize,
}

struct Shared {
    limits: Limits,
    own: OwnNamespaces,
    pool: Mutex<Vec<Dumper>>,
    pool_cv: Condvar,
    uids: Mutex<HashMap<u32, PerUid>>,
    uids_cv: Condvar,
    stats: Arc<Stats>,
    verbose: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking connection thread must not take the daemon down with a poisoned lock: the
    // data behind these locks (counters, a pool) stays consistent across a panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running server.
pub struct Server {
    listener: UnixListener,
    shared: Arc<Shared>,
}

impl Server {
    /// A server on `listener` answering with `dumpers` (loaded BPF backends; requests beyond
    /// their number wait).
    pub fn new(
        listener: UnixListener,
        dumpers: Vec<Dumper>,
        limits: Limits,
        own: OwnNamespaces,
        verbose: bool,
    ) -> Server {
        Server {
            listener,
            shared: Arc::new(Shared {
                limits,
                own,
                pool: Mutex::new(dumpers),
                pool_cv: Condvar::new(),
                uids: Mutex::new(HashMap::new()),
                uids_cv: Condvar::new(),
                stats: Arc::new(Stats::default()),
                verbose,
            }),
        }
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.shared.stats.clone()
    }

    /// Accepts connections until the listener fails.
    pub fn run(self) -> io::Result<()> {
        loop {
            let (conn, _) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors or memory: wait for connections to end, do not spin.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
                    ) =>
                {
                    eprintln!("taskdiagd: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("taskdiagd-conn".into())
                .stack_size(256 << 10)
                .spawn(move || serve(conn, &shared));
            if let Err(e) = spawned {
                eprintln!("taskdiagd: cannot start a connection thread: {e}");
            }
        }
    }
}

/// Sends a refusal (best effort: the client may be gone or not reading).
fn refuse(conn: &UnixStream, errno: i32, message: &str) {
    let mut b = Vec::new();
    write_done_error(&mut b, -errno, message);
    let _ = send(conn.as_raw_fd(), &b, libc::MSG_DONTWAIT);
}

/// One send(); returns the bytes sent, 0 if the socket would block.
fn send(fd: i32, b: &[u8], flags: libc::c_int) -> io::Result<usize> {
    loop {
        // SAFETY: `b` is a valid buffer of `b.len()` bytes for the duration of the call.
        let n = unsafe { libc::send(fd, b.as_ptr().cast(), b.len(), flags | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(0),
            _ => return Err(e),
        }
    }
}

/// Writes all of `b`, blocking at most the socket's send timeout per write.
fn send_all(fd: i32, mut b: &[u8]) -> io::Result<()> {
    while !b.is_empty() {
        match send(fd, b, 0)? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client stopped reading",
                ))
            }
            n => b = &b[n..],
        }
    }
    Ok(())
}

/// A response on its way to a client: what the socket takes now goes, the rest waits in
/// `spill` (counted against the daemon-wide budget).
struct Out<'a> {
    fd: i32,
    spill: Vec<u8>,
    sent: usize,
    stats: &'a Stats,
    budget: usize,
    /// After this, a dump that must wait for its reader (over the budget) gives up: a reader
    /// trickling a byte per write timeout cannot hold a worker for long.
    deadline: std::time::Instant,
}

impl Out<'_> {
    fn reserve(&mut self, n: usize) -> bool {
        let mut cur = self.stats.buffered.load(Ordering::Relaxed);
        loop {
            if cur + n > self.budget {
                return false;
            }
            match self.stats.buffered.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }

    /// Sends what the socket takes of the spill without blocking.
    fn pump(&mut self) -> io::Result<()> {
        while self.sent < self.spill.len() {
            match send(self.fd, &self.spill[self.sent..], libc::MSG_DONTWAIT)? {
                0 => break,
                n => self.sent += n,
            }
        }
        if self.sent == self.spill.len() {
            self.clear();
        }
        Ok(())
    }

    fn clear(&mut self) {
        self.stats
            .buffered
            .fetch_sub(self.spill.len(), Ordering::Relaxed);
        self.spill.clear();
        self.sent = 0;
    }

    fn write(&mut self, mut chunk: &[u8]) -> io::Result<()> {
        if !self.spill.is_empty() {
            self.pump()?;
        }
        if self.spill.is_empty() {
            let n = send(self.fd, chunk, libc::MSG_DONTWAIT)?;
            chunk = &chunk[n..];
        }
        if chunk.is_empty() {
            return Ok(());
        }
        if self.reserve(chunk.len()) {
            self.spill.extend_from_slice(chunk);
            return Ok(());
        }
        // Over the budget: wait for this reader, within the request's deadline.
        if std::time::Instant::now() > self.deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client reads too slowly for the rest of the response",
            ));
        }
        self.finish()?;
        send_all(self.fd, chunk)
    }

    /// Sends everything still held, blocking (within the send timeout).
    fn finish(&mut self) -> io::Result<()> {
        let r = send_all(self.fd, &self.spill[self.sent..]);
        self.clear();
        r
    }
}

impl Drop for Out<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}

fn serve(conn: UnixStream, sh: &Shared) {
    let stats = &sh.stats;
    let peer = match Peer::of(&conn) {
        Ok(p) => p,
        Err(e) => {
            refuse(&conn, libc::EACCES, &e.to_string());
            return;
        }
    };
    // Connection limits.
    let admitted = {
        let mut uids = lock(&sh.uids);
        let total = stats.clients.load(Ordering::Relaxed);
        let u = uids.entry(peer.uid).or_default();
        if total >= sh.limits.max_clients {
            Err(format!(
                "too many clients ({} connections open; the limit is {})",
                total, sh.limits.max_clients
            ))
        } else if u.clients >= sh.limits.max_clients_per_uid {
            Err(format!(
                "too many connections from uid {} (the limit is {})",
                peer.uid, sh.limits.max_clients_per_uid
            ))
        } else {
            u.clients += 1;
            stats.clients.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    };
    if let Err(m) = admitted {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        refuse(&conn, libc::EAGAIN, &m);
        return;
    }
    let r = serve_admitted(&conn, &peer, sh);
    if let Err(e) = r {
        if sh.verbose {
            eprintln!("taskdiagd: client pid {} uid {}: {e}", peer.pid, peer.uid);
        }
    }
    let mut uids = lock(&sh.uids);
    if let Some(u) = uids.get_mut(&peer.uid) {
        u.clients -= 1;
        if u.clients == 0 && u.active == 0 {
            uids.remove(&peer.uid);
        }
    }
    stats.clients.fetch_sub(1, Ordering::Relaxed);
}

/// A dumper lent from the pool; returned on drop.
struct Lent<'a> {
    sh: &'a Shared,
    d: Option<Dumper>,
}

impl Lent<'_> {
    fn get(&mut self) -> &mut Dumper {
        self.d
            .as_mut()
            .expect("a lent dumper is present until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.d.take() {
            lock(&self.sh.pool).push(d);
            self.sh.pool_cv.notify_one();
        }
    }
}

fn lend(sh: &Shared) -> Lent<'_> {
    let mut pool = lock(&sh.pool);
    loop {
        if let Some(d) = pool.pop() {
            return Lent { sh, d: Some(d) };
        }
        pool = sh.pool_cv.wait(pool).unwrap_or_else(|p| p.into_inner());
    }
}

/// A per-uid request slot; released on drop.
struct Slot<'a> {
    sh: &'a Shared,
    uid: u32,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut uids = lock(&self.sh.uids);
        if let Some(u) = uids.get_mut(&self.uid) {
            u.active -= 1;
        }
        self.sh.uids_cv.notify_all();
    }
}

fn slot(sh: &Shared, uid: u32) -> Slot<'_> {
    let mut uids = lock(&sh.uids);
    loop {
        let u = uids.entry(uid).or_default();
        if u.active < sh.limits.max_requests_per_uid {
            u.active += 1;
            return Slot { sh, uid };
        }
        uids = sh.uids_cv.wait(uids).unwrap_or_else(|p| p.into_inner());
    }
}

fn serve_admitted(conn: &UnixStream, peer: &Peer, sh: &Shared) -> anyhow::Result<()> {
    use anyhow::Context;
    conn.set_write_timeout(Some(sh.limits.timeout))?;
    conn.set_read_timeout(Some(sh.limits.timeout))?;
    let viewer = {
        let _slot = slot(sh, peer.uid);
        let (me, root) = {
            let mut d = lend(sh);
            let me = d.get().identify(peer.pid);
            (me, d.get().root_of(peer.pid))
        };
        let me = match me.and_then(|t| Ok((t, root?))) {
            Ok(t) => t,
            Err(Error::NoSuchTask { .. }) => {
                refuse(
                    conn,
                    libc::ESRCH,
                    "the client's process is not visible to the task iterator",
                );
                anyhow::bail!("not visible to the task iterator");
            }
            Err(e) => {
                refuse(conn, libc::EIO, &format!("identifying the client: {e}"));
                return Err(e).context("identifying the client");
            }
        };
        match peer.viewer(&me.0, me.1, &sh.own) {
            Ok(v) => v,
            Err(e) => {
                refuse(conn, libc::EACCES, &e.to_string());
                return Err(e).context("identifying the client");
            }
        }
    };
    if sh.verbose {
        eprintln!(
            "taskdiagd: client pid {} uid {} gid {}: pid namespace {}, /proc {:?}",
            peer.pid,
            peer.uid,
            peer.gid,
            viewer.pidns.map_or("shared".into(), |n| format!(
                "{} (level {})",
                n.inum, n.level
            )),
            viewer.proc_mount
        );
    }
    let mut input = Vec::with_capacity(64);
    let mut buf = [0u8; 512];
    // When the request at the front of `input` began to arrive. The whole request must arrive
    // within the timeout from there: reads that each come just in time do not extend it.
    let mut started: Option<Instant> = None;
    loop {
        // One request at the front of `input`, reading as needed.
        let (used, frame) = loop {
            if let Some(f) = next_frame(&input) {
                break f;
            }
            let wait = match started {
                Some(t) => sh.limits.timeout.saturating_sub(t.elapsed()),
                None => sh.limits.timeout,
            };
            let read = if wait.is_zero() {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                conn.set_read_timeout(Some(wait))
                    .and_then(|()| (&*conn).read(&mut buf))
            };
            let n = match read {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !input.is_empty() => {
                    if let Frame::Invalid { errno, message, .. } = truncated(&input) {
                        refuse(conn, errno, &format!("{message} before the timeout"));
                    }
                    anyhow::bail!("request timed out");
                }
                // Idle past the timeout, or an error: end quietly.
                Err(e) => return Err(e).context("reading a request"),
            };
            if n == 0 {
                if input.is_empty() {
                    return Ok(());
                }
                if let Frame::Invalid { errno, message, .. } = truncated(&input) {
                    refuse(conn, errno, &message);
                }
                anyhow::bail!("connection closed inside a request");
            }
            input.extend_from_slice(&buf[..n]);
            started.get_or_insert_with(Instant::now);
            if input.len() > MAX_REQUEST + buf.len() {
                // next_frame() decides long before this; a guard against its bugs.
                anyhow::bail!("request buffer overflow");
            }
        };
        input.drain(..used);
        // The next request (if part of it came along) starts now.
        started = (!input.is_empty()).then(Instant::now);
        let req = match frame {
            // VMA comes from the BPF map walk and is checked per task; VMA_STAT is not served.
            Frame::Request(r) if r.show_flags & MAPS != 0 => {
                let mut b = Vec::new();
                write_done_error(
                    &mut b,
                    -libc::EOPNOTSUPP,
                    "the vma_stat group is not served by taskdiagd (its counters come from \
                     /proc/PID/smaps); use the procfs backend",
                );
                send_all(conn.as_raw_fd(), &b).context("answering a request")?;
                continue;
            }
            Frame::Request(r) => r,
            Frame::Invalid {
                errno,
                message,
                fatal,
            } => {
                let mut b = Vec::new();
                write_done_error(&mut b, -errno, &message);
                send_all(conn.as_raw_fd(), &b).context("answering a bad request")?;
                if fatal {
                    anyhow::bail!("{message}");
                }
                continue;
            }
        };
        answer(conn, &req, &viewer, peer, sh)?;
    }
}

fn answer(
    conn: &UnixStream,
    req: &taskdiag::Request,
    viewer: &Viewer,
    peer: &Peer,
    sh: &Shared,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let _slot = slot(sh, peer.uid);
    let mut out = Out {
        fd: conn.as_raw_fd(),
        spill: Vec::new(),
        sent: 0,
        stats: &sh.stats,
        budget: sh.limits.buffer_limit,
        deadline: std::time::Instant::now() + sh.limits.timeout,
    };
    let r = {
        let mut d = lend(sh);
        // The caller as it is now, not as it connected (see Peer::revalidate).
        if let Err(e) = peer.revalidate(d.get().identify(peer.pid)) {
            let mut b = Vec::new();
            write_done_error(&mut b, -libc::EACCES, &e.to_string());
            drop(d);
            let _ = send_all(conn.as_raw_fd(), &b);
            return Err(e).context("re-validating the client");
        }
        d.get().dump_for(req, viewer, &mut |c| out.write(c))
    };
    sh.stats.requests.fetch_add(1, Ordering::Relaxed);
    match r {
        Ok(_) | Err(Error::NoSuchTask { .. }) => {}
        Err(Error::Sink(e)) => return Err(e.into()),
        // The stream already ends with DONE(-EIO); keep serving.
        Err(e) => eprintln!("taskdiagd: request from pid {}: {e}", peer.pid),
    }
    out.finish()?;
    Ok(())
}
