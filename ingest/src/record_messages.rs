//! Recording conversation messages: verbatim, with per-conversation sequence numbers, keyed
//! for idempotence ([`KeylessMessages`]), with the conversation's high-water mark written in
//! the same store write as its messages.

use std::collections::HashMap;

use cairn_models::ids::{
    conversation_record_id, message_content_digest, message_point_id, sha256_hex, MessageKey,
};
use cairn_models::{Partition, PointKind, RecordState, Ref, Role, Scope, StoredPoint, TrustOrigin};
use cairn_store::{Filter, UpsertPoint};
use serde::Serialize;
use uuid::Uuid;

use crate::messages::{KeyedMessage, KeylessMessages, MessageInput};
use crate::{now_millis, IngestError, Ingestor};

/// Receipt of a recorded message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageReceipt {
    /// UUID of the stored point.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: Uuid,
    /// `msg:<conversation>/<seq>`.
    #[serde(rename = "ref")]
    pub reference: String,
    pub conversation_id: String,
    pub seq: u64,
    pub role: Role,
    /// False when an identical message was already stored (a replay).
    pub created: bool,
}

/// Vectors of message texts, computed before a write takes its locks
/// ([`Ingestor::embed_messages`]): the model is the slow part of recording a message, and a
/// vector is a pure function of the text, so concurrent writers embed side by side (and
/// share model runs) instead of one after another under the locks.
#[derive(Debug, Clone, Default)]
pub struct MessageVectors(HashMap<String, Vec<f32>>);

/// The text a message is embedded (and BM25-indexed) by: its content, after its speaker.
fn embedding_text(m: &MessageInput) -> String {
    match &m.speaker {
        Some(s) => format!("{s}: {}", m.content),
        None => m.content.clone(),
    }
}

