//! Copying a whole deployment from one store to another (`cairn migrate`): the embedded
//! store of a data directory to a Qdrant server, back, or between two of either.
//!
//! Why a copy of points and not a re-ingest: the source may hold what no file on disk holds
//! any more (messages, turns, reviews, knowledge, grants), and re-embedding a large store
//! costs hours of model time. [`copy`] pages through [`MemoryStore::export`] (every point of
//! every partition, in id order, with its dense vector and its stored BM25 sparse vector) and
//! writes each page with [`MemoryStore::upsert`]. Vectors are copied, never recomputed (an
//! upsert with `sparse` set stores it as is), so the target holds the very vectors the
//! source ranks with, and the model is only needed to know the dense dimension.
//!
//! Idempotent: point ids are content-addressed (derived from scope and content, never
//! random), and an upsert replaces a whole point, so running the same migration again writes
//! the same points over themselves and the target ends with the same count. An interrupted
//! migration is completed by running it again.
//!
//! Verified: after the copy, the target must hold exactly as many points as the source (a
//! target that held other points before is reported as such: migrate into an empty data
//! directory or a new collection), the source must not have changed during the copy, and a
//! recall sample must agree: up to [`SAMPLE`] searchable points spread over the source
//! (chunks, messages, approved memories), each searched on both stores in its own partition
//! with a BM25 query made of the first [`QUERY_WORDS`] words of its text, top
//! [`SAMPLE_TOP`] compared, and the sampled point's payload and dense vector read back from
//! the target. The sample search is sparse: BM25 search is exact on both engines (the dense
//! leg goes through an HNSW index once a store is large, which is approximate and built
//! differently on each side), and the dense vectors themselves are compared directly.
//! [`CopyReport::check`] turns a failed verification into an error.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cairn_models::{Partition, PointKind};
use cairn_store::{
    BackendInfo, EdgeStore, Filter, Hit, MemoryStore, QdrantStore, SearchMode, SearchRequest,
    ServerConfig, StoreConfig, SyncPolicy, UpsertPoint,
};
use serde::Serialize;
use uuid::Uuid;

use crate::error::ServiceError;

/// Default points per page (one export call and one upsert each).
pub const DEFAULT_PAGE: usize = 256;
/// Largest accepted page.
pub const MAX_PAGE: usize = 4096;
/// Points in the recall sample, at most.
pub const SAMPLE: usize = 20;
/// Words of a sampled text that make its query.
pub const QUERY_WORDS: usize = 12;
/// Results compared per sampled query.
pub const SAMPLE_TOP: usize = 10;

/// One side of a migration.
#[derive(Debug, Clone)]
pub enum Side {
    /// The embedded store of a data directory.
    Embedded(PathBuf),
    /// A collection on a Qdrant server (its `dim` is replaced by the model's).
    Server(ServerConfig),
}

impl Side {
    /// Whether a `--from`/`--to` argument names a Qdrant server (`http://` or `https://`)
    /// rather than a data directory.
    pub fn is_server(arg: &str) -> bool {
        let arg = arg.trim().to_ascii_lowercase();
        arg.starts_with("http://") || arg.starts_with("https://")
    }

    /// Whether both sides are the same store (a copy onto itself).
    pub fn same_as(&self, other: &Side) -> bool {
        match (self, other) {
            (Side::Embedded(a), Side::Embedded(b)) => absolute(a) == absolute(b),
            (Side::Server(a), Side::Server(b)) => {
                a.url.trim_end_matches('/') == b.url.trim_end_matches('/')
                    && a.collection == b.collection
            }
            _ => false,
        }
    }

    /// Opens the store of this side with `dim`-dimensional dense vectors. Blocking (the
    /// embedded store replays its journal). A source must exist: a data directory without a
    /// store is refused instead of silently created empty (a typo in `--from`). A server
    /// side does no I/O here (the collection is checked or created on first use).
    pub fn open(
        &self,
        dim: usize,
        sync: SyncPolicy,
        must_exist: bool,
    ) -> Result<Arc<dyn MemoryStore>, ServiceError> {
        match self {
            Side::Embedded(dir) => {
                if must_exist && !has_store(dir) {
                    return Err(ServiceError::NotFound(format!(
                        "no Cairn store in data directory {} (no {}): check the path",
                        dir.display(),
                        dir.join("qdrant").display()
                    )));
                }
                Ok(Arc::new(EdgeStore::open(&StoreConfig {
                    sync,
                    ..StoreConfig::new(dir, dim)
                })?))
            }
            Side::Server(config) => Ok(Arc::new(QdrantStore::new(ServerConfig {
                dim,
                ..config.clone()
            })?)),
        }
    }
}

