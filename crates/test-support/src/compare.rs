//! Comparing a reference tool's answer with ours when the system may change between the two.
//!
//! The two programs cannot read the system at the same instant: a task may start or exit,
//! a time-derived value (%CPU, elapsed time) may cross a second boundary between the reads.
//! Retrying until the answers agree would also hide an intermittent real difference. Instead,
//! the reference is read on both sides of our read: if either of its reads agrees with ours,
//! ours is what the reference showed at a moment next to it; if the reference read the same
//! both times and ours differs, the system did not change across our read and the difference
//! is real, and is reported at once. Only when the reference itself changed across our read
//! (the system demonstrably changed) are the reads made again, a bounded number of times.
//!
//! A value that only grows with time (elapsed time, the seconds since a task started) moves on
//! every second: where one read of ours takes longer than that (a BPF load on a slow or emulated
//! CPU), neither reference read around ours can equal it. [`agree_between`] also accepts ours
//! when it lies between the two reference reads, and [`text_between`] says so of text output
//! token by token.

use std::fmt::Debug;

/// How many times the reads are made again while the system keeps changing under them.
pub const ATTEMPTS: usize = 10;

/// Why a comparison failed.
#[derive(Debug)]
pub struct Mismatch<T> {
    /// The reference's answer (its last read).
    pub reference: T,
    /// Ours, read between the reference's last two reads.
    pub ours: T,
    /// True if the reference never read the same twice around ours in [`ATTEMPTS`] tries: the
    /// system kept changing, and the difference may or may not be real.
    pub unstable: bool,
}

impl<T: Debug> std::fmt::Display for Mismatch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = if self.unstable {
            "the system changed across every one of our reads"
        } else {
            "the reference read the same before and after ours"
        };
        write!(
            f,
            "{why}\n=== reference ===\n{:?}\n=== ours ===\n{:?}",
            self.reference, self.ours
        )
    }
}

/// Compares `ours()` with `reference()` read around it, `same` deciding whether ours agrees
/// with a reference answer (two reference answers are compared with `==`). Returns the
/// agreed answer of ours, or why it differs.
pub fn agree_by<T: PartialEq>(
    reference: impl FnMut() -> T,
    ours: impl FnMut() -> T,
    same: impl Fn(&T, &T) -> bool,
) -> Result<T, Mismatch<T>> {
    agree_core(reference, ours, same, |_, _, _| false)
}

/// [`agree`], also accepting ours when `between(before, ours, after)` says it lies between the
/// reference's reads on either side of it (a value that moves on with time).
pub fn agree_between<T: PartialEq>(
    reference: impl FnMut() -> T,
    ours: impl FnMut() -> T,
    between: impl Fn(&T, &T, &T) -> bool,
) -> Result<T, Mismatch<T>> {
    agree_core(reference, ours, |a, b| a == b, between)
}

fn agree_core<T: PartialEq>(
    mut reference: impl FnMut() -> T,
    mut ours: impl FnMut() -> T,
    same: impl Fn(&T, &T) -> bool,
    between: impl Fn(&T, &T, &T) -> bool,
) -> Result<T, Mismatch<T>> {
    let mut before = reference();
    for attempt in 1..=ATTEMPTS {
        let got = ours();
        if same(&before, &got) {
            return Ok(got);
        }
        let after = reference();
        if same(&after, &got) || between(&before, &got, &after) {
            return Ok(got);
        }
        if before == after || attempt == ATTEMPTS {
            return Err(Mismatch {
                unstable: before != after,
                reference: after,
                ours: got,
            });
        }
        before = after;
    }
    unreachable!("the last attempt returns")
}

/// Whether text `ours` lies between `before` and `after`, the reference's output read on
/// either side of it: the same lines, and in each line the same whitespace-separated words,
/// except words that are a number or a duration (`ss`, `mm:ss`, `hh:mm:ss`, `dd-hh:mm:ss`,
/// decimals) in all three and whose value in ours is within the other two's (either order).
/// Column padding is not compared: a duration that gains a digit may widen its column.
pub fn text_between(before: &[u8], ours: &[u8], after: &[u8]) -> bool {
    let lines = |t: &[u8]| {
        t.split(|&c| c == b'\n')
            .map(<[u8]>::to_vec)
            .collect::<Vec<_>>()
    };
    let (b, o, a) = (lines(before), lines(ours), lines(after));
    if b.len() != o.len() || a.len() != o.len() {
        return false;
    }
    b.iter()
        .zip(&o)
        .zip(&a)
        .all(|((b, o), a)| o == b || o == a || words_between(b, o, a))
}

