//! The local cache of a workspace (`.baton/snapshot-state.json`): size, mtime, ctime and inode
//! -> blob for files whose stamp can be trusted, plus the snapshot the tree is known to match
//! ([`local_snapshot`]). Missing or unreadable state only costs re-hashing.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::{LOCAL_DIR, SnapshotError, SnapshotId, io_err, temp_name};
use crate::BlobId;

/// The local state file, inside [`LOCAL_DIR`].
pub const STATE_FILE: &str = "snapshot-state.json";

/// A file whose mtime is within this many nanoseconds of the moment it was hashed is not
/// cached: a write right after hashing could leave its timestamp unchanged.
pub const RACY_WINDOW_NS: i64 = 2_000_000_000;

pub(super) const STATE_VERSION: u32 = 1;

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) size: u64,
    pub(super) mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
}

impl Stamp {
    pub(super) fn of(meta: &fs::Metadata) -> Self {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Self {
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct CacheEntry {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    blob: String,
}

impl CacheEntry {
    pub(super) fn new(stamp: Stamp, blob: &BlobId) -> Self {
        Self {
            size: stamp.size,
            mtime_ns: stamp.mtime_ns,
            ctime_ns: stamp.ctime_ns,
            ino: stamp.ino,
            blob: blob.to_string(),
        }
    }

    /// The cached blob, if `stamp` is what was cached.
    pub(super) fn blob_if(&self, stamp: Stamp) -> Option<BlobId> {
        let cached = Stamp {
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
        };
        if cached == stamp {
            BlobId::parse(&self.blob).ok()
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct LocalState {
    pub(super) version: u32,
    /// The snapshot the tree is known to match.
    pub(super) last_snapshot: Option<String>,
    /// Path -> what its content hashed to, for files whose stamp can be trusted.
    pub(super) files: BTreeMap<String, CacheEntry>,
}

fn state_path(root: &Path) -> PathBuf {
    root.join(LOCAL_DIR).join(STATE_FILE)
}

/// The local state; empty if missing or unreadable (everything is then hashed again).
pub(super) fn read_state(root: &Path) -> LocalState {
    fs::read(state_path(root))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<LocalState>(&bytes).ok())
        .filter(|state| state.version == STATE_VERSION)
        .unwrap_or_default()
}

pub(super) fn write_state(root: &Path, state: &LocalState) -> Result<(), SnapshotError> {
    let dir = root.join(LOCAL_DIR);
    fs::create_dir_all(&dir).map_err(|e| io_err(&dir, "create the local state directory", e))?;
    let path = state_path(root);
    let bytes = serde_json::to_vec(state).map_err(|e| SnapshotError::Io {
        path: path.clone(),
        detail: format!("cannot encode the local snapshot state: {e}"),
    })?;
    let tmp = dir.join(temp_name());
    fs::write(&tmp, bytes).map_err(|e| io_err(&tmp, "write the local snapshot state", e))?;
    fs::rename(&tmp, &path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err(&path, "replace the local snapshot state", e)
    })
}

/// The snapshot the workspace at `root` is known to match: the last one [`take`]n or
/// [`restore`]d there. `None` without (readable) local state, or while a restore is under way
/// or failed halfway.
///
/// This records what this module did; changes made to the tree since then are not detected.
/// To be sure, [`take`] a snapshot (cheap when nothing changed) and compare ids.
///
/// [`take`]: fn@super::take
/// [`restore`]: fn@super::restore
pub fn local_snapshot(root: &Path) -> Option<SnapshotId> {
    read_state(root)
        .last_snapshot
        .and_then(|id| BlobId::parse(&id).ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::snapshot::{
        restore, take,
        test_support::{MemStore, age, puts, sample, tree, write},
    };

    #[tokio::test]
    async fn an_unchanged_tree_uploads_and_hashes_nothing() {
        let src = tempfile::tempdir().unwrap();
        sample(src.path());
        age(src.path());
        let store = MemStore::default();
        let first = take(&store, src.path()).await.unwrap();
        assert_eq!(first.hashed, 5);
        let puts_before = puts(&store);

        let second = take(&store, src.path()).await.unwrap();
        assert_eq!(second.id, first.id);
        assert_eq!((second.uploaded, second.uploaded_bytes), (0, 0));
        assert_eq!(second.hashed, 0);
        assert_eq!(puts(&store), puts_before);
    }

    #[tokio::test]
    async fn recently_modified_files_are_hashed_again_but_not_uploaded() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "fresh.txt", "just written\n");
        let store = MemStore::default();
        let first = take(&store, src.path()).await.unwrap();
        let second = take(&store, src.path()).await.unwrap();
        assert_eq!(second.id, first.id);
        assert_eq!((second.hashed, second.uploaded), (1, 0));
    }

    #[tokio::test]
    async fn a_new_store_gets_every_blob_despite_the_cache() {
        let src = tempfile::tempdir().unwrap();
        sample(src.path());
        age(src.path());
        let first = take(&MemStore::default(), src.path()).await.unwrap();

        let fresh = MemStore::default();
        let second = take(&fresh, src.path()).await.unwrap();
        assert_eq!(second.id, first.id);
        assert_eq!((second.hashed, second.uploaded), (0, 4));
        let dst = tempfile::tempdir().unwrap();
        restore(&fresh, dst.path(), &second.id).await.unwrap();
        assert_eq!(tree(dst.path()), tree(src.path()));
    }

    #[tokio::test]
    async fn local_snapshot_follows_take_and_restore() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        sample(src.path());
        age(src.path());
        let store = MemStore::default();
        assert_eq!(local_snapshot(src.path()), None);

        let taken = take(&store, src.path()).await.unwrap();
        assert_eq!(local_snapshot(src.path()), Some(taken.id.clone()));

        assert_eq!(local_snapshot(dst.path()), None);
        restore(&store, dst.path(), &taken.id).await.unwrap();
        assert_eq!(local_snapshot(dst.path()), Some(taken.id.clone()));

        // The restore refreshed the cache: nothing is hashed or uploaded again.
        let again = take(&store, dst.path()).await.unwrap();
        assert_eq!(again.id, taken.id);
        assert_eq!((again.hashed, again.uploaded), (0, 0));
    }
}
