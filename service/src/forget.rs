//! Forgetting: removing evidence and everything derived from it ([`Engine::forget`] by a ref;
//! deleting a document, a message or a conversation comes here too).
//!
//! Evidence is a document (all its chunks and versions' registry records), a message, a
//! conversation, the messages of a turn, or an event. Derived from it: candidates whose
//! evidence refs all pointed at it (invalidated, their memories removed from recall),
//! candidates that keep other evidence (the forgotten refs are dropped), facts likewise
//! (invalidated or narrowed, and so on through the facts that cite them as `fact:`
//! evidence), and the records of completed turns whose messages were deleted (kept as
//! tombstones, `TurnState::deleted`, so the turn id cannot be completed again).
//!
//! Knowledge and reasoning records are forgotten by their refs: `ent:` (with its
//! relationships and the entities merged into it), `pref:`, `fact:`, `rel:`, `trace:` (with
//! its steps and tool calls).
//!
//! Order: derived data first, evidence last. A crash (or a timeout) between the steps then
//! leaves evidence that still exists, or derived records that still point at evidence that
//! is gone — never an approved memory whose evidence is already deleted while the forget
//! reports failure and its retry answers 404. A retry finds what is left and finishes:
//! `404` only when neither the evidence nor anything still derived from it is stored.
//!
//! `hard` also deletes the records of invalidated candidates (which restate the evidence)
//! instead of keeping them for review, and flushes the store to disk before returning.
//!
//! Locks: `Engine::turn_lock`, then `Engine::review_lock`, then (documents only) the ingest
//! commit lock, so a forget never interleaves with a turn completion, a review decision or
//! a document version being written.

use std::collections::{BTreeSet, HashSet};

use cairn_ingest::catalog::{self, CommitGuard, DocumentEvidence};
use cairn_models::grant::Operation;
use cairn_models::ids::{event_record_id, forget_receipt_id, turn_record_id};
use cairn_models::knowledge;
use cairn_models::state::{ForgetState, RecordState};
use cairn_models::{
    failpoint, DocumentInfo, ModelError, Partition, PointKind, Ref, Scope, StoredPoint,
};
use cairn_store::{Filter, Hit, UpsertPoint};

use crate::access::admit;
use crate::auth::Principal;
use crate::candidates::{self, CandidateStatus, Stored};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::evidence::find_message;
use crate::recall::ForgetRequest;

pub use cairn_models::state::ForgetReport;

impl Engine {
    /// Forgets what a ref names (`doc:`, `msg:`, `conv:`, `turn:`, `evt:`, `cand:`, `mem:`)
    /// and what derives from it.
    pub async fn forget(
        &self,
        who: &Principal,
        req: ForgetRequest,
    ) -> Result<ForgetReport, ServiceError> {
        admit(who, &req.scope, Operation::Forget)?;
        let reference = Ref::parse_input(&req.reference)?;
        forget(self, &req.scope.partition(), &reference, req.hard).await
    }
}

/// The evidence a forget removes, for matching candidates' evidence refs. It describes the
/// forgotten ref, not only what is still stored, so that a retry after a crash matches the
/// candidates that still cite evidence deleted by the interrupted run.
#[derive(Debug, Default)]
struct Removed {
    docs: HashSet<String>,
    refs: HashSet<String>,
    /// Conversations forgotten whole: every `msg:<c>/<n>` of them is covered.
    convs: HashSet<String>,
}

impl Removed {
    fn is_empty(&self) -> bool {
        self.docs.is_empty() && self.refs.is_empty() && self.convs.is_empty()
    }

    fn covers(&self, evidence: &str) -> bool {
        if self.refs.contains(evidence) {
            return true;
        }
        match Ref::parse(evidence) {
            Ok(Ref::Doc { doc_id, .. }) => self.docs.contains(&doc_id),
            Ok(Ref::Msg { conversation, .. }) => self.convs.contains(&conversation),
            _ => false,
        }
    }
}

