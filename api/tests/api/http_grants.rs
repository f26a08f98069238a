//! Agent identities and capability grants, over HTTP and MCP: every operation is allowed or
//! refused exactly as the agent's stored grant says, for each grant status; an agent cannot
//! write as another agent, reach another user, manage grants, or keep working after a
//! revocation (retries included).

#![allow(clippy::unwrap_used)]

use axum::http::StatusCode;
use cairn_api::Auth;
use cairn_models::ids::sha256_hex;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

use crate::common::{call, test_app};

const OWNER: &str = "owner-secret";

fn owner_auth() -> Auth {
    Auth::parse(&format!("{}:acme", sha256_hex(OWNER.as_bytes()))).unwrap()
}

fn scope(agent: &str) -> Value {
    json!({"tenant": "acme", "user": "alice", "namespace": "kb", "agent": agent, "session": "s1"})
}

const Q: &str = "tenant=acme&user=alice&namespace=kb";

async fn issue(app: &crate::common::TestApp, agent: &str, ops: Value) -> String {
    let (s, v) = call(
        app,
        "POST",
        "/v1/grants",
        Some(
            json!({"tenant": "acme", "user": "alice", "agent": agent, "operations": ops,
            "note": "test"}),
        ),
        Some(OWNER),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    crate::common::assert_documented("post", "/v1/grants", 200, &v);
    assert_eq!(v["grant"]["status"], "active");
    v["key"].as_str().unwrap().to_string()
}

async fn set_status(
    app: &crate::common::TestApp,
    agent: &str,
    change: &str,
) -> (StatusCode, Value) {
    call(
        app,
        "POST",
        &format!("/v1/grants/{agent}/{change}"),
        Some(json!({"tenant": "acme", "user": "alice", "note": change})),
        Some(OWNER),
    )
    .await
}

/// One representative call per operation, as the agent `agent` with `key`; returns the
/// status and the error code, if any.
async fn attempt(
    app: &crate::common::TestApp,
    op: &str,
    agent: &str,
    key: &str,
    n: usize,
) -> (StatusCode, Option<String>) {
    let sc = scope(agent);
    let (method, uri, body) = match op {
        "recall" => (
            "POST",
            "/v1/recall".to_string(),
            Some(json!({"scope": sc, "query": "espresso"})),
        ),
        "read" => ("GET", format!("/v1/documents?{Q}"), None),
        "write_documents" => (
            "POST",
            "/v1/documents".to_string(),
            Some(json!({"scope": sc, "source": format!("note-{n}.md"),
                "text": format!("Note {n}: the espresso machine is on floor {n}.")})),
        ),
        "write_messages" => (
            "POST",
            "/v1/messages".to_string(),
            Some(
                json!({"scope": sc, "messages": [{"conversation_id": "c1", "role": "user",
                "content": format!("message {n}")}]}),
            ),
        ),
        "complete_turn" => (
            "POST",
            format!("/v1/turns/t-{n}/complete"),
            Some(
                json!({"scope": sc, "user_message": "hi", "assistant_message": format!("hello {n}")}),
            ),
        ),
        "propose" => (
            "POST",
            "/v1/events".to_string(),
            Some(json!({"scope": sc, "source_agent": agent, "content": format!("event {n}")})),
        ),
        "decide_candidates" => (
            "POST",
            "/v1/candidates/nosuch/approve".to_string(),
            Some(json!({"scope": sc})),
        ),
        "forget" => (
            "POST",
            "/v1/forget".to_string(),
            Some(json!({"scope": sc, "ref": "doc:00000000000000000000000000000000"})),
        ),
        other => panic!("{other}"),
    };
    let (s, v) = call(app, method, &uri, body, Some(key)).await;
    (s, v["error"]["code"].as_str().map(str::to_string))
}

const OPS: [&str; 8] = [
    "recall",
    "read",
    "write_documents",
    "write_messages",
    "complete_turn",
    "propose",
    "decide_candidates",
    "forget",
];

/// Allowed: neither `401` nor `403` (a call may still fail for its own reasons, e.g. `404`
/// for the unknown candidate and ref used here).
fn allowed(r: &(StatusCode, Option<String>)) -> bool {
    r.0 != StatusCode::UNAUTHORIZED && r.0 != StatusCode::FORBIDDEN
}

#[tokio::test]
async fn every_operation_follows_the_grant_in_every_status() {
    let app = test_app(owner_auth(), 1 << 20);
    let granted = ["recall", "write_messages", "complete_turn", "propose"];
    let key = issue(&app, "scout", json!(granted)).await;
    let mut n = 0;
    for status in ["active", "suspended", "active", "revoked"] {
        match status {
            "suspended" => assert_eq!(set_status(&app, "scout", "suspend").await.0, StatusCode::OK),
            "active" if n > 0 => {
                assert_eq!(set_status(&app, "scout", "restore").await.0, StatusCode::OK)
            }
            "revoked" => assert_eq!(set_status(&app, "scout", "revoke").await.0, StatusCode::OK),
            _ => {}
        }
        for op in OPS {
            n += 1;
            let r = attempt(&app, op, "scout", &key, n).await;
            let expect = status == "active" && granted.contains(&op);
            assert_eq!(allowed(&r), expect, "{op} while {status}: {r:?}");
            if !expect {
                assert_eq!(r.0, StatusCode::FORBIDDEN, "{op} while {status}");
            }
        }
    }
    // A revoked grant cannot be restored; the owner issues a new one (a new key), and the
    // old key stays refused.
    let (s, v) = set_status(&app, "scout", "restore").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );
    let new_key = issue(&app, "scout", json!(["recall"])).await;
    assert_ne!(new_key, key);
    assert_eq!(
        attempt(&app, "recall", "scout", &key, 1).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert!(allowed(
        &attempt(&app, "recall", "scout", &new_key, 1).await
    ));
    // The history says who changed what, in order.
    let (s, v) = call(
        &app,
        "GET",
        "/v1/grants/scout?tenant=acme&user=alice",
        None,
        Some(OWNER),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    crate::common::assert_documented("get", "/v1/grants/{agent}", 200, &v);
    let changes: Vec<&str> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["change"].as_str().unwrap())
        .collect();
    assert_eq!(
        changes,
        ["issued", "suspended", "restored", "revoked", "issued"]
    );
    assert!(v["history"][1]["by"].as_str().unwrap().starts_with("key:"));
}

#[tokio::test]
async fn denials_name_what_is_missing() {
    let app = test_app(owner_auth(), 1 << 20);
    let key = issue(&app, "scout", json!(["recall"])).await;
    let (s, v) = call(
        &app,
        "POST",
        "/v1/documents",
        Some(json!({"scope": scope("scout"), "source": "a.md", "text": "x"})),
        Some(&key),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    insta::assert_json_snapshot!("capability_denied", v);
    assert_eq!(set_status(&app, "scout", "suspend").await.0, StatusCode::OK);
    let (_, v) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("scout"), "query": "x"})),
        Some(&key),
    )
    .await;
    assert_eq!(
        v["error"]["message"],
        "the grant of agent scout is suspended"
    );
}

