//! Reading a Claude Code session file: its lines, the path through them,
//! and the items that path becomes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::path::{follow, title};
use super::{CHAINED_NOT_HISTORY, METADATA_TYPES};
use crate::history::lines::{self, Line};
use crate::history::{ItemTranscript, ReadStats, TokenUsage, TranscriptItem};
use crate::item::{Item, Role};
use crate::schema::JsonText;

/// A Claude Code session: its main transcript and its subagents'.
///
/// Example: [the module](crate::history::claude#example).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClaudeSession {
    /// The main conversation: the path from the last leaf back to the root,
    /// sidechain lines left out.
    pub main: ItemTranscript,
    /// Each subagent's transcript, by agent id (`"sidechain"` for sidechain
    /// lines without one).
    pub sidechains: BTreeMap<String, ItemTranscript>,
}

/// One line of a session file, as far as reading needs it.
#[derive(Deserialize)]
struct RawLine<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    uuid: Option<String>,
    #[serde(rename = "parentUuid", default)]
    parent_uuid: Option<String>,
    #[serde(rename = "logicalParentUuid", default)]
    logical_parent_uuid: Option<String>,
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
    #[serde(rename = "isSidechain", default)]
    is_sidechain: Option<bool>,
    #[serde(rename = "agentId", default)]
    agent_id: Option<String>,
    #[serde(rename = "isMeta", default)]
    is_meta: Option<bool>,
    #[serde(rename = "isCompactSummary", default)]
    is_compact_summary: Option<bool>,
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<RawUsage>,
}

/// A response's `usage`, as the Messages API gives it: `input_tokens`
/// leaves out the tokens read from and written to the cache.
#[derive(Deserialize, Clone, Copy, Default)]
pub(super) struct RawUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl RawUsage {
    fn tokens(self) -> TokenUsage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let write = self.cache_creation_input_tokens.unwrap_or(0);
        TokenUsage {
            input_tokens: self.input_tokens.unwrap_or(0) + read + write,
            cache_read_tokens: read,
            cache_write_tokens: write,
            output_tokens: self.output_tokens.unwrap_or(0),
        }
    }
}

/// A `summary` line: a title for the conversation that ends at `leafUuid`.
#[derive(Deserialize)]
struct RawSummary {
    #[serde(default)]
    summary: Option<String>,
    #[serde(rename = "leafUuid", default)]
    leaf_uuid: Option<String>,
}

/// A line kept for the chain.
pub(super) struct ChainLine {
    pub(super) line: usize,
    pub(super) uuid: Option<String>,
    pub(super) parent: Option<String>,
    pub(super) logical_parent: Option<String>,
    pub(super) session_id: Option<String>,
    pub(super) timestamp: Option<String>,
    pub(super) body: Body,
}

pub(super) enum Body {
    /// A user message: its `content`, string or blocks.
    User {
        content: Box<RawValue>,
        meta: bool,
        compact_summary: bool,
    },
    /// Part (or all) of one API response.
    Assistant {
        message_id: Option<String>,
        blocks: Vec<Box<RawValue>>,
        model: Option<String>,
        usage: Option<RawUsage>,
    },
    /// `system` / `compact_boundary`.
    CompactBoundary,
    /// A chained line that carries no history (progress, attachments, other
    /// system lines, unknown types), of this type: it links the chain and
    /// nothing else.
    Link(String),
}

impl Body {
    /// What a line left out of the transcript is counted as.
    pub(super) fn kind(&self) -> String {
        match self {
            Body::User { content, .. } if tool_result_ids(content).is_some() => {
                "tool_result".into()
            }
            Body::User { .. } => "user".into(),
            Body::Assistant { .. } => "assistant".into(),
            Body::CompactBoundary => "compact_boundary".into(),
            Body::Link(kind) => kind.clone(),
        }
    }

    /// The ids of the `tool_use` blocks of an assistant line.
    pub(super) fn tool_use_ids(&self) -> Vec<String> {
        #[derive(Deserialize)]
        struct Block {
            #[serde(rename = "type", default)]
            kind: Option<String>,
            #[serde(default)]
            id: Option<String>,
        }
        let Body::Assistant { blocks, .. } = self else {
            return Vec::new();
        };
        blocks
            .iter()
            .filter_map(|b| serde_json::from_str::<Block>(b.get()).ok())
            .filter(|b| b.kind.as_deref() == Some("tool_use"))
            .filter_map(|b| b.id)
            .collect()
    }
}

