//! The identity scope of every read and write.
//!
//! Tenant, user and namespace form the [`Partition`]: the storage boundary. Every read is
//! filtered by the full partition. Agent and session are provenance: recorded on every point
//! and filterable, but a user's memory is shared across their agents and sessions.

use serde::{Deserialize, Serialize};

use crate::ModelError;

/// Longest allowed scope component.
pub const MAX_SCOPE_LEN: usize = 128;
/// Value used for a scope component the caller does not set.
pub const DEFAULT_COMPONENT: &str = "default";

/// Whose memory: tenant, user and namespace are the storage boundary (every read and write
/// stays inside it); agent and session are recorded as provenance. Each component is
/// `[A-Za-z0-9_.-]+`, at most 128 characters. An unknown field is refused (a misspelt
/// `namespace` must not silently fall back to `default`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "jsonschema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// The tenant (organisation or application). With API keys, the key's tenant.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9_.-]{1,128}$", example = "acme")
    )]
    pub tenant: String,
    /// The user whose memory this is.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9_.-]{1,128}$", example = "alice")
    )]
    pub user: String,
    /// A separate memory space of the user (default `default`).
    #[serde(default = "default_component")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9_.-]{1,128}$"))]
    pub namespace: String,
    /// The agent writing or reading (provenance; default `default`).
    #[serde(default = "default_component")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9_.-]{1,128}$"))]
    pub agent: String,
    /// The session or conversation (provenance; default `default`). Completing an agent
    /// turn records its messages in the conversation named by the session.
    #[serde(default = "default_component")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9_.-]{1,128}$"))]
    pub session: String,
}

fn default_component() -> String {
    DEFAULT_COMPONENT.to_string()
}

impl Default for Scope {
    fn default() -> Self {
        Scope {
            tenant: default_component(),
            user: default_component(),
            namespace: default_component(),
            agent: default_component(),
            session: default_component(),
        }
    }
}

/// The storage boundary: tenant, user, namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Partition {
    pub tenant: String,
    pub user: String,
    pub namespace: String,
}

impl Scope {
    /// Builds a scope and validates every component.
    pub fn new(
        tenant: impl Into<String>,
        user: impl Into<String>,
        namespace: impl Into<String>,
        agent: impl Into<String>,
        session: impl Into<String>,
    ) -> Result<Self, ModelError> {
        let scope = Scope {
            tenant: tenant.into(),
            user: user.into(),
            namespace: namespace.into(),
            agent: agent.into(),
            session: session.into(),
        };
        scope.validate()?;
        Ok(scope)
    }

    /// Checks each component is `[A-Za-z0-9_.-]+` and at most [`MAX_SCOPE_LEN`] characters.
    pub fn validate(&self) -> Result<(), ModelError> {
        validate_component("tenant", &self.tenant)?;
        validate_component("user", &self.user)?;
        validate_component("namespace", &self.namespace)?;
        validate_component("agent", &self.agent)?;
        validate_component("session", &self.session)?;
        Ok(())
    }

    pub fn partition(&self) -> Partition {
        Partition {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            namespace: self.namespace.clone(),
        }
    }

    /// A stable string naming the full scope, used inside content-addressed ids.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.tenant, self.user, self.namespace, self.agent, self.session
        )
    }
}

impl Partition {
    /// A stable string naming the partition, used inside content-addressed ids. The
    /// separator cannot appear in a valid component, so distinct partitions never collide.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.tenant, self.user, self.namespace)
    }
}

/// Validates one scope component (also used for caller-given ids such as turn ids).
pub fn validate_component(field: &'static str, value: &str) -> Result<(), ModelError> {
    if value.is_empty() {
        return Err(ModelError::InvalidScope {
            field,
            reason: "must not be empty".into(),
        });
    }
    if value.len() > MAX_SCOPE_LEN {
        return Err(ModelError::InvalidScope {
            field,
            reason: format!("longer than {MAX_SCOPE_LEN} characters"),
        });
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(ModelError::InvalidScope {
            field,
            reason: format!("character {c:?} is not allowed (use A-Z a-z 0-9 _ . -)"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_and_rejects_bad_components() {
        assert!(Scope::new("acme", "u-1", "docs", "bot.v2", "s_9").is_ok());
        let err = Scope::new("acme corp", "u", "n", "a", "s").unwrap_err();
        assert!(matches!(
            err,
            ModelError::InvalidScope {
                field: "tenant",
                ..
            }
        ));
        assert!(Scope::new("a", "", "n", "a", "s").is_err());
        assert!(Scope::new("a", "u", "n/x", "a", "s").is_err());
        assert!(Scope::new("a", "u", "x".repeat(129), "a", "s").is_err());
        assert!(Scope::new("a", "u", "x".repeat(128), "a", "s").is_ok());
    }

    #[test]
    fn partition_drops_provenance() {
        let a = Scope::new("t", "u", "n", "a1", "s1").unwrap();
        let b = Scope::new("t", "u", "n", "a2", "s2").unwrap();
        assert_eq!(a.partition(), b.partition());
        assert_ne!(a.key(), b.key());
    }
}
