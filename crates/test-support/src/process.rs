//! Fixture processes and waiting for them.
//!
//! A [`Spawned`] process is killed by its pid (or, when it leads one, by its process group)
//! and reaped when it is dropped, so a failing test leaves nothing behind and never signals a
//! process it did not start: an unreaped child's pid (and the group it leads) cannot be reused.
//!
//! Waits are for events where the kernel offers one: a fixture's readiness line on a pipe,
//! an exit through a pidfd. Where a test must wait for a state (a name after exec, a thread
//! asleep) it polls for that state with [`wait_for`], whose limit only ends a test that would
//! otherwise hang: it is generous, and no test asserts how long anything took through it.

use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long [`wait_for`] waits for a state before it fails the test: long enough for a
/// loaded machine, short enough that a hung test ends.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A process the test started; killed (SIGKILL, by pid, or its whole process group when it
/// leads one) and reaped on drop.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    group: bool,
    /// Whether it was reaped ([`Spawned::wait_exit`]): its pid may then be another's.
    reaped: bool,
}

impl Spawned {
    /// Starts `cmd`; panics naming it if it cannot start.
    pub fn spawn(cmd: &mut Command) -> Spawned {
        Self::start(cmd, false)
    }

    fn start(cmd: &mut Command, group: bool) -> Spawned {
        // A program a test has just written (a copy of a fixture) can fail with ETXTBSY for a
        // moment: another test's child forked meanwhile holds the writer's descriptor until
        // it executes (O_CLOEXEC closes it only then). Tried again a few times.
        let mut tries = 0;
        let child = loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                r => break r.unwrap_or_else(|e| panic!("starting {cmd:?}: {e}")),
            }
        };
        Spawned {
            child,
            group,
            reaped: false,
        }
    }

    /// Starts `cmd` as the leader of a new process group, which is killed as a whole on drop
    /// (the fixture's children with it).
    pub fn spawn_group(cmd: &mut Command) -> Spawned {
        cmd.process_group(0);
        Self::start(cmd, true)
    }

    /// Starts `cmd` as the leader of a new session (and so of a process group), which is
    /// killed as a whole on drop.
    pub fn spawn_session(cmd: &mut Command) -> Spawned {
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Self::start(cmd, true)
    }

    /// Marks it as the leader of a process group it made itself (a fixture that calls
    /// setsid()): the group is killed as a whole on drop. Until it has made one, killing the
    /// group finds nothing.
    pub fn leads_own_group(mut self) -> Spawned {
        self.group = true;
        self
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child, for its pipes. (Reap it only through [`Spawned::wait_exit`].)
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The first line of its piped standard output (a fixture saying it is ready, and
    /// perhaps what it set up). Panics if it ends without one.
    pub fn first_line(&mut self) -> String {
        first_line(&mut self.child)
    }

    /// The first line of its piped standard output, waiting at most `limit`: `None` if it
    /// ends without one or has not written one by then (a fixture that may fail to start).
    pub fn first_line_within(&mut self, limit: Duration) -> Option<String> {
        use std::os::fd::AsRawFd;
        let pid = self.pid();
        let out = self
            .child
            .stdout
            .as_mut()
            .expect("the fixture's stdout is piped");
        let deadline = Instant::now() + limit;
        let mut line = Vec::new();
        let mut buf = [0u8; 512];
        while !line.contains(&b'\n') {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut p = libc::pollfd {
                fd: out.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut p, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                assert_eq!(e.kind(), io::ErrorKind::Interrupted, "poll: {e}");
                continue;
            }
            if r == 0 {
                continue;
            }
            match out.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => line.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => panic!("reading fixture {pid}'s first line: {e}"),
            }
        }
        let end = line
            .iter()
            .position(|&b| b == b'\n')
            .map_or(line.len(), |i| i + 1);
        line.truncate(end);
        Some(String::from_utf8_lossy(&line).into_owned())
    }

    /// Waits for its first line and checks it is `want` (without the newline).
    pub fn expect_line(&mut self, want: &str) {
        let line = self.first_line();
        assert_eq!(
            line.trim_end_matches('\n'),
            want,
            "fixture {} did not say {want:?}",
            self.pid()
        );
    }

    /// Waits (through a pidfd) for it to exit, at most `limit`; its status if it did.
    /// A group leader's group is killed before the leader is reaped: what it left running
    /// goes with it.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        if self.group && !self.reaped {
            if !wait_pid_exit(self.pid(), limit) {
                return None;
            }
            // SAFETY: kill takes plain integers; the leader is a zombie, not yet reaped, so
            // its process group cannot have been reused.
            unsafe { libc::kill(-(self.pid() as libc::pid_t), libc::SIGKILL) };
        }
        let st = wait_exit(&mut self.child, limit);
        self.reaped |= st.is_some();
        st
    }

    /// Waits until it accepts connections on the Unix socket `path`, failing the test (with
    /// its standard error, if piped) if it exits first.
    pub fn wait_listening(&mut self, path: &Path, what: &str) {
        let t0 = Instant::now();
        while UnixStream::connect(path).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!(
                    "{what} exited ({status}) before listening on {}: {err}",
                    path.display()
                );
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "{what} did not listen on {} within {PATIENCE:?}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        let pid = self.child.id() as libc::pid_t;
        let target = if self.group { -pid } else { pid };
        // SAFETY: kill takes plain integers. `pid` is our unreaped child, so neither it nor
        // the process group it leads can have been reused.
        unsafe { libc::kill(target, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Where a started service says it is ready, as systemd's Type=notify services do: a datagram
/// socket (an abstract name, which any user may send to) given to it in `NOTIFY_SOCKET`, on
/// which it sends `READY=1` once set up. A socket accepting connections is not enough: the
/// kernel accepts them into the backlog before the service is done starting.
#[derive(Debug)]
pub struct Notify {
    sock: std::os::unix::net::UnixDatagram,
    name: String,
}

impl Notify {
    /// A new socket, not yet given to anyone.
    pub fn new() -> Notify {
        use std::os::linux::net::SocketAddrExt;
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "taskdiag-test-notify-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .expect("an abstract socket name");
        let sock = std::os::unix::net::UnixDatagram::bind_addr(&addr)
            .unwrap_or_else(|e| panic!("binding @{name}: {e}"));
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("SO_RCVTIMEO");
        Notify { sock, name }
    }

    /// Gives the socket to the service `cmd` starts.
    pub fn give(&self, cmd: &mut Command) {
        cmd.env("NOTIFY_SOCKET", format!("@{}", self.name));
    }

    /// Waits until `service` says READY=1, failing the test if it exits first or does not
    /// within [`PATIENCE`].
    pub fn wait_ready(&self, service: &mut Spawned, what: &str) {
        let t0 = Instant::now();
        let mut buf = [0u8; 256];
        loop {
            match self.sock.recv(&mut buf) {
                Ok(n) if buf[..n].split(|&b| b == b'\n').any(|l| l == b"READY=1") => return,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => panic!("reading @{}: {e}", self.name),
            }
            if let Ok(Some(status)) = service.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = service.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("{what} exited ({status}) before it was ready: {err}");
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "{what} not ready within {PATIENCE:?}"
            );
        }
    }
}

impl Default for Notify {
    fn default() -> Self {
        Self::new()
    }
}

/// The first line of `child`'s piped standard output. Panics if it ends without one.
pub fn first_line(child: &mut Child) -> String {
    let pid = child.id();
    let out = child
        .stdout
        .as_mut()
        .expect("the fixture's stdout is piped");
    let mut line = String::new();
    let n = BufReader::new(out)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("reading fixture {pid}'s first line: {e}"));
    assert!(n > 0, "fixture {pid} ended without a line");
    line
}

/// A pidfd for `pid` (any process), for waiting for its exit.
pub(crate) fn pidfd(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits until process `pid` (not necessarily our child) has exited, at most `limit`. True
/// if it has (or was already gone).
pub fn wait_pid_exit(pid: u32, limit: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let fd = match pidfd(pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return true,
        Err(e) => panic!("pidfd_open({pid}): {e}"),
    };
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return true;
        }
        if r == 0 {
            return false;
        }
        let e = io::Error::last_os_error();
        assert_eq!(e.kind(), io::ErrorKind::Interrupted, "poll on a pidfd: {e}");
    }
}

