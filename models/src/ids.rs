//! Content-addressed identifiers. Every id here is a pure function of its inputs, so a
//! replayed write lands on the same point and is idempotent.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{Partition, Ref, Role, Scope};

/// Namespace for Cairn's UUIDv5 point ids (a fixed random UUID; never change it, or every
/// stored id changes).
pub const CAIRN_NAMESPACE: Uuid = Uuid::from_u128(0x6a1f_3c2e_9b4d_4e8a_a7c1_52d0_e8f3_b961);

/// Normalizes text before hashing so that insignificant differences (line endings, trailing
/// spaces, a missing final newline) do not create a new document version.
pub fn normalize_content(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.replace("\r\n", "\n").replace('\r', "\n").lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.trim_matches('\n').to_string()
}

/// Hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Document id: the first 32 hex characters (128 bits) of sha256 of the normalized content.
pub fn document_id(text: &str) -> String {
    sha256_hex(normalize_content(text).as_bytes())[..32].to_string()
}

/// Point id of chunk `index` of document `doc_id` ingested from `source` in `partition`.
///
/// The source is part of the key: two sources with the same content keep separate chunks
/// (and separate citations), and retiring one never removes the other's.
pub fn chunk_point_id(partition: &Partition, source: &str, doc_id: &str, index: u32) -> Uuid {
    Uuid::new_v5(
        &CAIRN_NAMESPACE,
        format!("chunk\0{}\0{source}\0{doc_id}\0{index}", partition.key()).as_bytes(),
    )
}

/// Point id of the registry record of `source` in `partition` (one per source; it names the
/// current version and is the commit point of an ingest).
pub fn document_record_id(partition: &Partition, source: &str) -> Uuid {
    Uuid::new_v5(
        &CAIRN_NAMESPACE,
        format!("doc\0{}\0{source}", partition.key()).as_bytes(),
    )
}

/// Point id of one message: the full scope, the conversation, the message key (the turn id
/// for agent turns) and the role. A replayed turn collapses onto the same points.
pub fn message_point_id(scope: &Scope, conversation: &str, message_key: &str, role: Role) -> Uuid {
    Uuid::new_v5(
        &CAIRN_NAMESPACE,
        format!(
            "msg\0{}\0{conversation}\0{message_key}\0{}",
            scope.key(),
            role.as_str()
        )
        .as_bytes(),
    )
}

/// Point id of the record of a conversation in `partition` (its sequence high-water mark).
pub fn conversation_record_id(partition: &Partition, conversation: &str) -> Uuid {
    Uuid::new_v5(
        &CAIRN_NAMESPACE,
        format!("conv\0{}\0{conversation}", partition.key()).as_bytes(),
    )
}

/// Point id of the record of a completed turn (the turn's receipt, keyed by the full scope).
pub fn turn_record_id(scope: &Scope, turn_id: &str) -> Uuid {
    Uuid::new_v5(
        &CAIRN_NAMESPACE,
        format!("turn\0{}\0{turn_id}", scope.key()).as_bytes(),
    )
}

/// The key of a message inside its conversation: part of [`message_point_id`]. Printed
/// (`Display`) as the text the id hashes; these texts must never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKey<'a> {
    /// A caller-given message id: `id:<id>`.
    Id(&'a str),
    /// A message of an agent turn, keyed by the turn id (and, in the point id, its role):
    /// `turn:<turn id>`. Not a `turn:` ref, although it is spelled like one.
    Turn(&'a str),
    /// A fresh random key, so the message is recorded as new every time: `new:<uuid>`.
    New(Uuid),
    /// By content: the [`message_content_digest`] and the occurrence number (1-based) of
    /// identical messages in one batch: `hash:<first 32 hex of digest>:<n>`.
    Content { digest: &'a str, occurrence: u32 },
}

impl std::fmt::Display for MessageKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MessageKey::Id(id) => write!(f, "id:{id}"),
            MessageKey::Turn(t) => write!(f, "turn:{t}"),
            MessageKey::New(u) => write!(f, "new:{}", u.simple()),
            MessageKey::Content { digest, occurrence } => {
                let short = digest.get(..32).unwrap_or(digest);
                write!(f, "hash:{short}:{occurrence}")
            }
        }
    }
}

