//! A fake /proc for unit tests: a temporary directory holding, for a few made-up tasks, the
//! files the procfs reader reads (`stat`, `status`, `cmdline`, `maps`, `task/TID/`), written
//! from the fields a test cares about. `ProcReader::open_unchecked` reads it like a procfs, so
//! completion and the library facade are tested without root and without real processes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use taskdiag_procfs::ProcReader;

/// One made-up task.
#[derive(Debug, Clone)]
pub(crate) struct FakeTask {
    pub pid: u32,
    pub tgid: u32,
    pub ppid: u32,
    pub comm: &'static str,
    /// Start time in clock ticks after boot (/proc/PID/stat field 22).
    pub start_ticks: u64,
    /// Real, effective, saved and filesystem uid.
    pub uid: u32,
    pub groups: Vec<u32>,
    /// Kernel task flags (/proc/PID/stat field 9).
    pub flags: u32,
    pub cmdline: &'static [u8],
    /// /proc/PID/maps text (only written for a process, as threads share it).
    pub maps: &'static str,
}

impl FakeTask {
    /// A process `pid` (its own thread-group leader), child of 1.
    pub fn process(pid: u32) -> Self {
        FakeTask {
            pid,
            tgid: pid,
            ppid: 1,
            comm: "fake",
            start_ticks: 1000 + u64::from(pid),
            uid: 1000,
            groups: vec![],
            flags: 0x0040_0100,
            cmdline: b"fake\0--flag\0",
            maps: "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/fake\n",
        }
    }

    /// Thread `tid` of process `tgid`.
    pub fn thread(tid: u32, tgid: u32) -> Self {
        FakeTask {
            tgid,
            ..Self::process(tid)
        }
    }

    /// Its start time as BASE reports it: ticks in nanoseconds, at this host's clock rate.
    pub fn start_ns(&self) -> u64 {
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        self.start_ticks * 1_000_000_000 / u64::try_from(hz).unwrap_or(100)
    }

    fn stat(&self) -> String {
        // Fields 3.. of /proc/PID/stat; those not set here are 0.
        let mut f = vec!["0".to_string(); 50];
        let mut set = |n: usize, v: String| f[n - 3] = v;
        set(3, "S".into());
        set(4, self.ppid.to_string());
        set(5, self.tgid.to_string());
        set(6, self.tgid.to_string());
        set(8, "-1".into());
        set(9, self.flags.to_string());
        set(18, "20".into());
        set(20, "1".into());
        set(22, self.start_ticks.to_string());
        format!("{} ({}) {}\n", self.pid, self.comm, f.join(" "))
    }

    fn status(&self) -> String {
        let ids = |v: u32| format!("{v}\t{v}\t{v}\t{v}");
        let mut groups = String::new();
        for g in &self.groups {
            let _ = write!(groups, "{g} ");
        }
        let mut s = format!(
            "Name:\t{}\nTgid:\t{}\nPid:\t{}\nPPid:\t{}\nTracerPid:\t0\nUid:\t{}\nGid:\t{}\n\
             Groups:\t{groups}\nNSpid:\t{}\n",
            self.comm,
            self.tgid,
            self.pid,
            self.ppid,
            ids(self.uid),
            ids(self.uid),
            self.pid,
        );
        if self.flags & taskdiag_proto::PF_KTHREAD == 0 {
            s.push_str("VmPeak:\t    2048 kB\nVmSize:\t    1024 kB\nRssAnon:\t      64 kB\n");
        }
        s.push_str(
            "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
             CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n",
        );
        s
    }
}

/// A fake /proc in a temporary directory, removed when dropped.
pub(crate) struct FakeProc {
    root: PathBuf,
}

impl FakeProc {
    /// An empty one.
    pub fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "taskdiag-fake-proc-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&root).expect("creating a temporary directory");
        FakeProc { root }
    }

    /// One with these tasks.
    pub fn with(tasks: &[FakeTask]) -> Self {
        let p = Self::new();
        for t in tasks {
            p.add(t);
        }
        p
    }

    /// A reader of it.
    pub fn reader(&self) -> ProcReader {
        ProcReader::open_unchecked(&self.root).expect("opening the fake /proc")
    }

    /// Adds `t`: under /TGID/task/PID/, and for a leader under /PID/ too.
    pub fn add(&self, t: &FakeTask) {
        let write = |dir: &Path, with_maps: bool| {
            std::fs::create_dir_all(dir).expect("creating a task directory");
            std::fs::write(dir.join("stat"), t.stat()).expect("writing stat");
            std::fs::write(dir.join("status"), t.status()).expect("writing status");
            std::fs::write(dir.join("cmdline"), t.cmdline).expect("writing cmdline");
            if with_maps {
                std::fs::write(dir.join("maps"), t.maps).expect("writing maps");
            }
        };
        let process = self.root.join(t.tgid.to_string());
        let leader = t.pid == t.tgid;
        write(
            &process.join("task").join(t.pid.to_string()),
            leader && t.flags & taskdiag_proto::PF_KTHREAD == 0,
        );
        if leader {
            write(&process, t.flags & taskdiag_proto::PF_KTHREAD == 0);
        }
    }
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
