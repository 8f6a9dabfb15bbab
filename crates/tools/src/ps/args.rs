//! The ps command line, parsed as procps ps 4.0.2 parses it: UNIX (`-ef`), BSD (`aux`) and
//! GNU (`--sort`) options mixed freely, with procps' second chance — when the first parse
//! fails, everything is parsed again as BSD options (`ps -aux` works) — and procps' exact
//! error messages, so scripts that check them keep working.
//!
//! The result is an [`Opts`]: what to select, which columns (already expanded from macros
//! such as `-f` or `u`, or parsed from AIX descriptors such as `%p`), how to sort, and the
//! display flags. `$PS_PERSONALITY` changes all of these as it does in procps: which macros
//! the standard formats use, BSD-only parsing, what `h`, `m` and `-x` mean, whether `g` is
//! implied. Every option and format specifier procps accepts is honoured.

use super::specs::{self, Pr, Spec, Sr};
use crate::cnum;
use crate::names::{self, Ttys};

/// procps' output buffer size; also the width of "unlimited" output.
pub const OUTBUF_SIZE: i32 = 2 * 64 * 1024;
/// procps' COLWID: the room a column printed with snprintf() gets.
pub const COLWID: usize = 240;

/// Format flags (procps `FF_*`).
pub mod ff {
    #![allow(missing_docs)]
    pub const UF: u32 = 1 << 0;
    pub const UL: u32 = 1 << 1;
    pub const UJ: u32 = 1 << 2;
    pub const BJ: u32 = 1 << 3;
    pub const BL: u32 = 1 << 4;
    pub const BS: u32 = 1 << 5;
    pub const BU: u32 = 1 << 6;
    pub const BV: u32 = 1 << 7;
    pub const LX: u32 = 1 << 8;
    pub const LM: u32 = 1 << 9;
    pub const FC: u32 = 1 << 10;
}

/// Format modifiers (procps `FM_*`).
pub mod fm {
    #![allow(missing_docs)]
    pub const C: u32 = 1 << 0;
    pub const J: u32 = 1 << 1;
    pub const Y: u32 = 1 << 2;
    pub const P: u32 = 1 << 3;
    pub const M: u32 = 1 << 4;
    pub const F: u32 = 1 << 5;
}

/// Thread flags (procps `TF_*`).
pub mod tf {
    #![allow(missing_docs)]
    pub const B_H: u32 = 1 << 0;
    pub const B_M: u32 = 1 << 1;
    pub const U_M: u32 = 1 << 2;
    pub const U_T: u32 = 1 << 3;
    pub const U_L: u32 = 1 << 4;
    pub const SHOW_PROC: u32 = 1 << 8;
    pub const LOOSE_TASKS: u32 = 1 << 9;
    pub const SHOW_TASK: u32 = 1 << 10;
    pub const SHOW_BOTH: u32 = 1 << 11;
    pub const MUST_USE: u32 = 1 << 12;
}

/// Simple selections (procps `SS_*`).
pub mod ss {
    #![allow(missing_docs)]
    pub const U_A: u32 = 1;
    pub const U_D: u32 = 2;
    pub const B_X: u32 = 4;
    pub const B_G: u32 = 8;
    pub const B_A: u32 = 16;
}

/// Personality bits (procps `PER_*`; the ones procps 4.0.2 sets and tests).
mod per {
    pub const BSD_H: u32 = 0x0002;
    pub const BSD_M: u32 = 0x0004;
    pub const IRIX_L: u32 = 0x0008;
    pub const FORCE_BSD: u32 = 0x0010;
    pub const GOOD_O: u32 = 0x0020;
    pub const OLD_M: u32 = 0x0040;
    pub const NO_DEFAULT_G: u32 = 0x0080;
    pub const ZAP_ADDR: u32 = 0x0100;
    pub const SANE_USER: u32 = 0x0200;
    pub const HPUX_X: u32 = 0x0400;
    pub const SVR4_X: u32 = 0x0800;
}

/// What `$PS_PERSONALITY` (else `$CMD_ENV`) chose, as procps' set_personality decides it:
/// flag bits, whether BSD defaults are preferred, and the macros behind the standard formats
/// (a SysV one that is `None` is built column by column instead).
#[derive(Debug, Clone, Copy)]
struct Personality {
    bits: u32,
    prefer_bsd_defaults: bool,
    bsd_j: &'static str,
    bsd_l: &'static str,
    bsd_s: &'static str,
    bsd_u: &'static str,
    bsd_v: &'static str,
    sysv_f: Option<&'static str>,
    sysv_fl: Option<&'static str>,
    sysv_j: Option<&'static str>,
    sysv_l: Option<&'static str>,
}

impl Personality {
    /// procps set_personality. A name procps does not know (or longer than 15 bytes) is the
    /// default personality: procps ignores its own "unknown personality" message.
    fn from_env(env: &Env) -> Personality {
        let mut p = Personality {
            bits: 0,
            prefer_bsd_defaults: false,
            bsd_j: "OL_j",
            bsd_l: "OL_l",
            bsd_s: "OL_s",
            bsd_u: "OL_u",
            bsd_v: "OL_v",
            sysv_f: None,
            sysv_fl: None,
            sysv_j: None,
            sysv_l: None,
        };
        let name = match env.personality.as_deref() {
            _ if env.broken => "old",
            Some(s) if !s.is_empty() => s,
            _ => "unknown",
        };
        if name.len() > 15 {
            return p;
        }
        let freebsd = |p: &mut Personality| {
            p.bsd_j = "FB_j";
            p.bsd_l = "FB_l";
            p.bsd_u = "FB_u";
            p.bsd_v = "FB_v";
        };
        match name.to_ascii_lowercase().as_str() {
            "bsd" => {
                p.bits = per::FORCE_BSD | per::BSD_H | per::BSD_M;
                p.prefer_bsd_defaults = true;
                freebsd(&mut p);
            }
            "old" => {
                p.bits = per::FORCE_BSD | per::OLD_M;
                p.prefer_bsd_defaults = true;
            }
            "debian" | "gnu" => {
                p.bits = per::GOOD_O | per::OLD_M;
                p.prefer_bsd_defaults = true;
                p.sysv_f = Some("RD_f");
                p.sysv_j = Some("RD_j");
                p.sysv_l = Some("RD_l");
            }
            "linux" => p.bits = per::GOOD_O | per::ZAP_ADDR | per::SANE_USER,
            "aix" => freebsd(&mut p),
            "tru64" | "compaq" | "digital" => {
                p.bits = per::GOOD_O | per::BSD_H;
                p.prefer_bsd_defaults = true;
                p.sysv_f = Some("F5FMT");
                p.sysv_fl = Some("FL5FMT");
                p.sysv_j = Some("JFMT");
                p.sysv_l = Some("L5FMT");
                p.bsd_j = "JFMT";
                p.bsd_l = "LFMT";
                p.bsd_s = "SFMT";
                p.bsd_u = "UFMT";
                p.bsd_v = "VFMT";
            }
            "sunos4" => {
                p.bits = per::NO_DEFAULT_G;
                p.prefer_bsd_defaults = true;
                freebsd(&mut p);
            }
            // Irix, unless $_XPG asks for standard behaviour.
            "irix" | "sgi" => {
                let xpg = env.xpg.as_deref().and_then(|x| x.bytes().next());
                if !matches!(xpg, Some(b'1'..=b'9')) {
                    p.bits = per::IRIX_L;
                }
            }
            "os390" | "s390" | "390" => p.sysv_j = Some("J390"),
            "hp" | "hpux" => p.bits = per::HPUX_X,
            "svr4" | "sysv" | "sco" => p.bits = per::SVR4_X,
            // posix, solaris2, unix95, unix98, unix, default, unknown and names procps does
            // not know: the defaults.
            _ => {}
        }
        p
    }
}

/// Header repetition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heading {
    /// One header line.
    Single,
    /// A header every screenful.
    Multi,
    /// No header.
    None,
}

/// What a selection list matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum SelKind {
    Ruid,
    Euid,
    Rgid,
    Egid,
    Pgrp,
    Pid,
    PidQuick,
    Ppid,
    Tty,
    Sess,
    Comm,
}

/// One selection list (`-p 1,2`, `-u root`, ...).
#[derive(Clone, Debug)]
pub struct SelNode {
    /// What the values are.
    pub kind: SelKind,
    /// Numeric values (ids, tty numbers).
    pub ids: Vec<u32>,
    /// Command names for [`SelKind::Comm`].
    pub cmds: Vec<Vec<u8>>,
}

/// One output column.
#[derive(Clone, Debug)]
pub struct Col {
    /// The specifier, or `None` for literal AIX text.
    pub spec: Option<&'static Spec>,
    /// Header text.
    pub name: Vec<u8>,
    /// Width.
    pub width: i32,
    /// [`specs::cf`] flags.
    pub flags: u32,
}

impl Col {
    /// The printer; AIX literal text has none.
    pub fn pr(&self) -> Option<Pr> {
        self.spec.map(|s| s.pr)
    }
}

/// One sort key.
#[derive(Clone, Copy, Debug)]
pub struct SortKey {
    /// What to compare.
    pub sr: Sr,
    /// Descending.
    pub reverse: bool,
    /// The specifier named (for error messages).
    pub name: &'static str,
}

/// Why the command line was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// procps would reject it too, with this message.
    Procps(String),
    /// procps rejects the combination after parsing, or fails while parsing, with this
    /// message, no usage text and no second chance.
    Fatal(String),
}

type R<T> = Result<T, ArgError>;

fn err<T>(m: &str) -> R<T> {
    Err(ArgError::Procps(m.to_string()))
}

/// procps catastrophic_failure in sortformat.c: its message as error_at_line prints it, and
/// an immediate exit, without the BSD second chance.
fn catastrophic<T>(o: &Opts, line: u32, m: &str) -> R<T> {
    Err(ArgError::Fatal(format!(
        "{}:src/ps/sortformat.c:{line}: {m}",
        o.program
    )))
}

/// Where a sort/format list came from (procps `SF_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SfCode {
    UO, // -O
    Uo, // -o
    BO, // O
    Bo, // o
    Bm, // m of the bsd personality: a sort
    Gsort,
    Gformat,
}

