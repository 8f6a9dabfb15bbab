//! Pure parsers for the /proc files that are not about one task's record: bytes in, values
//! out, no I/O. Whoever reads a file names its path in the errors it reports.
//!
//! | file                      | parser                                   | read by             |
//! |---------------------------|------------------------------------------|---------------------|
//! | `meminfo`                 | [`parse_meminfo`]                        | ps, top             |
//! | `stat`                    | [`cpu_times`], [`boot_time`]             | top; ps, pstree, ...|
//! | `uptime`                  | [`parse_uptime`]                         | ps, top, pgrep, ... |
//! | `loadavg`                 | [`parse_loadavg`]                        | top                 |
//! | `sys/kernel/pid_max`      | [`parse_pid_max`], [`pid_length`]        | ps, top             |
//! | `sys/kernel/yama/ptrace_scope` | [`parse_sysctl_number`]             | taskdiagd           |
//! | `sys/kernel/osrelease`    | [`kernel_version`]                       | time namespaces     |
//! | `tty/drivers`             | [`parse_tty_drivers`]                    | ps, pgrep, top      |
//! | `PID/mountinfo`           | [`parse_mountinfo`]                      | taskdiagd           |
//!
//! Formats follow proc(5) and the kernel's printers: `meminfo_proc_show` (fs/proc/meminfo.c),
//! `show_stat` (fs/proc/stat.c), `uptime_proc_show`, `loadavg_proc_show`, `show_tty_driver`
//! (fs/proc/proc_tty.c) and `show_mountinfo` (fs/proc_namespace.c).

use crate::parse::ParseError;
use crate::scan::{err, err_in, float, lines, uint, uint32, words};

/// The /proc/meminfo lines the tools use, in kB; `None` for a line the file does not have
/// (`MemAvailable` is missing before Linux 3.14, for one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Meminfo {
    /// `MemTotal`.
    pub mem_total: Option<u64>,
    /// `MemFree`.
    pub mem_free: Option<u64>,
    /// `MemAvailable`.
    pub mem_available: Option<u64>,
    /// `Buffers`.
    pub buffers: Option<u64>,
    /// `Cached`.
    pub cached: Option<u64>,
    /// `SReclaimable`.
    pub s_reclaimable: Option<u64>,
    /// `SwapTotal`.
    pub swap_total: Option<u64>,
    /// `SwapFree`.
    pub swap_free: Option<u64>,
}

/// Parses /proc/meminfo (`Key:   value kB` lines). A line whose value is not a number counts as
/// missing; where a key appears twice, the first line counts.
pub fn parse_meminfo(buf: &[u8]) -> Meminfo {
    let mut m = Meminfo::default();
    for line in lines(buf) {
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let slot = match &line[..colon] {
            b"MemTotal" => &mut m.mem_total,
            b"MemFree" => &mut m.mem_free,
            b"MemAvailable" => &mut m.mem_available,
            b"Buffers" => &mut m.buffers,
            b"Cached" => &mut m.cached,
            b"SReclaimable" => &mut m.s_reclaimable,
            b"SwapTotal" => &mut m.swap_total,
            b"SwapFree" => &mut m.swap_free,
            _ => continue,
        };
        if slot.is_none() {
            *slot = words(&line[colon + 1..]).next().and_then(uint);
        }
    }
    m
}

/// CPU time of one /proc/stat `cpu` line, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// `None` for the all-CPU `cpu` line, else the CPU number of a `cpuN` line.
    pub id: Option<u32>,
    /// user, nice, system, idle, iowait, irq, softirq, steal (the first eight columns; a
    /// kernel that prints fewer leaves the rest 0; guest times are left out, being included in
    /// user and nice already).
    pub t: [u64; 8],
}

