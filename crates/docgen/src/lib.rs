//! Man pages and shell completions of the taskdiag commands, generated from the definitions
//! their `--help` prints, so that the installed documentation cannot drift from the
//! programs.
//!
//! Two kinds of source feed the pages:
//!
//! * clap definitions (`taskdiag dump`, `taskdiag profile`, `taskdiagd`): NAME, SYNOPSIS,
//!   DESCRIPTION, OPTIONS and SUBCOMMANDS are clap_mangen's ([`command_page`]), followed by
//!   the sections of the command's after-help text;
//! * hand-written help texts (the procps/psmisc tools, whose options no generic parser
//!   accepts, and the exporter's Go-style flags): read by [`help`] and written as the same
//!   sections ([`text_page`]).
//!
//! Completions are clap_complete's, from the same clap definitions ([`completion`]). The
//! binaries expose all this through a hidden option, as ripgrep's `rg --generate man` does
//! (`taskdiag generate`, `taskdiagd --generate`), and the Debian package's build runs it
//! (scripts/deb); nothing here runs when the tools do their work.

pub mod help;

use std::io;

use clap::Command;
use roff::{bold, roman, Roff};

use help::{Block, Help};

/// What a hidden `--generate` option writes: the vocabulary both binaries share
/// (ripgrep's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Generate {
    /// The man pages.
    Man,
    /// bash completions.
    CompleteBash,
    /// zsh completions.
    CompleteZsh,
    /// fish completions.
    CompleteFish,
}

impl Generate {
    /// The shell of a completion, or `None` for the man pages.
    pub fn shell(self) -> Option<Shell> {
        match self {
            Generate::Man => None,
            Generate::CompleteBash => Some(Shell::Bash),
            Generate::CompleteZsh => Some(Shell::Zsh),
            Generate::CompleteFish => Some(Shell::Fish),
        }
    }
}

/// A shell that completions are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// bash (bash-completion loads `completions/NAME` on first use).
    Bash,
    /// zsh (`_NAME` in a directory on `$fpath`).
    Zsh,
    /// fish (`NAME.fish` in `vendor_completions.d`).
    Fish,
}

impl Shell {
    /// The file name the shell looks for when completing `bin`.
    pub fn file_name(self, bin: &str) -> String {
        match self {
            Shell::Bash => bin.to_string(),
            Shell::Zsh => format!("_{bin}"),
            Shell::Fish => format!("{bin}.fish"),
        }
    }
}

/// The completion script of `cmd`, run as `bin`, for `shell`: what `--help` lists (hidden
/// arguments and subcommands, such as the one that writes this, are left out).
pub fn completion(cmd: Command, shell: Shell, bin: &str) -> Vec<u8> {
    let mut cmd = cmd;
    cmd.build();
    let mut cmd = visible(&cmd);
    let mut out = Vec::new();
    match shell {
        Shell::Bash => clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, bin, &mut out),
        Shell::Zsh => clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, bin, &mut out),
        Shell::Fish => clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, bin, &mut out),
    }
    out
}

/// A copy of the built `cmd` with only what is not hidden: clap_complete offers hidden
/// arguments and subcommands too. The built command's own help and version flags and help
/// subcommand are among those copied, so the copy adds none of its own.
fn visible(cmd: &Command) -> Command {
    let mut out = Command::new(cmd.get_name().to_string())
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true);
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        out = out.version(version.to_string());
    }
    if let Some(version) = cmd.get_long_version() {
        out = out.long_version(version.to_string());
    }
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        out = out.arg(a.clone());
    }
    for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out = out.subcommand(visible(s));
    }
    out
}

/// A man page: the file it is installed as (`taskdiag-ps.1`) and its roff source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The file name, `NAME.SECTION`.
    pub file: String,
    /// The page.
    pub roff: String,
}

