//! Knowledge memory: entities, preferences, facts, relationships and predicate declarations
//! (the records are in [`cairn_models::knowledge`]).
//!
//! - **Entities** are found by exact name or alias (case-insensitive) and by meaning (dense
//!   and BM25 over name, type, aliases and description). The same name and type written
//!   twice is one entity (the second write adds aliases and a description). Merging moves
//!   relationships and names to the survivor; the merged entity keeps its id, which resolves
//!   (`merged_into`), and its name becomes an alias of the survivor.
//! - **Facts** are triples with validity, confidence and evidence. A new object for the same
//!   subject and predicate *supersedes* the current one when the writer says so or the
//!   predicate is declared single-valued; for a multi-valued predicate it stands beside it;
//!   otherwise both stay current and recall shows them as a conflict. Superseded facts are
//!   history: kept, readable, recalled only on request. Forgetting the evidence of a fact
//!   invalidates it (or narrows its evidence), like a candidate's.
//! - **Relationships** are typed edges between entities, traversed in both directions.
//!
//! Writes that read before they write (supersession, merges, steps) hold
//! `Engine::knowledge_lock`, so two writers never both supersede the same fact or number
//! two steps alike. Lock order: after `review_lock` (forget takes both).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use cairn_models::ids;
use cairn_models::knowledge::{
    key, normalize_name, normalize_predicate, Cardinality, Entity, EntityType, Fact, FactStatus,
    Predicate, Preference, Relationship,
};
use cairn_models::{
    limits, Partition, PointKind, RecordState, Ref, Scope, StoredPoint, TrustOrigin,
};
use cairn_store::{Filter, Hit};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::admit_write;
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
pub(crate) use crate::records::{load_point, now, parse_id, put, record, scan, search_kind};
pub use crate::records::{Scored, DEFAULT_SEARCH, MAX_SEARCH};
use crate::Operation;

/// Longest entity name, alias, category, fact subject, predicate or object, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;
/// Longest description, preference or context, in bytes.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Most aliases of one entity; most evidence refs of one fact.
pub const MAX_ALIASES: usize = 64;
pub const MAX_FACT_EVIDENCE: usize = 32;
/// Deepest relationship traversal.
pub const MAX_DEPTH: u32 = 3;
/// The trust origin of what a principal writes directly (not through the review queue):
/// an agent's own output, or what the user (or their operator) said.
fn origin(who: &Principal, asked: Option<TrustOrigin>) -> Result<TrustOrigin, ServiceError> {
    let default = match who {
        Principal::Agent { .. } => TrustOrigin::AgentOutput,
        _ => TrustOrigin::UserReported,
    };
    match asked {
        None => Ok(default),
        Some(TrustOrigin::ThirdPartyAgent) => Err(ServiceError::InvalidRequest(
            "trust_origin third_party_agent is given by approving a candidate, never written"
                .into(),
        )),
        Some(_) if matches!(who, Principal::Agent { .. }) => Err(ServiceError::Forbidden(
            "an agent writes as agent_output; it may not claim another trust origin".into(),
        )),
        Some(t) => Ok(t),
    }
}

fn check_name(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.trim().is_empty() {
        return Err(ServiceError::InvalidRequest(format!("{field} is empty")));
    }
    limits::check_bytes(field, value, MAX_NAME_BYTES)?;
    Ok(())
}

/// Checks a candidate's proposed knowledge with the rules its direct write applies, so a
/// proposal that could never be written is refused when it is proposed, not approved.
pub(crate) fn check_proposal(
    k: &cairn_models::knowledge::ProposedKnowledge,
) -> Result<(), ServiceError> {
    use cairn_models::knowledge::ProposedKnowledge as P;
    match k {
        P::Fact {
            subject,
            predicate,
            object,
            valid_from,
            valid_until,
        } => {
            check_name("subject", subject)?;
            check_name("predicate", predicate)?;
            check_name("object", object)?;
            if normalize_predicate(predicate).is_empty() {
                return Err(ServiceError::InvalidRequest(
                    "predicate has no letters or digits".into(),
                ));
            }
            if let (Some(f), Some(u)) = (valid_from, valid_until) {
                if u <= f {
                    return Err(ServiceError::InvalidRequest(
                        "valid_until must be after valid_from".into(),
                    ));
                }
            }
        }
        P::Preference {
            category,
            preference,
            context,
        } => {
            check_name("category", category)?;
            if preference.trim().is_empty() {
                return Err(ServiceError::InvalidRequest("preference is empty".into()));
            }
            check_text("preference", Some(preference))?;
            check_text("context", context.as_deref())?;
        }
        P::Entity {
            name,
            entity_type,
            description,
            aliases,
        } => {
            check_name("name", name)?;
            if EntityType::parse(entity_type).is_none() {
                return Err(ServiceError::InvalidRequest(format!(
                    "unknown entity type {entity_type:?}: expected person, organization, location, event, object or other"
                )));
            }
            check_text("description", description.as_deref())?;
            limits::check_count("aliases", aliases.len(), MAX_ALIASES)?;
            for a in aliases {
                check_name("alias", a)?;
            }
        }
    }
    Ok(())
}

