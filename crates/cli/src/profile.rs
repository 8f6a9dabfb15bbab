//! `taskdiag profile`: its command line, turned into a [`taskdiag_profile::record`] run, and
//! the output written where asked.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::ValueEnum;
use taskdiag_profile::record::{record, RunOptions, ThreadLabel};
use taskdiag_profile::sampler::Options;
use taskdiag_profile::{scope, ProfileError};

pub(crate) const AFTER_PROFILE: &str = "\
Every thread in scope is counted whatever it is doing. On a CPU it is sampled F times a
second by a perf event per CPU (kernel and user stacks taken in context). Off a CPU the task
iterator finds its state, system call, kernel stack and, on 5.18 and later, its user stack by
a frame-pointer walk, and counts the time it spent off CPU since the last walk (walks come F
times a second, less often where that would cost more than 0.5% of a CPU). Each sample weighs
1/F s, so a thread's samples add up to its wall-clock time, and its state is the root frame
of its stacks: [running], [runnable], [sleeping], [disk], [stopped], [traced], [parked],
[idle]. Kernel threads appear under their names with their kernel stacks. Kernel frames carry
perf's _[k] suffix in folded output.

Pids are those of the profiled pid namespace: the caller's by default (so a shell that
entered a sandbox's pid namespace with nsenter --pid sees the sandbox's pids, even with the
host's /proc), or PID's with --pidns. User frames are symbolized through /proc/PID/map_files
as soon as a stack is first seen, so programs in containers and programs that exit during the
profile resolve; JIT perf maps are read inside the process's root.

User stacks need frame pointers: a stack-quality line on standard error gives the share of
truncated and broken stacks and the binaries where walks broke (most likely built without
-fno-omit-frame-pointer).

FORMATS:
  folded   one line per stack, root;...;leaf COUNT (flamegraph.pl, inferno, speedscope)
  svg      an interactive flame graph (click to zoom, Ctrl-F to search)
  pprof    gzipped profile.proto (go tool pprof, Pyroscope); sample types samples and wall
  table    samples and average active threads by state, system call, wchan and name

PRIVILEGES:
  root, or CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN and CAP_SYS_PTRACE to resolve every
  process's frames through /proc/PID/map_files)

EXIT STATUS:
  0 success, 1 no such process (-p, --pidns), 2 usage error, 3 other failure

EXAMPLES:
  taskdiag profile -a -d 10 -f svg -o all.svg
  taskdiag profile --pidns $(pgrep -o nix-daemon) -d 30 -f folded | flamegraph.pl > sandbox.svg
  taskdiag profile -p 1234 --off-cpu -f table";

#[derive(clap::Args)]
pub(crate) struct ProfileArgs {
    /// Every thread of the caller's pid namespace (the default scope).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Only these processes (comma-separated pids of the profiled namespace).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID[,PID...]",
        value_delimiter = ','
    )]
    pids: Vec<u32>,
    /// Every thread of PID's pid namespace, at any nesting level, shown with its pids.
    #[arg(long, value_name = "PID")]
    pidns: Option<u32>,
    /// Only threads in this cgroup (v2) or below it: a directory under /sys/fs/cgroup or a
    /// path as /proc/PID/cgroup shows it.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// Samples per second per thread.
    #[arg(short = 'F', long = "frequency", value_name = "HZ", default_value_t = 49,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    hz: u64,
    /// How long to sample, in seconds (fractions allowed); until Ctrl-C without it. The
    /// profile covers exactly this window (loading before it and naming stacks after it take
    /// longer on a loaded machine).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    duration: Option<f64>,
    /// Only threads on a CPU (perf_event samples).
    #[arg(long, conflicts_with = "off_cpu")]
    on_cpu: bool,
    /// Only threads off a CPU (task-iterator samples).
    #[arg(long)]
    off_cpu: bool,
    /// Output format.
    #[arg(short = 'f', long, value_enum, default_value_t = ProfileFormat::Folded)]
    format: ProfileFormat,
    /// Write to FILE instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Label threads with their process's pid (name-PID).
    #[arg(long, conflicts_with = "tid")]
    per_pid: bool,
    /// Label threads with their process's and their own pid (name-PID/TID).
    #[arg(long)]
    tid: bool,
    /// No stack-quality line on standard error.
    #[arg(short = 'q', long)]
    quiet: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProfileFormat {
    Folded,
    Svg,
    Pprof,
    Table,
}

/// Whether a profile error is the caller's mistake naming a process (exit status 1).
pub(crate) fn no_such_process(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<ProfileError>(),
            Some(ProfileError::NoSuchProcess(_))
        )
    })
}

pub(crate) fn profile(a: ProfileArgs) -> anyhow::Result<std::process::ExitCode> {
    let _ = a.all; // the default scope, named for perf's users
    let mut sc = match a.pidns {
        Some(p) => scope::pidns_of(p)?,
        None => scope::caller()?,
    };
    if !a.pids.is_empty() {
        if a.pidns.is_none() {
            scope::check_pids(&a.pids)?;
        }
        sc.tgids = a.pids.clone();
    }
    if let Some(c) = &a.cgroup {
        sc.cgroup_id = Some(scope::cgroup_id(c)?);
    }
    let duration = match a.duration {
        Some(d) if !(d > 0.0 && d.is_finite()) => {
            return Err(crate::UsageError(format!("bad duration {d}: seconds above 0")).into())
        }
        Some(d) => Some(Duration::from_secs_f64(d)),
        None => None,
    };
    let opts = RunOptions {
        sampler: Options {
            hz: a.hz,
            on_cpu: !a.off_cpu,
            off_cpu: !a.on_cpu,
            scope: sc,
            max_keys: 1 << 17,
            max_stacks: 1 << 15,
        },
        duration,
        label: if a.tid {
            ThreadLabel::Thread
        } else if a.per_pid {
            ThreadLabel::Process
        } else {
            ThreadLabel::Name
        },
    };
    let stop = taskdiag_profile::stop_on_signals();
    let run = record(&opts, stop)?;
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}", p.display()))?,
        )),
        None => Box::new(io::BufWriter::new(io::stdout().lock())),
    };
    let p = &run.profile;
    match a.format {
        ProfileFormat::Folded => taskdiag_profile::text::write_folded(p, &mut out)?,
        ProfileFormat::Table => taskdiag_profile::text::write_table(p, &mut out)?,
        ProfileFormat::Svg => taskdiag_profile::svg::write_svg(p, "taskdiag profile", &mut out)?,
        ProfileFormat::Pprof => taskdiag_profile::pprof::write_pprof(p, &mut out)?,
    }
    out.flush()?;
    if !a.quiet {
        eprintln!("taskdiag profile: {}", taskdiag_profile::summary(&run));
    }
    Ok(std::process::ExitCode::SUCCESS)
}
