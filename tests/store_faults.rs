//! Guards against a power failure that loses an acknowledged session, brings
//! back a deleted one, or leaves a store that does not open, list or restore:
//! the power-loss simulation of `power_loss.rs`, over a whole store, through
//! session creation (staging, the rename into place, directory syncs),
//! catalog and list-cache writes, saves, forks by reference (the
//! registration in the parent) and deletion (a parent with forks retired,
//! then collected with its last fork).
//!
//! Every operation of the store goes through the `IoHook` seam and is
//! recorded against the inode it names. A crash at event `k` rebuilds the
//! store from events `..k`: file data that was `fdatasync`ed, plus each
//! unsynced sector whole, lost, zeroed, garbage or torn; directory entries
//! that a directory `fsync` covered, plus a random prefix of the rest (a
//! rename is one atomic change, durable once the directory of its new name
//! is synced).
//! Both durabilities run: on a `Sync` store a creation or save is
//! acknowledged when it returns; on a `Buffered` one, when the session's
//! next sync (or the store's close) returns, and a creation that no sync
//! covered may be lost, but only whole. Large items go to the store's
//! payload area, so crashes also fall between a payload and its record, and
//! every restore resolves the payloads its records refer to.
//! Trials are seeded; a failure prints the seed, and
//! `POWER_LOSS_STORE_SEED=<seed>` replays just that trial (in both modes).
//! `POWER_LOSS_STORE_TRIALS` raises the count (default 600, bounded by
//! `POWER_LOSS_STORE_SECONDS`, default 90).

mod engine;

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use engine::Rng;
use session_store::{
    log::IoHook, log::IoOp, Durability, Item, LogOptions, RequestConfig, SessionId, Store,
    StoreOptions,
};

type Node = usize;

/// The work directory the store lives in: it exists before the trial.
const ROOT_NODE: Node = 0;

/// A change to a directory entry.
#[derive(Debug, Clone)]
enum Meta {
    /// `name` in `parent` now names `node` (a creation).
    Link {
        parent: Node,
        name: String,
        node: Node,
    },
    /// An entry moves (a rename), atomically.
    Move {
        from: (Node, String),
        to: (Node, String),
        node: Node,
    },
    /// The entry goes (a file removed, or a directory removed whole).
    Unlink { parent: Node, name: String },
}

impl Meta {
    /// The directories whose sync makes this change durable.
    fn parents(&self) -> [Option<Node>; 2] {
        match self {
            Meta::Link { parent, .. } | Meta::Unlink { parent, .. } => [Some(*parent), None],
            // Only the new name's directory vouches for a rename.
            Meta::Move { to, .. } => [Some(to.0), None],
        }
    }
}

#[derive(Debug, Clone)]
enum Event {
    Meta(Meta),
    Write(Node, u64, Vec<u8>),
    Sync(Node),
    SyncDir(Node),
}

#[derive(Default, Clone)]
struct FileData {
    len: u64,
    durable: Vec<(u64, Vec<u8>)>,
    pending: Vec<(u64, Vec<u8>)>,
}

/// What the recording knows: the live namespace, and every event.
struct Recording {
    /// Live paths, relative to the work directory.
    paths: HashMap<PathBuf, Node>,
    dirs: BTreeSet<Node>,
    next_node: Node,
    events: Vec<Event>,
    base: PathBuf,
}

impl Recording {
    fn rel(&self, p: &Path) -> PathBuf {
        p.strip_prefix(&self.base)
            .unwrap_or_else(|_| panic!("{} is outside the work dir", p.display()))
            .to_path_buf()
    }

    fn node_of(&self, rel: &Path) -> Node {
        if rel.as_os_str().is_empty() {
            return ROOT_NODE;
        }
        *self
            .paths
            .get(rel)
            .unwrap_or_else(|| panic!("no node for {}", rel.display()))
    }

    fn split(&self, rel: &Path) -> (Node, String) {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let name = rel.file_name().unwrap().to_string_lossy().into_owned();
        (self.node_of(parent), name)
    }

