//! Reports of measured rows: a Markdown table (for docs/BENCHMARKS.md) or JSON, for one task
//! count or, for the scaling curves, several ([`Size`]).

use std::fmt::Write;

use crate::measure::RowResult;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Summary statistics of a row.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Median wall time, s.
    pub wall: f64,
    /// Fastest run, s.
    pub min: f64,
    /// Slowest run, s.
    pub max: f64,
    /// Median user CPU, s.
    pub user: f64,
    /// Median system CPU, s.
    pub sys: f64,
    /// Largest peak RSS, MiB.
    pub rss: Option<f64>,
}

/// Statistics of a row with samples.
pub fn stats(r: &RowResult) -> Option<Stats> {
    if r.samples.is_empty() {
        return None;
    }
    let w: Vec<f64> = r.samples.iter().map(|s| s.wall).collect();
    Some(Stats {
        wall: median(w.clone()),
        min: w.iter().copied().fold(f64::INFINITY, f64::min),
        max: w.iter().copied().fold(0.0, f64::max),
        user: median(r.samples.iter().map(|s| s.user).collect()),
        sys: median(r.samples.iter().map(|s| s.sys).collect()),
        rss: r.samples.iter().filter_map(|s| s.rss_mib).reduce(f64::max),
    })
}

/// `r`'s median wall time over that of the row keyed `base`, if both were measured.
fn ratio_to(rows: &[RowResult], r: &RowResult, base: &str) -> Option<f64> {
    let b = rows.iter().find(|x| x.row.key == base)?;
    Some(stats(r)?.wall / stats(b)?.wall)
}

fn ratio(rows: &[RowResult], r: &RowResult) -> Option<(f64, String)> {
    let base = r.row.baseline.as_ref()?;
    Some((ratio_to(rows, r, base)?, base.clone()))
}

/// Ratios to the further rows `r` is compared with ([`crate::measure::Row::also`]) that were
/// measured.
fn also_ratios(rows: &[RowResult], r: &RowResult) -> Vec<(f64, String)> {
    r.row
        .also
        .iter()
        .filter_map(|b| Some((ratio_to(rows, r, b)?, b.clone())))
        .collect()
}

/// The Markdown table.
pub fn markdown(rows: &[RowResult]) -> String {
    let mut s = String::from(
        "| row | command | wall median s | min | max | user s | sys s | peak RSS MiB | syscalls | kmalloc | kmem_cache_alloc | ratio |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let Some(st) = stats(r) else {
            let why = r.error.as_deref().unwrap_or("no runs");
            let _ = writeln!(
                s,
                "| {} | {} | {why} | | | | | | | | | |",
                r.row.key, r.row.label
            );
            continue;
        };
        let c = |f: fn(&crate::measure::Counts) -> u64| {
            r.counts
                .as_ref()
                .map_or("-".to_string(), |c| f(c).to_string())
        };
        let rat = ratio(rows, r)
            .into_iter()
            .chain(also_ratios(rows, r))
            .map(|(x, b)| format!("{x:.2}x {b}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rss = st.rss.map_or("-".to_string(), |m| format!("{m:.1}"));
        let _ = writeln!(
            s,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {rss} | {} | {} | {} | {rat} |",
            r.row.key,
            r.row.label,
            st.wall,
            st.min,
            st.max,
            st.user,
            st.sys,
            c(|c| c.syscalls),
            c(|c| c.kmalloc),
            c(|c| c.kmem_cache_alloc),
        );
    }
    s
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// The rows as a JSON document: `{"tasks":N,"rows":[{...}]}`.
pub fn json(rows: &[RowResult], tasks: usize) -> String {
    let mut s = format!("{{\"tasks\":{tasks},\"rows\":[");
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "{{\"key\":{},\"label\":{}",
            json_str(&r.row.key),
            json_str(&r.row.label)
        );
        if let Some(a) = &r.row.argv {
            let args: Vec<String> = a.iter().map(|x| json_str(x)).collect();
            let _ = write!(s, ",\"argv\":[{}]", args.join(","));
        }
        if let Some(st) = stats(r) {
            let _ = write!(
                s,
                ",\"wall_median_s\":{},\"wall_min_s\":{},\"wall_max_s\":{},\"user_s\":{},\"sys_s\":{},\"runs\":{}",
                num(st.wall),
                num(st.min),
                num(st.max),
                num(st.user),
                num(st.sys),
                r.samples.len()
            );
            if let Some(m) = st.rss {
                let _ = write!(s, ",\"peak_rss_mib\":{}", num(m));
            }
        }
        if let Some(c) = &r.counts {
            let _ = write!(
                s,
                ",\"syscalls\":{},\"kmalloc\":{},\"kmem_cache_alloc\":{}",
                c.syscalls, c.kmalloc, c.kmem_cache_alloc
            );
        }
        if let Some((x, b)) = ratio(rows, r) {
            let _ = write!(s, ",\"ratio\":{},\"baseline\":{}", num(x), json_str(&b));
        }
        let also: Vec<String> = also_ratios(rows, r)
            .iter()
            .map(|(x, b)| format!("{{\"ratio\":{},\"baseline\":{}}}", num(*x), json_str(b)))
            .collect();
        if !also.is_empty() {
            let _ = write!(s, ",\"also\":[{}]", also.join(","));
        }
        if let Some(e) = &r.error {
            let _ = write!(s, ",\"error\":{}", json_str(e));
        }
        s.push('}');
    }
    s.push_str("]}\n");
    s
}

