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
    mut reference: impl FnMut() -> T,
    mut ours: impl FnMut() -> T,
    same: impl Fn(&T, &T) -> bool,
) -> Result<T, Mismatch<T>> {
    let mut before = reference();
    for attempt in 1..=ATTEMPTS {
        let got = ours();
        if same(&before, &got) {
            return Ok(got);
        }
        let after = reference();
        if same(&after, &got) {
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
}
