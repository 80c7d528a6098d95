//! Reading a Codex rollout: its lines and the items they become.

use std::ops::ControlFlow;
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::CONTEXT_PREFIXES;
use crate::history::lines::{self, Line};
use crate::history::{ItemTranscript, ReadStats, TokenUsage, TranscriptItem};
use crate::item::{ContentPart, Item, Role};
use crate::schema::JsonText;

/// One line of a rollout. Current versions write `{timestamp, type,
/// payload}`; the oldest wrote the session's metadata bare on the first line
/// and every Responses item bare after it, with `{"record_type": …}` lines
/// between.
#[derive(Deserialize)]
pub(super) struct RawLine<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    record_type: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    id: Option<serde::de::IgnoredAny>,
}

/// What a line is, once the versions' shapes are told apart.
pub(super) enum Kind<'a> {
    SessionMeta(&'a RawValue),
    ResponseItem(&'a RawValue),
    Compacted(&'a RawValue),
    EventMsg(&'a RawValue),
    /// `turn_context`, `record_type` lines: known, not history.
    Metadata(&'static str),
    Unknown(String),
}

impl<'a> RawLine<'a> {
    /// Classifies the line; `whole` is its text, the payload of the bare
    /// shapes, and `first` says whether it is the file's first object.
    pub(super) fn kind(&self, whole: &'a RawValue, first: bool) -> Kind<'a> {
        match (self.kind.as_deref(), self.payload) {
            (Some("session_meta"), Some(p)) => Kind::SessionMeta(p),
            (Some("response_item"), Some(p)) => Kind::ResponseItem(p),
            (Some("compacted"), Some(p)) => Kind::Compacted(p),
            (Some("event_msg"), Some(p)) => Kind::EventMsg(p),
            (Some("turn_context"), Some(_)) => Kind::Metadata("turn_context"),
            (Some(other), Some(_)) => Kind::Unknown(other.to_owned()),
            (_, None) if self.record_type.is_some() => Kind::Metadata("record_type"),
            (None, None) if first && self.id.is_some() => Kind::SessionMeta(whole),
            (Some(_), None) => Kind::ResponseItem(whole),
            (None, _) => Kind::Unknown("(none)".to_owned()),
        }
    }
}

/// The fields of `session_meta` discovery and reading need.
#[derive(Deserialize, Default)]
pub(super) struct Meta {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    pub(super) cwd: Option<String>,
}

impl Meta {
    /// Reads a `session_meta` payload leniently: a field of another type
    /// counts as absent.
    pub(super) fn parse(payload: &RawValue) -> Meta {
        serde_json::from_str::<serde_json::Value>(payload.get())
            .map(|v| {
                let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
                Meta {
                    id: text("id"),
                    session_id: text("session_id"),
                    cwd: text("cwd"),
                }
            })
            .unwrap_or_default()
    }

    /// The session id: `id`, or `session_id` where a version wrote that.
    pub(super) fn session(&self) -> Option<&str> {
        self.id.as_deref().or(self.session_id.as_deref())
    }
}

#[derive(Deserialize)]
struct Compacted<'a> {
    #[serde(default)]
    message: Option<String>,
    #[serde(borrow, default)]
    replacement_history: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    num_turns: Option<u64>,
    /// A `user_message`'s prompt.
    #[serde(default)]
    message: Option<String>,
    /// A `token_count`'s counts.
    #[serde(default)]
    info: Option<TokenInfo>,
}

#[derive(Deserialize)]
struct TokenInfo {
    #[serde(default)]
    last_token_usage: Option<Tokens>,
}

/// One model call's tokens, as Codex counts them: `input_tokens` includes
/// the cached ones.
#[derive(Deserialize, Clone, Copy)]
struct Tokens {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

#[derive(Deserialize)]
struct TurnContext {
    #[serde(default)]
    model: Option<String>,
}

/// Parses rollout bytes (uncompressed), with no path; never panics.
///
/// Example: [the module](crate::history::codex#example).
pub fn parse_rollout_bytes(bytes: &[u8]) -> ItemTranscript {
    let mut reader = Reader::new(String::new());
    let scan = lines::scan(bytes, &mut reader.stats, |n, text| {
        ControlFlow::Continue(
            reader
                .t
                .line(n, text, &mut reader.first, &mut reader.events),
        )
    });
    reader.finish(scan.content_hash)
}

/// Reads the rollout at `path`, plain or `.zst`.
///
/// Example: [the module](crate::history::codex#example).
pub fn read_rollout(path: &Path) -> Result<ItemTranscript, crate::Error> {
    let mut reader = Reader::new(path.display().to_string());
    let hash = lines::scan_file(path, &mut reader.stats, |n, text| {
        ControlFlow::Continue(
            reader
                .t
                .line(n, text, &mut reader.first, &mut reader.events),
        )
    })?;
    Ok(reader.finish(hash))
}

/// The scan's state: the transcript, its line statistics kept apart so the
/// scan can count into them while the transcript grows.
struct Reader {
    t: ItemTranscript,
    stats: ReadStats,
    first: bool,
    events: Events,
}

/// What a rollout's events say beside its items, gathered as it is read.
#[derive(Default)]
pub(super) struct Events {
    /// `user_message` prompts: segment, line, timestamp, text.
    prompts: Vec<(usize, usize, Option<String>, String)>,
    /// The model of the last `turn_context`, not yet given to an item.
    model: Option<String>,
    /// The model last given to an item.
    last_model: Option<String>,
}

impl Reader {
    fn new(source: String) -> Reader {
        Reader {
            t: ItemTranscript::new(source),
            stats: ReadStats::default(),
            first: true,
            events: Events::default(),
        }
    }

    fn finish(mut self, content_hash: String) -> ItemTranscript {
        self.t.stats.absorb(self.stats);
        self.t.content_hash = content_hash;
        self.t.prompts_from_events(self.events.prompts);
        self.t
    }
}

impl ItemTranscript {
    fn line(&mut self, n: usize, text: &str, first: &mut bool, events: &mut Events) -> Line {
        let Ok(whole) = serde_json::from_str::<&RawValue>(text) else {
            return Line::Malformed;
        };
        let Ok(raw) = serde_json::from_str::<RawLine<'_>>(text) else {
            return Line::Malformed;
        };
        let kind = raw.kind(whole, *first);
        *first = false;
        let timestamp = raw.timestamp.clone();
        match kind {
            Kind::SessionMeta(payload) => {
                self.stats.metadata("session_meta");
                if self.session_id.is_none() && self.cwd.is_none() {
                    let meta = Meta::parse(payload);
                    self.session_id = meta.session().map(str::to_owned);
                    self.cwd = meta.cwd;
                }
            }
            Kind::ResponseItem(payload) => {
                let Some(item) = convert(payload) else {
                    return Line::Malformed;
                };
                let shown = !is_context(&item);
                let mut t = TranscriptItem::new(item, n, timestamp, shown);
                if t.item.is_assistant_output() {
                    if let Some(model) = events.model.take() {
                        if events.last_model.as_ref() != Some(&model) {
                            events.last_model = Some(model.clone());
                            t.model = Some(model);
                        }
                    }
                }
                self.current().items.push(t);
            }
            Kind::Compacted(payload) => {
                let Ok(c) = serde_json::from_str::<Compacted<'_>>(payload.get()) else {
                    return Line::Malformed;
                };
                let carried = match c.replacement_history {
                    Some(history) => history.into_iter().filter_map(convert).collect(),
                    None => c
                        .message
                        .filter(|m| !m.trim().is_empty())
                        .map(|m| vec![Item::message(Role::User, m)])
                        .unwrap_or_default(),
                };
                self.compaction(n, timestamp, carried);
            }
            Kind::EventMsg(payload) => {
                let event = serde_json::from_str::<Event>(payload.get()).ok();
                match event {
                    Some(Event {
                        kind: Some(kind),
                        num_turns: Some(turns),
                        ..
                    }) if kind == "thread_rolled_back" => self.roll_back(turns),
                    Some(Event {
                        kind: Some(kind),
                        message: Some(text),
                        ..
                    }) if kind == "user_message" => {
                        self.stats.metadata("event_msg");
                        let segment = self.segments.len() - 1;
                        events.prompts.push((segment, n, timestamp, text));
                    }
                    Some(Event {
                        kind: Some(kind),
                        info:
                            Some(TokenInfo {
                                last_token_usage: Some(tokens),
                            }),
                        ..
                    }) if kind == "token_count" => {
                        self.stats.metadata("event_msg");
                        self.usage(tokens);
                    }
                    _ => self.stats.metadata("event_msg"),
                }
            }
            Kind::Metadata(kind) => {
                if kind == "turn_context" {
                    if let Some(TurnContext { model: Some(model) }) =
                        raw.payload.and_then(|p| serde_json::from_str(p.get()).ok())
                    {
                        events.model = Some(model);
                    }
                }
                self.stats.metadata(kind)
            }
            Kind::Unknown(kind) => self.stats.unknown(&kind),
        }
        Line::Read
    }

    /// Gives a model call's tokens to the first item of its response: the
    /// last run of assistant output in the current segment, if no item of
    /// it has usage yet.
    fn usage(&mut self, tokens: Tokens) {
        let items = &mut self.current().items;
        let end = items
            .iter()
            .rposition(|t| t.item.is_assistant_output())
            .map_or(0, |i| i + 1);
        let start = items[..end]
            .iter()
            .rposition(|t| !t.item.is_assistant_output())
            .map_or(0, |i| i + 1);
        if start < end && items[start..end].iter().all(|t| t.usage.is_none()) {
            items[start].usage = Some(TokenUsage {
                input_tokens: tokens.input_tokens,
                cache_read_tokens: tokens.cached_input_tokens,
                cache_write_tokens: 0,
                output_tokens: tokens.output_tokens,
            });
        }
    }

    /// Adds the prompts that only `user_message` events carry: those whose
    /// text no user message of their segment has, each in its place by
    /// line, shown.
    fn prompts_from_events(&mut self, prompts: Vec<(usize, usize, Option<String>, String)>) {
        for (segment, line, timestamp, text) in prompts {
            let Some(s) = self.segments.get_mut(segment) else {
                continue;
            };
            let said = s.items.iter().any(|t| {
                t.item.is_user_message()
                    && t.item.text().is_some_and(|own| own.trim() == text.trim())
            });
            if said || text.trim().is_empty() {
                continue;
            }
            let at = s.items.partition_point(|t| t.line < line);
            let item = Item::message(Role::User, text);
            s.items
                .insert(at, TranscriptItem::new(item, line, timestamp, true));
        }
    }

    /// Drops the last `turns` user turns of the current segment, as Codex
    /// does on `thread_rolled_back`: from the `turns`-th last user message
    /// (context messages aside) to the end.
    fn roll_back(&mut self, turns: u64) {
        let segment = self.current();
        let mut cut = segment.items.len();
        let mut left = turns;
        while left > 0 && cut > 0 {
            cut -= 1;
            let item = &segment.items[cut].item;
            if item.is_user_message() && !is_context(item) {
                left -= 1;
            }
        }
        if left > 0 {
            cut = 0;
        }
        let dropped: Vec<(String, usize)> = segment.items[cut..]
            .iter()
            .map(|t| (kind_of(&t.item), t.line))
            .collect();
        segment.items.truncate(cut);
        for (kind, line) in dropped {
            self.stats.left_out(&kind, line);
        }
    }
}

/// A Responses item through the crate's reader, or kept whole as an opaque
/// item when that reader refuses it (a field it does not know); `None`
/// when it is not a JSON object.
fn convert(payload: &RawValue) -> Option<Item> {
    if let Ok(item) = Item::from_responses_json(payload.get()) {
        return Some(item);
    }
    let json = JsonText::parse(payload.get()).ok()?;
    json.as_str()
        .starts_with('{')
        .then_some(Item::Opaque { role: None, json })
}

/// What an item left out of the transcript is counted as.
fn kind_of(item: &Item) -> String {
    if item.is_user_message() {
        "user"
    } else if item.is_tool_result() {
        "tool_result"
    } else if item.is_assistant_output() {
        "assistant"
    } else {
        "other"
    }
    .to_owned()
}

/// Context Codex injects as user messages (instructions, the environment):
/// imported, not shown, and not a turn.
fn is_context(item: &Item) -> bool {
    let Item::Message {
        role: Role::User,
        content,
        ..
    } = item
    else {
        return false;
    };
    content.iter().any(|p| match p {
        ContentPart::Text { text } => {
            let text = text.trim_start();
            CONTEXT_PREFIXES
                .iter()
                .any(|prefix| text.starts_with(prefix))
        }
        _ => false,
    })
}
