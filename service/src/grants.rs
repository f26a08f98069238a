//! Agent grants: issuing, listing, suspending, revoking and restoring them, and resolving an
//! agent's key to its grant.
//!
//! A grant is stored per (tenant, user, agent) in the reserved namespace [`GRANTS_NAMESPACE`]
//! of that user, as a `grant` record whose typed state ([`GrantState`]) holds the granted
//! operations, the status with its history and the sha256 of the agent's key. The key is
//! made here, shown once, and names its grant (`cak:<tenant>:<user>:<agent>:<secret>`), so a
//! call is checked against the grant as stored *now*: a suspension or revocation applies to
//! the next request, in-flight retries included. Only the owner (a full key, or the local
//! operator) manages grants; an agent never can.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cairn_models::grant::{AgentKey, GrantChange, GrantPreset, GrantState, GrantStatus, Operation};
use cairn_models::ids::{grant_record_id, sha256_hex};
use cairn_models::scope::validate_component;
use cairn_models::state::RecordState;
use cairn_models::{Partition, PointKind, Scope, StoredPoint, TrustOrigin};
use cairn_store::{Filter, UpsertPoint};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{authorize, Auth, Principal};
use crate::engine::Engine;
use crate::error::ServiceError;

/// The namespace of a user's grant records (a namespace like any other for storage; grant
/// records are never searchable).
pub const GRANTS_NAMESPACE: &str = "_grants";

/// An Ed25519 public key as a JWK (RFC 8037): `{"kty": "OKP", "crv": "Ed25519", "x": ...}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublicJwk {
    pub kty: String,
    pub crv: String,
    /// The 32-byte public key, base64url without padding.
    pub x: String,
}

impl PublicJwk {
    /// Validates the key and returns (x, RFC 7638 thumbprint).
    fn pin(&self) -> Result<(String, String), ServiceError> {
        if self.kty != "OKP" || self.crv != "Ed25519" {
            return Err(ServiceError::InvalidRequest(
                "public_key must be an Ed25519 JWK (kty OKP, crv Ed25519)".into(),
            ));
        }
        verifying_key(&self.x).map_err(|_| {
            ServiceError::InvalidRequest("public_key.x is not an Ed25519 public key".into())
        })?;
        Ok((self.x.clone(), jwk_thumbprint(&self.x)))
    }
}

/// RFC 7638 thumbprint of an Ed25519 JWK: base64url(sha256) of its required members in
/// lexicographic order, without whitespace.
pub fn jwk_thumbprint(x: &str) -> String {
    use sha2::Digest;
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(canonical.as_bytes()))
}

fn verifying_key(x: &str) -> Result<ed25519_dalek::VerifyingKey, ()> {
    let bytes: [u8; 32] = URL_SAFE_NO_PAD
        .decode(x)
        .map_err(|_| ())?
        .try_into()
        .map_err(|_| ())?;
    ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| ())
}

/// A request signature as a door verified its framing (RFC 9421): the signature base it
/// built from the request, the signature, and the parameters the policy checks. The door
/// has checked that the covered components include the method, target, authority and the
/// body's digest, and that the digest matches the body.
#[derive(Debug, Clone)]
pub struct SignatureProof {
    pub keyid: String,
    pub alg: String,
    /// Unix seconds.
    pub created: i64,
    pub nonce: String,
    /// The signature base (RFC 9421 §2.5).
    pub base: Vec<u8>,
    pub signature: Vec<u8>,
}

pub use crate::auth::SIGNATURE_MAX_SKEW_SECS;

