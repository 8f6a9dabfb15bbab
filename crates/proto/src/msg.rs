//! Framing: writing and splitting messages, and walking messages and attributes in a buffer.
//!
//! The writer ([`TaskWriter`]) enforces [`MSG_MAX`] by cutting a task into CONTINUED messages; the
//! readers ([`Messages`], [`Attrs`]) check every length before slicing and report malformed input
//! as a [`DecodeError`] with the byte offset, never by panicking. [`StreamReader`] is the one
//! place a stream that arrives in pieces (a socket, a pipe, a BPF iterator's `read()`s) is cut
//! into whole messages: every reader of such a stream goes through it. Turning attributes into
//! typed tasks is [`crate::task`]'s job.

use std::io::{self, Read};

use crate::{
    align4, AttrHeader, Done, Group, GroupErrorRec, MsgHeader, MsgType, Request, Start, Strategy,
    ATTR_GROUP_ERROR, ATTR_MESSAGE, MSG_F_CONTINUED, MSG_F_PROCESS, MSG_MAX, SHOW_MAPS,
    SHOW_SUPPORTED, VERSION,
};

/// What is wrong with a byte stream, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The buffer ends inside a message or attribute.
    #[error("truncated at byte {offset}: need {need} bytes, have {have}")]
    Truncated {
        /// Offset of the incomplete item.
        offset: usize,
        /// Bytes the item needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A length field is impossible (too small, unaligned or over [`MSG_MAX`]).
    #[error("bad length {len} at byte {offset}")]
    BadLength {
        /// Offset of the item.
        offset: usize,
        /// The length found.
        len: usize,
    },
    /// A known attribute's payload does not match its record layout.
    #[error("malformed {group} attribute of task {pid}: {what}")]
    BadRecord {
        /// Task id.
        pid: u32,
        /// Group name.
        group: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// A CONTINUED message was followed by a message for another task.
    #[error("task {pid} was continued but the next message is for task {next}")]
    Interleaved {
        /// The continued task.
        pid: u32,
        /// The task of the message that followed.
        next: u32,
    },
    /// The stream ended while a task was still CONTINUED.
    #[error("stream ended inside task {pid} (CONTINUED without a final message)")]
    Unfinished {
        /// The task.
        pid: u32,
    },
    /// The stream is of a version this reader does not know, or does not start with START.
    #[error("not a taskdiag stream of version {VERSION}: {what}")]
    BadStream {
        /// What is wrong.
        what: String,
    },
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// Fewer bytes than a request.
    #[error("truncated request: {0} bytes, need {size}", size = Request::SIZE)]
    Truncated(usize),
    /// `len` does not match the request size of this version.
    #[error("bad request length {0}")]
    BadLength(u32),
    /// Unknown protocol version.
    #[error("unsupported protocol version {0} (this side speaks {VERSION})")]
    Version(u16),
    /// Unknown strategy value.
    #[error("unknown dump strategy {0}")]
    Strategy(u32),
    /// Show flags name groups this version cannot produce.
    #[error("unknown or unsupported groups in show flags {0:#x}")]
    Groups(u64),
    /// Reserved fields are not zero.
    #[error("reserved request fields must be zero")]
    Reserved,
}

impl Request {
    /// A version-1 request.
    pub fn new(strategy: Strategy, pid: u32, show_flags: u64) -> Self {
        Request {
            len: Request::SIZE as u32,
            version: VERSION,
            flags: 0,
            show_flags,
            strategy: strategy as u32,
            pid,
            show_process: 0,
        }
    }

    /// A request of [`Strategy::AllWithThreads`]: every thread with the groups of
    /// `show_threads`, and each process's own record with those of `show_process`.
    pub fn all_with_threads(show_threads: u64, show_process: u64) -> Self {
        let mut r = Request::new(Strategy::AllWithThreads, 0, show_threads);
        r.show_process = show_process;
        r
    }

    /// Decodes and validates a request.
    pub fn parse(b: &[u8]) -> Result<Self, RequestError> {
        let r = Request::read_from(b).ok_or(RequestError::Truncated(b.len()))?;
        if r.version != VERSION {
            return Err(RequestError::Version(r.version));
        }
        if r.len as usize != Request::SIZE {
            return Err(RequestError::BadLength(r.len));
        }
        let strategy = Strategy::from_u32(r.strategy).ok_or(RequestError::Strategy(r.strategy))?;
        if r.flags != 0 || (r.show_process != 0 && strategy != Strategy::AllWithThreads) {
            return Err(RequestError::Reserved);
        }
        if r.show_flags & !SHOW_SUPPORTED != 0 {
            return Err(RequestError::Groups(r.show_flags));
        }
        if r.show_process & !SHOW_SUPPORTED != 0 {
            return Err(RequestError::Groups(r.show_process));
        }
        // Memory maps come with a process walk (ALL), not with this one.
        if strategy == Strategy::AllWithThreads && (r.show_flags | r.show_process) & SHOW_MAPS != 0
        {
            return Err(RequestError::Groups(
                (r.show_flags | r.show_process) & SHOW_MAPS,
            ));
        }
        Ok(r)
    }

    /// The request's strategy (valid after [`Request::parse`]).
    pub fn strategy(&self) -> Option<Strategy> {
        Strategy::from_u32(self.strategy)
    }

    /// Whether the request asks for `g` (of any record: with [`Strategy::AllWithThreads`],
    /// of its threads' or of its processes').
    pub fn wants(&self, g: Group) -> bool {
        self.all_groups() & g.flag() != 0
    }

    /// Every group the request asks for, of any of its records.
    pub fn all_groups(&self) -> u64 {
        self.show_flags | self.show_process
    }

    /// The groups asked for of a record whose message has `flags`: a process's own record
    /// ([`MSG_F_PROCESS`]) has those of `show_process`.
    pub fn groups_of(&self, flags: u16) -> u64 {
        if flags & MSG_F_PROCESS != 0 {
            self.show_process
        } else {
            self.show_flags
        }
    }
}

/// Marks every TASK message of `buf` (whole messages) as records of whole processes
/// ([`MSG_F_PROCESS`]): what a process walk answers for [`Strategy::AllWithThreads`] where it
/// is made of two walks. Stops at the first malformed header.
pub fn mark_processes(buf: &mut [u8]) {
    let mut at = 0;
    while let Some(h) = buf.get(at..).and_then(MsgHeader::read_from) {
        let len = h.len as usize;
        if len < MsgHeader::SIZE || at + len > buf.len() {
            return;
        }
        if h.msg_type == MsgType::Task as u16 {
            let flags = h.flags | MSG_F_PROCESS;
            buf[at + 6..at + 8].copy_from_slice(&flags.to_ne_bytes());
        }
        at += len;
    }
}

/// Appends a START message.
pub fn write_start(out: &mut Vec<u8>, start: &Start) {
    write_header(out, MsgHeader::SIZE + Start::SIZE, MsgType::Start, 0, 0, 0);
    start.write_to(out);
}

/// Appends a DONE message.
pub fn write_done(out: &mut Vec<u8>, done: &Done) {
    write_header(out, MsgHeader::SIZE + Done::SIZE, MsgType::Done, 0, 0, 0);
    done.write_to(out);
}

/// Appends a DONE message carrying an error and its explanation (an [`ATTR_MESSAGE`] attribute
/// after the payload), the way a server refuses a request. `error` is a negative errno.
pub fn write_done_error(out: &mut Vec<u8>, error: i32, text: &str) {
    // An attribute's length is a u16; no explanation needs more.
    let text = &text.as_bytes()[..text.len().min(1024)];
    let len = MsgHeader::SIZE + Done::SIZE + AttrHeader::SIZE + align4(text.len());
    write_header(out, len, MsgType::Done, 0, 0, 0);
    Done {
        error,
        reserved: 0,
        tasks: 0,
    }
    .write_to(out);
    AttrHeader {
        len: (AttrHeader::SIZE + text.len()) as u16,
        attr_type: ATTR_MESSAGE,
    }
    .write_to(out);
    out.extend_from_slice(text);
    out.resize(align4(out.len()), 0);
}

/// The explanation a DONE message carries after its payload, if any (see [`write_done_error`]).
pub fn done_text<'a>(m: &Message<'a>) -> Option<&'a str> {
    let rest = m.payload.get(Done::SIZE..)?;
    let a = AttrHeader::read_from(rest)?;
    if a.attr_type != ATTR_MESSAGE {
        return None;
    }
    let text = rest.get(AttrHeader::SIZE..a.len as usize)?;
    std::str::from_utf8(text).ok()
}

