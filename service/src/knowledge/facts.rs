//! Facts and predicate declarations: supersession (asked for, or by a single-valued
//! predicate), conflicts otherwise, history kept, evidence checked.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use cairn_models::ids;
use cairn_models::knowledge::{
    key, normalize_name, normalize_predicate, Cardinality, Fact, FactStatus, Predicate,
};
use cairn_models::{
    limits, Partition, PointKind, RecordState, Ref, Scope, StoredPoint, TrustOrigin,
};
use cairn_store::Hit;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::entities::entity_of;
use super::{check_name, origin, MAX_FACT_EVIDENCE};
use crate::access::{admit_write, Page, PageRequest};
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::records::{load_point, now, parse_id, put, record, scan};
use crate::Operation;

impl Engine {
    /// Declares how many objects a predicate may have per subject.
    pub async fn declare_predicate(
        &self,
        who: &Principal,
        req: PredicateRequest,
    ) -> Result<Predicate, ServiceError> {
        let mut scope = req.scope.clone();
        admit_write(who, &mut scope, Operation::WriteKnowledge)?;
        check_name("predicate", &req.predicate)?;
        let name = normalize_predicate(&req.predicate);
        if name.is_empty() {
            return Err(ServiceError::InvalidRequest(
                "predicate has no letters or digits".into(),
            ));
        }
        let partition = scope.partition();
        let p = Predicate {
            name: name.clone(),
            cardinality: req.cardinality,
            updated_at: now(),
        };
        let mut point = StoredPoint::new(
            PointKind::Predicate,
            &scope,
            TrustOrigin::System,
            p.updated_at,
        );
        point.doc_id = Some(name.clone());
        point.state = Some(RecordState::Predicate(p.clone()));
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        put(
            self,
            ids::predicate_record_id(&partition, &name),
            point,
            None,
        )
        .await?;
        Ok(p)
    }

