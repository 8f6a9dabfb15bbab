//! Robustness and load: bad requests, slow and vanishing clients, limits, many clients, socket
//! activation, the tools through the daemon, and the daemon's life cycle.
//!
//! Every response a test receives is decoded and checked whole: START first (echoing the
//! request, backend "daemon"), DONE last with error 0 and the count of the tasks that came, and
//! the long-lived processes the test knows (itself, the daemon, pid 1) reported with the parent,
//! name and uid /proc gives them. A refusal is a lone DONE with a negative errno and an
//! explanation that must name the problem.
//!
//! Resource checks read the daemon's /proc entry: descriptors and threads must come back to
//! what an idle daemon has, and memory must stay within the configured budget plus a slack.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use taskdiag::client::DaemonClient;
use taskdiag_proto::msg::{done_text, message_len, Messages};
use taskdiag_proto::task::{Event, StreamDecoder, Task};
use taskdiag_proto::{BackendId, Done, Group, MsgHeader, MsgType, Request, Strategy};

/// The groups these tests ask the daemon for: all but VMA_STAT (its counters only smaps has),
/// VMA (many records per task), and those that cost a walk or a copy per task or, on older
/// kernels, /proc task by task: CGROUP, PATHS, ENVIRON, SCHED, SECURITY, KSTACK (these tests measure
/// the daemon's scheduling and buffers under load, not the cost of /proc: at 6,000 threads
/// CGROUP alone costs ~66,000 system calls a request).
const SERVED: u64 = taskdiag_proto::SHOW_SUPPORTED
    & !taskdiag_proto::SHOW_MAPS
    & !Group::Cgroup.flag()
    & !Group::Paths.flag()
    & !Group::Environ.flag()
    & !Group::Sched.flag()
    & !Group::Security.flag()
    & !Group::Kstack.flag();

use crate::harness::*;

// ---------------------------------------------------------------------------------------------
// Checking responses
// ---------------------------------------------------------------------------------------------

fn base_cred() -> u64 {
    Group::Base.flag() | Group::Cred.flag()
}

fn me() -> u32 {
    std::process::id()
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// What /proc says about a long-lived process; every response must agree.
#[derive(Debug, Clone)]
struct Known {
    pid: u32,
    ppid: u32,
    comm: Vec<u8>,
    uid: u32,
}

impl Known {
    fn of(pid: u32) -> Known {
        let gone = || -> ! { panic!("process {pid} vanished: it must outlive the test") };
        let ppid = tasks::stat(pid)
            .and_then(|f| f.get(1)?.parse().ok())
            .unwrap_or_else(|| gone());
        let uid = tasks::status(pid)
            .and_then(|s| {
                tasks::status_field(&s, "Uid")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| gone());
        let comm = tasks::comm_bytes(pid).unwrap_or_else(|| gone());
        Known {
            pid,
            ppid,
            comm,
            uid,
        }
    }

    /// The test process, its daemon and pid 1.
    fn refs(d: &Daemon) -> Vec<Known> {
        let k = vec![Known::of(me()), Known::of(d.pid()), Known::of(1)];
        assert_eq!(k[1].comm, b"taskdiagd", "the daemon's name");
        assert_eq!(k[1].ppid, me(), "the daemon is our child");
        k
    }

    fn check(&self, tasks: &[Task]) -> Result<(), String> {
        let t = tasks
            .iter()
            .find(|t| t.pid == self.pid)
            .ok_or_else(|| format!("pid {} missing from {} tasks", self.pid, tasks.len()))?;
        let b = t
            .base
            .as_ref()
            .ok_or(format!("pid {}: no BASE", self.pid))?;
        if b.rec.ppid != self.ppid || b.comm != self.comm {
            return Err(format!(
                "pid {}: ppid {} comm {:?}, /proc says ppid {} comm {:?}",
                self.pid,
                b.rec.ppid,
                String::from_utf8_lossy(&b.comm),
                self.ppid,
                String::from_utf8_lossy(&self.comm)
            ));
        }
        if let Some(c) = &t.cred {
            if c.rec.uid != self.uid {
                return Err(format!(
                    "pid {}: uid {}, /proc says {}",
                    self.pid, c.rec.uid, self.uid
                ));
            }
        }
        Ok(())
    }
}

/// Decodes a whole response to `req` and checks its envelope: START first (echoing the request,
/// backend daemon), DONE last with error 0 and as many tasks as TASK messages came. Returns the
/// tasks.
fn check_stream(bytes: &[u8], req: &Request) -> Result<Vec<Task>, String> {
    let ev = StreamDecoder::decode_all(bytes).map_err(|e| format!("decoding the stream: {e}"))?;
    let Some(Event::Start(s)) = ev.first() else {
        return Err(format!(
            "the stream does not begin with START: {:?}",
            ev.first()
        ));
    };
    if s.backend != BackendId::Daemon as u16
        || s.strategy != req.strategy
        || s.show_flags != req.show_flags
        || s.pid != req.pid
    {
        return Err(format!("START {s:?} does not echo {req:?}"));
    }
    let Some(Event::Done(d)) = ev.last() else {
        return Err("the stream does not end with DONE".into());
    };
    if d.error != 0 {
        return Err(format!("DONE error {}", d.error));
    }
    let mut tasks = Vec::with_capacity(ev.len());
    for e in &ev[1..ev.len() - 1] {
        match e {
            Event::Task(t) => tasks.push(t.clone()),
            other => return Err(format!("unexpected event inside the stream: {other:?}")),
        }
    }
    if d.tasks != tasks.len() as u64 {
        return Err(format!("DONE says {} tasks, {} came", d.tasks, tasks.len()));
    }
    let messages = Messages::new(bytes)
        .filter_map(Result::ok)
        .filter(|m| m.msg_type() == Some(MsgType::Task) && !m.continued())
        .count();
    if messages != tasks.len() {
        return Err(format!(
            "{messages} final TASK messages, {} tasks",
            tasks.len()
        ));
    }
    Ok(tasks)
}

/// An ALL response: one record per process, increasing pids, the known processes right.
fn check_all(tasks: &[Task], known: &[Known]) -> Result<(), String> {
    for w in tasks.windows(2) {
        if w[0].pid >= w[1].pid {
            return Err(format!(
                "pids not increasing: {} then {}",
                w[0].pid, w[1].pid
            ));
        }
    }
    if let Some(t) = tasks.iter().find(|t| t.pid != t.tgid || t.base.is_none()) {
        return Err(format!("not a process record with BASE: {t:?}"));
    }
    known.iter().try_for_each(|k| k.check(tasks))
}

fn collect(c: &mut DaemonClient, req: &Request) -> Result<(u64, Vec<u8>), taskdiag::Error> {
    let mut buf = Vec::new();
    let n = c.dump(req, &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    })?;
    Ok((n, buf))
}

/// One ALL dump with BASE and CRED through `c`, checked whole. Returns the number of tasks.
fn good_dump(c: &mut DaemonClient, known: &[Known]) -> Result<usize, String> {
    let req = Request::new(Strategy::All, 0, base_cred());
    let (n, buf) = collect(c, &req).map_err(|e| format!("dump: {e}"))?;
    let tasks = check_stream(&buf, &req)?;
    if n != tasks.len() as u64 {
        return Err(format!(
            "dump() says {n} tasks, the stream has {}",
            tasks.len()
        ));
    }
    check_all(&tasks, known)?;
    Ok(tasks.len())
}

/// A new connection and one checked dump on it.
fn good_client(d: &Daemon, known: &[Known]) -> Result<usize, String> {
    let mut c = DaemonClient::connect(&d.socket).map_err(|e| e.to_string())?;
    good_dump(&mut c, known)
}

// ---------------------------------------------------------------------------------------------
// Raw connections
// ---------------------------------------------------------------------------------------------

fn connect(d: &Daemon) -> UnixStream {
    connect_path(&d.socket)
}

fn connect_path(p: &Path) -> UnixStream {
    let s = UnixStream::connect(p).expect("connect to taskdiagd");
    s.set_read_timeout(Some(secs(30.0))).expect("SO_RCVTIMEO");
    s.set_write_timeout(Some(secs(30.0))).expect("SO_SNDTIMEO");
    s
}

/// Reads one response (through its DONE message) from a raw connection.
fn read_response(s: &mut UnixStream) -> io::Result<Vec<u8>> {
    // Exactly one response, header then body (a StreamReader would read ahead into the next
    // pipelined response); the header is checked by the protocol's own `message_len`.
    let mut out = Vec::new();
    loop {
        let at = out.len();
        out.resize(at + MsgHeader::SIZE, 0);
        s.read_exact(&mut out[at..])?;
        let len = message_len(&out[at..], at)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        out.resize(at + len, 0);
        s.read_exact(&mut out[at + MsgHeader::SIZE..])?;
        if MsgHeader::read_from(&out[at..]).is_some_and(|h| h.msg_type == MsgType::Done as u16) {
            return Ok(out);
        }
    }
}

/// Everything the daemon still sends, until it ends the connection (end of file, or a reset
/// because it closed with our bytes unread).
fn read_to_close(s: &mut UnixStream) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(out),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "the daemon did not end the connection: {e} (after {} more bytes)",
                    out.len()
                ))
            }
        }
    }
}

