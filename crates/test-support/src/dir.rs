//! Temporary directories for fixtures, reachable by the test users, removed on drop.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A new directory under the system's temporary directory, removed (with what it holds) on
/// drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A directory named after `tag`, this process and a counter, with `mode` (0o755 lets the
    /// test users reach it; 0o1777 makes it world-writable and sticky, like /tmp).
    pub fn with_mode(tag: &str, mode: u32) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("taskdiag-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
        TempDir(p)
    }

    /// [`TempDir::with_mode`] 0o755.
    pub fn new(tag: &str) -> TempDir {
        Self::with_mode(tag, 0o755)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path of `name` inside it.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
