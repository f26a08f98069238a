//! The store contract on the real embedded engine. (A server adapter runs the same tests.)

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use cairn_models::{Partition, PointKind, Scope, StoredPoint, TrustOrigin};
use cairn_store::{
    EdgeStore, Filter, MemoryStore, SearchMode, SearchRequest, StoreConfig, UpsertPoint,
};
use uuid::Uuid;

const DIM: usize = 8;

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
        payload: p,
    }
}

fn open(dir: &std::path::Path) -> EdgeStore {
    EdgeStore::open(&StoreConfig {
        data_dir: dir.to_path_buf(),
        dim: DIM,
    })
    .unwrap()
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
    let err = EdgeStore::open(&StoreConfig {
        data_dir: dir.path().to_path_buf(),
        dim: DIM * 2,
    })
    .unwrap_err();
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
