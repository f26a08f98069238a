//! API keys. A key binds its caller to one tenant (and optionally to a set of users). Keys are
//! configured as sha256 hashes, so the server never stores a usable key:
//! `CAIRN_API_KEYS="<sha256-hex>:<tenant>[:<user>|<user>...[:proposer]],..."` or a file with
//! one such entry per line (`--api-keys FILE`). `cairn hash-key KEY` prints the hash of a key.
//! A key marked `proposer` (a third-party agent's) may only post events and candidates; every
//! other route, deciding on candidates included, needs a full key. [`authorize`] is the one
//! policy every door's calls go through (the service's methods call it).

use std::collections::HashMap;

use cairn_models::grant::{GrantPreset, GrantState, GrantStatus, Operation};
use cairn_models::ids::sha256_hex;
use cairn_models::Partition;

use crate::error::ServiceError;

/// What a key may access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The first 12 hex characters of the key's hash: names the key in grant histories.
    pub id: String,
    pub tenant: String,
    /// Empty: every user of the tenant.
    pub users: Vec<String>,
    /// What the key may do.
    pub role: KeyRole,
}

/// What a key may do inside its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyRole {
    /// Every route.
    #[default]
    Full,
    /// Only `POST /v1/events` and `POST /v1/candidates` (third-party agents).
    Proposer,
}

/// The configured keys (by hash). Empty: authentication is off (loopback only).
#[derive(Debug, Clone, Default)]
pub struct Auth {
    keys: HashMap<String, Grant>,
}

