//! Reasoning memory: traces, their steps and tool calls; similar traces and tool statistics.
//! Deleting a trace (with its steps and tool calls) is `POST /v1/forget` with `trace:<id>`.

use axum::extract::{Path, State};
use cairn_models::knowledge::{Step, ToolCall, Trace};
use cairn_service::access::{partition, PageRequest};
use cairn_service::knowledge::Scored;
use cairn_service::reasoning::{
    CompleteTraceRequest, StepRequest, ToolCallRequest, ToolStats, TraceRequest, TraceView,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{default_ns, detached, query_error, CommonErrors, QueryResult, ScopeQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::json::Json;
use crate::SharedState;

pub(super) fn router() -> OpenApiRouter<SharedState> {
    OpenApiRouter::default()
        .routes(routes!(start_trace, list_traces))
        .routes(routes!(similar_traces))
        .routes(routes!(get_trace))
        .routes(routes!(add_step))
        .routes(routes!(record_tool_call))
        .routes(routes!(complete_trace))
        .routes(routes!(tool_stats))
}

/// `GET /v1/traces` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TraceListQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Only the traces of this session.
    #[serde(default)]
    pub session: Option<String>,
    /// Page size (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `GET /v1/traces/similar` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SimilarQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// The task to find past traces for (1 to 8192 bytes).
    pub task: String,
    /// Most results (default 10, at most 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only traces completed with `success: true`.
    #[serde(default)]
    pub success_only: bool,
}

/// `GET /v1/tools/stats` query string.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ToolStatsQuery {
    pub tenant: String,
    pub user: String,
    /// Default `default`.
    #[serde(default = "default_ns")]
    #[param(required = false)]
    pub namespace: String,
    /// Only this tool.
    #[serde(default)]
    pub tool: Option<String>,
}

/// `GET /v1/traces`: most recently started first.
#[derive(Debug, Serialize, ToSchema)]
pub struct TraceList {
    pub traces: Vec<Trace>,
    /// All matching traces (the page may hold fewer).
    pub total: usize,
}

/// `GET /v1/traces/similar`: most similar first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SimilarTraces {
    pub results: Vec<Scored<Trace>>,
}

/// `GET /v1/tools/stats`: by tool name.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolStatsList {
    pub tools: Vec<ToolStats>,
}

/// The document's `TraceView` and `StepView`. Their record (`Trace`, `Step`) is flattened
/// into them with `#[serde(flatten)]`, which utoipa describes as an `allOf` of the record
/// and an object holding the list: a reader that allows no undocumented field (the HTTP
/// tests, strict code generators) then rejects every branch. Here they are one object:
/// the record's derived schema (so its fields and their descriptions cannot drift) plus
/// the list.
mod flat {
    use std::borrow::Cow;

    use cairn_models::knowledge::{Step, ToolCall, Trace};
    use utoipa::openapi::schema::{ArrayBuilder, Schema};
    use utoipa::openapi::{Ref, RefOr};
    use utoipa::{PartialSchema, ToSchema};

    /// `record`'s object schema with one more required field, `field`: an array of `item`.
    fn with_list(
        record: RefOr<Schema>,
        description: &str,
        field: &str,
        item: &str,
    ) -> RefOr<Schema> {
        match record {
            RefOr::T(Schema::Object(mut object)) => {
                object.properties.insert(
                    field.to_string(),
                    ArrayBuilder::new()
                        .items(Ref::from_schema_name(item))
                        .build()
                        .into(),
                );
                object.required.push(field.to_string());
                object.description = Some(description.to_string());
                RefOr::T(Schema::Object(object))
            }
            other => other,
        }
    }

    /// A trace's fields and its `steps`.
    pub struct TraceView;

    impl PartialSchema for TraceView {
        fn schema() -> RefOr<Schema> {
            with_list(
                Trace::schema(),
                "A trace with its steps, in order.",
                "steps",
                "StepView",
            )
        }
    }

    impl ToSchema for TraceView {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("TraceView")
        }

        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push((StepView::name().into(), StepView::schema()));
            StepView::schemas(schemas);
        }
    }

    /// A step's fields and its `tool_calls`.
    pub struct StepView;

    impl PartialSchema for StepView {
        fn schema() -> RefOr<Schema> {
            with_list(
                Step::schema(),
                "A step with its tool calls, in order.",
                "tool_calls",
                "ToolCall",
            )
        }
    }

    impl ToSchema for StepView {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("StepView")
        }

        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push((ToolCall::name().into(), ToolCall::schema()));
            ToolCall::schemas(schemas);
        }
    }
}

/// Start a trace (`trace:<id>`): one task an agent works on, in the scope's session.
/// Without `trace_key` every call starts a new trace; with one, starting the same key
/// again answers the same trace (`409 conflict` if the key was used for another task or
/// session).
#[utoipa::path(post, path = "/traces", tag = "reasoning", request_body = TraceRequest,
    responses(
        (status = 200, description = "The trace", body = Trace),
        (status = 409, description = "`conflict`: the trace key was used for another task or session", body = ErrorBody),
        CommonErrors,
    ))]
async fn start_trace(
    State(state): State<SharedState>,
    caller: Caller,
    Json(body): Json<TraceRequest>,
) -> Result<Json<Trace>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.start_trace(&who, body).await?)) }).await
}

