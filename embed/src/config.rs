//! Where the model and the ONNX Runtime library are, and how the model is to be used.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{EmbedError, Result};

/// How token embeddings become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The `[CLS]` token (BGE models).
    Cls,
    /// Mean over tokens (MiniLM / sentence-transformers).
    Mean,
}

/// Description of a model directory, read from its `cairn-model.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub name: String,
    pub dim: usize,
    pub pooling: Pooling,
    /// Longest input in tokens (the model's max sequence length).
    pub max_tokens: usize,
    /// Prepended to queries. Empty for bge-small-en-v1.5 as set up (its instruction,
    /// "Represent this sentence for searching relevant passages: ", is optional for v1.5 and
    /// the relevance gate and answerability model are calibrated without it).
    #[serde(default)]
    pub query_prefix: String,
    /// Prepended to documents (empty for BGE).
    #[serde(default)]
    pub document_prefix: String,
}

/// File name of the model description inside a model directory.
pub const MODEL_SPEC_FILE: &str = "cairn-model.json";

impl ModelSpec {
    pub fn load(model_dir: &Path) -> Result<Self> {
        let path = model_dir.join(MODEL_SPEC_FILE);
        let bytes = std::fs::read(&path)
            .map_err(|e| EmbedError::ModelUnavailable(format!("{}: {e}", path.display())))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| EmbedError::InvalidConfig(format!("{}: {e}", path.display())))
    }
}

/// Default of [`EmbedConfig::query_batch`].
pub const DEFAULT_QUERY_BATCH: usize = 16;
/// Default of [`EmbedConfig::query_wait`], in microseconds.
pub const DEFAULT_QUERY_WAIT_US: u64 = 2_000;

/// Where to find the model and the runtime, and how to run them.
#[derive(Debug, Clone)]
pub struct EmbedConfig {
    /// Directory with `model.onnx`, `tokenizer.json`, `config.json`, `tokenizer_config.json`,
    /// `special_tokens_map.json` and `cairn-model.json`.
    pub model_dir: PathBuf,
    /// Path of `libonnxruntime.so`.
    pub ort_library: PathBuf,
    /// Texts per inference call. On a 2-core machine 1–8 is fastest: a batch is padded to its
    /// longest text, so the worker also groups texts of similar length.
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads of the first worker's session, the one that embeds
    /// documents (None: the runtime's default, all cores). Query workers run one thread each.
    pub intra_threads: Option<usize>,
    /// Most embedding workers, each a thread with its own ONNX session (default: the
    /// machine's cores, at most [`MAX_DEFAULT_WORKERS`]). The first starts with the embedder
    /// and embeds documents and queries; the others embed queries only and start only when
    /// more queries are queued than there are free workers, so sequential use (a CLI
    /// command, one agent, an ingest) loads one session. A query worker costs its session
    /// (~40–65 MB of weights and prepacked kernels, plus a query-sized activation arena).
    /// 1: one session, queries wait behind document batches.
    pub workers: usize,
    /// Whether ONNX Runtime's threads spin between the operators of a model run (never after
    /// it: `session.force_spinning_stop`). Spinning burns the cores that extraction,
    /// chunking, storage writes and the BM25 leg need, so it is off by default
    /// (`embed.ort_spin`; on 2 cores it made query embedding p50 faster and whole-recall
    /// p99 slower, README Benchmarks).
    pub spin: bool,
    /// Download this model with fastembed from the Hugging Face hub instead of using
    /// `model_dir` (e.g. `BAAI/bge-small-en-v1.5`; needs the `hub` feature and internet
    /// access). Downloads are cached under `<model_dir>/hub`.
    pub hub_model: Option<String>,
    /// Most queries embedded in one model run (dynamic batching: queries waiting for the
    /// model at the same moment share a run; default 16; 1 turns it off). The int8 model quantizes activations per batch, so a batched query's vector
    /// differs from its lone vector by about the quantization's own error (cosine > 0.99).
    pub query_batch: usize,
    /// How long the worker holds a query run open for more queries (default 2,000 µs). Only under load: it waits only when the run
    /// before was itself a batch, so a lone query on an idle server never waits.
    pub query_wait: std::time::Duration,
    /// Most vectors the on-disk embedding cache keeps (least recently used evicted first).
    pub cache_max_entries: usize,
}

/// Default of [`EmbedConfig::batch_size`].
pub const DEFAULT_BATCH_SIZE: usize = 8;

/// Most embedding workers by default (the default is the machine's cores up to this).
pub const MAX_DEFAULT_WORKERS: usize = 4;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Default of [`EmbedConfig::workers`]: the machine's cores, at most
/// [`MAX_DEFAULT_WORKERS`].
pub fn default_workers() -> usize {
    cores().clamp(1, MAX_DEFAULT_WORKERS)
}

impl EmbedConfig {
    /// The files `scripts/setup.sh` puts under `home` (`models/bge-small-en`,
    /// `onnxruntime/libonnxruntime.so`) with the default settings.
    pub fn in_home(home: &Path) -> Self {
        EmbedConfig {
            model_dir: home.join("models").join("bge-small-en"),
            ort_library: home.join("onnxruntime").join("libonnxruntime.so"),
            batch_size: DEFAULT_BATCH_SIZE,
            intra_threads: None,
            workers: default_workers(),
            spin: false,
            hub_model: None,
            query_batch: DEFAULT_QUERY_BATCH,
            query_wait: std::time::Duration::from_micros(DEFAULT_QUERY_WAIT_US),
            cache_max_entries: crate::cache::DEFAULT_MAX_ENTRIES,
        }
    }

    /// Intra-op threads of the first worker's session: [`EmbedConfig::intra_threads`] when
    /// set, else the machine's cores.
    pub fn session_threads(&self) -> usize {
        self.intra_threads.unwrap_or_else(cores).max(1)
    }

    /// The model home when none is configured: the nearest `.cache/` with a `models/`
    /// directory in the current directory or above it, or above the running executable;
    /// else `.cache`.
    pub fn default_home() -> PathBuf {
        find_cache_dir().unwrap_or_else(|| PathBuf::from(".cache"))
    }
}

impl Default for EmbedConfig {
    /// [`EmbedConfig::in_home`] of [`EmbedConfig::default_home`]. Reads no environment:
    /// the `cairn` binary's configuration (`cairn config`) says where the files are.
    fn default() -> Self {
        EmbedConfig::in_home(&EmbedConfig::default_home())
    }
}

fn find_cache_dir() -> Option<PathBuf> {
    let mut starts = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            starts.push(dir.to_path_buf());
        }
    }
    for start in starts {
        for dir in start.ancestors() {
            let candidate = dir.join(".cache");
            if candidate.join("models").is_dir() {
                return Some(candidate);
            }
        }
    }
    None
}
