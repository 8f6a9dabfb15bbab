//! The rows of the table: which commands are measured, under which key, against which
//! baseline. P rows are the raw-syscall /proc loop (mode `loop`), C rows the article's C loop and
//! B0 the bare iterator read (the C floors built by build.rs), B, F and D rows taskdiag, T rows
//! the tools people use (when installed), U and S rows the daemon as an unprivileged user, and
//! G rows each attribute group of issue 17 against a C loop over the /proc files it replaces
//! ([`NEW_GROUPS`]).

use std::path::{Path, PathBuf};

use crate::measure::Row;

/// Where build.rs put the C floors (`proc_loop`, `min_iter`) and `min_iter.bpf.o`.
const FLOORS: &str = env!("OUT_DIR");

/// Rows with no per-thread variant, left out with `--threads` above 1: the C programs walk
/// processes only, and the map walk is per process anyway.
const PER_PROCESS_ONLY: [&str; 7] = ["C0", "C1", "C2", "C4", "C5", "B0", "B7"];

/// The programs the rows run.
pub struct Programs {
    /// This binary (modes `loop`, `vma-floor`, `clients`).
    pub bench: String,
    /// The taskdiag binary measured.
    pub taskdiag: String,
}

impl Programs {
    /// taskdiagd, beside the measured taskdiag.
    pub fn taskdiagd(&self) -> PathBuf {
        Path::new(&self.taskdiag).with_file_name("taskdiagd")
    }
}

