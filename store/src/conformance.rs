//! The conformance suite of [`MemoryStore`]: what every implementation must do, as tests.
//!
//! Why: Cairn's invariants (every read inside the partition, idempotent writes, stable
//! paging) are properties of the seam, not of one engine. A backend proves them by passing
//! these cases, and the in-memory reference ([`crate::InMemoryStore`]) passes the same cases,
//! so "what the contract says" is executable.
//!
//! Use: each case is a public async function taking a factory that opens a store in a
//! directory (`open(dir)`; a store that keeps nothing on disk ignores it) and a fresh
//! directory. The [`memory_store_conformance!`](crate::memory_store_conformance) macro
//! generates one `#[tokio::test]` per case, so a failure names its case:
//!
//! ```ignore
//! mod edge {
//!     cairn_store::memory_store_conformance!(open = |dir: &std::path::Path| {
//!         cairn_store::EdgeStore::open(&cairn_store::StoreConfig::new(dir, cairn_store::conformance::DIM)).unwrap()
//!     }, persistent);
//! }
//! ```
//!
//! `persistent` adds [`reopen_keeps_everything`], which opens the same directory twice. The
//! calling crate needs `tokio` (with `macros`) and `tempfile`. Stores must be opened with
//! [`DIM`]-dimensional dense vectors and must be empty when opened on a fresh directory
//! (a server-backed store: one fresh collection per directory).
//!
//! Compiled always, not behind a feature: it is a few hundred lines with no dependency
//! beyond the crate's own, and a feature on `cairn-store` would make a second build variant
//! of the crate (and every crate above it) in workspace builds. The cases panic on failure,
//! as tests do; nothing outside tests calls them.
//!
//! Cases assert orderings that any faithful engine produces (the exact vector first, a rare
//! term first, the item strong in both legs first), never raw BM25 floats; the fusion case
//! pins Qdrant's RRF formula, which is exact arithmetic on ranks. Ties are never asserted.

use std::collections::BTreeSet;
use std::path::Path;

use cairn_models::{ErrorKind, Partition, PointKind, Scope, StoredPoint, TrustOrigin};
use uuid::Uuid;

use crate::{Filter, Hit, MemoryStore, SearchMode, SearchRequest, UpsertPoint, SCROLL_PAGE};

/// Dense dimension every store under test must be opened with.
pub const DIM: usize = 8;

/// Generates one `#[tokio::test]` per conformance case in the calling module.
///
/// `open` is an expression of type `impl Fn(&Path) -> S` where `S: MemoryStore`; add
/// `persistent` for stores that must keep their data across a reopen of the same path.
#[macro_export]
macro_rules! memory_store_conformance {
    (open = $open:expr) => {
        $crate::memory_store_conformance!(open = $open, when = true);
    };
    (open = $open:expr, persistent) => {
        $crate::memory_store_conformance!(open = $open, persistent, when = true);
    };
    (open = $open:expr, persistent, when = $when:expr) => {
        $crate::memory_store_conformance!(open = $open, when = $when);
        $crate::memory_store_conformance!(@cases $open; $when; reopen_keeps_everything);
    };
    (open = $open:expr, when = $when:expr) => {
        $crate::memory_store_conformance!(@cases $open; $when;
            scoping_no_operation_crosses_partitions,
            filter_cannot_widen_the_partition,
            upsert_same_id_is_one_point_and_overwrites,
            upsert_replaces_vectors,
            duplicate_ids_in_one_batch_last_wins,
            filter_eq,
            filter_not_eq_is_true_when_absent,
            filter_any_of,
            filter_range,
            filters_are_anded,
            scroll_orders_by_id_and_pages,
            scroll_all_returns_every_match,
            delete_ids_only_inside_partition,
            delete_where_by_filter,
            counts_are_exact,
            retrieve_keeps_order_and_skips_missing,
            dense_search_ranks_exact_vector_first,
            sparse_search_ranks_rare_identifier_first,
            sparse_idf_prefers_rarer_terms,
            hybrid_puts_item_strong_in_both_legs_first,
            hybrid_fusion_is_weighted_rrf,
            points_without_vectors_are_never_searched,
            wrong_vector_dimension_is_bad_input,
            export_copies_points_with_their_vectors,
            lock_excludes_concurrent_holders
        );
    };
    (@cases $open:expr; $when:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                // `when` is false for a backend that is not configured here (a server
                // store without CAIRN_QDRANT_URL): the case says so and does not run.
                if !$when {
                    eprintln!("{}: backend not configured, case not run", stringify!($case));
                    return;
                }
                let dir = tempfile::tempdir().expect("temporary directory");
                $crate::conformance::$case(&$open, dir.path()).await;
            }
        )+
    };
}

// ---------------------------------------------------------------------------------------
// Fixtures

/// A scope in partition (tenant, user, namespace).
fn scope(tenant: &str, user: &str, namespace: &str) -> Scope {
    Scope::new(tenant, user, namespace, "agent", "session").expect("valid test scope")
}

/// The point id of `key` in `scope`'s partition (distinct per partition).
fn pid(scope: &Scope, key: &str) -> Uuid {
    let name = format!("{}/{}/{}/{key}", scope.tenant, scope.user, scope.namespace);
    Uuid::new_v5(&Uuid::NAMESPACE_OID, name.as_bytes())
}

/// A dense vector, deliberately not normalized (its length grows with `seed`): cosine must
/// ignore magnitude. Distinct and non-collinear for seeds 0..11.
pub fn vector(seed: usize) -> Vec<f32> {
    (0..DIM)
        .map(|i| (((i * 7 + seed * 13) % 11) as f32 + 0.5) * (1.0 + seed as f32))
        .collect()
}

fn payload(scope: &Scope, kind: PointKind, key: &str, ts: i64) -> StoredPoint {
    let mut p = StoredPoint::new(kind, scope, TrustOrigin::Document, ts);
    p.doc_id = Some(key.to_string());
    p
}