    fn create(&mut self, rel: &Path, dir: bool) {
        let (parent, name) = self.split(rel);
        let node = self.next_node;
        self.next_node += 1;
        if dir {
            self.dirs.insert(node);
        }
        self.paths.insert(rel.to_path_buf(), node);
        self.events
            .push(Event::Meta(Meta::Link { parent, name, node }));
    }

    fn create_dir_all(&mut self, rel: &Path) {
        let mut at = PathBuf::new();
        for c in rel.components() {
            at.push(c);
            if !self.paths.contains_key(&at) {
                self.create(&at, true);
            }
        }
    }

    fn forget_under(&mut self, rel: &Path) {
        self.paths.retain(|p, _| !p.starts_with(rel));
    }

    fn record(&mut self, op: &IoOp<'_>) {
        match op {
            IoOp::CreateDir { path } => {
                let rel = self.rel(path);
                self.create_dir_all(&rel);
            }
            IoOp::Create { path } | IoOp::Allocate { path, .. } => {
                let rel = self.rel(path);
                self.create(&rel, false);
                if let IoOp::Allocate { len, .. } = op {
                    let node = self.node_of(&rel);
                    // An allocation's length, as a write of nothing at its end.
                    self.events.push(Event::Write(node, *len, Vec::new()));
                }
            }
            IoOp::Link { from, to } => {
                // A second name of an existing file.
                let (from, to) = (self.rel(from), self.rel(to));
                let node = self.node_of(&from);
                let (parent, name) = self.split(&to);
                self.paths.insert(to, node);
                self.events
                    .push(Event::Meta(Meta::Link { parent, name, node }));
            }
            IoOp::Write { path, offset, data } => {
                let node = self.node_of(&self.rel(path));
                self.events.push(Event::Write(node, *offset, data.to_vec()));
            }
            IoOp::Sync { path } => {
                let node = self.node_of(&self.rel(path));
                self.events.push(Event::Sync(node));
            }
            IoOp::SyncDir { path } => {
                let node = self.node_of(&self.rel(path));
                self.events.push(Event::SyncDir(node));
            }
            IoOp::Rename { from, to } => {
                let (from, to) = (self.rel(from), self.rel(to));
                let node = self.node_of(&from);
                let from_entry = self.split(&from);
                let to_entry = self.split(&to);
                let moved: Vec<(PathBuf, Node)> = self
                    .paths
                    .iter()
                    .filter(|(p, _)| p.starts_with(&from))
                    .map(|(p, n)| (to.join(p.strip_prefix(&from).unwrap()), *n))
                    .collect();
                self.forget_under(&to);
                self.forget_under(&from);
                self.paths.extend(moved);
                self.events.push(Event::Meta(Meta::Move {
                    from: from_entry,
                    to: to_entry,
                    node,
                }));
            }
            IoOp::Remove { path } | IoOp::RemoveDir { path } => {
                let rel = self.rel(path);
                let (parent, name) = self.split(&rel);
                self.forget_under(&rel);
                self.events.push(Event::Meta(Meta::Unlink { parent, name }));
            }
            other => panic!("an operation the simulation does not model: {other:?}"),
        }
    }
}

struct Recorder(Mutex<Recording>);

impl IoHook for Recorder {
    fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
        self.0.lock().unwrap().record(op);
        Ok(())
    }
}