/// The rows measured at one task count (one point of the scaling curves).
pub struct Size {
    /// Tasks asked for.
    pub tasks: usize,
    /// Processes in /proc during the run.
    pub in_proc: usize,
    /// The rows, in the same order at every size.
    pub rows: Vec<RowResult>,
}

fn label(r: &RowResult) -> String {
    format!("{} {}", r.row.key, r.row.label)
}

/// The scaling table: a row per measured row, a column per size, median wall times.
pub fn scale_markdown(sizes: &[Size], runs: usize, threads: usize) -> String {
    let mut s = format!(
        "Median wall time (s), {runs} run(s) per point, {threads} thread(s) per process.\n\n| row |"
    );
    for z in sizes {
        let _ = write!(s, " {} tasks |", z.tasks);
    }
    let _ = writeln!(s, "\n|---|{}", "---|".repeat(sizes.len()));
    let Some(first) = sizes.first() else {
        return s;
    };
    for (i, r) in first.rows.iter().enumerate() {
        let _ = write!(s, "| {} |", label(r));
        for z in sizes {
            match z.rows.get(i).and_then(stats) {
                Some(st) => {
                    let _ = write!(s, " {:.4} |", st.wall);
                }
                None => {
                    let why = z.rows.get(i).and_then(|r| r.error.as_deref());
                    let _ = write!(s, " {} |", why.unwrap_or("-"));
                }
            }
        }
        s.push('\n');
    }
    s
}

/// The scaling measurements as JSON: `{"threads":M,"sizes":[{"tasks":N,"result":{...}}]}`,
/// each result as [`json`] writes it.
pub fn scale_json(sizes: &[Size], threads: usize) -> String {
    let mut s = format!("{{\"threads\":{threads},\"sizes\":[");
    for (i, z) in sizes.iter().enumerate() {
        let _ = write!(
            s,
            "{}{{\"tasks\":{},\"result\":{}}}",
            if i > 0 { "," } else { "" },
            z.tasks,
            json(&z.rows, z.in_proc).trim_end()
        );
    }
    s.push_str("]}\n");
    s
}