/// The full path of `tool` on $PATH, if it is installed.
pub fn which(tool: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

/// A file built by build.rs.
fn floor(name: &str) -> String {
    Path::new(FLOORS).join(name).display().to_string()
}

/// `taskdiag dump` of every process (every thread with `per_thread`) through `backend`, raw.
fn dump_argv(exe: &str, per_thread: bool, groups: &str, backend: &str) -> Vec<String> {
    let sel = if per_thread { "--all-threads" } else { "--all" };
    [
        exe,
        "dump",
        sel,
        "--groups",
        groups,
        "--format",
        "raw",
        "--backend",
        backend,
    ]
    .iter()
    .map(|x| x.to_string())
    .collect()
}

/// The command answering its request twenty times in one process (`dump --repeat 20`): the
/// per-request cost without process start-up or program loading is (this - one-shot) / 19.
fn repeat20(mut argv: Vec<String>) -> Vec<String> {
    argv.extend(["--repeat".to_string(), "20".to_string()]);
    argv
}

fn row(key: &str, label: &str, argv: Option<Vec<String>>, baseline: Option<&str>) -> Row {
    Row {
        key: key.into(),
        label: label.into(),
        argv,
        baseline: baseline.map(Into::into),
        also: Vec::new(),
    }
}

/// The rows; `per_thread` makes every row list threads rather than processes (loops over
/// /proc/PID/task/TID, `dump --all-threads`, `ps -L`, `top -H`).
pub fn rows(p: &Programs, per_thread: bool) -> Vec<Row> {
    let (bench, exe) = (p.bench.as_str(), p.taskdiag.as_str());
    let s = |v: &[&str]| -> Vec<String> { v.iter().map(|x| x.to_string()).collect() };
    let t = if per_thread { "/task/*" } else { "" };
    let all = if per_thread { " --all-threads" } else { "" };
    let lp = |files: &[&str]| -> Vec<String> {
        let mode: &[&str] = if per_thread { &["--threads"] } else { &[] };
        [bench, "loop"]
            .iter()
            .chain(mode)
            .chain(files)
            .map(|x| x.to_string())
            .collect()
    };
    let dump = |groups: &str, backend: &str| dump_argv(exe, per_thread, groups, backend);
    let c_loop = |files: &[&str]| [&[floor("proc_loop")][..], &s(files)].concat();
    let tool = |name: &str, args: &[&str]| which(name).map(|p| [vec![p], s(args)].concat());
    let psutil = which("python3").filter(|py| {
        std::process::Command::new(py)
            .args(["-c", "import psutil"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|st| st.success())
    });
    let psutil_code = "import psutil\nfor p in psutil.process_iter(['pid','ppid','name','username','cmdline']): p.info";
    let mut rows = vec![
        row(
            "P0",
            &format!("loop: open+close /proc/*{t}/stat (no read)"),
            Some(lp(&["--noread", "stat"])),
            None,
        ),
        row(
            "P1",
            &format!("loop: /proc/*{t}/stat"),
            Some(lp(&["stat"])),
            None,
        ),
        row(
            "P2",
            &format!("loop: /proc/*{t}/status"),
            Some(lp(&["status"])),
            None,
        ),
        row(
            "P3",
            &format!("loop: /proc/*{t}/cmdline"),
            Some(lp(&["cmdline"])),
            None,
        ),
        row(
            "P4",
            &format!("loop: /proc/*{t}/stat + cmdline"),
            Some(lp(&["stat", "cmdline"])),
            None,
        ),
        row(
            "P5",
            &format!("loop: /proc/*{t}/stat + status"),
            Some(lp(&["stat", "status"])),
            None,
        ),
        // The files the procfs backend reads for BASE/CRED (+ CMDLINE): its fair floor.
        row(
            "P6",
            &format!("loop: /proc/*{t}/stat + status + cmdline"),
            Some(lp(&["stat", "status", "cmdline"])),
            None,
        ),
        row(
            "P7",
            &format!("loop: /proc/*{t}/maps"),
            Some(lp(&["maps"])),
            None,
        ),
        row(
            "P8",
            &format!("loop: /proc/*{t}/smaps"),
            Some(lp(&["smaps"])),
            None,
        ),
        // The article's task_proc_all as its C program (src/c/proc_loop.c), beside the loop above.
        row(
            "C0",
            "C loop: open+close /proc/*/stat (no read)",
            Some(c_loop(&["--noread", "stat"])),
            None,
        ),
        row("C1", "C loop: /proc/*/stat", Some(c_loop(&["stat"])), None),
        row(
            "C2",
            "C loop: /proc/*/status",
            Some(c_loop(&["status"])),
            None,
        ),
        row(
            "C4",
            "C loop: /proc/*/stat + cmdline",
            Some(c_loop(&["stat", "cmdline"])),
            None,
        ),
        row(
            "C5",
            "C loop: /proc/*/stat + status",
            Some(c_loop(&["stat", "status"])),
            None,
        ),
        row(
            "T8",
            "cat /proc/*/maps",
            which("sh").map(|sh| {
                vec![
                    sh,
                    "-c".into(),
                    "cat /proc/[0-9]*/maps 2>/dev/null || true".into(),
                ]
            }),
            Some("P7"),
        ),
        row(
            "B5",
            &format!("taskdiag bpf base,vma{all}"),
            Some(dump("vma", "bpf")),
            Some("P7"),
        ),
        // The kernel's map walk alone (a program that writes nothing): what any BPF map
        // dump costs at least.
        row(
            "B7",
            "raw iter/task_vma read, empty program",
            Some(s(&[bench, "vma-floor"])),
            Some("P7"),
        ),
        row(
            "F4",
            &format!("taskdiag procfs base,vma{all}"),
            Some(dump("vma", "procfs")),
            Some("P7"),
        ),
        row(
            "B6",
            &format!("taskdiag bpf base,vma_stat{all}"),
            Some(dump("vma_stat", "bpf")),
            Some("P8"),
        ),
        // A fixed 32-byte record per process from an iter/task program, read by a minimal
        // libbpf C program (src/c/min_iter.c): what any BPF task dump costs at least.
        row(
            "B0",
            "bare minimal iterator (C, libbpf)",
            Some(vec![floor("min_iter"), floor("min_iter.bpf.o")]),
            None,
        ),
        row(
            "B1",
            &format!("taskdiag bpf base,cred{all}"),
            Some(dump("base,cred", "bpf")),
            Some("P2"),
        ),
        row(
            "B2",
            &format!("taskdiag bpf base,cmdline{all}"),
            Some(dump("base,cmdline", "bpf")),
            Some("P4"),
        ),
        row(
            "B3",
            &format!("taskdiag bpf base{all}"),
            Some(dump("base", "bpf")),
            Some("P1"),
        ),
        // The same with nothing shared: every run loads and verifies its own programs (a
        // host's first run after boot, or TASKDIAG_BPF_PIN=0).
        row(
            "B1u",
            &format!("taskdiag bpf base,cred{all}, nothing shared (loads its programs)"),
            Some([s(&["env", "TASKDIAG_BPF_PIN=0"]), dump("base,cred", "bpf")].concat()),
            Some("P2"),
        ),
        // With the programs loaded once (the daemon's and an agent's situation).
        row(
            "B4",
            &format!("taskdiag bpf base,cred{all} --repeat 20, as root"),
            Some(repeat20(dump("base,cred", "bpf"))),
            None,
        ),
        row(
            "B8",
            &format!("taskdiag bpf base,cmdline{all} --repeat 20, as root"),
            Some(repeat20(dump("base,cmdline", "bpf"))),
            None,
        ),
        row(
            "F1",
            &format!("taskdiag procfs base,cred{all}"),
            Some(dump("base,cred", "procfs")),
            Some("P5"),
        ),
        row(
            "F2",
            &format!("taskdiag procfs base,cmdline{all}"),
            Some(dump("base,cmdline", "procfs")),
            Some("P6"),
        ),
        row(
            "F3",
            &format!("taskdiag procfs base{all}"),
            Some(dump("base", "procfs")),
            Some("P5"),
        ),
        row(
            "T1",
            if per_thread {
                "procps ps -eL -o pid,lwp,ppid,pgid,sid,comm"
            } else {
                "procps ps -e -o pid,ppid,pgid,sid,comm"
            },
            if per_thread {
                tool("ps", &["-eL", "-o", "pid,lwp,ppid,pgid,sid,comm"])
            } else {
                tool("ps", &["-e", "-o", "pid,ppid,pgid,sid,comm"])
            },
            Some("P1"),
        ),
        row(
            "T2",
            if per_thread {
                "procps ps auxH"
            } else {
                "procps ps aux"
            },
            tool("ps", &[if per_thread { "auxH" } else { "aux" }]),
            Some("P1"),
        ),
        row(
            "T3",
            if per_thread {
                "procps top -H -b -n 1"
            } else {
                "procps top -b -n 1"
            },
            if per_thread {
                tool("top", &["-H", "-b", "-n", "1"])
            } else {
                tool("top", &["-b", "-n", "1"])
            },
            Some("P1"),
        ),
        row(
            "T4",
            "procps pgrep -c -f taskdiag",
            tool("pgrep", &["-c", "-f", "taskdiag"]),
            Some("P3"),
        ),
        row(
            "T5",
            "psmisc pstree -p",
            tool("pstree", &["-p"]),
            Some("P1"),
        ),
        row(
            "T6",
            "psutil process_iter(pid,ppid,name,username,cmdline)",
            psutil.map(|py| vec![py, "-c".into(), psutil_code.into()]),
            Some("P5"),
        ),
        row(
            "D1",
            if per_thread {
                "taskdiag ps -eL -o pid,lwp,ppid,pgid,sid,comm"
            } else {
                "taskdiag ps -e -o pid,ppid,pgid,sid,comm"
            },
            Some(if per_thread {
                s(&[exe, "ps", "-eL", "-o", "pid,lwp,ppid,pgid,sid,comm"])
            } else {
                s(&[exe, "ps", "-e", "-o", "pid,ppid,pgid,sid,comm"])
            }),
            Some("T1"),
        ),
        row(
            "D2",
            if per_thread {
                "taskdiag ps auxH"
            } else {
                "taskdiag ps aux"
            },
            Some(s(&[exe, "ps", if per_thread { "auxH" } else { "aux" }])),
            Some("T2"),
        ),
        row(
            "D3",
            if per_thread {
                "taskdiag top -H -b -n 1"
            } else {
                "taskdiag top -b -n 1"
            },
            Some(if per_thread {
                s(&[exe, "top", "-H", "-b", "-n", "1"])
            } else {
                s(&[exe, "top", "-b", "-n", "1"])
            }),
            Some("T3"),
        ),
        row(
            "D4",
            "taskdiag pgrep -c -f taskdiag",
            Some(s(&[exe, "pgrep", "-c", "-f", "taskdiag"])),
            Some("T4"),
        ),
        row(
            "D5",
            "taskdiag pstree -p",
            Some(s(&[exe, "pstree", "-p"])),
            Some("T5"),
        ),
        // Issue 17's tool target: cgroup, a namespace and a signal mask per process.
        row(
            "T9",
            "procps ps -e -o pid,cgroup,ipcns,sigmask",
            tool("ps", &["-e", "-o", "pid,cgroup,ipcns,sigmask"]),
            Some("P1"),
        ),
        row(
            "D9",
            "taskdiag ps -e -o pid,cgroup,ipcns,sigmask",
            Some(s(&[exe, "ps", "-e", "-o", "pid,cgroup,ipcns,sigmask"])),
            Some("T9"),
        ),
        // Steady state of a refreshing top: four frames a second apart; the CPU of three
        // refreshes is this row's CPU minus the one-frame row's.
        row(
            "T7",
            "procps top -b -n 4 -d 1",
            tool("top", &["-b", "-n", "4", "-d", "1"]),
            Some("T3"),
        ),
        row(
            "D7",
            "taskdiag top -b -n 4 -d 1",
            Some(s(&[exe, "top", "-b", "-n", "4", "-d", "1"])),
            Some("T7"),
        ),
    ];
    rows.retain(|r| !per_thread || !PER_PROCESS_ONLY.contains(&r.key.as_str()));
    rows
}

/// Every new group's rows ([`group_rows`]); per process only, as their C loops walk processes.
pub fn new_group_rows(p: &Programs) -> Vec<Row> {
    NEW_GROUPS.iter().flat_map(|g| group_rows(p, g)).collect()
}

/// How a group's C loop reaches one of the /proc/PID files the group replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// open, read to the end (one read for a file shorter than 16 KiB), close.
    Read,
    /// readlink.
    Readlink,
}

/// An attribute group of issue 17 and what reading it from /proc takes: the /proc/PID files
/// it replaces, each read whole or readlink'ed by its C loop (src/c/proc_loop.c) for every
/// process. Adding a group to the rows is adding its entry to [`NEW_GROUPS`].
pub struct NewGroup {
    /// The group's name in `taskdiag dump --groups`.
    pub name: &'static str,
    /// The files under /proc/PID/ and how each is reached, in the loop's order.
    pub files: &'static [(&'static str, Access)],
}

