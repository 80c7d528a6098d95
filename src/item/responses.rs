//! The OpenAI Responses API's form of items: what a runtime sends as `input`
//! and gets back as `output`, one JSON object per item.
//!
//! An item is kept as it was given. The reader types what it understands
//! (messages, function and custom tool calls and their outputs, reasoning),
//! with the item's `id` and `status`, and keeps whatever else it carried
//! (fields added after this code, shorthand forms) as its [`Extra`]; an item
//! it cannot type is [`Item::Opaque`], kept as its JSON. The writer gives it
//! back in the [`Form`] asked for: as stored, JSON-equal to what was given,
//! or for a stateless re-send, without a typed item's `id` and `status`.
//! `encrypted_content`, `arguments` and `input` keep their exact text.
//!
//! # Example
//!
//! ```
//! use session_store::responses;
//! use session_store::{Form, Item, RequestConfig, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path())?;
//! let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
//! let output = [
//!     r#"{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAAAB+/=="}"#,
//!     r#"{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","query":"rkyv"}}"#,
//!     r#"{"id":"fc_1","type":"function_call","call_id":"call_1","name":"ls","arguments":"{}","namespace":"fs"}"#,
//! ];
//! let items = output.iter().map(|json| Item::from_responses_json(json)).collect::<Result<Vec<_>, _>>()?;
//! store.save_delta(id, &mut head, &items)?;
//!
//! let history = store.restore(id)?.history;
//! let input = responses::history_to_json(&history, Form::Resend)?;
//! assert_eq!(
//!     input,
//!     format!(
//!         "[{},{},{}]",
//!         r#"{"type":"reasoning","summary":[],"encrypted_content":"gAAAAB+/=="}"#,
//!         output[1],
//!         r#"{"type":"function_call","call_id":"call_1","name":"ls","arguments":"{}","namespace":"fs"}"#,
//!     )
//! );
//! assert!(history[2].is_tool_call());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::extra::{self, Extra, WireForm, TEXT_CONTENT, UNTYPED};
use super::fields::{as_string, history_list, Fields, Place};
use super::tree::{list_json, JsonSink, JsonTree, Obj, TreeSink, ValueSink};
use super::view::{Output, Part, Parts, ProviderState, Shape, Texts};
use super::{ContentPart, Form, Item, ItemStatus, ItemView, Role, ToolOutput};
use crate::error::Result;
use crate::json::JsonText;

const API: &str = "responses";

impl Item {
    /// Reads one Responses item from its JSON text.
    ///
    /// Example: [`Form`].
    pub fn from_responses_json(json: &str) -> Result<Item> {
        read_item(
            json,
            Place {
                api: API,
                index: None,
            },
        )
    }

    /// Writes the item as a Responses item in `form`, or fails, naming the
    /// field, if it has no Responses form (Anthropic thinking, an Anthropic
    /// block, an `is_error: true` flag).
    ///
    /// Example: [`Form`].
    pub fn to_responses_json(&self, form: Form) -> Result<String> {
        Ok(self.to_responses_tree(form)?.to_json())
    }

    /// The item's Responses form as a tree that borrows the item's strings:
    /// what [`Item::to_responses_json`] renders.
    ///
    /// Example: [`write_history`].
    pub fn to_responses_tree(&self, form: Form) -> Result<JsonTree<'_>> {
        write_item(self.into(), form, &mut TreeSink)
    }
}

/// Reads a history: a JSON list of Responses items.
///
/// ```
/// use session_store::{responses, Form, RequestConfig, Store};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// // A conversation held as the `input` of an earlier request.
/// let input = r#"[{"role":"user","content":"Summarise the diff."},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"It renames a flag.","annotations":[]}]}]"#;
/// let history = responses::history_from_json(input)?;
/// assert!(history[0].is_user_message() && history[1].is_assistant_message());
///
/// let store = Store::open(dir.path())?;
/// let (id, _) = store.create_session(None, RequestConfig::model("gpt-5"), &history)?;
/// let restored = store.restore(id)?.history;
/// assert_eq!(responses::history_to_json(&restored, Form::AsStored)?, input);
/// # Ok(()) }
/// ```
pub fn history_from_json(json: &str) -> Result<Vec<Item>> {
    history_list(json, API)?
        .into_iter()
        .map(|(raw, place)| read_item(raw.get(), place))
        .collect()
}

