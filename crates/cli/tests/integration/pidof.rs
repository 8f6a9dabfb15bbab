//! Differential tests of `taskdiag pidof` against procps-ng 4.0.2's pidof (built by
//! scripts/procps-suite under /var/tmp/taskdiag-procps-suite; skipped, saying so, where it is
//! not there): the same arguments on the same processes must give the same output, messages
//! and exit status, on both backends.
//!
//! The processes are a fixture whose every name carries a tag unique to it (so that nothing
//! else on the machine matches, and two fixtures never see each other): sleeps through a
//! symlink (argv[0] as a path, a bare name, a login shell's `-name`), a copy of sleep (found by
//! its executable only), a setproctitle-style argv[0] with a space, a shell script run through
//! its `#!` line and one run as `sh SCRIPT` (for -x), a Python process with a chrooted child
//! (for -c) and a zombie. Where the rest of the system takes part (kernel threads with -w),
//! procps is read on both sides of ours (taskdiag_test_support::compare).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use taskdiag_test_support::compare::{agree, agree_by};
use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{output_within, wait_exec, wait_for, Spawned};
use taskdiag_test_support::tasks;

use super::BIN;

/// procps-ng 4.0.2's pidof, as scripts/procps-suite builds it.
const PROCPS_PIDOF: &str = "/var/tmp/taskdiag-procps-suite/procps-4.0.2/src/pidof";

/// The reference pidof, or `None` (and a note on standard error) where it was not built.
fn reference() -> Option<&'static str> {
    let ok = Command::new(PROCPS_PIDOF)
        .arg("-V")
        .output()
        .is_ok_and(|o| o.stdout == b"pidof from procps-ng 4.0.2\n");
    if !ok {
        eprintln!(
            "skipping: no procps-ng 4.0.2 pidof at {PROCPS_PIDOF} (scripts/procps-suite builds it)"
        );
    }
    ok.then_some(PROCPS_PIDOF)
}

/// A command's status, output and messages.
#[derive(Clone, PartialEq, Eq)]
struct Shown {
    status: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Shown {
    fn of(o: Output) -> Shown {
        Shown {
            status: o.status.code(),
            stdout: o.stdout,
            stderr: o.stderr,
        }
    }

    /// Standard error's first line only (the usage text after it is our own).
    fn first_err_line(mut self) -> Shown {
        let end = self
            .stderr
            .iter()
            .position(|&c| c == b'\n')
            .unwrap_or(self.stderr.len());
        self.stderr.truncate(end);
        self
    }
}

impl std::fmt::Debug for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr)
        )
    }
}

fn run(cmd: &mut Command) -> Shown {
    Shown::of(output_within(
        cmd.env("LC_ALL", "C.UTF-8").stdin(Stdio::null()),
        Duration::from_secs(60),
    ))
}

/// procps' pidof with `args` (argv[0] `pidof`, as getopt's messages start with it).
fn procps(pidof: &str, args: &[String]) -> Shown {
    run(Command::new(pidof).arg0("pidof").args(args))
}

/// Whether task `pid` has its arguments now (past an exec's window without them), or is gone.
fn exec_done(pid: u32) -> bool {
    tasks::read(format!("/proc/{pid}/cmdline")).is_none_or(|c| !c.is_empty())
}

/// `taskdiag pidof ARGS` on `backend`.
fn ours(args: &[String], backend: &str) -> Shown {
    run(Command::new(BIN)
        .arg("pidof")
        .args(args)
        .env("TASKDIAG_BACKEND", backend))
}

const BACKENDS: [&str; 2] = ["procfs", "bpf"];

