//! The daemon's serving loop: connections, limits, and the threads that answer.
//!
//! A fixed set of threads serves any number of connections:
//!
//! * **the event loop** (the thread that calls [`Server::run`]) accepts connections, applies
//!   the connection limits, reads requests and delivers what answers left behind, on
//!   non-blocking sockets watched with epoll. An idle connection costs a descriptor and a few
//!   hundred bytes, no thread;
//! * **the identification thread** identifies each new connection ([`crate::peer`]) with a
//!   program set of its own, so identifying never waits behind answers;
//! * **one worker per loaded program set** ([`crate::work`]) answers requests, taking them in
//!   the order [`crate::sched`] decides (fair between uids).
//!
//! Every wait of a request is bounded by its deadline, `--timeout` after it arrived: waiting
//! for a worker, for the reader while the dump runs, and for the reader to take what the
//! dump left in memory. Past it the connection ends, with an error message when the stream
//! can still take one. Memory held for slow readers is bounded by `--buffer-limit` (see
//! [`crate::conn`]). When the connection limit is reached, the oldest idle connection of the
//! uid holding the most connections is closed to make room, and part of the limit is kept
//! for uids that hold none. docs/SECURITY.md states the bounds.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use taskdiag::proto::msg::write_done_error;
use taskdiag::{Dumper, Group, Request, Strategy};

use crate::conn::{self, Conn, Output, SharedBudget};
use crate::peer::{OwnNamespaces, Peer};
use crate::poll::{Epoll, Ready, Waker};
use crate::request::{next_frame, truncated, Frame, MAX_REQUEST};
use crate::sched::{FairQueue, Sched};

/// Show flag of VMA_STAT: its counters exist only in /proc/PID/smaps, which the daemon (without
/// capabilities) may not read for its callers.
const VMA_STAT: u64 = 1 << Group::VmaStat as u16;

/// Limits and timeouts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once, all users together. Past `max_clients - max_clients / 8`,
    /// only uids holding no connection are admitted without making room; making room closes
    /// the oldest idle connection of the uid holding the most.
    pub max_clients: usize,
    /// Connections open at once per uid.
    pub max_clients_per_uid: usize,
    /// Workers one uid may hold at once; its other requests wait their turn.
    pub max_requests_per_uid: usize,
    /// How long a client may take to send a request once it started one, how long it may stay
    /// idle between requests, and how long a request may take from its arrival to the last
    /// byte of its answer (waiting for a worker and for the reader included).
    pub timeout: Duration,
    /// Bytes of responses held for slow readers, all connections together.
    pub buffer_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: 4096,
            max_clients_per_uid: 256,
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
    /// Bytes held for slow readers now (counted as reserved from the budget).
    pub buffered: AtomicUsize,
    /// Connections refused by a limit.
    pub refused: AtomicUsize,
    /// Idle connections closed to make room for new ones.
    pub evicted: AtomicUsize,
}

/// What the threads share.
pub(crate) struct Shared {
    pub(crate) limits: Limits,
    pub(crate) own: OwnNamespaces,
    /// The program set that identifies clients (and nothing else).
    pub(crate) ident: Mutex<Dumper>,
    /// Requests waiting for a worker, and who holds the workers.
    pub(crate) sched: Mutex<Sched<Box<Conn>>>,
    pub(crate) sched_cv: Condvar,
    /// Connections waiting to be identified.
    pub(crate) idq: Mutex<FairQueue<Box<Conn>>>,
    pub(crate) idq_cv: Condvar,
    pub(crate) budget: Arc<SharedBudget>,
    /// Connections handed back to the event loop, and its wake-up. Connections move between
    /// threads boxed: a move is a pointer, and the loop's slots stay small.
    #[allow(clippy::vec_box)]
    inbox: Mutex<Vec<Box<Conn>>>,
    waker: Waker,
    pub(crate) stats: Arc<Stats>,
    pub(crate) verbose: bool,
}

impl Shared {
    /// Hands `conn` back to the event loop.
    pub(crate) fn give_back(&self, conn: Box<Conn>) {
        lock(&self.inbox).push(conn);
        self.waker.wake();
    }
}

/// Locks `m`, ignoring poisoning: the data behind the daemon's locks (queues, counters, a
/// program set) stays consistent across a panic, which must not take the daemon down.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running server.
pub struct Server {
    listener: UnixListener,
    dumpers: Vec<Dumper>,
    shared: Arc<Shared>,
}

