//! What one caller may see: procfs's permission rules applied to taskdiag records.
//!
//! A server that answers for other processes (taskdiagd) must show each caller exactly what
//! that caller's /proc would show it. This module owns those rules and nothing else: a
//! [`Viewer`] describes the caller (kernel-verified credentials, namespaces, the options of its
//! /proc mount, its id maps), and [`Viewer::filter_task`] decides, for one decoded task carrying
//! the internal ACCESS attribute, whether the caller sees it and in which ids. Finding out who
//! the caller is (SO_PEERCRED, its /proc files) is the daemon's job; producing the records is the
//! backends'.
//!
//! The rules, from the kernel (fs/proc/base.c, kernel/ptrace.c, security/commoncap.c):
//!
//! * **hidepid** (`has_pid_permissions`): with `hidepid=noaccess|invisible`, a task is shown only
//!   to members of the mount's `gid=` group (gid 0 when the option is not given: procfs's
//!   default, which mountinfo does not print) or to callers that pass the ptrace-read check;
//!   with `hidepid=ptraceable` only to the latter. (With `noaccess` /proc lists the directory but
//!   nothing in it can be read: no record can be made, so the task is not shown.)
//! * **ptrace-read** (`__ptrace_may_access` with PTRACE_MODE_READ_FSCREDS, then
//!   `cap_ptrace_access_check`): the caller's own thread group; else the same uid as the task's
//!   real, effective and saved uids and the same gid as its three gids, or CAP_SYS_PTRACE over
//!   the task's user namespace; then, for a task with an address space that is not dumpable,
//!   CAP_SYS_PTRACE over the address space's user namespace; then the task's permitted
//!   capabilities must be a subset of the caller's effective ones within one user namespace, or
//!   the caller has CAP_SYS_PTRACE over it.
//! * **namespace links** (NS): shown only where ptrace-read passes, like readlink of
//!   /proc/PID/ns/*; otherwise withheld with `NS_F_HIDDEN`, as that readlink fails with EACCES.
//! * **code and stack addresses** (STATM's `code_start`, `code_end`, `stack_start`, stat
//!   fields 26-28): shown only where ptrace-read passes, else 1, 1 and 0 as /proc prints them.
//! * **descriptor count** (FILES): only where ptrace-read passes, else withheld with
//!   `FILES_F_FDS_HIDDEN`, as /proc/PID/fd cannot be listed; the limits are not guarded.
//! * **I/O counters, environment, executable and directories** (IO, ENVIRON, PATHS): only
//!   where ptrace-read passes, else refused with EACCES as /proc/PID/io, environ and the exe,
//!   cwd and root links are.
//! * **delay-accounting totals** (DELAY's pairs, which no /proc file shows): only to callers
//!   with CAP_NET_ADMIN, as the taskstats interface; schedstat's numbers and stat's block I/O
//!   ticks to anyone who sees the task.
//! * **wchan and syscall** (SCHED; WCHAN is the wchan alone): wchan only where ptrace-read
//!   passes, else `0` as /proc/PID/wchan prints it; syscall (ptrace-attach, a file of mode 0400) where ptrace-read
//!   passes and the caller may open the file, if Yama does not restrict attaching (else only
//!   for the caller's own thread group), else withheld.
//! * **ids** are shown as the caller's user namespace maps them (`from_kuid_munged`): an id
//!   without a mapping is the overflow id (65534).
//!
//! `ns_capable()` is followed one level deep: capabilities held in the initial user namespace
//! count everywhere, those held in another namespace count over that namespace, and the owner
//! of a direct child of the caller's namespace holds every capability there. The kernel also
//! follows deeper descendants; for those a caller may see less than its /proc shows, never
//! more. Linux security modules' own ptrace
//! policies (Yama restricts only attaching, not reading) are not modelled.

use taskdiag_bpf::PidNs;
use taskdiag_proto::task::Task;
use taskdiag_proto::AccessRec;

/// CAP_SYS_PTRACE.
const CAP_SYS_PTRACE: u32 = 19;

/// SUID_DUMP_USER: the only dumpability that does not restrict ptrace-read.
const SUID_DUMP_USER: u8 = 1;

/// The overflow id the kernel shows for an unmapped uid or gid (/proc/sys/kernel/overflowuid).
pub const OVERFLOW_ID: u32 = 65534;

/// Show flags of the groups with data /proc guards by ptrace-read (memory maps, namespace
/// links, the code and stack addresses of STATM, the descriptor count of FILES, I/O counters,
/// environment, paths, wchan and syscall; and DELAY's delay-accounting pairs, which need
/// CAP_NET_ADMIN): every task's ACCESS must be read with them and checked, whatever else the
/// viewer needs.
pub const SHOW_GUARDED: u64 = taskdiag_proto::SHOW_MAPS
    | taskdiag_proto::Group::Ns.flag()
    | taskdiag_proto::Group::Statm.flag()
    | taskdiag_proto::Group::Files.flag()
    | taskdiag_proto::Group::Io.flag()
    | taskdiag_proto::Group::Paths.flag()
    | taskdiag_proto::Group::Environ.flag()
    | taskdiag_proto::Group::Sched.flag()
    | taskdiag_proto::Group::Delay.flag()
    | taskdiag_proto::Group::Kstack.flag()
    | taskdiag_proto::Group::Wchan.flag();

