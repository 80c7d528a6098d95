//! `session_store._native`: the store's API for Python. Items go in as
//! Responses-API JSON (Python's `json.dumps` on one side, the crate's
//! Responses reader on the other) and come out as dicts built by the crate's
//! Responses writer itself, straight from the log's checked records, with
//! no owned item, tree or JSON step between; every call that touches the
//! disk runs with the GIL released.

use std::borrow::Cow;
use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyDict, PyList, PyString};

use session_store::{
    responses, Durability, EntryHash, Error, Form, Item, ItemView, JsonSink, LogOptions,
    RequestConfig, SessionId, StoreOptions,
};

create_exception!(
    session_store,
    SessionStoreError,
    PyException,
    "Base class of every error the store raises."
);
create_exception!(
    session_store,
    HeadMismatch,
    SessionStoreError,
    "Another writer moved the session: nothing was written. `session`, `expected` and `actual` (the stored head) say where it stands."
);
create_exception!(
    session_store,
    Locked,
    SessionStoreError,
    "Another process writes this session."
);
create_exception!(
    session_store,
    Corrupt,
    SessionStoreError,
    "Bytes on disk failed their check; the message names the segment, offset and seq."
);
create_exception!(
    session_store,
    IoError,
    SessionStoreError,
    "The operating system refused an operation; the message names it and the file."
);
create_exception!(
    session_store,
    Poisoned,
    SessionStoreError,
    "An earlier write of this session failed; call again once the cause is fixed."
);
create_exception!(
    session_store,
    NotFound,
    SessionStoreError,
    "No such session, name or entry."
);
create_exception!(
    session_store,
    InvalidInput,
    SessionStoreError,
    "The call was refused before anything was written."
);
create_exception!(
    session_store,
    ItemForm,
    SessionStoreError,
    "An item does not fit the Responses API's form; the message names the item and field."
);
create_exception!(
    session_store,
    Wire,
    SessionStoreError,
    "A line of the export form is unacceptable; the message names line and column."
);

/// The crate's error as the Python exception of its kind.
fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::HeadMismatch {
            session,
            expected,
            actual,
        } => {
            let err = HeadMismatch::new_err(message);
            let value = err.value(py);
            let hash = |h: Option<EntryHash>| h.map(|h| h.to_string());
            // Setting attributes on a fresh exception object cannot fail.
            let _ = value.setattr("session", session.to_string());
            let _ = value.setattr("expected", hash(expected));
            let _ = value.setattr("actual", hash(actual));
            err
        }
        Error::Locked { .. } => Locked::new_err(message),
        Error::Corrupt { .. } | Error::JournalUnapplied { .. } => Corrupt::new_err(message),
        Error::Io { .. } => IoError::new_err(message),
        Error::Poisoned => Poisoned::new_err(message),
        Error::NotFound { .. } => NotFound::new_err(message),
        Error::InvalidInput { .. } => InvalidInput::new_err(message),
        Error::ItemForm { .. } => ItemForm::new_err(message),
        Error::Wire { .. } => Wire::new_err(message),
        _ => SessionStoreError::new_err(message),
    }
}

/// Runs `f` without the GIL, and turns its error into an exception.
fn released<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> session_store::Result<T> + Send,
) -> PyResult<T> {
    py.allow_threads(f).map_err(|e| to_py(py, e))
}

fn parse_id(py: Python<'_>, text: &str) -> PyResult<SessionId> {
    text.parse::<SessionId>().map_err(|e| to_py(py, e.into()))
}

fn parse_hash(py: Python<'_>, text: &str) -> PyResult<EntryHash> {
    text.parse().map_err(|e| {
        to_py(
            py,
            Error::InvalidInput {
                what: format!("head {text:?}: {e}"),
            },
        )
    })
}

/// `module.name`, looked up once into `cell`.
fn cached<'py>(
    py: Python<'py>,
    cell: &'static GILOnceCell<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    let f = cell.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import(module)?.getattr(name)?.unbind())
    })?;
    Ok(f.bind(py))
}

