//! What a refresh reads: every task, or, with the change tracker, only the processes that may
//! have changed since the previous refresh, patched into the previous snapshot.
//!
//! A walk of every task costs about a microsecond per task before any group is read (48 ms at
//! 50,000 processes on the machines of docs/BENCHMARKS.md), so a top that walks every second
//! spends several percent of a CPU on tasks that did not run. The tracker
//! (`taskdiag_bpf::Tracker`, on the scheduler's tracepoints) marks every task that leaves a
//! CPU, starts or exits, and tells which ones are on a CPU now; a refresh reads those processes
//! (one small request each) and keeps the rest from the previous snapshot: a process that did
//! not run has the same CPU time, state and, nearly always, memory.
//!
//! Nearly: what changes while a task does not run is not marked (another process renices it,
//! the kernel reclaims or swaps its memory, a tracer attaches). So every [`FULL_EVERY`] a
//! refresh walks every task again, which bounds how old such a value can be; and zombies, which
//! disappear when their parent (not they) runs, are re-read at every refresh. A refresh also
//! walks every task when the tracker lost marks, when more than one process in
//! [`WALK_ABOVE`] changed (a walk is then cheaper than the single requests), when what is
//! read changes (threads, groups), and where the backend answers a single request with a walk
//! of its own (BPF before Linux 6.1, the daemon).
//!
//! `TASKDIAG_TOP_TRACK=0` switches the tracker off (every refresh walks every task);
//! `TASKDIAG_TOP_TRACK=1` makes it required (top fails when it cannot start it), re-reads only
//! what changed however many processes did (between the periodic walks), and has batch mode
//! say at its end how many refreshes did (for tests and benchmarks).

use std::rc::Rc;
use std::time::{Duration, Instant};

use taskdiag::Tracker;

use crate::snapshot::{sort_like_proc, Error, Query, Source, Task};

/// The longest a value that changes while its task sleeps can go unread.
pub const FULL_EVERY: Duration = Duration::from_secs(10);
/// A refresh walks every task when more than one process in this many changed.
pub const WALK_ABOVE: usize = 16;

/// Reads refreshes, with the change tracker when there is one.
pub struct Refresher {
    /// `None`: every refresh walks every task.
    tracker: Option<Tracker>,
    /// The previous snapshot, sorted like /proc (empty before the first), shared with the frame
    /// made of it: the caller drops that frame before the next refresh, which then updates it
    /// in place.
    last: Rc<Vec<Task>>,
    /// What `last` was read for.
    last_query: Option<Query>,
    /// When every task was last walked.
    last_walk: Option<Instant>,
    /// Refreshes so far that walked every task, and that read only what changed.
    pub walks: u64,
    /// See `walks`.
    pub partial: u64,
    /// `TASKDIAG_TOP_TRACK=1`: only what changed is re-read however much did.
    required: bool,
}

impl Refresher {
    /// A refresher that walks every task each time.
    pub fn walking() -> Refresher {
        Refresher {
            tracker: None,
            last: Rc::default(),
            last_query: None,
            last_walk: None,
            walks: 0,
            partial: 0,
            required: false,
        }
    }

    /// A refresher with the change tracker, when `src` answers single requests cheaply and the
    /// tracker can be started here (it needs the privilege to load BPF programs); else one that
    /// walks. An error only when `TASKDIAG_TOP_TRACK=1` requires the tracker.
    pub fn tracking(src: &Source) -> Result<Refresher, String> {
        let mut r = Refresher::walking();
        match required() {
            Some(false) => return Ok(r),
            Some(true) if !src.single_task_reads_are_cheap() => {
                return Err(format!(
                    "TASKDIAG_TOP_TRACK=1: the {} backend answers one process with a walk of \
                     every task",
                    src.backend_name()
                ))
            }
            Some(true) => {
                r.required = true;
                r.tracker = Some(
                    Tracker::start()
                        .map_err(|e| format!("TASKDIAG_TOP_TRACK=1: the change tracker: {e}"))?,
                );
            }
            // Without it top is as correct, only costlier: not worth an error.
            None if src.single_task_reads_are_cheap() && taskdiag::may_load_bpf() => {
                r.tracker = Tracker::start().ok();
            }
            None => {}
        }
        Ok(r)
    }

    /// Forgets the previous snapshot: the next refresh walks every task.
    pub fn reset(&mut self) {
        self.last = Rc::default();
        self.last_query = None;
    }

