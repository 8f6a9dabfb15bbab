//! Programs shared between processes through bpffs: reused by root's later processes, never
//! mixing two processes' answers, and out of reach of a user who could not load them.

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};

use super::*;

/// The slot a root `dump -b bpf -s` used, from its summary line.
fn pinned_slot(o: &Output) -> Option<String> {
    let line = stderr(o);
    let at = line.find("pinned at ")? + "pinned at ".len();
    Some(line[at..].trim().to_string())
}

#[test]
fn a_second_process_reuses_the_programs_the_first_pinned() {
    let me = std::process::id().to_string();
    let args = ["dump", "--backend", "bpf", "--pid", &me, "-s", "-f", "json"];
    let first = run(&args);
    assert!(first.status.success(), "{}", stderr(&first));
    let slot = pinned_slot(&first).unwrap_or_else(|| panic!("not shared: {}", stderr(&first)));
    assert!(slot.starts_with("/sys/fs/bpf/taskdiag/"), "{slot}");
    // The second finds them (in whichever slot is free) and answers the same.
    let second = run(&args);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(pinned_slot(&second).is_some(), "{}", stderr(&second));
    let (a, b) = (json_lines(&first), json_lines(&second));
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["pid"], b[0]["pid"]);
    assert_eq!(a[0]["cred"], b[0]["cred"]);
    // Shared or not, the same answer: a process that loads its own.
    let own = Command::new(BIN)
        .args(args)
        .env("TASKDIAG_BPF_PIN", "0")
        .output()
        .expect("run taskdiag");
    assert!(own.status.success(), "{}", stderr(&own));
    assert_eq!(pinned_slot(&own), None, "{}", stderr(&own));
    assert_eq!(json_lines(&own)[0]["cred"], a[0]["cred"]);
}

#[test]
fn an_unprivileged_user_cannot_reach_the_pinned_programs() {
    let me = std::process::id().to_string();
    let o = run(&["dump", "--backend", "bpf", "--pid", &me, "-s"]);
    let slot = pinned_slot(&o).unwrap_or_else(|| panic!("not shared: {}", stderr(&o)));
    // Not through taskdiag (it does not try), and not by opening the pins (bpffs checks the
    // directories' permissions: root's, 0700).
    let o = run_as_user(&["dump", "--backend", "bpf"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let probe = "import os, sys\n\
         for p in [sys.argv[1], sys.argv[1] + '/dump_task', '/sys/fs/bpf/taskdiag']:\n\
         \x20   try:\n\
         \x20       os.open(p, os.O_RDONLY)\n\
         \x20       print('opened', p)\n\
         \x20   except PermissionError:\n\
         \x20       print('refused', p)\n";
    let o = as_test_user(taskdiag_test_support::python::PYTHON)
        .args(["-c", probe, &slot])
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.matches("refused").count(), 3, "{out}");
}

#[test]
fn concurrent_processes_each_get_their_own_whole_answer() {
    // Five sleepers with distinct command lines, and more concurrent readers than slots.
    let sleepers: Vec<Spawned> = (0..5)
        .map(|i| Spawned::spawn(Command::new("sleep").arg(format!("{}", 3000 + i))))
        .collect();
    for s in &sleepers {
        let p = s.pid();
        taskdiag_test_support::process::wait_for("sleep to exec", || {
            tasks::comm(p).as_deref() == Some("sleep")
        });
    }
    let want: BTreeMap<u32, String> = sleepers
        .iter()
        .enumerate()
        .map(|(i, s)| (s.pid(), format!("sleep {}", 3000 + i)))
        .collect();
    let readers: Vec<_> = (0..10)
        .map(|_| {
            Command::new(BIN)
                .args([
                    "dump",
                    "--backend",
                    "bpf",
                    "--groups",
                    "base,cmdline",
                    "-f",
                    "json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn taskdiag")
        })
        .collect();
    for r in readers {
        let o = r.wait_with_output().expect("wait");
        assert!(o.status.success(), "{}", stderr(&o));
        let lines = json_lines(&o);
        let mut seen = HashSet::new();
        for t in &lines {
            let pid = t["pid"].as_u64().expect("pid") as u32;
            assert!(seen.insert(pid), "pid {pid} twice in one answer");
            if let Some(cmd) = want.get(&pid) {
                let argv: Vec<&str> = t["cmdline"]
                    .as_array()
                    .expect("cmdline")
                    .iter()
                    .map(|a| a.as_str().expect("utf-8"))
                    .collect();
                assert_eq!(argv.join(" "), *cmd, "pid {pid}");
            }
        }
        for p in want.keys() {
            assert!(seen.contains(p), "sleeper {p} missing from an answer");
        }
    }
}

#[test]
fn auto_without_shared_programs_reads_proc_on_a_small_host_and_says_why() {
    let me = std::process::id().to_string();
    let o = Command::new(BIN)
        .args(["dump", "--pid", &me, "-s", "-f", "json"])
        .env("TASKDIAG_BPF_PIN", "0")
        .env("TASKDIAG_SOCKET", "/nonexistent/taskdiagd.sock")
        .output()
        .expect("run taskdiag");
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stderr(&o);
    let tasks = taskdiag_procfs::host_tasks().expect("tasks in /proc/loadavg");
    // A few tasks either way of the threshold can change between the two reads.
    let limit = taskdiag::AUTO_PROCFS_BELOW;
    if tasks + 50 < limit {
        assert!(line.contains("via procfs"), "{line}");
        assert!(
            line.contains("reading /proc costs less than loading the programs"),
            "{line}"
        );
    } else if tasks > limit + 50 {
        assert!(line.contains("via bpf"), "{line}");
    }
    // Whichever answered, the answer is this process.
    assert_eq!(json_lines(&o)[0]["pid"], std::process::id());
}
