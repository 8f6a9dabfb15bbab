//! The exporter's state between scrapes and one collection: a kept backend, the grouper
//! with its accumulators, the error counters; and the rule that scrapes arriving while a
//! collection runs wait for it and share its result instead of starting their own.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{Config, ConfigError};
use crate::flight::{lock, SingleFlight};
use crate::group::{GroupMetrics, GroupOptions, Grouper};
use crate::metrics::{self, Family, Kind, Shown};
use crate::options::Options;
use crate::sample::{ProcSample, Reader, Want};

/// Why the exporter could not start or collect.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The backend could not be opened or failed.
    #[error(transparent)]
    Source(#[from] taskdiag_tools::snapshot::Error),
}

/// What a collection produced: the families of one scrape.
#[derive(Debug, Clone)]
pub struct Collected {
    /// Every family, group families first.
    pub families: Vec<Family>,
}

struct State {
    reader: Reader,
    grouper: Grouper,
    shown: Shown,
    node_processes: bool,
    top: Option<usize>,
    /// Each group's CPU time at the last collection, for `top`.
    last_cpu: HashMap<String, u64>,
    scrape_errors: u64,
    read_errors: u64,
    partial_errors: u64,
    collections: u64,
    last_duration: Duration,
    debug: bool,
}

/// The exporter: collect with [`Exporter::scrape`], from any number of threads.
pub struct Exporter {
    state: Mutex<State>,
    flight: SingleFlight<Collected>,
    config_path: Option<PathBuf>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("config_path", &self.config_path)
            .finish()
    }
}

/// The config the options name: the file, `-procnames`, or the packaged default.
pub fn load_config(o: &Options) -> Result<Config, ConfigError> {
    if let Some(p) = &o.config_path {
        return Config::read(p);
    }
    if !o.procnames.is_empty() {
        let names: Vec<String> = o
            .procnames
            .iter()
            .map(|n| format!("'{}'", n.replace('\'', "''")))
            .collect();
        let yaml = format!(
            "process_names:\n  - name: '{{{{.Comm}}}}'\n    comm: [{}]\n",
            names.join(", ")
        );
        return Config::parse(&yaml, std::path::Path::new("-procnames"));
    }
    Ok(Config::every_process_by_comm())
}

impl Exporter {
    /// Opens the backend, reads the config and takes the first collection (processes
    /// running now count from now on, as in process-exporter).
    pub fn new(o: &Options) -> Result<Exporter, Error> {
        let config = load_config(o)?;
        let want = Want {
            cgroups: true,
            thread_io: o.threads,
            smaps: o.gather_smaps,
            wchan: o.wchan,
        };
        let reader = Reader::open(o.backend.unwrap_or(taskdiag::BackendKind::Auto), want)?;
        let mut reader_want = want;
        reader_want.cgroups = config.needs().cgroups;
        let grouper = Grouper::new(
            config,
            GroupOptions {
                children: o.children,
                recheck: o.recheck,
                remove_empty_groups: o.remove_empty_groups,
            },
        );
        let ex = Exporter {
            state: Mutex::new(State {
                reader,
                grouper,
                shown: Shown {
                    threads: o.threads,
                    smaps: o.gather_smaps,
                    wchan: o.wchan,
                },
                node_processes: o.node_processes,
                top: o.top,
                last_cpu: HashMap::new(),
                scrape_errors: 0,
                read_errors: 0,
                partial_errors: 0,
                collections: 0,
                last_duration: Duration::ZERO,
                debug: o.debug,
            }),
            flight: SingleFlight::default(),
            config_path: o.config_path.clone(),
        };
        {
            let mut st = lock(&ex.state);
            st.reader.set_want(reader_want);
            st.collect()?;
        }
        Ok(ex)
    }

    /// The backend answering, by name.
    pub fn backend_name(&self) -> &'static str {
        lock(&self.state).reader.backend_name()
    }

    /// Reads the config file again; on error the old config stays.
    pub fn reload(&self) -> Result<(), ConfigError> {
        let Some(p) = &self.config_path else {
            return Ok(());
        };
        let config = Config::read(p)?;
        let mut st = lock(&self.state);
        let mut want = st.reader.want();
        want.cgroups = config.needs().cgroups;
        st.reader.set_want(want);
        st.grouper.set_config(config);
        Ok(())
    }

    /// One scrape: a new collection, or the one running when the scrape came, shared.
    pub fn scrape(&self) -> Arc<Collected> {
        self.flight.run(|| lock(&self.state).scrape())
    }
}