/// A searchable chunk: dense vector `vector(seed)`, BM25 over `text`, `doc_id` = `key`.
fn chunk(scope: &Scope, key: &str, seed: usize, text: &str) -> UpsertPoint {
    let mut p = payload(scope, PointKind::Chunk, key, 1_000 + seed as i64);
    p.text = Some(text.to_string());
    p.source = Some(format!("src/{key}"));
    p.chunk_index = Some(0);
    UpsertPoint {
        id: pid(scope, key),
        dense: Some(vector(seed)),
        bm25_text: Some(text.to_string()),
        sparse: None,
        payload: p,
    }
}

/// A record without vectors (like a document registry entry), `doc_id` = `key`.
fn record(scope: &Scope, key: &str) -> UpsertPoint {
    UpsertPoint::record(pid(scope, key), payload(scope, PointKind::Document, key, 1))
}

fn keys(hits: &[Hit]) -> Vec<String> {
    hits.iter()
        .map(|h| h.point.doc_id.clone().unwrap_or_default())
        .collect()
}

fn key_set(hits: &[Hit]) -> BTreeSet<String> {
    keys(hits).into_iter().collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

async fn put<S: MemoryStore>(store: &S, points: Vec<UpsertPoint>) {
    store.upsert(points).await.expect("upsert");
}

/// The keys of the points of `partition` matching `filter`, checked three ways: by
/// `scroll_all`, by `count`, and with no duplicate.
async fn matching<S: MemoryStore>(
    store: &S,
    partition: &Partition,
    filter: Filter,
) -> BTreeSet<String> {
    let hits = store
        .scroll_all(partition, filter.clone())
        .await
        .expect("scroll_all");
    let found = key_set(&hits);
    assert_eq!(found.len(), hits.len(), "duplicate points for {filter:?}");
    let n = store.count(partition, filter.clone()).await.expect("count");
    assert_eq!(n, hits.len(), "count and scroll disagree for {filter:?}");
    found
}

fn request(mode: SearchMode, limit: usize) -> SearchRequest {
    SearchRequest {
        mode,
        filter: Filter::new(),
        limit,
        with_vectors: false,
    }
}

fn hybrid(dense: Vec<f32>, text: &str, weights: (f32, f32)) -> SearchMode {
    SearchMode::Hybrid {
        dense,
        text: text.to_string(),
        prefetch: 20,
        k: 60,
        weights,
    }
}

async fn search<S: MemoryStore>(store: &S, partition: &Partition, mode: SearchMode) -> Vec<Hit> {
    store
        .search(partition, request(mode, 20))
        .await
        .expect("search")
}

fn assert_descending(hits: &[Hit], what: &str) {
    for w in hits.windows(2) {
        assert!(
            w[0].score >= w[1].score,
            "{what}: scores not descending: {:?}",
            hits.iter().map(|h| h.score).collect::<Vec<_>>()
        );
    }
}

const TEXTS: [&str; 3] = [
    "the quick brown fox jumps",
    "a lazy dog sleeps in the sun",
    "invoice INV-2024-001 was paid",
];

// ---------------------------------------------------------------------------------------
// Scoping

/// Four partitions that differ by one component each hold the same content; no read,
/// search, count, scroll or delete of one touches another.
pub async fn scoping_no_operation_crosses_partitions<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let scopes = [
        scope("t1", "u1", "n1"),
        scope("t2", "u1", "n1"),
        scope("t1", "u2", "n1"),
        scope("t1", "u1", "n2"),
    ];
    for s in &scopes {
        let mut pts: Vec<UpsertPoint> = TEXTS
            .iter()
            .enumerate()
            .map(|(i, t)| chunk(s, &format!("c{i}"), i, t))
            .collect();
        pts.push(record(s, "r"));
        put(&store, pts).await;
    }
    let all_ids: Vec<Uuid> = scopes
        .iter()
        .flat_map(|s| ["c0", "c1", "c2", "r"].map(|k| pid(s, k)))
        .collect();
    for s in &scopes {
        let p = s.partition();
        let own: BTreeSet<Uuid> = ["c0", "c1", "c2", "r"].map(|k| pid(s, k)).into();
        let in_p = |hits: &[Hit], what: &str| {
            for h in hits {
                assert!(own.contains(&h.id), "{what} in {p:?} returned {}", h.id);
                assert_eq!(
                    (&h.point.tenant, &h.point.user, &h.point.namespace),
                    (&p.tenant, &p.user, &p.namespace),
                    "{what}: foreign payload"
                );
            }
        };
        assert_eq!(store.count(&p, Filter::new()).await.expect("count"), 4);
        let scrolled = store
            .scroll_all(&p, Filter::new())
            .await
            .expect("scroll_all");
        assert_eq!(scrolled.iter().map(|h| h.id).collect::<BTreeSet<_>>(), own);
        let (page, _) = store
            .scroll(&p, Filter::new(), 100, None)
            .await
            .expect("scroll");
        in_p(&page, "scroll");
        let dense = search(&store, &p, SearchMode::Dense(vector(1))).await;
        assert_eq!(dense.len(), 3, "dense search sees the partition's 3 chunks");
        in_p(&dense, "dense search");
        let sparse = search(&store, &p, SearchMode::Sparse("quick brown fox".into())).await;
        assert_eq!(sparse.len(), 1);
        in_p(&sparse, "sparse search");
        let fused = search(&store, &p, hybrid(vector(1), "invoice dog", (1.0, 1.0))).await;
        assert_eq!(fused.len(), 3);
        in_p(&fused, "hybrid search");
        let got = store.retrieve(&p, &all_ids, false).await.expect("retrieve");
        assert_eq!(got.len(), 4, "retrieve returns only the partition's ids");
        in_p(&got, "retrieve");
    }
    // Deletes by id and by filter from the first partition leave the others whole.
    let base = scopes[0].partition();
    store
        .delete_ids(&base, all_ids[4..].to_vec())
        .await
        .expect("delete_ids");
    assert_eq!(store.count_all().await.expect("count_all"), 16);
    store
        .delete_where(&base, Filter::new())
        .await
        .expect("delete_where");
    assert_eq!(store.count(&base, Filter::new()).await.expect("count"), 0);
    for s in &scopes[1..] {
        assert_eq!(
            store
                .count(&s.partition(), Filter::new())
                .await
                .expect("count"),
            4,
            "{:?} lost points to a delete in another partition",
            s.partition()
        );
    }
    assert_eq!(store.count_all().await.expect("count_all"), 12);
}