/// Whether `ours` shows what `reference` does, but for pids of tasks that are gone now, or
/// that were born after `since` (clock ticks since boot) and changed since.
///
/// A task can match only during our read. A concurrent test's process between losing its
/// memory at exit and being reaped has an empty argv[0], which `nothing/` and kernel-thread
/// names match; so has a process in the middle of an exec, between taking its new memory and
/// having its arguments set up there (`begin_new_exec` and `create_elf_tables`). procps read
/// before and after ours cannot see either, so the extra pid is accepted when /proc has no such
/// task any more, or only its zombie (whose root link procps cannot read for `-c`: it read the
/// zombie after ours saw the task still exiting), or when the task was born during this
/// comparison and has its arguments now (a fork that went on to exec). A listed live task that
/// was there before, or one without arguments still, or a missing one, still differs.
fn same_but_vanished(since: u64, reference: &Shown, ours: &Shown) -> bool {
    if reference == ours {
        return true;
    }
    if (reference.status, &reference.stderr) != (ours.status, &ours.stderr) {
        return false;
    }
    let words = |t: &[u8]| -> Vec<Vec<u8>> {
        t.split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let want = words(&reference.stdout);
    let gone = |w: &[u8]| {
        !want.iter().any(|r| r == w)
            && std::str::from_utf8(w).is_ok_and(|pid| {
                // (No state: the task is gone.)
                pid.parse::<u32>().is_ok_and(|n| {
                    matches!(tasks::state(n), None | Some('Z' | 'X'))
                        || (tasks::start_ticks(n).is_none_or(|born| born >= since) && exec_done(n))
                })
            })
    };
    let kept: Vec<_> = words(&ours.stdout)
        .into_iter()
        .filter(|w| !gone(w))
        .collect();
    kept == want
}

/// Both tools must agree on `args`, on both backends (but for tasks that lived only during
/// our read: `same_but_vanished`); returns procps' answer.
fn check(pidof: &str, args: &[String]) -> Shown {
    let mut got = None;
    for backend in BACKENDS {
        // (Both clocks are the boot-time clock rounded down to a tick: a task born after
        // this has a start time of at least this.)
        let since = tasks::boot_ticks();
        let r = agree_by(
            || procps(pidof, args),
            || ours(args, backend),
            |r, o| same_but_vanished(since, r, o),
        )
        .unwrap_or_else(|m| panic!("pidof {args:?} on {backend}: {m}"));
        got = Some(r);
    }
    got.expect("a backend")
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The fixture: its processes are killed on drop.
struct Fixture {
    dir: TempDir,
    /// Unique to this fixture, in every name.
    tag: String,
    /// By role.
    procs: Vec<(&'static str, Spawned)>,
    /// The Python leader's children: chrooted, and the zombie.
    chrooted: u32,
    zombie: u32,
}

/// A Python process (argv[0] set by the caller) with a chrooted child and a zombie named
/// argv[2]; prints their pids, then waits.
const PY_FIXTURE: &str = r#"
import os, sys, json, time
d, zname = sys.argv[1], sys.argv[2]
c = os.fork()
if c == 0:
    os.chroot(d)
    os.chdir("/")
    time.sleep(1000)
    os._exit(0)
z = os.fork()
if z == 0:
    with open("/proc/self/comm", "w") as f:
        f.write(zname)
    os._exit(0)
print(json.dumps({"chrooted": c, "zombie": z}), flush=True)
time.sleep(1000)
"#;

impl Fixture {
    fn start() -> Fixture {
        static N: AtomicUsize = AtomicUsize::new(0);
        let tag = format!(
            "{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = TempDir::new("pidof");
        let name = |role: &str| format!("{role}{tag}");
        let sleep_link = dir.join(name("A"));
        std::os::unix::fs::symlink("/bin/sleep", &sleep_link).expect("symlink");
        let title_link = dir.join(name("C"));
        std::os::unix::fs::symlink("/bin/sleep", &title_link).expect("symlink");
        let copy = dir.join(name("B"));
        std::fs::copy("/bin/sleep", &copy).expect("copy sleep");
        let script = dir.join(name("S"));
        std::fs::write(&script, "#!/bin/sh\nwhile :; do sleep 1000; done\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let shscript = dir.join(name("T"));
        std::fs::write(&shscript, "while :; do sleep 1000; done\n").expect("script");

        let mut procs = Vec::new();
        let mut spawn = |role: &'static str, cmd: &mut Command, comm: &str| {
            // A group of its own, killed whole: the scripts' sleeps go with them.
            let s = Spawned::spawn_group(cmd.stdin(Stdio::null()));
            wait_exec(s.pid(), comm);
            procs.push((role, s));
        };
        let a = name("A");
        // argv[0] a path, a bare name, a login shell's.
        spawn("a_path", Command::new(&sleep_link).arg("1000"), &a);
        spawn("a_name", Command::new(&sleep_link).arg0(&a).arg("1000"), &a);
        spawn(
            "a_login",
            Command::new(&sleep_link).arg0(format!("-{a}")).arg("1000"),
            &a,
        );
        // Found by its executable, or by an argv[0] of another name.
        spawn(
            "b_exe",
            Command::new(&copy).arg0(name("U")).arg("1000"),
            &name("B"),
        );
        // setproctitle: a space in argv[0]; matched by its name.
        spawn(
            "c_title",
            Command::new(&title_link)
                .arg0(format!("{}: worker", name("C")))
                .arg("1000"),
            &name("C"),
        );
        // A script through its #! line (the interpreter is named after it), and through sh.
        spawn("s_script", &mut Command::new(&script), &name("S"));
        spawn("t_sh", Command::new("sh").arg(&shscript), "sh");

        let mut py = Command::new("/usr/bin/python3");
        py.arg0(name("R"))
            .args(["-c", PY_FIXTURE])
            .arg(dir.path())
            .arg(name("Z"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut leader = Spawned::spawn_group(&mut py);
        let line = leader.first_line();
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("fixture said {line:?}: {e}"));
        let chrooted = v["chrooted"].as_u64().expect("pid") as u32;
        let zombie = v["zombie"].as_u64().expect("pid") as u32;
        let root = dir.path().to_path_buf();
        wait_for("the chrooted child and the zombie", || {
            std::fs::read_link(format!("/proc/{chrooted}/root")).ok() == Some(root.clone())
                && tasks::state(zombie) == Some('Z')
                && tasks::comm(zombie).as_deref() == Some(name("Z").as_str())
        });
        procs.push(("r_leader", leader));
        Fixture {
            dir,
            tag,
            procs,
            chrooted,
            zombie,
        }
    }

    fn name(&self, role: &str) -> String {
        format!("{role}{}", self.tag)
    }

    fn pid(&self, role: &str) -> u32 {
        self.procs
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, s)| s.pid())
            .unwrap_or_else(|| panic!("no {role}"))
    }

    fn path(&self, role: &str) -> String {
        self.dir.join(self.name(role)).display().to_string()
    }

    /// Replaces `{A}`..`{Z}` by names, `{/A}`.. by paths in the fixture's directory,
    /// `{pid:ROLE}` by pids.
    fn expand(&self, args: &[&str]) -> Vec<String> {
        args.iter()
            .map(|a| {
                let mut s = a.to_string();
                for role in ["A", "B", "C", "R", "S", "T", "U", "Z"] {
                    s = s.replace(&format!("{{/{role}}}"), &self.path(role));
                    s = s.replace(&format!("{{{role}}}"), &self.name(role));
                }
                for (role, p) in &self.procs {
                    s = s.replace(&format!("{{pid:{role}}}"), &p.pid().to_string());
                }
                s.replace("{pid:chrooted}", &self.chrooted.to_string())
                    .replace("{pid:zombie}", &self.zombie.to_string())
            })
            .collect()
    }
}

/// The pids (as text) procps printed.
fn listed(s: &Shown) -> Vec<String> {
    String::from_utf8_lossy(&s.stdout)
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn pidof_matches_procps_on_the_fixture() {
    let Some(pidof) = reference() else { return };
    let f = Fixture::start();
    let pids = |roles: &[&str]| -> Vec<String> {
        roles
            .iter()
            .map(|r| match *r {
                "chrooted" => f.chrooted.to_string(),
                "zombie" => f.zombie.to_string(),
                r => f.pid(r).to_string(),
            })
            .collect()
    };
    // (arguments, what procps must have listed: a check that the fixture is what we think)
    let cases: &[(&[&str], &[&str])] = &[
        (&["{A}"], &["a_login", "a_name", "a_path"]),
        (&["{/A}"], &["a_login", "a_name", "a_path"]),
        (&["-s", "{A}"], &["a_login"]),
        (&["--single-shot", "{A}", "{B}"], &["a_login", "b_exe"]),
        (
            &["-S", ",", "{A}", "{B}"],
            &["a_login", "a_name", "a_path", "b_exe"],
        ),
        (&["-S", "", "{B}", "none{A}"], &["b_exe"]),
        (
            &["--separator=--", "{B}", "{A}", "{B}"],
            &["b_exe", "a_login", "a_name", "a_path", "b_exe"],
        ),
        (&["-q", "{A}"], &[]),
        (&["--quiet", "{A}", "none{A}"], &[]),
        (&["-q", "none{A}"], &[]),
        (&["none{A}"], &[]),
        (&["none{A}", "{B}", "", "{A}x"], &["b_exe"]),
        (&[""], &[]),
        (&[], &[]),
        (&["-n", "-m", "{A}"], &["a_login", "a_name", "a_path"]),
        (&["-w", "{A}"], &["a_login", "a_name", "a_path"]),
        (&["--", "-{A}"], &[]),
        (&["-o", "{pid:a_name}", "{A}"], &["a_login", "a_path"]),
        (
            &["-o", "{pid:a_name},{pid:a_path};{pid:a_login}", "{A}"],
            &[],
        ),
        (
            &["--omit-pid={pid:a_path}:x1:abc", "-o", " 1", "{A}"],
            &["a_login", "a_name"],
        ),
        (
            &["-o", "-1", "-o", "%PPID", "{A}"],
            &["a_login", "a_name", "a_path"],
        ),
        (&["{B}"], &["b_exe"]),
        (&["{/B}"], &["b_exe"]),
        (&["{U}"], &["b_exe"]),
        (&["{C}"], &["c_title"]),
        (&["{C}:"], &[]),
        (&["{S}"], &[]),
        (&["-x", "{S}"], &["s_script"]),
        (&["-x", "{/S}"], &["s_script"]),
        (&["-x", "{T}"], &[]),
        (&["-x", "-s", "{S}", "{A}"], &["s_script", "a_login"]),
        (&["{R}"], &["chrooted", "r_leader"]),
        (&["-c", "{R}"], &["r_leader"]),
        (
            &["--check-root", "{R}", "{A}"],
            &["r_leader", "a_login", "a_name", "a_path"],
        ),
        (&["{Z}"], &[]),
        (&["-w", "{Z}"], &["zombie"]),
        (&["-w", "-c", "{Z}"], &[]),
    ];
    for (args, want) in cases {
        let args = f.expand(args);
        let got = check(pidof, &args);
        // (Order is procps': what is checked here is that the fixture is what we think.)
        let (mut have, mut want) = (listed(&got), pids(want));
        have.sort();
        want.sort();
        assert_eq!(have, want, "pidof {args:?}: {got:?}");
    }
}

#[test]
fn pidof_kernel_workers_and_empty_basenames_match_procps() {
    let Some(pidof) = reference() else { return };
    // kthreadd is pid 2 wherever there are kernel threads; -w finds it by its name only.
    let got = check(pidof, &strings(&["-w", "kthreadd"]));
    if got.stdout != b"2\n" {
        eprintln!("no kthreadd here: only compared the absence");
    }
    check(pidof, &strings(&["kthreadd"]));
    check(pidof, &strings(&["-w", "-s", "kthreadd", "ksoftirqd/0"]));
    // A program ending in '/' has an empty basename, which every empty argv[0] (kernel
    // threads, zombies) equals.
    check(pidof, &strings(&["-q", "nothing/"]));
    check(pidof, &strings(&["-w", "-c", "nothing/", "kthreadd"]));
}

#[test]
fn pidof_omits_its_parent_with_ppid_like_procps() {
    let Some(pidof) = reference() else { return };
    let f = Fixture::start();
    // A shell named like the fixture runs the tool (as a child, not by exec): it is listed,
    // unless -o %PPID. Its pid differs between runs: it prints it first, and it is mapped.
    let a = f.name("A");
    let script = "echo $$; \"$@\"; echo rc=$?";
    let via_shell = |tool: &[&str], backend: &str, args: &[&str]| -> String {
        let o = output_within(
            Command::new("sh")
                .arg0(&a)
                .args(["-c", script, "sh"])
                .args(tool)
                .args(args)
                .env("LC_ALL", "C.UTF-8")
                .env("TASKDIAG_BACKEND", backend)
                .stdin(Stdio::null()),
            Duration::from_secs(60),
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let (sh, rest) = text.split_once('\n').expect("the shell's pid");
        // The shell's pid, as a whole word, becomes SH.
        let mut mapped = String::new();
        let mut word = String::new();
        for c in rest.chars().chain(std::iter::once('\0')) {
            if c.is_ascii_digit() {
                word.push(c);
                continue;
            }
            mapped.push_str(if word == sh { "SH" } else { &word });
            word.clear();
            if c != '\0' {
                mapped.push(c);
            }
        }
        format!("{mapped}--- stderr\n{}", String::from_utf8_lossy(&o.stderr))
    };
    for args in [
        &["{A}"][..],
        &["-o", "%PPID", "{A}"],
        &["-o", "%PPID,%PPID", "-s", "{A}"],
        &["-o", "%PPIDx", "{A}"],
    ] {
        let args = f.expand(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = via_shell(&[pidof], "", &args);
        assert!(
            want.contains(&f.pid("a_login").to_string()),
            "{args:?} {:?}: {want}",
            f.procs
                .iter()
                .map(|(r, p)| (*r, p.pid()))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            want.contains("SH"),
            !args.contains(&"%PPID") && !args.contains(&"%PPID,%PPID"),
            "{want}"
        );
        for backend in BACKENDS {
            let got = via_shell(&[BIN, "pidof"], backend, &args);
            assert_eq!(got, want, "pidof {args:?} on {backend}");
        }
    }
}

#[test]
fn pidof_usage_and_errors_match_procps() {
    let Some(pidof) = reference() else { return };
    let cases: &[&[&str]] = &[
        &["-z"],
        &["-d", ",", "x"],
        &["-t", "x"],
        &["-o"],
        &["-S"],
        &["--s", "x"],
        &["--quiet=1", "x"],
        &["--omit-pid"],
        &["--foo=1"],
        &["-?"],
        &["-q", "-?", "x"],
    ];
    for case in cases {
        let args = strings(case);
        let want = procps(pidof, &args).first_err_line();
        for backend in BACKENDS {
            let got = ours(&args, backend).first_err_line();
            assert_eq!(got, want, "pidof {args:?} on {backend}");
        }
        assert_eq!(want.status, Some(1), "{args:?}");
        assert!(want.stdout.is_empty(), "{args:?}");
    }
    // Help on standard output, status 0 (the text is our own, in procps' layout).
    let want = procps(pidof, &strings(&["-h"]));
    let got = ours(&strings(&["--help", "x"]), "procfs");
    assert_eq!((got.status, want.status), (Some(0), Some(0)));
    let text = String::from_utf8_lossy(&got.stdout);
    for line in String::from_utf8_lossy(&want.stdout)
        .lines()
        .filter(|l| l.starts_with(" -"))
    {
        assert!(text.contains(line), "help lacks {line:?}:\n{text}");
    }
    let got = ours(&strings(&["-V"]), "procfs");
    assert_eq!(got.status, Some(0));
    assert!(got.stdout.starts_with(b"pidof from "), "{got:?}");
}

#[test]
fn argv0_pidof_is_pidof() {
    let Some(pidof) = reference() else { return };
    let f = Fixture::start();
    let dir = f.dir.join("bin");
    std::fs::create_dir_all(&dir).expect("dir");
    let link: PathBuf = dir.join("pidof");
    std::os::unix::fs::symlink(BIN, &link).expect("symlink");
    let args = f.expand(&["-S", ":", "{A}", "{B}"]);
    let want = agree(
        || procps(pidof, &args),
        || run(Command::new(Path::new(&link)).args(&args)),
    );
    let want = want.unwrap_or_else(|m| panic!("{m}"));
    assert_eq!(listed(&want).len(), 4, "{want:?}");
}