/// Builds in `out` what a power failure after `events` could leave.
fn crash_image(events: &[Event], dirs: &BTreeSet<Node>, rng: &mut Rng, out: &Path) {
    let mut files: HashMap<Node, FileData> = HashMap::new();
    let mut metas: Vec<(Meta, bool)> = Vec::new();
    for e in events {
        match e {
            Event::Meta(m) => metas.push((m.clone(), false)),
            Event::Write(node, off, data) => {
                let f = files.entry(*node).or_default();
                if data.is_empty() {
                    f.len = f.len.max(*off);
                } else {
                    f.pending.push((*off, data.clone()));
                }
            }
            Event::Sync(node) => {
                let f = files.entry(*node).or_default();
                let pending = std::mem::take(&mut f.pending);
                for (off, data) in &pending {
                    f.len = f.len.max(off + data.len() as u64);
                }
                f.durable.extend(pending);
            }
            Event::SyncDir(dir) => {
                for (m, durable) in &mut metas {
                    if m.parents().contains(&Some(*dir)) {
                        *durable = true;
                    }
                }
            }
        }
    }
    // Entry changes that no directory sync covered persist as a prefix.
    let undecided = metas.iter().filter(|(_, d)| !d).count();
    let mut keep = rng.below(undecided as u64 + 1) as usize;
    let mut entries: HashMap<(Node, String), Node> = HashMap::new();
    for (m, durable) in metas {
        if !durable {
            if keep == 0 {
                continue;
            }
            keep -= 1;
        }
        match m {
            Meta::Link { parent, name, node } => {
                entries.insert((parent, name), node);
            }
            Meta::Move { from, to, node } => {
                if entries.get(&from) == Some(&node) {
                    entries.remove(&from);
                }
                entries.insert(to, node);
            }
            Meta::Unlink { parent, name } => {
                entries.remove(&(parent, name));
            }
        }
    }
    materialize(
        ROOT_NODE,
        out,
        &entries,
        dirs,
        &files,
        rng,
        &mut BTreeSet::new(),
    );
}

fn materialize(
    dir: Node,
    at: &Path,
    entries: &HashMap<(Node, String), Node>,
    dirs: &BTreeSet<Node>,
    files: &HashMap<Node, FileData>,
    rng: &mut Rng,
    seen: &mut BTreeSet<Node>,
) {
    std::fs::create_dir_all(at).unwrap();
    let mut children: Vec<(&String, Node)> = entries
        .iter()
        .filter(|((p, _), _)| *p == dir)
        .map(|((_, name), node)| (name, *node))
        .collect();
    children.sort();
    for (name, node) in children {
        let path = at.join(name);
        if dirs.contains(&node) {
            // A directory linked twice (a rename both kept and not) appears
            // once.
            if !seen.insert(node) {
                continue;
            }
            materialize(node, &path, entries, dirs, files, rng, seen);
        } else {
            // A file with two names (a hard link) appears under each, as a
            // copy: the store never writes through a second name.
            let data = files.get(&node).cloned().unwrap_or_default();
            std::fs::write(&path, file_bytes(&data, rng)).unwrap();
        }
    }
}

/// A file's bytes after the crash: what was synced, and each sector of an
/// unsynced write whole, lost, zeroed, garbage or torn.
fn file_bytes(f: &FileData, rng: &mut Rng) -> Vec<u8> {
    let most = f
        .pending
        .iter()
        .map(|(off, d)| off + d.len() as u64)
        .chain([f.len])
        .max()
        .unwrap_or(0);
    let mut bytes = vec![0u8; most as usize];
    let mut len = f.len as usize;
    for (off, data) in &f.durable {
        bytes[*off as usize..*off as usize + data.len()].copy_from_slice(data);
    }
    for (off, data) in &f.pending {
        len = len.max(engine::unsynced_write(&mut bytes, *off as usize, data, rng));
    }
    bytes.truncate(len);
    bytes
}

/// What the workload did to one session, with the event counts at which each
/// step started and was acknowledged.
#[derive(Debug, Clone)]
struct Model {
    id: SessionId,
    /// The items of each acknowledged write, in order; the first is the creation's.
    writes: Vec<(usize, usize, Vec<Item>)>,
    delete: Option<(usize, Option<usize>)>,
    /// Writes that returned on a `Buffered` store: acknowledged by the
    /// session's next sync.
    unsynced: Vec<usize>,
}

impl Model {
    fn new(id: SessionId, started: usize, acked: usize, items: Vec<Item>) -> Model {
        Model {
            id,
            writes: vec![(started, acked, items)],
            delete: None,
            unsynced: Vec::new(),
        }
    }