/// A filter naming another partition's scope fields finds nothing: it is ANDed with the
/// partition, never a replacement for it.
pub async fn filter_cannot_widen_the_partition<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let a = scope("ta", "u", "n");
    let b = scope("tb", "u", "n");
    put(
        &store,
        vec![chunk(&a, "a", 1, "alpha"), chunk(&b, "b", 2, "alpha")],
    )
    .await;
    let f = Filter::new().eq("tenant", "tb");
    assert!(matching(&store, &a.partition(), f.clone()).await.is_empty());
    let hits = store
        .search(
            &a.partition(),
            SearchRequest {
                filter: f.clone(),
                ..request(SearchMode::Sparse("alpha".into()), 10)
            },
        )
        .await
        .expect("search");
    assert!(hits.is_empty(), "a filter widened the partition");
    store
        .delete_where(&a.partition(), f)
        .await
        .expect("delete_where");
    assert_eq!(store.count_all().await.expect("count_all"), 2);
}

// ---------------------------------------------------------------------------------------
// Upserts

/// Writing the same id twice keeps one point; the second write's payload wins.
pub async fn upsert_same_id_is_one_point_and_overwrites<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let p = s.partition();
    put(&store, vec![chunk(&s, "a", 1, "alpha words")]).await;
    put(&store, vec![chunk(&s, "a", 1, "alpha words")]).await;
    assert_eq!(store.count(&p, Filter::new()).await.expect("count"), 1);
    let mut changed = chunk(&s, "a", 1, "omega terms");
    changed.payload.source = Some("src/changed".into());
    put(&store, vec![changed]).await;
    assert_eq!(store.count_all().await.expect("count_all"), 1);
    let got = store
        .retrieve(&p, &[pid(&s, "a")], false)
        .await
        .expect("retrieve");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].point.text.as_deref(), Some("omega terms"));
    assert_eq!(got[0].point.source.as_deref(), Some("src/changed"));
    // The old payload is gone from filters, the old text from BM25.
    assert!(matching(&store, &p, Filter::new().eq("source", "src/a"))
        .await
        .is_empty());
    assert!(search(&store, &p, SearchMode::Sparse("alpha".into()))
        .await
        .is_empty());
    assert_eq!(
        keys(&search(&store, &p, SearchMode::Sparse("omega".into())).await),
        ["a"]
    );
}

/// An upsert replaces the vectors too: a chunk re-written as a record leaves both searches.
pub async fn upsert_replaces_vectors<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let p = s.partition();
    put(
        &store,
        vec![chunk(&s, "a", 1, "zebra"), chunk(&s, "b", 2, "zebra")],
    )
    .await;
    put(&store, vec![record(&s, "a")]).await;
    assert_eq!(store.count(&p, Filter::new()).await.expect("count"), 2);
    assert_eq!(
        keys(&search(&store, &p, SearchMode::Dense(vector(1))).await),
        ["b"]
    );
    assert_eq!(
        keys(&search(&store, &p, SearchMode::Sparse("zebra".into())).await),
        ["b"]
    );
    // And a new dense vector moves the point: the exact query vector finds it first.
    put(&store, vec![chunk(&s, "b", 7, "zebra")]).await;
    let hits = search(&store, &p, SearchMode::Dense(vector(7))).await;
    assert_eq!(keys(&hits), ["b"]);
    assert!(
        (hits[0].score - 1.0).abs() < 1e-4,
        "cosine {}",
        hits[0].score
    );
}

/// Two points with the same id in one batch: one point, the later one's content.
pub async fn duplicate_ids_in_one_batch_last_wins<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    put(
        &store,
        vec![chunk(&s, "a", 1, "first"), chunk(&s, "a", 2, "second")],
    )
    .await;
    let got = store
        .retrieve(&s.partition(), &[pid(&s, "a")], false)
        .await
        .expect("retrieve");
    assert_eq!(store.count_all().await.expect("count_all"), 1);
    assert_eq!(got[0].point.text.as_deref(), Some("second"));
}

// ---------------------------------------------------------------------------------------
// Filters

/// p0: chunk, source s0, ts 100, metadata.pinned = true; p1: message, source s1, ts 200,
/// seq 1; p2: message, no source, ts 300, seq 2; p3: document record, source s0, ts 400.
async fn filter_fixture<S: MemoryStore>(store: &S) -> Scope {
    let s = scope("t", "u", "n");
    let mut p0 = chunk(&s, "p0", 0, "zero");
    p0.payload.ts = 100;
    p0.payload.source = Some("s0".into());
    p0.payload.metadata = Some(serde_json::json!({"pinned": true}));
    let mut p1 = payload(&s, PointKind::Message, "p1", 200);
    p1.source = Some("s1".into());
    p1.seq = Some(1);
    p1.conversation_id = Some("c".into());
    let mut p2 = payload(&s, PointKind::Message, "p2", 300);
    p2.seq = Some(2);
    p2.conversation_id = Some("c".into());
    let mut p3 = payload(&s, PointKind::Document, "p3", 400);
    p3.source = Some("s0".into());
    put(
        store,
        vec![
            p0,
            UpsertPoint::record(pid(&s, "p1"), p1),
            UpsertPoint::record(pid(&s, "p2"), p2),
            UpsertPoint::record(pid(&s, "p3"), p3),
        ],
    )
    .await;
    s
}