/// Python's `json.dumps` and `json.loads`, looked up once.
fn json_fn<'py>(py: Python<'py>, name: &'static str) -> PyResult<&'py Bound<'py, PyAny>> {
    static DUMPS: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
    static LOADS: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
    let cell = if name == "dumps" { &DUMPS } else { &LOADS };
    cached(py, cell, "json", name)
}

/// A list (any sequence) of Responses items as JSON text.
fn items_json(py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<String> {
    if items.is_instance_of::<pyo3::types::PyString>()
        || items.is_instance_of::<pyo3::types::PyDict>()
    {
        return Err(InvalidInput::new_err(
            "items must be a list of Responses items (dicts)",
        ));
    }
    let list = PyList::new(py, items.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
    json_fn(py, "dumps")?.call1((list,))?.extract()
}

/// JSON text as Python objects.
fn loads(py: Python<'_>, json: &str) -> PyResult<PyObject> {
    Ok(json_fn(py, "loads")?.call1((json,))?.unbind())
}

/// Builds Python objects from an item's Responses form as the crate's
/// writer walks it: dicts, lists, strings and booleans made directly; only
/// JSON kept raw (an item this crate has no type for, stored annotations)
/// goes through `json.loads`.
struct PySink<'py> {
    py: Python<'py>,
    /// Field names and tags (`"type"`, `"message"`, `"user"`), one Python
    /// string each per build, shared by every dict that holds them: a
    /// table with open addressing, keyed by the address and length of the
    /// `&'static str` (a build meets a few dozen).
    words: Vec<Option<(Word, Bound<'py, PyString>)>>,
}

/// A `&'static str`'s address and length.
type Word = (usize, usize);

/// Slots of [`PySink::words`]: a power of two, well above the words of the
/// Responses form.
const WORD_SLOTS: usize = 128;

impl<'py> PySink<'py> {
    fn new(py: Python<'py>) -> Self {
        PySink {
            py,
            words: vec![None; WORD_SLOTS],
        }
    }

    fn word(&mut self, word: &'static str) -> Bound<'py, PyString> {
        let at = (word.as_ptr() as usize, word.len());
        let start = (at.0 >> 3 ^ at.1).wrapping_mul(0x9e37_79b9) % WORD_SLOTS;
        for i in 0..WORD_SLOTS {
            let slot = &mut self.words[(start + i) % WORD_SLOTS];
            match slot {
                Some((w, s)) if *w == at => return s.clone(),
                Some(_) => continue,
                None => {
                    let s = PyString::intern(self.py, word);
                    *slot = Some((at, s.clone()));
                    return s;
                }
            }
        }
        PyString::intern(self.py, word)
    }
}

/// A failure while building: the item has no Responses form, or Python
/// refused.
enum BuildError {
    Form(Error),
    Py(PyErr),
}

impl From<Error> for BuildError {
    fn from(e: Error) -> Self {
        BuildError::Form(e)
    }
}

impl From<PyErr> for BuildError {
    fn from(e: PyErr) -> Self {
        BuildError::Py(e)
    }
}

impl BuildError {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            BuildError::Form(e) => to_py(py, e),
            BuildError::Py(e) => e,
        }
    }
}

impl<'a, 'py> JsonSink<'a> for PySink<'py> {
    type Value = Bound<'py, PyAny>;
    type Obj = Bound<'py, PyDict>;
    type Error = BuildError;

    fn str(&mut self, s: &'a str) -> Result<Self::Value, BuildError> {
        Ok(PyString::new(self.py, s).into_any())
    }

    fn tag(&mut self, tag: &'static str) -> Result<Self::Value, BuildError> {
        Ok(self.word(tag).into_any())
    }

    fn bool(&mut self, b: bool) -> Result<Self::Value, BuildError> {
        Ok(PyBool::new(self.py, b).to_owned().into_any())
    }

    fn json(&mut self, text: Cow<'a, str>) -> Result<Self::Value, BuildError> {
        Ok(loads(self.py, &text)?.into_bound(self.py))
    }

    fn list(&mut self, items: Vec<Self::Value>) -> Result<Self::Value, BuildError> {
        Ok(PyList::new(self.py, items)?.into_any())
    }

    fn obj(&mut self) -> Result<Self::Obj, BuildError> {
        Ok(PyDict::new(self.py))
    }

    fn field(
        &mut self,
        obj: &mut Self::Obj,
        key: &'static str,
        value: Self::Value,
    ) -> Result<(), BuildError> {
        Ok(obj.set_item(self.word(key), value)?)
    }

    fn end(&mut self, obj: Self::Obj) -> Result<Self::Value, BuildError> {
        Ok(obj.into_any())
    }
}

/// Python's cyclic garbage collector, paused while a build makes many
/// containers that cannot form a cycle (each pass would walk every object
/// made so far); resumed on drop, if it was running.
struct GcPause<'py> {
    enable: Option<&'py Bound<'py, PyAny>>,
}

