//! The owned-head API: each call takes the head the caller holds and returns
//! the new one, so it moves into `spawn_blocking` closures and across tasks
//! without a `&mut` travelling with it; a whole turn commits at once; and
//! each call may say how durable it must be.

use std::borrow::Cow;

use super::{now_ms, Store};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::item::Item;
use crate::log::{Durability, Log};
use crate::schema::{LogEntry, LoggedItem, SessionId, SessionOrigin};
use crate::state::UsageRecord;

/// One turn of a session, committed by [`Store::commit_turn`]: its new
/// history items, the turn count it ends with, and the model's usage.
/// Borrowed items make a `Turn<'a>`; owned ones (`Vec<Item>`) a
/// `Turn<'static>`, which moves into a task (`AsyncStore::commit_turn`).
///
/// Example: [`Store::commit_turn`].
#[derive(Debug, Clone)]
pub struct Turn<'a> {
    /// The turn's new history items (user input, assistant output, tool
    /// calls and results, reasoning), grouped as [`Store::save_delta`] does.
    pub items: Cow<'a, [Item]>,
    /// The number of turns completed once this one is (`TurnEnd`).
    pub turn_count: u64,
    /// Token usage to record with it (`LlmUsage`), if any.
    pub usage: Option<UsageRecord>,
    /// How durable the commit must be before it returns; `None` for the
    /// store's option.
    pub durability: Option<Durability>,
}

impl<'a> Turn<'a> {
    /// A turn of `items` that ends with `turn_count` turns completed.
    ///
    /// Example: [`Store::commit_turn`].
    pub fn new(items: impl Into<Cow<'a, [Item]>>, turn_count: u64) -> Turn<'a> {
        Turn {
            items: items.into(),
            turn_count,
            usage: None,
            durability: None,
        }
    }

    /// Records `usage` with the turn.
    ///
    /// Example: [`Store::commit_turn`].
    pub fn usage(mut self, usage: UsageRecord) -> Turn<'a> {
        self.usage = Some(usage);
        self
    }

    /// Commits with `durability` instead of the store's option.
    ///
    /// Example: [`Store::commit_turn`].
    pub fn durability(mut self, durability: Durability) -> Turn<'a> {
        self.durability = Some(durability);
        self
    }

    /// The entries that end this turn, after its items: the usage, then
    /// the `TurnEnd`, stamped `ts`.
    fn tail(&self, ts: u64) -> Vec<LogEntry> {
        let usage = self.usage.map(|u| u.entry(ts));
        let end = LogEntry::TurnEnd {
            ts,
            turn_count: self.turn_count,
        };
        usage.into_iter().chain([end]).collect()
    }
}

impl Store {
    /// Appends new history items if the session's head is `head`, and
    /// returns the new head; on a mismatch nothing is written and the result
    /// is [`Error::HeadMismatch`] naming the
    /// stored head. The owned form of [`Store::save_delta`].
    ///
    /// ```
    /// use session_store::{Error, Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, start) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// let head = store.append(id, start, &[Item::user_text("Rename the crate.")])?;
    ///
    /// // A second writer that still holds the old head writes nothing.
    /// let stale = store.append(id, start, &[Item::user_text("Delete the crate.")]);
    /// assert!(matches!(stale, Err(Error::HeadMismatch { actual, .. }) if actual == Some(head)));
    /// assert_eq!(store.history_len(id)?, 1);
    /// # Ok(()) }
    /// ```
    pub fn append(&self, id: SessionId, head: EntryHash, items: &[Item]) -> Result<EntryHash> {
        let mut head = head;
        self.save_delta(id, &mut head, items)?;
        Ok(head)
    }

    /// Appends a whole turn (its items, its usage and its `TurnEnd`) as one
    /// batch if the head is `head`: all of it or none of it is in the log,
    /// after an error or a crash alike (recovery cuts a batch a crash left
    /// short), and under `Sync` it costs one `fdatasync` (shared with
    /// concurrent commits), not one per entry. Returns the new head.
    ///
    /// ```
    /// use session_store::state::UsageRecord;
    /// use session_store::{Durability, Item, RequestConfig, Store, Turn};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// let items = [Item::user_text("How many open issues?"), Item::assistant_text("Twelve.")];
    /// let usage = UsageRecord { input_total_tokens: 812, output_tokens: 9, ..UsageRecord::default() };
    /// let turn = Turn::new(&items[..], 1).usage(usage).durability(Durability::Sync);
    /// let head = store.commit_turn(id, head, &turn)?;
    ///
    /// let state = store.restore(id)?;
    /// assert_eq!((state.turn_count, state.usage.len()), (1, 1));
    /// assert_eq!(state.head, Some(head));
    /// # Ok(()) }
    /// ```
    pub fn commit_turn(
        &self,
        id: SessionId,
        head: EntryHash,
        turn: &Turn<'_>,
    ) -> Result<EntryHash> {
        let ts = now_ms();
        let mut head = head;
        let tail = turn.tail(ts);
        self.save_items(id, &mut head, &turn.items, ts, &tail, turn.durability)?;
        Ok(head)
    }

