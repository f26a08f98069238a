//! The streaming document ingest pipeline (messages: `record_messages`).
//!
//! Documents flow through three stages joined by bounded channels (backpressure: a slow
//! stage stops the ones before it instead of buffering the whole corpus in memory):
//!
//! 1. prepare — up to `extract_concurrency` documents at once on the blocking pool: read,
//!    extract, hash; unchanged documents stop here (a registry lookup, re-checked with the
//!    chunk count under the commit lock; no chunking or embedding); the rest are chunked.
//! 2. embed — the embedder's worker thread (batched by length, cached); consecutive small
//!    documents share a job, and the next job is queued while one runs.
//! 3. write — chunks upserted in batches, then the registry flip, then the old version's
//!    chunks deleted. Success is reported only after the store accepted all of it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cairn_embed::Embedder;
use cairn_models::ids::{chunk_point_id, document_id, document_record_id, sha256_hex};
use cairn_models::{Partition, PointKind, Scope, StoredPoint, TrustOrigin};
use cairn_store::{Filter, MemoryStore, UpsertPoint};
use serde::Serialize;
use tokio::sync::{mpsc, Mutex, Semaphore};

use crate::chunk::{Chunk, ChunkSettings, Chunker};
use crate::extract::{Extracted, Extractor, MediaType};
use crate::{now_millis, IngestError};

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    pub chunk: ChunkSettings,
    /// Largest file accepted, in bytes.
    pub max_file_bytes: u64,
    /// Documents extracted and chunked at once.
    pub extract_concurrency: usize,
    /// Points per store write.
    pub write_batch: usize,
    /// Capacity of the channels between stages (in documents).
    pub channel_capacity: usize,
    /// Chunks gathered from consecutive documents into one embedding job.
    pub embed_group: usize,
    /// Where parsers run: in this process, or (PDF) in a limited child process. See
    /// [`crate::extract::isolate`]; `for_model` extracts in-process.
    pub extractor: Extractor,
}

impl IngestConfig {
    pub fn for_model(model_max_tokens: usize) -> Self {
        IngestConfig {
            chunk: ChunkSettings::for_model(model_max_tokens),
            max_file_bytes: 64 * 1024 * 1024,
            extract_concurrency: 2,
            write_batch: 128,
            channel_capacity: 64,
            embed_group: 256,
            extractor: Extractor::InProcess,
        }
    }
}

/// Where a document's bytes come from.
#[derive(Debug, Clone)]
pub enum DocSource {
    /// A file; the media type follows the extension.
    Path(PathBuf),
    /// Bytes of a known media type (HTTP uploads, generated corpora).
    Bytes {
        bytes: Vec<u8>,
        media_type: MediaType,
    },
}

/// One document to ingest. `source` is its stable key (a file path or a caller key): the same
/// source with new content is a new version of the same document.
#[derive(Debug, Clone)]
pub struct DocumentInput {
    pub source: String,
    pub content: DocSource,
    pub metadata: Option<serde_json::Value>,
}

impl DocumentInput {
    pub fn file(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        DocumentInput {
            source: path.display().to_string(),
            content: DocSource::Path(path),
            metadata: None,
        }
    }

    /// Checks the caps of `cairn_models::limits` on what is copied onto every chunk: the
    /// source (1 to [`cairn_models::limits::MAX_SOURCE_BYTES`] bytes) and the metadata
    /// (at most [`cairn_models::limits::MAX_METADATA_BYTES`] serialized).
    pub fn validate(&self) -> Result<(), IngestError> {
        if self.source.trim().is_empty() {
            return Err(IngestError::InvalidInput("source must not be empty".into()));
        }
        cairn_models::limits::check_bytes(
            "source",
            &self.source,
            cairn_models::limits::MAX_SOURCE_BYTES,
        )?;
        cairn_models::limits::check_metadata("metadata", self.metadata.as_ref())?;
        Ok(())
    }

