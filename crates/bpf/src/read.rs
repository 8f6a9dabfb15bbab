//! Reading what the programs write: the seq file or the ring buffer cut into whole messages
//! (through proto's [`StreamReader`], the one framing of every taskdiag stream) and accounted
//! (tasks, and whether a message needs a fixup from /proc). The seq-file reader is generic
//! over `io::Read` and the accounting takes plain bytes, so both are tested on synthetic
//! streams; only the ring buffer's draining needs the kernel.

use std::cell::RefCell;
use std::io::{self, Read};

use taskdiag_proto::msg::{Message, Messages, StreamReader};
use taskdiag_proto::MSG_F_FIXUP;

use crate::{BpfError, VmaWalk};

impl VmaWalk {
    /// Reads the walk to its end, passing chunks of whole messages to `sink`; returns the
    /// number of pieces. Through the seq file, whatever the task walk uses: the program
    /// gathers a process's entries and writes them at the next task, so its last write is in
    /// the call that ends the walk, which the kernel retries only for the seq buffer.
    pub fn read_all(
        mut self,
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, BpfError> {
        read_messages(&mut self.it, &mut self.reader, sink).map(|t| t.messages)
    }
}

/// What a walk wrote: messages, and whether any is flagged [`MSG_F_FIXUP`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Messages (one per task for a task walk; one per piece for a map walk).
    pub messages: u64,
    /// Whether some message carries [`MSG_F_FIXUP`].
    pub fixups: bool,
}

impl Tally {
    /// Counts one message.
    fn add(&mut self, m: &Message<'_>) {
        self.messages += 1;
        self.fixups |= m.header.flags & MSG_F_FIXUP != 0;
    }

    /// Counts the messages of `chunk`, which must hold whole messages and starts at byte
    /// `offset` of the stream.
    pub(crate) fn add_chunk(&mut self, chunk: &[u8], offset: usize) -> Result<(), BpfError> {
        for m in Messages::new(chunk).at(offset) {
            self.add(&m.map_err(BpfError::Decode)?);
        }
        Ok(())
    }
}

/// Reads an iterator's seq file (any `io::Read`) to the end, passing chunks of whole messages
/// to `sink`. A stream that ends inside a message is an error (the programs write whole ones).
pub(crate) fn read_messages<R: Read + ?Sized>(
    it: &mut R,
    reader: &mut StreamReader,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<Tally, BpfError> {
    reader.clear();
    let mut tally = Tally::default();
    loop {
        let n = reader.fill(it).map_err(BpfError::Read)?;
        let mut whole = reader.messages();
        for m in whole.by_ref() {
            tally.add(&m.map_err(BpfError::Decode)?);
        }
        let end = whole.end();
        if end > 0 {
            sink(&reader.bytes()[..end]).map_err(BpfError::Sink)?;
            reader.consume(end);
        }
        if n == 0 {
            break;
        }
    }
    reader.finish().map_err(BpfError::Decode)?;
    Ok(tally)
}

/// Bytes of records the ring is drained into before they go to the sink. The ring holds 4 MiB
/// and a read() fills it; drained whole, each walk's copy of it, and each copy the sink makes
/// of a piece (taskdiagd's filtered stream and the output it holds for the reader), was a
/// fresh 4 MiB of memory: a page fault and a page clearing for every 4 KiB of the stream. In
/// pieces this size the same buffers are used again, and stay in the CPU's cache.
const PIECE: usize = 256 << 10;

/// The ring drained so far: the piece not yet passed on, and what the sink said.
struct Drain<'s> {
    piece: Vec<u8>,
    /// Stream offset of `piece`'s first byte.
    offset: usize,
    tally: Tally,
    sink: &'s mut dyn FnMut(&[u8]) -> io::Result<()>,
    /// Why the last piece did not go through: the walk ends with it.
    failed: Option<BpfError>,
}

impl Drain<'_> {
    /// Passes the piece on (it holds whole messages: one ring record is one task's message).
    fn pass(&mut self) -> Result<(), BpfError> {
        if self.piece.is_empty() {
            return Ok(());
        }
        self.tally.add_chunk(&self.piece, self.offset)?;
        self.offset += self.piece.len();
        (self.sink)(&self.piece).map_err(BpfError::Sink)?;
        self.piece.clear();
        Ok(())
    }
}