    /// Records a write that returned at event `returned`: acknowledged
    /// then on a `Sync` store, at the next sync on a `Buffered` one.
    fn returned(&mut self, durability: Durability, returned: usize) {
        let last = self.writes.len() - 1;
        match durability {
            Durability::Sync => self.writes[last].1 = returned,
            _ => self.unsynced.push(last),
        }
    }

    /// A sync of the session (or the store's close) returned at event `at`.
    fn synced(&mut self, at: usize) {
        for w in self.unsynced.drain(..) {
            self.writes[w].1 = at;
        }
    }

    fn items_acked_by(&self, k: usize) -> Vec<Item> {
        self.writes
            .iter()
            .filter(|(_, acked, _)| *acked <= k)
            .flat_map(|(_, _, items)| items.clone())
            .collect()
    }

    fn all_items(&self) -> Vec<Item> {
        self.writes
            .iter()
            .flat_map(|(_, _, items)| items.clone())
            .collect()
    }
}

fn items(rng: &mut Rng, tag: &str) -> Vec<Item> {
    (0..1 + rng.below(3))
        .map(|i| {
            let size = match rng.below(6) {
                0 => 2000 + rng.below(6000) as usize,
                _ => rng.below(300) as usize,
            };
            let text = format!("{tag}.{i}:{}", "z".repeat(size));
            match i % 2 {
                0 => Item::user_text(text),
                _ => Item::assistant_text(text),
            }
        })
        .collect()
}

fn options(durability: Durability, hook: Option<Arc<dyn IoHook>>) -> StoreOptions {
    let mut log = LogOptions {
        prepare_ahead: false,
        ..LogOptions::default()
            .segment_size(16 << 10)
            .initial_segment_size(8 << 10)
            .durability(durability)
    };
    if let Some(h) = hook {
        log = log.hook(h);
    }
    // Items of 3000 text bytes or more (about a third of the large ones)
    // go to the payload area, so crashes land between a payload and its
    // record too.
    // Two sessions open, one of them active: saves also park and unpark
    // (or open a parked session's files for one save), so crashes land
    // with writes made through a reopened descriptor.
    StoreOptions::default()
        .log(log)
        .max_open_sessions(2)
        .max_active_sessions(1)
        .payload_threshold(3000)
}

/// A directory for one trial: on tmpfs where there is one, since the
/// crashes and faults are simulated and real syncs would only slow them.
fn scratch_dir() -> tempfile::TempDir {
    match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    }
}

/// Sessions found in crash images, over all trials: the checks had work.
static SESSIONS_SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs a seeded workload of creations, saves, forks and deletions against
/// `store`, with `ops()` counting the I/O operations so far. Stops at the
/// first error (an injected fault), which it returns with the models: the
/// failed step's model has an acknowledgement that never comes.
fn workload(
    store: &Store,
    durability: Durability,
    rng: &mut Rng,
    ops: &dyn Fn() -> usize,
) -> (Vec<Model>, Option<session_store::Error>) {
    const NEVER: usize = usize::MAX;
    let mut models: Vec<Model> = Vec::new();
    let mut heads = HashMap::new();
    for step in 0..4 + rng.below(14) {
        let live: Vec<usize> = (0..models.len())
            .filter(|&i| models[i].delete.is_none())
            .collect();
        let pick = |rng: &mut Rng| live[rng.below(live.len() as u64) as usize];
        let started = ops();
        let choice = if live.is_empty() { 0 } else { rng.below(10) };
        let failed = match choice {
            3 if durability == Durability::Buffered => {
                let i = pick(rng);
                let r = store.log(models[i].id).and_then(|log| log.sync());
                if r.is_ok() {
                    models[i].synced(ops());
                }
                r.err()
            }
            4..=6 => {
                let i = pick(rng);
                let new = items(rng, &format!("s{step}"));
                let head = heads.get_mut(&models[i].id).unwrap();
                let r = store.save_delta(models[i].id, head, &new);
                models[i].writes.push((started, NEVER, new));
                if r.is_ok() {
                    models[i].returned(durability, ops());
                }
                r.err()
            }
            7 => {
                let i = pick(rng);
                let r = store.delete(models[i].id);
                let acked = r.is_ok().then(ops);
                models[i].delete = Some((started, acked));
                r.err()
            }
            8..=9 => {
                let i = pick(rng);
                let parent = models[i].clone();
                match store.fork_at(parent.id, heads[&parent.id]) {
                    Ok((id, head)) => {
                        heads.insert(id, head);
                        let mut m = Model::new(id, started, NEVER, parent.all_items());
                        m.returned(durability, ops());
                        models.push(m);
                        None
                    }
                    Err(e) => {
                        // A fork whose creation failed may still exist,
                        // under an id the caller never learnt.
                        let unknown = SessionId([0; 16]);
                        models.push(Model::new(unknown, started, NEVER, parent.all_items()));
                        Some(e)
                    }
                }
            }
            _ => {
                let first = items(rng, &format!("c{step}"));
                let id = SessionId::new_v7();
                let r = store.create_session_with_id(
                    id,
                    Some("be brief"),
                    RequestConfig::model("m"),
                    &first,
                );
                let mut m = Model::new(id, started, NEVER, first);
                if let Ok(head) = &r {
                    heads.insert(id, *head);
                    m.returned(durability, ops());
                }
                models.push(m);
                r.err()
            }
        };
        if failed.is_some() {
            return (models, failed);
        }
    }
    (models, None)
}

