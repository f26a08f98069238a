//! The store contract on the real embedded engine. (A server adapter runs the same tests.)

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use cairn_models::{Partition, PointKind, Scope, StoredPoint, TrustOrigin};
use cairn_store::{
    EdgeStore, Filter, MemoryStore, SearchMode, SearchRequest, StoreConfig, UpsertPoint,
};
use uuid::Uuid;

const DIM: usize = 8;
/// The real model's dimension, for the tests whose vectors must pass the engine's indexing
/// threshold (10 MB) in a few thousand points.
const BIG: usize = 384;

fn scope(tenant: &str) -> Scope {
    Scope::new(tenant, "u", "n", "a", "s").unwrap()
}

fn unit(seed: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM)
        .map(|i| ((i * 7 + seed * 13) % 11) as f32 + 0.5)
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn point(s: &Scope, i: usize, text: &str) -> UpsertPoint {
    let mut p = StoredPoint::new(
        PointKind::Chunk,
        s,
        TrustOrigin::Document,
        1_700_000_000_000 + i as i64,
    );
    p.text = Some(text.to_string());
    p.source = Some(format!("src-{i}"));
    p.doc_id = Some(format!("doc{i}"));
    p.chunk_index = Some(0);
    UpsertPoint {
        id: Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("{}-{i}", s.tenant).as_bytes()),
        dense: Some(unit(i)),
        bm25_text: Some(text.to_string()),
        sparse: None,
        payload: p,
    }
}

fn open(dir: &std::path::Path) -> EdgeStore {
    EdgeStore::open(&StoreConfig::new(dir, DIM)).unwrap()
}

fn req(mode: SearchMode) -> SearchRequest {
    SearchRequest {
        mode,
        filter: Filter::new().eq("kind", "chunk"),
        limit: 10,
        with_vectors: true,
    }
}

const TEXTS: [&str; 4] = [
    "the quick brown fox jumps",
    "a lazy dog sleeps in the sun",
    "quantum chromodynamics of quarks",
    "invoice INV-2024-001 was paid",
];

#[tokio::test]
async fn search_scope_persistence_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let a = scope("tenant-a");
    let b = scope("tenant-b");
    {
        let store = open(dir.path());
        let mut pts: Vec<UpsertPoint> = TEXTS
            .iter()
            .enumerate()
            .map(|(i, t)| point(&a, i, t))
            .collect();
        pts.push(point(&b, 9, "the quick brown fox of tenant b"));
        store.upsert(pts).await.unwrap();

        // Read-your-writes, dense: the exact vector of point 2 ranks it first.
        let hits = store
            .search(&a.partition(), req(SearchMode::Dense(unit(2))))
            .await
            .unwrap();
        assert_eq!(hits[0].point.doc_id.as_deref(), Some("doc2"));
        assert!(hits[0].dense.is_some());
        assert!(
            hits.iter().all(|h| h.point.tenant == "tenant-a"),
            "scope leak"
        );

        // BM25 finds the identifier.
        let hits = store
            .search(
                &a.partition(),
                req(SearchMode::Sparse("INV-2024-001".into())),
            )
            .await
            .unwrap();
        assert_eq!(hits[0].point.doc_id.as_deref(), Some("doc3"));

        // Hybrid fusion inside Qdrant.
        let hits = store
            .search(
                &a.partition(),
                req(SearchMode::Hybrid {
                    dense: unit(1),
                    text: "lazy dog".into(),
                    prefetch: 10,
                    k: 60,
                    weights: (1.0, 1.0),
                }),
            )
            .await
            .unwrap();
        assert_eq!(hits[0].point.doc_id.as_deref(), Some("doc1"));

        // Tenant B sees only its own point, even for a query matching A's text.
        let hits = store
            .search(
                &b.partition(),
                req(SearchMode::Sparse("quick brown fox".into())),
            )
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].point.tenant, "tenant-b");
        assert_eq!(store.count(&a.partition(), Filter::new()).await.unwrap(), 4);

        // Retrieve across partitions returns nothing; delete_ids across partitions deletes nothing.
        let b_id = Uuid::new_v5(&Uuid::NAMESPACE_OID, b"tenant-b-9");
        assert!(store
            .retrieve(&a.partition(), &[b_id], false)
            .await
            .unwrap()
            .is_empty());
        store.delete_ids(&a.partition(), vec![b_id]).await.unwrap();
        assert_eq!(store.count(&b.partition(), Filter::new()).await.unwrap(), 1);
        store.flush().await.unwrap();
    }
    // Reopen: same content, same answers.
    let store = open(dir.path());
    assert_eq!(store.count_all().await.unwrap(), 5);
    let hits = store
        .search(&a.partition(), req(SearchMode::Dense(unit(2))))
        .await
        .unwrap();
    assert_eq!(hits[0].point.doc_id.as_deref(), Some("doc2"));

    // Filtered delete and not-equal filters.
    store
        .delete_where(&a.partition(), Filter::new().not_eq("doc_id", "doc0"))
        .await
        .unwrap();
    assert_eq!(store.count(&a.partition(), Filter::new()).await.unwrap(), 1);
    assert_eq!(store.count(&b.partition(), Filter::new()).await.unwrap(), 1);

    // Records without vectors (registry) can be stored and scrolled.
    let mut rec = StoredPoint::new(PointKind::Document, &a, TrustOrigin::Document, 1);
    rec.source = Some("x".into());
    store
        .upsert(vec![UpsertPoint::record(Uuid::new_v4(), rec)])
        .await
        .unwrap();
    let (page, _) = store
        .scroll(
            &a.partition(),
            Filter::new().eq("kind", "document"),
            10,
            None,
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    // Registry records never show up in searches filtered to chunks.
    let hits = store
        .search(&a.partition(), req(SearchMode::Dense(unit(0))))
        .await
        .unwrap();
    assert!(hits.iter().all(|h| h.point.kind == PointKind::Chunk));
    // Time ranges.
    let n = store
        .count(
            &a.partition(),
            Filter::new().range("ts", Some(1_700_000_000_000.0), None),
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert!(store.optimize().await.is_ok());
    let hits = store
        .search(&a.partition(), req(SearchMode::Dense(unit(0))))
        .await
        .unwrap();
    assert_eq!(hits[0].point.doc_id.as_deref(), Some("doc0"));
}

#[tokio::test]
async fn wrong_dimension_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let s = scope("t");
    let mut p = point(&s, 0, "x");
    p.dense = Some(vec![1.0; DIM + 1]);
    let err = store.upsert(vec![p]).await.unwrap_err();
    assert_eq!(err.kind(), cairn_models::ErrorKind::BadInput);
    drop(store);
    // Reopening with another dimension is refused, not silently corrupted.
    let err = EdgeStore::open(&StoreConfig::new(dir.path(), DIM * 2)).unwrap_err();
    assert!(
        err.to_string().contains("8-d") || err.to_string().contains("Some(8)"),
        "{err}"
    );
    let _ = Partition {
        tenant: "t".into(),
        user: "u".into(),
        namespace: "n".into(),
    };
}

