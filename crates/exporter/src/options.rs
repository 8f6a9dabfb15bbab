//! The command line, parsed as Go's flag package parses process-exporter's: `-name`,
//! `--name`, `-name=value`, `-name value` (not for booleans, which take `-name=false`), and
//! the manual page `--help` prints.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use taskdiag::BackendKind;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `-config.path`: the YAML config; without it every process with a command line is
    /// grouped by its name (process-exporter's packaged config).
    pub config_path: Option<PathBuf>,
    /// `-procnames`: a list of task names, each its own group.
    pub procnames: Vec<String>,
    /// `-children`.
    pub children: bool,
    /// `-threads`.
    pub threads: bool,
    /// `-gather-smaps`.
    pub gather_smaps: bool,
    /// `-recheck`.
    pub recheck: bool,
    /// `-wchan`: `namedprocess_namegroup_threads_wchan` (taskdiag's; default true).
    pub wchan: bool,
    /// `-remove-empty-groups`.
    pub remove_empty_groups: bool,
    /// `-web.listen-address`.
    pub listen_address: String,
    /// `-web.telemetry-path`.
    pub telemetry_path: String,
    /// `-web.enable-openmetrics` (taskdiag's; default false): answer OpenMetrics to a scraper
    /// that prefers it. Without it every scrape gets the 0.0.4 text, as from
    /// process-exporter, whatever its Accept header asks for.
    pub openmetrics: bool,
    /// `-once-to-stdout-delay`: print one scrape to standard output after this long, exit.
    pub once_to_stdout_delay: Option<Duration>,
    /// `-backend`; `None`: `$TASKDIAG_BACKEND`, else auto.
    pub backend: Option<BackendKind>,
    /// `-node-processes`: node_exporter's processes collector's families too.
    pub node_processes: bool,
    /// `-top`: only the N groups whose CPU time grew the most since the last collection.
    pub top: Option<usize>,
    /// `-debug`: log every collection.
    pub debug: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            config_path: None,
            procnames: Vec::new(),
            children: true,
            threads: true,
            gather_smaps: true,
            recheck: false,
            wchan: true,
            remove_empty_groups: false,
            listen_address: ":9256".into(),
            telemetry_path: "/metrics".into(),
            openmetrics: false,
            once_to_stdout_delay: None,
            backend: None,
            node_processes: false,
            top: None,
            debug: false,
        }
    }
}

/// What parsing decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Run with these options.
    Run(Options),
    /// Print the manual (`-h`, `-help`, `--help`, `-man`).
    Help,
    /// Print the version.
    Version,
}

/// A command line that cannot be followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn parse_bool(name: &str, v: &str) -> Result<bool, UsageError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(UsageError(format!(
            "invalid boolean value {v:?} for -{name}: parse error"
        ))),
    }
}

/// Parses a Go duration (`300ms`, `1.5s`, `2m30s`, `0`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// The boolean flags the parser accepts (`-name`, `-name=false`); with [`VALUE_FLAGS`], what
/// shell completions offer (those the [`MANUAL`] describes).
pub const BOOL_FLAGS: &[&str] = &[
    "children",
    "threads",
    "gather-smaps",
    "recheck",
    "wchan",
    "remove-empty-groups",
    "web.enable-openmetrics",
    "node-processes",
    "debug",
    "version",
    "man",
    "help",
    "h",
];

/// The flags that take a value (`-name value`, `-name=value`), process-exporter's own included
/// where taskdiag refuses them with a reason (`-procfs`).
pub const VALUE_FLAGS: &[&str] = &[
    "config.path",
    "procnames",
    "namemapping",
    "procfs",
    "web.listen-address",
    "web.telemetry-path",
    "web.config.file",
    "once-to-stdout-delay",
    "recheck-with-time-limit",
    "backend",
    "top",
];

