//! The YAML config, process-exporter's (`process_names:` rules with `comm`, `exe` and
//! `cmdline` matchers and a `name` template), plus a `cgroup` matcher; and matching a
//! process against it: the first rule that matches names the process's group.
//!
//! Within a rule every matcher given must match: `comm` if the task name is one of the
//! list, `exe` if argv\[0\]'s base name is one of the list (an entry with a slash must equal
//! argv\[0\] whole), `cmdline` if every regular expression finds a match in the arguments
//! joined by spaces, `cgroup` if every one finds one in the cgroup v2 path. The named
//! captures of `cmdline` and `cgroup` are the template's `.Matches`.
//!
//! Errors name the file, the line and column, and the field (`process_names[1].cmdline[0]`);
//! a regular expression or template that cannot work is refused here, not at the first
//! process it meets. Unlike process-exporter (yaml.v2, lenient), an unknown key is an error:
//! a misspelt matcher would otherwise leave a rule that matches more than meant.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;

use crate::template::{Needs, Params, Template};

/// Why a config was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid config.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending node (0 if unknown).
        line: usize,
        /// 1-based column.
        column: usize,
        /// The field and what is wrong with it (`process_names[0].cmdline[1]: ...`).
        message: String,
    },
}

/// What a rule's matchers and name see of a process.
#[derive(Debug, Clone, Default)]
pub struct ProcAttrs {
    /// The task name.
    pub comm: String,
    /// The command line, split at NULs (a trailing NUL dropped); empty for kernel threads.
    pub cmdline: Vec<String>,
    /// Every cgroup path of /proc/PID/cgroup, in its order.
    pub cgroups: Vec<String>,
    /// The cgroup v2 path.
    pub cgroup: String,
    /// The effective user's name.
    pub username: String,
    /// The process id.
    pub pid: u32,
    /// The start time (seconds since the epoch, nanoseconds).
    pub start_time: (i64, u32),
}

/// One `process_names` entry.
#[derive(Debug, Clone)]
pub struct Rule {
    name: Template,
    comm: Option<HashSet<String>>,
    /// By base name: the full path the entry asked for, or `None` for any.
    exe: Option<HashMap<String, Option<String>>>,
    cmdline: Option<Vec<Regex>>,
    cgroup: Option<Vec<Regex>>,
}

/// A whole config: rules tried in order.
#[derive(Debug, Clone, Default)]
pub struct Config {
    rules: Vec<Rule>,
}

impl Config {
    /// Reads and checks the config file at `path`.
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses a config's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = serde_yaml::from_str(text).map_err(|e| {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            let mut message = e.to_string();
            // serde_yaml appends the location; it is given before the message instead.
            if let Some(i) = message.rfind(" at line ") {
                message.truncate(i);
            }
            ConfigError::Invalid {
                path: path.to_path_buf(),
                line,
                column,
                message,
            }
        })?;
        Ok(Config {
            rules: raw.process_names,
        })
    }

    /// process-exporter's packaged default: every process with a command line, named by its
    /// task name (`name: "{{.Comm}}"`, `cmdline: ['.+']`).
    pub fn every_process_by_comm() -> Config {
        let rule = Rule {
            name: Template::parse("{{.Comm}}").unwrap_or_else(|_| unreachable!()),
            comm: None,
            exe: None,
            cmdline: Regex::new(".+").ok().map(|r| vec![r]),
            cgroup: None,
        };
        Config { rules: vec![rule] }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// What the rules' matchers and names read.
    pub fn needs(&self) -> Needs {
        let mut n = Needs::default();
        for r in &self.rules {
            let t = r.name.needs();
            n.username |= t.username;
            n.cgroups |= t.cgroups || r.cgroup.is_some();
        }
        n
    }

    /// The group of a process: the name the first matching rule gives it, or `None`.
    pub fn match_and_name(&self, a: &ProcAttrs) -> Option<String> {
        self.rules.iter().find_map(|r| r.match_and_name(a))
    }
}

impl Rule {
    /// The name this rule gives the process, if it matches.
    pub fn match_and_name(&self, a: &ProcAttrs) -> Option<String> {
        if let Some(comms) = &self.comm {
            if !comms.contains(&a.comm) {
                return None;
            }
        }
        if let Some(exes) = &self.exe {
            let argv0 = a.cmdline.first()?;
            match exes.get(go_base(argv0)) {
                None => return None,
                Some(Some(full)) if full != argv0 => return None,
                Some(_) => {}
            }
        }
        let mut matches = BTreeMap::new();
        if let Some(res) = &self.cmdline {
            capture_all(res, &a.cmdline.join(" "), &mut matches)?;
        }
        if let Some(res) = &self.cgroup {
            capture_all(res, &a.cgroup, &mut matches)?;
        }
        let (exe_base, exe_full) = match a.cmdline.first() {
            Some(argv0) => (go_base(argv0), argv0.as_str()),
            None => (a.comm.as_str(), a.comm.as_str()),
        };
        Some(self.name.render(&Params {
            comm: &a.comm,
            exe_base,
            exe_full,
            username: &a.username,
            pid: a.pid,
            start_time: a.start_time,
            cgroups: &a.cgroups,
            cgroup: &a.cgroup,
            matches: &matches,
        }))
    }
}

