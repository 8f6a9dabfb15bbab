//! The `taskdiag` command: dump task information through the best backend (BPF, taskdiagd or
//! /proc), print a process's memory maps, decode raw streams, and run the procps/psmisc-
//! compatible tools (`taskdiag ps`, `pstree`, `pgrep`, `pkill`, `pidwait`, `pidof`, `top`; also
//! as `ps` etc. when invoked through a symlink of that name), and serve Prometheus metrics
//! (`taskdiag exporter`, `taskdiag_exporter`; also as `taskdiag-exporter`).
//!
//! This binary parses arguments, builds a request, hands it to `taskdiag::Dumper` and renders
//! the stream ([`render`], [`maps`]); the tools live in `taskdiag_tools`. Choosing and running
//! a backend is the `taskdiag` library's; the binary reads no /proc file and loads no BPF
//! program itself.
//!
//! Exit status: 0 success; 1 no such process (ONE/THREAD/CHILDREN); 2 usage error;
//! 3 any other failure (a backend that cannot be used, an I/O error).

mod generate;
mod maps;
mod profile;
mod render;

use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use taskdiag::{BackendId, BackendKind, Dumper, Error, Group, Request, Strategy};
use taskdiag_proto::msg::{Message, Messages, StreamReader};
use taskdiag_proto::task::StreamDecoder;

/// Fast, binary, batched access to process information (the task_diag interface on stock kernels).
///
/// A request names a set of tasks and attribute groups; the answer streams one compact record
/// per task, from BPF task iterators (root, or CAP_BPF and CAP_PERFMON), from taskdiagd (any
/// user, who sees what their own /proc shows) or from /proc, whichever answers fastest (`dump
/// --backend`). The procps and psmisc tools are subcommands that take those tools' options and
/// print their output. Invoked as ps, pstree, pgrep, pkill, pidwait, pidof or top (through a
/// link of that name, as the Debian package has in /usr/lib/taskdiag/bin), the binary is that
/// tool; invoked as taskdiag-exporter, it is `taskdiag exporter`.
#[derive(Parser)]
#[command(name = "taskdiag", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Dump attribute groups of a set of tasks.
    ///
    /// Without a selection, every process is dumped (one record per thread group, in increasing
    /// pid order). Ids are those of the caller's pid namespace. BASE is always included.
    #[command(after_help = AFTER_DUMP)]
    Dump(DumpArgs),
    /// Read a raw stream (from `dump --format raw`) and print it as text or JSON.
    Decode(DecodeArgs),
    /// Print a process's memory mappings (as /proc/PID/maps; -x like pmap -x).
    Maps(maps::MapsArgs),
    /// Report a snapshot of the current processes (procps ps options; `ps --help`).
    #[command(disable_help_flag = true)]
    Ps(ToolArgs),
    /// Display a tree of processes (psmisc pstree options; `pstree --help`).
    #[command(disable_help_flag = true)]
    Pstree(ToolArgs),
    /// Look up processes by name and other attributes (procps pgrep options).
    #[command(disable_help_flag = true)]
    Pgrep(ToolArgs),
    /// Signal processes by name and other attributes (procps pkill options).
    #[command(disable_help_flag = true)]
    Pkill(ToolArgs),
    /// Wait for processes chosen by name and other attributes to exit (procps pidwait).
    #[command(disable_help_flag = true)]
    Pidwait(ToolArgs),
    /// Find the process ids of running programs (procps pidof options).
    #[command(disable_help_flag = true)]
    Pidof(ToolArgs),
    /// Display tasks and what they cost, refreshed (procps top options; `top --help`).
    #[command(disable_help_flag = true)]
    Top(ToolArgs),
    /// Sample what every thread is doing, on and off CPU, as one wall-clock flame graph.
    #[command(after_help = profile::AFTER_PROFILE)]
    Profile(profile::ProfileArgs),
    /// Serve process-exporter-compatible Prometheus metrics (`exporter --help`).
    #[command(disable_help_flag = true)]
    Exporter(ToolArgs),
    /// Write the man pages or shell completions (for packaging; scripts/deb).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
}

/// Arguments of a procps/psmisc-compatible tool, passed through untouched: each tool parses
/// its own syntax (ps mixes UNIX, BSD and GNU options, which no generic parser accepts).
#[derive(clap::Args)]
struct ToolArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<std::ffi::OsString>,
}

/// Runs a tool and turns its status into an exit code.
/// The arguments after `taskdiag TOOL`, exactly as given (the tool is the first argument:
/// `taskdiag` has no options of its own before a subcommand).
fn tool_args() -> Vec<std::ffi::OsString> {
    std::env::args_os().skip(2).collect()
}

