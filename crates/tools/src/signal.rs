//! Signals for `taskdiag pkill` and `top`: the one table of signal names, read as procps reads
//! them, and delivery through pidfds so that a pid reused since the snapshot is never
//! signalled.
//!
//! Delivery opens a pidfd for the pid (`pidfd_open`), then checks that the process holding
//! the pid *after* the pidfd was opened is still the one the snapshot saw (same start time).
//! A pid is held by one process from its fork until it is reaped, so if the start time still
//! matches, the process was there continuously and the pidfd refers to it; the signal then
//! goes through the pidfd (`pidfd_send_signal`), which cannot reach another process even if
//! the pid is reused in between. If the start time differs or the pid is gone, nothing is
//! sent. Which processes to signal, and what to print, is the caller's business.

use std::collections::HashMap;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use taskdiag_procfs::parse::parse_stat;

use crate::cnum::strtol;

/// `si_code` of a signal sent with `sigqueue` (SI_QUEUE in <asm-generic/siginfo.h>).
const SI_QUEUE: i32 = -1;

/// Signal names procps knows (without "SIG"), with their numbers on Linux, in procps' order.
const SIGNALS: &[(&str, i32)] = &[
    ("ABRT", libc::SIGABRT),
    ("ALRM", libc::SIGALRM),
    ("BUS", libc::SIGBUS),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("FPE", libc::SIGFPE),
    ("HUP", libc::SIGHUP),
    ("ILL", libc::SIGILL),
    ("INT", libc::SIGINT),
    ("KILL", libc::SIGKILL),
    ("PIPE", libc::SIGPIPE),
    ("POLL", libc::SIGPOLL),
    ("PROF", libc::SIGPROF),
    ("PWR", libc::SIGPWR),
    ("QUIT", libc::SIGQUIT),
    ("SEGV", libc::SIGSEGV),
    ("STKFLT", libc::SIGSTKFLT),
    ("STOP", libc::SIGSTOP),
    ("SYS", libc::SIGSYS),
    ("TERM", libc::SIGTERM),
    ("TRAP", libc::SIGTRAP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("VTALRM", libc::SIGVTALRM),
    ("WINCH", libc::SIGWINCH),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    // Other names for three of them, which procps accepts too.
    ("CLD", libc::SIGCHLD),
    ("IO", libc::SIGPOLL),
    ("IOT", libc::SIGABRT),
];

/// A signal name or number as procps reads it (`signal_name_to_number`, which pkill and top's
/// `k` command use): `HUP`, `SIGHUP`, `hup`, `1`, `RTMIN+2`, `CLD`, `IO`, `IOT`, `EXIT`/`NULL`
/// for 0; -1 when it is not one.
pub fn signal_number(name: &[u8]) -> i32 {
    let rtmin = i64::from(libc::SIGRTMIN());
    let mut name = name;
    if name.len() >= 3 && name[..3].eq_ignore_ascii_case(b"SIG") {
        name = &name[3..];
    }
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    if let Some(&(_, n)) = SIGNALS.iter().find(|(s, _)| is(s)) {
        return n;
    }
    if is("RTMIN") {
        return rtmin as i32;
    }
    if is("EXIT") || is("NULL") {
        return 0;
    }
    let mut offset = 0;
    if name.len() >= 6 && name[..6].eq_ignore_ascii_case(b"RTMIN+") {
        name = &name[6..];
        offset = rtmin;
    }
    let (val, used) = strtol(name, 10);
    if used == 0 || used != name.len() {
        return -1;
    }
    if val.wrapping_add(rtmin) > 127 {
        return -1;
    }
    val.wrapping_add(offset) as i32
}

/// Why a process was not signalled.
#[derive(Debug)]
pub enum Outcome {
    /// The signal was delivered (or, for a zombie, accepted).
    Sent,
    /// The process is gone, or its pid now belongs to another process: nothing was sent.
    Gone,
    /// The kernel refused (permission, invalid signal, ...).
    Failed(io::Error),
}

/// Opens a pidfd for process `pid` (a thread-group leader).
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new descriptor or -1;
    // no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// siginfo_t as `sigqueue` fills it for SI_QUEUE (the kernel's 128-byte layout).
#[repr(C)]
struct QueueInfo {
    signo: i32,
    errno: i32,
    code: i32,
    pad: i32,
    pid: i32,
    uid: u32,
    value: i32,
    value_hi: i32,
    rest: [u64; 12],
}

const _: () = assert!(std::mem::size_of::<QueueInfo>() == 128);

/// Sends `sig` through `fd`; with `queue`, as `sigqueue` would (SI_QUEUE with that value).
pub fn pidfd_send(fd: &OwnedFd, sig: i32, queue: Option<i32>) -> io::Result<()> {
    let info = queue.map(|value| QueueInfo {
        signo: sig,
        errno: 0,
        code: SI_QUEUE,
        pad: 0,
        // SAFETY: getpid and getuid cannot fail and touch no memory.
        pid: unsafe { libc::getpid() },
        // SAFETY: as above.
        uid: unsafe { libc::getuid() },
        value,
        value_hi: 0,
        rest: [0; 12],
    });
    let ptr = info
        .as_ref()
        .map_or(std::ptr::null(), |i| i as *const QueueInfo);
    // SAFETY: `fd` is an open pidfd; `ptr` is null or points to a 128-byte siginfo that
    // lives until the call returns (the kernel copies it); flags are 0.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, ptr, 0u32) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Start time (clock ticks since boot) of the process holding `pid` now, from
/// /proc/PID/stat; `None` if there is none.
pub fn proc_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).ok().map(|s| s.starttime)
}