/// Writes a history as a JSON list of Responses items in `form`
/// ([`Form::Resend`]: ready to send as `input` to a stateless request).
///
/// Example: [`history_from_json`].
pub fn history_to_json(items: &[Item], form: Form) -> Result<String> {
    Ok(list_json(&history_to_trees(items, form)?))
}

/// Writes a history as one JSON text per item.
///
/// Example: [`history_from_json`].
pub fn history_to_items(items: &[Item], form: Form) -> Result<Vec<String>> {
    Ok(history_to_trees(items, form)?
        .iter()
        .map(JsonTree::to_json)
        .collect())
}

/// Writes a history as one tree per item (see [`Item::to_responses_tree`]).
///
/// Example: [`write_history`].
pub fn history_to_trees(items: &[Item], form: Form) -> Result<Vec<JsonTree<'_>>> {
    write_history(items.iter().map(ItemView::from), form, &mut TreeSink)
}

/// Writes one item's Responses form into `sink`, or fails, naming the
/// field, if it has no Responses form (see [`Item::to_responses_json`]).
///
/// Example: [`write_history`].
pub fn write_item<'a, S: JsonSink<'a>>(
    item: ItemView<'a>,
    form: Form,
    sink: &mut S,
) -> Result<S::Value, S::Error> {
    write(
        item,
        Place {
            api: API,
            index: None,
        },
        form,
        sink,
    )
}

/// Writes a history's items into `sink`, one value each, in order: what
/// [`history_to_json`] renders, for a binding to build its own objects
/// with, from items read in place (see
/// [`Store::with_history_tail`](crate::Store::with_history_tail)). A
/// failure names the item's index.
///
/// ```
/// use session_store::{responses, Form, Item, JsonTree, RequestConfig, Store, TreeSink};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path())?;
/// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
/// store.save_delta(id, &mut head, &[Item::user_text("Any failing jobs?"), Item::assistant_text("Just lint.")])?;
///
/// // The next request's `input`, written from the mapped log with no owned items.
/// let input = store.with_history_tail(id, None, |tail| {
///     let trees = responses::write_history(tail.items, Form::Resend, &mut TreeSink)?;
///     Ok::<_, session_store::Error>(trees.iter().map(JsonTree::to_json).collect::<Vec<_>>())
/// })??;
/// assert_eq!(input.len(), 2);
/// assert!(input[0].contains(r#""text":"Any failing jobs?""#));
/// # Ok(()) }
/// ```
pub fn write_history<'a, S: JsonSink<'a>>(
    items: impl IntoIterator<Item = ItemView<'a>>,
    form: Form,
    sink: &mut S,
) -> Result<Vec<S::Value>, S::Error> {
    let items = items.into_iter();
    let mut out = Vec::with_capacity(items.size_hint().0);
    for (index, item) in items.enumerate() {
        let place = Place {
            api: API,
            index: Some(index),
        };
        out.push(write(item, place, form, sink)?);
    }
    Ok(out)
}

fn read_item(json: &str, place: Place) -> Result<Item> {
    let as_given = || {
        JsonText::parse(json)
            .map(|json| Item::Opaque { role: None, json })
            .map_err(|e| place.error("", e.to_string()))
    };
    let Ok(mut item) = read_typed(json, place) else {
        return as_given();
    };
    let canonical = write(ItemView::from(&item), place, Form::AsStored, &mut ValueSink)?;
    match extra::diff(&canonical, json) {
        Ok(None) => Ok(item),
        Ok(Some(diff)) => {
            let (id, status, extra) = item.take_provider_state();
            let extra = Extra::new(WireForm::Responses, extra.flags(), Some(diff));
            item.set_provider_state(id, status, extra);
            Ok(item)
        }
        Err(_) => as_given(),
    }
}

