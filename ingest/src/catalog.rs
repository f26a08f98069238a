//! What is stored: documents of a partition, point counts, deletion of a document.

use std::collections::{BTreeMap, BTreeSet};

use cairn_models::{DocumentInfo, Partition, PointKind, StoredPoint};
use cairn_store::{Filter, Hit, MemoryStore};
use serde::Serialize;

use crate::IngestError;

fn info(p: &StoredPoint) -> Option<DocumentInfo> {
    Some(DocumentInfo {
        doc_id: p.doc_id.clone()?,
        source: p.source.clone()?,
        version: p.version.unwrap_or(1),
        chunks: p.chunk_count.unwrap_or(0),
        media_type: p.media_type.clone(),
        ingested_at: p.ts,
    })
}

/// Every document of the partition, sorted by source.
pub async fn list_documents(
    store: &dyn MemoryStore,
    partition: &Partition,
) -> Result<Vec<DocumentInfo>, IngestError> {
    let filter = Filter::new().eq("kind", PointKind::Document.as_str());
    let mut out: Vec<DocumentInfo> = scroll_all(store, partition, filter)
        .await?
        .iter()
        .filter_map(|h| info(&h.point))
        .collect();
    out.sort_by(|a, b| a.source.cmp(&b.source));
    Ok(out)
}

/// The current document with this id, if any.
pub async fn get_document(
    store: &dyn MemoryStore,
    partition: &Partition,
    doc_id: &str,
) -> Result<Option<DocumentInfo>, IngestError> {
    let filter = Filter::new()
        .eq("kind", PointKind::Document.as_str())
        .eq("doc_id", doc_id);
    let (page, _) = store.scroll(partition, filter, 1, None).await?;
    Ok(page.first().and_then(|h| info(&h.point)))
}

/// Proof that the ingest commit lock is held (see [`crate::Ingestor::lock_commits`]).
///
/// While it is held no ingest decides "unchanged", writes chunks, flips a registry record or
/// retires a version, so a deletion cannot interleave with a commit: without it a delete could
/// remove a version whose chunks are being written, and the registry would then flip to a
/// version with missing chunks that later runs call unchanged.
///
/// Lock order: the API takes `Engine::turn_lock`, then `Engine::review_lock`, then this one;
/// an ingest takes only this one and holds no other lock while it waits for it.
///
/// On a store shared by several Cairn processes the guard also holds the store-wide lock of
/// the same name (`MemoryStore::lock`), so the exclusion holds across them.
#[derive(Debug)]
pub struct CommitGuard<'a> {
    // Declared first, dropped first: the store lease goes before the local mutex.
    _store: cairn_store::StoreLock,
    _guard: tokio::sync::MutexGuard<'a, ()>,
}

impl<'a> CommitGuard<'a> {
    pub(crate) fn new(
        guard: tokio::sync::MutexGuard<'a, ()>,
        store: cairn_store::StoreLock,
    ) -> Self {
        CommitGuard {
            _store: store,
            _guard: guard,
        }
    }
}

/// Everything stored of one document id: the registry records that name it (one per source
/// at that content) and its chunks, including orphans that no registry record names (of a
/// crashed first ingest, of an interrupted retirement or of an interrupted delete).
#[derive(Debug, Clone, Default)]
pub struct DocumentEvidence {
    /// Sources whose registry record names the id, sorted by source.
    pub current: Vec<DocumentInfo>,
    /// Sources holding chunks of the id that no registry record names as this id, one entry
    /// per source (version and time of the first chunk found, `chunks` = chunks stored).
    pub orphaned: Vec<DocumentInfo>,
    /// Chunk points stored with the id (all sources).
    pub stored_chunks: usize,
    /// Number of chunk refs of the id: the largest of the registry's chunk counts and the
    /// highest stored chunk index + 1.
    pub chunk_refs: u32,
}

impl DocumentEvidence {
    /// Whether nothing of the document is stored.
    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.stored_chunks == 0
    }

    /// Every source found, registry-named first.
    pub fn documents(&self) -> Vec<DocumentInfo> {
        self.current.iter().chain(&self.orphaned).cloned().collect()
    }
}

/// [`MemoryStore::scroll_all`] with the error mapped into this crate's.
async fn scroll_all(
    store: &dyn MemoryStore,
    partition: &Partition,
    filter: Filter,
) -> Result<Vec<Hit>, IngestError> {
    Ok(store.scroll_all(partition, filter).await?)
}

