//! The load generator: N sleeping processes with M threads each, like the article's
//! `fork nproc [threads]`, removed again when the [`Spawned`] value is dropped.
//!
//! Children are forked from a single-threaded caller, make their extra threads, and sleep in
//! `pause()`. They die with their parent (`PR_SET_PDEATHSIG`), so a crash or Ctrl-C of the
//! benchmark does not leave tens of thousands of them behind; `Drop` kills exactly the pids it
//! forked and reaps them, and puts `kernel.pid_max` back if it was raised.

use std::io;

const PID_MAX: &str = "/proc/sys/kernel/pid_max";

/// Spawned sleeping processes; killed on drop.
pub struct Spawned {
    pids: Vec<libc::pid_t>,
    old_pid_max: Option<u64>,
}

extern "C" fn sleep_forever(_: *mut libc::c_void) -> *mut libc::c_void {
    loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    }
}

fn read_pid_max() -> io::Result<u64> {
    std::fs::read_to_string(PID_MAX)?
        .trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{PID_MAX}: {e}")))
}

impl Spawned {
    /// Forks `procs` processes with `threads` threads each (1 = no extra thread). The caller
    /// must be single-threaded. Raises `kernel.pid_max` if the tasks would not fit.
    pub fn new(procs: usize, threads: usize) -> io::Result<Self> {
        let threads = threads.max(1);
        let mut s = Spawned {
            pids: Vec::with_capacity(procs),
            old_pid_max: None,
        };
        let need = (procs * threads) as u64 * 2 + 10_000;
        let cur = read_pid_max()?;
        if cur < need {
            std::fs::write(PID_MAX, need.min(4_194_304).to_string())
                .map_err(|e| io::Error::new(e.kind(), format!("raising {PID_MAX}: {e}")))?;
            s.old_pid_max = Some(cur);
        }
        for _ in 0..procs {
            // SAFETY: the caller is single-threaded, so the child may call anything; it only
            // calls prctl, pthread_create and pause, and never returns.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(io::Error::last_os_error()); // `s` is dropped: children killed
            }
            if pid == 0 {
                // SAFETY: plain libc calls on valid arguments in the new process.
                unsafe {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    let mut attr: libc::pthread_attr_t = std::mem::zeroed();
                    libc::pthread_attr_init(&mut attr);
                    libc::pthread_attr_setstacksize(&mut attr, 64 * 1024);
                    for _ in 1..threads {
                        let mut t: libc::pthread_t = 0;
                        libc::pthread_create(&mut t, &attr, sleep_forever, std::ptr::null_mut());
                    }
                    sleep_forever(std::ptr::null_mut());
                }
            }
            s.pids.push(pid);
        }
        Ok(s)
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        for &p in &self.pids {
            // SAFETY: signalling and reaping our own children, by pid.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        for &p in &self.pids {
            let mut st = 0;
            // SAFETY: waitpid on our own child with a valid status pointer.
            unsafe { libc::waitpid(p, &mut st, 0) };
        }
        if let Some(old) = self.old_pid_max {
            let _ = std::fs::write(PID_MAX, old.to_string());
        }
    }
}
