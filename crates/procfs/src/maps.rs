//! Pure parsers for /proc/PID/maps and /proc/PID/smaps: bytes in, [`Vma`] entries out.
//!
//! A maps line is `start-end perms offset major:minor inode`, then, for a named mapping,
//! spaces (the kernel pads to a column) and the name exactly as printed (newlines in paths
//! appear as `\012`). smaps repeats that line per mapping, followed by `Key: N kB` counters and a
//! `VmFlags:` line of two-letter mnemonics. maps shows only the rwx/s flags; smaps shows all of
//! them (and costs a page-table walk per mapping: fs/proc/task_mmu.c).

use taskdiag_proto::task::Vma;
use taskdiag_proto::{vma_flags, VmaRec, VmaStatRec};

use crate::parse::ParseError;
use crate::scan::{err, hex, lines, uint};

/// Splits off the next space-separated field.
fn field(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let s = s.strip_prefix(b" ").unwrap_or(s);
    let end = s.iter().position(|&c| c == b' ').unwrap_or(s.len());
    Some((&s[..end], s.get(end..)?))
}

/// Parses one maps header line (without its newline).
pub fn parse_header(line: &[u8]) -> Result<Vma, ParseError> {
    let bad = || err("malformed maps line");
    let (range, rest) = field(line).ok_or_else(bad)?;
    let dash = range.iter().position(|&c| c == b'-').ok_or_else(bad)?;
    let start = hex(&range[..dash]).ok_or_else(bad)?;
    let end = hex(&range[dash + 1..]).ok_or_else(bad)?;
    let (perms, rest) = field(rest).ok_or_else(bad)?;
    if perms.len() != 4 {
        return Err(bad());
    }
    let (off, rest) = field(rest).ok_or_else(bad)?;
    let pgoff = hex(off).ok_or_else(bad)?;
    let (dev, rest) = field(rest).ok_or_else(bad)?;
    let colon = dev.iter().position(|&c| c == b':').ok_or_else(bad)?;
    let major = hex(&dev[..colon]).ok_or_else(bad)?;
    let minor = hex(&dev[colon + 1..]).ok_or_else(bad)?;
    let (ino, rest) = field(rest).ok_or_else(bad)?;
    let inode = uint(ino).ok_or_else(bad)?;
    let name = rest.trim_ascii_start();
    let flags = vma_flags::from_perms(perms);
    Ok(Vma {
        rec: VmaRec {
            start,
            end,
            vm_flags: flags,
            vm_flags_known: vma_flags::FROM_PERMS,
            pgoff,
            inode,
            dev_major: major as u32,
            dev_minor: minor as u32,
            ..VmaRec::default()
        },
        stat: None,
        name: name.to_vec(),
    })
}

/// Parses /proc/PID/maps, appending its mappings to `out`.
pub fn parse_maps(buf: &[u8], out: &mut Vec<Vma>) -> Result<(), ParseError> {
    for line in lines(buf) {
        out.push(parse_header(line)?);
    }
    Ok(())
}

/// Parses /proc/PID/smaps, appending its mappings, with every flag and VMA_STAT counters, to
/// `out`.
pub fn parse_smaps(buf: &[u8], out: &mut Vec<Vma>) -> Result<(), ParseError> {
    for line in lines(buf) {
        // Counter lines start with a capitalized key and a colon; header lines with the start
        // address in lowercase hex (a name only ever follows it).
        let key_end = match line[0].is_ascii_uppercase() {
            true => line.iter().position(|&c| c == b':'),
            false => None,
        };
        let Some(k) = key_end else {
            let mut v = parse_header(line)?;
            v.stat = Some(VmaStatRec::default());
            out.push(v);
            continue;
        };
        let (key, val) = (&line[..k], line[k + 1..].trim_ascii());
        let v = out
            .last_mut()
            .ok_or(err("smaps counter before any mapping"))?;
        if key == b"VmFlags" {
            v.rec.vm_flags = val
                .split(|&c| c == b' ')
                .fold(0, |f, m| f | vma_flags::from_mnemonic_bytes(m));
            v.rec.vm_flags_known = vma_flags::ALL;
            continue;
        }
        let Some(n) = val.strip_suffix(b" kB").and_then(|n| uint(n.trim_ascii())) else {
            continue; // THPeligible: 0, ProtectionKey: 0, ...
        };
        let b = n * 1024;
        let st = v.stat.get_or_insert_with(VmaStatRec::default);
        match key {
            b"Rss" => st.rss = b,
            b"Pss" => st.pss = b,
            b"Pss_Dirty" => st.pss_dirty = b,
            b"Shared_Clean" => st.shared_clean = b,
            b"Shared_Dirty" => st.shared_dirty = b,
            b"Private_Clean" => st.private_clean = b,
            b"Private_Dirty" => st.private_dirty = b,
            b"Referenced" => st.referenced = b,
            b"Anonymous" => st.anonymous = b,
            b"AnonHugePages" => st.anon_huge = b,
            b"Swap" => st.swap = b,
            b"SwapPss" => st.swap_pss = b,
            b"Locked" => st.locked = b,
            _ => {}
        }
    }
    Ok(())
}

