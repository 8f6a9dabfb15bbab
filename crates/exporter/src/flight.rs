//! One collection for many scrapes: a caller that arrives while another runs the work waits
//! for that run and takes its result, instead of starting its own.
//!
//! A waiter gets the result of the run in progress when it arrived, which started before
//! its request: a scrape is never older than the scrape that was already under way.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

struct State<T> {
    running: bool,
    generation: u64,
    waiting: usize,
    last: Option<Arc<T>>,
}

/// Shares runs of a piece of work among the callers that arrive while it runs.
pub struct SingleFlight<T> {
    state: Mutex<State<T>>,
    done: Condvar,
}

impl<T> Default for SingleFlight<T> {
    fn default() -> Self {
        SingleFlight {
            state: Mutex::new(State {
                running: false,
                generation: 0,
                waiting: 0,
                last: None,
            }),
            done: Condvar::new(),
        }
    }
}

/// Locks `m`, poisoned or not (the exporter's state too stays consistent enough to report
/// after a panic while it was held).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state is a flag, a counter and a pointer: consistent even after a panic elsewhere.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T> SingleFlight<T> {
    /// Runs `work`, or, if a run is in progress, waits for it and returns its result.
    pub fn run(&self, work: impl FnOnce() -> T) -> Arc<T> {
        let mut s = lock(&self.state);
        if s.running {
            let g = s.generation;
            s.waiting += 1;
            while s.generation == g {
                s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.waiting -= 1;
            if let Some(r) = &s.last {
                return Arc::clone(r);
            }
        }
        s.running = true;
        drop(s);
        // A panic in `work` must not leave the next callers waiting for a run that ended.
        struct Finish<'a, T>(&'a SingleFlight<T>, Option<Arc<T>>);
        impl<T> Drop for Finish<'_, T> {
            fn drop(&mut self) {
                let mut s = lock(&self.0.state);
                s.running = false;
                s.generation += 1;
                if let Some(r) = self.1.take() {
                    s.last = Some(r);
                }
                drop(s);
                self.0.done.notify_all();
            }
        }
        let mut finish = Finish(self, None);
        let r = Arc::new(work());
        finish.1 = Some(Arc::clone(&r));
        drop(finish);
        r
    }

    /// Callers waiting for the run in progress.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn callers_arriving_during_a_run_share_it() {
        let sf = Arc::new(SingleFlight::<usize>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let first = {
            let (sf, runs) = (Arc::clone(&sf), Arc::clone(&runs));
            let sf2 = Arc::clone(&sf);
            std::thread::spawn(move || {
                sf.run(|| {
                    // Held until three others wait for this run.
                    let t0 = Instant::now();
                    while sf2.waiting() < 3 {
                        assert!(t0.elapsed() < Duration::from_secs(60), "no waiters came");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    runs.fetch_add(1, Ordering::SeqCst)
                })
            })
        };
        // The others start once the run is under way.
        let t0 = Instant::now();
        while !lock(&sf.state).running {
            assert!(t0.elapsed() < Duration::from_secs(60));
            std::thread::sleep(Duration::from_millis(1));
        }
        let others: Vec<_> = (0..3)
            .map(|_| {
                let (sf, runs) = (Arc::clone(&sf), Arc::clone(&runs));
                std::thread::spawn(move || sf.run(|| runs.fetch_add(1, Ordering::SeqCst) + 100))
            })
            .collect();
        let a = first.join().unwrap();
        for o in others {
            assert!(
                Arc::ptr_eq(&o.join().unwrap(), &a),
                "a waiter got its own run"
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // A caller after the run runs again.
        assert_eq!(*sf.run(|| 7), 7);
    }

    #[test]
    fn a_panicking_run_does_not_strand_the_next_caller() {
        let sf = SingleFlight::<u32>::default();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sf.run(|| panic!("collection failed"))
        }));
        assert!(r.is_err());
        assert_eq!(*sf.run(|| 3), 3);
    }
}
