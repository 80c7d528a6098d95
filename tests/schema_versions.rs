//! Guards against a schema change that forgets the format version, the
//! fixtures or the readers of older logs. Adding a variant to `LoggedItem`,
//! `LoggedContentPart` or `LogEntry` fails to compile here first (the
//! matches below name every variant); the path from there is DESIGN.md's
//! "Adding an item type or an entry":
//!
//! 1. append the variant at the end of its enum (`src/schema/`), boxed if
//!    it would grow the archived size `archived_layout_is_schema_1s` pins;
//! 2. mirror it in `src/schema/borrowed.rs` (the save path's archive);
//! 3. give it a place in the readers of archives: `item/view.rs`
//!    (`stored_shape`), `schema/search.rs`, `schema/size.rs`,
//!    `check_json_texts`, and in `export.rs`'s raw-JSON restore;
//! 4. bump `FORMAT_VERSION` in `src/format.rs` and add a row to `SCHEMAS`
//!    below;
//! 5. commit a fixture log written by the new code
//!    (`tests/fixtures/schema_vN/`, `tests/fixtures_schema_vN.rs`), and
//!    keep every older fixture reading;
//! 6. DESIGN.md: "Schema versions" and "Format version history".

use session_store::format::FORMAT_VERSION;
use session_store::{schema::LoggedContentPart, schema::LoggedItem, LogEntry};

/// Each format version: the variants of `LoggedItem`, `LoggedContentPart`
/// and `LogEntry` its records may hold, and the fixture that pins the
/// current one's archive (the older fixtures, `tests/fixtures/v1` and
/// `schema_v1` to `schema_v4`, are named in DESIGN.md).
const SCHEMAS: &[(u32, usize, usize, usize, Option<&str>)] = &[
    (1, 4, 2, 11, None),
    (2, 4, 2, 11, None),
    (3, 10, 7, 11, None),
    (4, 10, 7, 12, None),
    (5, 10, 7, 13, None),
    (6, 11, 7, 13, None),
    (7, 11, 7, 13, None),
    (8, 12, 7, 13, Some("schema_v6")),
    (9, 12, 7, 13, Some("format_v9")),
];

/// `LoggedItem`'s variants, by tag: a new one fails to compile here.
fn item_tag(item: &LoggedItem) -> usize {
    match item {
        LoggedItem::Message { .. } => 0,
        LoggedItem::ToolCall { .. } => 1,
        LoggedItem::ToolResult { .. } => 2,
        LoggedItem::Reasoning { .. } => 3,
        LoggedItem::CustomToolCall { .. } => 4,
        LoggedItem::ToolOutput { .. } => 5,
        LoggedItem::ReasoningParts { .. } => 6,
        LoggedItem::Thinking { .. } => 7,
        LoggedItem::RedactedThinking { .. } => 8,
        LoggedItem::Opaque { .. } => 9,
        LoggedItem::External(_) => 10,
        LoggedItem::Extended(_) => 11,
    }
}
const ITEM_VARIANTS: usize = 12;

/// `LoggedContentPart`'s variants, by tag.
fn part_tag(part: &LoggedContentPart) -> usize {
    match part {
        LoggedContentPart::Text { .. } => 0,
        LoggedContentPart::Refusal { .. } => 1,
        LoggedContentPart::OutputText(_) => 2,
        LoggedContentPart::InputImage(_) => 3,
        LoggedContentPart::InputFile(_) => 4,
        LoggedContentPart::InputAudio(_) => 5,
        LoggedContentPart::Opaque { .. } => 6,
    }
}
const PART_VARIANTS: usize = 7;

/// `LogEntry`'s variants, by tag.
fn entry_tag(entry: &LogEntry) -> usize {
    match entry {
        LogEntry::SessionStart { .. } => 0,
        LogEntry::UserInput { .. } => 1,
        LogEntry::AssistantItems { .. } => 2,
        LogEntry::ToolResults { .. } => 3,
        LogEntry::HookInjectedItems { .. } => 4,
        LogEntry::TurnEnd { .. } => 5,
        LogEntry::RunCompleted { .. } => 6,
        LogEntry::RunErrored { .. } => 7,
        LogEntry::ConfigChanged { .. } => 8,
        LogEntry::LlmUsage { .. } => 9,
        LogEntry::Extension { .. } => 10,
        LogEntry::ItemsRemoved { .. } => 11,
        LogEntry::ForkedFrom { .. } => 12,
    }
}
const ENTRY_VARIANTS: usize = 13;

#[test]
fn the_schema_in_the_code_is_the_one_its_format_version_names() {
    let row = SCHEMAS
        .iter()
        .find(|r| r.0 == FORMAT_VERSION)
        .unwrap_or_else(|| {
            panic!("FORMAT_VERSION {FORMAT_VERSION} has no row in SCHEMAS: see this file's docs")
        });
    assert_eq!(
        (row.1, row.2, row.3),
        (ITEM_VARIANTS, PART_VARIANTS, ENTRY_VARIANTS),
        "the enums changed without a new format version: bump FORMAT_VERSION and add a row"
    );
    let last = SCHEMAS.last().unwrap();
    assert_eq!(
        last.0, FORMAT_VERSION,
        "SCHEMAS ends at the current version"
    );
    let fixture = last.4.expect("the current schema has a fixture");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    assert!(dir.is_dir(), "{} is missing", dir.display());
    // Versions only grow, and a schema only ever gains variants.
    for pair in SCHEMAS.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(
            a.0 < b.0 && a.1 <= b.1 && a.2 <= b.2 && a.3 <= b.3,
            "{a:?} then {b:?}"
        );
    }
    // The tags the matches give are the variants' positions.
    let item = LoggedItem::Opaque {
        role: None,
        json: session_store::JsonText::empty_object(),
    };
    assert_eq!(item_tag(&item), 9);
    let part = LoggedContentPart::Text { text: "t".into() };
    assert_eq!(part_tag(&part), 0);
    let entry = LogEntry::ItemsRemoved { ts: 0, count: 1 };
    assert_eq!(entry_tag(&entry), 11);
}