/// Finds everything stored of `doc_id` in the partition (reads only).
pub async fn find_document_evidence(
    store: &dyn MemoryStore,
    partition: &Partition,
    doc_id: &str,
) -> Result<DocumentEvidence, IngestError> {
    let records = scroll_all(
        store,
        partition,
        Filter::new()
            .eq("kind", PointKind::Document.as_str())
            .eq("doc_id", doc_id),
    )
    .await?;
    let mut current: Vec<DocumentInfo> = records.iter().filter_map(|h| info(&h.point)).collect();
    current.sort_by(|a, b| a.source.cmp(&b.source));
    let named: BTreeSet<&str> = current.iter().map(|d| d.source.as_str()).collect();
    let chunks = scroll_all(
        store,
        partition,
        Filter::new()
            .eq("kind", PointKind::Chunk.as_str())
            .eq("doc_id", doc_id),
    )
    .await?;
    let mut chunk_refs = current.iter().map(|d| d.chunks).max().unwrap_or(0);
    let mut orphaned: BTreeMap<String, DocumentInfo> = BTreeMap::new();
    for h in &chunks {
        let p = &h.point;
        chunk_refs = chunk_refs.max(p.chunk_index.map_or(0, |i| i.saturating_add(1)));
        let source = p.source.clone().unwrap_or_default();
        if named.contains(source.as_str()) {
            continue;
        }
        orphaned
            .entry(source.clone())
            .or_insert_with(|| DocumentInfo {
                doc_id: doc_id.to_string(),
                source,
                version: p.version.unwrap_or(1),
                chunks: 0,
                media_type: p.media_type.clone(),
                ingested_at: p.ts,
            })
            .chunks += 1;
    }
    Ok(DocumentEvidence {
        current,
        orphaned: orphaned.into_values().collect(),
        stored_chunks: chunks.len(),
        chunk_refs,
    })
}

/// Deletes what [`find_document_evidence`] found of `doc_id`, with ingest commits held off.
///
/// Order, so that a crash at any step leaves something a retry finds by the same id: first
/// the chunks of other versions of the registry-named sources (invisible to readers while
/// the registry names `doc_id`), then the registry records (from this instant readers no
/// longer accept the chunks), then every chunk of `doc_id` (orphans are found by id).
pub async fn delete_document_evidence(
    store: &dyn MemoryStore,
    partition: &Partition,
    doc_id: &str,
    evidence: &DocumentEvidence,
    _commits: &CommitGuard<'_>,
) -> Result<(), IngestError> {
    for doc in &evidence.current {
        let stale = Filter::new()
            .eq("kind", PointKind::Chunk.as_str())
            .eq("source", doc.source.as_str())
            .not_eq("doc_id", doc_id);
        if store.count(partition, stale.clone()).await? > 0 {
            store.delete_where(partition, stale).await?;
        }
    }
    if !evidence.current.is_empty() {
        store
            .delete_where(
                partition,
                Filter::new()
                    .eq("kind", PointKind::Document.as_str())
                    .eq("doc_id", doc_id),
            )
            .await?;
    }
    store
        .delete_where(
            partition,
            Filter::new()
                .eq("kind", PointKind::Chunk.as_str())
                .eq("doc_id", doc_id),
        )
        .await?;
    Ok(())
}

/// Deletes a document (its registry records and all its chunks). Returns what was deleted,
/// or `None` when no such document exists in the partition.
///
/// Not synchronized with ingests: for single-writer tools (the evaluation). A server that
/// ingests concurrently holds [`CommitGuard`] and uses [`delete_document_evidence`].
pub async fn delete_document(
    store: &dyn MemoryStore,
    partition: &Partition,
    doc_id: &str,
) -> Result<Option<DocumentInfo>, IngestError> {
    let Some(doc) = get_document(store, partition, doc_id).await? else {
        return Ok(None);
    };
    // Registry first: from this instant readers no longer accept the chunks.
    store
        .delete_where(
            partition,
            Filter::new()
                .eq("kind", PointKind::Document.as_str())
                .eq("source", doc.source.as_str()),
        )
        .await?;
    store
        .delete_where(
            partition,
            Filter::new()
                .eq("kind", PointKind::Chunk.as_str())
                .eq("source", doc.source.as_str()),
        )
        .await?;
    Ok(Some(doc))
}

/// Point counts of a partition, per kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub documents: usize,
    pub chunks: usize,
    pub messages: usize,
    pub turns: usize,
}

pub async fn stats(store: &dyn MemoryStore, partition: &Partition) -> Result<Stats, IngestError> {
    let count = |kind: PointKind| {
        let filter = Filter::new().eq("kind", kind.as_str());
        async move { store.count(partition, filter).await }
    };
    Ok(Stats {
        documents: count(PointKind::Document).await?,
        chunks: count(PointKind::Chunk).await?,
        messages: count(PointKind::Message).await?,
        turns: count(PointKind::Turn).await?,
    })
}
