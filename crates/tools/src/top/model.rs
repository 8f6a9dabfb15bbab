//! From snapshots to top's task table: one [`Row`] per task with the numbers top shows,
//! %CPU from the difference of two snapshots, the state counts of the summary, and the
//! selection (user, other filters, idle) and ordering (sort column, reverse) of the rows.
//!
//! CPU time deltas are matched by (pid, start time): a pid reused between two snapshots is a
//! new task whose time was all spent since the first one, never a continuation of the old
//! task's. Matching is a single merge over both snapshots (both are in /proc order), so a
//! refresh costs O(n) before sorting, with no per-task /proc reads.
//!
//! Formatting of cells is [`super::format`]'s job; reading tasks is the snapshot module's.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::rc::Rc;

use taskdiag_proto::{state_char, Group, BASE_F_KTHREAD};

use crate::names::{Names, Ttys};
use crate::snapshot::{CpuTime, Task};
use crate::text;

pub use super::fields::Col;

/// One task as top shows it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Row {
    /// Index of the task in the snapshot (for its name and command line).
    pub idx: u32,
    /// Task id.
    pub pid: u32,
    /// Thread-group id.
    pub tgid: u32,
    /// Start time since boot, ns.
    pub start_ns: u64,
    /// Real, effective, saved and filesystem uid; `None` when CRED could not be read.
    pub uids: Option<[u32; 4]>,
    /// Index of the effective user's name in [`Frame::users`]; `None` without CRED.
    pub user: Option<u32>,
    /// State letter.
    pub state: u8,
    /// A kernel thread.
    pub kthread: bool,
    /// What STAT gives; `None` when it could not be read (its columns show `-`).
    pub cpu: Option<Cpu>,
    /// What STATM gives; `None` when it could not be read.
    pub mem: Option<Mem>,
}

/// A row's scheduling and time values (from STAT).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpu {
    /// Priority as /proc/PID/stat field 18.
    pub pr: i32,
    /// Nice value.
    pub ni: i32,
    /// Threads in the group.
    pub nlwp: u32,
    /// utime + stime, clock ticks.
    pub tics: u64,
    /// The same plus waited-for children's.
    pub ctics: u64,
    /// Ticks used since the previous snapshot.
    pub delta: u64,
    /// Major and minor faults since the previous snapshot (0 for a task it did not have).
    pub dflt: (u64, u64),
}

/// A row's memory sizes (from STATM), KiB; zero for a task without an address space (kernel
/// threads, zombies), as procps shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mem {
    /// VmSize.
    pub virt: u64,
    /// Resident.
    pub res: u64,
    /// Resident file and shmem pages.
    pub shr: u64,
}

impl Row {
    /// Ticks used since the previous snapshot (`None` without STAT).
    pub fn delta(&self) -> Option<u64> {
        self.cpu.map(|c| c.delta)
    }
}

/// Task counts by state, for the summary's second line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// All tasks.
    pub total: u32,
    /// R.
    pub running: u32,
    /// S, D and the others (I, P, ...), which procps adds to the sleepers.
    pub sleeping: u32,
    /// T, t.
    pub stopped: u32,
    /// Z.
    pub zombie: u32,
}

/// What the previous snapshot knew of a task, to compute deltas.
#[derive(Debug, Clone, Copy)]
struct Prev {
    key: (u32, bool, u32),
    start_ns: u64,
    tics: u64,
    /// Major and minor faults; `None` when the snapshot did not read them.
    flt: Option<(u64, u64)>,
}

/// The sort order key of a snapshot (as `snapshot::sort_like_proc`).
fn proc_key(t: &Task) -> (u32, bool, u32) {
    crate::snapshot::proc_order(t.tgid, t.pid)
}

/// Turns successive snapshots into rows with CPU deltas.
pub struct Deltas {
    prev: Vec<Prev>,
    prev_ns: u64,
    names: Rc<RefCell<Names>>,
    ttys: Rc<RefCell<Ttys>>,
}