/// The typed view of a Responses item, with its id, status and shorthand
/// flags; fields it does not type are left for the diff. Fails when the
/// item is not one this crate types (its `type` unknown, or a typed field
/// of another JSON type): it is then kept as given.
fn read_typed(json: &str, place: Place) -> Result<Item> {
    let mut f = Fields::new(json, place, String::new())?;
    let kind = f.opt_string("type")?;
    let mut flags = 0;
    let mut item = match kind.as_deref() {
        Some("message") => read_message(&mut f, &mut flags)?,
        None if f.has("role") => {
            flags |= UNTYPED;
            read_message(&mut f, &mut flags)?
        }
        Some("function_call") => Item::ToolCall {
            extra: Extra::NONE,
            id: None,
            call_id: f.string("call_id")?,
            name: f.string("name")?,
            arguments: f.string("arguments")?,
            status: None,
        },
        Some("custom_tool_call") => Item::CustomToolCall {
            extra: Extra::NONE,
            id: None,
            call_id: f.string("call_id")?,
            name: f.string("name")?,
            input: f.string("input")?,
            status: None,
        },
        Some(kind @ ("function_call_output" | "custom_tool_call_output")) => {
            let call_id = f.string("call_id")?;
            let output = f.required("output")?;
            match (as_string(output), kind) {
                (Some(summary), "function_call_output") => Item::ToolResult {
                    extra: Extra::NONE,
                    id: None,
                    call_id,
                    summary,
                    content: None,
                },
                (text, _) => Item::ToolOutput {
                    extra: Extra::NONE,
                    id: None,
                    call_id,
                    output: Some(match text {
                        Some(text) => ToolOutput::Text(text),
                        None => ToolOutput::Parts(read_parts(&f, output, "output", None)?),
                    }),
                    is_error: None,
                    custom: kind == "custom_tool_call_output",
                    status: None,
                },
            }
        }
        Some("reasoning") => read_reasoning(&mut f)?,
        _ => return Err(f.error("type", "not a type this crate reads")),
    };
    let id = f.raw("id").and_then(as_string);
    let status = f
        .raw("status")
        .and_then(|raw| serde_json::from_str(raw.get()).ok());
    item.set_provider_state(id, status, Extra::new(WireForm::Responses, flags, None));
    Ok(item)
}

fn read_message(f: &mut Fields<'_>, flags: &mut u8) -> Result<Item> {
    let role = match f.string("role")?.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        "developer" => Role::Developer,
        other => return Err(f.error("role", format!("unknown role {other:?}"))),
    };
    let raw = f.required("content")?;
    let content = match as_string(raw) {
        Some(text) => {
            *flags |= TEXT_CONTENT;
            vec![ContentPart::Text { text }]
        }
        None => read_parts(f, raw, "content", Some(role))?,
    };
    Ok(Item::Message {
        extra: Extra::NONE,
        id: None,
        role,
        content,
        status: None,
    })
}

/// Content parts of a message of `role`, or of a tool output (`role` `None`).
fn read_parts<'a>(
    f: &Fields<'a>,
    raw: &'a RawValue,
    name: &str,
    role: Option<Role>,
) -> Result<Vec<ContentPart>> {
    f.elements(raw, name)?
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            f.nested(raw, &format!("{name}[{i}]"))
                .and_then(|p| read_part(p, raw, role))
                .or_else(|_| {
                    // A part this crate cannot type is kept as given.
                    JsonText::parse(raw.get())
                        .map(|json| ContentPart::Opaque { json })
                        .map_err(|e| f.error(&format!("{name}[{i}]"), e.to_string()))
                })
        })
        .collect()
}

