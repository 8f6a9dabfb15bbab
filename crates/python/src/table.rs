//! `ProcTable`: a snapshot's columns held as arrow-rs arrays, handed to Python as Arrow (the
//! PyCapsule interface: pyarrow, polars, pandas read it without copying), numpy arrays (fixed
//! width without copying: the arrays' memory stays owned here, numpy holds a reference), or
//! Python objects (`to_dicts`, `column`, the psutil layer's rows).
//!
//! Strings are kept as the kernel's bytes: Python gets them decoded as psutil decodes them
//! (the filesystem encoding with `surrogateescape`), Arrow as UTF-8 (bytes that are not UTF-8
//! replaced by U+FFFD, as Arrow strings must be valid).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int32Array, ListArray, RecordBatch,
    RecordBatchIterator, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList, PyString, PyTuple};

/// A snapshot of tasks as columns, one row per task, in pid order.
///
/// Columns carry psutil's names and units (``cpu_times.user`` for a field of psutil's
/// ``cpu_times()``); ``taskdiag.columns()`` lists them. A value /proc would refuse the caller
/// (or psutil would raise ZombieProcess for) is null. The table implements the Arrow PyCapsule
/// interface: ``pyarrow.table(t)``, ``polars.DataFrame(t)`` and ``pandas.DataFrame.from_arrow(t)``
/// (pandas 3 and later) read it without copying; with pandas 2, which has no ``from_arrow``,
/// ``pyarrow.table(t).to_pandas()``.
#[pyclass(frozen, module = "taskdiag", name = "ProcTable")]
pub struct ProcTable {
    names: Vec<&'static str>,
    arrays: Vec<ArrayRef>,
    len: usize,
    backend: &'static str,
}

impl ProcTable {
    /// A table of `arrays` named `names`, from `backend`.
    pub fn new(names: Vec<&'static str>, arrays: Vec<ArrayRef>, backend: &'static str) -> Self {
        let len = arrays.first().map_or(0, |a| a.len());
        ProcTable {
            names,
            arrays,
            len,
            backend,
        }
    }

    fn index(&self, name: &str) -> PyResult<usize> {
        self.names.iter().position(|n| *n == name).ok_or_else(|| {
            PyKeyError::new_err(format!(
                "no column {name:?} in this table; it has: {}",
                self.names.join(", ")
            ))
        })
    }

    /// The arrays as Arrow exports them: strings as UTF-8.
    fn arrow_batch(&self) -> PyResult<RecordBatch> {
        let arrays: Vec<ArrayRef> = self.arrays.iter().map(|a| to_arrow(a)).collect();
        let fields: Vec<Field> = self
            .names
            .iter()
            .zip(&arrays)
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

/// An array as Arrow shows it: binary strings as UTF-8 strings (zero-copy when valid).
fn to_arrow(a: &ArrayRef) -> ArrayRef {
    match a.data_type() {
        DataType::Binary => Arc::new(utf8(a.as_binary::<i32>().clone())),
        DataType::List(f) if *f.data_type() == DataType::Binary => {
            let l = a.as_list::<i32>();
            let values = utf8(l.values().as_binary::<i32>().clone());
            let field = Arc::new(Field::new("item", DataType::Utf8, true));
            Arc::new(ListArray::new(
                field,
                l.offsets().clone(),
                Arc::new(values),
                l.nulls().cloned(),
            ))
        }
        _ => a.clone(),
    }
}

fn utf8(b: BinaryArray) -> StringArray {
    match StringArray::try_from_binary(b.clone()) {
        Ok(s) => s,
        Err(_) => b
            .iter()
            .map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned()))
            .collect(),
    }
}

