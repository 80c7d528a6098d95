//! Archive throughput against a real S3-compatible server (`s3s-fs`, in
//! process on a loopback port), each figure beside its baseline from the
//! same run:
//!
//! - `Archive::push` of one session vs plain `object_store` puts of the same
//!   bytes (its segment files, as objects of the same sizes, as many at once);
//! - `Archive::pull` (download, full check, staging, catalog, rename) vs
//!   plain gets of the same objects into memory;
//! - `Buffered` appends through `Store` with continuous archival on
//!   (`Archiver` as `on_seal`) vs without, and vs the server's share alone
//!   (plain `object_store` puts of each sealed segment's size as it seals,
//!   no session-store code on the upload path): the bound of what archival
//!   to an in-process server can cost on this machine. The modes run in a
//!   rotated order, each after a `sync`; the archiver's own threads' CPU
//!   time is read from `/proc/self/task` and printed per segment and as a
//!   share of the appends' wall time.
//!
//! `ARCHIVE_BENCH_MB` sets the session's size (default 1024: 1 GB);
//! `ARCHIVE_BENCH_RUNS` the runs per figure (default 3). Medians are printed.
//!
//! ```text
//! cargo bench --features archive --bench archive
//! ARCHIVE_BENCH_MB=64 cargo bench --features archive --bench archive
//! ```
#![allow(missing_docs)]

