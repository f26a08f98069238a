//! [`MemoryStore`] on the embedded engine (`qdrant-edge`): one shard in `<data_dir>/qdrant`.
//!
//! The edge shard is synchronous and has no background optimizer. Every call runs on tokio's
//! blocking pool. Locks:
//! - `write` (mutex): one write at a time, so the journal's record order is the order the
//!   shard applied them in (see [`crate::journal`]);
//! - `gate` (read-write): writes and `optimize` share it, a checkpoint (`flush`) takes it
//!   exclusively. The shard's `flush` takes its WAL lock and its segment holder with
//!   `try_lock().expect(..)` and would panic if it raced an update or an optimizer's segment
//!   swap; qdrant's optimizers themselves are built to run beside updates (proxy segments),
//!   so a long index build no longer stops writes.
//!
//! Reads run concurrently with everything; a search visits every segment of the shard, the
//! large ones (≥ 16,384 points) side by side on scoped threads (patch 0005 of qdrant-edge),
//! since a store that grew through index builds holds several. Every write is journaled
//! before it returns (durable per [`SyncPolicy`]) and the journal is replayed on open,
//! because `EdgeShard::load` does not replay the shard's own WAL.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cairn_models::{Partition, StoredPoint};
use qdrant_edge::bm25_embed::{EdgeBm25, EdgeBm25Config};
use qdrant_edge::external::ordered_float::OrderedFloat;
use qdrant_edge::{
    Condition, CountRequest, CreateIndex, Distance, EdgeConfig, EdgeShard, EdgeSparseVectorParams,
    EdgeVectorParams, FieldCondition, FieldIndexOperations, Fusion, IntegerIndexParams, JsonPath,
    KeywordIndexParams, Match, Modifier, NamedQuery, PayloadFieldSchema, PayloadSchemaParams,
    PointId, PointInsertOperations, PointOperations, PointStruct, Prefetch, PreparedUpdate,
    QueryEnum, QueryRequest, Range, ScoringQuery, ScrollRequest, UpdateOperation, ValueVariants,
    VectorInternal, VectorStructInternal, Vectors, WithPayloadInterface, WithVector,
};
use uuid::Uuid;

use crate::disk::DiskGuard;
use crate::journal::{self, JPoint, Journal, Op, SyncPolicy};
use crate::{in_partition, INTEGER_FIELDS, KEYWORD_FIELDS};
use crate::{
    Cond, Filter, Hit, MemoryStore, Result, SearchMode, SearchRequest, StoreError, UpsertPoint,
    Value, BM25, DENSE,
};

/// Configuration of the embedded store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory; the shard lives in `<data_dir>/qdrant`.
    pub data_dir: PathBuf,
    /// Dense vector dimension (the embedding model's).
    pub dim: usize,
    /// When an acknowledged write reaches stable storage.
    pub sync: SyncPolicy,
    /// Journal size that triggers a checkpoint (default [`journal::CHECKPOINT_BYTES`]; the
    /// crash tests set it small so kills land around checkpoints too).
    pub checkpoint_bytes: u64,
    /// Room kept free beyond the shard's sparse files' holes before a write runs (see
    /// [`crate::disk`]; default [`crate::disk::DEFAULT_RESERVE_BYTES`], `0`: no check).
    pub reserve_bytes: u64,
}

impl StoreConfig {
    /// A configuration with the default durability (`fdatasync` per group commit).
    pub fn new(data_dir: impl Into<PathBuf>, dim: usize) -> Self {
        StoreConfig {
            data_dir: data_dir.into(),
            dim,
            sync: SyncPolicy::default(),
            checkpoint_bytes: journal::CHECKPOINT_BYTES,
            reserve_bytes: crate::disk::DEFAULT_RESERVE_BYTES,
        }
    }
}

/// The journal's file name inside the data directory.
pub const JOURNAL_FILE: &str = "journal.log";

/// The embedded Qdrant store.
pub struct EdgeStore {
    shard: Arc<EdgeShard>,
    bm25: Arc<EdgeBm25>,
    write: Arc<Mutex<()>>,
    gate: Arc<RwLock<()>>,
    journal: Arc<Journal>,
    /// Number of `optimize` calls running: a size-triggered checkpoint then waits for a later
    /// write instead of stopping every writer behind a long index build.
    optimizing: Arc<AtomicUsize>,
    checkpoint_bytes: u64,
    dim: usize,
    path: PathBuf,
    /// While a backup runs: every operation applied since it started, in the shard's order
    /// (pushed under `write`, as the journal is appended). See [`EdgeStore::backup_to`].
    capture: Arc<Mutex<Option<Vec<Op>>>>,
    /// Refuses writes the disk may not have the blocks for ([`crate::disk`]).
    disk: Arc<DiskGuard>,
}

/// Points per page of a backup's copy.
const BACKUP_PAGE: usize = 512;