/// Hex sha256 over a key-less message's role, content and timestamp text (empty without
/// one; the ingest layer writes its timestamp as it always has): the content key of
/// [`MessageKey::Content`].
pub fn message_content_digest(role: Role, content: &str, ts: &str) -> String {
    sha256_hex(format!("{}\0{content}\0{ts}", role.as_str()).as_bytes())
}

/// Point id of a record of `kind` with caller-visible id `id` in `partition`.
fn record_point_id(kind: &str, partition: &Partition, id: &str) -> Uuid {
    Uuid::new_v5(
        &CAIRN_NAMESPACE,
        format!("{kind}\0{}\0{id}", partition.key()).as_bytes(),
    )
}

/// Point id of the grant of `agent` (in the user's grants namespace).
pub fn grant_record_id(partition: &Partition, agent: &str) -> Uuid {
    record_point_id("grant", partition, agent)
}

/// Point id of the event `evt:<event_id>` in `partition`.
pub fn event_record_id(partition: &Partition, event_id: &str) -> Uuid {
    record_point_id("event", partition, event_id)
}

/// Point id of the record of candidate `cand:<candidate_id>` in `partition`.
pub fn candidate_record_id(partition: &Partition, candidate_id: &str) -> Uuid {
    record_point_id("candidate", partition, candidate_id)
}

/// Point id of the searchable memory `mem:<candidate_id>` of an approved candidate.
pub fn memory_point_id(partition: &Partition, candidate_id: &str) -> Uuid {
    record_point_id("memory", partition, candidate_id)
}

/// Id (and point id) of the entity named `name` (normalized) of type `entity_type` in
/// `partition`: the same entity written twice is one record.
pub fn entity_id(partition: &Partition, name: &str, entity_type: &str) -> Uuid {
    record_point_id(
        "entity",
        partition,
        &format!("{}\0{entity_type}", crate::knowledge::normalize_name(name)),
    )
}

/// Id of a preference: its category and text (normalized).
pub fn preference_id(partition: &Partition, category: &str, preference: &str) -> Uuid {
    record_point_id(
        "preference",
        partition,
        &format!(
            "{}\0{}",
            crate::knowledge::normalize_name(category),
            crate::knowledge::normalize_name(preference)
        ),
    )
}

/// Id of a fact: its triple (subject and object normalized, the predicate canonical) and
/// the start of its validity.
pub fn fact_id(
    partition: &Partition,
    subject: &str,
    predicate: &str,
    object: &str,
    valid_from: Option<i64>,
) -> Uuid {
    use crate::knowledge::{normalize_name, normalize_predicate};
    record_point_id(
        "fact",
        partition,
        &format!(
            "{}\0{}\0{}\0{}",
            normalize_name(subject),
            normalize_predicate(predicate),
            normalize_name(object),
            valid_from.map(|v| v.to_string()).unwrap_or_default()
        ),
    )
}

/// Id of the relationship `source -[type]-> target` (the type canonical).
pub fn relationship_id(partition: &Partition, source: &str, rel_type: &str, target: &str) -> Uuid {
    record_point_id(
        "relationship",
        partition,
        &format!(
            "{source}\0{}\0{target}",
            crate::knowledge::normalize_predicate(rel_type)
        ),
    )
}

/// Point id of the declaration of predicate `name` (canonical).
pub fn predicate_record_id(partition: &Partition, name: &str) -> Uuid {
    record_point_id("predicate", partition, name)
}

/// Id of a trace the caller named with its own key.
pub fn trace_id(partition: &Partition, key: &str) -> Uuid {
    record_point_id("trace", partition, key)
}

/// Id of step `n` of a trace.
pub fn step_id(partition: &Partition, trace_id: &str, n: u32) -> Uuid {
    record_point_id("step", partition, &format!("{trace_id}\0{n}"))
}

/// Id of tool call `n` of a step.
pub fn tool_call_id(partition: &Partition, step_id: &str, n: u32) -> Uuid {
    record_point_id("tool_call", partition, &format!("{step_id}\0{n}"))
}

