//! `taskdiag maps` and the VMA groups against /proc/PID/maps and smaps, for both backends, on a
//! fixture with file, deleted-file, newline-named, oddly named, shared, memfd, SysV, guard-page,
//! huge and named anonymous mappings; a process with 60,000 mappings (continued messages); a
//! changing map; `maps -x` against procps' `pmap -x`, also for a static non-PIE program mapped
//! low, for threads, for every backend, as root and as an unprivileged user.

use std::process::{Command, Stdio};

use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{signal, wait_exec, wait_stopped, Spawned};
use taskdiag_test_support::{python, tasks};

use super::daemon_trust::{as_root, Runner, Server};
use super::{as_test_user, stderr, BIN};

/// maps_fixture.py, killed on drop, then its directory removed.
struct Fixture {
    proc: Spawned,
    _dir: TempDir,
}

impl Fixture {
    fn start(extra: &[&str]) -> Fixture {
        Fixture::start_by(as_root, extra)
    }

    /// The fixture run through `run` (as root or as the test user), in a directory that user
    /// can write.
    fn start_by(run: Runner, extra: &[&str]) -> Fixture {
        let dir = TempDir::with_mode("maps", 0o1777);
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/maps_fixture.py"
        );
        let mut c = run(python::PYTHON);
        python::with_helpers(&mut c).arg(script);
        let mut proc = Spawned::spawn(
            c.arg(dir.path())
                .args(extra)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        );
        proc.expect_line("ready");
        Fixture { proc, _dir: dir }
    }

    fn pid(&self) -> String {
        self.proc.pid().to_string()
    }
}

/// nopie_fixture.c built with `cc -no-pie -static` (mapped at 0x400000) and run with
/// `threads` waiting threads and `extra` arguments; killed on drop, then its directory
/// removed. Static, it shares no file page with the tools that look at it: its proportional
/// sizes do not depend on which tool reads them.
pub(super) struct NoPie {
    pub(super) proc: Spawned,
    _dir: TempDir,
}

impl NoPie {
    pub(super) fn start(run: Runner, threads: u32, extra: &[&str]) -> NoPie {
        let dir = TempDir::new("nopie");
        let exe = dir.join("nopie_fixture");
        let src = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/nopie_fixture.c"
        );
        let o = Command::new("cc")
            .args(["-no-pie", "-static", "-O2", "-pthread", "-o"])
            .arg(&exe)
            .arg(src)
            .output()
            .expect("running cc (gcc and libc6-dev build the non-PIE fixture)");
        assert!(o.status.success(), "cc: {}", stderr(&o));
        let mut proc = Spawned::spawn(
            run(exe.to_str().expect("UTF-8 temp path"))
                .arg(threads.to_string())
                .args(extra)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        );
        proc.expect_line("ready");
        NoPie { proc, _dir: dir }
    }
}

/// `taskdiag dump --pid PID --groups G --format F -b BACKEND`'s output, which must succeed.
fn dump_pid(pid: &str, groups: &str, format: &str, backend: &str) -> Vec<u8> {
    let o = Command::new(BIN)
        .args([
            "dump", "--pid", pid, "--groups", groups, "--format", format, "-b", backend,
        ])
        .output()
        .expect("dump");
    assert!(o.status.success(), "{backend}: {}", stderr(&o));
    o.stdout
}

fn maps_via(backend: &str, pid: &str, extra: &[&str]) -> Vec<u8> {
    let o = Command::new(BIN)
        .args(["maps", pid, "-b", backend])
        .args(extra)
        .output()
        .expect("taskdiag maps");
    assert!(o.status.success(), "{backend}: {}", stderr(&o));
    o.stdout
}

/// Also for a thread's id: its process's mappings.
#[test]
fn maps_is_byte_identical_to_proc_for_both_backends() {
    let f = Fixture::start(&["threads", "2"]);
    let pid = f.pid();
    stop(f.proc.pid());
    let proc = std::fs::read(format!("/proc/{pid}/maps")).expect("maps");
    let text = String::from_utf8_lossy(&proc);
    for want in [
        "plain file",
        "deleted-file (deleted)",
        "new\\012line name",
        "/dev/zero (deleted)",
        "/memfd:fixture-memfd (deleted)",
        "[heap]",
        "[stack]",
        "[vdso]",
    ] {
        assert!(text.contains(want), "fixture lacks {want:?}:\n{text}");
    }
    let thread = tasks::tids(f.proc.pid())
        .into_iter()
        .find(|&t| t != f.proc.pid())
        .expect("the fixture's threads");
    for backend in ["procfs", "bpf"] {
        for id in [pid.clone(), thread.to_string()] {
            let got = maps_via(backend, &id, &[]);
            assert_eq!(
                String::from_utf8_lossy(&got),
                text,
                "{backend}: taskdiag maps {id} differs from /proc/{pid}/maps"
            );
        }
    }
}

