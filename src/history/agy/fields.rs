//! The fields of a step: texts, tool calls and tool results, read
//! leniently from whatever JSON agy wrote.

use serde_json::{Map, Value};

use super::{AgyToolCall, AgyToolResult, TOOL_NAME_PREFIX};

pub(super) fn as_u64(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(super) fn as_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The non-blank texts of a `content`-like value: a string, or an array of
/// strings and `{"text": …}` parts.
pub(super) fn texts(value: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(value) = value {
        collect_texts(value, &mut out);
    }
    out
}

fn collect_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if !s.trim().is_empty() => out.push(s.clone()),
        Value::Array(parts) => parts.iter().for_each(|part| collect_texts(part, out)),
        Value::Object(part) => {
            if let Some(text) = part.get("text") {
                collect_texts(text, out);
            }
        }
        _ => {}
    }
}

pub(super) fn tool_calls(value: Option<&Value>, id_base: &str) -> Vec<AgyToolCall> {
    let Some(Value::Array(calls)) = value else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(Value::as_object)
        .enumerate()
        .map(|(k, call)| {
            let raw_name = call.get("name").and_then(Value::as_str).unwrap_or("");
            let name = raw_name.strip_prefix(TOOL_NAME_PREFIX).unwrap_or(raw_name);
            // A call without a name still answers to a result; keep it in
            // line so the pairings after it stay right.
            let name = if name.is_empty() { "unknown" } else { name };
            AgyToolCall {
                call_id: format!("{id_base}-{k}"),
                name: name.to_owned(),
                args: decode_args(call.get("args")),
            }
        })
        .collect()
}

/// agy writes each argument value as JSON text (`"\"/tmp\""`); decode each
/// once. A value that is not valid JSON text is kept as it is. A whole
/// `args` given as JSON text is decoded first.
pub(super) fn decode_args(args: Option<&Value>) -> Value {
    let args = match args {
        None | Some(Value::Null) => return Value::Object(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(decoded @ Value::Object(_)) => decoded,
            _ => return Value::String(s.clone()),
        },
        Some(other) => other.clone(),
    };
    match args {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| {
                    let value = match &value {
                        Value::String(s) => serde_json::from_str(s).unwrap_or(value),
                        _ => value,
                    };
                    (key, value)
                })
                .collect(),
        ),
        other => other,
    }
}

/// Output fields besides `content`, in the order they are appended.
const OUTPUT_FIELDS: &[&str] = &["output", "combined_output", "stdout", "stderr"];

pub(super) fn tool_result(
    fields: &Map<String, Value>,
    step_type: &str,
    tool_name: String,
    call_id: String,
    paired: bool,
) -> AgyToolResult {
    let mut segments: Vec<String> = Vec::new();
    let mut add = |texts: Vec<String>| {
        for text in texts {
            if !segments.contains(&text) {
                segments.push(text);
            }
        }
    };
    add(texts(fields.get("content")));
    for field in OUTPUT_FIELDS {
        add(texts(fields.get(*field)));
    }
    let error = fields.get("error").filter(|e| match e {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.trim().is_empty(),
        _ => true,
    });
    match error {
        Some(Value::String(s)) => add(vec![s.clone()]),
        Some(Value::Object(obj)) => match obj.get("message").and_then(Value::as_str) {
            Some(message) => add(vec![message.to_owned()]),
            None => add(vec![Value::Object(obj.clone()).to_string()]),
        },
        _ => {}
    }
    let exit_code = fields
        .get("exit_code")
        .or_else(|| fields.get("exitCode"))
        .and_then(as_i64);
    if let Some(code) = exit_code {
        add(vec![format!("exit code: {code}")]);
    }
    let status_error = fields
        .get("status")
        .and_then(Value::as_str)
        .is_some_and(|s| s.eq_ignore_ascii_case("ERROR"));
    let is_error = step_type == "ERROR_MESSAGE"
        || status_error
        || exit_code.is_some_and(|code| code != 0)
        || error.is_some();
    AgyToolResult {
        step_type: step_type.to_owned(),
        tool_name,
        call_id,
        paired,
        output: if segments.is_empty() {
            None
        } else {
            Some(segments.join("\n"))
        },
        is_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_values_are_decoded_once() {
        let args = serde_json::json!({"Path": "\"/tmp\"", "N": "3", "Raw": "ls -la", "Twice": "\"\\\"x\\\"\""});
        let decoded = decode_args(Some(&args));
        assert_eq!(
            decoded,
            serde_json::json!({"Path": "/tmp", "N": 3, "Raw": "ls -la", "Twice": "\"x\""})
        );
        assert_eq!(decode_args(None), serde_json::json!({}));
        assert_eq!(
            decode_args(Some(&Value::String("{\"A\":\"1\"}".into()))),
            serde_json::json!({"A": 1})
        );
    }
}
