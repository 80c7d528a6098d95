//! Large payloads stored once (issue 18, item 3): one session compacted 50
//! times, each compaction keeping the last 20 items of the history, with a
//! 64 KiB tool output in every turn, through the public `Store` API with
//! default options. Reported: the bytes the whole store takes on disk
//! (allocated blocks, `st_blocks * 512`, of every file and directory under
//! the root) against the bytes of its unique content (the text of every
//! distinct item, once), and the restore time of the compacted session;
//! both with the payload area (the default threshold, 32 KiB) and without it
//! (`payload_threshold(usize::MAX)`, every item in its record: the store
//! before this change), in the same run.

use session_store::{Item, RequestConfig, Store, StoreOptions, ToolOutput};

use crate::{medians, target, time, Op};

const COMPACTIONS: usize = 50;
const KEEP: usize = 20;
const OUTPUT_BYTES: usize = 64 << 10;

/// One turn: a question, a tool call, its 64 KiB output, an answer.
fn turn(n: usize) -> Vec<Item> {
    let fill = (0..OUTPUT_BYTES)
        .map(|i| char::from(b'a' + ((i * 7 + n * 13) % 26) as u8))
        .collect::<String>();
    vec![
        Item::user_text(format!("question {n}: what does file {n} say?")),
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: format!("call_{n:04}"),
            name: "read_file".into(),
            arguments: format!(r#"{{"path":"src/file_{n}.rs"}}"#),
            status: None,
        },
        Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id: format!("call_{n:04}"),
            output: Some(ToolOutput::Text(fill)),
            is_error: None,
            custom: false,
            status: None,
        },
        Item::assistant_text(format!("file {n} holds the parser's tables.")),
    ]
}

/// The text bytes of an item (what the store must keep of it at least).
fn text_bytes(item: &Item) -> u64 {
    serde_json::to_string(item).map_or(0, |s| s.len() as u64)
}

/// Builds the session in a fresh store; returns the store's allocated bytes
/// and the seconds one restore takes (median of `reps`).
fn build(threshold: usize, reps: usize) -> (u64, f64) {
    let dir = crate::fresh();
    let opts = StoreOptions::default().payload_threshold(threshold);
    let store = Store::open_with(dir.path(), opts).expect("open");
    let (id, mut head) = store
        .create_session(
            Some("You are a coding agent."),
            RequestConfig::default(),
            &[],
        )
        .expect("create");
    let mut history: Vec<Item> = Vec::new();
    for n in 0..COMPACTIONS {
        let t = turn(n);
        store.save_delta(id, &mut head, &t).expect("save");
        history.extend(t);
        let keep = &history[history.len().saturating_sub(KEEP)..];
        head = store.compact(id, head, keep).expect("compact");
    }
    store.close().expect("close");
    let bytes = crate::forks::disk_bytes(dir.path());
    let store = Store::open_with(
        dir.path(),
        StoreOptions::default().payload_threshold(threshold),
    )
    .expect("reopen");
    let restore = medians(
        reps,
        &[&|| time(|| assert_eq!(store.restore(id).expect("restore").history.len(), KEEP))],
    )[0];
    (bytes, restore)
}

pub fn run(quick: bool, reps: usize) {
    let unique: u64 = (0..COMPACTIONS)
        .flat_map(turn)
        .map(|i| text_bytes(&i))
        .sum();
    let reps = if quick { reps.min(3) } else { reps };
    let (with, restore_with) = build(session_store::store::DEFAULT_PAYLOAD_THRESHOLD, reps);
    let (without, restore_without) = build(usize::MAX, reps);
    let mb = |b: u64| b as f64 / 1e6;
    println!();
    println!(
        "## Payloads: a session compacted {COMPACTIONS} times, each snapshot keeping its last {KEEP} items, a {} KiB tool output a turn",
        OUTPUT_BYTES >> 10
    );
    println!();
    println!("| store | on disk (allocated) | × unique content | restore (median) |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| unique content (JSON of each distinct item, once) | {:.2} MB | 1.00 | |",
        mb(unique)
    );
    println!(
        "| payload area, threshold {} KiB (default) | {:.2} MB | {:.2} | {:.2} ms |",
        session_store::store::DEFAULT_PAYLOAD_THRESHOLD >> 10,
        mb(with),
        with as f64 / unique as f64,
        restore_with * 1e3
    );
    println!(
        "| every item in its record (threshold `usize::MAX`, as before) | {:.2} MB | {:.2} | {:.2} ms |",
        mb(without),
        without as f64 / unique as f64,
        restore_without * 1e3
    );
    println!();
    target(
        "compacted session on disk / unique content",
        Some(with as f64 / unique as f64),
        Op::Below,
        1.2,
        "×",
    );
}