/// One smaps entry: start address, counters in bytes, VmFlags.
type SmapsEntry = (u64, Vec<(String, u64)>, String);

/// smaps, parsed here independently: per mapping (start) the counters in bytes and VmFlags.
fn smaps(pid: &str) -> Vec<SmapsEntry> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("smaps");
    let mut v: Vec<SmapsEntry> = Vec::new();
    for line in s.lines() {
        if let Some((k, rest)) = line.split_once(':') {
            if k.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && !k.contains(' ') {
                let last = v.last_mut().expect("mapping");
                if k == "VmFlags" {
                    last.2 = rest.trim().to_string();
                } else if let Some(n) = rest.trim().strip_suffix(" kB") {
                    last.1
                        .push((k.to_string(), n.trim().parse::<u64>().expect("kB") * 1024));
                }
                continue;
            }
        }
        let start = u64::from_str_radix(line.split('-').next().expect("range"), 16).expect("hex");
        v.push((start, Vec::new(), String::new()));
    }
    v
}

/// The smaps mnemonics of `bits`, sorted.
fn mnemonics(bits: u64) -> Vec<&'static str> {
    let mut v: Vec<&str> = taskdiag_proto::vma_flags::FLAGS
        .iter()
        .filter(|(b, _, _)| bits & b != 0)
        .map(|(_, m, _)| *m)
        .collect();
    v.sort();
    v
}

/// The mnemonics of an smaps VmFlags line that the wire format carries, sorted.
fn carried(vmflags: &str) -> Vec<&str> {
    let mut v: Vec<&str> = vmflags
        .split(' ')
        .filter(|m| taskdiag_proto::vma_flags::from_mnemonic(m) != 0)
        .collect();
    v.sort();
    v
}

#[test]
fn vma_stat_counters_and_flags_equal_smaps_for_both_backends() {
    let f = Fixture::start(&[]);
    let pid = f.pid();
    let names = [
        ("Rss", "rss"),
        ("Anonymous", "anonymous"),
        ("Swap", "swap"),
        ("Locked", "locked"),
        ("Private_Dirty", "private_dirty"),
    ];
    for backend in ["procfs", "bpf"] {
        let out = dump_pid(&pid, "vma_stat", "json", backend);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
        let vmas = v["vma"].as_array().expect("vma array");
        let sm = smaps(&pid);
        assert_eq!(vmas.len(), sm.len(), "{backend}: mapping count");
        for (j, (start, counters, flags)) in vmas.iter().zip(&sm) {
            assert_eq!(j["start"].as_u64(), Some(*start), "{backend}");
            // Only the fixture's own private mappings are stable between two reads; shared
            // libraries' counters move with other processes.
            let name = j["name"].as_str().unwrap_or("");
            let private = !name.starts_with('/') || name.contains("taskdiag-maps");
            for (k, jk) in names {
                let want = counters.iter().find(|(c, _)| c == k).map(|c| c.1);
                if private || k == "Locked" || k == "Swap" {
                    assert_eq!(
                        j[jk].as_u64(),
                        want,
                        "{backend}: {k} of {name:?} at {start:x}"
                    );
                }
            }
            let bits = j["flags"].as_u64().expect("flags");
            assert_eq!(
                mnemonics(bits),
                carried(flags),
                "{backend}: VmFlags of {name:?}"
            );
        }
    }
}

