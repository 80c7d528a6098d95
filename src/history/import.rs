//! Writing a read transcript into the store: as a new session every time
//! ([`HistoryImport::write_to`]), or once per content
//! ([`HistoryImport::write_once_to`]).
//!
//! A transcript that was compacted is compacted in the store too, as the
//! store models compaction: the history before the first compaction is
//! saved, then each compaction is a [`Store::compact`] of the session to
//! what the agent carried on with, followed by what came after it. So the
//! history before a compaction stays in the log, and restoring the session
//! gives what the agent would resend.
//!
//! # Importing once
//!
//! A session written by `write_once_to` has an id derived from the reader's
//! domain and the BLAKE3 of the content read (a UUID of version 8), so
//! finding an earlier import of the same content is one `exists` check, and
//! two imports racing cannot both create it. The provenance, written last,
//! marks the import complete. A transcript that has grown since is other
//! content: it imports as a new session, whole, beside the old one.

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::item::Item;
use crate::schema::{JsonText, RequestConfig, SessionId};
use crate::store::Store;

/// A compaction in a transcript: where the history starts over.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryCompaction {
    /// What the agent carried on with: the history the compaction starts
    /// from (a summary, or the history restated). Empty when the summary is
    /// an item of its own, as in Claude Code.
    pub history: Vec<Item>,
    /// What the transcript records after the compaction, in order.
    pub items: Vec<Item>,
}

/// A transcript converted to runtime items, ready to be written as a new
/// session, with its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryImport {
    /// The conversation up to its first compaction (all of it when it has
    /// none), in order. Pairings the transcript lacks stay missing: no call
    /// or result is invented.
    pub items: Vec<Item>,
    /// The compactions, in order; each becomes a compaction of the session.
    pub compactions: Vec<HistoryCompaction>,
    /// The domain of the `Extension` entry that records provenance, for
    /// example `"history.agy"`.
    pub extension_domain: &'static str,
    /// Where the items came from (transcript path, lines or steps), as the
    /// body of that `Extension` entry; the writer adds `content_blake3`.
    pub provenance: serde_json::Value,
    /// The BLAKE3 (hex) of the content the items were read from: what makes
    /// two imports the same.
    pub content_hash: String,
}

/// The session an import wrote, or found already written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Imported {
    /// The session.
    pub session: SessionId,
    /// `false` when the same content had been imported before and nothing
    /// was written.
    pub created: bool,
}

impl HistoryImport {
    /// Writes the items as a new session of `store`, compacted where the
    /// transcript was, with the provenance as an `Extension` entry, and
    /// returns its id. Writes every time it is called; see
    /// [`HistoryImport::write_once_to`]. Pairings the transcript lacks stay
    /// missing, for [`crate::RestoredState::check`] to report.
    pub fn write_to(&self, store: &Store) -> Result<SessionId> {
        let id = SessionId::new_v7();
        self.write_session(store, id)?;
        Ok(id)
    }

    /// Writes the import unless the same content was imported into `store`
    /// before, in which case it returns that session and writes nothing.
    /// See the module docs for how the earlier import is found.
    ///
    /// An earlier import that was cut short (a crash before its provenance
    /// was written) is an error naming its session, which the user may
    /// remove and import again; it is never completed by guess.
    pub fn write_once_to(&self, store: &Store) -> Result<Imported> {
        let session = self.import_id();
        if !store.exists(session) {
            match self.write_session(store, session) {
                Ok(()) => {
                    return Ok(Imported {
                        session,
                        created: true,
                    })
                }
                // Another import of the same content won the race.
                Err(_) if store.exists(session) => {}
                Err(e) => return Err(e),
            }
        }
        let state = store.restore(session)?;
        let complete = state
            .extensions
            .iter()
            .filter(|e| e.domain == self.extension_domain)
            .filter_map(|e| serde_json::from_str::<Value>(e.payload.as_str()).ok())
            .any(|p| p["content_blake3"] == self.content_hash.as_str());
        if complete {
            Ok(Imported {
                session,
                created: false,
            })
        } else {
            Err(Error::invalid(format!(
                "session {session} holds an unfinished import of this transcript \
                 (interrupted?); remove it (`session-store rm {session}`) and import again"
            )))
        }
    }

    /// The id of the session of an import of this content.
    pub fn import_id(&self) -> SessionId {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"session-store history import v1\0");
        hasher.update(self.extension_domain.as_bytes());
        hasher.update(b"\0");
        hasher.update(self.content_hash.as_bytes());
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
        // RFC 9562 version 8 (custom) and variant bits.
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        SessionId(bytes)
    }

    /// Writes the session under `id`, the provenance last: its presence
    /// says the whole import is written.
    fn write_session(&self, store: &Store, id: SessionId) -> Result<()> {
        let mut provenance = self.provenance.clone();
        if let Value::Object(map) = &mut provenance {
            map.insert("content_blake3".into(), self.content_hash.clone().into());
        }
        // Checked before the session exists, so a refusal leaves nothing.
        let provenance = JsonText::from_value(&provenance)?;
        let mut head = store.create_session_with_id(id, None, RequestConfig::default(), &[])?;
        store.save_delta(id, &mut head, &self.items)?;
        for compaction in &self.compactions {
            head = store.compact(id, head, &compaction.history)?;
            store.save_delta(id, &mut head, &compaction.items)?;
        }
        store.save_extension(id, &mut head, self.extension_domain, provenance)
    }
}
