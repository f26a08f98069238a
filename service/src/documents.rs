//! Documents: what a door sends to store one (JSON text or an uploaded file) and what it
//! gets back. The operations are [`Engine`](crate::Engine) methods (`ops`).

use cairn_ingest::{DocSource, DocumentInput, MediaType};
use cairn_models::{DocumentInfo, Scope};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ServiceError;

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
