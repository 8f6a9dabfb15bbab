//! The backend a thread keeps open between calls: opening one (even BPF programs an earlier
//! process pinned, or a connection to taskdiagd) costs milliseconds, which a one-process
//! call such as `Process(pid).name()` would otherwise pay every time (measured: 2.9 ms a
//! call with BPF, 0.8 ms with /proc; psutil's is 0.04 ms).
//!
//! One per thread (the GIL is released while it is used, so threads do not share one), never
//! across fork (a child opens its own: a pinned slot and a daemon connection are the
//! parent's), and opened again once if a kept one fails (taskdiagd closes idle connections).

use std::cell::RefCell;

use taskdiag::BackendKind;
use taskdiag_tools::snapshot::{Error, Source};

struct Kept {
    /// The process that opened it.
    pid: u32,
    kind: BackendKind,
    src: Source,
}

thread_local! {
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's open backend of `kind` (opened for `groups` if there is none),
/// and keeps the backend for the next call. A kept backend that fails is opened anew and `f`
/// tried once more.
pub fn with<T>(
    kind: BackendKind,
    groups: u64,
    mut f: impl FnMut(&mut Source) -> Result<T, Error>,
) -> Result<T, Error> {
    let pid = std::process::id();
    let kept = KEPT
        .with(|k| k.borrow_mut().take())
        .filter(|k| k.pid == pid && k.kind == kind);
    let (mut src, reused) = match kept {
        Some(k) => (k.src, true),
        None => (Source::open_kind(kind, groups)?, false),
    };
    let result = match f(&mut src) {
        Err(_) if reused => {
            src = Source::open_kind(kind, groups)?;
            f(&mut src)
        }
        r => r,
    };
    if result.is_ok() {
        KEPT.with(|k| *k.borrow_mut() = Some(Kept { pid, kind, src }));
    }
    result
}
