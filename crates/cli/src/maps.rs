//! `taskdiag maps PID`: one process's memory mappings, as /proc/PID/maps prints them (the
//! default, byte for byte), as `pmap -x` of procps-ng prints them (`-x`, byte for byte, with
//! pmap's `-q` and `-p`), or as JSON.
//!
//! The request is a ONE dump of the VMA group (VMA_STAT, CMDLINE and BASE with `-x`); the
//! text formats are `taskdiag_procfs::maps`'s and this module's, the records the backend's.

use std::io::{self, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;

use anyhow::Context;
use taskdiag::{BackendKind, Dumper, Error, Group, Request, Strategy};
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::{Event, StreamDecoder, Task, Vma};
use taskdiag_tools::text;

use crate::{backend_parser, EXIT_NO_TASK};

const AFTER_MAPS: &str = "\
OUTPUT:
  Without -x, the bytes /proc/PID/maps holds: start-end, permissions, offset, device, inode
  and name per mapping.
  With -x, what procps-ng's pmap -x prints (Debian 12's pmap 4.0.2, byte for byte): a
  \"PID:   command line\" line, then per mapping
    Address  start address, 16 hex digits
    Kbytes   size in KiB
    RSS      resident KiB (smaps Rss)
    Dirty    dirty KiB (smaps Shared_Dirty + Private_Dirty)
    Mode     r (read), w (write), x (execute), s (shared; - if private), each - when
             not allowed, then - (pmap's column for mappings without swap reservation)
    Mapping  the file's name without its directory (its whole path with -p),
             [ anon ] for anonymous memory (the heap, named anonymous regions, vdso...),
             [ stack ] for the main stack, [ shmid=0xN ] for a SysV shared memory segment
  and a total kB line. Characters that cannot be printed show as '?'.

EXIT STATUS:
  0 success, 1 no such process, 2 usage error, 3 other failure (e.g. permission denied:
  reading another user's maps needs the same ptrace-read permission as /proc/PID/maps)

EXAMPLES:
  taskdiag maps $$                        # the same bytes as cat /proc/$$/maps
  taskdiag maps -x 1234                   # the same bytes as pmap -x 1234
  taskdiag maps -f json 1234 | jq .name";

/// Arguments of `taskdiag maps`.
#[derive(clap::Args)]
#[command(after_help = AFTER_MAPS)]
pub struct MapsArgs {
    /// The process (or thread: its process's mappings).
    pid: u32,
    /// Extended format, as pmap -x: size, RSS and dirty KiB, mode and name per mapping, and
    /// totals (reads the smaps counters, which costs what /proc/PID/smaps costs; taskdiagd
    /// does not serve them, so -b auto reads /proc instead of the daemon). With -f json:
    /// the counters in each object.
    #[arg(short = 'x', long)]
    extended: bool,
    /// With -x: no column headings and no totals (pmap -q).
    #[arg(short = 'q', long, requires = "extended")]
    quiet: bool,
    /// With -x: the whole path of a mapped file, not only its name (pmap -p).
    #[arg(short = 'p', long = "show-path", requires = "extended")]
    show_path: bool,
    /// Output format: maps (/proc/PID/maps, or pmap -x with -x) or json (one object per
    /// mapping).
    #[arg(long, short = 'f', value_enum, default_value_t = MapsFormat::Maps)]
    format: MapsFormat,
    /// Which backend answers.
    #[arg(long, short = 'b', default_value_t = BackendKind::Auto, value_parser = backend_parser())]
    backend: BackendKind,
    /// taskdiagd's socket, for the daemon backend.
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MapsFormat {
    Maps,
    Json,
}

/// How `-x` prints.
#[derive(Clone, Copy)]
struct PmapOpts {
    quiet: bool,
    show_path: bool,
    /// The locale's character set is UTF-8 (for the command line's escaping).
    utf8: bool,
}

/// Runs `taskdiag maps`.
pub fn maps(a: MapsArgs) -> anyhow::Result<ExitCode> {
    let mut show = Group::Base.flag() | Group::Vma.flag();
    let mut utf8 = false;
    if a.extended {
        show |= Group::VmaStat.flag() | Group::Cmdline.flag();
        // pmap's names and command line follow the locale, as procps sets it.
        utf8 = text::init_locale();
    }
    // Under auto, what taskdiagd does not serve (smaps counters; maps on a kernel without the
    // map walk) is read from /proc, as pmap does.
    let mut d =
        Dumper::open_with(a.backend, show, a.socket.as_deref()).context("opening the backend")?;
    let mut t = dump_one(&mut d, a.pid, show)?;
    if let Some(tgid) = t.as_ref().filter(|t| t.pid != t.tgid).map(|t| t.tgid) {
        // A thread's mappings are its process's, which the backends give the leader.
        t = dump_one(&mut d, tgid, show)?;
    }
    let Some(t) = t else {
        eprintln!("taskdiag: no such process: {}", a.pid);
        return Ok(ExitCode::from(EXIT_NO_TASK));
    };
    for e in &t.errors {
        let file = match Group::from_u16(e.group) {
            Some(Group::Vma) => "maps",
            Some(Group::VmaStat) => "smaps",
            _ => continue,
        };
        anyhow::bail!(
            "/proc/{}/{file}: {}",
            a.pid,
            taskdiag_proto::errno_text(e.errno)
        );
    }
    let vmas = t.vmas.clone().unwrap_or_default();
    let mut out = Vec::with_capacity(vmas.len() * 100);
    match (a.format, a.extended) {
        (MapsFormat::Json, _) => json(&t, &mut out)?,
        (MapsFormat::Maps, false) => taskdiag_procfs::maps::format_maps(&vmas, &mut out),
        (MapsFormat::Maps, true) => {
            let o = PmapOpts {
                quiet: a.quiet,
                show_path: a.show_path,
                utf8,
            };
            pmap_x(&t, o, &mut out)?
        }
    }
    io::stdout()
        .lock()
        .write_all(&out)
        .context("writing standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// Task `pid` as the backend answers a ONE request for `show`; `None` if there is none.
fn dump_one(d: &mut Dumper, pid: u32, show: u64) -> anyhow::Result<Option<Task>> {
    let mut buf = Vec::new();
    let r = d.dump(&Request::new(Strategy::One, pid, show), &mut |b| {
        buf.extend_from_slice(b);
        Ok(())
    });
    match r {
        Ok(_) => {}
        Err(Error::NoSuchTask { .. }) => return Ok(None),
        Err(e) => return Err(e).context("dump failed"),
    }
    let mut dec = StreamDecoder::new();
    let mut task = None;
    for m in Messages::new(&buf) {
        if let Some(Event::Task(t)) = dec.push(&m?)? {
            task = Some(t);
        }
    }
    task.context("the backend answered without the task")
        .map(Some)
}

fn json(t: &Task, out: &mut Vec<u8>) -> io::Result<()> {
    // One JSON object per mapping, as in `dump --format json`'s "vma" array.
    for v in t.vmas.iter().flatten() {
        crate::render::json_line(out, &crate::render::JsonVma(v))?;
    }
    Ok(())
}

/// The mapping name pmap prints (`mapping_name()` in procps-ng 4.0.2's pmap.c), from the
/// mapping's maps line `line` as pmap cleaned it: a SysV shared memory segment as its id, a
/// named file as its basename (or, with `show_path`, from the line's first `/`), everything
/// else `[ stack ]` or `[ anon ]`, those two with pmap's two leading spaces.
///
/// pmap calls a mapping the stack when it holds the stack's start address (/proc/PID/stat's
/// startstack), first and last byte included; the kernel names exactly that mapping `[stack]`
/// (show_map_vma(): the same inclusive test, after files and heap), so the name decides here.
fn pmap_name(v: &Vma, line: &[u8], show_path: bool, shm_minor: &mut ShmMinor) -> Vec<u8> {
    let r = &v.rec;
    if r.dev_major == 0
        && line.windows(5).any(|w| w == b"/SYSV")
        && shm_minor.get() == Some(r.dev_minor)
    {
        return format!("  [ shmid=0x{:x} ]", r.inode).into_bytes();
    }
    let first = line.iter().position(|&c| c == b'/');
    let last = line.iter().rposition(|&c| c == b'/');
    match (first, last) {
        (Some(f), _) if show_path => line[f..].to_vec(),
        // A name ending in '/' is shown as that '/'.
        (_, Some(l)) if l + 1 == line.len() => b"/".to_vec(),
        (_, Some(l)) => line[l + 1..].to_vec(),
        _ if v.name == b"[stack]" => b"  [ stack ]".to_vec(),
        _ => b"  [ anon ]".to_vec(),
    }
}

/// The device minor of the kernel's internal shmem mount, which pmap needs to tell a SysV
/// segment from a file named `/SYSV...` elsewhere; found once, when first needed.
struct ShmMinor(Option<Option<u32>>);

impl ShmMinor {
    fn get(&mut self) -> Option<u32> {
        *self.0.get_or_insert_with(discover_shm_minor)
    }
}

/// pmap attaches a SysV segment of its own and reads its device in /proc/self/maps; a memfd
/// lives on the same internal mount (shmem_file_setup() on shm_mnt, as newseg() does), so its
/// fstat gives the same minor without creating a system-wide IPC object. `None` (no memfd)
/// leaves SysV segments named as files, as pmap does when its discovery fails.
fn discover_shm_minor() -> Option<u32> {
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"taskdiag-shm".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let dev = file.metadata().ok()?.dev();
    Some(libc::minor(dev))
}

/// The maps line of `v` as pmap holds it before naming the mapping: without its newline,
/// every byte the C library's `isprint` rejects (in the user's locale) replaced by '?'.
fn pmap_line(v: &Vma) -> Vec<u8> {
    let mut line = Vec::with_capacity(128 + v.name.len());
    taskdiag_procfs::maps::format_maps(std::slice::from_ref(v), &mut line);
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    for c in &mut line {
        if !text::c_isprint(*c) {
            *c = b'?';
        }
    }
    line
}

/// `pmap -x` of procps-ng 4.0.2 (one_proc() in pmap.c), byte for byte: the `PID:   command
/// line` header as libproc2 makes the command line, the column headings, per mapping its
/// address, size, RSS and dirty KiB, mode and name, then the `total kB` line. `quiet` drops
/// the headings and totals (pmap -q); `show_path` shows whole paths (pmap -p).
fn pmap_x(t: &Task, o: PmapOpts, out: &mut Vec<u8>) -> io::Result<()> {
    let (comm, zombie) = match &t.base {
        Some(b) => (&b.comm[..], taskdiag_proto::state_char(b.rec.state) == 'Z'),
        None => (&b""[..], false),
    };
    let cmd = text::command_line(t.cmdline.as_deref(), comm, zombie, o.utf8);
    write!(out, "{}:   ", t.tgid)?;
    out.extend_from_slice(&cmd);
    out.push(b'\n');
    if !o.quiet {
        writeln!(
            out,
            "Address           Kbytes     RSS   Dirty Mode  Mapping"
        )?;
    }
    let mut shm_minor = ShmMinor(None);
    let (mut size, mut rss, mut dirty) = (0u64, 0u64, 0u64);
    for v in t.vmas.iter().flatten() {
        let r = &v.rec;
        let kb = (r.end - r.start) >> 10;
        size += kb;
        // pmap adds smaps' kB values, each already rounded down.
        let st = v.stat.unwrap_or_default();
        let (rss_kb, dirty_kb) = (
            st.rss >> 10,
            (st.shared_dirty >> 10) + (st.private_dirty >> 10),
        );
        rss += rss_kb;
        dirty += dirty_kb;
        let p = taskdiag_proto::vma_flags::perms(r.vm_flags);
        let shared = if p[3] == b's' { b's' } else { b'-' };
        let mode = [p[0], p[1], p[2], shared, b'-'];
        let line = pmap_line(v);
        write!(
            out,
            "{:016x} {kb:7} {rss_kb:7} {dirty_kb:7} {} ",
            r.start,
            String::from_utf8_lossy(&mode),
        )?;
        out.extend_from_slice(&pmap_name(v, &line, o.show_path, &mut shm_minor));
        out.push(b'\n');
    }
    if !o.quiet {
        writeln!(out, "---------------- ------- ------- ------- ")?;
        writeln!(out, "total kB         {size:7} {rss:7} {dirty:7}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::VmaRec;

    fn vma(name: &str, dev_major: u32, dev_minor: u32, inode: u64) -> Vma {
        Vma {
            rec: VmaRec {
                start: 0x1000,
                end: 0x3000,
                dev_major,
                dev_minor,
                inode,
                ..VmaRec::default()
            },
            stat: None,
            name: name.as_bytes().to_vec(),
        }
    }

    fn name(v: &Vma, show_path: bool, shm: Option<u32>) -> String {
        let line = pmap_line(v);
        String::from_utf8(pmap_name(v, &line, show_path, &mut ShmMinor(Some(shm)))).unwrap()
    }

    #[test]
    fn names_follow_pmaps_mapping_name() {
        let lib = vma("/usr/lib/libc.so.6", 254, 0, 7);
        assert_eq!(name(&lib, false, Some(1)), "libc.so.6");
        assert_eq!(name(&lib, true, Some(1)), "/usr/lib/libc.so.6");
        for anon in [
            "",
            "[heap]",
            "[vdso]",
            "[anon:fixture region]",
            "[anon_shmem:x]",
        ] {
            assert_eq!(
                name(&vma(anon, 0, 0, 0), false, Some(1)),
                "  [ anon ]",
                "{anon}"
            );
        }
        assert_eq!(name(&vma("[stack]", 0, 0, 0), false, None), "  [ stack ]");
        // A '/' in any name makes it a path to pmap.
        assert_eq!(name(&vma("[anon:a/b]", 0, 0, 0), false, None), "b]");
        let sysv = vma("/SYSV0000002a (deleted)", 0, 1, 0x1f);
        assert_eq!(name(&sysv, false, Some(1)), "  [ shmid=0x1f ]");
        // Not on the shmem mount (a tmpfs file named so), or the mount unknown: a file.
        assert_eq!(name(&sysv, false, Some(5)), "SYSV0000002a (deleted)");
        assert_eq!(name(&sysv, false, None), "SYSV0000002a (deleted)");
        // Unprintable bytes are '?', in the C locale (the tests' default) also non-ASCII.
        assert_eq!(name(&vma("/d/a\tb\u{e9}", 254, 0, 7), false, None), "a?b??");
    }

    #[test]
    fn the_shmem_mount_is_found() {
        // Every Linux with memfd (3.17+) has the internal shmem mount, an anonymous device.
        assert!(discover_shm_minor().is_some());
    }
}
