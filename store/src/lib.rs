//! Cairn's storage seam: the [`MemoryStore`] trait and its embedded Qdrant implementation
//! ([`EdgeStore`], on `qdrant-edge`).
//!
//! Why a separate crate: both the write path (`ingest`) and the read path (`recall`) talk to
//! storage, and neither should depend on the other. The trait speaks Cairn's domain
//! ([`StoredPoint`] payloads, [`Partition`] scopes, [`Filter`]s over payload fields), not
//! Qdrant's, so a Qdrant server adapter (`qdrant-client`) implements it unchanged: named
//! dense vector `dense` (cosine), named sparse vector `bm25` with the IDF modifier (sparse
//! vectors come from qdrant-edge's `EdgeBm25`, so they mean the same on a server), payload
//! indexes on the scope fields, deterministic UUID point ids.
//!
//! Invariant: every read takes a [`Partition`] and is filtered by tenant, user and namespace
//! inside the store; there is no unscoped read in this API.
//!
//! Implementations: [`EdgeStore`] (the embedded engine Cairn runs on) and [`InMemoryStore`]
//! (a plain-Rust reference of the same contract, for tests and for reading what the contract
//! means). [`conformance`] is the suite every implementation must pass, so a new backend (a
//! Qdrant server adapter) proves itself against the same cases instead of new ad-hoc tests.

pub mod conformance;
mod edge;
mod filter;
pub mod journal;
mod memory;

pub use edge::{EdgeStore, StoreConfig, JOURNAL_FILE};
pub use filter::{Cond, Filter, Value};
pub use journal::SyncPolicy;
pub use memory::InMemoryStore;

use cairn_models::{ErrorKind, Partition, StoredPoint};
use uuid::Uuid;

/// Page size of [`MemoryStore::scroll_all`]: large enough that a partition's records come
/// back in few round trips, small enough that one page never holds a large share of a
/// server's response budget.
pub const SCROLL_PAGE: usize = 256;

/// Name of the dense vector.
pub const DENSE: &str = "dense";
/// Name of the sparse BM25 vector.
pub const BM25: &str = "bm25";

/// Storage errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The engine rejected or failed an operation.
    #[error("storage engine error: {0}")]
    Engine(String),
    /// The data directory cannot be opened (missing permissions, held by another process...).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A stored payload does not decode (written by an incompatible version?).
    #[error("corrupt stored point {id}: {reason}")]
    Corrupt { id: String, reason: String },
    /// A request that cannot be executed as given (e.g. wrong vector dimension).
    #[error("invalid storage request: {0}")]
    Invalid(String),
}

impl StoreError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Engine(_) | StoreError::Corrupt { .. } => ErrorKind::Internal,
            StoreError::Unavailable(_) => ErrorKind::Unavailable,
            StoreError::Invalid(_) => ErrorKind::BadInput,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A point to write. `dense` is absent for non-searchable records (document registry,
/// turn receipts); `bm25_text` is the text the sparse vector is computed from.
#[derive(Debug, Clone)]
pub struct UpsertPoint {
    pub id: Uuid,
    pub dense: Option<Vec<f32>>,
    pub bm25_text: Option<String>,
    pub payload: StoredPoint,
}

impl UpsertPoint {
    /// A record that is not searched (no vectors): registries, receipts, reviews.
    pub fn record(id: Uuid, payload: StoredPoint) -> Self {
        UpsertPoint {
            id,
            dense: None,
            bm25_text: None,
            payload,
        }
    }
}

/// A point read back.
#[derive(Debug, Clone)]
pub struct Hit {
    pub id: Uuid,
    pub score: f32,
    pub point: StoredPoint,
    /// The dense vector, when asked for.
    pub dense: Option<Vec<f32>>,
}

/// What to search with.
#[derive(Debug, Clone)]
pub enum SearchMode {
    /// Cosine similarity on the dense vector.
    Dense(Vec<f32>),
    /// BM25 on the sparse vector.
    Sparse(String),
    /// Both legs fused by reciprocal rank fusion inside Qdrant.
    Hybrid {
        dense: Vec<f32>,
        text: String,
        /// Candidates per leg.
        prefetch: usize,
        /// RRF constant.
        k: usize,
        /// Weights of the (dense, sparse) legs.
        weights: (f32, f32),
    },
}

/// A search inside one partition.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub mode: SearchMode,
    /// Extra conditions (kind, agent, session, source, time...), ANDed with the partition.
    pub filter: Filter,
    pub limit: usize,
    pub with_vectors: bool,
}

/// Storage for Cairn's points. See the crate docs for the contract.
#[async_trait::async_trait]
pub trait MemoryStore: Send + Sync + std::fmt::Debug {
    /// Writes points; returns once they are durable (per the store's sync policy: they
    /// survive `kill -9`, and with `fdatasync` a power cut) and visible to reads
    /// (read-your-writes). The same holds for both deletes.
    async fn upsert(&self, points: Vec<UpsertPoint>) -> Result<()>;
    /// Deletes points by id, only those inside `partition`.
    async fn delete_ids(&self, partition: &Partition, ids: Vec<Uuid>) -> Result<()>;
    /// Deletes every point of `partition` matching `filter`.
    async fn delete_where(&self, partition: &Partition, filter: Filter) -> Result<()>;
    async fn search(&self, partition: &Partition, request: SearchRequest) -> Result<Vec<Hit>>;
    /// Points by id, in the order asked, skipping ids absent from `partition`.
    async fn retrieve(
        &self,
        partition: &Partition,
        ids: &[Uuid],
        with_vectors: bool,
    ) -> Result<Vec<Hit>>;
    /// One page of points matching `filter`, and the offset of the next page.
    async fn scroll(
        &self,
        partition: &Partition,
        filter: Filter,
        limit: usize,
        offset: Option<Uuid>,
    ) -> Result<(Vec<Hit>, Option<Uuid>)>;
    /// Every point of `partition` matching `filter`, in scroll order (by point id): pages of
    /// [`SCROLL_PAGE`] until the store reports no next page. Provided so that the paging loop
    /// exists once; an implementation may override it with a cheaper single call, keeping
    /// the order and the result.
    async fn scroll_all(&self, partition: &Partition, filter: Filter) -> Result<Vec<Hit>> {
        let mut out = Vec::new();
        let mut offset = None;
        loop {
            let (page, next) = self
                .scroll(partition, filter.clone(), SCROLL_PAGE, offset)
                .await?;
            out.extend(page);
            match next {
                // A store that answered its own offset again would loop forever.
                Some(n) if Some(n) == offset => {
                    return Err(StoreError::Engine(format!(
                        "scroll did not advance past {n}"
                    )))
                }
                Some(n) => offset = Some(n),
                None => return Ok(out),
            }
        }
    }
    /// Exact number of points of `partition` matching `filter`.
    async fn count(&self, partition: &Partition, filter: Filter) -> Result<usize>;
    /// Exact number of points in the whole store (administration and tests only).
    async fn count_all(&self) -> Result<usize>;
    /// Builds vector indexes and merges segments. Heavy: run off the request path.
    async fn optimize(&self) -> Result<bool>;
    /// Flushes everything to disk (a checkpoint: the embedded store empties its journal).
    async fn flush(&self) -> Result<()>;
}
