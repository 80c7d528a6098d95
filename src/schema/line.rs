//! The longest wire line import reads, and the writer's check that no
//! entry would export as a longer one (items kept in the payload area
//! counted as the items they export as).

use super::{JsonText, LogEntry, LoggedItem, LoggedPayloadRef};
use crate::error::{Error, Result};

/// The longest line of the JSON wire form that import reads, in bytes.
/// The log refuses an entry whose line would be longer
/// ([`LogEntry::check_line_len`]), so every export imports back.
///
/// Example: [the `wire` module](crate::wire#example).
pub const MAX_LINE_BYTES: usize = 512 << 20;

/// How many times its archive's size an entry's JSON can be at most: JSON
/// escapes a byte into six at worst, and field names are shorter than the
/// archived fields they name many times over (a test holds every generated
/// entry to this bound).
pub const JSON_GROWTH: usize = 16;

/// What a wire line holds besides the entry's own JSON, at most: the seq and
/// both hashes (`{"seq":…,"hash":"…","prev_hash":"…",`).
const LINE_PREFIX_BYTES: usize = 256;

/// Counts the bytes written to it.
struct ByteCounter(usize);

/// Gives the length of the JSON of the item kept in the payload area as the
/// reference names (the store reads it there).
pub(crate) type MeasureItem<'a> = dyn FnMut(&LoggedPayloadRef) -> Result<usize> + 'a;

/// The length of `value`'s JSON, counted as it is written.
pub(crate) fn json_len(value: &impl serde::Serialize) -> Result<usize> {
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, value)
        .map_err(|e| Error::invalid(format!("entry does not serialize to JSON: {e}")))?;
    Ok(counter.0)
}

/// The most JSON the item kept in the payload area as `r` can export as,
/// bounded without reading it.
pub(crate) fn bounded_json_len(r: &LoggedPayloadRef) -> usize {
    (r.len as usize).saturating_mul(JSON_GROWTH)
}

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogEntry {
    /// Refuses an entry whose wire line would be longer than import reads
    /// back ([`MAX_LINE_BYTES`]): a large payload of control characters
    /// grows six-fold in JSON (`\u0001`). `archived_len` is the entry's
    /// archive size; the JSON of an entry is at most `JSON_GROWTH` (16) times
    /// that, so only entries near the limit are serialized to be measured.
    ///
    /// An item kept in a store's payload area ([`LoggedItem::External`](crate::schema::LoggedItemOf::External))
    /// exports as the item itself. Without its store this can only bound
    /// it (`JSON_GROWTH` times its archive's length), and refuses an entry
    /// whose bound passes the limit.
    ///
    /// Example: [the `wire` module](crate::wire#example).
    pub fn check_line_len(&self, archived_len: usize) -> Result<()> {
        self.check_line_len_with(archived_len, &mut |r| Ok(bounded_json_len(r)))
    }

    /// [`LogEntry::check_line_len`], with `external` giving the JSON length
    /// of each item kept in the payload area (the store reads it there).
    pub(crate) fn check_line_len_with(
        &self,
        archived_len: usize,
        external: &mut MeasureItem<'_>,
    ) -> Result<()> {
        let bound = archived_len
            .saturating_add(self.external_len())
            .saturating_mul(JSON_GROWTH);
        if bound.saturating_add(LINE_PREFIX_BYTES) <= MAX_LINE_BYTES {
            return Ok(());
        }
        let refs = self.payload_refs();
        let own = if refs.is_empty() {
            json_len(self)
        } else {
            // The entry with each reference as the smallest item, then the
            // items themselves counted in its place: a few bytes over.
            let mut inline = self.clone();
            for item in inline.items_mut() {
                if let LoggedItem::External(_) = item {
                    *item = LoggedItem::Opaque {
                        role: None,
                        json: JsonText(String::from("{}")),
                    };
                }
            }
            json_len(&inline)
        }?;
        let mut line = own.saturating_add(LINE_PREFIX_BYTES);
        for r in refs {
            line = line.saturating_add(external(r)?);
        }
        if line > MAX_LINE_BYTES {
            return Err(Error::invalid(format!(
                "{} entry would export as a {line}-byte line; import reads lines of at most {MAX_LINE_BYTES} bytes",
                self.kind().name()
            )));
        }
        Ok(())
    }

    /// The references to the payload area among the entry's items.
    pub(crate) fn payload_refs(&self) -> Vec<&LoggedPayloadRef> {
        self.items()
            .iter()
            .filter_map(|i| match i {
                LoggedItem::External(r) => Some(&**r),
                _ => None,
            })
            .collect()
    }

    /// [`LogEntry::check_line_len_with`] of the entry archived as `payload`
    /// (16-byte aligned) whose items in the payload area have archives of
    /// `external_len` bytes in all, for the writer, which may have archived
    /// it from borrowed items: only an entry near the limit is decoded to be
    /// measured.
    pub(crate) fn check_archived_line_len(
        payload: &[u8],
        external_len: usize,
        external: &mut MeasureItem<'_>,
    ) -> Result<()> {
        let bound = payload
            .len()
            .saturating_add(external_len)
            .saturating_mul(JSON_GROWTH);
        if bound.saturating_add(LINE_PREFIX_BYTES) <= MAX_LINE_BYTES {
            return Ok(());
        }
        LogEntry::from_archive(payload)
            .map_err(|e| Error::invalid(format!("cannot read back the archived entry: {e}")))?
            .check_line_len_with(payload.len(), external)
    }

    /// The length of the archives of the entry's items kept in the payload
    /// area, in all.
    pub(crate) fn external_len(&self) -> usize {
        self.payload_refs()
            .iter()
            .fold(0, |n, r| n.saturating_add(r.len as usize))
    }
}
