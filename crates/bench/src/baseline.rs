//! The procfs floor: the article's `task_proc_all` as a raw-syscall loop, so the baseline
//! measures /proc and not library overhead: `getdents64` on /proc, then per process and file
//! `open`, one `read` of up to 16 KiB (none with `noread`), `close`.

use std::ffi::CString;
use std::io;

/// What one loop saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoopCount {
    /// Processes listed.
    pub tasks: u64,
    /// Opens that failed (processes that vanished).
    pub vanished: u64,
}

/// Runs the loop over `files` (e.g. `["stat", "cmdline"]`).
pub fn proc_loop(files: &[&str], noread: bool) -> io::Result<LoopCount> {
    let proc_ = CString::new("/proc").map_err(io::Error::other)?;
    // SAFETY: valid NUL-terminated path.
    let dir = unsafe { libc::open(proc_.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    if dir < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut dents = vec![0u8; 1 << 16];
    let mut buf = vec![0u8; 16384];
    let mut path = [0u8; 128];
    let mut count = LoopCount::default();
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
            let name = &dents[pos + 19..pos + reclen];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            pos += reclen.max(1);
            if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
                continue;
            }
            count.tasks += 1;
            for f in files {
                let l = 6 + name.len() + 1 + f.len();
                if l + 1 > path.len() {
                    continue;
                }
                path[..6].copy_from_slice(b"/proc/");
                path[6..6 + name.len()].copy_from_slice(name);
                path[6 + name.len()] = b'/';
                path[7 + name.len()..l].copy_from_slice(f.as_bytes());
                path[l] = 0;
                // SAFETY: `path` is NUL-terminated at `l`.
                let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY) };
                if fd < 0 {
                    count.vanished += 1;
                    continue;
                }
                if !noread {
                    // SAFETY: reads at most buf.len() bytes into buf.
                    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                }
                // SAFETY: closing the fd we opened.
                unsafe { libc::close(fd) };
            }
        }
    }
    // SAFETY: closing the directory fd we opened.
    unsafe { libc::close(dir) };
    Ok(count)
}
