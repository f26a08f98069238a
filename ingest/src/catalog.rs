//! What is stored: documents of a partition, point counts, deletion of a document.

use cairn_models::{DocumentInfo, Partition, PointKind, StoredPoint};
use cairn_store::{Filter, MemoryStore};
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
    let mut out = Vec::new();
    let mut offset = None;
    loop {
        let (page, next) = store.scroll(partition, filter.clone(), 256, offset).await?;
        out.extend(page.iter().filter_map(|h| info(&h.point)));
        match next {
            Some(n) => offset = Some(n),
            None => break,
        }
    }
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

/// Deletes a document (its registry records and all its chunks). Returns what was deleted,
/// or `None` when no such document exists in the partition.
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
