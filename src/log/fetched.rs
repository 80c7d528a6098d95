//! A log's view of its evicted prefix changing under it: segments evicted
//! to an archive dropped from the view, and segments fetched back taken
//! into it. Above `opening` and `recovery`, which it uses; `evicted.rs`
//! (the record) sits below both.

use std::sync::Arc;

use super::opening::{continues, evicted_below, open_sealed};
use crate::chain::EntryHash;
use crate::error::Result;
use crate::segment::Segment;

#[cfg_attr(not(feature = "archive"), allow(dead_code))]
impl super::Log {
    /// Drops the segments below `next_seq` from this log's view, after
    /// their files were evicted (the record lists them, and `last_hash` is
    /// the hash of the record before `next_seq`): what the log's next open
    /// would see. The active segment is never among them.
    pub(crate) fn forget_evicted(&self, next_seq: u64, last_hash: EntryHash) {
        let keep = |s: &&Arc<Segment>| s.header.first_seq >= next_seq;
        let mut w = self.inner.writer.as_ref().map(|w| w.lock());
        let mut p = self.inner.published.lock();
        assert!(
            p.segments.last().is_some_and(|s| keep(&s)),
            "eviction never takes the active segment"
        );
        if let Some(w) = w.as_mut() {
            w.segments = w.segments.iter().filter(keep).cloned().collect();
        }
        p.segments = Arc::new(p.segments.iter().filter(keep).cloned().collect());
        p.evicted = Some((next_seq, last_hash));
    }

    /// Takes the segment files a fetch-back placed below this log's first
    /// segment into its view, after opening each by its footer and checking
    /// that they continue (what is still evicted below them, per the
    /// record) and that the first segment continues them.
    pub(crate) fn adopt_fetched(&self) -> Result<()> {
        let inner = &*self.inner;
        let mut w = inner.writer.as_ref().map(|w| w.lock());
        let mut p = inner.published.lock();
        let first = p
            .segments
            .first()
            .expect("a log always has a segment")
            .clone();
        let listed = super::recovery::list_segments(&inner.dir)?.segments;
        let below: Vec<_> = listed
            .into_iter()
            .filter(|(seq, _)| *seq < first.header.first_seq)
            .collect();
        if below.is_empty() {
            return Ok(());
        }
        let evicted = evicted_below(&below[0])?;
        let prefix = open_sealed(&below, evicted, w.is_some(), &inner.opts.hook)?;
        continues(&first.header, &inner.log_id, prefix.expect)
            .map_err(|kind| first.corrupt(0, None, kind))?;
        let evicted = prefix.evicted;
        let mut segments = prefix.segments;
        segments.extend(p.segments.iter().cloned());
        if let Some(w) = w.as_mut() {
            let mut all = segments[..below.len()].to_vec();
            all.extend(w.segments.iter().cloned());
            w.segments = all;
        }
        p.segments = Arc::new(segments);
        p.evicted = evicted;
        Ok(())
    }
}