#[derive(Debug, Clone)]
struct SfNode {
    sf: Vec<u8>,
    code: SfCode,
}

/// Everything the command line decided.
#[derive(Debug, Clone)]
pub struct Opts {
    /// `-e`, `-A`, `ax`.
    pub all_processes: bool,
    /// BSD `c`: true command name in args.
    pub bsd_c_option: bool,
    /// BSD `e`: the environment after the command.
    pub bsd_e_option: bool,
    /// 0, or 'u' (`-H`), 'b' (`f`), 'g' (`--forest`).
    pub forest_type: u8,
    /// [`ff`] bits.
    pub format_flags: u32,
    /// [`fm`] bits.
    pub format_modifiers: u32,
    /// Header mode.
    pub header: Heading,
    /// BSD `S`, `--cumulative`.
    pub include_dead_children: bool,
    /// `-N`, `--deselect`.
    pub negate_selection: bool,
    /// BSD `r`.
    pub running_only: bool,
    /// Columns.
    pub screen_cols: i32,
    /// Rows.
    pub screen_rows: i32,
    /// Selection lists, newest first.
    pub selection: Vec<SelNode>,
    /// [`ss`] bits.
    pub simple_select: u32,
    /// Sort keys in the order procps applies them (the last is the primary key).
    pub sort: Vec<SortKey>,
    /// Columns in display order.
    pub format: Vec<Col>,
    /// [`tf`] bits.
    pub thread_flags: u32,
    /// `-f`: comm shows the command line.
    pub unix_f_option: bool,
    /// BSD `n`.
    pub user_is_number: bool,
    /// BSD `n`.
    pub wchan_is_number: bool,
    /// BSD defaults (any BSD option or bare pid seen).
    pub prefer_bsd_defaults: bool,
    /// Our effective uid.
    pub cached_euid: u32,
    /// Our controlling terminal (tty_nr encoding).
    pub cached_tty: u32,
    /// `--help` was asked for.
    pub help: bool,
    /// `--version`, `-V`, `V` was asked for.
    pub version: bool,
    /// `L` was asked for: list the format specifiers.
    pub list_specs: bool,
    /// `--info` was asked for: print [`Opts::info`] to standard error.
    pub info: bool,
    /// The personality's name as procps saves it (`$PS_PERSONALITY`, else `$CMD_ENV`, else
    /// "unknown").
    personality_text: String,
    /// procps' select_bits: the simple selections (`-a`, `-d`, `a`, `x`, `g` and the
    /// default) as a table of which of the 16 kinds of process to take ([`Opts::table_accepts`]).
    pub select_bits: u32,
    /// A warning to print (`$PS_FORMAT` ignored, bogus screen size).
    pub warnings: Vec<String>,
    per: Personality,
    w_count: u32,
    force_bsd: bool,
    sf_list: Vec<SfNode>,
    have_gnu_sort: bool,
    already_parsed_sort: bool,
    already_parsed_format: bool,
    pid_width: i32,
    ps_format: Option<Vec<u8>>,
    program: String,
}

/// The environment ps consults, gathered once (so tests can supply their own).
#[derive(Debug, Clone)]
pub struct Env {
    /// Terminal columns and rows when standard output is a terminal.
    pub winsize: Option<(i32, i32)>,
    /// Whether standard output is a terminal.
    pub stdout_tty: bool,
    /// `$COLUMNS`.
    pub columns: Option<String>,
    /// `$LINES`.
    pub lines: Option<String>,
    /// `$PS_FORMAT`.
    pub ps_format: Option<String>,
    /// `$PS_PERSONALITY`, else `$CMD_ENV`.
    pub personality: Option<String>,
    /// `$_XPG` (read by the irix personality).
    pub xpg: Option<String>,
    /// The name procps' internal-error messages start with (its program_invocation_name).
    pub program: String,
    /// `$I_WANT_A_BROKEN_PS` is set.
    pub broken: bool,
    /// Our euid.
    pub euid: u32,
    /// Our tty (tty_nr encoding).
    pub tty: u32,
    /// Digits of pid_max.
    pub pid_width: i32,
}

impl Opts {
    /// procps' `--info` report (`self_info`): the personality's standard formats, the version,
    /// the header and screen settings, the personality, and who and where ps runs. procps' lines
    /// about its own build (glibc and gcc versions, `sizeof(proc_t)`) are this build's facts.
    pub fn info(&self) -> String {
        let p = &self.per;
        let none = |f: Option<&str>| f.unwrap_or("(none)").to_string();
        let page = {
            // SAFETY: sysconf has no preconditions.
            let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            if n > 0 {
                n
            } else {
                4096
            }
        };
        let major = (self.cached_tty >> 8) & 0xfff;
        let minor = (self.cached_tty & 0xff) | ((self.cached_tty >> 12) & 0xfff00);
        format!(
            "BSD j    {}\nBSD l    {}\nBSD s    {}\nBSD u    {}\nBSD v    {}\n\
             SysV -f  {}\nSysV -fl {}\nSysV -j  {}\nSysV -l  {}\n\n\
             ps from taskdiag {} (procps-ng 4.0.2 compatible)\n\n\
             header_gap=-1 lines_to_next_header=1\n\
             screen_cols={} screen_rows={}\n\n\
             personality=0x{:08x} (from \"{}\")\n\
             EUID={} TTY={},{} page_size={}\n\
             archdefs: {}\n",
            p.bsd_j,
            p.bsd_l,
            p.bsd_s,
            p.bsd_u,
            p.bsd_v,
            none(p.sysv_f),
            none(p.sysv_fl),
            none(p.sysv_j),
            none(p.sysv_l),
            env!("CARGO_PKG_VERSION"),
            self.screen_cols,
            self.screen_rows,
            p.bits,
            self.personality_text,
            self.cached_euid as i32,
            major,
            minor,
            page,
            std::env::consts::ARCH,
        )
    }
}

/// `strtoul(s, &end, 0)`: (value, whether all of `s` was consumed).
pub fn strtoul0(s: &[u8]) -> (u64, bool) {
    let (v, used) = cnum::strtoul(s, 0);
    (v, used == s.len())
}

/// `strtol(s, &end, 0)` for the width options: Some when all of `s` is a number.
fn strtol0(s: &[u8]) -> Option<i64> {
    cnum::strtol_whole(s, 0)
}

impl Opts {
    fn new(env: &Env) -> Opts {
        let mut o = Opts {
            all_processes: false,
            bsd_c_option: false,
            bsd_e_option: false,
            forest_type: 0,
            format_flags: 0,
            format_modifiers: 0,
            header: Heading::Single,
            include_dead_children: false,
            negate_selection: false,
            running_only: false,
            screen_cols: 80,
            screen_rows: 24,
            selection: Vec::new(),
            simple_select: 0,
            sort: Vec::new(),
            format: Vec::new(),
            thread_flags: 0,
            unix_f_option: false,
            user_is_number: false,
            wchan_is_number: false,
            prefer_bsd_defaults: false,
            cached_euid: env.euid,
            cached_tty: env.tty,
            help: false,
            version: false,
            list_specs: false,
            info: false,
            personality_text: match env.personality.as_deref() {
                Some(s) if !s.is_empty() => s.to_string(),
                _ => "unknown".to_string(),
            },
            select_bits: 0,
            warnings: Vec::new(),
            per: Personality::from_env(env),
            w_count: 0,
            force_bsd: false,
            sf_list: Vec::new(),
            have_gnu_sort: false,
            already_parsed_sort: false,
            already_parsed_format: false,
            pid_width: env.pid_width,
            ps_format: env.ps_format.as_ref().map(|s| s.as_bytes().to_vec()),
            program: env.program.clone(),
        };
        o.set_screen_size(env);
        o.prefer_bsd_defaults = o.per.prefer_bsd_defaults;
        o
    }

    fn set_screen_size(&mut self, env: &Env) {
        let (mut cols, mut rows) = env.winsize.unwrap_or((80, 24));
        if !env.stdout_tty {
            cols = OUTBUF_SIZE;
        }
        let num = |v: &Option<String>| {
            v.as_deref()
                .filter(|s| !s.is_empty())
                .and_then(|s| strtol0(s.as_bytes()))
                .filter(|&t| t > 0 && t < OUTBUF_SIZE as i64)
        };
        if let Some(t) = num(&env.columns) {
            cols = t as i32;
        }
        if let Some(t) = num(&env.lines) {
            rows = t as i32;
        }
        if cols < 9 || rows < 2 {
            self.warnings.push(format!(
                "your {cols}x{rows} screen size is bogus. expect trouble"
            ));
        }
        self.screen_cols = cols;
        self.screen_rows = rows;
    }

    /// procps table_accept: whether select_bits takes a process with these traits (our
    /// euid, a session leader, without a terminal, on our terminal).
    pub fn table_accepts(&self, our_euid: bool, leader: bool, no_tty: bool, our_tty: bool) -> bool {
        let index =
            our_euid as u32 | (leader as u32) << 1 | (no_tty as u32) << 2 | (our_tty as u32) << 3;
        self.select_bits & (1 << index) != 0
    }

    /// Whether [`Opts::table_accepts`] looks at the euid (the selection needs credentials).
    pub fn table_needs_euid(&self) -> bool {
        (0..16).any(|i| (self.select_bits >> i) & 1 != (self.select_bits >> (i ^ 1)) & 1)
    }
}

/// procps arg_check_conflicts: checks after a successful parse, reported without usage.
fn check_conflicts(o: &Opts) -> R<()> {
    let quick = o
        .selection
        .iter()
        .filter(|s| s.kind == SelKind::PidQuick)
        .count();
    if quick > 1 {
        return Err(ArgError::Fatal(
            "q/-q/--quick-pid can only be used once.".into(),
        ));
    }
    if quick > 0 && o.selection.len() > quick {
        return Err(ArgError::Fatal(
            "q/-q/--quick-pid cannot be combined with other selection options.".into(),
        ));
    }
    if quick > 0 && o.forest_type != 0 {
        return Err(ArgError::Fatal(
            "q/-q/--quick-pid cannot be used together with forest type listings.".into(),
        ));
    }
    if quick > 0 && !o.sort.is_empty() {
        return Err(ArgError::Fatal(
            "q/-q,--quick-pid cannot be used together with sort options.".into(),
        ));
    }
    if quick > 0 && o.negate_selection {
        return Err(ArgError::Fatal(
            "q/-q/--quick-pid cannot be used together with negation switches.".into(),
        ));
    }
    Ok(())
}

