//! The Anthropic Messages API's form of a history: a list of messages
//! `{role, content}`, each a run of content blocks of one side.
//!
//! On the way in a message is split into items: its `text` blocks (and the
//! `image`, `document` and `search_result` blocks among them) make
//! [`Item::Message`]s, `thinking` and `redacted_thinking` blocks make
//! [`Item::Thinking`] and [`Item::RedactedThinking`], `tool_use` a
//! [`Item::ToolCall`] whose `call_id` is the block's `id` and whose `arguments`
//! are the `input` JSON text exactly, `tool_result` a [`Item::ToolResult`]
//! (text content, no `is_error`) or [`Item::ToolOutput`], and any other block
//! (server tool use and results, MCP blocks, types added later) an
//! [`Item::Opaque`] of the message's role. A block this crate cannot type is
//! opaque too. Fields a typed block carries beyond its typed ones
//! (`caller` on `tool_use`, `cache_control`, fields added later) are kept as
//! the item's [`Extra`] and written back, so every block comes back as given.
//! On the way out consecutive items of one side are grouped back into one
//! message, so a history restored from the log is ready to send; a message
//! given with its `content` as a string comes back alone, as a string. Two
//! consecutive messages of one role otherwise come out as one, as the API
//! reads them. A message's fields other than `role` and `content` are an
//! error that names them: a history is a list of `{role, content}`.
//!
//! # Example
//!
//! ```
//! use session_store::{Item, RequestConfig, Store};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path())?;
//! let (id, mut head) = store.create_session(Some("Be brief."), RequestConfig::model("claude-x"), &[])?;
//! let reply = r#"{"role":"assistant","content":[
//!     {"type":"thinking","thinking":"List it.","signature":"EqQB+/=="},
//!     {"type":"tool_use","id":"toolu_1","name":"ls","input":{"path":"."}}]}"#;
//! store.save_delta(id, &mut head, &Item::from_anthropic_message(reply)?)?;
//!
//! let messages = Item::to_anthropic_messages(&store.restore(id)?.history)?;
//! assert_eq!(
//!     messages,
//!     [r#"{"role":"assistant","content":[{"type":"thinking","thinking":"List it.","signature":"EqQB+/=="},{"type":"tool_use","id":"toolu_1","name":"ls","input":{"path":"."}}]}"#]
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde_json::value::RawValue;

use super::extra::{self, Extra, WireForm, TEXT_CONTENT};
use super::fields::{as_string, history_list, one_line, Fields, Place};
use super::tree::{JsonTree, Obj, TreeSink};
use super::{ContentPart, Item, Role, ToolOutput};
use crate::error::Result;
use crate::json::JsonText;

const API: &str = "anthropic";

impl Item {
    /// Reads one Messages API message, `{role, content}`, into items.
    ///
    /// Example: [the module](crate::anthropic#example).
    pub fn from_anthropic_message(json: &str) -> Result<Vec<Item>> {
        read_message(
            json,
            Place {
                api: API,
                index: None,
            },
        )
    }

    /// Writes items as Messages API messages, one JSON text each, grouping
    /// consecutive items of one side; fails, naming the item and field, on an
    /// item that has no Messages form (system messages, Responses reasoning,
    /// custom tool calls, parts the API has no block for).
    ///
    /// Example: [the module](crate::anthropic#example).
    pub fn to_anthropic_messages(items: &[Item]) -> Result<Vec<String>> {
        // A message given with its content as a string stands alone, and is
        // written back so.
        let mut messages: Vec<(Role, Vec<JsonTree<'_>>, bool)> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let place = Place {
                api: API,
                index: Some(index),
            };
            let (role, blocks) = write_item(item, place)?;
            let text = item.extra().view().flags_for(WireForm::Anthropic) & TEXT_CONTENT != 0
                && matches!(&blocks[..], [JsonTree::Obj(_)])
                && item.text().is_some();
            match messages.last_mut() {
                Some((last, run, false)) if *last == role && !text => run.extend(blocks),
                _ => messages.push((role, blocks, text)),
            }
        }
        messages
            .into_iter()
            .map(|(role, blocks, text)| {
                let role = if role == Role::User {
                    "user"
                } else {
                    "assistant"
                };
                let mut sink = TreeSink;
                let obj = Obj::empty(&mut sink).tag("role", role);
                let obj = match (text, &blocks[..]) {
                    (true, [JsonTree::Obj(fields)]) => match fields.as_slice() {
                        [("type", _), ("text", JsonTree::Str(text))] => obj.str("content", text),
                        _ => obj.with("content", |_| Ok(JsonTree::List(blocks.clone()))),
                    },
                    _ => obj.with("content", |_| Ok(JsonTree::List(blocks.clone()))),
                };
                obj.finish().map(|tree| tree.to_json())
            })
            .collect()
    }
}

