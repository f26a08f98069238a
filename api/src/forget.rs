//! Forgetting: removing evidence and everything derived from it.
//!
//! Evidence is a document (all its chunks and versions' registry records), a message, a
//! conversation, the messages of a turn, or an event. Derived from it: candidates whose
//! evidence refs all pointed at it (invalidated, their memories removed from recall),
//! candidates that keep other evidence (the forgotten refs are dropped), and the records of
//! completed turns whose messages were deleted (kept as tombstones with
//! `metadata.deleted = true`, so the turn id cannot be completed again).
//!
//! `hard` also deletes the records of invalidated candidates (which restate the evidence)
//! instead of keeping them for review, and flushes the store to disk before returning.

use std::collections::{BTreeSet, HashSet};

use cairn_ingest::catalog;
use cairn_models::ids::turn_record_id;
use cairn_models::{DocumentInfo, Partition, PointKind, Scope, StoredPoint};
use cairn_store::{Filter, Hit, UpsertPoint};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::candidates::{self, CandidateStatus};
use crate::engine::Engine;
use crate::error::ApiError;
use crate::evidence::{find_message, record_point_id, scroll_all};
use crate::refs::Ref;

/// What a forget removed and invalidated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ForgetReport {
    /// The ref that was forgotten.
    #[serde(rename = "ref")]
    pub reference: String,
    pub hard: bool,
    /// Evidence refs removed from the store (`doc:<id>` and each `doc:<id>#<n>`,
    /// `msg:<c>/<seq>`, `evt:<id>`, `mem:<id>`).
    pub removed: Vec<String>,
    /// Candidates invalidated because all their evidence was forgotten (`cand:<id>`);
    /// their memories no longer appear in recall.
    pub invalidated: Vec<String>,
    /// Candidates that lost some evidence refs but keep others (`cand:<id>`).
    pub narrowed: Vec<String>,
    /// Completed turns whose messages were deleted (`turn:<id>`); their ids stay used.
    pub tombstoned_turns: Vec<String>,
}

/// The evidence a forget removed, for matching candidates' evidence refs.
#[derive(Debug, Default)]
struct Removed {
    docs: HashSet<String>,
    refs: HashSet<String>,
}

impl Removed {
    fn covers(&self, evidence: &str) -> bool {
        if self.refs.contains(evidence) {
            return true;
        }
        match Ref::parse(evidence) {
            Ok(Ref::Doc { doc_id, .. }) => self.docs.contains(&doc_id),
            _ => false,
        }
    }
}

fn scope_of(p: &StoredPoint) -> Scope {
    Scope {
        tenant: p.tenant.clone(),
        user: p.user.clone(),
        namespace: p.namespace.clone(),
        agent: p.agent.clone(),
        session: p.session.clone(),
    }
}

/// Deletes message points and tombstones the records of the completed turns they belonged to.
async fn delete_messages(
    engine: &Engine,
    partition: &Partition,
    hits: Vec<Hit>,
    report: &mut ForgetReport,
    removed: &mut Removed,
) -> Result<(), ApiError> {
    let mut turns: BTreeSet<(String, uuid::Uuid)> = BTreeSet::new();
    let mut ids = Vec::with_capacity(hits.len());
    // Ordered by conversation, then sequence number (not as text: 2 before 10).
    let mut refs: BTreeSet<(String, u64, String)> = BTreeSet::new();
    for h in hits {
        if let Some(t) = &h.point.turn_id {
            turns.insert((t.clone(), turn_record_id(&scope_of(&h.point), t)));
        }
        refs.insert((
            h.point.conversation_id.clone().unwrap_or_default(),
            h.point.seq.unwrap_or(0),
            h.point.reference(),
        ));
        ids.push(h.id);
    }
    engine.store.delete_ids(partition, ids).await?;
    for (turn_id, record_id) in turns {
        tombstone(engine, partition, &turn_id, record_id, report).await?;
    }
    for (_, _, r) in refs {
        removed.refs.insert(r.clone());
        report.removed.push(r);
    }
    Ok(())
}

async fn tombstone(
    engine: &Engine,
    partition: &Partition,
    turn_id: &str,
    record_id: uuid::Uuid,
    report: &mut ForgetReport,
) -> Result<(), ApiError> {
    let Some(hit) = engine
        .store
        .retrieve(partition, &[record_id], false)
        .await?
        .into_iter()
        .next()
    else {
        return Ok(());
    };
    let mut record = hit.point;
    let mut meta = record
        .metadata
        .take()
        .unwrap_or_else(|| serde_json::json!({}));
    let already = meta.get("deleted").and_then(|v| v.as_bool()) == Some(true);
    if !already {
        if let Some(m) = meta.as_object_mut() {
            m.insert("deleted".into(), serde_json::Value::Bool(true));
            m.insert(
                "deleted_at".into(),
                serde_json::json!(chrono::Utc::now().timestamp_millis()),
            );
        }
        record.metadata = Some(meta);
        engine
            .store
            .upsert(vec![UpsertPoint::record(record_id, record)])
            .await?;
    }
    let t = format!("turn:{turn_id}");
    if !report.tombstoned_turns.contains(&t) {
        report.tombstoned_turns.push(t);
    }
    Ok(())
}

/// Deletes every source whose current version is `doc_id`. Returns what was deleted.
async fn delete_documents(
    engine: &Engine,
    partition: &Partition,
    doc_id: &str,
    report: &mut ForgetReport,
    removed: &mut Removed,
) -> Result<Vec<DocumentInfo>, ApiError> {
    let mut deleted = Vec::new();
    // The same content under several sources shares its id: delete each source.
    while let Some(doc) = catalog::delete_document(engine.store.as_ref(), partition, doc_id).await?
    {
        deleted.push(doc);
        if deleted.len() > 10_000 {
            return Err(ApiError::Internal(format!(
                "document {doc_id} did not go away"
            )));
        }
    }
    if !deleted.is_empty() {
        removed.docs.insert(doc_id.to_string());
        report.removed.push(format!("doc:{doc_id}"));
        let chunks = deleted.iter().map(|d| d.chunks).max().unwrap_or(0);
        report
            .removed
            .extend((0..chunks).map(|i| format!("doc:{doc_id}#{i}")));
    }
    Ok(deleted)
}

