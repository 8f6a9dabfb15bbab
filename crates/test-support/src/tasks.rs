//! Reading /proc while tasks and threads come and go.
//!
//! Any task may exit between listing a directory and reading a file in it, or between two
//! reads: the file is then gone (ENOENT), or the task is (ESRCH). The readers here return
//! `None` (or skip the task) in that case and panic, naming the file, on any other error. They
//! parse only what tests need to check the program under test; taskdiag's own parsers are in
//! crates/procfs.

use std::io;
use std::path::Path;

/// Whether `e` means the task went away (its files vanish with it).
pub fn vanished(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH))
}

/// The bytes of `path`; `None` if its task vanished.
pub fn read(path: impl AsRef<Path>) -> Option<Vec<u8>> {
    let path = path.as_ref();
    match std::fs::read(path) {
        Ok(b) => Some(b),
        Err(e) if vanished(&e) => None,
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

/// [`read`] as text (lossy).
pub fn read_string(path: impl AsRef<Path>) -> Option<String> {
    read(path).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The numeric entries of directory `dir` (pids under /proc, tids under /proc/PID/task),
/// sorted; empty if the directory's task vanished.
pub fn numeric_entries(dir: impl AsRef<Path>) -> Vec<u32> {
    let dir = dir.as_ref();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if vanished(&e) => return Vec::new(),
        Err(e) => panic!("listing {}: {e}", dir.display()),
    };
    let mut v: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// Every process in this /proc.
pub fn pids() -> Vec<u32> {
    numeric_entries("/proc")
}

/// The thread ids of process `pid` (empty if it is gone).
pub fn tids(pid: u32) -> Vec<u32> {
    numeric_entries(format!("/proc/{pid}/task"))
}

/// The children of process `pid`, over all its threads.
pub fn children(pid: u32) -> Vec<u32> {
    tids(pid)
        .into_iter()
        .filter_map(|t| read_string(format!("/proc/{pid}/task/{t}/children")))
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The fields of a `stat` file after the name: index 0 is field 3 (state), index 1 field 4
/// (ppid), 11 and 12 utime and stime, 15 priority, 16 nice.
pub fn stat_fields(text: &str) -> Vec<String> {
    let rest = text.rfind(')').map_or("", |close| &text[close + 1..]);
    rest.split_whitespace().map(String::from).collect()
}

/// [`stat_fields`] of /proc/PID/stat; `None` if the task vanished.
pub fn stat(pid: u32) -> Option<Vec<String>> {
    read_string(format!("/proc/{pid}/stat")).map(|s| stat_fields(&s))
}

/// [`stat_fields`] of thread `tid` of process `pid`.
pub fn task_stat(pid: u32, tid: u32) -> Option<Vec<String>> {
    read_string(format!("/proc/{pid}/task/{tid}/stat")).map(|s| stat_fields(&s))
}

/// The state letter of task `pid` (R, S, D, T, t, Z, X, ...).
pub fn state(pid: u32) -> Option<char> {
    stat(pid)?.first()?.chars().next()
}

/// When task `pid` started, in clock ticks since boot (stat's field 22); `None` if it vanished.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid)?.get(19)?.parse().ok()
}

/// The time since boot now, in clock ticks (/proc/uptime, the clock of [`start_ticks`]),
/// rounded down.
pub fn boot_ticks() -> u64 {
    let up = read("/proc/uptime").expect("/proc/uptime");
    let seconds = taskdiag_procfs::system::parse_uptime(&up).expect("/proc/uptime");
    // (Hundredths, as printed: rounding undoes the float's error before the division rounds
    // down.)
    let hundredths = (seconds * 100.0).round() as u64;
    hundredths * taskdiag_procfs::clock_ticks() / 100
}

/// utime + stime of task `pid`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let f = stat(pid)?;
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The name of task `pid` (its `comm` without the newline), as bytes.
pub fn comm_bytes(pid: u32) -> Option<Vec<u8>> {
    let mut c = read(format!("/proc/{pid}/comm"))?;
    if c.last() == Some(&b'\n') {
        c.pop();
    }
    Some(c)
}

/// [`comm_bytes`] as text (lossy).
pub fn comm(pid: u32) -> Option<String> {
    comm_bytes(pid).map(|c| String::from_utf8_lossy(&c).into_owned())
}

/// The value of field `name` in a `status` file's text (after the colon, trimmed).
pub fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(str::trim)
    })
}

