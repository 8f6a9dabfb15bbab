//! Text of top's screen, laid out as procps-ng 4.0.2 lays it out: the summary lines, the
//! column heading and one line per task, with procps' scaling of memory (KiB, then `m`, `g`,
//! ... when a number does not fit), of percentages and of CPU time (`mm:ss.hh`, then coarser
//! units), and its truncation marker `+` for text that does not fit a column.
//!
//! Batch mode prints these lines as they are; the interactive screen draws the same lines
//! through the terminal library. Which rows appear and in what order is [`super::model`]'s
//! business.

use std::io::Write;

use taskdiag_proto::task::Task;
use taskdiag_proto::{BaseRec, CredRec, Group, StatRec, StatmRec};

use super::model::{command, Col, Counts, Frame, Row, SortKey};
use super::sys::{CpuPct, Mem};
use crate::names::Abbrev;
use crate::{procvals, text};

/// Memory scales, as `-E`/`-e` and `E`/`e` choose them.
pub const SCALE_SUFFIX: &[u8; 6] = b"kmgtpe";

/// Column positions for a screen width.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The columns that fit, in order.
    pub cols: Vec<Col>,
    /// The width of each (the last may be COMMAND's variable width).
    pub widths: Vec<usize>,
    /// The heading line (not trimmed).
    pub header: String,
}

/// Lays out `fields` (the shown ones, in order) for `screen_cols` as procps'
/// `calibrate_fields` does: fields are taken left to right while they fit (a variable-width
/// one counting as its heading), and the variable-width ones share what is left of the line.
/// `pid_w` is the width of the pid columns, `cpu_w` that of P.
pub fn layout(fields: &[Col], screen_cols: usize, pid_w: usize, cpu_w: usize) -> Layout {
    let fields: &[Col] = if fields.is_empty() {
        &[Col::Pid]
    } else {
        fields
    };
    let mut cols = Vec::new();
    let mut used = 0usize;
    let (mut varcnt, mut varsz) = (0usize, 0usize);
    for &c in fields {
        let len = c.width(pid_w, cpu_w).unwrap_or(c.name().len()) + 1;
        if used + len > screen_cols {
            break;
        }
        used += len;
        cols.push(c);
        if c.variable() {
            varcnt += 1;
            varsz += c.name().len();
        }
    }
    varsz += screen_cols - used;
    let varsz = varsz.checked_div(varcnt).unwrap_or(varsz);
    let widths: Vec<usize> = cols
        .iter()
        .map(|c| c.width(pid_w, cpu_w).unwrap_or(varsz))
        .collect();
    let mut header = String::new();
    for (c, &w) in cols.iter().zip(&widths) {
        if c.right() {
            header.push_str(&format!("{:>w$.w$} ", c.name()));
        } else {
            header.push_str(&format!("{:<w$.w$} ", c.name()));
        }
    }
    Layout {
        cols,
        widths,
        header,
    }
}

/// Pads `s` (ASCII) to `w` on the left or right, then a space.
fn pad(out: &mut Vec<u8>, s: &[u8], w: usize, right: bool) {
    let fill = w.saturating_sub(s.len());
    if right {
        out.resize(out.len() + fill, b' ');
        out.extend_from_slice(s);
    } else {
        out.extend_from_slice(s);
        out.resize(out.len() + fill, b' ');
    }
    out.push(b' ');
}

/// procps' `make_num`: a number, its last fitting character replaced by `+` when too wide.
fn num(v: i64, w: usize) -> Vec<u8> {
    let mut s = v.to_string().into_bytes();
    if s.len() > w && w > 0 {
        s.truncate(w);
        s[w - 1] = b'+';
    }
    s
}

/// procps' `scale_num`: a count as is when it fits, else in KiB-style units (`1.2k`, `3m`,
/// ...) with one decimal or none.
pub fn scale_num(v: f64, w: usize) -> Vec<u8> {
    let s = format!("{v:.0}");
    if s.len() <= w {
        return s.into_bytes();
    }
    let mut num = v;
    for &sfx in SCALE_SUFFIX.iter() {
        num /= 1024.0;
        let s = format!("{num:.1}{}", sfx as char);
        if s.len() <= w {
            return s.into_bytes();
        }
        let s = format!("{num:.0}{}", sfx as char);
        if s.len() <= w {
            return s.into_bytes();
        }
    }
    b"?".to_vec()
}

/// procps' `hex_make` with zeros shown as dots (the Flags field).
pub fn hex_flags(v: u64) -> Vec<u8> {
    format!("{v:08x}").replace('0', ".").into_bytes()
}

/// procps' `scale_mem`: `kib` at the `target` scale or the first larger one that fits.
pub fn scale_mem(target: usize, kib: u64, w: usize) -> Vec<u8> {
    let mut num = kib as f32;
    for (i, &sfx) in SCALE_SUFFIX.iter().enumerate().take(5) {
        if i >= target {
            let s = if i == 0 {
                // `num` is a whole number (KiB as f32), so this is "%.0f" without the float
                // formatter.
                (num as u64).to_string()
            } else {
                format!("{num:.1}{}", sfx as char)
            };
            if s.len() <= w {
                return s.into_bytes();
            }
        }
        num /= 1024.0;
    }
    b"?".to_vec()
}