fn write_header(out: &mut Vec<u8>, len: usize, t: MsgType, flags: u16, pid: u32, tgid: u32) {
    MsgHeader {
        len: len as u32,
        msg_type: t as u16,
        flags,
        pid,
        tgid,
    }
    .write_to(out);
}

/// Writes one task as one or more TASK messages, splitting attributes to respect [`MSG_MAX`].
///
/// Usage: [`TaskWriter::begin`], then [`TaskWriter::attr`] per group (in group order), then
/// [`TaskWriter::finish`]. An attribute is given in pieces with [`TaskWriter::attr_parts`] when its
/// payload is a fixed record followed by variable data, to avoid a copy.
pub struct TaskWriter<'a> {
    out: &'a mut Vec<u8>,
    msg_start: usize,
    pid: u32,
    tgid: u32,
    /// Flags every message of the task keeps (those of a resumed message, but CONTINUED).
    flags: u16,
}

impl<'a> TaskWriter<'a> {
    /// Starts the first message of task `pid` (thread group `tgid`).
    pub fn begin(out: &'a mut Vec<u8>, pid: u32, tgid: u32) -> Self {
        let msg_start = out.len();
        write_header(out, 0, MsgType::Task, 0, pid, tgid);
        TaskWriter {
            out,
            msg_start,
            pid,
            tgid,
            flags: 0,
        }
    }

