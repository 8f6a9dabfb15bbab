//! DELAY's delay-accounting pairs for the procfs backend, from the kernel's taskstats
//! generic-netlink interface: no /proc file has them. This module owns that interface: the
//! NETLINK_GENERIC socket, looking the TASKSTATS family up (CTRL_CMD_GETFAMILY), the per-task
//! TASKSTATS_CMD_GET and reading `struct taskstats` by its version. Whether and for which task to
//! ask is [`crate::reader`]'s.
//!
//! What the kernel answers (kernel/taskstats.c, Documentation/accounting/taskstats.rst):
//! TASKSTATS_CMD_ATTR_PID names one *task* in the caller's pid namespace (a thread id gives that
//! thread, a process id its leader thread), and the answer is that task's own totals
//! (`delayacct_add_tsk()` over its `task_delay_info`) — what the BPF programs read from
//! `task->delays` for the same task. The command needs CAP_NET_ADMIN in the initial user namespace
//! (GENL_ADMIN_PERM): anyone else gets EPERM, and the procfs backend then leaves the pairs 0 with
//! [`DELAY_F_COUNTERS`] clear, as it always did.
//!
//! DELAY_F_COUNTERS says the pairs are the task's `task_delay_info`'s. A task has one if it was
//! created while delay accounting was on (kernel.task_delayacct, or the `delayacct` boot option;
//! before 5.14 unless booted with `nodelayacct`) on a kernel with CONFIG_TASK_DELAY_ACCT. taskstats
//! answers zeros both for a task without one and for a task that has not waited yet, where the
//! BPF programs tell the two apart; so [`Taskstats::delays`] claims the pairs only where one is
//! nonzero, which only a `task_delay_info` gives. The pairs are the same either way; a task with
//! a `task_delay_info` and nothing accounted yet has the flag from BPF only.
//!
//! Hand-written netlink rather than a crate: the module sends two fixed requests (one family
//! lookup, then one query per task) of twenty header bytes and one attribute each, and reads one
//! attribute out of each reply. neli would bring eight direct dependencies (two of them
//! derive-macro crates), netlink-packet-generic netlink-packet-core, zerocopy with its derive
//! macros, and netlink-sys for the socket, each with its own error types; and either would still
//! leave `struct taskstats`'s versioned layout, the only part that needs care, to this file.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use taskdiag_proto::{DelayRec, DELAY_F_COUNTERS};

use crate::reader::retry_eintr;

/// Errors of the taskstats interface.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskstatsError {
    /// The NETLINK_GENERIC socket could not be opened or connected (EPERM under a seccomp
    /// filter, EAFNOSUPPORT without netlink).
    #[error("taskstats: opening a generic netlink socket: {0}")]
    Socket(#[source] io::Error),
    /// The TASKSTATS family could not be looked up (ENOENT: a kernel without CONFIG_TASKSTATS,
    /// or a network namespace the family is not registered in).
    #[error("taskstats: looking up the TASKSTATS generic netlink family: {0}")]
    Family(#[source] io::Error),
    /// TASKSTATS_CMD_GET for task `pid` failed: ESRCH for a task that is not there (any more),
    /// EPERM without CAP_NET_ADMIN.
    #[error("taskstats of task {pid}: {source}")]
    Query {
        /// The task id asked for, in the caller's pid namespace.
        pid: u32,
        /// The error (the kernel's, from its NLMSG_ERROR, or the socket's).
        #[source]
        source: io::Error,
    },
    /// The kernel's answer about task `pid` did not parse.
    #[error("taskstats of task {pid}: malformed answer: {what}")]
    Malformed {
        /// The task id asked for.
        pid: u32,
        /// What is wrong.
        what: &'static str,
    },
}

impl TaskstatsError {
    /// The errno behind the error, if it has one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            TaskstatsError::Socket(e) | TaskstatsError::Family(e) => e.raw_os_error(),
            TaskstatsError::Query { source, .. } => source.raw_os_error(),
            TaskstatsError::Malformed { .. } => None,
        }
    }

    /// The task is not there (any more): ESRCH (or ENOENT) from the kernel.
    pub fn is_gone(&self) -> bool {
        matches!(self, TaskstatsError::Query { .. })
            && matches!(self.raw_os_error(), Some(libc::ESRCH | libc::ENOENT))
    }

    /// The caller may not ask (EPERM or EACCES: no CAP_NET_ADMIN in the initial user namespace,
    /// or a security module's refusal).
    pub fn is_refused(&self) -> bool {
        matches!(self.raw_os_error(), Some(libc::EPERM | libc::EACCES))
    }
}

