//! The agent-memory TCK bridge: the conformance suite's HTTP protocol (`POST /{method}`
//! with a flat JSON body, bridge protocol 0.2.0) mapped one to one onto the service's
//! operations, for `cairn tck-bridge`.
//!
//! It adds no memory logic: each method parses its body, calls one [`Engine`] operation as
//! the local operator and writes the answer in the suite's shapes. What the mapping itself
//! decides:
//! - The suite has no tenants: the bridge serves one configured scope (tenant, user); its
//!   sessions are Cairn conversations (`conversation_id` = session) and the `session` of
//!   traces. `/clear_all_data`, called before every test, moves the bridge to a fresh
//!   namespace (a new, empty partition: instant, and nothing of an earlier test can leak).
//! - Ids are Cairn's own: record ids are UUIDs already; a message's id is its point id;
//!   a conversation's id is a UUIDv5 of the partition and session.
//! - Times are RFC 3339 with microseconds and `+00:00`; entity types are upper case.
//! - "Not found" answers of lookups are the suite's: `null` for a trace or an entity by
//!   name, `{"deleted": false}` for a message, an empty conversation for an unknown session.
//! - Errors are `{"error": message}` with the status of the stable code
//!   ([`crate::error::status_of`]).
//!
//! Platinum (the hosted service's operations, optional) is mapped where Cairn has the
//! feature: conversations (a UUID conversation id is the session; a conversation exists
//! once it holds a message, so `create_conversation` only names one), bulk messages, the
//! entity graph (entities and relationships), flat reasoning steps (one trace per
//! conversation, keyed by it) and context (the recent messages; Cairn keeps no
//! observations or reflections, so those lists are empty). Entity feedback, entity
//! history and provenance, and the Cypher console have no Cairn counterpart: `501`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use cairn_ingest::messages::KeyedMessage;
use cairn_ingest::MessageInput;
use cairn_models::knowledge::{Entity, Fact, Preference, Relationship, Step, ToolCall, Trace};
use cairn_models::{Partition, Role, Scope};
use cairn_service::knowledge::{
    EntityRequest, FactRequest, MergeRequest, PreferenceRequest, RelationshipRequest,
};
use cairn_service::messages::MessageView;
use cairn_service::reasoning::{
    CompleteTraceRequest, StepRequest, StepView, ToolCallRequest, TraceRequest, TraceView,
};
use cairn_service::{Engine, PageRequest, Principal, ServiceError};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

/// The bridge protocol version this implements.
pub const PROTOCOL_VERSION: &str = "0.2.0";

/// The bridge's state: the engine, the scope it serves, and the namespace of the current
/// test (a fresh one after each `/clear_all_data`).
#[derive(Debug)]
pub struct Bridge {
    engine: Arc<Engine>,
    tenant: String,
    user: String,
    /// Namespaces are `<prefix>-<n>`: the prefix is random per process, so a restarted
    /// bridge on the same data directory never reuses an earlier run's partition.
    prefix: String,
    generation: AtomicU64,
    namespace: Mutex<String>,
}

impl Bridge {
    /// A bridge serving `tenant`/`user` of `engine`.
    pub fn new(engine: Arc<Engine>, tenant: &str, user: &str) -> Result<Bridge, ServiceError> {
        let prefix = format!("tck-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let bridge = Bridge {
            engine,
            tenant: tenant.to_string(),
            user: user.to_string(),
            namespace: Mutex::new(format!("{prefix}-0")),
            prefix,
            generation: AtomicU64::new(0),
        };
        bridge.scope(None).validate()?;
        Ok(bridge)
    }

    fn namespace(&self) -> String {
        self.namespace
            .lock()
            .map(|n| n.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The scope of the current test, in `session` (or the default session).
    fn scope(&self, session: Option<&str>) -> Scope {
        Scope {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            namespace: self.namespace(),
            agent: "tck".to_string(),
            session: session.unwrap_or("default").to_string(),
        }
    }

    fn partition(&self) -> Partition {
        self.scope(None).partition()
    }

    fn clear(&self) {
        let n = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let next = format!("{}-{n}", self.prefix);
        match self.namespace.lock() {
            Ok(mut ns) => *ns = next,
            Err(p) => *p.into_inner() = next,
        }
    }
}

/// The bridge's router: `POST /{method}`.
pub fn router(bridge: Arc<Bridge>) -> Router {
    Router::new()
        .route("/{method}", post(dispatch))
        .with_state(bridge)
}

/// Serves the bridge on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    bridge: Arc<Bridge>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(bridge))
        .with_graceful_shutdown(shutdown)
        .await
}

/// A bridge error: `{"error": message}` with the status of the stable code.
#[derive(Debug)]
struct BridgeError(StatusCode, String);

impl From<ServiceError> for BridgeError {
    fn from(e: ServiceError) -> Self {
        let (status, _) = crate::error::status_of(e.code());
        if status.is_server_error() {
            tracing::error!("tck bridge: {e}");
        }
        BridgeError(status, e.public_message())
    }
}

impl IntoResponse for BridgeError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "error": self.1 }))).into_response()
    }
}

