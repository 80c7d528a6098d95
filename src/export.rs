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
use serde_json::Value;

use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::schema::{JsonText, LogEntry, LoggedItem, RequestConfig, SessionOrigin};

/// The longest line [`LineReader`] accepts, in bytes.
pub const MAX_LINE_BYTES: usize = 512 << 20;

/// One parsed wire line.
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

/// Parses one wire line. `line_no` is 1-based and goes into every error.
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
    let kind = map
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let input = Value::Object(map);
    let entry = entry_from_line(line, &kind).map_err(|e| wire(0, format!("{e}")))?;
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

/// Deserializes the entry of a wire line straight from its text.
///
/// `JsonText` keeps its bytes only when read directly by serde_json (as a
/// `RawValue`); serde's buffering of an internally tagged enum cannot carry
/// it. So the kinds that hold `JsonText` are read through untagged mirrors of
/// their variants. Other fields of the line (`seq`, `hash`, `kind`) are ignored
/// here; unknown ones are caught by the caller.
fn entry_from_line(line: &str, kind: &str) -> serde_json::Result<LogEntry> {
    #[derive(Deserialize)]
    struct Start {
        ts: u64,
        system_prompt: Option<String>,
        config: RequestConfig,
        history: Vec<LoggedItem>,
        forked_from: Option<SessionOrigin>,
        compacted_from: Option<SessionOrigin>,
    }
    #[derive(Deserialize)]
    struct Config {
        ts: u64,
        config: RequestConfig,
    }
    #[derive(Deserialize)]
    struct Extension {
        ts: u64,
        domain: String,
        payload: JsonText,
    }
    Ok(match kind {
        "session_start" => {
            let e: Start = serde_json::from_str(line)?;
            LogEntry::SessionStart {
                ts: e.ts,
                system_prompt: e.system_prompt,
                config: e.config,
                history: e.history,
                forked_from: e.forked_from,
                compacted_from: e.compacted_from,
            }
        }
        "config_changed" => {
            let e: Config = serde_json::from_str(line)?;
            LogEntry::ConfigChanged {
                ts: e.ts,
                config: e.config,
            }
        }
        "extension" => {
            let e: Extension = serde_json::from_str(line)?;
            LogEntry::Extension {
                ts: e.ts,
                domain: e.domain,
                payload: e.payload,
            }
        }
        _ => serde_json::from_str(line)?,
    })
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
pub struct LineReader<R> {
    inner: R,
    line_no: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> LineReader<R> {
    /// Wraps a reader.
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            line_no: 0,
            buf: Vec::new(),
        }
    }

    /// The next non-empty line and its 1-based number, or `None` at the end.
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
