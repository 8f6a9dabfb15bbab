//! Attacks on who the daemon answers and what it checks, tried as unprivileged users would:
//! a connection that outlives the process it was identified as (handed to a child, the
//! connector then executing a set-user-ID program or exiting), a process that executes a
//! set-user-ID program while its memory maps are being read, and pid 0. Each decision must be
//! made against the target as it is when its data is read, and the caller as it is now.

use std::io::BufRead;
use std::process::{Command, Stdio};

use taskdiag::proto::msg::{done_text, Messages};
use taskdiag::proto::task::{Task, TaskAssembler};
use taskdiag::proto::{Done, Group, MsgType, Strategy, VERSION};

use crate::harness::*;

/// A response: its tasks, and the DONE's error and text.
struct Response {
    tasks: Vec<Task>,
    error: i32,
    text: Option<String>,
}

fn decode(bytes: &[u8]) -> Response {
    let mut r = Response {
        tasks: Vec::new(),
        error: i32::MIN,
        text: None,
    };
    let mut asm = TaskAssembler::new();
    for m in Messages::new(bytes) {
        let m = m.expect("a valid response stream");
        match m.msg_type() {
            Some(MsgType::Task) => r.tasks.extend(asm.push(&m).expect("a valid task")),
            Some(MsgType::Done) => {
                r.error = Done::read_from(m.payload).expect("DONE").error;
                r.text = done_text(&m).map(str::to_string);
            }
            _ => {}
        }
    }
    r
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// A Python client, run as USER, that speaks the protocol itself: `request(pid)` asks ONE
/// `pid` with the groups of `show`; `response()` reads up to DONE; responses go to standard
/// output as `label hex`.
fn client_prelude(socket: &str, show: u64) -> String {
    format!(
        r#"
import os, socket, struct, sys, time
SOCK = {socket:?}
def request(pid):
    return struct.pack('=IHHQIIQ', 32, {version}, 0, {show}, {one}, pid, 0)
def response(s):
    buf = b''
    while True:
        off = 0
        while off + 16 <= len(buf):
            ln, ty = struct.unpack_from('=IH', buf, off)
            if off + ln > len(buf):
                break
            off += ln
            if ty == {done}:
                return buf[:off]
        d = s.recv(1 << 16)
        if not d:
            return buf
        buf += d
def emit(label, b):
    sys.stdout.write(label + ' ' + b.hex() + '\n')
    sys.stdout.flush()
def euid(pid):
    try:
        with open('/proc/%d/status' % pid) as f:
            for l in f:
                if l.startswith('Uid:'):
                    return int(l.split()[2])
    except OSError:
        return None
def comm(pid):
    try:
        with open('/proc/%d/comm' % pid) as f:
            return f.read().rstrip('\n')
    except OSError:
        return None
"#,
        version = VERSION,
        one = Strategy::One as u32,
        done = MsgType::Done as u16,
    )
}

/// Runs a client script as USER, returning its labelled responses in order.
fn run_client(script: &str) -> Vec<(String, Response)> {
    let mut c = as_user(USER, PYTHON);
    c.args(["-c", script]);
    let o = taskdiag_test_support::process::output_within(&mut c, PATIENCE);
    assert!(
        o.status.success(),
        "client script: {}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            let (label, h) = l.split_once(' ')?;
            Some((label.to_string(), decode(&hex(h))))
        })
        .collect()
}

fn vmas_naming(t: &Task, what: &str) -> usize {
    t.vmas.as_ref().map_or(0, |v| {
        v.iter()
            .filter(|m| String::from_utf8_lossy(&m.name).contains(what))
            .count()
    })
}

