//! The JSON wire form: one JSON object per line, per entry.
//!
//! ```text
//! {"seq":0,"hash":"<64 hex>","prev_hash":null,"kind":"session_start","ts":…,…}
//! ```
//!
//! `seq`, `hash` and `prev_hash` come first and are optional on input (import
//! assigns them); the entry's own fields follow in declaration order. The same
//! entry always gives the same bytes.

use std::io::BufRead;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::log::RecordView;
use crate::schema::{
    JsonText, LogEntry, LoggedContentPart, LoggedItem, LoggedItemOf, LoggedToolOutput,
};

pub use crate::schema::MAX_LINE_BYTES;

/// One parsed wire line.
///
/// Example: [`entry_line`].
#[derive(Debug, Clone, PartialEq)]
pub struct WireLine {
    /// The seq, if the line carries one.
    pub seq: Option<u64>,
    /// The entry's hash, if the line carries one.
    pub hash: Option<EntryHash>,
    /// The previous hash: `None` when absent, `Some(None)` for an explicit `null`.
    pub prev_hash: Option<Option<EntryHash>>,
    /// The entry.
    pub entry: LogEntry,
}

/// Writes one entry as a wire line, without the trailing newline.
///
/// ```
/// use session_store::schema::LogEntry;
/// use session_store::wire::{entry_line, parse_line};
/// use session_store::{Log, LogOptions};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let log = Log::open(dir.path(), LogOptions::default())?;
/// let entry = LogEntry::TurnEnd { ts: 1767225600000, turn_count: 3 };
/// let (seq, hash) = log.append(&entry)?;
/// let line = entry_line(seq, &hash, None, &entry);
/// assert!(line.ends_with(r#""prev_hash":null,"kind":"turn_end","ts":1767225600000,"turn_count":3}"#));
///
/// let back = parse_line(&line, 1)?;
/// assert_eq!((back.seq, back.hash, back.entry), (Some(0), Some(hash), entry));
/// # Ok(()) }
/// ```
pub fn entry_line(
    seq: u64,
    hash: &EntryHash,
    prev_hash: Option<&EntryHash>,
    entry: &LogEntry,
) -> String {
    let body = serde_json::to_string(entry).expect("LogEntry serializes to JSON");
    let prev = match prev_hash {
        Some(h) => format!("\"{h}\""),
        None => "null".to_string(),
    };
    // `body` is an object whose first byte is `{`; splice our fields in front.
    format!(
        "{{\"seq\":{seq},\"hash\":\"{hash}\",\"prev_hash\":{prev},{}",
        &body[1..]
    )
}

impl RecordView<'_> {
    /// This record as a wire line, without the newline (`prev_hash` is
    /// `null` at seq 0). Items kept in the store's payload area are written
    /// in full, so the line stands without the store; a payload that cannot
    /// be read is [`Error::Payload`](crate::Error::Payload).
    ///
    /// Example: [`Snapshot::iter`](crate::Snapshot::iter).
    pub fn wire_line(&self) -> Result<String> {
        let prev = (self.seq > 0).then_some(&self.prev_hash);
        Ok(entry_line(self.seq, &self.hash, prev, &self.to_entry()?))
    }
}

/// Parses one wire line. `line_no` is 1-based and goes into every error.
///
/// Example: [`entry_line`].
pub fn parse_line(line: &str, line_no: u64) -> Result<WireLine> {
    let wire = |column: u64, message: String| Error::Wire {
        line: line_no,
        column,
        message,
    };
    let value: Value = serde_json::from_str(line)
        .map_err(|e| wire(e.column() as u64, format!("malformed JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(wire(1, "expected a JSON object".into()));
    };
    let seq = match map.remove("seq") {
        None => None,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
        Some(other) => {
            return Err(wire(
                0,
                format!("seq must be a non-negative integer, got {other}"),
            ))
        }
    };
    let hash = match map.remove("hash") {
        None => None,
        Some(v) => Some(parse_hash(v).map_err(|m| wire(0, format!("hash: {m}")))?),
    };
    let prev_hash = match map.remove("prev_hash") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(v) => Some(Some(
            parse_hash(v).map_err(|m| wire(0, format!("prev_hash: {m}")))?,
        )),
    };
    let input = Value::Object(map);
    let mut entry = LogEntry::deserialize(&input).map_err(|e| wire(0, format!("{e}")))?;
    restore_json_text(line, &mut entry).map_err(|m| wire(0, m))?;
    let back = serde_json::to_value(&entry).expect("LogEntry serializes to JSON");
    if let Some(path) = unknown_field(&input, &back, String::new()) {
        return Err(wire(
            0,
            format!("unknown field `{path}` (it would be lost)"),
        ));
    }
    Ok(WireLine {
        seq,
        hash,
        prev_hash,
        entry,
    })
}

/// The JSON payloads of a line, as written. Deserializing a `LogEntry` keeps
/// their values but not their spelling (see `JsonText`'s `Deserialize`), and an
/// import must archive exactly what was exported, so they are read again raw.
#[derive(Deserialize)]
struct RawPayloads<'a> {
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    config: Option<RawConfig<'a>>,
    #[serde(borrow, default)]
    history: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawConfig<'a> {
    #[serde(borrow, default)]
    extra: Option<&'a RawValue>,
}

/// The fields of an item or content part that can hold JSON, raw.
#[derive(Deserialize)]
struct RawJsonFields<'a> {
    #[serde(borrow, default)]
    json: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    output: Option<&'a RawValue>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
    #[serde(borrow, default)]
    logprobs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    diff: Option<&'a RawValue>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
}

