//! [`InMemoryStore`]: the reference implementation of [`MemoryStore`], in plain Rust.
//!
//! Why it exists: the contract of the seam is only as clear as its least-specified
//! implementation. This one is written to be read: every operation is a scan over a
//! `BTreeMap` keyed by point id, with the semantics [`EdgeStore`](crate::EdgeStore) gets from
//! Qdrant spelled out, so the conformance suite ([`crate::conformance`]) has a second,
//! independent implementation to agree with, and tests of the layers above can run without
//! the embedded engine. It is not persistent and not indexed (every search is a full scan);
//! do not serve traffic from it.
//!
//! What it reproduces from Qdrant (qdrant-edge 0.7.2, checked against its source):
//! - **Scoping**: every read and delete is filtered by tenant, user and namespace;
//!   `retrieve`/`delete_ids` skip ids outside the partition.
//! - **Filters** read fields from the point's JSON payload (the serialized [`StoredPoint`]);
//!   a dotted name walks into objects; an array matches when any element does. `Eq` matches
//!   strings, integers (JSON numbers that are integers) and booleans; `NotEq` is the negation
//!   of `Eq` (so it is true when the field is absent); `AnyOf` matches strings; `Range` is
//!   inclusive on any JSON number.
//! - **Upsert** replaces the whole point: payload and both vectors (a point re-written
//!   without a dense vector leaves dense search).
//! - **Scroll** is ordered by point id (UUID byte order); a page holds `max(limit, 1)`
//!   points and `next` is the id of the first point of the following page.
//! - **Dense search**: cosine, i.e. the dot product of vectors normalized on the way in
//!   (stored vectors are kept normalized, so `Hit::dense` is the normalized vector, as
//!   Qdrant returns it).
//! - **Sparse search**: document vectors from the same `EdgeBm25` (English) as `EdgeStore`;
//!   the query's terms weigh 1 and are multiplied by Qdrant's IDF,
//!   `ln(1 + (N - df + 0.5) / (df + 0.5))`, where `N` is the number of points with a
//!   non-empty sparse vector **in the whole store** and `df` the number of those holding the
//!   term (Qdrant collects these statistics over the shard, not the filtered set). Only
//!   points sharing at least one term with the query are returned.
//! - **Hybrid**: each leg returns its top `prefetch`, fused by Qdrant's weighted RRF,
//!   `Σ 1 / ((pos + 1) / w + k − 1)` with `pos` the 0-based rank in the leg (so the top item
//!   of a leg of weight 1 scores `1 / k`), a leg of weight ≤ 0 contributing nothing.
//!
//! Where it is stricter than Qdrant: ties (equal scores) are broken by point id, ascending,
//! so results are deterministic; Qdrant does not break ties.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::RwLock;

use cairn_models::{Partition, StoredPoint};
use qdrant_edge::bm25_embed::EdgeBm25;
use qdrant_edge::JsonPath;
use uuid::Uuid;

use crate::in_partition;
use crate::{
    Cond, Filter, Hit, MemoryStore, Result, SearchMode, SearchRequest, StoreError, UpsertPoint,
    Value,
};

/// One stored point: the payload, its JSON form (what filters read) and its vectors.
#[derive(Debug, Clone)]
struct Stored {
    point: StoredPoint,
    json: serde_json::Value,
    /// Normalized for cosine, as Qdrant stores it.
    dense: Option<Vec<f32>>,
    /// BM25 document weights by term id; empty when the text had no terms.
    sparse: HashMap<u32, f32>,
}

/// The in-memory reference store. See the module docs.
pub struct InMemoryStore {
    dim: usize,
    points: RwLock<BTreeMap<Uuid, Stored>>,
    bm25: EdgeBm25,
}

impl std::fmt::Debug for InMemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryStore")
            .field("dim", &self.dim)
            .field("points", &self.read().len())
            .finish()
    }
}

impl InMemoryStore {
    /// An empty store of `dim`-dimensional dense vectors.
    pub fn new(dim: usize) -> Result<Self> {
        // The same BM25 configuration as `EdgeStore`, so that sparse vectors, and therefore
        // sparse rankings, mean the same in both.
        let bm25 = crate::edge::new_bm25()?;
        Ok(InMemoryStore {
            dim,
            points: RwLock::new(BTreeMap::new()),
            bm25,
        })
    }

    // A poisoned lock only means a panic elsewhere; the map itself is always whole (every
    // write replaces or removes entries), so keep going.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Uuid, Stored>> {
        self.points.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Uuid, Stored>> {
        self.points.write().unwrap_or_else(|p| p.into_inner())
    }

