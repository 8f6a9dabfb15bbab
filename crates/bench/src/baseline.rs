//! The procfs floor: the article's `task_proc_all` as a raw-syscall loop, so the baseline
//! measures /proc and not library overhead: `getdents64` on /proc, then per process and file
//! `open`, one `read` of up to 16 KiB (none with `noread`; maps and smaps are read to their
//! end), `close`. The per-thread variant
//! lists `/proc/PID/task` of each process and does the same for `/proc/PID/task/TID/FILE`.

use std::io;

/// What one loop saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoopCount {
    /// Processes (or threads, per thread) listed.
    pub tasks: u64,
    /// Opens that failed (tasks that vanished).
    pub vanished: u64,
}

/// Scratch buffers of one loop.
struct Loop<'a> {
    files: &'a [&'a str],
    noread: bool,
    buf: Vec<u8>,
    count: LoopCount,
}

/// Calls `f` with each all-digit name in the directory `path` (NUL-terminated).
fn for_each_numeric(path: &[u8], mut f: impl FnMut(&[u8])) -> io::Result<()> {
    debug_assert_eq!(path.last(), Some(&0));
    // SAFETY: `path` is NUL-terminated.
    let dir = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut dents = vec![0u8; 1 << 16];
    loop {
        // SAFETY: getdents64 writes at most dents.len() bytes into dents.
        let n =
            unsafe { libc::syscall(libc::SYS_getdents64, dir, dents.as_mut_ptr(), dents.len()) };
        if n <= 0 {
            break;
        }
        let mut pos = 0usize;
        while pos + 19 <= n as usize {
            let reclen = u16::from_ne_bytes([dents[pos + 16], dents[pos + 17]]) as usize;
            let name = &dents[pos + 19..(pos + reclen).min(n as usize)];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            pos += reclen.max(1);
            if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
                f(name);
            }
        }
    }
    // SAFETY: closing the directory fd we opened.
    unsafe { libc::close(dir) };
    Ok(())
}

impl Loop<'_> {
    /// Opens, reads and closes each file under `dir` (a path ending in '/').
    fn files_of(&mut self, dir: &[u8]) {
        self.count.tasks += 1;
        let mut path = [0u8; 160];
        for f in self.files {
            let l = dir.len() + f.len();
            if l + 1 > path.len() {
                continue;
            }
            path[..dir.len()].copy_from_slice(dir);
            path[dir.len()..l].copy_from_slice(f.as_bytes());
            path[l] = 0;
            // SAFETY: `path` is NUL-terminated at `l`.
            let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY) };
            if fd < 0 {
                self.count.vanished += 1;
                continue;
            }
            // Memory maps are seq files of any length: read them to their end.
            let whole = f.ends_with("maps");
            while !self.noread {
                // SAFETY: reads at most buf.len() bytes into buf.
                let n = unsafe { libc::read(fd, self.buf.as_mut_ptr().cast(), self.buf.len()) };
                if !whole || n <= 0 {
                    break;
                }
            }
            // SAFETY: closing the fd we opened.
            unsafe { libc::close(fd) };
        }
    }
}

/// Runs the loop over `files` (e.g. `["stat", "cmdline"]`) of every process, or with
/// `threads` of every thread (`/proc/PID/task/TID/FILE`).
pub fn proc_loop(files: &[&str], noread: bool, threads: bool) -> io::Result<LoopCount> {
    let mut lp = Loop {
        files,
        noread,
        buf: vec![0u8; 16384],
        count: LoopCount::default(),
    };
    let mut dir = Vec::with_capacity(64);
    for_each_numeric(b"/proc\0", |pid| {
        dir.clear();
        dir.extend_from_slice(b"/proc/");
        dir.extend_from_slice(pid);
        if !threads {
            dir.push(b'/');
            lp.files_of(&dir);
            return;
        }
        dir.extend_from_slice(b"/task\0");
        let mut tids = Vec::new();
        if for_each_numeric(&dir, |tid| tids.push(tid.to_vec())).is_err() {
            lp.count.vanished += 1;
            return;
        }
        let base = dir.len() - 1;
        for tid in tids {
            dir.truncate(base);
            dir.push(b'/');
            dir.extend_from_slice(&tid);
            dir.push(b'/');
            lp.files_of(&dir);
        }
    })?;
    Ok(lp.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_count_this_process_and_its_threads() {
        let stop = std::sync::Arc::new(std::sync::Barrier::new(2));
        let s2 = stop.clone();
        let t = std::thread::spawn(move || {
            s2.wait();
        });
        let procs = proc_loop(&["stat"], false, false).unwrap();
        let threads = proc_loop(&["stat"], false, true).unwrap();
        stop.wait();
        t.join().unwrap();
        let in_proc = std::fs::read_dir("/proc")
            .unwrap()
            .filter(|e| {
                e.as_ref().is_ok_and(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                })
            })
            .count() as u64;
        // Processes come and go on a live machine; the counts are of the same order.
        assert!(procs.tasks.abs_diff(in_proc) < 50, "{procs:?} vs {in_proc}");
        // This test process alone has at least two threads.
        assert!(threads.tasks > procs.tasks, "{threads:?} vs {procs:?}");
    }
}