fn restore_json_text(line: &str, entry: &mut LogEntry) -> std::result::Result<(), String> {
    let raw: RawPayloads = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let (payload, extra, items) = match entry {
        LogEntry::Extension { payload, .. } => (Some(payload), None, &mut [][..]),
        LogEntry::SessionStart {
            config, history, ..
        } => (None, config.extra.as_mut(), history.as_mut_slice()),
        LogEntry::ConfigChanged { config, .. } => (None, config.extra.as_mut(), &mut [][..]),
        LogEntry::UserInput { item, .. } => (None, None, std::slice::from_mut(item)),
        LogEntry::AssistantItems { items, .. }
        | LogEntry::ToolResults { items, .. }
        | LogEntry::HookInjectedItems { items, .. } => (None, None, items.as_mut_slice()),
        _ => return Ok(()),
    };
    let raw_extra = raw.config.and_then(|c| c.extra);
    for (slot, raw) in [(payload, raw.payload), (extra, raw_extra)] {
        restore(slot, raw)?;
    }
    let raw_items = raw
        .history
        .or(raw.items)
        .or(raw.item.map(|i| vec![i]))
        .unwrap_or_default();
    for (item, raw) in items.iter_mut().zip(raw_items) {
        restore_item(item, raw)?;
    }
    Ok(())
}

fn restore(slot: Option<&mut JsonText>, raw: Option<&RawValue>) -> std::result::Result<(), String> {
    if let (Some(slot), Some(raw)) = (slot, raw) {
        *slot = JsonText::parse(raw.get()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn raw_fields(raw: &RawValue) -> std::result::Result<RawJsonFields<'_>, String> {
    serde_json::from_str(raw.get()).map_err(|e| e.to_string())
}

fn restore_item(item: &mut LoggedItem, raw: &RawValue) -> std::result::Result<(), String> {
    match item {
        LoggedItem::Extended(e) => {
            restore(e.diff.as_mut(), raw_fields(raw)?.diff)?;
            match raw_fields(raw)?.item {
                Some(raw) => restore_typed(&mut e.item, raw),
                None => Ok(()),
            }
        }
        item => restore_typed(item, raw),
    }
}

fn restore_typed<X>(item: &mut LoggedItemOf<X>, raw: &RawValue) -> std::result::Result<(), String> {
    use LoggedItemOf as LoggedItem;
    let fields = raw_fields(raw)?;
    match item {
        LoggedItem::Opaque { json, .. } => restore(Some(json), fields.json),
        LoggedItem::Message { content, .. } => restore_parts(content, fields.content),
        LoggedItem::ToolOutput {
            output: Some(LoggedToolOutput::Parts(parts)),
            ..
        } => restore_parts(parts, fields.output),
        _ => Ok(()),
    }
}

fn restore_parts(
    parts: &mut [LoggedContentPart],
    raw: Option<&RawValue>,
) -> std::result::Result<(), String> {
    let raw: Vec<&RawValue> = match raw {
        Some(list) => serde_json::from_str(list.get()).map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    for (part, raw) in parts.iter_mut().zip(raw) {
        match part {
            LoggedContentPart::Opaque { json } => restore(Some(json), raw_fields(raw)?.json)?,
            LoggedContentPart::OutputText(text) => {
                let fields = raw_fields(raw)?;
                restore(text.annotations.as_mut(), fields.annotations)?;
                restore(text.logprobs.as_mut(), fields.logprobs)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn parse_hash(v: Value) -> std::result::Result<EntryHash, String> {
    match v {
        Value::String(s) => s.parse().map_err(|e| format!("{e}")),
        other => Err(format!("expected a hex string, got {other}")),
    }
}

/// Finds a field present in `input` that did not survive into `back`, other
/// than explicit nulls and empty lists (which mean "absent").
fn unknown_field(input: &Value, back: &Value, path: String) -> Option<String> {
    match (input, back) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| {
            let here = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match b.get(k) {
                Some(bv) => unknown_field(v, bv, here),
                None if is_empty(v) => None,
                None => Some(here),
            }
        }),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| unknown_field(x, y, format!("{path}[{i}]"))),
        _ => None,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Reads lines of at most [`MAX_LINE_BYTES`], as UTF-8, naming the line in errors.
///
/// Example: [the `wire` module](crate::wire#example).
pub struct LineReader<R> {
    inner: R,
    line_no: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> LineReader<R> {
    /// Wraps a reader.
    ///
    /// Example: [the `wire` module](crate::wire#example).
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            line_no: 0,
            buf: Vec::new(),
        }
    }

    /// The next non-empty line and its 1-based number, or `None` at the end.
    ///
    /// Example: [the `wire` module](crate::wire#example).
    pub fn next_line(&mut self) -> Result<Option<(u64, &str)>> {
        loop {
            self.buf.clear();
            self.line_no += 1;
            let limit = MAX_LINE_BYTES as u64 + 1;
            let n = std::io::Read::take(&mut self.inner, limit)
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| Error::Wire {
                    line: self.line_no,
                    column: 0,
                    message: format!("read failed: {e}"),
                })?;
            if n == 0 {
                return Ok(None);
            }
            if self.buf.len() > MAX_LINE_BYTES {
                return Err(Error::Wire {
                    line: self.line_no,
                    column: 0,
                    message: format!("line longer than {MAX_LINE_BYTES} bytes"),
                });
            }
            while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
                self.buf.pop();
            }
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return match std::str::from_utf8(&self.buf) {
                Ok(s) => Ok(Some((self.line_no, s))),
                Err(e) => Err(Error::Wire {
                    line: self.line_no,
                    column: e.valid_up_to() as u64 + 1,
                    message: "not valid UTF-8".into(),
                }),
            };
        }
    }
}
