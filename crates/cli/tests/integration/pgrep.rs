//! Differential tests of `taskdiag pgrep` (being written).
