//! Printing: one value per column and task exactly as procps ps 4.0.2 formats it
//! (`pr_*` in ps/output.c), and the line layout of procps' `show_one_proc`: right- and
//! left-justified columns, columns that borrow space from their neighbours, the last column
//! taking what is left of the screen width, forest prefixes and repeated headers.
//!
//! Values come from decoded taskdiag records ([`Row`]); the few things records do not carry
//! (the kernel function a task sleeps in, terminal names, the NUMA node of a CPU) are looked
//! up here per task, as procps does.
//!
//! With m/-m a line is a process line or a thread line ([`Line`]), which print `-` in the
//! columns procps reserves for the other kind.

use std::io::{self, Write};

use taskdiag_proto::task::Task;
use taskdiag_proto::{state_char, BaseRec, Group, StatRec, StatmRec};

use super::args::{Col, COLWID, OUTBUF_SIZE};
use super::specs::{cf, Pr, Sr};
use crate::names::{Abbrev, Names, Ttys};
use crate::snapshot::Machine;
use crate::text::{command_line, lib_escape, out_escape};

/// Spaces available before a column's text.
const SPACE_AMOUNT: i32 = 144;

/// One task as ps sees it.
///
/// Every accessor of a value that comes from an attribute group returns `None` when that group
/// was not fetched or is unavailable for this task (it then prints as `-`), so no column can
/// show a zero that was never read. A group that was fetched and is absent because the task has
/// no address space (kernel threads, zombies: no STATM, no CMDLINE) is what procps shows for
/// such tasks: zero sizes and the `[name]` command line.
pub struct Row<'a> {
    /// The decoded record.
    pub t: &'a Task,
    /// The groups asked for (`Group::flag` bits).
    pub fetched: u64,
}

impl Row<'_> {
    /// A record of group `g` that is absent: `Some(default)` when it was fetched without an
    /// error (the task has no such data, as a kernel thread has no memory), else `None`.
    fn absent<T: Default>(&self, g: Group) -> Option<T> {
        (self.fetched & g.flag() != 0 && !self.t.failed(g)).then(T::default)
    }
    fn b(&self) -> Option<&BaseRec> {
        self.t.base.as_ref().map(|b| &b.rec)
    }
    fn st(&self) -> Option<&StatRec> {
        self.t.stat.as_ref()
    }
    fn sm(&self) -> Option<StatmRec> {
        self.t.statm.or_else(|| self.absent(Group::Statm))
    }
    /// Signal mask `m`: 0 pending for the process (ShdPnd, procps' SIGNALS), 1 for the
    /// thread, 2 blocked, 3 ignored, 4 caught.
    fn sig(&self, m: u8) -> Option<u64> {
        let s = self.t.signal.or_else(|| self.absent(Group::Signal))?;
        Some(match m {
            0 => s.shared_pending,
            1 => s.pending,
            2 => s.blocked,
            3 => s.ignored,
            _ => s.caught,
        })
    }
    /// The inode of namespace `name` (a link name in /proc/PID/ns): see
    /// [`crate::procvals::ns_inode`].
    fn ns(&self, name: &str) -> Option<u32> {
        let absent_ok = self.fetched & Group::Ns.flag() != 0 && !self.t.failed(Group::Ns);
        crate::procvals::ns_inode(self.t.ns.as_ref(), absent_ok, self.t.pid, name)
    }
    /// /proc/PID/cgroup's bytes: empty where the group was fetched but the file could not be
    /// read (procps reads nothing then).
    fn cgroup_text(&self) -> Option<&[u8]> {
        let fetched = self.fetched & Group::Cgroup.flag() != 0;
        crate::procvals::cgroup_text(self.t.cgroup.as_ref(), fetched)
    }
    /// procps' cgroup string (`fill_cgroup_cvt`, [`crate::procvals::cgroup`]).
    fn cgroup(&self, utf8: bool) -> Option<Vec<u8>> {
        Some(crate::procvals::cgroup(self.cgroup_text()?, utf8))
    }
    /// procps' cgname ([`crate::procvals::cgname`]).
    fn cgname(&self, utf8: bool) -> Option<Vec<u8>> {
        Some(crate::procvals::cgname(self.cgroup(utf8)?))
    }
    /// procps' `lxc_containers` ([`crate::procvals::lxc`]).
    fn lxc(&self) -> Option<Vec<u8>> {
        Some(crate::procvals::lxc(self.cgroup_text()?))
    }
    /// readlink /proc/PID/exe as procps' `readlink_exe` keeps it ([`crate::procvals::exe`]).
    fn exe(&self, utf8: bool) -> Option<Vec<u8>> {
        let fetched = self.fetched & Group::Paths.flag() != 0;
        crate::procvals::exe(self.t.paths.as_ref(), fetched, utf8)
    }
    /// The environment as libproc2 makes it ([`crate::procvals::environ`]).
    fn environ(&self, utf8: bool) -> Option<Vec<u8>> {
        let fetched = self.fetched & Group::Environ.flag() != 0;
        crate::procvals::environ(self.t.environ.as_deref(), fetched, utf8)
    }
    /// The label procps' `pr_context` prints without libselinux: /proc/TGID/attr/current up
    /// to its first byte `isprint` refuses, `-` when that leaves nothing or the file cannot be
    /// read.
    fn label(&self) -> Option<Vec<u8>> {
        if self.fetched & Group::Security.flag() == 0 {
            return None;
        }
        let l = self.t.security.as_ref().map_or(&[][..], |s| &s.label[..]);
        let l = &l[..l.len().min(OUTBUF_SIZE as usize - 1)];
        let n = l
            .iter()
            .position(|&c| !crate::text::c_isprint(c))
            .unwrap_or(l.len());
        Some(if n == 0 {
            b"-".to_vec()
        } else {
            l[..n].to_vec()
        })
    }
    /// SCHED's numbers as procps reads them ([`crate::procvals::sched_numbers`]).
    fn sched_numbers(&self) -> Option<crate::procvals::SchedNumbers> {
        let fetched = self.fetched & Group::Sched.flag() != 0;
        crate::procvals::sched_numbers(self.t.sched.as_ref(), fetched)
    }
    /// /proc/PID/io's counter `i` (in the file's order), 0 where the file could not be read,
    /// as procps leaves it.
    fn io(&self, i: usize) -> Option<u64> {
        let fetched = self.fetched & Group::Io.flag() != 0;
        Some(crate::procvals::io(self.t.io, fetched)?.counters()[i])
    }
    /// The soft RLIMIT_RSS (bytes), from FILES.
    fn rss_rlim(&self) -> Option<u64> {
        const RLIMIT_RSS: usize = 5;
        self.t.files.as_ref()?.limit(RLIMIT_RSS).map(|l| l.soft)
    }
    /// Thread id.
    pub fn tid(&self) -> u32 {
        self.t.pid
    }
    /// Process id.
    pub fn tgid(&self) -> u32 {
        self.t.tgid
    }
    /// Parent pid.
    pub fn ppid(&self) -> Option<u32> {
        self.b().map(|b| b.ppid)
    }
    /// Process group.
    pub fn pgrp(&self) -> Option<u32> {
        self.b().map(|b| b.pgid)
    }
    /// Session.
    pub fn session(&self) -> Option<u32> {
        self.b().map(|b| b.sid)
    }
    /// Terminal (tty_nr).
    pub fn tty(&self) -> Option<u32> {
        self.b().map(|b| b.tty_nr)
    }
    /// Foreground process group of the terminal.
    pub fn tpgid(&self) -> Option<i32> {
        self.b().map(|b| b.tpgid)
    }
    /// State letter.
    pub fn state(&self) -> Option<u8> {
        self.b().map(|b| state_char(b.state) as u8)
    }
    /// The user instruction and stack pointers /proc/PID/stat shows (EIP, ESP): zero unless
    /// the task is exiting or dumping core (PF_EXITING, PF_POSTCOREDUMP, PF_DUMPCORE) and its
    /// kernel stack is still there, which taskdiag does not read: `None` then. A zombie's stack
    /// is gone.
    fn kstk(&self) -> Option<u64> {
        const PF_EXITING: u32 = 0x4;
        const PF_POSTCOREDUMP: u32 = 0x8;
        const PF_DUMPCORE: u32 = 0x200;
        let b = self.b()?;
        let exiting = b.task_flags & (PF_EXITING | PF_POSTCOREDUMP | PF_DUMPCORE) != 0;
        (!exiting || matches!(self.state(), Some(b'Z' | b'X'))).then_some(0)
    }
    /// Real, effective, saved and filesystem uid, then the same gids.
    fn ids(&self) -> Option<[u32; 8]> {
        let r = &self.t.cred.as_ref()?.rec;
        Some([
            r.uid, r.euid, r.suid, r.fsuid, r.gid, r.egid, r.sgid, r.fsgid,
        ])
    }
    /// Real uid.
    pub fn ruid(&self) -> Option<u32> {
        Some(self.ids()?[0])
    }
    /// Effective uid.
    pub fn euid(&self) -> Option<u32> {
        Some(self.ids()?[1])
    }
    /// Saved uid.
    pub fn suid(&self) -> Option<u32> {
        Some(self.ids()?[2])
    }
    /// Filesystem uid.
    pub fn fuid(&self) -> Option<u32> {
        Some(self.ids()?[3])
    }
    /// Real gid.
    pub fn rgid(&self) -> Option<u32> {
        Some(self.ids()?[4])
    }
    /// Effective gid.
    pub fn egid(&self) -> Option<u32> {
        Some(self.ids()?[5])
    }
    /// Saved gid.
    pub fn sgid(&self) -> Option<u32> {
        Some(self.ids()?[6])
    }
    /// Filesystem gid.
    pub fn fgid(&self) -> Option<u32> {
        Some(self.ids()?[7])
    }
    /// Supplementary groups.
    fn groups(&self) -> Option<&[u32]> {
        self.t.cred.as_ref().map(|c| c.groups.as_slice())
    }
    fn ticks(&self, ns: u64, m: &Machine) -> u64 {
        ns / m.ns_per_tick()
    }
    fn utime(&self, m: &Machine) -> Option<u64> {
        Some(self.ticks(self.st()?.utime_ns, m))
    }
    fn stime(&self, m: &Machine) -> Option<u64> {
        Some(self.ticks(self.st()?.stime_ns, m))
    }
    fn cutime(&self, m: &Machine) -> Option<u64> {
        Some(self.ticks(self.st()?.cutime_ns, m))
    }
    fn cstime(&self, m: &Machine) -> Option<u64> {
        Some(self.ticks(self.st()?.cstime_ns, m))
    }
    /// Start time in clock ticks since boot.
    pub fn start_ticks(&self, m: &Machine) -> Option<u64> {
        Some(self.ticks(self.b()?.start_time_ns, m))
    }
    fn nice(&self) -> Option<i32> {
        Some(self.st()?.nice)
    }
    fn priority(&self) -> Option<i32> {
        Some(self.st()?.priority)
    }
    fn nlwp(&self) -> Option<i32> {
        Some(self.st()?.threads as i32)
    }
    fn policy(&self) -> Option<i32> {
        Some(self.st()?.policy as i32)
    }
    fn vm_rss(&self) -> Option<u64> {
        let s = self.sm()?;
        Some((s.rss_anon + s.rss_file + s.rss_shmem) >> 10)
    }
    fn vm_size(&self) -> Option<u64> {
        Some(self.sm()?.vm_size >> 10)
    }
    /// The name, escaped as libproc2 escapes it.
    pub fn cmd(&self, utf8: bool) -> Option<Vec<u8>> {
        let comm = &self.t.base.as_ref()?.comm;
        Some(lib_escape(comm, utf8))
    }
    /// The command line as procps shows it: argv joined and escaped, or `[name]` (with
    /// ` <defunct>` for zombies) when there is none (no address space, or unreadable: procps
    /// falls back to the name then too).
    pub fn cmdline(&self, utf8: bool) -> Option<Vec<u8>> {
        let comm = &self.t.base.as_ref()?.comm;
        let raw = match &self.t.cmdline {
            Some(c) => c.as_slice(),
            None if self.fetched & Group::Cmdline.flag() != 0 || self.t.failed(Group::Cmdline) => {
                &[]
            }
            None => return None,
        };
        Some(command_line(
            Some(raw),
            comm,
            self.state() == Some(b'Z'),
            utf8,
        ))
    }
}

