//! A JSON extractor whose rejections use Cairn's error shape (`invalid_request`,
//! `payload_too_large`, `unsupported_media_type`) instead of axum's plain-text bodies.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::ApiError;
use cairn_service::ServiceError;

/// Like `axum::Json`, with typed errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(rejection) => Err(rejection_to_error(rejection)),
        }
    }
}

fn rejection_to_error(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::invalid(format!(
            "request body does not match the schema: {}",
            e.body_text()
        )),
        JsonRejection::JsonSyntaxError(e) => {
            ApiError::invalid(format!("malformed JSON: {}", e.body_text()))
        }
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::Service(ServiceError::UnsupportedMediaType(
                "expected a body with `Content-Type: application/json`".into(),
            ))
        }
        JsonRejection::BytesRejection(e) => {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::Service(ServiceError::PayloadTooLarge(
                    "request body is larger than the server's limit".into(),
                ))
            } else {
                ApiError::invalid(format!("cannot read request body: {}", e.body_text()))
            }
        }
        other => ApiError::invalid(other.body_text()),
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}
