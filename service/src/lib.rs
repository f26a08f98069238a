//! Cairn's memory service: every operation and every rule that is not about a transport.
//!
//! The doors (the HTTP API in `cairn-api`, the `cairn` CLI, MCP, the evaluation harness)
//! call the operations in [`ops`], methods of [`Engine`], each with the caller's
//! [`Principal`]. The service validates, authorizes ([`auth::authorize`]), serializes what
//! must be serialized and reports a [`ServiceError`] whose stable code
//! ([`cairn_models::ErrorCode`]) a door maps onto its transport. This crate depends on no
//! HTTP crate.
//!
//! - [`engine`]: assembling the service over a data directory; the vector index build.
//! - [`ops`]: the operations.
//! - [`auth`]: API keys, principals and the authorization policy.
//! - [`turns`]: the `agent-turn-v1` contract.
//! - [`documents`], [`messages`], [`recall`]: request and response types of those operations.
//! - [`events`], [`candidates`]: third-party evidence and the review queue.
//! - [`forget`]: deleting evidence and what derives from it.
//! - [`knowledge`]: entities, preferences, facts (supersession, conflicts, validity),
//!   relationships and their traversal, entity merges.
//! - [`reasoning`]: reasoning traces, steps, tool calls, tool statistics, similar traces.
//! - [`grants`]: agent grants (issue, suspend, revoke, restore) and resolving agent keys.
//! - [`backup`]: online backup of the embedded store and verified restore.

mod access;
pub mod auth;
pub mod backup;
pub mod candidates;
pub mod documents;
pub mod engine;
pub mod error;
pub mod events;
mod evidence;
pub mod forget;
pub mod grants;
pub mod knowledge;
pub mod messages;
pub mod migrate;
pub mod ops;
pub mod reasoning;
pub mod recall;
mod records;
pub mod suggestions;
pub mod turns;

pub use auth::{authorize, Auth, Principal};
pub use cairn_models::grant::Operation;
pub use engine::{Backend, DiskSpace, Engine, EngineOptions, IndexBuild, OPTIMIZE_AFTER_CHUNKS};
pub use error::ServiceError;
pub use ops::BatchOutcome;
