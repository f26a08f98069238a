//! Recall: its request and operation ([`Engine::recall`]), and the request of forget (its
//! operation is in `forget`).

use cairn_models::grant::Operation;
use cairn_models::{limits, MemoryPack, Scope};
use cairn_recall::{RecallFilters, RecallRequest};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::access::admit;
use crate::auth::Principal;
use crate::engine::Engine;
use crate::error::ServiceError;

/// `POST /v1/recall` body; the arguments of MCP's `recall`.
#[derive(Debug, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecallBody {
    pub scope: Scope,
    /// What to remember: a question or topic in natural language, identifiers welcome
    /// (1 to 8192 bytes; longer: `400 invalid_request`).
    pub query: String,
    /// Most tokens of the pack's Markdown context (default 1000).
    #[serde(default)]
    pub token_budget: Option<usize>,
    #[serde(default)]
    pub filters: RecallFilters,
}

/// `POST /v1/forget` body; the arguments of MCP's `forget`.
#[derive(Debug, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    pub scope: Scope,
    /// What to forget: `doc:<id>` or `doc:<id>#<chunk>` (the whole document),
    /// `msg:<conversation>/<seq>`, `conv:<conversation>`, `turn:<turn id>` (both messages),
    /// `evt:<id>`, `cand:<id>` or `mem:<id>` (an approved memory), `ent:<id>` (an entity
    /// and its relationships), `pref:<id>`, `fact:<id>`, `rel:<id>`, `trace:<id>` (a trace
    /// with its steps and tool calls). Facts citing forgotten evidence are invalidated.
    #[serde(rename = "ref")]
    #[schema(rename = "ref")]
    pub reference: String,
    /// Also delete the records of invalidated candidates (they restate the evidence), and
    /// flush to disk before answering.
    #[serde(default)]
    pub hard: bool,
}

/// The list caps of recall filters (each list at most 16 values).
pub(crate) fn check_filters(filters: &RecallFilters) -> Result<(), ServiceError> {
    let max = limits::MAX_FILTER_VALUES;
    if let Some(t) = &filters.trust {
        limits::check_count("filters.trust", t.len(), max)?;
    }
    if let Some(k) = &filters.kinds {
        limits::check_count("filters.kinds", k.len(), max)?;
    }
    Ok(())
}

impl Engine {
    /// A token-budgeted MemoryPack for a query.
    pub async fn recall(
        &self,
        who: &Principal,
        req: RecallBody,
    ) -> Result<MemoryPack, ServiceError> {
        admit(who, &req.scope, Operation::Recall)?;
        check_filters(&req.filters)?;
        Ok(self
            .recaller
            .recall(&RecallRequest {
                scope: req.scope,
                query: req.query,
                budget: req.token_budget,
                filters: req.filters,
            })
            .await?)
    }
}
