//! The end of a session's live history: its last items, read without
//! building the rest, and their removal as one small entry.

use super::{now_ms, Store};
use crate::chain::EntryHash;
use crate::error::Result;
use crate::item::{Item, ItemView};
use crate::log::{RecordView, Snapshot};
use crate::payload::{payload_item, read_payload};
use crate::schema::{converted, ArchivedLogEntry, EntryArchive, LogEntry, SessionId};
use crate::schema::{ArchivedLoggedItem, LoggedPayloadRef};

/// The last items of a session's live history, from [`Store::history_tail`].
///
/// Example: [`Store::history_tail`].
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryTail {
    /// The items, in history order.
    pub items: Vec<Item>,
    /// The head the items were read at: the one to pass to a save or to
    /// [`Store::remove_last`] that must follow exactly this history.
    pub head: Option<EntryHash>,
}

/// The last items of a session's live history read in place, from
/// [`Store::with_history_tail`]: borrowed from the log's mapped records,
/// each checked (CRC, chain, archive) as every read is.
///
/// Example: [`Store::with_history_tail`].
#[derive(Debug, Clone)]
pub struct HistoryTailView<'a> {
    /// The items, in history order.
    pub items: Vec<ItemView<'a>>,
    /// The head the items were read at, as in [`HistoryTail::head`].
    pub head: Option<EntryHash>,
}

impl Store {
    /// The last `limit` items (all of them for `None`) of the session's live
    /// history, in order: what [`Store::restore`]'s history ends with.
    ///
    /// With a limit, the records from the last `SessionStart` are found by
    /// their headers, and read (each checked as every read is) from the end
    /// back only as far as the items returned need: the cost of a small
    /// `limit` barely grows with the history.
    ///
    /// A fork by reference whose history still starts in its parent's log
    /// is restored whole (through the parent) and its last items taken.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Any new alerts?"), Item::assistant_text("None since 9:00.")])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("And the queue?"), Item::assistant_text("Empty.")])?;
    ///
    /// // What an agent list shows: the last exchange, without the rest.
    /// let tail = store.history_tail(id, Some(2))?;
    /// assert_eq!(tail.items, [Item::user_text("And the queue?"), Item::assistant_text("Empty.")]);
    /// assert_eq!(tail.head, Some(head));
    /// assert_eq!(store.history_len(id)?, 4);
    /// # Ok(()) }
    /// ```
    pub fn history_tail(&self, id: SessionId, limit: Option<usize>) -> Result<HistoryTail> {
        let snap = self.snapshot(id)?;
        if snap.restore_link()?.is_none() {
            return snap.own_tail(limit, |t| t.into_owned());
        }
        self.restored_tail(id, limit)
    }