impl State {
    /// The samples of one collection: every process, the names' details of new ones, the
    /// threads and rollups of those tracked.
    fn read(&mut self) -> Result<Vec<ProcSample>, Error> {
        let mut procs = self.reader.processes()?;
        let (unknown, wanted) = self.grouper.classify(&procs);
        self.reader.name_details(&mut procs, &unknown)?;
        // With node_processes, every multi-threaded process's threads, for their states.
        self.reader
            .complete(&mut procs, &wanted, self.node_processes)?;
        Ok(procs)
    }

    /// A collection: samples in, groups updated. Errors are counted, not returned, past the
    /// first collection.
    fn collect(
        &mut self,
    ) -> Result<(BTreeMap<String, GroupMetrics>, Option<NodeProcesses>), Error> {
        let t0 = Instant::now();
        // At the start times' resolution (Grouper::update).
        let tick = self.reader.start_time_resolution_ns();
        let now = taskdiag_tools::top::sys::boottime_ns() / tick * tick;
        // A kept backend that fails (a taskdiagd connection closed while idle) is opened
        // again, once.
        let procs = match self.read() {
            Ok(p) => p,
            Err(_) => {
                self.reader.reopen()?;
                self.read()?
            }
        };
        let node = self.node_processes;
        let node_fams = node.then(|| NodeProcesses::of(&procs));
        let n = procs.len();
        let (mut groups, partial) = self.grouper.update(procs, now);
        if let Some(n) = self.top {
            let cpu = |g: &GroupMetrics| g.counts.cpu_user_ns + g.counts.cpu_system_ns;
            let now_cpu: HashMap<String, u64> =
                groups.iter().map(|(k, g)| (k.clone(), cpu(g))).collect();
            let keep = top_groups(&now_cpu, &self.last_cpu, n);
            groups.retain(|k, _| keep.contains(k));
            self.last_cpu = now_cpu;
        }
        self.partial_errors += partial;
        self.collections += 1;
        self.last_duration = t0.elapsed();
        if self.debug {
            eprintln!(
                "taskdiag-exporter: collected {n} processes ({} tasks) via {} in {:.3} s",
                self.reader.tasks_scanned,
                self.reader.backend_name(),
                self.last_duration.as_secs_f64()
            );
        }
        Ok((groups, node_fams))
    }

    fn scrape(&mut self) -> Collected {
        let mut families = Vec::new();
        match self.collect() {
            Ok((groups, node)) => {
                families = metrics::group_families(&groups, self.shown);
                if let Some(n) = node {
                    families.extend(n.families());
                }
            }
            Err(e) => {
                self.scrape_errors += 1;
                eprintln!("taskdiag-exporter: error reading processes: {e}");
            }
        }
        families.extend(metrics::scrape_errors(
            self.scrape_errors,
            self.read_errors,
            self.partial_errors,
        ));
        families.extend(self.own_families());
        Collected { families }
    }

    fn own_families(&self) -> Vec<Family> {
        let one = |name, help, kind, v: f64| Family {
            name,
            help,
            kind,
            samples: vec![(vec![], v)],
        };
        vec![
            one(
                "taskdiag_exporter_collection_duration_seconds",
                "wall-clock time the last collection took",
                Kind::Gauge,
                self.last_duration.as_secs_f64(),
            ),
            one(
                "taskdiag_exporter_collections_total",
                "collections taken (concurrent scrapes share one)",
                Kind::Counter,
                self.collections as f64,
            ),
            Family {
                name: "taskdiag_exporter_info",
                help: "the taskdiag backend that reads the tasks",
                kind: Kind::Gauge,
                samples: vec![(
                    vec![("backend", self.reader.backend_name().to_string())],
                    1.0,
                )],
            },
            one(
                "taskdiag_exporter_tasks_scanned",
                "tasks (processes and threads) the last collection read",
                Kind::Gauge,
                self.reader.tasks_scanned as f64,
            ),
        ]
    }
}