/// The `cpu` lines at the start of /proc/stat: the total first, then one per online CPU.
pub fn cpu_times(buf: &[u8]) -> Result<Vec<CpuTicks>, ParseError> {
    let mut v = Vec::new();
    for line in buf.split(|&c| c == b'\n') {
        let Some(rest) = line.strip_prefix(b"cpu") else {
            break;
        };
        let mut cols = words(rest);
        let id = if rest.starts_with(b" ") {
            None
        } else {
            Some(
                cols.next()
                    .and_then(uint32)
                    .ok_or(err_in("bad CPU number", "cpu"))?,
            )
        };
        let mut t = [0u64; 8];
        for (slot, col) in t.iter_mut().zip(cols) {
            *slot = uint(col).ok_or(err_in("bad number", "cpu"))?;
        }
        v.push(CpuTicks { id, t });
    }
    Ok(v)
}

/// The boot time in /proc/stat (`btime`, seconds since the epoch).
pub fn boot_time(buf: &[u8]) -> Result<u64, ParseError> {
    let rest = lines(buf)
        .find_map(|l| l.strip_prefix(b"btime "))
        .ok_or(err("no btime line"))?;
    words(rest)
        .next()
        .and_then(uint)
        .ok_or(err_in("bad number", "btime"))
}

/// Seconds since boot, the first number of /proc/uptime (centisecond resolution).
pub fn parse_uptime(buf: &[u8]) -> Result<f64, ParseError> {
    words(buf).next().and_then(float).ok_or(err("not a number"))
}

/// The 1, 5 and 15 minute load averages, the first three numbers of /proc/loadavg.
pub fn parse_loadavg(buf: &[u8]) -> Result<[f64; 3], ParseError> {
    let mut v = [0.0; 3];
    let mut w = words(buf);
    for slot in &mut v {
        *slot = w
            .next()
            .and_then(float)
            .ok_or(err("fewer than three load averages"))?;
    }
    Ok(v)
}

/// The number of tasks (threads, in every pid namespace) the kernel has now: the number after
/// the slash of /proc/loadavg's fourth field ("1/100": one running of 100).
pub fn parse_loadavg_tasks(buf: &[u8]) -> Result<u32, ParseError> {
    words(buf)
        .nth(3)
        .and_then(|w| w.split(|&b| b == b'/').nth(1))
        .and_then(uint32)
        .ok_or(err("no running/total field"))
}

/// The value of /proc/sys/kernel/pid_max: pids are below it.
pub fn parse_pid_max(buf: &[u8]) -> Result<u32, ParseError> {
    parse_sysctl_number(buf)
}

/// The value of a /proc/sys file of one number (kernel/pid_max, kernel/yama/ptrace_scope).
pub fn parse_sysctl_number(buf: &[u8]) -> Result<u32, ParseError> {
    let mut w = words(buf);
    match (w.next().and_then(uint32), w.next()) {
        (Some(v), None) => Ok(v),
        _ => Err(err("not a number")),
    }
}

/// The version (major, minor) at the start of /proc/sys/kernel/osrelease ("6.1.0-56-amd64":
/// (6, 1)); `None` if it does not start with one.
pub fn kernel_version(buf: &[u8]) -> Option<(u32, u32)> {
    let mut parts = buf.splitn(3, |&c| c == b'.');
    let major = parts.next().and_then(uint32)?;
    let minor = parts.next().map(|m| {
        let end = m
            .iter()
            .position(|c| !c.is_ascii_digit())
            .unwrap_or(m.len());
        &m[..end]
    });
    Some((major, minor.and_then(uint32)?))
}

/// Whether a kernel of `version` adds the reader's time namespace boottime offset to the start
/// times /proc/PID/stat shows (and takes it from /proc/stat's `btime`): since Linux 5.11
/// ("fs/proc: apply the time namespace offset to /proc/stat btime"); 5.6 to 5.10 have time
/// namespaces but show start times as the initial namespace sees them. The fallback where the
/// kernel's answers cannot tell ([`btime_shifted`]).
pub fn timens_shifts_start_times(version: (u32, u32)) -> bool {
    version >= (5, 11)
}

