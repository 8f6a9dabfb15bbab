//! Builds the BPF programs and their Rust skeleton.
//!
//! 1. Writes `taskdiag_wire.h` into OUT_DIR from `taskdiag_proto::layout::c_header()`, so the C
//!    records are generated from the same definitions as the Rust ones.
//! 2. Compiles `src/bpf/taskdiag.bpf.c` with clang (BPF target, CO-RE) and generates the
//!    libbpf-rs skeleton `taskdiag.skel.rs` into OUT_DIR.
//!
//! clang is found by `find_clang.rs` (shared with crates/bench); a machine without it gets a
//! message naming the package (scripts/setup installs it).
use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

#[path = "find_clang.rs"]
mod find_clang;
use find_clang::find_clang;

const SRC: &str = "src/bpf/taskdiag.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    std::fs::write(
        out.join("taskdiag_wire.h"),
        taskdiag_proto::layout::c_header(),
    )
    .expect("write taskdiag_wire.h");

    let Some(clang) = find_clang() else {
        panic!(
            "taskdiag-bpf needs clang to compile its BPF programs, and libelf-dev to link libbpf.\n\
             Install them with `scripts/setup` (or: apt-get install clang-14 libelf-dev),\n\
             or point $CLANG at a clang binary."
        );
    };
    let skel = out.join("taskdiag.skel.rs");
    SkeletonBuilder::new()
        .source(SRC)
        .clang(&clang)
        .clang_args([
            "-I".as_ref(),
            out.as_os_str(),
            "-I".as_ref(),
            Path::new("src/bpf").as_os_str(),
            // taskdiag_wire.h (OUT_DIR) and vmlinux_min.h (src/bpf) replace kernel headers.
            "-Wall".as_ref(),
        ])
        .build_and_generate(&skel)
        .unwrap_or_else(|e| panic!("building {SRC} with {}: {e:#}", clang.display()));
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-changed=src/bpf/vmlinux_min.h");
    println!("cargo:rerun-if-changed=find_clang.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
}