/// The child half of [`acknowledged_writes_survive_kill_9`]: when `CAIRN_STORE_CRASH_DIR`
/// is set, writes points forever (upserts, and deletes of every fifth earlier point, with an
/// index build running beside them) and prints `ack <i>` after each acknowledged write, until
/// the parent kills it. Without the variable it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_writer() {
    let Some(dir) = std::env::var_os("CAIRN_STORE_CRASH_DIR") else {
        return;
    };
    use std::io::Write;
    // A tiny checkpoint threshold: the journal is flushed into the shard and emptied every
    // few writes, so the kills also land during and right after checkpoints.
    let store = std::sync::Arc::new(
        EdgeStore::open(&StoreConfig {
            checkpoint_bytes: 16 * 1024,
            ..StoreConfig::new(std::path::Path::new(&dir), DIM)
        })
        .unwrap(),
    );
    let start: usize = std::env::var("CAIRN_STORE_CRASH_START")
        .unwrap()
        .parse()
        .unwrap();
    let s = scope("crash");
    {
        let store = std::sync::Arc::clone(&store);
        tokio::spawn(async move {
            loop {
                store.optimize().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
    }
    let mut out = std::io::stdout();
    for i in start.. {
        store
            .upsert(vec![point(&s, i, &format!("point number {i}"))])
            .await
            .unwrap();
        writeln!(out, "ack upsert {i}").unwrap();
        if i % 5 == 4 {
            store
                .delete_where(
                    &s.partition(),
                    Filter::new().eq("doc_id", format!("doc{}", i - 2)),
                )
                .await
                .unwrap();
            writeln!(out, "ack delete {}", i - 2).unwrap();
        }
        out.flush().unwrap();
    }
}

/// `kill -9` of a process writing to the embedded store, at random moments, several times
/// over the same data directory: every write the store acknowledged is there after the
/// restart (deleted points stay deleted), without any explicit flush.
#[test]
fn acknowledged_writes_survive_kill_9() {
    use std::collections::BTreeSet;
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut present: BTreeSet<usize> = BTreeSet::new();
    let mut deleted: BTreeSet<usize> = BTreeSet::new();
    // Points whose delete was in flight at a kill (neither must be present nor deleted).
    let mut unknown: BTreeSet<usize> = BTreeSet::new();
    let mut start = 0usize;
    let rounds = 6;
    for round in 0..rounds {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "edge_store::crash_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CAIRN_STORE_CRASH_DIR", dir.path())
            .env("CAIRN_STORE_CRASH_START", start.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Kill after a varying number of acknowledgements (and so at a varying moment).
        let kill_after = 40 + (round * 37) % 90;
        let mut acks = 0;
        let mut lines = std::io::BufReader::new(stdout).lines();
        // The last acknowledgement read: after `ack upsert i` with `i % 5 == 4` the child's
        // next write is the delete of `i - 2`, which the kill may land after or before.
        let mut last = None;
        let mut record = |line: &str, last: &mut Option<(bool, usize)>| -> bool {
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next(), parts.next()) {
                (Some("ack"), Some("upsert"), Some(i)) => {
                    let i: usize = i.parse().unwrap();
                    present.insert(i);
                    start = i + 1;
                    *last = Some((true, i));
                    true
                }
                (Some("ack"), Some("delete"), Some(i)) => {
                    let i: usize = i.parse().unwrap();
                    present.remove(&i);
                    deleted.insert(i);
                    *last = Some((false, i));
                    true
                }
                _ => false,
            }
        };
        for line in lines.by_ref() {
            if record(&line.unwrap(), &mut last) {
                acks += 1;
                if acks >= kill_after {
                    break;
                }
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The child kept writing until the signal: what it acknowledged meanwhile is still in
        // the pipe, and counts too (an unread delete of an acknowledged point is not a loss).
        for line in lines {
            let Ok(line) = line else { break };
            record(&line, &mut last);
        }
        // The one write in flight at the kill may or may not be there; a delete in flight
        // makes its point's state unknown from here on.
        if let Some((true, i)) = last {
            if i % 5 == 4 && present.remove(&(i - 2)) {
                unknown.insert(i - 2);
            }
        }
        let journal_bytes = std::fs::metadata(dir.path().join(cairn_store::JOURNAL_FILE))
            .map(|m| m.len())
            .unwrap_or(0);
        // Every write before the kill is covered: some by checkpoints, the rest by the journal
        // (which checkpoints kept small).
        assert!(
            journal_bytes < 256 * 1024,
            "journal not checkpointed: {journal_bytes} bytes"
        );
        // Writes acknowledged after we stopped reading are not counted; a write the child
        // had not acknowledged may or may not be there.
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = open(dir.path());
            let s = scope("crash");
            let ids: Vec<Uuid> = present
                .iter()
                .map(|i| Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("crash-{i}").as_bytes()))
                .collect();
            let found = store.retrieve(&s.partition(), &ids, false).await.unwrap();
            let lost = ids.len() - found.len();
            let dead: Vec<Uuid> = deleted
                .iter()
                .map(|i| Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("crash-{i}").as_bytes()))
                .collect();
            let back = store.retrieve(&s.partition(), &dead, false).await.unwrap();
            println!(
                "round {round}: journal at the kill {journal_bytes} bytes; acknowledged points {} lost {lost}; deleted {} resurrected {}; in flight at a kill {}",
                ids.len(),
                dead.len(),
                back.len(),
                unknown.len()
            );
            assert_eq!(lost, 0, "acknowledged writes lost after kill -9");
            assert!(back.is_empty(), "acknowledged deletes undone after kill -9");
            // Searches work on the recovered store.
            let hits = store
                .search(
                    &s.partition(),
                    req(SearchMode::Sparse("point number".into())),
                )
                .await
                .unwrap();
            assert!(!hits.is_empty());
            drop(store);
        });
    }
    assert!(
        present.len() > 100,
        "the writer made progress: {}",
        present.len()
    );
}

