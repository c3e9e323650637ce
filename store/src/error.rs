//! Failures of a blob store.

use crate::BlobId;

/// Failures of a blob store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No blob has this id.
    #[error("blob {0} is not in the store (was it written to another store, or deleted?)")]
    NotFound(BlobId),
    /// What was read does not hash to its id.
    #[error("blob {0} is corrupt: its content does not match its id")]
    Corrupt(BlobId),
    /// Not a blob id.
    #[error("'{0}' is not a blob id (expected 64 lowercase hex characters)")]
    BadId(String),
    /// The store's configuration is unusable.
    #[error("blob store configuration: {0}")]
    Config(String),
    /// The backend failed (I/O, network, permissions).
    #[error("blob store {op} failed: {detail}")]
    Backend {
        /// What was being done, e.g. "write of blob ab12..".
        op: String,
        /// The underlying error.
        detail: String,
    },
    /// A blob did not decode as the expected JSON.
    #[error("blob {id} is not the expected JSON: {detail}")]
    Decode {
        /// The blob.
        id: BlobId,
        /// The decoder's message.
        detail: String,
    },
}

/// `e` and its sources, `: `-separated, without repeating a source the message already
/// includes.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}
