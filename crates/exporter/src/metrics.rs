//! The exposition: groups turned into metric families with process-exporter's names, labels
//! and help texts, and the families written in the Prometheus text format 0.0.4 or in
//! OpenMetrics 1.0.
//!
//! The 0.0.4 text is written here, in forty lines: the crate's 0.0.4 encoder appends `_total`
//! to every counter, which would rename process-exporter's `namedprocess_scrape_errors` (and
//! its two siblings), counters without that suffix that dashboards and alerts query by name.
//! OpenMetrics (served only with `-web.enable-openmetrics`) is written by the official
//! `prometheus-client` crate (a [`Collector`] that hands it this scrape's families as
//! constant metrics). An OpenMetrics counter's samples are named `<family>_total`, and
//! Prometheus stores them so: those three are written there as type `unknown`, whose sample
//! is named as its family, so that Prometheus stores the names process-exporter's text gives
//! it whichever format it negotiated.

use std::collections::BTreeMap;
use std::fmt::Write;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::group::GroupMetrics;

/// Counter or gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// One series: its labels (sorted by name when written) and value.
pub type Sample = (Vec<(&'static str, String)>, f64);

/// A metric family.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The name as the 0.0.4 text shows it (counters with their `_total`, where they have it).
    pub name: &'static str,
    /// The help text.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// The series.
    pub samples: Vec<Sample>,
}

/// `time.Time{}.Unix()` in Go: what process-exporter reports as the oldest start time of a
/// group with no process.
pub const GO_ZERO_TIME: i64 = -62_135_596_800;

/// Which optional families to write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shown {
    /// Per-thread-name families (`-threads`).
    pub threads: bool,
    /// The proportional memory types (`-gather-smaps`).
    pub smaps: bool,
    /// `threads_wchan` (`-wchan`).
    pub wchan: bool,
}

struct Builder {
    fams: BTreeMap<&'static str, Family>,
}