fn words_between(before: &[u8], ours: &[u8], after: &[u8]) -> bool {
    let words = |t: &[u8]| {
        t.split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect::<Vec<_>>()
    };
    let (b, o, a) = (words(before), words(ours), words(after));
    if b.len() != o.len() || a.len() != o.len() {
        return false;
    }
    b.iter().zip(&o).zip(&a).all(|((b, o), a)| {
        if o == b || o == a {
            return true;
        }
        match (seconds(b), seconds(o), seconds(a)) {
            (Some(b), Some(o), Some(a)) => b.min(a) <= o && o <= b.max(a),
            _ => false,
        }
    })
}

/// A number or a `[[dd-]hh:]mm:ss` duration, in seconds.
fn seconds(w: &[u8]) -> Option<f64> {
    let w = std::str::from_utf8(w).ok()?;
    let (days, clock) = match w.split_once('-') {
        Some((d, rest)) if rest.contains(':') => (d.parse::<u64>().ok()?, rest),
        Some(_) => return None,
        None => (0, w),
    };
    let mut total = 0.0;
    for part in clock.split(':') {
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
            return None;
        }
        total = total * 60.0 + part.parse::<f64>().ok()?;
    }
    Some(days as f64 * 86_400.0 + total)
}

/// [`agree_by`] with `==`.
pub fn agree<T: PartialEq>(
    reference: impl FnMut() -> T,
    ours: impl FnMut() -> T,
) -> Result<T, Mismatch<T>> {
    agree_by(reference, ours, |a, b| a == b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_change_between_the_reads_is_not_a_difference() {
        // The value moves on between the reference's first read and ours.
        let clock = Cell::new(0);
        let tick = || {
            clock.set(clock.get() + 1);
            clock.get() / 2
        };
        let r = agree(tick, tick);
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn a_difference_on_a_still_system_is_reported_at_once() {
        let ours_reads = Cell::new(0);
        let r = agree(
            || 1,
            || {
                ours_reads.set(ours_reads.get() + 1);
                2
            },
        );
        let m = r.expect_err("a real difference");
        assert!(!m.unstable);
        assert_eq!((m.reference, m.ours, ours_reads.get()), (1, 2, 1));
    }

    #[test]
    fn a_system_that_keeps_changing_is_retried_then_reported_as_such() {
        let n = Cell::new(0);
        let r = agree(
            || {
                n.set(n.get() + 2);
                n.get()
            },
            || 1usize,
        );
        let m = r.expect_err("never agrees");
        assert!(m.unstable);
        assert_eq!(n.get(), 2 * (ATTEMPTS + 1));
    }

    #[test]
    fn a_value_between_the_reference_reads_agrees() {
        let reads = Cell::new(0);
        // The reference moves 10 -> 12 across ours, which read 11.
        let r = agree_between(
            || {
                reads.set(reads.get() + 1);
                10 + 2 * u32::from(reads.get() > 1)
            },
            || 11,
            |b, o, a| b < o && o < a,
        );
        assert_eq!(r.ok(), Some(11));
    }

    #[test]
    fn text_between_accepts_durations_within_the_reads_and_nothing_else() {
        let ps =
            |pid: u32, etime: &str| format!("  PID     ELAPSED CMD\n{pid:5} {etime:>11} sleep\n");
        let between = |b: String, o: String, a: String| {
            text_between(b.as_bytes(), o.as_bytes(), a.as_bytes())
        };
        assert!(between(ps(42, "01:09"), ps(42, "01:10"), ps(42, "01:11")));
        // Outside the two reads, another word changed, or a line more: a difference.
        assert!(!between(ps(42, "01:09"), ps(42, "01:12"), ps(42, "01:11")));
        assert!(!between(ps(42, "01:09"), ps(43, "01:10"), ps(42, "01:11")));
        assert!(!between(
            ps(42, "01:09"),
            ps(42, "01:10") + "x\n",
            ps(42, "01:11")
        ));
        // Days and hours, seconds as a number, decimals.
        assert!(text_between(b"1-23:59:59", b"2-00:00:00", b"2-00:00:01"));
        assert!(text_between(b"59:59", b"1:00:00", b"1:00:01"));
        assert!(text_between(b"100 0.5", b"101 0.4", b"102 0.3"));
        assert!(!text_between(b"a-1:00", b"b-1:01", b"c-1:02"));
    }
}
