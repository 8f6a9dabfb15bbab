//! A log-log line chart of wall time against task count, as a standalone SVG file (no
//! dependencies): one line per row, one point per measured size.

use std::fmt::Write;

/// One line of the chart.
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (tasks, seconds) points; non-positive values are skipped.
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// Renders the chart.
pub fn chart(title: &str, series: &[Series]) -> String {
    let (w, h, left, right, top, bottom) = (1000.0, 560.0, 80.0, 390.0, 50.0, 60.0);
    let pts = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.0 > 0.0 && p.1 > 0.0);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x.log10());
        x1 = x1.max(x.log10());
        y0 = y0.min(y.log10());
        y1 = y1.max(y.log10());
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let (x0, x1, y0, y1) = (
        x0.floor(),
        x1.ceil().max(x0.floor() + 1.0),
        y0.floor(),
        y1.ceil().max(y0.floor() + 1.0),
    );
    let px = |x: f64| left + (x.log10() - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| h - bottom - (y.log10() - y0) / (y1 - y0) * (h - top - bottom);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
         <text x=\"{}\" y=\"28\" font-size=\"16\" text-anchor=\"middle\">{}</text>",
        (w - right + left) / 2.0,
        esc(title)
    );
    for d in (x0 as i32)..=(x1 as i32) {
        let x = px(10f64.powi(d));
        let _ = write!(
            s,
            "<line x1=\"{x}\" y1=\"{top}\" x2=\"{x}\" y2=\"{}\" stroke=\"#ddd\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            h - bottom,
            h - bottom + 18.0,
            fmt_pow(d, false)
        );
    }
    for d in (y0 as i32)..=(y1 as i32) {
        let y = py(10f64.powi(d));
        let _ = write!(
            s,
            "<line x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            w - right,
            left - 6.0,
            y + 4.0,
            fmt_pow(d, true)
        );
    }
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">tasks</text>\
         <text x=\"18\" y=\"{}\" transform=\"rotate(-90 18 {})\" text-anchor=\"middle\">wall time</text>",
        (w - right + left) / 2.0,
        h - 16.0,
        (h - bottom + top) / 2.0,
        (h - bottom + top) / 2.0
    );
    for (i, se) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let p: Vec<String> = se
            .points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
            p.join(" ")
        );
        for q in &p {
            let (x, y) = q.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(s, "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{c}\"/>");
        }
        let ly = top + 10.0 + i as f64 * 20.0;
        let lx = w - right + 15.0;
        let _ = write!(
            s,
            "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"2\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            esc(&se.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_pow(d: i32, seconds: bool) -> String {
    let v = 10f64.powi(d);
    if seconds {
        if v >= 1.0 {
            format!("{v:.0} s")
        } else if v >= 0.001 {
            format!("{} ms", v * 1e3)
        } else {
            format!("{} µs", v * 1e6)
        }
    } else if v >= 1000.0 {
        format!("{}k", v / 1000.0)
    } else {
        format!("{v}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_a_line_per_series_and_escapes_labels() {
        let s = chart(
            "t",
            &[
                Series {
                    label: "a<b".into(),
                    points: vec![(1000.0, 0.01), (10000.0, 0.1)],
                },
                Series {
                    label: "c".into(),
                    points: vec![(1000.0, 0.002), (0.0, 1.0)],
                },
            ],
        );
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("a&lt;b"));
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
    }
}
