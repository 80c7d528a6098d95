//! Writing a read transcript into the store: as a new session every time
//! ([`HistoryImport::write_to`]), or once per content
//! ([`HistoryImport::write_once_to`]).
//!
//! A transcript that was compacted is compacted in the store too, as the
//! store models compaction: the history before the first compaction is
//! saved, then each compaction is a [`Store::compact`] of the session to
//! what the agent carried on with, followed by what came after it. So the
//! history before a compaction stays in the log, and restoring the session
//! gives what the agent would resend.
//!
//! # Importing once
//!
//! A session written by `write_once_to` has an id derived from the reader's
//! domain and the BLAKE3 of the content read (a UUID of version 8), so
//! finding an earlier import of the same content is one `exists` check, and
//! two imports racing cannot both create it. The provenance, written last,
//! marks the import complete. A transcript that has grown since is other
//! content: it imports as a new session, whole, beside the old one.

use serde::Serialize;
use serde_json::Value;

use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::item::Item;
use crate::schema::{
    group_delta, JsonText, LogEntry, LoggedItem, RequestConfig, SessionId, SessionOrigin,
};
use crate::store::{now_ms, Store};

/// A compaction in a transcript: where the history starts over.
///
/// Example: [the `history` module](crate::history#example).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryCompaction {
    /// What the agent carried on with: the history the compaction starts
    /// from (a summary, or the history restated). Empty when the summary is
    /// an item of its own, as in Claude Code.
    pub history: Vec<Item>,
    /// What the transcript records after the compaction, in order.
    pub items: Vec<Item>,
    /// What the transcript says of each of `items` (see
    /// [`HistoryImport::meta`]).
    pub meta: Vec<ItemMeta>,
    /// When the compaction happened, ms since the Unix epoch, if the
    /// transcript says.
    pub ts_ms: Option<u64>,
}

/// What a transcript says of one item beyond the item itself.
///
/// Example: [the `history` module](crate::history#example).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ItemMeta {
    /// When it was written, ms since the Unix epoch: the entry that holds it
    /// carries this time rather than the import's.
    pub ts_ms: Option<u64>,
    /// The model that produced it, on the first item of a model response:
    /// a change of model is a `config_changed` entry before it.
    pub model: Option<String>,
    /// The tokens that response used, on its first item: an `llm_usage`
    /// entry after the response.
    pub usage: Option<TokenUsage>,
}

/// Token counts of one model call, as a transcript records them.
///
/// Example: [the `history` module](crate::history#example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TokenUsage {
    /// Input tokens in total (cached ones included).
    pub input_tokens: u64,
    /// Input tokens read from the cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the cache.
    pub cache_write_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// A transcript converted to runtime items, ready to be written as a new
/// session, with its provenance.
///
/// Example: [the `history` module](crate::history#example).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryImport {
    /// The conversation up to its first compaction (all of it when it has
    /// none), in order. Pairings the transcript lacks stay missing: no call
    /// or result is invented.
    pub items: Vec<Item>,
    /// What the transcript says of each item (its time, model, usage), in
    /// the order of `items`; shorter when it says nothing of the rest.
    pub meta: Vec<ItemMeta>,
    /// The session's title, when the transcript gives one (a `summary`
    /// line, or its first real prompt); otherwise the store takes the
    /// first user text.
    pub title: Option<String>,
    /// The compactions, in order; each becomes a compaction of the session.
    pub compactions: Vec<HistoryCompaction>,
    /// The domain of the `Extension` entry that records provenance, for
    /// example `"history.agy"`.
    pub extension_domain: &'static str,
    /// Where the items came from (transcript path, lines or steps), as the
    /// body of that `Extension` entry; the writer adds `content_blake3`.
    pub provenance: serde_json::Value,
    /// The BLAKE3 (hex) of the content the items were read from: what makes
    /// two imports the same.
    pub content_hash: String,
}

/// How many items of each kind a history holds: what an import report
/// compares between a transcript and the session it became.
///
/// Example: [the `codex` module](crate::history::codex#example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ItemCounts {
    /// User messages (context a tool injects as one included).
    pub user_messages: usize,
    /// Assistant messages.
    pub assistant_messages: usize,
    /// Calls the model made.
    pub tool_calls: usize,
    /// Their results.
    pub tool_results: usize,
    /// Reasoning and thinking items.
    pub reasoning: usize,
    /// Everything else: system and developer messages, items no kind above
    /// takes.
    pub other: usize,
}

