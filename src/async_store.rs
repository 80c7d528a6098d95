//! [`AsyncStore`]: the store for async (tokio) runtimes, behind the `tokio`
//! feature. Every call that touches the disk runs on tokio's blocking pool
//! (`spawn_blocking`), so a runtime worker never waits for a `pwrite`, an
//! `fdatasync` or an open; subscriptions are [`Stream`]s fed by a thread of
//! their own.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::sync::mpsc;

use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::item::Item;
use crate::schema::{RequestConfig, SessionId};
use crate::state::{ForkLink, RestoredState};
use crate::store::{Deletion, ListFilter, SessionInfo, Store, SubscribedEntry, Turn};

/// Entries a subscription's thread may read ahead of its stream's consumer.
const STREAM_BUFFER: usize = 64;

/// How often a subscription's thread checks that its stream is still wanted
/// while no entry comes.
const STREAM_CHECK: Duration = Duration::from_millis(200);

/// A [`Store`] for async code: the same sessions, files and guarantees, with
/// each call a future that runs its blocking work on tokio's blocking pool.
/// Cheap to clone; clones share the store.
///
/// Must be used inside a tokio runtime (multi-threaded or current-thread).
///
/// ```
/// use session_store::{AsyncStore, Item, RequestConfig, Store, Turn};
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let runtime = tokio::runtime::Builder::new_multi_thread().build().unwrap();
/// let store = AsyncStore::new(Store::open(dir.path())?);
/// runtime.block_on(async {
///     let (id, head) = store.create_session(None, RequestConfig::model("gpt-5"), vec![]).await?;
///     let items = vec![Item::user_text("Ping staging."), Item::assistant_text("It answers in 38 ms.")];
///     let head = store.commit_turn(id, head, Turn::new(items, 1)).await?;
///     assert_eq!(store.restore(id).await?.head, Some(head));
///     store.close().await
/// })
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncStore {
    /// Taken only by the drop.
    store: Option<Store>,
}

/// The last handle of a store closes it (see [`Store`]): dropped inside a
/// runtime, that close runs on the blocking pool, not on the worker that
/// drops it, however many handles are dropped at once.
impl Drop for AsyncStore {
    fn drop(&mut self) {
        let Some(last) = self.store.take().and_then(Store::into_last) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || drop(last))),
            Err(_) => drop(last),
        }
    }
}

impl AsyncStore {
    /// Wraps a store.
    ///
    /// Example: [`AsyncStore`].
    pub fn new(store: Store) -> AsyncStore {
        AsyncStore { store: Some(store) }
    }

    /// The store, for the calls that need no disk (or a blocking context).
    ///
    /// Example: [`AsyncStore`].
    pub fn store(&self) -> &Store {
        self.store
            .as_ref()
            .expect("the store is taken only by the drop")
    }