impl<'py> GcPause<'py> {
    fn new(py: Python<'py>) -> PyResult<Self> {
        static ISENABLED: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
        static DISABLE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
        static ENABLE: GILOnceCell<Py<PyAny>> = GILOnceCell::new();
        if cached(py, &ISENABLED, "gc", "isenabled")?
            .call0()?
            .is_truthy()?
        {
            let enable = cached(py, &ENABLE, "gc", "enable")?;
            cached(py, &DISABLE, "gc", "disable")?.call0()?;
            Ok(GcPause {
                enable: Some(enable),
            })
        } else {
            Ok(GcPause { enable: None })
        }
    }
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(enable) = self.enable {
            // `gc.enable()` has no failure path for a caller.
            let _ = enable.call0();
        }
    }
}

/// Items as a Python list of Responses dicts, in `form`.
fn items_to_py<'a>(
    py: Python<'_>,
    items: impl IntoIterator<Item = ItemView<'a>>,
    form: Form,
) -> PyResult<PyObject> {
    let _pause = GcPause::new(py)?;
    let values =
        responses::write_history(items, form, &mut PySink::new(py)).map_err(|e| e.into_py(py))?;
    Ok(PyList::new(py, values)?.into_any().unbind())
}

/// One item as a Responses dict, as stored.
fn item_to_py(py: Python<'_>, item: &Item) -> PyResult<PyObject> {
    let value = responses::write_item(item.into(), Form::AsStored, &mut PySink::new(py))
        .map_err(|e| e.into_py(py))?;
    Ok(value.unbind())
}

/// The form named by Python's `form` argument.
fn parse_form(py: Python<'_>, form: &str) -> PyResult<Form> {
    match form {
        "as_stored" => Ok(Form::AsStored),
        "resend" => Ok(Form::Resend),
        other => Err(to_py(
            py,
            Error::InvalidInput {
                what: format!("form must be \"as_stored\" or \"resend\", not {other:?}"),
            },
        )),
    }
}

/// Reads Responses items from JSON text (a list).
fn read_items(json: &str) -> session_store::Result<Vec<Item>> {
    responses::history_from_json(json)
}

/// A store of sessions at `path`: crash-safe, append-only, hash-chained logs.
///
/// `durability` is `"buffered"` (a write survives a crash of the process at
/// once and a power loss after the next sync; the default) or `"sync"`
/// (each write is on stable storage before it returns). With
/// `read_only=True`, nothing is created or written.
///
/// Open one `Store` per directory in a process and share it: a second one
/// on the same directory is refused each session the first one writes
/// (`Locked`). Methods may be called from any thread; they release the GIL
/// while they touch the disk.
#[pyclass(frozen, module = "session_store")]
struct Store {
    inner: session_store::Store,
    root: PathBuf,
    durability: &'static str,
}

