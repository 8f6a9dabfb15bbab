//! top's fields: procps-ng 4.0.2 top's `Fieldstab` (every field `-O` lists and the `f`
//! screen offers, in its order, with its heading, description, width and justification), which
//! taskdiag groups each field's data comes from, and a window's field list (procps'
//! `fieldscur`: the order of the fields and which are shown).
//!
//! Every field is shown: the smaps_rollup sizes and the NUMA node are read per task as procps
//! reads them ([`crate::procvals`]). Formatting a field's value is [`super::format`]'s job.
//!
//! taskdiag adds one field after procps' 78: SYSCALL, the system call a task is in (from
//! /proc/PID/syscall, as WCHAN is from /proc/PID/wchan). Its number is the first that procps
//! 4.0.2's rc file leaves unused, so that file's padding names it, hidden.

use taskdiag_proto::Group;

/// A top field, in procps' `Fieldstab` order (its `EU_*` enumerators).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Col {
    /// Process Id.
    Pid,
    /// Parent Process pid.
    Ppid,
    /// Effective User Id.
    Uid,
    /// Effective User Name.
    User,
    /// Real User Id.
    Ruid,
    /// Real User Name.
    Ruser,
    /// Saved User Id.
    Suid,
    /// Saved User Name.
    Suser,
    /// Group Id.
    Gid,
    /// Group Name.
    Group,
    /// Process Group Id.
    Pgrp,
    /// Controlling Tty.
    Tty,
    /// Tty Process Grp Id.
    Tpgid,
    /// Session Id.
    Sid,
    /// Priority.
    Pr,
    /// Nice Value.
    Ni,
    /// Number of Threads.
    Nth,
    /// Last Used Cpu (SMP).
    Cpun,
    /// CPU Usage.
    Cpu,
    /// CPU Time.
    Time1,
    /// CPU Time, hundredths.
    Time,
    /// Memory Usage (RES).
    Mem,
    /// Virtual Image (KiB).
    Virt,
    /// Swapped Size (KiB).
    Swap,
    /// Resident Size (KiB).
    Res,
    /// Code Size (KiB).
    Code,
    /// Data+Stack (KiB).
    Data,
    /// Shared Memory (KiB).
    Shr,
    /// Major Page Faults.
    Fl1,
    /// Minor Page Faults.
    Fl2,
    /// Dirty Pages Count.
    Drt,
    /// Process Status.
    S,
    /// Command Name/Line.
    Command,
    /// Sleeping in Function.
    Wchan,
    /// Task Flags <sched.h>.
    Flags,
    /// Control Groups.
    Cgroups,
    /// Supp Groups IDs.
    Supgids,
    /// Supp Groups Names.
    Supgrps,
    /// Thread Group Id.
    Tgid,
    /// OOMEM Adjustment.
    OomAdj,
    /// OOMEM Score current.
    OomScore,
    /// Environment vars.
    Environ,
    /// Major Faults delta.
    Fv1,
    /// Minor Faults delta.
    Fv2,
    /// Res+Swap Size (KiB).
    Used,
    /// IPC namespace Inode.
    NsIpc,
    /// MNT namespace Inode.
    NsMnt,
    /// NET namespace Inode.
    NsNet,
    /// PID namespace Inode.
    NsPid,
    /// USER namespace Inode.
    NsUser,
    /// UTS namespace Inode.
    NsUts,
    /// LXC container name.
    Lxc,
    /// RES Anonymous (KiB).
    RssAnon,
    /// RES File-based (KiB).
    RssFile,
    /// RES Locked (KiB).
    RssLocked,
    /// RES Shared (KiB).
    RssShared,
    /// Control Group name.
    Cgname,
    /// Last Used NUMA node.
    Numa,
    /// Login User Id.
    Logid,
    /// Executable Path.
    Exe,
    /// Res Mem (smaps), KiB.
    SmapRss,
    /// Proportion RSS,  KiB.
    Pss,
    /// Proportion Anon, KiB.
    PssAnon,
    /// Proportion File, KiB.
    PssFile,
    /// Proportion Shrd, KiB.
    PssShmem,
    /// Unique RSS, KiB.
    Uss,
    /// I/O Bytes Read.
    IoRb,
    /// I/O Read Operations.
    IoRo,
    /// I/O Bytes Written.
    IoWb,
    /// I/O Write Operations.
    IoWo,
    /// Autogroup Identifier.
    Agid,
    /// Autogroup Nice Value.
    Agni,
    /// Start Time from boot.
    Started,
    /// Elapsed Running Time.
    Elapsed,
    /// CPU Utilization.
    Cuu,
    /// Utilization + child.
    Cuc,
    /// CGRP namespace Inode.
    NsCgroup,
    /// TIME namespace Inode.
    NsTime,
    /// Current System Call (taskdiag's own).
    Syscall,
}