/// The turn records (turn id, record point id) the messages belong to.
fn turns_of(hits: &[Hit]) -> BTreeSet<(String, uuid::Uuid)> {
    hits.iter()
        .filter_map(|h| {
            let t = h.point.turn_id.as_ref()?;
            Some((t.clone(), turn_record_id(&h.point.scope(), t)))
        })
        .collect()
}

/// The messages' refs, ordered by conversation, then sequence number (not as text: 2
/// before 10).
fn message_refs(hits: &[Hit]) -> Vec<String> {
    let refs: BTreeSet<(String, u64, String)> = hits
        .iter()
        .map(|h| {
            (
                h.point.conversation_id.clone().unwrap_or_default(),
                h.point.seq.unwrap_or(0),
                h.point.reference(),
            )
        })
        .collect();
    refs.into_iter().map(|(_, _, r)| r).collect()
}

fn is_deleted(p: &StoredPoint) -> bool {
    matches!(&p.state, Some(RecordState::Turn(t)) if t.deleted)
}

async fn tombstone(
    engine: &Engine,
    partition: &Partition,
    turn_id: &str,
    record_id: uuid::Uuid,
    report: &mut ForgetReport,
) -> Result<(), ServiceError> {
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
    if !is_deleted(&record) {
        let Some(RecordState::Turn(state)) = record.state.as_mut() else {
            return Err(ServiceError::Internal(format!(
                "turn record of {turn_id} has no turn state"
            )));
        };
        state.deleted = true;
        state.deleted_at = Some(chrono::Utc::now().timestamp_millis());
        engine
            .store
            .upsert(vec![UpsertPoint::record(record_id, record)])
            .await?;
    }
    let t = Ref::turn(turn_id).to_string();
    if !report.tombstoned_turns.contains(&t) {
        report.tombstoned_turns.push(t);
    }
    Ok(())
}

/// What happens to a candidate that cites forgotten evidence.
enum Action {
    Invalidate,
    Narrow(Vec<String>),
}

/// The candidates still derived from the forgotten evidence, and what to do with each. An
/// invalidated candidate is done unless `hard` (which deletes its record); a narrowed one no
/// longer cites the evidence. So a retry plans nothing for what the first run finished.
async fn plan_candidates(
    engine: &Engine,
    partition: &Partition,
    removed: &Removed,
    hard: bool,
) -> Result<Vec<(Stored, Action)>, ServiceError> {
    let mut plan = Vec::new();
    if removed.is_empty() {
        return Ok(plan);
    }
    for stored in candidates::load_all(engine, partition).await? {
        let (gone, remaining): (Vec<String>, Vec<String>) = stored
            .evidence()
            .iter()
            .cloned()
            .partition(|r| removed.covers(r));
        if gone.is_empty() {
            continue;
        }
        if remaining.is_empty() {
            let live = matches!(
                stored.status(),
                CandidateStatus::Pending | CandidateStatus::Approved
            );
            if live || hard {
                plan.push((stored, Action::Invalidate));
            }
        } else {
            plan.push((stored, Action::Narrow(remaining)));
        }
    }
    Ok(plan)
}

/// Invalidates or narrows the planned candidates.
async fn apply_candidates(
    engine: &Engine,
    plan: Vec<(Stored, Action)>,
    by: &str,
    hard: bool,
    report: &mut ForgetReport,
) -> Result<(), ServiceError> {
    for (stored, action) in plan {
        let cand = Ref::cand(stored.id()).to_string();
        match action {
            Action::Invalidate => {
                candidates::invalidate(engine, stored, by, hard).await?;
                report.invalidated.push(cand);
            }
            Action::Narrow(remaining) => {
                candidates::narrow(engine, stored, remaining, by).await?;
                report.narrowed.push(cand);
            }
        }
    }
    Ok(())
}

/// Forgets what `reference` names in the partition. `404` when nothing of it is stored.
pub(crate) async fn forget(
    engine: &Engine,
    partition: &Partition,
    reference: &Ref,
    hard: bool,
) -> Result<ForgetReport, ServiceError> {
    Ok(forget_inner(engine, partition, reference, hard).await?.1)
}

