//! Least privilege: a running daemon holds no capability, with or without --user; by default it
//! runs as an unprivileged user, confined by seccomp, with no inherited descriptor; and through a
//! /proc of its own it serves clients that its user could not see in the host's /proc.

use crate::harness::*;

/// The capability sets and NoNewPrivs of a `status` file, as numbers.
fn caps(status: &str) -> Vec<(String, u64)> {
    status
        .lines()
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

/// A /proc/PID/status field of the daemon, which is alive.
fn field(pid: u32, name: &str) -> String {
    let s = tasks::status(pid).expect("the daemon's status");
    tasks::status_field(&s, name)
        .unwrap_or_else(|| panic!("no {name} in the daemon's status"))
        .to_string()
}

#[test]
fn a_running_daemon_has_no_capabilities_left() {
    let d = Daemon::start(&[]);
    // Serve one request first: nothing it does later may need privilege.
    let o = output(std::process::Command::new(cli()).args(d.dump_args(&["--groups", "all"])));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = caps(&tasks::status(d.pid()).expect("the daemon's status"));
    for (k, v) in &c {
        let want = u64::from(k == "NoNewPrivs");
        assert_eq!(*v, want, "{k} of the daemon: {c:?}");
    }
    // Every thread, not only the main one (capabilities are per thread). A thread that ends
    // between the listing and the read of its status is skipped; the daemon's fixed threads
    // (event loop, identification, workers) are there throughout.
    let threads = tasks::thread_statuses(d.pid());
    assert!(threads.len() >= 3, "the daemon's threads: {threads:?}");
    for (tid, status) in threads {
        for (k, v) in caps(&status) {
            let want = u64::from(k == "NoNewPrivs");
            assert_eq!(v, want, "{k} of daemon thread {tid}");
        }
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

#[test]
fn by_default_it_serves_as_an_unprivileged_user_under_seccomp() {
    let want = taskdiag_test_support::users::existing_uid("taskdiag").unwrap_or(OVERFLOW_UID);
    // An open file the daemon inherits (fd 9, not close-on-exec): it must not keep it.
    let secret = TempDir::new("inherited");
    let file = secret.join("root-only");
    std::fs::write(&file, b"x").expect("write");
    let f = std::fs::File::open(&file).expect("open");
    let d = Daemon::start_with(&[], |c| {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = f.as_raw_fd();
        // SAFETY: dup2 is async-signal-safe; the child only moves a descriptor before exec.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(fd, 9) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    assert_eq!(
        field(d.pid(), "Uid"),
        format!("{want}\t{want}\t{want}\t{want}")
    );
    assert_eq!(field(d.pid(), "Seccomp"), "2", "a seccomp filter");
    assert_eq!(field(d.pid(), "NoNewPrivs"), "1");
    // It serves root and an unprivileged user.
    for mut c in [std::process::Command::new(cli()), as_user(USER, cli())] {
        let o = output(c.args(d.dump_args(&["--groups", "all", "--format", "json"])));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(o.stdout.len() > 100);
    }
    for e in std::fs::read_dir(format!("/proc/{}/fd", d.pid())).expect("fd dir") {
        let Ok(e) = e else { continue };
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        assert_ne!(
            target,
            file,
            "inherited descriptor {:?} kept",
            e.file_name()
        );
    }
}

#[test]
fn under_hidepid_the_unprivileged_daemon_serves_what_each_proc_shows() {
    user(USER);
    user(OTHER);
    let g = group("taskdiag-proc");
    let dir = TempDir::new("hidepid");
    let sock = dir.join("s.sock");
    std::os::unix::fs::chown(dir.path(), Some(OVERFLOW_UID), Some(OVERFLOW_UID)).expect("chown");
    let cli = cli().display().to_string();
    let (sock, daemon) = (sock.display().to_string(), DAEMON.to_string());
    // The daemon (its default, unprivileged user) and its clients share a /proc that hides
    // other users' processes from all but group G.
    let member = format!("setpriv --reuid {USER} --regid {USER} --groups {g} --inh-caps=-all");
    let outsider = format!("setpriv --reuid {USER} --regid {USER} --clear-groups --inh-caps=-all");
    let script = format!(
        "{waits}mount -t proc -o hidepid=invisible,gid={g} proc /proc || exit 90\n\
         {daemon} --foreground --socket {sock} & D=$!\n\
         wait_socket {sock} $D\n\
         setpriv --reuid {OTHER} --regid {OTHER} --init-groups sleep 30 & O=$!\n\
         wait_comm $O sleep\n\
         for who in member outsider; do\n\
           if [ $who = member ]; then run=\"{member}\"; else run=\"{outsider}\"; fi\n\
           $run {cli} dump --backend daemon --socket {sock} --pid $O --format json >/dev/null 2>&1\n\
           echo \"$who daemon $?\"\n\
           $run sh -c \"test -d /proc/$O\"; echo \"$who proc $?\"\n\
           $run {cli} dump --backend daemon --socket {sock} --format json | grep -c '\"pid\"' \
             | sed \"s/^/$who count-daemon /\"\n\
           $run sh -c 'ls -d /proc/[0-9]* | wc -l' | sed \"s/^/$who count-proc /\"\n\
         done\n\
         kill $O $D; wait\n",
        waits = sh_waits()
    );
    let o = in_private_mounts(&script);
    let text = String::from_utf8_lossy(&o.stdout);
    let get = |k: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{k} missing:\n{text}\n{}",
                    String::from_utf8_lossy(&o.stderr)
                )
            })
    };
    // A member of gid= sees another user's process, as in its /proc; an outsider does not.
    assert_eq!((get("member daemon"), get("member proc")), (0, 0), "{text}");
    assert_eq!(
        (get("outsider daemon"), get("outsider proc")),
        (1, 1),
        "{text}"
    );
    // Whole listings: the daemon shows each as many processes as its /proc lists, give or
    // take the few that come and go between the two (the listing commands themselves).
    for who in ["member", "outsider"] {
        let (d, p) = (
            get(&format!("{who} count-daemon")),
            get(&format!("{who} count-proc")),
        );
        assert!(
            (d - p).abs() <= 3,
            "{who}: daemon {d} processes, /proc {p}\n{text}"
        );
    }
    assert!(
        get("member count-daemon") > get("outsider count-daemon") + 2,
        "{text}"
    );
}