/// The error and explanation of a refusal, which must be a lone DONE message.
fn refusal(resp: &[u8]) -> Result<(i32, String), String> {
    let msgs = Messages::new(resp)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("refusal: {e}"))?;
    let [m] = msgs.as_slice() else {
        return Err(format!(
            "{} messages where a lone DONE was expected",
            msgs.len()
        ));
    };
    if m.msg_type() != Some(MsgType::Done) {
        return Err(format!(
            "a message of type {} instead of DONE",
            m.header.msg_type
        ));
    }
    let d = Done::read_from(m.payload).ok_or("a short DONE")?;
    if d.tasks != 0 {
        return Err(format!("a refusal reporting {} tasks", d.tasks));
    }
    let text = done_text(m).ok_or(format!("DONE({}) without an explanation", d.error))?;
    Ok((d.error, text.to_string()))
}

/// Checks a refusal's errno and that its explanation contains each of `words`.
fn expect_refusal(resp: &[u8], errno: i32, words: &[&str]) -> Result<String, String> {
    let (e, text) = refusal(resp)?;
    if e != -errno {
        return Err(format!("error {e} ({text:?}), expected -{errno}"));
    }
    if let Some(w) = words.iter().find(|w| !text.contains(*w)) {
        return Err(format!("the explanation {text:?} does not say {w:?}"));
    }
    Ok(text)
}

// ---------------------------------------------------------------------------------------------
// The daemon's resources
// ---------------------------------------------------------------------------------------------

fn threads(d: &Daemon) -> u64 {
    d.status_kb("Threads")
}

/// The daemon's descriptors other than BPF links. Each loaded program set attaches its
/// whole-walk iterator links on first use and keeps them (at most two per set), so links depend
/// on which set served what; everything else (sockets, pidfds, files) belongs to a connection
/// or a request and must go away with it.
fn fds(d: &Daemon) -> usize {
    let (all, links) = fd_counts(d);
    all - links
}

/// All descriptors of the daemon, and how many are BPF links.
fn fd_counts(d: &Daemon) -> (usize, usize) {
    let mut all = 0;
    let mut links = 0;
    for e in std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .expect("/proc/PID/fd")
        .flatten()
    {
        all += 1;
        if std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf_link") {
            links += 1;
        }
    }
    (all, links)
}

/// The most BPF links the daemon may hold: two per loaded program set (the workers' and the
/// one that identifies clients).
fn max_links() -> usize {
    2 * (std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
        + 1)
}

/// The daemon's descriptors and threads once nothing is going on: sampled until they have not
/// changed for half a second.
fn settle(d: &Daemon) -> (usize, u64) {
    let mut last = (fds(d), threads(d));
    let mut same = 0;
    let t0 = Instant::now();
    while same < 10 && t0.elapsed() < secs(15.0) {
        std::thread::sleep(secs(0.05));
        let now = (fds(d), threads(d));
        if now == last {
            same += 1;
        } else {
            (last, same) = (now, 0);
        }
    }
    last
}

/// Checks the daemon is back to `base` (descriptors, threads) within a few seconds.
fn assert_back_to(d: &Daemon, base: (usize, u64), what: &str) {
    let ok = wait_until(secs(15.0), || (fds(d), threads(d)) == base);
    let links = fd_counts(d).1;
    assert!(
        links <= max_links(),
        "{what}: {links} BPF links\n{}",
        describe(d)
    );
    assert!(
        ok,
        "{what}: the daemon has {} descriptors and {} threads, {} and {} when idle\n{}",
        fds(d),
        threads(d),
        base.0,
        base.1,
        describe(d)
    );
}

/// The daemon's descriptors and threads, for failure messages.
fn describe(d: &Daemon) -> String {
    let mut s = String::from("descriptors:");
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{}/fd", d.pid())) {
        let mut v: Vec<String> = rd
            .flatten()
            .map(|e| {
                let t = std::fs::read_link(e.path()).map(|p| p.display().to_string());
                format!(
                    " {}={}",
                    e.file_name().to_string_lossy(),
                    t.unwrap_or_default()
                )
            })
            .collect();
        v.sort();
        s.extend(v);
    }
    s += "\nthreads:";
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{}/task", d.pid())) {
        for e in rd.flatten() {
            let p = e.path();
            let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
            let wchan = std::fs::read_to_string(p.join("wchan")).unwrap_or_default();
            s += &format!(
                " {}:{}:{wchan}",
                e.file_name().to_string_lossy(),
                comm.trim()
            );
        }
    }
    s
}

/// The daemon's peak resident memory (kB) over a stretch of the test: its VmHWM, reset to its
/// VmRSS when the stretch starts (`clear_refs` 5). The kernel keeps the peak exactly, where
/// sampling VmRSS misses a short one (a ring buffer mapped for one dump) on a loaded machine.
struct RssSampler {
    pid: u32,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let path = format!("/proc/{pid}/clear_refs");
        std::fs::write(&path, "5").unwrap_or_else(|e| panic!("resetting {path}: {e}"));
        RssSampler { pid }
    }

    fn finish(self) -> u64 {
        tasks::status_number(self.pid, "VmHWM").expect("the daemon's VmHWM")
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Bad requests
// ---------------------------------------------------------------------------------------------

/// A bad request and what the daemon must answer.
struct Bad {
    name: &'static str,
    bytes: Vec<u8>,
    errno: i32,
    words: Vec<String>,
    /// The connection ends after the error (the stream cannot be followed).
    fatal: bool,
}

fn request_with(f: impl FnOnce(&mut Request)) -> Vec<u8> {
    let mut r = Request::new(Strategy::All, 0, Group::Base.flag());
    f(&mut r);
    r.to_bytes().to_vec()
}

fn bad_requests() -> Vec<Bad> {
    let bad = |name, bytes, errno, words: &[&str], fatal| Bad {
        name,
        bytes,
        errno,
        words: words.iter().map(|w| w.to_string()).collect(),
        fatal,
    };
    // A request of another version, longer, skipped by its length.
    let mut v2 = request_with(|r| {
        r.len = 48;
        r.version = 2;
    });
    v2.extend_from_slice(&[0xa5; 16]);
    let mut long = request_with(|r| r.len = 40);
    long.extend_from_slice(&[0; 8]);
    vec![
        bad(
            "length 0",
            request_with(|r| r.len = 0),
            libc::EINVAL,
            &["length 0", "shorter than the 8-byte request header"],
            true,
        ),
        bad(
            "length 7",
            request_with(|r| r.len = 7),
            libc::EINVAL,
            &["length 7", "shorter"],
            true,
        ),
        bad(
            "length 1 MiB",
            request_with(|r| r.len = 1 << 20),
            libc::EMSGSIZE,
            &["length 1048576", "exceeds the limit of 4096 bytes"],
            true,
        ),
        bad(
            "length u32::MAX",
            request_with(|r| r.len = u32::MAX),
            libc::EMSGSIZE,
            &["length 4294967295", "exceeds the limit"],
            true,
        ),
        bad(
            "version 9",
            request_with(|r| r.version = 9),
            libc::EPROTONOSUPPORT,
            &["unsupported protocol version 9"],
            false,
        ),
        bad(
            "version 0",
            request_with(|r| r.version = 0),
            libc::EPROTONOSUPPORT,
            &["unsupported protocol version 0"],
            false,
        ),
        bad(
            "version 2, 48 bytes",
            v2,
            libc::EPROTONOSUPPORT,
            &["unsupported protocol version 2"],
            false,
        ),
        bad(
            "group 40",
            request_with(|r| r.show_flags |= 1 << 40),
            libc::EOPNOTSUPP,
            &["unknown or unsupported groups", "0x10000000001"],
            false,
        ),
        bad(
            "smaps counters (not served by the daemon)",
            request_with(|r| r.show_flags |= 1 << 3),
            libc::EOPNOTSUPP,
            &["vma_stat", "not served by taskdiagd"],
            false,
        ),
        bad(
            "every group bit",
            request_with(|r| r.show_flags = u64::MAX),
            libc::EOPNOTSUPP,
            &["0xffffffffffffffff"],
            false,
        ),
        bad(
            "strategy 6",
            request_with(|r| r.strategy = 6),
            libc::EINVAL,
            &["unknown dump strategy 6"],
            false,
        ),
        bad(
            "strategy u32::MAX",
            request_with(|r| r.strategy = u32::MAX),
            libc::EINVAL,
            &["unknown dump strategy 4294967295"],
            false,
        ),
        bad(
            "request flags",
            request_with(|r| r.flags = 1),
            libc::EINVAL,
            &["reserved request fields must be zero"],
            false,
        ),
        bad(
            "processes' groups for another strategy than ALL_WITH_THREADS",
            request_with(|r| r.show_process = Group::Base.flag()),
            libc::EINVAL,
            &["reserved request fields must be zero"],
            false,
        ),
        bad(
            "unknown processes' groups",
            request_with(|r| {
                r.strategy = Strategy::AllWithThreads as u32;
                r.show_process = 1 << 63;
            }),
            libc::EOPNOTSUPP,
            &["unknown or unsupported groups", "0x8000000000000000"],
            false,
        ),
        bad(
            "length 16",
            request_with(|r| r.len = 16)[..16].to_vec(),
            libc::EINVAL,
            &["truncated request: 16 bytes, need 32"],
            false,
        ),
        bad(
            "length 40",
            long,
            libc::EINVAL,
            &["bad request length 40"],
            false,
        ),
    ]
}

/// The follow-up that shows a connection still works: ONE for this process.
fn check_follow_up(s: &mut UnixStream) -> Result<(), String> {
    let req = Request::new(Strategy::One, me(), base_cred());
    s.write_all(&req.to_bytes())
        .map_err(|e| format!("sending a valid request after the error: {e}"))?;
    let resp = read_response(s).map_err(|e| format!("reading the valid request's answer: {e}"))?;
    let tasks = check_stream(&resp, &req)?;
    match tasks.as_slice() {
        [t] if t.pid == me() && t.cred.as_ref().is_some_and(|c| c.rec.uid == 0) => Ok(()),
        _ => Err(format!("ONE {}: {tasks:?}", me())),
    }
}

/// Sends one bad request on a new connection and checks the answer and what follows.
fn run_bad(d: &Daemon, b: &Bad) -> Result<String, String> {
    let ctx = |e: String| format!("{}: {e}", b.name);
    let mut s = connect(d);
    s.write_all(&b.bytes)
        .map_err(|e| ctx(format!("sending: {e}")))?;
    let resp = read_response(&mut s).map_err(|e| ctx(format!("reading the error: {e}")))?;
    let words: Vec<&str> = b.words.iter().map(String::as_str).collect();
    let text = expect_refusal(&resp, b.errno, &words).map_err(ctx)?;
    if b.fatal {
        let more = read_to_close(&mut s).map_err(ctx)?;
        if !more.is_empty() {
            return Err(ctx(format!("{} bytes after a fatal error", more.len())));
        }
    } else {
        check_follow_up(&mut s).map_err(ctx)?;
    }
    Ok(text)
}

/// A request cut short, then end of file: the daemon says what arrived and hangs up.
fn run_truncated(d: &Daemon, have: usize) -> Result<String, String> {
    let mut s = connect(d);
    let req = Request::new(Strategy::All, 0, base_cred()).to_bytes();
    s.write_all(&req[..have]).map_err(|e| e.to_string())?;
    s.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
    let resp = read_response(&mut s).map_err(|e| format!("truncated {have}: {e}"))?;
    let want = if have >= 4 {
        format!("truncated request: {have} of 32 bytes arrived")
    } else {
        format!("truncated request: {have} bytes arrived")
    };
    let text = expect_refusal(&resp, libc::EINVAL, &[&want])?;
    let more = read_to_close(&mut s)?;
    if !more.is_empty() {
        return Err(format!(
            "truncated {have}: {} bytes after the error",
            more.len()
        ));
    }
    Ok(text)
}

/// A request cut short, then the connection closed without reading anything.
fn run_truncated_close(d: &Daemon) {
    let mut s = connect(d);
    let req = Request::new(Strategy::All, 0, base_cred()).to_bytes();
    s.write_all(&req[..13]).expect("write");
}

/// A small deterministic generator (xorshift64*) for garbage.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Random input: raw bytes, frames of plausible length with random contents, or a valid
/// request with bits flipped.
fn garbage(rng: &mut Rng) -> Vec<u8> {
    match rng.below(3) {
        0 => {
            let n = 1 + rng.below(300) as usize;
            rng.bytes(n)
        }
        1 => {
            let mut v = Vec::new();
            for _ in 0..1 + rng.below(6) {
                let len = 8 + rng.below(60) as u32;
                v.extend_from_slice(&len.to_ne_bytes());
                v.extend_from_slice(&(rng.below(3) as u16).to_ne_bytes());
                let body = rng.bytes(len as usize - 6);
                v.extend_from_slice(&body);
            }
            v
        }
        _ => {
            let mut v = Request::new(Strategy::All, 0, base_cred())
                .to_bytes()
                .to_vec();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(32) as usize;
                v[i] ^= 1 << rng.below(8);
            }
            v
        }
    }
}

