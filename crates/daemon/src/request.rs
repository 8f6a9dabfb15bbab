//! Requests off a byte stream: framing, the size limit, and the error each bad request gets.
//!
//! A request starts with its total length (`u32`, host order); the daemon reads exactly that
//! many bytes and parses them with [`Request::parse`]. A length the daemon cannot trust (shorter
//! than the 8 bytes that name length and version, or over [`MAX_REQUEST`]) leaves no way to find
//! the next request, so it ends the connection after the error; any other bad request gets its
//! error and the connection goes on. This module does no I/O, so the fuzz target drives it
//! directly.

use taskdiag_proto::msg::RequestError;
use taskdiag_proto::Request;

/// Largest request the daemon reads. Version 1 requests are 32 bytes; the room is for later
/// versions, which this daemon refuses by version without misreading the stream.
pub const MAX_REQUEST: usize = 4096;

/// Bytes of a request that must be there to judge it: length and version.
const HEAD: usize = 8;

/// What the front of a connection's input holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A valid request.
    Request(Request),
    /// A bad request: answer with `-errno` and `message`.
    Invalid {
        /// Positive errno for the DONE message.
        errno: i32,
        /// The explanation sent to the client.
        message: String,
        /// Whether the stream cannot be followed after it (the connection must end).
        fatal: bool,
    },
}

/// Decodes the request at the front of `buf`. Returns `None` when more bytes are needed, else
/// the number of bytes it used (at least 1) and the frame.
pub fn next_frame(buf: &[u8]) -> Option<(usize, Frame)> {
    let len = u32::from_ne_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    if len < HEAD {
        return Some((
            buf.len(),
            Frame::Invalid {
                errno: libc::EINVAL,
                message: format!(
                    "bad request: length {len} is shorter than the {HEAD}-byte request header"
                ),
                fatal: true,
            },
        ));
    }
    if len > MAX_REQUEST {
        return Some((
            buf.len(),
            Frame::Invalid {
                errno: libc::EMSGSIZE,
                message: format!(
                    "bad request: length {len} exceeds the limit of {MAX_REQUEST} bytes"
                ),
                fatal: true,
            },
        ));
    }
    let body = buf.get(..len)?;
    let frame = match Request::parse(body) {
        Ok(r) => Frame::Request(r),
        Err(e) => Frame::Invalid {
            errno: match e {
                RequestError::Version(_) => libc::EPROTONOSUPPORT,
                RequestError::Groups(_) => libc::EOPNOTSUPP,
                _ => libc::EINVAL,
            },
            message: format!("bad request: {e}"),
            fatal: false,
        },
    };
    Some((len, frame))
}

/// The error for a connection that ended inside a request of which `have` bytes arrived.
pub fn truncated(have: &[u8]) -> Frame {
    let want = have
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_ne_bytes);
    Frame::Invalid {
        errno: libc::EINVAL,
        message: match want {
            Some(w) => format!("truncated request: {} of {w} bytes arrived", have.len()),
            None => format!("truncated request: {} bytes arrived", have.len()),
        },
        fatal: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::{Group, Strategy};

    fn valid() -> Vec<u8> {
        Request::new(Strategy::All, 0, Group::Base.flag())
            .to_bytes()
            .to_vec()
    }

    #[test]
    fn a_valid_request_is_used_whole_and_the_next_waits_for_bytes() {
        let mut b = valid();
        b.extend_from_slice(&valid()[..10]);
        let (n, f) = next_frame(&b).unwrap();
        assert_eq!(n, Request::SIZE);
        assert!(matches!(f, Frame::Request(r) if r.show_flags == 1));
        assert_eq!(next_frame(&b[n..]), None);
        assert_eq!(next_frame(&[1, 2]), None);
    }

    #[test]
    fn lengths_that_lose_the_stream_are_fatal() {
        for len in [0u32, 7, MAX_REQUEST as u32 + 1, u32::MAX] {
            let mut b = valid();
            b[..4].copy_from_slice(&len.to_ne_bytes());
            let (n, f) = next_frame(&b).unwrap();
            assert_eq!(n, b.len());
            assert!(
                matches!(f, Frame::Invalid { fatal: true, .. }),
                "{len}: {f:?}"
            );
        }
    }

    #[test]
    fn other_bad_requests_are_answered_and_skipped() {
        let mut v = valid();
        v[4..6].copy_from_slice(&9u16.to_ne_bytes());
        let (n, f) = next_frame(&v).unwrap();
        assert_eq!(n, 32);
        assert!(matches!(
            f,
            Frame::Invalid { errno, fatal: false, ref message }
                if errno == libc::EPROTONOSUPPORT && message.contains("version 9")
        ));
        // A longer request of an unknown version is skipped by its length.
        let mut long = v.clone();
        long[..4].copy_from_slice(&40u32.to_ne_bytes());
        long.extend_from_slice(&[0; 8]);
        assert_eq!(next_frame(&long).unwrap().0, 40);
        let mut g = valid();
        g[8..16].copy_from_slice(&(1u64 << 40).to_ne_bytes());
        assert!(matches!(
            next_frame(&g).unwrap().1,
            Frame::Invalid { errno, .. } if errno == libc::EOPNOTSUPP
        ));
        let mut short = valid();
        short[..4].copy_from_slice(&16u32.to_ne_bytes());
        assert!(matches!(
            next_frame(&short).unwrap(),
            (16, Frame::Invalid { fatal: false, .. })
        ));
    }

    #[test]
    fn truncation_names_what_arrived() {
        let f = truncated(&valid()[..20]);
        assert!(matches!(f, Frame::Invalid { ref message, .. } if message.contains("20 of 32")));
    }
}
