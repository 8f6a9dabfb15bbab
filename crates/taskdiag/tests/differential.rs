//! Differential tests: the BPF and procfs backends against each other and against /proc, on
//! fixture processes in known states (hostile names, threads, long and rewritten argv, a zombie,
//! a stopped and a traced task, changed credentials, children), plus strategy semantics, errors
//! and a churn test.
//!
//! These tests load BPF programs, so they need root (or CAP_BPF+CAP_PERFMON); they fail, rather
//! than skip, elsewhere: where they run they must pass. Fixture processes are killed on drop.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use taskdiag::{BackendKind, Dumper, Error, Group, Request, Strategy};
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::{Event, StreamDecoder, Task};
use taskdiag_proto::SHOW_SUPPORTED;
use taskdiag_test_support::dir::TempDir;
use taskdiag_test_support::process::{wait_stopped, Spawned};
use taskdiag_test_support::tasks;

/// A fixture process, leading its own process group: killed with its children (and reaped)
/// when dropped.
type Fixture = Spawned;

/// Starts `td_fixture args...` (with `arg0` as its argv[0]) and waits until it is ready.
fn spawn(args: &[&str], arg0: Option<&str>) -> Fixture {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_td_fixture"));
    cmd.args(args).stdout(Stdio::piped());
    if let Some(a) = arg0 {
        use std::os::unix::process::CommandExt;
        cmd.arg0(a);
    }
    let mut f = Spawned::spawn_group(&mut cmd);
    f.expect_line("ready");
    f
}

fn dump(kind: BackendKind, req: &Request) -> Result<Vec<Task>, Error> {
    let mut d = Dumper::open(kind).expect("open backend (BPF needs root)");
    let mut buf = Vec::new();
    let r = d.dump(req, &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    });
    let mut dec = StreamDecoder::new();
    let mut tasks = Vec::new();
    for m in Messages::new(&buf) {
        if let Some(Event::Task(t)) = dec.push(&m.expect("message")).expect("decode") {
            tasks.push(t);
        }
    }
    assert!(dec.finished(), "stream without DONE");
    r.map(|_| tasks)
}

fn by_pid(tasks: Vec<Task>) -> BTreeMap<u32, Task> {
    let n = tasks.len();
    let m: BTreeMap<u32, Task> = tasks.into_iter().map(|t| (t.pid, t)).collect();
    assert_eq!(m.len(), n, "duplicate pids in a dump");
    m
}

/// `t` without the smaps counters that depend on who else maps the same pages at the moment
/// of reading (Pss, shared/private split, Referenced): other tasks start and exit meanwhile.
fn vma_stable(t: &Task) -> Task {
    let mut t = t.clone();
    for v in t.vmas.iter_mut().flatten() {
        if let Some(st) = &mut v.stat {
            *st = taskdiag_proto::VmaStatRec {
                rss: st.rss,
                anonymous: st.anonymous,
                anon_huge: st.anon_huge,
                swap: st.swap,
                locked: st.locked,
                ..Default::default()
            };
        }
    }
    t
}

/// `t` without DELAY's delay-accounting pairs, which the procfs backend reads through taskstats
/// (no /proc file has them) and only with CAP_NET_ADMIN, a read of its own between the files'
/// (`delay_counters_from_taskstats_lie_between_the_programs_reads` compares them, and
/// `delay_counters_agree_with_stat` checks BPF's against stat field 42).
fn without_delay_counters(mut t: Task) -> Task {
    if let Some(d) = &mut t.delay {
        *d = d.without_counters();
    }
    t
}

/// The fields that may legitimately change between two reads of a sleeping task: none, except
/// the last CPU and, for kernel threads, their workqueue name. Normalized away only where noted.
fn same_task(a: &Task, b: &Task) -> Result<(), String> {
    let (na, nb) = (
        without_delay_counters(vma_stable(a)),
        without_delay_counters(vma_stable(b)),
    );
    if a == b || na == nb {
        return Ok(());
    }
    Err(format!(
        "backends differ for task {}:\n  procfs: {a:?}\n  bpf:    {b:?}",
        a.pid
    ))
}

fn assert_agree(req: Request, pids: &[u32]) -> BTreeMap<u32, Task> {
    let p1 = by_pid(dump(BackendKind::Procfs, &req).expect("procfs dump"));
    let b = by_pid(dump(BackendKind::Bpf, &req).expect("bpf dump"));
    let p2 = by_pid(dump(BackendKind::Procfs, &req).expect("procfs dump"));
    for pid in pids {
        let bt = b
            .get(pid)
            .unwrap_or_else(|| panic!("bpf lacks task {pid} for {req:?}"));
        let pt = p1
            .get(pid)
            .unwrap_or_else(|| panic!("procfs lacks task {pid} for {req:?}"));
        if same_task(pt, bt).is_err() {
            let p2t = p2.get(pid).expect("task vanished");
            same_task(p2t, bt).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    b
}

fn threads_of(pid: u32) -> Vec<u32> {
    tasks::tids(pid)
}

fn comm(t: &Task) -> &[u8] {
    &t.base.as_ref().expect("base").comm
}

#[test]
fn every_group_agrees_on_fixture_processes() {
    let hostile = spawn(&["name", "(a) b)\nc d"], None);
    let full16 = spawn(&["name", "exactly15chars!x"], None);
    let threads = spawn(&["threads", "4"], None);
    let long_argv: Vec<String> = (0..3000)
        .map(|i| format!("argument-number-{i:05}"))
        .collect();
    let mut long_args: Vec<&str> = vec!["sleep"];
    long_args.extend(long_argv.iter().map(String::as_str));
    let long = spawn(&long_args, Some("long argv (x) y)"));
    let title = spawn(
        &[
            "proctitle",
            "myproc: worker process with a rather long title that spills",
        ],
        None,
    );
    let creds = spawn(&["setuid", "65534", "4,27,100"], None);
    let stopped = spawn(&["sleep"], None);
    taskdiag_test_support::process::signal(stopped.pid(), libc::SIGSTOP);
    wait_stopped(stopped.pid());
    let parent = spawn(&["zombie"], None);
    let traced = spawn(&["sleep"], None);
    let dir = TempDir::new("differential");
    let shared_file = dir.join("shared");
    std::fs::File::create(&shared_file)
        .and_then(|f| f.set_len(8192))
        .expect("shared file");
    let shared_path = shared_file.to_str().expect("utf-8 temp path");
    let mapshared = spawn(&["mapshared", shared_path], None);
    // SAFETY: PTRACE_SEIZE of our own child; it detaches when this test process exits.
    let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, traced.pid(), 0, 0) };
    assert_eq!(r, 0, "PTRACE_SEIZE: {}", std::io::Error::last_os_error());

    let signals = spawn(&["signals"], None);
    let fds = spawn(&["fds", "10000"], None);
    let fixtures = [
        &hostile, &full16, &threads, &long, &title, &creds, &stopped, &parent, &traced, &mapshared,
        &signals, &fds,
    ];
    let pids: Vec<u32> = fixtures.iter().map(|f| f.pid()).collect();
    let all = assert_agree(Request::new(Strategy::All, 0, SHOW_SUPPORTED), &pids);

    // And each agrees with what /proc says, read independently of taskdiag's parsers.
    assert_eq!(comm(&all[&hostile.pid()]), b"(a) b)\nc d");
    assert_eq!(comm(&all[&full16.pid()]), b"exactly15chars!");
    assert_eq!(all[&threads.pid()].stat.expect("stat").threads, 5);
    let raw_cmdline = |pid: u32| std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    for f in [&long, &title, &hostile] {
        assert_eq!(
            all[&f.pid()].cmdline.as_deref(),
            Some(&raw_cmdline(f.pid())[..])
        );
    }
    assert!(all[&long.pid()].cmdline.as_ref().expect("cmdline").len() > 60_000);
    assert!(all[&long.pid()]
        .cmdline
        .as_ref()
        .expect("cmdline")
        .starts_with(b"long argv (x) y)\0"));
    let t = all[&title.pid()].cmdline.as_ref().expect("title");
    assert!(
        t.starts_with(b"myproc: worker process"),
        "{:?}",
        String::from_utf8_lossy(t)
    );
    let c = all[&creds.pid()].cred.as_ref().expect("cred");
    assert_eq!(
        (c.rec.uid, c.rec.euid, c.rec.suid, c.rec.fsuid),
        (65534, 65534, 65534, 65534)
    );
    assert_eq!(c.groups, vec![4, 27, 100]);
    assert_eq!(c.rec.cap_effective, 0);
    let state =
        |pid: u32| taskdiag_proto::state_char(all[&pid].base.as_ref().expect("base").rec.state);
    assert_eq!(state(stopped.pid()), 'T');
    // TracerPid is the tracing *thread* (this test thread).
    // SAFETY: gettid has no preconditions.
    assert_eq!(
        all[&traced.pid()].base.as_ref().expect("base").rec.tpid,
        unsafe { libc::gettid() } as u32
    );

    // Signal masks as /proc/PID/status prints them (bit N-1 for signal N), and what the
    // fixture did: SIGUSR1 pending for its thread, SIGWINCH for the process, both blocked with
    // SIGRTMIN+2, SIGUSR2 ignored, SIGHUP caught.
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", signals.pid())).expect("status");
    let mask = |key: &str| {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(":\t")))
            .unwrap_or_else(|| panic!("{key} in status"));
        u64::from_str_radix(line.trim(), 16).expect("hex mask")
    };
    let bit = |sig: i32| 1u64 << (sig - 1);
    let sg = all[&signals.pid()].signal.expect("signal");
    assert_eq!(
        [
            sg.pending,
            sg.shared_pending,
            sg.blocked,
            sg.ignored,
            sg.caught
        ],
        ["SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"].map(mask)
    );
    assert_eq!(sg.pending, bit(libc::SIGUSR1));
    assert_eq!(sg.shared_pending, bit(libc::SIGWINCH));
    assert_eq!(
        sg.blocked,
        bit(libc::SIGUSR1) | bit(libc::SIGWINCH) | bit(libc::SIGRTMIN() + 2)
    );
    assert_ne!(sg.ignored & bit(libc::SIGUSR2), 0);
    assert_ne!(sg.caught & bit(libc::SIGHUP), 0);

    // Open descriptors as /proc/PID/fd lists them, and limits as /proc/PID/limits shows them.
    for f in [&fds, &signals] {
        let files = all[&f.pid()].files.as_ref().expect("files");
        let listed = std::fs::read_dir(format!("/proc/{}/fd", f.pid()))
            .expect("fd dir")
            .count();
        assert_eq!(files.rec.fds as usize, listed);
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", f.pid())).expect("limits");
        for (i, name) in taskdiag_proto::task::Files::NAMES.iter().enumerate() {
            let line = limits
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name}"));
            let v: Vec<u64> = line[name.len()..]
                .split_whitespace()
                .take(2)
                .map(|v| {
                    if v == "unlimited" {
                        u64::MAX
                    } else {
                        v.parse().expect("limit")
                    }
                })
                .collect();
            let l = files.limit(i).expect("limit");
            assert_eq!([l.soft, l.hard], v[..], "{name}");
        }
    }
    let f = all[&fds.pid()].files.as_ref().expect("files");
    assert!(f.rec.fds >= 10_000, "{}", f.rec.fds);
    let nofile = f.limit(7).expect("RLIMIT_NOFILE");
    assert_eq!(
        nofile.soft, nofile.hard,
        "the fixture raised its soft limit"
    );

    // Resident set sizes as /proc/PID/statm counts them (the stopped task's do not move):
    // size, resident (anon + file + shmem) and shared (file + shmem), in pages.
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let m = all[&stopped.pid()].statm.expect("statm");
    let statm = std::fs::read_to_string(format!("/proc/{}/statm", stopped.pid())).expect("statm");
    let statm: Vec<u64> = statm
        .split_whitespace()
        .map(|v| v.parse().expect("number"))
        .collect();
    assert_eq!(
        [
            m.vm_size,
            m.rss_anon + m.rss_file + m.rss_shmem,
            m.rss_file + m.rss_shmem
        ]
        .map(|b| b / page),
        statm[..3],
        "statm of the stopped task"
    );
    // The code and stack addresses as /proc/PID/stat fields 26-28 show them to root.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", stopped.pid())).expect("stat");
    let after_name = &stat[stat.rfind(')').expect("name") + 2..];
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(23)
        .take(3)
        .map(|v| v.parse().expect("number"))
        .collect();
    assert_eq!([m.code_start, m.code_end, m.stack_start], fields[..]);
    assert!(m.code_start > 1 && m.code_end > m.code_start && m.stack_start > m.code_end);

    // A shared file mapping is named by its path, anonymous shared memory by /dev/zero, in the
    // BPF map walk's names (VMA without VMA_STAT: with it, smaps gives them) as in
    // /proc/PID/maps: the fixture's map does not change.
    let pid = mapshared.pid();
    let req = Request::new(Strategy::One, pid, Group::Vma.flag());
    let bpf = by_pid(dump(BackendKind::Bpf, &req).expect("bpf maps"));
    let names: Vec<String> = bpf[&pid]
        .vmas
        .iter()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v.name).into_owned())
        .collect();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let proc_names: Vec<String> = maps
        .lines()
        .map(|l| {
            // Address, perms, offset, device, inode, then the name after padding.
            let mut rest = l;
            for _ in 0..5 {
                rest = rest.trim_start().split_once(' ').map_or("", |(_, r)| r);
            }
            rest.trim_start().to_owned()
        })
        .collect();
    assert_eq!(names, proc_names);
    assert!(names.iter().any(|n| n == shared_path), "{names:?}");
    assert!(
        names.iter().any(|n| n == "/dev/zero (deleted)"),
        "{names:?}"
    );

    // The zombie child: no address space, so no STATM and no CMDLINE; state Z.
    let zombie = all
        .values()
        .find(|t| t.base.as_ref().is_some_and(|b| b.rec.ppid == parent.pid()))
        .expect("zombie child");
    assert_eq!(state(zombie.pid), 'Z');
    assert!(zombie.statm.is_none() && zombie.cmdline.is_none());

    // Thread view: every thread of the threaded fixture, with per-thread names and STAT.
    let tids = threads_of(threads.pid());
    assert_eq!(tids.len(), 5);
    let at = assert_agree(Request::new(Strategy::AllThread, 0, SHOW_SUPPORTED), &tids);
    // A thread asked for by its own id stands for its process, as /proc/TID does: the process's
    // memory maps and their counters (smaps, completed from /proc), on both backends.
    let one = assert_agree(
        Request::new(Strategy::One, tids[2], SHOW_SUPPORTED),
        &tids[2..3],
    );
    let maps = one[&tids[2]]
        .vmas
        .as_ref()
        .expect("a thread's record has its process's maps");
    assert!(
        maps.iter()
            .any(|v| v.stat.as_ref().is_some_and(|s| s.rss > 0)),
        "{maps:?}"
    );
    for (i, tid) in tids.iter().skip(1).enumerate() {
        assert_eq!(comm(&at[tid]), format!("worker-{i}").as_bytes());
        assert_eq!(at[tid].tgid, threads.pid());
    }
}

