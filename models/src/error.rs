//! Error classification shared by every crate.

/// The class of an error: what a caller can do about it. Every library crate's error enum
/// maps each variant onto one of these; the HTTP layer maps these (and the specific codes)
/// onto statuses in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The input is wrong; retrying the same request will fail again.
    BadInput,
    /// The thing asked for does not exist (in this scope).
    NotFound,
    /// The request contradicts what is stored (e.g. a turn id reused with other content).
    Conflict,
    /// A dependency (model, storage) is not available; retrying later may work.
    Unavailable,
    /// A bug or an unexpected state.
    Internal,
}

/// Errors from validating domain values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("invalid {field}: {reason}")]
    InvalidScope { field: &'static str, reason: String },
    #[error("invalid identifier {value:?}: {reason}")]
    InvalidId { value: String, reason: String },
    #[error("invalid value for {field}: {reason}")]
    InvalidValue { field: &'static str, reason: String },
    /// A reference that does not follow the grammar (see [`crate::refs`]).
    #[error(
        "invalid ref {value:?}: expected doc:<id>[#<chunk>], msg:<conversation>/<seq>, \
         conv:<id>, turn:<id>, evt:<id>, cand:<id> or mem:<id>"
    )]
    InvalidRef { value: String },
}

impl ModelError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ModelError::InvalidScope { .. }
            | ModelError::InvalidId { .. }
            | ModelError::InvalidValue { .. }
            | ModelError::InvalidRef { .. } => ErrorKind::BadInput,
        }
    }
}
