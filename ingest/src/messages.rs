//! Conversation messages: the input format (JSON array or JSONL) and its validation.

use cairn_models::limits::{self, LimitError};
use cairn_models::Role;
use serde::{Deserialize, Serialize};

use crate::IngestError;

/// One message to record, as given by a caller or a `.jsonl` file:
/// `{conversation_id, role, content, ts?, turn_id?, speaker?, metadata?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageInput {
    pub conversation_id: String,
    pub role: Role,
    /// Stored verbatim: never summarized or rewritten.
    pub content: String,
    /// RFC 3339 time or Unix epoch milliseconds; defaults to the time of recording.
    #[serde(default)]
    pub ts: Option<Timestamp>,
    /// The agent turn this message belongs to. With a turn id, a replay of the same turn
    /// collapses onto the same point.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// Display name of the speaker, if any.
    #[serde(default)]
    pub speaker: Option<String>,
    #[serde(default)]
    pub metadata: Option<serde_json::Value>,
}

/// A message with the caller's optional idempotency key (`message_id`, unique per
/// conversation and role). See [`KeylessMessages`] for how a message is identified.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedMessage {
    pub message: MessageInput,
    pub message_id: Option<String>,
    /// Cairn's state of the stored message (a turn's links); never from a caller.
    pub state: Option<cairn_models::RecordState>,
}

impl From<MessageInput> for KeyedMessage {
    fn from(message: MessageInput) -> Self {
        KeyedMessage {
            state: None,
            message,
            message_id: None,
        }
    }
}

/// How a message's point id is keyed, and so when recording it again is a replay.
///
/// Explicit keys, in order of precedence: the caller's `message_id`, then the `turn_id`
/// (one message per turn and role), then an explicit `ts` (with role, content and the
/// occurrence number in the batch). Same key, same content: a replay, nothing written; same
/// key, other content: a conflict. A message with none of these is handled by this policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeylessMessages {
    /// Each keyless message is new. What an API wants: two separate requests that happen to
    /// say the same thing ("ok") are two messages, never one silently dropped.
    New,
    /// Keyed by role, content and occurrence number in the batch, as if `ts` were empty:
    /// recording the same batch again (re-running a file) maps each message onto itself.
    /// What a replayable source such as a JSONL file wants.
    ByContent,
}

impl From<LimitError> for IngestError {
    fn from(e: LimitError) -> Self {
        match e {
            LimitError::TooLarge { field, size, limit } => IngestError::TooLarge {
                source_name: field,
                size: size as u64,
                limit: limit as u64,
            },
            other @ LimitError::TooMany { .. } => IngestError::InvalidInput(other.to_string()),
        }
    }
}

pub use cairn_models::Timestamp;

/// Parses messages from a JSON array or JSON Lines. Errors name the line.
pub fn parse_messages(input: &str) -> Result<Vec<MessageInput>, IngestError> {
    let trimmed = input.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed)
            .map_err(|e| IngestError::InvalidInput(format!("messages JSON: {e}")));
    }
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let m: MessageInput = serde_json::from_str(line)
            .map_err(|e| IngestError::InvalidInput(format!("messages line {}: {e}", i + 1)))?;
        out.push(m);
    }
    Ok(out)
}

impl MessageInput {
    /// Checks ids, content and the caps of [`cairn_models::limits`] (content
    /// [`limits::MAX_MESSAGE_BYTES`], metadata [`limits::MAX_METADATA_BYTES`], speaker
    /// [`limits::MAX_SPEAKER_BYTES`]). An over-limit field is [`IngestError::TooLarge`]
    /// naming the field and the limit.
    pub fn validate(&self) -> Result<(), IngestError> {
        cairn_models::scope::validate_component("conversation_id", &self.conversation_id)
            .map_err(|e| IngestError::InvalidInput(e.to_string()))?;
        if let Some(t) = &self.turn_id {
            cairn_models::scope::validate_component("turn_id", t)
                .map_err(|e| IngestError::InvalidInput(e.to_string()))?;
        }
        // Empty content is a message too (a user may send nothing): it is stored verbatim
        // and counted, but has no vectors, since there is nothing to find it by.
        if let Some(ts) = &self.ts {
            ts.to_millis("ts")
                .map_err(|e| IngestError::InvalidInput(e.to_string()))?;
        }
        limits::check_bytes("content", &self.content, limits::MAX_MESSAGE_BYTES)?;
        if let Some(s) = &self.speaker {
            limits::check_bytes("speaker", s, limits::MAX_SPEAKER_BYTES)?;
        }
        limits::check_metadata("metadata", self.metadata.as_ref())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_jsonl_and_arrays() {
        let jsonl = r#"{"conversation_id":"c1","role":"user","content":"hi","ts":"2024-05-01T10:00:00Z"}

{"conversation_id":"c1","role":"assistant","content":"hello","turn_id":"t1","ts":1714557600000}"#;
        let m = parse_messages(jsonl).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0].ts.as_ref().unwrap().to_millis("ts").unwrap(),
            1714557600000
        );
        assert_eq!(m[1].role, Role::Assistant);
        let arr = r#"[{"conversation_id":"c","role":"tool","content":"x"}]"#;
        assert_eq!(parse_messages(arr).unwrap().len(), 1);
    }

    #[test]
    fn errors_name_the_line() {
        let bad =
            "{\"conversation_id\":\"c\",\"role\":\"user\",\"content\":\"a\"}\n{\"role\":\"robot\"}";
        let err = parse_messages(bad).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        let m = MessageInput {
            conversation_id: "bad id".into(),
            role: Role::User,
            content: "x".into(),
            ts: None,
            turn_id: None,
            speaker: None,
            metadata: None,
        };
        assert!(m.validate().is_err());
    }

    #[test]
    fn caps_are_typed_and_name_the_limit() {
        let mut m = MessageInput {
            conversation_id: "c".into(),
            role: Role::User,
            content: "x".repeat(limits::MAX_MESSAGE_BYTES + 1),
            ts: None,
            turn_id: None,
            speaker: None,
            metadata: None,
        };
        let err = m.validate().unwrap_err();
        assert!(matches!(err, IngestError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("32768"), "{err}");
        m.content = "x".into();
        m.metadata = Some(serde_json::json!({"k": "v".repeat(limits::MAX_METADATA_BYTES)}));
        assert!(matches!(m.validate(), Err(IngestError::TooLarge { .. })));
        m.metadata = Some(serde_json::json!({"k": "v"}));
        assert!(m.validate().is_ok());
    }
}