/// Progress of [`EdgeStore::backup_to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BackupProgress {
    /// Points copied so far.
    pub copied: u64,
    /// Points in the store (when the copy started; at the cut for the last report).
    pub total: u64,
    /// Operations applied during the copy and replayed onto it.
    pub replayed: u64,
}

/// The server snapshot a backup of a Qdrant server store holds ([`crate::snapshot`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotFile {
    /// The snapshot's file name in the backup directory.
    pub file: String,
    /// The collection it was taken of.
    pub collection: String,
    /// SHA-256 of the file (hex), as the server reported it.
    pub sha256: String,
    pub bytes: u64,
    /// Points in the collection just before and just after the snapshot was taken: equal
    /// when no write ran meanwhile, and then exactly what the snapshot holds.
    pub points_before: u64,
    pub points_after: u64,
}

/// What a backup did ([`EdgeStore::backup_to`], or a server's snapshot).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackupReport {
    /// Points in the store at the cut, and in the backup.
    pub points: u64,
    /// Points copied page by page.
    pub copied: u64,
    /// Writes made during the copy, replayed onto it.
    pub replayed: u64,
    pub elapsed_ms: u64,
    /// A server store's backup: the snapshot file it wrote. `None` for the embedded store,
    /// whose backup is a data directory.
    pub snapshot: Option<SnapshotFile>,
}

impl std::fmt::Debug for EdgeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeStore")
            .field("path", &self.path)
            .field("dim", &self.dim)
            .field("sync", &self.journal.policy())
            .finish()
    }
}

fn engine<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Engine(e.to_string())
}

/// The BM25 encoder of every store (English stemming): one configuration, so sparse vectors
/// and rankings mean the same in `EdgeStore` and the reference `InMemoryStore`.
pub(crate) fn new_bm25() -> Result<EdgeBm25> {
    EdgeBm25::new(EdgeBm25Config {
        language: Some("english".to_string()),
        ..Default::default()
    })
    .map_err(engine)
}

impl EdgeStore {
    /// Opens the shard under `config.data_dir`, creating it (with its payload indexes) on
    /// first use. Blocking.
    pub fn open(config: &StoreConfig) -> Result<Self> {
        let path = config.data_dir.join("qdrant");
        std::fs::create_dir_all(&path)
            .map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
        let existing = path.join("edge_config.json").is_file();
        let disk = Arc::new(DiskGuard::new(&path, config.reserve_bytes));
        let shard = if existing {
            // Opening replays the journal into the shard's maps: on a disk without the
            // blocks for them that would fault, so it is refused with the figures instead.
            disk.check("opening the store")?;
            let shard = EdgeShard::load(&path, None).map_err(|e| {
                StoreError::Unavailable(format!("cannot open {}: {e}", path.display()))
            })?;
            let stored_dim = shard.config().vectors.get(DENSE).map(|v| v.size);
            if stored_dim != Some(config.dim) {
                return Err(StoreError::Invalid(format!(
                    "data directory {} holds {:?}-d vectors but the model makes {}-d vectors; \
                     use another --data-dir or the model it was built with",
                    config.data_dir.display(),
                    stored_dim,
                    config.dim
                )));
            }
            shard
        } else {
            // Bounded memory: full vectors, the sparse index, payloads and payload indexes live
            // in memory-mapped files (the OS page cache keeps what queries touch and gives it
            // back under pressure). What every query walks stays resident: the HNSW graph
            // (~150 B a point) and the keyword indexes every recall filters on
            // (`RAM_KEYWORD_FIELDS`) in RAM, and int8 copies of the vectors (`dim` bytes a
            // point, a quarter of the f32 ones), which the search traverses before it rescores
            // its top hits with the full vectors, memory-mapped and prefaulted on load
            // (`int8_quantization`). Data directories created before keep their own settings
            // (`edge_config.json` and each segment's payload index config).
            let mut dense = EdgeVectorParams::builder(config.dim, Distance::Cosine).build();
            dense.on_disk = Some(true);
            let edge_config = EdgeConfig {
                on_disk_payload: true,
                vectors: HashMap::from([(DENSE.to_string(), dense)]),
                sparse_vectors: HashMap::from([(
                    BM25.to_string(),
                    EdgeSparseVectorParams {
                        modifier: Some(Modifier::Idf),
                        on_disk: Some(true),
                        ..Default::default()
                    },
                )]),
                hnsw_config: qdrant_edge::HnswIndexConfig {
                    on_disk: Some(false),
                    ..Default::default()
                },
                quantization_config: Some(int8_quantization()?),
                ..Default::default()
            };
            let shard = EdgeShard::new(&path, edge_config).map_err(|e| {
                StoreError::Unavailable(format!("cannot create {}: {e}", path.display()))
            })?;
            create_indexes(&shard)?;
            shard
        };
        let bm25 = new_bm25()?;
        let journal = open_journal(&config.data_dir, config.sync, &shard, &bm25)?;
        // After a reboot (or a segment's `Drop`) the vectors and payloads recall reads per hit
        // are not in the page cache: read them in before the store serves (`warm`).
        crate::warm::warm(&path);
        Ok(EdgeStore {
            shard: Arc::new(shard),
            bm25: Arc::new(bm25),
            write: Arc::new(Mutex::new(())),
            gate: Arc::new(RwLock::new(())),
            journal: Arc::new(journal),
            optimizing: Arc::new(AtomicUsize::new(0)),
            checkpoint_bytes: config.checkpoint_bytes.max(1),
            dim: config.dim,
            path,
            capture: Arc::new(Mutex::new(None)),
            disk,
        })
    }