#[test]
fn a_connection_handed_on_does_not_serve_the_connectors_setuid_program() {
    let d = Daemon::start(&[]);
    if !d.serves_maps() {
        return;
    }
    let suid = SetuidSleep::new();
    // The connector is identified (its own maps are its own), hands the connection to a child
    // and executes the set-user-ID program under the same pid; the child asks for the
    // connector's maps over the old connection.
    let script = format!(
        r#"{prelude}
s = socket.socket(socket.AF_UNIX)
s.connect(SOCK)
me = os.getpid()
s.sendall(request(me))
emit('before', response(s))
if os.fork() == 0:
    # Once the connector runs the set-user-ID program (its new name, root's euid).
    t = time.time() + 60
    while (euid(me) != 0 or comm(me) != 'setuid-sleep') and time.time() < t:
        time.sleep(0.005)
    s.sendall(request(me))
    emit('after', response(s))
    os._exit(0)
os.execv({suid:?}, [{suid:?}, '3'])
"#,
        prelude = client_prelude(
            &d.socket.display().to_string(),
            Group::Base.flag() | Group::Vma.flag()
        ),
        suid = suid.path().display().to_string(),
    );
    let out = run_client(&script);
    let labels: Vec<&str> = out.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["before", "after"], "client output");
    let before = &out[0].1;
    assert_eq!(before.error, 0, "{:?}", before.text);
    assert!(
        before.tasks.len() == 1 && before.tasks[0].vmas.as_ref().is_some_and(|v| !v.is_empty()),
        "the connector reads its own maps"
    );
    let after = &out[1].1;
    let leaked: usize = after
        .tasks
        .iter()
        .map(|t| vmas_naming(t, "setuid-sleep"))
        .sum();
    assert_eq!(leaked, 0, "the setuid program's maps were served");
    assert!(
        after.tasks.is_empty(),
        "nothing is served to a changed caller"
    );
    assert_eq!(after.error, -libc::EACCES, "{:?}", after.text);
    let text = after.text.as_deref().unwrap_or("");
    assert!(
        text.contains("executed a program") && text.contains("connect again"),
        "{text}"
    );
}

#[test]
fn a_connection_outliving_its_connector_is_refused() {
    let d = Daemon::start(&[]);
    // The connector exits; its child keeps the connection and asks again. The connector's
    // pid may be reused by anyone's process: the connection must not stand for that process.
    let script = format!(
        r#"{prelude}
s = socket.socket(socket.AF_UNIX)
s.connect(SOCK)
me = os.getpid()
s.sendall(request(me))
emit('before', response(s))
if os.fork() == 0:
    t = time.time() + 60
    while euid(me) is not None and time.time() < t:
        time.sleep(0.005)
    s.sendall(request(os.getpid()))
    emit('after', response(s))
    os._exit(0)
os._exit(0)
"#,
        // Who asks is the point, not what: BASE alone (served on every kernel).
        prelude = client_prelude(&d.socket.display().to_string(), Group::Base.flag()),
    );
    // The script's first process exits at once: wait for the child's output.
    let out = run_client(&format!("{script}\n"));
    // Only the child's line and the parent's first line: both processes write to the pipe.
    let after = out
        .iter()
        .find(|(l, _)| l == "after")
        .map(|(_, r)| r)
        .expect("the child's response");
    assert!(after.tasks.is_empty());
    assert_eq!(after.error, -libc::EACCES, "{:?}", after.text);
    assert!(
        after.text.as_deref().unwrap_or("").contains("exited"),
        "{:?}",
        after.text
    );
}

/// Processes of USER that keep executing the set-user-ID program (each runs as USER for a
/// random moment first), for `secs` seconds.
fn exec_racer(suid: &SetuidSleep, secs: f64) -> Spawned {
    let script = format!(
        "import time, tdtest\n\
         end = time.time() + {secs}\n\
         print('ready', flush=True)\n\
         tdtest.setuid_execs({suid:?}, lambda: time.time() < end, 6)\n",
        suid = suid.path().display().to_string(),
    );
    let mut c = as_user(USER, PYTHON);
    with_helpers(&mut c)
        .args(["-c", &script])
        .stdout(Stdio::piped());
    let mut racer = Spawned::spawn_group(&mut c);
    racer.expect_line("ready");
    racer
}