impl ItemCounts {
    /// The counts of `items`.
    ///
    /// Example: [the `codex` module](crate::history::codex#example).
    pub fn of<'a>(items: impl IntoIterator<Item = &'a Item>) -> ItemCounts {
        let mut counts = ItemCounts::default();
        for item in items {
            counts.add(item);
        }
        counts
    }

    /// Counts one more item.
    ///
    /// Example: [the `codex` module](crate::history::codex#example).
    pub fn add(&mut self, item: &Item) {
        let slot = if item.is_user_message() {
            &mut self.user_messages
        } else if item.is_assistant_message() {
            &mut self.assistant_messages
        } else if item.is_tool_call() {
            &mut self.tool_calls
        } else if item.is_tool_result() {
            &mut self.tool_results
        } else if item.is_reasoning() {
            &mut self.reasoning
        } else {
            &mut self.other
        };
        *slot += 1;
    }
}

impl std::fmt::Display for ItemCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} user, {} assistant, {} tool calls, {} tool results, {} reasoning, {} other",
            self.user_messages,
            self.assistant_messages,
            self.tool_calls,
            self.tool_results,
            self.reasoning,
            self.other
        )
    }
}

/// The session an import wrote, or found already written.
///
/// Example: [the module](crate::history::claude#example).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Imported {
    /// The session.
    pub session: SessionId,
    /// `false` when the same content had been imported before and nothing
    /// was written.
    pub created: bool,
}

impl HistoryImport {
    /// Writes the items as a new session of `store`, compacted where the
    /// transcript was, with the provenance as an `Extension` entry, and
    /// returns its id. Writes every time it is called; see
    /// [`HistoryImport::write_once_to`]. Pairings the transcript lacks stay
    /// missing, for [`crate::RestoredState::check`] to report.
    ///
    /// Example: [the `history` module](crate::history#example).
    pub fn write_to(&self, store: &Store) -> Result<SessionId> {
        let id = SessionId::new_v7();
        self.write_session(store, id)?;
        Ok(id)
    }

    /// Writes the import unless the same content was imported into `store`
    /// before, in which case it returns that session and writes nothing.
    /// See the module docs for how the earlier import is found.
    ///
    /// An earlier import that was cut short (a crash before its provenance
    /// was written) is an error naming its session, which the user may
    /// remove and import again; it is never completed by guess.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn write_once_to(&self, store: &Store) -> Result<Imported> {
        let session = self.import_id();
        if !store.exists(session) {
            match self.write_session(store, session) {
                Ok(()) => {
                    return Ok(Imported {
                        session,
                        created: true,
                    })
                }
                // Another import of the same content won the race.
                Err(_) if store.exists(session) => {}
                Err(e) => return Err(e),
            }
        }
        let state = store.restore(session)?;
        let complete = state
            .extensions
            .iter()
            .filter(|e| e.domain == self.extension_domain)
            .filter_map(|e| serde_json::from_str::<Value>(e.payload.as_str()).ok())
            .any(|p| p["content_blake3"] == self.content_hash.as_str());
        if complete {
            Ok(Imported {
                session,
                created: false,
            })
        } else {
            Err(Error::invalid(format!(
                "session {session} holds an unfinished import of this transcript \
                 (interrupted?); remove it (`session-store rm {session}`) and import again"
            )))
        }
    }

    /// The counts of every item the import writes: each segment's carried
    /// history and items.
    ///
    /// Example: [the `codex` module](crate::history::codex#example).
    pub fn counts(&self) -> ItemCounts {
        ItemCounts::of(
            self.items.iter().chain(
                self.compactions
                    .iter()
                    .flat_map(|c| c.history.iter().chain(&c.items)),
            ),
        )
    }

    /// The counts of every item the log of session `id` holds, in every
    /// entry (each compaction's history included): what an import wrote.
    ///
    /// Example: [the `codex` module](crate::history::codex#example).
    pub fn stored_counts(store: &Store, id: SessionId) -> Result<ItemCounts> {
        let mut counts = ItemCounts::default();
        store.export_entries(id, |e| {
            for item in e.entry.items() {
                counts.add(&item.clone().into_item());
            }
            Ok(())
        })?;
        Ok(counts)
    }

    /// The id of the session of an import of this content.
    ///
    /// Example: [the `history` module](crate::history#example).
    pub fn import_id(&self) -> SessionId {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"session-store history import v1\0");
        hasher.update(self.extension_domain.as_bytes());
        hasher.update(b"\0");
        hasher.update(self.content_hash.as_bytes());
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
        // RFC 9562 version 8 (custom) and variant bits.
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        SessionId(bytes)
    }

    /// Writes the session under `id`, the provenance last: its presence
    /// says the whole import is written. Each entry carries the time the
    /// transcript gives its items (the import's time where it gives none,
    /// and never earlier than the entry before it, since a log's times do
    /// not go back); a change of model is a `config_changed` entry, and a
    /// response's token usage an `llm_usage` entry after it.
    fn write_session(&self, store: &Store, id: SessionId) -> Result<()> {
        let mut provenance = self.provenance.clone();
        if let Value::Object(map) = &mut provenance {
            map.insert("content_blake3".into(), self.content_hash.clone().into());
        }
        // Checked before the session exists, so a refusal leaves nothing.
        let provenance = JsonText::from_value(&provenance)?;
        let first_ts = self
            .meta
            .iter()
            .chain(self.compactions.iter().flat_map(|c| c.meta.iter()))
            .find_map(|m| m.ts_ms)
            .unwrap_or_else(now_ms);
        let model = self
            .meta
            .iter()
            .chain(self.compactions.iter().flat_map(|c| c.meta.iter()))
            .find_map(|m| m.model.clone());
        let mut config = RequestConfig {
            model,
            ..RequestConfig::default()
        };
        let start = LogEntry::SessionStart {
            ts: first_ts,
            system_prompt: None,
            config: config.clone(),
            history: Vec::new(),
            forked_from: None,
            compacted_from: None,
        };
        let mut head = store.create_with_entries_as(id, &[start], None, self.title.clone())?;
        let mut clock = Clock { last: first_ts };
        let mut writer = EntryWriter {
            store,
            id,
            head: &mut head,
            config: &mut config,
            clock: &mut clock,
        };
        writer.items(&self.items, &self.meta)?;
        for compaction in &self.compactions {
            writer.compaction(compaction)?;
        }
        let ts = clock.next(None);
        store.save_entries(
            id,
            &mut head,
            &[LogEntry::Extension {
                ts,
                domain: self.extension_domain.to_owned(),
                payload: provenance,
            }],
        )
    }
}