    /// Continues a complete task: copies `msg`, one whole TASK message that is not CONTINUED,
    /// to `out` so that more attributes follow its own (continued in new messages if they do
    /// not fit). `None` if `msg` is not such a message.
    pub fn resume(out: &'a mut Vec<u8>, msg: &[u8]) -> Option<Self> {
        let h = MsgHeader::read_from(msg)?;
        if h.msg_type != MsgType::Task as u16
            || h.flags & MSG_F_CONTINUED != 0
            || h.len as usize != msg.len()
            || !msg.len().is_multiple_of(4)
        {
            return None;
        }
        let msg_start = out.len();
        out.extend_from_slice(msg);
        Some(TaskWriter {
            out,
            msg_start,
            pid: h.pid,
            tgid: h.tgid,
            flags: h.flags,
        })
    }

    /// Marks every message of the task with `flags` (e.g. [`MSG_F_PROCESS`]).
    pub fn add_flags(&mut self, flags: u16) {
        self.flags |= flags;
    }

    /// Adds an attribute whose payload is `payload`.
    pub fn attr(&mut self, attr_type: u16, payload: &[u8]) {
        self.attr_parts(attr_type, &[payload]);
    }

    /// Adds a GROUP_ERROR attribute for `group`.
    pub fn group_error(&mut self, group: Group, errno: i32) {
        let mut b = Vec::with_capacity(GroupErrorRec::SIZE);
        GroupErrorRec {
            group: group as u16,
            reserved: 0,
            errno,
        }
        .write_to(&mut b);
        self.attr(ATTR_GROUP_ERROR, &b);
    }

    /// Adds an attribute whose payload is the concatenation of `parts`.
    pub fn attr_parts(&mut self, attr_type: u16, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut room = self.room();
        let used = self.out.len() - self.msg_start;
        // Keep small attributes whole: start a new message rather than cut one.
        let small = total <= MSG_MAX - MsgHeader::SIZE - AttrHeader::SIZE;
        if used + AttrHeader::SIZE > MSG_MAX || (small && total > room) {
            self.continue_in_new_message();
            room = self.room();
        }
        let mut remaining = total;
        let mut chunk_left = remaining.min(room);
        self.open_attr(attr_type, chunk_left);
        for part in parts {
            let mut p: &[u8] = part;
            while !p.is_empty() {
                if chunk_left == 0 {
                    self.close_attr();
                    self.continue_in_new_message();
                    chunk_left = remaining.min(self.room());
                    self.open_attr(attr_type, chunk_left);
                }
                let n = p.len().min(chunk_left);
                self.out.extend_from_slice(&p[..n]);
                p = &p[n..];
                chunk_left -= n;
                remaining -= n;
            }
        }
        self.close_attr();
    }

    /// Bytes of payload that still fit in the current message after one attribute header.
    fn room(&self) -> usize {
        let used = self.out.len() - self.msg_start;
        (MSG_MAX - used).saturating_sub(AttrHeader::SIZE) & !3
    }

