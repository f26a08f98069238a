//! The routers. Each handler: authorize the scope, call the engine, return JSON.

use std::sync::Arc;

use axum::extract::{Multipart, Path, Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Router;
use cairn_ingest::catalog;
use cairn_ingest::{
    DocSource, DocumentInput, DocumentReport, MediaType, MessageInput, MessageReceipt, Progress,
};
use cairn_models::{
    DocumentInfo, MemoryPack, Partition, PointKind, Scope, StoredPoint, TurnEnvelope,
};
use cairn_recall::{RecallFilters, RecallRequest};
use cairn_store::Filter;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::json::Json;
use crate::turns::{self, CompleteRequest, PrepareRequest, TurnReceipt};
use crate::SharedState;

/// Scope of a GET/DELETE request, from the query string.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeQuery {
    pub tenant: String,
    pub user: String,
    #[serde(default = "default_ns")]
    pub namespace: String,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

fn default_ns() -> String {
    "default".into()
}

impl ScopeQuery {
    fn partition(&self, state: &SharedState, headers: &HeaderMap) -> Result<Partition, ApiError> {
        let scope = Scope {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            namespace: self.namespace.clone(),
            ..Scope::default()
        };
        scope.validate()?;
        state.auth.check_scope(headers, &scope)?;
        Ok(scope.partition())
    }

    fn page<T>(&self, items: Vec<T>) -> Vec<T> {
        let offset = self.offset.unwrap_or(0);
        let limit = self.limit.unwrap_or(100).min(1000);
        items.into_iter().skip(offset).take(limit).collect()
    }
}

fn query_error(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::InvalidRequest(format!("query string: {}", e.body_text()))
}

// ---------- health ----------

pub fn health() -> Router<SharedState> {
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

async fn readyz(State(state): State<SharedState>) -> Result<Json<serde_json::Value>, ApiError> {
    let points = state.engine.store.count_all().await?;
    Ok(Json(serde_json::json!({
        "status": "ready",
        "model": state.engine.embedder.model_id(),
        "points": points,
    })))
}

async fn metrics(State(state): State<SharedState>) -> String {
    state.metrics.render()
}

// ---------- recall ----------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallBody {
    pub scope: Scope,
    pub query: String,
    #[serde(default)]
    pub token_budget: Option<usize>,
    #[serde(default)]
    pub filters: RecallFilters,
}

pub fn recall() -> Router<SharedState> {
    Router::new().route("/recall", post(recall_handler))
}

async fn recall_handler(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<RecallBody>,
) -> Result<Json<MemoryPack>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    let pack = state
        .engine
        .recaller
        .recall(&RecallRequest {
            scope: body.scope,
            query: body.query,
            budget: body.token_budget,
            filters: body.filters,
        })
        .await?;
    state.metrics.add("recalls", 1);
    Ok(Json(pack))
}

// ---------- turns ----------

pub fn turns() -> Router<SharedState> {
    Router::new()
        .route("/turns/prepare", post(prepare_handler))
        .route("/turns/{turn_id}/complete", post(complete_handler))
}

async fn prepare_handler(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<PrepareRequest>,
) -> Result<Json<TurnEnvelope>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    let envelope = turns::prepare(&state.engine, body).await?;
    state.metrics.add("recalls", 1);
    Ok(Json(envelope))
}

async fn complete_handler(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(turn_id): Path<String>,
    Json(body): Json<CompleteRequest>,
) -> Result<Json<TurnReceipt>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    let receipt = turns::complete(&state.engine, &turn_id, body).await?;
    state.metrics.add("turns_completed", 1);
    Ok(Json(receipt))
}

// ---------- documents ----------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentBody {
    pub scope: Scope,
    pub source: String,
    pub text: String,
    #[serde(default = "default_media")]
    pub media_type: String,
    #[serde(default)]
    pub metadata: Option<serde_json::Value>,
}

fn default_media() -> String {
    "text/plain".into()
}

