//! The session API an agent runtime calls: saves that check the head,
//! restore, forks and compaction, import of the wire form, and reads.

use super::payloads::{plan, Planned};
use super::title::{user_item_text, user_text};
use super::{now_ms, SessionHandle, Store, VIEW_HINTS};
use crate::catalog::{CATALOG_FILE, TITLE_SCAN_RECORDS};
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::export::WireLine;
use crate::item::Item;
use crate::log::{entry_hash, Durability, ExpectHead, Log, RecoveryReport, Snapshot};
use crate::schema::{
    group_delta, group_delta_borrowed, item_text_len_bound, Archivable, EntryRef, LogEntry,
    LoggedItem, SessionId, SessionOrigin,
};
use crate::state::RestoredState;

impl Store {
    /// Appends new history items, grouped with [`group_delta`], if the
    /// session's head is `head`; advances `head`. On a mismatch nothing is
    /// written and the result is [`Error::HeadMismatch`].
    ///
    /// ```
    /// use session_store::{Extra, Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// let call = Item::ToolCall { id: None, call_id: "call_1".into(), name: "read_file".into(),
    ///     arguments: r#"{"path":"Cargo.toml"}"#.into(), status: None, extra: Extra::NONE };
    /// let output = Item::ToolResult { id: None, call_id: "call_1".into(),
    ///     summary: r#"rust-version = "1.89""#.into(), content: None, extra: Extra::NONE };
    /// let turn = [Item::user_text("Which Rust version?"), call, output, Item::assistant_text("1.89.")];
    /// store.save_delta(id, &mut head, &turn)?;
    ///
    /// // Four entries after the `SessionStart`: the question, the call, its output, the answer.
    /// assert_eq!(store.info(id)?.unwrap().entries, 5);
    /// assert_eq!(store.head(id)?, Some(head));
    /// # Ok(()) }
    /// ```
    pub fn save_delta(&self, id: SessionId, head: &mut EntryHash, items: &[Item]) -> Result<()> {
        self.save_items(id, head, items, now_ms(), &[], None)
    }

    /// Appends `items` grouped as [`Store::save_delta`] groups them, stamped
    /// `ts`, then `tail` (the entries that end a turn), as one batch if the
    /// head is `head`; advances `head`.
    pub(super) fn save_items(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        items: &[Item],
        ts: u64,
        tail: &[LogEntry],
        durability: Option<Durability>,
    ) -> Result<()> {
        let title = || items.iter().find_map(user_item_text);
        let saved = Saved {
            durability,
            origins: None,
        };
        let threshold = self.payload_threshold();
        let mirrored: Option<Vec<EntryRef<'static>>> =
            tail.iter().map(EntryRef::turn_tail).collect();
        match mirrored {
            // Archived from the borrowed items: the same bytes as
            // `group_delta`'s entries, without a copy of every string first.
            Some(mirrored) if items.iter().all(|i| item_text_len_bound(i) < threshold) => {
                let mut entries = group_delta_borrowed(items, ts);
                entries.extend(mirrored);
                self.save_archivable(id, head, &entries, saved, title)
            }
            // Some item may go to the payload area: the owned entries, with
            // those items replaced by references.
            _ => {
                let mut entries = group_delta(items, ts);
                entries.extend_from_slice(tail);
                let (entries, _payloads) = self.externalize_owned(entries)?;
                self.save_archivable(id, head, &entries, saved, title)
            }
        }
    }

