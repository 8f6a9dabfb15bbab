//! `taskdiag exporter`: a Prometheus exporter that speaks process-exporter's language
//! (`namedprocess_namegroup_*` series, its YAML config, its flags and its counter
//! semantics) and reads the processes through taskdiag: one batched dump per scrape
//! (BPF as root, taskdiagd for other users, /proc otherwise) instead of seven /proc files
//! per process.
//!
//! The pieces, in the order a scrape meets them:
//!
//! * [`options`]: the command line, Go flag style, and the manual page.
//! * [`config`] and [`template`]: the rules that name a process's group.
//! * [`sample`]: one collection, reduced to what process-exporter reads per process;
//!   [`rollup`]: the proportional sizes, kept and read again between scrapes.
//! * [`group`]: tracking processes across collections, per-group accumulators.
//! * [`metrics`]: the families, in the 0.0.4 text format or OpenMetrics.
//! * [`exporter`]: the state between scrapes; concurrent scrapes share a collection
//!   ([`flight`]).
//! * [`server`]: the HTTP side.
//!
//! [`main`] is the whole program, which the `taskdiag exporter` subcommand and the
//! `taskdiag-exporter` binary both call. docs/EXPORTER.md describes the metrics and where
//! they differ from process-exporter 0.7.10's.

pub mod config;
pub mod exporter;
pub mod flight;
pub mod group;
pub mod metrics;
pub mod options;
pub mod rollup;
pub mod sample;
pub mod server;
pub mod template;

use std::ffi::OsString;
use std::sync::Arc;

pub use exporter::Exporter;
pub use options::{Options, Parsed, UsageError};

/// Exit status of a usage or config error.
pub const EXIT_USAGE: i32 = 2;
/// Exit status of any other failure.
pub const EXIT_FAILURE: i32 = 3;

/// Blocks SIGHUP, SIGINT and SIGTERM in this thread (and the threads it starts), so that
/// [`signal_thread`] takes them with sigwait.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set they are given; pthread_sigmask
    // changes this thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for signals: SIGHUP reloads the config (a failed reload keeps the old one), SIGINT
/// and SIGTERM end the process.
fn signal_thread(ex: Arc<Exporter>, set: libc::sigset_t) {
    std::thread::spawn(move || loop {
        let mut sig = 0;
        // SAFETY: `set` is an initialised signal set and `sig` a valid out-parameter.
        let r = unsafe { libc::sigwait(&set, &mut sig) };
        if r != 0 {
            continue;
        }
        match sig {
            libc::SIGHUP => match ex.reload() {
                Ok(()) => eprintln!("taskdiag-exporter: config reloaded"),
                Err(e) => eprintln!("taskdiag-exporter: reload failed, old config kept: {e}"),
            },
            _ => std::process::exit(0),
        }
    });
}

/// The program: parses `args` (what follows the program's or subcommand's name), runs,
/// and returns the exit status. Errors are printed on standard error.
pub fn main(args: &[OsString]) -> i32 {
    let o = match options::parse(args) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help) => {
            print!("{}", options::MANUAL);
            return 0;
        }
        Ok(Parsed::Version) => {
            println!("taskdiag-exporter {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Err(e) => {
            eprintln!("taskdiag exporter: {e}\n(taskdiag exporter --help shows the options)");
            return EXIT_USAGE;
        }
    };
    let backend = match o.backend {
        Some(b) => b,
        None => match taskdiag_tools::snapshot::backend_from_env() {
            Ok(b) => b,
            Err(e) => {
                eprintln!("taskdiag exporter: {e}");
                return EXIT_USAGE;
            }
        },
    };
    let o = Options {
        backend: Some(backend),
        ..o
    };
    let set = block_signals();
    let ex = match Exporter::new(&o) {
        Ok(ex) => Arc::new(ex),
        Err(exporter::Error::Config(e)) => {
            eprintln!("taskdiag exporter: {e}");
            return EXIT_USAGE;
        }
        Err(e) => {
            eprintln!("taskdiag exporter: {e}");
            return EXIT_FAILURE;
        }
    };
    if let Some(delay) = o.once_to_stdout_delay {
        std::thread::sleep(delay);
        let c = ex.scrape();
        print!("{}", metrics::encode_text(&c.families));
        return 0;
    }
    let listener = match server::resolve(&o.listen_address).and_then(|a| server::bind(&a)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("taskdiag exporter: {e}");
            return EXIT_FAILURE;
        }
    };
    eprintln!(
        "taskdiag-exporter: listening on {} ({} backend)",
        listener
            .local_addr()
            .map_or_else(|_| o.listen_address.clone(), |a| a.to_string()),
        ex.backend_name()
    );
    signal_thread(Arc::clone(&ex), set);
    match server::serve(ex, listener, &o.telemetry_path, o.openmetrics) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("taskdiag exporter: {e}");
            EXIT_FAILURE
        }
    }
}
