//! Addresses to function names: user stacks at first sight, kernel stacks at the end.
//!
//! A user address is normalized when its stack is first seen, while its process lives: the
//! process's executable mappings (/proc/PID/maps, read once per process) turn it into a binary
//! (its device and inode) and an offset in that file. Each binary is opened once, through
//! `/proc/PID/map_files` (right across mount namespaces and for deleted binaries), and held
//! open for the profile; each (binary, offset) is named once by blazesym (the libbpf project's
//! symbolizer: ELF symbols, DWARF when present), whatever the number of processes that run it.
//! So a process that exits during the profile keeps its names, and 50,000 processes of one
//! program cost 50,000 reads of their maps and one symbolization. vDSO addresses are named in
//! the profiler's own vDSO (the same image in every process of the kernel). A JIT's
//! `perf-PID.map` written inside a container (under its own /tmp, named with its own pid) is
//! read through `/proc/PID/root`. Kernel frames come from kallsyms.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Elf, Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, Pid};
use taskdiag_proto::prof::{PROF_STACK_LEAF_SP, PROF_STACK_TRUNCATED};

use crate::model::{Frame, FrameKind};
use crate::sampler::RawStack;

/// What the stacks were like: the stack-quality line.
#[derive(Clone, Debug, Default)]
pub struct Quality {
    /// User stacks seen (distinct).
    pub user_stacks: u64,
    /// Of those, cut at the depth limit.
    pub truncated: u64,
    /// Of those, that do not reach a thread's entry point (`_start`, `start_thread`, …): a
    /// frame-pointer walk that broke on a function without frame pointers.
    pub broken: u64,
    /// Per binary, the broken stacks whose outermost frame is in it: where the walk lost the
    /// chain (a binary built without frame pointers, or its caller).
    pub broken_in: BTreeMap<String, u64>,
    /// User frames no symbol was found for.
    pub unknown_frames: u64,
}

/// The user stacks a [`Symbols`] resolved, to carry to another thread.
#[derive(Debug, Default)]
pub struct Resolved {
    user: HashMap<u64, Vec<Frame>>,
    quality: Quality,
}

/// Resolves and remembers the names of every stack's frames.
pub struct Symbols {
    symbolizer: Symbolizer,
    /// User stacks by id: frames innermost first.
    user: HashMap<u64, Vec<Frame>>,
    /// Kernel names by address.
    kernel: HashMap<u64, Frame>,
    /// What is known of each process whose stacks were resolved, by pid.
    procs: HashMap<u32, Known>,
    /// Every binary seen, by its file's identity.
    binaries: HashMap<BinKey, Binary>,
    /// The profiler's own vDSO (its start), where other processes' vDSO offsets are named.
    own_vdso: Option<u64>,
    /// vDSO names by offset.
    vdso_names: HashMap<u64, Option<Frame>>,
    /// Whether the kernel answers PROCMAP_QUERY (6.11+; until it says it does not).
    procmap: bool,
    /// Binaries that could not be told apart from another by their identity (an open that
    /// gave another file than the mapping's): each its own.
    private_binaries: u64,
    /// The stack-quality counts.
    pub quality: Quality,
}

impl Default for Symbols {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a function is where a thread's stack begins: a complete walk ends in one (glibc's
/// and musl's process and thread start, the clone wrappers).
fn is_entry_point(name: &str) -> bool {
    matches!(
        name,
        "_start"
            | "__libc_start_main"
            | "__libc_start_call_main"
            | "libc_start_main_stage2"
            | "__libc_start_main_impl"
            | "start_thread"
            | "__clone"
            | "__clone3"
            | "clone"
            | "clone3"
            | "__GI___clone"
            | "__GI___clone3"
            | "start"
    )
}

/// The address to look up for frame `i` of a stack: a return address (every frame but an
/// interrupted instruction, the first) is looked up one byte back, inside the call, as
/// /proc/PID/stack's %pB does (a call may be the last instruction of its function).
fn lookup_addr(i: usize, ip: u64) -> u64 {
    if i == 0 {
        ip
    } else {
        ip.saturating_sub(1)
    }
}

/// A frame from blazesym's answer, in `module`; `None` if it found nothing.
fn frame_of(kind: FrameKind, s: &Symbolized<'_>, module: Option<&str>) -> Option<Frame> {
    let sym = s.as_sym()?;
    let module = module.map(str::to_owned).or_else(|| {
        sym.module.as_ref().map(|m| {
            let p = Path::new(m);
            p.file_name()
                .unwrap_or(p.as_os_str())
                .to_string_lossy()
                .into_owned()
        })
    });
    Some(Frame {
        kind,
        name: sym.name.to_string(),
        module,
    })
}

/// A binary's identity: its file's device and inode as /proc/PID/maps gives them (`private`
/// not 0 for one that is not shared with other mappings of the same identity).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct BinKey {
    dev: u64,
    ino: u64,
    private: u64,
}