/// Invalidates or narrows the candidates whose evidence the forget removed.
async fn invalidate_derived(
    engine: &Engine,
    partition: &Partition,
    removed: &Removed,
    by: &str,
    hard: bool,
    report: &mut ForgetReport,
) -> Result<(), ApiError> {
    for stored in candidates::load_all(engine, partition).await? {
        let (gone, remaining): (Vec<String>, Vec<String>) = stored
            .evidence()
            .iter()
            .cloned()
            .partition(|r| removed.covers(r));
        if gone.is_empty() {
            continue;
        }
        let cand = format!("cand:{}", stored.id());
        let live = matches!(
            stored.status(),
            CandidateStatus::Pending | CandidateStatus::Approved
        );
        if remaining.is_empty() {
            if live || hard {
                candidates::invalidate(engine, stored, by, hard).await?;
                report.invalidated.push(cand);
            }
        } else {
            candidates::narrow(engine, stored, remaining, by).await?;
            report.narrowed.push(cand);
        }
    }
    Ok(())
}

/// Forgets what `reference` names in the partition. `404` when nothing of it is stored.
pub async fn forget(
    engine: &Engine,
    partition: &Partition,
    reference: &Ref,
    hard: bool,
) -> Result<ForgetReport, ApiError> {
    Ok(forget_inner(engine, partition, reference, hard).await?.1)
}

/// Deletes a document (all sources currently at that id) and what derives from it.
pub async fn forget_document(
    engine: &Engine,
    partition: &Partition,
    doc_id: &str,
    hard: bool,
) -> Result<(Vec<DocumentInfo>, ForgetReport), ApiError> {
    let r = Ref::Doc {
        doc_id: doc_id.to_string(),
        chunk: None,
    };
    forget_inner(engine, partition, &r, hard).await
}

async fn forget_inner(
    engine: &Engine,
    partition: &Partition,
    reference: &Ref,
    hard: bool,
) -> Result<(Vec<DocumentInfo>, ForgetReport), ApiError> {
    let by = reference.to_string();
    let mut report = ForgetReport {
        reference: by.clone(),
        hard,
        ..ForgetReport::default()
    };
    let mut removed = Removed::default();
    let mut documents = Vec::new();
    let not_found = || ApiError::NotFound(format!("nothing stored as {by} in this scope"));
    let store = engine.store.as_ref();
    // Lock order: turns, then reviews (see Engine).
    let _turns = engine.turn_lock.lock().await;
    let _reviews = engine.review_lock.lock().await;
    match reference {
        Ref::Doc { doc_id, .. } => {
            documents =
                delete_documents(engine, partition, doc_id, &mut report, &mut removed).await?;
            if documents.is_empty() {
                return Err(not_found());
            }
        }
        Ref::Msg { conversation, seq } => {
            let hits = find_message(store, partition, conversation, *seq).await?;
            if hits.is_empty() {
                return Err(not_found());
            }
            delete_messages(engine, partition, hits, &mut report, &mut removed).await?;
        }
        Ref::Conv(conversation) => {
            let filter = Filter::new()
                .eq("kind", PointKind::Message.as_str())
                .eq("conversation_id", conversation.as_str());
            let hits = scroll_all(store, partition, filter).await?;
            if hits.is_empty() {
                return Err(not_found());
            }
            delete_messages(engine, partition, hits, &mut report, &mut removed).await?;
        }
        Ref::Turn(turn_id) => {
            let filter = Filter::new()
                .eq("kind", PointKind::Message.as_str())
                .eq("turn_id", turn_id.as_str());
            let hits = scroll_all(store, partition, filter).await?;
            if hits.is_empty() {
                return Err(not_found());
            }
            delete_messages(engine, partition, hits, &mut report, &mut removed).await?;
        }
        Ref::Evt(id) => {
            let point = record_point_id("event", partition, id);
            if store.retrieve(partition, &[point], false).await?.is_empty() {
                return Err(not_found());
            }
            store.delete_ids(partition, vec![point]).await?;
            removed.refs.insert(by.clone());
            report.removed.push(by.clone());
        }
        Ref::Cand(id) | Ref::Mem(id) => {
            let stored = candidates::load(engine, partition, id)
                .await?
                .filter(|s| {
                    matches!(reference, Ref::Cand(_)) || s.status() == CandidateStatus::Approved
                })
                .ok_or_else(not_found)?;
            if stored.status() == CandidateStatus::Approved {
                report.removed.push(format!("mem:{id}"));
            }
            candidates::invalidate(engine, stored, &by, hard).await?;
            report.invalidated.push(format!("cand:{id}"));
        }
    }
    invalidate_derived(engine, partition, &removed, &by, hard, &mut report).await?;
    if hard {
        store.flush().await?;
    }
    Ok((documents, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgotten_documents_cover_every_chunk_ref() {
        let mut removed = Removed::default();
        removed.docs.insert("d1".into());
        removed.refs.insert("msg:c/2".into());
        assert!(removed.covers("doc:d1"));
        assert!(removed.covers("doc:d1#7"));
        assert!(!removed.covers("doc:d2#0"));
        assert!(removed.covers("msg:c/2"));
        assert!(!removed.covers("msg:c/20"));
        assert!(!removed.covers("evt:d1"));
    }
}