    /// What a write needs free on the data directory's filesystem, and what it has.
    pub fn disk_need(&self) -> crate::disk::DiskNeed {
        self.disk.need()
    }

    /// The durability policy in force.
    pub fn sync_policy(&self) -> SyncPolicy {
        self.journal.policy()
    }

    /// An online, consistent copy of the whole store into a new embedded store at `to`
    /// (a directory that does not exist or is empty), while reads and writes go on.
    ///
    /// How it is consistent without stopping writers for the copy, by the journal's own
    /// argument (module docs of `journal`): (1) with the write mutex held for an instant,
    /// start capturing every operation applied from then on; (2) copy every point, page by
    /// page, with no lock held: each page holds some state of its points between the start
    /// and the end; (3) with the write mutex held for an instant, stop capturing and count
    /// the points; (4) apply the captured operations to the copy, in order. Upserts replace
    /// whole points and deletes are idempotent, so replaying every operation since the
    /// start over any mix of older and newer states ends in the state at (3): the backup is
    /// the store as it was at that instant, every write acknowledged before the backup began
    /// included. Writes wait only for the two instants; captured operations are held in
    /// memory until (4).
    pub async fn backup_to(
        &self,
        to: &Path,
        progress: &(dyn Fn(BackupProgress) + Send + Sync),
    ) -> Result<BackupReport> {
        let started = std::time::Instant::now();
        crate::ensure_empty_dir(to)?;
        let target = {
            let config = StoreConfig {
                // Made durable by one checkpoint at the end instead of per page.
                sync: SyncPolicy::Os,
                ..StoreConfig::new(to, self.dim)
            };
            tokio::task::spawn_blocking(move || EdgeStore::open(&config))
                .await
                .map_err(|e| StoreError::Engine(format!("backup target: {e}")))??
        };
        self.set_capture(true);
        let copied = match self.copy_into(&target, progress).await {
            Ok(n) => n,
            Err(e) => {
                self.set_capture(false);
                return Err(e);
            }
        };
        let (ops, points) = self.end_capture().await?;
        let replayed = ops.len() as u64;
        progress(BackupProgress {
            copied,
            total: points as u64,
            replayed,
        });
        for op in ops {
            target.apply(op).await?;
        }
        target.flush().await?;
        let target_points = target.count_all().await?;
        if target_points != points {
            return Err(StoreError::Engine(format!(
                "backup holds {target_points} points, the store held {points} at the cut"
            )));
        }
        Ok(BackupReport {
            points: points as u64,
            copied,
            replayed,
            elapsed_ms: started.elapsed().as_millis() as u64,
            snapshot: None,
        })
    }

    fn set_capture(&self, on: bool) {
        let _guard = self.write.lock().unwrap_or_else(|p| p.into_inner());
        *self.capture.lock().unwrap_or_else(|p| p.into_inner()) = on.then(Vec::new);
    }

    /// Stops capturing and counts the points, in one instant of the write mutex: the cut.
    async fn end_capture(&self) -> Result<(Vec<Op>, usize)> {
        let lock = Arc::clone(&self.write);
        let capture = Arc::clone(&self.capture);
        let shard = Arc::clone(&self.shard);
        tokio::task::spawn_blocking(move || {
            let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            let ops = capture
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_default();
            let points = shard
                .count(CountRequest {
                    filter: None,
                    exact: true,
                })
                .map_err(engine)?;
            Ok((ops, points))
        })
        .await
        .map_err(|e| StoreError::Engine(format!("backup cut: {e}")))?
    }

    /// Copies every point, page by page (the store's `export`), into `target`.
    async fn copy_into(
        &self,
        target: &EdgeStore,
        progress: &(dyn Fn(BackupProgress) + Send + Sync),
    ) -> Result<u64> {
        let total = self.count_all().await? as u64;
        let mut copied = 0u64;
        let mut offset = None;
        loop {
            let (points, next) = self.export(offset, BACKUP_PAGE).await?;
            copied += points.len() as u64;
            target.upsert(points).await?;
            progress(BackupProgress {
                copied,
                total,
                replayed: 0,
            });
            match next {
                Some(n) if Some(n) == offset => {
                    return Err(StoreError::Engine(format!(
                        "export did not advance past {n}"
                    )))
                }
                Some(n) => offset = Some(n),
                None => return Ok(copied),
            }
        }
    }

