//! Who is served next, and how much each user may hold: the daemon's fairness rules, without
//! any I/O, so that they can be tested directly.
//!
//! * [`Sched`] orders the requests waiting for a worker (a loaded program set). The next free
//!   worker goes to the waiting request whose uid holds the fewest workers, the oldest among
//!   equals, within `--max-requests-per-uid`; a dump that must walk every process's memory
//!   maps waits for the one running, if any (its read-ahead is the largest buffer of a
//!   request, see docs/SECURITY.md). A dump that has been waiting for its reader while a uid
//!   holding fewer workers waits for one gives its worker up ([`Sched::should_yield`]): a slow
//!   reader cannot keep others from being served.
//! * [`FairQueue`] orders connections waiting to be identified: the uid with the fewest
//!   waiting goes first, so a flood of connections delays only its own.
//! * [`Budget`] counts the memory held for slow readers: daemon-wide at most the
//!   `--buffer-limit`, per uid at most an equal share among the uids holding some.
//!
//! Threads, locks and sockets are [`crate::server`]'s and [`crate::work`]'s.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// A request waiting for a worker.
#[derive(Debug)]
struct Waiting<T> {
    uid: u32,
    maps: bool,
    deadline: Instant,
    item: T,
}

/// A worker lent to a request; give it back with [`Sched::release`].
#[derive(Debug)]
pub struct Ticket {
    /// The uid it is lent to.
    pub uid: u32,
    maps: bool,
    yielded: bool,
}

/// Requests waiting for workers, and the workers each uid holds.
#[derive(Debug)]
pub struct Sched<T> {
    waiting: VecDeque<Waiting<T>>,
    holds: HashMap<u32, usize>,
    per_uid: usize,
    /// Whether a walk of every process's memory maps is running.
    maps_running: bool,
    /// Dumps that decided to give their worker up and have not yet returned it.
    yielding: usize,
}

impl<T> Sched<T> {
    /// A scheduler letting one uid hold at most `per_uid` workers at once.
    pub fn new(per_uid: usize) -> Self {
        Sched {
            waiting: VecDeque::new(),
            holds: HashMap::new(),
            per_uid: per_uid.max(1),
            maps_running: false,
            yielding: 0,
        }
    }

    /// Queues `item` for `uid`; `maps` if its dump walks every process's memory maps. It must
    /// be taken by `deadline` or it is given up ([`Sched::expire`]).
    pub fn push(&mut self, uid: u32, maps: bool, deadline: Instant, item: T) {
        self.waiting.push_back(Waiting {
            uid,
            maps,
            deadline,
            item,
        });
    }

