//! top's interactive screen: the summary, a message/prompt line, the column heading and as
//! many tasks as fit, redrawn with ratatui (crossterm backend) every refresh and after each
//! key; keys and prompts work as in procps top (see `taskdiag top --help`).
//!
//! The terminal is put in raw mode on the alternate screen and always given back: on `q`,
//! on Ctrl-C, on SIGINT, SIGTERM, SIGHUP and SIGQUIT (a flag the loop checks at least ten
//! times a second), on Ctrl-Z (restored, stopped, then set up again) and on a panic (a hook
//! restores it before the panic message is printed).
//!
//! What is shown comes from [`super::model`] and [`super::format`]; this module owns input,
//! prompts, messages and scrolling.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::layout::Position;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Terminal;

use super::act::{self, ActError};
use super::format::{self, layout, RowCtx, Summary};
use super::kstack::{self, StackView};
use super::model::{Col, Filter, Frame, UserSel};
use super::screen;
use super::sys::{self, CpuPct, Mem};
use super::{pcpu_max, select_and_sort, Opts, Sampler, Width};

/// The screen: procps top's size, and no question ever asked of the terminal ([`screen`]).
type Term = Terminal<screen::Backend>;

/// The last terminating signal received (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);
/// The terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // A hang-up with the terminal gone: there is nothing to restore, and the main loop may be
    // inside crossterm reading end-of-file from the dead terminal, never to check the flag.
    if sig == libc::SIGHUP && terminal_hung_up() {
        // SAFETY: _exit is async-signal-safe and ends the process at once.
        unsafe { libc::_exit(128 + libc::SIGHUP) };
    }
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// Makes SIGINT, SIGTERM, SIGHUP and SIGQUIT set [`SIGNALLED`] instead of killing us, so the
/// main loop can restore the terminal first.
fn install_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: an all-zero sigaction is valid; the handler only does an atomic store,
        // which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Raw mode, alternate screen, hidden cursor.
fn enter() -> io::Result<()> {
    terminal::enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)
}

/// Gives the terminal back as it was (once; safe to call again).
fn leave() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
    }
}

/// A panic restores the terminal before its message is printed.
fn install_panic_hook() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        leave();
        prev(info);
    }));
}

/// What a prompt's answer is for.
#[derive(Debug, Clone, Copy)]
enum Then {
    Delay,
    User { any: bool },
    Filter { ignore_case: bool },
    KillPid { def: u32 },
    KillSig { pid: u32 },
    RenicePid { def: u32 },
    Nice { pid: u32 },
    StackPid { def: u32 },
    MaxTasks,
}

#[derive(Debug)]
struct Prompt {
    label: String,
    input: String,
    then: Then,
}

/// The field-management screen's state (procps' `fields_utility`).
#[derive(Debug, Default)]
struct FieldsScreen {
    /// The field under the cursor (a position in the list).
    at: usize,
    /// A field was picked up with Right and moves with the cursor.
    moving: bool,
}

#[derive(Debug)]
enum Mode {
    Normal,
    Help,
    Prompt(Prompt),
    Fields(FieldsScreen),
    /// A task's kernel stack (`K`), until a key is pressed.
    Stack(StackView),
}

/// What a key asks of the main loop beyond the app's own state.
enum After {
    Nothing,
    Quit,
    Suspend,
    Redraw,
}

struct App {
    o: Opts,
    filters: Vec<Filter>,
    show_load: bool,
    show_states: bool,
    show_mem: bool,
    s: Sampler,
    frame: Option<Frame>,
    cpus: Vec<CpuPct>,
    ncpu: usize,
    mem: Mem,
    order: Vec<u32>,
    begtask: usize,
    /// Task lines on the screen at the last draw (for paging).
    page: Cell<usize>,
    /// Columns on the screen at the last draw.
    cols: Cell<usize>,
    mode: Mode,
    msg: Option<(String, Instant)>,
    next_refresh: Instant,
    frames: u64,
    utf8: bool,
    pid_w: usize,
    dirty: bool,
}

/// How long a message stays.
const MSG_TIME: Duration = Duration::from_millis(1500);

impl App {
    fn new(o: Opts, s: Sampler, utf8: bool) -> App {
        App {
            o,
            filters: Vec::new(),
            show_load: true,
            show_states: true,
            show_mem: true,
            s,
            frame: None,
            cpus: Vec::new(),
            ncpu: 1,
            mem: Mem::default(),
            order: Vec::new(),
            begtask: 0,
            page: Cell::new(1),
            cols: Cell::new(80),
            mode: Mode::Normal,
            msg: None,
            next_refresh: Instant::now(),
            frames: 0,
            utf8,
            pid_w: sys::pid_width(),
            dirty: true,
        }
    }

