//! The daemon backend: requests sent to taskdiagd over its Unix socket.
//!
//! The client first checks who serves the socket, then writes a request and relays the
//! daemon's response stream (START, TASK messages, DONE) as it arrives, in whole messages,
//! checking only the framing it must understand to find the end of the response. Serving
//! requests is the daemon's job (crate `taskdiag-daemon`); choosing this backend is
//! [`crate::Dumper`]'s.
//!
//! # Which servers are believed
//!
//! Anyone may listen on a socket in a world-writable directory, and what a server sends is
//! shown (and, for `pkill`, acted upon) as the system's processes. So right after `connect()`
//! the client reads the server's credentials from the kernel (`SO_PEERCRED`: for a listening
//! socket, the process that called `listen()`, kept when it later changes user) and goes on
//! only if that uid is
//!
//! * 0: root, or systemd under socket activation (taskdiagd binds as root, then may switch to
//!   `--user`; the listening socket keeps root's credentials);
//! * the uid `$TASKDIAG_DAEMON_USER` names (a user name or a number), for a daemon that is not
//!   root when it listens;
//! * the overflow uid (`/proc/sys/kernel/overflowuid`, 65534), when this process is in a user
//!   namespace that maps no id to it: that is how the kernel shows every id from outside the
//!   namespace, the host's root among them, so there the host's taskdiagd looks exactly so.
//!   (The namespace cannot tell which outside id it is; where it also maps an id of its own to
//!   the overflow uid, that one is believed only if configured.)
//!
//! A server of the client's own uid is refused too: the same uid is not the same trust (a
//! sandboxed process, or one that Yama forbids to ptrace its siblings, would otherwise forge
//! the listing its user's unconfined `ps` or `pkill` acts upon). What is refused is an
//! [`Error::UntrustedDaemon`] naming the socket and its owner; [`crate::BackendKind::Auto`]
//! then uses /proc instead.
//!
//! # Deadlines
//!
//! The client never waits without bound for the daemon, even a stopped one: connecting, sending
//! the request and each read of the answer wait at most [`timeout`] (`$TASKDIAG_TIMEOUT`
//! seconds, [`DEFAULT_TIMEOUT`] unless set; 0 waits without limit). What did not answer is said
//! in an [`Error::DaemonTimeout`] naming the socket. A busy daemon's `EBUSY` is an
//! [`Error::DaemonBusy`]. A socket that cannot be reached is explained for someone meeting it
//! the first time: no such socket (is taskdiagd running, and how to start it), a path that is
//! no socket, a socket nothing listens on.

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use taskdiag_proto::msg::{done_text, StreamReader};
use taskdiag_proto::{Done, MsgType, Request};

use crate::Error;

/// Where taskdiagd listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/taskdiag.sock";

/// The environment variable that names another socket.
pub const SOCKET_ENV: &str = "TASKDIAG_SOCKET";

/// The environment variable that names the user (a name or a numeric uid) a daemon may run
/// as besides root: for a daemon that is not root when it starts listening.
pub const DAEMON_USER_ENV: &str = "TASKDIAG_DAEMON_USER";

/// The environment variable that sets how long a client waits for the daemon at each step
/// (connecting, sending a request, each read of the answer), in seconds; 0 waits without limit.
pub const TIMEOUT_ENV: &str = "TASKDIAG_TIMEOUT";

/// How long a client waits for the daemon at each step unless `$TASKDIAG_TIMEOUT` says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to wait for the daemon at each step: `$TASKDIAG_TIMEOUT` seconds (a decimal
/// number; 0: `None`, without limit), else [`DEFAULT_TIMEOUT`]. An invalid value is an error
/// naming it.
pub fn timeout() -> Result<Option<Duration>, String> {
    match std::env::var_os(TIMEOUT_ENV) {
        None => Ok(Some(DEFAULT_TIMEOUT)),
        Some(v) => parse_timeout(&v.to_string_lossy()),
    }
}