/// procps' `scale_pcnt` with `xtra` (the utilization fields): three decimals, then two, when
/// they fit, then as [`scale_pcnt`].
pub fn scale_pcnt_xtra(v: f64, w: usize) -> Vec<u8> {
    for p in [3, 2] {
        let s = format!("{v:.p$}");
        if s.len() <= w {
            return s.into_bytes();
        }
    }
    scale_pcnt(v as f32, w)
}

/// procps' `scale_pcnt`: one decimal when it fits, else none.
pub fn scale_pcnt(v: f32, w: usize) -> Vec<u8> {
    if v == 0.0 && w >= 3 {
        // Most tasks, most of the time.
        return b"0.0".to_vec();
    }
    let s = format!("{v:.1}");
    if s.len() <= w {
        return s.into_bytes();
    }
    let s = format!("{v:>w$.0}");
    if s.len() <= w {
        return s.into_bytes();
    }
    b"?".to_vec()
}

/// procps' `scale_tics` for TIME+: `m:ss.hh` up to 6 hours, then `m:ss`, `h,mm` (up to 4
/// days), `Dd+Hh`, `Dd` (up to 2 weeks), `Ww+Dd`, `Ww`: the first that fits `w`.
pub fn scale_tics(tics: u64, hz: u64, w: usize) -> Vec<u8> {
    scale_tics_as(tics, hz, w, 0)
}

/// [`scale_tics`] starting at `target`: 0 `m:ss.hh`, 1 `m:ss` (STARTED), 2 `h,mm`
/// (ELAPSED).
pub fn scale_tics_as(tics: u64, hz: u64, w: usize, target: u8) -> Vec<u8> {
    let nt = tics.saturating_mul(100) / hz.max(1);
    let cent = nt % 100;
    let secs = nt / 100;
    let mins = secs / 60;
    let hour = mins / 60;
    let days = hour / 24;
    let week = days / 7;
    let mut tries: Vec<String> = Vec::with_capacity(7);
    if mins <= 360 {
        if target == 0 {
            tries.push(format!("{}:{:02}.{:02}", mins, secs % 60, cent));
        }
        if target <= 1 {
            tries.push(format!("{}:{:02}", mins, secs % 60));
        }
    }
    if hour <= 96 {
        tries.push(format!("{},{:02}", hour, mins % 60));
    }
    if days <= 14 {
        tries.push(format!("{}d+{}h", days, hour % 24));
        tries.push(format!("{days}d"));
    }
    tries.push(format!("{}w+{}d", week, days % 7));
    tries.push(format!("{week}w"));
    tries
        .into_iter()
        .find(|s| s.len() <= w)
        .map(String::into_bytes)
        .unwrap_or_else(|| b"?".to_vec())
}

/// Text `s` in at most `w` screen cells: as is when it fits, else cut to `w - 1` cells and
/// `+`. Returns the cells used.
fn fit(out: &mut Vec<u8>, s: &[u8], w: usize, utf8: bool) -> usize {
    let start = out.len();
    // Two cells of slack: a too-long text shows more than `w` cells even when its next
    // character is a wide one.
    let cells = text::out_escape(out, s, w + 2, utf8);
    if cells <= w {
        return cells;
    }
    out.truncate(start);
    let cells = text::out_escape(out, s, w.saturating_sub(1), utf8);
    out.push(b'+');
    cells + 1
}

/// What formatting a row needs besides the row.
pub struct RowCtx<'a> {
    /// The refresh's table.
    pub frame: &'a Frame,
    /// %CPU per tick of delta (`100 / (hz * et)`, divided by the CPU count outside Irix mode).
    pub etscale: f32,
    /// Highest %CPU shown.
    pub pmax: f32,
    /// MemTotal, KiB.
    pub mem_total: u64,
    /// Clock ticks per second.
    pub hz: u64,
    /// Seconds since boot when the frame was taken (ELAPSED, %CUU, %CUC).
    pub uptime: f64,
    /// Memory scale of VIRT, RES, SHR and the other sizes (index into [`SCALE_SUFFIX`]).
    pub task_scale: usize,
    /// COMMAND shows command lines.
    pub cmdline: bool,
    /// TIME+ includes children.
    pub cumulative: bool,
    /// The locale is UTF-8.
    pub utf8: bool,
    /// smaps_rollup by task, read once per frame for all of RSS, PSS, PSan, PSfd, PSsh, USS
    /// and the sort key, as procps reads it once (`RowCtx::rollup`).
    pub rollups: std::cell::RefCell<std::collections::HashMap<u32, procvals::Rollup>>,
}

/// A text cell: `s` fitted into `w` cells (`+` marks a cut).
fn text_cell(s: &[u8], w: usize, utf8: bool) -> Vec<u8> {
    let mut v = Vec::new();
    fit(&mut v, s, w, utf8);
    v
}