/// Takes out of `t` the groups a server leaves to its client's own /proc
/// ([`crate::SHOW_SERVER_DEFERS`]), each replaced by a GROUP_ERROR with EOPNOTSUPP.
fn defer_guarded(t: &mut Task) {
    use taskdiag_proto::Group;
    for (gone, g) in [
        (t.io.take().is_some(), Group::Io),
        (t.paths.take().is_some(), Group::Paths),
        (t.environ.take().is_some(), Group::Environ),
        (t.sched.take().is_some(), Group::Sched),
        (t.security.take().is_some(), Group::Security),
        (t.kstack.take().is_some(), Group::Kstack),
        (t.wchan.take().is_some(), Group::Wchan),
    ] {
        debug_assert!(crate::SHOW_SERVER_DEFERS & g.flag() != 0);
        if gone {
            group_error(t, g, libc::EOPNOTSUPP);
        }
    }
}

/// Records that group `g` of `t` could not be given (`errno`, as /proc's).
fn group_error(t: &mut Task, g: taskdiag_proto::Group, errno: i32) {
    t.errors.push(taskdiag_proto::task::GroupError {
        group: g as u16,
        errno,
    });
}

/// The `hidepid=` option of a procfs mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HidePid {
    /// `hidepid=0` / `off`: every task is visible.
    #[default]
    Off,
    /// `hidepid=1` / `noaccess`: others' directories are listed but cannot be read.
    NoAccess,
    /// `hidepid=2` / `invisible`: others' directories are not listed.
    Invisible,
    /// `hidepid=4` / `ptraceable`: only tasks the caller may ptrace-read are listed.
    Ptraceable,
}

impl HidePid {
    /// Parses the option's value as mountinfo shows it (a name) or as mount(8) takes it (a
    /// number).
    pub fn parse(v: &str) -> Option<Self> {
        match v {
            "0" | "off" => Some(Self::Off),
            "1" | "noaccess" => Some(Self::NoAccess),
            "2" | "invisible" => Some(Self::Invisible),
            "4" | "ptraceable" => Some(Self::Ptraceable),
            _ => None,
        }
    }
}

/// The options of the caller's /proc mount that decide visibility.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcMount {
    /// `hidepid=`.
    pub hidepid: HidePid,
    /// `gid=`: members of this group (a kernel gid) are exempt from hidepid (not from
    /// `ptraceable`). `None`: the option is not shown, which means gid 0 (see
    /// [`ProcMount::exempt_gid`]).
    pub gid: Option<u32>,
}

impl ProcMount {
    /// The group exempt from `hidepid=noaccess|invisible`: `gid=`, or 0 without it (procfs
    /// keeps gid 0 as the default and exempts its members too; `in_group_p(pid_gid)` is
    /// checked unconditionally).
    pub fn exempt_gid(&self) -> u32 {
        self.gid.unwrap_or(0)
    }

    /// Parses a procfs mount's super options as /proc/PID/mountinfo prints them, e.g.
    /// `rw,hidepid=invisible,gid=27`. Unknown options are ignored; `None` if a known one has a
    /// value that does not parse.
    pub fn parse_options(opts: &str) -> Option<Self> {
        let (hidepid, gid) = taskdiag_procfs::parse::proc_mount_options(opts.as_bytes()).ok()?;
        let hidepid = match hidepid {
            Some(v) => HidePid::parse(std::str::from_utf8(v).ok()?)?,
            None => HidePid::Off,
        };
        Some(ProcMount { hidepid, gid })
    }
}

/// A uid_map or gid_map: `(inside, outside, count)` ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdMap {
    ranges: Vec<(u32, u32, u32)>,
}

impl IdMap {
    /// Parses /proc/PID/uid_map or gid_map text ("inside outside count" per line). `None` if a
    /// line does not parse.
    pub fn parse(text: &str) -> Option<Self> {
        let ranges = taskdiag_procfs::parse::parse_id_map(text.as_bytes()).ok()?;
        Some(IdMap {
            ranges: ranges
                .iter()
                .map(|r| (r.inside, r.outside, r.count))
                .collect(),
        })
    }

    /// Whether the map is the initial namespace's identity map (`0 0 4294967295`).
    pub fn is_identity(&self) -> bool {
        self.ranges == [(0, 0, u32::MAX)]
    }

    /// The id `kid` (a kernel id) as seen inside, or [`OVERFLOW_ID`].
    pub fn map(&self, kid: u32) -> u32 {
        for &(inside, outside, count) in &self.ranges {
            if kid >= outside && (kid - outside) < count {
                return inside + (kid - outside);
            }
        }
        OVERFLOW_ID
    }
}

