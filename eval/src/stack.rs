//! The engine under test: the service's own [`Engine`], assembled by
//! [`Engine::with_embedder`] (the same path as `cairn serve`), shared by the harness and
//! `cairn bench`.
//!
//! An [`EvalEnv`] is the model: one [`Embedder`], with a persistent embedding cache (so a
//! second run embeds nothing) or none. Each [`Workspace`] is a fresh engine over a throwaway
//! directory; its write path ([`Ingestor`]) and, on demand, a read path with the run's
//! settings ([`Workspace::recaller`]), so runs are independent of each other and of
//! `./cairn-data`.
//! [`WorkspaceOptions`] says how: one chunk per document or the default chunking, and the
//! store's [`SyncPolicy`] (the harness keeps the default, `always`; `cairn bench` passes the
//! configured `store.sync` so `CAIRN_SYNC=os` measures the durability cost). The store is
//! the embedded one unless the [`EvalEnv`] names a server ([`EvalEnv::server`]: each
//! workspace then gets a collection of its own on it).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cairn_embed::{EmbedConfig, Embedder};
use cairn_ingest::{ChunkSettings, DocumentInput, IngestConfig, Ingestor, Outcome, Progress};
use cairn_models::Scope;
use cairn_recall::{RecallConfig, Recaller};
use cairn_service::{Backend, Engine, EngineOptions, Principal};
use cairn_store::{MemoryStore, ServerConfig, SyncPolicy};

use crate::{EvalError, Result};

/// Progress of a run, for a progress bar or log lines.
#[derive(Debug, Clone)]
pub enum Event {
    /// Ingest of `total` items begins.
    IngestStarted { total: u64 },
    /// `done` of `total` items are ingested.
    Ingested { done: u64, total: u64 },
    /// The ingest finished.
    IngestFinished,
    /// A new phase of the run begins (evaluating a mode, building packs...).
    Phase(String),
}

/// Receives [`Event`]s; called from the pipeline's tasks.
pub type Observer = Arc<dyn Fn(Event) + Send + Sync>;

/// An observer that ignores everything.
pub fn quiet() -> Observer {
    Arc::new(|_| {})
}

/// The default directory of the persistent evaluation embedding cache: `eval-embed-cache`
/// beside `models/` in the model home (`.cache/eval-embed-cache` after `scripts/setup.sh`).
pub fn default_cache_dir(config: &EmbedConfig) -> PathBuf {
    config
        .model_dir
        .parent()
        .and_then(Path::parent)
        .map(|home| home.join("eval-embed-cache"))
        .unwrap_or_else(|| PathBuf::from(".cache/eval-embed-cache"))
}

/// The shared model, and the store the workspaces open on.
#[derive(Debug, Clone)]
pub struct EvalEnv {
    pub embedder: Embedder,
    pub config: EmbedConfig,
    pub cache_dir: Option<PathBuf>,
    /// A Qdrant server for the workspaces (one collection each, named after the
    /// configured collection and the workspace's directory); `None`: the embedded store.
    pub server: Option<ServerConfig>,
}

impl EvalEnv {
    /// Loads the model `config` describes with the embedding cache in `cache_dir` (none: no
    /// cache), workspaces on the embedded store. Runs the load off the runtime.
    pub async fn open(config: EmbedConfig, cache_dir: Option<PathBuf>) -> Result<Self> {
        let (c, dir) = (config.clone(), cache_dir.clone());
        let embedder = tokio::task::spawn_blocking(move || Embedder::open(&c, dir.as_deref()))
            .await
            .map_err(|e| EvalError::Internal(format!("model load task: {e}")))??;
        Ok(EvalEnv {
            embedder,
            config,
            cache_dir,
            server: None,
        })
    }

    /// The same model with workspaces on `server` (`None`: embedded).
    pub fn on_server(self, server: Option<ServerConfig>) -> Self {
        EvalEnv { server, ..self }
    }

    /// A second, uncached copy of the model, to time query embedding honestly.
    pub async fn uncached(&self) -> Result<Embedder> {
        let c = self.config.clone();
        Ok(
            tokio::task::spawn_blocking(move || Embedder::open(&c, None))
                .await
                .map_err(|e| EvalError::Internal(format!("model load task: {e}")))??,
        )
    }

    /// Bytes in the embedding cache directory (new vectors are appended, so the growth
    /// during an ingest says how many vectors were computed rather than read back).
    pub fn cache_bytes(&self) -> u64 {
        let Some(dir) = &self.cache_dir else {
            return 0;
        };
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Size of one cache record (16-byte key + the vector).
    pub fn cache_record_bytes(&self) -> u64 {
        16 + 4 * self.embedder.spec().dim as u64
    }

    /// Vectors the model computed since the cache held `cache_before` bytes
    /// ([`EvalEnv::cache_bytes`] taken before an ingest).
    pub fn vectors_computed_since(&self, cache_before: u64) -> u64 {
        self.cache_bytes().saturating_sub(cache_before) / self.cache_record_bytes()
    }
}

/// How a [`Workspace`] is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkspaceOptions {
    /// One chunk per document (BEIR's published setting) instead of the default chunking.
    pub whole_document: bool,
    /// When the store's acknowledged writes reach stable storage (`StoreConfig::sync`).
    pub sync: SyncPolicy,
}

