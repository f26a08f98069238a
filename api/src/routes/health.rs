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
    /// Space on the data directory's filesystem (absent when it cannot be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskReport>,
}

/// The data directory's disk as `/readyz` reports it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiskReport {
    pub available_bytes: u64,
    pub total_bytes: u64,
    /// Below this many available bytes writes answer `507 insufficient_storage`: the
    /// embedded store's memory-mapped files' unallocated holes plus the reserve
    /// (`CAIRN_DISK_RESERVE_MB`); 0 on a Qdrant server.
    pub needed_bytes: u64,
    /// Fewer than `needed_bytes` + 256 MiB available: writes may soon answer
    /// `507 insufficient_storage` (reads keep working). Still ready: the server serves what
    /// it holds.
    pub low: bool,
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
    let disk = state.engine.disk_space().ok().map(|d| DiskReport {
        available_bytes: d.available_bytes,
        total_bytes: d.total_bytes,
        needed_bytes: d.needed_bytes,
        low: d.low(),
    });
    if disk.as_ref().is_some_and(|d| d.low) {
        tracing::warn!(?disk, "the data directory's disk is nearly full");
    }
    Ok(Json(Ready {
        status: "ready".into(),
        model: state.engine.embedder().model_id().to_string(),
        points,
        backend: backend.kind.to_string(),
        store: backend.location,
        collection: backend.collection,
        disk,
    }))
}

/// Prometheus metrics (text exposition format): requests and latency per route, ingest and
/// recall counters.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text", body = String, content_type = "text/plain")))]
async fn metrics(State(state): State<SharedState>) -> String {
    let mut out = state.metrics.render();
    if let Ok(d) = state.engine.disk_space() {
        out.push_str(&format!(
            "# HELP cairn_data_dir_available_bytes Bytes still available to writes on the data directory's filesystem.\n\
             # TYPE cairn_data_dir_available_bytes gauge\n\
             cairn_data_dir_available_bytes {}\n\
             # HELP cairn_data_dir_total_bytes Size of the data directory's filesystem.\n\
             # TYPE cairn_data_dir_total_bytes gauge\n\
             cairn_data_dir_total_bytes {}\n\
             # HELP cairn_data_dir_needed_bytes Bytes writes need available (the embedded store's unallocated memory-mapped holes plus the reserve); below it they answer 507.\n\
             # TYPE cairn_data_dir_needed_bytes gauge\n\
             cairn_data_dir_needed_bytes {}\n",
            d.available_bytes, d.total_bytes, d.needed_bytes
        ));
    }
    out
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