fn check_text(field: &str, value: Option<&str>) -> Result<(), ServiceError> {
    if let Some(v) = value {
        limits::check_bytes(field, v, MAX_TEXT_BYTES)?;
    }
    Ok(())
}

// ---- entities ----------------------------------------------------------------------------

/// `POST /v1/entities` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityRequest {
    pub scope: Scope,
    pub name: String,
    /// `person`, `organization`, `location`, `event`, `object` or `other` (any case).
    #[serde(rename = "type")]
    pub entity_type: String,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub trust_origin: Option<TrustOrigin>,
}

fn entity_of(hit: &Hit) -> Result<Entity, ServiceError> {
    match &hit.point.state {
        Some(RecordState::Entity(e)) => Ok(e.clone()),
        other => Err(ServiceError::Internal(format!(
            "stored entity {} without its state: {other:?}",
            hit.id
        ))),
    }
}

fn entity_keys(e: &Entity) -> Vec<String> {
    let mut keys: BTreeSet<String> = BTreeSet::new();
    keys.insert(key::name(&e.name));
    if let Some(c) = &e.canonical_name {
        keys.insert(key::name(c));
    }
    for a in &e.aliases {
        keys.insert(key::name(a));
    }
    keys.insert(format!("type:{}", e.entity_type.as_str()));
    if e.merged_into.is_some() {
        keys.insert(key::INACTIVE.to_string());
    }
    keys.into_iter().collect()
}

async fn write_entity(
    engine: &Engine,
    scope: &Scope,
    trust: TrustOrigin,
    e: &Entity,
) -> Result<(), ServiceError> {
    let id = parse_id("entity", &e.id)?;
    let text = e.text();
    let p = record(
        PointKind::Entity,
        scope,
        trust,
        e.created_at,
        &e.id,
        text.clone(),
        RecordState::Entity(e.clone()),
        entity_keys(e),
    );
    put(engine, id, p, Some(text)).await
}

fn push_alias(e: &mut Entity, alias: &str) {
    let n = normalize_name(alias);
    if n.is_empty() || n == normalize_name(&e.name) {
        return;
    }
    if !e.aliases.iter().any(|a| normalize_name(a) == n) {
        e.aliases.push(alias.trim().to_string());
    }
}

impl Engine {
    /// Stores an entity, or enriches the one with the same name and type (aliases added,
    /// description and subtype replaced when given). Writing the name of an entity merged
    /// into another answers the survivor.
    pub async fn add_entity(
        &self,
        who: &Principal,
        req: EntityRequest,
    ) -> Result<Entity, ServiceError> {
        let mut req = req;
        admit_write(who, &mut req.scope, Operation::WriteKnowledge)?;
        let trust = origin(who, req.trust_origin)?;
        self.store_entity(req, trust).await
    }

