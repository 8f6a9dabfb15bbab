//! Numbers read the way the C library reads them (`strtol`, `strtoul`, `atoi`, and procps'
//! `strict_atol`), because the tools accept exactly what procps and psmisc accept:
//! `ps --cols 0x50`, `COLUMNS=010`, `pstree -H 12x`, `pkill -SIGRTMIN+2`, `top -u 0x3e8`. One
//! scanner for all of them; no tool reads a number its own way.
//!
//! What a number means (a pid, a width, a signal) is the caller's business.

/// C's `isspace` in the C locale.
pub fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Scans like `strto[u]l(s, &end, base)` (base 0 or 10): (negative, magnitude or `None` on
/// overflow, bytes used). No digits: nothing is used.
fn scan(s: &[u8], base: u32) -> (bool, Option<u64>, usize) {
    let mut i = 0;
    while i < s.len() && is_space(s[i]) {
        i += 1;
    }
    let mut neg = false;
    if let Some(&c) = s.get(i).filter(|&&c| c == b'+' || c == b'-') {
        neg = c == b'-';
        i += 1;
    }
    let mut radix = if base == 0 { 10 } else { base };
    if base == 0 && s.get(i) == Some(&b'0') {
        if matches!(s.get(i + 1), Some(b'x' | b'X'))
            && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
        {
            radix = 16;
            i += 2;
        } else {
            radix = 8;
        }
    }
    let start = i;
    let mut v: Option<u64> = Some(0);
    while let Some(d) = s.get(i).and_then(|&c| char::from(c).to_digit(radix)) {
        v = v
            .and_then(|v| v.checked_mul(u64::from(radix)))
            .and_then(|v| v.checked_add(u64::from(d)));
        i += 1;
    }
    if i == start {
        return (false, Some(0), 0);
    }
    (neg, v, i)
}

/// `strtol(s, &end, base)`, base 0 or 10: the value (saturated to the `long` range, as
/// glibc does) and the bytes used (0 when there is no number).
pub fn strtol(s: &[u8], base: u32) -> (i64, usize) {
    let (neg, v, used) = scan(s, base);
    let v = match (neg, v) {
        (false, Some(v)) => i64::try_from(v).unwrap_or(i64::MAX),
        (false, None) => i64::MAX,
        (true, Some(v)) => 0i64.checked_sub_unsigned(v).unwrap_or(i64::MIN),
        (true, None) => i64::MIN,
    };
    (v, used)
}

/// `strtoul(s, &end, base)`, base 0 or 10: the value (a negative number wraps, overflow
/// saturates) and the bytes used.
pub fn strtoul(s: &[u8], base: u32) -> (u64, usize) {
    let (neg, v, used) = scan(s, base);
    match v {
        None => (u64::MAX, used),
        Some(v) if neg => (v.wrapping_neg(), used),
        Some(v) => (v, used),
    }
}

/// `strtoul(s, &end, base)` when it reads all of a non-empty `s` and neither wraps a negative
/// number nor saturates: the number as written, or `None`.
pub fn strtoul_exact(s: &[u8], base: u32) -> Option<u64> {
    let (neg, v, used) = scan(s, base);
    if used == 0 || used != s.len() || neg {
        return None;
    }
    v
}

/// procps' `strict_atol`: an optional sign and digits only ("" is 0); `None` otherwise or on
/// overflow (procps refuses from `LONG_MAX / 10` on, a little before the `long` range ends).
pub fn strict_atol(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let mut res: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() || res >= i64::MAX / 10 {
            return None;
        }
        res *= 10;
        let d = i64::from(c - b'0');
        if res >= i64::MAX - d {
            return None;
        }
        res += d;
    }
    Some(if neg { -res } else { res })
}

/// `strtol(s, &end, base)` when it reads all of a non-empty `s`.
pub fn strtol_whole(s: &[u8], base: u32) -> Option<i64> {
    let (v, used) = strtol(s, base);
    (used > 0 && used == s.len()).then_some(v)
}

/// C `atoi`: glibc's `(int) strtol(s, NULL, 10)`, the saturated long truncated to int.
pub fn atoi(s: &[u8]) -> i32 {
    strtol(s, 10).0 as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_the_c_library() {
        assert_eq!(strtol(b"  -12x", 10), (-12, 5));
        assert_eq!(strtol(b"x", 10), (0, 0));
        assert_eq!(strtol(b"+", 10), (0, 0));
        assert_eq!(strtol(b"0x1f", 0), (31, 4));
        assert_eq!(strtol(b"0x", 0), (0, 1));
        assert_eq!(strtol(b"010", 0), (8, 3));
        assert_eq!(strtol(b"99999999999999999999", 10).0, i64::MAX);
        assert_eq!(strtol(b"-99999999999999999999", 10).0, i64::MIN);
        assert_eq!(strtoul(b"-1", 0).0, u64::MAX);
        assert_eq!(strtoul(b"12ab", 0), (12, 2));
        assert_eq!(strtol_whole(b"0x50", 0), Some(80));
        assert_eq!(strtol_whole(b"5 ", 0), None);
        assert_eq!(strtol_whole(b"", 0), None);
        assert_eq!(atoi(b"17 apples"), 17);
        assert_eq!(atoi(b"apples"), 0);
        assert_eq!(atoi(b" 12x"), 12);
        assert_eq!(atoi(b"-3"), -3);
        assert_eq!(atoi(b"x"), 0);
        assert_eq!(atoi(b"99999999999999999999"), -1);
        assert_eq!(strtoul_exact(b"0x10", 0), Some(16));
        assert_eq!(strtoul_exact(b" +010", 0), Some(8));
        assert_eq!(strtoul_exact(b"18446744073709551615", 10), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"1x",
            b"-1",
            b"18446744073709551616",
            b"0x",
            b"08",
            b"++5",
            b"0x+5",
        ] {
            assert_eq!(strtoul_exact(bad, 0), None, "{bad:?}");
        }
    }

    #[test]
    fn strict_atol_as_procps() {
        assert_eq!(strict_atol(b"12"), Some(12));
        assert_eq!(strict_atol(b"-12"), Some(-12));
        assert_eq!(strict_atol(b"+0"), Some(0));
        assert_eq!(strict_atol(b""), Some(0));
        assert_eq!(strict_atol(b"1x"), None);
        assert_eq!(strict_atol(b" 1"), None);
        assert_eq!(strict_atol(b"922337203685477580"), Some(922337203685477580));
        // A digit after LONG_MAX / 10 is refused, though the number would fit.
        assert_eq!(strict_atol(b"9223372036854775800"), None);
        assert_eq!(strict_atol(b"99999999999999999999"), None);
    }
}