/// Parses `args` (without the program name) like procps ps; the warnings it printed while
/// parsing are in [`Opts::warnings`].
pub fn parse(args: &[Vec<u8>], env: &Env) -> R<Opts> {
    let (r, warnings) = parse_with_warnings(args, env);
    r.map(|mut o| {
        o.warnings = warnings;
        o
    })
}

/// [`parse`], with the warnings apart: procps prints them as it parses, so they come out
/// before an error too (and twice when the BSD second chance sizes the screen again).
pub fn parse_with_warnings(args: &[Vec<u8>], env: &Env) -> (R<Opts>, Vec<String>) {
    let (r, warnings) = parse_inner(args, env);
    (r.and_then(|o| check_conflicts(&o).map(|()| o)), warnings)
}

fn parse_inner(args: &[Vec<u8>], env: &Env) -> (R<Opts>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut first_err = None;
    // procps sets up (and warns about the screen size) before parsing, and again for the
    // second chance; a personality that forces BSD parsing goes straight to that.
    let mut o = Opts::new(env);
    if o.per.bits & per::FORCE_BSD != 0 {
        warnings.append(&mut o.warnings);
    } else {
        let r = parse_pass(&mut o, args);
        warnings.append(&mut o.warnings);
        match r {
            Ok(()) => {
                choose_dimensions(&mut o);
                return (Ok(o), warnings);
            }
            Err(e @ ArgError::Fatal(_)) => return (Err(e), warnings),
            Err(e) => first_err = Some(e),
        }
    }
    // Second chance: everything as BSD options.
    let mut o = Opts::new(env);
    o.force_bsd = true;
    o.prefer_bsd_defaults = true;
    if o.per.bits & (per::OLD_M | per::BSD_M) == 0 {
        // Old Linux m rather than true BSD m.
        o.per.bits |= per::OLD_M;
    }
    let r = parse_pass(&mut o, args);
    warnings.append(&mut o.warnings);
    let r = match r {
        Ok(()) => {
            choose_dimensions(&mut o);
            Ok(o)
        }
        Err(e @ ArgError::Fatal(_)) => Err(e),
        // procps reports the first parse's error, or with a forced BSD personality this one.
        Err(e) => Err(first_err.unwrap_or(e)),
    };
    (r, warnings)
}

fn parse_pass(o: &mut Opts, args: &[Vec<u8>]) -> R<()> {
    parse_all_options(o, args)?;
    if o.help || o.version || o.list_specs || o.info {
        return Ok(());
    }
    thread_option_check(o)?;
    process_sf_options(o)?;
    select_setup(o)
}

fn choose_dimensions(o: &mut Opts) {
    if o.w_count > 0 && o.screen_cols < 132 {
        o.screen_cols = 132;
    }
    if o.w_count > 1 {
        o.screen_cols = OUTBUF_SIZE;
    }
}

#[derive(PartialEq)]
enum ArgType {
    Gnu,
    End,
    Pgrp,
    Sysv,
    Pid,
    Bsd,
    Fail,
    Sess,
}

fn arg_type(s: &[u8]) -> ArgType {
    let c = |i: usize| s.get(i).copied().unwrap_or(0);
    match c(0) {
        b'a'..=b'z' | b'A'..=b'Z' => return ArgType::Bsd,
        b'0'..=b'9' => return ArgType::Pid,
        b'+' => return ArgType::Sess,
        b'-' => {}
        _ => return ArgType::Fail,
    }
    match c(1) {
        b'a'..=b'z' | b'A'..=b'Z' => return ArgType::Sysv,
        b'0'..=b'9' => return ArgType::Pgrp,
        b'-' => {}
        _ => return ArgType::Fail,
    }
    match c(2) {
        b'a'..=b'z' | b'A'..=b'Z' => ArgType::Gnu,
        0 => ArgType::End,
        _ => ArgType::Fail,
    }
}

struct Cursor<'a> {
    args: &'a [Vec<u8>],
    i: usize,
}

impl Cursor<'_> {
    /// procps get_opt_arg: the rest of this word after `pos`, else the next word.
    fn opt_arg(&mut self, pos: usize) -> Option<Vec<u8>> {
        let cur = &self.args[self.i];
        if pos + 1 < cur.len() {
            return Some(cur[pos + 1..].to_vec());
        }
        let next = self.args.get(self.i + 1)?;
        if next.is_empty() {
            return None;
        }
        self.i += 1;
        Some(next.clone())
    }
}

fn parse_all_options(o: &mut Opts, args: &[Vec<u8>]) -> R<()> {
    let mut cur = Cursor { args, i: 0 };
    while cur.i < args.len() {
        match arg_type(&args[cur.i]) {
            ArgType::Gnu => parse_gnu_option(o, &mut cur)?,
            ArgType::Sysv if !o.force_bsd => parse_sysv_option(o, &mut cur)?,
            ArgType::Bsd if o.force_bsd && o.per.bits & per::FORCE_BSD == 0 => {
                return err("way bad")
            }
            ArgType::Sysv | ArgType::Bsd => {
                o.prefer_bsd_defaults = true;
                parse_bsd_option(o, &mut cur)?;
            }
            ArgType::Pgrp | ArgType::Sess | ArgType::Pid => {
                o.prefer_bsd_defaults = true;
                parse_trailing_pids(o, &mut cur)?;
            }
            ArgType::End | ArgType::Fail => return err("garbage option"),
        }
        cur.i += 1;
    }
    Ok(())
}

fn parse_pid(s: &[u8]) -> R<u32> {
    let (n, all) = strtoul0(s);
    if !all {
        return err("process ID list syntax error");
    }
    if !(1..=0x7fff_ffff).contains(&n) {
        return err("process ID out of range");
    }
    Ok(n as u32)
}

fn parse_uid(o: &Opts, s: &[u8]) -> R<u32> {
    let (mut n, all) = strtoul0(s);
    if !all {
        match std::str::from_utf8(s).ok().and_then(names::uid_of) {
            Some(u) => n = u as u64,
            None if !o.negate_selection => return err("user name does not exist"),
            None => n = u32::MAX as u64,
        }
    }
    if !o.negate_selection && n > 0xffff_fffe {
        return err("user ID out of range");
    }
    Ok(n as u32)
}

fn parse_gid(o: &Opts, s: &[u8]) -> R<u32> {
    let (mut n, all) = strtoul0(s);
    if !all {
        match std::str::from_utf8(s).ok().and_then(names::gid_of) {
            Some(g) => n = g as u64,
            None if !o.negate_selection => return err("group name does not exist"),
            None => n = u32::MAX as u64,
        }
    }
    if !o.negate_selection && n > 0xffff_fffe {
        return err("group ID out of range");
    }
    Ok(n as u32)
}

fn parse_tty(s: &[u8]) -> R<u32> {
    let name = String::from_utf8_lossy(s);
    Ttys::device(&name).map_err(|m| ArgError::Procps(m.to_string()))
}

/// Splits a list like procps parse_list: items separated by ' ', ',' or '\t'; empty items
/// are an "improper list".
fn split_list(arg: &[u8]) -> R<Vec<&[u8]>> {
    let is_sep = |c: u8| c == b' ' || c == b',' || c == b'\t';
    if arg.is_empty() {
        return err("improper list");
    }
    let parts: Vec<&[u8]> = arg.split(|&c| is_sep(c)).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return err("improper list");
    }
    Ok(parts)
}

#[derive(Clone, Copy)]
enum ListKind {
    Pid,
    Uid,
    Gid,
    Tty,
    Cmd,
}

fn parse_list(o: &mut Opts, arg: &[u8], lk: ListKind, kind: SelKind) -> R<()> {
    let parts = split_list(arg)?;
    let mut node = SelNode {
        kind,
        ids: Vec::new(),
        cmds: Vec::new(),
    };
    for p in parts {
        match lk {
            ListKind::Pid => node.ids.push(parse_pid(p)?),
            ListKind::Uid => node.ids.push(parse_uid(o, p)?),
            ListKind::Gid => node.ids.push(parse_gid(o, p)?),
            ListKind::Tty => node.ids.push(parse_tty(p)?),
            ListKind::Cmd => node.cmds.push(p.iter().copied().take(63).collect()),
        }
    }
    o.selection.insert(0, node);
    Ok(())
}

fn defer_sf_option(o: &mut Opts, arg: Vec<u8>, code: SfCode) {
    if code == SfCode::Gsort {
        o.have_gnu_sort = true;
    }
    o.sf_list.push(SfNode { sf: arg, code });
}