    /// [`Engine::add_entity`] for an admitted writer, recorded as `trust` (also an approved candidate's entity, as `third_party_agent`).
    pub(crate) async fn store_entity(
        &self,
        req: EntityRequest,
        trust: TrustOrigin,
    ) -> Result<Entity, ServiceError> {
        let scope = req.scope.clone();
        check_name("name", &req.name)?;
        let entity_type = EntityType::parse(&req.entity_type).ok_or_else(|| {
            ServiceError::InvalidRequest(format!(
                "unknown entity type {:?}: expected person, organization, location, event, object or other",
                req.entity_type
            ))
        })?;
        if let Some(s) = &req.subtype {
            check_name("subtype", s)?;
        }
        check_text("description", req.description.as_deref())?;
        limits::check_count("aliases", req.aliases.len(), MAX_ALIASES)?;
        for a in &req.aliases {
            check_name("alias", a)?;
        }
        let partition = scope.partition();
        let id = ids::entity_id(&partition, &req.name, entity_type.as_str()).to_string();
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let existing = load_point(self, &partition, PointKind::Entity, &id, false).await?;
        let now = now();
        let mut e = match &existing {
            Some(hit) => {
                let e = entity_of(hit)?;
                if e.merged_into.is_some() {
                    // The survivor at the end of the merge chain (it may have been merged
                    // on in turn).
                    let survivor = self.resolve_entity(&partition, &id).await?;
                    let hit = load_point(self, &partition, PointKind::Entity, &survivor, false)
                        .await?
                        .ok_or_else(|| {
                            ServiceError::Internal(format!("merged entity {id} lost {survivor}"))
                        })?;
                    return entity_of(&hit);
                }
                e
            }
            None => Entity {
                id: id.clone(),
                name: req.name.trim().to_string(),
                entity_type,
                subtype: None,
                description: None,
                aliases: Vec::new(),
                canonical_name: None,
                merged_into: None,
                created_at: now,
                updated_at: now,
            },
        };
        let before = e.clone();
        if req.subtype.is_some() {
            e.subtype = req.subtype.clone();
        }
        if let Some(d) = req.description.as_ref().filter(|d| !d.trim().is_empty()) {
            e.description = Some(d.clone());
        }
        for a in &req.aliases {
            push_alias(&mut e, a);
        }
        if existing.is_some() && e == before {
            return Ok(e);
        }
        e.updated_at = now;
        let keep_trust = existing.as_ref().map(|h| h.point.trust).unwrap_or(trust);
        write_entity(self, &scope, keep_trust, &e).await?;
        Ok(e)
    }

    /// An entity by id; a merged one answers itself (with `merged_into` set).
    pub async fn get_entity(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<Entity, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let hit = load_point(self, partition, PointKind::Entity, id, false)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no entity {id} in this scope")))?;
        entity_of(&hit)
    }

