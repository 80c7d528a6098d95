//! Following a session: a blocking iterator over its entries, present and
//! future, woken by the writer.

use std::time::Duration;

use super::Store;
use crate::chain::EntryHash;
use crate::error::Result;
use crate::log::Log;
use crate::schema::{LogEntry, SessionId};

impl Store {
    /// Entries of a session from `from_seq` on, including those committed
    /// later: a blocking iterator, woken by the writer.
    pub fn subscribe(&self, id: SessionId, from_seq: u64) -> Result<Subscription> {
        Ok(Subscription {
            log: self.session(id)?.log,
            next: from_seq,
        })
    }
}

/// A blocking iterator over a session's entries, present and future.
pub struct Subscription {
    log: Log,
    next: u64,
}

impl Subscription {
    /// The next entry, waiting at most `timeout`; `None` on timeout.
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<SubscribedEntry>> {
        self.next_within(Some(timeout))
    }

    fn next_within(&mut self, timeout: Option<Duration>) -> Option<Result<SubscribedEntry>> {
        if !self.log.wait_for(self.next, timeout) {
            return None;
        }
        let snap = self.log.snapshot();
        let rec = snap.iter_from(self.next).next()?.map(|v| SubscribedEntry {
            seq: v.seq,
            hash: v.hash,
            prev_hash: v.prev_hash,
            entry: v.entry.to_entry(),
        });
        if let Ok(e) = &rec {
            self.next = e.seq + 1;
        }
        Some(rec)
    }
}

/// One entry yielded by a [`Subscription`].
#[derive(Debug, Clone, PartialEq)]
pub struct SubscribedEntry {
    /// Sequence number.
    pub seq: u64,
    /// Its chain hash.
    pub hash: EntryHash,
    /// The previous entry's hash (the genesis value for seq 0).
    pub prev_hash: EntryHash,
    /// The entry.
    pub entry: LogEntry,
}

impl SubscribedEntry {
    /// The wire-form line of this entry.
    pub fn wire_line(&self) -> String {
        let prev = (self.seq > 0).then_some(&self.prev_hash);
        crate::export::entry_line(self.seq, &self.hash, prev, &self.entry)
    }
}

impl Iterator for Subscription {
    type Item = Result<SubscribedEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_within(None)
    }
}