/// A data directory laid out by `main` at 4219785 (before the on-disk layout and patched
/// qdrant-edge): `cairn --data-dir D --tenant t --user u ingest legacy.md` with that build,
/// one Markdown file, packed as `tests/data/datadir-4219785.tgz`. It opens, keeps its all-RAM
/// layout (its own `edge_config.json`), answers both legs, takes new writes and opens again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_of_main_4219785_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/datadir-4219785.tgz");
    let status = std::process::Command::new("tar")
        .arg("xzf")
        .arg(&fixture)
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "tar xzf {}", fixture.display());
    let data = dir.path().join("legacy-dir");
    let config_before = std::fs::read_to_string(data.join("qdrant/edge_config.json")).unwrap();
    let legacy = Scope::new("t", "u", "default", "default", "default").unwrap();
    let partition = legacy.partition();
    let dim = 384;
    let stored = {
        let store = EdgeStore::open(&StoreConfig::new(&data, dim)).unwrap();
        let chunks = store
            .count(&partition, Filter::new().eq("kind", "chunk"))
            .await
            .unwrap();
        assert_eq!(chunks, 1, "the one chunk the old build wrote");
        let (hits, _) = store
            .scroll(&partition, Filter::new().eq("kind", "chunk"), 10, None)
            .await
            .unwrap();
        let text = hits[0].point.text.clone().unwrap();
        assert!(text.contains("lighthouse keeper"), "{text}");
        let with_vector = store
            .retrieve(&partition, &[hits[0].id], true)
            .await
            .unwrap();
        let v = with_vector[0].dense.clone().expect("its vector");
        assert_eq!(v.len(), dim);
        let dense = store
            .search(&partition, req(SearchMode::Dense(v.clone())))
            .await
            .unwrap();
        assert_eq!(dense.first().map(|h| h.id), Some(hits[0].id));
        let sparse = store
            .search(
                &partition,
                req(SearchMode::Sparse("lighthouse tide".into())),
            )
            .await
            .unwrap();
        assert_eq!(sparse.first().map(|h| h.id), Some(hits[0].id));
        // A new write next to the old data.
        let mut p = point(&legacy, 1, "ferry timetable for the winter season");
        p.dense = Some(v.iter().rev().copied().collect());
        store.upsert(vec![p]).await.unwrap();
        store.flush().await.unwrap();
        store.count_all().await.unwrap()
    };
    let store = EdgeStore::open(&StoreConfig::new(&data, dim)).unwrap();
    assert_eq!(store.count_all().await.unwrap(), stored);
    let sparse = store
        .search(&partition, req(SearchMode::Sparse("ferry winter".into())))
        .await
        .unwrap();
    assert!(sparse[0].point.text.as_deref().unwrap().contains("ferry"));
    assert_eq!(
        std::fs::read_to_string(data.join("qdrant/edge_config.json")).unwrap(),
        config_before,
        "an old directory keeps its layout"
    );
}

/// A new data directory gets the bounded-memory layout: vectors, sparse index and payload
/// on disk, the HNSW graph in RAM, int8 vectors memory-mapped (prefaulted on load: see
/// `int8_copies_are_mapped_and_prefaulted_when_a_segment_loads`), and of the payload indexes
/// only those that every recall's filter checks (the partition's fields, `kind`, `keys`) in
/// RAM.
#[tokio::test]
async fn a_new_data_directory_keeps_vectors_on_disk_and_the_graph_in_ram() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("qdrant/edge_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["on_disk_payload"], true);
    assert_eq!(config["vectors"]["dense"]["on_disk"], true);
    assert_eq!(config["sparse_vectors"]["bm25"]["on_disk"], true);
    assert_eq!(config["hnsw_config"]["on_disk"], false);
    assert_eq!(config["quantization_config"]["scalar"]["type"], "int8");
    assert_eq!(config["quantization_config"]["scalar"]["always_ram"], false);
    // Each segment records its payload indexes' settings (a new store has its appendable
    // segment only).
    let segments: Vec<_> = std::fs::read_dir(dir.path().join("qdrant/segments"))
        .unwrap()
        .map(|e| e.unwrap().path().join("payload_index/config.json"))
        .filter(|p| p.exists())
        .collect();
    assert!(!segments.is_empty(), "a segment with payload indexes");
    for config in segments {
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
        let fields = &config["indexed_fields"];
        for field in ["tenant", "user", "namespace", "kind", "keys"] {
            assert_eq!(fields[field]["type"], "keyword", "{field}: {fields}");
            assert_eq!(fields[field]["on_disk"], false, "{field} in RAM: {fields}");
        }
        for field in ["doc_id", "source", "session", "conversation_id"] {
            assert_eq!(fields[field]["on_disk"], true, "{field} on disk: {fields}");
        }
        assert_eq!(fields["tenant"]["is_tenant"], true);
        assert_eq!(fields["ts"]["on_disk"], true, "{fields}");
    }
}