    pub fn text(source: impl Into<String>, text: impl Into<String>, media_type: MediaType) -> Self {
        DocumentInput {
            source: source.into(),
            content: DocSource::Bytes {
                bytes: text.into().into_bytes(),
                media_type,
            },
            metadata: None,
        }
    }
}

/// What happened to a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DocStatus {
    Created,
    Updated,
    Unchanged,
}

/// Result of ingesting one document.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DocumentReport {
    pub source: String,
    pub doc_id: String,
    pub version: u32,
    pub chunks: u32,
    pub status: DocStatus,
    pub media_type: String,
    pub warnings: Vec<String>,
}

/// Result of one input.
#[derive(Debug)]
pub struct Outcome {
    pub source: String,
    pub result: Result<DocumentReport, IngestError>,
}

/// Progress events, for progress bars.
#[derive(Debug, Clone)]
pub enum Progress {
    /// A document was chunked into this many chunks and goes to embedding.
    Chunked { chunks: usize },
    /// Chunks were written.
    Written { chunks: usize },
    /// An input finished (successfully or not).
    Finished,
}

struct Prepared {
    source: String,
    doc_id: String,
    content_hash: String,
    media_type: MediaType,
    chunks: Vec<Chunk>,
    warnings: Vec<String>,
    metadata: Option<serde_json::Value>,
}

/// One embedding job on its way: its documents and the task that embeds their chunks.
struct EmbedJob {
    docs: Vec<Prepared>,
    vectors: tokio::task::JoinHandle<Result<Vec<Vec<f32>>, cairn_embed::EmbedError>>,
}

struct Embedded {
    prepared: Prepared,
    vectors: Vec<Vec<f32>>,
}

/// The write path. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Ingestor {
    pub(crate) store: Arc<dyn MemoryStore>,
    pub(crate) embedder: Embedder,
    chunker: Chunker,
    config: IngestConfig,
    /// Serializes registry read → write → flip → retirement (and the "unchanged" decision,
    /// and document deletes via [`Ingestor::lock_commits`]), so concurrent ingests of one
    /// source cannot both claim the same version nor retire each other's chunks.
    commit: Mutex<()>,
    /// Next sequence number per (partition, conversation), loaded lazily from the store.
    /// Holding it also serializes message writes.
    pub(crate) seqs: Mutex<HashMap<(String, String), u64>>,
}