/// [`timeout`] for a value of `$TASKDIAG_TIMEOUT`.
fn parse_timeout(v: &str) -> Result<Option<Duration>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(Some(DEFAULT_TIMEOUT));
    }
    match v.parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(s) if s > 0.0 && s.is_finite() && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        _ => Err(format!(
            "${TIMEOUT_ENV}={v:?} is not a number of seconds (0 waits without limit)"
        )),
    }
}

/// "5 s", "0.5 s": a wait, as messages give it.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s} s")
    }
}

/// The socket to use: `explicit` (a `--socket` option), else `$TASKDIAG_SOCKET`, else
/// [`DEFAULT_SOCKET`].
pub fn socket_path(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    match std::env::var_os(SOCKET_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// A connection to taskdiagd. Requests are answered one after another on it.
pub struct DaemonClient {
    stream: UnixStream,
    path: PathBuf,
    /// Cuts responses into whole messages; kept between requests for its buffer.
    reader: StreamReader,
    /// How long each step waits (`None`: without limit).
    timeout: Option<Duration>,
    /// Requests sent on this connection so far.
    requests: u64,
}

impl DaemonClient {
    /// Connects to the daemon at `path`, if a trusted process serves it (see the module
    /// documentation); else fails with [`Error::UntrustedDaemon`], before anything is sent.
    /// Each step waits at most [`timeout`] (`$TASKDIAG_TIMEOUT`).
    pub fn connect(path: &Path) -> Result<Self, Error> {
        let t = timeout().map_err(|m| Error::Daemon {
            socket: path.to_path_buf(),
            source: io::Error::new(io::ErrorKind::InvalidInput, m),
        })?;
        Self::connect_with(path, t)
    }

    /// [`DaemonClient::connect`] waiting at most `timeout` at each step (`None`: without
    /// limit), whatever the environment says.
    pub fn connect_with(path: &Path, timeout: Option<Duration>) -> Result<Self, Error> {
        let daemon_err = |source| Error::Daemon {
            socket: path.to_path_buf(),
            source,
        };
        let stream = connect_socket(path, timeout).map_err(|e| unreachable(path, e, timeout))?;
        stream.set_read_timeout(timeout).map_err(daemon_err)?;
        stream.set_write_timeout(timeout).map_err(daemon_err)?;
        let server = peer_cred(&stream).map_err(daemon_err)?;
        // Root, the usual server, is believed without reading the environment and /proc.
        if server.uid != 0 {
            let rule = TrustRule::from_env();
            if !rule.trusts(server.uid) {
                return Err(Error::UntrustedDaemon {
                    socket: path.to_path_buf(),
                    uid: server.uid,
                    user: user_name(server.uid),
                    pid: u32::try_from(server.pid).unwrap_or(0),
                    expected: rule.expected(server.uid),
                });
            }
        }
        Ok(DaemonClient {
            stream,
            path: path.to_path_buf(),
            // Room for a large response in few reads.
            reader: StreamReader::with_capacity(1 << 18),
            timeout,
            requests: 0,
        })
    }

    /// The socket this client is connected to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io_err(&self, source: io::Error) -> Error {
        Error::Daemon {
            socket: self.path.clone(),
            source,
        }
    }

    /// The error for a step that waited its whole timeout: `what` did not happen.
    fn timed_out(&self, what: String) -> Error {
        let waited = self.timeout.unwrap_or_default();
        Error::DaemonTimeout {
            socket: self.path.clone(),
            what: format!(
                "{what} for {} (is it stopped, or overloaded? ${TIMEOUT_ENV} sets how long \
                 clients wait)",
                secs(waited)
            ),
            waited,
        }
    }

    /// Sends `req` and relays the response stream to `out` in chunks of whole messages.
    /// Returns the number of tasks, or the error the daemon's DONE message carries.
    pub fn dump(
        &mut self,
        req: &Request,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        let first = self.requests == 0;
        self.requests += 1;
        if let Err(e) = self.stream.write_all(&req.to_bytes()) {
            if is_timeout(&e) {
                return Err(self.timed_out("did not take the request".into()));
            }
            // A daemon that refuses a connection (too many of them) says why and hangs up,
            // perhaps before the request went out: its explanation is still there to read.
            if matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) {
                if let Some(refusal) = self.refusal(req) {
                    return Err(refusal);
                }
            }
            return Err(self.io_err(e));
        }
        self.reader.clear();
        // Bytes of the answer received so far.
        let mut got: u64 = 0;
        loop {
            let n = match self.reader.fill(&mut self.stream) {
                Ok(n) => n,
                Err(e) if is_timeout(&e) && got == 0 && first => {
                    return Err(self.timed_out("accepted the connection but sent nothing".into()));
                }
                Err(e) if is_timeout(&e) && got == 0 => {
                    return Err(self.timed_out("sent no answer to the request".into()));
                }
                Err(e) if is_timeout(&e) => {
                    return Err(self
                        .timed_out(format!("sent {got} bytes of the answer, then nothing more")));
                }
                Err(e) => return Err(self.io_err(e)),
            };
            got += n as u64;
            if n == 0 {
                return Err(self.io_err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the daemon closed the connection before the end of the response",
                )));
            }
            // Whole messages, up to the DONE that ends the response.
            let mut whole = self.reader.messages();
            let mut done = None;
            for m in whole.by_ref() {
                let m = m.map_err(Error::Internal)?;
                if m.msg_type() == Some(MsgType::Done) {
                    let d = Done::read_from(m.payload).unwrap_or_default();
                    done = Some((d, done_text(&m).map(str::to_owned)));
                    break;
                }
            }
            let end = whole.end();
            if end > 0 {
                out(&self.reader.bytes()[..end]).map_err(Error::Sink)?;
                self.reader.consume(end);
            }
            if let Some((d, text)) = done {
                if !self.reader.bytes().is_empty() {
                    return Err(self.io_err(io::Error::other("data after the end of a response")));
                }
                return self.outcome(req, &d, text);
            }
        }
    }

    /// What a DONE message means for the caller.
    fn outcome(&self, req: &Request, d: &Done, text: Option<String>) -> Result<u64, Error> {
        match d.error {
            0 => Ok(d.tasks),
            e if e == -libc::ESRCH => Err(Error::NoSuchTask { pid: req.pid }),
            e if e == -libc::EBUSY => Err(Error::DaemonBusy {
                socket: self.path.clone(),
                message: text.unwrap_or_else(|| "taskdiagd is busy".into()),
            }),
            e => Err(Error::Refused {
                socket: self.path.clone(),
                errno: -e,
                message: text.unwrap_or_else(|| io::Error::from_raw_os_error(-e).to_string()),
            }),
        }
    }

    /// The refusal a daemon sent before hanging up, if that is what is waiting on the socket.
    fn refusal(&mut self, req: &Request) -> Option<Error> {
        // The daemon has closed its end: reads return what it sent, then end of file. The
        // timeout is a guard in case it only stopped reading.
        self.stream
            .set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .ok()?;
        self.reader.clear();
        // Up to the end of file, or to the first whole message (all a refusal is).
        while self.reader.messages().next().is_none() {
            match self.reader.fill(&mut self.stream) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let m = self.reader.messages().next()?.ok()?;
        if m.msg_type() != Some(MsgType::Done) {
            return None;
        }
        let d = Done::read_from(m.payload)?;
        let text = done_text(&m).map(str::to_owned);
        self.outcome(req, &d, text).err()
    }
}

