//! A process whose memory-map lock is wedged, for testing that taskdiag does not hang on it.
//!
//! This module owns the fixture `wedge_fixture.c` (built with `cc` when a test starts one) and
//! the [`Wedged`] handle that starts, checks and releases it. The fixture serves a FUSE file
//! system itself (no libfuse) on a temporary directory and forks a target, `wedge-target
//! --marker TOKEN`, that maps the file system's one file and reads it while another of its
//! threads maps and unmaps memory in a loop. The server fails the file's first two READs with
//! EIO and never answers the third, which the kernel sends from the fault's retry with the
//! target's mmap lock held for reading; the looping thread then waits for the lock for
//! writing, and from then on every reader of the target's mm sleeps (killably) until the
//! server lets go: /proc/PID/cmdline, environ, smaps_rollup, mem, bpf_copy_from_user_task.
//! What does not read the target's memory still answers: /proc/PID/stat, status, comm, statm
//! (and, on kernels reading them under per-VMA locks, as 6.18 does, its maps).
//!
//! [`Wedged::start`] returns once the fixture has verified the wedge (a READ held, the looping
//! thread asleep in the kernel, a probe reading /proc/PID/cmdline asleep and unanswered after
//! 200 ms). [`Wedged::unwedge`] (or dropping it) stops the server with SIGTERM, which aborts the
//! FUSE connection: the held READ fails, the lock is released, the target is killed and reaped,
//! the file system unmounted. Only processes it started are signalled, by pid (and the
//! process group the server leads, the target's).
//!
//! Tests that need it call [`Wedged::start_or_skip`]: without FUSE (no /dev/fuse, or a mount
//! refused) it skips the test with a message, unless `CI` is set, where it fails it.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::dir::TempDir;
use crate::process::{self, Spawned, PATIENCE};
use crate::tasks;

/// How long [`Wedged::start`] waits for the fixture to say the lock is wedged (it takes
/// about 0.25 s; the fixture itself gives up after 20 s).
pub const START_LIMIT: Duration = Duration::from_secs(30);

/// How long [`Wedged::is_wedged`] waits for /proc/PID/cmdline to answer before it calls the
/// process wedged (if the reading thread is asleep in the kernel by then).
pub const WEDGED_AFTER: Duration = Duration::from_millis(300);

/// The fixture's exit status when FUSE is unavailable (no /dev/fuse, or the mount refused).
const EXIT_UNAVAILABLE: i32 = 3;

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/wedge_fixture.c");

/// A running wedge fixture: the target process `pid`, whose mmap lock is wedged, and the FUSE
/// server holding it. Released by [`Wedged::unwedge`] or on drop.
#[derive(Debug)]
pub struct Wedged {
    /// The wedged process (`wedge-target --marker MARKER`, comm `wedge-target`).
    pub pid: u32,
    /// The argument after `--marker` in the target's command line, unique to this fixture.
    /// (The server's command line does not carry it.)
    pub marker: String,
    /// The FUSE server (`wedge_fixture MOUNT`, comm `wedge_fixture`), the target's parent,
    /// which is not wedged.
    pub server: u32,
    /// The target's thread waiting for the lock for writing (comm `wedge-writer`).
    pub writer: u32,
    /// Where the FUSE file system is mounted (`fuse.taskdiag-wedge`).
    pub mount: PathBuf,
    proc: Option<Spawned>,
    /// A pidfd for the target, taken while it could not exit: its exit and its reaping are
    /// then seen whatever becomes of its pid.
    target_fd: Option<OwnedFd>,
    /// The start times (clock ticks since boot) of the server and the target.
    starts: (u64, u64),
    dir: Option<TempDir>,
}

/// Why a fixture did not start.
enum StartError {
    /// FUSE is unavailable here.
    Unavailable(String),
    /// Anything else: a failure of the fixture or of the test system.
    Failed(String),
}