/// Sends garbage, ends the input, and checks everything that comes back: each answer is a
/// refusal with an explanation, or (when the garbage happened to be a valid request) a whole
/// stream; then the daemon hangs up.
fn run_garbage(d: &Daemon, bytes: &[u8]) -> Result<usize, String> {
    let ctx = |e: String| format!("garbage {:02x?}: {e}", &bytes[..bytes.len().min(48)]);
    let mut s = connect(d);
    s.write_all(bytes).map_err(|e| ctx(e.to_string()))?;
    s.shutdown(Shutdown::Write)
        .map_err(|e| ctx(e.to_string()))?;
    let all = read_to_close(&mut s).map_err(ctx)?;
    let mut answers = 0;
    let mut dec: Option<StreamDecoder> = None;
    for m in Messages::new(&all) {
        let m = m.map_err(|e| ctx(format!("answer: {e}")))?;
        if dec.is_none() && m.msg_type() == Some(MsgType::Done) {
            let one = &all[m.offset..m.offset + m.header.len as usize];
            let (e, text) = refusal(one).map_err(ctx)?;
            let known = text.starts_with("bad request")
                || text.starts_with("truncated request")
                || text.contains("not served by taskdiagd");
            if e >= 0 || !known {
                return Err(ctx(format!("refusal {e} {text:?}")));
            }
            answers += 1;
            continue;
        }
        let sd = dec.get_or_insert_with(StreamDecoder::new);
        sd.push(&m).map_err(|e| ctx(format!("stream: {e}")))?;
        if sd.finished() {
            dec = None;
            answers += 1;
        }
    }
    if dec.is_some() || answers == 0 {
        return Err(ctx(format!("no complete answer in {} bytes", all.len())));
    }
    Ok(answers)
}

#[test]
fn each_bad_request_gets_an_errno_and_an_explanation() {
    let d = Daemon::start(&[]);
    let known = Known::refs(&d);
    good_client(&d, &known).expect("a first dump");
    let base = settle(&d);
    for b in bad_requests() {
        let text = run_bad(&d, &b).unwrap_or_else(|e| panic!("{e}"));
        println!("{:>20}: -{} {text:?}", b.name, b.errno);
    }
    for have in [1, 2, 4, 20, 31] {
        let text = run_truncated(&d, have).unwrap_or_else(|e| panic!("{e}"));
        println!("{:>20}: {text:?}", format!("truncated at {have}"));
    }
    run_truncated_close(&d);

    // An oversized request whose client goes on sending what it announced: the daemon answers
    // after the header and hangs up; the client's writes then fail, not hang.
    let mut s = connect(&d);
    let mut w = s.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        let mut v = request_with(|r| r.len = 1 << 20);
        v.resize(1 << 20, 0x5a);
        w.write_all(&v)
    });
    let resp = read_response(&mut s).expect("the answer to 1 MiB");
    expect_refusal(&resp, libc::EMSGSIZE, &["1048576"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        writer.join().expect("writer").is_err(),
        "the daemon read a whole 1 MiB request"
    );
    read_to_close(&mut s).expect("closed");

    // Bad requests between good ones on one connection, in one write: answered in order.
    let mut s = connect(&d);
    let good = Request::new(Strategy::One, me(), base_cred());
    let mut batch = good.to_bytes().to_vec();
    batch.extend(request_with(|r| r.version = 7));
    batch.extend(request_with(|r| r.strategy = 9));
    batch.extend(good.to_bytes());
    s.write_all(&batch).expect("batch");
    check_stream(&read_response(&mut s).expect("1st"), &good).expect("1st");
    expect_refusal(
        &read_response(&mut s).expect("2nd"),
        libc::EPROTONOSUPPORT,
        &["7"],
    )
    .expect("2nd");
    expect_refusal(
        &read_response(&mut s).expect("3rd"),
        libc::EINVAL,
        &["strategy 9"],
    )
    .expect("3rd");
    check_stream(&read_response(&mut s).expect("4th"), &good).expect("4th");
    drop(s);

    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut answers = 0;
    for _ in 0..300 {
        let g = garbage(&mut rng);
        answers += run_garbage(&d, &g).unwrap_or_else(|e| panic!("{e}"));
    }
    println!("300 garbage inputs: {answers} answers");
    good_client(&d, &known).expect("served after it all");
    assert_back_to(&d, base, "after the bad requests");
}

