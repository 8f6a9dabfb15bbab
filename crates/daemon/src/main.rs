//! `taskdiagd`: serves the taskdiag protocol on a Unix socket (see the library's docs).
//!
//! This binary parses options, loads the programs, sets up the socket, drops privileges,
//! detaches unless told not to, and hands the socket to `taskdiag_daemon::server`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use taskdiag::{client, Dumper, Group};
use taskdiag_daemon::listen::{self, Listening};
use taskdiag_daemon::peer::OwnNamespaces;
use taskdiag_daemon::privs;
use taskdiag_daemon::server::{per_uid_cap, Limits, Server, BUSY_WAIT};

const AFTER_HELP: &str = "\
DESCRIPTION:
  taskdiagd loads the taskdiag BPF task iterators once and answers taskdiag requests from any
  local user on a Unix stream socket, so that unprivileged users get BPF speed. Each client is
  identified by the kernel (SO_PEERCRED) and sees exactly what its own /proc would show it:
  only its pid namespace, with its pid numbers; tasks hidden by its /proc's hidepid= option
  stay hidden; uids and gids as its user namespace maps them. Clients use it with
  `taskdiag dump --backend daemon`, or with any taskdiag tool under TASKDIAG_BACKEND=daemon;
  `--backend auto` uses it when the caller may not load BPF.

  After loading, taskdiagd switches to an unprivileged user (--user), drops every
  capability and confines itself to the system calls serving needs (seccomp). It needs
  CAP_BPF and CAP_PERFMON (or root) only to start, and CAP_SYS_ADMIN to mount a /proc of its
  own without hidepid (in a mount namespace of its own), through which it reads its clients'
  /proc entries whatever the host's /proc hides from its user. Descriptors it inherits
  beyond standard error are closed.

AVAILABILITY:
  No user can hold the daemon. One uid holds at most all workers but one
  (--max-requests-per-uid). A request still being answered at its deadline (--timeout) because
  the worker is blocked in the kernel, on a process whose memory cannot be read (a hung FUSE or
  NFS mount), gets DONE -ETIMEDOUT and its connection is closed at once; that worker counts as
  stuck (logged with --verbose) and gets no request until it comes back. A request that finds
  no worker it may use for --busy-wait is answered EBUSY, 'taskdiagd is busy': clients under
  --backend auto then read their own /proc, and clients wait for the daemon at most
  $TASKDIAG_TIMEOUT seconds (5) at each step whatever it does (see taskdiag(1)).

SOCKET:
  With systemd socket activation (contrib/taskdiagd.socket) the socket comes from systemd.
  Otherwise taskdiagd creates --socket (mode 0666) while still root, replacing a stale
  socket file but never a live one, and removes it on SIGTERM or SIGINT if its user may (in
  a directory only root may write to, the file stays and is replaced at the next start).
  Clients believe only a socket that root listened on (see taskdiag(1)).

EXIT STATUS:
  0 stopped by SIGTERM or SIGINT; 1 could not start (the message says why).

EXAMPLES:
  taskdiagd                                  # detach, listen on /run/taskdiag.sock
  taskdiagd --foreground --socket /tmp/td.sock --verbose
  taskdiag dump --backend daemon --socket /tmp/td.sock --groups base,cred

SEE ALSO:
  taskdiag(1), proc(5) (hidepid=), docs/SECURITY.md, docs/PERMISSIONS.md";

