//! Memory maps from the BPF map walk (the VMA group without VMA_STAT).
//!
//! The `dump_vma` program writes each process's mappings as pieces of raw entries (kernel
//! `vm_flags`, unescaped names, a file's name only the first time the walk meets it). A second
//! thread reads that walk while the task walk runs, and turns each process's pieces into its
//! finished VMA attribute payload: flags translated to [`vma_flags`] bits, names escaped as
//! /proc/PID/maps escapes them. The task walk takes the payloads in the order both walks go (by
//! pid), appending the `[vsyscall]` gate entry /proc adds, and splices them into the task
//! messages as they are or decodes them for a task it rebuilds. A bounded channel between the
//! two keeps memory flat however many processes there are. Running the task walk and the /proc
//! fallback is the caller's (lib.rs); the record layout is taskdiag-proto's.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use taskdiag_bpf::{BpfError, TaskIter, VmaWalk};
use taskdiag_proto::msg::{DecodeError, Messages};
use taskdiag_proto::task::Vma;
use taskdiag_proto::{
    vma_flags, AccessRec, Request, Strategy, VmaRec, ACCESS_F_EXEC, ACCESS_F_MM_CHANGED,
    ACCESS_F_NAME_MISSING, MSG_VMA_PIECE, VMA_NAME_REF,
};

use crate::Error;

/// Finished payloads go over in batches of this many processes, or of this many bytes of
/// entries if that comes first (a hand-over costs a thread wake-up), and this many batches may
/// wait: the walk reads ahead of the task walk by at most AHEAD + 1 batches, each at most
/// BATCH_BYTES plus one process's maps (the kernel bounds a process's mappings by
/// vm.max_map_count), whatever the number and size of the processes.
const BATCH: usize = 64;
const BATCH_BYTES: usize = 1 << 20;
const AHEAD: usize = 8;

/// One process's memory maps from the walk: its thread-group id, its state while they were
/// read ([`Maps::access`]) and its finished VMA entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Maps {
    /// The thread group.
    pub tgid: u32,
    /// The process as it was while its maps were read: the record of its first piece, with
    /// [`ACCESS_F_MM_CHANGED`] added when a later piece described another state (an exec
    /// between two reads of a large map).
    pub access: AccessRec,
    /// The finished VMA entries.
    pub entries: Vec<u8>,
}

impl Maps {
    /// Whether these maps belong to the process state `task` describes (the task walk's
    /// ACCESS record): the same program image (exec count, address space, process start), read
    /// with no exec under way at either moment. A server may check a caller's permission to
    /// read them only then; other maps are "changed while read".
    pub fn same_image(&self, task: &AccessRec) -> bool {
        let m = &self.access;
        m.flags == 0
            && task.flags & ACCESS_F_EXEC == 0
            && m.exec_id == task.exec_id
            && m.mm_id == task.mm_id
            && m.tg_start_ns == task.tg_start_ns
    }

    /// Whether the maps were read from one address space with no exec under way (what a caller
    /// that reads them for itself needs: they are one image's), every name written.
    pub fn consistent(&self) -> bool {
        self.access.flags & (ACCESS_F_MM_CHANGED | ACCESS_F_NAME_MISSING) == 0
    }

    /// Whether the walk could not write a mapping's name ([`ACCESS_F_NAME_MISSING`]): /proc
    /// gives this process's maps (a server's client reads them from its own).
    pub fn names_missing(&self) -> bool {
        self.access.flags & ACCESS_F_NAME_MISSING != 0
    }
}

/// Processes' finished memory maps in walk order, or why the walk stopped.
type Payload = Result<Vec<Maps>, Error>;

/// Map walks given up on that still sleep (see [`VmaStream::take`]), in this whole process:
/// while one does, no walk starts (it would use the programs' buffers beside the sleeping one
/// when that one wakes, and would most likely stop at the same process), and memory maps come
/// from /proc, on threads that can be given up on too (taskdiag_procfs::stuck).
static ASLEEP: AtomicUsize = AtomicUsize::new(0);

