//! Relationships: typed edges between entities, idempotent, traversed in both directions;
//! a merge moves the merged entity's edges to the survivor.

use std::collections::HashSet;

use cairn_models::ids;
use cairn_models::knowledge::{key, normalize_predicate, Entity, Relationship};
use cairn_models::{limits, Partition, PointKind, RecordState, Scope, TrustOrigin};
use cairn_store::Filter;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::entities::entity_of;
use super::{check_name, origin, MAX_DEPTH};
use crate::access::{admit_write, Page, PageRequest};
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::records::{load_point, now, parse_id, put, record, scan};
use crate::Operation;

impl Engine {
    /// Moves the relationships of `from` to `to` (an entity merged away and its survivor);
    /// an edge between the two is dropped.
    pub(super) async fn move_relationships(
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

    /// The relationships touching an entity (either end), or all of the partition, oldest
    /// first; one page of them.
    pub async fn list_relationships(
        &self,
        who: &Principal,
        partition: &Partition,
        entity_id: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<Relationship>, ServiceError> {
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
        Ok(page.of(out))
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
