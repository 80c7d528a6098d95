//! The cache of open sessions: one writer `Log` and catalog per session,
//! in shards (so that a lookup contends only with its shard), with one
//! store-wide budget of open logs: past it, the least recently used session
//! of all shards that no handle still holds is closed.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::payloads::payload_count;
use super::{now_ms, Released, Store};
use crate::catalog::{HeadSlot, SessionCatalog, CATALOG_FILE};
use crate::error::{Error, Result};
use crate::log::{Durability, Log};
use crate::schema::SessionId;

struct OpenSession {
    log: Log,
    catalog: Arc<SessionCatalog>,
    tick: u64,
    /// Its files closed (`Log::park`), its lock and state kept: past
    /// `max_active_sessions`. Its next use opens them again.
    parked: bool,
}

#[derive(Default)]
pub(super) struct Shard {
    open: HashMap<SessionId, OpenSession>,
    /// Sessions a thread is opening or closing, outside the shard lock.
    opening: HashSet<SessionId>,
}

impl Shard {
    /// Takes an open session out to be closed, marked in transition until
    /// `Store::close_sessions` is done: before that, a new open would find
    /// its lock taken.
    fn take_to_close(&mut self, id: SessionId) -> Option<(SessionId, OpenSession)> {
        let s = self.open.remove(&id)?;
        self.opening.insert(id);
        Some((id, s))
    }
}

/// The most eviction candidates one look keeps.
const VICTIMS_MAX: usize = 4096;

/// How few candidates left start the next look, one shard a pop from then
/// on: with 16 shards, it is done before these run out unless many of them
/// were used since the look (then the pop that finds none left finishes
/// it). A look over every shard at once took 0.15–0.3 ms with 10,000
/// sessions open, one save in 1,250 (issue 14, workload B's p99.9).
const LOOK_AHEAD: usize = 64;

/// A shed's candidates, and its look in progress.
#[derive(Default)]
pub(super) struct Candidates {
    /// The least recently used sessions the last finished look found,
    /// oldest last.
    ready: Vec<Victim>,
    /// What the look in progress gathered from the shards before
    /// `next_slot`.
    gathering: Vec<Victim>,
    /// The next shard the look in progress walks; `None` when none is in
    /// progress.
    next_slot: Option<usize>,
    /// How many candidates the last finished look found.
    looked: usize,
    /// Candidates popped since the last one taken (or the last look past
    /// held sessions) that gave nothing.
    vain: usize,
}

/// An eviction candidate: an open session and its tick of last use when
/// the look found it.
#[derive(Clone, Copy)]
pub(super) struct Victim {
    tick: u64,
    slot: usize,
    id: SessionId,
}

/// What a shed takes sessions for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shed {
    /// To close them: past `max_open_sessions`.
    Close,
    /// To park them: past `max_active_sessions`.
    Park,
}

impl Shed {
    /// Whether it may take `s`: [`Shed::may_look_at`], and no handle holds
    /// it.
    fn may_take(self, s: &OpenSession) -> bool {
        self.may_look_at(s) && s.log.is_unshared()
    }

    /// Whether a look keeps `s` as a candidate: (to park) it is active.
    /// Whether a handle holds it is left to its turn ([`Shed::may_take`]):
    /// the look reads only what lies in the shard's own table, since
    /// loading every active session's reference count (a cache miss each)
    /// made a look over 2,500 active sessions of 10,000 open take
    /// 0.3–0.7 ms, one save in 1,250 (issue 14, workload B's p99.9).
    fn may_look_at(self, s: &OpenSession) -> bool {
        self == Shed::Close || !s.parked
    }

    /// The share of the candidates one look keeps, as a divisor: a
    /// sixteenth of those to close (a close is dear to undo, so the list is
    /// kept fresh), half of those to park. A session's next use undoes a
    /// park with one open, while a look walks every open session: with
    /// 10,000 open and each save unparking one, a look every 156 parks put
    /// one save in 640 in the p99 (a probe's p99 43–77 µs with a sixteenth,
    /// 31–36 µs with half).
    fn look_share(self) -> usize {
        match self {
            Shed::Close => 16,
            Shed::Park => 2,
        }
    }
}

/// A cheap handle to one open session.
///
/// Example: [`Store::session`].
#[derive(Clone)]
pub struct SessionHandle {
    pub(super) id: SessionId,
    pub(super) log: Log,
    pub(super) catalog: Arc<SessionCatalog>,
}