impl Ingestor {
    /// Embeds the messages' texts (valid, non-empty ones) without taking any lock; pass the
    /// result to [`Ingestor::record_messages_prepared`].
    pub async fn embed_messages<'a>(
        &self,
        messages: impl IntoIterator<Item = &'a MessageInput>,
    ) -> Result<MessageVectors, IngestError> {
        let mut texts: Vec<String> = messages
            .into_iter()
            .filter(|m| m.validate().is_ok())
            .map(embedding_text)
            .filter(|t| !t.trim().is_empty())
            .collect();
        texts.sort();
        texts.dedup();
        if texts.is_empty() {
            return Ok(MessageVectors::default());
        }
        let vectors = self.embedder.embed_documents(texts.clone()).await?;
        Ok(MessageVectors(texts.into_iter().zip(vectors).collect()))
    }

    /// Records conversation messages verbatim, keyless ones keyed by content
    /// ([`KeylessMessages::ByContent`]): recording the same batch again (re-running a file)
    /// writes nothing. See [`Ingestor::record_messages_with`].
    pub async fn record_messages(
        &self,
        scope: &Scope,
        messages: Vec<MessageInput>,
    ) -> Result<Vec<MessageReceipt>, IngestError> {
        let keyed = messages.into_iter().map(KeyedMessage::from).collect();
        self.record_messages_with(scope, keyed, KeylessMessages::ByContent)
            .await
    }

    /// Records conversation messages verbatim. The batch is validated first (ids and the
    /// caps of `cairn_models::limits`) and rejected whole if any message is invalid. Point
    /// ids follow the message's key ([`KeylessMessages`]): a message whose point already
    /// exists with the same content is a replay (not written again); a key reused with
    /// different content is a conflict and nothing of the batch is written. Messages of
    /// one batch with the same key collapse onto one point.
    pub async fn record_messages_with(
        &self,
        scope: &Scope,
        keyed: Vec<KeyedMessage>,
        keyless: KeylessMessages,
    ) -> Result<Vec<MessageReceipt>, IngestError> {
        self.record_messages_prepared(scope, keyed, keyless, None)
            .await
    }

    /// [`Ingestor::record_messages_with`] with vectors embedded beforehand
    /// ([`Ingestor::embed_messages`]; a caller that serializes writes itself embeds before
    /// its own lock). Without them, or for a text they lack, the messages are embedded here,
    /// still before the write's locks.
    pub async fn record_messages_prepared(
        &self,
        scope: &Scope,
        keyed: Vec<KeyedMessage>,
        keyless: KeylessMessages,
        vectors: Option<MessageVectors>,
    ) -> Result<Vec<MessageReceipt>, IngestError> {
        scope
            .validate()
            .map_err(|e| IngestError::InvalidInput(e.to_string()))?;
        for (i, k) in keyed.iter().enumerate() {
            if let Some(id) = &k.message_id {
                cairn_models::scope::validate_component("message_id", id)
                    .map_err(|e| IngestError::InvalidInput(format!("message {i}: {e}")))?;
            }
            k.message.validate().map_err(|e| match e {
                // Keep the type (a size cap is not a malformed request), name the message.
                IngestError::TooLarge {
                    source_name,
                    size,
                    limit,
                } => IngestError::TooLarge {
                    source_name: format!("message {i}: {source_name}"),
                    size,
                    limit,
                },
                other => IngestError::InvalidInput(format!("message {i}: {other}")),
            })?;
        }
        let mut vectors = vectors.unwrap_or_default();
        let missing: Vec<&MessageInput> = keyed
            .iter()
            .map(|k| &k.message)
            .filter(|m| {
                let t = embedding_text(m);
                !t.trim().is_empty() && !vectors.0.contains_key(&t)
            })
            .collect();
        if !missing.is_empty() {
            let more = self.embed_messages(missing).await?;
            vectors.0.extend(more.0);
        }
        let partition = scope.partition();
        let mut seqs = self.seqs.lock().await;
        // Another Cairn process may have written to this store since: take the store-wide
        // lock and forget what this process remembered of the sequence numbers.
        let _shared = self.store.lock("messages").await?;
        if self.store.shared() {
            seqs.clear();
        }

        // Ids are pure functions of the key. Keys by content (explicit `ts`, or keyless
        // under `ByContent`) tell identical messages of one batch apart by their occurrence
        // number, so replaying a file maps each onto itself.
        let mut occurrences: HashMap<String, u32> = HashMap::new();
        let mut ids = Vec::with_capacity(keyed.len());
        for k in &keyed {
            let m = &k.message;
            let key = match (&k.message_id, &m.turn_id, &m.ts, keyless) {
                (Some(id), _, _, _) => MessageKey::Id(id).to_string(),
                (None, Some(t), _, _) => MessageKey::Turn(t).to_string(),
                (None, None, None, KeylessMessages::New) => {
                    MessageKey::New(Uuid::new_v4()).to_string()
                }
                (None, None, ts, _) => {
                    // The same key as before message ids existed, so stored messages
                    // keep matching their replays (the timestamp as its `Debug` text).
                    let ts = ts.as_ref().map(|t| format!("{t:?}")).unwrap_or_default();
                    let digest = message_content_digest(m.role, &m.content, &ts);
                    let n = occurrences.entry(digest.clone()).or_insert(0);
                    *n += 1;
                    MessageKey::Content {
                        digest: &digest,
                        occurrence: *n,
                    }
                    .to_string()
                }
            };
            ids.push(message_point_id(scope, &m.conversation_id, &key, m.role));
        }
        let (messages, states): (Vec<MessageInput>, Vec<Option<RecordState>>) =
            keyed.into_iter().map(|k| (k.message, k.state)).unzip();
        let existing: HashMap<Uuid, StoredPoint> = self
            .store
            .retrieve(&partition, &ids, false)
            .await?
            .into_iter()
            .map(|h| (h.id, h.point))
            .collect();
        for (m, id) in messages.iter().zip(&ids) {
            if let Some(p) = existing.get(id) {
                if p.text.as_deref() != Some(m.content.as_str()) {
                    return Err(IngestError::Conflict(match &m.turn_id {
                        Some(t) => format!(
                            "turn {t} already has a different {} message in conversation {}",
                            m.role.as_str(),
                            m.conversation_id
                        ),
                        None => format!(
                            "another {} message with the same key is stored in conversation {}",
                            m.role.as_str(),
                            m.conversation_id
                        ),
                    }));
                }
            }
        }

        let now = now_millis();
        let mut receipts = Vec::with_capacity(messages.len());
        let mut to_write = Vec::new();
        let mut texts = Vec::new();
        let mut claimed: HashMap<Uuid, u64> = HashMap::new();
        for ((m, id), state) in messages.iter().zip(&ids).zip(&states) {
            if let Some(p) = existing.get(id) {
                receipts.push(MessageReceipt {
                    id: *id,
                    reference: p.reference(),
                    conversation_id: m.conversation_id.clone(),
                    seq: p.seq.unwrap_or(0),
                    role: m.role,
                    created: false,
                });
                continue;
            }
            if let Some(seq) = claimed.get(id) {
                // The same message twice in this batch (same turn and role): one point.
                receipts.push(MessageReceipt {
                    id: *id,
                    reference: Ref::msg(m.conversation_id.as_str(), *seq).to_string(),
                    conversation_id: m.conversation_id.clone(),
                    seq: *seq,
                    role: m.role,
                    created: false,
                });
                continue;
            }
            let seq = self
                .next_seq(&mut seqs, &partition, &m.conversation_id)
                .await?;
            claimed.insert(*id, seq);
            let mut p = StoredPoint::new(
                PointKind::Message,
                scope,
                m.role.trust(),
                match &m.ts {
                    Some(ts) => ts
                        .to_millis("ts")
                        .map_err(|e| IngestError::InvalidInput(e.to_string()))?,
                    None => now,
                },
            );
            p.text = Some(m.content.clone());
            p.conversation_id = Some(m.conversation_id.clone());
            p.seq = Some(seq);
            p.turn_id = m.turn_id.clone();
            p.role = Some(m.role);
            p.speaker = m.speaker.clone();
            p.source = Some(format!("conversation:{}", m.conversation_id));
            p.content_hash = Some(sha256_hex(m.content.as_bytes()));
            p.metadata = m.metadata.clone();
            p.state = state.clone();
            let text = embedding_text(m);
            receipts.push(MessageReceipt {
                id: *id,
                reference: p.reference(),
                conversation_id: m.conversation_id.clone(),
                seq,
                role: m.role,
                created: true,
            });
            texts.push(text);
            to_write.push((*id, p));
        }
        if !to_write.is_empty() {
            // Only messages with content have vectors (embedded above, before the locks);
            // an empty one is stored without (nothing to search it by).
            let vectors: Vec<Option<Vec<f32>>> = texts
                .iter()
                .map(|t| {
                    if t.trim().is_empty() {
                        Ok(None)
                    } else {
                        vectors.0.get(t).cloned().map(Some).ok_or_else(|| {
                            IngestError::Internal(format!(
                                "no vector for a message of {} bytes",
                                t.len()
                            ))
                        })
                    }
                })
                .collect::<Result<_, _>>()?;
            let conversations: std::collections::BTreeSet<String> = to_write
                .iter()
                .filter_map(|(_, p)| p.conversation_id.clone())
                .collect();
            let mut points: Vec<UpsertPoint> = to_write
                .into_iter()
                .zip(vectors)
                .zip(texts)
                .map(|(((id, payload), v), text)| UpsertPoint {
                    id,
                    bm25_text: v.as_ref().map(|_| text),
                    sparse: None,
                    dense: v,
                    payload,
                })
                .collect();
            // The high-water marks travel in the same write as the messages.
            for conversation in conversations {
                let next = seqs
                    .get(&(partition.key(), conversation.clone()))
                    .copied()
                    .unwrap_or(0);
                let mut record =
                    StoredPoint::new(PointKind::Conversation, scope, TrustOrigin::System, now);
                record.conversation_id = Some(conversation.clone());
                record.seq = Some(next);
                points.push(UpsertPoint::record(
                    conversation_record_id(&partition, &conversation),
                    record,
                ));
            }
            cairn_models::failpoint("ingest.messages.before_write");
            if let Err(e) = self.store.upsert(points).await {
                // Sequence numbers handed out above were not used: reload them next time.
                seqs.clear();
                return Err(e.into());
            }
        }
        Ok(receipts)
    }

    async fn next_seq(
        &self,
        seqs: &mut HashMap<(String, String), u64>,
        partition: &Partition,
        conversation: &str,
    ) -> Result<u64, IngestError> {
        let key = (partition.key(), conversation.to_string());
        if let Some(next) = seqs.get_mut(&key) {
            let seq = *next;
            *next += 1;
            return Ok(seq);
        }
        // First use in this process: continue after the conversation's high-water mark
        // (kept when messages are deleted) and after any stored message.
        let recorded = self
            .store
            .retrieve(
                partition,
                &[conversation_record_id(partition, conversation)],
                false,
            )
            .await?
            .into_iter()
            .next()
            .and_then(|h| h.point.seq);
        // A shared store re-reads the mark on every write; the conversation record travels
        // with every message write, so it is the mark (the scan below is for conversations
        // stored before records existed).
        if let (true, Some(next)) = (self.store.shared(), recorded) {
            seqs.insert(key, next + 1);
            return Ok(next);
        }
        let recorded = recorded.unwrap_or(0);
        let filter = Filter::new()
            .eq("kind", PointKind::Message.as_str())
            .eq("conversation_id", conversation);
        let max: Option<u64> = self
            .store
            .scroll_all(partition, filter)
            .await?
            .iter()
            .filter_map(|h| h.point.seq)
            .max();
        let seq = max.map_or(0, |m| m + 1).max(recorded);
        seqs.insert(key, seq + 1);
        Ok(seq)
    }
}