/// State shared by all printers of one run.
pub struct Ctx {
    /// Machine constants.
    pub m: Machine,
    /// Uptime in clock ticks when the tasks were read.
    pub boot_tics: u64,
    /// Seconds since the epoch when ps started.
    pub now: i64,
    /// UTF-8 locale.
    pub utf8: bool,
    /// Name caches.
    pub names: Names,
    /// Terminal names.
    pub ttys: Ttys,
    /// BSD `S`.
    pub include_dead_children: bool,
    /// `-f`.
    pub unix_f_option: bool,
    /// BSD `c`.
    pub bsd_c_option: bool,
    /// BSD `e`.
    pub bsd_e_option: bool,
    /// BSD `n`.
    pub user_is_number: bool,
    /// BSD `n`.
    pub wchan_is_number: bool,
    /// Signal masks in 16 digits (the screen has room for them; procps' `wide_signals`).
    pub wide_signals: bool,
    /// Forest style: 0, 'u', 'b' or 'g'.
    pub forest_type: u8,
    /// Forest prefix codes (' ', 'L', '+', '|'), NUL-terminated like procps' buffer.
    pub forest_prefix: Vec<u8>,
    max_rightward: i32,
    /// procps' lines_to_next_header when a line is printed (its test columns cycle with it).
    lines_to_next_header: i32,
    /// smaps_rollup by task, read once for its pss, uss and sort key, as procps reads it once.
    rollups: std::collections::HashMap<u32, crate::procvals::Rollup>,
}

/// Largest forest depth (procps' buffer size).
pub const FOREST_MAX: usize = 4 * 32 * 1024 + 100;

impl Ctx {
    /// /proc/TID/smaps_rollup's sizes, read on first use and kept for the run.
    fn rollup(&mut self, tid: u32) -> crate::procvals::Rollup {
        *self
            .rollups
            .entry(tid)
            .or_insert_with(|| crate::procvals::smaps_rollup(tid))
    }

    /// A context.
    #[allow(clippy::too_many_arguments)]
    pub fn new(m: Machine, boot_tics: u64, now: i64, utf8: bool) -> Ctx {
        Ctx {
            m,
            boot_tics,
            now,
            utf8,
            names: Names::new(),
            ttys: Ttys::new(),
            include_dead_children: false,
            unix_f_option: false,
            bsd_c_option: false,
            bsd_e_option: false,
            user_is_number: false,
            wchan_is_number: false,
            wide_signals: false,
            forest_type: 0,
            forest_prefix: vec![0; FOREST_MAX],
            max_rightward: OUTBUF_SIZE - 1,
            lines_to_next_header: 0,
            rollups: std::collections::HashMap::new(),
        }
    }

    /// procps' UTILIZATION (and UTILIZATION_C with dead children): percent of the task's life
    /// spent on a CPU, computed in single precision as libproc2 does.
    fn utilization(&self, r: &Row, children: bool) -> Option<f64> {
        let m = &self.m;
        let t = self.boot_tics as f64 - r.start_ticks(m)? as f64;
        let mut used = r.utime(m)? + r.stime(m)?;
        if children {
            used += r.cutime(m)? + r.cstime(m)?;
        }
        Some(if t > 0.0 {
            (used as f32 * 100.0f32) as f64 / t
        } else {
            0.0
        })
    }

    fn tics_all(&self, r: &Row) -> Option<u64> {
        let m = &self.m;
        let mut t = r.utime(m)? + r.stime(m)?;
        if self.include_dead_children {
            t += r.cutime(m)? + r.cstime(m)?;
        }
        Some(t)
    }

    /// procps TIME_ELAPSED: seconds since the task started, as a double.
    fn elapsed(&self, r: &Row) -> Option<f64> {
        let t = self.boot_tics as f64 - r.start_ticks(&self.m)? as f64;
        Some(if t > 0.0 { t / self.m.hz as f64 } else { 0.0 })
    }

    fn start_secs(&self, r: &Row) -> Option<i64> {
        Some((self.m.boot_time + r.start_ticks(&self.m)? / self.m.hz) as i64)
    }

    fn forest_helper(&self, out: &mut Vec<u8>) -> i32 {
        let mut rightward = self.max_rightward.min(OUTBUF_SIZE - 1);
        let start = out.len();
        for &c in self.forest_prefix.iter().take_while(|&&c| c != 0) {
            if self.forest_type == b'u' {
                if rightward < 2 {
                    break;
                }
                out.extend_from_slice(b"  ");
                rightward -= 2;
            } else {
                if rightward < 4 {
                    break;
                }
                out.extend_from_slice(match c {
                    b'L' | b'+' => b" \\_ ",
                    b'|' => b" |  ",
                    _ => b"    ",
                });
                rightward -= 4;
            }
        }
        (out.len() - start) as i32
    }

    fn escaped(&self, out: &mut Vec<u8>, s: &[u8], rightward: &mut i32) {
        if *rightward <= 0 {
            return;
        }
        let used = out_escape(out, s, *rightward as usize, self.utf8);
        *rightward -= used as i32;
    }

    fn do_pr_name(&self, out: &mut Vec<u8>, name: &str, id: u32) -> i32 {
        if !self.user_is_number {
            let mut buf = Vec::new();
            let len = out_escape(&mut buf, name.as_bytes(), OUTBUF_SIZE as usize, self.utf8) as i32;
            if len <= self.max_rightward {
                out.extend_from_slice(&buf);
                return len;
            }
            let mr = self.max_rightward as usize;
            if mr >= 1 && buf.get(mr - 1).is_some_and(|&c| c < 127) {
                out.extend_from_slice(&buf[..mr - 1]);
                out.push(b'+');
                return mr as i32;
            }
        }
        let s = id.to_string();
        out.extend_from_slice(s.as_bytes());
        s.len() as i32
    }