#[test]
fn a_request_cut_short_times_out_with_an_explanation() {
    let _heavy = heavy();
    let d = Daemon::start(&["--timeout", "1"]);
    let known = Known::refs(&d);
    good_client(&d, &known).expect("a first dump");
    let base = settle(&d);

    // Part of a request, then silence.
    let mut s = connect(&d);
    let req = Request::new(Strategy::All, 0, base_cred()).to_bytes();
    let t0 = Instant::now();
    s.write_all(&req[..20]).expect("write");
    let resp = read_response(&mut s).expect("the timeout's answer");
    let took = t0.elapsed();
    let text = expect_refusal(
        &resp,
        libc::EINVAL,
        &["truncated request: 20 of 32 bytes arrived before the timeout"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("silence: {text:?} after {took:?}");
    assert!(
        took >= secs(0.8) && took < secs(5.0),
        "answered after {took:?}"
    );
    assert!(read_to_close(&mut s).expect("closed").is_empty());

    // A request dripped a byte at a time, each within the timeout but the whole far beyond
    // it: the timeout bounds the request, not each read.
    let mut s = connect(&d);
    let mut w = s.try_clone().expect("clone");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let t0 = Instant::now();
    let dripper = std::thread::spawn(move || {
        for b in req {
            if stop2.load(Ordering::Relaxed) || w.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(secs(0.3));
        }
    });
    let resp = read_response(&mut s);
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    dripper.join().expect("dripper");
    let resp = resp.expect("an answer to the dripped request");
    let text = expect_refusal(&resp, libc::EINVAL, &["before the timeout"])
        .unwrap_or_else(|e| panic!("a request dripped over {took:?} with --timeout 1: {e}"));
    println!("drip: {text:?} after {took:?}");
    assert!(took < secs(3.0), "answered after {took:?}");

    // Idle connections (no request started) are closed after the timeout, quietly.
    let mut s = connect(&d);
    let t0 = Instant::now();
    assert!(read_to_close(&mut s).expect("closed").is_empty());
    let took = t0.elapsed();
    assert!(
        took >= secs(0.8) && took < secs(5.0),
        "idle closed after {took:?}"
    );
    good_client(&d, &known).expect("served after it all");
    assert_back_to(&d, base, "after the timeouts");
}

#[test]
fn bad_clients_hammering_do_not_disturb_a_good_one() {
    let _heavy = heavy();
    let d = Daemon::start(&[]);
    let known = Known::refs(&d);
    good_client(&d, &known).expect("a first dump");
    let base = settle(&d);
    let run_for = secs(5.0);
    let t0 = Instant::now();
    let d = Arc::new(d);
    let bad: Vec<_> = (0..3u64)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || -> Result<usize, String> {
                let cases = bad_requests();
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i + 1));
                let mut n = 0;
                while t0.elapsed() < run_for {
                    for b in &cases {
                        run_bad(&d, b)?;
                        n += 1;
                    }
                    run_truncated(&d, 1 + rng.below(31) as usize)?;
                    run_truncated_close(&d);
                    for _ in 0..10 {
                        run_garbage(&d, &garbage(&mut rng))?;
                    }
                    n += 12;
                }
                Ok(n)
            })
        })
        .collect();
    let good = {
        let (d, known) = (d.clone(), known.clone());
        std::thread::spawn(move || -> Result<(usize, Duration), String> {
            let mut c = DaemonClient::connect(&d.socket).map_err(|e| e.to_string())?;
            let (mut n, mut worst) = (0, Duration::ZERO);
            while t0.elapsed() < run_for {
                let t = Instant::now();
                if n % 4 == 3 {
                    good_client(&d, &known)?;
                } else {
                    good_dump(&mut c, &known)?;
                }
                worst = worst.max(t.elapsed());
                n += 1;
            }
            Ok((n, worst))
        })
    };
    let mut bad_n = 0;
    for h in bad {
        bad_n += h
            .join()
            .expect("bad client")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let (good_n, worst) = good
        .join()
        .expect("good client")
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{bad_n} bad requests and {good_n} good dumps (slowest {worst:?}) in {run_for:?}");
    assert!(bad_n >= 100, "only {bad_n} bad requests");
    assert!(good_n >= 20, "only {good_n} good dumps");
    assert!(worst < secs(5.0), "a good dump took {worst:?}");
    assert_back_to(&d, base, "after the hammering");
}

// ---------------------------------------------------------------------------------------------
// 2. Many requests, many connections
// ---------------------------------------------------------------------------------------------

#[test]
fn many_requests_on_one_connection() {
    let d = Daemon::start(&[]);
    let known = Known::refs(&d);
    let mut c = DaemonClient::connect(&d.socket).expect("connect");
    let tid = {
        // A thread of ours that lives through the test, for THREAD.
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() as u32 }
    };
    let requests = [
        Request::new(Strategy::All, 0, base_cred()),
        Request::new(Strategy::All, 0, SERVED),
        Request::new(Strategy::One, me(), SERVED),
        Request::new(Strategy::One, tid, Group::Base.flag()),
        Request::new(Strategy::AllThread, 0, Group::Base.flag()),
        Request::new(Strategy::Thread, me(), base_cred()),
        Request::new(Strategy::Children, me(), base_cred()),
        Request::new(Strategy::One, tasks::missing_pid(), base_cred()),
        Request::all_with_threads(Group::Base.flag(), base_cred()),
    ];
    let t0 = Instant::now();
    let rounds = 40;
    for i in 0..rounds {
        for req in &requests {
            let mut buf = Vec::new();
            let r = c.dump(req, &mut |b| {
                buf.extend_from_slice(b);
                Ok(())
            });
            let what = format!("round {i}, {req:?}");
            if req.pid == tasks::missing_pid() {
                assert!(
                    matches!(r, Err(taskdiag::Error::NoSuchTask { .. })),
                    "{what}: {r:?}"
                );
                let ev = StreamDecoder::decode_all(&buf).expect("decode");
                assert!(matches!(ev.last(), Some(Event::Done(d)) if d.error == -libc::ESRCH));
                continue;
            }
            let n = r.unwrap_or_else(|e| panic!("{what}: {e}"));
            let tasks = check_stream(&buf, req).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(n, tasks.len() as u64, "{what}");
            let pids: Vec<u32> = tasks.iter().map(|t| t.pid).collect();
            match Strategy::from_u32(req.strategy).expect("strategy") {
                Strategy::All => {
                    check_all(&tasks, &known).unwrap_or_else(|e| panic!("{what}: {e}"))
                }
                Strategy::One => assert_eq!(pids, [req.pid], "{what}"),
                Strategy::AllThread => {
                    assert!(pids.contains(&tid) && pids.contains(&me()), "{what}")
                }
                Strategy::Thread => {
                    assert!(pids.contains(&tid), "{what}");
                    assert!(tasks.iter().all(|t| t.tgid == me()), "{what}");
                }
                Strategy::AllWithThreads => {
                    // Our thread's record, and our process's own (flagged) beside our
                    // leader's.
                    assert!(pids.contains(&tid), "{what}");
                    let ours: Vec<bool> = tasks
                        .iter()
                        .filter(|t| t.pid == me())
                        .map(|t| t.process)
                        .collect();
                    assert_eq!(ours.len(), 2, "{what}: {ours:?}");
                    assert!(ours.contains(&true) && ours.contains(&false), "{what}");
                    assert!(
                        tasks.iter().all(|t| !t.process || t.pid == t.tgid),
                        "{what}"
                    );
                }
                Strategy::Children => {
                    assert!(pids.contains(&d.pid()), "{what}: the daemon is our child");
                    known[1]
                        .check(&tasks)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                }
            }
        }
    }
    println!(
        "{} requests on one connection in {:?}",
        rounds * requests.len(),
        t0.elapsed()
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let d = Daemon::start(&[]);
    let known = Known::refs(&d);
    let mut s = connect(&d);
    let reqs: Vec<Request> = (0..64)
        .map(|i| match i % 3 {
            0 => Request::new(Strategy::All, 0, base_cred()),
            1 => Request::new(Strategy::One, me(), SERVED),
            _ => Request::new(Strategy::Children, me(), Group::Base.flag()),
        })
        .collect();
    let bytes: Vec<u8> = reqs.iter().flat_map(|r| r.to_bytes()).collect();
    s.write_all(&bytes).expect("64 requests in one write");
    // Half-closed: the requests sent are still answered, then the daemon hangs up.
    s.shutdown(Shutdown::Write).expect("shutdown");
    for (i, req) in reqs.iter().enumerate() {
        let resp = read_response(&mut s).unwrap_or_else(|e| panic!("response {i}: {e}"));
        let tasks = check_stream(&resp, req).unwrap_or_else(|e| panic!("response {i}: {e}"));
        match i % 3 {
            0 => check_all(&tasks, &known).unwrap_or_else(|e| panic!("response {i}: {e}")),
            1 => assert!(tasks.len() == 1 && tasks[0].pid == me(), "response {i}"),
            _ => assert!(tasks.iter().any(|t| t.pid == d.pid()), "response {i}"),
        }
    }
    assert!(read_to_close(&mut s).expect("the end").is_empty());
}

#[test]
fn many_concurrent_connections() {
    let d = Arc::new(Daemon::start(&[]));
    let known = Known::refs(&d);
    good_client(&d, &known).expect("a first dump");
    let base = settle(&d);
    let n = 48;
    let barrier = Arc::new(Barrier::new(n));
    let t0 = Instant::now();
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let (d, known, barrier) = (d.clone(), known.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<usize, String> {
                let mut c = DaemonClient::connect(&d.socket).map_err(|e| e.to_string())?;
                barrier.wait();
                for _ in 0..10 {
                    good_dump(&mut c, &known)?;
                }
                Ok(10)
            })
        })
        .collect();
    let total: usize = hs
        .into_iter()
        .map(|h| h.join().expect("client").unwrap_or_else(|e| panic!("{e}")))
        .sum();
    println!("{n} connections, {total} dumps in {:?}", t0.elapsed());
    assert_eq!(total, n * 10);
    assert_back_to(&d, base, "after the connections closed");
}

// ---------------------------------------------------------------------------------------------
// 3. Clients that stop reading
// ---------------------------------------------------------------------------------------------

/// How what a stalled client read ends, after its whole responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// Nothing more.
    Nothing,
    /// Part of a response.
    Partial,
    /// A response the daemon ended early with DONE(-errno) and an explanation: cut at a
    /// message boundary (the request's deadline passed, or it gave its worker up), or a lone
    /// DONE (no worker came free before the deadline).
    Cut(i32),
}

