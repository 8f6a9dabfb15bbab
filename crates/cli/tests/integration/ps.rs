//! Differential tests of `taskdiag ps` against procps ps (/usr/bin/ps, procps-ng 4.0.2): the
//! same arguments and environment, on a fixture session of processes in awkward states
//! (ps_fixture.py: hostile and 16-byte names, control characters, invalid UTF-8, long and
//! binary argv, threads with their own names, other users, nice values, every scheduling
//! class, locked memory, a zombie, a stopped process, a process on a pty in the foreground),
//! must print the same bytes and exit with the same status, on both backends.
//!
//! Listings are restricted to the fixture's session (or lists of its pids) because the rest of
//! the system changes between two runs. Values that move with time (%CPU, elapsed time) can
//! differ when a second boundary falls between the two runs: procps ps is run again after
//! ours when they differ, and ours must agree with one of the two procps runs around it; if
//! procps gave the same bytes both times, the difference is real and the test fails at once
//! (taskdiag_test_support::compare).

use std::process::{Command, Stdio};

use taskdiag_test_support::compare::{agree, agree_between, text_between};
use taskdiag_test_support::process::{ensure_installed, Spawned};
use taskdiag_test_support::python;

use super::BIN;

struct Fixture {
    /// Killed with its process group when the fixture is dropped.
    _proc: Spawned,
    sid: u32,
    tty: String,
    pids: serde_json::Map<String, serde_json::Value>,
}

impl Fixture {
    fn start() -> Fixture {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/ps_fixture.py"
        );
        // It makes its own session: killed with its process group on drop.
        let mut proc = Spawned::spawn(
            python::script(script)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        )
        .leads_own_group();
        let line = proc.first_line();
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("fixture said {line:?}: {e}"));
        Fixture {
            sid: v["sid"].as_u64().expect("sid") as u32,
            tty: v["tty"].as_str().expect("tty").to_string(),
            pids: v["pids"].as_object().expect("pids").clone(),
            _proc: proc,
        }
    }

    fn pid(&self, name: &str) -> String {
        self.pids[name].as_u64().expect("pid").to_string()
    }
}

fn ensure_procps() {
    ensure_installed("/usr/bin/ps", "procps");
}

/// Runs ps with `args` and `env`: procps's (`backend` "procps") or taskdiag's on `backend`.
/// Its standard output, standard error and status, as one byte string.
fn both(args: &[&str], env: &[(&str, &str)], backend: &str) -> Vec<u8> {
    let mut cmd = if backend == "procps" {
        Command::new("/usr/bin/ps")
    } else {
        let mut c = Command::new(BIN);
        c.arg("ps");
        c
    };
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TZ", "UTC");
    if backend != "procps" {
        cmd.env("TASKDIAG_BACKEND", backend);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run ps");
    let mut all = o.stdout.clone();
    all.extend_from_slice(b"\n--stderr--\n");
    all.extend_from_slice(&o.stderr);
    all.extend_from_slice(format!("\n--status {:?}--", o.status.code()).as_bytes());
    all
}

/// procps ps and taskdiag ps print the same bytes and exit alike (procps read around ours; an
/// elapsed time between procps's two reads agrees: one run of ours may take over a second).
fn assert_same(args: &[&str], env: &[(&str, &str)], backend: &str) {
    if let Err(m) = agree_between(
        || both(args, env, "procps"),
        || both(args, env, backend),
        |b, o, a| text_between(b, o, a),
    ) {
        panic!(
            "ps {} ({backend}, {env:?}) differs: {}",
            args.join(" "),
            Shown(m)
        );
    }
}

/// A mismatch of outputs, shown as text.
struct Shown(taskdiag_test_support::compare::Mismatch<Vec<u8>>);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = if self.0.unstable {
            "the system changed across every read"
        } else {
            "procps printed the same before and after"
        };
        write!(
            f,
            "{why}\n--- procps ---\n{}\n--- taskdiag ---\n{}",
            String::from_utf8_lossy(&self.0.reference),
            String::from_utf8_lossy(&self.0.ours)
        )
    }
}

const BACKENDS: [&str; 2] = ["bpf", "procfs"];