fn parse_sysv_option(o: &mut Opts, cur: &mut Cursor<'_>) -> R<()> {
    let word = cur.args[cur.i].clone();
    let mut pos = 1;
    while pos < word.len() {
        let c = word[pos];
        let list = |o: &mut Opts, cur: &mut Cursor<'_>, missing: &str, lk, kind| -> R<()> {
            let Some(arg) = cur.opt_arg(pos) else {
                return err(missing);
            };
            parse_list(o, &arg, lk, kind)
        };
        match c {
            b'A' | b'e' => o.all_processes = true,
            b'C' => {
                return list(
                    o,
                    cur,
                    "list of command names must follow -C",
                    ListKind::Cmd,
                    SelKind::Comm,
                )
            }
            b'D' => return err("unsupported SysV option"),
            b'F' => {
                o.format_modifiers |= fm::F;
                o.format_flags |= ff::UF;
                o.unix_f_option = true;
            }
            b'G' => {
                return list(
                    o,
                    cur,
                    "list of real groups must follow -G",
                    ListKind::Gid,
                    SelKind::Rgid,
                )
            }
            b'H' => o.forest_type = b'u',
            b'L' => o.thread_flags |= tf::U_L,
            b'M' | b'Z' => o.format_modifiers |= fm::M,
            b'N' => o.negate_selection = true,
            b'O' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("format or sort specification must follow -O");
                };
                defer_sf_option(o, arg, SfCode::UO);
                return Ok(());
            }
            b'P' => o.format_modifiers |= fm::P,
            b'T' => o.thread_flags |= tf::U_T,
            b'U' => {
                return list(
                    o,
                    cur,
                    "list of real users must follow -U",
                    ListKind::Uid,
                    SelKind::Ruid,
                )
            }
            b'V' => {
                if cur.args.len() != 1 || cur.args[0] != b"-V" {
                    return err("the option is exclusive: -V");
                }
                o.version = true;
            }
            b'a' => o.simple_select |= ss::U_A,
            b'c' => o.format_modifiers |= fm::C,
            b'd' => o.simple_select |= ss::U_D,
            b'f' => {
                o.format_flags |= ff::UF;
                o.unix_f_option = true;
            }
            b'g' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("list of session leaders OR effective group names must follow -g");
                };
                if parse_list(o, &arg, ListKind::Pid, SelKind::Sess).is_ok() {
                    return Ok(());
                }
                if parse_list(o, &arg, ListKind::Gid, SelKind::Egid).is_ok() {
                    return Ok(());
                }
                return err("list of session leaders OR effective group IDs was invalid");
            }
            // Old Debian's RD_j and Digital's JFMT replace the -j modifier.
            b'j' if o.per.sysv_j.is_some() => o.format_flags |= ff::UJ,
            b'j' => o.format_modifiers |= fm::J,
            b'l' => o.format_flags |= ff::UL,
            b'm' => o.thread_flags |= tf::U_M,
            b'o' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("format specification must follow -o");
                };
                defer_sf_option(o, arg, SfCode::Uo);
                return Ok(());
            }
            b'p' => {
                return list(
                    o,
                    cur,
                    "list of process IDs must follow -p",
                    ListKind::Pid,
                    SelKind::Pid,
                )
            }
            b'q' => {
                return list(
                    o,
                    cur,
                    "List of process IDs must follow -q.",
                    ListKind::Pid,
                    SelKind::PidQuick,
                )
            }
            b's' => {
                return list(
                    o,
                    cur,
                    "list of session IDs must follow -s",
                    ListKind::Pid,
                    SelKind::Sess,
                )
            }
            b't' => {
                return list(
                    o,
                    cur,
                    "list of terminals (pty, tty...) must follow -t",
                    ListKind::Tty,
                    SelKind::Tty,
                )
            }
            b'u' => {
                return list(
                    o,
                    cur,
                    "list of users must follow -u",
                    ListKind::Uid,
                    SelKind::Euid,
                )
            }
            b'w' => o.w_count += 1,
            // Behind a personality until the "ps -ax" habit is uncommon.
            b'x' if o.per.bits & per::SVR4_X != 0 => o.format_modifiers |= fm::Y,
            b'x' if o.per.bits & per::HPUX_X != 0 => {
                o.w_count += 2;
                o.unix_f_option = true;
            }
            b'x' => return err("must set personality to get -x option"),
            b'y' => o.format_modifiers |= fm::Y,
            b'-' => return err("embedded '-' among SysV options makes no sense"),
            _ => return err("unsupported SysV option"),
        }
        pos += 1;
    }
    Ok(())
}

fn my_tty_node(o: &mut Opts) {
    o.selection.insert(
        0,
        SelNode {
            kind: SelKind::Tty,
            ids: vec![o.cached_tty],
            cmds: Vec::new(),
        },
    );
}

fn parse_bsd_option(o: &mut Opts, cur: &mut Cursor<'_>) -> R<()> {
    let word = cur.args[cur.i].clone();
    let mut pos = if word.first() == Some(&b'-') {
        if !o.force_bsd {
            return err("cannot happen - problem #1");
        }
        1
    } else if o.per.bits & per::FORCE_BSD != 0 {
        if !o.force_bsd {
            return err("cannot happen - problem #2");
        }
        0
    } else {
        if o.force_bsd {
            return err("second chance parse failed, not BSD or SysV");
        }
        0
    };
    while pos < word.len() {
        let c = word[pos];
        match c {
            b'0'..=b'9' => {
                return parse_list(o, &word[pos..], ListKind::Pid, SelKind::Pid);
            }
            b'H' => o.thread_flags |= tf::B_H,
            b'L' => {
                if cur.args.len() != 1 || cur.args[0] != b"L" {
                    return err("the option is exclusive: L");
                }
                o.list_specs = true;
            }
            b'M' => o.thread_flags |= tf::B_M,
            b'O' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("format or sort specification must follow O");
                };
                defer_sf_option(o, arg, SfCode::BO);
                return Ok(());
            }
            b'S' => o.include_dead_children = true,
            b'T' => my_tty_node(o),
            b'U' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("list of users must follow U");
                };
                return parse_list(o, &arg, ListKind::Uid, SelKind::Euid);
            }
            b'V' => {
                if cur.args.len() != 1 || cur.args[0] != b"V" {
                    return err("the option is exclusive: V");
                }
                o.version = true;
            }
            b'W' => return err("obsolete W option not supported (you have a /dev/drum?)"),
            b'X' => o.format_flags |= ff::LX,
            b'Z' => o.format_modifiers |= fm::M,
            b'a' => o.simple_select |= ss::B_A,
            b'c' => o.bsd_c_option = true,
            b'e' => o.bsd_e_option = true,
            b'f' => o.forest_type = b'b',
            b'g' => o.simple_select |= ss::B_G,
            b'h' => {
                if o.header != Heading::Single {
                    return err("only one heading option may be specified");
                }
                o.header = if o.per.bits & per::BSD_H != 0 {
                    Heading::Multi
                } else {
                    Heading::None
                };
            }
            b'j' => o.format_flags |= ff::BJ,
            b'k' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("long sort specification must follow 'k'");
                };
                defer_sf_option(o, arg, SfCode::Gsort);
                return Ok(());
            }
            b'l' => o.format_flags |= ff::BL,
            b'm' => {
                if o.per.bits & per::OLD_M != 0 {
                    o.format_flags |= ff::LM;
                } else if o.per.bits & per::BSD_M != 0 {
                    // True BSD: sort by memory use.
                    defer_sf_option(o, b"pmem".to_vec(), SfCode::Bm);
                } else {
                    o.thread_flags |= tf::B_M;
                }
            }
            b'n' => {
                o.wchan_is_number = true;
                o.user_is_number = true;
            }
            b'o' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("format specification must follow o");
                };
                defer_sf_option(o, arg, SfCode::Bo);
                return Ok(());
            }
            b'p' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("list of process IDs must follow p");
                };
                return parse_list(o, &arg, ListKind::Pid, SelKind::Pid);
            }
            b'q' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    return err("List of process IDs must follow q.");
                };
                return parse_list(o, &arg, ListKind::Pid, SelKind::PidQuick);
            }
            b'r' => o.running_only = true,
            b's' => o.format_flags |= ff::BS,
            b't' => {
                let Some(arg) = cur.opt_arg(pos) else {
                    my_tty_node(o);
                    return Ok(());
                };
                return parse_list(o, &arg, ListKind::Tty, SelKind::Tty);
            }
            b'u' => o.format_flags |= ff::BU,
            b'v' => o.format_flags |= ff::BV,
            b'w' => o.w_count += 1,
            b'x' => o.simple_select |= ss::B_X,
            b'-' => return err("embedded '-' among BSD options makes no sense"),
            _ => return err("unsupported option (BSD syntax)"),
        }
        pos += 1;
    }
    Ok(())
}

fn parse_gnu_option(o: &mut Opts, cur: &mut Cursor<'_>) -> R<()> {
    let word = cur.args[cur.i].clone();
    let s = &word[2..];
    let sl = s
        .iter()
        .position(|&c| c == b':' || c == b'=')
        .unwrap_or(s.len());
    if sl > 15 {
        return err("unknown gnu long option");
    }
    let name = &s[..sl];
    let has_arg_suffix = sl < s.len();
    // grab_gnu_arg: after '=' or ':', else the next word.
    let grab = |cur: &mut Cursor<'_>| -> Option<Vec<u8>> {
        if has_arg_suffix {
            let v = &s[sl + 1..];
            return (!v.is_empty()).then(|| v.to_vec());
        }
        let next = cur.args.get(cur.i + 1)?;
        if next.is_empty() {
            return None;
        }
        cur.i += 1;
        Some(next.clone())
    };
    let no_arg = |m: &str| -> R<()> {
        if has_arg_suffix {
            err(m)
        } else {
            Ok(())
        }
    };
    match name {
        b"Group" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Gid, SelKind::Rgid),
            None => err("list of real groups must follow --Group"),
        },
        b"User" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Uid, SelKind::Ruid),
            None => err("list of real users must follow --User"),
        },
        b"cols" | b"width" | b"columns" => {
            if let Some(t) = grab(cur).and_then(|a| strtol0(&a)) {
                if t > 0 && t < 2_000_000_000 {
                    o.screen_cols = t as i32;
                    return Ok(());
                }
            }
            err("number of columns must follow --cols, --width, or --columns")
        }
        b"context" => {
            o.format_flags |= ff::FC;
            Ok(())
        }
        b"cumulative" => {
            no_arg("option --cumulative does not take an argument")?;
            o.include_dead_children = true;
            Ok(())
        }
        b"deselect" => {
            no_arg("option --deselect does not take an argument")?;
            o.negate_selection = true;
            Ok(())
        }
        b"no-header" | b"no-headers" | b"no-heading" | b"no-headings" | b"noheader"
        | b"noheaders" | b"noheading" | b"noheadings" => {
            no_arg("option --no-heading does not take an argument")?;
            if o.header != Heading::Single {
                return err("only one heading option may be specified");
            }
            o.header = Heading::None;
            Ok(())
        }
        b"header" | b"headers" | b"heading" | b"headings" => {
            no_arg("option --heading does not take an argument")?;
            if o.header != Heading::Single {
                return err("only one heading option may be specified");
            }
            o.header = Heading::Multi;
            Ok(())
        }
        b"forest" => {
            no_arg("option --forest does not take an argument")?;
            o.forest_type = b'g';
            Ok(())
        }
        b"format" => match grab(cur) {
            Some(a) => {
                defer_sf_option(o, a, SfCode::Gformat);
                Ok(())
            }
            None => err("format specification must follow --format"),
        },
        b"group" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Gid, SelKind::Egid),
            None => err("list of effective groups must follow --group"),
        },
        b"help" => {
            o.help = true;
            Ok(())
        }
        b"info" => {
            if cur.args.len() != 1 || cur.args[0] != b"--info" {
                return err("the option is exclusive: --info");
            }
            o.info = true;
            Ok(())
        }
        b"pid" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Pid, SelKind::Pid),
            None => err("list of process IDs must follow --pid"),
        },
        b"quick-pid" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Pid, SelKind::PidQuick),
            None => err("List of process IDs must follow --quick-pid."),
        },
        b"ppid" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Pid, SelKind::Ppid),
            None => err("list of process IDs must follow --ppid"),
        },
        b"rows" | b"lines" => {
            if let Some(t) = grab(cur).and_then(|a| strtol0(&a)) {
                if t > 0 && t < 2_000_000_000 {
                    o.screen_rows = t as i32;
                    return Ok(());
                }
            }
            err("number of rows must follow --rows or --lines")
        }
        b"sid" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Pid, SelKind::Sess),
            None => err("some sid thing(s) must follow --sid"),
        },
        b"sort" => match grab(cur) {
            Some(a) => {
                defer_sf_option(o, a, SfCode::Gsort);
                Ok(())
            }
            None => err("long sort specification must follow --sort"),
        },
        b"tty" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Tty, SelKind::Tty),
            None => err("list of ttys must follow --tty"),
        },
        b"user" => match grab(cur) {
            Some(a) => parse_list(o, &a, ListKind::Uid, SelKind::Euid),
            None => err("list of effective users must follow --user"),
        },
        b"version" => {
            if cur.args.len() != 1 || cur.args[0] != b"--version" {
                return err("the option is exclusive: --version");
            }
            o.version = true;
            Ok(())
        }
        _ => err("unknown gnu long option"),
    }
}

