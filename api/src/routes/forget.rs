//! `POST /v1/forget`.

use axum::extract::State;
use axum::http::HeaderMap;
use cairn_models::{Ref, Scope};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, CommonErrors};
use crate::error::{ApiError, ErrorBody};
use crate::forget::{self, ForgetReport};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default().routes(routes!(forget_handler))
}

/// `POST /v1/forget` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    #[schema(value_type = crate::schema::Scope)]
    pub scope: Scope,
    /// What to forget: `doc:<id>` or `doc:<id>#<chunk>` (the whole document),
    /// `msg:<conversation>/<seq>`, `conv:<conversation>`, `turn:<turn id>` (both messages),
    /// `evt:<id>`, `cand:<id>` or `mem:<id>` (an approved memory).
    #[serde(rename = "ref")]
    #[schema(rename = "ref")]
    pub reference: String,
    /// Also delete the records of invalidated candidates (they restate the evidence), and
    /// flush to disk before answering.
    #[serde(default)]
    pub hard: bool,
}

/// Forget evidence and everything derived from it: chunks, approved memories whose
/// evidence was only this (invalidated), and completed turns' records (tombstoned).
#[utoipa::path(post, path = "/forget", tag = "forget", request_body = ForgetRequest,
    responses(
        (status = 200, description = "What was removed and invalidated", body = ForgetReport),
        (status = 404, description = "`not_found`: nothing stored under that ref in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn forget_handler(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Json(body): Json<ForgetRequest>,
) -> Result<Json<ForgetReport>, ApiError> {
    body.scope.validate()?;
    state.auth.check_scope(&headers, &body.scope)?;
    let reference = Ref::parse_input(&body.reference)?;
    detached(async move {
        let report = forget::forget(
            &state.engine,
            &body.scope.partition(),
            &reference,
            body.hard,
        )
        .await?;
        state.metrics.add("forgets", 1);
        Ok(Json(report))
    })
    .await
}
