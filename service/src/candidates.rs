//! Third-party evidence and candidate memories: other agents propose, a trusted caller
//! decides.
//!
//! - An **event** (`evt:<id>`) is evidence posted by a third-party agent (see `events`):
//!   stored verbatim, citable as evidence, *not searchable*.
//! - A **candidate** (`cand:<id>`) is a proposed memory citing evidence (`doc:`, `msg:`,
//!   `evt:` refs that must exist in the scope). It starts `pending`; a caller with a full
//!   key approves or rejects it. Only an approved candidate is written as a searchable
//!   memory point (`mem:<id>`, trust origin `third_party_agent`, citing its evidence).
//!   Approve and reject are idempotent; the other decision afterwards is `409 conflict`.
//! - Forgetting evidence (see `forget`) invalidates candidates whose evidence is all gone.
//!
//! Ids are pure functions of the scope and the content, so a replayed proposal lands on
//! the same record (the first proposal's confidence and metadata are kept).

use cairn_models::failpoint;
use cairn_models::grant::Operation;
use cairn_models::ids::{candidate_id, candidate_record_id, memory_point_id, sha256_hex};
use cairn_models::knowledge::{FactStatus, ProposedKnowledge};
use cairn_models::limits;
use cairn_models::scope::validate_component;
use cairn_models::state::{CandidateState, MemoryState, RecordState};
use cairn_models::{Partition, PointKind, Ref, Scope, StoredPoint, TrustOrigin};
use cairn_store::{Filter, UpsertPoint};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::{admit, Page, PageRequest};
use crate::auth::{authorize, bind_agent, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::evidence::exists;

/// Longest candidate content, in bytes.
pub const MAX_CANDIDATE_BYTES: usize = 8 * 1024;
/// Most evidence refs of one candidate.
pub const MAX_EVIDENCE: usize = 32;

pub use cairn_models::state::CandidateStatus;

/// `POST /v1/candidates` body; the arguments of MCP's `propose_memory`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CandidateRequest {
    pub scope: Scope,
    /// The proposing third-party agent (`[A-Za-z0-9_.-]+`).
    pub source_agent: String,
    /// What kind of memory this is (`fact`, `preference`, ...; `[A-Za-z0-9_.-]+`).
    pub memory_type: String,
    /// The proposed memory (at most 8 KiB).
    pub content: String,
    /// 1 to 32 refs (`doc:<id>[#<chunk>]`, `msg:<conversation>/<seq>`, `evt:<id>`), each of
    /// which must exist in the scope.
    pub evidence_refs: Vec<String>,
    /// The proposer's confidence, 0 to 1.
    pub confidence: f64,
    /// At most 16 KiB serialized.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    #[cfg_attr(
        feature = "jsonschema",
        schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")
    )]
    pub metadata: Option<serde_json::Value>,
    /// Structured knowledge the candidate proposes (`{"kind": "fact", subject, predicate,
    /// object, valid_from?, valid_until?}`, `{"kind": "preference", ...}` or
    /// `{"kind": "entity", ...}`; `memory_type` must name the same kind). Approving writes it
    /// as a fact, preference or entity with trust origin `third_party_agent`; a fact cites
    /// the candidate's evidence, so forgetting that evidence invalidates it.
    #[serde(default)]
    pub knowledge: Option<ProposedKnowledge>,
}

/// `POST /v1/candidates/{id}/approve` and `/reject` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    pub scope: Scope,
    /// Why (at most 1 KiB); kept with the decision.
    #[serde(default)]
    pub note: Option<String>,
}

/// A candidate as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CandidateView {
    pub candidate_id: String,
    /// `cand:<id>`.
    #[serde(rename = "ref")]
    pub reference: String,
    pub status: CandidateStatus,
    pub source_agent: String,
    pub memory_type: String,
    pub content: String,
    pub evidence_refs: Vec<String>,
    pub confidence: f64,
    /// Epoch ms.
    pub proposed_at: i64,
    /// Epoch ms of the approval, rejection or invalidation.
    pub decided_at: Option<i64>,
    pub note: Option<String>,
    /// While approved, the ref recall cites: `mem:<id>`, or the `fact:`, `pref:` or `ent:`
    /// of the knowledge it proposed.
    pub memory_ref: Option<String>,
    /// The forgotten refs that invalidated it.
    pub invalidated_by: Vec<String>,
    /// The structured knowledge it proposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<ProposedKnowledge>,
    /// The record its approval wrote (`fact:<id>`, `pref:<id>`, `ent:<id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge_ref: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// What `POST /v1/candidates` returns.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProposeResponse {
    /// False when the same proposal was already stored (whatever its status now).
    pub created: bool,
    pub candidate: CandidateView,
}