/// Heading, description, width (-1: variable, 0: set at startup) and right justification of
/// each field, in [`Col::ALL`] order (procps' `Head_nlstab`, `Desc_nlstab`, `Fieldstab`).
const INFO: [(&str, &str, i8, bool); 79] = [
    ("PID", "Process Id", 0, true),
    ("PPID", "Parent Process pid", 0, true),
    ("UID", "Effective User Id", 5, true),
    ("USER", "Effective User Name", 8, false),
    ("RUID", "Real User Id", 5, true),
    ("RUSER", "Real User Name", 8, false),
    ("SUID", "Saved User Id", 5, true),
    ("SUSER", "Saved User Name", 8, false),
    ("GID", "Group Id", 5, true),
    ("GROUP", "Group Name", 8, false),
    ("PGRP", "Process Group Id", 0, true),
    ("TTY", "Controlling Tty", 8, false),
    ("TPGID", "Tty Process Grp Id", 0, true),
    ("SID", "Session Id", 0, true),
    ("PR", "Priority", 3, true),
    ("NI", "Nice Value", 3, true),
    ("nTH", "Number of Threads", 3, true),
    ("P", "Last Used Cpu (SMP)", 0, true),
    ("%CPU", "CPU Usage", 5, true),
    ("TIME", "CPU Time", 6, true),
    ("TIME+", "CPU Time, hundredths", 9, true),
    ("%MEM", "Memory Usage (RES)", 5, true),
    ("VIRT", "Virtual Image (KiB)", 7, true),
    ("SWAP", "Swapped Size (KiB)", 6, true),
    ("RES", "Resident Size (KiB)", 6, true),
    ("CODE", "Code Size (KiB)", 6, true),
    ("DATA", "Data+Stack (KiB)", 7, true),
    ("SHR", "Shared Memory (KiB)", 6, true),
    ("nMaj", "Major Page Faults", 4, true),
    ("nMin", "Minor Page Faults", 4, true),
    ("nDRT", "Dirty Pages Count", 4, true),
    ("S", "Process Status", 1, true),
    ("COMMAND", "Command Name/Line", -1, false),
    ("WCHAN", "Sleeping in Function", 10, false),
    ("Flags", "Task Flags <sched.h>", 8, false),
    ("CGROUPS", "Control Groups", -1, false),
    ("SUPGIDS", "Supp Groups IDs", -1, false),
    ("SUPGRPS", "Supp Groups Names", -1, false),
    ("TGID", "Thread Group Id", 0, true),
    ("OOMa", "OOMEM Adjustment", 5, true),
    ("OOMs", "OOMEM Score current", 4, true),
    ("ENVIRON", "Environment vars", -1, false),
    ("vMj", "Major Faults delta", 3, true),
    ("vMn", "Minor Faults delta", 3, true),
    ("USED", "Res+Swap Size (KiB)", 6, true),
    ("nsIPC", "IPC namespace Inode", 10, true),
    ("nsMNT", "MNT namespace Inode", 10, true),
    ("nsNET", "NET namespace Inode", 10, true),
    ("nsPID", "PID namespace Inode", 10, true),
    ("nsUSER", "USER namespace Inode", 10, true),
    ("nsUTS", "UTS namespace Inode", 10, true),
    ("LXC", "LXC container name", 8, false),
    ("RSan", "RES Anonymous (KiB)", 6, true),
    ("RSfd", "RES File-based (KiB)", 6, true),
    ("RSlk", "RES Locked (KiB)", 6, true),
    ("RSsh", "RES Shared (KiB)", 6, true),
    ("CGNAME", "Control Group name", -1, false),
    ("NU", "Last Used NUMA node", 0, true),
    ("LOGID", "Login User Id", 5, true),
    ("EXE", "Executable Path", -1, false),
    ("RSS", "Res Mem (smaps), KiB", 6, true),
    ("PSS", "Proportion RSS,  KiB", 6, true),
    ("PSan", "Proportion Anon, KiB", 6, true),
    ("PSfd", "Proportion File, KiB", 6, true),
    ("PSsh", "Proportion Shrd, KiB", 6, true),
    ("USS", "Unique RSS, KiB", 6, true),
    ("ioR", "I/O Bytes Read", 6, true),
    ("ioRop", "I/O Read Operations", 5, true),
    ("ioW", "I/O Bytes Written", 6, true),
    ("ioWop", "I/O Write Operations", 5, true),
    ("AGID", "Autogroup Identifier", 5, true),
    ("AGNI", "Autogroup Nice Value", 4, true),
    ("STARTED", "Start Time from boot", 7, true),
    ("ELAPSED", "Elapsed Running Time", 7, true),
    ("%CUU", "CPU Utilization", 6, true),
    ("%CUC", "Utilization + child", 7, true),
    ("nsCGROUP", "CGRP namespace Inode", 10, true),
    ("nsTIME", "TIME namespace Inode", 10, true),
    ("SYSCALL", "Current System Call", 15, false),
];

