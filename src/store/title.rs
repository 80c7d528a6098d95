//! A session's title: the text it is taken from (the first user message
//! with some), and where a reader of an empty catalog finds it (the log's
//! first records, or a fork's ancestors).

use std::collections::HashSet;
use std::path::Path;

use super::forks::MAX_FORK_DEPTH;
use crate::catalog::{self, CATALOG_FILE};
use crate::error::Result;
use crate::item::Item;
use crate::log::Log;
use crate::payload::RETIRED_DIR;
use crate::schema::{LoggedCoreItem, LoggedItem, LoggedItemOf, LoggedRole, SessionId};

/// [`user_item_text`] of a logged item.
pub(super) fn user_text(item: &LoggedItem) -> Option<String> {
    let user = |item: &LoggedCoreItem| {
        matches!(
            item,
            LoggedItemOf::Message {
                role: LoggedRole::User,
                ..
            }
        )
    };
    match item {
        LoggedItem::Message {
            role: LoggedRole::User,
            ..
        } => user_item_text(&item.clone().into_item()),
        LoggedItem::Extended(e) if user(&e.item) => user_item_text(&item.clone().into_item()),
        _ => None,
    }
}

/// The text of a user message that has some, as the title takes it.
pub(super) fn user_item_text(item: &Item) -> Option<String> {
    if !item.is_user_message() {
        return None;
    }
    let t = item.text()?;
    (!t.trim().is_empty()).then_some(t)
}

/// The title of a session whose catalog file is empty
/// (`catalog::create_empty`), and whether it is the session's own (it is no
/// fork by reference: see `SessionCatalog::adopt`). Reads only.
///
/// A session that is no fork has the first user text in its log's first
/// [`catalog::TITLE_SCAN_RECORDS`] records (a later one is in the file). A
/// fork by reference inherits the title of the nearest ancestor whose
/// catalog holds slots, in `sessions/` or in `retired/` under `root`, or
/// what the log of the first ancestor that is no fork holds. `None` when a
/// link of the chain cannot be read, or the chain loops or is longer than
/// [`MAX_FORK_DEPTH`].
///
/// The flag is false also when the session's own first records do not
/// read: a title could be there, so a later one must not be left to them.
pub(crate) fn empty_catalog_title(root: &Path, log: &Log) -> (Option<String>, bool) {
    match log.snapshot().fork_link() {
        Ok(None) => match logged_title(log) {
            Ok(title) => (title, true),
            Err(_) => (None, false),
        },
        Ok(Some(link)) => (inherited_title(root, link.parent), false),
        Err(_) => (None, false),
    }
}

/// The title a fork by reference of `parent` inherits (see
/// [`empty_catalog_title`]).
fn inherited_title(root: &Path, mut parent: SessionId) -> Option<String> {
    let mut seen = HashSet::new();
    for _ in 0..MAX_FORK_DEPTH {
        if !seen.insert(parent) {
            return None;
        }
        let dir = [
            root.join("sessions").join(parent.to_string()),
            root.join(RETIRED_DIR).join(parent.to_string()),
        ]
        .into_iter()
        .find(|d| d.join(CATALOG_FILE).exists())?;
        let record = catalog::read(&dir.join(CATALOG_FILE)).ok()?;
        if !record.empty {
            return record.title;
        }
        let log = Log::open_read_only(&dir).ok()?;
        match log.snapshot().fork_link().ok()? {
            Some(link) => parent = link.parent,
            None => return logged_title(&log).ok().flatten(),
        }
    }
    None
}

/// The first user text in the first [`catalog::TITLE_SCAN_RECORDS`] records
/// of `log`, as a title: what the session's first saves made its title.
/// An error when one of those records does not read (or was evicted).
fn logged_title(log: &Log) -> Result<Option<String>> {
    let snap = log.snapshot();
    for entry in snap.entries_from(0) {
        let (seq, _, entry) = entry?;
        if seq >= catalog::TITLE_SCAN_RECORDS {
            break;
        }
        if let Some(text) = entry.items().iter().find_map(user_text) {
            return Ok(Some(catalog::excerpt(&text)));
        }
    }
    Ok(None)
}
