//! Guards restore against resuming a session with other items, another
//! config or a history a provider rejects: everything saved comes back as
//! given (ids and statuses included), from the store that wrote it and from
//! the disk; a config change is in force after a restore; and the
//! ready-to-send check names each kind of broken history with its position.

mod common;

use common::store::{
    answer, as_given, call, config_changed, open, reasoning, result, tempdir, turn,
};
use session_store::{
    ContentPart, Item, ItemStatus, JsonText, LogEntry, Problem, RequestConfig, Role,
};

#[test]
fn restore_round_trips_everything_ids_and_statuses_included() {
    let dir = tempdir();
    let initial = vec![
        Item::system_text("hook: repo is clean"),
        Item::Message {
            extra: Default::default(),
            id: Some("msg_u0".into()),
            role: Role::User,
            content: vec![ContentPart::Text {
                text: "start".into(),
            }],
            status: Some(ItemStatus::Completed),
        },
    ];
    let delta = vec![
        Item::Message {
            extra: Default::default(),
            id: Some("msg_u1".into()),
            role: Role::User,
            content: vec![
                ContentPart::Text {
                    text: "first part".into(),
                },
                ContentPart::Text {
                    text: " and\u{0} second".into(),
                },
            ],
            status: None,
        },
        reasoning("plan"),
        Item::Message {
            extra: Default::default(),
            id: Some("msg_a1".into()),
            role: Role::Assistant,
            content: vec![
                ContentPart::Text { text: "ok".into() },
                ContentPart::Refusal {
                    refusal: "not that".into(),
                },
            ],
            status: Some(ItemStatus::Incomplete),
        },
        call("c1", "{\"cmd\":  \"ls -la\",\n \"env\": {\"ü\": \"\\n\"}}"),
        result("c1", "total 0\n"),
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "c1b".into(),
            summary: String::new(),
            content: None,
        },
        Item::system_text("hook: tests passed"),
        answer("done"),
    ];
    let config = RequestConfig {
        model: Some("m2".into()),
        temperature: Some(0.25),
        top_p: None,
        max_output_tokens: Some(4096),
        reasoning_effort: Some("high".into()),
        extra: Some(JsonText::parse(r#"{"store": false, "n": 1.50}"#).unwrap()),
    };
    let all: Vec<Item> = initial.iter().chain(&delta).cloned().collect();
    let expected = as_given(&all);
    assert!(
        all.iter().any(|i| *i != i.without_provider_state()),
        "the items must carry provider state to keep"
    );

    let (id, head) = {
        let store = open(dir.path());
        let (id, mut head) = store
            .create_session(Some("system prompt"), config.clone(), &initial)
            .unwrap();
        store.save_delta(id, &mut head, &delta).unwrap();
        let state = store.restore(id).unwrap();
        assert_eq!(state.history, expected);
        assert_eq!(state.system_prompt.as_deref(), Some("system prompt"));
        assert_eq!(state.config, config);
        (id, head)
    };
    // And from disk, through a fresh store.
    let store = open(dir.path());
    let state = store.restore(id).unwrap();
    assert_eq!(state.history, expected);
    assert_eq!(state.config, config);
    assert_eq!(state.head, Some(head));
    assert_eq!(state.forked_from, None);
    assert_eq!(state.compacted_from, None);
}

#[test]
fn a_config_change_is_logged_and_restored() {
    let dir = tempdir();
    let id = {
        let store = open(dir.path());
        let (id, mut head) = store
            .create_session(None, RequestConfig::model("small"), &[])
            .unwrap();
        store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
        let bigger = RequestConfig {
            model: Some("large".into()),
            reasoning_effort: Some("high".into()),
            extra: Some(JsonText::parse(r#"{"parallel_tool_calls": true}"#).unwrap()),
            ..RequestConfig::default()
        };
        config_changed(&store, id, &mut head, bigger.clone());
        let snap = store.snapshot(id).unwrap();
        let (_, _, last) = snap.entries_from(5).next().unwrap().unwrap();
        assert!(
            matches!(&last, LogEntry::ConfigChanged { config, .. } if *config == bigger),
            "{last:?}"
        );
        assert_eq!(store.restore(id).unwrap().config, bigger);
        // A fork carries the config in force.
        let (fork, _) = store.fork_at(id, head).unwrap();
        assert_eq!(store.restore(fork).unwrap().config, bigger);
        id
    };
    let store = open(dir.path());
    let state = store.restore(id).unwrap();
    assert_eq!(state.config.model.as_deref(), Some("large"));
    assert_eq!(
        state.config.extra.as_ref().map(JsonText::as_str),
        Some(r#"{"parallel_tool_calls":true}"#)
    );
}

#[test]
fn check_reports_each_kind_of_broken_history_with_its_position() {
    let q = |t: &str| Item::user_text(t);
    let cases: Vec<(&str, Vec<Item>, Vec<Problem>)> = vec![
        ("ready", [turn(0, 10), turn(1, 10)].concat(), vec![]),
        (
            "call without result",
            vec![q("q"), reasoning("r"), call("c1", "{}"), answer("a")],
            vec![Problem::CallWithoutResult {
                index: 2,
                call_id: "c1".into(),
            }],
        ),
        (
            "result without call",
            vec![q("q"), result("c9", "orphan"), answer("a")],
            vec![Problem::ResultWithoutCall {
                index: 1,
                call_id: "c9".into(),
            }],
        ),
        (
            "duplicate call_id",
            vec![
                q("q"),
                call("c1", "{}"),
                result("c1", "1"),
                q("q2"),
                call("c1", "{}"),
                result("c1", "2"),
            ],
            vec![
                Problem::DuplicateCallId {
                    index: 4,
                    first: 1,
                    call_id: "c1".into(),
                },
                Problem::DuplicateCallId {
                    index: 5,
                    first: 2,
                    call_id: "c1".into(),
                },
            ],
        ),
        (
            "dangling reasoning",
            vec![
                q("q"),
                reasoning("r1"),
                q("q2"),
                answer("a"),
                reasoning("r2"),
            ],
            vec![
                Problem::DanglingReasoning { index: 1 },
                Problem::DanglingReasoning { index: 4 },
            ],
        ),
    ];
    let dir = tempdir();
    let store = open(dir.path());
    for (name, items, expected) in cases {
        let (id, mut head) = store
            .create_session(None, RequestConfig::default(), &[])
            .unwrap();
        store.save_delta(id, &mut head, &items).unwrap();
        let state = store.restore(id).unwrap();
        assert_eq!(state.check(), expected, "{name}");
        assert_eq!(state.is_ready_to_send(), expected.is_empty(), "{name}");
    }

    // A fork between a call and its result holds an unanswered call.
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[q("start")])
        .unwrap();
    store.save_delta(id, &mut head, &turn(0, 10)).unwrap();
    assert!(store.restore(id).unwrap().is_ready_to_send());
    let (fork, _) = store.fork_at_seq(id, 2).unwrap();
    assert_eq!(
        store.restore(fork).unwrap().check(),
        vec![Problem::CallWithoutResult {
            index: 3,
            call_id: "call_0".into()
        }]
    );
}
