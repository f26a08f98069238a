//! Text embeddings for Cairn: a local ONNX model run by fastembed on dedicated worker threads,
//! with an on-disk embedding cache.
//!
//! - [`ModelSpec`] describes a model directory (pooling, prefixes, dimension, max tokens).
//! - [`EmbedConfig`] says where the model and the ONNX Runtime library are (set-up puts them
//!   under `.cache/`) and how to run them; a value the caller builds (the `cairn` binary from
//!   its configuration), never read from the environment here.
//! - [`Embedder`] is a cheap clonable handle. Embedding is CPU-bound and fastembed's `embed`
//!   takes `&mut self`, so each ONNX session lives on its own OS thread (a worker) and async
//!   callers wait on a channel: the tokio runtime never runs model inference. The first
//!   worker embeds documents and queries; query workers (up to [`EmbedConfig::workers`] in
//!   all) start when queries queue up, so recall stays fast during a bulk ingest.
//! - [`EmbeddingCache`] keys vectors by (model id, prefixed text hash) so re-ingests and
//!   evaluation re-runs never embed the same text twice.
//! - [`words`] says when a tokenizer's count of a text is the sum of its words' counts, so
//!   callers that count the same words many times can cache them.

mod cache;
mod config;
pub mod words;
mod worker;

pub use cache::{EmbeddingCache, DEFAULT_MAX_ENTRIES as DEFAULT_CACHE_MAX_ENTRIES};
pub use config::{
    default_workers, EmbedConfig, ModelSpec, Pooling, DEFAULT_BATCH_SIZE, DEFAULT_QUERY_BATCH,
    DEFAULT_QUERY_WAIT_US, MAX_DEFAULT_WORKERS,
};
pub use worker::Embedder;

use cairn_models::ErrorKind;

/// Errors of the embedding layer.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Model files or the ONNX Runtime library are missing or unreadable.
    #[error("embedding model unavailable: {0} (run scripts/setup.sh, or set CAIRN_MODEL_DIR / CAIRN_ORT_LIB)")]
    ModelUnavailable(String),
    /// The model directory is there but its description is wrong.
    #[error("invalid model configuration: {0}")]
    InvalidConfig(String),
    /// Inference failed.
    #[error("embedding failed: {0}")]
    Inference(String),
    /// The worker thread is gone (it panicked or shut down).
    #[error("embedding worker stopped")]
    WorkerStopped,
    #[error("embedding cache I/O: {0}")]
    Cache(#[from] std::io::Error),
}

impl EmbedError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EmbedError::ModelUnavailable(_) | EmbedError::WorkerStopped => ErrorKind::Unavailable,
            EmbedError::Cache(e) if cairn_models::error::is_disk_full(e) => ErrorKind::StorageFull,
            EmbedError::InvalidConfig(_) | EmbedError::Inference(_) | EmbedError::Cache(_) => {
                ErrorKind::Internal
            }
        }
    }
}

pub type Result<T, E = EmbedError> = std::result::Result<T, E>;