/// `Eq` on strings, integers and booleans (also in a nested object); a value of the wrong
/// type never matches.
pub async fn filter_eq<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let p = filter_fixture(&store).await.partition();
    let m = |f: Filter| matching(&store, &p, f);
    assert_eq!(
        m(Filter::new().eq("kind", "message")).await,
        set(&["p1", "p2"])
    );
    assert_eq!(
        m(Filter::new().eq("source", "s0")).await,
        set(&["p0", "p3"])
    );
    assert_eq!(m(Filter::new().eq("seq", 2i64)).await, set(&["p2"]));
    assert_eq!(m(Filter::new().eq("ts", 400i64)).await, set(&["p3"]));
    assert!(
        m(Filter::new().eq("seq", "2")).await.is_empty(),
        "string vs int"
    );
    assert!(
        m(Filter::new().eq("source", 0i64)).await.is_empty(),
        "int vs string"
    );
    let pinned = Filter {
        must: vec![crate::Cond::Eq(
            "metadata.pinned".into(),
            crate::Value::Bool(true),
        )],
    };
    assert_eq!(m(pinned).await, set(&["p0"]));
    assert!(m(Filter::new().eq("kind", "nothing")).await.is_empty());
}

/// `NotEq` is the negation of `Eq`: true where the field is absent.
pub async fn filter_not_eq_is_true_when_absent<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let p = filter_fixture(&store).await.partition();
    let m = |f: Filter| matching(&store, &p, f);
    assert_eq!(
        m(Filter::new().not_eq("source", "s0")).await,
        set(&["p1", "p2"])
    );
    assert_eq!(
        m(Filter::new().not_eq("seq", 1i64)).await,
        set(&["p0", "p2", "p3"])
    );
    assert_eq!(
        m(Filter::new().not_eq("kind", "nothing")).await,
        set(&["p0", "p1", "p2", "p3"])
    );
}

/// `AnyOf` matches any listed string; an empty list matches nothing.
pub async fn filter_any_of<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let p = filter_fixture(&store).await.partition();
    let m = |f: Filter| matching(&store, &p, f);
    let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        m(Filter::new().any_of("kind", list(&["chunk", "document"]))).await,
        set(&["p0", "p3"])
    );
    assert_eq!(
        m(Filter::new().any_of("source", list(&["s1", "zz"]))).await,
        set(&["p1"])
    );
    assert!(m(Filter::new().any_of("kind", vec![])).await.is_empty());
}

/// `Range` is inclusive at both ends, either end may be open, and only numbers match.
pub async fn filter_range<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let p = filter_fixture(&store).await.partition();
    let m = |f: Filter| matching(&store, &p, f);
    assert_eq!(
        m(Filter::new().range("ts", Some(200.0), None)).await,
        set(&["p1", "p2", "p3"])
    );
    assert_eq!(
        m(Filter::new().range("ts", None, Some(200.0))).await,
        set(&["p0", "p1"])
    );
    assert_eq!(
        m(Filter::new().range("ts", Some(200.0), Some(300.0))).await,
        set(&["p1", "p2"])
    );
    assert_eq!(
        m(Filter::new().range("ts", Some(250.5), None)).await,
        set(&["p2", "p3"])
    );
    assert_eq!(
        m(Filter::new().range("seq", Some(0.0), None)).await,
        set(&["p1", "p2"]),
        "absent fields are out of every range"
    );
    assert!(m(Filter::new().range("source", Some(0.0), None))
        .await
        .is_empty());
}

/// Conditions combine with AND.
pub async fn filters_are_anded<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let p = filter_fixture(&store).await.partition();
    let m = |f: Filter| matching(&store, &p, f);
    assert_eq!(
        m(Filter::new()
            .eq("kind", "message")
            .range("seq", Some(2.0), None))
        .await,
        set(&["p2"])
    );
    assert_eq!(
        m(Filter::new().eq("source", "s0").not_eq("kind", "chunk")).await,
        set(&["p3"])
    );
    assert!(m(Filter::new().eq("kind", "chunk").eq("kind", "message"))
        .await
        .is_empty());
}

// ---------------------------------------------------------------------------------------
// Scroll

/// Scroll is ordered by point id (UUID byte order); pages of any size concatenate to every
/// matching point once; `next` is the first id of the next page; a limit of 0 acts as 1.
pub async fn scroll_orders_by_id_and_pages<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let other = scope("t", "u", "other");
    let mut pts = Vec::new();
    for i in 0..10 {
        pts.push(if i % 2 == 0 {
            chunk(&s, &format!("k{i}"), i, "text")
        } else {
            record(&s, &format!("k{i}"))
        });
        pts.push(record(&other, &format!("k{i}")));
    }
    put(&store, pts).await;
    let p = s.partition();
    let expected: Vec<Uuid> = {
        let mut ids: Vec<Uuid> = (0..10).map(|i| pid(&s, &format!("k{i}"))).collect();
        ids.sort();
        ids
    };
    for size in [0usize, 1, 3, 4, 10, 11, 1000] {
        let mut got = Vec::new();
        let mut offset = None;
        let mut pages = 0;
        loop {
            let (page, next) = store
                .scroll(&p, Filter::new(), size, offset)
                .await
                .expect("scroll");
            pages += 1;
            assert!(pages <= 20, "scroll of page size {size} does not end");
            assert!(
                page.len() <= size.max(1),
                "page of {} for {size}",
                page.len()
            );
            got.extend(page.iter().map(|h| h.id));
            match next {
                Some(n) => {
                    assert_eq!(page.len(), size.max(1), "a short page with a next offset");
                    let pos = got.len();
                    assert_eq!(
                        Some(&n),
                        expected.get(pos),
                        "next is the first id of the next page"
                    );
                    offset = Some(n);
                }
                None => break,
            }
        }
        assert_eq!(got, expected, "page size {size}");
    }
    // Stable: the same scroll twice gives the same order; a filter keeps the order.
    let once = store
        .scroll_all(&p, Filter::new())
        .await
        .expect("scroll_all");
    let again = store
        .scroll_all(&p, Filter::new())
        .await
        .expect("scroll_all");
    assert_eq!(
        once.iter().map(|h| h.id).collect::<Vec<_>>(),
        again.iter().map(|h| h.id).collect::<Vec<_>>()
    );
    let chunks: Vec<Uuid> = store
        .scroll_all(&p, Filter::new().eq("kind", "chunk"))
        .await
        .expect("scroll_all")
        .iter()
        .map(|h| h.id)
        .collect();
    let mut want: Vec<Uuid> = (0..10)
        .step_by(2)
        .map(|i| pid(&s, &format!("k{i}")))
        .collect();
    want.sort();
    assert_eq!(chunks, want);
    // An offset that is no stored id starts at the first id after it.
    let from = expected[4];
    let mut before = from.into_bytes();
    before[15] = before[15].wrapping_sub(1);
    let start = if before[15] == 255 {
        from
    } else {
        Uuid::from_bytes(before)
    };
    let (page, _) = store
        .scroll(&p, Filter::new(), 100, Some(start))
        .await
        .expect("scroll");
    assert_eq!(
        page.iter().map(|h| h.id).collect::<Vec<_>>(),
        expected[4..].to_vec()
    );
}