#[derive(Debug, Serialize)]
pub struct DocumentList {
    pub documents: Vec<DocumentInfo>,
    pub total: usize,
}

pub fn documents() -> Router<SharedState> {
    Router::new()
        .route("/documents", post(post_document).get(list_documents))
        .route("/documents/upload", post(upload_document))
        .route("/documents/{id}", get(get_document).delete(delete_document))
}

async fn ingest_one(
    state: &SharedState,
    scope: &Scope,
    input: DocumentInput,
) -> Result<DocumentReport, ApiError> {
    let engine = &state.engine;
    let noop: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(|_| {});
    let mut outcomes = engine
        .ingestor
        .ingest_documents(scope, vec![input], noop)
        .await;
    let outcome = outcomes
        .pop()
        .ok_or_else(|| ApiError::Internal("ingest returned no outcome".into()))?;
    let report = outcome.result?;
    state.metrics.add("documents_ingested", 1);
    state
        .metrics
        .add("chunks_ingested", u64::from(report.chunks));
    Ok(report)
}

async fn post_document(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<DocumentBody>,
) -> Result<Json<DocumentReport>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    let media_type = MediaType::parse(&body.media_type)
        .filter(|m| *m != MediaType::Pdf)
        .ok_or_else(|| {
            ApiError::UnsupportedMediaType(format!(
                "media_type {:?} cannot be sent as JSON text (use text/plain or text/markdown; upload PDFs with multipart)",
                body.media_type
            ))
        })?;
    if body.source.trim().is_empty() || body.source.len() > 1024 {
        return Err(ApiError::InvalidRequest(
            "source must be 1 to 1024 bytes".into(),
        ));
    }
    let input = DocumentInput {
        source: body.source,
        content: DocSource::Bytes {
            bytes: body.text.into_bytes(),
            media_type,
        },
        metadata: body.metadata,
    };
    Ok(Json(ingest_one(&state, &body.scope, input).await?))
}

/// Multipart upload: text fields `tenant`, `user`, `namespace`, `agent`, `session`,
/// optional `source`, and one `file` part (media type from its content type or file name).
async fn upload_document(
    State(state): State<SharedState>,
    headers: HeaderMap,
    mut multipart: Multipart,
) -> Result<Json<DocumentReport>, ApiError> {
    let mut scope = Scope::default();
    let mut source: Option<String> = None;
    let mut file: Option<(String, Option<String>, Vec<u8>)> = None;
    let bad = |e: axum::extract::multipart::MultipartError| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge("upload is larger than the server's limit".into())
        } else {
            ApiError::InvalidRequest(format!("multipart body: {}", e.body_text()))
        }
    };
    while let Some(field) = multipart.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or_default().to_string();
        match name.as_str() {
            "file" => {
                let filename = field.file_name().unwrap_or("upload").to_string();
                let content_type = field.content_type().map(str::to_string);
                let bytes = field.bytes().await.map_err(bad)?;
                file = Some((filename, content_type, bytes.to_vec()));
            }
            "tenant" | "user" | "namespace" | "agent" | "session" | "source" => {
                let value = field.text().await.map_err(bad)?;
                match name.as_str() {
                    "tenant" => scope.tenant = value,
                    "user" => scope.user = value,
                    "namespace" => scope.namespace = value,
                    "agent" => scope.agent = value,
                    "session" => scope.session = value,
                    _ => source = Some(value),
                }
            }
            other => {
                return Err(ApiError::InvalidRequest(format!(
                    "unexpected multipart field {other:?}"
                )));
            }
        }
    }
    scope.validate()?;
    state.auth.check_scope(&headers, &scope)?;
    let (filename, content_type, bytes) =
        file.ok_or_else(|| ApiError::InvalidRequest("multipart body has no `file` part".into()))?;
    let media_type = content_type
        .as_deref()
        .and_then(MediaType::parse)
        .or_else(|| MediaType::from_path(&filename))
        .ok_or_else(|| {
            ApiError::UnsupportedMediaType(format!(
                "cannot index {filename:?} ({})",
                content_type.as_deref().unwrap_or("no content type")
            ))
        })?;
    let input = DocumentInput {
        source: source.unwrap_or(filename),
        content: DocSource::Bytes { bytes, media_type },
        metadata: None,
    };
    Ok(Json(ingest_one(&state, &scope, input).await?))
}

