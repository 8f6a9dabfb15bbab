//! Reading a hand-written help text (`ps --help`, the exporter's manual, the text after
//! `taskdiag dump --help`'s options) as a man page's parts.
//!
//! The texts follow a few conventions, which are what this module relies on:
//!
//! * a line at column 0 in capitals (`OPTIONS`, `EXIT STATUS:`) starts a section; one of a
//!   few capitalised words ending in `:` (`Output:`, `Matching:`) a subsection;
//! * `Usage:` starts the synopsis (the rest of its line, and the indented lines after it);
//! * prose is written at the section's indentation without runs of spaces inside lines, and
//!   is refilled by the reader's `man`;
//! * tables (option lists in two columns, examples with aligned comments) have runs of
//!   spaces, or are indented further, and are shown as written;
//! * an option alone on its line (`-config.path FILE`) with its description indented a little
//!   further under it is a tagged paragraph.
//!
//! Nothing is dropped: a line that fits no rule is shown as written.

/// A part of a section, as the man page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// Prose, one paragraph, lines joined by spaces.
    Para(String),
    /// Lines shown as written (tables, examples), indented relative to the section's text.
    Pre(Vec<String>),
    /// An option (`tag`) and its description, as `.TP`.
    Tagged {
        /// The option as written (`-config.path FILE`).
        tag: String,
        /// Its description, lines joined by spaces.
        body: String,
    },
    /// A subheading (`Output:` in pgrep's help), without its colon.
    Sub(String),
}

/// A section of a help text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Its heading, without a trailing colon (`EXIT STATUS`).
    pub title: String,
    /// What it says.
    pub blocks: Vec<Block>,
}

/// A help text, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Help {
    /// The `Usage:` lines, trimmed.
    pub usage: Vec<String>,
    /// What comes before the first heading (besides the usage): the description.
    pub preamble: Vec<Block>,
    /// The sections, in order.
    pub sections: Vec<Section>,
}

impl Help {
    /// Removes and returns the section titled `title`, if there is one.
    pub fn take(&mut self, title: &str) -> Option<Section> {
        let i = self.sections.iter().position(|s| s.title == title)?;
        Some(self.sections.remove(i))
    }
}

/// Columns of indentation of `line`.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// A run of two spaces after the line's first word: the mark of a table or an aligned
/// comment, which refilling would destroy.
fn has_gap(line: &str) -> bool {
    line.trim().contains("  ")
}

/// `OPTIONS`, `EXIT STATUS:`, `PROCESS SELECTION BY LIST`: capitals at column 0.
fn is_heading(line: &str) -> bool {
    if indent(line) != 0 {
        return false;
    }
    let t = line.strip_suffix(':').unwrap_or(line);
    t.chars().filter(|c| c.is_ascii_uppercase()).count() >= 2
        && t.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || " /-(),".contains(c))
}

/// `Output:`, `Matching:`: at most three words, capitalised, ending in a colon.
fn is_subheading(line: &str) -> bool {
    let Some(t) = line.strip_suffix(':') else {
        return false;
    };
    indent(line) == 0
        && t.split(' ').count() <= 3
        && t.starts_with(|c: char| c.is_ascii_uppercase())
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == ' ')
}

/// Reads `text`.
pub fn parse(text: &str) -> Help {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let mut help = Help::default();
    let mut body: Vec<&str> = Vec::new();
    let mut title: Option<String> = None;
    let mut i = 0;
    // Ends the current section (or the preamble) with what it collected.
    let flush = |help: &mut Help, title: &mut Option<String>, body: &mut Vec<&str>| {
        let exact = title
            .as_deref()
            .is_some_and(|t| matches!(t, "EXAMPLES" | "SYNOPSIS"));
        let blocks = blocks(body, exact);
        match title.take() {
            Some(t) => help.sections.push(Section { title: t, blocks }),
            None => help.preamble.extend(blocks),
        }
        body.clear();
    };
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if let Some(rest) = line.strip_prefix("Usage:") {
            if !rest.trim().is_empty() {
                help.usage.push(rest.trim().to_string());
            }
            while i < lines.len() && !lines[i].is_empty() && indent(lines[i]) > 0 {
                help.usage.push(lines[i].trim().to_string());
                i += 1;
            }
        } else if is_heading(line) {
            flush(&mut help, &mut title, &mut body);
            title = Some(line.strip_suffix(':').unwrap_or(line).to_string());
        } else {
            body.push(line);
        }
    }
    flush(&mut help, &mut title, &mut body);
    help
}