/// Waits until our child `pid` is stopped (by a signal), without reaping or continuing it.
pub fn wait_stopped(pid: u32) {
    // SAFETY: a zeroed siginfo_t is valid for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waitid on our own child with a valid siginfo_t; WNOWAIT leaves the stop to
        // be reported again.
        let r =
            unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WSTOPPED | libc::WNOWAIT) };
        if r == 0 {
            return;
        }
        let e = io::Error::last_os_error();
        assert_eq!(
            e.kind(),
            io::ErrorKind::Interrupted,
            "waitid({pid}, WSTOPPED): {e}"
        );
    }
}

/// Waits (through a pidfd) for `child` to exit, at most `limit`, and reaps it; its status if
/// it exited.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    if let Some(s) = child.try_wait().expect("try_wait") {
        return Some(s);
    }
    if !wait_pid_exit(child.id(), limit) {
        return None;
    }
    Some(child.wait().expect("wait"))
}

/// Polls `cond` until it holds, at most `limit`. True if it did.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `cond` until it holds; fails the test, saying what it waited for, if it does not
/// within [`PATIENCE`].
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(PATIENCE, cond),
        "timed out after {PATIENCE:?} waiting for {what}"
    );
}

/// Sends `sig` to process `pid`, which the test started; fails the test if it cannot.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill takes plain integers; no memory is involved.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig}): {}", io::Error::last_os_error());
}

