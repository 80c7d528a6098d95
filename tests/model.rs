//! Guards against any sequence of appends, syncs, reopens, reads and checks
//! leaving the log different from a plain `Vec` of what was appended.

mod engine;

use proptest::prelude::*;

use engine::{entry, opts, sweep_tempdir};
use session_store::{Durability, EntryHash, Log, LogEntry, LogOptions, Snapshot};

const SEG: u64 = 8 << 10;

#[derive(Debug, Clone)]
enum Op {
    /// Append, Buffered, an entry with about this much text (0: a tiny entry).
    Append(usize),
    /// Append with `Durability::Sync`.
    AppendSync(usize),
    /// `Log::sync`.
    Sync,
    /// Drop the log (or close it) and open it again.
    Reopen { close: bool },
    /// Read from a seq, chosen as a fraction of the log (beyond its end too).
    IterateFrom(u16),
    /// Keep a snapshot, to check later that it still shows its own prefix.
    Hold,
    /// Full check.
    Verify,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        1 => Just(0usize),
        8 => 1usize..2500,
        1 => 9000usize..20_000,
    ];
    prop_oneof![
        6 => size.clone().prop_map(Op::Append),
        2 => size.prop_map(Op::AppendSync),
        1 => Just(Op::Sync),
        2 => any::<bool>().prop_map(|close| Op::Reopen { close }),
        2 => any::<u16>().prop_map(Op::IterateFrom),
        1 => Just(Op::Hold),
        1 => Just(Op::Verify),
    ]
}

fn make(i: u64, size: usize) -> LogEntry {
    if size == 0 {
        LogEntry::TurnEnd {
            ts: 1_700_000_000_000 + i,
            turn_count: i,
        }
    } else {
        entry(i, size)
    }
}

/// The snapshot's records from `from` equal the model's.
fn check_from(snap: &Snapshot, model: &[(LogEntry, EntryHash)], from: u64) {
    let got: Vec<_> = snap
        .entries_from(from)
        .map(|r| r.expect("a clean log reads back"))
        .collect();
    let want: Vec<_> = model
        .iter()
        .enumerate()
        .skip(from as usize)
        .map(|(i, (e, h))| (i as u64, *h, e.clone()))
        .collect();
    assert_eq!(got.len(), want.len(), "records from {from}");
    assert!(got == want, "records from {from} differ");
}

fn run(ops: Vec<Op>) {
    let dir = sweep_tempdir();
    let o: LogOptions = opts(SEG);
    let mut log = Some(Log::open(dir.path(), o.clone()).unwrap());
    let mut model: Vec<(LogEntry, EntryHash)> = Vec::new();
    let mut held: Vec<(Snapshot, usize)> = Vec::new();
    for op in ops {
        let l = log.as_ref().unwrap();
        match op {
            Op::Append(size) | Op::AppendSync(size) => {
                let d = match op {
                    Op::AppendSync(_) => Durability::Sync,
                    _ => Durability::Buffered,
                };
                let e = make(model.len() as u64, size);
                let (seq, hash) = l.append_with(&e, d).unwrap();
                assert_eq!(seq, model.len() as u64);
                model.push((e, hash));
            }
            Op::Sync => l.sync().unwrap(),
            Op::Reopen { close } => {
                held.clear();
                let l = log.take().unwrap();
                if close {
                    l.close().unwrap();
                } else {
                    drop(l);
                }
                let l = Log::open(dir.path(), o.clone()).unwrap();
                let r = l.recovery_report();
                assert_eq!(r.torn_tail, None);
                assert_eq!(r.records, model.len() as u64);
                assert_eq!(r.removed.len(), 0);
                assert_eq!(
                    l.head(),
                    model.last().map(|(_, h)| (model.len() as u64 - 1, *h))
                );
                log = Some(l);
            }
            Op::IterateFrom(x) => {
                let from = u64::from(x) * (model.len() as u64 + 2) / u64::from(u16::MAX);
                check_from(&l.snapshot(), &model, from);
                for (snap, len) in &held {
                    check_from(snap, &model[..*len], from.min(*len as u64));
                }
            }
            Op::Hold => held.push((l.snapshot(), model.len())),
            Op::Verify => {
                let v = l.verify();
                assert_eq!(v.damage, None);
                assert_eq!(v.records, model.len() as u64);
                assert_eq!(
                    v.head,
                    model.last().map(|(_, h)| (model.len() as u64 - 1, *h))
                );
            }
        }
    }
    let l = log.unwrap();
    check_from(&l.snapshot(), &model, 0);
    assert_eq!(l.verify().damage, None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_log_behaves_like_a_vec(ops in proptest::collection::vec(op(), 1..100)) {
        run(ops);
    }
}
