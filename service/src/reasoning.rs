//! Reasoning memory: traces (one task an agent worked on, in a session), their numbered
//! steps (thought, action, observation) and the tool calls of each step; tool statistics
//! and similar past traces (by meaning of the task).
//!
//! A trace is searchable by its task (recall cites it as `trace:<id>` with its outcome);
//! steps and tool calls are records keyed by their trace and step. Step numbers are 1, 2,
//! 3... in the order of writing: numbering holds `Engine::knowledge_lock`, so concurrent
//! writers never number two steps alike. Ids: a trace's is random unless the caller gives a
//! key (`trace_key`, then a replay lands on the same trace); step and tool call ids are
//! their positions, so a step is never stored twice under two numbers.

use std::collections::BTreeMap;

use cairn_models::ids;
use cairn_models::knowledge::{key, Step, ToolCall, ToolStatus, Trace};
use cairn_models::scope::validate_component;
use cairn_models::{limits, Partition, PointKind, RecordState, Scope, StoredPoint, TrustOrigin};
use cairn_store::Filter;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::access::{admit_write, Page, PageRequest};
use crate::auth::{authorize, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::records::{load_point, now, parse_id, put, scan, search_kind, Scored};
use crate::Operation;

/// Longest task, outcome, thought, action, observation or error text, in bytes.
pub const MAX_TRACE_TEXT_BYTES: usize = 16 * 1024;
/// Largest tool call `arguments` or `result` (compact JSON), in bytes.
pub const MAX_TOOL_JSON_BYTES: usize = 64 * 1024;
/// Longest tool name, in bytes.
pub const MAX_TOOL_NAME_BYTES: usize = 256;

fn check_text(field: &str, v: Option<&str>) -> Result<(), ServiceError> {
    if let Some(v) = v {
        limits::check_bytes(field, v, MAX_TRACE_TEXT_BYTES)?;
    }
    Ok(())
}

fn check_json(field: &str, v: &serde_json::Value) -> Result<(), ServiceError> {
    let size = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX);
    if size > MAX_TOOL_JSON_BYTES {
        return Err(ServiceError::PayloadTooLarge(format!(
            "{field} is {size} bytes; the limit is {MAX_TOOL_JSON_BYTES}"
        )));
    }
    Ok(())
}

fn trace_of(p: &StoredPoint) -> Option<Trace> {
    match &p.state {
        Some(RecordState::Trace(t)) => Some(t.clone()),
        _ => None,
    }
}

fn trace_keys(t: &Trace) -> Vec<String> {
    let mut keys = vec![key::trace(&t.id)];
    if let Some(ok) = t.success {
        keys.push(key::outcome(ok));
    }
    keys
}

async fn write_trace(
    engine: &Engine,
    scope: &Scope,
    trust: TrustOrigin,
    t: &Trace,
) -> Result<(), ServiceError> {
    let mut p = StoredPoint::new(PointKind::Trace, scope, trust, t.started_at);
    p.doc_id = Some(t.id.clone());
    p.text = Some(t.text());
    p.state = Some(RecordState::Trace(t.clone()));
    p.keys = Some(trace_keys(t));
    // Searched by its task alone: similar traces are similar tasks.
    put(engine, parse_id("trace", &t.id)?, p, Some(t.task.clone())).await
}

impl Engine {
    /// Starts a trace in the scope's session.
    pub async fn start_trace(
        &self,
        who: &Principal,
        req: TraceRequest,
    ) -> Result<Trace, ServiceError> {
        let mut scope = req.scope.clone();
        admit_write(who, &mut scope, Operation::WriteTraces)?;
        if req.task.trim().is_empty() {
            return Err(ServiceError::InvalidRequest("task is empty".into()));
        }
        check_text("task", Some(&req.task))?;
        let partition = scope.partition();
        // A keyed start reads before it writes: two starts of one key must not both write
        // (the second, with another task, would silently replace the first).
        let _k = match &req.trace_key {
            Some(_) => Some(self.serial(crate::engine::Section::Knowledge).await?),
            None => None,
        };
        let id = match &req.trace_key {
            Some(k) => {
                validate_component("trace_key", k)?;
                let id = ids::trace_id(&partition, k).to_string();
                if let Some(hit) =
                    load_point(self, &partition, PointKind::Trace, &id, false).await?
                {
                    let t = trace_of(&hit.point).ok_or_else(|| {
                        ServiceError::Internal(format!("trace {id} without its state"))
                    })?;
                    if t.task != req.task || t.session_id != scope.session {
                        return Err(ServiceError::Conflict(format!(
                            "trace key {k} was used for another task or session"
                        )));
                    }
                    return Ok(t);
                }
                id
            }
            None => Uuid::new_v4().to_string(),
        };
        let t = Trace {
            id,
            session_id: scope.session.clone(),
            task: req.task,
            outcome: None,
            success: None,
            started_at: now(),
            completed_at: None,
        };
        // A trace records what an agent did: agent output, whoever stores it.
        write_trace(self, &scope, TrustOrigin::AgentOutput, &t).await?;
        Ok(t)
    }