/// The table of one refresh.
pub struct Frame {
    /// The snapshot (rows refer to it by index).
    pub tasks: Rc<Vec<Task>>,
    /// All tasks of the snapshot after `-p`, in /proc order.
    pub rows: Vec<Row>,
    /// Distinct effective user names, indexed by [`Row::user`].
    pub users: Vec<String>,
    /// Seconds since the previous snapshot (at least 0.005, as procps).
    pub et: f32,
    /// State counts of `rows`.
    pub counts: Counts,
    /// The groups the snapshot asked for.
    pub fetched: u64,
    /// User and group names (a cache kept from frame to frame).
    pub names: Rc<RefCell<Names>>,
    /// Terminal names (a cache kept from frame to frame).
    pub ttys: Rc<RefCell<Ttys>>,
}

impl Default for Deltas {
    fn default() -> Self {
        Self::new()
    }
}

impl Deltas {
    /// No previous snapshot yet.
    pub fn new() -> Self {
        Deltas {
            prev: Vec::new(),
            prev_ns: 0,
            names: Rc::default(),
            ttys: Rc::default(),
        }
    }

    /// Forgets the previous snapshot (after switching between process and thread view).
    pub fn reset(&mut self) {
        self.prev.clear();
        self.prev_ns = 0;
    }

    /// Takes `times` (read at `now_ns`) as the previous snapshot without making a frame: the
    /// first sample, which only sets the baseline of the next frame's %CPU.
    pub fn prime(&mut self, times: &[CpuTime], now_ns: u64, ns_per_tick: u64) {
        let ns_per_tick = ns_per_tick.max(1);
        self.prev.clear();
        self.prev.extend(times.iter().map(|t| Prev {
            key: crate::snapshot::proc_order(t.tgid, t.pid),
            start_ns: t.start_ns,
            tics: t.cpu_ns / ns_per_tick,
            flt: None,
        }));
        if !self.prev.windows(2).all(|w| w[0].key <= w[1].key) {
            self.prev.sort_by_key(|p| p.key);
        }
        self.prev_ns = now_ns;
    }

