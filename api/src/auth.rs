//! The HTTP side of authentication: the bearer token of a request, and the loopback check of
//! key-less mode. Who may do what is the service's policy (`cairn_service::auth`).

use axum::http::HeaderMap;
use cairn_service::auth::{Auth, Principal};
use cairn_service::grants::SignatureProof;

use crate::error::ApiError;

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// The principal of a request: an agent key is checked against its stored grant (and, when
/// the grant pins a key, against the request's verified signature), any other bearer against
/// the configured API keys (`Engine::principal`).
pub async fn principal(
    state: &crate::SharedState,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> Result<Principal, ApiError> {
    Ok(state
        .engine
        .principal(
            &state.auth,
            bearer(headers),
            extensions.get::<SignatureProof>(),
        )
        .await?)
}

/// Who sent a request, authenticated: extracting it resolves the bearer token (and, for a
/// signed request, the proof the signature middleware attached) to a principal, or answers
/// `401 unauthorized`. Every handler takes it before its body, and axum runs the parts
/// extractors first, so a request without a valid key is refused before its body is read,
/// parsed or validated (no schema detail, no 15 MiB parse, for a stranger).
#[derive(Debug, Clone)]
pub struct Caller {
    principal: Principal,
}

impl axum::extract::FromRequestParts<crate::SharedState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &crate::SharedState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Caller {
            principal: principal(state, &parts.headers, &parts.extensions).await?,
        })
    }
}

impl Caller {
    /// The authenticated principal.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
}

/// Without keys, the only protection is that the server listens on loopback. A browser
/// defeats that: any web page can send a form post to `127.0.0.1`, and DNS rebinding
/// points an attacker's name at it. So in key-less mode a request must name a loopback
/// `Host` (`localhost`, `127.0.0.1`, `[::1]`, any port; checked on the `Host` header,
/// else the URI's authority) and, when it has an `Origin` (browsers send it on posts),
/// a loopback origin. A request without either (a local tool speaking HTTP/1.0, an
/// in-process call) is not a browser's and passes. With keys configured the keys
/// protect every route and this check is off, so reverse proxies keep working.
pub fn check_origin(
    auth: &Auth,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
) -> Result<(), ApiError> {
    if auth.enabled() {
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
