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
//! * **one worker per loaded program set** (`crate::work`) answers requests, taking them in
//!   the order `crate::sched` decides (fair between uids).
//!
//! Every wait of a request is bounded by its deadline, `--timeout` after it arrived: waiting
//! for a worker, for the reader while the dump runs, and for the reader to take what the
//! dump left in memory. Past it the connection ends, with an error message when the stream
//! can still take one. The dump itself is bounded the same way, by the event loop: a worker
//! still answering a request past its deadline (blocked in the kernel on a process that does
//! not answer) has its connection ended under it (`crate::conn::Lease`) and counts as stuck
//! ([`Stats::stuck`]) until it comes back; it is given nothing meanwhile. One uid holds at
//! most all workers but one (`crate::sched::per_uid_cap`), and a request for which no worker
//! it may use comes free within `--busy-wait` is answered at once with `EBUSY`, so that its
//! client reads /proc instead of waiting. Memory held for slow readers is bounded by `--buffer-limit` (see
//! `crate::conn`). When the connection limit is reached, the oldest idle connection of the
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
use crate::sched::{FairQueue, Sched, Unserved};

/// Show flag of VMA_STAT: its counters exist only in /proc/PID/smaps, which the daemon (without
/// capabilities) may not read for its callers.
const VMA_STAT: u64 = 1 << Group::VmaStat as u16;

/// Why a request for `show_flags` is not served, if it is not: the groups whose data would have
/// to come from /proc, which the daemon (without capabilities) would read with its own rights,
/// not its caller's. `maps_walk`: the kernel runs the memory-map iterator (iter/task_vma).
fn unserved(show_flags: u64, maps_walk: bool) -> Option<&'static str> {
    if show_flags & VMA_STAT != 0 {
        return Some(
            "the vma_stat group is not served by taskdiagd (its counters come from \
             /proc/PID/smaps); use the procfs backend",
        );
    }
    if show_flags & Group::Vma.flag() != 0 && !maps_walk {
        return Some(
            "the vma group is not served by taskdiagd on this kernel (it has no memory-map \
             iterator, iter/task_vma: Linux 5.12 or later); use the procfs backend",
        );
    }
    None
}

pub use crate::sched::per_uid_cap;

/// The default of [`Limits::busy_wait`] (`--busy-wait`).
pub const BUSY_WAIT: Duration = Duration::from_millis(500);

/// How long after a request's deadline the event loop ends a connection whose worker has not
/// come back: a worker that is not stuck ends the stream itself at the deadline (at its next
/// write, or within 50 ms of waiting for its reader), with the more precise explanation.
const GRACE: Duration = Duration::from_millis(200);

/// Limits and timeouts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once, all users together. Past `max_clients - max_clients / 8`,
    /// only uids holding no connection are admitted without making room; making room closes
    /// the oldest idle connection of the uid holding the most.
    pub max_clients: usize,
    /// Connections open at once per uid.
    pub max_clients_per_uid: usize,
    /// Workers one uid may hold at once; its other requests wait their turn. Never more than
    /// all workers but one when there are two or more ([`per_uid_cap`]), whatever it says.
    pub max_requests_per_uid: usize,
    /// How long a request waits when no worker it may use comes free (counted from its
    /// arrival or from the last time one did) before it is answered `EBUSY`.
    pub busy_wait: Duration,
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
            max_requests_per_uid: usize::MAX,
            busy_wait: BUSY_WAIT,
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
    /// Requests answered `EBUSY`: no worker they could use came free within the busy wait.
    pub busy: AtomicUsize,
    /// Requests whose connection the event loop ended because the worker answering them had
    /// not come back by their deadline.
    pub abandoned: AtomicUsize,
    /// Workers stuck now: their request's connection was ended past its deadline, and they
    /// have not come back yet.
    pub stuck: AtomicUsize,
}