    /// [`Store::history_tail`]'s items, handed to `read` in place, with no
    /// owned copy of each: borrowed from the session's log while it stays
    /// mapped (or, for a fork by reference whose history starts in its
    /// parent's log, from the history restored through the parent). For a
    /// reader that turns them into something else at once, such as a
    /// binding's objects through
    /// [`responses::write_history`](crate::responses::write_history).
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Status?"), Item::assistant_text("Deploying.")])?;
    /// // The last answer's text, read where it lies in the log.
    /// let last = store.with_history_tail(id, Some(1), |tail| tail.items[0].to_item().text())?;
    /// assert_eq!(last.as_deref(), Some("Deploying."));
    /// # Ok(()) }
    /// ```
    pub fn with_history_tail<R>(
        &self,
        id: SessionId,
        limit: Option<usize>,
        read: impl FnOnce(HistoryTailView<'_>) -> R,
    ) -> Result<R> {
        let snap = self.snapshot(id)?;
        if snap.restore_link()?.is_none() {
            return snap.own_tail(limit, read);
        }
        let tail = self.restored_tail(id, limit)?;
        Ok(read(HistoryTailView {
            items: tail.items.iter().map(ItemView::from).collect(),
            head: tail.head,
        }))
    }

    /// The tail of a fork by reference whose history starts in its
    /// parent's log: restored whole (through the parent), its last items
    /// taken, owned.
    fn restored_tail(&self, id: SessionId, limit: Option<usize>) -> Result<HistoryTail> {
        let mut state = self.restore(id)?;
        let len = state.history.len();
        let keep = limit.map_or(len, |l| l.min(len));
        Ok(HistoryTail {
            items: state.history.split_off(len - keep),
            head: state.head,
        })
    }

    /// How many items the session's live history holds: the length of
    /// [`Store::restore`]'s history, counted without building it (but for
    /// a fork by reference whose history still starts in its parent's log,
    /// which is restored).
    ///
    /// Example: [`Store::history_tail`].
    pub fn history_len(&self, id: SessionId) -> Result<u64> {
        let snap = self.snapshot(id)?;
        if snap.restore_link()?.is_none() {
            return snap.own_len();
        }
        Ok(self.restore(id)?.history.len() as u64)
    }

    /// Removes the last `count` items of the live history, if the head is
    /// `head`, by appending one `ItemsRemoved` entry: the log keeps them, and
    /// its chain, and [`Store::restore`] and [`Store::history_tail`] no
    /// longer show them. Returns the new head; on a stale `head`,
    /// [`Error::HeadMismatch`](crate::Error::HeadMismatch) and nothing
    /// written.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Translate it to French."), Item::assistant_text("Voilà…")])?;
    ///
    /// // The user hit "regenerate": drop the answer, keep the question.
    /// let head = store.remove_last(id, head, 1)?;
    /// assert_eq!(store.restore(id)?.history, [Item::user_text("Translate it to French.")]);
    /// store.append(id, head, &[Item::assistant_text("Voici la traduction…")])?;
    /// # Ok(()) }
    /// ```
    pub fn remove_last(&self, id: SessionId, head: EntryHash, count: u64) -> Result<EntryHash> {
        let entry = LogEntry::ItemsRemoved {
            ts: now_ms(),
            count,
        };
        self.append_entries(id, head, &[entry], None)
    }
}

impl Snapshot {
    /// [`Store::history_tail`] over this snapshot. The log of a fork by
    /// reference whose history starts in its parent's is refused, as by
    /// [`Snapshot::restore`].
    ///
    /// Example: [`Store::history_tail`].
    pub fn history_tail(&self, limit: Option<usize>) -> Result<HistoryTail> {
        self.with_history_tail(limit, |t| t.into_owned())
    }

    /// [`Store::with_history_tail`] over this snapshot; refused for a fork
    /// by reference, as [`Snapshot::history_tail`] is.
    ///
    /// Example: [`Store::with_history_tail`].
    pub fn with_history_tail<R>(
        &self,
        limit: Option<usize>,
        read: impl FnOnce(HistoryTailView<'_>) -> R,
    ) -> Result<R> {
        self.refuse_fork()?;
        self.own_tail(limit, read)
    }

    /// [`Snapshot::with_history_tail`] of a log whose live history is its
    /// own.
    fn own_tail<R>(
        &self,
        limit: Option<usize>,
        read: impl FnOnce(HistoryTailView<'_>) -> R,
    ) -> Result<R> {
        let from = self.live_from();
        let mut tail = Taker {
            want: limit.unwrap_or(usize::MAX),
            hidden: 0,
            items: Vec::new(),
            converted: Vec::new(),
            payloads: None,
        };
        match limit {
            // Everything: one pass forward, then the records back.
            None => {
                let records = self.iter_from(from).collect::<Result<Vec<_>>>()?;
                for rec in records.into_iter().rev() {
                    tail.take(rec);
                }
            }
            Some(0) => {}
            Some(_) => self.visit_back(from, |at| Ok(tail.take(self.read_at(at)?)))?,
        }
        tail.lend(self.head().map(|(_, h)| h), read)
    }

    /// [`Store::history_len`] over this snapshot; refused for a fork by
    /// reference, as [`Snapshot::history_tail`] is.
    ///
    /// Example: [`Store::history_tail`].
    pub fn history_len(&self) -> Result<u64> {
        self.refuse_fork()?;
        self.own_len()
    }

    /// [`Snapshot::history_len`] of a log whose live history is its own.
    fn own_len(&self) -> Result<u64> {
        let mut len = 0u64;
        for rec in self.iter_from(self.live_from()) {
            len = match rec?.entry() {
                ArchivedLogEntry::ItemsRemoved { count, .. } => {
                    len.saturating_sub(count.to_native())
                }
                entry => len + entry.items().len() as u64,
            };
        }
        Ok(len)
    }

    /// Refuses the log of a fork by reference whose history starts in its
    /// parent's, as [`Snapshot::restore`] does.
    fn refuse_fork(&self) -> Result<()> {
        match self.restore_link()? {
            Some(link) => Err(crate::error::Error::invalid(format!(
                "this log is a fork of session {} at seq {}: its history starts in the \
                 parent's log; read it through the store",
                link.parent, link.seq
            ))),
            None => Ok(()),
        }
    }

    /// Where the live history starts: the last `SessionStart`, or the log's
    /// first record.
    fn live_from(&self) -> u64 {
        self.last_session_start().unwrap_or(self.first_seq())
    }
}

/// Takes the items of a live history from its end back.
struct Taker<'a> {
    want: usize,
    /// Items still hidden by removals met so far: a removal hides that many
    /// of the items before it, and one of more items than there were hides
    /// them all.
    hidden: u64,
    /// The items taken, last first.
    items: Vec<Taken<'a>>,
    /// The entries of records of segments before format 9, converted
    /// (`Taken::Converted` names them by place).
    converted: Vec<rkyv::util::AlignedVec>,
    /// Where the payloads of items kept in the store's payload area are.
    payloads: Option<&'a crate::payload::PayloadArea>,
}

/// An item taken: in the record, or in the store's payload area (named by
/// its record's seq and its reference).
enum Taken<'a> {
    Inline(&'a ArchivedLoggedItem),
    Payload(u64, LoggedPayloadRef),
    /// Item `.1` of the entry `Taker::converted[.0]`.
    Converted(usize, usize),
}

impl<'a> Taker<'a> {
    /// Takes what `rec`, the record before those already seen, adds; returns
    /// whether more items are wanted.
    fn take(&mut self, rec: RecordView<'a>) -> bool {
        self.payloads = self.payloads.or(rec.payloads);
        let seq = rec.seq;
        match rec.into_archive() {
            EntryArchive::InPlace(entry) => {
                self.take_items(entry, seq, |_, item| Taken::Inline(item))
            }
            EntryArchive::Converted(bytes) => {
                let at = self.converted.len();
                let more = self.take_items(converted(&bytes), seq, |i, _| Taken::Converted(at, i));
                self.converted.push(bytes);
                more
            }
        }
    }