/// Every regex must match `hay`; their groups go into `matches` by name, as
/// process-exporter's cmdline matcher records them (the unnamed ones under "", later ones
/// replacing earlier ones, a group that took no part as "").
fn capture_all(res: &[Regex], hay: &str, matches: &mut BTreeMap<String, String>) -> Option<()> {
    for re in res {
        let caps = re.captures(hay)?;
        for (i, name) in re.capture_names().enumerate() {
            let v = caps.get(i).map_or("", |m| m.as_str());
            matches.insert(name.unwrap_or("").to_string(), v.to_string());
        }
    }
    Some(())
}

/// Go's `filepath.Base`: the last element, trailing slashes dropped; "." for "", "/" for
/// slashes only.
pub fn go_base(p: &str) -> &str {
    if p.is_empty() {
        return ".";
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/";
    }
    match t.rfind('/') {
        Some(i) => &t[i + 1..],
        None => t,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    process_names: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<TemplateField>,
    comm: Option<Vec<String>>,
    exe: Option<Vec<String>>,
    cmdline: Option<Vec<RegexField>>,
    cgroup: Option<Vec<RegexField>>,
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Rule, D::Error> {
        let raw = RawRule::deserialize(d)?;
        if raw.comm.is_none() && raw.exe.is_none() && raw.cmdline.is_none() && raw.cgroup.is_none()
        {
            return Err(serde::de::Error::custom(
                "no matchers provided (a rule needs comm, exe, cmdline or cgroup)",
            ));
        }
        let name = match raw.name {
            Some(t) => t.0,
            None => Template::parse("{{.ExeBase}}").map_err(serde::de::Error::custom)?,
        };
        let exe = raw.exe.map(|list| {
            list.into_iter()
                .map(|e| {
                    if e.contains('/') {
                        (go_base(&e).to_string(), Some(e))
                    } else {
                        (e, None)
                    }
                })
                .collect()
        });
        Ok(Rule {
            name,
            comm: raw.comm.map(|c| c.into_iter().collect()),
            exe,
            cmdline: raw.cmdline.map(|v| v.into_iter().map(|r| r.0).collect()),
            cgroup: raw.cgroup.map(|v| v.into_iter().map(|r| r.0).collect()),
        })
    }
}

/// A regular expression, compiled as it is read so that its error has its position.
struct RegexField(Regex);

impl<'de> Deserialize<'de> for RegexField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Regex::new(&s).map(RegexField).map_err(|e| {
            // The crate's message draws the expression with a caret over several lines; its
            // last line says what is wrong.
            let text = e.to_string();
            let why = text
                .lines()
                .last()
                .unwrap_or("")
                .trim_start_matches("error: ");
            serde::de::Error::custom(format!("bad regular expression {s:?}: {why}"))
        })
    }
}

/// A name template, parsed as it is read.
struct TemplateField(Template);