/// What a C loop over `files` reads, for a row's label: `/proc/*/FILE` for a file read,
/// `readlink /proc/*/FILE` for a link, consecutive links in one directory counted
/// (`readlink /proc/*/ns/{10 links}`), and consecutive links of /proc/PID itself named
/// (`readlink /proc/*/{exe,cwd,root}`).
fn loop_label(files: &[&(&str, Access)]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < files.len() {
        let (f, a) = *files[i];
        let dir = f.rsplit_once('/').map(|(d, _)| d);
        let run = files[i..]
            .iter()
            .take_while(|(g, b)| {
                *b == Access::Readlink && g.rsplit_once('/').map(|(d, _)| d) == dir
            })
            .count();
        parts.push(match (a, dir) {
            (Access::Readlink, Some(d)) if run > 1 => {
                format!("readlink /proc/*/{d}/{{{run} links}}")
            }
            (Access::Readlink, None) if run > 1 => {
                let names: Vec<&str> = files[i..i + run].iter().map(|(g, _)| *g).collect();
                format!("readlink /proc/*/{{{}}}", names.join(","))
            }
            (Access::Readlink, _) => format!("readlink /proc/*/{f}"),
            (Access::Read, _) => format!("/proc/*/{f}"),
        });
        i += run.max(1);
    }
    parts.join(" + ")
}

