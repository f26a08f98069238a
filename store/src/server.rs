//! [`MemoryStore`] on a Qdrant server or cluster, over gRPC (`qdrant-client`).
//!
//! Layout, the same as the embedded shard so rankings agree: one collection per deployment,
//! named dense vector [`DENSE`] (cosine) and named sparse vector [`BM25`] with the IDF
//! modifier. The sparse vectors are computed here, by the same `EdgeBm25` encoder as
//! [`crate::EdgeStore`] (English stemming), so a text gets the same term ids and weights on
//! either backend; the server applies the IDF from its own statistics, as the shard does.
//! Keyword payload indexes on every filtered field, `tenant` marked `is_tenant`; integer
//! indexes on `ts`, `seq`, `chunk_index`. Hybrid search is prefetch + weighted RRF inside
//! the server.
//!
//! Writes: `wait=true` (acknowledged once applied) with `medium` write ordering (every
//! replica applies a shard's writes in one order, chosen by a dynamically elected leader),
//! so an acknowledged write is visible to the next read and, in a cluster, replicas do not
//! disagree on which of two writes to one point came last. Every call is retried with
//! backoff on transient failures (unavailable, deadline exceeded, resource exhausted,
//! aborted) for a few seconds; after that the error is [`StoreError::Unavailable`], which
//! the doors answer with `503`. All of Cairn's writes are idempotent (content-addressed ids,
//! whole-point upserts, deletes), so a retry after an ambiguous failure is safe.
//!
//! Several Cairn processes may share one collection. What one process serializes with a
//! mutex (turn completion, candidate decisions, knowledge read-modify-writes, document
//! version flips, message sequence numbers) is also serialized across processes by
//! [`MemoryStore::lock`]: a lease point per lock name, in a reserved tenant no partition can
//! name (`cairn:locks`; scope components cannot hold `:`). Taking it is an insert-only upsert
//! (the first writer wins; the others are no-ops), then a read of who holds it. A lease
//! expires [`LEASE`] after its last renewal (a task renews it while held), so a process that
//! dies holding a lock delays the others by at most that long; a live holder is never
//! overtaken, because an expired lease is taken over only by a conditional update that
//! matches the exact lease that was read.
//!
//! The collection is created on first use (by whichever process comes first; a concurrent
//! creation by another process is not an error). Connection set-up is lazy too: opening a
//! store does no I/O, so it never blocks the caller's runtime.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_models::{Partition, StoredPoint};
use qdrant_client::qdrant::{
    self as q, point_id::PointIdOptions, points_selector::PointsSelectorOneOf, query::Variant,
    vector_output, vectors_config, vectors_output, with_payload_selector, with_vectors_selector,
    Condition, CountPoints, CreateCollection, CreateFieldIndexCollection, DeletePoints, FieldType,
    GetPoints, PointId, PointStruct, PointsSelector, PrefetchQuery, Query, QueryPoints, Rrf,
    ScrollPoints, UpsertPoints, VectorInput, WithPayloadSelector, WithVectorsSelector,
    WriteOrdering, WriteOrderingType,
};
use qdrant_client::{Payload, Qdrant, QdrantError};
use qdrant_edge::bm25_embed::EdgeBm25;
use tonic::Code;
use uuid::Uuid;

use crate::edge::{BackupProgress, BackupReport, SnapshotFile};
use crate::{in_partition, INTEGER_FIELDS, KEYWORD_FIELDS};
use crate::{
    BackendInfo, Cond, Filter, Hit, MemoryStore, Result, SearchMode, SearchRequest, SparseVector,
    StoreError, StoreLock, UpsertPoint, Value, BM25, DENSE,
};

/// The tenant of lock leases: scope components cannot contain `:`, so no partition reads or
/// deletes them.
const LOCK_TENANT: &str = "cairn:locks";

/// How long a lease outlives its last renewal. A holder renews it every third of this.
pub const LEASE: Duration = Duration::from_secs(15);

/// Points per upsert request: keeps a request well under gRPC's message size limits
/// (256 × 384-d vectors plus payloads is a few MB at most).
const UPSERT_BATCH: usize = 256;

/// Delays between attempts of a call that failed transiently (about 6 s in all).
const RETRY_DELAYS_MS: &[u64] = &[50, 100, 200, 400, 800, 1600, 3000];

/// Read consistency of a replicated collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadConsistency {
    /// The server's default: one replica answers.
    #[default]
    Any,
    /// A majority of the replicas must agree.
    Majority,
    /// Half of the replicas plus one.
    Quorum,
    /// Every replica.
    All,
}

impl ReadConsistency {
    /// The name [`std::str::FromStr`] reads back.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadConsistency::Any => "any",
            ReadConsistency::Majority => "majority",
            ReadConsistency::Quorum => "quorum",
            ReadConsistency::All => "all",
        }
    }
}

impl std::str::FromStr for ReadConsistency {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "" | "any" | "default" => Ok(ReadConsistency::Any),
            "majority" => Ok(ReadConsistency::Majority),
            "quorum" => Ok(ReadConsistency::Quorum),
            "all" => Ok(ReadConsistency::All),
            other => Err(StoreError::Invalid(format!(
                "read consistency {other:?}: expected any, majority, quorum or all"
            ))),
        }
    }
}

/// Where and how to reach the server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// gRPC URL, e.g. `http://127.0.0.1:6334` (`https://` for TLS with the system's roots).
    pub url: String,
    pub api_key: Option<String>,
    /// Collection name (default `cairn`).
    pub collection: String,
    /// Shards of a new collection (the server's default when absent).
    pub shard_number: Option<u32>,
    /// Replicas of each shard of a new collection.
    pub replication_factor: Option<u32>,
    /// Replicas that must acknowledge a write of a new collection.
    pub write_consistency_factor: Option<u32>,
    pub read_consistency: ReadConsistency,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Dense vector dimension (the embedding model's).
    pub dim: usize,
    /// REST URL (snapshots move over REST only); `None`: the gRPC URL with port 6334
    /// replaced by 6333.
    pub rest_url: Option<String>,
}

