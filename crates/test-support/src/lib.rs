//! Helpers shared by taskdiag's test suites (a dev-dependency only; never published).
//!
//! The integration tests run real processes as root and compare taskdiag with /proc and with
//! the procps/psmisc tools. What they have in common lives here, once:
//!
//! * [`process`]: fixture processes killed by pid (or by the process group they lead) when
//!   dropped, readiness lines, waiting for an exit (pidfd) or a condition, commands in a
//!   private mount namespace;
//! * [`users`]: the unprivileged test users (created if missing) and running programs as them
//!   with no capabilities (setpriv);
//! * [`tasks`]: reading /proc where tasks and threads come and go: a task that vanished
//!   between two reads (ENOENT, ESRCH) is skipped, never an error;
//! * [`bins`]: the workspace's built binaries, found beside the test executable (whatever the
//!   profile), never built from inside a test;
//! * [`compare`]: comparing a reference tool's output with ours when the system may change
//!   between the two reads, without hiding a real difference;
//! * [`dir`]: temporary directories removed on drop;
//! * [`python`]: the Python interpreter the test users can run, and `tdtest.py`, the helpers
//!   shared by the Python fixture scripts;
//! * [`wedge`]: a process whose memory-map lock is wedged (a FUSE file whose READ is never
//!   answered), whose memory no reader can get at until the fixture is released.

pub mod bins;
pub mod compare;
pub mod dir;
pub mod process;
pub mod python;
pub mod tasks;
pub mod users;
pub mod wedge;