/// Whether `e` is a socket timeout (SO_RCVTIMEO, SO_SNDTIMEO) expiring.
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A Unix stream socket connected to `path`, waiting at most `timeout` for the server to
/// accept (a full queue of new connections: a stopped or overloaded server). The standard
/// library's connect() waits without limit.
fn connect_socket(path: &Path, timeout: Option<Duration>) -> io::Result<UnixStream> {
    // SAFETY: socket() takes integer arguments and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket that nothing else owns.
    let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    // connect() on a Unix stream socket waits for room in the server's queue for as long as
    // SO_SNDTIMEO says, then fails with EAGAIN.
    stream.set_write_timeout(timeout)?;
    // SAFETY: sockaddr_un is plain data; all-zero bytes are a valid (empty) address.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "not a socket path a client can connect to (empty, over {} bytes, or with a NUL)",
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (d, &b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    loop {
        // SAFETY: `addr` is an initialized sockaddr_un of at least `len` bytes, alive for the
        // call; the kernel only reads it.
        let r = unsafe {
            libc::connect(
                stream.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(stream);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The error for a socket at `path` that `connect()` failed on with `e`, said for someone
/// meeting it the first time.
fn unreachable(path: &Path, e: io::Error, timeout: Option<Duration>) -> Error {
    let socket = path.to_path_buf();
    let kind = e.kind();
    let how = "start it as root (`taskdiagd`, or `systemctl enable --now taskdiagd.socket`), \
               or name its socket with --socket or $TASKDIAG_SOCKET";
    let not_socket = std::fs::metadata(path)
        .ok()
        .filter(|m| !m.file_type().is_socket());
    let why = match e.raw_os_error() {
        _ if not_socket.is_some() => format!(
            "not a socket ({}): --socket or ${SOCKET_ENV} must name taskdiagd's socket",
            not_socket.map_or("", |m| file_kind(&m.file_type()))
        ),
        Some(libc::EAGAIN) => {
            let waited = timeout.unwrap_or_default();
            return Error::DaemonTimeout {
                socket,
                what: format!(
                    "did not accept the connection within {}: its queue of new connections is \
                     full (is it stopped, or overloaded? ${TIMEOUT_ENV} sets how long clients \
                     wait)",
                    secs(waited)
                ),
                waited,
            };
        }
        Some(libc::ENOENT) => format!("no such socket: is taskdiagd running? If not, {how}"),
        Some(libc::ECONNREFUSED) => format!(
            "nothing listens on this socket: taskdiagd is not running (the socket is left from \
             one that stopped); {how}"
        ),
        Some(libc::EACCES) => "permission denied: this user may not open the socket or a \
                               directory above it (taskdiagd creates its socket with mode 0666)"
            .to_string(),
        _ => return Error::Daemon { socket, source: e },
    };
    Error::Daemon {
        socket,
        source: io::Error::new(kind, why),
    }
}

/// "a regular file", "a directory", ...: what a path that is no socket is.
fn file_kind(t: &std::fs::FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "another kind of file"
    }
}

/// The credentials of the process serving `stream`: for a listening socket, those of the
/// process that called `listen()` (systemd under socket activation), at that time.
fn peer_cred(stream: &UnixStream) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the descriptor is a live socket owned by `stream`; `cred` is a writable ucred of
    // `len` bytes, and the kernel writes at most `len` bytes to it.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::other(
            "SO_PEERCRED returned no credentials for the server",
        ));
    }
    Ok(cred)
}

