//! Memory maps through the daemon: what /proc/PID/maps shows the same unprivileged user, for
//! its own process, another user's and its own non-dumpable one (ptrace-read decides).

use crate::harness::*;

#[test]
fn maps_through_the_daemon_follow_ptrace_read_like_proc() {
    let d = Daemon::start(&[]);
    let kids = [
        user_sleeper(USER, false),
        user_sleeper(OTHER, false),
        user_sleeper(USER, true),
    ];
    // setpriv execs python, so the child's pid is the python process.
    let pids: Vec<String> = kids.iter().map(|c| c.pid().to_string()).collect();
    let socket = d.socket.display().to_string();
    // Without a map walk the daemon declines maps, and auto reads them from the caller's /proc.
    let served = d.serves_maps();
    let ours = if served { "daemon" } else { "auto" };
    for (pid, what) in pids
        .iter()
        .zip(["own", "another user's", "own non-dumpable"])
    {
        let via = |backend: &str| {
            let mut c = as_user(USER, cli());
            c.args(["maps", pid, "-b", backend, "--socket", &socket]);
            output(&mut c)
        };
        let (daemon, procfs) = (via(ours), via("procfs"));
        assert_eq!(
            daemon.status.code(),
            procfs.status.code(),
            "{what} process {pid}: daemon {} / procfs {}",
            String::from_utf8_lossy(&daemon.stderr),
            String::from_utf8_lossy(&procfs.stderr)
        );
        if procfs.status.success() {
            assert_eq!(
                String::from_utf8_lossy(&daemon.stdout),
                String::from_utf8_lossy(&procfs.stdout),
                "{what} process {pid}"
            );
            assert!(!daemon.stdout.is_empty());
        } else {
            let e = String::from_utf8_lossy(&daemon.stderr);
            assert!(e.contains("Permission denied"), "{what}: {e}");
        }
    }
    if !served {
        return;
    }
    // Whole-system: the daemon's VMA group for the user's own process, an EACCES group error
    // for the others.
    let mut c = as_user(USER, cli());
    c.args(d.dump_args(&["--groups", "vma", "--format", "json"]));
    let o = output(&mut c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut found = 0;
    for line in o.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("json");
        let pid = v["pid"].as_u64().expect("pid").to_string();
        if let Some(i) = pids.iter().position(|p| *p == pid) {
            found += 1;
            let has = v["vma"].is_array();
            let denied = v["errors"]["vma"].is_string();
            assert_eq!((has, denied), (i == 0, i != 0), "{pid}: {v}");
        }
    }
    assert_eq!(found, 3);
    // VMA_STAT is refused with an explanation.
    let mut c = as_user(USER, cli());
    c.args(d.dump_args(&["--groups", "vma_stat"]));
    let o = output(&mut c);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("vma_stat group is not served"));
}
