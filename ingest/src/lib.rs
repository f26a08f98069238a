//! Cairn's write path: documents and conversation messages into the store.
//!
//! extract ([`extract`]) → chunk ([`chunk`], token-sized by the model's tokenizer) → embed
//! (`cairn-embed`, on its worker thread, cached) → write ([`cairn_store::MemoryStore`]).
//!
//! Identity and idempotence: a document's id is the hash of its normalized text; chunk point
//! ids are UUIDv5 of (partition, source, document id, chunk index); message point ids are
//! UUIDv5 of (full scope, conversation, turn or content key, role). Re-ingesting unchanged
//! content is detected from the registry before chunking or embedding.
//!
//! Versions: each source has one registry record naming its current document id. An ingest
//! writes the new chunks first, then flips the registry record (the commit point), then
//! deletes the previous version's chunks. Readers only accept chunks whose document id is
//! the registry's current one, so they see the old or the new version, never both. A crash
//! anywhere leaves a state that the same command, run again, completes exactly.

pub mod beir;
pub mod catalog;
pub mod chunk;
pub mod extract;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod messages;
mod pipeline;
mod record_messages;

pub use chunk::{Chunk, ChunkSettings, Chunker};
pub use extract::{Extracted, MediaType};
pub use messages::{parse_messages, MessageInput, Timestamp};
pub use pipeline::{
    DocSource, DocStatus, DocumentInput, DocumentReport, IngestConfig, Ingestor, Outcome, Progress,
};
pub use record_messages::{MessageReceipt, MessageVectors};

use cairn_models::ErrorKind;

/// Errors of the write path. Per-file errors are reported per file; the batch goes on.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{source_name}: not found")]
    NotFound { source_name: String },
    #[error("{source_name}: unsupported file type ({reason})")]
    UnsupportedMedia { source_name: String, reason: String },
    #[error("{source_name}: {size} bytes is over the {limit}-byte limit")]
    TooLarge {
        source_name: String,
        size: u64,
        limit: u64,
    },
    #[error("{source_name}: extraction failed: {reason}")]
    Extraction { source_name: String, reason: String },
    #[error("{source_name}: no text to index")]
    Empty { source_name: String },
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] cairn_store::StoreError),
    #[error(transparent)]
    Embed(#[from] cairn_embed::EmbedError),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl IngestError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            IngestError::NotFound { .. } => ErrorKind::NotFound,
            IngestError::UnsupportedMedia { .. }
            | IngestError::TooLarge { .. }
            | IngestError::Extraction { .. }
            | IngestError::Empty { .. }
            | IngestError::InvalidInput(_) => ErrorKind::BadInput,
            IngestError::Conflict(_) => ErrorKind::Conflict,
            IngestError::Io { source, .. } if cairn_models::error::is_disk_full(source) => {
                ErrorKind::StorageFull
            }
            IngestError::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidData => {
                    ErrorKind::BadInput
                }
                _ => ErrorKind::Unavailable,
            },
            IngestError::Store(e) => e.kind(),
            IngestError::Embed(e) => e.kind(),
            IngestError::Unavailable(_) => ErrorKind::Unavailable,
            IngestError::Internal(_) => ErrorKind::Internal,
        }
    }

    /// A stable machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            IngestError::Io { .. } => "io_error",
            IngestError::NotFound { .. } => "not_found",
            IngestError::UnsupportedMedia { .. } => "unsupported_media_type",
            IngestError::TooLarge { .. } => "payload_too_large",
            IngestError::Extraction { .. } => "extraction_failed",
            IngestError::Empty { .. } => "empty_document",
            IngestError::InvalidInput(_) => "invalid_request",
            IngestError::Conflict(_) => "conflict",
            IngestError::Store(_) => "storage_error",
            IngestError::Embed(_) => "embedding_error",
            IngestError::Unavailable(_) => "unavailable",
            IngestError::Internal(_) => "internal",
        }
    }
}

/// Current time in Unix epoch milliseconds.
pub(crate) fn now_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