/// The `[vsyscall]` line of a maps listing, parsed, if the listing has one: x86-64's legacy
/// gate page, which /proc/PID/maps shows for every process although it is in no process's
/// address space.
pub fn find_vsyscall(buf: &[u8]) -> Result<Option<Vma>, ParseError> {
    lines(buf)
        .find(|l| l.ends_with(b"[vsyscall]"))
        .map(parse_header)
        .transpose()
}

/// Prints mappings the way /proc/PID/maps does (show_vma_header_prefix() and show_map_vma():
/// the name, if any, after padding to column 73 and one space).
pub fn format_maps(vmas: &[Vma], out: &mut Vec<u8>) {
    use std::io::Write;
    for v in vmas {
        let r = &v.rec;
        let start = out.len();
        let p = vma_flags::perms(r.vm_flags);
        let _ = write!(
            out,
            "{:08x}-{:08x} {} {:08x} {:02x}:{:02x} {} ",
            r.start,
            r.end,
            std::str::from_utf8(&p).unwrap_or("----"),
            r.pgoff,
            r.dev_major,
            r.dev_minor,
            r.inode
        );
        if !v.name.is_empty() {
            let width = 25 + std::mem::size_of::<usize>() * 6 - 1;
            while out.len() - start < width {
                out.push(b' ');
            }
            out.push(b' ');
            out.extend_from_slice(&v.name);
        }
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &[u8] = b"\
55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1835077                    /usr/bin/cat
55d0c1b26000-55d0c1b47000 rw-p 00000000 00:00 0                          [heap]
7f1d2c000000-7f1d2c021000 rw-s 00001000 00:01 42                         /memfd:x (deleted)
7f1d2c100000-7f1d2c101000 ---p 00000000 00:00 0 
7ffd5e9d6000-7ffd5e9f7000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn maps_parse_and_print_back_byte_for_byte() {
        let mut v = Vec::new();
        parse_maps(MAPS, &mut v).unwrap();
        assert_eq!(v.len(), 6);
        assert_eq!(v[0].rec.inode, 1835077);
        assert_eq!((v[0].rec.dev_major, v[0].rec.dev_minor), (0xfd, 1));
        assert_eq!(v[2].name, b"/memfd:x (deleted)");
        assert_eq!(v[2].rec.pgoff, 0x1000);
        assert_eq!(
            v[2].rec.vm_flags,
            vma_flags::READ | vma_flags::WRITE | vma_flags::MAYSHARE
        );
        assert!(v[3].name.is_empty());
        let mut out = Vec::new();
        format_maps(&v, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(MAPS));
    }

    #[test]
    fn smaps_gives_counters_and_every_flag() {
        let smaps = b"\
7f1d2c000000-7f1d2c021000 rw-p 00000000 00:00 0                          [anon:my region]
Size:                132 kB
KernelPageSize:        4 kB
Rss:                   8 kB
Pss:                   6 kB
Pss_Dirty:             4 kB
Shared_Clean:          0 kB
Private_Dirty:         4 kB
Referenced:            8 kB
Anonymous:             4 kB
Swap:                  0 kB
Locked:                0 kB
THPeligible:    0
VmFlags: rd wr mr mw me ac sd
";
        let mut v = Vec::new();
        parse_smaps(smaps, &mut v).unwrap();
        assert_eq!(v.len(), 1);
        let st = v[0].stat.unwrap();
        assert_eq!((st.rss, st.pss, st.pss_dirty), (8192, 6144, 4096));
        assert_eq!(v[0].name, b"[anon:my region]");
        let f = v[0].rec.vm_flags;
        assert_eq!(f & vma_flags::READ, vma_flags::READ);
        assert_eq!(f & (1 << 23), 1 << 23, "sd: softdirty");
        assert_eq!(v[0].rec.vm_flags_known, vma_flags::ALL);
    }

    #[test]
    fn the_vsyscall_gate_is_found_by_name() {
        let v = find_vsyscall(MAPS).unwrap().unwrap();
        assert_eq!(
            (v.rec.start, v.rec.end),
            (0xffff_ffff_ff60_0000, 0xffff_ffff_ff60_1000)
        );
        assert_eq!(v.name, b"[vsyscall]");
        assert_eq!(find_vsyscall(&MAPS[..MAPS.len() - 60]), Ok(None));
        assert!(find_vsyscall(b"zz [vsyscall]\n").is_err());
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        for bad in [
            &b"zz-10 r--p 0 0:0 0"[..],
            b"10-20 r--p 0 00:00",
            b"10-20 rw 0 00:00 0",
            b"-",
        ] {
            let mut v = Vec::new();
            assert!(
                parse_maps(bad, &mut v).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut v = Vec::new();
        assert!(parse_smaps(b"Rss: 4 kB\n", &mut v).is_err());
    }
}