fn run_tool(main: fn(&[std::ffi::OsString]) -> i32, args: &[std::ffi::OsString]) -> ExitCode {
    ExitCode::from(main(args).clamp(0, 255) as u8)
}

/// When installed as `ps`, `pstree`, `pgrep`, `pkill`, `pidwait`, `pidof` or `top` (a symlink
/// to this binary), behaves as that tool.
fn multi_call() -> Option<ExitCode> {
    let argv0 = std::env::args_os().next()?;
    let name = std::path::Path::new(&argv0)
        .file_name()?
        .to_str()?
        .to_string();
    let rest: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let main: fn(&[std::ffi::OsString]) -> i32 = match name.as_str() {
        "ps" => taskdiag_tools::ps::ps_main,
        "pstree" => taskdiag_tools::pstree::pstree_main,
        "pgrep" => taskdiag_tools::pgrep::pgrep_main,
        "pkill" => taskdiag_tools::pgrep::pkill_main,
        "pidwait" => taskdiag_tools::pgrep::pidwait_main,
        "pidof" => taskdiag_tools::pidof::pidof_main,
        "top" => taskdiag_tools::top::top_main,
        "taskdiag-exporter" => taskdiag_exporter::main,
        _ => return None,
    };
    Some(run_tool(main, &rest))
}

const AFTER_DUMP: &str = "\
GROUPS:
  base     pid, tgid, ppid, tracer pid, sid, pgid, tty, state, flags, name, start time
  cred     real/effective/saved/fs uid and gid, supplementary groups, capability sets
  stat     faults, CPU times (nanoseconds, at clock-tick resolution), threads, context
           switches, priority, nice, policy, last CPU
  statm    memory use in bytes: size, peak, rss anon/file/shmem, swap, text, lib, data,
           stack, locked, pinned, page tables (absent for tasks without an address space)
  cmdline  argv bytes exactly as /proc/PID/cmdline returns them
  signal   signal masks as /proc/PID/status shows them: pending (thread), pending (shared),
           blocked, ignored, caught
  ns       namespaces, each as the inode readlink /proc/PID/ns/NAME shows (pid,
           pid_for_children, mnt, net, ipc, uts, user, cgroup, time, time_for_children;
           left out where the link does not exist; all withheld, with hidden true, where
           readlink is refused), and the task's ids in each nested pid namespace, ours
           first, as status NSpid, NStgid, NSpgid, NSsid
  files    open descriptors as /proc/PID/fd lists them (withheld, with fds_hidden true,
           where it cannot be listed) and the 16 resource limits of /proc/PID/limits, soft
           and hard
  cgroup   the cgroup v2 id (0 for a removed cgroup, or where /proc is read and no cgroup2
           mount shows it) and every line of /proc/PID/cgroup, as this reader's cgroup
           namespace shows it
  io       I/O counters as /proc/PID/io: rchar, wchar, syscr, syscw, read_bytes,
           write_bytes, cancelled_write_bytes (refused, like that file, where the task may
           not be ptrace-read)
  paths    exe, cwd and root as readlink /proc/PID/{exe,cwd,root} returns them (with
           \" (deleted)\" where gone); where a link does not resolve, <name>_error says why
  environ  the environment, bytes as /proc/PID/environ returns them (refused like that file)
  sched    oom_score, oom_score_adj, loginuid, sessionid, autogroup and its nice, wchan,
           syscall (absent, with syscall_hidden true, where /proc/PID/syscall is refused) and
           status's Cpus_allowed_list and Mems_allowed_list
  security seccomp mode and filters, no_new_privs (status lines) and the security module's
           label as /proc/PID/attr/current returns it (label_error says why there is none)
  delay    time on a CPU and waiting for one, and timeslices (/proc/PID/schedstat), block I/O
           delay ticks (stat field 42); and the delay-accounting totals and counts (block I/O,
           swap-in, reclaim, thrashing, compaction, write-protect copies, IRQs) where
           accounted: from BPF, or as root from the taskstats interface (counters says which)
  vma      memory mappings: start, end, permissions, flags, offset, device, inode, name as
           /proc/PID/maps prints it (for threads: on the thread-group leader only)
  vma_stat vma plus each mapping's smaps counters (Rss, Pss, ..., costs what smaps costs)
  kstack   the kernel stack as /proc/PID/stack shows it, a frame a line (symbol+off/size,
           innermost first; none for a task running on another CPU); root only, like that
           file (CAP_SYS_ADMIN)
  wchan    the wait channel alone, as /proc/PID/wchan (sched's wchan, without the cost of
           the rest of sched)
  all      every group above except vma, vma_stat, kstack and wchan (in sched)

BACKENDS:
  auto     the fastest way to the same answer: BPF programs an earlier process loaded and
           pinned, else the daemon when its socket answers, else procfs on a host of fewer
           than 2,000 tasks (loading the programs costs more than it saves), else BPF
           loaded now and pinned for the next process (root, or CAP_BPF+CAP_PERFMON), else
           procfs; a request the daemon is busy for or does not answer in time is answered
           from procfs (-s says which backend answered and why)
  bpf      eBPF task iterators
  daemon   taskdiagd (see taskdiagd --help): BPF speed for unprivileged users, showing
           exactly what their /proc would show them
  procfs   /proc, read with the fewest system calls possible

ENVIRONMENT:
  TASKDIAG_SOCKET   taskdiagd's socket when --socket is not given (default
                    /run/taskdiag.sock)
  TASKDIAG_TIMEOUT  seconds a client waits for taskdiagd at each step: connecting, sending
                    the request, each read of the answer (default 5; 0: without limit).
                    Past it the error names the socket and what did not answer; auto reads
                    /proc instead if nothing of the answer came yet
  TASKDIAG_MM_TIMEOUT_MS
                    milliseconds a read of another process's memory (cmdline, environ,
                    maps, smaps) is waited for (default 250; a tenth while one given up on
                    still sleeps): past it the process's lock is taken to be held by
                    something stuck (a hung FUSE or NFS file), and the group is answered as
                    an error, `[comm]` in ps, as procps does for a command line it cannot read