/// procps' `FLD_OFFSET`: fieldscur values are `(field + FLD_OFFSET) << 1 | on`.
const FLD_OFFSET: i32 = b'%' as i32;

impl Col {
    /// Every field, in procps' order.
    pub const ALL: [Col; 79] = [
        Col::Pid,
        Col::Ppid,
        Col::Uid,
        Col::User,
        Col::Ruid,
        Col::Ruser,
        Col::Suid,
        Col::Suser,
        Col::Gid,
        Col::Group,
        Col::Pgrp,
        Col::Tty,
        Col::Tpgid,
        Col::Sid,
        Col::Pr,
        Col::Ni,
        Col::Nth,
        Col::Cpun,
        Col::Cpu,
        Col::Time1,
        Col::Time,
        Col::Mem,
        Col::Virt,
        Col::Swap,
        Col::Res,
        Col::Code,
        Col::Data,
        Col::Shr,
        Col::Fl1,
        Col::Fl2,
        Col::Drt,
        Col::S,
        Col::Command,
        Col::Wchan,
        Col::Flags,
        Col::Cgroups,
        Col::Supgids,
        Col::Supgrps,
        Col::Tgid,
        Col::OomAdj,
        Col::OomScore,
        Col::Environ,
        Col::Fv1,
        Col::Fv2,
        Col::Used,
        Col::NsIpc,
        Col::NsMnt,
        Col::NsNet,
        Col::NsPid,
        Col::NsUser,
        Col::NsUts,
        Col::Lxc,
        Col::RssAnon,
        Col::RssFile,
        Col::RssLocked,
        Col::RssShared,
        Col::Cgname,
        Col::Numa,
        Col::Logid,
        Col::Exe,
        Col::SmapRss,
        Col::Pss,
        Col::PssAnon,
        Col::PssFile,
        Col::PssShmem,
        Col::Uss,
        Col::IoRb,
        Col::IoRo,
        Col::IoWb,
        Col::IoWo,
        Col::Agid,
        Col::Agni,
        Col::Started,
        Col::Elapsed,
        Col::Cuu,
        Col::Cuc,
        Col::NsCgroup,
        Col::NsTime,
        Col::Syscall,
    ];

    /// How many of [`Col::ALL`] are procps top's (the rest are taskdiag's own).
    pub const PROCPS: usize = 78;

    /// The fields top shows by default, in procps order.
    pub const DEFAULT: [Col; 12] = [
        Col::Pid,
        Col::User,
        Col::Pr,
        Col::Ni,
        Col::Virt,
        Col::Res,
        Col::Shr,
        Col::S,
        Col::Cpu,
        Col::Mem,
        Col::Time,
        Col::Command,
    ];