/// A binary held open for the profile, and its names by file offset.
struct Binary {
    /// The open file (its inode is not reused while it is held, and it can be read after
    /// every process that mapped it exited); `None` if it could not be opened.
    file: Option<File>,
    /// Its base name, the frames' module.
    name: String,
    /// blazesym's answer for each file offset looked up (`None`: no symbol).
    names: HashMap<u64, Option<Frame>>,
}

impl Binary {
    /// `file` (if it opened), named `name`, nothing looked up in it yet.
    fn new(file: Option<File>, name: &str) -> Self {
        Self {
            file,
            name: name.to_owned(),
            names: HashMap::new(),
        }
    }

    /// The path blazesym reads it by: the descriptor held open.
    fn path(&self) -> Option<PathBuf> {
        let fd = self.file.as_ref()?.as_raw_fd();
        Some(PathBuf::from(format!("/proc/self/fd/{fd}")))
    }
}

/// What an executable mapping maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MapKind {
    /// A file, at this offset of the mapping's start.
    File { key: BinKey, pgoff: u64 },
    /// The vDSO.
    Vdso,
    /// Anonymous memory (a JIT's code, say) or another special mapping.
    Anon,
}

/// One executable mapping.
#[derive(Clone, Debug)]
struct ExecMap {
    start: u64,
    end: u64,
    /// Its file's base name (empty for anonymous memory).
    name: String,
    /// The file's path as the process sees it (empty for anonymous memory).
    path: Vec<u8>,
    kind: MapKind,
}

impl ExecMap {
    /// The mapping `start..end` of `name` (as maps shows it) at file offset `pgoff` of file
    /// `dev`/`ino` (0 for none).
    fn new(start: u64, end: u64, pgoff: u64, dev: u64, ino: u64, name: &[u8]) -> Self {
        let file = name.starts_with(b"/") && ino != 0;
        let shown = String::from_utf8_lossy(name);
        let shown = shown.strip_suffix(" (deleted)").unwrap_or(&shown);
        let kind = if file {
            MapKind::File {
                key: BinKey {
                    dev,
                    ino,
                    private: 0,
                },
                pgoff,
            }
        } else if name == b"[vdso]" {
            MapKind::Vdso
        } else {
            MapKind::Anon
        };
        Self {
            start,
            end,
            name: if file {
                shown.rsplit('/').next().unwrap_or(shown).to_owned()
            } else {
                String::new()
            },
            path: if file { name.to_vec() } else { Vec::new() },
            kind,
        }
    }
}

/// A process's executable mappings, from /proc/PID/maps.
#[derive(Clone, Debug, Default)]
struct ExecMaps(Vec<ExecMap>);

/// A device number from its major and minor (glibc's makedev).
fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (u64::from(major), u64::from(minor));
    ((ma & 0xffff_f000) << 32) | ((ma & 0xfff) << 8) | ((mi & 0xffff_ff00) << 12) | (mi & 0xff)
}

impl ExecMaps {
    /// Process `pid`'s maps file, parsed; none where it cannot be read, or not now (its
    /// memory-map lock held by something stuck: `taskdiag_procfs::stuck`).
    fn read(pid: u32) -> Self {
        taskdiag_procfs::stuck::read_proc_file(pid, "maps")
            .map(|buf| Self::parse(&buf))
            .unwrap_or_default()
    }

    fn parse(buf: &[u8]) -> Self {
        let mut vmas = Vec::new();
        let _ = taskdiag_procfs::maps::parse_maps(buf, &mut vmas);
        Self(
            vmas.into_iter()
                .filter(|v| v.rec.vm_flags & taskdiag_proto::vma_flags::EXEC != 0)
                .map(|v| {
                    let r = &v.rec;
                    let dev = makedev(r.dev_major, r.dev_minor);
                    ExecMap::new(r.start, r.end, r.pgoff, dev, r.inode, &v.name)
                })
                .collect(),
        )
    }

    fn find(&self, addr: u64) -> Option<&ExecMap> {
        self.0.iter().find(|m| addr >= m.start && addr < m.end)
    }

    /// Whether `addr` is in executable memory no file backs: where a JIT writes its code.
    fn in_anonymous_code(&self, addr: u64) -> bool {
        self.find(addr).is_some_and(|m| m.kind == MapKind::Anon)
    }

    /// The frame of an address no symbol was found for: its binary (`[dash]`, one frame for
    /// all its unnamed code, as perf's `[unknown]` is) when it is in code, `[unknown]` when
    /// it is in no code at all (a word a broken frame-pointer chain led to).
    fn unknown_frame(&self, addr: u64) -> Frame {
        let module = self.find(addr).map(|m| match m.kind {
            MapKind::Vdso => "[vdso]".to_owned(),
            _ if m.name.is_empty() => "anon".to_owned(),
            _ => m.name.clone(),
        });
        Frame {
            kind: FrameKind::User,
            name: module.as_ref().map_or_else(
                || "[unknown]".to_owned(),
                |m| {
                    if m.starts_with('[') {
                        m.clone()
                    } else {
                        format!("[{m}]")
                    }
                },
            ),
            module,
        }
    }
}