#[tokio::test]
async fn an_agent_is_itself_only() {
    let app = test_app(owner_auth(), 1 << 20);
    let key = issue(
        &app,
        "scout",
        json!(["write_messages", "complete_turn", "propose", "recall"]),
    )
    .await;
    // Writing as another agent is refused; the default agent becomes the agent itself.
    let (s, v) = call(
        &app,
        "POST",
        "/v1/turns/t1/complete",
        Some(json!({"scope": scope("other"), "user_message": "hi", "assistant_message": "yo"})),
        Some(&key),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let (s, v) = call(
        &app,
        "POST",
        "/v1/events",
        Some(json!({"scope": scope("scout"), "source_agent": "other", "content": "x"})),
        Some(&key),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    let (s, v) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(json!({"scope": scope("default"), "messages": [
            {"conversation_id": "c9", "role": "user", "content": "as myself"}]})),
        Some(&key),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, v) = call(
        &app,
        "GET",
        &format!("/v1/conversations/c9/messages?{Q}"),
        None,
        Some(OWNER),
    )
    .await;
    assert_eq!(v["messages"][0]["agent"], "scout", "{v}");
    // Another user of the tenant, and grant management, are out of reach.
    let (s, _) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": {"tenant": "acme", "user": "bob", "namespace": "kb"}, "query": "x"})),
        Some(&key),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = call(
        &app,
        "POST",
        "/v1/grants",
        Some(json!({"tenant": "acme", "user": "alice", "agent": "scout", "preset": "trusted"})),
        Some(&key),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("capability_denied"))
    );
    // A tampered key (other secret, or another agent's name with this secret) is unknown.
    let tampered = format!("{}x", &key[..key.len() - 1]);
    let (s, _) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("scout"), "query": "x"})),
        Some(&tampered),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let renamed = key.replace(":scout:", ":other:");
    let (s, _) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("other"), "query": "x"})),
        Some(&renamed),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Grants are the owner's: listed for the owner only.
    let (s, v) = call(
        &app,
        "GET",
        "/v1/grants?tenant=acme&user=alice",
        None,
        Some(OWNER),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    crate::common::assert_documented("get", "/v1/grants", 200, &v);
    assert_eq!(v["grants"][0]["agent"], "scout");
    assert!(v["grants"][0].get("key_hash").is_none());
}

