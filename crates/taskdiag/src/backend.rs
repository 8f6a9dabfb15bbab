//! Backend choice: [`BackendKind`], the one place backends are named for people (the CLI's
//! `--backend`, the tools' `TASKDIAG_BACKEND`). The names of the real backends are the wire
//! format's ([`BackendId::name`], as a stream's START message reports them); `auto` is the only
//! name added here.

use std::fmt;
use std::str::FromStr;

use taskdiag_proto::BackendId;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// BPF if it loads, else the daemon if its socket answers, else procfs.
    Auto,
    /// eBPF task iterators; fails without the privilege to load them.
    Bpf,
    /// taskdiagd, over its Unix socket ([`crate::client::socket_path`]).
    Daemon,
    /// /proc.
    Procfs,
}

impl BackendKind {
    /// Every choice, in the order help texts list them.
    pub const ALL: [BackendKind; 4] = [Self::Auto, Self::Bpf, Self::Daemon, Self::Procfs];

    /// The name of [`BackendKind::Auto`].
    const AUTO: &'static str = "auto";

    /// The backend this choice names, `None` for [`BackendKind::Auto`] (decided when opened).
    pub fn id(self) -> Option<BackendId> {
        match self {
            Self::Auto => None,
            Self::Bpf => Some(BackendId::Bpf),
            Self::Daemon => Some(BackendId::Daemon),
            Self::Procfs => Some(BackendId::Procfs),
        }
    }

    /// The choice that names `id`.
    pub fn of(id: BackendId) -> Self {
        match id {
            BackendId::Bpf => Self::Bpf,
            BackendId::Daemon => Self::Daemon,
            BackendId::Procfs => Self::Procfs,
        }
    }

    /// The choice's name: `auto`, or the backend's [`BackendId::name`].
    pub fn name(self) -> &'static str {
        self.id().map_or(Self::AUTO, BackendId::name)
    }

    /// Every name, in the order of [`BackendKind::ALL`].
    pub fn names() -> [&'static str; 4] {
        Self::ALL.map(Self::name)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no backend's; says which names are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected {}", list(&BackendKind::names()))]
pub struct UnknownBackend(
    /// The name given.
    pub String,
);

/// "a, b, c or d".
fn list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

impl FromStr for BackendKind {
    type Err = UnknownBackend;

    /// Parses a [`BackendKind::name`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == Self::AUTO {
            return Ok(Self::Auto);
        }
        BackendId::from_name(s)
            .map(Self::of)
            .ok_or_else(|| UnknownBackend(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_round_trips_through_its_name() {
        for k in BackendKind::ALL {
            assert_eq!(k.name().parse::<BackendKind>(), Ok(k));
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(BackendKind::names(), ["auto", "bpf", "daemon", "procfs"]);
    }

    #[test]
    fn real_backends_are_named_as_the_wire_format_names_them() {
        for id in BackendId::ALL {
            let k = BackendKind::of(id);
            assert_eq!(k.id(), Some(id));
            assert_eq!(k.name(), id.name());
        }
        assert_eq!(BackendKind::Auto.id(), None);
    }

    #[test]
    fn unknown_names_are_refused_with_the_list() {
        for bad in ["", "BPF", "proc", "auto ", "daemons"] {
            let e = bad.parse::<BackendKind>().unwrap_err();
            assert_eq!(e, UnknownBackend(bad.to_owned()));
            assert_eq!(e.to_string(), "expected auto, bpf, daemon or procfs");
        }
    }
}