type Answer = Result<Response, BridgeError>;

fn ok(v: Value) -> Answer {
    Ok(axum::Json(v).into_response())
}

fn no_content() -> Answer {
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn body<T: DeserializeOwned>(raw: &[u8]) -> Result<T, BridgeError> {
    let raw: &[u8] = if raw.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        raw
    };
    serde_json::from_slice(raw)
        .map_err(|e| BridgeError(StatusCode::BAD_REQUEST, format!("request body: {e}")))
}

/// RFC 3339, microseconds, `+00:00` (what the suite's parser reads).
fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

fn not_found(e: &ServiceError) -> bool {
    matches!(e, ServiceError::NotFound(_))
}

async fn dispatch(
    State(bridge): State<Arc<Bridge>>,
    Path(method): Path<String>,
    raw: axum::body::Bytes,
) -> Response {
    let b = bridge.as_ref();
    let answer = match method.as_str() {
        "setup" => ok(json!({ "ok": true, "protocol_version": PROTOCOL_VERSION })),
        "teardown" => no_content(),
        "clear_all_data" => {
            b.clear();
            no_content()
        }
        "add_message" => with(b, &raw, add_message).await,
        "get_conversation" => with(b, &raw, get_conversation).await,
        "search_messages" => with(b, &raw, search_messages).await,
        "list_sessions" => with(b, &raw, list_sessions).await,
        "delete_message" => with(b, &raw, delete_message).await,
        "clear_session" => with(b, &raw, clear_session).await,
        "add_entity" => with(b, &raw, add_entity).await,
        "add_preference" => with(b, &raw, add_preference).await,
        "add_fact" => with(b, &raw, add_fact).await,
        "search_entities" => with(b, &raw, search_entities).await,
        "search_preferences" => with(b, &raw, search_preferences).await,
        "get_entity_by_name" => with(b, &raw, get_entity_by_name).await,
        "get_related_entities" => with(b, &raw, get_related_entities).await,
        "add_relationship" => with(b, &raw, add_relationship).await,
        "merge_duplicate_entities" => with(b, &raw, merge_duplicate_entities).await,
        "start_trace" => with(b, &raw, start_trace).await,
        "add_step" => with(b, &raw, add_step).await,
        "record_tool_call" => with(b, &raw, record_tool_call).await,
        "complete_trace" => with(b, &raw, complete_trace).await,
        "get_trace_with_steps" => with(b, &raw, get_trace_with_steps).await,
        "list_traces" => with(b, &raw, list_traces).await,
        "get_tool_stats" => with(b, &raw, get_tool_stats).await,
        "get_similar_traces" => with(b, &raw, get_similar_traces).await,
        // Platinum (hosted-service operations), where they map onto what Cairn does.
        "create_conversation" => with(b, &raw, create_conversation).await,
        "list_conversations" => with(b, &raw, list_conversations).await,
        "get_conversation_metadata" => with(b, &raw, get_conversation_metadata).await,
        "delete_conversation" => with(b, &raw, delete_conversation).await,
        "bulk_add_messages" => with(b, &raw, bulk_add_messages).await,
        "get_context" => with(b, &raw, get_context).await,
        "get_observations" | "get_reflections" => with(b, &raw, no_summaries).await,
        "list_entities" => with(b, &raw, list_entities).await,
        "get_entity" => with(b, &raw, get_entity).await,
        "delete_entity" => with(b, &raw, delete_entity).await,
        "get_entity_graph" => get_entity_graph(b).await,
        "record_step" => with(b, &raw, record_step).await,
        "list_steps" => with(b, &raw, list_steps).await,
        "get_trace_by_conversation" => with(b, &raw, get_trace_by_conversation).await,
        other => Err(BridgeError(
            StatusCode::NOT_IMPLEMENTED,
            format!("{other} is not part of what this bridge maps"),
        )),
    };
    answer.unwrap_or_else(IntoResponse::into_response)
}