#[tokio::test]
async fn a_revoked_agents_retries_are_refused() {
    let app = test_app(owner_auth(), 1 << 20);
    let key = issue(&app, "scout", json!(["complete_turn"])).await;
    let body = json!({"scope": scope("scout"), "user_message": "hi", "assistant_message": "hello"});
    let (s, first) = call(
        &app,
        "POST",
        "/v1/turns/t-r/complete",
        Some(body.clone()),
        Some(&key),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{first}");
    assert_eq!(set_status(&app, "scout", "revoke").await.0, StatusCode::OK);
    let (s, v) = call(
        &app,
        "POST",
        "/v1/turns/t-r/complete",
        Some(body),
        Some(&key),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("capability_denied"))
    );
}

// ---------- the same grants over MCP ----------

type Client = RunningService<RoleClient, ()>;

async fn connect(url: &str, key: &str) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(key);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

async fn tool(client: &Client, name: &str, args: Value) -> CallToolResult {
    let args: JsonObject = args.as_object().unwrap().clone();
    client
        .call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args))
        .await
        .unwrap()
}

fn tool_code(r: &CallToolResult) -> Option<String> {
    (r.is_error == Some(true)).then(|| {
        r.structured_content.as_ref().unwrap()["error"]["code"]
            .as_str()
            .unwrap()
            .to_string()
    })
}

#[tokio::test]
async fn mcp_tools_follow_the_grant() {
    let app = test_app(owner_auth(), 1 << 20);
    let url = format!("{}/mcp", crate::common::serve(&app).await);
    let key = issue(&app, "scout", json!(["recall", "complete_turn"])).await;
    let client = connect(&url, &key).await;
    let sc = scope("scout");
    let calls = [
        ("recall", json!({"scope": sc, "query": "espresso"}), true),
        (
            "complete_turn",
            json!({"scope": sc, "turn_id": "m1", "user_message": "hi", "assistant_message": "yo"}),
            true,
        ),
        (
            "remember",
            json!({"scope": sc, "document": {"source": "a.md", "text": "espresso"}}),
            false,
        ),
        (
            "list_documents",
            json!({"tenant": "acme", "user": "alice", "namespace": "kb"}),
            false,
        ),
        (
            "forget",
            json!({"scope": sc, "ref": "doc:00000000000000000000000000000000"}),
            false,
        ),
        (
            "propose_memory",
            json!({"scope": sc, "source_agent": "scout", "memory_type": "fact", "content": "x",
                "confidence": 0.5, "evidence_refs": ["msg:s1/0"]}),
            false,
        ),
    ];
    for status in ["active", "suspended", "active"] {
        let change = match status {
            "suspended" => Some("suspend"),
            _ => None,
        };
        if let Some(change) = change {
            assert_eq!(set_status(&app, "scout", change).await.0, StatusCode::OK);
        } else if status == "active"
            && set_status(&app, "scout", "restore").await.0 != StatusCode::OK
        {
            panic!("restore failed");
        }
        for (name, args, granted) in &calls {
            let r = tool(&client, name, args.clone()).await;
            let denied = tool_code(&r).as_deref() == Some("capability_denied");
            assert_eq!(
                denied,
                !(status == "active" && *granted),
                "{name} while {status}: {r:?}"
            );
        }
    }
    // Revoked (final): the open session's requests are refused at the door, tools/list too.
    assert_eq!(set_status(&app, "scout", "revoke").await.0, StatusCode::OK);
    let list = tokio::time::timeout(std::time::Duration::from_secs(30), client.list_all_tools())
        .await
        .expect("tools/list answers");
    assert!(list.is_err(), "tools/list after the revoke: {list:?}");
    let _ = client.cancel().await;
}

/// An agent whose grant is suspended or revoked cannot open an MCP session: `initialize`
/// answers `403 capability_denied` (before, it answered 200 with a session id); restored, it
/// can again.
#[tokio::test]
async fn inactive_grants_open_no_mcp_session() {
    let app = test_app(owner_auth(), 1 << 20);
    let key = issue(&app, "scout", json!(["recall"])).await;
    let initialize = |key: &str| crate::common::mcp_initialize("127.0.0.1", Some(key));
    let status = |app: &crate::common::TestApp, req: Request<Body>| {
        let router = app.router.clone();
        async move {
            use tower::ServiceExt;
            router.oneshot(req).await.unwrap().status()
        }
    };
    assert_eq!(status(&app, initialize(&key)).await, StatusCode::OK);
    for (change, expect) in [
        ("suspend", StatusCode::FORBIDDEN),
        ("restore", StatusCode::OK),
        ("revoke", StatusCode::FORBIDDEN),
    ] {
        assert_eq!(set_status(&app, "scout", change).await.0, StatusCode::OK);
        assert_eq!(
            status(&app, initialize(&key)).await,
            expect,
            "after {change}"
        );
    }
    let (s, v) = crate::common::raw(&app, initialize(&key)).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("capability_denied")),
        "{v}"
    );
}