impl ServerConfig {
    /// A configuration with the defaults (collection `cairn`, 30 s timeout).
    pub fn new(url: impl Into<String>, dim: usize) -> Self {
        ServerConfig {
            url: url.into(),
            api_key: None,
            collection: "cairn".into(),
            shard_number: None,
            replication_factor: None,
            write_consistency_factor: None,
            read_consistency: ReadConsistency::Any,
            timeout: Duration::from_secs(30),
            dim,
            rest_url: None,
        }
    }
}

impl ServerConfig {
    /// Sets the collection name from `template` (`{dir}` becomes a digest of `data_dir`).
    pub fn set_collection(&mut self, template: &str, data_dir: &Path) -> Result<()> {
        self.collection = collection_name(template, data_dir)?;
        Ok(())
    }

    /// This configuration's collection name followed by a digest of `data_dir`: one
    /// collection per data directory on a shared server (throwaway evaluation workspaces).
    pub fn collection_for_dir(&self, data_dir: &Path) -> Result<String> {
        collection_name(&format!("{}_{{dir}}", self.collection), data_dir)
    }
}

/// The collection name for `template`: `{dir}` replaced by a digest of the data directory.
fn collection_name(template: &str, data_dir: &Path) -> Result<String> {
    let dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = Uuid::new_v5(&Uuid::NAMESPACE_URL, dir.to_string_lossy().as_bytes()).simple();
    let name = template.replace("{dir}", &digest.to_string()[..16]);
    if name.is_empty()
        || name.len() > 255
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(StoreError::Invalid(format!(
            "collection name {name:?}: use letters, digits, '_', '-' and '.'"
        )));
    }
    Ok(name)
}

/// The Qdrant server store. Cheap to clone (one connection pool).
#[derive(Clone)]
pub struct QdrantStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Qdrant,
    config: ServerConfig,
    bm25: EdgeBm25,
    /// Set once the collection exists with our layout.
    ready: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for QdrantStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QdrantStore")
            .field("url", &self.inner.config.url)
            .field("collection", &self.inner.config.collection)
            .field("dim", &self.inner.config.dim)
            .finish()
    }
}

/// Whether a status is the client failing to reach the server at all. qdrant-client 1.19
/// reports a refused connection as `internal` ("Failed to connect to ..."), and a connection
/// cut mid-request surfaces as a transport error; both mean "unavailable", not a bug.
fn unreachable(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::Internal | Code::Unknown)
        && [
            "Failed to connect to",
            "transport error",
            "connection reset",
            "broken pipe",
        ]
        .iter()
        .any(|m| {
            status
                .message()
                .to_ascii_lowercase()
                .contains(&m.to_ascii_lowercase())
        })
}

fn classify(what: &str, e: QdrantError) -> StoreError {
    let message = format!("qdrant {what}: {e}");
    match &e {
        QdrantError::ResponseError { status } if unreachable(status) => {
            StoreError::Unavailable(message)
        }
        QdrantError::ResponseError { status } => match status.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::Cancelled
            | Code::ResourceExhausted => StoreError::Unavailable(message),
            Code::Unauthenticated | Code::PermissionDenied => {
                StoreError::Unavailable(format!("{message} (check CAIRN_QDRANT_API_KEY)"))
            }
            Code::InvalidArgument | Code::OutOfRange => StoreError::Invalid(message),
            _ => StoreError::Engine(message),
        },
        QdrantError::ResourceExhaustedError { .. } | QdrantError::Io(_) => {
            StoreError::Unavailable(message)
        }
        QdrantError::InvalidUri(_) => StoreError::Invalid(message),
        _ => StoreError::Engine(message),
    }
}

fn transient(e: &QdrantError) -> bool {
    match e {
        QdrantError::ResponseError { status } if unreachable(status) => true,
        QdrantError::ResponseError { status } => matches!(
            status.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::ResourceExhausted
                | Code::Cancelled
        ),
        QdrantError::ResourceExhaustedError { .. } | QdrantError::Io(_) => true,
        _ => false,
    }
}

fn ordering() -> Option<WriteOrdering> {
    Some(WriteOrdering {
        r#type: WriteOrderingType::Medium as i32,
    })
}

fn point_id(id: Uuid) -> PointId {
    PointId::from(id.to_string())
}

fn uuid_of(id: Option<&PointId>) -> Result<Uuid> {
    match id.and_then(|p| p.point_id_options.as_ref()) {
        Some(PointIdOptions::Uuid(s)) => Uuid::parse_str(s).map_err(|e| StoreError::Corrupt {
            id: s.clone(),
            reason: e.to_string(),
        }),
        Some(PointIdOptions::Num(n)) => Err(StoreError::Corrupt {
            id: n.to_string(),
            reason: "numeric point id (Cairn writes UUIDs only)".into(),
        }),
        None => Err(StoreError::Engine("a point without an id".into())),
    }
}

fn decode(id: Uuid, payload: HashMap<String, q::Value>) -> Result<StoredPoint> {
    let json = serde_json::Value::from(Payload::from(payload));
    serde_json::from_value(json)
        .map(cairn_models::RecordState::upgrade_legacy)
        .map_err(|e| StoreError::Corrupt {
            id: id.to_string(),
            reason: e.to_string(),
        })
}