/// The provided `scroll_all` crosses page boundaries: more points than one page.
pub async fn scroll_all_returns_every_match<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let n = SCROLL_PAGE * 2 + 7;
    let pts: Vec<UpsertPoint> = (0..n)
        .map(|i| {
            let mut r = record(&s, &format!("r{i}"));
            r.payload.seq = Some(i as u64);
            r
        })
        .collect();
    put(&store, pts).await;
    let p = s.partition();
    let all = store
        .scroll_all(&p, Filter::new())
        .await
        .expect("scroll_all");
    assert_eq!(all.len(), n);
    let ids: Vec<Uuid> = all.iter().map(|h| h.id).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(ids, sorted, "scroll_all is in id order without duplicates");
    let upper = store
        .scroll_all(
            &p,
            Filter::new().range("seq", Some(SCROLL_PAGE as f64), None),
        )
        .await
        .expect("scroll_all");
    assert_eq!(upper.len(), n - SCROLL_PAGE);
}

// ---------------------------------------------------------------------------------------
// Deletes and counts

/// `delete_ids` deletes the partition's ids and silently skips foreign and unknown ones.
pub async fn delete_ids_only_inside_partition<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let a = scope("ta", "u", "n");
    let b = scope("tb", "u", "n");
    put(
        &store,
        vec![
            chunk(&a, "a1", 1, "one"),
            chunk(&a, "a2", 2, "two"),
            record(&a, "a3"),
            chunk(&b, "b1", 1, "one"),
        ],
    )
    .await;
    store
        .delete_ids(&a.partition(), vec![])
        .await
        .expect("empty delete");
    store
        .delete_ids(
            &a.partition(),
            vec![pid(&a, "a1"), pid(&a, "a3"), pid(&b, "b1"), Uuid::new_v4()],
        )
        .await
        .expect("delete_ids");
    assert_eq!(
        matching(&store, &a.partition(), Filter::new()).await,
        set(&["a2"])
    );
    assert_eq!(
        matching(&store, &b.partition(), Filter::new()).await,
        set(&["b1"])
    );
    assert_eq!(
        keys(&search(&store, &a.partition(), SearchMode::Dense(vector(1))).await),
        ["a2"],
        "a deleted point left in the dense index"
    );
    assert!(
        search(&store, &a.partition(), SearchMode::Sparse("one".into()))
            .await
            .is_empty()
    );
    // Deleting again is a no-op.
    store
        .delete_ids(&a.partition(), vec![pid(&a, "a1")])
        .await
        .expect("delete_ids");
    assert_eq!(store.count_all().await.expect("count_all"), 2);
}

/// `delete_where` deletes exactly the partition's points matching the filter.
pub async fn delete_where_by_filter<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let other = scope("t", "u2", "n");
    put(
        &store,
        vec![
            chunk(&s, "c1", 1, "one"),
            chunk(&s, "c2", 2, "two"),
            record(&s, "r1"),
            record(&s, "keep"),
            chunk(&other, "c1", 1, "one"),
        ],
    )
    .await;
    let p = s.partition();
    store
        .delete_where(&p, Filter::new().eq("kind", "chunk"))
        .await
        .expect("delete_where");
    assert_eq!(
        matching(&store, &p, Filter::new()).await,
        set(&["r1", "keep"])
    );
    assert!(search(&store, &p, SearchMode::Sparse("one two".into()))
        .await
        .is_empty());
    store
        .delete_where(&p, Filter::new().not_eq("doc_id", "keep"))
        .await
        .expect("delete_where");
    assert_eq!(matching(&store, &p, Filter::new()).await, set(&["keep"]));
    // Matching nothing is fine.
    store
        .delete_where(&p, Filter::new().eq("kind", "nothing"))
        .await
        .expect("delete_where");
    assert_eq!(
        matching(&store, &other.partition(), Filter::new()).await,
        set(&["c1"])
    );
    assert_eq!(store.count_all().await.expect("count_all"), 2);
}

