//! taskdiagd: the taskdiag protocol on a Unix socket, for callers that may not load BPF.
//!
//! The daemon loads the BPF task iterators once, at start, as a privileged process, then keeps
//! none of its privileges ([`privs`]) and answers requests from any local user over a Unix
//! stream socket ([`listen`]). Each caller is identified by the kernel ([`peer`]) and sees
//! exactly what its own /proc would show it: its pid namespace's tasks with its pid numbers,
//! hidepid as its /proc is mounted, ids as its user namespace maps them (`taskdiag::view`
//! holds those rules). Requests are framed and checked in [`request`]. [`server`] runs the
//! event loop that holds every connection and applies the connection limits; `work` has the
//! threads that identify clients and answer requests, in the order and within the shares
//! `sched` decides; `conn` is a connection and the output held for it within the memory
//! budget; `poll` wraps epoll. The wire format is `taskdiag-proto`'s; the client side is
//! `taskdiag::client`.
//!
//! docs/SECURITY.md describes the threat model, docs/PERMISSIONS.md the rule for each group.

mod conn;
pub mod listen;
pub mod peer;
mod poll;
pub mod privs;
pub mod request;
mod sched;
pub mod server;
mod work;
