//! The assembled service: store, embedder, write path, read path and turn handling, opened
//! from one data directory. The one assembly path of the HTTP server, the CLI commands, the
//! evaluation harness and the benchmarks ([`Engine::open`], [`Engine::with_embedder`]).
//!
//! Its state is private: doors call the service methods (in `documents`, `messages`,
//! `recall`, `turns`, `candidates`, `forget`), which authorize, validate and take the locks in
//! the documented order.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cairn_embed::{EmbedConfig, Embedder};
use cairn_ingest::{IngestConfig, Ingestor};
use cairn_recall::{RecallConfig, Recaller};
use cairn_store::{EdgeStore, MemoryStore, QdrantStore, ServerConfig, StoreConfig};
use tokio::sync::Mutex;

use crate::error::ServiceError;

/// Free and total bytes of the data directory's filesystem ([`Engine::disk_space`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    /// Bytes a write may still use (what `df` calls available).
    pub available_bytes: u64,
    pub total_bytes: u64,
    /// Bytes a write needs available on the embedded store: its memory-mapped files' holes
    /// plus the reserve (`cairn_store::disk`); below it writes answer `507`. 0 on a server.
    pub needed_bytes: u64,
}

impl DiskSpace {
    /// With fewer than this many bytes available beyond [`DiskSpace::needed_bytes`],
    /// `/readyz` reports the disk as low: about what a burst of large documents, a checkpoint
    /// of the journal and the shard's next segment growth need together.
    pub const LOW_BYTES: u64 = 256 * 1024 * 1024;

    pub fn low(&self) -> bool {
        self.available_bytes < self.needed_bytes.saturating_add(Self::LOW_BYTES)
    }
}

/// Everything a request needs.
#[derive(Debug)]
pub struct Engine {
    data_dir: PathBuf,
    pub(crate) store: Arc<dyn MemoryStore>,
    pub(crate) embedder: Embedder,
    pub(crate) ingestor: Arc<Ingestor>,
    pub(crate) recaller: Arc<Recaller>,
    /// Serializes turn completions, so concurrent identical completions store one turn.
    pub(crate) turn_lock: Mutex<()>,
    /// Serializes candidate proposals, decisions and forgetting, so a decision never races
    /// the removal of its evidence.
    ///
    /// Lock order, everywhere: `turn_lock`, then `review_lock`, then the ingest commit lock
    /// (`Ingestor::lock_commits`, taken by forgetting a document). An ingest takes only the
    /// commit lock, and turn completion only `turn_lock` (then the ingestor's message lock).
    pub(crate) review_lock: Mutex<()>,
    /// Serializes knowledge and reasoning writes that read before they write (fact
    /// supersession, entity merges, step and tool call numbering). Taken after
    /// `review_lock` (a forget holds both).
    pub(crate) knowledge_lock: Mutex<()>,
    /// What `prepare` selected per (scope, turn id), for `complete`'s REFERS_TO links. Kept in
    /// memory only (prepare persists nothing) and bounded.
    pub(crate) prepared: Mutex<PreparedTurns>,
    /// Nonces of agents' signed requests within the signature window (replay protection).
    pub(crate) nonces: Mutex<crate::auth::NonceCache>,
    /// Chunks written since the vector index was last built (see [`Engine::note_written`]).
    written_since_optimize: AtomicU64,
    /// Set while a background index build runs, so at most one runs at a time.
    optimizing: AtomicBool,
}

/// A serialized section of the service: its in-process mutex and, on a store shared by
/// several Cairn processes (a Qdrant server behind several replicas), the store-wide lock of
/// the same name, so the section is exclusive across processes too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    /// `turn_lock`.
    Turns,
    /// `review_lock`.
    Reviews,
    /// `knowledge_lock`.
    Knowledge,
}

/// A held [`Section`]. Fields drop in order: the store lease first, then the mutex.
#[derive(Debug)]
pub(crate) struct Serial<'a> {
    _store: cairn_store::StoreLock,
    _local: tokio::sync::MutexGuard<'a, ()>,
}

/// After this many new chunks the server rebuilds the vector index in the background.
pub const OPTIMIZE_AFTER_CHUNKS: u64 = 1_000;

/// A vector index build after a bulk write.
#[derive(Debug, Clone, Copy)]
pub struct IndexBuild {
    /// What the store reported: false when nothing needed optimizing (e.g. too few vectors
    /// for the engine to build an HNSW index, so dense search stays exact).
    pub optimized: bool,
    pub took: std::time::Duration,
}

