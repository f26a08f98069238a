//! Access, below every domain module: the partition a call names, the admission of a scope
//! (validated, then authorized by the one policy), and paging with its default and largest
//! page. Every operation admits through here, so a domain module needs no other module to
//! refuse a call.

use cairn_models::grant::Operation;
use cairn_models::{Partition, Scope};

use crate::auth::{authorize, bind_agent, Principal};
use crate::error::ServiceError;

/// The default and largest page of a listing.
pub const PAGE_DEFAULT: usize = 100;
pub const PAGE_MAX: usize = 1000;

/// One page of `items`: skip `offset`, take `limit` (default [`PAGE_DEFAULT`], at most
/// [`PAGE_MAX`]).
pub fn page<T>(items: Vec<T>, offset: Option<usize>, limit: Option<usize>) -> Vec<T> {
    let offset = offset.unwrap_or(0);
    let limit = limit.unwrap_or(PAGE_DEFAULT).min(PAGE_MAX);
    items.into_iter().skip(offset).take(limit).collect()
}

/// The partition (tenant, user, namespace) a listing or deletion names, validated.
pub fn partition(tenant: &str, user: &str, namespace: &str) -> Result<Partition, ServiceError> {
    let scope = Scope {
        tenant: tenant.to_string(),
        user: user.to_string(),
        namespace: namespace.to_string(),
        ..Scope::default()
    };
    scope.validate()?;
    Ok(scope.partition())
}

/// Validates a scope and authorizes `action` in its partition.
pub(crate) fn admit(who: &Principal, scope: &Scope, action: Operation) -> Result<(), ServiceError> {
    scope.validate()?;
    authorize(who, &scope.partition(), action)
}

/// [`admit`] for a write: the scope's agent becomes the writing agent's own
/// ([`bind_agent`]) first.
pub(crate) fn admit_write(
    who: &Principal,
    scope: &mut Scope,
    action: Operation,
) -> Result<(), ServiceError> {
    bind_agent(who, &mut scope.agent)?;
    admit(who, scope, action)
}