/// What `$TASKDIAG_DAEMON_USER` says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DaemonUser {
    /// Unset or empty: root only.
    Unset,
    /// A uid, given as a number or as the name of a user.
    Uid(u32),
    /// A name no user has, or a number that is no uid: trusted as [`DaemonUser::Unset`], and
    /// said in the refusal.
    Invalid(String),
}

impl DaemonUser {
    /// Reads a value of `$TASKDIAG_DAEMON_USER`: a number is a uid, anything else a user name.
    fn parse(value: &str) -> DaemonUser {
        let value = value.trim();
        if value.is_empty() {
            return DaemonUser::Unset;
        }
        let uid = if value.bytes().all(|b| b.is_ascii_digit()) {
            // (uid_t)-1 is "no uid" to the kernel (setresuid's "unchanged").
            value.parse().ok().filter(|&u| u != u32::MAX)
        } else {
            uid_of(value)
        };
        match uid {
            Some(u) => DaemonUser::Uid(u),
            None => DaemonUser::Invalid(value.to_owned()),
        }
    }
}

/// Which server uids this client believes (see the module documentation).
///
/// The client's own uid is deliberately no part of it: a server of the same uid is refused
/// unless it is root or the configured user.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TrustRule {
    /// What `$TASKDIAG_DAEMON_USER` says.
    configured: DaemonUser,
    /// How servers from outside this process's user namespace show in it, if any can.
    outside: Option<Outside>,
}

