//! POSIX extended regular expressions through the C library (`regcomp`/`regexec`), so a
//! pattern means to `taskdiag pgrep` exactly what it means to procps pgrep: the same syntax,
//! the same locale-dependent character classes and case folding, the same error messages.
//!
//! This module only compiles and runs patterns; what a pattern is matched against (the
//! escaped name or command line) is decided by the caller.

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;

/// Size of the buffer procps gives `regerror` (longer messages are cut like theirs).
const ERRBUF: usize = 256;

/// A compiled pattern (`REG_EXTENDED | REG_NOSUB`, plus `REG_ICASE` when asked).
pub struct Regex {
    /// Boxed so the compiled state never moves after `regcomp` filled it in.
    preg: Box<libc::regex_t>,
}

impl Regex {
    /// Compiles `pattern`; the error is `regerror`'s message.
    pub fn new(pattern: &[u8], icase: bool) -> Result<Regex, String> {
        let c = CString::new(pattern).map_err(|_| "pattern contains a NUL byte".to_string())?;
        let mut flags = libc::REG_EXTENDED | libc::REG_NOSUB;
        if icase {
            flags |= libc::REG_ICASE;
        }
        let mut preg: Box<MaybeUninit<libc::regex_t>> = Box::new(MaybeUninit::zeroed());
        // SAFETY: `preg` points to writable memory of the size of a regex_t and `c` is a
        // NUL-terminated string that outlives the call.
        let rc = unsafe { libc::regcomp(preg.as_mut_ptr(), c.as_ptr(), flags) };
        if rc != 0 {
            let mut buf = [0 as libc::c_char; ERRBUF];
            // SAFETY: `buf` is writable for ERRBUF bytes; glibc's regerror only reads the
            // error code (the regex_t argument is not dereferenced for compile errors), and
            // always NUL-terminates within the given size.
            unsafe { libc::regerror(rc, preg.as_ptr(), buf.as_mut_ptr(), ERRBUF) };
            // SAFETY: regerror NUL-terminated the buffer (it is at least one byte long).
            let msg = unsafe { CStr::from_ptr(buf.as_ptr()) };
            // A failed regcomp frees what it allocated: nothing to regfree.
            return Err(msg.to_string_lossy().into_owned());
        }
        // SAFETY: regcomp returned 0, so it initialised the whole regex_t; Box<MaybeUninit<T>>
        // and Box<T> have the same layout.
        let preg = unsafe { Box::from_raw(Box::into_raw(preg).cast::<libc::regex_t>()) };
        Ok(Regex { preg })
    }

    /// Whether the pattern matches anywhere in `text` (a C string).
    pub fn is_match(&self, text: &CStr) -> bool {
        // SAFETY: `preg` was initialised by a successful regcomp and not freed; `text` is
        // NUL-terminated; with nmatch 0 (and REG_NOSUB) pmatch is not used, so null is fine.
        let rc = unsafe { libc::regexec(&*self.preg, text.as_ptr(), 0, std::ptr::null_mut(), 0) };
        rc == 0
    }

    /// Whether the pattern matches anywhere in `text` (bytes up to the first NUL; `buf` is
    /// scratch space reused between calls).
    pub fn is_match_bytes(&self, text: &[u8], buf: &mut Vec<u8>) -> bool {
        buf.clear();
        let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
        buf.extend_from_slice(&text[..end]);
        buf.push(0);
        match CStr::from_bytes_with_nul(buf) {
            Ok(c) => self.is_match(c),
            Err(_) => false,
        }
    }
}

impl Drop for Regex {
    fn drop(&mut self) {
        // SAFETY: `preg` holds a successfully compiled pattern that is freed exactly once,
        // here.
        unsafe { libc::regfree(&mut *self.preg) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(re: &str, text: &str) -> bool {
        let r = Regex::new(re.as_bytes(), false).expect("compiles");
        let mut buf = Vec::new();
        r.is_match_bytes(text.as_bytes(), &mut buf)
    }

    #[test]
    fn extended_syntax() {
        assert!(m("^(sleep|cat)$", "cat"));
        assert!(!m("^(sleep|cat)$", "cats"));
        assert!(m("a+b{2}", "xaabb"));
        assert!(m("[[:digit:]]", "abc1"));
        assert!(!m("[[:digit:]]", "abc"));
        // In an ERE, \( is a literal parenthesis and ( groups.
        assert!(m(r"^a\) \(b$", "a) (b"));
        assert!(m("", "anything"));
    }

    #[test]
    fn case_folding_is_opt_in() {
        let r = Regex::new(b"SLEEP", true).expect("compiles");
        let mut buf = Vec::new();
        assert!(r.is_match_bytes(b"sleep", &mut buf));
        let r = Regex::new(b"SLEEP", false).expect("compiles");
        assert!(!r.is_match_bytes(b"sleep", &mut buf));
    }

    #[test]
    fn errors_are_the_c_librarys_words() {
        let e = Regex::new(b"a(", false).err().expect("an error");
        assert_eq!(e, "Unmatched ( or \\(");
        let e = Regex::new(b"[z-a]", false).err().expect("an error");
        assert_eq!(e, "Invalid range end");
        assert!(Regex::new(b"a\0b", false).is_err());
    }

    #[test]
    fn text_stops_at_a_nul() {
        let r = Regex::new(b"b$", false).expect("compiles");
        let mut buf = Vec::new();
        // "ab\0c" is the C string "ab": b is at its end.
        assert!(r.is_match_bytes(b"ab\0c", &mut buf));
        assert!(!r.is_match_bytes(b"abc", &mut buf));
    }
}