/// The caller a dump is made for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Viewer {
    /// The caller's thread-group id in the server's pid namespace (a process may always read
    /// itself).
    pub tgid: u32,
    /// Start time (ns since boot) of the caller's thread-group leader and its exec count
    /// (`self_exec_id`), as identified: with `tgid`, they name the caller's process and
    /// program image. A task is the caller's own only if all three match, so a reused pid or
    /// a program the caller executed since (a set-user-ID one, say) is not.
    pub tg_start_ns: u64,
    /// See [`Viewer::tg_start_ns`].
    pub exec_id: u64,
    /// The caller's uid as the kernel knows it (SO_PEERCRED: the effective uid, which is the
    /// filesystem uid procfs checks unless the caller changed that one alone).
    pub uid: u32,
    /// The caller's gid likewise.
    pub gid: u32,
    /// The caller's supplementary groups (kernel gids).
    pub groups: Vec<u32>,
    /// The caller's effective capabilities.
    pub cap_effective: u64,
    /// Inode number of the caller's user namespace.
    pub userns: u32,
    /// Whether that is the initial user namespace.
    pub init_userns: bool,
    /// The caller's pid namespace, when it is not the server's.
    pub pidns: Option<PidNs>,
    /// The caller's /proc options.
    pub proc_mount: ProcMount,
    /// The caller's root directory as the server's paths name it, when it is not the
    /// server's (a caller in a chroot): file names in memory maps under it are shown relative
    /// to it, as the caller's /proc/PID/maps shows them (d_path() from the reader's root).
    pub root: Option<Vec<u8>>,
    /// The server could not find the caller's root directory (its programs lack `task_root`):
    /// paths and map names cannot be put in the caller's terms, so the caller reads PATHS and
    /// VMA from its own /proc (a GROUP_ERROR with EOPNOTSUPP).
    pub root_unknown: bool,
    /// The caller's uid map (`None`: identity).
    pub uid_map: Option<IdMap>,
    /// The caller's gid map (`None`: identity).
    pub gid_map: Option<IdMap>,
    /// The inode of the caller's cgroup namespace when it is not the server's own (0 when
    /// unknown): the paths the server's /proc shows are then not the caller's.
    pub foreign_cgroupns: Option<u32>,
    /// What to add to the server's start times for this caller (ns): the boottime offset of
    /// the caller's time namespace less the server's (its /proc adds its own; 0 where both
    /// are in the same namespace). Exact to the clock tick where the difference is a whole
    /// number of ticks (offsets are set in seconds and nanoseconds).
    pub boottime_shift_ns: i64,
    /// Whether ptrace-attach is decided as ptrace-read is: no Yama, or Yama's ptrace_scope 0
    /// (`/proc/sys/kernel/yama/ptrace_scope`). Otherwise Yama limits attaching to descendants,
    /// declared tracers or CAP_SYS_PTRACE, which is not modelled: only the caller's own thread
    /// group counts (it passes every scope but 3).
    pub attach_as_read: bool,
}

impl Viewer {
    /// Whether deciding visibility needs each task's ACCESS attribute.
    pub fn needs_access(&self) -> bool {
        self.proc_mount.hidepid != HidePid::Off || self.pidns.is_some()
    }

    /// Whether records must be rewritten for this caller at all (else they pass unchanged).
    pub fn rewrites(&self) -> bool {
        self.needs_access()
            || self.uid_map.is_some()
            || self.gid_map.is_some()
            || self.boottime_shift_ns != 0
    }

    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// `ns_capable(ns, cap)` (`cap_capable()`) for the user namespace of a task's credentials
    /// (`owner` and `parent` describe it) or of its address space (`parent` 0: unknown): the
    /// capability held in that namespace or an ancestor (known: the caller's own and the
    /// initial one), or ownership of a child of the caller's namespace, which grants every
    /// capability there. See the module doc for the one simplification.
    fn capable_over(&self, cap: u32, userns: u32, owner: u32, parent: u32) -> bool {
        let has = self.cap_effective & (1u64 << cap) != 0;
        (has && (self.init_userns || self.userns == userns))
            || (parent != 0 && parent == self.userns && owner == self.uid)
    }

    fn capable_over_task(&self, cap: u32, a: &AccessRec) -> bool {
        self.capable_over(cap, a.userns, a.userns_owner, a.userns_parent)
    }

    fn capable_over_mm(&self, cap: u32, a: &AccessRec) -> bool {
        if a.mm_userns == a.userns {
            return self.capable_over_task(cap, a);
        }
        self.capable_over(cap, a.mm_userns, 0, 0)
    }

    /// `ptrace_may_access(task, PTRACE_MODE_READ_FSCREDS)`.
    pub fn may_ptrace_read(&self, a: &AccessRec) -> bool {
        if self.is_own(a) {
            return true;
        }
        let same_ids = [a.uid, a.euid, a.suid].iter().all(|&u| u == self.uid)
            && [a.gid, a.egid, a.sgid].iter().all(|&g| g == self.gid);
        if !same_ids && !self.capable_over_task(CAP_SYS_PTRACE, a) {
            return false;
        }
        if a.has_mm != 0 && a.dumpable != SUID_DUMP_USER && !self.capable_over_mm(CAP_SYS_PTRACE, a)
        {
            return false;
        }
        // cap_ptrace_access_check(): with FSCREDS the caller's effective set counts.
        if self.userns == a.userns && a.cap_permitted & !self.cap_effective == 0 {
            return true;
        }
        self.capable_over_task(CAP_SYS_PTRACE, a)
    }