/// A batch large enough to be prepared on rayon's pool (BM25 encoding and payloads, point by
/// point across threads, before the write lock) gives the store exactly what the same points
/// written one at a time give it; a bad point anywhere in such a batch refuses the whole
/// batch with a typed error and writes none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_prepared_in_parallel_matches_points_written_one_by_one() {
    const WORDS: [&str; 12] = [
        "invoice",
        "shipment",
        "berlin",
        "quarterly",
        "audit",
        "coffee",
        "release",
        "vendor",
        "backup",
        "policy",
        "sprint",
        "director",
    ];
    let s = scope("t");
    let points: Vec<UpsertPoint> = (0..200)
        .map(|i| {
            let text: Vec<&str> = (0..6).map(|k| WORDS[(i * 7 + k * k * 3) % 12]).collect();
            point(&s, i, &format!("{} item{i}", text.join(" ")))
        })
        .collect();
    let (batched_dir, single_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (batched, single) = (open(batched_dir.path()), open(single_dir.path()));
    batched.upsert(points.clone()).await.unwrap();
    for p in points.clone() {
        single.upsert(vec![p]).await.unwrap();
    }
    let partition = s.partition();
    // Every match, in id order: many texts share their words, and the order among equal
    // scores is the engine's internal one, not part of the contract.
    let all = |query: &str| SearchRequest {
        limit: 1000,
        ..req(SearchMode::Sparse(query.into()))
    };
    for query in [
        "invoice berlin",
        "quarterly audit coffee",
        "item17",
        "release vendor",
    ] {
        let mut a = batched.search(&partition, all(query)).await.unwrap();
        let mut b = single.search(&partition, all(query)).await.unwrap();
        assert!(!a.is_empty(), "{query}: no hits");
        a.sort_by_key(|h| h.id);
        b.sort_by_key(|h| h.id);
        let scored = |h: &[cairn_store::Hit]| h.iter().map(|h| (h.id, h.score)).collect::<Vec<_>>();
        assert_eq!(scored(&a), scored(&b), "{query}");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.point, y.point);
            assert_eq!(x.dense, y.dense);
        }
    }

    // One bad sparse vector (two indices, one weight) in a batch of 64 new points.
    let mut bad: Vec<UpsertPoint> = (1000..1064)
        .map(|i| point(&s, i, "a batch that must not land"))
        .collect();
    bad[40].sparse = Some(cairn_store::SparseVector {
        indices: vec![1, 2],
        values: vec![0.5],
    });
    let before = batched.count_all().await.unwrap();
    let err = batched.upsert(bad.clone()).await.unwrap_err();
    assert_eq!(err.kind(), cairn_models::ErrorKind::BadInput, "{err}");
    assert!(err.to_string().contains(&bad[40].id.to_string()), "{err}");
    assert_eq!(batched.count_all().await.unwrap(), before);
    let ids: Vec<Uuid> = bad.iter().map(|p| p.id).collect();
    assert!(batched
        .retrieve(&partition, &ids, false)
        .await
        .unwrap()
        .is_empty());
}

/// Each query with its hits as (id, score), sorted by id.
type Answers = Vec<(String, Vec<(Uuid, f32)>)>;

/// Each query's BM25 hits (all of them, up to `limit`) as (id, score), by id.
async fn sparse_answers(
    store: &EdgeStore,
    partition: &Partition,
    queries: &[String],
    limit: usize,
) -> Answers {
    let mut all = Vec::new();
    for q in queries {
        let hits = store
            .search(
                partition,
                SearchRequest {
                    mode: SearchMode::Sparse(q.clone()),
                    filter: Filter::new().eq("kind", "chunk"),
                    limit,
                    with_vectors: false,
                },
            )
            .await
            .unwrap();
        let mut scored: Vec<(Uuid, f32)> = hits.iter().map(|h| (h.id, h.score)).collect();
        scored.sort_by_key(|h| h.0);
        all.push((q.clone(), scored));
    }
    all
}

/// Every file named `name` under `dir`, at any depth.
fn files_named(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                found.push(path);
            }
        }
    }
    found
}

/// A deterministic xorshift stream: test data without a random-number crate.
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// A unit vector of `dim` coordinates drawn from `next`.
fn random_unit(next: &mut impl FnMut() -> u64, dim: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dim).map(|_| (next() % 1000) as f32 - 500.0).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// Each stage's answers are `want`'s: the same hits in the same order, scores equal to
/// within float rounding.
fn assert_same_answers(want: &Answers, stages: &[(&str, &Answers)]) {
    for (stage, got) in stages {
        for ((q, want), (_, got)) in want.iter().zip(got.iter()) {
            assert_eq!(want.len(), got.len(), "{stage}: {q}");
            for ((a, x), (b, y)) in want.iter().zip(got) {
                assert_eq!(a, b, "{stage}: {q}");
                assert!(
                    (x - y).abs() <= 1e-4 * x.abs().max(1.0),
                    "{stage}: {q}: {x} vs {y}"
                );
            }
        }
    }
}