/// The scope's traces (or one session's), most recently started first.
#[utoipa::path(get, path = "/traces", tag = "reasoning", params(TraceListQuery),
    responses((status = 200, description = "One page of traces", body = TraceList), CommonErrors))]
async fn list_traces(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<TraceListQuery>,
) -> Result<Json<TraceList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let page = state
        .engine
        .list_traces(
            &who,
            &partition,
            q.session.as_deref(),
            PageRequest::new(q.offset, q.limit),
        )
        .await?;
    Ok(Json(TraceList {
        traces: page.items,
        total: page.total,
    }))
}

/// Past traces whose task means something like `task`, most similar first, each with its
/// outcome; with `success_only`, only traces completed successfully.
#[utoipa::path(get, path = "/traces/similar", tag = "reasoning", params(SimilarQuery),
    responses((status = 200, description = "The most similar traces, with their rank scores", body = SimilarTraces), CommonErrors))]
async fn similar_traces(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<SimilarQuery>,
) -> Result<Json<SimilarTraces>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let results = state
        .engine
        .similar_traces(
            &who,
            &partition,
            &q.task,
            q.limit.unwrap_or(cairn_service::knowledge::DEFAULT_SEARCH),
            q.success_only,
        )
        .await?;
    Ok(Json(SimilarTraces { results }))
}

/// A trace with its steps in order, each with its tool calls in order.
#[utoipa::path(get, path = "/traces/{id}", tag = "reasoning",
    params(("id" = String, Path, description = "Trace id"), ScopeQuery),
    responses(
        (status = 200, description = "The trace, its steps and their tool calls", body = flat::TraceView),
        (status = 404, description = "`not_found`: no such trace in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn get_trace(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    query: QueryResult<ScopeQuery>,
) -> Result<Json<TraceView>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = q.partition()?;
    let who = caller.principal().clone();
    Ok(Json(state.engine.get_trace(&who, &partition, &id).await?))
}

/// Add the next step to a trace: numbered 1, 2, 3... in the order of writing (concurrent
/// writers never get the same number). Not idempotent: each call adds a step.
#[utoipa::path(post, path = "/traces/{id}/steps", tag = "reasoning", request_body = StepRequest,
    params(("id" = String, Path, description = "Trace id")),
    responses(
        (status = 200, description = "The step", body = Step),
        (status = 404, description = "`not_found`: no such trace in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn add_step(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<StepRequest>,
) -> Result<Json<Step>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.add_step(&who, &id, body).await?)) }).await
}

/// Record a tool call of a step (numbered 1, 2, 3... within the step; status default
/// `success`). `arguments` and `result` are stored as given (at most 64 KiB each). Not
/// idempotent: each call adds a tool call.
#[utoipa::path(post, path = "/steps/{id}/tool-calls", tag = "reasoning", request_body = ToolCallRequest,
    params(("id" = String, Path, description = "Step id")),
    responses(
        (status = 200, description = "The tool call", body = ToolCall),
        (status = 404, description = "`not_found`: no such step in this scope", body = ErrorBody),
        CommonErrors,
    ))]
async fn record_tool_call(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<ToolCallRequest>,
) -> Result<Json<ToolCall>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.record_tool_call(&who, &id, body).await?)) }).await
}

/// Complete a trace with its outcome; recall then cites it (`trace:<id>`) with that
/// outcome. Idempotent: completing again with the same outcome and success answers the
/// trace; with another one is `409 conflict`.
#[utoipa::path(post, path = "/traces/{id}/complete", tag = "reasoning", request_body = CompleteTraceRequest,
    params(("id" = String, Path, description = "Trace id")),
    responses(
        (status = 200, description = "The completed trace", body = Trace),
        (status = 404, description = "`not_found`: no such trace in this scope", body = ErrorBody),
        (status = 409, description = "`conflict`: already completed with another outcome", body = ErrorBody),
        CommonErrors,
    ))]
async fn complete_trace(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<CompleteTraceRequest>,
) -> Result<Json<Trace>, ApiError> {
    let who = caller.principal().clone();
    detached(async move { Ok(Json(state.engine.complete_trace(&who, &id, body).await?)) }).await
}

/// Per tool (or for one tool): calls, successes, failures (`failure`, `error`, `timeout`),
/// other calls (`pending`, `cancelled`), success rate over the finished calls, and mean
/// and 95th-percentile duration of the calls that report one. By tool name.
#[utoipa::path(get, path = "/tools/stats", tag = "reasoning", params(ToolStatsQuery),
    responses((status = 200, description = "Statistics per tool", body = ToolStatsList), CommonErrors))]
async fn tool_stats(
    State(state): State<SharedState>,
    caller: Caller,
    query: QueryResult<ToolStatsQuery>,
) -> Result<Json<ToolStatsList>, ApiError> {
    let axum::extract::Query(q) = query.map_err(query_error)?;
    let partition = partition(&q.tenant, &q.user, &q.namespace)?;
    let who = caller.principal().clone();
    let tools = state
        .engine
        .tool_stats(&who, &partition, q.tool.as_deref())
        .await?;
    Ok(Json(ToolStatsList { tools }))
}
