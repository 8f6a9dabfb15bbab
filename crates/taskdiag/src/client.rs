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

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

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
}

impl DaemonClient {
    /// Connects to the daemon at `path`, if a trusted process serves it (see the module
    /// documentation); else fails with [`Error::UntrustedDaemon`], before anything is sent.
    pub fn connect(path: &Path) -> Result<Self, Error> {
        let daemon_err = |source| Error::Daemon {
            socket: path.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(path).map_err(daemon_err)?;
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

    /// Sends `req` and relays the response stream to `out` in chunks of whole messages.
    /// Returns the number of tasks, or the error the daemon's DONE message carries.
    pub fn dump(
        &mut self,
        req: &Request,
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, Error> {
        if let Err(e) = self.stream.write_all(&req.to_bytes()) {
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
        loop {
            let n = self
                .reader
                .fill(&mut self.stream)
                .map_err(|e| self.io_err(e))?;
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