impl RowCtx<'_> {
    /// /proc/PID/smaps_rollup's sizes of task `pid`, read on its first field of the frame.
    fn rollup(&self, pid: u32) -> procvals::Rollup {
        *self
            .rollups
            .borrow_mut()
            .entry(pid)
            .or_insert_with(|| procvals::smaps_rollup(pid))
    }

    /// %CPU of a row, capped as procps caps it; `None` without STAT.
    pub fn pcpu(&self, r: &Row) -> Option<f32> {
        let cpu = r.cpu?;
        let mut u = cpu.delta as f32 * self.etscale;
        let n = cpu.nlwp.max(1) as f32;
        if u > 100.0 * n {
            u = 100.0 * n;
        }
        if u > self.pmax {
            u = self.pmax;
        }
        Some(u)
    }

    /// One cell, as text (for other-filters); `-` for a value whose group could not be read.
    pub fn cell(&self, r: &Row, c: Col, w: usize) -> Vec<u8> {
        self.value(r, c, w).unwrap_or_else(|| b"-".to_vec())
    }

    fn task(&self, r: &Row) -> Option<&Task> {
        self.frame.tasks.get(r.idx as usize)
    }

    /// Whether group `g` was fetched and did not fail for `t`: its absence then means the task
    /// has no such data (a kernel thread has no memory).
    fn absent_ok(&self, t: &Task, g: Group) -> bool {
        self.frame.fetched & g.flag() != 0 && !t.failed(g)
    }

    fn statm(&self, r: &Row) -> Option<StatmRec> {
        let t = self.task(r)?;
        t.statm
            .or_else(|| self.absent_ok(t, Group::Statm).then(StatmRec::default))
    }

    fn stat(&self, r: &Row) -> Option<StatRec> {
        self.task(r)?.stat
    }

    fn cred(&self, r: &Row) -> Option<&CredRec> {
        self.task(r)?.cred.as_ref().map(|c| &c.rec)
    }

    fn base(&self, r: &Row) -> Option<&BaseRec> {
        self.task(r)?.base.as_ref().map(|b| &b.rec)
    }

    /// The supplementary groups as libproc2 lists them: ids (or names) joined by `,`, `-`
    /// without any.
    fn supgroups(&self, r: &Row, names: bool) -> Option<Vec<u8>> {
        let groups = &self.task(r)?.cred.as_ref()?.groups;
        if groups.is_empty() {
            return Some(b"-".to_vec());
        }
        let mut n = self.frame.names.borrow_mut();
        let v: Vec<String> = groups
            .iter()
            .map(|&g| {
                if names {
                    n.group(g).to_string()
                } else {
                    g.to_string()
                }
            })
            .collect();
        Some(v.join(",").into_bytes())
    }

    /// The text of a text field (escaped, not fitted), for cells and sorting.
    fn text(&self, r: &Row, c: Col) -> Option<Vec<u8>> {
        let t = self.task(r)?;
        let fetched = |g: Group| self.frame.fetched & g.flag() != 0;
        let cg = || procvals::cgroup_text(t.cgroup.as_ref(), fetched(Group::Cgroup));
        Some(match c {
            Col::User => self
                .frame
                .users
                .get(r.user? as usize)
                .map(|s| s.as_bytes().to_vec())
                .unwrap_or_else(|| b"?".to_vec()),
            Col::Ruser => self
                .frame
                .names
                .borrow_mut()
                .user(self.cred(r)?.uid)
                .as_bytes()
                .to_vec(),
            Col::Suser => self
                .frame
                .names
                .borrow_mut()
                .user(self.cred(r)?.suid)
                .as_bytes()
                .to_vec(),
            Col::Group => self
                .frame
                .names
                .borrow_mut()
                .group(self.cred(r)?.egid)
                .as_bytes()
                .to_vec(),
            Col::Tty => {
                let dev = self.base(r)?.tty_nr;
                self.frame
                    .ttys
                    .borrow_mut()
                    .name(dev, r.pid, 63, Abbrev::Dev)
                    .into_bytes()
            }
            Col::Command => command(&self.frame.tasks, r, self.cmdline, self.utf8),
            Col::Wchan => match procvals::sched_wchan(t.sched.as_ref(), fetched(Group::Sched)) {
                Some(w) => w.into_bytes(),
                // Not read with the snapshot: from the file, as procps reads it.
                None => procvals::wchan(r.pid).into_bytes(),
            },
            Col::Syscall => {
                procvals::sched_syscall(t.sched.as_ref(), fetched(Group::Sched), r.kthread)?
                    .into_bytes()
            }
            Col::Flags => hex_flags(u64::from(self.base(r)?.task_flags)),
            Col::Cgroups => procvals::cgroup(cg()?, self.utf8),
            Col::Cgname => procvals::cgname(procvals::cgroup(cg()?, self.utf8)),
            Col::Lxc => procvals::lxc(cg()?),
            Col::Supgids => self.supgroups(r, false)?,
            Col::Supgrps => self.supgroups(r, true)?,
            Col::Environ => {
                procvals::environ(t.environ.as_deref(), fetched(Group::Environ), self.utf8)?
            }
            Col::Exe => procvals::exe(t.paths.as_ref(), fetched(Group::Paths), self.utf8)?,
            _ => return None,
        })
    }

    /// Ticks since boot now, as libproc2's `boot_tics`.
    fn boot_tics(&self) -> f64 {
        self.uptime * self.hz as f64
    }

    /// The task's start, ticks since boot.
    fn start_tics(&self, r: &Row) -> u64 {
        r.start_ns / (1_000_000_000 / self.hz.max(1)).max(1)
    }

    /// The number a numeric field shows, for cells and sorting.
    fn number(&self, r: &Row, c: Col) -> Option<f64> {
        let kib = |b: u64| (b / 1024) as f64;
        let ticks = |ns: u64| ns / (1_000_000_000 / self.hz.max(1)).max(1);
        Some(match c {
            Col::Ppid => self.base(r)?.ppid as f64,
            Col::Pgrp => self.base(r)?.pgid as f64,
            Col::Sid => self.base(r)?.sid as f64,
            Col::Tpgid => self.base(r)?.tpgid as f64,
            Col::Tgid => r.tgid as f64,
            Col::Uid => self.cred(r)?.euid as f64,
            Col::Ruid => self.cred(r)?.uid as f64,
            Col::Suid => self.cred(r)?.suid as f64,
            Col::Gid => self.cred(r)?.egid as f64,
            Col::Nth => self.stat(r)?.threads as f64,
            Col::Cpun => self.stat(r)?.processor as f64,
            Col::Numa => procvals::numa_node_of_cpu(self.stat(r)?.processor) as f64,
            Col::SmapRss | Col::Pss | Col::PssAnon | Col::PssFile | Col::PssShmem | Col::Uss => {
                let x = self.rollup(r.pid);
                (match c {
                    Col::SmapRss => x.rss,
                    Col::Pss => x.pss,
                    Col::PssAnon => x.pss_anon,
                    Col::PssFile => x.pss_file,
                    Col::PssShmem => x.pss_shmem,
                    _ => x.uss,
                }) as f64
            }
            Col::Time1 => {
                let cpu = r.cpu?;
                (if self.cumulative { cpu.ctics } else { cpu.tics }) as f64
            }
            Col::Swap => kib(self.statm(r)?.swap),
            Col::Code => kib(self.statm(r)?.text),
            Col::Data => {
                let m = self.statm(r)?;
                kib(m.data + m.stack)
            }
            Col::Used => {
                let m = self.statm(r)?;
                kib(m.rss_anon + m.rss_file + m.rss_shmem + m.swap)
            }
            Col::RssAnon => kib(self.statm(r)?.rss_anon),
            Col::RssFile => kib(self.statm(r)?.rss_file),
            Col::RssLocked => kib(self.statm(r)?.locked),
            Col::RssShared => kib(self.statm(r)?.rss_shmem),
            Col::Fl1 => self.stat(r)?.majflt as f64,
            Col::Fl2 => self.stat(r)?.minflt as f64,
            Col::Fv1 => r.cpu?.dflt.0 as f64,
            Col::Fv2 => r.cpu?.dflt.1 as f64,
            Col::Drt => 0.0,
            c if c.ns_name().is_some() => {
                let t = self.task(r)?;
                let ok = self.absent_ok(t, Group::Ns);
                procvals::ns_inode(t.ns.as_ref(), ok, t.pid, c.ns_name()?)? as f64
            }
            Col::IoRb | Col::IoRo | Col::IoWb | Col::IoWo => {
                let t = self.task(r)?;
                let io = procvals::io(t.io, self.frame.fetched & Group::Io.flag() != 0)?;
                (match c {
                    Col::IoRb => io.read_bytes,
                    Col::IoRo => io.syscr,
                    Col::IoWb => io.write_bytes,
                    _ => io.syscw,
                }) as f64
            }
            Col::OomAdj | Col::OomScore | Col::Logid | Col::Agid | Col::Agni => {
                let t = self.task(r)?;
                let fetched = self.frame.fetched & Group::Sched.flag() != 0;
                let n = procvals::sched_numbers(t.sched.as_ref(), fetched)?;
                (match c {
                    Col::OomAdj => n.oom_adj,
                    Col::OomScore => n.oom_score,
                    Col::Logid => n.luid,
                    Col::Agid => n.ag_id,
                    _ => n.ag_nice,
                }) as f64
            }
            Col::Started => {
                self.base(r)?;
                self.start_tics(r) as f64
            }
            Col::Elapsed => {
                self.base(r)?;
                let t = self.boot_tics() - self.start_tics(r) as f64;
                if t > 0.0 {
                    t / self.hz.max(1) as f64
                } else {
                    0.0
                }
            }
            Col::Cuu | Col::Cuc => {
                let s = self.stat(r)?;
                let mut used = ticks(s.utime_ns) + ticks(s.stime_ns);
                if c == Col::Cuc {
                    used += ticks(s.cutime_ns) + ticks(s.cstime_ns);
                }
                let t = self.boot_tics() - self.start_tics(r) as f64;
                if t > 0.0 {
                    (used as f32 * 100.0f32) as f64 / t
                } else {
                    0.0
                }
            }
            _ => return None,
        })
    }

    /// The value field `c` of row `r` sorts by, for the fields [`super::model::sort`] does
    /// not compare itself.
    pub fn sort_key(&self, r: &Row, c: Col) -> SortKey {
        if let Some(t) = self.text(r, c) {
            return SortKey::Text(t);
        }
        match self.number(r, c) {
            Some(n) => SortKey::Num(n),
            None => SortKey::Missing,
        }
    }

    fn value(&self, r: &Row, c: Col, w: usize) -> Option<Vec<u8>> {
        Some(match c {
            Col::Pid => num(r.pid as i64, w),
            Col::Pr => {
                let pr = r.cpu?.pr;
                if !(-99..=999).contains(&pr) {
                    b"rt".to_vec()
                } else {
                    num(pr as i64, w)
                }
            }
            Col::Ni => num(r.cpu?.ni as i64, w),
            Col::Virt => scale_mem(self.task_scale, r.mem?.virt, w),
            Col::Res => scale_mem(self.task_scale, r.mem?.res, w),
            Col::Shr => scale_mem(self.task_scale, r.mem?.shr, w),
            Col::S => vec![r.state],
            Col::Cpu => scale_pcnt(self.pcpu(r)?, w),
            Col::Mem => {
                let pct = r.mem?.res as f32 * 100.0 / self.mem_total.max(1) as f32;
                scale_pcnt(pct, w)
            }
            Col::Time => {
                let cpu = r.cpu?;
                let t = if self.cumulative { cpu.ctics } else { cpu.tics };
                scale_tics(t, self.hz, w)
            }
            Col::Time1 => scale_tics(self.number(r, c)? as u64, self.hz, w),
            Col::OomAdj | Col::OomScore | Col::Logid | Col::Agid | Col::Agni | Col::Numa => {
                num(self.number(r, c)? as i64, w)
            }
            Col::Started => scale_tics_as(self.number(r, c)? as u64, self.hz, w, 1),
            Col::Elapsed => {
                let tics = (self.number(r, c)? * self.hz as f64) as u64;
                scale_tics_as(tics, self.hz, w, 2)
            }
            Col::Cuu | Col::Cuc => scale_pcnt_xtra(self.number(r, c)?, w),
            Col::Swap
            | Col::Code
            | Col::Data
            | Col::Used
            | Col::RssAnon
            | Col::RssFile
            | Col::RssLocked
            | Col::RssShared
            | Col::SmapRss
            | Col::Pss
            | Col::PssAnon
            | Col::PssFile
            | Col::PssShmem
            | Col::Uss
            | Col::Drt => scale_mem(self.task_scale, self.number(r, c)? as u64, w),
            Col::Fl1
            | Col::Fl2
            | Col::Fv1
            | Col::Fv2
            | Col::IoRb
            | Col::IoRo
            | Col::IoWb
            | Col::IoWo => scale_num(self.number(r, c)?, w),
            Col::Supgids => {
                // make_str: plain bytes, cut with `+`.
                let mut v = self.text(r, c)?;
                if v.len() > w && w > 0 {
                    v.truncate(w);
                    v[w - 1] = b'+';
                }
                v
            }
            c => match self.text(r, c) {
                Some(t) => text_cell(&t, w, self.utf8),
                None => num(self.number(r, c)? as i64, w),
            },
        })
    }

    /// Appends the line of row `r` (not trimmed, no newline).
    pub fn row(&self, out: &mut Vec<u8>, l: &Layout, r: &Row) {
        for (c, &w) in l.cols.iter().zip(&l.widths) {
            if c.right() {
                pad(out, &self.cell(r, *c, w), w, true);
            } else {
                let cell = self.cell(r, *c, w);
                // The cell is `w` cells or fewer, but may hold multi-byte characters.
                let cells = text_cells(&cell, self.utf8);
                out.extend_from_slice(&cell);
                out.resize(out.len() + w.saturating_sub(cells), b' ');
                out.push(b' ');
            }
        }
    }
}