/// Serve taskdiag requests to unprivileged users, with procfs-equivalent permissions.
#[derive(Parser)]
#[command(name = "taskdiagd", version, about, after_help = AFTER_HELP)]
struct Args {
    /// Stay in the foreground (for systemd and tests); log to standard error.
    #[arg(long, short = 'f')]
    foreground: bool,
    /// The socket to listen on (ignored under socket activation).
    #[arg(long, value_name = "PATH", default_value = client::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Switch to this user after loading, when started as root [default: taskdiag if that
    /// user exists, else nobody]; `root` keeps uid 0 (not recommended).
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// Loaded program sets, i.e. requests answered at the same time [default: CPUs, at most
    /// 8]. One more set, loaded besides, only identifies new clients.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Connections open at once, all users together. Past 7/8 of it, a new connection of a
    /// uid holding none is still admitted; others make room by closing the oldest idle
    /// connection of the uid holding the most, and are refused only when none is idle.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_clients)]
    max_clients: usize,
    /// Connections open at once per uid.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_clients_per_uid)]
    max_clients_per_uid: usize,
    /// Workers one uid may hold at once (its other requests wait their turn; a uid holding
    /// fewer is served first) [default: --workers minus 1, at least 1]. With two or more
    /// workers it is never more than all of them but one, whatever is given: one user's
    /// requests, stuck ones included, always leave a worker to the others.
    #[arg(long, value_name = "N")]
    max_requests_per_uid: Option<usize>,
    /// Seconds a client may take to send a request or stay idle, and that a request may take
    /// from its arrival to the last byte of its answer, waits for a worker and for the reader
    /// included; past it the connection is closed. A worker still answering then (blocked in
    /// the kernel on a process that does not answer, e.g. on a hung FUSE or NFS mount) has
    /// its client told so and disconnected at once; it counts as stuck, and gets no other
    /// request, until it comes back.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    timeout: u64,
    /// Milliseconds a request waits when no worker it may use comes free (every one busy, or
    /// its uid at its limit) before it is answered at once with EBUSY, "taskdiagd is busy",
    /// instead of at the timeout: clients under `--backend auto` then read their own /proc.
    /// The wait starts over whenever a worker it may use comes free.
    #[arg(long, value_name = "MS", default_value_t = BUSY_WAIT.as_millis() as u64)]
    busy_wait: u64,
    /// MiB of responses held in memory for slow readers, all clients together (each uid at
    /// most an equal share among the uids holding some). A dump that finds it spent waits for
    /// its reader, until the timeout or until another user waits for a worker.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    buffer_limit: usize,
    /// Log each client (pid, uid, namespace, /proc options) and errors.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Write the man page (man) or a completion script (complete-bash, complete-zsh,
    /// complete-fish) to standard output, and exit: for packaging (scripts/deb).
    #[arg(long, value_name = "KIND", hide = true)]
    generate: Option<taskdiag_docgen::Generate>,
}