    fn check_dim(&self, v: &[f32], what: &str) -> Result<()> {
        if v.len() != self.dim {
            return Err(StoreError::Invalid(format!(
                "{what} of dimension {} for a {}-d store",
                v.len(),
                self.dim
            )));
        }
        Ok(())
    }
}

/// Field names are validated like `EdgeStore` does (Qdrant's JSON path syntax), so a bad
/// name is the same `BadInput` error here and there.
fn validate(filter: &Filter) -> Result<()> {
    for cond in &filter.must {
        let field = match cond {
            Cond::Eq(f, _) | Cond::NotEq(f, _) | Cond::AnyOf(f, _) => f,
            Cond::Range { field, .. } => field,
        };
        JsonPath::try_from(field.as_str())
            .map_err(|_| StoreError::Invalid(format!("invalid payload field name {field:?}")))?;
    }
    Ok(())
}

/// The values a (dotted) field name reaches, arrays flattened: Qdrant's "any element".
fn values_at<'a>(json: &'a serde_json::Value, field: &str) -> Vec<&'a serde_json::Value> {
    let mut current = vec![json];
    for key in field.split('.') {
        let mut next = Vec::new();
        for v in current {
            match v {
                serde_json::Value::Object(map) => next.extend(map.get(key)),
                serde_json::Value::Array(items) => next.extend(
                    items
                        .iter()
                        .filter_map(|i| i.as_object().and_then(|m| m.get(key))),
                ),
                _ => {}
            }
        }
        current = next;
    }
    let mut out = Vec::new();
    for v in current {
        match v {
            serde_json::Value::Array(items) => out.extend(items.iter()),
            other => out.push(other),
        }
    }
    out
}

fn value_eq(stored: &serde_json::Value, value: &Value) -> bool {
    match (stored, value) {
        (serde_json::Value::String(s), Value::Str(v)) => s == v,
        (serde_json::Value::Number(n), Value::Int(v)) => n.as_i64() == Some(*v),
        (serde_json::Value::Bool(b), Value::Bool(v)) => b == v,
        _ => false,
    }
}

fn cond_holds(json: &serde_json::Value, cond: &Cond) -> bool {
    match cond {
        Cond::Eq(field, value) => values_at(json, field).iter().any(|v| value_eq(v, value)),
        Cond::NotEq(field, value) => !values_at(json, field).iter().any(|v| value_eq(v, value)),
        Cond::AnyOf(field, list) => values_at(json, field)
            .iter()
            .any(|v| v.as_str().is_some_and(|s| list.iter().any(|l| l == s))),
        Cond::Range { field, gte, lte } => values_at(json, field).iter().any(|v| {
            v.as_f64()
                .is_some_and(|x| gte.is_none_or(|g| x >= g) && lte.is_none_or(|l| x <= l))
        }),
    }
}

/// `filter` ANDed with the partition (the same [`Filter::scoped`] `EdgeStore` translates).
fn matches(stored: &Stored, scoped: &Filter) -> bool {
    scoped.must.iter().all(|c| cond_holds(&stored.json, c))
}

/// Qdrant's cosine preprocessing: a vector of zero or unit length is kept as is.
fn normalize(mut v: Vec<f32>) -> Vec<f32> {
    let len2: f32 = v.iter().map(|x| x * x).sum();
    if len2 < f32::EPSILON || (len2 - 1.0).abs() <= f32::EPSILON {
        return v;
    }
    let len = len2.sqrt();
    v.iter_mut().for_each(|x| *x /= len);
    v
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Qdrant's IDF ("fancy_idf" in qdrant-edge's query context), in `f32` like Qdrant.
fn idf(n: f32, df: f32) -> f32 {
    ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
}

/// Qdrant's weighted RRF contribution of the item at 0-based `position` of a leg.
fn rrf(position: usize, k: usize, weight: f32) -> f32 {
    if weight <= 0.0 {
        return 0.0;
    }
    1.0 / ((position + 1) as f32 / weight + k as f32 - 1.0)
}

/// Score descending, then id ascending: a deterministic order.
fn rank(scored: &mut [(Uuid, f32)]) {
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
}