// ---------- signed requests (RFC 9421) for grants that pin a key ----------

use axum::body::Body;
use axum::http::Request;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ed25519_dalek::Signer;
use sha2::Digest;

struct Signed<'a> {
    key: &'a str,
    signing: &'a ed25519_dalek::SigningKey,
    keyid: &'a str,
    nonce: &'a str,
    created: i64,
}

/// A `POST /v1/recall` signed as RFC 9421 describes, with `body` as the signed body and
/// `sent` as the body actually sent (they differ to tamper).
fn signed_recall(s: &Signed, body: &str, sent: &str) -> Request<Body> {
    let digest = format!("sha-256=:{}:", STANDARD.encode(sha2::Sha256::digest(body)));
    let params = format!(
        r#"("@method" "@authority" "@path" "content-digest");created={};nonce="{}";keyid="{}";alg="ed25519""#,
        s.created, s.nonce, s.keyid
    );
    let base = format!(
        "\"@method\": POST\n\"@authority\": localhost:7878\n\"@path\": /v1/recall\n\"content-digest\": {digest}\n\"@signature-params\": {params}"
    );
    let signature = STANDARD.encode(s.signing.sign(base.as_bytes()).to_bytes());
    Request::builder()
        .method("POST")
        .uri("/v1/recall")
        .header("host", "localhost:7878")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", s.key))
        .header("content-digest", digest)
        .header("signature-input", format!("sig1={params}"))
        .header("signature", format!("sig1=:{signature}:"))
        .body(Body::from(sent.to_string()))
        .unwrap()
}

#[tokio::test]
async fn a_pinned_key_needs_a_fresh_valid_signature() {
    let app = test_app(owner_auth(), 1 << 20);
    let signing = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let x = URL_SAFE_NO_PAD.encode(signing.verifying_key().to_bytes());
    let (s, v) = call(
        &app,
        "POST",
        "/v1/grants",
        Some(
            json!({"tenant": "acme", "user": "alice", "agent": "signer", "operations": ["recall"],
            "public_key": {"kty": "OKP", "crv": "Ed25519", "x": x}}),
        ),
        Some(OWNER),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let key = v["key"].as_str().unwrap().to_string();
    let keyid = v["grant"]["key_thumbprint"].as_str().unwrap().to_string();
    assert_eq!(keyid, cairn_service::grants::jwk_thumbprint(&x));
    let body = json!({"scope": scope("signer"), "query": "espresso"}).to_string();
    let now = chrono::Utc::now().timestamp();
    let good = Signed {
        key: &key,
        signing: &signing,
        keyid: &keyid,
        nonce: "n-1",
        created: now,
    };

    // The bearer alone is not enough.
    let (s, _) = call(
        &app,
        "POST",
        "/v1/recall",
        Some(json!({"scope": scope("signer"), "query": "x"})),
        Some(&key),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Signed: admitted, once.
    let (s, v) = crate::common::raw(&app, signed_recall(&good, &body, &body)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = crate::common::raw(&app, signed_recall(&good, &body, &body)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "a replayed nonce is refused");
    // A tampered body no longer matches its digest.
    let tampered = json!({"scope": scope("signer"), "query": "something else"}).to_string();
    let fresh = Signed {
        nonce: "n-2",
        ..good
    };
    let (s, _) = crate::common::raw(&app, signed_recall(&fresh, &body, &tampered)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Another key, a stale signature, a wrong keyid: refused.
    let other = ed25519_dalek::SigningKey::from_bytes(&[8u8; 32]);
    let forged = Signed {
        signing: &other,
        nonce: "n-3",
        ..fresh
    };
    let (s, _) = crate::common::raw(&app, signed_recall(&forged, &body, &body)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let stale = Signed {
        nonce: "n-4",
        created: now - 3600,
        ..fresh
    };
    let (s, _) = crate::common::raw(&app, signed_recall(&stale, &body, &body)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let wrong_id = Signed {
        nonce: "n-5",
        keyid: "not-the-thumbprint",
        ..fresh
    };
    let (s, _) = crate::common::raw(&app, signed_recall(&wrong_id, &body, &body)).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // The refusals burned no nonce: a correct request with a new nonce still passes.
    let again = Signed {
        nonce: "n-6",
        ..fresh
    };
    let (s, v) = crate::common::raw(&app, signed_recall(&again, &body, &body)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
}