    /// The stored trace `id`, with the scope it was written in.
    async fn load_trace(
        &self,
        partition: &Partition,
        id: &str,
    ) -> Result<(StoredPoint, Trace), ServiceError> {
        let hit = load_point(self, partition, PointKind::Trace, id, false)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no trace {id} in this scope")))?;
        let t = trace_of(&hit.point)
            .ok_or_else(|| ServiceError::Internal(format!("trace {id} without its state")))?;
        Ok((hit.point, t))
    }

    /// Adds the next step to a trace (numbered 1, 2, 3...).
    pub async fn add_step(
        &self,
        who: &Principal,
        trace_id: &str,
        req: StepRequest,
    ) -> Result<Step, ServiceError> {
        let mut scope = req.scope.clone();
        admit_write(who, &mut scope, Operation::WriteTraces)?;
        check_text("thought", req.thought.as_deref())?;
        check_text("action", req.action.as_deref())?;
        check_text("observation", req.observation.as_deref())?;
        let partition = scope.partition();
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let (trace_point, trace) = self.load_trace(&partition, trace_id).await?;
        let existing: Vec<Step> = scan(
            self,
            &partition,
            PointKind::Step,
            Some(key::trace(&trace.id)),
        )
        .await?
        .into_iter()
        .filter_map(|h| match h.point.state {
            Some(RecordState::Step(s)) => Some(s),
            _ => None,
        })
        .collect();
        // The highest number stored, not the count: numbers stay increasing even if a step
        // record were ever removed.
        let last = existing.iter().map(|s| s.step_number).max().unwrap_or(0);
        if let Some(n) = req.step_number {
            if let Some(s) = existing.iter().find(|s| s.step_number == n) {
                // A retry of a step that was stored (its answer lost): the same step.
                if s.thought == req.thought
                    && s.action == req.action
                    && s.observation == req.observation
                {
                    return Ok(s.clone());
                }
                return Err(ServiceError::Conflict(format!(
                    "step {n} of trace {} was recorded with other content",
                    trace.id
                )));
            }
            if n != last + 1 {
                return Err(ServiceError::Conflict(format!(
                    "step {n} is not the next one: trace {} has {last} steps",
                    trace.id
                )));
            }
        }
        refuse_completed(&trace)?;
        let n = last + 1;
        let id = ids::step_id(&partition, &trace.id, n);
        let step = Step {
            id: id.to_string(),
            trace_id: trace.id.clone(),
            step_number: n,
            thought: req.thought,
            action: req.action,
            observation: req.observation,
            created_at: now(),
        };
        let mut p = StoredPoint::new(
            PointKind::Step,
            &trace_point.scope(),
            trace_point.trust,
            step.created_at,
        );
        p.doc_id = Some(step.id.clone());
        p.state = Some(RecordState::Step(step.clone()));
        p.keys = Some(vec![key::trace(&trace.id)]);
        put(self, id, p, None).await?;
        Ok(step)
    }