/// Whether /proc/stat's `btime` (`btime`, seconds), as a reader in a time namespace of
/// boottime offset `offset_ns` sees it, has the offset taken off — and so /proc/PID/stat's
/// start times have it added, the same kernel change made both. Told against that reader's
/// CLOCK_REALTIME − CLOCK_BOOTTIME (`boot_epoch_ns`; CLOCK_BOOTTIME has the offset in every
/// kernel with time namespaces): the boot's epoch time minus the offset. `None` for an offset
/// under 2 s, which `btime`'s resolution cannot tell apart.
pub fn btime_shifted(btime: u64, boot_epoch_ns: i128, offset_ns: i64) -> Option<bool> {
    const TELLS: i64 = 2_000_000_000;
    if offset_ns.unsigned_abs() < TELLS.unsigned_abs() {
        return None;
    }
    let shown = i128::from(btime) * 1_000_000_000;
    let shifted = (shown - boot_epoch_ns).abs();
    let unshifted = (shown - (boot_epoch_ns + i128::from(offset_ns))).abs();
    Some(shifted < unshifted)
}

/// How many characters the largest pid can have, counted the way procps does it
/// (`procps_pid_length`: the length of the first line of /proc/sys/kernel/pid_max); `None`
/// for an empty file.
pub fn pid_length(buf: &[u8]) -> Option<usize> {
    let line = buf.split(|&c| c == b'\n').next()?;
    (!line.is_empty()).then_some(line.len())
}

/// One line of /proc/tty/drivers, as procps keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtyDriver {
    /// The device path's name below /dev/ (`pts`, `ttyS`, `vc/0`), at most 15 characters;
    /// without the `%d` of a devfs-style name.
    pub name: String,
    /// The name ended in `%d` (devfs style: the minor number is a path component).
    pub devfs: bool,
    /// The major number.
    pub major: u32,
    /// The first and last minor numbers.
    pub minors: (u32, u32),
}

/// Parses /proc/tty/drivers (`driver  /dev/NAME  major  minors  type` lines) in file order, as
/// procps' `load_drivers` reads it; a line without a /dev/ path, a major number and a minor
/// range is skipped.
pub fn parse_tty_drivers(buf: &[u8]) -> Vec<TtyDriver> {
    let mut v = Vec::new();
    for line in lines(buf) {
        let Some(line) = std::str::from_utf8(line).ok() else {
            continue;
        };
        let Some(at) = line.find(" /dev/") else {
            continue;
        };
        let mut rest = line[at + 6..].split_whitespace();
        let (Some(mut name), Some(major), Some(minors)) = (rest.next(), rest.next(), rest.next())
        else {
            continue;
        };
        let devfs = name.len() >= 3 && name.ends_with("%d");
        if devfs {
            name = &name[..name.len() - 2];
        }
        let Some(major) = uint32(major.as_bytes()) else {
            continue;
        };
        let range = match minors.split_once('-') {
            Some((a, b)) => uint32(a.as_bytes()).zip(uint32(b.as_bytes())),
            None => uint32(minors.as_bytes()).map(|a| (a, a)),
        };
        let Some(minors) = range else {
            continue;
        };
        v.push(TtyDriver {
            name: name.chars().take(15).collect(),
            devfs,
            major,
            minors,
        });
    }
    v
}