/// Reads a history: a JSON list of messages.
///
/// ```
/// use session_store::{anthropic, Item};
/// # fn main() -> session_store::Result<()> {
/// let messages = r#"[{"role":"user","content":"What's in /tmp?"},
///   {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"ls","input":{"path":"/tmp"}}]},
///   {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt"}]}]"#;
/// let history = anthropic::history_from_json(messages)?;
/// assert!(history[1].is_tool_call() && history[2].is_tool_result());
/// assert_eq!(history[2].call_id(), Some("toolu_1"));
///
/// let answer = Item::assistant_text("One file: a.txt.");
/// let out = anthropic::history_to_json(&[&history[..], &[answer]].concat())?;
/// assert!(out.ends_with(r#"{"role":"assistant","content":[{"type":"text","text":"One file: a.txt."}]}]"#));
/// # Ok(()) }
/// ```
pub fn history_from_json(json: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    for (raw, place) in history_list(json, API)? {
        items.extend(read_message(raw.get(), place)?);
    }
    Ok(items)
}

/// Writes a history as a JSON list of messages, ready to send as `messages`.
///
/// Example: [`history_from_json`].
pub fn history_to_json(items: &[Item]) -> Result<String> {
    Ok(format!(
        "[{}]",
        Item::to_anthropic_messages(items)?.join(",")
    ))
}

fn read_message(json: &str, place: Place) -> Result<Vec<Item>> {
    let mut f = Fields::new(json, place, String::new())?;
    let role = match f.string("role")?.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        other => return Err(f.error("role", format!("unknown role {other:?}"))),
    };
    let raw = f.required("content")?;
    let mut items = Vec::new();
    if let Some(text) = as_string(raw) {
        let mut item = message(role, vec![ContentPart::Text { text }]);
        item.set_provider_state(
            None,
            None,
            Extra::new(WireForm::Anthropic, TEXT_CONTENT, None),
        );
        items.push(item);
    } else {
        let blocks = f.elements(raw, "content")?;
        // Each item with the blocks it was read from.
        let mut read: Vec<(Item, Vec<&RawValue>)> = Vec::new();
        let mut parts: Option<(Vec<ContentPart>, Vec<&RawValue>)> = None;
        for (i, raw) in blocks.iter().enumerate() {
            let at = format!("content[{i}]");
            let block = f
                .nested(raw, &at)
                .and_then(|b| read_block(b, raw, role))
                .or_else(|_| {
                    // A block this crate cannot type is kept as given.
                    JsonText::parse(raw.get())
                        .map(|json| {
                            Block::Item(Item::Opaque {
                                role: Some(role),
                                json,
                            })
                        })
                        .map_err(|e| f.error(&at, e.to_string()))
                })?;
            match block {
                Block::Part(part) => {
                    let (parts, raws) = parts.get_or_insert_with(Default::default);
                    parts.push(part);
                    raws.push(raw);
                }
                Block::Item(item) => {
                    read.extend(parts.take().map(|(p, raws)| (message(role, p), raws)));
                    read.push((item, vec![raw]));
                }
            }
        }
        read.extend(parts.take().map(|(p, raws)| (message(role, p), raws)));
        for (mut item, raws) in read {
            keep_extra(&mut item, &raws, place)?;
            items.push(item);
        }
        if blocks.is_empty() {
            items.push(message(role, Vec::new()));
        }
    }
    f.finish()?;
    Ok(items)
}

/// Sets the diff from `item`'s canonical blocks to the blocks it was read
/// from, if they differ.
fn keep_extra(item: &mut Item, raws: &[&RawValue], place: Place) -> Result<()> {
    if matches!(item, Item::Opaque { .. }) {
        return Ok(());
    }
    let (_, blocks) = write_typed(item, place)?;
    let canonical: serde_json::Value = serde_json::from_str(&JsonTree::List(blocks).to_json())
        .map_err(|e| place.error("content", format!("not valid JSON: {e}")))?;
    let given = format!(
        "[{}]",
        raws.iter().map(|r| r.get()).collect::<Vec<_>>().join(",")
    );
    match extra::diff(&canonical, &given) {
        Ok(None) => {}
        Ok(Some(diff)) => {
            item.set_provider_state(None, None, Extra::new(WireForm::Anthropic, 0, Some(diff)));
        }
        Err(e) => return Err(place.error("content", e.to_string())),
    }
    Ok(())
}