fn parse_trailing_pids(o: &mut Opts, cur: &mut Cursor<'_>) -> R<()> {
    let rest = &cur.args[cur.i..];
    cur.i = cur.args.len() - 1;
    let (mut pids, mut grps, mut sids) = (Vec::new(), Vec::new(), Vec::new());
    for data in rest {
        match data.first() {
            Some(b'-') => grps.push(parse_pid(&data[1..])?),
            Some(b'+') => sids.push(parse_pid(&data[1..])?),
            _ => pids.push(parse_pid(data)?),
        }
    }
    for (ids, kind) in [
        (pids, SelKind::Pid),
        (grps, SelKind::Pgrp),
        (sids, SelKind::Sess),
    ] {
        if !ids.is_empty() {
            o.selection.insert(
                0,
                SelNode {
                    kind,
                    ids,
                    cmds: Vec::new(),
                },
            );
        }
    }
    Ok(())
}

fn thread_option_check(o: &mut Opts) -> R<()> {
    if o.thread_flags == 0 {
        o.thread_flags = tf::SHOW_PROC;
        return Ok(());
    }
    if o.forest_type != 0 {
        return err("thread display conflicts with forest display");
    }
    let t = o.thread_flags;
    if t & tf::B_H != 0 && t & (tf::B_M | tf::U_M) != 0 {
        return err("thread flags conflict; can't use H with m or -m");
    }
    if t & tf::B_M != 0 && t & tf::U_M != 0 {
        return err("thread flags conflict; can't use both m and -m");
    }
    if t & tf::U_L != 0 && t & tf::U_T != 0 {
        return err("thread flags conflict; can't use both -L and -T");
    }
    if t & tf::B_H != 0 {
        o.thread_flags |= tf::SHOW_PROC | tf::LOOSE_TASKS;
    }
    if t & (tf::B_M | tf::U_M) != 0 {
        o.thread_flags |= tf::SHOW_PROC | tf::SHOW_TASK | tf::SHOW_BOTH;
    }
    if t & (tf::U_T | tf::U_L) != 0 {
        if t & (tf::B_M | tf::U_M | tf::B_H) != 0 {
            o.thread_flags |= tf::MUST_USE;
        } else {
            o.thread_flags |= tf::SHOW_TASK;
        }
    }
    Ok(())
}

/// procps do_one_spec: a column (or a macro's columns, in order).
fn do_one_spec(o: &Opts, spec: &[u8], over: Option<&[u8]>) -> Option<Vec<Col>> {
    if let Some(fs) = specs::find(spec) {
        let w1 = if fs.flags & specs::cf::PIDMAX != 0 {
            o.pid_width.max(fs.head.len() as i32)
        } else {
            fs.width
        };
        let (width, name) = match over {
            Some(h) => (w1.max(h.len() as i32), h.to_vec()),
            None => (w1, fs.head.as_bytes().to_vec()),
        };
        return Some(vec![Col {
            spec: Some(fs),
            name,
            width,
            flags: fs.flags,
        }]);
    }
    let m = specs::MACROS.iter().find(|(n, _)| n.as_bytes() == spec)?;
    let mut v = Vec::new();
    for item in m.1.split(',') {
        v.extend(do_one_spec(o, item.as_bytes(), over)?);
    }
    Some(v)
}

fn is_fmt_sep(c: u8) -> bool {
    matches!(c, b' ' | b',' | b'\t' | b'\n')
}

/// procps format_parse: columns of one -o/o/--format/-O/O list or `$PS_FORMAT`. A list
/// that fails and has a `%` in it is parsed again as AIX descriptors, whose columns follow
/// those the first parse made before it failed (procps keeps them: `c %p` shows C, then PID).
fn format_parse(o: &Opts, sf: &[u8]) -> Result<Vec<Col>, String> {
    let mut cols = Vec::new();
    match format_parse_into(o, sf, &mut cols) {
        Ok(()) => Ok(cols),
        Err(_) if sf.contains(&b'%') => {
            cols.extend(aix_format_parse(o, sf)?);
            Ok(cols)
        }
        Err(e) => Err(e),
    }
}

/// The list as specifiers, appending to `cols` as it goes.
fn format_parse_into(o: &Opts, sf: &[u8], cols: &mut Vec<Col>) -> Result<(), String> {
    let mut buf = sf.to_vec();
    let mut need_item = true;
    let mut items = 0;
    if buf.is_empty() {
        return Err("improper format list".into());
    }
    for &c in &buf {
        if is_fmt_sep(c) {
            if need_item {
                return Err("improper format list".into());
            }
            need_item = true;
        } else {
            if need_item {
                items += 1;
            }
            need_item = false;
        }
    }
    if items == 0 {
        return Err("empty format list".into());
    }
    if need_item {
        buf.pop();
    }
    let mut walk: &[u8] = &buf;
    for left in (0..items).rev() {
        let sep = walk.iter().position(|&c| is_fmt_sep(c));
        let (item, next) = match sep {
            Some(p) if left > 0 => (&walk[..p], &walk[p + 1..]),
            _ => (walk, &walk[walk.len()..]),
        };
        let (mut spec, over) = match item.iter().position(|&c| c == b'=') {
            Some(p) => (&item[..p], Some(&item[p + 1..])),
            None => (item, None),
        };
        let mut width = None;
        if let Some(p) = spec.iter().position(|&c| c == b':') {
            let w = &spec[p + 1..];
            spec = &spec[..p];
            let ok = !w.is_empty() && w[0] != b'0' && w.iter().all(u8::is_ascii_digit);
            let v: Option<i32> = std::str::from_utf8(w).ok().and_then(|s| s.parse().ok());
            match v.filter(|&v| ok && v > 0) {
                Some(v) => width = Some(v),
                None => return Err("column widths must be unsigned decimal numbers".into()),
            }
        }
        let Some(mut fnode) = do_one_spec(o, spec, over) else {
            return Err(format!(
                "unknown user-defined format specifier \"{}\"",
                String::from_utf8_lossy(spec)
            ));
        };
        if let Some(w) = width {
            if fnode.len() > 1 {
                return Err("can not set width for a macro (multi-column) format specifier".into());
            }
            fnode[0].width = w;
        }
        cols.extend(fnode);
        walk = next;
    }
    Ok(())
}

/// procps aix_format_parse: `%` and a letter ([`specs::AIX`]) for a column under the AIX
/// header, anything else literal text printed on every line. As in procps, text between
/// descriptors is one character (then spaces), and a descriptor's letter is counted again as
/// text, so every descriptor is followed by a text column, maybe empty.
fn aix_format_parse(o: &Opts, sf: &[u8]) -> Result<Vec<Col>, String> {
    // Check the syntax and count the items (procps' state machine).
    let at = |i: usize| sf.get(i).copied().unwrap_or(0);
    let mut items = 0;
    let mut i = 0;
    let mut c = at(i);
    i += 1;
    'initial: loop {
        if c == b'%' {
            // get_desc
            items += 1;
            c = at(i);
            i += 1;
            if c != 0 && c != b' ' {
                continue 'initial;
            }
            return Err("missing AIX field descriptor".into());
        }
        if c == 0 {
            break;
        }
        // get_text
        items += 1;
        loop {
            c = at(i);
            i += 1;
            match c {
                b'%' => continue 'initial,
                b' ' => {}
                0 => break 'initial,
                _ => return Err("improper AIX field descriptor".into()),
            }
        }
    }
    let mut cols = Vec::new();
    let mut walk = 0;
    for _ in 0..items {
        if at(walk) == b'%' {
            walk += 1;
            if at(walk) == b'%' {
                return Err("missing AIX field descriptor".into());
            }
            let letter = at(walk);
            walk += 1;
            let Some(&(_, spec, head)) = specs::AIX.iter().find(|a| a.0 == letter) else {
                return Err("unknown AIX field descriptor".into());
            };
            let Some(c) = do_one_spec(o, spec.as_bytes(), Some(head.as_bytes())) else {
                return Err("AIX field descriptor processing bug".into());
            };
            cols.extend(c);
        } else {
            let rest = sf.get(walk..).unwrap_or_default();
            let len = rest.iter().position(|&c| c == b'%').unwrap_or(rest.len());
            cols.push(text_col(&rest[..len]));
            walk += len;
        }
    }
    Ok(cols)
}

