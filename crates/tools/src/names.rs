//! Names for numbers: user and group names (cached NSS lookups) and terminal names for
//! `tty_nr` device numbers, resolved the way procps does (`/proc/tty/drivers`, then the
//! task's `fd/2`, then well-known device names, then `fd/255`).
//!
//! Tools decide when to print a name and when a number; this module only finds names.

use std::collections::HashMap;
use std::ffi::{CStr, CString};

use taskdiag_procfs::system::{parse_tty_drivers, TtyDriver};

/// Longest user or group name procps prints as a name (longer ones print as numbers).
const NAME_MAX: usize = 32;

/// Calls a `get*_r` NSS function with a growing buffer; returns the name field.
fn nss_name<T>(
    mut call: impl FnMut(*mut T, *mut libc::c_char, usize, *mut *mut T) -> libc::c_int,
    mut name_of: impl FnMut(&T) -> *const libc::c_char,
) -> Option<String> {
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: an all-zero passwd/group struct is a valid out-parameter.
        let mut ent: T = unsafe { std::mem::zeroed() };
        let mut result: *mut T = std::ptr::null_mut();
        let r = call(&mut ent, buf.as_mut_ptr(), size, &mut result);
        if r == libc::ERANGE && size < 1 << 20 {
            size *= 4;
            continue;
        }
        if r != 0 || result.is_null() {
            return None;
        }
        let p = name_of(&ent);
        if p.is_null() {
            return None;
        }
        // SAFETY: on success the name points into `buf`, NUL-terminated, still alive here.
        let s = unsafe { CStr::from_ptr(p) };
        return Some(String::from_utf8_lossy(s.to_bytes()).into_owned());
    }
}

/// The name of user `uid`, if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    nss_name::<libc::passwd>(
        // SAFETY: all pointers are valid for the sizes given (see nss_name).
        |e, b, n, r| unsafe { libc::getpwuid_r(uid, e, b, n, r) },
        |e| e.pw_name,
    )
}

/// The name of group `gid`, if it has one.
pub fn group_name(gid: u32) -> Option<String> {
    nss_name::<libc::group>(
        // SAFETY: all pointers are valid for the sizes given (see nss_name).
        |e, b, n, r| unsafe { libc::getgrgid_r(gid, e, b, n, r) },
        |e| e.gr_name,
    )
}

/// The uid of user `name`.
pub fn uid_of(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut uid = None;
    nss_name::<libc::passwd>(
        // SAFETY: `c` is NUL-terminated; other pointers as in nss_name.
        |e, b, n, r| unsafe { libc::getpwnam_r(c.as_ptr(), e, b, n, r) },
        |e| {
            uid = Some(e.pw_uid);
            e.pw_name
        },
    )?;
    uid
}

/// The gid of group `name`.
pub fn gid_of(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut gid = None;
    nss_name::<libc::group>(
        // SAFETY: `c` is NUL-terminated; other pointers as in nss_name.
        |e, b, n, r| unsafe { libc::getgrnam_r(c.as_ptr(), e, b, n, r) },
        |e| {
            gid = Some(e.gr_gid);
            e.gr_name
        },
    )?;
    gid
}

/// A cache of user and group names as procps prints them: the name, or the number when
/// there is none or it is longer than 32 bytes.
#[derive(Default)]
pub struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Names {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// User `uid`'s name, or the number.
    pub fn user(&mut self, uid: u32) -> &str {
        self.users.entry(uid).or_insert_with(|| {
            user_name(uid)
                .filter(|n| n.len() <= NAME_MAX)
                .unwrap_or_else(|| uid.to_string())
        })
    }

    /// Group `gid`'s name, or the number.
    pub fn group(&mut self, gid: u32) -> &str {
        self.groups.entry(gid).or_insert_with(|| {
            group_name(gid)
                .filter(|n| n.len() <= NAME_MAX)
                .unwrap_or_else(|| gid.to_string())
        })
    }
}

/// Major number of a `tty_nr` (kernel `new_encode_dev` encoding).
pub fn dev_major(dev: u32) -> u32 {
    (dev >> 8) & 0xfff
}

/// Minor number of a `tty_nr`.
pub fn dev_minor(dev: u32) -> u32 {
    (dev & 0xff) | ((dev & 0xfff0_0000) >> 12)
}

/// A `st_rdev` (glibc `dev_t`) in the kernel's `tty_nr` encoding.
pub fn encode_dev(rdev: u64) -> u32 {
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    (min & 0xff) | (maj << 8) | ((min & !0xff) << 12)
}

