//! Reading an archived item in place: its payload reference, its runtime
//! item, its message text, and the check of the JSON texts it holds.

use super::item::{
    ArchivedLoggedCoreItem, ArchivedLoggedItem, ArchivedLoggedItemOf, ItemExtension,
    LoggedCoreItem, LoggedItem, LoggedPayloadRef,
};
use super::parts::{ArchivedLoggedContentPart, ArchivedLoggedToolOutput};
use crate::item::Item;

impl std::fmt::Debug for ArchivedLoggedItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_item().fmt(f)
    }
}

impl std::fmt::Debug for ArchivedLoggedCoreItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Deserializing validated archived data into owned types has no failure path.
        rkyv::deserialize::<LoggedCoreItem, rkyv::rancor::Error>(self)
            .expect("deserializing a validated archive cannot fail")
            .into_item()
            .fmt(f)
    }
}

impl ArchivedLoggedItem {
    /// The payload this item refers to, if it is stored in the payload area.
    ///
    /// Example: [the `payload` module](crate::payload#example).
    pub fn payload_ref(&self) -> Option<LoggedPayloadRef> {
        match self {
            ArchivedLoggedItem::External(r) => Some(r.get().to_ref()),
            _ => None,
        }
    }

    /// The runtime item, from the archived bytes.
    ///
    /// Example: [`Snapshot::iter`](crate::Snapshot::iter).
    pub fn to_item(&self) -> Item {
        // Deserializing validated archived data into owned types has no failure path.
        rkyv::deserialize::<LoggedItem, rkyv::rancor::Error>(self)
            .expect("deserializing a validated archive cannot fail")
            .into_item()
    }
}

impl<X: ItemExtension> ArchivedLoggedItemOf<X> {
    /// The concatenated text of a message, borrowed parts joined.
    ///
    /// Example: [`Snapshot::iter`](crate::Snapshot::iter).
    pub fn message_text(&self) -> Option<String> {
        match self {
            ArchivedLoggedItemOf::Message { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|p| match p {
                        ArchivedLoggedContentPart::Text { text } => Some(text.as_str()),
                        ArchivedLoggedContentPart::OutputText(p) => Some(p.text.as_str()),
                        _ => None,
                    })
                    .collect(),
            ),
            ArchivedLoggedItemOf::Extended(x) => X::extended(x)?.item.message_text(),
            _ => None,
        }
    }

    /// Hands `check` every JSON text the archived item holds, in order, up
    /// to its first failure: they must be valid JSON so that what is read
    /// can be exported. (A read checks every item it reads, so this
    /// allocates nothing.)
    pub(crate) fn check_json_texts<E>(
        &self,
        mut check: impl FnMut(&str) -> Result<(), E>,
    ) -> Result<(), E> {
        use ArchivedLoggedItemOf as ArchivedLoggedItem;
        let parts = match self {
            ArchivedLoggedItem::Extended(x) => {
                let Some(e) = X::extended(x) else {
                    return Ok(());
                };
                if let Some(diff) = e.diff.as_ref() {
                    check(diff.as_str())?;
                }
                return e.item.check_json_texts(check);
            }
            ArchivedLoggedItem::Message { content, .. } => content.as_slice(),
            ArchivedLoggedItem::ToolOutput { output, .. } => match output.as_ref() {
                Some(ArchivedLoggedToolOutput::Parts(parts)) => parts.as_slice(),
                _ => &[],
            },
            ArchivedLoggedItem::Opaque { json, .. } => return check(json.as_str()),
            _ => &[],
        };
        for part in parts {
            match part {
                ArchivedLoggedContentPart::OutputText(p) => {
                    for json in p
                        .annotations
                        .as_ref()
                        .into_iter()
                        .chain(p.logprobs.as_ref())
                    {
                        check(json.as_str())?;
                    }
                }
                ArchivedLoggedContentPart::Opaque { json } => check(json.as_str())?,
                _ => {}
            }
        }
        Ok(())
    }
}
