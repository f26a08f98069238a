//! System state of stored records, typed per kind.
//!
//! A [`StoredPoint`](crate::StoredPoint) has a flat header (scope, kind, ids, timestamps,
//! trust, provenance: every field a filter or payload index uses) and, for the records
//! Cairn keeps about its own work, a typed [`RecordState`] in its `state` field: a candidate's
//! review, an approved memory's candidate, a turn's receipt and tombstone, the links of a
//! turn's messages, a forget's receipt. The caller's `metadata` holds only what the caller
//! sent.
//!
//! Data directories written before this field existed kept that state inside `metadata`;
//! [`RecordState::upgrade_legacy`] reads the old layout, so they open and behave as before
//! (the store applies it to every point it reads).

use serde::{Deserialize, Serialize};

use crate::pack::TurnMode;
use crate::record::{DocumentInfo, PointKind, StoredPoint};
use crate::refs::Ref;

/// What Cairn keeps about a record, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordState {
    /// A candidate memory's review (`PointKind::Candidate`).
    Candidate(CandidateState),
    /// An approved memory's origin (`PointKind::Memory`).
    Memory(MemoryState),
    /// A completed turn (`PointKind::Turn`).
    Turn(TurnState),
    /// A message recorded by a turn completion: the turn's links.
    TurnMessage(TurnLinks),
    /// A forget's receipt (`PointKind::Forget`).
    Forget(ForgetState),
    /// An agent grant (`PointKind::Grant`).
    Grant(crate::grant::GrantState),
    /// A knowledge entity (`PointKind::Entity`).
    Entity(crate::knowledge::Entity),
    /// A preference (`PointKind::Preference`).
    Preference(crate::knowledge::Preference),
    /// A fact (`PointKind::Fact`).
    Fact(crate::knowledge::Fact),
    /// A relationship (`PointKind::Relationship`).
    Relationship(crate::knowledge::Relationship),
    /// A predicate declaration (`PointKind::Predicate`).
    Predicate(crate::knowledge::Predicate),
    /// A reasoning trace (`PointKind::Trace`).
    Trace(crate::knowledge::Trace),
    /// A step of a trace (`PointKind::Step`).
    Step(crate::knowledge::Step),
    /// A tool call of a step (`PointKind::ToolCall`).
    ToolCall(crate::knowledge::ToolCall),
}

/// Review status of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CandidateStatus {
    /// Proposed, not decided: never recalled.
    Pending,
    /// Approved: recalled as a memory with trust origin `third_party_agent`.
    Approved,
    /// Rejected: never recalled.
    Rejected,
    /// Its evidence was forgotten: never recalled, cannot be decided.
    Invalidated,
}

impl CandidateStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateStatus::Pending => "pending",
            CandidateStatus::Approved => "approved",
            CandidateStatus::Rejected => "rejected",
            CandidateStatus::Invalidated => "invalidated",
        }
    }
}

/// A candidate's review state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateState {
    pub status: CandidateStatus,
    pub source_agent: String,
    pub memory_type: String,
    /// The evidence it cites (`doc:`, `msg:`, `evt:`), canonical and sorted.
    pub evidence_refs: Vec<Ref>,
    pub confidence: f64,
    #[serde(default)]
    pub decided_at: Option<i64>,
    #[serde(default)]
    pub note: Option<String>,
    /// The forgotten refs that invalidated or narrowed it.
    #[serde(default)]
    pub invalidated_by: Vec<Ref>,
    /// The structured knowledge it proposes, written when it is approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<crate::knowledge::ProposedKnowledge>,
    /// The record its approval wrote (`fact:`, `pref:`, `ent:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge_ref: Option<Ref>,
}

/// An approved memory's origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryState {
    pub candidate_id: String,
    pub memory_type: String,
    pub confidence: f64,
    pub evidence_refs: Vec<Ref>,
}

/// A completed turn: the receipt `complete` answered (replayed verbatim), the refs the turn
/// refers to, and whether its messages were deleted (a tombstone: the id stays used).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnState {
    pub receipt: TurnReceipt,
    #[serde(default)]
    pub refers_to: Vec<Ref>,
    #[serde(default)]
    pub deleted: bool,
    #[serde(default)]
    pub deleted_at: Option<i64>,
}

/// What `complete` returns; identical for every replay of the same completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnReceipt {
    pub turn_id: String,
    pub user_message_ref: String,
    pub assistant_message_ref: String,
    /// RFC 3339.
    pub stored_at: String,
    /// sha256 of the completion's content as canonical JSON (keys sorted, no whitespace).
    pub digest: String,
}

/// The links of a message recorded by a turn completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnLinks {
    /// The conversation (`conv:<session>`).
    pub part_of: Ref,
    /// What `prepare` selected for the turn and what the caller cited.
    #[serde(default)]
    pub refers_to: Vec<Ref>,
    #[serde(default)]
    pub mode: TurnMode,
    #[serde(default)]
    pub source: Option<String>,
}

/// A forget's receipt: its report so far and the documents it deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForgetState {
    pub report: ForgetReport,
    #[serde(default)]
    pub documents: Vec<DocumentInfo>,
}