/// Whether /proc shows this process's own pid namespace (so /proc/PID is the process
/// with pid PID as we number it).
pub fn proc_is_ours() -> bool {
    let me = std::process::id().to_string();
    std::fs::read_link("/proc/self").is_ok_and(|p| p.as_os_str() == me.as_str())
}

/// How to learn which process holds a pid now (start time in clock ticks).
pub enum Holder {
    /// Read /proc/PID/stat (when /proc is our pid namespace's).
    Proc,
    /// A snapshot taken after the pidfds were opened: pid -> start ticks.
    Snapshot(HashMap<u32, u64>),
}

impl Holder {
    /// Start ticks of the process holding `pid` now.
    pub fn start_ticks(&self, pid: u32) -> Option<u64> {
        match self {
            Holder::Proc => proc_start_ticks(pid),
            Holder::Snapshot(m) => m.get(&pid).copied(),
        }
    }
}

/// Signals process `pid` if it is still the one that started at `start_ticks`: `fd` must
/// have been opened (with [`pidfd_open`]) *before* `holder` looked at the pid.
pub fn signal_if_same(
    fd: &OwnedFd,
    pid: u32,
    start_ticks: u64,
    holder: &Holder,
    sig: i32,
    queue: Option<i32>,
) -> Outcome {
    if holder.start_ticks(pid) != Some(start_ticks) {
        return Outcome::Gone;
    }
    match pidfd_send(fd, sig, queue) {
        Ok(()) => Outcome::Sent,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Outcome::Gone,
        Err(e) => Outcome::Failed(e),
    }
}