/// The new groups and the files each replaces.
pub const NEW_GROUPS: [NewGroup; 11] = [
    // Pending (thread, shared), blocked, ignored, caught: status's Sig* lines.
    NewGroup {
        name: "signal",
        files: &[("status", Access::Read)],
    },
    // The namespace links, as lsns and ps read them, and status for the ids at each pid
    // namespace level (NSpid, NStgid, NSpgid, NSsid).
    NewGroup {
        name: "ns",
        files: &[
            ("ns/pid", Access::Readlink),
            ("ns/pid_for_children", Access::Readlink),
            ("ns/mnt", Access::Readlink),
            ("ns/net", Access::Readlink),
            ("ns/ipc", Access::Readlink),
            ("ns/uts", Access::Readlink),
            ("ns/user", Access::Readlink),
            ("ns/cgroup", Access::Readlink),
            ("ns/time", Access::Readlink),
            ("ns/time_for_children", Access::Readlink),
            ("status", Access::Read),
        ],
    },
    // The open descriptors (a directory listing: the loop reads the limits file only, so the
    // row is a floor for FILES) and the limits.
    NewGroup {
        name: "files",
        files: &[("limits", Access::Read)],
    },
    // The cgroup file.
    NewGroup {
        name: "cgroup",
        files: &[("cgroup", Access::Read)],
    },
    // The I/O counters.
    NewGroup {
        name: "io",
        files: &[("io", Access::Read)],
    },
    // readlink of the executable, working and root directories.
    NewGroup {
        name: "paths",
        files: &[
            ("exe", Access::Readlink),
            ("cwd", Access::Readlink),
            ("root", Access::Readlink),
        ],
    },
    // The environment.
    NewGroup {
        name: "environ",
        files: &[("environ", Access::Read)],
    },
    // wchan, syscall, the OOM scores, login uid and session, autogroup, and status for the
    // affinity lists.
    NewGroup {
        name: "sched",
        files: &[
            ("wchan", Access::Read),
            ("syscall", Access::Read),
            ("oom_score", Access::Read),
            ("oom_score_adj", Access::Read),
            ("loginuid", Access::Read),
            ("sessionid", Access::Read),
            ("autogroup", Access::Read),
            ("status", Access::Read),
        ],
    },
    // status (Seccomp, Seccomp_filters, NoNewPrivs) and the security module's label.
    NewGroup {
        name: "security",
        files: &[("status", Access::Read), ("attr/current", Access::Read)],
    },
    // schedstat and stat (field 42).
    NewGroup {
        name: "delay",
        files: &[("schedstat", Access::Read), ("stat", Access::Read)],
    },
    // stack (root only).
    NewGroup {
        name: "kstack",
        files: &[("stack", Access::Read)],
    },
];