/// Which prefixes to strip from a terminal name.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Abbrev {
    /// `/dev/pts/3` → `pts/3` (ps's TTY).
    Dev,
    /// `/dev/pts/3` → `3`, `/dev/tty1` → `1` (ps's tty4).
    All,
}

/// Terminal names for `tty_nr` values, like procps' `dev_to_tty`.
#[derive(Default)]
pub struct Ttys {
    drivers: Option<Vec<TtyDriver>>,
    by_dev: HashMap<u32, Option<String>>,
}

impl Ttys {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn drivers(&mut self) -> &[TtyDriver] {
        self.drivers.get_or_insert_with(|| {
            let text = std::fs::read("/proc/tty/drivers").unwrap_or_default();
            // procps prepends each line to a list, so later lines are searched first.
            let mut v = parse_tty_drivers(&text);
            v.reverse();
            v
        })
    }

    fn driver_name(&mut self, maj: u32, min: u32) -> Option<String> {
        let d = self
            .drivers()
            .iter()
            .find(|d| d.major == maj && d.minors.0 <= min && d.minors.1 >= min)?;
        let (name, devfs) = (d.name.clone(), d.devfs);
        let mut path = format!("/dev/{name}{min}");
        let mut st = stat_dev(&path);
        if st.is_none() {
            path = format!("/dev/{name}/{min}");
            st = stat_dev(&path);
            if st.is_none() {
                if devfs {
                    return None;
                }
                path = format!("/dev/{name}");
                st = stat_dev(&path);
            }
        }
        matches(st?.1, maj, min).then_some(path)
    }

    /// The name of terminal `dev` for task `pid`, at most `chop` characters, with prefixes
    /// stripped per `abbrev`; "?" when the task has none or it cannot be found.
    pub fn name(&mut self, dev: u32, pid: u32, chop: usize, abbrev: Abbrev) -> String {
        let full = self.full_name(dev, pid);
        let Some(full) = full else {
            return if chop >= 1 { "?".into() } else { String::new() };
        };
        let mut s: &str = &full;
        if let Some(r) = s.strip_prefix("/dev/").filter(|r| !r.is_empty()) {
            s = r;
        }
        if abbrev == Abbrev::All {
            if let Some(r) = s.strip_prefix("tty").filter(|r| !r.is_empty()) {
                s = r;
            }
            if let Some(r) = s.strip_prefix("pts/").filter(|r| !r.is_empty()) {
                s = r;
            }
        }
        s.bytes()
            .take(chop)
            .map(|c| if c <= b' ' || c > 126 { '?' } else { c as char })
            .collect()
    }

    fn full_name(&mut self, dev: u32, pid: u32) -> Option<String> {
        if dev == 0 {
            return None;
        }
        if let Some(hit) = self.by_dev.get(&dev) {
            if hit.is_some() {
                return hit.clone();
            }
        } else {
            let found = self.driver_name(dev_major(dev), dev_minor(dev));
            self.by_dev.insert(dev, found.clone());
            if found.is_some() {
                return found;
            }
        }
        let (maj, min) = (dev_major(dev), dev_minor(dev));
        link_name(maj, min, pid, "fd/2")
            .or_else(|| guess_name(maj, min))
            .or_else(|| link_name(maj, min, pid, "fd/255"))
    }

    /// The device number (tty_nr encoding) of a terminal named as `ps -t` accepts it:
    /// `/dev/pts/3`, `pts/3`, `3`, `tty1`, `1`, `ttyS0`, `S0`, `console`, `co`.
    pub fn device(name: &str) -> Result<u32, &'static str> {
        let found = if name.starts_with('/') {
            stat_dev(name)
        } else {
            [
                format!("/dev/pts/{name}"),
                format!("/dev/{name}"),
                format!("/dev/tty{name}"),
                format!("/dev/pty{name}"),
                format!("/dev/{name}nsole"),
            ]
            .iter()
            .find_map(|p| stat_dev(p))
        };
        match found {
            Some((mode, rdev)) if mode & libc::S_IFMT == libc::S_IFCHR => Ok(encode_dev(rdev)),
            Some(_) => Err("list member was not a TTY"),
            None if name == "-" || name == "?" => Ok(0),
            None if name.len() == 1 && stat_dev(name).is_some() => Ok(0),
            None => Err("TTY could not be found"),
        }
    }
}