impl Store {
    /// The shard of a session.
    fn slot(&self, id: SessionId) -> usize {
        id.0[15] as usize % self.inner.shards.len()
    }

    pub(super) fn shard(&self, id: SessionId) -> &Mutex<Shard> {
        &self.inner.shards[self.slot(id)]
    }

    /// Drops this store's open log of a session, if it has one and no
    /// other handle uses it, without a clean close (`Store::delete` takes the
    /// writer lock next). Returns whether the session is now closed here.
    pub(super) fn drop_open_if_unused(&self, id: SessionId) -> bool {
        let mut shard = self.shard(id).lock();
        if shard.open.get(&id).is_some_and(|s| !s.log.is_unshared()) {
            return false;
        }
        let open = shard.open.remove(&id);
        drop(shard);
        if let Some(s) = open {
            self.forget(&s);
        }
        true
    }

    /// Counts out a session taken out of its shard.
    fn forget(&self, s: &OpenSession) {
        self.inner.open_count.fetch_sub(1, Ordering::AcqRel);
        if !s.parked {
            self.inner.active_count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The next value of the store-wide clock of last use.
    fn next_tick(&self) -> u64 {
        self.inner.tick.fetch_add(1, Ordering::Relaxed)
    }

    /// Opens (or finds open) a session's log, as the one writer.
    ///
    /// The open itself (recovery, a scan of the active segment) runs outside
    /// the shard lock, so that it does not hold up the shard's other
    /// sessions; a second caller for the same session waits for it.
    ///
    /// ```
    /// use session_store::{RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// let handle = store.session(id)?;
    /// assert_eq!(handle.id(), id);
    /// assert_eq!(handle.log().head(), Some((0, head)));
    /// assert_eq!(store.log(id)?.next_seq(), 1);
    /// assert!(!store.recovery_report(id)?.changed_the_log());
    /// # Ok(()) }
    /// ```
    pub fn session(&self, id: SessionId) -> Result<SessionHandle> {
        self.session_for(id, Use::Kept).map(|(handle, _)| handle)
    }

    /// [`Store::session`] and [`Store::session_for_one_use`]; returns
    /// the handle and whether the session stays parked (a use once).
    fn session_for(&self, id: SessionId, how: Use) -> Result<(SessionHandle, bool)> {
        self.writable()?;
        let slot = self.slot(id);
        let mut shard = self.inner.shards[slot].lock();
        loop {
            // A writer poisoned by a failed write or sync refuses all work;
            // once no handle holds it, it is dropped (its lock goes with
            // it) and the session is opened again through recovery, so
            // the caller can go on once the cause (a full disk) is fixed.
            let poisoned = shard
                .open
                .get(&id)
                .is_some_and(|s| s.log.is_poisoned() && s.log.is_unshared());
            if poisoned {
                if let Some(s) = shard.open.remove(&id) {
                    self.forget(&s);
                }
            }
            if let Some(s) = shard.open.get_mut(&id) {
                let tick = self.next_tick();
                let window = self.inner.opts.max_active_sessions as u64;
                let once = s.parked && how == Use::Once && tick.saturating_sub(s.tick) > window;
                s.tick = tick;
                let unparked = s.parked && !once;
                if unparked {
                    s.parked = false;
                    // The catalog's file opens again at its next write.
                    s.catalog.parkable().unpark();
                }
                let handle = SessionHandle {
                    id,
                    log: s.log.clone(),
                    catalog: s.catalog.clone(),
                };
                drop(shard);
                if unparked {
                    self.inner.active_count.fetch_add(1, Ordering::AcqRel);
                    self.park_over_budget(id);
                }
                if unparked || once {
                    // The active segment's file opens now, where running out
                    // of descriptors can shed idle sessions and try again.
                    let opened = self.making_room(|| match once {
                        true => handle.log.open_for_one_use(),
                        false => handle.log.unpark(),
                    });
                    if opened.is_err() && once {
                        self.park_again(id);
                    }
                    opened?;
                }
                return Ok((handle, once));
            }
            if !shard.opening.contains(&id) {
                break;
            }
            self.inner.opened[slot].wait(&mut shard);
        }
        shard.opening.insert(id);
        drop(shard);
        let opened = self.making_room(|| self.open_session(id));
        let mut shard = self.inner.shards[slot].lock();
        shard.opening.remove(&id);
        self.inner.opened[slot].notify_all();
        let handle = opened?;
        self.keep_open(shard, &handle);
        Ok((handle, false))
    }

    /// Puts a session whose writer this store has just opened (or created)
    /// into its shard, whose lock `shard` is, then evicts over the budget.
    pub(super) fn keep_open(&self, mut shard: MutexGuard<'_, Shard>, handle: &SessionHandle) {
        let id = handle.id;
        shard.open.insert(
            id,
            OpenSession {
                log: handle.log.clone(),
                catalog: handle.catalog.clone(),
                tick: self.next_tick(),
                parked: false,
            },
        );
        drop(shard);
        self.inner.open_count.fetch_add(1, Ordering::AcqRel);
        self.inner.active_count.fetch_add(1, Ordering::AcqRel);
        for (slot, evicted) in self.evict_over_budget(id) {
            if let Err(e) = self.close_sessions(slot, vec![evicted], Closing::Evict) {
                self.inner.eviction_failure.lock().get_or_insert(e);
            }
        }
        self.park_over_budget(id);
    }

    /// Takes sessions out of the shards, least recently used first among
    /// those no handle holds (and never `keep`), until the open sessions fit
    /// `max_open_sessions` again; returns them with their shards, to be
    /// closed outside the shard locks. A store over budget because all its
    /// sessions are in use comes back under it at the next open.
    fn evict_over_budget(&self, keep: SessionId) -> Vec<(usize, (SessionId, OpenSession))> {
        let ceiling = self.inner.open_ceiling.load(Ordering::Acquire);
        self.evict_down_to(self.inner.opts.max_open_sessions.min(ceiling), Some(keep))
    }

    /// Runs `open`, an open of this store's own, and once more if it ran
    /// out of file descriptors and [`Store::shed_open_sessions`] made room.
    pub(super) fn making_room<T>(&self, open: impl Fn() -> Result<T>) -> Result<T> {
        match open() {
            Err(e) if e.is_out_of_descriptors() && self.shed_open_sessions() => open(),
            opened => opened,
        }
    }

    /// Closes the least recently used half of the sessions open here that
    /// no handle holds, after an open ran out of file descriptors (the
    /// process's limit is lower than the budget assumed, or the
    /// application holds many); returns whether any was closed, and so
    /// whether another try may succeed.
    ///
    /// The store keeps no more than that half open from then on: the
    /// descriptors the other half held stay free for what the store opens
    /// outside [`Store::making_room`] (a segment at a roll, the directories
    /// a first sync syncs) and for the application.
    ///
    /// It parks half the idle active sessions first: that frees two
    /// descriptors a session and opens none, while closing a parked
    /// session opens its files again for its last writes (the catalog's
    /// head, a mark), which a process with no descriptor left could not.
    fn shed_open_sessions(&self) -> bool {
        let active_half = self.inner.active_count.load(Ordering::Acquire) / 2;
        let mut shed = self.park_down_to(active_half, None) > 0;
        let half = self.inner.open_count.load(Ordering::Acquire) / 2;
        let mut closed = false;
        for (slot, evicted) in self.evict_down_to(half, None) {
            closed = true;
            if let Err(e) = self.close_sessions(slot, vec![evicted], Closing::Evict) {
                self.inner.eviction_failure.lock().get_or_insert(e);
            }
        }
        shed |= closed;
        if closed {
            self.inner
                .open_ceiling
                .fetch_min(half.max(1), Ordering::AcqRel);
        }
        shed
    }

    /// Takes sessions out of the shards as [`Store::evict_over_budget`]
    /// does, until at most `max` are open.
    fn evict_down_to(
        &self,
        max: usize,
        keep: Option<SessionId>,
    ) -> Vec<(usize, (SessionId, OpenSession))> {
        let mut out = Vec::new();
        self.shed_down_to(Shed::Close, max, keep, |slot, shard, id| {
            if let Some(taken) = shard.take_to_close(id) {
                self.forget(&taken.1);
                out.push((slot, taken));
            }
        });
        out
    }

    /// Gives sessions to `take` (with their shard, locked), least recently
    /// used first among those no handle holds, never `keep`, until at most
    /// `max` are open (`Shed::Close`) or active (`Shed::Park`); `take`
    /// counts each out.
    ///
    /// Each takes the oldest of the candidates that one look over every
    /// shard found, so that a store at its budget does not walk all its
    /// open sessions at every open (with thousands open and every save an
    /// open, that walk was a fifth of a save). A candidate used since the
    /// look (its tick moved), closed, parked already, or held by a handle is
    /// passed over. The next look walks one shard a pop once
    /// [`LOOK_AHEAD`] candidates are left, and the rest of the shards at
    /// once if they run out first. Once as many pops as the last look's
    /// candidates have taken nothing, a look over every shard that passes
    /// over the held sessions decides: it ends the shed if it finds none,
    /// as the walk did. Ticks only grow, so the candidates left are still
    /// the least recently used, with two exceptions: a session a handle
    /// held when its turn came, and let go since, waits for the next look;
    /// and a session used after the look in progress walked its shard waits
    /// for the look after it.
    fn shed_down_to(
        &self,
        shed: Shed,
        max: usize,
        keep: Option<SessionId>,
        mut take: impl FnMut(usize, &mut Shard, SessionId),
    ) {
        let (count, candidates) = self.shed_state(shed);
        while count.load(Ordering::Acquire) > max {
            let next = {
                let mut c = candidates.lock();
                if c.vain > 0 && c.vain >= c.looked {
                    // As many candidates as the last look found have come
                    // to nothing since the last take (held by handles,
                    // used again, or taken by others): a look from the
                    // first shard, past the held sessions, decides.
                    c.next_slot = None;
                    self.look_on(shed, &mut c, keep, true, usize::MAX);
                    c.vain = 0;
                } else {
                    // Walks what is left of the look in progress at once
                    // when no candidate is left, else one shard.
                    let shards = if c.ready.is_empty() { usize::MAX } else { 1 };
                    if c.next_slot.is_none() && c.ready.len() <= LOOK_AHEAD {
                        c.next_slot = Some(0);
                    }
                    let begun_before = c.next_slot.is_some_and(|slot| slot > 0);
                    if c.next_slot.is_some() {
                        self.look_on(shed, &mut c, keep, false, shards);
                    }
                    if c.ready.is_empty() && begun_before {
                        // The look just finished began at an earlier pop,
                        // and its first shards may have changed since:
                        // only a look begun and finished now may end the
                        // shed.
                        self.look_on(shed, &mut c, keep, false, usize::MAX);
                    }
                }
                c.ready.pop()
            };
            // Only a look that finds no candidate ends it: every session
            // open is in use (or is `keep`).
            let Some(v) = next else { break };
            let mut shard = self.inner.shards[v.slot].lock();
            // Used again, closed, or taken by another evictor, since the
            // look; or held by a handle now.
            let idle = Some(v.id) != keep
                && shard
                    .open
                    .get(&v.id)
                    .is_some_and(|s| s.tick == v.tick && shed.may_take(s));
            if idle {
                take(v.slot, &mut shard, v.id);
            }
            drop(shard);
            // Counted after the shard's lock is let go: the candidates'
            // lock is taken before a shard's, never after.
            let mut c = candidates.lock();
            c.vain = if idle { 0 } else { c.vain + 1 };
        }
    }

    /// What `shed` counts (the open sessions, or the active ones) and its
    /// candidates.
    fn shed_state(&self, shed: Shed) -> (&AtomicUsize, &Mutex<Candidates>) {
        match shed {
            Shed::Close => (&self.inner.open_count, &self.inner.victims),
            Shed::Park => (&self.inner.active_count, &self.inner.park_victims),
        }
    }

    /// Walks up to `shards` more shards for the look in progress of
    /// `shed` (starting one if none is), gathering the sessions open there
    /// that it may look at ([`Shed::may_look_at`]; with `unheld`, only
    /// those no handle holds), other than `keep`. The walk of the last
    /// shard finishes the look: its share of what it gathered
    /// ([`Shed::look_share`], at least one, at most [`VICTIMS_MAX`]), oldest
    /// last, replaces the candidates.
    fn look_on(
        &self,
        shed: Shed,
        c: &mut Candidates,
        keep: Option<SessionId>,
        unheld: bool,
        shards: usize,
    ) {
        let mut slot = c.next_slot.unwrap_or(0);
        if slot == 0 {
            c.gathering.clear();
        }
        let end = slot.saturating_add(shards).min(self.inner.shards.len());
        while slot < end {
            let shard = self.inner.shards[slot].lock();
            c.gathering.extend(
                shard
                    .open
                    .iter()
                    .filter(|(id, s)| {
                        Some(**id) != keep
                            && match unheld {
                                true => shed.may_take(s),
                                false => shed.may_look_at(s),
                            }
                    })
                    .map(|(id, s)| Victim {
                        tick: s.tick,
                        slot,
                        id: *id,
                    }),
            );
            slot += 1;
        }
        if slot < self.inner.shards.len() {
            c.next_slot = Some(slot);
            return;
        }
        c.next_slot = None;
        let mut all = std::mem::take(&mut c.gathering);
        let n = (all.len() / shed.look_share()).clamp(1, VICTIMS_MAX);
        if n < all.len() {
            all.select_nth_unstable_by_key(n - 1, |v| v.tick);
            all.truncate(n);
        }
        // Oldest last, for `pop`.
        all.sort_unstable_by_key(|v| std::cmp::Reverse(v.tick));
        c.looked = all.len();
        c.ready = all;
    }

    /// Closes sessions taken out of shard `slot` with `Shard::take_to_close`,
    /// outside the shard lock (closing syncs), then lets their waiters in.
    /// Returns the first failure; every session is closed (or, on a
    /// failure, left poisoned for the next open to recover) either way.
    fn close_sessions(
        &self,
        slot: usize,
        sessions: Vec<(SessionId, OpenSession)>,
        how: Closing,
    ) -> Result<()> {
        if sessions.is_empty() {
            return Ok(());
        }
        let ids: Vec<SessionId> = sessions.iter().map(|(id, _)| *id).collect();
        let release =
            how == Closing::Evict && self.inner.opts.log.durability == Durability::Buffered;
        let mut result = Ok(());
        for (id, s) in sessions {
            // The first failure stands; it names the session's segment or
            // catalog file.
            if release {
                match release_session(s) {
                    Ok(released) => {
                        self.inner.released.lock().insert(id, released);
                    }
                    Err(e) => result = result.and(Err(e)),
                }
            } else {
                result = result.and(close_session(s));
            }
        }
        let mut shard = self.inner.shards[slot].lock();
        for id in &ids {
            shard.opening.remove(id);
        }
        drop(shard);
        self.inner.opened[slot].notify_all();
        result
    }

    /// Opens a session's log as writer and its catalog, and marks the
    /// catalog dirty with the head the log has (unless it still is, as this
    /// store left it: see `SessionCatalog::resume`).
    fn open_session(&self, id: SessionId) -> Result<SessionHandle> {
        let dir = self.session_dir(id);
        let catalog_path = dir.join(CATALOG_FILE);
        let released = self.inner.released.lock().remove(&id);
        if !catalog_path.exists() {
            return Err(Error::not_found(format!("session {id}")));
        }
        let log = self.open_writer(id, &dir, released.as_ref().map(|r| r.hint.as_ref()))?;
        let left = released.map(|r| r.left);
        let catalog = Arc::new(SessionCatalog::open(
            id,
            catalog_path,
            Some(self.writable()?),
            self.hook(),
        )?);
        if catalog.is_empty() {
            // A title that could not be read (a log or a parent that does
            // not read now) is not left to the log again: a later one goes
            // into the file, where every reader finds the same.
            let (title, title_in_log) = super::empty_catalog_title(&self.inner.root, &log);
            catalog.adopt(super::rebuilt_identity(id, &log), title, title_in_log);
            // Its last update is its last entry's, not this open's.
            if let Some(ts) = super::last_entry_ms(&log) {
                catalog.saved_at(ts);
            }
        }
        let counted = payload_count(&log, catalog.recorded_head().as_ref());
        catalog.count_payload_bytes(counted, false);
        let handle = SessionHandle { id, log, catalog };
        if left.is_some_and(|left| handle.catalog.resume(left)) {
            return Ok(handle);
        }
        // The log is authoritative: rebuild the head slot from it now.
        let updated_ms = Some(handle.catalog.updated_ms()).filter(|&ms| ms > 0);
        handle
            .catalog
            .begin_writing(handle.head_slot(true, updated_ms))?;
        Ok(handle)
    }

    /// Whether `id` is open here and parked (`Some(true)`), open and
    /// active (`Some(false)`), or not open here (`None`).
    #[cfg(feature = "whitebox")]
    pub(super) fn parked_here(&self, id: SessionId) -> Option<bool> {
        self.shard(id).lock().open.get(&id).map(|s| s.parked)
    }

    pub(super) fn is_open_here(&self, id: SessionId) -> bool {
        self.shard(id).lock().open.contains_key(&id)
    }

    /// This store's handle of a session, if it has the session open.
    pub(super) fn open_handle_here(&self, id: SessionId) -> Option<SessionHandle> {
        self.shard(id).lock().open.get(&id).map(|s| SessionHandle {
            id,
            log: s.log.clone(),
            catalog: s.catalog.clone(),
        })
    }

    /// This store's writer of a session, if it has the session open.
    pub(super) fn open_log_here(&self, id: SessionId) -> Option<Log> {
        self.shard(id).lock().open.get(&id).map(|s| s.log.clone())
    }
}

/// Why sessions are being closed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// `Store::close`: cleanly, everything durable.
    Close,
    /// Over the open-log budget, on some caller's save.
    Evict,
}

/// Lets an evicted session of a `Buffered` store go without syncing: a
/// `Buffered` save promises nothing durable, and the catalog and list cache
/// have been dirty, durably, since this writer opened the session, so `list`
/// cannot take them for the truth after a power loss. They get the numbers as
/// they are now (still dirty), which this store may believe while it finds
/// them unchanged; returns that slot. The log keeps its lagging mark, which
/// the next open keeps too.
fn release_session(s: OpenSession) -> Result<Released> {
    let handle = SessionHandle {
        id: SessionId([0; 16]),
        log: s.log.clone(),
        catalog: s.catalog,
    };
    // Written while this writer still holds the log's lock: a writer that
    // takes it next writes its own slot after this one.
    let left = handle.write_head(true, Some(handle.catalog.updated_ms()));
    drop(handle);
    // Released whether or not that write failed: a roll's settling must not
    // outlive the lock.
    let hint = s.log.release()?;
    Ok(Released { left: left?, hint })
}

fn close_session(s: OpenSession) -> Result<()> {
    let handle = SessionHandle {
        id: SessionId([0; 16]),
        log: s.log.clone(),
        catalog: s.catalog,
    };
    // A failed close leaves the catalog dirty: `list` then reads the log.
    s.log.close()?;
    // Closing is not a write: keep the time of the last one.
    let updated_ms = handle.catalog.updated_ms();
    handle.write_head(false, Some(updated_ms)).map(drop)
}

impl SessionHandle {
    /// The session id.
    ///
    /// Example: [`Store::session`].
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The session's log.
    ///
    /// Example: [`Store::session`].
    pub fn log(&self) -> &Log {
        &self.log
    }

