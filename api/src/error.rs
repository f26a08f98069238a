//! The HTTP door's error type and its one mapping to HTTP.
//!
//! A handler's error is the service's [`ServiceError`] or one of the few errors only HTTP
//! has (a non-loopback origin, a wrong method, the request timeout). [`ApiError::parts`] is
//! the single, exhaustive match from stable code ([`ErrorCode`]) to (status, hint). Codes
//! are a public contract (README "Error codes"); internal errors are logged and never leak
//! their details.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_models::ErrorCode;
use cairn_service::ServiceError;
use serde::Serialize;

/// Errors as the HTTP API reports them.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Anything the service reports.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// Key-less (loopback) mode and a non-loopback `Host` or `Origin`: a web page or a DNS
    /// rebinding attempt, not a local client.
    #[error("{0}")]
    ForbiddenOrigin(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("the request took too long; the server stopped waiting")]
    Timeout,
}

/// Every stable error code, in the order of the README's table.
pub const CODES: [&str; ErrorCode::ALL.len()] = {
    let mut out = [""; ErrorCode::ALL.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = ErrorCode::ALL[i].as_str();
        i += 1;
    }
    out
};

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

/// Shorthands for the service errors handlers raise themselves.
impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::Service(ServiceError::InvalidRequest(message.into()))
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::Service(ServiceError::NotFound(message.into()))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::Service(ServiceError::Internal(message.into()))
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Service(e) => e.code(),
            ApiError::ForbiddenOrigin(_) => ErrorCode::ForbiddenOrigin,
            ApiError::MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            ApiError::Timeout => ErrorCode::Timeout,
        }
    }

    /// Status, machine code and hint of each error. The one place that knows HTTP statuses.
    pub fn parts(&self) -> (StatusCode, &'static str, Option<&'static str>) {
        let code = self.code();
        let (status, hint) = status_of(code);
        (status, code.as_str(), hint)
    }

    pub fn body(&self) -> ErrorBody {
        let (_, code, hint) = self.parts();
        let message = match self {
            ApiError::Service(e) => e.public_message(),
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
}

/// The status and hint of each code: one exhaustive match, so a new code cannot ship
/// without its status.
pub fn status_of(code: ErrorCode) -> (StatusCode, Option<&'static str>) {
    match code {
        ErrorCode::InvalidRequest => (StatusCode::BAD_REQUEST, None),
        ErrorCode::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            Some("send the key as `Authorization: Bearer <key>`"),
        ),
        ErrorCode::ScopeForbidden => (StatusCode::FORBIDDEN, None),
        ErrorCode::Forbidden => (
            StatusCode::FORBIDDEN,
            Some("deciding, reading and forgetting need a full key"),
        ),
        ErrorCode::CapabilityDenied => (
            StatusCode::FORBIDDEN,
            Some("the agent's grant does not allow this: ask the owner for a grant with the operation (GET /v1/grants lists them)"),
        ),
        ErrorCode::ForbiddenOrigin => (
            StatusCode::FORBIDDEN,
            Some("without API keys the server answers only loopback hosts and origins (localhost, 127.0.0.1, [::1]); configure API keys to serve others"),
        ),
        ErrorCode::NotFound => (StatusCode::NOT_FOUND, None),
        ErrorCode::MethodNotAllowed => (
            StatusCode::METHOD_NOT_ALLOWED,
            Some("see /v1/openapi.json for each route's methods"),
        ),
        ErrorCode::TurnConflict => (
            StatusCode::CONFLICT,
            Some("a turn id is completed once; use a new turn id for a new turn"),
        ),
        ErrorCode::Conflict => (StatusCode::CONFLICT, None),
        ErrorCode::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, None),
        ErrorCode::TooManyItems => (StatusCode::BAD_REQUEST, Some("split the request")),
        ErrorCode::UnsupportedMediaType => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("supported: text/plain, text/markdown, application/pdf"),
        ),
        ErrorCode::ExtractionFailed => (StatusCode::UNPROCESSABLE_ENTITY, None),
        ErrorCode::EmptyDocument => (StatusCode::UNPROCESSABLE_ENTITY, None),
        ErrorCode::EvidenceNotFound => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("cite doc:, msg: or evt: refs (and, for facts, fact: refs) that exist in the same scope"),
        ),
        ErrorCode::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, Some("retry later")),
        ErrorCode::InsufficientStorage => (
            StatusCode::INSUFFICIENT_STORAGE,
            Some("the server's disk is full: nothing was stored; retry once space is freed"),
        ),
        ErrorCode::Timeout => (
            StatusCode::GATEWAY_TIMEOUT,
            Some("a write carries on after the timeout: retry the same request (same turn id, message_id or ts) to get its outcome"),
        ),
        ErrorCode::Internal => (StatusCode::INTERNAL_SERVER_ERROR, None),
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

/// Library errors reach a handler through the service's classification.
macro_rules! via_service {
    ($($t:ty),*) => {$(
        impl From<$t> for ApiError {
            fn from(e: $t) -> Self {
                ApiError::Service(ServiceError::from(e))
            }
        }
    )*};
}

via_service!(
    cairn_models::limits::LimitError,
    cairn_models::ModelError,
    cairn_ingest::IngestError
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_models_table() {
        let from_table: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(CODES.to_vec(), from_table);
        assert_eq!(
            ApiError::Timeout.parts().0,
            StatusCode::GATEWAY_TIMEOUT,
            "HTTP-only errors have codes too"
        );
        assert_eq!(
            ApiError::from(ServiceError::TurnConflict(String::new()))
                .parts()
                .1,
            "turn_conflict"
        );
    }
}