#[test]
fn strategies_select_the_same_tasks_on_both_backends() {
    let threads = spawn(&["threads", "3"], None);
    let parent = spawn(&["children", "3"], None);
    let tids = threads_of(threads.pid());
    for kind in [BackendKind::Procfs, BackendKind::Bpf] {
        let show = Group::Base.flag() | Group::Stat.flag();
        // ONE, by process id and by a thread id.
        let one = dump(kind, &Request::new(Strategy::One, threads.pid(), show)).expect("one");
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].pid, one[0].tgid), (threads.pid(), threads.pid()));
        assert_eq!(one[0].stat.expect("stat").threads, 4);
        let one = dump(kind, &Request::new(Strategy::One, tids[2], show)).expect("one tid");
        assert_eq!((one[0].pid, one[0].tgid), (tids[2], threads.pid()));
        // THREAD, given any thread of the group.
        let th = dump(kind, &Request::new(Strategy::Thread, tids[1], show)).expect("thread");
        assert_eq!(
            th.iter().map(|t| t.pid).collect::<Vec<_>>(),
            tids,
            "{kind:?}"
        );
        // CHILDREN.
        let ch = dump(kind, &Request::new(Strategy::Children, parent.pid(), show)).expect("ch");
        assert_eq!(ch.len(), 3, "{kind:?}");
        assert!(ch
            .iter()
            .all(|t| t.base.as_ref().expect("base").rec.ppid == parent.pid()));
        assert!(ch.windows(2).all(|w| w[0].pid < w[1].pid));
    }
}

/// The records of [`Strategy::AllWithThreads`] split: each process's own (flagged) and each
/// thread's, by pid; panics on a pid twice in either.
fn split_with_threads(tasks: Vec<Task>) -> (BTreeMap<u32, Task>, BTreeMap<u32, Task>) {
    let (procs, threads): (Vec<Task>, Vec<Task>) = tasks.into_iter().partition(|t| t.process);
    (by_pid(procs), by_pid(threads))
}