/// Splits what a stalled client finally read into whole responses; returns how many are whole
/// and checked, and what follows them.
fn whole_responses(all: &[u8], req: &Request) -> Result<(usize, Tail), String> {
    let mut pos = 0;
    let mut n = 0;
    while pos < all.len() {
        let mut end = pos;
        let mut done = false;
        while end + MsgHeader::SIZE <= all.len() {
            let h = MsgHeader::read_from(&all[end..]).expect("header");
            if end + h.len as usize > all.len() {
                break;
            }
            end += h.len as usize;
            if h.msg_type == MsgType::Done as u16 {
                done = true;
                break;
            }
        }
        if !done {
            return Ok((n, Tail::Partial));
        }
        if let Err(e) = check_stream(&all[pos..end], req) {
            return match cut(&all[pos..end]) {
                Some(errno) if end == all.len() => Ok((n, Tail::Cut(errno))),
                _ => Err(format!("response {n}: {e}")),
            };
        }
        n += 1;
        pos = end;
    }
    Ok((n, Tail::Nothing))
}

/// If `resp` (whole messages through a DONE) is a response the daemon ended early: the errno of
/// its DONE, which must be ETIMEDOUT or ENOBUFS and explained.
fn cut(resp: &[u8]) -> Option<i32> {
    let msgs: Vec<_> = Messages::new(resp).collect::<Result<_, _>>().ok()?;
    let last = msgs.last()?;
    let d = Done::read_from(last.payload)?;
    let text = done_text(last)?;
    (last.msg_type() == Some(MsgType::Done)
        && matches!(-d.error, libc::ETIMEDOUT | libc::ENOBUFS)
        && (text.contains("response cut") || text.contains("no worker came free")))
    .then_some(-d.error)
}

/// Runs `req` from `clients` concurrent connections, `rounds` times each, checking every
/// response: what the daemon allocates for such requests (program sets' buffers, allocator
/// arenas of the connection threads) is then in place before a measurement. Returns the
/// daemon's highest VmRSS meanwhile: what answering such requests takes when clients read
/// (each dump maps its program set's 4 MiB ring buffer, twice, and copies chunks of it).
fn warm(d: &Arc<Daemon>, req: Request, clients: usize, rounds: usize) -> u64 {
    let sampler = RssSampler::start(d.pid());
    let hs: Vec<_> = (0..clients)
        .map(|_| {
            let d = d.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let mut c = DaemonClient::connect(&d.socket).map_err(|e| e.to_string())?;
                for _ in 0..rounds {
                    let (_, b) = collect(&mut c, &req).map_err(|e| e.to_string())?;
                    check_stream(&b, &req)?;
                }
                Ok(())
            })
        })
        .collect();
    for h in hs {
        h.join()
            .expect("warm-up client")
            .unwrap_or_else(|e| panic!("warm-up: {e}"));
    }
    sampler.finish()
}

/// What stalled clients may add to the daemon's memory beyond `working` (its peak answering
/// the same requests for clients that read): the buffer budget (twice, for a growing vector's
/// spare capacity) and 4 MiB for their threads and the allocator.
fn stall_bound(working: u64, budget_mib: u64) -> u64 {
    working + 2 * budget_mib * 1024 + 4 * 1024
}

/// With `stalled` clients not reading their answers since `t0`: after `wait` seconds, a
/// well-behaved client is served; then, within `limit` seconds, the stalled ones are dropped
/// (the daemon's descriptors back to `idle_fds`). Returns how long the good client took, when
/// (since `t0`) it was served, and when the last stalled client was gone.
fn served_then_dropped(
    d: &Daemon,
    known: &[Known],
    idle_fds: usize,
    t0: Instant,
    wait: f64,
    limit: f64,
    stalled: &str,
) -> (Duration, Duration, Duration) {
    std::thread::sleep(secs(wait));
    let t = Instant::now();
    good_client(d, known).unwrap_or_else(|e| panic!("not served while {stalled} stall: {e}"));
    let (served, served_at) = (t.elapsed(), t0.elapsed());
    assert!(
        wait_until(secs(limit), || fds(d) == idle_fds),
        "{stalled} not dropped: {} descriptors, {idle_fds} when idle",
        fds(d)
    );
    (served, served_at, t0.elapsed())
}

#[test]
fn a_stalled_reader_is_dropped_after_the_timeout_while_others_are_served() {
    let _heavy = heavy();
    let d = Arc::new(Daemon::start(&["--buffer-limit", "1", "--timeout", "2"]));
    let known = Known::refs(&d);
    // Answers of a fixed size, a fair part of what the socket holds: a process with a 16 KB
    // command line. (The whole system's answer grows with whatever else runs on the machine,
    // until not one fits before the daemon must cut.)
    let big = Spawned::spawn(
        Command::new(PYTHON)
            .args(["-c", "import time; time.sleep(1000)", &"x".repeat(16 << 10)])
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    );
    wait_exec(big.pid(), "python3");
    let req = Request::new(Strategy::One, big.pid(), SERVED);
    // The good client's ALL dumps map their program set's ring buffer: the working set is
    // the larger of the two.
    let working =
        warm(&d, req, 4, 4).max(warm(&d, Request::new(Strategy::All, 0, base_cred()), 2, 2));
    good_client(&d, &known).expect("a first dump");
    let base = settle(&d);
    let rss0 = d.status_kb("VmRSS");
    let sampler = RssSampler::start(d.pid());

    let mut stalled = connect(&d);
    // Far more than the socket holds: a daemon that buffered every response for it would
    // hold 2,000 of them (tens of MB).
    let n = 2000;
    let bytes: Vec<u8> = (0..n).flat_map(|_| req.to_bytes()).collect();
    let t0 = Instant::now();
    stalled.write_all(&bytes).expect("requests");
    // The daemon is now writing to a client that does not read. Others are served meanwhile;
    // after the timeout it is dropped.
    let (served, served_at, dropped_at) =
        served_then_dropped(&d, &known, base.0, t0, 0.3, 20.0, "the stalled client");
    let peak = sampler.finish();
    println!(
        "stalled reader: another client served in {served:?} at {served_at:?}, the stalled one \
         dropped at {dropped_at:?}; daemon VmRSS {rss0} kB idle, {working} kB at most with \
         clients that read, {peak} kB at most with the stalled one"
    );
    assert!(
        served_at < dropped_at,
        "the good client was served only after the stalled one was dropped"
    );
    assert!(
        dropped_at >= secs(1.5) && dropped_at < secs(15.0),
        "dropped after {dropped_at:?} with --timeout 2"
    );
    assert!(
        peak < stall_bound(working, 1),
        "daemon VmRSS reached {peak} kB with a 1 MiB budget ({working} kB for clients that read)"
    );
    // What it gets when it reads at last: whole responses, then the end.
    let all = read_to_close(&mut stalled).expect("the end");
    let (whole, _) = whole_responses(&all, &req).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "the stalled client then read {} bytes: {whole} whole responses",
        all.len()
    );
    assert!((1..100).contains(&whole), "{whole} whole responses of {n}");
    assert_back_to(&d, base, "after the stalled client");
    good_client(&d, &known).expect("served after");
}

/// Idle threads of this process, to make per-thread responses big; released on drop.
struct ExtraThreads {
    release: Arc<(Mutex<bool>, Condvar)>,
    handles: Vec<JoinHandle<()>>,
}

impl ExtraThreads {
    fn spawn(n: usize) -> ExtraThreads {
        let release = Arc::new((Mutex::new(false), Condvar::new()));
        let handles = (0..n)
            .map(|_| {
                let r = release.clone();
                std::thread::Builder::new()
                    .stack_size(64 << 10)
                    .spawn(move || {
                        let (m, cv) = &*r;
                        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
                        while !*g {
                            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
                        }
                    })
                    .expect("spawn an idle thread")
            })
            .collect();
        ExtraThreads { release, handles }
    }
}