    fn message(&mut self, m: impl Into<String>) {
        self.msg = Some((m.into(), Instant::now() + MSG_TIME));
        self.dirty = true;
    }

    fn delay(&self) -> Duration {
        Duration::from_secs_f32(self.o.delay.clamp(0.0, 1e6))
    }

    /// A new snapshot.
    fn refresh(&mut self) {
        // The frame shares its snapshot with the sampler, which updates it in place when
        // nothing else holds it (a refresh that fails shows no rows until the next one).
        self.frame = None;
        let also: Vec<Col> = self.filters.iter().map(|f| f.col).collect();
        match self.s.sample(&self.o, &also) {
            Ok((f, cpus, ncpu)) => {
                self.frame = Some(f);
                self.cpus = cpus;
                self.ncpu = ncpu;
                self.mem = sys::read_mem();
                self.frames += 1;
            }
            Err(e) => self.message(e.to_string()),
        }
        self.rebuild();
        self.next_refresh = Instant::now() + self.delay();
    }

    /// Starts over after a switch between processes and threads (procps does the same).
    fn reprime(&mut self) {
        if let Err(e) = self.s.prime(&self.o) {
            self.message(e.to_string());
        }
        self.begtask = 0;
        self.refresh();
    }

    fn row_ctx<'a>(&self, f: &'a Frame) -> RowCtx<'a> {
        let hz = self.s.machine.hz;
        let mut etscale = 100.0 / (hz as f32 * f.et);
        if !self.o.irix {
            etscale /= self.ncpu as f32;
        }
        RowCtx {
            frame: f,
            etscale,
            pmax: pcpu_max(self.o.irix, self.ncpu, self.o.threads),
            mem_total: if self.mem.total > 0 {
                self.mem.total
            } else {
                self.s.machine.mem_total_kib
            },
            hz,
            uptime: crate::snapshot::uptime().unwrap_or(0.0),
            task_scale: self.o.task_scale,
            cmdline: self.o.cmdline,
            cumulative: self.o.cumulative,
            utf8: self.utf8,
            rollups: Default::default(),
        }
    }

    /// Recomputes which rows show, in which order.
    fn rebuild(&mut self) {
        let order = match &self.frame {
            None => Vec::new(),
            Some(f) => {
                let ctx = self.row_ctx(f);
                let filters = &self.filters;
                select_and_sort(f, &self.o, &ctx, |r| {
                    filters.iter().all(|flt| {
                        let w = flt.col.width(self.pid_w, self.cpu_w()).unwrap_or(1 << 20);
                        let w = if flt.col == Col::User { 1 << 20 } else { w };
                        flt.matches(&String::from_utf8_lossy(&ctx.cell(r, flt.col, w)))
                    })
                })
            }
        };
        self.order = order;
        if self.begtask >= self.order.len() {
            self.begtask = self.order.len().saturating_sub(1);
        }
        self.dirty = true;
    }

    /// The pid the `k` and `r` prompts offer: the first task shown.
    fn default_pid(&self) -> u32 {
        match (&self.frame, self.order.get(self.begtask)) {
            (Some(f), Some(&i)) => f.rows.get(i as usize).map_or(0, |r| r.pid),
            _ => 0,
        }
    }

    fn prompt(&mut self, label: String, then: Then) {
        self.mode = Mode::Prompt(Prompt {
            label,
            input: String::new(),
            then,
        });
        self.msg = None;
        self.dirty = true;
    }

    /// The process a pid the user typed stands for, and the start time it must have:
    /// a thread stands for its process (kill(2) on a thread id signals the process).
    fn target_of(&self, pid: u32) -> (u32, Option<(u64, u64)>) {
        let tick = self.s.machine.ns_per_tick();
        if let Some(f) = &self.frame {
            if let Some(r) = f.rows.iter().find(|r| r.pid == pid) {
                let tg = r.tgid;
                let leader = f.rows.iter().find(|x| x.pid == tg);
                return (tg, leader.map(|l| (l.start_ns, tick)));
            }
        }
        (pid, None)
    }

    fn fail_text(e: &ActError) -> String {
        match e {
            ActError::Sys { source, .. } => source
                .raw_os_error()
                .map(sys::strerror)
                .unwrap_or_else(|| source.to_string()),
            other => other.to_string(),
        }
    }

    /// The answer to a prompt.
    fn answer(&mut self, then: Then, input: String) {
        let line = input.trim();
        let int = |s: &str| -> Result<Option<i64>, ()> {
            if s.is_empty() {
                Ok(None)
            } else {
                super::mkwhole(s).map(Some).ok_or(())
            }
        };
        match then {
            Then::Delay => {
                if line.is_empty() {
                    return;
                }
                match super::mkfloat(line).filter(|d| *d >= 0.0) {
                    Some(d) => {
                        self.o.delay = d;
                        self.next_refresh = Instant::now() + self.delay();
                    }
                    None => self.message("Unacceptable floating point"),
                }
            }
            Then::User { any } => {
                self.o.pids.clear();
                if line.is_empty() {
                    self.o.user = None;
                } else {
                    match UserSel::parse(line, any) {
                        Ok(u) => self.o.user = Some(u),
                        Err(m) => {
                            self.o.user = None;
                            self.message(m);
                        }
                    }
                }
                self.begtask = 0;
                self.rebuild();
            }
            Then::Filter { ignore_case } => {
                if line.is_empty() {
                    return;
                }
                match Filter::parse(line, ignore_case) {
                    Ok(f) if self.filters.contains(&f) => {
                        self.message("duplicate filter was ignored")
                    }
                    Ok(f) => {
                        self.filters.push(f);
                        self.begtask = 0;
                        self.rebuild();
                    }
                    Err(m) => self.message(m),
                }
            }
            Then::KillPid { def } => match pid_answer(int(line), def) {
                None => self.message("Unacceptable integer"),
                Some(pid) => self.prompt(
                    format!("Send pid {pid} signal [{}/sigterm]", libc::SIGTERM),
                    Then::KillSig { pid },
                ),
            },
            Then::KillSig { pid } => {
                let sig = if line.is_empty() {
                    libc::SIGTERM
                } else {
                    match sys::parse_signal(line) {
                        Some(s) => s,
                        None => {
                            self.message("Invalid signal");
                            return;
                        }
                    }
                };
                if sig == 0 {
                    return;
                }
                let (target, expect) = self.target_of(pid);
                match act::signal(target, sig, expect) {
                    Ok(()) => self.refresh(),
                    Err(e @ ActError::Reused { .. }) => self.message(e.to_string()),
                    Err(e) => self.message(format!(
                        "Failed signal pid '{pid}' with '{sig}': {}",
                        Self::fail_text(&e)
                    )),
                }
            }
            Then::RenicePid { def } => match pid_answer(int(line), def) {
                None => self.message("Unacceptable integer"),
                Some(pid) => self.prompt(format!("Renice PID {pid} to value"), Then::Nice { pid }),
            },
            Then::Nice { pid } => match int(line) {
                Err(()) => self.message("Unacceptable integer"),
                Ok(None) => {}
                Ok(Some(v)) => {
                    let v = v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                    match act::renice(pid, v) {
                        Ok(()) => self.refresh(),
                        Err(e) => self.message(format!(
                            "Failed renice of PID {pid} to {v}: {}",
                            Self::fail_text(&e)
                        )),
                    }
                }
            },
            Then::StackPid { def } => match pid_answer(int(line), def) {
                None => self.message("Unacceptable integer"),
                Some(pid) => {
                    self.mode = Mode::Stack(kstack::read(&mut self.s.src, pid, self.utf8));
                }
            },
            Then::MaxTasks => match int(line) {
                Err(()) => self.message("Unacceptable integer"),
                Ok(None) => {}
                Ok(Some(v)) if v < 0 => self.message("Invalid maximum"),
                Ok(Some(v)) => {
                    self.o.max_tasks = v as usize;
                    self.dirty = true;
                }
            },
        }
    }

    fn on_off(b: bool) -> &'static str {
        if b {
            "On"
        } else {
            "Off"
        }
    }

    /// Width of the P field.
    fn cpu_w(&self) -> usize {
        super::cpu_width(self.ncpu)
    }

    /// The columns for a screen `cols` wide.
    fn layout(&self, cols: usize) -> format::Layout {
        layout(&self.o.fields.shown(), cols, self.pid_w, self.cpu_w())
    }

    /// A key on the field-management screen.
    fn fields_key(&mut self, k: KeyEvent) -> After {
        let Mode::Fields(fs) = &mut self.mode else {
            return After::Nothing;
        };
        let list = &mut self.o.fields.list;
        let last = list.len().saturating_sub(1);
        match k.code {
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                return After::Quit
            }
            KeyCode::Up if fs.at > 0 => {
                fs.at -= 1;
                if fs.moving {
                    list.swap(fs.at, fs.at + 1);
                }
            }
            KeyCode::Down if fs.at < last => {
                fs.at += 1;
                if fs.moving {
                    list.swap(fs.at, fs.at - 1);
                }
            }
            KeyCode::Left | KeyCode::Enter => fs.moving = false,
            KeyCode::Right => fs.moving = true,
            KeyCode::Home | KeyCode::PageUp if !fs.moving => fs.at = 0,
            KeyCode::End | KeyCode::PageDown if !fs.moving => fs.at = last,
            KeyCode::Char(' ') | KeyCode::Char('d') if !fs.moving => {
                list[fs.at].1 = !list[fs.at].1;
            }
            KeyCode::Char('s') if !fs.moving => {
                self.o.sort = list[fs.at].0;
            }
            KeyCode::Char('q') | KeyCode::Esc => {
                self.mode = Mode::Normal;
                // The fields may need groups the last snapshot did not read.
                self.refresh();
                return After::Nothing;
            }
            _ => {}
        }
        After::Nothing
    }

    /// Moves the sort column left (`-1`) or right (`1`) among the columns shown.
    fn move_sort(&mut self, dir: isize) {
        let cols = self.layout(self.cols.get()).cols;
        if let Some(at) = cols.iter().position(|&c| c == self.o.sort) {
            let to = at as isize + dir;
            if to >= 0 && (to as usize) < cols.len() {
                self.o.sort = cols[to as usize];
                self.rebuild();
            }
        }
    }

    fn key(&mut self, k: KeyEvent) -> After {
        self.dirty = true;
        if matches!(self.mode, Mode::Fields(_)) {
            return self.fields_key(k);
        }
        if let Mode::Prompt(p) = &mut self.mode {
            match k.code {
                KeyCode::Esc => self.mode = Mode::Normal,
                KeyCode::Enter => {
                    let Mode::Prompt(p) = std::mem::replace(&mut self.mode, Mode::Normal) else {
                        return After::Nothing;
                    };
                    self.answer(p.then, p.input);
                }
                KeyCode::Backspace => {
                    p.input.pop();
                }
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                    return After::Quit
                }
                KeyCode::Char(c)
                    if !k.modifiers.contains(KeyModifiers::CONTROL) && p.input.len() < 250 =>
                {
                    p.input.push(c);
                }
                _ => {}
            }
            return After::Nothing;
        }
        if matches!(self.mode, Mode::Help | Mode::Stack(_)) {
            self.mode = Mode::Normal;
            if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
                return After::Quit;
            }
            return After::Nothing;
        }
        self.msg = None;
        if k.modifiers.contains(KeyModifiers::CONTROL) {
            return match k.code {
                KeyCode::Char('c') => After::Quit,
                KeyCode::Char('z') => After::Suspend,
                KeyCode::Char('l') => After::Redraw,
                KeyCode::Char('o') => {
                    let mut list: Vec<String> =
                        self.filters.iter().map(|f| f.raw.clone()).collect();
                    if let Some(u) = self.o.user {
                        list.push(format!(
                            "{}user{}{}",
                            if u.any { "any " } else { "" },
                            if u.exclude { "!=" } else { "=" },
                            u.uid
                        ));
                    }
                    let text = if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    };
                    self.message(format!("filters: {text}"));
                    After::Nothing
                }
                KeyCode::Char(x) => {
                    self.message(format!(
                        "Ctrl-{} is not available in taskdiag top (see 'h')",
                        x.to_ascii_uppercase()
                    ));
                    After::Nothing
                }
                _ => After::Nothing,
            };
        }
        let page = self.page.get().max(1);
        match k.code {
            KeyCode::Up => self.begtask = self.begtask.saturating_sub(1),
            KeyCode::Down if self.begtask + 1 < self.order.len() => self.begtask += 1,
            KeyCode::PageUp => self.begtask = self.begtask.saturating_sub(page),
            KeyCode::PageDown => {
                self.begtask = (self.begtask + page).min(self.order.len().saturating_sub(1))
            }
            KeyCode::Home => self.begtask = 0,
            KeyCode::End => self.begtask = self.order.len().saturating_sub(page),
            KeyCode::Enter => self.refresh(),
            KeyCode::Esc => {}
            KeyCode::Char(c) => return self.command(c),
            _ => {}
        }
        After::Nothing
    }

    /// A one-letter command.
    fn command(&mut self, c: char) -> After {
        let secure = |app: &mut App| {
            if app.o.secure {
                app.message("Unavailable in secure mode");
            }
            app.o.secure
        };
        match c {
            'q' => return After::Quit,
            'h' | '?' => self.mode = Mode::Help,
            ' ' => self.refresh(),
            'd' | 's' => {
                if !secure(self) {
                    self.prompt(
                        format!("Change delay from {:.1} to", self.o.delay),
                        Then::Delay,
                    );
                }
            }
            'P' | 'M' | 'T' | 'N' => {
                self.o.sort = match c {
                    'P' => Col::Cpu,
                    'M' => Col::Mem,
                    'T' => Col::Time,
                    _ => Col::Pid,
                };
                self.rebuild();
            }
            '<' => self.move_sort(-1),
            '>' => self.move_sort(1),
            'R' => {
                self.o.ascending = !self.o.ascending;
                self.rebuild();
            }
            'H' => {
                self.o.threads = !self.o.threads;
                self.reprime();
            }
            'c' => {
                self.o.cmdline = !self.o.cmdline;
                if self.o.cmdline {
                    self.refresh();
                } else {
                    self.rebuild();
                }
            }
            'i' => {
                self.o.idle = !self.o.idle;
                self.begtask = 0;
                self.rebuild();
            }
            'S' => {
                self.o.cumulative = !self.o.cumulative;
                self.rebuild();
                self.message(format!(
                    "Cumulative time {}",
                    Self::on_off(self.o.cumulative)
                ));
            }
            'u' | 'U' => self.prompt(
                "Which user (blank for all)".into(),
                Then::User { any: c == 'U' },
            ),
            'o' | 'O' => {
                let ignore_case = c == 'o';
                self.prompt(
                    format!(
                        "add filter #{} ({}) as: [!]FLD?VAL",
                        self.filters.len() + 1,
                        if ignore_case {
                            "ignoring case"
                        } else {
                            "case sensitive"
                        }
                    ),
                    Then::Filter { ignore_case },
                );
            }
            '=' => {
                self.filters.clear();
                self.o.user = None;
                self.o.pids.clear();
                self.o.max_tasks = 0;
                self.o.idle = true;
                self.begtask = 0;
                self.rebuild();
            }
            'n' | '#' => self.prompt(
                format!(
                    "Maximum tasks = {}, change to (0 is unlimited)",
                    self.o.max_tasks
                ),
                Then::MaxTasks,
            ),
            'k' => {
                if !secure(self) {
                    let def = self.default_pid();
                    self.prompt(
                        format!("PID to signal/kill [default pid = {def}]"),
                        Then::KillPid { def },
                    );
                }
            }
            'K' => {
                let def = self.default_pid();
                self.prompt(
                    format!("PID to show kernel stack [default pid = {def}]"),
                    Then::StackPid { def },
                );
            }
            'r' => {
                if !secure(self) {
                    let def = self.default_pid();
                    self.prompt(
                        format!("PID to renice [default pid = {def}]"),
                        Then::RenicePid { def },
                    );
                }
            }
            'l' => self.show_load = !self.show_load,
            't' => self.show_states = !self.show_states,
            'm' => self.show_mem = !self.show_mem,
            '1' => {
                self.o.per_cpu = !self.o.per_cpu;
                self.show_states = true;
            }
            'I' => {
                if self.ncpu > 1 {
                    self.o.irix = !self.o.irix;
                    self.message(format!("Irix mode {}", Self::on_off(self.o.irix)));
                } else {
                    self.message("Only 1 cpu detected");
                }
            }
            'E' => self.o.summ_scale = (self.o.summ_scale + 1) % 6,
            'e' => self.o.task_scale = (self.o.task_scale + 1) % 5,
            'y' => self.o.hirows = !self.o.hirows,
            'f' | 'F' => {
                let at = self.o.fields.position(self.o.sort).unwrap_or(0);
                self.mode = Mode::Fields(FieldsScreen {
                    at,
                    ..FieldsScreen::default()
                });
            }
            'A' | 'a' | 'B' | 'b' | 'C' | 'G' | 'g' | 'J' | 'j' | 'L' | '&' | 'V' | 'v' | 'W'
            | 'w' | 'X' | 'x' | 'Y' | 'Z' | 'z' | '0' | '2' | '3' | '4' | '5' | '!' | '+' | '-'
            | '_' => {
                self.message(format!("'{c}' is not available in taskdiag top (see 'h')"));
            }
            _ => self.message("Unknown command - try 'h' for help"),
        }
        After::Nothing
    }

    /// Columns of the screen, capped by `-w N`.
    fn screen_cols(&self, width: u16) -> usize {
        let mut cols = width as usize;
        if let Some(Width::Cols(n)) = self.o.width {
            cols = cols.min(n);
        }
        cols.clamp(3, 512)
    }

    fn render(&self, fr: &mut ratatui::Frame) {
        let area = fr.area();
        let cols = self.screen_cols(area.width);
        self.cols.set(cols);
        let rows = area.height as usize;
        if let Mode::Fields(fs) = &self.mode {
            let lines = fields_screen(&self.o, fs, cols, rows);
            fr.render_widget(Paragraph::new(lines), area);
            return;
        }
        if matches!(self.mode, Mode::Help) {
            let lines: Vec<Line> = help_text(self.o.delay, self.o.secure)
                .lines()
                .map(|l| Line::raw(l.to_string()))
                .collect();
            fr.render_widget(Paragraph::new(lines), area);
            return;
        }
        if let Mode::Stack(v) = &self.mode {
            fr.render_widget(Paragraph::new(stack_screen(v, rows)), area);
            return;
        }
        let summary = Summary {
            hms: sys::local_hms(),
            uptime: crate::snapshot::uptime().unwrap_or(0.0),
            users: sys::count_users(),
            load: sys::read_loadavg(),
            counts: self.frame.as_ref().map(|f| f.counts).unwrap_or_default(),
            threads: self.o.threads,
            cpus: &self.cpus,
            per_cpu: self.o.per_cpu,
            mem: self.mem,
            mem_scale: self.o.summ_scale,
        };
        let mut lines: Vec<Line> = summary
            .lines(self.show_load, self.show_states, self.show_mem, cols)
            .into_iter()
            .map(Line::raw)
            .collect();
        let msg_row = lines.len();
        let mut cursor = None;
        match (&self.mode, &self.msg) {
            (Mode::Prompt(p), _) => {
                let label = format!("{} ", p.label);
                let x = label.chars().count() + p.input.chars().count();
                cursor = Some(Position::new(
                    x.min(cols.saturating_sub(1)) as u16,
                    msg_row as u16,
                ));
                lines.push(Line::from(vec![
                    Span::styled(label, Style::new().add_modifier(Modifier::BOLD)),
                    Span::raw(p.input.clone()),
                ]));
            }
            (_, Some((m, _))) => lines.push(Line::styled(
                format!(" {m} "),
                Style::new().add_modifier(Modifier::REVERSED),
            )),
            _ => lines.push(Line::raw("")),
        }
        let l = self.layout(cols);
        let mut header = l.header.clone();
        header.truncate(cols);
        lines.push(Line::styled(
            header,
            Style::new().add_modifier(Modifier::REVERSED),
        ));
        let mut avail = rows.saturating_sub(lines.len());
        if self.o.max_tasks > 0 {
            avail = avail.min(self.o.max_tasks);
        }
        self.page.set(avail);
        if let Some(f) = &self.frame {
            let ctx = self.row_ctx(f);
            let mut buf = Vec::with_capacity(cols * 2);
            for &i in self.order.iter().skip(self.begtask).take(avail) {
                let Some(r) = f.rows.get(i as usize) else {
                    continue;
                };
                buf.clear();
                ctx.row(&mut buf, &l, r);
                format::trim_end(&mut buf);
                let style = if self.o.hirows && r.state == b'R' {
                    Style::new().add_modifier(Modifier::BOLD)
                } else {
                    Style::new()
                };
                lines.push(Line::styled(
                    String::from_utf8_lossy(&buf).into_owned(),
                    style,
                ));
            }
        }
        fr.render_widget(Paragraph::new(lines), area);
        if let Some(c) = cursor {
            fr.set_cursor_position(c);
        }
    }

    fn main_loop(&mut self, term: &mut Term) -> io::Result<()> {
        term.clear()?;
        if let Err(e) = self.s.prime(&self.o) {
            return Err(io::Error::other(e.to_string()));
        }
        self.refresh();
        loop {
            if SIGNALLED.load(Ordering::SeqCst) != 0 {
                return Ok(());
            }
            let now = Instant::now();
            if matches!(self.mode, Mode::Normal) && now >= self.next_refresh {
                self.refresh();
            }
            if self.msg.as_ref().is_some_and(|(_, until)| now >= *until) {
                self.msg = None;
                self.dirty = true;
            }
            if self.dirty {
                term.draw(|fr| self.render(fr))?;
                self.dirty = false;
            }
            if self.o.iterations.is_some_and(|n| self.frames >= n) {
                return Ok(());
            }
            let mut timeout = Duration::from_millis(100);
            if matches!(self.mode, Mode::Normal) {
                timeout = timeout.min(self.next_refresh.saturating_duration_since(Instant::now()));
            }
            if terminal_hung_up() {
                // The terminal is gone (its emulator or tmux session was closed): nobody can
                // see us or press q, so stop instead of polling a dead descriptor forever.
                return Ok(());
            }
            let ready = match event::poll(timeout) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
                Err(e) => return Err(e),
            };
            if !ready {
                continue;
            }
            // A hang-up makes the terminal readable with nothing to read: crossterm's read()
            // would then loop on end-of-file forever.
            if terminal_hung_up() {
                return Ok(());
            }
            let ev = match event::read() {
                Ok(ev) => ev,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            match ev {
                Event::Key(k) if k.kind != KeyEventKind::Release => match self.key(k) {
                    After::Nothing => {}
                    After::Quit => return Ok(()),
                    After::Redraw => {
                        term.clear()?;
                        self.dirty = true;
                    }
                    After::Suspend => {
                        leave();
                        // SAFETY: raise has no memory-safety preconditions; SIGTSTP's
                        // default action stops us until SIGCONT.
                        unsafe { libc::raise(libc::SIGTSTP) };
                        enter()?;
                        term.clear()?;
                        self.dirty = true;
                    }
                },
                Event::Resize(..) => self.dirty = true,
                _ => {}
            }
        }
    }
}