/// A path as mountinfo prints it with its octal escapes (`\040` for a space) undone.
pub fn unescape_octal(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == b'\\' {
            if let Some(d) = s.get(i + 1..i + 4) {
                if d.iter().all(|&x| (b'0'..=b'7').contains(&x)) {
                    let v = d.iter().fold(0u32, |a, &x| a * 8 + u32::from(x - b'0'));
                    if let Ok(v) = u8::try_from(v) {
                        out.push(v);
                        i += 4;
                        continue;
                    }
                }
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// One line of /proc/PID/mountinfo. Paths are as the kernel prints them: a space, tab,
/// newline or backslash in them appears as an octal escape (`\040`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mount<'a> {
    /// The mount's id.
    pub id: u32,
    /// Its parent's id.
    pub parent: u32,
    /// Major number of the filesystem's device (`st_dev`).
    pub major: u32,
    /// Minor number of that device.
    pub minor: u32,
    /// The directory of the filesystem that is the root of this mount.
    pub root: &'a [u8],
    /// Where it is mounted, relative to the reading process's root.
    pub mount_point: &'a [u8],
    /// Per-mount options (`rw,nosuid,relatime`).
    pub options: &'a [u8],
    /// The filesystem type (`proc`, `ext4`).
    pub fstype: &'a [u8],
    /// The mount source (`/dev/vda`, or the filesystem's name).
    pub source: &'a [u8],
    /// Per-filesystem (super block) options (`rw,hidepid=invisible,gid=27` for a procfs).
    pub super_options: &'a [u8],
}

/// Parses one /proc/PID/mountinfo line: `id parent major:minor root mount-point options
/// [optional fields...] - fstype source super-options`.
pub fn parse_mount(line: &[u8]) -> Result<Mount<'_>, ParseError> {
    fn next<'a>(it: &mut impl Iterator<Item = &'a [u8]>) -> Result<&'a [u8], ParseError> {
        it.next()
            .ok_or(err("fewer fields than a mountinfo line has"))
    }
    let sep = memchr::memmem::find(line, b" - ").ok_or(err("no ' - ' separator"))?;
    let mut pre = line[..sep].split(|&c| c == b' ');
    let mut post = line[sep + 3..].split(|&c| c == b' ');
    let id = uint32(next(&mut pre)?).ok_or(err_in("bad number", "mount id"))?;
    let parent = uint32(next(&mut pre)?).ok_or(err_in("bad number", "parent id"))?;
    let dev = next(&mut pre)?;
    let colon = memchr::memchr(b':', dev).ok_or(err_in("no ':'", "major:minor"))?;
    let major = uint32(&dev[..colon]).ok_or(err_in("bad number", "major:minor"))?;
    let minor = uint32(&dev[colon + 1..]).ok_or(err_in("bad number", "major:minor"))?;
    Ok(Mount {
        id,
        parent,
        major,
        minor,
        root: next(&mut pre)?,
        mount_point: next(&mut pre)?,
        options: next(&mut pre)?,
        fstype: next(&mut post)?,
        source: next(&mut post)?,
        super_options: next(&mut post)?,
    })
}