    /// The entities whose name or an alias is `name` (case-insensitive): exact name
    /// matches first, then the oldest. Merged entities answer through their survivor.
    pub async fn entities_by_name(
        &self,
        who: &Principal,
        partition: &Partition,
        name: &str,
    ) -> Result<Vec<Entity>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        limits::check_bytes("name", name, MAX_NAME_BYTES)?;
        let wanted = normalize_name(name);
        let mut out: Vec<Entity> = scan(self, partition, PointKind::Entity, Some(key::name(name)))
            .await?
            .iter()
            .map(entity_of)
            .collect::<Result<_, _>>()?;
        out.retain(|e| e.merged_into.is_none());
        out.sort_by_key(|e| {
            (
                normalize_name(&e.name) != wanted,
                e.created_at,
                e.id.clone(),
            )
        });
        Ok(out)
    }

    /// Entities by meaning and name (hybrid search), merged ones excluded.
    pub async fn search_entities(
        &self,
        who: &Principal,
        partition: &Partition,
        query: &str,
        entity_type: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Scored<Entity>>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let mut f = Filter::new().not_eq("keys", key::INACTIVE);
        if let Some(t) = entity_type {
            let t = EntityType::parse(t).ok_or_else(|| {
                ServiceError::InvalidRequest(format!("unknown entity type {t:?}"))
            })?;
            f = f.eq("keys", format!("type:{}", t.as_str()));
        }
        search_kind(self, partition, PointKind::Entity, query, f, limit)
            .await?
            .iter()
            .map(|h| {
                Ok(Scored {
                    item: entity_of(h)?,
                    score: h.score,
                })
            })
            .collect()
    }

    /// The partition's entities (merged ones excluded), oldest first; doors page them
    /// (`ops::page`), like documents.
    pub async fn list_entities(
        &self,
        who: &Principal,
        partition: &Partition,
        entity_type: Option<&str>,
    ) -> Result<Vec<Entity>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let key = match entity_type {
            Some(t) => Some(format!(
                "type:{}",
                EntityType::parse(t)
                    .ok_or_else(|| ServiceError::InvalidRequest(format!(
                        "unknown entity type {t:?}"
                    )))?
                    .as_str()
            )),
            None => None,
        };
        let mut all: Vec<Entity> = scan(self, partition, PointKind::Entity, key)
            .await?
            .iter()
            .map(entity_of)
            .collect::<Result<_, _>>()?;
        all.retain(|e| e.merged_into.is_none());
        all.sort_by_key(|e| (e.created_at, e.id.clone()));
        Ok(all)
    }

    /// Merges `source` into `target`: the source's relationships move to the target, its
    /// names become the target's aliases, and it stays resolvable by its id (`merged_into`).
    /// Idempotent: merging again answers the target.
    pub async fn merge_entities(
        &self,
        who: &Principal,
        req: MergeRequest,
    ) -> Result<Entity, ServiceError> {
        let mut scope = req.scope.clone();
        admit_write(who, &mut scope, Operation::WriteKnowledge)?;
        if let Some(c) = &req.canonical_name {
            check_name("canonical_name", c)?;
        }
        if req.source_id == req.target_id {
            return Err(ServiceError::InvalidRequest(
                "an entity cannot be merged into itself".into(),
            ));
        }
        let partition = scope.partition();
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let load = |id: String| {
            let partition = partition.clone();
            async move {
                let hit = load_point(self, &partition, PointKind::Entity, &id, false)
                    .await?
                    .ok_or_else(|| {
                        ServiceError::NotFound(format!("no entity {id} in this scope"))
                    })?;
                Ok::<_, ServiceError>((hit.point.trust, entity_of(&hit)?))
            }
        };
        let (source_trust, mut source) = load(req.source_id.clone()).await?;
        let (target_trust, mut target) = load(req.target_id.clone()).await?;
        if let Some(into) = &source.merged_into {
            if *into == target.id {
                return Ok(target);
            }
            return Err(ServiceError::Conflict(format!(
                "entity {} was already merged into {into}",
                source.id
            )));
        }
        if target.merged_into.is_some() {
            return Err(ServiceError::Conflict(format!(
                "entity {} was merged into {}; merge into that one",
                target.id,
                target.merged_into.clone().unwrap_or_default()
            )));
        }
        let now = now();
        // 1. Relationships move first: a crash after this leaves both entities readable
        // and the edges on the survivor; the retry finds nothing left to move.
        self.move_relationships(&partition, &source.id, &target.id)
            .await?;
        cairn_models::failpoint("knowledge.merge.after_relationships");
        // 2. The survivor takes the names, then the source is marked merged.
        push_alias(&mut target, &source.name);
        for a in source.aliases.clone() {
            push_alias(&mut target, &a);
        }
        if target.description.is_none() {
            target.description = source.description.clone();
        }
        if let Some(c) = &req.canonical_name {
            target.canonical_name = Some(c.trim().to_string());
            push_alias(&mut target, c);
        }
        target.updated_at = now;
        write_entity(self, &scope, target_trust, &target).await?;
        source.merged_into = Some(target.id.clone());
        source.updated_at = now;
        write_entity(self, &scope, source_trust, &source).await?;
        Ok(target)
    }

    async fn move_relationships(
        &self,
        partition: &Partition,
        from: &str,
        to: &str,
    ) -> Result<(), ServiceError> {
        for hit in scan(
            self,
            partition,
            PointKind::Relationship,
            Some(key::entity(from)),
        )
        .await?
        {
            let Some(RecordState::Relationship(r)) = &hit.point.state else {
                continue;
            };
            let source = if r.source_id == from {
                to
            } else {
                r.source_id.as_str()
            };
            let target = if r.target_id == from {
                to
            } else {
                r.target_id.as_str()
            };
            if source != target {
                let moved = relationship(
                    partition,
                    source,
                    target,
                    &r.relationship_type,
                    r.properties.clone(),
                    r.created_at,
                );
                let scope = hit.point.scope();
                write_relationship(self, &scope, hit.point.trust, &moved).await?;
            }
            self.store.delete_ids(partition, vec![hit.id]).await?;
        }
        Ok(())
    }

    // ---- relationships -------------------------------------------------------------

    /// Stores a typed edge between two entities of the partition (idempotent; properties
    /// replaced). An end that was merged is replaced by its survivor.
    pub async fn add_relationship(
        &self,
        who: &Principal,
        req: RelationshipRequest,
    ) -> Result<Relationship, ServiceError> {
        let mut scope = req.scope.clone();
        admit_write(who, &mut scope, Operation::WriteKnowledge)?;
        check_name("relationship_type", &req.relationship_type)?;
        let properties = req.properties.unwrap_or_else(|| serde_json::json!({}));
        if !properties.is_object() {
            return Err(ServiceError::InvalidRequest(
                "properties must be a JSON object".into(),
            ));
        }
        limits::check_metadata("properties", Some(&properties))?;
        let trust = origin(who, req.trust_origin)?;
        let partition = scope.partition();
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let source = self.resolve_entity(&partition, &req.source_id).await?;
        let target = self.resolve_entity(&partition, &req.target_id).await?;
        let mut r = relationship(
            &partition,
            &source,
            &target,
            req.relationship_type.trim(),
            properties,
            now(),
        );
        if let Some(hit) =
            load_point(self, &partition, PointKind::Relationship, &r.id, false).await?
        {
            if let Some(RecordState::Relationship(old)) = &hit.point.state {
                if old.properties == r.properties {
                    return Ok(old.clone());
                }
                // New properties on the same edge: it keeps its age (traversal order).
                r.created_at = old.created_at;
            }
        }
        write_relationship(self, &scope, trust, &r).await?;
        Ok(r)
    }

    /// The id of a stored entity, following merges.
    async fn resolve_entity(
        &self,
        partition: &Partition,
        id: &str,
    ) -> Result<String, ServiceError> {
        let mut id = id.to_string();
        for _ in 0..8 {
            let hit = load_point(self, partition, PointKind::Entity, &id, false)
                .await?
                .ok_or_else(|| ServiceError::NotFound(format!("no entity {id} in this scope")))?;
            match entity_of(&hit)?.merged_into {
                Some(next) => id = next,
                None => return Ok(id),
            }
        }
        Err(ServiceError::Internal(format!(
            "merge chain of {id} too long"
        )))
    }

    /// The relationships touching an entity (either end), or all of the partition.
    pub async fn list_relationships(
        &self,
        who: &Principal,
        partition: &Partition,
        entity_id: Option<&str>,
    ) -> Result<Vec<Relationship>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let key = entity_id.map(key::entity);
        let mut out: Vec<Relationship> = scan(self, partition, PointKind::Relationship, key)
            .await?
            .into_iter()
            .filter_map(|h| match h.point.state {
                Some(RecordState::Relationship(r)) => Some(r),
                _ => None,
            })
            .collect();
        out.sort_by_key(|r| (r.created_at, r.id.clone()));
        Ok(out)
    }

    /// The entities reachable from `entity_id` over relationships in either direction,
    /// up to `depth` hops (1 to 3), nearest first; `relationship_type` keeps only edges of
    /// that type. The start entity (followed through merges) is never in the answer.
    pub async fn related_entities(
        &self,
        who: &Principal,
        partition: &Partition,
        entity_id: &str,
        relationship_type: Option<&str>,
        depth: Option<u32>,
    ) -> Result<Vec<RelatedEntity>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let depth = depth.unwrap_or(1);
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(ServiceError::InvalidRequest(format!(
                "depth must be 1 to {MAX_DEPTH}"
            )));
        }
        let start = self.resolve_entity(partition, entity_id).await?;
        let wanted = relationship_type.map(normalize_predicate);
        let mut seen: HashSet<String> = HashSet::from([start.clone()]);
        let mut frontier = vec![start];
        let mut found: Vec<(u32, String, Relationship)> = Vec::new();
        for hop in 1..=depth {
            if frontier.is_empty() {
                break;
            }
            let f = Filter::new()
                .eq("kind", PointKind::Relationship.as_str())
                .any_of("keys", frontier.iter().map(|id| key::entity(id)).collect());
            let edges = self.store.scroll_all(partition, f).await?;
            let mut next = Vec::new();
            let mut edges: Vec<Relationship> = edges
                .into_iter()
                .filter_map(|h| match h.point.state {
                    Some(RecordState::Relationship(r)) => Some(r),
                    _ => None,
                })
                .collect();
            edges.sort_by_key(|r| (r.created_at, r.id.clone()));
            for r in edges {
                if wanted
                    .as_ref()
                    .is_some_and(|w| *w != normalize_predicate(&r.relationship_type))
                {
                    continue;
                }
                for (from, to) in [(&r.source_id, &r.target_id), (&r.target_id, &r.source_id)] {
                    if frontier.contains(from) && seen.insert(to.clone()) {
                        next.push(to.clone());
                        found.push((hop, to.clone(), r.clone()));
                    }
                }
            }
            frontier = next;
        }
        let mut out = Vec::new();
        for (hop, id, via) in found {
            if let Some(hit) = load_point(self, partition, PointKind::Entity, &id, false).await? {
                out.push(RelatedEntity {
                    entity: entity_of(&hit)?,
                    depth: hop,
                    via,
                });
            }
        }
        Ok(out)
    }

    // ---- preferences ---------------------------------------------------------------

    /// Stores a preference (the same category and text again is the same record; its
    /// context is replaced when given).
    pub async fn add_preference(
        &self,
        who: &Principal,
        req: PreferenceRequest,
    ) -> Result<Preference, ServiceError> {
        let mut req = req;
        admit_write(who, &mut req.scope, Operation::WriteKnowledge)?;
        let trust = origin(who, req.trust_origin)?;
        self.store_preference(req, trust).await
    }

    /// [`Engine::add_preference`] for an admitted writer, recorded as `trust` (also an approved candidate's preference).
    pub(crate) async fn store_preference(
        &self,
        req: PreferenceRequest,
        trust: TrustOrigin,
    ) -> Result<Preference, ServiceError> {
        let scope = req.scope.clone();
        check_name("category", &req.category)?;
        if req.preference.trim().is_empty() {
            return Err(ServiceError::InvalidRequest("preference is empty".into()));
        }
        check_text("preference", Some(&req.preference))?;
        check_text("context", req.context.as_deref())?;
        let partition = scope.partition();
        let id = ids::preference_id(&partition, &req.category, &req.preference);
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let existing = load_point(
            self,
            &partition,
            PointKind::Preference,
            &id.to_string(),
            false,
        )
        .await?;
        let created_at = match &existing {
            Some(Hit {
                point:
                    StoredPoint {
                        state: Some(RecordState::Preference(p)),
                        ..
                    },
                ..
            }) => {
                if req.context.is_none() || p.context == req.context {
                    return Ok(p.clone());
                }
                p.created_at
            }
            _ => now(),
        };
        let p = Preference {
            id: id.to_string(),
            category: req.category.trim().to_string(),
            preference: req.preference.clone(),
            context: req.context.clone().filter(|c| !c.is_empty()),
            created_at,
        };
        let text = p.text();
        let point = record(
            PointKind::Preference,
            &scope,
            trust,
            created_at,
            &p.id,
            text.clone(),
            RecordState::Preference(p.clone()),
            vec![key::category(&p.category)],
        );
        put(self, id, point, Some(text)).await?;
        Ok(p)
    }

    /// Preferences by meaning, optionally of one category.
    pub async fn search_preferences(
        &self,
        who: &Principal,
        partition: &Partition,
        query: &str,
        category: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Scored<Preference>>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let mut f = Filter::new();
        if let Some(c) = category {
            f = f.eq("keys", key::category(c));
        }
        Ok(
            search_kind(self, partition, PointKind::Preference, query, f, limit)
                .await?
                .into_iter()
                .filter_map(|h| match h.point.state {
                    Some(RecordState::Preference(p)) => Some(Scored {
                        item: p,
                        score: h.score,
                    }),
                    _ => None,
                })
                .collect(),
        )
    }

    /// The partition's preferences, optionally of one category, oldest first.
    pub async fn list_preferences(
        &self,
        who: &Principal,
        partition: &Partition,
        category: Option<&str>,
    ) -> Result<Vec<Preference>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let mut all: Vec<Preference> = scan(
            self,
            partition,
            PointKind::Preference,
            category.map(key::category),
        )
        .await?
        .into_iter()
        .filter_map(|h| match h.point.state {
            Some(RecordState::Preference(p)) => Some(p),
            _ => None,
        })
        .collect();
        all.sort_by_key(|p| (p.created_at, p.id.clone()));
        Ok(all)
    }

    // ---- facts ---------------------------------------------------------------------

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

    /// The declared predicates of the partition.
    pub async fn list_predicates(
        &self,
        who: &Principal,
        partition: &Partition,
    ) -> Result<Vec<Predicate>, ServiceError> {
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
        Ok(out)
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
    /// canonical form.
    pub async fn list_facts(
        &self,
        who: &Principal,
        partition: &Partition,
        query: FactQuery,
    ) -> Result<Vec<Fact>, ServiceError> {
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
        Ok(all)
    }

    /// The open conflicts of the partition: current facts with the same subject and
    /// predicate, different objects and overlapping validity, whose predicate is not
    /// declared multi-valued (those coexist). Recall shows the same conflicts. A
    /// single-valued predicate supersedes on write, so its facts conflict only when they
    /// were written before it was declared.
    pub async fn fact_conflicts(
        &self,
        who: &Principal,
        partition: &Partition,
    ) -> Result<Vec<FactConflict>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let multi_valued: HashSet<String> = self
            .list_predicates(who, partition)
            .await?
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
        Ok(out)
    }
}

