//! Following a session: a blocking iterator over its entries, present and
//! future. Woken by the writer when this store writes the session; otherwise
//! (another process writes it, or this store is read-only) it re-reads the
//! log every poll interval, without ever taking the writer lock.

use std::time::{Duration, Instant};

use super::Store;
use crate::chain::EntryHash;
use crate::error::Result;
use crate::log::Log;
use crate::schema::{LogEntry, SessionId};

/// How often a subscription re-reads a log that another process writes.
///
/// Example: [`Store::subscribe`].
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Consecutive failed re-reads tolerated before the error is returned: a
/// re-read can meet a roll or a footer being written.
const REREAD_RETRIES: u32 = 10;

impl Store {
    /// Entries of a session from `from_seq` on, including those committed
    /// later, each once and in order: a blocking iterator.
    ///
    /// It takes no lock for writing, so it works from a read-only store and
    /// beside a writer in another process (a UI following a runtime), and
    /// it never keeps that writer out. While this store has the session
    /// open for writing, the subscription is woken by each commit;
    /// otherwise it re-reads the log every [`Subscription::poll_interval`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use session_store::schema::LogEntry;
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// let mut follow = store.subscribe(id, 1)?; // what comes after the `SessionStart`
    ///
    /// let runtime = store.clone();
    /// let saving = std::thread::spawn(move || runtime.save_delta(id, &mut head, &[Item::user_text("Tail the logs.")]));
    /// let seen = follow.next_timeout(Duration::from_secs(10)).expect("an entry within 10 s")?;
    /// assert!(matches!(seen.entry, LogEntry::UserInput { .. }));
    /// assert!(seen.wire_line().starts_with(r#"{"seq":1,"#));
    /// saving.join().unwrap()?;
    /// assert!(follow.try_next().is_none() && follow.next_seq() == 2);
    /// # Ok(()) }
    /// ```
    pub fn subscribe(&self, id: SessionId, from_seq: u64) -> Result<Subscription> {
        let source = match self.open_log_here(id) {
            Some(log) => Source::Live(log),
            None => Source::Polled(self.reader(id)?),
        };
        Ok(Subscription {
            store: self.clone(),
            id,
            source,
            next: from_seq,
            poll: DEFAULT_POLL_INTERVAL,
            failures: 0,
        })
    }
}

/// Where a subscription reads.
enum Source {
    /// This store's writer: commits wake the subscriber.
    Live(Log),
    /// A read-only view, re-read to see more.
    Polled(Log),
}

/// A blocking iterator over a session's entries, present and future.
///
/// Example: [`Store::subscribe`].
pub struct Subscription {
    // Dropped before `store`: when that is the store's last handle, its
    // close must find the session's log no longer shared.
    source: Source,
    store: Store,
    id: SessionId,
    next: u64,
    poll: Duration,
    failures: u32,
}

impl Subscription {
    /// Sets how often a log written elsewhere is re-read
    /// ([`DEFAULT_POLL_INTERVAL`] by default).
    ///
    /// Example: [`Store::subscribe`].
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(1));
        self
    }

    /// The seq of the next entry this subscription yields.
    ///
    /// Example: [`Store::subscribe`].
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The next entry, waiting at most `timeout`; `None` on timeout.
    ///
    /// Example: [`Store::subscribe`].
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<SubscribedEntry>> {
        self.next_within(Some(timeout))
    }

    /// The next entry if one is committed already, without waiting.
    ///
    /// Example: [`Store::subscribe`].
    pub fn try_next(&mut self) -> Option<Result<SubscribedEntry>> {
        self.next_within(Some(Duration::ZERO))
    }

    fn next_within(&mut self, timeout: Option<Duration>) -> Option<Result<SubscribedEntry>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let log = match &mut self.source {
                Source::Live(log) => {
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    if !log.wait_for(self.next, left) {
                        return None;
                    }
                    log
                }
                Source::Polled(log) => {
                    if log.snapshot().next_seq() > self.next {
                        log
                    } else {
                        match self.wait_elsewhere(deadline) {
                            Ok(true) => continue,
                            Ok(false) => return None,
                            Err(e) => return Some(Err(e)),
                        }
                    }
                }
            };
            let snap = log.snapshot();
            let rec = snap.iter_from(self.next).next()?.and_then(|v| {
                Ok(SubscribedEntry {
                    seq: v.seq,
                    hash: v.hash,
                    prev_hash: v.prev_hash,
                    entry: v.to_entry()?,
                })
            });
            if let Ok(e) = &rec {
                self.next = e.seq + 1;
            }
            return Some(rec);
        }
    }

    /// Waits one poll interval (or until the deadline) for a log written
    /// elsewhere, then re-reads it; switches to this store's writer if the
    /// store opened the session meanwhile. `Ok(false)`: the deadline passed.
    fn wait_elsewhere(&mut self, deadline: Option<Instant>) -> Result<bool> {
        if let Some(log) = self.store.open_log_here(self.id) {
            self.source = Source::Live(log);
            return Ok(true);
        }
        let now = Instant::now();
        let nap = match deadline {
            Some(d) if d <= now => return Ok(false),
            Some(d) => self.poll.min(d - now),
            None => self.poll,
        };
        std::thread::sleep(nap);
        let Source::Polled(log) = &mut self.source else {
            return Ok(true);
        };
        match log.refresh() {
            Ok(()) => self.failures = 0,
            Err(_) if self.failures < REREAD_RETRIES => self.failures += 1,
            Err(e) => return Err(e),
        }
        Ok(true)
    }
}

/// One entry yielded by a [`Subscription`].
///
/// Example: [`Store::subscribe`].
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
    ///
    /// Example: [`Store::subscribe`].
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
