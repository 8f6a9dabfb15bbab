//! Clients believe only a privileged taskdiagd: a server listening on a socket in a
//! world-writable directory under another uid (here `nobody`, whose uid is also the kernel's
//! overflow uid), or under the client's own uid, is refused by `taskdiag dump` and the tools,
//! with a message naming the socket and its owner, and none of its forged tasks are shown;
//! `--backend auto` uses /proc instead. The real daemon, started as root (also with `--user`),
//! is still believed, by unprivileged clients and from inside a user namespace.
//!
//! The forged server is a small Python program, run through setpriv as the user under test,
//! that answers every request with a valid stream holding one invented task, `td-forged`; with
//! `$TASKDIAG_DAEMON_USER` naming that user the same server is believed, which shows the
//! refusals are the check at work, not a broken server.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use taskdiag_test_support::bins::workspace_bin;
use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{Notify, Spawned};
use taskdiag_test_support::users::uid_of;

use taskdiag_proto::task::{Base, Cred, Task};
use taskdiag_proto::{BaseRec, CredRec, StatRec, BASE_F_LEADER};

use super::{as_test_user, json_lines, stderr, stdout, test_user, BIN, TEST_USER};

/// The forged task's name: it must never reach a refused client's output.
const FORGED: &str = "td-forged";
/// The forged task's pid (beyond most hosts' pid_max; the checks look for the name, not this).
const FORGED_PID: u32 = 4_100_000;
/// The user the forged server runs as, besides the test user.
const NOBODY: &str = "nobody";
/// Variables that would change which daemon the clients use or believe.
const CLIENT_ENV: [&str; 3] = [
    "TASKDIAG_SOCKET",
    "TASKDIAG_BACKEND",
    "TASKDIAG_DAEMON_USER",
];

/// The forged server: binds `argv[1]` (mode 0666), then answers each 32-byte request with
/// START (echoing the request), the TASK message(s) hex-encoded in `argv[2]`, and DONE.
const FAKE_SERVER: &str = r#"
import os, socket, struct, sys
path, task = sys.argv[1], bytes.fromhex(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o666)
s.listen(64)
while True:
    c, _ = s.accept()
    buf = b""
    try:
        while True:
            d = c.recv(4096)
            if not d:
                break
            buf += d
            while len(buf) >= 32:
                req, buf = buf[:32], buf[32:]
                _, _, _, show, strategy, pid, _ = struct.unpack("=IHHQIIQ", req)
                start = struct.pack("=IHHII", 40, 1, 0, 0, 0) + struct.pack("=HHIQII", 1, 3, strategy, show, pid, 0)
                done = struct.pack("=IHHII", 32, 3, 0, 0, 0) + struct.pack("=iIQ", 0, 0, 1)
                c.sendall(start + task + done)
    except OSError:
        pass
    c.close()
"#;

/// The forged task, as TASK message bytes: a root process with a name, credentials, CPU
/// times and a command line.
fn forged_task() -> Vec<u8> {
    let t = Task {
        pid: FORGED_PID,
        tgid: FORGED_PID,
        base: Some(Base {
            rec: BaseRec {
                ppid: 1,
                state: 1,
                flags: BASE_F_LEADER,
                tpgid: -1,
                ..Default::default()
            },
            comm: FORGED.as_bytes().to_vec(),
        }),
        cred: Some(Cred {
            rec: CredRec::default(),
            groups: vec![0],
        }),
        stat: Some(StatRec {
            threads: 1,
            ..Default::default()
        }),
        cmdline: Some(format!("{FORGED}\0--innocent\0").into_bytes()),
        ..Default::default()
    };
    let mut v = Vec::new();
    t.encode(&mut v);
    v
}

/// A server we started, listening on `socket`; killed (by its pid) on drop, before its
/// directory goes.
pub(super) struct Server {
    proc: Spawned,
    socket: PathBuf,
    _dir: TempDir,
}

impl Server {
    /// Runs `cmd` (which listens on `socket`, inside `dir`) and waits until the socket accepts
    /// connections (failing if the server exits first).
    fn start(mut cmd: Command, dir: TempDir, socket: PathBuf, what: &str) -> Server {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut proc = Spawned::spawn(&mut cmd);
        proc.wait_listening(&socket, what);
        Server {
            proc,
            socket,
            _dir: dir,
        }
    }

    /// The forged server, run through `run` (as some user), on a socket in a world-writable,
    /// sticky directory (like /tmp).
    fn forged(run: Runner) -> Server {
        let dir = TempDir::with_mode("trust-forged", 0o1777);
        let socket = dir.join("taskdiag.sock");
        let hex: String = forged_task().iter().map(|b| format!("{b:02x}")).collect();
        let mut c = run("/usr/bin/python3");
        c.args(["-c", FAKE_SERVER]).arg(&socket).arg(hex);
        Server::start(c, dir, socket, "the forged server")
    }

