//! `grep`: a regular expression over every session's entries (texts, tool
//! arguments and outputs, opaque items' JSON), read straight from the
//! mapped, validated records, sessions searched in parallel.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::Result;
use regex::{Regex, RegexBuilder};
use session_store::{EntryKind, SessionId, Store};

use crate::open_store_to_read;

#[derive(clap::Args)]
pub struct Args {
    /// A regular expression (Rust `regex` syntax)
    pattern: String,
    /// Sessions to search: ids, unique id prefixes or names [default: all]
    ids: Vec<String>,
    /// Only entries of this kind (session_start, user_input, assistant_items,
    /// tool_results, hook_injected_items, run_completed, run_errored,
    /// config_changed, extension); repeatable
    #[arg(long = "kind", value_parser = parse_kind)]
    kinds: Vec<EntryKind>,
    /// Case-insensitive
    #[arg(short = 'i', long)]
    ignore_case: bool,
    /// Lines of context before and after each matching line
    #[arg(short = 'C', long, default_value_t = 0)]
    context: usize,
    /// Print only the number of matching lines per session
    #[arg(short = 'c', long)]
    count: bool,
    /// One JSON object per matching line
    #[arg(long)]
    json: bool,
}

fn parse_kind(name: &str) -> std::result::Result<EntryKind, String> {
    (0..=u8::MAX)
        .filter_map(EntryKind::from_code)
        .find(|k| k.name() == name)
        .ok_or_else(|| format!("no entry kind {name:?}"))
}

/// One matching line of one text of one entry.
#[derive(serde::Serialize)]
struct Hit<'a> {
    session: SessionId,
    seq: u64,
    kind: &'static str,
    /// 1-based line number inside the text.
    line_no: usize,
    line: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    before: Vec<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    after: Vec<&'a str>,
}

/// What searching one session gave: its output, ready to print in session
/// order, the matching lines counted, or the error that stopped it.
struct Found {
    out: Vec<u8>,
    lines: u64,
    error: Option<String>,
}

pub fn run(root: &Option<PathBuf>, a: Args) -> Result<ExitCode> {
    let re = RegexBuilder::new(&a.pattern)
        .case_insensitive(a.ignore_case)
        .build()
        .map_err(|e| crate::out::usage(format!("invalid pattern:\n{e}")))?;
    let store = open_store_to_read(root)?;
    let ids: Vec<SessionId> = if a.ids.is_empty() {
        let mut ids: Vec<SessionId> = store.list()?.into_iter().map(|s| s.id).collect();
        ids.sort();
        ids
    } else {
        a.ids
            .iter()
            .map(|t| crate::resolve_session(&store, t))
            .collect::<Result<_>>()?
    };
    let found = search_all(&store, &ids, &re, &a);
    let mut stdout = crate::out::Stdout;
    let (mut matched, mut failed) = (0u64, false);
    for (id, f) in ids.iter().zip(found) {
        stdout.write_all(&f.out)?;
        matched += f.lines;
        if let Some(e) = f.error {
            failed = true;
            eprintln!("error: session {id}: {e}");
        }
    }
    stdout.flush()?;
    // As grep: 0 when something matched, 1 when nothing did (or a session
    // could not be searched).
    Ok(if matched > 0 && !failed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Searches the sessions on as many threads as there are cores, each
/// taking the next session; returns the results in `ids` order.
fn search_all(store: &Store, ids: &[SessionId], re: &Regex, a: &Args) -> Vec<Found> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(ids.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Found>>> = ids.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&id) = ids.get(i) else { return };
                let found = search_session(store, id, re, a);
                *results[i].lock().expect("no thread panics holding it") = Some(found);
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .expect("no thread panics holding it")
                .expect("every session searched")
        })
        .collect()
}