    fn open_attr(&mut self, attr_type: u16, payload_len: usize) {
        AttrHeader {
            len: (AttrHeader::SIZE + payload_len) as u16,
            attr_type,
        }
        .write_to(self.out);
    }

    fn close_attr(&mut self) {
        let pad = align4(self.out.len()) - self.out.len();
        self.out.extend_from_slice(&[0u8; 3][..pad]);
    }

    fn continue_in_new_message(&mut self) {
        self.seal(MSG_F_CONTINUED);
        self.msg_start = self.out.len();
        write_header(self.out, 0, MsgType::Task, 0, self.pid, self.tgid);
    }

    fn seal(&mut self, flags: u16) {
        let flags = flags | self.flags;
        let len = (self.out.len() - self.msg_start) as u32;
        self.out[self.msg_start..self.msg_start + 4].copy_from_slice(&len.to_ne_bytes());
        self.out[self.msg_start + 6..self.msg_start + 8].copy_from_slice(&flags.to_ne_bytes());
    }

    /// Closes the task's last message.
    pub fn finish(mut self) {
        self.seal(0);
    }
}

/// One message in a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// Its header.
    pub header: MsgHeader,
    /// The bytes after the header.
    pub payload: &'a [u8],
    /// Offset of the message in the buffer it was read from.
    pub offset: usize,
}

impl<'a> Message<'a> {
    /// The message's type, if known.
    pub fn msg_type(&self) -> Option<MsgType> {
        MsgType::from_u16(self.header.msg_type)
    }

    /// Whether more messages for this task follow.
    pub fn continued(&self) -> bool {
        self.header.flags & MSG_F_CONTINUED != 0
    }

    /// The attributes of a TASK message.
    pub fn attrs(&self) -> Attrs<'a> {
        Attrs {
            buf: self.payload,
            pos: 0,
            base: self.offset + MsgHeader::SIZE,
        }
    }
}

/// Checks the header at the start of `buf` (at stream offset `offset`) and returns the message
/// length, or how many bytes are needed to know it.
pub fn message_len(buf: &[u8], offset: usize) -> Result<usize, DecodeError> {
    let h = MsgHeader::read_from(buf).ok_or(DecodeError::Truncated {
        offset,
        need: MsgHeader::SIZE,
        have: buf.len(),
    })?;
    let len = h.len as usize;
    if len < MsgHeader::SIZE || !len.is_multiple_of(4) || len > MSG_MAX {
        return Err(DecodeError::BadLength { offset, len });
    }
    Ok(len)
}

/// Iterates over the messages in a buffer. Stops after the first error.
///
/// [`Message::offset`] is the message's offset in the buffer; errors name the offset in the
/// stream, which is the same unless the buffer starts further in ([`Messages::at`]).
pub struct Messages<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Stream offset of `buf[0]`, for errors.
    base: usize,
    /// Whether a message cut off by the end of `buf` ends the walk quietly (the rest of it has
    /// not arrived yet) rather than as [`DecodeError::Truncated`].
    partial_ok: bool,
    failed: bool,
}

impl<'a> Messages<'a> {
    /// Messages of `buf`, which must hold whole messages.
    pub fn new(buf: &'a [u8]) -> Self {
        Messages {
            buf,
            pos: 0,
            base: 0,
            partial_ok: false,
            failed: false,
        }
    }

    /// The same walk, for a buffer that starts at byte `offset` of its stream: errors name
    /// stream offsets.
    pub fn at(mut self, offset: usize) -> Self {
        self.base = offset;
        self
    }

    /// Bytes of the buffer walked so far: the end of the last message returned.
    pub fn end(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let offset = self.base + self.pos;
        let res = message_len(rest, offset).and_then(|len| {
            let msg = rest.get(..len).ok_or(DecodeError::Truncated {
                offset,
                need: len,
                have: rest.len(),
            })?;
            let header = MsgHeader::read_from(msg).ok_or(DecodeError::Truncated {
                offset,
                need: MsgHeader::SIZE,
                have: msg.len(),
            })?;
            Ok(Message {
                header,
                payload: &msg[MsgHeader::SIZE..],
                offset: self.pos,
            })
        });
        match &res {
            Ok(m) => self.pos += m.header.len as usize,
            Err(DecodeError::Truncated { .. }) if self.partial_ok => {
                self.failed = true;
                return None;
            }
            Err(_) => self.failed = true,
        }
        Some(res)
    }
}