impl Builder {
    fn add(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: Kind,
        labels: Vec<(&'static str, String)>,
        v: f64,
    ) {
        self.fams
            .entry(name)
            .or_insert_with(|| Family {
                name,
                help,
                kind,
                samples: Vec::new(),
            })
            .samples
            .push((labels, v));
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// process-exporter's families for `groups`, sorted by name (the scrape-error counters
/// apart: [`scrape_errors`]).
pub fn group_families(groups: &BTreeMap<String, GroupMetrics>, shown: Shown) -> Vec<Family> {
    use Kind::{Counter, Gauge};
    let mut b = Builder {
        fams: BTreeMap::new(),
    };
    macro_rules! n {
        ($s:literal) => {
            concat!("namedprocess_namegroup_", $s)
        };
    }
    for (gname, g) in groups {
        let gl = || vec![("groupname", gname.clone())];
        let with = |k: &'static str, v: &str| vec![("groupname", gname.clone()), (k, v.into())];
        b.add(
            n!("num_procs"),
            "number of processes in this group",
            Gauge,
            gl(),
            g.procs as f64,
        );
        let mem = n!("memory_bytes");
        let mem_help = "number of bytes of memory in use";
        let m = &g.memory;
        let mut mems = vec![
            ("resident", m.resident),
            ("virtual", m.virtual_),
            ("swapped", m.swapped),
        ];
        if shown.smaps {
            mems.push(("proportionalResident", m.proportional_resident));
            mems.push(("proportionalSwapped", m.proportional_swapped));
        }
        for (memtype, v) in mems {
            b.add(mem, mem_help, Gauge, with("memtype", memtype), v as f64);
        }
        b.add(
            n!("oldest_start_time_seconds"),
            "start time in seconds since 1970/01/01 of oldest process in group",
            Gauge,
            gl(),
            g.oldest_start.unwrap_or(GO_ZERO_TIME) as f64,
        );
        b.add(
            n!("open_filedesc"),
            "number of open file descriptors for this group",
            Gauge,
            gl(),
            g.open_fds as f64,
        );
        b.add(
            n!("worst_fd_ratio"),
            "the worst (closest to 1) ratio between open fds and max fds among all procs in this group",
            Gauge,
            gl(),
            g.worst_fd_ratio,
        );
        let c = &g.counts;
        let cpu = n!("cpu_seconds_total");
        for (mode, ns) in [("user", c.cpu_user_ns), ("system", c.cpu_system_ns)] {
            let help = "Cpu user usage in seconds";
            b.add(cpu, help, Counter, with("mode", mode), secs(ns));
        }
        b.add(
            n!("read_bytes_total"),
            "number of bytes read by this group",
            Counter,
            gl(),
            c.read_bytes as f64,
        );
        b.add(
            n!("write_bytes_total"),
            "number of bytes written by this group",
            Counter,
            gl(),
            c.write_bytes as f64,
        );
        b.add(
            n!("major_page_faults_total"),
            "Major page faults",
            Counter,
            gl(),
            c.major_faults as f64,
        );
        b.add(
            n!("minor_page_faults_total"),
            "Minor page faults",
            Counter,
            gl(),
            c.minor_faults as f64,
        );
        let cs = n!("context_switches_total");
        for (kind, v) in [
            ("voluntary", c.ctx_voluntary),
            ("nonvoluntary", c.ctx_nonvoluntary),
        ] {
            let l = with("ctxswitchtype", kind);
            b.add(cs, "Context switches", Counter, l, v as f64);
        }
        b.add(
            n!("num_threads"),
            "Number of threads",
            Gauge,
            gl(),
            g.num_threads as f64,
        );
        let st = n!("states");
        let st_help = "Number of processes in states Running, Sleeping, Waiting, Zombie, or Other";
        let s = &g.states;
        for (name, v) in [
            ("Running", s.running),
            ("Sleeping", s.sleeping),
            ("Waiting", s.waiting),
            ("Zombie", s.zombie),
            ("Other", s.other),
        ] {
            b.add(st, st_help, Gauge, with("state", name), v as f64);
        }
        for (wchan, count) in g.wchans.iter().filter(|_| shown.wchan) {
            b.add(
                n!("threads_wchan"),
                "Number of threads in this group waiting on each wchan",
                Gauge,
                with("wchan", wchan),
                *count as f64,
            );
        }
        if shown.threads {
            for t in &g.threads {
                let tl = |extra: Option<(&'static str, &str)>| {
                    let mut v = vec![("groupname", gname.clone()), ("threadname", t.name.clone())];
                    if let Some((k, x)) = extra {
                        v.push((k, x.to_string()));
                    }
                    v
                };
                let c = &t.counts;
                b.add(
                    n!("thread_count"),
                    "Number of threads in this group with same threadname",
                    Gauge,
                    tl(None),
                    t.count as f64,
                );
                let tc = n!("thread_cpu_seconds_total");
                for (mode, ns) in [("user", c.cpu_user_ns), ("system", c.cpu_system_ns)] {
                    let help = "Cpu user/system usage in seconds";
                    b.add(tc, help, Counter, tl(Some(("mode", mode))), secs(ns));
                }
                let ti = n!("thread_io_bytes_total");
                for (mode, v) in [("read", c.read_bytes), ("write", c.write_bytes)] {
                    let help = "number of bytes read/written by these threads";
                    b.add(ti, help, Counter, tl(Some(("iomode", mode))), v as f64);
                }
                b.add(
                    n!("thread_major_page_faults_total"),
                    "Major page faults for these threads",
                    Counter,
                    tl(None),
                    c.major_faults as f64,
                );
                b.add(
                    n!("thread_minor_page_faults_total"),
                    "Minor page faults for these threads",
                    Counter,
                    tl(None),
                    c.minor_faults as f64,
                );
                let tcs = n!("thread_context_switches_total");
                for (kind, v) in [
                    ("voluntary", c.ctx_voluntary),
                    ("nonvoluntary", c.ctx_nonvoluntary),
                ] {
                    let help = "Context switches for these threads";
                    b.add(
                        tcs,
                        help,
                        Counter,
                        tl(Some(("ctxswitchtype", kind))),
                        v as f64,
                    );
                }
            }
        }
    }
    b.fams.into_values().collect()
}

/// process-exporter's three error counters.
pub fn scrape_errors(errors: u64, read_errors: u64, partial_errors: u64) -> Vec<Family> {
    let f = |name, help, v: u64| Family {
        name,
        help,
        kind: Kind::Counter,
        samples: vec![(vec![], v as f64)],
    };
    vec![
        f(
            "namedprocess_scrape_errors",
            "general scrape errors: no proc metrics collected during a cycle",
            errors,
        ),
        f(
            "namedprocess_scrape_partial_errors",
            "incremented each time a tracked proc's metrics collection fails partially, e.g. unreadable I/O stats",
            partial_errors,
        ),
        f(
            "namedprocess_scrape_procread_errors",
            "incremented each time a proc's metrics collection fails",
            read_errors,
        ),
    ]
}

fn sorted(labels: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut v = labels.to_vec();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

/// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
pub fn encode_text(fams: &[Family]) -> String {
    let mut out = String::with_capacity(fams.len() * 256);
    for f in fams {
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for (labels, v) in &f.samples {
            out.push_str(f.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, val)) in sorted(labels).iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label(val));
                }
                out.push('}');
            }
            out.push(' ');
            write_value(&mut out, *v);
            out.push('\n');
        }
    }
    out
}

fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The families of one scrape, for prometheus-client's OpenMetrics encoder.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            // The encoder appends `_total` to a counter's name: a counter named without it
            // (in the 0.0.4 text, as process-exporter names it) is an `unknown` here.
            let (name, t) = match (f.kind, f.name.strip_suffix("_total")) {
                (Kind::Counter, Some(family)) => (family, MetricType::Counter),
                (Kind::Counter, None) => (f.name, MetricType::Unknown),
                (Kind::Gauge, _) => (f.name, MetricType::Gauge),
            };
            let mut me = encoder.encode_descriptor(name, f.help, None, t)?;
            for (labels, v) in &f.samples {
                let labels = sorted(labels);
                let mut fe = me.encode_family(&labels)?;
                match t {
                    MetricType::Counter => fe.encode_counter::<NoLabelSet, f64, f64>(v, None)?,
                    _ => fe.encode_gauge(v)?,
                }
            }
        }
        Ok(())
    }
}

/// OpenMetrics 1.0 text, `# EOF` included.
pub fn encode_openmetrics(fams: Vec<Family>) -> Result<String, std::fmt::Error> {
    let mut reg = prometheus_client::registry::Registry::default();
    reg.register_collector(Box::new(Scrape(fams)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Counts;

    fn one_group() -> BTreeMap<String, GroupMetrics> {
        let mut g = GroupMetrics {
            procs: 2,
            num_threads: 3,
            counts: Counts {
                cpu_user_ns: 1_500_000_000,
                ..Counts::default()
            },
            ..GroupMetrics::default()
        };
        g.wchans.insert("do_wait".into(), 1);
        let mut m = BTreeMap::new();
        m.insert("a\"b".to_string(), g);
        m
    }

    #[test]
    fn the_text_format_has_process_exporters_names_and_escapes_labels() {
        let shown = Shown {
            wchan: true,
            ..Shown::default()
        };
        let mut fams = group_families(&one_group(), shown);
        fams.extend(scrape_errors(0, 0, 2));
        let t = encode_text(&fams);
        assert!(
            t.contains("# TYPE namedprocess_namegroup_cpu_seconds_total counter\n"),
            "{t}"
        );
        assert!(t.contains(
            "namedprocess_namegroup_cpu_seconds_total{groupname=\"a\\\"b\",mode=\"user\"} 1.5\n"
        ));
        assert!(t.contains("namedprocess_namegroup_num_procs{groupname=\"a\\\"b\"} 2\n"));
        assert!(t.contains(
            "namedprocess_namegroup_oldest_start_time_seconds{groupname=\"a\\\"b\"} -62135596800\n"
        ));
        assert!(t.contains(
            "namedprocess_namegroup_threads_wchan{groupname=\"a\\\"b\",wchan=\"do_wait\"} 1\n"
        ));
        assert!(t.contains("# TYPE namedprocess_scrape_partial_errors counter\nnamedprocess_scrape_partial_errors 2\n"));
        assert!(!t.contains("proportional"), "smaps off");
        assert!(!t.contains("thread_count"), "threads off");
    }

    #[test]
    fn openmetrics_is_written_by_prometheus_client() {
        let mut fams = group_families(
            &one_group(),
            Shown {
                threads: true,
                smaps: true,
                wchan: true,
            },
        );
        fams.extend(scrape_errors(1, 0, 0));
        let t = encode_openmetrics(fams).unwrap();
        assert!(t.ends_with("# EOF\n"), "{t}");
        assert!(
            t.contains("# TYPE namedprocess_namegroup_cpu_seconds counter\n"),
            "{t}"
        );
        assert!(t.contains("namedprocess_namegroup_cpu_seconds_total{groupname=\"a\\\"b\",mode=\"user\"} 1.5\n"), "{t}");
        // A counter without `_total` in the 0.0.4 text keeps its name: `unknown`, not
        // `counter` (whose sample would be `namedprocess_scrape_errors_total`).
        assert!(
            t.contains("# TYPE namedprocess_scrape_errors unknown\nnamedprocess_scrape_errors 1"),
            "{t}"
        );
        assert!(!t.contains("errors_total"), "{t}");
        assert!(t.contains("memtype=\"proportionalResident\""), "{t}");
    }
}