/// The store's close returned at event `at`: every session is synced.
fn closed(models: &mut [Model], at: usize) {
    for m in models {
        m.synced(at);
    }
}

/// Runs one workload and checks `crashes` crash points in it. Panics with the seed.
fn trial(durability: Durability, seed: u64, crashes: usize) -> usize {
    let mut rng = Rng(seed);
    let work = scratch_dir();
    let base = work.path().join("w");
    std::fs::create_dir(&base).unwrap();
    let recorder = Arc::new(Recorder(Mutex::new(Recording {
        paths: HashMap::new(),
        dirs: [ROOT_NODE].into(),
        next_node: ROOT_NODE + 1,
        events: Vec::new(),
        base: base.clone(),
    })));
    let events_now = || recorder.0.lock().unwrap().events.len();
    let store = Store::open_with(
        base.join("store"),
        options(durability, Some(recorder.clone() as _)),
    )
    .unwrap();
    let (mut models, failed) = workload(&store, durability, &mut rng, &events_now);
    assert!(failed.is_none(), "seed {seed}: {failed:?}");
    store.close().unwrap();
    closed(&mut models, events_now());
    drop(store);
    let (events, dirs) = {
        let r = recorder.0.lock().unwrap();
        (r.events.clone(), r.dirs.clone())
    };
    let mut checked = 0;
    for c in 0..crashes {
        let k = rng.below(events.len() as u64 + 1) as usize;
        let image = work.path().join(format!("crash-{c}"));
        crash_image(&events[..k], &dirs, &mut rng, &image);
        let ctx = format!(
            "{durability:?}, seed {seed}, crash {c} at event {k} of {}; replay with POWER_LOSS_STORE_SEED={seed}",
            events.len()
        );
        let sessions = check_image(&image.join("store"), durability, &models, k, &mut rng, &ctx);
        checked += 1;
        SESSIONS_SEEN.fetch_add(sessions, std::sync::atomic::Ordering::Relaxed);
    }
    checked
}