    /// Runs a read on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&EdgeShard, &EdgeBm25) -> Result<T> + Send + 'static,
    {
        let shard = Arc::clone(&self.shard);
        let bm25 = Arc::clone(&self.bm25);
        tokio::task::spawn_blocking(move || f(&shard, &bm25))
            .await
            .map_err(|e| StoreError::Engine(format!("storage task failed: {e}")))?
    }

    /// Applies one operation on the blocking pool: encode, then under the write lock apply
    /// it to the shard and append it to the journal (so both see the same order), then wait
    /// for the journal to be durable. Checkpoints when the journal has grown large.
    async fn apply(&self, op: Op) -> Result<()> {
        let shard = Arc::clone(&self.shard);
        let bm25 = Arc::clone(&self.bm25);
        let lock = Arc::clone(&self.write);
        let gate = Arc::clone(&self.gate);
        let journal = Arc::clone(&self.journal);
        let optimizing = Arc::clone(&self.optimizing);
        let checkpoint_bytes = self.checkpoint_bytes;
        let capture = Arc::clone(&self.capture);
        let disk = Arc::clone(&self.disk);
        tokio::task::spawn_blocking(move || {
            // Outside the locks, side by side: the journal record and the shard's form of the
            // operation. Two writes in flight overlap: one prepares here while the other is
            // applied under the lock.
            // The shard's form includes the record of qdrant-edge's own WAL (CBOR of every
            // vector and payload: 4 % of a 100k load's CPU, `perf`), encoded here rather than
            // inside `EdgeShard::update` under the lock (`patches/…/0003`).
            let shard_form = || PreparedUpdate::new(prepare_op(&bm25, &op)?).map_err(engine);
            let (record, update) = if is_bulk(&op) {
                rayon::join(|| journal::encode(&op), shard_form)
            } else {
                (journal::encode(&op), shard_form())
            };
            let (record, update) = (record?, update?);
            let seq = {
                let _gate = gate.read().unwrap_or_else(|p| p.into_inner());
                let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                // Before the shard's maps are touched: on a full disk a write into a sparse
                // file's hole is a SIGBUS, not an error.
                disk.check("write")?;
                let mut capture = capture.lock().unwrap_or_else(|p| p.into_inner());
                // Applied first: a record in the journal is one the shard accepted, so a
                // replay never meets an operation that fails.
                shard.apply_prepared(update).map_err(engine)?;
                cairn_models::failpoint("store.after_apply");
                let seq = journal.append_encoded(&record)?;
                if let Some(ops) = capture.as_mut() {
                    ops.push(op);
                }
                seq
            };
            journal.sync(seq)?;
            cairn_models::failpoint("store.after_sync");
            // Deferred while an index build runs (the journal may pass the threshold for
            // that long); the first write after it checkpoints.
            if journal.len() >= checkpoint_bytes && optimizing.load(Ordering::Acquire) == 0 {
                // The write is durable in the journal already: a checkpoint that fails (a
                // full disk) does not fail it. The journal is kept and the next write tries
                // the checkpoint again.
                if let Err(e) = checkpoint(&shard, &gate, &journal) {
                    tracing::warn!(error = %e, "checkpoint failed; the journal is kept");
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| StoreError::Engine(format!("storage task failed: {e}")))?
    }
}

/// Flushes the shard with every writer and optimizer stopped, then empties the journal.
fn checkpoint(shard: &EdgeShard, gate: &RwLock<()>, journal: &Journal) -> Result<()> {
    let _gate = gate.write().unwrap_or_else(|p| p.into_inner());
    flush_shard(shard)?;
    cairn_models::failpoint("store.checkpoint.after_flush");
    journal.truncate()
}

/// `EdgeShard::flush` panics when its segments cannot be written (`expect("segments
/// flushed")`, on a full disk above all). Caught here and reported as an error, so the
/// journal is kept (everything in it is replayed later), the process lives, and a full disk
/// is [`StoreError::Full`]. The shard's locks are `parking_lot`'s, which a panic does not
/// poison, so a later flush (once space is freed) works.
fn flush_shard(shard: &EdgeShard) -> Result<()> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shard.flush())).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "the shard's flush panicked".into());
        if cairn_models::error::message_says_disk_full(&message) {
            StoreError::Full(format!("checkpoint: {message}"))
        } else {
            StoreError::Engine(format!("checkpoint: {message}"))
        }
    })
}

/// Opens the journal next to the shard and replays it: the shard's own WAL is not replayed
/// by `EdgeShard::load`, so everything written since the last checkpoint is re-applied,
/// flushed, and the journal emptied.
fn open_journal(
    data_dir: &Path,
    policy: SyncPolicy,
    shard: &EdgeShard,
    bm25: &EdgeBm25,
) -> Result<Journal> {
    let (journal, replay) = Journal::open(&data_dir.join(JOURNAL_FILE), policy)?;
    if replay.dropped_tail > 0 {
        tracing::warn!(
            bytes = replay.dropped_tail,
            "journal: cut a torn tail (a write interrupted before it was acknowledged)"
        );
    }
    if !replay.ops.is_empty() {
        let n = replay.ops.len();
        let started = std::time::Instant::now();
        for op in replay.ops {
            apply_op(shard, bm25, op)?;
        }
        flush_shard(shard)?;
        journal.truncate()?;
        tracing::info!(
            records = n,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "journal replayed into the store"
        );
    }
    Ok(journal)
}