const COLUMNS: &str = "pid,ppid,pgid,sid,tid,lwp,tty,tpgid,stat,state,s,user,uid,ruser,ruid,\
euser,suser,fuser,group,gid,rgroup,egid,comm,ucmd,fname,%cpu,%mem,rss,vsz,sz,size,etime,etimes,\
time,bsdtime,cputimes,nlwp,ni,pri,opri,priority,pri_api,psr,wchan,cls,class,policy,sched,rtprio,\
f,c,cp,maj_flt,min_flt,supgid,supgrp,addr,args";

#[test]
fn ps_output_is_byte_identical_to_procps() {
    ensure_procps();
    let fx = Fixture::start();
    let sid = fx.sid.to_string();
    let tty = fx.tty.clone();
    let pids = [
        fx.pid("hostile"),
        fx.pid("threads"),
        fx.pid("nobody"),
        fx.pid("zparent"),
    ]
    .join(",");
    let forms: Vec<Vec<&str>> = vec![
        vec!["-f"],
        vec!["-F"],
        vec!["-l"],
        vec!["-ly"],
        vec!["-lc"],
        vec!["-j"],
        vec!["-jf"],
        vec!["-L"],
        vec!["-Lf"],
        vec!["-T"],
        vec!["-H"],
        vec!["-fH"],
        vec!["-o", COLUMNS],
        vec!["-L", "-o", "pid,lwp,nlwp,comm,stat,psr,wchan,time,args"],
        vec!["-o", "pid,comm=NAME,user:4,args=COMMAND LINE"],
        vec!["-o", "pid,start,stime,start_time,bsdstart,lstart"],
        vec!["-O", "ni,user"],
        vec!["-o", "pid,comm", "--sort=comm,-pid"],
        vec!["-o", "pid,ni,comm", "--sort", "-ni"],
        vec!["-o", "pid,rss,comm", "--sort=rss,pid"],
        vec!["-o", "user,pid,comm", "--sort=user,pid"],
        vec!["-o", "pid,ppid,args", "--forest"],
        vec!["-o", "pid,comm", "--no-headers"],
        vec!["-o", "pid,comm", "--headers", "--rows", "5"],
        vec!["-f", "-w"],
        vec!["u"],
        vec!["j"],
        vec!["l"],
        vec!["f"],
        vec!["uf"],
        vec!["uww"],
        vec!["un"],
        vec!["uc"],
        vec!["H", "-o", "pid,tid,comm,stat"],
        vec!["S", "-o", "pid,time,maj_flt,comm"],
        vec!["O", "ni"],
        vec!["k", "-pid", "-o", "pid,comm"],
        vec!["s"],
        vec![
            "-o",
            "pid,pending,tsig,sig,sig_pend,blocked,ignored,caught,comm",
        ],
        vec![
            "-L",
            "-o",
            "pid,lwp,tsig,sigmask,sig_block,sigignore,sig_ignore,sigcatch,sig_catch",
        ],
        vec!["-o", "pid,caught,comm", "--sort=-caught,pid"],
    ];
    let envs: [&[(&str, &str)]; 4] = [
        &[("LC_ALL", "C")],
        &[("LC_ALL", "C.UTF-8")],
        &[("LC_ALL", "C.UTF-8"), ("COLUMNS", "80")],
        &[("LC_ALL", "C"), ("COLUMNS", "40")],
    ];
    for backend in BACKENDS {
        for form in &forms {
            for env in envs {
                let mut a = form.clone();
                a.extend(["--sid", &sid]);
                assert_same(&a, env, backend);
            }
        }
        // Other selections.
        let c = &[("LC_ALL", "C.UTF-8")][..];
        for sel in [
            vec!["-f", "-p", &pids],
            vec!["-f", "--ppid", &sid],
            vec!["-f", "-C", "twin,niced"],
            vec!["-f", "-C", "0123456789abcdefXYZ"],
            vec!["-f", "-C", "0123456789abcde"],
            vec!["-f", "-s", &sid, "-u", "nobody"],
            vec!["-f", "-s", &sid, "-U", "65534"],
            vec!["-f", "-t", &tty],
            vec!["-f", "-s", &sid, "-t", &tty],
            vec!["-o", "pid,tty,tpgid,stat,comm", "-t", &tty],
            vec!["-o", "pid,comm", "-q", &pids],
            vec!["u", "-p", &pids],
            vec!["-o", "pid,comm", &pids],
            vec!["-o", "pid,stat,comm", "r", "-s", &sid],
            vec!["-f", "-g", &sid],
        ] {
            assert_same(&sel, c, backend);
        }
        for cols in ["20", "9", "200"] {
            assert_same(
                &["-f", "--sid", &sid],
                &[("LC_ALL", "C.UTF-8"), ("COLUMNS", cols)],
                backend,
            );
        }
    }
}

