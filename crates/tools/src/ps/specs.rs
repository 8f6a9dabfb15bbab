//! The column table: every format specifier procps ps 4.0.2 knows, with its header, width,
//! justification, what prints it and what it sorts by.
//!
//! Every specifier prints what procps prints; those procps itself prints as "-" ([`Pr::Nop`])
//! print "-" here too.
//!
//! Each specifier also carries procps' print-on flags ([`cf::THREAD`], [`cf::PROCESS`], ...):
//! with m/-m, a process line shows `-` in thread-only columns and a thread line `-` in
//! process-only ones.

/// Justification and print-mask flags (procps `CF_*`).
pub mod cf {
    /// Left if text, right if numeric (user and group names).
    pub const USER: u32 = 1;
    /// Left-justified.
    pub const LEFT: u32 = 2;
    /// Right-justified.
    pub const RIGHT: u32 = 3;
    /// May use all remaining width (last column) or overflow.
    pub const UNLIMITED: u32 = 4;
    /// Kernel function names: left if text.
    pub const WCHAN: u32 = 5;
    /// Signal masks: right in 9, or 16 when there is room.
    pub const SIGNAL: u32 = 6;
    /// Mask of the justification bits.
    pub const JUST_MASK: u32 = 0xf;
    /// Width follows the length of pid_max.
    pub const PIDMAX: u32 = 0x10;
    /// With m/-m, shown on thread lines only (`-` on process lines).
    pub const THREAD: u32 = 0x1000_0000;
    /// With m/-m, shown on process lines only (`-` on thread lines).
    pub const PROCESS: u32 = 0x2000_0000;
    /// Shown on every line (AIX literal text too).
    pub const EVERY: u32 = 0x4000_0000;
    /// procps' "as needed", which it treats as every line.
    pub const NEEDED: u32 = 0x8000_0000;
    /// Mask of the print-on bits above.
    pub const PRINT_MASK: u32 = 0xf000_0000;
}

/// What prints a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Pr {
    Nop,
    Pcpu,
    Pmem,
    Args,
    Comm,
    Fname,
    Bsdstart,
    Bsdtime,
    C,
    Class,
    Cp,
    Time,
    Times,
    Egid,
    Egroup,
    Etime,
    Etimes,
    Euid,
    Euser,
    Flag,
    Fgid,
    Fgroup,
    Fuid,
    Fuser,
    Opri,
    Lstart,
    Tid,
    Majflt,
    Minflt,
    Nice,
    Nlwp,
    Pgid,
    Pid,
    Ppid,
    Pri,
    PriApi,
    PriBar,
    PriBaz,
    PriFoo,
    Priority,
    Psr,
    Rgid,
    Rgroup,
    Rss,
    Rtprio,
    Ruid,
    Ruser,
    S,
    Sched,
    Sess,
    SgiP,
    Sgid,
    Sgroup,
    Start,
    Stime,
    Stat,
    Suid,
    Suser,
    Sz,
    Swapable,
    Size,
    Tty8,
    Tty4,
    Tpgid,
    Vsz,
    Wchan,
    Pss,
    Uss,
    /// A systemd column (sd-login).
    Sd(crate::procvals::SdField),
    Supgid,
    Supgrp,
    /// Pending for the process (status ShdPnd), as procps' `pr_sig`.
    Sig,
    /// Pending for the thread (SigPnd), `pr_tsig`.
    Tsig,
    Sigmask,
    Sigignore,
    Sigcatch,
    /// A namespace's inode (`-` where it is 0: unreadable or absent), procps' `pr_*ns`.
    NsCgroup,
    NsIpc,
    NsMnt,
    NsNet,
    NsPid,
    NsTime,
    NsUser,
    NsUts,
    /// The soft RSS limit in kB, `xx` when unlimited (procps' `pr_lim`).
    Lim,
    /// Text size in kB from the code addresses (trs, tsiz), 0 without an address space.
    Trs,
    /// The rest of the address space in kB (drs, dsiz).
    Drs,
    /// The stack's start address, 16 hex digits.
    Stackp,
    /// `%CUU`: lifetime CPU use, `%#.3f`.
    Cuu,
    /// `%CUC`: the same with dead children.
    Cuc,
    /// EIP/ESP: zero unless the task is exiting or dumping core ([`Pr::groups`]).
    Kstk,
    /// The NUMA node of the task's last CPU, through libnuma as procps asks it.
    Numa,
    /// /proc/PID/cgroup's hierarchies but the empty ones (`/`), joined by `,` (procps'
    /// `fill_cgroup_cvt`); `cgname`: what follows `:name=` in that, else all of it.
    Cgroup,
    Cgname,
    /// The container name procps finds in the cgroup file (`lxc.payload.NAME`, ...), else `-`.
    Lxc,
    /// readlink /proc/PID/exe, else `-`.
    Exe,
    /// The security module's label of the process (/proc/TGID/attr/current up to its first
    /// unprintable byte), `-` without one: procps' `pr_context` where libselinux is not used.
    Label,
    /// SCHED's numbers as procps prints them: OOM score and adjustment, autogroup id (-1
    /// outside one) and nice, login uid (`-` when unset).
    Oom,
    Oomadj,
    Agid,
    Agnice,
    Luid,
    /// /proc/PID/io's counters (0 where it cannot be read, as procps leaves them).
    Rchars,
    Wchars,
    Rops,
    Wops,
    Rbytes,
    Wbytes,
    Wcbytes,
    /// procps' test columns (`_left`, ...): fixed values cycling with the line count.
    TestLeft,
    TestLeft2,
    TestRight,
    TestRight2,
    TestUnlimited,
    TestUnlimited2,
}

