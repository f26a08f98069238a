//! Third-party events: evidence posted by other agents (`POST /v1/events`,
//! `GET /v1/events/{id}`).
//!
//! An **event** (`evt:<id>`) is stored verbatim and can be cited as evidence of a candidate
//! (see `candidates`), but it is *not searchable*: an unvetted claim reaches recall only
//! through an approved candidate. Its id is a pure function of the partition, the source
//! agent, the content and the given time (if any), so posting the same event again lands
//! on the same record (`created: false`).

use cairn_models::grant::Operation;
use cairn_models::ids::{event_id, event_record_id, sha256_hex};
use cairn_models::limits;
use cairn_models::scope::validate_component;
use cairn_models::Timestamp;
use cairn_models::{Partition, PointKind, Ref, Scope, StoredPoint, TrustOrigin};
use cairn_store::UpsertPoint;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::access::admit;
use crate::auth::{authorize, bind_agent, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;

/// Longest event content, in bytes.
pub const MAX_EVENT_BYTES: usize = 64 * 1024;

/// `POST /v1/events` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRequest {
    pub scope: Scope,
    /// The third-party agent posting the event (`[A-Za-z0-9_.-]+`).
    pub source_agent: String,
    /// The event, stored verbatim (at most 64 KiB).
    pub content: String,
    /// When it happened (RFC 3339 or epoch ms); part of the id, so repeated identical
    /// events are told apart by their time. Defaults to the time of recording.
    #[serde(default)]
    pub ts: Option<Timestamp>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// What `POST /v1/events` returns.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventReceipt {
    pub event_id: String,
    /// `evt:<id>`: cite it as evidence of a candidate.
    #[serde(rename = "ref")]
    pub reference: String,
    /// False when the same event was already stored.
    pub created: bool,
}

/// A stored event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventView {
    pub event_id: String,
    #[serde(rename = "ref")]
    pub reference: String,
    pub source_agent: String,
    pub content: String,
    /// Epoch ms.
    pub ts: i64,
    pub session: String,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

impl Engine {
    /// Stores a third-party event (idempotent).
    pub async fn post_event(
        &self,
        who: &Principal,
        req: EventRequest,
    ) -> Result<EventReceipt, ServiceError> {
        let mut req = req;
        bind_agent(who, &mut req.source_agent)?;
        admit(who, &req.scope, Operation::Propose)?;
        limits::check_metadata("metadata", req.metadata.as_ref())?;
        post_event(self, req).await
    }

    /// One event.
    pub async fn get_event(
        &self,
        who: &Principal,
        partition: &Partition,
        id: &str,
    ) -> Result<EventView, ServiceError> {
        authorize(who, partition, Operation::Read)?;
        validate_component("event_id", id)?;
        get_event(self, partition, id).await
    }
}

fn event_view(p: &StoredPoint) -> EventView {
    let id = p.doc_id.clone().unwrap_or_default();
    EventView {
        reference: Ref::evt(id.as_str()).to_string(),
        event_id: id,
        source_agent: p.agent.clone(),
        content: p.text.clone().unwrap_or_default(),
        ts: p.ts,
        session: p.session.clone(),
        metadata: p.metadata.clone(),
    }
}

/// Stores an event (idempotent).
pub(crate) async fn post_event(
    engine: &Engine,
    req: EventRequest,
) -> Result<EventReceipt, ServiceError> {
    req.scope.validate()?;
    validate_component("source_agent", &req.source_agent)?;
    if req.content.trim().is_empty() || req.content.len() > MAX_EVENT_BYTES {
        return Err(ServiceError::InvalidRequest(format!(
            "content must be 1 to {MAX_EVENT_BYTES} bytes"
        )));
    }
    let ts = match &req.ts {
        Some(t) => Some(t.to_millis("ts")?),
        None => None,
    };
    let partition = req.scope.partition();
    let id = event_id(&partition, &req.source_agent, &req.content, ts);
    let point_id = event_record_id(&partition, &id);
    let receipt = |created| EventReceipt {
        reference: Ref::evt(id.as_str()).to_string(),
        event_id: id.clone(),
        created,
    };
    let _serial = engine.serial(crate::engine::Section::Reviews).await?;
    if !engine
        .store
        .retrieve(&partition, &[point_id], false)
        .await?
        .is_empty()
    {
        return Ok(receipt(false));
    }
    let now = chrono::Utc::now().timestamp_millis();
    let mut scope = req.scope.clone();
    scope.agent = req.source_agent.clone();
    let mut p = StoredPoint::new(
        PointKind::Event,
        &scope,
        TrustOrigin::ThirdPartyAgent,
        ts.unwrap_or(now),
    );
    p.doc_id = Some(id.clone());
    p.text = Some(req.content.clone());
    p.source = Some(format!("agent {}", req.source_agent));
    p.content_hash = Some(sha256_hex(req.content.as_bytes()));
    p.metadata = req.metadata;
    engine
        .store
        .upsert(vec![UpsertPoint::record(point_id, p)])
        .await?;
    Ok(receipt(true))
}

/// One event of the partition.
pub(crate) async fn get_event(
    engine: &Engine,
    partition: &Partition,
    id: &str,
) -> Result<EventView, ServiceError> {
    engine
        .store
        .retrieve(partition, &[event_record_id(partition, id)], false)
        .await?
        .first()
        .map(|h| event_view(&h.point))
        .ok_or_else(|| ServiceError::NotFound(format!("no event {id} in this scope")))
}
