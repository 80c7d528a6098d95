//! The property both targets that read provider items check.

use session_store::Item;

/// Reads `line` as a Responses item and as a Messages API message: reading
/// never panics, what is read has a form in its own API, and writing what that
/// reads gives the same text again.
pub fn provider_forms(line: &str) {
    if let Ok(item) = Item::from_responses_json(line) {
        let out = item
            .to_responses_json()
            .expect("a Responses item has a Responses form");
        let again = Item::from_responses_json(&out).expect("our own item reads");
        assert_eq!(again.to_responses_json().unwrap(), out);
    }
    if let Ok(items) = Item::from_anthropic_message(line) {
        let out = Item::to_anthropic_messages(&items).expect("a message has a Messages form");
        assert_eq!(out.len(), 1, "one message in, one out");
        let again = Item::from_anthropic_message(&out[0]).expect("our own message reads");
        assert_eq!(Item::to_anthropic_messages(&again).unwrap(), out);
    }
}
