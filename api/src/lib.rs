//! Cairn's HTTP door (axum): routers, extractors, the error-to-status mapping and the
//! OpenAPI document.
//!
//! Only this crate knows HTTP; every rule lives in the service crate (`cairn-service`), whose
//! operations each handler calls with the request's principal. [`app`] composes the router
//! from small routers; every handler's error is an [`ApiError`], mapped to a status in one
//! exhaustive match over the stable codes ([`error::status_of`]); request bodies go through
//! [`json::Json`], whose rejections use the same error shape.

pub mod auth;
pub mod error;
pub mod json;
pub mod mcp;
pub mod metrics;
mod routes;
mod signature;
pub mod tck;
pub mod ui;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use cairn_service::ServiceError;

pub use cairn_service::{Auth, Engine};
pub use error::ApiError;
pub use metrics::Metrics;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Longest a request may take.
    pub request_timeout: Duration,
    /// Longest a connection may take to send a request's headers, and longest a keep-alive
    /// connection may sit idle between requests ([`serve`] closes it then). Without it one
    /// header byte every few seconds holds a connection forever.
    pub header_read_timeout: Duration,
    /// Most connections served at once; more wait in the listen backlog until one closes.
    /// [`serve`] lowers it to fit the process's open-file limit, so connections cannot take
    /// the descriptors the store and the listener need.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_body_bytes: 16 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Open files kept back from connections: the store's segment files, the journal, the
/// model, the listener, extraction workers' pipes.
const RESERVED_FILES: u64 = 256;

/// [`ServerConfig::max_connections`] within the open-file limit (at least 16).
pub fn connection_cap(configured: usize) -> usize {
    let soft = rlimit::Resource::NOFILE
        .get()
        .map(|(soft, _)| soft)
        .unwrap_or(1024);
    let fit = usize::try_from(soft.saturating_sub(RESERVED_FILES)).unwrap_or(usize::MAX);
    configured.min(fit).max(16)
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

/// Serves [`app`] on `listener` until `shutdown` resolves (then drains in-flight requests).
/// The one entry point a binary needs, so doors such as the CLI do not depend on axum.
///
/// HTTP/1.1 on hyper directly (what `axum::serve` does, plus what it leaves out): a
/// connection that has not sent a request's headers within
/// [`ServerConfig::header_read_timeout`], or sits idle that long between requests, is
/// closed; at most [`connection_cap`] connections are open at once, so slow or idle clients
/// can hold neither every descriptor nor the service (new connections wait in the backlog
/// for a free slot, and slots free up within the header timeout).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: SharedState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};

    // Open MCP sessions hold event streams that never end by themselves: end them when
    // shutdown begins, so draining can finish.
    let mcp_shutdown = tokio_util::sync::CancellationToken::new();
    let router = compose(Arc::clone(&state), mcp_shutdown.clone());
    let cap = connection_cap(state.config.max_connections);
    if cap < state.config.max_connections {
        tracing::warn!(
            configured = state.config.max_connections,
            cap,
            "connection cap lowered to fit the open-file limit"
        );
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(state.config.header_read_timeout)
        .keep_alive(true);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Per-connection errors (reset before accept) are the client's; anything
                    // else (EMFILE) clears up as connections close: back off, do not spin.
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted
                            | std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::ConnectionRefused
                    ) {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A client that goes away mid-request, or a header timeout: nothing to report.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    mcp_shutdown.cancel();
    graceful.shutdown().await;
    Ok(())
}

/// The whole HTTP application: the REST routes and the MCP endpoint (`/mcp`, Streamable
/// HTTP; see [`mcp`]).
pub fn app(state: SharedState) -> Router {
    compose(state, tokio_util::sync::CancellationToken::new())
}

fn compose(state: SharedState, mcp_shutdown: tokio_util::sync::CancellationToken) -> Router {
    let limit = state.config.max_body_bytes;
    let (router, _) = routes::api().split_for_parts();
    // `/mcp` and `/ui` are not REST routes: they stay out of the OpenAPI document.
    router
        .merge(mcp::router(&state, mcp_shutdown))
        .merge(ui::router())
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|req: Request| async move {
            ApiError::MethodNotAllowed(format!(
                "{} is not allowed on {}",
                req.method(),
                req.uri().path()
            ))
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            signature::verify,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            observe,
        ))
        .with_state(state)
}

/// Refuses non-loopback hosts and origins in key-less mode ([`Auth::check_origin`]), before
/// any handler reads the body.
async fn guard(State(state): State<SharedState>, req: Request, next: Next) -> Response {
    if let Err(e) = auth::check_origin(&state.auth, req.headers(), req.uri()) {
        return e.into_response();
    }
    next.run(req).await
}

/// Gives an error response that is not in Cairn's shape (a rejection of one of axum's own
/// extractors: a bad path parameter, a multipart body without a boundary) the documented
/// `{"error": {...}}` body, so every error a client sees has a stable code.
async fn error_shape(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let text = match axum::body::to_bytes(response.into_body(), 4096).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let text = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let error = match status {
        axum::http::StatusCode::NOT_FOUND => ServiceError::NotFound(text).into(),
        axum::http::StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed(text),
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => ServiceError::PayloadTooLarge(text).into(),
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ServiceError::UnsupportedMediaType(text).into()
        }
        axum::http::StatusCode::SERVICE_UNAVAILABLE => ServiceError::Unavailable(text).into(),
        axum::http::StatusCode::GATEWAY_TIMEOUT => ApiError::Timeout,
        s if s.is_client_error() => ServiceError::InvalidRequest(text).into(),
        _ => ServiceError::Internal(text).into(),
    };
    error.into_response()
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
    // The timeout stops the waiting, not the work: write handlers run their service call
    // in a spawned task (`routes::detached`), which finishes after this gives up.
    let mut response = match tokio::time::timeout(state.config.request_timeout, next.run(req)).await
    {
        Ok(r) => error_shape(r).await,
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