fn relationship(
    partition: &Partition,
    source: &str,
    target: &str,
    rel_type: &str,
    properties: serde_json::Value,
    created_at: i64,
) -> Relationship {
    Relationship {
        id: ids::relationship_id(partition, source, rel_type, target).to_string(),
        source_id: source.to_string(),
        target_id: target.to_string(),
        relationship_type: rel_type.to_string(),
        properties,
        created_at,
    }
}

async fn write_relationship(
    engine: &Engine,
    scope: &Scope,
    trust: TrustOrigin,
    r: &Relationship,
) -> Result<(), ServiceError> {
    let text = format!(
        "{} -[{}]-> {}",
        r.source_id, r.relationship_type, r.target_id
    );
    let p = record(
        PointKind::Relationship,
        scope,
        trust,
        r.created_at,
        &r.id,
        text,
        RecordState::Relationship(r.clone()),
        vec![
            key::entity(&r.source_id),
            key::entity(&r.target_id),
            format!("rtype:{}", normalize_predicate(&r.relationship_type)),
        ],
    );
    put(engine, parse_id("relationship", &r.id)?, p, None).await
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

/// `POST /v1/entities/merge` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeRequest {
    pub scope: Scope,
    /// The duplicate, merged away.
    pub source_id: String,
    /// The survivor.
    pub target_id: String,
    /// The name to show for the survivor from now on.
    #[serde(default)]
    pub canonical_name: Option<String>,
}

