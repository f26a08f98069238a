//! `cairn tck-bridge`: serves the agent-memory TCK's bridge protocol over the engine (see
//! `cairn_api::tck`), so the public conformance suite can run against Cairn.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use cairn_api::tck::Bridge;

/// Opens the configured engine and serves the bridge on `addr` (loopback only: the
/// bridge has no authentication, it acts as the local operator) until Ctrl-C or SIGTERM.
pub(crate) async fn run(
    app: &crate::App,
    addr: SocketAddr,
    tenant: &str,
    user: &str,
) -> Result<ExitCode> {
    if !addr.ip().is_loopback() {
        bail!("the TCK bridge has no authentication: listen on a loopback address, not {addr}");
    }
    let engine = app.open_engine().await?;
    let bridge = Arc::new(Bridge::new(Arc::clone(&engine), tenant, user)?);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    eprintln!(
        "cairn: TCK bridge (protocol {}) on http://{} for tenant {tenant}, user {user}",
        cairn_api::tck::PROTOCOL_VERSION,
        listener.local_addr()?
    );
    cairn_api::tck::serve(listener, bridge, crate::shutdown_signal()).await?;
    engine.flush().await?;
    eprintln!("cairn: stopped");
    Ok(ExitCode::SUCCESS)
}