#[test]
fn sixty_thousand_mappings_dump_completely_in_continued_messages() {
    let f = Fixture::start(&["many", "120000"]);
    let pid = f.pid();
    let proc = std::fs::read(format!("/proc/{pid}/maps")).expect("maps");
    let lines = proc.iter().filter(|&&c| c == b'\n').count();
    assert!(lines >= 60_000, "only {lines} mappings");
    for backend in ["procfs", "bpf"] {
        assert!(
            maps_via(backend, &pid, &[]) == proc,
            "{backend}: {lines} mappings not reproduced byte for byte"
        );
        let out = dump_pid(&pid, "vma", "raw", backend);
        // Walk the raw stream's message headers: the task must span continued messages.
        let (mut off, mut continued, mut tasks) = (0usize, 0, 0);
        let b = &out;
        while off + 16 <= b.len() {
            let len = u32::from_ne_bytes(b[off..off + 4].try_into().expect("len")) as usize;
            let ty = u16::from_ne_bytes(b[off + 4..off + 6].try_into().expect("type"));
            let flags = u16::from_ne_bytes(b[off + 6..off + 8].try_into().expect("flags"));
            if ty == 2 {
                if flags & 1 != 0 {
                    continued += 1;
                } else {
                    tasks += 1;
                }
            }
            assert!((16..=32768).contains(&len), "message length {len}");
            off += len;
        }
        assert_eq!(off, b.len());
        assert_eq!(tasks, 1, "{backend}");
        assert!(
            continued > 100,
            "{backend}: only {continued} continued messages"
        );
    }
}

#[test]
fn a_map_changing_during_the_dump_still_gives_whole_valid_answers() {
    let f = Fixture::start(&["churn"]);
    let pid = f.pid();
    for backend in ["procfs", "bpf"] {
        for _ in 0..20 {
            let got = maps_via(backend, &pid, &[]);
            let text = String::from_utf8_lossy(&got);
            assert!(
                text.contains("plain file") && text.contains("[stack]"),
                "{text}"
            );
            // Every line is a well-formed maps line, in increasing address order.
            let mut last = 0u64;
            for l in text.lines() {
                let start = u64::from_str_radix(l.split('-').next().expect("range"), 16)
                    .expect("hex start");
                assert!(start >= last, "out of order: {l}");
                last = start;
            }
        }
    }
}

#[test]
fn maps_of_a_missing_pid_is_exit_1() {
    let o = Command::new(BIN)
        .args(["maps", "999999999"])
        .output()
        .expect("maps");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("no such process"));
}

/// The BPF map walk reads the kernel's vm_flags (not smaps): every flag it reports must be the
/// one smaps' VmFlags shows, for every mapping of the fixture.
#[test]
fn bpf_vma_flags_equal_smaps_vmflags() {
    let f = Fixture::start(&[]);
    let pid = f.pid();
    // A kernel without iter/task_vma (before 5.12) gives no BPF walk to check: the BPF backend
    // completes VMA from /proc there, and `-s` says so.
    if !taskdiag_test_support::bins::bpf_map_walk() {
        eprintln!("no BPF map walk on this kernel: nothing to check");
        return;
    }
    // A kernel that refuses dump_vma (6.18.44-fc-v1045) names files by probe reads, which
    // cannot write the names the file system makes up (the fixture's memfd and shared
    // /dev/zero): that listing is read from /proc. Checked there on this test's own maps.
    let summary = Command::new(BIN)
        .args(["dump", "--pid", &pid, "-g", "vma", "-b", "bpf", "-s"])
        .output()
        .expect("dump -s");
    let target = if stderr(&summary).contains("dump_vma_walk") {
        eprintln!("map files named by probe reads here: checking this test's own maps");
        std::process::id().to_string()
    } else {
        pid
    };
    let out = dump_pid(&target, "vma", "json", "bpf");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
    let vmas = v["vma"].as_array().expect("vma array");
    let sm = smaps(&target);
    assert_eq!(vmas.len(), sm.len());
    for (j, (start, _, flags)) in vmas.iter().zip(&sm) {
        assert_eq!(j["start"].as_u64(), Some(*start));
        assert_eq!(
            j["flags_known"].as_u64(),
            Some(taskdiag_proto::vma_flags::ALL),
            "the BPF walk knows every flag"
        );
        let bits = j["flags"].as_u64().expect("flags");
        assert_eq!(mnemonics(bits), carried(flags), "VmFlags of {}", j["name"]);
    }
}

/// A maps line as /proc prints it without the name's padding: `start-end perms offset dev
/// inode name` (addresses at least 8 hex digits, as the kernel's `%08lx`).
fn maps_line(
    start: u64,
    end: u64,
    perms: &str,
    pgoff: u64,
    dev: &str,
    inode: u64,
    name: &str,
) -> String {
    format!("{start:08x}-{end:08x} {perms} {pgoff:08x} {dev} {inode} {name}")
}