impl Ingestor {
    pub fn new(
        store: Arc<dyn MemoryStore>,
        embedder: Embedder,
        config: IngestConfig,
    ) -> Result<Self, IngestError> {
        config.chunk.validate(embedder.spec().max_tokens)?;
        let chunker = Chunker::new(embedder.tokenizer().clone(), config.chunk);
        Ok(Ingestor {
            store,
            embedder,
            chunker,
            config,
            commit: Mutex::new(()),
            seqs: Mutex::new(HashMap::new()),
        })
    }

    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }

    pub fn config(&self) -> &IngestConfig {
        &self.config
    }

    /// Holds off ingest commits (the "unchanged" decision, chunk writes, registry flips,
    /// retirement) until the guard is dropped. Deleting documents while holding it cannot
    /// interleave with a version being written. Lock order: see [`crate::catalog::CommitGuard`].
    pub async fn lock_commits(&self) -> Result<crate::catalog::CommitGuard<'_>, IngestError> {
        let local = self.commit.lock().await;
        let store = self.store.lock("ingest-commit").await?;
        Ok(crate::catalog::CommitGuard::new(local, store))
    }

    /// Ingests documents through the pipeline. Every input gets an [`Outcome`]; a failing
    /// input never stops the others. `progress` is called from the pipeline's tasks.
    pub async fn ingest_documents(
        self: &Arc<Self>,
        scope: &Scope,
        inputs: Vec<DocumentInput>,
        progress: Arc<dyn Fn(Progress) + Send + Sync>,
    ) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(inputs.len());
        if let Err(e) = scope.validate() {
            for input in inputs {
                outcomes.push(Outcome {
                    source: input.source,
                    result: Err(IngestError::InvalidInput(e.to_string())),
                });
            }
            return outcomes;
        }
        // A source given twice in one batch would race with itself: keep the first.
        let mut seen = std::collections::HashSet::new();
        let mut unique = Vec::with_capacity(inputs.len());
        for input in inputs {
            // Caps first: an oversized source or metadata would be copied onto every chunk.
            if let Err(e) = input.validate() {
                outcomes.push(Outcome {
                    source: input.source,
                    result: Err(e),
                });
                progress(Progress::Finished);
            } else if seen.insert(input.source.clone()) {
                unique.push(input);
            } else {
                outcomes.push(Outcome {
                    result: Err(IngestError::InvalidInput(format!(
                        "source {} appears more than once in the batch",
                        input.source
                    ))),
                    source: input.source,
                });
                progress(Progress::Finished);
            }
        }

        let cap = self.config.channel_capacity.max(1);
        let (prep_tx, mut prep_rx) = mpsc::channel::<Prepared>(cap);
        let (emb_tx, mut emb_rx) = mpsc::channel::<Embedded>(cap);
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outcome>();

        // Stage 1: prepare, with bounded concurrency.
        let stage1 = {
            let this = Arc::clone(self);
            let scope = scope.clone();
            let out_tx = out_tx.clone();
            let progress = Arc::clone(&progress);
            tokio::spawn(async move {
                let permits = Arc::new(Semaphore::new(this.config.extract_concurrency.max(1)));
                let mut tasks = tokio::task::JoinSet::new();
                for input in unique {
                    let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                        break;
                    };
                    let this = Arc::clone(&this);
                    let scope = scope.clone();
                    let prep_tx = prep_tx.clone();
                    let out_tx = out_tx.clone();
                    let progress = Arc::clone(&progress);
                    tasks.spawn(async move {
                        let source = input.source.clone();
                        match this.prepare(&scope, input).await {
                            Ok(Ok(prepared)) => {
                                progress(Progress::Chunked {
                                    chunks: prepared.chunks.len(),
                                });
                                drop(permit);
                                // Waits while later stages are full: backpressure.
                                let _ = prep_tx.send(prepared).await;
                            }
                            Ok(Err(report)) => {
                                let _ = out_tx.send(Outcome {
                                    source,
                                    result: Ok(report),
                                });
                                progress(Progress::Finished);
                            }
                            Err(e) => {
                                let _ = out_tx.send(Outcome {
                                    source,
                                    result: Err(e),
                                });
                                progress(Progress::Finished);
                            }
                        }
                    });
                }
                while tasks.join_next().await.is_some() {}
            })
        };

        // Stage 2: embed. Two jobs are with the embedder at once: while this stage hands one
        // job's vectors on, the worker already runs the next, so the model never waits
        // between jobs (`perf` of `cairn bench ingest` showed its cores idle at each boundary).
        let (job_tx, mut job_rx) = mpsc::channel::<EmbedJob>(1);
        let stage2_submit = {
            let this = Arc::clone(self);
            tokio::spawn(async move {
                // Small documents are embedded together: the worker sorts one job's texts
                // by length and fills whole batches, which a document of two chunks cannot.
                let group = this.config.embed_group.max(1);
                // Room for the next job first, so documents gather while the model is busy.
                while let Ok(permit) = job_tx.reserve().await {
                    let Some(first) = prep_rx.recv().await else {
                        break;
                    };
                    let mut docs = vec![first];
                    let mut n: usize = docs[0].chunks.len();
                    while n < group {
                        match prep_rx.try_recv() {
                            Ok(more) => {
                                n += more.chunks.len();
                                docs.push(more);
                            }
                            Err(_) => break,
                        }
                    }
                    let texts: Vec<String> = docs
                        .iter()
                        .flat_map(|d| d.chunks.iter().map(Chunk::embedding_text))
                        .collect();
                    let embedder = this.embedder.clone();
                    let vectors =
                        tokio::spawn(async move { embedder.embed_documents(texts).await });
                    permit.send(EmbedJob { docs, vectors });
                }
            })
        };
        let stage2 = {
            let out_tx = out_tx.clone();
            let progress = Arc::clone(&progress);
            tokio::spawn(async move {
                while let Some(EmbedJob { docs, vectors }) = job_rx.recv().await {
                    let result = match vectors.await {
                        Ok(result) => result.map_err(|e| (e.kind(), e.to_string())),
                        Err(e) => Err((
                            cairn_models::ErrorKind::Internal,
                            format!("embedding task: {e}"),
                        )),
                    };
                    match result {
                        Ok(mut vectors) => {
                            for prepared in docs {
                                let rest =
                                    vectors.split_off(prepared.chunks.len().min(vectors.len()));
                                let mine = std::mem::replace(&mut vectors, rest);
                                if emb_tx
                                    .send(Embedded {
                                        prepared,
                                        vectors: mine,
                                    })
                                    .await
                                    .is_err()
                                {
                                    return;
                                }
                            }
                        }
                        Err((kind, e)) => {
                            for prepared in docs {
                                let message = format!("embedding failed: {e}");
                                let _ = out_tx.send(Outcome {
                                    source: prepared.source,
                                    result: Err(match kind {
                                        cairn_models::ErrorKind::Unavailable => {
                                            IngestError::Unavailable(message)
                                        }
                                        _ => IngestError::Internal(message),
                                    }),
                                });
                                progress(Progress::Finished);
                            }
                        }
                    }
                }
            })
        };

        // Stage 3: write.
        let stage3 = {
            let this = Arc::clone(self);
            let scope = scope.clone();
            let progress = Arc::clone(&progress);
            tokio::spawn(async move {
                while let Some(embedded) = emb_rx.recv().await {
                    let source = embedded.prepared.source.clone();
                    let result = this.write_document(&scope, embedded, &progress).await;
                    let _ = out_tx.send(Outcome { source, result });
                    progress(Progress::Finished);
                }
            })
        };

        for stage in [stage1, stage2_submit, stage2, stage3] {
            if let Err(e) = stage.await {
                tracing::error!("ingest stage failed: {e}");
            }
        }
        while let Some(outcome) = out_rx.recv().await {
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Reads, extracts and hashes one input. `Ok(Err(report))` means unchanged (done).
    async fn prepare(
        &self,
        scope: &Scope,
        input: DocumentInput,
    ) -> Result<Result<Prepared, DocumentReport>, IngestError> {
        let source = input.source.clone();
        let max = self.config.max_file_bytes;
        let extractor = self.config.extractor.clone();
        let extracted: Extracted =
            tokio::task::spawn_blocking(move || -> Result<Extracted, IngestError> {
                let (bytes, media_type) = match input.content {
                    DocSource::Path(path) => {
                        let name = path.display().to_string();
                        let media_type = MediaType::from_path(&name).ok_or_else(|| {
                            IngestError::UnsupportedMedia {
                                source_name: name.clone(),
                                reason: "expected .txt, .md or .pdf".into(),
                            }
                        })?;
                        let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
                            std::io::ErrorKind::NotFound => IngestError::NotFound {
                                source_name: name.clone(),
                            },
                            _ => IngestError::Io {
                                path: name.clone(),
                                source: e,
                            },
                        })?;
                        if meta.len() > max {
                            return Err(IngestError::TooLarge {
                                source_name: name,
                                size: meta.len(),
                                limit: max,
                            });
                        }
                        let bytes = std::fs::read(&path).map_err(|e| IngestError::Io {
                            path: name.clone(),
                            source: e,
                        })?;
                        (bytes, media_type)
                    }
                    DocSource::Bytes { bytes, media_type } => {
                        if bytes.len() as u64 > max {
                            return Err(IngestError::TooLarge {
                                source_name: input.source.clone(),
                                size: bytes.len() as u64,
                                limit: max,
                            });
                        }
                        (bytes, media_type)
                    }
                };
                // Blocking (may wait for an isolated worker): fine on the blocking pool.
                extractor.extract(&input.source, &bytes, media_type)
            })
            .await
            .map_err(|e| IngestError::Internal(format!("extraction task: {e}")))??;

        let doc_id = document_id(&extracted.text);
        let partition = scope.partition();
        if let Some(current) = self.unchanged(&partition, &source, &doc_id).await? {
            return Ok(Err(DocumentReport {
                source,
                doc_id,
                version: current.version.unwrap_or(1),
                chunks: current.chunk_count.unwrap_or(0),
                status: DocStatus::Unchanged,
                media_type: extracted.media_type.as_str().to_string(),
                warnings: extracted.warnings,
            }));
        }

        let chunker = self.chunker.clone();
        let content_hash = sha256_hex(extracted.text.as_bytes());
        let (chunks, extracted) =
            tokio::task::spawn_blocking(move || chunker.chunk(&extracted).map(|c| (c, extracted)))
                .await
                .map_err(|e| IngestError::Internal(format!("chunking task: {e}")))??;
        if chunks.is_empty() {
            return Err(IngestError::Empty {
                source_name: source,
            });
        }
        Ok(Ok(Prepared {
            source,
            doc_id,
            content_hash,
            media_type: extracted.media_type,
            chunks,
            warnings: extracted.warnings,
            metadata: input.metadata,
        }))
    }

    /// The registry record of `source`, if any.
    pub async fn current_record(
        &self,
        partition: &Partition,
        source: &str,
    ) -> Result<Option<StoredPoint>, IngestError> {
        let id = document_record_id(partition, source);
        Ok(self
            .store
            .retrieve(partition, &[id], false)
            .await?
            .into_iter()
            .next()
            .map(|h| h.point))
    }

    /// The registry record of `source` when it already names `doc_id` and all of that
    /// version's chunks are stored; any retirement a crash interrupted is finished first.
    /// `None`: the document must go through the pipeline (new content, or a repair).
    ///
    /// Decided under the commit lock with the registry re-read under it. A record read
    /// before the lock may be stale: another ingest may have committed a newer version
    /// meanwhile, and retiring "everything but `doc_id`" would then delete that version's
    /// chunks while the registry names it.
    async fn unchanged(
        &self,
        partition: &Partition,
        source: &str,
        doc_id: &str,
    ) -> Result<Option<StoredPoint>, IngestError> {
        // Unlocked first, so new content (the common case) never waits for the lock; the
        // write stage re-checks under the lock anyway.
        match self.current_record(partition, source).await? {
            Some(r) if r.doc_id.as_deref() == Some(doc_id) => {}
            _ => return Ok(None),
        }
        let _commit = self.lock_commits().await?;
        let Some(current) = self.current_record(partition, source).await? else {
            return Ok(None);
        };
        if current.doc_id.as_deref() != Some(doc_id)
            || !self.chunks_complete(partition, source, &current).await?
        {
            return Ok(None);
        }
        self.retire_old_versions(partition, source, doc_id).await?;
        Ok(Some(current))
    }

    /// Whether every chunk the registry record `current` announces is stored. A version
    /// with missing chunks (a delete that raced an ingest before the two were serialized, a
    /// lost write) is not "unchanged": running the same ingest again rewrites it.
    async fn chunks_complete(
        &self,
        partition: &Partition,
        source: &str,
        current: &StoredPoint,
    ) -> Result<bool, IngestError> {
        let Some(doc_id) = current.doc_id.as_deref() else {
            return Ok(false);
        };
        let stored = self
            .store
            .count(
                partition,
                Filter::new()
                    .eq("kind", PointKind::Chunk.as_str())
                    .eq("source", source)
                    .eq("doc_id", doc_id),
            )
            .await?;
        Ok(match current.chunk_count {
            Some(n) => stored >= n as usize,
            // A record without a count cannot be checked further.
            None => stored > 0,
        })
    }

    /// Deletes chunks of `source` that do not belong to `current_doc_id`. Called with the
    /// commit lock held: it must not run against a registry value another ingest has since
    /// replaced.
    async fn retire_old_versions(
        &self,
        partition: &Partition,
        source: &str,
        current_doc_id: &str,
    ) -> Result<(), IngestError> {
        let stale = Filter::new()
            .eq("kind", PointKind::Chunk.as_str())
            .eq("source", source)
            .not_eq("doc_id", current_doc_id);
        if self.store.count(partition, stale.clone()).await? > 0 {
            self.store.delete_where(partition, stale).await?;
        }
        Ok(())
    }

    async fn write_document(
        &self,
        scope: &Scope,
        embedded: Embedded,
        progress: &Arc<dyn Fn(Progress) + Send + Sync>,
    ) -> Result<DocumentReport, IngestError> {
        let Embedded { prepared, vectors } = embedded;
        let partition = scope.partition();
        let _commit = self.lock_commits().await?;
        let previous = self.current_record(&partition, &prepared.source).await?;
        let (status, version, complete) = match &previous {
            Some(p) if p.doc_id.as_deref() == Some(prepared.doc_id.as_str()) => (
                DocStatus::Unchanged,
                p.version.unwrap_or(1),
                self.chunks_complete(&partition, &prepared.source, p)
                    .await?,
            ),
            Some(p) => (DocStatus::Updated, p.version.unwrap_or(0) + 1, false),
            None => (DocStatus::Created, 1, false),
        };
        let now = now_millis();
        let n_chunks = prepared.chunks.len() as u32;
        let mut warnings = prepared.warnings;
        if !complete {
            if status == DocStatus::Unchanged {
                // Same content, but the stored version lacks chunks: rewrite it (same ids,
                // same version) instead of reporting a broken version as unchanged.
                warnings
                    .push("the stored version was missing chunks; they were written again".into());
            }
            let mut points = Vec::with_capacity(prepared.chunks.len());
            for (chunk, vector) in prepared.chunks.iter().zip(vectors) {
                let mut p = StoredPoint::new(PointKind::Chunk, scope, TrustOrigin::Document, now);
                p.text = Some(chunk.text.clone());
                p.source = Some(prepared.source.clone());
                p.doc_id = Some(prepared.doc_id.clone());
                p.version = Some(version);
                p.chunk_index = Some(chunk.index);
                p.span = Some(chunk.span);
                p.page = chunk.page;
                p.heading = chunk.heading.clone();
                p.media_type = Some(prepared.media_type.as_str().to_string());
                p.content_hash = Some(prepared.content_hash.clone());
                p.metadata = prepared.metadata.clone();
                points.push(UpsertPoint {
                    id: chunk_point_id(&partition, &prepared.source, &prepared.doc_id, chunk.index),
                    dense: Some(vector),
                    bm25_text: Some(chunk.embedding_text()),
                    sparse: None,
                    payload: p,
                });
            }
            let batch = self.config.write_batch.max(1);
            while !points.is_empty() {
                let rest = points.split_off(points.len().min(batch));
                let n = points.len();
                self.store
                    .upsert(std::mem::replace(&mut points, rest))
                    .await?;
                progress(Progress::Written { chunks: n });
            }
            cairn_models::failpoint("ingest.doc.after_chunks");
            // The commit point: the registry now names the new version.
            let mut record =
                StoredPoint::new(PointKind::Document, scope, TrustOrigin::Document, now);
            record.source = Some(prepared.source.clone());
            record.doc_id = Some(prepared.doc_id.clone());
            record.version = Some(version);
            record.chunk_count = Some(n_chunks);
            record.media_type = Some(prepared.media_type.as_str().to_string());
            record.content_hash = Some(prepared.content_hash.clone());
            record.metadata = prepared.metadata.clone();
            self.store
                .upsert(vec![UpsertPoint::record(
                    document_record_id(&partition, &prepared.source),
                    record,
                )])
                .await?;
            cairn_models::failpoint("ingest.doc.after_flip");
        }
        self.retire_old_versions(&partition, &prepared.source, &prepared.doc_id)
            .await?;
        Ok(DocumentReport {
            source: prepared.source,
            doc_id: prepared.doc_id,
            version,
            chunks: n_chunks,
            status,
            media_type: prepared.media_type.as_str().to_string(),
            warnings,
        })
    }
}
