//! Content-addressed identifiers. Every id here is a pure function of its inputs, so a
//! replayed write lands on the same point and is idempotent.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::{Partition, Role, Scope};

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