    /// Requests waiting.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    fn held(&self, uid: u32) -> usize {
        self.holds.get(&uid).copied().unwrap_or(0)
    }

    /// Whether `w` may get a worker now. `maps_free`: whether a maps walk may start.
    fn eligible(&self, w: &Waiting<T>, maps_free: bool) -> bool {
        self.held(w.uid) < self.per_uid && (!w.maps || maps_free)
    }

    /// The next request for a free worker, if one may be served: the eligible one whose uid
    /// holds the fewest workers, the oldest among equals.
    pub fn take(&mut self) -> Option<(T, Ticket)> {
        let maps_free = !self.maps_running;
        let (i, _) = self
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| self.eligible(w, maps_free))
            .min_by_key(|(i, w)| (self.held(w.uid), *i))?;
        let w = self.waiting.remove(i)?;
        *self.holds.entry(w.uid).or_default() += 1;
        self.maps_running |= w.maps;
        Some((
            w.item,
            Ticket {
                uid: w.uid,
                maps: w.maps,
                yielded: false,
            },
        ))
    }

    /// Gives back the worker `t` stands for.
    pub fn release(&mut self, t: Ticket) {
        if let Some(h) = self.holds.get_mut(&t.uid) {
            *h -= 1;
            if *h == 0 {
                self.holds.remove(&t.uid);
            }
        }
        if t.maps {
            self.maps_running = false;
        }
        if t.yielded {
            self.yielding -= 1;
        }
    }

    /// Asked by a dump waiting for its reader: whether it must give its worker up, because a
    /// request of a uid holding fewer workers than `t`'s waits and no other dump is already
    /// giving one up for it. Once it says yes, `t` counts as yielding until released.
    pub fn should_yield(&mut self, t: &mut Ticket) -> bool {
        if t.yielded {
            return true;
        }
        let mine = self.held(t.uid);
        // A waiting maps walk can use this worker only if this dump is the walk running.
        let maps_free = !self.maps_running || t.maps;
        let mut starved: Vec<u32> = self
            .waiting
            .iter()
            .filter(|w| w.uid != t.uid && self.held(w.uid) < mine && self.eligible(w, maps_free))
            .map(|w| w.uid)
            .collect();
        starved.sort_unstable();
        starved.dedup();
        if starved.len() > self.yielding {
            self.yielding += 1;
            t.yielded = true;
            return true;
        }
        false
    }

    /// Removes and returns the requests whose deadline is past `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<T> {
        let mut gone = Vec::new();
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for w in self.waiting.drain(..) {
            if w.deadline <= now {
                gone.push(w.item);
            } else {
                kept.push_back(w);
            }
        }
        self.waiting = kept;
        gone
    }

    /// The earliest deadline of the waiting requests.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.deadline).min()
    }
}

/// Items waiting per uid; the uid with the fewest waiting is served first, the oldest item
/// among equals.
#[derive(Debug)]
pub struct FairQueue<T> {
    items: VecDeque<(u32, T)>,
    count: HashMap<u32, usize>,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue {
            items: VecDeque::new(),
            count: HashMap::new(),
        }
    }
}

impl<T> FairQueue<T> {
    /// Queues `item` for `uid`.
    pub fn push(&mut self, uid: u32, item: T) {
        *self.count.entry(uid).or_default() += 1;
        self.items.push_back((uid, item));
    }

    /// The next item, if any.
    pub fn pop(&mut self) -> Option<T> {
        let n = |uid: &u32| self.count.get(uid).copied().unwrap_or(0);
        let (i, _) = self
            .items
            .iter()
            .enumerate()
            .min_by_key(|(i, (uid, _))| (n(uid), *i))?;
        let (uid, item) = self.items.remove(i)?;
        if let Some(c) = self.count.get_mut(&uid) {
            *c -= 1;
            if *c == 0 {
                self.count.remove(&uid);
            }
        }
        Some(item)
    }

    /// Items waiting.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items.len()
    }
}