fn main() -> ExitCode {
    // First, before anything is opened: systemd's socket (fd 3) stays.
    privs::close_inherited_fds(listen::activation_fd());
    tune_allocator();
    // Each client holds two descriptors (its socket and its pidfd), and --max-clients
    // defaults to 4096.
    taskdiag_procfs::raise_nofile_limit();
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    if let Some(kind) = args.generate {
        return match generate(kind) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("taskdiagd: {e:#}");
                ExitCode::from(1)
            }
        };
    }
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("taskdiagd: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `--generate KIND`: taskdiagd(8), or its completions, from the definitions `--help` prints.
fn generate(kind: taskdiag_docgen::Generate) -> anyhow::Result<()> {
    use clap::CommandFactory;
    use std::io::Write;
    let out = match kind.shell() {
        Some(shell) => taskdiag_docgen::completion(Args::command(), shell, "taskdiagd"),
        None => {
            let source = format!("taskdiag {}", env!("CARGO_PKG_VERSION"));
            let page = taskdiag_docgen::command_page(
                &Args::command(),
                taskdiag_docgen::Meta {
                    section: "8",
                    date: &taskdiag_docgen::date(),
                    source: &source,
                    see_also: &[
                        "systemd.socket(5)",
                        "/usr/share/doc/taskdiag/SECURITY.md",
                        "/usr/share/doc/taskdiag/PERMISSIONS.md",
                    ],
                },
            )
            .context("rendering the man page")?;
            page.roff.into_bytes()
        }
    };
    std::io::stdout()
        .write_all(&out)
        .context("writing standard output")
}

fn run(a: Args) -> anyhow::Result<()> {
    if a.workers == Some(0)
        || a.max_clients == 0
        || a.max_clients_per_uid == 0
        || a.max_requests_per_uid == Some(0)
    {
        bail!(
            "--workers, --max-clients, --max-clients-per-uid and --max-requests-per-uid must be \
             at least 1"
        );
    }
    let workers = a.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8)
    });
    // Everything privileged first, while this is the only thread.
    let user = privs::default_user(a.user.as_deref())?;
    // The host's /proc first (its device tells clients' /proc apart), then our own.
    let mut own = OwnNamespaces::read().context("reading /proc/self/ns")?;
    if let Some(shifts) = privs::timens_shifts_start_times(own.boottime_offset_ns) {
        own.shifts_start_times = shifts;
    }
    let private_proc = privs::private_proc().context("mounting a /proc of our own")?;
    if a.verbose && !private_proc {
        eprintln!(
            "taskdiagd: no CAP_SYS_ADMIN for a /proc of our own: clients that the host's /proc \
             hides from this daemon's user are refused"
        );
    }
    // Each program the kernel rejects costs only its groups (answered from /proc); without
    // any task iterator there is nothing to serve, and the error says why (no BTF, no
    // privilege, the kernel's verdict). Clients then use /proc themselves.
    // Programs of its own, loaded once for its life: the daemon holds none of the pinned slots
    // one-shot processes reuse.
    let load = |show_flags| {
        Dumper::open_private_bpf(show_flags)
            .context("cannot serve: the BPF task iterators do not load")
    };
    // A worker's set also answers every thread and every process in one walk (an exporter's
    // scrape).
    let serving = |show_flags| {
        Dumper::open_serving_bpf(show_flags)
            .context("cannot serve: the BPF task iterators do not load")
    };
    // Identifying a client looks up one task's BASE, CRED and NS (its cgroup namespace), and
    // its root directory (a program of the memory-map set): only those programs.
    let ident_groups =
        Group::Base.flag() | Group::Cred.flag() | Group::Ns.flag() | Group::Vma.flag();
    // The sets are loaded on as many threads at once as there are CPUs: the kernel verifies a
    // worker's set in ~0.65 s here (0.84 s to start with one worker, 5.4 s with eight one after
    // another, which a socket-activated start's first client waited for). The threads have
    // ended when the scope does, before privileges are dropped and the process forks.
    let at_once = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lanes = workers.min(at_once).max(1);
    let (dumpers, ident) = std::thread::scope(|s| {
        let loading: Vec<_> = (0..lanes)
            .map(|i| {
                let n = workers / lanes + usize::from(i < workers % lanes);
                let sets = move || -> anyhow::Result<Vec<Dumper>> {
                    (0..n)
                        .map(|_| serving(taskdiag::proto::SHOW_SUPPORTED))
                        .collect()
                };
                std::thread::Builder::new()
                    .name("taskdiagd-load".into())
                    .spawn_scoped(s, sets)
                    // No thread to spare: loaded here instead.
                    .map_err(|_| sets)
            })
            .collect();
        let ident = load(ident_groups);
        let mut dumpers = Vec::with_capacity(workers);
        for lane in loading {
            let sets = match lane {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a loading thread panicked"))),
                Err(sets) => sets(),
            };
            match sets {
                Ok(v) => dumpers.extend(v),
                Err(e) => return (Err(e), ident),
            }
        }
        (Ok(dumpers), ident)
    });
    let (dumpers, mut ident) = (dumpers?, ident?);
    let Listening { listener, created } = match listen::activated()? {
        Some(l) => Listening {
            listener: l,
            created: None,
        },
        None => listen::bind(&a.socket)?,
    };
    privs::drop_privileges(user).context("dropping privileges")?;
    if let Err(e) = check_unprivileged_walk(&mut ident) {
        if let Some(p) = &created {
            let _ = std::fs::remove_file(p);
        }
        return Err(e);
    }
    if !a.foreground {
        detach().context("detaching")?;
    }
    let notifier = listen::Notifier::from_env();
    // After the fork, before the first thread (threads inherit the filter).
    privs::confine().context("confining the daemon")?;
    handle_signals(created.clone()).context("setting up signal handling")?;
    let limits = Limits {
        max_clients: a.max_clients,
        max_clients_per_uid: a.max_clients_per_uid,
        max_requests_per_uid: a.max_requests_per_uid.unwrap_or(usize::MAX),
        busy_wait: Duration::from_millis(a.busy_wait),
        timeout: Duration::from_secs(a.timeout.max(1)),
        buffer_limit: a.buffer_limit << 20,
    };
    if a.verbose {
        eprintln!(
            "taskdiagd: listening on {} with {workers} workers, at most {} per uid",
            created
                .as_deref()
                .unwrap_or(std::path::Path::new("a socket-activated descriptor"))
                .display(),
            per_uid_cap(limits.max_requests_per_uid, workers)
        );
    }
    notifier.ready();
    Server::new(listener, dumpers, ident, limits, own, a.verbose)
        .context("setting up the event loop")?
        .run()
        .context("serving")
}

