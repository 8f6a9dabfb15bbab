//! The profiler's errors, typed, each naming what failed (the program, the CPU, the path).

use std::io;
use std::path::PathBuf;

/// Why a profile could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The caller lacks CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN).
    #[error(
        "profiling needs root, or CAP_BPF and CAP_PERFMON: the kernel refused to load the \
         profiler's BPF programs ({0})"
    )]
    PermissionDenied(#[source] libbpf_rs::Error),
    /// The kernel refused the programs for another reason.
    #[error("loading the profiler's BPF programs: {0}")]
    Load(#[source] libbpf_rs::Error),
    /// A perf event could not be opened or attached on a CPU.
    #[error("sampling CPU {cpu}: {source}")]
    PerfEvent {
        /// The CPU.
        cpu: u32,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// The task iterator could not be attached or read.
    #[error("walking the tasks: {0}")]
    Iter(#[source] io::Error),
    /// A file the scope is named by could not be read (a pid's namespace, a cgroup).
    #[error("{}: {source}", path.display())]
    Path {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A process named with -p is not in the profiled pid namespace (or does not exist).
    #[error("no process {0} in the profiled pid namespace")]
    NoSuchProcess(u32),
}

impl ProfileError {
    /// A [`ProfileError::Path`] for `path`.
    pub(crate) fn path(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Path {
            path: path.into(),
            source,
        }
    }
}
