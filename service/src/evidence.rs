//! Looking up stored evidence by reference, inside one partition.

use cairn_ingest::catalog;
use cairn_models::ids::event_record_id;
use cairn_models::{Partition, PointKind, Ref};
use cairn_store::{Filter, Hit, MemoryStore};

use crate::error::ServiceError;

/// The message points `msg:<conversation>/<seq>` names.
pub(crate) async fn find_message(
    store: &dyn MemoryStore,
    partition: &Partition,
    conversation: &str,
    seq: u64,
) -> Result<Vec<Hit>, ServiceError> {
    let seq = i64::try_from(seq)
        .map_err(|_| ServiceError::InvalidRequest(format!("sequence number {seq} is too large")))?;
    let filter = Filter::new()
        .eq("kind", PointKind::Message.as_str())
        .eq("conversation_id", conversation)
        .eq("seq", seq);
    Ok(store.scroll_all(partition, filter).await?)
}

/// Whether an evidence reference names something stored in the partition now (a current
/// document and, with `#n`, one of its chunks; a message; an event).
pub(crate) async fn exists(
    store: &dyn MemoryStore,
    partition: &Partition,
    reference: &Ref,
) -> Result<bool, ServiceError> {
    Ok(match reference {
        Ref::Doc { doc_id, chunk } => catalog::get_document(store, partition, doc_id)
            .await?
            .is_some_and(|d| chunk.is_none_or(|c| c < d.chunks)),
        Ref::Msg { conversation, seq } => !find_message(store, partition, conversation, *seq)
            .await?
            .is_empty(),
        Ref::Evt(id) => !store
            .retrieve(partition, &[event_record_id(partition, id)], false)
            .await?
            .is_empty(),
        Ref::Fact(id) => {
            let Ok(point) = uuid::Uuid::parse_str(id) else {
                return Ok(false);
            };
            store
                .retrieve(partition, &[point], false)
                .await?
                .iter()
                .any(|h| h.point.kind == PointKind::Fact)
        }
        Ref::Conv(_)
        | Ref::Turn(_)
        | Ref::Ent(_)
        | Ref::Pref(_)
        | Ref::Rel(_)
        | Ref::Trace(_)
        | Ref::Pred(_)
        | Ref::Cand(_)
        | Ref::Mem(_)
        | Ref::Forget(_)
        | Ref::Grant(_) => false,
    })
}