/// A store that Python lets go closes as `close` does (the crate's store
/// closes on its last drop), its failures unreported, and without the GIL:
/// the close syncs what was saved, and other threads go on meanwhile.
impl Drop for Store {
    fn drop(&mut self) {
        if self.inner.is_read_only() {
            return;
        }
        let inner = &self.inner;
        Python::with_gil(|py| {
            py.allow_threads(|| {
                let _ = inner.close();
            })
        });
    }
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (path, durability = "buffered", read_only = false))]
    fn new(py: Python<'_>, path: PathBuf, durability: &str, read_only: bool) -> PyResult<Store> {
        let (durability, name) = match durability {
            "buffered" => (Durability::Buffered, "buffered"),
            "sync" => (Durability::Sync, "sync"),
            other => {
                return Err(InvalidInput::new_err(format!(
                    "durability must be \"buffered\" or \"sync\", not {other:?}"
                )))
            }
        };
        let root = path.clone();
        let inner = released(py, move || match read_only {
            true => session_store::Store::open_read_only(&path),
            false => session_store::Store::open_with(
                &path,
                StoreOptions::default().log(LogOptions::default().durability(durability)),
            ),
        })?;
        Ok(Store {
            inner,
            root,
            durability: name,
        })
    }

    /// `"buffered"` or `"sync"`, as opened.
    #[getter]
    fn durability(&self) -> &'static str {
        self.durability
    }

    /// The store's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.root.clone()
    }

    fn __repr__(&self) -> String {
        format!("Store({:?})", self.root.display().to_string())
    }

    /// Creates a session and returns its id. `items` (Responses items) start
    /// its history; `name`, if given, is a name unique in the store that
    /// `find_name` looks up (`InvalidInput` if taken).
    #[pyo3(signature = (system_prompt = None, model = None, items = None, name = None))]
    fn create_session(
        &self,
        py: Python<'_>,
        system_prompt: Option<String>,
        model: Option<String>,
        items: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<String> {
        let json = items.map(|i| items_json(py, i)).transpose()?;
        let store = &self.inner;
        let (id, _) = released(py, move || {
            let history = json
                .as_deref()
                .map(read_items)
                .transpose()?
                .unwrap_or_default();
            let config = RequestConfig {
                model,
                ..RequestConfig::default()
            };
            let prompt = system_prompt.as_deref();
            match &name {
                Some(name) => store.create_named(name, prompt, config, &history),
                None => store.create_session(prompt, config, &history),
            }
        })?;
        Ok(id.to_string())
    }

    /// The id of the session named `name`, or `None`.
    fn find_name(&self, py: Python<'_>, name: &str) -> PyResult<Option<String>> {
        let found = released(py, || self.inner.find_name(name))?;
        Ok(found.map(|id| id.to_string()))
    }

    /// The id of the session named `name`, created empty if there is none.
    /// Callers racing for one name (threads, processes) get one session.
    fn open_named(&self, py: Python<'_>, name: &str) -> PyResult<String> {
        Ok(released(py, || self.inner.find_or_create_named(name))?.to_string())
    }

    /// Appends Responses items (dicts) to the session in one commit and
    /// returns the new head. With `head`, only if the session's head is
    /// still `head` (else `HeadMismatch`, nothing written); without, after
    /// whatever is there.
    #[pyo3(signature = (session_id, items, head = None))]
    fn append(
        &self,
        py: Python<'_>,
        session_id: &str,
        items: &Bound<'_, PyAny>,
        head: Option<&str>,
    ) -> PyResult<String> {
        self.write_items(py, session_id, items, head, session_store::Store::append)
    }

    /// The session's live history (from its last compaction) as Responses
    /// items: as they were given (`form="as_stored"`), or without provider
    /// ids and statuses, ready for a stateless re-send (`form="resend"`).
    #[pyo3(signature = (session_id, form = "as_stored"))]
    fn restore(&self, py: Python<'_>, session_id: &str, form: &str) -> PyResult<PyObject> {
        self.items(py, session_id, None, form)
    }

    /// The last `limit` items of the live history, in order (all of them for
    /// `None`), in `form` (see `restore`); only the items returned are built.
    #[pyo3(signature = (session_id, limit = None, form = "as_stored"))]
    fn items(
        &self,
        py: Python<'_>,
        session_id: &str,
        limit: Option<usize>,
        form: &str,
    ) -> PyResult<PyObject> {
        let form = parse_form(py, form)?;
        let id = parse_id(py, session_id)?;
        let store = &self.inner;
        // The records are read and checked without the GIL; it is taken
        // back only to build the objects, while the log is still mapped.
        let built = py.allow_threads(|| {
            store.with_history_tail(id, limit, |tail| {
                Python::with_gil(|py| items_to_py(py, tail.items, form))
            })
        });
        built.map_err(|e| to_py(py, e))?
    }

    /// How many items the live history holds.
    fn len(&self, py: Python<'_>, session_id: &str) -> PyResult<u64> {
        let id = parse_id(py, session_id)?;
        released(py, || self.inner.history_len(id))
    }

    /// Removes the last item of the live history and returns it, or returns
    /// `None` for an empty history. One small entry in the log, which keeps
    /// the item. With `head`, only if the head is still `head`.
    #[pyo3(signature = (session_id, head = None))]
    fn pop(&self, py: Python<'_>, session_id: &str, head: Option<&str>) -> PyResult<PyObject> {
        let id = parse_id(py, session_id)?;
        let want = head.map(|h| parse_hash(py, h)).transpose()?;
        let store = &self.inner;
        let popped = released(py, move || loop {
            let tail = store.history_tail(id, Some(1))?;
            let (Some(item), Some(head)) = (tail.items.into_iter().next(), tail.head) else {
                return Ok(None);
            };
            if want.is_some_and(|w| w != head) {
                return Err(Error::HeadMismatch {
                    session: id,
                    expected: want,
                    actual: Some(head),
                });
            }
            // An item with no Responses form is refused before it is removed.
            item.to_responses_tree(Form::AsStored)?;
            match store.remove_last(id, head, 1) {
                Ok(_) => return Ok(Some(item)),
                // Another writer moved the head between the read and the
                // removal: read the new last item.
                Err(Error::HeadMismatch { .. }) if want.is_none() => continue,
                Err(e) => return Err(e),
            }
        })?;
        match popped {
            Some(item) => item_to_py(py, &item),
            None => Ok(py.None()),
        }
    }

    /// Compacts the session in place: its live history becomes `summary`
    /// (Responses items; `[]` clears it), and everything before stays in
    /// the log. Returns the new head. With `head`, only if the head is
    /// still `head`.
    #[pyo3(signature = (session_id, summary, head = None))]
    fn compact(
        &self,
        py: Python<'_>,
        session_id: &str,
        summary: &Bound<'_, PyAny>,
        head: Option<&str>,
    ) -> PyResult<String> {
        self.write_items(py, session_id, summary, head, session_store::Store::compact)
    }

    /// Starts a new session with the history up to the entry `at` (a head
    /// hash; the current head for `None`) and returns its id.
    #[pyo3(signature = (session_id, at = None))]
    fn fork(&self, py: Python<'_>, session_id: &str, at: Option<&str>) -> PyResult<String> {
        let id = parse_id(py, session_id)?;
        let at = at.map(|h| parse_hash(py, h)).transpose()?;
        let store = &self.inner;
        let (new, _) = released(py, move || {
            let at = match at {
                Some(at) => at,
                None => store.head(id)?.ok_or_else(|| Error::NotFound {
                    what: format!("a head of session {id}"),
                })?,
            };
            store.fork_at(id, at)
        })?;
        Ok(new.to_string())
    }

    /// The session's head (the hash of its last entry), for optimistic
    /// concurrency with `append`, `pop` and `compact`.
    fn head(&self, py: Python<'_>, session_id: &str) -> PyResult<Option<String>> {
        let id = parse_id(py, session_id)?;
        Ok(released(py, || self.inner.head(id))?.map(|h| h.to_string()))
    }

    /// Every session: a list of dicts (`id`, `created_ms`, `updated_ms`,
    /// `title`, `entries`, `bytes`, `payload_bytes`, `head`, `name`,
    /// `forked_from`, `compacted_from`, and `error` for one that could not
    /// be read).
    fn list(&self, py: Python<'_>) -> PyResult<PyObject> {
        let json = released(py, || {
            let sessions = self.inner.list()?;
            serde_json::to_string(&sessions).map_err(|e| Error::InvalidInput {
                what: format!("listing: {e}"),
            })
        })?;
        loads(py, &json)
    }

    /// The session's every entry in the JSON wire form, one line each, with
    /// seq and hashes: what `import_` reads and the CLI's `export` prints.
    fn export(&self, py: Python<'_>, session_id: &str) -> PyResult<String> {
        let id = parse_id(py, session_id)?;
        let bytes = released(py, || {
            let mut out = Vec::new();
            self.inner.export(id, &mut out)?;
            Ok(out)
        })?;
        String::from_utf8(bytes).map_err(|e| SessionStoreError::new_err(e.to_string()))
    }

    /// Creates a session from wire-form lines (what `export` returns),
    /// checking every hash they carry; returns its id.
    fn import_(&self, py: Python<'_>, lines: &str) -> PyResult<String> {
        let id = released(py, || self.inner.import_from(lines.as_bytes()))?;
        Ok(id.to_string())
    }

    /// Checks every record's CRC, chain link and archive. Returns a dict:
    /// `ok`, `records`, `segments`, `bytes`, `head`, and `damage` (a
    /// message, or `None`).
    fn verify(&self, py: Python<'_>, session_id: &str) -> PyResult<PyObject> {
        let id = parse_id(py, session_id)?;
        let report = released(py, || Ok(self.inner.snapshot(id)?.verify()))?;
        let value = serde_json::json!({
            "ok": report.damage.is_none(),
            "records": report.records,
            "segments": report.segments,
            "bytes": report.bytes,
            "head": report.head.map(|(_, h)| h.to_string()),
            "damage": report.damage.map(|d| d.to_string()),
        });
        loads(py, &value.to_string())
    }

    /// Makes everything this store appended to the session durable.
    fn sync(&self, py: Python<'_>, session_id: &str) -> PyResult<()> {
        let id = parse_id(py, session_id)?;
        released(py, || self.inner.sync(id))
    }

    /// Closes every open session (each synced), reporting the first failure.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        released(py, || self.inner.close())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }
}