/// The rows of one new group G, keyed `G<name>.<kind>` (select them all with `--rows
/// 'G<name>.*'`, every group's with `--rows 'G*'`):
///
/// * `.C`: the C loop over the files G replaces ([`NewGroup::files`]), the baseline;
/// * `.Cl`: the C loop over G's links alone, for a group that also reads files (NS's target
///   is against readlink of its ten links);
/// * `.Bu`: `taskdiag dump --groups base,G --backend bpf`, one-shot with nothing shared: the
///   process loads and verifies its programs (`TASKDIAG_BPF_PIN=0`);
/// * `.B`: the same with the programs loaded, pinned in bpffs by an earlier process (the
///   warm-up round's), as B1;
/// * `.F`: the same through the procfs backend (which reads BASE's files too).
///
/// Every row is compared with `.C`, the BPF rows with `.Cl` as well.
pub fn group_rows(p: &Programs, g: &NewGroup) -> Vec<Row> {
    let (name, exe) = (g.name, p.taskdiag.as_str());
    let key = |kind: &str| format!("G{name}.{kind}");
    let spec = |(f, a): &(&str, Access)| match a {
        Access::Read => f.to_string(),
        Access::Readlink => format!("readlink:{f}"),
    };
    let c_loop = |files: &[&(&str, Access)]| {
        let argv = std::iter::once(floor("proc_loop"))
            .chain(files.iter().map(|f| spec(f)))
            .collect();
        (argv, format!("C loop ({name}): {}", loop_label(files)))
    };
    let all: Vec<_> = g.files.iter().collect();
    let links: Vec<_> = g
        .files
        .iter()
        .filter(|(_, a)| *a == Access::Readlink)
        .collect();
    let links_alone = !links.is_empty() && links.len() < all.len();
    let groups = format!("base,{name}");
    let dump = |backend: &str| dump_argv(exe, false, &groups, backend);
    let (c, c_what) = c_loop(&all);
    let mut rows = vec![row(&key("C"), &c_what, Some(c), None)];
    let mut also = Vec::new();
    if links_alone {
        let (cl, cl_what) = c_loop(&links);
        rows.push(row(&key("Cl"), &cl_what, Some(cl), None));
        also.push(key("Cl"));
    }
    let base = key("C");
    let bpf = [
        row(
            &key("Bu"),
            &format!("taskdiag bpf {groups}, one-shot (loads its programs)"),
            Some([vec!["env".into(), "TASKDIAG_BPF_PIN=0".into()], dump("bpf")].concat()),
            Some(&base),
        ),
        row(
            &key("B"),
            &format!("taskdiag bpf {groups}, programs loaded (pinned)"),
            Some(dump("bpf")),
            Some(&base),
        ),
    ];
    rows.extend(bpf.into_iter().map(|r| Row {
        also: also.clone(),
        ..r
    }));
    rows.push(row(
        &key("F"),
        &format!("taskdiag procfs {groups}"),
        Some(dump("procfs")),
        Some(&base),
    ));
    rows
}

