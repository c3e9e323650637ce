//! The snapshot format: a [`Manifest`] (stored as a JSON blob; its blob id is the snapshot id)
//! and its validation before a restore touches anything ([`check_manifest`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{LOCAL_DIR, SnapshotError};
use crate::BlobId;

/// The manifest format written by [`take`] and the only one [`restore`] reads.
///
/// [`take`]: fn@super::take
/// [`restore`]: fn@super::restore
pub const MANIFEST_VERSION: u32 = 1;

/// A snapshot id: the blob id of its [`Manifest`].
pub type SnapshotId = BlobId;

/// A snapshot: the whole tree under a workspace root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// Every directory, file and symbolic link, keyed by '/'-separated path relative to the
    /// root. Every entry's parent directory is itself an entry.
    pub entries: BTreeMap<String, Entry>,
}

/// One entry of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// A regular file.
    File {
        /// Blob id of the content.
        blob: String,
        /// Size in bytes.
        size: u64,
        /// Whether any execute bit is set (restored as the execute bits matching the read
        /// bits).
        executable: bool,
    },
    /// A directory (listed even when empty).
    Dir,
    /// A symbolic link, recreated as is (its target may be relative, absolute or dangling).
    Symlink {
        /// What the link points at.
        target: String,
    },
}

/// A validated manifest entry.
pub(crate) enum Target {
    Dir,
    File {
        blob: BlobId,
        size: u64,
        executable: bool,
    },
    Symlink {
        target: String,
    },
}

/// Checks that `path` is a plain relative path below the root, outside `.baton`.
fn check_path(path: &str) -> Result<(), SnapshotError> {
    let bad = |why: &str| Err(SnapshotError::BadManifest(format!("path '{path}': {why}")));
    if path.is_empty() {
        return bad("empty path");
    }
    if path.starts_with('/') {
        return bad("absolute paths are not allowed");
    }
    for component in path.split('/') {
        match component {
            "" => return bad("empty path component"),
            "." | ".." => return bad("'.' and '..' components are not allowed"),
            c if c.contains('\0') => return bad("NUL byte in path"),
            _ => {}
        }
    }
    if path.split('/').next() == Some(LOCAL_DIR) {
        return bad("the local state directory .baton is not part of snapshots");
    }
    Ok(())
}

/// Validates a manifest: version, paths, parents, blob ids, link targets.
pub(crate) fn check_manifest(
    manifest: Manifest,
) -> Result<BTreeMap<String, Target>, SnapshotError> {
    if manifest.version != MANIFEST_VERSION {
        return Err(SnapshotError::BadManifest(format!(
            "unsupported manifest version {} (this worker reads version {MANIFEST_VERSION}; \
             upgrade the worker)",
            manifest.version
        )));
    }
    for path in manifest.entries.keys() {
        check_path(path)?;
        if let Some((parent, _)) = path.rsplit_once('/')
            && !matches!(manifest.entries.get(parent), Some(Entry::Dir))
        {
            return Err(SnapshotError::BadManifest(format!(
                "path '{path}': its parent '{parent}' is not a directory of the snapshot"
            )));
        }
    }
    manifest
        .entries
        .into_iter()
        .map(|(path, entry)| {
            let target = match entry {
                Entry::Dir => Target::Dir,
                Entry::File {
                    blob,
                    size,
                    executable,
                } => Target::File {
                    blob: BlobId::parse(&blob).map_err(|_| {
                        SnapshotError::BadManifest(format!(
                            "path '{path}': '{blob}' is not a blob id"
                        ))
                    })?,
                    size,
                    executable,
                },
                Entry::Symlink { target } => {
                    if target.is_empty() || target.contains('\0') {
                        return Err(SnapshotError::BadManifest(format!(
                            "path '{path}': symbolic link target is empty or contains NUL"
                        )));
                    }
                    Target::Symlink { target }
                }
            };
            Ok((path, target))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::fs;

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::{
        BlobStore, put_json,
        snapshot::{restore, test_support::MemStore},
    };

    #[tokio::test]
    async fn malicious_manifests_are_rejected_before_anything_is_written() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("ws");
        fs::create_dir(&root).unwrap();
        let store = MemStore::default();
        let blob = store.put(b"pwned\n".to_vec()).await.unwrap();
        let file = || Entry::File {
            blob: blob.to_string(),
            size: 6,
            executable: false,
        };
        let outside = base.path().join("x");
        let absolute = outside.to_str().unwrap().to_owned();
        let cases: Vec<Vec<(&str, Entry)>> = vec![
            vec![("../x", file())],
            vec![("a", Entry::Dir), ("a/../../x", file())],
            vec![(absolute.as_str(), file())],
            vec![("/etc/x", file())],
            vec![("", file())],
            vec![("./x", file())],
            vec![("a", Entry::Dir), ("a//x", file())],
            vec![("missing/x", file())],
            vec![("f", file()), ("f/x", file())],
            vec![(".baton", Entry::Dir), (".baton/x", file())],
            vec![(
                "y",
                Entry::File {
                    blob: "../../etc/passwd".to_owned(),
                    size: 1,
                    executable: false,
                },
            )],
        ];
        for entries in cases {
            let manifest = Manifest {
                version: MANIFEST_VERSION,
                entries: entries
                    .into_iter()
                    .map(|(p, e)| (p.to_owned(), e))
                    .chain([("ok.txt".to_owned(), file())])
                    .collect(),
            };
            let id = put_json(&store, &manifest).await.unwrap();
            let err = restore(&store, &root, &id).await.unwrap_err();
            assert!(
                matches!(err, SnapshotError::BadManifest(_)),
                "{manifest:?}: {err}"
            );
        }
        assert!(!outside.exists());
        assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
        assert_eq!(fs::read_dir(base.path()).unwrap().count(), 1);

        let future = Manifest {
            version: 2,
            entries: BTreeMap::new(),
        };
        let id = put_json(&store, &future).await.unwrap();
        let err = restore(&store, &root, &id).await.unwrap_err();
        assert!(err.to_string().contains("unsupported manifest version 2"));
    }

    #[test]
    fn manifest_json_shape() {
        let manifest = Manifest {
            version: 1,
            entries: [
                ("d".to_owned(), Entry::Dir),
                (
                    "d/f".to_owned(),
                    Entry::File {
                        blob: "ab".to_owned(),
                        size: 2,
                        executable: true,
                    },
                ),
                (
                    "l".to_owned(),
                    Entry::Symlink {
                        target: "d/f".to_owned(),
                    },
                ),
            ]
            .into(),
        };
        assert_eq!(
            serde_json::to_string(&manifest).unwrap(),
            r#"{"version":1,"entries":{"d":{"type":"dir"},"d/f":{"type":"file","blob":"ab","size":2,"executable":true},"l":{"type":"symlink","target":"d/f"}}}"#
        );
    }
}
