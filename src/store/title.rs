//! The text a session's title is taken from: the first user message with
//! some.

use crate::item::Item;
use crate::schema::{LoggedCoreItem, LoggedItem, LoggedItemOf, LoggedRole};

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