/// The unprivileged user the daemon rows run as (`nobody` exists everywhere; its id is the
/// overflow id on Debian and most distributions).
const BENCH_UID: &str = "65534";

/// `argv` run as [`BENCH_UID`] without capabilities (through setpriv, if installed).
fn as_nobody(argv: Vec<String>) -> Option<Vec<String>> {
    let mut a = vec![
        which("setpriv")?,
        "--reuid".into(),
        BENCH_UID.into(),
        "--regid".into(),
        BENCH_UID.into(),
        "--clear-groups".into(),
        "--inh-caps=-all".into(),
        "--".into(),
    ];
    a.extend(argv);
    Some(a)
}

/// The everyday tools on any host, each way a user meets them: for tool N, `HNp` is procps
/// (psmisc) as root and `HNpn` as nobody; taskdiag's `HN` as root with nothing running
/// (programs shared through bpffs once any root process pinned them), `HNu` as root with
/// nothing shared (`TASKDIAG_BPF_PIN=0`: auto reads /proc on a small host, else loads), `HNd`
/// as root with taskdiagd, `HNn` as nobody without taskdiagd and `HNnd` with it. The daemon is
/// named by `TASKDIAG_SOCKET`; "without" points it where nothing listens.
pub fn host_rows(p: &Programs, socket: &str) -> Vec<Row> {
    let exe = p.taskdiag.as_str();
    let tools: [(&str, &str, &[&str]); 5] = [
        ("ps", "ps -ef", &["-ef"]),
        ("ps", "ps aux", &["aux"]),
        ("pstree", "pstree -p", &["-p"]),
        ("pgrep", "pgrep -f taskdiag", &["-f", "taskdiag"]),
        ("top", "top -b -n 1", &["-b", "-n", "1"]),
    ];
    let none = "/nonexistent/taskdiagd.sock";
    let mut rows = Vec::new();
    for (i, (tool, what, args)) in tools.into_iter().enumerate() {
        let n = i + 1;
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let procps = which(tool).map(|t| [vec![t], args.clone()].concat());
        let ours = |env: &[String]| -> Vec<String> {
            let mut v = vec!["env".to_string()];
            v.extend(env.iter().cloned());
            v.extend([exe.to_string(), tool.to_string()]);
            v.extend(args.iter().cloned());
            v
        };
        let sock = |s: &str| format!("TASKDIAG_SOCKET={s}");
        let (pk, pnk) = (format!("H{n}p"), format!("H{n}pn"));
        rows.push(row(
            &pk,
            &format!("procps {what}, as root"),
            procps.clone(),
            None,
        ));
        rows.push(row(
            &pnk,
            &format!("procps {what}, as nobody"),
            procps.and_then(as_nobody),
            None,
        ));
        let variants = [
            ("", "as root", vec![sock(none)], false, &pk),
            (
                "u",
                "as root, nothing shared",
                vec![sock(none), "TASKDIAG_BPF_PIN=0".into()],
                false,
                &pk,
            ),
            (
                "d",
                "as root, with taskdiagd",
                vec![sock(socket)],
                false,
                &pk,
            ),
            ("n", "as nobody", vec![sock(none)], true, &pnk),
            (
                "nd",
                "as nobody, with taskdiagd",
                vec![sock(socket)],
                true,
                &pnk,
            ),
        ];
        for (suffix, who, env, nobody, base) in variants {
            let argv = ours(&env);
            let argv = if nobody { as_nobody(argv) } else { Some(argv) };
            rows.push(row(
                &format!("H{n}{suffix}"),
                &format!("taskdiag {what}, {who}"),
                argv,
                Some(base),
            ));
        }
    }
    rows
}

