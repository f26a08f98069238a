//! [`Timestamp`]: the one way a time comes in over every door (HTTP, MCP, the CLI, message
//! files): Unix epoch milliseconds, or RFC 3339 text. Stored times are always epoch ms.

use serde::{Deserialize, Serialize};

use crate::ModelError;

/// A time as Unix epoch milliseconds (`1735689600000`) or RFC 3339 text
/// (`"2025-01-01T00:00:00Z"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum Timestamp {
    Millis(i64),
    Text(String),
}

impl Timestamp {
    /// Epoch milliseconds. Text that is not RFC 3339 is an error naming `field`.
    pub fn to_millis(&self, field: &'static str) -> Result<i64, ModelError> {
        match self {
            Timestamp::Millis(ms) => Ok(*ms),
            Timestamp::Text(s) => chrono::DateTime::parse_from_rfc3339(s.trim())
                .map(|d| d.timestamp_millis())
                .map_err(|e| ModelError::InvalidValue {
                    field,
                    reason: format!("{s:?} is not epoch milliseconds or RFC 3339 ({e})"),
                }),
        }
    }
}

/// Serde for an optional time kept as epoch milliseconds (a recall filter's `since`, a
/// proposed fact's validity) that a caller may send in either form, like every other time:
/// `#[serde(default, with = "cairn_models::time::opt_millis")]`. Text that is not RFC 3339
/// is refused when the request is parsed.
pub mod opt_millis {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Timestamp;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        match Option::<Timestamp>::deserialize(d)? {
            None => Ok(None),
            Some(t) => t
                .to_millis("time")
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }

    pub fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }
}

impl From<i64> for Timestamp {
    fn from(ms: i64) -> Self {
        Timestamp::Millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_read_the_same_instant() {
        let ms: Timestamp = serde_json::from_str("1735689600000").unwrap();
        let text: Timestamp = serde_json::from_str("\"2025-01-01T01:00:00+01:00\"").unwrap();
        assert_eq!(ms.to_millis("t").unwrap(), 1_735_689_600_000);
        assert_eq!(text.to_millis("t").unwrap(), 1_735_689_600_000);
        let bad = Timestamp::Text("yesterday".into());
        let e = bad.to_millis("valid_from").unwrap_err().to_string();
        assert!(e.contains("valid_from") && e.contains("yesterday"), "{e}");
        assert!(serde_json::from_str::<Timestamp>("true").is_err());
    }

    #[derive(Debug, serde::Deserialize, serde::Serialize)]
    struct Window {
        #[serde(default, with = "super::opt_millis")]
        since: Option<i64>,
    }

    #[test]
    fn optional_millis_take_both_forms_and_store_millis() {
        let text: Window = serde_json::from_str(r#"{"since": "2025-01-01T00:00:00Z"}"#).unwrap();
        let ms: Window = serde_json::from_str(r#"{"since": 1735689600000}"#).unwrap();
        let none: Window = serde_json::from_str("{}").unwrap();
        assert_eq!(text.since, Some(1_735_689_600_000));
        assert_eq!(ms.since, text.since);
        assert_eq!(none.since, None);
        assert_eq!(
            serde_json::to_string(&text).unwrap(),
            r#"{"since":1735689600000}"#
        );
        let bad = serde_json::from_str::<Window>(r#"{"since": "last week"}"#).unwrap_err();
        assert!(bad.to_string().contains("last week"), "{bad}");
    }
}