/// Whether the terminal on standard input has hung up (its master side closed). Only
/// poll(2) (async-signal-safe): also called from the signal handler.
fn terminal_hung_up() -> bool {
    let mut p = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd; a zero timeout never blocks.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// The field-management screen as procps' `fields_utility` and `display_fields` draw it: three
/// lines of explanation, a blank line (where taskdiag says why a key did nothing), then every
/// field in columns: `*` and bold for a shown one, the one under the cursor highlighted (its
/// description too while it is being moved).
fn fields_screen(o: &Opts, fs: &FieldsScreen, cols: usize, rows: usize) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let rev = Style::new().add_modifier(Modifier::REVERSED);
    let sort = o.sort.name();
    let mut lines = vec![
        Line::from(vec![
            Span::raw("Fields Management"),
            Span::raw(" for window "),
            Span::styled("1:Def", bold),
            Span::raw(", whose current sort field is "),
            Span::styled(sort.to_string(), bold),
        ]),
        Line::raw("   Navigate with Up/Dn, Right selects for move then <Enter> or Left commits,"),
        Line::raw("   'd' or <Space> toggles display, 's' sets sort.  Use 'q' or <Esc> to end!"),
        Line::raw(""),
    ];
    let n = o.fields.list.len();
    let mxcol = (cols / 11).max(1);
    let rmax = rows.saturating_sub(4);
    if rmax == 0 || rmax < usize::from(!n.is_multiple_of(mxcol)) + n / mxcol {
        lines.push(Line::raw(""));
        lines.push(Line::raw(
            "even using field names only, window is now too small",
        ));
        return lines;
    }
    let ncols = n.div_ceil(rmax);
    let (mut cmax, mut xadd) = (cols, 0usize);
    if ncols > 1 {
        cmax /= ncols;
        xadd = 1;
    }
    let cmax = cmax.min(10 + xadd + 22);
    let Some(smax) = cmax.checked_sub(10 + xadd) else {
        lines.push(Line::raw(""));
        lines.push(Line::raw(
            "even using field names only, window is now too small",
        ));
        return lines;
    };
    let mut spans: Vec<Vec<Span<'static>>> = vec![Vec::new(); rmax.min(n)];
    for (i, &(col, on)) in o.fields.list.iter().enumerate() {
        let row = &mut spans[i % rmax];
        let x = (i / rmax) * cmax;
        // Pad the row to the column's start.
        let used: usize = row.iter().map(|s| s.content.chars().count()).sum();
        if used < x {
            row.push(Span::raw(" ".repeat(x - used)));
        }
        let b = if on { bold } else { Style::new() };
        let focus = i == fs.at;
        row.push(Span::styled(if on { "*" } else { " " }, b));
        row.push(Span::raw(" "));
        let name = format!("{:<8.8}", col.name());
        row.push(Span::styled(name, if focus { b.patch(rev) } else { b }));
        let desc = format!("= {}", col.desc());
        let desc: String = desc.chars().take(smax).collect();
        let desc = format!(" {desc:<smax$}");
        row.push(Span::styled(
            desc,
            if focus && fs.moving { b.patch(rev) } else { b },
        ));
    }
    lines.extend(spans.into_iter().map(Line::from));
    lines
}

