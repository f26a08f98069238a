//! Recall and agent turns.

use axum::extract::{Path, State};
use cairn_models::{MemoryPack, TurnEnvelope};
use cairn_service::recall::RecallBody;
use cairn_service::turns::{CompleteRequest, PrepareRequest, TurnReceipt};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, CommonErrors};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(recall_handler))
        .routes(routes!(prepare_handler))
        .routes(routes!(complete_handler))
}

/// Recall a token-budgeted MemoryPack for a query (1 to 8192 bytes; a longer one is
/// `400 invalid_request`). Pending and rejected candidates are never
/// recalled; approved ones are, as `memory` items with trust origin `third_party_agent`.
#[utoipa::path(post, path = "/recall", tag = "recall", request_body = RecallBody,
    responses((status = 200, description = "The MemoryPack", body = cairn_models::MemoryPack), CommonErrors))]
async fn recall_handler(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<RecallBody>,
) -> Result<Json<MemoryPack>, ApiError> {
    let pack = state
        .engine
        .recall(&caller.principal().clone(), body)
        .await?;
    state.metrics.add("recalls", 1);
    Ok(Json(pack))
}

/// agent-turn-v1 prepare: recall for the user's message before the model call. Persists
/// nothing. The user message is the query: 1 to 8192 bytes (longer: `400 invalid_request`).
#[utoipa::path(post, path = "/turns/prepare", tag = "recall", request_body = PrepareRequest,
    responses((status = 200, description = "The agent-turn-v1 envelope", body = cairn_models::TurnEnvelope), CommonErrors))]
async fn prepare_handler(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<PrepareRequest>,
) -> Result<Json<TurnEnvelope>, ApiError> {
    let envelope = state
        .engine
        .prepare_turn(&caller.principal().clone(), body)
        .await?;
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
    caller: Caller,
    Path(turn_id): Path<String>,
    Json(body): Json<CompleteRequest>,
) -> Result<Json<TurnReceipt>, ApiError> {
    let who = caller.principal().clone();
    // Detached: a completion cut by the timeout between its two messages and its receipt
    // would be repaired by a retry, but only if the client retries; run it to its end.
    detached(async move {
        let receipt = state.engine.complete_turn(&who, &turn_id, body).await?;
        state.metrics.add("turns_completed", 1);
        Ok(Json(receipt))
    })
    .await
}
