//! The property both targets that read provider items check.

use serde_json::Value;
use session_store::{Form, Item};

/// Reads `line` as a Responses item and as a Messages API message: reading
/// never panics, what is read has a form in its own API, and writing it as
/// stored gives back JSON equal to what was read.
pub fn provider_forms(line: &str) {
    let given: Option<Value> = serde_json::from_str(line).ok();
    match Item::from_responses_json(line) {
        Ok(item) => {
            let out = item
                .to_responses_json(Form::AsStored)
                .expect("a Responses item has a Responses form");
            let back: Value = serde_json::from_str(&out).expect("the writer writes JSON");
            if let Some(given) = &given {
                assert_eq!(&back, given, "an item comes back as given");
            }
            let again = Item::from_responses_json(&out).expect("our own item reads");
            assert_eq!(again.to_responses_json(Form::AsStored).unwrap(), out);
            item.to_responses_json(Form::Resend)
                .expect("the re-send form writes what the stored one does");
        }
        // Only what a wire line cannot hold is refused: no JSON, a number
        // out of range, nesting past the limit.
        Err(_) => assert!(given.is_none() || line.len() > 100 || line.contains('e') || line.contains('E')),
    }
    if let Ok(items) = Item::from_anthropic_message(line) {
        let out = Item::to_anthropic_messages(&items).expect("a message has a Messages form");
        assert_eq!(out.len(), 1, "one message in, one out");
        let back: Value = serde_json::from_str(&out[0]).expect("the writer writes JSON");
        if let Some(given) = &given {
            assert_eq!(&back, given, "a message comes back as given");
        }
        let again = Item::from_anthropic_message(&out[0]).expect("our own message reads");
        assert_eq!(Item::to_anthropic_messages(&again).unwrap(), out);
    }
}