    /// The declared predicates of the partition, by name; one page of them.
    pub async fn list_predicates(
        &self,
        who: &Principal,
        partition: &Partition,
        page: PageRequest,
    ) -> Result<Page<Predicate>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let mut out: Vec<Predicate> = scan(self, partition, PointKind::Predicate, None)
            .await?
            .into_iter()
            .filter_map(|h| match h.point.state {
                Some(RecordState::Predicate(p)) => Some(p),
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(page.of(out))
    }

    async fn cardinality(
        &self,
        partition: &Partition,
        predicate: &str,
    ) -> Result<Option<Cardinality>, ServiceError> {
        let id = ids::predicate_record_id(partition, predicate);
        Ok(self
            .store
            .retrieve(partition, &[id], false)
            .await?
            .into_iter()
            .find_map(|h| match h.point.state {
                Some(RecordState::Predicate(p)) => Some(p.cardinality),
                _ => None,
            }))
    }

    /// Stores a fact. Another current fact with the same subject and predicate, a
    /// different object and an overlapping validity window is superseded (when `supersede`
    /// is set or the predicate is declared single-valued), left alone (a multi-valued
    /// predicate), or else named in `conflicts_with`: both stay current and recall shows
    /// the conflict. The same triple again is the same fact (evidence added).
    pub async fn add_fact(
        &self,
        who: &Principal,
        req: FactRequest,
    ) -> Result<FactOutcome, ServiceError> {
        let mut req = req;
        admit_write(who, &mut req.scope, Operation::WriteKnowledge)?;
        let trust = origin(who, req.trust_origin)?;
        self.store_fact(req, trust).await
    }

    /// [`Engine::add_fact`] for an admitted writer, recorded as `trust` (also an approved candidate's fact).
    pub(crate) async fn store_fact(
        &self,
        req: FactRequest,
        trust: TrustOrigin,
    ) -> Result<FactOutcome, ServiceError> {
        let scope = req.scope.clone();
        let valid_from = req
            .valid_from
            .as_ref()
            .map(|t| t.to_millis("valid_from"))
            .transpose()?;
        let valid_until = req
            .valid_until
            .as_ref()
            .map(|t| t.to_millis("valid_until"))
            .transpose()?;
        check_name("subject", &req.subject)?;
        check_name("predicate", &req.predicate)?;
        check_name("object", &req.object)?;
        if normalize_predicate(&req.predicate).is_empty() {
            return Err(ServiceError::InvalidRequest(
                "predicate has no letters or digits".into(),
            ));
        }
        let confidence = req.confidence.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&confidence) {
            return Err(ServiceError::InvalidRequest(
                "confidence must be between 0 and 1".into(),
            ));
        }
        if let (Some(f), Some(u)) = (valid_from, valid_until) {
            if u <= f {
                return Err(ServiceError::InvalidRequest(
                    "valid_until must be after valid_from".into(),
                ));
            }
        }
        limits::check_count("evidence_refs", req.evidence_refs.len(), MAX_FACT_EVIDENCE)?;
        let partition = scope.partition();
        let mut evidence: Vec<Ref> = Vec::new();
        for r in &req.evidence_refs {
            let parsed = Ref::parse_input(r)?;
            if !parsed.is_fact_evidence() {
                return Err(ServiceError::InvalidRequest(format!(
                    "{r} cannot be a fact's evidence: use doc:, msg:, evt: or fact: refs"
                )));
            }
            if !crate::evidence::exists(self.store.as_ref(), &partition, &parsed).await? {
                return Err(ServiceError::EvidenceNotFound(format!(
                    "evidence {r} is not stored in this scope"
                )));
            }
            evidence.push(parsed);
        }
        evidence.sort();
        evidence.dedup();
        let id = ids::fact_id(
            &partition,
            &req.subject,
            &req.predicate,
            &req.object,
            valid_from,
        )
        .to_string();
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let now = now();
        let existing = load_point(self, &partition, PointKind::Fact, &id, false).await?;
        let mut fact = Fact {
            id: id.clone(),
            subject: req.subject.trim().to_string(),
            predicate: req.predicate.trim().to_string(),
            object: req.object.trim().to_string(),
            valid_from,
            valid_until,
            confidence,
            evidence_refs: evidence,
            status: FactStatus::Current,
            superseded_by: None,
            supersedes: Vec::new(),
            invalidated_by: Vec::new(),
            created_at: now,
        };
        let mut trust = trust;
        if let Some(hit) = &existing {
            if let Some(RecordState::Fact(old)) = &hit.point.state {
                // The same fact: it keeps its first spelling (the id is of the normalized
                // triple), its history and its evidence, so that writing it again with
                // nothing new changes nothing. A superseded or invalidated fact written
                // again is asserted again: current, its window as this write gives it.
                fact.subject = old.subject.clone();
                fact.predicate = old.predicate.clone();
                fact.object = old.object.clone();
                fact.created_at = old.created_at;
                fact.supersedes = old.supersedes.clone();
                fact.invalidated_by = old.invalidated_by.clone();
                // An invalidated fact still lists the evidence that was forgotten: it is
                // gone, and keeping it would let a retry of that forget invalidate the fact
                // again. Only what this write cites stands behind it now.
                if old.status != FactStatus::Invalidated {
                    let mut ev = old.evidence_refs.clone();
                    ev.extend(fact.evidence_refs.iter().cloned());
                    ev.sort();
                    ev.dedup();
                    fact.evidence_refs = ev;
                }
                trust = hit.point.trust;
            }
        }
        // The other current facts about the same subject and predicate.
        let siblings: Vec<(Hit, Fact)> = scan(
            self,
            &partition,
            PointKind::Fact,
            Some(key::subject_predicate(&fact.subject, &fact.predicate)),
        )
        .await?
        .into_iter()
        .filter_map(|h| match h.point.state.clone() {
            Some(RecordState::Fact(f)) if f.id != id && f.status == FactStatus::Current => {
                Some((h, f))
            }
            _ => None,
        })
        .filter(|(_, f)| normalize_name(&f.object) != normalize_name(&fact.object))
        .filter(|(_, f)| f.overlaps(&fact))
        .collect();
        let cardinality = self
            .cardinality(&partition, &normalize_predicate(&fact.predicate))
            .await?;
        let supersede = req.supersede || cardinality == Some(Cardinality::Single);
        let mut outcome = FactOutcome {
            fact: fact.clone(),
            superseded: Vec::new(),
            conflicts_with: Vec::new(),
        };
        if supersede {
            for (_, old) in &siblings {
                fact.supersedes.push(old.id.clone());
            }
            fact.supersedes.sort();
            fact.supersedes.dedup();
        }
        // The new fact first, then the old ones marked: a crash in between leaves two
        // current facts (a visible conflict), never a fact superseded by nothing.
        if existing.as_ref().and_then(|h| match &h.point.state {
            Some(RecordState::Fact(old)) => Some(old == &fact),
            _ => None,
        }) != Some(true)
        {
            write_fact(self, &scope, trust, &fact).await?;
        }
        cairn_models::failpoint("knowledge.fact.after_new");
        for (hit, mut old) in siblings {
            if supersede {
                old.status = FactStatus::Superseded;
                old.superseded_by = Some(fact.id.clone());
                if old.valid_until.is_none() {
                    old.valid_until = Some(fact.valid_from.unwrap_or(now));
                }
                if old.valid_from.is_some_and(|f| Some(f) >= old.valid_until) {
                    old.valid_until = old.valid_from.map(|f| f + 1);
                }
                write_fact(self, &hit.point.scope(), hit.point.trust, &old).await?;
                outcome.superseded.push(old.id);
            } else if cardinality != Some(Cardinality::Multi) {
                outcome.conflicts_with.push(old.id);
            }
        }
        outcome.fact = fact;
        Ok(outcome)
    }