/// `POST /v1/relationships` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RelationshipRequest {
    pub scope: Scope,
    pub source_id: String,
    pub target_id: String,
    pub relationship_type: String,
    /// A JSON object (at most 16 KiB).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub properties: Option<serde_json::Value>,
    #[serde(default)]
    pub trust_origin: Option<TrustOrigin>,
}

/// An entity reached by a traversal.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RelatedEntity {
    pub entity: Entity,
    /// Hops from the start (1 = a neighbour).
    pub depth: u32,
    /// The edge it was reached over.
    pub via: Relationship,
}

/// `POST /v1/preferences` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreferenceRequest {
    pub scope: Scope,
    pub category: String,
    pub preference: String,
    #[serde(default)]
    pub context: Option<String>,
    #[serde(default)]
    pub trust_origin: Option<TrustOrigin>,
}

/// `PUT /v1/predicates` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PredicateRequest {
    pub scope: Scope,
    pub predicate: String,
    pub cardinality: Cardinality,
}

/// `POST /v1/facts` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FactRequest {
    pub scope: Scope,
    pub subject: String,
    pub predicate: String,
    pub object: String,
    /// From when it holds: epoch ms or RFC 3339.
    #[serde(default)]
    pub valid_from: Option<cairn_models::Timestamp>,
    /// Until when it holds (exclusive): epoch ms or RFC 3339.
    #[serde(default)]
    pub valid_until: Option<cairn_models::Timestamp>,
    /// 0 to 1 (default 1).
    #[serde(default)]
    pub confidence: Option<f64>,
    /// Up to 32 refs (`doc:`, `msg:`, `evt:`, `fact:`), each stored in the scope.
    #[serde(default)]
    pub evidence_refs: Vec<String>,
    /// Replace the current fact(s) with the same subject and predicate.
    #[serde(default)]
    pub supersede: bool,
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
