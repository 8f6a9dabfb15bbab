//! Byte-level pieces every parser of this crate is built from: lines, words, decimal and hex
//! numbers. /proc prints numbers in plain ASCII (no sign but `-`, no leading `+`, no blanks
//! inside), so these accept exactly that and nothing else.

use crate::parse::ParseError;

/// A [`ParseError`] without a field.
pub(crate) fn err(what: &'static str) -> ParseError {
    ParseError { what, field: None }
}

/// A [`ParseError`] about one named field or key.
pub(crate) fn err_in(what: &'static str, field: &'static str) -> ParseError {
    ParseError {
        what,
        field: Some(field),
    }
}

/// A decimal number, optionally negative, that is all of `s`.
pub(crate) fn int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let v = i64::try_from(uint(digits)?).ok()?;
    Some(if neg { -v } else { v })
}

/// An unsigned decimal number that is all of `s`.
pub(crate) fn uint(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |v, &c| {
        c.is_ascii_digit()
            .then(|| v.checked_mul(10)?.checked_add(u64::from(c - b'0')))?
    })
}

/// [`uint`] narrowed to `u32`.
pub(crate) fn uint32(s: &[u8]) -> Option<u32> {
    uint(s).and_then(|v| u32::try_from(v).ok())
}

/// A hex number of at most 16 digits that is all of `s` (no `0x`).
pub(crate) fn hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0u64, |v, &c| {
        Some((v << 4) | u64::from(char::from(c).to_digit(16)?))
    })
}

/// A decimal fraction such as `10598.77` (as /proc/uptime and /proc/loadavg print them).
pub(crate) fn float(s: &[u8]) -> Option<f64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The non-empty lines of `buf`. Found with memchr: smaps has ~750 bytes per mapping, and
/// splitting them is most of its parsing.
pub(crate) fn lines(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', buf)
        .chain(std::iter::once(buf.len()))
        .filter_map(move |end| {
            let line = &buf[start..end];
            start = end + 1;
            (!line.is_empty()).then_some(line)
        })
}

/// The words of `s`: runs of bytes between ASCII blanks (space, tab, newline, CR, FF).
pub(crate) fn words(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(u8::is_ascii_whitespace).filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_all_of_the_field_or_nothing() {
        assert_eq!(uint(b"0"), Some(0));
        assert_eq!(uint(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(uint(b"18446744073709551616"), None);
        for bad in [&b""[..], b"+1", b" 1", b"1 ", b"1x", b"-1"] {
            assert_eq!(uint(bad), None, "{bad:?}");
        }
        assert_eq!(int(b"-51"), Some(-51));
        assert_eq!(int(b"-"), None);
        assert_eq!(int(b"9223372036854775808"), None);
        assert_eq!(uint32(b"4294967296"), None);
        assert_eq!(hex(b"000001ffffffffff"), Some(0x1ff_ffff_ffff));
        assert_eq!(hex(b"0x10"), None);
        assert_eq!(hex(b"11111111111111111"), None);
        assert_eq!(float(b"10598.77"), Some(10598.77));
        assert_eq!(float(b"x"), None);
    }

    #[test]
    fn lines_and_words_skip_empty_pieces() {
        let v: Vec<&[u8]> = lines(b"a\n\nb c\n").collect();
        assert_eq!(v, [&b"a"[..], b"b c"]);
        let w: Vec<&[u8]> = words(b"  1\t 2\n").collect();
        assert_eq!(w, [&b"1"[..], b"2"]);
    }
}
