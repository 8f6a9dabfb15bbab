//! VMA flag bits: task_diag's `TASK_DIAG_VMA_F_*` numbering, with their /proc/PID/smaps
//! `VmFlags` mnemonics.
//!
//! The bits are the wire format's, not the kernel's `VM_*` values (which differ between kernel
//! versions); the BPF programs and the /proc parser each translate into them.

/// (bit, smaps mnemonic, name) for every flag, in bit order.
pub const FLAGS: [(u64, &str, &str); 28] = [
    (1 << 0, "rd", "read"),
    (1 << 1, "wr", "write"),
    (1 << 2, "ex", "exec"),
    (1 << 3, "sh", "shared"),
    (1 << 4, "mr", "mayread"),
    (1 << 5, "mw", "maywrite"),
    (1 << 6, "me", "mayexec"),
    (1 << 7, "ms", "mayshare"),
    (1 << 8, "gd", "growsdown"),
    (1 << 9, "pf", "pfnmap"),
    (1 << 10, "dw", "denywrite"),
    (1 << 11, "mp", "mpx"),
    (1 << 12, "lo", "locked"),
    (1 << 13, "io", "io"),
    (1 << 14, "sr", "seq_read"),
    (1 << 15, "rr", "rand_read"),
    (1 << 16, "dc", "dontcopy"),
    (1 << 17, "de", "dontexpand"),
    (1 << 18, "ac", "account"),
    (1 << 19, "nr", "noreserve"),
    (1 << 20, "ht", "hugetlb"),
    (1 << 21, "ar", "arch_1"),
    (1 << 22, "dd", "dontdump"),
    (1 << 23, "sd", "softdirty"),
    (1 << 24, "mm", "mixedmap"),
    (1 << 25, "hg", "hugepage"),
    (1 << 26, "nh", "nohugepage"),
    (1 << 27, "mg", "mergeable"),
];

/// READ.
pub const READ: u64 = 1 << 0;
/// WRITE.
pub const WRITE: u64 = 1 << 1;
/// EXEC.
pub const EXEC: u64 = 1 << 2;
/// SHARED.
pub const SHARED: u64 = 1 << 3;
/// MAYSHARE: the `s` (else `p`) of /proc/PID/maps' permissions.
pub const MAYSHARE: u64 = 1 << 7;
/// The bits /proc/PID/maps' permissions column shows.
pub const FROM_PERMS: u64 = READ | WRITE | EXEC | MAYSHARE;
/// Every bit defined here.
pub const ALL: u64 = (1 << 28) - 1;

/// The kernel's `VM_SHARED` (include/linux/mm.h): a shared mapping. The BPF map walk tests it
/// on the raw flags too (`TD_VM_SHARED` in the generated C header): of the file mappings, only
/// shared anonymous memory can have an `anon_name`.
pub const KERNEL_VM_SHARED: u64 = 0x8;

/// Kernel `VM_*` values (include/linux/mm.h, Linux 5.x-6.x on 64-bit) and the bit each
/// becomes here. Flags the kernel no longer has (DENYWRITE, MPX) are never set.
const KERNEL: [(u64, u64); 26] = [
    (0x1, 1 << 0),
    (0x2, 1 << 1),
    (0x4, 1 << 2),
    (KERNEL_VM_SHARED, SHARED),
    (0x10, 1 << 4),
    (0x20, 1 << 5),
    (0x40, 1 << 6),
    (0x80, 1 << 7),
    (0x100, 1 << 8),
    (0x400, 1 << 9),
    (0x2000, 1 << 12),
    (0x4000, 1 << 13),
    (0x8000, 1 << 14),
    (0x1_0000, 1 << 15),
    (0x2_0000, 1 << 16),
    (0x4_0000, 1 << 17),
    (0x10_0000, 1 << 18),
    (0x20_0000, 1 << 19),
    (0x40_0000, 1 << 20),
    (0x100_0000, 1 << 21),
    (0x400_0000, 1 << 22),
    (0x800_0000, 1 << 23),
    (0x1000_0000, 1 << 24),
    (0x2000_0000, 1 << 25),
    (0x4000_0000, 1 << 26),
    (0x8000_0000, 1 << 27),
];

/// The bits for a kernel `vm_flags` value.
pub fn from_kernel(vm_flags: u64) -> u64 {
    KERNEL
        .iter()
        .filter(|(k, _)| vm_flags & k != 0)
        .fold(0, |f, (_, b)| f | b)
}

/// The bit for an smaps `VmFlags` mnemonic (0 for one this format does not carry).
pub fn from_mnemonic(m: &str) -> u64 {
    from_mnemonic_bytes(m.as_bytes())
}

/// Bits by mnemonic, for the two-lowercase-letter mnemonics every flag has: `a..z` x `a..z`.
const BY_MNEMONIC: [u64; 26 * 26] = {
    let mut t = [0u64; 26 * 26];
    let mut i = 0;
    while i < FLAGS.len() {
        let m = FLAGS[i].1.as_bytes();
        t[(m[0] - b'a') as usize * 26 + (m[1] - b'a') as usize] = FLAGS[i].0;
        i += 1;
    }
    t
};

/// [`from_mnemonic`] on bytes, as smaps has them: one table lookup (smaps lists ~8 per
/// mapping, and a large dump has hundreds of thousands of mappings).
pub fn from_mnemonic_bytes(m: &[u8]) -> u64 {
    match m {
        [a @ b'a'..=b'z', b @ b'a'..=b'z'] => {
            BY_MNEMONIC[(a - b'a') as usize * 26 + (b - b'a') as usize]
        }
        _ => 0,
    }
}

/// The bits a /proc/PID/maps permissions column (`r-xp`) shows.
pub fn from_perms(p: &[u8]) -> u64 {
    let mut f = 0;
    let bit = |i: usize, c: u8, b: u64| if p.get(i) == Some(&c) { b } else { 0 };
    f |= bit(0, b'r', READ);
    f |= bit(1, b'w', WRITE);
    f |= bit(2, b'x', EXEC);
    f |= bit(3, b's', MAYSHARE);
    f
}

/// The permissions column /proc/PID/maps prints for `flags`.
pub fn perms(flags: u64) -> [u8; 4] {
    [
        if flags & READ != 0 { b'r' } else { b'-' },
        if flags & WRITE != 0 { b'w' } else { b'-' },
        if flags & EXEC != 0 { b'x' } else { b'-' },
        if flags & MAYSHARE != 0 { b's' } else { b'p' },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perms_round_trip_and_mnemonics_are_unique() {
        for p in [b"r-xp", b"rw-s", b"---p", b"rwxs"] {
            assert_eq!(&perms(from_perms(p)), p);
        }
        for (i, (b, m, _)) in FLAGS.iter().enumerate() {
            assert_eq!(*b, 1 << i);
            assert_eq!(from_mnemonic(m), *b);
        }
        assert_eq!(from_mnemonic("zz"), 0);
        for odd in [&b""[..], b"r", b"rdx", b"RD", b"r1", b"\xff\xff"] {
            assert_eq!(from_mnemonic_bytes(odd), 0, "{odd:?}");
        }
    }
}
