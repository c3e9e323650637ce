//! The S3 backend: one object per blob, key = prefix + id, in any S3-compatible store
//! (AWS S3, MinIO, moto), through the `object_store` crate.
//!
//! `put` first asks whether the object exists (HEAD) and uploads only if it does not;
//! two workers racing to store the same blob both upload identical bytes, which is
//! harmless. `get` verifies the bytes against the id.

use std::{fmt, sync::Arc};

use object_store::{
    GetOptions, ObjectStore, PutOptions, PutPayload,
    aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsCredential},
    path::Path,
};

use crate::{BlobId, BlobStore, S3Settings, StoreError};

/// A blob store in an S3 bucket. Its `Debug` shows where it points, never credentials.
pub struct S3Store {
    store: Arc<dyn ObjectStore>,
    bucket: String,
    prefix: String,
    endpoint: Option<String>,
    region: String,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// `Some(trimmed)` unless `value` is missing or blank.
fn non_blank(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn config(msg: impl Into<String>) -> StoreError {
    StoreError::Config(msg.into())
}

impl S3Store {
    /// A store for `settings`. Endpoint, region and credentials left unset come from the
    /// standard AWS environment variables. Nothing is contacted yet.
    pub fn new(settings: &S3Settings) -> Result<Self, StoreError> {
        let bucket = settings.bucket.trim().to_owned();
        if bucket.is_empty() {
            return Err(config(
                "store.backend = \"s3\" needs store.s3.bucket (the bucket to keep blobs in)",
            ));
        }
        let prefix = settings.prefix.trim().trim_start_matches('/').to_owned();
        if Path::parse(format!("{prefix}{}", BlobId::of(b""))).is_err() {
            return Err(config(format!(
                "store.s3.prefix {:?} does not make valid object keys (use something like \
                 \"baton/blobs/\": no empty, \".\" or \"..\" path segments)",
                settings.prefix
            )));
        }

        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&bucket);
        if let Some(region) = non_blank(&settings.region) {
            builder = builder.with_region(region);
        }
        if let Some(endpoint) = non_blank(&settings.endpoint) {
            let http_allowed = settings.allow_http
                || std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
            if endpoint.starts_with("http://") && !http_allowed {
                return Err(config(format!(
                    "store.s3.endpoint {endpoint} is plain http: set store.s3.allow_http = true \
                     to allow it (or use https)"
                )));
            }
            // Also as the S3-specific endpoint, which would otherwise win over ours when
            // AWS_ENDPOINT_URL_S3 is set.
            builder = builder
                .with_endpoint(endpoint)
                .with_config(AmazonS3ConfigKey::S3Endpoint, endpoint);
        }
        if settings.allow_http {
            builder = builder.with_allow_http(true);
        }
        let endpoint = builder
            .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
            .or_else(|| builder.get_config_value(&AmazonS3ConfigKey::Endpoint));
        let virtual_hosted = settings.virtual_hosted_style.unwrap_or(endpoint.is_none());
        builder = builder.with_virtual_hosted_style_request(virtual_hosted);

        match (
            non_blank(&settings.access_key_id),
            non_blank(&settings.secret_access_key),
        ) {
            (Some(key_id), Some(secret)) => {
                let credential = AwsCredential {
                    key_id: key_id.to_owned(),
                    secret_key: secret.to_owned(),
                    token: None,
                };
                builder = builder.with_credentials(Arc::new(
                    object_store::StaticCredentialProvider::new(credential),
                ));
            }
            (Some(_), None) => {
                return Err(config(
                    "store.s3.access_key_id is set but store.s3.secret_access_key is not: set \
                     both, or neither to use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
                ));
            }
            (None, Some(_)) => {
                return Err(config(
                    "store.s3.secret_access_key is set but store.s3.access_key_id is not: set \
                     both, or neither to use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
                ));
            }
            (None, None) => {}
        }

        let region = builder
            .get_config_value(&AmazonS3ConfigKey::Region)
            .unwrap_or_else(|| "us-east-1".to_owned());
        // object_store's messages name no secret, only the setting at fault.
        let store = builder
            .build()
            .map_err(|e| config(format!("store.s3 (bucket {bucket}): {e}")))?;
        Ok(Self {
            store: Arc::new(store),
            bucket,
            prefix,
            endpoint,
            region,
        })
    }

    /// The object key of blob `id`: prefix + id.
    pub fn key_of(&self, id: &BlobId) -> String {
        format!("{}{id}", self.prefix)
    }

    fn ref_location(&self, name: &str) -> Result<Path, StoreError> {
        Path::parse(format!("{}refs/{name}", self.prefix)).map_err(|e| StoreError::Backend {
            op: format!("naming reference {name}"),
            detail: e.to_string(),
        })
    }

    fn location(&self, id: &BlobId) -> Result<Path, StoreError> {
        Path::parse(self.key_of(id)).map_err(|e| StoreError::Backend {
            op: format!("naming blob {}", short(id)),
            detail: e.to_string(),
        })
    }

    /// Maps a failed `what` ("upload", "download", "lookup") of blob `id`. A missing object
    /// is [`StoreError::NotFound`] when reading; a missing bucket (or a missing object on
    /// upload, which can only mean that) is a backend error naming the bucket.
    fn failure(&self, what: &str, id: &BlobId, e: object_store::Error) -> StoreError {
        let detail = error_chain(&e);
        let not_found = matches!(e, object_store::Error::NotFound { .. });
        if not_found && what != "upload" && !detail.contains("NoSuchBucket") {
            return StoreError::NotFound(id.clone());
        }
        let detail = if not_found || detail.contains("NoSuchBucket") {
            format!(
                "bucket {} does not exist or is not reachable as configured (create it, or \
                 fix store.s3.bucket / store.s3.endpoint): {detail}",
                self.bucket
            )
        } else {
            detail
        };
        StoreError::Backend {
            op: format!("{what} of blob {}.. in {}", short(id), self.describe()),
            detail,
        }
    }
}

fn short(id: &BlobId) -> &str {
    id.as_str().get(..12).unwrap_or(id.as_str())
}

use crate::error::error_chain;

#[async_trait::async_trait]
impl BlobStore for S3Store {
    async fn put(&self, bytes: Vec<u8>) -> Result<BlobId, StoreError> {
        let id = BlobId::of(&bytes);
        if self.contains(&id).await? {
            return Ok(id);
        }
        let location = self.location(&id)?;
        self.store
            .put_opts(&location, PutPayload::from(bytes), PutOptions::default())
            .await
            .map_err(|e| self.failure("upload", &id, e))?;
        Ok(id)
    }

