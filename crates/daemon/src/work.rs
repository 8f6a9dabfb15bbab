//! The threads that do a request's work: the workers, each with its loaded program set, and
//! the identification thread, with a program set of its own.
//!
//! A worker takes the next request [`crate::sched`] chooses and streams the answer to the
//! client's socket while the socket takes it. What the socket does not take at once is held in
//! memory within the budget ([`crate::conn::Output`]), so that the worker is free as soon as the
//! dump is done; the event loop delivers the rest. When the budget (or the uid's share of it)
//! is spent, the dump waits for the reader, but only until the request's deadline, and only
//! as long as no uid holding fewer workers waits for one: then it gives its worker up. Either
//! way the stream is ended with a DONE error at the last whole message, when that part of it
//! has not gone out yet, and the connection is closed once that is delivered.
//!
//! A worker blocked in the kernel (a process whose command line cannot be read: a hung FUSE or
//! NFS mount) cannot notice its deadline; the event loop does, ends the connection and marks
//! the worker stuck (`crate::conn::Lease`). When the worker comes back it sends nothing more,
//! drops the connection and takes the next request.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use taskdiag::{Dumper, Error};

use crate::conn::{wait_writable, Conn, Lease, Output};
use crate::sched::Ticket;
use crate::server::{lock, Shared};

/// How long a dump waits for its reader before asking whether it must give its worker up.
const TICK: Duration = Duration::from_millis(50);

