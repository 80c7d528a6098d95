//! The end of a session's live history: its last items, read without
//! building the rest, and their removal as one small entry.

use super::{now_ms, Store};
use crate::chain::EntryHash;
use crate::error::Result;
use crate::item::Item;
use crate::log::Snapshot;
use crate::schema::{ArchivedLogEntry, LogEntry, SessionId};

/// The last items of a session's live history, from [`Store::history_tail`].
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryTail {
    /// The items, in history order.
    pub items: Vec<Item>,
    /// How many items the whole live history holds.
    pub len: u64,
    /// The head the items were read at: the one to pass to a save or to
    /// [`Store::remove_last`] that must follow exactly this history.
    pub head: Option<EntryHash>,
}

impl Store {
    /// The last `limit` items (all of them for `None`) of the session's live
    /// history, in order: what [`Store::restore`]'s history ends with. Reads
    /// the records from the last `SessionStart` (each checked as every read
    /// is), but builds only the items returned, so the cost of a small
    /// `limit` barely grows with the history.
    ///
    /// A fork by reference whose history still starts in its parent's log
    /// is restored whole (through the parent) and its last items taken.
    pub fn history_tail(&self, id: SessionId, limit: Option<usize>) -> Result<HistoryTail> {
        let snap = self.snapshot(id)?;
        if snap.restore_link()?.is_none() {
            return snap.history_tail(limit);
        }
        let mut state = self.restore(id)?;
        let len = state.history.len();
        let keep = limit.map_or(len, |l| l.min(len));
        Ok(HistoryTail {
            items: state.history.split_off(len - keep),
            len: len as u64,
            head: state.head,
        })
    }

    /// Removes the last `count` items of the live history, if the head is
    /// `head`, by appending one `ItemsRemoved` entry: the log keeps them, and
    /// its chain, and [`Store::restore`] and [`Store::history_tail`] no
    /// longer show them. Returns the new head; on a stale `head`,
    /// [`Error::HeadMismatch`](crate::Error::HeadMismatch) and nothing
    /// written.
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
    pub fn history_tail(&self, limit: Option<usize>) -> Result<HistoryTail> {
        if let Some(link) = self.restore_link()? {
            return Err(crate::error::Error::invalid(format!(
                "this log is a fork of session {} at seq {}: its history starts in the parent's log; read it through the store",
                link.parent, link.seq
            )));
        }
        let from = self.last_session_start().unwrap_or(self.first_seq());
        // Runs of live items: an entry and how many of its first items are
        // still in the history. Removals shorten runs from the end.
        let mut runs: Vec<(&ArchivedLogEntry, usize)> = Vec::new();
        let mut len = 0u64;
        for rec in self.iter_from(from) {
            let entry = rec?.entry;
            if let ArchivedLogEntry::ItemsRemoved { count, .. } = entry {
                let mut count = count.to_native();
                len = len.saturating_sub(count);
                while count > 0 {
                    let Some((_, n)) = runs.last_mut() else { break };
                    let cut = (*n as u64).min(count);
                    *n -= cut as usize;
                    count -= cut;
                    if *n == 0 {
                        runs.pop();
                    }
                }
                continue;
            }
            let n = entry.items().len();
            if n > 0 {
                runs.push((entry, n));
                len += n as u64;
            }
        }
        let want = limit.map_or(usize::MAX, |l| l.min(len as usize));
        let mut items = Vec::with_capacity(want.min(len as usize));
        'runs: for (entry, n) in runs.iter().rev() {
            for item in entry.items()[..*n].iter().rev() {
                if items.len() == want {
                    break 'runs;
                }
                items.push(item.to_item());
            }
        }
        items.reverse();
        Ok(HistoryTail {
            items,
            len,
            head: self.head().map(|(_, h)| h),
        })
    }
}
