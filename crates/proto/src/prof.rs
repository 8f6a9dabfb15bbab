//! The constants `taskdiag profile`'s BPF programs and its user space share: thread states,
//! stack flags and the stack depth. The records themselves ([`crate::ProfKey`],
//! [`crate::ProfStackHdr`]) are in [`crate::layout`] with the others.

/// Addresses kept per stack, kernel or user: perf's default (`kernel.perf_event_max_stack`).
pub const PROF_STACK_DEPTH: usize = 127;

/// The stack filled all [`PROF_STACK_DEPTH`] addresses: its outer frames are cut off.
pub const PROF_STACK_TRUNCATED: u32 = 1 << 0;
/// The second address is the word at the user stack pointer, a guess at a frameless leaf
/// function's return address; user space keeps it only if it falls in executable code.
pub const PROF_STACK_LEAF_SP: u32 = 1 << 2;

/// [`crate::ProfKey::flags`]: the thread is a kernel thread.
pub const PROF_F_KTHREAD: u32 = 1 << 0;

/// What a sampled thread was doing: the root frame of its stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum ProfState {
    /// On a CPU (a perf_event sample).
    Running = 0,
    /// Ready to run, waiting for a CPU (R, not on a CPU).
    Runnable = 1,
    /// S: interruptible sleep.
    Sleeping = 3,
    /// D: uninterruptible sleep (disk and other waits that ignore signals).
    Disk = 4,
    /// T: stopped by a signal.
    Stopped = 5,
    /// t: stopped by a tracer.
    Traced = 6,
    /// X: dead (seen for an instant).
    Dead = 7,
    /// Z: a zombie.
    Zombie = 8,
    /// P: a parked kernel thread.
    Parked = 9,
    /// I: an idle kernel thread.
    Idle = 10,
}

impl ProfState {
    /// The off-CPU states are `STATE_INDEX_BASE` + the kernel's task_state_index() (the index
    /// into "RSDTtXZPI"), R excepted (it is [`ProfState::Runnable`]).
    pub const STATE_INDEX_BASE: u32 = 2;

    /// Every state.
    pub const ALL: [ProfState; 10] = [
        Self::Running,
        Self::Runnable,
        Self::Sleeping,
        Self::Disk,
        Self::Stopped,
        Self::Traced,
        Self::Dead,
        Self::Zombie,
        Self::Parked,
        Self::Idle,
    ];

    /// The state for a [`crate::ProfKey::state`] value.
    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| *s as u32 == v)
    }

    /// Its name, as the root frame shows it within brackets.
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Runnable => "runnable",
            Self::Sleeping => "sleeping",
            Self::Disk => "disk",
            Self::Stopped => "stopped",
            Self::Traced => "traced",
            Self::Dead => "dead",
            Self::Zombie => "zombie",
            Self::Parked => "parked",
            Self::Idle => "idle",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_cpu_states_follow_the_kernels_state_index() {
        // "RSDTtXZPI": index 1 (S) is Sleeping, 8 (I) is Idle.
        for (i, c) in "RSDTtXZPI".chars().enumerate().skip(1) {
            let s = ProfState::from_u32(ProfState::STATE_INDEX_BASE + i as u32).expect("a state");
            assert_eq!(crate::state_index(c as u8), Some(i as u8));
            assert_ne!(s, ProfState::Running);
        }
        assert_eq!(
            ProfState::from_u32(ProfState::STATE_INDEX_BASE + 1),
            Some(ProfState::Sleeping)
        );
        assert_eq!(
            ProfState::from_u32(ProfState::STATE_INDEX_BASE + 8),
            Some(ProfState::Idle)
        );
        assert_eq!(ProfState::from_u32(99), None);
    }
}