/// A whole-system VMA dump (names of shared files are written once per walk and looked up for
/// later processes) gives every fixture process exactly its /proc/PID/maps: every field of
/// every line, also for a non-PIE program whose addresses are below 2^32.
#[test]
fn an_all_processes_dump_matches_each_processes_maps() {
    let f = Fixture::start(&[]);
    let low = NoPie::start(as_root, 2, &[]);
    let sleepers: Vec<Spawned> = (0..3)
        .map(|_| Spawned::spawn(Command::new("sleep").arg("60")))
        .collect();
    let pids: Vec<u32> = [f.proc.pid(), low.proc.pid()]
        .into_iter()
        .chain(sleepers.iter().map(Spawned::pid))
        .collect();
    // Until a sleeper has executed sleep its maps are those of this test's copy.
    for s in &sleepers {
        wait_exec(s.pid(), "sleep");
    }
    let low_maps = std::fs::read_to_string(format!("/proc/{}/maps", low.proc.pid())).expect("maps");
    assert!(
        low_maps.starts_with("00400000-"),
        "not mapped low:\n{low_maps}"
    );
    for backend in ["bpf", "procfs"] {
        let o = Command::new(BIN)
            .args(["dump", "--groups", "vma", "--format", "json", "-b", backend])
            .output()
            .expect("dump");
        assert!(o.status.success(), "{}", stderr(&o));
        let mut seen = 0;
        for line in o.stdout.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).expect("json");
            let pid = v["pid"].as_u64().expect("pid") as u32;
            if !pids.contains(&pid) {
                continue;
            }
            seen += 1;
            let proc = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
            let ours: Vec<String> = v["vma"]
                .as_array()
                .expect("vma")
                .iter()
                .map(|m| {
                    let n = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k} in {m}"));
                    let s = |k: &str| m[k].as_str().unwrap_or_else(|| panic!("{k} in {m}"));
                    maps_line(
                        n("start"),
                        n("end"),
                        s("perms"),
                        n("pgoff"),
                        s("dev"),
                        n("inode"),
                        s("name"),
                    )
                })
                .collect();
            // /proc's lines with the padding before the name taken out.
            let theirs: Vec<String> = proc
                .lines()
                .map(|l| {
                    let f: Vec<&str> = l.splitn(6, ' ').collect();
                    let name = f.get(5).map_or("", |n| n.trim_start_matches(' '));
                    format!("{} {name}", f[..5].join(" "))
                })
                .collect();
            assert_eq!(ours, theirs, "{backend}: pid {pid}");
        }
        assert_eq!(
            seen,
            pids.len(),
            "{backend}: fixture processes missing from the dump"
        );
    }
    drop(sleepers);
}

/// With thread strategies the VMA group is on the thread-group leader only (threads share the
/// address space), as task_diag did, for both backends.
#[test]
fn thread_strategies_give_vmas_to_the_leader_only() {
    let mut child = Spawned::spawn(
        python::code(
            "import threading, sys\n\
             ev = threading.Event()\n\
             for _ in range(3): threading.Thread(target=ev.wait, daemon=True).start()\n\
             print('ready', flush=True)\n\
             sys.stdin.read()\n",
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped()),
    );
    child.expect_line("ready");
    let pid = child.pid();
    for backend in ["bpf", "procfs"] {
        let o = Command::new(BIN)
            .args(["dump", "--threads-of", &pid.to_string(), "--groups", "vma"])
            .args(["--format", "json", "-b", backend])
            .output()
            .expect("dump");
        assert!(o.status.success(), "{}", stderr(&o));
        let mut threads = 0;
        for l in o.stdout.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(l).expect("json");
            let leader = v["pid"].as_u64() == Some(u64::from(pid));
            assert_eq!(v["vma"].is_array(), leader, "{backend}: {}", v["pid"]);
            threads += 1;
        }
        assert_eq!(threads, 4, "{backend}");
    }
}

/// Arguments the fixtures ignore, in their command lines: a tab, a UTF-8 letter, an escape.
const ODD_ARG: &str = "odd\targ \u{e9}\u{1b}[0m";

/// Stops `pid` (our child) with SIGSTOP and waits until it is stopped: its counters stay put.
fn stop(pid: u32) {
    signal(pid, libc::SIGSTOP);
    wait_stopped(pid);
}

/// `cmd`'s standard output; it must succeed.
fn stdout_of(mut cmd: Command, what: &str) -> Vec<u8> {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(o.status.success(), "{what}: {}", stderr(&o));
    o.stdout
}