impl Store {
    /// Runs `write` (an append or a compaction) with `items` at `head`, or,
    /// without one, at the session's current head; returns the new head.
    fn write_items(
        &self,
        py: Python<'_>,
        session_id: &str,
        items: &Bound<'_, PyAny>,
        head: Option<&str>,
        write: impl Fn(
                &session_store::Store,
                SessionId,
                EntryHash,
                &[Item],
            ) -> session_store::Result<EntryHash>
            + Send,
    ) -> PyResult<String> {
        let id = parse_id(py, session_id)?;
        let head = head.map(|h| parse_hash(py, h)).transpose()?;
        let json = items_json(py, items)?;
        let store = &self.inner;
        let new = released(py, move || {
            let items = read_items(&json)?;
            match head {
                Some(head) => write(store, id, head, &items),
                None => at_any_head(store, id, |head| write(store, id, head, &items)),
            }
        })?;
        Ok(new.to_string())
    }
}

/// Runs `write` at the session's current head, again if another writer
/// moves it in between: for callers that append without a head of their
/// own.
fn at_any_head(
    store: &session_store::Store,
    id: SessionId,
    mut write: impl FnMut(EntryHash) -> session_store::Result<EntryHash>,
) -> session_store::Result<EntryHash> {
    loop {
        let head = store.head(id)?.ok_or_else(|| Error::NotFound {
            what: format!("a head of session {id}"),
        })?;
        match write(head) {
            Err(Error::HeadMismatch { .. }) => continue,
            other => return other,
        }
    }
}

#[pyfunction]
#[pyo3(name = "normalize")]
/// Responses items as the store returns them in `form`: as given
/// (`"as_stored"`, JSON-equal), or without provider ids and statuses
/// (`"resend"`).
#[pyo3(signature = (items, form = "as_stored"))]
fn normalize_items<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyAny>,
    form: &str,
) -> PyResult<PyObject> {
    let form = parse_form(py, form)?;
    let json = items_json(py, items)?;
    let items = released(py, move || read_items(&json))?;
    items_to_py(py, items.iter().map(ItemView::from), form)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Store>()?;
    m.add_function(wrap_pyfunction!(normalize_items, m)?)?;
    m.add("SessionStoreError", py.get_type::<SessionStoreError>())?;
    m.add("HeadMismatch", py.get_type::<HeadMismatch>())?;
    m.add("Locked", py.get_type::<Locked>())?;
    m.add("Corrupt", py.get_type::<Corrupt>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("Poisoned", py.get_type::<Poisoned>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("ItemForm", py.get_type::<ItemForm>())?;
    m.add("Wire", py.get_type::<Wire>())?;
    Ok(())
}