    async fn get(&self, id: &BlobId) -> Result<Vec<u8>, StoreError> {
        let location = self.location(id)?;
        let result = self
            .store
            .get_opts(&location, GetOptions::default())
            .await
            .map_err(|e| self.failure("download", id, e))?;
        let bytes = result
            .bytes()
            .await
            .map_err(|e| self.failure("download", id, e))?;
        if BlobId::of(&bytes) != *id {
            return Err(StoreError::Corrupt(id.clone()));
        }
        Ok(bytes.to_vec())
    }

    async fn contains(&self, id: &BlobId) -> Result<bool, StoreError> {
        let location = self.location(id)?;
        match self
            .store
            .get_opts(&location, GetOptions::default().with_head(true))
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.failure("lookup", id, e)),
        }
    }

    async fn put_ref(&self, name: &str, id: &BlobId) -> Result<(), StoreError> {
        crate::blob::check_ref_name(name)?;
        let location = self.ref_location(name)?;
        self.store
            .put_opts(
                &location,
                PutPayload::from(id.to_string().into_bytes()),
                PutOptions::default(),
            )
            .await
            .map_err(|e| self.failure("upload", id, e))?;
        Ok(())
    }

    async fn get_ref(&self, name: &str) -> Result<Option<BlobId>, StoreError> {
        crate::blob::check_ref_name(name)?;
        let location = self.ref_location(name)?;
        let result = match self.store.get_opts(&location, GetOptions::default()).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => {
                return Err(StoreError::Backend {
                    op: format!("read of reference {name} in {}", self.describe()),
                    detail: error_chain(&e),
                });
            }
        };
        let bytes = result.bytes().await.map_err(|e| StoreError::Backend {
            op: format!("read of reference {name} in {}", self.describe()),
            detail: error_chain(&e),
        })?;
        BlobId::parse(String::from_utf8_lossy(&bytes).trim()).map(Some)
    }

    fn describe(&self) -> String {
        let mut text = format!("s3://{}/{}", self.bucket, self.prefix);
        if let Some(endpoint) = &self.endpoint {
            text.push_str(" at ");
            text.push_str(endpoint);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn settings() -> S3Settings {
        S3Settings {
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            bucket: "blobs".to_owned(),
            prefix: "baton/blobs/".to_owned(),
            access_key_id: Some("AKIDEXAMPLE".to_owned()),
            secret_access_key: Some("very-secret-key".to_owned()),
            allow_http: true,
            ..S3Settings::default()
        }
    }

    #[test]
    fn keys_are_prefix_plus_id_and_debug_hides_secrets() {
        let store = S3Store::new(&settings()).unwrap();
        let id = BlobId::of(b"x");
        assert_eq!(store.key_of(&id), format!("baton/blobs/{id}"));
        assert_eq!(
            store.describe(),
            "s3://blobs/baton/blobs/ at http://127.0.0.1:9"
        );
        let shown = format!("{store:?}");
        assert!(!shown.contains("very-secret-key"), "{shown}");
        assert!(shown.contains("blobs"), "{shown}");
    }

    #[test]
    fn config_errors_name_the_setting() {
        let e = S3Store::new(&S3Settings::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("store.s3.bucket"), "{e}");

        let e = S3Store::new(&S3Settings {
            allow_http: false,
            ..settings()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("store.s3.allow_http"), "{e}");

        let e = S3Store::new(&S3Settings {
            secret_access_key: None,
            ..settings()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("store.s3.secret_access_key"), "{e}");

        let e = S3Store::new(&S3Settings {
            prefix: "a//b/".to_owned(),
            ..settings()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("store.s3.prefix"), "{e}");
    }
}