/// Opens a pidfd for `pid` and signals it if it is still the process that started at
/// `start_ticks` (checked through /proc).
pub fn signal_process(pid: u32, start_ticks: u64, sig: i32, queue: Option<i32>) -> Outcome {
    match pidfd_open(pid) {
        Ok(fd) => signal_if_same(&fd, pid, start_ticks, &Holder::Proc, sig, queue),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Outcome::Gone,
        Err(e) => Outcome::Failed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn names_and_numbers_as_procps_reads_them() {
        assert_eq!(signal_number(b"KILL"), 9);
        assert_eq!(signal_number(b"sigkill"), 9);
        assert_eq!(signal_number(b"SIGTERM"), 15);
        assert_eq!(signal_number(b"9"), 9);
        assert_eq!(signal_number(b"0"), 0);
        assert_eq!(signal_number(b"NULL"), 0);
        assert_eq!(signal_number(b"CLD"), libc::SIGCHLD);
        assert_eq!(signal_number(b"IO"), libc::SIGPOLL);
        assert_eq!(signal_number(b"IOT"), libc::SIGABRT);
        assert_eq!(signal_number(b"RTMIN"), libc::SIGRTMIN());
        assert_eq!(signal_number(b"rtmin+2"), libc::SIGRTMIN() + 2);
        assert_eq!(signal_number(b"FOO"), -1);
        assert_eq!(signal_number(b""), -1);
        assert_eq!(signal_number(b"9x"), -1);
        assert_eq!(signal_number(b"RTMIN+"), -1);
        // Anything up to 127 - SIGRTMIN is taken as a number, as procps does.
        assert_eq!(signal_number(b"93"), 93);
        assert_eq!(signal_number(b"94"), -1);
        assert_eq!(signal_number(b"-5"), -5);
    }

    #[test]
    fn every_name_of_the_table_reads_back_in_any_spelling() {
        for &(name, n) in SIGNALS {
            assert!((1..32).contains(&n), "{name}");
            assert_eq!(
                SIGNALS.iter().filter(|(m, _)| *m == name).count(),
                1,
                "{name}"
            );
            for spelled in [
                name.to_string(),
                format!("SIG{name}"),
                format!("sig{}", name.to_lowercase()),
            ] {
                assert_eq!(signal_number(spelled.as_bytes()), n, "{spelled}");
            }
        }
    }

    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn alive(c: &mut Child) -> bool {
        matches!(c.0.try_wait(), Ok(None))
    }

    fn wait_dead(c: &mut Child) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if !alive(c) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_different_start_time_is_never_signalled() {
        let mut c = Child(
            Command::new("sleep")
                .arg("60")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep"),
        );
        let pid = c.0.id();
        let start = proc_start_ticks(pid).expect("start time");
        // The snapshot says another process (started one tick later) had this pid: the
        // live process must not receive the signal.
        for wrong in [start + 1, start.saturating_sub(1), 0] {
            let out = signal_process(pid, wrong, libc::SIGKILL, None);
            assert!(matches!(out, Outcome::Gone), "{out:?}");
        }
        let fd = pidfd_open(pid).expect("pidfd");
        let mut other = HashMap::new();
        other.insert(pid, start + 7);
        let out = signal_if_same(
            &fd,
            pid,
            start,
            &Holder::Snapshot(other),
            libc::SIGKILL,
            None,
        );
        assert!(matches!(out, Outcome::Gone), "{out:?}");
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            alive(&mut c),
            "a process with another start time was killed"
        );
        // The right start time is signalled.
        let out = signal_process(pid, start, libc::SIGKILL, None);
        assert!(matches!(out, Outcome::Sent), "{out:?}");
        assert!(wait_dead(&mut c));
    }

    #[test]
    fn a_pidfd_of_a_reaped_process_reaches_no_one() {
        let mut c = Child(Command::new("sleep").arg("60").spawn().expect("sleep"));
        let pid = c.0.id();
        let start = proc_start_ticks(pid).expect("start time");
        let fd = pidfd_open(pid).expect("pidfd");
        let _ = c.0.kill();
        let _ = c.0.wait();
        // Whatever holds the pid now (nothing, or a newcomer), the old pidfd cannot reach
        // it and the check says the process is gone.
        let mut same = HashMap::new();
        same.insert(pid, start);
        let out = signal_if_same(
            &fd,
            pid,
            start,
            &Holder::Snapshot(same),
            libc::SIGTERM,
            None,
        );
        assert!(matches!(out, Outcome::Gone), "{out:?}");
        assert!(matches!(
            signal_process(pid, start, libc::SIGTERM, None),
            Outcome::Gone
        ));
    }

    #[test]
    fn queued_signals_carry_their_value() {
        // A child that waits for SIGUSR1 with sigwaitinfo and prints si_value.
        let script = "import signal,sys\n\
                      signal.pthread_sigmask(signal.SIG_BLOCK,[signal.SIGUSR1])\n\
                      print('ready',flush=True)\n\
                      i=signal.sigwaitinfo([signal.SIGUSR1])\n\
                      print(i.si_code, i.si_pid, i.si_uid, flush=True)\n";
        let mut c = Child(
            Command::new("python3")
                .args(["-c", script])
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3"),
        );
        use std::io::BufRead;
        let out = c.0.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(out).lines();
        assert_eq!(lines.next().expect("line").expect("read"), "ready");
        let pid = c.0.id();
        let start = proc_start_ticks(pid).expect("start");
        let r = signal_process(pid, start, libc::SIGUSR1, Some(4242));
        assert!(matches!(r, Outcome::Sent), "{r:?}");
        // SI_QUEUE, from this process and user, as sigqueue(3) would send it.
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let got = lines.next().expect("line").expect("read");
        assert_eq!(got, format!("-1 {} {uid}", std::process::id()));
    }
}
