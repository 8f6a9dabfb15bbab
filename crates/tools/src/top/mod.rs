//! `taskdiag top`: a procps-style task monitor, interactive or in batch mode.
//!
//! Each refresh is one batched snapshot (BASE and the groups the shown, sorted and filtered
//! fields need, [`fields`]) from a backend opened once, and an O(n) merge with the previous
//! snapshot for %CPU ([`model`]); user names are looked up once per user. Where the change
//! tracker can run (root, BPF on 6.1+ or /proc), a refresh re-reads only the processes that
//! ran, started or exited since the last one, and walks every task every 10 s ([`refresh`]).
//! Screen text follows procps-ng 4.0.2 top's default layout ([`format`](mod@format)); batch
//! mode (`-b`) prints it as procps does, the interactive screen ([`tui`]) draws it with
//! ratatui and reads keys with crossterm, sized as procps sizes its screen and never asking
//! the terminal anything ([`screen`]).
//!
//! This module owns the command line, the help text and the batch loop; the rc file procps
//! top reads is [`rc`]'s. Machine-wide
//! figures come from [`sys`], signals and renicing from [`act`], the kernel stack window (`K`)
//! from [`kstack`]. Reading tasks is `crate::snapshot`'s job.

pub mod act;
pub mod fields;
pub mod format;
pub mod kstack;
pub mod model;
pub mod rc;
pub mod refresh;
pub mod screen;
pub mod sys;
pub mod tui;

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use taskdiag::Group;

use self::fields::Fields;
use self::format::{layout, RowCtx, Summary};
use self::model::{Col, Deltas, Frame, SortCtx, UserSel};
use self::refresh::Refresher;
use crate::getopt::{Getopt, HasArg, LongOpt};
use crate::snapshot::{self, Machine, Query, Source};

/// `taskdiag top --help`.
pub const HELP: &str = "\
Usage: taskdiag top [options]

Display the tasks of the system and what they cost, refreshed every few seconds: a summary
(uptime, load average, task counts by state, CPU time by state, memory) and a table of tasks,
busiest first. Options and screen follow procps-ng top 4.0.2; each refresh is one batched
taskdiag dump instead of several /proc reads per task.

OPTIONS
  -b, --batch-mode            write plain text to standard output instead of drawing an
                              interactive screen; stops after -n iterations (default: never)
  -c, --cmdline-toggle        show command lines instead of names in COMMAND (kernel threads
                              and zombies show [name])
  -d, --delay SECS            seconds between refreshes, fractions allowed (default 3.0)
  -E, --scale-summary-mem k|m|g|t|p|e   unit of the summary's memory figures (default m)
  -e, --scale-task-mem k|m|g|t|p        unit of VIRT, RES and SHR (default k)
  -H, --threads-show          one line per thread instead of per process
  -i, --idle-toggle           hide tasks that used no CPU time during the last interval
  -n, --iterations N          stop after N refreshes
  -O, --list-fields           list the column names -o accepts, then exit
  -o, --sort-override [+|-]FIELD   sort by FIELD (any name -O lists); + highest first
                              (default), - lowest first
  -p, --pid PID[,PID...]      only these processes (0 means top itself); may be repeated
  -S, --accum-time-toggle     TIME+ includes the time of waited-for children
  -s, --secure-mode           disable the d, k and r commands
  -U, --filter-any-user [!]USER   only tasks with USER as real, effective, saved or
                              filesystem user (! inverts); name or number
  -u, --filter-only-euser [!]USER  only tasks with USER as effective user
  -w, --width [COLUMNS]       line width in batch mode; without a number, $COLUMNS (and
                              $LINES) or 512
  -1, --single-cpu-toggle     one %Cpu line per CPU instead of the total
  -h, --help                  show this text and exit
  -V, -v, --version           show the version and exit

