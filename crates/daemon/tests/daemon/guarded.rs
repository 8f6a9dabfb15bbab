//! Fields /proc guards with ptrace-read, field by field, through the daemon: for the same
//! unprivileged user, each must show what that user's /proc shows (read here by the procfs
//! backend as that user) for its own process, another user's and its own non-dumpable one.

use crate::harness::*;

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
    let mut got = vec![None; pids.len()];
    for line in o.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("json");
        let pid = v["pid"].as_u64().expect("pid") as u32;
        if let Some(i) = pids.iter().position(|&p| p == pid) {
            got[i] = Some(v[group].clone());
        }
    }
    got
}

/// Three processes (the user's own, another user's, the user's own non-dumpable one) and the
/// `group` object of each as `USER` gets it through the daemon and through its own /proc.
fn through_both(group: &str) -> (Vec<u32>, Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let d = Daemon::start(&[]);
    let kids = [
        user_sleeper(USER, false),
        user_sleeper(OTHER, false),
        user_sleeper(USER, true),
    ];
    let pids: Vec<u32> = kids.iter().map(|k| k.pid()).collect();
    let flags = ["--groups", group, "--format", "json"];
    let daemon = group_of(USER, &d.dump_args(&flags), group, &pids);
    let mut procfs_args: Vec<String> = vec!["dump".into(), "-b".into(), "procfs".into()];
    procfs_args.extend(flags.iter().map(|s| s.to_string()));
    let procfs = group_of(USER, &procfs_args, group, &pids);
    let take = |v: Vec<Option<serde_json::Value>>| -> Vec<serde_json::Value> {
        v.into_iter()
            .zip(WHO)
            .map(|(g, what)| g.unwrap_or_else(|| panic!("{what}: no task")))
            .collect()
    };
    (pids, take(daemon), take(procfs))
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

/// IO, PATHS and ENVIRON come from files the daemon, without capabilities, may not read for
/// its callers: the client library asks the daemon for the rest and reads these from the
/// caller's own /proc, task by task, so they follow ptrace-read exactly as that /proc does.
#[test]
fn io_paths_and_environ_through_the_daemon_are_the_callers_proc() {
    for group in ["io", "paths", "environ"] {
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
            _ => assert!(daemon[0].is_array(), "{:?}", daemon[0]),
        }
        if group != "paths" {
            for d in &daemon[1..] {
                assert!(d.is_null(), "{group}: {d:?}");
            }
        }
    }
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
