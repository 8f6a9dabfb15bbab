//! The interactive screen's size, and the ratatui backend that draws it without ever asking the
//! terminal anything.
//!
//! procps top sizes its screen with ncurses' `columns` and `lines` (TIOCGWINSZ, overridden by
//! `$COLUMNS` and `$LINES`, else the terminfo entry's, else 80x24), then takes TIOCGWINSZ when it
//! gives both dimensions (top.c's `adj_geometry`): so a terminal that reports its size wins, one
//! that reports none is `$COLUMNS` x `$LINES`, and 80x24 where nothing answers. [`geometry`] is
//! that rule (the terminfo step is left out: the entries of the terminals that report no size
//! say 80x24 too). It never sends the cursor-position query (`ESC[6n`), which serial consoles,
//! some multiplexers and web terminals never answer: ratatui's `Terminal::clear` asks it through
//! crossterm, which gives up after 2 s with an error. [`Backend`] answers ratatui's
//! questions itself: the size from [`geometry`], read again at every draw (so a resize is
//! followed), and the cursor where it last put it.

use std::io::{self, Stdout};

use ratatui::backend::{Backend as RatatuiBackend, ClearType, CrosstermBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};

use crate::cnum::strtol_whole;

/// procps' `W_MIN_COL` and `W_MIN_ROW`: the smallest screen it draws.
const MIN_SIZE: u16 = 3;
/// procps' `SCREENMAX`: the widest screen it draws.
const MAX_COLS: u16 = 512;
/// ncurses' size when neither the terminal nor the environment gives one.
const DEFAULT: (u16, u16) = (80, 24);

/// An environment variable as ncurses' `_nc_getenv_num` reads it: a whole `strtol` number in
/// base 0 (`0x50` is 80), taken only when positive.
fn env_dim(v: Option<&[u8]>) -> Option<u16> {
    let n = strtol_whole(v?, 0)?;
    (n > 0).then(|| u16::try_from(n).unwrap_or(u16::MAX))
}

/// The screen's columns and rows as procps top computes them (module doc): `winsize` is
/// TIOCGWINSZ's (columns, rows), `None` where it failed; `columns` and `lines` the variables.
pub fn geometry(
    winsize: Option<(u16, u16)>,
    columns: Option<&[u8]>,
    lines: Option<&[u8]>,
) -> (u16, u16) {
    let (cols, rows) = match winsize {
        Some((c, r)) if c > 0 && r > 0 => (c, r),
        ws => {
            let (wc, wr) = ws.unwrap_or((0, 0));
            let pick = |env: Option<u16>, ioctl: u16, def: u16| {
                env.or((ioctl > 0).then_some(ioctl)).unwrap_or(def)
            };
            (
                pick(env_dim(columns), wc, DEFAULT.0),
                pick(env_dim(lines), wr, DEFAULT.1),
            )
        }
    };
    (cols.clamp(MIN_SIZE, MAX_COLS), rows.max(MIN_SIZE))
}

/// TIOCGWINSZ of `fd` as (columns, rows), `None` where it fails (not a terminal).
fn winsize(fd: i32) -> Option<(u16, u16)> {
    // SAFETY: an all-zero winsize is a valid out-parameter.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize; `ws` is valid and writable.
    let r = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (r == 0).then_some((ws.ws_col, ws.ws_row))
}

/// The screen's size now: standard output's window size (as procps asks it), `$COLUMNS`,
/// `$LINES`.
pub fn current() -> (u16, u16) {
    use std::os::unix::ffi::OsStrExt;
    let columns = std::env::var_os("COLUMNS");
    let lines = std::env::var_os("LINES");
    geometry(
        winsize(libc::STDOUT_FILENO),
        columns.as_deref().map(OsStrExt::as_bytes),
        lines.as_deref().map(OsStrExt::as_bytes),
    )
}

/// crossterm's backend on standard output, but for the size ([`current`]) and the cursor's
/// position (where this backend last moved it, never asked of the terminal).
pub struct Backend {
    inner: CrosstermBackend<Stdout>,
    cursor: Position,
}

impl Backend {
    /// A backend drawing on standard output.
    pub fn new() -> Backend {
        Backend {
            inner: CrosstermBackend::new(io::stdout()),
            cursor: Position::ORIGIN,
        }
    }
}

impl Default for Backend {
    fn default() -> Backend {
        Backend::new()
    }
}

impl RatatuiBackend for Backend {
    type Error = io::Error;

    fn draw<'a, I>(&mut self, content: I) -> io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        // Where the cells end is the terminal's business; ratatui moves the cursor before it
        // relies on its position.
        self.inner.draw(content)
    }

    fn hide_cursor(&mut self) -> io::Result<()> {
        self.inner.hide_cursor()
    }

    fn show_cursor(&mut self) -> io::Result<()> {
        self.inner.show_cursor()
    }

    fn get_cursor_position(&mut self) -> io::Result<Position> {
        Ok(self.cursor)
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> io::Result<()> {
        let p = position.into();
        self.inner.set_cursor_position(p)?;
        self.cursor = p;
        Ok(())
    }

    fn clear(&mut self) -> io::Result<()> {
        self.inner.clear()
    }

    fn clear_region(&mut self, clear_type: ClearType) -> io::Result<()> {
        self.inner.clear_region(clear_type)
    }

    fn size(&self) -> io::Result<Size> {
        let (width, height) = current();
        Ok(Size { width, height })
    }

    fn window_size(&mut self) -> io::Result<WindowSize> {
        let (width, height) = current();
        Ok(WindowSize {
            columns_rows: Size { width, height },
            pixels: Size::default(),
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        RatatuiBackend::flush(&mut self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_terminal_then_the_environment_then_80x24() {
        let g = |ws, c: Option<&str>, l: Option<&str>| {
            geometry(ws, c.map(str::as_bytes), l.map(str::as_bytes))
        };
        // A window size with both dimensions wins over the environment.
        assert_eq!(g(Some((100, 30)), Some("60"), Some("20")), (100, 30));
        // None (0x0, or not a terminal): the environment, each variable alone.
        assert_eq!(g(Some((0, 0)), Some("60"), Some("20")), (60, 20));
        assert_eq!(g(None, Some("60"), None), (60, 24));
        assert_eq!(g(None, None, Some("20")), (80, 20));
        assert_eq!(g(None, None, None), (80, 24));
        // One dimension from the terminal: the environment first, then that one.
        assert_eq!(g(Some((0, 40)), None, None), (80, 40));
        assert_eq!(g(Some((0, 40)), None, Some("20")), (80, 20));
        // ncurses' reading of the variables: strtol base 0, whole, positive.
        assert_eq!(g(None, Some("0x5a"), Some("036")), (90, 30));
        assert_eq!(g(None, Some("90x"), Some("-5")), (80, 24));
        assert_eq!(g(None, Some(""), Some("0")), (80, 24));
        // procps' limits: 3 columns and rows at least, 512 columns at most.
        assert_eq!(g(Some((1, 1)), None, None), (3, 3));
        assert_eq!(g(Some((1000, 300)), None, None), (512, 300));
        assert_eq!(g(None, Some("99999999999"), None), (512, 24));
    }
}