COLUMNS
  Shown by default (procps top's other fields are turned on with f, or in its rc file):
  PID      task id                      USER     effective user name
  PR       priority (rt for real-time)  NI       nice value
  VIRT     virtual memory, KiB          RES      resident memory, KiB
  SHR      resident file and shmem, KiB S        state (R S D T t Z I ...)
  %CPU     share of one CPU used during the last interval, from the difference of two
           snapshots of the same task (pid and start time): a reused pid never inherits
           another task's time
  %MEM     RES as a share of MemTotal   TIME+    CPU time, minutes:seconds.hundredths
  COMMAND  name, or command line with c
  Every field of procps top 4.0.2 is known by name and shown as procps shows it. Two say
  what a task waits for (both off by default, their data read only while shown):
  WCHAN    the kernel function the task sleeps in, as /proc/PID/wchan (- when running)
  SYSCALL  (taskdiag's own, last in the f screen) the system call the task is in, as
           /proc/PID/syscall's number names it (x86-64: read, futex, clock_nanosleep ...);
           running for a task on a CPU; - for a kernel thread, a task blocked outside a
           system call, or where the file is refused (another user's task)

INTERACTIVE COMMANDS
  q               quit (so do Ctrl-C, SIGINT, SIGTERM, SIGHUP and SIGQUIT; the terminal
                  is always restored, also after a crash)
  Ctrl-Z          suspend (the terminal is restored until the job is resumed)
  h, ?            help screen
  Enter, Space    refresh now
  d, s            change the delay between refreshes
  P M T N         sort by %CPU, %MEM, TIME+, PID
  f, F            field management: Up/Down choose a field, d or Space shows or hides it,
                  s sorts by it, Right picks it up to move with Up/Down (Enter or Left puts
                  it down), q or Esc leaves
  <, >            sort by the column left or right of the current one
  R               reverse the sort order
  H               threads on/off            c   command lines on/off
  i               hide/show idle tasks      S   cumulative time on/off
  u, U            show one user's tasks (effective, or any uid); empty for everyone
  o, O            add a filter FIELD=TEXT (contains), FIELD<VALUE or FIELD>VALUE, ! in front
                  to invert; o ignores case, O does not; Ctrl-O lists the filters
  =               remove all filters (u, o, -p, n) and show idle tasks again
  n, #            maximum number of tasks shown (0 for no limit)
  k               send a signal: asks for a pid (default: the top line) and a signal
                  (default SIGTERM); sent through a pidfd after checking the pid still
                  names the task shown, so a reused pid is never hit
  K               kernel stack: asks for a pid (default: the top line; with H any thread)
                  and shows that task's kernel stack, a frame a line as /proc/PID/stack
                  without its [<0>], under its state, WCHAN and SYSCALL, until a key is
                  pressed; root only, like /proc/PID/stack (others are told so)
  r               renice: asks for a pid and a nice value
  l, t, m         uptime line, task and CPU lines, memory lines on/off
  1               one CPU line per CPU on/off
  I               Irix mode (a task's %CPU relative to one CPU) on/off
  E, e            cycle the memory units of the summary and of the task columns
  y               running tasks in bold on/off
  Up, Down, PgUp, PgDn, Home, End   scroll the task list

DIFFERENCES FROM PROCPS TOP
  The configuration file procps top reads (~/.toprc, $XDG_CONFIG_HOME/procps/toprc,
  /etc/topdefaultrc; procps-ng 4.0 format only) gives the delay, Irix mode, the current
  window's fields, sort field and c, S, i, y and R settings, the task limit and the memory
  scales; the rest of it is ignored, and nothing is written (W). There are no alternate
  windows (A, a, w, g, G), forest view (V, v), colours (z, Z, b, B, x), searching (L, &),
  inspection (Y) or bottom panes (Ctrl-G, Ctrl-K, Ctrl-N, Ctrl-P, Ctrl-U); such keys say
  so. K (kernel stack) and SYSCALL are taskdiag's; procps top uses neither name. -p takes
  any number of pids. The uptime line counts users from utmp. The
  interactive screen uses the terminal's alternate screen, so the shell's screen comes
  back on exit. A task first seen after the previous refresh counts all its CPU time in
  %CPU only when it started after that refresh (procps counts it whatever its age).
  Run as root (BPF on Linux 6.1+, or /proc), a refresh re-reads only the processes that
  ran, started or exited since the previous one, which a BPF program on the scheduler's
  tracepoints records, and every task every 10 s: a value that changes while its task
  sleeps (another process renices it, the kernel reclaims its memory) can be up to 10 s
  old.

ENVIRONMENT
  TASKDIAG_BACKEND   auto (default), bpf, daemon or procfs
  TASKDIAG_TOP_TRACK 0: every refresh reads every task; 1: re-read only what changed or
                     fail, and with -b say at the end how many refreshes did
  COLUMNS, LINES     screen size for -w without a number and for batch output to a pipe

EXIT STATUS
  0 on success, and after an unknown option or a missing option argument (as procps top);
  1 when an option has a bad value or the tasks cannot be read.
";

/// How wide lines are in batch mode (`-w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// `-w N`.
    Cols(usize),
    /// `-w` alone: $COLUMNS/$LINES or 512.
    Env,
}

/// Options of one run.
#[derive(Debug, Clone)]
pub struct Opts {
    /// `-b`.
    pub batch: bool,
    /// `-c`: command lines.
    pub cmdline: bool,
    /// `-d`, seconds.
    pub delay: f32,
    /// `-E`: summary memory unit (0 = KiB).
    pub summ_scale: usize,
    /// `-e`: task memory unit.
    pub task_scale: usize,
    /// `-H`.
    pub threads: bool,
    /// Show tasks that used no CPU (`-i` turns this off).
    pub idle: bool,
    /// `-n`.
    pub iterations: Option<u64>,
    /// Sort column.
    pub sort: Col,
    /// Lowest first.
    pub ascending: bool,
    /// `-p`.
    pub pids: Vec<u32>,
    /// `-S`.
    pub cumulative: bool,
    /// `-s`.
    pub secure: bool,
    /// `-u`/`-U`.
    pub user: Option<UserSel>,
    /// `-w`.
    pub width: Option<Width>,
    /// `-1`.
    pub per_cpu: bool,
    /// The fields, their order and which are shown (`f`).
    pub fields: Fields,
    /// Irix mode (`I`): a task's %CPU relative to one CPU.
    pub irix: bool,
    /// Running tasks in bold (`y`).
    pub hirows: bool,
    /// Most tasks shown (`n`), 0 for all.
    pub max_tasks: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            batch: false,
            cmdline: false,
            delay: 3.0,
            summ_scale: 1,
            task_scale: 0,
            threads: false,
            idle: true,
            iterations: None,
            sort: Col::Cpu,
            ascending: false,
            pids: Vec::new(),
            cumulative: false,
            secure: false,
            user: None,
            width: None,
            per_cpu: false,
            fields: Fields::default(),
            irix: true,
            hirows: true,
            max_tasks: 0,
        }
    }
}

impl Opts {
    /// The defaults with what an rc file sets (before the command line's options).
    pub fn from_rc(rc: &rc::Rc) -> Opts {
        let f = rc.winflags;
        Opts {
            delay: rc.delay,
            summ_scale: rc.summ_scale,
            task_scale: rc.task_scale,
            cmdline: f & rc::SHOW_CMDLIN != 0,
            cumulative: f & rc::SHOW_CTIMES != 0,
            idle: f & rc::SHOW_IDLEPS != 0,
            hirows: f & rc::SHOW_HIROWS != 0,
            ascending: f & rc::QSRT_NORMAL == 0,
            sort: Col::from_index(rc.sortindx).unwrap_or(Col::Cpu),
            fields: rc.fields.clone(),
            irix: rc.irix,
            max_tasks: rc.maxtasks,
            ..Opts::default()
        }
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// Run with these options.
    Run(Opts),
    /// Print this to standard output and exit 0.
    Print(String),
    /// Exit with this status (a message was printed).
    Exit(i32),
}

/// procps top's short options (getopt syntax), with our `-v` for `-V`.
const SHORT: &[u8] = b"bcd:E:e:Hhin:Oo:p:SsU:u:Vvw::1";

/// procps top's long options, in its order (which ambiguity messages list).
const LONG: &[LongOpt] = &[
    LongOpt::new("batch-mode", HasArg::No, b'b' as u32),
    LongOpt::new("cmdline-toggle", HasArg::No, b'c' as u32),
    LongOpt::new("delay", HasArg::Required, b'd' as u32),
    LongOpt::new("scale-summary-mem", HasArg::Required, b'E' as u32),
    LongOpt::new("scale-task-mem", HasArg::Required, b'e' as u32),
    LongOpt::new("threads-show", HasArg::No, b'H' as u32),
    LongOpt::new("help", HasArg::No, b'h' as u32),
    LongOpt::new("idle-toggle", HasArg::No, b'i' as u32),
    LongOpt::new("iterations", HasArg::Required, b'n' as u32),
    LongOpt::new("list-fields", HasArg::No, b'O' as u32),
    LongOpt::new("sort-override", HasArg::Required, b'o' as u32),
    LongOpt::new("pid", HasArg::Required, b'p' as u32),
    LongOpt::new("accum-time-toggle", HasArg::No, b'S' as u32),
    LongOpt::new("secure-mode", HasArg::No, b's' as u32),
    LongOpt::new("filter-any-user", HasArg::Required, b'U' as u32),
    LongOpt::new("filter-only-euser", HasArg::Required, b'u' as u32),
    LongOpt::new("version", HasArg::No, b'V' as u32),
    LongOpt::new("width", HasArg::Optional, b'w' as u32),
    LongOpt::new("single-cpu-toggle", HasArg::No, b'1' as u32),
];

/// procps' `mkfloat`: a float, with `.` and `,` both accepted as the decimal point.
fn mkfloat(s: &str) -> Option<f32> {
    let t = s.trim_start();
    let v = t
        .parse::<f32>()
        .ok()
        .or_else(|| t.replace(',', ".").parse().ok())?;
    (v.is_finite() && v < i32::MAX as f32).then_some(v)
}

/// procps' whole-number `mkfloat`: `strtol(s, 0)` over the whole string, below `INT_MAX`.
fn mkwhole(s: &str) -> Option<i64> {
    crate::cnum::strtol_whole(s.as_bytes(), 0).filter(|&v| v < i64::from(i32::MAX))
}

/// Parses top's command line (`args` without the program name), after the rc file procps
/// top would read.
pub fn parse_args(args: &[OsString]) -> Parsed {
    parse_args_with(args, rc::read().as_ref())
}

/// Parses top's command line (`args` without the program name) over what `rc` sets.
pub fn parse_args_with(args: &[OsString], rc: Option<&rc::Rc>) -> Parsed {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut o = rc.map(Opts::from_rc).unwrap_or_default();
    let mut delay: Option<f32> = None;
    let fail = |m: String| {
        eprintln!("top: {m}");
        Parsed::Exit(1)
    };
    let posixly = std::env::var_os("POSIXLY_CORRECT").is_some();
    let mut g = Getopt::new(&args, SHORT, LONG, posixly);
    while let Some(got) = g.next() {
        let (code, val) = match got {
            Ok(opt) => opt,
            Err(e) => {
                // getopt's own complaints end top with status 0 (procps calls bye_bye, not
                // error_exit).
                let mut m = e.message("top");
                m.push(b'\n');
                let _ = io::stderr().write_all(&m);
                return Parsed::Exit(0);
            }
        };
        let c = char::from_u32(code).unwrap_or('?');
        // procps takes a following word not starting with '-' as the argument of any
        // option that ended its argv element ("-w 120", and "-b foo" is an error).
        let mut cp = val
            .or_else(|| g.take_next_if(|n| !n.starts_with(b"-")))
            .map(text);
        if let Some(v) = cp.take() {
            let v = v.strip_prefix('=').map(str::to_string).unwrap_or(v);
            if v.is_empty() {
                match g.take_next_if(|_| true) {
                    Some(n) => cp = Some(text(n)),
                    None => return fail(format!("-{c} argument missing")),
                }
            } else {
                cp = Some(v);
            }
        }
        match c {
            'h' => return Parsed::Print(HELP.to_string()),
            'V' | 'v' => {
                return Parsed::Print(format!(
                    "top from taskdiag {} (procps-ng 4.0.2 compatible)\n",
                    env!("CARGO_PKG_VERSION")
                ))
            }
            'O' => {
                let mut s = String::new();
                for col in Col::ALL {
                    s.push_str(col.name());
                    s.push('\n');
                }
                return Parsed::Print(s);
            }
            'b' | 'c' | 'H' | 'i' | 'S' | 's' | '1' => {
                match c {
                    'b' => o.batch = true,
                    'c' => o.cmdline = !o.cmdline,
                    'H' => o.threads = true,
                    'i' => o.idle = !o.idle,
                    'S' => o.cumulative = !o.cumulative,
                    's' => o.secure = true,
                    _ => o.per_cpu = !o.per_cpu,
                }
                if let Some(extra) = cp {
                    return fail(format!("unknown option '{extra}'"));
                }
            }
            _ => {
                let v = cp.unwrap_or_default();
                match c {
                    'd' => match mkfloat(&v) {
                        None => return fail(format!("bad delay interval '{v}'")),
                        Some(d) if d < 0.0 => return fail("-d requires positive argument".into()),
                        Some(d) => delay = Some(d),
                    },
                    'E' | 'e' => {
                        let units = if c == 'E' { "kmgtpe" } else { "kmgtp" };
                        let lower = v.to_ascii_lowercase();
                        match units.find(lower.as_str()).filter(|_| lower.len() == 1) {
                            Some(n) if c == 'E' => o.summ_scale = n,
                            Some(n) => o.task_scale = n,
                            None => return fail(format!("bad memory scaling arg '{v}'")),
                        }
                    }
                    'n' => match mkwhole(&v).filter(|&n| n >= 1) {
                        Some(n) => o.iterations = Some(n as u64),
                        None => return fail(format!("bad iterations argument '{v}'")),
                    },
                    'o' => {
                        let (asc, name) = if let Some(r) = v.strip_prefix('+') {
                            (false, r)
                        } else if let Some(r) = v.strip_prefix('-') {
                            (true, r)
                        } else {
                            (o.ascending, v.as_str())
                        };
                        match Col::by_name(name) {
                            Some(col) => {
                                o.sort = col;
                                o.ascending = asc;
                            }
                            None => return fail(format!("unrecognized field name '{name}'")),
                        }
                    }
                    'p' => {
                        if o.user.is_some() {
                            return fail("conflicting process selections (U/p/u)".into());
                        }
                        for part in v.split(',') {
                            let ok = !part.is_empty()
                                && !part.contains(['+', '-', '.'])
                                && part.bytes().all(|b| b.is_ascii_digit() || b == b' ');
                            let pid: Option<u32> = part.trim().parse().ok().filter(|_| ok);
                            let Some(mut pid) = pid else {
                                if part.is_empty() {
                                    continue;
                                }
                                return fail(format!("bad pid '{part}'"));
                            };
                            if pid == 0 {
                                pid = std::process::id();
                            }
                            if !o.pids.contains(&pid) {
                                o.pids.push(pid);
                            }
                        }
                    }
                    'u' | 'U' => {
                        if !o.pids.is_empty() || o.user.is_some() {
                            return fail("conflicting process selections (U/p/u)".into());
                        }
                        match UserSel::parse(&v, c == 'U') {
                            Ok(u) => o.user = Some(u),
                            Err(m) => return fail(m.to_string()),
                        }
                    }
                    'w' => {
                        if v.is_empty() {
                            o.width = Some(Width::Env);
                        } else {
                            match mkwhole(&v).filter(|n| (3..=512).contains(n)) {
                                Some(n) => o.width = Some(Width::Cols(n as usize)),
                                None => return fail(format!("bad width arg '{v}'")),
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    // Operands are none of top's: the first is reported once the options are read, as
    // getopt leaves them for last.
    if let Some(extra) = g.operands().first() {
        return fail(format!("unknown option '{}'", text(extra)));
    }
    if let Some(d) = delay {
        if o.secure {
            return fail("-d disallowed in \"secure\" mode".into());
        }
        o.delay = d;
    }
    Parsed::Run(o)
}

/// Width of the P field: the digits of the CPU count (procps' `zap_fieldstab`).
fn cpu_width(ncpu: usize) -> usize {
    ncpu.to_string().len()
}

/// Number of online CPUs (the per-CPU lines of /proc/stat).
fn cpu_count(cpus: &[sys::CpuTicks]) -> usize {
    cpus.iter().filter(|c| c.id.is_some()).count().max(1)
}

/// procps' `Cpu_pmax`: the highest %CPU shown.
fn pcpu_max(irix: bool, ncpu: usize, threads: bool) -> f32 {
    if irix && ncpu > 1 && !threads {
        let m = 100.0 * ncpu as f32;
        if ncpu > 1000 {
            m.min(9_999_999.0)
        } else if ncpu > 100 {
            m
        } else if ncpu > 10 {
            m.min(99_999.0)
        } else {
            m.min(999.9)
        }
    } else {
        99.9
    }
}

/// The snapshot groups the options need: BASE, and what the shown fields, the sort field
/// and the fields in `also` (other-filters) read; CRED for a user selection, STAT to tell idle
/// tasks and for the fault deltas.
fn groups(o: &Opts, also: &[Col]) -> u64 {
    let mut g = Group::Base.flag();
    for c in o
        .fields
        .shown()
        .into_iter()
        .chain([o.sort])
        .chain(also.iter().copied())
    {
        g |= c.groups(o.cmdline);
        if c == Col::User {
            g |= Group::Cred.flag();
        }
    }
    if o.user.is_some() {
        g |= Group::Cred.flag();
    }
    if !o.idle {
        g |= Group::Stat.flag();
    }
    g
}

/// Whether the fault deltas (vMj, vMn) are shown or sorted by: the first sample then reads
/// the faults too.
fn wants_fault_deltas(o: &Opts) -> bool {
    o.fields
        .shown()
        .into_iter()
        .chain([o.sort])
        .any(|c| matches!(c, Col::Fv1 | Col::Fv2))
}

/// Screen size for batch output: `-w`, the terminal, $COLUMNS, 80.
fn batch_size(w: Option<Width>) -> (usize, Option<usize>) {
    let env_num = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| mkwhole(&v))
            .filter(|&n| n > 0)
            .map(|n| n as usize)
    };
    match w {
        Some(Width::Cols(n)) => (n, None),
        Some(Width::Env) => (
            env_num("COLUMNS").unwrap_or(512).clamp(3, 512),
            env_num("LINES").map(|n| n.max(3)),
        ),
        None => {
            let cols = tty_cols(1).or_else(|| env_num("COLUMNS")).unwrap_or(80);
            (cols.clamp(3, 512), None)
        }
    }
}

/// Columns of the terminal on `fd`, if it is one.
fn tty_cols(fd: i32) -> Option<usize> {
    // SAFETY: an all-zero winsize is a valid out-parameter.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize; `ws` is valid and writable.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some(ws.ws_col as usize)
}

/// The rows to show, in order: selected by user and idleness, then sorted.
pub fn select_and_sort(
    f: &Frame,
    o: &Opts,
    ctx: &RowCtx<'_>,
    keep: impl Fn(&model::Row) -> bool,
) -> Vec<u32> {
    let utf8 = ctx.utf8;
    let mut order: Vec<u32> = f
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            (o.idle || r.delta().is_some_and(|d| d > 0))
                && o.user.is_none_or(|u| u.matches(r))
                && keep(r)
        })
        .map(|(i, _)| i as u32)
        .collect();
    if !o.pids.is_empty() {
        // procps reads -p processes in the order given, so ties keep that order.
        let pos = |i: &u32| {
            let tgid = f.rows[*i as usize].tgid;
            o.pids.iter().position(|&p| p == tgid).unwrap_or(usize::MAX)
        };
        order.sort_by_key(pos);
    }
    let generic = |r: &model::Row| ctx.sort_key(r, o.sort);
    let ctx = SortCtx {
        generic: &generic,
        users: &f.users,
        tasks: &f.tasks,
        cmdline: o.cmdline,
        cumulative: o.cumulative,
        utf8,
    };
    model::sort(&mut order, &f.rows, o.sort, o.ascending, &ctx);
    order
}

/// One snapshot with the CPU counters read next to it.
struct Sampler {
    src: Source,
    machine: Machine,
    deltas: Deltas,
    cpu_prev: Vec<sys::CpuTicks>,
    refresher: Refresher,
}

impl Sampler {
    fn open(o: &Opts) -> Result<Sampler, snapshot::Error> {
        let machine = Machine::read()?;
        let src = Source::open(groups(o, &[]))?;
        Ok(Sampler {
            src,
            machine,
            deltas: Deltas::new(),
            cpu_prev: sys::read_cpu(),
            refresher: Refresher::walking(),
        })
    }

    /// Refreshes from now on re-read only the processes that changed, where the change tracker
    /// can be used (see [`refresh`]): for a top that refreshes more than once.
    fn track(&mut self) -> Result<(), String> {
        self.refresher = Refresher::tracking(&self.src)?;
        Ok(())
    }

    /// Takes a snapshot and makes a frame (with the CPU percentages since the last one).
    fn sample(
        &mut self,
        o: &Opts,
        also: &[Col],
    ) -> Result<(Frame, Vec<sys::CpuPct>, usize), snapshot::Error> {
        self.sample_groups(o, groups(o, also))
    }

    fn sample_groups(
        &mut self,
        o: &Opts,
        groups: u64,
    ) -> Result<(Frame, Vec<sys::CpuPct>, usize), snapshot::Error> {
        let q = Query {
            threads: o.threads,
            groups,
        };
        let now = sys::boottime_ns();
        let tasks = self.refresher.refresh(&mut self.src, &q)?;
        let frame = self
            .deltas
            .frame(tasks, now, &o.pids, self.machine.ns_per_tick(), groups);
        let cpu = sys::read_cpu();
        let pct = sys::cpu_pct(&self.cpu_prev, &cpu);
        let ncpu = cpu_count(&cpu);
        self.cpu_prev = cpu;
        Ok((frame, pct, ncpu))
    }

    /// A first snapshot and a short wait, so the next one has a %CPU interval (procps waits
    /// 0.15 s the same way).
    fn prime(&mut self, o: &Opts) -> Result<(), snapshot::Error> {
        self.refresher.reset();
        if wants_fault_deltas(o) {
            // The faults too: a whole sample.
            self.sample_groups(o, groups(o, &[]) | Group::Stat.flag())?;
        } else {
            // Only CPU times and start times matter for this one.
            let now = sys::boottime_ns();
            let times = self.src.cpu_times(o.threads)?;
            self.deltas.prime(&times, now, self.machine.ns_per_tick());
        }
        self.cpu_prev = sys::read_cpu();
        std::thread::sleep(Duration::from_millis(150));
        Ok(())
    }
}

/// The fixed facts of a batch run's output.
#[derive(Clone, Copy)]
struct Screen {
    /// Line width.
    cols: usize,
    /// Lines per frame, when limited (-w with $LINES).
    rows_max: Option<usize>,
    /// PID column width.
    pid_w: usize,
    /// The locale is UTF-8.
    utf8: bool,
}

/// Writes one batch frame.
fn write_frame(
    out: &mut Vec<u8>,
    o: &Opts,
    s: &Sampler,
    f: &Frame,
    cpus: &[sys::CpuPct],
    ncpu: usize,
    scr: &Screen,
) {
    let Screen {
        cols,
        rows_max,
        pid_w,
        utf8,
    } = *scr;
    let mem = sys::read_mem();
    let summary = Summary {
        hms: sys::local_hms(),
        uptime: snapshot::uptime().unwrap_or(0.0),
        users: sys::count_users(),
        load: sys::read_loadavg(),
        counts: f.counts,
        threads: o.threads,
        cpus,
        per_cpu: o.per_cpu,
        mem,
        mem_scale: o.summ_scale,
    };
    let lines = summary.lines(true, true, true, cols);
    for l in &lines {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    let l = layout(&o.fields.shown(), cols, pid_w, cpu_width(ncpu));
    let mut header = l.header.clone().into_bytes();
    format::trim_end(&mut header);
    out.push(b'\n');
    out.extend_from_slice(&header);
    let mut etscale = 100.0 / (s.machine.hz as f32 * f.et);
    if !o.irix {
        etscale /= ncpu as f32;
    }
    let ctx = RowCtx {
        frame: f,
        etscale,
        pmax: pcpu_max(o.irix, ncpu, o.threads),
        mem_total: if mem.total > 0 {
            mem.total
        } else {
            s.machine.mem_total_kib
        },
        hz: s.machine.hz,
        uptime: summary.uptime,
        task_scale: o.task_scale,
        cmdline: o.cmdline,
        cumulative: o.cumulative,
        utf8,
        rollups: Default::default(),
    };
    let order = select_and_sort(f, o, &ctx, |_| true);
    // With -w and $LINES, only what fits a screen that high.
    let mut limit = rows_max
        .map(|r| r.saturating_sub(lines.len() + 2))
        .unwrap_or(usize::MAX);
    if o.max_tasks > 0 {
        limit = limit.min(o.max_tasks);
    }
    for &i in order.iter().take(limit) {
        out.push(b'\n');
        let start = out.len();
        ctx.row(out, &l, &f.rows[i as usize]);
        let mut end = out.len();
        while end > start && out[end - 1] == b' ' {
            end -= 1;
        }
        out.truncate(end);
    }
}

/// Batch mode: `-n` frames (or forever) of plain text on standard output.
fn run_batch(o: &Opts, utf8: bool) -> i32 {
    let mut s = match Sampler::open(o) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("top: {e}");
            return 1;
        }
    };
    let (cols, rows_max) = batch_size(o.width);
    let scr = Screen {
        cols,
        rows_max,
        pid_w: sys::pid_width(),
        utf8,
    };
    if o.iterations != Some(1) {
        if let Err(e) = s.track() {
            eprintln!("top: {e}");
            return 1;
        }
    }
    let stdout = io::stdout();
    let mut out = Vec::with_capacity(1 << 20);
    if let Err(e) = s.prime(o) {
        eprintln!("top: {e}");
        return 1;
    }
    let mut n = 0u64;
    loop {
        let (f, cpus, ncpu) = match s.sample(o, &[]) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("top: {e}");
                return 1;
            }
        };
        out.clear();
        if n > 0 {
            out.extend_from_slice(b"\n\n");
        }
        write_frame(&mut out, o, &s, &f, &cpus, ncpu, &scr);
        n += 1;
        let last = o.iterations.is_some_and(|max| n >= max);
        if last {
            out.push(b'\n');
        }
        let mut lock = stdout.lock();
        if let Err(e) = lock.write_all(&out).and_then(|_| lock.flush()) {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return 0;
            }
            eprintln!("top: write error: {e}");
            return 1;
        }
        drop(lock);
        if last {
            if refresh::required() == Some(true) {
                eprintln!(
                    "top: {} refreshes walked every task, {} read only what changed",
                    s.refresher.walks, s.refresher.partial
                );
            }
            return 0;
        }
        drop(f);
        std::thread::sleep(Duration::from_secs_f32(o.delay.max(0.0)));
    }
}

/// Runs `taskdiag top` with `args` (without the program name); returns the exit status.
pub fn top_main(args: &[OsString]) -> i32 {
    let utf8 = crate::text::init_locale();
    let o = match parse_args(args) {
        Parsed::Run(o) => o,
        Parsed::Print(s) => {
            print!("{s}");
            let _ = io::stdout().flush();
            return 0;
        }
        Parsed::Exit(code) => return code,
    };
    if o.batch {
        return run_batch(&o, utf8);
    }
    tui::run(o, utf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Parsed {
        let v: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse_args_with(&v, None)
    }

    fn run(args: &[&str]) -> Opts {
        match parse(args) {
            Parsed::Run(o) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn options_like_procps() {
        let o = run(&["-b", "-n", "2", "-d", "0.5", "-p", "1,2", "-p0"]);
        assert!(o.batch);
        assert_eq!(o.iterations, Some(2));
        assert_eq!(o.delay, 0.5);
        assert_eq!(o.pids, [1, 2, std::process::id()]);
        let o = run(&[
            "-bHn1", "-d,25", "-o", "-%MEM", "-w", "120", "-Ek", "-e", "M",
        ]);
        assert!(o.batch && o.threads);
        assert_eq!(o.iterations, Some(1));
        assert_eq!(o.delay, 0.25);
        assert_eq!((o.sort, o.ascending), (Col::Mem, true));
        assert_eq!(o.width, Some(Width::Cols(120)));
        assert_eq!((o.summ_scale, o.task_scale), (0, 1));
        let o = run(&["--batch-mode", "--iter=3", "--delay", "1", "-w", "-c"]);
        assert!(o.batch && o.cmdline);
        assert_eq!(o.iterations, Some(3));
        assert_eq!(o.width, Some(Width::Env));
        // Any field sorts; an rc file's settings come first, then the options.
        let o = run(&["-o", "nsUTS"]);
        assert_eq!((o.sort, o.ascending), (Col::NsUts, false));
        let rc = rc::Rc {
            delay: 5.0,
            irix: false,
            fields: Fields::default(),
            winflags: rc::SHOW_CMDLIN,
            sortindx: Col::Ppid.index(),
            maxtasks: 3,
            summ_scale: 0,
            task_scale: 2,
        };
        let v: Vec<OsString> = ["-c", "-d", "1"].iter().map(OsString::from).collect();
        let Parsed::Run(o) = parse_args_with(&v, Some(&rc)) else {
            panic!("rc run");
        };
        assert_eq!((o.sort, o.ascending, o.delay), (Col::Ppid, true, 1.0));
        assert!(!o.cmdline && !o.idle && !o.irix);
        assert_eq!((o.max_tasks, o.task_scale), (3, 2));
        let o = run(&["-u", "root", "-i", "-S", "-1"]);
        assert_eq!(o.user.map(|u| (u.uid, u.any)), Some((0, false)));
        assert!(!o.idle && o.cumulative && o.per_cpu);
    }

    #[test]
    fn bad_values_exit_1_and_getopt_errors_exit_0() {
        for bad in [
            &["-n", "0"][..],
            &["-d", "-1"],
            &["-d", "x"],
            &["-p", "abc"],
            &["-p", "-5"],
            &["-u", "no such user, surely"],
            &["-o", "NOPE"],
            &["-w", "2"],
            &["-E", "x"],
            &["-b", "junk"],
            &["-p", "1", "-u", "root"],
            &["-s", "-d", "1"],
            &["stray"],
        ] {
            assert!(matches!(parse(bad), Parsed::Exit(1)), "{bad:?}");
        }
        for bad in [&["-x"][..], &["-d"], &["--bogus"], &["--batch-mode=1"]] {
            assert!(matches!(parse(bad), Parsed::Exit(0)), "{bad:?}");
        }
        // Every field may be sorted by, the smaps_rollup ones too.
        assert!(matches!(parse(&["-o", "USS"]), Parsed::Run(o) if o.sort == Col::Uss));
        assert!(matches!(parse(&["-h"]), Parsed::Print(s) if s.contains("EXIT STATUS")));
        assert!(matches!(parse(&["-V"]), Parsed::Print(s) if s.starts_with("top from taskdiag")));
    }
}
