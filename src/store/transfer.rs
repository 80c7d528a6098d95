//! Export and import of whole sessions in the wire form, as library calls
//! (the CLI's `export` and `import` are these).

use std::io::{BufRead, Write};
use std::path::PathBuf;

use super::Store;
use crate::error::{Error, Result};
use crate::export::{parse_line, LineReader};
use crate::schema::SessionId;

impl Store {
    /// Writes the session's every entry as a wire line (`seq`, `hash`,
    /// `prev_hash`, which is `null` at seq 0, then the entry), one per line,
    /// to `out`: the bytes `session-store export` prints. Returns the lines
    /// written. Reads only (a session not open here is read without its
    /// writer lock). `out` is not flushed; wrap it in a `BufWriter` for
    /// speed.
    ///
    /// The export is self-contained: a fork by reference is written as a
    /// standalone session, its first line a `session_start` carrying the
    /// history it inherits (`forked_from` names the parent), its chain
    /// computed from genesis ([`Store::export_entries`]); it imports
    /// without the parent.
    ///
    /// An export of a live session stops at the head it had when the call
    /// began. A failed write is [`Error::Io`] with op `"write export"`.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path().join("laptop"))?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Convert data.csv to JSON."), Item::assistant_text("Wrote data.json.")])?;
    /// let mut wire = Vec::new();
    /// assert_eq!(store.export(id, &mut wire)?, 3); // `session_start`, `user_input`, `assistant_items`
    ///
    /// // Elsewhere: the same history, and the same hashes.
    /// let server = Store::open(dir.path().join("server"))?;
    /// let copy = server.import_from(&wire[..])?;
    /// assert_eq!(server.restore(copy)?.history, store.restore(id)?.history);
    /// assert_eq!(server.head(copy)?, Some(head));
    /// # Ok(()) }
    /// ```
    pub fn export(&self, id: SessionId, mut out: impl Write) -> Result<u64> {
        self.export_entries(id, |e| {
            let mut line = e.wire_line();
            line.push('\n');
            out.write_all(line.as_bytes()).map_err(|err| {
                Error::io(
                    "write export",
                    PathBuf::from(format!("<export of session {id}>")),
                    err,
                )
            })
        })
    }

    /// Creates a new session from wire lines read from `input` (what
    /// [`Store::export`] writes, or lines without `seq` and hashes), checking
    /// every `seq`, `hash` and `prev_hash` a line carries against the chain;
    /// nothing is written unless every line parses and checks out. Errors
    /// name the line ([`Error::Wire`]). Returns the new session's id.
    ///
    /// Example: [`Store::export`].
    pub fn import_from(&self, input: impl BufRead) -> Result<SessionId> {
        let mut reader = LineReader::new(input);
        let mut lines = Vec::new();
        while let Some((no, text)) = reader.next_line()? {
            lines.push((no, parse_line(text, no)?));
        }
        self.import(&lines)
    }
}
