//! Memory maps from the BPF map walk (the VMA group without VMA_STAT).
//!
//! The `dump_vma` program writes each process's mappings as pieces of raw entries (kernel
//! `vm_flags`, unescaped names, a file's name only the first time the walk meets it). This
//! module turns them, once per walk, into each process's finished VMA attribute payload, kept
//! in one arena: flags translated to [`vma_flags`] bits, names escaped as /proc/PID/maps escapes
//! them, and the `[vsyscall]` gate entry /proc adds. The task walk then splices a payload into
//! the task's message as it is ([`VmaWalk::take`]), or decodes it for a task it rebuilds
//! ([`VmaWalk::take_decoded`]). Running the walks and the /proc fallback is the caller's
//! (lib.rs); the record layout is taskdiag-proto's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;

use taskdiag_bpf::TaskIter;
use taskdiag_proto::msg::{DecodeError, Messages};
use taskdiag_proto::task::Vma;
use taskdiag_proto::{vma_flags, Request, Strategy, VmaRec, MSG_VMA_PIECE};

use crate::Error;

/// The memory maps of one walk, by thread-group id.
#[derive(Default)]
pub(crate) struct VmaWalk {
    /// Finished VMA entries; each thread group's are contiguous.
    arena: Vec<u8>,
    /// Where each thread group's entries are in `arena`. Taken out by the task that gets them.
    spans: RefCell<HashMap<u32, Range<usize>>>,
    /// The `[vsyscall]` entry that ends every process's map, if the kernel has one.
    gate: Vec<u8>,
}

impl VmaWalk {
    /// Walks the memory maps `req` needs: every process's, or (ONE, THREAD) the one thread
    /// group's. A task that cannot be found gives an empty walk (the task walk will say so,
    /// or find the task in /proc).
    pub(crate) fn run(it: &mut TaskIter, req: &Request) -> Result<Self, Error> {
        let tgid = match req.strategy() {
            Some(Strategy::One | Strategy::Thread) => match it.tgid_of(req.pid) {
                Ok(t) => Some(t),
                Err(_) => return Ok(VmaWalk::default()),
            },
            _ => None,
        };
        // The kernel's walk and the building of entries run side by side: this thread reads
        // the iterator, a second one builds (each is most of a dump's time on its own).
        // Batches of whole messages go over `tx` and come back emptied over `back`, so the
        // same few buffers carry the whole walk (a seq read gives 32 KiB at most).
        const BATCH: usize = 1 << 20;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(16);
        let (back_tx, back) = std::sync::mpsc::channel::<Vec<u8>>();
        let (walked, built) = std::thread::scope(|s| {
            let builder = s.spawn(move || {
                let mut b = Builder::default();
                for mut chunk in rx {
                    b.chunk(&chunk)?;
                    chunk.clear();
                    let _ = back_tx.send(chunk);
                }
                Ok::<_, DecodeError>(b)
            });
            let new_batch = || {
                back.try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BATCH + (64 << 10)))
            };
            let mut batch = new_batch();
            let send = |b: &mut Vec<u8>| {
                tx.send(std::mem::replace(b, new_batch()))
                    .map_err(|_| std::io::Error::other("invalid memory-map record"))
            };
            let mut walked = it.dump_vmas(tgid, &mut |chunk| {
                batch.extend_from_slice(chunk);
                match batch.len() >= BATCH {
                    true => send(&mut batch),
                    false => Ok(()),
                }
            });
            if let (Ok(n), false) = (&walked, batch.is_empty()) {
                let n = *n;
                walked = send(&mut batch)
                    .map(|()| n)
                    .map_err(taskdiag_bpf::BpfError::Sink);
            }
            drop(tx);
            let built = builder
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (walked, built)
        });
        // A bad record stops the builder, which makes the walk fail: report the record.
        let b = built.map_err(Error::Internal)?;
        walked.map_err(Error::Bpf)?;
        let mut gate = Vec::new();
        if let Some(g) = vsyscall() {
            g.encode(&mut gate);
        }
        Ok(VmaWalk {
            arena: b.arena,
            spans: RefCell::new(b.spans),
            gate,
        })
    }

    /// The VMA attribute payload of thread group `tgid`, in two parts (its entries, the gate
    /// entry), taken out: each is given once.
    pub(crate) fn take(&self, tgid: u32) -> Option<[&[u8]; 2]> {
        let r = self.spans.borrow_mut().remove(&tgid)?;
        Some([&self.arena[r], &self.gate])
    }

    /// [`VmaWalk::take`], decoded.
    pub(crate) fn take_decoded(&self, tgid: u32) -> Option<Vec<Vma>> {
        let [entries, gate] = self.take(tgid)?;
        let mut v = Vma::decode_all(entries).ok()?;
        v.extend(Vma::decode_all(gate).ok()?);
        Some(v)
    }
}

