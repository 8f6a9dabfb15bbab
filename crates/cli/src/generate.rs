//! `taskdiag generate` (hidden): the man pages and shell completions of `taskdiag`, its
//! subcommands and `taskdiag-exporter`, from the definitions `--help` prints (the Debian
//! package's build runs it: scripts/deb).
//!
//! Subcommands with clap options get clap_mangen's pages; the tools and the exporter, which
//! parse their own options (procps's, psmisc's, Go's), get pages made from the text their
//! `--help` prints ([`TEXT_PAGES`]). Each tool's page also names the tool as installed under
//! its own name (`/usr/lib/taskdiag/bin/ps`), whose manpath finds the page as `ps(1)`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Arg, ArgAction, Command};
use taskdiag::BackendKind;
use taskdiag_docgen::help::{self, Block};
use taskdiag_docgen::{Generate, Meta, Page, TextPage};

/// Arguments of `taskdiag generate`.
#[derive(clap::Args)]
pub(crate) struct GenerateArgs {
    /// What to write: man (every page), complete-bash, complete-zsh or complete-fish (the
    /// scripts of taskdiag and taskdiag-exporter).
    #[arg(value_enum)]
    kind: Generate,
    /// The directory the files are written to (made if missing).
    dir: PathBuf,
}

/// The subcommands whose pages come from their own help texts: name, text, the pages of
/// what they replace.
const TEXT_PAGES: &[(&str, &str, &str)] = &[
    ("ps", taskdiag_tools::ps::HELP, "ps(1)"),
    ("pstree", taskdiag_tools::pstree::HELP, "pstree(1)"),
    ("pgrep", taskdiag_tools::pgrep::args::PGREP_HELP, "pgrep(1)"),
    ("pkill", taskdiag_tools::pgrep::args::PKILL_HELP, "pkill(1)"),
    (
        "pidwait",
        taskdiag_tools::pgrep::args::PIDWAIT_HELP,
        "pidwait(1)",
    ),
    ("pidof", taskdiag_tools::pidof::PIDOF_HELP, "pidof(8)"),
    ("top", taskdiag_tools::top::HELP, "top(1)"),
    (
        "exporter",
        taskdiag_exporter::options::MANUAL,
        "prometheus-process-exporter(1)",
    ),
];

/// Where the package installs the tools under their own names.
const TOOLS_DIR: &str = "/usr/lib/taskdiag/bin";

/// The tools the package does not install there: Debian's pidof is sysvinit-utils', whose
/// options and matching differ from the procps pidof that `taskdiag pidof` follows, and a
/// PATH starting with TOOLS_DIR must not change it for scripts (packaging/debian/README.Debian).
const NOT_UNDER_OWN_NAME: &[&str] = &["pidof"];

/// `taskdiag generate KIND DIR`.
pub(crate) fn generate(a: GenerateArgs, cli: Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    match a.kind.shell() {
        None => {
            for page in pages(cli)? {
                write(&a.dir, &page.file, page.roff.as_bytes())?;
            }
        }
        Some(shell) => {
            let script = taskdiag_docgen::completion(completion_command(cli), shell, "taskdiag");
            write(&a.dir, &shell.file_name("taskdiag"), &script)?;
            let exporter = exporter_command(Command::new("taskdiag-exporter"));
            let script = taskdiag_docgen::completion(exporter, shell, "taskdiag-exporter");
            write(&a.dir, &shell.file_name("taskdiag-exporter"), &script)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write(dir: &Path, file: &str, data: &[u8]) -> anyhow::Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, data).with_context(|| format!("writing {}", path.display()))
}

/// Every page: `taskdiag.1` and one per subcommand (`taskdiag-ps.1`, `taskdiag-exporter.1`).
pub(crate) fn pages(cli: Command) -> anyhow::Result<Vec<Page>> {
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    let source = format!("taskdiag {}", env!("CARGO_PKG_VERSION"));
    let date = taskdiag_docgen::date();
    let docs = "/usr/share/doc/taskdiag/ (PROTOCOL.md, JSON.md, PERMISSIONS.md, SECURITY.md)";
    let mut out = vec![taskdiag_docgen::command_page(
        &cli,
        Meta {
            section: "1",
            date: &date,
            source: &source,
            see_also: &["taskdiagd(8)", "proc(5)", docs],
        },
    )
    .context("the taskdiag page")?];
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        let page = match TEXT_PAGES.iter().find(|(n, ..)| *n == name) {
            Some(&(_, text, replaces)) => text_page(sub, text, replaces, &date, &source)?,
            None if sub.is_disable_help_flag_set() => {
                bail!("taskdiag {name} parses its own options: TEXT_PAGES needs its help text")
            }
            None => taskdiag_docgen::command_page(
                sub,
                Meta {
                    section: "1",
                    date: &date,
                    source: &source,
                    see_also: &["taskdiag(1)"],
                },
            )
            .with_context(|| format!("the taskdiag-{name} page"))?,
        };
        out.push(page);
    }
    Ok(out)
}

