//! Builds the profiler's BPF program (`src/bpf/profile.bpf.c`) and its libbpf-rs skeleton.
//!
//! The records it shares with Rust come from `taskdiag_proto::layout::c_header()` (written to
//! OUT_DIR as `taskdiag_wire.h`, as crates/bpf does), the kernel types and the task-state
//! helpers from crates/bpf's headers (`vmlinux_min.h`, `task_state.h`, included by path, never
//! copied). clang is found as crates/bpf finds it (`crates/bpf/find_clang.rs`).
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

#[path = "../bpf/find_clang.rs"]
mod find_clang;

const SRC: &str = "src/bpf/profile.bpf.c";
/// Where the kernel types and task_state.h are (crates/bpf's headers).
const KERNEL_TYPES: &str = "../bpf/src/bpf";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    taskdiag_proto::layout::write_c_header(&out);
    let clang = find_clang::find_clang().unwrap_or_else(|| {
        panic!(
            "taskdiag-profile needs clang to compile its BPF program: install it with \
             `scripts/setup` (or: apt-get install clang-14), or point $CLANG at one"
        )
    });
    SkeletonBuilder::new()
        .source(SRC)
        .obj(out.join("profile.bpf.o"))
        .clang(&clang)
        .clang_args([
            "-I".as_ref(),
            out.as_os_str(),
            "-I".as_ref(),
            KERNEL_TYPES.as_ref(),
            "-Wall".as_ref(),
        ])
        .build_and_generate(out.join("profile.skel.rs"))
        .unwrap_or_else(|e| panic!("building {SRC} with {}: {e:#}", clang.display()));
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-changed={KERNEL_TYPES}/vmlinux_min.h");
    println!("cargo:rerun-if-changed={KERNEL_TYPES}/task_state.h");
    println!("cargo:rerun-if-changed=../bpf/find_clang.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
}
