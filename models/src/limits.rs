//! Caps on what a caller may store. They live here, below every crate that takes input,
//! so the HTTP handlers, the CLI and library callers all get the same rule.
//!
//! Fields copied onto many points (a document's metadata and source go onto every chunk)
//! are capped hard: without a cap, a large value multiplies by the chunk count (8 MiB of
//! metadata on a 2,000-word document once cost 84 MB on disk).

use crate::ModelError;

/// Largest serialized `metadata` of a document, message, turn, event or candidate (16 KiB).
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// Longest document `source` (its stable key), in bytes.
pub const MAX_SOURCE_BYTES: usize = 1024;
/// Longest message content, in bytes (32 KiB). Turn messages are messages too.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024;
/// Longest message `speaker`, in bytes (it is prepended to the embedded text).
pub const MAX_SPEAKER_BYTES: usize = 256;
/// Longest Markdown heading path carried on a chunk, in bytes (longer ones are cut). About
/// the 64 tokens chunk sizes leave free for it below the model's limit.
pub const MAX_HEADING_BYTES: usize = 256;
/// Longest recall query (and turn `user_message` at prepare), in bytes.
pub const MAX_QUERY_BYTES: usize = 8192;
/// Most messages in one `POST /v1/messages`.
pub const MAX_MESSAGES_PER_REQUEST: usize = 1000;
/// Most refs a completed turn may cite (`refers_to`).
pub const MAX_REFERS_TO: usize = 64;
/// Most values in one recall filter list (`trust`, `kinds`).
pub const MAX_FILTER_VALUES: usize = 16;
/// Most steps one `record_trace` call takes (a whole trace at once; longer traces are built
/// step by step).
pub const MAX_TRACE_STEPS: usize = 100;
/// Most tool calls of one step in a `record_trace` call.
pub const MAX_STEP_TOOL_CALLS: usize = 100;

/// A value over one of the caps above. Both variants name the field and the limit, so a
/// caller knows what to change without reading the docs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A field is larger than its byte limit.
    #[error("{field} is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        field: String,
        size: usize,
        limit: usize,
    },
    /// A list holds more items than allowed.
    #[error("{field} holds {count} items; the limit is {limit}")]
    TooMany {
        field: String,
        count: usize,
        limit: usize,
    },
}

impl From<LimitError> for ModelError {
    fn from(e: LimitError) -> Self {
        ModelError::InvalidValue {
            field: "limit",
            reason: e.to_string(),
        }
    }
}

/// Checks a text field against its byte limit.
pub fn check_bytes(field: impl Into<String>, value: &str, limit: usize) -> Result<(), LimitError> {
    if value.len() > limit {
        return Err(LimitError::TooLarge {
            field: field.into(),
            size: value.len(),
            limit,
        });
    }
    Ok(())
}

/// Checks a list's length.
pub fn check_count(field: impl Into<String>, count: usize, limit: usize) -> Result<(), LimitError> {
    if count > limit {
        return Err(LimitError::TooMany {
            field: field.into(),
            count,
            limit,
        });
    }
    Ok(())
}

/// Checks `metadata` against [`MAX_METADATA_BYTES`] (its compact JSON serialization, the
/// size it is stored at).
pub fn check_metadata(
    field: impl Into<String>,
    metadata: Option<&serde_json::Value>,
) -> Result<(), LimitError> {
    let Some(value) = metadata else {
        return Ok(());
    };
    let size = serialized_len(value);
    if size > MAX_METADATA_BYTES {
        return Err(LimitError::TooLarge {
            field: field.into(),
            size,
            limit: MAX_METADATA_BYTES,
        });
    }
    Ok(())
}

/// Length of the compact JSON serialization, without building the string.
fn serialized_len(value: &serde_json::Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing to a counter cannot fail; a failure would only undercount, and every
    // serializable value is serializable here.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// `value` as canonical JSON: object keys sorted (by their UTF-8 bytes) at every depth, no
/// insignificant whitespace. Two documents that differ only in key order or formatting have
/// the same canonical form, so digests over it do not depend on how a client serialized.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": "é"}}"#)
                .unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"x":"é","y":[1,{"c":3,"d":2}]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"x":"é","y":[1,{"c":3,"d":2}]},"b":1}"#
        );
    }

    #[test]
    fn caps_name_the_limit() {
        let big = serde_json::json!({"k": "x".repeat(MAX_METADATA_BYTES)});
        let err = check_metadata("metadata", Some(&big)).unwrap_err();
        assert!(err.to_string().contains("16384"), "{err}");
        assert!(check_metadata("metadata", Some(&serde_json::json!({"k": 1}))).is_ok());
        assert!(check_bytes("source", &"s".repeat(1025), MAX_SOURCE_BYTES).is_err());
        assert!(check_count("messages", 1001, MAX_MESSAGES_PER_REQUEST).is_err());
        assert!(check_count("messages", 1000, MAX_MESSAGES_PER_REQUEST).is_ok());
    }
}