impl Drop for ExtraThreads {
    fn drop(&mut self) {
        *self.release.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.release.1.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[test]
fn stalled_readers_are_held_within_the_buffer_budget() {
    let _heavy = heavy();
    // All of this test's clients are one uid, which holds all workers but one: three workers
    // let it run two dumps at once, as the warm-up's deadlines need on a loaded machine; and
    // its good client waits for its own uid's stalled dumps (their deadline) rather than being
    // answered busy.
    let d = Arc::new(Daemon::start(&[
        "--buffer-limit",
        "1",
        "--timeout",
        "2",
        "--workers",
        "3",
        "--busy-wait",
        "60000",
    ]));
    let known = Known::refs(&d);
    let _threads = ExtraThreads::spawn(6000);
    // Every thread of this process, every group: about 3 MB per response.
    let req = Request::new(Strategy::Thread, me(), SERVED);
    let size = {
        let mut c = DaemonClient::connect(&d.socket).expect("connect");
        let (_, b) = collect(&mut c, &req).expect("a thread dump");
        let tasks = check_stream(&b, &req).expect("a thread dump");
        assert!(tasks.len() > 6000, "{} threads", tasks.len());
        b.len()
    };
    let stalled_n = 8;
    good_client(&d, &known).expect("a first dump");
    settle(&d);
    let fresh = d.status_kb("VmRSS");
    // THREAD walks read through the seq file; the good client's ALL dumps map their program
    // set's ring buffer (8 MiB of RSS while mapped): the working set is the larger.
    let working = warm(&d, req, stalled_n, 2).max(warm(
        &d,
        Request::new(Strategy::All, 0, base_cred()),
        2,
        2,
    ));
    let base = settle(&d);
    let rss0 = d.status_kb("VmRSS");
    // What those big dumps allocated went back to the system.
    assert!(
        rss0 < fresh + 8 * 1024,
        "daemon VmRSS {fresh} kB before {} dumps of {size} bytes, {rss0} kB idle after",
        2 * stalled_n
    );
    let sampler = RssSampler::start(d.pid());
    let t0 = Instant::now();
    let mut stalled: Vec<UnixStream> = (0..stalled_n)
        .map(|_| {
            let mut s = connect(&d);
            s.write_all(&[req.to_bytes(), req.to_bytes()].concat())
                .expect("requests");
            s
        })
        .collect();
    // A well-behaved client waits at most for a dumper to come free.
    let (served, _, dropped) =
        served_then_dropped(&d, &known, base.0, t0, 0.5, 60.0, "stalled clients");
    let peak = sampler.finish();
    println!(
        "{stalled_n} stalled readers of {size}-byte responses: all dropped after {dropped:?}; \
         a good client served in {served:?}; daemon VmRSS {rss0} kB idle, {working} kB at most \
         with clients that read, {peak} kB at most with the stalled ones"
    );
    // Unbounded, the daemon would hold every stalled response: stalled_n * size bytes.
    assert!(
        size * stalled_n > 20 << 20,
        "responses too small to tell: {size}"
    );
    assert!(
        peak < stall_bound(working, 1),
        "daemon VmRSS reached {peak} kB with a 1 MiB budget ({working} kB for clients that read)"
    );
    assert!(served < secs(15.0), "a good client waited {served:?}");
    for s in &mut stalled {
        let all = read_to_close(s).expect("the end");
        // Nothing whole beyond what the socket holds: the first response is bigger than it.
        let (whole, tail) = whole_responses(&all, &req).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            whole == 0 && tail != Tail::Nothing,
            "{whole} whole responses, then {tail:?}"
        );
    }
    assert_back_to(&d, base, "after the stalled clients");
    good_client(&d, &known).expect("served after");
}

// ---------------------------------------------------------------------------------------------
// 4. Clients that vanish
// ---------------------------------------------------------------------------------------------

#[test]
fn clients_vanishing_mid_stream_are_cleaned_up() {
    let _heavy = heavy();
    let d = Arc::new(Daemon::start(&[]));
    let known = Known::refs(&d);
    good_client(&d, &known).expect("a first dump");
    let base = settle(&d);
    fn vanish(d: &Daemon, i: usize) {
        let req = Request::new(Strategy::All, 0, SERVED).to_bytes();
        let mut s = connect(d);
        s.write_all(&[req, req, req].concat()).expect("requests");
        let mut b = vec![0u8; 1 + (i * 37) % 400];
        let _ = s.read(&mut b);
        if i.is_multiple_of(2) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
    for i in 0..50 {
        vanish(&d, i);
    }
    assert_back_to(&d, base, "after 50 vanished clients");
    let rss50 = d.status_kb("VmRSS");
    let hs: Vec<_> = (0..4)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    vanish(&d, t * 1000 + i);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().expect("vanishing clients");
    }
    for i in 0..50 {
        vanish(&d, i);
    }
    assert_back_to(&d, base, "after 500 vanished clients");
    let rss500 = d.status_kb("VmRSS");
    println!("vanished clients: daemon VmRSS {rss50} kB after 50, {rss500} kB after 500");
    assert!(
        rss500 < rss50 + 4 * 1024,
        "daemon RSS grew from {rss50} kB to {rss500} kB over 450 vanished clients"
    );
    good_client(&d, &known).expect("served after");
}

// ---------------------------------------------------------------------------------------------
// 5. Limits
// ---------------------------------------------------------------------------------------------

/// A connection the daemon has admitted (it answered a request on it). Tried for a while: a
/// connection that just closed (Daemon::start's readiness probe, say) counts until the daemon
/// has seen it close.
fn admitted(d: &Daemon, known: &[Known]) -> DaemonClient {
    let mut last = String::new();
    for _ in 0..200 {
        let mut c = DaemonClient::connect(&d.socket).expect("connect");
        match good_dump(&mut c, known) {
            Ok(_) => return c,
            Err(e) => last = e,
        }
        std::thread::sleep(secs(0.05));
    }
    panic!("no connection admitted in 10 s: {last}");
}

/// A refused connection's answer, read before sending anything.
fn refused_raw(d: &Daemon, words: &[&str]) -> String {
    let mut s = connect(d);
    let resp = read_response(&mut s).expect("a refusal");
    let text = expect_refusal(&resp, libc::EAGAIN, words).unwrap_or_else(|e| panic!("{e}"));
    assert!(read_to_close(&mut s).expect("closed").is_empty());
    text
}

/// A refused connection through the library client, which sends its request only after the
/// daemon has hung up: it must still report the daemon's explanation.
fn refused_client(d: &Daemon, words: &[&str]) {
    let mut c = DaemonClient::connect(&d.socket).expect("connect");
    std::thread::sleep(secs(0.3));
    match collect(&mut c, &Request::new(Strategy::All, 0, base_cred())) {
        Err(taskdiag::Error::Refused { errno, message, .. }) => {
            assert_eq!(errno, libc::EAGAIN, "{message}");
            for w in words {
                assert!(message.contains(w), "{message:?} does not say {w:?}");
            }
        }
        other => panic!("a refused client got {:?}", other.map(|(n, _)| n)),
    }
}

#[test]
fn connections_over_the_per_uid_limit_are_refused_with_a_message() {
    let d = Daemon::start(&["--max-clients-per-uid", "2"]);
    let known = Known::refs(&d);
    let a = admitted(&d, &known);
    let mut b = admitted(&d, &known);
    let text = refused_raw(&d, &["too many connections from uid 0", "the limit is 2"]);
    println!("per-uid limit: {text:?}");
    refused_client(&d, &["too many connections from uid 0"]);
    // Another uid is not affected.
    let o = output(as_user(USER, cli()).args(d.dump_args(&["--groups", "base,cred"])));
    assert!(
        o.status.success(),
        "{USER} refused while root is at its limit: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("pid {} ", d.pid())));
    // The admitted ones still work; one leaves and a new one gets in.
    good_dump(&mut b, &known).expect("admitted connection");
    drop(a);
    assert!(
        admitted_again(&d, &known),
        "no room after a connection closed"
    );
}

/// Whether a new connection is admitted and answered correctly within 10 s (room was made).
fn admitted_again(d: &Daemon, known: &[Known]) -> bool {
    wait_until(secs(10.0), || {
        let mut c = DaemonClient::connect(&d.socket).expect("connect");
        good_dump(&mut c, known).is_ok()
    })
}

/// A connection the daemon admitted and identified (it answered a request on it), now in the
/// middle of its next request: not idle, so never closed to make room. Returns it and the rest
/// of that request.
fn busy(d: &Daemon) -> (UnixStream, Vec<u8>) {
    let req = Request::new(Strategy::One, me(), base_cred());
    for _ in 0..200 {
        let mut s = connect(d);
        s.write_all(&req.to_bytes()).expect("a request");
        match read_response(&mut s) {
            Ok(r) if check_stream(&r, &req).is_ok() => {
                let b = req.to_bytes();
                s.write_all(&b[..10]).expect("half a request");
                return (s, b[10..].to_vec());
            }
            // A connection that just closed (Daemon::start's probe) counts until the daemon
            // has seen it close.
            _ => std::thread::sleep(secs(0.05)),
        }
    }
    panic!("no connection admitted in 10 s");
}

#[test]
fn over_the_total_limit_an_idle_connection_makes_room_and_newcomers_have_a_reserve() {
    // 8 connections: 7 for everyone, the 8th only for a uid that holds none.
    let d = Daemon::start(&["--max-clients", "8"]);
    let known = Known::refs(&d);
    let mut held: Vec<_> = (0..7).map(|_| busy(&d)).collect();
    let text = refused_raw(
        &d,
        &[
            "too many clients",
            "7 connections open",
            "the limit is 8",
            "none idle",
        ],
    );
    println!("total limit: {text:?}");
    refused_client(&d, &["too many clients"]);
    // Another uid, holding no connection, gets in: the part kept for newcomers.
    let o = output(as_user(USER, cli()).args(d.dump_args(&["--groups", "base,cred"])));
    assert!(
        o.status.success(),
        "{USER} refused while root holds 7 of 8 connections: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // One of root's connections finishes its request and is idle: the next connection closes
    // it to make room, and it is told why.
    let (mut idle, rest) = held.remove(0);
    idle.write_all(&rest).expect("the rest of the request");
    let r = read_response(&mut idle).expect("an answer");
    check_stream(&r, &Request::new(Strategy::One, me(), base_cred())).expect("the answer");
    // The worker hands the connection back to the event loop just after the answer's last
    // byte: until then it is not idle yet, and a newcomer is refused.
    let mut tries = 0;
    let c = loop {
        let mut c = DaemonClient::connect(&d.socket).expect("connect");
        match good_dump(&mut c, &known) {
            Ok(_) => break c,
            Err(e) if e.contains("none idle") && tries < 100 => {
                tries += 1;
                std::thread::sleep(secs(0.02));
            }
            Err(e) => panic!("served by making room: {e}"),
        }
    };
    let gone = read_to_close(&mut idle).expect("closed");
    let text = expect_refusal(
        &gone,
        libc::EAGAIN,
        &[
            "too many clients",
            "idle connection was closed to make room",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("made room: {text:?}");
    drop(held);
    drop(c);
    assert!(
        admitted_again(&d, &known),
        "no room after the connections closed"
    );
}

#[test]
fn requests_over_the_per_uid_limit_wait_their_turn() {
    let d = Arc::new(Daemon::start(&["--max-requests-per-uid", "1"]));
    let known = Known::refs(&d);
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let t0 = Instant::now();
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let (d, known, barrier) = (d.clone(), known.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<usize, String> {
                let mut c = DaemonClient::connect(&d.socket).map_err(|e| e.to_string())?;
                barrier.wait();
                (0..5).try_for_each(|_| good_dump(&mut c, &known).map(drop))?;
                Ok(5)
            })
        })
        .collect();
    let done: usize = hs
        .into_iter()
        .map(|h| h.join().expect("client").unwrap_or_else(|e| panic!("{e}")))
        .sum();
    println!(
        "{n} concurrent clients of one uid, one request at a time: {done} dumps in {:?}",
        t0.elapsed()
    );
    assert_eq!(done, n * 5);
}

// ---------------------------------------------------------------------------------------------
// 6. Load
// ---------------------------------------------------------------------------------------------

/// Raises this process's descriptor limit (the daemon inherits it) to at least `want`.
fn raise_nofile(want: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
    assert!(r.rlim_cur >= want, "RLIMIT_NOFILE {} < {want}", r.rlim_cur);
}

#[test]
fn a_thousand_concurrent_clients() {
    let _heavy = heavy();
    const CLIENTS: usize = 1000;
    raise_nofile(4 * CLIENTS as u64 + 256);
    let d = Arc::new(Daemon::start(&["--max-clients-per-uid", "1000"]));
    let known = Known::refs(&d);
    // Both program sets attach their whole-walk link now, not during the measurement.
    warm(&d, Request::new(Strategy::All, 0, base_cred()), 8, 4);
    let (fds0, threads0) = settle(&d);
    let total0 = fd_counts(&d).0;
    let hwm0 = d.status_kb("VmHWM");
    let barrier = Arc::new(Barrier::new(CLIENTS + 1));
    let t0 = Instant::now();
    let hs: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (d, known, barrier) = (d.clone(), known.clone(), barrier.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || -> Result<(usize, Duration), String> {
                    // A thousand requests of one uid share all workers but one: the last
                    // waits longer than a client's default deadline on a loaded machine.
                    let c = DaemonClient::connect_with(&d.socket, Some(secs(60.0)));
                    barrier.wait();
                    let mut c = c.map_err(|e| format!("client {i}: {e}"))?;
                    let t = Instant::now();
                    let n = good_dump(&mut c, &known).map_err(|e| format!("client {i}: {e}"))?;
                    Ok((n, t.elapsed()))
                })
                .expect("spawn a client thread")
        })
        .collect();
    barrier.wait();
    let connected = t0.elapsed();
    let open_now = fd_counts(&d).0;
    let threads_now = threads(&d);
    let results: Vec<_> = hs
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .collect();
    let wall = t0.elapsed();
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let hwm = d.status_kb("VmHWM");
    let peak_threads = threads(&d);
    assert!(
        failures.is_empty(),
        "{} of {CLIENTS} clients failed, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let mut lat: Vec<Duration> = results.iter().flatten().map(|r| r.1).collect();
    lat.sort();
    let tasks: Vec<usize> = results.iter().flatten().map(|r| r.0).collect();
    assert_back_to(&d, (fds0, threads0), "after 1000 clients");
    let total1 = fd_counts(&d).0;
    assert_eq!(
        total1,
        total0,
        "daemon descriptors before and after\n{}",
        describe(&d)
    );
    println!(
        "load: {CLIENTS} concurrent clients (ALL, base+cred, {}..{} tasks each): all connected \
         after {connected:?}, all answered after {wall:?} (latency median {:?}, max {:?}); \
         daemon descriptors {total0} idle ({fds0} not BPF links), {open_now} with the clients \
         connected, {total1} after ({} not BPF links); \
         threads {threads0} idle, {threads_now} with the clients connected, {peak_threads} at the \
         end; VmHWM {hwm0} kB before, {hwm} kB ({:.1} MiB) after",
        tasks.iter().min().expect("tasks"),
        tasks.iter().max().expect("tasks"),
        lat[lat.len() / 2],
        lat[lat.len() - 1],
        fds(&d),
        hwm as f64 / 1024.0
    );
    assert!(hwm < 256 * 1024, "daemon VmHWM {hwm} kB over 1000 clients");
    // Threads do not grow with connections (a VMA walk would add one; none here).
    assert!(
        threads_now <= threads0 && peak_threads <= threads0,
        "daemon threads: {threads0} idle, {threads_now} with {CLIENTS} clients connected"
    );
    assert!(wall < secs(60.0), "1000 clients took {wall:?}");
    good_client(&d, &known).expect("served after");
}

// ---------------------------------------------------------------------------------------------
// 7. Socket activation
// ---------------------------------------------------------------------------------------------

#[test]
fn socket_activation_serves_and_leaves_the_path_alone() {
    let dir = TempDir::new("activation");
    let path = dir.join("activated.sock");
    let own = dir.join("own.sock");
    let mut sa = Spawned::spawn(
        Command::new("/usr/bin/systemd-socket-activate")
            .arg("-l")
            .arg(&path)
            .arg(DAEMON)
            .args(["--foreground", "--socket"])
            .arg(&own)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let pid = sa.pid();
    assert!(
        wait_until(secs(10.0), || path.exists()),
        "systemd-socket-activate did not listen"
    );
    let ino = std::fs::metadata(&path).expect("socket").ino();
    // The first connection starts the daemon (in place of systemd-socket-activate).
    let mut c = DaemonClient::connect(&path).expect("connect");
    let n = good_dump(&mut c, &[Known::of(me()), Known::of(1)]).expect("activated daemon");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    assert_eq!(comm.trim(), "taskdiagd");
    let known = [Known::of(me()), Known::of(pid), Known::of(1)];
    good_dump(&mut c, &known).expect("a second request");
    good_dump(&mut DaemonClient::connect(&path).expect("connect"), &known)
        .expect("another connection");
    assert!(
        !own.exists(),
        "the activated daemon created --socket {own:?}"
    );
    assert_eq!(
        std::fs::metadata(&path).expect("socket").ino(),
        ino,
        "the socket was replaced"
    );
    drop(c);
    signal(pid, libc::SIGTERM);
    let st = sa
        .wait_exit(secs(10.0))
        .expect("the daemon did not stop on SIGTERM");
    assert_eq!(st.code(), Some(0), "{st:?}");
    assert!(
        path.exists(),
        "the activated daemon removed the socket systemd owns"
    );
    assert_eq!(std::fs::metadata(&path).expect("socket").ino(), ino);
    assert!(!own.exists());
    println!("socket activation: {n} tasks via an activated daemon, pid {pid}");
}

// ---------------------------------------------------------------------------------------------
// 8. The tools through the daemon, as an unprivileged user
// ---------------------------------------------------------------------------------------------

/// One run of a tool as [`USER`]: its pid and standard output.
struct ToolRun {
    pid: u32,
    out: String,
}

fn tool(args: &[&str], backend: &str, socket: &Path) -> ToolRun {
    let mut c = as_user(USER, cli());
    c.args(args)
        .env("TASKDIAG_BACKEND", backend)
        .env("TASKDIAG_SOCKET", socket)
        .env("COLUMNS", "100000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().expect("run a tool");
    let pid = child.id();
    let o = child.wait_with_output().expect("tool output");
    assert!(
        o.status.success(),
        "{args:?} with {backend}: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    ToolRun {
        pid,
        out: String::from_utf8(o.stdout).expect("UTF-8 output"),
    }
}

/// Output items keyed by the pid they describe.
type Items = Vec<(u32, String)>;

/// Compares the daemon's output with the same tool on procfs run just before and just after,
/// tolerating the tools' own processes and processes that came or went in between: every item
/// present in both procfs runs must be in the daemon's, in the same order if `ordered`; every
/// item of the daemon's output about a pid the procfs runs saw must be one of their items.
fn compare(
    what: &str,
    got: &Items,
    before: &Items,
    after: &Items,
    skip: &[u32],
    ordered: bool,
) -> Result<(), String> {
    let keep = |v: &Items| -> Vec<(u32, String)> {
        v.iter()
            .filter(|(p, _)| !skip.contains(p))
            .cloned()
            .collect()
    };
    let (got, before, after) = (keep(got), keep(before), keep(after));
    let in_after: HashSet<&(u32, String)> = after.iter().collect();
    let stable: Vec<&(u32, String)> = before.iter().filter(|i| in_after.contains(i)).collect();
    let got_set: HashSet<&(u32, String)> = got.iter().collect();
    let missing: Vec<_> = stable.iter().filter(|i| !got_set.contains(*i)).collect();
    let mut seen: HashMap<u32, Vec<&String>> = HashMap::new();
    for (p, s) in before.iter().chain(after.iter()) {
        seen.entry(*p).or_default().push(s);
    }
    let wrong: Vec<_> = got
        .iter()
        .filter(|(p, s)| seen.get(p).is_some_and(|v| !v.contains(&s)))
        .collect();
    let mut err = String::new();
    if !missing.is_empty() {
        err += &format!("{what}: missing through the daemon: {missing:#?}\n");
    }
    if !wrong.is_empty() {
        err += &format!("{what}: different through the daemon: {wrong:#?}\n");
    }
    if ordered && err.is_empty() {
        let stable_set: HashSet<&(u32, String)> = stable.iter().copied().collect();
        let order: Vec<&(u32, String)> = got.iter().filter(|i| stable_set.contains(i)).collect();
        if order != stable {
            err += &format!("{what}: the daemon's output is in another order\n");
        }
    }
    if stable.len() < 3 {
        err += &format!("{what}: only {} stable items to compare\n", stable.len());
    }
    if err.is_empty() {
        Ok(())
    } else {
        Err(err)
    }
}

fn pid_of(field: &str) -> u32 {
    field.parse().unwrap_or(0)
}

/// ps and pgrep: one line per process, the pid first.
fn lines(out: &str) -> Items {
    out.lines()
        .map(|l| {
            (
                pid_of(l.split_whitespace().next().unwrap_or("")),
                l.to_string(),
            )
        })
        .collect()
}

/// pstree -p: every `name(pid)` (or `{name}(tid)`) with the column it starts at, which is its
/// depth in the tree.
fn tree_items(out: &str) -> Items {
    let mut v = Vec::new();
    for line in out.lines() {
        let chars: Vec<char> = line.chars().collect();
        let mut start = 0;
        let mut i = 0;
        while i < chars.len() {
            // Connectors: "---", "-+-", "|-", "`-" and the spaces of the indentation.
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            if rest == "---" || rest == "-+-" {
                i += 3;
                start = i;
                continue;
            }
            if (rest.starts_with("|-") || rest.starts_with("`-")) && start == i {
                i += 2;
                start = i;
                continue;
            }
            if (chars[i] == ' ' || chars[i] == '|') && start == i {
                i += 1;
                start = i;
                continue;
            }
            if chars[i] == '(' {
                let close = chars[i..].iter().position(|&c| c == ')').map(|p| i + p);
                if let Some(close) = close {
                    let num: String = chars[i + 1..close].iter().collect();
                    if !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) {
                        let name: String = chars[start..i].iter().collect();
                        v.push((pid_of(&num), format!("{start}:{name}({num})")));
                        i = close + 1;
                        start = i;
                        continue;
                    }
                }
            }
            i += 1;
        }
    }
    v
}

/// top -b: PID, USER and COMMAND of each row (the header and the other columns vary).
fn top_items(out: &str) -> Items {
    let mut rows = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("PID"));
    let header = rows.next().expect("top's column header");
    assert!(
        header.contains("USER") && header.ends_with("COMMAND"),
        "{header}"
    );
    let mut v: Items = rows
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let pid = pid_of(f[0]);
            (pid, format!("{} {} {}", f[0], f[1], f[11..].join(" ")))
        })
        .collect();
    v.sort();
    v
}

