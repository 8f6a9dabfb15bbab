//! Text handling shared by the tools: the C locale's character tests, procps' escaping of
//! untrusted names and command lines, and the joining of argv vectors.
//!
//! Process names and arguments are bytes chosen by whoever started the process: they may hold
//! control characters, escape sequences or invalid UTF-8. Nothing from a task reaches a
//! terminal without passing through one of these functions.

use std::ffi::CStr;

extern "C" {
    fn wcwidth(c: libc::wchar_t) -> libc::c_int;
    fn iswprint(c: u32) -> libc::c_int;
    fn mbrtowc(
        pwc: *mut libc::wchar_t,
        s: *const libc::c_char,
        n: libc::size_t,
        ps: *mut libc::mbstate_t,
    ) -> libc::size_t;
}

/// Sets the C library's locale from the environment (`setlocale(LC_ALL, "")`, as procps
/// does) and reports whether its character set is UTF-8.
pub fn init_locale() -> bool {
    // SAFETY: the argument is a NUL-terminated empty string; called before other threads
    // exist (the tools are single-threaded when they start).
    unsafe { libc::setlocale(libc::LC_ALL, c"".as_ptr()) };
    // SAFETY: nl_langinfo returns a pointer to a static NUL-terminated string (or NULL).
    let enc = unsafe { libc::nl_langinfo(libc::CODESET) };
    if enc.is_null() {
        return false;
    }
    // SAFETY: non-null, NUL-terminated, valid until the next setlocale.
    let enc = unsafe { CStr::from_ptr(enc) };
    enc.to_bytes().eq_ignore_ascii_case(b"UTF-8")
}

/// Length of a UTF-8 sequence from its lead byte (-1: not a lead byte), as procps' table.
fn utf8_len(b: u8) -> i32 {
    match b {
        0x00..=0x7f => 1,
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => -1,
    }
}

/// procps' library escaping of names and command lines (`escape_str` in libproc2): in a
/// UTF-8 locale control characters become '?', and from the first malformed sequence on,
/// controls become '.' and non-ASCII bytes '?'; in other locales every non-ASCII byte
/// becomes '?' and every control character '.'. Stops at the first NUL.
pub fn lib_escape(src: &[u8], utf8: bool) -> Vec<u8> {
    let end = src.iter().position(|&c| c == 0).unwrap_or(src.len());
    let mut s = src[..end].to_vec();
    let esc_all = |s: &mut [u8]| {
        for c in s {
            if *c < 0x20 || *c == 0x7f {
                *c = b'.';
            } else if *c >= 0x80 {
                *c = b'?';
            }
        }
    };
    if !utf8 {
        esc_all(&mut s);
        return s;
    }
    let len = s.len();
    let mut i = 0;
    while i < len {
        let n = utf8_len(s[i]);
        if n < 0 || i + n as usize > len {
            esc_all(&mut s[i..]);
            break;
        }
        if s[i] < 0x20 || s[i] == 0x7f {
            s[i] = b'?';
        }
        i += n as usize;
    }
    s
}

/// Joins /proc/PID/cmdline like procps' `read_unvectored`: NULs and newlines between
/// arguments become spaces, trailing NULs end the string, a final space is dropped; at most
/// `max` bytes are read (procps reads 128 KiB - 1).
pub fn unvector(raw: &[u8], max: usize) -> Vec<u8> {
    let mut v = raw[..raw.len().min(max)].to_vec();
    let n = v.len();
    if n == 0 {
        return v;
    }
    let mut i = n;
    while i > 0 && v[i - 1] == 0 {
        i -= 1;
    }
    for c in &mut v[..i] {
        if *c == b'\n' || *c == 0 {
            *c = b' ';
        }
    }
    if v[n - 1] == b' ' {
        v[n - 1] = 0;
    }
    let end = v.iter().position(|&c| c == 0).unwrap_or(n);
    v.truncate(end);
    v
}

/// The most of /proc/PID/cmdline procps reads (its 128 KiB buffer, less the final NUL).
pub const CMDLINE_MAX: usize = 128 * 1024 - 1;

/// A command line as libproc2 makes it (`fill_cmdline_cvt`) for ps's `args`, `pgrep -a` and
/// pmap's header: the arguments joined and escaped, or for a task without any (kernel
/// threads, zombies, an unreadable or empty cmdline) its escaped name `comm` in brackets,
/// zombies marked ` <defunct>`.
pub fn command_line(cmdline: Option<&[u8]>, comm: &[u8], zombie: bool, utf8: bool) -> Vec<u8> {
    let joined = unvector(cmdline.unwrap_or_default(), CMDLINE_MAX);
    if !joined.is_empty() {
        return lib_escape(&joined, utf8);
    }
    let mut v = Vec::with_capacity(comm.len() + 12);
    v.push(b'[');
    v.extend_from_slice(&lib_escape(comm, utf8));
    v.push(b']');
    if zombie {
        v.extend_from_slice(b" <defunct>");
    }
    v
}

/// C's `isprint` in the current locale (see [`init_locale`]) of a byte held in a (signed)
/// `char`, as procps passes it: bytes above 0x7f are negative, and 0xff is `EOF`.
pub fn c_isprint(c: u8) -> bool {
    // SAFETY: glibc's character tables are defined for every value a signed char can take
    // (-128..=-1 mirror 128..=255, -1 being EOF), the range this cast produces.
    unsafe { libc::isprint(libc::c_int::from(c as libc::c_char)) != 0 }
}

