//! Backup and restore of a Qdrant server collection through the server's own snapshot API.
//!
//! A server snapshot is taken by the server, consistent per shard (Qdrant's snapshot of a
//! collection), while it keeps serving. gRPC creates and deletes it; the file itself moves
//! over Qdrant's REST API (`GET /collections/{c}/snapshots/{name}` to download it,
//! `POST /collections/{c}/snapshots/upload?priority=snapshot` to recover it into a
//! collection), which has no gRPC equivalent. The download is checked against the SHA-256
//! digest the server reports, and the upload is refused unless the file still has the digest
//! the backup recorded.
//!
//! Snapshots are node-local: on a cluster each node snapshots the shards it holds, so a
//! backup through one node holds that node's shards (a single node holds them all).

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::{Result, StoreError};

/// The REST base URL of a server whose gRPC URL is `grpc`: `rest` when given, else the gRPC
/// URL with Qdrant's default gRPC port 6334 replaced by its default REST port 6333.
pub(crate) fn rest_base(grpc: &str, rest: Option<&str>) -> Result<String> {
    let base = match rest {
        Some(r) => r.trim().trim_end_matches('/').to_string(),
        None => {
            let trimmed = grpc.trim().trim_end_matches('/');
            match trimmed.strip_suffix(":6334") {
                Some(host) => format!("{host}:6333"),
                None => {
                    return Err(StoreError::Invalid(format!(
                        "snapshots move over Qdrant's REST API, and {grpc} does not use the \
                         default gRPC port 6334 to derive it from: set CAIRN_QDRANT_REST_URL \
                         (e.g. http://host:6333)"
                    )))
                }
            }
        }
    };
    if !base.starts_with("http://") {
        return Err(StoreError::Invalid(format!(
            "snapshot transfer needs a plain http:// REST URL (this build has no TLS client \
             for it), not {base}: back up on the server's machine or through a local tunnel"
        )));
    }
    Ok(base)
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        // A snapshot may take long to move as a whole; a connection that stalls still ends
        // (no byte for 5 minutes: the server builds a large snapshot's archive first).
        .timeout_connect(Some(timeout))
        .timeout_per_read(Some(Duration::from_secs(300)))
        .timeout_per_write(Some(Duration::from_secs(300)))
        .build()
        .into()
}

/// `Ok` for `200`; otherwise the engine error naming `what`, the URL, the status and the
/// server's answer.
fn expect_ok(what: &str, url: &str, response: &mut ureq::http::Response<ureq::Body>) -> Result<()> {
    let status = response.status().as_u16();
    if status == 200 {
        return Ok(());
    }
    let body = response.body_mut().read_to_string().unwrap_or_default();
    Err(StoreError::Engine(format!(
        "{what} {url}: HTTP {status}: {body}"
    )))
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("{what}: {e}"))
}

fn io(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    let message = format!("{what} {}: {e}", path.display());
    if cairn_models::error::is_disk_full(&e) {
        StoreError::Full(message)
    } else {
        StoreError::Unavailable(message)
    }
}

/// Downloads snapshot `name` of `collection` into `file` (created, `fsync`ed); returns its
/// size and SHA-256 digest (hex). `progress` gets the bytes written so far.
pub(crate) fn download(
    rest: &str,
    api_key: Option<&str>,
    collection: &str,
    name: &str,
    file: &Path,
    timeout: Duration,
    progress: &dyn Fn(u64),
) -> Result<(u64, String)> {
    let url = format!("{rest}/collections/{collection}/snapshots/{name}");
    let mut request = agent(timeout).get(&url);
    if let Some(key) = api_key {
        request = request.header("api-key", key);
    }
    let mut response = request
        .call()
        .map_err(|e| unavailable("snapshot download", e))?;
    expect_ok("snapshot download", &url, &mut response)?;
    let mut reader = response.body_mut().with_config().limit(u64::MAX).reader();
    let mut out = std::fs::File::create(file).map_err(|e| io("create", file, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut written = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(|e| unavailable("snapshot download", e))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| io("write", file, e))?;
        hasher.update(&buf[..n]);
        written += n as u64;
        progress(written);
    }
    out.sync_all().map_err(|e| io("sync", file, e))?;
    Ok((written, hex::encode(hasher.finalize())))
}

/// SHA-256 of a file (hex).
pub(crate) fn digest(file: &Path) -> Result<String> {
    let mut f = std::fs::File::open(file).map_err(|e| io("open", file, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| io("read", file, e))?;
        if n == 0 {
            return Ok(hex::encode(hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

/// Recovers `collection` from the snapshot `file` (a multipart upload, streamed), waiting
/// until the server has applied it.
pub(crate) fn upload(
    rest: &str,
    api_key: Option<&str>,
    collection: &str,
    file: &Path,
    timeout: Duration,
) -> Result<()> {
    let boundary = format!("cairn-{}", uuid::Uuid::new_v4().simple());
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"snapshot\"; \
         filename=\"{collection}.snapshot\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    );
    let tail = format!("\r\n--{boundary}--\r\n");
    let snapshot = std::fs::File::open(file).map_err(|e| io("open", file, e))?;
    let mut body = head.as_bytes().chain(snapshot).chain(tail.as_bytes());
    let url =
        format!("{rest}/collections/{collection}/snapshots/upload?priority=snapshot&wait=true");
    let mut request = agent(timeout).post(&url).header(
        "content-type",
        format!("multipart/form-data; boundary={boundary}"),
    );
    if let Some(key) = api_key {
        request = request.header("api-key", key);
    }
    let mut response = request
        .send(ureq::SendBody::from_reader(&mut body))
        .map_err(|e| unavailable("snapshot upload", e))?;
    expect_ok("snapshot upload", &url, &mut response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_url_is_given_or_derived_from_the_default_grpc_port() {
        assert_eq!(
            rest_base("http://127.0.0.1:6334", None).unwrap(),
            "http://127.0.0.1:6333"
        );
        assert_eq!(
            rest_base("http://q:7000", Some("http://q:7001/")).unwrap(),
            "http://q:7001"
        );
        let e = rest_base("http://q:7000", None).unwrap_err();
        assert!(e.to_string().contains("CAIRN_QDRANT_REST_URL"), "{e}");
        let e = rest_base("https://q:6334", None).unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
    }
}