/// The `tool_use_id`s of a user message made only of `tool_result` blocks;
/// `None` for any other content.
pub(super) fn tool_result_ids(content: &RawValue) -> Option<Vec<String>> {
    #[derive(Deserialize)]
    struct Block {
        #[serde(rename = "type", default)]
        kind: Option<String>,
        #[serde(default)]
        tool_use_id: Option<String>,
    }
    let blocks: Vec<Block> = serde_json::from_str(content.get()).ok()?;
    if blocks.is_empty() {
        return None;
    }
    blocks
        .into_iter()
        .map(|b| match (b.kind.as_deref(), b.tool_use_id) {
            (Some("tool_result"), Some(id)) => Some(id),
            _ => None,
        })
        .collect()
}

/// The lines of one file, split into the main chain and the sidechains.
#[derive(Default)]
struct FileLines {
    main: Vec<ChainLine>,
    sidechains: BTreeMap<String, Vec<ChainLine>>,
    cwd: Option<String>,
    stats: ReadStats,
    content_hash: String,
    /// `summary` lines: each leaf's title, in file order.
    summaries: Vec<(String, String)>,
}

/// Parses session bytes, with no path; never panics.
///
/// Example: [the module](crate::history::claude#example).
pub fn parse_session_bytes(bytes: &[u8]) -> ClaudeSession {
    let mut file = FileLines::default();
    let mut stats = ReadStats::default();
    let scan = lines::scan(bytes, &mut stats, |n, text| {
        ControlFlow::Continue(file.line(n, text))
    });
    file.stats.absorb(stats);
    file.content_hash = scan.content_hash;
    ClaudeSession::from_files(file, Vec::new(), "", None)
}

impl ClaudeSession {
    /// Reads the session file at `path` and the sidechain lines in it.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn read(path: &Path) -> Result<ClaudeSession, crate::Error> {
        let file = read_file(path)?;
        Ok(ClaudeSession::from_files(
            file,
            Vec::new(),
            &path.display().to_string(),
            session_stem(path),
        ))
    }

    /// Reads the session file at `path` and its subagents' files too: those
    /// in `<session-id>/subagents/`, and the older `agent-<id>.jsonl` files
    /// beside it whose lines name this session.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn read_with_subagents(path: &Path) -> Result<ClaudeSession, crate::Error> {
        let file = read_file(path)?;
        let stem = session_stem(path);
        let mut others = Vec::new();
        if let (Some(dir), Some(stem)) = (path.parent(), stem.as_deref()) {
            for candidate in agent_files(&dir.join(stem).join("subagents"))
                .into_iter()
                .chain(agent_files(dir))
            {
                let mut other = read_file(&candidate)?;
                let beside = candidate.parent() == Some(dir);
                if beside {
                    // An older subagent file: only lines of this session.
                    let keep = |l: &ChainLine| l.session_id.as_deref() == Some(stem);
                    other.main.retain(keep);
                    for lines in other.sidechains.values_mut() {
                        lines.retain(keep);
                    }
                }
                let fallback = agent_id_of(&candidate);
                // A subagent file's lines are all sidechain, whatever they say.
                let main = std::mem::take(&mut other.main);
                if !main.is_empty() {
                    other.sidechains.entry(fallback).or_default().extend(main);
                }
                other.sidechains.retain(|_, lines| !lines.is_empty());
                if !other.sidechains.is_empty() {
                    others.push(other);
                }
            }
        }
        Ok(ClaudeSession::from_files(
            file,
            others,
            &path.display().to_string(),
            stem,
        ))
    }

    /// The subagent transcript of `agent_id`.
    ///
    /// Example: [the module](crate::history::claude#example).
    pub fn sidechain(&self, agent_id: &str) -> Option<&ItemTranscript> {
        self.sidechains.get(agent_id)
    }

    fn from_files(
        mut file: FileLines,
        others: Vec<FileLines>,
        source: &str,
        stem: Option<String>,
    ) -> ClaudeSession {
        let session_id = stem.or_else(|| file.main.iter().find_map(|l| l.session_id.clone()));
        let mut stats = std::mem::take(&mut file.stats);
        stats.sidechain_lines = file.sidechains.values().map(Vec::len).sum();
        let mut main = build(
            &file.main,
            session_id.as_deref(),
            source,
            stats,
            &file.summaries,
        );
        main.session_id = session_id.clone();
        main.cwd = file.cwd.clone();
        main.content_hash = file.content_hash.clone();

        // Each agent's lines from every file, and the hashes of those files.
        let mut agents: BTreeMap<String, (Vec<ChainLine>, Vec<String>)> = BTreeMap::new();
        for f in std::iter::once(file).chain(others) {
            for (agent, lines) in f.sidechains {
                let entry = agents.entry(agent).or_default();
                entry.0.extend(lines);
                entry.1.push(f.content_hash.clone());
            }
        }
        let sidechains = agents
            .into_iter()
            .map(|(agent, (lines, hashes))| {
                let stats = ReadStats {
                    lines: lines.len(),
                    ..ReadStats::default()
                };
                let mut t = build(&lines, None, source, stats, &[]);
                t.session_id = session_id.clone();
                t.cwd = main.cwd.clone();
                t.content_hash = sidechain_hash(&agent, &hashes);
                (agent, t)
            })
            .collect();
        ClaudeSession { main, sidechains }
    }
}

