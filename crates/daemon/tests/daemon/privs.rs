//! Least privilege: a running daemon holds no capability, with or without --user.

use crate::harness::*;

fn caps(pid: u32) -> Vec<(String, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .filter(|l| l.starts_with("Cap") || l.starts_with("NoNewPrivs"))
        .map(|l| {
            let (k, v) = l.split_once(':').expect("field");
            (
                k.to_string(),
                u64::from_str_radix(v.trim(), 16).expect("hex"),
            )
        })
        .collect()
}

fn field(pid: u32, name: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .expect("field")
        .trim()
        .to_string()
}

#[test]
fn a_running_daemon_has_no_capabilities_left() {
    let d = Daemon::start(&[]);
    // Serve one request first: nothing it does later may need privilege.
    let o = output(std::process::Command::new(cli()).args(d.dump_args(&["--groups", "all"])));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = caps(d.pid());
    for (k, v) in &c {
        let want = u64::from(k == "NoNewPrivs");
        assert_eq!(*v, want, "{k} of the daemon: {c:?}");
    }
    // Every thread, not only the main one (capabilities are per thread).
    for t in std::fs::read_dir(format!("/proc/{}/task", d.pid())).expect("task dir") {
        let tid: u32 = t
            .expect("entry")
            .file_name()
            .to_str()
            .expect("tid")
            .parse()
            .expect("tid");
        let s = std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", d.pid()))
            .expect("thread status");
        let eff = s
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .expect("CapEff");
        assert_eq!(
            u64::from_str_radix(eff.trim(), 16).expect("hex"),
            0,
            "thread {tid}"
        );
    }
}

#[test]
fn with_user_it_serves_as_that_user() {
    let uid = user(USER);
    let d = Daemon::start(&["--user", USER]);
    assert_eq!(
        field(d.pid(), "Uid"),
        format!("{uid}\t{uid}\t{uid}\t{uid}"),
        "real, effective, saved and fs uid"
    );
    assert_eq!(field(d.pid(), "CapEff"), "0000000000000000");
    let o = output(
        std::process::Command::new(cli()).args(d.dump_args(&["--groups", "base,cred,cmdline"])),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("# done:"));
}