/// Dense and sparse vectors of a point read back.
fn vectors_of(v: Option<q::VectorsOutput>) -> (Option<Vec<f32>>, Option<SparseVector>) {
    let Some(vectors_output::VectorsOptions::Vectors(named)) = v.and_then(|v| v.vectors_options)
    else {
        return (None, None);
    };
    let mut dense = None;
    let mut sparse = None;
    for (name, out) in named.vectors {
        #[allow(deprecated)]
        let (data, indices) = (out.data, out.indices);
        match (name.as_str(), out.vector) {
            (DENSE, Some(vector_output::Vector::Dense(d))) => dense = Some(d.data),
            (BM25, Some(vector_output::Vector::Sparse(s))) => {
                sparse = Some(SparseVector {
                    indices: s.indices,
                    values: s.values,
                })
            }
            // Older servers fill the deprecated flat fields instead.
            (DENSE, None) if indices.is_none() => dense = Some(data),
            (BM25, None) => {
                sparse = Some(SparseVector {
                    indices: indices.map(|i| i.data).unwrap_or_default(),
                    values: data,
                })
            }
            _ => {}
        }
    }
    (dense, sparse)
}

fn with_payload() -> Option<WithPayloadSelector> {
    Some(WithPayloadSelector {
        selector_options: Some(with_payload_selector::SelectorOptions::Enable(true)),
    })
}

fn with_vectors(names: &[&str]) -> Option<WithVectorsSelector> {
    Some(WithVectorsSelector {
        selector_options: Some(if names.is_empty() {
            with_vectors_selector::SelectorOptions::Enable(false)
        } else {
            with_vectors_selector::SelectorOptions::Include(q::VectorsSelector {
                names: names.iter().map(|n| n.to_string()).collect(),
            })
        }),
    })
}

fn match_cond(field: &str, value: &Value) -> Condition {
    match value {
        Value::Str(s) => Condition::matches(field, s.clone()),
        Value::Int(i) => Condition::matches(field, *i),
        Value::Bool(b) => Condition::matches(field, *b),
    }
}

/// Cairn's filter, scoped to `partition`, as a Qdrant filter.
fn to_filter(filter: &Filter, partition: &Partition) -> Result<q::Filter> {
    let scoped = filter.scoped(partition);
    let mut must = Vec::new();
    let mut must_not = Vec::new();
    for cond in &scoped.must {
        if cond_field(cond).is_empty() {
            return Err(StoreError::Invalid("empty payload field name".into()));
        }
        match cond {
            Cond::Eq(field, value) => must.push(match_cond(field, value)),
            Cond::NotEq(field, value) => must_not.push(match_cond(field, value)),
            Cond::AnyOf(field, values) => must.push(Condition::matches(field, values.clone())),
            Cond::Range { field, gte, lte } => must.push(Condition::range(
                field,
                q::Range {
                    gte: *gte,
                    lte: *lte,
                    ..Default::default()
                },
            )),
        }
    }
    Ok(q::Filter {
        must,
        must_not,
        ..Default::default()
    })
}

fn cond_field(cond: &Cond) -> &str {
    match cond {
        Cond::Eq(f, _) | Cond::NotEq(f, _) | Cond::AnyOf(f, _) => f,
        Cond::Range { field, .. } => field,
    }
}

