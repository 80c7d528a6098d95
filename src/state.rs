//! Replay: folding entries into the state a runtime resumes from, and the
//! ready-to-send check of that state.
//!
//! # Example
//!
//! ```
//! use session_store::schema::{group_delta, now_ms, LogEntry};
//! use session_store::state::{check_history, collect_state, Problem, RestoredState};
//! use session_store::Item;
//! # fn main() -> session_store::Result<()> {
//! let call = Item::from_responses_json(r#"{"type":"function_call","call_id":"call_1","name":"grep","arguments":"{}"}"#)?;
//! let mut entries = group_delta(&[Item::user_text("Find the panic."), call], now_ms());
//! entries.push(LogEntry::TurnEnd { ts: now_ms(), turn_count: 1 });
//!
//! let state = collect_state(&entries);
//! assert_eq!(state.turn_count, 1);
//! assert_eq!(check_history(&state.history), [Problem::CallWithoutResult { index: 1, call_id: "call_1".into() }]);
//!
//! // Entry by entry, as a follower folds what it reads.
//! let mut follower = RestoredState::default();
//! entries.iter().for_each(|entry| follower.apply(entry));
//! assert_eq!(follower, state);
//! # Ok(()) }
//! ```

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::item::{CallLink, Item};
use crate::log::{Log, RecordView, Snapshot, TornTail};
use crate::payload::{resolve_item, PayloadArea};
use crate::schema::{
    ArchivedLogEntry, ArchivedLoggedItem, JsonText, LogEntry, RequestConfig, SessionId,
    SessionOrigin,
};

/// Token usage of one model call, as logged.
///
/// Example: [`Store::commit_turn`](crate::Store::commit_turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct UsageRecord {
    /// Timestamp, ms.
    pub ts: u64,
    /// History length sent.
    pub history_len: u64,
    /// Input tokens in total.
    pub input_total_tokens: u64,
    /// Input tokens read from cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to cache.
    pub cache_write_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

impl UsageRecord {
    /// The `LlmUsage` entry of this record, stamped `now` when its own `ts`
    /// is 0.
    ///
    /// ```
    /// use session_store::schema::{now_ms, LogEntry};
    /// use session_store::state::UsageRecord;
    /// let usage = UsageRecord { output_tokens: 56, ..UsageRecord::default() };
    /// let entry = usage.entry(now_ms());
    /// assert!(matches!(entry, LogEntry::LlmUsage { output_tokens: 56, .. }));
    /// ```
    pub fn entry(self, now: u64) -> LogEntry {
        LogEntry::LlmUsage {
            ts: if self.ts == 0 { now } else { self.ts },
            history_len: self.history_len,
            input_total_tokens: self.input_total_tokens,
            cache_read_tokens: self.cache_read_tokens,
            cache_write_tokens: self.cache_write_tokens,
            output_tokens: self.output_tokens,
        }
    }
}

/// An extension entry, as logged.
///
/// Example: [`NAME_DOMAIN`](crate::store::NAME_DOMAIN).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtensionRecord {
    /// Timestamp, ms.
    pub ts: u64,
    /// Who owns the payload.
    pub domain: String,
    /// The payload.
    pub payload: JsonText,
}

/// What a runtime needs to resume a session.
///
/// Example: [`Store::restore`](crate::Store::restore).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RestoredState {
    /// The system prompt of the last `SessionStart`.
    pub system_prompt: Option<String>,
    /// The request settings in force.
    pub config: RequestConfig,
    /// The live history, in log order.
    pub history: Vec<Item>,
    /// Turns completed.
    pub turn_count: u64,
    /// Whether the last run (completed or errored) was interrupted.
    pub last_run_interrupted: bool,
    /// Usage entries, in order.
    pub usage: Vec<UsageRecord>,
    /// Extension entries, in order.
    pub extensions: Vec<ExtensionRecord>,
    /// Fork origin of the last `SessionStart`.
    pub forked_from: Option<SessionOrigin>,
    /// Compaction origin of the last `SessionStart`.
    pub compacted_from: Option<SessionOrigin>,
    /// The hash of the last entry folded in, when read from a log.
    pub head: Option<EntryHash>,
    /// The seq of the last entry folded in, when read from a log.
    pub head_seq: Option<u64>,
    /// Entries folded in.
    pub entries: u64,
    /// Set when a salvage cut dropped records from this log (this open's
    /// recovery, or one a writer recorded earlier): the history is what was
    /// left before the damage, not everything that was written, and
    /// [`RestoredState::check`] reports [`Problem::Salvaged`].
    pub salvaged: Option<TornTail>,
}

