//! Agent grants: what an agent identity may do in one (tenant, user).
//!
//! A grant is a stored record per (tenant, user, agent): a set of [`Operation`]s, a
//! [`GrantStatus`] with its history (who changed it, when), and the sha256 of the agent's own
//! key. Agents authenticate with that key (`Authorization: Bearer cak:<tenant>:<user>:<agent>:<secret>`);
//! the service reads the grant on every call, so a suspension or revocation applies to the
//! very next request, retries included. A grant may also pin an Ed25519 key (RFC 7638
//! thumbprint): then the agent's requests must be signed (RFC 9421), the bearer alone is
//! not enough.

use serde::{Deserialize, Serialize};

/// Something a caller may do. Each names the memory kind it touches, so a grant is a set of
/// (operation × kind) pairs written as one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Recall a MemoryPack, prepare a turn.
    Recall,
    /// List and read stored records: documents, conversations, events, candidates.
    Read,
    /// Store documents (text, Markdown, PDF).
    WriteDocuments,
    /// Record conversation messages.
    WriteMessages,
    /// Complete agent turns (agent-turn-v1).
    CompleteTurn,
    /// Post third-party events and propose candidate memories.
    Propose,
    /// Approve or reject candidates.
    DecideCandidates,
    /// Forget evidence and what derives from it.
    Forget,
    /// Store entities, preferences, facts and relationships; merge entities; declare
    /// predicates.
    WriteKnowledge,
    /// Record reasoning traces, their steps and tool calls.
    WriteTraces,
    /// Create, suspend, revoke and restore grants (never granted to an agent).
    ManageGrants,
}

impl Operation {
    /// Every operation an agent can be granted.
    pub const GRANTABLE: [Operation; 10] = [
        Operation::Recall,
        Operation::Read,
        Operation::WriteDocuments,
        Operation::WriteMessages,
        Operation::CompleteTurn,
        Operation::Propose,
        Operation::DecideCandidates,
        Operation::Forget,
        Operation::WriteKnowledge,
        Operation::WriteTraces,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Recall => "recall",
            Operation::Read => "read",
            Operation::WriteDocuments => "write_documents",
            Operation::WriteMessages => "write_messages",
            Operation::CompleteTurn => "complete_turn",
            Operation::Propose => "propose",
            Operation::DecideCandidates => "decide_candidates",
            Operation::Forget => "forget",
            Operation::WriteKnowledge => "write_knowledge",
            Operation::WriteTraces => "write_traces",
            Operation::ManageGrants => "manage_grants",
        }
    }
}

/// Named operation sets, so common grants need no list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GrantPreset {
    /// A third-party agent: only `propose` (what a `proposer` API key may do).
    Proposer,
    /// An assistant that reads memory and records its own turns and reasoning: `recall`,
    /// `read`, `complete_turn`, `write_messages`, `write_traces`, `propose`. Knowledge it
    /// learns goes through the review queue (`propose`), never straight into facts.
    Assistant,
    /// Everything an agent can be granted.
    Trusted,
}

impl GrantPreset {
    pub fn operations(self) -> Vec<Operation> {
        match self {
            GrantPreset::Proposer => vec![Operation::Propose],
            GrantPreset::Assistant => vec![
                Operation::Recall,
                Operation::Read,
                Operation::CompleteTurn,
                Operation::WriteMessages,
                Operation::WriteTraces,
                Operation::Propose,
            ],
            GrantPreset::Trusted => Operation::GRANTABLE.to_vec(),
        }
    }
}

/// Lifecycle of a grant: `active` → `suspended` → `revoked`; `restore` brings a suspended
/// grant back to `active`. A revoked grant admits nothing until a new grant (with a new key)
/// is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GrantStatus {
    Active,
    Suspended,
    Revoked,
}

impl GrantStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantStatus::Active => "active",
            GrantStatus::Suspended => "suspended",
            GrantStatus::Revoked => "revoked",
        }
    }
}

/// One change of a grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantChange {
    /// `issued`, `suspended`, `revoked`, `restored`.
    pub change: String,
    /// Who made it: `local` (the operator) or `key:<first 12 hex of the key's hash>`.
    pub by: String,
    /// Epoch ms.
    pub at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The stored state of a grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrantState {
    pub agent: String,
    pub operations: Vec<Operation>,
    pub status: GrantStatus,
    /// sha256 (hex) of the agent's key; the key itself is shown once, when issued.
    pub key_hash: String,
    pub history: Vec<GrantChange>,
    /// The agent's Ed25519 public key (the JWK `x`, base64url), when the grant pins one:
    /// then every request of the agent must be signed with it (HTTP Message Signatures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// The RFC 7638 JWK thumbprint of `public_key`: the `keyid` its signatures name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_thumbprint: Option<String>,
}

impl GrantState {
    pub fn allows(&self, op: Operation) -> bool {
        self.operations.contains(&op)
    }
}

/// An agent key: `cak:<tenant>:<user>:<agent>:<secret>`. The prefix names the grant to
/// check (tenant, user and agent components never contain `:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentKey<'a> {
    pub tenant: &'a str,
    pub user: &'a str,
    pub agent: &'a str,
}

impl<'a> AgentKey<'a> {
    pub const PREFIX: &'static str = "cak:";

    /// The grant an agent key names, if `key` is one.
    pub fn parse(key: &'a str) -> Option<AgentKey<'a>> {
        let rest = key.strip_prefix(Self::PREFIX)?;
        let mut parts = rest.split(':');
        let (tenant, user, agent, secret) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || secret.len() < 32 {
            return None;
        }
        Some(AgentKey {
            tenant,
            user,
            agent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_keys_name_their_grant() {
        let secret = "a".repeat(43);
        let key = format!("cak:acme:alice:scout:{secret}");
        assert_eq!(
            AgentKey::parse(&key),
            Some(AgentKey {
                tenant: "acme",
                user: "alice",
                agent: "scout"
            })
        );
        assert_eq!(AgentKey::parse("cak:acme:alice:scout:short"), None);
        assert_eq!(AgentKey::parse(&format!("cak:acme:alice:{secret}")), None);
        assert_eq!(AgentKey::parse(&format!("cak:a:b:c:{secret}:x")), None);
        assert_eq!(AgentKey::parse("secret"), None);
    }

    #[test]
    fn presets_expand() {
        assert_eq!(GrantPreset::Proposer.operations(), vec![Operation::Propose]);
        assert!(!GrantPreset::Trusted
            .operations()
            .contains(&Operation::ManageGrants));
        let ops: Vec<&str> = Operation::GRANTABLE.iter().map(|o| o.as_str()).collect();
        assert_eq!(
            serde_json::to_value(Operation::WriteDocuments).unwrap(),
            serde_json::json!("write_documents")
        );
        assert_eq!(ops.len(), 10);
    }
}
