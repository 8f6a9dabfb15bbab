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
        let (viewer, buf, passed) = (self.viewer, &mut self.buf, &mut self.passed);
        for m in Messages::new(chunk) {
            let decoded = m.and_then(|m| {
                if m.msg_type() != Some(MsgType::Task) {
                    return Ok(());
                }
                self.asm.push_to(&m, &mut |mut t| {
                    if viewer.filter_task(&mut t) {
                        t.encode(buf);
                        *passed += 1;
                    }
                })
            });
            if let Err(e) = decoded {
                self.error = Some(e);
                return Err(io::Error::other("invalid record"));
            }
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        out(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{HidePid, ProcMount};
    use taskdiag_proto::task::Task;

    /// Task `pid` of user `uid`, with the ACCESS record the BPF programs add for a server.
    fn task(pid: u32, uid: u32, out: &mut Vec<u8>) {
        Task {
            pid,
            tgid: pid,
            access: Some(crate::view::tests::task(uid)),
            ..Task::default()
        }
        .encode(out);
    }

    #[test]
    fn only_what_the_viewer_may_see_passes_without_the_internal_records() {
        let viewer = Viewer {
            uid: 1000,
            gid: 1000,
            userns: 1,
            proc_mount: ProcMount {
                hidepid: HidePid::Invisible,
                gid: Some(4242),
            },
            ..Viewer::default()
        };
        let mut chunk = Vec::new();
        task(10, 1000, &mut chunk);
        task(11, 0, &mut chunk);
        task(12, 1000, &mut chunk);
        let mut f = ViewFilter::new(&viewer);
        let mut out = Vec::new();
        f.push(&chunk, &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .expect("a valid chunk");
        assert_eq!((f.passed, f.error.is_none()), (2, true));
        let mut asm = TaskAssembler::new();
        let shown: Vec<Task> = Messages::new(&out)
            .filter_map(|m| asm.push(&m.expect("whole")).expect("valid"))
            .collect();
        assert_eq!(shown.iter().map(|t| t.pid).collect::<Vec<_>>(), [10, 12]);
        assert!(shown.iter().all(|t| t.access.is_none()));
    }

    #[test]
    fn a_record_that_does_not_decode_fails_the_dump() {
        let viewer = Viewer::default();
        let mut chunk = Vec::new();
        task(10, 0, &mut chunk);
        chunk[0] = 3; // a length shorter than a header
        let mut f = ViewFilter::new(&viewer);
        assert!(f.push(&chunk, &mut |_| Ok(())).is_err());
        assert!(matches!(f.error, Some(DecodeError::BadLength { .. })));
    }
}