/// The page of a subcommand that parses its own options, from the text its `--help` prints.
fn text_page(
    sub: &Command,
    text: &str,
    replaces: &str,
    date: &str,
    source: &str,
) -> anyhow::Result<Page> {
    let name = sub.get_name();
    let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
    let mut h = help::parse(text);
    // Usage lines, or a SYNOPSIS section's (the exporter's manual).
    let mut usage = std::mem::take(&mut h.usage);
    if let Some(s) = h.take("SYNOPSIS") {
        for b in s.blocks {
            match b {
                Block::Pre(lines) => usage.extend(lines.iter().map(|l| l.trim().to_string())),
                Block::Para(l) => usage.push(l),
                _ => {}
            }
        }
    }
    if usage.is_empty() {
        bail!("taskdiag {name}'s help text has no usage line");
    }
    // Each usage line as `taskdiag NAME ...`, then as the tool's own name (`ps ...`, or
    // `taskdiag-exporter ...` for the exporter) where the package installs it under one.
    let own = if name == "exporter" {
        Some("taskdiag-exporter".to_string())
    } else if NOT_UNDER_OWN_NAME.contains(&name) {
        None
    } else {
        Some(format!("{TOOLS_DIR}/{name}"))
    };
    let sub_cmd = format!("taskdiag {name}");
    let mut args: Vec<String> = Vec::new();
    for u in &usage {
        let rest = [
            sub_cmd.as_str(),
            own.as_deref().unwrap_or(name),
            "taskdiag-exporter",
            name,
        ]
        .iter()
        .find_map(|p| {
            u.strip_prefix(p)
                .filter(|r| r.is_empty() || r.starts_with(' '))
        })
        .with_context(|| format!("taskdiag {name}: usage line {u:?} names another program"))?;
        if !args.iter().any(|a| a == rest.trim()) {
            args.push(rest.trim().to_string());
        }
    }
    let synopsis: Vec<(&str, &str)> = std::iter::once(sub_cmd.as_str())
        .chain(own.as_deref())
        .flat_map(|c| args.iter().map(move |a| (c, a.as_str())))
        .collect();
    let page_name = format!("taskdiag-{name}");
    Ok(taskdiag_docgen::text_page(
        TextPage {
            name: &page_name,
            about: &about,
            synopsis: &synopsis,
            text,
        },
        Meta {
            section: "1",
            date,
            source,
            see_also: &["taskdiag(1)", replaces],
        },
    ))
}

/// `taskdiag`'s clap command as completions should see it: the exporter's flags, which it
/// parses itself, declared so that they complete.
fn completion_command(cli: Command) -> Command {
    cli.mut_subcommand("exporter", |sub| {
        let about = sub.get_about().cloned();
        let cmd = exporter_command(Command::new("exporter"));
        match about {
            Some(a) => cmd.about(a),
            None => cmd,
        }
    })
}

