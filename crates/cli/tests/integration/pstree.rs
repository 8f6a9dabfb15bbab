//! Differential tests of `taskdiag pstree` (being written).