fn unknown(kind: FrameKind, addr: u64) -> Frame {
    Frame {
        kind,
        name: format!("0x{addr:x}"),
        module: None,
    }
}

/// How long a process's mappings are trusted to have no code at an address they do not map:
/// an address outside them reads them again, at most this often (a broken frame-pointer
/// chain leads to the same unmapped word at every sample of a CPU-bound loop).
const REMAP_AFTER: Duration = Duration::from_secs(1);

/// Which process a user stack is of, as the kernel saw it when it took the stack: a reused
/// pid, or an exec, makes another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcIdent {
    /// The process's start (its group leader's start_boottime, ns).
    pub start: u64,
    /// Its exec count (the group leader's self_exec_id).
    pub exec: u64,
}

/// What is known of one process (one pid while it has the same start time): its mappings
/// and its names of addresses, so that a new stack costs only its new addresses. A CPU-bound
/// loop gives a new stack at nearly every sample (its innermost address differs), whose other
/// frames are known already.
struct Known {
    /// Its identity from the stacks' records, when they carry one.
    ident: Option<ProcIdent>,
    /// Its start time (/proc/PID/stat), which tells a reused pid where the stack carries no
    /// identity.
    started: Option<u64>,
    /// Whether /proc's start time was compared with `started` (once: for the stacks without an
    /// identity, named at the end).
    verified: bool,
    /// Its executable mappings, read at its first stack.
    maps: Option<ExecMaps>,
    /// When its mappings were last read.
    read_at: Instant,
    /// The name of each address looked up (`None`: no symbol).
    names: HashMap<u64, Option<Frame>>,
    /// JIT symbols from its perf map inside its root, read at its first frame without one.
    perf_map: Option<Vec<(u64, u64, String)>>,
}

impl Known {
    fn new(ident: Option<ProcIdent>, started: Option<u64>) -> Self {
        Self {
            ident,
            started,
            verified: false,
            maps: None,
            read_at: Instant::now(),
            names: HashMap::new(),
            perf_map: None,
        }
    }
}

/// The profiler's own vDSO's start (from /proc/self/maps).
fn own_vdso() -> Option<u64> {
    let maps = ExecMaps::parse(&std::fs::read("/proc/self/maps").ok()?);
    maps.0
        .iter()
        .find(|m| m.kind == MapKind::Vdso)
        .map(|m| m.start)
}

impl Symbols {
    /// A symbolizer with nothing resolved yet. It holds every binary it meets open (see
    /// `Binary`): the soft limit on open files is raised to the hard one first (the usual
    /// 1,024 is a few hosts' count of distinct libraries).
    pub fn new() -> Self {
        taskdiag_procfs::raise_nofile_limit();
        Self {
            symbolizer: Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .build(),
            user: HashMap::new(),
            kernel: HashMap::new(),
            procs: HashMap::new(),
            binaries: HashMap::new(),
            own_vdso: own_vdso(),
            vdso_names: HashMap::new(),
            procmap: true,
            private_binaries: 0,
            quality: Quality::default(),
        }
    }

    /// Resolves user stack `id` of process `pid` (a pid of the profiler's /proc) now, while
    /// the process lives; `ident` is the process the kernel took the stack of, if known.
    pub fn add_user(&mut self, id: u64, pid: u32, ident: Option<ProcIdent>, stack: &RawStack) {
        if self.user.contains_key(&id) || stack.ips.is_empty() {
            return;
        }
        self.identify(pid, ident);
        let addrs: Vec<u64> = stack
            .ips
            .iter()
            .enumerate()
            .map(|(i, &ip)| lookup_addr(i, ip))
            .collect();
        let found = self.resolve(pid, &addrs);
        let mut frames = Vec::with_capacity(addrs.len());
        for (i, &addr) in addrs.iter().enumerate() {
            // A null word ends a frame-pointer chain; perf's user stacks may end with one.
            if stack.ips[i] == 0 {
                continue;
            }
            let found = found.get(i).cloned().flatten();
            // The word at the stack pointer is a frameless leaf's return address only if it
            // points into code (and is not the next frame again).
            if i == 1 && stack.flags & PROF_STACK_LEAF_SP != 0 {
                let same_as_next = stack.ips.get(2) == Some(&stack.ips[1]);
                if found.is_none() || same_as_next {
                    continue;
                }
            }
            let frame = match found {
                Some(f) => f,
                // A JIT's perf map only for code in anonymous memory (reading it for every
                // process with a frame without a symbol was a tenth of the symbolizing of
                // 50,000 processes).
                None => match self
                    .with_exec_maps(pid, |m| m.in_anonymous_code(addr))
                    .then(|| self.jit_symbol(pid, addr))
                    .flatten()
                {
                    Some(f) => f,
                    None => {
                        self.quality.unknown_frames += 1;
                        self.with_exec_maps(pid, |m| m.unknown_frame(addr))
                    }
                },
            };
            frames.push(frame);
        }
        self.quality.user_stacks += 1;
        if stack.flags & PROF_STACK_TRUNCATED != 0 {
            self.quality.truncated += 1;
        }
        let outermost = frames.last();
        if stack.flags & PROF_STACK_TRUNCATED == 0
            && !outermost.is_some_and(|f| is_entry_point(&f.name))
        {
            self.quality.broken += 1;
            let module = outermost
                .and_then(|f| f.module.clone())
                .unwrap_or_else(|| "[unknown]".into());
            *self.quality.broken_in.entry(module).or_default() += 1;
        }
        self.user.insert(id, frames);
    }