/// The times of an import's entries: the transcript's, never going back.
struct Clock {
    last: u64,
}

impl Clock {
    /// The time of the next entry: `ts`, or the last one's when it has none
    /// or would go back.
    fn next(&mut self, ts: Option<u64>) -> u64 {
        self.last = self.last.max(ts.unwrap_or(self.last));
        self.last
    }
}

/// Appends an import's items as entries, with their times, models and
/// usage.
struct EntryWriter<'a> {
    store: &'a Store,
    id: SessionId,
    head: &'a mut EntryHash,
    config: &'a mut RequestConfig,
    clock: &'a mut Clock,
}

impl EntryWriter<'_> {
    /// `items` in runs of one time each; `meta` says of each item what the
    /// transcript does.
    fn items(&mut self, items: &[Item], meta: &[ItemMeta]) -> Result<()> {
        let none = ItemMeta::default();
        let meta_of = |i: usize| meta.get(i).unwrap_or(&none);
        let mut entries = Vec::new();
        let mut start = 0;
        while start < items.len() {
            let m = meta_of(start);
            let mut end = start + 1;
            while end < items.len()
                && meta_of(end).ts_ms == m.ts_ms
                && meta_of(end).model.is_none()
                && meta_of(end).usage.is_none()
            {
                end += 1;
            }
            let ts = self.clock.next(m.ts_ms);
            if let Some(model) = &m.model {
                if self.config.model.as_ref() != Some(model) {
                    self.config.model = Some(model.clone());
                    entries.push(LogEntry::ConfigChanged {
                        ts,
                        config: self.config.clone(),
                    });
                }
            }
            entries.extend(group_delta(&items[start..end], ts));
            if let Some(u) = m.usage {
                entries.push(LogEntry::LlmUsage {
                    ts,
                    history_len: end as u64,
                    input_total_tokens: u.input_tokens,
                    cache_read_tokens: u.cache_read_tokens,
                    cache_write_tokens: u.cache_write_tokens,
                    output_tokens: u.output_tokens,
                });
            }
            start = end;
        }
        if entries.is_empty() {
            return Ok(());
        }
        self.store.save_entries(self.id, self.head, &entries)
    }

    /// A compaction of the session to what the agent carried on with, then
    /// what came after it.
    fn compaction(&mut self, c: &HistoryCompaction) -> Result<()> {
        let ts = self.clock.next(c.ts_ms);
        let start = LogEntry::SessionStart {
            ts,
            system_prompt: None,
            config: self.config.clone(),
            history: c.history.iter().map(LoggedItem::from).collect(),
            forked_from: None,
            compacted_from: Some(SessionOrigin {
                session_id: self.id,
                at_hash: *self.head,
            }),
        };
        self.store.save_entries(self.id, self.head, &[start])?;
        self.items(&c.items, &c.meta)
    }
}