impl InMemoryStore {
    fn dense_leg(
        points: &BTreeMap<Uuid, Stored>,
        scoped: &Filter,
        query: Vec<f32>,
        limit: usize,
    ) -> Vec<(Uuid, f32)> {
        let q = normalize(query);
        let mut scored: Vec<(Uuid, f32)> = points
            .iter()
            .filter(|(_, s)| matches(s, scoped))
            .filter_map(|(id, s)| s.dense.as_ref().map(|d| (*id, dot(d, &q))))
            .collect();
        rank(&mut scored);
        scored.truncate(limit);
        scored
    }

    fn sparse_leg(
        &self,
        points: &BTreeMap<Uuid, Stored>,
        scoped: &Filter,
        text: &str,
        limit: usize,
    ) -> Vec<(Uuid, f32)> {
        let query = self.bm25.embed_query(text);
        if query.indices.is_empty() {
            return Vec::new();
        }
        // Collection statistics over every point with a sparse vector, whatever its
        // partition: that is what Qdrant's IDF modifier uses.
        let n = points.values().filter(|s| !s.sparse.is_empty()).count() as f32;
        let weights: Vec<(u32, f32)> = query
            .indices
            .iter()
            .zip(&query.values)
            .map(|(term, w)| {
                let df = points
                    .values()
                    .filter(|s| s.sparse.contains_key(term))
                    .count() as f32;
                (*term, w * idf(n, df))
            })
            .collect();
        let mut scored: Vec<(Uuid, f32)> = points
            .iter()
            .filter(|(_, s)| !s.sparse.is_empty() && matches(s, scoped))
            .filter_map(|(id, s)| {
                let mut hit = false;
                let mut score = 0.0f32;
                for (term, qw) in &weights {
                    if let Some(dw) = s.sparse.get(term) {
                        hit = true;
                        score += qw * dw;
                    }
                }
                hit.then_some((*id, score))
            })
            .collect();
        rank(&mut scored);
        scored.truncate(limit);
        scored
    }