#[test]
fn one_walk_gives_what_a_process_walk_and_a_thread_walk_give() {
    // The exporter's groups: a process's own, and its threads'.
    let process = Group::Base.flag()
        | Group::Cred.flag()
        | Group::Stat.flag()
        | Group::Statm.flag()
        | Group::Io.flag()
        | Group::Files.flag()
        | Group::Wchan.flag();
    let thread = Group::Base.flag() | Group::Stat.flag() | Group::Io.flag() | Group::Wchan.flag();
    let threads = spawn(&["threads", "3"], None);
    let single = spawn(&["children", "2"], None);
    let tids = threads_of(threads.pid());
    let one = Request::all_with_threads(thread, process);
    let mut walks = Vec::new();
    for kind in [BackendKind::Procfs, BackendKind::Bpf] {
        let (procs, thr) = split_with_threads(dump(kind, &one).expect("one walk"));
        // What a process walk and a thread walk of the same backend say (the fixtures sleep:
        // nothing they show moves between the walks).
        let all = by_pid(dump(kind, &Request::new(Strategy::All, 0, process)).expect("all"));
        let each =
            by_pid(dump(kind, &Request::new(Strategy::AllThread, 0, thread)).expect("all threads"));
        for pid in [threads.pid(), single.pid()] {
            let p = procs
                .get(&pid)
                .unwrap_or_else(|| panic!("{kind:?}: no record of process {pid}"));
            let mut p = p.clone();
            p.process = false;
            same_task(&all[&pid], &p).unwrap_or_else(|e| panic!("{kind:?}, process: {e}"));
        }
        assert_eq!(procs[&threads.pid()].stat.expect("stat").threads, 4);
        for &tid in tids.iter().chain([single.pid()].iter()) {
            let t = thr
                .get(&tid)
                .unwrap_or_else(|| panic!("{kind:?}: no record of thread {tid}"));
            same_task(&each[&tid], t).unwrap_or_else(|e| panic!("{kind:?}, thread: {e}"));
        }
        // Only processes have records of their own; every one of them has its leader's too.
        for (pid, p) in &procs {
            assert_eq!(
                p.tgid, *pid,
                "{kind:?}: a thread's record flagged as a process's"
            );
        }
        walks.push((procs, thr));
    }
    // Both backends agree on the fixtures' records.
    let (bp, bt) = &walks[1];
    for pid in [threads.pid(), single.pid()] {
        same_task(&walks[0].0[&pid], &bp[&pid]).unwrap_or_else(|e| panic!("{e}"));
    }
    for tid in &tids {
        same_task(&walks[0].1[tid], &bt[tid]).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn missing_pid_is_esrch_on_both_backends() {
    let max = tasks::pid_max();
    for kind in [BackendKind::Procfs, BackendKind::Bpf] {
        for s in [Strategy::One, Strategy::Thread, Strategy::Children] {
            match dump(kind, &Request::new(s, max + 7, Group::Base.flag())) {
                Err(Error::NoSuchTask { pid }) => assert_eq!(pid, max + 7),
                other => panic!("{kind:?} {s:?}: expected ESRCH, got {other:?}"),
            }
        }
    }
}

#[test]
fn ids_agree_for_every_task_on_the_system() {
    // Identity fields (ids, parent, session, terminal, name, credentials) of every task both
    // backends see must match. They can change while a task lives (a setsid, an exec, a
    // reparenting), so /proc is read before and after BPF: a
    // task whose fields changed between the two /proc reads is left out, and one that /proc
    // showed the same both times must be the same through BPF.
    let req = Request::new(
        Strategy::AllThread,
        0,
        Group::Base.flag() | Group::Cred.flag(),
    );
    let p1 = by_pid(dump(BackendKind::Procfs, &req).expect("procfs"));
    let b = by_pid(dump(BackendKind::Bpf, &req).expect("bpf"));
    let p2 = by_pid(dump(BackendKind::Procfs, &req).expect("procfs"));
    let ids = |t: &Task| {
        let base = t.base.as_ref().expect("base");
        let x = &base.rec;
        (
            (t.tgid, x.ppid, x.sid, x.pgid, x.tty_nr, x.tpgid, x.flags),
            x.start_time_ns,
            // A workqueue thread's name follows its work, back and forth: not compared.
            (x.task_flags & 0x20 == 0).then(|| base.comm.clone()),
            t.cred.clone(),
        )
    };
    let (mut compared, mut changed, mut rescuers) = (0, 0, 0);
    let name = |t: &Task| comm(t).to_vec();
    for (pid, bt) in &b {
        // A workqueue rescuer's name is the kernel's rule (comm or full worker id), not its
        // work: compared when /proc showed it the same twice.
        if let (Some(before), Some(after)) = (p1.get(pid), p2.get(pid)) {
            let flags = bt.base.as_ref().expect("base").rec.task_flags;
            if flags & 0x20 != 0 && name(before) == name(after) {
                if let Some(agree) = rescuer_names_agree(comm(before), comm(bt)) {
                    assert!(
                        agree,
                        "name of rescuer {pid}: /proc {:?}, bpf {:?}",
                        String::from_utf8_lossy(comm(before)),
                        String::from_utf8_lossy(comm(bt))
                    );
                    rescuers += 1;
                }
            }
        }
        let (Some(before), Some(after)) = (p1.get(pid), p2.get(pid)) else {
            continue; // not there throughout
        };
        let (before, after, got) = (ids(before), ids(after), ids(bt));
        if before != after {
            changed += 1;
            continue;
        }
        if got.1 != before.1 {
            continue; // pid reused between the dumps
        }
        assert_eq!(got.0, before.0, "task {pid}");
        assert_eq!(got.2, before.2, "name of task {pid}");
        assert_eq!(got.3, before.3, "credentials of task {pid}");
        compared += 1;
    }
    assert!(
        compared > 20,
        "only {compared} tasks compared ({changed} changed between the /proc reads)"
    );
    // Every kernel has rescuers (mm_percpu_wq's at least), where its kernel threads are seen.
    let kthreads = p1
        .values()
        .any(|t| t.base.as_ref().expect("base").rec.task_flags & taskdiag_proto::PF_KTHREAD != 0);
    assert!(rescuers > 0 || !kthreads, "no workqueue rescuer compared");
}

/// Whether BPF's name `bpf` for a workqueue worker agrees with /proc's `proc`, if it is a
/// rescuer: "NAME" before 6.10 (comm, 15 bytes), "kworker/R-NAME" since (the full worker id),
/// either with "+desc" or "-desc" while it rescues. `None` for other workers, whose "-desc"
/// follows their last work item.
fn rescuer_names_agree(proc: &[u8], bpf: &[u8]) -> Option<bool> {
    if proc.starts_with(b"kworker/") && !proc.starts_with(b"kworker/R-") {
        return None;
    }
    let (short, long) = if proc.len() <= bpf.len() {
        (proc, bpf)
    } else {
        (bpf, proc)
    };
    Some(short == long || (long.starts_with(short) && matches!(long[short.len()], b'+' | b'-')))
}

#[test]
fn rescuer_names_agree_only_up_to_their_work() {
    let cases: [(&[u8], &[u8], Option<bool>); 5] = [
        (b"kworker/0:1-events", b"kworker/0:1-mm", None),
        (b"quota_events_un", b"quota_events_un", Some(true)),
        // 6.1's /proc prints comm; BPF printed the full name.
        (b"quota_events_un", b"quota_events_unbound", Some(false)),
        (
            b"kworker/R-mm_percpu_wq",
            b"kworker/R-mm_percpu_wq-events",
            Some(true),
        ),
        (b"kworker/R-mm_percpu_wq", b"kworker/R-mm_per", Some(false)),
    ];
    for (proc, bpf, want) in cases {
        assert_eq!(rescuer_names_agree(proc, bpf), want, "{proc:?} {bpf:?}");
    }
}

#[test]
fn churn_never_yields_duplicate_or_garbled_records() {
    let churn: Vec<Fixture> = (0..2).map(|_| spawn(&["churn"], None)).collect();
    for round in 0..10 {
        for kind in [BackendKind::Procfs, BackendKind::Bpf] {
            for s in [Strategy::All, Strategy::AllThread] {
                let tasks = dump(kind, &Request::new(s, 0, SHOW_SUPPORTED)).expect("dump");
                assert!(
                    tasks.windows(2).all(|w| w[0].pid < w[1].pid),
                    "{kind:?} {s:?} order"
                );
                for t in &tasks {
                    let b = t.base.as_ref().expect("base");
                    if s == Strategy::All {
                        assert_eq!(t.pid, t.tgid);
                    }
                    // A churn child is exactly one of: fixture (exec'd) or a fork of it.
                    if churn.iter().any(|c| c.pid() == b.rec.ppid) {
                        assert!(comm(t) == b"td_fixture", "round {round}: {t:?}");
                    }
                }
            }
            // Memory maps alone: with BPF, the map walk read beside the task walk and matched
            // to tasks by pid. Each task gets its own map or none, never another's.
            let show = Group::Base.flag() | Group::Vma.flag();
            let tasks = dump(kind, &Request::new(Strategy::All, 0, show)).expect("maps dump");
            for t in &tasks {
                let b = t.base.as_ref().expect("base");
                let Some(vmas) = &t.vmas else { continue };
                if b.rec.flags & taskdiag_proto::BASE_F_KTHREAD != 0 {
                    panic!("{kind:?} round {round}: kernel thread {} has maps", t.pid);
                }
                assert!(
                    vmas.windows(2).all(|w| w[0].rec.end <= w[1].rec.start)
                        && vmas.iter().all(|v| v.rec.start < v.rec.end),
                    "{kind:?} round {round}: task {} maps out of order",
                    t.pid
                );
                // Mid-exec a child has its new name and, for a moment, only the new stack;
                // any file it maps is then the fixture's.
                if churn.iter().any(|c| c.pid() == b.rec.ppid) && comm(t) == b"td_fixture" {
                    assert!(
                        vmas.iter().all(|v| v.rec.inode == 0)
                            || vmas.iter().any(|v| v.name.ends_with(b"/td_fixture")),
                        "{kind:?} round {round}: churn child {} without td_fixture mapped: {:?}",
                        t.pid,
                        vmas.iter()
                            .map(|v| String::from_utf8_lossy(&v.name))
                            .collect::<Vec<_>>()
                    );
                }
            }
        }
    }
    drop(churn);
}

/// NS on a fixture two pid namespaces down, in new mount, net, uts, ipc, cgroup and time
/// namespaces, and on its zombie child: both backends agree, and agree with readlink of
/// /proc/PID/ns/* and the NS* lines of /proc/PID/status, read here independently.
#[test]
fn namespaces_agree_with_the_links_and_status_lines() {
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--pid",
        "--fork",
        "--kill-child",
        "--mount",
        "--net",
        "--uts",
        "--ipc",
        "--cgroup",
        "--time",
        "--",
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--",
        env!("CARGO_BIN_EXE_td_fixture"),
        "zombie",
    ])
    .stdout(Stdio::piped());
    let mut outer = Spawned::spawn_group(&mut cmd);
    outer.expect_line("ready");
    // outer unshare -> inner unshare (pid 1 of the first new namespace) -> the fixture (pid 1
    // of the second) -> its zombie.
    let only_child = |pid: u32| -> u32 {
        let c = tasks::children(pid);
        assert_eq!(c.len(), 1, "children of {pid}: {c:?}");
        c[0]
    };
    let fixture = only_child(only_child(outer.pid()));
    let zombie = only_child(fixture);
    let all = assert_agree(
        Request::new(Strategy::All, 0, Group::Base.flag() | Group::Ns.flag()),
        &[fixture, zombie],
    );

    let link = |pid: u32, name: &str| -> u32 {
        match std::fs::read_link(format!("/proc/{pid}/ns/{name}")) {
            Ok(p) => {
                let s = p.to_string_lossy().into_owned();
                let ino = s.split_once(":[").and_then(|(_, r)| r.strip_suffix(']'));
                ino.and_then(|i| i.parse().ok())
                    .unwrap_or_else(|| panic!("{s}: not a namespace link"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => panic!("/proc/{pid}/ns/{name}: {e}"),
        }
    };
    let status_ids = |pid: u32, key: &str| -> Vec<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(":\t")))
            .unwrap_or_else(|| panic!("{key} in status of {pid}"));
        line.split('\t').map(|v| v.parse().expect("id")).collect()
    };
    for pid in [fixture, zombie] {
        let ns = all[&pid].ns.as_ref().expect("ns");
        let want: Vec<u32> = taskdiag_proto::task::Ns::NAMES
            .iter()
            .map(|n| link(pid, n))
            .collect();
        assert_eq!(ns.inodes().to_vec(), want, "links of {pid}");
        assert_eq!(ns.rec.flags, 0);
        let col = |f: fn(&taskdiag_proto::NsIdsRec) -> u32| -> Vec<u32> {
            ns.ids.iter().map(f).collect()
        };
        assert_eq!(col(|l| l.pid), status_ids(pid, "NSpid"), "NSpid of {pid}");
        assert_eq!(col(|l| l.tgid), status_ids(pid, "NStgid"));
        assert_eq!(col(|l| l.pgid), status_ids(pid, "NSpgid"));
        assert_eq!(col(|l| l.sid), status_ids(pid, "NSsid"));
    }
    // What the fixture is: pid 1 two levels down, in namespaces of its own.
    let ours = |name: &str| link(std::process::id(), name);
    let f = all[&fixture].ns.as_ref().expect("ns");
    assert_eq!(f.ids.len(), 3);
    assert_eq!((f.ids[0].pid, f.ids[1].pid, f.ids[2].pid), (fixture, 2, 1));
    for (name, ino) in [
        ("net", f.rec.net),
        ("mnt", f.rec.mnt),
        ("uts", f.rec.uts),
        ("ipc", f.rec.ipc),
        ("cgroup", f.rec.cgroup),
        ("pid", f.rec.pid),
    ] {
        assert_ne!(ino, ours(name), "{name}");
        assert_ne!(ino, 0, "{name}");
    }
    assert_eq!(f.rec.user, ours("user"));
    // A zombie has left every namespace but its pid's and its credentials'.
    let z = all[&zombie].ns.as_ref().expect("ns");
    assert_eq!((z.rec.net, z.rec.mnt, z.rec.time), (0, 0, 0));
    assert_eq!((z.rec.pid, z.rec.user), (f.rec.pid, f.rec.user));
    assert_eq!(z.ids.len(), 3);
}

/// A cgroup of the unified hierarchy made for one test (under the first cgroup2 mount, or under
/// one mounted for it), removed on drop once empty.
struct TestCgroup {
    dir: std::path::PathBuf,
    mounted: Option<TempDir>,
}

impl TestCgroup {
    fn new() -> TestCgroup {
        let (base, mounted) = match tasks::cgroup2_mount() {
            Some(m) => (m, None),
            None => {
                let d = TempDir::new("cgroup2");
                let ok = Command::new("mount")
                    .args(["-t", "cgroup2", "none"])
                    .arg(d.path())
                    .status()
                    .expect("mount");
                assert!(ok.success(), "mounting cgroup2 at {}", d.path().display());
                (d.path().to_path_buf(), Some(d))
            }
        };
        // One per test: tests run side by side in this process.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = base.join(format!("taskdiag-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        TestCgroup { dir, mounted }
    }

    /// The cgroup's directory name.
    fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn enter(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} to {}: {e}", self.dir.display()));
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // The fixture was killed and reaped before: the cgroup empties a moment later.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if let Some(d) = &self.mounted {
            let _ = Command::new("umount").arg(d.path()).status();
        }
    }
}