/// Deletes a document (all sources at that id, and chunks of the id no registry record
/// names) and what derives from it. The documents are empty when only derived records were
/// left to handle (a retry after a crash).
pub(crate) async fn forget_document(
    engine: &Engine,
    partition: &Partition,
    doc_id: &str,
    hard: bool,
) -> Result<(Vec<DocumentInfo>, ForgetReport), ServiceError> {
    forget_inner(engine, partition, &Ref::doc(doc_id), hard).await
}

/// The evidence a forget found, deleted after the derived data.
enum Evidence<'a> {
    Document {
        doc_id: String,
        found: DocumentEvidence,
        /// Ingest commits are held off from the look-up to the deletion.
        commits: CommitGuard<'a>,
    },
    Messages(Vec<Hit>),
    Event(uuid::Uuid),
    /// Knowledge or reasoning records (an entity and its relationships, a trace and its
    /// steps and tool calls, a fact, a preference, a relationship).
    Records(Vec<Hit>),
    /// A candidate or memory: only derived data.
    None,
}

async fn forget_inner(
    engine: &Engine,
    partition: &Partition,
    reference: &Ref,
    hard: bool,
) -> Result<(Vec<DocumentInfo>, ForgetReport), ServiceError> {
    let by = reference.to_string();
    let mut report = ForgetReport {
        reference: by.clone(),
        hard,
        ..ForgetReport::default()
    };
    let mut removed = Removed::default();
    let not_found = || ServiceError::NotFound(format!("nothing stored as {by} in this scope"));
    let store = engine.store.as_ref();
    // Lock order: turns, then reviews (see Engine), then ingest commits (documents only).
    let _turns = engine.serial(crate::engine::Section::Turns).await?;
    let _reviews = engine.serial(crate::engine::Section::Reviews).await?;
    let _knowledge = engine.serial(crate::engine::Section::Knowledge).await?;

    // 1. Find what is stored; nothing is deleted yet.
    let mut turns: BTreeSet<(String, uuid::Uuid)> = BTreeSet::new();
    let (evidence, stored) = match reference {
        Ref::Doc { doc_id, .. } => {
            let commits = engine.ingestor.lock_commits().await?;
            let found = catalog::find_document_evidence(store, partition, doc_id).await?;
            removed.docs.insert(doc_id.clone());
            let stored = !found.is_empty();
            (
                Evidence::Document {
                    doc_id: doc_id.clone(),
                    found,
                    commits,
                },
                stored,
            )
        }
        Ref::Msg { conversation, seq } => {
            let hits = find_message(store, partition, conversation, *seq).await?;
            removed.refs.insert(by.clone());
            turns = turns_of(&hits);
            let stored = !hits.is_empty();
            (Evidence::Messages(hits), stored)
        }
        Ref::Conv(conversation) => {
            let filter = Filter::new()
                .eq("kind", PointKind::Message.as_str())
                .eq("conversation_id", conversation.as_str());
            let hits = store.scroll_all(partition, filter).await?;
            removed.convs.insert(conversation.clone());
            turns = turns_of(&hits);
            let stored = !hits.is_empty();
            (Evidence::Messages(hits), stored)
        }
        Ref::Turn(turn_id) => {
            let filter = Filter::new()
                .eq("kind", PointKind::Message.as_str())
                .eq("turn_id", turn_id.as_str());
            let hits = store.scroll_all(partition, filter).await?;
            removed
                .refs
                .extend(hits.iter().map(|h| h.point.reference()));
            turns = turns_of(&hits);
            // The turn's records name its messages even after they are gone (a retry), and
            // one not yet tombstoned still needs it.
            let records = store
                .scroll_all(
                    partition,
                    Filter::new()
                        .eq("kind", PointKind::Turn.as_str())
                        .eq("turn_id", turn_id.as_str()),
                )
                .await?;
            for r in records {
                if let Some(RecordState::Turn(t)) = &r.point.state {
                    removed.refs.insert(t.receipt.user_message_ref.clone());
                    removed.refs.insert(t.receipt.assistant_message_ref.clone());
                }
                if !is_deleted(&r.point) {
                    turns.insert((turn_id.clone(), r.id));
                }
            }
            let stored = !hits.is_empty();
            (Evidence::Messages(hits), stored)
        }
        Ref::Evt(id) => {
            let point = event_record_id(partition, id);
            removed.refs.insert(by.clone());
            let stored = !store.retrieve(partition, &[point], false).await?.is_empty();
            (Evidence::Event(point), stored)
        }
        Ref::Ent(_) | Ref::Pref(_) | Ref::Fact(_) | Ref::Rel(_) | Ref::Trace(_) => {
            let hits = knowledge_records(engine, partition, reference).await?;
            removed.refs.insert(by.clone());
            let stored = !hits.is_empty();
            (Evidence::Records(hits), stored)
        }
        Ref::Forget(_) | Ref::Grant(_) | Ref::Pred(_) => {
            // Receipts and grants are internal: no caller can name one (`Ref::parse_input`).
            return Err(ModelError::InvalidRef { value: by.clone() }.into());
        }
        Ref::Cand(id) | Ref::Mem(id) => {
            let stored = candidates::load(engine, partition, id)
                .await?
                .filter(|s| {
                    matches!(reference, Ref::Cand(_)) || s.status() == CandidateStatus::Approved
                })
                .ok_or_else(not_found)?;
            if stored.status() == CandidateStatus::Approved {
                report.removed.push(Ref::mem(id.as_str()).to_string());
            }
            candidates::invalidate(engine, stored, &by, hard).await?;
            report.invalidated.push(Ref::cand(id.as_str()).to_string());
            (Evidence::None, true)
        }
    };
    let plan = plan_candidates(engine, partition, &removed, hard).await?;
    let fact_plan = plan_facts(engine, partition, &removed, reference, hard).await?;
    let prior = load_receipt(engine, partition, reference).await?;
    if !stored && plan.is_empty() && fact_plan.is_empty() && turns.is_empty() {
        // Nothing left to do: a forget that already finished (its answer may have been lost
        // to a crash or a timeout) answers what it did; an unknown ref is 404.
        return match prior {
            Some((done, docs)) if !hard || done.hard => Ok((docs, done)),
            Some((mut done, docs)) => {
                // A hard forget after a soft one: nothing is left to delete, but the store
                // is flushed and the answer says the ref is now hard-forgotten.
                done.hard = true;
                store.flush().await?;
                save_receipt(engine, partition, reference, &done, &docs).await?;
                Ok((docs, done))
            }
            None => Err(not_found()),
        };
    }

    // 2. Derived data: turn tombstones, then candidates and their memories.
    for (turn_id, record_id) in turns {
        tombstone(engine, partition, &turn_id, record_id, &mut report).await?;
    }
    apply_candidates(engine, plan, &by, hard, &mut report).await?;
    apply_facts(engine, partition, fact_plan, reference, hard, &mut report).await?;
    // What a crash from here on must not lose: the derived changes just made, and the
    // documents about to be deleted (what `DELETE /v1/documents/{id}` answers).
    let mut documents = match &evidence {
        Evidence::Document { found, .. } => found.documents(),
        _ => Vec::new(),
    };
    if let Some((prior, prior_docs)) = &prior {
        merge_reports(&mut report, prior);
        if documents.is_empty() {
            documents = prior_docs.clone();
        }
    }
    save_receipt(engine, partition, reference, &report, &documents).await?;
    failpoint("forget.after_derived");

    // 3. The evidence. A hard forget also purges the cached vectors of the forgotten texts
    // (a vector can leak its text), so collect them before the points go.
    let mut purge: Vec<String> = Vec::new();
    if hard {
        match &evidence {
            Evidence::Document { doc_id, .. } => {
                let chunks = store
                    .scroll_all(
                        partition,
                        Filter::new()
                            .eq("kind", PointKind::Chunk.as_str())
                            .eq("doc_id", doc_id.as_str()),
                    )
                    .await?;
                purge.extend(chunks.iter().filter_map(|h| h.point.embedded_text()));
            }
            Evidence::Messages(hits) | Evidence::Records(hits) => {
                purge.extend(hits.iter().filter_map(|h| h.point.embedded_text()));
            }
            Evidence::Event(_) | Evidence::None => {}
        }
    }
    match evidence {
        Evidence::Document {
            doc_id,
            found,
            commits,
        } => {
            if !found.is_empty() {
                catalog::delete_document_evidence(store, partition, &doc_id, &found, &commits)
                    .await?;
                report.removed.push(Ref::doc(doc_id.as_str()).to_string());
                report.removed.extend(
                    (0..found.chunk_refs).map(|i| Ref::chunk(doc_id.as_str(), i).to_string()),
                );
            }
        }
        Evidence::Messages(hits) => {
            if !hits.is_empty() {
                let refs = message_refs(&hits);
                store
                    .delete_ids(partition, hits.into_iter().map(|h| h.id).collect())
                    .await?;
                report.removed.extend(refs);
            }
        }
        Evidence::Records(hits) => {
            if !hits.is_empty() {
                // The ref, and the entities merged into a forgotten entity.
                let mut refs = vec![by.clone()];
                for h in &hits {
                    let r = h.point.reference();
                    if h.point.kind == PointKind::Entity && !refs.contains(&r) {
                        refs.push(r);
                    }
                }
                store
                    .delete_ids(partition, hits.into_iter().map(|h| h.id).collect())
                    .await?;
                for r in refs {
                    if !report.removed.contains(&r) {
                        report.removed.push(r);
                    }
                }
            }
        }
        Evidence::Event(point) => {
            if stored {
                store.delete_ids(partition, vec![point]).await?;
                report.removed.push(by.clone());
            }
        }
        Evidence::None => {}
    }
    save_receipt(engine, partition, reference, &report, &documents).await?;
    failpoint("forget.after_evidence");
    if hard {
        store.flush().await?;
        if !purge.is_empty() {
            // Rewrites the cache file: blocking I/O, off the async workers.
            let embedder = engine.embedder.clone();
            tokio::task::spawn_blocking(move || embedder.purge_documents(&purge))
                .await
                .map_err(|e| ServiceError::Internal(format!("cache purge task: {e}")))??;
        }
    }
    Ok((documents, report))
}

