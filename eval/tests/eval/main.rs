//! All of `eval`'s integration tests in one binary: each file here was its own test
//! binary, and every one of them linked the whole engine (qdrant-edge, ONNX Runtime bindings),
//! so the test build spent most of its time and disk in the linker. One binary per crate links
//! once; the modules keep their names, so `cargo test -p <crate> --test eval <module>::` runs one.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

mod benchmarks;
mod scenarios;

/// The model and the store the suite runs on, configured as `cairn` would from this
/// process's environment: embedded by default, a Qdrant server when `CAIRN_QDRANT_URL` is
/// set (one collection per workspace).
pub async fn eval_env() -> cairn_eval::EvalEnv {
    let env = |k: &str| std::env::var(k).ok();
    let config = cairn_config::Config::load(&cairn_config::Sources::env(&env))
        .expect("configuration from the environment");
    let opened = cairn_eval::EvalEnv::open(config.embed.clone(), None)
        .await
        .expect("embedding model (run scripts/setup.sh first)");
    let server = config
        .server(opened.embedder.spec().dim)
        .expect("store configuration");
    opened.on_server(server)
}
