//! Starting daemons for the tests; the rest (users, fixtures, /proc reads, binaries) is
//! taskdiag-test-support's, re-exported here for the test modules.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

pub use taskdiag_test_support::dir::TempDir;
pub use taskdiag_test_support::process::{
    in_private_mounts, output, output_within, sh_waits, signal, wait_exec, wait_until, Notify,
    Spawned, PATIENCE,
};
pub use taskdiag_test_support::python::{with_helpers, PYTHON};
pub use taskdiag_test_support::tasks;
pub use taskdiag_test_support::users::{
    as_user, as_user_sh, group, user, NOBODY_UID as OVERFLOW_UID, OTHER, USER,
};

/// The daemon binary cargo built for these tests.
pub const DAEMON: &str = env!("CARGO_BIN_EXE_taskdiagd");

/// The taskdiag CLI, built with the daemon (`cargo test --workspace` builds both).
pub fn cli() -> PathBuf {
    taskdiag_test_support::bins::workspace_bin("taskdiag")
}

/// Held by the tests that load the machine (many threads, clients or big responses) or whose
/// timing matters, so that they do not run at the same time as each other.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running daemon on a private socket; killed (by pid) and its socket removed on drop.
pub struct Daemon {
    proc: Spawned,
    pub socket: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    /// Starts `taskdiagd --foreground --socket <private path>` with `extra` options and waits
    /// until it says it is ready (sd_notify: it listens, has dropped its privileges and is
    /// confined).
    pub fn start(extra: &[&str]) -> Daemon {
        Self::start_with(extra, |_| {})
    }

    /// [`Daemon::start`], with `configure` applied to the daemon's command first.
    pub fn start_with(extra: &[&str], configure: impl FnOnce(&mut Command)) -> Daemon {
        // Unprivileged clients must reach the socket: TempDir is 0755. The daemon's default
        // user (nobody, where no taskdiag user exists) owns the directory, so that it can remove
        // its socket when it stops, as it does where it may.
        let dir = TempDir::new("daemon");
        std::os::unix::fs::chown(dir.path(), Some(OVERFLOW_UID), Some(OVERFLOW_UID))
            .expect("chown");
        let socket = dir.join("taskdiag.sock");
        let mut c = Command::new(DAEMON);
        c.arg("--foreground")
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let ready = Notify::new();
        ready.give(&mut c);
        configure(&mut c);
        let mut proc = Spawned::spawn(&mut c);
        ready.wait_ready(&mut proc, "taskdiagd");
        Daemon {
            proc,
            socket,
            _dir: dir,
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The daemon process, to signal or wait for.
    pub fn process(&mut self) -> &mut Spawned {
        &mut self.proc
    }

    /// A `/proc/<daemon>/status` field (e.g. "VmRSS", "VmHWM" in kB, "Threads").
    pub fn status_kb(&self, field: &str) -> u64 {
        tasks::status_number(self.pid(), field)
            .unwrap_or_else(|| panic!("no {field} in taskdiagd's /proc/{}/status", self.pid()))
    }

    /// Whether this daemon serves memory maps: on a kernel without the BPF map walk it
    /// declines them (checked here, as USER, so that a test of what it serves can stop there).
    pub fn serves_maps(&self) -> bool {
        if taskdiag_test_support::bins::bpf_map_walk() {
            return true;
        }
        let o = output(as_user(USER, cli()).args(self.dump_args(&["--groups", "vma"])));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.code() == Some(3) && e.contains("vma group is not served by taskdiagd"),
            "without a map walk the daemon must decline maps: {e}"
        );
        eprintln!("no BPF map walk on this kernel: taskdiagd declines maps ({e})");
        false
    }

    /// `dump --backend daemon --socket <ours> <args>`: the CLI's arguments to ask this daemon.
    pub fn dump_args(&self, args: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = vec!["dump".into(), "--backend".into(), "daemon".into()];
        v.push("--socket".into());
        v.push(self.socket.display().to_string());
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }
}

/// A root-owned, set-user-ID copy of sleep(1) in a directory of its own: the "su" or "passwd"
/// an attacker would exec, whose memory maps are what ASLR protects. Its path names it in
/// every memory map it appears in.
pub struct SetuidSleep {
    dir: TempDir,
}

impl SetuidSleep {
    pub fn new() -> SetuidSleep {
        let dir = TempDir::new("setuid");
        let p = dir.join("setuid-sleep");
        std::fs::copy("/bin/sleep", &p).expect("copy sleep");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o4755))
            .expect("chmod");
        SetuidSleep { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("setuid-sleep")
    }
}

/// A process of `user` that prints "ready" once set up (non-dumpable when asked), then sleeps.
pub fn user_sleeper(user: &str, nondumpable: bool) -> Spawned {
    let code = format!(
        "import ctypes, sys, time\n{}print('ready', flush=True)\ntime.sleep(120)\n",
        if nondumpable {
            "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
        } else {
            ""
        }
    );
    let mut c = Spawned::spawn(
        as_user(user, PYTHON)
            .args(["-c", &code])
            .stdout(Stdio::piped()),
    );
    c.expect_line("ready");
    c
}
