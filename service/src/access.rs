//! Access, below every domain module: the partition a call names, the admission of a scope
//! (validated, then authorized by the one policy), and paging with its default and largest
//! page. Every operation admits through here, so a domain module needs no other module to
//! refuse a call; every listing takes a [`PageRequest`] and answers a [`Page`], so no door
//! pages or counts by itself.

use cairn_models::grant::Operation;
use cairn_models::{Partition, Scope};

use crate::auth::{authorize, bind_agent, Principal};
use crate::error::ServiceError;

/// The default and largest page of a listing.
pub const PAGE_DEFAULT: usize = 100;
pub const PAGE_MAX: usize = 1000;

/// Which page of a listing a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    offset: usize,
    /// `None`: every item from `offset` on.
    limit: Option<usize>,
}

impl PageRequest {
    /// Skip `offset`, take `limit` (default [`PAGE_DEFAULT`], at most [`PAGE_MAX`]): what a
    /// door's `offset` and `limit` ask for.
    pub fn new(offset: Option<usize>, limit: Option<usize>) -> Self {
        PageRequest {
            offset: offset.unwrap_or(0),
            limit: Some(limit.unwrap_or(PAGE_DEFAULT).min(PAGE_MAX)),
        }
    }

    /// The whole listing, for a caller that shows all of it (a listing no door pages, the
    /// CLI's unpaged commands, the conformance bridge's own cuts).
    pub const ALL: PageRequest = PageRequest {
        offset: 0,
        limit: None,
    };

    /// This page of `items` (the whole listing, in order), with their number.
    pub fn of<T>(self, items: Vec<T>) -> Page<T> {
        let total = items.len();
        let items = items
            .into_iter()
            .skip(self.offset)
            .take(self.limit.unwrap_or(usize::MAX))
            .collect();
        Page { items, total }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Items of the whole listing (the page may hold fewer).
    pub total: usize,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_request_defaults_caps_and_counts_the_whole_listing() {
        let items: Vec<usize> = (0..2500).collect();
        let page = PageRequest::new(None, None).of(items.clone());
        assert_eq!(
            (page.items.len(), page.items[0], page.total),
            (100, 0, 2500)
        );
        let page = PageRequest::new(Some(10), Some(5000)).of(items.clone());
        assert_eq!(
            (page.items.len(), page.items[0], page.total),
            (1000, 10, 2500)
        );
        let page = PageRequest::new(Some(3000), Some(5)).of(items.clone());
        assert_eq!((page.items.len(), page.total), (0, 2500));
        let page = PageRequest::ALL.of(items);
        assert_eq!((page.items.len(), page.total), (2500, 2500));
    }
}
