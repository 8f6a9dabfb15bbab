//! [`ProcReader`] over fake /proc trees built in a temporary directory: every strategy, every
//! group, hostile names, tasks that vanish between two opens, malformed files and foreign
//! namespaces, with no dependence on what runs on the machine.
//!
//! Real /proc hides thread directories (`/proc/TID` of a non-leader) from its listing but lets
//! them be opened; a plain directory cannot do both, so the trees here have none, and THREAD
//! is asked of leaders only.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::{Task, TaskAssembler};
use taskdiag_proto::{Group, Request, Strategy, BASE_F_KTHREAD, BASE_F_LEADER};

use super::{clock_ticks, ProcReader, ProcfsError};

/// A temporary directory laid out like /proc; removed on drop.
struct FakeProc {
    root: PathBuf,
}

/// One task's files.
struct Proc<'a> {
    pid: u32,
    tgid: u32,
    ppid: u32,
    comm: &'a str,
    uid: u32,
    /// PF_* flags (stat field 9).
    flags: u32,
    /// Has an address space (Vm* lines in status).
    mm: bool,
    threads: u32,
    start: u64,
}

impl Default for Proc<'_> {
    fn default() -> Self {
        Proc {
            pid: 0,
            tgid: 0,
            ppid: 1,
            comm: "task",
            uid: 1000,
            flags: 0x0040_0100,
            mm: true,
            threads: 1,
            start: 5000,
        }
    }
}

impl Proc<'_> {
    /// /proc/PID/stat, with fields 3 to 52 as Linux 6.18 prints them.
    fn stat(&self) -> String {
        format!(
            "{} ({}) S {} {} {} 34816 {} {} 120 0 2 0 3 1 0 0 20 0 {} 0 {} 5771264 224 \
             18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
            self.pid,
            self.comm,
            self.ppid,
            self.tgid,
            self.tgid,
            self.tgid,
            self.flags,
            self.threads,
            self.start
        )
    }

    /// /proc/PID/status, the lines the reader uses and a few it skips.
    fn status(&self) -> String {
        let u = self.uid;
        let mut s = format!(
            "Name:\t{}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{}\nNgid:\t0\nPid:\t{}\n\
             PPid:\t{}\nTracerPid:\t0\nUid:\t{u}\t{u}\t{u}\t{u}\nGid:\t100\t100\t100\t100\n\
             FDSize:\t64\nGroups:\t4 27 \nNStgid:\t{}\nNSpid:\t{}\n",
            self.comm, self.tgid, self.pid, self.ppid, self.tgid, self.pid
        );
        if self.mm {
            s.push_str(
                "VmPeak:\t    8760 kB\nVmSize:\t    8728 kB\nVmLck:\t       0 kB\n\
                 VmPin:\t       0 kB\nVmHWM:\t    5120 kB\nVmRSS:\t    5120 kB\n\
                 RssAnon:\t    1792 kB\nRssFile:\t    3328 kB\nRssShmem:\t       0 kB\n\
                 VmData:\t    1808 kB\nVmStk:\t     132 kB\nVmExe:\t     892 kB\n\
                 VmLib:\t    1816 kB\nVmPTE:\t      56 kB\nVmSwap:\t       0 kB\n",
            );
        }
        s.push_str(&format!(
            "Threads:\t{}\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
             CapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n\
             voluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t3\n",
            self.threads
        ));
        s
    }
}

const MAPS: &str = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1835077                    /usr/bin/sleep
7ffd5e9d6000-7ffd5e9f7000 rw-p 00000000 00:00 0                          [stack]
";