/// Parses the arguments after the program's name.
pub fn parse(args: &[OsString]) -> Result<Parsed, UsageError> {
    let mut o = Options::default();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i]
            .to_str()
            .ok_or_else(|| UsageError(format!("argument {:?} is not UTF-8", args[i])))?;
        i += 1;
        if arg == "--" {
            if i < args.len() {
                return Err(UsageError(format!(
                    "unexpected argument {:?} (the exporter takes options only)",
                    args[i]
                )));
            }
            break;
        }
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(UsageError(format!(
                "unexpected argument {arg:?} (the exporter takes options only)"
            )));
        };
        if flag.is_empty() || flag.starts_with('-') || flag.starts_with('=') {
            return Err(UsageError(format!("bad flag syntax: {arg}")));
        }
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (flag, None),
        };
        if BOOL_FLAGS.contains(&name) {
            let v = match inline {
                Some(v) => parse_bool(name, v)?,
                None => true,
            };
            match name {
                "children" => o.children = v,
                "threads" => o.threads = v,
                "gather-smaps" => o.gather_smaps = v,
                "recheck" => o.recheck = v,
                "wchan" => o.wchan = v,
                "remove-empty-groups" => o.remove_empty_groups = v,
                "web.enable-openmetrics" => o.openmetrics = v,
                "node-processes" => o.node_processes = v,
                "debug" => o.debug = v,
                "version" if v => return Ok(Parsed::Version),
                "man" | "help" | "h" if v => return Ok(Parsed::Help),
                _ => {}
            }
            continue;
        }
        if !VALUE_FLAGS.contains(&name) {
            return Err(UsageError(format!(
                "flag provided but not defined: -{name}"
            )));
        }
        let value = match inline {
            Some(v) => v.to_string(),
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| UsageError(format!("flag needs an argument: -{name}")))?;
                i += 1;
                v.to_str()
                    .ok_or_else(|| UsageError(format!("the value of -{name} is not UTF-8")))?
                    .to_string()
            }
        };
        match name {
            "config.path" => o.config_path = (!value.is_empty()).then(|| PathBuf::from(&value)),
            "procnames" => {
                o.procnames = value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            }
            "namemapping" if value.is_empty() => {}
            "namemapping" => {
                return Err(UsageError(
                    "-namemapping is not supported: write a config with cmdline captures \
                     (name: '{{.Matches.NAME}}') and pass it with -config.path"
                        .into(),
                ))
            }
            "procfs" if value == "/proc" => {}
            "procfs" => {
                return Err(UsageError(format!(
                    "-procfs {value}: only /proc is supported (taskdiag reads the tasks of \
                     this process's own /proc and pid namespace)"
                )))
            }
            "web.listen-address" => o.listen_address = value,
            "web.telemetry-path" => {
                if !value.starts_with('/') {
                    return Err(UsageError(format!(
                        "-web.telemetry-path {value:?}: must start with /"
                    )));
                }
                o.telemetry_path = value
            }
            "web.config.file" if value.is_empty() => {}
            "web.config.file" => {
                return Err(UsageError(
                    "-web.config.file (TLS, basic auth) is not supported: put a reverse proxy \
                     in front, or listen on 127.0.0.1"
                        .into(),
                ))
            }
            "once-to-stdout-delay" => {
                let d = parse_duration(&value).ok_or_else(|| {
                    UsageError(format!(
                        "invalid value {value:?} for -once-to-stdout-delay: a duration such as \
                         500ms or 2s"
                    ))
                })?;
                o.once_to_stdout_delay = (!d.is_zero()).then_some(d);
            }
            "recheck-with-time-limit" => {
                return Err(UsageError(
                    "-recheck-with-time-limit (process-exporter 0.8) is not supported; -recheck \
                     is"
                    .into(),
                ))
            }
            "top" => {
                let n: usize = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    UsageError(format!("invalid value {value:?} for -top: a count above 0"))
                })?;
                o.top = Some(n);
            }
            "backend" => {
                o.backend = Some(value.parse().map_err(|e| {
                    UsageError(format!("invalid value {value:?} for -backend: {e}"))
                })?)
            }
            _ => {
                return Err(UsageError(format!(
                    "flag provided but not defined: -{name}"
                )))
            }
        }
    }
    if o.config_path.is_some() && !o.procnames.is_empty() {
        return Err(UsageError(
            "-config.path cannot be used with -procnames".into(),
        ));
    }
    Ok(Parsed::Run(o))
}

/// The manual page.
pub const MANUAL: &str = "\
NAME
    taskdiag exporter - a Prometheus exporter of process groups, compatible with
    process-exporter

SYNOPSIS
    taskdiag exporter [-config.path FILE] [-web.listen-address ADDR] [options]
    taskdiag-exporter [options]

