//! Closing the store: every open session no other handle uses, the
//! sessions an eviction let go dirty, then the journal.

use super::{Closing, Store};
use crate::catalog::{self, CATALOG_FILE};
use crate::error::{Error, Result};
use crate::schema::SessionId;
use crate::store::Released;

impl Store {
    /// Closes every open session that no other handle uses cleanly (sync,
    /// exact durable marks, clean catalog); the others stay open.
    ///
    /// Returns the first failure to close a session, this call's or an
    /// earlier eviction's (a session whose close failed is poisoned and
    /// recovers when next opened).
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Wrap up for today.")])?;
    /// // At shutdown: every session synced, and any failure seen.
    /// store.close()?;
    /// # Ok(()) }
    /// ```
    pub fn close(&self) -> Result<()> {
        let mut result = match self.inner.eviction_failure.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        // Payloads of `Buffered` saves before the closes sync their records
        // (each log's own sync would too); a failure stands with the rest.
        result = result.and(self.inner.payloads.sync_pending());
        for (slot, shard) in self.inner.shards.iter().enumerate() {
            // A session another handle still uses stays open: marking it
            // clean while it can still be written would mislead `list`.
            let open: Vec<_> = {
                let mut shard = shard.lock();
                let ids: Vec<SessionId> = shard
                    .open
                    .iter()
                    .filter(|(_, s)| s.log.is_unshared())
                    .map(|(id, _)| *id)
                    .collect();
                let taken: Vec<_> = ids
                    .into_iter()
                    .filter_map(|id| shard.take_to_close(id))
                    .collect();
                for (_, s) in &taken {
                    self.forget(s);
                }
                taken
            };
            // The first failure stands.
            result = result.and(self.close_sessions(slot, open, Closing::Close));
        }
        result = result.and(self.close_released());
        // Every session closed has checkpointed: the journal holds nothing
        // the segments do not.
        match &self.inner.journal {
            Some(journal) => result.and(journal.close()),
            None => result,
        }
    }

    /// Closes cleanly the sessions this store let go of dirty (evicted from
    /// a `Buffered` store), one at a time, so that none is left for `list`
    /// to read from its log: each is opened again (no sync: see
    /// `SessionCatalog::resume`) and closed. A session another writer has
    /// taken since is left to it.
    fn close_released(&self) -> Result<()> {
        let released: Vec<(SessionId, Released)> = self.inner.released.lock().drain().collect();
        let mut result = Ok(());
        for (id, released) in released {
            let path = self.session_dir(id).join(CATALOG_FILE);
            // An empty catalog holds no head: its slot was the cache's only.
            if !catalog::read(&path).is_ok_and(|r| r.empty || r.head == Some(released.left)) {
                continue;
            }
            self.inner.released.lock().insert(id, released);
            let opened = match self.session(id) {
                // Taken by another writer since the look: it is that one's.
                Err(Error::Locked { .. }) => Ok(()),
                opened => opened.map(drop),
            };
            let slot = self.slot(id);
            let taken = {
                let mut shard = self.inner.shards[slot].lock();
                match shard.open.get(&id) {
                    Some(s) if s.log.is_unshared() => shard.take_to_close(id),
                    _ => None,
                }
            };
            if let Some((_, s)) = &taken {
                self.forget(s);
            }
            let closed = self.close_sessions(slot, taken.into_iter().collect(), Closing::Close);
            result = result.and(opened).and(closed);
        }
        result
    }
}