fn read_file(path: &Path) -> Result<FileLines, crate::Error> {
    let mut file = FileLines::default();
    let mut stats = ReadStats::default();
    file.content_hash = lines::scan_file(path, &mut stats, |n, text| {
        ControlFlow::Continue(file.line(n, text))
    })?;
    file.stats.absorb(stats);
    Ok(file)
}

/// The session id a file's name gives: its stem.
fn session_stem(path: &Path) -> Option<String> {
    path.file_stem().and_then(|s| s.to_str()).map(str::to_owned)
}

/// `agent-*.jsonl` files in `dir`, sorted; none when it does not exist.
fn agent_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("agent-") && n.ends_with(".jsonl"))
        })
        .collect();
    out.sort();
    out
}

fn agent_id_of(path: &Path) -> String {
    let stem = session_stem(path).unwrap_or_default();
    stem.strip_prefix("agent-").unwrap_or(&stem).to_owned()
}

/// A sidechain's identity: its agent id and the content of every file that
/// holds its lines.
fn sidechain_hash(agent: &str, file_hashes: &[String]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"claude sidechain\0");
    hasher.update(agent.as_bytes());
    for h in file_hashes {
        hasher.update(b"\0");
        hasher.update(h.as_bytes());
    }
    hasher.finalize().to_hex().to_string()
}

impl FileLines {
    fn line(&mut self, n: usize, text: &str) -> Line {
        let Ok(raw) = serde_json::from_str::<RawLine<'_>>(text) else {
            return Line::Malformed;
        };
        let kind = raw.kind.as_deref().unwrap_or("");
        let known_history = matches!(kind, "user" | "assistant" | "system");
        if !known_history && !CHAINED_NOT_HISTORY.contains(&kind) {
            if METADATA_TYPES.contains(&kind) {
                self.stats.metadata(kind);
            } else {
                self.stats
                    .unknown(if kind.is_empty() { "(none)" } else { kind });
            }
        } else if !known_history {
            self.stats.metadata(kind);
        }
        if kind == "summary" {
            if let Ok(RawSummary {
                summary: Some(summary),
                leaf_uuid,
            }) = serde_json::from_str(text)
            {
                self.summaries
                    .push((leaf_uuid.unwrap_or_default(), summary));
            }
        }
        let sidechain = raw.is_sidechain == Some(true);
        if self.cwd.is_none() && !sidechain {
            self.cwd = raw.cwd.clone();
        }
        // Lines without a uuid are not in the chain.
        if raw.uuid.is_none() {
            return Line::Read;
        }
        let body = match (kind, raw.message) {
            ("user", Some(message)) => {
                match serde_json::from_str::<RawMessage<'_>>(message.get()) {
                    Ok(RawMessage {
                        content: Some(content),
                        ..
                    }) => Body::User {
                        content: content.to_owned(),
                        meta: raw.is_meta == Some(true),
                        compact_summary: raw.is_compact_summary == Some(true),
                    },
                    _ => return Line::Malformed,
                }
            }
            ("assistant", Some(message)) => {
                match serde_json::from_str::<RawMessage<'_>>(message.get()) {
                    Ok(RawMessage {
                        id,
                        content: Some(content),
                        model,
                        usage,
                    }) => match assistant_blocks(content) {
                        Some(blocks) => Body::Assistant {
                            message_id: id,
                            blocks,
                            // Claude Code's own notices (API errors) are
                            // written as if from a model it calls
                            // "<synthetic>": no model wrote them.
                            model: model.filter(|m| !m.starts_with('<')),
                            usage,
                        },
                        None => return Line::Malformed,
                    },
                    _ => return Line::Malformed,
                }
            }
            ("user" | "assistant", None) => return Line::Malformed,
            ("system", _) if raw.subtype.as_deref() == Some("compact_boundary") => {
                Body::CompactBoundary
            }
            _ => Body::Link(kind.to_owned()),
        };
        let chain_line = ChainLine {
            line: n,
            uuid: raw.uuid,
            parent: raw.parent_uuid,
            logical_parent: raw.logical_parent_uuid,
            session_id: raw.session_id,
            timestamp: raw.timestamp,
            body,
        };
        if sidechain {
            let agent = raw.agent_id.unwrap_or_else(|| "sidechain".to_owned());
            self.sidechains.entry(agent).or_default().push(chain_line);
        } else {
            self.main.push(chain_line);
        }
        Line::Read
    }
}