impl Server {
    /// A server on `listener` answering with `dumpers` (loaded BPF backends, one worker
    /// each) and identifying clients with `ident` (one more, used for nothing else).
    pub fn new(
        listener: UnixListener,
        dumpers: Vec<Dumper>,
        ident: Dumper,
        limits: Limits,
        own: OwnNamespaces,
        verbose: bool,
    ) -> io::Result<Server> {
        let stats = Arc::new(Stats::default());
        Ok(Server {
            listener,
            dumpers,
            shared: Arc::new(Shared {
                budget: Arc::new(SharedBudget::new(limits.buffer_limit, stats.clone())),
                sched: Mutex::new(Sched::new(limits.max_requests_per_uid)),
                limits,
                own,
                ident: Mutex::new(ident),
                sched_cv: Condvar::new(),
                idq: Mutex::new(FairQueue::default()),
                idq_cv: Condvar::new(),
                inbox: Mutex::new(Vec::new()),
                waker: Waker::new()?,
                stats,
                verbose,
            }),
        })
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.shared.stats.clone()
    }

    /// Starts the identification thread and the workers, then runs the event loop on this
    /// thread until the listener fails.
    pub fn run(self) -> io::Result<()> {
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .stack_size(256 << 10)
                .spawn(f)
                .map(drop)
        };
        let sh = self.shared.clone();
        spawn(
            "taskdiagd-ident",
            Box::new(move || crate::work::identifier(&sh)),
        )?;
        for d in self.dumpers {
            let sh = self.shared.clone();
            spawn(
                "taskdiagd-work",
                Box::new(move || crate::work::worker(&sh, d)),
            )?;
        }
        // Not set_nonblocking(): that is an ioctl, which the daemon's system call filter
        // refuses (crate::privs::confine).
        crate::poll::set_nonblocking(self.listener.as_raw_fd())?;
        let epoll = Epoll::new()?;
        epoll.add(self.listener.as_raw_fd(), libc::EPOLLIN as u32, LISTENER)?;
        epoll.add(self.shared.waker.fd(), libc::EPOLLIN as u32, WAKER)?;
        EventLoop {
            sh: self.shared,
            listener: self.listener,
            epoll,
            slots: Vec::new(),
            free: Vec::new(),
            open: 0,
            per_uid: HashMap::new(),
            next_scan: None,
            accept_paused: None,
            again: Vec::new(),
        }
        .run()
    }
}

/// Tokens of the listener and the waker; connections have their slot index.
const LISTENER: u64 = u64::MAX;
const WAKER: u64 = u64::MAX - 1;

/// Requests (or reads) one connection may take in one turn of the loop before others get
/// theirs.
const TURN: usize = 16;

/// A connection's place in the loop.
#[derive(Default)]
struct Slot {
    /// The connection while the loop holds it (else a thread has it, or the loop is handling
    /// it right now).
    conn: Option<Box<Conn>>,
    /// The events its socket is registered for (0: not registered).
    events: u32,
}

struct EventLoop {
    sh: Arc<Shared>,
    listener: UnixListener,
    epoll: Epoll,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Connections open, and per uid.
    open: usize,
    per_uid: HashMap<u32, usize>,
    /// When something is next due: a timeout, a deadline, accepting again.
    next_scan: Option<Instant>,
    /// Accepting pauses briefly when descriptors or memory run out.
    accept_paused: Option<Instant>,
    /// Connections that used up their turn with work left.
    again: Vec<usize>,
}

impl EventLoop {
    fn run(mut self) -> io::Result<()> {
        let mut ready: Vec<Ready> = Vec::with_capacity(256);
        loop {
            let timeout = if self.again.is_empty() {
                self.next_scan
                    .map(|t| t.saturating_duration_since(Instant::now()))
            } else {
                Some(Duration::ZERO)
            };
            self.epoll.wait(&mut ready, timeout)?;
            for r in &ready {
                match r.token {
                    LISTENER => self.accept()?,
                    WAKER => {
                        self.sh.waker.reset();
                        let back = std::mem::take(&mut *lock(&self.sh.inbox));
                        for c in back {
                            self.advance(c);
                        }
                    }
                    t => self.ready(t as usize),
                }
            }
            for t in std::mem::take(&mut self.again) {
                self.ready(t);
            }
            if self.next_scan.is_some_and(|t| t <= Instant::now()) {
                self.scan();
            }
        }
    }