impl FakeProc {
    fn new() -> FakeProc {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "taskdiag-fake-proc-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("temporary directory");
        FakeProc { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Writes `rel` (making its directories).
    fn file(&self, rel: &str, content: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, content).expect("write");
    }

    fn dir(&self, rel: &str) {
        std::fs::create_dir_all(self.path(rel)).expect("mkdir");
    }

    /// A task's stat, status and cmdline in `dir` (`PID` or `PID/task/TID`).
    fn task_files(&self, dir: &str, t: &Proc, cmdline: &[u8]) {
        self.file(&format!("{dir}/stat"), t.stat());
        self.file(&format!("{dir}/status"), t.status());
        self.file(&format!("{dir}/cmdline"), cmdline);
    }

    /// A process with its leader and `tids` as threads (leader included), its children file
    /// (on the leader) and its maps.
    fn process(&self, p: Proc, tids: &[u32], children: &str, cmdline: &[u8]) {
        let pid = p.pid;
        let p = Proc {
            tgid: pid,
            threads: tids.len() as u32,
            ..p
        };
        self.task_files(&pid.to_string(), &p, cmdline);
        // Every task has a maps file; one without an address space has an empty one.
        self.file(&format!("{pid}/maps"), if p.mm { MAPS } else { "" });
        for &tid in tids {
            let t = Proc { pid: tid, ..p };
            let dir = format!("{pid}/task/{tid}");
            self.task_files(&dir, &t, cmdline);
            let kids = if tid == pid { children } else { "" };
            self.file(&format!("{dir}/children"), kids);
        }
    }

    /// init (1), a two-thread process with a hostile name (42, threads 42 and 43) and a
    /// kernel thread (100, child of 2), plus the non-numeric entries /proc has.
    fn standard() -> FakeProc {
        let f = FakeProc::new();
        f.process(
            Proc {
                pid: 1,
                ppid: 0,
                comm: "init",
                uid: 0,
                ..Proc::default()
            },
            &[1],
            "42 100 ",
            b"/sbin/init\0",
        );
        f.process(
            Proc {
                pid: 42,
                comm: "(a) b)",
                start: 7777,
                ..Proc::default()
            },
            &[42, 43],
            "",
            b"sleep\x00100\x00",
        );
        f.process(
            Proc {
                pid: 100,
                ppid: 2,
                comm: "kworker/0:1",
                uid: 0,
                flags: 0x0420_8060,
                mm: false,
                ..Proc::default()
            },
            &[100],
            "",
            b"",
        );
        f.file("meminfo", "MemTotal: 1 kB\n");
        f.dir("sys/kernel");
        symlink("42", f.path("self")).expect("symlink");
        f
    }

    fn reader(&self) -> ProcReader {
        let mut r = ProcReader::open_unchecked(&self.root).expect("open the fake /proc");
        r.set_workers(1);
        r
    }
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn dump(r: &ProcReader, strategy: Strategy, pid: u32, show: u64) -> Result<Vec<Task>, ProcfsError> {
    let mut buf = Vec::new();
    r.dump(&Request::new(strategy, pid, show), &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    })?;
    let mut asm = TaskAssembler::new();
    Ok(Messages::new(&buf)
        .filter_map(|m| asm.push(&m.expect("message")).expect("assemble"))
        .collect())
}

fn ids(tasks: &[Task]) -> Vec<(u32, u32)> {
    tasks.iter().map(|t| (t.pid, t.tgid)).collect()
}

const ALL_GROUPS: u64 = (1 << Group::Base as u16)
    | (1 << Group::Cred as u16)
    | (1 << Group::Stat as u16)
    | (1 << Group::Statm as u16)
    | (1 << Group::Cmdline as u16)
    | (1 << Group::Vma as u16);

#[test]
fn every_group_of_every_process_reads_as_written() {
    let f = FakeProc::standard();
    let t = dump(&f.reader(), Strategy::All, 0, ALL_GROUPS).expect("dump");
    assert_eq!(ids(&t), [(1, 1), (42, 42), (100, 100)]);

    let p = &t[1];
    let base = p.base.as_ref().expect("BASE");
    assert_eq!(base.comm, b"(a) b)");
    assert_eq!((base.rec.ppid, base.rec.pgid, base.rec.sid), (1, 42, 42));
    assert_eq!((base.rec.tty_nr, base.rec.tpgid), (34816, 42));
    assert_eq!(base.rec.flags, BASE_F_LEADER);
    assert_eq!(
        base.rec.start_time_ns,
        7777 * (1_000_000_000 / clock_ticks())
    );
    let cred = p.cred.as_ref().expect("CRED");
    assert_eq!(
        (cred.rec.uid, cred.rec.fsuid, cred.rec.egid),
        (1000, 1000, 100)
    );
    assert_eq!(cred.rec.cap_bset, 0x1ff_ffff_ffff);
    assert_eq!(cred.groups, [4, 27]);
    let stat = p.stat.expect("STAT");
    assert_eq!((stat.threads, stat.nvcsw, stat.nivcsw), (2, 150, 3));
    assert_eq!((stat.minflt, stat.majflt), (120, 2));
    assert_eq!(p.statm.expect("STATM").vm_size, 8728 * 1024);
    assert_eq!(p.cmdline.as_deref(), Some(&b"sleep\x00100\x00"[..]));
    let vmas = p.vmas.as_ref().expect("VMA");
    let names: Vec<&[u8]> = vmas.iter().map(|v| v.name.as_slice()).collect();
    assert_eq!(names, [&b"/usr/bin/sleep"[..], b"[stack]"]);

    // A kernel thread: flagged, and no address space, so no STATM, CMDLINE or VMA.
    let k = &t[2];
    let kb = k.base.as_ref().expect("BASE");
    assert_eq!(
        (kb.comm.as_slice(), kb.rec.flags),
        (&b"kworker/0:1"[..], BASE_F_KTHREAD | BASE_F_LEADER)
    );
    assert_eq!((k.statm, &k.cmdline, &k.vmas), (None, &None, &None));
    assert!(k.errors.is_empty());
}

#[test]
fn threads_come_in_tid_order_and_thread_asks_a_leader() {
    let f = FakeProc::standard();
    let r = f.reader();
    let base = Group::Base.flag();
    let t = dump(&r, Strategy::AllThread, 0, base).expect("dump");
    assert_eq!(ids(&t), [(1, 1), (42, 42), (43, 42), (100, 100)]);
    let flags: Vec<u8> = t
        .iter()
        .map(|t| t.base.as_ref().expect("BASE").rec.flags & BASE_F_LEADER)
        .collect();
    assert_eq!(flags, [BASE_F_LEADER, BASE_F_LEADER, 0, BASE_F_LEADER]);
    let t = dump(&r, Strategy::Thread, 42, base).expect("dump");
    assert_eq!(ids(&t), [(42, 42), (43, 42)]);
    let t = dump(&r, Strategy::One, 42, base).expect("dump");
    assert_eq!(ids(&t), [(42, 42)]);
}

#[test]
fn children_are_checked_against_their_parent() {
    let f = FakeProc::standard();
    // init's children file lists 100, but 100's stat names 2 as its parent (reparented after
    // the children file was read): only 42 is a child.
    let t = dump(&f.reader(), Strategy::Children, 1, Group::Base.flag()).expect("dump");
    assert_eq!(ids(&t), [(42, 42)]);
}

#[test]
fn missing_pids_are_no_such_task() {
    let f = FakeProc::standard();
    let r = f.reader();
    for s in [Strategy::One, Strategy::Thread, Strategy::Children] {
        let e = dump(&r, s, 999, Group::Base.flag()).expect_err("no task 999");
        assert!(
            matches!(e, ProcfsError::NoSuchTask { pid: 999 }),
            "{s:?}: {e}"
        );
    }
}

#[test]
fn tasks_that_vanish_between_two_opens_are_skipped() {
    let f = FakeProc::standard();
    // 50 exited before its status was opened: its directory is listed, its files are gone.
    f.dir("50");
    // 51 exited between the open of its status and the open of its stat (ENOENT).
    f.file(
        "51/status",
        Proc {
            pid: 51,
            tgid: 51,
            ..Proc::default()
        }
        .status(),
    );
    symlink("/nonexistent/stat", f.path("51/stat")).expect("symlink");
    // 52's thread 53 was listed in task/ and exited before its files were opened.
    f.process(
        Proc {
            pid: 52,
            ..Proc::default()
        },
        &[52],
        "",
        b"x\0",
    );
    f.dir("52/task/53");
    // 54 lost its cmdline only (exited after stat and status were opened).
    f.process(
        Proc {
            pid: 54,
            ..Proc::default()
        },
        &[54],
        "",
        b"y\0",
    );
    std::fs::remove_file(f.path("54/cmdline")).expect("rm");

    let r = f.reader();
    let t = dump(&r, Strategy::All, 0, ALL_GROUPS).expect("dump");
    assert_eq!(ids(&t), [(1, 1), (42, 42), (52, 52), (100, 100)]);
    let t = dump(
        &r,
        Strategy::AllThread,
        0,
        Group::Base.flag() | Group::Stat.flag(),
    )
    .expect("dump");
    assert_eq!(
        ids(&t),
        [(1, 1), (42, 42), (43, 42), (52, 52), (54, 54), (100, 100)]
    );
    for pid in [50, 51] {
        let e = dump(&r, Strategy::One, pid, Group::Base.flag()).expect_err("gone");
        assert!(matches!(e, ProcfsError::NoSuchTask { .. }), "{e}");
    }
    let mut out = Vec::new();
    assert!(!r
        .task_message(51, None, Group::Base.flag(), &mut out)
        .expect("read"));
    assert!(out.is_empty());
}

#[test]
fn malformed_files_are_errors_that_name_the_path() {
    let f = FakeProc::standard();
    f.file(
        "60/status",
        Proc {
            pid: 60,
            tgid: 60,
            ..Proc::default()
        }
        .status(),
    );
    f.file("60/stat", "60 (truncated) S 1 60\n");
    let e = dump(&f.reader(), Strategy::All, 0, Group::Base.flag()).expect_err("bad stat");
    match &e {
        ProcfsError::Parse { path, .. } => assert_eq!(path, &f.path("60/stat")),
        other => panic!("{other}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("{}: ", f.path("60/stat").display())),
        "{msg}"
    );

    let f = FakeProc::standard();
    f.file("61/status", "Name:\tx\nTgid:\t61\n");
    f.file(
        "61/stat",
        Proc {
            pid: 61,
            tgid: 61,
            ..Proc::default()
        }
        .stat(),
    );
    let e = dump(&f.reader(), Strategy::One, 61, Group::Base.flag()).expect_err("bad status");
    assert!(
        matches!(&e, ProcfsError::Parse { path, .. } if path == &f.path("61/status")),
        "{e}"
    );
}

#[test]
fn the_namespace_check_reads_self_status() {
    let f = FakeProc::standard();
    assert!(f.reader().check_namespace().is_ok(), "NSpid has one level");

    let nested = FakeProc::new();
    nested.file(
        "self/status",
        "Tgid:\t7\nUid:\t0\t0\t0\t0\nNSpid:\t4242\t7\n",
    );
    let e = nested.reader().check_namespace().expect_err("nested");
    assert!(
        matches!(e, ProcfsError::ForeignPidNamespace { levels: 2, .. }),
        "{e}"
    );

    let empty = FakeProc::new();
    let e = empty.reader().check_namespace().expect_err("no self");
    assert!(
        matches!(e, ProcfsError::ForeignPidNamespace { levels: 0, .. }),
        "{e}"
    );
}

#[test]
fn a_missing_root_is_an_error_naming_it() {
    let root = Path::new("/nonexistent/taskdiag-proc");
    match ProcReader::open_unchecked(root) {
        Err(ProcfsError::Io { path, source }) => {
            assert_eq!(path, root);
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened {}", root.display()),
    }
}