/// The records a knowledge or reasoning ref names: the record itself and, for an entity,
/// its relationships; for a trace, its steps and tool calls.
async fn knowledge_records(
    engine: &Engine,
    partition: &Partition,
    reference: &Ref,
) -> Result<Vec<Hit>, ServiceError> {
    let (kind, id, dependants) = match reference {
        Ref::Ent(id) => (PointKind::Entity, id, Some(knowledge::key::entity(id))),
        Ref::Trace(id) => (PointKind::Trace, id, Some(knowledge::key::trace(id))),
        Ref::Pref(id) => (PointKind::Preference, id, None),
        Ref::Fact(id) => (PointKind::Fact, id, None),
        Ref::Rel(id) => (PointKind::Relationship, id, None),
        _ => return Ok(Vec::new()),
    };
    let mut hits: Vec<Hit> = crate::records::load_point(engine, partition, kind, id, false)
        .await?
        .into_iter()
        .collect();
    let mut dependants: Vec<String> = dependants.into_iter().collect();
    if let Ref::Ent(id) = reference {
        // The entities merged into this one are the same entity under other names (their
        // names are its aliases): they go with it, or their ids would resolve to nothing
        // and writing their names again would answer an entity that no longer exists.
        let merged = merged_into(engine, partition, id).await?;
        dependants.extend(
            merged
                .iter()
                .map(|h| knowledge::key::entity(&h.id.to_string())),
        );
        hits.extend(merged);
    }
    for key in dependants {
        // Also what is left of them after an interrupted forget (the record already gone).
        hits.extend(
            engine
                .store
                .scroll_all(partition, Filter::new().eq("keys", key))
                .await?
                .into_iter()
                .filter(|h| h.point.kind != kind),
        );
    }
    let mut seen = HashSet::new();
    hits.retain(|h| seen.insert(h.id));
    Ok(hits)
}