/// Everything but the lock leases.
fn not_locks() -> q::Filter {
    q::Filter {
        must_not: vec![Condition::matches("tenant", LOCK_TENANT.to_string())],
        ..Default::default()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl QdrantStore {
    /// A store for `config`. Does no I/O: the connection and the collection are set up on
    /// first use ([`MemoryStore::health`] does it eagerly).
    pub fn new(config: ServerConfig) -> Result<Self> {
        let mut builder = Qdrant::from_url(&config.url)
            .timeout(config.timeout)
            .connect_timeout(Duration::from_secs(5))
            // The client's own check prints to stdout (which is the MCP stdio channel);
            // `ensure` checks the version and logs instead.
            .skip_compatibility_check();
        if let Some(key) = &config.api_key {
            builder = builder.api_key(key.clone());
        }
        let client = builder.build().map_err(|e| classify("client", e))?;
        Ok(QdrantStore {
            inner: Arc::new(Inner {
                client,
                bm25: crate::edge::new_bm25()?,
                config,
                ready: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// Recovers this store's collection, which must not exist yet, from a snapshot file a
    /// backup wrote ([`MemoryStore::backup`]), after checking the file still has the digest
    /// the backup recorded. The collection is then checked for Cairn's layout as on first use.
    pub async fn recover_snapshot(&self, file: &Path, sha256: &str) -> Result<()> {
        let collection = self.collection();
        if self.collection_exists().await? {
            return Err(StoreError::Invalid(format!(
                "collection {collection} already exists on {}: restore into a new collection \
                 (--qdrant-collection)",
                self.inner.config.url
            )));
        }
        let config = &self.inner.config;
        let rest = crate::snapshot::rest_base(&config.url, config.rest_url.as_deref())?;
        let (key, path, timeout, expected) = (
            config.api_key.clone(),
            file.to_path_buf(),
            config.timeout,
            sha256.to_string(),
        );
        tokio::task::spawn_blocking(move || {
            let actual = crate::snapshot::digest(&path)?;
            if !actual.eq_ignore_ascii_case(&expected) {
                return Err(StoreError::Corrupt {
                    id: path.display().to_string(),
                    reason: format!("SHA-256 is {actual}, the backup recorded {expected}"),
                });
            }
            crate::snapshot::upload(&rest, key.as_deref(), &collection, &path, timeout)
        })
        .await
        .map_err(|e| StoreError::Engine(format!("snapshot upload task: {e}")))??;
        self.ensure().await
    }

    /// The configuration in force.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    fn collection(&self) -> String {
        self.inner.config.collection.clone()
    }

    /// Whether the configured collection exists on the server.
    async fn collection_exists(&self) -> Result<bool> {
        let name = self.collection();
        self.call("collection_exists", |c| {
            let name = name.clone();
            async move { c.collection_exists(name).await }
        })
        .await
    }

    fn read_consistency(&self) -> Option<q::ReadConsistency> {
        let t = match self.inner.config.read_consistency {
            ReadConsistency::Any => return None,
            ReadConsistency::Majority => q::ReadConsistencyType::Majority,
            ReadConsistency::Quorum => q::ReadConsistencyType::Quorum,
            ReadConsistency::All => q::ReadConsistencyType::All,
        };
        Some(q::ReadConsistency {
            value: Some(q::read_consistency::Value::Type(t as i32)),
        })
    }

    /// Runs `call`, retrying transient failures with backoff.
    async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        F: Fn(Qdrant) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, QdrantError>>,
    {
        let mut attempt = 0;
        loop {
            match call(self.inner.client.clone()).await {
                Ok(v) => return Ok(v),
                Err(e) if transient(&e) && attempt < RETRY_DELAYS_MS.len() => {
                    tracing::debug!(what, attempt, "qdrant call failed, retrying: {e}");
                    tokio::time::sleep(Duration::from_millis(RETRY_DELAYS_MS[attempt])).await;
                    attempt += 1;
                }
                Err(e) => return Err(classify(what, e)),
            }
        }
    }

    /// Creates the collection and its payload indexes if they are missing, and checks that
    /// an existing one has our layout. Once per process.
    async fn ensure(&self) -> Result<()> {
        self.inner
            .ready
            .get_or_try_init(|| self.create_layout())
            .await
            .map(|_| ())
    }

    async fn create_layout(&self) -> Result<()> {
        let config = &self.inner.config;
        let health = self
            .call("health check", |c| async move { c.health_check().await })
            .await?;
        check_version(&health.version);
        let name = self.collection();
        if !self.collection_exists().await? {
            let create = CreateCollection {
                collection_name: name.clone(),
                vectors_config: Some(q::VectorsConfig {
                    config: Some(vectors_config::Config::ParamsMap(q::VectorParamsMap {
                        map: HashMap::from([(
                            DENSE.to_string(),
                            q::VectorParams {
                                size: config.dim as u64,
                                distance: q::Distance::Cosine as i32,
                                ..Default::default()
                            },
                        )]),
                    })),
                }),
                sparse_vectors_config: Some(q::SparseVectorConfig {
                    map: HashMap::from([(
                        BM25.to_string(),
                        q::SparseVectorParams {
                            modifier: Some(q::Modifier::Idf as i32),
                            ..Default::default()
                        },
                    )]),
                }),
                shard_number: config.shard_number,
                replication_factor: config.replication_factor,
                write_consistency_factor: config.write_consistency_factor,
                ..Default::default()
            };
            let created = self
                .call("create collection", |c| {
                    let create = create.clone();
                    async move { c.create_collection(create).await }
                })
                .await;
            if let Err(e) = created {
                // Another Cairn process may have created it in the meantime.
                let exists = self
                    .call("collection_exists", |c| {
                        let name = name.clone();
                        async move { c.collection_exists(name).await }
                    })
                    .await?;
                if !exists {
                    return Err(e);
                }
            }
        }
        let info = self
            .call("collection info", |c| {
                let name = name.clone();
                async move { c.collection_info(name).await }
            })
            .await?
            .result
            .ok_or_else(|| StoreError::Engine(format!("no information on collection {name}")))?;
        let dim = info
            .config
            .as_ref()
            .and_then(|c| c.params.as_ref())
            .and_then(|p| p.vectors_config.as_ref())
            .and_then(|v| match &v.config {
                Some(vectors_config::Config::ParamsMap(m)) => m.map.get(DENSE).map(|p| p.size),
                _ => None,
            });
        if dim != Some(config.dim as u64) {
            return Err(StoreError::Invalid(format!(
                "collection {name} on {} holds {dim:?}-d `{DENSE}` vectors but the model makes \
                 {}-d vectors; use another collection (CAIRN_QDRANT_COLLECTION) or the model \
                 it was built with",
                config.url, config.dim
            )));
        }
        let fields = KEYWORD_FIELDS
            .iter()
            .map(|f| (*f, FieldType::Keyword))
            .chain(INTEGER_FIELDS.iter().map(|f| (*f, FieldType::Integer)));
        for (field, kind) in fields {
            if info.payload_schema.contains_key(field) {
                continue;
            }
            let params = (field == "tenant").then(|| q::PayloadIndexParams {
                index_params: Some(q::payload_index_params::IndexParams::KeywordIndexParams(
                    q::KeywordIndexParams {
                        is_tenant: Some(true),
                        ..Default::default()
                    },
                )),
            });
            let request = CreateFieldIndexCollection {
                collection_name: name.clone(),
                wait: Some(true),
                field_name: field.to_string(),
                field_type: Some(kind as i32),
                field_index_params: params,
                ordering: ordering(),
                ..Default::default()
            };
            self.call("create payload index", |c| {
                let request = request.clone();
                async move { c.create_field_index(request).await }
            })
            .await?;
        }
        Ok(())
    }

    async fn upsert_raw(&self, points: Vec<PointStruct>) -> Result<()> {
        let name = self.collection();
        for batch in points.chunks(UPSERT_BATCH) {
            let request = UpsertPoints {
                collection_name: name.clone(),
                wait: Some(true),
                points: batch.to_vec(),
                ordering: ordering(),
                ..Default::default()
            };
            self.call("upsert", |c| {
                let request = request.clone();
                async move { c.upsert_points(request).await }
            })
            .await?;
        }
        Ok(())
    }

    async fn delete_filter(&self, filter: q::Filter) -> Result<()> {
        let request = DeletePoints {
            collection_name: self.collection(),
            wait: Some(true),
            points: Some(PointsSelector {
                points_selector_one_of: Some(PointsSelectorOneOf::Filter(filter)),
            }),
            ordering: ordering(),
            ..Default::default()
        };
        self.call("delete", |c| {
            let request = request.clone();
            async move { c.delete_points(request).await }
        })
        .await?;
        Ok(())
    }

    fn point_struct(&self, p: UpsertPoint) -> Result<PointStruct> {
        let mut vectors: HashMap<String, q::Vector> = HashMap::new();
        if let Some(d) = p.dense {
            vectors.insert(DENSE.to_string(), d.into());
        }
        let sparse = match (p.sparse, &p.bm25_text) {
            (Some(v), _) => Some(v),
            (None, Some(text)) => {
                let v = self.inner.bm25.embed_document(text);
                Some(SparseVector {
                    indices: v.indices,
                    values: v.values,
                })
            }
            (None, None) => None,
        };
        // An empty sparse vector matches nothing; the embedded shard keeps none either.
        if let Some(v) = sparse.filter(|v| !v.indices.is_empty()) {
            if v.indices.len() != v.values.len() {
                return Err(StoreError::Invalid(format!(
                    "sparse vector of point {} has {} indices and {} values",
                    p.id,
                    v.indices.len(),
                    v.values.len()
                )));
            }
            let pairs: Vec<(u32, f32)> = v.indices.into_iter().zip(v.values).collect();
            vectors.insert(BM25.to_string(), pairs.into());
        }
        let json =
            serde_json::to_value(&p.payload).map_err(|e| StoreError::Engine(e.to_string()))?;
        let payload = Payload::try_from(json).map_err(|e| StoreError::Engine(e.to_string()))?;
        Ok(PointStruct::new(point_id(p.id), vectors, payload))
    }

    fn check_dim(&self, v: &[f32], what: &str) -> Result<()> {
        let dim = self.inner.config.dim;
        if v.len() != dim {
            return Err(StoreError::Invalid(format!(
                "{what} of dimension {} for a {dim}-d store",
                v.len()
            )));
        }
        Ok(())
    }

    /// Reads the lease of `id`: (holder, expiry in ms).
    async fn read_lease(&self, id: Uuid) -> Result<Option<(String, i64)>> {
        let request = GetPoints {
            collection_name: self.collection(),
            ids: vec![point_id(id)],
            with_payload: with_payload(),
            with_vectors: with_vectors(&[]),
            // A lease decides who may write: read it from a majority when replicated.
            read_consistency: self.read_consistency(),
            ..Default::default()
        };
        let got = self
            .call("read lease", |c| {
                let request = request.clone();
                async move { c.get_points(request).await }
            })
            .await?;
        Ok(got.result.into_iter().next().map(|p| {
            let json = serde_json::Value::from(Payload::from(p.payload));
            (
                json["holder"].as_str().unwrap_or_default().to_string(),
                json["expires_ms"].as_i64().unwrap_or(0),
            )
        }))
    }

    /// Writes the lease of `id` for `holder`: insert-only, or an update of the existing
    /// point restricted by `only_if`.
    async fn write_lease(
        &self,
        id: Uuid,
        name: &str,
        holder: &str,
        only_if: Option<q::Filter>,
    ) -> Result<()> {
        let payload = Payload::try_from(serde_json::json!({
            "tenant": LOCK_TENANT,
            "lock": name,
            "holder": holder,
            "expires_ms": now_ms() + LEASE.as_millis() as i64,
        }))
        .map_err(|e| StoreError::Engine(e.to_string()))?;
        let insert_only = only_if.is_none();
        let request = UpsertPoints {
            collection_name: self.collection(),
            wait: Some(true),
            points: vec![PointStruct::new(
                point_id(id),
                HashMap::<String, q::Vector>::new(),
                payload,
            )],
            ordering: ordering(),
            update_filter: only_if,
            update_mode: insert_only.then_some(q::UpdateMode::InsertOnly as i32),
            ..Default::default()
        };
        self.call("write lease", |c| {
            let request = request.clone();
            async move { c.upsert_points(request).await }
        })
        .await?;
        Ok(())
    }

    fn lease_filter(id: Uuid, holder: &str, expires_ms: Option<i64>) -> q::Filter {
        let mut must = vec![
            Condition::has_id([point_id(id)]),
            Condition::matches("tenant", LOCK_TENANT.to_string()),
            Condition::matches("holder", holder.to_string()),
        ];
        if let Some(e) = expires_ms {
            must.push(Condition::matches("expires_ms", e));
        }
        q::Filter {
            must,
            ..Default::default()
        }
    }
}

/// Logs when the server's version is more than one minor away from the client's.
fn check_version(server: &str) {
    let minor = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.trim_start_matches('v').split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    // The pinned client line (Cargo.toml: qdrant-client ~1.19).
    let client = (1u64, 19u64);
    match minor(server) {
        Some((major, m)) if major == client.0 && m.abs_diff(client.1) <= 1 => {
            tracing::info!(server, "qdrant server version is compatible")
        }
        Some(_) => tracing::warn!(
            server,
            "qdrant server version is more than one minor version away from the client (1.19)"
        ),
        None => tracing::warn!(server, "cannot read the qdrant server's version"),
    }
}

/// A held lease: renewed in the background, deleted when dropped.
struct LeaseGuard {
    store: QdrantStore,
    id: Uuid,
    holder: String,
    renew: tokio::task::JoinHandle<()>,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.renew.abort();
        let store = self.store.clone();
        let filter = QdrantStore::lease_filter(self.id, &self.holder, None);
        // Released in the background: a process without a runtime any more (shutting down)
        // leaves the lease to expire instead.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.delete_filter(filter).await {
                    tracing::warn!("releasing a store lock failed (it expires by itself): {e}");
                }
            });
        }
    }
}

#[async_trait::async_trait]
impl MemoryStore for QdrantStore {
    async fn upsert(&self, points: Vec<UpsertPoint>) -> Result<()> {
        if points.is_empty() {
            return Ok(());
        }
        // Checked first: a batch with one bad vector writes nothing.
        for p in &points {
            if let Some(d) = &p.dense {
                self.check_dim(d, "vector")?;
            }
        }
        let structs = points
            .into_iter()
            .map(|p| self.point_struct(p))
            .collect::<Result<Vec<_>>>()?;
        self.ensure().await?;
        self.upsert_raw(structs).await?;
        // The crash sweep's point "acknowledged by the store, not yet by Cairn" (the
        // embedded store's `store.after_sync`), so the same sweep runs on a server.
        cairn_models::failpoint("store.after_sync");
        Ok(())
    }

    async fn delete_ids(&self, partition: &Partition, ids: Vec<Uuid>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        self.ensure().await?;
        // Only what is inside the partition: the id list ANDed with the partition's scope.
        let mut filter = to_filter(&Filter::new(), partition)?;
        filter
            .must
            .push(Condition::has_id(ids.into_iter().map(point_id)));
        self.delete_filter(filter).await?;
        cairn_models::failpoint("store.after_sync");
        Ok(())
    }

    async fn delete_where(&self, partition: &Partition, filter: Filter) -> Result<()> {
        let filter = to_filter(&filter, partition)?;
        self.ensure().await?;
        self.delete_filter(filter).await?;
        cairn_models::failpoint("store.after_sync");
        Ok(())
    }

    async fn search(&self, partition: &Partition, request: SearchRequest) -> Result<Vec<Hit>> {
        let filter = to_filter(&request.filter, partition)?;
        if let SearchMode::Dense(v) | SearchMode::Hybrid { dense: v, .. } = &request.mode {
            self.check_dim(v, "query vector")?;
        }
        self.ensure().await?;
        let sparse_query = |text: &str| -> Option<VectorInput> {
            let v = self.inner.bm25.embed_query(text);
            let pairs: Vec<(u32, f32)> = v.indices.into_iter().zip(v.values).collect();
            // A query without terms matches nothing (as on the embedded shard).
            (!pairs.is_empty()).then(|| VectorInput::from(pairs.as_slice()))
        };
        let nearest = |v: VectorInput| Query {
            variant: Some(Variant::Nearest(v)),
        };
        let limit = request.limit as u64;
        let (prefetch, query, using) = match request.mode {
            SearchMode::Dense(v) => (vec![], nearest(VectorInput::from(v)), Some(DENSE)),
            SearchMode::Sparse(text) => match sparse_query(&text) {
                Some(v) => (vec![], nearest(v), Some(BM25)),
                None => return Ok(Vec::new()),
            },
            SearchMode::Hybrid {
                dense,
                text,
                prefetch,
                k,
                weights,
            } => {
                let leg = |query: VectorInput, using: &str| PrefetchQuery {
                    query: Some(nearest(query)),
                    using: Some(using.to_string()),
                    filter: Some(filter.clone()),
                    limit: Some(prefetch as u64),
                    ..Default::default()
                };
                let mut legs = vec![leg(VectorInput::from(dense), DENSE)];
                let mut w = vec![weights.0];
                if let Some(s) = sparse_query(&text) {
                    legs.push(leg(s, BM25));
                    w.push(weights.1);
                }
                let rrf = Query {
                    variant: Some(Variant::Rrf(Rrf {
                        k: Some(k as u32),
                        weights: w,
                    })),
                };
                (legs, rrf, None)
            }
        };
        let names: &[&str] = if request.with_vectors { &[DENSE] } else { &[] };
        let query = QueryPoints {
            collection_name: self.collection(),
            prefetch,
            query: Some(query),
            using: using.map(str::to_string),
            filter: Some(filter),
            limit: Some(limit),
            with_payload: with_payload(),
            with_vectors: with_vectors(names),
            read_consistency: self.read_consistency(),
            ..Default::default()
        };
        let response = self
            .call("query", |c| {
                let query = query.clone();
                async move { c.query(query).await }
            })
            .await?;
        response
            .result
            .into_iter()
            .map(|p| {
                let id = uuid_of(p.id.as_ref())?;
                Ok(Hit {
                    id,
                    score: p.score,
                    point: decode(id, p.payload)?,
                    dense: vectors_of(p.vectors).0,
                })
            })
            .collect()
    }

    async fn retrieve(
        &self,
        partition: &Partition,
        ids: &[Uuid],
        with_vectors_wanted: bool,
    ) -> Result<Vec<Hit>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.ensure().await?;
        let names: &[&str] = if with_vectors_wanted { &[DENSE] } else { &[] };
        let request = GetPoints {
            collection_name: self.collection(),
            ids: ids.iter().map(|u| point_id(*u)).collect(),
            with_payload: with_payload(),
            with_vectors: with_vectors(names),
            read_consistency: self.read_consistency(),
            ..Default::default()
        };
        let got = self
            .call("retrieve", |c| {
                let request = request.clone();
                async move { c.get_points(request).await }
            })
            .await?;
        let mut found: HashMap<Uuid, Hit> = HashMap::new();
        for p in got.result {
            let id = uuid_of(p.id.as_ref())?;
            let point = decode(id, p.payload)?;
            if in_partition(&point, partition) {
                found.insert(
                    id,
                    Hit {
                        id,
                        score: 0.0,
                        point,
                        dense: vectors_of(p.vectors).0,
                    },
                );
            }
        }
        // In the order asked (a repeated id comes back once, at its first place).
        Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
    }

    async fn scroll(
        &self,
        partition: &Partition,
        filter: Filter,
        limit: usize,
        offset: Option<Uuid>,
    ) -> Result<(Vec<Hit>, Option<Uuid>)> {
        let filter = to_filter(&filter, partition)?;
        self.ensure().await?;
        let request = ScrollPoints {
            collection_name: self.collection(),
            filter: Some(filter),
            offset: offset.map(point_id),
            limit: Some(limit.clamp(1, u32::MAX as usize) as u32),
            with_payload: with_payload(),
            with_vectors: with_vectors(&[]),
            read_consistency: self.read_consistency(),
            ..Default::default()
        };
        let page = self
            .call("scroll", |c| {
                let request = request.clone();
                async move { c.scroll(request).await }
            })
            .await?;
        let hits = page
            .result
            .into_iter()
            .map(|p| {
                let id = uuid_of(p.id.as_ref())?;
                Ok(Hit {
                    id,
                    score: 0.0,
                    point: decode(id, p.payload)?,
                    dense: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let next = match page.next_page_offset {
            Some(p) => Some(uuid_of(Some(&p))?),
            None => None,
        };
        Ok((hits, next))
    }

    async fn count(&self, partition: &Partition, filter: Filter) -> Result<usize> {
        let filter = to_filter(&filter, partition)?;
        self.ensure().await?;
        self.count_filter(filter).await
    }

    async fn count_all(&self) -> Result<usize> {
        self.ensure().await?;
        self.count_filter(not_locks()).await
    }

    async fn optimize(&self) -> Result<bool> {
        // The server indexes in the background by itself. Waiting for it to finish keeps
        // the meaning "the index is built when this returns" (bulk loads, benchmarks).
        self.ensure().await?;
        let name = self.collection();
        let started = std::time::Instant::now();
        let mut waited = false;
        loop {
            let info = self
                .call("collection info", |c| {
                    let name = name.clone();
                    async move { c.collection_info(name).await }
                })
                .await?;
            let status = info.result.map(|i| i.status).unwrap_or_default();
            if status != q::CollectionStatus::Yellow as i32
                || started.elapsed() > Duration::from_secs(1800)
            {
                return Ok(waited);
            }
            waited = true;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn flush(&self) -> Result<()> {
        // Every acknowledged write is already in the server's WAL.
        Ok(())
    }

    /// The server's own snapshot of the collection (consistent per shard, taken while it
    /// serves), downloaded into `to` and checked against the digest the server reports, then
    /// deleted on the server. See [`crate::snapshot`].
    async fn backup(
        &self,
        to: &Path,
        progress: &(dyn Fn(BackupProgress) + Send + Sync),
    ) -> Result<BackupReport> {
        crate::ensure_empty_dir(to)?;
        self.ensure().await?;
        let started = std::time::Instant::now();
        let config = &self.inner.config;
        let rest = crate::snapshot::rest_base(&config.url, config.rest_url.as_deref())?;
        std::fs::create_dir_all(to)
            .map_err(|e| StoreError::Invalid(format!("{}: {e}", to.display())))?;
        let collection = config.collection.clone();
        let before = self.count_all().await? as u64;
        progress(BackupProgress {
            copied: 0,
            total: before,
            replayed: 0,
        });
        let created = self
            .call("create snapshot", |c| {
                let collection_name = collection.clone();
                async move {
                    c.create_snapshot(q::CreateSnapshotRequest { collection_name })
                        .await
                }
            })
            .await?;
        let description = created.snapshot_description.ok_or_else(|| {
            StoreError::Engine("the server answered without a snapshot description".into())
        })?;
        let after = self.count_all().await? as u64;
        let file = format!("{collection}.snapshot");
        let downloaded = {
            let (rest, key, collection, name, path, timeout) = (
                rest.clone(),
                config.api_key.clone(),
                collection.clone(),
                description.name.clone(),
                to.join(&file),
                config.timeout,
            );
            tokio::task::spawn_blocking(move || {
                crate::snapshot::download(
                    &rest,
                    key.as_deref(),
                    &collection,
                    &name,
                    &path,
                    timeout,
                    &|_| {},
                )
            })
            .await
            .map_err(|e| StoreError::Engine(format!("snapshot download task: {e}")))?
        };
        // The server's copy was only the way out: removed whatever the download did, so
        // backups do not fill the server's disk.
        let name = description.name.clone();
        if let Err(e) = self
            .call("delete snapshot", |c| {
                let request =
                    qdrant_client::qdrant::DeleteSnapshotRequestBuilder::new(&collection, &name);
                async move { c.delete_snapshot(request).await }
            })
            .await
        {
            tracing::warn!(snapshot = %description.name, "could not delete the server's snapshot: {e}");
        }
        let (bytes, sha256) = downloaded?;
        if let Some(expected) = description.checksum.as_deref() {
            if !expected.eq_ignore_ascii_case(&sha256) {
                return Err(StoreError::Engine(format!(
                    "the downloaded snapshot's SHA-256 is {sha256}, the server reported {expected}"
                )));
            }
        }
        progress(BackupProgress {
            copied: after,
            total: after,
            replayed: 0,
        });
        Ok(BackupReport {
            points: after,
            copied: after,
            replayed: 0,
            elapsed_ms: started.elapsed().as_millis() as u64,
            snapshot: Some(SnapshotFile {
                file,
                collection,
                sha256,
                bytes,
                points_before: before,
                points_after: after,
            }),
        })
    }

    fn backend(&self) -> BackendInfo {
        BackendInfo {
            kind: "qdrant",
            location: self.inner.config.url.clone(),
            collection: Some(self.inner.config.collection.clone()),
        }
    }

    async fn health(&self) -> Result<()> {
        self.ensure().await?;
        self.call("health check", |c| async move { c.health_check().await })
            .await
            .map(|_| ())
    }

    fn shared(&self) -> bool {
        true
    }

    async fn lock(&self, name: &str) -> Result<StoreLock> {
        self.ensure().await?;
        let id = Uuid::new_v5(
            &Uuid::NAMESPACE_OID,
            format!("cairn-lock/{name}").as_bytes(),
        );
        let holder = Uuid::new_v4().to_string();
        let mut delay = Duration::from_millis(2);
        loop {
            let now = now_ms();
            self.write_lease(id, name, &holder, None).await?;
            match self.read_lease(id).await? {
                Some((h, _)) if h == holder => break,
                Some((h, expires)) if expires < now => {
                    // Its holder stopped renewing (died). Take it over only if the lease is
                    // still the one just read, so two waiters cannot both take it.
                    tracing::warn!(lock = name, "taking over an expired store lock");
                    let only_if = Self::lease_filter(id, &h, Some(expires));
                    self.write_lease(id, name, &holder, Some(only_if)).await?;
                    continue;
                }
                // Held by another process (or released in between): wait and retry.
                _ => {
                    let jitter = Duration::from_micros(u64::from(Uuid::new_v4().as_fields().1));
                    tokio::time::sleep(delay + jitter).await;
                    delay = (delay * 2).min(Duration::from_millis(100));
                }
            }
        }
        let renew = {
            let store = self.clone();
            let name = name.to_string();
            let holder = holder.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(LEASE / 3).await;
                    let only_if = Self::lease_filter(id, &holder, None);
                    if let Err(e) = store.write_lease(id, &name, &holder, Some(only_if)).await {
                        tracing::warn!(lock = name, "renewing a store lock failed: {e}");
                    }
                }
            })
        };
        Ok(StoreLock::held(Box::new(LeaseGuard {
            store: self.clone(),
            id,
            holder,
            renew,
        })))
    }

    async fn export(
        &self,
        offset: Option<Uuid>,
        limit: usize,
    ) -> Result<(Vec<UpsertPoint>, Option<Uuid>)> {
        self.ensure().await?;
        let request = ScrollPoints {
            collection_name: self.collection(),
            filter: Some(not_locks()),
            offset: offset.map(point_id),
            limit: Some(limit.clamp(1, u32::MAX as usize) as u32),
            with_payload: with_payload(),
            with_vectors: with_vectors(&[DENSE, BM25]),
            read_consistency: self.read_consistency(),
            ..Default::default()
        };
        let page = self
            .call("export", |c| {
                let request = request.clone();
                async move { c.scroll(request).await }
            })
            .await?;
        let points = page
            .result
            .into_iter()
            .map(|p| {
                let id = uuid_of(p.id.as_ref())?;
                let (dense, sparse) = vectors_of(p.vectors);
                Ok(UpsertPoint {
                    id,
                    dense,
                    bm25_text: None,
                    sparse,
                    payload: decode(id, p.payload)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let next = match page.next_page_offset {
            Some(p) => Some(uuid_of(Some(&p))?),
            None => None,
        };
        Ok((points, next))
    }
}

impl QdrantStore {
    async fn count_filter(&self, filter: q::Filter) -> Result<usize> {
        let request = CountPoints {
            collection_name: self.collection(),
            filter: Some(filter),
            exact: Some(true),
            read_consistency: self.read_consistency(),
            ..Default::default()
        };
        let counted = self
            .call("count", |c| {
                let request = request.clone();
                async move { c.count(request).await }
            })
            .await?;
        Ok(counted.result.map(|r| r.count as usize).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_names_per_data_directory() {
        let a = collection_name("t_{dir}", Path::new("/tmp/a")).unwrap();
        let b = collection_name("t_{dir}", Path::new("/tmp/b")).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, collection_name("t_{dir}", Path::new("/tmp/a")).unwrap());
        assert!(a.starts_with("t_") && a.len() == 18, "{a}");
        assert_eq!(collection_name("cairn", Path::new("/x")).unwrap(), "cairn");
        assert!(collection_name("bad name", Path::new("/x")).is_err());
    }

    #[test]
    fn an_unreachable_server_is_unavailable_and_retried() {
        let refused = QdrantError::ResponseError {
            status: tonic::Status::internal(
                "Failed to connect to http://127.0.0.1:6401/: tonic::transport::Error(Transport, ConnectError)",
            ),
        };
        assert!(transient(&refused));
        assert!(matches!(
            classify("query", refused),
            StoreError::Unavailable(_)
        ));
        let bug = QdrantError::ResponseError {
            status: tonic::Status::internal("Service internal error: something broke"),
        };
        assert!(!transient(&bug));
        assert!(matches!(classify("query", bug), StoreError::Engine(_)));
        let invalid = QdrantError::ResponseError {
            status: tonic::Status::invalid_argument("Wrong input: bad vector"),
        };
        assert!(matches!(classify("query", invalid), StoreError::Invalid(_)));
    }

    #[test]
    fn read_consistency_parses() {
        assert_eq!(
            "majority".parse::<ReadConsistency>().unwrap(),
            ReadConsistency::Majority
        );
        assert!("most".parse::<ReadConsistency>().is_err());
    }

    #[test]
    fn filters_keep_the_partition() {
        let p = Partition {
            tenant: "t".into(),
            user: "u".into(),
            namespace: "n".into(),
        };
        let f = to_filter(&Filter::new().not_eq("kind", "chunk"), &p).unwrap();
        assert_eq!(f.must.len(), 3);
        assert_eq!(f.must_not.len(), 1);
    }
}
