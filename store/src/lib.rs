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
//! Implementations: [`EdgeStore`] (the embedded engine Cairn runs on by default),
//! [`QdrantStore`] (a Qdrant server or cluster over gRPC, `qdrant-client`) and
//! [`InMemoryStore`] (a plain-Rust reference of the same contract, for tests and for reading
//! what the contract means). [`conformance`] is the suite every implementation must pass, so
//! each backend proves itself against the same cases instead of new ad-hoc tests.
//!
//! Several processes: the embedded store belongs to one process (its data directory), so
//! in-process locks serialize everything. A server store may be shared by several Cairn
//! replicas; [`MemoryStore::lock`] gives the service a store-wide mutual exclusion that
//! holds across them (a lease point in the collection, see [`QdrantStore`]), and
//! [`MemoryStore::shared`] tells caches that another process may have written.

pub mod conformance;
pub mod disk;
mod edge;
mod filter;
pub mod journal;
mod memory;
mod server;
mod snapshot;
pub mod warm;

pub use edge::{BackupProgress, BackupReport, EdgeStore, SnapshotFile, StoreConfig, JOURNAL_FILE};
pub use filter::{Cond, Filter, Value};
pub use journal::SyncPolicy;
pub use memory::InMemoryStore;
pub use server::{QdrantStore, ReadConsistency, ServerConfig};

use cairn_models::{ErrorKind, Partition, StoredPoint};
use uuid::Uuid;

/// Page size of [`MemoryStore::scroll_all`]: large enough that a partition's records come
/// back in few round trips, small enough that one page never holds a large share of a
/// server's response budget.
pub const SCROLL_PAGE: usize = 256;

/// Keyword payload fields with an index, on every backend. `tenant` is marked `is_tenant`
/// so a server lays out storage per tenant.
pub(crate) const KEYWORD_FIELDS: &[&str] = &[
    "tenant",
    "user",
    "namespace",
    "agent",
    "session",
    "kind",
    "doc_id",
    "source",
    "conversation_id",
    "turn_id",
    "trust",
    "role",
    "keys",
];
/// Integer payload fields with an index.
pub(crate) const INTEGER_FIELDS: &[&str] = &["ts", "seq", "chunk_index"];

/// Whether `point` lies in `partition` (for reads by id, which no filter scopes).
pub(crate) fn in_partition(point: &StoredPoint, partition: &Partition) -> bool {
    point.tenant == partition.tenant
        && point.user == partition.user
        && point.namespace == partition.namespace
}

/// A backup goes into a directory that does not exist or is empty, never over another.
pub(crate) fn ensure_empty_dir(to: &std::path::Path) -> Result<()> {
    if to.exists()
        && std::fs::read_dir(to)
            .map_err(|e| StoreError::Invalid(format!("{}: {e}", to.display())))?
            .next()
            .is_some()
    {
        return Err(StoreError::Invalid(format!(
            "backup target {} is not empty: back up into a new directory",
            to.display()
        )));
    }
    Ok(())
}

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
    /// The disk holding the data directory (or the quota) is full: the write was not
    /// applied, and writes work again once space is freed.
    #[error("storage full: {0}")]
    Full(String),
}

