//! Group names from templates: the subset of Go's text/template that process-exporter's
//! `name:` fields use, printed as Go prints it.
//!
//! A template is text with actions: `{{.Comm}}`, `{{.ExeBase}}`, `{{.ExeFull}}`,
//! `{{.Username}}`, `{{.PID}}`, `{{.StartTime}}`, `{{.Cgroups}}`, `{{.Matches}}`,
//! `{{.Matches.NAME}}` and `{{index .Matches "NAME"}}`, plus taskdiag's `{{.Cgroup}}` (the
//! cgroup v2 path); `{{-` and `-}}` trim the white space beside them and `{{/* ... */}}` is a
//! comment. Anything else (pipelines, `if`, `range`, functions) is refused when the config
//! is read, where Go would fail only when it names a process (and process-exporter then
//! uses whatever part of the name was printed before the failure).
//!
//! Values print as Go's fmt prints them: a missing capture as `<no value>`, the captures as
//! `map[k:v ...]` in key order, the cgroups as `[a b]`, the start time as
//! `2006-01-02 15:04:05.999999999 +0000 UTC`.

use std::collections::BTreeMap;
use std::fmt::Write;

/// What a template can name: one process's attributes as the matcher saw them.
#[derive(Debug, Clone)]
pub struct Params<'a> {
    /// The task name (/proc/PID/stat's second field).
    pub comm: &'a str,
    /// The base name of argv\[0\] (the name when the command line is empty).
    pub exe_base: &'a str,
    /// argv\[0\] (the name when the command line is empty).
    pub exe_full: &'a str,
    /// The effective user's name (its number where it has none).
    pub username: &'a str,
    /// The process id.
    pub pid: u32,
    /// The start time: seconds since the epoch and nanoseconds.
    pub start_time: (i64, u32),
    /// The cgroup paths, one per line of /proc/PID/cgroup.
    pub cgroups: &'a [String],
    /// The cgroup v2 path.
    pub cgroup: &'a str,
    /// The captures of the regular expressions that matched, by group name.
    pub matches: &'a BTreeMap<String, String>,
}

/// Which fields a template reads, so that the collection reads only what is needed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// `.Username`.
    pub username: bool,
    /// `.Cgroups` or `.Cgroup`.
    pub cgroups: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    Comm,
    ExeBase,
    ExeFull,
    Username,
    Pid,
    StartTime,
    Cgroups,
    Cgroup,
    Matches,
    Match(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Field),
}

/// A parsed name template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("template {template:?}: {what}")]
pub struct TemplateError {
    /// The template.
    pub template: String,
    /// What is wrong.
    pub what: String,
}

impl Template {
    /// Parses `src`.
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        let err = |what: String| TemplateError {
            template: src.to_string(),
            what,
        };
        let mut pieces = Vec::new();
        let mut rest = src;
        let mut trim_next = false;
        while !rest.is_empty() {
            let (text, after) = match rest.find("{{") {
                Some(i) => (&rest[..i], Some(&rest[i + 2..])),
                None => (rest, None),
            };
            let mut text = text;
            if trim_next {
                text = text.trim_start();
            }
            let Some(after) = after else {
                push_text(&mut pieces, text);
                break;
            };
            // `{{- ` trims the text before; the dash must be followed by white space.
            let (trim_before, inner_start) = match after.strip_prefix('-') {
                Some(a) if a.starts_with(char::is_whitespace) => (true, a),
                _ => (false, after),
            };
            if trim_before {
                text = text.trim_end();
            }
            push_text(&mut pieces, text);
            let close = inner_start
                .find("}}")
                .ok_or_else(|| err("an action without its closing }}".into()))?;
            let mut inner = &inner_start[..close];
            rest = &inner_start[close + 2..];
            trim_next = false;
            if let Some(a) = inner.strip_suffix('-') {
                if a.ends_with(char::is_whitespace) {
                    inner = a;
                    trim_next = true;
                }
            }
            let inner = inner.trim();
            if inner.starts_with("/*") && inner.ends_with("*/") {
                continue;
            }
            pieces.push(Piece::Field(parse_action(inner).map_err(err)?));
        }
        Ok(Template { pieces })
    }

    /// The fields the template reads.
    pub fn needs(&self) -> Needs {
        let mut n = Needs::default();
        for p in &self.pieces {
            match p {
                Piece::Field(Field::Username) => n.username = true,
                Piece::Field(Field::Cgroups | Field::Cgroup) => n.cgroups = true,
                _ => {}
            }
        }
        n
    }

    /// Whether the template names every process apart (`.PID`, `.StartTime`): a label
    /// value per process, which the config must ask for explicitly.
    pub fn per_process(&self) -> bool {
        self.pieces
            .iter()
            .any(|p| matches!(p, Piece::Field(Field::Pid | Field::StartTime)))
    }

    /// The name of a process.
    pub fn render(&self, p: &Params<'_>) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(f) => match f {
                    Field::Comm => out.push_str(p.comm),
                    Field::ExeBase => out.push_str(p.exe_base),
                    Field::ExeFull => out.push_str(p.exe_full),
                    Field::Username => out.push_str(p.username),
                    Field::Pid => {
                        let _ = write!(out, "{}", p.pid);
                    }
                    Field::StartTime => go_time(&mut out, p.start_time.0, p.start_time.1),
                    Field::Cgroups => {
                        out.push('[');
                        out.push_str(&p.cgroups.join(" "));
                        out.push(']');
                    }
                    Field::Cgroup => out.push_str(p.cgroup),
                    Field::Matches => {
                        out.push_str("map[");
                        for (i, (k, v)) in p.matches.iter().enumerate() {
                            if i > 0 {
                                out.push(' ');
                            }
                            let _ = write!(out, "{k}:{v}");
                        }
                        out.push(']');
                    }
                    Field::Match(k) => match p.matches.get(k) {
                        Some(v) => out.push_str(v),
                        None => out.push_str("<no value>"),
                    },
                },
            }
        }
        out
    }
}