/// The entities merged into `id`, directly or through others merged into it.
async fn merged_into(
    engine: &Engine,
    partition: &Partition,
    id: &str,
) -> Result<Vec<Hit>, ServiceError> {
    // Merged entities carry the inactive key; few enough to read them all.
    let merged: Vec<(Hit, String)> = engine
        .store
        .scroll_all(
            partition,
            Filter::new()
                .eq("kind", PointKind::Entity.as_str())
                .eq("keys", knowledge::key::INACTIVE),
        )
        .await?
        .into_iter()
        .filter_map(|h| match &h.point.state {
            Some(RecordState::Entity(e)) => e.merged_into.clone().map(|into| (h, into)),
            _ => None,
        })
        .collect();
    let mut gone: HashSet<String> = HashSet::from([id.to_string()]);
    let mut out = Vec::new();
    loop {
        let before = out.len();
        for (h, into) in &merged {
            let me = h.id.to_string();
            if gone.contains(into) && !gone.contains(&me) {
                gone.insert(me);
                out.push(h.clone());
            }
        }
        if out.len() == before {
            return Ok(out);
        }
    }
}

/// What to do with a fact whose evidence is (partly) forgotten.
enum FactAction {
    Invalidate,
    Narrow(Vec<Ref>),
}

/// The facts citing forgotten evidence: invalidated when all of it is gone (deleted when
/// `hard`), narrowed otherwise. Transitively: a fact resting on a fact this forget
/// invalidates (`fact:` evidence) loses that evidence too, as does one citing a fact no
/// longer stored (deleted by a hard forget, maybe by an interrupted run of this one). Like
/// candidates, a retry plans nothing for what is done: the facts this forget invalidated
/// earlier (`invalidated_by` names it) still count as gone for the facts resting on them.
async fn plan_facts(
    engine: &Engine,
    partition: &Partition,
    removed: &Removed,
    by: &Ref,
    hard: bool,
) -> Result<Vec<(Hit, knowledge::Fact, FactAction)>, ServiceError> {
    if removed.is_empty() {
        return Ok(Vec::new());
    }
    let facts: Vec<(Hit, knowledge::Fact)> = engine
        .store
        .scroll_all(
            partition,
            Filter::new().eq("kind", PointKind::Fact.as_str()),
        )
        .await?
        .into_iter()
        .filter_map(|h| match h.point.state.clone() {
            Some(RecordState::Fact(f)) => Some((h, f)),
            _ => None,
        })
        .collect();
    let stored: HashSet<String> = facts.iter().map(|(_, f)| f.id.clone()).collect();
    // `fact:<id>` refs that count as forgotten besides `removed`.
    let mut gone_facts: HashSet<String> = facts
        .iter()
        .filter(|(_, f)| {
            f.status == knowledge::FactStatus::Invalidated && f.invalidated_by.contains(by)
        })
        .map(|(_, f)| Ref::Fact(f.id.clone()).to_string())
        .collect();
    let covers = |r: &Ref, gone_facts: &HashSet<String>| {
        let printed = r.to_string();
        removed.covers(&printed)
            || gone_facts.contains(&printed)
            || matches!(r, Ref::Fact(id) if !stored.contains(id))
    };
    // To a fixed point: each round may invalidate facts others rest on.
    loop {
        let mut plan = Vec::new();
        let mut more = false;
        for (h, f) in &facts {
            let (gone, remaining): (Vec<Ref>, Vec<Ref>) = f
                .evidence_refs
                .iter()
                .cloned()
                .partition(|r| covers(r, &gone_facts));
            if gone.is_empty() {
                continue;
            }
            if remaining.is_empty() {
                more |= gone_facts.insert(Ref::Fact(f.id.clone()).to_string());
                if f.status != knowledge::FactStatus::Invalidated || hard {
                    plan.push((h.clone(), f.clone(), FactAction::Invalidate));
                }
            } else {
                plan.push((h.clone(), f.clone(), FactAction::Narrow(remaining)));
            }
        }
        if !more {
            return Ok(plan);
        }
    }
}