/// Asserts `taskdiag maps OPTS PID BACKEND` prints the bytes `pmap OPTS PID` prints, both run
/// through `run` with `LC_ALL=lc`. The target is stopped, but the kernel can still move a
/// counter (reclaim): a comparison counts when two pmap reads around taskdiag's agree.
fn assert_like_pmap(run: Runner, pid: u32, opts: &[&str], backend: &[&str], lc: &str) {
    let ctx = format!(
        "maps {} {pid} {} (LC_ALL={lc})",
        opts.join(" "),
        backend.join(" ")
    );
    let pmap = || {
        let mut c = run("pmap");
        c.env("LC_ALL", lc).args(opts).arg(pid.to_string());
        stdout_of(c, "pmap")
    };
    for _ in 0..5 {
        let before = pmap();
        let mut c = run(BIN);
        c.env("LC_ALL", lc)
            .arg("maps")
            .args(opts)
            .arg(pid.to_string())
            .args(backend);
        let ours = stdout_of(c, &ctx);
        if pmap() != before {
            continue;
        }
        assert!(
            ours == before,
            "{ctx}: differs from pmap\n--- pmap\n{}\n--- taskdiag\n{}",
            String::from_utf8_lossy(&before),
            String::from_utf8_lossy(&ours)
        );
        return;
    }
    panic!("{ctx}: pmap never read the same twice in a row");
}

/// The fixtures `maps -x` is compared on, run through `run`: the Python fixture (files,
/// deleted and oddly named files, heap, stack, /dev/zero, memfd, SysV, named anonymous
/// memory) with threads, and the non-PIE program with threads; all stopped. Their pids, and
/// a thread of each.
fn pmap_targets(run: Runner) -> (Fixture, NoPie, Vec<u32>) {
    let f = Fixture::start_by(run, &["threads", "3", ODD_ARG]);
    let low = NoPie::start(run, 2, &[ODD_ARG]);
    let mut pids = Vec::new();
    for pid in [f.proc.pid(), low.proc.pid()] {
        stop(pid);
        pids.push(pid);
        let thread = tasks::tids(pid).into_iter().find(|&t| t != pid);
        pids.push(thread.expect("the fixture's threads"));
    }
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", f.proc.pid())).expect("maps");
    // Named anonymous memory ("[anon:fixture/slash]") only where the kernel has
    // CONFIG_ANON_VMA_NAME (not Debian's, nor this machine's); the unit tests cover its name.
    for want in [
        "/SYSV",
        "/dev/zero (deleted)",
        "[heap]",
        "[stack]",
        "tab\there \u{e9}",
    ] {
        assert!(maps.contains(want), "fixture lacks {want:?}:\n{maps}");
    }
    (f, low, pids)
}

/// `taskdiag maps -x` is `pmap -x` byte for byte (header, widths, names, totals), also with
/// -q and -p, in a UTF-8 and the C locale, for processes and threads, from both backends that
/// read smaps counters.
#[test]
fn maps_x_is_byte_identical_to_pmap_x() {
    let (_f, _low, pids) = pmap_targets(as_root);
    for pid in pids {
        for backend in ["procfs", "bpf"] {
            for opts in [&["-x"][..], &["-x", "-q"], &["-x", "-p"]] {
                assert_like_pmap(as_root, pid, opts, &["-b", backend], "C.UTF-8");
            }
            assert_like_pmap(as_root, pid, &["-x"], &["-b", backend], "C");
        }
    }
}