    /// Records a tool call of a step (status default `success`).
    pub async fn record_tool_call(
        &self,
        who: &Principal,
        step_id: &str,
        req: ToolCallRequest,
    ) -> Result<ToolCall, ServiceError> {
        let mut scope = req.scope.clone();
        admit_write(who, &mut scope, Operation::WriteTraces)?;
        if req.tool_name.trim().is_empty() {
            return Err(ServiceError::InvalidRequest("tool_name is empty".into()));
        }
        limits::check_bytes("tool_name", &req.tool_name, MAX_TOOL_NAME_BYTES)?;
        let arguments = req.arguments.unwrap_or_else(|| serde_json::json!({}));
        check_json("arguments", &arguments)?;
        if let Some(r) = &req.result {
            check_json("result", r)?;
        }
        check_text("error", req.error.as_deref())?;
        let partition = scope.partition();
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let step_hit = load_point(self, &partition, PointKind::Step, step_id, false)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no step {step_id} in this scope")))?;
        let Some(RecordState::Step(step)) = &step_hit.point.state else {
            return Err(ServiceError::Internal(format!(
                "step {step_id} without its state"
            )));
        };
        let existing: Vec<ToolCall> = scan(
            self,
            &partition,
            PointKind::ToolCall,
            Some(key::step(&step.id)),
        )
        .await?
        .into_iter()
        .filter_map(|h| match h.point.state {
            Some(RecordState::ToolCall(c)) => Some(c),
            _ => None,
        })
        .collect();
        let last = existing.iter().map(|c| c.call_number).max().unwrap_or(0);
        if let Some(n) = req.call_number {
            if let Some(c) = existing.iter().find(|c| c.call_number == n) {
                // A retry of a call that was stored: the same call.
                if c.tool_name == req.tool_name.trim()
                    && c.arguments == arguments
                    && c.result == req.result
                    && c.status == req.status.unwrap_or_default()
                    && c.duration_ms == req.duration_ms
                    && c.error == req.error
                {
                    return Ok(c.clone());
                }
                return Err(ServiceError::Conflict(format!(
                    "tool call {n} of step {} was recorded with other content",
                    step.id
                )));
            }
            if n != last + 1 {
                return Err(ServiceError::Conflict(format!(
                    "tool call {n} is not the next one: step {} has {last} calls",
                    step.id
                )));
            }
        }
        refuse_completed(&self.load_trace(&partition, &step.trace_id).await?.1)?;
        let n = last + 1;
        let id = ids::tool_call_id(&partition, &step.id, n);
        let call = ToolCall {
            id: id.to_string(),
            trace_id: step.trace_id.clone(),
            step_id: step.id.clone(),
            call_number: n,
            tool_name: req.tool_name.trim().to_string(),
            arguments,
            result: req.result,
            status: req.status.unwrap_or_default(),
            duration_ms: req.duration_ms,
            error: req.error,
            created_at: now(),
        };
        let mut p = StoredPoint::new(
            PointKind::ToolCall,
            &step_hit.point.scope(),
            TrustOrigin::ToolOutput,
            call.created_at,
        );
        p.doc_id = Some(call.id.clone());
        p.state = Some(RecordState::ToolCall(call.clone()));
        p.keys = Some(vec![
            key::trace(&call.trace_id),
            key::step(&call.step_id),
            key::tool(&call.tool_name),
        ]);
        put(self, id, p, None).await?;
        Ok(call)
    }

    /// Completes a trace with its outcome. Completing again with the same outcome answers
    /// the trace; with another one is `409 conflict`.
    pub async fn complete_trace(
        &self,
        who: &Principal,
        trace_id: &str,
        req: CompleteTraceRequest,
    ) -> Result<Trace, ServiceError> {
        let mut scope = req.scope.clone();
        admit_write(who, &mut scope, Operation::WriteTraces)?;
        check_text("outcome", req.outcome.as_deref())?;
        let partition = scope.partition();
        let _k = self.serial(crate::engine::Section::Knowledge).await?;
        let (point, mut t) = self.load_trace(&partition, trace_id).await?;
        if t.completed_at.is_some() {
            if t.outcome == req.outcome && t.success == req.success {
                return Ok(t);
            }
            return Err(ServiceError::Conflict(format!(
                "trace {trace_id} was already completed with another outcome"
            )));
        }
        t.outcome = req.outcome;
        t.success = req.success;
        t.completed_at = Some(now());
        write_trace(self, &point.scope(), point.trust, &t).await?;
        Ok(t)
    }