EXIT STATUS:
  0 success, 1 no such process, 2 usage error, 3 other failure (with --backend daemon: taskdiagd
  not running, busy (EBUSY: every worker it may use is answering others; auto reads /proc
  then), or not answering within TASKDIAG_TIMEOUT)

EXAMPLES:
  taskdiag dump --groups base,cred
  taskdiag dump --pid $$ --groups all --format json
  taskdiag dump --all-threads --format raw > tasks.bin && taskdiag decode tasks.bin";

#[derive(clap::Args)]
struct DumpArgs {
    /// Every process (the default).
    #[arg(long, group = "sel")]
    all: bool,
    /// Every thread of every process.
    #[arg(long, group = "sel")]
    all_threads: bool,
    /// One task, by process or thread id.
    #[arg(long, value_name = "PID", group = "sel")]
    pid: Option<u32>,
    /// Every thread of the process containing PID.
    #[arg(long, value_name = "PID", group = "sel")]
    threads_of: Option<u32>,
    /// The child processes of PID.
    #[arg(long, value_name = "PID", group = "sel")]
    children_of: Option<u32>,
    /// Comma-separated groups: base, cred, stat, statm, cmdline, signal, ns, files, cgroup,
    /// io, paths, environ, sched, security, delay, vma,
    /// vma_stat, kstack, wchan, all (see GROUPS below).
    #[arg(long, short = 'g', value_name = "LIST", default_value = "base")]
    groups: String,
    /// Which backend answers.
    #[arg(
        long,
        short = 'b',
        default_value_t = BackendKind::Auto,
        value_parser = backend_parser(),
    )]
    backend: BackendKind,
    /// taskdiagd's socket, for the daemon backend [default: $TASKDIAG_SOCKET, else
    /// /run/taskdiag.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// Output format: text, json (JSON Lines, one object per task; docs/JSON.md) or raw (the
    /// binary stream).
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Print the backend, task count and time taken to standard error.
    #[arg(long, short = 's')]
    summary: bool,
    /// Benchmarking aid: answer the request N times with the same loaded backend.
    #[arg(long, value_name = "N", default_value_t = 1, hide = true)]
    repeat: u32,
}

#[derive(clap::Args)]
struct DecodeArgs {
    /// The raw stream; standard input when absent or "-".
    file: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = TextFormat::Text)]
    format: TextFormat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    Raw,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TextFormat {
    Text,
    Json,
}

fn parse_groups(list: &str) -> anyhow::Result<u64> {
    let mut flags = Group::Base.flag();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if name.eq_ignore_ascii_case("all") {
            // Memory maps are many records per task and VMA_STAT costs a page-table walk per
            // mapping; KSTACK an unwind per task, for root only: asked for by name only.
            // WCHAN is SCHED's wchan alone.
            flags |= taskdiag_proto::SHOW_SUPPORTED
                & !taskdiag_proto::SHOW_MAPS
                & !Group::Kstack.flag()
                & !Group::Wchan.flag();
            continue;
        }
        match Group::from_name(name) {
            Some(g) if taskdiag_proto::SHOW_SUPPORTED & g.flag() != 0 => flags |= g.flag(),
            Some(_) => bail!("group '{name}' is not implemented yet"),
            None => {
                let known: Vec<&str> = Group::SUPPORTED.iter().map(|g| g.name()).collect();
                bail!("unknown group '{name}' (known: {}, all)", known.join(", "))
            }
        }
    }
    Ok(flags)
}