/// As an unprivileged user, for that user's own processes (which pmap can read): through
/// /proc, and with a taskdiagd running, through auto (the daemon serves no smaps counters, so
/// `-x` reads /proc like pmap; `-b daemon -x` says so), while plain `maps` comes from the
/// daemon, byte for byte /proc/PID/maps.
#[test]
fn maps_x_as_an_unprivileged_user_is_pmap_x() {
    let (_f, _low, pids) = pmap_targets(as_test_user);
    let daemon = Server::daemon(&[]);
    let sock = daemon.path();
    let walk = taskdiag_test_support::bins::bpf_map_walk();
    for &pid in &pids {
        assert_like_pmap(as_test_user, pid, &["-x"], &["-b", "procfs"], "C.UTF-8");
        assert_like_pmap(
            as_test_user,
            pid,
            &["-x"],
            &["-b", "auto", "--socket", sock],
            "C.UTF-8",
        );
        let o = as_test_user(BIN)
            .args([
                "maps",
                "-x",
                &pid.to_string(),
                "-b",
                "daemon",
                "--socket",
                sock,
            ])
            .output()
            .expect("maps");
        assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("vma_stat group is not served by taskdiagd"),
            "{}",
            stderr(&o)
        );
        let mut c = as_test_user(BIN);
        c.args(["maps", &pid.to_string(), "-b", "daemon", "--socket", sock]);
        if !walk {
            // Without a map walk the daemon declines maps (auto reads /proc: above, and below).
            let o = c.output().expect("maps");
            assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
            assert!(
                stderr(&o).contains("vma group is not served"),
                "{}",
                stderr(&o)
            );
            c = as_test_user(BIN);
            c.args(["maps", &pid.to_string(), "-b", "auto", "--socket", sock]);
        }
        let got = stdout_of(c, "maps -b daemon");
        let want = std::fs::read(format!("/proc/{pid}/maps")).expect("maps");
        assert!(
            got == want,
            "daemon: maps of {pid} differ from /proc\n{}",
            String::from_utf8_lossy(&got)
        );
    }
    // A request auto's daemon declined is answered from /proc, and `-s` says so.
    let mut c = as_test_user(BIN);
    let pid = pids[0].to_string();
    c.args([
        "dump", "--pid", &pid, "--groups", "vma_stat", "--socket", sock, "-s",
    ]);
    let o = c.output().expect("dump -s");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("via procfs")
            && stderr(&o).contains("taskdiagd declined: the vma_stat group is not served"),
        "{}",
        stderr(&o)
    );
}

/// The map walk that names files with probe reads (`dump_vma_walk`, which a kernel whose
/// verifier refuses `dump_vma`'s bpf_d_path() loads; TASKDIAG_BPF_DISABLE=d_path here) gives
/// /proc/PID/maps byte for byte: for a process whose files it names, and for the fixture, whose
/// memfd and SysV names it leaves to /proc; as root through BPF, and as a user through a
/// taskdiagd loaded that way (which leaves such a process's maps to the user's own /proc).
#[test]
fn maps_named_by_probe_reads_are_byte_identical_to_proc() {
    if !taskdiag_test_support::bins::bpf_map_walk() {
        eprintln!("no BPF map walk on this kernel: nothing to check");
        return;
    }
    const WALK: (&str, &str) = ("TASKDIAG_BPF_DISABLE", "d_path");
    let f = Fixture::start(&[]);
    let plain = Spawned::spawn(Command::new("sleep").arg("1000"));
    wait_exec(plain.pid(), "sleep");
    let daemon = Server::daemon_with_env(&[], &[WALK]);
    let (uf, uplain) = (Fixture::start_by(as_test_user, &[]), {
        let s = Spawned::spawn(as_test_user("sleep").arg("1000"));
        wait_exec(s.pid(), "sleep");
        s
    });
    let mut runs: Vec<(u32, Command)> = Vec::new();
    for pid in [f.proc.pid(), plain.pid()] {
        let mut c = Command::new(BIN);
        c.env(WALK.0, WALK.1)
            .args(["maps", &pid.to_string(), "-b", "bpf"]);
        runs.push((pid, c));
    }
    for pid in [uf.proc.pid(), uplain.pid()] {
        let mut c = as_test_user(BIN);
        c.args([
            "maps",
            &pid.to_string(),
            "-b",
            "daemon",
            "--socket",
            daemon.path(),
        ]);
        runs.push((pid, c));
    }
    for (pid, c) in runs {
        let what = format!("{c:?}");
        let got = stdout_of(c, &what);
        let want = std::fs::read(format!("/proc/{pid}/maps")).expect("maps");
        assert!(
            got == want,
            "{what}: differs from /proc/{pid}/maps\n{}",
            String::from_utf8_lossy(&got)
        );
    }
    // The walk loaded, and `-s` names it.
    let o = Command::new(BIN)
        .env(WALK.0, WALK.1)
        .args([
            "dump",
            "--pid",
            &plain.pid().to_string(),
            "-g",
            "vma",
            "-b",
            "bpf",
            "-s",
        ])
        .output()
        .expect("dump -s");
    assert!(
        o.status.success() && stderr(&o).contains("files named by probe reads"),
        "{}",
        stderr(&o)
    );
}

/// -q and -p belong to -x (pmap's options for its extended format): alone they are usage
/// errors, not silently ignored.
#[test]
fn pmap_options_without_x_are_usage_errors() {
    for opt in ["-q", "-p"] {
        let o = Command::new(BIN)
            .args(["maps", opt, &std::process::id().to_string()])
            .output()
            .expect("maps");
        assert_eq!(o.status.code(), Some(2), "{opt}: {}", stderr(&o));
    }
}