/// The mounts of a /proc/PID/mountinfo listing, in its order (a mount comes after the one it
/// was mounted over).
pub fn parse_mountinfo(buf: &[u8]) -> impl Iterator<Item = Result<Mount<'_>, ParseError>> {
    lines(buf).map(parse_mount)
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../fixtures/linux-6.18/", $name)).as_slice()
        };
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version(b"6.1.0-56-amd64\n"), Some((6, 1)));
        assert_eq!(kernel_version(b"5.10.0-46-amd64\n"), Some((5, 10)));
        assert_eq!(kernel_version(b"6.18\n"), Some((6, 18)));
        assert_eq!(kernel_version(b"6.12.117+deb12-amd64"), Some((6, 12)));
        assert_eq!(kernel_version(b"7\n"), None);
        assert_eq!(kernel_version(b"x.1"), None);
        assert!(!timens_shifts_start_times((5, 10)));
        assert!(timens_shifts_start_times((5, 11)));
        assert!(timens_shifts_start_times((6, 1)));
    }

    #[test]
    fn btime_shifted_or_not() {
        let day = 86_400_000_000_000_i64;
        // Booted at 1,000,000.5 s; a reader a day later sees the boot a day earlier.
        let boot = 1_000_000_500_000_000_i128 - i128::from(day);
        assert_eq!(btime_shifted(1_000_000 - 86_400, boot, day), Some(true));
        assert_eq!(btime_shifted(1_000_000, boot, day), Some(false));
        let back = -3_600_000_000_000_i64;
        let boot = 1_000_000_500_000_000_i128 + 3_600_000_000_000;
        assert_eq!(btime_shifted(1_003_600, boot, back), Some(true));
        assert_eq!(btime_shifted(1_000_000, boot, back), Some(false));
        assert_eq!(btime_shifted(1_000_000, boot, 1_000_000_000), None);
    }

    #[test]
    fn meminfo_of_this_machine() {
        let m = parse_meminfo(fixture!("meminfo"));
        assert_eq!(m.mem_total, Some(24683656));
        assert_eq!(m.mem_free, Some(13452252));
        assert_eq!(m.mem_available, Some(17373032));
        assert_eq!(m.buffers, Some(34052));
        assert_eq!(m.cached, Some(4118888), "not SwapCached");
        assert_eq!(m.s_reclaimable, Some(171360));
        assert_eq!((m.swap_total, m.swap_free), (Some(0), Some(0)));
    }

    #[test]
    fn meminfo_missing_keys_odd_spacing_and_repeats() {
        let m = parse_meminfo(
            b"MemTotal:1000 kB\nMemFree:\t\t 300\nBuffers:\nCached: x kB\n\
                                SwapCached: 7 kB\nMemTotal: 5 kB\nno colon here\n",
        );
        assert_eq!(m.mem_total, Some(1000), "the first line counts");
        assert_eq!(m.mem_free, Some(300));
        assert_eq!((m.buffers, m.cached), (None, None));
        assert_eq!(m.mem_available, None);
        assert_eq!(parse_meminfo(b""), Meminfo::default());
    }

    #[test]
    fn cpu_lines_of_this_machine() {
        let c = cpu_times(fixture!("stat")).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].id, None);
        assert_eq!(c[0].t, [721436, 0, 578568, 839010, 2921, 0, 1474, 10233]);
        assert_eq!((c[1].id, c[2].id), (Some(0), Some(1)));
        assert_eq!(c[2].t[0], 366200);
        // The total is the sum of the CPUs, column by column, give or take the rounding of
        // each CPU's nanoseconds to ticks.
        for i in 0..8 {
            assert!(c[0].t[i].abs_diff(c[1].t[i] + c[2].t[i]) <= 2, "column {i}");
        }
    }

    #[test]
    fn cpu_lines_short_bad_and_absent() {
        // A kernel before 2.6.11 prints four columns: the others stay 0.
        let c = cpu_times(b"cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5\ncpu1 9 9 9 9\n").unwrap();
        assert_eq!(c.len(), 2, "only the cpu lines at the start");
        assert_eq!(c[1].t, [1, 2, 3, 4, 0, 0, 0, 0]);
        assert!(cpu_times(b"cpu  1 x 3 4\n").is_err());
        assert!(cpu_times(b"cpuz 1 2 3 4\n").is_err());
        assert_eq!(cpu_times(b"").unwrap(), []);
    }

    #[test]
    fn boot_time_of_this_machine_and_without_one() {
        assert_eq!(boot_time(fixture!("stat")), Ok(1795463142));
        assert_eq!(boot_time(b"cpu 1\n").unwrap_err().what, "no btime line");
        assert!(boot_time(b"btime \n").is_err());
        assert!(boot_time(b"btime -1\n").is_err());
        assert_eq!(boot_time(b"btimex 1\nbtime  7 \n"), Ok(7));
    }

    #[test]
    fn uptime_and_load_averages() {
        assert_eq!(parse_uptime(fixture!("uptime")), Ok(10802.15));
        assert_eq!(parse_uptime(b"12.5 3.0\n"), Ok(12.5));
        assert_eq!(parse_uptime(b"\n").unwrap_err().what, "not a number");
        assert!(parse_uptime(b"up 3").is_err());
        assert_eq!(
            parse_loadavg(fixture!("loadavg")),
            Ok([13.86, 10.22, 12.10])
        );
        assert_eq!(
            parse_loadavg(b"0.50 1.00 2.25 1/100 4242\n"),
            Ok([0.5, 1.0, 2.25])
        );
        assert!(parse_loadavg(b"0.50 1.00\n").is_err());
        assert_eq!(parse_loadavg_tasks(b"0.50 1.00 2.25 1/100 4242\n"), Ok(100));
        assert_eq!(
            parse_loadavg_tasks(fixture!("loadavg")).map(|n| n > 0),
            Ok(true)
        );
        assert!(parse_loadavg_tasks(b"0.50 1.00 2.25 1 4242\n").is_err());
        assert!(parse_loadavg_tasks(b"0.50 1.00 2.25\n").is_err());
        assert!(parse_loadavg(b"0.50 x 1\n").is_err());
    }

    #[test]
    fn pid_max_and_its_length() {
        assert_eq!(parse_pid_max(fixture!("pid_max")), Ok(4194304));
        assert_eq!(pid_length(fixture!("pid_max")), Some(7));
        assert_eq!(pid_length(b"32768\n"), Some(5));
        assert_eq!(pid_length(b"32768"), Some(5));
        assert_eq!(pid_length(b""), None);
        assert_eq!(pid_length(b"\n"), None);
        assert!(parse_pid_max(b"").is_err());
        assert!(parse_pid_max(b"1 2\n").is_err());
        assert!(parse_pid_max(b"4294967296\n").is_err());
    }

    #[test]
    fn tty_drivers_of_this_machine() {
        let d = parse_tty_drivers(fixture!("tty_drivers"));
        let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["tty", "console", "ptmx", "vc/0", "ttyS", "pts", "ptm", "tty"]
        );
        let pts = &d[5];
        assert_eq!(
            (pts.major, pts.minors, pts.devfs),
            (136, (0, 1048575), false)
        );
        assert_eq!((d[4].major, d[4].minors), (4, (64, 64)));
        assert_eq!((d[7].major, d[7].minors), (4, (1, 63)));
    }

    #[test]
    fn tty_drivers_devfs_names_long_names_and_junk() {
        let d = parse_tty_drivers(
            b"vt  /dev/vc/%d  4  1-63 console\n\
              x /dev/a_very_long_device_name 9 0 system\n\
              no path here 4 1\n\
              short /dev/tty 4\n\
              bad /dev/tty x 1\n\
              bad /dev/tty 4 1-x\n\
              odd   spacing\t/dev/ttyQ\t 7\t  3-4  serial\n",
        );
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!((d[0].name.as_str(), d[0].devfs), ("vc/", true));
        assert_eq!(d[1].name, "a_very_long_dev", "15 characters at most");
        // A tab before /dev/ is not the " /dev/" procps looks for.
        assert!(parse_tty_drivers(b"odd\t/dev/ttyQ 7 3\n").is_empty());
        assert_eq!(
            parse_tty_drivers(b"odd /dev/ttyQ\t 7\t  3-4  serial\n")[0].minors,
            (3, 4)
        );
    }

    #[test]
    fn mountinfo_of_this_machine() {
        let all: Vec<Mount> = parse_mountinfo(fixture!("mountinfo"))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(all.len(), 20);
        let proc = all.iter().find(|m| m.mount_point == b"/proc").unwrap();
        assert_eq!(
            (proc.id, proc.parent, proc.major, proc.minor),
            (22, 27, 0, 21)
        );
        assert_eq!((proc.fstype, proc.source), (&b"proc"[..], &b"proc"[..]));
        assert_eq!(
            (proc.options, proc.super_options),
            (&b"rw,relatime"[..], &b"rw"[..])
        );
        let root = all.iter().find(|m| m.mount_point == b"/").unwrap();
        assert_eq!(
            (root.major, root.minor, root.source),
            (254, 0, &b"/dev/vda"[..])
        );
    }

    #[test]
    fn mountinfo_optional_fields_escapes_and_junk() {
        let m = parse_mount(
            b"36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 shared:7 - ext3 /dev/root \
              rw,errors=continue",
        )
        .unwrap();
        assert_eq!(m.mount_point, b"/mnt\\0402");
        assert_eq!(unescape_octal(m.mount_point), b"/mnt 2");
        assert_eq!(unescape_octal(b"a\\134b\\9"), b"a\\b\\9");
        assert_eq!((m.major, m.minor, m.root), (98, 0, &b"/mnt1"[..]));
        assert_eq!(m.super_options, b"rw,errors=continue");
        for bad in [
            &b"garbage"[..],
            b"22 27 0:21 / /proc rw,relatime proc proc rw",
            b"22 27 0-21 / /proc rw - proc proc rw",
            b"x 27 0:21 / /proc rw - proc proc rw",
            b"22 27 0:21 / /proc - proc proc rw",
            b"22 27 0:21 / /proc rw - proc proc",
        ] {
            assert!(
                parse_mount(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(parse_mountinfo(b"").count(), 0);
    }
}