/// What a column sorts by (procps `PIDS_*` sort items).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Sr {
    Noop,
    Utilization,
    VmRss,
    Cmdline,
    Cmd,
    TimeAll,
    TicsAll,
    TicsBegan,
    SchedClassStr,
    SchedClass,
    TicsUser,
    TicsUserC,
    TicsSystemC,
    IdEgid,
    IdEgroup,
    IdEuid,
    IdEuser,
    IdFgid,
    IdFgroup,
    IdFuid,
    IdFuser,
    IdRgid,
    IdRgroup,
    IdRuid,
    IdRuser,
    IdSgid,
    IdSgroup,
    IdSuid,
    IdSuser,
    IdPgrp,
    IdPid,
    IdTgid,
    IdPpid,
    IdSession,
    IdTpgid,
    TimeElapsed,
    Flags,
    Priority,
    PriorityRt,
    Processor,
    TtyName,
    FltMaj,
    FltMin,
    FltMajC,
    FltMinC,
    MemResPgs,
    MemShrPgs,
    VsizeBytes,
    Nice,
    Nlwp,
    State,
    Supgids,
    Supgroups,
    VmSize,
    VmData,
    VmExe,
    VmLib,
    VmLock,
    VmStack,
    WchanName,
    SmapPss,
    SmapPrvTotal,
    /// A systemd column (sd-login).
    Sd(crate::procvals::SdField),
    Signals,
    SigPending,
    SigBlocked,
    SigIgnore,
    SigCatch,
    RssRlim,
    AddrStackStart,
    NsCgroup,
    NsIpc,
    NsMnt,
    NsNet,
    NsPid,
    NsTime,
    NsUser,
    NsUts,
    UtilizationC,
    Kstk,
    ProcessorNode,
    Cgroup,
    Cgname,
    Lxcname,
    Exe,
    OomScore,
    OomAdj,
    AutogrpId,
    AutogrpNice,
    IdLogin,
    IoReadChars,
    IoWriteChars,
    IoReadOps,
    IoWriteOps,
    IoReadBytes,
    IoWriteBytes,
    IoWriteCbytes,
}

const BASE: u64 = Group::Base.flag();
const CRED: u64 = Group::Cred.flag();
const STAT: u64 = Group::Stat.flag();
const STATM: u64 = Group::Statm.flag();
const CMDLINE: u64 = Group::Cmdline.flag();
const SIGS: u64 = Group::Signal.flag();
const NS: u64 = Group::Ns.flag();
const FILES: u64 = Group::Files.flag();
const CGROUP: u64 = Group::Cgroup.flag();
const IO: u64 = Group::Io.flag();
const PATHS: u64 = Group::Paths.flag();
const SCHED: u64 = Group::Sched.flag();
const SECURITY: u64 = Group::Security.flag();

impl Pr {
    /// The attribute groups this column prints from (`Group::flag` bits); `bsd_c` and `unix_f`
    /// are BSD `c` and `-f`, which decide whether `args` and `comm` show the command line,
    /// `bsd_e` BSD `e`, which adds the environment to them.
    /// Every variant is listed: a new column must say what it needs, or it would print values
    /// that were never read.
    pub fn groups(self, bsd_c: bool, unix_f: bool, bsd_e: bool) -> u64 {
        // BSD e: the command columns add the environment.
        let env = if bsd_e && matches!(self, Pr::Args | Pr::Comm) {
            Group::Environ.flag()
        } else {
            0
        };
        env | self.own_groups(bsd_c, unix_f)
    }

    fn own_groups(self, bsd_c: bool, unix_f: bool) -> u64 {
        match self {
            // Nothing read, or read by the printer itself (wchan from /proc/TID/wchan, pss and
            // uss from /proc/TID/smaps_rollup, the systemd columns through sd-login).
            Pr::Nop
            | Pr::Pid
            | Pr::Tid
            | Pr::Wchan
            | Pr::Pss
            | Pr::Uss
            | Pr::Sd(_)
            | Pr::TestLeft
            | Pr::TestLeft2
            | Pr::TestRight
            | Pr::TestRight2
            | Pr::TestUnlimited
            | Pr::TestUnlimited2 => 0,
            Pr::Args if !bsd_c => BASE | CMDLINE,
            Pr::Comm if unix_f => BASE | CMDLINE,
            Pr::Args
            | Pr::Comm
            | Pr::Fname
            | Pr::Etime
            | Pr::Etimes
            | Pr::Bsdstart
            | Pr::Lstart
            | Pr::Stime
            | Pr::Start
            | Pr::Flag
            | Pr::Pgid
            | Pr::Ppid
            | Pr::S
            | Pr::Sess
            | Pr::Tpgid
            | Pr::Tty4
            | Pr::Tty8
            | Pr::Kstk => BASE,
            Pr::Egid
            | Pr::Rgid
            | Pr::Sgid
            | Pr::Fgid
            | Pr::Euid
            | Pr::Ruid
            | Pr::Suid
            | Pr::Fuid
            | Pr::Euser
            | Pr::Ruser
            | Pr::Suser
            | Pr::Fuser
            | Pr::Egroup
            | Pr::Rgroup
            | Pr::Sgroup
            | Pr::Fgroup
            | Pr::Supgid
            | Pr::Supgrp => CRED,
            Pr::Stat => BASE | STAT | STATM,
            // %CPU and TIME-like columns divide by the time since the task started.
            Pr::Pcpu | Pr::C | Pr::Cp | Pr::SgiP | Pr::Cuu | Pr::Cuc => BASE | STAT,
            Pr::Time
            | Pr::Times
            | Pr::Bsdtime
            | Pr::Nice
            | Pr::Class
            | Pr::Rtprio
            | Pr::Sched
            | Pr::Priority
            | Pr::Opri
            | Pr::Pri
            | Pr::PriApi
            | Pr::PriBar
            | Pr::PriBaz
            | Pr::PriFoo
            | Pr::Psr
            | Pr::Nlwp
            | Pr::Majflt
            | Pr::Minflt
            | Pr::Numa => STAT,
            Pr::Rss
            | Pr::Vsz
            | Pr::Sz
            | Pr::Pmem
            | Pr::Swapable
            | Pr::Size
            | Pr::Trs
            | Pr::Drs
            | Pr::Stackp => STATM,
            Pr::Sig | Pr::Tsig | Pr::Sigmask | Pr::Sigignore | Pr::Sigcatch => SIGS,
            Pr::NsCgroup
            | Pr::NsIpc
            | Pr::NsMnt
            | Pr::NsNet
            | Pr::NsPid
            | Pr::NsTime
            | Pr::NsUser
            | Pr::NsUts => NS,
            Pr::Lim => FILES,
            Pr::Cgroup | Pr::Cgname | Pr::Lxc => CGROUP,
            Pr::Exe => PATHS,
            Pr::Oom | Pr::Oomadj | Pr::Agid | Pr::Agnice | Pr::Luid => SCHED,
            Pr::Label => SECURITY,
            Pr::Rchars
            | Pr::Wchars
            | Pr::Rops
            | Pr::Wops
            | Pr::Rbytes
            | Pr::Wbytes
            | Pr::Wcbytes => IO,
        }
    }
}

