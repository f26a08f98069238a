//! Third-party events and candidate memories.

use axum::extract::{Path, State};
use cairn_service::access::{partition, PageRequest};
use cairn_service::candidates::{
    CandidateRequest, CandidateStatus, CandidateView, DecisionRequest, ProposeResponse,
};
use cairn_service::events::{EventReceipt, EventRequest, EventView};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, query_error, CommonErrors, QueryResult, ScopeQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(post_event))
        .routes(routes!(get_event))
        .routes(routes!(propose, list_candidates))
        .routes(routes!(get_candidate))
        .routes(routes!(approve))
        .routes(routes!(reject))
}

/// `GET /v1/candidates` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CandidateQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "super::default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Only candidates with this status.
    #[serde(default)]
    #[param(value_type = Option<CandidateStatus>)]
    pub status: Option<CandidateStatus>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `GET /v1/candidates`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CandidateList {
    pub candidates: Vec<CandidateView>,
    pub total: usize,
}

/// Post a third-party event as evidence (`evt:<id>`). Events are stored verbatim and can be
/// cited by candidates, but they are not searchable: recall never returns them.
/// Idempotent: the same event (agent, content, time) lands on the same id.
#[utoipa::path(post, path = "/events", tag = "candidates", request_body = EventRequest,
    responses((status = 200, description = "The event's id and ref", body = EventReceipt), CommonErrors))]
async fn post_event(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<EventRequest>,
) -> Result<Json<EventReceipt>, ApiError> {
    let who = caller.principal().clone();
    detached(async move {
        let receipt = state.engine.post_event(&who, body).await?;
        if receipt.created {
            state.metrics.add("events_recorded", 1);
        }
        Ok(Json(receipt))
    })
    .await
}

/// One event.
#[utoipa::path(get, path = "/events/{id}", tag = "candidates",
    params(("id" = String, Path, description = "Event id"), ScopeQuery),
    responses(
        (status = 200, description = "The event", body = EventView),
        (status = 404, description = "`not_found`: no such event in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_event(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<EventView>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(state.engine.get_event(&who, &partition, &id).await?))
}

/// Propose a memory (pending until a full key approves it). Every evidence ref must exist in
/// the scope. Idempotent: the same proposal returns the stored candidate (`created: false`).
#[utoipa::path(post, path = "/candidates", tag = "candidates", request_body = CandidateRequest,
    responses(
        (status = 200, description = "The candidate", body = ProposeResponse),
        (status = 422, description = "`evidence_not_found`: an evidence ref does not exist in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn propose(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<CandidateRequest>,
) -> Result<Json<ProposeResponse>, ApiError> {
    let who = caller.principal().clone();
    detached(async move {
        let response = state.engine.propose(&who, body).await?;
        if response.created {
            state.metrics.add("candidates_proposed", 1);
        }
        Ok(Json(response))
    })
    .await
}

/// The scope's candidates, oldest proposal first, optionally of one status.
#[utoipa::path(get, path = "/candidates", tag = "candidates", params(CandidateQuery),
    responses((status = 200, description = "One page of candidates", body = CandidateList), CommonErrors))]
async fn list_candidates(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<CandidateQuery>,
) -> Result<Json<CandidateList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .list_candidates(
            &who,
            &partition,
            q.status,
            PageRequest::new(q.offset, q.limit),
        )
        .await?;
    Ok(Json(CandidateList {
        candidates: page.items,
        total: page.total,
    }))
}

/// One candidate.
#[utoipa::path(get, path = "/candidates/{id}", tag = "candidates",
    params(("id" = String, Path, description = "Candidate id"), ScopeQuery),
    responses(
        (status = 200, description = "The candidate", body = CandidateView),
        (status = 404, description = "`not_found`: no such candidate in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_candidate(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<CandidateView>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(
        state.engine.get_candidate(&who, &partition, &id).await?,
    ))
}

async fn decide(
    state: SharedState,
    caller: Caller,
    id: String,
    body: DecisionRequest,
    approve: bool,
) -> Result<Json<CandidateView>, ApiError> {
    let who = caller.principal().clone();
    detached(async move {
        let view = state.engine.decide(&who, &id, body, approve).await?;
        state.metrics.add(
            if approve {
                "candidates_approved"
            } else {
                "candidates_rejected"
            },
            1,
        );
        Ok(Json(view))
    })
    .await
}

/// Approve a candidate: it becomes a searchable memory (`mem:<id>`, trust origin
/// `third_party_agent`, citing its evidence). Idempotent; a rejected or invalidated
/// candidate is `409 conflict`.
#[utoipa::path(post, path = "/candidates/{id}/approve", tag = "candidates", request_body = DecisionRequest,
    params(("id" = String, Path, description = "Candidate id")),
    responses(
        (status = 200, description = "The approved candidate", body = CandidateView),
        (status = 404, description = "`not_found`: no such candidate in this scope", body = ErrorBody),
        (status = 409, description = "`conflict`: rejected, invalidated, or its evidence is gone", body = ErrorBody),
        CommonErrors,
    ))]
async fn approve(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<DecisionRequest>,
) -> Result<Json<CandidateView>, ApiError> {
    decide(state, caller, id, body, true).await
}

/// Reject a candidate: it is never recalled. Idempotent; an approved or invalidated
/// candidate is `409 conflict`.
#[utoipa::path(post, path = "/candidates/{id}/reject", tag = "candidates", request_body = DecisionRequest,
    params(("id" = String, Path, description = "Candidate id")),
    responses(
        (status = 200, description = "The rejected candidate", body = CandidateView),
        (status = 404, description = "`not_found`: no such candidate in this scope", body = ErrorBody),
        (status = 409, description = "`conflict`: approved or invalidated", body = ErrorBody),
        CommonErrors,
    ))]
async fn reject(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<DecisionRequest>,
) -> Result<Json<CandidateView>, ApiError> {
    decide(state, caller, id, body, false).await
}
