//! `taskdiag profile`'s engine: samples every thread of a scope at one rate, on CPU through
//! perf_event and off CPU through the task iterator, aggregates stacks in the kernel, symbolizes
//! them and renders the result.
//!
//! [`scope`] turns the command line's terms into the namespaces and ids the programs filter on;
//! [`sampler`] loads `src/bpf/profile.bpf.c` and reads what it counted; [`record`] runs the
//! sampling loop and names the stacks ([`symbolize`]) into a [`model::Profile`]; [`text`],
//! [`svg`] and [`pprof`] render it.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod error;
pub mod model;
pub mod pprof;
pub mod record;
pub mod sampler;
pub mod scope;
mod skel;
pub mod svg;
pub mod symbolize;
pub mod text;

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT and SIGTERM once [`stop_on_signals`] has run.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT (Ctrl-C) and SIGTERM end a profile cleanly instead of the process: returns the
/// flag they set, for [`record::record`].
pub fn stop_on_signals() -> &'static AtomicBool {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction is fully initialised (zeroed, then handler and mask set).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}

pub use error::ProfileError;

/// The run's summary line: samples, rate, duration and the stacks' quality.
pub fn summary(run: &record::Run) -> String {
    let q = &run.quality;
    let secs = run.profile.duration_ns as f64 / 1e9;
    let pct = |n: u64| {
        if q.user_stacks == 0 {
            0.0
        } else {
            100.0 * n as f64 / q.user_stacks as f64
        }
    };
    let mut s = format!(
        "{} samples of 1/{} s in {secs:.2} s ({} on CPU)",
        run.profile.stacks.iter().map(|s| s.count).sum::<u64>(),
        run.profile.hz,
        run.stats.on_cpu,
    );
    if run.walks > 0 {
        s.push_str(&format!(
            "; off CPU: {} walks, every {:.0} ms on average, {} threads looked at, {} of them \
             unchanged since the walk before",
            run.walks,
            secs * 1000.0 / run.walks as f64,
            run.stats.off_cpu,
            run.stats.reused,
        ));
        if !run.user_stacks_off_cpu {
            s.push_str(" (their user stacks need Linux 5.18)");
        }
    }
    s.push_str(&format!(
        "; {} user stacks, {:.1}% truncated, {:.1}% not reaching a thread's entry point",
        q.user_stacks,
        pct(q.truncated),
        pct(q.broken),
    ));
    if !q.broken_in.is_empty() {
        let mut by: Vec<_> = q.broken_in.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        let list: Vec<String> = by.iter().take(5).map(|(m, n)| format!("{m} {n}")).collect();
        s.push_str(&format!(" (ending in {})", list.join(", ")));
    }
    if run.stats.stacks_lost > 0 {
        s.push_str(&format!(
            "; {} stacks left out (more distinct stacks than the stack map holds)",
            run.stats.stacks_lost
        ));
    }
    if run.stats.dropped > 0 {
        s.push_str(&format!(
            "; {} samples dropped (too many distinct stacks)",
            run.stats.dropped
        ));
    }
    s
}