/// What a forget removed and invalidated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForgetReport {
    /// The ref that was forgotten.
    #[serde(rename = "ref")]
    pub reference: String,
    pub hard: bool,
    /// Refs removed from the store (`doc:<id>` and each `doc:<id>#<n>`, `msg:<c>/<seq>`,
    /// `evt:<id>`, `mem:<id>`, or the forgotten `ent:`, `pref:`, `fact:`, `rel:`, `trace:`).
    pub removed: Vec<String>,
    /// Candidates (`cand:<id>`) and facts (`fact:<id>`) invalidated because all their
    /// evidence was forgotten; they no longer appear in recall.
    pub invalidated: Vec<String>,
    /// Candidates and facts that lost some evidence refs but keep others.
    pub narrowed: Vec<String>,
    /// Completed turns whose messages were deleted (`turn:<id>`); their ids stay used.
    pub tombstoned_turns: Vec<String>,
}

impl RecordState {
    /// Reads the state a point written by an older Cairn kept in `metadata`, moving it to
    /// `state` and leaving in `metadata` only what the caller sent. Points that already have
    /// a state, and points whose metadata is the caller's own, are returned unchanged. Old
    /// metadata that does not parse is left where it is (the reader then reports the record
    /// as corrupt rather than guessing).
    pub fn upgrade_legacy(mut point: StoredPoint) -> StoredPoint {
        if point.state.is_some() {
            return point;
        }
        let Some(meta) = point.metadata.as_ref() else {
            return point;
        };
        fn from<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Option<T> {
            serde_json::from_value(v.clone()).ok()
        }
        let upgraded: Option<(RecordState, Option<serde_json::Value>)> = match point.kind {
            PointKind::Candidate => {
                #[derive(Deserialize)]
                struct Legacy {
                    #[serde(flatten)]
                    state: CandidateState,
                    #[serde(default)]
                    metadata: Option<serde_json::Value>,
                }
                from(meta).map(|l: Legacy| (RecordState::Candidate(l.state), l.metadata))
            }
            PointKind::Memory => from(meta).map(|m| (RecordState::Memory(m), None)),
            PointKind::Turn => from(meta).map(|t| (RecordState::Turn(t), None)),
            PointKind::Forget => from(meta).map(|f| (RecordState::Forget(f), None)),
            PointKind::Message if point.turn_id.is_some() && meta.get("part_of").is_some() => {
                // `part_of` was written as `conversation:<session>`.
                let mut m = meta.clone();
                if let Some(p) = m.get("part_of").and_then(|v| v.as_str()) {
                    let conv = p.strip_prefix("conversation:").unwrap_or(p);
                    m["part_of"] = serde_json::json!(format!("conv:{conv}"));
                }
                let caller = m.get("metadata").cloned().filter(|v| !v.is_null());
                from(&m).map(|l| (RecordState::TurnMessage(l), caller))
            }
            _ => None,
        };
        if let Some((state, metadata)) = upgraded {
            point.state = Some(state);
            point.metadata = metadata;
        }
        point
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Scope, TrustOrigin};

    fn point(kind: PointKind, meta: serde_json::Value) -> StoredPoint {
        let scope = Scope::new("t", "u", "n", "a", "s").unwrap();
        let mut p = StoredPoint::new(kind, &scope, TrustOrigin::System, 0);
        p.metadata = Some(meta);
        p
    }

    #[test]
    fn legacy_candidate_state_moves_out_of_metadata() {
        let p = point(
            PointKind::Candidate,
            serde_json::json!({
                "status": "approved", "source_agent": "scout", "memory_type": "fact",
                "evidence_refs": ["doc:abc"], "confidence": 0.5, "decided_at": 7,
                "note": null, "invalidated_by": [], "metadata": {"k": "v"}
            }),
        );
        let p = RecordState::upgrade_legacy(p);
        let Some(RecordState::Candidate(c)) = &p.state else {
            panic!("{p:?}")
        };
        assert_eq!(c.status, CandidateStatus::Approved);
        assert_eq!(c.evidence_refs, vec![Ref::doc("abc")]);
        assert_eq!(p.metadata, Some(serde_json::json!({"k": "v"})));
    }

    #[test]
    fn legacy_turn_records_and_messages() {
        let receipt = serde_json::json!({"turn_id": "t1", "user_message_ref": "msg:s/0",
            "assistant_message_ref": "msg:s/1", "stored_at": "x", "digest": "d"});
        let mut t = point(
            PointKind::Turn,
            serde_json::json!({"receipt": receipt, "refers_to": ["doc:a#0"], "deleted": true}),
        );
        t.turn_id = Some("t1".into());
        let t = RecordState::upgrade_legacy(t);
        assert!(
            matches!(&t.state, Some(RecordState::Turn(s)) if s.deleted && s.receipt.turn_id == "t1")
        );
        assert_eq!(t.metadata, None);

        let mut m = point(
            PointKind::Message,
            serde_json::json!({"part_of": "conversation:s", "refers_to": ["doc:a#0"],
                "mode": "text", "source": null, "metadata": {"caller": 1}}),
        );
        m.turn_id = Some("t1".into());
        let m = RecordState::upgrade_legacy(m);
        let Some(RecordState::TurnMessage(l)) = &m.state else {
            panic!("{m:?}")
        };
        assert_eq!(l.part_of, Ref::Conv("s".into()));
        assert_eq!(m.metadata, Some(serde_json::json!({"caller": 1})));

        // A plain message's metadata is the caller's: untouched.
        let plain = point(PointKind::Message, serde_json::json!({"part_of": "mine"}));
        assert_eq!(RecordState::upgrade_legacy(plain.clone()), plain);
    }

    #[test]
    fn state_round_trips_tagged() {
        let s = RecordState::Memory(MemoryState {
            candidate_id: "c".into(),
            memory_type: "fact".into(),
            confidence: 1.0,
            evidence_refs: vec![Ref::evt("e")],
        });
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["kind"], "memory");
        assert_eq!(serde_json::from_value::<RecordState>(v).unwrap(), s);
    }
}