type Result<T> = std::result::Result<T, TaskstatsError>;

// linux/netlink.h, linux/genetlink.h, linux/taskstats.h.
const NLMSG_HDRLEN: usize = 16;
const GENL_HDRLEN: usize = 4;
const NLA_HDRLEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLA_TYPE_MASK: u16 = 0x3fff;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const TASKSTATS_GENL_NAME: &[u8] = b"TASKSTATS\0";
const TASKSTATS_GENL_VERSION: u8 = 1;
const TASKSTATS_CMD_GET: u8 = 1;
const TASKSTATS_CMD_ATTR_PID: u16 = 1;
const TASKSTATS_TYPE_STATS: u16 = 3;
const TASKSTATS_TYPE_AGGR_PID: u16 = 4;

/// Where a `struct taskstats` keeps the fields DELAY takes, by version: the offsets of the
/// count and the total of each pair, and the version that introduced the pair. Version 15
/// (Linux 6.14 before 6.14.9) inserted `*_delay_max` and `*_delay_min` after each total; 16
/// moved them to the end, back to the earlier offsets. Checked against linux/taskstats.h
/// (`offsetof`, x86-64; the struct is 8-byte aligned by its attributes on every architecture).
struct Layout {
    /// `(count offset, total offset, since version)` for blkio, swapin, freepages, thrashing,
    /// compact, wpcopy and irq, DELAY's order.
    pairs: [(usize, usize, u16); 7],
}

const LAYOUT: Layout = Layout {
    pairs: [
        (32, 40, 1),
        (48, 56, 1),
        (312, 320, 7),
        (328, 336, 9),
        (352, 360, 11),
        (400, 408, 13),
        (416, 424, 14),
    ],
};

const LAYOUT_V15: Layout = Layout {
    pairs: [
        (48, 56, 1),
        (80, 88, 1),
        (360, 368, 7),
        (392, 400, 9),
        (432, 440, 11),
        (496, 504, 13),
        (528, 536, 14),
    ],
};

/// One task's delay-accounting totals, as DELAY carries them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delays {
    /// `(total ns, count)` for blkio, swapin, freepages, thrashing, compact, wpcopy and irq;
    /// 0 for a kind the kernel's struct version lacks.
    pub pairs: [(u64, u64); 7],
}

impl Delays {
    /// Whether anything was accounted: a pair is nonzero, which only a `task_delay_info` gives.
    pub fn accounted(&self) -> bool {
        self.pairs.iter().any(|&p| p != (0, 0))
    }

    /// Sets `rec`'s pairs and [`DELAY_F_COUNTERS`].
    pub fn apply(&self, rec: &mut DelayRec) {
        let [blkio, swapin, freepages, thrashing, compact, wpcopy, irq] = self.pairs;
        (rec.blkio_delay_ns, rec.blkio_count) = blkio;
        (rec.swapin_delay_ns, rec.swapin_count) = swapin;
        (rec.freepages_delay_ns, rec.freepages_count) = freepages;
        (rec.thrashing_delay_ns, rec.thrashing_count) = thrashing;
        (rec.compact_delay_ns, rec.compact_count) = compact;
        (rec.wpcopy_delay_ns, rec.wpcopy_count) = wpcopy;
        (rec.irq_delay_ns, rec.irq_count) = irq;
        rec.flags |= DELAY_F_COUNTERS;
    }
}