/// CGROUP, IO, PATHS and ENVIRON on a fixture in a cgroup of its own, running a deleted copy
/// of itself from a deleted directory that is also its working directory, after known I/O,
/// with an environment larger than a page: both backends agree, and agree with its cgroup,
/// io and environ files, the exe, cwd and root links and the cgroup directory's inode, read
/// here independently.
#[test]
fn cgroup_io_paths_and_environ_agree_with_their_files() {
    let dir = TempDir::new("own files");
    let exe = dir.join("td fixture copy");
    std::fs::copy(env!("CARGO_BIN_EXE_td_fixture"), &exe).expect("copy the fixture");
    let big = "v".repeat(10_000);
    let mut cmd = Command::new(&exe);
    cmd.args(["io", "100000"])
        .current_dir(dir.path())
        .env("TD_BIG", &big)
        .stdout(Stdio::piped());
    let cgroup = TestCgroup::new();
    let mut f = Spawned::spawn_group(&mut cmd);
    f.expect_line("ready");
    let pid = f.pid();
    cgroup.enter(pid);
    std::fs::remove_file(&exe).expect("remove the copy");
    std::fs::remove_dir(dir.path()).expect("remove its directory");

    let show = Group::Base.flag()
        | Group::Cgroup.flag()
        | Group::Io.flag()
        | Group::Paths.flag()
        | Group::Environ.flag();
    let all = assert_agree(Request::new(Strategy::All, 0, show), &[pid]);
    let t = &all[&pid];
    let file = |name: &str| std::fs::read(format!("/proc/{pid}/{name}")).expect(name);
    let link = |name: &str| {
        use std::os::unix::ffi::OsStrExt;
        let l = std::fs::read_link(format!("/proc/{pid}/{name}")).expect(name);
        l.as_os_str().as_bytes().to_vec()
    };

    let cg = t.cgroup.as_ref().expect("cgroup");
    assert_eq!(cg.text, file("cgroup"));
    let unified = cg.unified().expect("a 0:: line");
    let name = format!("/{}", cgroup.name());
    assert!(unified.ends_with(name.as_bytes()), "{:?}", cg.text);
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(&cgroup.dir).expect("cgroup dir").ino();
    assert_eq!(cg.rec.id, ino, "the id is the cgroup directory's inode");

    let io = t.io.expect("io");
    let text = String::from_utf8(file("io")).expect("io text");
    let field = |k: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(": ")?.parse().ok())
            .unwrap_or_else(|| panic!("{k} in {text}"))
    };
    let want = [
        field("rchar"),
        field("wchar"),
        field("syscr"),
        field("syscw"),
        field("read_bytes"),
        field("write_bytes"),
        field("cancelled_write_bytes"),
    ];
    assert_eq!(io.counters(), want);
    assert!(io.wchar >= 100_000 && io.rchar >= 100_000, "{io:?}");
    assert!(io.syscw >= 100_000 / 4096, "{io:?}");

    let p = t.paths.as_ref().expect("paths");
    let deleted = |path: &std::path::Path| {
        use std::os::unix::ffi::OsStrExt;
        [path.as_os_str().as_bytes(), b" (deleted)"].concat()
    };
    assert_eq!(p.exe.as_deref(), Ok(&deleted(&exe)[..]));
    assert_eq!(p.cwd.as_deref(), Ok(&deleted(dir.path())[..]));
    assert_eq!(p.exe.as_deref(), Ok(&link("exe")[..]));
    assert_eq!(p.cwd.as_deref(), Ok(&link("cwd")[..]));
    assert_eq!(p.root.as_deref(), Ok(&link("root")[..]));
    assert_eq!(p.root.as_deref(), Ok(&b"/"[..]));

    let env = t.environ.as_ref().expect("environ");
    assert_eq!(env, &file("environ"));
    assert!(env.len() > 4096);
    let var = format!("TD_BIG={big}");
    assert!(env.split(|&c| c == 0).any(|v| v == var.as_bytes()));

    // A kernel thread: no executable, and its io and environ read as for anyone else.
    let tasks = dump(BackendKind::Procfs, &Request::new(Strategy::All, 0, show)).expect("dump");
    let kthread = tasks.iter().find(|t| {
        let b = t.base.as_ref().expect("base");
        b.rec.flags & taskdiag_proto::BASE_F_KTHREAD != 0
    });
    if let Some(k) = kthread {
        let p = k.paths.as_ref().expect("paths");
        assert_eq!(p.exe, Err(libc::ENOENT as u8));
        assert_eq!(k.environ.as_deref(), Some(&b""[..]));
    }
    drop(f);
}

/// A dump of `req` by the task program alone (no completion from /proc), decoded.
fn program_tasks(it: &mut taskdiag_bpf::TaskIter, req: &Request) -> Vec<Task> {
    let mut buf = Vec::new();
    it.dump(req, &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    })
    .expect("dump");
    let mut asm = taskdiag_proto::task::TaskAssembler::new();
    Messages::new(&buf)
        .filter_map(|m| asm.push(&m.expect("message")).expect("decode"))
        .collect()
}

/// The `0::` line of /proc/PID/cgroup, with its newline.
fn unified_line(text: &[u8]) -> Option<Vec<u8>> {
    let line = text
        .split(|&c| c == b'\n')
        .find(|l| l.starts_with(b"0::"))?;
    Some([line, b"\n"].concat())
}

/// CGROUP as the task program writes it, against /proc/PID/cgroup read before and after the
/// walk (tasks whose file changed meanwhile are skipped: they moved) and the unified cgroup
/// directory's inode, for every task: with this host's hierarchies (the whole text), and as
/// if the unified one were the only one (its line alone, the program's other path; the same
/// on a unified-only host). Among them a fixture in a cgroup of its own and a zombie whose
/// cgroup was removed (" (deleted)", id 0; "/" in v1 hierarchies, as for any exiting task).
#[test]
fn the_programs_cgroup_text_agrees_with_proc() {
    use std::os::unix::fs::MetadataExt;
    let cgroup = TestCgroup::new();
    let f = spawn(&["sleep"], None);
    cgroup.enter(f.pid());
    let gone = cgroup.dir.join("gone");
    std::fs::create_dir(&gone).expect("mkdir gone");
    let mut zombie = Command::new("sleep").arg("1000").spawn().expect("sleep");
    let zpid = zombie.id();
    std::fs::write(gone.join("cgroup.procs"), zpid.to_string()).expect("enter gone");
    zombie.kill().expect("kill");
    let removed = (0..250).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::remove_dir(&gone).is_ok()
    });
    assert!(removed, "rmdir {} after its task exited", gone.display());

    let read_all = || -> BTreeMap<u32, Vec<u8>> {
        tasks::pids()
            .into_iter()
            .filter_map(|p| Some((p, std::fs::read(format!("/proc/{p}/cgroup")).ok()?)))
            .collect()
    };
    let own = std::fs::read("/proc/self/cgroup").expect("/proc/self/cgroup");
    let host = taskdiag_procfs::parse::cgroup_hierarchies(&own);
    let mount = cgroup
        .dir
        .parent()
        .expect("the cgroup2 mount")
        .to_path_buf();
    let show = Group::Base.flag() | Group::Cgroup.flag();
    let mut it = taskdiag_bpf::TaskIter::load_for(show).expect("load (run as root)");
    for unified_only in [false, true] {
        if unified_only {
            it.set_cgroup_hierarchies(false, true);
        } else {
            it.set_cgroup_hierarchies(host.v1, host.unified);
        }
        if it.missing_groups(show) != 0 {
            // The bounded flavour leaves a hybrid host's text to /proc.
            assert!(host.v1 && !unified_only, "{:?}", it.features());
            continue;
        }
        let before = read_all();
        let tasks = program_tasks(&mut it, &Request::new(Strategy::All, 0, show));
        let after = read_all();
        let mut checked = 0;
        for t in tasks {
            let (Some(b), Some(a)) = (before.get(&t.pid), after.get(&t.pid)) else {
                continue;
            };
            if a != b {
                continue;
            }
            let cg = t
                .cgroup
                .as_ref()
                .unwrap_or_else(|| panic!("pid {}: {t:?}", t.pid));
            let want = if unified_only {
                unified_line(b).unwrap_or_else(|| panic!("pid {}: no 0:: line", t.pid))
            } else {
                b.clone()
            };
            assert_eq!(
                String::from_utf8_lossy(&cg.text),
                String::from_utf8_lossy(&want),
                "pid {} (unified line only: {unified_only})",
                t.pid
            );
            let Some(path) = cg.unified() else { continue };
            if path.ends_with(b" (deleted)") {
                assert_eq!(cg.rec.id, 0, "pid {}", t.pid);
            } else {
                use std::os::unix::ffi::OsStrExt;
                let dir = mount.join(std::ffi::OsStr::from_bytes(&path[1..]));
                if let Ok(m) = std::fs::metadata(&dir) {
                    assert_eq!(cg.rec.id, m.ino(), "pid {}: {}", t.pid, dir.display());
                }
            }
            let name = format!("/{}", cgroup.name());
            if t.pid == f.pid() {
                assert!(path.ends_with(name.as_bytes()), "{:?}", cg.text);
                checked += 1;
            }
            if t.pid == zpid {
                let gone = format!("{name}/gone (deleted)");
                assert!(path.ends_with(gone.as_bytes()), "{:?}", cg.text);
                checked += 1;
            }
        }
        assert_eq!(checked, 2, "the fixture and the zombie were both checked");
    }
    zombie.wait().expect("reap");
    drop(f);
}

/// readlink of /proc/PID/{exe,cwd,root}: the text, or the errno.
fn links(pid: u32) -> Option<[Result<Vec<u8>, u8>; 3]> {
    use std::os::unix::ffi::OsStrExt;
    let link = |name: &str| match std::fs::read_link(format!("/proc/{pid}/{name}")) {
        Ok(l) => Ok(l.as_os_str().as_bytes().to_vec()),
        Err(e) => Err(e.raw_os_error().unwrap_or(0) as u8),
    };
    let got = [link("exe"), link("cwd"), link("root")];
    // Gone meanwhile (every link ENOENT and no /proc/PID): nothing to compare.
    std::path::Path::new(&format!("/proc/{pid}"))
        .exists()
        .then_some(got)
}

