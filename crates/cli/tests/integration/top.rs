//! Differential tests of `taskdiag top` (being written).
