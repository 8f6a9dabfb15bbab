//! A reduced copy of the kernel's BTF for CO-RE relocation.
//!
//! libbpf relocates each type the programs name by scanning the whole kernel BTF (about
//! 126,000 types on 6.18) for candidates, once per type: about half of a one-shot dump's
//! start-up. This module writes, into a memfd that libbpf reads as `btf_custom_path`, a BTF
//! with only the kernel's definitions of the types the programs name (by their essential names,
//! `task_struct___pre514` naming `task_struct`) and of the types those embed. Pointers in it
//! lead to `void`: a relocation never looks through one (each dereference is relocated against
//! the pointed-to type, which the programs then name). Offsets, sizes, members and enumerators
//! are the kernel's own, so relocations resolve exactly as against the full BTF.
//!
//! Type ids are the copy's own, but for `struct task_struct`: the programs pass its id to the
//! kernel (`bpf_core_type_id_kernel()` for `bpf_rdonly_cast()`), so it is placed at the kernel's
//! id (after anonymous `int` fillers if fewer kept types come before it). The relocated programs
//! are then the same instruction for instruction as with the whole BTF. Attach targets, kfuncs
//! and ksyms are still resolved by libbpf against the real kernel BTF. Loading without the copy
//! stays possible (and is what the caller falls back to if anything here fails).
//!
//! The same parse answers [`kernel_facts`]: what the kernel's code does where only its BTF shows
//! it (a function's presence), for behaviour its version number cannot tell (distributions
//! backport).

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::OnceLock;

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
const MAGIC: u16 = 0xeb9f;
const HDR_LEN: usize = 24;

// Kinds (include/uapi/linux/btf.h).
const INT: u32 = 1;
const PTR: u32 = 2;
const ARRAY: u32 = 3;
const STRUCT: u32 = 4;
const UNION: u32 = 5;
const ENUM: u32 = 6;
const FWD: u32 = 7;
const TYPEDEF: u32 = 8;
const VOLATILE: u32 = 9;
const CONST: u32 = 10;
const RESTRICT: u32 = 11;
const FUNC: u32 = 12;
const FUNC_PROTO: u32 = 13;
const VAR: u32 = 14;
const DATASEC: u32 = 15;
const FLOAT: u32 = 16;
const DECL_TAG: u32 = 17;
const TYPE_TAG: u32 = 18;
const ENUM64: u32 = 19;

/// The reduced BTF, open for libbpf to read.
pub(crate) struct MinBtf {
    _file: File,
    /// `/proc/self/fd/N` of the memfd holding it.
    pub(crate) path: CString,
}

/// The essential name of a type name: without a `___flavor` suffix.
pub(crate) fn essential(name: &[u8]) -> &[u8] {
    match name.windows(3).position(|w| w == b"___") {
        Some(i) => &name[..i],
        None => name,
    }
}

/// What the running kernel's code does, as its BTF shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KernelFacts {
    /// /proc names a workqueue worker by its full worker id, not by its comm: wq_worker_comm()
    /// calls format_worker_id() (6.10+, "workqueue: Refactor worker ID formatting and make
    /// wq_worker_comm() use full ID string"), which is in BTF as a function of its own.
    pub(crate) wq_worker_full_id: bool,
    /// The mm's rss counters are per-CPU (`percpu_counter`, 6.2+), with an approximate total
    /// and pending deltas, rather than atomics in `struct mm_rss_stat`.
    pub(crate) rss_percpu: bool,
}

static FACTS: OnceLock<KernelFacts> = OnceLock::new();

/// The running kernel's [`KernelFacts`], read once per process (by [`for_names`] on its way,
/// else here); all false without BTF.
pub(crate) fn kernel_facts() -> KernelFacts {
    *FACTS.get_or_init(|| {
        std::fs::read(VMLINUX)
            .ok()
            .and_then(|raw| Btf::parse(&raw)?.facts())
            .unwrap_or_default()
    })
}

