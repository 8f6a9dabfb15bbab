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
    assert_same_or(args, env, backend, String::new);
}

/// [`assert_same`], adding what `context` says when they differ.
fn assert_same_or(
    args: &[&str],
    env: &[(&str, &str)],
    backend: &str,
    context: impl FnOnce() -> String,
) {
    if let Err(m) = agree_between(
        || both(args, env, "procps"),
        || both(args, env, backend),
        |b, o, a| text_between(b, o, a),
    ) {
        panic!(
            "ps {} ({backend}, {env:?}) differs: {}{}",
            args.join(" "),
            Shown(m),
            context()
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
        // Code and stack addresses (stat fields 26-28) and the formats built on them.
        vec![
            "-o",
            "pid,trs,drs,tsiz,dsiz,m_trs,m_drs,trss,stackp,start_stack,comm",
        ],
        vec!["-o", "pid,stackp,comm", "--sort=-stackp,pid"],
        vec!["-o", "pid,vsz,comm", "--sort=start_code"],
        vec!["v"],
        vec!["X"],
        vec!["-o", "pid,lim,comm", "--sort=lim,pid"],
        // The memory format m (a failed first parse makes -m it).
        vec!["-m", "-H"],
        // Namespaces (a child in net, uts and ipc namespaces of its own).
        vec![
            "-o",
            "pid,ipcns,mntns,netns,pidns,userns,utsns,cgroupns,timens,comm",
        ],
        vec!["-L", "-o", "pid,lwp,netns,utsns", "--sort=-netns,lwp"],
        // Cgroups, the executable and I/O counters.
        vec!["-o", "pid,cgroup,cgname,lxc,comm"],
        vec!["-o", "pid,cgname,comm", "--sort=cgroup,-pid"],
        vec!["-o", "pid,exe,comm", "--sort=-exe,pid"],
        vec![
            "-o",
            "pid,rchars,wchars,rops,wops,rbytes,wbytes,wcbytes,comm",
        ],
        // Security labels (none on most test machines: `-`), and the formats that add them.
        vec!["-o", "pid,label,context,zone,comm", "--sort=label,-pid"],
        vec!["Z"],
        vec!["-Z", "-f"],
        vec!["--context"],
        // OOM scores, autogroups and the login uid.
        vec!["-o", "pid,oom,oomadj,ag_id,ag_nice,luid,comm"],
        vec!["-L", "-o", "pid,lwp,oom,luid,comm", "--sort=-oom,ag_id,lwp"],
        // The environment after the command (BSD e), with c, -f and u.
        vec!["e"],
        vec!["ec", "-o", "pid,comm,args"],
        vec!["e", "-f"],
        vec!["eu"],
        vec![
            "-L",
            "-o",
            "pid,lwp,rchars,wchars,rops,comm",
            "--sort=-wchars,lwp",
        ],
        // AIX descriptors: columns under AIX headers, literal text between them, and what a
        // failed first parse made kept in front.
        vec!["-o", "%p %G %c"],
        vec!["-o", "%C %G %P %U %a %c %g %n %p %r %t %u %x %y %z"],
        vec!["-o", "%p%c"],
        vec!["-o", "c %p"],
        vec!["-O", "%n"],
        vec!["O", "%u"],
        // Specifiers computed from what ps already reads, and procps' test columns.
        vec!["-o", "pid,cuu,cuc,numa,eip,esp,environ,comm"],
        vec!["-o", "pid,numa,eip,comm", "--sort=-eip,numa,-pid"],
        vec!["-L", "-o", "pid,lwp,eip,esp,numa,comm"],
        vec!["-o", "pid,_left,_left2,_right,_right2,_unlimited"],
        vec!["-o", "pid,_unlimited2", "--headers", "--rows", "4"],
        // Threads after processes, alone and with the thread options.
        vec!["-m"],
        vec!["m"],
        vec!["-m", "-f"],
        vec!["-m", "-L"],
        vec!["-m", "-T"],
        vec!["-m", "-j"],
        vec!["m", "u"],
        vec!["m", "j"],
        vec!["m", "s"],
        vec![
            "-m",
            "-o",
            "pid,tid,lwp,comm,stat,nlwp,rss,time,uid,user,f,s,%cpu",
        ],
        vec!["-m", "-o", "%p %c"],
        vec!["m", "--headers", "--rows", "7"],
        vec!["-m", "--no-headers"],
        // Sorted listings show processes alone, even with threads asked for.
        vec!["-m", "--sort=-pid"],
        vec!["-L", "--sort=pid"],
        vec!["-T", "k", "-pid"],
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
            vec!["-m", "-p", &pids],
            vec!["-m", "-q", &pids],
            vec!["-m", "-C", "threaded,twin"],
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

/// Every personality procps 4.0.2 knows (and names it does not), on the common invocations:
/// the formats they pick, BSD-only parsing, what `h`, `m` and `-x` mean.
#[test]
fn ps_personalities_match_procps() {
    ensure_procps();
    let fx = Fixture::start();
    let sid = fx.sid.to_string();
    // Each name procps treats differently, with the invocations that show it.
    let common: &[&[&str]] = &[
        &[],
        &["-f"],
        &["u"],
        &["-o", "pid,comm"],
        &["-l"],
        &["-j"],
        &["-fl"],
        &["-jf"],
        &["l"],
        &["j"],
        &["s"],
        &["-c"],
        &["-ly"],
        &["h", "--rows", "6"],
        // The memory and virtual-memory formats, which differ by personality.
        &["m"],
        &["X"],
        &["v"],
    ];
    let primary = [
        "bsd", "old", "linux", "posix", "sunos4", "aix", "hpux", "irix", "svr4", "debian", "tru64",
        "os390", "unknown",
    ];
    // Aliases and names procps does not know (the default), on a few of them.
    let aliases = [
        "default",
        "BSD",
        "gnu",
        "sgi",
        "sysv",
        "sco",
        "compaq",
        "digital",
        "s390",
        "390",
        "hp",
        "unix98",
        "unix95",
        "unix",
        "solaris2",
        "sun",
        "0123456789abcdefg",
    ];
    /// Arguments, and the environment they run in.
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>);
    let mut cases: Vec<Case> = Vec::new();
    for per in primary {
        for args in common {
            cases.push((args.to_vec(), vec![("PS_PERSONALITY", per)]));
        }
    }
    for per in aliases {
        for args in [&["-f"][..], &["-l"], &["u"], &["-j"]] {
            cases.push((args.to_vec(), vec![("PS_PERSONALITY", per)]));
        }
    }
    for (args, env) in [
        // -x means something only here (elsewhere it selects every process of ours).
        (&["-lx"][..], ("PS_PERSONALITY", "svr4")),
        (&["-x"], ("PS_PERSONALITY", "hpux")),
        // BSD m sorts by memory use under bsd.
        (&["m", "-o", "pid,rss,comm"], ("PS_PERSONALITY", "bsd")),
        (&["v"], ("PS_PERSONALITY", "tru64")),
        // BSD parsing takes -ef as e (the environment) and f (the forest).
        (&["-ef"], ("PS_PERSONALITY", "bsd")),
        // $CMD_ENV when $PS_PERSONALITY is unset, and the old personality on request.
        (&["-f"], ("CMD_ENV", "bsd")),
        (&["u"], ("I_WANT_A_BROKEN_PS", "1")),
    ] {
        cases.push((args.to_vec(), vec![env]));
    }
    // Irix, unless $_XPG asks for the standard.
    cases.push((vec!["-l"], vec![("PS_PERSONALITY", "irix"), ("_XPG", "1")]));
    for backend in BACKENDS {
        for (args, env) in &cases {
            let mut a = args.clone();
            a.extend(["--sid", &sid]);
            let mut e = env.clone();
            e.push(("LC_ALL", "C.UTF-8"));
            assert_same(&a, &e, backend);
        }
    }
}

/// procps' internal errors name the program as glibc's error_at_line does (argv[0]), and exit
/// without its BSD second chance: both run as `ps` (taskdiag through its multi-call name).
#[test]
fn ps_internal_errors_match_procps() {
    ensure_procps();
    use std::os::unix::process::CommandExt;
    for (args, per) in [
        (&["-c", "u"][..], "unknown"),
        (&["-fc"], "debian"),
        (&["-jc"], "os390"),
    ] {
        let run = |prog: &str| {
            let o = Command::new(prog)
                .arg0("ps")
                .args(args)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("PS_PERSONALITY", per)
                .output()
                .expect("run ps");
            (
                o.stdout,
                String::from_utf8_lossy(&o.stderr).into_owned(),
                o.status.code(),
            )
        };
        let theirs = run("/usr/bin/ps");
        assert!(
            theirs.1.starts_with("ps:src/ps/sortformat.c:"),
            "{theirs:?}"
        );
        assert_eq!(run(BIN), theirs, "{args:?} {per}");
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
        // AIX descriptors procps rejects.
        &["-o", "%"],
        &["-o", "%%p"],
        &["-o", "% p"],
        &["-o", "%q"],
        &["-o", "%pX"],
        &["-o", "ab %p"],
        &["-o", "%cpu,bogus"],
        // Not a procps 4.0.2 specifier.
        &["-o", "pid,docker"],
        &["-m", "-L", "-o", "pid"],
    ] {
        for backend in BACKENDS {
            assert_same(args, &[("LC_ALL", "C")], backend);
        }
    }
    // Errors under personalities: a forced BSD parse reports its own error; the screen-size
    // warning comes once per setup (twice with a second chance or a forced BSD parse).
    for (args, env) in [
        (&["-Q"][..], &[("PS_PERSONALITY", "bsd")][..]),
        (&["-x", "-Q"], &[("PS_PERSONALITY", "posix")]),
        (
            &["-o", "pid", "--sid", "1"],
            &[("PS_PERSONALITY", "bsd"), ("COLUMNS", "5")],
        ),
        (&["-Q"], &[("COLUMNS", "5")]),
        (&["-o", "pid", "--sid", "1"], &[("COLUMNS", "5")]),
    ] {
        for backend in BACKENDS {
            let mut e = env.to_vec();
            e.push(("LC_ALL", "C"));
            assert_same(args, &e, backend);
        }
    }
}

/// pss and uss (smaps_rollup) as procps shows them, sorted by them, for processes and threads:
/// for a static program, whose proportional sizes do not depend on which ps looks (the
/// fixtures above share libc with both), and for kernel threads (0).
#[test]
fn ps_pss_and_uss_match_procps() {
    let low = super::maps::NoPie::start(super::daemon_trust::as_root, 2, &[]);
    let pid = low.proc.pid().to_string();
    let c = &[("LC_ALL", "C")][..];
    for backend in BACKENDS {
        for form in [
            vec!["-o", "pid,pss,uss,comm", "-p", &pid],
            vec!["-L", "-o", "pid,lwp,pss,uss", "-p", &pid],
            // Without the names: a kworker's name carries the workqueue it runs now
            // ("kworker/1:0-events", then "-mm_percpu_wq"), which can change between procps's
            // reads and ours, and once did.
            vec![
                "-o",
                "pid,pss,uss",
                "--sort=-pss,uss,pid",
                "-p",
                &pid,
                "--ppid",
                "2",
            ],
        ] {
            // Once (6.12, CI), the kernel threads were missing from ours: then say what the
            // backend itself lists as their parent's children.
            assert_same_or(&form, c, backend, || {
                let o = Command::new(BIN)
                    .args(["dump", "-b", backend, "--children-of", "2", "-g", "base"])
                    .output()
                    .expect("dump");
                format!(
                    "\n--- dump --children-of 2 now ---\n{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            });
        }
    }
    let o = Command::new(BIN)
        .args(["ps", "-o", "pss=,uss=", "-p", &pid])
        .output()
        .expect("ps");
    let v: Vec<u64> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    // The 1 MiB heap it wrote is its own.
    assert!(v.len() == 2 && v[1] >= 1024 && v[0] >= v[1], "{v:?}");
}

/// A tree of systemd-style cgroups (a service in a slice, a user service, a login session, a
/// machine) under the cgroup2 mount, where sd-login looks on unified and hybrid hosts alike,
/// each holding a sleeper; removed, after its sleepers, on drop — only the directories it made
/// (on a systemd host `user.slice` and `machine.slice` are systemd's).
struct SystemdTree {
    /// The directories made, parents before children.
    made: Vec<std::path::PathBuf>,
    sleepers: Vec<Spawned>,
}

impl SystemdTree {
    const LEAVES: [&'static str; 4] = [
        "td-test.slice/td-test-x.service",
        "user.slice/user-4242.slice/user@4242.service/app.slice/td-test-app.service",
        "user.slice/user-4242.slice/session-c77.scope",
        "machine.slice/machine-tdtestvm.scope",
    ];

    fn new() -> SystemdTree {
        let base = taskdiag_test_support::tasks::cgroup2_mount()
            .expect("a cgroup2 mount (sd-login reads the unified hierarchy)");
        let mut t = SystemdTree {
            made: Vec::new(),
            sleepers: Vec::new(),
        };
        for leaf in Self::LEAVES {
            let mut dir = base.clone();
            for part in leaf.split('/') {
                dir.push(part);
                if !dir.exists() {
                    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
                    t.made.push(dir.clone());
                }
            }
            let s = Spawned::spawn(Command::new("sleep").arg("1000"));
            std::fs::write(dir.join("cgroup.procs"), s.pid().to_string())
                .unwrap_or_else(|e| panic!("moving {} to {}: {e}", s.pid(), dir.display()));
            t.sleepers.push(s);
        }
        t
    }

    fn pids(&self) -> String {
        let p: Vec<String> = self.sleepers.iter().map(|s| s.pid().to_string()).collect();
        p.join(",")
    }
}

impl Drop for SystemdTree {
    fn drop(&mut self) {
        self.sleepers.clear();
        // Children first; a cgroup empties a moment after its task is reaped.
        for dir in self.made.iter().rev() {
            for _ in 0..100 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// The systemd columns (unit, uunit, slice, lsession, machine, ouid, seat) as procps (built
/// with libsystemd, as Debian's is) shows them, sorted by them, for processes in a service,
/// a user service, a login session and a machine's scope.
#[test]
fn ps_systemd_columns_match_procps() {
    ensure_procps();
    let tree = SystemdTree::new();
    let pids = tree.pids();
    let c = &[("LC_ALL", "C")][..];
    for backend in BACKENDS {
        for form in [
            vec![
                "-o",
                "pid,unit,uunit,slice,lsession,machine,ouid,seat,comm",
                "-p",
                &pids,
            ],
            vec![
                "-o",
                "pid,slice,unit",
                "--sort=slice,-unit,pid",
                "-p",
                &pids,
            ],
            vec!["-L", "-o", "pid,lwp,unit,ouid", "-p", &pids],
        ] {
            assert_same(&form, c, backend);
        }
    }
    let o = Command::new(BIN)
        .args(["ps", "-o", "unit=,uunit=,lsession=,ouid=", "-p", &pids])
        .output()
        .expect("ps");
    let out = String::from_utf8_lossy(&o.stdout);
    for want in ["td-test-x.service", "td-test-app.service", "c77", "4242"] {
        assert!(out.contains(want), "{want} in {out}");
    }
}

/// `--info` reports as procps' does, to standard error: the personality's standard formats
/// (byte for byte), the screen and the personality; alone, as procps requires.
#[test]
fn ps_info_reports_like_procps() {
    ensure_procps();
    for per in [None, Some("bsd"), Some("tru64")] {
        let run = |prog: &str| {
            let mut cmd = Command::new(prog);
            if prog == BIN {
                cmd.arg("ps");
            }
            cmd.arg("--info").env_remove("PS_PERSONALITY");
            if let Some(p) = per {
                cmd.env("PS_PERSONALITY", p);
            }
            cmd.output().expect("run")
        };
        let (ours, theirs) = (run(BIN), run("/usr/bin/ps"));
        assert_eq!(ours.status.code(), theirs.status.code(), "{per:?}");
        assert!(ours.stdout.is_empty() && theirs.stdout.is_empty());
        let head = |o: &std::process::Output| {
            let e = String::from_utf8_lossy(&o.stderr).into_owned();
            e.lines().take(10).map(str::to_string).collect::<Vec<_>>()
        };
        assert_eq!(head(&ours), head(&theirs), "{per:?}");
        let line = |o: &std::process::Output, k: &str| {
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .find(|l| l.starts_with(k))
                .map(str::to_string)
        };
        for k in ["screen_cols=", "personality=", "EUID=", "archdefs:"] {
            assert_eq!(line(&ours, k), line(&theirs, k), "{per:?} {k}");
        }
    }
    // Not alone: procps' error, usage and status.
    let c = &[("LC_ALL", "C")][..];
    assert_same(&["--info", "-e"], c, "procfs");
}

/// Where procps 4.0.2 cannot be matched because it misbehaves, ours does what procps means:
/// with m/-m, thread lines show the real values of thread-only columns procps never reads
/// there (it prints leftovers, or crashes on WCHAN): the values `-L` shows; and a thread
/// selected without its process gets one process line (procps prints it forever).
#[test]
fn ps_threads_after_processes_where_procps_misbehaves() {
    ensure_procps();
    let fx = Fixture::start();
    let pid = fx.pid("threads");
    for backend in BACKENDS {
        let ours = |args: &[&str]| {
            let o = Command::new(BIN)
                .arg("ps")
                .args(args)
                .env("TASKDIAG_BACKEND", backend)
                .env("LC_ALL", "C")
                .output()
                .expect("run");
            assert_eq!(o.status.code(), Some(0), "{args:?}");
            String::from_utf8(o.stdout).expect("text")
        };
        let columns = "ni,pri,opri,psr,cls,rtprio,sched,wchan";
        let with_tid = format!("tid,{columns}");
        let m_lines = || ours(&["-m", "--no-headers", "-p", &pid, "-o", &with_tid]);
        // Thread lines are those with a tid (the process line has '-' there). Compared as
        // sets: what is under test is the values, not the order of the threads.
        let thread_lines = || -> Vec<String> {
            let mut v: Vec<String> = m_lines()
                .lines()
                .filter(|l| !l.trim_start().starts_with('-'))
                .map(str::to_string)
                .collect();
            v.sort();
            v
        };
        let l_lines = || -> Vec<String> {
            let o = Command::new("/usr/bin/ps")
                .args(["-L", "--no-headers", "-p", &pid, "-o"])
                .arg(format!("lwp,{columns}"))
                .env("LC_ALL", "C")
                .output()
                .expect("run ps");
            let mut v: Vec<String> = String::from_utf8(o.stdout)
                .expect("text")
                .lines()
                .map(str::to_string)
                .collect();
            v.sort();
            v
        };
        let threads = agree(l_lines, thread_lines)
            .unwrap_or_else(|e| panic!("{backend}: -m thread lines are not -L's: {e:?}"));
        assert_eq!(threads.len(), 4, "{threads:?}");
        // The process line shows '-' in every thread-only column.
        let m = m_lines();
        let process: Vec<&str> = m
            .lines()
            .find(|l| l.trim_start().starts_with('-'))
            .expect("process line")
            .split_whitespace()
            .collect();
        assert!(process.iter().all(|w| *w == "-"), "{m}");
        // A thread named unlike its process, selected by its name (other fixtures running
        // at the same time have one too).
        let alone = ours(&["-m", "-C", "worker-0", "-o", "pid,comm"]);
        let mine: Vec<Vec<&str>> = alone
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|w| w.first() == Some(&pid.as_str()))
            .collect();
        assert_eq!(mine, [[pid.as_str(), "worker-0"]], "{backend}: {alone}");
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
            .args(["-o", "pid,user,stat,netns,utsns,comm,args", "--sid", &sid])
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