/// PATHS as the task program writes it, against readlink of /proc/PID/{exe,cwd,root} read
/// before and after the walk (tasks whose links changed meanwhile are skipped), for every
/// task: kernel threads (no exe), a zombie (no link at all), two deleted copies of the fixture
/// run from a deleted directory that is their working directory, a chrooted process (its root and
/// working directory elsewhere than /), and one whose working directory is on a file system
/// mounted in its own mount namespace only. The program must have written it (not left it to
/// /proc) for each of these.
#[test]
fn the_programs_paths_agree_with_the_links() {
    use taskdiag_test_support::process::wait_exec;
    let show = Group::Base.flag() | Group::Paths.flag();
    // The bounded flavour (kernels without bpf_loop()) leaves PATHS to /proc.
    let Some(mut it) = programs_writing(Group::Paths) else {
        return;
    };
    let dir = TempDir::new("paths");
    let gone = dir.join("gone dir");
    std::fs::create_dir(&gone).expect("mkdir");
    let exe = gone.join("td fixture\ncopy");
    std::fs::copy(env!("CARGO_BIN_EXE_td_fixture"), &exe).expect("copy the fixture");
    // Two: the second's texts come from what the program kept of the first's.
    let start = || {
        let mut cmd = Command::new(&exe);
        cmd.arg("sleep").current_dir(&gone).stdout(Stdio::piped());
        let mut f = Spawned::spawn_group(&mut cmd);
        f.expect_line("ready");
        f
    };
    let (deleted, deleted2) = (start(), start());
    std::fs::remove_file(&exe).expect("remove the copy");
    std::fs::remove_dir(&gone).expect("remove its directory");

    let jail = dir.join("jail");
    std::fs::create_dir_all(jail.join("inner")).expect("mkdir jail");
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import os, sys, time\nos.chroot(sys.argv[1])\nos.chdir('/inner')\n\
         print('ready', flush=True)\ntime.sleep(1000)\n",
    ])
    .arg(&jail)
    .stdout(Stdio::piped());
    let mut chrooted = Spawned::spawn_group(&mut cmd);
    chrooted.expect_line("ready");

    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir mnt");
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs taskdiag-paths \"$1\" && mkdir \"$1/sub\" && cd \"$1/sub\" && \
             echo ready && exec sleep 1000",
        )
        .args(["sh"])
        .arg(&mnt)
        .stdout(Stdio::piped());
    let mut mounted = Spawned::spawn_group(&mut cmd);
    mounted.expect_line("ready");
    wait_exec(mounted.pid(), "sleep");

    let mut zombie = Command::new("sleep").arg("1000").spawn().expect("sleep");
    let zpid = zombie.id();
    zombie.kill().expect("kill");
    taskdiag_test_support::process::wait_for("the zombie", || {
        std::fs::read_to_string(format!("/proc/{zpid}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
    });

    let read_all = || -> BTreeMap<u32, [Result<Vec<u8>, u8>; 3]> {
        tasks::pids()
            .into_iter()
            .filter_map(|p| Some((p, links(p)?)))
            .collect()
    };
    let before = read_all();
    let tasks = program_tasks(&mut it, &Request::new(Strategy::All, 0, show));
    let after = read_all();
    let (mut written, mut compared, mut kthreads) = (0, 0, 0);
    let mut seen = Vec::new();
    for t in tasks {
        let (Some(b), Some(a)) = (before.get(&t.pid), after.get(&t.pid)) else {
            continue;
        };
        if a != b {
            continue;
        }
        compared += 1;
        let Some(p) = &t.paths else {
            assert!(
                t.errors.iter().any(|e| e.group == Group::Paths as u16
                    && e.errno == taskdiag_proto::ERRNO_NEEDS_PROCFS),
                "pid {}: neither paths nor a /proc fix-up: {t:?}",
                t.pid
            );
            continue;
        };
        written += 1;
        let show = |r: &Result<Vec<u8>, u8>| match r {
            Ok(v) => String::from_utf8_lossy(v).into_owned(),
            Err(e) => format!("errno {e}"),
        };
        for (k, (got, want)) in [&p.exe, &p.cwd, &p.root].into_iter().zip(b).enumerate() {
            assert_eq!(
                show(got),
                show(want),
                "pid {}: {}",
                t.pid,
                ["exe", "cwd", "root"][k]
            );
        }
        let kthread = t
            .base
            .as_ref()
            .is_some_and(|b| b.rec.flags & taskdiag_proto::BASE_F_KTHREAD != 0);
        if kthread {
            kthreads += 1;
        }
        seen.push(t.pid);
    }
    eprintln!("{written} of {compared} tasks' paths written by the program");
    for (what, pid) in [
        ("the deleted copy", deleted.pid()),
        ("the second deleted copy", deleted2.pid()),
        ("the chrooted process", chrooted.pid()),
        ("the process in its own mount namespace", mounted.pid()),
        ("the zombie", zpid),
    ] {
        assert!(
            seen.contains(&pid),
            "{what} ({pid}) was not written by the program"
        );
    }
    assert!(kthreads > 0, "no kernel thread was written by the program");
    // Spot checks of what the links say (the comparison above is the test; these make sure
    // the fixtures are what they claim).
    let l = links(deleted.pid()).expect("the deleted copy");
    assert!(
        l[0].as_ref().is_ok_and(|e| e.ends_with(b"copy (deleted)")),
        "{l:?}"
    );
    let l = links(chrooted.pid()).expect("the chrooted process");
    assert!(l[2].as_ref().is_ok_and(|r| r.ends_with(b"/jail")), "{l:?}");
    let l = links(zpid).expect("the zombie");
    assert_eq!(l, [Err(2), Err(2), Err(2)]);
    zombie.wait().expect("reap");
    drop((deleted, deleted2, chrooted, mounted));
}

/// The task programs loaded for BASE and `g`, if they write `g` on this kernel (else it comes
/// from /proc, which the group's own differential test has nothing to compare with: said so).
fn programs_writing(g: Group) -> Option<taskdiag_bpf::TaskIter> {
    let show = Group::Base.flag() | g.flag();
    let it = taskdiag_bpf::TaskIter::load_for(show).expect("load (run as root)");
    if it.missing_groups(show) != 0 {
        eprintln!("{} from /proc here: {:?}", g.name(), it.features());
        return None;
    }
    Some(it)
}

/// `read` of every task's /proc directory, by id: each process's (`/proc/PID`), or with
/// `threads` each thread's (`/proc/PID/task/TID`); tasks it gives nothing for (gone) are left
/// out.
fn read_each<T>(threads: bool, read: impl Fn(&str) -> Option<T>) -> BTreeMap<u32, T> {
    let mut all = BTreeMap::new();
    for pid in tasks::pids() {
        if threads {
            for tid in threads_of(pid) {
                if let Some(v) = read(&format!("/proc/{pid}/task/{tid}")) {
                    all.insert(tid, v);
                }
            }
        } else if let Some(v) = read(&format!("/proc/{pid}")) {
            all.insert(pid, v);
        }
    }
    all
}

/// The tasks of one walk of every process (or with `threads` every thread) for `show`, each
/// with what `read` gave for its /proc directory just before the walk and just after (a task
/// missing from either is left out).
fn around_walk<T>(
    it: &mut taskdiag_bpf::TaskIter,
    threads: bool,
    show: u64,
    read: impl Fn(&str) -> Option<T> + Copy,
) -> Vec<(Task, T, T)> {
    let strategy = if threads {
        Strategy::AllThread
    } else {
        Strategy::All
    };
    let mut before = read_each(threads, read);
    let tasks = program_tasks(it, &Request::new(strategy, 0, show));
    let mut after = read_each(threads, read);
    tasks
        .into_iter()
        .filter_map(|t| {
            let (b, a) = (before.remove(&t.pid)?, after.remove(&t.pid)?);
            Some((t, b, a))
        })
        .collect()
}

/// SCHED as /proc shows it for one task (`dir` is /proc/PID or /proc/PID/task/TID): the
/// numbers, the autogroup line, wchan, syscall and status's two lists, as one text per field.
fn sched_files(dir: &str) -> Option<BTreeMap<&'static str, String>> {
    let read = |name: &str| -> Option<String> {
        match std::fs::read_to_string(format!("{dir}/{name}")) {
            Ok(t) => Some(t.trim_end_matches('\n').to_owned()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && name == "autogroup" => {
                Some("none".into())
            }
            Err(_) => None,
        }
    };
    let status = read("status")?;
    let line = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(":\t"))
            .map(str::to_owned)
    };
    let mut m = BTreeMap::new();
    for name in [
        "oom_score",
        "oom_score_adj",
        "loginuid",
        "sessionid",
        "autogroup",
        "wchan",
        "syscall",
    ] {
        m.insert(name, read(name)?);
    }
    m.insert("cpus", line("Cpus_allowed_list")?);
    m.insert("mems", line("Mems_allowed_list")?);
    Some(m)
}

/// The same fields of a SCHED record, as the files print them.
fn sched_texts(s: &taskdiag_proto::task::Sched) -> BTreeMap<&'static str, String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let r = &s.rec;
    let autogroup = if r.flags & taskdiag_proto::SCHED_F_NO_AUTOGROUP != 0 {
        "none".to_owned()
    } else if r.autogroup == 0 {
        String::new()
    } else {
        format!("/autogroup-{} nice {}", r.autogroup, r.autogroup_nice)
    };
    BTreeMap::from([
        ("oom_score", r.oom_score.to_string()),
        ("oom_score_adj", r.oom_score_adj.to_string()),
        ("loginuid", r.loginuid.to_string()),
        ("sessionid", r.sessionid.to_string()),
        ("autogroup", autogroup),
        ("wchan", text(&s.wchan)),
        ("syscall", text(&s.syscall)),
        ("cpus", text(&s.cpus_allowed)),
        ("mems", text(&s.mems_allowed)),
    ])
}