/// `stat(2)` of a path: (st_mode, st_rdev) when it exists.
fn stat_dev(path: &str) -> Option<(u32, u64)> {
    let c = CString::new(path).ok()?;
    // SAFETY: an all-zero `stat` is a valid value for the out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is a valid, writable stat buffer.
    let r = unsafe { libc::stat(c.as_ptr(), &mut st) };
    (r == 0).then_some((st.st_mode, st.st_rdev))
}

fn matches(rdev: u64, maj: u32, min: u32) -> bool {
    libc::major(rdev) == maj && libc::minor(rdev) == min
}

fn link_name(maj: u32, min: u32, pid: u32, fd: &str) -> Option<String> {
    let target = std::fs::read_link(format!("/proc/{pid}/{fd}")).ok()?;
    let target = target.to_str()?.to_string();
    if target.is_empty() || target.len() >= 127 {
        return None;
    }
    matches(stat_dev(&target)?.1, maj, min).then_some(target)
}

fn guess_name(maj: u32, min: u32) -> Option<String> {
    let path = match maj {
        3 if min <= 255 => {
            let t0 = b"pqrstuvwxyzabcde"[(min >> 4) as usize] as char;
            let t1 = b"0123456789abcdef"[(min & 15) as usize] as char;
            format!("/dev/tty{t0}{t1}")
        }
        3 => return None,
        4 if min < 64 => format!("/dev/tty{min}"),
        4 => format!("/dev/ttyS{}", min - 64),
        11 => format!("/dev/ttyB{min}"),
        17 => format!("/dev/ttyH{min}"),
        19 => format!("/dev/ttyC{min}"),
        22 | 23 => format!("/dev/ttyD{min}"),
        24 => format!("/dev/ttyE{min}"),
        32 => format!("/dev/ttyX{min}"),
        43 => format!("/dev/ttyI{min}"),
        46 => format!("/dev/ttyR{min}"),
        48 => format!("/dev/ttyL{min}"),
        57 => format!("/dev/ttyP{min}"),
        71 => format!("/dev/ttyF{min}"),
        75 => format!("/dev/ttyW{min}"),
        78 | 112 => format!("/dev/ttyM{min}"),
        105 => format!("/dev/ttyV{min}"),
        136..=143 => format!("/dev/pts/{}", min + (maj - 136) * 256),
        148 => format!("/dev/ttyT{min}"),
        154 => format!("/dev/ttySR{min}"),
        156 => format!("/dev/ttySR{}", min + 256),
        164 => format!("/dev/ttyCH{min}"),
        166 => format!("/dev/ttyACM{min}"),
        172 => format!("/dev/ttyMX{min}"),
        174 => format!("/dev/ttySI{min}"),
        188 => format!("/dev/ttyUSB{min}"),
        208 => format!("/dev/ttyU{min}"),
        216 => format!("/dev/ttyUB{min}"),
        224 => format!("/dev/ttyY{min}"),
        227 => format!("/dev/3270/tty{min}"),
        229 => format!("/dev/iseries/vtty{min}"),
        256 => format!("/dev/ttyEQ{min}"),
        _ => return None,
    };
    matches(stat_dev(&path)?.1, maj, min).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip() {
        // /dev/pts/300: major 136, minor 300.
        let rdev = libc::makedev(136, 300);
        let dev = encode_dev(rdev);
        assert_eq!((dev_major(dev), dev_minor(dev)), (136, 300));
        assert_eq!(encode_dev(libc::makedev(4, 1)), 0x401);
    }

    #[test]
    fn root_has_a_name_and_unknown_ids_print_as_numbers() {
        let mut n = Names::new();
        assert_eq!(n.user(0), "root");
        assert_eq!(n.group(0), "root");
        assert_eq!(n.user(4_000_000_123), "4000000123");
        assert_eq!(uid_of("root"), Some(0));
        assert_eq!(gid_of("root"), Some(0));
        assert_eq!(uid_of("no such user, surely"), None);
    }

    #[test]
    fn no_terminal_is_a_question_mark() {
        let mut t = Ttys::new();
        assert_eq!(t.name(0, 1, 8, Abbrev::Dev), "?");
        assert_eq!(Ttys::device("?"), Ok(0));
        assert_eq!(
            Ttys::device("no-such-terminal"),
            Err("TTY could not be found")
        );
        // /dev/null exists and is a character device, but not a terminal by name here:
        // procps accepts any character device.
        assert!(Ttys::device("/dev/null").is_ok());
    }
}