impl Sr {
    /// The attribute groups this sort key reads (`Group::flag` bits); every variant listed,
    /// as for [`Pr::groups`].
    pub fn groups(self) -> u64 {
        match self {
            Sr::Noop
            | Sr::IdPid
            | Sr::IdTgid
            | Sr::WchanName
            | Sr::SmapPss
            | Sr::SmapPrvTotal
            | Sr::Sd(_) => 0,
            Sr::Cmdline => BASE | CMDLINE,
            Sr::Cmd
            | Sr::TicsBegan
            | Sr::TimeElapsed
            | Sr::IdPgrp
            | Sr::IdPpid
            | Sr::IdSession
            | Sr::IdTpgid
            | Sr::Flags
            | Sr::TtyName
            | Sr::State
            | Sr::Kstk => BASE,
            Sr::Utilization | Sr::UtilizationC => BASE | STAT,
            Sr::TimeAll
            | Sr::TicsAll
            | Sr::SchedClassStr
            | Sr::SchedClass
            | Sr::TicsUser
            | Sr::TicsUserC
            | Sr::TicsSystemC
            | Sr::Priority
            | Sr::PriorityRt
            | Sr::Processor
            | Sr::FltMaj
            | Sr::FltMin
            | Sr::FltMajC
            | Sr::FltMinC
            | Sr::Nice
            | Sr::Nlwp
            | Sr::ProcessorNode => STAT,
            Sr::VmRss
            | Sr::MemResPgs
            | Sr::MemShrPgs
            | Sr::VsizeBytes
            | Sr::VmSize
            | Sr::VmData
            | Sr::VmExe
            | Sr::VmLib
            | Sr::VmLock
            | Sr::VmStack => STATM,
            Sr::IdEgid
            | Sr::IdEgroup
            | Sr::IdEuid
            | Sr::IdEuser
            | Sr::IdFgid
            | Sr::IdFgroup
            | Sr::IdFuid
            | Sr::IdFuser
            | Sr::IdRgid
            | Sr::IdRgroup
            | Sr::IdRuid
            | Sr::IdRuser
            | Sr::IdSgid
            | Sr::IdSgroup
            | Sr::IdSuid
            | Sr::IdSuser
            | Sr::Supgids
            | Sr::Supgroups => CRED,
            Sr::Signals | Sr::SigPending | Sr::SigBlocked | Sr::SigIgnore | Sr::SigCatch => SIGS,
            Sr::AddrStackStart => STATM,
            Sr::RssRlim => FILES,
            Sr::Cgroup | Sr::Cgname | Sr::Lxcname => CGROUP,
            Sr::Exe => PATHS,
            Sr::OomScore | Sr::OomAdj | Sr::AutogrpId | Sr::AutogrpNice | Sr::IdLogin => SCHED,
            Sr::IoReadChars
            | Sr::IoWriteChars
            | Sr::IoReadOps
            | Sr::IoWriteOps
            | Sr::IoReadBytes
            | Sr::IoWriteBytes
            | Sr::IoWriteCbytes => IO,
            Sr::NsCgroup
            | Sr::NsIpc
            | Sr::NsMnt
            | Sr::NsNet
            | Sr::NsPid
            | Sr::NsTime
            | Sr::NsUser
            | Sr::NsUts => NS,
        }
    }
}

/// One format specifier.
#[derive(Debug)]
pub struct Spec {
    /// The name given to `-o`.
    pub name: &'static str,
    /// Default header.
    pub head: &'static str,
    /// Printer.
    pub pr: Pr,
    /// Sort item.
    pub sr: Sr,
    /// Default width.
    pub width: i32,
    /// [`cf`] flags.
    pub flags: u32,
}

use crate::procvals::SdField;
use cf::*;
use taskdiag_proto::Group;

macro_rules! specs {
    ($( ($name:literal, $head:literal, $pr:ident $(($pa:expr))?, $sr:ident $(($sa:expr))?, $w:literal, $fl:expr) ),* $(,)?) => {
        /// The table, sorted by name.
        pub static SPECS: &[Spec] = &[ $( Spec { name: $name, head: $head, pr: Pr::$pr $(($pa))?, sr: Sr::$sr $(($sa))?, width: $w, flags: $fl } ),* ];
    };
}

