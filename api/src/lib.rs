//! Cairn's HTTP API (axum) and the pieces the `cairn` CLI shares with it.
//!
//! Only this crate knows HTTP. [`app`] composes the router from small routers; every
//! handler's error is an [`ApiError`], mapped to a status in one exhaustive match
//! ([`ApiError::parts`]); request bodies go through [`json::Json`], whose rejections use the
//! same error shape.

pub mod auth;
pub mod candidates;
pub mod engine;
pub mod error;
pub mod evidence;
pub mod forget;
pub mod json;
pub mod metrics;
pub mod refs;
mod routes;
pub mod schema;
pub mod turns;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

pub use auth::Auth;
pub use engine::Engine;
pub use error::ApiError;
pub use metrics::Metrics;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Longest a request may take.
    pub request_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_body_bytes: 16 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
        }
    }
}

/// Shared state of every handler.
#[derive(Debug)]
pub struct AppState {
    pub engine: Arc<Engine>,
    pub auth: Auth,
    pub metrics: Metrics,
    pub config: ServerConfig,
}

pub type SharedState = Arc<AppState>;

/// The OpenAPI document of every route, generated from the handlers' annotations (the same
/// list the router is built from).
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes::api().into_openapi()
}

/// [`openapi`] as pretty JSON with a final newline: what `GET /v1/openapi.json` serves and
/// what `api/openapi.json` holds.
pub fn openapi_json() -> String {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut s = openapi()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    })
    .clone()
}

/// The whole HTTP application.
pub fn app(state: SharedState) -> Router {
    let limit = state.config.max_body_bytes;
    let (router, _) = routes::api().split_for_parts();
    router
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            observe,
        ))
        .with_state(state)
}

/// Request id, timeout, structured log line and metrics for every request.
async fn observe(State(state): State<SharedState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let span = tracing::info_span!("request", id = %request_id, %method, %route);
    let _enter = span.enter();
    drop(_enter);
    let mut response = match tokio::time::timeout(state.config.request_timeout, next.run(req)).await
    {
        Ok(r) => r,
        Err(_) => ApiError::Timeout.into_response(),
    };
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    state.metrics.observe(&method, &route, status, elapsed);
    tracing::info!(parent: &span, status, elapsed_ms = elapsed.as_secs_f64() * 1e3, "request");
    if let Ok(v) = request_id.parse() {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}