    /// Records a whole trace ([`RecordTraceRequest`]): starts it, adds each step and each
    /// tool call with its number (so a replay under the same `trace_key` answers what is
    /// stored and adds only what an interrupted call missed), completes it when told how it
    /// ended, and answers the stored trace with its steps. The caps are checked before
    /// anything is written.
    pub async fn record_trace(
        &self,
        who: &Principal,
        req: RecordTraceRequest,
    ) -> Result<TraceView, ServiceError> {
        limits::check_count("steps", req.steps.len(), limits::MAX_TRACE_STEPS)?;
        for s in &req.steps {
            limits::check_count(
                "tool_calls",
                s.tool_calls.len(),
                limits::MAX_STEP_TOOL_CALLS,
            )?;
        }
        let scope = req.scope;
        let trace = self
            .start_trace(
                who,
                TraceRequest {
                    scope: scope.clone(),
                    task: req.task,
                    trace_key: req.trace_key,
                },
            )
            .await?;
        for (i, s) in req.steps.into_iter().enumerate() {
            let step = self
                .add_step(
                    who,
                    &trace.id,
                    StepRequest {
                        scope: scope.clone(),
                        thought: s.thought,
                        action: s.action,
                        observation: s.observation,
                        step_number: Some(i as u32 + 1),
                    },
                )
                .await?;
            for (j, c) in s.tool_calls.into_iter().enumerate() {
                self.record_tool_call(
                    who,
                    &step.id,
                    ToolCallRequest {
                        scope: scope.clone(),
                        tool_name: c.tool_name,
                        arguments: c.arguments,
                        result: c.result,
                        status: c.status,
                        duration_ms: c.duration_ms,
                        error: c.error,
                        call_number: Some(j as u32 + 1),
                    },
                )
                .await?;
            }
        }
        if req.outcome.is_some() || req.success.is_some() {
            self.complete_trace(
                who,
                &trace.id,
                CompleteTraceRequest {
                    scope: scope.clone(),
                    outcome: req.outcome,
                    success: req.success,
                },
            )
            .await?;
        }
        self.get_trace(who, &scope.partition(), &trace.id).await
    }