/// How ids from outside a user namespace show inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outside {
    /// The overflow uid: the kernel shows every id the namespace does not map as it.
    uid: u32,
    /// Whether the namespace also maps an id of its own to it: then it is believed only if
    /// configured, since it may as well be that id (a container's own nobody).
    ambiguous: bool,
}

impl TrustRule {
    /// The rule for this process: its environment and its user namespace.
    fn from_env() -> TrustRule {
        let configured = match std::env::var_os(DAEMON_USER_ENV) {
            None => DaemonUser::Unset,
            Some(v) => DaemonUser::parse(&v.to_string_lossy()),
        };
        TrustRule {
            configured,
            outside: outside(),
        }
    }

    /// Whether a server whose `listen()` ran as `server_uid` (as this process's user
    /// namespace shows it) is believed.
    fn trusts(&self, server_uid: u32) -> bool {
        server_uid == 0
            || self.configured == DaemonUser::Uid(server_uid)
            || self
                .outside
                .is_some_and(|o| o.uid == server_uid && !o.ambiguous)
    }

    /// Who may serve, for the refusal of `server_uid`: "a taskdiag daemon must run as ...".
    fn expected(&self, server_uid: u32) -> String {
        let mut s = match &self.configured {
            DaemonUser::Unset => format!("root (or as the user named by ${DAEMON_USER_ENV})"),
            DaemonUser::Uid(u) => match user_name(*u) {
                Some(name) => format!("root or as uid {u} (user {name}, ${DAEMON_USER_ENV})"),
                None => format!("root or as uid {u} (${DAEMON_USER_ENV})"),
            },
            DaemonUser::Invalid(v) => format!("root (${DAEMON_USER_ENV}={v:?} names no user)"),
        };
        if let Some(o) = self.outside.filter(|o| o.uid == server_uid) {
            s.push_str(&format!(
                "; in this user namespace uid {0} is also how every id outside it shows, the \
                 host's root among them: ${DAEMON_USER_ENV}={0} accepts it",
                o.uid
            ));
        }
        s
    }
}

/// How ids from outside this process's user namespace show in it; `None` in the initial
/// namespace (or one that maps every id), or when /proc cannot tell (then nothing is
/// accepted on that ground).
fn outside() -> Option<Outside> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let overflow = std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    outside_of(&map, overflow)
}

/// [`outside`] for a namespace with `uid_map` on a host with overflow uid `overflow`.
fn outside_of(uid_map: &str, overflow: u32) -> Option<Outside> {
    let ranges = taskdiag_procfs::parse::parse_id_map(uid_map.as_bytes());
    let every_id = ranges
        .as_ref()
        .is_ok_and(|r| r.iter().any(|r| r.inside == 0 && r.count == u32::MAX));
    (!every_id).then(|| Outside {
        uid: overflow,
        // A map that does not parse counts as mapping it.
        ambiguous: ranges.map_or(true, |r| maps_uid(&r, overflow)),
    })
}

/// Whether a `uid_map` maps some id to `uid` inside the namespace.
fn maps_uid(uid_map: &[taskdiag_procfs::parse::IdRange], uid: u32) -> bool {
    uid_map.iter().any(|r| {
        let (inside, uid) = (u64::from(r.inside), u64::from(uid));
        inside <= uid && uid < inside + u64::from(r.count)
    })
}

/// The name of the user `uid`, if the user database has one.
fn user_name(uid: u32) -> Option<String> {
    passwd_entry(&|pw, buf, found| {
        // SAFETY: `pw`, `buf` (of `buf.len()` bytes) and `found` are live and writable;
        // getpwuid_r writes the entry's strings into `buf` and nowhere else.
        unsafe { libc::getpwuid_r(uid, pw, buf.as_mut_ptr().cast(), buf.len(), found) }
    })
    .map(|(_, name)| name)
}

/// The uid of the user named `name`, if the user database has one.
fn uid_of(name: &str) -> Option<u32> {
    let cname = CString::new(name).ok()?;
    passwd_entry(&|pw, buf, found| {
        // SAFETY: `cname` is a NUL-terminated string; `pw`, `buf` (of `buf.len()` bytes) and
        // `found` are live and writable; getpwnam_r writes the entry's strings into `buf` only.
        unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                found,
            )
        }
    })
    .map(|(uid, _)| uid)
}