/// ps's output escaping (`escape_str` in ps/output.c): copies `src` into `out` using at
/// most `max_cells` screen cells. In UTF-8 locales valid printable characters are kept
/// (their width per `wcwidth`), anything else is '?'; otherwise controls are '.' and bytes
/// above 0x7f are '?'. Returns the cells used.
pub fn out_escape(out: &mut Vec<u8>, src: &[u8], max_cells: usize, utf8: bool) -> usize {
    let end = src.iter().position(|&c| c == 0).unwrap_or(src.len());
    let src = &src[..end];
    let mut cells = 0usize;
    if !utf8 {
        for &c in src.iter().take(max_cells) {
            out.push(match c {
                0x00..=0x1f | 0x7f => b'.',
                0x80..=0xff => b'?',
                c => c,
            });
            cells += 1;
        }
        return cells;
    }
    // SAFETY: an all-zero mbstate_t is the initial conversion state.
    let mut st: libc::mbstate_t = unsafe { std::mem::zeroed() };
    let mut i = 0usize;
    while i < src.len() && cells < max_cells {
        // ASCII without asking mbrtowc (most of every command line; the conversion was 13% of
        // `ps aux`'s time): between characters the state is the initial one, where UTF-8's
        // mbrtowc maps a non-NUL ASCII byte to itself, length 1. Printable runs are copied,
        // any other ASCII byte is '?'.
        if src[i] < 0x80 {
            let run = src[i..]
                .iter()
                .take(max_cells - cells)
                .take_while(|c| (0x20..0x7f).contains(*c))
                .count();
            if run == 0 {
                out.push(b'?');
            } else {
                out.extend_from_slice(&src[i..i + run]);
            }
            i += run.max(1);
            cells += run.max(1);
            continue;
        }
        let mut wc: libc::wchar_t = 0;
        let rest = &src[i..];
        // SAFETY: `rest` is valid for `rest.len()` bytes; wc and st are valid out-params.
        let len = unsafe { mbrtowc(&mut wc, rest.as_ptr().cast(), rest.len().min(6), &mut st) };
        if len == 0 {
            break;
        }
        if len == usize::MAX || len == usize::MAX - 1 {
            // SAFETY: resetting the conversion state to the initial state.
            st = unsafe { std::mem::zeroed() };
            out.push(b'?');
            i += 1;
            cells += 1;
        } else {
            // SAFETY: pure functions of a wide character.
            let printable = unsafe { iswprint(wc as u32) } != 0;
            if !printable {
                out.push(b'?');
                i += len;
                cells += 1;
                continue;
            }
            // SAFETY: as above.
            let w = unsafe { wcwidth(wc) };
            if w > 0 && w as usize > max_cells - cells {
                break;
            }
            out.extend_from_slice(&src[i..i + len]);
            i += len;
            if w > 0 {
                cells += w as usize;
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lib_escape_replaces_controls() {
        assert_eq!(lib_escape(b"a\x1bb\x7f", true), b"a?b?");
        assert_eq!(lib_escape(b"a\x1bb\xc3\xa9", false), b"a.b??");
        // Valid UTF-8 stays; a stray continuation byte starts the fallback.
        assert_eq!(lib_escape("é\u{1}".as_bytes(), true), "é?".as_bytes());
        assert_eq!(lib_escape(b"x\x80\x01y", true), b"x?.y");
        assert_eq!(lib_escape(b"ab\0cd", true), b"ab");
    }

    #[test]
    fn unvector_joins_arguments() {
        assert_eq!(unvector(b"sleep\x00100\x00", 1000), b"sleep 100");
        assert_eq!(unvector(b"a\nb\0c", 1000), b"a b c");
        assert_eq!(unvector(b"title with spaces ", 1000), b"title with spaces");
        assert_eq!(unvector(b"x\0\0\0", 1000), b"x");
        assert_eq!(unvector(b"", 1000), b"");
        assert_eq!(unvector(b"abcdef", 3), b"abc");
    }

    #[test]
    fn command_lines_as_procps_shows_them() {
        assert_eq!(
            command_line(Some(b"sleep\x0010\x00"), b"sleep", false, true),
            b"sleep 10"
        );
        assert_eq!(command_line(None, b"kthreadd", false, true), b"[kthreadd]");
        assert_eq!(
            command_line(Some(b""), b"gone", true, true),
            b"[gone] <defunct>"
        );
        assert_eq!(
            command_line(Some(b"a\tb\nc\0"), b"x\ty", false, true),
            b"a?b c"
        );
        assert_eq!(command_line(Some(b"\0\0"), b"x\ty", false, true), b"[x?y]");
    }

    #[test]
    fn c_isprint_in_the_c_locale() {
        assert!(c_isprint(b'a') && c_isprint(b' ') && c_isprint(b'~'));
        assert!(!c_isprint(b'\t') && !c_isprint(0x7f) && !c_isprint(0xe9) && !c_isprint(0xff));
    }

    #[test]
    fn out_escape_in_the_c_locale() {
        let mut o = Vec::new();
        assert_eq!(out_escape(&mut o, b"a\tb\xff", 10, false), 4);
        assert_eq!(o, b"a.b?");
        o.clear();
        assert_eq!(out_escape(&mut o, b"abcdef", 3, false), 3);
        assert_eq!(o, b"abc");
    }

    #[test]
    fn out_escape_of_ascii_in_a_utf8_locale() {
        // (ASCII alone: its result does not depend on the test process's locale.)
        let mut o = Vec::new();
        assert_eq!(out_escape(&mut o, b"a\tb\x7fc d\0e", 100, true), 7);
        assert_eq!(o, b"a?b?c d");
        for (max, want) in [(0, &b""[..]), (3, b"ab?"), (4, b"ab?d"), (9, b"ab?def")] {
            o.clear();
            assert_eq!(out_escape(&mut o, b"ab\x1bdef", max, true), want.len());
            assert_eq!(o, want, "max {max}");
        }
    }
}