    /// Appends log entries as one batch if the session's head is `head`, and
    /// advances `head`: the one call for every entry that is not new
    /// history items (turn ends, usage, run results, config changes,
    /// extension data, a `SessionStart`). On a mismatch nothing is written
    /// and the result is [`Error::HeadMismatch`].
    ///
    /// ```
    /// use session_store::schema::{now_ms, LogEntry};
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("m"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("hello")])?;
    /// let ts = now_ms();
    /// store.save_entries(id, &mut head, &[LogEntry::TurnEnd { ts, turn_count: 1 }])?;
    /// assert_eq!(store.head(id)?, Some(head));
    /// # Ok(()) }
    /// ```
    pub fn save_entries(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        entries: &[LogEntry],
    ) -> Result<()> {
        self.save_entries_with(id, head, entries, None)
    }

    /// [`Store::save_entries`] with the durability of this call: `None`
    /// for the store's option.
    pub(super) fn save_entries_with(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        entries: &[LogEntry],
        durability: Option<Durability>,
    ) -> Result<()> {
        refuse_fork_links(entries)?;
        // A SessionStart in the middle of the log (a compaction in place)
        // changes where the live history comes from.
        let origins = entries.iter().rev().find_map(|e| match e {
            LogEntry::SessionStart {
                forked_from,
                compacted_from,
                ..
            } => Some((*forked_from, *compacted_from)),
            _ => None,
        });
        let saved = Saved {
            durability,
            origins,
        };
        // Payloads first: written before any record that refers to them,
        // and durable before it (the records' group commit syncs them).
        let (stored, _payloads) = self.externalize(entries)?;
        self.save_archivable(id, head, &stored, saved, || {
            entries.iter().flat_map(|e| e.items()).find_map(user_text)
        })
    }

    /// Appends entries if the head matches; advances `head`. `title` finds
    /// the session's title in them (the first user text), if it has none.
    fn save_archivable<E: Archivable>(
        &self,
        id: SessionId,
        head: &mut EntryHash,
        entries: &[E],
        saved: Saved,
        title: impl FnOnce() -> Option<String>,
    ) -> Result<()> {
        if entries.is_empty() {
            // Nothing to write, but a stale head must still be reported.
            let actual = self.head(id)?;
            if actual != Some(*head) {
                return Err(Error::HeadMismatch {
                    session: id,
                    expected: Some(*head),
                    actual,
                });
            }
            return Ok(());
        }
        let s = self.session_for_one_use(id)?;
        let written = s
            .log
            .append_archivable(
                entries,
                saved
                    .durability
                    .or_else(|| s.catalog.durability())
                    .unwrap_or(self.inner.opts.log.durability),
                ExpectHead::Hash(*head),
            )
            .map_err(|e| match e {
                Error::HeadConflict {
                    expected, actual, ..
                } => Error::HeadMismatch {
                    session: id,
                    expected,
                    actual,
                },
                e => e,
            })?;
        let Some(&(last_seq, h)) = written.last() else {
            return Ok(());
        };
        *head = h;
        // The entries are in the log, and the caller's head has moved: the
        // save is done. The catalog and the list cache are derived from the
        // log, marked dirty (durably) since this writer opened the session,
        // and their numbers are taken from the log while they are dirty; a
        // failure to write the title must not make a retry append the
        // entries twice. The close writes them again.
        let counted = entries.iter().map(Archivable::counted_payload_len).sum();
        s.catalog.count_payload_bytes(counted, true);
        let last_ts = entries.last().map(Archivable::ts);
        let _ = update_catalog(&s, title, (last_seq, last_ts), saved);
        Ok(())
    }

    /// Replays the session from its last `SessionStart`.
    ///
    /// A fork by reference whose history still starts in its parent reads
    /// the parent's log (from its last `SessionStart` at or before the fork
    /// point, following forks of forks), checks that the parent's record
    /// there has the hash the fork recorded ([`Error::BrokenFork`] if not),
    /// then replays its own entries.
    ///
    /// ```
    /// use session_store::{Extra, Item, Problem, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(Some("You are a coding agent."), RequestConfig::model("gpt-5"), &[])?;
    /// let call = Item::ToolCall { id: None, call_id: "call_7".into(), name: "run_tests".into(),
    ///     arguments: "{}".into(), status: None, extra: Extra::NONE };
    /// store.save_delta(id, &mut head, &[Item::user_text("Run the tests."), call])?;
    ///
    /// // The process died while the tests ran. On restart:
    /// let state = store.restore(id)?;
    /// assert_eq!(state.system_prompt.as_deref(), Some("You are a coding agent."));
    /// assert_eq!(state.history.len(), 2);
    /// assert_eq!(state.check(), [Problem::CallWithoutResult { index: 1, call_id: "call_7".into() }]);
    /// # Ok(()) }
    /// ```
    pub fn restore(&self, id: SessionId) -> Result<RestoredState> {
        // Reads only: tried again whole if the process ran out of file
        // descriptors at any of the files it opens.
        self.making_room(|| self.restore_session(id))
    }

    /// Checks every CRC, chain link and archive of the session's log, as
    /// [`Log::verify`](crate::Log::verify) does. A log whose prefix is
    /// evicted to an archive is fetched back first when an archive is
    /// attached (`Store::attach_archive`); without one, the check of what
    /// is local stands only if it found damage, and otherwise the call is
    /// [`Error::Evicted`] naming what it could not check.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Audit the access log.")])?;
    ///
    /// let report = store.verify(id)?;
    /// assert!(report.damage.is_none());
    /// assert_eq!(report.records, 2);
    /// assert_eq!(report.head, Some((1, head)));
    /// # Ok(()) }
    /// ```
    pub fn verify(&self, id: SessionId) -> Result<crate::log::VerifyReport> {
        self.fetch_if_evicted(id, 0)?;
        let report = self.reader(id)?.verify();
        match (report.evicted, &report.damage) {
            (Some((first_seq, last_seq)), None) => Err(Error::Evicted {
                session: id.to_string(),
                first_seq,
                last_seq,
            }),
            _ => Ok(report),
        }
    }

    /// The session's current head.
    ///
    /// ```
    /// use session_store::{Error, Item, RequestConfig, SessionId, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Open a PR.")])?;
    /// assert_eq!(store.head(id)?, Some(head));
    ///
    /// let missing = store.head(SessionId::new_v7());
    /// assert!(matches!(missing, Err(Error::NotFound { .. })));
    /// # Ok(()) }
    /// ```
    pub fn head(&self, id: SessionId) -> Result<Option<EntryHash>> {
        Ok(self.reader(id)?.head().map(|(_, h)| h))
    }

    /// If the stored head is `head`, returns `(id, head)`; otherwise forks the
    /// session at `head` and returns the fork's id and head. This keeps two
    /// writers with divergent histories apart.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, start) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// // Two browser tabs hold the same head; the first one saves.
    /// store.append(id, start, &[Item::user_text("Indent with tabs.")])?;
    ///
    /// // The second keeps its own line of history in a fork.
    /// let (target, head) = store.ensure_head_or_fork(id, start)?;
    /// assert_ne!(target, id);
    /// store.append(target, head, &[Item::user_text("Indent with spaces.")])?;
    /// # Ok(()) }
    /// ```
    pub fn ensure_head_or_fork(
        &self,
        id: SessionId,
        head: EntryHash,
    ) -> Result<(SessionId, EntryHash)> {
        match self.head(id)? {
            Some(h) if h == head => Ok((id, head)),
            _ => self.fork_at(id, head),
        }
    }

    /// Creates a new session from wire-form lines, checking any `seq`, `hash`
    /// and `prev_hash` they carry against what the chain computes. Nothing is
    /// written unless every line checks out.
    ///
    /// Example: [the `wire` module](crate::wire#example).
    pub fn import(&self, lines: &[(u64, WireLine)]) -> Result<SessionId> {
        let wire = |line: u64, message: String| Error::Wire {
            line,
            column: 0,
            message,
        };
        let Some((first_line, first)) = lines.first() else {
            return Err(wire(1, "empty input: no entries to import".into()));
        };
        if !matches!(first.entry, LogEntry::SessionStart { .. }) {
            return Err(wire(
                *first_line,
                "the first entry must be a session_start".into(),
            ));
        }
        for (line, w) in lines {
            refuse_fork_links([&w.entry]).map_err(|e| wire(*line, e.to_string()))?;
        }
        let mut prev = EntryHash::genesis();
        let mut prev_shown: Option<EntryHash> = None;
        let mut planned = Vec::with_capacity(lines.len());
        for (i, (line, w)) in lines.iter().enumerate() {
            let seq = i as u64;
            if let Some(s) = w.seq {
                if s != seq {
                    return Err(wire(
                        *line,
                        format!("seq gap: expected seq {seq}, found {s}"),
                    ));
                }
            }
            if let Some(p) = w.prev_hash {
                if p != prev_shown {
                    return Err(wire(
                        *line,
                        "broken chain: prev_hash does not match the previous entry's hash".into(),
                    ));
                }
            }
            let (hash, stored) = self.import_entry(&prev, seq, &w.entry, w.hash)?;
            if let Some(h) = w.hash {
                if h != hash {
                    return Err(wire(
                        *line,
                        format!("broken chain: hash {h} does not match the computed {hash}"),
                    ));
                }
            }
            planned.push(stored);
            prev = hash;
            prev_shown = Some(hash);
        }
        let _payloads = match planned.iter().any(Option::is_some) {
            true => self.write_payloads(planned.iter().flatten().flat_map(|p| &p.payloads))?,
            false => None,
        };
        let entries: Vec<LogEntry> = lines
            .iter()
            .zip(planned)
            .map(|((_, w), p)| p.map_or_else(|| w.entry.clone(), |p| p.entry))
            .collect();
        // The title from the lines: the stored entries hold a large item as
        // a reference to the payload area, which has no text to take.
        let title = lines
            .iter()
            .flat_map(|(_, w)| w.entry.items())
            .find_map(user_text);
        let id = SessionId::new_v7();
        self.create_entries(id, &entries, None, title, true)?;
        Ok(id)
    }

    /// How an imported entry is stored, and its hash so stored. The line's
    /// `hash` commits to the records of the store it came from, which kept
    /// the items of at least its threshold in its payload area: the entry
    /// is stored as the first threshold that gives that hash would have
    /// (this store's first, then each item's size, then none), so an export
    /// re-imports to the same chain whatever threshold wrote it. Without a
    /// hash to match, this store's threshold decides.
    fn import_entry(
        &self,
        prev: &EntryHash,
        seq: u64,
        entry: &LogEntry,
        want: Option<EntryHash>,
    ) -> Result<(EntryHash, Option<Planned>)> {
        let mine = self.payload_threshold();
        let mut thresholds = vec![mine];
        if want.is_some() {
            let mut sizes: Vec<usize> = entry.items().iter().map(LoggedItem::text_len).collect();
            sizes.sort_unstable();
            sizes.dedup();
            thresholds.extend(sizes.into_iter().filter(|&t| t > 0 && t != mine));
            thresholds.push(usize::MAX);
        }
        let mut first = None;
        for t in thresholds {
            let planned = plan(entry, t);
            let hash = entry_hash(prev, seq, planned.as_ref().map_or(entry, |p| &p.entry))?;
            if want.is_none_or(|w| w == hash) {
                return Ok((hash, planned));
            }
            first.get_or_insert((hash, planned));
        }
        Ok(first.expect("at least this store's threshold was tried"))
    }

    /// A consistent view of a session's committed records.
    ///
    /// ```
    /// use session_store::schema::EntryKind;
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Ping the API."), Item::assistant_text("200 OK.")])?;
    ///
    /// let snap = store.snapshot(id)?;
    /// let kinds = snap.iter().map(|r| r.map(|r| r.kind)).collect::<Result<Vec<_>, _>>()?;
    /// assert_eq!(kinds, [EntryKind::SessionStart, EntryKind::UserInput, EntryKind::AssistantItems]);
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self, id: SessionId) -> Result<Snapshot> {
        Ok(self.reader(id)?.snapshot())
    }

    /// A log to read the session from: this store's writer when it has the
    /// session open, otherwise a read-only view of what is committed, which
    /// takes no lock, writes nothing and syncs nothing (a crashed writer's
    /// torn tail is left for the next writer to cut; the view ends before
    /// it, as that writer's will).
    ///
    /// A view remembers where the records it hashed past the durable mark
    /// end, for the next view of the session (`Inner::viewed`).
    pub(super) fn reader(&self, id: SessionId) -> Result<Log> {
        if let Some(log) = self.open_log_here(id) {
            return Ok(log);
        }
        let dir = self.session_dir(id);
        let hint = self.inner.viewed.lock().get(&id).cloned();
        let opened = self.making_room(|| {
            let payloads = self.inner.payloads.clone();
            Log::open_read_only_in_store_if(&dir, payloads, CATALOG_FILE, hint.as_ref())
        });
        if let Ok(log) = &opened {
            let mut viewed = self.inner.viewed.lock();
            match log.view_hint() {
                Some(found) => {
                    if viewed.len() >= VIEW_HINTS && !viewed.contains_key(&id) {
                        viewed.clear();
                    }
                    viewed.insert(id, found);
                }
                None => drop(viewed.remove(&id)),
            }
        }
        match opened {
            // No catalog, or no directory: not a session of this store. A
            // file that went missing after the listing is too: a retire
            // renames the whole directory away, and a fork's reader then
            // looks in `retired/` (a file removed by a writer's recovery
            // reads the same; see DESIGN.md).
            Err(Error::NotFound { .. }) => Err(Error::not_found(format!("session {id}"))),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::not_found(format!("session {id}")))
            }
            r => r,
        }
    }

    /// A read-only view of the session's log, as [`Store::snapshot`] reads
    /// it (this store's writer when it has the session open): its records'
    /// references to large items resolve in the store's payload area.
    /// Takes no lock and writes nothing. A writer so returned that outlives
    /// the store's last handle keeps the session open, and its drop closes
    /// nothing (see [`Store`]): call [`Log::close`] on it.
    ///
    /// Example: [`Store::snapshot`], which reads through it.
    pub fn read_log(&self, id: SessionId) -> Result<Log> {
        self.reader(id)
    }

    /// The session's log.
    ///
    /// Example: [`Store::session`].
    pub fn log(&self, id: SessionId) -> Result<Log> {
        Ok(self.session(id)?.log)
    }

    /// What recovery found when the session was opened.
    ///
    /// Example: [`Store::session`].
    pub fn recovery_report(&self, id: SessionId) -> Result<RecoveryReport> {
        Ok(self.session(id)?.log.recovery_report().clone())
    }
}

