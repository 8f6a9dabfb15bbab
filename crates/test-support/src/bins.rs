//! The workspace's binaries, as cargo built them for this test run.
//!
//! A test finds its own crate's binaries with `env!("CARGO_BIN_EXE_<name>")`. Another crate's
//! binary (the CLI from the daemon's tests, the daemon from the CLI's) sits in the same target
//! directory and profile as the test executable, which cargo runs from
//! `target/<profile>/deps/`. `cargo test --workspace` builds every binary of a package with
//! integration tests before it runs any test, but not a library's `cdylib` (the Python module):
//! `make test` builds the workspace first. A test never builds one itself.

use std::path::PathBuf;

/// The workspace binary `name` of the profile this test was built with
/// (`target/<profile>/<name>`). Panics with the path and how to build it when it is missing.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running test executable");
    // target/<profile>/deps/<test>-<hash>: the binaries are in target/<profile>.
    let profile_dir = exe
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(|d| d.parent())
        .unwrap_or_else(|| {
            panic!(
                "test executable {} is not in a cargo target/<profile>/deps directory",
                exe.display()
            )
        });
    let bin = profile_dir.join(name);
    assert!(
        bin.is_file(),
        "{} is not built: build the workspace first with `cargo build --workspace` and the same \
         profile, as `make test` does (cargo test builds the binaries of the packages it tests, \
         not the Python module lib_taskdiag.so)",
        bin.display()
    );
    bin
}

/// Whether the BPF backend walks memory maps on this kernel (iter/task_vma, Linux 5.12 and
/// later), as `taskdiag dump -b bpf -s` reports it (run as root): without the walk, VMA is
/// completed from /proc, and taskdiagd does not serve it.
pub fn bpf_map_walk() -> bool {
    // A fact of the kernel: asked once per test binary (each ask loads the BPF programs).
    static WALK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WALK.get_or_init(|| {
        let pid = std::process::id().to_string();
        let o = std::process::Command::new(workspace_bin("taskdiag"))
            .args(["dump", "--pid", &pid, "--groups", "vma", "-b", "bpf", "-s"])
            .output()
            .expect("run taskdiag dump -s");
        let summary = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "taskdiag dump -b bpf -s: {summary}");
        !summary
            .split_once("from /proc: ")
            .is_some_and(|(_, l)| l.split([',', ';']).any(|g| g.trim() == "vma"))
    })
}
