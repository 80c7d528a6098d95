//! Guards the transcript readers against losing real content, on real
//! transcripts that Claude Code and the Codex CLI wrote themselves (kept by
//! other projects as test fixtures; see `tests/fixtures/transcripts/
//! SOURCES.md`): every tool call, result and thinking block of the
//! conversation is imported, and every call has its result in the exported
//! history, but for the calls the file itself ends without answering.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use session_store::history::claude::ClaudeSession;
use session_store::history::codex::read_rollout;
use session_store::{
    history::HistoryImport, history::ItemCounts, responses, CallLink, Form, Item, Store,
};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/transcripts")
}

fn expected() -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(dir().join("counts.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every item an import writes, each segment's carried history included.
fn all_items(import: &HistoryImport) -> Vec<&Item> {
    import
        .items
        .iter()
        .chain(
            import
                .compactions
                .iter()
                .flat_map(|c| c.history.iter().chain(&c.items)),
        )
        .collect()
}

/// The calls of `items` that no item answers, by call id.
fn unanswered(items: &[&Item]) -> Vec<String> {
    let answered: HashSet<String> = items
        .iter()
        .filter_map(|i| match i.call_link() {
            Some(CallLink::Output(id)) => Some(id),
            _ => None,
        })
        .collect();
    let mut out: Vec<String> = items
        .iter()
        .filter_map(|i| match i.call_link() {
            Some(CallLink::Call(id)) if !answered.contains(&id) => Some(id),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn n(v: &Value) -> usize {
    v.as_u64().unwrap_or(0) as usize
}

fn ids(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Imports `import` into a fresh store, twice: the store holds what the
/// transcript does, and the second import writes nothing.
fn check_store(name: &str, import: &HistoryImport) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let first = import.write_once_to(&store).unwrap();
    assert!(first.created, "{name}");
    assert_eq!(
        HistoryImport::stored_counts(&store, first.session).unwrap(),
        import.counts(),
        "{name}"
    );
    let again = import.write_once_to(&store).unwrap();
    assert_eq!(
        (again.session, again.created),
        (first.session, false),
        "{name}"
    );
    let info = store.info(first.session).unwrap().unwrap();
    if import.title.is_some() {
        assert_eq!(info.title, import.title, "{name}");
    }
}

#[test]
fn every_call_result_and_thinking_block_of_real_claude_code_transcripts_is_imported() {
    let mut checked = 0;
    for (name, want) in expected() {
        let Some(file) = name.strip_prefix("claude/") else {
            continue;
        };
        let session = ClaudeSession::read_with_subagents(&dir().join(&name)).unwrap();
        let main_calls = n(&want["tool_calls"]);
        if main_calls == 0 && n(&want["user_prompts"]) == 0 {
            // A subagent's own file: its lines are all sidechain.
            let side: ItemCounts = session
                .sidechains
                .values()
                .map(|t| ItemCounts::of(t.items().map(|i| &i.item)))
                .fold(ItemCounts::default(), |a, b| ItemCounts {
                    tool_calls: a.tool_calls + b.tool_calls,
                    tool_results: a.tool_results + b.tool_results,
                    ..a
                });
            assert_eq!(
                side.tool_calls,
                n(&want["sidechain"]["tool_calls"]),
                "{file}"
            );
            assert_eq!(
                side.tool_results,
                n(&want["sidechain"]["tool_results"]),
                "{file}"
            );
            continue;
        }
        let import = session_store::history::claude::import_of(&session.main, None);
        let items = all_items(&import);
        let c = ItemCounts::of(items.iter().copied());
        assert_eq!(c.tool_calls, main_calls, "{file}: {c}");
        assert_eq!(c.tool_results, n(&want["tool_results"]), "{file}: {c}");
        assert_eq!(c.reasoning, n(&want["thinking_blocks"]), "{file}: {c}");
        // Every call has its result, but those the file ends without.
        assert_eq!(
            unanswered(&items),
            ids(&want["tool_calls_without_result"]),
            "{file}"
        );
        // Nothing of the conversation is left out.
        assert!(
            session.main.stats.left_out.is_empty(),
            "{file}: {:?}",
            session.main.stats
        );
        // Typed, whatever fields the version added (`caller`).
        assert!(
            items.iter().all(|i| !matches!(i, Item::Opaque { json, .. } if json.as_str().contains(r#""type":"tool_use""#))),
            "{file}"
        );
        // The Messages history is valid to send: every segment writes.
        Item::to_anthropic_messages(&import.items).unwrap();
        for compaction in &import.compactions {
            let segment: Vec<Item> = compaction
                .history
                .iter()
                .chain(&compaction.items)
                .cloned()
                .collect();
            Item::to_anthropic_messages(&segment).unwrap();
        }
        // Times come from the transcript.
        assert!(import.meta.iter().any(|m| m.ts_ms.is_some()), "{file}");
        check_store(file, &import);
        checked += 1;
    }
    assert!(checked >= 12, "{checked} transcripts checked");
}

#[test]
fn the_compaction_whose_logical_parent_is_missing_keeps_the_history_before_it() {
    let name = "claude/claude-2.1.39-spotter-compaction-missing-logical-parent.jsonl";
    let session = ClaudeSession::read(&dir().join(name)).unwrap();
    let import = session_store::history::claude::import_of(&session.main, None);
    assert_eq!(import.compactions.len(), 1);
    // The first prompt is before the compaction, and is kept.
    assert!(import.items.first().is_some_and(Item::is_user_message));
    assert!(import.items.len() > 100, "{}", import.items.len());
    assert!(import
        .title
        .as_deref()
        .unwrap()
        .starts_with("Work on bead spotter-dov"));
}

#[test]
fn every_call_of_a_real_codex_rollout_is_imported_and_its_responses_history_is_valid() {
    let mut checked = 0;
    for (name, want) in expected() {
        if !name.starts_with("codex/") {
            continue;
        }
        let t = read_rollout(&dir().join(&name)).unwrap();
        let import = session_store::history::codex::import_of(&t);
        let items = all_items(&import);
        let c = ItemCounts::of(items.iter().copied());
        assert_eq!(c.tool_calls, n(&want["tool_calls"]), "{name}: {c}");
        assert_eq!(c.tool_results, n(&want["tool_outputs"]), "{name}: {c}");
        assert_eq!(c.reasoning, n(&want["reasoning_items"]), "{name}: {c}");
        assert_eq!(
            unanswered(&items),
            ids(&want["calls_without_output"]),
            "{name}"
        );
        let owned: Vec<Item> = items.iter().map(|i| (*i).clone()).collect();
        responses::history_to_json(&owned, Form::Resend).unwrap();
        // The title is the user's prompt, not the environment context.
        assert!(
            !import.title.as_deref().unwrap_or("<").starts_with('<'),
            "{name}"
        );
        assert!(import.meta.iter().any(|m| m.model.is_some()), "{name}");
        check_store(&name, &import);
        checked += 1;
    }
    assert!(checked >= 1);
}