DESCRIPTION
    Serves /metrics over HTTP (default :9256) with process-exporter's metrics: every
    process is named into a group by the first rule of the config that matches it (or
    joins the group of its nearest tracked ancestor), and each group's CPU time, I/O,
    page faults, context switches, memory, descriptors, threads, states and wait channels
    are reported as namedprocess_namegroup_* series labelled groupname. Dashboards and
    alerts written for process-exporter work unchanged.

    Each collection is one batched taskdiag dump of every process (through BPF when run
    as root, through taskdiagd when run as another user, else /proc), plus the command
    lines of processes not seen before and the threads of multi-threaded ones, not a walk
    of seven files per process. Run as an unprivileged user through taskdiagd, it sees what
    that user's /proc shows: other users' I/O counters and descriptors stay hidden, as
    they are in /proc.

    Scrapes that arrive while a collection runs share it. Counters never go down: a
    group keeps what its processes did when they exit. A process already running at
    the exporter's start counts from then on; one started later counts whole.

    The response is the Prometheus text format 0.0.4, whatever the scraper's Accept
    header asks for, as process-exporter answers: Prometheus then stores the same series
    names (namedprocess_scrape_errors, not _total) and the same metadata. With
    -web.enable-openmetrics, OpenMetrics 1.0 is answered when the Accept header prefers
    it (Prometheus's does by default).

OPTIONS
    Flags are written as process-exporter takes them: -name, --name, -name=value or
    -name value; booleans are turned off with -name=false.

    -config.path FILE
        The YAML config (below). Without it, every process with a command line is
        grouped by its name, as process-exporter's packaged config does.
    -procnames NAME,...
        Instead of a config: track processes whose name is one of these, one group
        each.
    -children=BOOL (default true)
        A process no rule matches joins the group of its nearest tracked ancestor.
    -threads=BOOL (default true)
        Also report per-thread-name series (namedprocess_namegroup_thread_*).
    -gather-smaps=BOOL (default true)
        Also report proportionalResident and proportionalSwapped memory, read from
        /proc/PID/smaps_rollup of each tracked process (a page-table walk each): in
        the scrape for a process new or changed in size or faults, else 30-60 s after
        its last read by a background thread at nice 19, the scrapes keeping the last
        value meanwhile.
    -wchan=BOOL (default true)
        Report namedprocess_namegroup_threads_wchan. Reading every task's wait channel
        (an unwind of each waiting task's kernel stack) is the costliest part of a
        dump; -wchan=false leaves it out.
    -recheck
        Try processes that matched no rule again at every collection (by default a
        process is named once, when first seen).
    -remove-empty-groups
        Forget a group when its last process exits (its counters start again at 0 if
        it comes back). By default an empty group stays, counters kept, gauges 0.
    -web.listen-address ADDR (default :9256)
        Where to listen: HOST:PORT, or :PORT for every address.
    -web.telemetry-path PATH (default /metrics)
        The metrics path. / shows a small page; other paths are 404.
    -web.enable-openmetrics
        Answer OpenMetrics 1.0 to a scraper whose Accept header prefers
        application/openmetrics-text (by default every scrape gets the 0.0.4 text, as
        from process-exporter). The series names Prometheus stores stay
        process-exporter's: the scrape-error counters, which have no _total, are typed
        unknown there. What changes is the metadata: counter families are named without
        _total, those three are of type unknown.
    -once-to-stdout-delay DURATION
        Do not listen: collect, wait this long (500ms, 2s, 1m), print one scrape in the
        text format to standard output and exit.
    -backend auto|bpf|daemon|procfs (default auto, or $TASKDIAG_BACKEND)
        Which taskdiag backend reads the tasks.
    -node-processes
        Also report node_exporter's processes collector (node_processes_pids, _threads,
        _state, _threads_state, _max_processes, _max_threads), for hosts that keep that
        collector off because of its cost.
    -top N
        Report only the N groups whose CPU time grew the most since the previous
        collection (ties by name); the others are left out of that scrape, their
        accumulators kept. Bounds the series of configs that name many groups.
    -debug
        Log each collection (tasks, groups, time) on standard error.
    -version
        Print the version and exit.
    -h, -help, --help, -man
        Print this manual and exit.

CONFIGURATION
    process-exporter's YAML: a list of rules under process_names; the first rule that
    matches a process names its group. Within a rule every matcher given must match.

        process_names:
          - name: \"{{.Comm}}\"              # the group name, a template
            comm: [bash, zsh]               # the task name is one of these
          - exe: [/usr/bin/python3, node]   # argv[0]; without a slash its base name
          - name: \"{{.ExeBase}}:{{.Matches.cfg}}\"
            cmdline: ['-c (?P<cfg>\\S+)']    # regexps over the arguments joined by spaces
          - name: \"{{.Matches.unit}}\"
            cgroup: ['/(?P<unit>[^/]+)\\.service$']   # regexps over the cgroup v2 path

    Template fields: .Comm .ExeBase .ExeFull .Username .PID .StartTime .Matches
    (.Matches.NAME, index .Matches \"NAME\") .Cgroups, and .Cgroup (the cgroup v2
    path). The default name is {{.ExeBase}}. .PID and .StartTime give every process
    its own group: series without bound, use them only where processes are few (or
    with -top). A config error names the file, line, column and field, and is fatal
    at start; unknown keys are errors.

METRICS
    namedprocess_namegroup_num_procs, _cpu_seconds_total{mode}, _read_bytes_total,
    _write_bytes_total, _major_page_faults_total, _minor_page_faults_total,
    _context_switches_total{ctxswitchtype}, _memory_bytes{memtype}, _open_filedesc,
    _worst_fd_ratio, _oldest_start_time_seconds, _num_threads, _states{state},
    _threads_wchan{wchan}, and with -threads _thread_count, _thread_cpu_seconds_total,
    _thread_io_bytes_total{iomode}, _thread_major_page_faults_total,
    _thread_minor_page_faults_total, _thread_context_switches_total {threadname};
    namedprocess_scrape_errors, _procread_errors, _partial_errors; and about the
    exporter: taskdiag_exporter_collection_duration_seconds,
    taskdiag_exporter_tasks_scanned, taskdiag_exporter_collections_total,
    taskdiag_exporter_info{backend}. No series carries a pid unless a name template
    asks for one. docs/EXPORTER.md in the source describes each and where taskdiag
    differs from process-exporter.

SIGNALS
    SIGHUP reads the config again; a config that fails keeps the old one (the error is
    logged). Processes already named keep their groups. SIGTERM and SIGINT stop the
    exporter.

EXIT STATUS
    0 success (or stopped by a signal), 2 usage or config error, 3 other failure (the
    address cannot be bound, no backend can be opened).

EXAMPLES
    taskdiag exporter -config.path /etc/taskdiag/exporter.yml
    taskdiag exporter -web.listen-address 127.0.0.1:9256 -threads=false
    taskdiag exporter -once-to-stdout-delay 2s | grep cpu_seconds
    taskdiag exporter -web.enable-openmetrics &
    curl -H 'Accept: application/openmetrics-text' localhost:9256/metrics

SEE ALSO
    process-exporter(1), prometheus(1), taskdiagd(8); contrib/taskdiag-exporter.service
";

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Parsed, UsageError> {
        let v: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&v)
    }

    fn run(args: &[&str]) -> Options {
        match p(args).unwrap() {
            Parsed::Run(o) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn go_flag_syntax_is_accepted() {
        let o = run(&[
            "-config.path",
            "/etc/x.yml",
            "--threads=false",
            "-children=0",
            "-recheck",
            "-web.listen-address=127.0.0.1:1",
            "-once-to-stdout-delay",
            "1.5s",
        ]);
        assert_eq!(o.config_path, Some(PathBuf::from("/etc/x.yml")));
        assert!(!o.threads && !o.children && o.recheck && o.gather_smaps);
        assert_eq!(o.listen_address, "127.0.0.1:1");
        assert_eq!(o.once_to_stdout_delay, Some(Duration::from_millis(1500)));
        assert_eq!(run(&[]), Options::default());
        assert_eq!(p(&["--help"]).unwrap(), Parsed::Help);
        assert_eq!(p(&["-man"]).unwrap(), Parsed::Help);
        assert_eq!(p(&["-version"]).unwrap(), Parsed::Version);
    }

    #[test]
    fn bad_command_lines_say_why() {
        let e = |args: &[&str]| p(args).unwrap_err().0;
        assert_eq!(e(&["-nope"]), "flag provided but not defined: -nope");
        assert_eq!(e(&["-config.path"]), "flag needs an argument: -config.path");
        assert!(e(&["-threads=maybe"]).contains("invalid boolean value"));
        assert!(e(&["-once-to-stdout-delay", "soon"]).contains("duration"));
        assert!(e(&["stray"]).contains("unexpected argument"));
        assert!(e(&["-procfs", "/host/proc"]).contains("only /proc"));
        assert!(e(&["-backend", "x"]).contains("-backend"));
        assert!(e(&["-top=0"]).contains("-top"));
        assert_eq!(run(&["-top", "3"]).top, Some(3));
        assert!(run(&["-web.enable-openmetrics"]).openmetrics);
        assert!(!run(&["-web.enable-openmetrics=false"]).openmetrics);
        assert!(e(&["-config.path=a", "-procnames=b"]).contains("cannot be used"));
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration(""), None);
    }
}
