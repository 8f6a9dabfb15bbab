//! `taskdiag._taskdiag`, the native part of the Python package `taskdiag`: one request
//! through the same backends as the command-line tools (BPF, taskdiagd, /proc; the GIL
//! released while they answer), its tasks turned into columns with psutil's names, units and
//! rules (module `columns`), held and handed to Python as Arrow, numpy or Python objects
//! (module `table`).
//!
//! The Python side (`python/taskdiag/`) adds the documentation users read and the
//! psutil-compatible layer, `taskdiag.psutil`.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use taskdiag::BackendKind;
use taskdiag_tools::snapshot::{Query, Source};

mod columns;
mod table;

use table::ProcTable;

fn valid_names() -> String {
    columns::attributes()
        .iter()
        .map(|(a, cols)| {
            if cols.len() == 1 && cols[0] == *a {
                a.to_string()
            } else {
                format!("{a} ({})", cols.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// snapshot(attrs=None, threads=False, pids=None, backend="auto")
/// --
///
/// One look at the tasks, as a ProcTable (see the taskdiag module's documentation).
#[pyfunction]
#[pyo3(signature = (attrs=None, threads=false, pids=None, backend="auto"))]
fn snapshot(
    py: Python<'_>,
    attrs: Option<Vec<String>>,
    threads: bool,
    pids: Option<Vec<u32>>,
    backend: &str,
) -> PyResult<ProcTable> {
    let cols = columns::select(attrs.as_deref()).map_err(|e| {
        PyValueError::new_err(format!(
            "invalid attribute name {:?}; valid are: {}",
            e.0,
            valid_names()
        ))
    })?;
    let kind: BackendKind = backend.parse().map_err(|e: taskdiag::UnknownBackend| {
        PyValueError::new_err(format!("backend={backend:?}: {e}"))
    })?;
    let groups = columns::groups(&cols);
    // Everything below runs without the GIL: errors cross back as text.
    let (arrays, backend) = py
        .detach(|| -> Result<_, String> {
            let os = |e: taskdiag_tools::snapshot::Error| e.to_string();
            let mut src = Source::open_kind(kind, groups).map_err(os)?;
            let q = Query { threads, groups };
            let mut tasks = match &pids {
                None => src.take(&q).map_err(os)?,
                Some(p) => src.take_tgids(&q, p).map_err(os)?,
            };
            tasks.retain(columns::whole);
            let mut ctx = columns::Ctx::read().map_err(os)?;
            Ok((columns::build(&cols, &tasks, &mut ctx), src.backend_name()))
        })
        .map_err(PyOSError::new_err)?;
    Ok(ProcTable::new(
        cols.iter().map(|d| d.name).collect(),
        arrays,
        backend,
    ))
}

/// columns() -> list[tuple[str, str, str, str]]
/// --
///
/// Every column a snapshot can have: (name, psutil attribute, type, description).
#[pyfunction(name = "columns")]
fn column_list() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    columns::COLUMNS
        .iter()
        .map(|d| {
            let kind = match d.get.kind() {
                columns::Kind::U32 | columns::Kind::I32 | columns::Kind::U64 => "int",
                columns::Kind::F64 => "float",
                columns::Kind::Bool => "bool",
                columns::Kind::Str => "str",
                columns::Kind::StrList => "list[str]",
                columns::Kind::U32List => "list[int]",
            };
            (d.name, d.attr, kind, d.doc)
        })
        .collect()
}

/// attributes() -> dict[str, list[str]]
/// --
///
/// Every attribute (psutil's, and taskdiag's extras) with its columns, in table order.
#[pyfunction]
fn attributes(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (a, cols) in columns::attributes() {
        d.set_item(a, cols)?;
    }
    Ok(d)
}

/// attribute_groups() -> dict[str, int]
/// --
///
/// Every attribute with the taskdiag groups its columns come from, as ``refused_groups``
/// bits (BASE left out).
#[pyfunction]
fn attribute_groups(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (a, g) in columns::attribute_groups() {
        d.set_item(a, g)?;
    }
    Ok(d)
}

/// The native module.
#[pymodule]
fn _taskdiag(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(column_list, m)?)?;
    m.add_function(wrap_pyfunction!(attributes, m)?)?;
    m.add_function(wrap_pyfunction!(attribute_groups, m)?)?;
    m.add_class::<ProcTable>()?;
    Ok(())
}
