//! The routers. Each handler: read the request, call the service operation with the
//! request's principal, return JSON. Every
//! handler carries its OpenAPI description (`#[utoipa::path]`) and is registered through
//! `utoipa_axum::routes!`, so the served routes and the OpenAPI document come from the same
//! list and cannot diverge.

mod admin;
mod candidates;
mod documents;
mod forget;
mod grants;
mod health;
mod knowledge;
mod messages;
mod reasoning;
mod recall;

use std::collections::BTreeMap;

use cairn_models::Partition;
use serde::Deserialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoParams, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::error::{ApiError, ErrorBody};
use crate::SharedState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Cairn",
        description = "Retrieval memory for AI agents: every recalled item carries a citation.\n\n\
            Errors are `{\"error\": {\"code\", \"message\", \"hint\"?}}` with a stable `code`. \
            When the server has API keys, send `Authorization: Bearer <key>`; a key reaches only \
            its tenant (and users), and a proposer key only `POST /v1/events` and \
            `POST /v1/candidates`. Without keys the server answers only loopback `Host`s and \
            `Origin`s (`403 forbidden_origin` otherwise).\n\n\
            Limits: document and message `metadata` at most 16 KiB serialized, `source` at most \
            1024 bytes, message content at most 32 KiB (`413 payload_too_large`, naming the \
            limit); at most 1000 messages per request, 64 `refers_to` refs, 16 values per \
            recall filter list (`400 too_many_items`); recall queries at most 8192 bytes. \
            A write that outlives the request timeout (`504 timeout`) still completes: \
            retry it with the same key to get its outcome.",
        license(name = "Apache-2.0")
    ),
    modifiers(&BearerAuth),
    components(schemas(ErrorBody)),
    tags(
        (name = "health", description = "Liveness, readiness, metrics"),
        (name = "recall", description = "MemoryPacks and agent turns"),
        (name = "documents", description = "Documents: text, Markdown, PDF"),
        (name = "messages", description = "Conversation messages"),
        (name = "candidates", description = "Third-party events and candidate memories"),
        (name = "forget", description = "Deleting evidence and what derives from it"),
        (name = "grants", description = "Agent identities and their capability grants"),
        (name = "knowledge", description = "Knowledge memory: entities, relationships, preferences, facts (validity, supersession, conflicts) and predicate declarations. Delete with `POST /v1/forget` and an `ent:`, `rel:`, `pref:` or `fact:` ref"),
        (name = "reasoning", description = "Reasoning memory: traces of the tasks an agent worked on, their steps and tool calls; similar past traces and tool statistics. Delete with `POST /v1/forget` and a `trace:` ref"),
        (name = "admin", description = "Operator tasks: online backup of the store"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // A key is required only when the server has keys configured.
        openapi.security = Some(vec![
            utoipa::openapi::security::SecurityRequirement::new("api_key", Vec::<String>::new()),
            utoipa::openapi::security::SecurityRequirement::default(),
        ]);
    }
}

/// Every route, with its OpenAPI description.
pub(crate) fn api() -> OpenApiRouter<SharedState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(health::router())
        .nest(
            "/v1",
            OpenApiRouter::default()
                .merge(recall::router())
                .merge(documents::router())
                .merge(messages::router())
                .merge(candidates::router())
                .merge(forget::router())
                .merge(grants::router())
                .merge(knowledge::router())
                .merge(reasoning::router())
                .merge(admin::router()),
        )
}

/// The error responses every `/v1` route can give (the route lists its specific ones).
pub(crate) struct CommonErrors;

impl utoipa::IntoResponses for CommonErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        [
            (
                "400",
                "`invalid_request`: malformed JSON, wrong types, bad scope or ids; `too_many_items`: a list over its limit",
            ),
            ("401", "`unauthorized`: missing or unknown API key"),
            (
                "403",
                "`scope_forbidden`: the key may not access that tenant/user; `forbidden`: a proposer key, or an agent naming another agent; `capability_denied`: the agent's grant does not allow it, or is suspended or revoked; `forbidden_origin`: no API keys and a non-loopback Host or Origin",
            ),
            ("405", "`method_not_allowed`: the route does not take this method"),
            (
                "413",
                "`payload_too_large`: body over the server's limit, or a field over its limit (the message names it)",
            ),
            ("415", "`unsupported_media_type`: not JSON"),
            ("500", "`internal`: a bug; details are logged, not returned"),
            ("503", "`unavailable`: model or storage unavailable"),
            ("504", "`timeout`: the request took too long"),
        ]
        .into_iter()
        .map(|(status, description)| (status.to_string(), error(description)))
        .collect()
    }
}

/// Runs a handler's service call to its end even if the request is given up: the request
/// timeout (or a client hanging up) drops the handler's future, which would otherwise stop
/// a write between two store calls (a 504 while the ingest carries on half-way, a turn
/// with one message). In a spawned task the work finishes; the client gets `504 timeout`
/// and an idempotent retry returns the outcome.
pub(crate) async fn detached<T, F>(work: F) -> Result<T, ApiError>
where
    F: std::future::Future<Output = Result<T, ApiError>> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(work)
        .await
        .map_err(|e| ApiError::internal(format!("write task: {e}")))?
}

/// Scope of a GET request, from the query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScopeQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// Scope of a DELETE request, from the query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Also delete the records of invalidated candidates, and flush to disk.
    #[serde(default)]
    pub hard: bool,
}

fn default_ns() -> String {
    "default".into()
}

impl ScopeQuery {
    fn partition(&self) -> Result<Partition, ApiError> {
        Ok(cairn_service::access::partition(
            &self.tenant,
            &self.user,
            &self.namespace,
        )?)
    }

    fn page(&self) -> cairn_service::PageRequest {
        cairn_service::PageRequest::new(self.offset, self.limit)
    }
}

impl DeleteQuery {
    fn partition(&self) -> Result<Partition, ApiError> {
        Ok(cairn_service::access::partition(
            &self.tenant,
            &self.user,
            &self.namespace,
        )?)
    }
}

fn query_error(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::invalid(format!("query string: {}", e.body_text()))
}

type QueryResult<T> = Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>;
