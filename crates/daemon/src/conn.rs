//! One client connection, and what is on its way to it.
//!
//! A [`Conn`] is owned by one thread at a time: the event loop ([`crate::server`]) while it is
//! idle, reading a request or draining an answer; the identification thread until it is
//! identified; a worker ([`crate::work`]) while its request is answered. Its socket is
//! non-blocking throughout: every wait is a poll() bounded by a deadline.
//!
//! While a worker answers, the event loop keeps the connection's [`Lease`]: if the request's
//! deadline passes and the worker has not come back (it is blocked in the kernel, reading a
//! process that does not answer), the event loop ends the stream itself (a DONE of its own
//! when the stream is at a message boundary), shuts the socket down and forgets the
//! connection; the worker, when it comes back, finds the lease abandoned and drops it.
//!
//! [`Output`] holds what the socket has not taken yet, in blocks of [`BLOCK`] bytes, each
//! reserved from the daemon-wide [`SharedBudget`] before anything is copied into it and never
//! grown, so the budget bounds the memory held for slow readers. Only the daemon's own short
//! messages (a lone DONE with an error, at most [`MAX_MESSAGE`] bytes, one at a time per
//! connection) are added outside it.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use taskdiag::proto::msg::write_done_error;
use taskdiag::view::Viewer;
use taskdiag::Request;

use crate::peer::Peer;
use crate::sched::Budget;
use crate::server::{lock, Stats};

/// Bytes of one output block. Blocks of this size are mappings of their own (main.rs fixes
/// glibc's mmap threshold at 128 KiB), so freeing one gives its memory back at once.
pub const BLOCK: usize = 128 << 10;

/// What a block costs against the budget: its bytes and the page the allocator's header
/// adds to the mapping.
pub const BLOCK_COST: usize = BLOCK + 4096;

/// Largest message the daemon writes of its own (a DONE with an explanation of at most 1 KiB).
pub const MAX_MESSAGE: usize = 1100;

/// The budget for output held for slow readers, shared by every connection.
#[derive(Debug)]
pub struct SharedBudget {
    inner: Mutex<Budget>,
    stats: Arc<Stats>,
}

impl SharedBudget {
    /// A budget of `limit` bytes; its use is shown in `stats.buffered`.
    pub fn new(limit: usize, stats: Arc<Stats>) -> Self {
        SharedBudget {
            inner: Mutex::new(Budget::new(limit)),
            stats,
        }
    }

    fn reserve(&self, uid: u32) -> bool {
        let mut b = lock(&self.inner);
        let ok = b.try_reserve(uid, BLOCK_COST);
        self.stats.buffered.store(b.used(), Ordering::Relaxed);
        ok
    }

    fn release(&self, uid: u32) {
        let mut b = lock(&self.inner);
        b.release(uid, BLOCK_COST);
        self.stats.buffered.store(b.used(), Ordering::Relaxed);
    }
}

struct Block {
    data: Vec<u8>,
    /// Whether it was reserved from the budget (else it is one of the daemon's messages).
    charged: bool,
}

/// What is on its way to a client and not yet taken by its socket.
pub struct Output {
    blocks: VecDeque<Block>,
    /// Bytes of the front block already sent.
    head: usize,
    uid: u32,
    budget: Arc<SharedBudget>,
    /// Bytes of the response stream queued (sent directly or held) and sent, so far.
    queued: u64,
    sent: u64,
    /// `queued` at the end of the last whole chunk (chunks are whole messages).
    boundary: u64,
    /// Blocks sent while a dump writes, emptied and kept (still charged) for its next output
    /// instead of being unmapped and mapped again: fresh pages cost a fault and a clearing
    /// each, 14% of taskdiagd's time answering the exporter at 50,000 processes (the ring
    /// walk then handed over 4 MiB at once; now pieces of 256 KiB, still more than the socket
    /// takes while its reader decodes). What is held never exceeds the dump's peak of held
    /// output; [`Output::keep_spares`] gives it back.
    spare: Vec<Vec<u8>>,
    /// Whether sent blocks are kept as spares.
    keep: bool,
}

