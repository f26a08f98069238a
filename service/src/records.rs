//! The record store under every domain module: load, write, scan and search the points of
//! one kind in one partition. Knowledge, reasoning, candidates and forgetting all keep their
//! records through these functions, so none of them needs another's module to reach the
//! store.

use cairn_models::{limits, Partition, PointKind, RecordState, Scope, StoredPoint, TrustOrigin};
use cairn_store::{Filter, Hit, SearchMode, SearchRequest, UpsertPoint};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::engine::Engine;
use crate::error::ServiceError;

/// Most results of one search.
pub const MAX_SEARCH: usize = 100;
/// Results of a search of entities, preferences or traces when the caller names no limit:
/// the same on every door (HTTP, MCP, the CLI).
pub const DEFAULT_SEARCH: usize = 10;

pub(crate) fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Parses a record id (a UUID); anything else names nothing stored.
pub(crate) fn parse_id(kind: &str, id: &str) -> Result<Uuid, ServiceError> {
    Uuid::parse_str(id).map_err(|_| ServiceError::NotFound(format!("no {kind} {id} in this scope")))
}

/// The stored point of `id` when it is of `kind`.
pub(crate) async fn load_point(
    engine: &Engine,
    partition: &Partition,
    kind: PointKind,
    id: &str,
    with_vectors: bool,
) -> Result<Option<Hit>, ServiceError> {
    let Ok(uuid) = Uuid::parse_str(id) else {
        return Ok(None);
    };
    Ok(engine
        .store
        .retrieve(partition, &[uuid], with_vectors)
        .await?
        .into_iter()
        .find(|h| h.point.kind == kind))
}

/// Writes a record; a searchable one gets its dense vector and BM25 text from `embed`.
pub(crate) async fn put(
    engine: &Engine,
    id: Uuid,
    point: StoredPoint,
    embed: Option<String>,
) -> Result<(), ServiceError> {
    let dense = match &embed {
        Some(text) => Some(
            engine
                .embedder
                .embed_documents(vec![text.clone()])
                .await?
                .pop()
                .ok_or_else(|| ServiceError::Internal("no embedding returned".into()))?,
        ),
        None => None,
    };
    engine
        .store
        .upsert(vec![UpsertPoint {
            id,
            dense,
            bm25_text: embed,
            sparse: None,
            payload: point,
        }])
        .await?;
    Ok(())
}

/// A record of `kind` in `scope`, its id in `doc_id`, its text in `text`.
// Every argument is a field of the header; a builder would only rename them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record(
    kind: PointKind,
    scope: &Scope,
    trust: TrustOrigin,
    ts: i64,
    id: &str,
    text: String,
    state: RecordState,
    keys: Vec<String>,
) -> StoredPoint {
    let mut p = StoredPoint::new(kind, scope, trust, ts);
    p.doc_id = Some(id.to_string());
    p.text = Some(text);
    p.state = Some(state);
    p.keys = Some(keys);
    p
}

/// Every record of `kind` in the partition whose keys include `key` (all when `None`).
pub(crate) async fn scan(
    engine: &Engine,
    partition: &Partition,
    kind: PointKind,
    key: Option<String>,
) -> Result<Vec<Hit>, ServiceError> {
    let mut f = Filter::new().eq("kind", kind.as_str());
    if let Some(k) = key {
        f = f.eq("keys", k);
    }
    Ok(engine.store.scroll_all(partition, f).await?)
}

/// A search hit: the record and its rank score (dense and BM25 ranks fused in the store;
/// higher is better, comparable within one answer only).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Scored<T> {
    pub item: T,
    pub score: f32,
}

/// Hybrid search (dense + BM25, fused in the store) over records of `kind`.
pub(crate) async fn search_kind(
    engine: &Engine,
    partition: &Partition,
    kind: PointKind,
    query: &str,
    filter: Filter,
    limit: usize,
) -> Result<Vec<Hit>, ServiceError> {
    limits::check_bytes("query", query, limits::MAX_QUERY_BYTES)?;
    let limit = limit.clamp(1, MAX_SEARCH);
    if query.trim().is_empty() {
        return Err(ServiceError::InvalidRequest("query is empty".into()));
    }
    let dense = engine.embedder.embed_query(query).await?;
    let mut filter = filter;
    filter.must.insert(
        0,
        cairn_store::Cond::Eq("kind".into(), kind.as_str().into()),
    );
    Ok(engine
        .store
        .search(
            partition,
            SearchRequest {
                mode: SearchMode::Hybrid {
                    dense,
                    text: query.to_string(),
                    prefetch: (limit * 4).max(20),
                    k: 60,
                    weights: (1.0, 1.0),
                },
                filter,
                limit,
                with_vectors: false,
            },
        )
        .await?)
}
