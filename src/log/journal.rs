//! The shared journal: `Sync` commits of many sessions made durable by one
//! `fdatasync` between them.
//!
//! Each writable store handle owns up to two journal files
//! (`journal/<token>-0.jnl`, `-1.jnl`), held by `flock` for its life. A
//! log attached to the journal makes a commit durable by writing the
//! records its segment holds past its last durable point into the active
//! file as one frame (session id, the seq and hash it starts from, the
//! record bytes) and waiting for a group `fdatasync` of that file, which
//! one leader runs for every frame written before it (the followers wait).
//! The segment is not synced: the records in it are durable through the
//! frame until a *checkpoint* (`fdatasync` of the segment) makes them so
//! on their own.
//!
//! A file holds at most [`JOURNAL_MAX`] bytes. When a frame does not fit,
//! the writer takes up the other file (after the checkpoint of what that
//! one held, started when it was left, has ended), and a background thread
//! checkpoints every log with frames in the file left, then marks it clean.
//! A log checkpoints itself when it closes or lets its lock go
//! (`Log::close`, `Log::release`, its drop). Recovery is the store's
//! (`store::journal`): DESIGN.md, "The shared journal".

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::Inner;
use crate::error::{Error, Result};
use crate::format::journal::{
    encode_frame, FrameStart, JournalHeader, FRAME_HEADER_LEN, JOURNAL_HEADER_LEN,
};
use crate::fs::{self as hooked_fs, sync_dir, Hook, HookedFile};

/// The most bytes one journal file holds.
pub(crate) const JOURNAL_MAX: u64 = 32 << 20;

/// Bytes zero-filled at a time ahead of the frames, so that a group sync
/// rarely has to make a new file length durable.
const ZERO_CHUNK: u64 = 1 << 20;

/// The directory beneath a store's root that holds its journals.
pub(crate) const JOURNAL_DIR: &str = "journal";

/// A journal file's name for the handle with `token`, file `k` (0 or 1).
pub(crate) fn journal_name(token: &[u8; 16], k: usize) -> String {
    format!("{}-{k}.jnl", hex(token))
}

/// The owner token a journal file's name starts with, if it is one.
pub(crate) fn token_of_name(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".jnl")?;
    let (token, k) = stem.rsplit_once('-')?;
    (token.len() == 32 && matches!(k, "0" | "1")).then_some(token)
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), zeros where
/// it cannot be read. A journal from another boot than this one may hold
/// the only durable copy of records, as a power loss came since; one from
/// this boot whose owner died left its records in the page cache.
pub(crate) fn boot_id() -> [u8; 16] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let digits: Vec<u8> = text
        .bytes()
        .filter_map(|c| (c as char).to_digit(16).map(|d| d as u8))
        .collect();
    let mut id = [0u8; 16];
    if digits.len() == 32 {
        for (i, pair) in digits.chunks(2).enumerate() {
            id[i] = pair[0] << 4 | pair[1];
        }
    }
    id
}

/// A log's way into its store's journal: the journal and the session id
/// its frames name.
#[derive(Clone)]
pub(crate) struct JournalPort {
    pub(crate) journal: Arc<Journal>,
    pub(crate) session: [u8; 16],
}

/// One of the two journal files.
struct JFile {
    file: Arc<HookedFile>,
    /// Bytes zero-filled (the file's length).
    zeroed: u64,
    generation: u64,
}

struct State {
    files: [Option<JFile>; 2],
    active: usize,
    /// Where the next frame goes in the active file.
    end: u64,
    /// Frames given a place, counted over both files (the n-th frame is
    /// frame n).
    reserved: u64,
    /// Every frame up to this one is written (frames land out of order:
    /// those past it that have, in `landed`).
    written: u64,
    landed: BTreeSet<u64>,
    /// The first frame whose write failed (`u64::MAX`: none).
    broken: u64,
    /// Frames made durable.
    durable: u64,
    /// A group sync failed, covering frames up to this one: none of them
    /// counts as durable; later frames sync their segments instead.
    sync_failed: Option<u64>,
    /// A rotation is under way (`take_up_next`).
    rotating: bool,
    /// A checkpoint of a file left failed: its frames may be the only
    /// durable copy of records, so the files stay for the next open.
    keep_files: bool,
    syncing: bool,
    /// The last frame the running sync covers.
    sync_target: u64,
    /// Syncs ended: the running one (or the next) is sync `epoch`, whose
    /// waiters sleep on `synced[epoch & 1]`.
    epoch: u64,
    /// The logs with frames in each file, to checkpoint before it is
    /// taken up again.
    clients: [HashMap<usize, Weak<Inner>>; 2],
    /// The checkpoint of each file left, running.
    checkpoint: [Option<JoinHandle<Result<()>>>; 2],
    generation: u64,
}

