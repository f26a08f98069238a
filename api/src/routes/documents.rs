//! Documents: ingest (JSON text or multipart upload), list, get, delete.

use std::sync::Arc;

use axum::extract::{Multipart, Path, State};
use axum::http::HeaderMap;
use cairn_ingest::catalog;
use cairn_ingest::{DocSource, DocumentInput, DocumentReport, MediaType, Progress};
use cairn_models::{DocumentInfo, Scope};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, query_error, CommonErrors, DeleteQuery, QueryResult, ScopeQuery};
use crate::error::{ApiError, ErrorBody};
use crate::forget;
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(post_document, list_documents))
        .routes(routes!(upload_document))
        .routes(routes!(get_document, delete_document))
}

/// `POST /v1/documents` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentBody {
    #[schema(value_type = crate::schema::Scope)]
    pub scope: Scope,
    /// The document's stable key (1 to 1024 bytes): the same source with new text is a new
    /// version.
    pub source: String,
    pub text: String,
    /// `text/plain` (default) or `text/markdown`; upload PDFs with multipart.
    #[serde(default = "default_media")]
    pub media_type: String,
    /// Copied onto every chunk: at most 16 KiB serialized.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

fn default_media() -> String {
    "text/plain".into()
}

/// The multipart form of `POST /v1/documents/upload`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct UploadForm {
    pub tenant: String,
    pub user: String,
    pub namespace: Option<String>,
    pub agent: Option<String>,
    pub session: Option<String>,
    /// Default: the file name. At most 1024 bytes.
    pub source: Option<String>,
    /// The file (txt, md, pdf); its type comes from the part's content type or file name.
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
}

/// `GET /v1/documents`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentList {
    #[schema(value_type = Vec<crate::schema::DocumentInfo>)]
    pub documents: Vec<DocumentInfo>,
    pub total: usize,
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
    if report.status != cairn_ingest::DocStatus::Unchanged {
        engine.note_written(u64::from(report.chunks));
    }
    Ok(report)
}

/// Ingest a text or Markdown document. Unchanged content is detected before embedding;
/// changed content under the same source becomes a new version.
#[utoipa::path(post, path = "/documents", tag = "documents", request_body = DocumentBody,
    responses(
        (status = 200, description = "Stored", body = crate::schema::DocumentReport),
        (status = 422, description = "`empty_document`: no text to index", body = ErrorBody),
        CommonErrors,
    ))]
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
    let input = DocumentInput {
        source: body.source,
        content: DocSource::Bytes {
            bytes: body.text.into_bytes(),
            media_type,
        },
        metadata: body.metadata,
    };
    // The library's caps (source, metadata), checked here too so the answer comes before
    // any work is started.
    input.validate()?;
    let scope = body.scope;
    detached(async move { Ok(Json(ingest_one(&state, &scope, input).await?)) }).await
}

/// Upload a file (txt, md, pdf) as multipart: text fields `tenant`, `user`, `namespace`,
/// `agent`, `session`, optional `source`, and one `file` part.
#[utoipa::path(post, path = "/documents/upload", tag = "documents",
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "Stored", body = crate::schema::DocumentReport),
        (status = 422, description = "`extraction_failed` (malformed PDF) or `empty_document`", body = ErrorBody),
        CommonErrors,
    ))]
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
    // Source caps as on the JSON route (1 to 1024 bytes).
    input.validate()?;
    detached(async move { Ok(Json(ingest_one(&state, &scope, input).await?)) }).await
}

/// The scope's documents (current versions), sorted by source.
#[utoipa::path(get, path = "/documents", tag = "documents", params(ScopeQuery),
    responses((status = 200, description = "One page of documents", body = DocumentList), CommonErrors))]
async fn list_documents(
    State(state): State<SharedState>,
    headers: HeaderMap,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<DocumentList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    let all = catalog::list_documents(state.engine.store.as_ref(), &partition).await?;
    let total = all.len();
    Ok(Json(DocumentList {
        documents: q.page(all),
        total,
    }))
}

/// One document.
#[utoipa::path(get, path = "/documents/{id}", tag = "documents",
    params(("id" = String, Path, description = "Document id"), ScopeQuery),
    responses(
        (status = 200, description = "The document", body = crate::schema::DocumentInfo),
        (status = 404, description = "`not_found`: no such document in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_document(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<DocumentInfo>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    catalog::get_document(state.engine.store.as_ref(), &partition, &id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no document {id} in this scope")))
}

/// Delete a document: every source currently at this id, all its chunks, and the candidates
/// whose evidence was only this document (as `POST /v1/forget` with `doc:<id>`).
#[utoipa::path(delete, path = "/documents/{id}", tag = "documents",
    params(("id" = String, Path, description = "Document id"), DeleteQuery),
    responses(
        (status = 200, description = "The deleted document", body = crate::schema::DocumentInfo),
        (status = 404, description = "`not_found`: no such document in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn delete_document(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: QueryResult<DeleteQuery>,
) -> Result<Json<DocumentInfo>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition(&state, &headers)?;
    cairn_models::scope::validate_component("doc_id", &id)
        .map_err(|_| ApiError::NotFound(format!("no document {id} in this scope")))?;
    detached(async move {
        let (mut deleted, _) =
            forget::forget_document(&state.engine, &partition, &id, q.hard).await?;
        state.metrics.add("forgets", 1);
        deleted
            .pop()
            .map(Json)
            .ok_or_else(|| ApiError::NotFound(format!("no document {id} in this scope")))
    })
    .await
}