/// Applies a journaled operation to the shard (journal replay).
fn apply_op(shard: &EdgeShard, bm25: &EdgeBm25, op: Op) -> Result<()> {
    shard.update(prepare_op(bm25, &op)?).map_err(engine)
}

/// Batches at least this large are prepared on rayon's pool (the journal record beside the
/// points, the points across threads); a smaller write (a chat message, a fact) is not worth
/// the hand-off and waking the pool, and stays on its own thread.
const PARALLEL_PREPARE_POINTS: usize = 32;

fn is_bulk(op: &Op) -> bool {
    matches!(op, Op::Upsert { points } if points.len() >= PARALLEL_PREPARE_POINTS)
}

/// The shard's form of an operation: BM25 vectors encoded (tokenising and stemming: most of
/// a bulk load's CPU outside the shard, `perf`), payloads converted. Pure, so a write runs
/// it before taking the write lock, beside another write's apply, and a batch's points are
/// prepared on both cores.
fn prepare_op(bm25: &EdgeBm25, op: &Op) -> Result<UpdateOperation> {
    use rayon::prelude::*;
    let operation = match op {
        Op::Upsert { points } => {
            let structs = if is_bulk(op) {
                points
                    .par_iter()
                    .map(|p| prepare_point(bm25, p))
                    .collect::<Result<Vec<_>>>()?
            } else {
                points
                    .iter()
                    .map(|p| prepare_point(bm25, p))
                    .collect::<Result<Vec<_>>>()?
            };
            PointOperations::UpsertPoints(PointInsertOperations::PointsList(
                structs.into_iter().map(Into::into).collect(),
            ))
        }
        Op::DeleteIds { ids } => PointOperations::DeletePoints {
            ids: ids.iter().copied().map(PointId::Uuid).collect(),
        },
        Op::DeleteWhere { partition, filter } => {
            PointOperations::DeletePointsByFilter(to_qdrant(filter, partition)?)
        }
    };
    Ok(UpdateOperation::PointOperation(operation))
}

fn prepare_point(bm25: &EdgeBm25, p: &JPoint) -> Result<PointStruct> {
    let mut named: Vec<(String, qdrant_edge::Vector)> = Vec::new();
    if let Some(d) = &p.dense {
        named.push((DENSE.to_string(), d.clone().into()));
    }
    if let Some(v) = &p.sparse {
        let v = qdrant_edge::SparseVector::new(v.indices.clone(), v.values.clone())
            .map_err(|e| StoreError::Invalid(format!("sparse vector of point {}: {e}", p.id)))?;
        named.push((BM25.to_string(), v.into()));
    } else if let Some(text) = &p.bm25_text {
        named.push((BM25.to_string(), bm25.embed_document(text).into()));
    }
    let payload = serde_json::to_value(&p.payload).map_err(engine)?;
    Ok(PointStruct::new(
        PointId::Uuid(p.id),
        Vectors::new_named(named),
        payload,
    ))
}

/// Scalar int8 quantization in memory-mapped files (Qdrant's `{"scalar": {"type": "int8",
/// "always_ram": false}}`; built through its JSON form because the config's wrapper type is
/// not re-exported by qdrant-edge 0.7.2). Every dense search walks these copies, so the
/// engine prefaults them when a segment loads (patch 0006): they are resident like RAM ones,
/// but as file pages the kernel can reclaim, not anonymous memory. A 1M bulk load (index
/// builds every 250k chunks) peaked at 1,165–1,177 MiB anonymous this way against
/// 1,512–1,540 MiB with the copies in RAM (README Benchmarks); without the prefault the first
/// searches after a build faulted them in page by page (legs p99 ~100 ms at 1M).
fn int8_quantization() -> Result<qdrant_edge::QuantizationConfig> {
    serde_json::from_value(serde_json::json!({
        "scalar": {"type": "int8", "quantile": 0.99, "always_ram": false}
    }))
    .map_err(engine)
}

/// Keyword indexes kept in RAM rather than memory-mapped: the fields every recall's filter
/// names (the partition's three, `kind` and `keys`), so both legs check them for every
/// candidate they visit. Memory-mapped, those checks were two thirds of each leg's search
/// time (`perf` of a 100k recall run: 1,293 of 1,914 HNSW samples and 1,506 of 2,277 sparse
/// ones under the filter check); in RAM the two legs took 2.6 ms p50 instead of 3.3–3.4
/// (same session), for about 20 MiB more per 100k points. The other keyword fields are
/// filtered on by rarer paths and stay on disk.
const RAM_KEYWORD_FIELDS: &[&str] = &["tenant", "user", "namespace", "kind", "keys"];