    pub(super) fn head_slot(&self, dirty: bool, updated_ms: Option<u64>) -> HeadSlot {
        HeadSlot {
            dirty,
            ..head_slot_of(&self.log, updated_ms, self.catalog.payload_bytes())
        }
    }

    /// Writes the head slot, with the log's numbers as they are now, to the
    /// catalog file and the list cache.
    pub(super) fn write_head(&self, dirty: bool, updated_ms: Option<u64>) -> Result<HeadSlot> {
        self.catalog.set_head(self.head_slot(dirty, updated_ms))
    }

    /// Makes the catalog file hold the session's title durably, before an
    /// eviction removes the log's first records (see
    /// `SessionCatalog::keep_title_in_file`).
    #[cfg(feature = "archive")]
    pub(crate) fn keep_title_in_file(&self) -> Result<()> {
        self.catalog.keep_title_in_file(true)
    }
}

/// The catalog's head slot for `log` as it is now (dirty: the numbers of a
/// log a writer may still extend, or one not yet recovered).
pub(super) fn head_slot_of(log: &Log, updated_ms: Option<u64>, payload_bytes: u64) -> HeadSlot {
    let snap = log.snapshot();
    HeadSlot {
        dirty: true,
        // Stamped with the writer's own when a catalog writes it.
        writer: 0,
        next_seq: snap.next_seq(),
        bytes: snap.bytes(),
        updated_ms: updated_ms.unwrap_or_else(now_ms),
        first_seq: snap.log_start(),
        head: snap.head().map(|(_, h)| h).unwrap_or_default(),
        payload_bytes: Some(payload_bytes),
    }
}

mod closing;
mod one_use;
mod park;
use one_use::Use;
#[cfg(test)]
mod tests;