    /// A fact by id (current or not).
    pub async fn get_fact(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<Fact, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        load_point(self, partition, PointKind::Fact, id, false)
            .await?
            .and_then(|h| match h.point.state {
                Some(RecordState::Fact(f)) => Some(f),
                _ => None,
            })
            .ok_or_else(|| ServiceError::NotFound(format!("no fact {id} in this scope")))
    }

    /// Facts of the partition, oldest first: those holding now, or with `history` every
    /// one (superseded, expired and invalidated ones too). `subject` matches the subject
    /// by name and through the aliases of the entity of that name; `predicate` its
    /// canonical form. One page of them.
    pub async fn list_facts(
        &self,
        who: &Principal,
        partition: &Partition,
        query: FactQuery,
        page: PageRequest,
    ) -> Result<Page<Fact>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let mut subjects: BTreeSet<String> = BTreeSet::new();
        if let Some(s) = &query.subject {
            subjects.insert(normalize_name(s));
            for e in scan(self, partition, PointKind::Entity, Some(key::name(s))).await? {
                let e = entity_of(&e)?;
                subjects.insert(normalize_name(&e.name));
                subjects.extend(e.aliases.iter().map(|a| normalize_name(a)));
            }
        }
        let predicate = query.predicate.as_deref().map(normalize_predicate);
        let at = query.at.unwrap_or_else(now);
        let mut all: Vec<Fact> = scan(self, partition, PointKind::Fact, None)
            .await?
            .into_iter()
            .filter_map(|h| match h.point.state {
                Some(RecordState::Fact(f)) => Some(f),
                _ => None,
            })
            .filter(|f| subjects.is_empty() || subjects.contains(&normalize_name(&f.subject)))
            .filter(|f| {
                predicate
                    .as_ref()
                    .is_none_or(|p| *p == normalize_predicate(&f.predicate))
            })
            .filter(|f| query.history || f.holds_at(at))
            .collect();
        all.sort_by_key(|f| (f.created_at, f.id.clone()));
        Ok(page.of(all))
    }

    /// The open conflicts of the partition: current facts with the same subject and
    /// predicate, different objects and overlapping validity, whose predicate is not
    /// declared multi-valued (those coexist). Recall shows the same conflicts. A
    /// single-valued predicate supersedes on write, so its facts conflict only when they
    /// were written before it was declared. One page of them, by subject and predicate.
    pub async fn fact_conflicts(
        &self,
        who: &Principal,
        partition: &Partition,
        page: PageRequest,
    ) -> Result<Page<FactConflict>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let multi_valued: HashSet<String> = self
            .list_predicates(who, partition, PageRequest::ALL)
            .await?
            .items
            .into_iter()
            .filter(|p| p.cardinality == Cardinality::Multi)
            .map(|p| p.name)
            .collect();
        let mut groups: BTreeMap<(String, String), Vec<Fact>> = BTreeMap::new();
        for h in scan(self, partition, PointKind::Fact, None).await? {
            if let Some(RecordState::Fact(f)) = h.point.state {
                if f.status == FactStatus::Current {
                    groups
                        .entry((
                            normalize_name(&f.subject),
                            normalize_predicate(&f.predicate),
                        ))
                        .or_default()
                        .push(f);
                }
            }
        }
        let mut out = Vec::new();
        for ((subject, predicate), mut facts) in groups {
            if multi_valued.contains(&predicate) {
                continue;
            }
            facts.sort_by_key(|f| (f.created_at, f.id.clone()));
            let conflicting: Vec<Fact> = facts
                .iter()
                .filter(|f| {
                    facts.iter().any(|g| {
                        normalize_name(&g.object) != normalize_name(&f.object) && g.overlaps(f)
                    })
                })
                .cloned()
                .collect();
            if conflicting.len() > 1 {
                out.push(FactConflict {
                    subject,
                    predicate,
                    facts: conflicting,
                });
            }
        }
        Ok(page.of(out))
    }
}