fn read_part(mut p: Fields<'_>, raw: &RawValue, role: Option<Role>) -> Result<ContentPart> {
    // Parts are typed leniently, like items: fields left over go to the
    // item's diff.
    let assistant = role == Some(Role::Assistant);
    let kind = p.string("type")?;
    let part = match kind.as_str() {
        "input_text" if assistant => {
            return Err(p.error("type", "input_text in an assistant message"))
        }
        "input_text" => ContentPart::Text {
            text: p.string("text")?,
        },
        "output_text" if role.is_some() && !assistant => {
            return Err(p.error("type", "output_text outside an assistant message"))
        }
        "output_text" => {
            let text = p.string("text")?;
            let annotations = p.json("annotations")?;
            let logprobs = p.json("logprobs")?;
            if annotations.as_ref().is_some_and(|a| a.as_str() == "[]") && logprobs.is_none() {
                ContentPart::Text { text }
            } else {
                ContentPart::OutputText {
                    text,
                    annotations,
                    logprobs,
                }
            }
        }
        "refusal" => ContentPart::Refusal {
            refusal: p.string("refusal")?,
        },
        "input_image" => ContentPart::InputImage {
            image_url: p.opt_string("image_url")?,
            file_id: p.opt_string("file_id")?,
            detail: p.opt_string("detail")?,
        },
        "input_file" => ContentPart::InputFile {
            file_id: p.opt_string("file_id")?,
            file_data: p.opt_string("file_data")?,
            filename: p.opt_string("filename")?,
            file_url: p.opt_string("file_url")?,
        },
        "input_audio" => {
            let audio = p.required("input_audio")?;
            let mut a = p.nested(audio, "input_audio")?;
            ContentPart::InputAudio {
                data: a.string("data")?,
                format: a.string("format")?,
            }
        }
        _ => {
            let json = JsonText::parse(raw.get()).map_err(|e| p.error("type", e.to_string()))?;
            return Ok(ContentPart::Opaque { json });
        }
    };
    Ok(part)
}

fn read_reasoning(f: &mut Fields<'_>) -> Result<Item> {
    let texts = |f: &mut Fields<'_>, name: &str, kind: &str| -> Result<Option<Vec<String>>> {
        let Some(list) = f.list(name)? else {
            return Ok(None);
        };
        list.iter()
            .enumerate()
            .map(|(i, raw)| {
                let mut p = f.nested(raw, &format!("{name}[{i}]"))?;
                if p.string("type")? != kind {
                    return Err(p.error("type", format!("expected {kind:?}")));
                }
                p.string("text")
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    };
    let summary =
        texts(f, "summary", "summary_text")?.ok_or_else(|| f.error("summary", "missing"))?;
    let content = texts(f, "content", "reasoning_text")?;
    let encrypted_content = f.opt_string("encrypted_content")?;
    Ok(match content {
        None => Item::Reasoning {
            extra: Default::default(),
            id: None,
            text: String::new(),
            summary,
            encrypted_content,
            status: None,
        },
        Some(mut content) if content.len() == 1 && !content[0].is_empty() => Item::Reasoning {
            extra: Default::default(),
            id: None,
            text: content.remove(0),
            summary,
            encrypted_content,
            status: None,
        },
        Some(content) => Item::ReasoningParts {
            extra: Default::default(),
            id: None,
            summary,
            content,
            encrypted_content,
            status: None,
        },
    })
}

fn write<'a, S: JsonSink<'a>>(
    item: ItemView<'a>,
    place: Place,
    form: Form,
    sink: &mut S,
) -> Result<S::Value, S::Error> {
    let state = item.provider_state();
    let Some(diff) = state.extra.diff_for(WireForm::Responses) else {
        return write_typed(item, place, form, state, sink);
    };
    // The canonical form with the diff applied: built as text, once, for
    // the items that carried fields this crate does not type.
    let canonical = write_typed(item, place, Form::AsStored, state, &mut TreeSink)?.to_json();
    let drop: &[&str] = match form {
        Form::AsStored => &[],
        Form::Resend => &["id", "status"],
    };
    sink.json(Cow::Owned(extra::apply(&canonical, Some(diff), drop)))
}

/// An object of `kind` (without `type` for a message given without one)
/// and, as stored, the item's id.
fn head<'s, 'a, S: JsonSink<'a>>(
    sink: &'s mut S,
    kind: &'static str,
    untyped: bool,
    form: Form,
    state: ProviderState<'a>,
) -> Obj<'s, 'a, S> {
    let obj = if untyped {
        Obj::empty(sink)
    } else {
        Obj::typed(sink, kind)
    };
    match form {
        Form::AsStored => obj.opt_str("id", state.id),
        Form::Resend => obj,
    }
}