fn push_text(pieces: &mut Vec<Piece>, text: &str) {
    if !text.is_empty() {
        pieces.push(Piece::Text(text.to_string()));
    }
}

fn parse_action(inner: &str) -> Result<Field, String> {
    let words: Vec<&str> = inner.split_whitespace().collect();
    match words.as_slice() {
        [f] if f.starts_with('.') => parse_field(f),
        ["index", ".Matches", key] => {
            let key = key
                .strip_prefix('"')
                .and_then(|k| k.strip_suffix('"'))
                .or_else(|| key.strip_prefix('`').and_then(|k| k.strip_suffix('`')))
                .ok_or_else(|| format!("index .Matches takes a quoted key, not {key}"))?;
            Ok(Field::Match(key.to_string()))
        }
        [] => Err("an empty action {{}}".into()),
        _ => Err(format!(
            "{{{{{inner}}}}} is not supported (only fields such as {{{{.Comm}}}} and \
             {{{{index .Matches \"name\"}}}})"
        )),
    }
}

fn parse_field(f: &str) -> Result<Field, String> {
    let field = match f {
        ".Comm" => Field::Comm,
        ".ExeBase" => Field::ExeBase,
        ".ExeFull" => Field::ExeFull,
        ".Username" => Field::Username,
        ".PID" => Field::Pid,
        ".StartTime" => Field::StartTime,
        ".Cgroups" => Field::Cgroups,
        ".Cgroup" => Field::Cgroup,
        ".Matches" => Field::Matches,
        _ => match f.strip_prefix(".Matches.") {
            Some(k) if !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                Field::Match(k.to_string())
            }
            _ => {
                return Err(format!(
                    "unknown field {f} (known: .Comm .ExeBase .ExeFull .Username .PID \
                     .StartTime .Cgroups .Cgroup .Matches .Matches.NAME)"
                ))
            }
        },
    };
    Ok(field)
}

/// Writes a UTC time as Go's time.Time.String() does: `2006-01-02 15:04:05.999999999 +0000
/// UTC`, the fraction without trailing zeros (none when whole).
fn go_time(out: &mut String, secs: i64, nanos: u32) {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let _ = write!(
        out,
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    );
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        let _ = write!(out, ".{}", frac.trim_end_matches('0'));
    }
    out.push_str(" +0000 UTC");
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(matches: &BTreeMap<String, String>) -> Params<'_> {
        Params {
            comm: "bash",
            exe_base: "bash",
            exe_full: "/bin/bash",
            username: "root",
            pid: 42,
            start_time: (1_700_000_000, 120_000_000),
            cgroups: &[],
            cgroup: "/system.slice/x.service",
            matches,
        }
    }

    #[test]
    fn fields_print_as_go_prints_them() {
        let mut m = BTreeMap::new();
        m.insert("Port".to_string(), "8080".to_string());
        m.insert("A".to_string(), "x".to_string());
        let p = params(&m);
        let t = |s: &str| Template::parse(s).unwrap().render(&p);
        assert_eq!(t("{{.Comm}}"), "bash");
        assert_eq!(t("{{ .ExeFull }}:{{.ExeBase}}"), "/bin/bash:bash");
        assert_eq!(t("{{.Username}}-{{.PID}}"), "root-42");
        assert_eq!(t("{{.StartTime}}"), "2023-11-14 22:13:20.12 +0000 UTC");
        assert_eq!(t("{{.Matches.Port}}"), "8080");
        assert_eq!(t("{{index .Matches \"Port\"}}"), "8080");
        assert_eq!(t("{{.Matches.Nope}}"), "<no value>");
        assert_eq!(t("{{.Matches}}"), "map[A:x Port:8080]");
        assert_eq!(t("{{.Cgroups}}"), "[]");
        assert_eq!(t("{{.Cgroup}}"), "/system.slice/x.service");
        assert_eq!(t("a {{- .Comm -}} b"), "abashb");
        assert_eq!(t("x{{/* a comment */}}y"), "xy");
        assert_eq!(t("plain"), "plain");
    }

    #[test]
    fn whole_seconds_print_without_a_fraction() {
        let m = BTreeMap::new();
        let mut p = params(&m);
        p.start_time = (0, 0);
        let t = Template::parse("{{.StartTime}}").unwrap();
        assert_eq!(t.render(&p), "1970-01-01 00:00:00 +0000 UTC");
        p.start_time = (951_782_400, 5); // 2000-02-29
        assert_eq!(t.render(&p), "2000-02-29 00:00:00.000000005 +0000 UTC");
    }

    #[test]
    fn unsupported_actions_are_refused_when_parsed() {
        for bad in [
            "{{.Comm",
            "{{.Nope}}",
            "{{if .Comm}}x{{end}}",
            "{{.Comm | printf \"%s\"}}",
            "{{}}",
            "{{index .Matches Port}}",
        ] {
            let e = Template::parse(bad).unwrap_err();
            assert_eq!(e.template, bad);
        }
    }

    #[test]
    fn needs_and_per_process_follow_the_fields() {
        let t = Template::parse("{{.Username}}:{{.Cgroup}}").unwrap();
        assert_eq!(
            t.needs(),
            Needs {
                username: true,
                cgroups: true
            }
        );
        assert!(!t.per_process());
        assert!(Template::parse("{{.Comm}}-{{.PID}}").unwrap().per_process());
    }
}