/// Screen cells of already-escaped text.
fn text_cells(s: &[u8], utf8: bool) -> usize {
    if !utf8 || s.is_ascii() {
        return s.len();
    }
    let mut scratch = Vec::with_capacity(s.len());
    text::out_escape(&mut scratch, s, usize::MAX, utf8)
}

/// What the summary lines show.
pub struct Summary<'a> {
    /// Local time.
    pub hms: (i32, i32, i32),
    /// Seconds since boot.
    pub uptime: f64,
    /// Logged-in users.
    pub users: u32,
    /// Load averages.
    pub load: [f64; 3],
    /// Task counts.
    pub counts: Counts,
    /// Threads rather than processes are counted.
    pub threads: bool,
    /// CPU percentages: the total first, then each CPU.
    pub cpus: &'a [CpuPct],
    /// Show each CPU instead of the total.
    pub per_cpu: bool,
    /// Memory.
    pub mem: Mem,
    /// Memory scale (index into [`SCALE_SUFFIX`]).
    pub mem_scale: usize,
}

/// The uptime line, as procps-ng 4.0.2 words it.
pub fn uptime_line(hms: (i32, i32, i32), uptime: f64, users: u32, load: [f64; 3]) -> String {
    let up = uptime as u64;
    let days = up / 86400;
    let hours = up / 3600 % 24;
    let mins = up / 60 % 60;
    let mut s = format!("top - {:02}:{:02}:{:02} up ", hms.0, hms.1, hms.2);
    if days > 0 {
        s.push_str(&format!(
            "{days} {}, ",
            if days > 1 { "days" } else { "day" }
        ));
    }
    if hours > 0 {
        s.push_str(&format!("{hours:2}:{mins:02}, "));
    } else {
        s.push_str(&format!("{mins} min, "));
    }
    s.push_str(&format!(
        "{users:2} {},  load average: {:.2}, {:.2}, {:.2}",
        if users > 1 { "users" } else { "user" },
        load[0],
        load[1],
        load[2]
    ));
    s
}