/// Writes points `range` of `s` in batches of 1,000, point `i` with the text `text(i, next)`
/// and a random `BIG`-d unit vector from `next`, which is appended to `vectors`.
async fn write_random_points(
    store: &EdgeStore,
    s: &Scope,
    range: std::ops::Range<usize>,
    next: &mut impl FnMut() -> u64,
    vectors: &mut Vec<Vec<f32>>,
    text: impl Fn(usize, &mut dyn FnMut() -> u64) -> String,
) {
    let mut batch = Vec::new();
    for i in range {
        let mut p = point(s, i, &text(i, next));
        let dense = random_unit(next, BIG);
        vectors.push(dense.clone());
        p.dense = Some(dense);
        batch.push(p);
        if batch.len() == 1000 {
            store.upsert(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    store.upsert(batch).await.unwrap();
}

/// `n` random `BIG`-d points of `scope("t")` written to a store in `dir` and built into an
/// indexed segment (past the engine's 10 MB indexing threshold, so `optimize` builds one with
/// an HNSW graph and int8 copies); their vectors, in point order.
async fn built_store(
    dir: &std::path::Path,
    n: usize,
    seed: u64,
    text: impl Fn(usize, &mut dyn FnMut() -> u64) -> String,
) -> (StoreConfig, EdgeStore, Vec<Vec<f32>>) {
    let config = StoreConfig::new(dir, BIG);
    let store = EdgeStore::open(&config).unwrap();
    let mut next = xorshift(seed);
    let mut vectors = Vec::with_capacity(n);
    write_random_points(&store, &scope("t"), 0..n, &mut next, &mut vectors, text).await;
    assert!(store.optimize().await.unwrap(), "the points were built");
    (config, store, vectors)
}

/// For each probe `i`, a dense query for `vectors[i]` answers point `i` (of `scope("t")`)
/// first, its hits ordered by score.
async fn assert_points_find_themselves(
    store: &EdgeStore,
    partition: &Partition,
    vectors: &[Vec<f32>],
    probes: &[usize],
    stage: &str,
) {
    for &i in probes {
        let hits = store
            .search(
                partition,
                SearchRequest {
                    mode: SearchMode::Dense(vectors[i].clone()),
                    filter: Filter::new().eq("kind", "chunk"),
                    limit: 10,
                    with_vectors: false,
                },
            )
            .await
            .unwrap();
        assert!(
            hits.windows(2).all(|w| w[0].score >= w[1].score),
            "{stage}: ordered"
        );
        let want = Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("t-{i}").as_bytes());
        assert_eq!(hits[0].id, want, "{stage}: point {i} finds itself");
    }
}

/// The on-disk BM25 index an index build writes (patch 0004 of qdrant-edge: built a range of
/// dimensions per pass over the vectors, in bounded memory, instead of every posting in RAM
/// twice) answers every query as the appendable segment's in-RAM index did before the build,
/// same hits and scores, and again after a restart; here with a pass budget so small that the
/// build makes dozens of passes, one of them over a list longer than the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bm25_index_built_in_bounded_passes_answers_as_before() {
    const N: usize = 8_000;
    // Past the engine's indexing threshold (10 MB of vectors), so `optimize` builds an
    // indexed segment with the on-disk sparse index.
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig::new(dir.path(), BIG);
    let store = EdgeStore::open(&config).unwrap();
    let s = scope("t");
    let partition = s.partition();
    // Deterministic words: "common" in 3 of 4 texts (a list far over the budget), then a
    // skewed draw over 500 more, so lists run from one posting to thousands.
    let syllables = ["ka", "lo", "mi", "ne", "pu", "ra", "si", "to", "vu", "ze"];
    let word = |i: usize| {
        format!(
            "{}{}{}x",
            syllables[i % 10],
            syllables[(i / 10) % 10],
            syllables[(i / 100) % 10]
        )
    };
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut batch = Vec::new();
    for i in 0..N {
        let mut words = Vec::new();
        if i % 4 != 0 {
            words.push("common".to_string());
        }
        for _ in 0..8 {
            let r = (next() % 1000) as usize;
            words.push(word(r * r / 2000));
        }
        let text = words.join(" ");
        let mut p = point(&s, i, &text);
        p.dense = Some(random_unit(&mut next, BIG));
        batch.push(p);
        if batch.len() == 1000 {
            store.upsert(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    let queries: Vec<String> = (0..40)
        .map(|q| match q % 4 {
            0 => word(q * 3),
            1 => format!("{} {}", word(q), word(q * 7 % 500)),
            2 => format!("{} {} {}", word(q * 11 % 500), word(q + 200), word(499 - q)),
            _ => format!("common {}", word(q * 13 % 500)),
        })
        .collect();
    let before = sparse_answers(&store, &partition, &queries, N).await;
    assert!(before.iter().all(|(_, hits)| !hits.is_empty()));
    assert!(before.iter().any(|(_, hits)| hits.len() > 4_000));

    // Process-wide: another test of this binary building an index meanwhile makes more
    // passes too, with the same index.
    qdrant_edge::set_sparse_build_pass_postings(2_000);
    assert!(store.optimize().await.unwrap(), "an index build ran");
    assert!(
        !files_named(dir.path(), "inverted_index.dat").is_empty(),
        "the build wrote an on-disk BM25 index"
    );
    let after = sparse_answers(&store, &partition, &queries, N).await;
    // A checkpoint first, so that opening replays no journal: replayed writes would add
    // points to the appendable segment, and the engine counts replaced points in its BM25
    // statistics (`deletes_keep_counting_in_edge_idf`), which would move every score.
    store.flush().await.unwrap();
    drop(store);
    let reopened =
        sparse_answers(&EdgeStore::open(&config).unwrap(), &partition, &queries, N).await;
    assert_same_answers(
        &before,
        &[("after the build", &after), ("after a restart", &reopened)],
    );
}

/// A shard with two large segments (patch 0005 of qdrant-edge searches each on its own
/// thread): an indexed one and a large appendable one beside it. Every BM25 answer (all hits,
/// ids and scores) is the one the same points give once the second half is built too, and
/// again after a restart; a dense query for any stored vector finds that point first, in
/// whichever segment it lies, and every list comes back ordered by score.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_segments_searched_side_by_side_answer_as_one() {
    // Each half above the patch's 16,384-point threshold, and its vectors past the engine's
    // indexing threshold (10 MB), so `optimize` builds the first half into an indexed segment.
    const HALF: usize = 17_000;
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig::new(dir.path(), BIG);
    let store = EdgeStore::open(&config).unwrap();
    let s = scope("t");
    let partition = s.partition();
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let word = |i: u64| format!("w{i}x");
    let mut vectors = Vec::with_capacity(2 * HALF);
    let text = |i: usize, next: &mut dyn FnMut() -> u64| {
        let words: Vec<String> = (0..6).map(|_| word(next() % 2_000)).collect();
        format!("{} only{i}", words.join(" "))
    };
    write_random_points(&store, &s, 0..HALF, &mut next, &mut vectors, text).await;
    assert!(store.optimize().await.unwrap(), "the first half was built");
    write_random_points(&store, &s, HALF..2 * HALF, &mut next, &mut vectors, text).await;
    assert!(
        store.segments().unwrap() >= 2,
        "an indexed segment and the appendable one"
    );

    // Words shared across both halves, and each point's own word: one query's hits lie in
    // both segments.
    let queries: Vec<String> = (0..30)
        .map(|q| match q % 3 {
            0 => word(q * 61 % 2_000),
            1 => format!("{} {}", word(q * 7), word(1_999 - q)),
            _ => format!("only{} only{} {}", q * 11, HALF as u64 + q * 13, word(q)),
        })
        .collect();
    let side_by_side = sparse_answers(&store, &partition, &queries, 2 * HALF).await;
    assert!(side_by_side.iter().all(|(_, hits)| !hits.is_empty()));
    let first: std::collections::HashSet<Uuid> = (0..HALF)
        .map(|i| Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("t-{i}").as_bytes()))
        .collect();
    let in_first = |id: &Uuid| first.contains(id);
    assert!(
        side_by_side
            .iter()
            .any(|(_, hits)| hits.iter().any(|h| in_first(&h.0))
                && hits.iter().any(|h| !in_first(&h.0))),
        "some answer joins hits from both segments"
    );

    let probes: Vec<usize> = (0..20).map(|k| k * 1_699 % (2 * HALF)).collect();
    assert_points_find_themselves(&store, &partition, &vectors, &probes, "two segments").await;

    assert!(store.optimize().await.unwrap(), "the second half was built");
    let built = sparse_answers(&store, &partition, &queries, 2 * HALF).await;
    store.flush().await.unwrap();
    drop(store);
    let store = EdgeStore::open(&config).unwrap();
    let reopened = sparse_answers(&store, &partition, &queries, 2 * HALF).await;
    assert_same_answers(
        &side_by_side,
        &[("once built", &built), ("after a restart", &reopened)],
    );
    assert_points_find_themselves(&store, &partition, &vectors, &probes, "after a restart").await;
}

/// Resident and anonymous bytes of this process's mappings of `file`, from
/// `/proc/self/smaps` (Linux): the kernel's own count of which pages are mapped.
#[cfg(target_os = "linux")]
fn mapped_bytes(file: &std::path::Path) -> (u64, u64) {
    let file = file.canonicalize().unwrap();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let (mut rss, mut anon, mut inside) = (0, 0, false);
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: `start-end perms offset dev inode [path]`.
            inside = line.split_whitespace().nth(5).map(std::path::Path::new) == Some(&file);
        } else if inside {
            let kib = |l: &str| -> u64 { l.split_whitespace().nth(1).unwrap().parse().unwrap() };
            if line.starts_with("Rss:") {
                rss += kib(line) * 1024;
            } else if line.starts_with("Anonymous:") {
                anon += kib(line) * 1024;
            }
        }
    }
    (rss, anon)
}

