//! All of `api`'s integration tests in one binary: each file here was its own test
//! binary, and every one of them linked the whole engine (qdrant-edge, ONNX Runtime bindings),
//! so the test build spent most of its time and disk in the linker. One binary per crate links
//! once; the modules keep their names, so `cargo test -p <crate> --test api <module>::` runs one.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

mod common;
mod fuzz;
mod http_auth;
mod http_candidates;
mod http_documents;
mod http_grants;
mod http_knowledge;
mod http_limits;
mod http_messages;
mod http_server;
mod http_turns;
mod mcp;
mod races;
mod vocabulary;
