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

use std::{fmt, path::PathBuf, sync::Arc};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

pub use local::LocalStore;
pub use s3::S3Store;

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

/// Which blob store to use and how to reach it (the `[store]` table of `baton.toml`).
/// Every field has a default, so an empty table means a local store in `.baton/blobs`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// `"local"` (default) or `"s3"`.
    pub backend: String,
    /// Directory of the local backend (default `.baton/blobs`).
    pub dir: PathBuf,
    /// Settings of the S3 backend.
    pub s3: S3Settings,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            backend: "local".to_owned(),
            dir: PathBuf::from(".baton/blobs"),
            s3: S3Settings::default(),
        }
    }
}

/// Settings of the S3 backend (the `[store.s3]` table). Credentials left unset fall back
/// to the standard AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`, web identity, instance metadata); so do endpoint and region.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Settings {
    /// Endpoint URL of an S3-compatible server (e.g. `http://127.0.0.1:9000` for MinIO);
    /// `None` = AWS S3 of the region.
    pub endpoint: Option<String>,
    /// Bucket name (required).
    pub bucket: String,
    /// Region (default `us-east-1`, or `AWS_REGION`/`AWS_DEFAULT_REGION`).
    pub region: Option<String>,
    /// Prepended verbatim to each blob id to form its key, e.g. `"baton/blobs/"`.
    pub prefix: String,
    /// Access key id; needs [`S3Settings::secret_access_key`] too.
    pub access_key_id: Option<String>,
    /// Secret access key; never printed.
    pub secret_access_key: Option<String>,
    /// Allow a plain `http://` endpoint.
    pub allow_http: bool,
    /// Virtual-hosted-style requests (`https://bucket.host/key`) instead of path style
    /// (`https://host/bucket/key`). Default: path style when an endpoint is given,
    /// virtual-hosted style for AWS S3. With an endpoint and virtual-hosted style, the
    /// endpoint must already name the bucket (`https://bucket.host`).
    pub virtual_hosted_style: Option<bool>,
}

impl fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("prefix", &self.prefix)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("allow_http", &self.allow_http)
            .field("virtual_hosted_style", &self.virtual_hosted_style)
            .finish()
    }
}

/// Opens the blob store `settings` describe. Errors name the setting to fix.
pub fn open(settings: &StoreSettings) -> Result<SharedStore, StoreError> {
    match settings.backend.trim() {
        "local" | "" => {
            if settings.dir.as_os_str().is_empty() {
                return Err(StoreError::Config(
                    "store.backend = \"local\" needs store.dir (a directory for the blobs)"
                        .to_owned(),
                ));
            }
            Ok(Arc::new(LocalStore::new(&settings.dir)?))
        }
        "s3" => Ok(Arc::new(S3Store::new(&settings.s3)?)),
        other => Err(StoreError::Config(format!(
            "store.backend = {other:?} is not a backend: set it to \"local\" or \"s3\""
        ))),
    }
}

#[cfg(test)]
mod settings_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn defaults_to_a_local_store() {
        let s: StoreSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(s, StoreSettings::default());
        assert_eq!(s.backend, "local");
        assert_eq!(s.dir, PathBuf::from(".baton/blobs"));
        assert!(!s.s3.allow_http);
    }

    /// A misspelt key must not silently give a worker its own default store (a fleet whose
    /// workers disagree on the store cannot hand runs over).
    #[test]
    fn unknown_keys_are_refused() {
        let e = serde_json::from_str::<StoreSettings>(r#"{"directory": "/x"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `directory`"), "{e}");
        let e = serde_json::from_str::<StoreSettings>(r#"{"s3": {"buckett": "b"}}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `buckett`"), "{e}");
    }

    #[test]
    fn opens_a_local_store() {
        let dir = tempfile::tempdir().unwrap();
        let settings = StoreSettings {
            dir: dir.path().join("blobs"),
            ..StoreSettings::default()
        };
        let store = open(&settings).unwrap();
        assert!(store.describe().starts_with("local:"));
    }

    #[test]
    fn rejects_unknown_backends_and_missing_bucket() {
        let bad = StoreSettings {
            backend: "ftp".to_owned(),
            ..StoreSettings::default()
        };
        let e = open(&bad).unwrap_err().to_string();
        assert!(e.contains("store.backend = \"ftp\""), "{e}");

        let no_bucket = StoreSettings {
            backend: "s3".to_owned(),
            ..StoreSettings::default()
        };
        let e = open(&no_bucket).unwrap_err().to_string();
        assert!(e.contains("needs store.s3.bucket"), "{e}");
    }

    #[test]
    fn debug_hides_the_secret() {
        let s: StoreSettings = serde_json::from_value(serde_json::json!({
            "backend": "s3",
            "s3": {"bucket": "b", "access_key_id": "AKID", "secret_access_key": "s3cr3t-value"}
        }))
        .unwrap();
        let shown = format!("{s:?}");
        assert!(shown.contains("AKID"), "{shown}");
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
    }
}