/// The int8 copies of a built segment are a memory-mapped file (`always_ram: false`), and
/// the engine prefaults them when the segment loads (qdrant-edge patch 0006), both right
/// after an index build and when the store re-opens: before any search has touched them,
/// every page is mapped into the process, as file pages, not anonymous memory. Dense
/// searches over them find each stored vector first, before and after the restart.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn int8_copies_are_mapped_and_prefaulted_when_a_segment_loads() {
    const N: usize = 8_000;
    let dir = tempfile::tempdir().unwrap();
    let text = |i: usize, _: &mut dyn FnMut() -> u64| format!("note number {i}");
    let (config, store, vectors) = built_store(dir.path(), N, 0x9e37_79b9_7f4a_7c15, text).await;
    let partition = scope("t").partition();

    let copies = files_named(&dir.path().join("qdrant"), "quantized.data");
    assert_eq!(
        copies.len(),
        1,
        "one built segment with int8 copies: {copies:?}"
    );
    let size = std::fs::metadata(&copies[0]).unwrap().len();
    assert!(
        size >= (N * BIG) as u64,
        "{size} bytes for {N} int8 vectors"
    );
    let resident = |stage: &str| {
        let (rss, anon) = mapped_bytes(&copies[0]);
        // Whole pages: the mapping's last page may hold less than 4 KiB of the file.
        assert!(
            rss >= size / 4096 * 4096,
            "{stage}: {rss} of {size} bytes of int8 copies mapped before any search"
        );
        assert_eq!(anon, 0, "{stage}: the copies are file pages");
    };
    resident("after the build");

    let probes: Vec<usize> = (0..20).map(|k| k * 397 % N).collect();
    assert_points_find_themselves(&store, &partition, &vectors, &probes, "after the build").await;
    store.flush().await.unwrap();
    drop(store);
    assert_eq!(
        mapped_bytes(&copies[0]),
        (0, 0),
        "a closed store unmaps its copies"
    );

    let store = EdgeStore::open(&config).unwrap();
    resident("after a restart");
    assert_points_find_themselves(&store, &partition, &vectors, &probes, "after a restart").await;
}