    /// Prints column `pr` of `r` into `out`; returns the screen cells used. A value whose
    /// group was not fetched or is unavailable prints as `-`.
    pub fn print(&mut self, pr: Pr, r: &Row, out: &mut Vec<u8>) -> i32 {
        let start = out.len();
        self.value(pr, r, out).unwrap_or_else(|| {
            out.truncate(start);
            out.push(b'-');
            1
        })
    }

    /// Column `pr` of `r`, or `None` (nothing meaningful written) when its data is missing.
    fn value(&mut self, pr: Pr, r: &Row, out: &mut Vec<u8>) -> Option<i32> {
        let start = out.len();
        let m = self.m;
        macro_rules! w {
            ($($a:tt)*) => {{
                let _ = write!(out, $($a)*);
                Some((out.len() - start) as i32)
            }};
        }
        match pr {
            Pr::Nop => w!("-"),
            Pr::Cuu | Pr::Cuc => {
                let cu = self.utilization(r, pr == Pr::Cuc)?;
                w!("{:.3}", if cu > 99.0 { 99.999 } else { cu })
            }
            Pr::Kstk => w!("{:016x}", r.kstk()?),
            Pr::Numa => w!("{}", crate::procvals::numa_node_of_cpu(r.st()?.processor)),
            Pr::TestLeft | Pr::TestLeft2 | Pr::TestRight | Pr::TestRight2 => {
                let vals: &[&str] = match pr {
                    Pr::TestLeft => &["tty7", "pts/9999", "iseries/vtty42", "ttySMX0", "3270/tty4"],
                    Pr::TestLeft2 => &["tty7", "pts/9999", "ttySMX0", "3270/tty4"],
                    Pr::TestRight => &["999-23:59:59", "99-23:59:59", "9-23:59:59", "59:59"],
                    _ => &["999-23:59:59", "99-23:59:59", "9-23:59:59"],
                };
                w!("{}", test_value(vals, self.lines_to_next_header))
            }
            Pr::TestUnlimited | Pr::TestUnlimited2 => {
                let vals: &[&str] = if pr == Pr::TestUnlimited {
                    &["[123456789-12345] <defunct>", "ps", "123456789-123456"]
                } else {
                    &[
                        "unlimited",
                        "[123456789-12345] <defunct>",
                        "ps",
                        "123456789-123456",
                    ]
                };
                let v = test_value(vals, self.lines_to_next_header).as_bytes();
                let n = v.len().min(self.max_rightward.max(0) as usize);
                out.extend_from_slice(&v[..n]);
                Some(n as i32)
            }
            Pr::NsCgroup
            | Pr::NsIpc
            | Pr::NsMnt
            | Pr::NsNet
            | Pr::NsPid
            | Pr::NsTime
            | Pr::NsUser
            | Pr::NsUts => match r.ns(ns_name(pr))? {
                0 => w!("-"),
                v => w!("{v}"),
            },
            Pr::Cgroup | Pr::Cgname | Pr::Exe => {
                let s = match pr {
                    Pr::Cgroup => r.cgroup(self.utf8)?,
                    Pr::Cgname => r.cgname(self.utf8)?,
                    _ => r.exe(self.utf8)?,
                };
                let mut rightward = self.max_rightward;
                self.escaped(out, &s, &mut rightward);
                Some(self.max_rightward - rightward)
            }
            // snprintf("%s") into COLWID bytes: not escaped.
            Pr::Lxc => {
                let s = r.lxc()?;
                out.extend_from_slice(&s[..s.len().min(COLWID - 1)]);
                Some((out.len() - start) as i32)
            }
            Pr::Label => {
                let l = r.label()?;
                out.extend_from_slice(&l);
                Some(l.len() as i32)
            }
            Pr::Oom | Pr::Oomadj | Pr::Agid | Pr::Agnice => {
                let n = r.sched_numbers()?;
                w!(
                    "{}",
                    match pr {
                        Pr::Oom => n.oom_score,
                        Pr::Oomadj => n.oom_adj,
                        Pr::Agid => n.ag_id,
                        _ => n.ag_nice,
                    }
                )
            }
            Pr::Luid => match r.sched_numbers()?.luid {
                -1 => w!("-"),
                v => w!("{v}"),
            },
            Pr::Rchars
            | Pr::Wchars
            | Pr::Rops
            | Pr::Wops
            | Pr::Rbytes
            | Pr::Wbytes
            | Pr::Wcbytes => {
                w!("{}", r.io(io_index(pr))?)
            }
            Pr::Sig | Pr::Tsig | Pr::Sigmask | Pr::Sigignore | Pr::Sigcatch => {
                let v = r.sig(match pr {
                    Pr::Sig => 0,
                    Pr::Tsig => 1,
                    Pr::Sigmask => 2,
                    Pr::Sigignore => 3,
                    _ => 4,
                })?;
                // help_pr_sig() on status's 16 hex digits: all of them when there is room,
                // else the low 8, after '<' when higher ones are set.
                if self.wide_signals {
                    w!("{v:016x}")
                } else if v >> 32 != 0 {
                    w!("<{:08x}", v & 0xffff_ffff)
                } else {
                    w!("{v:08x}")
                }
            }
            Pr::Args | Pr::Comm => {
                let long = match pr {
                    Pr::Args => !self.bsd_c_option,
                    _ => self.unix_f_option,
                };
                let s = if long {
                    r.cmdline(self.utf8)?
                } else {
                    r.cmd(self.utf8)?
                };
                let mut rightward = self.max_rightward;
                rightward -= self.forest_helper(out);
                self.escaped(out, &s, &mut rightward);
                // BSD e: a space and the environment, where it is not "-" and there is room.
                if self.bsd_e_option && rightward > 1 {
                    let e = r.environ(self.utf8)?;
                    if e != b"-" {
                        out.push(b' ');
                        rightward -= 1;
                        self.escaped(out, &e, &mut rightward);
                    }
                }
                Some(self.max_rightward - rightward)
            }
            Pr::Fname => {
                let s = r.cmd(self.utf8)?;
                let mut rightward = self.max_rightward;
                rightward -= self.forest_helper(out);
                rightward = rightward.min(8);
                self.escaped(out, &s, &mut rightward);
                // As procps: measured against max_rightward, not the clamped 8.
                Some(self.max_rightward - rightward)
            }
            Pr::Etime => {
                let mut t = self.elapsed(r)? as u64;
                let ss = t % 60;
                t /= 60;
                let mm = t % 60;
                t /= 60;
                let hh = t % 24;
                let dd = t / 24;
                if dd > 0 {
                    let _ = write!(out, "{dd}-");
                }
                if dd > 0 || hh > 0 {
                    let _ = write!(out, "{hh:02}:");
                }
                w!("{mm:02}:{ss:02}")
            }
            Pr::Etimes => w!("{}", self.elapsed(r)? as u32),
            Pr::C | Pr::Pcpu | Pr::Cp => {
                let total = self.tics_all(r)?;
                let jiffies = (self.elapsed(r)? * m.hz as f64) as u64;
                let scale = if pr == Pr::C { 100 } else { 1000 };
                let mut pcpu = (total * scale).checked_div(jiffies).unwrap_or(0);
                match pr {
                    Pr::C => w!("{:2}", pcpu.min(99) as u32),
                    Pr::Cp => {
                        pcpu = pcpu.min(999);
                        w!("{:3}", pcpu)
                    }
                    _ if pcpu > 999 => w!("{}", (pcpu / 10) as u32),
                    _ => w!("{}.{}", pcpu / 10, pcpu % 10),
                }
            }
            Pr::Pgid => w!("{}", r.pgrp()?),
            Pr::Ppid => w!("{}", r.ppid()?),
            Pr::Time | Pr::Times => {
                let mut t = ((r.utime(&m)? as f64 + r.stime(&m)? as f64) / m.hz as f64) as u64;
                if pr == Pr::Times {
                    return w!("{t}");
                }
                let ss = t % 60;
                t /= 60;
                let mm = t % 60;
                t /= 60;
                let hh = t % 24;
                let dd = t / 24;
                if dd > 0 {
                    let _ = write!(out, "{dd}-");
                }
                w!("{hh:02}:{mm:02}:{ss:02}")
            }
            Pr::Vsz => w!("{}", r.vm_size()?),
            Pr::Priority => w!("{}", r.priority()?),
            Pr::Opri => w!("{}", 60 + r.priority()?),
            Pr::PriFoo => w!("{}", r.priority()? - 20),
            Pr::PriBar => w!("{}", r.priority()? + 1),
            Pr::PriBaz => w!("{}", r.priority()? + 100),
            Pr::Pri => w!("{}", 39 - r.priority()?),
            Pr::PriApi => w!("{}", -1 - r.priority()?),
            Pr::Nice => {
                let p = r.policy()?;
                if p != 0 && p != 3 && p != -1 {
                    w!("-")
                } else {
                    w!("{}", r.nice()?)
                }
            }
            Pr::Class => w!("{}", sched_class(r.policy()?)),
            Pr::Rtprio => {
                let p = r.policy()?;
                if p == 0 || p == -1 {
                    w!("-")
                } else {
                    w!("{}", r.st()?.rt_priority as i32)
                }
            }
            Pr::Sched => w!("{}", r.policy()?),
            // snprintf("%s") into COLWID bytes: not escaped.
            Pr::Sd(f) => {
                let v = crate::procvals::sd_login_field(r.tid(), f);
                out.extend_from_slice(&v[..v.len().min(COLWID - 1)]);
                Some((out.len() - start) as i32)
            }
            Pr::Pss => w!("{}", self.rollup(r.tid()).pss),
            Pr::Uss => w!("{}", self.rollup(r.tid()).uss),
            Pr::Wchan => {
                let name = wchan(r.tid());
                let len = name.len().min(self.max_rightward.max(0) as usize);
                out.extend_from_slice(&name.as_bytes()[..len]);
                Some(len as i32)
            }
            Pr::Tty4 | Pr::Tty8 => {
                let ab = if pr == Pr::Tty4 {
                    Abbrev::All
                } else {
                    Abbrev::Dev
                };
                let name = self.ttys.name(r.tty()?, r.tid(), 64, ab);
                w!("{name}")
            }
            Pr::Stat => {
                let nice = r.nice()?;
                let mut s = vec![r.state()?];
                if nice < 0 {
                    s.push(b'<');
                }
                if nice > 0 {
                    s.push(b'N');
                }
                if r.sm()?.locked != 0 {
                    s.push(b'L');
                }
                if r.session()? == r.tgid() {
                    s.push(b's');
                }
                if r.nlwp()? > 1 {
                    s.push(b'l');
                }
                if r.pgrp()? as i64 == r.tpgid()? as i64 {
                    s.push(b'+');
                }
                out.extend_from_slice(&s);
                Some(s.len() as i32)
            }
            Pr::S => {
                out.push(r.state()?);
                Some(1)
            }
            Pr::Flag => w!("{:o}", (r.b()?.task_flags >> 6) & 7),
            Pr::Bsdtime => {
                let u = self.tics_all(r)? / m.hz;
                w!("{:3}:{:02}", u / 60, u % 60)
            }
            Pr::Bsdstart => {
                let start = self.start_secs(r)?;
                let ago = (self.now - start).max(0);
                let c = ctime(start);
                let s = if ago > 3600 * 24 {
                    &c[4..10]
                } else {
                    &c[10..16]
                };
                out.extend_from_slice(s.as_bytes());
                Some(6)
            }
            Pr::Sz => w!("{}", r.vm_size()? / (m.page_size / 1024)),
            Pr::Swapable => {
                let sm = r.sm()?;
                w!("{}", (sm.data + sm.stack) >> 10)
            }
            Pr::Size => w!("{}", r.sm()?.vm_size),
            // pr_trs/pr_tsiz and pr_drs/pr_dsiz: from vsize (bytes) and stat's code
            // addresses, in unsigned long arithmetic, 0 without an address space.
            Pr::Trs | Pr::Drs => {
                let sm = r.sm()?;
                let v = match (sm.vm_size, pr) {
                    (0, _) => 0,
                    (_, Pr::Trs) => sm.code_end.wrapping_sub(sm.code_start) >> 10,
                    (size, _) => size.wrapping_sub(sm.code_end).wrapping_add(sm.code_start) >> 10,
                };
                w!("{}", v as i64)
            }
            Pr::Stackp => w!("{:016x}", r.sm()?.stack_start),
            Pr::Lim => match r.rss_rlim()? {
                u64::MAX => w!("xx"),
                v => w!("{:5}", v >> 10),
            },
            Pr::Majflt => {
                let s = r.st()?;
                w!(
                    "{}",
                    if self.include_dead_children {
                        s.majflt + s.cmajflt
                    } else {
                        s.majflt
                    }
                )
            }
            Pr::Minflt => {
                let s = r.st()?;
                w!(
                    "{}",
                    if self.include_dead_children {
                        s.minflt + s.cminflt
                    } else {
                        s.minflt
                    }
                )
            }
            Pr::Psr => w!("{}", r.st()?.processor),
            Pr::Rss => w!("{}", r.vm_rss()?),
            Pr::Pmem => {
                let pmem = (r.vm_rss()? * 1000 / m.mem_total_kib.max(1)).min(999);
                w!("{:2}.{}", pmem / 10, pmem % 10)
            }
            Pr::Lstart => {
                let s = strftime(self.start_secs(r)?, "%a %b %e %H:%M:%S %Y");
                w!("{s}")
            }
            Pr::Stime => {
                let t = self.start_secs(r)?;
                let now = localtime(self.now);
                let pt = localtime(t);
                let mut fmt = "%H:%M";
                if now.tm_yday != pt.tm_yday {
                    fmt = "%b%d";
                }
                if now.tm_year != pt.tm_year {
                    fmt = "%Y";
                }
                let s = strftime(t, fmt);
                w!("{s}")
            }
            Pr::Start => {
                let t = self.start_secs(r)?;
                let mut c = ctime(t).into_bytes();
                if c[8] == b' ' {
                    c[8] = b'0';
                }
                if c[11] == b' ' {
                    c[11] = b'0';
                }
                let c = String::from_utf8_lossy(&c).into_owned();
                if t + 60 * 60 * 24 > self.now {
                    w!("{}", &c[11..19])
                } else {
                    w!("  {}", &c[4..10])
                }
            }
            Pr::Egid => w!("{}", r.egid()? as i32),
            Pr::Rgid => w!("{}", r.rgid()? as i32),
            Pr::Sgid => w!("{}", r.sgid()? as i32),
            Pr::Fgid => w!("{}", r.fgid()? as i32),
            Pr::Euid => w!("{}", r.euid()? as i32),
            Pr::Ruid => w!("{}", r.ruid()? as i32),
            Pr::Suid => w!("{}", r.suid()? as i32),
            Pr::Fuid => w!("{}", r.fuid()? as i32),
            Pr::Euser | Pr::Ruser | Pr::Suser | Pr::Fuser => {
                let id = match pr {
                    Pr::Euser => r.euid(),
                    Pr::Ruser => r.ruid(),
                    Pr::Suser => r.suid(),
                    _ => r.fuid(),
                }?;
                let name = self.names.user(id).to_string();
                Some(self.do_pr_name(out, &name, id))
            }
            Pr::Egroup | Pr::Rgroup | Pr::Sgroup | Pr::Fgroup => {
                let id = match pr {
                    Pr::Egroup => r.egid(),
                    Pr::Rgroup => r.rgid(),
                    Pr::Sgroup => r.sgid(),
                    _ => r.fgid(),
                }?;
                let name = self.names.group(id).to_string();
                Some(self.do_pr_name(out, &name, id))
            }
            Pr::Pid => w!("{}", r.tgid()),
            Pr::Tid => w!("{}", r.tid()),
            Pr::Nlwp => w!("{}", r.nlwp()?),
            Pr::Sess => w!("{}", r.session()?),
            Pr::Tpgid => w!("{}", r.tpgid()?),
            Pr::SgiP => {
                let processor = r.st()?.processor;
                if r.state()? == b'R' {
                    w!("{}", processor as u32)
                } else {
                    w!("*")
                }
            }
            Pr::Supgid | Pr::Supgrp => {
                let gids = r.groups()?;
                let text = if gids.is_empty() {
                    "-".to_string()
                } else if pr == Pr::Supgid {
                    gids.iter()
                        .map(|g| g.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                } else {
                    gids.iter()
                        .map(|&g| self.names.group(g).to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let mut rightward = self.max_rightward;
                if pr == Pr::Supgid {
                    let n = text.len().min(rightward.max(0) as usize);
                    out.extend_from_slice(&text.as_bytes()[..n]);
                    return Some(n as i32);
                }
                self.escaped(out, text.as_bytes(), &mut rightward);
                Some(self.max_rightward - rightward)
            }
        }
    }

    /// The value `r` sorts by for `sr`; `None` when its data is missing (such rows sort first,
    /// like the `-` they print).
    pub fn sort_value(&mut self, sr: Sr, r: &Row) -> Option<SortVal> {
        let m = self.m;
        use SortVal::*;
        let user =
            |ctx: &mut Ctx, id: Option<u32>| Some(S(ctx.names.user(id?).as_bytes().to_vec()));
        let group =
            |ctx: &mut Ctx, id: Option<u32>| Some(S(ctx.names.group(id?).as_bytes().to_vec()));
        Some(match sr {
            Sr::Noop => I(0),
            // procps compares status's fixed-width hex strings: numeric order.
            Sr::Signals | Sr::SigPending | Sr::SigBlocked | Sr::SigIgnore | Sr::SigCatch => U(r
                .sig(match sr {
                    Sr::Signals => 0,
                    Sr::SigPending => 1,
                    Sr::SigBlocked => 2,
                    Sr::SigIgnore => 3,
                    _ => 4,
                })?),
            Sr::Cgroup => S(r.cgroup(self.utf8)?),
            Sr::Cgname => S(r.cgname(self.utf8)?),
            Sr::Lxcname => S(r.lxc()?),
            Sr::Exe => S(r.exe(self.utf8)?),
            Sr::OomScore => I(r.sched_numbers()?.oom_score),
            Sr::OomAdj => I(r.sched_numbers()?.oom_adj),
            Sr::AutogrpId => I(r.sched_numbers()?.ag_id),
            Sr::AutogrpNice => I(r.sched_numbers()?.ag_nice),
            Sr::IdLogin => I(r.sched_numbers()?.luid),
            Sr::IoReadChars => U(r.io(0)?),
            Sr::IoWriteChars => U(r.io(1)?),
            Sr::IoReadOps => U(r.io(2)?),
            Sr::IoWriteOps => U(r.io(3)?),
            Sr::IoReadBytes => U(r.io(4)?),
            Sr::IoWriteBytes => U(r.io(5)?),
            Sr::IoWriteCbytes => U(r.io(6)?),
            Sr::NsCgroup => U(r.ns("cgroup")?.into()),
            Sr::NsIpc => U(r.ns("ipc")?.into()),
            Sr::NsMnt => U(r.ns("mnt")?.into()),
            Sr::NsNet => U(r.ns("net")?.into()),
            Sr::NsPid => U(r.ns("pid")?.into()),
            Sr::NsTime => U(r.ns("time")?.into()),
            Sr::NsUser => U(r.ns("user")?.into()),
            Sr::NsUts => U(r.ns("uts")?.into()),
            Sr::AddrStackStart => U(r.sm()?.stack_start),
            Sr::RssRlim => U(r.rss_rlim()?),
            Sr::Utilization => F(self.utilization(r, false)?),
            Sr::UtilizationC => F(self.utilization(r, true)?),
            Sr::Kstk => U(r.kstk()?),
            Sr::ProcessorNode => I(crate::procvals::numa_node_of_cpu(r.st()?.processor) as i64),
            Sr::VmRss => U(r.vm_rss()?),
            Sr::Cmdline => S(r.cmdline(self.utf8)?),
            Sr::Cmd => S(r.cmd(self.utf8)?),
            Sr::TimeAll => F((r.utime(&m)? as f64 + r.stime(&m)? as f64) / m.hz as f64),
            Sr::TicsAll => U(r.utime(&m)? + r.stime(&m)?),
            Sr::TicsBegan => U(r.start_ticks(&m)?),
            Sr::SchedClassStr => S(sched_class(r.policy()?).as_bytes().to_vec()),
            Sr::SchedClass => I(r.policy()? as i64),
            Sr::TicsUser => U(r.utime(&m)?),
            Sr::TicsUserC => U(r.utime(&m)? + r.cutime(&m)?),
            Sr::TicsSystemC => U(r.stime(&m)? + r.cstime(&m)?),
            Sr::IdEgid => U(r.egid()? as u64),
            Sr::IdRgid => U(r.rgid()? as u64),
            Sr::IdSgid => U(r.sgid()? as u64),
            Sr::IdFgid => U(r.fgid()? as u64),
            Sr::IdEuid => U(r.euid()? as u64),
            Sr::IdRuid => U(r.ruid()? as u64),
            Sr::IdSuid => U(r.suid()? as u64),
            Sr::IdFuid => U(r.fuid()? as u64),
            Sr::IdEuser => user(self, r.euid())?,
            Sr::IdRuser => user(self, r.ruid())?,
            Sr::IdSuser => user(self, r.suid())?,
            Sr::IdFuser => user(self, r.fuid())?,
            Sr::IdEgroup => group(self, r.egid())?,
            Sr::IdRgroup => group(self, r.rgid())?,
            Sr::IdSgroup => group(self, r.sgid())?,
            Sr::IdFgroup => group(self, r.fgid())?,
            Sr::IdPgrp => I(r.pgrp()? as i32 as i64),
            Sr::IdPid => I(r.tid() as i32 as i64),
            Sr::IdTgid => I(r.tgid() as i32 as i64),
            Sr::IdPpid => I(r.ppid()? as i32 as i64),
            Sr::IdSession => I(r.session()? as i32 as i64),
            Sr::IdTpgid => I(r.tpgid()? as i64),
            Sr::TimeElapsed => F(self.elapsed(r)?),
            Sr::Flags => U(r.b()?.task_flags as u64),
            Sr::Priority => I(r.priority()? as i64),
            Sr::PriorityRt => I(r.st()?.rt_priority as i32 as i64),
            Sr::Processor => I(r.st()?.processor as i64),
            Sr::TtyName => S(self
                .ttys
                .name(r.tty()?, r.tid(), 64, Abbrev::Dev)
                .into_bytes()),
            Sr::FltMaj => U(r.st()?.majflt),
            Sr::FltMin => U(r.st()?.minflt),
            Sr::FltMajC => U(r.st()?.majflt + r.st()?.cmajflt),
            Sr::FltMinC => U(r.st()?.minflt + r.st()?.cminflt),
            Sr::MemResPgs => {
                let sm = r.sm()?;
                U((sm.rss_anon + sm.rss_file + sm.rss_shmem) / m.page_size)
            }
            Sr::MemShrPgs => {
                let sm = r.sm()?;
                U((sm.rss_file + sm.rss_shmem) / m.page_size)
            }
            Sr::VsizeBytes => U(r.sm()?.vm_size),
            Sr::Nice => I(r.nice()? as i64),
            Sr::Nlwp => I(r.nlwp()? as i64),
            Sr::State => I(r.state()? as i64),
            Sr::Supgids | Sr::Supgroups => {
                let g: Vec<String> = r.groups()?.iter().map(|g| g.to_string()).collect();
                S(if g.is_empty() {
                    b"-".to_vec()
                } else {
                    g.join(",").into_bytes()
                })
            }
            Sr::VmSize => U(r.vm_size()?),
            Sr::VmData => U(r.sm()?.data >> 10),
            Sr::VmExe => U(r.sm()?.text >> 10),
            Sr::VmLib => U(r.sm()?.lib >> 10),
            Sr::VmLock => U(r.sm()?.locked >> 10),
            Sr::VmStack => U(r.sm()?.stack >> 10),
            Sr::WchanName => S(wchan(r.tid()).into_bytes()),
            Sr::Sd(f) => S(crate::procvals::sd_login_field(r.tid(), f)),
            Sr::SmapPss => U(self.rollup(r.tid()).pss),
            Sr::SmapPrvTotal => U(self.rollup(r.tid()).uss),
        })
    }
}

/// A value to sort by, compared as procps compares its result types.
#[derive(Debug, Clone, PartialEq)]
pub enum SortVal {
    /// Signed integers (procps compares by subtraction).
    I(i64),
    /// Unsigned integers.
    U(u64),
    /// Doubles.
    F(f64),
    /// Strings, compared with strcoll.
    S(Vec<u8>),
}

impl SortVal {
    /// procps' comparison of two results of the same item.
    pub fn compare(&self, other: &SortVal) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self, other) {
            (SortVal::I(a), SortVal::I(b)) => a.cmp(b),
            (SortVal::U(a), SortVal::U(b)) => a.cmp(b),
            (SortVal::F(a), SortVal::F(b)) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            (SortVal::S(a), SortVal::S(b)) => strcoll(a, b),
            _ => Ordering::Equal,
        }
    }

    /// [`SortVal::compare`] for values that may be missing: a missing value sorts first.
    pub fn compare_missing_first(a: &Option<SortVal>, b: &Option<SortVal>) -> std::cmp::Ordering {
        match (a, b) {
            (Some(a), Some(b)) => a.compare(b),
            _ => a.is_some().cmp(&b.is_some()),
        }
    }
}

fn strcoll(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (Ok(a), Ok(b)) = (std::ffi::CString::new(a), std::ffi::CString::new(b)) else {
        return a.cmp(b);
    };
    // SAFETY: both are valid NUL-terminated strings.
    let r = unsafe { libc::strcoll(a.as_ptr(), b.as_ptr()) };
    r.cmp(&0)
}

/// procps' test columns: the value for this line, `vals[lines_to_next_header % n]` with the
/// count taken as unsigned, as C does.
fn test_value(vals: &[&'static str], lines_to_next_header: i32) -> &'static str {
    vals[(lines_to_next_header as u32 % vals.len() as u32) as usize]
}

/// The /proc/PID/ns link a namespace column shows.
fn ns_name(pr: Pr) -> &'static str {
    match pr {
        Pr::NsCgroup => "cgroup",
        Pr::NsIpc => "ipc",
        Pr::NsMnt => "mnt",
        Pr::NsNet => "net",
        Pr::NsPid => "pid",
        Pr::NsTime => "time",
        Pr::NsUser => "user",
        _ => "uts",
    }
}

/// procps' scheduling class abbreviations.
fn sched_class(policy: i32) -> &'static str {
    match policy {
        -1 => "-",
        0 => "TS",
        1 => "FF",
        2 => "RR",
        3 => "B",
        4 => "ISO",
        5 => "IDL",
        6 => "DLN",
        _ => "?",
    }
}

/// The index in /proc/PID/io's order of an I/O column's counter.
fn io_index(pr: Pr) -> usize {
    match pr {
        Pr::Rchars => 0,
        Pr::Wchars => 1,
        Pr::Rops => 2,
        Pr::Wops => 3,
        Pr::Rbytes => 4,
        Pr::Wbytes => 5,
        _ => 6,
    }
}

pub use crate::procvals::wchan;

fn localtime(t: i64) -> libc::tm {
    // SAFETY: an all-zero tm is a valid out-parameter.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let tt: libc::time_t = t as libc::time_t;
    // SAFETY: both pointers are valid for the call.
    unsafe { libc::localtime_r(&tt, &mut tm) };
    tm
}

fn strftime(t: i64, fmt: &str) -> String {
    let tm = localtime(t);
    let Ok(f) = std::ffi::CString::new(fmt) else {
        return String::new();
    };
    let mut buf = [0u8; 240];
    // SAFETY: buf is writable for its length, f is NUL-terminated, tm is initialized.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), f.as_ptr(), &tm) };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `ctime(3)` text (always English, as asctime is): "Wed Jun 30 21:49:08 1993\n".
fn ctime(t: i64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let tm = localtime(t);
    format!(
        "{} {}{:3} {:02}:{:02}:{:02} {}\n",
        DAYS[tm.tm_wday.rem_euclid(7) as usize],
        MONS[tm.tm_mon.rem_euclid(12) as usize],
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        1900 + tm.tm_year
    )
}

/// Which values of a line m/-m shows: procps prints process lines with its proc_format_list
/// and thread lines with its task_format_list, which print `-` for the other kind's columns
/// ([`cf::THREAD`], [`cf::PROCESS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// Every column (no m/-m).
    Any,
    /// A process line of m/-m.
    Process,
    /// A thread line of m/-m.
    Thread,
}

/// Lays out lines like procps' show_one_proc.
pub struct Printer<W: Write> {
    cols: Vec<Col>,
    active_cols: i32,
    /// procps' `wide_signals`: every signal column fits 16 digits.
    wide_signals: bool,
    lines_to_next_header: i64,
    header_gap: i64,
    did_stuff: bool,
    buf: Vec<u8>,
    out: W,
}

impl<W: Write> Printer<W> {
    /// A printer for `cols` on a screen `screen_cols` wide.
    pub fn new(cols: Vec<Col>, screen_cols: i32, out: W) -> Self {
        // check_header_width
        let mut total: i64 = 0;
        let mut was_normal = 0;
        let mut sigs = 0i64;
        for (i, c) in cols.iter().enumerate() {
            let last = i + 1 == cols.len();
            if c.spec.is_none() {
                total += c.width as i64;
                was_normal = 0;
                continue;
            }
            match c.flags & cf::JUST_MASK {
                cf::UNLIMITED => total += if last { 3 } else { c.width as i64 },
                cf::SIGNAL => {
                    sigs += 1;
                    total += c.width as i64;
                }
                _ => total += c.width as i64,
            }
            total += was_normal;
            was_normal = 1;
        }
        let mut i = 0i64;
        let mut active;
        loop {
            i += 1;
            active = screen_cols as i64 * i;
            if active >= total || active >= (OUTBUF_SIZE / 2) as i64 {
                break;
            }
        }
        Printer {
            cols,
            active_cols: active as i32,
            wide_signals: total + sigs * 7 <= active,
            lines_to_next_header: 1,
            header_gap: -1,
            did_stuff: false,
            buf: Vec::with_capacity(1 << 16),
            out,
        }
    }