/// SCHED as the task program writes it, against the files read before and after the walk,
/// for every process and every thread: a fixture with oom_score_adj 123 and a thread pinned
/// to CPU 0 (both in pause()), a process the OOM killer picks first (1000; -1000 needs
/// CAP_SYS_RESOURCE, which these machines' root lacks), one in an autogroup of its own with
/// nice 5, one pinned to the last CPU, a zombie, kernel threads. A field that read the same
/// before and after must be the program's; wchan, syscall and oom_score only for the
/// fixtures, which wait throughout (a task of the system may wait elsewhere or map memory
/// during the walk and come back).
#[test]
fn the_programs_sched_agrees_with_proc() {
    use taskdiag_test_support::process::wait_for;
    let show = Group::Base.flag() | Group::Sched.flag();
    let Some(mut it) = programs_writing(Group::Sched) else {
        return;
    };
    let pinned = spawn(&["sched"], None);
    let mut cmd = Command::new("choom");
    cmd.args([
        "-n",
        "1000",
        "--",
        "sh",
        "-c",
        "echo ready; exec sleep 1000",
    ])
    .stdout(Stdio::piped());
    let mut first_pick = Spawned::spawn_group(&mut cmd);
    first_pick.expect_line("ready");
    let mut cmd = Command::new("setsid");
    cmd.args(["sh", "-c", "echo ready; exec sleep 1000"])
        .stdout(Stdio::piped());
    let mut grouped = Spawned::spawn(&mut cmd);
    grouped.expect_line("ready");
    std::fs::write(format!("/proc/{}/autogroup", grouped.pid()), "5").expect("autogroup nice");
    let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let mut cmd = Command::new("taskset");
    cmd.args([
        "-c",
        &last.to_string(),
        "sh",
        "-c",
        "echo ready; exec sleep 1000",
    ])
    .stdout(Stdio::piped());
    let mut on_last = Spawned::spawn_group(&mut cmd);
    on_last.expect_line("ready");
    let mut zombie = Command::new("sleep").arg("1000").spawn().expect("sleep");
    let zpid = zombie.id();
    zombie.kill().expect("kill");
    let fixtures = [
        pinned.pid(),
        first_pick.pid(),
        grouped.pid(),
        on_last.pid(),
        zpid,
    ];
    // Every fixture waiting where it stays before the walk: the sleeps in nanosleep (35, or
    // clock_nanosleep 230), the pinned fixture's threads in pause() (34), the zombie dead.
    for &pid in &fixtures[1..4] {
        taskdiag_test_support::process::wait_exec(pid, "sleep");
    }
    for pid in &fixtures[..4] {
        for tid in threads_of(*pid) {
            wait_for("the fixtures to wait in their system call", || {
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                    .is_ok_and(|s| matches!(s.split(' ').next(), Some("34" | "35" | "230")))
            });
        }
    }
    wait_for("the zombie", || {
        std::fs::read_to_string(format!("/proc/{zpid}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
    });

    let mut checked = BTreeMap::new();
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    for threads in [false, true] {
        for (t, b, a) in around_walk(&mut it, threads, show, sched_files) {
            let (b, a) = (&b, &a);
            let s = t
                .sched
                .as_ref()
                .unwrap_or_else(|| panic!("task {}: no sched: {t:?}", t.pid));
            let ours = sched_texts(s);
            let fixture = fixtures.contains(&t.tgid);
            for (k, want) in b {
                if a[k] != *want || (t.pid == me && *k == "syscall") {
                    assert!(!fixture, "fixture {} changed its {k}", t.pid);
                    continue;
                }
                // Where a task of the system waits, and its memory, change and come back (a
                // thread of a pool waking and waiting again on another futex; pages mapped
                // and unmapped): only the fixtures', which wait throughout, are compared.
                if !fixture && matches!(*k, "syscall" | "wchan" | "oom_score") {
                    continue;
                }
                let got = &ours[k];
                assert!(
                    got == want,
                    "task {} (threads: {threads}): {k} {got:?}, /proc {want:?}",
                    t.pid
                );
            }
            if fixture {
                *checked.entry((t.pid, threads)).or_insert(0) += 1;
            }
        }
    }
    // Every fixture task, per process and per thread (the pinned fixture has two threads).
    assert_eq!(checked.len(), 2 * fixtures.len() + 1, "{checked:?}");
    let s = sched_files(&format!("/proc/{}", grouped.pid())).expect("grouped");
    assert!(s["autogroup"].ends_with(" nice 5"), "{s:?}");
    let s = sched_files(&format!("/proc/{}", first_pick.pid())).expect("first pick");
    assert_eq!(s["oom_score_adj"], "1000");
    zombie.wait().expect("reap");
    drop((pinned, first_pick, grouped, on_last));
}

/// SECURITY on a fixture with no_new_privs and two seccomp filters, per process and per
/// thread: both backends agree (the task program writes it where no security module gives
/// labels, as on a host without AppArmor or SELinux), and agree with status and attr/current.
#[test]
fn security_agrees_with_status_and_the_label() {
    let f = spawn(&["seccomp"], None);
    let pid = f.pid();
    let show = Group::Base.flag() | Group::Security.flag();
    let all = assert_agree(Request::new(Strategy::All, 0, show), &[pid]);
    assert_agree(Request::new(Strategy::Thread, pid, show), &[pid]);
    let s = all[&pid].security.as_ref().expect("security");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = |k: &str| -> u32 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(":")?.trim().parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(
        (s.rec.seccomp, s.rec.seccomp_filters, s.rec.no_new_privs),
        (
            line("Seccomp"),
            line("Seccomp_filters"),
            line("NoNewPrivs") as u16
        )
    );
    assert_eq!((s.rec.seccomp, s.rec.no_new_privs), (2, 1));
    if tasks::kernel_at_least(5, 9) {
        assert_eq!(s.rec.seccomp_filters, 2);
    }
    match std::fs::read(format!("/proc/{pid}/attr/current")) {
        Ok(label) => assert_eq!(s.label, label),
        Err(e) => assert_eq!(i32::from(s.rec.label_errno), e.raw_os_error().unwrap_or(0)),
    }
    drop(f);
}

/// SCHED and DELAY on a fixture with oom_score_adj 123 and a thread pinned to CPU 0, both
/// threads in pause(): both backends agree (per process and per thread), and agree with the
/// files read here independently.
#[test]
fn sched_and_delay_agree_with_their_files() {
    let f = spawn(&["sched"], None);
    let pid = f.pid();
    let tids = threads_of(pid);
    assert_eq!(tids.len(), 2);
    // Wait until both threads sleep in pause(), so wchan and syscall stay put.
    for &tid in &tids {
        let syscall = format!("/proc/{pid}/task/{tid}/syscall");
        taskdiag_test_support::process::wait_for("the threads to wait in pause()", || {
            std::fs::read_to_string(&syscall).is_ok_and(|s| {
                s.split(' ')
                    .next()
                    .is_some_and(|n| n.parse::<i64>().is_ok())
            })
        });
    }
    let show = Group::Base.flag() | Group::Sched.flag() | Group::Delay.flag();
    let all = assert_agree(Request::new(Strategy::All, 0, show), &[pid]);
    let threads = assert_agree(Request::new(Strategy::AllThread, 0, show), &tids);
    let file = |path: String| {
        let mut b = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        if b.last() == Some(&b'\n') {
            b.pop();
        }
        b
    };
    let s = all[&pid].sched.as_ref().expect("sched");
    assert_eq!(s.rec.oom_score_adj, 123);
    assert_eq!(
        s.rec.oom_score.to_string().into_bytes(),
        file(format!("/proc/{pid}/oom_score"))
    );
    assert_eq!(s.wchan, file(format!("/proc/{pid}/wchan")));
    assert_eq!(s.syscall, file(format!("/proc/{pid}/syscall")));
    // pause() is system call 34 on x86-64, 236 on arm64 (which has only ppoll: no pause).
    let nr = std::str::from_utf8(&s.syscall).expect("text");
    assert!(
        nr.split(' ')
            .next()
            .is_some_and(|n| n.parse::<i64>().is_ok()),
        "{nr}"
    );
    // DELAY: schedstat and stat field 42, per task (a process's record is its leader's).
    for (t, dir) in [(&all[&pid], format!("/proc/{pid}"))].into_iter().chain(
        tids.iter()
            .map(|&tid| (&threads[&tid], format!("/proc/{pid}/task/{tid}"))),
    ) {
        let d = t.delay.as_ref().expect("delay");
        let ss = String::from_utf8(file(format!("{dir}/schedstat"))).expect("schedstat");
        let ss: Vec<u64> = ss.split(' ').map(|v| v.parse().expect("number")).collect();
        assert_eq!(vec![d.run_ns, d.wait_ns, d.timeslices], ss, "{dir}");
        let stat = String::from_utf8(file(format!("{dir}/stat"))).expect("stat");
        let after_comm = stat.rsplit_once(") ").expect("stat").1;
        // Field 42 is the 40th after the name (fields 1 and 2).
        let f42: u64 = after_comm
            .split(' ')
            .nth(39)
            .expect("field 42")
            .parse()
            .expect("n");
        assert_eq!(d.blkio_ticks, f42, "{dir}");
    }
    for &tid in &tids {
        let t = threads[&tid].sched.as_ref().expect("sched");
        let dir = format!("/proc/{pid}/task/{tid}");
        assert_eq!(t.syscall, file(format!("{dir}/syscall")), "thread {tid}");
        let status = String::from_utf8(file(format!("{dir}/status"))).expect("status");
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:\t"))
            .expect("Cpus_allowed_list");
        assert_eq!(t.cpus_allowed, cpus.as_bytes(), "thread {tid}");
        if tid != pid {
            assert_eq!(t.cpus_allowed, b"0", "the pinned thread");
        }
        assert_eq!(t.rec.oom_score_adj, 123);
    }
    drop(f);
}

/// WCHAN, SCHED's wait channel alone, as the task program writes it, on a fixture whose two
/// threads wait in pause() and a sleep in nanosleep, per process and per thread: equal to
/// /proc's wchan read before and after the walk (the same both times); with SCHED and KSTACK
/// in the same walk (which then unwinds whole stacks, not one frame), equal to SCHED's wchan
/// and to the function of KSTACK's first frame (/proc/PID/stack's frames leave out the
/// scheduler's, as get_wchan() does). Both backends agree on the fixtures.
#[test]
fn the_programs_wchan_agrees_with_proc() {
    use taskdiag_test_support::process::wait_for;
    let alone = Group::Base.flag() | Group::Wchan.flag();
    let all = alone | Group::Sched.flag() | Group::Kstack.flag();
    let mut it = taskdiag_bpf::TaskIter::load_for(all).expect("load (run as root)");
    if it.missing_groups(alone) != 0 {
        eprintln!("wchan from /proc here: {:?}", it.features());
        return;
    }
    let mut walks = vec![alone];
    if it.missing_groups(all) == 0 {
        walks.push(all);
    } else {
        eprintln!("sched or kstack from /proc here: {:?}", it.features());
    }
    let paused = spawn(&["sched"], None);
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo ready; exec sleep 1000"])
        .stdout(Stdio::piped());
    let mut sleeper = Spawned::spawn_group(&mut cmd);
    sleeper.expect_line("ready");
    taskdiag_test_support::process::wait_exec(sleeper.pid(), "sleep");
    let fixtures = [paused.pid(), sleeper.pid()];
    // Every fixture thread waiting where it stays: pause() (34), nanosleep (35) or
    // clock_nanosleep (230).
    for pid in fixtures {
        for tid in threads_of(pid) {
            wait_for("the fixtures to wait in their system call", || {
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                    .is_ok_and(|s| matches!(s.split(' ').next(), Some("34" | "35" | "230")))
            });
        }
    }
    let wchan_file = |dir: &str| std::fs::read(format!("{dir}/wchan")).ok();
    for show in walks {
        for threads in [false, true] {
            let mut checked = 0;
            for (t, before, after) in around_walk(&mut it, threads, show, wchan_file) {
                if !fixtures.contains(&t.tgid) {
                    continue;
                }
                assert_eq!(before, after, "fixture {} changed its wchan", t.pid);
                let w = t
                    .wchan
                    .as_ref()
                    .unwrap_or_else(|| panic!("task {}: no wchan: {t:?}", t.pid));
                assert_eq!(*w, before, "task {} (threads: {threads})", t.pid);
                assert_ne!(w.as_slice(), b"0", "task {} waits", t.pid);
                if show & Group::Sched.flag() != 0 {
                    let s = t.sched.as_ref().expect("sched");
                    assert_eq!(s.wchan, *w, "task {}: sched's wchan", t.pid);
                }
                if let Some(k) = &t.kstack {
                    let first = k.split(|&c| c == b'\n').next().unwrap_or_default();
                    let func = first
                        .strip_prefix(b"[<0>] ")
                        .and_then(|f| f.split(|&c| c == b'+').next())
                        .unwrap_or_default();
                    assert_eq!(func, w.as_slice(), "task {}: kstack {k:?}", t.pid);
                }
                checked += 1;
            }
            // Two processes; three threads (the pause() fixture has two).
            assert_eq!(checked, if threads { 3 } else { 2 }, "show {show:#x}");
        }
    }
    assert_agree(Request::new(Strategy::All, 0, alone), &fixtures);
    assert_agree(
        Request::new(Strategy::Thread, paused.pid(), alone),
        &threads_of(paused.pid()),
    );
    drop((paused, sleeper));
}

/// WCHAN's memo of where each task waited (the programs unwind a task again only once it has
/// left a CPU since): a shell waiting for a line on a pipe, read in two walks (the second from
/// the memo), then given its line, after which it executes sleep and waits there; each walk
/// says what /proc says before and after it, and the two places differ.
#[test]
fn a_task_that_waits_elsewhere_is_unwound_again() {
    use std::io::Write;
    use taskdiag_test_support::process::wait_for;
    let Some(mut it) = programs_writing(Group::Wchan) else {
        return;
    };
    let show = Group::Base.flag() | Group::Wchan.flag();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo ready; read line; exec sleep 1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut f = Spawned::spawn_group(&mut cmd);
    f.expect_line("ready");
    let pid = f.pid();
    let syscall_is = |names: &[&str]| {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|s| s.split(' ').next().is_some_and(|n| names.contains(&n)))
    };
    // read (0), then nanosleep (35) or clock_nanosleep (230).
    wait_for("the shell to wait for its line", || syscall_is(&["0"]));
    let wchan_file = |dir: &str| std::fs::read(format!("{dir}/wchan")).ok();
    let walk = |it: &mut taskdiag_bpf::TaskIter| {
        let (t, before, after) = around_walk(it, false, show, wchan_file)
            .into_iter()
            .find(|(t, ..)| t.pid == pid)
            .expect("the fixture in the walk");
        assert_eq!(before, after, "the fixture moved during the walk");
        assert_eq!(t.wchan.as_ref(), Some(&before), "task {pid}");
        before
    };
    let reading = walk(&mut it);
    assert_eq!(walk(&mut it), reading, "the second walk (from the memo)");
    f.child()
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("write");
    taskdiag_test_support::process::wait_exec(pid, "sleep");
    wait_for("sleep to wait", || syscall_is(&["35", "230"]));
    let sleeping = walk(&mut it);
    assert_ne!(sleeping, reading, "waits in read and in sleep");
    assert_eq!(walk(&mut it), sleeping);
    drop(f);
}

/// DELAY's delay-accounting pairs as the BPF backend reads them: where it read them, its
/// block I/O total is what stat field 42 shows in clock ticks (with the swap-in total before
/// Linux 5.14), and the pairs never decrease between two reads.
#[test]
fn delay_counters_agree_with_stat() {
    let req = Request::new(Strategy::All, 0, Group::Base.flag() | Group::Delay.flag());
    let first = by_pid(dump(BackendKind::Bpf, &req).expect("bpf dump"));
    let second = by_pid(dump(BackendKind::Bpf, &req).expect("bpf dump"));
    let ns_per_tick = 1_000_000_000 / taskdiag_procfs::reader::clock_ticks();
    let mut checked = 0;
    for (pid, a) in &first {
        let (Some(da), Some(db)) = (a.delay, second.get(pid).and_then(|b| b.delay)) else {
            continue;
        };
        if da.flags & taskdiag_proto::DELAY_F_COUNTERS == 0 {
            continue;
        }
        let same = |x: &Task| x.base.as_ref().map(|b| b.rec.start_time_ns);
        if same(a) != same(&second[pid]) {
            continue;
        }
        let blkio = da.blkio_delay_ns / ns_per_tick;
        let with_swap = (da.blkio_delay_ns + da.swapin_delay_ns) / ns_per_tick;
        assert!(
            da.blkio_ticks == blkio || da.blkio_ticks == with_swap,
            "{pid}: {da:?}"
        );
        for (x, y) in [
            (da.run_ns, db.run_ns),
            (da.blkio_delay_ns, db.blkio_delay_ns),
            (da.blkio_count, db.blkio_count),
            (da.swapin_count, db.swapin_count),
            (da.freepages_count, db.freepages_count),
        ] {
            assert!(x <= y, "{pid}: {da:?} then {db:?}");
        }
        checked += 1;
    }
    eprintln!("{checked} tasks with delay-accounting counters");
}

/// Delay accounting switched on (sysctl kernel.task_delayacct=1) while it lives. The tests that
/// hold one run concurrently: the first to switch it on keeps the old value, and the last to
/// drop writes it back, also when an assertion fails.
struct DelayAccounting(());

/// How many [`DelayAccounting`]s live, and the value from before the first.
static DELAY_ACCOUNTING: std::sync::Mutex<(usize, Vec<u8>)> =
    std::sync::Mutex::new((0, Vec::new()));

impl DelayAccounting {
    const SYSCTL: &'static str = "/proc/sys/kernel/task_delayacct";

    /// `None` where the kernel has no switch (before 5.14, or without CONFIG_TASK_DELAY_ACCT).
    fn on() -> Option<DelayAccounting> {
        let mut held = DELAY_ACCOUNTING.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 == 0 {
            held.1 = std::fs::read(Self::SYSCTL).ok()?;
            std::fs::write(Self::SYSCTL, b"1").expect("turn delay accounting on (run as root)");
        }
        held.0 += 1;
        Some(DelayAccounting(()))
    }
}

impl Drop for DelayAccounting {
    fn drop(&mut self) {
        let mut held = DELAY_ACCOUNTING.lock().unwrap_or_else(|e| e.into_inner());
        held.0 -= 1;
        if held.0 == 0 {
            let _ = std::fs::write(Self::SYSCTL, &held.1);
        }
    }
}

/// DELAY of every task of a dump by id, with its start time (a reused id has another).
type DelayByTask = BTreeMap<u32, (u64, taskdiag_proto::DelayRec)>;

fn delay_by_task(kind: BackendKind, req: &Request) -> DelayByTask {
    dump(kind, req)
        .expect("dump")
        .into_iter()
        .filter_map(|t| Some((t.pid, (t.base.as_ref()?.rec.start_time_ns, t.delay?))))
        .collect()
}

/// Whether the file system holding `dir` is on a block device (not tmpfs, 9p, overlay...):
/// there fsync and O_DIRECT wait for block I/O.
fn on_block_device(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).expect("stat").dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    std::path::Path::new(&format!("/sys/dev/block/{major}:{minor}")).exists()
}

