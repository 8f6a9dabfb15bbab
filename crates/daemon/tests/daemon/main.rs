//! Integration tests of taskdiagd: a real daemon (started per test on its own socket, as root,
//! as CI runs) and real clients, privileged and unprivileged (users created if missing).
//!
//! `harness` starts and stops daemons and runs commands as the test users; the other modules
//! test one subject each.

mod attack;
mod busy;
mod guarded;
mod harness;
mod identity;
mod maps;
mod permissions;
mod privs;
mod robust;