impl State {
    fn new() -> State {
        State {
            files: [None, None],
            active: 0,
            end: 0,
            reserved: 0,
            written: 0,
            landed: BTreeSet::new(),
            broken: u64::MAX,
            durable: 0,
            sync_failed: None,
            rotating: false,
            keep_files: false,
            syncing: false,
            sync_target: 0,
            epoch: 0,
            clients: [HashMap::new(), HashMap::new()],
            checkpoint: [None, None],
            generation: 0,
        }
    }

    /// Frame `n`'s write has returned (well or not).
    fn land(&mut self, n: u64) {
        if n == self.written + 1 {
            self.written = n;
            while self.landed.remove(&(self.written + 1)) {
                self.written += 1;
            }
        } else {
            self.landed.insert(n);
        }
    }
}

/// A store handle's journal (see the module).
pub(crate) struct Journal {
    dir: PathBuf,
    token: [u8; 16],
    boot: [u8; 16],
    hook: Hook,
    state: Mutex<State>,
    synced: [Condvar; 2],
    /// Signalled when a rotation ends.
    rotated: Condvar,
    /// A group sync failed: the kernel may have dropped the file's pages,
    /// so no later frame may count on it. Commits sync their segments
    /// from then on.
    poisoned: AtomicBool,
}

impl Journal {
    /// The journal of a store rooted at `root`, owned by a handle known by
    /// `token`. Nothing is created until the first frame.
    pub(crate) fn new(root: &Path, token: [u8; 16], hook: Hook) -> Journal {
        Journal {
            dir: root.join(JOURNAL_DIR),
            token,
            boot: boot_id(),
            hook,
            state: Mutex::new(State::new()),
            synced: [Condvar::new(), Condvar::new()],
            rotated: Condvar::new(),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Whether commits go through the journal (it has not failed).
    pub(crate) fn takes_frames(&self) -> bool {
        !self.poisoned.load(Ordering::Acquire)
    }

    /// The token this handle's journal files are named by.
    pub(crate) fn token(&self) -> &[u8; 16] {
        &self.token
    }

    /// Makes `records` (whole records continuing `start`) durable as one
    /// frame, with one `fdatasync` shared with every frame written
    /// meanwhile; `client` is checkpointed before the file is taken up
    /// again. `Ok(false)`: the journal does not take it (too large, or the
    /// journal failed before), and the caller syncs its segment instead.
    ///
    /// The frame's place is taken under the lock and its bytes written
    /// outside it, so that the writes of many sessions overlap; a group
    /// sync covers only frames up to the first still being written.
    pub(super) fn commit(
        &self,
        start: &FrameStart,
        records: &[u8],
        client: &Arc<Inner>,
    ) -> Result<bool> {
        let len = (FRAME_HEADER_LEN + records.len()) as u64;
        if self.poisoned.load(Ordering::Acquire) || len > JOURNAL_MAX - JOURNAL_HEADER_LEN as u64 {
            return Ok(false);
        }
        // Encoded before the lock, for the generation the file has now
        // (encoded again in the rare case that a rotation comes between).
        let generation = self.state.lock().generation;
        let mut frame = encode_frame(generation, start, records);
        let mut s = self.state.lock();
        let fits = !s.rotating && s.files[s.active].is_some() && s.end + len <= JOURNAL_MAX;
        // A journal that cannot get the room (a full disk) leaves the
        // commit to its segment's own sync, which needs none.
        if !fits && self.take_up_next(&mut s, len).is_err() {
            return Ok(false);
        }
        if s.generation != generation {
            frame = encode_frame(s.generation, start, records);
        }
        let at = s.end;
        let active = s.active;
        let f = s.files[active].as_mut().expect("taken up");
        if at + len > f.zeroed {
            let to = (at + len).max(f.zeroed + ZERO_CHUNK).min(JOURNAL_MAX);
            if f.file
                .write_at(f.zeroed, &vec![0u8; (to - f.zeroed) as usize])
                .is_err()
            {
                return Ok(false);
            }
            f.zeroed = to;
        }
        let file = f.file.clone();
        s.end = at + len;
        s.reserved += 1;
        let mine = s.reserved;
        s.clients[active].insert(Arc::as_ptr(client) as usize, Arc::downgrade(client));
        drop(s);
        let wrote = file.write_at(at, &frame);
        let mut s = self.state.lock();
        s.land(mine);
        if wrote.is_err() {
            // A frame written in part is no frame: reading stops there, so
            // no frame after it may count on the journal, nor may this one.
            // They sync their segments instead.
            self.poisoned.store(true, Ordering::Release);
            s.broken = s.broken.min(mine);
            self.wake_all();
        }
        self.wait_durable(s, mine)
    }

    /// Waits until frame `mine` (written) is durable, leading a group sync
    /// when none runs. `Ok(false)`: a frame at or before it was not
    /// written, so the caller syncs its segment.
    ///
    /// The waiters of the running sync sleep on one condition variable,
    /// those of the next on the other: a sync's end wakes the frames it
    /// covered and one waiter to lead the next, not every waiter.
    fn wait_durable<'a>(&'a self, mut s: MutexGuard<'a, State>, mine: u64) -> Result<bool> {
        loop {
            if mine >= s.broken {
                return Ok(false);
            }
            if s.durable >= mine {
                return Ok(true);
            }
            if let Some(upto) = s.sync_failed {
                return match mine <= upto {
                    true => Err(Error::Poisoned),
                    false => Ok(false),
                };
            }
            // Sync `epoch` runs (or runs next, when none does).
            let covered = s.syncing && mine <= s.sync_target;
            if s.syncing || mine > s.written {
                let next = s.epoch + u64::from(!covered && s.syncing);
                self.synced[(next & 1) as usize].wait(&mut s);
                continue;
            }
            // A journal closed meanwhile (a log kept open past its
            // store's close): the caller syncs its segment.
            let Some(file) = s.files[s.active].as_ref().map(|f| f.file.clone()) else {
                return Ok(false);
            };
            s.syncing = true;
            let target = s.written;
            s.sync_target = target;
            drop(s);
            let result = file.sync();
            s = self.state.lock();
            s.syncing = false;
            let ended = s.epoch;
            s.epoch += 1;
            match result {
                Ok(()) => {
                    s.durable = s.durable.max(target);
                    self.synced[(ended & 1) as usize].notify_all();
                    // One of those that came meanwhile leads the next.
                    self.synced[(s.epoch & 1) as usize].notify_one();
                }
                Err(_) => {
                    self.poisoned.store(true, Ordering::Release);
                    s.sync_failed = Some(target);
                    self.wake_all();
                }
            }
            result?;
        }
    }

    /// Wakes every waiter, to look again (a failure, a rotation).
    fn wake_all(&self) {
        for c in &self.synced {
            c.notify_all();
        }
    }

    /// Leaves the active file for the other: every frame written to it is
    /// made durable first, the other's last checkpoint must have ended,
    /// and a checkpoint of the file left starts in the background.
    fn take_up_next(&self, s: &mut MutexGuard<'_, State>, len: u64) -> Result<()> {
        // One rotation at a time; a frame that does not fit meanwhile
        // waits for it, and no frame takes a place in the file being left.
        while s.rotating {
            self.rotated.wait(s);
        }
        // Another writer took the next file up meanwhile.
        if s.files[s.active].is_some() && s.end + len <= JOURNAL_MAX {
            return Ok(());
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        s.rotating = true;
        let result = self.rotate(s);
        s.rotating = false;
        self.rotated.notify_all();
        result
    }

    /// Waits until every frame given a place has landed and no sync runs.
    /// Each frame being written takes the lock once to land, so this ends
    /// once no new frame takes a place (a rotation pending, or a close).
    fn wait_quiet(&self, s: &mut MutexGuard<'_, State>) {
        while s.syncing || s.written < s.reserved {
            if s.syncing {
                let e = s.epoch;
                self.synced[(e & 1) as usize].wait(s);
            } else {
                MutexGuard::unlocked(s, std::thread::yield_now);
            }
        }
    }

    /// [`Journal::take_up_next`]'s rotation, once no other runs.
    fn rotate(&self, s: &mut MutexGuard<'_, State>) -> Result<()> {
        self.wait_quiet(s);
        let left = s.active;
        let next = match s.files[left] {
            Some(_) => 1 - left,
            None => left,
        };
        if let Some(f) = &s.files[left] {
            if s.durable < s.written {
                let result = f.file.sync();
                if result.is_err() {
                    self.poisoned.store(true, Ordering::Release);
                    s.sync_failed = Some(s.written);
                }
                self.wake_all();
                result?;
                s.durable = s.written;
            }
        }
        if let Some(running) = s.checkpoint[next].take() {
            let joined = joined_checkpoint(running);
            if joined.is_err() {
                // Its frames may be the only durable copy of a log's
                // records: the file is never taken up again nor removed,
                // and the next open replays it.
                self.poisoned.store(true, Ordering::Release);
                s.keep_files = true;
            }
            joined?;
        }
        // A fresh random generation: frames of the file's earlier use stop
        // the reading, and no record's content can mimic a frame of the
        // next one by guessing its number.
        let before = s.files[next].as_ref().map_or(0, |f| f.generation);
        let generation = loop {
            let random = crate::id::SessionId::new_v7().0;
            let g = u64::from_le_bytes(random[8..16].try_into().expect("8 bytes"));
            if g != 0 && g != before && g != s.generation {
                break g;
            }
        };
        let header = JournalHeader {
            clean: false,
            generation,
            boot: self.boot,
            token: self.token,
        };
        let path = self.dir.join(journal_name(&self.token, next));
        match &mut s.files[next] {
            Some(f) => {
                f.file.write_at(0, &header.encode())?;
                f.file.sync()?;
                f.generation = generation;
            }
            slot @ None => *slot = Some(self.create(&path, &header)?),
        }
        s.clients[next].clear();
        s.generation = generation;
        s.active = next;
        s.end = JOURNAL_HEADER_LEN as u64;
        if next != left {
            let clients: Vec<Weak<Inner>> = s.clients[left].drain().map(|(_, c)| c).collect();
            let f = s.files[left].as_ref().expect("left");
            let (file, generation) = (f.file.clone(), f.generation);
            let (boot, token) = (self.boot, self.token);
            s.checkpoint[left] = Some(std::thread::spawn(move || {
                checkpoint_all(&clients)?;
                let clean = JournalHeader {
                    clean: true,
                    generation,
                    boot,
                    token,
                };
                file.write_at(0, &clean.encode())?;
                file.sync()
            }));
        }
        Ok(())
    }

    /// Creates journal file `path` (its directory too), zero-filled for a
    /// first chunk, with `header`; its name durable, and locked.
    fn create(&self, path: &Path, header: &JournalHeader) -> Result<JFile> {
        if hooked_fs::create_dir_new(&self.dir, &self.hook)? {
            sync_dir(self.dir.parent().unwrap_or(Path::new(".")), &self.hook)?;
        }
        let file = HookedFile::create(path, &self.hook)?;
        file.file()
            .try_lock()
            .map_err(|_| Error::Locked { path: path.into() })?;
        let mut first = vec![0u8; ZERO_CHUNK as usize];
        first[..JOURNAL_HEADER_LEN].copy_from_slice(&header.encode());
        file.write_at(0, &first)?;
        file.sync()?;
        sync_dir(&self.dir, &self.hook)?;
        Ok(JFile {
            file: Arc::new(file),
            zeroed: ZERO_CHUNK,
            generation: header.generation,
        })
    }

    /// At the store's clean close, once every log of it has closed (and
    /// checkpointed): waits for running checkpoints and removes the files.
    pub(crate) fn close(&self) -> Result<()> {
        let mut s = self.state.lock();
        // A rotation may start while the quiet is awaited (the lock is let
        // go meanwhile): both must hold at once.
        loop {
            while s.rotating {
                self.rotated.wait(&mut s);
            }
            self.wait_quiet(&mut s);
            if !s.rotating {
                break;
            }
        }
        // Commits still waiting look again once this ends: with the files
        // gone they sync their segments.
        self.wake_all();
        if s.keep_files {
            return Err(Error::invalid(
                "a journal checkpoint failed: the journal's files are kept for the next open",
            ));
        }
        let mut result = Ok(());
        for k in 0..2 {
            if let Some(running) = s.checkpoint[k].take() {
                result = result.and(joined_checkpoint(running));
            }
        }
        // Logs still open (a clone of a session handle kept past the
        // store's close) checkpoint here, or the files stay.
        for k in 0..2 {
            let clients: Vec<Weak<Inner>> = s.clients[k].drain().map(|(_, c)| c).collect();
            result = result.and(checkpoint_all(&clients));
        }
        result?;
        for k in 0..2 {
            if s.files[k].take().is_some() {
                let path = self.dir.join(journal_name(&self.token, k));
                hooked_fs::remove_file(&path, &self.hook)?;
            }
        }
        s.end = 0;
        Ok(())
    }
}

/// What a checkpoint thread of a file left returned, once it ends (a
/// panic is a failure).
fn joined_checkpoint(running: JoinHandle<Result<()>>) -> Result<()> {
    running
        .join()
        .unwrap_or_else(|_| Err(Error::invalid("journal checkpoint panicked")))
}

/// Checkpoints every log still open of `clients`: after it, their records
/// are durable in their segments alone.
fn checkpoint_all(clients: &[Weak<Inner>]) -> Result<()> {
    let mut result = Ok(());
    for client in clients {
        if let Some(inner) = client.upgrade() {
            result = result.and(inner.checkpoint());
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_to_their_token() {
        let token = [0xab; 16];
        let name = journal_name(&token, 1);
        assert_eq!(token_of_name(&name), Some(hex(&token).as_str()));
        assert_eq!(token_of_name("x-1.jnl"), None);
        assert_eq!(token_of_name(&name.replace("-1", "-2")), None);
    }

    /// A checkpoint of a file left that failed: that file may hold the
    /// only durable copy of a log's records, so it is never taken up again
    /// (the journal takes no more frames) and the handle's close keeps both
    /// files for the next open to replay.
    #[test]
    fn a_failed_checkpoint_keeps_the_journal_files() {
        let root = tempfile::tempdir().expect("tempdir");
        let journal = Journal::new(root.path(), [7; 16], None);
        {
            let mut s = journal.state.lock();
            let header = JournalHeader {
                clean: false,
                generation: 1,
                boot: journal.boot,
                token: journal.token,
            };
            let path = journal.dir.join(journal_name(&journal.token, 0));
            s.files[0] = Some(journal.create(&path, &header).expect("create"));
            s.generation = 1;
            // File 1 was left before, and its checkpoint failed.
            let path = journal.dir.join(journal_name(&journal.token, 1));
            s.files[1] = Some(journal.create(&path, &header).expect("create"));
            s.checkpoint[1] = Some(std::thread::spawn(|| {
                Err(Error::invalid("injected checkpoint failure"))
            }));
            s.end = JOURNAL_MAX;
            assert!(journal.take_up_next(&mut s, 1024).is_err());
            assert_eq!(s.active, 0, "the file left is not taken up");
            assert!(s.keep_files);
        }
        assert!(!journal.takes_frames());
        assert!(journal.close().is_err());
        for k in 0..2 {
            let path = root
                .path()
                .join(JOURNAL_DIR)
                .join(journal_name(&[7; 16], k));
            assert!(path.exists(), "{path:?} removed");
        }
    }

    #[test]
    fn the_boot_id_reads_here() {
        // Linux: never all zeros; elsewhere zeros, which recovery takes as
        // "another boot" (the safe reading).
        if Path::new("/proc/sys/kernel/random/boot_id").exists() {
            assert_ne!(boot_id(), [0; 16]);
        }
    }
}