    /// The trace started with `trace_key`, with its steps and tool calls; `None` when no
    /// trace has that key. Reads only: a lookup never starts a trace.
    pub async fn trace_by_key(
        &self,
        who: &Principal,
        partition: &Partition,
        trace_key: &str,
    ) -> Result<Option<TraceView>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        validate_component("trace_key", trace_key)?;
        let id = ids::trace_id(partition, trace_key).to_string();
        match self.get_trace(who, partition, &id).await {
            Ok(view) => Ok(Some(view)),
            Err(ServiceError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A trace with its steps (in order) and their tool calls (in order).
    pub async fn get_trace(
        &self,
        who: &Principal,
        partition: &Partition,
        trace_id: &str,
    ) -> Result<TraceView, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let (_, trace) = self.load_trace(partition, trace_id).await?;
        let mut steps: Vec<Step> = Vec::new();
        let mut calls: BTreeMap<String, Vec<ToolCall>> = BTreeMap::new();
        let f = Filter::new()
            .any_of(
                "kind",
                vec![
                    PointKind::Step.as_str().into(),
                    PointKind::ToolCall.as_str().into(),
                ],
            )
            .eq("keys", key::trace(&trace.id));
        for h in self.store.scroll_all(partition, f).await? {
            match h.point.state {
                Some(RecordState::Step(s)) => steps.push(s),
                Some(RecordState::ToolCall(c)) => {
                    calls.entry(c.step_id.clone()).or_default().push(c)
                }
                _ => {}
            }
        }
        steps.sort_by_key(|s| s.step_number);
        let steps = steps
            .into_iter()
            .map(|s| {
                let mut tool_calls = calls.remove(&s.id).unwrap_or_default();
                tool_calls.sort_by_key(|c| c.call_number);
                StepView {
                    step: s,
                    tool_calls,
                }
            })
            .collect();
        Ok(TraceView { trace, steps })
    }

    /// Traces of the partition (or of one session), most recently started first; one page of
    /// them.
    pub async fn list_traces(
        &self,
        who: &Principal,
        partition: &Partition,
        session: Option<&str>,
        page: PageRequest,
    ) -> Result<Page<Trace>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let mut f = Filter::new().eq("kind", PointKind::Trace.as_str());
        if let Some(s) = session {
            validate_component("session", s)?;
            f = f.eq("session", s);
        }
        let mut all: Vec<Trace> = self
            .store
            .scroll_all(partition, f)
            .await?
            .iter()
            .filter_map(|h| trace_of(&h.point))
            .collect();
        all.sort_by(|a, b| {
            b.started_at
                .cmp(&a.started_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(page.of(all))
    }

    /// Per tool: calls, successes, failures (failure, error, timeout), success rate over
    /// the finished calls, mean and p95 duration. Sorted by tool name.
    pub async fn tool_stats(
        &self,
        who: &Principal,
        partition: &Partition,
        tool: Option<&str>,
    ) -> Result<Vec<ToolStats>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        // Tool names are stored trimmed.
        let calls = scan(
            self,
            partition,
            PointKind::ToolCall,
            tool.map(|t| key::tool(t.trim())),
        )
        .await?;
        let mut by_tool: BTreeMap<String, Vec<ToolCall>> = BTreeMap::new();
        for h in calls {
            if let Some(RecordState::ToolCall(c)) = h.point.state {
                by_tool.entry(c.tool_name.clone()).or_default().push(c);
            }
        }
        Ok(by_tool
            .into_iter()
            .map(|(name, calls)| ToolStats::of(name, &calls))
            .collect())
    }

    /// Past traces whose task means something like `task`, most similar first; with
    /// `success_only`, only traces completed successfully.
    pub async fn similar_traces(
        &self,
        who: &Principal,
        partition: &Partition,
        task: &str,
        limit: usize,
        success_only: bool,
    ) -> Result<Vec<Scored<Trace>>, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        let mut f = Filter::new();
        if success_only {
            f = f.eq("keys", key::outcome(true));
        }
        Ok(
            search_kind(self, partition, PointKind::Trace, task, f, limit)
                .await?
                .into_iter()
                .filter_map(|h| {
                    trace_of(&h.point).map(|t| Scored {
                        item: t,
                        score: h.score,
                    })
                })
                .collect(),
        )
    }
}

/// A completed trace is a finished record: steps and tool calls after its outcome would
/// rewrite how the task went.
fn refuse_completed(t: &Trace) -> Result<(), ServiceError> {
    if t.completed_at.is_some() {
        return Err(ServiceError::Conflict(format!(
            "trace {} is completed: start a new trace for more work",
            t.id
        )));
    }
    Ok(())
}

/// A whole trace in one call: the task, its steps in order with the tool calls of each, and
/// how it ended (MCP's `record_trace` takes it as its arguments; the scenario suite records
/// traces the same way).
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecordTraceRequest {
    /// The trace belongs to `scope.session`.
    pub scope: Scope,
    /// The task worked on.
    pub task: String,
    /// Its steps, in order (at most 100, [`limits::MAX_TRACE_STEPS`]).
    #[serde(default)]
    pub steps: Vec<RecordedStep>,
    /// What came of it (omit both `outcome` and `success` for a trace still in progress).
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub success: Option<bool>,
    /// An idempotency key (`[A-Za-z0-9_.-]+`): recording the same key again answers the
    /// stored trace instead of a second one (and stores what an interrupted call did not);
    /// other steps under a used key are a `conflict`.
    #[serde(default)]
    pub trace_key: Option<String>,
}

/// One step of a [`RecordTraceRequest`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecordedStep {
    #[serde(default)]
    pub thought: Option<String>,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub observation: Option<String>,
    /// The tool calls made in this step, in order (at most 100).
    #[serde(default)]
    pub tool_calls: Vec<RecordedToolCall>,
}

/// One tool call of a [`RecordedStep`] (a [`ToolCallRequest`] without scope and number).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecordedToolCall {
    pub tool_name: String,
    /// The call's arguments (any JSON, usually an object).
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// Default `success`.
    #[serde(default)]
    pub status: Option<ToolStatus>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub error: Option<String>,
}

/// `POST /v1/traces` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// The trace runs in `scope.session`.
    pub scope: Scope,
    pub task: String,
    /// Optional idempotency key (`[A-Za-z0-9_.-]+`): starting the same key again answers
    /// the same trace.
    #[serde(default)]
    pub trace_key: Option<String>,
}

/// `POST /v1/traces/{id}/steps` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepRequest {
    pub scope: Scope,
    #[serde(default)]
    pub thought: Option<String>,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub observation: Option<String>,
    /// The number this step must get (optional): makes a retry idempotent. A step already
    /// stored with this number and the same content is answered again; other content, or a
    /// number that is not the next one, is `409 conflict`.
    #[serde(default)]
    pub step_number: Option<u32>,
}

/// `POST /v1/steps/{id}/tool-calls` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    pub scope: Scope,
    pub tool_name: String,
    /// Any JSON value (default `{}`), stored as given; at most 64 KiB.
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
    /// Any JSON value, stored as given; at most 64 KiB.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// Default `success`.
    #[serde(default)]
    pub status: Option<ToolStatus>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub error: Option<String>,
    /// The number this call must get within its step (optional): makes a retry idempotent,
    /// like a step's `step_number`.
    #[serde(default)]
    pub call_number: Option<u32>,
}