specs![
    ("%cpu", "%CPU", Pcpu, Utilization, 4, EVERY | RIGHT),
    ("%mem", "%MEM", Pmem, VmRss, 4, PROCESS | RIGHT),
    ("_left", "LLLLLLLL", TestLeft, Noop, 8, EVERY | LEFT),
    ("_left2", "L2L2L2L2", TestLeft2, Noop, 8, EVERY | LEFT),
    ("_right", "RRRRRRRRRRR", TestRight, Noop, 11, EVERY | RIGHT),
    (
        "_right2",
        "R2R2R2R2R2R",
        TestRight2,
        Noop,
        11,
        EVERY | RIGHT
    ),
    (
        "_unlimited",
        "U",
        TestUnlimited,
        Noop,
        16,
        EVERY | UNLIMITED
    ),
    (
        "_unlimited2",
        "U2",
        TestUnlimited2,
        Noop,
        16,
        EVERY | UNLIMITED
    ),
    ("acflag", "ACFLG", Nop, Noop, 5, NEEDED | RIGHT),
    ("acflg", "ACFLG", Nop, Noop, 5, NEEDED | RIGHT),
    ("addr", "ADDR", Nop, Noop, 4, NEEDED | RIGHT),
    ("addr_1", "ADDR", Nop, Noop, 1, NEEDED | LEFT),
    ("ag_id", "AGID", Agid, AutogrpId, 5, NEEDED | RIGHT),
    ("ag_nice", "AGNI", Agnice, AutogrpNice, 4, NEEDED | RIGHT),
    ("alarm", "ALARM", Nop, Noop, 5, NEEDED | RIGHT),
    ("argc", "ARGC", Nop, Noop, 4, PROCESS | RIGHT),
    ("args", "COMMAND", Args, Cmdline, 27, PROCESS | UNLIMITED),
    ("atime", "TIME", Time, TimeAll, 8, EVERY | RIGHT),
    (
        "blocked",
        "BLOCKED",
        Sigmask,
        SigBlocked,
        9,
        THREAD | SIGNAL
    ),
    ("bnd", "BND", Nop, Noop, 1, THREAD | RIGHT),
    ("bsdstart", "START", Bsdstart, TicsBegan, 6, EVERY | RIGHT),
    ("bsdtime", "TIME", Bsdtime, TicsAll, 6, EVERY | RIGHT),
    ("c", "C", C, Utilization, 2, EVERY | RIGHT),
    ("caught", "CAUGHT", Sigcatch, SigCatch, 9, THREAD | SIGNAL),
    ("cgname", "CGNAME", Cgname, Cgname, 27, PROCESS | UNLIMITED),
    ("cgroup", "CGROUP", Cgroup, Cgroup, 27, PROCESS | UNLIMITED),
    (
        "cgroupns",
        "CGROUPNS",
        NsCgroup,
        NsCgroup,
        10,
        EVERY | RIGHT
    ),
    ("class", "CLS", Class, SchedClassStr, 3, THREAD | LEFT),
    ("cls", "CLS", Class, SchedClassStr, 3, THREAD | RIGHT),
    ("cmaj_flt", "-", Nop, Noop, 1, NEEDED | RIGHT),
    ("cmd", "CMD", Args, Cmdline, 27, PROCESS | UNLIMITED),
    ("cmin_flt", "-", Nop, Noop, 1, NEEDED | RIGHT),
    ("cnswap", "-", Nop, Noop, 1, NEEDED | RIGHT),
    ("comm", "COMMAND", Comm, Cmd, 15, PROCESS | UNLIMITED),
    ("command", "COMMAND", Args, Cmdline, 27, PROCESS | UNLIMITED),
    ("context", "CONTEXT", Label, IdTgid, 31, EVERY | LEFT),
    ("cp", "CP", Cp, Utilization, 3, EVERY | RIGHT),
    ("cpu", "CPU", Nop, Noop, 3, NEEDED | RIGHT),
    ("cpuid", "CPUID", Psr, Processor, 5, THREAD | RIGHT),
    ("cputime", "TIME", Time, TimeAll, 8, EVERY | RIGHT),
    ("cputimes", "TIME", Times, TimeAll, 8, EVERY | RIGHT),
    ("ctid", "CTID", Nop, Noop, 5, EVERY | RIGHT),
    ("cuc", "%CUC", Cuc, UtilizationC, 7, NEEDED | RIGHT),
    ("cursig", "CURSIG", Nop, Noop, 6, NEEDED | RIGHT),
    ("cutime", "-", Nop, TicsUserC, 1, NEEDED | RIGHT),
    ("cuu", "%CUU", Cuu, Utilization, 6, NEEDED | RIGHT),
    ("cwd", "CWD", Nop, Noop, 3, NEEDED | LEFT),
    ("drs", "DRS", Drs, VsizeBytes, 5, PROCESS | RIGHT),
    ("dsiz", "DSIZ", Drs, VsizeBytes, 4, PROCESS | RIGHT),
    ("egid", "EGID", Egid, IdEgid, 5, EVERY | RIGHT),
    ("egroup", "EGROUP", Egroup, IdEgroup, 8, EVERY | USER),
    ("eip", "EIP", Kstk, Kstk, 16, THREAD | RIGHT),
    ("emul", "EMUL", Nop, Noop, 13, PROCESS | LEFT),
    // procps fetches nothing for the code addresses it sorts by: every key is equal.
    ("end_code", "E_CODE", Nop, Noop, 16, PROCESS | RIGHT),
    ("environ", "ENVIRONMENT", Nop, Noop, 11, PROCESS | UNLIMITED),
    ("esp", "ESP", Kstk, Kstk, 16, THREAD | RIGHT),
    ("etime", "ELAPSED", Etime, TimeElapsed, 11, EVERY | RIGHT),
    ("etimes", "ELAPSED", Etimes, TimeElapsed, 7, EVERY | RIGHT),
    ("euid", "EUID", Euid, IdEuid, 5, EVERY | RIGHT),
    ("euser", "EUSER", Euser, IdEuser, 8, EVERY | USER),
    ("exe", "EXE", Exe, Exe, 27, PROCESS | UNLIMITED),
    ("f", "F", Flag, Flags, 1, EVERY | RIGHT),
    ("fgid", "FGID", Fgid, Flags, 5, EVERY | RIGHT),
    ("fgroup", "FGROUP", Fgroup, IdFgroup, 8, EVERY | USER),
    ("flag", "F", Flag, Flags, 1, EVERY | RIGHT),
    ("flags", "F", Flag, Flags, 1, EVERY | RIGHT),
    ("fname", "COMMAND", Fname, Cmd, 8, PROCESS | LEFT),
    ("fsgid", "FSGID", Fgid, IdFgid, 5, EVERY | RIGHT),
    ("fsgroup", "FSGROUP", Fgroup, IdFgroup, 8, EVERY | USER),
    ("fsuid", "FSUID", Fuid, IdFuid, 5, EVERY | RIGHT),
    ("fsuser", "FSUSER", Fuser, IdFuser, 8, EVERY | USER),
    ("fuid", "FUID", Fuid, IdFuid, 5, EVERY | RIGHT),
    ("fuser", "FUSER", Fuser, IdFuser, 8, EVERY | USER),
    ("gid", "GID", Egid, IdEgid, 5, EVERY | RIGHT),
    ("group", "GROUP", Egroup, IdEgroup, 8, EVERY | USER),
    (
        "ignored",
        "IGNORED",
        Sigignore,
        SigIgnore,
        9,
        THREAD | SIGNAL
    ),
    ("inblk", "INBLK", Nop, Noop, 5, NEEDED | RIGHT),
    ("inblock", "INBLK", Nop, Noop, 5, NEEDED | RIGHT),
    ("intpri", "PRI", Opri, Priority, 3, THREAD | RIGHT),
    ("ipcns", "IPCNS", NsIpc, NsIpc, 10, EVERY | RIGHT),
    ("jid", "JID", Nop, Noop, 1, PROCESS | RIGHT),
    ("jobc", "JOBC", Nop, Noop, 4, NEEDED | RIGHT),
    ("ktrace", "KTRACE", Nop, Noop, 8, NEEDED | RIGHT),
    ("ktracep", "KTRACEP", Nop, Noop, 8, NEEDED | RIGHT),
    ("label", "LABEL", Label, IdTgid, 31, EVERY | LEFT),
    ("lastcpu", "C", Psr, Processor, 3, THREAD | RIGHT),
    ("lim", "LIM", Lim, RssRlim, 5, NEEDED | RIGHT),
    ("login", "LOGNAME", Nop, Noop, 8, NEEDED | LEFT),
    ("logname", "LOGNAME", Nop, Noop, 8, NEEDED | LEFT),
    ("longtname", "TTY", Tty8, TtyName, 8, PROCESS | LEFT),
    (
        "lsession",
        "SESSION",
        Sd(SdField::Session),
        Sd(SdField::Session),
        11,
        EVERY | LEFT
    ),
    ("lstart", "STARTED", Lstart, TicsBegan, 24, EVERY | RIGHT),
    ("luid", "LUID", Luid, IdLogin, 5, EVERY | RIGHT),
    ("luser", "LUSER", Nop, Noop, 8, EVERY | USER),
    ("lwp", "LWP", Tid, IdPid, 5, THREAD | PIDMAX | RIGHT),
    ("lxc", "LXC", Lxc, Lxcname, 8, EVERY | LEFT),
    ("m_drs", "DRS", Drs, VsizeBytes, 5, PROCESS | RIGHT),
    ("m_dt", "DT", Nop, Noop, 4, PROCESS | RIGHT),
    ("m_lrs", "LRS", Nop, Noop, 5, PROCESS | RIGHT),
    ("m_resident", "RES", Nop, MemResPgs, 5, PROCESS | RIGHT),
    ("m_share", "SHRD", Nop, MemShrPgs, 5, PROCESS | RIGHT),
    ("m_size", "SIZE", Size, VsizeBytes, 5, PROCESS | RIGHT),
    ("m_swap", "SWAP", Nop, Noop, 5, PROCESS | RIGHT),
    ("m_trs", "TRS", Trs, VsizeBytes, 5, PROCESS | RIGHT),
    (
        "machine",
        "MACHINE",
        Sd(SdField::Machine),
        Sd(SdField::Machine),
        31,
        EVERY | LEFT
    ),
    ("maj_flt", "MAJFL", Majflt, FltMaj, 6, NEEDED | RIGHT),
    ("majflt", "MAJFLT", Majflt, FltMaj, 6, NEEDED | RIGHT),
    ("min_flt", "MINFL", Minflt, FltMin, 6, NEEDED | RIGHT),
    ("minflt", "MINFLT", Minflt, FltMin, 6, NEEDED | RIGHT),
    ("mntns", "MNTNS", NsMnt, NsMnt, 10, EVERY | RIGHT),
    ("msgrcv", "MSGRCV", Nop, Noop, 6, NEEDED | RIGHT),
    ("msgsnd", "MSGSND", Nop, Noop, 6, NEEDED | RIGHT),
    ("mwchan", "MWCHAN", Nop, Noop, 6, THREAD | WCHAN),
    ("netns", "NETNS", NsNet, NsNet, 10, EVERY | RIGHT),
    ("ni", "NI", Nice, Nice, 3, THREAD | RIGHT),
    ("nice", "NI", Nice, Nice, 3, THREAD | RIGHT),
    ("nivcsw", "IVCSW", Nop, Noop, 5, NEEDED | RIGHT),
    ("nlwp", "NLWP", Nlwp, Nlwp, 4, PROCESS | RIGHT),
    ("nsignals", "NSIGS", Nop, Noop, 5, NEEDED | RIGHT),
    ("nsigs", "NSIGS", Nop, Noop, 5, NEEDED | RIGHT),
    ("nswap", "NSWAP", Nop, Noop, 5, NEEDED | RIGHT),
    ("numa", "NUMA", Numa, ProcessorNode, 4, NEEDED | RIGHT),
    ("nvcsw", "VCSW", Nop, Noop, 5, NEEDED | RIGHT),
    ("nwchan", "WCHAN", Nop, Noop, 6, THREAD | RIGHT),
    ("oom", "OOM", Oom, OomScore, 4, THREAD | RIGHT),
    ("oomadj", "OOMADJ", Oomadj, OomAdj, 5, THREAD | RIGHT),
    ("opri", "PRI", Opri, Priority, 3, THREAD | RIGHT),
    ("osz", "SZ", Nop, Noop, 2, PROCESS | RIGHT),
    ("oublk", "OUBLK", Nop, Noop, 5, NEEDED | RIGHT),
    ("oublock", "OUBLK", Nop, Noop, 5, NEEDED | RIGHT),
    (
        "ouid",
        "OWNER",
        Sd(SdField::OwnerUid),
        Sd(SdField::OwnerUid),
        5,
        EVERY | LEFT
    ),
    ("p_ru", "P_RU", Nop, Noop, 6, NEEDED | RIGHT),
    ("paddr", "PADDR", Nop, Noop, 6, NEEDED | RIGHT),
    ("pagein", "PAGEIN", Majflt, FltMaj, 6, NEEDED | RIGHT),
    ("pcpu", "%CPU", Pcpu, Utilization, 4, EVERY | RIGHT),
    ("pending", "PENDING", Sig, Signals, 9, EVERY | SIGNAL),
    ("pgid", "PGID", Pgid, IdPgrp, 5, PROCESS | PIDMAX | RIGHT),
    ("pgrp", "PGRP", Pgid, IdPgrp, 5, PROCESS | PIDMAX | RIGHT),
    ("pid", "PID", Pid, IdTgid, 5, PROCESS | PIDMAX | RIGHT),
    ("pidns", "PIDNS", NsPid, NsPid, 10, EVERY | RIGHT),
    ("pmem", "%MEM", Pmem, VmRss, 4, PROCESS | RIGHT),
    ("poip", "-", Nop, Noop, 1, NEEDED | RIGHT),
    ("policy", "POL", Class, SchedClassStr, 3, THREAD | LEFT),
    ("ppid", "PPID", Ppid, IdPpid, 5, PROCESS | PIDMAX | RIGHT),
    ("pri", "PRI", Pri, Priority, 3, THREAD | RIGHT),
    ("pri_api", "API", PriApi, Priority, 3, THREAD | RIGHT),
    ("pri_bar", "BAR", PriBar, Priority, 3, THREAD | RIGHT),
    ("pri_baz", "BAZ", PriBaz, Priority, 3, THREAD | RIGHT),
    ("pri_foo", "FOO", PriFoo, Priority, 3, THREAD | RIGHT),
    ("priority", "PRI", Priority, Priority, 3, THREAD | RIGHT),
    ("prmgrp", "PRMGRP", Nop, Noop, 12, PROCESS | RIGHT),
    ("prmid", "PRMID", Nop, Noop, 12, PROCESS | RIGHT),
    ("project", "PROJECT", Nop, Noop, 12, PROCESS | LEFT),
    ("projid", "PROJID", Nop, Noop, 5, PROCESS | RIGHT),
    ("pset", "PSET", Nop, Noop, 4, THREAD | RIGHT),
    ("psr", "PSR", Psr, Processor, 3, THREAD | RIGHT),
    ("pss", "PSS", Pss, SmapPss, 5, PROCESS | RIGHT),
    ("psxpri", "PPR", Nop, Noop, 3, THREAD | RIGHT),
    ("rbytes", "RBYTES", Rbytes, IoReadBytes, 5, THREAD | RIGHT),
    ("rchars", "RCHARS", Rchars, IoReadChars, 5, THREAD | RIGHT),
    ("re", "RE", Nop, Noop, 3, NEEDED | RIGHT),
    ("resident", "RES", Nop, MemResPgs, 5, PROCESS | RIGHT),
    ("rgid", "RGID", Rgid, IdRgid, 5, EVERY | RIGHT),
    ("rgroup", "RGROUP", Rgroup, IdRgroup, 8, EVERY | USER),
    ("rlink", "RLINK", Nop, Noop, 8, NEEDED | RIGHT),
    ("rops", "ROPS", Rops, IoReadOps, 5, THREAD | RIGHT),
    ("rss", "RSS", Rss, VmRss, 5, PROCESS | RIGHT),
    ("rssize", "RSS", Rss, VmRss, 5, PROCESS | RIGHT),
    ("rsz", "RSZ", Rss, VmRss, 5, PROCESS | RIGHT),
    ("rtprio", "RTPRIO", Rtprio, PriorityRt, 6, THREAD | RIGHT),
    ("ruid", "RUID", Ruid, IdRuid, 5, EVERY | RIGHT),
    ("ruser", "RUSER", Ruser, IdRuser, 8, EVERY | USER),
    ("s", "S", S, State, 1, THREAD | LEFT),
    ("sched", "SCH", Sched, SchedClass, 3, THREAD | RIGHT),
    ("scnt", "SCNT", Nop, Noop, 4, NEEDED | RIGHT),
    ("scount", "SC", Nop, Noop, 4, NEEDED | RIGHT),
    (
        "seat",
        "SEAT",
        Sd(SdField::Seat),
        Sd(SdField::Seat),
        11,
        EVERY | LEFT
    ),
    ("sess", "SESS", Sess, IdSession, 5, PROCESS | PIDMAX | RIGHT),
    (
        "session",
        "SESS",
        Sess,
        IdSession,
        5,
        PROCESS | PIDMAX | RIGHT
    ),
    ("sgi_p", "P", SgiP, State, 1, THREAD | RIGHT),
    ("sgi_rss", "RSS", Rss, VmRss, 4, PROCESS | LEFT),
    ("sgid", "SGID", Sgid, IdSgid, 5, EVERY | RIGHT),
    ("sgroup", "SGROUP", Sgroup, IdSgroup, 8, EVERY | USER),
    ("share", "-", Nop, Noop, 1, PROCESS | RIGHT),
    ("sid", "SID", Sess, IdSession, 5, PROCESS | PIDMAX | RIGHT),
    ("sig", "PENDING", Sig, Signals, 9, EVERY | SIGNAL),
    (
        "sig_block",
        "BLOCKED",
        Sigmask,
        SigBlocked,
        9,
        THREAD | SIGNAL
    ),
    (
        "sig_catch",
        "CATCHED",
        Sigcatch,
        SigCatch,
        9,
        THREAD | SIGNAL
    ),
    (
        "sig_ignore",
        "IGNORED",
        Sigignore,
        SigIgnore,
        9,
        THREAD | SIGNAL
    ),
    ("sig_pend", "SIGNAL", Sig, Signals, 9, EVERY | SIGNAL),
    ("sigcatch", "CAUGHT", Sigcatch, SigCatch, 9, THREAD | SIGNAL),
    (
        "sigignore",
        "IGNORED",
        Sigignore,
        SigIgnore,
        9,
        THREAD | SIGNAL
    ),
    (
        "sigmask",
        "BLOCKED",
        Sigmask,
        SigBlocked,
        9,
        THREAD | SIGNAL
    ),
    ("size", "SIZE", Swapable, VsizeBytes, 5, PROCESS | RIGHT),
    ("sl", "SL", Nop, Noop, 3, NEEDED | RIGHT),
    (
        "slice",
        "SLICE",
        Sd(SdField::Slice),
        Sd(SdField::Slice),
        31,
        EVERY | LEFT
    ),
    ("spid", "SPID", Tid, IdPid, 5, THREAD | PIDMAX | RIGHT),
    (
        "stackp",
        "STACKP",
        Stackp,
        AddrStackStart,
        16,
        PROCESS | RIGHT
    ),
    ("start", "STARTED", Start, TicsBegan, 8, EVERY | RIGHT),
    ("start_code", "S_CODE", Nop, Noop, 16, PROCESS | RIGHT),
    (
        "start_stack",
        "STACKP",
        Stackp,
        AddrStackStart,
        16,
        PROCESS | RIGHT
    ),
    ("start_time", "START", Stime, TicsBegan, 5, EVERY | RIGHT),
    ("stat", "STAT", Stat, State, 4, THREAD | LEFT),
    ("state", "S", S, State, 1, THREAD | LEFT),
    ("status", "STATUS", Nop, Noop, 6, NEEDED | RIGHT),
    ("stime", "STIME", Stime, TicsBegan, 5, EVERY | RIGHT),
    ("suid", "SUID", Suid, IdSuid, 5, EVERY | RIGHT),
    ("supgid", "SUPGID", Supgid, Supgids, 20, PROCESS | UNLIMITED),
    (
        "supgrp",
        "SUPGRP",
        Supgrp,
        Supgroups,
        40,
        PROCESS | UNLIMITED
    ),
    ("suser", "SUSER", Suser, IdSuser, 8, EVERY | USER),
    ("svgid", "SVGID", Sgid, IdSgid, 5, EVERY | RIGHT),
    ("svgroup", "SVGROUP", Sgroup, IdSgroup, 8, EVERY | USER),
    ("svuid", "SVUID", Suid, IdSuid, 5, EVERY | RIGHT),
    ("svuser", "SVUSER", Suser, IdSuser, 8, EVERY | USER),
    ("systime", "SYSTEM", Nop, Noop, 6, EVERY | RIGHT),
    ("sz", "SZ", Sz, VmSize, 5, PROCESS | RIGHT),
    ("taskid", "TASKID", Nop, Noop, 5, THREAD | PIDMAX | RIGHT),
    ("tdev", "TDEV", Nop, Noop, 4, NEEDED | RIGHT),
    ("tgid", "TGID", Pid, IdTgid, 5, PROCESS | PIDMAX | RIGHT),
    ("thcount", "THCNT", Nlwp, Nlwp, 5, PROCESS | RIGHT),
    ("tid", "TID", Tid, IdPid, 5, THREAD | PIDMAX | RIGHT),
    ("time", "TIME", Time, TimeAll, 8, EVERY | RIGHT),
    ("timens", "TIMENS", NsTime, NsTime, 10, EVERY | RIGHT),
    ("timeout", "TMOUT", Nop, Noop, 5, NEEDED | RIGHT),
    ("times", "TIME", Times, TimeAll, 8, EVERY | RIGHT),
    ("tmout", "TMOUT", Nop, Noop, 5, NEEDED | RIGHT),
    ("tname", "TTY", Tty8, TtyName, 8, PROCESS | LEFT),
    (
        "tpgid",
        "TPGID",
        Tpgid,
        IdTpgid,
        5,
        PROCESS | PIDMAX | RIGHT
    ),
    ("trs", "TRS", Trs, VsizeBytes, 4, PROCESS | RIGHT),
    ("trss", "TRSS", Trs, VsizeBytes, 4, PROCESS | RIGHT),
    ("tsess", "TSESS", Nop, Noop, 5, PROCESS | PIDMAX | RIGHT),
    ("tsession", "TSESS", Nop, Noop, 5, PROCESS | PIDMAX | RIGHT),
    ("tsid", "TSID", Nop, Noop, 5, PROCESS | PIDMAX | RIGHT),
    ("tsig", "PENDING", Tsig, SigPending, 9, EVERY | SIGNAL),
    ("tsiz", "TSIZ", Trs, VsizeBytes, 4, PROCESS | RIGHT),
    ("tt", "TT", Tty8, TtyName, 8, PROCESS | LEFT),
    ("tty", "TT", Tty8, TtyName, 8, PROCESS | LEFT),
    ("tty4", "TTY", Tty4, TtyName, 4, PROCESS | LEFT),
    ("tty8", "TTY", Tty8, TtyName, 8, PROCESS | LEFT),
    ("u_procp", "UPROCP", Nop, Noop, 6, NEEDED | RIGHT),
    ("ucmd", "CMD", Comm, Cmd, 15, PROCESS | UNLIMITED),
    ("ucomm", "COMMAND", Comm, Cmd, 15, PROCESS | UNLIMITED),
    ("uid", "UID", Euid, IdEuid, 5, EVERY | RIGHT),
    ("uid_hack", "UID", Euser, IdEuser, 8, EVERY | USER),
    ("umask", "UMASK", Nop, Noop, 5, NEEDED | RIGHT),
    ("uname", "USER", Euser, IdEuser, 8, EVERY | USER),
    (
        "unit",
        "UNIT",
        Sd(SdField::Unit),
        Sd(SdField::Unit),
        31,
        EVERY | LEFT
    ),
    ("upr", "UPR", Nop, Noop, 3, THREAD | RIGHT),
    ("uprocp", "UPROCP", Nop, Noop, 8, NEEDED | RIGHT),
    ("user", "USER", Euser, IdEuser, 8, EVERY | USER),
    ("userns", "USERNS", NsUser, NsUser, 10, EVERY | RIGHT),
    ("usertime", "USER", Nop, Noop, 4, EVERY | RIGHT),
    ("usrpri", "UPR", Nop, Noop, 3, THREAD | RIGHT),
    ("uss", "USS", Uss, SmapPrvTotal, 5, PROCESS | RIGHT),
    ("util", "C", C, Utilization, 2, EVERY | RIGHT),
    ("utime", "UTIME", Nop, TicsUser, 6, EVERY | RIGHT),
    ("utsns", "UTSNS", NsUts, NsUts, 10, EVERY | RIGHT),
    (
        "uunit",
        "UUNIT",
        Sd(SdField::UserUnit),
        Sd(SdField::UserUnit),
        31,
        EVERY | LEFT
    ),
    ("vm_data", "DATA", Nop, VmData, 5, PROCESS | RIGHT),
    ("vm_exe", "EXE", Nop, VmExe, 5, PROCESS | RIGHT),
    ("vm_lib", "LIB", Nop, VmLib, 5, PROCESS | RIGHT),
    ("vm_lock", "LCK", Nop, VmLock, 3, PROCESS | RIGHT),
    ("vm_stack", "STACK", Nop, VmStack, 5, PROCESS | RIGHT),
    ("vsize", "VSZ", Vsz, VsizeBytes, 6, PROCESS | RIGHT),
    ("vsz", "VSZ", Vsz, VmSize, 6, PROCESS | RIGHT),
    ("wbytes", "WBYTES", Wbytes, IoWriteBytes, 5, THREAD | RIGHT),
    (
        "wcbytes",
        "WCBYTES",
        Wcbytes,
        IoWriteCbytes,
        5,
        THREAD | RIGHT
    ),
    ("wchan", "WCHAN", Wchan, WchanName, 6, THREAD | WCHAN),
    ("wchars", "WCHARS", Wchars, IoWriteChars, 5, THREAD | RIGHT),
    ("wname", "WCHAN", Wchan, WchanName, 6, THREAD | WCHAN),
    ("wops", "WOPS", Wops, IoWriteOps, 5, THREAD | RIGHT),
    ("xstat", "XSTAT", Nop, Noop, 5, NEEDED | RIGHT),
    ("zone", "ZONE", Label, IdTgid, 31, EVERY | LEFT),
    ("zoneid", "ZONEID", Nop, Noop, 31, EVERY | RIGHT),
];