/// A bounded FIFO map of prepared turns.
#[derive(Debug, Default)]
pub(crate) struct PreparedTurns {
    map: HashMap<String, Vec<String>>,
    order: VecDeque<String>,
}

impl PreparedTurns {
    const CAPACITY: usize = 10_000;

    pub fn insert(&mut self, key: String, refs: Vec<String>) {
        if self.map.insert(key.clone(), refs).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > Self::CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Vec<String>> {
        self.map.get(key)
    }
}

impl Engine {
    /// Enters `section`: the mutex first (so a process never waits on its own lease), then
    /// the store-wide lock. Sections nest only in the documented lock order.
    pub(crate) async fn serial(&self, section: Section) -> Result<Serial<'_>, ServiceError> {
        let (mutex, name) = match section {
            Section::Turns => (&self.turn_lock, "turns"),
            Section::Reviews => (&self.review_lock, "reviews"),
            Section::Knowledge => (&self.knowledge_lock, "knowledge"),
        };
        let local = mutex.lock().await;
        let store = self.store.lock(name).await?;
        Ok(Serial {
            _store: store,
            _local: local,
        })
    }

    /// Whether a background index build is running.
    pub fn optimizing(&self) -> bool {
        self.optimizing.load(Ordering::Acquire)
    }

    /// After a bulk write outside the server (`cairn ingest`, an evaluation run), builds the
    /// vector index now if the run wrote at least [`OPTIMIZE_AFTER_CHUNKS`] chunks. The same
    /// threshold as [`Engine::note_written`]'s background build.
    pub async fn optimize_after_bulk(
        &self,
        chunks: u64,
    ) -> Result<Option<IndexBuild>, ServiceError> {
        if chunks < OPTIMIZE_AFTER_CHUNKS {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let optimized = self.store.optimize().await?;
        Ok(Some(IndexBuild {
            optimized,
            took: started.elapsed(),
        }))
    }

    /// Records that `chunks` were written. Once [`OPTIMIZE_AFTER_CHUNKS`] have accumulated,
    /// builds the vector index (edge `optimize`) on a background task, off the request path:
    /// the embedded shard has no background optimizer of its own, and searching an
    /// unindexed segment is a brute-force scan. Writes go on during the build.
    pub fn note_written(self: &Arc<Self>, chunks: u64) {
        let total = self
            .written_since_optimize
            .fetch_add(chunks, Ordering::Relaxed)
            + chunks;
        if total < OPTIMIZE_AFTER_CHUNKS || self.optimizing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.written_since_optimize.store(0, Ordering::Relaxed);
        let engine = Arc::clone(self);
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            match engine.store.optimize().await {
                Ok(_) => tracing::info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "vector index rebuilt"
                ),
                Err(e) => tracing::warn!("background optimize failed: {e}"),
            }
            engine.optimizing.store(false, Ordering::Release);
        });
    }

    /// Opens the data directory on the embedded store with the default model configuration
    /// ([`EmbedConfig::default`]) and [`EngineOptions::default`]. Blocking (loads the model):
    /// call it off the async runtime or before starting one.
    pub fn open(data_dir: &Path) -> Result<Self, ServiceError> {
        Self::open_with(data_dir, &EmbedConfig::default(), EngineOptions::default())
    }

    /// Opens the data directory: loads the model described by `embed` (blocking) with its
    /// embedding cache in `<data-dir>/embed-cache`, then [`Engine::with_embedder`]. What the
    /// `cairn` binary calls with its configuration (`cairn config`).
    pub fn open_with(
        data_dir: &Path,
        embed: &EmbedConfig,
        options: EngineOptions,
    ) -> Result<Self, ServiceError> {
        create_dir(data_dir)?;
        let embedder = Embedder::open(embed, Some(&data_dir.join("embed-cache")))?;
        Self::with_embedder(data_dir, embedder, options)
    }

    /// Assembles the service over the data directory with an already loaded model (the
    /// evaluation harness shares one model between many stores). Blocking: opening the
    /// store replays its journal.
    pub fn with_embedder(
        data_dir: &Path,
        embedder: Embedder,
        options: EngineOptions,
    ) -> Result<Self, ServiceError> {
        create_dir(data_dir)?;
        let dim = embedder.spec().dim;
        let server = match options.backend {
            Backend::Embedded => None,
            Backend::Server(config) => Some(config),
        };
        let store: Arc<dyn MemoryStore> = match server {
            // No I/O here: the collection is checked or created on first use, and
            // `cairn serve` asks for it at start (`Engine::check_store`).
            Some(config) => Arc::new(QdrantStore::new(ServerConfig { dim, ..config })?),
            None => Arc::new(EdgeStore::open(&StoreConfig {
                sync: options.sync,
                reserve_bytes: options
                    .disk_reserve_bytes
                    .unwrap_or(cairn_store::disk::DEFAULT_RESERVE_BYTES),
                ..StoreConfig::new(data_dir, dim)
            })?),
        };
        let mut ingest = options
            .ingest
            .unwrap_or_else(|| IngestConfig::for_model(embedder.spec().max_tokens));
        if let Some(extractor) = options.extractor {
            ingest.extractor = extractor;
        }
        let ingestor = Arc::new(Ingestor::new(Arc::clone(&store), embedder.clone(), ingest)?);
        let recaller = Arc::new(Recaller::new(
            Arc::clone(&store),
            embedder.clone(),
            options.recall,
        ));
        Ok(Engine {
            data_dir: data_dir.to_path_buf(),
            store,
            embedder,
            ingestor,
            recaller,
            turn_lock: Mutex::new(()),
            review_lock: Mutex::new(()),
            knowledge_lock: Mutex::new(()),
            prepared: Mutex::new(PreparedTurns::default()),
            nonces: Mutex::new(Default::default()),
            written_since_optimize: AtomicU64::new(0),
            optimizing: AtomicBool::new(false),
        })
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The store, for tools that read it directly (reports, tests, the evaluation harness).
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    /// The model.
    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }

    /// The write path.
    pub fn ingestor(&self) -> &Arc<Ingestor> {
        &self.ingestor
    }

    /// The read path with the engine's recall configuration.
    pub fn recaller(&self) -> &Arc<Recaller> {
        &self.recaller
    }

    /// Which store this engine runs on.
    /// Space on the filesystem of the data directory (the journal, the embedded shard, the
    /// embedding cache and extraction's temporary files all live there).
    pub fn disk_space(&self) -> std::io::Result<DiskSpace> {
        let stats = fs4::statvfs(&self.data_dir)?;
        Ok(DiskSpace {
            available_bytes: stats.available_space(),
            total_bytes: stats.total_space(),
            needed_bytes: self.store.disk_need().map_or(0, |n| n.needed()),
        })
    }

    pub fn backend(&self) -> cairn_store::BackendInfo {
        self.store.backend()
    }

    /// Asks the store whether it answers (a server store: connects, creates or checks its
    /// collection). `cairn serve` calls it at start so a wrong URL or a collection of another
    /// dimension fails there, and `/readyz` on every probe.
    pub async fn check_store(&self) -> Result<(), ServiceError> {
        Ok(self.store.health().await?)
    }

    /// Flushes the store to disk (and empties its journal).
    pub async fn flush(&self) -> Result<(), ServiceError> {
        Ok(self.store.flush().await?)
    }
}