/// Identifies new connections, one at a time, until the daemon ends.
pub(crate) fn identifier(sh: &Arc<Shared>) {
    loop {
        let mut conn = {
            let mut q = lock(&sh.idq);
            loop {
                if let Some(c) = q.pop() {
                    break c;
                }
                q = sh.idq_cv.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        identify(sh, &mut conn);
        sh.give_back(conn);
    }
}

/// Finds out what `conn`'s client may see, or queues the refusal that ends it.
fn identify(sh: &Shared, conn: &mut Conn) {
    let timeout = sh.limits.timeout;
    if conn.since.elapsed() > timeout {
        return conn.error(
            libc::EAGAIN,
            &format!(
                "the daemon was busy: this connection was not identified within the timeout \
                 ({} s)",
                timeout.as_secs()
            ),
            true,
        );
    }
    let (me, root) = {
        let mut d = lock(&sh.ident);
        let me = d.identify(conn.peer.pid);
        (me, d.root_of(conn.peer.pid))
    };
    let (me, root) = match me.and_then(|t| Ok((t, root?))) {
        Ok(t) => t,
        Err(e) => {
            let (errno, message) = match e {
                Error::NoSuchTask { .. } => (
                    libc::ESRCH,
                    "the client's process is not visible to the task iterator".to_string(),
                ),
                e => (libc::EIO, format!("identifying the client: {e}")),
            };
            if sh.verbose {
                eprintln!("taskdiagd: client pid {} refused: {message}", conn.peer.pid);
            }
            return conn.error(errno, &message, true);
        }
    };
    let viewer = match conn.peer.viewer(&me, root, &sh.own) {
        Ok(v) => v,
        Err(e) => {
            if sh.verbose {
                eprintln!("taskdiagd: client pid {}: {e}", conn.peer.pid);
            }
            return conn.error(libc::EACCES, &e.to_string(), true);
        }
    };
    if sh.verbose {
        eprintln!(
            "taskdiagd: client pid {} uid {} gid {}: pid namespace {}, /proc {:?}",
            conn.peer.pid,
            conn.peer.uid,
            conn.peer.gid,
            viewer.pidns.map_or("shared".into(), |n| format!(
                "{} (level {})",
                n.inum, n.level
            )),
            viewer.proc_mount
        );
    }
    conn.viewer = Some(viewer);
    conn.since = Instant::now();
}

/// Answers requests with `d` until the daemon ends.
pub(crate) fn worker(sh: &Arc<Shared>, mut d: Dumper) {
    loop {
        let (mut conn, mut ticket) = {
            let mut s = lock(&sh.sched);
            loop {
                if let Some((c, t)) = s.take() {
                    // Under the scheduler's lock: the event loop never finds the request
                    // neither queued nor lent.
                    c.lease.state().worker = Some(t.id);
                    break (c, t);
                }
                s = sh.sched_cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        };
        let t0 = Instant::now();
        answer(sh, &mut d, &mut conn, &mut ticket);
        let abandoned = {
            let mut st = conn.lease.state();
            st.worker = None;
            st.abandoned
        };
        lock(&sh.sched).release(ticket, Instant::now());
        sh.sched_cv.notify_all();
        if abandoned {
            // The event loop ended the connection at its deadline and forgot it.
            let stuck = sh.stats.stuck.fetch_sub(1, Ordering::Relaxed) - 1;
            if sh.verbose {
                eprintln!(
                    "taskdiagd: client pid {} uid {}: its stuck worker came back after {:.1} s \
                     ({stuck} stuck now)",
                    conn.peer.pid,
                    conn.peer.uid,
                    t0.elapsed().as_secs_f64()
                );
            }
            drop(conn);
        } else {
            sh.give_back(conn);
        }
    }
}

/// Why a dump stopped writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The client is gone (the socket failed).
    Gone,
    /// The request's deadline passed while the reader did not take what was held for it.
    Late,
    /// The request's deadline passed while the dump was still producing its answer.
    Slow,
    /// The event loop ended the connection (the deadline passed while this worker was
    /// blocked).
    Abandoned,
    /// The reader did not keep up, the budget was spent and another uid waited for a worker.
    Yield,
}

/// Answers `conn`'s request with `d`.
fn answer(sh: &Shared, d: &mut Dumper, conn: &mut Conn, ticket: &mut Ticket) {
    // The caller as it is now, not as it connected (see Peer::revalidate): the one place
    // where it is checked again, before each answered request.
    if let Err(e) = conn.peer.revalidate(d.identify(conn.peer.pid)) {
        if sh.verbose {
            eprintln!("taskdiagd: client pid {}: {e}", conn.peer.pid);
        }
        conn.request = None;
        return conn.error(libc::EACCES, &e.to_string(), true);
    }
    let Some(req) = conn.request.take() else {
        return;
    };
    let timeout = sh.limits.timeout;
    let deadline = conn.deadline.unwrap_or_else(|| Instant::now() + timeout);
    if Instant::now() >= deadline {
        // Taken just as the event loop was about to give it up.
        return conn.error(libc::ETIMEDOUT, &busy(timeout), true);
    }
    let fd = conn.fd();
    let (stop, r) = {
        let Conn {
            viewer, out, lease, ..
        } = &mut *conn;
        let Some(viewer) = viewer.as_ref() else {
            return;
        };
        if req.wants(taskdiag::Group::Cgroup) && viewer.foreign_cgroupns.is_some() {
            return conn.error(
                libc::EOPNOTSUPP,
                "the cgroup group is not served to a caller in another cgroup namespace than \
                 taskdiagd's (its /proc shows paths from the daemon's); use the procfs backend",
                false,
            );
        }
        let mut sink = Sink {
            fd,
            out,
            sh,
            ticket,
            deadline,
            stop: None,
            lease,
            wedge: sh.wedge.filter(|_| req.wants(taskdiag::Group::Cmdline)),
        };
        // Blocks the client took while the dump writes are used again for what follows, and
        // given back once it is done (Output::keep_spares).
        sink.out.keep_spares(true);
        let r = d.dump_for(&req, viewer, &mut |c| sink.write(c));
        sink.out.keep_spares(false);
        (sink.stop, r)
    };
    sh.stats.requests.fetch_add(1, Ordering::Relaxed);
    let (errno, message) = match (stop, r) {
        (None, Ok(_) | Err(Error::NoSuchTask { .. })) => return,
        // The stream already ends with DONE(-EIO); keep serving.
        (None, Err(e)) => {
            eprintln!("taskdiagd: request from pid {}: {e}", conn.peer.pid);
            return;
        }
        (Some(Stop::Gone | Stop::Abandoned), _) => {
            conn.out.clear();
            conn.close = true;
            return;
        }
        (Some(Stop::Late), _) => (
            libc::ETIMEDOUT,
            format!(
                "response cut: it was not read within the timeout ({} s)",
                timeout.as_secs()
            ),
        ),
        (Some(Stop::Slow), _) => (
            libc::ETIMEDOUT,
            format!(
                "response cut: taskdiagd could not finish it within the timeout ({} s after \
                 the request arrived); read /proc instead (--backend procfs), or try again later",
                timeout.as_secs()
            ),
        ),
        (Some(Stop::Yield), _) => (
            libc::ENOBUFS,
            format!(
                "response cut: the client did not read it while other users waited, and the \
                 daemon holds at most {} MiB of responses for slow readers",
                sh.limits.buffer_limit >> 20
            ),
        ),
    };
    if sh.verbose {
        eprintln!(
            "taskdiagd: client pid {} uid {}: {message}",
            conn.peer.pid, conn.peer.uid
        );
    }
    if conn.out.cut() {
        conn.error(errno, &message, true);
    } else {
        conn.out.clear();
        conn.close = true;
    }
}

/// Why a request that waited for a worker until its deadline is not answered.
pub(crate) fn busy(timeout: Duration) -> String {
    format!(
        "the daemon was busy: no worker came free for this request within the timeout ({} s)",
        timeout.as_secs()
    )
}

/// The test hook ([`crate::server::WEDGE_ENV`]): if `chunk` holds a record of process `pid`,
/// waits until that process is gone, as a read of its command line that blocks in the kernel
/// would, heeding nothing else.
fn wedge(pid: u32, chunk: &[u8]) {
    let hit = taskdiag::proto::msg::Messages::new(chunk).any(|m| {
        m.is_ok_and(|m| {
            m.msg_type() == Some(taskdiag::proto::MsgType::Task) && m.header.tgid == pid
        })
    });
    let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
    while hit && proc.exists() {
        std::thread::sleep(TICK);
    }
}

/// Where a dump writes: the client's socket, then its held output.
struct Sink<'a> {
    fd: i32,
    out: &'a mut Output,
    sh: &'a Shared,
    ticket: &'a mut Ticket,
    deadline: Instant,
    stop: Option<Stop>,
    /// Shared with the event loop: checked (and the stream's state set) at every send.
    lease: &'a Lease,
    /// The test hook's process ([`crate::server::WEDGE_ENV`]), when the request asks for
    /// command lines.
    wedge: Option<u32>,
}

impl Sink<'_> {
    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        if let Some(pid) = self.wedge {
            wedge(pid, chunk);
        }
        self.put(chunk).map_err(|s| {
            self.stop = Some(s);
            io::Error::other(format!("{s:?}"))
        })
    }

    fn put(&mut self, mut chunk: &[u8]) -> Result<(), Stop> {
        loop {
            {
                let mut st = self.lease.state();
                if st.abandoned {
                    return Err(Stop::Abandoned);
                }
                if Instant::now() >= self.deadline {
                    // Only when the reader left output unread is it the reader's doing.
                    return Err(if self.out.is_empty() {
                        Stop::Slow
                    } else {
                        Stop::Late
                    });
                }
                let r = self.send(&mut chunk);
                st.settled = self.out.settled();
                r?;
            }
            if chunk.is_empty() {
                return Ok(());
            }
            // The budget is spent: wait for the reader.
            // (Outside the lease's lock: the event loop may end the connection meanwhile.)
            let left = self.deadline.saturating_duration_since(Instant::now());
            if !wait_writable(self.fd, left.min(TICK))
                && lock(&self.sh.sched).should_yield(self.ticket)
            {
                return Err(Stop::Yield);
            }
        }
    }

    /// Sends what the socket takes of what is held, then of `chunk`, and holds what the
    /// budget allows of the rest; `chunk` is left with what did not fit.
    fn send(&mut self, chunk: &mut &[u8]) -> Result<(), Stop> {
        self.out.pump(self.fd).map_err(|_| Stop::Gone)?;
        if self.out.is_empty() {
            let n = self.out.send_now(self.fd, chunk).map_err(|_| Stop::Gone)?;
            *chunk = &chunk[n..];
        }
        if !chunk.is_empty() {
            let n = self.out.spill(chunk);
            *chunk = &chunk[n..];
        }
        if chunk.is_empty() {
            self.out.end_chunk();
        }
        Ok(())
    }
}
