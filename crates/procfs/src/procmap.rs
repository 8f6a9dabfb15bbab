//! One mapping of a process by address: the `PROCMAP_QUERY` ioctl on an open /proc/PID/maps
//! (Linux 6.11+), the binary form of a maps line.
//!
//! Reading the whole of /proc/PID/maps prints every mapping, each with its path (`d_path`): most
//! of the cost of knowing which file one address is in, where one or two mappings are wanted.
//! The ioctl answers for one address, with the same fields and the path of that mapping only.
//! blazesym has its own query in its normalizer, but answers with a path, not the file's
//! identity (device and inode) this crate's callers key binaries by: hence this one.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `_IOWR('f', 17, struct procmap_query)` (uapi/linux/fs.h).
const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;

/// `PROCMAP_QUERY_VMA_EXECUTABLE`: only an executable mapping answers.
pub const QUERY_EXECUTABLE: u64 = 0x04;

/// `PROCMAP_QUERY_COVERING_OR_NEXT_VMA`: the mapping at the address, or else the next one
/// after it (to walk the mappings in order).
pub const QUERY_COVERING_OR_NEXT: u64 = 0x10;

/// `struct procmap_query` (uapi/linux/fs.h, 6.11).
#[repr(C)]
#[derive(Default)]
struct RawQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// The mapping that covers an address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    /// Its first address.
    pub start: u64,
    /// The address after its last.
    pub end: u64,
    /// The offset in its file of `start`.
    pub offset: u64,
    /// Its file's device (major, minor) and inode; 0 for anonymous memory.
    pub dev_major: u32,
    /// See `dev_major`.
    pub dev_minor: u32,
    /// See `dev_major`.
    pub inode: u64,
    /// Its name as /proc/PID/maps shows it (a path, `[vdso]`, or empty).
    pub name: Vec<u8>,
}

/// The mapping of the process whose /proc/PID/maps `maps` is that covers `addr` and matches
/// `flags` (`QUERY_*`); `None` if none does. Errors: `ENOTTY` where the kernel has no such
/// ioctl (before 6.11), `ESRCH` for a process gone.
pub fn query(maps: &File, addr: u64, flags: u64) -> io::Result<Option<Mapping>> {
    let mut name = vec![0u8; libc::PATH_MAX as usize];
    let mut q = RawQuery {
        size: std::mem::size_of::<RawQuery>() as u64,
        query_flags: flags,
        query_addr: addr,
        vma_name_size: name.len() as u32,
        vma_name_addr: name.as_mut_ptr() as u64,
        ..RawQuery::default()
    };
    // SAFETY: `q` is a procmap_query of the size it declares, and its name buffer is `name`,
    // valid for `vma_name_size` bytes for the whole call; the kernel writes nothing else.
    let r = unsafe {
        libc::ioctl(
            maps.as_raw_fd(),
            PROCMAP_QUERY as _,
            &mut q as *mut RawQuery,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(e),
        };
    }
    // The size written includes the terminating NUL (0: no name).
    name.truncate((q.vma_name_size as usize).saturating_sub(1));
    Ok(Some(Mapping {
        start: q.vma_start,
        end: q.vma_end,
        offset: q.vma_offset,
        dev_major: q.dev_major,
        dev_minor: q.dev_minor,
        inode: q.inode,
        name,
    }))
}

/// Every mapping of the process whose /proc/PID/maps `maps` is that matches `flags`
/// (`QUERY_*`), in address order: the ioctl walked from address 0 (each answer with its own
/// path only, where a read of the file prints every mapping's).
pub fn query_all(maps: &File, flags: u64) -> io::Result<Vec<Mapping>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(m) = query(maps, at, flags | QUERY_COVERING_OR_NEXT)? {
        at = m.end;
        out.push(m);
        // Each query takes the memory-map lock anew: under a deadline (crate::stuck), one
        // answered is a step.
        crate::stuck::progress();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_code_is_in_our_executable_and_data_is_not_executable() {
        let maps = File::open("/proc/self/maps").expect("/proc/self/maps");
        let here = our_own_code_is_in_our_executable_and_data_is_not_executable as *const () as u64;
        let m = match query(&maps, here, QUERY_EXECUTABLE) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => return, // before 6.11
            r => r.expect("query").expect("our code is mapped"),
        };
        assert!(m.start <= here && here < m.end);
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        assert_eq!(m.name, exe.as_os_str().as_encoded_bytes());
        let meta = std::fs::metadata(&exe).expect("exe");
        assert_eq!(m.inode, std::os::unix::fs::MetadataExt::ino(&meta));
        // The same as the maps line says.
        let text = std::fs::read("/proc/self/maps").expect("maps");
        let mut vmas = Vec::new();
        crate::maps::parse_maps(&text, &mut vmas).expect("maps");
        let line = vmas
            .iter()
            .find(|v| v.rec.start == m.start)
            .expect("the mapping's line");
        assert_eq!(
            (
                line.rec.end,
                line.rec.pgoff,
                line.rec.dev_major,
                line.rec.dev_minor
            ),
            (m.end, m.offset, m.dev_major, m.dev_minor)
        );
        // The walk finds the same executable mappings as the file.
        let all = query_all(&maps, QUERY_EXECUTABLE).expect("query_all");
        let exec: Vec<(u64, u64)> = vmas
            .iter()
            .filter(|v| v.rec.vm_flags & taskdiag_proto::vma_flags::EXEC != 0)
            .map(|v| (v.rec.start, v.rec.end))
            .collect();
        // (Our own vsyscall page, if any, is not a VMA of ours: the walk ends before it.)
        let walked: Vec<(u64, u64)> = all.iter().map(|m| (m.start, m.end)).collect();
        assert_eq!(
            walked,
            exec.into_iter()
                .filter(|&(s, _)| s < 0xffff_8000_0000_0000)
                .collect::<Vec<_>>()
        );
        // A heap address is in no executable mapping.
        let data = Box::new(7u64);
        let at = &*data as *const u64 as u64;
        assert_eq!(query(&maps, at, QUERY_EXECUTABLE).expect("query"), None);
        assert!(query(&maps, at, 0).expect("query").is_some());
    }
}
