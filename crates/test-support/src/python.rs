//! Python for fixtures: the interpreter the test users can run, and `tdtest.py`, the helpers
//! the Python fixture scripts share (naming a task, dying with the parent, saying ready,
//! waiting for a zombie, mapping many pages, racing set-user-ID execs).

use std::process::Command;

/// The system Python, which the test users can run (a developer's pyenv under /root is out
/// of their reach).
pub const PYTHON: &str = "/usr/bin/python3";

/// The directory holding `tdtest.py`.
pub const HELPERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python");

/// Lets `c` (a Python interpreter, perhaps run through setpriv) `import tdtest`.
pub fn with_helpers(c: &mut Command) -> &mut Command {
    c.env("PYTHONPATH", HELPERS)
}

/// [`PYTHON`] running `script` (a path) with `args`, able to `import tdtest`.
pub fn script(script: &str) -> Command {
    let mut c = Command::new(PYTHON);
    with_helpers(&mut c).arg(script);
    c
}

/// [`PYTHON`] running the code `code` (`-c`), able to `import tdtest`.
pub fn code(code: &str) -> Command {
    let mut c = Command::new(PYTHON);
    with_helpers(&mut c).args(["-c", code]);
    c
}
