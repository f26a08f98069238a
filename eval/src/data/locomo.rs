//! LoCoMo reader: samples (a conversation and its questions), their sessions, evidence ids,
//! and the messages a conversation is recorded as.
//!
//! Each turn `{speaker, dia_id, text}` becomes one message: conversation id = the sample id,
//! role `user`, `speaker` = the speaker's name, `ts` = the session's date plus one second per
//! turn (so turns keep their order), turn id = the `dia_id` sanitized (`D1:3` → `D1_3`), and
//! `{"dia_id", "session"}` as metadata. A turn that shares an image carries the dataset's
//! caption of it; the message text is then `text` followed by ` [shared an image: <caption>]`,
//! because the photo is part of what was said. No QA field (question, answer, evidence,
//! category) is ever part of a message.
//!
//! Malformed evidence entries are repaired where unambiguous (`D8:6; D9:17` → two ids,
//! `D:11:26` → `D11:26`) and dropped otherwise.

use std::path::Path;

use cairn_ingest::MessageInput;
use cairn_models::Role;
use serde::Deserialize;

use crate::{EvalError, Result};

/// One LoCoMo sample (a conversation and its questions).
#[derive(Debug, Clone, Deserialize)]
pub struct Sample {
    pub sample_id: String,
    pub conversation: serde_json::Map<String, serde_json::Value>,
    pub qa: Vec<Qa>,
}

/// One question. Only `question`, `evidence` and `category` are read.
#[derive(Debug, Clone, Deserialize)]
pub struct Qa {
    pub question: String,
    #[serde(default)]
    pub evidence: Vec<String>,
    pub category: u8,
}

/// One turn.
#[derive(Debug, Clone, Deserialize)]
pub struct Turn {
    pub speaker: String,
    pub dia_id: String,
    pub text: String,
    #[serde(default)]
    pub blip_caption: Option<String>,
}

/// One session of a conversation.
#[derive(Debug, Clone)]
pub struct Session {
    pub number: u32,
    /// Unix epoch milliseconds of the session's start.
    pub ts: i64,
    pub turns: Vec<Turn>,
}

/// Reads the samples of a LoCoMo JSON file.
pub fn read_samples(path: &Path) -> Result<Vec<Sample>> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EvalError::data(path, e.to_string()))
}

/// Parses a session date such as `1:56 pm on 8 May, 2023` (read as UTC).
pub fn parse_session_date(s: &str) -> Option<i64> {
    let norm = s.split_whitespace().collect::<Vec<_>>().join(" ");
    for fmt in ["%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(&norm, fmt) {
            return Some(t.and_utc().timestamp_millis());
        }
    }
    None
}

/// The sessions of a sample, in order.
pub fn sessions(sample: &Sample, path: &Path) -> Result<Vec<Session>> {
    let mut out = Vec::new();
    for (key, value) in &sample.conversation {
        let Some(n) = key
            .strip_prefix("session_")
            .and_then(|r| r.parse::<u32>().ok())
        else {
            continue;
        };
        let turns: Vec<Turn> = serde_json::from_value(value.clone())
            .map_err(|e| EvalError::data(path, format!("{} {key}: {e}", sample.sample_id)))?;
        let date_key = format!("session_{n}_date_time");
        let date = sample
            .conversation
            .get(&date_key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| {
                EvalError::data(path, format!("{}: {date_key} missing", sample.sample_id))
            })?;
        let ts = parse_session_date(date).ok_or_else(|| {
            EvalError::data(
                path,
                format!("{} {date_key}: unreadable date {date:?}", sample.sample_id),
            )
        })?;
        out.push(Session {
            number: n,
            ts,
            turns,
        });
    }
    out.sort_by_key(|s| s.number);
    Ok(out)
}

/// `D1:3` → `D1_3` (turn ids are `[A-Za-z0-9_.-]+`).
pub fn turn_id(dia_id: &str) -> String {
    dia_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Normalized evidence ids of a question (see the module docs).
pub fn evidence_ids(raw: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in raw {
        for part in entry.split([';', ',', ' ']).filter(|p| !p.is_empty()) {
            let digits: Vec<&str> = part
                .trim_start_matches('D')
                .split(':')
                .filter(|p| !p.is_empty())
                .collect();
            if part.starts_with('D')
                && digits.len() == 2
                && digits.iter().all(|d| d.chars().all(|c| c.is_ascii_digit()))
            {
                let id = format!("D{}:{}", digits[0], digits[1]);
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
    }
    out
}

/// The messages of one sample.
pub fn messages(sample: &Sample, sessions: &[Session]) -> Vec<Vec<MessageInput>> {
    sessions
        .iter()
        .map(|s| {
            s.turns
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let content = match &t.blip_caption {
                        Some(c) if !c.trim().is_empty() => {
                            format!("{} [shared an image: {}]", t.text, c.trim())
                        }
                        _ => t.text.clone(),
                    };
                    MessageInput {
                        conversation_id: sample.sample_id.clone(),
                        role: Role::User,
                        content,
                        ts: Some(cairn_ingest::Timestamp::Millis(s.ts + i as i64 * 1000)),
                        turn_id: Some(turn_id(&t.dia_id)),
                        speaker: Some(t.speaker.clone()),
                        metadata: Some(
                            serde_json::json!({"dia_id": t.dia_id, "session": s.number}),
                        ),
                    }
                })
                .filter(|m| !m.content.trim().is_empty())
                .collect()
        })
        .collect()
}

/// Category names.
pub fn category_name(c: u8) -> &'static str {
    match c {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse() {
        let t = parse_session_date("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(
            chrono::DateTime::from_timestamp_millis(t)
                .unwrap()
                .to_rfc3339(),
            "2023-05-08T13:56:00+00:00"
        );
        assert!(parse_session_date("10:37 am on 27 June, 2023").is_some());
        assert!(parse_session_date("yesterday").is_none());
    }

    #[test]
    fn evidence_is_repaired() {
        let raw = vec![
            "D8:6; D9:17".to_string(),
            "D".to_string(),
            "D:11:26".to_string(),
            "D1:3".to_string(),
            "D1:3".to_string(),
        ];
        assert_eq!(evidence_ids(&raw), vec!["D8:6", "D9:17", "D11:26", "D1:3"]);
        assert_eq!(turn_id("D1:3"), "D1_3");
    }

    #[test]
    fn sessions_and_messages() {
        let sample: Sample = serde_json::from_value(serde_json::json!({
            "sample_id": "conv-1",
            "conversation": {
                "speaker_a": "A", "speaker_b": "B",
                "session_2_date_time": "9:00 am on 2 May, 2023",
                "session_2": [{"speaker": "B", "dia_id": "D2:1", "text": "Later."}],
                "session_1_date_time": "8:00 pm on 1 May, 2023",
                "session_1": [
                    {"speaker": "A", "dia_id": "D1:1", "text": "Hi!"},
                    {"speaker": "B", "dia_id": "D1:2", "text": "Look", "blip_caption": "a dog"}
                ]
            },
            "qa": [{"question": "q?", "answer": "secret", "evidence": ["D1:1"], "category": 4}]
        }))
        .unwrap();
        let s = sessions(&sample, Path::new("x")).unwrap();
        assert_eq!(s.iter().map(|s| s.number).collect::<Vec<_>>(), vec![1, 2]);
        let m = messages(&sample, &s);
        assert_eq!(m[0][1].content, "Look [shared an image: a dog]");
        assert_eq!(m[0][1].turn_id.as_deref(), Some("D1_2"));
        assert!(m.iter().flatten().all(|m| !m.content.contains("secret")));
    }
}
