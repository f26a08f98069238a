//! The `agent-turn-v1` contract: `prepare` (recall before the model call, persists nothing)
//! and `complete` (record the exact user and assistant messages, idempotently): the requests,
//! the operations ([`Engine::prepare_turn`], [`Engine::complete_turn`]) and their rules.

use std::sync::Arc;

use cairn_ingest::messages::{KeyedMessage, KeylessMessages};
use cairn_ingest::{IngestError, MessageInput};
use cairn_models::grant::Operation;
use cairn_models::ids::{sha256_hex, turn_record_id};
use cairn_models::limits;
use cairn_models::pack::TurnMode;
use cairn_models::state::{RecordState, TurnLinks, TurnState};
use cairn_models::{
    PointKind, Ref, Role, Scope, StoredPoint, TrustOrigin, TurnEnvelope, CONTRACT_VERSION,
};
use cairn_recall::{RecallFilters, RecallRequest};
use cairn_store::UpsertPoint;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::{admit, admit_write};
use crate::auth::Principal;
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::recall::check_filters;

/// `POST /v1/turns/prepare` body; the arguments of MCP's `prepare_turn`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PrepareRequest {
    pub scope: Scope,
    /// The user's message of this turn, used as the recall query: 1 to 8192 bytes (longer:
    /// `400 invalid_request`).
    pub user_message: String,
    /// The turn's id (`[A-Za-z0-9_.-]+`); default a new random id (`turn-<uuid>`). Pass the
    /// returned id to `complete`.
    #[serde(default)]
    pub turn_id: Option<String>,
    #[serde(default)]
    pub mode: TurnMode,
    /// Most tokens of the pack's Markdown context (default 1000).
    #[serde(default)]
    pub token_budget: Option<usize>,
    #[serde(default)]
    pub filters: RecallFilters,
}

/// `POST /v1/turns/{turn_id}/complete` body.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// `session` is the conversation the messages are recorded in.
    pub scope: Scope,
    /// At most 32 KiB, like every message.
    pub user_message: String,
    /// At most 32 KiB.
    pub assistant_message: String,
    /// At most 1024 bytes.
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub mode: TurnMode,
    /// At most 16 KiB serialized (with the turn's links, as it is stored on both messages).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// Refs (`doc:..#..`, `msg:../..`) the assistant's answer cites (at most 64).
    #[serde(default)]
    pub refers_to: Vec<String>,
}

pub use cairn_models::state::TurnReceipt;

impl Engine {
    /// `agent-turn-v1` prepare: recall before the model call (persists nothing).
    pub async fn prepare_turn(
        &self,
        who: &Principal,
        req: PrepareRequest,
    ) -> Result<TurnEnvelope, ServiceError> {
        admit(who, &req.scope, Operation::Recall)?;
        check_filters(&req.filters)?;
        prepare(self, req).await
    }

    /// `agent-turn-v1` complete: records the exact user and assistant messages, idempotently.
    pub async fn complete_turn(
        self: &Arc<Self>,
        who: &Principal,
        turn_id: &str,
        req: CompleteRequest,
    ) -> Result<TurnReceipt, ServiceError> {
        let mut req = req;
        admit_write(who, &mut req.scope, Operation::CompleteTurn)?;
        let receipt = complete(self, turn_id, req).await?;
        // Replays write nothing; counting them as two messages only brings an index build
        // slightly forward.
        self.note_written(2);
        Ok(receipt)
    }
}

/// Longest ref in `refers_to`, in bytes (a `msg:` ref with a 128-character conversation id
/// is under 160).
const MAX_REF_BYTES: usize = 256;

fn prepared_key(scope: &Scope, turn_id: &str) -> String {
    format!("{}\0{turn_id}", scope.key())
}

/// Runs `prepare`.
pub(crate) async fn prepare(
    engine: &Engine,
    req: PrepareRequest,
) -> Result<TurnEnvelope, ServiceError> {
    req.scope.validate()?;
    let turn_id = match req.turn_id {
        Some(t) => {
            cairn_models::scope::validate_component("turn_id", &t)?;
            t
        }
        None => format!("turn-{}", uuid::Uuid::new_v4().simple()),
    };
    let pack = engine
        .recaller
        .recall(&RecallRequest {
            scope: req.scope.clone(),
            query: req.user_message.clone(),
            budget: req.token_budget,
            filters: req.filters,
        })
        .await?;
    let refs = pack
        .citations
        .iter()
        .map(|c| c.reference.to_string())
        .collect();
    engine
        .prepared
        .lock()
        .await
        .insert(prepared_key(&req.scope, &turn_id), refs);
    Ok(TurnEnvelope {
        contract_version: CONTRACT_VERSION.to_string(),
        turn_id,
        scope: req.scope,
        user_message: req.user_message,
        mode: req.mode,
        memory_pack: pack,
    })
}

