//! Guards import against a session that is not the one exported: an
//! exported session re-imports to the same hashes (with or without its seqs
//! and hashes), and a forged, gapped or hostile import writes nothing.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use common::store::{config_changed, ids, open, tempdir, turn, turn_end};
use session_store::schema::now_ms;
use session_store::{
    state::UsageRecord, wire::entry_line, wire::parse_line, wire::WireLine, EntryHash, Error, Item,
    JsonText, LogEntry, RequestConfig, SessionId, Store, WorkerResult,
};

fn hashes(store: &Store, id: SessionId) -> Vec<(u64, EntryHash)> {
    let snap = store.snapshot(id).unwrap();
    let hashes = snap
        .iter()
        .map(|r| r.unwrap())
        .map(|r| (r.seq, r.hash))
        .collect();
    hashes
}

fn session_dirs(root: &Path) -> BTreeSet<String> {
    ["sessions", "trash"]
        .iter()
        .flat_map(|d| fs::read_dir(root.join(d)).unwrap())
        .map(|e| e.unwrap().path().display().to_string())
        .collect()
}

fn export_lines(store: &Store, id: SessionId) -> Vec<String> {
    let snap = store.snapshot(id).unwrap();
    let mut prev = None;
    let mut lines = Vec::new();
    for rec in snap.iter() {
        let rec = rec.unwrap();
        lines.push(entry_line(
            rec.seq,
            &rec.hash,
            prev.as_ref(),
            &rec.entry().to_entry(),
        ));
        prev = Some(rec.hash);
    }
    lines
}

fn parse_all(lines: &[String]) -> Vec<(u64, WireLine)> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, parse_line(l, i as u64 + 1).unwrap()))
        .collect()
}

#[test]
fn an_exported_session_re_imports_to_the_same_hashes() {
    let dir = tempdir();
    let store = open(dir.path());
    let (src, mut head) = store
        .create_session(
            Some("sys"),
            RequestConfig {
                extra: Some(JsonText::parse(r#"{"z": 2.50, "a": [ ], "n": 1.0e3}"#).unwrap()),
                ..RequestConfig::model("m")
            },
            &[Item::user_text("imported")],
        )
        .unwrap();
    for n in 0..5 {
        store.save_delta(src, &mut head, &turn(n, 4000)).unwrap();
        turn_end(&store, src, &mut head, n as u64 + 1);
    }
    config_changed(&store, src, &mut head, RequestConfig::model("m2"));
    let rest = [
        UsageRecord::default().entry(now_ms()),
        LogEntry::Extension {
            ts: now_ms(),
            domain: "x".into(),
            payload: JsonText::parse(r#"[1, {"k": null, "b": 18446744073709551616}]"#).unwrap(),
        },
        LogEntry::RunCompleted {
            ts: now_ms(),
            interrupted: true,
            result: WorkerResult::default(),
        },
    ];
    for entry in rest {
        store.save_entries(src, &mut head, &[entry]).unwrap();
    }
    let lines = export_lines(&store, src);

    let imported = store.import(&parse_all(&lines)).unwrap();
    assert_ne!(imported, src);
    assert_eq!(hashes(&store, imported), hashes(&store, src));
    assert_eq!(
        store.restore(imported).unwrap(),
        store.restore(src).unwrap()
    );
    assert_eq!(export_lines(&store, imported), lines);
    let info = store.info(imported).unwrap().unwrap();
    assert_eq!(info.head, Some(head));
    assert_eq!(info.title.as_deref(), Some("imported"));
    // Lines without seq and hashes import to the same chain too.
    let bare: Vec<(u64, WireLine)> = parse_all(&lines)
        .into_iter()
        .map(|(n, w)| {
            (
                n,
                WireLine {
                    seq: None,
                    hash: None,
                    prev_hash: None,
                    ..w
                },
            )
        })
        .collect();
    let bare_id = store.import(&bare).unwrap();
    assert_eq!(hashes(&store, bare_id), hashes(&store, src));
}

#[test]
fn a_forged_or_gapped_import_writes_nothing() {
    let dir = tempdir();
    let store = open(dir.path());
    let (src, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("src")])
        .unwrap();
    for n in 0..3 {
        store.save_delta(src, &mut head, &turn(n, 100)).unwrap();
    }
    let good = parse_all(&export_lines(&store, src));
    assert!(good.len() > 8);

    type Forge = Box<dyn Fn(&mut Vec<(u64, WireLine)>)>;
    let forgeries: Vec<(&str, Forge)> = vec![
        (
            "forged hash",
            Box::new(|l| l[4].1.hash = Some(EntryHash([0xab; 32]))),
        ),
        (
            "content changed under its hash",
            Box::new(|l| {
                if let LogEntry::UserInput { ts, .. } = &mut l[5].1.entry {
                    *ts += 1;
                } else {
                    panic!("line 6 is a user_input")
                }
            }),
        ),
        (
            "forged prev_hash",
            Box::new(|l| l[3].1.prev_hash = Some(Some(EntryHash([1; 32])))),
        ),
        ("seq gap", Box::new(|l| l[6].1.seq = Some(7))),
        ("missing line", Box::new(|l| drop(l.remove(6)))),
        (
            "first line not a session_start",
            Box::new(|l| drop(l.remove(0))),
        ),
        (
            "bare lines, first not a session_start",
            Box::new(|l| {
                l.remove(0);
                for (_, w) in l.iter_mut() {
                    w.seq = None;
                    w.hash = None;
                    w.prev_hash = None;
                }
            }),
        ),
        ("empty", Box::new(|l| l.clear())),
    ];
    let sessions = session_dirs(dir.path());
    for (name, forge) in forgeries {
        let mut lines = good.clone();
        forge(&mut lines);
        let err = store.import(&lines).unwrap_err();
        assert!(matches!(err, Error::Wire { .. }), "{name}: {err}");
        assert_eq!(session_dirs(dir.path()), sessions, "{name}");
    }
    assert_eq!(ids(&store.list().unwrap()), vec![src]);
    // A hostile id inside a line is refused at parse time; the same line
    // with a real id parses, so the id is what was refused.
    let first = &export_lines(&store, src)[0];
    let with_origin = |id: &str| {
        let origin = format!(
            r#""kind":"session_start","forked_from":{{"session_id":"{id}","at_hash":"{}"}}"#,
            "0".repeat(64)
        );
        first.replacen(r#""kind":"session_start""#, &origin, 1)
    };
    assert!(parse_line(&with_origin(&src.to_string()), 1).is_ok());
    for id in ["../x", "/etc", &src.to_string().to_uppercase()] {
        let err = parse_line(&with_origin(id), 1).unwrap_err();
        assert!(matches!(err, Error::Wire { .. }), "{id}: {err}");
    }
}