    fn due_at(&mut self, t: Instant) {
        self.next_scan = Some(self.next_scan.map_or(t, |n| n.min(t)));
    }

    // -----------------------------------------------------------------------------------------
    // Admission
    // -----------------------------------------------------------------------------------------

    fn accept(&mut self) -> io::Result<()> {
        for _ in 0..64 {
            let sock = match crate::poll::accept(&self.listener) {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                // Out of descriptors or memory: stop accepting for a moment, do not spin.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
                    ) =>
                {
                    eprintln!("taskdiagd: accept: {e}");
                    self.epoll.delete(self.listener.as_raw_fd())?;
                    let t = Instant::now() + Duration::from_millis(100);
                    self.accept_paused = Some(t);
                    self.due_at(t);
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            self.admit(sock);
        }
        Ok(())
    }

    fn admit(&mut self, sock: UnixStream) {
        let peer = match Peer::of(&sock) {
            Ok(p) => p,
            Err(e) => {
                if self.sh.verbose {
                    eprintln!("taskdiagd: a client refused: {e}");
                }
                return refuse_now(&sock, libc::EACCES, &e.to_string());
            }
        };
        if let Err(m) = self.admission(peer.uid) {
            self.sh.stats.refused.fetch_add(1, Ordering::Relaxed);
            if self.sh.verbose {
                eprintln!(
                    "taskdiagd: client pid {} uid {} refused: {m}",
                    peer.pid, peer.uid
                );
            }
            return refuse_now(&sock, libc::EAGAIN, &m);
        }
        let token = match self.free.pop() {
            Some(t) => t,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        self.open += 1;
        *self.per_uid.entry(peer.uid).or_default() += 1;
        self.sh.stats.clients.fetch_add(1, Ordering::Relaxed);
        let uid = peer.uid;
        let conn = Box::new(Conn {
            token,
            sock,
            peer,
            viewer: None,
            input: Vec::new(),
            started: None,
            since: Instant::now(),
            out: Output::new(uid, self.sh.budget.clone()),
            deadline: None,
            close: false,
            request: None,
        });
        lock(&self.sh.idq).push(uid, conn);
        self.sh.idq_cv.notify_one();
    }

    /// Whether a new connection of `uid` may come in (making room if needed), else why not.
    fn admission(&mut self, uid: u32) -> Result<(), String> {
        let l = &self.sh.limits;
        let mine = self.per_uid.get(&uid).copied().unwrap_or(0);
        if mine >= l.max_clients_per_uid {
            return Err(format!(
                "too many connections from uid {uid} (the limit is {})",
                l.max_clients_per_uid
            ));
        }
        let shared_part = l.max_clients - l.max_clients / 8;
        if self.open < shared_part || (mine == 0 && self.open < l.max_clients) {
            return Ok(());
        }
        let (open, max) = (self.open, l.max_clients);
        match self.victim() {
            Some(t) => {
                self.evict(t);
                Ok(())
            }
            None => Err(format!(
                "too many clients ({open} connections open; the limit is {max}) and none idle"
            )),
        }
    }

    /// The oldest idle connection of the uid holding the most connections (among those with
    /// an idle one).
    fn victim(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(t, s)| Some((t, s.conn.as_ref()?)))
            .filter(|(_, c)| is_idle(c))
            .max_by_key(|(_, c)| {
                (
                    self.per_uid.get(&c.peer.uid).copied().unwrap_or(0),
                    std::cmp::Reverse(c.since),
                )
            })
            .map(|(t, _)| t)
    }

    fn evict(&mut self, token: usize) {
        let Some(conn) = self.slots[token].conn.take() else {
            return;
        };
        refuse_now(
            &conn.sock,
            libc::EAGAIN,
            &format!(
                "too many clients: this idle connection was closed to make room for another \
                 ({} connections open; the limit is {})",
                self.open, self.sh.limits.max_clients
            ),
        );
        if self.sh.verbose {
            eprintln!(
                "taskdiagd: client pid {} uid {}: idle connection closed to make room",
                conn.peer.pid, conn.peer.uid
            );
        }
        self.sh.stats.evicted.fetch_add(1, Ordering::Relaxed);
        self.close(conn);
    }

    fn close(&mut self, conn: Box<Conn>) {
        let slot = &mut self.slots[conn.token];
        if slot.events != 0 {
            let _ = self.epoll.delete(conn.fd());
        }
        *slot = Slot::default();
        self.free.push(conn.token);
        self.open -= 1;
        if let Some(n) = self.per_uid.get_mut(&conn.peer.uid) {
            *n -= 1;
            if *n == 0 {
                self.per_uid.remove(&conn.peer.uid);
            }
        }
        self.sh.stats.clients.fetch_sub(1, Ordering::Relaxed);
    }

    // -----------------------------------------------------------------------------------------
    // Serving a connection
    // -----------------------------------------------------------------------------------------

    fn ready(&mut self, token: usize) {
        if let Some(conn) = self.slots.get_mut(token).and_then(|s| s.conn.take()) {
            self.advance(conn);
        }
    }

    /// Moves `conn` on as far as it goes without waiting: delivers what is held, reads and
    /// dispatches requests, and leaves it watched for what it waits for.
    fn advance(&mut self, mut conn: Box<Conn>) {
        let timeout = self.sh.limits.timeout;
        for _ in 0..TURN {
            let now = Instant::now();
            if !conn.out.is_empty() {
                if conn.out.pump(conn.fd()).is_err() {
                    return self.close(conn);
                }
                if !conn.out.is_empty() {
                    if conn.deadline.is_some_and(|d| d <= now) {
                        return self.close(conn);
                    }
                    return self.park(conn, libc::EPOLLOUT as u32);
                }
            }
            if conn.close {
                return self.close(conn);
            }
            // The request (or error message) before is over: idle from now.
            if conn.deadline.take().is_some() {
                conn.since = now;
            }
            if let Some((used, frame)) = next_frame(&conn.input) {
                conn.input.drain(..used);
                // The next request (if part of it came along) starts now.
                conn.started = (!conn.input.is_empty()).then_some(now);
                if conn.input.is_empty() && conn.input.capacity() > 1024 {
                    conn.input = Vec::new();
                }
                match frame {
                    // VMA comes from the BPF map walk and is checked per task; VMA_STAT is
                    // not served.
                    Frame::Request(r) if r.show_flags & VMA_STAT != 0 => conn.error(
                        libc::EOPNOTSUPP,
                        "the vma_stat group is not served by taskdiagd (its counters come \
                         from /proc/PID/smaps); use the procfs backend",
                        false,
                    ),
                    Frame::Request(r) => return self.dispatch(conn, r, now + timeout),
                    Frame::Invalid {
                        errno,
                        message,
                        fatal,
                    } => {
                        if fatal && self.sh.verbose {
                            eprintln!(
                                "taskdiagd: client pid {} uid {}: {message}",
                                conn.peer.pid, conn.peer.uid
                            );
                        }
                        conn.error(errno, &message, fatal);
                    }
                }
                conn.deadline = Some(now + timeout);
                continue;
            }
            let mut buf = [0u8; 512];
            match (&conn.sock).read(&mut buf) {
                Ok(0) => {
                    if conn.input.is_empty() {
                        return self.close(conn);
                    }
                    match truncated(&conn.input) {
                        Frame::Invalid { errno, message, .. } => conn.error(errno, &message, true),
                        Frame::Request(_) => conn.close = true,
                    }
                    conn.deadline = Some(now + timeout);
                }
                Ok(n) => {
                    conn.input.extend_from_slice(&buf[..n]);
                    conn.started.get_or_insert(now);
                    if conn.input.len() > MAX_REQUEST + buf.len() {
                        // next_frame() decides long before this; a guard against its bugs.
                        return self.close(conn);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.park(conn, libc::EPOLLIN as u32);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.close(conn),
            }
        }
        // Turn used up: again after the others.
        self.again.push(conn.token);
        let events = if conn.out.is_empty() {
            libc::EPOLLIN
        } else {
            libc::EPOLLOUT
        };
        self.park(conn, events as u32)
    }

    /// Queues `conn`'s request `r` for a worker.
    fn dispatch(&mut self, mut conn: Box<Conn>, r: Request, deadline: Instant) {
        self.unwatch(&conn);
        // A walk of every process's memory maps (VMA for more than one thread group).
        let maps = r.show_flags & Group::Vma.flag() != 0
            && !matches!(r.strategy(), Some(Strategy::One | Strategy::Thread));
        conn.request = Some(r);
        conn.deadline = Some(deadline);
        let uid = conn.peer.uid;
        lock(&self.sh.sched).push(uid, maps, deadline, conn);
        self.sh.sched_cv.notify_all();
        self.due_at(deadline);
    }

    /// Leaves `conn` with the loop, watched for `events`.
    fn park(&mut self, conn: Box<Conn>, events: u32) {
        let due = due(&conn, self.sh.limits.timeout);
        self.due_at(due);
        let (fd, token) = (conn.fd(), conn.token);
        let slot = &mut self.slots[token];
        let r = if slot.events == 0 {
            self.epoll.add(fd, events, token as u64)
        } else if slot.events != events {
            self.epoll.modify(fd, events, token as u64)
        } else {
            Ok(())
        };
        match r {
            Ok(()) => {
                slot.events = events;
                slot.conn = Some(conn);
            }
            Err(_) => self.close(conn),
        }
    }

    /// Stops watching `conn` (another thread takes it).
    fn unwatch(&mut self, conn: &Conn) {
        let slot = &mut self.slots[conn.token];
        if slot.events != 0 {
            let _ = self.epoll.delete(conn.fd());
            slot.events = 0;
        }
    }

    /// Ends what is past its time.
    fn scan(&mut self) {
        let now = Instant::now();
        let timeout = self.sh.limits.timeout;
        self.next_scan = None;
        if let Some(t) = self.accept_paused {
            if t <= now {
                self.accept_paused = None;
                if let Err(e) =
                    self.epoll
                        .add(self.listener.as_raw_fd(), libc::EPOLLIN as u32, LISTENER)
                {
                    eprintln!("taskdiagd: watching the socket again: {e}");
                }
            } else {
                self.due_at(t);
            }
        }
        for token in 0..self.slots.len() {
            let Some(c) = self.slots[token].conn.as_ref() else {
                continue;
            };
            let d = due(c, timeout);
            if d > now {
                self.due_at(d);
                continue;
            }
            let Some(mut conn) = self.slots[token].conn.take() else {
                continue;
            };
            if conn.out.is_empty() && !conn.input.is_empty() {
                // Half a request: say what arrived, and hang up.
                if let Frame::Invalid { errno, message, .. } = truncated(&conn.input) {
                    refuse_now(&conn.sock, errno, &format!("{message} before the timeout"));
                }
            }
            if self.sh.verbose && !is_idle(&conn) {
                eprintln!(
                    "taskdiagd: client pid {} uid {}: timed out",
                    conn.peer.pid, conn.peer.uid
                );
            }
            conn.out.clear();
            self.close(conn);
        }
        let (late, next) = {
            let mut s = lock(&self.sh.sched);
            (s.expire(now), s.next_deadline())
        };
        if let Some(d) = next {
            self.due_at(d);
        }
        for mut conn in late {
            conn.request = None;
            conn.error(libc::ETIMEDOUT, &crate::work::busy(timeout), true);
            // Delivered if the socket takes it at once; the connection ends either way.
            conn.deadline = Some(now);
            self.advance(conn);
        }
    }
}

/// Whether `c` is identified and doing nothing: no request, no output, no half request.
fn is_idle(c: &Conn) -> bool {
    c.viewer.is_some() && c.out.is_empty() && c.input.is_empty() && !c.close
}

/// When the loop must act on `c` if nothing happens: its deadline while something is on its
/// way to it; else `timeout` after the first byte of a request; else `timeout` after it
/// became idle.
fn due(c: &Conn, timeout: Duration) -> Instant {
    if !c.out.is_empty() {
        return c.deadline.unwrap_or(c.since + timeout);
    }
    match c.started {
        Some(t) if !c.input.is_empty() => t + timeout,
        _ => c.since + timeout,
    }
}

/// Sends a lone DONE with `-errno` and `message` if the socket takes it now (best effort: the
/// client may be gone or not reading).
fn refuse_now(sock: &UnixStream, errno: i32, message: &str) {
    let mut b = Vec::new();
    write_done_error(&mut b, -errno, message);
    let _ = conn::send(sock.as_raw_fd(), &b);
}
