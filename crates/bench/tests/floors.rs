//! The harness end to end on the rows that need nothing but this crate (the /proc loops in Rust
//! and C, the new groups' C loops with their readlinks, the bare task iterator, the map-walk
//! floor): a quick run as JSON measures every row,
//! gives a ratio where a baseline is named, and leaves none of its spawned processes behind.
//! Runs as root (BPF), as CI does. The whole table, taskdiag included, is `make test`'s
//! `taskdiag-bench --quick`.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_taskdiag-bench");

/// Processes running this binary (the bench and the sleepers it forks); tasks that vanish or
/// that we may not inspect are not counted.
fn running_bench() -> usize {
    let me = Path::new(BIN).canonicalize().expect("the bench binary");
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            name.to_str()?.parse::<u32>().ok()?;
            std::fs::read_link(Path::new("/proc").join(name).join("exe")).ok()
        })
        .filter(|exe| *exe == me)
        .count()
}

#[test]
fn a_quick_run_measures_the_floors_and_leaves_no_process_behind() {
    let rows = [
        "P1",
        "P2",
        "P7",
        "C0",
        "C1",
        "C2",
        "C4",
        "C5",
        "B0",
        "B7",
        "Gsignal.C",
        "Gns.C",
        "Gns.Cl",
    ];
    let o = Command::new(BIN)
        .args(["--quick", "--format", "json", "--rows", &rows.join(",")])
        .output()
        .expect("run taskdiag-bench");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(v["tasks"].as_u64().expect("tasks") >= 300, "{v}");
    let got = v["rows"].as_array().expect("rows");
    assert_eq!(got.len(), rows.len(), "{v}");
    let row = |k: &str| {
        got.iter()
            .find(|r| r["key"] == k)
            .unwrap_or_else(|| panic!("row {k} in {v}"))
    };
    for key in rows {
        let r = row(key);
        assert!(r["wall_median_s"].as_f64().is_some_and(|w| w > 0.0), "{r}");
    }
    // B7 is compared with the /proc/*/maps loop; the floors with nothing.
    assert!(row("B7")["ratio"].is_f64(), "{}", row("B7"));
    assert!(row("P1")["ratio"].is_null());
    assert_eq!(running_bench(), 0, "spawned processes left behind");
}
