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

    /// Whether the map walk loaded is `dump_vma_walk` (files named by probe reads): the
    /// skeleton's own for programs this process loaded, the kernel's name of the program for a
    /// pinned slot (which holds either flavour as `dump_vma`).
    pub(crate) fn vma_is_walk(&self) -> bool {
        match self {
            Programs::Own { skel, .. } => {
                loaded(skel.progs.dump_vma_walk.as_libbpf_object()).is_some()
            }
            Programs::Pinned(s) => s.prog("dump_vma").and_then(prog_info).is_some_and(|info| {
                let name: Vec<u8> = info
                    .name
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                name == b"dump_vma_walk"
            }),
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
    match name {
        "dump_task" => loaded(p.dump_task.as_libbpf_object()),
        "dump_task_bounded" => loaded(p.dump_task_bounded.as_libbpf_object()),
        "dump_task_cmdline" => loaded(p.dump_task_cmdline.as_libbpf_object()),
        "dump_task_both" => loaded(p.dump_task_both.as_libbpf_object()),
        // The map walk, in whichever flavour loaded (pinned under one name).
        "dump_vma" => loaded(p.dump_vma_walk.as_libbpf_object())
            .or_else(|| loaded(p.dump_vma.as_libbpf_object())),
        "task_root" => loaded(p.task_root.as_libbpf_object()),
        _ => None,
    }
}

/// The descriptor of a skeleton program, if the kernel loaded it.
fn loaded<'a>(raw: std::ptr::NonNull<libbpf_sys::bpf_program>) -> Option<BorrowedFd<'a>> {
    // SAFETY: `raw` is a program of a skeleton the caller borrows for 'a.
    let fd = unsafe { libbpf_sys::bpf_program__fd(raw.as_ptr()) };
    // SAFETY: a non-negative fd is a loaded program's, owned by the skeleton, which outlives
    // the borrow.
    (fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
}

/// The kernel's record of the loaded program `fd`.
pub(crate) fn prog_info(fd: BorrowedFd<'_>) -> Option<libbpf_sys::bpf_prog_info> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a bpf_prog_info of `len` bytes, which the kernel fills (up to the size
    // it knows); `fd` is a loaded program's descriptor.
    let r = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    (r == 0).then_some(info)
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