    /// Position in [`Col::ALL`] (procps' `EU_*` value).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The heading, which is also the name `-o` takes.
    pub fn name(self) -> &'static str {
        INFO[self.index()].0
    }

    /// The description the field-management screen shows.
    pub fn desc(self) -> &'static str {
        INFO[self.index()].1
    }

    /// A variable-width column (it shares what is left of the line).
    pub fn variable(self) -> bool {
        INFO[self.index()].2 < 0
    }

    /// Right-justified (numbers); strings are left-justified.
    pub fn right(self) -> bool {
        INFO[self.index()].3
    }

    /// The fixed width of the column: procps' `Fieldstab` width, with the pid columns
    /// `pid_w` wide and P as wide as the highest CPU number; `None` for a variable one.
    pub fn width(self, pid_w: usize, cpu_w: usize) -> Option<usize> {
        match self {
            Col::Pid | Col::Ppid | Col::Pgrp | Col::Sid | Col::Tgid | Col::Tpgid => Some(pid_w),
            Col::Cpun => Some(cpu_w.max(1)),
            // Numa_node_tot's digits, at least 2.
            Col::Numa => Some(crate::procvals::numa_nodes().to_string().len().max(2)),
            c => usize::try_from(INFO[c.index()].2).ok(),
        }
    }

    /// The field named `name` (exact, as procps compares).
    pub fn by_name(name: &str) -> Option<Col> {
        Col::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// The field at `index` in [`Col::ALL`].
    pub fn from_index(index: usize) -> Option<Col> {
        Col::ALL.get(index).copied()
    }

    /// The taskdiag groups the field's values come from (BASE is always read); `cmdline`: COMMAND
    /// shows command lines.
    pub fn groups(self, cmdline: bool) -> u64 {
        let g = |g: Group| g.flag();
        match self {
            Col::Uid
            | Col::User
            | Col::Ruid
            | Col::Ruser
            | Col::Suid
            | Col::Suser
            | Col::Gid
            | Col::Group
            | Col::Supgids
            | Col::Supgrps => g(Group::Cred),
            Col::Pr
            | Col::Ni
            | Col::Nth
            | Col::Cpun
            | Col::Cpu
            | Col::Time1
            | Col::Time
            | Col::Fl1
            | Col::Fl2
            | Col::Fv1
            | Col::Fv2 => g(Group::Stat),
            Col::Cuu | Col::Cuc | Col::Numa => g(Group::Stat),
            Col::Mem
            | Col::Virt
            | Col::Swap
            | Col::Res
            | Col::Code
            | Col::Data
            | Col::Shr
            | Col::Used
            | Col::RssAnon
            | Col::RssFile
            | Col::RssLocked
            | Col::RssShared => g(Group::Statm),
            Col::Command if cmdline => g(Group::Cmdline),
            Col::Cgroups | Col::Cgname | Col::Lxc => g(Group::Cgroup),
            Col::Environ => g(Group::Environ),
            Col::Exe => g(Group::Paths),
            Col::OomAdj
            | Col::OomScore
            | Col::Logid
            | Col::Agid
            | Col::Agni
            | Col::Wchan
            | Col::Syscall => g(Group::Sched),
            Col::NsIpc
            | Col::NsMnt
            | Col::NsNet
            | Col::NsPid
            | Col::NsUser
            | Col::NsUts
            | Col::NsCgroup
            | Col::NsTime => g(Group::Ns),
            Col::IoRb | Col::IoRo | Col::IoWb | Col::IoWo => g(Group::Io),
            _ => 0,
        }
    }

    /// The link name in /proc/PID/ns of a namespace field.
    pub fn ns_name(self) -> Option<&'static str> {
        Some(match self {
            Col::NsIpc => "ipc",
            Col::NsMnt => "mnt",
            Col::NsNet => "net",
            Col::NsPid => "pid",
            Col::NsUser => "user",
            Col::NsUts => "uts",
            Col::NsCgroup => "cgroup",
            Col::NsTime => "time",
            _ => return None,
        })
    }
}

/// A window's fields: every field once, in the order the `f` screen lists them, each shown or
/// not (procps' `fieldscur`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields {
    /// The fields in order, with whether each is shown.
    pub list: Vec<(Col, bool)>,
}

impl Default for Fields {
    /// procps' default window ("Def"): its twelve columns, then the others in `Fieldstab`
    /// order.
    fn default() -> Self {
        let mut list: Vec<(Col, bool)> = Col::DEFAULT.iter().map(|&c| (c, true)).collect();
        list.extend(
            Col::ALL
                .iter()
                .filter(|c| !Col::DEFAULT.contains(c))
                .map(|&c| (c, false)),
        );
        Fields { list }
    }
}

impl Fields {
    /// The shown fields, in order.
    pub fn shown(&self) -> Vec<Col> {
        self.list.iter().filter(|f| f.1).map(|f| f.0).collect()
    }

