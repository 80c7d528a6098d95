//! Writes the seed corpora of the fuzz targets into `fuzz/corpus/`: a small
//! real log's segment files, exported wire lines, and an agy transcript.
//!
//! `cargo run --example fuzz_seeds`

use std::fs;
use std::path::Path;

use session_store::schema::now_ms;
use session_store::{Item, Log, LogEntry, LogOptions, RequestConfig, Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let tmp = tempfile::tempdir()?;
    let store = Store::open_with(
        tmp.path(),
        StoreOptions::default().log(LogOptions::default().segment_size(8192)),
    )?;
    let (id, mut head) = store.create_session(Some("sys"), RequestConfig::model("m"), &[])?;
    for t in 0..6 {
        store.save_delta(
            id,
            &mut head,
            &[
                Item::user_text(format!("question {t}")),
                Item::Reasoning {
                    extra: Default::default(),
                    id: None,
                    text: String::new(),
                    summary: vec!["thinking".into()],
                    encrypted_content: Some("gAAAA".repeat(40)),
                    status: None,
                },
                Item::ToolCall {
                    extra: Default::default(),
                    id: None,
                    call_id: format!("c{t}"),
                    name: "shell".into(),
                    arguments: r#"{"cmd":"ls"}"#.into(),
                    status: None,
                },
                Item::ToolResult {
                    extra: Default::default(),
                    id: None,
                    call_id: format!("c{t}"),
                    summary: "ok".into(),
                    content: Some("x".repeat(700)),
                },
                Item::assistant_text("done"),
            ],
        )?;
    }
    let end = LogEntry::TurnEnd {
        ts: now_ms(),
        turn_count: 6,
    };
    store.save_entries(id, &mut head, &[end])?;
    store.close()?;
    let log = Log::open_read_only(store.session_dir(id))?;
    let segs = log.segment_paths();

    let dir = corpus.join("open_log");
    fs::create_dir_all(&dir)?;
    for n in 1..=3usize.min(segs.len()) {
        let mut bytes = vec![(n - 1) as u8];
        for p in &segs[..n] {
            bytes.extend(fs::read(p)?);
        }
        fs::write(dir.join(format!("log-{n}-segments")), bytes)?;
    }

    // A roll that never settled: Buffered appends into a second segment, and
    // no sync or close, so the last segment has no mark and recovery checks
    // the one before it.
    let raw = tmp.path().join("unsettled");
    let opts = LogOptions {
        prepare_ahead: false,
        ..LogOptions::default().segment_size(8192)
    };
    let unsettled = Log::open(&raw, opts)?;
    for i in 0u64.. {
        let text = format!("{i}:{}", "u".repeat(600));
        unsettled.append(&session_store::LogEntry::UserInput {
            ts: i,
            item: session_store::schema::LoggedItem::from(Item::user_text(text)),
        })?;
        if unsettled.segment_paths().len() == 2 && i % 3 == 0 {
            break;
        }
    }
    let mut bytes = vec![1u8];
    for p in unsettled.segment_paths() {
        bytes.extend(fs::read(p)?);
    }
    drop(unsettled);
    fs::write(dir.join("unsettled-roll-2-segments"), bytes)?;

    let dir = corpus.join("decode_record");
    fs::create_dir_all(&dir)?;
    let first = fs::read(&segs[0])?;
    fs::write(dir.join("segment-header"), &first[..256])?;
    fs::write(dir.join("first-records"), &first[256..2048])?;
    fs::write(dir.join("footer"), &first[first.len() - 128..])?;
    let snap = log.snapshot();
    for (i, rec) in snap.iter().take(4).enumerate() {
        let entry = rec?.entry().to_entry();
        fs::write(
            dir.join(format!("archive-{i}")),
            entry.to_archive().as_slice(),
        )?;
    }

    let dir = corpus.join("import_jsonl");
    fs::create_dir_all(&dir)?;
    fs::write(dir.join("exported-session"), wire_lines(&log)?)?;
    // The item fixtures of both APIs, as they are (for the provider readers)
    // and through a session's wire form (for the schema 2 kinds).
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/items");
    let responses = fs::read_to_string(fixtures.join("responses.jsonl"))?;
    let anthropic = fs::read_to_string(fixtures.join("anthropic.jsonl"))?;
    for dir in [dir.clone(), corpus.join("provider_items")] {
        fs::create_dir_all(&dir)?;
        fs::write(dir.join("responses-items"), &responses)?;
        fs::write(dir.join("anthropic-messages"), &anthropic)?;
    }
    let mut items = Vec::new();
    for line in responses.lines() {
        items.push(Item::from_responses_json(line)?);
    }
    for line in anthropic.lines() {
        items.extend(Item::from_anthropic_message(line)?);
    }
    let items_store = Store::open(tmp.path().join("items"))?;
    let (items_id, mut head) = items_store.create_session(None, RequestConfig::default(), &[])?;
    items_store.save_delta(items_id, &mut head, &items)?;
    items_store.close()?;
    let items_log = Log::open_read_only(items_store.session_dir(items_id))?;
    fs::write(dir.join("exported-provider-items"), wire_lines(&items_log)?)?;
    for (i, rec) in items_log.snapshot().iter().take(8).enumerate() {
        fs::write(
            corpus.join(format!("decode_record/archive-schema2-{i}")),
            rec?.entry().to_entry().to_archive().as_slice(),
        )?;
    }

    let dir = corpus.join("agy_transcript");
    fs::create_dir_all(&dir)?;
    let transcript = [
        r#"{"step_index":0,"source":"USER_EXPLICIT","type":"USER_INPUT","status":"DONE","created_at":"2026-01-01T00:00:00Z","content":"list the files"}"#,
        r#"{"step_index":1,"source":"MODEL","type":"PLANNER_RESPONSE","status":"DONE","content":[{"text":"Looking."}],"tool_calls":[{"name":"default_api:list_dir","args":{"path":"\"/tmp\""}},{"name":"run_command","args":{"cmd":"\"ls -l\""}}]}"#,
        r#"{"step_index":3,"source":"MODEL","type":"RUN_COMMAND","status":"ERROR","content":"boom","exit_code":2}"#,
        r#"{"step_index":2,"source":"MODEL","type":"LIST_DIRECTORY","status":"DONE","content":"a b c"}"#,
        r#"{"step_index":4,"source":"SYSTEM","type":"GENERIC","status":"DONE","content":"internal"}"#,
        r#"{"step_index":5,"source":"MODEL","type":"PLANNER_RESPONSE","status":"DONE","content":"All done."}"#,
    ];
    fs::write(dir.join("transcript"), transcript.join("\n"))?;

    // The Claude Code and Codex readers' seeds are their test fixtures.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (from, target) in [("claude", "claude_transcript"), ("codex", "codex_rollout")] {
        let dir = corpus.join(target);
        fs::create_dir_all(&dir)?;
        for entry in fs::read_dir(fixtures.join(from))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                if let Some(name) = path.file_name() {
                    fs::copy(&path, dir.join(name))?;
                }
            }
        }
    }
    println!("seed corpora written under {}", corpus.display());
    Ok(())
}

/// A log's records as wire lines, one per line.
fn wire_lines(log: &Log) -> Result<String, Box<dyn std::error::Error>> {
    let mut lines = String::new();
    for rec in log.snapshot().iter() {
        let rec = rec?;
        let prev = (rec.seq > 0).then_some(&rec.prev_hash);
        lines.push_str(&session_store::wire::entry_line(
            rec.seq,
            &rec.hash,
            prev,
            &rec.entry().to_entry(),
        ));
        lines.push('\n');
    }
    Ok(lines)
}