    /// Makes what is known of process `pid` that of the process the stack is of. The stack's
    /// own identity decides where it has one (no system call: a CPU-bound loop gives a new
    /// stack at nearly every sample); else the start time in /proc, once per process.
    fn identify(&mut self, pid: u32, ident: Option<ProcIdent>) {
        let known = self.procs.get_mut(&pid);
        if let Some(now) = ident {
            if known.is_some_and(|k| k.ident == Some(now)) {
                return;
            }
            // First seen, another process at this pid, or the same after an exec: its start
            // time in /proc's ticks is the kernel's.
            self.procs
                .insert(pid, Known::new(Some(now), Some(ticks(now.start))));
            return;
        }
        if known.as_ref().is_some_and(|k| k.verified) {
            return;
        }
        let started = start_time(pid);
        match known {
            // A process gone since (no start time) keeps what is known of it: its stacks
            // were taken while it lived.
            Some(k) if started.is_none() || k.started == started => k.verified = true,
            _ => {
                let mut k = Known::new(None, started);
                k.verified = true;
                self.procs.insert(pid, k);
            }
        }
    }

    /// The names of `addrs` of process `pid`. Each address is normalized once per process
    /// (its mapping found by [`locate`]), and each (binary, offset) is named once.
    fn resolve(&mut self, pid: u32, addrs: &[u64]) -> Vec<Option<Frame>> {
        let Self { procs, procmap, .. } = self;
        let Some(known) = procs.get_mut(&pid) else {
            return Vec::new();
        };
        let mut want: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !known.names.contains_key(a))
            .collect();
        want.sort_unstable();
        want.dedup();
        let read_now = locate(known, pid, &want, procmap);
        if read_now {
            self.hold_binaries(pid);
        }
        let known = self.procs.get_mut(&pid).expect("looked up above");
        // Normalized: per binary, the (address, file offset) pairs to name.
        let mut per_binary: HashMap<BinKey, (ExecMap, Vec<(u64, u64)>)> = HashMap::new();
        let mut vdso: Vec<(u64, u64)> = Vec::new();
        for &a in &want {
            let Some(m) = known.maps.as_ref().and_then(|m| m.find(a)) else {
                // Outside mappings read before: perhaps mapped since, so not remembered
                // (answered as no symbol, and asked again with a later stack).
                if read_now {
                    known.names.insert(a, None);
                }
                continue;
            };
            match m.kind {
                MapKind::File { key, pgoff } => per_binary
                    .entry(key)
                    .or_insert_with(|| (m.clone(), Vec::new()))
                    .1
                    .push((a, a - m.start + pgoff)),
                MapKind::Vdso => vdso.push((a, a - m.start)),
                MapKind::Anon => {
                    known.names.insert(a, None);
                }
            }
        }
        for (key, (map, pairs)) in per_binary {
            let names = self.name_in_binary(pid, key, &map, &pairs);
            let known = self.procs.get_mut(&pid).expect("looked up above");
            for ((a, _), f) in pairs.iter().zip(names) {
                known.names.insert(*a, f);
            }
        }
        if !vdso.is_empty() {
            let names = self.name_in_vdso(&vdso);
            let known = self.procs.get_mut(&pid).expect("looked up above");
            for ((a, _), f) in vdso.iter().zip(names) {
                known.names.insert(*a, f);
            }
        }
        let known = &self.procs[&pid];
        addrs
            .iter()
            .map(|a| known.names.get(a).cloned().flatten())
            .collect()
    }

    /// Opens, and holds, every binary process `pid`'s executable mappings (read just now)
    /// name that is not held yet: the process may be gone, and its binary deleted, before a
    /// frame of it comes to be named (a symbolizer behind on a loaded machine, a binary that
    /// runs only after the first stack, all in libc, was seen). One that is not the file the
    /// mapping names is left to [`Self::name_in_binary`].
    fn hold_binaries(&mut self, pid: u32) {
        let Some(maps) = self.procs.get(&pid).and_then(|k| k.maps.as_ref()) else {
            return;
        };
        // One mapping of each file (any opens it through map_files).
        let new: HashMap<BinKey, ExecMap> = maps
            .0
            .iter()
            .filter_map(|m| match m.kind {
                MapKind::File { key, .. } if !self.binaries.contains_key(&key) => {
                    Some((key, m.clone()))
                }
                _ => None,
            })
            .collect();
        for (key, map) in new {
            if let (file @ Some(_), true) = open_binary(pid, &map, key) {
                self.binaries.insert(key, Binary::new(file, &map.name));
            }
        }
    }

    /// The names of `pairs`' file offsets in the binary `map` of process `pid` maps, opened
    /// (and held) at its first sight.
    fn name_in_binary(
        &mut self,
        pid: u32,
        key: BinKey,
        map: &ExecMap,
        pairs: &[(u64, u64)],
    ) -> Vec<Option<Frame>> {
        let mut key = key;
        if !self.binaries.contains_key(&key) {
            let (file, same) = open_binary(pid, map, key);
            if !same {
                // Not the file the mapping names (replaced since at its path): its own,
                // shared with no other mapping.
                self.private_binaries += 1;
                key.private = self.private_binaries;
            }
            self.binaries.insert(key, Binary::new(file, &map.name));
        }
        let Self {
            symbolizer,
            binaries,
            ..
        } = self;
        let bin = binaries.get_mut(&key).expect("inserted above");
        let mut offs: Vec<u64> = pairs
            .iter()
            .map(|&(_, off)| off)
            .filter(|off| !bin.names.contains_key(off))
            .collect();
        offs.sort_unstable();
        offs.dedup();
        if !offs.is_empty() {
            match bin.path() {
                Some(path) => {
                    let src = Source::Elf(Elf::new(path));
                    let answer = symbolizer.symbolize(&src, Input::FileOffset(&offs));
                    let answer = answer.unwrap_or_default();
                    for (i, &off) in offs.iter().enumerate() {
                        let f = answer
                            .get(i)
                            .and_then(|s| frame_of(FrameKind::User, s, Some(&bin.name)));
                        bin.names.insert(off, f);
                    }
                }
                None => {
                    for &off in &offs {
                        bin.names.insert(off, None);
                    }
                }
            }
        }
        pairs
            .iter()
            .map(|(_, off)| bin.names.get(off).cloned().flatten())
            .collect()
    }

    /// The names of vDSO offsets (`pairs`: address, offset), in the profiler's own vDSO.
    fn name_in_vdso(&mut self, pairs: &[(u64, u64)]) -> Vec<Option<Frame>> {
        if let Some(own) = self.own_vdso {
            let offs: Vec<u64> = pairs
                .iter()
                .map(|&(_, off)| off)
                .filter(|off| !self.vdso_names.contains_key(off))
                .collect();
            if !offs.is_empty() {
                let addrs: Vec<u64> = offs.iter().map(|off| own + off).collect();
                let src = Source::Process(Process::new(Pid::Slf));
                let answer = self
                    .symbolizer
                    .symbolize(&src, Input::AbsAddr(&addrs))
                    .unwrap_or_default();
                for (i, &off) in offs.iter().enumerate() {
                    let f = answer
                        .get(i)
                        .and_then(|s| frame_of(FrameKind::User, s, Some("[vdso]")));
                    self.vdso_names.insert(off, f);
                }
            }
        }
        pairs
            .iter()
            .map(|(_, off)| self.vdso_names.get(off).cloned().flatten())
            .collect()
    }

    /// `f` of process `pid`'s executable mappings (read once per process, and again after
    /// addresses outside them), for the frames no symbol was found for.
    fn with_exec_maps<T>(&mut self, pid: u32, f: impl FnOnce(&ExecMaps) -> T) -> T {
        match self.procs.get_mut(&pid) {
            Some(k) => f(k.maps.get_or_insert_with(|| ExecMaps::read(pid))),
            None => f(&ExecMaps::read(pid)),
        }
    }

    /// What was resolved (the symbolizer itself stays on its thread: it is not `Send`).
    pub fn into_resolved(self) -> Resolved {
        Resolved {
            user: self.user,
            quality: self.quality,
        }
    }

    /// A symbolizer that knows what another one resolved.
    pub fn from_resolved(r: Resolved) -> Self {
        Self {
            user: r.user,
            quality: r.quality,
            ..Self::new()
        }
    }

    /// The frames of user stack `id`, innermost first, if it was resolved.
    pub fn user(&self, id: u64) -> Option<&[Frame]> {
        self.user.get(&id).map(Vec::as_slice)
    }

    /// Resolves every kernel address of `stacks` not resolved yet (from kallsyms).
    pub fn add_kernel<'a>(&mut self, stacks: impl IntoIterator<Item = &'a RawStack>) {
        let mut want: Vec<u64> = Vec::new();
        for s in stacks {
            for (i, &ip) in s.ips.iter().enumerate() {
                let a = lookup_addr(i, ip);
                if !self.kernel.contains_key(&a) {
                    want.push(a);
                }
            }
        }
        want.sort_unstable();
        want.dedup();
        if want.is_empty() {
            return;
        }
        let src = Source::Kernel(Kernel {
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Default::default()
        });
        let syms = self
            .symbolizer
            .symbolize(&src, Input::AbsAddr(&want))
            .unwrap_or_default();
        for (i, &a) in want.iter().enumerate() {
            let mut f = syms
                .get(i)
                .and_then(|s| frame_of(FrameKind::Kernel, s, None))
                .unwrap_or_else(|| unknown(FrameKind::Kernel, a));
            // Modules' names as kallsyms gives them; the kernel's own as perf names it.
            f.module = Some(
                f.module
                    .take()
                    .map_or_else(|| "[kernel.kallsyms]".into(), |m| format!("[{m}]")),
            );
            self.kernel.insert(a, f);
        }
    }

    /// The frames of a kernel stack, innermost first (after [`Symbols::add_kernel`]).
    pub fn kernel(&self, stack: &RawStack) -> Vec<Frame> {
        stack
            .ips
            .iter()
            .enumerate()
            .map(|(i, &ip)| {
                let a = lookup_addr(i, ip);
                self.kernel
                    .get(&a)
                    .cloned()
                    .unwrap_or_else(|| unknown(FrameKind::Kernel, ip))
            })
            .collect()
    }

    /// A JIT's symbol for `addr` from the perf map the process wrote inside its own root and
    /// pid namespace (`/proc/PID/root/tmp/perf-NSPID.map`), read once per process.
    fn jit_symbol(&mut self, pid: u32, addr: u64) -> Option<Frame> {
        let known = self.procs.get_mut(&pid)?;
        let map = known
            .perf_map
            .get_or_insert_with(|| read_perf_map(pid).unwrap_or_default());
        let i = map.partition_point(|(start, _, _)| *start <= addr);
        let (start, len, name) = map.get(i.checked_sub(1)?)?;
        (addr < start + len).then(|| Frame {
            kind: FrameKind::User,
            name: name.clone(),
            module: Some("[jit]".into()),
        })
    }
}