async fn list_documents(
    State(state): State<SharedState>,
    headers: HeaderMap,
    query: Result<Query<ScopeQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DocumentList>, ApiError> {
    let Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    let all = catalog::list_documents(state.engine.store.as_ref(), &partition).await?;
    let total = all.len();
    Ok(Json(DocumentList {
        documents: q.page(all),
        total,
    }))
}

async fn get_document(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<ScopeQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DocumentInfo>, ApiError> {
    let Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    catalog::get_document(state.engine.store.as_ref(), &partition, &id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no document {id} in this scope")))
}

async fn delete_document(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<ScopeQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DocumentInfo>, ApiError> {
    let Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    catalog::delete_document(state.engine.store.as_ref(), &partition, &id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no document {id} in this scope")))
}

// ---------- messages ----------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesBody {
    pub scope: Scope,
    pub messages: Vec<MessageInput>,
}

#[derive(Debug, Serialize)]
pub struct MessagesResponse {
    pub receipts: Vec<MessageReceipt>,
}

/// A stored message as listed.
#[derive(Debug, Serialize)]
pub struct MessageView {
    #[serde(rename = "ref")]
    pub reference: String,
    pub seq: u64,
    pub role: Option<cairn_models::Role>,
    pub content: String,
    pub turn_id: Option<String>,
    pub trust_origin: cairn_models::TrustOrigin,
    pub ts: i64,
    pub agent: String,
    pub session: String,
}

#[derive(Debug, Serialize)]
pub struct ConversationPage {
    pub conversation_id: String,
    pub messages: Vec<MessageView>,
    pub total: usize,
}

pub fn messages() -> Router<SharedState> {
    Router::new()
        .route("/messages", post(post_messages))
        .route("/conversations/{id}/messages", get(list_conversation))
}

async fn post_messages(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<MessagesBody>,
) -> Result<Json<MessagesResponse>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    if body.messages.is_empty() || body.messages.len() > 1000 {
        return Err(ApiError::InvalidRequest("send 1 to 1000 messages".into()));
    }
    let receipts = state
        .engine
        .ingestor
        .record_messages(&body.scope, body.messages)
        .await?;
    state.metrics.add(
        "messages_recorded",
        receipts.iter().filter(|r| r.created).count() as u64,
    );
    Ok(Json(MessagesResponse { receipts }))
}

async fn list_conversation(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<ScopeQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ConversationPage>, ApiError> {
    let Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    let filter = Filter::new()
        .eq("kind", PointKind::Message.as_str())
        .eq("conversation_id", id.as_str());
    let mut all: Vec<StoredPoint> = Vec::new();
    let mut offset = None;
    loop {
        let (page, next) = state
            .engine
            .store
            .scroll(&partition, filter.clone(), 512, offset)
            .await?;
        all.extend(page.into_iter().map(|h| h.point));
        match next {
            Some(n) => offset = Some(n),
            None => break,
        }
    }
    if all.is_empty() {
        return Err(ApiError::NotFound(format!(
            "no conversation {id} in this scope"
        )));
    }
    all.sort_by_key(|p| p.seq.unwrap_or(0));
    let total = all.len();
    let messages = q
        .page(all)
        .into_iter()
        .map(|p| MessageView {
            reference: p.reference(),
            seq: p.seq.unwrap_or(0),
            role: p.role,
            content: p.text.unwrap_or_default(),
            turn_id: p.turn_id,
            trust_origin: p.trust,
            ts: p.ts,
            agent: p.agent,
            session: p.session,
        })
        .collect();
    Ok(Json(ConversationPage {
        conversation_id: id,
        messages,
        total,
    }))
}