/// How [`Engine::with_embedder`] assembles the service.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Which store: by default the embedded one in the data directory.
    pub backend: Backend,
    /// When acknowledged writes reach stable storage (embedded store).
    pub sync: cairn_store::SyncPolicy,
    /// The write path's configuration; default: `IngestConfig::for_model` of the model.
    pub ingest: Option<IngestConfig>,
    pub recall: RecallConfig,
    /// Room the embedded store keeps free beyond its memory-mapped files' holes before a
    /// write runs (`cairn_store::disk`); `None`: the default (64 MiB), `Some(0)`: no check.
    pub disk_reserve_bytes: Option<u64>,
    /// Where documents are extracted, replacing `ingest`'s choice when set (the `cairn`
    /// binary isolates PDFs in `cairn extract-worker` children); `None`: in-process.
    pub extractor: Option<cairn_ingest::extract::Extractor>,
}

/// Where the points live. Chosen by the caller (the `cairn` binary: `store.qdrant.url`);
/// the library reads no environment.
#[derive(Debug, Clone, Default)]
pub enum Backend {
    /// The embedded store in the data directory.
    #[default]
    Embedded,
    /// A Qdrant server or cluster (its `dim` is replaced by the model's).
    Server(ServerConfig),
}

fn create_dir(data_dir: &Path) -> Result<(), ServiceError> {
    std::fs::create_dir_all(data_dir).map_err(|e| {
        ServiceError::Unavailable(format!(
            "cannot create data directory {}: {e}",
            data_dir.display()
        ))
    })
}
