//! The API's error type and its one mapping to HTTP.
//!
//! Every library error converts into [`ApiError`]; [`ApiError::parts`] is the single,
//! exhaustive match from error to (status, stable code, hint). Codes are a public contract
//! (README "Error codes"); internal errors are logged and never leak their details.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_ingest::IngestError;
use cairn_models::{ErrorKind, ModelError};
use cairn_recall::RecallError;
use serde::Serialize;

/// Errors as the API reports them.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("missing or invalid API key")]
    Unauthorized,
    #[error("this API key may not access that scope")]
    ScopeForbidden,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    TurnConflict(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
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
    #[error("the request took too long")]
    Timeout,
    #[error("{0}")]
    Internal(String),
}

/// The JSON error body: `{"error": {"code", "message", "hint"?}}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// One error. `code` is stable (README "Error codes"); `message` is for people.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    #[schema(value_type = String, example = "invalid_request")]
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub hint: Option<&'static str>,
}

impl ApiError {
    /// Status, machine code and hint of each error. The one place that knows HTTP statuses.
    pub fn parts(&self) -> (StatusCode, &'static str, Option<&'static str>) {
        match self {
            ApiError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request", None),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                Some("send the key as `Authorization: Bearer <key>`"),
            ),
            ApiError::ScopeForbidden => (StatusCode::FORBIDDEN, "scope_forbidden", None),
            ApiError::Forbidden(_) => (
                StatusCode::FORBIDDEN,
                "forbidden",
                Some("deciding, reading and forgetting need a full key"),
            ),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", None),
            ApiError::TurnConflict(_) => (
                StatusCode::CONFLICT,
                "turn_conflict",
                Some("a turn id is completed once; use a new turn id for a new turn"),
            ),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict", None),
            ApiError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", None)
            }
            ApiError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                Some("supported: text/plain, text/markdown, application/pdf"),
            ),
            ApiError::ExtractionFailed(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "extraction_failed", None)
            }
            ApiError::EmptyDocument(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "empty_document", None)
            }
            ApiError::EvidenceNotFound(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "evidence_not_found",
                Some("cite doc:, msg: or evt: refs that exist in the same scope"),
            ),
            ApiError::Unavailable(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                Some("retry later"),
            ),
            ApiError::Timeout => (StatusCode::GATEWAY_TIMEOUT, "timeout", Some("retry later")),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", None),
        }
    }

    pub fn code(&self) -> &'static str {
        self.parts().1
    }

    pub fn body(&self) -> ErrorBody {
        let (_, code, hint) = self.parts();
        let message = match self {
            ApiError::Internal(_) => "internal error (logged)".to_string(),
            other => other.to_string(),
        };
        ErrorBody {
            error: ErrorDetail {
                code,
                message,
                hint,
            },
        }
    }

    fn from_kind(kind: ErrorKind, message: String) -> Self {
        match kind {
            ErrorKind::BadInput => ApiError::InvalidRequest(message),
            ErrorKind::NotFound => ApiError::NotFound(message),
            ErrorKind::Conflict => ApiError::Conflict(message),
            ErrorKind::Unavailable => ApiError::Unavailable(message),
            ErrorKind::Internal => ApiError::Internal(message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, _) = self.parts();
        if status.is_server_error() {
            tracing::error!(code, error = %self, "request failed");
        }
        (status, axum::Json(self.body())).into_response()
    }
}

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        ApiError::from_kind(e.kind(), e.to_string())
    }
}

impl From<IngestError> for ApiError {
    fn from(e: IngestError) -> Self {
        match &e {
            IngestError::TooLarge { .. } => ApiError::PayloadTooLarge(e.to_string()),
            IngestError::UnsupportedMedia { .. } => ApiError::UnsupportedMediaType(e.to_string()),
            IngestError::Extraction { .. } => ApiError::ExtractionFailed(e.to_string()),
            IngestError::Empty { .. } => ApiError::EmptyDocument(e.to_string()),
            _ => ApiError::from_kind(e.kind(), e.to_string()),
        }
    }
}

impl From<RecallError> for ApiError {
    fn from(e: RecallError) -> Self {
        ApiError::from_kind(e.kind(), e.to_string())
    }
}

impl From<cairn_store::StoreError> for ApiError {
    fn from(e: cairn_store::StoreError) -> Self {
        ApiError::from_kind(e.kind(), e.to_string())
    }
}

impl From<cairn_embed::EmbedError> for ApiError {
    fn from(e: cairn_embed::EmbedError) -> Self {
        ApiError::from_kind(e.kind(), e.to_string())
    }
}