    /// Header every `gap` lines (`--headers`).
    pub fn set_header_gap(&mut self, gap: i64) {
        self.header_gap = gap;
    }

    /// No header at all.
    pub fn no_header(&mut self) {
        self.lines_to_next_header = -1;
    }

    /// Whether any line was printed.
    pub fn printed(&self) -> bool {
        self.did_stuff
    }

    /// Prints one task (after a header when one is due).
    pub fn show(&mut self, ctx: &mut Ctx, row: &Row) -> io::Result<()> {
        self.show_as(ctx, row, Line::Any)
    }

    /// [`Printer::show`] as a line of kind `kind`.
    pub fn show_as(&mut self, ctx: &mut Ctx, row: &Row, kind: Line) -> io::Result<()> {
        self.lines_to_next_header -= 1;
        if self.lines_to_next_header == 0 {
            self.lines_to_next_header = self.header_gap;
            self.line(ctx, None, kind)?;
        }
        self.line(ctx, Some(row), kind)
    }

    /// At the end: when nothing was printed, the header alone (if due). Returns whether
    /// anything was ever printed.
    pub fn finish(&mut self, ctx: &mut Ctx) -> io::Result<bool> {
        if !self.did_stuff {
            self.lines_to_next_header -= 1;
            if self.lines_to_next_header == 0 {
                self.line(ctx, None, Line::Any)?;
            }
            self.out.write_all(&self.buf)?;
            self.buf.clear();
            self.out.flush()?;
            return Ok(false);
        }
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()?;
        Ok(true)
    }