/// Folds entries, in order, into a [`RestoredState`] with the seed's semantics.
///
/// Example: [the module](crate::state#example).
pub fn collect_state<I>(entries: I) -> RestoredState
where
    I: IntoIterator,
    I::Item: Borrow<LogEntry>,
{
    let mut state = RestoredState::default();
    for entry in entries {
        state.apply(entry.borrow());
    }
    state
}

impl RestoredState {
    /// Folds one owned entry in.
    ///
    /// Example: [the module](crate::state#example).
    pub fn apply(&mut self, entry: &LogEntry) {
        self.entries += 1;
        match entry {
            LogEntry::SessionStart {
                system_prompt,
                config,
                history,
                forked_from,
                compacted_from,
                ..
            } => {
                self.system_prompt = system_prompt.clone();
                self.config = config.clone();
                self.history = history.iter().cloned().map(|i| i.into_item()).collect();
                self.forked_from = *forked_from;
                self.compacted_from = *compacted_from;
            }
            LogEntry::UserInput { .. }
            | LogEntry::AssistantItems { .. }
            | LogEntry::ToolResults { .. }
            | LogEntry::HookInjectedItems { .. } => self
                .history
                .extend(entry.items().iter().cloned().map(|i| i.into_item())),
            LogEntry::TurnEnd { turn_count, .. } => self.turn_count = *turn_count,
            LogEntry::RunCompleted { interrupted, .. }
            | LogEntry::RunErrored { interrupted, .. } => self.last_run_interrupted = *interrupted,
            LogEntry::ConfigChanged { config, .. } => self.config = config.clone(),
            LogEntry::LlmUsage {
                ts,
                history_len,
                input_total_tokens,
                cache_read_tokens,
                cache_write_tokens,
                output_tokens,
            } => self.usage.push(UsageRecord {
                ts: *ts,
                history_len: *history_len,
                input_total_tokens: *input_total_tokens,
                cache_read_tokens: *cache_read_tokens,
                cache_write_tokens: *cache_write_tokens,
                output_tokens: *output_tokens,
            }),
            LogEntry::Extension {
                ts,
                domain,
                payload,
            } => self.extensions.push(ExtensionRecord {
                ts: *ts,
                domain: domain.clone(),
                payload: payload.clone(),
            }),
            LogEntry::ItemsRemoved { count, .. } => self.remove_last(*count),
            // The parent's history is the store's to read (`Store::restore`
            // folds it in before this entry); the log alone knows the link.
            LogEntry::ForkedFrom {
                parent,
                parent_hash: hash,
                ..
            } => {
                self.forked_from = Some(SessionOrigin {
                    session_id: *parent,
                    at_hash: *hash,
                });
                self.compacted_from = None;
            }
        }
    }

    /// Drops the last `count` items of the history (all of them when it
    /// holds fewer), as an `ItemsRemoved` entry says.
    fn remove_last(&mut self, count: u64) {
        let keep = (self.history.len() as u64).saturating_sub(count);
        self.history.truncate(keep as usize);
    }

    /// Folds one archived entry in, building runtime items straight from the
    /// archived bytes: no owned `LogEntry`, no JSON. An entry that refers
    /// to the store's payload area cannot be folded without it
    /// ([`Error::Payload`]): read such logs through
    /// the [`Store`](crate::Store), or fold records with
    /// [`RestoredState::apply_record`].
    ///
    /// Example: [the module](crate::state#example).
    pub fn apply_archived(&mut self, entry: &ArchivedLogEntry) -> Result<()> {
        self.apply_resolved(entry, None, 0)
    }