fn do_one_sort_spec(spec: &[u8]) -> Option<SortKey> {
    let (reverse, spec) = match spec.first() {
        Some(b'-') => (true, &spec[1..]),
        Some(b'+') => (false, &spec[1..]),
        _ => (false, spec),
    };
    let fs = specs::find(spec)?;
    Some(SortKey {
        sr: fs.sr,
        reverse,
        name: fs.name,
    })
}

/// procps long_sort_parse: keys in the order procps applies them (last key first).
fn long_sort_parse(sf: &[u8]) -> R<Vec<SortKey>> {
    let mut buf = sf.to_vec();
    let mut need_item = true;
    let mut items = 0;
    if buf.is_empty() {
        return err("improper sort list");
    }
    for &c in &buf {
        if is_fmt_sep(c) {
            if need_item {
                return err("improper sort list");
            }
            need_item = true;
        } else {
            if need_item {
                items += 1;
            }
            need_item = false;
        }
    }
    if items == 0 {
        return err("empty sort list");
    }
    if need_item {
        buf.pop();
    }
    let mut keys = Vec::new();
    for item in buf.split(|&c| is_fmt_sep(c)).take(items) {
        let Some(k) = do_one_sort_spec(item) else {
            return err("unknown sort specifier");
        };
        keys.insert(0, k);
    }
    Ok(keys)
}

fn verify_short_sort(o: &Opts, arg: &[u8]) -> Result<(), &'static str> {
    const ALL: &[u8] = b"CGJKMNPRSTUcfgjkmnoprstuvy+-";
    if !arg.iter().all(|c| ALL.contains(c)) {
        return Err("bad sorting code");
    }
    let mut seen = [false; 256];
    for (i, &c) in arg.iter().enumerate() {
        match c {
            b'+' | b'-' => {
                let n = arg.get(i + 1).copied().unwrap_or(0);
                if n == 0 || n == b'+' || n == b'-' {
                    return Err("bad sorting code");
                }
            }
            _ => {
                if c == b'P' && o.forest_type != 0 {
                    return Err("PPID sort and forest output conflict");
                }
                if seen[c as usize] {
                    return Err("bad sorting code");
                }
                seen[c as usize] = true;
            }
        }
    }
    Ok(())
}

fn short_sort_parse(arg: &[u8]) -> Vec<SortKey> {
    let mut keys = Vec::new();
    let mut reverse = false;
    for &c in arg {
        match c {
            b'+' => reverse = false,
            b'-' => reverse = true,
            _ => {
                // procps ignores this parser's errors: keys before an unknown code stay.
                let Some(&(_, spec)) = specs::SHORT_SORT.iter().find(|(k, _)| *k == c) else {
                    return keys;
                };
                let Some(mut k) = do_one_sort_spec(spec.as_bytes()) else {
                    return keys;
                };
                k.reverse = reverse;
                keys.insert(0, k);
                reverse = false;
            }
        }
    }
    keys
}

/// O_wrap: `pid`, the user's columns, then the default trailer.
fn o_wrap(o: &Opts, cols: Vec<Col>, bsd: bool) -> Vec<Col> {
    let mut v = do_one_spec(o, b"pid", None).unwrap_or_default();
    v.extend(cols);
    let trailer: &[u8] = if bsd { b"END_BSD" } else { b"END_SYS5" };
    v.extend(do_one_spec(o, trailer, None).unwrap_or_default());
    v
}

fn process_sf_options(o: &mut Opts) -> R<()> {
    let list = std::mem::take(&mut o.sf_list);
    let mut formats: Vec<Col> = Vec::new();
    let mut sorts: Vec<Vec<SortKey>> = Vec::new();
    for sfn in &list {
        match sfn.code {
            SfCode::Bo | SfCode::Gformat | SfCode::Uo => {
                formats.extend(format_parse(o, &sfn.sf).map_err(ArgError::Procps)?);
                o.already_parsed_format = true;
            }
            SfCode::UO => {
                if o.already_parsed_format {
                    return err("option -O can not follow other format options");
                }
                let cols = format_parse(o, &sfn.sf).map_err(ArgError::Procps)?;
                o.already_parsed_format = true;
                formats.extend(o_wrap(o, cols, false));
            }
            SfCode::BO => {
                let e = if o.have_gnu_sort || o.already_parsed_sort {
                    Err("multiple sort options")
                } else {
                    verify_short_sort(o, &sfn.sf)
                };
                match e {
                    Ok(()) => {
                        sorts.push(short_sort_parse(&sfn.sf));
                        o.already_parsed_sort = true;
                        continue;
                    }
                    Err(e) => {
                        if o.already_parsed_format {
                            return err("option O is neither first format nor sort order");
                        }
                        match format_parse(o, &sfn.sf) {
                            Ok(cols) => {
                                o.already_parsed_format = true;
                                formats.extend(o_wrap(o, cols, true));
                            }
                            Err(_) => return err(e),
                        }
                    }
                }
            }
            SfCode::Gsort | SfCode::Bm => {
                if o.already_parsed_sort {
                    return err("multiple sort options");
                }
                sorts.push(long_sort_parse(&sfn.sf)?);
                o.already_parsed_sort = true;
            }
        }
    }
    // Sort lists: procps prepends each option's keys, newest first.
    for keys in sorts {
        let mut merged = keys;
        merged.extend(std::mem::take(&mut o.sort));
        o.sort = merged;
    }
    o.format = formats;

    if o.format.is_empty() && o.format_flags == 0 && o.format_modifiers == 0 {
        if let Some(fmt) = o.ps_format.clone().filter(|f| !f.is_empty()) {
            if o.thread_flags & tf::MUST_USE != 0 {
                return err(
                    "tell <procps@freelists.org> what you want (-L/-T, -m/m/H, and $PS_FORMAT)",
                );
            }
            match format_parse(o, &fmt) {
                Ok(cols) => {
                    o.format = cols;
                    return Ok(());
                }
                Err(e) => o
                    .warnings
                    .push(format!("warning: $PS_FORMAT ignored. ({e})")),
            }
        }
    }
    if !o.format.is_empty() {
        if o.format_flags != 0 {
            return err("conflicting format options");
        }
        if o.format_modifiers != 0 {
            return err("can not use output modifiers with user-defined output");
        }
        if o.thread_flags & tf::MUST_USE != 0 {
            return err("-L/-T with H/m/-m and -o/-O/o/O is nonsense");
        }
        return Ok(());
    }
    let per = o.per;
    let spec: Option<&str> = match o.format_flags {
        0 => None,
        x if x == ff::UF | ff::UL => per.sysv_fl,
        ff::UF => per.sysv_f,
        ff::UL => per.sysv_l,
        ff::UJ => per.sysv_j,
        x if x == ff::UJ | ff::UL => Some("RD_lj"),
        x if x == ff::UJ | ff::UF => Some("RD_fj"),
        ff::BJ => Some(per.bsd_j),
        ff::BL => Some(per.bsd_l),
        ff::BS => Some(per.bsd_s),
        ff::BU => Some(per.bsd_u),
        ff::BV => Some(per.bsd_v),
        ff::LX => Some("OL_X"),
        ff::LM => Some("OL_m"),
        ff::FC => Some("FLASK_context"),
        _ => return err("conflicting format options"),
    };
    let Some(spec) = spec else {
        generate_sysv_list(o)?;
        return Ok(());
    };
    o.format = do_one_spec(o, spec.as_bytes(), None).unwrap_or_default();
    let fm_ = o.format_modifiers;
    if fm_ & fm::J != 0 {
        let pg = do_one_spec(o, b"pgid", None).unwrap_or_default();
        if !add_after(&mut o.format, b"PPID", pg.clone()) && !add_after(&mut o.format, b"PID", pg) {
            return catastrophic(o, 885, "internal error: no PID or PPID for -j option");
        }
        let sid = do_one_spec(o, b"sid", None).unwrap_or_default();
        if !add_after(&mut o.format, b"PGID", sid) {
            return err("lost my PGID");
        }
    }
    if fm_ & fm::Y != 0 {
        delete(&mut o.format, b"F");
        let rss = do_one_spec(o, b"rss", None).unwrap_or_default();
        if add_after(&mut o.format, b"ADDR", rss) {
            delete(&mut o.format, b"ADDR");
        }
    }
    if fm_ & fm::C != 0 {
        for h in [&b"%CPU"[..], b"CPU", b"CP", b"C", b"NI"] {
            delete(&mut o.format, h);
        }
        let cls = do_one_spec(o, b"class", None).unwrap_or_default();
        if !add_after(&mut o.format, b"PRI", cls) {
            return catastrophic(o, 900, "internal error: no PRI for -c option");
        }
        delete(&mut o.format, b"PRI");
        let pri = do_one_spec(o, b"pri", None).unwrap_or_default();
        if !add_after(&mut o.format, b"CLS", pri) {
            return err("lost my CLS");
        }
    }
    if o.thread_flags & tf::U_T != 0 {
        let spid = do_one_spec(o, b"spid", None).unwrap_or_default();
        if !add_after(&mut o.format, b"PID", spid) && o.thread_flags & tf::MUST_USE != 0 {
            return err("-T with H/-m/m but no PID for SPID to follow");
        }
    }
    if o.thread_flags & tf::U_L != 0 {
        let lwp = do_one_spec(o, b"lwp", None).unwrap_or_default();
        let mut done = false;
        for h in [&b"SID"[..], b"SESS", b"PGID", b"PGRP", b"PPID", b"PID"] {
            if add_after(&mut o.format, h, lwp.clone()) {
                done = true;
                break;
            }
        }
        if !done && o.thread_flags & tf::MUST_USE != 0 {
            return err("-L with H/-m/m but no PID/PGID/SID/SESS for NLWP to follow");
        }
        let nlwp = do_one_spec(o, b"nlwp", None).unwrap_or_default();
        add_after(&mut o.format, b"%CPU", nlwp);
    }
    if fm_ & fm::M != 0 {
        let mut v = do_one_spec(o, b"label", None).unwrap_or_default();
        v.append(&mut o.format);
        o.format = v;
    }
    if o.per.bits & per::ZAP_ADDR != 0 && o.format_flags & ff::UL != 0 {
        let p = do_one_spec(o, b"sgi_p", None).unwrap_or_default();
        if add_after(&mut o.format, b"ADDR", p) {
            delete(&mut o.format, b"ADDR");
        }
    }
    if o.per.bits & per::SANE_USER != 0 && o.format_flags & ff::UF != 0 {
        let u = do_one_spec(o, b"user", None).unwrap_or_default();
        if add_after(&mut o.format, b"UID", u) {
            delete(&mut o.format, b"UID");
        }
    }
    Ok(())
}