/// Looks a specifier up by name (procps uses `strcmp` order).
pub fn find(name: &[u8]) -> Option<&'static Spec> {
    SPECS
        .binary_search_by(|s| s.name.as_bytes().cmp(name))
        .ok()
        .map(|i| &SPECS[i])
}

/// Format macros (procps `macro_array`), expanded by the format parser.
pub static MACROS: &[(&str, &str)] = &[
    ("DFMT", "pid,tname,state,cputime,cmd"),
    ("DefBSD", "pid,tname,stat,bsdtime,args"),
    ("DefSysV", "pid,tname,time,cmd"),
    ("END_BSD", "state,tname,cputime,comm"),
    ("END_SYS5", "state,tname,time,command"),
    ("F5FMT", "uname,pid,ppid,c,start,tname,time,cmd"),
    ("FB_", "pid,tt,stat,time,command"),
    ("FB_j", "user,pid,ppid,pgid,sess,jobc,stat,tt,time,command"),
    (
        "FB_l",
        "uid,pid,ppid,cpu,pri,nice,vsz,rss,wchan,stat,tt,time,command",
    ),
    (
        "FB_u",
        "user,pid,pcpu,pmem,vsz,rss,tt,stat,start,time,command",
    ),
    (
        "FB_v",
        "pid,stat,time,sl,re,pagein,vsz,rss,lim,tsiz,pcpu,pmem,command",
    ),
    ("FD_", "pid,tty,time,comm"),
    ("FD_f", "user,pid,ppid,start_time,tty,time,comm"),
    ("FD_fj", "user,pid,ppid,start_time,tty,time,pgid,sid,comm"),
    ("FD_j", "pid,tty,time,pgid,sid,comm"),
    (
        "FD_l",
        "flags,state,uid,pid,ppid,priority,nice,vsz,wchan,tty,time,comm",
    ),
    (
        "FD_lj",
        "flags,state,uid,pid,ppid,priority,nice,vsz,wchan,tty,time,pgid,sid,comm",
    ),
    (
        "FL5FMT",
        "f,state,uid,pid,ppid,pcpu,pri,nice,rss,wchan,start,time,command",
    ),
    ("FLASK_context", "pid,context,command"),
    ("HP_", "pid,tty,time,comm"),
    ("HP_f", "user,pid,ppid,cpu,stime,tty,time,args"),
    (
        "HP_fl",
        "flags,state,user,pid,ppid,cpu,intpri,nice,addr,sz,wchan,stime,tty,time,args",
    ),
    (
        "HP_l",
        "flags,state,uid,pid,ppid,cpu,intpri,nice,addr,sz,wchan,tty,time,comm",
    ),
    ("J390", "pid,sid,pgrp,tname,atime,args"),
    (
        "JFMT",
        "user,pid,ppid,pgid,sess,jobc,state,tname,cputime,command",
    ),
    (
        "L5FMT",
        "f,state,uid,pid,ppid,c,pri,nice,addr,sz,wchan,tt,time,ucmd",
    ),
    (
        "LFMT",
        "uid,pid,ppid,cp,pri,nice,vsz,rss,wchan,state,tname,cputime,command",
    ),
    (
        "OL_X",
        "pid,start_stack,esp,eip,timeout,alarm,stat,tname,bsdtime,args",
    ),
    (
        "OL_j",
        "ppid,pid,pgid,sid,tname,tpgid,stat,uid,bsdtime,args",
    ),
    (
        "OL_l",
        "flags,uid,pid,ppid,priority,nice,vsz,rss,wchan,stat,tname,bsdtime,args",
    ),
    (
        "OL_m",
        "pid,tname,majflt,minflt,m_trs,m_drs,m_size,m_swap,rss,m_share,vm_lib,m_dt,args",
    ),
    (
        "OL_s",
        "uid,pid,pending,sig_block,sig_ignore,caught,stat,tname,bsdtime,args",
    ),
    (
        "OL_u",
        "user,pid,pcpu,pmem,vsz,rss,tname,stat,start_time,bsdtime,args",
    ),
    (
        "OL_v",
        "pid,tname,stat,bsdtime,maj_flt,m_trs,m_drs,rss,pmem,args",
    ),
    ("RD_", "pid,tname,state,bsdtime,comm"),
    ("RD_f", "uid,pid,ppid,start_time,tname,bsdtime,args"),
    (
        "RD_fj",
        "uid,pid,ppid,start_time,tname,bsdtime,pgid,sid,args",
    ),
    ("RD_j", "pid,tname,state,bsdtime,pgid,sid,comm"),
    (
        "RD_l",
        "flags,state,uid,pid,ppid,priority,nice,wchan,tname,bsdtime,comm",
    ),
    (
        "RD_lj",
        "flags,state,uid,pid,ppid,priority,nice,wchan,tname,bsdtime,pgid,sid,comm",
    ),
    (
        "RUSAGE",
        "minflt,majflt,nswap,inblock,oublock,msgsnd,msgrcv,nsigs,nvcsw,nivcsw",
    ),
    ("SCHED", "user,pcpu,pri,usrpri,nice,psxpri,psr,policy,pset"),
    (
        "SFMT",
        "uid,pid,cursig,sig,sigmask,sigignore,sigcatch,stat,tname,command",
    ),
    ("Std_f", "uid_hack,pid,ppid,c,stime,tname,time,cmd"),
    (
        "Std_fl",
        "f,s,uid_hack,pid,ppid,c,opri,ni,addr,sz,wchan,stime,tname,time,cmd",
    ),
    (
        "Std_l",
        "f,s,uid,pid,ppid,c,opri,ni,addr,sz,wchan,tname,time,ucmd",
    ),
    ("THREAD", "user,pcpu,pri,scnt,wchan,usertime,systime"),
    (
        "UFMT",
        "uname,pid,pcpu,pmem,vsz,rss,tt,state,start,time,command",
    ),
    (
        "VFMT",
        "pid,tt,state,time,sl,pagein,vsz,rss,pcpu,pmem,command",
    ),
];