/// Ends an object with, as stored, the item's status.
fn tail<'a, S: JsonSink<'a>>(
    obj: Obj<'_, 'a, S>,
    form: Form,
    state: ProviderState<'a>,
) -> Result<S::Value, S::Error> {
    let status = match form {
        Form::AsStored => state.status.map(status_name),
        Form::Resend => None,
    };
    match status {
        Some(status) => obj.tag("status", status),
        None => obj,
    }
    .finish()
}

fn status_name(status: ItemStatus) -> &'static str {
    match status {
        ItemStatus::InProgress => "in_progress",
        ItemStatus::Completed => "completed",
        ItemStatus::Incomplete => "incomplete",
    }
}

/// The item's typed fields in their canonical Responses form, with its id
/// and status as stored, and its shorthand flags.
fn write_typed<'a, S: JsonSink<'a>>(
    item: ItemView<'a>,
    place: Place,
    form: Form,
    state: ProviderState<'a>,
    sink: &mut S,
) -> Result<S::Value, S::Error> {
    match item.shape() {
        Shape::Message { role, content } => write_message(sink, role, content, form, state),
        Shape::ToolCall {
            call_id,
            name,
            arguments,
        } => {
            let obj = head(sink, "function_call", false, form, state)
                .str("call_id", call_id)
                .str("name", name)
                .str("arguments", arguments);
            tail(obj, form, state)
        }
        Shape::ToolResult { call_id, summary } => {
            let obj = head(sink, "function_call_output", false, form, state)
                .str("call_id", call_id)
                .str("output", summary);
            tail(obj, form, state)
        }
        Shape::CustomToolCall {
            call_id,
            name,
            input,
        } => {
            let obj = head(sink, "custom_tool_call", false, form, state)
                .str("call_id", call_id)
                .str("name", name)
                .str("input", input);
            tail(obj, form, state)
        }
        Shape::ToolOutput {
            call_id,
            output,
            is_error,
            custom,
        } => {
            // An Anthropic result that says it is no error says nothing a
            // Responses output needs; one that is an error has no form here.
            if is_error == Some(true) {
                return Err(place
                    .error("is_error", "the Responses API has no error flag")
                    .into());
            }
            let output =
                output.ok_or_else(|| place.error("output", "the Responses API needs an output"))?;
            let kind = if custom {
                "custom_tool_call_output"
            } else {
                "function_call_output"
            };
            let obj = head(sink, kind, false, form, state).str("call_id", call_id);
            let obj = match output {
                Output::Text(text) => obj.str("output", text),
                Output::Parts(parts) => obj.with("output", |s| write_parts(s, parts, None)),
            };
            tail(obj, form, state)
        }
        Shape::Reasoning {
            text,
            summary,
            encrypted_content,
        } => {
            let content = (!text.is_empty()).then_some(Texts::One(text));
            write_reasoning(sink, summary, content, encrypted_content, form, state)
        }
        Shape::ReasoningParts {
            summary,
            content,
            encrypted_content,
        } => write_reasoning(sink, summary, Some(content), encrypted_content, form, state),
        Shape::Thinking | Shape::RedactedThinking => Err(place
            .error("type", "Anthropic thinking has no Responses form")
            .into()),
        Shape::Opaque { role: None, json } => sink.json(json.into()),
        Shape::Opaque { role: Some(_), .. } => Err(place
            .error("type", "an Anthropic block has no Responses form")
            .into()),
    }
}