    /// Whether the caller may open a /proc/PID file of mode 0400 (io, environ): its owner is
    /// the task's effective uid when the task is dumpable, else root (`task_dump_owner()`);
    /// the caller must be that uid or hold CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH, counted
    /// here only in the initial user namespace (elsewhere the inode's ids would have to map
    /// into the caller's namespace: a caller may see less than its /proc shows, never more).
    pub fn may_open_owner_only(&self, a: &AccessRec) -> bool {
        const CAP_DAC_OVERRIDE: u32 = 1;
        const CAP_DAC_READ_SEARCH: u32 = 2;
        // A non-dumpable task's files belong to root of its address space's user namespace:
        // global root only where that is the initial namespace, which a caller there knows as
        // its own; elsewhere its root's uid is not known here, so only the capabilities count.
        let owner = if a.dumpable == SUID_DUMP_USER {
            Some(a.euid)
        } else if self.init_userns && (a.mm_userns == self.userns || a.mm_userns == 0) {
            Some(0)
        } else {
            None
        };
        let dac = (1u64 << CAP_DAC_OVERRIDE) | (1u64 << CAP_DAC_READ_SEARCH);
        owner == Some(self.uid) || (self.init_userns && self.cap_effective & dac != 0)
    }

    /// Whether the task is in the caller's own thread group, the caller being the process and
    /// program image it was identified as (`same_thread_group(task, current)`).
    pub fn is_own(&self, a: &AccessRec) -> bool {
        self.tgid != 0
            && a.reader_tgid == self.tgid
            && a.tg_start_ns == self.tg_start_ns
            && a.exec_id == self.exec_id
    }

    /// Whether the caller is exempt from the mount's hidepid by group membership (never under
    /// `ptraceable`).
    fn exempt(&self) -> bool {
        match self.proc_mount.hidepid {
            HidePid::Off => true,
            HidePid::Ptraceable => false,
            HidePid::NoAccess | HidePid::Invisible => self.in_group(self.proc_mount.exempt_gid()),
        }
    }

    /// `has_pid_permissions(fs_info, task, HIDEPID_NO_ACCESS)`: whether the caller may read
    /// the task's /proc directory at all.
    pub fn may_see(&self, a: &AccessRec) -> bool {
        self.exempt() || self.may_ptrace_read(a)
    }

