//! Who is served next, and how much each user may hold: the daemon's fairness rules, without
//! any I/O, so that they can be tested directly.
//!
//! * [`Sched`] orders the requests waiting for a worker (a loaded program set). The next free
//!   worker goes to the waiting request whose uid holds the fewest workers, the oldest among
//!   equals, within the per-uid cap ([`per_uid_cap`]: `--max-requests-per-uid`, but never
//!   every worker when there are two or more); a dump that must walk every process's memory
//!   maps waits for the one running, if any (its read-ahead is the largest buffer of a
//!   request, see docs/SECURITY.md). A dump that has been waiting for its reader while a uid
//!   holding fewer workers waits for one gives its worker up ([`Sched::should_yield`]): a slow
//!   reader cannot keep others from being served.
//! * A request for which no worker it may use comes free for the busy wait (`--busy-wait`,
//!   counted from its arrival or from the last time a worker it may use came free) leaves the
//!   queue as [`Unserved::Busy`], to be answered at once with `EBUSY` rather than at its
//!   deadline: its client can read /proc itself. One whose deadline passes leaves as
//!   [`Unserved::Late`].
//! * A worker whose request passed its deadline while it still ran it (blocked in the kernel)
//!   is marked stuck ([`Sched::abandon`]) by the event loop, which answers its client; it stays
//!   held, by its uid too, until it comes back, so that it is given nothing meanwhile and one
//!   uid's stuck requests never hold more than its cap.
//! * [`FairQueue`] orders connections waiting to be identified: the uid with the fewest
//!   waiting goes first, so a flood of connections delays only its own.
//! * [`Budget`] counts the memory held for slow readers: daemon-wide at most the
//!   `--buffer-limit`, per uid at most an equal share among the uids holding some.
//!
//! Threads, locks and sockets are [`crate::server`]'s and [`crate::work`]'s.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The most workers one uid may hold when the daemon has `workers` and `--max-requests-per-uid`
/// says `configured`: never every worker while there are two or more, so that one user's
/// requests (stuck ones included) always leave a worker to the others.
pub fn per_uid_cap(configured: usize, workers: usize) -> usize {
    if workers > 1 {
        configured.clamp(1, workers - 1)
    } else {
        1
    }
}

/// Why a waiting request leaves the queue unserved ([`Sched::expire`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unserved {
    /// Its deadline passed.
    Late,
    /// No worker it may use came free for the busy wait: the explanation for the client.
    Busy(String),
}

/// A request waiting for a worker.
#[derive(Debug)]
struct Waiting<T> {
    uid: u32,
    maps: bool,
    deadline: Instant,
    /// When it arrived, or a worker it may use last came free: it is answered busy
    /// `busy_wait` after that.
    hope: Instant,
    item: T,
}

/// A worker lent to a request; give it back with [`Sched::release`].
#[derive(Debug)]
pub struct Ticket {
    /// Which lending this is (for [`Sched::abandon`]).
    pub id: u64,
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
    workers: usize,
    per_uid: usize,
    busy_wait: Duration,
    /// Whether a walk of every process's memory maps is running.
    maps_running: bool,
    /// Dumps that decided to give their worker up and have not yet returned it.
    yielding: usize,
    /// Workers lent, by ticket id: whether the request's deadline passed while its worker
    /// still ran it (the event loop ended the connection; the worker is stuck until it
    /// comes back).
    lent: HashMap<u64, bool>,
    next_id: u64,
}

impl<T> Sched<T> {
    /// A scheduler for `workers` workers, letting one uid hold at most
    /// [`per_uid_cap`]`(per_uid, workers)` of them at once, and answering busy a request
    /// for which no worker it may use came free for `busy_wait`.
    pub fn new(workers: usize, per_uid: usize, busy_wait: Duration) -> Self {
        Sched {
            waiting: VecDeque::new(),
            holds: HashMap::new(),
            workers: workers.max(1),
            per_uid: per_uid_cap(per_uid, workers),
            busy_wait,
            maps_running: false,
            yielding: 0,
            lent: HashMap::new(),
            next_id: 0,
        }
    }

    /// The most workers one uid may hold.
    #[cfg(test)]
    pub fn per_uid(&self) -> usize {
        self.per_uid
    }