/// Checks one crash image against what the workload had acknowledged by
/// event `k`.
fn check_image(
    root: &Path,
    durability: Durability,
    models: &[Model],
    k: usize,
    rng: &mut Rng,
    ctx: &str,
) -> usize {
    let created_by_k = models.iter().any(|m| m.writes[0].1 <= k);
    if !root.join("sessions").is_dir() {
        assert!(
            !created_by_k,
            "{ctx}: acknowledged sessions but no store survived"
        );
        return 0;
    }
    let store = Store::open_with(root, options(durability, None))
        .unwrap_or_else(|e| panic!("{ctx}: the store does not open: {e}"));
    let listed = store
        .list()
        .unwrap_or_else(|e| panic!("{ctx}: list failed: {e}"));
    let listed_ids: BTreeSet<SessionId> = listed.iter().map(|s| s.id).collect();
    let known: BTreeSet<SessionId> = models.iter().map(|m| m.id).collect();
    let unknown: Vec<SessionId> = listed_ids.difference(&known).copied().collect();
    let failed_fork = models.iter().find(|m| m.id == SessionId([0; 16]));
    assert!(
        unknown.is_empty() || (failed_fork.is_some() && unknown.len() == 1),
        "{ctx}: list shows sessions that never were: {unknown:?}"
    );
    let resolved: Vec<Model> = models
        .iter()
        .filter_map(|m| match (m.id == SessionId([0; 16]), unknown.first()) {
            (false, _) => Some(m.clone()),
            (true, Some(&id)) => Some(Model { id, ..m.clone() }),
            (true, None) => None,
        })
        .collect();
    for m in &resolved {
        let (started, acked, _) = &m.writes[0];
        let exists = store.exists(m.id);
        assert_eq!(
            exists,
            listed_ids.contains(&m.id),
            "{ctx}: {} exists {exists} but list disagrees",
            m.id
        );
        let deleted = m
            .delete
            .is_some_and(|(_, acked)| acked.is_some_and(|a| a <= k));
        let deleting = m.delete.is_some_and(|(s, _)| s <= k);
        if deleted {
            assert!(!exists, "{ctx}: deleted session {} came back", m.id);
            continue;
        }
        if *acked <= k && !deleting {
            assert!(exists, "{ctx}: acknowledged session {} was lost", m.id);
        }
        if *started > k {
            assert!(
                !exists,
                "{ctx}: session {} exists before its creation",
                m.id
            );
        }
        if !exists {
            continue;
        }
        let state = store
            .restore(m.id)
            .unwrap_or_else(|e| panic!("{ctx}: restore of {} failed: {e}", m.id));
        let all = m.all_items();
        let must = match durability {
            Durability::Sync => m.items_acked_by(k),
            Durability::Buffered => Vec::new(),
        };
        let first_len = m.writes[0].2.len();
        assert!(
            state.history.len() >= must.len().max(first_len),
            "{ctx}: {} restores {} items, {} were acknowledged",
            m.id,
            state.history.len(),
            must.len()
        );
        assert_eq!(
            state.history[..],
            all[..state.history.len().min(all.len())],
            "{ctx}: {} does not restore a prefix of what was written",
            m.id
        );
        let info = listed.iter().find(|s| s.id == m.id).unwrap();
        assert_eq!(
            info.head, state.head,
            "{ctx}: list and restore disagree on {}",
            m.id
        );
        assert_eq!(info.error, None, "{ctx}: {} is listed as damaged", m.id);
    }
    // What a crash lost leaves its id free (a deleted parent that forks
    // still read keeps it, retired, until they are gone).
    for m in &resolved {
        let retired = root.join("retired").join(m.id.to_string()).exists();
        if m.id != SessionId([0; 16]) && !store.exists(m.id) && !retired {
            store
                .create_session_with_id(m.id, None, RequestConfig::default(), &[])
                .unwrap_or_else(|e| panic!("{ctx}: {} cannot be created again: {e}", m.id));
        }
    }
    // The recovered store takes new work.
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("after")])
        .unwrap_or_else(|e| panic!("{ctx}: creation after recovery failed: {e}"));
    if let Some(&m) = listed.iter().map(|s| &s.id).collect::<Vec<_>>().first() {
        let mut h = store.head(*m).unwrap().unwrap();
        store
            .save_delta(*m, &mut h, &items(rng, "after"))
            .unwrap_or_else(|e| panic!("{ctx}: save after recovery failed: {e}"));
    }
    store
        .save_delta(id, &mut head, &[Item::assistant_text("ok")])
        .unwrap();
    store.close().unwrap();
    drop(store);
    let store = Store::open_with(root, options(durability, None)).unwrap();
    assert_eq!(store.restore(id).unwrap().history.len(), 2, "{ctx}");
    for s in store.list().unwrap() {
        let report = store.log(s.id).unwrap().verify();
        assert_eq!(report.damage, None, "{ctx}: {} does not verify", s.id);
        // A fork's parent (retired or not) outlives it, whatever the crash.
        store
            .verify_fork_link(s.id)
            .unwrap_or_else(|e| panic!("{ctx}: {} lost its parent: {e}", s.id));
    }
    listed_ids.len()
}