/// An assistant message's blocks: a list as it is, a string as one text
/// block.
fn assistant_blocks(content: &RawValue) -> Option<Vec<Box<RawValue>>> {
    if let Ok(blocks) = serde_json::from_str::<Vec<&RawValue>>(content.get()) {
        return Some(blocks.into_iter().map(|b| b.to_owned()).collect());
    }
    let text = serde_json::from_str::<String>(content.get()).ok()?;
    let block = serde_json::json!({"type": "text", "text": text}).to_string();
    RawValue::from_string(block).ok().map(|b| vec![b])
}

/// What a run of path lines becomes before conversion.
enum Unit<'a> {
    User {
        line: &'a ChainLine,
        content: &'a RawValue,
        meta: bool,
    },
    /// One API response: the blocks of every line with its `message.id`,
    /// its model, and the usage its last line gives.
    Assistant {
        line: &'a ChainLine,
        blocks: Vec<&'a RawValue>,
        model: Option<&'a str>,
        usage: Option<RawUsage>,
    },
    Compaction {
        line: usize,
        timestamp: Option<&'a str>,
    },
}

/// Builds the transcript of one chain.
fn build(
    lines: &[ChainLine],
    session: Option<&str>,
    source: &str,
    mut stats: ReadStats,
    summaries: &[(String, String)],
) -> ItemTranscript {
    let path = follow(lines, session);
    let kept: HashSet<usize> = path.iter().map(|l| l.line).collect();
    for l in lines.iter().filter(|l| !kept.contains(&l.line)) {
        stats.left_out(&l.body.kind(), l.line);
    }
    let title = title(&path, summaries);
    let units = units_of(path);
    let mut t = ItemTranscript::new(source.to_owned());
    t.stats = stats;
    t.title = title;
    for unit in units {
        add_unit(&mut t, unit);
    }
    t
}

/// The units of a path's lines, in order: a user message each, an API
/// response's lines joined into one, and the compactions.
fn units_of(path: Vec<&ChainLine>) -> Vec<Unit<'_>> {
    let mut units: Vec<Unit<'_>> = Vec::new();
    // Responses seen since the last compaction, by message id.
    let mut responses: HashMap<&str, usize> = HashMap::new();
    // Whether a compaction began and nothing has followed it yet.
    let mut fresh = false;
    for l in path {
        match &l.body {
            Body::CompactBoundary => {
                units.push(Unit::Compaction {
                    line: l.line,
                    timestamp: l.timestamp.as_deref(),
                });
                responses.clear();
                fresh = true;
            }
            Body::User {
                content,
                meta,
                compact_summary,
            } => {
                // An older summary has no boundary before it.
                if *compact_summary && !fresh && !units.is_empty() {
                    units.push(Unit::Compaction {
                        line: l.line,
                        timestamp: l.timestamp.as_deref(),
                    });
                    responses.clear();
                }
                units.push(Unit::User {
                    line: l,
                    content,
                    meta: *meta,
                });
                fresh = false;
            }
            Body::Assistant {
                message_id,
                blocks,
                model,
                usage,
            } => {
                let joined = message_id
                    .as_deref()
                    .and_then(|id| responses.get(id).copied());
                match (joined, units.get_mut(joined.unwrap_or(usize::MAX))) {
                    (
                        Some(_),
                        Some(Unit::Assistant {
                            blocks: into,
                            usage: last,
                            ..
                        }),
                    ) => {
                        for block in blocks {
                            // Some versions repeat a block on the next line.
                            if !into.iter().any(|b| b.get() == block.get()) {
                                into.push(block);
                            }
                        }
                        *last = usage.or(*last);
                    }
                    _ => {
                        if let Some(id) = message_id {
                            responses.insert(id, units.len());
                        }
                        units.push(Unit::Assistant {
                            line: l,
                            blocks: blocks.iter().map(|b| b.as_ref()).collect(),
                            model: model.as_deref(),
                            usage: *usage,
                        });
                    }
                }
                fresh = false;
            }
            Body::Link(_) => {}
        }
    }
    units
}

