//! Blob ids and the [`BlobStore`] trait, with JSON helpers over it.

use std::{fmt, sync::Arc};

use serde::{Serialize, de::DeserializeOwned};

use crate::StoreError;

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

    /// Points the named reference `name` at blob `id` (last writer wins): the one mutable
    /// thing in the store, for caches keyed by something other than content (an environment's
    /// cache key). `name` is checked with [`check_ref_name`].
    async fn put_ref(&self, name: &str, id: &BlobId) -> Result<(), StoreError>;

    /// The blob reference `name` points at, `None` when it was never set.
    async fn get_ref(&self, name: &str) -> Result<Option<BlobId>, StoreError>;

    /// A short description for logs ("local:/var/baton/blobs", "s3://bucket/prefix").
    fn describe(&self) -> String;
}

/// A reference name: '/'-separated components of `[a-z0-9._-]`, none empty, `.` or `..`, at
/// most 200 bytes (`env/<hex>`).
pub fn check_ref_name(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        });
    if ok {
        Ok(())
    } else {
        Err(StoreError::Config(format!(
            "'{name}' is not a reference name ('/'-separated [a-z0-9._-] components)"
        )))
    }
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
