//! Documents: ingest (JSON text or multipart upload), list, get, delete.

use axum::extract::{Multipart, Path, State};
use cairn_ingest::DocumentReport;
use cairn_models::{DocumentInfo, Scope};
use cairn_service::documents::{ChunkList, Counts, DocumentBody, DocumentList, FileUpload};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, query_error, CommonErrors, DeleteQuery, QueryResult, ScopeQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(post_document, list_documents))
        .routes(routes!(upload_document))
        .routes(routes!(get_document, delete_document))
        .routes(routes!(document_chunks))
        .routes(routes!(stats))
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

/// Ingest a text or Markdown document. Unchanged content is detected before embedding;
/// changed content under the same source becomes a new version.
#[utoipa::path(post, path = "/documents", tag = "documents", request_body = DocumentBody,
    responses(
        (status = 200, description = "Stored", body = cairn_ingest::DocumentReport),
        (status = 422, description = "`empty_document`: no text to index", body = ErrorBody),
        CommonErrors,
    ))]
async fn post_document(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<DocumentBody>,
) -> Result<Json<DocumentReport>, ApiError> {
    let who = caller.principal().clone();
    detached(async move {
        let report = state.engine.ingest_text(&who, body).await?;
        count_ingest(&state, &report);
        Ok(Json(report))
    })
    .await
}

fn count_ingest(state: &SharedState, report: &DocumentReport) {
    state.metrics.add("documents_ingested", 1);
    state
        .metrics
        .add("chunks_ingested", u64::from(report.chunks));
}

/// Upload a file (txt, md, pdf) as multipart: text fields `tenant`, `user`, `namespace`,
/// `agent`, `session`, optional `source`, and one `file` part.
#[utoipa::path(post, path = "/documents/upload", tag = "documents",
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "Stored", body = cairn_ingest::DocumentReport),
        (status = 422, description = "`extraction_failed` (malformed PDF) or `empty_document`", body = ErrorBody),
        CommonErrors,
    ))]
async fn upload_document(
    State(state): State<SharedState>,
    caller: Caller,
    mut multipart: Multipart,
) -> Result<Json<DocumentReport>, ApiError> {
    // The form is read as strictly as the JSON routes read a body: `tenant` and `user` are
    // required (no silent `default` tenant), and a field given twice (two `file` parts, two
    // `tenant`s) is refused, as JSON refuses a duplicate key, instead of the last one winning.
    let mut fields: std::collections::BTreeMap<String, String> = Default::default();
    let mut file: Option<(String, Option<String>, Vec<u8>)> = None;
    let bad = |e: axum::extract::multipart::MultipartError| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            cairn_service::ServiceError::PayloadTooLarge(
                "upload is larger than the server's limit".into(),
            )
            .into()
        } else {
            ApiError::invalid(format!("multipart body: {}", e.body_text()))
        }
    };
    let twice = |name: &str| ApiError::invalid(format!("multipart field `{name}` is given twice"));
    while let Some(field) = multipart.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or_default().to_string();
        match name.as_str() {
            "file" => {
                if file.is_some() {
                    return Err(ApiError::invalid(
                        "multipart body has more than one `file` part: upload one file per request",
                    ));
                }
                let filename = field.file_name().unwrap_or("upload").to_string();
                let content_type = field.content_type().map(str::to_string);
                let bytes = field.bytes().await.map_err(bad)?;
                file = Some((filename, content_type, bytes.to_vec()));
            }
            "tenant" | "user" | "namespace" | "agent" | "session" | "source" => {
                if fields.contains_key(&name) {
                    return Err(twice(&name));
                }
                let value = field.text().await.map_err(bad)?;
                fields.insert(name, value);
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unexpected multipart field {other:?}"
                )));
            }
        }
    }
    let mut take = |name: &str| fields.remove(name);
    let required = |v: Option<String>, name: &str| {
        v.ok_or_else(|| ApiError::invalid(format!("multipart body has no `{name}` field")))
    };
    let mut scope = Scope {
        tenant: required(take("tenant"), "tenant")?,
        user: required(take("user"), "user")?,
        ..Scope::default()
    };
    for (name, slot) in [
        ("namespace", &mut scope.namespace),
        ("agent", &mut scope.agent),
        ("session", &mut scope.session),
    ] {
        if let Some(v) = take(name) {
            *slot = v;
        }
    }
    let source = take("source");
    let (filename, content_type, bytes) =
        file.ok_or_else(|| ApiError::invalid("multipart body has no `file` part"))?;
    let upload = FileUpload {
        scope,
        filename,
        content_type,
        source,
        bytes,
    };
    let who = caller.principal().clone();
    detached(async move {
        let report = state.engine.ingest_file(&who, upload).await?;
        count_ingest(&state, &report);
        Ok(Json(report))
    })
    .await
}

/// The scope's documents (current versions), sorted by source.
#[utoipa::path(get, path = "/documents", tag = "documents", params(ScopeQuery),
    responses((status = 200, description = "One page of documents", body = DocumentList), CommonErrors))]
async fn list_documents(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<DocumentList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let page = state
        .engine
        .list_documents(&caller.principal().clone(), &partition, q.page())
        .await?;
    Ok(Json(DocumentList {
        documents: page.items,
        total: page.total,
    }))
}

/// One document.
#[utoipa::path(get, path = "/documents/{id}", tag = "documents",
    params(("id" = String, Path, description = "Document id"), ScopeQuery),
    responses(
        (status = 200, description = "The document", body = cairn_models::DocumentInfo),
        (status = 404, description = "`not_found`: no such document in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_document(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<DocumentInfo>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(
        state.engine.get_document(&who, &partition, &id).await?,
    ))
}

/// The chunks of a document's current version, in order, with page, span and heading.
#[utoipa::path(get, path = "/documents/{id}/chunks", tag = "documents",
    params(("id" = String, Path, description = "Document id"), ScopeQuery),
    responses(
        (status = 200, description = "One page of chunks", body = ChunkList),
        (status = 404, description = "`not_found`: no such document in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn document_chunks(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<ChunkList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .document_chunks(&who, &partition, &id, q.page())
        .await?;
    Ok(Json(ChunkList {
        doc_id: id,
        chunks: page.items,
        total: page.total,
    }))
}

/// What the scope holds: documents, chunks, messages and turns.
#[utoipa::path(get, path = "/stats", tag = "documents", params(ScopeQuery),
    responses((status = 200, description = "Counts per kind", body = Counts), CommonErrors))]
async fn stats(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<Counts>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(state.engine.counts(&who, &partition).await?))
}

/// Delete a document: every source currently at this id, all its chunks, and the candidates
/// whose evidence was only this document (as `POST /v1/forget` with `doc:<id>`).
#[utoipa::path(delete, path = "/documents/{id}", tag = "documents",
    params(("id" = String, Path, description = "Document id"), DeleteQuery),
    responses(
        (status = 200, description = "The deleted document", body = cairn_models::DocumentInfo),
        (status = 404, description = "`not_found`: no such document in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn delete_document(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<DeleteQuery>,
) -> Result<Json<DocumentInfo>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    detached(async move {
        let deleted = state
            .engine
            .delete_document(&who, &partition, &id, q.hard)
            .await?;
        state.metrics.add("forgets", 1);
        Ok(Json(deleted))
    })
    .await
}