/// A column, typed once, to read cells of.
enum Col<'a> {
    U32(&'a UInt32Array),
    I32(&'a Int32Array),
    U64(&'a UInt64Array),
    F64(&'a Float64Array),
    Bool(&'a BooleanArray),
    Str(&'a BinaryArray),
    StrList(&'a ListArray, &'a BinaryArray),
    U32List(&'a ListArray, &'a UInt32Array),
}

impl<'a> Col<'a> {
    fn of(a: &'a ArrayRef) -> Col<'a> {
        match a.data_type() {
            DataType::UInt32 => Col::U32(a.as_primitive::<UInt32Type>()),
            DataType::Int32 => Col::I32(a.as_primitive::<Int32Type>()),
            DataType::UInt64 => Col::U64(a.as_primitive::<UInt64Type>()),
            DataType::Float64 => Col::F64(a.as_primitive::<Float64Type>()),
            DataType::Boolean => Col::Bool(a.as_boolean()),
            DataType::Binary => Col::Str(a.as_binary::<i32>()),
            DataType::List(f) if *f.data_type() == DataType::Binary => {
                let l = a.as_list::<i32>();
                Col::StrList(l, l.values().as_binary::<i32>())
            }
            DataType::List(_) => {
                let l = a.as_list::<i32>();
                Col::U32List(l, l.values().as_primitive::<UInt32Type>())
            }
            t => unreachable!("no column is of type {t}"),
        }
    }

    fn is_null(&self, i: usize) -> bool {
        match self {
            Col::U32(a) => a.is_null(i),
            Col::I32(a) => a.is_null(i),
            Col::U64(a) => a.is_null(i),
            Col::F64(a) => a.is_null(i),
            Col::Bool(a) => a.is_null(i),
            Col::Str(a) => a.is_null(i),
            Col::StrList(l, _) | Col::U32List(l, _) => l.is_null(i),
        }
    }

    /// Cell `i` as a Python object; `null` where it is null. Strings come from `texts`
    /// when an equal one was made before.
    fn get<'py>(
        &self,
        py: Python<'py>,
        i: usize,
        null: &Bound<'py, PyAny>,
        texts: &mut Texts<'a, 'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if self.is_null(i) {
            return Ok(null.clone());
        }
        Ok(match self {
            Col::U32(a) => a.value(i).into_pyobject(py)?.into_any(),
            Col::I32(a) => a.value(i).into_pyobject(py)?.into_any(),
            Col::U64(a) => a.value(i).into_pyobject(py)?.into_any(),
            Col::F64(a) => a.value(i).into_pyobject(py)?.into_any(),
            Col::Bool(a) => a.value(i).into_pyobject(py)?.to_owned().into_any(),
            Col::Str(a) => texts.get(py, a.value(i))?,
            Col::StrList(l, v) => {
                let (s, e) = (
                    l.value_offsets()[i] as usize,
                    l.value_offsets()[i + 1] as usize,
                );
                let items = (s..e)
                    .map(|j| texts.get(py, v.value(j)))
                    .collect::<PyResult<Vec<_>>>()?;
                PyList::new(py, items)?.into_any()
            }
            Col::U32List(l, v) => {
                let (s, e) = (
                    l.value_offsets()[i] as usize,
                    l.value_offsets()[i + 1] as usize,
                );
                PyList::new(py, &v.values()[s..e])?.into_any()
            }
        })
    }
}

/// The Python strings made so far, by their bytes: names, user names and arguments repeat
/// across tasks, and one shared immutable string each is cheaper than one per cell.
type Texts<'a, 'py> = HashMap<&'a [u8], Bound<'py, PyAny>>;

trait TextCache<'a, 'py> {
    fn get(&mut self, py: Python<'py>, b: &'a [u8]) -> PyResult<Bound<'py, PyAny>>;
}

impl<'a, 'py> TextCache<'a, 'py> for Texts<'a, 'py> {
    fn get(&mut self, py: Python<'py>, b: &'a [u8]) -> PyResult<Bound<'py, PyAny>> {
        if let Some(s) = HashMap::get(self, b) {
            return Ok(s.clone());
        }
        let s = text(py, b)?;
        self.insert(b, s.clone());
        Ok(s)
    }
}

/// Python's cyclic garbage collector, paused while a call makes many objects that cannot form
/// cycles (dicts, lists and strings of cells): each batch of allocations would otherwise
/// make it walk every young container. Measured at 50,000 rows of five attributes: 0.13-0.46 s
/// of building with it running, 0.08-0.12 s paused. Restarted on drop if it was running (a
/// named-tuple type called meanwhile could let another thread disable it; that thread's wish
/// is then undone, as by any code that pauses the collector around its own work).
struct GcPause<'py>(Option<Bound<'py, PyModule>>);

impl<'py> GcPause<'py> {
    fn new(py: Python<'py>) -> PyResult<Self> {
        let gc = py.import("gc")?;
        if gc.call_method0("isenabled")?.is_truthy()? {
            gc.call_method0("disable")?;
            return Ok(GcPause(Some(gc)));
        }
        Ok(GcPause(None))
    }
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(gc) = &self.0 {
            let _ = gc.call_method0("enable");
        }
    }
}

/// Bytes as psutil decodes them: UTF-8, else the filesystem encoding with surrogateescape.
pub fn text<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match std::str::from_utf8(b) {
        Ok(s) => Ok(PyString::new(py, s).into_any()),
        Err(_) => {
            use std::os::unix::ffi::OsStrExt;
            Ok(std::ffi::OsStr::from_bytes(b).into_pyobject(py)?.into_any())
        }
    }
}

/// A fixed-width column's memory, lent to numpy through `__array_interface__`: the array
/// numpy makes keeps this object (and so the memory) alive.
#[pyclass(frozen, module = "taskdiag")]
struct NumpyView {
    array: ArrayRef,
}

#[pymethods]
impl NumpyView {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // Native byte order, as the arrays hold their values.
        let order = if cfg!(target_endian = "little") {
            '<'
        } else {
            '>'
        };
        let (ptr, typestr) = match self.array.data_type() {
            DataType::UInt32 => (
                self.array.as_primitive::<UInt32Type>().values().as_ptr() as usize,
                "u4",
            ),
            DataType::Int32 => (
                self.array.as_primitive::<Int32Type>().values().as_ptr() as usize,
                "i4",
            ),
            DataType::UInt64 => (
                self.array.as_primitive::<UInt64Type>().values().as_ptr() as usize,
                "u8",
            ),
            DataType::Float64 => (
                self.array.as_primitive::<Float64Type>().values().as_ptr() as usize,
                "f8",
            ),
            t => return Err(PyValueError::new_err(format!("{t} is not fixed-width"))),
        };
        let d = PyDict::new(py);
        d.set_item("shape", (self.array.len(),))?;
        d.set_item("typestr", format!("{order}{typestr}"))?;
        d.set_item("data", (ptr, true))?;
        d.set_item("version", 3)?;
        Ok(d)
    }
}