/// Whether `dir` holds an embedded store (the shard's configuration file, written when the
/// store is created).
fn has_store(dir: &Path) -> bool {
    dir.join("qdrant").join("edge_config.json").is_file()
}

/// `p` made absolute with what exists of it resolved (`..`, symbolic links): a target
/// directory may not exist yet.
fn absolute(p: &Path) -> PathBuf {
    let p = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut existing = p.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(resolved) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(resolved, |acc, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return p,
        }
    }
}

/// Opens the source of a migration with `dim`-dimensional vectors (the model's): refuses a
/// copy onto itself, a data directory without a store and a store without points. Call it
/// before [`open_target`], so a refused source creates no target.
pub async fn open_source(
    from: &Side,
    to: &Side,
    dim: usize,
    sync: SyncPolicy,
) -> Result<Arc<dyn MemoryStore>, ServiceError> {
    if from.same_as(to) {
        return Err(ServiceError::InvalidRequest(
            "--from and --to name the same store".into(),
        ));
    }
    let side = from.clone();
    let source = blocking(move || side.open(dim, sync, true)).await?;
    source_points(source.as_ref()).await?;
    Ok(source)
}

/// Opens (or creates) the target of a migration with `dim`-dimensional vectors.
pub async fn open_target(
    to: &Side,
    dim: usize,
    sync: SyncPolicy,
) -> Result<Arc<dyn MemoryStore>, ServiceError> {
    let side = to.clone();
    blocking(move || side.open(dim, sync, false)).await
}

/// Runs a blocking store opening off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ServiceError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ServiceError::Internal(format!("store start-up task: {e}")))?
}

/// The source's point count; an empty source is refused: there is nothing to migrate, and a
/// mistyped source (a server creates a collection on first use) must not look like a
/// successful migration.
async fn source_points(source: &dyn MemoryStore) -> Result<u64, ServiceError> {
    let n = source.count_all().await? as u64;
    if n == 0 {
        let b = source.backend();
        return Err(ServiceError::NotFound(format!(
            "the source ({} {}{}) holds no points: nothing to migrate",
            b.kind,
            b.location,
            b.collection
                .map(|c| format!(", collection {c}"))
                .unwrap_or_default()
        )));
    }
    Ok(n)
}

/// Progress of a copy, reported after each page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CopyProgress {
    /// Points written to the target so far.
    pub copied: u64,
    /// Points in the source when the copy started.
    pub total: u64,
    /// Pages written so far.
    pub pages: u64,
}

/// What a copy did and what its verification found.
#[derive(Debug, Clone, Serialize)]
pub struct CopyReport {
    pub source: BackendInfo,
    pub target: BackendInfo,
    /// Points read from the source and written to the target.
    pub points_copied: u64,
    /// Of which with a dense vector.
    pub vectors_copied: u64,
    pub pages: u64,
    pub page_size: usize,
    pub elapsed_ms: u64,
    /// Point counts (`count_all`) of both stores before and after the copy.
    pub counts: Counts,
    /// Whether the target's vector index was built after the copy (a large copy into an
    /// embedded store, which has no background optimizer).
    pub index_built: bool,
    pub sample: SampleReport,
    /// Whether every check passed; otherwise `problems` says what failed.
    pub verified: bool,
    pub problems: Vec<String>,
}

/// Point counts around a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub source_before: u64,
    pub source_after: u64,
    pub target_before: u64,
    pub target_after: u64,
}

/// The recall sample's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct SampleReport {
    /// How the sampled queries are searched (`sparse`: BM25).
    pub mode: &'static str,
    /// Results compared per query.
    pub top: usize,
    pub matched: usize,
    pub total: usize,
    pub mismatches: Vec<SampleMismatch>,
}

