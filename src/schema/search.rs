//! The texts of an archived entry that a search reads, straight from the
//! mapped archive: message and reasoning text, tool names, arguments and
//! outputs, thinking, opaque items' JSON, system prompts, run results and
//! extension payloads. Opaque provider state (`encrypted_content`,
//! signatures, redacted thinking) and binary data (images, files, audio) are
//! left out: they are not text anyone searches.

use super::item::{ArchivedLoggedItemOf, ItemExtension};
use super::parts::{ArchivedLoggedContentPart, ArchivedLoggedToolOutput};
use super::ArchivedLogEntry;

impl ArchivedLoggedContentPart {
    fn searchable_texts<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        match self {
            ArchivedLoggedContentPart::Text { text } => f(text.as_str()),
            ArchivedLoggedContentPart::Refusal { refusal } => f(refusal.as_str()),
            ArchivedLoggedContentPart::OutputText(p) => f(p.text.as_str()),
            ArchivedLoggedContentPart::Opaque { json } => f(json.as_str()),
            ArchivedLoggedContentPart::InputImage(_)
            | ArchivedLoggedContentPart::InputFile(_)
            | ArchivedLoggedContentPart::InputAudio(_) => {}
        }
    }
}

impl<X: ItemExtension> ArchivedLoggedItemOf<X> {
    /// Calls `f` with each text of the item a search reads, in order.
    ///
    /// Example: [`ArchivedLogEntry::searchable_texts`](crate::schema::ArchivedLogEntry::searchable_texts).
    pub fn searchable_texts<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        use ArchivedLoggedItemOf as ArchivedLoggedItem;
        match self {
            ArchivedLoggedItem::Message { content, .. } => {
                content.iter().for_each(|p| p.searchable_texts(f))
            }
            ArchivedLoggedItem::ToolCall {
                name, arguments, ..
            } => {
                f(name.as_str());
                f(arguments.as_str());
            }
            ArchivedLoggedItem::ToolResult {
                summary, content, ..
            } => {
                f(summary.as_str());
                if let Some(c) = content.as_ref() {
                    f(c.as_str());
                }
            }
            ArchivedLoggedItem::Reasoning { text, summary, .. } => {
                f(text.as_str());
                summary.iter().for_each(|s| f(s.as_str()));
            }
            ArchivedLoggedItem::CustomToolCall { name, input, .. } => {
                f(name.as_str());
                f(input.as_str());
            }
            ArchivedLoggedItem::ToolOutput { output, .. } => match output.as_ref() {
                Some(ArchivedLoggedToolOutput::Text(text)) => f(text.as_str()),
                Some(ArchivedLoggedToolOutput::Parts(parts)) => {
                    parts.iter().for_each(|p| p.searchable_texts(f))
                }
                None => {}
            },
            ArchivedLoggedItem::ReasoningParts {
                summary, content, ..
            } => {
                summary
                    .iter()
                    .chain(content.iter())
                    .for_each(|s| f(s.as_str()));
            }
            ArchivedLoggedItem::Thinking { thinking, .. } => f(thinking.as_str()),
            ArchivedLoggedItem::RedactedThinking { .. } => {}
            ArchivedLoggedItem::Opaque { json, .. } => f(json.as_str()),
            // Its texts are in the store's payload area, not in the record:
            // searched there by the caller that has the area, if at all.
            ArchivedLoggedItem::External(_) => {}
            ArchivedLoggedItem::Extended(x) => {
                if let Some(e) = X::extended(x) {
                    e.item.searchable_texts(f);
                    if let Some(diff) = e.diff.as_ref() {
                        f(diff.as_str());
                    }
                }
            }
        }
    }
}

impl ArchivedLogEntry {
    /// Calls `f` with each text of the entry a search reads, in order: its
    /// items' texts, a `SessionStart`'s system prompt, a run's result text
    /// or error, an extension's payload, a config's model and extra JSON.
    ///
    /// ```
    /// use session_store::{Item, RequestConfig, Store};
    /// # fn main() -> session_store::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path())?;
    /// let (id, mut head) = store.create_session(None, RequestConfig::model("gpt-5"), &[])?;
    /// store.save_delta(id, &mut head, &[Item::user_text("Why did CI fail?"), Item::assistant_text("A timeout in test_upload.")])?;
    ///
    /// // Which records mention a timeout?
    /// let mut hits = Vec::new();
    /// for record in store.snapshot(id)?.iter() {
    ///     let record = record?;
    ///     record.entry().searchable_texts(&mut |text| if text.contains("timeout") { hits.push(record.seq) });
    /// }
    /// assert_eq!(hits, [2]);
    /// # Ok(()) }
    /// ```
    pub fn searchable_texts<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        match self {
            ArchivedLogEntry::SessionStart { system_prompt, .. } => {
                if let Some(p) = system_prompt.as_ref() {
                    f(p.as_str());
                }
            }
            ArchivedLogEntry::RunCompleted { result, .. } => {
                if let Some(t) = result.text.as_ref() {
                    f(t.as_str());
                }
            }
            ArchivedLogEntry::RunErrored { message, .. } => f(message.as_str()),
            ArchivedLogEntry::Extension { payload, .. } => f(payload.as_str()),
            ArchivedLogEntry::ConfigChanged { config, .. } => {
                if let Some(m) = config.model.as_ref() {
                    f(m.as_str());
                }
                if let Some(e) = config.extra.as_ref() {
                    f(e.as_str());
                }
            }
            _ => {}
        }
        for item in self.items() {
            item.searchable_texts(f);
        }
    }
}
