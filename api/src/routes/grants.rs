//! Agent grants: issue (with the agent's key), list, read, suspend, revoke, restore. The
//! owner's routes: a full API key (or the local operator); an agent's key never manages
//! grants.

use axum::extract::{Path, State};
use cairn_service::grants::{
    GrantChangeRequest, GrantRequest, GrantView, IssuedGrant, StatusChange,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{query_error, CommonErrors, QueryResult};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(issue, list))
        .routes(routes!(get_grant))
        .routes(routes!(suspend))
        .routes(routes!(revoke))
        .routes(routes!(restore))
}

/// Whose grants.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct GrantsQuery {
    pub tenant: String,
    pub user: String,
}

/// `GET /v1/grants`.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantList {
    pub grants: Vec<GrantView>,
}

/// Issue a grant to an agent: the operations it may do in this user's memory, and a new
/// key for it (shown once; Cairn keeps only its hash). Issuing again for the same agent
/// replaces the grant and its key and keeps the history.
#[utoipa::path(post, path = "/grants", tag = "grants", request_body = GrantRequest,
    responses((status = 200, description = "The grant and the agent's key", body = IssuedGrant), CommonErrors))]
async fn issue(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<GrantRequest>,
) -> Result<Json<IssuedGrant>, ApiError> {
    let who = caller.principal().clone();
    Ok(Json(state.engine.issue_grant(&who, body).await?))
}

/// The user's grants.
#[utoipa::path(get, path = "/grants", tag = "grants", params(GrantsQuery),
    responses((status = 200, description = "The grants, by agent", body = GrantList), CommonErrors))]
async fn list(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<GrantsQuery>,
) -> Result<Json<GrantList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let who = caller.principal().clone();
    let grants = state.engine.list_grants(&who, &q.tenant, &q.user).await?;
    Ok(Json(GrantList { grants }))
}

/// One agent's grant.
#[utoipa::path(get, path = "/grants/{agent}", tag = "grants",
    params(("agent" = String, Path, description = "Agent identity"), GrantsQuery),
    responses(
        (status = 200, description = "The grant", body = GrantView),
        (status = 404, description = "`not_found`: no grant for that agent", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_grant(
    State(state): State<SharedState>,
    caller: Caller,
    Path(agent): Path<String>,
    query: QueryResult<GrantsQuery>,
) -> Result<Json<GrantView>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let who = caller.principal().clone();
    Ok(Json(
        state
            .engine
            .get_grant(&who, &q.tenant, &q.user, &agent)
            .await?,
    ))
}

async fn change(
    state: SharedState,
    caller: Caller,
    agent: String,
    body: GrantChangeRequest,
    change: StatusChange,
) -> Result<Json<GrantView>, ApiError> {
    let who = caller.principal().clone();
    Ok(Json(
        state
            .engine
            .change_grant(&who, &agent, body, change)
            .await?,
    ))
}

/// Suspend a grant: every call of the agent is refused (`403 capability_denied`) until it
/// is restored.
#[utoipa::path(post, path = "/grants/{agent}/suspend", tag = "grants", request_body = GrantChangeRequest,
    params(("agent" = String, Path, description = "Agent identity")),
    responses(
        (status = 200, description = "The suspended grant", body = GrantView),
        (status = 404, description = "`not_found`: no grant for that agent", body = ErrorBody),
        (status = 409, description = "`conflict`: the grant is revoked", body = ErrorBody),
        CommonErrors,
    ))]
async fn suspend(
    State(state): State<SharedState>,
    caller: Caller,
    Path(agent): Path<String>,
    Json(body): Json<GrantChangeRequest>,
) -> Result<Json<GrantView>, ApiError> {
    change(state, caller, agent, body, StatusChange::Suspend).await
}

/// Revoke a grant for good: its key admits nothing any more (issue a new grant for a new
/// key).
#[utoipa::path(post, path = "/grants/{agent}/revoke", tag = "grants", request_body = GrantChangeRequest,
    params(("agent" = String, Path, description = "Agent identity")),
    responses(
        (status = 200, description = "The revoked grant", body = GrantView),
        (status = 404, description = "`not_found`: no grant for that agent", body = ErrorBody),
        CommonErrors,
    ))]
async fn revoke(
    State(state): State<SharedState>,
    caller: Caller,
    Path(agent): Path<String>,
    Json(body): Json<GrantChangeRequest>,
) -> Result<Json<GrantView>, ApiError> {
    change(state, caller, agent, body, StatusChange::Revoke).await
}

/// Restore a suspended grant.
#[utoipa::path(post, path = "/grants/{agent}/restore", tag = "grants", request_body = GrantChangeRequest,
    params(("agent" = String, Path, description = "Agent identity")),
    responses(
        (status = 200, description = "The active grant", body = GrantView),
        (status = 404, description = "`not_found`: no grant for that agent", body = ErrorBody),
        (status = 409, description = "`conflict`: the grant is revoked", body = ErrorBody),
        CommonErrors,
    ))]
async fn restore(
    State(state): State<SharedState>,
    caller: Caller,
    Path(agent): Path<String>,
    Json(body): Json<GrantChangeRequest>,
) -> Result<Json<GrantView>, ApiError> {
    change(state, caller, agent, body, StatusChange::Restore).await
}
