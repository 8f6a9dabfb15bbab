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
use std::sync::mpsc::{sync_channel, Receiver};

use taskdiag_bpf::{BpfError, TaskIter};
use taskdiag_proto::msg::{DecodeError, Messages};
use taskdiag_proto::task::Vma;
use taskdiag_proto::{vma_flags, Request, Strategy, VmaRec, MSG_VMA_PIECE};

use crate::Error;

/// Finished payloads go over in batches of this many processes (a hand-over costs a thread
/// wake-up), and this many batches may wait.
const BATCH: usize = 64;
const AHEAD: usize = 8;

/// Processes' finished VMA entries in walk order, or why the walk stopped.
type Payload = Result<Vec<(u32, Vec<u8>)>, Error>;

/// The memory maps of one walk, taken in walk order.
pub(crate) struct VmaStream {
    /// `None` when there is no walk (the one task asked for does not exist).
    rx: Option<Receiver<Payload>>,
    /// Payloads received ahead of the tasks that will take them.
    next: std::collections::VecDeque<(u32, Vec<u8>)>,
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
            Some(Strategy::One | Strategy::Thread) => match it.tgid_of(req.pid) {
                Ok(t) => Some(t),
                // No walk: the task walk will say so (or find the task in /proc).
                Err(_) => {
                    let s = RefCell::new(VmaStream {
                        rx: None,
                        next: Default::default(),
                        gate,
                    });
                    return f(it, &s);
                }
            },
            _ => None,
        };
        let walk = it.vma_walk(tgid).map_err(Error::Bpf)?;
        let (tx, rx) = sync_channel::<Payload>(AHEAD);
        std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut b = Builder::default();
                let mut bad = None;
                let mut batch = Vec::with_capacity(BATCH);
                let mut emit = |t: u32, p: Vec<u8>| {
                    batch.push((t, p));
                    batch.len() < BATCH
                        || tx
                            .send(Ok(std::mem::replace(&mut batch, Vec::with_capacity(BATCH))))
                            .is_ok()
                };
                let r = walk.read_all(&mut |chunk| match b.chunk(chunk, &mut emit) {
                    Ok(true) => Ok(()),
                    // The task walk is over: nobody wants the rest.
                    Ok(false) => Err(std::io::Error::other("stopped")),
                    Err(e) => {
                        bad = Some(e);
                        Err(std::io::Error::other("invalid memory-map record"))
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
            });
            let stream = RefCell::new(VmaStream {
                rx: Some(rx),
                next: Default::default(),
                gate,
            });
            let r = f(it, &stream);
            // Stops the reader at its next payload.
            drop(stream);
            if let Err(p) = reader.join() {
                std::panic::resume_unwind(p);
            }
            r
        })
    }

    /// The finished VMA entries of thread group `tgid`, if the walk has them. Both walks go by
    /// pid, so the payloads of smaller tgids that nobody took are dropped on the way (processes
    /// gone before the task walk reached them), and `None` means the walk did not list `tgid`
    /// where it should have (started after the walk passed, or a leader without an address
    /// space): the caller reads /proc.
    pub(crate) fn take(&mut self, tgid: u32) -> Result<Option<Vec<u8>>, Error> {
        loop {
            while let Some((t, _)) = self.next.front() {
                match (*t).cmp(&tgid) {
                    std::cmp::Ordering::Less => drop(self.next.pop_front()),
                    std::cmp::Ordering::Equal => return Ok(self.next.pop_front().map(|(_, p)| p)),
                    std::cmp::Ordering::Greater => return Ok(None),
                }
            }
            let Some(rx) = &self.rx else {
                return Ok(None);
            };
            match rx.recv() {
                Ok(Ok(batch)) => self.next.extend(batch),
                Ok(Err(e)) => {
                    self.rx = None;
                    return Err(e);
                }
                // The walk is over.
                Err(_) => {
                    self.rx = None;
                    return Ok(None);
                }
            }
        }
    }

    /// [`VmaStream::take`], decoded, with the gate entry.
    pub(crate) fn take_decoded(&mut self, tgid: u32) -> Result<Option<Vec<Vma>>, Error> {
        let Some(entries) = self.take(tgid)? else {
            return Ok(None);
        };
        let bad = |what| {
            Error::Internal(DecodeError::BadRecord {
                pid: tgid,
                group: "vma",
                what,
            })
        };
        let mut v = Vma::decode_all(&entries).map_err(bad)?;
        v.extend(Vma::decode_all(&self.gate).map_err(bad)?);
        Ok(Some(v))
    }

    /// The encoded `[vsyscall]` entry (empty if the kernel has none).
    pub(crate) fn gate(&self) -> &[u8] {
        &self.gate
    }
}

