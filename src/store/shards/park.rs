//! Parking: an idle session past the active budget has its catalog and
//! sealed segments' files closed, its active segment's descriptor (which
//! holds its lock), maps and state kept, and reopens the closed files
//! beneath the store's `sessions/` (DESIGN.md, "Store").

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{OpenSession, Shed};
use crate::fs::BaseDir;
use crate::schema::SessionId;
use crate::store::Store;

impl OpenSession {
    /// Closes its segment and catalog files (`Log::park`), under its
    /// shard's lock, so that they agree with `parked` for
    /// [`Store::session`].
    fn park_files(&self, base: Option<&Arc<BaseDir>>) {
        self.log.park(base);
        self.catalog.parkable().park(base);
    }
}

impl Store {
    /// Parks sessions, least recently used first among the active ones no
    /// handle holds (and never `keep`), until the active sessions fit
    /// `max_active_sessions` again: their segment and catalog files are
    /// closed, their locks, maps and state kept (see `Log::park`).
    pub(super) fn park_over_budget(&self, keep: SessionId) {
        self.park_down_to(self.inner.opts.max_active_sessions, Some(keep));
    }

    /// Parks sessions as [`Store::park_over_budget`] does, until at most
    /// `max` are active; returns how many it parked.
    pub(super) fn park_down_to(&self, max: usize, keep: Option<SessionId>) -> usize {
        let mut parked = 0;
        // Under the shard lock, so that the flag and the files agree for
        // `Store::session`, which unparks under it.
        self.shed_down_to(Shed::Park, max, keep, |_, shard, id| {
            if let Some(s) = shard.open.get_mut(&id) {
                s.parked = true;
                s.park_files(self.sessions_dir());
                self.inner.active_count.fetch_sub(1, Ordering::AcqRel);
                parked += 1;
            }
        });
        parked
    }

    /// Parks again the files of a session used once while parked
    /// ([`Store::session_for_one_use`]), unless a use meanwhile made it
    /// active. Under the shard lock, as `park_down_to` parks: the flag and
    /// the files agree for [`Store::session`].
    pub(super) fn park_again(&self, id: SessionId) {
        let shard = self.shard(id).lock();
        if let Some(s) = shard.open.get(&id).filter(|s| s.parked) {
            s.park_files(self.sessions_dir());
        }
    }

    /// `sessions/`, opened at the first call that can open it; `None`
    /// while it cannot be (out of descriptors, say), when parked files
    /// reopen by their whole path.
    fn sessions_dir(&self) -> Option<&Arc<BaseDir>> {
        if let Some(dir) = self.inner.sessions_dir.get() {
            return Some(dir);
        }
        let dir = BaseDir::open(&self.inner.root.join("sessions")).ok()?;
        Some(self.inner.sessions_dir.get_or_init(|| Arc::new(dir)))
    }
}