impl ArgError {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            ArgError::Procps(m) | ArgError::Fatal(m) => m,
        }
    }
}

fn add_after(list: &mut Vec<Col>, find: &[u8], put: Vec<Col>) -> bool {
    match list.iter().position(|c| c.name == find) {
        Some(i) => {
            for (k, c) in put.into_iter().enumerate() {
                list.insert(i + 1 + k, c);
            }
            true
        }
        None => false,
    }
}

fn delete(list: &mut Vec<Col>, find: &[u8]) -> bool {
    match list.iter().position(|c| c.name == find) {
        Some(i) => {
            list.remove(i);
            true
        }
        None => false,
    }
}

/// procps generate_sysv_list, building from the right.
fn generate_sysv_list(o: &mut Opts) -> R<()> {
    let (ffl, fmo, tfl) = (o.format_flags, o.format_modifiers, o.thread_flags);
    if fmo & fm::Y != 0 && ffl & ff::UL == 0 {
        return err("modifier -y without format -l makes no sense");
    }
    let mut rev: Vec<&str> = Vec::new();
    let mut push = |s: &'static str| rev.push(s);
    if o.prefer_bsd_defaults {
        if ffl != 0 {
            push("cmd");
        } else {
            push("args");
        }
        push("bsdtime");
        if ffl & ff::UL == 0 {
            push("stat");
        }
    } else {
        if ffl & ff::UF != 0 {
            push("cmd");
        } else {
            push("ucmd");
        }
        push("time");
    }
    push("tname");
    if ffl & ff::UF != 0 {
        push("stime");
    }
    if fmo & fm::F != 0 {
        if fmo & fm::P == 0 {
            push("psr");
        }
        if !(ffl & ff::UL != 0 && fmo & fm::Y != 0) {
            push("rss");
        }
    }
    if ffl & ff::UL != 0 {
        push("wchan");
    }
    let irix = o.per.bits & per::IRIX_L != 0;
    if ffl & ff::UL != 0 && fmo & fm::Y == 0 && irix {
        // Irix shows SZ:RSS; the ':' is literal text, as in an AIX format.
        push("sgi_rss");
        push(":");
    }
    if fmo & fm::F != 0 || ffl & ff::UL != 0 {
        push("sz");
    }
    if ffl & ff::UL != 0 {
        if fmo & fm::Y != 0 {
            push("rss");
        } else if o.per.bits & (per::ZAP_ADDR | per::IRIX_L) != 0 {
            push("sgi_p");
        } else {
            push("addr_1");
        }
    }
    if fmo & fm::C != 0 {
        push("pri");
        push("class");
    } else if ffl & ff::UL != 0 {
        push("ni");
        push(if irix { "priority" } else { "opri" });
    }
    if tfl & tf::U_L != 0 && ffl & ff::UF != 0 {
        push("nlwp");
    }
    if ffl & (ff::UF | ff::UL) != 0 && fmo & fm::C == 0 {
        push("c");
    }
    if fmo & fm::P != 0 {
        push("psr");
    }
    if tfl & tf::U_L != 0 {
        push("lwp");
    }
    if fmo & fm::J != 0 {
        push("sid");
        push("pgid");
    }
    if ffl & (ff::UF | ff::UL) != 0 {
        push("ppid");
    }
    if tfl & tf::U_T != 0 {
        push("spid");
    }
    push("pid");
    if ffl & ff::UF != 0 {
        if o.per.bits & per::SANE_USER != 0 {
            push("user");
        } else {
            push("uid_hack");
        }
    } else if ffl & ff::UL != 0 {
        push("uid");
    }
    if ffl & ff::UL != 0 {
        push("s");
        if fmo & fm::Y == 0 {
            push("f");
        }
    }
    if fmo & fm::M != 0 {
        push("label");
    }
    let mut cols = Vec::new();
    for s in rev.iter().rev() {
        match *s {
            ":" => cols.push(text_col(b":")),
            s => cols.extend(do_one_spec(o, s.as_bytes(), None).unwrap_or_default()),
        }
    }
    o.format = cols;
    Ok(())
}

/// A column of literal text (AIX formats, Irix's SZ:RSS): printed on every line, header too.
fn text_col(text: &[u8]) -> Col {
    Col {
        spec: None,
        name: text.to_vec(),
        width: text.len().min(i32::MAX as usize) as i32,
        flags: specs::cf::EVERY,
    }
}

