//! Documents: what a door sends to store one (JSON text or an uploaded file), what it gets
//! back, and the operations on documents, their chunks and a partition's counts.

use std::sync::Arc;

use cairn_ingest::catalog;
use cairn_ingest::{
    DocSource, DocStatus, DocumentInput, DocumentReport, MediaType, Outcome, Progress,
};
use cairn_models::grant::Operation;
use cairn_models::scope::validate_component;
use cairn_models::{DocumentInfo, Partition, PointKind, Scope};
use cairn_store::Filter;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::{admit_write, Page, PageRequest};
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::forget;

/// `POST /v1/documents` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentBody {
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

/// `GET /v1/documents`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentList {
    pub documents: Vec<DocumentInfo>,
    pub total: usize,
}

/// A chunk of a document's current version.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChunkView {
    /// `doc:<id>#<n>`.
    #[serde(rename = "ref")]
    pub reference: String,
    pub chunk_index: u32,
    /// 1-based PDF page of the chunk's first character.
    pub page: Option<u32>,
    /// Character span `[start, end)` in the extracted text.
    #[schema(value_type = Option<Vec<u64>>)]
    pub span: Option<(u64, u64)>,
    /// Markdown heading path ("Guide > Install").
    pub heading: Option<String>,
    pub text: String,
}

/// `GET /v1/documents/{id}/chunks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChunkList {
    pub doc_id: String,
    pub chunks: Vec<ChunkView>,
    pub total: usize,
}

/// Counts of what a partition holds.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Counts {
    pub documents: usize,
    pub chunks: usize,
    pub messages: usize,
    pub turns: usize,
    /// Entities (not those merged into another).
    pub entities: usize,
    pub preferences: usize,
    /// Current facts (not superseded or invalidated; expired ones included).
    pub facts: usize,
    pub relationships: usize,
    pub traces: usize,
}

/// An uploaded file: the door has read the bytes; the service decides what they are.
#[derive(Debug, Clone)]
pub struct FileUpload {
    pub scope: Scope,
    /// The file's name as uploaded (the default source key, and a media-type hint).
    pub filename: String,
    /// The media type the client declared, if any.
    pub content_type: Option<String>,
    /// Default: the file name.
    pub source: Option<String>,
    pub bytes: Vec<u8>,
}

impl DocumentBody {
    /// The write path's input: text or Markdown only; a PDF cannot arrive as JSON text.
    pub(crate) fn into_input(self) -> Result<(Scope, DocumentInput), ServiceError> {
        let media_type = MediaType::parse(&self.media_type)
            .filter(|m| *m != MediaType::Pdf)
            .ok_or_else(|| {
                ServiceError::UnsupportedMediaType(format!(
                    "media_type {:?} cannot be sent as JSON text (use text/plain or text/markdown; upload PDFs with multipart)",
                    self.media_type
                ))
            })?;
        let input = DocumentInput {
            source: self.source,
            content: DocSource::Bytes {
                bytes: self.text.into_bytes(),
                media_type,
            },
            metadata: self.metadata,
        };
        // The library's caps (source, metadata), checked before any work starts.
        input.validate()?;
        Ok((self.scope, input))
    }
}

impl FileUpload {
    /// The write path's input; the media type comes from the declared content type, else
    /// the file name.
    pub(crate) fn into_input(self) -> Result<(Scope, DocumentInput), ServiceError> {
        let media_type = self
            .content_type
            .as_deref()
            .and_then(MediaType::parse)
            .or_else(|| MediaType::from_path(&self.filename))
            .ok_or_else(|| {
                ServiceError::UnsupportedMediaType(format!(
                    "cannot index {:?} ({})",
                    self.filename,
                    self.content_type.as_deref().unwrap_or("no content type")
                ))
            })?;
        let input = DocumentInput {
            source: self.source.unwrap_or(self.filename),
            content: DocSource::Bytes {
                bytes: self.bytes,
                media_type,
            },
            metadata: None,
        };
        input.validate()?;
        Ok((self.scope, input))
    }
}

impl Engine {
    /// Stores a text or Markdown document sent as JSON.
    pub async fn ingest_text(
        self: &Arc<Self>,
        who: &Principal,
        body: DocumentBody,
    ) -> Result<DocumentReport, ServiceError> {
        let mut body = body;
        admit_write(who, &mut body.scope, Operation::WriteDocuments)?;
        let (scope, input) = body.into_input()?;
        self.ingest_one(&scope, input).await
    }

    /// Stores an uploaded file (text, Markdown, PDF).
    pub async fn ingest_file(
        self: &Arc<Self>,
        who: &Principal,
        upload: FileUpload,
    ) -> Result<DocumentReport, ServiceError> {
        let mut upload = upload;
        admit_write(who, &mut upload.scope, Operation::WriteDocuments)?;
        let (scope, input) = upload.into_input()?;
        self.ingest_one(&scope, input).await
    }

    async fn ingest_one(
        self: &Arc<Self>,
        scope: &Scope,
        input: DocumentInput,
    ) -> Result<DocumentReport, ServiceError> {
        let noop: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(|_| {});
        let outcome = self
            .ingestor
            .ingest_documents(scope, vec![input], noop)
            .await
            .pop()
            .ok_or_else(|| ServiceError::Internal("ingest returned no outcome".into()))?;
        let report = outcome.result?;
        if report.status != DocStatus::Unchanged {
            self.note_written(u64::from(report.chunks));
        }
        Ok(report)
    }

