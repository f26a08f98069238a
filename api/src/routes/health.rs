//! Liveness, readiness and metrics.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_doc))
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: String,
}

/// `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    #[schema(example = "ready")]
    pub status: String,
    /// Embedding model id (name and weights hash).
    pub model: String,
    /// Points in the store.
    pub points: usize,
    /// The store engine: `embedded` (in-process Qdrant) or `qdrant` (a server or cluster).
    #[schema(example = "embedded")]
    pub backend: String,
    /// The data directory, or the server URL.
    pub store: String,
    /// The server collection (`qdrant` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collection: Option<String>,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "Alive", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the store answers and the model is loaded.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    ))]
async fn readyz(State(state): State<SharedState>) -> Result<Json<Ready>, ApiError> {
    // A server store is asked first: a server that is down is `503 unavailable`.
    state.engine.check_store().await?;
    let points = state.engine.count_all().await?;
    let backend = state.engine.backend();
    Ok(Json(Ready {
        status: "ready".into(),
        model: state.engine.embedder().model_id().to_string(),
        points,
        backend: backend.kind.to_string(),
        store: backend.location,
        collection: backend.collection,
    }))
}

/// Prometheus metrics (text exposition format): requests and latency per route, ingest and
/// recall counters.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text", body = String, content_type = "text/plain")))]
async fn metrics(State(state): State<SharedState>) -> String {
    state.metrics.render()
}

/// This OpenAPI document (generated from the handlers; committed as `api/openapi.json`).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "health",
    responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_doc() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        crate::openapi_json(),
    )
        .into_response()
}