impl Auth {
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut keys = HashMap::new();
        for entry in spec
            .split([',', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'))
        {
            let mut parts = entry.split(':');
            let (Some(hash), Some(tenant)) = (parts.next(), parts.next()) else {
                return Err(format!(
                    "API key entry {entry:?}: expected <sha256-hex>:<tenant>[:<users>]"
                ));
            };
            if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!(
                    "API key entry for tenant {tenant}: the key hash must be 64 hex characters"
                ));
            }
            cairn_models::scope::validate_component("tenant", tenant).map_err(|e| e.to_string())?;
            let users = parts
                .next()
                .map(|u| {
                    u.split('|')
                        .map(str::to_string)
                        .filter(|u| !u.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            let role = match parts.next().map(str::trim) {
                None | Some("") | Some("full") => KeyRole::Full,
                Some("proposer") => KeyRole::Proposer,
                Some(other) => {
                    return Err(format!(
                    "API key entry for tenant {tenant}: unknown role {other:?} (full or proposer)"
                ))
                }
            };
            if parts.next().is_some() {
                return Err(format!(
                    "API key entry for tenant {tenant}: expected <sha256-hex>:<tenant>[:<users>[:<role>]]"
                ));
            }
            keys.insert(
                hash.to_ascii_lowercase(),
                Grant {
                    id: hash[..12].to_ascii_lowercase(),
                    tenant: tenant.to_string(),
                    users,
                    role,
                },
            );
        }
        Ok(Auth { keys })
    }

    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Who presents `bearer` (the credential of the request, e.g. the token of an
    /// `Authorization: Bearer` header). Without configured keys every caller is the local
    /// operator (the server then listens on loopback only); with keys, a missing or unknown
    /// key is `unauthorized`.
    pub fn principal(&self, bearer: Option<&str>) -> Result<Principal, ServiceError> {
        if !self.enabled() {
            return Ok(Principal::Local);
        }
        let key = bearer.ok_or(ServiceError::Unauthorized)?;
        let grant = self
            .keys
            .get(&sha256_hex(key.trim().as_bytes()))
            .ok_or(ServiceError::Unauthorized)?;
        Ok(Principal::Key(grant.clone()))
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq)]
pub enum Principal {
    /// The operator of this deployment: the CLI, or any caller of a server without keys
    /// (which then answers loopback only). May do everything.
    Local,
    /// A caller holding an API key.
    Key(Grant),
    /// An agent holding its own key: what it may do is its stored grant, as read for this
    /// call.
    Agent {
        tenant: String,
        user: String,
        grant: Box<GrantState>,
    },
}

impl Principal {
    /// Refuses an agent whose grant is suspended or revoked (`capability_denied`), before any
    /// operation: what a door checks when a caller opens something that outlives one request
    /// (an MCP session).
    pub fn check_active(&self) -> Result<(), ServiceError> {
        match self {
            Principal::Agent { grant, .. } if grant.status != GrantStatus::Active => {
                Err(ServiceError::CapabilityDenied(format!(
                    "the grant of agent {} is {}",
                    grant.agent,
                    grant.status.as_str()
                )))
            }
            _ => Ok(()),
        }
    }

    /// Who, for a grant's history: `local`, `key:<12 hex of the key's hash>`, `agent:<id>`.
    pub fn label(&self) -> String {
        match self {
            Principal::Local => "local".into(),
            Principal::Key(g) => format!("key:{}", g.id),
            Principal::Agent { grant, .. } => format!("agent:{}", grant.agent),
        }
    }

    /// The agent identity this principal writes as, when it is an agent.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Principal::Agent { grant, .. } => Some(&grant.agent),
            _ => None,
        }
    }
}

/// The authorization policy, in one place: may `principal` do `op` in `partition`
/// (tenant, user, namespace)? A key reaches only its tenant (and its users, when it names
/// any); a proposer key (a third-party agent's) may only propose; an agent reaches only the
/// user its grant belongs to, and only with the operations granted while the grant is
/// active.
pub fn authorize(
    principal: &Principal,
    partition: &Partition,
    op: Operation,
) -> Result<(), ServiceError> {
    match principal {
        Principal::Local => Ok(()),
        Principal::Key(grant) => {
            if grant.tenant != partition.tenant
                || (!grant.users.is_empty() && !grant.users.contains(&partition.user))
            {
                return Err(ServiceError::ScopeForbidden);
            }
            match grant.role {
                KeyRole::Full => Ok(()),
                // A proposer key is the `proposer` grant preset on a key of the tenant.
                KeyRole::Proposer if GrantPreset::Proposer.operations().contains(&op) => Ok(()),
                KeyRole::Proposer => Err(ServiceError::Forbidden(
                    "this API key may only post events and candidates".into(),
                )),
            }
        }
        Principal::Agent {
            tenant,
            user,
            grant,
        } => {
            if *tenant != partition.tenant || *user != partition.user {
                return Err(ServiceError::ScopeForbidden);
            }
            principal.check_active()?;
            if op == Operation::ManageGrants || !grant.allows(op) {
                return Err(ServiceError::CapabilityDenied(format!(
                    "agent {} is not granted {}",
                    grant.agent,
                    op.as_str()
                )));
            }
            Ok(())
        }
    }
}

/// Makes a write's scope name the agent that writes it: an agent writes as itself (a scope
/// with the default agent becomes its own); naming another agent is refused.
pub fn bind_agent(principal: &Principal, agent: &mut String) -> Result<(), ServiceError> {
    let Some(me) = principal.agent() else {
        return Ok(());
    };
    if agent == cairn_models::scope::DEFAULT_COMPONENT {
        *agent = me.to_string();
    }
    if agent != me {
        return Err(ServiceError::Forbidden(format!(
            "agent {me} may not write as agent {agent}"
        )));
    }
    Ok(())
}

/// How far a signature's `created` may be from now, in seconds.
pub const SIGNATURE_MAX_SKEW_SECS: i64 = 300;

/// Nonces seen within the signature window, so a captured request cannot be replayed.
#[derive(Debug, Default)]
pub(crate) struct NonceCache {
    seen: std::collections::HashMap<(String, String), i64>,
}

impl NonceCache {
    /// Records (keyid, nonce); false when it was already seen.
    pub(crate) fn admit(&mut self, keyid: &str, nonce: &str, now: i64) -> bool {
        if self.seen.len() > 100_000 {
            self.seen
                .retain(|_, at| now - *at <= 2 * SIGNATURE_MAX_SKEW_SECS);
        }
        self.seen
            .insert((keyid.to_string(), nonce.to_string()), now)
            .is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_models::Scope;

    #[test]
    fn keys_bind_tenants_users_and_roles() {
        let h = sha256_hex(b"secret");
        let auth = Auth::parse(&format!("{h}:acme:alice|bob")).unwrap();
        let alice = Scope::new("acme", "alice", "n", "a", "s")
            .unwrap()
            .partition();
        let carol = Scope::new("acme", "carol", "n", "a", "s")
            .unwrap()
            .partition();
        let other = Scope::new("other", "alice", "n", "a", "s")
            .unwrap()
            .partition();
        assert!(matches!(
            auth.principal(None),
            Err(ServiceError::Unauthorized)
        ));
        assert!(matches!(
            auth.principal(Some("wrong")),
            Err(ServiceError::Unauthorized)
        ));
        let who = auth.principal(Some("secret")).unwrap();
        assert!(authorize(&who, &alice, Operation::WriteDocuments).is_ok());
        assert!(matches!(
            authorize(&who, &carol, Operation::Read),
            Err(ServiceError::ScopeForbidden)
        ));
        assert!(matches!(
            authorize(&who, &other, Operation::Read),
            Err(ServiceError::ScopeForbidden)
        ));
        assert!(Auth::parse("nothex:acme").is_err());
        let p = sha256_hex(b"agent");
        let auth = Auth::parse(&format!("{h}:acme\n{p}:acme::proposer")).unwrap();
        let agent = auth.principal(Some("agent")).unwrap();
        assert!(authorize(&agent, &alice, Operation::Propose).is_ok());
        for action in [
            Operation::Read,
            Operation::WriteDocuments,
            Operation::DecideCandidates,
            Operation::Forget,
        ] {
            assert!(matches!(
                authorize(&agent, &alice, action),
                Err(ServiceError::Forbidden(_))
            ));
        }
        let full = auth.principal(Some("secret")).unwrap();
        assert!(authorize(&full, &carol, Operation::DecideCandidates).is_ok());
        assert!(Auth::parse(&format!("{h}:acme::admin")).is_err());
        assert!(!Auth::parse("").unwrap().enabled());
        assert_eq!(
            Auth::parse("").unwrap().principal(None).unwrap(),
            Principal::Local
        );
    }
}