impl Output {
    /// Nothing yet, for a client of `uid`.
    pub fn new(uid: u32, budget: Arc<SharedBudget>) -> Self {
        Output {
            blocks: VecDeque::new(),
            head: 0,
            uid,
            budget,
            queued: 0,
            sent: 0,
            boundary: 0,
            spare: Vec::new(),
            keep: false,
        }
    }

    /// Keeps blocks sent from now on for the output that follows (a worker's dump), or, with
    /// `false`, gives every kept block back to the budget and the system.
    pub fn keep_spares(&mut self, keep: bool) {
        self.keep = keep;
        if !keep {
            for _ in self.spare.drain(..) {
                self.budget.release(self.uid);
            }
        }
    }

    /// Whether everything went out.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    fn pop_front(&mut self) {
        if let Some(b) = self.blocks.pop_front() {
            if b.charged && self.keep {
                let mut data = b.data;
                data.clear();
                self.spare.push(data);
            } else if b.charged {
                self.budget.release(self.uid);
            }
        }
        self.head = 0;
    }

    /// Sends what the socket takes of what is held, without blocking. An error means the
    /// client is gone.
    pub fn pump(&mut self, fd: RawFd) -> io::Result<()> {
        while let Some(b) = self.blocks.front() {
            match send(fd, &b.data[self.head..])? {
                0 => break,
                n => {
                    self.head += n;
                    self.sent += n as u64;
                    if self.head == b.data.len() {
                        self.pop_front();
                    }
                }
            }
        }
        Ok(())
    }

    /// Sends what the socket takes of `chunk` now, with nothing held before it. Returns the
    /// bytes sent.
    pub fn send_now(&mut self, fd: RawFd, chunk: &[u8]) -> io::Result<usize> {
        debug_assert!(self.is_empty());
        let n = send(fd, chunk)?;
        self.queued += n as u64;
        self.sent += n as u64;
        Ok(n)
    }

    /// Holds what the budget allows of `chunk` (to follow what is held already). Returns the
    /// bytes held.
    pub fn spill(&mut self, chunk: &[u8]) -> usize {
        let mut done = 0;
        while done < chunk.len() {
            let room = match self.blocks.back() {
                Some(b) if b.charged => b.data.capacity() - b.data.len(),
                _ => 0,
            };
            if room == 0 {
                let data = match self.spare.pop() {
                    Some(data) => data,
                    None if self.budget.reserve(self.uid) => Vec::with_capacity(BLOCK),
                    None => break,
                };
                self.blocks.push_back(Block {
                    data,
                    charged: true,
                });
                continue;
            }
            let n = room.min(chunk.len() - done);
            if let Some(b) = self.blocks.back_mut() {
                b.data.extend_from_slice(&chunk[done..done + n]);
            }
            done += n;
        }
        self.queued += done as u64;
        done
    }

    /// Whether everything queued went out and ends at a message boundary: another message
    /// may follow on the socket as it is.
    pub fn settled(&self) -> bool {
        self.blocks.is_empty() && self.sent == self.queued && self.queued == self.boundary
    }

    /// Marks the end of a whole chunk of the response.
    pub fn end_chunk(&mut self) {
        self.boundary = self.queued;
    }

    /// Adds one of the daemon's own messages (a DONE), outside the budget.
    pub fn push_message(&mut self, msg: Vec<u8>) {
        debug_assert!(msg.len() <= MAX_MESSAGE);
        self.queued += msg.len() as u64;
        self.boundary = self.queued;
        self.blocks.push_back(Block {
            data: msg,
            charged: false,
        });
    }

    /// Drops the part of an unfinished chunk still held, so that the stream ends at a message
    /// boundary. False if part of that chunk went out already (the stream cannot be ended
    /// cleanly then).
    pub fn cut(&mut self) -> bool {
        if self.sent > self.boundary {
            return false;
        }
        let mut excess = (self.queued - self.boundary) as usize;
        while excess > 0 {
            let front = self.blocks.len() == 1;
            let Some(b) = self.blocks.back_mut() else {
                break;
            };
            let unsent = b.data.len() - if front { self.head } else { 0 };
            if unsent <= excess {
                excess -= unsent;
                let charged = b.charged;
                self.blocks.pop_back();
                if charged {
                    self.budget.release(self.uid);
                }
                if front {
                    self.head = 0;
                }
            } else {
                let keep = b.data.len() - excess;
                b.data.truncate(keep);
                excess = 0;
            }
        }
        self.queued = self.boundary;
        true
    }

    /// Drops everything held, and the spares.
    pub fn clear(&mut self) {
        self.keep_spares(false);
        while !self.blocks.is_empty() {
            self.pop_front();
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.clear();
    }
}

