//! References to stored evidence and what derives from it, as callers write them:
//! `doc:<id>`, `doc:<id>#<chunk>`, `msg:<conversation>/<seq>`, `conv:<conversation>`,
//! `turn:<turn id>`, `evt:<id>`, `cand:<id>`, `mem:<id>`.

use std::fmt;

use cairn_models::scope::validate_component;

use crate::error::ApiError;

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Ref {
    /// A document (any chunk of it names the whole document when forgetting).
    Doc { doc_id: String, chunk: Option<u32> },
    /// One conversation message.
    Msg { conversation: String, seq: u64 },
    /// A whole conversation.
    Conv(String),
    /// Both messages of an agent turn.
    Turn(String),
    /// A third-party event.
    Evt(String),
    /// A candidate memory.
    Cand(String),
    /// An approved memory (same id as its candidate).
    Mem(String),
}

fn id(field: &'static str, value: &str) -> Result<String, ApiError> {
    validate_component(field, value)?;
    Ok(value.to_string())
}

impl Ref {
    /// Parses a reference; errors are `invalid_request` and name the expected forms.
    pub fn parse(s: &str) -> Result<Ref, ApiError> {
        let bad = || {
            ApiError::InvalidRequest(format!(
                "invalid ref {s:?}: expected doc:<id>[#<chunk>], msg:<conversation>/<seq>, \
                 conv:<id>, turn:<id>, evt:<id>, cand:<id> or mem:<id>"
            ))
        };
        let (kind, rest) = s.split_once(':').ok_or_else(bad)?;
        Ok(match kind {
            "doc" => match rest.split_once('#') {
                Some((d, c)) => Ref::Doc {
                    doc_id: id("doc_id", d)?,
                    chunk: Some(c.parse().map_err(|_| bad())?),
                },
                None => Ref::Doc {
                    doc_id: id("doc_id", rest)?,
                    chunk: None,
                },
            },
            "msg" => {
                let (c, seq) = rest.rsplit_once('/').ok_or_else(bad)?;
                Ref::Msg {
                    conversation: id("conversation_id", c)?,
                    seq: seq.parse().map_err(|_| bad())?,
                }
            }
            "conv" => Ref::Conv(id("conversation_id", rest)?),
            "turn" => Ref::Turn(id("turn_id", rest)?),
            "evt" => Ref::Evt(id("event_id", rest)?),
            "cand" => Ref::Cand(id("candidate_id", rest)?),
            "mem" => Ref::Mem(id("memory_id", rest)?),
            _ => return Err(bad()),
        })
    }

    /// Whether a candidate may cite this as evidence (documents, messages, events).
    pub fn is_evidence(&self) -> bool {
        matches!(self, Ref::Doc { .. } | Ref::Msg { .. } | Ref::Evt(_))
    }
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ref::Doc {
                doc_id,
                chunk: Some(c),
            } => write!(f, "doc:{doc_id}#{c}"),
            Ref::Doc {
                doc_id,
                chunk: None,
            } => write!(f, "doc:{doc_id}"),
            Ref::Msg { conversation, seq } => write!(f, "msg:{conversation}/{seq}"),
            Ref::Conv(c) => write!(f, "conv:{c}"),
            Ref::Turn(t) => write!(f, "turn:{t}"),
            Ref::Evt(e) => write!(f, "evt:{e}"),
            Ref::Cand(c) => write!(f, "cand:{c}"),
            Ref::Mem(m) => write!(f, "mem:{m}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_every_form() {
        for s in [
            "doc:0123abcd",
            "doc:0123abcd#7",
            "msg:c-1/12",
            "conv:s1",
            "turn:t.1",
            "evt:e1",
            "cand:abc",
            "mem:abc",
        ] {
            assert_eq!(Ref::parse(s).unwrap().to_string(), s);
        }
        for bad in [
            "doc:",
            "doc:a#x",
            "msg:c",
            "msg:c/x",
            "msg:a b/1",
            "x:1",
            "nocolon",
        ] {
            assert!(Ref::parse(bad).is_err(), "{bad}");
        }
        assert!(Ref::parse("evt:e").unwrap().is_evidence());
        assert!(!Ref::parse("conv:c").unwrap().is_evidence());
    }
}