/// The `n` groups whose CPU time grew the most since `last` (a group new since then counts
/// from 0), ties broken by name.
fn top_groups(
    now: &HashMap<String, u64>,
    last: &HashMap<String, u64>,
    n: usize,
) -> std::collections::HashSet<String> {
    let mut v: Vec<(u64, &String)> = now
        .iter()
        .map(|(k, c)| (c.saturating_sub(last.get(k).copied().unwrap_or(0)), k))
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    v.into_iter().take(n).map(|(_, k)| k.clone()).collect()
}

/// node_exporter's processes collector, from one collection of every process.
#[derive(Debug, Default)]
struct NodeProcesses {
    pids: u64,
    threads: u64,
    states: BTreeMap<char, u64>,
    thread_states: BTreeMap<char, u64>,
}

impl NodeProcesses {
    fn of(procs: &[ProcSample]) -> NodeProcesses {
        let mut n = NodeProcesses::default();
        for p in procs {
            n.pids += 1;
            n.threads += p.num_threads;
            let own = p.state;
            *n.states.entry(own).or_default() += 1;
            if p.threads.is_empty() {
                *n.thread_states.entry(own).or_default() += 1;
            } else {
                for t in &p.threads {
                    *n.thread_states.entry(t.state).or_default() += 1;
                }
            }
        }
        n
    }

    fn families(&self) -> Vec<Family> {
        let read = |path: &str| -> f64 {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0.0)
        };
        let one = |name, help, v: f64| Family {
            name,
            help,
            kind: Kind::Gauge,
            samples: vec![(vec![], v)],
        };
        let by = |name, help, label: &'static str, m: &BTreeMap<char, u64>| Family {
            name,
            help,
            kind: Kind::Gauge,
            samples: m
                .iter()
                .map(|(c, v)| (vec![(label, c.to_string())], *v as f64))
                .collect(),
        };
        vec![
            one(
                "node_processes_max_processes",
                "Number of max PIDs limit",
                read("/proc/sys/kernel/pid_max"),
            ),
            one(
                "node_processes_max_threads",
                "Limit of threads in the system",
                read("/proc/sys/kernel/threads-max"),
            ),
            one("node_processes_pids", "Number of PIDs", self.pids as f64),
            by(
                "node_processes_state",
                "Number of processes in each state.",
                "state",
                &self.states,
            ),
            one(
                "node_processes_threads",
                "Allocated threads in system",
                self.threads as f64,
            ),
            by(
                "node_processes_threads_state",
                "Number of threads in each state.",
                "thread_state",
                &self.thread_states,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_groups_are_those_whose_cpu_grew_most() {
        let m = |v: &[(&str, u64)]| -> HashMap<String, u64> {
            v.iter().map(|(k, c)| (k.to_string(), *c)).collect()
        };
        let last = m(&[("a", 100), ("b", 0), ("c", 50)]);
        let now = m(&[("a", 110), ("b", 30), ("c", 50), ("d", 20)]);
        let top = top_groups(&now, &last, 2);
        assert!(top.contains("b") && top.contains("d"), "{top:?}");
        let top = top_groups(&now, &last, 3);
        assert!(top.contains("a"));
        // Ties by name.
        let top = top_groups(&m(&[("x", 0), ("y", 0)]), &HashMap::new(), 1);
        assert!(top.contains("x"));
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::ProcAttrs;

    #[test]
    fn procnames_track_those_names_each_its_own_group() {
        let o = Options {
            procnames: vec!["nginx".into(), "it's".into()],
            ..Options::default()
        };
        let c = load_config(&o).unwrap();
        let a = |comm: &str| ProcAttrs {
            comm: comm.into(),
            ..ProcAttrs::default()
        };
        assert_eq!(c.match_and_name(&a("nginx")), Some("nginx".into()));
        assert_eq!(c.match_and_name(&a("it's")), Some("it's".into()));
        assert_eq!(c.match_and_name(&a("bash")), None);
        // Neither: every process with a command line, by name.
        let c = load_config(&Options::default()).unwrap();
        let mut p = a("sshd");
        p.cmdline = vec!["/usr/sbin/sshd".into()];
        assert_eq!(c.match_and_name(&p), Some("sshd".into()));
    }
}