/// Point id of the receipt of a forget of `forgotten` in `partition` (keyed by the ref as
/// printed, so `doc:<id>` and `doc:<id>#<n>` have separate receipts).
pub fn forget_receipt_id(partition: &Partition, forgotten: &Ref) -> Uuid {
    record_point_id("forget", partition, &forgotten.to_string())
}

/// Caller-visible id of an event (the `<id>` of `evt:<id>`): 32 hex characters of sha256
/// over the partition, the posting agent, the normalized content and the event time (epoch
/// ms; empty without one), so the same event posted again lands on the same record.
pub fn event_id(
    partition: &Partition,
    source_agent: &str,
    content: &str,
    ts: Option<i64>,
) -> String {
    sha256_hex(
        format!(
            "evt\0{}\0{source_agent}\0{}\0{}",
            partition.key(),
            normalize_content(content),
            ts.map(|t| t.to_string()).unwrap_or_default()
        )
        .as_bytes(),
    )[..32]
        .to_string()
}

/// Caller-visible id of a candidate memory (the `<id>` of `cand:<id>` and `mem:<id>`): 32
/// hex characters of sha256 over the partition, the proposing agent, the memory type, the
/// normalized content and the evidence refs in the order given (callers pass them sorted
/// by their printed form and deduplicated).
pub fn candidate_id(
    partition: &Partition,
    source_agent: &str,
    memory_type: &str,
    content: &str,
    evidence: &[Ref],
) -> String {
    let evidence: Vec<String> = evidence.iter().map(ToString::to_string).collect();
    sha256_hex(
        format!(
            "cand\0{}\0{source_agent}\0{memory_type}\0{}\0{}",
            partition.key(),
            normalize_content(content),
            evidence.join("\0")
        )
        .as_bytes(),
    )[..32]
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(t: &str) -> Partition {
        Partition {
            tenant: t.into(),
            user: "u".into(),
            namespace: "n".into(),
        }
    }

    fn acme() -> Partition {
        Partition {
            tenant: "acme".into(),
            user: "u1".into(),
            namespace: "ns".into(),
        }
    }

    fn acme_scope() -> Scope {
        Scope {
            tenant: "acme".into(),
            user: "u1".into(),
            namespace: "ns".into(),
            agent: "a1".into(),
            session: "s1".into(),
        }
    }

    fn uuid(s: &str) -> Uuid {
        Uuid::parse_str(s).unwrap()
    }

    /// Stored data stays addressable only if every id is what it always was: these values
    /// were computed from the code before the ids moved here (and independently from the
    /// key texts with Python's `uuid.uuid5` / `hashlib.sha256`). Never update them.
    #[test]
    fn ids_are_stable() {
        let p = acme();
        let doc = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            document_id("hello\nworld"),
            "26c60a61d01db5836ca70fefd44a6a01"
        );
        assert_eq!(
            chunk_point_id(&p, "notes/a.md", doc, 3),
            uuid("03b8091c-4dbc-58bc-95bf-21ae5f730f00")
        );
        assert_eq!(
            document_record_id(&p, "notes/a.md"),
            uuid("faa47b34-a004-562a-a6f6-0f9bba54be69")
        );
        assert_eq!(
            message_point_id(
                &acme_scope(),
                "c1",
                &MessageKey::Turn("t1").to_string(),
                Role::User
            ),
            uuid("cb0177fe-473a-579e-bffd-89810408f3f7")
        );
        assert_eq!(
            conversation_record_id(&p, "c1"),
            uuid("c87130f9-2cc2-557f-aa6e-555a8af2c91e")
        );
        assert_eq!(
            turn_record_id(&acme_scope(), "t1"),
            uuid("ae9fe443-a77b-5a72-9fdd-9d0e2b2d116c")
        );
        assert_eq!(
            event_record_id(&p, "e1"),
            uuid("04d2ea9a-db0f-5da3-928f-38bf06fd5ff1")
        );
        assert_eq!(
            candidate_record_id(&p, "e1"),
            uuid("d9d223db-0e5c-5fd5-8577-56b2b88a711a")
        );
        assert_eq!(
            memory_point_id(&p, "e1"),
            uuid("436ad19b-ac11-598f-99ca-799ed2bd14c4")
        );
        assert_eq!(
            forget_receipt_id(&p, &Ref::doc("abc")),
            uuid("0ec4b000-2f6d-596a-92a6-5020316a8e60")
        );
        assert_eq!(
            forget_receipt_id(&p, &Ref::msg("c1", 2)),
            uuid("de9ab577-982b-5223-a20a-a96614688be9")
        );
        assert_eq!(
            event_id(&p, "agentx", "the deploy failed", Some(1_714_557_600_000)),
            "7c4e99b25ddba513d721a8079e857aae"
        );
        assert_eq!(
            event_id(&p, "agentx", "the deploy failed", None),
            "039d35f20122e42801ecc280ca548594"
        );
        let evidence = [Ref::chunk("abc", 0), Ref::evt("e1"), Ref::msg("c1", 2)];
        assert_eq!(
            candidate_id(&p, "agentx", "fact", "the deploy failed", &evidence),
            "3e64a5161461723157edc1489277ef93"
        );
        let digest = message_content_digest(Role::User, "hi", "Millis(5)");
        assert_eq!(
            digest,
            "20515520b9fae2e94392fd7081cfac3e12f24f7544fef1d1bd9515f38f4433e0"
        );
    }

    #[test]
    fn message_keys_print_as_before() {
        assert_eq!(MessageKey::Id("m1").to_string(), "id:m1");
        assert_eq!(MessageKey::Turn("t1").to_string(), "turn:t1");
        let u = uuid("0ec4b000-2f6d-596a-92a6-5020316a8e60");
        assert_eq!(
            MessageKey::New(u).to_string(),
            "new:0ec4b0002f6d596a92a65020316a8e60"
        );
        let digest = message_content_digest(Role::User, "hi", "Millis(5)");
        assert_eq!(
            MessageKey::Content {
                digest: &digest,
                occurrence: 2
            }
            .to_string(),
            "hash:20515520b9fae2e94392fd7081cfac3e:2"
        );
    }

    #[test]
    fn record_ids_depend_on_kind_partition_and_id() {
        let p = acme();
        let ids = [
            event_record_id(&p, "x"),
            candidate_record_id(&p, "x"),
            memory_point_id(&p, "x"),
            forget_receipt_id(&p, &Ref::evt("x")),
            event_record_id(&p, "y"),
            event_record_id(&part("t"), "x"),
        ];
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }

    #[test]
    fn normalization_ignores_line_endings_and_trailing_space() {
        assert_eq!(document_id("a  \r\nb\n\n"), document_id("a\nb"));
        assert_ne!(document_id("a\nb"), document_id("a\nc"));
        assert_eq!(document_id("x").len(), 32);
    }

    #[test]
    fn point_ids_depend_on_every_part() {
        let a = chunk_point_id(&part("t1"), "s", "d", 0);
        assert_eq!(a, chunk_point_id(&part("t1"), "s", "d", 0));
        assert_ne!(a, chunk_point_id(&part("t2"), "s", "d", 0));
        assert_ne!(a, chunk_point_id(&part("t1"), "s2", "d", 0));
        assert_ne!(a, chunk_point_id(&part("t1"), "s", "d", 1));
        let s = Scope::default();
        assert_ne!(
            message_point_id(&s, "c", "t1", Role::User),
            message_point_id(&s, "c", "t1", Role::Assistant)
        );
    }

    proptest::proptest! {
        #[test]
        fn ids_are_stable_and_injective_in_index(src in "[a-z/._-]{1,20}", i in 0u32..10_000, j in 0u32..10_000) {
            let p = part("t");
            let d = document_id(&src);
            proptest::prop_assert_eq!(chunk_point_id(&p, &src, &d, i), chunk_point_id(&p, &src, &d, i));
            if i != j {
                proptest::prop_assert_ne!(chunk_point_id(&p, &src, &d, i), chunk_point_id(&p, &src, &d, j));
            }
        }

        #[test]
        fn normalization_is_idempotent(s in "(?s).{0,200}") {
            let once = normalize_content(&s);
            proptest::prop_assert_eq!(normalize_content(&once), once.clone());
        }
    }
}