/// One memory amount for the summary: `%.0f`/`%#.1f` plus a space, in 9 characters (`+`
/// marks a cut).
fn mem_amount(kib: u64, scale: usize) -> String {
    let div = (1u64 << (10 * scale.min(5))) as f32;
    let v = kib as f32 / div;
    let mut s = if scale == 0 {
        format!("{v:.0} ")
    } else {
        format!("{v:.1} ")
    };
    if s.len() > 9 {
        s.truncate(9);
        s.replace_range(8..9, "+");
    }
    format!("{s:>9}")
}

const MEM_LABELS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

impl Summary<'_> {
    /// The summary lines as procps prints them (the CPU and memory lines keep their trailing
    /// spaces), each cut to `cols` characters.
    pub fn lines(
        &self,
        show_load: bool,
        show_states: bool,
        show_mem: bool,
        cols: usize,
    ) -> Vec<String> {
        let mut v = Vec::new();
        if show_load {
            v.push(uptime_line(self.hms, self.uptime, self.users, self.load));
        }
        if show_states {
            let c = self.counts;
            v.push(format!(
                "{}: {:3} total, {:3} running, {:3} sleeping, {:3} stopped, {:3} zombie",
                if self.threads { "Threads" } else { "Tasks" },
                c.total,
                c.running,
                c.sleeping,
                c.stopped,
                c.zombie
            ));
            for c in self.cpus.iter().filter(|c| c.id.is_some() == self.per_cpu) {
                let label = match c.id {
                    None => "%Cpu(s):".to_string(),
                    Some(id) => format!("%Cpu{id:<3}:"),
                };
                let p = c.pct;
                v.push(format!(
                    "{label}{:5.1} us,{:5.1} sy,{:5.1} ni,{:5.1} id,{:5.1} wa,{:5.1} hi,{:5.1} si,{:5.1} st ",
                    p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
                ));
            }
        }
        if show_mem {
            let m = self.mem;
            let sc = self.mem_scale.min(5);
            let a = |k: u64| mem_amount(k, sc);
            v.push(format!(
                "{} Mem : {}total, {}free, {}used, {}buff/cache     ",
                MEM_LABELS[sc],
                a(m.total),
                a(m.free),
                a(m.used),
                a(m.buff_cache)
            ));
            v.push(format!(
                "{} Swap: {}total, {}free, {}used. {}avail Mem ",
                MEM_LABELS[sc],
                a(m.swap_total),
                a(m.swap_free),
                a(m.swap_used),
                a(m.avail)
            ));
        }
        for l in &mut v {
            if l.len() > cols {
                let mut cut = cols;
                while !l.is_char_boundary(cut) {
                    cut -= 1;
                }
                l.truncate(cut);
            }
        }
        v
    }
}