/// What a page says besides its command's own text.
#[derive(Debug, Clone, Copy)]
pub struct Meta<'a> {
    /// The manual section: `1` for commands, `8` for daemons.
    pub section: &'a str,
    /// The footer's date, `YYYY-MM-DD` ([`date`]).
    pub date: &'a str,
    /// The footer's source: `taskdiag 0.1.0`.
    pub source: &'a str,
    /// The pages and documents named under SEE ALSO (`taskdiag(1)`).
    pub see_also: &'a [&'a str],
}

/// The date pages carry: `$SOURCE_DATE_EPOCH`'s (reproducible builds: the package's build
/// sets it to the last commit's time), else today's, as `YYYY-MM-DD` in UTC.
pub fn date() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    civil_date(secs / 86_400)
}

/// The proleptic Gregorian date `days` days after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_date(days: u64) -> String {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// NAME's line, `name - what it does`, from a one-line help: without a final period, a
/// leading `name: ` (a crate's description) or a closing parenthesis that points at `--help`
/// (`` (procps ps options; `ps --help`) ``), which say nothing on a page of their own.
fn name_line(name: &str, about: &str) -> String {
    let mut about = about.trim().trim_end_matches('.');
    if let Some(rest) = about.strip_prefix(name).and_then(|r| r.strip_prefix(": ")) {
        about = rest;
    }
    if let Some(open) = about.rfind(" (") {
        if about.ends_with(')') && about[open..].contains('`') {
            about = &about[..open];
        }
    }
    format!("{name} - {about}")
}

/// Renders `roff` without the preamble every rendering starts with, past the first.
fn render_part(roff: &Roff) -> String {
    let preamble = Roff::new().render();
    let text = roff.render();
    text.strip_prefix(&preamble)
        .map_or_else(|| text.clone(), str::to_string)
}

/// Renders the output of one of clap_mangen's `render_*_section` calls without its preamble.
fn mangen_part(render: impl FnOnce(&mut dyn io::Write) -> io::Result<()>) -> io::Result<String> {
    let mut out = Vec::new();
    render(&mut out)?;
    let text = String::from_utf8(out).map_err(io::Error::other)?;
    let preamble = Roff::new().render();
    Ok(text
        .strip_prefix(&preamble)
        .map_or_else(|| text.clone(), str::to_string))
}

/// Writes `blocks` as roff: prose filled, tables as written, options as tagged paragraphs.
fn write_blocks(roff: &mut Roff, blocks: &[Block]) {
    for (i, b) in blocks.iter().enumerate() {
        match b {
            Block::Para(text) => {
                if i > 0 {
                    roff.control("PP", []);
                }
                roff.text([roman(text)]);
            }
            Block::Pre(lines) => {
                if i > 0 {
                    roff.control("PP", []);
                }
                roff.control("nf", []);
                for l in lines {
                    roff.text([roman(l)]);
                }
                roff.control("fi", []);
            }
            Block::Tagged { tag, body } => {
                roff.control("TP", []);
                roff.text([bold(tag)]);
                roff.text([roman(body)]);
            }
            Block::Sub(title) => {
                roff.control("SS", [title.as_str()]);
            }
        }
    }
}

/// The sections of `help` after DESCRIPTION, then SEE ALSO (the text's own, with `see_also`
/// added).
fn write_sections(roff: &mut Roff, mut help: Help, see_also: &[&str]) {
    let own_see_also = help.take("SEE ALSO");
    for s in &help.sections {
        roff.control("SH", [s.title.as_str()]);
        write_blocks(roff, &s.blocks);
    }
    let mut blocks = own_see_also.map(|s| s.blocks).unwrap_or_default();
    if !see_also.is_empty() {
        match blocks.last_mut() {
            Some(Block::Para(text)) => {
                text.push_str(", ");
                text.push_str(&see_also.join(", "));
            }
            _ => blocks.push(Block::Para(see_also.join(", "))),
        }
    }
    if !blocks.is_empty() {
        roff.control("SH", ["SEE ALSO"]);
        write_blocks(roff, &blocks);
    }
}