/// `count` is exact per partition and filter; `count_all` counts every partition.
pub async fn counts_are_exact<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let q = scope("t", "u", "m");
    let mut pts: Vec<UpsertPoint> = (0..7)
        .map(|i| chunk(&s, &format!("c{i}"), i, "text"))
        .collect();
    pts.extend((0..5).map(|i| record(&q, &format!("r{i}"))));
    pts.push(record(&s, "r"));
    put(&store, pts).await;
    let count = |p: Partition, f: Filter| {
        let store = &store;
        async move { store.count(&p, f).await.expect("count") }
    };
    assert_eq!(count(s.partition(), Filter::new()).await, 8);
    assert_eq!(
        count(s.partition(), Filter::new().eq("kind", "chunk")).await,
        7
    );
    assert_eq!(count(q.partition(), Filter::new()).await, 5);
    assert_eq!(
        count(q.partition(), Filter::new().eq("kind", "chunk")).await,
        0
    );
    assert_eq!(store.count_all().await.expect("count_all"), 13);
    put(&store, vec![chunk(&s, "c0", 3, "rewritten")]).await;
    assert_eq!(store.count_all().await.expect("count_all"), 13);
    store
        .delete_ids(&s.partition(), vec![pid(&s, "c1")])
        .await
        .expect("delete_ids");
    assert_eq!(count(s.partition(), Filter::new()).await, 7);
    assert_eq!(store.count_all().await.expect("count_all"), 12);
}

/// `retrieve` answers in the order asked, once per id, skipping missing ids; vectors only
/// when asked, and the dense vector keeps its direction.
pub async fn retrieve_keeps_order_and_skips_missing<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    put(
        &store,
        vec![
            chunk(&s, "a", 1, "a"),
            chunk(&s, "b", 2, "b"),
            record(&s, "c"),
        ],
    )
    .await;
    let p = s.partition();
    let ask = [
        pid(&s, "c"),
        Uuid::new_v4(),
        pid(&s, "a"),
        pid(&s, "b"),
        pid(&s, "a"),
    ];
    let got = store.retrieve(&p, &ask, false).await.expect("retrieve");
    assert_eq!(keys(&got), ["c", "a", "b"]);
    assert!(got.iter().all(|h| h.dense.is_none()));
    let got = store
        .retrieve(&p, &[pid(&s, "b"), pid(&s, "c")], true)
        .await
        .expect("retrieve");
    let dense = got[0].dense.as_ref().expect("dense vector asked for");
    let want = vector(2);
    let cos = cosine(dense, &want);
    assert!(
        (cos - 1.0).abs() < 1e-4,
        "stored vector changed direction: {cos}"
    );
    assert!(got[1].dense.is_none(), "a record has no dense vector");
    assert!(store
        .retrieve(&p, &[], true)
        .await
        .expect("retrieve")
        .is_empty());
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

// ---------------------------------------------------------------------------------------
// Search

/// Dense search is cosine: the exact direction ranks first with score ≈ 1 whatever its
/// length; scores descend; the limit, the filter and `with_vectors` are honoured.
pub async fn dense_search_ranks_exact_vector_first<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    put(
        &store,
        (0..10)
            .map(|i| chunk(&s, &format!("d{i}"), i, "text"))
            .collect(),
    )
    .await;
    let p = s.partition();
    for target in [0usize, 5, 9] {
        let q: Vec<f32> = vector(target).iter().map(|x| x * 0.01).collect();
        let hits = search(&store, &p, SearchMode::Dense(q)).await;
        assert_eq!(hits.len(), 10);
        assert_eq!(
            hits[0].point.doc_id.as_deref(),
            Some(format!("d{target}").as_str())
        );
        assert!(
            (hits[0].score - 1.0).abs() < 1e-4,
            "cosine {}",
            hits[0].score
        );
        assert_descending(&hits, "dense");
    }
    let hits = store
        .search(
            &p,
            SearchRequest {
                mode: SearchMode::Dense(vector(5)),
                filter: Filter::new().not_eq("doc_id", "d5"),
                limit: 3,
                with_vectors: true,
            },
        )
        .await
        .expect("search");
    assert_eq!(hits.len(), 3);
    assert!(hits.iter().all(|h| h.point.doc_id.as_deref() != Some("d5")));
    assert!(hits
        .iter()
        .all(|h| h.dense.as_ref().map(Vec::len) == Some(DIM)));
    let plain = search(&store, &p, SearchMode::Dense(vector(5))).await;
    assert!(plain.iter().all(|h| h.dense.is_none()));
}

/// BM25: a rare identifier ranks its document first; documents sharing no term with the
/// query are never returned; a query of stopwords only finds nothing.
pub async fn sparse_search_ranks_rare_identifier_first<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let texts = [
        "invoice paid in march",
        "invoice paid in april",
        "invoice overdue notice sent",
        "invoice INV-2024-001 was paid",
        "weather report sunny",
    ];
    put(
        &store,
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| chunk(&s, &format!("s{i}"), i, t))
            .collect(),
    )
    .await;
    let p = s.partition();
    let hits = search(
        &store,
        &p,
        SearchMode::Sparse("invoice INV-2024-001".into()),
    )
    .await;
    assert_eq!(
        hits[0].point.doc_id.as_deref(),
        Some("s3"),
        "{:?}",
        keys(&hits)
    );
    assert_eq!(key_set(&hits), set(&["s0", "s1", "s2", "s3"]));
    assert_descending(&hits, "sparse");
    let hits = search(&store, &p, SearchMode::Sparse("sunny weather".into())).await;
    assert_eq!(keys(&hits), ["s4"]);
    assert!(search(&store, &p, SearchMode::Sparse("the of and".into()))
        .await
        .is_empty());
    assert!(search(&store, &p, SearchMode::Sparse("unrelated".into()))
        .await
        .is_empty());
}

/// The IDF modifier: of two single-term matches of equal length, the rarer term wins.
pub async fn sparse_idf_prefers_rarer_terms<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let texts = ["apple zzz", "banana qqq", "banana rrr", "banana sss"];
    put(
        &store,
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| chunk(&s, &format!("i{i}"), i, t))
            .collect(),
    )
    .await;
    let hits = search(
        &store,
        &s.partition(),
        SearchMode::Sparse("banana apple".into()),
    )
    .await;
    assert_eq!(hits.len(), 4);
    assert_eq!(
        hits[0].point.doc_id.as_deref(),
        Some("i0"),
        "{:?}",
        keys(&hits)
    );
    assert!(
        hits[0].score > hits[1].score,
        "IDF should separate the terms"
    );
}

