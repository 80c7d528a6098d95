//! The reads behind the Agents SDK's `get_items`: the last `limit` items of
//! a session written one item per append (10,000 appends, the Python
//! bench's item mix), through `Store::history_tail`, and the Responses JSON
//! the Python package hands to `json.loads`; with the session open in the
//! store, as the Python package keeps it, and not open.
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use session_store::responses;
use session_store::{Item, RequestConfig, Store};

/// The Python bench's turn: user, reasoning, call, output, assistant.
fn item(i: usize) -> Item {
    let json = match i % 5 {
        0 => format!(r#"{{"role":"user","content":"question {i}: what is in src/?"}}"#),
        1 => format!(
            r#"{{"type":"reasoning","summary":[{{"type":"summary_text","text":"look at the tree {i}"}}],"encrypted_content":"gAAAAB{}"}}"#,
            "Zm9v".repeat(100)
        ),
        2 => format!(
            r#"{{"type":"function_call","call_id":"call_{i}","name":"shell","arguments":"{{\"cmd\": \"ls src\"}}"}}"#
        ),
        3 => format!(
            r#"{{"type":"function_call_output","call_id":"call_{}","output":"{}"}}"#,
            i - 1,
            "lib.rs\\n".repeat(20)
        ),
        _ => format!(
            r#"{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"src/ holds the crate ({i}).","annotations":[]}}]}}"#
        ),
    };
    Item::from_responses_json(&json).expect("item")
}

fn tail(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[])
        .expect("create");
    for i in 0..10_000 {
        head = store.append(id, head, &[item(i)]).expect("append");
    }
    let mut g = c.benchmark_group("history_tail_10k_appends");
    g.measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);
    for limit in [Some(10), None] {
        let name = limit.map_or("all".to_string(), |l| l.to_string());
        g.bench_with_input(BenchmarkId::new("items", &name), &limit, |b, &limit| {
            b.iter(|| store.history_tail(id, limit).expect("tail"))
        });
        g.bench_with_input(BenchmarkId::new("json", &name), &limit, |b, &limit| {
            b.iter(|| {
                let tail = store.history_tail(id, limit).expect("tail");
                responses::history_to_json(&tail.items, session_store::Form::AsStored)
                    .expect("json")
            })
        });
    }
    g.bench_function("restore", |b| {
        b.iter(|| store.restore(id).expect("restore"))
    });
    // Not open in this store: each read opens the log read-only.
    store.close().expect("close");
    g.bench_function("items_not_open/10", |b| {
        b.iter(|| store.history_tail(id, Some(10)).expect("tail"))
    });
    g.finish();
}

criterion_group!(benches, tail);
criterion_main!(benches);