    /// Stores a batch of documents (files, a corpus), reporting progress; one outcome per
    /// input, a failed file costing only itself. After the batch the vector index is built
    /// in place when the batch wrote at least `OPTIMIZE_AFTER_CHUNKS` chunks (the same
    /// threshold as the server's background build); the outcome says how long it took.
    pub async fn ingest_batch(
        self: &Arc<Self>,
        who: &Principal,
        scope: &Scope,
        inputs: Vec<DocumentInput>,
        progress: Arc<dyn Fn(Progress) + Send + Sync>,
    ) -> Result<BatchOutcome, ServiceError> {
        let mut scope = scope.clone();
        admit_write(who, &mut scope, Operation::WriteDocuments)?;
        let scope = &scope;
        let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counting: Arc<dyn Fn(Progress) + Send + Sync> = {
            let written = Arc::clone(&written);
            Arc::new(move |p| {
                if let Progress::Written { chunks } = &p {
                    written.fetch_add(*chunks as u64, std::sync::atomic::Ordering::Relaxed);
                }
                progress(p)
            })
        };
        let outcomes = self
            .ingestor
            .ingest_documents(scope, inputs, counting)
            .await;
        let chunks = written.load(std::sync::atomic::Ordering::Relaxed);
        let index_built = self.optimize_after_bulk(chunks).await?;
        Ok(BatchOutcome {
            outcomes,
            chunks,
            index_built,
        })
    }

    /// The partition's documents (current versions), sorted by source; one page of them.
    pub async fn list_documents(
        &self,
        who: &Principal,
        partition: &Partition,
        page: PageRequest,
    ) -> Result<Page<DocumentInfo>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        Ok(page.of(catalog::list_documents(self.store.as_ref(), partition).await?))
    }

    /// One document.
    pub async fn get_document(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<DocumentInfo, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        catalog::get_document(self.store.as_ref(), partition, id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no document {id} in this scope")))
    }

    /// The chunks of a document's current version, in order; one page of them.
    pub async fn document_chunks(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
        page: PageRequest,
    ) -> Result<Page<ChunkView>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let not_found = || ServiceError::NotFound(format!("no document {id} in this scope"));
        validate_component("doc_id", id).map_err(|_| not_found())?;
        catalog::get_document(self.store.as_ref(), partition, id)
            .await?
            .ok_or_else(not_found)?;
        let filter = Filter::new()
            .eq("kind", PointKind::Chunk.as_str())
            .eq("doc_id", id);
        let mut chunks: Vec<ChunkView> = self
            .store
            .scroll_all(partition, filter)
            .await?
            .into_iter()
            .map(|h| ChunkView {
                reference: h.point.reference(),
                chunk_index: h.point.chunk_index.unwrap_or(0),
                page: h.point.page,
                span: h.point.span,
                heading: h.point.heading,
                text: h.point.text.unwrap_or_default(),
            })
            .collect();
        chunks.sort_by_key(|c| c.chunk_index);
        Ok(page.of(chunks))
    }

    /// Deletes a document (every source at this id, all its chunks) and what derives from it.
    pub async fn delete_document(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
        hard: bool,
    ) -> Result<DocumentInfo, ServiceError> {
        authorize(who, partition, Operation::Forget)?;
        let not_found = || ServiceError::NotFound(format!("no document {id} in this scope"));
        validate_component("doc_id", id).map_err(|_| not_found())?;
        let (mut deleted, _) = forget::forget_document(self, partition, id, hard).await?;
        deleted.pop().ok_or_else(not_found)
    }

    /// Counts per kind in the partition.
    pub async fn counts(
        &self,
        who: &Principal,
        partition: &Partition,
    ) -> Result<Counts, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let s = catalog::stats(self.store.as_ref(), partition).await?;
        // Knowledge: what is known now (merged entities and fact history left out).
        let active = |kind: PointKind| {
            let filter = Filter::new()
                .eq("kind", kind.as_str())
                .not_eq("keys", cairn_models::knowledge::key::INACTIVE);
            async move { self.store.count(partition, filter).await }
        };
        Ok(Counts {
            documents: s.documents,
            chunks: s.chunks,
            messages: s.messages,
            turns: s.turns,
            entities: active(PointKind::Entity).await?,
            preferences: active(PointKind::Preference).await?,
            facts: active(PointKind::Fact).await?,
            relationships: active(PointKind::Relationship).await?,
            traces: active(PointKind::Trace).await?,
        })
    }

    /// Points stored in every scope (a health figure for the operator).
    pub async fn count_all(&self) -> Result<usize, ServiceError> {
        Ok(self.store.count_all().await?)
    }
}

/// What [`Engine::ingest_batch`] did.
#[derive(Debug)]
pub struct BatchOutcome {
    /// One per input, in input order.
    pub outcomes: Vec<Outcome>,
    /// Chunks written.
    pub chunks: u64,
    /// The vector index build after the batch, when there was one.
    pub index_built: Option<crate::engine::IndexBuild>,
}