/// The kernel stack window: the heading, the frames (as many as fit `rows`, then how many
/// more there are) and procps' "any key" line.
fn stack_screen(v: &StackView, rows: usize) -> Vec<Line<'static>> {
    let mut lines = vec![
        Line::styled(v.title.clone(), Style::new().add_modifier(Modifier::BOLD)),
        Line::raw(""),
    ];
    // The heading, a blank line before the frames and one after, and the last line.
    let room = rows.saturating_sub(4).max(1);
    let (shown, more) = if v.lines.len() > room {
        (room - 1, v.lines.len() - (room - 1))
    } else {
        (v.lines.len(), 0)
    };
    lines.extend(v.lines[..shown].iter().map(|l| Line::raw(l.clone())));
    if more > 0 {
        lines.push(Line::raw(format!("... {more} more")));
    }
    lines.push(Line::raw(""));
    lines.push(Line::raw("Type any key to continue "));
    lines
}

/// The `h` screen.
fn help_text(delay: f32, secure: bool) -> String {
    format!(
        "\
Help for Interactive Commands - taskdiag top
Delay {delay:.1} secs; Secure mode {}.

  Enter,Space  refresh now           d,s  change the delay        q  quit
  P,M,T,N      sort by %CPU, %MEM, TIME+, PID
  <,>          sort by the column to the left or right            R  reverse the order
  H            threads on/off        c    command lines on/off
  i            idle tasks on/off     S    cumulative time on/off
  u,U          one user's tasks (effective / any uid); blank for all
  o,O          add a filter [!]FIELD=TEXT, FIELD<N, FIELD>N (o ignores case); Ctrl-O lists
  =            remove filters (u, o, -p, n) and show idle tasks
  f,F          fields: show/hide (d, Space), sort by (s), move (Right, Up/Down, Enter)
  n,#          maximum number of tasks shown
  k            send a signal (pid, then signal; default SIGTERM) through a pidfd
  K            a task's kernel stack (pid; root only, like /proc/PID/stack)
  r            renice (pid, then nice value)
  l,t,m        uptime, task/CPU, memory lines on/off    1  each CPU on/off
  I            Irix mode on/off      E,e  summary / task memory unit
  y            running tasks in bold on/off
  Up,Down,PgUp,PgDn,Home,End  scroll the tasks

Type any key to continue ",
        App::on_off(secure)
    )
}