async fn apply_facts(
    engine: &Engine,
    partition: &Partition,
    plan: Vec<(Hit, knowledge::Fact, FactAction)>,
    by: &Ref,
    hard: bool,
    report: &mut ForgetReport,
) -> Result<(), ServiceError> {
    for (hit, mut f, action) in plan {
        let fact_ref = Ref::Fact(f.id.clone()).to_string();
        if !f.invalidated_by.contains(by) {
            f.invalidated_by.push(by.clone());
        }
        match action {
            FactAction::Invalidate if hard => {
                engine.store.delete_ids(partition, vec![hit.id]).await?;
                report.invalidated.push(fact_ref);
                continue;
            }
            FactAction::Invalidate => {
                f.status = knowledge::FactStatus::Invalidated;
                report.invalidated.push(fact_ref);
            }
            FactAction::Narrow(remaining) => {
                f.evidence_refs = remaining;
                report.narrowed.push(fact_ref);
            }
        }
        crate::knowledge::write_fact(engine, &hit.point.scope(), hit.point.trust, &f).await?;
    }
    Ok(())
}

/// The stored receipt of an earlier forget of `by` (its report and the documents it
/// deleted), if any.
async fn load_receipt(
    engine: &Engine,
    partition: &Partition,
    by: &Ref,
) -> Result<Option<(ForgetReport, Vec<DocumentInfo>)>, ServiceError> {
    let hits = engine
        .store
        .retrieve(partition, &[forget_receipt_id(partition, by)], false)
        .await?;
    Ok(match hits.into_iter().next().and_then(|h| h.point.state) {
        Some(RecordState::Forget(f)) => Some((f.report, f.documents)),
        _ => None,
    })
}