/// The lines of the scaling chart: one per row, a (tasks, median wall) point per size.
pub fn scale_series(sizes: &[Size]) -> Vec<crate::svg::Series> {
    let Some(first) = sizes.first() else {
        return Vec::new();
    };
    (0..first.rows.len())
        .map(|i| crate::svg::Series {
            label: label(&first.rows[i]),
            points: sizes
                .iter()
                .filter_map(|z| Some((z.tasks as f64, stats(z.rows.get(i)?)?.wall)))
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{Row, Sample};

    fn row(key: &str, base: Option<&str>, walls: &[f64]) -> RowResult {
        RowResult {
            row: Row {
                key: key.into(),
                label: format!("row {key}"),
                argv: Some(vec!["true".into()]),
                baseline: base.map(Into::into),
                also: Vec::new(),
            },
            samples: walls
                .iter()
                .map(|&wall| Sample {
                    wall,
                    user: 0.0,
                    sys: wall,
                    rss_mib: Some(1.0),
                })
                .collect(),
            counts: None,
            error: None,
        }
    }

    #[test]
    fn medians_ratios_and_missing_tools() {
        let mut rows = vec![
            row("A", Some("B"), &[0.3, 0.1, 0.2]),
            row("B", None, &[0.8, 0.4, 0.6, 1.0]),
        ];
        rows.push(RowResult {
            error: Some("not installed".into()),
            samples: vec![],
            ..row("C", None, &[])
        });
        let st = stats(&rows[0]).unwrap();
        assert_eq!((st.wall, st.min, st.max), (0.2, 0.1, 0.3));
        assert_eq!(stats(&rows[1]).unwrap().wall, 0.7);
        let (x, b) = ratio(&rows, &rows[0]).unwrap();
        assert!((x - 0.2 / 0.7).abs() < 1e-12 && b == "B");
        let md = markdown(&rows);
        assert!(md.contains("| C | row C | not installed |"), "{md}");
        assert!(md.contains("0.29x B"), "{md}");
        let j = json(&rows, 3);
        assert!(
            j.starts_with("{\"tasks\":3,\"rows\":[{\"key\":\"A\""),
            "{j}"
        );
        assert!(j.contains("\"error\":\"not installed\""));
    }

    #[test]
    fn a_row_compared_with_more_rows_has_a_ratio_to_each_measured_one() {
        let mut a = row("A", Some("B"), &[0.1]);
        a.row.also = vec!["C".into(), "missing".into()];
        let rows = vec![a, row("B", None, &[0.4]), row("C", None, &[0.5])];
        let md = markdown(&rows);
        assert!(md.contains("| 0.25x B, 0.20x C |"), "{md}");
        let j = json(&rows, 3);
        assert!(
            j.contains(
                "\"ratio\":0.25,\"baseline\":\"B\",\"also\":[{\"ratio\":0.2,\"baseline\":\"C\"}]"
            ),
            "{j}"
        );
    }

    #[test]
    fn scaling_tables_have_a_column_per_size() {
        let sizes = vec![
            Size {
                tasks: 1000,
                in_proc: 1010,
                rows: vec![row("A", None, &[0.1]), row("B", None, &[0.2])],
            },
            Size {
                tasks: 10000,
                in_proc: 10010,
                rows: vec![row("A", None, &[1.0]), row("B", None, &[])],
            },
        ];
        let md = scale_markdown(&sizes, 1, 1);
        assert!(md.contains("| row | 1000 tasks | 10000 tasks |"), "{md}");
        assert!(md.contains("| A row A | 0.1000 | 1.0000 |"), "{md}");
        assert!(md.contains("| B row B | 0.2000 | - |"), "{md}");
        let j = scale_json(&sizes, 1);
        assert!(
            j.starts_with("{\"threads\":1,\"sizes\":[{\"tasks\":1000,\"result\":{\"tasks\":1010,"),
            "{j}"
        );
        assert!(j.ends_with("]}}]}\n"), "{j}");
        let series = scale_series(&sizes);
        assert_eq!(series.len(), 2);
        assert_eq!(series[0].points, vec![(1000.0, 0.1), (10000.0, 1.0)]);
        assert_eq!(series[1].points, vec![(1000.0, 0.2)]);
    }
}
