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
    /// Prepended to queries (BGE: "Represent this sentence for searching relevant passages: ").
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
    /// ONNX Runtime intra-op threads (None: the runtime's default, all cores).
    pub intra_threads: Option<usize>,
    /// Whether idle ONNX Runtime threads spin. Spinning burns the cores that extraction,
    /// chunking and storage writes need while a batch waits, so it is off by default
    /// (`CAIRN_ORT_SPIN=1` turns it on).
    pub spin: bool,
    /// Download this model with fastembed from the Hugging Face hub instead of using
    /// `model_dir` (env `CAIRN_HUB_MODEL`, e.g. `BAAI/bge-small-en-v1.5`; needs the `hub`
    /// feature and internet access). Downloads are cached under `<model_dir>/hub`.
    pub hub_model: Option<String>,
    /// Most queries embedded in one model run (dynamic batching: queries waiting for the
    /// model at the same moment share a run; env `CAIRN_QUERY_BATCH`, default 16; 1 turns
    /// it off). The int8 model quantizes activations per batch, so a batched query's vector
    /// differs from its lone vector by about the quantization's own error (cosine > 0.99).
    pub query_batch: usize,
    /// How long the worker holds a query run open for more queries (env
    /// `CAIRN_QUERY_WAIT_US`, default 2,000 µs). Only under load: it waits only when the run
    /// before was itself a batch, so a lone query on an idle server never waits.
    pub query_wait: std::time::Duration,
    /// Most vectors the on-disk embedding cache keeps (env `CAIRN_EMBED_CACHE_MAX`; least
    /// recently used evicted first).
    pub cache_max_entries: usize,
}

impl EmbedConfig {
    /// The default configuration: `CAIRN_MODEL_DIR` and `CAIRN_ORT_LIB` if set, otherwise the
    /// files `scripts/setup.sh` put under `CAIRN_HOME` (default: the nearest `.cache/` in the
    /// current directory or above it, or above the running executable).
    pub fn from_env() -> Self {
        let home = std::env::var_os("CAIRN_HOME")
            .map(PathBuf::from)
            .or_else(find_cache_dir)
            .unwrap_or_else(|| PathBuf::from(".cache"));
        let model_dir = std::env::var_os("CAIRN_MODEL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("models").join("bge-small-en"));
        let ort_library = std::env::var_os("CAIRN_ORT_LIB")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("onnxruntime").join("libonnxruntime.so"));
        let batch_size = std::env::var("CAIRN_EMBED_BATCH")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|b: &usize| *b > 0)
            .unwrap_or(8);
        EmbedConfig {
            model_dir,
            ort_library,
            batch_size,
            intra_threads: std::env::var("CAIRN_ORT_THREADS")
                .ok()
                .and_then(|v| v.parse().ok()),
            spin: std::env::var("CAIRN_ORT_SPIN").is_ok_and(|v| v == "1"),
            hub_model: std::env::var("CAIRN_HUB_MODEL")
                .ok()
                .filter(|v| !v.is_empty()),
            query_batch: std::env::var("CAIRN_QUERY_BATCH")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n: &usize| *n > 0)
                .unwrap_or(DEFAULT_QUERY_BATCH),
            query_wait: std::time::Duration::from_micros(
                std::env::var("CAIRN_QUERY_WAIT_US")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(DEFAULT_QUERY_WAIT_US),
            ),
            cache_max_entries: std::env::var("CAIRN_EMBED_CACHE_MAX")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n: &usize| *n > 0)
                .unwrap_or(crate::cache::DEFAULT_MAX_ENTRIES),
        }
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