    /// [`Taker::take`] of `entry`, the entry of record `seq`: `inline`
    /// makes what is taken of an item in the record, from its place and
    /// the item.
    fn take_items<'e>(
        &mut self,
        entry: &'e ArchivedLogEntry,
        seq: u64,
        inline: impl Fn(usize, &'e ArchivedLoggedItem) -> Taken<'a>,
    ) -> bool {
        if let ArchivedLogEntry::ItemsRemoved { count, .. } = entry {
            self.hidden = self.hidden.saturating_add(count.to_native());
            return self.items.len() < self.want;
        }
        let all = entry.items();
        let shown = all
            .len()
            .saturating_sub(usize::try_from(self.hidden).unwrap_or(usize::MAX));
        self.hidden = self.hidden.saturating_sub(all.len() as u64);
        for (i, item) in all[..shown].iter().enumerate().rev() {
            if self.items.len() == self.want {
                break;
            }
            self.items.push(match item.payload_ref() {
                None => inline(i, item),
                Some(r) => Taken::Payload(seq, r),
            });
        }
        self.items.len() < self.want
    }

    /// Hands the items taken, in history order, to `read`: those in the
    /// payload area read (and checked) first, and lent from here.
    fn lend<R>(
        self,
        head: Option<EntryHash>,
        read: impl FnOnce(HistoryTailView<'_>) -> R,
    ) -> Result<R> {
        let mut held = Vec::new();
        for t in &self.items {
            if let Taken::Payload(seq, r) = t {
                held.push(read_payload(self.payloads, *seq, r)?);
            }
        }
        let wanted = self.items.iter().filter_map(|t| match t {
            Taken::Payload(seq, r) => Some((seq, r)),
            Taken::Inline(_) | Taken::Converted(..) => None,
        });
        let held_items = held
            .iter()
            .zip(wanted)
            .map(|(b, (seq, r))| payload_item(b, *seq, r))
            .collect::<Result<Vec<_>>>()?;
        let mut from_area = held_items.into_iter();
        let mut items: Vec<ItemView<'_>> = self
            .items
            .iter()
            .filter_map(|t| match t {
                Taken::Inline(item) => Some(ItemView::stored(item)),
                Taken::Payload(..) => from_area.next().map(ItemView::stored),
                Taken::Converted(at, i) => {
                    let entry = converted(&self.converted[*at]);
                    Some(ItemView::stored(&entry.items()[*i]))
                }
            })
            .collect();
        items.reverse();
        Ok(read(HistoryTailView { items, head }))
    }
}

impl HistoryTailView<'_> {
    /// The tail, owned.
    fn into_owned(self) -> HistoryTail {
        HistoryTail {
            items: self.items.iter().map(ItemView::to_item).collect(),
            head: self.head,
        }
    }
}