fn search_session(store: &Store, id: SessionId, re: &Regex, a: &Args) -> Found {
    let mut found = Found {
        out: Vec::new(),
        lines: 0,
        error: None,
    };
    // A read-only view: no lock, no recovery, nothing written.
    let log = match store.read_log(id) {
        Ok(log) => log,
        Err(e) => {
            found.error = Some(e.to_string());
            return found;
        }
    };
    let snap = log.snapshot();
    for rec in snap.iter() {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                found.error = Some(e.to_string());
                break;
            }
        };
        if !a.kinds.is_empty() && !a.kinds.contains(&rec.kind) {
            continue;
        }
        let (seq, kind) = (rec.seq, rec.kind.name());
        let mut write_err = None;
        let mut on_text = |text: &str| {
            if write_err.is_some() || !re.is_match(text) {
                return;
            }
            for (line_no, line, before, after) in matching_lines(text, re, a.context) {
                found.lines += 1;
                if a.count {
                    continue;
                }
                let hit = Hit {
                    session: id,
                    seq,
                    kind,
                    line_no,
                    line: clip(line, re),
                    before: before.iter().map(|l| clip(l, re)).collect(),
                    after: after.iter().map(|l| clip(l, re)).collect(),
                };
                if let Err(e) = write_hit(&mut found.out, &hit, a.json) {
                    write_err = Some(e);
                }
            }
        };
        rec.entry().searchable_texts(&mut on_text);
        // Items kept in the store's payload area are searched there.
        let payloads = rec.for_each_payload_item(&mut |item| item.searchable_texts(&mut on_text));
        if let Err(e) = payloads {
            found.error = Some(e.to_string());
            break;
        }
        if let Some(e) = write_err {
            found.error = Some(e.to_string());
            break;
        }
    }
    if a.count && found.lines > 0 {
        let _ = writeln!(found.out, "{id}\t{}", found.lines);
    }
    found
}

/// Each line of `text` with a match (once, however many matches it has),
/// with `context` lines around it.
fn matching_lines<'a>(
    text: &'a str,
    re: &Regex,
    context: usize,
) -> Vec<(usize, &'a str, Vec<&'a str>, Vec<&'a str>)> {
    let lines: Vec<&str> = text.lines().collect();
    // Where each line starts, to place a match's offset on its line.
    let mut starts = Vec::with_capacity(lines.len());
    let mut at = 0;
    for line in &lines {
        starts.push(at);
        at += line.len() + 1;
        if text.as_bytes().get(at - 1) == Some(&b'\r') {
            at += 1;
        }
    }
    let mut hits = Vec::new();
    let mut last_line = None;
    for m in re.find_iter(text) {
        let line = starts
            .partition_point(|&s| s <= m.start())
            .saturating_sub(1);
        if last_line == Some(line) || line >= lines.len() {
            continue;
        }
        last_line = Some(line);
        hits.push((
            line + 1,
            lines[line],
            lines[line.saturating_sub(context)..line].to_vec(),
            lines[line + 1..(line + 1 + context).min(lines.len())].to_vec(),
        ));
    }
    hits
}

fn write_hit(out: &mut Vec<u8>, hit: &Hit<'_>, json: bool) -> std::io::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, hit)?;
        return writeln!(out);
    }
    let at = format!("{} {} {}", hit.session, hit.seq, hit.kind);
    for line in &hit.before {
        writeln!(out, "{at}-{line}")?;
    }
    writeln!(out, "{at}:{}", hit.line)?;
    for line in &hit.after {
        writeln!(out, "{at}-{line}")?;
    }
    if !hit.before.is_empty() || !hit.after.is_empty() {
        writeln!(out, "--")?;
    }
    Ok(())
}

/// A line cut to a readable length (tool outputs can be one huge line):
/// the part around its first match, if it has one.
fn clip<'a>(line: &'a str, re: &Regex) -> &'a str {
    const MAX: usize = 400;
    if line.len() <= MAX {
        return line;
    }
    let from = re
        .find(line)
        .map_or(0, |m| m.start().saturating_sub(MAX / 4));
    let mut start = from;
    while !line.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + MAX).min(line.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[start..end]
}