fn create_indexes(shard: &EdgeShard) -> Result<()> {
    for field in KEYWORD_FIELDS {
        let params = KeywordIndexParams {
            is_tenant: Some(*field == "tenant"),
            on_disk: Some(!RAM_KEYWORD_FIELDS.contains(field)),
            ..Default::default()
        };
        shard
            .update(UpdateOperation::FieldIndexOperation(
                FieldIndexOperations::CreateIndex(CreateIndex {
                    field_name: path(field)?,
                    field_schema: Some(PayloadFieldSchema::FieldParams(
                        PayloadSchemaParams::Keyword(params),
                    )),
                }),
            ))
            .map_err(engine)?;
    }
    for field in INTEGER_FIELDS {
        shard
            .update(UpdateOperation::FieldIndexOperation(
                FieldIndexOperations::CreateIndex(CreateIndex {
                    field_name: path(field)?,
                    field_schema: Some(PayloadFieldSchema::FieldParams(
                        PayloadSchemaParams::Integer(IntegerIndexParams {
                            lookup: Some(true),
                            range: Some(true),
                            on_disk: Some(true),
                            ..Default::default()
                        }),
                    )),
                }),
            ))
            .map_err(engine)?;
    }
    Ok(())
}

fn path(field: &str) -> Result<JsonPath> {
    JsonPath::try_from(field)
        .map_err(|_| StoreError::Invalid(format!("invalid payload field name {field:?}")))
}

fn value_match(value: &Value) -> Match {
    match value {
        Value::Str(s) => Match::new_value(ValueVariants::String(s.clone())),
        Value::Int(i) => Match::new_value(ValueVariants::Integer(*i)),
        Value::Bool(b) => Match::new_value(ValueVariants::Bool(*b)),
    }
}

/// Translates Cairn's filter, scoped to `partition`, into a Qdrant filter.
fn to_qdrant(filter: &Filter, partition: &Partition) -> Result<qdrant_edge::Filter> {
    let scoped = filter.scoped(partition);
    let mut must = Vec::new();
    let mut must_not = Vec::new();
    for cond in &scoped.must {
        match cond {
            Cond::Eq(field, value) => must.push(Condition::Field(FieldCondition::new_match(
                path(field)?,
                value_match(value),
            ))),
            Cond::NotEq(field, value) => must_not.push(Condition::Field(
                FieldCondition::new_match(path(field)?, value_match(value)),
            )),
            Cond::AnyOf(field, values) => must.push(Condition::Field(FieldCondition::new_match(
                path(field)?,
                Match::from(values.clone()),
            ))),
            Cond::Range { field, gte, lte } => {
                must.push(Condition::Field(FieldCondition::new_range(
                    path(field)?,
                    Range {
                        lt: None,
                        gt: None,
                        gte: gte.map(OrderedFloat),
                        lte: lte.map(OrderedFloat),
                    },
                )))
            }
        }
    }
    Ok(qdrant_edge::Filter {
        should: None,
        min_should: None,
        must: Some(must),
        must_not: (!must_not.is_empty()).then_some(must_not),
    })
}

/// A stored payload as a point. Points written before typed record state existed keep that
/// state in `metadata`; it is read into `state` here, so every reader sees one layout
/// (`RecordState::upgrade_legacy`) and old data directories need no migration step.
fn decode_payload(id: &PointId, payload: Option<qdrant_edge::Payload>) -> Result<StoredPoint> {
    let map = payload.map(|p| p.0).unwrap_or_default();
    serde_json::from_value(serde_json::Value::Object(map))
        .map(cairn_models::RecordState::upgrade_legacy)
        .map_err(|e| StoreError::Corrupt {
            id: format!("{id:?}"),
            reason: e.to_string(),
        })
}

fn point_uuid(id: &PointId) -> Result<Uuid> {
    match id {
        PointId::Uuid(u) => Ok(*u),
        PointId::NumId(n) => Err(StoreError::Corrupt {
            id: n.to_string(),
            reason: "numeric point id (Cairn writes UUIDs only)".into(),
        }),
    }
}

/// The dense and sparse vectors of a point read with both.
fn vectors_of(
    vectors: Option<VectorStructInternal>,
) -> (Option<Vec<f32>>, Option<crate::SparseVector>) {
    match vectors {
        Some(VectorStructInternal::Named(mut named)) => {
            let dense = match named.remove(DENSE) {
                Some(VectorInternal::Dense(v)) => Some(v),
                _ => None,
            };
            let sparse = match named.remove(BM25) {
                Some(VectorInternal::Sparse(v)) => Some(crate::SparseVector {
                    indices: v.indices,
                    values: v.values,
                }),
                _ => None,
            };
            (dense, sparse)
        }
        Some(VectorStructInternal::Single(v)) => (Some(v), None),
        _ => (None, None),
    }
}

fn dense_of(vectors: Option<VectorStructInternal>) -> Option<Vec<f32>> {
    vectors_of(vectors).0
}