    /// The tasks of `q` now, sorted like /proc lists them (with `q.threads`, each leader's
    /// STAT is its process's, as `Source::leaders_as_processes` gives it).
    pub fn refresh(&mut self, src: &mut Source, q: &Query) -> Result<Rc<Vec<Task>>, Error> {
        let Some(tracker) = &mut self.tracker else {
            self.walks += 1;
            return src.take_with_leaders(q).map(Rc::new);
        };
        // Drained before anything is read: what changes from here on is marked for the next
        // refresh.
        let changes = tracker.take();
        let now = Instant::now();
        let due = self.last_query != Some(*q)
            || self.last.is_empty()
            || self
                .last_walk
                .is_none_or(|w| now.duration_since(w) >= FULL_EVERY);
        let mut tgids: Vec<u32> = Vec::new();
        let complete = match &changes {
            Ok(c) if c.complete => {
                tgids.extend(c.tasks.iter().map(|&(_, tgid)| tgid));
                true
            }
            _ => false,
        };
        // Zombies go when their parent reaps them, which marks only the parent.
        tgids.extend(
            self.last
                .iter()
                .filter(|t| t.base.as_ref().is_some_and(|b| is_dead(b.rec.state)))
                .map(|t| t.tgid),
        );
        tgids.sort_unstable();
        tgids.dedup();
        let many = tgids.len() * WALK_ABOVE > self.last.len() && !self.required;
        if due || !complete || many {
            self.last = Rc::new(src.take_with_leaders(q)?);
            self.last_query = Some(*q);
            self.last_walk = Some(now);
            self.walks += 1;
            return Ok(self.last.clone());
        }
        let fresh = src.take_tgids(q, &tgids)?;
        let mut last = Rc::try_unwrap(std::mem::take(&mut self.last))
            .unwrap_or_else(|shared| shared.as_ref().clone());
        patch(&mut last, fresh, &tgids);
        self.last = Rc::new(last);
        self.partial += 1;
        Ok(self.last.clone())
    }
}

/// Replaces the tasks of processes `tgids` (sorted) in `last` with `fresh` (their tasks now;
/// both sorted like /proc). A process whose tasks are the same ones is updated in place; when
/// tasks started or ended, `last` is rebuilt around them (a merge: linear time).
fn patch(last: &mut Vec<Task>, fresh: Vec<Task>, tgids: &[u32]) {
    let key = |t: &Task| crate::snapshot::proc_order(t.tgid, t.pid);
    let range =
        |v: &[Task], g: u32| v.partition_point(|t| t.tgid < g)..v.partition_point(|t| t.tgid <= g);
    let same_tasks = tgids.iter().all(|&g| {
        let (a, b) = (range(last, g), range(&fresh, g));
        a.len() == b.len() && last[a].iter().zip(&fresh[b]).all(|(x, y)| key(x) == key(y))
    });
    if same_tasks {
        for f in fresh {
            let i = last.partition_point(|t| key(t) < key(&f));
            last[i] = f;
        }
        return;
    }
    last.retain(|t| tgids.binary_search(&t.tgid).is_err());
    last.extend(fresh);
    // Two sorted runs: the standard sort merges them in linear time.
    sort_like_proc(last);
}

/// `TASKDIAG_TOP_TRACK`: `Some(false)` off, `Some(true)` required, `None` when possible.
pub fn required() -> Option<bool> {
    match std::env::var("TASKDIAG_TOP_TRACK").as_deref() {
        Ok("0") => Some(false),
        Ok("1") => Some(true),
        _ => None,
    }
}

/// A zombie (or dead) task's state index.
fn is_dead(state: u8) -> bool {
    matches!(taskdiag_proto::state_char(state), 'Z' | 'X')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tgid: u32, pid: u32, tag: u32) -> Task {
        Task {
            pid,
            tgid,
            // `tag` tells an updated record from the old one.
            stat: Some(taskdiag_proto::StatRec {
                minflt: u64::from(tag),
                ..Default::default()
            }),
            ..Task::default()
        }
    }

    fn ids(v: &[Task]) -> Vec<(u32, u32, u64)> {
        v.iter()
            .map(|t| (t.tgid, t.pid, t.stat.map_or(0, |s| s.minflt)))
            .collect()
    }

    #[test]
    fn patch_replaces_only_the_changed_processes() {
        let old = || vec![t(1, 1, 0), t(5, 5, 0), t(5, 6, 0), t(9, 9, 0)];
        // The same tasks: updated in place, the others kept.
        let mut last = old();
        patch(&mut last, vec![t(5, 5, 1), t(5, 6, 1)], &[5]);
        assert_eq!(ids(&last), [(1, 1, 0), (5, 5, 1), (5, 6, 1), (9, 9, 0)]);
        // A thread ended, a process started, one exited (marked, not read back).
        let mut last = old();
        patch(&mut last, vec![t(5, 5, 2), t(7, 7, 2)], &[5, 7, 9]);
        assert_eq!(ids(&last), [(1, 1, 0), (5, 5, 2), (7, 7, 2)]);
        // A new thread sorts after its leader.
        let mut last = old();
        patch(&mut last, vec![t(1, 1, 3), t(1, 2, 3)], &[1]);
        assert_eq!(
            ids(&last),
            [(1, 1, 3), (1, 2, 3), (5, 5, 0), (5, 6, 0), (9, 9, 0)]
        );
    }
}