/// Drives an iterator whose program writes to the ring buffer: each read() walks tasks until
/// the ring is full (EAGAIN) or the walk ends (0); the ring is drained after each, and passed
/// on in pieces of [`PIECE`] bytes.
pub(crate) fn read_ringbuf(
    it: &mut std::fs::File,
    map: &dyn libbpf_rs::MapCore,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<Tally, BpfError> {
    let drain = RefCell::new(Drain {
        piece: Vec::with_capacity(PIECE + taskdiag_proto::MSG_MAX),
        offset: 0,
        tally: Tally::default(),
        sink,
        failed: None,
    });
    // What an earlier walk left in the ring is dropped before this one starts (the programs
    // write only inside this walk's read()s): a walk whose sink failed, a client of taskdiagd
    // gone mid-answer, stops draining with the rest of its records still there, which the
    // next walk of this instance would otherwise hand on first, another walk's and perhaps
    // another viewer's.
    let leftovers = std::cell::Cell::new(true);
    let mut builder = libbpf_rs::RingBufferBuilder::new();
    let ring_err = |e| BpfError::Attach {
        what: "ring buffer".into(),
        source: io::Error::other(e),
    };
    builder
        .add(map, |rec: &[u8]| {
            if leftovers.get() {
                return 0;
            }
            let mut d = drain.borrow_mut();
            d.piece.extend_from_slice(rec);
            if d.piece.len() >= PIECE {
                if let Err(e) = d.pass() {
                    // Stops the draining: the walk ends with this error.
                    d.failed = Some(e);
                    return -1;
                }
            }
            0
        })
        .map_err(ring_err)?;
    let rb = builder.build().map_err(ring_err)?;
    rb.consume()
        .map_err(|e| BpfError::Read(io::Error::other(e)))?;
    leftovers.set(false);
    let mut seq = [0u8; 64];
    loop {
        let r = it.read(&mut seq);
        let drained = rb.consume();
        if let Some(e) = drain.borrow_mut().failed.take() {
            return Err(e);
        }
        drained.map_err(|e| BpfError::Read(io::Error::other(e)))?;
        match r {
            Ok(0) => {
                let mut d = drain.borrow_mut();
                d.pass()?;
                return Ok(d.tally);
            }
            // The program writes nothing to the seq file in this mode.
            Ok(_) => return Err(BpfError::Read(io::Error::other("unexpected seq output"))),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The ring was full: drained above, and the task is retried by this read().
            // Or a million tasks were walked without output (the kernel's per-read limit).
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(e) => return Err(BpfError::Read(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::msg::{DecodeError, TaskWriter};
    use taskdiag_proto::{Group, MsgHeader};

    /// `n` TASK messages, pids 1..=n; those in `fixup` flagged MSG_F_FIXUP. Every third one
    /// has a command line long enough to be cut into CONTINUED messages.
    fn stream(n: u32, fixup: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for pid in 1..=n {
            let start = out.len();
            let mut w = TaskWriter::begin(&mut out, pid, pid);
            w.attr(Group::Base as u16, &[pid as u8; 40]);
            if pid % 3 == 0 {
                w.attr(Group::Cmdline as u16, &vec![b'x'; 40_000]);
            }
            w.finish();
            if fixup.contains(&pid) {
                // The flag on every message of the task, as the program sets it.
                let mut pos = start;
                while pos < out.len() {
                    let h = MsgHeader::read_from(&out[pos..]).unwrap();
                    let flags = h.flags | MSG_F_FIXUP;
                    out[pos + 6..pos + 8].copy_from_slice(&flags.to_ne_bytes());
                    pos += h.len as usize;
                }
            }
        }
        out
    }

    /// Messages in a stream, counted by a plain walk.
    fn count(b: &[u8]) -> u64 {
        Messages::new(b).count() as u64
    }

    /// A reader that hands out a stream in pieces of the given sizes (cycled), with an EINTR
    /// before each piece, as a seq file may.
    struct Pieces<'a> {
        data: &'a [u8],
        sizes: &'a [usize],
        i: usize,
        interrupt: bool,
    }

    impl Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let want = self.sizes[self.i % self.sizes.len()];
            self.i += 1;
            let n = want.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn read_in_pieces(data: &[u8], sizes: &[usize]) -> (Result<Tally, BpfError>, Vec<Vec<u8>>) {
        let mut r = Pieces {
            data,
            sizes,
            i: 0,
            interrupt: false,
        };
        let mut chunks = Vec::new();
        let res = read_messages(&mut r, &mut StreamReader::new(), &mut |c| {
            chunks.push(c.to_vec());
            Ok(())
        });
        (res, chunks)
    }

    #[test]
    fn seq_reads_of_any_size_give_whole_messages_and_a_true_count() {
        let data = stream(40, &[7]);
        for sizes in [
            &[1usize][..],
            &[7, 13],
            &[16],
            &[4096],
            &[32768],
            &[1 << 20],
        ] {
            let (res, chunks) = read_in_pieces(&data, sizes);
            let t = res.expect("valid stream");
            assert_eq!(t.messages, count(&data), "pieces of {sizes:?}");
            assert!(t.fixups);
            // Every chunk is whole messages, and together they are the stream.
            for c in &chunks {
                assert!(Messages::new(c).all(|m| m.is_ok()), "pieces of {sizes:?}");
            }
            assert_eq!(chunks.concat(), data);
        }
    }

    #[test]
    fn a_stream_without_flags_has_no_fixups() {
        let data = stream(10, &[]);
        let (res, _) = read_in_pieces(&data, &[100]);
        assert_eq!(
            res.expect("valid"),
            Tally {
                messages: count(&data),
                fixups: false,
            }
        );
        let (res, chunks) = read_in_pieces(&[], &[100]);
        assert_eq!(res.expect("empty"), Tally::default());
        assert!(chunks.is_empty());
    }

    #[test]
    fn a_stream_cut_inside_a_message_is_an_error_after_the_whole_ones() {
        let data = stream(5, &[]);
        let last = Messages::new(&data).last().unwrap().unwrap().offset;
        let cut = &data[..last + 20];
        let (res, chunks) = read_in_pieces(cut, &[64]);
        match res {
            Err(BpfError::Decode(DecodeError::Truncated { offset, have, .. })) => {
                assert_eq!((offset, have), (last, 20));
            }
            r => panic!("expected a truncated stream, got {r:?}"),
        }
        assert_eq!(chunks.concat(), &data[..last]);
    }

    #[test]
    fn a_bad_length_is_a_decode_error_naming_its_stream_offset() {
        let mut data = stream(4, &[]);
        let second = Messages::new(&data).nth(1).unwrap().unwrap().offset;
        data[second..second + 4].copy_from_slice(&3u32.to_ne_bytes());
        let (res, chunks) = read_in_pieces(&data, &[5]);
        assert!(matches!(
            res,
            Err(BpfError::Decode(DecodeError::BadLength { offset, len: 3 })) if offset == second
        ));
        assert_eq!(chunks.concat(), &data[..second]);
    }

    #[test]
    fn a_failing_sink_stops_the_read() {
        let data = stream(4, &[]);
        let mut r = &data[..];
        let res = read_messages(&mut r, &mut StreamReader::new(), &mut |_| {
            Err(io::ErrorKind::BrokenPipe.into())
        });
        assert!(matches!(res, Err(BpfError::Sink(e)) if e.kind() == io::ErrorKind::BrokenPipe));
    }

    #[test]
    fn ring_chunks_are_accounted_with_stream_offsets() {
        let data = stream(9, &[2]);
        let mut t = Tally::default();
        // As the ring hands them over: whole messages, split anywhere between two.
        let cut = Messages::new(&data).nth(4).unwrap().unwrap().offset;
        t.add_chunk(&data[..cut], 0).unwrap();
        t.add_chunk(&data[cut..], cut).unwrap();
        assert_eq!(
            t,
            Tally {
                messages: count(&data),
                fixups: true,
            }
        );
        // A chunk that ends inside a message names where, in the stream.
        let e = Tally::default().add_chunk(&data[cut..cut + 10], cut);
        assert!(matches!(
            e,
            Err(BpfError::Decode(DecodeError::Truncated { offset, .. })) if offset == cut
        ));
    }
}
