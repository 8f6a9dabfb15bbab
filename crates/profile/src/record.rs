//! A whole profile: the sampling loop, then the counts turned into named stacks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use taskdiag_proto::prof::{ProfState, PROF_F_KTHREAD};
use taskdiag_proto::ProfKey;

use crate::error::ProfileError;
use crate::model::{Frame, FrameKind, Profile, Stack, StateKey};
use crate::sampler::{Options, RawStack, Sampler, Stats};
use crate::symbolize::{ProcIdent, Quality, Resolved, SchedText, Symbols};

/// The share of a CPU the off-CPU walks may take: on a host with many threads they come less
/// often than the rate (each walk counts the time since the last one, so nothing is lost but
/// the detail of what a thread that ran in between did off CPU). Half of the 1% the whole
/// profiler may take at 1,000 threads: the kernel's iterator alone costs ~0.7 us a task here,
/// 3.5% of a CPU to walk 1,000 threads 49 times a second.
pub const WALK_SHARE: f64 = 0.005;

/// How often the sampling loop looks at its stop flag (Ctrl-C), and the symbolizing thread at
/// the end of sampling, when nothing else wakes them.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// How threads are labelled under their state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadLabel {
    /// By name only: threads of the same name are merged.
    #[default]
    Name,
    /// `name-PID` (the process's id in the profiled namespace).
    Process,
    /// `name-PID/TID`.
    Thread,
}

/// A profile to take.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// What to sample.
    pub sampler: Options,
    /// How long; `None` runs until `stop` is set.
    pub duration: Option<Duration>,
    /// How threads are labelled.
    pub label: ThreadLabel,
}

/// What a run produced.
#[derive(Debug)]
pub struct Run {
    /// The named stacks and the state table.
    pub profile: Profile,
    /// The stack-quality counts.
    pub quality: Quality,
    /// The programs' counters.
    pub stats: Stats,
    /// Walks of the tasks (off-CPU samples).
    pub walks: u64,
    /// Whether off-CPU samples carry user stacks on this kernel.
    pub user_stacks_off_cpu: bool,
}