    fn line(&mut self, ctx: &mut Ctx, row: Option<&Row>, kind: Line) -> io::Result<()> {
        self.did_stuff = true;
        let (mut correct, mut actual, mut dospace) = (0i32, 0i32, 0i32);
        let n = self.cols.len();
        ctx.wide_signals = self.wide_signals;
        // procps' int, wrapped as it wraps.
        ctx.lines_to_next_header = self.lines_to_next_header as i32;
        let mut data = Vec::with_capacity(256);
        for i in 0..n {
            let c = &self.cols[i];
            let last = i + 1 == n;
            let tmpspace;
            let mut maxr;
            if !last {
                maxr = c.width;
                tmpspace = 0;
            } else {
                let t = correct - actual;
                if t < 1 {
                    tmpspace = dospace;
                    maxr = self.active_cols - actual - tmpspace;
                } else {
                    tmpspace = t;
                    maxr = self.active_cols - correct.max(actual);
                }
            }
            maxr = maxr.clamp(0, OUTBUF_SIZE - 1);
            ctx.max_rightward = maxr;
            data.clear();
            let pr = match (kind, c.flags & cf::PRINT_MASK) {
                (Line::Process, cf::THREAD) | (Line::Thread, cf::PROCESS) => {
                    c.pr().map(|_| Pr::Nop)
                }
                _ => c.pr(),
            };
            let mut amount = match (row, pr) {
                (Some(r), Some(pr)) => ctx.print(pr, r, &mut data),
                _ => {
                    data.extend_from_slice(&c.name);
                    c.name.len() as i32
                }
            };
            if amount < 0 {
                amount = 0;
                data.clear();
            }
            let just = if c.spec.is_none() {
                0
            } else {
                c.flags & cf::JUST_MASK
            };
            let mut leftpad = 0;
            // Room a signal column takes beyond its width when it prints 16 digits.
            let mut legit = 0;
            match just {
                cf::RIGHT => leftpad = (c.width - amount).max(0),
                cf::SIGNAL if self.wide_signals => {
                    leftpad = (16 - amount).max(0);
                    legit = 7;
                }
                cf::SIGNAL => leftpad = (9 - amount).max(0),
                cf::USER if ctx.user_is_number => leftpad = (c.width - amount).max(0),
                cf::WCHAN => {
                    if ctx.wchan_is_number {
                        leftpad = (c.width - amount).max(0);
                    } else if self.active_cols - actual - tmpspace < 1 {
                        data.truncate(1);
                    }
                }
                cf::UNLIMITED if self.active_cols - actual - tmpspace < 1 => data.truncate(1),
                _ => {}
            }
            let mut space = correct - actual + leftpad;
            if space < 1 {
                space = dospace;
            }
            space = space.min(SPACE_AMOUNT);
            self.buf
                .extend(std::iter::repeat_n(b' ', space.max(0) as usize));
            self.buf.extend_from_slice(&data);
            if last {
                self.buf.push(b'\n');
                break;
            }
            actual += space + amount;
            correct += c.width + legit;
            if c.spec.is_some() && self.cols[i + 1].spec.is_some() {
                correct += 1;
                dospace = 1;
            } else {
                dospace = 0;
            }
        }
        if self.buf.len() >= 1 << 16 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ps::specs::SPECS;
    use taskdiag_proto::task::{Base, Cred, GroupError, Ns};
    use taskdiag_proto::CredRec;

    /// Every group ps reads: all but the memory maps, DELAY and KSTACK.
    fn read_groups() -> Vec<Group> {
        Group::SUPPORTED
            .into_iter()
            .filter(|g| {
                !matches!(
                    g,
                    Group::Vma | Group::VmaStat | Group::Delay | Group::Kstack
                )
            })
            .collect()
    }

    /// A task with every group, its values chosen so that columns print something other
    /// than `-` (a pid that does not exist, so per-task lookups find nothing).
    fn full(policy: u32) -> Task {
        Task {
            pid: 999_999_991,
            tgid: 999_999_990,
            base: Some(Base {
                rec: BaseRec {
                    ppid: 7,
                    sid: 999_999_990,
                    pgid: 11,
                    tty_nr: 0x8801,
                    task_flags: 0x40_0140,
                    state: 0,
                    tpgid: 11,
                    start_time_ns: 3_000_000_000,
                    ..BaseRec::default()
                },
                comm: b"worker".to_vec(),
            }),
            cred: Some(Cred {
                rec: CredRec {
                    uid: 1,
                    euid: 2,
                    suid: 3,
                    fsuid: 4,
                    gid: 5,
                    egid: 6,
                    sgid: 7,
                    fsgid: 8,
                    ..CredRec::default()
                },
                groups: vec![4, 27],
            }),
            stat: Some(StatRec {
                minflt: 12,
                cminflt: 3,
                majflt: 5,
                cmajflt: 1,
                utime_ns: 7_000_000_000,
                stime_ns: 2_000_000_000,
                cutime_ns: 1_000_000_000,
                cstime_ns: 1_000_000_000,
                threads: 3,
                priority: 20,
                nice: -5,
                policy,
                rt_priority: if policy == 0 { 0 } else { 9 },
                processor: 1,
                ..StatRec::default()
            }),
            statm: Some(StatmRec {
                vm_size: 64 << 20,
                rss_anon: 3 << 20,
                rss_file: 1 << 20,
                rss_shmem: 1 << 12,
                data: 5 << 20,
                stack: 1 << 17,
                text: 1 << 16,
                lib: 1 << 21,
                locked: 1 << 12,
                ..StatmRec::default()
            }),
            cmdline: Some(b"worker\0--flag\0".to_vec()),
            signal: Some(taskdiag_proto::SignalRec {
                pending: 1 << 9,
                shared_pending: 1 << 27,
                blocked: 1 << 35,
                ignored: 1 << 12,
                caught: 1,
            }),
            ns: Some(Ns {
                rec: taskdiag_proto::NsRec {
                    pid: 4026531836,
                    pid_for_children: 4026531836,
                    mnt: 4026531832,
                    net: 4026531833,
                    ipc: 4026531839,
                    uts: 4026531838,
                    user: 4026531837,
                    cgroup: 4026531835,
                    time: 4026531834,
                    time_for_children: 4026531834,
                    flags: 0,
                    levels: 0,
                },
                ids: Vec::new(),
            }),
            files: Some(taskdiag_proto::task::Files {
                rec: taskdiag_proto::FilesRec {
                    fds: 3,
                    flags: 0,
                    nlimits: 16,
                    reserved: 0,
                },
                limits: vec![
                    taskdiag_proto::LimitRec {
                        soft: 1 << 30,
                        hard: u64::MAX,
                    };
                    16
                ],
            }),
            cgroup: Some(taskdiag_proto::task::Cgroup {
                rec: taskdiag_proto::CgroupRec::default(),
                text: b"2:name=systemd:/lxc.payload.box/init\n0::/lxc.payload.box\n".to_vec(),
            }),
            io: Some(taskdiag_proto::IoRec {
                rchar: 1,
                wchar: 2,
                syscr: 3,
                syscw: 4,
                read_bytes: 5,
                write_bytes: 6,
                cancelled_write_bytes: 7,
            }),
            paths: Some(taskdiag_proto::task::Paths {
                exe: Ok(b"/usr/bin/x".to_vec()),
                cwd: Ok(b"/".to_vec()),
                root: Ok(b"/".to_vec()),
            }),
            environ: Some(b"HOME=/\0TERM=dumb\0".to_vec()),
            sched: Some(taskdiag_proto::task::Sched {
                rec: taskdiag_proto::SchedRec {
                    oom_score: 667,
                    oom_score_adj: 1,
                    loginuid: 1000,
                    autogroup: 7,
                    autogroup_nice: 2,
                    ..Default::default()
                },
                ..Default::default()
            }),
            security: Some(taskdiag_proto::task::Security {
                rec: taskdiag_proto::SecurityRec::default(),
                label: b"unconfined\n".to_vec(),
            }),
            ..Task::default()
        }
    }

    /// `t` with only the groups in `keep`.
    fn only(t: &Task, keep: u64) -> Task {
        let has = |g: Group| keep & g.flag() != 0;
        Task {
            base: t.base.clone().filter(|_| has(Group::Base)),
            cred: t.cred.clone().filter(|_| has(Group::Cred)),
            stat: t.stat.filter(|_| has(Group::Stat)),
            statm: t.statm.filter(|_| has(Group::Statm)),
            cmdline: t.cmdline.clone().filter(|_| has(Group::Cmdline)),
            signal: t.signal.filter(|_| has(Group::Signal)),
            ns: t.ns.clone().filter(|_| has(Group::Ns)),
            files: t.files.clone().filter(|_| has(Group::Files)),
            cgroup: t.cgroup.clone().filter(|_| has(Group::Cgroup)),
            io: t.io.filter(|_| has(Group::Io)),
            paths: t.paths.clone().filter(|_| has(Group::Paths)),
            environ: t.environ.clone().filter(|_| has(Group::Environ)),
            sched: t.sched.clone().filter(|_| has(Group::Sched)),
            security: t.security.clone().filter(|_| has(Group::Security)),
            ..t.clone()
        }
    }

    fn ctx_e(bsd_c: bool, unix_f: bool, bsd_e: bool) -> Ctx {
        let mut c = ctx(bsd_c, unix_f);
        c.bsd_e_option = bsd_e;
        c
    }

    fn ctx(bsd_c: bool, unix_f: bool) -> Ctx {
        let m = Machine {
            hz: 100,
            page_size: 4096,
            mem_total_kib: 1 << 20,
            boot_time: 1_700_000_000,
        };
        let mut c = Ctx::new(m, 100_000, 1_700_001_000, true);
        c.bsd_c_option = bsd_c;
        c.unix_f_option = unix_f;
        c
    }

    fn cell(c: &mut Ctx, pr: Pr, t: &Task, fetched: u64) -> String {
        let mut out = Vec::new();
        c.print(pr, &Row { t, fetched }, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// cgroup, cgname and lxc as libproc2 makes them from the cgroup file (`fill_cgroup_cvt`,
    /// `lxc_containers`).
    #[test]
    fn cgroup_columns_follow_libproc2() {
        let mut c = ctx(false, false);
        let with = |text: &[u8]| Task {
            cgroup: Some(taskdiag_proto::task::Cgroup {
                rec: taskdiag_proto::CgroupRec::default(),
                text: text.to_vec(),
            }),
            ..Task::default()
        };
        let fetched = Group::Cgroup.flag();
        let hybrid =
            with(b"12:pids:/user.slice\n3:cpu:/\n1:name=systemd:/user.slice/s\x01.scope\n0::/\n");
        assert_eq!(
            cell(&mut c, Pr::Cgroup, &hybrid, fetched),
            "12:pids:/user.slice,1:name=systemd:/user.slice/s?.scope"
        );
        assert_eq!(
            cell(&mut c, Pr::Cgname, &hybrid, fetched),
            "systemd:/user.slice/s?.scope"
        );
        assert_eq!(cell(&mut c, Pr::Lxc, &hybrid, fetched), "-");
        // Only root cgroups (a kernel thread): nothing left.
        let root = with(b"0::/\n");
        assert_eq!(cell(&mut c, Pr::Cgroup, &root, fetched), "-");
        assert_eq!(cell(&mut c, Pr::Cgname, &root, fetched), "-");
        // No `:name=`: cgname is all of it. Nested containers: the innermost name.
        let nested = with(b"0::/lxc.payload.outer/lxc.payload.inner/init.scope\n");
        assert_eq!(
            cell(&mut c, Pr::Cgname, &nested, fetched),
            "0::/lxc.payload.outer/lxc.payload.inner/init.scope"
        );
        assert_eq!(cell(&mut c, Pr::Lxc, &nested, fetched), "inner");
        // Unreadable: nothing.
        let mut failed = Task::default();
        failed.errors.push(GroupError {
            group: Group::Cgroup as u16,
            errno: libc::EACCES,
        });
        assert_eq!(cell(&mut c, Pr::Cgroup, &failed, fetched), "-");
        assert_eq!(cell(&mut c, Pr::Lxc, &failed, fetched), "-");
    }

    /// Every column prints the same from the groups it says it needs as from all of them, and
    /// `-` (never a made-up value) when one of those groups was not fetched, or was fetched and
    /// could not be read.
    #[test]
    fn no_column_prints_a_value_it_did_not_read() {
        let all = read_groups().iter().fold(0, |a, g| a | g.flag());
        let mut checked = 0;
        for policy in [0, 1] {
            let t = full(policy);
            let modes = [
                (false, false, false),
                (true, false, false),
                (false, true, false),
                (false, false, true),
                (true, true, true),
            ];
            for (bsd_c, unix_f, bsd_e) in modes {
                let mut c = ctx_e(bsd_c, unix_f, bsd_e);
                for spec in SPECS {
                    let need = spec.pr.groups(bsd_c, unix_f, bsd_e);
                    let reference = cell(&mut c, spec.pr, &t, all);
                    let name = spec.name;
                    assert_eq!(
                        cell(&mut c, spec.pr, &only(&t, need), need),
                        reference,
                        "{name}: reads a group it does not declare"
                    );
                    for g in read_groups().iter().filter(|g| need & g.flag() != 0) {
                        let without = need & !g.flag();
                        let got = cell(&mut c, spec.pr, &only(&t, without), without);
                        assert_eq!(got, "-", "{name} without {g:?} (not fetched)");
                        if matches!(
                            *g,
                            Group::Cmdline | Group::Io | Group::Environ | Group::Sched
                        ) {
                            // procps shows `[name]` when the command line cannot be read, zero
                            // counters when the io file cannot, no environment when environ
                            // cannot, and what its zeroed record holds for the SCHED files.
                            continue;
                        }
                        let mut failed = only(&t, without);
                        failed.errors.push(GroupError {
                            group: *g as u16,
                            errno: libc::EACCES,
                        });
                        let got = cell(&mut c, spec.pr, &failed, need);
                        assert_eq!(got, "-", "{name} without {g:?} (unreadable)");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 300, "only {checked} cases");
    }

    /// The same for every sort key: nothing to sort by when a group is missing.
    #[test]
    fn no_sort_key_uses_a_value_it_did_not_read() {
        let all = read_groups().iter().fold(0, |a, g| a | g.flag());
        let t = full(1);
        let mut c = ctx(false, false);
        for spec in SPECS {
            let need = spec.sr.groups();
            let name = spec.name;
            let reference = c.sort_value(
                spec.sr,
                &Row {
                    t: &t,
                    fetched: all,
                },
            );
            assert!(reference.is_some(), "{name}: no value from a full task");
            let t2 = only(&t, need);
            let got = c.sort_value(
                spec.sr,
                &Row {
                    t: &t2,
                    fetched: need,
                },
            );
            assert_eq!(
                got, reference,
                "{name}: sorts by a group it does not declare"
            );
            for g in read_groups().iter().filter(|g| need & g.flag() != 0) {
                let without = need & !g.flag();
                let t3 = only(&t, without);
                let got = c.sort_value(
                    spec.sr,
                    &Row {
                        t: &t3,
                        fetched: without,
                    },
                );
                assert_eq!(got, None, "{name} without {g:?}");
            }
        }
    }

    /// A task without an address space (kernel thread, zombie) has no STATM and no CMDLINE
    /// even when they were asked for: procps prints zero sizes and `[name]` for it.
    #[test]
    fn a_task_without_memory_prints_what_procps_prints() {
        let fetched = read_groups().iter().fold(0, |a, g| a | g.flag());
        let mut t = full(0);
        t.statm = None;
        t.cmdline = None;
        let mut c = ctx(false, false);
        assert_eq!(cell(&mut c, Pr::Vsz, &t, fetched), "0");
        assert_eq!(cell(&mut c, Pr::Rss, &t, fetched), "0");
        assert_eq!(cell(&mut c, Pr::Args, &t, fetched), "[worker]");
        // Not asked for: not zero.
        let f = fetched & !Group::Statm.flag() & !Group::Cmdline.flag();
        assert_eq!(cell(&mut c, Pr::Vsz, &t, f), "-");
        assert_eq!(cell(&mut c, Pr::Args, &t, f), "-");
    }

    fn col(name: &str) -> Col {
        let spec = crate::ps::specs::find(name.as_bytes()).expect("spec");
        Col {
            spec: Some(spec),
            name: spec.head.as_bytes().to_vec(),
            width: spec.width,
            flags: spec.flags,
        }
    }

    /// m/-m: a process line prints `-` in thread-only columns, a thread line in process-only
    /// ones; every-line columns and literal text print on both.
    #[test]
    fn process_and_thread_lines_blank_the_other_kinds_columns() {
        let fetched = read_groups().iter().fold(0, |a, g| a | g.flag());
        let t = full(0);
        let r = Row { t: &t, fetched };
        let cols = vec![
            col("pid"),
            col("tid"),
            col("ni"),
            col("etimes"),
            col("comm"),
        ];
        let mut out = Vec::new();
        let mut p = Printer::new(cols, 200, &mut out);
        p.no_header();
        let mut c = ctx(false, false);
        p.show_as(&mut c, &r, Line::Process).unwrap();
        p.show_as(&mut c, &r, Line::Thread).unwrap();
        p.show(&mut c, &r).unwrap();
        p.finish(&mut c).unwrap();
        drop(p);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines[0], ["999999990", "-", "-", "997", "worker"]);
        assert_eq!(lines[1], ["-", "999999991", "-5", "997", "-"]);
        assert_eq!(lines[2], ["999999990", "999999991", "-5", "997", "worker"]);
    }

    /// EIP and ESP are zero unless the task is exiting with its stack still there, which
    /// taskdiag cannot see: `-` then, never a made-up address. A zombie's stack is gone.
    #[test]
    fn instruction_pointers_are_zero_unless_exiting() {
        let fetched = read_groups().iter().fold(0, |a, g| a | g.flag());
        let mut c = ctx(false, false);
        let mut t = full(0);
        assert_eq!(cell(&mut c, Pr::Kstk, &t, fetched), "0000000000000000");
        for exiting in [0x4, 0x8, 0x200] {
            let base = t.base.as_mut().unwrap();
            base.rec.task_flags |= exiting;
            base.rec.state = 0;
            assert_eq!(cell(&mut c, Pr::Kstk, &t, fetched), "-", "{exiting:#x}");
            t.base.as_mut().unwrap().rec.state = 6; // Z
            assert_eq!(cell(&mut c, Pr::Kstk, &t, fetched), "0000000000000000");
            t.base.as_mut().unwrap().rec.task_flags &= !exiting;
        }
    }

    /// procps' test columns cycle with its line counter, taken as unsigned.
    #[test]
    fn test_columns_cycle_with_the_line_count() {
        let left = ["tty7", "pts/9999", "iseries/vtty42", "ttySMX0", "3270/tty4"];
        assert_eq!(test_value(&left, 0), "tty7");
        assert_eq!(test_value(&left, 7), "iseries/vtty42");
        // -1 is 4294967295: 0 mod 5.
        assert_eq!(test_value(&left, -1), "tty7");
        assert_eq!(test_value(&left, -2), "3270/tty4");
        let mut c = ctx(false, false);
        c.max_rightward = 5;
        c.lines_to_next_header = -1;
        let t = full(0);
        assert_eq!(cell(&mut c, Pr::TestUnlimited, &t, 0), "[1234");
    }

    /// %CUU and %CUC: lifetime CPU use in three decimals, capped as procps caps it.
    #[test]
    fn lifetime_cpu_use_has_three_decimals() {
        let fetched = read_groups().iter().fold(0, |a, g| a | g.flag());
        let mut c = ctx(false, false);
        let t = full(0);
        // 9 s of CPU (11 with children) over 997 s of life (boot_tics 100000, start 300).
        assert_eq!(cell(&mut c, Pr::Cuu, &t, fetched), "0.903");
        assert_eq!(cell(&mut c, Pr::Cuc, &t, fetched), "1.103");
        c.boot_tics = 301;
        assert_eq!(cell(&mut c, Pr::Cuu, &t, fetched), "99.999");
    }

    #[test]
    fn ctime_has_the_fixed_layout() {
        let s = ctime(0);
        assert_eq!(s.len(), 25);
        assert!(s.ends_with('\n'));
        assert_eq!(&s[3..4], " ");
    }

    #[test]
    fn sched_classes_are_procps_abbreviations() {
        assert_eq!(sched_class(0), "TS");
        assert_eq!(sched_class(6), "DLN");
        assert_eq!(sched_class(9), "?");
    }

    #[test]
    fn wchan_of_a_missing_task_is_unknown() {
        assert_eq!(wchan(u32::MAX - 1), "?");
    }
}
