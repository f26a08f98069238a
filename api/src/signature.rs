//! HTTP Message Signatures (RFC 9421), the transport half: an agent whose grant pins an
//! Ed25519 key signs each request; this middleware checks the framing and builds the
//! signature base, and the service (`Engine::principal`) checks the key, the time, the nonce
//! and the signature itself against the grant.
//!
//! Accepted: one signature (any label) whose covered components include `"@method"`,
//! `"@authority"`, `"@path"` and `"content-digest"` (`"@query"` may be added), with the
//! parameters `created`, `nonce`, `keyid` (the key's RFC 7638 thumbprint) and
//! `alg="ed25519"`; a `Content-Digest: sha-256=:<base64>:` header that matches the body (an
//! empty body too). A request without `Signature-Input` passes untouched; one with a malformed
//! or mismatching signature is refused here with `401 unauthorized` before any handler runs.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cairn_service::grants::SignatureProof;
use cairn_service::ServiceError;
use sha2::Digest;

use crate::error::ApiError;
use crate::SharedState;

/// The components every signature must cover.
const REQUIRED: [&str; 4] = ["@method", "@authority", "@path", "content-digest"];

fn unauthorized() -> Response {
    ApiError::Service(ServiceError::Unauthorized).into_response()
}

/// Verifies the framing of a signed request and attaches its [`SignatureProof`].
pub(crate) async fn verify(State(state): State<SharedState>, req: Request, next: Next) -> Response {
    let Some(input) = req
        .headers()
        .get("signature-input")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, state.config.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::Service(ServiceError::PayloadTooLarge(
                "request body is larger than the server's limit".into(),
            ))
            .into_response()
        }
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let proof = (|| {
        let (label, params) = parse_input(&input)?;
        let signature = parse_signature(header("signature")?, &label)?;
        let digest = header("content-digest")?;
        let expected = format!(
            "sha-256=:{}:",
            STANDARD.encode(sha2::Sha256::digest(&bytes))
        );
        if digest != expected {
            return None;
        }
        let authority = header("host")
            .map(str::to_string)
            .or_else(|| parts.uri.authority().map(|a| a.to_string()))?
            .to_ascii_lowercase();
        let mut base = String::new();
        for component in &params.components {
            let value = match component.as_str() {
                "@method" => parts.method.as_str().to_string(),
                "@authority" => authority.clone(),
                "@path" => parts.uri.path().to_string(),
                "@query" => format!("?{}", parts.uri.query().unwrap_or("")),
                "content-digest" => digest.to_string(),
                _ => return None,
            };
            base.push_str(&format!("\"{component}\": {value}\n"));
        }
        base.push_str(&format!("\"@signature-params\": {}", params.raw));
        Some(SignatureProof {
            keyid: params.keyid?,
            alg: params.alg?,
            created: params.created?,
            nonce: params.nonce?,
            base: base.into_bytes(),
            signature,
        })
    })();
    let Some(proof) = proof else {
        return unauthorized();
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(proof);
    next.run(req).await
}

#[derive(Debug, Default)]
struct Params {
    /// The inner list and its parameters exactly as sent: the `@signature-params` value.
    raw: String,
    components: Vec<String>,
    created: Option<i64>,
    nonce: Option<String>,
    keyid: Option<String>,
    alg: Option<String>,
}

/// `label=("c1" "c2");created=1;nonce="n";keyid="k";alg="ed25519"` (one member).
fn parse_input(input: &str) -> Option<(String, Params)> {
    let (label, raw) = input.trim().split_once('=')?;
    let raw = raw.trim();
    let inner = raw.strip_prefix('(')?;
    let (list, rest) = inner.split_once(')')?;
    let components: Vec<String> = list
        .split_whitespace()
        .map(|c| c.strip_prefix('"')?.strip_suffix('"').map(str::to_string))
        .collect::<Option<_>>()?;
    if !REQUIRED.iter().all(|r| components.iter().any(|c| c == r)) {
        return None;
    }
    let mut params = Params {
        raw: raw.to_string(),
        components,
        ..Params::default()
    };
    for param in rest.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=')?;
        let text = || {
            value
                .strip_prefix('"')?
                .strip_suffix('"')
                .map(str::to_string)
        };
        match name {
            "created" => params.created = value.parse().ok(),
            "nonce" => params.nonce = text(),
            "keyid" => params.keyid = text(),
            "alg" => params.alg = text(),
            _ => {}
        }
    }
    Some((label.trim().to_string(), params))
}

/// `label=:<base64>:`.
fn parse_signature(header: &str, label: &str) -> Option<Vec<u8>> {
    let (l, value) = header.split_once('=')?;
    if l.trim() != label {
        return None;
    }
    let b64 = value.trim().strip_prefix(':')?.strip_suffix(':')?;
    STANDARD.decode(b64).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_input_parses_and_requires_the_components() {
        let (label, p) = parse_input(
            r#"sig1=("@method" "@authority" "@path" "content-digest");created=1700000000;nonce="n1";keyid="k";alg="ed25519""#,
        )
        .unwrap();
        assert_eq!(label, "sig1");
        assert_eq!(p.created, Some(1_700_000_000));
        assert_eq!(p.nonce.as_deref(), Some("n1"));
        assert!(p.raw.starts_with("(\"@method\""));
        assert!(parse_input(r#"sig1=("@method" "@path");created=1"#).is_none());
        assert!(parse_input("garbage").is_none());
        assert_eq!(parse_signature("sig1=:AAE=:", "sig1"), Some(vec![0, 1]));
        assert_eq!(parse_signature("sig2=:AAE=:", "sig1"), None);
    }
}