/// Cuts a stream that arrives in pieces of any size into whole messages.
///
/// [`StreamReader::fill`] reads once from the source into the buffer (grown so that a whole
/// message always fits); [`StreamReader::messages`] walks the whole messages that have arrived
/// and stops quietly before one whose end has not, which stays for the next `fill`;
/// [`StreamReader::consume`] drops what the caller passed on. At the end of the input,
/// [`StreamReader::finish`] tells whether the stream stopped between two messages. Lengths are
/// checked as [`Messages`] checks them, and errors name offsets in the whole stream.
#[derive(Debug, Clone)]
pub struct StreamReader {
    buf: Vec<u8>,
    /// Bytes of `buf` that arrived and were not consumed.
    have: usize,
    /// Stream offset of `buf[0]`.
    offset: usize,
}

impl Default for StreamReader {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamReader {
    /// A reader with a 64 KiB buffer.
    pub fn new() -> Self {
        Self::with_capacity(1 << 16)
    }

    /// A reader with a buffer of `capacity` bytes (at least room for two whole messages).
    pub fn with_capacity(capacity: usize) -> Self {
        StreamReader {
            buf: vec![0; capacity.max(2 * MSG_MAX)],
            have: 0,
            offset: 0,
        }
    }

    /// Forgets the stream, keeping the buffer for the next one.
    pub fn clear(&mut self) {
        self.have = 0;
        self.offset = 0;
    }

    /// Reads once from `r` into the buffer, retrying a read that a signal interrupted. Returns
    /// the bytes read: 0 at the end of the input.
    pub fn fill<R: Read + ?Sized>(&mut self, r: &mut R) -> io::Result<usize> {
        if self.buf.len() - self.have < MSG_MAX {
            let len = (2 * self.buf.len()).max(self.have + MSG_MAX);
            self.buf.resize(len, 0);
        }
        loop {
            match r.read(&mut self.buf[self.have..]) {
                Ok(n) => {
                    self.have += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The whole messages that arrived and were not consumed; [`Messages::end`] then tells how
    /// many bytes they take ([`StreamReader::bytes`]`()[..end]`, to pass on and consume).
    pub fn messages(&self) -> Messages<'_> {
        Messages {
            partial_ok: true,
            ..Messages::new(self.bytes()).at(self.offset)
        }
    }

    /// The bytes that arrived and were not consumed.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.have]
    }

    /// Drops the first `n` bytes of [`StreamReader::bytes`] (messages passed on).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.have);
        self.buf.copy_within(n..self.have, 0);
        self.have -= n;
        self.offset += n;
    }

    /// Stream offset of the first byte not consumed.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Whether the stream, now at its end, stopped between two messages; else the message it
    /// stopped inside, as [`DecodeError::Truncated`].
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.have == 0 {
            return Ok(());
        }
        let need = message_len(self.bytes(), self.offset).unwrap_or(MsgHeader::SIZE);
        Err(DecodeError::Truncated {
            offset: self.offset,
            need,
            have: self.have,
        })
    }
}

/// One attribute.
#[derive(Debug, Clone, Copy)]
pub struct Attr<'a> {
    /// Attribute type.
    pub attr_type: u16,
    /// Payload, without padding.
    pub payload: &'a [u8],
}