/// Takes a profile: samples until the duration has passed or `stop` is set, then resolves and
/// names every stack.
pub fn record(opts: &RunOptions, stop: &AtomicBool) -> Result<Run, ProfileError> {
    let mut sampler = Sampler::start(&opts.sampler)?;
    let period = Duration::from_nanos(1_000_000_000 / opts.sampler.hz.max(1));
    // New user stacks are read and symbolized on another thread, woken by the kernel when
    // there are some (and draining at most every `drain_gap`), so that reading a binary's symbols never
    // delays a walk, and the sampling thread wakes only for its walks. A wake-up is the main
    // cost of a loop that has little to do: ~60 us on a virtual machine, where two threads
    // waking every period were half of the profiler's time at 1,000 threads.
    let source = sampler.fresh_reader()?;
    // While new stacks keep coming, drains are this far apart: ~10 wake-ups a second (each
    // ~100 us with its stacks here), and a process's first stacks named within 0.1 s.
    let drain_gap = (period * 2).max(Duration::from_millis(100));
    let sampled = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&sampled);
    let worker = std::thread::Builder::new()
        .name("symbolize".into())
        .spawn(move || -> Result<Resolved, ProfileError> {
            let reader = source.reader()?;
            let mut symbols = Symbols::new();
            loop {
                // The flag first: what was announced before it was set is read below.
                let last = done.load(Ordering::Acquire);
                let batch = reader.take();
                let drained = !batch.is_empty();
                for (f, stack) in batch {
                    let ident = ProcIdent {
                        start: f.proc_start,
                        exec: f.exec_id,
                    };
                    symbols.add_user(f.id, f.proc_tgid, Some(ident), &stack);
                }
                if last {
                    return Ok(symbols.into_resolved());
                }
                if drained {
                    // More may come (a CPU-bound loop without frame pointers gives a new stack
                    // at nearly every sample): the next drain a little later, without a
                    // wake-up of the kernel's in between.
                    std::thread::sleep(drain_gap);
                    continue;
                }
                // Nothing new: woken by the next stack (or to look at the flag).
                reader.wait(STOP_CHECK);
            }
        })
        .map_err(ProfileError::Iter)?;
    let start = Instant::now();
    sampler.begin(opts.duration);
    let end = opts.duration.map(|d| start + d);
    let mut next_walk = start;
    let mut walks = 0;
    loop {
        let now = Instant::now();
        if opts.sampler.off_cpu && now >= next_walk {
            let cpu = thread_cpu_time();
            sampler.walk()?;
            walks += 1;
            // Walks at the rate, unless that would cost more than WALK_SHARE of a CPU: each
            // thread's time off CPU is counted whatever the time between two walks. Its cost
            // is the CPU time it took (the wall time of a walk preempted on a busy machine
            // spaced the walks seconds apart).
            let took = thread_cpu_time().saturating_sub(cpu);
            // The first walk meets every thread for the first time (unwinds them all, fills
            // the maps): the walks after it are paced by their own cost.
            next_walk = if walks == 1 {
                now + period
            } else {
                now + period.max(took.mul_f64(1.0 / WALK_SHARE - 1.0))
            };
        }
        if stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
        let now = Instant::now();
        let mut until = now + STOP_CHECK;
        if opts.sampler.off_cpu {
            until = until.min(next_walk);
        }
        if let Some(e) = end {
            until = until.min(e);
        }
        if until > now {
            std::thread::sleep(until - now);
        }
    }
    // On-CPU samples end here (the symbolizing left to do would be sampled into the profile,
    // seconds of it in an emulated guest), and a last walk counts every thread's time off CPU
    // up to the end.
    sampler.stop();
    // Up to the end asked for (-d), or to now (Ctrl-C): not to whenever this thread got here
    // (seconds late on a loaded machine), nor to whenever the last walk runs.
    sampler.end(opts.duration);
    if opts.sampler.off_cpu {
        sampler.walk()?;
        walks += 1;
    }
    sampled.store(true, Ordering::Release);
    let duration = sampler.window();
    let mut symbols = Symbols::from_resolved(worker.join().map_err(|_| {
        ProfileError::Iter(std::io::Error::other("the symbolizing thread panicked"))
    })??);
    let counts = sampler.counts();
    let stats = sampler.stats();
    // A user stack the ring buffer had no room for is named now, if its process lives.
    for (key, _) in &counts {
        if key.ustack != 0 && symbols.user(key.ustack).is_none() {
            if let Some(stack) = sampler.stack(key.ustack) {
                symbols.add_user(key.ustack, key.proc_tgid, None, &stack);
            }
        }
    }
    let kstacks: HashMap<u64, RawStack> = counts
        .iter()
        .map(|(k, _)| k.kstack)
        .filter(|&id| id != 0)
        .collect::<HashSet<u64>>()
        .into_iter()
        .filter_map(|id| Some((id, sampler.stack(id)?)))
        .collect();
    symbols.add_kernel(kstacks.values());
    let sched = SchedText::read();
    let profile = build(&counts, &kstacks, &symbols, &sched, opts, duration);
    Ok(Run {
        profile,
        quality: symbols.quality.clone(),
        stats,
        walks,
        user_stacks_off_cpu: sampler.user_stacks_off_cpu,
    })
}

/// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a timespec into `ts`, which is valid for it.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A thread's name as a frame shows it: control characters as `?` (as ps shows them).
fn comm_of(key: &ProfKey) -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&key.comm_lo.to_ne_bytes());
    b[8..].copy_from_slice(&key.comm_hi.to_ne_bytes());
    let end = b.iter().position(|&c| c == 0).unwrap_or(16);
    String::from_utf8_lossy(&b[..end])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn state_name(key: &ProfKey) -> &'static str {
    ProfState::from_u32(key.state).map_or("unknown", ProfState::name)
}