/// What the event loop and the worker answering a connection's request share.
#[derive(Debug, Default)]
pub struct Lease {
    state: Mutex<LeaseState>,
}

/// See [`Lease`]. The worker holds the lock while it sends (never while it waits), the event
/// loop while it decides to end the connection.
#[derive(Debug, Default)]
pub struct LeaseState {
    /// The ticket of the worker answering the request, while one does.
    pub worker: Option<u64>,
    /// The event loop ended the connection: the request's deadline passed while the worker
    /// still ran it. The worker sends nothing more, and drops the connection when it is back.
    pub abandoned: bool,
    /// Whether what went out so far ends at a message boundary with nothing held
    /// ([`Output::settled`]): the event loop may then end the stream with a DONE of its own.
    pub settled: bool,
}

impl Lease {
    /// Its state, locked.
    pub fn state(&self) -> MutexGuard<'_, LeaseState> {
        lock(&self.state)
    }
}

/// A client connection.
pub struct Conn {
    /// Its slot in the event loop.
    pub token: usize,
    /// The socket (non-blocking).
    pub sock: UnixStream,
    /// Who connected.
    pub peer: Peer,
    /// What it may see, once identified.
    pub viewer: Option<Viewer>,
    /// Bytes read and not yet used: at most one request and what came with it.
    pub input: Vec<u8>,
    /// When the first byte of the request being read came.
    pub started: Option<Instant>,
    /// When it was accepted, or last became idle.
    pub since: Instant,
    /// What is on its way to it.
    pub out: Output,
    /// The end of the request being answered (or of the message being delivered): every wait
    /// for it ends there.
    pub deadline: Option<Instant>,
    /// Whether to end the connection once the output went out.
    pub close: bool,
    /// The request waiting for a worker.
    pub request: Option<Request>,
    /// Shared with the event loop while a worker answers.
    pub lease: Arc<Lease>,
}

impl Conn {
    /// The socket's descriptor.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Queues a lone DONE with `-errno` and `message`: the answer to a bad request, or with
    /// `close` a refusal after which the connection ends.
    pub fn error(&mut self, errno: i32, message: &str, close: bool) {
        let mut b = Vec::with_capacity(64 + message.len().min(1024));
        write_done_error(&mut b, -errno, message);
        self.out.push_message(b);
        self.close |= close;
    }
}