/// Items without what changes by itself between two looks: a kernel worker's name ends with
/// the workqueue of its latest work ("kworker/1:1-events", then "kworker/1:1-mm_percpu_wq").
fn stable(items: Items) -> Items {
    items
        .into_iter()
        .map(|(pid, text)| {
            let words: Vec<String> = text
                .split(' ')
                .map(|w| match w.strip_prefix("kworker/") {
                    Some(rest) => format!("kworker/{}", rest.split('-').next().unwrap_or(rest)),
                    None => w.to_string(),
                })
                .collect();
            (pid, words.join(" "))
        })
        .collect()
}

/// Runs `args` through procfs, the daemon, procfs again, and compares (three tries: other tests
/// start and stop processes meanwhile).
fn same_through_daemon(
    d: &Daemon,
    args: &[&str],
    items: fn(&str) -> Items,
    ordered: bool,
    must_show: &[u32],
) {
    let mut last = String::new();
    for attempt in 0..3 {
        let before = tool(args, "procfs", &d.socket);
        let got = tool(args, "daemon", &d.socket);
        let after = tool(args, "procfs", &d.socket);
        let g = items(&got.out);
        for p in must_show {
            assert!(
                g.iter().any(|(q, _)| q == p),
                "{args:?} through the daemon does not show pid {p}:\n{}",
                got.out
            );
        }
        let skip = [before.pid, got.pid, after.pid];
        match compare(
            &format!("{args:?}"),
            &stable(g.clone()),
            &stable(items(&before.out)),
            &stable(items(&after.out)),
            &skip,
            ordered,
        ) {
            Ok(()) => {
                println!("{args:?}: {} items, same through the daemon", g.len());
                return;
            }
            Err(e) => {
                println!("attempt {attempt}: {e}");
                last = e;
            }
        }
    }
    panic!("{last}");
}

