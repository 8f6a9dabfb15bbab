//! The loaded programs a [`crate::TaskIter`] runs, whoever loaded them: this process (its
//! skeleton, perhaps also pinned for later processes) or an earlier process (a pinned slot,
//! see `pin`). One interface for what the dumps use: the programs' descriptors, their
//! configuration globals and the ring buffer; and the one way iterators are attached.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use libbpf_rs::{AsRawLibbpf, MapCore};

use crate::pin::{self, Slot};
use crate::skel::{types, TaskdiagSkel};

pub(crate) enum Programs {
    /// Loaded by this process; with the lock and path of the slot they were also pinned as.
    Own {
        skel: Box<TaskdiagSkel<'static>>,
        pinned: Option<(OwnedFd, PathBuf)>,
    },
    /// Pinned by an earlier process; this process holds the slot.
    Pinned(Box<Slot>),
}

impl Programs {
    pub(crate) fn bss(&self) -> Option<&types::bss> {
        match self {
            Programs::Own { skel, .. } => skel.maps.bss_data.as_deref(),
            Programs::Pinned(s) => Some(s.bss.get()),
        }
    }

    pub(crate) fn bss_mut(&mut self) -> Option<&mut types::bss> {
        match self {
            Programs::Own { skel, .. } => skel.maps.bss_data.as_deref_mut(),
            Programs::Pinned(s) => Some(s.bss.get_mut()),
        }
    }

    pub(crate) fn data(&self) -> Option<&types::data> {
        match self {
            Programs::Own { skel, .. } => skel.maps.data_data.as_deref(),
            Programs::Pinned(s) => Some(s.data.get()),
        }
    }

    pub(crate) fn ring(&self) -> &dyn MapCore {
        match self {
            Programs::Own { skel, .. } => &skel.maps.out_rb,
            Programs::Pinned(s) => &s.ring,
        }
    }

    /// The descriptor of program `name` (the skeleton's name), if it is loaded.
    pub(crate) fn prog(&self, name: &str) -> Option<BorrowedFd<'_>> {
        match self {
            Programs::Own { skel, .. } => skel_prog(skel, name),
            Programs::Pinned(s) => s.prog(name),
        }
    }

    /// Where these programs are pinned, if they are.
    pub(crate) fn pinned_at(&self) -> Option<&Path> {
        match self {
            Programs::Own { pinned, .. } => pinned.as_ref().map(|(_, p)| p.as_path()),
            Programs::Pinned(s) => Some(s.path()),
        }
    }

    /// Pins this process's programs as a new slot for later processes (best effort: sharing
    /// off or impossible, or every slot taken, leaves them private).
    pub(crate) fn pin(&mut self) {
        let Programs::Own { skel, pinned } = self else {
            return;
        };
        if pinned.is_some() {
            return;
        }
        // The loaded ones only.
        let progs = pin::PROGS
            .iter()
            .filter_map(|&n| Some((n, skel_prog(skel, n)?)))
            .collect();
        let objs = pin::Objects {
            progs,
            bss: skel.maps.bss.as_fd(),
            data: skel.maps.data.as_fd(),
            ring: skel.maps.out_rb.as_fd(),
        };
        *pinned = pin::pin(&objs);
    }
}

/// The descriptor of the skeleton's program `name`, if it is loaded.
fn skel_prog<'a>(skel: &'a TaskdiagSkel<'static>, name: &str) -> Option<BorrowedFd<'a>> {
    let p = &skel.progs;
    let raw = match name {
        "dump_task" => p.dump_task.as_libbpf_object(),
        "dump_task_bounded" => p.dump_task_bounded.as_libbpf_object(),
        "dump_task_cmdline" => p.dump_task_cmdline.as_libbpf_object(),
        "dump_task_both" => p.dump_task_both.as_libbpf_object(),
        // The map walk, in whichever flavour loaded (pinned under one name).
        "dump_vma" => {
            let walk = p.dump_vma_walk.as_libbpf_object();
            // SAFETY: `walk` is a program of the skeleton, alive as long as the borrow.
            if unsafe { libbpf_sys::bpf_program__fd(walk.as_ptr()) } >= 0 {
                walk
            } else {
                p.dump_vma.as_libbpf_object()
            }
        }
        "task_root" => p.task_root.as_libbpf_object(),
        _ => return None,
    };
    // SAFETY: `raw` is a program of the skeleton, alive as long as the borrow.
    let fd = unsafe { libbpf_sys::bpf_program__fd(raw.as_ptr()) };
    // SAFETY: a non-negative fd is a loaded program's, owned by the skeleton, which outlives
    // the borrow.
    (fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
}

/// An iterator link: one program attached for one set of tasks (also taskdiag profile's
/// off-CPU walk, for one process's threads).
pub struct IterLink(OwnedFd);

impl IterLink {
    /// Attaches program `prog`, for the task iterator's link parameters `info` (`None`: every
    /// task).
    pub fn attach(
        prog: BorrowedFd<'_>,
        info: Option<&mut libbpf_sys::bpf_iter_link_info>,
    ) -> io::Result<IterLink> {
        let mut opts = libbpf_sys::bpf_link_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
            ..Default::default()
        };
        if let Some(info) = info {
            opts.iter_info = info;
            opts.iter_info_len = std::mem::size_of::<libbpf_sys::bpf_iter_link_info>() as _;
        }
        // SAFETY: `prog` is a loaded program; `opts` and what it points to outlive the call,
        // which copies what it needs.
        let fd = unsafe {
            libbpf_sys::bpf_link_create(prog.as_raw_fd(), 0, libbpf_sys::BPF_TRACE_ITER, &opts)
        };
        fd_or_errno(fd).map(IterLink)
    }

    /// A new walk of this link, to be read to its end.
    pub fn walk(&self) -> io::Result<File> {
        // SAFETY: `self.0` is a valid link descriptor.
        let fd = unsafe { libbpf_sys::bpf_iter_create(self.0.as_raw_fd()) };
        fd_or_errno(fd).map(File::from)
    }
}

/// A descriptor returned by libbpf (negative: -errno).
fn fd_or_errno(fd: i32) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: a non-negative return of a libbpf call that creates a descriptor is ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