/// One non-blocking send(); returns the bytes sent, 0 if the socket is full.
pub fn send(fd: RawFd, b: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `b` is a valid buffer of `b.len()` bytes for the duration of the call.
        let n = unsafe {
            libc::send(
                fd,
                b.as_ptr().cast(),
                b.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
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

/// Waits at most `timeout` for the socket to take more. True if it may (or if it failed: the
/// next send says how).
pub fn wait_writable(fd: RawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn budget(limit: usize) -> Arc<SharedBudget> {
        Arc::new(SharedBudget::new(limit, Arc::new(Stats::default())))
    }

    #[test]
    fn output_is_held_within_the_budget_and_cut_at_a_message_boundary() {
        let b = budget(2 * BLOCK_COST);
        let mut o = Output::new(7, b.clone());
        let chunk = vec![1u8; BLOCK + 10];
        assert_eq!(o.spill(&chunk), chunk.len());
        o.end_chunk();
        assert_eq!(b.stats.buffered.load(Ordering::Relaxed), 2 * BLOCK_COST);
        // The rest of the budget is one block minus 10 bytes.
        assert_eq!(o.spill(&chunk), BLOCK - 10);
        assert!(o.cut());
        assert_eq!(o.queued, chunk.len() as u64);
        assert_eq!(b.stats.buffered.load(Ordering::Relaxed), 2 * BLOCK_COST);
        o.push_message(vec![2; 40]);
        let (a, mut z) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        o.pump(a.as_raw_fd()).unwrap();
        drop(a);
        let mut got = Vec::new();
        z.read_to_end(&mut got).unwrap();
        let mut want = chunk.clone();
        want.extend_from_slice(&[2; 40]);
        assert!(o.is_empty());
        assert_eq!(got, want);
        assert_eq!(b.stats.buffered.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn blocks_sent_during_a_dump_are_used_again_and_given_back_after_it() {
        let b = budget(3 * BLOCK_COST);
        let used = || b.stats.buffered.load(Ordering::Relaxed);
        let mut o = Output::new(7, b.clone());
        let (a, mut z) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        o.keep_spares(true);
        let mut want = Vec::new();
        // Ten rounds of two blocks through a budget of three: without the spares, each
        // round maps two new ones; with them, the first two are used throughout.
        let mut first = Vec::new();
        for round in 0..10u8 {
            let chunk = vec![round; 2 * BLOCK];
            assert_eq!(o.spill(&chunk), chunk.len(), "round {round}");
            o.end_chunk();
            let at: Vec<*const u8> = o.blocks.iter().map(|b| b.data.as_ptr()).collect();
            if round == 0 {
                first = at.clone();
            }
            let mut sorted = at.clone();
            sorted.sort();
            let mut f = first.clone();
            f.sort();
            assert_eq!(sorted, f, "round {round} used other blocks");
            assert_eq!(used(), 2 * BLOCK_COST);
            want.extend_from_slice(&chunk);
            o.pump(a.as_raw_fd()).unwrap();
            let mut got = vec![0u8; 2 * BLOCK];
            let mut n = 0;
            while n < 2 * BLOCK {
                n += z.read(&mut got[n..]).unwrap();
                o.pump(a.as_raw_fd()).unwrap();
            }
            assert_eq!(&got[..], &want[want.len() - 2 * BLOCK..]);
            assert!(o.is_empty());
            // Sent, still charged, kept.
            assert_eq!((o.spare.len(), used()), (2, 2 * BLOCK_COST));
        }
        o.keep_spares(false);
        assert_eq!((o.spare.len(), used()), (0, 0));
        // Not kept any more: a sent block is given back at once.
        o.spill(&[1; 10]);
        o.end_chunk();
        assert_eq!(used(), BLOCK_COST);
        o.pump(a.as_raw_fd()).unwrap();
        assert_eq!((o.spare.len(), used()), (0, 0));
    }

    #[test]
    fn a_chunk_partly_sent_cannot_be_cut() {
        let b = budget(4 * BLOCK_COST);
        let mut o = Output::new(7, b.clone());
        let (a, _z) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let chunk = vec![1u8; 8 << 20];
        let n = o.send_now(a.as_raw_fd(), &chunk).unwrap();
        assert!(n > 0 && n < chunk.len());
        o.spill(&chunk[n..]);
        assert!(!o.cut());
        o.clear();
        assert_eq!(b.stats.buffered.load(Ordering::Relaxed), 0);
    }
}