    /// The real taskdiagd (beside the CLI in the same target directory), started as root with
    /// `extra` options, once it says it is ready (sd_notify: privileges dropped).
    pub(super) fn daemon(extra: &[&str]) -> Server {
        Server::daemon_with_env(extra, &[])
    }

    /// [`Server::daemon`] with `env` set for it (test hooks such as TASKDIAG_BPF_DISABLE).
    pub(super) fn daemon_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = TempDir::new("trust-daemon");
        let socket = dir.join("taskdiag.sock");
        let mut c = Command::new(workspace_bin("taskdiagd"));
        c.envs(env.iter().copied());
        c.arg("--foreground")
            .arg("--socket")
            .arg(&socket)
            .args(extra);
        let ready = Notify::new();
        ready.give(&mut c);
        let mut s = Server::start(c, dir, socket, "taskdiagd");
        ready.wait_ready(&mut s.proc, "taskdiagd");
        s
    }

    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub(super) fn path(&self) -> &str {
        self.socket.to_str().expect("UTF-8 temp path")
    }
}

/// Makes a command running a program as some user.
pub(super) type Runner = fn(&str) -> Command;

/// `prog` run as `nobody`, with no capabilities.
fn as_nobody(prog: &str) -> Command {
    let o = Command::new("id")
        .args(["-g", NOBODY])
        .output()
        .expect("id");
    assert!(o.status.success(), "no user {NOBODY} on this system");
    let gid = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        NOBODY,
        "--regid",
        &gid,
        "--clear-groups",
        "--inh-caps=-all",
        "--",
        prog,
    ]);
    c
}

/// `prog` run as the test user (created if missing).
fn as_user(prog: &str) -> Command {
    as_test_user(prog)
}

/// `prog` run as root, this process.
pub(super) fn as_root(prog: &str) -> Command {
    Command::new(prog)
}

/// Runs the CLI through `who` with `args` and `env`, and nothing else of ours in its
/// environment that would pick or trust a daemon.
fn client(who: Runner, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = who(BIN);
    for v in CLIENT_ENV {
        c.env_remove(v);
    }
    c.envs(env.iter().copied()).args(args);
    c.output().expect("run taskdiag")
}

/// Whether an output shows the forged task (its name is in every format: its comm, its
/// command line).
fn shows_forged(o: &Output) -> bool {
    stdout(o).contains(FORGED)
}

/// Asserts `o` is a refusal of `server`, run by `uid`/`user`, naming all of them.
fn assert_refused(o: &Output, server: &Server, uid: u32, user: &str, code: i32, ctx: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{ctx}: {err}");
    let want = format!(
        "taskdiagd at {}: refusing a server run by uid {uid} (user {user}, pid {}): a taskdiag \
         daemon must run as root",
        server.path(),
        server.pid()
    );
    assert!(err.contains(&want), "{ctx}: want {want:?} in {err:?}");
    assert!(!shows_forged(o), "{ctx}: forged data shown: {}", stdout(o));
}

#[test]
fn a_server_run_by_another_user_is_refused_by_dump_and_tools() {
    test_user();
    let fake = Server::forged(as_nobody);
    let nobody = uid_of(NOBODY);
    let sock = fake.path().to_owned();
    let ps_env = [
        ("TASKDIAG_SOCKET", sock.as_str()),
        ("TASKDIAG_BACKEND", "daemon"),
    ];
    let who: [(&str, Runner); 2] = [("root", as_root), (TEST_USER, as_user)];
    for (name, run) in who {
        let o = client(
            run,
            &[],
            &[
                "dump",
                "--backend",
                "daemon",
                "--socket",
                &sock,
                "-f",
                "json",
            ],
        );
        assert_refused(&o, &fake, nobody, NOBODY, 3, &format!("{name}: dump"));
        let o = client(
            run,
            &[("TASKDIAG_SOCKET", &sock)],
            &["dump", "-b", "daemon"],
        );
        assert_refused(&o, &fake, nobody, NOBODY, 3, &format!("{name}: dump, env"));
        let o = client(run, &ps_env, &["ps", "-e"]);
        assert_refused(&o, &fake, nobody, NOBODY, 1, &format!("{name}: ps -e"));
        let o = client(run, &ps_env, &["pgrep", FORGED]);
        assert!(
            !o.status.success() && !shows_forged(&o),
            "{name}: pgrep: {o:?}"
        );
    }
}

