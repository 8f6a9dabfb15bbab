//! Builds the bench's own programs into OUT_DIR; nothing here is part of what taskdiag ships.
//!
//! 1. The BPF floors, compiled with clang (BPF target, CO-RE) against the kernel type header of
//!    crates/bpf (`vmlinux_min.h`, included by path, never edited here):
//!    `src/bpf/min_iter.bpf.c` to `min_iter.bpf.o`, the object the C reader loads, and
//!    `src/bpf/vma_floor.bpf.c` to the libbpf-rs skeleton `vma_floor.skel.rs` (mode `vma-floor`).
//! 2. The C floors, linked as executables with the system C compiler: `proc_loop` (the article's
//!    `task_proc_all`) and `min_iter` (a bare libbpf reader of `min_iter.bpf.o`), the latter
//!    against the libbpf that libbpf-sys bundles, so it needs no libbpf-dev.
//!
//! clang is found as crates/bpf finds it (`crates/bpf/find_clang.rs`, included by path).
use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

/// Where the kernel types the programs read are declared (crates/bpf's header).
const KERNEL_TYPES: &str = "../bpf/src/bpf";

/// `$CLANG` or the first clang on PATH (crates/bpf's lookup, shared by path).
#[path = "../bpf/find_clang.rs"]
mod find_clang;

fn clang() -> PathBuf {
    find_clang::find_clang().unwrap_or_else(|| {
        panic!(
            "taskdiag-bench needs clang to compile its BPF programs (scripts/setup installs \
             clang-14, or point $CLANG at one)"
        )
    })
}

/// Runs the system C compiler on `args`, panicking with its command line on failure.
fn cc(args: &[&std::ffi::OsStr]) {
    let tool = cc::Build::new()
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler();
    let mut cmd = Command::new(tool.path());
    cmd.args(["-O2", "-Wall", "-Werror"]).args(args);
    let ok = cmd.status().is_ok_and(|s| s.success());
    assert!(ok, "building a C floor failed: {cmd:?}");
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let clang = clang();
    let bpf_args = ["-I", KERNEL_TYPES, "-Wall"];

    let min_iter_obj = out.join("min_iter.bpf.o");
    SkeletonBuilder::new()
        .source("src/bpf/min_iter.bpf.c")
        .obj(&min_iter_obj)
        .clang(&clang)
        .clang_args(bpf_args)
        .build()
        .unwrap_or_else(|e| panic!("building src/bpf/min_iter.bpf.c: {e:#}"));
    SkeletonBuilder::new()
        .source("src/bpf/vma_floor.bpf.c")
        .obj(out.join("vma_floor.bpf.o"))
        .clang(&clang)
        .clang_args(bpf_args)
        .build_and_generate(out.join("vma_floor.skel.rs"))
        .unwrap_or_else(|e| panic!("building src/bpf/vma_floor.bpf.c: {e:#}"));

    cc(&[
        "-o".as_ref(),
        out.join("proc_loop").as_os_str(),
        "src/c/proc_loop.c".as_ref(),
    ]);

    // libbpf-sys (links = "bpf") exports its include directory; its libbpf.a sits beside it.
    let include =
        PathBuf::from(env::var_os("DEP_BPF_INCLUDE").expect("libbpf-sys exports its include"));
    let bundled = include.parent().map(|d| d.join("libbpf.a"));
    let libbpf: OsString = match bundled.filter(|a| a.is_file()) {
        Some(a) => a.into(),
        None => "-lbpf".into(), // libbpf-sys built against the system's libbpf
    };
    let mut inc = OsString::from("-I");
    inc.push(&include);
    cc(&[
        inc.as_os_str(),
        "-o".as_ref(),
        out.join("min_iter").as_os_str(),
        "src/c/min_iter.c".as_ref(),
        libbpf.as_os_str(),
        "-lelf".as_ref(),
        "-lz".as_ref(),
    ]);

    for f in [
        "src/bpf/min_iter.bpf.c",
        "src/bpf/vma_floor.bpf.c",
        "src/c/proc_loop.c",
        "src/c/min_iter.c",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    println!(
        "cargo:rerun-if-changed={}",
        Path::new(KERNEL_TYPES).join("vmlinux_min.h").display()
    );
    println!("cargo:rerun-if-changed=../bpf/find_clang.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
}
