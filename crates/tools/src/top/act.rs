//! What top's `k` and `r` keys do to a task: send a signal through a pidfd, after checking
//! that the pid still names the task the screen showed (same start time), so a pid reused
//! since the last refresh is never hit; and change a nice value.
//!
//! The pidfd pins the process from the moment it is opened, so the check and the signal
//! cannot race with the pid's reuse. Kernels without pidfds (before 5.3) fall back to
//! `kill(2)`, as procps does.

use std::io;

use crate::signal::{pidfd_open, pidfd_send, proc_start_ticks};

/// Errors of signalling or renicing a task.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// The pid now names another task than the one shown.
    #[error("pid {pid} is no longer the task shown (it exited and the pid was reused)")]
    Reused {
        /// The pid.
        pid: u32,
    },
    /// A system call failed.
    #[error("pid {pid}: {source}")]
    Sys {
        /// The pid.
        pid: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Sends `sig` to process `pid`. When `expect` gives the task's start time (ns since boot, at
/// tick resolution, as the snapshot had it) and tick length, the pid must still name a task
/// started then.
pub fn signal(pid: u32, sig: i32, expect: Option<(u64, u64)>) -> Result<(), ActError> {
    let sys = |source: io::Error| ActError::Sys { pid, source };
    let fd = match pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            // SAFETY: kill has no memory-safety preconditions.
            let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
            return if r == 0 {
                Ok(())
            } else {
                Err(sys(io::Error::last_os_error()))
            };
        }
        Err(e) => return Err(sys(e)),
    };
    if let Some((start_ns, ns_per_tick)) = expect {
        let want = start_ns / ns_per_tick.max(1);
        match proc_start_ticks(pid) {
            Some(t) if t == want => {}
            _ => return Err(ActError::Reused { pid }),
        }
    }
    pidfd_send(&fd, sig, None).map_err(sys)
}

/// Sets the nice value of process `pid` (`setpriority(PRIO_PROCESS, ...)`).
pub fn renice(pid: u32, nice: i32) -> Result<(), ActError> {
    // SAFETY: setpriority has no memory-safety preconditions.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, nice) };
    if r != 0 {
        return Err(ActError::Sys {
            pid,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn signals_a_child_and_refuses_a_wrong_start_time() {
        let mut child = Command::new("sleep").arg("100").spawn().expect("sleep");
        let pid = child.id();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ticks = proc_start_ticks(pid).expect("start time");
        let hz = crate::snapshot::clock_ticks();
        let tick = 1_000_000_000 / hz;
        let wrong = signal(pid, libc::SIGTERM, Some(((ticks + 5) * tick, tick)));
        assert!(matches!(wrong, Err(ActError::Reused { .. })), "{wrong:?}");
        renice(pid, 7).expect("renice");
        signal(pid, libc::SIGTERM, Some((ticks * tick, tick))).expect("signal");
        let st = child.wait().expect("wait");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGTERM));
        assert!(signal(pid, libc::SIGTERM, None).is_err(), "a reaped pid");
    }
}