/// The values of a `--backend` option: [`BackendKind`]'s names, listed in help and errors.
fn backend_parser() -> impl TypedValueParser<Value = BackendKind> {
    PossibleValuesParser::new(BackendKind::names()).try_map(|s| s.parse::<BackendKind>())
}

/// Exit status for "no such process".
const EXIT_NO_TASK: u8 = 1;
/// Exit status for usage errors (also clap's).
const EXIT_USAGE: u8 = 2;
/// Exit status for other failures.
const EXIT_FAILURE: u8 = 3;

fn main() -> ExitCode {
    if let Some(code) = multi_call() {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let r = match cli.cmd {
        Cmd::Dump(a) => dump(a),
        Cmd::Decode(a) => decode(a),
        Cmd::Maps(a) => maps::maps(a),
        Cmd::Profile(a) => profile::profile(a),
        Cmd::Generate(a) => generate::generate(a, Cli::command()),
        // The tools get their arguments as given (what follows the tool's name): clap would
        // take a first `--` for itself (`taskdiag pgrep -- -name`).
        Cmd::Ps(_) => return run_tool(taskdiag_tools::ps::ps_main, &tool_args()),
        Cmd::Pstree(_) => return run_tool(taskdiag_tools::pstree::pstree_main, &tool_args()),
        Cmd::Pgrep(_) => return run_tool(taskdiag_tools::pgrep::pgrep_main, &tool_args()),
        Cmd::Pkill(_) => return run_tool(taskdiag_tools::pgrep::pkill_main, &tool_args()),
        Cmd::Pidwait(_) => return run_tool(taskdiag_tools::pgrep::pidwait_main, &tool_args()),
        Cmd::Pidof(_) => return run_tool(taskdiag_tools::pidof::pidof_main, &tool_args()),
        Cmd::Top(_) => return run_tool(taskdiag_tools::top::top_main, &tool_args()),
        // process-exporter's flags are Go's (`-config.path x`), which clap does not parse.
        Cmd::Exporter(_) => return run_tool(taskdiag_exporter::main, &tool_args()),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("taskdiag: {}", error_chain(&e));
            ExitCode::from(if e.downcast_ref::<UsageError>().is_some() {
                EXIT_USAGE
            } else if profile::no_such_process(&e) {
                EXIT_NO_TASK
            } else {
                EXIT_FAILURE
            })
        }
    }
}

/// A bad command line, reported with exit status 2.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn dump(a: DumpArgs) -> anyhow::Result<ExitCode> {
    let show = parse_groups(&a.groups).map_err(|e| UsageError(e.to_string()))?;
    let (strategy, pid) = match (a.all_threads, a.pid, a.threads_of, a.children_of) {
        (true, ..) => (Strategy::AllThread, 0),
        (_, Some(p), ..) => (Strategy::One, p),
        (_, _, Some(p), _) => (Strategy::Thread, p),
        (_, _, _, Some(p)) => (Strategy::Children, p),
        _ => (Strategy::All, 0),
    };
    let t0 = Instant::now();
    let mut dumper =
        Dumper::open_with(a.backend, show, a.socket.as_deref()).context("opening the backend")?;
    let t_open = t0.elapsed();
    let stdout = io::stdout();
    let mut w = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let req = Request::new(strategy, pid, show);
    let t1 = Instant::now();
    let mut res = Ok(0);
    for _ in 0..a.repeat.max(1) {
        res = if a.format == Format::Raw {
            dumper.dump(&req, &mut |b| w.write_all(b))
        } else {
            let mut r = render::Renderer::new(a.format == Format::Json);
            let mut dec = StreamDecoder::new();
            dumper.dump(&req, &mut |b| feed(&mut dec, &mut r, &mut w, b))
        };
        if res.is_err() {
            break;
        }
    }
    let took = t1.elapsed() / a.repeat.max(1);
    w.flush().context("writing standard output")?;
    if a.summary {
        let n = res.as_ref().copied().unwrap_or(0);
        let from_proc: Vec<_> = Group::SUPPORTED
            .into_iter()
            .filter(|g| dumper.completed_from_procfs(show) & g.flag() != 0)
            .map(Group::name)
            .collect();
        // Under auto, a request the daemon declined, or was too busy for, or did not answer
        // in time, was answered from /proc; so is every request when it could not be reached.
        let (via, mut declined) = match dumper.daemon_declined() {
            Some(why) => (BackendId::Procfs, format!("; taskdiagd declined: {why}")),
            None => (dumper.backend(), String::new()),
        };
        let via = match dumper.daemon_unavailable() {
            Some(why) => {
                declined = format!("; taskdiagd not used: {why}");
                BackendId::Procfs
            }
            None => via,
        };
        let pinned = dumper
            .pinned_at()
            .map(|p| format!("; programs shared, pinned at {}", p.display()))
            .unwrap_or_default();
        // A program this kernel refuses: which, and the verifier's own words.
        let refused = dumper
            .bpf_refused()
            .iter()
            .map(|r| format!("; refused by this kernel: {r}"))
            .collect::<String>()
            + if dumper.maps_by_probe_reads() && show & taskdiag::proto::SHOW_MAPS != 0 {
                "; map files named by probe reads (dump_vma_walk)"
            } else {
                ""
            };
        eprintln!(
            "taskdiag: {n} tasks via {} in {:.3} ms (backend setup {:.3} ms){}{}{declined}{refused}{pinned}",
            via.name(),
            took.as_secs_f64() * 1e3,
            t_open.as_secs_f64() * 1e3,
            if from_proc.is_empty() {
                String::new()
            } else {
                format!("; from /proc: {}", from_proc.join(","))
            },
            dumper
                .bpf_unavailable()
                .map(|w| format!("; bpf not used: {w}"))
                .unwrap_or_default(),
        );
    }
    match res {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(Error::NoSuchTask { pid }) => {
            eprintln!("taskdiag: no such process: {pid}");
            Ok(ExitCode::from(EXIT_NO_TASK))
        }
        Err(e) => Err(e).context("dump failed"),
    }
}