/// The keys of a fact: subject and predicate, evidence, and [`key::INACTIVE`] unless current.
fn fact_keys(f: &Fact) -> Vec<String> {
    let mut keys = vec![key::subject_predicate(&f.subject, &f.predicate)];
    keys.extend(f.evidence_refs.iter().map(key::evidence));
    if f.status != FactStatus::Current {
        keys.push(key::INACTIVE.to_string());
    }
    keys
}

pub(crate) async fn write_fact(
    engine: &Engine,
    scope: &Scope,
    trust: TrustOrigin,
    f: &Fact,
) -> Result<(), ServiceError> {
    let text = f.text();
    let p = record(
        PointKind::Fact,
        scope,
        trust,
        f.created_at,
        &f.id,
        text.clone(),
        RecordState::Fact(f.clone()),
        fact_keys(f),
    );
    put(engine, parse_id("fact", &f.id)?, p, Some(text)).await
}

/// `PUT /v1/predicates` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PredicateRequest {
    pub scope: Scope,
    pub predicate: String,
    pub cardinality: Cardinality,
}

/// `POST /v1/facts` body; the arguments of MCP's `add_fact`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FactRequest {
    pub scope: Scope,
    /// Who or what the fact is about ("Alice Johnson").
    pub subject: String,
    /// The relation, e.g. `works_at`, `lives_in` (compared case- and spelling-insensitively).
    pub predicate: String,
    /// The value ("Acme Corp").
    pub object: String,
    /// Since when it holds (RFC 3339 or Unix epoch milliseconds).
    #[serde(default)]
    pub valid_from: Option<cairn_models::Timestamp>,
    /// Until when it holds, exclusive (RFC 3339 or Unix epoch milliseconds).
    #[serde(default)]
    pub valid_until: Option<cairn_models::Timestamp>,
    /// Confidence, 0 to 1 (default 1).
    #[serde(default)]
    pub confidence: Option<f64>,
    /// What it rests on: up to 32 `doc:`, `msg:`, `evt:` or `fact:` refs stored in the scope
    /// (e.g. the citations of a recall).
    #[serde(default)]
    pub evidence_refs: Vec<String>,
    /// Replace the current value of this subject and predicate (e.g. the user moved; the old
    /// fact is kept as history). Without it a different value stands beside the old one as
    /// an open conflict.
    #[serde(default)]
    pub supersede: bool,
    /// Who said it (default: `agent_output` for an agent, `user_reported` otherwise; an agent
    /// may not claim another origin, and `third_party_agent` comes only from an approved
    /// candidate).
    #[serde(default)]
    pub trust_origin: Option<TrustOrigin>,
}

/// What `add_fact` did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FactOutcome {
    pub fact: Fact,
    /// Facts this write superseded.
    pub superseded: Vec<String>,
    /// Current facts it now conflicts with (both stay; recall shows the conflict).
    pub conflicts_with: Vec<String>,
}

/// Which facts to list.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FactQuery {
    pub subject: Option<String>,
    pub predicate: Option<String>,
    /// Every fact, not only those holding now.
    pub history: bool,
    /// The time "now" means (epoch ms; default: now).
    pub at: Option<i64>,
}

/// An open conflict between current facts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FactConflict {
    /// Normalized subject and canonical predicate.
    pub subject: String,
    pub predicate: String,
    pub facts: Vec<Fact>,
}