impl Engine {
    /// Proposes a candidate memory citing evidence (idempotent).
    pub async fn propose(
        &self,
        who: &Principal,
        req: CandidateRequest,
    ) -> Result<ProposeResponse, ServiceError> {
        let mut req = req;
        bind_agent(who, &mut req.source_agent)?;
        admit(who, &req.scope, Operation::Propose)?;
        limits::check_metadata("metadata", req.metadata.as_ref())?;
        limits::check_count("evidence_refs", req.evidence_refs.len(), MAX_EVIDENCE)?;
        propose(self, req).await
    }

    /// The partition's candidates, optionally of one status, oldest first; one page of them.
    pub async fn list_candidates(
        &self,
        who: &Principal,
        partition: &Partition,
        status: Option<CandidateStatus>,
        page: PageRequest,
    ) -> Result<Page<CandidateView>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        Ok(page.of(list(self, partition, status).await?))
    }

    /// One candidate.
    pub async fn get_candidate(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<CandidateView, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        get(self, partition, id).await
    }

    /// Approves (`approve`) or rejects a candidate.
    pub async fn decide(
        &self,
        who: &Principal,
        id: &str,
        req: DecisionRequest,
        approve: bool,
    ) -> Result<CandidateView, ServiceError> {
        admit(who, &req.scope, Operation::DecideCandidates)?;
        decide(self, &req.scope, id, approve, req.note).await
    }
}

/// A stored candidate: its record and decoded state.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    point: StoredPoint,
    state: CandidateState,
}

impl Stored {
    fn decode(point: StoredPoint) -> Result<Stored, ServiceError> {
        match &point.state {
            Some(RecordState::Candidate(state)) => Ok(Stored {
                state: state.clone(),
                point,
            }),
            other => Err(ServiceError::Internal(format!(
                "stored candidate without its review state: {other:?}"
            ))),
        }
    }

    pub(crate) fn id(&self) -> String {
        self.point.doc_id.clone().unwrap_or_default()
    }

    pub(crate) fn status(&self) -> CandidateStatus {
        self.state.status
    }

    pub(crate) fn evidence(&self) -> Vec<String> {
        refs_as_strings(&self.state.evidence_refs)
    }

    pub(crate) fn view(&self) -> CandidateView {
        let id = self.id();
        CandidateView {
            reference: Ref::cand(id.as_str()).to_string(),
            status: self.state.status,
            source_agent: self.state.source_agent.clone(),
            memory_type: self.state.memory_type.clone(),
            content: self.point.text.clone().unwrap_or_default(),
            evidence_refs: refs_as_strings(&self.state.evidence_refs),
            confidence: self.state.confidence,
            proposed_at: self.point.ts,
            decided_at: self.state.decided_at,
            note: self.state.note.clone(),
            memory_ref: (self.state.status == CandidateStatus::Approved).then(|| {
                match &self.state.knowledge_ref {
                    Some(r) => r.to_string(),
                    None => Ref::mem(id.as_str()).to_string(),
                }
            }),
            invalidated_by: refs_as_strings(&self.state.invalidated_by),
            knowledge: self.state.knowledge.clone(),
            knowledge_ref: self.state.knowledge_ref.as_ref().map(ToString::to_string),
            metadata: self.point.metadata.clone(),
            candidate_id: id,
        }
    }
}

fn refs_as_strings(refs: &[Ref]) -> Vec<String> {
    refs.iter().map(ToString::to_string).collect()
}

fn partition_of(p: &StoredPoint) -> Partition {
    Partition {
        tenant: p.tenant.clone(),
        user: p.user.clone(),
        namespace: p.namespace.clone(),
    }
}

/// Writes a candidate record (not searchable: no vectors).
async fn save(engine: &Engine, stored: &Stored) -> Result<(), ServiceError> {
    let mut point = stored.point.clone();
    point.state = Some(RecordState::Candidate(stored.state.clone()));
    let id = candidate_record_id(&partition_of(&point), &stored.id());
    engine
        .store
        .upsert(vec![UpsertPoint {
            id,
            dense: None,
            bm25_text: None,
            sparse: None,
            payload: point,
        }])
        .await?;
    Ok(())
}