#[path = "../tests/s3/mod.rs"]
mod s3;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
use session_store::{
    archive::Archiver, archive::RestorePoint, Archive, Item, LogOptions, RequestConfig, SessionId,
    Store, StoreOptions,
};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// One turn of a coding agent: a question, a tool call and its output, an answer.
fn turn(n: usize) -> Vec<Item> {
    let call_id = format!("call_{n}");
    vec![
        Item::user_text(format!("step {n}: look at the next file")),
        Item::ToolCall {
            extra: Default::default(),
            id: None,
            call_id: call_id.clone(),
            name: "read_file".into(),
            arguments: format!(r#"{{"path":"src/module_{n}.rs"}}"#),
            status: None,
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id,
            summary: String::new(),
            content: Some(format!("fn item_{n}() -> u64 {{ {n} }}\n").repeat(120)),
        },
        Item::assistant_text(format!("Module {n} defines one function. ").repeat(8)),
    ]
}

/// Appends turns until the session holds `bytes`; returns the bytes.
fn fill(store: &Store, id: SessionId, bytes: u64) -> u64 {
    let mut head = store.head(id).unwrap().unwrap();
    let mut n = 0;
    loop {
        store.save_delta(id, &mut head, &turn(n)).unwrap();
        n += 1;
        if n % 64 == 0 {
            let b = store.info(id).unwrap().unwrap().bytes;
            if b >= bytes {
                return b;
            }
        }
    }
}

fn main() {
    let mb = env_u64("ARCHIVE_BENCH_MB", 1024);
    let runs = env_u64("ARCHIVE_BENCH_RUNS", 3) as usize;
    let server = s3::S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (id, _) = store
        .create_session(
            Some("You are a coding agent."),
            RequestConfig::model("gpt-5"),
            &[],
        )
        .unwrap();
    let t = Instant::now();
    let data = fill(&store, id, mb << 20);
    store.sync(id).unwrap();
    eprintln!(
        "archive: built a {} MB session in {:.1?}",
        data >> 20,
        t.elapsed()
    );

    let plain = Archive::open_with(&server.url("plain"), server.options()).unwrap();
    let os: Arc<dyn ObjectStore> = plain.object_store().clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The bytes a push moves, for the baseline: the objects of a first push,
    // read back into memory.
    let probe = Archive::open_with(&server.url("probe"), server.options()).unwrap();
    probe.push(&store, id).unwrap();
    let objects: Vec<bytes::Bytes> = rt.block_on(async {
        let prefix = ObjectPath::from(format!("probe/{id}"));
        let mut metas: Vec<_> = os.list(Some(&prefix)).try_collect().await.unwrap();
        metas.retain(|m| m.location.as_ref().ends_with(".seg"));
        metas.sort_by(|a, b| a.location.cmp(&b.location));
        let mut out = Vec::new();
        for m in metas {
            out.push(os.get(&m.location).await.unwrap().bytes().await.unwrap());
        }
        out
    });
    let total: u64 = objects.iter().map(|o| o.len() as u64).sum();

    let (mut put_base, mut put_ours, mut get_base, mut get_ours) = (vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        // Baseline put: the same objects, four at once, created.
        let prefix = format!("plain/{run}");
        let t = Instant::now();
        rt.block_on(
            futures_util::stream::iter(objects.iter().enumerate())
                .map(|(i, b)| {
                    let os = os.clone();
                    let path = ObjectPath::from(format!("{prefix}/{i:020}.seg"));
                    let b = b.clone();
                    async move {
                        os.put_opts(
                            &path,
                            PutPayload::from_bytes(b),
                            PutOptions::from(PutMode::Create),
                        )
                        .await
                    }
                })
                .buffer_unordered(4)
                .try_collect::<Vec<_>>(),
        )
        .unwrap();
        put_base.push(t.elapsed());

        let a = Archive::open_with(&server.url(&format!("ours/{run}")), server.options()).unwrap();
        let t = Instant::now();
        a.push(&store, id).unwrap();
        put_ours.push(t.elapsed());

        let t = Instant::now();
        let got: Vec<bytes::Bytes> = rt
            .block_on(
                futures_util::stream::iter(0..objects.len())
                    .map(|i| {
                        let os = os.clone();
                        let path = ObjectPath::from(format!("{prefix}/{i:020}.seg"));
                        async move { os.get(&path).await?.bytes().await }
                    })
                    .buffered(4)
                    .try_collect(),
            )
            .unwrap();
        get_base.push(t.elapsed());
        assert_eq!(got.iter().map(|b| b.len() as u64).sum::<u64>(), total);
        drop(got);

        let to = tempfile::tempdir().unwrap();
        let other = Store::open(to.path()).unwrap();
        let t = Instant::now();
        a.pull(&other, id, RestorePoint::Latest).unwrap();
        get_ours.push(t.elapsed());
    }

    // Continuous archival: Buffered appends with and without it, the three
    // modes in a rotated order each run, each run started after a `sync` so
    // that no run pays for the writeback of the one before.
    let append_mb = env_u64("ARCHIVE_BENCH_APPEND_MB", (mb / 4).clamp(16, 256));
    let archive = Archive::open_with(&server.url("continuous"), server.options()).unwrap();
    let (mut plain_app, mut with_app, mut bound_app) = (vec![], vec![], vec![]);
    // The CPU time of the archiver's own threads (upload worker and the
    // archive's runtime) per Archived run, and the segments it uploaded.
    let mut own_cpu: Vec<(Duration, Duration, u64)> = vec![];
    // The whole process's CPU time per run (appends, uploads and the
    // in-process server), from the first append until every upload is done.
    let (mut cpu_plain, mut cpu_with, mut cpu_share) = (vec![], vec![], vec![]);
    // The server's share alone: as each segment seals, a background thread
    // puts an object of the segment's size (bytes made beforehand) to the
    // same server through plain `object_store`: no file read, sync, hash,
    // check or manifest, no session-store code on the upload path.
    let blob = bytes::Bytes::from(vec![7u8; 8 << 20]);
    let continuous_runs = runs.max(5);
    for run in 0..continuous_runs {
        let mut order = [Mode::Plain, Mode::Archived, Mode::ServerShare];
        order.rotate_left(run % 3);
        for mode in order {
            let d = tempfile::tempdir().unwrap();
            let archiver = Archiver::start(archive.clone()).unwrap();
            let (tx, rx) = std::sync::mpsc::channel::<u64>();
            let mut log = LogOptions::default().segment_size(8 << 20);
            match mode {
                Mode::Plain => {}
                Mode::Archived => log = log.on_seal(archiver.observer()),
                Mode::ServerShare => {
                    let tx = std::sync::Mutex::new(tx.clone());
                    log = log.on_seal(Arc::new(move |seg: &session_store::log::SealedSegment| {
                        let _ = tx.lock().unwrap().send(seg.len_bytes);
                    }));
                }
            }
            drop(tx);
            let putter = {
                let os = os.clone();
                let blob = blob.clone();
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                        .unwrap();
                    let mut n = 0u64;
                    while let Ok(len) = rx.recv() {
                        let path = ObjectPath::from(format!("share/{run}/{n:020}.seg"));
                        let body = blob.slice(..(len as usize).min(blob.len()));
                        rt.block_on(os.put(&path, PutPayload::from_bytes(body)))
                            .unwrap();
                        n += 1;
                    }
                    n
                })
            };
            let s = Store::open_with(d.path(), StoreOptions::default().log(log)).unwrap();
            let (id, _) = s
                .create_session(None, RequestConfig::model("gpt-5"), &[])
                .unwrap();
            settle();
            let cpu_before = archiver_cpu();
            let proc_before = process_cpu();
            let t = Instant::now();
            let bytes = fill(&s, id, append_mb << 20);
            let el = t.elapsed();
            drop(s);
            let shared = putter.join().unwrap();
            let proc_cpu = |before: Option<Duration>| Some(process_cpu()?.saturating_sub(before?));
            match mode {
                Mode::Plain => {
                    plain_app.push((el, bytes));
                    cpu_plain.extend(proc_cpu(proc_before));
                }
                Mode::Archived => {
                    with_app.push((el, bytes));
                    assert!(archiver.wait_idle(Duration::from_secs(600)));
                    assert_eq!(archiver.status().failed, 0);
                    cpu_with.extend(proc_cpu(proc_before));
                    // Read before the drop ends the worker thread.
                    if let (Some(a), Some(b)) = (cpu_before, archiver_cpu()) {
                        own_cpu.push((b.saturating_sub(a), el, archiver.status().uploaded));
                    }
                }
                Mode::ServerShare => {
                    assert!(shared > 0, "segments sealed");
                    bound_app.push((el, bytes));
                    cpu_share.extend(proc_cpu(proc_before));
                }
            }
        }
    }
    let rate = |v: &Vec<(Duration, u64)>| {
        let mut r: Vec<f64> = v.iter().map(|(d, b)| mbps(*b, *d)).collect();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        r[r.len() / 2]
    };

    let row = |name: &str, ours: Duration, base: Duration| {
        let (o, b) = (mbps(total, ours), mbps(total, base));
        println!(
            "{name:<6} {:>10.1} {:>14.1} {:>7.2}   {:>8.2?} {:>8.2?}",
            o,
            b,
            o / b,
            ours,
            base
        );
    };
    println!();
    println!(
        "archive of one {} MB session ({} objects, {} bytes), s3s-fs on 127.0.0.1, median of {runs}",
        data >> 20,
        objects.len(),
        total
    );
    println!(
        "{:<6} {:>10} {:>14} {:>7}   {:>8} {:>8}",
        "", "ours MB/s", "object_store", "ratio", "ours", "plain"
    );
    row("push", median(put_ours), median(put_base));
    row("pull", median(get_ours), median(get_base));
    let (p, w) = (rate(&plain_app), rate(&with_app));
    println!();
    println!(
        "Buffered appends, {append_mb} MB per run, 8 MiB segments, median of {}",
        plain_app.len()
    );
    println!("without archival {p:>8.1} MB/s");
    println!(
        "with continuous  {w:>8.1} MB/s  ({:+.1}%, {} segments uploaded in the last run)",
        (w / p - 1.0) * 100.0,
        own_cpu.last().map_or(0, |c| c.2)
    );
    let b = rate(&bound_app);
    println!(
        "server's share   {b:>8.1} MB/s  ({:+.1}%: plain object_store puts of each sealed segment's size, no session-store code)",
        (b / p - 1.0) * 100.0
    );
    if own_cpu.is_empty() {
        println!("archiver's own CPU: not measured (no /proc/self/task here)");
    } else {
        // The archiver's CPU over the appends' wall time: what it can take
        // from the writers at most, when every core is busy.
        let mut share: Vec<f64> = own_cpu
            .iter()
            .map(|(cpu, el, _)| cpu.as_secs_f64() / el.as_secs_f64() * 100.0)
            .collect();
        share.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut per_seg: Vec<f64> = own_cpu
            .iter()
            .map(|(cpu, _, n)| cpu.as_secs_f64() * 1e3 / (*n).max(1) as f64)
            .collect();
        per_seg.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "archiver's threads {:>6.1} ms CPU per 8 MiB segment, {:.1}% of the appends' wall time (user+system, at nice +{}: the sealed segment's sync, read, hash, upload and manifest)",
            per_seg[per_seg.len() / 2],
            share[share.len() / 2],
            session_store::archive::ARCHIVER_NICE
        );
    }
    if !cpu_plain.is_empty() && !cpu_with.is_empty() && !cpu_share.is_empty() {
        // What continuous archival costs beyond a plain put of the same
        // bytes to the same server, both counted with the server's work.
        let (cp, cw, cs) = (median(cpu_plain), median(cpu_with), median(cpu_share));
        let segments = own_cpu.last().map_or(1, |c| c.2).max(1);
        let extra = cw.as_secs_f64() - cs.as_secs_f64();
        println!(
            "process CPU per run: {:.2?} without archival, {:.2?} with continuous, {:.2?} with the server's share; \
             archival beyond a plain put: {:+.1} ms per segment, {:+.1}% of the appends' CPU",
            cp,
            cw,
            cs,
            extra * 1e3 / segments as f64,
            extra / cp.as_secs_f64() * 100.0
        );
    }
}

/// The CPU time (user + system) of the whole process so far; `None`
/// without `/proc`.
fn process_cpu() -> Option<Duration> {
    stat_cpu(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// utime + stime of a `/proc/.../stat` line. Linux counts them in clock
/// ticks of 1/100 s (USER_HZ).
fn stat_cpu(stat: &str) -> Option<Duration> {
    // The fields after the name's closing parenthesis: utime and stime are
    // the 12th and 13th of them.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(10) * ticks as u32)
}

/// Lets the writeback of the run before finish, so that no run pays for it.
fn settle() {
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(Duration::from_millis(200));
}

/// The CPU time (user + system) of the `Archiver`'s threads: its upload
/// worker and its runtime's, all named `session-store-uploader` (the kernel
/// keeps 15 bytes of a name: `session-store-u`). `None` without `/proc`.
fn archiver_cpu() -> Option<Duration> {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("session-store-u") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        total += stat_cpu(&stat).unwrap_or_default();
    }
    Some(total)
}

/// What runs beside the appends.
#[derive(Clone, Copy)]
enum Mode {
    /// Nothing.
    Plain,
    /// Continuous archival (`Archiver` as `on_seal`).
    Archived,
    /// Plain `object_store` puts of each sealed segment's size.
    ServerShare,
}