/// Converts a unit into items at the end of the transcript, or starts a
/// segment at a compaction. A message that does not convert is counted as
/// malformed.
fn add_unit(t: &mut ItemTranscript, unit: Unit<'_>) {
    let (line, items, shown, model, usage) = match unit {
        Unit::Compaction { line, timestamp } => {
            let timestamp = timestamp.map(str::to_owned);
            match t.segments.as_mut_slice() {
                // Nothing before it survives: the transcript starts
                // with the compaction, and there is nothing to chain.
                [only] if only.items.is_empty() => {
                    only.compaction_line = Some(line);
                    only.compaction_timestamp = timestamp;
                }
                _ => t.compaction(line, timestamp, Vec::new()),
            }
            return;
        }
        Unit::User {
            line,
            content,
            meta,
        } => (
            line,
            convert(Role::User, content_blocks(content)),
            !meta,
            None,
            None,
        ),
        Unit::Assistant {
            line,
            blocks,
            model,
            usage,
        } => (
            line,
            convert(Role::Assistant, ContentRef::Blocks(blocks)),
            true,
            model,
            usage,
        ),
    };
    let Some(items) = items else {
        t.stats.malformed(line.line);
        return;
    };
    let segment = t.current();
    let first = segment.items.len();
    segment.items.extend(
        items
            .into_iter()
            .map(|item| TranscriptItem::new(item, line.line, line.timestamp.clone(), shown)),
    );
    if let Some(item) = segment.items.get_mut(first) {
        item.model = model.map(str::to_owned);
        item.usage = usage.map(RawUsage::tokens);
    }
}

/// A message's content: one string, or blocks.
enum ContentRef<'a> {
    Text(&'a RawValue),
    Blocks(Vec<&'a RawValue>),
}

fn content_blocks(content: &RawValue) -> ContentRef<'_> {
    match serde_json::from_str::<Vec<&RawValue>>(content.get()) {
        Ok(blocks) => ContentRef::Blocks(blocks),
        Err(_) => ContentRef::Text(content),
    }
}

/// Converts a message with the crate's Messages API reader. A block that
/// reader refuses (a field it does not know) is kept whole as an opaque
/// block of the message's side, so nothing is dropped. `None` when the
/// content is neither a string nor blocks.
fn convert(role: Role, content: ContentRef<'_>) -> Option<Vec<Item>> {
    let side = if role == Role::User {
        "user"
    } else {
        "assistant"
    };
    let message = |content: &str| format!(r#"{{"role":"{side}","content":{content}}}"#);
    match content {
        ContentRef::Text(text) => Item::from_anthropic_message(&message(text.get())).ok(),
        ContentRef::Blocks(blocks) => {
            let all = format!(
                "[{}]",
                blocks.iter().map(|b| b.get()).collect::<Vec<_>>().join(",")
            );
            if let Ok(items) = Item::from_anthropic_message(&message(&all)) {
                return Some(items);
            }
            let mut items = Vec::new();
            for block in blocks {
                let one = format!("[{}]", block.get());
                match Item::from_anthropic_message(&message(&one)) {
                    Ok(converted) => items.extend(converted),
                    Err(_) => {
                        if let Ok(json) = JsonText::parse(block.get()) {
                            items.push(Item::Opaque {
                                role: Some(role),
                                json,
                            });
                        }
                    }
                }
            }
            Some(items)
        }
    }
}