/// Loads a candidate of the partition.
pub(crate) async fn load(
    engine: &Engine,
    partition: &Partition,
    id: &str,
) -> Result<Option<Stored>, ServiceError> {
    match engine
        .store
        .retrieve(partition, &[candidate_record_id(partition, id)], false)
        .await?
        .into_iter()
        .next()
    {
        Some(h) => Ok(Some(Stored::decode(h.point)?)),
        None => Ok(None),
    }
}

/// Every candidate of the partition, oldest proposal first.
pub(crate) async fn load_all(
    engine: &Engine,
    partition: &Partition,
) -> Result<Vec<Stored>, ServiceError> {
    let hits = engine
        .store
        .scroll_all(
            partition,
            Filter::new().eq("kind", PointKind::Candidate.as_str()),
        )
        .await?;
    let mut out = hits
        .into_iter()
        .map(|h| Stored::decode(h.point))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by(|a, b| {
        a.point
            .ts
            .cmp(&b.point.ts)
            .then_with(|| a.id().cmp(&b.id()))
    });
    Ok(out)
}

/// Canonical evidence refs: parsed, evidence kinds only, sorted, deduplicated.
fn canonical_evidence(refs: &[String]) -> Result<Vec<Ref>, ServiceError> {
    if refs.is_empty() || refs.len() > MAX_EVIDENCE {
        return Err(ServiceError::InvalidRequest(format!(
            "evidence_refs must hold 1 to {MAX_EVIDENCE} refs"
        )));
    }
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        let parsed = Ref::parse_input(r)?;
        if !parsed.is_evidence() {
            return Err(ServiceError::InvalidRequest(format!(
                "{r} cannot be evidence (use doc:, msg: or evt: refs)"
            )));
        }
        out.push(parsed);
    }
    out.sort_by_key(|r| r.to_string());
    out.dedup();
    Ok(out)
}

/// The refs of `refs` that no longer exist in the partition.
async fn missing(
    engine: &Engine,
    partition: &Partition,
    refs: &[Ref],
) -> Result<Vec<String>, ServiceError> {
    let mut out = Vec::new();
    for r in refs {
        if !exists(engine.store.as_ref(), partition, r).await? {
            out.push(r.to_string());
        }
    }
    Ok(out)
}

/// Stores a pending candidate (idempotent: the same proposal returns the stored one).
pub(crate) async fn propose(
    engine: &Engine,
    req: CandidateRequest,
) -> Result<ProposeResponse, ServiceError> {
    req.scope.validate()?;
    validate_component("source_agent", &req.source_agent)?;
    validate_component("memory_type", &req.memory_type)?;
    if req.content.trim().is_empty() || req.content.len() > MAX_CANDIDATE_BYTES {
        return Err(ServiceError::InvalidRequest(format!(
            "content must be 1 to {MAX_CANDIDATE_BYTES} bytes"
        )));
    }
    if !(0.0..=1.0).contains(&req.confidence) {
        return Err(ServiceError::InvalidRequest(
            "confidence must be between 0 and 1".into(),
        ));
    }
    let evidence = canonical_evidence(&req.evidence_refs)?;
    if let Some(k) = &req.knowledge {
        if k.kind() != req.memory_type {
            return Err(ServiceError::InvalidRequest(format!(
                "memory_type is {:?} but the proposed knowledge is a {}",
                req.memory_type,
                k.kind()
            )));
        }
        crate::knowledge::check_proposal(k)?;
    }
    let partition = req.scope.partition();
    let id = candidate_id(
        &partition,
        &req.source_agent,
        &req.memory_type,
        &req.content,
        &evidence,
    );

    let _serial = engine.serial(crate::engine::Section::Reviews).await?;
    if let Some(existing) = load(engine, &partition, &id).await? {
        return Ok(ProposeResponse {
            created: false,
            candidate: existing.view(),
        });
    }
    let missing = missing(engine, &partition, &evidence).await?;
    if !missing.is_empty() {
        return Err(ServiceError::EvidenceNotFound(format!(
            "evidence not found in this scope: {}",
            missing.join(", ")
        )));
    }
    let mut scope = req.scope.clone();
    scope.agent = req.source_agent.clone();
    let mut point = StoredPoint::new(
        PointKind::Candidate,
        &scope,
        TrustOrigin::ThirdPartyAgent,
        chrono::Utc::now().timestamp_millis(),
    );
    point.doc_id = Some(id);
    point.text = Some(req.content.clone());
    point.content_hash = Some(sha256_hex(req.content.as_bytes()));
    // The caller's metadata, as sent; the review state goes in `state`.
    point.metadata = req.metadata;
    let stored = Stored {
        point,
        state: CandidateState {
            status: CandidateStatus::Pending,
            source_agent: req.source_agent,
            memory_type: req.memory_type,
            evidence_refs: evidence,
            confidence: req.confidence,
            decided_at: None,
            note: None,
            invalidated_by: Vec::new(),
            knowledge: req.knowledge,
            knowledge_ref: None,
        },
    };
    save(engine, &stored).await?;
    Ok(ProposeResponse {
        created: true,
        candidate: stored.view(),
    })
}