/// The page of a clap command. `cmd` must come from a built parent (`Command::build`) when it
/// is a subcommand, so that it knows its name (`taskdiag-dump`) and its usage (`taskdiag
/// dump`). Its after-help text is read as a help text: what precedes its first heading, and
/// its DESCRIPTION section, continue the description; its other sections follow OPTIONS.
pub fn command_page(cmd: &Command, meta: Meta<'_>) -> io::Result<Page> {
    let cmd = cmd.clone().disable_help_subcommand(true);
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_string();
    let man = clap_mangen::Man::new(cmd.clone())
        .title(name.to_uppercase())
        .section(meta.section)
        .date(meta.date)
        .source(meta.source);
    let mut page = String::new();
    let mut head = Vec::new();
    man.render_title(&mut head)?;
    page.push_str(&String::from_utf8(head).map_err(io::Error::other)?);
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    let mut head = Roff::new();
    head.control("SH", ["NAME"]);
    head.text([roman(name_line(&name, &about))]);
    page.push_str(&render_part(&head));
    page.push_str(&mangen_part(|w| man.render_synopsis_section(w))?);
    page.push_str(&mangen_part(|w| man.render_description_section(w))?);
    let mut help = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(|t| help::parse(&t.to_string()))
        .unwrap_or_default();
    let mut more = Roff::new();
    let mut description = std::mem::take(&mut help.preamble);
    if let Some(s) = help.take("DESCRIPTION") {
        description.extend(s.blocks);
    }
    if !description.is_empty() {
        more.control("PP", []);
        write_blocks(&mut more, &description);
    }
    page.push_str(&render_part(&more));
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page.push_str(&mangen_part(|w| man.render_options_section(w))?);
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        page.push_str(&mangen_part(|w| man.render_subcommands_section(w))?);
    }
    let mut rest = Roff::new();
    write_sections(&mut rest, help, meta.see_also);
    page.push_str(&render_part(&rest));
    Ok(Page {
        file: format!("{name}.{}", meta.section),
        roff: page,
    })
}

/// A page written from a help text rather than a clap definition.
#[derive(Debug, Clone, Copy)]
pub struct TextPage<'a> {
    /// The page's name (`taskdiag-ps`).
    pub name: &'a str,
    /// NAME's one line after the dash.
    pub about: &'a str,
    /// SYNOPSIS: each line a command (in bold) and its arguments.
    pub synopsis: &'a [(&'a str, &'a str)],
    /// The help text; its `Usage:` lines, NAME and SYNOPSIS sections are left out (the
    /// synopsis above replaces them).
    pub text: &'a str,
}