impl Wedged {
    /// Builds and starts a fixture and waits until the target's lock is wedged. The error
    /// says why not, naming the path or pid concerned; when FUSE is unavailable it says so
    /// ("/dev/fuse: No such file or directory: the wedged-lock tests need FUSE (modprobe
    /// fuse)").
    pub fn start() -> Result<Wedged, String> {
        Self::try_start().map_err(|e| match e {
            StartError::Unavailable(m) | StartError::Failed(m) => m,
        })
    }

    /// [`Wedged::start`] for a test: `None`, after printing why the test is skipped, when
    /// FUSE is unavailable, unless the environment variable `CI` is set (and neither empty,
    /// `0` nor `false`), where FUSE is required and this panics. Panics on any other failure.
    pub fn start_or_skip() -> Option<Wedged> {
        match Self::try_start() {
            Ok(w) => Some(w),
            Err(StartError::Unavailable(m)) if !in_ci() => {
                eprintln!("skipping a wedged-lock test: {m}");
                None
            }
            Err(StartError::Unavailable(m)) => {
                panic!("{m} (CI is set, and CI must run the wedged-lock tests)")
            }
            Err(StartError::Failed(m)) => panic!("{m}"),
        }
    }

    fn try_start() -> Result<Wedged, StartError> {
        if !Path::new("/dev/fuse").exists() {
            return Err(StartError::Unavailable(
                "/dev/fuse: No such file or directory: the wedged-lock tests need FUSE \
                 (modprobe fuse)"
                    .into(),
            ));
        }
        let dir = TempDir::new("wedge");
        let mount = dir.join("mnt");
        std::fs::create_dir(&mount)
            .map_err(|e| StartError::Failed(format!("creating {}: {e}", mount.display())))?;
        let exe = dir.join("wedge_fixture");
        let o = Command::new("cc")
            .args(["-O1", "-pthread", "-Wall", "-o"])
            .arg(&exe)
            .arg(SOURCE)
            .output()
            .map_err(|e| {
                StartError::Failed(format!(
                    "running cc to build {SOURCE} (gcc and libc6-dev, linux-libc-dev): {e}"
                ))
            })?;
        if !o.status.success() {
            return Err(StartError::Failed(format!(
                "cc {SOURCE}: {}",
                process::stderr(&o)
            )));
        }
        static N: AtomicUsize = AtomicUsize::new(0);
        let marker = format!(
            "taskdiag-wedge-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut proc = Spawned::spawn_group(
            Command::new(&exe)
                .arg(&mount)
                .env("WEDGE_MARKER", &marker)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let server = proc.pid();
        let Some(line) = proc.first_line_within(START_LIMIT) else {
            // It exited (it cleans up after itself), or it is stuck: killed (with the target,
            // its process group) and reaped, and the mount detached if it is left.
            let status = proc.wait_exit(Duration::from_secs(5));
            let err = stderr_of(&mut proc);
            drop_detached(proc, &mount);
            return Err(match status {
                None => StartError::Failed(format!(
                    "wedge fixture {server} ({}) did not say it was ready within \
                     {START_LIMIT:?}; killed: {}",
                    exe.display(),
                    err.trim_end()
                )),
                Some(s) if s.code() == Some(EXIT_UNAVAILABLE) => {
                    StartError::Unavailable(err.trim_end().to_owned())
                }
                Some(s) => StartError::Failed(format!(
                    "wedge fixture {server} ({}) exited ({s}) before it was ready: {}",
                    exe.display(),
                    err.trim_end()
                )),
            });
        };
        let fail = |proc: Spawned, msg: String| {
            drop_detached(proc, &mount);
            Err(StartError::Failed(msg))
        };
        let Some((said_server, pid, writer)) = parse_ready(&line) else {
            return fail(
                proc,
                format!(
                    "wedge fixture {server}'s readiness line is not \
                     \"ready server=PID target=PID writer=TID\": {line:?}"
                ),
            );
        };
        if said_server != server {
            return fail(
                proc,
                format!("wedge fixture {server} says it is process {said_server}"),
            );
        }
        // The target cannot exit while wedged: its pid is its own until the fixture ends.
        let target_fd = match process::pidfd(pid) {
            Ok(fd) => fd,
            Err(e) => return fail(proc, format!("pidfd_open({pid}), the wedged target: {e}")),
        };
        let ppid = tasks::status(pid)
            .and_then(|s| tasks::status_field(&s, "PPid").map(str::to_owned))
            .unwrap_or_default();
        let starts = (tasks::start_ticks(server), tasks::start_ticks(pid));
        let (Some(s0), Some(t0)) = starts else {
            return fail(
                proc,
                format!("wedge fixture {server} or its target {pid} vanished"),
            );
        };
        if ppid != server.to_string() || tasks::comm(pid).as_deref() != Some("wedge-target") {
            return fail(
                proc,
                format!(
                    "process {pid} is not wedge fixture {server}'s wedge-target \
                     (its parent: {ppid:?})"
                ),
            );
        }
        Ok(Wedged {
            pid,
            marker,
            server,
            writer,
            mount,
            proc: Some(proc),
            target_fd: Some(target_fd),
            starts: (s0, t0),
            dir: Some(dir),
        })
    }

    /// Whether /proc/PID/cmdline of the target still does not answer. The read is made by a
    /// thread of this process, waited for at most [`WEDGED_AFTER`] (longer only while that
    /// thread has not yet gone to sleep in the kernel: a loaded machine's delay is not taken
    /// for a wedge). A reader left asleep returns once the fixture is released.
    pub fn is_wedged(&self) -> bool {
        if self.proc.is_none() {
            return false;
        }
        let pid = self.pid;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // SAFETY: gettid has no arguments and cannot fail.
            let tid = unsafe { libc::gettid() } as u32;
            let _ = tx.send(Some(tid));
            let _ = std::fs::read(format!("/proc/{pid}/cmdline"));
            let _ = tx.send(None);
        });
        let Ok(Some(tid)) = rx.recv() else {
            return false;
        };
        let t0 = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_millis(10)) {
                Ok(_) | Err(mpsc::RecvTimeoutError::Disconnected) => return false,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            let asleep = tasks::task_stat(std::process::id(), tid).is_some_and(|f| f[0] == "D");
            if t0.elapsed() >= WEDGED_AFTER && asleep {
                return true;
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "reading /proc/{pid}/cmdline neither answered nor slept within {PATIENCE:?}"
            );
        }
    }

    /// Releases the lock: stops the server (SIGTERM; SIGKILL after [`PATIENCE`]), which aborts
    /// the FUSE connection, kills and reaps the target and unmounts its file system. Checks
    /// that both processes are gone and reaped and the file system unmounted; panics, naming
    /// what is left, if not. Does nothing the second time.
    pub fn unwedge(&mut self) {
        if let Err(e) = self.release() {
            panic!("{e}");
        }
    }

    fn release(&mut self) -> Result<(), String> {
        let mut problems = Vec::new();
        if let Some(mut proc) = self.proc.take() {
            let server = self.server;
            // SAFETY: kill takes plain integers; `server` is our unreaped child (`proc`), so
            // its pid cannot have been reused.
            unsafe { libc::kill(server as libc::pid_t, libc::SIGTERM) };
            match proc.wait_exit(PATIENCE) {
                Some(s) if s.success() => {}
                Some(s) => problems.push(format!(
                    "wedge server {server} exited ({s}) after SIGTERM: {}",
                    stderr_of(&mut proc).trim_end()
                )),
                None => problems.push(format!(
                    "wedge server {server} did not exit within {PATIENCE:?} of SIGTERM: killed"
                )),
            }
            drop(proc);
            if tasks::start_ticks(server) == Some(self.starts.0) {
                problems.push(format!("the wedge server {server} is still there"));
            }
        }
        if let Some(fd) = self.target_fd.take() {
            // Reaped by the server before it exits (by init if the server was killed).
            if !process::wait_until(PATIENCE, || reaped(&fd)) {
                problems.push(format!(
                    "the wedged target {} is still there (or unreaped) {PATIENCE:?} after its \
                     server {} ended",
                    self.pid, self.server
                ));
            }
        }
        if self.dir.is_some() && is_mounted(&self.mount) {
            problems.push(format!(
                "{} is still mounted after the wedge server {} ended: detached",
                self.mount.display(),
                self.server
            ));
            detach(&self.mount);
        }
        if is_mounted(&self.mount) {
            // Never remove a directory with a file system still on it.
            std::mem::forget(self.dir.take());
        }
        self.dir = None;
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for Wedged {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            if std::thread::panicking() {
                eprintln!("releasing a wedge fixture: {e}");
            } else {
                panic!("{e}");
            }
        }
    }
}

