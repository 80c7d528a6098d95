//! Which lines of a Claude Code session file are its conversation: the path
//! from the last leaf, and what belongs to it off the path (see
//! [`follow`]); and the title its `summary` lines give it.

use std::collections::{HashMap, HashSet};

use super::transcript::{tool_result_ids, Body, ChainLine};

/// The lines of the conversation, in file order: the path from the last
/// leaf back to the root, as Claude Code's resume takes it, and the lines
/// that belong to that path without being on it.
///
/// The leaf is the last chained line of the file, among those of `session`
/// when any line names it (a line another session wrote into this file is
/// never the leaf). The walk follows `parentUuid`; at a compact boundary,
/// whose parent is null, it goes on through `logicalParentUuid`, so the
/// history before the compaction is on the path too, and when that names
/// no line of the file, through the line just before the boundary. A cycle
/// or a parent that is not in the file ends the walk. A file whose lines
/// name no parent at all is read in file order.
///
/// Off the path but kept ([`with_siblings`]): the other lines of a response
/// on the path (one line per block, chained one after the other or side
/// by side), and the results of its tool calls, which parallel calls write
/// as siblings of one another.
pub(super) fn follow<'a>(lines: &'a [ChainLine], session: Option<&str>) -> Vec<&'a ChainLine> {
    if lines.len() > 1 && lines.iter().all(|l| l.parent.is_none()) {
        return lines.iter().collect();
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(uuid) = &l.uuid {
            index.entry(uuid.as_str()).or_insert(i);
        }
    }
    let own = session.filter(|s| lines.iter().any(|l| l.session_id.as_deref() == Some(*s)));
    let leaf = lines
        .iter()
        .rposition(|l| own.is_none() || l.session_id.as_deref() == own);
    let mut on_path = vec![false; lines.len()];
    let mut next = leaf;
    while let Some(i) = next {
        if on_path[i] {
            break;
        }
        on_path[i] = true;
        let l = &lines[i];
        next = match (&l.parent, &l.body) {
            (Some(p), _) => index.get(p.as_str()).copied(),
            (None, Body::CompactBoundary) => match &l.logical_parent {
                Some(p) if index.contains_key(p.as_str()) => index.get(p.as_str()).copied(),
                // The history before the compaction is still this
                // session's: it goes on from the line before the boundary.
                _ => i.checked_sub(1),
            },
            (None, _) => None,
        };
    }
    with_siblings(lines, &mut on_path);
    lines
        .iter()
        .zip(on_path)
        .filter_map(|(l, kept)| kept.then_some(l))
        .collect()
}

/// Marks, beside the path, the other lines of the responses on it and the
/// results of their tool calls that the path lacks, until nothing more
/// belongs (a response found this way may call tools of its own).
fn with_siblings(lines: &[ChainLine], kept: &mut [bool]) {
    loop {
        let responses: HashSet<&str> = lines
            .iter()
            .zip(kept.iter())
            .filter(|(_, k)| **k)
            .filter_map(|(l, _)| match &l.body {
                Body::Assistant { message_id, .. } => message_id.as_deref(),
                _ => None,
            })
            .collect();
        let mut calls: HashSet<String> = HashSet::new();
        let mut answered: HashSet<String> = HashSet::new();
        let mut grew = false;
        for (l, k) in lines.iter().zip(kept.iter_mut()) {
            let sibling = match &l.body {
                Body::Assistant { message_id, .. } => message_id
                    .as_deref()
                    .is_some_and(|id| responses.contains(id)),
                _ => false,
            };
            if sibling && !*k {
                *k = true;
                grew = true;
            }
            if *k {
                calls.extend(l.body.tool_use_ids());
                if let Body::User { content, .. } = &l.body {
                    answered.extend(tool_result_ids(content).unwrap_or_default());
                }
            }
        }
        for (l, k) in lines.iter().zip(kept.iter_mut()) {
            let Body::User { content, .. } = &l.body else {
                continue;
            };
            let Some(ids) = tool_result_ids(content) else {
                continue;
            };
            if !*k
                && ids
                    .iter()
                    .any(|id| calls.contains(id) && !answered.contains(id))
            {
                answered.extend(ids);
                *k = true;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    // Lines with no history that hang off a kept line (the progress of a
    // tool call, an attachment), or off such a line, belong with it; a
    // parent comes before its children in the file.
    let mut uuids: HashSet<&str> = lines
        .iter()
        .zip(kept.iter())
        .filter(|(_, k)| **k)
        .filter_map(|(l, _)| l.uuid.as_deref())
        .collect();
    for (l, k) in lines.iter().zip(kept.iter_mut()) {
        if !*k
            && matches!(l.body, Body::Link(_))
            && l.parent.as_deref().is_some_and(|p| uuids.contains(p))
        {
            *k = true;
            uuids.extend(l.uuid.as_deref());
        }
    }
}

/// The title the file's `summary` lines give the conversation: the last
/// one whose leaf is on `path`, or the last one of all.
pub(super) fn title(path: &[&ChainLine], summaries: &[(String, String)]) -> Option<String> {
    let on_path: HashSet<&str> = path.iter().filter_map(|l| l.uuid.as_deref()).collect();
    summaries
        .iter()
        .rev()
        .find(|(leaf, _)| on_path.contains(leaf.as_str()))
        .or(summaries.last())
        .map(|(_, summary)| crate::catalog::excerpt(summary))
}