/// Bytes held for slow readers: at most `limit` in all, and per uid at most an equal share
/// among the uids holding some (counting the one asking).
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    total: usize,
    per_uid: HashMap<u32, usize>,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Budget {
            limit,
            total: 0,
            per_uid: HashMap::new(),
        }
    }

    /// Takes `n` bytes for `uid` if both the total and its share allow.
    pub fn try_reserve(&mut self, uid: u32, n: usize) -> bool {
        let mine = self.per_uid.get(&uid).copied().unwrap_or(0);
        let holders = self.per_uid.len() + usize::from(mine == 0);
        let share = self.limit / holders.max(1);
        if self.total + n > self.limit || mine + n > share {
            return false;
        }
        self.total += n;
        *self.per_uid.entry(uid).or_default() += n;
        true
    }

    /// Gives back `n` bytes `uid` reserved.
    pub fn release(&mut self, uid: u32, n: usize) {
        if let Some(m) = self.per_uid.get_mut(&uid) {
            let n = n.min(*m);
            *m -= n;
            self.total -= n;
            if *m == 0 {
                self.per_uid.remove(&uid);
            }
        }
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn the_uid_holding_fewest_workers_goes_first() {
        let mut s = Sched::new(8);
        for i in 0..4 {
            s.push(1, false, later(), ("a", i));
        }
        let (a0, _t0) = s.take().unwrap();
        assert_eq!(a0, ("a", 0));
        s.push(2, false, later(), ("b", 0));
        // uid 2 holds nothing, uid 1 one: b goes before the older a requests.
        assert_eq!(s.take().unwrap().0, ("b", 0));
        assert_eq!(s.take().unwrap().0, ("a", 1));
    }

    #[test]
    fn a_uid_holds_at_most_its_limit_and_one_maps_walk_runs() {
        let mut s = Sched::new(2);
        for i in 0..3 {
            s.push(1, false, later(), i);
        }
        let (_, t0) = s.take().unwrap();
        let (_, _t1) = s.take().unwrap();
        assert!(s.take().is_none(), "a third worker for uid 1");
        s.release(t0);
        assert_eq!(s.take().unwrap().0, 2);

        let mut s = Sched::new(8);
        s.push(1, true, later(), "walk1");
        s.push(2, true, later(), "walk2");
        s.push(2, false, later(), "base");
        let (_, w) = s.take().unwrap();
        assert_eq!(s.take().unwrap().0, "base", "the second walk waits");
        assert!(s.take().is_none());
        s.release(w);
        assert_eq!(s.take().unwrap().0, "walk2");
    }

    #[test]
    fn a_stalled_dump_yields_to_a_uid_holding_fewer_workers_once() {
        let mut s = Sched::new(8);
        s.push(1, false, later(), "a0");
        s.push(1, false, later(), "a1");
        let (_, mut a0) = s.take().unwrap();
        let (_, mut a1) = s.take().unwrap();
        // Nobody else waits: no reason to give up.
        assert!(!s.should_yield(&mut a0));
        s.push(1, false, later(), "a2");
        assert!(
            !s.should_yield(&mut a0),
            "its own uid's requests do not count"
        );
        s.push(2, false, later(), "b0");
        assert!(s.should_yield(&mut a0));
        assert!(
            !s.should_yield(&mut a1),
            "one worker is enough for one waiting uid"
        );
        s.release(a0);
        assert_eq!(s.take().unwrap().0, "b0");
        // uid 2 now holds as many as uid 1.
        assert!(!s.should_yield(&mut a1));
        // A uid holding nothing waits: uid 1's stalled dump yields again.
        s.push(3, false, later(), "c0");
        assert!(s.should_yield(&mut a1));
    }

    #[test]
    fn waiting_requests_expire_at_their_deadline() {
        let mut s = Sched::new(8);
        let now = Instant::now();
        s.push(1, false, now, "old");
        s.push(1, false, later(), "new");
        assert_eq!(s.next_deadline(), Some(now));
        assert_eq!(s.expire(now), vec!["old"]);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn the_uid_with_fewest_waiting_connections_is_identified_first() {
        let mut q = FairQueue::default();
        for i in 0..100 {
            q.push(1, i);
        }
        q.push(2, 1000);
        assert_eq!(q.pop(), Some(1000));
        assert_eq!(q.pop(), Some(0));
        assert_eq!(q.len(), 99);
    }

    #[test]
    fn the_budget_is_a_hard_limit_shared_between_uids() {
        let mut b = Budget::new(100);
        assert!(b.try_reserve(1, 60));
        assert!(!b.try_reserve(1, 50), "over the limit");
        assert!(b.try_reserve(1, 40));
        // uid 2 has no share left: the budget is spent.
        assert!(!b.try_reserve(2, 10));
        b.release(1, 60);
        // Two holders: 50 each; uid 1 holds 40.
        assert!(b.try_reserve(2, 50));
        assert!(!b.try_reserve(1, 20));
        assert!(b.try_reserve(1, 10));
        assert!(!b.try_reserve(2, 1));
        assert_eq!(b.used(), 100);
        b.release(1, 50);
        b.release(2, 50);
        assert_eq!(b.used(), 0);
    }
}