/// Runs the interactive screen until the user quits; returns the exit status.
pub fn run(o: Opts, utf8: bool) -> i32 {
    // SAFETY: isatty has no memory-safety preconditions.
    if unsafe { libc::isatty(0) } != 1 {
        eprintln!("top: failed tty get");
        return 1;
    }
    let mut s = match Sampler::open(&o) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("top: {e}");
            return 1;
        }
    };
    if o.iterations != Some(1) {
        if let Err(e) = s.track() {
            eprintln!("top: {e}");
            return 1;
        }
    }
    install_signals();
    install_panic_hook();
    if let Err(e) = enter() {
        leave();
        eprintln!("top: {e}");
        return 1;
    }
    let mut term = match Terminal::new(screen::Backend::new()) {
        Ok(t) => t,
        Err(e) => {
            leave();
            eprintln!("top: {e}");
            return 1;
        }
    };
    let mut app = App::new(o, s, utf8);
    let r = app.main_loop(&mut term);
    leave();
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("top: {e}");
            1
        }
    }
}

/// The pid a "which pid" prompt's answer names: the typed number, or `def` for an empty
/// answer; `None` for anything that is not a positive 32-bit id.
fn pid_answer(typed: Result<Option<i64>, ()>, def: u32) -> Option<u32> {
    let pid = typed.ok()?.unwrap_or(i64::from(def));
    u32::try_from(pid).ok().filter(|&p| p > 0)
}