fn power_loss_trials(durability: Durability) {
    let seen_before = SESSIONS_SEEN.load(std::sync::atomic::Ordering::Relaxed);
    let (trials, _) = engine::run_seeded_trials("POWER_LOSS_STORE", 600, 90, 100, |seed| {
        trial(durability, seed, 8)
    });
    let seen = SESSIONS_SEEN.load(std::sync::atomic::Ordering::Relaxed) - seen_before;
    println!("{durability:?}: {seen} sessions found in the crash images");
    assert!(
        seen >= trials / 4,
        "too few sessions survived to check: {seen}"
    );
}

#[test]
fn power_loss_keeps_every_acknowledged_session_creation_save_and_deletion() {
    power_loss_trials(Durability::Sync);
}

#[test]
fn power_loss_on_a_buffered_store_keeps_every_synced_creation_and_save() {
    power_loss_trials(Durability::Buffered);
}

/// Fails the `n`th I/O operation (and, `sticky`, every one after it), and
/// counts them all.
struct FailAt {
    n: usize,
    sticky: bool,
    seen: std::sync::atomic::AtomicUsize,
}

impl IoHook for FailAt {
    fn before(&self, _op: &IoOp<'_>) -> io::Result<()> {
        let i = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if i == self.n || (self.sticky && i > self.n) {
            return Err(io::Error::other(format!(
                "injected failure of operation {i}"
            )));
        }
        Ok(())
    }
}

/// One workload with operation `n` failing: the store must report the
/// failure as an error, and a reopened store must hold every acknowledged
/// session, save and deletion, and take new work. Returns the operations the
/// workload ran.
fn sweep_one(durability: Durability, seed: u64, n: usize, sticky: bool) -> usize {
    let work = scratch_dir();
    let root = work.path().join("store");
    let hook = Arc::new(FailAt {
        n,
        sticky,
        seen: Default::default(),
    });
    let ops = || hook.seen.load(std::sync::atomic::Ordering::SeqCst);
    let ctx = format!("{durability:?}, seed {seed}, operation {n} failing (sticky: {sticky})");
    let mut rng = Rng(seed);
    let models = match Store::open_with(&root, options(durability, Some(hook.clone() as _))) {
        Ok(store) => {
            let (mut models, _) = workload(&store, durability, &mut rng, &ops);
            // A close may fail too (a poisoned log, a failed sync); the
            // reopen below must cope either way.
            if store.close().is_ok() {
                closed(&mut models, ops());
            }
            models
        }
        Err(e) => {
            assert!(
                matches!(e, session_store::Error::Io { .. }),
                "{ctx}: open failed with {e}"
            );
            Vec::new()
        }
    };
    let ran = ops();
    check_image(&root, durability, &models, ran, &mut rng, &ctx);
    ran
}

fn io_error_sweep(durability: Durability) {
    for seed in [3u64, 11] {
        for sticky in [false, true] {
            let mut n = 0;
            // The workload without a failure runs `total` operations.
            let total = sweep_one(durability, seed, usize::MAX, false);
            while n < total {
                sweep_one(durability, seed, n, sticky);
                // Every operation for the first hundred, then every third.
                n += if n < 100 { 1 } else { 3 };
            }
        }
    }
}

#[test]
fn an_io_error_anywhere_in_store_operations_loses_nothing_acknowledged() {
    io_error_sweep(Durability::Sync);
}

#[test]
fn an_io_error_anywhere_on_a_buffered_store_loses_nothing_synced() {
    io_error_sweep(Durability::Buffered);
}