/// Turns the pieces of one walk into finished per-process payloads.
#[derive(Default)]
struct Builder {
    /// The thread group whose entries are being built, and them.
    cur: Option<u32>,
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
        emit: &mut dyn FnMut(u32, Vec<u8>) -> bool,
    ) -> Result<bool, DecodeError> {
        for m in Messages::new(chunk) {
            let m = m?;
            if m.header.msg_type != MSG_VMA_PIECE {
                continue;
            }
            let t = m.header.tgid;
            if self.cur != Some(t) {
                if !self.finish(emit) {
                    return Ok(false);
                }
                self.cur = Some(t);
                self.skipping = !self.seen.insert(t);
            }
            if !self.skipping {
                self.entries(m.payload, m.header.pid)?;
            }
        }
        Ok(true)
    }

    /// Hands on the process being built, if any.
    fn finish(&mut self, emit: &mut dyn FnMut(u32, Vec<u8>) -> bool) -> bool {
        match (self.cur.take(), self.skipping) {
            (Some(t), false) => emit(t, std::mem::take(&mut self.out)),
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
            if len < VmaRec::SIZE + nl || len > p.len() || len % 4 != 0 {
                return Err(bad("vma entry length inconsistent with its name"));
            }
            let raw = &p[VmaRec::SIZE..VmaRec::SIZE + nl];
            let name = if rec.reserved == 1 {
                // A file named earlier in this walk.
                Cow::Borrowed(
                    self.names
                        .get(&rec.reserved2)
                        .map_or(&[][..], Vec::as_slice),
                )
            } else {
                let n = escape(raw);
                if rec.reserved2 != 0 {
                    self.names.insert(rec.reserved2, n.to_vec());
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
            rec.reserved = 0;
            rec.reserved2 = 0;
            let start = self.out.len();
            rec.write_to(&mut self.out);
            self.out.extend_from_slice(name);
            self.out.resize(start + rec.vma_len as usize, 0);
            p = &p[len..];
        }
        Ok(())
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A path as /proc/PID/maps prints it (seq_path() escapes newlines).
fn escape(raw: &[u8]) -> Cow<'_, [u8]> {
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
    let line = maps
        .split(|&c| c == b'\n')
        .find(|l| l.ends_with(b"[vsyscall]"))?;
    taskdiag_procfs::maps::parse_header(line).ok().map(|mut v| {
        v.rec.vm_flags_known = vma_flags::ALL;
        v
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::MsgHeader;

    /// One raw entry as the program writes it.
    fn raw_entry(start: u64, kflags: u64, name: &[u8], reserved: u16, key: u64) -> Vec<u8> {
        let rec = VmaRec {
            start,
            end: start + 4096,
            vm_flags: kflags,
            vma_len: align4(VmaRec::SIZE + name.len()) as u16,
            name_len: name.len() as u16,
            reserved,
            reserved2: key,
            ..Default::default()
        };
        let mut v = Vec::new();
        rec.write_to(&mut v);
        v.extend_from_slice(name);
        v.resize(rec.vma_len as usize, 0xee);
        v
    }

    fn piece(pid: u32, tgid: u32, entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
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
        let mut b = Builder::default();
        let mut got = Vec::new();
        let mut emit = |t: u32, p: Vec<u8>| {
            got.push((t, p));
            true
        };
        for c in chunks {
            assert!(b.chunk(c, &mut emit).unwrap());
        }
        b.finish(&mut emit);
        let tgids: Vec<u32> = got.iter().map(|(t, _)| *t).collect();
        let unique: HashSet<u32> = tgids.iter().copied().collect();
        assert_eq!(unique.len(), tgids.len(), "one payload per tgid: {tgids:?}");
        got.into_iter()
            .map(|(t, p)| (t, Vma::decode_all(&p).unwrap()))
            .collect()
    }

    /// A stream over payloads already made, as the task walk sees it.
    fn stream(payloads: Vec<(u32, Vec<u8>)>) -> VmaStream {
        // In batches of two, as the reader would send them.
        let (tx, rx) = sync_channel(payloads.len() + 1);
        for p in payloads.chunks(2) {
            tx.send(Ok(p.to_vec())).unwrap();
        }
        VmaStream {
            rx: Some(rx),
            next: Default::default(),
            gate: Vec::new(),
        }
    }

    #[test]
    fn names_are_shared_escaped_and_padding_cleared() {
        let a = piece(
            10,
            10,
            &[
                raw_entry(0x1000, 0x5, b"/lib/libc.so", 0, 77),
                raw_entry(0x2000, 0x1, b"", 1, 77),
                raw_entry(0x3000, 0x3, b"/tmp/a\nb", 0, 0),
            ],
        );
        let b = piece(11, 11, &[raw_entry(0x1000, 0x5, b"", 1, 77)]);
        let w = walk(&[a, b]);
        let v10 = &w[&10];
        assert_eq!(v10.len(), 3);
        assert_eq!(v10[0].name, b"/lib/libc.so");
        assert_eq!(v10[1].name, b"/lib/libc.so");
        assert_eq!(v10[2].name, b"/tmp/a\\012b");
        assert_eq!(v10[0].rec.vm_flags, vma_flags::READ | vma_flags::EXEC);
        assert_eq!(v10[0].rec.vm_flags_known, vma_flags::ALL);
        assert_eq!(v10[1].rec.reserved2, 0);
        assert_eq!(w[&11][0].name, b"/lib/libc.so");
        // Padding is zero in the finished entries (0xee in the raw ones).
        let mut b = Builder::default();
        let mut got = Vec::new();
        b.chunk(
            &piece(5, 5, &[raw_entry(0, 0, b"/x", 0, 9)]),
            &mut |_, p| {
                got.push(p);
                true
            },
        )
        .unwrap();
        b.finish(&mut |_, p| {
            got.push(p);
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
        assert!(!b.chunk(&chunk, &mut |_, _| false).unwrap());
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
        assert_eq!(s.take(1).unwrap(), None);
        assert_eq!(s.take(3).unwrap().as_deref(), Some(&b"three"[..]));
        assert_eq!(s.take(4).unwrap(), None);
        assert_eq!(s.take(5).unwrap().as_deref(), Some(&b"five"[..]));
        assert_eq!(s.take(7).unwrap(), None);
        assert_eq!(s.take(9).unwrap().as_deref(), Some(&b"nine"[..]));
        // The walk is over.
        assert_eq!(s.take(10).unwrap(), None);
        // A payload whose task never comes is dropped when a later task asks.
        let mut s = stream(vec![(2, b"two".to_vec()), (6, b"six".to_vec())]);
        assert_eq!(s.take(6).unwrap().as_deref(), Some(&b"six"[..]));
    }

    #[test]
    fn inconsistent_entries_are_errors_naming_the_task() {
        let mut e = raw_entry(0, 0, b"/x", 0, 0);
        e[VmaRec::SIZE - 14] = 200; // name_len (low byte) beyond the entry
        let mut b = Builder::default();
        let err = b.chunk(&piece(33, 33, &[e]), &mut |_, _| true).unwrap_err();
        assert!(err.to_string().contains("task 33"), "{err}");
    }
}