fn message(role: Role, content: Vec<ContentPart>) -> Item {
    Item::Message {
        extra: Extra::NONE,
        id: None,
        role,
        content,
        status: None,
    }
}

enum Block {
    Part(ContentPart),
    Item(Item),
}

/// The typed view of one block; fields it does not type are left for the
/// diff. Fails when the block is not one this crate types on this side.
fn read_block(mut b: Fields<'_>, raw: &RawValue, role: Role) -> Result<Block> {
    let kind = b.string("type")?;
    let side = |b: &Fields<'_>, wanted: Role| {
        if role == wanted {
            Ok(())
        } else {
            Err(b.error("type", format!("a {kind} block in a {role:?} message")))
        }
    };
    let block = match kind.as_str() {
        "text" => Block::Part(read_text(&mut b)?),
        "image" | "document" | "search_result" => return Ok(Block::Part(opaque_part(&b, raw)?)),
        "thinking" => {
            side(&b, Role::Assistant)?;
            Block::Item(Item::Thinking {
                extra: Extra::NONE,
                thinking: b.string("thinking")?,
                signature: b.opt_string("signature")?,
            })
        }
        "redacted_thinking" => {
            side(&b, Role::Assistant)?;
            Block::Item(Item::RedactedThinking {
                extra: Extra::NONE,
                data: b.string("data")?,
            })
        }
        "tool_use" => {
            side(&b, Role::Assistant)?;
            let call_id = b.string("id")?;
            let name = b.string("name")?;
            let input = b.required("input")?;
            Block::Item(Item::ToolCall {
                extra: Extra::NONE,
                id: None,
                call_id,
                name,
                arguments: input.get().to_owned(),
                status: None,
            })
        }
        "tool_result" => {
            side(&b, Role::User)?;
            Block::Item(read_tool_result(&mut b)?)
        }
        _ => return Err(b.error("type", "not a block this crate types")),
    };
    Ok(block)
}

fn read_text(b: &mut Fields<'_>) -> Result<ContentPart> {
    let text = b.string("text")?;
    Ok(match b.json("citations")? {
        None => ContentPart::Text { text },
        citations => ContentPart::OutputText {
            text,
            annotations: citations,
            logprobs: None,
        },
    })
}

fn opaque_part(b: &Fields<'_>, raw: &RawValue) -> Result<ContentPart> {
    let json = JsonText::parse(raw.get()).map_err(|e| b.error("type", e.to_string()))?;
    Ok(ContentPart::Opaque { json })
}

fn read_tool_result(b: &mut Fields<'_>) -> Result<Item> {
    let call_id = b.string("tool_use_id")?;
    let is_error = b.optional::<bool>("is_error", "true or false")?;
    let content = b.raw("content");
    let text = content.and_then(as_string);
    if let (Some(summary), None) = (&text, is_error) {
        return Ok(Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id,
            summary: summary.clone(),
            content: None,
        });
    }
    let output = match (text, content) {
        (Some(text), _) => Some(ToolOutput::Text(text)),
        (None, Some(raw)) => {
            let blocks = b.elements(raw, "content")?;
            let parts = blocks
                .iter()
                .enumerate()
                .map(|(i, raw)| {
                    let mut p = b.nested(raw, &format!("content[{i}]"))?;
                    if p.string("type")? != "text" {
                        return opaque_part(&p, raw);
                    }
                    read_text(&mut p).or_else(|_| opaque_part(&p, raw))
                })
                .collect::<Result<Vec<_>>>()?;
            Some(ToolOutput::Parts(parts))
        }
        (None, None) => None,
    };
    Ok(Item::ToolOutput {
        extra: Default::default(),
        id: None,
        call_id,
        output,
        is_error,
        custom: false,
        status: None,
    })
}

/// The side an item goes to and its blocks, with what the item carried
/// beyond its typed fields.
fn write_item(item: &Item, place: Place) -> Result<(Role, Vec<JsonTree<'_>>)> {
    let (role, blocks) = write_typed(item, place)?;
    let Some(diff) = item.extra().view().diff_for(WireForm::Anthropic) else {
        return Ok((role, blocks));
    };
    let given = extra::apply(&JsonTree::List(blocks).to_json(), Some(diff), &[]);
    let blocks: Vec<&RawValue> = serde_json::from_str(&given)
        .map_err(|e| place.error("content", format!("a stored diff gave no block list: {e}")))?;
    Ok((
        role,
        blocks
            .into_iter()
            .map(|b| JsonTree::Json(b.get().to_owned().into()))
            .collect(),
    ))
}