/// The `blkio` fixture, started in `dir` (with delay accounting on, as root): its leader and
/// second thread each wrote, fsynced and read back around the page cache. A fast device can
/// finish such a round before the task sleeps for it, so where `dir` is on a block device each
/// task is asked for more rounds, at most [`BLKIO_ROUNDS`], until taskstats (the procfs
/// backend) counts a block I/O wait for it. Returns the fixture, its tids (leader first), and
/// whether both tasks waited; if not, says why on stderr. Without `accounting` (delay
/// accounting off, nothing counts the waits) no more rounds are asked for.
fn blkio_fixture(dir: &TempDir, accounting: bool) -> (Fixture, Vec<u32>, bool) {
    let data = dir.join("data");
    let mut f = spawn(&["blkio", data.to_str().expect("utf-8 path")], None);
    let pid = f.pid();
    let tids = threads_of(pid);
    assert_eq!(tids.len(), 2, "{tids:?}");
    assert_eq!(tids[0], pid, "{tids:?}");
    if !accounting {
        return (f, tids, false);
    }
    if !on_block_device(dir.path()) {
        eprintln!(
            "{}: not on a block device, no block I/O to wait for",
            dir.path().display()
        );
        return (f, tids, false);
    }
    let req = Request::new(
        Strategy::Thread,
        pid,
        Group::Base.flag() | Group::Delay.flag(),
    );
    for _ in 0..BLKIO_ROUNDS {
        let now = delay_by_task(BackendKind::Procfs, &req);
        let idle: Vec<u32> = tids
            .iter()
            .copied()
            .filter(|t| now.get(t).is_none_or(|(_, d)| d.blkio_count == 0))
            .collect();
        if idle.is_empty() {
            return (f, tids, true);
        }
        for t in idle {
            let sig = if t == pid {
                libc::SIGUSR1
            } else {
                libc::SIGUSR2
            };
            // SAFETY: kill has no memory preconditions; `pid` is our living child.
            assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
            f.expect_line("again");
        }
    }
    eprintln!(
        "{}: {BLKIO_ROUNDS} rounds of fsync and O_DIRECT reads never made the fixture wait \
         (the device completes I/O before a task sleeps)",
        dir.path().display()
    );
    (f, tids, false)
}

/// How many rounds of block I/O [`blkio_fixture`] asks each task for at most.
const BLKIO_ROUNDS: usize = 20;