/// Hybrid: the item first in the dense leg and second in the sparse leg beats the item
/// first in the sparse leg only; a leg of weight 0 does not rank.
pub async fn hybrid_puts_item_strong_in_both_legs_first<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let (both, sparse_only) = hybrid_fixture(&store, &s).await;
    let p = s.partition();
    let hits = search(&store, &p, hybrid(vector(1), "zebra", (1.0, 1.0))).await;
    assert_eq!(hits[0].id, both, "{:?}", keys(&hits));
    assert!(hits.iter().any(|h| h.id == sparse_only));
    assert_descending(&hits, "hybrid");
    let hits = search(&store, &p, hybrid(vector(1), "zebra", (0.0, 1.0))).await;
    assert_eq!(
        hits[0].id,
        sparse_only,
        "sparse weight only: {:?}",
        keys(&hits)
    );
    let hits = search(&store, &p, hybrid(vector(1), "zebra", (1.0, 0.0))).await;
    assert_eq!(hits[0].id, both, "dense weight only: {:?}", keys(&hits));
}

/// x: dense = vector(1), text "zebra crossing" (dense rank 1, sparse rank 2);
/// z: no dense vector, text "zebra zebra" (sparse rank 1); y, w: other dense vectors, no
/// matching text.
async fn hybrid_fixture<S: MemoryStore>(store: &S, s: &Scope) -> (Uuid, Uuid) {
    let mut z = chunk(s, "z", 0, "zebra zebra");
    z.dense = None;
    put(
        store,
        vec![
            chunk(s, "x", 1, "zebra crossing"),
            chunk(s, "y", 2, "nothing here"),
            chunk(s, "w", 3, "other words"),
            z,
        ],
    )
    .await;
    (pid(s, "x"), pid(s, "z"))
}

/// Fusion is Qdrant's weighted RRF: an item at 0-based rank `pos` of a leg of weight `w`
/// adds `1 / ((pos + 1) / w + k - 1)`. Exact arithmetic on ranks, so scores are pinned.
pub async fn hybrid_fusion_is_weighted_rrf<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let (both, sparse_only) = hybrid_fixture(&store, &s).await;
    let hits = search(
        &store,
        &s.partition(),
        hybrid(vector(1), "zebra", (1.0, 2.0)),
    )
    .await;
    let score = |id: Uuid| {
        hits.iter()
            .find(|h| h.id == id)
            .map(|h| h.score)
            .expect("fused hit")
    };
    let rrf = |pos: f32, w: f32| 1.0 / ((pos + 1.0) / w + 60.0 - 1.0);
    let x = rrf(0.0, 1.0) + rrf(1.0, 2.0);
    let z = rrf(0.0, 2.0);
    assert!((score(both) - x).abs() < 1e-6, "x: {} vs {x}", score(both));
    assert!(
        (score(sparse_only) - z).abs() < 1e-6,
        "z: {} vs {z}",
        score(sparse_only)
    );
    assert_eq!(hits[0].id, both);
}

/// Records without vectors are stored, scrolled and counted but never searched; a point
/// with only one vector is found only by that leg.
pub async fn points_without_vectors_are_never_searched<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let mut rec = record(&s, "rec");
    rec.payload.text = Some("zebra".into());
    let mut dense_only = chunk(&s, "dense_only", 1, "zebra");
    dense_only.bm25_text = None;
    let mut sparse_only = chunk(&s, "sparse_only", 2, "zebra");
    sparse_only.dense = None;
    put(&store, vec![rec, dense_only, sparse_only]).await;
    let p = s.partition();
    assert_eq!(
        matching(&store, &p, Filter::new()).await,
        set(&["rec", "dense_only", "sparse_only"])
    );
    assert_eq!(
        keys(&search(&store, &p, SearchMode::Dense(vector(1))).await),
        ["dense_only"]
    );
    assert_eq!(
        keys(&search(&store, &p, SearchMode::Sparse("zebra".into())).await),
        ["sparse_only"]
    );
    assert_eq!(
        key_set(&search(&store, &p, hybrid(vector(1), "zebra", (1.0, 1.0))).await),
        set(&["dense_only", "sparse_only"])
    );
}

/// A vector of the wrong dimension is `BadInput`, in writes and in searches, and a batch
/// holding one writes nothing.
pub async fn wrong_vector_dimension_is_bad_input<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = open(dir);
    let s = scope("t", "u", "n");
    let mut bad = chunk(&s, "bad", 2, "bad");
    bad.dense = Some(vec![1.0; DIM + 1]);
    let err = store
        .upsert(vec![chunk(&s, "good", 1, "good"), bad])
        .await
        .expect_err("a 9-d vector in an 8-d store");
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    assert_eq!(
        store.count_all().await.expect("count_all"),
        0,
        "partial batch"
    );
    let p = s.partition();
    let err = store
        .search(&p, request(SearchMode::Dense(vec![1.0; DIM - 1]), 5))
        .await
        .expect_err("a 7-d query");
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
    let err = store
        .search(&p, request(hybrid(vec![1.0; DIM + 3], "x", (1.0, 1.0)), 5))
        .await
        .expect_err("an 11-d hybrid query");
    assert_eq!(err.kind(), ErrorKind::BadInput, "{err}");
}

// ---------------------------------------------------------------------------------------
// Copies and locks