/// `POST /v1/traces/{id}/complete` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteTraceRequest {
    pub scope: Scope,
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub success: Option<bool>,
}

/// A step with its tool calls.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StepView {
    #[serde(flatten)]
    pub step: Step,
    pub tool_calls: Vec<ToolCall>,
}

/// A trace with its steps.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TraceView {
    #[serde(flatten)]
    pub trace: Trace,
    pub steps: Vec<StepView>,
}

/// Statistics of one tool.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ToolStats {
    pub name: String,
    pub total_calls: u64,
    /// Status `success`.
    pub successful_calls: u64,
    /// Status `failure`, `error` or `timeout`.
    pub failed_calls: u64,
    /// Calls still `pending` or `cancelled` (neither success nor failure).
    pub other_calls: u64,
    /// successful / (successful + failed); 0 when no call finished.
    pub success_rate: f64,
    /// Mean duration of the calls that report one.
    pub avg_duration_ms: Option<f64>,
    /// 95th percentile duration (nearest rank) of the calls that report one.
    pub p95_duration_ms: Option<u64>,
}

impl ToolStats {
    /// The statistics of `calls` (all of one tool).
    pub fn of(name: String, calls: &[ToolCall]) -> ToolStats {
        let successful = calls
            .iter()
            .filter(|c| c.status == ToolStatus::Success)
            .count() as u64;
        let failed = calls.iter().filter(|c| c.status.failed()).count() as u64;
        let total = calls.len() as u64;
        let finished = successful + failed;
        let mut durations: Vec<u64> = calls.iter().filter_map(|c| c.duration_ms).collect();
        durations.sort_unstable();
        let avg = (!durations.is_empty())
            .then(|| durations.iter().map(|d| *d as f64).sum::<f64>() / durations.len() as f64);
        // Nearest rank: the smallest value with at least 95 % of the values at or below it.
        let p95 = (!durations.is_empty()).then(|| {
            let rank = (0.95 * durations.len() as f64).ceil() as usize;
            durations[rank.clamp(1, durations.len()) - 1]
        });
        ToolStats {
            name,
            total_calls: total,
            successful_calls: successful,
            failed_calls: failed,
            other_calls: total - finished,
            success_rate: if finished == 0 {
                0.0
            } else {
                successful as f64 / finished as f64
            },
            avg_duration_ms: avg,
            p95_duration_ms: p95,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(status: ToolStatus, duration_ms: Option<u64>) -> ToolCall {
        ToolCall {
            id: "c".into(),
            trace_id: "t".into(),
            step_id: "s".into(),
            call_number: 1,
            tool_name: "search".into(),
            arguments: serde_json::json!({}),
            result: None,
            status,
            duration_ms,
            error: None,
            created_at: 0,
        }
    }

    #[test]
    fn tool_stats_arithmetic() {
        use ToolStatus::*;
        let calls = vec![
            call(Success, Some(100)),
            call(Success, Some(200)),
            call(Failure, None),
            call(Success, Some(300)),
            call(Timeout, Some(30_000)),
            call(Pending, None),
            call(Cancelled, None),
            call(Error, Some(50)),
        ];
        let s = ToolStats::of("search".into(), &calls);
        assert_eq!(s.total_calls, 8);
        assert_eq!(s.successful_calls, 3);
        assert_eq!(s.failed_calls, 3);
        assert_eq!(s.other_calls, 2);
        assert!((s.success_rate - 0.5).abs() < 1e-12);
        // Durations 50, 100, 200, 300, 30000: mean 6130, p95 = rank ceil(4.75) = 5th.
        assert_eq!(s.avg_duration_ms, Some(6130.0));
        assert_eq!(s.p95_duration_ms, Some(30_000));

        let none = ToolStats::of("x".into(), &[call(Pending, None)]);
        assert_eq!(none.success_rate, 0.0);
        assert_eq!(none.avg_duration_ms, None);
        assert_eq!(none.p95_duration_ms, None);

        let twenty: Vec<ToolCall> = (1..=20).map(|i| call(Success, Some(i))).collect();
        let s = ToolStats::of("y".into(), &twenty);
        assert_eq!(s.p95_duration_ms, Some(19), "nearest rank 19 of 20");
        assert_eq!(s.success_rate, 1.0);
    }
}