/// Writes (or overwrites) the receipt of a forget of `by`. Twice per forget: after the
/// derived changes and after the evidence is gone, so a retry at any point can answer in
/// full.
async fn save_receipt(
    engine: &Engine,
    partition: &Partition,
    by: &Ref,
    report: &ForgetReport,
    documents: &[DocumentInfo],
) -> Result<(), ServiceError> {
    let scope = Scope {
        tenant: partition.tenant.clone(),
        user: partition.user.clone(),
        namespace: partition.namespace.clone(),
        agent: "cairn".into(),
        session: "forget".into(),
    };
    let mut record = StoredPoint::new(
        PointKind::Forget,
        &scope,
        cairn_models::TrustOrigin::System,
        chrono::Utc::now().timestamp_millis(),
    );
    record.source = Some(report.reference.clone());
    record.state = Some(RecordState::Forget(ForgetState {
        report: report.clone(),
        documents: documents.to_vec(),
    }));
    engine
        .store
        .upsert(vec![UpsertPoint::record(
            forget_receipt_id(partition, by),
            record,
        )])
        .await?;
    Ok(())
}

/// Adds what an interrupted earlier run did to this run's report.
fn merge_reports(report: &mut ForgetReport, prior: &ForgetReport) {
    fn union(into: &mut Vec<String>, from: &[String]) {
        for r in from {
            if !into.contains(r) {
                into.push(r.clone());
            }
        }
    }
    union(&mut report.removed, &prior.removed);
    union(&mut report.invalidated, &prior.invalidated);
    union(&mut report.narrowed, &prior.narrowed);
    union(&mut report.tombstoned_turns, &prior.tombstoned_turns);
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
