//! taskdiag's benchmark machinery, after the task_diag article's experiments (seed 000/001):
//! a load generator ([`spawn`]), the procfs floor as a raw-syscall loop ([`baseline`]), and
//! running rows of commands interleaved with their costs measured ([`measure`]), reported as
//! Markdown or JSON ([`report`]).
//!
//! It runs other programs (taskdiag itself, procps, psmisc, psutil) as separate processes and
//! never links their code: every row is a command line, measured from outside the same way.
//! What the rows are is the CLI's choice (`taskdiag bench`).

pub mod baseline;
pub mod measure;
pub mod report;
pub mod spawn;
pub mod svg;