/// As root with delay accounting on, the procfs backend reads the delay-accounting pairs
/// through taskstats, and they are the BPF programs' (`task->delays`, per task: a process's
/// are its leader's, not its threads' sum): for every task in both dumps, per process and per
/// thread, each total and count of one backend lies between two reads of the other (both
/// ways round: they only grow). DELAY_F_COUNTERS: BPF's where the task has a
/// `task_delay_info`, procfs's where a pair is nonzero (taskstats answers zeros for a task
/// without one, created while delay accounting was off, whose pairs must then be 0 on both).
/// A fixture started with accounting on waited for block I/O ([`blkio_fixture`], where its
/// file system is on a block device) in its leader and in a second thread, so that its pairs
/// are not all 0 and the flag is set on both; its process's pairs are its leader's exactly (it
/// waits without running), not its threads' sum. Tasks that start, exit or have their id
/// reused between the reads are skipped.
#[test]
fn delay_counters_from_taskstats_lie_between_the_programs_reads() {
    let Some(_on) = DelayAccounting::on() else {
        eprintln!("no kernel.task_delayacct here: skipped");
        return;
    };
    let dir = TempDir::new("delay");
    let (f, tids, block) = blkio_fixture(&dir, true);
    let pid = f.pid();
    let show = Group::Base.flag() | Group::Delay.flag();
    let counters = |d: &taskdiag_proto::DelayRec| d.flags & taskdiag_proto::DELAY_F_COUNTERS != 0;
    let accounted = |d: &taskdiag_proto::DelayRec| d.named_pairs().iter().any(|&(_, v)| v != 0);
    for strategy in [Strategy::All, Strategy::AllThread] {
        let req = Request::new(strategy, 0, show);
        for (outer, inner) in [
            (BackendKind::Bpf, BackendKind::Procfs),
            (BackendKind::Procfs, BackendKind::Bpf),
        ] {
            let before = delay_by_task(outer, &req);
            let got = delay_by_task(inner, &req);
            let after = delay_by_task(outer, &req);
            let (mut compared, mut without) = (Vec::new(), 0);
            for (task, (start, d)) in &got {
                let (Some((sb, b)), Some((sa, a))) = (before.get(task), after.get(task)) else {
                    continue;
                };
                if sb != start || sa != start {
                    continue;
                }
                let what = format!("{strategy:?}, task {task}: {inner:?} read between {outer:?}'s");
                let (procfs, bpf) = match inner {
                    BackendKind::Procfs => (vec![d], vec![b, a]),
                    _ => (vec![b, a], vec![d]),
                };
                // procfs claims the pairs where taskstats shows something accounted (all zeros
                // is also what it answers for a task without task_delay_info).
                for p in &procfs {
                    assert_eq!(
                        counters(p),
                        accounted(p),
                        "{what}: procfs's flag: {b:?} / {d:?} / {a:?}"
                    );
                }
                // A task has its task_delay_info, or not, for its whole life.
                let by_bpf = counters(bpf[0]);
                assert!(
                    bpf.iter().all(|x| counters(x) == by_bpf),
                    "{what}: {b:?} / {d:?} / {a:?}"
                );
                for ((name, lo), ((_, mid), (_, hi))) in b
                    .named_pairs()
                    .into_iter()
                    .zip(d.named_pairs().into_iter().zip(a.named_pairs()))
                {
                    assert!(
                        lo <= mid && mid <= hi,
                        "{what}: {name} {mid} not within {lo}..={hi}\n  before: {b:?}\n  \
                         read:   {d:?}\n  after:  {a:?}"
                    );
                }
                if !by_bpf {
                    // Created while delay accounting was off: no task_delay_info, nothing to
                    // claim.
                    for p in &procfs {
                        assert!(
                            !counters(p),
                            "{what}: pairs for a task without task_delay_info: {p:?}"
                        );
                    }
                    without += 1;
                } else if procfs.iter().all(|p| counters(p)) {
                    compared.push(*task);
                }
            }
            let fixture: &[u32] = match strategy {
                Strategy::All => &[pid],
                _ => &tids,
            };
            // (Without a block I/O wait its pairs may all be 0, as for a task without them.)
            for t in fixture.iter().filter(|_| block) {
                assert!(
                    compared.contains(t),
                    "{strategy:?}: the fixture's task {t}, started with delay accounting on, \
                     waited for block I/O but has no pairs from both backends"
                );
            }
            eprintln!(
                "{strategy:?}, {inner:?} between {outer:?}: {} tasks with pairs from both, \
                 {without} without task_delay_info",
                compared.len()
            );
        }
        // The fixture's own numbers, once more (it waits without running).
        let procfs = delay_by_task(BackendKind::Procfs, &req);
        for t in match strategy {
            Strategy::All => vec![pid],
            _ => tids.clone(),
        } {
            let d = procfs[&t].1;
            eprintln!("{strategy:?}, fixture task {t}: {d:?}");
            if block {
                assert!(d.blkio_count > 0, "task {t} waited for no block I/O: {d:?}");
            }
        }
    }
    // A process's pairs are its leader's, not the sum with its second thread (which ran).
    let on_both = |kind| {
        let process = delay_by_task(kind, &Request::new(Strategy::All, 0, show))[&pid].1;
        let threads = delay_by_task(kind, &Request::new(Strategy::AllThread, 0, show));
        let (leader, second) = (threads[&tids[0]].1, threads[&tids[1]].1);
        assert_ne!(
            second.run_ns, 0,
            "{kind:?}: the second thread ran: {second:?}"
        );
        assert_eq!(process, leader, "{kind:?}: process {pid} is its leader");
    };
    on_both(BackendKind::Procfs);
    on_both(BackendKind::Bpf);
    drop(f);
}

/// Run by `delay_counters_stay_unread_for_an_unprivileged_caller` as an unprivileged user (a
/// no-op otherwise): prints `td-delay PID FLAGS PAIRS-SUM` for every process the procfs
/// backend gives it.
#[test]
#[ignore = "a helper: run by delay_counters_stay_unread_for_an_unprivileged_caller"]
fn delay_as_this_user() {
    if std::env::var_os("TD_DELAY_AS_USER").is_none() {
        return;
    }
    let req = Request::new(Strategy::All, 0, Group::Base.flag() | Group::Delay.flag());
    for (pid, (_, d)) in delay_by_task(BackendKind::Procfs, &req) {
        let sum: u64 = d.named_pairs().iter().map(|(_, v)| v).sum();
        println!("td-delay {pid} {} {sum}", d.flags);
    }
}

/// An unprivileged caller (no CAP_NET_ADMIN) gets DELAY from the procfs backend as before
/// taskstats: schedstat's numbers, the pairs 0 and DELAY_F_COUNTERS clear, no error; root, for
/// the same fixture (started with delay accounting on, after block I/O), gets the pairs.
#[test]
fn delay_counters_stay_unread_for_an_unprivileged_caller() {
    use taskdiag_test_support::users::{as_user, USER};
    // A fixture with pairs to read: started with delay accounting on, waiting for block I/O.
    let on = DelayAccounting::on();
    let dir = TempDir::new("delay-user");
    let (f, _, waited) = blkio_fixture(&dir, on.is_some());
    let req = Request::new(Strategy::All, 0, Group::Base.flag() | Group::Delay.flag());
    let as_root = delay_by_task(BackendKind::Procfs, &req)[&f.pid()].1;
    if waited {
        assert_ne!(
            as_root.flags & taskdiag_proto::DELAY_F_COUNTERS,
            0,
            "root read no pairs for the fixture: {as_root:?}"
        );
    }
    let out = taskdiag_test_support::process::output_within(
        as_user(USER, std::env::current_exe().expect("this test binary"))
            .args(["--exact", "delay_as_this_user", "--ignored", "--nocapture"])
            .env("TD_DELAY_AS_USER", "1"),
        std::time::Duration::from_secs(120),
    );
    let stdout = taskdiag_test_support::process::stdout(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        taskdiag_test_support::process::stderr(&out)
    );
    let mut seen = 0;
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("td-delay ") else {
            continue;
        };
        let v: Vec<u64> = rest
            .split(' ')
            .map(|x| x.parse().expect("number"))
            .collect();
        assert_eq!(v[1..], [0, 0], "{line}: pairs read without CAP_NET_ADMIN");
        seen += usize::from(v[0] == u64::from(f.pid()));
    }
    assert_eq!(
        seen, 1,
        "the fixture missing from the user's dump:\n{stdout}"
    );
    drop((f, on));
}

/// PATHS keeps each link's own answer: a working directory deeper than PATH_MAX, which
/// readlink refuses with ENAMETOOLONG, is that link's error, not the dump's, on both backends.
#[test]
fn a_path_longer_than_path_max_is_that_links_error() {
    let dir = TempDir::new("deep");
    let name = "d".repeat(250);
    // Relative mkdir and chdir (a shell's cd keeps $PWD, which cannot grow that long).
    let script = format!(
        "import os\nfor i in range(20):\n    os.mkdir('{name}')\n    os.chdir('{name}')\n\
         print('ready', flush=True)\nos.execvp('sleep', ['sleep', '1000'])\n"
    );
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &script])
        .current_dir(dir.path())
        .stdout(Stdio::piped());
    let mut f = Spawned::spawn_group(&mut cmd);
    f.expect_line("ready");
    let pid = f.pid();
    taskdiag_test_support::process::wait_exec(pid, "sleep");
    let err = std::fs::read_link(format!("/proc/{pid}/cwd")).expect_err("too long");
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    let show = Group::Base.flag() | Group::Paths.flag();
    let all = assert_agree(Request::new(Strategy::All, 0, show), &[pid]);
    let p = all[&pid].paths.as_ref().expect("paths");
    assert_eq!(p.cwd, Err(libc::ENAMETOOLONG as u8));
    assert!(
        p.exe.as_ref().is_ok_and(|e| e.ends_with(b"/sleep")),
        "{p:?}"
    );
    drop(f);
}

/// KSTACK as the task program writes it, against /proc/PID/stack read before and after the walk
/// (a task whose stack changed meanwhile is skipped: it woke), per process and per thread.
/// Among them fixtures that wait throughout in known places (nanosleep, pause()), a zombie
/// (no stack), and kernel threads; every fixture must be compared, and most other tasks too.
#[test]
fn the_programs_kstack_agrees_with_proc() {
    let show = Group::Base.flag() | Group::Kstack.flag();
    let Some(mut it) = programs_writing(Group::Kstack) else {
        return;
    };
    let pinned = spawn(&["sched"], None);
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo ready; exec sleep 1000"])
        .stdout(Stdio::piped());
    let mut sleeper = Spawned::spawn_group(&mut cmd);
    sleeper.expect_line("ready");
    taskdiag_test_support::process::wait_exec(sleeper.pid(), "sleep");
    let mut zombie = Command::new("sleep").arg("1000").spawn().expect("sleep");
    let zpid = zombie.id();
    zombie.kill().expect("kill");
    let fixtures = [pinned.pid(), sleeper.pid(), zpid];
    let stack = |dir: &str| std::fs::read(format!("{dir}/stack")).ok();
    // Waiting where they stay: a stack that reads the same twice, some time apart.
    for pid in &fixtures {
        for tid in threads_of(*pid) {
            let dir = format!("/proc/{pid}/task/{tid}");
            taskdiag_test_support::process::wait_for("the fixtures to settle", || {
                let s = stack(&dir);
                std::thread::sleep(std::time::Duration::from_millis(20));
                s.is_some() && s == stack(&dir)
            });
        }
    }
    let mut checked = BTreeMap::new();
    let (mut same, mut total) = (0, 0);
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    for threads in [false, true] {
        for (t, b, a) in around_walk(&mut it, threads, show, stack) {
            let (b, a) = (&b, &a);
            let fixture = fixtures.contains(&t.tgid);
            if a != b || t.pid == me {
                assert!(!fixture, "fixture {} changed its stack", t.pid);
                continue;
            }
            total += 1;
            let ours = t
                .kstack
                .as_ref()
                .unwrap_or_else(|| panic!("task {}: no kstack: {:?}", t.pid, t.errors));
            if ours == b {
                same += 1;
            } else {
                // A task of the system that woke and slept again in the same place between
                // the reads: only the fixtures must agree.
                assert!(
                    !fixture,
                    "task {} (threads: {threads}): {:?}, /proc {:?}",
                    t.pid,
                    String::from_utf8_lossy(ours),
                    String::from_utf8_lossy(b)
                );
                continue;
            }
            if fixture {
                *checked.entry((t.pid, threads)).or_insert(0) += 1;
            }
        }
    }
    // Every fixture task, per process and per thread (the pinned fixture has two threads).
    assert_eq!(checked.len(), 2 * fixtures.len() + 1, "{checked:?}");
    assert!(same * 10 >= total * 9, "{same} of {total} stacks agree");
    let sleeping = std::fs::read(format!("/proc/{}/stack", sleeper.pid())).expect("stack");
    assert!(!sleeping.is_empty(), "a sleeping task shows its stack");
    zombie.wait().expect("reap");
    drop((pinned, sleeper));
}
