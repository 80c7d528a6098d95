//! A store handle's life: clones counted by the store itself, the close
//! that the last one's drop runs, handing that close elsewhere
//! (`into_last`, for `AsyncStore`), and the tests' crash (`abandon`).

use std::sync::atomic::Ordering;

use super::Store;

impl Clone for Store {
    fn clone(&self) -> Store {
        self.inner.handles.fetch_add(1, Ordering::Relaxed);
        Store {
            inner: self.inner.clone(),
            counted: true,
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Exactly one drop sees the count fall to none, however many run
        // at once (the release orders every clone's work before it).
        if self.counted
            && self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1
            && self.inner.writable
            && !self.inner.abandoned.load(Ordering::Acquire)
        {
            let _ = self.close();
        }
    }
}

impl Store {
    /// This handle if it is the store's last (its drop closes the store);
    /// otherwise it lets go, closing nothing, and gives `None`. Of several
    /// handles let go at once exactly one gets `Some`, as a plain drop
    /// would close, so that the caller can move that close elsewhere.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn into_last(mut self) -> Option<Store> {
        let handles = &self.inner.handles;
        let mut n = handles.load(Ordering::Acquire);
        while n > 1 {
            match handles.compare_exchange_weak(n, n - 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.counted = false;
                    return None;
                }
                Err(now) => n = now,
            }
        }
        Some(self)
    }
}

#[cfg(feature = "whitebox")]
impl Store {
    /// Drops the store (every clone's drop after this too) without closing
    /// anything, as the end of its process would leave it: the tests'
    /// crash. Hidden, not a stable API (feature `whitebox`).
    #[doc(hidden)]
    pub fn abandon(self) {
        self.inner.abandoned.store(true, Ordering::Release);
    }

    /// Whether the store holds session `id` open and parked (`Some(true)`),
    /// open and active (`Some(false)`), or not open (`None`). Hidden, not a
    /// stable API (feature `whitebox`).
    #[doc(hidden)]
    pub fn parked_state(&self, id: crate::SessionId) -> Option<bool> {
        self.parked_here(id)
    }
}
