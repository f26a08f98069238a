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
//!
//! The operations are methods of [`Engine`](crate::Engine), one submodule per record kind:
//! `entities` (entities, lookup, search, merges), `relationships` (edges and their
//! traversal), `preferences`, `facts` (facts, predicate declarations, supersession and
//! conflicts). This module holds what they share: the caps, the trust origin of a direct
//! write and the validation of names and texts (also of a candidate's proposed knowledge).

use cairn_models::knowledge::{normalize_predicate, EntityType};
use cairn_models::{limits, TrustOrigin};

use crate::auth::Principal;
use crate::error::ServiceError;
pub use crate::records::{Scored, DEFAULT_SEARCH, MAX_SEARCH};

mod entities;
mod facts;
mod preferences;
mod relationships;

pub use entities::{EntityRequest, MergeRequest};
pub(crate) use facts::write_fact;
pub use facts::{FactConflict, FactOutcome, FactQuery, FactRequest, PredicateRequest};
pub use preferences::PreferenceRequest;
pub use relationships::{RelatedEntity, RelationshipRequest};

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
