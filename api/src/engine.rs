//! The assembled service: store, embedder, write path, read path and turn handling, opened
//! from one data directory. Shared by the HTTP server, the CLI commands and the benchmarks.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cairn_embed::{EmbedConfig, Embedder};
use cairn_ingest::{IngestConfig, Ingestor};
use cairn_recall::{RecallConfig, Recaller};
use cairn_store::{EdgeStore, MemoryStore, StoreConfig};
use tokio::sync::Mutex;

use crate::error::ApiError;

/// Everything a request needs.
#[derive(Debug)]
pub struct Engine {
    pub data_dir: PathBuf,
    pub store: Arc<dyn MemoryStore>,
    pub embedder: Embedder,
    pub ingestor: Arc<Ingestor>,
    pub recaller: Arc<Recaller>,
    /// Serializes turn completions, so concurrent identical completions store one turn.
    pub turn_lock: Mutex<()>,
    /// Serializes candidate proposals, decisions and forgetting, so a decision never races
    /// the removal of its evidence.
    ///
    /// Lock order, everywhere: `turn_lock`, then `review_lock`, then the ingest commit lock
    /// (`Ingestor::lock_commits`, taken by forgetting a document). An ingest takes only the
    /// commit lock, and turn completion only `turn_lock` (then the ingestor's message lock).
    pub review_lock: Mutex<()>,
    /// What `prepare` selected per (scope, turn id), for `complete`'s REFERS_TO links. Kept in
    /// memory only (prepare persists nothing) and bounded.
    pub prepared: Mutex<PreparedTurns>,
    /// Chunks written since the vector index was last built (see [`Engine::note_written`]).
    written_since_optimize: AtomicU64,
    /// Set while a background index build runs, so at most one runs at a time.
    optimizing: AtomicBool,
}

/// After this many new chunks the server rebuilds the vector index in the background.
pub const OPTIMIZE_AFTER_CHUNKS: u64 = 1_000;

/// A bounded FIFO map of prepared turns.
#[derive(Debug, Default)]
pub struct PreparedTurns {
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
    /// Whether a background index build is running.
    pub fn optimizing(&self) -> bool {
        self.optimizing.load(Ordering::Acquire)
    }

    /// After a bulk write outside the server (`cairn ingest`), builds the vector index now if
    /// the run wrote at least [`OPTIMIZE_AFTER_CHUNKS`] chunks; returns how long it took.
    /// The same threshold as [`Engine::note_written`]'s background build.
    pub async fn optimize_after_bulk(
        &self,
        chunks: u64,
    ) -> Result<Option<std::time::Duration>, ApiError> {
        if chunks < OPTIMIZE_AFTER_CHUNKS {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        self.store.optimize().await?;
        Ok(Some(started.elapsed()))
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

    /// Opens the data directory with the default model configuration. Blocking (loads the
    /// model): call it off the async runtime or before starting one.
    pub fn open(data_dir: &Path) -> Result<Self, ApiError> {
        Self::open_with(
            data_dir,
            &EmbedConfig::from_env(),
            RecallConfig::default(),
            None,
        )
    }

    pub fn open_with(
        data_dir: &Path,
        embed: &EmbedConfig,
        recall: RecallConfig,
        ingest: Option<IngestConfig>,
    ) -> Result<Self, ApiError> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            ApiError::Unavailable(format!(
                "cannot create data directory {}: {e}",
                data_dir.display()
            ))
        })?;
        let embedder = Embedder::open(embed, Some(&data_dir.join("embed-cache")))?;
        let store: Arc<dyn MemoryStore> = Arc::new(EdgeStore::open(&StoreConfig {
            sync: cairn_store::SyncPolicy::from_env()?,
            ..StoreConfig::new(data_dir, embedder.spec().dim)
        })?);
        let ingest = ingest.unwrap_or_else(|| IngestConfig::for_model(embedder.spec().max_tokens));
        let ingestor = Arc::new(Ingestor::new(Arc::clone(&store), embedder.clone(), ingest)?);
        let recaller = Arc::new(Recaller::new(Arc::clone(&store), embedder.clone(), recall));
        Ok(Engine {
            data_dir: data_dir.to_path_buf(),
            store,
            embedder,
            ingestor,
            recaller,
            turn_lock: Mutex::new(()),
            review_lock: Mutex::new(()),
            prepared: Mutex::new(PreparedTurns::default()),
            written_since_optimize: AtomicU64::new(0),
            optimizing: AtomicBool::new(false),
        })
    }
}
