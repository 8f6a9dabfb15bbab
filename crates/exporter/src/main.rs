//! The `taskdiag-exporter` binary: [`taskdiag_exporter::main`] under its own name (the same
//! program as `taskdiag exporter`).

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(taskdiag_exporter::main(&args));
}
