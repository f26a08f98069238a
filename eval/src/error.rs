//! The evaluation crate's one error type.

use cairn_models::ErrorKind;

/// Errors of the evaluation harness. Per-document ingest failures are counted in the
/// reports, not raised; these are the errors that stop a run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A data or report file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A data file does not have the expected shape (BEIR, LoCoMo, scenario JSON).
    #[error("{path}: {reason}")]
    Data { path: String, reason: String },
    /// The options of a run are inconsistent (no mode, no query left, bad budget...).
    #[error("invalid evaluation options: {0}")]
    Options(String),
    #[error(transparent)]
    Ingest(#[from] cairn_ingest::IngestError),
    #[error(transparent)]
    Recall(#[from] cairn_recall::RecallError),
    #[error(transparent)]
    Store(#[from] cairn_store::StoreError),
    #[error(transparent)]
    Embed(#[from] cairn_embed::EmbedError),
    #[error(transparent)]
    Service(#[from] cairn_service::ServiceError),
    /// A chart could not be drawn.
    #[error("chart {path}: {reason}")]
    Chart { path: String, reason: String },
    /// A background task panicked or was cancelled.
    #[error("internal error: {0}")]
    Internal(String),
}

impl EvalError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EvalError::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidData => {
                    ErrorKind::BadInput
                }
                _ => ErrorKind::Unavailable,
            },
            EvalError::Data { .. } | EvalError::Options(_) => ErrorKind::BadInput,
            EvalError::Ingest(e) => e.kind(),
            EvalError::Recall(e) => e.kind(),
            EvalError::Store(e) => e.kind(),
            EvalError::Embed(e) => e.kind(),
            EvalError::Service(e) => e.kind(),
            EvalError::Chart { .. } | EvalError::Internal(_) => ErrorKind::Internal,
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        EvalError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn data(path: &std::path::Path, reason: impl Into<String>) -> Self {
        EvalError::Data {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = EvalError> = std::result::Result<T, E>;