/// Builds the reduced BTF for types named `names` (essential names) from the running kernel's.
pub(crate) fn for_names(names: &HashSet<Vec<u8>>) -> Option<MinBtf> {
    let raw = std::fs::read(VMLINUX).ok()?;
    let btf = Btf::parse(&raw)?;
    if let Some(f) = btf.facts() {
        let _ = FACTS.set(f);
    }
    let (out, _) = btf.reduce(names)?;
    // SAFETY: memfd_create with a valid NUL-terminated name; the fd is ours to own.
    let fd = unsafe { libc::memfd_create(c"taskdiag-btf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(&out).ok()?;
    let path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    Some(MinBtf { _file: file, path })
}

/// A parsed BTF blob: where each type's record starts.
struct Btf<'a> {
    types: &'a [u8],
    strs: &'a [u8],
    /// Offset in `types` of type id `i + 1`.
    offs: Vec<u32>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

impl<'a> Btf<'a> {
    fn parse(raw: &'a [u8]) -> Option<Self> {
        // BTF is in host byte order; this parser reads little-endian only.
        if cfg!(target_endian = "big") {
            return None;
        }
        if u16::from_le_bytes(raw.get(0..2)?.try_into().ok()?) != MAGIC {
            return None;
        }
        let hdr_len = u32_at(raw, 4)? as usize;
        let (type_off, type_len) = (u32_at(raw, 8)? as usize, u32_at(raw, 12)? as usize);
        let (str_off, str_len) = (u32_at(raw, 16)? as usize, u32_at(raw, 20)? as usize);
        let types = raw.get(hdr_len + type_off..hdr_len + type_off + type_len)?;
        let strs = raw.get(hdr_len + str_off..hdr_len + str_off + str_len)?;
        let mut offs = Vec::with_capacity(type_len / 16);
        let mut pos = 0usize;
        while pos < types.len() {
            offs.push(pos as u32);
            pos += record_len(types, pos)?;
        }
        (pos == types.len()).then_some(Btf { types, strs, offs })
    }

    fn name(&self, off: u32) -> &'a [u8] {
        let s = self.strs.get(off as usize..).unwrap_or_default();
        &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
    }

    /// The [`KernelFacts`] of this BTF; `None` if a record is cut short.
    fn facts(&self) -> Option<KernelFacts> {
        let mut f = KernelFacts {
            wq_worker_full_id: false,
            rss_percpu: true,
        };
        for id in 1..=self.offs.len() as u32 {
            let r = self.rec(id)?;
            match (kind(r), self.name(u32_at(r, 0)?)) {
                (FUNC, b"format_worker_id") => f.wq_worker_full_id = true,
                (STRUCT, b"mm_rss_stat") => f.rss_percpu = false,
                _ => {}
            }
        }
        Some(f)
    }

    /// The record of type `id` (1-based).
    fn rec(&self, id: u32) -> Option<&'a [u8]> {
        let start = *self.offs.get((id as usize).checked_sub(1)?)? as usize;
        let len = record_len(self.types, start)?;
        self.types.get(start..start + len)
    }

    /// The reduced BTF as bytes, and the number of types in it. `None` if the kernel's has
    /// no `struct task_struct`.
    fn reduce(&self, names: &HashSet<Vec<u8>>) -> Option<(Vec<u8>, usize)> {
        // Roots: the named types of the kinds a relocation can be about.
        let mut keep: Vec<u32> = Vec::new();
        let mut task_struct = None;
        for id in 1..=self.offs.len() as u32 {
            let r = self.rec(id)?;
            let k = kind(r);
            if !matches!(k, STRUCT | UNION | ENUM | ENUM64 | TYPEDEF | FWD) {
                continue;
            }
            let name = self.name(u32_at(r, 0)?);
            if !name.is_empty() && names.contains(name) {
                keep.push(id);
                if k == STRUCT && name == b"task_struct" {
                    task_struct = Some(id);
                }
            }
        }
        // Everything they contain, not through pointers.
        let mut seen: HashSet<u32> = keep.iter().copied().collect();
        let mut i = 0;
        while i < keep.len() {
            let r = self.rec(keep[i])?;
            i += 1;
            for t in refs(r)? {
                if t != 0 && seen.insert(t) {
                    keep.push(t);
                }
            }
        }
        // task_struct at its kernel id: the kept types before it, fillers if too few.
        let ts = task_struct?;
        keep.sort_unstable();
        keep.retain(|&id| id != ts);
        let before = keep.len().min(ts as usize - 1);
        let fillers = ts as usize - 1 - before;
        let mut order: Vec<Option<u32>> = keep[..before].iter().map(|&id| Some(id)).collect();
        order.extend(std::iter::repeat_n(None, fillers));
        order.push(Some(ts));
        order.extend(keep[before..].iter().map(|&id| Some(id)));
        let new_id: HashMap<u32, u32> = order
            .iter()
            .enumerate()
            .filter_map(|(i, id)| Some(((*id)?, i as u32 + 1)))
            .collect();
        debug_assert_eq!(new_id.get(&ts), Some(&ts));
        let mut strs = Strings::default();
        let mut types = Vec::with_capacity(order.len() * 64);
        for id in &order {
            let Some(id) = *id else {
                // An anonymous 32-bit int: no relocation looks at it.
                types.extend_from_slice(&0u32.to_le_bytes());
                types.extend_from_slice(&(INT << 24).to_le_bytes());
                types.extend_from_slice(&4u32.to_le_bytes());
                types.extend_from_slice(&32u32.to_le_bytes());
                continue;
            };
            let r = self.rec(id)?;
            let start = types.len();
            types.extend_from_slice(r);
            let out = &mut types[start..];
            let remap = |t: u32| new_id.get(&t).copied().unwrap_or(0);
            let k = kind(r);
            set_u32(out, 0, strs.add(self.name(u32_at(r, 0)?)));
            match k {
                // Pointers to void: nothing is relocated through them.
                PTR => set_u32(out, 8, 0),
                TYPEDEF | VOLATILE | CONST | RESTRICT | TYPE_TAG => {
                    set_u32(out, 8, remap(u32_at(r, 8)?));
                }
                ARRAY => {
                    set_u32(out, 12, remap(u32_at(r, 12)?));
                    set_u32(out, 16, remap(u32_at(r, 16)?));
                }
                STRUCT | UNION => {
                    for m in 0..vlen(r) {
                        let o = 12 + 12 * m;
                        set_u32(out, o, strs.add(self.name(u32_at(r, o)?)));
                        set_u32(out, o + 4, remap(u32_at(r, o + 4)?));
                    }
                }
                ENUM => {
                    for m in 0..vlen(r) {
                        let o = 12 + 8 * m;
                        set_u32(out, o, strs.add(self.name(u32_at(r, o)?)));
                    }
                }
                ENUM64 => {
                    for m in 0..vlen(r) {
                        let o = 12 + 12 * m;
                        set_u32(out, o, strs.add(self.name(u32_at(r, o)?)));
                    }
                }
                FUNC_PROTO => {
                    set_u32(out, 8, remap(u32_at(r, 8)?));
                    for m in 0..vlen(r) {
                        let o = 12 + 8 * m;
                        set_u32(out, o, strs.add(self.name(u32_at(r, o)?)));
                        set_u32(out, o + 4, remap(u32_at(r, o + 4)?));
                    }
                }
                INT | FWD | FLOAT => {}
                // Not reachable without going through a pointer or a declaration.
                _ => return None,
            }
        }
        Some((blob(&types, &strs.buf), order.len()))
    }
}