    /// Runs `f` on the blocking pool with a clone of the store.
    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T> + Send + 'static,
    {
        let store = self.store().clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(Error::Cancelled),
        }
    }

    /// [`Store::create_session`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn create_session(
        &self,
        system_prompt: Option<String>,
        config: RequestConfig,
        history: Vec<Item>,
    ) -> Result<(SessionId, EntryHash)> {
        self.blocking(move |s| s.create_session(system_prompt.as_deref(), config, &history))
            .await
    }

    /// [`Store::create_session_with_durability`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn create_session_with_durability(
        &self,
        system_prompt: Option<String>,
        config: RequestConfig,
        history: Vec<Item>,
        durability: crate::log::Durability,
    ) -> Result<(SessionId, EntryHash)> {
        self.blocking(move |s| {
            s.create_session_with_durability(system_prompt.as_deref(), config, &history, durability)
        })
        .await
    }

    /// [`Store::append`]: new history items if the head is `head`; the new
    /// head.
    ///
    /// Example: [`AsyncStore`].
    pub async fn append(
        &self,
        id: SessionId,
        head: EntryHash,
        items: Vec<Item>,
    ) -> Result<EntryHash> {
        self.blocking(move |s| s.append(id, head, &items)).await
    }

    /// [`Store::commit_turn`]: a whole turn in one commit; the new head.
    ///
    /// Example: [`AsyncStore`].
    pub async fn commit_turn(
        &self,
        id: SessionId,
        head: EntryHash,
        turn: Turn<'static>,
    ) -> Result<EntryHash> {
        self.blocking(move |s| s.commit_turn(id, head, &turn)).await
    }

    /// [`Store::sync`]: waits until what this store appended to the session
    /// is durable.
    ///
    /// Example: [`AsyncStore`].
    pub async fn sync(&self, id: SessionId) -> Result<()> {
        self.blocking(move |s| s.sync(id)).await
    }

    /// [`Store::restore`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn restore(&self, id: SessionId) -> Result<RestoredState> {
        self.blocking(move |s| s.restore(id)).await
    }

    /// [`Store::compact`]: compaction in place; the new head.
    ///
    /// Example: [`AsyncStore`].
    pub async fn compact(
        &self,
        id: SessionId,
        head: EntryHash,
        summary: Vec<Item>,
    ) -> Result<EntryHash> {
        self.blocking(move |s| s.compact(id, head, &summary)).await
    }

    /// [`Store::fork_at`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn fork_at(&self, id: SessionId, at: EntryHash) -> Result<(SessionId, EntryHash)> {
        self.blocking(move |s| s.fork_at(id, at)).await
    }

    /// [`Store::fork_at_seq`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn fork_at_seq(&self, id: SessionId, seq: u64) -> Result<(SessionId, EntryHash)> {
        self.blocking(move |s| s.fork_at_seq(id, seq)).await
    }

    /// [`Store::verify_fork_link`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn verify_fork_link(&self, id: SessionId) -> Result<Option<ForkLink>> {
        self.blocking(move |s| s.verify_fork_link(id)).await
    }

    /// [`Store::export`] into `out` (written from the blocking pool, so a
    /// file or a `Vec<u8>`, not an async writer); returns the lines written
    /// and `out`.
    ///
    /// Example: [`AsyncStore`].
    pub async fn export<W>(&self, id: SessionId, out: W) -> Result<(u64, W)>
    where
        W: Write + Send + 'static,
    {
        self.blocking(move |s| {
            let mut out = out;
            let lines = s.export(id, &mut out)?;
            Ok((lines, out))
        })
        .await
    }

    /// [`Store::import_from`] of wire lines held in memory.
    ///
    /// Example: [`AsyncStore`].
    pub async fn import(&self, wire: Vec<u8>) -> Result<SessionId> {
        self.blocking(move |s| s.import_from(wire.as_slice())).await
    }

    /// [`Store::list`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn list(&self) -> Result<Vec<SessionInfo>> {
        self.blocking(|s| s.list()).await
    }

    /// [`Store::list_filtered`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn list_filtered(&self, filter: ListFilter) -> Result<Vec<SessionInfo>> {
        self.blocking(move |s| s.list_filtered(&filter)).await
    }

    /// [`Store::delete`]: whether the session was removed, or retired
    /// because forks still read it.
    ///
    /// Example: [`AsyncStore`].
    pub async fn delete(&self, id: SessionId) -> Result<Deletion> {
        self.blocking(move |s| s.delete(id)).await
    }

    /// [`Store::close`].
    ///
    /// Example: [`AsyncStore`].
    pub async fn close(&self) -> Result<()> {
        self.blocking(|s| s.close()).await
    }

    /// The session's entries from `from_seq` on, present and future, each
    /// once and in order, as a stream ([`Store::subscribe`]: no writer lock
    /// taken, so it follows a writer in another process too). A thread of
    /// its own reads ahead up to 64 entries; it ends soon after the stream is
    /// dropped. An error ends the stream after it is yielded.
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use session_store::{AsyncStore, Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let runtime = tokio::runtime::Builder::new_multi_thread().build().unwrap();
    /// let store = AsyncStore::new(Store::open(dir.path())?);
    /// runtime.block_on(async {
    ///     let (id, head) = store.create_session(None, RequestConfig::model("gpt-5"), vec![]).await?;
    ///     let mut entries = store.subscribe(id, 1).await?; // a UI following the session
    ///     store.append(id, head, vec![Item::user_text("Watch the queue.")]).await?;
    ///     let entry = entries.next().await.expect("the stream goes on")?;
    ///     assert_eq!(entry.seq, 1);
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub async fn subscribe(&self, id: SessionId, from_seq: u64) -> Result<EntryStream> {
        let subscription = self.blocking(move |s| s.subscribe(id, from_seq)).await?;
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        std::thread::Builder::new()
            .name("session-store-subscribe".into())
            .spawn(move || {
                let mut subscription = subscription;
                while !tx.is_closed() {
                    let Some(next) = subscription.next_timeout(STREAM_CHECK) else {
                        continue;
                    };
                    let failed = next.is_err();
                    if tx.blocking_send(next).is_err() || failed {
                        return;
                    }
                }
            })
            .map_err(|e| Error::io("spawn subscription thread", "", e))?;
        Ok(EntryStream { rx })
    }
}

/// The entries of a session, as [`AsyncStore::subscribe`] yields them.
///
/// Example: [`AsyncStore::subscribe`].
#[derive(Debug)]
pub struct EntryStream {
    rx: mpsc::Receiver<Result<SubscribedEntry>>,
}

impl Stream for EntryStream {
    type Item = Result<SubscribedEntry>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}
