//! The daemon backend: requests sent to taskdiagd over its Unix socket.
//!
//! The client writes a request and relays the daemon's response stream (START, TASK messages,
//! DONE) as it arrives, in whole messages, checking only the framing it must understand to find
//! the end of the response. Serving requests is the daemon's job (crate `taskdiag-daemon`);
//! choosing this backend is [`crate::Dumper`]'s.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use taskdiag_proto::msg::{done_text, message_len, Messages};
use taskdiag_proto::{Done, MsgType, Request};

use crate::Error;

/// Where taskdiagd listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/taskdiag.sock";

/// The environment variable that names another socket.
pub const SOCKET_ENV: &str = "TASKDIAG_SOCKET";

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
    buf: Vec<u8>,
}

impl DaemonClient {
    /// Connects to the daemon at `path`.
    pub fn connect(path: &Path) -> Result<Self, Error> {
        let stream = UnixStream::connect(path).map_err(|source| Error::Daemon {
            socket: path.to_path_buf(),
            source,
        })?;
        Ok(DaemonClient {
            stream,
            path: path.to_path_buf(),
            buf: vec![0; 1 << 18],
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
        let mut have = 0usize;
        let mut offset = 0usize;
        loop {
            if have == self.buf.len() {
                // Cannot happen with valid messages (each is at most MSG_MAX, far below the
                // buffer), but never loop on a full buffer.
                return Err(self.io_err(io::Error::other("response message too large")));
            }
            let n = match self.stream.read(&mut self.buf[have..]) {
                Ok(0) => {
                    return Err(self.io_err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the daemon closed the connection before the end of the response",
                    )))
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(e)),
            };
            have += n;
            // Whole messages at the front of the buffer.
            let mut whole = 0;
            let mut done = None;
            while whole < have {
                let len = match message_len(&self.buf[whole..have], offset + whole) {
                    Ok(len) => len,
                    Err(taskdiag_proto::msg::DecodeError::Truncated { .. }) => break,
                    Err(e) => return Err(Error::Internal(e)),
                };
                if whole + len > have {
                    break;
                }
                let m = Messages::new(&self.buf[whole..whole + len])
                    .next()
                    .and_then(|m| m.ok());
                if let Some(m) = m.filter(|m| m.msg_type() == Some(MsgType::Done)) {
                    let d = Done::read_from(m.payload).unwrap_or_default();
                    done = Some((d, done_text(&m).map(str::to_owned)));
                }
                whole += len;
                if done.is_some() {
                    break;
                }
            }
            if whole > 0 {
                out(&self.buf[..whole]).map_err(Error::Sink)?;
                self.buf.copy_within(whole..have, 0);
                have -= whole;
                offset += whole;
            }
            if let Some((d, text)) = done {
                if have != 0 {
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
        let mut have = 0;
        loop {
            match self.stream.read(&mut self.buf[have..]) {
                Ok(0) => break,
                Ok(n) => have += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
            if have == self.buf.len() {
                break;
            }
        }
        let m = Messages::new(&self.buf[..have]).next()?.ok()?;
        if m.msg_type() != Some(MsgType::Done) {
            return None;
        }
        let d = Done::read_from(m.payload)?;
        let text = done_text(&m).map(str::to_owned);
        self.outcome(req, &d, text).err()
    }
}