impl StoreError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Engine(m) if cairn_models::error::message_says_disk_full(m) => {
                ErrorKind::StorageFull
            }
            StoreError::Engine(_) | StoreError::Corrupt { .. } => ErrorKind::Internal,
            StoreError::Full(_) => ErrorKind::StorageFull,
            StoreError::Unavailable(_) => ErrorKind::Unavailable,
            StoreError::Invalid(_) => ErrorKind::BadInput,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A point to write. `dense` is absent for non-searchable records (document registry,
/// turn receipts); `bm25_text` is the text the sparse vector is computed from, unless
/// `sparse` gives the vector itself (a copy between stores, [`MemoryStore::export`]).
#[derive(Debug, Clone)]
pub struct UpsertPoint {
    pub id: Uuid,
    pub dense: Option<Vec<f32>>,
    pub bm25_text: Option<String>,
    /// The BM25 sparse vector as stored (term frequencies; the IDF is applied at query time
    /// from the collection's statistics). Takes precedence over `bm25_text`.
    pub sparse: Option<SparseVector>,
    pub payload: StoredPoint,
}

/// A sparse vector: sorted unique term ids and their weights.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SparseVector {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// Which engine a store runs on (`/readyz`, `cairn stats`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackendInfo {
    /// `embedded`, `qdrant` or `memory`.
    pub kind: &'static str,
    /// The data directory or the server URL (without credentials).
    pub location: String,
    /// The server collection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
}

/// A held store-wide lock ([`MemoryStore::lock`]); released when dropped.
#[must_use = "the lock is released when this is dropped"]
pub struct StoreLock {
    _held: Option<Box<dyn Send + Sync>>,
}

impl StoreLock {
    /// A lock with nothing to release: the store is not shared between processes, so the
    /// caller's in-process mutex is the whole exclusion.
    pub fn local() -> Self {
        StoreLock { _held: None }
    }

    pub(crate) fn held(guard: Box<dyn Send + Sync>) -> Self {
        StoreLock { _held: Some(guard) }
    }
}

impl std::fmt::Debug for StoreLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLock")
            .field("shared", &self._held.is_some())
            .finish()
    }
}

impl UpsertPoint {
    /// A record that is not searched (no vectors): registries, receipts, reviews.
    pub fn record(id: Uuid, payload: StoredPoint) -> Self {
        UpsertPoint {
            id,
            dense: None,
            bm25_text: None,
            sparse: None,
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
    /// Which engine this is and where.
    fn backend(&self) -> BackendInfo;
    /// How many segments the engine holds the points in (each is searched on its own), where
    /// the store knows: the embedded store does, a server store answers `None`.
    fn segments(&self) -> Option<usize> {
        None
    }
    /// Whether the engine answers now (`/readyz`): a server store asks the server.
    async fn health(&self) -> Result<()> {
        Ok(())
    }
    /// Whether other processes may write this store too. Caches of what is stored (e.g. the
    /// next message sequence number) must then be re-read under [`MemoryStore::lock`].
    fn shared(&self) -> bool {
        false
    }
    /// Takes the store-wide lock `name`, waiting while another holder has it. Callers hold
    /// their in-process mutex of the same name first, so in one process this never waits on
    /// itself. A store used by one process only returns [`StoreLock::local`].
    async fn lock(&self, name: &str) -> Result<StoreLock> {
        let _ = name;
        Ok(StoreLock::local())
    }
    /// What a write needs free on the data directory's filesystem and what it has
    /// ([`disk`]); `None` for a store whose disk is elsewhere (a Qdrant server).
    fn disk_need(&self) -> Option<disk::DiskNeed> {
        None
    }
    /// A consistent copy of the whole store into `to`, taken while the store serves reads
    /// and writes: a new embedded store ([`EdgeStore::backup_to`]), or the Qdrant server's
    /// own snapshot of the collection ([`QdrantStore`]). The reference store has none.
    async fn backup(
        &self,
        to: &std::path::Path,
        progress: &(dyn Fn(BackupProgress) + Send + Sync),
    ) -> Result<BackupReport> {
        let _ = (to, progress);
        Err(StoreError::Invalid(format!(
            "the {} store has no online backup",
            self.backend().kind
        )))
    }

    /// One page of every point in the store, every partition, with its vectors (dense and
    /// the stored sparse vector), in id order: copying a deployment to another store without
    /// re-embedding (`cairn migrate`). Administration only.
    async fn export(
        &self,
        offset: Option<Uuid>,
        limit: usize,
    ) -> Result<(Vec<UpsertPoint>, Option<Uuid>)>;
}