#[test]
fn auto_does_not_use_an_untrusted_server() {
    test_user();
    let fake = Server::forged(as_nobody);
    let sock = fake.path().to_owned();
    // The test user cannot load BPF: auto tries the daemon, which is refused, then /proc.
    let o = client(
        as_user,
        &[],
        &["dump", "--socket", &sock, "-f", "json", "--summary"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("via procfs"), "{}", stderr(&o));
    assert!(!shows_forged(&o), "forged data shown: {}", stdout(&o));
    assert!(
        json_lines(&o).len() > 1,
        "not a real listing: {}",
        stdout(&o)
    );
    for tool in [&["ps", "-e"][..], &["pstree", "-p"], &["pgrep", "-l", "."]] {
        let o = client(as_user, &[("TASKDIAG_SOCKET", &sock)], tool);
        assert!(o.status.success(), "{tool:?}: {}", stderr(&o));
        assert!(!shows_forged(&o), "{tool:?}: forged data: {}", stdout(&o));
        assert!(!stdout(&o).is_empty(), "{tool:?}: no listing");
    }
}

#[test]
fn a_server_run_by_the_clients_own_uid_is_refused() {
    let me = test_user();
    let fake = Server::forged(as_user);
    let o = client(
        as_user,
        &[],
        &["dump", "--backend", "daemon", "--socket", fake.path()],
    );
    assert_refused(&o, &fake, me, TEST_USER, 3, "own uid");
}

#[test]
fn the_configured_daemon_user_is_believed() {
    // The same forged server, believed when $TASKDIAG_DAEMON_USER names its user: so the
    // refusals above are the check at work.
    test_user();
    let fake = Server::forged(as_nobody);
    let nobody = uid_of(NOBODY).to_string();
    for user in [NOBODY, nobody.as_str()] {
        let o = client(
            as_user,
            &[("TASKDIAG_DAEMON_USER", user)],
            &[
                "dump",
                "-b",
                "daemon",
                "--socket",
                fake.path(),
                "-f",
                "json",
            ],
        );
        assert!(o.status.success(), "{user}: {}", stderr(&o));
        let v = json_lines(&o);
        assert_eq!(v.len(), 1, "{user}: {}", stdout(&o));
        assert_eq!(v[0]["pid"], FORGED_PID, "{user}: {}", stdout(&o));
        assert_eq!(v[0]["base"]["comm"], FORGED, "{user}: {}", stdout(&o));
    }
    // Another user named there does not make this one believed; a name no user has says so.
    let o = client(
        as_user,
        &[("TASKDIAG_DAEMON_USER", "root")],
        &["dump", "-b", "daemon", "--socket", fake.path()],
    );
    assert_refused(&o, &fake, uid_of(NOBODY), NOBODY, 3, "another user named");
    let o = client(
        as_user,
        &[("TASKDIAG_DAEMON_USER", "no-such-user-taskdiag")],
        &["dump", "-b", "daemon", "--socket", fake.path()],
    );
    assert_refused(&o, &fake, uid_of(NOBODY), NOBODY, 3, "unknown user");
    assert!(
        stderr(&o).contains("$TASKDIAG_DAEMON_USER=\"no-such-user-taskdiag\" names no user"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_real_daemon_is_believed_by_unprivileged_clients() {
    let uid = test_user();
    for extra in [&[][..], &["--user", NOBODY]] {
        let d = Server::daemon(extra);
        let sock = d.path().to_owned();
        let ctx = format!("taskdiagd {extra:?}");
        let o = client(
            as_user,
            &[],
            &[
                "dump",
                "-b",
                "daemon",
                "--socket",
                &sock,
                "-f",
                "json",
                "-g",
                "base,cred",
            ],
        );
        assert!(o.status.success(), "{ctx}: {}", stderr(&o));
        let v = json_lines(&o);
        assert!(
            v.iter().any(|t| t["cred"]["uid"] == uid),
            "{ctx}: the client's own process is missing"
        );
        let o = client(
            as_user,
            &[("TASKDIAG_SOCKET", &sock)],
            &["dump", "--summary", "-f", "json"],
        );
        assert!(
            o.status.success() && stderr(&o).contains("via daemon"),
            "{ctx}: auto: {}",
            stderr(&o)
        );
        let o = client(
            as_user,
            &[("TASKDIAG_SOCKET", &sock), ("TASKDIAG_BACKEND", "daemon")],
            &["ps", "-e"],
        );
        assert!(o.status.success(), "{ctx}: ps: {}", stderr(&o));
        assert!(stdout(&o).contains("taskdiag"), "{ctx}: ps: {}", stdout(&o));
        // From a user namespace of its own, root outside shows as the overflow uid.
        let mut c = as_test_user("unshare");
        for v in CLIENT_ENV {
            c.env_remove(v);
        }
        let o = c
            .args(["--user", "--map-root-user", BIN])
            .args(["dump", "-b", "daemon", "--socket", &sock, "-f", "json"])
            .output()
            .expect("unshare");
        assert!(o.status.success(), "{ctx}: user namespace: {}", stderr(&o));
        assert!(json_lines(&o).len() > 1, "{ctx}: user namespace");
    }
}