/// One candidate of the partition.
pub(crate) async fn get(
    engine: &Engine,
    partition: &Partition,
    id: &str,
) -> Result<CandidateView, ServiceError> {
    validate_component("candidate_id", id)?;
    load(engine, partition, id)
        .await?
        .map(|s| s.view())
        .ok_or_else(|| ServiceError::NotFound(format!("no candidate {id} in this scope")))
}

/// The candidates of the partition, optionally of one status, oldest first.
pub(crate) async fn list(
    engine: &Engine,
    partition: &Partition,
    status: Option<CandidateStatus>,
) -> Result<Vec<CandidateView>, ServiceError> {
    Ok(load_all(engine, partition)
        .await?
        .into_iter()
        .filter(|s| status.is_none_or(|st| s.status() == st))
        .map(|s| s.view())
        .collect())
}

/// The searchable text and citation source of an approved memory.
fn memory_source(state: &CandidateState) -> String {
    format!(
        "agent {}; evidence {}",
        state.source_agent,
        refs_as_strings(&state.evidence_refs).join(", ")
    )
}

/// Writes (or rewrites) the searchable memory point of an approved candidate.
pub(crate) async fn write_memory(engine: &Engine, stored: &Stored) -> Result<(), ServiceError> {
    let partition = partition_of(&stored.point);
    let text = stored.point.text.clone().unwrap_or_default();
    let mut vectors = engine.embedder.embed_documents(vec![text.clone()]).await?;
    let dense = vectors
        .pop()
        .ok_or_else(|| ServiceError::Internal("no embedding for a memory".into()))?;
    let mut p = stored.point.clone();
    p.kind = PointKind::Memory;
    p.source = Some(memory_source(&stored.state));
    p.state = Some(RecordState::Memory(MemoryState {
        candidate_id: stored.id(),
        memory_type: stored.state.memory_type.clone(),
        confidence: stored.state.confidence,
        evidence_refs: stored.state.evidence_refs.clone(),
    }));
    engine
        .store
        .upsert(vec![UpsertPoint {
            id: memory_point_id(&partition, &stored.id()),
            dense: Some(dense),
            bm25_text: Some(text),
            sparse: None,
            payload: p,
        }])
        .await?;
    Ok(())
}

/// What an approval writes: the structured knowledge the candidate proposes (the fact,
/// preference or entity is then its memory: recall cites it, not a `mem:` restatement of
/// the same claim), or else the searchable `mem:` point.
async fn write_approved(engine: &Engine, stored: &mut Stored) -> Result<(), ServiceError> {
    if stored.state.knowledge.is_some() {
        write_knowledge(engine, stored).await
    } else {
        write_memory(engine, stored).await
    }
}

/// Whether what an approval writes is stored.
async fn approved_stored(engine: &Engine, stored: &Stored) -> Result<bool, ServiceError> {
    if stored.state.knowledge.is_none() {
        return memory_stored(engine, stored).await;
    }
    let partition = partition_of(&stored.point);
    Ok(match &stored.state.knowledge_ref {
        Some(Ref::Fact(id)) | Some(Ref::Pref(id)) | Some(Ref::Ent(id)) => {
            match uuid::Uuid::parse_str(id) {
                Ok(u) => !engine
                    .store
                    .retrieve(&partition, &[u], false)
                    .await?
                    .is_empty(),
                Err(_) => false,
            }
        }
        _ => false,
    })
}

/// Whether the searchable memory point of a candidate is stored.
async fn memory_stored(engine: &Engine, stored: &Stored) -> Result<bool, ServiceError> {
    let partition = partition_of(&stored.point);
    Ok(!engine
        .store
        .retrieve(
            &partition,
            &[memory_point_id(&partition, &stored.id())],
            false,
        )
        .await?
        .is_empty())
}