/// `export` pages through every point of every partition, in id order, with the dense and
/// the stored sparse vector; writing the pages into an empty store of the same kind gives
/// the same points, counts and rankings (no re-embedding, no BM25 text needed).
pub async fn export_copies_points_with_their_vectors<S: MemoryStore>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let source = open(dir);
    let a = scope("t", "u", "n");
    let b = scope("t2", "u", "n");
    let mut pts: Vec<UpsertPoint> = TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| chunk(&a, &format!("a{i}"), i, t))
        .collect();
    // Texts of different lengths, so no two BM25 scores tie (ties may order differently).
    pts.extend((0..4).map(|i| {
        let text = format!("zebra invoice report{}", " filler".repeat(i));
        chunk(&b, &format!("b{i}"), i + 3, &text)
    }));
    pts.push(record(&a, "ra"));
    let mut sparse_only = chunk(&a, "sa", 9, "zebra paid invoice");
    sparse_only.dense = None;
    pts.push(sparse_only);
    put(&source, pts).await;

    let copy_dir = dir.join("copy");
    std::fs::create_dir_all(&copy_dir).expect("copy directory");
    let copy = open(&copy_dir);
    let mut offset = None;
    let mut ids = Vec::new();
    loop {
        let (page, next) = source.export(offset, 3).await.expect("export");
        assert!(page.len() <= 3);
        ids.extend(page.iter().map(|p| p.id));
        assert!(
            page.iter().all(|p| p.bm25_text.is_none()),
            "export carries the vector, not the text"
        );
        copy.upsert(page).await.expect("import");
        match next {
            Some(n) => offset = Some(n),
            None => break,
        }
    }
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(ids, sorted, "export pages are in id order, without repeats");
    assert_eq!(ids.len(), 9);
    assert_eq!(copy.count_all().await.expect("count"), 9);
    for s in [&a, &b] {
        let p = s.partition();
        assert_eq!(
            matching(&source, &p, Filter::new()).await,
            matching(&copy, &p, Filter::new()).await
        );
        for mode in [
            SearchMode::Sparse("zebra invoice".into()),
            SearchMode::Dense(vector(2)),
            hybrid(vector(4), "zebra", (1.0, 1.0)),
        ] {
            let want = search(&source, &p, mode.clone()).await;
            let got = search(&copy, &p, mode.clone()).await;
            assert_eq!(key_set(&want), key_set(&got), "{mode:?}");
            // Rank by rank the same scores; ids where the score is unique (ties may order
            // differently in a store whose segments were laid out differently).
            for (w, g) in want.iter().zip(&got) {
                assert!(
                    (w.score - g.score).abs() < 1e-4,
                    "{mode:?}: {} vs {}",
                    w.score,
                    g.score
                );
                let tied = want
                    .iter()
                    .filter(|o| (o.score - w.score).abs() < 1e-6)
                    .count();
                if tied == 1 {
                    assert_eq!(w.id, g.id, "{mode:?}");
                }
            }
        }
    }
    let got = copy
        .retrieve(&a.partition(), &[pid(&a, "a1")], true)
        .await
        .expect("retrieve");
    let want = source
        .retrieve(&a.partition(), &[pid(&a, "a1")], true)
        .await
        .expect("retrieve");
    assert_eq!(got[0].point, want[0].point);
    assert_eq!(got[0].dense, want[0].dense);
}

/// `lock` is mutual exclusion across every handle on the store: two handles (standing for
/// two processes) taking the same lock in a loop never overlap. A store that one process
/// owns returns a local lock at once (the caller's mutex does the work), and a second
/// handle on it is not possible, so only the first half applies to it.
pub async fn lock_excludes_concurrent_holders<S: MemoryStore + 'static>(
    open: &impl Fn(&Path) -> S,
    dir: &Path,
) {
    let store = std::sync::Arc::new(open(dir));
    let held = store.lock("conformance").await.expect("lock");
    if !store.shared() {
        drop(held);
        // Not shared: the lock never waits, even on a name already taken.
        let _a = store.lock("x").await.expect("lock");
        let _b = store.lock("x").await.expect("lock");
        return;
    }
    drop(held);
    let other = std::sync::Arc::new(open(dir));
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let overlaps = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for handle in [store, other] {
        for _ in 0..2 {
            let (handle, inside, overlaps) = (handle.clone(), inside.clone(), overlaps.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let _guard = handle.lock("conformance").await.expect("lock");
                    if inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(overlaps.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Leases are not data: they never show in counts or exports.
    assert_eq!(store_count(&open(dir)).await, 0);
}

async fn store_count<S: MemoryStore>(store: &S) -> usize {
    store.count_all().await.expect("count_all")
}

// ---------------------------------------------------------------------------------------
// Persistence (stores declared `persistent`)

/// Writes, overwrites and deletes (no explicit flush) survive dropping the store and
/// opening the same path again; so does a flushed state.
pub async fn reopen_keeps_everything<S: MemoryStore>(open: &impl Fn(&Path) -> S, dir: &Path) {
    let s = scope("t", "u", "n");
    let p = s.partition();
    {
        let store = open(dir);
        let mut pts: Vec<UpsertPoint> = (0..6)
            .map(|i| chunk(&s, &format!("c{i}"), i, &format!("text number {i}")))
            .collect();
        pts.push(record(&s, "r"));
        put(&store, pts).await;
        put(&store, vec![chunk(&s, "c0", 0, "rewritten zebra")]).await;
        store
            .delete_ids(&p, vec![pid(&s, "c1")])
            .await
            .expect("delete_ids");
        store
            .delete_where(&p, Filter::new().eq("doc_id", "c2"))
            .await
            .expect("delete_where");
    }
    for round in 0..2 {
        let store = open(dir);
        assert_eq!(
            matching(&store, &p, Filter::new()).await,
            set(&["c0", "c3", "c4", "c5", "r"]),
            "round {round}"
        );
        let got = store
            .retrieve(&p, &[pid(&s, "c0")], false)
            .await
            .expect("retrieve");
        assert_eq!(got[0].point.text.as_deref(), Some("rewritten zebra"));
        assert_eq!(
            keys(&search(&store, &p, SearchMode::Sparse("zebra".into())).await),
            ["c0"]
        );
        let hits = search(&store, &p, SearchMode::Dense(vector(4))).await;
        assert_eq!(hits[0].point.doc_id.as_deref(), Some("c4"));
        store.flush().await.expect("flush");
    }
}