/// Makes `known` (process `pid`) know its executable mappings where an address of `want` is
/// outside them: at its first stack, and again at most every [`REMAP_AFTER`] (mapped since; a
/// broken frame-pointer chain gives a new unmapped word at nearly every sample of a CPU-bound
/// loop). Asked of the kernel where it can (PROCMAP_QUERY, 6.11+: the executable mappings and
/// their paths only, where reading /proc/PID/maps prints every mapping with its path, which
/// was most of the cost of 50,000 new processes), else /proc/PID/maps read whole. Whether
/// they were read now: an address outside them is then in no code.
fn locate(known: &mut Known, pid: u32, want: &[u64], procmap: &mut bool) -> bool {
    let outside =
        |maps: &Option<ExecMaps>, a: u64| maps.as_ref().is_none_or(|m| m.find(a).is_none());
    if known.maps.is_some()
        && (known.read_at.elapsed() < REMAP_AFTER || !want.iter().any(|&a| outside(&known.maps, a)))
    {
        return false;
    }
    known.read_at = Instant::now();
    if *procmap {
        match query_exec(pid) {
            Ok(maps) => {
                known.maps = Some(maps);
                return true;
            }
            // Before 6.11 (no such ioctl), or a kernel that knows another struct.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTTY | libc::EINVAL)) => {
                *procmap = false;
            }
            // Gone, or refused: nothing more is known of it.
            Err(_) => {
                known.maps.get_or_insert_with(ExecMaps::default);
                return false;
            }
        }
    }
    known.maps = Some(ExecMaps::read(pid));
    true
}

