//! The `vma-floor` mode (row B7): the kernel's `iter/task_vma` walk with a program that visits
//! every mapping and writes nothing (src/bpf/vma_floor.bpf.c), the floor of any BPF map dump.

use std::io::{self, Read};
use std::mem::MaybeUninit;

use anyhow::Context;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::Iter;

// Generated code.
#[allow(
    clippy::all,
    clippy::unwrap_used,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    unused_imports,
    dead_code
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/vma_floor.skel.rs"));
}

/// Loads the program, reads its iterator to the end and returns the mappings it visited.
pub fn walk() -> anyhow::Result<u64> {
    let mut obj = MaybeUninit::uninit();
    let skel = skel::VmaFloorSkelBuilder::default()
        .open(&mut obj)
        .and_then(|open| open.load())
        .context("loading vma_floor.bpf.o (needs root, or CAP_BPF and CAP_PERFMON)")?;
    let link = skel
        .progs
        .walk_vma_floor
        .attach()
        .context("attaching walk_vma_floor")?;
    let mut it = Iter::new(&link).context("creating the iterator")?;
    let mut buf = [0u8; 4096];
    loop {
        match it.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            // After a million mappings visited with nothing written (bpf_seq_read's
            // MAX_ITER_OBJECTS), the kernel returns EAGAIN and keeps its place: read on.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => return Err(e).context("reading the iter/task_vma walk"),
        }
    }
    Ok(skel.maps.bss_data.as_deref().map_or(0, |b| b.floor_vmas))
}