    /// The hits of ranked ids (all from `points`, read under the same lock).
    fn hits(
        points: &BTreeMap<Uuid, Stored>,
        ranked: impl IntoIterator<Item = (Uuid, f32)>,
        with_vectors: bool,
    ) -> Vec<Hit> {
        ranked
            .into_iter()
            .filter_map(|(id, score)| {
                points.get(&id).map(|s| Hit {
                    id,
                    score,
                    point: s.point.clone(),
                    dense: if with_vectors { s.dense.clone() } else { None },
                })
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl MemoryStore for InMemoryStore {
    async fn upsert(&self, points: Vec<UpsertPoint>) -> Result<()> {
        // Checked first: a batch with one bad vector writes nothing (as in EdgeStore).
        for p in &points {
            if let Some(d) = &p.dense {
                self.check_dim(d, "vector")?;
            }
        }
        let mut encoded = Vec::with_capacity(points.len());
        for p in points {
            let json =
                serde_json::to_value(&p.payload).map_err(|e| StoreError::Engine(e.to_string()))?;
            let sparse = match (&p.sparse, &p.bm25_text) {
                (Some(v), _) => v
                    .indices
                    .iter()
                    .copied()
                    .zip(v.values.iter().copied())
                    .collect(),
                (None, Some(text)) => {
                    let v = self.bm25.embed_document(text);
                    v.indices.into_iter().zip(v.values).collect()
                }
                (None, None) => HashMap::new(),
            };
            encoded.push((
                p.id,
                Stored {
                    point: p.payload,
                    json,
                    dense: p.dense.map(normalize),
                    sparse,
                },
            ));
        }
        let mut map = self.write();
        for (id, stored) in encoded {
            // Whole-point replacement: payload and vectors.
            map.insert(id, stored);
        }
        Ok(())
    }

    async fn delete_ids(&self, partition: &Partition, ids: Vec<Uuid>) -> Result<()> {
        let mut map = self.write();
        for id in ids {
            if map
                .get(&id)
                .is_some_and(|s| in_partition(&s.point, partition))
            {
                map.remove(&id);
            }
        }
        Ok(())
    }

    async fn delete_where(&self, partition: &Partition, filter: Filter) -> Result<()> {
        validate(&filter)?;
        let scoped = filter.scoped(partition);
        self.write().retain(|_, s| !matches(s, &scoped));
        Ok(())
    }

    async fn search(&self, partition: &Partition, request: SearchRequest) -> Result<Vec<Hit>> {
        validate(&request.filter)?;
        if let SearchMode::Dense(v) | SearchMode::Hybrid { dense: v, .. } = &request.mode {
            self.check_dim(v, "query vector")?;
        }
        let scoped = request.filter.scoped(partition);
        let map = self.read();
        let ranked = match request.mode {
            SearchMode::Dense(v) => Self::dense_leg(&map, &scoped, v, request.limit),
            SearchMode::Sparse(text) => self.sparse_leg(&map, &scoped, &text, request.limit),
            SearchMode::Hybrid {
                dense,
                text,
                prefetch,
                k,
                weights,
            } => {
                let legs = [
                    (Self::dense_leg(&map, &scoped, dense, prefetch), weights.0),
                    (self.sparse_leg(&map, &scoped, &text, prefetch), weights.1),
                ];
                let mut fused: HashMap<Uuid, f32> = HashMap::new();
                for (leg, weight) in &legs {
                    for (pos, (id, _)) in leg.iter().enumerate() {
                        *fused.entry(*id).or_insert(0.0) += rrf(pos, k, *weight);
                    }
                }
                let mut fused: Vec<(Uuid, f32)> = fused.into_iter().collect();
                rank(&mut fused);
                fused.truncate(request.limit);
                fused
            }
        };
        Ok(Self::hits(&map, ranked, request.with_vectors))
    }

    async fn retrieve(
        &self,
        partition: &Partition,
        ids: &[Uuid],
        with_vectors: bool,
    ) -> Result<Vec<Hit>> {
        let map = self.read();
        let mut seen = HashSet::new();
        let found = ids
            .iter()
            // An id asked twice comes back once, at its first position (as in Qdrant).
            .filter(|id| seen.insert(**id))
            .filter(|id| {
                map.get(id)
                    .is_some_and(|s| in_partition(&s.point, partition))
            })
            .map(|id| (*id, 0.0));
        Ok(Self::hits(&map, found, with_vectors))
    }

    async fn scroll(
        &self,
        partition: &Partition,
        filter: Filter,
        limit: usize,
        offset: Option<Uuid>,
    ) -> Result<(Vec<Hit>, Option<Uuid>)> {
        validate(&filter)?;
        let scoped = filter.scoped(partition);
        let limit = limit.max(1);
        let map = self.read();
        let mut ids: Vec<Uuid> = map
            .range(offset.unwrap_or(Uuid::nil())..)
            .filter(|(_, s)| matches(s, &scoped))
            .map(|(id, _)| *id)
            .take(limit + 1)
            .collect();
        // Like Qdrant: one point more than asked, whose id is the next page's offset.
        let next = if ids.len() > limit { ids.pop() } else { None };
        let hits = Self::hits(&map, ids.into_iter().map(|id| (id, 0.0)), false);
        Ok((hits, next))
    }

    async fn count(&self, partition: &Partition, filter: Filter) -> Result<usize> {
        validate(&filter)?;
        let scoped = filter.scoped(partition);
        Ok(self.read().values().filter(|s| matches(s, &scoped)).count())
    }

    async fn count_all(&self) -> Result<usize> {
        Ok(self.read().len())
    }

    async fn optimize(&self) -> Result<bool> {
        // Nothing to build: every search is a full scan.
        Ok(false)
    }

    async fn flush(&self) -> Result<()> {
        // Nothing to persist: the store lives and dies with the process.
        Ok(())
    }

    fn backend(&self) -> crate::BackendInfo {
        crate::BackendInfo {
            kind: "memory",
            location: "process memory".into(),
            collection: None,
        }
    }

    async fn export(
        &self,
        offset: Option<Uuid>,
        limit: usize,
    ) -> Result<(Vec<UpsertPoint>, Option<Uuid>)> {
        let limit = limit.max(1);
        let map = self.read();
        let mut page: Vec<UpsertPoint> = map
            .range(offset.unwrap_or(Uuid::nil())..)
            .take(limit + 1)
            .map(|(id, s)| {
                let mut terms: Vec<(u32, f32)> = s.sparse.iter().map(|(k, v)| (*k, *v)).collect();
                terms.sort_by_key(|(k, _)| *k);
                UpsertPoint {
                    id: *id,
                    dense: s.dense.clone(),
                    bm25_text: None,
                    sparse: (!terms.is_empty()).then(|| crate::SparseVector {
                        indices: terms.iter().map(|(k, _)| *k).collect(),
                        values: terms.iter().map(|(_, v)| *v).collect(),
                    }),
                    payload: s.point.clone(),
                }
            })
            .collect();
        let next = if page.len() > limit {
            page.pop().map(|p| p.id)
        } else {
            None
        };
        Ok((page, next))
    }
}