/// Dumps `groups` (with BASE) as USER through `d` 150 times while processes of USER keep
/// executing the set-user-ID program: every process's, and in turn one racing process's (ONE:
/// a short walk, the window as wide as the exec). Of each record of the program (its comm),
/// `leaked` tells a leak and `refused` a refusal: there must be no leak, and refusals (the race
/// was run).
fn across_setuid_execs(
    d: &Daemon,
    groups: &str,
    leaked: impl Fn(&serde_json::Value) -> bool,
    refused: impl Fn(&serde_json::Value) -> bool,
) {
    let suid = SetuidSleep::new();
    let racer = exec_racer(&suid, 60.0);
    let socket = d.socket.display().to_string();
    let (mut seen, mut leaks, mut refusals) = (0, Vec::new(), 0);
    let groups = format!("base,{groups}");
    for i in 0..150 {
        let mut args = vec!["--groups".to_string(), groups.clone()];
        if i % 2 == 1 {
            let Some(k) = tasks::children(racer.pid()).first().map(u32::to_string) else {
                continue;
            };
            args.extend(["--pid".into(), k]);
        }
        let mut c = as_user(USER, cli());
        c.args([
            "dump",
            "--backend",
            "daemon",
            "--socket",
            &socket,
            "--format",
            "json",
        ]);
        c.args(&args);
        let o = output(&mut c);
        // ONE of a process that has exited meanwhile is "no such process" (1).
        assert!(
            o.status.success() || (i % 2 == 1 && o.status.code() == Some(1)),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        for line in o.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).expect("json");
            if v["base"]["comm"] != "setuid-sleep" {
                continue;
            }
            seen += 1;
            if leaked(&v) {
                leaks.push(v.to_string());
            } else if refused(&v) {
                refusals += 1;
            }
        }
    }
    drop(racer);
    assert!(leaks.is_empty(), "{} leaks: {}", leaks.len(), leaks[0]);
    assert!(
        seen > 0 && refusals > 0,
        "the race was never run: {seen} seen"
    );
}

#[test]
fn maps_read_across_a_setuid_exec_are_never_served() {
    let d = Daemon::start(&[]);
    if !d.serves_maps() {
        return;
    }
    let names_it = |v: &serde_json::Value| {
        v["vma"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["name"].as_str())
            .any(|n| n.contains("setuid-sleep"))
    };
    across_setuid_execs(&d, "vma", names_it, |v| v["errors"]["vma"].is_string());
}

/// The groups taskdiagd serves from one walk under ptrace-read (PATHS, SCHED's syscall,
/// ENVIRON, IO), across set-user-ID execs: the program's executable is never shown to USER,
/// nor its system call, whether the daemon served the record (ACCESS taken again after the
/// groups were read, ACCESS_F_CHANGED where the exec came between) or left it to USER's /proc.
#[test]
fn guarded_groups_read_across_a_setuid_exec_are_never_served() {
    let d = Daemon::start(&[]);
    let leaked = |v: &serde_json::Value| {
        v["paths"]["exe"]
            .as_str()
            .is_some_and(|e| e.contains("setuid-sleep"))
            || v["sched"]["syscall"].is_string()
    };
    let refused = |v: &serde_json::Value| v["paths"]["exe_error"].is_string();
    across_setuid_execs(&d, "paths,sched,environ,io", leaked, refused);
}

