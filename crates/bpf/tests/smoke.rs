//! Loads the programs and checks that a dump decodes (needs root; see crates/taskdiag/tests for
//! the differential tests against /proc).
use taskdiag_bpf::{TaskFlavour, TaskIter};
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::TaskAssembler;
use taskdiag_proto::{Group, Request, Strategy, SHOW_SUPPORTED};
use taskdiag_test_support::process::Spawned;
use taskdiag_test_support::tasks::kernel_at_least;

/// Held by every test of this file while it has programs loaded: one of them counts the
/// process's BPF mappings (/proc/self/maps is the whole process's), which another test's walk,
/// run in parallel, would add to.
static LOADED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    LOADED.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn all_processes_decode() {
    let _serial = serial();
    let mut it = TaskIter::load().expect("load (run as root)");
    let mut buf = Vec::new();
    let rep = it
        .dump(&Request::new(Strategy::All, 0, SHOW_SUPPORTED), &mut |b| {
            buf.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
    let mut asm = TaskAssembler::new();
    let tasks: Vec<_> = Messages::new(&buf)
        .filter_map(|m| asm.push(&m.unwrap()).unwrap())
        .collect();
    assert_eq!(tasks.len() as u64, rep.tasks);
    let me = tasks
        .iter()
        .find(|t| t.pid == std::process::id())
        .expect("self");
    eprintln!(
        "{me:#?}\nfeatures {:?} report {rep:?} n={}",
        it.features(),
        tasks.len()
    );
    for t in tasks.iter().take(3) {
        eprintln!("{t:?}");
    }
}

/// A program that fails to verify is not an error (its groups come from /proc instead), so only
/// this says whether every program loads where the kernel has what it needs.
#[test]
fn every_program_loads_where_the_kernel_supports_it() {
    let _serial = serial();
    let it = TaskIter::load().expect("load (run as root)");
    let f = it.features();
    // The modern task program needs bpf_loop() (5.17) and bpf_map_lookup_percpu_elem() (5.19);
    // before, its bounded flavour (any kernel with iter/task).
    let want = if kernel_at_least(5, 19) {
        TaskFlavour::Loop
    } else {
        TaskFlavour::Bounded
    };
    assert_eq!(f.task, want, "{f:?}");
    // Sleepable task iterators with bpf_copy_from_user_task: 5.18.
    assert_eq!(f.cmdline, kernel_at_least(5, 18), "{f:?}");
    // iter/task_vma, and bpf_d_path() in iterators: 5.12.
    assert_eq!(f.maps, kernel_at_least(5, 12), "{f:?}");
    assert_eq!(it.has_vma(), f.maps);
    // dump_vma names files with bpf_d_path(); only where the verifier refuses it that way (a
    // mapping's file an untrusted pointer to it: docs/KERNELS.md) may the walk that names them
    // by probe reads stand in. Any other refusal is a program that stopped loading, and fails
    // here with the verifier's words.
    let refused = taskdiag_bpf::refusals();
    if f.vma_walk {
        let why = refused.iter().find(|r| r.program == "dump_vma");
        assert!(
            why.is_some_and(|r| r.reason.contains("untrusted_ptr_")),
            "dump_vma refused for another reason than its file pointer: {refused:?}"
        );
        eprintln!("dump_vma refused here, dump_vma_walk loaded: {why:?}");
    }
    // From 5.19 every program loads (before, the ones newer helpers need are refused, above).
    if kernel_at_least(5, 19) {
        assert!(
            refused
                .iter()
                .all(|r| f.vma_walk && r.program == "dump_vma"),
            "programs this kernel refuses: {refused:?}"
        );
    }
    // Task iterator link parameters (a walk for one task shows that task alone): 6.1.
    assert_eq!(f.task_params, kernel_at_least(6, 1), "{f:?}");
    assert!(f.ringbuf, "{f:?}");
    // CO-RE against the reduced kernel BTF, wherever the kernel has BTF.
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    assert_eq!(f.reduced_btf, btf, "{f:?}");
    // dump_task_both (ALL_WITH_THREADS in one walk): only on request, with the loop flavour.
    assert!(!f.both, "{f:?}");
    drop(it);
    let both = TaskIter::load_with_threads(SHOW_SUPPORTED).expect("load with threads");
    let f = both.features();
    assert_eq!(f.both, f.task == TaskFlavour::Loop, "{f:?}");
}

/// What a load did not ask for is not loaded, and a rejected or missing group is reported as
/// missing for the caller to fill.
#[test]
fn groups_not_loaded_are_reported_missing() {
    let _serial = serial();
    let it = TaskIter::load_for(Group::Base.flag() | Group::Cred.flag()).expect("load");
    let f = it.features();
    assert!(!f.cmdline && !f.maps && !it.has_vma(), "{f:?}");
    assert_eq!(
        it.missing_groups(Group::Base.flag() | Group::Cmdline.flag()),
        Group::Cmdline.flag()
    );
    let all = TaskIter::load().expect("load");
    let user_memory = if all.features().cmdline {
        0
    } else {
        Group::Cmdline.flag() | Group::Environ.flag()
    };
    // SECURITY with labels (the default), PATHS, KSTACK, SCHED and WCHAN in the bounded
    // flavour, and SCHED and WCHAN where the scheduler's text was not found: read from /proc
    // by the library.
    let mut from_proc = Group::Security.flag();
    if all.features().task == TaskFlavour::Bounded {
        from_proc |= Group::Paths.flag() | Group::Kstack.flag();
    }
    if !all.features().sched {
        assert!(
            all.features().task == TaskFlavour::Bounded || !may_find_kernel_symbols(),
            "{:?}",
            all.features()
        );
        from_proc |= Group::Sched.flag() | Group::Wchan.flag();
    }
    assert_eq!(
        all.missing_groups(SHOW_SUPPORTED) & !taskdiag_proto::SHOW_MAPS,
        user_memory | from_proc
    );
    // SECURITY where no security module gives labels (else the labels come from /proc).
    let mut unlabelled = TaskIter::load().expect("load");
    unlabelled.set_lsm_labels(false);
    assert_eq!(
        unlabelled.missing_groups(SHOW_SUPPORTED) & Group::Security.flag(),
        0
    );
    // On a system with cgroup v1 hierarchies only the modern flavour writes CGROUP.
    let mut hybrid = TaskIter::load().expect("load");
    hybrid.set_cgroup_hierarchies(true, true);
    let bounded = hybrid.features().task == TaskFlavour::Bounded;
    assert_eq!(
        hybrid.missing_groups(SHOW_SUPPORTED) & Group::Cgroup.flag() != 0,
        bounded
    );
}

/// The change tracker marks a task that runs, and not one that sleeps through the interval.
/// (It loads wherever BTF tracepoints exist, 5.5+: every kernel taskdiag supports.)
#[test]
fn tracker_marks_tasks_that_ran_and_not_those_that_slept() {
    let _serial = serial();
    use std::process::Command;
    let mut t = taskdiag_bpf::Tracker::start().expect("start the tracker (run as root)");
    let mut sleeper = Command::new("sleep").arg("1000").spawn().expect("sleep");
    let sleeper_pid = sleeper.id();
    // Until the sleeper has gone to sleep (its state in /proc is S).
    while !std::fs::read_to_string(format!("/proc/{sleeper_pid}/stat"))
        .unwrap_or_default()
        .contains(") S ")
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let first = t.take().expect("take");
    assert!(first.complete);
    assert!(
        first.tasks.contains(&(sleeper_pid, sleeper_pid)),
        "a new task is marked: {:?}",
        first.tasks
    );
    // A process that starts and exits between two looks is marked; the sleeper is not.
    let mut brief = Command::new("true").spawn().expect("true");
    let brief_pid = brief.id();
    assert!(brief.wait().expect("wait").success());
    let second = t.take().expect("take");
    assert!(
        second.tasks.contains(&(brief_pid, brief_pid)),
        "{brief_pid} ran: {:?}",
        second.tasks
    );
    let me = std::process::id();
    assert!(second.complete);
    assert!(
        !second.tasks.iter().any(|&(tid, _)| tid == sleeper_pid),
        "{sleeper_pid} slept: {:?}",
        second.tasks
    );
    // This process ran (it forked `true` and waited for it).
    assert!(second.tasks.iter().any(|&(_, tgid)| tgid == me));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // Its death is a change.
    let third = t.take().expect("take");
    assert!(
        third.tasks.contains(&(sleeper_pid, sleeper_pid)),
        "{:?}",
        third.tasks
    );
}

/// The task program for every group verifies without the verifier walking each combination
/// of groups separately: a load-time regression (6x, when a test of the requested groups
/// stopped the paths from merging) shows here as a count, independent of the machine's speed.
#[test]
fn the_task_program_verifies_in_linear_work() {
    let _serial = serial();
    let it = TaskIter::load().expect("load (run as root)");
    // verified_insns is reported from 5.16 on.
    let Some(n) = it.task_verified_insns() else {
        eprintln!("the kernel does not report verified_insns");
        return;
    };
    eprintln!(
        "dump task program ({:?}): {n} instructions verified",
        it.features().task
    );
    // 75,238 on 6.18 and 100,619 on 6.1 with every group to KSTACK; 57,856 on 6.18 and
    // 80,706 on 6.1 with FILES and NS (NS's levels a global function: inline they cost 6.1's
    // verifier 120,000 more); 30,491 on 6.18 with SIGNAL, 20,271 before it; 137,690 on 6.18
    // with the regression this test was written for (6.8x the program of then: today's would
    // walk some 500,000); 96,140 on 6.18 and 101,514 on 6.1 with every group to WCHAN
    // (2026-11-28; a test of the strategy that split the program by strategy made it 162,428
    // on 6.1).
    assert!(n < 150_000, "{n} instructions verified");
}

/// Whether kallsyms shows this process addresses (root, kptr_restrict below 2): what SCHED's
/// wchan needs to find the scheduler's text.
fn may_find_kernel_symbols() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/kptr_restrict").is_ok_and(|v| v.trim() != "2")
}

/// A whole-system walk expected to be small reads the iterator's seq file; one expected to be
/// large maps the ring buffer while it runs (seen from the sink, as the program sets' mappings
/// of /proc/self/maps). Both answer the same tasks, in pid order.
#[test]
fn small_walks_read_the_seq_file_and_large_ones_the_ring() {
    let _serial = serial();
    if std::env::var_os("TASKDIAG_BPF_RINGBUF_SIZE").is_some() {
        return; // which keeps every walk on the ring
    }
    let bpf_maps = || {
        std::fs::read_to_string("/proc/self/maps")
            .expect("/proc/self/maps")
            .lines()
            .filter(|l| l.contains("bpf-map"))
            .count()
    };
    let walk = |expect: u64| {
        let mut it = TaskIter::load().expect("load (run as root)");
        if !it.features().ringbuf {
            return None;
        }
        it.expect_tasks(expect);
        let (mut buf, mut mapped) = (Vec::new(), 0);
        let req = Request::new(Strategy::All, 0, Group::Base.flag());
        it.dump(&req, &mut |b| {
            mapped = mapped.max(bpf_maps());
            buf.extend_from_slice(b);
            Ok(())
        })
        .expect("dump");
        let mut asm = TaskAssembler::new();
        let pids: Vec<u32> = Messages::new(&buf)
            .filter_map(|m| asm.push(&m.expect("a message")).expect("a task"))
            .map(|t| t.pid)
            .collect();
        Some((mapped, pids))
    };
    let Some((seq_maps, seq_pids)) = walk(1) else {
        return; // no ring buffer on this kernel: every walk reads the seq file
    };
    let (ring_maps, ring_pids) = walk(1 << 40).expect("the same kernel");
    assert!(
        ring_maps > seq_maps,
        "the ring is mapped only for the large walk: {ring_maps} against {seq_maps} mappings"
    );
    for pids in [&seq_pids, &ring_pids] {
        assert!(pids.windows(2).all(|w| w[0] < w[1]), "pid order");
        assert!(pids.contains(&std::process::id()));
    }
    // Tasks that live through both walks are in both (the test's own threads, at least).
    let me = std::process::id();
    assert_eq!(
        seq_pids.iter().filter(|&&p| p == me).count(),
        ring_pids.iter().filter(|&&p| p == me).count()
    );
}

/// A walk on the ring hands its records over in pieces of at most 256 KiB and a message (not
/// the ring's 4 MiB at once), whole messages in pid order; a sink that fails ends the walk at
/// once with its error, and the next walk of the same programs hands on none of what it left
/// in the ring (taskdiagd's next client got a vanished client's records first, out of pid
/// order, at 150,000 tasks).
#[test]
fn the_ring_is_passed_on_in_pieces_and_a_failing_sink_ends_the_walk() {
    let _serial = serial();
    const PIECE: usize = 256 << 10;
    // 32 processes with 12 KiB of environment each: more than a piece of ENVIRON.
    let env = "x".repeat(12 << 10);
    let kids: Vec<Spawned> = (0..32)
        .map(|_| {
            Spawned::spawn(
                std::process::Command::new("sleep")
                    .arg("60")
                    .env("TASKDIAG_SMOKE_PAD", &env),
            )
        })
        .collect();
    let mut it = TaskIter::load().expect("load (run as root)");
    it.expect_tasks(1 << 40);
    let mut walk = |fail_at: Option<usize>| {
        if !it.features().ringbuf || !it.features().cmdline {
            return None;
        }
        let (mut buf, mut sizes) = (Vec::new(), Vec::new());
        let req = Request::new(Strategy::All, 0, Group::Base.flag() | Group::Environ.flag());
        let r = it.dump(&req, &mut |b| {
            sizes.push(b.len());
            if fail_at == Some(sizes.len()) {
                return Err(std::io::Error::other("the sink failed"));
            }
            buf.extend_from_slice(b);
            Ok(())
        });
        Some((r, buf, sizes))
    };
    let whole = walk(None);
    let failed = walk(Some(1));
    let after = walk(None);
    let ids: Vec<u32> = kids.iter().map(Spawned::pid).collect();
    drop(kids);
    let Some((r, buf, sizes)) = whole else {
        return; // no ring buffer (or no ENVIRON) on this kernel
    };
    r.expect("dump");
    assert!(sizes.len() > 1, "{} bytes in one piece", buf.len());
    assert!(
        sizes.iter().all(|&n| n <= PIECE + taskdiag_proto::MSG_MAX),
        "pieces {sizes:?}"
    );
    let mut asm = TaskAssembler::new();
    let pids: Vec<u32> = Messages::new(&buf)
        .filter_map(|m| asm.push(&m.expect("whole messages")).expect("a task"))
        .map(|t| t.pid)
        .collect();
    assert!(pids.windows(2).all(|w| w[0] < w[1]), "pid order");
    assert!(ids.iter().all(|id| pids.contains(id)));
    let (r, _, sizes) = failed.expect("the same kernel");
    assert!(matches!(r, Err(taskdiag_bpf::BpfError::Sink(_))), "{r:?}");
    assert_eq!(sizes.len(), 1, "the walk went on after its sink failed");
    let (r, buf, _) = after.expect("the same kernel");
    r.expect("the walk after the failed one");
    let mut asm = TaskAssembler::new();
    let next: Vec<u32> = Messages::new(&buf)
        .filter_map(|m| asm.push(&m.expect("whole messages")).expect("a task"))
        .map(|t| t.pid)
        .collect();
    assert!(
        next.windows(2).all(|w| w[0] < w[1]),
        "the walk after a failed one is not in pid order (another walk's records first): \
         {:?}",
        &next[..next.len().min(40)]
    );
    assert!(ids.iter().all(|id| next.contains(id)));
}