/// Removes the searchable memory point of a candidate (if any).
pub(crate) async fn remove_memory(engine: &Engine, stored: &Stored) -> Result<(), ServiceError> {
    let partition = partition_of(&stored.point);
    engine
        .store
        .delete_ids(&partition, vec![memory_point_id(&partition, &stored.id())])
        .await?;
    Ok(())
}

/// Marks a candidate invalidated (soft forget) or deletes its record (hard), and removes its
/// memory. Called with `review_lock` held.
pub(crate) async fn invalidate(
    engine: &Engine,
    mut stored: Stored,
    by: &str,
    hard: bool,
) -> Result<(), ServiceError> {
    remove_memory(engine, &stored).await?;
    forget_knowledge(engine, &stored, by, hard).await?;
    if hard {
        let partition = partition_of(&stored.point);
        engine
            .store
            .delete_ids(
                &partition,
                vec![candidate_record_id(&partition, &stored.id())],
            )
            .await?;
        return Ok(());
    }
    stored.state.status = CandidateStatus::Invalidated;
    stored.state.decided_at = Some(chrono::Utc::now().timestamp_millis());
    note_invalidated_by(&mut stored, by)?;
    save(engine, &stored).await
}

/// Writes the knowledge an approved candidate proposes, as `third_party_agent`, and records
/// its ref on the candidate. A fact cites the candidate's evidence (so forgetting that
/// evidence invalidates it like the candidate) with the candidate's confidence; it never
/// supersedes by itself (a single-valued predicate's declaration still applies).
async fn write_knowledge(engine: &Engine, stored: &mut Stored) -> Result<(), ServiceError> {
    use crate::knowledge::{EntityRequest, FactRequest, PreferenceRequest};
    let Some(k) = stored.state.knowledge.clone() else {
        return Ok(());
    };
    let scope = stored.point.scope();
    let trust = TrustOrigin::ThirdPartyAgent;
    let reference = match k {
        ProposedKnowledge::Fact {
            subject,
            predicate,
            object,
            valid_from,
            valid_until,
        } => {
            let out = engine
                .store_fact(
                    FactRequest {
                        scope,
                        subject,
                        predicate,
                        object,
                        valid_from: valid_from.map(Into::into),
                        valid_until: valid_until.map(Into::into),
                        confidence: Some(stored.state.confidence),
                        evidence_refs: stored.evidence(),
                        supersede: false,
                        trust_origin: Some(trust),
                    },
                    trust,
                )
                .await?;
            Ref::Fact(out.fact.id)
        }
        ProposedKnowledge::Preference {
            category,
            preference,
            context,
        } => Ref::Pref(
            engine
                .store_preference(
                    PreferenceRequest {
                        scope,
                        category,
                        preference,
                        context,
                        trust_origin: Some(trust),
                    },
                    trust,
                )
                .await?
                .id,
        ),
        ProposedKnowledge::Entity {
            name,
            entity_type,
            description,
            aliases,
        } => Ref::Ent(
            engine
                .store_entity(
                    EntityRequest {
                        scope,
                        name,
                        entity_type,
                        subtype: None,
                        description,
                        aliases,
                        trust_origin: Some(trust),
                    },
                    trust,
                )
                .await?
                .id,
        ),
    };
    stored.state.knowledge_ref = Some(reference);
    save(engine, stored).await
}

/// When a candidate is invalidated: the fact its approval wrote is invalidated too (deleted
/// when `hard`); a preference or an entity it wrote is deleted if it is still only the
/// third party's (a record a trusted writer also wrote stays).
async fn forget_knowledge(
    engine: &Engine,
    stored: &Stored,
    by: &str,
    hard: bool,
) -> Result<(), ServiceError> {
    let Some(reference) = &stored.state.knowledge_ref else {
        return Ok(());
    };
    let partition = partition_of(&stored.point);
    let (kind, id) = match reference {
        Ref::Fact(id) => (PointKind::Fact, id),
        Ref::Pref(id) => (PointKind::Preference, id),
        Ref::Ent(id) => (PointKind::Entity, id),
        _ => return Ok(()),
    };
    let Some(hit) = crate::records::load_point(engine, &partition, kind, id, false).await? else {
        return Ok(());
    };
    match (&hit.point.state, hard) {
        (Some(RecordState::Fact(f)), false) if f.status != FactStatus::Invalidated => {
            let mut f = f.clone();
            f.status = FactStatus::Invalidated;
            let by = Ref::parse(by)?;
            if !f.invalidated_by.contains(&by) {
                f.invalidated_by.push(by);
            }
            crate::knowledge::write_fact(engine, &hit.point.scope(), hit.point.trust, &f).await?;
        }
        (Some(RecordState::Fact(_)), false) => {}
        _ if hit.point.trust == TrustOrigin::ThirdPartyAgent || kind == PointKind::Fact => {
            engine.store.delete_ids(&partition, vec![hit.id]).await?;
        }
        _ => {}
    }
    Ok(())
}