#[test]
fn pid_0_is_no_such_process_for_every_strategy_and_backend() {
    let d = Daemon::start(&[]);
    let socket = d.socket.display().to_string();
    for opt in ["--pid", "--threads-of", "--children-of"] {
        for backend in ["daemon", "procfs", "bpf"] {
            let mut c = if backend == "daemon" {
                as_user(USER, cli())
            } else {
                Command::new(cli())
            };
            c.args(["dump", opt, "0", "--format", "json", "--backend", backend]);
            c.args(["--socket", &socket]);
            let o = output(&mut c);
            assert_eq!(
                (o.status.code(), o.stdout.is_empty()),
                (Some(1), true),
                "{opt} 0 via {backend}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("no such process"),
                "{opt} 0 via {backend}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

#[test]
fn one_and_thread_with_maps_answer_in_a_child_pid_namespace() {
    let d = Daemon::start(&[]);
    if !d.serves_maps() {
        return;
    }
    let socket = d.socket.display().to_string();
    let cli = cli().display().to_string();
    let sp = as_user_sh(USER);
    // Inside a new pid namespace with its own /proc: a process of USER, and USER asking for its
    // maps by the namespace's pid, through the daemon and from its /proc.
    let script = format!(
        "{waits}{sp} sleep 60 & S=$!\n\
         wait_comm $S sleep\n\
         echo pid $S\n\
         {sp} cat /proc/$S/maps > /tmp/proc.$$ && echo proc-ok\n\
         for opt in --pid --threads-of; do\n\
           {sp} {cli} dump $opt $S --groups vma --format json --backend daemon --socket {socket} \
             > /tmp/daemon.$$ 2>&1 && grep -q '\"vma\":\\[' /tmp/daemon.$$ \
             && echo \"daemon-ok $opt\"\n\
         done\n\
         {sp} {cli} maps $S --backend daemon --socket {socket} > /tmp/maps.$$ && echo maps-ok\n\
         cmp -s /tmp/maps.$$ /tmp/proc.$$ && echo maps-same\n\
         rm -f /tmp/proc.$$ /tmp/daemon.$$ /tmp/maps.$$\n\
         kill $S\n",
        waits = sh_waits()
    );
    let o = output(Command::new("unshare").args([
        "--pid",
        "--fork",
        "--mount-proc",
        "sh",
        "-c",
        &script,
    ]));
    let text = String::from_utf8_lossy(&o.stdout);
    let pid = text
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .expect("the fixture's pid");
    assert!(pid.parse::<u32>().expect("pid") < 64, "{text}");
    for want in [
        "proc-ok",
        "daemon-ok --pid",
        "daemon-ok --threads-of",
        "maps-ok",
        "maps-same",
    ] {
        assert!(
            text.lines().any(|l| l == want),
            "{want} missing:\n{text}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// A client in a time namespace whose boot time is a day later gets start times as its /proc
/// shows them (the daemon adds the client's boottime offset, read from its timens_offsets,
/// where the kernel's /proc adds it: since 5.11), for every process: the same as the procfs
/// backend's from that client.
#[test]
fn start_times_follow_the_clients_time_namespace() {
    let d = Daemon::start(&[]);
    let socket = d.socket.display().to_string();
    let cli = cli().display().to_string();
    let sp = as_user_sh(USER);
    let script = format!(
        "{sp} {cli} dump --groups base --format json --backend daemon --socket {socket}; \
         echo ---; {sp} {cli} dump --groups base --format json --backend procfs\n"
    );
    let o = output(Command::new("unshare").args([
        "--time",
        "--fork",
        "--boottime",
        "86400",
        "sh",
        "-c",
        &script,
    ]));
    let text = String::from_utf8_lossy(&o.stdout);
    let (daemon, procfs) = text.split_once("---\n").expect("two answers");
    let starts = |answer: &str| -> std::collections::BTreeMap<u64, u64> {
        answer
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| Some((v["pid"].as_u64()?, v["base"]["start_time_ns"].as_u64()?)))
            .collect()
    };
    let (from_daemon, from_proc) = (starts(daemon), starts(procfs));
    // kthreadd started with the kernel: a day and a moment in this namespace, where /proc
    // shows the offset.
    let kthreadd = from_daemon.get(&2).copied();
    assert!(
        kthreadd.is_some_and(|s| {
            (s >= 86_400_000_000_000) == taskdiag_test_support::tasks::kernel_at_least(5, 11)
        }),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut same = 0;
    for (pid, s) in &from_daemon {
        if let Some(p) = from_proc.get(pid) {
            assert_eq!(s, p, "pid {pid}");
            same += 1;
        }
    }
    assert!(same > 1, "{text}");
}

/// The chroot tests' set-up: the whole file system bound again under `r` (in a mount
/// namespace of the test's own, by [`Chroot::run`]), a directory `o` for their outputs, the
/// daemon's socket, the CLI and the shell prefix that runs a command as USER.
struct Chroot {
    out: TempDir,
    _root: TempDir,
    o: String,
    r: String,
    socket: String,
    cli: String,
    sp: String,
}

impl Chroot {
    fn new(d: &Daemon) -> Chroot {
        let (out, root) = (TempDir::new("chroot-out"), TempDir::new("chroot"));
        Chroot {
            o: out.path().display().to_string(),
            r: root.path().display().to_string(),
            out,
            _root: root,
            socket: d.socket.display().to_string(),
            cli: cli().display().to_string(),
            sp: as_user_sh(USER),
        }
    }

    /// Runs `script` (with the wait helpers) once the file system is bound under `r`.
    fn run(&self, script: &str) -> std::process::Output {
        in_private_mounts(&format!(
            "{}mount --rbind / {} || exit 90\n{script}",
            sh_waits(),
            self.r
        ))
    }

    /// An output file's text (empty if missing).
    fn read(&self, f: &str) -> String {
        std::fs::read_to_string(self.out.join(f)).unwrap_or_default()
    }
}

#[test]
fn maps_of_a_client_in_a_chroot_name_files_from_its_root() {
    let d = Daemon::start(&[]);
    if !d.serves_maps() {
        return;
    }
    let c = Chroot::new(&d);
    let (o, r, sp, cli, socket) = (&c.o, &c.r, &c.sp, &c.cli, &c.socket);
    // A process of USER chrooted there, and USER, chrooted too, reading its maps.
    let run = c.run(&format!(
        "chroot {r} {sp} sleep 60 & S=$!\n\
         wait_comm $S sleep\n\
         chroot {r} {sp} cat /proc/$S/maps > {o}/proc || exit 91\n\
         chroot {r} {sp} {cli} maps $S --backend daemon --socket {socket} > {o}/daemon 2> {o}/err\n\
         echo rc $?\n\
         kill $S; wait\n"
    ));
    let text = String::from_utf8_lossy(&run.stdout);
    let read = |f: &str| c.read(f);
    assert!(
        text.contains("rc 0"),
        "{text} {} {}",
        String::from_utf8_lossy(&run.stderr),
        read("err")
    );
    let (proc, daemon) = (read("proc"), read("daemon"));
    assert!(proc.contains("/sleep"), "the fixture's maps: {proc}");
    assert!(
        !daemon.contains(r.as_str()),
        "host paths shown in the chroot:\n{daemon}"
    );
    assert_eq!(
        daemon, proc,
        "the daemon's maps differ from the chroot's /proc"
    );
}

/// PATHS for a client in a chroot: as readlink of /proc/PID/{exe,cwd,root} shows them there, for
/// a process chrooted with it (paths below its root, relative to it) and one outside (paths the
/// reader's root does not contain, which the kernel prints from the real root). Also from a
/// daemon whose programs cannot find the client's root (no `task_root`, as where the kernel
/// refuses the map walk): the client then reads PATHS from its own /proc, never the daemon's
/// paths as if its root were the daemon's.
#[test]
fn paths_of_a_client_in_a_chroot_are_as_its_proc_shows_them() {
    for disable in [None, Some("maps")] {
        let d = Daemon::start_with(&[], |c| {
            if let Some(off) = disable {
                c.env("TASKDIAG_BPF_DISABLE", off);
            }
        });
        chroot_paths_agree(&d);
    }
}

fn chroot_paths_agree(d: &Daemon) {
    let c = Chroot::new(d);
    let (o, r, sp, cli, socket) = (&c.o, &c.r, &c.sp, &c.cli, &c.socket);
    let run = c.run(&format!(
        "chroot {r} {sp} sleep 60 & S=$!\n\
         (cd /tmp && exec {sp} sleep 60) & H=$!\n\
         wait_comm $S sleep; wait_comm $H sleep\n\
         for p in $S $H; do\n\
           for l in exe cwd root; do chroot {r} {sp} readlink /proc/$p/$l; done > {o}/proc.$p\n\
           chroot {r} {sp} {cli} dump -g paths --pid $p -f json --backend daemon \
             --socket {socket} > {o}/daemon.$p 2>> {o}/err || echo failed $p\n\
         done\n\
         echo pids $S $H\n\
         kill $S $H; wait\n"
    ));
    let text = String::from_utf8_lossy(&run.stdout);
    let read = |f: &str| c.read(f);
    let pids: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("pids "))
        .unwrap_or_else(|| panic!("{text} {}", String::from_utf8_lossy(&run.stderr)))
        .split(' ')
        .collect();
    assert!(!text.contains("failed"), "{text} {}", read("err"));
    for (pid, inside) in pids.iter().zip([true, false]) {
        let links: Vec<String> = read(&format!("proc.{pid}"))
            .lines()
            .map(String::from)
            .collect();
        let v: serde_json::Value =
            serde_json::from_str(read(&format!("daemon.{pid}")).trim()).expect("json");
        let shown: Vec<String> = ["exe", "cwd", "root"]
            .iter()
            .map(|l| v["paths"][l].as_str().unwrap_or("-").to_string())
            .collect();
        assert_eq!(shown, links, "process {pid} (in the chroot: {inside}): {v}");
        // Inside, its directory is the chroot's "/" (chroot(1) changes to it); outside, the
        // host's /tmp, which the reader's root does not contain.
        assert_eq!(links[1], if inside { "/" } else { "/tmp" }, "{links:?}");
    }
}