/// The memory maps of one walk, taken in walk order.
pub(crate) struct VmaStream {
    /// `None` when there is no walk (the one task asked for does not exist, or the walk was
    /// given up on).
    rx: Option<Receiver<Payload>>,
    /// When the walk last handed over a chunk (ns since `started`) and when it started.
    progress: Arc<AtomicU64>,
    started: Instant,
    /// The walk's thread's state, to give it up.
    state: Option<Arc<Mutex<WalkState>>>,
    /// The walk was not made, or was given up on, because a process's memory-map lock was
    /// held by something stuck: a process without maps from it is read elsewhere.
    given_up: bool,
    /// Payloads received ahead of the tasks that will take them.
    next: std::collections::VecDeque<Maps>,
    /// The `[vsyscall]` entry that ends every process's map, if the kernel has one.
    gate: Vec<u8>,
}

impl VmaStream {
    /// Runs `f` with the maps `req` needs (every process's, or with ONE and THREAD the one
    /// thread group's) arriving from a walk read on a second thread meanwhile.
    pub(crate) fn with<R>(
        it: &mut TaskIter,
        req: &Request,
        f: impl FnOnce(&mut TaskIter, &RefCell<VmaStream>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut gate = Vec::new();
        if let Some(g) = vsyscall() {
            g.encode(&mut gate);
        }
        let tgid = match req.strategy() {
            Some(Strategy::One | Strategy::Thread) => match it.reader_tgid_of(req.pid) {
                Ok(t) => Some(t),
                // No walk: the task walk will say so (or find the task in /proc).
                Err(_) => return f(it, &RefCell::new(VmaStream::none(gate, false))),
            },
            _ => None,
        };
        // A process known stuck (a read of its command line given up on, say) would most
        // likely stop the walk too.
        if ASLEEP.load(Ordering::Acquire) > 0 || taskdiag_procfs::stuck::asleep() > 0 {
            return f(it, &RefCell::new(VmaStream::none(gate, true)));
        }
        let walk = it.vma_walk(tgid).map_err(Error::Bpf)?;
        let (tx, rx) = sync_channel::<Payload>(AHEAD);
        let (fin_tx, fin_rx) = sync_channel::<std::thread::Result<()>>(1);
        let started = Instant::now();
        let progress = Arc::new(AtomicU64::new(0));
        let state = Arc::new(Mutex::new(WalkState::default()));
        let (p, st) = (Arc::clone(&progress), Arc::clone(&state));
        // Not joined: the walk may sleep in a process's memory-map lock (see take()).
        std::thread::Builder::new()
            .name("taskdiag-maps".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    read_walk(walk, &tx, &p, started)
                }));
                st.lock().unwrap_or_else(|e| e.into_inner()).finish();
                let _ = fin_tx.send(r);
            })
            .map_err(|source| {
                Error::Bpf(BpfError::Attach {
                    what: "a thread to read the map walk".into(),
                    source,
                })
            })?;
        let stream = RefCell::new(VmaStream {
            rx: Some(rx),
            next: Default::default(),
            gate,
            progress,
            started,
            given_up: false,
            state: Some(Arc::clone(&state)),
        });
        let r = f(it, &stream);
        let given_up = stream.borrow().given_up;
        // Stops the reader at its next payload.
        drop(stream);
        if !given_up {
            match fin_rx.recv_timeout(taskdiag_procfs::stuck::deadline()) {
                Ok(Err(p)) => std::panic::resume_unwind(p),
                Ok(Ok(())) => {}
                // Asleep past what the task walk needed: left to finish on its own.
                Err(_) => state.lock().unwrap_or_else(|e| e.into_inner()).give_up(),
            }
        }
        r
    }

    /// A stream without a walk; `given_up`: because a walk sleeps (see [`ASLEEP`]).
    fn none(gate: Vec<u8>, given_up: bool) -> Self {
        VmaStream {
            rx: None,
            next: Default::default(),
            gate,
            progress: Arc::new(AtomicU64::new(0)),
            started: Instant::now(),
            given_up,
            state: None,
        }
    }

    /// Whether the walk was not made or was given up on because a process's memory-map lock is
    /// held by something stuck: a process it has no maps for is read from /proc (or, for a
    /// server's caller, from the caller's own).
    pub(crate) fn given_up(&self) -> bool {
        self.given_up
    }

    /// The finished VMA entries of thread group `tgid`, if the walk has them. Both walks go by
    /// pid, so the payloads of smaller tgids that nobody took are dropped on the way (processes
    /// gone before the task walk reached them), and `None` means the walk did not list `tgid`
    /// where it should have (started after the walk passed, or a leader without an address
    /// space): the caller reads /proc.
    pub(crate) fn take(&mut self, tgid: u32) -> Result<Option<Maps>, Error> {
        loop {
            while let Some(m) = self.next.front() {
                match m.tgid.cmp(&tgid) {
                    std::cmp::Ordering::Less => drop(self.next.pop_front()),
                    std::cmp::Ordering::Equal => return Ok(self.next.pop_front()),
                    std::cmp::Ordering::Greater => return Ok(None),
                }
            }
            let Some(rx) = &self.rx else {
                return Ok(None);
            };
            let limit = taskdiag_procfs::stuck::deadline();
            let got = match rx.recv_timeout(limit / 4) {
                Err(RecvTimeoutError::Timeout) => {
                    let last = self.progress.load(Ordering::Acquire);
                    let idle = (self.started.elapsed().as_nanos() as u64).saturating_sub(last);
                    if idle > limit.as_nanos() as u64 {
                        // Asleep in a read() of the walk for longer than a read of another
                        // process's memory may take: in a memory-map lock held by something
                        // stuck. The rest comes from elsewhere, and the thread is left asleep.
                        self.rx = None;
                        self.given_up = true;
                        if let Some(s) = &self.state {
                            s.lock().unwrap_or_else(|e| e.into_inner()).give_up();
                        }
                        return Ok(None);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => Err(()),
                Ok(p) => Ok(p),
            };
            match got {
                Ok(Ok(batch)) => self.next.extend(batch),
                Ok(Err(e)) => {
                    self.rx = None;
                    return Err(e);
                }
                // The walk is over.
                Err(()) => {
                    self.rx = None;
                    return Ok(None);
                }
            }
        }
    }

    /// [`VmaStream::take`], decoded, with the gate entry, and the record of the process's
    /// state while they were read.
    pub(crate) fn take_decoded(&mut self, tgid: u32) -> Result<Option<(Maps, Vec<Vma>)>, Error> {
        let Some(mut maps) = self.take(tgid)? else {
            return Ok(None);
        };
        let entries = std::mem::take(&mut maps.entries);
        let bad = |what| {
            Error::Internal(DecodeError::BadRecord {
                pid: tgid,
                group: "vma",
                what,
            })
        };
        let mut v = Vma::decode_all(&entries).map_err(bad)?;
        v.extend(Vma::decode_all(&self.gate).map_err(bad)?);
        Ok(Some((maps, v)))
    }

    /// The encoded `[vsyscall]` entry (empty if the kernel has none).
    pub(crate) fn gate(&self) -> &[u8] {
        &self.gate
    }
}

/// Turns the pieces of one walk into finished per-process payloads.
#[derive(Default)]
struct Builder {
    /// The thread group whose entries are being built, its state while they were read, and
    /// them.
    cur: Option<u32>,
    access: AccessRec,
    out: Vec<u8>,
    /// Whether the current pieces are dropped: a thread group seen again later (its leader
    /// gone, another thread walked) keeps its first listing.
    skipping: bool,
    seen: HashSet<u32>,
    /// Escaped file names by the key the program gave them, for the entries that refer to one.
    names: HashMap<u64, Vec<u8>>,
}

impl Builder {
    /// Takes a chunk of whole messages; hands each finished process to `emit`, which returns
    /// false when nobody wants more (then so does this).
    fn chunk(
        &mut self,
        chunk: &[u8],
        emit: &mut dyn FnMut(Maps) -> bool,
    ) -> Result<bool, DecodeError> {
        for m in Messages::new(chunk) {
            let m = m?;
            if m.header.msg_type != MSG_VMA_PIECE {
                continue;
            }
            let t = m.header.tgid;
            let access = AccessRec::read_from(m.payload).ok_or(DecodeError::BadRecord {
                pid: m.header.pid,
                group: "vma",
                what: "piece without its access record",
            })?;
            let first = self.cur != Some(t);
            if first {
                if !self.finish(emit) {
                    return Ok(false);
                }
                self.cur = Some(t);
                self.skipping = !self.seen.insert(t);
                self.access = access;
            } else if !same_state(&self.access, &access) {
                // The pieces of one listing describe two states (an exec between two reads):
                // the listing is not one image's.
                self.access.flags |= ACCESS_F_MM_CHANGED;
            }
            self.access.flags |= access.flags;
            if !self.skipping {
                self.entries(&m.payload[AccessRec::SIZE..], m.header.pid)?;
            }
        }
        Ok(true)
    }

    /// Hands on the process being built, if any.
    fn finish(&mut self, emit: &mut dyn FnMut(Maps) -> bool) -> bool {
        match (self.cur.take(), self.skipping) {
            (Some(tgid), false) => emit(Maps {
                tgid,
                access: self.access,
                entries: std::mem::take(&mut self.out),
            }),
            _ => true,
        }
    }

    /// Appends the finished form of a piece's entries.
    fn entries(&mut self, mut p: &[u8], pid: u32) -> Result<(), DecodeError> {
        let bad = |what| DecodeError::BadRecord {
            pid,
            group: "vma",
            what,
        };
        while !p.is_empty() {
            let mut rec = VmaRec::read_from(p).ok_or(bad("short vma entry"))?;
            let len = rec.vma_len as usize;
            let nl = rec.name_len as usize;
            if len < VmaRec::SIZE + nl || len > p.len() || !len.is_multiple_of(4) {
                return Err(bad("vma entry length inconsistent with its name"));
            }
            let raw = &p[VmaRec::SIZE..VmaRec::SIZE + nl];
            let name = if rec.name_ref == VMA_NAME_REF {
                // A file named earlier in this walk.
                Cow::Borrowed(self.names.get(&rec.name_key).map_or(&[][..], Vec::as_slice))
            } else {
                let n = escape(raw);
                if rec.name_key != 0 {
                    self.names.insert(rec.name_key, n.to_vec());
                }
                n
            };
            // Names are at most a path (4096) plus " (deleted)"; longer ones are cut.
            let name = &name[..name.len().min(8192)];
            rec.vm_flags = vma_flags::from_kernel(rec.vm_flags);
            rec.vm_flags_known = vma_flags::ALL;
            rec.vma_len = align4(VmaRec::SIZE + name.len()) as u16;
            rec.name_len = name.len() as u16;
            rec.stat_len = 0;
            rec.name_ref = 0;
            rec.name_key = 0;
            let start = self.out.len();
            rec.write_to(&mut self.out);
            self.out.extend_from_slice(name);
            self.out.resize(start + rec.vma_len as usize, 0);
            p = &p[len..];
        }
        Ok(())
    }
}

/// Whether two records of one process describe the same state (all but its flags).
/// A walk's thread: finished, or given up on (counted in [`ASLEEP`] until it finishes).
#[derive(Default)]
struct WalkState {
    finished: bool,
    given_up: bool,
}

impl WalkState {
    fn give_up(&mut self) {
        if !self.finished && !self.given_up {
            self.given_up = true;
            ASLEEP.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn finish(&mut self) {
        self.finished = true;
        if self.given_up {
            ASLEEP.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Reads `walk` to its end on its own thread, handing its processes' finished maps to `tx` in
/// batches, and noting in `progress` when each read() returned (ns since `started`).
fn read_walk(walk: VmaWalk, tx: &SyncSender<Payload>, progress: &AtomicU64, started: Instant) {
    let mut b = Builder::default();
    let mut bad = None;
    let mut batch = Vec::with_capacity(BATCH);
    let mut bytes = 0;
    let mut emit = |m: Maps| {
        bytes += m.entries.len();
        batch.push(m);
        if batch.len() < BATCH && bytes < BATCH_BYTES {
            return true;
        }
        bytes = 0;
        tx.send(Ok(std::mem::replace(&mut batch, Vec::with_capacity(BATCH))))
            .is_ok()
    };
    let r = walk.read_all(&mut |chunk| {
        progress.store(started.elapsed().as_nanos() as u64, Ordering::Release);
        match b.chunk(chunk, &mut emit) {
            Ok(true) => Ok(()),
            // The task walk is over: nobody wants the rest.
            Ok(false) => Err(std::io::Error::other("stopped")),
            Err(e) => {
                bad = Some(e);
                Err(std::io::Error::other("invalid memory-map record"))
            }
        }
    });
    match (r, bad) {
        (_, Some(e)) => {
            let _ = tx.send(Err(Error::Internal(e)));
        }
        (Ok(_), None) => {
            if b.finish(&mut emit) {
                let _ = tx.send(Ok(batch));
            }
        }
        (Err(BpfError::Sink(_)), None) => {}
        (Err(e), None) => {
            let _ = tx.send(Err(Error::Bpf(e)));
        }
    }
}

fn same_state(a: &AccessRec, b: &AccessRec) -> bool {
    AccessRec { flags: 0, ..*a } == AccessRec { flags: 0, ..*b }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A path as /proc/PID/maps prints it (seq_path() escapes newlines).
pub(crate) fn escape(raw: &[u8]) -> Cow<'_, [u8]> {
    if !raw.contains(&b'\n') {
        return Cow::Borrowed(raw);
    }
    let mut name = Vec::with_capacity(raw.len() + 6);
    for &c in raw {
        if c == b'\n' {
            name.extend_from_slice(b"\\012");
        } else {
            name.push(c);
        }
    }
    Cow::Owned(name)
}

/// The [vsyscall] mapping /proc/PID/maps shows for every process, if the kernel has one: read
/// once from /proc/self/maps (it is the same gate page for all).
fn vsyscall() -> Option<Vma> {
    static GATE: std::sync::OnceLock<Option<Vma>> = std::sync::OnceLock::new();
    GATE.get_or_init(read_vsyscall).clone()
}

fn read_vsyscall() -> Option<Vma> {
    let maps = std::fs::read("/proc/self/maps").ok()?;
    let mut gate = taskdiag_procfs::maps::find_vsyscall(&maps).ok()??;
    // gate_vma has no flags but VM_READ and VM_EXEC (VM_EXEC alone with vsyscall=xonly), all of
    // which the permissions show.
    gate.rec.vm_flags_known = vma_flags::ALL;
    Some(gate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::MsgHeader;

    /// One raw entry as the program writes it.
    fn raw_entry(start: u64, kflags: u64, name: &[u8], name_ref: u16, key: u64) -> Vec<u8> {
        let rec = VmaRec {
            start,
            end: start + 4096,
            vm_flags: kflags,
            vma_len: align4(VmaRec::SIZE + name.len()) as u16,
            name_len: name.len() as u16,
            name_ref,
            name_key: key,
            ..Default::default()
        };
        let mut v = Vec::new();
        rec.write_to(&mut v);
        v.extend_from_slice(name);
        v.resize(rec.vma_len as usize, 0xee);
        v
    }

    /// The record a piece of process `tgid` starts with.
    fn state(tgid: u32, exec_id: u64) -> AccessRec {
        AccessRec {
            reader_pid: tgid,
            reader_tgid: tgid,
            has_mm: 1,
            exec_id,
            mm_id: 0xffff_0000 + u64::from(tgid),
            tg_start_ns: 1000 * u64::from(tgid),
            ..AccessRec::default()
        }
    }

    fn piece(pid: u32, tgid: u32, entries: &[Vec<u8>]) -> Vec<u8> {
        piece_in(state(tgid, 1), pid, tgid, entries)
    }

    fn piece_in(access: AccessRec, pid: u32, tgid: u32, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut body = access.to_bytes().to_vec();
        body.extend(entries.concat());
        let mut v = Vec::new();
        MsgHeader {
            len: (MsgHeader::SIZE + body.len()) as u32,
            msg_type: MSG_VMA_PIECE,
            flags: 0,
            pid,
            tgid,
        }
        .write_to(&mut v);
        v.extend_from_slice(&body);
        v
    }

    /// The payloads a walk of `chunks` hands on, by tgid.
    fn walk(chunks: &[Vec<u8>]) -> HashMap<u32, Vec<Vma>> {
        walk_states(chunks)
            .into_iter()
            .map(|(t, (_, v))| (t, v))
            .collect()
    }

    /// [`walk`] with each process's state.
    fn walk_states(chunks: &[Vec<u8>]) -> HashMap<u32, (AccessRec, Vec<Vma>)> {
        let mut b = Builder::default();
        let mut got = Vec::new();
        let mut emit = |m: Maps| {
            got.push(m);
            true
        };
        for c in chunks {
            assert!(b.chunk(c, &mut emit).unwrap());
        }
        b.finish(&mut emit);
        let tgids: Vec<u32> = got.iter().map(|m| m.tgid).collect();
        let unique: HashSet<u32> = tgids.iter().copied().collect();
        assert_eq!(unique.len(), tgids.len(), "one payload per tgid: {tgids:?}");
        got.into_iter()
            .map(|m| (m.tgid, (m.access, Vma::decode_all(&m.entries).unwrap())))
            .collect()
    }

    /// A stream over payloads already made, as the task walk sees it.
    fn stream(payloads: Vec<(u32, Vec<u8>)>) -> VmaStream {
        // In batches of two, as the reader would send them.
        let (tx, rx) = sync_channel(payloads.len() + 1);
        let maps: Vec<Maps> = payloads
            .into_iter()
            .map(|(tgid, entries)| Maps {
                tgid,
                access: state(tgid, 1),
                entries,
            })
            .collect();
        for p in maps.chunks(2) {
            tx.send(Ok(p.to_vec())).unwrap();
        }
        VmaStream {
            rx: Some(rx),
            ..VmaStream::none(Vec::new(), false)
        }
    }

    #[test]
    fn names_are_shared_escaped_and_padding_cleared() {
        let a = piece(
            10,
            10,
            &[
                raw_entry(0x1000, 0x5, b"/lib/libc.so", 0, 77),
                raw_entry(0x2000, 0x1, b"", VMA_NAME_REF, 77),
                raw_entry(0x3000, 0x3, b"/tmp/a\nb", 0, 0),
            ],
        );
        let b = piece(11, 11, &[raw_entry(0x1000, 0x5, b"", VMA_NAME_REF, 77)]);
        let w = walk(&[a, b]);
        let v10 = &w[&10];
        assert_eq!(v10.len(), 3);
        assert_eq!(v10[0].name, b"/lib/libc.so");
        assert_eq!(v10[1].name, b"/lib/libc.so");
        assert_eq!(v10[2].name, b"/tmp/a\\012b");
        assert_eq!(v10[0].rec.vm_flags, vma_flags::READ | vma_flags::EXEC);
        assert_eq!(v10[0].rec.vm_flags_known, vma_flags::ALL);
        assert_eq!(v10[1].rec.name_key, 0);
        assert_eq!(w[&11][0].name, b"/lib/libc.so");
        // Padding is zero in the finished entries (0xee in the raw ones).
        let mut b = Builder::default();
        let mut got = Vec::new();
        b.chunk(&piece(5, 5, &[raw_entry(0, 0, b"/x", 0, 9)]), &mut |m| {
            got.push(m.entries);
            true
        })
        .unwrap();
        b.finish(&mut |m| {
            got.push(m.entries);
            true
        });
        assert_eq!(&got[0][VmaRec::SIZE..], b"/x\0\0");
    }

    #[test]
    fn pieces_join_and_a_group_seen_again_keeps_its_first_listing() {
        let p1 = piece(20, 20, &[raw_entry(0x1000, 0, b"", 0, 0)]);
        let p2 = piece(20, 20, &[raw_entry(0x2000, 0, b"", 0, 0)]);
        let other = piece(21, 21, &[raw_entry(0x9000, 0, b"", 0, 0)]);
        let again = piece(25, 20, &[raw_entry(0x5000, 0, b"", 0, 0)]);
        let w = walk(&[p1, p2, other, again]);
        let starts: Vec<u64> = w[&20].iter().map(|v| v.rec.start).collect();
        assert_eq!(starts, [0x1000, 0x2000]);
        assert_eq!(w[&21][0].rec.start, 0x9000);
    }

    #[test]
    fn a_stopped_reader_stops_the_builder() {
        let mut b = Builder::default();
        let chunk = [
            piece(1, 1, &[raw_entry(0, 0, b"", 0, 0)]),
            piece(2, 2, &[raw_entry(0, 0, b"", 0, 0)]),
        ]
        .concat();
        assert!(!b.chunk(&chunk, &mut |_| false).unwrap());
    }

    #[test]
    fn tasks_take_payloads_in_walk_order() {
        let mut s = stream(vec![
            (3, b"three".to_vec()),
            (5, b"five".to_vec()),
            (9, b"nine".to_vec()),
        ]);
        // 1 is not in the walk (3 comes first); 3 is; 4 is not; 5 is; 7 is not, and 9 waits
        // for its own task.
        let take = |s: &mut VmaStream, t| s.take(t).unwrap().map(|m| m.entries);
        assert_eq!(take(&mut s, 1), None);
        assert_eq!(take(&mut s, 3).as_deref(), Some(&b"three"[..]));
        assert_eq!(take(&mut s, 4), None);
        assert_eq!(take(&mut s, 5).as_deref(), Some(&b"five"[..]));
        assert_eq!(take(&mut s, 7), None);
        assert_eq!(take(&mut s, 9).as_deref(), Some(&b"nine"[..]));
        // The walk is over.
        assert_eq!(take(&mut s, 10), None);
        // A payload whose task never comes is dropped when a later task asks.
        let mut s = stream(vec![(2, b"two".to_vec()), (6, b"six".to_vec())]);
        assert_eq!(take(&mut s, 6).as_deref(), Some(&b"six"[..]));
    }

    #[test]
    fn inconsistent_entries_are_errors_naming_the_task() {
        let mut e = raw_entry(0, 0, b"/x", 0, 0);
        e[VmaRec::SIZE - 14] = 200; // name_len (low byte) beyond the entry
        let mut b = Builder::default();
        let err = b.chunk(&piece(33, 33, &[e]), &mut |_| true).unwrap_err();
        assert!(err.to_string().contains("task 33"), "{err}");
        // A piece too short for its record.
        let mut short = piece(34, 34, &[]);
        short.truncate(MsgHeader::SIZE + 8);
        short[..4].copy_from_slice(&((MsgHeader::SIZE + 8) as u32).to_ne_bytes());
        let err = Builder::default().chunk(&short, &mut |_| true).unwrap_err();
        assert!(err.to_string().contains("access record"), "{err}");
    }

    #[test]
    fn the_state_while_maps_were_read_travels_with_them() {
        let e = || raw_entry(0x1000, 0, b"", 0, 0);
        // One state for all pieces: kept as it is, and the same image as the task walk's.
        let w = walk_states(&[piece(40, 40, &[e()]), piece(40, 40, &[e()])]);
        let m = Maps {
            tgid: 40,
            access: w[&40].0,
            entries: Vec::new(),
        };
        assert_eq!(m.access, state(40, 1));
        assert!(m.consistent());
        assert!(m.same_image(&state(40, 1)));
        // The task walk saw another image (an exec between the two walks), or an exec was
        // under way then: not the same image.
        assert!(!m.same_image(&state(40, 2)));
        let mut busy = state(40, 1);
        busy.flags = ACCESS_F_EXEC;
        assert!(!m.same_image(&busy));
        // An exec between two pieces of a large map: the listing is torn.
        let mut later = state(40, 2);
        later.mm_id += 1;
        let w = walk_states(&[piece(40, 40, &[e()]), piece_in(later, 40, 40, &[e()])]);
        let torn = Maps {
            tgid: 40,
            access: w[&40].0,
            entries: Vec::new(),
        };
        assert!(!torn.consistent());
        assert!(!torn.same_image(&state(40, 1)));
        // A piece read while an exec was under way marks the whole listing.
        let mut busy = state(41, 1);
        busy.flags = ACCESS_F_EXEC;
        let w = walk_states(&[piece(41, 41, &[e()]), piece_in(busy, 41, 41, &[e()])]);
        assert_eq!(w[&41].0.flags, ACCESS_F_EXEC);
    }
}
