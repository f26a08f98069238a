//! Entities: stored by name and type (the same again enriches the one stored), found by id,
//! by name or alias and by meaning; merged into a survivor that keeps the names, with the
//! merged id still resolving.

use std::collections::BTreeSet;

use cairn_models::ids;
use cairn_models::knowledge::{key, normalize_name, Entity, EntityType};
use cairn_models::{limits, Partition, PointKind, RecordState, Scope, TrustOrigin};
use cairn_store::{Filter, Hit};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{check_name, check_text, origin, MAX_ALIASES, MAX_NAME_BYTES};
use crate::access::{admit_write, Page, PageRequest};
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::records::{load_point, now, parse_id, put, record, scan, search_kind, Scored};
use crate::Operation;

/// `POST /v1/entities` body; the arguments of MCP's `add_entity`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EntityRequest {
    pub scope: Scope,
    /// Its name ("Alice Johnson"); the same name and type again is the same entity.
    pub name: String,
    /// `person`, `organization`, `location`, `event`, `object` or `other` (any case).
    #[serde(rename = "type")]
    pub entity_type: String,
    /// A finer type of your own ("employer", "city").
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Other names it goes by.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Who said it (default: `agent_output` for an agent, `user_reported` otherwise; an agent
    /// may not claim another origin, and `third_party_agent` comes only from an approved
    /// candidate).
    #[serde(default)]
    pub trust_origin: Option<TrustOrigin>,
}

pub(super) fn entity_of(hit: &Hit) -> Result<Entity, ServiceError> {
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

    /// The partition's entities (merged ones excluded), oldest first; one page of them.
    pub async fn list_entities(
        &self,
        who: &Principal,
        partition: &Partition,
        entity_type: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<Entity>, ServiceError> {
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
        Ok(page.of(all))
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

    /// The id of a stored entity, following merges.
    pub(super) async fn resolve_entity(
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