#[test]
fn ps_errors_match_procps() {
    ensure_procps();
    for args in [
        &["-Q"][..],
        &["--bogus"],
        &["-p"],
        &["-p", "0"],
        &["-p", "1,,2"],
        &["-p", "x"],
        &["-o"],
        &["-o", "bogus"],
        &["-o", ""],
        &["-o", "pid:x"],
        &["-o", "pid:0"],
        &["-o", "DefBSD:5"],
        &["--sort", "bogus"],
        &["--sort="],
        &["-u", "no-such-user-at-all"],
        &["-G", "no-such-group-at-all"],
        &["-t", "no-such-tty"],
        &["-L", "-T"],
        &["-L", "--forest"],
        &["-f", "-o", "pid"],
        &["-j", "-o", "pid"],
        &["-y"],
        &["-q", "1", "-p", "2"],
        &["-q", "1", "--sort", "pid"],
        &["--cols", "0"],
        &["-e", "-V"],
        &["--no-headers", "--no-headers"],
        &["-p", "2147483648"],
        &["-ww", "--sid", "1", "-o", "pid"],
        &["-p", "999999999", "-o", "pid"],
    ] {
        for backend in BACKENDS {
            assert_same(args, &[("LC_ALL", "C")], backend);
        }
    }
}

#[test]
fn ps_refuses_what_it_does_not_implement_by_name() {
    for (args, name) in [
        (&["-o", "pid,ipcns"][..], "ipcns"),
        (&["-o", "pid,cgroup"], "cgroup"),
        (&["axe"], "'e'"),
        (&["-m"], "-m"),
        (&["--context"], "--context"),
        (&["--sort", "start_code"], "start_code"),
    ] {
        let o = Command::new(BIN)
            .arg("ps")
            .args(args)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?} printed a listing");
        assert!(
            err.contains(name) && err.contains("not supported"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn ps_answers_as_an_unprivileged_user_and_in_a_child_pid_namespace() {
    ensure_procps();
    let fx = Fixture::start();
    let sid = fx.sid.to_string();
    super::test_user();
    let as_user = |prog: &[&str]| {
        let o = super::as_test_user(prog[0])
            .args(&prog[1..])
            .args(["-o", "pid,user,stat,comm,args", "--sid", &sid])
            .env("LC_ALL", "C")
            .env("TASKDIAG_BACKEND", "auto")
            .output()
            .expect("setpriv");
        (o.stdout, o.stderr, o.status.code())
    };
    let ours = agree(|| as_user(&["/usr/bin/ps"]), || as_user(&[BIN, "ps"]))
        .unwrap_or_else(|m| panic!("unprivileged listing differs from procps: {m:?}"));
    assert_eq!(ours.2, Some(0), "{}", String::from_utf8_lossy(&ours.1));
    // In a new pid namespace, both see only the namespace, numbered from 1.
    for backend in BACKENDS {
        let script = format!(
            "{}sleep 100 & wait_comm $! sleep; /usr/bin/ps -e -o pid,ppid,comm; echo ---; \
             TASKDIAG_BACKEND={backend} {BIN} ps -e -o pid,ppid,comm; kill %1",
            taskdiag_test_support::process::sh_waits()
        );
        let o = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
            .output()
            .expect("unshare");
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let (theirs, ours) = text.split_once("---\n").expect("two listings");
        // Each listing shows itself as the last process; compare everything else.
        let strip = |s: &str| {
            s.lines()
                .filter(|l| !l.ends_with(" ps") && !l.ends_with(" taskdiag"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(theirs), strip(ours), "{backend}: {text}");
        assert!(
            theirs.lines().any(|l| l.trim_start().starts_with("1 ")),
            "{text}"
        );
    }
}