/// Checks, with the privileges dropped, that the loaded programs still run: a walk for the
/// daemon's own task, as identifying a client makes. Some kernels (5.10 with Debian's default
/// `kernel.unprivileged_bpf_disabled=2`) refuse every bpf() call, creating an iterator
/// included, to a process without CAP_BPF: such a daemon could answer nobody, so it says so and
/// exits (clients then use /proc).
fn check_unprivileged_walk(ident: &mut Dumper) -> anyhow::Result<()> {
    match ident.identify(std::process::id()) {
        // (A task the iterator does not show is still a walk that ran.)
        Ok(_) | Err(taskdiag::Error::NoSuchTask { .. }) => Ok(()),
        Err(e) => bail!(
            "cannot serve: without privileges this kernel refuses taskdiagd its BPF iterators \
             (see sysctl kernel.unprivileged_bpf_disabled): {e}"
        ),
    }
}

/// Makes big buffers go back to the system when freed. Each request allocates large,
/// short-lived buffers (the ring buffer's pieces of 256 KiB and the copies made of them,
/// responses held for slow readers) on a worker thread. glibc raises its mmap threshold to
/// the largest buffer freed so far, after which such buffers come from per-thread arenas (up
/// to 8 per CPU) and stay there: after a burst of large dumps from a dozen clients the idle
/// daemon kept 95 MB for 6 MB of live data, and the buffer budget no longer bounded its
/// memory. A fixed threshold (which also fixes the trim threshold) keeps the daemon's memory
/// to what is live; the 128 KiB blocks that hold responses for slow readers (`conn::BLOCK`)
/// are each a mapping of their own because of it.
fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters; called first thing in main, before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// Forks; the parent exits, the child leaves the session and the terminal.
fn detach() -> std::io::Result<()> {
    // SAFETY: the process is single-threaded here, so fork() is safe; the child continues
    // with the same memory, the parent exits at once without running destructors.
    match unsafe { libc::fork() } {
        -1 => return Err(std::io::Error::last_os_error()),
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: plain system calls; the descriptors are replaced by /dev/null.
    unsafe {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
        libc::chdir(c"/".as_ptr());
    }
    Ok(())
}

/// SIGTERM, SIGINT and SIGHUP end the daemon cleanly (removing the socket it created). They
/// are blocked in every thread and taken by one thread with sigwait().
fn handle_signals(created: Option<PathBuf>) -> std::io::Result<()> {
    // SAFETY: sigset operations on a local set; pthread_sigmask on this (the only) thread, so
    // every later thread inherits the mask.
    let set = unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
        set
    };
    std::thread::Builder::new()
        .name("taskdiagd-signals".into())
        .spawn(move || {
            let mut sig = 0;
            // SAFETY: `set` is an initialized signal set and `sig` a writable int.
            unsafe { libc::sigwait(&set, &mut sig) };
            if let Some(p) = created {
                let _ = std::fs::remove_file(p);
            }
            std::process::exit(0);
        })?;
    Ok(())
}