/// `POST /v1/grants` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    pub tenant: String,
    pub user: String,
    /// The agent identity (`[A-Za-z0-9_.-]+`): what its writes are recorded as.
    pub agent: String,
    /// The operations granted; with `preset`, added to the preset's.
    #[serde(default)]
    #[schema(value_type = Vec<cairn_models::grant::Operation>)]
    pub operations: Vec<Operation>,
    #[serde(default)]
    #[schema(value_type = Option<cairn_models::grant::GrantPreset>)]
    pub preset: Option<GrantPreset>,
    /// Why (at most 1 KiB); kept in the history.
    #[serde(default)]
    pub note: Option<String>,
    /// Pins the agent's Ed25519 key: every request of the agent must then carry an HTTP
    /// Message Signature (RFC 9421) made with it, `keyid` its JWK thumbprint (RFC 7638).
    #[serde(default)]
    pub public_key: Option<PublicJwk>,
}

/// `POST /v1/grants/{agent}/suspend|revoke|restore` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantChangeRequest {
    pub tenant: String,
    pub user: String,
    #[serde(default)]
    pub note: Option<String>,
}

/// A change of a grant's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusChange {
    Suspend,
    Revoke,
    Restore,
}

/// A grant as shown (never its key).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GrantView {
    pub tenant: String,
    pub user: String,
    pub agent: String,
    #[schema(value_type = Vec<cairn_models::grant::Operation>)]
    pub operations: Vec<Operation>,
    #[schema(value_type = cairn_models::grant::GrantStatus)]
    pub status: GrantStatus,
    #[schema(value_type = Vec<cairn_models::grant::GrantChange>)]
    pub history: Vec<GrantChange>,
    /// The RFC 7638 thumbprint of the pinned Ed25519 key: requests must be signed with it.
    pub key_thumbprint: Option<String>,
}

/// A newly issued grant and the agent's key (shown only here).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IssuedGrant {
    pub grant: GrantView,
    /// `cak:<tenant>:<user>:<agent>:<secret>`: the agent sends it as
    /// `Authorization: Bearer <key>`. Cairn keeps only its hash.
    pub key: String,
}

fn grants_partition(tenant: &str, user: &str) -> Result<Partition, ServiceError> {
    crate::access::partition(tenant, user, GRANTS_NAMESPACE)
}

fn check_note(note: &Option<String>) -> Result<(), ServiceError> {
    if note.as_ref().is_some_and(|n| n.len() > 1024) {
        return Err(ServiceError::InvalidRequest(
            "note must be at most 1024 bytes".into(),
        ));
    }
    Ok(())
}

fn view(p: &Partition, state: &GrantState) -> GrantView {
    GrantView {
        tenant: p.tenant.clone(),
        user: p.user.clone(),
        agent: state.agent.clone(),
        operations: state.operations.clone(),
        status: state.status,
        history: state.history.clone(),
        key_thumbprint: state.key_thumbprint.clone(),
    }
}