#[test]
fn the_tools_through_the_daemon_match_procfs_for_an_unprivileged_user() {
    let d = Daemon::start(&[]);
    let sleeps: Vec<Spawned> = (0..3)
        .map(|_| Spawned::spawn(Command::new("sleep").arg("1000").stdin(Stdio::null())))
        .collect();
    let sleep_pids: Vec<u32> = sleeps.iter().map(Spawned::pid).collect();
    for &p in &sleep_pids {
        wait_exec(p, "sleep");
    }
    let ps = ["ps", "-e", "-o", "pid,ppid,user,comm"];
    let first = tool(&ps, "daemon", &d.socket);
    let header: Vec<&str> = first
        .out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["PID", "PPID", "USER", "COMMAND"], "{}", first.out);
    same_through_daemon(&d, &ps, lines, true, &[1, me(), d.pid()]);
    same_through_daemon(
        &d,
        &["pstree", "-p", "1"],
        tree_items,
        true,
        &[1, me(), d.pid()],
    );
    same_through_daemon(&d, &["pgrep", "-l", "sleep"], lines, true, &sleep_pids);
    same_through_daemon(
        &d,
        &["top", "-b", "-n", "1"],
        top_items,
        false,
        &[1, d.pid()],
    );
    drop(sleeps);
}

#[test]
fn auto_uses_the_daemon_for_an_unprivileged_user_and_falls_back_to_procfs() {
    let d = Daemon::start(&[]);
    let run = |socket: &Path| {
        let o = output(
            as_user(USER, cli())
                .args([
                    "dump",
                    "--backend",
                    "auto",
                    "--summary",
                    "--groups",
                    "base,cred",
                ])
                .env("TASKDIAG_SOCKET", socket),
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        (String::from_utf8_lossy(&o.stdout).into_owned(), err)
    };
    let (out, err) = run(&d.socket);
    assert!(err.contains("via daemon"), "{err}");
    let line = format!("pid {0} tgid {0} ppid {1} ", d.pid(), me());
    assert!(out.contains(&line), "{line:?} missing:\n{out}");
    assert!(out.contains("backend daemon"), "{out}");
    let nowhere = d.socket.with_file_name("nobody-listens.sock");
    let (out, err) = run(&nowhere);
    assert!(err.contains("via procfs"), "{err}");
    assert!(out.contains(&line), "{line:?} missing:\n{out}");
}

// ---------------------------------------------------------------------------------------------
// 9. Life cycle
// ---------------------------------------------------------------------------------------------

#[test]
fn sigterm_and_sigint_stop_the_daemon_cleanly() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut d = Daemon::start(&[]);
        let known = Known::refs(&d);
        // Privileges are gone once it serves.
        let mut c = DaemonClient::connect(&d.socket).expect("connect");
        let req = Request::new(Strategy::One, d.pid(), base_cred());
        let (_, b) = collect(&mut c, &req).expect("the daemon's own record");
        let t = check_stream(&b, &req).expect("stream");
        let cred = &t[0].cred.as_ref().expect("cred").rec;
        assert_eq!(
            (
                cred.cap_effective,
                cred.cap_permitted,
                cred.cap_inheritable,
                cred.cap_ambient
            ),
            (0, 0, 0, 0),
            "the daemon kept capabilities"
        );
        good_dump(&mut c, &known).expect("served");
        signal(d.pid(), sig);
        let st = d
            .process()
            .wait_exit(secs(10.0))
            .expect("the daemon did not stop");
        assert_eq!(st.code(), Some(0), "signal {sig}: {st:?}");
        assert!(
            !d.socket.exists(),
            "signal {sig}: the socket was left behind"
        );
        // The connection that was open ends.
        assert!(collect(&mut c, &req).is_err());
    }
}

#[test]
fn starting_without_privileges_fails_naming_cap_bpf() {
    let dir = TempDir::new("unprivileged");
    let sock = dir.join("u.sock");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let mut c = as_user(USER, DAEMON);
    c.args(["--foreground", "--socket"]).arg(&sock);
    let o = output(&mut c);
    let err = String::from_utf8_lossy(&o.stderr);
    println!("unprivileged start: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("CAP_BPF"), "{err}");
    assert!(!sock.exists(), "a socket was left behind");
}

#[test]
fn help_and_a_second_daemon_on_a_live_socket() {
    let o = output(Command::new(DAEMON).arg("--help"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(
        out.contains("Usage") && out.contains("--buffer-limit"),
        "{out}"
    );
    let o = output(Command::new(DAEMON).arg("--no-such-option"));
    assert_eq!(o.status.code(), Some(1), "{o:?}");

    let d = Daemon::start(&[]);
    let known = Known::refs(&d);
    let o = output(
        Command::new(DAEMON)
            .args(["--foreground", "--socket"])
            .arg(&d.socket),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("already listening"), "{err}");
    good_client(&d, &known).expect("the first daemon still serves");
}
