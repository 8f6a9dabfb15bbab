//! The two terminal strings `pstree -h`/`-H` needs: termcap `md` (start bold) and `me`
//! (end all attributes), found the way psmisc finds them, through the system's terminfo
//! library (`tgetent`/`tgetstr`, whose `me` is a trimmed `sgr0` that only the library
//! computes), and written the way `tputs` writes them (delay specifications dropped).
//!
//! The library is loaded with `dlopen` only when highlighting is asked for, so the binary
//! does not depend on it; where it is missing, terminals count as unknown. Nothing else
//! about the terminal is handled here.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// Terminal strings for highlighting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps {
    /// `md` (bold).
    pub bold: Option<Vec<u8>>,
    /// `me` (exit attribute mode).
    pub sgr0: Option<Vec<u8>>,
}

type TgetentFn = unsafe extern "C" fn(*mut c_char, *const c_char) -> c_int;
type TgetstrFn = unsafe extern "C" fn(*const c_char, *mut *mut c_char) -> *mut c_char;

const LIBS: [&CStr; 4] = [
    c"libtinfo.so.6",
    c"libncursesw.so.6",
    c"libncurses.so.6",
    c"libtinfo.so.5",
];

fn library() -> Option<*mut c_void> {
    LIBS.iter().find_map(|name| {
        // SAFETY: `name` is NUL-terminated; dlopen has no other preconditions.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        (!h.is_null()).then_some(h)
    })
}

fn symbol(lib: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `lib` is a live handle from dlopen and `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// `tgetent` for terminal `name`, then `tgetstr("md")` and `tgetstr("me")`; `None` when the
/// terminal is unknown (or no terminfo library is installed).
pub fn load(name: &[u8]) -> Option<Caps> {
    let cname = CString::new(name).ok()?;
    let lib = library()?;
    let tgetent = symbol(lib, c"tgetent")?;
    let tgetstr = symbol(lib, c"tgetstr")?;
    // SAFETY: the symbols are ncurses' tgetent/tgetstr, whose C signatures these types
    // spell; a data pointer from dlsym may be converted to the function pointer it names.
    let (tgetent, tgetstr) = unsafe {
        (
            std::mem::transmute::<*mut c_void, TgetentFn>(tgetent),
            std::mem::transmute::<*mut c_void, TgetstrFn>(tgetstr),
        )
    };
    let mut area = [0 as c_char; 2048];
    // SAFETY: `area` is a writable buffer larger than the 1024 bytes termcap asks for and
    // `cname` is NUL-terminated.
    let r = unsafe { tgetent(area.as_mut_ptr(), cname.as_ptr()) };
    if r <= 0 {
        return None;
    }
    let get = |id: &CStr| -> Option<Vec<u8>> {
        // SAFETY: `id` is NUL-terminated; a null area asks ncurses for its own copy.
        let p = unsafe { tgetstr(id.as_ptr(), std::ptr::null_mut()) };
        if p.is_null() || p as isize == -1 {
            return None;
        }
        // SAFETY: a non-null result is a NUL-terminated string owned by the library, alive
        // until the next tgetent; it is copied at once.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
    };
    Some(Caps {
        bold: get(c"md"),
        sgr0: get(c"me"),
    })
}

/// The bytes `tputs` writes for `s` when no baud rate is known: the string without its
/// `$<delay>` specifications.
pub fn tputs(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'$' && s.get(i + 1) == Some(&b'<') {
            if let Some(len) = s[i + 2..].iter().position(|&c| c == b'>') {
                let spec = &s[i + 2..i + 2 + len];
                let ok = spec.iter().any(u8::is_ascii_digit)
                    && spec
                        .iter()
                        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'*' | b'/'));
                if ok {
                    i += len + 3;
                    continue;
                }
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tputs_drops_delays() {
        assert_eq!(tputs(b"\x1b[1m$<2>x$<5*/>y$<z>"), b"\x1b[1mxy$<z>");
    }

    #[test]
    fn unknown_terminals_have_no_capabilities() {
        assert_eq!(load(b"no-such-terminal-type"), None);
        assert_eq!(load(b"a\0b"), None);
    }
}
