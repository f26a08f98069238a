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
    /// Key-less (loopback) mode and a non-loopback `Host` or `Origin`: a web page or a DNS
    /// rebinding attempt, not a local client.
    #[error("{0}")]
    ForbiddenOrigin(String),
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
    MethodNotAllowed(String),
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
    #[error("the request took too long; the server stopped waiting")]
    Timeout,
    #[error("{0}")]
    Internal(String),
}

/// Every stable error code, in the order of [`ApiError::parts`] (README "Error codes").
pub const CODES: &[&str] = &[
    "invalid_request",
    "unauthorized",
    "scope_forbidden",
    "forbidden",
    "forbidden_origin",
    "not_found",
    "method_not_allowed",
    "turn_conflict",
    "conflict",
    "payload_too_large",
    "too_many_items",
    "unsupported_media_type",
    "extraction_failed",
    "empty_document",
    "evidence_not_found",
    "unavailable",
    "timeout",
    "internal",
];

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
            ApiError::ForbiddenOrigin(_) => (
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                Some("without API keys the server answers only loopback hosts and origins (localhost, 127.0.0.1, [::1]); configure API keys to serve others"),
            ),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", None),
            ApiError::MethodNotAllowed(_) => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                Some("see /v1/openapi.json for each route's methods"),
            ),
            ApiError::TurnConflict(_) => (
                StatusCode::CONFLICT,
                "turn_conflict",
                Some("a turn id is completed once; use a new turn id for a new turn"),
            ),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict", None),
            ApiError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", None)
            }
            ApiError::TooManyItems(_) => (
                StatusCode::BAD_REQUEST,
                "too_many_items",
                Some("split the request"),
            ),
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
            ApiError::Timeout => (
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                Some("a write carries on after the timeout: retry the same request (same turn id, message_id or ts) to get its outcome"),
            ),
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

impl From<cairn_models::limits::LimitError> for ApiError {
    fn from(e: cairn_models::limits::LimitError) -> Self {
        match e {
            cairn_models::limits::LimitError::TooLarge { .. } => {
                ApiError::PayloadTooLarge(e.to_string())
            }
            cairn_models::limits::LimitError::TooMany { .. } => {
                ApiError::TooManyItems(e.to_string())
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed() {
        let all = [
            ApiError::InvalidRequest(String::new()),
            ApiError::Unauthorized,
            ApiError::ScopeForbidden,
            ApiError::Forbidden(String::new()),
            ApiError::ForbiddenOrigin(String::new()),
            ApiError::NotFound(String::new()),
            ApiError::MethodNotAllowed(String::new()),
            ApiError::TurnConflict(String::new()),
            ApiError::Conflict(String::new()),
            ApiError::PayloadTooLarge(String::new()),
            ApiError::TooManyItems(String::new()),
            ApiError::UnsupportedMediaType(String::new()),
            ApiError::ExtractionFailed(String::new()),
            ApiError::EmptyDocument(String::new()),
            ApiError::EvidenceNotFound(String::new()),
            ApiError::Unavailable(String::new()),
            ApiError::Timeout,
            ApiError::Internal(String::new()),
        ];
        let codes: Vec<&str> = all.iter().map(ApiError::code).collect();
        assert_eq!(codes, CODES);
    }
}