/// Pages of `file` in the page cache, and its pages: `fincore` (util-linux), which maps the
/// file and asks `mincore`, faulting nothing in.
#[cfg(target_os = "linux")]
fn cached_pages(file: &std::path::Path) -> (u64, u64) {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "PAGES,SIZE"])
        .arg(file)
        .output()
        .expect("fincore (util-linux) runs");
    assert!(out.status.success(), "fincore {}: {out:?}", file.display());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap());
    let (cached, size) = (fields.next().unwrap(), fields.next().unwrap());
    (cached, size.div_ceil(4096))
}

/// Drops `file`'s clean pages from the page cache, as a reboot or the segment builder's
/// `clear_cache` would: `dd iflag=nocache count=0` is coreutils' documented way to advise
/// `POSIX_FADV_DONTNEED` for a whole file.
#[cfg(target_os = "linux")]
fn evict(file: &std::path::Path) {
    std::fs::File::open(file).unwrap().sync_all().unwrap();
    let status = std::process::Command::new("dd")
        .arg(format!("if={}", file.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .expect("dd runs");
    assert!(status.success(), "dd nocache {}", file.display());
}

/// What recall reads for every hit, the full vectors and the payload pages of the built
/// segments, is in the page cache after an index build and after a re-open, even when it
/// was evicted while the store was closed (`cairn_store::warm`): a recall at 1M chunks
/// otherwise faulted them in from disk one 4 KiB page at a time. The reads map nothing, so
/// none of it is the process's memory. The store lives under the target directory, not a
/// tmpfs `/tmp`, where nothing can be evicted.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_and_payloads_are_in_the_page_cache_after_a_build_and_a_reopen() {
    const N: usize = 8_000;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let text = |i: usize, _: &mut dyn FnMut() -> u64| format!("memo {i} about the warm cache");
    let (config, store, vectors) = built_store(dir.path(), N, 0x51_7cc1_b727_220a, text).await;
    let partition = scope("t").partition();

    let files = cairn_store::warm::hit_files(&dir.path().join("qdrant"));
    let named = |suffix: &str| {
        files
            .iter()
            .filter(|(p, _)| p.to_string_lossy().contains(suffix))
            .count()
    };
    assert_eq!(named("vector_storage-dense/matrix.dat"), 1, "{files:?}");
    assert!(named("payload_storage/page_") >= 1, "{files:?}");
    let matrix = files
        .iter()
        .find(|(p, _)| p.ends_with("vector_storage-dense/matrix.dat"))
        .unwrap();
    assert!(
        matrix.1 >= (N * BIG * 4) as u64,
        "{} bytes of full vectors for {N} points",
        matrix.1
    );
    let all_cached = |stage: &str| {
        for (p, _) in &files {
            let (cached, pages) = cached_pages(p);
            assert_eq!(
                cached,
                pages,
                "{stage}: {} pages cached of {}",
                cached,
                p.display()
            );
        }
    };
    all_cached("after the build");

    let probes: Vec<usize> = (0..20).map(|k| k * 389 % N).collect();
    assert_points_find_themselves(&store, &partition, &vectors, &probes, "after the build").await;
    store.flush().await.unwrap();
    drop(store);
    for (p, _) in &files {
        evict(p);
    }
    let (cached, pages) = cached_pages(&matrix.0);
    assert!(
        cached < pages / 2,
        "the eviction took: {cached} of {pages} pages of full vectors still cached"
    );

    let store = EdgeStore::open(&config).unwrap();
    all_cached("after a re-open");
    let (rss, anon) = mapped_bytes(&matrix.0);
    assert_eq!(anon, 0, "the full vectors are file pages");
    assert!(
        rss < matrix.1 / 2,
        "read, not mapped: {rss} bytes of {} mapped before any search",
        matrix.1
    );
    assert_points_find_themselves(&store, &partition, &vectors, &probes, "after a re-open").await;
}

/// What a point of [`scope_filters_hold_in_single_scope_mixed_and_appendable_segments`] is.
#[derive(Clone, Copy)]
struct Written {
    i: usize,
    message: bool,
    gamma: bool,
    deleted: bool,
}

fn written_id(tenant: &str, i: usize) -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("{tenant}-{i}").as_bytes())
}