    /// Folds one record in: [`RestoredState::apply_archived`], with the
    /// items it keeps in the store's payload area read from there.
    ///
    /// Example: [the module](crate::state#example).
    pub fn apply_record(&mut self, rec: &RecordView<'_>) -> Result<()> {
        self.apply_resolved(rec.entry(), rec.payloads, rec.seq)
    }

    fn apply_resolved(
        &mut self,
        entry: &ArchivedLogEntry,
        payloads: Option<&PayloadArea>,
        seq: u64,
    ) -> Result<()> {
        match entry {
            ArchivedLogEntry::SessionStart {
                system_prompt,
                config,
                history,
                forked_from,
                compacted_from,
                ..
            } => {
                self.entries += 1;
                self.system_prompt = system_prompt.as_ref().map(|s| s.as_str().to_owned());
                self.config = config.to_owned_config();
                self.history.clear();
                self.extend_resolved(history.as_slice(), payloads, seq)?;
                self.forked_from = forked_from
                    .as_ref()
                    .map(|o| crate::schema::ArchivedSessionOrigin::get(o));
                self.compacted_from = compacted_from
                    .as_ref()
                    .map(|o| crate::schema::ArchivedSessionOrigin::get(o));
            }
            ArchivedLogEntry::UserInput { .. }
            | ArchivedLogEntry::AssistantItems { .. }
            | ArchivedLogEntry::ToolResults { .. }
            | ArchivedLogEntry::HookInjectedItems { .. } => {
                self.entries += 1;
                self.extend_resolved(entry.items(), payloads, seq)?;
            }
            ArchivedLogEntry::TurnEnd { turn_count, .. } => {
                self.entries += 1;
                self.turn_count = turn_count.to_native();
            }
            ArchivedLogEntry::RunCompleted { interrupted, .. }
            | ArchivedLogEntry::RunErrored { interrupted, .. } => {
                self.entries += 1;
                self.last_run_interrupted = *interrupted;
            }
            ArchivedLogEntry::ItemsRemoved { count, .. } => {
                self.entries += 1;
                self.remove_last(count.to_native());
            }
            // The rare kinds go through the owned form: one code path for them.
            _ => self.apply(&entry.to_entry()),
        }
        Ok(())
    }

    fn extend_resolved(
        &mut self,
        items: &[ArchivedLoggedItem],
        payloads: Option<&PayloadArea>,
        seq: u64,
    ) -> Result<()> {
        self.history.reserve(items.len());
        for item in items {
            self.history.push(resolve_item(payloads, seq, item)?);
        }
        Ok(())
    }

    /// Checks what a provider would reject if this history were re-sent.
    ///
    /// Example: [`Store::restore`](crate::Store::restore).
    pub fn check(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if let Some(cut) = &self.salvaged {
            problems.push(Problem::Salvaged {
                seq: cut.seq,
                reason: cut.reason.clone(),
            });
        }
        problems.extend(check_history(&self.history));
        problems
    }

    /// True when [`RestoredState::check`] finds nothing.
    ///
    /// Example: [`Store::restore`](crate::Store::restore).
    pub fn is_ready_to_send(&self) -> bool {
        self.check().is_empty()
    }
}

/// A reason a provider would reject a history, with the position of the item.
///
/// Example: [`Store::restore`](crate::Store::restore).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum Problem {
    /// A tool call with no result after it.
    CallWithoutResult {
        /// Index of the call in the history.
        index: usize,
        /// Its call id.
        call_id: String,
    },
    /// A tool result with no call before it.
    ResultWithoutCall {
        /// Index of the result in the history.
        index: usize,
        /// Its call id.
        call_id: String,
    },
    /// A second call (or second result) with a `call_id` already used.
    DuplicateCallId {
        /// Index of the duplicate.
        index: usize,
        /// Index of the first use.
        first: usize,
        /// The call id.
        call_id: String,
    },
    /// A reasoning item not followed by an assistant item (message, call or reasoning).
    DanglingReasoning {
        /// Index of the reasoning item.
        index: usize,
    },
    /// Recovery in salvage mode cut the log at damage: entries from `seq` on
    /// (or from an unknown seq) are lost, so the history may be partial.
    /// Listed first, before any problem of the history itself.
    Salvaged {
        /// The first seq lost, if known.
        seq: Option<u64>,
        /// Why the record there was rejected.
        reason: String,
    },
}

