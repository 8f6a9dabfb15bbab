//! Builds the BPF programs and their Rust skeleton.
//!
//! 1. Writes `taskdiag_wire.h` into OUT_DIR from `taskdiag_proto::layout::c_header()`, so the C
//!    records are generated from the same definitions as the Rust ones.
//! 2. Compiles `src/bpf/taskdiag.bpf.c` with clang (BPF target, CO-RE) and generates the
//!    libbpf-rs skeleton `taskdiag.skel.rs` into OUT_DIR; the same for the change tracker,
//!    `src/bpf/track.bpf.c` (`track.skel.rs`).
//!
//! 3. Writes `object_key.rs`: a digest of the compiled object and of this crate's sources, which
//!    names the directory programs are pinned under (`src/pin.rs`), so that programs pinned by
//!    another build are never reused.
//!
//! clang is found by `find_clang.rs` (shared with crates/bench); a machine without it gets a
//! message naming the package (scripts/setup installs it).
use std::env;
use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

#[path = "find_clang.rs"]
mod find_clang;
use find_clang::find_clang;

const SRC: &str = "src/bpf/taskdiag.bpf.c";
const TRACK_SRC: &str = "src/bpf/track.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    taskdiag_proto::layout::write_c_header(&out);

    let Some(clang) = find_clang() else {
        panic!(
            "taskdiag-bpf needs clang to compile its BPF programs, and libelf-dev to link libbpf.\n\
             Install them with `scripts/setup` (or: apt-get install clang-14 libelf-dev),\n\
             or point $CLANG at a clang binary."
        );
    };
    let skel = out.join("taskdiag.skel.rs");
    let obj = out.join("taskdiag.bpf.o");
    SkeletonBuilder::new()
        .source(SRC)
        .obj(&obj)
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
    // The change tracker (src/track.rs): a separate object, loaded by the process that uses it.
    SkeletonBuilder::new()
        .source(TRACK_SRC)
        .obj(out.join("track.bpf.o"))
        .clang(&clang)
        .clang_args([
            "-I".as_ref(),
            Path::new("src/bpf").as_os_str(),
            "-Wall".as_ref(),
        ])
        .build_and_generate(out.join("track.skel.rs"))
        .unwrap_or_else(|e| panic!("building {TRACK_SRC} with {}: {e:#}", clang.display()));
    write_object_key(&obj, &out);
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-changed={TRACK_SRC}");
    println!("cargo:rerun-if-changed=src/bpf/vmlinux_min.h");
    println!("cargo:rerun-if-changed=src/bpf/task_state.h");
    println!("cargo:rerun-if-changed=find_clang.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
}

/// Writes `object_key.rs`: a digest of the object and of every file under `src/` (the Rust
/// that configures the programs at load time as well as the C). SipHash with fixed keys: the
/// same inputs give the same key in every build of this compiler, and a change to any of them
/// gives another.
fn write_object_key(obj: &Path, out: &Path) {
    let mut h = DefaultHasher::new();
    h.write(&std::fs::read(obj).expect("read the compiled BPF object"));
    let mut files = Vec::new();
    walk(Path::new("src"), &mut files);
    files.sort();
    for f in &files {
        h.write(f.to_string_lossy().as_bytes());
        h.write(&std::fs::read(f).expect("read a source file"));
    }
    h.write(env!("CARGO_PKG_VERSION").as_bytes());
    std::fs::write(
        out.join("object_key.rs"),
        format!(
            "/// Identifies this build's programs (see build.rs).\n\
             pub(crate) const OBJECT_KEY: &str = \"{:016x}\";\n",
            h.finish()
        ),
    )
    .expect("write object_key.rs");
    println!("cargo:rerun-if-changed=src");
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src/").flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, files);
        } else {
            files.push(p);
        }
    }
}