/// Gathers the pieces of one walk.
#[derive(Default)]
struct Builder {
    arena: Vec<u8>,
    spans: HashMap<u32, Range<usize>>,
    /// The thread group whose entries are being appended.
    cur: Option<u32>,
    /// Whether the current pieces are dropped: a thread group seen again later (its leader
    /// gone, another thread walked) keeps its first listing.
    skipping: bool,
    /// Escaped file names by the key the program gave them, for the entries that refer to one.
    names: HashMap<u64, Vec<u8>>,
}

impl Builder {
    fn chunk(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        for m in Messages::new(chunk) {
            let m = m?;
            if m.header.msg_type != MSG_VMA_PIECE {
                continue;
            }
            let t = m.header.tgid;
            if self.cur != Some(t) {
                self.cur = Some(t);
                self.skipping = self.spans.contains_key(&t);
                if !self.skipping {
                    let at = self.arena.len();
                    self.spans.insert(t, at..at);
                }
            }
            if self.skipping {
                continue;
            }
            self.entries(m.payload, m.header.pid)?;
            let end = self.arena.len();
            if let Some(r) = self.spans.get_mut(&t) {
                r.end = end;
            }
        }
        Ok(())
    }

    /// Appends the finished form of a piece's entries to the arena.
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
            let name: &[u8] = if rec.reserved == 1 {
                // A file named earlier in this walk.
                self.names.get(&rec.reserved2).map_or(&[], Vec::as_slice)
            } else if rec.reserved2 != 0 {
                let n = self.names.entry(rec.reserved2).or_default();
                *n = escape(raw);
                n
            } else if raw.contains(&b'\n') {
                self.names.insert(0, escape(raw));
                &self.names[&0]
            } else {
                raw
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
            let start = self.arena.len();
            rec.write_to(&mut self.arena);
            self.arena.extend_from_slice(name);
            self.arena.resize(start + rec.vma_len as usize, 0);
            p = &p[len..];
        }
        Ok(())
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A path as /proc/PID/maps prints it (seq_path() escapes newlines).
fn escape(raw: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(raw.len());
    for &c in raw {
        if c == b'\n' {
            name.extend_from_slice(b"\\012");
        } else {
            name.push(c);
        }
    }
    name
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

    fn walk(chunks: &[Vec<u8>]) -> VmaWalk {
        let mut b = Builder::default();
        for c in chunks {
            b.chunk(c).unwrap();
        }
        VmaWalk {
            arena: b.arena,
            spans: RefCell::new(b.spans),
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
        let v10 = w.take_decoded(10).unwrap();
        assert_eq!(v10.len(), 3);
        assert_eq!(v10[0].name, b"/lib/libc.so");
        assert_eq!(v10[1].name, b"/lib/libc.so");
        assert_eq!(v10[2].name, b"/tmp/a\\012b");
        assert_eq!(v10[0].rec.vm_flags, vma_flags::READ | vma_flags::EXEC);
        assert_eq!(v10[0].rec.vm_flags_known, vma_flags::ALL);
        assert_eq!(v10[1].rec.reserved2, 0);
        assert_eq!(w.take_decoded(11).unwrap()[0].name, b"/lib/libc.so");
        // Taken once.
        assert!(w.take(10).is_none());
        // Padding is zero in the finished entries (0xee in the raw ones).
        let w = walk(&[piece(5, 5, &[raw_entry(0, 0, b"/x", 0, 9)])]);
        let [e, _] = w.take(5).unwrap();
        assert_eq!(&e[VmaRec::SIZE..], b"/x\0\0");
    }

    #[test]
    fn pieces_join_and_a_group_seen_again_keeps_its_first_listing() {
        let p1 = piece(20, 20, &[raw_entry(0x1000, 0, b"", 0, 0)]);
        let p2 = piece(20, 20, &[raw_entry(0x2000, 0, b"", 0, 0)]);
        let other = piece(21, 21, &[raw_entry(0x9000, 0, b"", 0, 0)]);
        let again = piece(25, 20, &[raw_entry(0x5000, 0, b"", 0, 0)]);
        let w = walk(&[p1, p2, other, again]);
        let starts: Vec<u64> = w
            .take_decoded(20)
            .unwrap()
            .iter()
            .map(|v| v.rec.start)
            .collect();
        assert_eq!(starts, [0x1000, 0x2000]);
        assert_eq!(w.take_decoded(21).unwrap()[0].rec.start, 0x9000);
    }

    #[test]
    fn inconsistent_entries_are_errors_naming_the_task() {
        let mut e = raw_entry(0, 0, b"/x", 0, 0);
        e[VmaRec::SIZE - 14] = 200; // name_len (low byte) beyond the entry
        let mut b = Builder::default();
        let err = b.chunk(&piece(33, 33, &[e])).unwrap_err();
        assert!(err.to_string().contains("task 33"), "{err}");
    }
}