    /// Makes the rows of `tasks` (taken at `now_ns` on CLOCK_BOOTTIME), keeping only
    /// thread groups in `pids` when it is not empty.
    pub fn frame(
        &mut self,
        tasks: impl Into<Rc<Vec<Task>>>,
        now_ns: u64,
        pids: &[u32],
        ns_per_tick: u64,
        fetched: u64,
    ) -> Frame {
        let tasks = tasks.into();
        let ns_per_tick = ns_per_tick.max(1);
        let et_ns = now_ns.saturating_sub(self.prev_ns);
        let mut et = et_ns as f32 / 1e9;
        if self.prev_ns == 0 || et < 0.01 {
            et = 0.005;
        }
        let mut rows = Vec::with_capacity(tasks.len());
        let mut next_prev = Vec::with_capacity(tasks.len());
        let mut users: Vec<String> = Vec::new();
        let mut user_idx: HashMap<u32, u32> = HashMap::new();
        let mut counts = Counts::default();
        let mut j = 0usize;
        for (i, t) in tasks.iter().enumerate() {
            if !pids.is_empty() && !pids.contains(&t.tgid) {
                continue;
            }
            let key = proc_key(t);
            // A task without BASE ended while the backend read it: procps skips those too.
            let Some(b) = &t.base else {
                continue;
            };
            let (state, kthread, start_ns) = (
                state_char(b.rec.state) as u8,
                b.rec.flags & BASE_F_KTHREAD != 0,
                b.rec.start_time_ns,
            );
            let uids = t
                .cred
                .as_ref()
                .map(|c| [c.rec.uid, c.rec.euid, c.rec.suid, c.rec.fsuid]);
            let user = uids.map(|u| {
                *user_idx.entry(u[1]).or_insert_with(|| {
                    users.push(self.names.borrow_mut().user(u[1]).to_string());
                    (users.len() - 1) as u32
                })
            });
            while j < self.prev.len() && self.prev[j].key < key {
                j += 1;
            }
            let cpu = t.stat.as_ref().map(|s| {
                let tics = (s.utime_ns + s.stime_ns) / ns_per_tick;
                let same = self
                    .prev
                    .get(j)
                    .filter(|p| p.key == key && p.start_ns == start_ns);
                let delta = match same {
                    Some(p) => tics.saturating_sub(p.tics),
                    // New since the previous snapshot (or a reused pid): all its time is recent.
                    _ if self.prev_ns != 0 && start_ns >= self.prev_ns => tics,
                    _ => 0,
                };
                // As libproc2: faults since the previous snapshot of the same task, else 0.
                let dflt = match same.and_then(|p| p.flt) {
                    Some((maj, min)) => {
                        (s.majflt.saturating_sub(maj), s.minflt.saturating_sub(min))
                    }
                    None => (0, 0),
                };
                next_prev.push(Prev {
                    key,
                    start_ns,
                    tics,
                    flt: Some((s.majflt, s.minflt)),
                });
                Cpu {
                    pr: s.priority,
                    ni: s.nice,
                    nlwp: s.threads.max(1),
                    tics,
                    ctics: tics + (s.cutime_ns + s.cstime_ns) / ns_per_tick,
                    delta,
                    dflt,
                }
            });
            // No STATM without an error: the task has no address space (it was asked for).
            let mem = match &t.statm {
                Some(m) => Some(Mem {
                    virt: m.vm_size / 1024,
                    res: (m.rss_anon + m.rss_file + m.rss_shmem) / 1024,
                    shr: (m.rss_file + m.rss_shmem) / 1024,
                }),
                None if fetched & Group::Statm.flag() != 0 && !t.failed(Group::Statm) => {
                    Some(Mem::default())
                }
                None => None,
            };
            let r = Row {
                idx: i as u32,
                pid: t.pid,
                tgid: t.tgid,
                start_ns,
                uids,
                user,
                state,
                kthread,
                cpu,
                mem,
            };
            counts.total += 1;
            match state {
                b'R' => counts.running += 1,
                b'T' | b't' => counts.stopped += 1,
                b'Z' => counts.zombie += 1,
                _ => counts.sleeping += 1,
            }
            rows.push(r);
        }
        // Snapshots come sorted, but do not rely on it for correctness of the merge.
        if !next_prev.windows(2).all(|w| w[0].key <= w[1].key) {
            next_prev.sort_by_key(|p| p.key);
        }
        self.prev = next_prev;
        self.prev_ns = now_ns;
        Frame {
            tasks,
            rows,
            users,
            et,
            counts,
            fetched,
            names: self.names.clone(),
            ttys: self.ttys.clone(),
        }
    }
}

/// A `u`/`U` selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserSel {
    /// The uid.
    pub uid: u32,
    /// `U`: real, saved, filesystem or effective uid; `u`: effective only.
    pub any: bool,
    /// `!`: show everyone else.
    pub exclude: bool,
}

impl UserSel {
    /// Parses what `-u`/`-U` or the `u`/`U` prompt got: `[!]name` or `[!]uid`. Unknown uids
    /// are accepted (tasks of users from another passwd database, as in a chroot).
    pub fn parse(s: &str, any: bool) -> Result<UserSel, &'static str> {
        let (exclude, s) = match s.strip_prefix('!') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let uid = match crate::cnum::strtoul_exact(s.as_bytes(), 0) {
            Some(n) => u32::try_from(n).map_err(|_| "Invalid user")?,
            None => crate::names::uid_of(s).ok_or("Invalid user")?,
        };
        Ok(UserSel { uid, any, exclude })
    }

    /// Whether `r` passes.
    pub fn matches(&self, r: &Row) -> bool {
        let Some(uids) = r.uids else {
            // Whose task it is is unknown: it is neither included nor excluded by user.
            return false;
        };
        let hit = if self.any {
            uids.contains(&self.uid)
        } else {
            uids[1] == self.uid
        };
        hit != self.exclude
    }
}

