//! The inspector: a web UI at `/ui` on the same listener as the API (same guard, keys and
//! metrics). Its static files (`api/ui/`: plain ES modules, a stylesheet, no framework) are
//! embedded in the binary at build time; the pages load nothing from elsewhere and call the
//! documented HTTP API with the key the user enters (kept in the tab's session storage).
//! Not a REST route: it stays out of the OpenAPI document.

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

/// Only the inspector's own files; no inline script or style, no framing, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; \
    base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file: its URL path, content type and bytes.
#[derive(Debug)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// Every file of the inspector.
pub const ASSETS: &[Asset] = &[
    Asset {
        path: "/ui",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../ui/index.html"),
    },
    Asset {
        path: "/ui/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/app.js"),
    },
    Asset {
        path: "/ui/api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/api.js"),
    },
    Asset {
        path: "/ui/dom.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/dom.js"),
    },
    Asset {
        path: "/ui/markdown.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/markdown.js"),
    },
    Asset {
        path: "/ui/parts.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/parts.js"),
    },
    Asset {
        path: "/ui/knowledge.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/knowledge.js"),
    },
    Asset {
        path: "/ui/traces.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/traces.js"),
    },
    Asset {
        path: "/ui/graph.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/graph.js"),
    },
    Asset {
        path: "/ui/style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../ui/style.css"),
    },
    Asset {
        path: "/ui/icon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../ui/icon.svg"),
    },
];

/// `GET /ui` and its files; `/ui/` redirects to `/ui`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new().route("/ui/", get(|| async { Redirect::permanent("/ui") }));
    for asset in ASSETS {
        let (content_type, body) = (asset.content_type, asset.body);
        router = router.route(
            asset.path,
            get(move || async move { respond(content_type, body) }),
        );
    }
    router
}

fn respond(content_type: &'static str, body: &'static [u8]) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        // The files change with the binary: revalidate rather than cache blindly.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ];
    (headers, body).into_response()
}

/// Total bytes of the embedded files.
pub fn total_bytes() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn text(a: &Asset) -> &str {
        std::str::from_utf8(a.body).expect("assets are UTF-8")
    }

    #[tokio::test]
    async fn serves_each_file_with_its_type_and_policy() {
        for asset in ASSETS {
            let response = router::<()>()
                .oneshot(
                    axum::http::Request::get(asset.path)
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{}", asset.path);
            let h = response.headers();
            assert_eq!(h[header::CONTENT_TYPE], asset.content_type);
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            assert_eq!(&body[..], asset.body);
        }
        let response = router::<()>()
            .oneshot(
                axum::http::Request::get("/ui/")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.headers()[header::LOCATION], "/ui");
    }

    /// No inline script or style (the policy would block them), no inline event handlers,
    /// nothing from another host, and no `innerHTML`: every text goes in as text.
    #[test]
    fn assets_are_self_contained() {
        let html = text(&ASSETS[0]);
        for (i, part) in html.split("<script").enumerate().skip(1) {
            let tag = part.split('>').next().unwrap_or_default();
            assert!(
                tag.contains("src=\"/ui/"),
                "inline script #{i} in index.html"
            );
            assert!(
                part.trim_start_matches(|c| c != '>')
                    .starts_with("></script>"),
                "script #{i} has a body"
            );
        }
        assert!(!html.contains("<style"), "inline style in index.html");
        assert!(!html.contains(" style="), "style attribute in index.html");
        for asset in ASSETS {
            let t = text(asset).replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
            for needle in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ] {
                assert!(!t.contains(needle), "{} uses {needle}", asset.path);
            }
            for needle in ["http://", "https://", "@import", "url("] {
                assert!(!t.contains(needle), "{} refers to {needle}", asset.path);
            }
        }
        // No inline event handler attributes (`<button onclick=...>`).
        for part in html.split(" on").skip(1) {
            let name: String = part.chars().take_while(char::is_ascii_alphabetic).collect();
            assert!(
                name.is_empty() || !part[name.len()..].starts_with('='),
                "inline handler on{name} in index.html"
            );
        }
        // Every module the pages import is served.
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            for line in text(asset).lines().filter(|l| l.contains("from \"./")) {
                let file = line.split("from \"./").nth(1).unwrap_or_default();
                let file = file.split('"').next().unwrap_or_default();
                assert!(
                    ASSETS.iter().any(|a| a.path == format!("/ui/{file}")),
                    "{} imports {file}, which is not served",
                    asset.path
                );
            }
        }
        assert!(
            total_bytes() < 200_000,
            "the inspector grew to {} bytes",
            total_bytes()
        );
    }
}