/// What the threads share.
pub(crate) struct Shared {
    pub(crate) limits: Limits,
    pub(crate) own: OwnNamespaces,
    /// The program set that identifies clients (and nothing else).
    pub(crate) ident: Mutex<Dumper>,
    /// The workers' programs walk memory maps (else VMA is not served: see [`unserved`]).
    maps_walk: bool,
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
    /// Tests only (`TASKDIAGD_TEST_WEDGE_PID`, see [`WEDGE_ENV`]): a worker writing this
    /// process's record for a request with CMDLINE waits, ignoring every deadline, until the
    /// process is gone, as if reading its command line blocked in the kernel.
    pub(crate) wedge: Option<u32>,
}

/// The environment variable (read at start, tests only) naming a process whose command line
/// "blocks" the worker that writes its record until the process exits: how the tests hold a
/// worker as a hung FUSE or NFS mount does, on any kernel. Only root sets taskdiagd's
/// environment; unset, it costs nothing.
pub const WEDGE_ENV: &str = "TASKDIAGD_TEST_WEDGE_PID";

impl Shared {
    fn new(
        limits: Limits,
        workers: usize,
        ident: Dumper,
        maps_walk: bool,
        own: OwnNamespaces,
        verbose: bool,
    ) -> io::Result<Arc<Shared>> {
        let stats = Arc::new(Stats::default());
        let wedge: Option<u32> = std::env::var(WEDGE_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok());
        // A daemon that behaves as a test's says so wherever its log goes (the journal).
        if let Some(pid) = wedge {
            eprintln!(
                "taskdiagd: warning: {WEDGE_ENV}={pid} is set (a test hook): workers writing \
                 process {pid}'s command line wait until it exits"
            );
        }
        Ok(Arc::new(Shared {
            budget: Arc::new(SharedBudget::new(limits.buffer_limit, stats.clone())),
            sched: Mutex::new(Sched::new(
                workers,
                limits.max_requests_per_uid,
                limits.busy_wait,
            )),
            limits,
            own,
            ident: Mutex::new(ident),
            maps_walk,
            sched_cv: Condvar::new(),
            idq: Mutex::new(FairQueue::default()),
            idq_cv: Condvar::new(),
            inbox: Mutex::new(Vec::new()),
            waker: Waker::new()?,
            stats,
            verbose,
            wedge,
        }))
    }

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
        let vma = Group::Vma.flag();
        let maps_walk = dumpers
            .iter()
            .all(|d| d.completed_from_procfs(vma) & vma == 0);
        let workers = dumpers.len();
        Ok(Server {
            listener,
            dumpers,
            shared: Shared::new(limits, workers, ident, maps_walk, own, verbose)?,
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
        EventLoop::new(self.shared, self.listener)?.run()
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
    /// While its request waits for or is answered by a worker: what the loop needs to end it
    /// at the deadline if the worker does not come back.
    lent: Option<Lent>,
}

/// A connection whose request is with the workers.
struct Lent {
    lease: Arc<crate::conn::Lease>,
    fd: i32,
    deadline: Instant,
    uid: u32,
    pid: u32,
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
    /// The loop on `listener`, not yet running.
    fn new(sh: Arc<Shared>, listener: UnixListener) -> io::Result<EventLoop> {
        // Not set_nonblocking(): that is an ioctl, which the daemon's system call filter
        // refuses (crate::privs::confine).
        crate::poll::set_nonblocking(listener.as_raw_fd())?;
        let epoll = Epoll::new()?;
        epoll.add(listener.as_raw_fd(), libc::EPOLLIN as u32, LISTENER)?;
        epoll.add(sh.waker.fd(), libc::EPOLLIN as u32, WAKER)?;
        Ok(EventLoop {
            sh,
            listener,
            epoll,
            slots: Vec::new(),
            free: Vec::new(),
            open: 0,
            per_uid: HashMap::new(),
            next_scan: None,
            accept_paused: None,
            again: Vec::new(),
        })
    }

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
                            self.slots[c.token].lent = None;
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
            lease: Arc::default(),
        });
        lock(&self.sh.idq).push(uid, conn);
        self.sh.idq_cv.notify_one();
    }

    /// Whether a new connection of `uid` may come in (making room if needed), else why not.
    fn admission(&mut self, uid: u32) -> Result<(), String> {
        let l = &self.sh.limits;
        let mine = self.per_uid.get(&uid).copied().unwrap_or(0);
        if admission_rule(l, self.open, uid, mine)? == Admission::Room {
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

    /// The connection to close to make room ([`oldest_idle_of_busiest`]).
    fn victim(&self) -> Option<usize> {
        let idle = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(t, s)| Some((t, s.conn.as_ref()?)))
            .filter(|(_, c)| is_idle(c))
            .map(|(t, c)| (t, c.peer.uid, c.since));
        oldest_idle_of_busiest(idle, &self.per_uid)
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
        self.forget(conn.token, conn.peer.uid);
    }

    /// Frees slot `token` of a connection of `uid` (no longer watched), and counts it closed.
    fn forget(&mut self, token: usize, uid: u32) {
        self.slots[token] = Slot::default();
        self.free.push(token);
        self.open -= 1;
        if let Some(n) = self.per_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.per_uid.remove(&uid);
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
                    // VMA comes from the BPF map walk and is checked per task; nothing is
                    // read from /proc for a caller.
                    Frame::Request(r) => match unserved(r.all_groups(), self.sh.maps_walk) {
                        Some(why) => conn.error(libc::EOPNOTSUPP, why, false),
                        None => return self.dispatch(conn, r, now + timeout),
                    },
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
        *conn.lease.state() = crate::conn::LeaseState {
            worker: None,
            abandoned: false,
            settled: conn.out.settled(),
        };
        let (uid, now) = (conn.peer.uid, Instant::now());
        self.slots[conn.token].lent = Some(Lent {
            lease: conn.lease.clone(),
            fd: conn.fd(),
            deadline,
            uid,
            pid: conn.peer.pid,
        });
        lock(&self.sh.sched).push(uid, maps, now, deadline, conn);
        self.sh.sched_cv.notify_all();
        self.due_at(deadline.min(now + self.sh.limits.busy_wait));
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
                if let Some(l) = &self.slots[token].lent {
                    self.due_at(l.deadline + GRACE);
                }
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
        let (unserved, next, abandoned) = {
            let sh = self.sh.clone();
            let mut s = lock(&sh.sched);
            let unserved = s.expire(now);
            let abandoned = self.abandon_overdue(&mut s, now);
            (unserved, s.next_deadline(), abandoned)
        };
        if let Some(d) = next {
            self.due_at(d);
        }
        for (token, uid) in abandoned {
            self.forget(token, uid);
        }
        for (mut conn, why) in unserved {
            self.slots[conn.token].lent = None;
            conn.request = None;
            match why {
                Unserved::Late => {
                    conn.error(libc::ETIMEDOUT, &crate::work::busy(timeout), true);
                    // Delivered if the socket takes it at once; the connection ends either way.
                    conn.deadline = Some(now);
                }
                Unserved::Busy(message) => {
                    self.sh.stats.busy.fetch_add(1, Ordering::Relaxed);
                    if self.sh.verbose {
                        eprintln!(
                            "taskdiagd: client pid {} uid {}: {message}",
                            conn.peer.pid, conn.peer.uid
                        );
                    }
                    // The connection stays: the client may ask again, or close it.
                    conn.error(libc::EBUSY, &message, false);
                    conn.deadline = Some(now + timeout);
                }
            }
            self.advance(conn);
        }
    }

    /// Ends the connections whose request passed its deadline (and the grace after it) while
    /// a worker still answers it: the worker is blocked (in the kernel, on a process that does
    /// not answer). The client gets DONE `-ETIMEDOUT` when its stream is at a message
    /// boundary, then the socket is shut down; the worker stays stuck, held for its uid, until
    /// it comes back and drops the connection. Returns the slots to free (token, uid).
    fn abandon_overdue(&self, s: &mut Sched<Box<Conn>>, now: Instant) -> Vec<(usize, u32)> {
        let timeout = self.sh.limits.timeout;
        let mut gone = Vec::new();
        for (token, slot) in self.slots.iter().enumerate() {
            let Some(l) = slot.lent.as_ref().filter(|l| l.deadline + GRACE <= now) else {
                continue;
            };
            let mut st = l.lease.state();
            // Still queued (expired above), or back already (on its way through the inbox).
            let Some(id) = st.worker.filter(|_| !st.abandoned) else {
                continue;
            };
            st.abandoned = true;
            s.abandon(id);
            let message = format!(
                "response cut: taskdiagd could not finish this request within its deadline \
                 ({} s after it arrived): the worker answering it is still waiting in the \
                 kernel (a process being read does not answer, e.g. one on a hung FUSE or NFS \
                 mount); read /proc instead (--backend procfs), or try again later",
                timeout.as_secs()
            );
            if st.settled {
                let mut b = Vec::new();
                write_done_error(&mut b, -libc::ETIMEDOUT, &message);
                let _ = conn::send(l.fd, &b);
            }
            // SAFETY: shutdown() on the connection's socket, which stays open: the worker's
            // connection owns it, and drops it only after it sees the lease abandoned, which
            // it cannot before this lock is released.
            unsafe { libc::shutdown(l.fd, libc::SHUT_RDWR) };
            drop(st);
            let stuck = self.sh.stats.stuck.fetch_add(1, Ordering::Relaxed) + 1;
            self.sh.stats.abandoned.fetch_add(1, Ordering::Relaxed);
            if self.sh.verbose {
                eprintln!(
                    "taskdiagd: client pid {} uid {}: its worker did not come back by the \
                     deadline; connection ended, the worker counts as stuck until it is back \
                     ({stuck} stuck now)",
                    l.pid, l.uid
                );
            }
            gone.push((token, l.uid));
        }
        gone
    }
}

