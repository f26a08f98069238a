//! API keys. A key binds its caller to one tenant (and optionally to a set of users). Keys are
//! configured as sha256 hashes, so the server never stores a usable key:
//! `CAIRN_API_KEYS="<sha256-hex>:<tenant>[:<user>|<user>...[:proposer]],..."` or a file with
//! one such entry per line (`--api-keys FILE`). `cairn hash-key KEY` prints the hash of a key.
//! A key marked `proposer` (a third-party agent's) may only post events and candidates; every
//! other route, deciding on candidates included, needs a full key.

use std::collections::HashMap;

use axum::http::HeaderMap;
use cairn_models::ids::sha256_hex;
use cairn_models::Scope;

use crate::error::ApiError;

/// What a key may access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
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

    /// Checks the request's key against the scope it names; proposer keys are refused.
    /// Without configured keys every request passes (the server then listens on loopback
    /// only).
    pub fn check(&self, headers: &HeaderMap, tenant: &str, user: &str) -> Result<(), ApiError> {
        match self.grant(headers, tenant, user)? {
            Some(KeyRole::Proposer) => Err(ApiError::Forbidden(
                "this API key may only post events and candidates".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Like [`Auth::check_scope`], for the routes proposer keys may call too.
    pub fn check_propose(&self, headers: &HeaderMap, scope: &Scope) -> Result<(), ApiError> {
        self.grant(headers, &scope.tenant, &scope.user).map(|_| ())
    }

    /// The role of the request's key if it may access (tenant, user); `None` when
    /// authentication is off.
    fn grant(
        &self,
        headers: &HeaderMap,
        tenant: &str,
        user: &str,
    ) -> Result<Option<KeyRole>, ApiError> {
        if !self.enabled() {
            return Ok(None);
        }
        let key = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(ApiError::Unauthorized)?;
        let grant = self
            .keys
            .get(&sha256_hex(key.trim().as_bytes()))
            .ok_or(ApiError::Unauthorized)?;
        if grant.tenant != tenant
            || (!grant.users.is_empty() && !grant.users.iter().any(|u| u == user))
        {
            return Err(ApiError::ScopeForbidden);
        }
        Ok(Some(grant.role))
    }

    pub fn check_scope(&self, headers: &HeaderMap, scope: &Scope) -> Result<(), ApiError> {
        self.check(headers, &scope.tenant, &scope.user)
    }

    /// Without keys, the only protection is that the server listens on loopback. A browser
    /// defeats that: any web page can send a form post to `127.0.0.1`, and DNS rebinding
    /// points an attacker's name at it. So in key-less mode a request must name a loopback
    /// `Host` (`localhost`, `127.0.0.1`, `[::1]`, any port; checked on the `Host` header,
    /// else the URI's authority) and, when it has an `Origin` (browsers send it on posts),
    /// a loopback origin. A request without either (a local tool speaking HTTP/1.0, an
    /// in-process call) is not a browser's and passes. With keys configured the keys
    /// protect every route and this check is off, so reverse proxies keep working.
    pub fn check_origin(&self, headers: &HeaderMap, uri: &axum::http::Uri) -> Result<(), ApiError> {
        if self.enabled() {
            return Ok(());
        }
        let host = match headers.get(axum::http::header::HOST) {
            Some(v) => Some(v.to_str().unwrap_or("").to_string()),
            None => uri.authority().map(|a| a.as_str().to_string()),
        };
        if let Some(host) = host {
            if !is_loopback_host(&host) {
                return Err(ApiError::ForbiddenOrigin(format!(
                    "host {host:?} is not a loopback name and the server has no API keys"
                )));
            }
        }
        if let Some(origin) = headers.get(axum::http::header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            let ok = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(is_loopback_host);
            if !ok {
                return Err(ApiError::ForbiddenOrigin(format!(
                    "origin {origin:?} is not a loopback origin and the server has no API keys"
                )));
            }
        }
        Ok(())
    }
}

/// `localhost`, a 127.0.0.0/8 address or `[::1]`, with an optional port.
fn is_loopback_host(host: &str) -> bool {
    let port_ok = |p: &str| p.is_empty() || (p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, tail)) = rest.split_once(']') else {
            return false;
        };
        let port = match tail.strip_prefix(':') {
            Some(p) if !p.is_empty() => p,
            Some(_) => return false,
            None if tail.is_empty() => "",
            None => return false,
        };
        return port_ok(port)
            && ip
                .parse::<std::net::Ipv6Addr>()
                .is_ok_and(|a| a.is_loopback());
    }
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !p.is_empty() => (n, p),
        Some(_) => return false,
        None => (host, ""),
    };
    port_ok(port)
        && (name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|a| a.is_loopback()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_bind_tenants_and_users() {
        let h = sha256_hex(b"secret");
        let auth = Auth::parse(&format!("{h}:acme:alice|bob")).unwrap();
        let mut headers = HeaderMap::new();
        assert!(matches!(
            auth.check(&headers, "acme", "alice"),
            Err(ApiError::Unauthorized)
        ));
        headers.insert("authorization", "Bearer secret".parse().unwrap());
        assert!(auth.check(&headers, "acme", "alice").is_ok());
        assert!(matches!(
            auth.check(&headers, "acme", "carol"),
            Err(ApiError::ScopeForbidden)
        ));
        assert!(matches!(
            auth.check(&headers, "other", "alice"),
            Err(ApiError::ScopeForbidden)
        ));
        headers.insert("authorization", "Bearer wrong".parse().unwrap());
        assert!(matches!(
            auth.check(&headers, "acme", "alice"),
            Err(ApiError::Unauthorized)
        ));
        assert!(Auth::parse("nothex:acme").is_err());
        let p = sha256_hex(b"agent");
        let auth = Auth::parse(&format!("{h}:acme\n{p}:acme::proposer")).unwrap();
        headers.insert("authorization", "Bearer agent".parse().unwrap());
        let scope = Scope::new("acme", "alice", "n", "a", "s").unwrap();
        assert!(auth.check_propose(&headers, &scope).is_ok());
        assert!(matches!(
            auth.check_scope(&headers, &scope),
            Err(ApiError::Forbidden(_))
        ));
        headers.insert("authorization", "Bearer secret".parse().unwrap());
        assert!(auth.check_scope(&headers, &scope).is_ok());
        assert!(Auth::parse(&format!("{h}:acme::admin")).is_err());
        assert!(!Auth::parse("").unwrap().enabled());
    }

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "LOCALHOST:7878",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:7878",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.com",
            "localhost.evil.com",
            "127.0.0.1.evil.com",
            "10.0.0.1:7878",
            "[::2]",
            "[::1]x",
            "localhost:",
            "localhost:abc",
            "",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