/// Process `pid`'s executable mappings, asked of the kernel one by one.
fn query_exec(pid: u32) -> std::io::Result<ExecMaps> {
    use taskdiag_procfs::procmap::{query_all, QUERY_EXECUTABLE};
    let maps = File::open(format!("/proc/{pid}/maps"))?;
    // The query takes the memory-map lock as reading the file does.
    let found = taskdiag_procfs::stuck::bounded(pid, move || query_all(&maps, QUERY_EXECUTABLE))
        .map_err(|busy| std::io::Error::new(std::io::ErrorKind::WouldBlock, busy))???;
    Ok(ExecMaps(
        found
            .into_iter()
            .map(|m| {
                let dev = makedev(m.dev_major, m.dev_minor);
                ExecMap::new(m.start, m.end, m.offset, dev, m.inode, &m.name)
            })
            .collect(),
    ))
}

/// Opens the binary mapping `map` of process `pid` maps: through /proc/PID/map_files (the
/// mapping itself, in any mount namespace, deleted or not; needs CAP_SYS_ADMIN), else by its
/// path in the process's root. Also whether the file opened is the one the mapping names
/// (its device and inode): a path may name another file since.
fn open_binary(pid: u32, map: &ExecMap, key: BinKey) -> (Option<File>, bool) {
    let by_mapping = format!("/proc/{pid}/map_files/{:x}-{:x}", map.start, map.end);
    let mut root = std::ffi::OsString::from(format!("/proc/{pid}/root"));
    root.push(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&map.path));
    // Opening a map_files entry takes the memory-map lock (map_files_get_link()).
    let file = taskdiag_procfs::stuck::bounded(pid, move || File::open(by_mapping))
        .ok()
        .and_then(Result::ok)
        .and_then(Result::ok)
        .or_else(|| File::open(&root).ok());
    let same = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .is_some_and(|m| m.dev() == key.dev && m.ino() == key.ino);
    (file, same)
}

/// The scheduler's and the locking primitives' text (in_sched_functions()), from kallsyms:
/// what wchan skips.
#[derive(Clone, Debug, Default)]
pub struct SchedText {
    ranges: Vec<(u64, u64)>,
}