fn note_invalidated_by(stored: &mut Stored, by: &str) -> Result<(), ServiceError> {
    let by = Ref::parse(by)?;
    if !stored.state.invalidated_by.contains(&by) {
        stored.state.invalidated_by.push(by);
    }
    Ok(())
}

/// Drops forgotten refs from a candidate that keeps other evidence (and rewrites its memory
/// when approved). Called with `review_lock` held.
pub(crate) async fn narrow(
    engine: &Engine,
    mut stored: Stored,
    remaining: Vec<String>,
    by: &str,
) -> Result<(), ServiceError> {
    stored.state.evidence_refs = remaining
        .iter()
        .map(|r| Ref::parse(r))
        .collect::<Result<_, _>>()?;
    note_invalidated_by(&mut stored, by)?;
    // A plain memory restates its evidence refs; a fact's evidence is narrowed by the same
    // forget (it cites the same refs).
    if stored.state.status == CandidateStatus::Approved && stored.state.knowledge.is_none() {
        write_memory(engine, &stored).await?;
    }
    save(engine, &stored).await
}

/// Approves or rejects a candidate. Idempotent per decision; the other decision, or any
/// decision on an invalidated candidate, is `409 conflict`.
pub(crate) async fn decide(
    engine: &Engine,
    scope: &Scope,
    id: &str,
    approve: bool,
    note: Option<String>,
) -> Result<CandidateView, ServiceError> {
    scope.validate()?;
    validate_component("candidate_id", id)?;
    if note.as_ref().is_some_and(|n| n.len() > 1024) {
        return Err(ServiceError::InvalidRequest(
            "note must be at most 1024 bytes".into(),
        ));
    }
    let partition = scope.partition();
    let _serial = engine.serial(crate::engine::Section::Reviews).await?;
    let mut stored = load(engine, &partition, id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no candidate {id} in this scope")))?;
    let wanted = if approve {
        CandidateStatus::Approved
    } else {
        CandidateStatus::Rejected
    };
    match stored.state.status {
        s if s == wanted => {
            // Idempotent, and a repair: the status is written before the memory, so a crash
            // in between leaves "approved" without its memory point; write it now.
            if approve && !approved_stored(engine, &stored).await? {
                write_approved(engine, &mut stored).await?;
            }
            return Ok(stored.view());
        }
        CandidateStatus::Pending => {}
        other => {
            return Err(ServiceError::Conflict(format!(
                "candidate {id} is {}; it cannot be {}",
                other.as_str(),
                if approve { "approved" } else { "rejected" }
            )));
        }
    }
    let before = stored.clone();
    stored.state.status = wanted;
    stored.state.decided_at = Some(chrono::Utc::now().timestamp_millis());
    stored.state.note = note;
    if approve {
        let evidence = canonical_evidence(&stored.evidence())?;
        let missing = missing(engine, &partition, &evidence).await?;
        if !missing.is_empty() {
            return Err(ServiceError::Conflict(format!(
                "candidate {id} cites evidence that no longer exists: {}",
                missing.join(", ")
            )));
        }
        // The status record first, then the memory: a crash in between leaves an approved
        // candidate without a memory point, which approving again repairs (above). The other
        // order could leave a searchable memory of a candidate still pending, which nothing
        // finds to clean up.
        save(engine, &stored).await?;
        failpoint("approve.after_status");
        if let Err(e) = write_approved(engine, &mut stored).await {
            // "approved" is not reported before the memory is stored: put the decision back
            // (best effort; if this fails too, approving again repairs it).
            if let Err(undo) = save(engine, &before).await {
                tracing::warn!(
                    "candidate {id}: approval not undone after a failed memory write: {undo}"
                );
            }
            return Err(e);
        }
    } else {
        save(engine, &stored).await?;
        remove_memory(engine, &stored).await?;
    }
    Ok(stored.view())
}