/// Iterates over a TASK message's attributes. Stops after the first error.
pub struct Attrs<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let offset = self.base + self.pos;
        let Some(h) = AttrHeader::read_from(rest) else {
            self.pos = self.buf.len();
            let have = rest.len();
            return Some(Err(DecodeError::Truncated {
                offset,
                need: AttrHeader::SIZE,
                have,
            }));
        };
        let len = h.len as usize;
        if len < AttrHeader::SIZE || len > rest.len() {
            self.pos = self.buf.len();
            return Some(Err(DecodeError::BadLength { offset, len }));
        }
        self.pos += align4(len);
        Some(Ok(Attr {
            attr_type: h.attr_type,
            payload: &rest[AttrHeader::SIZE..len],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_groups_come_only_with_all_with_threads() {
        let (threads, procs) = (Group::Stat.flag(), Group::Files.flag() | Group::Stat.flag());
        let r = Request::all_with_threads(threads, procs);
        assert_eq!(Request::parse(&r.to_bytes()), Ok(r));
        assert_eq!(r.all_groups(), threads | procs);
        assert!(r.wants(Group::Files));
        assert_eq!(r.groups_of(0), threads);
        assert_eq!(r.groups_of(MSG_F_PROCESS), procs);
        // Another strategy with them: the field is reserved there.
        let mut all = Request::new(Strategy::All, 0, threads);
        all.show_process = procs;
        assert_eq!(Request::parse(&all.to_bytes()), Err(RequestError::Reserved));
        // Unknown groups, and memory maps (a process walk's), are refused by name.
        let bad = Request::all_with_threads(threads, 1 << 40);
        assert_eq!(
            Request::parse(&bad.to_bytes()),
            Err(RequestError::Groups(1 << 40))
        );
        let maps = Request::all_with_threads(threads, Group::Vma.flag());
        assert_eq!(
            Request::parse(&maps.to_bytes()),
            Err(RequestError::Groups(Group::Vma.flag()))
        );
    }

    #[test]
    fn marked_messages_are_processes_records_and_only_they() {
        let mut buf = Vec::new();
        let mut w = TaskWriter::begin(&mut buf, 7, 7);
        // Long enough to be cut: every message of the task is marked.
        w.attr(Group::Cmdline as u16, &[1u8; MSG_MAX + 100]);
        w.finish();
        let split = buf.len();
        TaskWriter::begin(&mut buf, 8, 7).finish();
        mark_processes(&mut buf[..split]);
        let flags: Vec<(u32, bool)> = Messages::new(&buf)
            .map(|m| {
                let m = m.expect("message");
                (m.header.pid, m.header.flags & MSG_F_PROCESS != 0)
            })
            .collect();
        assert_eq!(flags, [(7, true), (7, true), (8, false)]);
        let mut asm = crate::task::TaskAssembler::new();
        let tasks: Vec<(u32, bool)> = Messages::new(&buf)
            .filter_map(|m| asm.push(&m.expect("message")).expect("task"))
            .map(|t| (t.pid, t.process))
            .collect();
        assert_eq!(tasks, [(7, true), (8, false)]);
    }

    #[test]
    fn request_validation_names_the_problem() {
        let r = Request::new(Strategy::One, 42, Group::Base.flag());
        assert_eq!(Request::parse(&r.to_bytes()), Ok(r));
        assert_eq!(
            Request::parse(&r.to_bytes()[..31]),
            Err(RequestError::Truncated(31))
        );
        let mut bad = r;
        bad.strategy = 9;
        assert_eq!(
            Request::parse(&bad.to_bytes()),
            Err(RequestError::Strategy(9))
        );
        let mut bad = r;
        bad.show_flags = 1 << 40;
        assert_eq!(
            Request::parse(&bad.to_bytes()),
            Err(RequestError::Groups(1 << 40))
        );
        let mut bad = r;
        bad.version = 7;
        assert_eq!(
            Request::parse(&bad.to_bytes()),
            Err(RequestError::Version(7))
        );
    }

    #[test]
    fn big_attribute_is_split_into_continued_messages() {
        let mut out = Vec::new();
        let big = vec![7u8; 3 * MSG_MAX];
        let mut w = TaskWriter::begin(&mut out, 5, 5);
        w.attr(Group::Base as u16, &[1, 2, 3, 4]);
        w.attr(Group::Cmdline as u16, &big);
        w.finish();
        let msgs: Vec<_> = Messages::new(&out).collect::<Result<_, _>>().unwrap();
        assert!(msgs.len() >= 4);
        let mut cmd = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            assert!(m.header.len as usize <= MSG_MAX);
            assert_eq!(m.continued(), i + 1 < msgs.len());
            assert_eq!(m.header.pid, 5);
            for a in m.attrs() {
                let a = a.unwrap();
                if a.attr_type == Group::Cmdline as u16 {
                    cmd.extend_from_slice(a.payload);
                }
            }
        }
        assert_eq!(cmd, big);
    }

    /// Tasks 1..=n, each with a BASE-sized attribute; every fourth with a command line that
    /// is cut into CONTINUED messages.
    fn tasks(n: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for pid in 1..=n {
            let mut w = TaskWriter::begin(&mut out, pid, pid);
            w.attr(Group::Base as u16, &[pid as u8; 42]);
            if pid % 4 == 0 {
                w.attr(Group::Cmdline as u16, &vec![b'a'; MSG_MAX + 100]);
            }
            w.finish();
        }
        out
    }

    /// Feeds `data` to a [`StreamReader`] in pieces of `piece` bytes; returns the chunks of
    /// whole messages it let through and the reader.
    fn split(data: &[u8], piece: usize) -> (Vec<Vec<u8>>, Result<(), DecodeError>) {
        let mut r = StreamReader::new();
        let mut chunks = Vec::new();
        let mut rest = data;
        loop {
            let n = r
                .fill(&mut &rest[..piece.min(rest.len())])
                .expect("reading a slice");
            rest = &rest[n..];
            let mut whole = r.messages();
            for m in whole.by_ref() {
                if let Err(e) = m {
                    return (chunks, Err(e));
                }
            }
            let end = whole.end();
            if end > 0 {
                chunks.push(r.bytes()[..end].to_vec());
                r.consume(end);
            }
            if n == 0 {
                return (chunks, r.finish());
            }
        }
    }

    #[test]
    fn a_stream_in_pieces_of_any_size_comes_out_as_whole_messages() {
        let data = tasks(9);
        let total = Messages::new(&data).count();
        for piece in [1, 3, 16, 17, 1000, MSG_MAX, data.len()] {
            let (chunks, end) = split(&data, piece);
            assert_eq!(end, Ok(()), "pieces of {piece}");
            assert_eq!(chunks.concat(), data, "pieces of {piece}");
            let n: usize = chunks.iter().map(|c| Messages::new(c).count()).sum();
            assert_eq!(n, total);
        }
    }

    #[test]
    fn a_stream_that_stops_inside_a_message_is_truncated_there() {
        let data = tasks(3);
        let last = Messages::new(&data).last().unwrap().unwrap().offset;
        for cut in [last + 1, last + MsgHeader::SIZE, data.len() - 4] {
            let (chunks, end) = split(&data[..cut], 7);
            assert_eq!(chunks.concat(), &data[..last]);
            let need = if cut - last < MsgHeader::SIZE {
                MsgHeader::SIZE
            } else {
                data.len() - last
            };
            assert_eq!(
                end,
                Err(DecodeError::Truncated {
                    offset: last,
                    need,
                    have: cut - last,
                })
            );
        }
    }

    #[test]
    fn a_bad_length_names_its_offset_in_the_whole_stream() {
        let mut data = tasks(6);
        let bad = Messages::new(&data).nth(3).unwrap().unwrap().offset;
        data[bad..bad + 4].copy_from_slice(&(MSG_MAX as u32 + 4).to_ne_bytes());
        let (chunks, end) = split(&data, 5);
        assert_eq!(chunks.concat(), &data[..bad]);
        assert_eq!(
            end,
            Err(DecodeError::BadLength {
                offset: bad,
                len: MSG_MAX + 4,
            })
        );
        // The same from a buffer that starts further in the stream.
        let e = Messages::new(&data[bad..]).at(bad).next();
        assert_eq!(
            e.map(|m| m.map(|m| m.offset)),
            Some(Err(DecodeError::BadLength {
                offset: bad,
                len: MSG_MAX + 4,
            }))
        );
    }

    #[test]
    fn a_reader_is_reused_from_the_start_after_clear() {
        let data = tasks(2);
        let mut r = StreamReader::new();
        r.fill(&mut &data[..10]).unwrap();
        assert!(r.messages().next().is_none());
        r.clear();
        assert_eq!((r.offset(), r.bytes().len()), (0, 0));
        r.fill(&mut &data[..]).unwrap();
        assert_eq!(r.messages().count(), 2);
        assert_eq!(
            r.messages().filter_map(Result::ok).last().unwrap().offset,
            { Messages::new(&data).last().unwrap().unwrap().offset }
        );
    }

    #[test]
    fn malformed_lengths_are_errors_not_panics() {
        let mut out = Vec::new();
        let w = TaskWriter::begin(&mut out, 1, 1);
        w.finish();
        out[0] = 3; // length 3: shorter than a header
        assert!(matches!(
            Messages::new(&out).next(),
            Some(Err(DecodeError::BadLength { .. }))
        ));
        let cut = &[16u8, 0, 0, 0, 2, 0][..];
        assert!(matches!(
            Messages::new(cut).next(),
            Some(Err(DecodeError::Truncated { .. }))
        ));
    }
}
