//! The service's error type. Every variant names one stable code of
//! [`cairn_models::ErrorCode`]; what a code means for a transport (an HTTP status, an MCP tool
//! error) is the door's business. Messages are for people; internal errors keep their detail
//! for the log and a door never shows it to a client.

use cairn_ingest::IngestError;
use cairn_models::{ErrorCode, ErrorKind, ModelError};
use cairn_recall::RecallError;

/// Errors of the memory service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    InvalidRequest(String),
    /// No credential, or one the service does not know.
    #[error("missing or invalid API key")]
    Unauthorized,
    /// The principal may not reach that tenant or user.
    #[error("this API key may not access that scope")]
    ScopeForbidden,
    /// The principal reaches the scope but may not do this there.
    #[error("{0}")]
    Forbidden(String),
    /// An agent's grant does not include the operation, or is suspended or revoked.
    #[error("{0}")]
    CapabilityDenied(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    TurnConflict(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// A list over its item limit (the message names it).
    #[error("{0}")]
    TooManyItems(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    ExtractionFailed(String),
    #[error("{0}")]
    EmptyDocument(String),
    #[error("{0}")]
    EvidenceNotFound(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    InsufficientStorage(String),
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ServiceError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            ServiceError::Unauthorized => ErrorCode::Unauthorized,
            ServiceError::ScopeForbidden => ErrorCode::ScopeForbidden,
            ServiceError::Forbidden(_) => ErrorCode::Forbidden,
            ServiceError::CapabilityDenied(_) => ErrorCode::CapabilityDenied,
            ServiceError::NotFound(_) => ErrorCode::NotFound,
            ServiceError::TurnConflict(_) => ErrorCode::TurnConflict,
            ServiceError::Conflict(_) => ErrorCode::Conflict,
            ServiceError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            ServiceError::TooManyItems(_) => ErrorCode::TooManyItems,
            ServiceError::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            ServiceError::ExtractionFailed(_) => ErrorCode::ExtractionFailed,
            ServiceError::EmptyDocument(_) => ErrorCode::EmptyDocument,
            ServiceError::EvidenceNotFound(_) => ErrorCode::EvidenceNotFound,
            ServiceError::Unavailable(_) => ErrorCode::Unavailable,
            ServiceError::InsufficientStorage(_) => ErrorCode::InsufficientStorage,
            ServiceError::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The class of the error.
    pub fn kind(&self) -> ErrorKind {
        self.code().kind()
    }

    /// The message a client may see: an internal error's detail stays in the log.
    pub fn public_message(&self) -> String {
        match self {
            ServiceError::Internal(_) => "internal error (logged)".to_string(),
            other => other.to_string(),
        }
    }

    fn from_kind(kind: ErrorKind, message: String) -> Self {
        match kind {
            ErrorKind::BadInput => ServiceError::InvalidRequest(message),
            ErrorKind::NotFound => ServiceError::NotFound(message),
            ErrorKind::Conflict => ServiceError::Conflict(message),
            ErrorKind::Unavailable => ServiceError::Unavailable(message),
            ErrorKind::StorageFull => ServiceError::InsufficientStorage(message),
            ErrorKind::Internal => ServiceError::Internal(message),
        }
    }
}

impl From<cairn_models::limits::LimitError> for ServiceError {
    fn from(e: cairn_models::limits::LimitError) -> Self {
        match e {
            cairn_models::limits::LimitError::TooLarge { .. } => {
                ServiceError::PayloadTooLarge(e.to_string())
            }
            cairn_models::limits::LimitError::TooMany { .. } => {
                ServiceError::TooManyItems(e.to_string())
            }
        }
    }
}

impl From<ModelError> for ServiceError {
    fn from(e: ModelError) -> Self {
        ServiceError::from_kind(e.kind(), e.to_string())
    }
}

impl From<IngestError> for ServiceError {
    fn from(e: IngestError) -> Self {
        match &e {
            IngestError::TooLarge { .. } => ServiceError::PayloadTooLarge(e.to_string()),
            IngestError::UnsupportedMedia { .. } => {
                ServiceError::UnsupportedMediaType(e.to_string())
            }
            IngestError::Extraction { .. } => ServiceError::ExtractionFailed(e.to_string()),
            IngestError::Empty { .. } => ServiceError::EmptyDocument(e.to_string()),
            _ => ServiceError::from_kind(e.kind(), e.to_string()),
        }
    }
}

impl From<RecallError> for ServiceError {
    fn from(e: RecallError) -> Self {
        ServiceError::from_kind(e.kind(), e.to_string())
    }
}

impl From<cairn_store::StoreError> for ServiceError {
    fn from(e: cairn_store::StoreError) -> Self {
        ServiceError::from_kind(e.kind(), e.to_string())
    }
}

impl From<cairn_embed::EmbedError> for ServiceError {
    fn from(e: cairn_embed::EmbedError) -> Self {
        ServiceError::from_kind(e.kind(), e.to_string())
    }
}