/// The exporter's flags as clap arguments, for completions only (the exporter parses them
/// itself, as Go's flag package does): every flag its parser accepts, those its manual
/// describes offered with the manual's first sentence, the others (process-exporter's, which
/// it refuses with a reason) hidden. Long forms: Go takes `--name` as `-name`.
fn exporter_command(cmd: Command) -> Command {
    let mut described: HashMap<String, (String, String)> = HashMap::new();
    let h = help::parse(taskdiag_exporter::options::MANUAL);
    for s in h.sections.iter().filter(|s| s.title == "OPTIONS") {
        for b in &s.blocks {
            let Block::Tagged { tag, body } = b else {
                continue;
            };
            let first = body
                .split(". ")
                .next()
                .unwrap_or(body)
                .trim_end_matches('.');
            for spelling in tag.split(", ") {
                let flag = spelling.trim_start_matches('-');
                let name = flag.split(['=', ' ']).next().unwrap_or(flag);
                let value = flag[name.len()..]
                    .trim_start_matches(['=', ' '])
                    .split(' ')
                    .next()
                    .unwrap_or("")
                    .to_string();
                described.insert(name.to_string(), (first.to_string(), value));
            }
        }
    }
    let mut cmd = cmd
        .about("Serve process-exporter-compatible Prometheus metrics")
        .disable_help_flag(true)
        .disable_version_flag(true);
    let flags = taskdiag_exporter::options::BOOL_FLAGS
        .iter()
        .map(|f| (f, true))
        .chain(
            taskdiag_exporter::options::VALUE_FLAGS
                .iter()
                .map(|f| (f, false)),
        );
    for (&name, boolean) in flags {
        let mut arg = Arg::new(name);
        if let Some((help, _)) = described.get(name) {
            arg = arg.help(help.clone());
        }
        arg = if name.len() == 1 {
            arg.short(name.chars().next().unwrap_or('h'))
        } else {
            arg.long(name)
        };
        arg = if boolean {
            arg.num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .value_parser(["true", "false"])
        } else {
            let value = described
                .get(name)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "VALUE".into());
            let arg = arg.num_args(1).value_name(value).action(ArgAction::Set);
            match name {
                "config.path" | "web.config.file" => arg.value_hint(clap::ValueHint::FilePath),
                "backend" => arg.value_parser(BackendKind::names()),
                _ => arg,
            }
        };
        cmd = cmd.arg(arg.hide(!described.contains_key(name)));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_subcommand_has_a_page_that_names_it() {
        let pages = pages(crate::Cli::command()).expect("pages");
        let files: Vec<&str> = pages.iter().map(|p| p.file.as_str()).collect();
        for want in [
            "taskdiag.1",
            "taskdiag-dump.1",
            "taskdiag-ps.1",
            "taskdiag-exporter.1",
        ] {
            assert!(files.contains(&want), "{want} missing from {files:?}");
        }
        assert!(!files
            .iter()
            .any(|f| f.contains("generate") || f.contains("help")));
        for p in &pages {
            let th = format!(".TH {} ", p.file.trim_end_matches(".1").to_uppercase());
            assert!(p.roff.contains(&th), "{}: {}", p.file, p.roff);
        }
        let ps = pages
            .iter()
            .find(|p| p.file == "taskdiag-ps.1")
            .expect("ps");
        assert!(
            ps.roff
                .contains("\\fB/usr/lib/taskdiag/bin/ps\\fR [options]"),
            "{}",
            ps.roff
        );
        assert!(
            ps.roff.contains(".SH \"PROCESS SELECTION BY LIST\""),
            "{}",
            ps.roff
        );
        // pidof is not installed there (Debian's stays sysvinit-utils'): its page says so.
        let pidof = pages
            .iter()
            .find(|p| p.file == "taskdiag-pidof.1")
            .expect("pidof");
        assert!(pidof.roff.contains("taskdiag pidof"), "{}", pidof.roff);
        assert!(!pidof.roff.contains(TOOLS_DIR), "{}", pidof.roff);
    }

    #[test]
    fn completions_offer_the_subcommands_and_the_exporters_flags() {
        use taskdiag_docgen::Shell;
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = taskdiag_docgen::completion(
                completion_command(crate::Cli::command()),
                shell,
                "taskdiag",
            );
            let script = String::from_utf8(script).expect("utf-8");
            for want in ["dump", "groups", "pstree", "exporter", "config.path"] {
                assert!(script.contains(want), "{shell:?} lacks {want}");
            }
            assert!(
                !script.contains("generate"),
                "{shell:?} offers the hidden generate"
            );
        }
    }

    #[test]
    fn the_exporter_completes_the_flags_its_manual_describes() {
        let mut cmd = exporter_command(Command::new("taskdiag-exporter"));
        cmd.build();
        let arg = |n: &str| cmd.get_arguments().find(|a| a.get_id() == n).cloned();
        let config = arg("config.path").expect("config.path");
        assert!(!config.is_hide_set());
        assert_eq!(
            config.get_value_names().map(|v| v.to_vec()),
            Some(vec!["FILE".into()])
        );
        assert!(config
            .get_help()
            .is_some_and(|h| h.to_string().starts_with("The YAML config")));
        // process-exporter's -procfs is accepted only to be refused: not offered.
        assert!(arg("procfs").is_some_and(|a| a.is_hide_set()));
    }
}