/// A sampled point whose search (or stored copy) differs between the stores.
#[derive(Debug, Clone, Serialize)]
pub struct SampleMismatch {
    pub point: Uuid,
    pub query: String,
    pub reason: String,
    pub source_top: Vec<Uuid>,
    pub target_top: Vec<Uuid>,
}

impl CopyReport {
    /// The report, or an error naming every failed check.
    pub fn check(self) -> Result<CopyReport, ServiceError> {
        if self.verified {
            Ok(self)
        } else {
            Err(ServiceError::Conflict(format!(
                "migration copied {} points but verification failed: {}",
                self.points_copied,
                self.problems.join("; ")
            )))
        }
    }
}

/// A point chosen for the recall sample, kept as exported from the source.
#[derive(Debug, Clone)]
struct Sampled {
    id: Uuid,
    partition: Partition,
    query: String,
    dense: Option<Vec<f32>>,
    payload: serde_json::Value,
}

/// Whether a point can be sampled: a searchable record with text (what recall searches).
fn sample_candidate(p: &UpsertPoint) -> Option<Sampled> {
    if !matches!(
        p.payload.kind,
        PointKind::Chunk | PointKind::Message | PointKind::Memory
    ) {
        return None;
    }
    let text = p.payload.text.as_deref()?;
    let query = text
        .split_whitespace()
        .take(QUERY_WORDS)
        .collect::<Vec<_>>()
        .join(" ");
    if query.is_empty() {
        return None;
    }
    Some(Sampled {
        id: p.id,
        partition: p.payload.scope().partition(),
        query,
        dense: p.dense.clone(),
        payload: serde_json::to_value(&p.payload).unwrap_or_default(),
    })
}

/// Reservoir sampling with a fixed-seed generator: every candidate equally likely, the same
/// choice on every run over the same store, at most [`SAMPLE`] points held.
#[derive(Debug)]
struct Reservoir {
    seen: u64,
    state: u64,
    kept: Vec<Sampled>,
}