/// The side an item goes to and its blocks, in their canonical form.
fn write_typed(item: &Item, place: Place) -> Result<(Role, Vec<JsonTree<'_>>)> {
    let one = |role, block| Ok((role, vec![block]));
    match item {
        Item::Message { role, content, .. } => {
            if !matches!(role, Role::User | Role::Assistant) {
                return Err(place.error(
                    "role",
                    format!("a {role:?} message has no Messages form; send it as `system`"),
                ));
            }
            let blocks = content
                .iter()
                .enumerate()
                .map(|(i, part)| write_part(part, &format!("content[{i}]"), place))
                .collect::<Result<_>>()?;
            Ok((*role, blocks))
        }
        Item::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => {
            let input = one_line(arguments).map_err(|e| place.error("arguments", e))?;
            one(
                Role::Assistant,
                Obj::typed(&mut TreeSink, "tool_use")
                    .str("id", call_id)
                    .str("name", name)
                    .raw("input", input)
                    .finish()?,
            )
        }
        Item::ToolResult {
            call_id, summary, ..
        } => one(
            Role::User,
            Obj::typed(&mut TreeSink, "tool_result")
                .str("tool_use_id", call_id)
                .str("content", summary)
                .finish()?,
        ),
        Item::ToolOutput {
            call_id,
            output,
            is_error,
            custom: false,
            ..
        } => {
            let mut sink = TreeSink;
            let obj = Obj::typed(&mut sink, "tool_result").str("tool_use_id", call_id);
            let obj = match output {
                Some(ToolOutput::Text(text)) => obj.str("content", text),
                Some(ToolOutput::Parts(parts)) => {
                    let blocks = parts
                        .iter()
                        .enumerate()
                        .map(|(i, part)| write_part(part, &format!("output[{i}]"), place))
                        .collect::<Result<Vec<_>>>()?;
                    obj.with("content", |_| Ok(JsonTree::List(blocks)))
                }
                None => obj,
            };
            one(Role::User, obj.opt_bool("is_error", *is_error).finish()?)
        }
        Item::Thinking {
            extra: _,
            thinking,
            signature,
        } => one(
            Role::Assistant,
            Obj::typed(&mut TreeSink, "thinking")
                .str("thinking", thinking)
                .opt_str("signature", signature.as_deref())
                .finish()?,
        ),
        Item::RedactedThinking { extra: _, data } => one(
            Role::Assistant,
            Obj::typed(&mut TreeSink, "redacted_thinking")
                .str("data", data)
                .finish()?,
        ),
        Item::Opaque {
            role: Some(role @ (Role::User | Role::Assistant)),
            json,
        } => one(*role, JsonTree::Json(json.as_str().into())),
        Item::Opaque { .. } => Err(place.error("type", "a Responses item has no Messages form")),
        Item::ToolOutput { custom: true, .. } => Err(place.error(
            "custom",
            "the output of a custom tool call has no Messages form",
        )),
        Item::CustomToolCall { .. } => {
            Err(place.error("type", "a custom tool call has no Messages form"))
        }
        Item::Reasoning { .. } | Item::ReasoningParts { .. } => {
            Err(place.error("type", "Responses reasoning has no Messages form"))
        }
    }
}

fn write_part<'a>(part: &'a ContentPart, at: &str, place: Place) -> Result<JsonTree<'a>> {
    let no_form = |what: &str| place.error(at, format!("{what} has no Messages form"));
    match part {
        ContentPart::Text { text } => Obj::typed(&mut TreeSink, "text").str("text", text).finish(),
        ContentPart::OutputText {
            text,
            annotations,
            logprobs: None,
        } => Obj::typed(&mut TreeSink, "text")
            .str("text", text)
            .opt_json("citations", annotations.as_ref().map(JsonText::as_str))
            .finish(),
        ContentPart::OutputText { .. } => Err(no_form("output_text with logprobs")),
        ContentPart::Opaque { json } => Ok(JsonTree::Json(json.as_str().into())),
        ContentPart::Refusal { .. } => Err(no_form("a refusal")),
        ContentPart::InputImage { .. } => Err(no_form("an input_image (use an image block)")),
        ContentPart::InputFile { .. } => Err(no_form("an input_file (use a document block)")),
        ContentPart::InputAudio { .. } => Err(no_form("input_audio")),
    }
}