/// AIX field descriptors (procps `aix_array`): the letter after `%`, the specifier it
/// stands for, and its header.
pub static AIX: &[(u8, &str, &str)] = &[
    (b'C', "pcpu", "%CPU"),
    (b'G', "group", "GROUP"),
    (b'P', "ppid", "PPID"),
    (b'U', "user", "USER"),
    (b'a', "args", "COMMAND"),
    (b'c', "comm", "COMMAND"),
    (b'g', "rgroup", "RGROUP"),
    (b'n', "nice", "NI"),
    (b'p', "pid", "PID"),
    (b'r', "pgid", "PGID"),
    (b't', "etime", "ELAPSED"),
    (b'u', "ruser", "RUSER"),
    (b'x', "time", "TIME"),
    (b'y', "tty", "TTY"),
    (b'z', "vsz", "VSZ"),
];

/// Short sort codes (procps `shortsort_array`).
pub static SHORT_SORT: &[(u8, &str)] = &[
    (b'C', "pcpu"),
    (b'G', "tpgid"),
    (b'J', "cstime"),
    (b'M', "maj_flt"),
    (b'N', "cmaj_flt"),
    (b'P', "ppid"),
    (b'R', "resident"),
    (b'S', "share"),
    (b'T', "start_time"),
    (b'U', "uid"),
    (b'c', "cmd"),
    (b'f', "flags"),
    (b'g', "pgrp"),
    (b'j', "cutime"),
    (b'k', "utime"),
    (b'm', "min_flt"),
    (b'n', "cmin_flt"),
    (b'o', "session"),
    (b'p', "pid"),
    (b'r', "rss"),
    (b's', "size"),
    (b't', "tty"),
    (b'u', "user"),
    (b'v', "vsize"),
    (b'y', "priority"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_for_binary_search() {
        for w in SPECS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for w in MACROS.windows(2) {
            assert!(w[0].0 < w[1].0, "{} before {}", w[0].0, w[1].0);
        }
        assert_eq!(find(b"pid").map(|s| s.head), Some("PID"));
        assert!(find(b"nope").is_none());
    }

    #[test]
    fn every_spec_says_on_which_lines_it_prints() {
        for s in SPECS {
            let m = s.flags & cf::PRINT_MASK;
            assert!(
                [cf::THREAD, cf::PROCESS, cf::EVERY, cf::NEEDED].contains(&m),
                "{}",
                s.name
            );
        }
        for (c, spec, _) in AIX {
            assert!(find(spec.as_bytes()).is_some(), "%{}", *c as char);
        }
    }

    #[test]
    fn every_macro_expands_to_known_specs() {
        for (name, list) in MACROS {
            for item in list.split(',') {
                assert!(find(item.as_bytes()).is_some(), "{name}: {item}");
            }
        }
    }
}