/// The blocks of a section's lines; `exact`: every line as written (examples).
fn blocks(lines: &[&str], exact: bool) -> Vec<Block> {
    let base = lines
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    let at = |i: usize| -> Option<(usize, &str)> {
        lines
            .get(i)
            .filter(|l| !l.is_empty())
            .map(|l| (indent(l) - base, &l[base..]))
    };
    // An option alone on its line, its description under it a little further in.
    let tag_at = |i: usize| -> bool {
        matches!(at(i), Some((0, l)) if l.starts_with('-') && !has_gap(l))
            && matches!(at(i + 1), Some((d, _)) if (1..=8).contains(&d))
    };
    let mut out = Vec::new();
    let mut pre: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some((depth, line)) = at(i) else {
            if !pre.is_empty() {
                out.push(Block::Pre(std::mem::take(&mut pre)));
            }
            i += 1;
            continue;
        };
        if exact {
            pre.push(format!("{}{}", " ".repeat(depth), line.trim_start()));
            i += 1;
            continue;
        }
        if depth == 0 && is_subheading(line) {
            if !pre.is_empty() {
                out.push(Block::Pre(std::mem::take(&mut pre)));
            }
            out.push(Block::Sub(line.trim_end_matches(':').to_string()));
            i += 1;
        } else if tag_at(i) {
            if !pre.is_empty() {
                out.push(Block::Pre(std::mem::take(&mut pre)));
            }
            let tag = line.to_string();
            i += 1;
            let mut body = Vec::new();
            while let Some((_, l)) = at(i).filter(|&(d, _)| d > 0) {
                body.push(l.trim());
                i += 1;
            }
            out.push(Block::Tagged {
                tag,
                body: body.join(" "),
            });
        } else if depth == 0 && !has_gap(line) && pre.is_empty() {
            let mut para = vec![line.trim()];
            i += 1;
            while let Some((0, l)) = at(i) {
                if has_gap(l) || tag_at(i) || is_subheading(l) {
                    break;
                }
                para.push(l.trim());
                i += 1;
            }
            out.push(Block::Para(para.join(" ")));
        } else {
            pre.push(format!("{}{}", " ".repeat(depth), line.trim_start()));
            i += 1;
        }
    }
    if !pre.is_empty() {
        out.push(Block::Pre(pre));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_prose_tables_and_tags_are_told_apart() {
        let h = parse(
            "Usage: taskdiag ps [options]
       ps -V

Reports processes,
as procps does.

SIMPLE SELECTION
  -A, -e            all processes
  -a                all with a terminal
                    (continued)

OPTIONS
    Flags are Go's:
    -name value.

    -config.path FILE
        The YAML config,
        parsed.
    -recheck
        Again.

MORE
Output:
 -d, --delimiter <s>  between ids

EXAMPLES:
  taskdiag dump --groups base
  taskdiag dump --pid 1
",
        );
        assert_eq!(h.usage, ["taskdiag ps [options]", "ps -V"]);
        assert_eq!(
            h.preamble,
            [Block::Para("Reports processes, as procps does.".into())]
        );
        let titles: Vec<&str> = h.sections.iter().map(|s| s.title.as_str()).collect();
        assert_eq!(titles, ["SIMPLE SELECTION", "OPTIONS", "MORE", "EXAMPLES"]);
        assert_eq!(
            h.sections[0].blocks,
            [Block::Pre(vec![
                "-A, -e            all processes".into(),
                "-a                all with a terminal".into(),
                "                  (continued)".into(),
            ])]
        );
        assert_eq!(
            h.sections[1].blocks,
            [
                Block::Para("Flags are Go's: -name value.".into()),
                Block::Tagged {
                    tag: "-config.path FILE".into(),
                    body: "The YAML config, parsed.".into()
                },
                Block::Tagged {
                    tag: "-recheck".into(),
                    body: "Again.".into()
                },
            ]
        );
        assert_eq!(
            h.sections[2].blocks,
            [
                Block::Sub("Output".into()),
                Block::Pre(vec![" -d, --delimiter <s>  between ids".into()]),
            ]
        );
        // Examples are commands: never refilled, even without aligned comments.
        assert_eq!(
            h.sections[3].blocks,
            [Block::Pre(vec![
                "taskdiag dump --groups base".into(),
                "taskdiag dump --pid 1".into(),
            ])]
        );
    }

    #[test]
    fn headings_are_capitals_at_column_zero() {
        assert!(is_heading("EXIT STATUS:"));
        assert!(is_heading("PROCESS SELECTION BY LIST"));
        assert!(!is_heading("  OPTIONS"));
        assert!(!is_heading("PID      task id"));
        assert!(is_subheading("Matching:"));
        assert!(!is_subheading("Exit status: 0 success"));
    }
}
