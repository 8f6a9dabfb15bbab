//! The backends kept open between calls: opening one (even BPF programs an earlier process
//! pinned, or a connection to taskdiagd) costs milliseconds, which a one-process call such as
//! `Process(pid).name()` would otherwise pay every time (measured: 2.9 ms a call with BPF,
//! 0.8 ms with /proc; psutil's is 0.04 ms).
//!
//! Kept in a few slots the whole process shares, each taken by one call at a time (the GIL is
//! released while a backend is used, so threads never share one: two threads at once use
//! two), never across fork (a child drops its parent's and opens its own: a pinned slot and a
//! daemon connection are the parent's), and opened again once if a kept one fails (taskdiagd
//! closes idle connections). The slots are atomic pointers, not a lock: a child forked while
//! another thread held a lock would wait for it forever.
//!
//! [`release`] closes every kept backend, and with them the descriptors and mappings they hold
//! in this process (BPF programs, maps and links, `anon_inode:bpf-map` mappings, a daemon
//! socket, /proc directories): taskdiag.psutil does so before it reports the caller's own
//! open descriptors or mappings, which are then the program's own, as psutil sees them.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use taskdiag::BackendKind;
use taskdiag_tools::snapshot::{Error, Source};

struct Kept {
    /// The process that opened it.
    pid: u32,
    kind: BackendKind,
    src: Source,
}

/// How many backends are kept at most (one per thread calling at the same time; more are
/// closed after their call).
const SLOTS: usize = 8;

/// The kept backends: null, or a pointer from `Box::into_raw` owned by the slot.
static POOL: [AtomicPtr<Kept>; SLOTS] = [const { AtomicPtr::new(ptr::null_mut()) }; SLOTS];

/// Counts [`release`] calls: a backend taken before one is closed after its call, not kept.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Takes slot `i`'s backend, if it holds one.
fn take(i: usize) -> Option<Box<Kept>> {
    let p = POOL[i].swap(ptr::null_mut(), Ordering::AcqRel);
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-null pointer in a slot comes from `Box::into_raw` in `keep` and is owned
    // by the slot; the swap above took it out, so no other thread can reach it any more.
    Some(unsafe { Box::from_raw(p) })
}

/// Keeps `k` in a free slot, or closes it if every slot is taken.
fn keep(k: Box<Kept>) {
    let p = Box::into_raw(k);
    for slot in &POOL {
        if slot
            .compare_exchange(ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
    }
    // SAFETY: `p` comes from `Box::into_raw` above and every exchange failed, so no slot holds
    // it: this is its only owner.
    drop(unsafe { Box::from_raw(p) });
}

/// A kept backend of `kind` opened by this process, taken out of its slot; a parent's
/// (inherited across fork) found on the way is closed.
fn take_kept(kind: BackendKind, pid: u32) -> Option<Box<Kept>> {
    for i in 0..SLOTS {
        let Some(k) = take(i) else { continue };
        if k.pid != pid {
            continue;
        }
        if k.kind == kind {
            return Some(k);
        }
        keep(k);
    }
    None
}

/// Runs `f` with a kept backend of `kind` (opened for `groups` if there is none), and keeps
/// the backend for the next call. A kept backend that fails is opened anew and `f` tried once
/// more.
pub fn with<T>(
    kind: BackendKind,
    groups: u64,
    mut f: impl FnMut(&mut Source) -> Result<T, Error>,
) -> Result<T, Error> {
    let pid = std::process::id();
    let generation = GENERATION.load(Ordering::Acquire);
    let (mut src, reused) = match take_kept(kind, pid) {
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
    if result.is_ok() && GENERATION.load(Ordering::Acquire) == generation {
        keep(Box::new(Kept { pid, kind, src }));
    }
    result
}

/// Closes every kept backend (one another thread uses now is closed when its call ends).
pub fn release() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    for i in 0..SLOTS {
        drop(take(i));
    }
}
