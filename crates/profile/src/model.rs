//! The profile as the renderers see it: stacks of frame names, root first, with sample counts.
//!
//! A [`Profile`] is what a run produced after symbolization; `folded`, `svg`, `pprof` and
//! `table` render it. Nothing here reads the kernel.

/// One kind of frame, for colouring and for pprof's mapping of frames to binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// The synthetic root: the thread's state (`[running]`, `[sleeping]`, …).
    State,
    /// The thread: its name, with its pids when asked for.
    Thread,
    /// A user-space function.
    User,
    /// A kernel function (rendered with a `_[k]` suffix in folded output, as perf's
    /// stackcollapse does with --annotate-kernel).
    Kernel,
}

/// One frame of a stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// What sort of frame.
    pub kind: FrameKind,
    /// The function's name (demangled), or the state or thread label; an unresolved address
    /// as `0x…` or `[binary+0x…]`.
    pub name: String,
    /// The binary the frame's address falls in (`[kernel.kallsyms]` for kernel frames), when
    /// known.
    pub module: Option<String>,
}

/// A stack with its number of samples: frames from the root (the state) to the leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Root first: state, thread, user frames outermost first, then kernel frames.
    pub frames: Vec<Frame>,
    /// Samples that ended in exactly this stack.
    pub count: u64,
}

/// The thread-state detail of a group of samples, for the state table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    /// `running`, `runnable`, `sleeping`, `disk`, `stopped`, …
    pub state: String,
    /// The system call the thread was in (its name), `-` when running or in none.
    pub syscall: String,
    /// The first kernel function outside the scheduler on its stack, `-` if none.
    pub wchan: String,
    /// The thread's name.
    pub comm: String,
}

/// A whole profile.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Every distinct stack and its count.
    pub stacks: Vec<Stack>,
    /// Samples per state detail, for `table`.
    pub states: Vec<(StateKey, u64)>,
    /// Sampling frequency in Hz: each sample weighs 1/hz seconds.
    pub hz: u64,
    /// How long the profile ran, in nanoseconds.
    pub duration_ns: u64,
}
