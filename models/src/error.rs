//! Error classification shared by every crate.

/// The class of an error: what a caller can do about it. Every library crate's error enum
/// maps each variant onto one of these; the HTTP layer maps these (and the specific codes)
/// onto statuses in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The input is wrong; retrying the same request will fail again.
    BadInput,
    /// The thing asked for does not exist (in this scope).
    NotFound,
    /// The request contradicts what is stored (e.g. a turn id reused with other content).
    Conflict,
    /// A dependency (model, storage) is not available; retrying later may work.
    Unavailable,
    /// The server's disk (or quota) is full: nothing was stored; the same request works once
    /// space is freed, without a restart.
    StorageFull,
    /// A bug or an unexpected state.
    Internal,
}

/// Whether an I/O error means the disk or the quota is full (`ENOSPC`, `EDQUOT`): a state
/// of the machine, reported as [`ErrorKind::StorageFull`], not a bug.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) || matches!(e.raw_os_error(), Some(28 | 122))
}

/// Whether an engine's error message reports a full disk (errors that reach Cairn as text,
/// such as the embedded shard's).
pub fn message_says_disk_full(message: &str) -> bool {
    message.contains("No space left on device") || message.contains("Disk quota exceeded")
}

/// Errors from validating domain values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("invalid {field}: {reason}")]
    InvalidScope { field: &'static str, reason: String },
    #[error("invalid identifier {value:?}: {reason}")]
    InvalidId { value: String, reason: String },
    #[error("invalid value for {field}: {reason}")]
    InvalidValue { field: &'static str, reason: String },
    /// A reference that does not follow the grammar (see [`crate::refs`]).
    #[error(
        "invalid ref {value:?}: expected doc:<id>[#<chunk>], msg:<conversation>/<seq>, \
         conv:<id>, turn:<id>, evt:<id>, cand:<id>, mem:<id>, ent:<id>, pref:<id>, fact:<id>, \
         rel:<id> or trace:<id>"
    )]
    InvalidRef { value: String },
}

impl ModelError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ModelError::InvalidScope { .. }
            | ModelError::InvalidId { .. }
            | ModelError::InvalidValue { .. }
            | ModelError::InvalidRef { .. } => ErrorKind::BadInput,
        }
    }
}

/// Every stable, machine-readable error code a door reports (README "Error codes"). The one
/// table: the service crate's error names its code here, the HTTP door maps each code to a
/// status in one exhaustive match, MCP reports it in tool errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    ScopeForbidden,
    Forbidden,
    CapabilityDenied,
    ForbiddenOrigin,
    NotFound,
    MethodNotAllowed,
    TurnConflict,
    Conflict,
    PayloadTooLarge,
    TooManyItems,
    UnsupportedMediaType,
    ExtractionFailed,
    EmptyDocument,
    EvidenceNotFound,
    Unavailable,
    InsufficientStorage,
    Timeout,
    Internal,
}

impl ErrorCode {
    /// Every code, in the order of the README's table.
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::ScopeForbidden,
        ErrorCode::Forbidden,
        ErrorCode::CapabilityDenied,
        ErrorCode::ForbiddenOrigin,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::TurnConflict,
        ErrorCode::Conflict,
        ErrorCode::PayloadTooLarge,
        ErrorCode::TooManyItems,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::ExtractionFailed,
        ErrorCode::EmptyDocument,
        ErrorCode::EvidenceNotFound,
        ErrorCode::Unavailable,
        ErrorCode::InsufficientStorage,
        ErrorCode::Timeout,
        ErrorCode::Internal,
    ];

    /// The code as it appears on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::ScopeForbidden => "scope_forbidden",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::CapabilityDenied => "capability_denied",
            ErrorCode::ForbiddenOrigin => "forbidden_origin",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::TurnConflict => "turn_conflict",
            ErrorCode::Conflict => "conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::TooManyItems => "too_many_items",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::ExtractionFailed => "extraction_failed",
            ErrorCode::EmptyDocument => "empty_document",
            ErrorCode::EvidenceNotFound => "evidence_not_found",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Internal => "internal",
        }
    }

    /// What a caller can do about it.
    pub fn kind(self) -> ErrorKind {
        match self {
            ErrorCode::InvalidRequest
            | ErrorCode::Unauthorized
            | ErrorCode::ScopeForbidden
            | ErrorCode::Forbidden
            | ErrorCode::CapabilityDenied
            | ErrorCode::ForbiddenOrigin
            | ErrorCode::MethodNotAllowed
            | ErrorCode::PayloadTooLarge
            | ErrorCode::TooManyItems
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::ExtractionFailed
            | ErrorCode::EmptyDocument
            | ErrorCode::EvidenceNotFound => ErrorKind::BadInput,
            ErrorCode::NotFound => ErrorKind::NotFound,
            ErrorCode::TurnConflict | ErrorCode::Conflict => ErrorKind::Conflict,
            ErrorCode::Unavailable | ErrorCode::Timeout => ErrorKind::Unavailable,
            ErrorCode::InsufficientStorage => ErrorKind::StorageFull,
            ErrorCode::Internal => ErrorKind::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "{s} twice");
            assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
            assert_eq!(serde_json::to_value(code).ok(), Some(serde_json::json!(s)));
        }
    }
}