/// How an other-filter compares a cell with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterOp {
    /// `=`: the cell contains the value.
    Contains,
    /// `<`: the cell is less than the value (as numbers when both are numbers).
    Less,
    /// `>`: the cell is greater.
    Greater,
}

/// An `o`/`O` filter: `[!]FIELD=VALUE`, `FIELD<VALUE` or `FIELD>VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// The column compared.
    pub col: Col,
    /// The comparison.
    pub op: FilterOp,
    /// The value.
    pub value: String,
    /// `!`: keep tasks that do not match.
    pub exclude: bool,
    /// `o` ignores case, `O` does not.
    pub ignore_case: bool,
    /// The text as typed (for ^O).
    pub raw: String,
}

impl Filter {
    /// Parses a filter as typed after `o` (`ignore_case`) or `O`.
    pub fn parse(s: &str, ignore_case: bool) -> Result<Filter, String> {
        let (exclude, body) = match s.strip_prefix('!') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let Some(at) = body.find(['=', '<', '>']) else {
            return Err(format!("'{s}' filter delimiter is missing"));
        };
        let (name, rest) = body.split_at(at);
        let op = match rest.as_bytes()[0] {
            b'=' => FilterOp::Contains,
            b'<' => FilterOp::Less,
            _ => FilterOp::Greater,
        };
        let value = &rest[1..];
        if value.is_empty() {
            return Err(format!("'{s}' filter value is missing"));
        }
        let col = Col::ALL
            .iter()
            .copied()
            .find(|c| c.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("unrecognized field name '{name}'"))?;
        Ok(Filter {
            col,
            op,
            value: value.to_string(),
            exclude,
            ignore_case,
            raw: s.to_string(),
        })
    }