/// Writes points `range` of `tenant`: every fifth a message, every third with the word
/// "gamma", all with "alpha".
async fn write_scoped(
    store: &EdgeStore,
    tenant: &str,
    range: std::ops::Range<usize>,
    next: &mut impl FnMut() -> u64,
    written: &mut Vec<(String, Written)>,
) {
    let s = scope(tenant);
    let mut batch = Vec::new();
    for i in range {
        let w = Written {
            i,
            message: i % 5 == 0,
            gamma: i % 3 == 0,
            deleted: false,
        };
        let text = if w.gamma {
            format!("alpha gamma w{i}")
        } else {
            format!("alpha w{i}")
        };
        let mut p = point(&s, i, &text);
        if w.message {
            p.payload.kind = PointKind::Message;
        }
        p.dense = Some(random_unit(next, BIG));
        batch.push(p);
        written.push((tenant.to_string(), w));
        if batch.len() == 1000 {
            store.upsert(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    store.upsert(batch).await.unwrap();
}

/// Each tenant's live points that `keep` accepts, by id.
fn expected(
    written: &[(String, Written)],
    tenant: &str,
    keep: impl Fn(&Written) -> bool,
) -> std::collections::BTreeSet<Uuid> {
    written
        .iter()
        .filter(|(t, w)| t == tenant && !w.deleted && keep(w))
        .map(|(t, w)| written_id(t, w.i))
        .collect()
}

/// `got == want`, and if not, a readable failure: the sizes and a few ids missing and extra.
fn assert_same_ids(
    got: &std::collections::BTreeSet<Uuid>,
    want: &std::collections::BTreeSet<Uuid>,
    what: &str,
) {
    if got != want {
        let missing: Vec<_> = want.difference(got).take(3).collect();
        let extra: Vec<_> = got.difference(want).take(3).collect();
        panic!(
            "{what}: {} ids, {} expected; missing {} (e.g. {missing:?}), extra {} (e.g. {extra:?})",
            got.len(),
            want.len(),
            want.difference(got).count(),
            got.difference(want).count(),
        );
    }
}

async fn assert_scopes_answer_exactly(
    store: &EdgeStore,
    written: &[(String, Written)],
    next: &mut impl FnMut() -> u64,
    stage: &str,
) {
    let kinds = || Filter::new().any_of("kind", vec!["chunk".into(), "message".into()]);
    for tenant in ["a", "b", "c"] {
        let partition = scope(tenant).partition();
        let ids = |hits: Vec<cairn_store::Hit>| -> std::collections::BTreeSet<Uuid> {
            hits.into_iter().map(|h| h.id).collect()
        };
        let sparse = |text: &str, filter: Filter| SearchRequest {
            mode: SearchMode::Sparse(text.into()),
            filter,
            limit: 100_000,
            with_vectors: false,
        };
        // Every live point of the scope has "alpha": the BM25 leg finds all of them, and
        // nothing of another scope, whichever segment holds them.
        let all = ids(store
            .search(&partition, sparse("alpha", kinds()))
            .await
            .unwrap());
        let want = expected(written, tenant, |_| true);
        assert_same_ids(&all, &want, &format!("{stage}: {tenant}: alpha"));
        let messages = Filter::new().eq("kind", "message");
        let got = ids(store
            .search(&partition, sparse("gamma", messages.clone()))
            .await
            .unwrap());
        let want = expected(written, tenant, |w| w.gamma && w.message);
        assert_same_ids(&got, &want, &format!("{stage}: {tenant}: gamma messages"));
        let chunks = store
            .count(&partition, Filter::new().eq("kind", "chunk"))
            .await
            .unwrap();
        let want = expected(written, tenant, |w| !w.message).len();
        assert_eq!(chunks, want, "{stage}: {tenant}: count");
        let scrolled = ids(store.scroll_all(&partition, messages).await.unwrap());
        let want = expected(written, tenant, |w| w.message);
        assert_same_ids(&scrolled, &want, &format!("{stage}: {tenant}: scroll"));

        let scope_ids = expected(written, tenant, |_| true);
        let dense = store
            .search(
                &partition,
                SearchRequest {
                    mode: SearchMode::Dense(random_unit(next, BIG)),
                    filter: kinds(),
                    limit: 50,
                    with_vectors: false,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            dense.len(),
            scope_ids.len().min(50),
            "{stage}: {tenant}: dense"
        );
        assert!(
            dense.iter().all(|h| scope_ids.contains(&h.id)),
            "{stage}: {tenant}: a dense hit outside the scope"
        );
        // Look-ups by id, every id ever written (deleted, other scopes') and unknown ones.
        let mut asked: Vec<Uuid> = written.iter().map(|(t, w)| written_id(t, w.i)).collect();
        asked.extend((0..500).map(|i| written_id("unknown", i)));
        asked.extend([Uuid::nil(), Uuid::max()]);
        let got = ids(store.retrieve(&partition, &asked, false).await.unwrap());
        assert_same_ids(&got, &scope_ids, &format!("{stage}: {tenant}: retrieve"));
    }
}

/// Scope and kind filters answer exactly, and ids resolve exactly, in every kind of segment:
/// one built from a single scope (where the engine skips the conditions every point meets,
/// qdrant-edge patch 0007), one built from two scopes (the optimizer may merge the first into
/// it), the same with deleted points, and an appendable segment that holds one scope; and
/// again after a re-open. Checked against what was written, point by point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_filters_hold_in_single_scope_mixed_and_appendable_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig::new(dir.path(), BIG);
    let store = EdgeStore::open(&config).unwrap();
    let mut next = xorshift(0x5eed_f11e);
    let mut written = Vec::new();
    // A segment of scope "a" alone (past the indexing threshold: built with indexes).
    write_scoped(&store, "a", 0..7_000, &mut next, &mut written).await;
    assert!(
        store.optimize().await.unwrap(),
        "the first segment was built"
    );
    assert_scopes_answer_exactly(&store, &written, &mut next, "one scope").await;
    // A segment of both scopes.
    write_scoped(&store, "b", 0..7_000, &mut next, &mut written).await;
    write_scoped(&store, "a", 7_000..7_500, &mut next, &mut written).await;
    assert!(
        store.optimize().await.unwrap(),
        "the second segment was built"
    );
    assert_scopes_answer_exactly(&store, &written, &mut next, "two segments").await;
    // Deletions in the mixed segment (of both scopes), then points of one scope in the
    // appendable segment only.
    for (tenant, range) in [("a", 7_000..7_500), ("b", 0..7_000)] {
        let doomed: Vec<usize> = range.filter(|i| i % 11 == 0).collect();
        let ids = doomed.iter().map(|&i| written_id(tenant, i)).collect();
        store
            .delete_ids(&scope(tenant).partition(), ids)
            .await
            .unwrap();
        for (t, w) in written.iter_mut() {
            if t == tenant && doomed.contains(&w.i) {
                w.deleted = true;
            }
        }
    }
    write_scoped(&store, "b", 7_000..7_300, &mut next, &mut written).await;
    let segments = store.segments().unwrap_or(0);
    assert!(segments >= 2, "built and appendable segments: {segments}");
    assert_scopes_answer_exactly(&store, &written, &mut next, "deletions, appendable").await;

    store.flush().await.unwrap();
    drop(store);
    let store = EdgeStore::open(&config).unwrap();
    assert_scopes_answer_exactly(&store, &written, &mut next, "after a re-open").await;
}