/// Parses the body as `T` and runs `f`.
async fn with<'a, T, F, Fut>(b: &'a Bridge, raw: &[u8], f: F) -> Answer
where
    T: DeserializeOwned,
    F: FnOnce(&'a Bridge, T) -> Fut,
    Fut: std::future::Future<Output = Answer>,
{
    match body::<T>(raw) {
        Ok(t) => f(b, t).await,
        Err(e) => Err(e),
    }
}

// ---- shapes --------------------------------------------------------------------------

fn message(m: &MessageView) -> Value {
    json!({
        "id": m.id.to_string(),
        "role": m.role.map(|r| r.as_str()).unwrap_or("user"),
        "content": m.content,
        "timestamp": time(m.ts),
        "embedding": null,
        "metadata": m.metadata.clone().filter(Value::is_object).unwrap_or_else(|| json!({})),
    })
}

fn entity(e: &Entity) -> Value {
    json!({
        "id": e.id,
        "name": e.name,
        "type": e.entity_type.as_str().to_uppercase(),
        "subtype": e.subtype,
        "description": e.description,
        "embedding": null,
        "canonical_name": e.canonical_name,
        "created_at": time(e.created_at),
    })
}

fn preference(p: &Preference) -> Value {
    json!({
        "id": p.id,
        "category": p.category,
        "preference": p.preference,
        "context": p.context,
        "embedding": null,
    })
}

fn fact(f: &Fact) -> Value {
    json!({
        "id": f.id,
        "subject": f.subject,
        "predicate": f.predicate,
        "object": f.object,
        "embedding": null,
    })
}

fn relationship(r: &Relationship) -> Value {
    json!({
        "id": r.id,
        "source_id": r.source_id,
        "target_id": r.target_id,
        "relationship_type": r.relationship_type,
        "properties": r.properties,
    })
}

fn tool_call(c: &ToolCall) -> Value {
    json!({
        "id": c.id,
        "tool_name": c.tool_name,
        "arguments": c.arguments,
        "result": c.result,
        "status": c.status.as_str(),
        "duration_ms": c.duration_ms,
        "error": c.error,
    })
}

fn step(s: &Step, calls: &[ToolCall]) -> Value {
    json!({
        "id": s.id,
        "trace_id": s.trace_id,
        "step_number": s.step_number,
        "thought": s.thought,
        "action": s.action,
        "observation": s.observation,
        "tool_calls": calls.iter().map(tool_call).collect::<Vec<_>>(),
    })
}

fn trace(t: &Trace, steps: &[StepView]) -> Value {
    json!({
        "id": t.id,
        "session_id": t.session_id,
        "task": t.task,
        "steps": steps.iter().map(|s| step(&s.step, &s.tool_calls)).collect::<Vec<_>>(),
        "outcome": t.outcome,
        "success": t.success,
        "started_at": time(t.started_at),
        "completed_at": t.completed_at.map(time),
    })
}

// ---- short-term memory ---------------------------------------------------------------

#[derive(Deserialize)]
struct AddMessage {
    session_id: String,
    role: Role,
    content: String,
    #[serde(default)]
    metadata: Option<Value>,
}

async fn add_message(b: &Bridge, req: AddMessage) -> Answer {
    let engine = &b.engine;
    let scope = b.scope(Some(&req.session_id));
    let receipts = engine
        .record_messages(
            &Principal::Local,
            &scope,
            vec![KeyedMessage {
                state: None,
                message_id: None,
                message: MessageInput {
                    conversation_id: req.session_id.clone(),
                    role: req.role,
                    content: req.content,
                    ts: None,
                    turn_id: None,
                    speaker: None,
                    metadata: req.metadata,
                },
            }],
        )
        .await?;
    let id = receipts
        .first()
        .map(|r| r.id.to_string())
        .ok_or_else(|| ServiceError::Internal("no receipt for a message".into()))?;
    // The stored message, read back: what the suite checks is what was stored.
    let stored = engine
        .message_by_id(&Principal::Local, &scope.partition(), &id)
        .await?;
    ok(message(&stored))
}

#[derive(Deserialize)]
struct GetConversation {
    session_id: String,
    #[serde(default)]
    limit: Option<usize>,
}

async fn get_conversation(b: &Bridge, req: GetConversation) -> Answer {
    let partition = b.partition();
    let mut messages = match b
        .engine
        .conversation(
            &Principal::Local,
            &partition,
            &req.session_id,
            PageRequest::ALL,
        )
        .await
    {
        Ok(m) => m.items,
        Err(e) if not_found(&e) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    if let Some(limit) = req.limit {
        // The most recent `limit` messages, in order.
        let skip = messages.len().saturating_sub(limit);
        messages.drain(..skip);
    }
    let (first, last) = (
        messages.first().map(|m| m.ts),
        messages.last().map(|m| m.ts),
    );
    ok(conversation_shape(
        &partition,
        &req.session_id,
        &messages,
        first,
        last,
    ))
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[derive(Deserialize)]
struct SearchMessages {
    query: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    threshold: Option<f32>,
}

async fn search_messages(b: &Bridge, req: SearchMessages) -> Answer {
    let hits = b
        .engine
        .search_messages(
            &Principal::Local,
            &b.partition(),
            &req.query,
            req.session_id.as_deref(),
            req.limit.unwrap_or(10),
            req.threshold,
        )
        .await?;
    ok(json!(hits
        .iter()
        .map(|h| message(&h.message))
        .collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct ListSessions {
    #[serde(default)]
    limit: Option<usize>,
}

async fn list_sessions(b: &Bridge, req: ListSessions) -> Answer {
    let mut sessions = b
        .engine
        .conversations(&Principal::Local, &b.partition(), PageRequest::ALL)
        .await?
        .items;
    if let Some(limit) = req.limit {
        sessions.truncate(limit);
    }
    ok(json!(sessions
        .iter()
        .map(|c| json!({
            "session_id": c.conversation_id,
            "message_count": c.messages,
            "created_at": time(c.first_ts),
            "updated_at": time(c.last_ts),
        }))
        .collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct DeleteMessage {
    message_id: String,
}

async fn delete_message(b: &Bridge, req: DeleteMessage) -> Answer {
    let partition = b.partition();
    let found = match b
        .engine
        .message_by_id(&Principal::Local, &partition, &req.message_id)
        .await
    {
        Ok(m) => m,
        Err(e) if not_found(&e) => return ok(json!({ "deleted": false })),
        Err(e) => return Err(e.into()),
    };
    b.engine
        .delete_message(&Principal::Local, &partition, &found.reference, false)
        .await?;
    ok(json!({ "deleted": true }))
}

#[derive(Deserialize)]
struct ClearSession {
    session_id: String,
}

async fn clear_session(b: &Bridge, req: ClearSession) -> Answer {
    match b
        .engine
        .delete_conversation(&Principal::Local, &b.partition(), &req.session_id, false)
        .await
    {
        Ok(_) => no_content(),
        // Clearing an empty session is done already.
        Err(e) if not_found(&e) => no_content(),
        Err(e) => Err(e.into()),
    }
}

// ---- long-term memory ----------------------------------------------------------------

#[derive(Deserialize)]
struct AddEntity {
    name: String,
    entity_type: String,
    #[serde(default)]
    description: Option<String>,
}

async fn add_entity(b: &Bridge, req: AddEntity) -> Answer {
    let e = b
        .engine
        .add_entity(
            &Principal::Local,
            EntityRequest {
                scope: b.scope(None),
                name: req.name,
                entity_type: req.entity_type,
                subtype: None,
                description: req.description,
                aliases: Vec::new(),
                trust_origin: None,
            },
        )
        .await?;
    ok(entity(&e))
}

#[derive(Deserialize)]
struct AddPreference {
    category: String,
    preference: String,
    #[serde(default)]
    context: Option<String>,
}

async fn add_preference(b: &Bridge, req: AddPreference) -> Answer {
    let p = b
        .engine
        .add_preference(
            &Principal::Local,
            PreferenceRequest {
                scope: b.scope(None),
                category: req.category,
                preference: req.preference,
                context: req.context,
                trust_origin: None,
            },
        )
        .await?;
    ok(preference(&p))
}

#[derive(Deserialize)]
struct AddFact {
    subject: String,
    predicate: String,
    obj: String,
}

async fn add_fact(b: &Bridge, req: AddFact) -> Answer {
    let out = b
        .engine
        .add_fact(
            &Principal::Local,
            FactRequest {
                scope: b.scope(None),
                subject: req.subject,
                predicate: req.predicate,
                object: req.obj,
                valid_from: None,
                valid_until: None,
                confidence: None,
                evidence_refs: Vec::new(),
                supersede: false,
                trust_origin: None,
            },
        )
        .await?;
    ok(fact(&out.fact))
}

#[derive(Deserialize)]
struct Search {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    category: Option<String>,
}

async fn search_entities(b: &Bridge, req: Search) -> Answer {
    let hits = b
        .engine
        .search_entities(
            &Principal::Local,
            &b.partition(),
            &req.query,
            None,
            req.limit.unwrap_or(10),
        )
        .await?;
    ok(json!(hits
        .iter()
        .map(|h| entity(&h.item))
        .collect::<Vec<_>>()))
}

async fn search_preferences(b: &Bridge, req: Search) -> Answer {
    let hits = b
        .engine
        .search_preferences(
            &Principal::Local,
            &b.partition(),
            &req.query,
            req.category.as_deref(),
            req.limit.unwrap_or(10),
        )
        .await?;
    ok(json!(hits
        .iter()
        .map(|h| preference(&h.item))
        .collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct ByName {
    name: String,
}

async fn get_entity_by_name(b: &Bridge, req: ByName) -> Answer {
    let found = b
        .engine
        .entities_by_name(&Principal::Local, &b.partition(), &req.name)
        .await?;
    ok(found.first().map(entity).unwrap_or(Value::Null))
}

#[derive(Deserialize)]
struct Related {
    entity_id: String,
    #[serde(default)]
    relationship_type: Option<String>,
    #[serde(default)]
    depth: Option<u32>,
}

async fn get_related_entities(b: &Bridge, req: Related) -> Answer {
    let related = b
        .engine
        .related_entities(
            &Principal::Local,
            &b.partition(),
            &req.entity_id,
            req.relationship_type.as_deref(),
            req.depth,
        )
        .await?;
    ok(json!(related
        .iter()
        .map(|r| entity(&r.entity))
        .collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct AddRelationship {
    source_id: String,
    target_id: String,
    relationship_type: String,
    #[serde(default)]
    properties: Option<Value>,
}

async fn add_relationship(b: &Bridge, req: AddRelationship) -> Answer {
    let r = b
        .engine
        .add_relationship(
            &Principal::Local,
            RelationshipRequest {
                scope: b.scope(None),
                source_id: req.source_id,
                target_id: req.target_id,
                relationship_type: req.relationship_type,
                properties: req.properties,
                trust_origin: None,
            },
        )
        .await?;
    ok(relationship(&r))
}

#[derive(Deserialize)]
struct Merge {
    source_id: String,
    target_id: String,
    #[serde(default)]
    canonical_name: Option<String>,
}

async fn merge_duplicate_entities(b: &Bridge, req: Merge) -> Answer {
    let e = b
        .engine
        .merge_entities(
            &Principal::Local,
            MergeRequest {
                scope: b.scope(None),
                source_id: req.source_id,
                target_id: req.target_id,
                canonical_name: req.canonical_name,
            },
        )
        .await?;
    ok(entity(&e))
}

// ---- reasoning memory ----------------------------------------------------------------

#[derive(Deserialize)]
struct StartTrace {
    session_id: String,
    task: String,
}

async fn start_trace(b: &Bridge, req: StartTrace) -> Answer {
    let t = b
        .engine
        .start_trace(
            &Principal::Local,
            TraceRequest {
                scope: b.scope(Some(&req.session_id)),
                task: req.task,
                trace_key: None,
            },
        )
        .await?;
    ok(trace(&t, &[]))
}

#[derive(Deserialize)]
struct AddStep {
    trace_id: String,
    #[serde(default)]
    thought: Option<String>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    observation: Option<String>,
}

async fn add_step(b: &Bridge, req: AddStep) -> Answer {
    let s = b
        .engine
        .add_step(
            &Principal::Local,
            &req.trace_id,
            StepRequest {
                scope: b.scope(None),
                thought: req.thought,
                action: req.action,
                observation: req.observation,
                step_number: None,
            },
        )
        .await?;
    ok(step(&s, &[]))
}

#[derive(Deserialize)]
struct RecordToolCall {
    step_id: String,
    tool_name: String,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    status: Option<cairn_models::knowledge::ToolStatus>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    error: Option<String>,
}

async fn record_tool_call(b: &Bridge, req: RecordToolCall) -> Answer {
    let c = b
        .engine
        .record_tool_call(
            &Principal::Local,
            &req.step_id,
            ToolCallRequest {
                scope: b.scope(None),
                tool_name: req.tool_name,
                arguments: req.arguments,
                result: req.result,
                status: req.status,
                duration_ms: req.duration_ms,
                error: req.error,
                call_number: None,
            },
        )
        .await?;
    ok(tool_call(&c))
}

#[derive(Deserialize)]
struct CompleteTrace {
    trace_id: String,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    success: Option<bool>,
}

async fn complete_trace(b: &Bridge, req: CompleteTrace) -> Answer {
    let t = b
        .engine
        .complete_trace(
            &Principal::Local,
            &req.trace_id,
            CompleteTraceRequest {
                scope: b.scope(None),
                outcome: req.outcome,
                success: req.success,
            },
        )
        .await?;
    let view = b
        .engine
        .get_trace(&Principal::Local, &b.partition(), &t.id)
        .await?;
    ok(trace(&view.trace, &view.steps))
}

#[derive(Deserialize)]
struct TraceId {
    trace_id: String,
}

async fn get_trace_with_steps(b: &Bridge, req: TraceId) -> Answer {
    match b
        .engine
        .get_trace(&Principal::Local, &b.partition(), &req.trace_id)
        .await
    {
        Ok(TraceView { trace: t, steps }) => ok(trace(&t, &steps)),
        Err(e) if not_found(&e) => ok(Value::Null),
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
struct ListTraces {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

async fn list_traces(b: &Bridge, req: ListTraces) -> Answer {
    let traces = b
        .engine
        .list_traces(
            &Principal::Local,
            &b.partition(),
            req.session_id.as_deref(),
            PageRequest::new(None, req.limit),
        )
        .await?
        .items;
    ok(json!(traces
        .iter()
        .map(|t| trace(t, &[]))
        .collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct ToolStatsReq {
    #[serde(default)]
    tool_name: Option<String>,
}

async fn get_tool_stats(b: &Bridge, req: ToolStatsReq) -> Answer {
    let stats = b
        .engine
        .tool_stats(&Principal::Local, &b.partition(), req.tool_name.as_deref())
        .await?;
    ok(json!(stats
        .iter()
        .map(|s| json!({
            "name": s.name,
            "total_calls": s.total_calls,
            "successful_calls": s.successful_calls,
            "failed_calls": s.failed_calls,
            "success_rate": s.success_rate,
            "avg_duration_ms": s.avg_duration_ms,
        }))
        .collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct Similar {
    task: String,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    success_only: Option<bool>,
}

async fn get_similar_traces(b: &Bridge, req: Similar) -> Answer {
    let hits = b
        .engine
        .similar_traces(
            &Principal::Local,
            &b.partition(),
            &req.task,
            req.limit.unwrap_or(5),
            req.success_only.unwrap_or(false),
        )
        .await?;
    ok(json!(hits
        .iter()
        .map(|h| trace(&h.item, &[]))
        .collect::<Vec<_>>()))
}

// ---- Platinum ------------------------------------------------------------------------

/// The suite's id of a conversation: the conversation id itself when it is a UUID (what
/// `create_conversation` hands out), else a UUIDv5 of the partition and the id.
fn conversation_uuid(partition: &Partition, conversation: &str) -> String {
    match uuid::Uuid::parse_str(conversation) {
        Ok(u) => u.to_string(),
        Err(_) => uuid::Uuid::new_v5(
            &cairn_models::ids::CAIRN_NAMESPACE,
            format!("tck-conversation\0{}\0{conversation}", partition.key()).as_bytes(),
        )
        .to_string(),
    }
}

fn conversation_shape(
    partition: &Partition,
    conversation: &str,
    messages: &[MessageView],
    first: Option<i64>,
    last: Option<i64>,
) -> Value {
    json!({
        "id": conversation_uuid(partition, conversation),
        "session_id": conversation,
        "messages": messages.iter().map(message).collect::<Vec<_>>(),
        "title": null,
        "created_at": time(first.unwrap_or_else(now)),
        "updated_at": last.map(time),
    })
}

#[derive(Deserialize)]
struct CreateConversation {
    #[serde(default, rename = "user_id")]
    _user_id: Option<String>,
    #[serde(default, rename = "metadata")]
    _metadata: Option<Value>,
}

async fn create_conversation(b: &Bridge, _req: CreateConversation) -> Answer {
    // A Cairn conversation is its messages: a new one is a fresh id, stored with its first
    // message.
    let id = uuid::Uuid::new_v4().to_string();
    ok(conversation_shape(&b.partition(), &id, &[], None, None))
}

#[derive(Deserialize)]
struct Limit {
    #[serde(default)]
    limit: Option<usize>,
}

async fn list_conversations(b: &Bridge, req: Limit) -> Answer {
    let partition = b.partition();
    let mut all = b
        .engine
        .conversations(&Principal::Local, &partition, PageRequest::ALL)
        .await?
        .items;
    if let Some(limit) = req.limit {
        all.truncate(limit);
    }
    ok(json!(all
        .iter()
        .map(|c| conversation_shape(
            &partition,
            &c.conversation_id,
            &[],
            Some(c.first_ts),
            Some(c.last_ts)
        ))
        .collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct ConversationId {
    conversation_id: String,
}

async fn messages_of(b: &Bridge, conversation: &str) -> Result<Vec<MessageView>, BridgeError> {
    match b
        .engine
        .conversation(
            &Principal::Local,
            &b.partition(),
            conversation,
            PageRequest::ALL,
        )
        .await
    {
        Ok(m) => Ok(m.items),
        Err(e) if not_found(&e) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

async fn get_conversation_metadata(b: &Bridge, req: ConversationId) -> Answer {
    let messages = messages_of(b, &req.conversation_id).await?;
    ok(conversation_shape(
        &b.partition(),
        &req.conversation_id,
        &[],
        messages.first().map(|m| m.ts),
        messages.last().map(|m| m.ts),
    ))
}

async fn delete_conversation(b: &Bridge, req: ConversationId) -> Answer {
    clear_session(
        b,
        ClearSession {
            session_id: req.conversation_id,
        },
    )
    .await
}

#[derive(Deserialize)]
struct BulkMessage {
    role: Role,
    content: String,
    #[serde(default)]
    metadata: Option<Value>,
}

#[derive(Deserialize)]
struct BulkAdd {
    conversation_id: String,
    messages: Vec<BulkMessage>,
}

async fn bulk_add_messages(b: &Bridge, req: BulkAdd) -> Answer {
    let scope = b.scope(Some(&req.conversation_id));
    let batch = req
        .messages
        .into_iter()
        .map(|m| KeyedMessage {
            state: None,
            message_id: None,
            message: MessageInput {
                conversation_id: req.conversation_id.clone(),
                role: m.role,
                content: m.content,
                ts: None,
                turn_id: None,
                speaker: None,
                metadata: m.metadata,
            },
        })
        .collect();
    let receipts = b
        .engine
        .record_messages(&Principal::Local, &scope, batch)
        .await?;
    let mut out = Vec::with_capacity(receipts.len());
    for r in receipts {
        let m = b
            .engine
            .message_by_id(&Principal::Local, &scope.partition(), &r.id.to_string())
            .await?;
        out.push(message(&m));
    }
    ok(json!(out))
}

/// How many recent messages `get_context` returns.
const CONTEXT_MESSAGES: usize = 20;

async fn get_context(b: &Bridge, req: ConversationId) -> Answer {
    let mut messages = messages_of(b, &req.conversation_id).await?;
    let skip = messages.len().saturating_sub(CONTEXT_MESSAGES);
    messages.drain(..skip);
    ok(json!({
        "reflections": [],
        "observations": [],
        "recent_messages": messages.iter().map(message).collect::<Vec<_>>(),
    }))
}

/// Observations and reflections: Cairn stores messages verbatim and writes no summaries.
async fn no_summaries(_b: &Bridge, _req: Value) -> Answer {
    ok(json!([]))
}

#[derive(Deserialize)]
struct ListEntities {
    #[serde(default, rename = "type")]
    entity_type: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

async fn list_entities(b: &Bridge, req: ListEntities) -> Answer {
    let all = b
        .engine
        .list_entities(
            &Principal::Local,
            &b.partition(),
            req.entity_type.as_deref(),
            PageRequest::new(None, req.limit),
        )
        .await?
        .items;
    ok(json!(all.iter().map(entity).collect::<Vec<_>>()))
}

#[derive(Deserialize)]
struct EntityId {
    entity_id: String,
}

async fn get_entity(b: &Bridge, req: EntityId) -> Answer {
    let e = b
        .engine
        .get_entity(&Principal::Local, &b.partition(), &req.entity_id)
        .await?;
    ok(entity(&e))
}

async fn delete_entity(b: &Bridge, req: EntityId) -> Answer {
    match b
        .engine
        .forget(
            &Principal::Local,
            cairn_service::recall::ForgetRequest {
                scope: b.scope(None),
                reference: format!("ent:{}", req.entity_id),
                hard: false,
            },
        )
        .await
    {
        Ok(_) => no_content(),
        Err(e) if not_found(&e) => no_content(),
        Err(e) => Err(e.into()),
    }
}

async fn get_entity_graph(b: &Bridge) -> Answer {
    let partition = b.partition();
    let nodes = b
        .engine
        .list_entities(&Principal::Local, &partition, None, PageRequest::ALL)
        .await?
        .items;
    let edges = b
        .engine
        .list_relationships(&Principal::Local, &partition, None, PageRequest::ALL)
        .await?
        .items;
    ok(json!({
        "nodes": nodes.iter().map(|e| json!({
            "id": e.id,
            "name": e.name,
            "type": e.entity_type.as_str().to_uppercase(),
        })).collect::<Vec<_>>(),
        "edges": edges.iter().map(|r| json!({
            "id": r.id,
            "source": r.source_id,
            "target": r.target_id,
            "type": r.relationship_type,
        })).collect::<Vec<_>>(),
    }))
}

/// The key of the trace holding a conversation's flat steps.
fn conversation_trace_key(conversation: &str) -> String {
    format!("conversation-{conversation}")
}

/// The trace holding a conversation's flat steps: one per conversation, keyed by it.
async fn conversation_trace(b: &Bridge, conversation: &str) -> Result<Trace, BridgeError> {
    Ok(b.engine
        .start_trace(
            &Principal::Local,
            TraceRequest {
                scope: b.scope(Some(conversation)),
                task: format!("Conversation {conversation}"),
                trace_key: Some(conversation_trace_key(conversation)),
            },
        )
        .await?)
}

fn agent_step(conversation: &str, s: &Step) -> Value {
    json!({
        "id": s.id,
        "conversation_id": conversation,
        "reasoning": s.thought.clone().unwrap_or_default(),
        "action_taken": s.action.clone().unwrap_or_default(),
        "result": s.observation,
        "created_at": time(s.created_at),
    })
}

#[derive(Deserialize)]
struct RecordStep {
    conversation_id: String,
    reasoning: String,
    action_taken: String,
    #[serde(default)]
    result: Option<String>,
}

async fn record_step(b: &Bridge, req: RecordStep) -> Answer {
    let t = conversation_trace(b, &req.conversation_id).await?;
    let s = b
        .engine
        .add_step(
            &Principal::Local,
            &t.id,
            StepRequest {
                scope: b.scope(Some(&req.conversation_id)),
                thought: Some(req.reasoning),
                action: Some(req.action_taken),
                observation: req.result,
                step_number: None,
            },
        )
        .await?;
    ok(agent_step(&req.conversation_id, &s))
}

/// A conversation's steps, read without writing: no trace yet is no steps.
async fn conversation_steps(b: &Bridge, conversation: &str) -> Result<Vec<StepView>, BridgeError> {
    Ok(b.engine
        .trace_by_key(
            &Principal::Local,
            &b.partition(),
            &conversation_trace_key(conversation),
        )
        .await?
        .map(|view| view.steps)
        .unwrap_or_default())
}

async fn list_steps(b: &Bridge, req: ConversationId) -> Answer {
    let steps = conversation_steps(b, &req.conversation_id).await?;
    ok(json!(steps
        .iter()
        .map(|s| agent_step(&req.conversation_id, &s.step))
        .collect::<Vec<_>>()))
}

async fn get_trace_by_conversation(b: &Bridge, req: ConversationId) -> Answer {
    let steps = conversation_steps(b, &req.conversation_id).await?;
    ok(json!({
        "conversation_id": req.conversation_id,
        "steps": steps.iter().map(|s| agent_step(&req.conversation_id, &s.step)).collect::<Vec<_>>(),
        "tool_calls": steps.iter().flat_map(|s| s.tool_calls.iter().map(tool_call)).collect::<Vec<_>>(),
    }))
}
