//! Preferences: the same category and text again is the same record (its context replaced
//! when given); found by meaning or listed by category.

use cairn_models::ids;
use cairn_models::knowledge::{key, Preference};
use cairn_models::{Partition, PointKind, RecordState, Scope, StoredPoint, TrustOrigin};
use cairn_store::{Filter, Hit};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{check_name, check_text, origin};
use crate::access::{admit_write, Page, PageRequest};
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::records::{load_point, now, put, record, scan, search_kind, Scored};
use crate::Operation;

impl Engine {
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

    /// The partition's preferences, optionally of one category, oldest first; one page of
    /// them.
    pub async fn list_preferences(
        &self,
        who: &Principal,
        partition: &Partition,
        category: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<Preference>, ServiceError> {
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
        Ok(page.of(all))
    }
}

/// `POST /v1/preferences` body; the arguments of MCP's `add_preference`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PreferenceRequest {
    pub scope: Scope,
    /// e.g. `communication`, `food`, `language`.
    pub category: String,
    /// The preference in the user's terms ("prefers email over phone calls").
    pub preference: String,
    /// When it applies ("at work").
    #[serde(default)]
    pub context: Option<String>,
    /// Who said it (default: `agent_output` for an agent, `user_reported` otherwise; an agent
    /// may not claim another origin, and `third_party_agent` comes only from an approved
    /// candidate).
    #[serde(default)]
    pub trust_origin: Option<TrustOrigin>,
}