/// The ready-to-send check over any history.
///
/// Calls and outputs pair by call id across every form: function and custom
/// tool calls, Anthropic `tool_use` and `tool_result`, and opaque items that
/// carry a call id (see [`Item::call_link`]).
///
/// Example: [the module](crate::state#example).
pub fn check_history(history: &[Item]) -> Vec<Problem> {
    let links: Vec<Option<CallLink>> = history.iter().map(Item::call_link).collect();
    let mut problems = Vec::new();
    let mut calls: HashMap<&str, usize> = HashMap::new();
    let mut results: HashMap<&str, usize> = HashMap::new();
    let mut answered: HashSet<&str> = HashSet::new();
    for (index, (item, link)) in history.iter().zip(&links).enumerate() {
        match link {
            Some(CallLink::Call(call_id)) => {
                if let Some(&first) = calls.get(call_id.as_str()) {
                    problems.push(Problem::DuplicateCallId {
                        index,
                        first,
                        call_id: call_id.clone(),
                    });
                } else {
                    calls.insert(call_id, index);
                }
            }
            Some(CallLink::Output(call_id)) => {
                if let Some(&first) = results.get(call_id.as_str()) {
                    problems.push(Problem::DuplicateCallId {
                        index,
                        first,
                        call_id: call_id.clone(),
                    });
                    continue;
                }
                results.insert(call_id, index);
                if calls.contains_key(call_id.as_str()) {
                    answered.insert(call_id);
                } else {
                    problems.push(Problem::ResultWithoutCall {
                        index,
                        call_id: call_id.clone(),
                    });
                }
            }
            None if item.is_reasoning() => {
                let followed = history
                    .get(index + 1)
                    .is_some_and(|next| next.is_assistant_output());
                if !followed {
                    problems.push(Problem::DanglingReasoning { index });
                }
            }
            None => {}
        }
    }
    let mut unanswered: Vec<(usize, &str)> = calls
        .iter()
        .filter(|(id, _)| !answered.contains(*id))
        .map(|(id, &i)| (i, *id))
        .collect();
    unanswered.sort_unstable();
    problems.extend(
        unanswered
            .into_iter()
            .map(|(index, id)| Problem::CallWithoutResult {
                index,
                call_id: id.to_string(),
            }),
    );
    problems.sort_by_key(|p| match p {
        Problem::CallWithoutResult { index, .. }
        | Problem::ResultWithoutCall { index, .. }
        | Problem::DuplicateCallId { index, .. }
        | Problem::DanglingReasoning { index } => *index,
        Problem::Salvaged { .. } => 0,
    });
    problems
}

impl Log {
    /// Replays from the last `SessionStart` (found through the footers and the
    /// sparse index, never by scanning from seq 0) into a [`RestoredState`].
    ///
    /// Example: [the `log` module](crate::log#example).
    pub fn restore(&self) -> Result<RestoredState> {
        let mut state = self.snapshot().restore()?;
        state.salvaged = self.salvage_cut()?;
        Ok(state)
    }

    /// [`Log::restore`] of `snap` (this log's) onto `base`, the history a
    /// fork's parent left at the fork point.
    pub(crate) fn restore_onto(
        &self,
        snap: &Snapshot,
        base: RestoredState,
    ) -> Result<RestoredState> {
        let mut state = snap.restore_onto(base)?;
        state.salvaged = self.salvage_cut()?;
        Ok(state)
    }

