//! Names for sessions: text an application chooses ("user_123"), unique in a
//! store, durable, and found without reading any log.
//!
//! `names/` holds one file per name. Its file name is the name escaped
//! (`[A-Za-z0-9_-]` kept, every other byte `%XX`; a name whose escaped form
//! is longer than [`MAX_ESCAPED`] bytes is `~` and the BLAKE3 hash of the
//! name), so a lookup is one `open`. Its content is the session id, a
//! newline, and the name itself, which a lookup compares, so that neither a
//! hash collision nor a stray file can hand out another name's session.
//!
//! Creating a named session: under an exclusive `flock` of `names/.lock`
//! (creators in every thread and process take turns), the name is looked up;
//! if it is free, the session is created whole, with its name recorded in its
//! own log (an `Extension` entry of domain [`NAME_DOMAIN`] right after the
//! `SessionStart`, so an export carries it); then the name file is written
//! under a temporary name, synced, given its real name with `link(2)`
//! (which, unlike a rename, fails if the name exists) and the directory
//! synced. A name therefore only ever points at a session that was complete
//! before it; a crash before the link leaves a session without a name,
//! which lists like any other, and the name free. A name whose session was
//! deleted since counts as free, and the next creation takes it over.

use std::path::{Path, PathBuf};

use super::Store;
use crate::chain::EntryHash;
use crate::error::{Error, Result};
use crate::fs::{self as hooked_fs, io_err, sync_dir, HookedFile};
use crate::item::Item;
use crate::schema::{JsonText, LogEntry, LoggedItem, RequestConfig, SessionId};

/// The directory of names, under the store's root.
const NAMES_DIR: &str = "names";

/// The lock that creators of named sessions take in turn. Escaped names
/// never start with a dot, so it never collides with one.
const LOCK_FILE: &str = ".lock";

/// The longest escaped name kept as a file name; longer names are hashed
/// (file names are at most 255 bytes on the usual file systems).
const MAX_ESCAPED: usize = 200;

/// The longest name accepted, in bytes.
///
/// Example: [`Store::create_named`].
pub const MAX_NAME_BYTES: usize = 4096;

/// The domain of the `Extension` entry that records a session's name in
/// its log.
///
/// ```
/// use session_store::store::NAME_DOMAIN;
/// use session_store::Store;
/// # fn main() -> session_store::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path())?;
/// let id = store.find_or_create_named("slack:C024BE91L")?;
/// let extensions = store.restore(id)?.extensions;
/// assert_eq!(extensions[0].domain, NAME_DOMAIN);
/// # Ok(()) }
/// ```
pub const NAME_DOMAIN: &str = "session_store.name";