    /// Whether a task whose `col` cell reads `cell` passes.
    pub fn matches(&self, cell: &str) -> bool {
        let cell = cell.trim();
        let hit = match self.op {
            FilterOp::Contains => {
                if self.ignore_case {
                    cell.to_lowercase().contains(&self.value.to_lowercase())
                } else {
                    cell.contains(&self.value)
                }
            }
            FilterOp::Less | FilterOp::Greater => {
                let ord = match (cell.parse::<f64>(), self.value.parse::<f64>()) {
                    (Ok(a), Ok(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
                    _ if self.ignore_case => cell.to_lowercase().cmp(&self.value.to_lowercase()),
                    _ => cell.cmp(self.value.as_str()),
                };
                if self.op == FilterOp::Less {
                    ord == Ordering::Less
                } else {
                    ord == Ordering::Greater
                }
            }
        };
        hit != self.exclude
    }
}

/// The name or command line of row `r` as top's COMMAND column shows it (escaped).
pub fn command(tasks: &[Task], r: &Row, cmdline: bool, utf8: bool) -> Vec<u8> {
    let Some(t) = tasks.get(r.idx as usize) else {
        return Vec::new();
    };
    let comm: &[u8] = t.base.as_ref().map(|b| b.comm.as_slice()).unwrap_or(b"");
    if cmdline {
        if let Some(raw) = t.cmdline.as_ref().filter(|c| !c.is_empty()) {
            let joined = text::unvector(raw, 128 * 1024 - 1);
            if !joined.is_empty() {
                return text::lib_escape(&joined, utf8);
            }
        }
        // As procps: the name in brackets when there is no command line (kernel threads,
        // zombies), and zombies marked.
        let mut v = b"[".to_vec();
        v.extend(text::lib_escape(comm, utf8));
        v.push(b']');
        if r.state == b'Z' {
            v.extend_from_slice(b" <defunct>");
        }
        return v;
    }
    text::lib_escape(comm, utf8)
}

/// Sorts `order` (indices into `rows`) by `col`, highest first unless `ascending`; ties keep
/// their order (procps' sort is stable over /proc order).
pub fn sort(order: &mut [u32], rows: &[Row], col: Col, ascending: bool, key: &SortCtx<'_>) {
    let get = |i: &u32| &rows[*i as usize];
    let cmp = |a: &u32, b: &u32| -> Ordering {
        let (a, b) = (get(a), get(b));
        match col {
            Col::Pid => a.pid.cmp(&b.pid),
            // A missing value (None) sorts below every value.
            Col::User => {
                let name = |r: &Row| r.user.map(|u| &key.users[u as usize]);
                name(a).cmp(&name(b))
            }
            Col::Pr => a.cpu.map(|c| c.pr).cmp(&b.cpu.map(|c| c.pr)),
            Col::Ni => a.cpu.map(|c| c.ni).cmp(&b.cpu.map(|c| c.ni)),
            Col::Virt => a.mem.map(|m| m.virt).cmp(&b.mem.map(|m| m.virt)),
            Col::Res | Col::Mem => a.mem.map(|m| m.res).cmp(&b.mem.map(|m| m.res)),
            Col::Shr => a.mem.map(|m| m.shr).cmp(&b.mem.map(|m| m.shr)),
            Col::S => a.state.cmp(&b.state),
            Col::Cpu => a.delta().cmp(&b.delta()),
            Col::Time if key.cumulative => a.cpu.map(|c| c.ctics).cmp(&b.cpu.map(|c| c.ctics)),
            Col::Time => a.cpu.map(|c| c.tics).cmp(&b.cpu.map(|c| c.tics)),
            _ => Ordering::Equal,
        }
    };
    if !builtin(col) {
        // Compute each row's key once.
        let mut keyed: Vec<(SortKey, u32)> =
            order.iter().map(|&i| ((key.generic)(get(&i)), i)).collect();
        let by = |a: &(SortKey, u32), b: &(SortKey, u32)| {
            a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal)
        };
        if ascending {
            keyed.sort_by(by);
        } else {
            keyed.sort_by(|a, b| by(b, a));
        }
        for (slot, (_, i)) in order.iter_mut().zip(keyed) {
            *slot = i;
        }
        return;
    }
    if col == Col::Command {
        // Compare the text shown, computed once per row.
        let mut keyed: Vec<(Vec<u8>, u32)> = order
            .iter()
            .map(|&i| (command(key.tasks, get(&i), key.cmdline, key.utf8), i))
            .collect();
        if ascending {
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
        } else {
            keyed.sort_by(|a, b| b.0.cmp(&a.0));
        }
        for (slot, (_, i)) in order.iter_mut().zip(keyed) {
            *slot = i;
        }
        return;
    }
    if ascending {
        order.sort_by(cmp);
    } else {
        order.sort_by(|a, b| cmp(b, a));
    }
}

/// The columns [`sort`] compares itself; the others by [`SortCtx::generic`].
fn builtin(c: Col) -> bool {
    Col::DEFAULT.contains(&c)
}

/// The value a row sorts by for a field [`sort`] does not know itself: missing values sort
/// below numbers, numbers below text.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub enum SortKey {
    /// The value could not be read.
    Missing,
    /// A number.
    Num(f64),
    /// Text, compared byte by byte.
    Text(Vec<u8>),
}