/// A raw BTF blob: header, type section, string section.
fn blob(types: &[u8], strs: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HDR_LEN + types.len() + strs.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(1); // version
    out.push(0); // flags
    let (t, s) = (types.len() as u32, strs.len() as u32);
    // hdr_len, type_off, type_len, str_off (after the types), str_len
    for v in [HDR_LEN as u32, 0, t, t, s] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(types);
    out.extend_from_slice(strs);
    out
}

fn kind(r: &[u8]) -> u32 {
    (u32::from_le_bytes([r[4], r[5], r[6], r[7]]) >> 24) & 0x1f
}

fn vlen(r: &[u8]) -> usize {
    (u32::from_le_bytes([r[4], r[5], r[6], r[7]]) & 0xffff) as usize
}

fn set_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Bytes of the type record at `pos`: the 12-byte common part and its kind's data.
fn record_len(types: &[u8], pos: usize) -> Option<usize> {
    let r = types.get(pos..pos + 12)?;
    let n = vlen(r);
    let extra = match kind(r) {
        INT => 4,
        PTR | FWD | TYPEDEF | VOLATILE | CONST | RESTRICT | FUNC | FLOAT | TYPE_TAG => 0,
        ARRAY => 12,
        STRUCT | UNION => 12 * n,
        ENUM => 8 * n,
        FUNC_PROTO => 8 * n,
        VAR => 4,
        DATASEC => 12 * n,
        DECL_TAG => 4,
        ENUM64 => 12 * n,
        _ => return None, // a kind this reader does not know
    };
    (pos + 12 + extra <= types.len()).then_some(12 + extra)
}

