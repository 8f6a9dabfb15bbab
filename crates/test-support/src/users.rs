//! The unprivileged users the tests run programs as, created if missing, and running a
//! program as one of them with no capabilities (setpriv).

use std::ffi::OsStr;
use std::process::Command;

/// An unprivileged user the tests run clients and tools as.
pub const USER: &str = "taskdiag-test";
/// A second unprivileged user, owner of "another user's" processes.
pub const OTHER: &str = "taskdiag-other";
/// The uid of `nobody` on these machines (the kernel's overflow uid).
pub const NOBODY_UID: u32 = 65534;

/// `id -u NAME` or `id -g NAME`, if the user exists.
fn id(flag: &str, name: &str) -> Option<u32> {
    let o = Command::new("id")
        .args([flag, name])
        .output()
        .expect("running id");
    if !o.status.success() {
        return None;
    }
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
}

/// The uid of `name`, creating the (system, no home, no shell) user if missing.
pub fn user(name: &str) -> u32 {
    if let Some(uid) = id("-u", name) {
        return uid;
    }
    // Concurrent tests may race to create it; whoever loses sees it exist.
    let _ = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ])
        .status();
    id("-u", name).unwrap_or_else(|| panic!("user {name} missing and useradd failed"))
}

/// The primary gid of user `name` (created if missing).
pub fn user_gid(name: &str) -> u32 {
    user(name);
    id("-g", name).unwrap_or_else(|| panic!("no gid for user {name}"))
}

/// The uid of `name`, which must exist.
pub fn uid_of(name: &str) -> u32 {
    id("-u", name).unwrap_or_else(|| panic!("no user {name} on this system"))
}

/// The uid of `name`, if that user exists.
pub fn existing_uid(name: &str) -> Option<u32> {
    id("-u", name)
}

/// The gid of group `name`, creating the (system) group if missing.
pub fn group(name: &str) -> u32 {
    let get = || {
        Command::new("getent")
            .args(["group", name])
            .output()
            .expect("running getent")
    };
    let mut o = get();
    if !o.status.success() {
        // Concurrent tests may race to create it; whoever loses sees it exist.
        let _ = Command::new("groupadd").args(["--system", name]).status();
        o = get();
    }
    assert!(
        o.status.success(),
        "group {name} missing and groupadd failed"
    );
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .split(':')
        .nth(2)
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("no gid in getent's line for group {name}"))
}

/// The setpriv options that run a program as `name` (its groups) with no capabilities.
fn setpriv_args(name: &str) -> [&str; 6] {
    [
        "--reuid",
        name,
        "--regid",
        name,
        "--init-groups",
        "--inh-caps=-all",
    ]
}

/// `prog` run as `name` (created if missing) with no capabilities, through setpriv (which
/// execs it: the child's pid is the program's).
pub fn as_user(name: &str, prog: impl AsRef<OsStr>) -> Command {
    user(name);
    let mut c = Command::new("setpriv");
    c.args(setpriv_args(name)).arg("--").arg(prog);
    c
}

/// [`as_user`] as a shell command prefix, for test scripts.
pub fn as_user_sh(name: &str) -> String {
    user(name);
    format!("setpriv {}", setpriv_args(name).join(" "))
}
