//! CO-RE against the reduced copy of the kernel's BTF (btf_min.rs) gives the same programs as
//! against the whole BTF: the same records for the same tasks, loaded either way (needs root).
//!
//! One test in its own binary: it switches the load mode with TASKDIAG_BPF_FULL_BTF, which
//! would race with other tests in the same process.
use std::process::{Child, Command};

use taskdiag_bpf::{Features, TaskIter};
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::{Task, TaskAssembler};
use taskdiag_proto::{Request, Strategy, SHOW_SUPPORTED};

struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What loaded, every group of task `pid`, and its memory-map pieces (where the kernel has
/// the map program), from a fresh load.
fn snapshot(pid: u32) -> (Features, Task, Vec<u8>) {
    let mut it = TaskIter::load().expect("load (run as root)");
    let mut buf = Vec::new();
    it.dump(
        &Request::new(Strategy::One, pid, SHOW_SUPPORTED),
        &mut |b| {
            buf.extend_from_slice(b);
            Ok(())
        },
    )
    .expect("dump");
    let mut asm = TaskAssembler::new();
    let task = Messages::new(&buf)
        .find_map(|m| asm.push(&m.expect("message")).expect("task"))
        .expect("the task");
    let mut maps = Vec::new();
    if it.has_vma() {
        it.dump_vmas(Some(pid), &mut |b| {
            maps.extend_from_slice(b);
            Ok(())
        })
        .expect("map walk");
    }
    (it.features(), task, maps)
}

#[test]
fn reduced_and_whole_kernel_btf_give_the_same_records() {
    let s = Sleeper(Command::new("sleep").arg("1000").spawn().unwrap());
    let pid = s.0.id();
    std::thread::sleep(std::time::Duration::from_millis(100));

    let it = TaskIter::load().unwrap();
    assert!(
        it.features().reduced_btf,
        "the reduced BTF was not used: {:?}",
        it.features()
    );
    drop(it);
    let (features, reduced, reduced_maps) = snapshot(pid);
    std::env::set_var("TASKDIAG_BPF_FULL_BTF", "1");
    let (whole_features, whole, whole_maps) = snapshot(pid);
    std::env::remove_var("TASKDIAG_BPF_FULL_BTF");

    // The same programs load either way.
    assert!(!whole_features.reduced_btf);
    assert_eq!(
        Features {
            reduced_btf: false,
            ..features
        },
        whole_features
    );
    assert_eq!(reduced.pid, pid);
    assert!(reduced.base.is_some() && reduced.cred.is_some() && reduced.stat.is_some());
    assert!(reduced.statm.is_some());
    assert_eq!(reduced.cmdline.is_some(), features.cmdline);
    assert_eq!(reduced, whole);
    assert_eq!(!reduced_maps.is_empty(), features.maps);
    assert_eq!(reduced_maps, whole_maps);
}
