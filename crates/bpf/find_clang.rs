//! The clang lookup shared by the build scripts that compile BPF C (this crate's and
//! crates/bench's, which includes this file by path): `$CLANG`, else the first of `clang`,
//! `clang-19` .. `clang-14` found on PATH (scripts/setup installs clang-14).
use std::env;
use std::path::PathBuf;

/// The clang to compile BPF programs with, or None when there is none.
pub fn find_clang() -> Option<PathBuf> {
    if let Some(c) = env::var_os("CLANG") {
        return Some(PathBuf::from(c));
    }
    let path = env::var_os("PATH")?;
    let names = ["clang".to_string()]
        .into_iter()
        .chain((14..=19).rev().map(|v| format!("clang-{v}")));
    for name in names {
        for dir in env::split_paths(&path) {
            let p = dir.join(&name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}