    /// Applies the caller's view to one task: `false` if the caller may not see it; else the
    /// task is rewritten in place (ids mapped into the caller's user namespace, the internal
    /// ACCESS attribute removed).
    ///
    /// A task without ACCESS (one the BPF iterator could not show, read from /proc instead:
    /// pid 1 on some hosts) is shown under hidepid only to members of the exempt group: nothing
    /// is known of what the ptrace-read check would decide, and where the iterator hides init
    /// the kernel refuses to let anyone ptrace-read it, CAP_SYS_PTRACE and root included (seen
    /// on firecracker guests), so its /proc hides it from every caller but those.
    pub fn filter_task(&self, t: &mut Task) -> bool {
        let access = t.access.take();
        if self.proc_mount.hidepid != HidePid::Off {
            let visible = match &access {
                Some(a) => self.may_see(a),
                None => self.exempt(),
            };
            if !visible {
                return false;
            }
        }
        // Memory maps: /proc/PID/maps needs ptrace-read (mm_access()), decided on the task as
        // it is when its maps are read: the record the map walk took then (VMA_ACCESS), and
        // the task walk's, whose image the library checked it to be. A task without both (one
        // /proc had to supply) is not readable by anyone here.
        let ptrace_read = access.as_ref().is_some_and(|a| self.may_ptrace_read(a));
        let vma_access = t.vma_access.take();
        let maps_ok = ptrace_read && vma_access.as_ref().is_some_and(|m| self.may_ptrace_read(m));
        if t.vmas.is_some() && !maps_ok {
            t.vmas = None;
            group_error(t, taskdiag_proto::Group::Vma, libc::EACCES);
        }
        // Every guarded field below is decided on the same ACCESS, taken with the record, if
        // the task was still in that state once its groups were read (no exec, no change of
        // credentials or dumpability meanwhile: ACCESS_F_CHANGED, ACCESS_F_EXEC). Otherwise
        // the groups the client can read from its own /proc are left to it (EOPNOTSUPP, as for
        // a group the programs could not write), and the other guarded fields withheld.
        let settled = access.as_ref().is_some_and(|a| {
            a.flags & (taskdiag_proto::ACCESS_F_CHANGED | taskdiag_proto::ACCESS_F_EXEC) == 0
        });
        if access.is_some() && !settled {
            defer_guarded(t);
        }
        let readable = settled && ptrace_read;
        if !readable {
            // Namespace links: readlink /proc/PID/ns/* needs ptrace-read (proc_ns_get_link()).
            // The ids of nested pid namespaces are status lines, readable by anyone who sees
            // the task.
            if let Some(n) = &mut t.ns {
                for i in n.inodes_mut() {
                    *i = 0;
                }
                n.rec.flags |= taskdiag_proto::NS_F_HIDDEN;
            }
            // The code and stack addresses /proc/PID/stat shows only where ptrace-read passes
            // (do_task_stat()'s `permitted`), else 1, 1 and 0.
            if let Some(m) = &mut t.statm {
                (m.code_start, m.code_end, m.stack_start) = (1, 1, 0);
            }
            // The descriptor count: /proc/PID/fd can be listed only where ptrace-read passes.
            if let Some(f) = &mut t.files {
                f.rec.fds = 0;
                f.rec.flags |= taskdiag_proto::FILES_F_FDS_HIDDEN;
            }
            // /proc/PID/io and environ refuse to be read, the exe, cwd and root links to be
            // followed (EACCES).
            if t.io.take().is_some() {
                group_error(t, taskdiag_proto::Group::Io, libc::EACCES);
            }
            if t.environ.take().is_some() {
                group_error(t, taskdiag_proto::Group::Environ, libc::EACCES);
            }
            if let Some(p) = &mut t.paths {
                for l in [&mut p.exe, &mut p.cwd, &mut p.root] {
                    *l = Err(libc::EACCES as u8);
                }
            }
            // /proc/PID/wchan prints 0 (proc_pid_wchan()), /proc/PID/syscall is refused.
            if let Some(s) = &mut t.sched {
                s.wchan = b"0".to_vec();
                s.syscall.clear();
                s.rec.flags |= taskdiag_proto::SCHED_F_SYSCALL_HIDDEN;
            }
            if let Some(w) = &mut t.wchan {
                *w = b"0".to_vec();
            }
        }
        // /proc/PID/io and environ are also mode 0400, owned by the task's owner
        // (task_dump_owner()): their open needs that uid or a capability to override file
        // permissions.
        if readable
            && access
                .as_ref()
                .is_some_and(|a| !self.may_open_owner_only(a))
        {
            for (gone, g) in [
                (t.io.take().is_some(), taskdiag_proto::Group::Io),
                (t.environ.take().is_some(), taskdiag_proto::Group::Environ),
            ] {
                if gone {
                    group_error(t, g, libc::EACCES);
                }
            }
        }
        // The delay-accounting pairs are in no /proc file; the taskstats interface gives them
        // only to CAP_NET_ADMIN in the initial user namespace (GENL_ADMIN_PERM).
        if let Some(d) = &mut t.delay {
            const CAP_NET_ADMIN: u32 = 12;
            if !(self.init_userns && self.cap_effective & (1u64 << CAP_NET_ADMIN) != 0) {
                *d = d.without_counters();
            }
        }
        // /proc/PID/syscall (mode 0400, like io) needs ptrace-attach: ptrace-read's checks
        // unless Yama restricts attaching further; then only the task's own thread group.
        if let (Some(s), Some(a)) = (&mut t.sched, &access) {
            let attach =
                self.is_own(a) || (self.attach_as_read && readable && self.may_open_owner_only(a));
            if !attach {
                s.syscall.clear();
                s.rec.flags |= taskdiag_proto::SCHED_F_SYSCALL_HIDDEN;
            }
        }
        // /proc/PID/stack: only to a reader with CAP_SYS_ADMIN in the initial user namespace
        // (proc_pid_stack()), and then as syscall (lock_trace(): ptrace-attach).
        if t.kstack.is_some() {
            const CAP_SYS_ADMIN: u32 = 21;
            let admin = self.init_userns && self.cap_effective & (1u64 << CAP_SYS_ADMIN) != 0;
            let attach = access.as_ref().is_some_and(|a| {
                self.is_own(a) || (self.attach_as_read && readable && self.may_open_owner_only(a))
            });
            if !(admin && attach) {
                t.kstack = None;
                group_error(t, taskdiag_proto::Group::Kstack, libc::EACCES);
            }
        }
        if self.root_unknown {
            if t.paths.take().is_some() {
                group_error(t, taskdiag_proto::Group::Paths, libc::EOPNOTSUPP);
            }
            if t.vmas.take().is_some() {
                group_error(t, taskdiag_proto::Group::Vma, libc::EOPNOTSUPP);
            }
        }
        if let (Some(root), Some(vmas)) = (&self.root, &mut t.vmas) {
            for v in vmas {
                if let Some(rest) = under(&v.name, root) {
                    v.name = rest.to_vec();
                }
            }
        }
        // The paths as readlink shows them to the caller: relative to its root (d_path()).
        if let (Some(root), Some(p)) = (&self.root, &mut t.paths) {
            for l in [&mut p.exe, &mut p.cwd, &mut p.root].into_iter().flatten() {
                if l == root {
                    *l = b"/".to_vec();
                } else if let Some(rest) = l.strip_prefix(&root[..]).filter(|r| r.starts_with(b"/"))
                {
                    *l = rest.to_vec();
                }
            }
        }
        // Start times as the caller's /proc shows them, in its time namespace.
        if let Some(b) = &mut t.base {
            b.rec.start_time_ns = b
                .rec
                .start_time_ns
                .wrapping_add_signed(self.boottime_shift_ns);
        }
        if let Some(c) = &mut t.cred {
            if let Some(m) = &self.uid_map {
                let r = &mut c.rec;
                for u in [&mut r.uid, &mut r.euid, &mut r.suid, &mut r.fsuid] {
                    *u = m.map(*u);
                }
            }
            if let Some(m) = &self.gid_map {
                let r = &mut c.rec;
                for g in [&mut r.gid, &mut r.egid, &mut r.sgid, &mut r.fsgid] {
                    *g = m.map(*g);
                }
                for g in &mut c.groups {
                    *g = m.map(*g);
                }
            }
        }
        true
    }
}