/// An error and its causes, "outer: inner: ...", leaving out a cause whose text the message
/// already ends with (library errors often show their source in their own text).
fn error_chain(e: &anyhow::Error) -> String {
    let mut s = String::new();
    for c in e.chain() {
        let t = c.to_string();
        if !s.ends_with(&t) {
            if !s.is_empty() {
                s.push_str(": ");
            }
            s.push_str(&t);
        }
    }
    s
}

/// Decodes whole messages and renders the events.
fn feed(
    dec: &mut StreamDecoder,
    r: &mut render::Renderer,
    w: &mut dyn Write,
    chunk: &[u8],
) -> io::Result<()> {
    for m in Messages::new(chunk) {
        render_message(dec, r, w, &m.map_err(io::Error::other)?)?;
    }
    Ok(())
}

/// Decodes one message and renders the event it completes, if any.
fn render_message(
    dec: &mut StreamDecoder,
    r: &mut render::Renderer,
    w: &mut dyn Write,
    m: &Message<'_>,
) -> io::Result<()> {
    if let Some(ev) = dec.push(m).map_err(io::Error::other)? {
        r.event(w, &ev)?;
    }
    Ok(())
}

fn decode(a: DecodeArgs) -> anyhow::Result<ExitCode> {
    let (mut input, name): (Box<dyn Read>, String) = match &a.file {
        Some(p) if p.as_os_str() != "-" => (
            Box::new(std::fs::File::open(p).with_context(|| format!("{}", p.display()))?),
            p.display().to_string(),
        ),
        _ => (Box::new(io::stdin().lock()), "standard input".into()),
    };
    let stdout = io::stdout();
    let mut w = io::BufWriter::new(stdout.lock());
    let mut r = render::Renderer::new(a.format == TextFormat::Json);
    let mut dec = StreamDecoder::new();
    let mut stream = StreamReader::new();
    loop {
        let n = stream
            .fill(&mut input)
            .with_context(|| format!("reading {name}"))?;
        let mut whole = stream.messages();
        for m in whole.by_ref() {
            let m = m.with_context(|| name.clone())?;
            render_message(&mut dec, &mut r, &mut w, &m)
                .with_context(|| format!("{name}: byte {}", stream.offset() + m.offset))?;
        }
        let end = whole.end();
        stream.consume(end);
        if n == 0 {
            break;
        }
    }
    w.flush()?;
    if stream.finish().is_err() {
        bail!(
            "{name}: stream truncated at byte {} ({} bytes of an incomplete message)",
            stream.offset(),
            stream.bytes().len()
        );
    }
    if !dec.finished() {
        bail!("{name}: stream ends without a DONE message (truncated?)");
    }
    if r.done_error() == -libc::ESRCH {
        return Ok(ExitCode::from(EXIT_NO_TASK));
    }
    Ok(ExitCode::SUCCESS)
}