    /// The fields of an rc file's `fieldscur` values (procps' `FLDget`/`FLDviz`); `None` when
    /// they do not name every procps field exactly once, as procps requires. The values past
    /// procps' fields are its padding, which names taskdiag's own fields in order (hidden,
    /// unless a file turns one on); a taskdiag field a file does not name is added hidden.
    pub fn from_fieldscur(vals: &[i32]) -> Option<Fields> {
        if vals.len() < Col::PROCPS {
            return None;
        }
        let mut list = Vec::with_capacity(Col::ALL.len());
        let mut seen = [false; Col::ALL.len()];
        for &v in &vals[..Col::ALL.len().min(vals.len())] {
            let col = Col::from_index(usize::try_from((v >> 1) - FLD_OFFSET).ok()?)?;
            if std::mem::replace(&mut seen[col.index()], true) {
                return None;
            }
            list.push((col, v & 1 == 1));
        }
        for c in Col::ALL {
            if !seen[c.index()] {
                if c.index() < Col::PROCPS {
                    return None;
                }
                list.push((c, false));
            }
        }
        Some(Fields { list })
    }

    /// The position of `col` in the list.
    pub fn position(&self, col: Col) -> Option<usize> {
        self.list.iter().position(|f| f.0 == col)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_procps_fieldstab() {
        assert_eq!(Col::ALL.len(), Col::PROCPS + 1);
        assert_eq!(Col::ALL[Col::PROCPS], Col::Syscall);
        for (i, c) in Col::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
            assert_eq!(Col::by_name(c.name()), Some(*c));
        }
        assert_eq!(Col::by_name("nsCGROUP"), Some(Col::NsCgroup));
        assert_eq!(Col::by_name("time+"), None);
        assert_eq!(Col::Command.width(5, 1), None);
        assert_eq!(Col::Tpgid.width(7, 1), Some(7));
        assert_eq!(Col::Flags.width(5, 1), Some(8));
        assert_eq!(Col::Wchan.width(5, 1), Some(10));
        assert_eq!(
            (
                Col::Syscall.name(),
                Col::Syscall.width(5, 1),
                Col::Syscall.right()
            ),
            ("SYSCALL", Some(15), false)
        );
        // Both read SCHED, and only they and the other SCHED fields do.
        assert_eq!(Col::Syscall.groups(false), Group::Sched.flag());
        assert_eq!(Col::Wchan.groups(false), Group::Sched.flag());
        assert_eq!(
            Fields::default()
                .shown()
                .iter()
                .map(|c| c.groups(false))
                .fold(0, |a, g| a | g)
                & Group::Sched.flag(),
            0
        );
    }

    #[test]
    fn default_fields_are_procps_def_window() {
        // procps 4.0.2's "Def" fieldscur as `W` writes it (first 78 values).
        let def: [i32; 78] = [
            75, 81, 103, 105, 119, 123, 129, 137, 111, 117, 115, 139, 76, 78, 82, 84, 86, 88, 90,
            92, 94, 96, 98, 100, 106, 108, 112, 120, 124, 126, 130, 132, 134, 140, 142, 144, 146,
            148, 150, 152, 154, 156, 158, 160, 162, 164, 166, 168, 170, 172, 174, 176, 178, 180,
            182, 184, 186, 188, 190, 192, 194, 196, 198, 200, 202, 204, 206, 208, 210, 212, 214,
            216, 218, 220, 222, 224, 226, 228,
        ];
        assert_eq!(Fields::from_fieldscur(&def), Some(Fields::default()));
        assert_eq!(Fields::default().shown(), Col::DEFAULT);
        let mut twice = def;
        twice[1] = 75;
        assert_eq!(Fields::from_fieldscur(&twice), None);
        assert_eq!(Fields::from_fieldscur(&def[..10]), None);
        // The padding procps writes after its fields names SYSCALL, hidden; a file that turns
        // it on shows it, wherever it puts it.
        let mut padded = def.to_vec();
        padded.extend((78..100).map(|i| (i + FLD_OFFSET) << 1));
        assert_eq!(Fields::from_fieldscur(&padded), Some(Fields::default()));
        padded[78] |= 1;
        assert_eq!(
            Fields::from_fieldscur(&padded).map(|f| f.shown().len()),
            Some(13)
        );
        padded.swap(1, 78);
        let f = Fields::from_fieldscur(&padded).expect("fields");
        assert_eq!(&f.shown()[..2], [Col::Pid, Col::Syscall]);
        // Every procps field must be there.
        let mut short = def;
        short[77] = (78 + FLD_OFFSET) << 1;
        assert_eq!(Fields::from_fieldscur(&short), None);
    }
}