/// The part of `name` (a mapping's name as /proc/PID/maps prints it) below directory `root`
/// (a path as d_path() prints it, unescaped), with its leading `/`; `None` if it is not below.
fn under<'a>(name: &'a [u8], root: &[u8]) -> Option<&'a [u8]> {
    // Names escape a newline as \012 (seq_path()): so must the prefix.
    let root = crate::vma_walk::escape(root);
    let rest = name.strip_prefix(&root[..])?;
    rest.starts_with(b"/").then_some(rest)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn user(uid: u32) -> Viewer {
        Viewer {
            tgid: 100,
            uid,
            gid: uid,
            userns: 1,
            init_userns: true,
            proc_mount: ProcMount {
                hidepid: HidePid::Invisible,
                gid: None,
            },
            ..Viewer::default()
        }
    }

    /// The ACCESS record of a plain, dumpable task whose every id is `uid`, in user namespace 1.
    pub(crate) fn task(uid: u32) -> AccessRec {
        AccessRec {
            reader_tgid: 200,
            uid,
            euid: uid,
            suid: uid,
            gid: uid,
            egid: uid,
            sgid: uid,
            userns: 1,
            mm_userns: 1,
            has_mm: 1,
            dumpable: SUID_DUMP_USER,
            ..AccessRec::default()
        }
    }

    #[test]
    fn same_user_dumpable_task_without_capabilities_is_readable() {
        assert!(user(1000).may_ptrace_read(&task(1000)));
        assert!(!user(1000).may_ptrace_read(&task(1001)));
    }

    #[test]
    fn every_one_of_the_three_uids_and_gids_must_match() {
        let v = user(1000);
        for i in 0..6 {
            let mut a = task(1000);
            let f = [
                &mut a.uid,
                &mut a.euid,
                &mut a.suid,
                &mut a.gid,
                &mut a.egid,
                &mut a.sgid,
            ];
            *f.into_iter().nth(i).unwrap() = 0;
            assert!(!v.may_ptrace_read(&a), "field {i}");
        }
    }

    #[test]
    fn non_dumpable_or_capable_tasks_need_cap_sys_ptrace() {
        let v = user(1000);
        let mut a = task(1000);
        a.dumpable = 0;
        assert!(!v.may_ptrace_read(&a));
        // A kernel thread has no mm: dumpability does not apply, but its capabilities do.
        a.has_mm = 0;
        assert!(v.may_ptrace_read(&a));
        a.cap_permitted = 1 << 12;
        assert!(!v.may_ptrace_read(&a));
        let mut root = user(0);
        root.cap_effective = 1 << CAP_SYS_PTRACE;
        let mut b = task(1000);
        b.dumpable = 2;
        assert!(root.may_ptrace_read(&b));
    }

    #[test]
    fn own_thread_group_is_always_readable() {
        let v = user(1000);
        let mut a = task(0);
        a.dumpable = 0;
        a.cap_permitted = u64::MAX;
        a.reader_tgid = v.tgid;
        assert!(v.may_ptrace_read(&a));
        // The same pid, but another process (the caller's pid reused) or another program
        // image (the caller executed a set-user-ID program since it was identified).
        let mut reused = a;
        reused.tg_start_ns += 1;
        assert!(!v.may_ptrace_read(&reused));
        let mut exec = a;
        exec.exec_id += 1;
        assert!(!v.may_ptrace_read(&exec));
    }

    #[test]
    fn namespace_links_need_ptrace_read_and_the_ids_do_not() {
        use taskdiag_proto::task::{Ns, Task};
        use taskdiag_proto::{NsIdsRec, NsRec, NS_F_HIDDEN};
        let v = Viewer {
            proc_mount: ProcMount::default(),
            ..user(1000)
        };
        let t = |access| Task {
            pid: 7,
            tgid: 7,
            ns: Some(Ns {
                rec: NsRec {
                    pid: 4026531836,
                    net: 4026531840,
                    levels: 1,
                    ..NsRec::default()
                },
                ids: vec![NsIdsRec {
                    pid: 7,
                    tgid: 7,
                    pgid: 7,
                    sid: 1,
                }],
            }),
            access,
            ..Task::default()
        };
        let mut mine = t(Some(task(1000)));
        assert!(v.filter_task(&mut mine));
        let n = mine.ns.unwrap();
        assert_eq!((n.rec.net, n.rec.flags), (4026531840, 0));
        for other in [Some(task(0)), None] {
            let mut theirs = t(other);
            assert!(v.filter_task(&mut theirs));
            let n = theirs.ns.unwrap();
            assert_eq!(n.inodes(), [0; 10]);
            assert_eq!(n.rec.flags, NS_F_HIDDEN);
            assert_eq!(n.ids[0].sid, 1, "the ids are status lines, not guarded");
        }
    }

    #[test]
    fn memory_maps_are_checked_against_the_task_as_its_maps_were_read() {
        use taskdiag_proto::task::{Task, Vma};
        let v = Viewer {
            proc_mount: ProcMount::default(),
            ..user(1000)
        };
        let t = |access, vma_access| Task {
            pid: 7,
            tgid: 7,
            vmas: Some(vec![Vma::default()]),
            access,
            vma_access,
            ..Task::default()
        };
        let mine = task(1000);
        let mut setuid = task(1000);
        setuid.euid = 0;
        setuid.suid = 0;
        setuid.dumpable = 0;
        let errno = |t: &Task| {
            let vma = taskdiag_proto::Group::Vma as u16;
            t.errors.iter().find(|e| e.group == vma).map(|e| e.errno)
        };
        // Readable when it was listed and when its maps were read: shown, records removed.
        let mut ok = t(Some(mine), Some(mine));
        assert!(v.filter_task(&mut ok));
        assert!(ok.vmas.is_some() && ok.access.is_none() && ok.vma_access.is_none());
        // It became a set-user-ID program's before its maps were read: refused.
        let mut raced = t(Some(mine), Some(setuid));
        assert!(v.filter_task(&mut raced));
        assert_eq!(
            (raced.vmas.is_none(), errno(&raced)),
            (true, Some(libc::EACCES))
        );
        // No record of the moment the maps were read: refused.
        let mut none = t(Some(mine), None);
        assert!(v.filter_task(&mut none));
        assert!(none.vmas.is_none());
    }

    /// A task that executed a program, changed credentials or dumpability while its groups
    /// were read (or was executing one): nothing is decided on its ACCESS. The groups the
    /// client can read from its own /proc are left to it, the other guarded fields withheld,
    /// though the caller could read the task as ACCESS first described it.
    #[test]
    fn a_task_that_changed_while_it_was_read_is_left_to_the_client() {
        use taskdiag_proto::task::{Ns, Task};
        use taskdiag_proto::Group;
        use taskdiag_proto::IoRec;
        let v = user(1000);
        for flag in [
            taskdiag_proto::ACCESS_F_CHANGED,
            taskdiag_proto::ACCESS_F_EXEC,
            0,
        ] {
            let mut a = task(1000);
            a.flags = flag;
            let mut t = Task {
                pid: 7,
                tgid: 7,
                io: Some(IoRec::default()),
                environ: Some(b"A=1".to_vec()),
                ns: Some(Ns::default()),
                access: Some(a),
                ..Task::default()
            };
            assert!(v.filter_task(&mut t));
            let errno = |g: Group| {
                t.errors
                    .iter()
                    .find(|e| e.group == g as u16)
                    .map(|e| e.errno)
            };
            let hidden =
                t.ns.as_ref()
                    .is_some_and(|n| n.rec.flags & taskdiag_proto::NS_F_HIDDEN != 0);
            if flag == 0 {
                assert!(t.io.is_some() && t.environ.is_some() && !hidden, "{t:?}");
                assert!(t.errors.is_empty(), "{t:?}");
            } else {
                assert!(t.io.is_none() && t.environ.is_none() && hidden, "{t:?}");
                assert_eq!(errno(Group::Io), Some(libc::EOPNOTSUPP));
                assert_eq!(errno(Group::Environ), Some(libc::EOPNOTSUPP));
            }
        }
    }

    #[test]
    fn another_user_namespace_blocks_the_capability_subset_rule() {
        let mut v = user(1000);
        v.userns = 2;
        v.init_userns = false;
        assert!(!v.may_ptrace_read(&task(1000)));
    }

    #[test]
    fn hidepid_modes_and_the_gid_exemption() {
        let mut v = user(1000);
        let other = task(1001);
        assert!(!v.may_see(&other));
        v.proc_mount.gid = Some(50);
        assert!(!v.may_see(&other));
        v.groups = vec![50];
        assert!(v.may_see(&other));
        v.proc_mount.hidepid = HidePid::Ptraceable;
        assert!(!v.may_see(&other), "ptraceable ignores gid=");
        v.proc_mount.hidepid = HidePid::Off;
        assert!(v.may_see(&other));
    }

    #[test]
    fn without_gid_option_group_root_is_exempt() {
        let mut v = user(1000);
        let other = task(1001);
        assert_eq!(v.proc_mount.gid, None);
        assert!(!v.may_see(&other));
        v.groups = vec![0];
        assert!(v.may_see(&other), "procfs's default gid= is 0");
        v.proc_mount.hidepid = HidePid::Ptraceable;
        assert!(!v.may_see(&other));
        v.proc_mount.hidepid = HidePid::Invisible;
        v.groups = vec![];
        v.gid = 0;
        assert!(v.may_see(&other), "the caller's own gid counts too");
    }

    #[test]
    fn a_task_without_access_is_shown_only_to_the_exempt_group() {
        use taskdiag_proto::task::Task;
        let t = || Task {
            pid: 1,
            tgid: 1,
            ..Task::default()
        };
        // Every capability, but not in group 0.
        let mut v = user(1000);
        v.cap_effective = u64::MAX;
        assert!(!v.filter_task(&mut t()), "not even to CAP_SYS_PTRACE");
        v.proc_mount.gid = Some(50);
        v.groups = vec![50];
        assert!(v.filter_task(&mut t()));
        v.proc_mount.hidepid = HidePid::Ptraceable;
        assert!(!v.filter_task(&mut t()));
        v.proc_mount.hidepid = HidePid::Off;
        assert!(v.filter_task(&mut t()));
    }

    #[test]
    fn io_environ_and_paths_need_ptrace_read_and_paths_follow_the_callers_root() {
        use taskdiag_proto::task::{GroupError, Paths, Task};
        use taskdiag_proto::{Group, IoRec};
        let v = Viewer {
            proc_mount: ProcMount::default(),
            root: Some(b"/srv/jail".to_vec()),
            ..user(1000)
        };
        let t = |access| Task {
            pid: 7,
            tgid: 7,
            io: Some(IoRec {
                wchar: 9,
                ..IoRec::default()
            }),
            environ: Some(b"A=1\0".to_vec()),
            paths: Some(Paths {
                exe: Ok(b"/srv/jail/bin/x (deleted)".to_vec()),
                cwd: Ok(b"/srv/jail".to_vec()),
                root: Ok(b"/srv/jailbreak".to_vec()),
            }),
            access,
            ..Task::default()
        };
        let mut mine = t(Some(task(1000)));
        assert!(v.filter_task(&mut mine));
        assert_eq!(mine.io.map(|i| i.wchar), Some(9));
        assert_eq!(mine.environ.as_deref(), Some(&b"A=1\0"[..]));
        let p = mine.paths.unwrap();
        assert_eq!(p.exe.as_deref(), Ok(&b"/bin/x (deleted)"[..]));
        assert_eq!(p.cwd.as_deref(), Ok(&b"/"[..]));
        assert_eq!(
            p.root.as_deref(),
            Ok(&b"/srv/jailbreak"[..]),
            "not under the root"
        );
        assert!(mine.errors.is_empty());
        for other in [Some(task(0)), None] {
            let mut theirs = t(other);
            assert!(v.filter_task(&mut theirs));
            assert!(theirs.io.is_none() && theirs.environ.is_none());
            let refused = |g: Group| GroupError {
                group: g as u16,
                errno: libc::EACCES,
            };
            assert_eq!(theirs.errors, [refused(Group::Io), refused(Group::Environ)]);
            let p = theirs.paths.unwrap();
            let e = Err(libc::EACCES as u8);
            assert_eq!((p.exe, p.cwd, p.root), (e.clone(), e.clone(), e));
        }
    }

    #[test]
    fn owner_only_files_follow_the_task_dump_owner() {
        let root = Viewer {
            cap_effective: 1 << CAP_SYS_PTRACE,
            ..user(0)
        };
        let mut nondumpable = task(1000);
        nondumpable.dumpable = 0;
        // Its mm in the initial user namespace: owned by root.
        nondumpable.mm_userns = root.userns;
        assert!(root.may_open_owner_only(&nondumpable));
        assert!(!user(1000).may_open_owner_only(&nondumpable));
        // In a child user namespace: owned by that namespace's root, not ours.
        nondumpable.mm_userns = root.userns + 1;
        assert!(!root.may_open_owner_only(&nondumpable));
        let dac = Viewer {
            cap_effective: 1 << 2,
            ..user(0)
        };
        assert!(dac.may_open_owner_only(&nondumpable));
        // Dumpable: its effective uid.
        assert!(user(1000).may_open_owner_only(&task(1000)));
        assert!(!user(1001).may_open_owner_only(&task(1000)));
    }

    #[test]
    fn names_under_the_callers_root_are_shown_from_it() {
        assert_eq!(
            under(b"/srv/croot/usr/bin/x", b"/srv/croot"),
            Some(&b"/usr/bin/x"[..])
        );
        assert_eq!(
            under(b"/srv/croot/a (deleted)", b"/srv/croot"),
            Some(&b"/a (deleted)"[..])
        );
        // Another directory that starts alike, the root itself, outside it, not a file.
        assert_eq!(under(b"/srv/crootx/a", b"/srv/croot"), None);
        assert_eq!(under(b"/srv/croot", b"/srv/croot"), None);
        assert_eq!(under(b"/usr/lib/libc.so", b"/srv/croot"), None);
        assert_eq!(under(b"[heap]", b"/srv/croot"), None);
        assert_eq!(under(b"/a\\012b/x", b"/a\nb"), Some(&b"/x"[..]));
    }

    #[test]
    fn mount_options_and_id_maps_parse() {
        let m = ProcMount::parse_options("rw,nosuid,hidepid=invisible,gid=27").unwrap();
        assert_eq!(m.hidepid, HidePid::Invisible);
        assert_eq!(m.gid, Some(27));
        assert_eq!(
            ProcMount::parse_options("rw").unwrap(),
            ProcMount::default()
        );
        assert_eq!(ProcMount::parse_options("hidepid=7"), None);
        let id = IdMap::parse("         0          0 4294967295\n").unwrap();
        assert!(id.is_identity());
        let m = IdMap::parse("0 1000 1\n1 100000 65536\n").unwrap();
        assert_eq!(m.map(1000), 0);
        assert_eq!(m.map(100_005), 6);
        assert_eq!(m.map(0), OVERFLOW_ID);
        assert_eq!(IdMap::parse("0 x 1"), None);
    }
}