/// The type ids a record refers to, pointers not followed.
fn refs(r: &[u8]) -> Option<Vec<u32>> {
    Some(match kind(r) {
        TYPEDEF | VOLATILE | CONST | RESTRICT | TYPE_TAG => vec![u32_at(r, 8)?],
        ARRAY => vec![u32_at(r, 12)?, u32_at(r, 16)?],
        STRUCT | UNION => (0..vlen(r))
            .map(|m| u32_at(r, 12 + 12 * m + 4))
            .collect::<Option<_>>()?,
        FUNC_PROTO => std::iter::once(u32_at(r, 8))
            .chain((0..vlen(r)).map(|m| u32_at(r, 12 + 8 * m + 4)))
            .collect::<Option<_>>()?,
        INT | PTR | ENUM | ENUM64 | FWD | FLOAT => Vec::new(),
        _ => return None,
    })
}

/// A string section being written: offset 0 is the empty string.
struct Strings {
    buf: Vec<u8>,
    at: HashMap<Vec<u8>, u32>,
}

impl Default for Strings {
    fn default() -> Self {
        Strings {
            buf: vec![0],
            at: HashMap::new(),
        }
    }
}

impl Strings {
    fn add(&mut self, s: &[u8]) -> u32 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&o) = self.at.get(s) {
            return o;
        }
        let o = self.buf.len() as u32;
        self.buf.extend_from_slice(s);
        self.buf.push(0);
        self.at.insert(s.to_vec(), o);
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob from (name, kind, vlen, size_or_type, extra u32s) records.
    fn make(types: &[(&str, u32, u32, u32, Vec<u32>)]) -> Vec<u8> {
        let mut strs = Strings::default();
        let mut t = Vec::new();
        for (name, k, n, st, extra) in types {
            t.extend_from_slice(&strs.add(name.as_bytes()).to_le_bytes());
            t.extend_from_slice(&((k << 24) | n).to_le_bytes());
            t.extend_from_slice(&st.to_le_bytes());
            for e in extra {
                t.extend_from_slice(&e.to_le_bytes());
            }
        }
        blob(&t, &strs.buf)
    }

    #[test]
    fn keeps_named_types_and_what_they_embed_but_not_what_they_point_to() {
        // 1 int, 2 struct inner {int x}, 3 struct other {int y}, 4 ptr -> other,
        // 5 struct task_struct {inner in; other *p;}, 6 struct unrelated {int z}
        let b = make(&[
            ("int", INT, 0, 4, vec![32]),
            ("inner", STRUCT, 1, 4, vec![0, 1, 0]),
            ("other", STRUCT, 1, 4, vec![0, 1, 0]),
            ("", PTR, 0, 3, vec![]),
            ("task_struct", STRUCT, 2, 16, vec![0, 2, 0, 0, 4, 64]),
            ("unrelated", STRUCT, 1, 4, vec![0, 1, 0]),
        ]);
        let btf = Btf::parse(&b).unwrap();
        let names: HashSet<Vec<u8>> = [b"task_struct".to_vec()].into();
        let (out, kept) = btf.reduce(&names).unwrap();
        // int, inner, ptr, a filler, task_struct (at its id, 5): not other (behind the
        // pointer), not unrelated.
        assert_eq!(kept, 5);
        let r = Btf::parse(&out).unwrap();
        let names: Vec<&[u8]> = (1..=5)
            .map(|i| r.name(u32_at(r.rec(i).unwrap(), 0).unwrap()))
            .collect();
        assert_eq!(names, [&b"int"[..], b"inner", b"", b"", b"task_struct"]);
        assert_eq!(kind(r.rec(4).unwrap()), INT);
        // The pointer leads to void; task_struct's members point at the new ids.
        assert_eq!(u32_at(r.rec(3).unwrap(), 8), Some(0));
        let ts = r.rec(5).unwrap();
        assert_eq!(u32_at(ts, 16), Some(2)); // member 0 type: inner
        assert_eq!(u32_at(ts, 28), Some(3)); // member 1 type: the pointer
        assert_eq!(u32_at(ts, 32), Some(64)); // member 1 offset kept
    }

    #[test]
    fn facts_come_from_the_functions_the_kernel_has() {
        let proto = ("", FUNC_PROTO, 0, 0, vec![]);
        let with = make(&[proto.clone(), ("format_worker_id", FUNC, 0, 1, vec![])]);
        let facts = Btf::parse(&with).unwrap().facts().unwrap();
        assert!(facts.wq_worker_full_id && facts.rss_percpu);
        // 6.1: wq_worker_comm() without format_worker_id(); a struct of that name is no
        // function; atomic rss counters.
        let without = make(&[
            proto,
            ("wq_worker_comm", FUNC, 0, 1, vec![]),
            ("format_worker_id", STRUCT, 0, 0, vec![]),
            ("mm_rss_stat", STRUCT, 0, 0, vec![]),
        ]);
        let facts = Btf::parse(&without).unwrap().facts().unwrap();
        assert_eq!(facts, KernelFacts::default());
    }

    #[test]
    fn essential_names_drop_the_flavor() {
        assert_eq!(essential(b"task_struct___pre514"), b"task_struct");
        assert_eq!(essential(b"pid"), b"pid");
    }

    #[test]
    fn the_running_kernels_btf_reduces_to_a_small_valid_blob() {
        let Ok(raw) = std::fs::read(VMLINUX) else {
            eprintln!("skipped: no {VMLINUX}");
            return;
        };
        let btf = Btf::parse(&raw).expect("the kernel's BTF parses");
        let names: HashSet<Vec<u8>> = ["task_struct", "mm_struct", "vm_area_struct"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let (out, kept) = btf.reduce(&names).unwrap();
        assert!(kept < btf.offs.len() / 10, "{kept} of {}", btf.offs.len());
        // task_struct keeps its kernel id.
        let id = |b: &Btf| {
            (1..=b.offs.len() as u32).find(|&i| {
                let r = b.rec(i).unwrap();
                kind(r) == STRUCT && b.name(u32_at(r, 0).unwrap()) == b"task_struct"
            })
        };
        assert_eq!(id(&Btf::parse(&out).unwrap()), id(&btf));
        // libbpf accepts it.
        // SAFETY: btf__new copies from a valid buffer of the given size; freed below.
        let p = unsafe { libbpf_sys::btf__new(out.as_ptr().cast(), out.len() as u32) };
        assert!(
            !p.is_null() && (p as isize) > 0,
            "libbpf rejected the reduced BTF"
        );
        // SAFETY: `p` is a btf object we own.
        unsafe { libbpf_sys::btf__free(p) };
    }
}