/// What sorting needs besides the rows.
pub struct SortCtx<'a> {
    /// The sort key of a row for the other fields.
    pub generic: &'a dyn Fn(&Row) -> SortKey,
    /// User names by [`Row::user`].
    pub users: &'a [String],
    /// The snapshot, for names and command lines.
    pub tasks: &'a [Task],
    /// COMMAND shows command lines.
    pub cmdline: bool,
    /// TIME+ includes children's time.
    pub cumulative: bool,
    /// The locale is UTF-8.
    pub utf8: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskdiag_proto::layout::{BaseRec, StatRec};
    use taskdiag_proto::task::Base;

    /// The groups top asks for.
    const ALL: u64 =
        Group::Base.flag() | Group::Cred.flag() | Group::Stat.flag() | Group::Statm.flag();

    fn task(pid: u32, start: u64, ticks: u64) -> Task {
        Task {
            pid,
            tgid: pid,
            base: Some(Base {
                rec: BaseRec {
                    start_time_ns: start,
                    ..BaseRec::default()
                },
                comm: b"x".to_vec(),
            }),
            stat: Some(StatRec {
                utime_ns: ticks * 10_000_000,
                threads: 1,
                ..StatRec::default()
            }),
            ..Task::default()
        }
    }

    #[test]
    fn deltas_follow_pid_and_start_time() {
        let mut d = Deltas::new();
        let f = d.frame(
            vec![task(5, 100, 50), task(7, 200, 10)],
            1_000_000_000,
            &[],
            10_000_000,
            ALL,
        );
        assert!(f.rows.iter().all(|r| r.delta() == Some(0)));
        // Task 5 used 30 ticks; pid 7 was reused by a task started after the first snapshot;
        // task 9 is new.
        let f = d.frame(
            vec![
                task(5, 100, 80),
                task(7, 1_500_000_000, 4),
                task(9, 1_600_000_000, 3),
            ],
            2_000_000_000,
            &[],
            10_000_000,
            ALL,
        );
        let deltas: Vec<u64> = f.rows.iter().filter_map(|r| r.delta()).collect();
        assert_eq!(deltas, [30, 4, 3]);
        assert!((f.et - 1.0).abs() < 1e-6);
        // A task missing from the previous snapshot that started before it gets nothing.
        let f = d.frame(
            vec![task(3, 50, 999), task(5, 100, 80)],
            3_000_000_000,
            &[],
            10_000_000,
            ALL,
        );
        let deltas: Vec<u64> = f.rows.iter().filter_map(|r| r.delta()).collect();
        assert_eq!(deltas, [0, 0]);
        // -p keeps only the listed thread groups.
        let f = d.frame(
            vec![task(3, 50, 999), task(5, 100, 80)],
            4_000_000_000,
            &[5],
            10_000_000,
            ALL,
        );
        assert_eq!(f.rows.len(), 1);
        assert_eq!(f.counts.total, 1);
    }

    #[test]
    fn filters_parse_and_match() {
        let f = Filter::parse("COMMAND=sLeep", true).expect("filter");
        assert!(f.matches("sleep   "));
        assert!(!Filter::parse("COMMAND=sLeep", false)
            .expect("f")
            .matches("sleep"));
        let f = Filter::parse("!%CPU>5", true).expect("filter");
        assert!(!f.matches(" 99.0"));
        assert!(f.matches("  1.0"));
        assert!(Filter::parse("NOPE=1", true).is_err());
        assert!(Filter::parse("COMMAND", true).is_err());
        assert!(Filter::parse("COMMAND=", true).is_err());
    }

    #[test]
    fn users_by_name_or_number() {
        assert_eq!(UserSel::parse("root", false).map(|u| u.uid), Ok(0));
        assert_eq!(
            UserSel::parse("4000000", true).map(|u| u.uid),
            Ok(4_000_000)
        );
        assert!(UserSel::parse("!0", false).expect("sel").exclude);
        assert!(UserSel::parse("no such user, surely", false).is_err());
        assert_eq!(UserSel::parse("0x10", false).map(|u| u.uid), Ok(16));
        assert_eq!(UserSel::parse("010", false).map(|u| u.uid), Ok(8));
        assert!(UserSel::parse("1x", false).is_err());
    }
}