/// procps select_bits_setup.
fn select_setup(o: &mut Opts) -> R<()> {
    // Don't let a `g` spoil the standard selection.
    if o.simple_select == 0 && !o.prefer_bsd_defaults {
        o.select_bits = 0xaa00;
        return Ok(());
    }
    // For every BSD but SunOS, `g` is on by default (a no-op).
    let sel = if o.per.bits & per::NO_DEFAULT_G == 0 && o.simple_select & (ss::U_A | ss::U_D) == 0 {
        o.simple_select | ss::B_G
    } else {
        o.simple_select
    };
    const U_AD: u32 = ss::U_A | ss::U_D;
    const B_AX: u32 = ss::B_A | ss::B_X;
    const G_A: u32 = ss::B_G | ss::B_A;
    const G_X: u32 = ss::B_G | ss::B_X;
    const G_AX: u32 = ss::B_G | ss::B_A | ss::B_X;
    o.select_bits = match sel {
        // UNIX options.
        U_AD => 0x3f3f,
        ss::U_A => 0x0303,
        ss::U_D => 0x3333,
        // SunOS 4 only: the others have g on.
        0 => 0x0202,
        ss::B_A => 0x0303,
        ss::B_X => 0x2222,
        B_AX => 0x3333,
        // General BSD options.
        ss::B_G => 0x0a0a,
        G_A => 0x0f0f,
        G_X => 0xaaaa,
        G_AX => {
            // As -e rather than a table of all ones.
            o.all_processes = true;
            o.simple_select = 0;
            0
        }
        _ => return err("process selection options conflict"),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        Env {
            winsize: None,
            stdout_tty: false,
            columns: None,
            lines: None,
            ps_format: None,
            personality: None,
            xpg: None,
            program: "ps".into(),
            broken: false,
            euid: 0,
            tty: 0,
            pid_width: 5,
        }
    }

    fn p(args: &[&str]) -> R<Opts> {
        let v: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        parse(&v, &env())
    }

    fn heads(o: &Opts) -> Vec<String> {
        o.format
            .iter()
            .map(|c| String::from_utf8_lossy(&c.name).into_owned())
            .collect()
    }

    #[test]
    fn standard_formats_have_procps_columns() {
        assert_eq!(
            heads(&p(&["-ef"]).unwrap()),
            ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"]
        );
        assert_eq!(
            heads(&p(&["aux"]).unwrap()),
            [
                "USER", "PID", "%CPU", "%MEM", "VSZ", "RSS", "TTY", "STAT", "START", "TIME",
                "COMMAND"
            ]
        );
        assert_eq!(
            heads(&p(&["-el"]).unwrap()),
            [
                "F", "S", "UID", "PID", "PPID", "C", "PRI", "NI", "ADDR", "SZ", "WCHAN", "TTY",
                "TIME", "CMD"
            ]
        );
        assert_eq!(
            heads(&p(&["-eLf"]).unwrap()),
            ["UID", "PID", "PPID", "LWP", "C", "NLWP", "STIME", "TTY", "TIME", "CMD"]
        );
        assert_eq!(heads(&p(&["-e"]).unwrap()), ["PID", "TTY", "TIME", "CMD"]);
        assert_eq!(
            heads(&p(&["ax"]).unwrap()),
            ["PID", "TTY", "STAT", "TIME", "COMMAND"]
        );
        assert_eq!(
            heads(&p(&["-ej"]).unwrap()),
            ["PID", "PGID", "SID", "TTY", "TIME", "CMD"]
        );
        assert_eq!(
            heads(&p(&["-O", "ni"]).unwrap()),
            ["PID", "NI", "S", "TTY", "TIME", "COMMAND"]
        );
    }

    #[test]
    fn user_formats_and_overrides() {
        let o = p(&["-o", "pid,comm=NAME", "-o", "user:12"]).unwrap();
        assert_eq!(heads(&o), ["PID", "NAME", "USER"]);
        assert_eq!(o.format[2].width, 12);
        // Separators count items even inside a header, as in procps.
        assert_eq!(
            p(&["-o", "pid,comm=A B"]).unwrap_err(),
            ArgError::Procps("unknown user-defined format specifier \"B\"".into())
        );
        assert_eq!(heads(&p(&["-o", "pid,comm=A=B"]).unwrap()), ["PID", "A=B"]);
        assert_eq!(
            p(&["-o", "pid,bogus"]).unwrap_err(),
            ArgError::Procps("unknown user-defined format specifier \"bogus\"".into())
        );
        assert_eq!(
            p(&["-o", "pid:0"]).unwrap_err(),
            ArgError::Procps("column widths must be unsigned decimal numbers".into())
        );
        assert!(p(&["-o", "pid,unit,pss,seat"]).is_ok());
    }

    #[test]
    fn bsd_second_chance_and_errors() {
        // -aux fails as SysV (-x) and succeeds as BSD.
        let o = p(&["-aux"]).unwrap();
        assert!(o.all_processes);
        assert_eq!(
            p(&["-Q"]).unwrap_err(),
            ArgError::Procps("unsupported SysV option".into())
        );
        assert_eq!(
            p(&["--bogus"]).unwrap_err(),
            ArgError::Procps("unknown gnu long option".into())
        );
        assert_eq!(
            p(&["-p", "0"]).unwrap_err(),
            ArgError::Procps("process ID out of range".into())
        );
        assert_eq!(
            p(&["-p", "1,,2"]).unwrap_err(),
            ArgError::Procps("improper list".into())
        );
        assert_eq!(
            p(&["-u", "no-such-user-here"]).unwrap_err(),
            ArgError::Procps("user name does not exist".into())
        );
    }

    #[test]
    fn sorting_keys_apply_primary_last() {
        let o = p(&["-e", "--sort", "ppid,-pid"]).unwrap();
        let names: Vec<(&str, bool)> = o.sort.iter().map(|k| (k.name, k.reverse)).collect();
        assert_eq!(names, [("pid", true), ("ppid", false)]);
        let o = p(&["axk", "-rss"]).unwrap();
        assert_eq!(o.sort.len(), 1);
        assert!(o.sort[0].reverse);
    }

    #[test]
    fn random_command_lines_never_panic() {
        // Tokens and fragments that exercise every parser path, combined at random.
        const PIECES: &[&str] = &[
            "-",
            "--",
            "-e",
            "-f",
            "-L",
            "-T",
            "-H",
            "-j",
            "-l",
            "-y",
            "-c",
            "-P",
            "-F",
            "-o",
            "o",
            "O",
            "-O",
            "k",
            "--sort",
            "--format",
            "pid",
            "comm=",
            "args:5",
            ",",
            "=",
            ":",
            "%cpu",
            "%",
            "u",
            "a",
            "x",
            "f",
            "H",
            "m",
            "-m",
            "w",
            "ww",
            "n",
            "c",
            "S",
            "r",
            "T",
            "t",
            "p",
            "-p",
            "1",
            "0",
            "-1",
            "+1",
            "0x10",
            "--pid=",
            "--ppid",
            "-C",
            "-u",
            "-U",
            "-g",
            "-G",
            "--cols",
            "--rows",
            "9999999999",
            "--headers",
            "--no-headers",
            "-q",
            "q",
            "L",
            "V",
            "-V",
            "--help",
            "--forest",
            "-N",
            "--deselect",
            "DefBSD",
            "%p",
            "%",
            "% ",
            "%%",
            "c %p",
            "-x",
            "h",
            "\n",
            "\t",
            " ",
            "é",
            "\u{0}",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let n = (next() % 5) as usize;
            let args: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let parts = 1 + (next() % 3) as usize;
                    (0..parts)
                        .flat_map(|_| PIECES[(next() % PIECES.len() as u64) as usize].bytes())
                        .collect()
                })
                .collect();
            // Any outcome but a panic is fine; errors must carry a message.
            let per = [
                "unknown", "bsd", "old", "irix", "hpux", "svr4", "tru64", "sunos4",
            ];
            let e = Env {
                personality: Some(per[(next() % per.len() as u64) as usize].into()),
                ..env()
            };
            if let Err(err) = parse(&args, &e) {
                assert!(!err.message().is_empty(), "{args:?}");
            }
        }
    }

    fn with(personality: &str, args: &[&str]) -> R<Opts> {
        let v: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let e = Env {
            personality: Some(personality.into()),
            ..env()
        };
        parse(&v, &e)
    }

    #[test]
    fn personalities_pick_procps_formats_and_meanings() {
        let h = |per: &str, args: &[&str]| heads(&with(per, args).unwrap());
        // FreeBSD formats.
        for per in ["bsd", "BSD", "aix", "sunos4"] {
            assert_eq!(
                h(per, &["u"]),
                [
                    "USER", "PID", "%CPU", "%MEM", "VSZ", "RSS", "TT", "STAT", "STARTED", "TIME",
                    "COMMAND"
                ],
                "{per}"
            );
        }
        // Real Debian -f; linux's sane USER; unknown names are the default.
        assert_eq!(
            h("debian", &["-f"]),
            ["UID", "PID", "PPID", "START", "TTY", "TIME", "COMMAND"]
        );
        assert_eq!(h("linux", &["-f"])[0], "USER");
        assert_eq!(h("linux", &["-l"])[8], "P");
        for per in ["nonsense", "posix", "0123456789abcdefg"] {
            assert_eq!(h(per, &["-f"]), h("unknown", &["-f"]), "{per}");
        }
        // Irix shows SZ:RSS (literal text between them), unless $_XPG asks for the standard.
        let irix = h("irix", &["-l"]);
        assert_eq!(&irix[9..12], ["SZ", ":", "RSS"]);
        let e = Env {
            personality: Some("irix".into()),
            xpg: Some("1".into()),
            ..env()
        };
        let v: Vec<Vec<u8>> = vec![b"-l".to_vec()];
        assert_eq!(heads(&parse(&v, &e).unwrap()), h("unknown", &["-l"]));
        // Digital's v works: no column it needs is missing.
        assert_eq!(h("tru64", &["v"])[0], "PID");
        // OS/390 -j.
        assert_eq!(
            h("os390", &["-j"]),
            ["PID", "SID", "PGRP", "TTY", "TIME", "COMMAND"]
        );
        // bsd: h repeats the header, m sorts by memory.
        assert_eq!(with("bsd", &["h"]).unwrap().header, Heading::Multi);
        assert_eq!(with("unknown", &["h"]).unwrap().header, Heading::None);
        let m = with("bsd", &["m"]).unwrap();
        assert_eq!(
            (m.sort[0].name, m.thread_flags & tf::SHOW_BOTH),
            ("pmem", 0)
        );
        assert_ne!(
            with("unknown", &["m"]).unwrap().thread_flags & tf::SHOW_BOTH,
            0
        );
        // -x: HP-UX's wide command lines, SVR4's -y.
        let x = with("hpux", &["-x"]).unwrap();
        assert!(x.unix_f_option && x.screen_cols == OUTBUF_SIZE);
        assert_eq!(h("svr4", &["-lx"]), h("unknown", &["-ly"]));
        assert_eq!(
            with("unknown", &["-x", "-Q"]).unwrap_err(),
            ArgError::Procps("must set personality to get -x option".into())
        );
        // A forced BSD personality reports the BSD parse's error.
        assert_eq!(
            with("bsd", &["-Q"]).unwrap_err(),
            ArgError::Procps("unsupported option (BSD syntax)".into())
        );
        // BSD parsing takes -ef as e (the environment) and f (the forest).
        let ef = with("bsd", &["-ef"]).unwrap();
        assert!(ef.bsd_e_option && ef.forest_type == b'b');
    }

    #[test]
    fn simple_selections_are_procps_tables() {
        let bits = |per: &str, args: &[&str]| with(per, args).unwrap().select_bits;
        assert_eq!(bits("unknown", &[]), 0xaa00);
        assert_eq!(bits("unknown", &["a"]), 0x0f0f);
        assert_eq!(bits("unknown", &["-a", "-d"]), 0x3f3f);
        assert_eq!(bits("unknown", &["x"]), 0xaaaa);
        // SunOS 4 has no implied g.
        assert_eq!(bits("sunos4", &[]), 0x0202);
        assert_eq!(bits("sunos4", &["x"]), 0x2222);
        assert!(with("unknown", &["ax"]).unwrap().all_processes);
        let o = with("unknown", &["x"]).unwrap();
        assert!(o.table_needs_euid());
        assert!(o.table_accepts(true, true, true, false));
        assert!(!o.table_accepts(false, false, false, true));
        assert!(!with("unknown", &["-a", "-d"]).unwrap().table_needs_euid());
    }

    #[test]
    fn aix_descriptors_parse_as_procps_parses_them() {
        assert_eq!(
            heads(&p(&["-o", "%p %U %c"]).unwrap()),
            ["PID", " ", "USER", " ", "COMMAND", ""]
        );
        // A descriptor's letter counts as text too: the spare items are empty text at the end.
        let o = p(&["-o", "%p%z"]).unwrap();
        assert_eq!(heads(&o), ["PID", "VSZ", "", ""]);
        assert!(o.format[2].spec.is_none() && o.format[1].spec.is_some());
        // What the first parse made before failing stays in front.
        assert_eq!(heads(&p(&["-o", "c %p"]).unwrap()), ["C", "c ", "PID", ""]);
        for (f, e) in [
            ("%", "missing AIX field descriptor"),
            ("%%p", "missing AIX field descriptor"),
            ("% p", "missing AIX field descriptor"),
            ("%q", "unknown AIX field descriptor"),
            ("%pX", "improper AIX field descriptor"),
            ("ab %p", "improper AIX field descriptor"),
            ("%cpu,bogus", "improper AIX field descriptor"),
        ] {
            assert_eq!(
                p(&["-o", f]).unwrap_err(),
                ArgError::Procps(e.into()),
                "{f}"
            );
        }
        // -O wraps them like any list.
        assert_eq!(
            heads(&p(&["-O", "%n"]).unwrap()),
            ["PID", "NI", "", "S", "TTY", "TIME", "COMMAND"]
        );
    }

    #[test]
    fn internal_errors_skip_the_second_chance_and_warnings_repeat() {
        assert_eq!(
            p(&["-c", "u"]).unwrap_err(),
            ArgError::Fatal(
                "ps:src/ps/sortformat.c:900: internal error: no PRI for -c option".into()
            )
        );
        let small = Env {
            columns: Some("5".into()),
            ..env()
        };
        let count = |e: &Env, args: &[&str]| {
            let v: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            parse_with_warnings(&v, e).1.len()
        };
        assert_eq!(count(&small, &["-o", "pid"]), 1);
        // The BSD second chance sizes the screen again, and so does a forced BSD personality.
        assert_eq!(count(&small, &["-aux"]), 2);
        assert_eq!(count(&small, &["-Q"]), 2);
        let bsd = Env {
            personality: Some("bsd".into()),
            ..small
        };
        assert_eq!(count(&bsd, &["-o", "pid"]), 2);
    }

    #[test]
    fn strtoul_like_c() {
        assert_eq!(strtoul0(b"42"), (42, true));
        assert_eq!(strtoul0(b"0x1f"), (31, true));
        assert_eq!(strtoul0(b"010"), (8, true));
        assert_eq!(strtoul0(b"12ab"), (12, false));
        assert_eq!(strtoul0(b"-1").0, u64::MAX);
        assert_eq!(strtoul0(b"abc"), (0, false));
    }
}
