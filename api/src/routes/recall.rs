//! Recall and agent turns.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use cairn_models::limits;
use cairn_models::{MemoryPack, Scope, TurnEnvelope};
use cairn_recall::{RecallFilters, RecallRequest};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, CommonErrors};
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::turns::{self, CompleteRequest, PrepareRequest, TurnReceipt};
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(recall_handler))
        .routes(routes!(prepare_handler))
        .routes(routes!(complete_handler))
}

/// `POST /v1/recall` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallBody {
    #[schema(value_type = crate::schema::Scope)]
    pub scope: Scope,
    /// 1 to 8192 bytes (longer: `400 invalid_request`).
    pub query: String,
    /// Tokens of the pack's Markdown (default 1000).
    #[serde(default)]
    pub token_budget: Option<usize>,
    #[serde(default)]
    #[schema(value_type = crate::schema::RecallFilters)]
    pub filters: RecallFilters,
}

/// The list caps of recall filters (each list at most 16 values).
fn check_filters(filters: &RecallFilters) -> Result<(), ApiError> {
    let max = limits::MAX_FILTER_VALUES;
    if let Some(t) = &filters.trust {
        limits::check_count("filters.trust", t.len(), max)?;
    }
    if let Some(k) = &filters.kinds {
        limits::check_count("filters.kinds", k.len(), max)?;
    }
    Ok(())
}

/// Recall a token-budgeted MemoryPack for a query (1 to 8192 bytes; a longer one is
/// `400 invalid_request`). Pending and rejected candidates are never
/// recalled; approved ones are, as `memory` items with trust origin `third_party_agent`.
#[utoipa::path(post, path = "/recall", tag = "recall", request_body = RecallBody,
    responses((status = 200, description = "The MemoryPack", body = crate::schema::MemoryPack), CommonErrors))]
async fn recall_handler(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<RecallBody>,
) -> Result<Json<MemoryPack>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    check_filters(&body.filters)?;
    let pack = state
        .engine
        .recaller
        .recall(&RecallRequest {
            scope: body.scope,
            query: body.query,
            budget: body.token_budget,
            filters: body.filters,
        })
        .await?;
    state.metrics.add("recalls", 1);
    Ok(Json(pack))
}

/// agent-turn-v1 prepare: recall for the user's message before the model call. Persists
/// nothing. The user message is the query: 1 to 8192 bytes (longer: `400 invalid_request`).
#[utoipa::path(post, path = "/turns/prepare", tag = "recall", request_body = PrepareRequest,
    responses((status = 200, description = "The agent-turn-v1 envelope", body = crate::schema::TurnEnvelope), CommonErrors))]
async fn prepare_handler(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<PrepareRequest>,
) -> Result<Json<TurnEnvelope>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    check_filters(&body.filters)?;
    let envelope = turns::prepare(&state.engine, body).await?;
    state.metrics.add("recalls", 1);
    Ok(Json(envelope))
}

/// agent-turn-v1 complete: record the exact user and assistant messages of a turn.
/// Idempotent: a replay returns the same receipt and writes nothing.
#[utoipa::path(post, path = "/turns/{turn_id}/complete", tag = "recall", request_body = CompleteRequest,
    params(("turn_id" = String, Path, description = "`[A-Za-z0-9_.-]+`, at most 128 characters")),
    responses(
        (status = 200, description = "The turn's receipt", body = TurnReceipt),
        (status = 409, description = "`turn_conflict`: completed with other content, or its messages were deleted", body = ErrorBody),
        CommonErrors,
    ))]
async fn complete_handler(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(turn_id): Path<String>,
    Json(body): Json<CompleteRequest>,
) -> Result<Json<TurnReceipt>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    // Detached: a completion cut by the timeout between its two messages and its receipt
    // would be repaired by a retry, but only if the client retries; run it to its end.
    detached(async move {
        let receipt = turns::complete(&state.engine, &turn_id, body).await?;
        state.metrics.add("turns_completed", 1);
        // Replays write nothing; counting them as two messages only brings an index build
        // slightly forward.
        state.engine.note_written(2);
        Ok(Json(receipt))
    })
    .await
}
