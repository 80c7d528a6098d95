//! Saves of long-idle parked sessions that leave them parked (DESIGN.md,
//! "Store").

use super::{SessionHandle, Store};
use crate::error::Result;
use crate::schema::SessionId;

/// How [`Store::session_for`] is to use a session.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    /// Kept by the caller: a parked session is made active.
    Kept,
    /// For one save ([`Store::session_for_one_use`]).
    Once,
}

impl Store {
    /// [`Store::session`] for one save: a parked session whose last use
    /// is not among the last `max_active_sessions` uses in the store (plain
    /// least-recently-used would have parked it by now) stays parked. The
    /// save writes through its active segment's descriptor, which a parked
    /// session keeps (it holds the writer lock; one whose lock could not
    /// move there opens the file for this use), and the returned
    /// [`OneUse`] parks what the save opened when dropped, so a round-robin over more
    /// sessions than the budget neither evicts the active ones nor walks
    /// for a session to park at every save (issue 14, workload B). A
    /// second use within that window makes it active.
    pub(in crate::store) fn session_for_one_use(&self, id: SessionId) -> Result<OneUse<'_>> {
        let (handle, parked) = self.session_for(id, Use::Once)?;
        Ok(OneUse {
            store: self,
            handle,
            parked,
        })
    }
}

/// A session's handle for one save; a session it found parked and left
/// parked has its files closed again when this is dropped.
pub(in crate::store) struct OneUse<'a> {
    store: &'a Store,
    handle: SessionHandle,
    pub(super) parked: bool,
}

impl std::ops::Deref for OneUse<'_> {
    type Target = SessionHandle;

    fn deref(&self) -> &SessionHandle {
        &self.handle
    }
}

impl Drop for OneUse<'_> {
    fn drop(&mut self) {
        if self.parked {
            self.store.park_again(self.handle.id);
        }
    }
}
