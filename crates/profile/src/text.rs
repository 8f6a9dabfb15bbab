//! The text outputs: folded stacks (flamegraph.pl's and inferno's input) and the state table
//! (0x.tools psn's: samples and average active threads by state, system call, wchan, name).

use std::io::{self, Write};

use crate::model::{FrameKind, Profile};

/// A frame name as one folded field: `;` separates frames and the count ends the line, so a
/// `;` inside a name becomes `:` and line breaks become spaces.
fn folded_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// Writes one line per stack, `root;…;leaf COUNT`, root first (the state, then the thread);
/// kernel frames carry perf's `_[k]` suffix.
pub fn write_folded(profile: &Profile, out: &mut impl Write) -> io::Result<()> {
    for s in &profile.stacks {
        let mut line = String::new();
        for (i, f) in s.frames.iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.push_str(&folded_name(&f.name));
            if f.kind == FrameKind::Kernel {
                line.push_str("_[k]");
            }
        }
        writeln!(out, "{line} {}", s.count)?;
    }
    Ok(())
}

/// Writes the state table, most samples first: samples, average active threads (samples over
/// rate × duration), state, system call, wchan, thread name.
pub fn write_table(profile: &Profile, out: &mut impl Write) -> io::Result<()> {
    let secs = profile.duration_ns as f64 / 1e9;
    let per = profile.hz as f64 * secs;
    let mut rows: Vec<_> = profile.states.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let w_sys = rows
        .iter()
        .map(|r| r.0.syscall.len())
        .max()
        .unwrap_or(0)
        .max(7);
    let w_wchan = rows
        .iter()
        .map(|r| r.0.wchan.len())
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        out,
        "{:>8} {:>11} {:<9} {:<w_sys$} {:<w_wchan$} COMM",
        "SAMPLES", "AVG_THREADS", "STATE", "SYSCALL", "WCHAN"
    )?;
    for (k, n) in rows {
        let avg = if per > 0.0 { *n as f64 / per } else { 0.0 };
        writeln!(
            out,
            "{n:>8} {avg:>11.2} {:<9} {:<w_sys$} {:<w_wchan$} {}",
            k.state, k.syscall, k.wchan, k.comm
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, Stack, StateKey};

    fn frame(kind: FrameKind, name: &str) -> Frame {
        Frame {
            kind,
            name: name.into(),
            module: None,
        }
    }

    #[test]
    fn folded_lines_are_root_first_with_kernel_suffixes_and_safe_names() {
        let p = Profile {
            stacks: vec![Stack {
                frames: vec![
                    frame(FrameKind::State, "[sleeping]"),
                    frame(FrameKind::Thread, "a;b\nc"),
                    frame(FrameKind::User, "main"),
                    frame(FrameKind::Kernel, "schedule"),
                ],
                count: 7,
            }],
            ..Default::default()
        };
        let mut v = Vec::new();
        write_folded(&p, &mut v).expect("write");
        assert_eq!(
            String::from_utf8(v).expect("utf8"),
            "[sleeping];a:b c;main;schedule_[k] 7\n"
        );
    }

    #[test]
    fn the_table_puts_most_samples_first_with_average_threads() {
        let key = |s: &str, n: &str| StateKey {
            state: s.into(),
            syscall: "read".into(),
            wchan: "pipe_read".into(),
            comm: n.into(),
        };
        let p = Profile {
            states: vec![(key("sleeping", "a"), 10), (key("running", "b"), 40)],
            hz: 10,
            duration_ns: 2_000_000_000,
            ..Default::default()
        };
        let mut v = Vec::new();
        write_table(&p, &mut v).expect("write");
        let t = String::from_utf8(v).expect("utf8");
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with(" SAMPLES AVG_THREADS STATE"));
        assert!(lines[1].contains("40") && lines[1].contains("2.00") && lines[1].ends_with(" b"));
        assert!(lines[2].contains("0.50") && lines[2].ends_with(" a"));
    }
}
