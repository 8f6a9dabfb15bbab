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
use taskdiag_tools::snapshot::Query;

mod columns;
mod source;
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

/// The backend named `name` (`auto`, `bpf`, `daemon`, `procfs`); ValueError for another.
fn backend_kind(name: &str) -> PyResult<BackendKind> {
    name.parse().map_err(|e: taskdiag::UnknownBackend| {
        PyValueError::new_err(format!("backend={name:?}: {e}"))
    })
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
    table_of(py, attrs, backend, |src, groups, b, ctx| {
        let q = Query { threads, groups };
        match &pids {
            // Processes come in pid order from every backend: each is put in the columns as
            // it is decoded, none kept.
            None if !threads => src.for_each_process(groups, &mut |t| {
                b.push(&t, ctx);
                Ok(())
            })?,
            None => {
                for t in &src.take(&q)? {
                    b.push(t, ctx);
                }
            }
            Some(p) => {
                for t in &src.take_tgids_own(&q, p)? {
                    b.push(t, ctx);
                }
            }
        }
        Ok(())
    })
}

/// task(attrs, pid, backend) -> ProcTable
/// --
///
/// For taskdiag.psutil's Process: the task ``pid`` as /proc/PID shows it, a process or any
/// thread by its id (psutil.Process takes a thread id too), in a table of one row, or none if
/// there is no such task.
#[pyfunction]
fn task(py: Python<'_>, attrs: Vec<String>, pid: u32, backend: &str) -> PyResult<ProcTable> {
    table_of(py, Some(attrs), backend, |src, groups, b, ctx| {
        if let Some(t) = src.one(pid, groups)? {
            b.push(&t, ctx);
        }
        Ok(())
    })
}

/// A table of the columns of `attrs` (every column for None), filled by `fill` from a source
/// opened for their groups (again, where a kept one failed), the GIL released meanwhile.
fn table_of(
    py: Python<'_>,
    attrs: Option<Vec<String>>,
    backend: &str,
    mut fill: impl FnMut(
            &mut taskdiag_tools::snapshot::Source,
            u64,
            &mut columns::Builder,
            &mut columns::Ctx,
        ) -> Result<(), taskdiag_tools::snapshot::Error>
        + Send,
) -> PyResult<ProcTable> {
    let cols = columns::select(attrs.as_deref()).map_err(|e| {
        PyValueError::new_err(format!(
            "invalid attribute name {:?}; valid are: {}",
            e.0,
            valid_names()
        ))
    })?;
    let kind = backend_kind(backend)?;
    let groups = columns::groups(&cols);
    // Everything below runs without the GIL: errors cross back as text.
    let (arrays, backend) = py
        .detach(|| -> Result<_, String> {
            let os = |e: taskdiag_tools::snapshot::Error| e.to_string();
            let mut ctx = columns::Ctx::new();
            let (builder, backend) = source::with(kind, groups, |src| {
                let mut b = columns::Builder::new(&cols, 1024);
                fill(src, groups, &mut b, &mut ctx)?;
                Ok((b, src.backend_name()))
            })
            .map_err(os)?;
            Ok((builder.finish(), backend))
        })
        .map_err(PyOSError::new_err)?;
    Ok(ProcTable::new(
        cols.iter().map(|d| d.name).collect(),
        arrays,
        backend,
    ))
}

/// A mapping as taskdiag.psutil's memory_maps() takes it: address range, permissions, path,
/// and the counters of [`columns::psutil_map`].
type MapRow<'py> = (String, String, Bound<'py, PyAny>, [u64; 10]);

/// [`memory_maps`]' answer: start time (ns since boot), status, refused, the mappings.
type ProcMaps<'py> = (u64, &'static str, bool, Option<Vec<MapRow<'py>>>);

/// memory_maps(pid, backend) -> tuple | None
/// --
///
/// For taskdiag.psutil: process ``pid``'s mappings with their smaps counters, as
/// (start_time_ns, status, refused, maps): ``maps`` is None where there are none to read (a
/// zombie) or /proc refused them (``refused``). None if there is no such process.
#[pyfunction]
fn memory_maps<'py>(py: Python<'py>, pid: u32, backend: &str) -> PyResult<Option<ProcMaps<'py>>> {
    use taskdiag::Group;
    let kind = backend_kind(backend)?;
    let groups = Group::Base.flag() | Group::Vma.flag() | Group::VmaStat.flag();
    let found = py
        .detach(|| -> Result<_, String> {
            let os = |e: taskdiag_tools::snapshot::Error| e.to_string();
            let Some(t) = source::with(kind, groups, |src| src.one(pid, groups)).map_err(os)?
            else {
                return Ok(None);
            };
            if t.tgid != pid || !columns::whole(&t) {
                return Ok(None);
            }
            Ok(Some(t))
        })
        .map_err(PyOSError::new_err)?;
    let Some(t) = found else {
        return Ok(None);
    };
    let (start, status) = columns::identity(&t);
    let refused = t.failed(Group::Vma) || t.failed(Group::VmaStat);
    let maps = match &t.vmas {
        _ if refused => None,
        None if status == "zombie" => None,
        None => Some(Vec::new()),
        Some(v) => Some(
            v.iter()
                .map(|m| -> PyResult<_> {
                    let (path, counts) = columns::psutil_map(m);
                    Ok((
                        format!("{:08x}-{:08x}", m.rec.start, m.rec.end),
                        String::from_utf8_lossy(&taskdiag_proto::vma_flags::perms(m.rec.vm_flags))
                            .into_owned(),
                        table::text(py, &path)?,
                        counts,
                    ))
                })
                .collect::<PyResult<Vec<_>>>()?,
        ),
    };
    Ok(Some((start, status, refused, maps)))
}

/// release()
/// --
///
/// For taskdiag.psutil: closes every backend kept open between calls, and with them the
/// descriptors and mappings taskdiag holds in this process (BPF programs and maps, a daemon
/// connection), so that what this process has open is its program's own.
#[pyfunction]
fn release() {
    source::release();
}

/// columns() -> list[tuple[str, str, str, str]]
/// --
///
/// Every column a snapshot can have: (name, psutil attribute, type, description).
#[pyfunction(name = "columns")]
fn column_list() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    columns::COLUMNS
        .iter()
        .map(|d| (d.name, d.attr, d.get.type_name(), d.doc))
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
    m.add_function(wrap_pyfunction!(task, m)?)?;
    m.add_function(wrap_pyfunction!(column_list, m)?)?;
    m.add_function(wrap_pyfunction!(attributes, m)?)?;
    m.add_function(wrap_pyfunction!(attribute_groups, m)?)?;
    m.add_function(wrap_pyfunction!(memory_maps, m)?)?;
    m.add_function(wrap_pyfunction!(release, m)?)?;
    m.add_class::<ProcTable>()?;
    Ok(())
}