impl WorkspaceOptions {
    /// The write path's configuration for `embedder`'s model: `IngestConfig::for_model`,
    /// with `whole_document` applied. `cairn bench` chunks with the same settings to time
    /// the raw embedder on exactly the chunks the pipeline embeds.
    pub fn ingest_config(&self, embedder: &Embedder) -> IngestConfig {
        let mut ingest = IngestConfig::for_model(embedder.spec().max_tokens);
        ingest.chunk = ChunkSettings {
            whole_document: self.whole_document,
            ..ingest.chunk
        };
        ingest
    }
}

/// A fresh engine over a throwaway directory.
// Field order matters: the engine and the store are dropped before their directory.
#[derive(Debug)]
pub struct Workspace {
    pub engine: Arc<Engine>,
    pub ingestor: Arc<Ingestor>,
    pub store: Arc<dyn MemoryStore>,
    pub embedder: Embedder,
    dir: tempfile::TempDir,
}

impl Workspace {
    /// Opens an empty store with the default durability; `whole_document` selects one chunk
    /// per document.
    pub async fn new(env: &EvalEnv, whole_document: bool) -> Result<Self> {
        Self::open(
            env,
            WorkspaceOptions {
                whole_document,
                ..WorkspaceOptions::default()
            },
        )
        .await
    }

    /// Opens an empty store in a fresh throwaway directory, with its write path, on `env`'s
    /// model and store.
    pub async fn open(env: &EvalEnv, options: WorkspaceOptions) -> Result<Self> {
        let embedder = &env.embedder;
        let dir = tempfile::Builder::new()
            .prefix("cairn-eval-")
            .tempdir()
            .map_err(|e| EvalError::io(Path::new("temporary directory"), e))?;
        let (path, embedder_c) = (dir.path().to_path_buf(), embedder.clone());
        let engine_options = EngineOptions {
            // A server gets one collection per throwaway workspace.
            backend: match &env.server {
                Some(config) => Backend::Server(ServerConfig {
                    collection: config.collection_for_dir(&path)?,
                    dim: embedder.spec().dim,
                    ..config.clone()
                }),
                None => Backend::Embedded,
            },
            sync: options.sync,
            ingest: Some(options.ingest_config(embedder)),
            recall: RecallConfig::default(),
            disk_reserve_bytes: None,
            extractor: None,
        };
        let engine = Arc::new(
            tokio::task::spawn_blocking(move || {
                Engine::with_embedder(&path, embedder_c, engine_options)
            })
            .await
            .map_err(|e| EvalError::Internal(format!("engine open task: {e}")))??,
        );
        Ok(Workspace {
            ingestor: Arc::clone(engine.ingestor()),
            store: Arc::clone(engine.store()),
            embedder: embedder.clone(),
            engine,
            dir,
        })
    }

    /// The read path over this store with `config`.
    pub fn recaller(&self, config: RecallConfig) -> Recaller {
        Recaller::new(Arc::clone(&self.store), self.embedder.clone(), config)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Closes the engine and its store (every handle this workspace holds; drop recallers
    /// made from it first) and hands back the directory, e.g. to time a re-open.
    pub fn into_dir(self) -> tempfile::TempDir {
        let Workspace {
            engine,
            ingestor,
            store,
            embedder: _,
            dir,
        } = self;
        drop(ingestor);
        drop(store);
        drop(engine);
        dir
    }

    /// Ingests documents through the real pipeline, reporting progress, then builds the
    /// vector index as `cairn ingest` does (after a batch of ≥ 1,000 chunks).
    pub async fn ingest(
        &self,
        scope: &Scope,
        inputs: Vec<DocumentInput>,
        observer: &Observer,
    ) -> Result<IngestRun> {
        let total = inputs.len() as u64;
        observer(Event::IngestStarted { total });
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let progress: Arc<dyn Fn(Progress) + Send + Sync> = {
            let (done, observer) = (Arc::clone(&done), observer.clone());
            Arc::new(move |p| {
                if let Progress::Finished = p {
                    let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    observer(Event::Ingested { done: d, total });
                }
            })
        };
        let started = Instant::now();
        // The service's batch ingest: the same index-build rule as `cairn ingest`.
        let batch = self
            .engine
            .ingest_batch(&Principal::Local, scope, inputs, progress)
            .await?;
        let seconds = started.elapsed().as_secs_f64();
        observer(Event::IngestFinished);
        let optimize = batch.index_built.map(|b| Optimize {
            optimized: b.optimized,
            seconds: b.took.as_secs_f64(),
        });
        self.store.flush().await?;
        Ok(IngestRun {
            outcomes: batch.outcomes,
            seconds,
            chunks: batch.chunks,
            optimize,
        })
    }
}

/// The `optimize()` call after a large ingest.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Optimize {
    /// What the store reported: false when nothing needed optimizing (e.g. the vectors are
    /// below the engine's indexing threshold, so no HNSW index is built and dense search
    /// stays exact).
    pub optimized: bool,
    pub seconds: f64,
}

/// What an ingest did.
#[derive(Debug)]
pub struct IngestRun {
    pub outcomes: Vec<Outcome>,
    pub seconds: f64,
    pub chunks: u64,
    /// The `optimize()` call, made (as `cairn ingest` does) after ≥ 1,000 chunks.
    pub optimize: Option<Optimize>,
}

/// The scope every benchmark is ingested into.
pub fn eval_scope(namespace: &str) -> Result<Scope> {
    Scope::new("eval", "bench", namespace, "eval", "run")
        .map_err(|e| EvalError::Options(e.to_string()))
}