/// The system call's name for the table, `-` for none.
fn syscall_name(nr: i32) -> String {
    if nr < 0 {
        return "-".into();
    }
    taskdiag_procfs::syscalls::name(i64::from(nr)).map_or_else(|| nr.to_string(), str::to_owned)
}

/// Turns the counts into named stacks and the state table.
fn build(
    counts: &[(ProfKey, u64)],
    kstacks: &HashMap<u64, RawStack>,
    symbols: &Symbols,
    sched: &SchedText,
    opts: &RunOptions,
    duration: Duration,
) -> Profile {
    let mut stacks: BTreeMap<Vec<Frame>, u64> = BTreeMap::new();
    let mut states: BTreeMap<StateKey, u64> = BTreeMap::new();
    let mut kframes_of: HashMap<u64, Vec<Frame>> = HashMap::new();
    for (key, n) in counts {
        let comm = comm_of(key);
        let state = state_name(key);
        let kernel = key.kstack != 0 && kstacks.contains_key(&key.kstack);
        let kframes = if kernel {
            kframes_of
                .entry(key.kstack)
                .or_insert_with(|| symbols.kernel(&kstacks[&key.kstack]))
                .as_slice()
        } else {
            &[]
        };
        let thread = match opts.label {
            ThreadLabel::Name => comm.clone(),
            ThreadLabel::Process => format!("{comm}-{}", key.tgid),
            ThreadLabel::Thread => format!("{comm}-{}/{}", key.tgid, key.pid),
        };
        let mut frames = vec![
            Frame {
                kind: FrameKind::State,
                name: format!("[{state}]"),
                module: None,
            },
            Frame {
                kind: FrameKind::Thread,
                name: thread,
                module: None,
            },
        ];
        if key.ustack != 0 {
            match symbols.user(key.ustack) {
                Some(user) => frames.extend(user.iter().rev().cloned()),
                None => frames.push(Frame {
                    kind: FrameKind::User,
                    name: "[unresolved]".into(),
                    module: None,
                }),
            }
        } else if key.flags & PROF_F_KTHREAD == 0 && !kernel {
            frames.push(Frame {
                kind: FrameKind::User,
                name: "[no stack]".into(),
                module: None,
            });
        }
        frames.extend(kframes.iter().rev().cloned());
        *stacks.entry(frames).or_default() += n;
        // get_wchan() is for blocked tasks only: none for a running or runnable one.
        let blocked =
            key.state != ProfState::Running as u32 && key.state != ProfState::Runnable as u32;
        let wchan = if !blocked || !kernel {
            "-".to_owned()
        } else {
            sched.wchan(&kstacks[&key.kstack], kframes)
        };
        let sk = StateKey {
            state: state.to_owned(),
            syscall: syscall_name(key.syscall),
            wchan,
            comm,
        };
        *states.entry(sk).or_default() += n;
    }
    Profile {
        stacks: stacks
            .into_iter()
            .map(|(frames, count)| Stack { frames, count })
            .collect(),
        states: states.into_iter().collect(),
        hz: opts.sampler.hz,
        duration_ns: duration.as_nanos() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::Scope;

    fn key(pid: u32, comm: &[u8], state: ProfState, kstack: u64, flags: u32) -> ProfKey {
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm);
        ProfKey {
            pid,
            tgid: 7,
            proc_pid: pid + 100,
            proc_tgid: 107,
            state: state as u32,
            syscall: if state == ProfState::Running { -1 } else { 0 },
            flags,
            kstack,
            comm_lo: u64::from_ne_bytes(c[..8].try_into().expect("8 bytes")),
            comm_hi: u64::from_ne_bytes(c[8..].try_into().expect("8 bytes")),
            ..Default::default()
        }
    }

    fn opts(label: ThreadLabel) -> RunOptions {
        RunOptions {
            sampler: Options {
                hz: 10,
                on_cpu: true,
                off_cpu: true,
                scope: Scope::default(),
                max_keys: 16,
                max_stacks: 16,
            },
            duration: None,
            label,
        }
    }

    #[test]
    fn counts_become_stacks_rooted_in_state_and_thread_with_a_state_table() {
        let counts = vec![
            (key(8, b"a\nb", ProfState::Sleeping, 5, 0), 30),
            (
                key(9, b"kworker/0:1", ProfState::Idle, 5, PROF_F_KTHREAD),
                10,
            ),
            (key(8, b"a\nb", ProfState::Running, 0, 0), 4),
        ];
        let kstacks = HashMap::from([(
            5,
            RawStack {
                ips: vec![0x1000, 0x2000],
                flags: 0,
            },
        )]);
        let symbols = Symbols::new();
        // Frame 0 (0x1000) is in the scheduler's text, so wchan is frame 1's name.
        let sched = SchedText::from_ranges(vec![(0x0fff, 0x1001)]);
        let p = build(
            &counts,
            &kstacks,
            &symbols,
            &sched,
            &opts(ThreadLabel::Thread),
            Duration::from_secs(2),
        );
        assert_eq!(p.hz, 10);
        assert_eq!(p.duration_ns, 2_000_000_000);
        let names = |s: &Stack| s.frames.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        let sleeping = p
            .stacks
            .iter()
            .find(|s| s.count == 30)
            .expect("the sleeper");
        // Kernel frames outermost first (unresolved ones by their address).
        assert_eq!(
            names(sleeping),
            ["[sleeping]", "a?b-7/8", "0x2000", "0x1000"]
        );
        let kthread = p
            .stacks
            .iter()
            .find(|s| s.count == 10)
            .expect("the kernel thread");
        assert_eq!(
            names(kthread),
            ["[idle]", "kworker/0:1-7/9", "0x2000", "0x1000"]
        );
        // Neither stack: a user thread says so.
        let running = p.stacks.iter().find(|s| s.count == 4).expect("the runner");
        assert_eq!(names(running), ["[running]", "a?b-7/8", "[no stack]"]);
        let row = |state: &str| {
            p.states
                .iter()
                .find(|(k, _)| k.state == state)
                .expect(state)
        };
        assert_eq!(row("sleeping").0.wchan, "0x2000");
        assert_eq!(row("sleeping").0.syscall, "read");
        assert_eq!(row("sleeping").1, 30);
        assert_eq!(row("running").0.wchan, "-");
        assert_eq!(row("running").0.syscall, "-");
    }

    #[test]
    fn threads_are_merged_by_name_unless_pids_are_asked_for() {
        let counts = vec![
            (key(8, b"w", ProfState::Sleeping, 0, 0), 3),
            (key(9, b"w", ProfState::Sleeping, 0, 0), 4),
        ];
        let (symbols, sched) = (Symbols::new(), SchedText::default());
        let p = build(
            &counts,
            &HashMap::new(),
            &symbols,
            &sched,
            &opts(ThreadLabel::Name),
            Duration::ZERO,
        );
        assert_eq!(p.stacks.len(), 1);
        assert_eq!(p.stacks[0].count, 7);
        let p = build(
            &counts,
            &HashMap::new(),
            &symbols,
            &sched,
            &opts(ThreadLabel::Process),
            Duration::ZERO,
        );
        assert_eq!(p.stacks.len(), 1);
        assert_eq!(p.stacks[0].frames[1].name, "w-7");
        let p = build(
            &counts,
            &HashMap::new(),
            &symbols,
            &sched,
            &opts(ThreadLabel::Thread),
            Duration::ZERO,
        );
        assert_eq!(p.stacks.len(), 2);
    }
}