/// Reads the pairs from a `struct taskstats` as the kernel sent it: only the fields its
/// `version` has and its length covers. `None` if it is too short to have a version.
pub fn parse_stats(stats: &[u8]) -> Option<Delays> {
    let version = u16::from_ne_bytes(stats.get(..2)?.try_into().ok()?);
    let layout = if version == 15 { &LAYOUT_V15 } else { &LAYOUT };
    let u64_at = |off: usize| {
        stats
            .get(off..off + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    let mut d = Delays::default();
    for (out, &(count, total, since)) in d.pairs.iter_mut().zip(&layout.pairs) {
        if version >= since {
            if let (Some(total), Some(count)) = (u64_at(total), u64_at(count)) {
                *out = (total, count);
            }
        }
    }
    Some(d)
}

/// A NETLINK_GENERIC socket connected to the kernel, with the TASKSTATS family looked up.
/// Replies are read on the thread that asked: one per reader thread.
pub struct Taskstats {
    fd: OwnedFd,
    family: u16,
    seq: u32,
    buf: Vec<u8>,
}

impl Taskstats {
    /// Opens a socket and looks the family up, unless `family` gives it (the id is the
    /// kernel's for the whole boot: [`Taskstats::family`] of an earlier socket). Whether the
    /// caller may ask shows at the first query (EPERM: [`TaskstatsError::is_refused`]).
    pub fn open(family: Option<u16>) -> Result<Self> {
        // SAFETY: socket() takes no pointers; the descriptor it returns is ours alone.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(TaskstatsError::Socket(io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Connected to the kernel (port 0), the socket takes messages from the kernel only
        // (netlink_getsockbyportid() refuses other senders with ECONNREFUSED): no other
        // process can slip a forged answer in.
        // SAFETY: sockaddr_nl is plain data, for which all zeroes is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` is a valid sockaddr_nl of the size passed; connect() only reads it.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                std::ptr::addr_of!(addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(TaskstatsError::Socket(io::Error::last_os_error()));
        }
        // The kernel answers within the sendmsg() that asks, so a reply is always waiting; the
        // timeout only bounds a wait that cannot happen.
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a valid timeval of the size passed; setsockopt() only reads it.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::addr_of!(tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(TaskstatsError::Socket(io::Error::last_os_error()));
        }
        let mut ts = Taskstats {
            fd,
            family: family.unwrap_or(0),
            seq: 0,
            buf: vec![0; 16384],
        };
        if family.is_none() {
            ts.family = ts.lookup_family()?;
        }
        Ok(ts)
    }

    /// The TASKSTATS family's id, which [`Taskstats::open`] may be given for another socket.
    pub fn family(&self) -> u16 {
        self.family
    }

    /// The delay-accounting totals of task `pid` (a thread id or a process id, in the caller's
    /// pid namespace: a process's are its leader thread's), or `None` where they are all 0 (no
    /// `task_delay_info`, or nothing accounted yet: see the module documentation). A task
    /// that is not there fails with ESRCH ([`TaskstatsError::is_gone`]).
    pub fn delays(&mut self, pid: u32) -> Result<Option<Delays>> {
        let d = self.query(pid)?;
        Ok(d.accounted().then_some(d))
    }

    /// TASKSTATS_CMD_GET for `pid`: the pairs of the TASKSTATS_TYPE_STATS its answer carries.
    fn query(&mut self, pid: u32) -> Result<Delays> {
        let err = |source| TaskstatsError::Query { pid, source };
        let bad = |what| TaskstatsError::Malformed { pid, what };
        let mut req = [0u8; NLMSG_HDRLEN + GENL_HDRLEN + NLA_HDRLEN + 4];
        let len = put_request(
            &mut req,
            self.family,
            TASKSTATS_CMD_GET,
            TASKSTATS_GENL_VERSION,
            TASKSTATS_CMD_ATTR_PID,
            &pid.to_ne_bytes(),
        );
        let payload = self.ask(&mut req[..len]).map_err(err)?;
        // The reply: TASKSTATS_TYPE_AGGR_PID, nesting TASKSTATS_TYPE_PID and
        // TASKSTATS_TYPE_STATS (after a TASKSTATS_TYPE_NULL pad where the struct needs aligning).
        let aggr = attr(&self.buf[payload.clone()], TASKSTATS_TYPE_AGGR_PID)
            .ok_or(bad("no TASKSTATS_TYPE_AGGR_PID"))?;
        let stats = attr(aggr, TASKSTATS_TYPE_STATS).ok_or(bad("no TASKSTATS_TYPE_STATS"))?;
        parse_stats(stats).ok_or(bad("struct taskstats too short"))
    }

    /// CTRL_CMD_GETFAMILY for "TASKSTATS": the family's id.
    fn lookup_family(&mut self) -> Result<u16> {
        let mut req = [0u8; NLMSG_HDRLEN + GENL_HDRLEN + NLA_HDRLEN + 12];
        let len = put_request(
            &mut req,
            GENL_ID_CTRL,
            CTRL_CMD_GETFAMILY,
            1,
            CTRL_ATTR_FAMILY_NAME,
            TASKSTATS_GENL_NAME,
        );
        let payload = self.ask(&mut req[..len]).map_err(TaskstatsError::Family)?;
        let malformed = || {
            TaskstatsError::Family(io::Error::new(
                io::ErrorKind::InvalidData,
                "no CTRL_ATTR_FAMILY_ID in the answer",
            ))
        };
        let id = attr(&self.buf[payload], CTRL_ATTR_FAMILY_ID).ok_or_else(malformed)?;
        Ok(u16::from_ne_bytes(
            id.get(..2)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(malformed)?,
        ))
    }

    /// Sends request `req` (its sequence number set here) and receives its answer into
    /// `self.buf`: the range of the answer's attributes, after its genetlink header. An
    /// NLMSG_ERROR answer is its errno.
    fn ask(&mut self, req: &mut [u8]) -> io::Result<std::ops::Range<usize>> {
        self.seq = self.seq.wrapping_add(1);
        req[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        // SAFETY: `req` is readable for its length; send() does not keep the pointer.
        retry_eintr(|| unsafe {
            libc::send(self.fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0)
        })?;
        loop {
            // SAFETY: `self.buf` is writable for its length; recv() writes at most that many
            // bytes and keeps no pointer.
            let n = retry_eintr(|| unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            })?;
            if n > self.buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "answer larger than the buffer",
                ));
            }
            // A datagram holds whole messages; only the one answering this request counts (an
            // answer to an earlier request given up on, say, is skipped).
            let mut pos = 0;
            while pos + NLMSG_HDRLEN <= n {
                let h = &self.buf[pos..];
                let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let kind = u16::from_ne_bytes([h[4], h[5]]);
                let seq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
                if len < NLMSG_HDRLEN || pos + len > n {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "truncated netlink message",
                    ));
                }
                if seq == self.seq {
                    if kind == NLMSG_ERROR {
                        // struct nlmsgerr: int error (negative errno, 0 for an ACK), then the
                        // request's header.
                        let e = h
                            .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
                            .filter(|_| len >= NLMSG_HDRLEN + 4)
                            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                            .unwrap_or(-libc::EPROTO);
                        let errno = e.checked_neg().filter(|&x| x > 0);
                        return Err(io::Error::from_raw_os_error(errno.unwrap_or(libc::EPROTO)));
                    }
                    if len < NLMSG_HDRLEN + GENL_HDRLEN {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "netlink answer without a genetlink header",
                        ));
                    }
                    return Ok(pos + NLMSG_HDRLEN + GENL_HDRLEN..pos + len);
                }
                pos += align4(len);
            }
        }
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Writes a generic netlink request into `buf`: the netlink header (type `family`,
/// NLM_F_REQUEST, sequence number 0 until [`Taskstats::ask`] sets it), the genetlink header
/// (`cmd`, `version`) and one attribute `attr_type` holding `value`. Returns its length.
fn put_request(
    buf: &mut [u8],
    family: u16,
    cmd: u8,
    version: u8,
    attr_type: u16,
    value: &[u8],
) -> usize {
    let attr_len = NLA_HDRLEN + value.len();
    let len = NLMSG_HDRLEN + GENL_HDRLEN + align4(attr_len);
    buf[..len].fill(0);
    buf[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    buf[4..6].copy_from_slice(&family.to_ne_bytes());
    buf[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    // 8..12 sequence number, 12..16 port id: 0, the kernel fills in ours.
    buf[16] = cmd;
    buf[17] = version;
    let a = NLMSG_HDRLEN + GENL_HDRLEN;
    buf[a..a + 2].copy_from_slice(&(attr_len as u16).to_ne_bytes());
    buf[a + 2..a + 4].copy_from_slice(&attr_type.to_ne_bytes());
    buf[a + NLA_HDRLEN..a + attr_len].copy_from_slice(value);
    len
}

/// The payload of the first netlink attribute of type `kind` in `attrs` (nested or not).
fn attr(mut attrs: &[u8], kind: u16) -> Option<&[u8]> {
    while attrs.len() >= NLA_HDRLEN {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let t = u16::from_ne_bytes([attrs[2], attrs[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > attrs.len() {
            return None;
        }
        if t == kind {
            return Some(&attrs[NLA_HDRLEN..len]);
        }
        attrs = attrs.get(align4(len)..).unwrap_or(&[]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `struct taskstats` of `size` bytes and `version`, with `at(offset)` in every u64 slot
    /// from offset 16 (cpu_count) on.
    fn stats(version: u16, size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        b[..2].copy_from_slice(&version.to_ne_bytes());
        for off in (16..size.saturating_sub(7)).step_by(8) {
            b[off..off + 8].copy_from_slice(&(off as u64 * 1000).to_ne_bytes());
        }
        b
    }

    fn at(off: usize) -> u64 {
        off as u64 * 1000
    }

    #[test]
    fn each_version_gives_the_pairs_it_has_at_its_offsets() {
        // Sizes as the kernels send them: v10 (5.10: up to ac_btime64), v13 (up to wpcopy),
        // v14 (irq), v16 (max and min at the end).
        for (version, size, kinds) in [(10, 352, 4), (11, 368, 5), (13, 416, 6), (14, 432, 7)] {
            let d = parse_stats(&stats(version, size)).expect("parses");
            for (i, &(count, total, _)) in LAYOUT.pairs.iter().enumerate() {
                let want = if i < kinds {
                    (at(total), at(count))
                } else {
                    (0, 0)
                };
                assert_eq!(d.pairs[i], want, "version {version}, pair {i}");
            }
        }
        let v16 = parse_stats(&stats(16, 432 + 16 * 8)).expect("parses");
        assert_eq!(v16, parse_stats(&stats(14, 432)).expect("parses"));
        // Version 15: each total followed by its max and min.
        let v15 = parse_stats(&stats(15, 560)).expect("parses");
        assert_eq!(v15.pairs[0], (at(56), at(48)), "blkio");
        assert_eq!(v15.pairs[6], (at(536), at(528)), "irq");
        // blkio and swapin since version 1; a short struct gives what it covers.
        let v1 = parse_stats(&stats(1, 64)).expect("parses");
        assert_eq!(v1.pairs[..2], [(at(40), at(32)), (at(56), at(48))]);
        assert_eq!(v1.pairs[2..], [(0, 0); 5]);
        // Fields a version does not have are not read even where its length would cover them.
        let v8 = parse_stats(&stats(8, 432)).expect("parses");
        assert_eq!(
            v8.pairs[3..],
            [(0, 0); 4],
            "thrashing and later: not in version 8"
        );
        assert!(parse_stats(&[1]).is_none());
    }

    #[test]
    fn apply_sets_the_pairs_and_the_flag() {
        let d = Delays {
            pairs: [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14)],
        };
        let mut rec = DelayRec {
            run_ns: 99,
            ..DelayRec::default()
        };
        d.apply(&mut rec);
        assert_eq!(
            (
                rec.blkio_delay_ns,
                rec.blkio_count,
                rec.irq_delay_ns,
                rec.irq_count
            ),
            (1, 2, 13, 14)
        );
        assert_eq!((rec.compact_delay_ns, rec.wpcopy_count), (9, 12));
        assert_eq!((rec.run_ns, rec.flags), (99, DELAY_F_COUNTERS));
        // Any nonzero count or total is accounting; all zeros is none (or none yet).
        assert!(d.accounted());
        assert!(!Delays::default().accounted());
        let mut irq_only = Delays::default();
        irq_only.pairs[6] = (0, 1);
        assert!(irq_only.accounted());
    }

    #[test]
    fn requests_and_attributes_round_trip() {
        let mut buf = [0u8; 64];
        let len = put_request(
            &mut buf,
            0x1c,
            TASKSTATS_CMD_GET,
            1,
            1,
            &42u32.to_ne_bytes(),
        );
        assert_eq!(len, 28);
        assert_eq!(
            u32::from_ne_bytes(buf[..4].try_into().unwrap()) as usize,
            len
        );
        assert_eq!(attr(&buf[20..len], 1), Some(&42u32.to_ne_bytes()[..]));
        assert_eq!(attr(&buf[20..len], 2), None);
        // A name is padded to 4 bytes; a nested attribute is found by its type, flags masked.
        let len = put_request(&mut buf, GENL_ID_CTRL, 3, 1, 2, TASKSTATS_GENL_NAME);
        assert_eq!(len, 16 + 4 + 16);
        // TASKSTATS_TYPE_AGGR_PID with NLA_F_NESTED (bit 15), holding a u32 attribute 3.
        let nested = [12, 0, 4, 0x80, 8, 0, 3, 0, 7, 0, 0, 0];
        let inner = attr(&nested, 4).expect("found with its flag masked");
        assert_eq!(attr(inner, 3), Some(&[7, 0, 0, 0][..]));
        // Lengths past the end are malformed, not read.
        assert_eq!(attr(&[200, 0, 1, 0, 0, 0], 1), None);
    }

    /// As root (CAP_NET_ADMIN), the kernel answers for this thread; without the capability it
    /// refuses with EPERM. Skipped where the kernel has no taskstats.
    #[test]
    fn the_kernel_answers_for_this_thread_or_refuses() {
        let mut ts = match Taskstats::open(None) {
            Ok(ts) => ts,
            Err(TaskstatsError::Family(e)) => return eprintln!("no taskstats here: {e}"),
            Err(e) => panic!("{e}"),
        };
        // SAFETY: gettid() and geteuid() have no preconditions.
        let (me, root) = unsafe { (libc::gettid() as u32, libc::geteuid() == 0) };
        match ts.query(me) {
            Ok(_) => assert!(ts.delays(me).expect("again").is_none_or(|d| d.accounted())),
            Err(e) if e.is_refused() => return assert!(!root, "root refused: {e}"),
            Err(e) => panic!("{e}"),
        }
        // A family id given is used as is.
        let mut again = Taskstats::open(Some(ts.family())).expect("second socket");
        assert!(again.query(me).is_ok());
        // A pid past pid_max is no task.
        let e = ts.query(u32::MAX >> 1).expect_err("no such task");
        assert!(e.is_gone(), "{e}");
    }
}
