//! The view filter: a [`Viewer`] applied to a stream of TASK messages, for a server answering
//! another process. The rules themselves are [`crate::view`]'s.

use std::io;

use taskdiag_proto::msg::{DecodeError, Messages};
use taskdiag_proto::task::TaskAssembler;
use taskdiag_proto::MsgType;

use crate::view::Viewer;

/// Applies a [`Viewer`] to a stream of TASK messages: each task is decoded, dropped if the
/// viewer may not see it, else rewritten for it and encoded again.
pub(crate) struct ViewFilter<'v> {
    viewer: &'v Viewer,
    asm: TaskAssembler,
    buf: Vec<u8>,
    /// Tasks passed on.
    pub passed: u64,
    /// A record that did not decode (a bug; the dump is failed).
    pub error: Option<DecodeError>,
}

impl<'v> ViewFilter<'v> {
    /// A filter for `viewer`.
    pub fn new(viewer: &'v Viewer) -> Self {
        ViewFilter {
            viewer,
            asm: TaskAssembler::new(),
            buf: Vec::with_capacity(1 << 16),
            passed: 0,
            error: None,
        }
    }

    /// Passes the tasks of `chunk` (whole messages) that the viewer may see to `out`, as the
    /// viewer sees them.
    pub fn push(
        &mut self,
        chunk: &[u8],
        out: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        self.buf.clear();
        for m in Messages::new(chunk) {
            let decoded = m.and_then(|m| {
                if m.msg_type() != Some(MsgType::Task) {
                    return Ok(None);
                }
                self.asm.push(&m)
            });
            match decoded {
                Ok(Some(mut t)) => {
                    if self.viewer.filter_task(&mut t) {
                        t.encode(&mut self.buf);
                        self.passed += 1;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.error = Some(e);
                    return Err(io::Error::other("invalid record"));
                }
            }
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        out(&self.buf)
    }
}