impl Reservoir {
    fn new() -> Self {
        Reservoir {
            seen: 0,
            state: 0x9E37_79B9_7F4A_7C15,
            kept: Vec::new(),
        }
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn offer(&mut self, point: &UpsertPoint) {
        let Some(s) = sample_candidate(point) else {
            return;
        };
        self.seen += 1;
        if self.kept.len() < SAMPLE {
            self.kept.push(s);
        } else {
            let j = (self.next() % self.seen) as usize;
            if j < SAMPLE {
                self.kept[j] = s;
            }
        }
    }
}

/// Copies every point of `source` into `target`, `page` points at a time, calling `progress`
/// after each page, then verifies the target (see the module docs). Errors are failures to
/// read or write, and an empty source; a failed verification is a report with
/// `verified: false` (see [`CopyReport::check`]).
pub async fn copy(
    source: &dyn MemoryStore,
    target: &dyn MemoryStore,
    page: usize,
    progress: &(dyn Fn(CopyProgress) + Send + Sync),
) -> Result<CopyReport, ServiceError> {
    let page = page.clamp(1, MAX_PAGE);
    let started = Instant::now();
    let source_before = source_points(source).await?;
    let target_before = target.count_all().await? as u64;

    let mut copied = 0u64;
    let mut vectors = 0u64;
    let mut pages = 0u64;
    let mut sample = Reservoir::new();
    let mut offset: Option<Uuid> = None;
    progress(CopyProgress {
        copied,
        total: source_before,
        pages,
    });
    loop {
        let (points, next) = source.export(offset, page).await?;
        if !points.is_empty() {
            for p in &points {
                sample.offer(p);
            }
            let n = points.len() as u64;
            vectors += points.iter().filter(|p| p.dense.is_some()).count() as u64;
            target.upsert(points).await?;
            copied += n;
            pages += 1;
            progress(CopyProgress {
                copied,
                total: source_before,
                pages,
            });
        }
        match next {
            // A store that answered its own offset again would loop forever.
            Some(n) if Some(n) == offset => {
                return Err(ServiceError::Internal(format!(
                    "export did not advance past {n}"
                )))
            }
            Some(n) => offset = Some(n),
            None => break,
        }
    }
    target.flush().await?;
    // The embedded engine builds its vector index only when asked (the server indexes in
    // the background by itself): the same threshold as a bulk ingest.
    let index_built = if !target.shared() && vectors >= crate::OPTIMIZE_AFTER_CHUNKS {
        target.optimize().await?
    } else {
        false
    };

    let counts = Counts {
        source_before,
        source_after: source.count_all().await? as u64,
        target_before,
        target_after: target.count_all().await? as u64,
    };
    let mut problems = count_problems(&counts, copied);
    let mut kept = sample.kept;
    kept.sort_by_key(|s| s.id);
    let sample = compare_sample(source, target, &kept).await?;
    if sample.matched != sample.total {
        problems.push(format!(
            "recall sample: {} of {} queries differ between the stores",
            sample.total - sample.matched,
            sample.total
        ));
    }
    Ok(CopyReport {
        source: source.backend(),
        target: target.backend(),
        points_copied: copied,
        vectors_copied: vectors,
        pages,
        page_size: page,
        elapsed_ms: started.elapsed().as_millis() as u64,
        counts,
        index_built,
        sample,
        verified: problems.is_empty(),
        problems,
    })
}

/// What the counts say is wrong, if anything.
fn count_problems(c: &Counts, copied: u64) -> Vec<String> {
    let mut problems = Vec::new();
    if c.source_after != c.source_before || copied != c.source_before {
        problems.push(format!(
            "the source changed during the copy ({} points before, {} after, {} exported): \
             stop writing to it and run the migration again",
            c.source_before, c.source_after, copied
        ));
    }
    if c.target_after > c.source_after {
        let extra = c.target_after - c.source_after;
        let before = if c.target_before > 0 {
            format!(
                "the target was not empty: it held {} points before the copy",
                c.target_before
            )
        } else {
            "the target was empty before the copy, so something else wrote to it".to_string()
        };
        problems.push(format!(
            "the target holds {} points but the source {}: {extra} points in the target are \
             not in the source ({before}); migrate into an empty data directory or a new \
             collection",
            c.target_after, c.source_after
        ));
    } else if c.target_after < c.source_after {
        problems.push(format!(
            "the target holds {} points but the source {}: {} points are missing in the target",
            c.target_after,
            c.source_after,
            c.source_after - c.target_after
        ));
    }
    problems
}

/// Searches each sampled query on both stores and reads each sampled point back from the
/// target.
async fn compare_sample(
    source: &dyn MemoryStore,
    target: &dyn MemoryStore,
    sample: &[Sampled],
) -> Result<SampleReport, ServiceError> {
    let mut matched = 0;
    let mut mismatches = Vec::new();
    for s in sample {
        let request = SearchRequest {
            mode: SearchMode::Sparse(s.query.clone()),
            filter: Filter::new(),
            limit: SAMPLE_TOP,
            with_vectors: false,
        };
        let a = source.search(&s.partition, request.clone()).await?;
        let b = target.search(&s.partition, request).await?;
        let stored = target.retrieve(&s.partition, &[s.id], true).await?;
        let reason = if !same_top(&a, &b, SAMPLE_TOP) {
            Some(format!(
                "top {SAMPLE_TOP} differ (source {} hits, target {})",
                a.len(),
                b.len()
            ))
        } else {
            match stored.first() {
                None => Some("the point is missing in the target".to_string()),
                Some(hit) => copy_differs(s, hit),
            }
        };
        match reason {
            None => matched += 1,
            Some(reason) => mismatches.push(SampleMismatch {
                point: s.id,
                query: s.query.clone(),
                reason,
                source_top: a.iter().map(|h| h.id).collect(),
                target_top: b.iter().map(|h| h.id).collect(),
            }),
        }
    }
    Ok(SampleReport {
        mode: "sparse",
        top: SAMPLE_TOP,
        matched,
        total: sample.len(),
        mismatches,
    })
}

/// The recall sample of one store on its own (a restored server snapshot has no source to
/// compare with): up to [`SAMPLE`] searchable points, chosen as [`copy`] chooses them, each
/// found again in the top [`SAMPLE_TOP`] of a sparse search of its own text and read back by
/// id with the payload and dense vector it was exported with.
pub(crate) async fn self_sample(store: &dyn MemoryStore) -> Result<SampleReport, ServiceError> {
    let mut sample = Reservoir::new();
    let mut offset = None;
    loop {
        let (points, next) = store.export(offset, DEFAULT_PAGE).await?;
        for p in &points {
            sample.offer(p);
        }
        match next {
            Some(n) if Some(n) != offset => offset = Some(n),
            _ => break,
        }
    }
    let mut matched = 0;
    let mut mismatches = Vec::new();
    for s in &sample.kept {
        let request = SearchRequest {
            mode: SearchMode::Sparse(s.query.clone()),
            filter: Filter::new(),
            limit: SAMPLE_TOP,
            with_vectors: false,
        };
        let hits = store.search(&s.partition, request).await?;
        let stored = store.retrieve(&s.partition, &[s.id], true).await?;
        let reason = if !hits.iter().any(|h| h.id == s.id) {
            Some(format!(
                "not in the top {SAMPLE_TOP} of a search of its own text"
            ))
        } else {
            match stored.first() {
                None => Some("the point cannot be read by id".to_string()),
                Some(hit) => copy_differs(s, hit),
            }
        };
        match reason {
            None => matched += 1,
            Some(reason) => mismatches.push(SampleMismatch {
                point: s.id,
                query: s.query.clone(),
                reason,
                source_top: vec![s.id],
                target_top: hits.iter().map(|h| h.id).collect(),
            }),
        }
    }
    Ok(SampleReport {
        mode: "sparse",
        top: SAMPLE_TOP,
        matched,
        total: sample.kept.len(),
        mismatches,
    })
}

/// How the target's copy of a sampled point differs from the source's, if it does.
fn copy_differs(s: &Sampled, hit: &Hit) -> Option<String> {
    if serde_json::to_value(&hit.point).unwrap_or_default() != s.payload {
        return Some("the payload differs".to_string());
    }
    match (&s.dense, &hit.dense) {
        (None, None) => None,
        (Some(a), Some(b)) if a.len() == b.len() => {
            // Both engines keep cosine vectors normalized; allow float noise only.
            let close = a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-4);
            (!close).then(|| "the dense vector differs".to_string())
        }
        _ => Some("the dense vector differs".to_string()),
    }
}