/// getpwuid_r or getpwnam_r with its key bound: (entry, string buffer, result) -> error number.
type PasswdLookup<'a> =
    &'a dyn Fn(&mut libc::passwd, &mut [u8], &mut *mut libc::passwd) -> libc::c_int;

/// A user database entry's uid and name, from `lookup`, with a buffer grown while it is too
/// small. `None` if there is no entry or the lookup fails.
fn passwd_entry(lookup: PasswdLookup<'_>) -> Option<(u32, String)> {
    let mut size = 1024;
    loop {
        let mut buf = vec![0u8; size];
        // SAFETY: passwd holds only integers and pointers, for which all-zero bits are valid
        // values (null pointers); the lookup overwrites it.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        match lookup(&mut pw, &mut buf, &mut found) {
            0 if found.is_null() || pw.pw_name.is_null() => return None,
            0 => {
                // SAFETY: after a successful lookup pw_name points to a NUL-terminated string
                // inside `buf`, which is still alive.
                let name = unsafe { CStr::from_ptr(pw.pw_name) };
                return Some((pw.pw_uid, name.to_string_lossy().into_owned()));
            }
            libc::ERANGE if size < 1 << 20 => size *= 4,
            _ => return None,
        }
    }
}

/// " (user alice, pid 1234)", or as much of it as is known, after a server's uid in
/// [`Error::UntrustedDaemon`]'s message. Pid 0: the server is not in this pid namespace.
pub(crate) fn owner_detail(user: Option<&str>, pid: u32) -> String {
    match (user, pid) {
        (Some(u), 0) => format!(" (user {u})"),
        (Some(u), p) => format!(" (user {u}, pid {p})"),
        (None, 0) => String::new(),
        (None, p) => format!(" (pid {p})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(configured: DaemonUser, outside: Option<Outside>) -> TrustRule {
        TrustRule {
            configured,
            outside,
        }
    }

    #[test]
    fn root_is_trusted_and_nobody_else_by_default() {
        let r = rule(DaemonUser::Unset, None);
        assert!(r.trusts(0));
        for uid in [1, 999, 1000, 65534, u32::MAX] {
            assert!(!r.trusts(uid), "uid {uid}");
        }
    }

    #[test]
    fn a_server_of_the_clients_own_uid_is_refused() {
        // SAFETY: getuid cannot fail and has no preconditions.
        let me = unsafe { libc::getuid() };
        let r = rule(DaemonUser::Unset, None);
        assert_eq!(r.trusts(me), me == 0);
        assert!(!r.trusts(1000), "a user's own daemon");
    }

    #[test]
    fn the_configured_user_is_trusted_and_only_it() {
        let r = rule(DaemonUser::Uid(990), None);
        assert!(r.trusts(0) && r.trusts(990));
        assert!(!r.trusts(991) && !r.trusts(1000));
        let r = rule(DaemonUser::Invalid("ghost".into()), None);
        assert!(r.trusts(0) && !r.trusts(990));
    }

    #[test]
    fn daemon_user_is_a_uid_or_a_name() {
        assert_eq!(DaemonUser::parse(""), DaemonUser::Unset);
        assert_eq!(DaemonUser::parse("  "), DaemonUser::Unset);
        assert_eq!(DaemonUser::parse("990"), DaemonUser::Uid(990));
        assert_eq!(DaemonUser::parse("root"), DaemonUser::Uid(0));
        for bad in ["4294967295", "99999999999", "no-such-user-taskdiag", "a\0b"] {
            assert_eq!(
                DaemonUser::parse(bad),
                DaemonUser::Invalid(bad.into()),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_overflow_uid_is_trusted_only_where_it_can_only_be_outside() {
        // The initial user namespace (and a root-made one with the same map): nothing is
        // outside, and 65534 is nobody.
        assert_eq!(
            outside_of("         0          0 4294967295\n", 65534),
            None
        );
        let r = rule(DaemonUser::Unset, None);
        assert!(!r.trusts(65534));
        assert!(!r.expected(65534).contains("user namespace"));
        // `unshare --user --map-root-user`: only 0 is mapped; the host's root shows as 65534.
        let o = outside_of("         0       1000          1\n", 65534);
        assert_eq!(
            o,
            Some(Outside {
                uid: 65534,
                ambiguous: false
            })
        );
        let r = rule(DaemonUser::Unset, o);
        assert!(r.trusts(0) && r.trusts(65534) && !r.trusts(1000));
        // A container with 65536 ids: 65534 may be its own nobody; believed only if configured,
        // and the refusal says so.
        let o = outside_of("0 1000 1\n1 100000 65536\n", 65534);
        assert_eq!(o.map(|o| o.ambiguous), Some(true));
        let r = rule(DaemonUser::Unset, o);
        assert!(!r.trusts(65534));
        assert!(
            r.expected(65534)
                .contains("$TASKDIAG_DAEMON_USER=65534 accepts it"),
            "{}",
            r.expected(65534)
        );
        assert!(!r.expected(1000).contains("user namespace"));
        assert!(rule(DaemonUser::Uid(65534), o).trusts(65534));
        // An empty map (nothing written yet) maps nothing; a line that does not parse counts as
        // mapping the id.
        assert_eq!(outside_of("", 65534).map(|o| o.ambiguous), Some(false));
        assert_eq!(
            outside_of("garbage\n", 65534).map(|o| o.ambiguous),
            Some(true)
        );
    }

    #[test]
    fn the_timeout_is_seconds_and_zero_waits_without_limit() {
        assert_eq!(parse_timeout(""), Ok(Some(DEFAULT_TIMEOUT)));
        assert_eq!(parse_timeout(" 2 "), Ok(Some(Duration::from_secs(2))));
        assert_eq!(parse_timeout("0.25"), Ok(Some(Duration::from_millis(250))));
        assert_eq!(parse_timeout("0"), Ok(None));
        for bad in ["-1", "five", "inf", "NaN"] {
            let e = parse_timeout(bad).expect_err(bad);
            assert!(e.contains("$TASKDIAG_TIMEOUT") && e.contains(bad), "{e}");
        }
        assert_eq!(secs(Duration::from_secs(5)), "5 s");
        assert_eq!(secs(Duration::from_millis(1500)), "1.5 s");
    }

    #[test]
    fn a_socket_that_cannot_be_reached_is_explained() {
        let dir = std::env::temp_dir().join(format!("td-client-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t = Some(Duration::from_secs(1));
        let msg = |p: &Path| match DaemonClient::connect_with(p, t) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{} connected", p.display()),
        };
        let missing = dir.join("none.sock");
        let m = msg(&missing);
        assert!(
            m.starts_with(&format!(
                "taskdiagd at {}: no such socket",
                missing.display()
            )) && m.contains("is taskdiagd running?")
                && m.contains("start it as root"),
            "{m}"
        );
        let file = dir.join("file");
        std::fs::write(&file, b"").unwrap();
        let m = msg(&file);
        assert!(m.contains("not a socket (a regular file)"), "{m}");
        let m = msg(&dir);
        assert!(m.contains("not a socket (a directory)"), "{m}");
        // A socket left by a server that is gone.
        let stale = dir.join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let m = msg(&stale);
        assert!(m.contains("nothing listens on this socket"), "{m}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_refusal_names_the_socket_and_the_owner() {
        let e = Error::UntrustedDaemon {
            socket: "/tmp/x.sock".into(),
            uid: 1001,
            user: Some("alice".into()),
            pid: 1234,
            expected: rule(DaemonUser::Unset, None).expected(1001),
        };
        assert_eq!(
            e.to_string(),
            "taskdiagd at /tmp/x.sock: refusing a server run by uid 1001 (user alice, pid \
             1234): a taskdiag daemon must run as root (or as the user named by \
             $TASKDIAG_DAEMON_USER)"
        );
        assert_eq!(owner_detail(None, 0), "");
        assert_eq!(owner_detail(None, 7), " (pid 7)");
    }
}
