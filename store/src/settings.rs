//! Which blob store to use ([`StoreSettings`], the `[store]` table of `baton.toml`) and
//! [`open`], which opens it.

use std::{fmt, path::PathBuf, sync::Arc};

use serde::Deserialize;

use crate::{LocalStore, S3Store, SharedStore, StoreError};

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
    /// A worker's local cache of the blobs it read or wrote, in bytes (least recently used
    /// out; 0 = off). Default: 2 GiB for the S3 backend, off for a local one.
    pub cache_bytes: Option<u64>,
    /// Where that cache lives (default: `.baton-blob-cache` in the workspace root).
    pub cache_dir: Option<PathBuf>,
}

/// The default local cache of a worker on the S3 backend.
pub(crate) const DEFAULT_S3_CACHE_BYTES: u64 = 2 << 30;

impl StoreSettings {
    /// The budget of a worker's local blob cache (0 = off).
    pub fn cache_budget(&self) -> u64 {
        match (self.cache_bytes, self.backend.as_str()) {
            (Some(n), _) => n,
            (None, "s3") => DEFAULT_S3_CACHE_BYTES,
            (None, _) => 0,
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            backend: "local".to_owned(),
            dir: PathBuf::from(".baton/blobs"),
            s3: S3Settings::default(),
            cache_bytes: None,
            cache_dir: None,
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
mod tests {
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
