//! `POST /v1/admin/backup`: an online backup of the store (embedded or server), for the
//! operator.

use axum::extract::State;
use cairn_service::backup::BackupManifest;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{detached, CommonErrors};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default().routes(routes!(backup))
}

/// `POST /v1/admin/backup`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// A new (or empty) directory on the server's machine, as an absolute path, outside
    /// the data directory. It becomes a data directory of its own, or holds the server's
    /// snapshot file (`cairn restore` either way).
    pub to: String,
}

/// Back up the whole store while it keeps serving reads and writes, with a manifest. The
/// embedded store: a consistent copy at one instant (every write acknowledged before the
/// call began is in it). A Qdrant server store: the server's snapshot of the collection,
/// downloaded and SHA-256 checked. The operator's only (a key-less server on loopback); progress is logged. A
/// backup that outlasts the request timeout finishes anyway (its manifest says so).
#[utoipa::path(post, path = "/admin/backup", tag = "admin", request_body = BackupRequest,
    responses(
        (status = 200, description = "The backup's manifest", body = BackupManifest),
        (status = 403, description = "`forbidden`: an API key (backups are the operator's)", body = ErrorBody),
        (status = 507, description = "`insufficient_storage`: the target's disk is full", body = ErrorBody),
        CommonErrors,
    ))]
async fn backup(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<BackupRequest>,
) -> Result<Json<BackupManifest>, ApiError> {
    let who = caller.principal().clone();
    detached(async move {
        let last = std::sync::Mutex::new(std::time::Instant::now());
        let progress = |p: cairn_store::BackupProgress| {
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= std::time::Duration::from_secs(5) {
                *last = std::time::Instant::now();
                tracing::info!(
                    copied = p.copied,
                    total = p.total,
                    replayed = p.replayed,
                    "backup in progress"
                );
            }
        };
        let manifest = state
            .engine
            .backup(&who, std::path::Path::new(&body.to), &progress)
            .await?;
        Ok(Json(manifest))
    })
    .await
}
