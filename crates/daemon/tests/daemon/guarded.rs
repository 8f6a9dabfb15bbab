//! Fields /proc guards with ptrace-read, field by field, through the daemon: for the same
//! unprivileged user, each must show what that user's /proc shows (read here by the procfs
//! backend as that user) for its own process, another user's and its own non-dumpable one.

use std::process::Command;

use crate::harness::*;

/// The `group` objects of `pids` in a JSON dump (`stdout`), by pid.
fn pick(stdout: &[u8], group: &str, pids: &[u32]) -> Vec<Option<serde_json::Value>> {
    let mut got = vec![None; pids.len()];
    for line in stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("json");
        let pid = v["pid"].as_u64().expect("pid") as u32;
        if let Some(i) = pids.iter().position(|&p| p == pid) {
            got[i] = Some(v[group].clone());
        }
    }
    got
}

/// The `group` objects of `pids` in a JSON dump as `user` with `args`, by pid.
fn group_of(
    user: &str,
    args: &[String],
    group: &str,
    pids: &[u32],
) -> Vec<Option<serde_json::Value>> {
    let mut c = as_user(user, cli());
    c.args(args);
    let o = output(&mut c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    pick(&o.stdout, group, pids)
}

/// A daemon and three processes ([`WHO`]): the user's own, another user's, the user's own
/// non-dumpable one.
struct Three {
    d: Daemon,
    _kids: [Spawned; 3],
    pids: Vec<u32>,
}

impl Three {
    fn start() -> Three {
        let d = Daemon::start(&[]);
        let kids = [
            user_sleeper(USER, false),
            user_sleeper(OTHER, false),
            user_sleeper(USER, true),
        ];
        let pids = kids.iter().map(|k| k.pid()).collect();
        Three {
            d,
            _kids: kids,
            pids,
        }
    }

    /// The `group` object of each as USER gets it from its own /proc (the procfs backend).
    fn procfs(&self, group: &str) -> Vec<serde_json::Value> {
        let args = [
            "dump", "-b", "procfs", "--groups", group, "--format", "json",
        ];
        let args: Vec<String> = args.map(String::from).to_vec();
        take(group_of(USER, &args, group, &self.pids))
    }
}

/// Each of [`WHO`]'s objects, which must be there.
fn take(v: Vec<Option<serde_json::Value>>) -> Vec<serde_json::Value> {
    v.into_iter()
        .zip(WHO)
        .map(|(g, what)| g.unwrap_or_else(|| panic!("{what}: no task")))
        .collect()
}

/// [`Three`]'s processes and the `group` object of each as `USER` gets it through the daemon
/// and through its own /proc.
fn through_both(group: &str) -> (Vec<u32>, Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let three = Three::start();
    let flags = ["--groups", group, "--format", "json"];
    let daemon = take(group_of(
        USER,
        &three.d.dump_args(&flags),
        group,
        &three.pids,
    ));
    let procfs = three.procfs(group);
    (three.pids.clone(), daemon, procfs)
}

/// What each of [`through_both`]'s processes is.
const WHO: [&str; 3] = ["own", "another user's", "own non-dumpable"];

#[test]
fn namespace_links_follow_ptrace_read_like_proc() {
    let (pids, daemon, procfs) = through_both("ns");
    for (i, what) in WHO.iter().enumerate() {
        let ns = &daemon[i];
        assert_eq!(ns, &procfs[i], "{what} process {}", pids[i]);
        // Only the own, dumpable process's links are readable; the ids always are.
        assert_eq!(ns["hidden"], serde_json::json!(i != 0), "{what}: {ns}");
        assert_eq!(ns["net"].is_u64(), i == 0, "{what}: {ns}");
        assert_eq!(ns["nspid"], serde_json::json!([pids[i]]), "{what}: {ns}");
    }
}

#[test]
fn code_and_stack_addresses_follow_ptrace_read_like_proc() {
    let (pids, daemon, procfs) = through_both("statm");
    let fields = ["code_start", "code_end", "stack_start"];
    for (i, what) in WHO.iter().enumerate() {
        let m = &daemon[i];
        for f in fields {
            assert_eq!(m[f], procfs[i][f], "{what} process {}: {f}", pids[i]);
        }
        // /proc's stand-ins for a reader that may not ptrace-read: 1, 1, 0.
        let withheld = [1, 1, 0].map(serde_json::Value::from);
        let got = fields.map(|f| m[f].clone());
        assert_eq!(got == withheld, i != 0, "{what}: {m}");
    }
}

#[test]
fn descriptor_counts_follow_ptrace_read_like_proc() {
    let (pids, daemon, procfs) = through_both("files");
    for (i, what) in WHO.iter().enumerate() {
        let f = &daemon[i];
        // The same object: the count where /proc/PID/fd can be listed, the limits always.
        assert_eq!(f, &procfs[i], "{what} process {}", pids[i]);
        assert_eq!(f["fds_hidden"], serde_json::json!(i != 0), "{what}: {f}");
        assert!(f["nofile_soft"].is_u64(), "{what}: {f}");
    }
}

#[test]
fn cgroup_is_shown_as_the_users_proc_shows_it() {
    let (pids, daemon, procfs) = through_both("cgroup");
    for (i, what) in WHO.iter().enumerate() {
        // Not guarded: every process's cgroup file is readable.
        assert_eq!(daemon[i], procfs[i], "{what} process {}", pids[i]);
        assert!(daemon[i]["lines"].as_array().is_some_and(|l| !l.is_empty()));
    }
}

/// IO, PATHS, ENVIRON, SCHED, SECURITY, KSTACK and WCHAN come from files /proc guards per reader: the daemon
/// serves them from its programs under the same rules, and leaves a task's to the caller's own
/// /proc where its programs could not write them (the client library reads them there). Either
/// way each shows exactly what the user's /proc shows.
#[test]
fn guarded_groups_through_the_daemon_are_the_callers_proc() {
    for group in [
        "io", "paths", "environ", "sched", "security", "kstack", "wchan",
    ] {
        let (pids, daemon, procfs) = through_both(group);
        for (i, what) in WHO.iter().enumerate() {
            assert_eq!(daemon[i], procfs[i], "{what} process {}: {group}", pids[i]);
        }
        // The user's own, dumpable process shows them; the others' are refused, as the files.
        match group {
            "io" => assert!(daemon[0]["rchar"].is_u64(), "{:?}", daemon[0]),
            "paths" => {
                assert!(daemon[0]["exe"].is_string(), "{:?}", daemon[0]);
                for d in &daemon[1..] {
                    assert!(d["exe_error"].is_string(), "{d:?}");
                }
            }
            // The own process's wchan is as its /proc shows it, compared above (a function;
            // "0" for every task on 5.10, whose x86 get_wchan() needs frame pointers, which
            // Debian's kernels do without); the others' are withheld.
            "sched" => {
                for d in &daemon[1..] {
                    assert_eq!(d["wchan"], "0", "{d:?}");
                    assert_eq!(d["syscall_hidden"], true, "{d:?}");
                }
            }
            // SCHED's wchan alone: the same rule.
            "wchan" => {
                assert!(daemon[0].is_string(), "{:?}", daemon[0]);
                for d in &daemon[1..] {
                    assert_eq!(d, "0", "{d:?}");
                }
            }
            "security" => assert!(daemon.iter().all(|d| d.is_object()), "{daemon:?}"),
            // The kernel stack only to CAP_SYS_ADMIN, not even the user's own.
            "kstack" => assert!(daemon.iter().all(|d| d.is_null()), "{daemon:?}"),
            _ => assert!(daemon[0].is_array(), "{:?}", daemon[0]),
        }
        if group == "io" || group == "environ" {
            for d in &daemon[1..] {
                assert!(d.is_null(), "{group}: {d:?}");
            }
        }
    }
}

/// Whether the kernel's programs write `group` for process `pid` (as root: the BPF backend's
/// summary names the groups it completed from /proc).
fn programs_write(group: &str, pid: u32) -> bool {
    let o = output(Command::new(cli()).args([
        "dump",
        "-b",
        "bpf",
        "-s",
        "-g",
        group,
        "--pid",
        &pid.to_string(),
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    !String::from_utf8_lossy(&o.stderr).contains(&format!("from /proc: {group}"))
}

/// Where the programs write the guarded groups, the daemon serves them itself: a client whose
/// /proc is hidden (an empty file system over it, in a mount namespace of its own), which could
/// complete nothing, still gets them, equal to what its /proc shows it when not hidden.
#[test]
fn guarded_groups_are_served_by_the_daemon_where_its_programs_write_them() {
    let three = Three::start();
    let sp = as_user_sh(USER);
    let mut served = Vec::new();
    for group in [
        "io", "paths", "environ", "sched", "security", "kstack", "wchan",
    ] {
        if !programs_write(group, three.pids[0]) {
            eprintln!("{group}: not written by this kernel's programs, left to the client");
            continue;
        }
        let args = three
            .d
            .dump_args(&["--groups", group, "--format", "json"])
            .join(" ");
        let o = in_private_mounts(&format!(
            "mount -t tmpfs none /proc || exit 90\n{sp} {} {args}\n",
            cli().display()
        ));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let hidden = take(pick(&o.stdout, group, &three.pids));
        assert_eq!(hidden, three.procfs(group), "{group} of {:?}", three.pids);
        served.push(group);
    }
    assert!(
        served.contains(&"io"),
        "the programs write IO on every kernel: {served:?}"
    );
}

/// DELAY: schedstat's numbers and the block I/O ticks as the user's /proc shows them; the
/// delay-accounting pairs, which only taskstats gives and only to CAP_NET_ADMIN, never.
#[test]
fn delay_accounting_totals_are_not_shown_to_unprivileged_callers() {
    let (pids, daemon, procfs) = through_both("delay");
    for (i, what) in WHO.iter().enumerate() {
        assert_eq!(daemon[i], procfs[i], "{what} process {}", pids[i]);
        assert_eq!(daemon[i]["counters"], serde_json::json!(false), "{what}");
        assert!(daemon[i]["wait_ns"].is_u64(), "{what}: {}", daemon[i]);
    }
}