/// Removes trailing spaces, as procps does for heading and task lines in batch mode.
pub fn trim_end(line: &mut Vec<u8>) {
    while line.last() == Some(&b' ') {
        line.pop();
    }
}

/// Writes `s` and a newline.
pub fn put_line(out: &mut impl Write, s: &[u8]) -> std::io::Result<()> {
    out.write_all(s)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::model::Deltas;
    use taskdiag_proto::task::{Base, Cred, GroupError};

    /// Every column's text for each task of one frame.
    fn cells(tasks: Vec<Task>, fetched: u64) -> Vec<Vec<String>> {
        let frame = Deltas::new().frame(tasks, 1_000_000_000, &[], 10_000_000, fetched);
        let ctx = RowCtx {
            frame: &frame,
            etscale: 1.0,
            pmax: 100.0,
            mem_total: 1 << 20,
            hz: 100,
            uptime: 1000.0,
            task_scale: 0,
            cmdline: false,
            cumulative: false,
            utf8: true,
            rollups: Default::default(),
        };
        frame
            .rows
            .iter()
            .map(|r| {
                Col::DEFAULT
                    .iter()
                    .map(|&c| {
                        String::from_utf8_lossy(&ctx.cell(r, c, 9))
                            .trim()
                            .to_string()
                    })
                    .collect()
            })
            .collect()
    }

    /// A value top could not read shows as `-`, never as a zero; a task without an address
    /// space (STATM asked for, absent, no error) has zero sizes, as procps shows them.
    #[test]
    fn unreadable_values_show_as_a_dash() {
        let all =
            Group::Base.flag() | Group::Cred.flag() | Group::Stat.flag() | Group::Statm.flag();
        let full = Task {
            pid: 42,
            tgid: 42,
            base: Some(Base {
                rec: BaseRec::default(),
                comm: b"w".to_vec(),
            }),
            cred: Some(Cred {
                rec: CredRec::default(),
                groups: vec![],
            }),
            stat: Some(StatRec {
                priority: 20,
                threads: 1,
                utime_ns: 5_000_000_000,
                ..StatRec::default()
            }),
            statm: Some(StatmRec {
                vm_size: 8 << 20,
                rss_anon: 1 << 20,
                ..StatmRec::default()
            }),
            ..Task::default()
        };
        let got = cells(vec![full.clone()], all);
        assert_eq!(got[0][..7], ["42", "root", "20", "0", "8192", "1024", "0"]);
        let failed = |g: Group| GroupError {
            group: g as u16,
            errno: libc::EACCES,
        };
        let broken = Task {
            cred: None,
            stat: None,
            statm: None,
            errors: vec![
                failed(Group::Cred),
                failed(Group::Stat),
                failed(Group::Statm),
            ],
            ..full.clone()
        };
        let got = cells(vec![broken], all);
        assert_eq!(
            got[0],
            ["42", "-", "-", "-", "-", "-", "-", "R", "-", "-", "-", "w"]
        );
        let kthread = Task {
            statm: None,
            ..full
        };
        let got = cells(vec![kthread], all);
        assert_eq!(got[0][4..7], ["0", "0", "0"]);
    }

    /// The other fields: from the records they say they need, `-` without them.
    #[test]
    fn more_fields_like_procps() {
        use taskdiag_proto::task::{Cgroup, Ns};
        use taskdiag_proto::{CgroupRec, NsRec};
        let all = Group::Base.flag()
            | Group::Cred.flag()
            | Group::Stat.flag()
            | Group::Statm.flag()
            | Group::Ns.flag()
            | Group::Cgroup.flag()
            | Group::Environ.flag()
            | Group::Paths.flag();
        let t = Task {
            pid: 7,
            tgid: 7,
            base: Some(Base {
                rec: BaseRec {
                    ppid: 1,
                    task_flags: 0x0040_0100,
                    start_time_ns: 90 * 1_000_000_000,
                    ..BaseRec::default()
                },
                comm: b"w".to_vec(),
            }),
            cred: Some(Cred {
                rec: CredRec::default(),
                groups: vec![0, 4],
            }),
            stat: Some(StatRec {
                threads: 3,
                majflt: 12,
                minflt: 1_234_567,
                ..StatRec::default()
            }),
            statm: Some(StatmRec {
                swap: 4 << 20,
                text: 20 << 10,
                data: 300 << 10,
                stack: 56 << 10,
                rss_anon: 1 << 20,
                locked: 8 << 10,
                ..StatmRec::default()
            }),
            ns: Some(Ns {
                rec: NsRec {
                    ipc: 4026531839,
                    ..NsRec::default()
                },
                ids: vec![],
            }),
            cgroup: Some(Cgroup {
                rec: CgroupRec::default(),
                text: b"1:name=systemd:/a.scope\n0::/lxc.payload.c1/x\n".to_vec(),
            }),
            environ: Some(b"A=1\0B=2\0".to_vec()),
            ..Task::default()
        };
        let frame = Deltas::new().frame(vec![t], 100_000_000_000, &[], 10_000_000, all);
        let ctx = RowCtx {
            frame: &frame,
            etscale: 1.0,
            pmax: 100.0,
            mem_total: 1 << 20,
            hz: 100,
            uptime: 100.0,
            task_scale: 0,
            cmdline: false,
            cumulative: false,
            utf8: true,
            rollups: Default::default(),
        };
        let r = &frame.rows[0];
        let cell = |c: Col| {
            let w = c.width(5, 1).unwrap_or(60);
            String::from_utf8_lossy(&ctx.cell(r, c, w)).into_owned()
        };
        for (c, want) in [
            (Col::Ppid, "1"),
            (Col::Nth, "3"),
            (Col::Fl1, "12"),
            (Col::Fl2, "1.2m"),
            (Col::Fv1, "0"),
            (Col::Swap, "4096"),
            (Col::Code, "20"),
            (Col::Data, "356"),
            (Col::Used, "5120"),
            (Col::RssAnon, "1024"),
            (Col::RssLocked, "8"),
            (Col::Drt, "0"),
            (Col::NsIpc, "4026531839"),
            (Col::NsNet, "0"),
            (Col::Flags, "..4..1.."),
            (Col::Supgids, "0,4"),
            (Col::Cgroups, "1:name=systemd:/a.scope,0::/lxc.payload.c1/x"),
            (Col::Cgname, "systemd:/a.scope,0::/lxc.payload.c1/x"),
            (Col::Lxc, "c1"),
            (Col::Environ, "A=1 B=2"),
            (Col::Exe, "-"),
            (Col::Started, "1:30"),
            (Col::Elapsed, "0,00"),
            (Col::Cuu, "0.000"),
            (Col::OomScore, "-"),
        ] {
            assert_eq!(cell(c), want, "{c:?}");
        }
        // A task whose groups were not read shows `-`, never a zero.
        let bare = Deltas::new().frame(
            vec![Task {
                pid: 8,
                tgid: 8,
                base: frame.tasks[0].base.clone(),
                ..Task::default()
            }],
            1,
            &[],
            10_000_000,
            Group::Base.flag(),
        );
        let ctx = RowCtx {
            frame: &bare,
            ..ctx
        };
        for c in [
            Col::NsIpc,
            Col::Cgroups,
            Col::Environ,
            Col::Exe,
            Col::Fl2,
            Col::Swap,
        ] {
            assert_eq!(ctx.cell(&bare.rows[0], c, 10), b"-", "{c:?}");
        }
    }

    #[test]
    fn counts_flags_and_utilization_like_procps() {
        assert_eq!(scale_num(999.0, 4), b"999");
        assert_eq!(scale_num(12345.0, 4), b"12k");
        assert_eq!(scale_num(1_234_567.0, 4), b"1.2m");
        assert_eq!(scale_num(5.0e15, 4), b"4.4p");
        assert_eq!(hex_flags(0x0040_0100), b"..4..1..");
        assert_eq!(scale_pcnt_xtra(1.5, 6), b"1.500");
        assert_eq!(scale_pcnt_xtra(12.5, 5), b"12.50");
        assert_eq!(scale_tics_as(100 * 125, 100, 7, 1), b"2:05");
        assert_eq!(scale_tics_as(100 * 125, 100, 7, 2), b"0,02");
    }

    #[test]
    fn variable_columns_share_the_rest_of_the_line() {
        let l = layout(&[Col::Pid, Col::Cgroups, Col::S, Col::Command], 40, 5, 1);
        assert_eq!(l.widths, [5, 15, 1, 15]);
        assert_eq!(l.header.len(), 6 + 16 + 2 + 16);
        assert!(l.header.starts_with("  PID CGROUPS         S COMMAND"));
    }

    #[test]
    fn memory_scales_like_procps() {
        assert_eq!(scale_mem(0, 12345, 7), b"12345");
        assert_eq!(scale_mem(0, 123_456_789, 7), b"117.7g");
        assert_eq!(scale_mem(0, 12_345_678, 7), b"11.8g");
        assert_eq!(scale_mem(0, 1_234_567, 6), b"1.2g");
        assert_eq!(scale_mem(0, 1_234_567, 7), b"1234567");
        assert_eq!(scale_mem(1, 2048, 6), b"2.0m");
        assert_eq!(scale_mem(0, 0, 6), b"0");
    }

    #[test]
    fn percentages_and_times() {
        assert_eq!(scale_pcnt(99.96, 5), b"100.0");
        assert_eq!(scale_pcnt(0.0, 5), b"0.0");
        assert_eq!(scale_pcnt(1234.4, 5), b" 1234");
        assert_eq!(scale_tics(0, 100, 9), b"0:00.00");
        assert_eq!(scale_tics(12345, 100, 9), b"2:03.45");
        // 10 hours: minutes beyond the 6-hour limit.
        assert_eq!(scale_tics(100 * 36000, 100, 9), b"10,00");
        assert_eq!(scale_tics(100 * 86400 * 5, 100, 9), b"5d+0h");
        assert_eq!(scale_tics(100 * 86400 * 10, 100, 9), b"10d+0h");
        assert_eq!(scale_tics(100 * 86400 * 30, 100, 9), b"4w+2d");
    }

    #[test]
    fn numbers_and_text_that_do_not_fit_end_in_plus() {
        assert_eq!(num(1234567, 6), b"12345+");
        assert_eq!(num(-20, 3), b"-20");
        let mut v = Vec::new();
        assert_eq!(fit(&mut v, b"taskdiag-test", 8, false), 8);
        assert_eq!(v, b"taskdia+");
        v.clear();
        assert_eq!(fit(&mut v, b"root", 8, false), 4);
    }

    #[test]
    fn layout_fills_the_line() {
        let l = layout(&Col::DEFAULT, 80, 6, 1);
        assert_eq!(l.cols.len(), 12);
        assert_eq!(l.header.len(), 80);
        assert_eq!(
            l.header.trim_end(),
            "   PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND"
        );
        let narrow = layout(&Col::DEFAULT, 30, 5, 1);
        assert_eq!(narrow.cols, [Col::Pid, Col::User, Col::Pr, Col::Ni]);
    }

    #[test]
    fn summary_words() {
        assert_eq!(
            uptime_line((10, 5, 9), 23.0 * 60.0 + 5.0, 0, [1.0, 0.5, 0.25]),
            "top - 10:05:09 up 23 min,  0 user,  load average: 1.00, 0.50, 0.25"
        );
        assert_eq!(
            uptime_line(
                (1, 2, 3),
                86400.0 * 3.0 + 3600.0 * 2.0 + 60.0 * 7.0,
                2,
                [0.0; 3]
            ),
            "top - 01:02:03 up 3 days,  2:07,  2 users,  load average: 0.00, 0.00, 0.00"
        );
        assert_eq!(mem_amount(24_684_092, 1), " 24105.6 ");
        assert_eq!(mem_amount(0, 1), "     0.0 ");
        assert_eq!(mem_amount(2_000_000_000, 0), "20000000+");
    }
}