/// Whether two top-`limit` result lists agree: the same set of points, or, where equal
/// scores straddle the cut (either engine may return any of the tied points), the same
/// scores rank by rank and the same points above the last score.
fn same_top(a: &[Hit], b: &[Hit], limit: usize) -> bool {
    let ids = |hits: &[Hit]| hits.iter().map(|h| h.id).collect::<HashSet<_>>();
    if a.len() != b.len() {
        return false;
    }
    if ids(a) == ids(b) {
        return true;
    }
    if a.len() < limit {
        // Every match was returned: nothing was cut, so the sets must be equal.
        return false;
    }
    let close = |x: f32, y: f32| (x - y).abs() <= 1e-4 * x.abs().max(y.abs()).max(1.0);
    if !a.iter().zip(b).all(|(x, y)| close(x.score, y.score)) {
        return false;
    }
    let Some(last) = a.last().map(|h| h.score) else {
        return true;
    };
    let above = |hits: &[Hit]| {
        hits.iter()
            .filter(|h| !close(h.score, last))
            .map(|h| h.id)
            .collect::<HashSet<_>>()
    };
    above(a) == above(b)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use cairn_models::{Scope, StoredPoint, TrustOrigin};
    use cairn_store::InMemoryStore;
    use std::sync::Mutex;

    const DIM: usize = 8;

    fn scope(user: &str) -> Scope {
        Scope::new("acme", user, "kb", "bot", "s1").unwrap()
    }

    fn vector(seed: usize) -> Vec<f32> {
        (0..DIM)
            .map(|i| (((i * 7 + seed * 13) % 11) as f32 + 0.5) * (1.0 + seed as f32))
            .collect()
    }

    fn chunk(scope: &Scope, i: usize, text: &str) -> UpsertPoint {
        let mut p = StoredPoint::new(PointKind::Chunk, scope, TrustOrigin::Document, i as i64);
        p.text = Some(text.to_string());
        p.doc_id = Some(format!("doc{i}"));
        UpsertPoint {
            id: Uuid::new_v5(
                &Uuid::NAMESPACE_OID,
                format!("{}/{i}", scope.key()).as_bytes(),
            ),
            dense: Some(vector(i)),
            bm25_text: Some(text.to_string()),
            sparse: None,
            payload: p,
        }
    }

    const WORDS: [&str; 10] = [
        "invoice", "payment", "march", "report", "zebra", "server", "backup", "restore", "policy",
        "travel",
    ];

    /// A source of 600 points over two partitions: chunks with text, and records.
    async fn source() -> InMemoryStore {
        let store = InMemoryStore::new(DIM).unwrap();
        let mut points = Vec::new();
        for i in 0..500 {
            let sc = scope(if i % 3 == 0 { "bob" } else { "alice" });
            let text = format!(
                "{} {} {} note number {i}",
                WORDS[i % 10],
                WORDS[(i * 7) % 10],
                WORDS[(i * 3 + 1) % 10]
            );
            points.push(chunk(&sc, i, &text));
        }
        for i in 0..100 {
            let mut p = StoredPoint::new(
                PointKind::Document,
                &scope("alice"),
                TrustOrigin::Document,
                0,
            );
            p.doc_id = Some(format!("record{i}"));
            points.push(UpsertPoint::record(
                Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("record{i}").as_bytes()),
                p,
            ));
        }
        store.upsert(points).await.unwrap();
        store
    }

    #[tokio::test]
    async fn copies_everything_verifies_and_is_idempotent() {
        let from = source().await;
        let to = InMemoryStore::new(DIM).unwrap();
        let seen = Mutex::new(Vec::new());
        let progress = |p: CopyProgress| seen.lock().unwrap().push(p);
        let report = copy(&from, &to, 64, &progress).await.unwrap();
        assert!(report.verified, "{:?}", report.problems);
        assert_eq!(report.points_copied, 600);
        assert_eq!(report.vectors_copied, 500);
        assert_eq!(report.pages, 10);
        assert_eq!(
            report.counts,
            Counts {
                source_before: 600,
                source_after: 600,
                target_before: 0,
                target_after: 600
            }
        );
        assert_eq!(report.sample.total, SAMPLE);
        assert_eq!(report.sample.matched, SAMPLE);
        // The sample is spread over both partitions.
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.first().map(|p| p.copied), Some(0));
        assert_eq!(
            seen.last().copied(),
            Some(CopyProgress {
                copied: 600,
                total: 600,
                pages: 10
            })
        );
        assert_eq!(to.count_all().await.unwrap(), 600);
        let report = report.check().unwrap();
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["source"]["kind"], "memory");
        assert_eq!(json["sample"]["matched"], SAMPLE);

        // Again: the same ids are written over themselves.
        let again = copy(&from, &to, 256, &|_| {}).await.unwrap();
        assert!(again.verified, "{:?}", again.problems);
        assert_eq!(again.counts.target_before, 600);
        assert_eq!(again.counts.target_after, 600);

        // The copy ranks as the source, with the stored sparse vectors (no BM25 text).
        let p = scope("alice").partition();
        let request = SearchRequest {
            mode: SearchMode::Sparse("zebra backup".into()),
            filter: Filter::new(),
            limit: 10,
            with_vectors: false,
        };
        let a = from.search(&p, request.clone()).await.unwrap();
        let b = to.search(&p, request).await.unwrap();
        assert!(!a.is_empty());
        assert_eq!(
            a.iter().map(|h| h.id).collect::<Vec<_>>(),
            b.iter().map(|h| h.id).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn a_target_with_a_foreign_point_fails_verification() {
        let from = source().await;
        let to = InMemoryStore::new(DIM).unwrap();
        to.upsert(vec![chunk(&scope("carol"), 9_999, "a foreign memory")])
            .await
            .unwrap();
        let report = copy(&from, &to, 256, &|_| {}).await.unwrap();
        assert!(!report.verified);
        assert_eq!(report.counts.target_before, 1);
        assert_eq!(report.counts.target_after, 601);
        let err = report.check().unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("1 points in the target are not in the source")
                && msg.contains("held 1 points before the copy"),
            "{msg}"
        );
        assert_eq!(err.code(), cairn_models::ErrorCode::Conflict);
    }

    #[tokio::test]
    async fn a_target_that_ranks_differently_fails_the_sample() {
        // The target already holds a copy of every source chunk under other ids: the
        // searches find those too (and the BM25 statistics change), so the sample notices,
        // not only the counts.
        let from = source().await;
        let to = InMemoryStore::new(DIM).unwrap();
        let (points, _) = from.export(None, 1_000).await.unwrap();
        let copies: Vec<_> = points
            .into_iter()
            .filter(|p| p.dense.is_some())
            .map(|mut p| {
                p.id = Uuid::new_v5(&p.id, b"copy");
                p
            })
            .collect();
        to.upsert(copies).await.unwrap();
        let report = copy(&from, &to, 256, &|_| {}).await.unwrap();
        assert!(!report.verified);
        assert!(report.sample.matched < report.sample.total, "{report:?}");
        assert!(!report.sample.mismatches.is_empty());
        assert!(report
            .problems
            .iter()
            .any(|p| p.contains("queries differ between the stores")));
    }

    #[tokio::test]
    async fn an_empty_source_is_refused() {
        let from = InMemoryStore::new(DIM).unwrap();
        let to = InMemoryStore::new(DIM).unwrap();
        let err = copy(&from, &to, 256, &|_| {}).await.unwrap_err();
        assert!(err.to_string().contains("holds no points"), "{err}");
        assert_eq!(to.count_all().await.unwrap(), 0);
    }

    #[test]
    fn sides() {
        assert!(Side::is_server("http://127.0.0.1:6334"));
        assert!(Side::is_server("HTTPS://qdrant.example"));
        assert!(!Side::is_server("./http-data"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("x")).unwrap();
        let a = Side::Embedded(dir.path().join("x").join("..").join("y"));
        let b = Side::Embedded(dir.path().join("y"));
        assert!(a.same_as(&b));
        assert!(!a.same_as(&Side::Embedded(dir.path().join("x"))));
        let s1 = Side::Server(ServerConfig::new("http://h:6334/", 0));
        let mut c = ServerConfig::new("http://h:6334", 0);
        assert!(s1.same_as(&Side::Server(c.clone())));
        c.collection = "other".into();
        assert!(!s1.same_as(&Side::Server(c)));
        assert!(!a.same_as(&s1));
    }

    #[tokio::test]
    async fn a_missing_or_empty_source_is_refused_and_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let sync = SyncPolicy::default();
        let missing = Side::Embedded(dir.path().join("typo"));
        let target = Side::Embedded(dir.path().join("target"));
        let err = open_source(&missing, &target, DIM, sync).await.unwrap_err();
        assert_eq!(err.code(), cairn_models::ErrorCode::NotFound);
        assert!(err.to_string().contains("no Cairn store"), "{err}");
        assert!(!dir.path().join("typo").exists());

        // A store without points.
        let empty = Side::Embedded(dir.path().join("empty"));
        drop(empty.open(DIM, sync, false).unwrap());
        let err = open_source(&empty, &target, DIM, sync).await.unwrap_err();
        assert!(err.to_string().contains("holds no points"), "{err}");

        let err = open_source(
            &empty,
            &Side::Embedded(dir.path().join("empty").join(".")),
            DIM,
            sync,
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("same store"), "{err}");
        assert!(!dir.path().join("target").exists());
    }

    #[test]
    fn ties_at_the_cut_are_not_differences() {
        let hit = |n: u128, score: f32| Hit {
            id: Uuid::from_u128(n),
            score,
            point: StoredPoint::new(PointKind::Chunk, &scope("a"), TrustOrigin::Document, 0),
            dense: None,
        };
        let a = vec![hit(1, 3.0), hit(2, 2.0), hit(3, 1.0)];
        let b = vec![hit(1, 3.0), hit(2, 2.0), hit(4, 1.0)];
        assert!(same_top(&a, &b, 3));
        assert!(!same_top(&a, &b, 4));
        let c = vec![hit(1, 3.0), hit(4, 2.0), hit(3, 1.0)];
        assert!(!same_top(&a, &c, 3));
    }
}