impl<'de> Deserialize<'de> for TemplateField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Template::parse(&s)
            .map(TemplateField)
            .map_err(|e| serde::de::Error::custom(format!("name: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/x.yml"))
    }

    fn invalid(text: &str) -> (usize, String) {
        match parse(text) {
            Err(ConfigError::Invalid {
                path,
                line,
                message,
                ..
            }) => {
                assert_eq!(path, Path::new("/etc/x.yml"));
                (line, message)
            }
            other => panic!("expected an invalid config, got {other:?}"),
        }
    }

    fn attrs(comm: &str, cmdline: &[&str]) -> ProcAttrs {
        ProcAttrs {
            comm: comm.into(),
            cmdline: cmdline.iter().map(|s| s.to_string()).collect(),
            username: "alice".into(),
            pid: 7,
            ..ProcAttrs::default()
        }
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let (line, msg) = invalid("process_names:\n  - name: x\n    cmdline:\n    - 'a('\n");
        assert_eq!(line, 4, "{msg}");
        assert!(msg.starts_with("process_names[0].cmdline"), "{msg}");
        assert!(
            msg.ends_with("bad regular expression \"a(\": unclosed group"),
            "{msg}"
        );

        let (line, msg) = invalid("process_names:\n  - comm: [a]\n  - comn: [b]\n");
        assert_eq!(line, 3, "{msg}");
        assert!(msg.contains("process_names[1]"), "{msg}");
        assert!(msg.contains("unknown field `comn`"), "{msg}");

        // A bad scalar in a rule is placed at its rule (serde_yaml's position), and named.
        let (line, msg) = invalid("process_names:\n  - comm: [a]\n    name: '{{.Nope}}'\n");
        assert_eq!(line, 2, "{msg}");
        assert!(msg.starts_with("process_names[0]: name: template"), "{msg}");
        assert!(msg.contains("unknown field .Nope"), "{msg}");

        let (line, msg) = invalid("process_names:\n  - name: lonely\n");
        assert!(line > 0 && msg.starts_with("process_names"), "{msg}");
        assert!(msg.contains("no matchers provided"), "{msg}");

        let (line, msg) = invalid("process_names:\n  - comm: 3\n");
        assert_eq!(line, 2, "{msg}");
        assert!(msg.contains("process_names[0].comm"), "{msg}");

        let (_, msg) = invalid("process_names: [\n");
        assert!(!msg.is_empty());
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = Config::read(Path::new("/nonexistent/cfg.yml")).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/cfg.yml: "), "{e}");
    }

    #[test]
    fn the_first_matching_rule_names_the_group() {
        let c = parse(
            "process_names:\n\
             \x20 - comm: [bash]\n\
             \x20 - name: 'py:{{.Matches.script}}'\n\
             \x20   exe: [python3, /usr/bin/python3.11]\n\
             \x20   cmdline: ['(?P<script>[^ /]+)\\.py']\n\
             \x20 - name: '{{.Comm}}'\n\
             \x20   cmdline: ['.+']\n",
        )
        .unwrap();
        assert_eq!(
            c.match_and_name(&attrs("bash", &["-bash"])),
            Some("-bash".into())
        );
        assert_eq!(
            c.match_and_name(&attrs(
                "python3",
                &["/usr/local/bin/python3", "/srv/app.py"]
            )),
            Some("py:app".into())
        );
        // The entry with a slash asks for that path exactly.
        assert_eq!(
            c.match_and_name(&attrs("python3.11", &["/opt/python3.11", "a.py"])),
            Some("python3.11".into())
        );
        assert_eq!(
            c.match_and_name(&attrs("python3.11", &["/usr/bin/python3.11", "a.py"])),
            Some("py:a".into())
        );
        // A kernel thread has no command line: `.+` does not match it.
        assert_eq!(c.match_and_name(&attrs("kworker/0:1", &[])), None);
    }

    #[test]
    fn every_matcher_of_a_rule_must_match() {
        let c = parse(
            "process_names:\n  - name: '{{.ExeBase}}-{{.Username}}'\n    comm: [sleep]\n    \
             cmdline: ['^sleep', '100']\n",
        )
        .unwrap();
        assert_eq!(
            c.match_and_name(&attrs("sleep", &["/bin/sleep", "100"])),
            None,
            "^sleep does not match /bin/sleep"
        );
        assert_eq!(
            c.match_and_name(&attrs("sleep", &["sleep", "100"])),
            Some("sleep-alice".into())
        );
        assert_eq!(c.match_and_name(&attrs("sleep", &["sleep", "5"])), None);
        assert_eq!(c.match_and_name(&attrs("true", &["sleep", "100"])), None);
    }

    #[test]
    fn cgroup_rules_match_the_v2_path_and_capture() {
        let c = parse(
            "process_names:\n  - name: '{{.Matches.unit}}'\n    cgroup: ['/(?P<unit>[^/]+)\\.service$']\n",
        )
        .unwrap();
        assert!(c.needs().cgroups);
        let mut a = attrs("nginx", &["nginx"]);
        a.cgroup = "/system.slice/nginx.service".into();
        assert_eq!(c.match_and_name(&a), Some("nginx".into()));
        a.cgroup = "/user.slice".into();
        assert_eq!(c.match_and_name(&a), None);
    }

    #[test]
    fn the_name_defaults_to_exebase() {
        let c = parse("process_names:\n  - comm: [x]\n").unwrap();
        assert_eq!(
            c.match_and_name(&attrs("x", &["/usr/bin/xx", "-v"])),
            Some("xx".into())
        );
        assert_eq!(c.match_and_name(&attrs("x", &[])), Some("x".into()));
        assert!(!c.needs().username && !c.needs().cgroups);
    }

    #[test]
    fn go_base_is_filepath_base() {
        assert_eq!(go_base("/usr/bin/x"), "x");
        assert_eq!(go_base("x"), "x");
        assert_eq!(go_base("/a/b/"), "b");
        assert_eq!(go_base("///"), "/");
        assert_eq!(go_base(""), ".");
    }

    #[test]
    fn the_packaged_default_names_by_comm() {
        let c = Config::every_process_by_comm();
        assert_eq!(
            c.match_and_name(&attrs("sshd", &["sshd: x"])),
            Some("sshd".into())
        );
        assert_eq!(c.match_and_name(&attrs("kthreadd", &[])), None);
        let empty = parse("{}\n").unwrap();
        assert!(empty.rules().is_empty());
    }
}
