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