#[pymethods]
impl ProcTable {
    fn __len__(&self) -> usize {
        self.len
    }

    /// The column names, in order.
    #[getter]
    fn columns(&self) -> Vec<&'static str> {
        self.names.clone()
    }

    /// Which backend answered: ``bpf``, ``daemon`` or ``procfs``.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    fn __repr__(&self) -> String {
        format!(
            "<taskdiag.ProcTable: {} rows, {} columns via {}>",
            self.len,
            self.names.len(),
            self.backend
        )
    }

    /// The column ``name`` as a list of Python values (None where null).
    fn column<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyList>> {
        let a = &self.arrays[self.index(name)?];
        let c = Col::of(a);
        let none = py.None().into_bound(py);
        let _pause = GcPause::new(py)?;
        let mut texts = Texts::new();
        let items = (0..self.len)
            .map(|i| c.get(py, i, &none, &mut texts))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Every row as a dict of column name to value (None where null).
    fn to_dicts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let cols: Vec<Col> = self.arrays.iter().map(Col::of).collect();
        let keys: Vec<Bound<PyString>> = self.names.iter().map(|n| PyString::new(py, n)).collect();
        let none = py.None().into_bound(py);
        let _pause = GcPause::new(py)?;
        let mut texts = Texts::new();
        let rows = (0..self.len)
            .map(|i| {
                let d = PyDict::new(py);
                for (k, c) in keys.iter().zip(&cols) {
                    d.set_item(k, c.get(py, i, &none, &mut texts)?)?;
                }
                Ok(d)
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }

    /// The columns (all, or those named) as numpy arrays, by name. Fixed-width columns are
    /// views of the table's memory (no copy); a column with nulls is a masked array; strings
    /// and lists are object arrays. Needs numpy.
    #[pyo3(signature = (columns=None))]
    fn to_numpy<'py>(
        &self,
        py: Python<'py>,
        columns: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let np = py.import("numpy")?;
        let names: Vec<String> = match columns {
            Some(c) => c,
            None => self.names.iter().map(|s| s.to_string()).collect(),
        };
        let out = PyDict::new(py);
        for name in names {
            let a = &self.arrays[self.index(&name)?];
            // Numbers and booleans keep their values where null, masked; anything else is an
            // object array of Python values (None where null).
            let (arr, maskable) = match a.data_type() {
                DataType::UInt32 | DataType::Int32 | DataType::UInt64 | DataType::Float64 => {
                    let view = Bound::new(py, NumpyView { array: a.clone() })?;
                    (np.call_method1("asarray", (view,))?, true)
                }
                DataType::Boolean => {
                    let values: Vec<bool> = a.as_boolean().values().iter().collect();
                    (np.call_method1("array", (values,))?, true)
                }
                _ => {
                    let kw = PyDict::new(py);
                    kw.set_item("dtype", "object")?;
                    let col = self.column(py, &name)?;
                    (np.call_method("array", (col,), Some(&kw))?, false)
                }
            };
            let masked = maskable && a.null_count() > 0;
            let arr = if masked {
                let mask: Vec<bool> = (0..a.len()).map(|i| a.is_null(i)).collect();
                let kw = PyDict::new(py);
                kw.set_item("mask", mask)?;
                np.getattr("ma")?
                    .call_method("masked_array", (arr,), Some(&kw))?
            } else {
                arr
            };
            out.set_item(name, arr)?;
        }
        Ok(out)
    }

    /// The Arrow schema, as an ``arrow_schema`` PyCapsule (the Arrow PyCapsule interface).
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let batch = self.arrow_batch()?;
        let schema = arrow_schema::ffi::FFI_ArrowSchema::try_from(batch.schema().as_ref())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        PyCapsule::new_with_value(py, schema, c"arrow_schema")
    }

    /// The table as one record batch, as an ``arrow_array_stream`` PyCapsule (the Arrow
    /// PyCapsule interface). A ``requested_schema`` is not honoured (the caller casts).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let batch = self.arrow_batch()?;
        let schema = batch.schema();
        let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
        let stream = arrow_array::ffi_stream::FFI_ArrowArrayStream::new(Box::new(reader));
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }

    /// Rows for taskdiag.psutil: one dict per row of psutil attribute to value, the fields of
    /// a named-tuple attribute passed to its type in ``tuples``; ``ad_value`` where null
    /// (None for an attribute whose flag in ``attrs`` says null is a value, as terminal's).
    fn _psutil_rows<'py>(
        &self,
        py: Python<'py>,
        attrs: Vec<(String, Vec<String>, bool)>,
        ad_value: Bound<'py, PyAny>,
        tuples: Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyList>> {
        struct Attr<'a, 'py> {
            key: Bound<'py, PyString>,
            cols: Vec<Col<'a>>,
            make: Option<Bound<'py, PyAny>>,
            null: Bound<'py, PyAny>,
        }
        let none = py.None().into_bound(py);
        let mut plan = Vec::new();
        for (attr, cols, null_is_none) in &attrs {
            let cols = cols
                .iter()
                .map(|c| self.index(c).map(|i| Col::of(&self.arrays[i])))
                .collect::<PyResult<Vec<_>>>()?;
            plan.push(Attr {
                key: PyString::new(py, attr),
                cols,
                make: tuples.get_item(attr)?,
                null: if *null_is_none {
                    none.clone()
                } else {
                    ad_value.clone()
                },
            });
        }
        let _pause = GcPause::new(py)?;
        let mut texts = Texts::new();
        let rows = (0..self.len)
            .map(|i| {
                let d = PyDict::new(py);
                for a in &plan {
                    let v = match &a.make {
                        None => a.cols[0].get(py, i, &a.null, &mut texts)?,
                        Some(_) if a.cols.iter().any(|c| c.is_null(i)) => a.null.clone(),
                        Some(make) => {
                            let fields = a
                                .cols
                                .iter()
                                .map(|c| c.get(py, i, &ad_value, &mut texts))
                                .collect::<PyResult<Vec<_>>>()?;
                            make.call1(PyTuple::new(py, fields)?)?
                        }
                    };
                    d.set_item(&a.key, v)?;
                }
                Ok(d)
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }
}