impl SchedText {
    /// Reads the four bounds from /proc/kallsyms (none if it hides addresses).
    pub fn read() -> Self {
        let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else {
            return Self::default();
        };
        Self::parse(&text)
    }

    /// The text of these address ranges (tests).
    #[cfg(test)]
    pub(crate) fn from_ranges(ranges: Vec<(u64, u64)>) -> Self {
        Self { ranges }
    }

    fn parse(text: &str) -> Self {
        let mut at: HashMap<&str, u64> = HashMap::new();
        for l in text.lines() {
            let mut it = l.split_whitespace();
            let (Some(addr), Some(_), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if matches!(
                name,
                "__sched_text_start" | "__sched_text_end" | "__lock_text_start" | "__lock_text_end"
            ) {
                if let Ok(a) = u64::from_str_radix(addr, 16) {
                    at.insert(name, a);
                }
            }
        }
        let range =
            |a: &str, b: &str| Some((*at.get(a)?, *at.get(b)?)).filter(|(a, b)| *a != 0 && a < b);
        Self {
            ranges: [
                range("__sched_text_start", "__sched_text_end"),
                range("__lock_text_start", "__lock_text_end"),
            ]
            .into_iter()
            .flatten()
            .collect(),
        }
    }

    /// /proc/PID/wchan of a blocked task with kernel stack `stack` (named `frames`, innermost
    /// first): its first function outside the scheduler, `-` if none.
    pub fn wchan(&self, stack: &RawStack, frames: &[Frame]) -> String {
        let in_sched = |ip: u64| self.ranges.iter().any(|&(a, b)| ip >= a && ip < b);
        stack
            .ips
            .iter()
            .zip(frames)
            .find(|(ip, _)| !in_sched(**ip))
            .map_or_else(|| "-".to_owned(), |(_, f)| f.name.clone())
    }
}

/// A start time in nanoseconds since boot as /proc shows it, in clock ticks.
fn ticks(ns: u64) -> u64 {
    ns / (1_000_000_000 / taskdiag_procfs::clock_ticks())
}

/// Process `pid`'s start time (/proc/PID/stat field 22): what tells a reused pid.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// The innermost pid of /proc/PID/status's NSpid line.
fn innermost_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// A perf map ("START SIZE NAME" in hex, one symbol a line), sorted by start.
fn read_perf_map(pid: u32) -> Option<Vec<(u64, u64, String)>> {
    let ns_pid = innermost_pid(pid)?;
    let text = std::fs::read_to_string(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map")).ok()?;
    let mut out = parse_perf_map(&text);
    out.sort_by_key(|e| e.0);
    Some(out)
}

/// The entries of a perf map's text (jit-interface.txt's format); bad lines are skipped.
pub(crate) fn parse_perf_map(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let start = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
            let len = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, len, it.next()?.trim_end().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines_parse_and_bad_ones_are_skipped() {
        let m = parse_perf_map("7f00 10 LazyCompile:~foo a.js:1\nbad line\n0x7f20 0x8 bar\n");
        assert_eq!(
            m,
            vec![
                (0x7f00, 0x10, "LazyCompile:~foo a.js:1".to_owned()),
                (0x7f20, 0x8, "bar".to_owned())
            ]
        );
    }

    #[test]
    fn sched_text_bounds_come_from_kallsyms_and_wchan_skips_them() {
        let t = SchedText::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81a00000 T __sched_text_start\n\
             ffffffff81b00000 T __sched_text_end\n\
             ffffffff81c00000 T __lock_text_start\n\
             ffffffff81c10000 T __lock_text_end\n",
        );
        assert_eq!(
            t.ranges,
            [
                (0xffffffff81a00000, 0xffffffff81b00000),
                (0xffffffff81c00000, 0xffffffff81c10000)
            ]
        );
        let f = |n: &str| Frame {
            kind: FrameKind::Kernel,
            name: n.into(),
            module: None,
        };
        let stack = RawStack {
            ips: vec![0xffffffff81a00010, 0xffffffff81c00010, 0xffffffff81200000],
            flags: 0,
        };
        let frames = [f("schedule"), f("_raw_spin_unlock"), f("pipe_read")];
        assert_eq!(t.wchan(&stack, &frames), "pipe_read");
        assert_eq!(
            SchedText::parse("0000000000000000 T __sched_text_start\n").ranges,
            []
        );
    }

    #[inline(never)]
    fn a_named_function() -> u64 {
        std::hint::black_box(7)
    }

    #[inline(never)]
    fn another_named_function() -> u64 {
        std::hint::black_box(8)
    }

    #[test]
    fn a_process_is_known_until_its_stacks_say_it_is_another() {
        // Its mappings asked address by address (6.11+), and read whole (before).
        known_until_another(true);
        known_until_another(false);
    }

    fn known_until_another(procmap: bool) {
        let pid = std::process::id();
        let addr = a_named_function as *const () as u64;
        let stack = RawStack {
            ips: vec![addr],
            flags: 0,
        };
        // This process's start as the kernel gives it (nanoseconds: ticks of /proc, whole).
        let hz = taskdiag_procfs::clock_ticks();
        let start = start_time(pid).expect("our start time") * (1_000_000_000 / hz);
        let first = ProcIdent { start, exec: 1 };
        let mut s = Symbols::new();
        s.procmap = procmap;
        s.add_user(1, pid, Some(first), &stack);
        let name = |s: &Symbols, id| s.user(id).map(|f| f[0].name.clone());
        assert!(
            name(&s, 1).is_some_and(|n| n.contains("a_named_function")),
            "{:?}",
            s.user(1)
        );
        let known = |s: &Symbols| s.procs[&pid].names.len();
        assert_eq!(known(&s), 1);
        // The same process: what is known of it is kept (its address not looked up again).
        s.add_user(2, pid, Some(first), &stack);
        assert_eq!(known(&s), 1);
        assert_eq!(s.procs[&pid].ident, Some(first));
        // After an exec (or at a reused pid): known anew (only the new stack's address), from
        // its own mappings.
        let second = ProcIdent { start, exec: 2 };
        let other = RawStack {
            ips: vec![another_named_function as *const () as u64],
            flags: 0,
        };
        s.add_user(3, pid, Some(second), &other);
        assert_eq!(s.procs[&pid].ident, Some(second));
        assert_eq!(known(&s), 1);
        assert!(name(&s, 3).is_some_and(|n| n.contains("another_named_function")));
        // Our binary, opened once for both processes, named by file offset; every other
        // binary we map (libc) held from the first walk too, none named.
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let exe_name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
        let ours: Vec<&Binary> = s
            .binaries
            .values()
            .filter(|b| Some(&b.name) == exe_name.as_ref())
            .collect();
        assert_eq!(ours.len(), 1);
        assert_eq!(ours[0].names.len(), 2);
        assert!(
            s.binaries.values().any(|b| b.name.starts_with("libc")),
            "{:?}",
            s.binaries.values().map(|b| &b.name).collect::<Vec<_>>()
        );
        // A stack without an identity (named at the end): this process by its start time, the
        // one the kernel gave (another start would be another process).
        s.add_user(4, pid, None, &stack);
        assert_eq!(s.procs[&pid].ident, Some(second));
        s.procs.insert(pid, Known::new(Some(first), Some(0)));
        s.add_user(5, pid, None, &stack);
        assert_eq!(s.procs[&pid].ident, None);
    }

    /// A process whose first stack is all in libc, gone (and its binary deleted) before a
    /// stack in its own code is named: the binary was held at the first walk.
    #[test]
    fn a_binary_is_held_from_its_processes_first_walk() {
        use std::io::{BufRead, BufReader, Write};
        let dir = taskdiag_test_support::dir::TempDir::new("held-binary");
        let src = dir.join("held.c");
        std::fs::File::create(&src)
            .and_then(|mut f| {
                f.write_all(
                    b"#include <stdio.h>\n#include <unistd.h>\n\
                      __attribute__((noinline)) void held_function(void) { pause(); }\n\
                      int main(void) { printf(\"%p %p\\n\", (void *)held_function, \
                      (void *)pause); fflush(stdout); held_function(); return 0; }\n",
                )
            })
            .expect("writing the source");
        let exe = dir.join("held");
        let o = std::process::Command::new("cc")
            .args(["-O1", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("running cc");
        assert!(
            o.status.success(),
            "cc: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut child = std::process::Command::new(&exe)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the program");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("its addresses");
        let addr = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16);
        let (own, in_libc) = match line.split_once(' ') {
            Some((a, b)) => (addr(a).expect("an address"), addr(b).expect("an address")),
            None => panic!("addresses: {line:?}"),
        };
        let pid = child.id();
        let hz = taskdiag_procfs::clock_ticks();
        let start = start_time(pid).expect("its start time") * (1_000_000_000 / hz);
        let ident = ProcIdent { start, exec: 1 };
        let mut s = Symbols::new();
        let raw = |a| RawStack {
            ips: vec![a],
            flags: 0,
        };
        s.add_user(1, pid, Some(ident), &raw(in_libc));
        assert!(
            s.user(1).is_some_and(|f| f[0].name.contains("pause")),
            "{:?}",
            s.user(1)
        );
        child.kill().expect("kill");
        child.wait().expect("wait");
        drop(dir);
        s.add_user(2, pid, Some(ident), &raw(own));
        assert!(
            s.user(2)
                .is_some_and(|f| f[0].name.contains("held_function")),
            "{:?}",
            s.user(2)
        );
    }

    #[test]
    fn complete_stacks_end_in_an_entry_point() {
        assert!(is_entry_point("_start") && is_entry_point("start_thread"));
        assert!(!is_entry_point("main"));
    }

    #[test]
    fn return_addresses_are_looked_up_inside_the_call() {
        assert_eq!(lookup_addr(0, 0x1000), 0x1000);
        assert_eq!(lookup_addr(1, 0x1000), 0xfff);
    }
}