/// Runs `complete`. Idempotent: an identical replay returns the stored receipt and writes
/// nothing; different content for a completed (or deleted) turn id is `turn_conflict`.
pub(crate) async fn complete(
    engine: &Engine,
    turn_id: &str,
    req: CompleteRequest,
) -> Result<TurnReceipt, ServiceError> {
    req.scope.validate()?;
    cairn_models::scope::validate_component("turn_id", turn_id)?;
    if req.user_message.trim().is_empty() || req.assistant_message.trim().is_empty() {
        return Err(ServiceError::InvalidRequest(
            "user_message and assistant_message must not be empty".into(),
        ));
    }
    limits::check_bytes("user_message", &req.user_message, limits::MAX_MESSAGE_BYTES)?;
    limits::check_bytes(
        "assistant_message",
        &req.assistant_message,
        limits::MAX_MESSAGE_BYTES,
    )?;
    if let Some(source) = &req.source {
        limits::check_bytes("source", source, limits::MAX_SOURCE_BYTES)?;
    }
    limits::check_metadata("metadata", req.metadata.as_ref())?;
    limits::check_count("refers_to", req.refers_to.len(), limits::MAX_REFERS_TO)?;
    for r in &req.refers_to {
        limits::check_bytes("a refers_to ref", r, MAX_REF_BYTES)?;
        // Typed links: a ref that does not parse is refused, not stored as text.
        Ref::parse_input(r)?;
    }
    let mut refers_to = req.refers_to.clone();
    refers_to.sort();
    refers_to.dedup();
    let content = serde_json::json!({
        "user_message": req.user_message,
        "assistant_message": req.assistant_message,
        "source": req.source,
        "mode": req.mode,
        "metadata": req.metadata,
        "refers_to": refers_to,
    });
    // Canonical JSON (keys sorted at every depth): a retry whose metadata keys come in
    // another order is the same completion.
    let digest = sha256_hex(limits::canonical_json(&content).as_bytes());
    // Receipts stored before canonical digests hashed the JSON with `metadata` as sent; an
    // exact replay of such a turn must still match it.
    let legacy_digest = sha256_hex(content.to_string().as_bytes());

    let partition = req.scope.partition();
    let record_id = turn_record_id(&req.scope, turn_id);
    let message = |role: Role, content: &str| MessageInput {
        conversation_id: req.scope.session.clone(),
        role,
        content: content.to_string(),
        ts: None,
        turn_id: Some(turn_id.to_string()),
        speaker: None,
        // The caller's metadata as sent; the turn's links are typed state.
        metadata: req.metadata.clone(),
    };
    let messages = [
        message(Role::User, &req.user_message),
        message(Role::Assistant, &req.assistant_message),
    ];
    // The messages' vectors before the turn lock: embedding is most of a completion's
    // time, and concurrent completions then embed side by side (sharing model runs).
    let vectors = engine.ingestor.embed_messages(&messages).await?;
    let _serial = engine.serial(crate::engine::Section::Turns).await?;
    if let Some(existing) = engine
        .store
        .retrieve(&partition, &[record_id], false)
        .await?
        .into_iter()
        .next()
    {
        let Some(RecordState::Turn(state)) = existing.point.state else {
            return Err(ServiceError::Internal(format!(
                "turn record of {turn_id} has no turn state"
            )));
        };
        if state.deleted {
            return Err(ServiceError::TurnConflict(format!(
                "turn {turn_id} was completed and its messages were deleted; a turn id cannot be reused"
            )));
        }
        let stored = existing.point.content_hash.as_deref();
        if stored != Some(digest.as_str()) && stored != Some(legacy_digest.as_str()) {
            return Err(ServiceError::TurnConflict(format!(
                "turn {turn_id} was already completed with different content"
            )));
        }
        return Ok(state.receipt);
    }

    // REFERS_TO: what prepare selected for this turn, plus what the caller cites.
    let mut links = engine
        .prepared
        .lock()
        .await
        .get(&prepared_key(&req.scope, turn_id))
        .cloned()
        .unwrap_or_default();
    links.extend(refers_to.iter().cloned());
    links.sort();
    links.dedup();
    let links: Vec<Ref> = links
        .iter()
        .map(|r| Ref::parse(r))
        .collect::<Result<_, _>>()?;
    let turn_links = RecordState::TurnMessage(TurnLinks {
        part_of: Ref::conv(req.scope.session.as_str()),
        refers_to: links.clone(),
        mode: req.mode,
        source: req.source.clone(),
    });
    let keyed = messages
        .into_iter()
        .map(|message| KeyedMessage {
            message,
            message_id: None,
            state: Some(turn_links.clone()),
        })
        .collect();
    let receipts = engine
        .ingestor
        .record_messages_prepared(&req.scope, keyed, KeylessMessages::ByContent, Some(vectors))
        .await
        .map_err(|e| match e {
            IngestError::Conflict(m) => ServiceError::TurnConflict(m),
            other => other.into(),
        })?;
    cairn_models::failpoint("turn.after_messages");
    let [user, assistant] = receipts.as_slice() else {
        return Err(ServiceError::Internal(
            "expected two message receipts".into(),
        ));
    };
    let now = chrono::Utc::now();
    let receipt = TurnReceipt {
        turn_id: turn_id.to_string(),
        user_message_ref: user.reference.clone(),
        assistant_message_ref: assistant.reference.clone(),
        stored_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        digest: digest.clone(),
    };
    let mut record = StoredPoint::new(
        PointKind::Turn,
        &req.scope,
        TrustOrigin::AgentOutput,
        now.timestamp_millis(),
    );
    record.turn_id = Some(turn_id.to_string());
    record.conversation_id = Some(req.scope.session.clone());
    record.content_hash = Some(digest);
    record.state = Some(RecordState::Turn(TurnState {
        receipt: receipt.clone(),
        refers_to: links,
        deleted: false,
        deleted_at: None,
    }));
    // The turn record is the commit point: written after both messages are stored.
    engine
        .store
        .upsert(vec![UpsertPoint::record(record_id, record)])
        .await?;
    Ok(receipt)
}