/// A fresh secret: 256 random bits (two v4 UUIDs from the OS's generator), hex.
fn secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl Engine {
    /// Who presents `bearer`: an agent (an agent key, checked against its stored grant),
    /// an API key's holder, or the local operator (no keys configured, no bearer).
    /// A grant that pins a key also needs `proof`, a signature made with that key: the
    /// bearer alone is refused (`unauthorized`), as are a signature by another key, one whose
    /// `created` is more than [`SIGNATURE_MAX_SKEW_SECS`] away, and a replayed nonce.
    pub async fn principal(
        &self,
        auth: &Auth,
        bearer: Option<&str>,
        proof: Option<&SignatureProof>,
    ) -> Result<Principal, ServiceError> {
        let Some(key) = bearer
            .map(str::trim)
            .filter(|k| k.starts_with(AgentKey::PREFIX))
        else {
            return auth.principal(bearer);
        };
        let parsed = AgentKey::parse(key).ok_or(ServiceError::Unauthorized)?;
        let partition =
            grants_partition(parsed.tenant, parsed.user).map_err(|_| ServiceError::Unauthorized)?;
        validate_component("agent", parsed.agent).map_err(|_| ServiceError::Unauthorized)?;
        let state = self
            .load_grant(&partition, parsed.agent)
            .await?
            .ok_or(ServiceError::Unauthorized)?;
        if state.key_hash != sha256_hex(key.as_bytes()) {
            return Err(ServiceError::Unauthorized);
        }
        if let (Some(x), Some(thumbprint)) = (&state.public_key, &state.key_thumbprint) {
            let proof = proof.ok_or(ServiceError::Unauthorized)?;
            let now = chrono::Utc::now().timestamp();
            let key = verifying_key(x).map_err(|_| ServiceError::Unauthorized)?;
            let signature = ed25519_dalek::Signature::from_slice(&proof.signature)
                .map_err(|_| ServiceError::Unauthorized)?;
            if proof.keyid != *thumbprint
                || proof.alg != "ed25519"
                || (now - proof.created).abs() > SIGNATURE_MAX_SKEW_SECS
                || key.verify_strict(&proof.base, &signature).is_err()
            {
                return Err(ServiceError::Unauthorized);
            }
            // Last, so a forged request cannot burn a legitimate nonce.
            if !self
                .nonces
                .lock()
                .await
                .admit(&proof.keyid, &proof.nonce, now)
            {
                return Err(ServiceError::Unauthorized);
            }
        }
        Ok(Principal::Agent {
            tenant: partition.tenant,
            user: partition.user,
            grant: Box::new(state),
        })
    }

    async fn load_grant(
        &self,
        partition: &Partition,
        agent: &str,
    ) -> Result<Option<GrantState>, ServiceError> {
        let hits = self
            .store
            .retrieve(partition, &[grant_record_id(partition, agent)], false)
            .await?;
        match hits.into_iter().next().map(|h| h.point.state) {
            None => Ok(None),
            Some(Some(RecordState::Grant(g))) => Ok(Some(g)),
            Some(other) => Err(ServiceError::Internal(format!(
                "grant record of {agent} without its state: {other:?}"
            ))),
        }
    }

    async fn save_grant(
        &self,
        partition: &Partition,
        state: &GrantState,
    ) -> Result<(), ServiceError> {
        let scope = Scope {
            tenant: partition.tenant.clone(),
            user: partition.user.clone(),
            namespace: partition.namespace.clone(),
            agent: state.agent.clone(),
            session: "grants".into(),
        };
        let mut p = StoredPoint::new(
            PointKind::Grant,
            &scope,
            TrustOrigin::System,
            chrono::Utc::now().timestamp_millis(),
        );
        p.state = Some(RecordState::Grant(state.clone()));
        self.store
            .upsert(vec![UpsertPoint::record(
                grant_record_id(partition, &state.agent),
                p,
            )])
            .await?;
        Ok(())
    }

    /// Issues a grant to an agent, with a new key (replacing any earlier grant and key of
    /// the same agent). The owner only.
    pub async fn issue_grant(
        &self,
        who: &Principal,
        req: GrantRequest,
    ) -> Result<IssuedGrant, ServiceError> {
        let partition = grants_partition(&req.tenant, &req.user)?;
        authorize(who, &partition, Operation::ManageGrants)?;
        validate_component("agent", &req.agent)?;
        check_note(&req.note)?;
        let mut operations = req.preset.map(GrantPreset::operations).unwrap_or_default();
        operations.extend(req.operations.iter().copied());
        if operations.contains(&Operation::ManageGrants) {
            return Err(ServiceError::InvalidRequest(
                "manage_grants cannot be granted to an agent".into(),
            ));
        }
        if operations.is_empty() {
            return Err(ServiceError::InvalidRequest(
                "grant at least one operation (operations or preset)".into(),
            ));
        }
        operations.sort();
        operations.dedup();
        let pinned = req.public_key.as_ref().map(PublicJwk::pin).transpose()?;
        let key = format!(
            "{}{}:{}:{}:{}",
            AgentKey::PREFIX,
            partition.tenant,
            partition.user,
            req.agent,
            secret()
        );
        let _serial = self.serial(crate::engine::Section::Reviews).await?;
        let mut history = self
            .load_grant(&partition, &req.agent)
            .await?
            .map(|g| g.history)
            .unwrap_or_default();
        history.push(GrantChange {
            change: "issued".into(),
            by: who.label(),
            at: chrono::Utc::now().timestamp_millis(),
            note: req.note,
        });
        let state = GrantState {
            agent: req.agent,
            operations,
            status: GrantStatus::Active,
            key_hash: sha256_hex(key.as_bytes()),
            history,
            public_key: pinned.as_ref().map(|(x, _)| x.clone()),
            key_thumbprint: pinned.map(|(_, t)| t),
        };
        self.save_grant(&partition, &state).await?;
        Ok(IssuedGrant {
            grant: view(&partition, &state),
            key,
        })
    }

    /// The grants of a user. The owner only.
    pub async fn list_grants(
        &self,
        who: &Principal,
        tenant: &str,
        user: &str,
    ) -> Result<Vec<GrantView>, ServiceError> {
        let partition = grants_partition(tenant, user)?;
        authorize(who, &partition, Operation::ManageGrants)?;
        let mut out: Vec<GrantView> = self
            .store
            .scroll_all(
                &partition,
                Filter::new().eq("kind", PointKind::Grant.as_str()),
            )
            .await?
            .into_iter()
            .filter_map(|h| match h.point.state {
                Some(RecordState::Grant(g)) => Some(view(&partition, &g)),
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.agent.cmp(&b.agent));
        Ok(out)
    }

    /// One grant. The owner only.
    pub async fn get_grant(
        &self,
        who: &Principal,
        tenant: &str,
        user: &str,
        agent: &str,
    ) -> Result<GrantView, ServiceError> {
        let partition = grants_partition(tenant, user)?;
        authorize(who, &partition, Operation::ManageGrants)?;
        validate_component("agent", agent)?;
        self.load_grant(&partition, agent)
            .await?
            .map(|g| view(&partition, &g))
            .ok_or_else(|| ServiceError::NotFound(format!("no grant for agent {agent}")))
    }

    /// Suspends, revokes or restores a grant. Idempotent per target status; restoring a
    /// revoked grant is a conflict (issue a new one: a new key).
    pub async fn change_grant(
        &self,
        who: &Principal,
        agent: &str,
        req: GrantChangeRequest,
        change: StatusChange,
    ) -> Result<GrantView, ServiceError> {
        let partition = grants_partition(&req.tenant, &req.user)?;
        authorize(who, &partition, Operation::ManageGrants)?;
        validate_component("agent", agent)?;
        check_note(&req.note)?;
        let _serial = self.serial(crate::engine::Section::Reviews).await?;
        let mut state = self
            .load_grant(&partition, agent)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no grant for agent {agent}")))?;
        let (target, word) = match change {
            StatusChange::Suspend => (GrantStatus::Suspended, "suspended"),
            StatusChange::Revoke => (GrantStatus::Revoked, "revoked"),
            StatusChange::Restore => (GrantStatus::Active, "restored"),
        };
        if state.status == target {
            return Ok(view(&partition, &state));
        }
        let allowed = matches!(
            (state.status, change),
            (GrantStatus::Active, StatusChange::Suspend)
                | (
                    GrantStatus::Active | GrantStatus::Suspended,
                    StatusChange::Revoke
                )
                | (GrantStatus::Suspended, StatusChange::Restore)
        );
        if !allowed {
            return Err(ServiceError::Conflict(format!(
                "the grant of agent {agent} is {}; it cannot be {word} (issue a new grant instead)",
                state.status.as_str()
            )));
        }
        state.status = target;
        state.history.push(GrantChange {
            change: word.into(),
            by: who.label(),
            at: chrono::Utc::now().timestamp_millis(),
            note: req.note,
        });
        self.save_grant(&partition, &state).await?;
        Ok(view(&partition, &state))
    }
}
