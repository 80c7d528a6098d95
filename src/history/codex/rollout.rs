//! Reading a Codex rollout: its lines and the items they become.

use std::ops::ControlFlow;
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::CONTEXT_PREFIXES;
use crate::history::lines::{self, Line};
use crate::history::{ItemTranscript, ReadStats, TranscriptItem};
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
}

/// Parses rollout bytes (uncompressed), with no path; never panics.
pub fn parse_rollout_bytes(bytes: &[u8]) -> ItemTranscript {
    let mut reader = Reader::new(String::new());
    let scan = lines::scan(bytes, &mut reader.stats, |n, text| {
        ControlFlow::Continue(reader.t.line(n, text, &mut reader.first))
    });
    reader.finish(scan.content_hash)
}

/// Reads the rollout at `path`, plain or `.zst`.
pub fn read_rollout(path: &Path) -> Result<ItemTranscript, crate::Error> {
    let mut reader = Reader::new(path.display().to_string());
    let hash = lines::scan_file(path, &mut reader.stats, |n, text| {
        ControlFlow::Continue(reader.t.line(n, text, &mut reader.first))
    })?;
    Ok(reader.finish(hash))
}

/// The scan's state: the transcript, its line statistics kept apart so the
/// scan can count into them while the transcript grows.
struct Reader {
    t: ItemTranscript,
    stats: ReadStats,
    first: bool,
}

impl Reader {
    fn new(source: String) -> Reader {
        Reader {
            t: ItemTranscript::new(source),
            stats: ReadStats::default(),
            first: true,
        }
    }

    fn finish(mut self, content_hash: String) -> ItemTranscript {
        self.t.stats.absorb(self.stats);
        self.t.content_hash = content_hash;
        self.t
    }
}

impl ItemTranscript {
    fn line(&mut self, n: usize, text: &str, first: &mut bool) -> Line {
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
                self.current().items.push(TranscriptItem {
                    item,
                    line: n,
                    timestamp,
                    shown,
                });
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
                self.compaction(n, carried);
            }
            Kind::EventMsg(payload) => {
                let event = serde_json::from_str::<Event>(payload.get()).ok();
                match event {
                    Some(Event {
                        kind: Some(kind),
                        num_turns: Some(turns),
                    }) if kind == "thread_rolled_back" => self.roll_back(turns),
                    _ => self.stats.metadata("event_msg"),
                }
            }
            Kind::Metadata(kind) => self.stats.metadata(kind),
            Kind::Unknown(kind) => self.stats.unknown(&kind),
        }
        Line::Read
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
        let dropped = segment.items.len() - cut;
        segment.items.truncate(cut);
        self.stats.off_path += dropped;
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