/// /proc/PID/status; `None` if the task vanished.
pub fn status(pid: u32) -> Option<String> {
    read_string(format!("/proc/{pid}/status"))
}

/// The `status` of every thread of process `pid` that is still there when read: a thread that
/// exits between the listing and the read is left out.
pub fn thread_statuses(pid: u32) -> Vec<(u32, String)> {
    tids(pid)
        .into_iter()
        .filter_map(|t| Some((t, read_string(format!("/proc/{pid}/task/{t}/status"))?)))
        .collect()
}

/// Whether process `pid` is done with the signals sent to it: gone, a zombie, or every thread
/// asleep or stopped with no signal pending and not exiting. (A signal's effect is not
/// synchronous with kill(): this is the state to wait for before looking at its effect.)
pub fn quiet(pid: u32) -> bool {
    const PF_EXITING: u64 = 0x4;
    if matches!(state(pid), None | Some('Z' | 'X')) {
        return true;
    }
    tids(pid).into_iter().all(|t| {
        let Some(st) = task_stat(pid, t) else {
            return true;
        };
        let Some(status) = read_string(format!("/proc/{pid}/task/{t}/status")) else {
            return true;
        };
        let state = st[0].as_str();
        let flags: u64 = st.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
        let none_pending = ["SigPnd", "ShdPnd"].iter().all(|k| {
            status_field(&status, k).is_some_and(|v| v.trim_start_matches('0').is_empty())
        });
        matches!(state, "Z" | "X")
            || (matches!(state, "S" | "T" | "t" | "I") && none_pending && flags & PF_EXITING == 0)
    })
}

/// A field of /proc/PID/status given in kB (VmRSS, VmHWM) or as a count (Threads).
pub fn status_number(pid: u32, name: &str) -> Option<u64> {
    let s = status(pid)?;
    status_field(&s, name)?
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The kernel's pid_max.
pub fn pid_max() -> u32 {
    read_string("/proc/sys/kernel/pid_max")
        .and_then(|s| s.trim().parse().ok())
        .expect("/proc/sys/kernel/pid_max")
}

/// A pid no process has (one past pid_max).
pub fn missing_pid() -> u32 {
    pid_max() + 1
}

/// Whether the running kernel is at least `major.minor` (from /proc/sys/kernel/osrelease).
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let rel = std::fs::read("/proc/sys/kernel/osrelease").expect("/proc/sys/kernel/osrelease");
    taskdiag_procfs::system::kernel_version(&rel).expect("a kernel version") >= (major, minor)
}

/// Where the unified cgroup hierarchy is mounted whole (a cgroup2 mount whose root is the
/// hierarchy's `/`, as /proc/self/mountinfo shows it), if it is.
pub fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let f: Vec<&str> = pre.split(' ').collect();
        (post.starts_with("cgroup2 ") && f.get(3) == Some(&"/"))
            .then(|| f.get(4).map(Into::into))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_start_after_the_last_parenthesis() {
        let f = stat_fields("42 (a) (b) c) S 1 42 42 0 -1");
        assert_eq!(f[0], "S");
        assert_eq!(f[1], "1");
    }

    #[test]
    fn this_process_is_readable_and_a_missing_one_is_none() {
        let me = std::process::id();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert_eq!(
            task_stat(me, tid).map(|f| f[0].clone()).as_deref(),
            Some("R")
        );
        assert!(state(me).is_some());
        assert!(tids(me).contains(&me));
        assert!(status_number(me, "Threads").is_some_and(|n| n >= 1));
        assert_eq!(stat(missing_pid()), None);
        assert!(quiet(missing_pid()));
        assert!(tids(missing_pid()).is_empty());
        assert_eq!(
            status_field("Uid:\t0\t0\t0\t0\n", "Uid"),
            Some("0\t0\t0\t0")
        );
    }

    #[test]
    fn a_task_born_after_a_boot_time_reading_starts_no_earlier() {
        let before = start_ticks(std::process::id()).expect("our own stat");
        for _ in 0..50 {
            let since = boot_ticks();
            assert!(before <= since, "we started at {before}, now is {since}");
            let mut child = std::process::Command::new("true")
                .spawn()
                .expect("spawn true");
            // (Not waited for yet, it is at least a zombie, whose stat keeps its start.)
            let born = start_ticks(child.id()).expect("the child's stat");
            assert!(born >= since, "born at {born}, before {since}");
            child.wait().expect("wait");
        }
    }
}