    /// Appends entries as one batch if the head is `head`, with this call's
    /// `durability` (`None`: the store's option); returns the new head.
    pub(crate) fn append_entries(
        &self,
        id: SessionId,
        head: EntryHash,
        entries: &[LogEntry],
        durability: Option<Durability>,
    ) -> Result<EntryHash> {
        let mut head = head;
        self.save_entries_with(id, &mut head, entries, durability)?;
        Ok(head)
    }

    /// Compacts the session in place: appends a `SessionStart` whose history
    /// is `summary` (what the runtime keeps: a summary message, the last
    /// turns), carrying the system prompt and request config in force and
    /// the fork origin the session had, with `compacted_from` naming this
    /// session at `head`. [`Store::restore`] then starts at it, so resume
    /// cost follows the live history; the history before it stays in the log
    /// (export, forks by seq, verify). [`Store::list`] shows the same
    /// `compacted_from` as `restore`, and [`ListFilter::compacted`]
    /// finds compacted sessions. Returns the new head; on a stale `head`,
    /// [`Error::HeadMismatch`] and nothing written.
    ///
    /// An empty `summary` clears the session (the Agents SDK's
    /// `clear_session`): its title goes too, and the next user text saved
    /// is the new one.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Port the parser to nom."), Item::assistant_text("Done: 14 files.")])?;
    ///
    /// // The context grew too long: keep a summary in place of the turns.
    /// let summary = [Item::user_text("Summary: the parser now uses nom; tests pass.")];
    /// store.compact(id, head, &summary)?;
    /// let state = store.restore(id)?;
    /// assert_eq!(state.history, summary);
    /// assert_eq!(state.compacted_from.map(|o| o.session_id), Some(id));
    /// # Ok(()) }
    /// ```
    ///
    /// [`ListFilter::compacted`]: crate::ListFilter::compacted
    pub fn compact(&self, id: SessionId, head: EntryHash, summary: &[Item]) -> Result<EntryHash> {
        let state = self.restore(id)?;
        if state.head != Some(head) {
            return Err(Error::HeadMismatch {
                session: id,
                expected: Some(head),
                actual: state.head,
            });
        }
        let start = LogEntry::SessionStart {
            ts: now_ms(),
            system_prompt: state.system_prompt,
            config: state.config,
            history: summary.iter().map(LoggedItem::from).collect(),
            forked_from: state.forked_from,
            compacted_from: Some(SessionOrigin {
                session_id: id,
                at_hash: head,
            }),
        };
        // The head check in the append makes this atomic with respect to
        // other writers: a save between the restore and here is refused.
        let head = self.append_entries(id, head, &[start], None)?;
        if summary.is_empty() {
            // A clear: the conversation starts over, and its title with it;
            // the next user text saved is the new one. The entry is in the
            // log and the head has moved: as for a save's title, a failure
            // to write the catalog must not make a retry compact twice.
            if let Ok(s) = self.session_for_one_use(id) {
                let _ = s.catalog.clear_title();
            }
        }
        Ok(head)
    }

    /// Waits until everything this store appended to the session is durable
    /// (one `fdatasync`, shared with concurrent commits): after `Buffered`
    /// saves, the point from which they survive a power loss. Other sessions'
    /// appends are not waited for.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?; // `Buffered` saves
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Book the flight.")])?;
    /// store.save_delta(id, &mut head, &[Item::assistant_text("Booked: LH 454.")])?;
    /// store.sync(id)?; // both saves now survive a power loss
    /// # Ok(()) }
    /// ```
    pub fn sync(&self, id: SessionId) -> Result<()> {
        self.sync_with(id, Log::sync)
    }

    /// [`Store::sync`], and the records durable in the session's segment
    /// alone, not only through the journal: what an archive push reads as
    /// the synced prefix of the active segment.
    #[cfg_attr(not(feature = "archive"), allow(dead_code))]
    pub(crate) fn checkpoint(&self, id: SessionId) -> Result<()> {
        self.sync_with(id, Log::checkpoint)
    }

    fn sync_with(&self, id: SessionId, sync: fn(&Log) -> Result<()>) -> Result<()> {
        if let Some(log) = self.open_log_here(id) {
            return sync(&log);
        }
        // Let go unsynced by an eviction (a Buffered store): reopened, its
        // durable point is its lagging mark, and the sync covers the rest.
        if self.inner.released.lock().contains_key(&id) {
            return sync(&self.session(id)?.log);
        }
        // Not open here: its close synced what this store appended.
        match self.exists(id) {
            true => Ok(()),
            false => Err(Error::not_found(format!("session {id}"))),
        }
    }
}