impl Store {
    /// The session named `name`, if there is one. Reads one small file and
    /// no log. A name whose session has been deleted is `None`.
    ///
    /// Example: [`Store::create_named`].
    pub fn find_name(&self, name: &str) -> Result<Option<SessionId>> {
        check_name(name)?;
        let path = self.name_path(name);
        let text = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("read", path, e)),
        };
        let text = String::from_utf8_lossy(&text);
        let Some((id, stored)) = text.split_once('\n') else {
            return Err(Error::invalid(format!(
                "{} is not a name file (no newline)",
                path.display()
            )));
        };
        if stored != name {
            return Err(Error::invalid(format!(
                "{} names another session",
                path.display()
            )));
        }
        let id: SessionId = id.parse()?;
        Ok(self.exists(id).then_some(id))
    }

    /// Every name of a live session, by session: one read of `names/` and
    /// of each name file (a name whose session was deleted is left out).
    pub(crate) fn names(&self) -> Result<std::collections::HashMap<SessionId, String>> {
        let dir = self.inner.root.join(NAMES_DIR);
        let mut out = std::collections::HashMap::new();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Error::io("read dir", dir, e)),
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            // The lock, and names being written (a temporary name).
            if file.to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(bytes) = std::fs::read(entry.path()) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            let Some((id, name)) = text.split_once('\n') else {
                continue;
            };
            // Only a file the name's own lookup would find counts.
            if self.name_path(name).file_name() != Some(file.as_os_str()) {
                continue;
            }
            if let Ok(id) = id.parse::<SessionId>() {
                if self.exists(id) {
                    out.insert(id, name.to_owned());
                }
            }
        }
        Ok(out)
    }

    /// Creates a session named `name` (see [`Store::create_session`] for the
    /// rest); fails with [`Error::InvalidInput`] if a session has that name.
    /// Returns the id and head.
    ///
    /// ```
    /// use session_store::{Error, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let config = RequestConfig::model("gpt-5");
    /// let (id, _head) = store.create_named("nightly-triage", Some("Triage new issues."), config.clone(), &[])?;
    /// assert_eq!(store.find_name("nightly-triage")?, Some(id));
    /// assert_eq!(store.list()?[0].name.as_deref(), Some("nightly-triage"));
    ///
    /// let taken = store.create_named("nightly-triage", None, config, &[]);
    /// assert!(matches!(taken, Err(Error::InvalidInput { .. })));
    /// # Ok(()) }
    /// ```
    pub fn create_named(
        &self,
        name: &str,
        system_prompt: Option<&str>,
        config: RequestConfig,
        history: &[Item],
    ) -> Result<(SessionId, EntryHash)> {
        let (id, head) = self.named(name, system_prompt, config, history)?;
        match head {
            Some(head) => Ok((id, head)),
            None => Err(Error::invalid(format!(
                "the name {:?} is taken by session {id}",
                shown(name)
            ))),
        }
    }

    /// The session named `name`, created (with an empty history and
    /// default settings) if there is none. Creators racing for one name, in
    /// threads or processes, all get the same session.
    ///
    /// ```
    /// use session_store::{Item, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// // One session per chat thread: the first message creates it, every
    /// // later one finds it.
    /// let id = store.find_or_create_named("slack:C024BE91L")?;
    /// let mut head = store.head(id)?.expect("a new session has its first entry");
    /// store.save_delta(id, &mut head, &[Item::user_text("Is the build green?")])?;
    /// assert_eq!(store.find_or_create_named("slack:C024BE91L")?, id);
    /// # Ok(()) }
    /// ```
    pub fn find_or_create_named(&self, name: &str) -> Result<SessionId> {
        if let Some(id) = self.find_name(name)? {
            return Ok(id);
        }
        Ok(self.named(name, None, RequestConfig::default(), &[])?.0)
    }

    /// Looks `name` up under the creators' lock, and creates its session if
    /// it is free: `(id, Some(head))` for a new session, `(id, None)` for
    /// the one that had the name already.
    fn named(
        &self,
        name: &str,
        system_prompt: Option<&str>,
        config: RequestConfig,
        history: &[Item],
    ) -> Result<(SessionId, Option<EntryHash>)> {
        check_name(name)?;
        self.writable()?;
        let dir = self.inner.root.join(NAMES_DIR);
        if !hooked_fs::dir_exists(&dir)? {
            hooked_fs::create_dir(&dir, self.hook())?;
            sync_dir(&self.inner.root, self.hook())?;
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = HookedFile::open_or_create(&lock_path, self.hook())?;
        lock.file().lock().map_err(io_err("lock", &lock_path))?;
        if let Some(id) = self.find_name(name)? {
            return Ok((id, None));
        }
        let id = SessionId::new_v7();
        let payload = JsonText::from_value(&serde_json::json!({ "name": name }))?;
        let entries = [
            LogEntry::SessionStart {
                ts: super::now_ms(),
                system_prompt: system_prompt.map(str::to_owned),
                config,
                history: history.iter().map(LoggedItem::from).collect(),
                forked_from: None,
                compacted_from: None,
            },
            LogEntry::Extension {
                ts: super::now_ms(),
                domain: NAME_DOMAIN.into(),
                payload,
            },
        ];
        let head = self.create_with_entries(id, &entries)?;
        // The session must be durable before a durable name points at it
        // (a Buffered creation is durable only at its first sync).
        if let Err(e) = self.sync(id).and_then(|()| self.link_name(&dir, name, id)) {
            // The session is complete but nameless: take it back, so that a
            // retry does not leave one more behind (best effort; a leftover
            // lists like any session, and carries its name in its log).
            let _ = self.delete(id);
            return Err(e);
        }
        Ok((id, Some(head)))
    }

    /// Writes the name file for `id`, durably, under the creators' lock.
    fn link_name(&self, dir: &Path, name: &str, id: SessionId) -> Result<()> {
        let path = self.name_path(name);
        let tmp = dir.join(format!(".tmp-{}", SessionId::new_v7()));
        let written = HookedFile::create(&tmp, self.hook()).and_then(|file| {
            file.write_at(0, format!("{id}\n{name}").as_bytes())?;
            file.sync()
        });
        let linked = written.and_then(|()| {
            match hooked_fs::link(&tmp, &path, self.hook()) {
                // The lookup under the lock found no live session there:
                // what is left names a deleted session, and gives way.
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists =>
                {
                    hooked_fs::remove_file(&path, self.hook())?;
                    hooked_fs::link(&tmp, &path, self.hook())
                }
                other => other,
            }
        });
        let _ = hooked_fs::remove_file(&tmp, self.hook());
        linked?;
        sync_dir(dir, self.hook())
    }

    /// The name file of `name`.
    fn name_path(&self, name: &str) -> PathBuf {
        self.inner.root.join(NAMES_DIR).join(file_name(name))
    }
}

/// Refuses a name that is empty or too long.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("a session name must not be empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(format!(
            "a session name is at most {MAX_NAME_BYTES} bytes; this one has {}",
            name.len()
        )));
    }
    Ok(())
}

/// The start of a name, for an error message.
fn shown(name: &str) -> String {
    name.chars().take(64).collect()
}

/// The file name of `name` in `names/`.
fn file_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > MAX_ESCAPED {
        return format!("~{}", blake3::hash(name.as_bytes()).to_hex());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::file_name;

    #[test]
    fn file_names_are_plain_and_distinct() {
        assert_eq!(file_name("user_123"), "user_123");
        assert_eq!(file_name("a b/.."), "a%20b%2F%2E%2E");
        assert_eq!(file_name("%20"), "%2520");
        assert_eq!(file_name("é"), "%C3%A9");
        let long = file_name(&"x".repeat(500));
        assert!(long.starts_with('~') && long.len() == 65);
        assert_ne!(long, file_name(&"x".repeat(501)));
        for name in [".", "..", ".lock", ".tmp-1"] {
            assert!(!file_name(name).starts_with('.'));
        }
    }
}