/// Whether the environment says this is CI (`CI` set, and neither empty, `0` nor `false`).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

/// The pids in `ready server=PID target=PID writer=TID`.
fn parse_ready(line: &str) -> Option<(u32, u32, u32)> {
    let mut it = line.trim_end().strip_prefix("ready ")?.split(' ');
    let mut field = |name: &str| it.next()?.strip_prefix(name)?.parse().ok();
    Some((field("server=")?, field("target=")?, field("writer=")?))
}

/// Kills and reaps a fixture that did not start (its process group: the target with it) and
/// detaches its mount if it left one.
fn drop_detached(proc: Spawned, mount: &Path) {
    drop(proc);
    if is_mounted(mount) {
        detach(mount);
    }
}

/// What the server wrote on its standard error so far, without waiting for more (its target
/// may hold the pipe open).
fn stderr_of(proc: &mut Spawned) -> String {
    let Some(err) = proc.child().stderr.as_mut() else {
        return String::new();
    };
    let mut v = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let mut p = libc::pollfd {
            fd: err.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut p, 1, 0) } <= 0 {
            break;
        }
        match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => v.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&v).into_owned()
}

/// Whether the process behind pidfd `fd` has been reaped (a zombie can still be signalled).
fn reaped(fd: &OwnedFd) -> bool {
    // SAFETY: pidfd_send_signal with signal 0 and no siginfo only checks the process.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Whether something is mounted on `path` in this process's mount namespace.
pub fn is_mounted(path: &Path) -> bool {
    let info = std::fs::read("/proc/self/mountinfo")
        .unwrap_or_else(|e| panic!("reading /proc/self/mountinfo: {e}"));
    let want = path.as_os_str().as_bytes();
    info.split(|&b| b == b'\n')
        .filter_map(|l| l.split(|&b| b == b' ').nth(4))
        .any(|p| unescape(p) == want)
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(p: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        let oct = p
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) if p[i] == b'\\' => {
                v.push(
                    d.iter()
                        .fold(0u8, |a, c| a.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            _ => {
                v.push(p[i]);
                i += 1;
            }
        }
    }
    v
}

/// Detaches the file system mounted on `path` (MNT_DETACH: at once, even if busy).
fn detach(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } < 0 {
        eprintln!("umount2 {}: {}", path.display(), io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cat /proc/PID/cmdline`, killed (exit 124) by `timeout` after `secs` seconds.
    fn cat_cmdline(pid: u32, secs: u32) -> std::process::Output {
        process::output_within(
            Command::new("timeout")
                .arg(secs.to_string())
                .arg("cat")
                .arg(format!("/proc/{pid}/cmdline")),
            PATIENCE,
        )
    }

    /// Other processes' arguments are read at once: the server's, this test's, init's.
    fn others_answer(w: &Wedged) {
        for pid in [w.server, std::process::id(), 1] {
            if pid == w.server && w.proc.is_none() {
                continue;
            }
            let o = cat_cmdline(pid, 60);
            assert!(
                o.status.success() && !o.stdout.is_empty(),
                "cat /proc/{pid}/cmdline: {} {}",
                o.status,
                process::stderr(&o)
            );
        }
        let server = tasks::read(format!("/proc/{}/cmdline", w.server));
        if w.proc.is_some() {
            let server = server.expect("the server's cmdline");
            let args: Vec<&[u8]> = server.split(|&b| b == 0).collect();
            assert!(
                args.contains(&w.mount.as_os_str().as_bytes())
                    && !args.contains(&w.marker.as_bytes()),
                "the server's arguments: {}",
                String::from_utf8_lossy(&server)
            );
        }
    }

    /// Whether process `pid`, started at `start` (clock ticks), is gone: its pid unused, or
    /// another process's.
    fn gone(pid: u32, start: u64) -> bool {
        tasks::start_ticks(pid) != Some(start)
    }

    #[test]
    fn a_wedged_process_blocks_readers_until_released() {
        let Some(mut w) = Wedged::start_or_skip() else {
            return;
        };
        assert!(is_mounted(&w.mount), "{} not mounted", w.mount.display());
        others_answer(&w);
        assert!(w.is_wedged(), "process {} is not wedged", w.pid);
        let o = cat_cmdline(w.pid, 2);
        assert_eq!(
            o.status.code(),
            Some(124),
            "cat /proc/{}/cmdline was not stuck: {} {:?}",
            w.pid,
            o.status,
            String::from_utf8_lossy(&o.stdout)
        );
        // What does not read the target's memory answers.
        assert_eq!(tasks::comm(w.pid).as_deref(), Some("wedge-target"));
        assert_eq!(
            tasks::read_string(format!("/proc/{}/task/{}/comm", w.pid, w.writer)).as_deref(),
            Some("wedge-writer\n")
        );
        assert_eq!(
            tasks::task_stat(w.pid, w.writer)
                .map(|f| f[0].clone())
                .as_deref(),
            Some("D"),
            "the writer thread {} is not waiting",
            w.writer
        );
        others_answer(&w);
        assert!(w.is_wedged(), "process {} is no longer wedged", w.pid);

        let (server, target, (s0, t0)) = (w.server, w.pid, w.starts);
        w.unwedge();
        assert!(gone(server, s0), "the wedge server {server} is still there");
        assert!(
            gone(target, t0),
            "the wedged target {target} is still there"
        );
        assert!(!is_mounted(&w.mount), "{} still mounted", w.mount.display());
        assert!(!w.is_wedged());
        others_answer(&w);
        w.unwedge();
    }

    #[test]
    fn two_fixtures_are_independent() {
        let Some(mut a) = Wedged::start_or_skip() else {
            return;
        };
        let Some(b) = Wedged::start_or_skip() else {
            return;
        };
        assert_ne!(a.pid, b.pid);
        assert_ne!(a.marker, b.marker);
        assert_ne!(a.mount, b.mount);
        assert!(a.is_wedged() && b.is_wedged());

        let (a_target, a_start) = (a.pid, a.starts.1);
        a.unwedge();
        assert!(
            gone(a_target, a_start),
            "the wedged target {a_target} is still there"
        );
        assert!(!is_mounted(&a.mount));
        assert!(b.is_wedged(), "releasing {} released {}", a_target, b.pid);
        assert_eq!(cat_cmdline(b.pid, 1).status.code(), Some(124));
        others_answer(&b);

        // Dropped without unwedge: released all the same.
        let (b_server, b_target, (s0, t0), mount) = (b.server, b.pid, b.starts, b.mount.clone());
        drop(b);
        assert!(
            gone(b_server, s0),
            "the wedge server {b_server} is still there"
        );
        assert!(
            gone(b_target, t0),
            "the wedged target {b_target} is still there"
        );
        assert!(!is_mounted(&mount), "{} still mounted", mount.display());
        assert!(!mount.exists(), "{} not removed", mount.display());
    }

    #[test]
    fn readiness_lines_and_mount_paths_parse() {
        assert_eq!(
            parse_ready("ready server=10 target=11 writer=12\n"),
            Some((10, 11, 12))
        );
        assert_eq!(parse_ready("ready server=10 target=x writer=12"), None);
        assert_eq!(unescape(br"/tmp/a\040b"), b"/tmp/a b");
        assert_eq!(unescape(br"/tmp/a\134b"), b"/tmp/a\\b");
    }
}