/// Runs `c` to its end, returning its output; panics naming it if it cannot start.
pub fn output(c: &mut Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("running {c:?}: {e}"))
}

/// Runs `cmd` in a process group of its own and collects its output. If it has not ended
/// after `limit`, kills that group (only processes this test started) and fails, showing what
/// it printed: a hung tool fails its test instead of hanging it.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    cmd.process_group(0);
    output_in_own_group(cmd, limit)
}

/// [`output_within`] for a command that makes its own process group (setsid in pre_exec).
pub fn output_in_own_group(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let status = wait_exit(&mut child, limit);
    if status.is_none() {
        // SAFETY: kill takes plain integers; the group is the one our unreaped child leads.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait();
    }
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "{cmd:?} did not finish in {limit:?}\n--- stdout\n{}--- stderr\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ),
    }
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

/// Waits until process `pid` runs the program named `name` and is asleep in it: it has
/// executed it, and the dynamic loader has finished (its memory maps stay put).
pub fn wait_exec(pid: u32, name: &str) {
    wait_for(&format!("process {pid} to run {name} and wait"), || {
        crate::tasks::comm(pid).as_deref() == Some(name) && crate::tasks::state(pid) == Some('S')
    });
}

/// Shell functions for test scripts, which start background fixtures with `&` and must not
/// use them before they are set up: `wait_comm PID NAME` returns once process PID runs the
/// program NAME and is asleep in it (as [`wait_exec`]); `wait_socket PATH [PID]` once PATH is a
/// socket, failing at once (exit 98) if process PID, the server, has exited. Either fails the
/// script (exit 97) after [`PATIENCE`].
pub fn sh_waits() -> String {
    let tries = PATIENCE.as_millis() / 10;
    format!(
        "wait_comm() {{ n=0; while [ \"$(cat /proc/$1/comm 2>/dev/null)\" != \"$2\" ] || \
         [ \"$(sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f1)\" != S ]; do \
         n=$((n+1)); [ $n -gt {tries} ] && {{ echo \"wait_comm: $1 never ran $2\" >&2; exit 97; }}; \
         sleep 0.01; done; }}\n\
         wait_socket() {{ n=0; while [ ! -S \"$1\" ]; do \
         n=$((n+1)); [ $n -gt {tries} ] && {{ echo \"wait_socket: no socket $1\" >&2; exit 97; }}; \
         [ -n \"$2\" ] && ! kill -0 \"$2\" 2>/dev/null && {{ echo \"wait_socket: $2 exited\" >&2; exit 98; }}; \
         sleep 0.01; done; }}\n"
    )
}

/// Installs Debian package `package` if `path` (a program it provides: a reference tool the
/// tests compare with) is missing. `make test` installs them first (scripts/setup --test).
pub fn ensure_installed(path: &str, package: &str) {
    if Path::new(path).exists() {
        return;
    }
    let ok = Command::new("apt-get")
        .args(["install", "-y", package])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{path} is missing and {package} could not be installed");
}

/// Standard output of `o`, lossy.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error of `o`, lossy.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_is_ready_then_killed_on_drop() {
        let mut s = Spawned::spawn_group(
            Command::new("sh")
                .args(["-c", "sleep 1000 & echo ready; wait"])
                .stdout(Stdio::piped()),
        );
        s.expect_line("ready");
        let pid = s.pid();
        let kids = crate::tasks::children(pid);
        assert_eq!(kids.len(), 1);
        drop(s);
        assert!(
            wait_pid_exit(kids[0], PATIENCE),
            "the group's sleep survived"
        );
        assert!(crate::tasks::stat(pid).is_none());
    }

    #[test]
    fn waiting_for_an_exit_is_an_event() {
        let mut c = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        assert_eq!(wait_exit(&mut c, PATIENCE).and_then(|s| s.code()), Some(3));
        let mut c = Command::new("sleep").arg("1000").spawn().unwrap();
        assert!(wait_exit(&mut c, Duration::from_millis(20)).is_none());
        let _ = c.kill();
        assert!(wait_exit(&mut c, PATIENCE).is_some());
    }

    #[test]
    fn a_hung_command_is_killed_with_its_group() {
        let r = std::panic::catch_unwind(|| {
            output_within(
                Command::new("sh").args(["-c", "echo started; sleep 1000"]),
                Duration::from_millis(300),
            )
        });
        let msg = r.expect_err("a hung command must fail");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("did not finish") && msg.contains("started"),
            "{msg}"
        );
    }

    #[test]
    fn wait_comm_waits_for_the_exec() {
        let script = format!(
            "{}sleep 100 & S=$!; wait_comm $S sleep && echo ok; kill $S",
            sh_waits()
        );
        let o = output(Command::new("sh").args(["-c", &script]));
        assert_eq!(stdout(&o), "ok\n", "{}", stderr(&o));
    }
}
