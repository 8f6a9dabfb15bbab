//! Starting daemons and running clients for the tests.

#![allow(dead_code)]

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The daemon binary cargo built for these tests.
pub const DAEMON: &str = env!("CARGO_BIN_EXE_taskdiagd");

/// The taskdiag CLI beside the daemon cargo built for these tests (`cargo test --workspace`
/// builds both; a test run of this crate alone builds the CLI on demand, into the same target
/// directory and profile).
pub fn cli() -> PathBuf {
    let p = Path::new(DAEMON).with_file_name("taskdiag");
    if !p.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "taskdiag-cli"]);
        if p.parent().and_then(Path::file_name) == Some("release".as_ref()) {
            c.arg("--release");
        }
        let s = c.status().expect("cargo build");
        assert!(s.success(), "building the taskdiag CLI");
    }
    p
}

/// Held by the tests that load the machine (many threads, clients or big responses) or whose
/// timing matters, so that they do not run at the same time as each other.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The system Python, which the test users can run (a developer's pyenv under /root is out of
/// their reach).
pub const PYTHON: &str = "/usr/bin/python3";

/// The uid of `nobody`, the daemon's user by default on these machines.
pub const OVERFLOW_UID: u32 = 65534;

/// An unprivileged user the tests run clients as.
pub const USER: &str = "taskdiag-test";
/// A second unprivileged user, owner of "another user's" processes.
pub const OTHER: &str = "taskdiag-other";

/// The uid of `name`, creating the (system, no home, no shell) user if missing.
pub fn user(name: &str) -> u32 {
    let id = || Command::new("id").args(["-u", name]).output().expect("id");
    let mut o = id();
    if !o.status.success() {
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
        o = id();
    }
    assert!(o.status.success(), "user {name} missing and useradd failed");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("uid")
}

/// The setpriv arguments that run a program as `name` with no capabilities.
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

/// `prog` run as `name` with no capabilities (setpriv).
pub fn as_user(name: &str, prog: impl AsRef<std::ffi::OsStr>) -> Command {
    user(name);
    let mut c = Command::new("setpriv");
    c.args(setpriv_args(name)).arg("--");
    c.arg(prog);
    c
}

/// [`as_user`] as a shell command prefix, for test scripts.
pub fn as_user_sh(name: &str) -> String {
    user(name);
    format!("setpriv {}", setpriv_args(name).join(" "))
}

/// Runs `script` under `sh` as root in a mount namespace of its own (mounts it makes do not
/// propagate back), returning its output.
pub fn in_private_mounts(script: &str) -> Output {
    output(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
    ]))
}

/// Waits for `child`'s first line on its piped standard output (a fixture saying it is set
/// up) and returns it.
pub fn first_line(child: &mut Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut line)
        .expect("a line from the fixture");
    line
}

/// A running daemon on a private socket; killed (by pid) and its socket removed on drop.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    /// Starts `taskdiagd --foreground --socket <private path>` with `extra` options and waits
    /// until the socket answers.
    pub fn start(extra: &[&str]) -> Daemon {
        Self::start_with(extra, |_| {})
    }

    /// [`Daemon::start`], with `configure` applied to the daemon's command first.
    pub fn start_with(extra: &[&str], configure: impl FnOnce(&mut Command)) -> Daemon {
        // Unprivileged clients must reach the socket: TempDir is 0755. The daemon's default
        // user (nobody, where no taskdiag user exists) owns the directory, so that it can remove
        // its socket when it stops, as it does where it may.
        let dir = TempDir::new("daemon");
        std::os::unix::fs::chown(&dir.0, Some(OVERFLOW_UID), Some(OVERFLOW_UID)).expect("chown");
        let socket = dir.0.join("taskdiag.sock");
        let mut c = Command::new(DAEMON);
        c.arg("--foreground")
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        configure(&mut c);
        let child = c.spawn().expect("start taskdiagd");
        let d = Daemon {
            child,
            socket,
            _dir: dir,
        };
        let t0 = Instant::now();
        while UnixStream::connect(&d.socket).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "taskdiagd did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `/proc/<daemon>/status` field (e.g. "VmRSS", "VmHWM"), in kB.
    pub fn status_kb(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("status");
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("status field")
    }

    /// `taskdiag dump --backend daemon --socket <ours> <args>` run by `cmd` (a Command made by
    /// [`as_user`], or the CLI directly).
    pub fn dump_args(&self, args: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = vec!["dump".into(), "--backend".into(), "daemon".into()];
        v.push("--socket".into());
        v.push(self.socket.display().to_string());
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        let p = dir.0.join("setuid-sleep");
        std::fs::copy("/bin/sleep", &p).expect("copy sleep");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o4755))
            .expect("chmod");
        SetuidSleep { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.0.join("setuid-sleep")
    }
}

/// A private directory (mode 0755, so the test users reach it), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory named after `tag`, this process and a counter.
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("taskdiagd-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `c`, returning its output.
pub fn output(c: &mut Command) -> Output {
    c.output().expect("run command")
}