/// The page of a help text: NAME and SYNOPSIS as given, DESCRIPTION from what precedes the
/// text's first heading (and its own DESCRIPTION section), then its other sections.
pub fn text_page(p: TextPage<'_>, meta: Meta<'_>) -> Page {
    let mut help = help::parse(p.text);
    help.take("NAME");
    help.take("SYNOPSIS");
    let mut roff = Roff::new();
    let title = p.name.to_uppercase();
    roff.control("TH", [title.as_str(), meta.section, meta.date, meta.source]);
    roff.control("SH", ["NAME"]);
    roff.text([roman(name_line(p.name, p.about))]);
    roff.control("SH", ["SYNOPSIS"]);
    for (i, (cmd, args)) in p.synopsis.iter().enumerate() {
        if i > 0 {
            roff.control("br", []);
        }
        roff.text([bold(*cmd), roman(format!(" {args}"))]);
    }
    let mut description = std::mem::take(&mut help.preamble);
    if let Some(s) = help.take("DESCRIPTION") {
        description.extend(s.blocks);
    }
    if !description.is_empty() {
        roff.control("SH", ["DESCRIPTION"]);
        write_blocks(&mut roff, &description);
    }
    write_sections(&mut roff, help, meta.see_also);
    Page {
        file: format!("{}.{}", p.name, meta.section),
        roff: roff.render(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: Meta<'static> = Meta {
        section: "1",
        date: "2026-11-27",
        source: "taskdiag 0.1.0",
        see_also: &["taskdiag(1)"],
    };

    #[test]
    fn text_pages_keep_tables_and_refill_prose() {
        let p = text_page(
            TextPage {
                name: "taskdiag-ps",
                about: "report a snapshot of the current processes",
                synopsis: &[("taskdiag ps", "[options]"), ("ps", "[options]")],
                text: "Usage: taskdiag ps [options]\n\nReports\nprocesses.\n\nOPTIONS\n  -e  all\n  .x  dot\n\nSEE ALSO\n  ps(1)\n",
            },
            META,
        );
        assert_eq!(p.file, "taskdiag-ps.1");
        let r = &p.roff;
        assert!(
            r.contains(".TH TASKDIAG-PS 1 2026-11-27 \"taskdiag 0.1.0\"\n"),
            "{r}"
        );
        assert!(r.contains("taskdiag\\-ps \\- report a snapshot"), "{r}");
        assert!(r.contains("\\fBps\\fR [options]"), "{r}");
        assert!(r.contains(".SH DESCRIPTION\nReports processes.\n"), "{r}");
        // A table line as written; one that starts with a dot is not taken for a request.
        assert!(r.contains(".nf\n\\-e  all\n\\&.x  dot\n.fi"), "{r}");
        assert!(r.contains(".SH \"SEE ALSO\"\nps(1), taskdiag(1)\n"), "{r}");
        assert!(!r.contains("Usage"), "{r}");
    }

    #[test]
    fn name_lines_say_what_the_command_does() {
        assert_eq!(
            name_line(
                "taskdiag-ps",
                "Report processes (procps ps options; `ps --help`)."
            ),
            "taskdiag-ps - Report processes"
        );
        assert_eq!(
            name_line("taskdiagd", "taskdiagd: the protocol on a socket"),
            "taskdiagd - the protocol on a socket"
        );
        assert_eq!(name_line("x", "Does y (z)"), "x - Does y (z)");
    }

    #[test]
    fn completions_leave_out_what_help_hides() {
        let cmd = Command::new("td")
            .version("1")
            .arg(clap::Arg::new("shown").long("shown"))
            .arg(clap::Arg::new("secret").long("secret").hide(true))
            .subcommand(Command::new("dump").arg(clap::Arg::new("pid").long("pid")))
            .subcommand(Command::new("generate").hide(true));
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(completion(cmd.clone(), shell, "td")).expect("utf-8");
            for want in ["shown", "dump", "pid", "help"] {
                assert!(script.contains(want), "{shell:?} lacks {want}: {script}");
            }
            for hidden in ["secret", "generate"] {
                assert!(
                    !script.contains(hidden),
                    "{shell:?} offers {hidden}: {script}"
                );
            }
        }
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(20_784), "2026-11-27");
    }

    #[test]
    fn command_pages_continue_clap_with_the_after_help() {
        let mut cmd = Command::new("taskdiag").version("0.1.0").subcommand(
            Command::new("dump")
                .about("Dump tasks.")
                .arg(clap::Arg::new("pid").long("pid").help("One task."))
                .after_help("Prose first.\n\nEXIT STATUS:\n  0 success"),
        );
        cmd.build();
        let Some(dump) = cmd.find_subcommand("dump") else {
            panic!("no dump");
        };
        let p = command_page(dump, META).expect("rendered");
        assert_eq!(p.file, "taskdiag-dump.1");
        let r = &p.roff;
        assert_eq!(r.matches(".ie \\n(.g").count(), 1, "one preamble: {r}");
        assert!(
            r.contains("\\fBtaskdiag dump\\fR"),
            "usage names the parent: {r}"
        );
        let order = [
            "SH NAME",
            "SH SYNOPSIS",
            "SH DESCRIPTION",
            "Prose first.",
            "SH OPTIONS",
        ];
        let at: Vec<usize> = order.iter().filter_map(|s| r.find(s)).collect();
        assert_eq!(at.len(), order.len(), "{r}");
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{r}");
        assert!(r.contains(".SH \"EXIT STATUS\"\n0 success\n"), "{r}");
    }
}
