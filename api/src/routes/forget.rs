//! `POST /v1/forget`.

use axum::extract::State;
use cairn_service::forget::ForgetReport;
use cairn_service::recall::ForgetRequest;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, CommonErrors};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default().routes(routes!(forget_handler))
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
    caller: Caller,
    Json(body): Json<ForgetRequest>,
) -> Result<Json<ForgetReport>, ApiError> {
    let who = caller.principal().clone();
    detached(async move {
        let report = state.engine.forget(&who, body).await?;
        state.metrics.add("forgets", 1);
        Ok(Json(report))
    })
    .await
}