fn with_vector(want: bool) -> WithVector {
    if want {
        WithVector::Selector(vec![DENSE.to_string()])
    } else {
        WithVector::Bool(false)
    }
}

fn nearest(query: VectorInternal, using: &str) -> ScoringQuery {
    ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery {
        query,
        using: Some(using.to_string()),
    }))
}

#[async_trait::async_trait]
impl MemoryStore for EdgeStore {
    async fn upsert(&self, points: Vec<UpsertPoint>) -> Result<()> {
        if points.is_empty() {
            return Ok(());
        }
        let dim = self.dim;
        for p in &points {
            if let Some(d) = &p.dense {
                if d.len() != dim {
                    return Err(StoreError::Invalid(format!(
                        "vector of dimension {} for a {dim}-d store",
                        d.len()
                    )));
                }
            }
        }
        self.apply(Op::Upsert {
            points: points
                .into_iter()
                .map(|p| JPoint {
                    id: p.id,
                    dense_len: None,
                    dense: p.dense,
                    bm25_text: p.bm25_text,
                    sparse: p.sparse,
                    payload: p.payload,
                })
                .collect(),
        })
        .await
    }

    async fn delete_ids(&self, partition: &Partition, ids: Vec<Uuid>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        // Delete only what is inside the partition: a foreign id is silently skipped.
        let keep: Vec<Uuid> = self
            .retrieve(partition, &ids, false)
            .await?
            .into_iter()
            .map(|h| h.id)
            .collect();
        if keep.is_empty() {
            return Ok(());
        }
        self.apply(Op::DeleteIds { ids: keep }).await
    }

    async fn delete_where(&self, partition: &Partition, filter: Filter) -> Result<()> {
        // Checked here so a bad filter is an error, never a journal record.
        to_qdrant(&filter, partition)?;
        self.apply(Op::DeleteWhere {
            partition: partition.clone(),
            filter,
        })
        .await
    }

    async fn search(&self, partition: &Partition, request: SearchRequest) -> Result<Vec<Hit>> {
        let filter = to_qdrant(&request.filter, partition)?;
        if let SearchMode::Dense(v) | SearchMode::Hybrid { dense: v, .. } = &request.mode {
            if v.len() != self.dim {
                return Err(StoreError::Invalid(format!(
                    "query vector of dimension {} for a {}-d store",
                    v.len(),
                    self.dim
                )));
            }
        }
        let limit = request.limit;
        let with_vectors = request.with_vectors;
        let mode = request.mode;
        self.read(move |shard, bm25| {
            let (prefetches, query) = match mode {
                SearchMode::Dense(v) => (vec![], nearest(VectorInternal::from(v), DENSE)),
                SearchMode::Sparse(text) => (
                    vec![],
                    nearest(VectorInternal::from(bm25.embed_query(&text)), BM25),
                ),
                SearchMode::Hybrid {
                    dense,
                    text,
                    prefetch,
                    k,
                    weights,
                } => (
                    vec![
                        Prefetch {
                            prefetches: vec![],
                            query: Some(nearest(VectorInternal::from(dense), DENSE)),
                            limit: prefetch,
                            params: None,
                            filter: Some(filter.clone()),
                            score_threshold: None,
                        },
                        Prefetch {
                            prefetches: vec![],
                            query: Some(nearest(
                                VectorInternal::from(bm25.embed_query(&text)),
                                BM25,
                            )),
                            limit: prefetch,
                            params: None,
                            filter: Some(filter.clone()),
                            score_threshold: None,
                        },
                    ],
                    ScoringQuery::Fusion(Fusion::Rrf {
                        k,
                        weights: Some(vec![OrderedFloat(weights.0), OrderedFloat(weights.1)]),
                    }),
                ),
            };
            let scored = shard
                .query(QueryRequest {
                    prefetches,
                    query: Some(query),
                    filter: Some(filter),
                    score_threshold: None,
                    limit,
                    offset: 0,
                    params: None,
                    with_vector: with_vector(with_vectors),
                    with_payload: WithPayloadInterface::Bool(true),
                })
                .map_err(engine)?;
            scored
                .into_iter()
                .map(|p| {
                    Ok(Hit {
                        id: point_uuid(&p.id)?,
                        score: p.score,
                        point: decode_payload(&p.id, p.payload)?,
                        dense: dense_of(p.vector),
                    })
                })
                .collect()
        })
        .await
    }

    async fn retrieve(
        &self,
        partition: &Partition,
        ids: &[Uuid],
        with_vectors: bool,
    ) -> Result<Vec<Hit>> {
        let ids: Vec<PointId> = ids.iter().map(|u| PointId::Uuid(*u)).collect();
        let partition = partition.clone();
        self.read(move |shard, _| {
            let records = shard
                .retrieve(
                    &ids,
                    Some(WithPayloadInterface::Bool(true)),
                    Some(with_vector(with_vectors)),
                )
                .map_err(engine)?;
            let mut out = Vec::with_capacity(records.len());
            for r in records {
                let point = decode_payload(&r.id, r.payload)?;
                if in_partition(&point, &partition) {
                    out.push(Hit {
                        id: point_uuid(&r.id)?,
                        score: 0.0,
                        point,
                        dense: dense_of(r.vector),
                    });
                }
            }
            Ok(out)
        })
        .await
    }