    /// Queues `item` for `uid`, arriving at `now`; `maps` if its dump walks every process's
    /// memory maps. It must be taken by `deadline` or it is given up ([`Sched::expire`]).
    pub fn push(&mut self, uid: u32, maps: bool, now: Instant, deadline: Instant, item: T) {
        self.waiting.push_back(Waiting {
            uid,
            maps,
            deadline,
            hope: now,
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
        let id = self.next_id;
        self.next_id += 1;
        self.lent.insert(id, false);
        Some((
            w.item,
            Ticket {
                id,
                uid: w.uid,
                maps: w.maps,
                yielded: false,
            },
        ))
    }

    /// Gives back the worker `t` stands for, at `now`: the requests that may use it have hope
    /// again (their busy wait starts over).
    pub fn release(&mut self, t: Ticket, now: Instant) {
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
        self.lent.remove(&t.id);
        let maps_free = !self.maps_running;
        let hopeful: Vec<bool> = self
            .waiting
            .iter()
            .map(|w| self.eligible(w, maps_free))
            .collect();
        for (w, hopeful) in self.waiting.iter_mut().zip(hopeful) {
            if hopeful {
                w.hope = now;
            }
        }
    }

    /// Marks the worker lent with ticket `id` as stuck: its request's deadline passed while
    /// it still ran it, and its client was answered without it. It stays held (by its uid
    /// too) until it comes back ([`Sched::release`]). False if it is not lent or already
    /// marked.
    pub fn abandon(&mut self, id: u64) -> bool {
        match self.lent.get_mut(&id) {
            Some(stuck) if !*stuck => {
                *stuck = true;
                true
            }
            _ => false,
        }
    }

    /// Workers whose request passed its deadline and that have not come back.
    pub fn stuck(&self) -> usize {
        self.lent.values().filter(|&&s| s).count()
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

    /// Removes and returns the requests that must leave the queue at `now`: those whose
    /// deadline passed ([`Unserved::Late`]), and those for which no worker they may use came
    /// free for the busy wait ([`Unserved::Busy`], with the explanation).
    pub fn expire(&mut self, now: Instant) -> Vec<(T, Unserved)> {
        let mut gone = Vec::new();
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for w in std::mem::take(&mut self.waiting) {
            if w.deadline <= now {
                gone.push((w.item, Unserved::Late));
            } else if w.hope + self.busy_wait <= now {
                let why = self.busy_reason(w.uid, w.maps);
                gone.push((w.item, Unserved::Busy(why)));
            } else {
                kept.push_back(w);
            }
        }
        self.waiting = kept;
        gone
    }

    /// Why a request of `uid` (a maps walk if `maps`) found no worker it may use.
    fn busy_reason(&self, uid: u32, maps: bool) -> String {
        let held = self.held(uid);
        let busy = self.lent.len();
        let stuck = self.stuck();
        let mut why = if held >= self.per_uid {
            format!(
                "uid {uid} already holds {held} worker(s), as many as one uid may ({} of the {})",
                self.per_uid, self.workers
            )
        } else if maps && self.maps_running {
            "another walk of every process's memory maps runs (one at a time)".to_string()
        } else {
            format!(
                "{busy} of its {} workers are answering others",
                self.workers
            )
        };
        if stuck > 0 {
            why.push_str(&format!(
                "; {stuck} worker(s) still stuck in requests past their deadline (a process \
                 being read may hang, e.g. on a FUSE or NFS mount)"
            ));
        }
        format!(
            "taskdiagd is busy: no worker it may use came free for this request within {} ms \
             ({why}); read /proc instead (--backend procfs, or auto), or try again later",
            self.busy_wait.as_millis()
        )
    }

    /// When the queue must next be looked at: the earliest deadline or end of a busy wait of
    /// the waiting requests.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting
            .iter()
            .map(|w| w.deadline.min(w.hope + self.busy_wait))
            .min()
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

    /// A scheduler for many workers (the cap is `per_uid`), that never answers busy.
    fn sched<T>(per_uid: usize) -> Sched<T> {
        Sched::new(64, per_uid, Duration::from_secs(3600))
    }

    /// `s.push` of a request arriving now.
    fn push<T>(s: &mut Sched<T>, uid: u32, maps: bool, deadline: Instant, item: T) {
        s.push(uid, maps, Instant::now(), deadline, item);
    }

    #[test]
    fn the_uid_holding_fewest_workers_goes_first() {
        let mut s = sched(8);
        for i in 0..4 {
            push(&mut s, 1, false, later(), ("a", i));
        }
        let (a0, _t0) = s.take().unwrap();
        assert_eq!(a0, ("a", 0));
        push(&mut s, 2, false, later(), ("b", 0));
        // uid 2 holds nothing, uid 1 one: b goes before the older a requests.
        assert_eq!(s.take().unwrap().0, ("b", 0));
        assert_eq!(s.take().unwrap().0, ("a", 1));
    }

    #[test]
    fn a_uid_holds_at_most_its_limit_and_one_maps_walk_runs() {
        let mut s = sched(2);
        for i in 0..3 {
            push(&mut s, 1, false, later(), i);
        }
        let (_, t0) = s.take().unwrap();
        let (_, _t1) = s.take().unwrap();
        assert!(s.take().is_none(), "a third worker for uid 1");
        s.release(t0, Instant::now());
        assert_eq!(s.take().unwrap().0, 2);

        let mut s = sched(8);
        push(&mut s, 1, true, later(), "walk1");
        push(&mut s, 2, true, later(), "walk2");
        push(&mut s, 2, false, later(), "base");
        let (_, w) = s.take().unwrap();
        assert_eq!(s.take().unwrap().0, "base", "the second walk waits");
        assert!(s.take().is_none());
        s.release(w, Instant::now());
        assert_eq!(s.take().unwrap().0, "walk2");
    }

    #[test]
    fn a_stalled_dump_yields_to_a_uid_holding_fewer_workers_once() {
        let mut s = sched(8);
        push(&mut s, 1, false, later(), "a0");
        push(&mut s, 1, false, later(), "a1");
        let (_, mut a0) = s.take().unwrap();
        let (_, mut a1) = s.take().unwrap();
        // Nobody else waits: no reason to give up.
        assert!(!s.should_yield(&mut a0));
        push(&mut s, 1, false, later(), "a2");
        assert!(
            !s.should_yield(&mut a0),
            "its own uid's requests do not count"
        );
        push(&mut s, 2, false, later(), "b0");
        assert!(s.should_yield(&mut a0));
        assert!(
            !s.should_yield(&mut a1),
            "one worker is enough for one waiting uid"
        );
        s.release(a0, Instant::now());
        assert_eq!(s.take().unwrap().0, "b0");
        // uid 2 now holds as many as uid 1.
        assert!(!s.should_yield(&mut a1));
        // A uid holding nothing waits: uid 1's stalled dump yields again.
        push(&mut s, 3, false, later(), "c0");
        assert!(s.should_yield(&mut a1));
    }

    #[test]
    fn waiting_requests_expire_at_their_deadline() {
        let mut s = sched(8);
        let now = Instant::now();
        push(&mut s, 1, false, now, "old");
        push(&mut s, 1, false, later(), "new");
        assert_eq!(s.next_deadline(), Some(now));
        assert_eq!(s.expire(now), vec![("old", Unserved::Late)]);
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

    #[test]
    fn one_uid_never_holds_every_worker() {
        // The default (and any larger setting) leaves one worker to the others.
        assert_eq!(per_uid_cap(8, 2), 1);
        assert_eq!(per_uid_cap(usize::MAX, 4), 3);
        assert_eq!(per_uid_cap(2, 4), 2);
        assert_eq!(per_uid_cap(0, 4), 1);
        // With one worker there is nothing to leave.
        assert_eq!(per_uid_cap(8, 1), 1);
        let mut s = Sched::new(2, 8, Duration::from_secs(3600));
        assert_eq!(s.per_uid(), 1);
        for i in 0..4 {
            push(&mut s, 1, false, later(), ("a", i));
        }
        let (_, _a0) = s.take().expect("a first worker for uid 1");
        assert!(s.take().is_none(), "uid 1 took the second worker too");
        push(&mut s, 2, false, later(), ("b", 0));
        assert_eq!(s.take().expect("the second worker").0, ("b", 0));
    }

    #[test]
    fn a_request_no_worker_it_may_use_comes_free_for_is_answered_busy() {
        let wait = Duration::from_millis(500);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let deadline = at(30_000);
        let mut s = Sched::new(2, 8, wait);
        // Two uids hold both workers.
        s.push(1, false, at(0), deadline, "a");
        s.push(2, false, at(0), deadline, "b");
        let (_, a) = s.take().expect("a worker");
        let (_, b) = s.take().expect("a worker");
        s.push(3, false, at(100), deadline, "c");
        assert_eq!(s.next_deadline(), Some(at(600)));
        assert!(s.expire(at(599)).is_empty());
        // A worker that comes free gives the waiting request hope again.
        s.release(a, at(400));
        assert!(s.expire(at(700)).is_empty(), "it had a worker at 400 ms");
        assert_eq!(s.next_deadline(), Some(at(900)));
        let (_, c) = s.take().expect("the worker that came free");
        // Both held again; uid 1 waits, and nothing comes free for it.
        s.push(1, false, at(1000), deadline, "a2");
        let gone = s.expire(at(1500));
        assert_eq!(gone.len(), 1);
        let (item, Unserved::Busy(why)) = &gone[0] else {
            panic!("not busy: {gone:?}");
        };
        assert_eq!(*item, "a2");
        assert!(
            why.starts_with("taskdiagd is busy: no worker it may use came free")
                && why.contains("2 of its 2 workers are answering others")
                && why.contains("read /proc instead"),
            "{why}"
        );
        s.release(b, at(1600));
        s.release(c, at(1600));
        assert!(s.expire(at(10_000)).is_empty());
    }

    #[test]
    fn workers_held_by_its_own_uid_or_the_maps_walk_give_no_hope() {
        let wait = Duration::from_millis(500);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let deadline = at(30_000);
        let mut s = Sched::new(3, 8, wait);
        assert_eq!(s.per_uid(), 2);
        s.push(1, false, at(0), deadline, "a0");
        s.push(1, false, at(0), deadline, "a1");
        let (_, a0) = s.take().expect("a worker");
        let (_, _a1) = s.take().expect("a worker");
        // uid 1 is at its cap; uid 2's requests come and go on the third worker, which uid 1
        // may not use: its request has no hope.
        s.push(1, false, at(0), deadline, "a2");
        s.push(2, true, at(0), deadline, "walk");
        let (_, walk) = s.take().expect("the third worker");
        s.push(2, true, at(100), deadline, "walk2");
        s.release(walk, at(200));
        let (_, walk) = s.take().expect("the third worker again");
        assert_eq!(s.next_deadline(), Some(at(500)));
        // Neither uid 1's request (its cap) nor a second maps walk came free by then.
        s.push(3, true, at(400), deadline, "walk3");
        let gone = s.expire(at(1000));
        let items: Vec<_> = gone.iter().map(|(i, _)| *i).collect();
        assert_eq!(items, ["a2", "walk3"]);
        let why: Vec<&str> = gone
            .iter()
            .map(|(_, u)| match u {
                Unserved::Busy(w) => w.as_str(),
                Unserved::Late => "late",
            })
            .collect();
        assert!(why[0].contains("uid 1 already holds 2"), "{}", why[0]);
        assert!(
            why[1].contains("another walk of every process's memory maps"),
            "{}",
            why[1]
        );
        s.release(a0, at(1000));
        s.release(walk, at(1000));
    }

    #[test]
    fn a_stuck_worker_stays_held_until_it_comes_back() {
        let wait = Duration::from_millis(500);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut s = Sched::new(2, 8, wait);
        s.push(1, false, at(0), at(100), "a");
        let (_, a) = s.take().expect("a worker");
        assert!(s.abandon(a.id));
        assert!(!s.abandon(a.id), "marked once");
        assert!(!s.abandon(a.id + 1), "not lent");
        assert_eq!(s.stuck(), 1);
        // uid 1 still holds it: its next request cannot take the free worker (its cap), and
        // is told why.
        s.push(1, false, at(200), at(30_000), "a2");
        assert!(s.take().is_none());
        let gone = s.expire(at(700));
        let Some((_, Unserved::Busy(why))) = gone.first() else {
            panic!("{gone:?}");
        };
        assert!(why.contains("1 worker(s) still stuck"), "{why}");
        // Another uid gets the other worker.
        s.push(2, false, at(700), at(30_000), "b");
        let (_, b) = s.take().expect("the other worker");
        s.release(a, at(800));
        assert_eq!(s.stuck(), 0);
        s.push(1, false, at(800), at(30_000), "a3");
        assert_eq!(s.take().expect("back").0, "a3");
        s.release(b, at(900));
    }
}