/// A message in its canonical Responses form, with the shorthands it was
/// given in: no `type`, or its one text part as the `content` string.
fn write_message<'a, S: JsonSink<'a>>(
    sink: &mut S,
    role: Role,
    content: Parts<'a>,
    form: Form,
    state: ProviderState<'a>,
) -> Result<S::Value, S::Error> {
    let flags = state.extra.flags_for(WireForm::Responses);
    let role_name = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System => "system",
        Role::Developer => "developer",
    };
    let obj = head(sink, "message", flags & UNTYPED != 0, form, state).tag("role", role_name);
    let obj = match content.only_text() {
        Some(text) if flags & TEXT_CONTENT != 0 => obj.str("content", text),
        _ => obj.with("content", |s| write_parts(s, content, Some(role))),
    };
    tail(obj, form, state)
}

fn write_reasoning<'a, S: JsonSink<'a>>(
    sink: &mut S,
    summary: Texts<'a>,
    content: Option<Texts<'a>>,
    encrypted: Option<&'a str>,
    form: Form,
    state: ProviderState<'a>,
) -> Result<S::Value, S::Error> {
    let texts = |sink: &mut S, kind: &'static str, texts: Texts<'a>| {
        let values = texts
            .iter()
            .map(|t| Obj::typed(sink, kind).str("text", t).finish())
            .collect::<Result<Vec<_>, _>>()?;
        sink.list(values)
    };
    let obj = head(sink, "reasoning", false, form, state)
        .with("summary", |s| texts(s, "summary_text", summary));
    let obj = match content {
        Some(content) => obj.with("content", |s| texts(s, "reasoning_text", content)),
        None => obj,
    };
    tail(obj.opt_str("encrypted_content", encrypted), form, state)
}

fn write_parts<'a, S: JsonSink<'a>>(
    sink: &mut S,
    parts: Parts<'a>,
    role: Option<Role>,
) -> Result<S::Value, S::Error> {
    let assistant = role == Some(Role::Assistant);
    let values = parts
        .iter()
        .map(|part| write_part(sink, part, assistant))
        .collect::<Result<Vec<_>, _>>()?;
    sink.list(values)
}

fn write_part<'a, S: JsonSink<'a>>(
    sink: &mut S,
    part: Part<'a>,
    assistant: bool,
) -> Result<S::Value, S::Error> {
    match part {
        Part::Text(text) if assistant => Obj::typed(sink, "output_text")
            .str("text", text)
            .with("annotations", |s| s.list(Vec::new()))
            .finish(),
        Part::Text(text) => Obj::typed(sink, "input_text").str("text", text).finish(),
        Part::OutputText {
            text,
            annotations,
            logprobs,
        } => Obj::typed(sink, "output_text")
            .str("text", text)
            .opt_json("annotations", annotations)
            .opt_json("logprobs", logprobs)
            .finish(),
        Part::Refusal(refusal) => Obj::typed(sink, "refusal").str("refusal", refusal).finish(),
        Part::InputImage {
            image_url,
            file_id,
            detail,
        } => Obj::typed(sink, "input_image")
            .opt_str("image_url", image_url)
            .opt_str("file_id", file_id)
            .opt_str("detail", detail)
            .finish(),
        Part::InputFile {
            file_id,
            file_data,
            filename,
            file_url,
        } => Obj::typed(sink, "input_file")
            .opt_str("file_id", file_id)
            .opt_str("file_data", file_data)
            .opt_str("filename", filename)
            .opt_str("file_url", file_url)
            .finish(),
        Part::InputAudio { data, format } => Obj::typed(sink, "input_audio")
            .with("input_audio", |s| {
                Obj::empty(s)
                    .str("data", data)
                    .str("format", format)
                    .finish()
            })
            .finish(),
        Part::Opaque(json) => sink.json(json.into()),
    }
}
