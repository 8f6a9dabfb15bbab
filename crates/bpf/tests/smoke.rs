//! Loads the programs and checks that a dump decodes (needs root; see crates/taskdiag/tests for
//! the differential tests against /proc).
use taskdiag_bpf::TaskIter;
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::TaskAssembler;
use taskdiag_proto::{Request, Strategy, SHOW_SUPPORTED};

#[test]
fn all_processes_decode() {
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

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (major, minor)
}

/// A program that fails to verify is not an error (the library answers from /proc instead), so
/// only this says whether every program loads where the kernel has what it needs.
#[test]
fn every_program_loads_where_the_kernel_supports_it() {
    let it = TaskIter::load().expect("load (run as root)");
    let f = it.features();
    // Sleepable task iterators with bpf_copy_from_user_task: 5.18.
    assert_eq!(f.cmdline, kernel_at_least(5, 18), "{f:?}");
    // Task iterator link parameters: 6.1.
    assert_eq!(f.task_params, kernel_at_least(6, 1), "{f:?}");
    assert!(f.ringbuf, "{f:?}");
    // CO-RE against the reduced kernel BTF, wherever the kernel has BTF.
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    assert_eq!(f.reduced_btf, btf, "{f:?}");
    assert!(it.has_vma() || !kernel_at_least(5, 12));
}
