//! The blob store: content-addressed storage for what must not live in workflow history
//! (conversation segments, full tool outputs, workspace snapshots).
//!
//! A blob's id is the lowercase hex SHA-256 of its bytes, so writing the same bytes twice
//! is a no-op and any worker (or the CLI) can read what another wrote. Backends:
//! - [`local`]: a directory (default `.baton/blobs`), for one machine or a shared volume;
//! - [`s3`]: any S3-compatible object store (AWS S3, MinIO, moto), via `object_store`.

pub mod local;
pub mod s3;
pub mod snapshot;

use std::{fmt, sync::Arc};

use serde::{Serialize, de::DeserializeOwned};

/// The id of a blob: lowercase hex SHA-256 of its bytes (64 characters).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlobId(String);

impl BlobId {
    /// The id of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest;
        Self(hex::encode(sha2::Sha256::digest(bytes)))
    }

    /// Parses an id (64 lowercase hex characters); anything else is an error naming what
    /// was wrong.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        if s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(Self(s.to_owned()))
        } else {
            Err(StoreError::BadId(s.to_owned()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Failures of a blob store.
#[derive(Debug, thiserror::Error)]
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

/// A content-addressed blob store. Implementations are cheap to share (`Arc<dyn BlobStore>`).
#[async_trait::async_trait]
pub trait BlobStore: Send + Sync + fmt::Debug {
    /// Stores `bytes` and returns their id. Idempotent: storing existing content succeeds
    /// without rewriting it.
    async fn put(&self, bytes: Vec<u8>) -> Result<BlobId, StoreError>;

    /// The bytes of blob `id`, verified against the id.
    async fn get(&self, id: &BlobId) -> Result<Vec<u8>, StoreError>;

    /// Whether blob `id` exists.
    async fn contains(&self, id: &BlobId) -> Result<bool, StoreError>;

    /// A short description for logs ("local:/var/baton/blobs", "s3://bucket/prefix").
    fn describe(&self) -> String;
}

/// A shared blob store.
pub type SharedStore = Arc<dyn BlobStore>;

/// Stores `value` as JSON.
pub async fn put_json<T: Serialize + ?Sized>(
    store: &dyn BlobStore,
    value: &T,
) -> Result<BlobId, StoreError> {
    let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Backend {
        op: "JSON encoding".to_owned(),
        detail: e.to_string(),
    })?;
    store.put(bytes).await
}

/// Reads blob `id` as JSON.
pub async fn get_json<T: DeserializeOwned>(
    store: &dyn BlobStore,
    id: &BlobId,
) -> Result<T, StoreError> {
    let bytes = store.get(id).await?;
    serde_json::from_slice(&bytes).map_err(|e| StoreError::Decode {
        id: id.clone(),
        detail: e.to_string(),
    })
}