/// Rows that need a running taskdiagd; `socket` is its socket.
pub fn daemon_rows(p: &Programs, per_thread: bool, socket: &str) -> Vec<Row> {
    let (bench, exe) = (p.bench.as_str(), p.taskdiag.as_str());
    let as_nobody = |v: &[&str]| as_nobody(v.iter().map(|x| x.to_string()).collect());
    let all = if per_thread { " --all-threads" } else { "" };
    let dump_groups = |groups: &str, backend: &str| {
        let mut v = dump_argv(exe, per_thread, groups, backend);
        if backend == "daemon" {
            v.extend(["--socket".to_string(), socket.to_string()]);
        }
        as_nobody(&v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let dump = |backend: &str| dump_groups("base,cred", backend);
    let clients = |n: &str| {
        as_nobody(&[
            bench,
            "clients",
            "--clients",
            n,
            "--groups",
            "base,cred",
            "--socket",
            socket,
        ])
    };
    vec![
        row(
            "U1",
            &format!("taskdiag procfs base,cred{all}, as nobody"),
            dump("procfs"),
            Some("P5"),
        ),
        row(
            "S1",
            &format!("taskdiag daemon base,cred{all}, as nobody"),
            dump("daemon"),
            Some("U1"),
        ),
        // The same, compared with the in-process BPF dump as root.
        row(
            "S2",
            &format!("taskdiag daemon base,cred{all}, as nobody (vs bpf as root)"),
            dump("daemon"),
            Some("B1"),
        ),
        // Twenty requests on one connection: the per-request cost without process start-up
        // (compare with B4, the programs loaded once in process).
        row(
            "S3",
            &format!("taskdiag daemon base,cred{all} --repeat 20, as nobody"),
            dump("daemon").map(repeat20),
            None,
        ),
        row(
            "S10",
            "10 concurrent daemon clients, base,cred each, as nobody",
            clients("10"),
            Some("S1"),
        ),
        row(
            "S100",
            "100 concurrent daemon clients, base,cred each, as nobody",
            clients("100"),
            Some("S1"),
        ),
    ]
    .into_iter()
    // The groups /proc guards per reader, which the daemon serves under its rules (`SG<name>`)
    // where the client used to read its own /proc (as `UG<name>`, the procfs backend, does).
    .chain(["paths", "sched", "environ"].into_iter().flat_map(|g| {
        let groups = format!("base,{g}");
        [
            row(
                &format!("UG{g}"),
                &format!("taskdiag procfs {groups}{all}, as nobody"),
                dump_groups(&groups, "procfs"),
                None,
            ),
            row(
                &format!("SG{g}"),
                &format!("taskdiag daemon {groups}{all}, as nobody"),
                dump_groups(&groups, "daemon"),
                Some(&format!("UG{g}")),
            ),
        ]
    }))
    .collect()
}

/// Rows of the scaling curves unless --rows says otherwise: the floor loops, taskdiag, and ps
/// (the slow tools would take minutes at 100,000 tasks).
pub const SCALE_ROWS: [&str; 11] = [
    "P1", "P2", "P4", "P5", "B1", "B1u", "B2", "F1", "F3", "T1", "D1",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn programs() -> Programs {
        Programs {
            bench: "/bench".into(),
            taskdiag: "/bin/taskdiag".into(),
        }
    }

    #[test]
    fn ns_rows_readlink_each_namespace_the_record_carries() {
        let ns = NEW_GROUPS.iter().find(|g| g.name == "ns").expect("NS");
        let links: Vec<&str> = ns
            .files
            .iter()
            .filter(|(_, a)| *a == Access::Readlink)
            .filter_map(|(f, _)| f.strip_prefix("ns/"))
            .collect();
        assert_eq!(links, taskdiag::proto::task::Ns::NAMES);
    }

    #[test]
    fn a_group_has_its_c_loops_and_taskdiag_rows_compared_with_them() {
        let p = programs();
        let keys = |g: &NewGroup| -> Vec<String> {
            group_rows(&p, g).into_iter().map(|r| r.key).collect()
        };
        assert_eq!(
            keys(&NEW_GROUPS[0]),
            ["Gsignal.C", "Gsignal.Bu", "Gsignal.B", "Gsignal.F"]
        );
        let ns = group_rows(&p, &NEW_GROUPS[1]);
        let c = &ns[0];
        let argv = c.argv.as_ref().expect("C loop");
        assert!(argv[0].ends_with("/proc_loop"), "{argv:?}");
        assert_eq!(argv[1], "readlink:ns/pid");
        assert_eq!(argv.last().map(String::as_str), Some("status"));
        assert_eq!(
            c.label,
            "C loop (ns): readlink /proc/*/ns/{10 links} + /proc/*/status"
        );
        assert_eq!(ns[1].key, "Gns.Cl");
        assert_eq!(ns[1].argv.as_ref().map(Vec::len), Some(11)); // the ten links
        let b = ns.iter().find(|r| r.key == "Gns.B").expect("Gns.B");
        assert_eq!(b.baseline.as_deref(), Some("Gns.C"));
        assert_eq!(b.also, ["Gns.Cl"]);
        let argv = b.argv.as_ref().expect("dump");
        assert!(
            argv.windows(2).any(|w| w == ["--groups", "base,ns"]),
            "{argv:?}"
        );
        assert!(new_group_rows(&p).iter().any(|r| r.key == "Gns.F"));
    }
}