    /// The salvage cut that dropped records from this log, by this open's
    /// recovery or as a writer recorded it ([`Log::last_recovery`]).
    fn salvage_cut(&self) -> Result<Option<TornTail>> {
        let salvaged = |t: &Option<TornTail>| t.as_ref().filter(|t| t.salvaged).cloned();
        if let Some(t) = salvaged(&self.recovery_report().torn_tail) {
            return Ok(Some(t));
        }
        if self.saw_no_last_recovery() {
            return Ok(None);
        }
        Ok(Log::last_recovery(self.dir())?.and_then(|l| salvaged(&l.report.torn_tail)))
    }
}

/// Where a fork by reference starts: its parent, and the parent's last
/// entry it includes (seq and hash). A fork's log holds this in its first
/// entry, [`LogEntry::ForkedFrom`].
///
/// Example: [`Store::verify_fork_link`](crate::Store::verify_fork_link).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ForkLink {
    /// The parent session.
    pub parent: SessionId,
    /// The seq of the parent's last entry the fork includes.
    pub seq: u64,
    /// That entry's hash.
    pub hash: EntryHash,
}

impl ForkLink {
    /// The link as an origin (`forked_from`).
    ///
    /// Example: [`Store::verify_fork_link`](crate::Store::verify_fork_link).
    pub fn origin(&self) -> SessionOrigin {
        SessionOrigin {
            session_id: self.parent,
            at_hash: self.hash,
        }
    }
}

impl Snapshot {
    /// Replays from the last `SessionStart` into a [`RestoredState`].
    ///
    /// The log of a fork by reference whose live history still starts in
    /// its parent ([`Snapshot::restore_link`]) does not hold that history:
    /// it is [`Error::InvalidInput`] here; `Store::restore` reads the
    /// parent.
    ///
    /// Example: [`Store::restore`](crate::Store::restore), which reads a fork's parent where this refuses.
    pub fn restore(&self) -> Result<RestoredState> {
        if let Some(link) = self.restore_link()? {
            return Err(Error::invalid(format!(
                "this log is a fork of session {} at seq {}: its history starts in the parent's log; restore it through the store",
                link.parent, link.seq
            )));
        }
        self.restore_onto(RestoredState::default())
    }

    /// Replays from the last `SessionStart` (or, with none, from the first
    /// entry) onto `state`: for a fork, the history its parent left at the
    /// fork point.
    pub(crate) fn restore_onto(&self, mut state: RestoredState) -> Result<RestoredState> {
        let from = self.last_session_start().unwrap_or(self.first_seq());
        self.will_read_from(from);
        for rec in self.iter_from(from) {
            let rec = rec?;
            state.apply_record(&rec)?;
            state.head = Some(rec.hash);
            state.head_seq = Some(rec.seq);
        }
        state.entries = self.next_seq() - self.log_start();
        Ok(state)
    }

    /// The fork link of a log whose first entry is a
    /// [`LogEntry::ForkedFrom`], whether or not a compaction has since
    /// restarted its history.
    ///
    /// Example: [`Store::verify_fork_link`](crate::Store::verify_fork_link).
    pub fn fork_link(&self) -> Result<Option<ForkLink>> {
        let Some(rec) = self.iter().next() else {
            return Ok(None);
        };
        Ok(match rec?.entry() {
            ArchivedLogEntry::ForkedFrom {
                parent,
                parent_seq: seq,
                parent_hash: hash,
                ..
            } => Some(ForkLink {
                parent: parent.get(),
                seq: seq.to_native(),
                hash: crate::chain::ArchivedEntryHash::get(hash),
            }),
            _ => None,
        })
    }

    /// The fork link a restore must follow: [`Snapshot::fork_link`] when
    /// no `SessionStart` came after it.
    ///
    /// Example: [`Store::verify_fork_link`](crate::Store::verify_fork_link).
    pub fn restore_link(&self) -> Result<Option<ForkLink>> {
        if self.last_session_start().is_some() {
            return Ok(None);
        }
        self.fork_link()
    }
}