/// Records a save that ended at record `last_seq`, stamped `last_ts`, in
/// the session's catalog: its title (from the first user text), once; the
/// time of the write in memory (see `SessionCatalog::saved_at`).
///
/// That time is the last entry's, as the log says it (so that a reader
/// that has only the log, an empty catalog without the listing cache,
/// lists the same), when it lies between the last recorded update and now,
/// as the entries a save stamps itself do; a caller's own stamp outside
/// that (an old one, or one from a clock ahead) gives now, and gives an
/// empty catalog file its slots, since its readers would take the log's.
fn update_catalog(
    s: &SessionHandle,
    title: impl FnOnce() -> Option<String>,
    (last_seq, last_ts): (u64, Option<u64>),
    saved: Saved,
) -> Result<()> {
    if !s.catalog.saved(last_ts, now_ms()) {
        // A time the log does not say: an empty file that leaves the title
        // to the log holds it (and the head) from now on.
        s.catalog.keep_title_in_file(false)?;
    }
    if !s.catalog.has_title() {
        match title() {
            Some(t) => s.catalog.set_title(&t, last_seq)?,
            // Past the records a reader of an empty file reads for a title.
            None if last_seq >= TITLE_SCAN_RECORDS => s.catalog.keep_title_in_file(false)?,
            None => {}
        }
    }
    if let Some((forked_from, compacted_from)) = saved.origins {
        s.catalog.set_origins(forked_from, compacted_from)?;
    }
    Ok(())
}

/// Refuses a `forked_from` entry: only `fork_at` writes one, as a fork's
/// first entry, where it means that the history starts in the parent's log.
/// Saved into a session or imported, it would name a parent the session
/// does not read.
fn refuse_fork_links<'a>(entries: impl IntoIterator<Item = &'a LogEntry>) -> Result<()> {
    match entries
        .into_iter()
        .any(|e| matches!(e, LogEntry::ForkedFrom { .. }))
    {
        true => Err(Error::invalid(
            "a forked_from entry is written by a fork only, as its first entry; an export carries a fork as a session_start",
        )),
        false => Ok(()),
    }
}

/// A session's fork and compaction origins.
type Origins = (Option<SessionOrigin>, Option<SessionOrigin>);

/// What a save is told beyond its entries.
#[derive(Clone, Copy)]
struct Saved {
    /// This call's durability; `None` for the store's option.
    durability: Option<Durability>,
    /// The origins of the last `SessionStart` among the entries, if any.
    origins: Option<Origins>,
}