/// What admitting a new connection takes, when it may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// There is room for it.
    Room,
    /// An idle connection must be closed to make room.
    MakeRoom,
}

/// The admission rule for a new connection of `uid`, which holds `mine` of the `open`
/// connections: never past `max_clients_per_uid`; freely below the shared part of
/// `max_clients` (all but an eighth); past it, a uid holding none still comes in while any of
/// the limit is left (the reserve for newcomers), and otherwise only by making room.
fn admission_rule(l: &Limits, open: usize, uid: u32, mine: usize) -> Result<Admission, String> {
    if mine >= l.max_clients_per_uid {
        return Err(format!(
            "too many connections from uid {uid} (the limit is {})",
            l.max_clients_per_uid
        ));
    }
    let shared_part = l.max_clients - l.max_clients / 8;
    if open < shared_part || (mine == 0 && open < l.max_clients) {
        Ok(Admission::Room)
    } else {
        Ok(Admission::MakeRoom)
    }
}

/// Among idle connections (slot, uid, idle since), the oldest of the uid holding the most
/// connections (`per_uid`): closing it costs the heaviest user the connection it used least
/// recently.
fn oldest_idle_of_busiest(
    idle: impl Iterator<Item = (usize, u32, Instant)>,
    per_uid: &HashMap<u32, usize>,
) -> Option<usize> {
    idle.max_by_key(|&(_, uid, since)| {
        (
            per_uid.get(&uid).copied().unwrap_or(0),
            std::cmp::Reverse(since),
        )
    })
    .map(|(t, _, _)| t)
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

#[cfg(test)]
mod tests {
    //! The event loop driven directly: a listener of its own, clients on real sockets, and
    //! the identification thread's part played by the test (a default viewer), so that
    //! admission, reading, fairness between connections and timeouts are checked without
    //! workers or BPF.

    use super::*;
    use std::io::Write;
    use std::path::PathBuf;

    use taskdiag::proto::msg::{done_text, Messages};
    use taskdiag::proto::{Done, MsgType};
    use taskdiag::view::Viewer;
    use taskdiag::BackendKind;

    fn limits(max_clients: usize, per_uid: usize, timeout: Duration) -> Limits {
        Limits {
            max_clients,
            max_clients_per_uid: per_uid,
            timeout,
            ..Limits::default()
        }
    }

    #[test]
    fn admission_keeps_a_reserve_for_uids_holding_no_connection() {
        // 16 connections: 14 for everyone, the last 2 for uids that hold none.
        let l = limits(16, 4, Duration::from_secs(30));
        assert_eq!(admission_rule(&l, 0, 7, 0), Ok(Admission::Room));
        assert_eq!(admission_rule(&l, 13, 7, 3), Ok(Admission::Room));
        assert_eq!(admission_rule(&l, 14, 7, 1), Ok(Admission::MakeRoom));
        assert_eq!(admission_rule(&l, 14, 7, 0), Ok(Admission::Room));
        assert_eq!(admission_rule(&l, 15, 7, 0), Ok(Admission::Room));
        assert_eq!(admission_rule(&l, 16, 7, 0), Ok(Admission::MakeRoom));
        // The per-uid limit holds whatever room there is.
        let e = admission_rule(&l, 4, 7, 4).expect_err("over the per-uid limit");
        assert!(
            e.contains("too many connections from uid 7 (the limit is 4)"),
            "{e}"
        );
    }

    #[test]
    fn room_is_made_by_the_busiest_uids_oldest_idle_connection() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let per_uid = HashMap::from([(1, 3), (2, 5), (3, 5)]);
        // uids 2 and 3 hold the most: the oldest idle of theirs goes, not uid 1's older one.
        let idle = [
            (0, 1, at(0)),
            (1, 2, at(30)),
            (2, 2, at(10)),
            (3, 3, at(20)),
        ];
        assert_eq!(oldest_idle_of_busiest(idle.into_iter(), &per_uid), Some(2));
        // Only a lighter uid has an idle connection: that one goes.
        assert_eq!(
            oldest_idle_of_busiest([(4, 1, at(50))].into_iter(), &per_uid),
            Some(4)
        );
        assert_eq!(oldest_idle_of_busiest(std::iter::empty(), &per_uid), None);
    }

    /// An event loop on a socket of its own (removed on drop).
    struct Harness {
        el: EventLoop,
        path: PathBuf,
    }

    impl Harness {
        fn new(limits: Limits) -> Harness {
            Harness::with(limits, true)
        }

        /// `maps_walk`: whether the workers' programs walk memory maps.
        fn with(limits: Limits, maps_walk: bool) -> Harness {
            use std::sync::atomic::AtomicUsize;
            static N: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "taskdiagd-unit-{}-{}.sock",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_file(&path);
            let listener = UnixListener::bind(&path).expect("bind");
            let ident = Dumper::open(BackendKind::Procfs).expect("the procfs backend");
            let own = OwnNamespaces::read().expect("own namespaces");
            let sh = Shared::new(limits, 2, ident, maps_walk, own, false).expect("shared state");
            Harness {
                el: EventLoop::new(sh, listener).expect("event loop"),
                path,
            }
        }

        /// A client connected and accepted by the loop; its connection waits to be identified.
        fn connect(&mut self) -> UnixStream {
            let c = UnixStream::connect(&self.path).expect("connect");
            self.el.accept().expect("accept");
            c
        }

        /// Identifies every connection waiting (as the identification thread would, with a
        /// viewer that sees everything) and hands it to the loop.
        fn identify(&mut self) {
            loop {
                let Some(mut conn) = lock(&self.el.sh.idq).pop() else {
                    return;
                };
                conn.viewer = Some(Viewer::default());
                conn.since = Instant::now();
                self.el.advance(conn);
            }
        }

        /// A connected, identified client, idle.
        fn client(&mut self) -> UnixStream {
            let c = self.connect();
            self.identify();
            c
        }

        fn waiting_requests(&self) -> usize {
            lock(&self.el.sh.sched).len()
        }

        /// One turn of the loop: every parked connection whose socket is ready, then (after
        /// all of those) the ones whose turn was used up with work left.
        fn turn(&mut self) {
            self.ready_ones();
            for t in std::mem::take(&mut self.el.again) {
                self.el.ready(t);
            }
        }

        /// The first part of a turn: the connections whose socket is ready.
        fn ready_ones(&mut self) {
            let mut ready = Vec::new();
            self.el
                .epoll
                .wait(&mut ready, Some(Duration::ZERO))
                .expect("epoll");
            for r in ready {
                if r.token < WAKER {
                    self.el.ready(r.token as usize);
                }
            }
        }
    }

    impl Drop for Harness {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn request(show: u64) -> Vec<u8> {
        Request::new(Strategy::All, 0, show).to_bytes().to_vec()
    }

    /// A request the daemon answers with an error and goes on (an unknown version).
    fn bad_version() -> Vec<u8> {
        let mut b = request(Group::Base.flag());
        b[4] = 99;
        b
    }

    /// The DONE errors and texts among the messages a client has been sent (what arrived).
    fn dones(c: &mut UnixStream) -> Vec<(i32, String)> {
        c.set_nonblocking(true).expect("nonblocking");
        let mut b = Vec::new();
        let _ = c.read_to_end(&mut b);
        c.set_nonblocking(false).expect("blocking");
        Messages::new(&b)
            .map(|m| m.expect("a whole message"))
            .filter(|m| m.msg_type() == Some(MsgType::Done))
            .map(|m| {
                let d = Done::read_from(m.payload).expect("DONE");
                (d.error, done_text(&m).unwrap_or("").to_string())
            })
            .collect()
    }

    /// Whether the daemon closed the client's connection (EOF once what was sent is read).
    fn closed(c: &mut UnixStream) -> bool {
        let _ = dones(c);
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        matches!(c.read(&mut [0u8; 64]), Ok(0))
    }

    /// Checks that the client was sent one DONE with `-errno` and a text saying `words`, and
    /// that the daemon then closed the connection.
    fn assert_ended(c: &mut UnixStream, errno: i32, words: &str) {
        let d = dones(c);
        assert!(
            d.len() == 1 && d[0].0 == -errno && d[0].1.contains(words),
            "want one DONE({}) saying {words:?}: {d:?}",
            -errno
        );
        assert!(closed(c), "the connection stays open");
    }

    #[test]
    fn a_request_is_read_and_queued_for_a_worker_a_bad_one_answered() {
        let mut h = Harness::new(Limits::default());
        let mut c = h.client();
        c.write_all(&bad_version()).expect("write");
        c.write_all(&request(VMA_STAT)).expect("write");
        c.write_all(&request(Group::Environ.flag())).expect("write");
        c.write_all(&request(Group::Base.flag())).expect("write");
        h.turn();
        let d = dones(&mut c);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].0, -libc::EPROTONOSUPPORT, "{d:?}");
        assert_eq!(d[1].0, -libc::EOPNOTSUPP, "{d:?}");
        assert!(d[1].1.contains("vma_stat group is not served"), "{d:?}");
        assert_eq!(
            h.waiting_requests(),
            1,
            "the first good request (ENVIRON's, served) waits for a worker"
        );
        assert_eq!(h.el.open, 1);
    }

    #[test]
    fn without_a_map_walk_memory_maps_are_refused_not_read_from_proc() {
        let mut h = Harness::with(Limits::default(), false);
        let mut c = h.client();
        c.write_all(&request(Group::Base.flag() | Group::Vma.flag()))
            .expect("write");
        c.write_all(&request(Group::Base.flag())).expect("write");
        h.turn();
        let d = dones(&mut c);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].0, -libc::EOPNOTSUPP, "{d:?}");
        assert!(d[0].1.contains("vma group is not served"), "{d:?}");
        assert_eq!(h.waiting_requests(), 1, "BASE alone waits for a worker");
    }

    #[test]
    fn a_connection_with_many_requests_lets_others_have_their_turn() {
        let mut h = Harness::new(Limits::default());
        let (mut busy, mut other) = (h.client(), h.client());
        let many = 3 * TURN;
        for _ in 0..many {
            busy.write_all(&bad_version()).expect("write");
        }
        other.write_all(&bad_version()).expect("write");
        h.ready_ones();
        // One turn each (at most TURN steps, reads included): the busy connection got part of
        // its answers, the other all of its own, and the busy one is due again after them.
        let mut answered = dones(&mut busy).len();
        assert!(
            answered > 0 && answered < TURN,
            "{answered} answers in one turn"
        );
        assert_eq!(dones(&mut other).len(), 1);
        assert_eq!(h.el.again.len(), 1);
        while answered < many {
            assert!(!h.el.again.is_empty(), "{answered} of {many} answered");
            h.turn();
            answered += dones(&mut busy).len();
        }
        assert_eq!(answered, many);
    }

    #[test]
    fn at_the_limit_the_busiest_uids_oldest_idle_connection_makes_room() {
        // 8 connections, 7 for a uid that holds some already.
        let mut h = Harness::new(limits(8, 8, Duration::from_secs(30)));
        let mut first = h.client();
        let mut rest: Vec<UnixStream> = (1..7).map(|_| h.client()).collect();
        assert_eq!(h.el.open, 7);
        let _new = h.client();
        assert_eq!(h.el.open, 7, "one closed to make room for one");
        assert_eq!(h.el.sh.stats.evicted.load(Ordering::Relaxed), 1);
        assert_ended(&mut first, libc::EAGAIN, "closed to make room");
        // A connection in the middle of a request is not idle: with none idle, a newcomer of
        // the same uid is refused.
        for c in rest.iter_mut() {
            c.write_all(&request(Group::Base.flag())[..10])
                .expect("write");
        }
        h.turn();
        // The one admitted last is idle: it makes room for the next. That one is not
        // identified yet (not idle either): then none is left.
        let _last = h.connect();
        assert_eq!(h.el.sh.stats.evicted.load(Ordering::Relaxed), 2);
        assert_ended(&mut h.connect(), libc::EAGAIN, "none idle");
        assert_eq!(h.el.sh.stats.refused.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn over_the_per_uid_limit_a_connection_is_refused_with_a_message() {
        let mut h = Harness::new(limits(64, 2, Duration::from_secs(30)));
        let _a = h.client();
        let _b = h.client();
        assert_ended(&mut h.connect(), libc::EAGAIN, "too many connections");
        assert_eq!(h.el.open, 2);
    }

    #[test]
    fn past_the_timeout_idle_and_half_sent_requests_end() {
        let mut h = Harness::new(limits(64, 8, Duration::ZERO));
        let mut idle = h.client();
        let mut half = h.client();
        half.write_all(&request(Group::Base.flag())[..20])
            .expect("write");
        h.turn();
        h.el.scan();
        // The idle connection ends quietly; the half request is explained.
        assert!(dones(&mut idle).is_empty());
        assert!(closed(&mut idle));
        assert_ended(
            &mut half,
            libc::EINVAL,
            "truncated request: 20 of 32 bytes arrived before the timeout",
        );
        assert_eq!(h.el.open, 0);
    }

    #[test]
    fn a_request_no_worker_took_by_its_deadline_is_answered_busy() {
        let mut h = Harness::new(limits(64, 8, Duration::ZERO));
        let mut c = h.client();
        c.write_all(&request(Group::Base.flag())).expect("write");
        h.turn();
        assert_eq!(h.waiting_requests(), 1);
        h.el.scan();
        assert_eq!(h.waiting_requests(), 0);
        assert_ended(&mut c, libc::ETIMEDOUT, "no worker came free");
    }

    #[test]
    fn a_request_no_worker_came_free_for_is_answered_busy_at_once() {
        let l = Limits {
            busy_wait: Duration::ZERO,
            ..Limits::default()
        };
        let mut h = Harness::new(l);
        let mut c = h.client();
        c.write_all(&request(Group::Base.flag())).expect("write");
        h.turn();
        assert_eq!(h.waiting_requests(), 1);
        h.el.scan();
        assert_eq!(h.waiting_requests(), 0);
        let d = dones(&mut c);
        assert!(
            d.len() == 1
                && d[0].0 == -libc::EBUSY
                && d[0].1.starts_with("taskdiagd is busy")
                && d[0].1.contains("read /proc instead"),
            "{d:?}"
        );
        assert_eq!(h.el.sh.stats.busy.load(Ordering::Relaxed), 1);
        // The connection stays, for another request.
        assert_eq!(h.el.open, 1);
        c.write_all(&bad_version()).expect("write");
        h.turn();
        assert_eq!(dones(&mut c).len(), 1);
    }

    #[test]
    fn a_worker_that_does_not_come_back_by_the_deadline_loses_its_connection() {
        let mut h = Harness::new(limits(64, 8, Duration::ZERO));
        let mut c = h.client();
        c.write_all(&request(Group::Base.flag())).expect("write");
        h.turn();
        // A worker takes it, and stays blocked (this test holds its connection).
        let (stuck, ticket) = {
            let mut s = lock(&h.el.sh.sched);
            let (conn, t) = s.take().expect("the request");
            conn.lease.state().worker = Some(t.id);
            (conn, t)
        };
        h.el.scan();
        assert_eq!(h.el.open, 1, "not before the grace after the deadline");
        std::thread::sleep(GRACE + Duration::from_millis(50));
        h.el.scan();
        assert_eq!(h.el.open, 0, "the event loop forgot the connection");
        assert_eq!(h.el.sh.stats.stuck.load(Ordering::Relaxed), 1);
        assert_eq!(lock(&h.el.sh.sched).stuck(), 1);
        assert!(stuck.lease.state().abandoned);
        assert_ended(
            &mut c,
            libc::ETIMEDOUT,
            "the worker answering it is still waiting",
        );
        // A new connection may have its slot meanwhile; the stuck one is never handed back.
        let _other = h.client();
        lock(&h.el.sh.sched).release(ticket, Instant::now());
        assert_eq!(lock(&h.el.sh.sched).stuck(), 0);
        drop(stuck);
    }

    #[test]
    fn due_follows_what_a_connection_waits_for() {
        let mut h = Harness::new(Limits::default());
        let _c = h.client();
        let t = Duration::from_secs(30);
        let slot =
            h.el.slots
                .iter()
                .position(|s| s.conn.is_some())
                .expect("a slot");
        let conn = h.el.slots[slot].conn.as_mut().expect("conn");
        assert!(is_idle(conn));
        assert_eq!(due(conn, t), conn.since + t, "idle: since it became idle");
        let started = conn.since + Duration::from_secs(1);
        conn.input = vec![1, 2, 3];
        conn.started = Some(started);
        assert!(!is_idle(conn));
        assert_eq!(
            due(conn, t),
            started + t,
            "a request arriving: since its first byte"
        );
        conn.input.clear();
        let deadline = conn.since + Duration::from_secs(5);
        conn.deadline = Some(deadline);
        conn.out.push_message(vec![0; 16]);
        assert!(!is_idle(conn));
        assert_eq!(
            due(conn, t),
            deadline,
            "an answer on its way: the request's deadline"
        );
        conn.out.clear();
        conn.viewer = None;
        assert!(!is_idle(conn), "not identified yet");
    }
}