    async fn scroll(
        &self,
        partition: &Partition,
        filter: Filter,
        limit: usize,
        offset: Option<Uuid>,
    ) -> Result<(Vec<Hit>, Option<Uuid>)> {
        let f = to_qdrant(&filter, partition)?;
        self.read(move |shard, _| {
            let (records, next) = shard
                .scroll(ScrollRequest {
                    offset: offset.map(PointId::Uuid),
                    limit: Some(limit.max(1)),
                    filter: Some(f),
                    with_payload: Some(WithPayloadInterface::Bool(true)),
                    with_vector: WithVector::Bool(false),
                    order_by: None,
                })
                .map_err(engine)?;
            let hits = records
                .into_iter()
                .map(|r| {
                    Ok(Hit {
                        id: point_uuid(&r.id)?,
                        score: 0.0,
                        point: decode_payload(&r.id, r.payload)?,
                        dense: None,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let next = match next {
                Some(id) => Some(point_uuid(&id)?),
                None => None,
            };
            Ok((hits, next))
        })
        .await
    }

    async fn count(&self, partition: &Partition, filter: Filter) -> Result<usize> {
        let f = to_qdrant(&filter, partition)?;
        self.read(move |shard, _| {
            shard
                .count(CountRequest {
                    filter: Some(f),
                    exact: true,
                })
                .map_err(engine)
        })
        .await
    }

    async fn count_all(&self) -> Result<usize> {
        self.read(move |shard, _| {
            shard
                .count(CountRequest {
                    filter: None,
                    exact: true,
                })
                .map_err(engine)
        })
        .await
    }

    async fn optimize(&self) -> Result<bool> {
        // Shares the gate with writes (they go on during an index build); only a checkpoint
        // waits for it.
        let shard = Arc::clone(&self.shard);
        let gate = Arc::clone(&self.gate);
        let optimizing = Arc::clone(&self.optimizing);
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let gate = gate.read().unwrap_or_else(|p| p.into_inner());
            optimizing.fetch_add(1, Ordering::AcqRel);
            let result = shard.optimize().map_err(engine);
            optimizing.fetch_sub(1, Ordering::AcqRel);
            // Past the build: a checkpoint need not wait for the read below.
            drop(gate);
            // A built segment's vectors and payloads were paged out by the builder: read them
            // back before recall faults them in one 4 KiB page at a time (`warm`).
            if let Ok(true) = result {
                crate::warm::warm(&path);
            }
            result
        })
        .await
        .map_err(|e| StoreError::Engine(format!("storage task failed: {e}")))?
    }

    async fn flush(&self) -> Result<()> {
        let shard = Arc::clone(&self.shard);
        let gate = Arc::clone(&self.gate);
        let journal = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || checkpoint(&shard, &gate, &journal))
            .await
            .map_err(|e| StoreError::Engine(format!("storage task failed: {e}")))?
    }

    fn segments(&self) -> Option<usize> {
        Some(self.shard.info().segments_count)
    }

    fn backend(&self) -> crate::BackendInfo {
        crate::BackendInfo {
            kind: "embedded",
            location: self.path.display().to_string(),
            collection: None,
        }
    }

    fn disk_need(&self) -> Option<crate::disk::DiskNeed> {
        Some(self.disk.need())
    }

    async fn backup(
        &self,
        to: &Path,
        progress: &(dyn Fn(BackupProgress) + Send + Sync),
    ) -> Result<BackupReport> {
        self.backup_to(to, progress).await
    }

    async fn export(
        &self,
        offset: Option<Uuid>,
        limit: usize,
    ) -> Result<(Vec<UpsertPoint>, Option<Uuid>)> {
        self.read(move |shard, _| {
            let (records, next) = shard
                .scroll(ScrollRequest {
                    offset: offset.map(PointId::Uuid),
                    limit: Some(limit.max(1)),
                    filter: None,
                    with_payload: Some(WithPayloadInterface::Bool(true)),
                    with_vector: WithVector::Selector(vec![DENSE.to_string(), BM25.to_string()]),
                    order_by: None,
                })
                .map_err(engine)?;
            let points = records
                .into_iter()
                .map(|r| {
                    let (dense, sparse) = vectors_of(r.vector);
                    Ok(UpsertPoint {
                        id: point_uuid(&r.id)?,
                        dense,
                        bm25_text: None,
                        sparse,
                        payload: decode_payload(&r.id, r.payload)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let next = match next {
                Some(id) => Some(point_uuid(&id)?),
                None => None,
            };
            Ok((points, next))
        })
        .await
    }
}
