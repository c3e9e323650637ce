//! The local cache of a workspace (`.baton/snapshot-state.json`): size, mtime, ctime and inode
//! -> blob for files whose stamp can be trusted, plus the snapshot the tree is known to match
//! ([`local_snapshot`]). Missing or unreadable state only costs re-hashing.

use std::{
    collections::BTreeMap,
    fs,
    io::{self, Read, Write},
    os::unix::fs::MetadataExt,
    path::Path,
};

use nix::fcntl::OFlag;

use serde::{Deserialize, Serialize};

use super::{LOCAL_DIR, SnapshotError, SnapshotId, io_err, temp_name};
use crate::BlobId;
use crate::beneath::{Beneath, is_link_error};

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

/// The state directory of the workspace at `root`, opened beneath it: tools can
/// rename `.baton` and put a link or a directory of their own in its place, so it is never
/// reached by name. A link or a file there is not followed (with `create`, it is replaced by a
/// new directory); a directory owned by someone other than the worker (when the worker's uid
/// differs from the tools', e.g. root) is not trusted. `None`: no usable state directory.
fn state_dir(root: &Path, create: bool) -> io::Result<Option<Beneath>> {
    let root = Beneath::open(root)?;
    let name = Path::new(LOCAL_DIR);
    let dir = match root.open_dir(name) {
        Ok(dir) => dir,
        Err(e) if !create => {
            return match e.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Ok(None),
                _ if is_link_error(&e) => Ok(None),
                _ => Err(e),
            };
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => root.create_dirs(name)?,
        Err(e) if e.kind() == io::ErrorKind::NotADirectory || is_link_error(&e) => {
            tracing::warn!(root = %root.path().display(), "the workspace's {LOCAL_DIR} was not a directory (a link or a file, made by a tool?): replaced");
            root.remove_entry(name.as_os_str(), false)?;
            root.create_dirs(name)?
        }
        Err(e) => return Err(e),
    };
    let owner = dir.metadata()?.uid();
    if owner != nix::unistd::geteuid().as_raw() {
        tracing::warn!(root = %root.path().display(), owner, "the workspace's {LOCAL_DIR} is not the worker's (made by a tool?): its snapshot state is not used");
        return Ok(None);
    }
    Ok(Some(dir))
}

/// The local state; empty if missing or unreadable (everything is then hashed again).
pub(super) fn read_state(root: &Path) -> LocalState {
    let read = || -> io::Result<Option<Vec<u8>>> {
        let Some(dir) = state_dir(root, false)? else {
            return Ok(None);
        };
        let mut file = dir
            .open_regular_entry(STATE_FILE.as_ref(), OFlag::O_RDONLY)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    };
    read()
        .ok()
        .flatten()
        .and_then(|bytes| serde_json::from_slice::<LocalState>(&bytes).ok())
        .filter(|state| state.version == STATE_VERSION)
        .unwrap_or_default()
}

pub(super) fn write_state(root: &Path, state: &LocalState) -> Result<(), SnapshotError> {
    let path = root.join(LOCAL_DIR).join(STATE_FILE);
    let Some(dir) =
        state_dir(root, true).map_err(|e| io_err(&path, "open the local state directory", e))?
    else {
        // Not trusted: the state is only a cache, so work goes on without it.
        return Ok(());
    };
    let bytes = serde_json::to_vec(state).map_err(|e| SnapshotError::Io {
        path: path.clone(),
        detail: format!("cannot encode the local snapshot state: {e}"),
    })?;
    let tmp = temp_name();
    let written = dir
        .open_entry(
            tmp.as_ref(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            0o600,
        )
        .and_then(|mut file| file.write_all(&bytes))
        .map_err(|e| io_err(&path, "write the local snapshot state", e));
    let renamed = written.and_then(|()| {
        dir.rename_entry(tmp.as_ref(), STATE_FILE.as_ref())
            .map_err(|e| io_err(&path, "replace the local snapshot state", e))
    });
    if renamed.is_err() {
        let _ = dir.remove_entry(tmp.as_ref(), false);
    }
    renamed
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

/// Drops what the local state of the tree at `root` says (its snapshot and every file's
/// cached hash), so that the next [`restore`] or [`take`] hashes every file again. For a tree
/// that changes hands (a worker reusing one run's workspace for another): its tools
/// may have written the state, which a run may trust about its own tree but no other run may.
///
/// [`take`]: fn@super::take
/// [`restore`]: fn@super::restore
pub fn forget_local_state(root: &Path) -> Result<(), SnapshotError> {
    write_state(
        root,
        &LocalState {
            version: STATE_VERSION,
            ..LocalState::default()
        },
    )
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

    /// A tree handed from one run to another. Its tools wrote the state, claiming
    /// a file holds what the next run's snapshot has there; once the state is forgotten the
    /// restore hashes the file and writes the snapshot's content.
    #[tokio::test]
    async fn a_forged_state_is_not_trusted_once_forgotten() {
        let (good, evil) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(good.path(), "a.txt", "good\n");
        write(evil.path(), "a.txt", "evil\n");
        age(good.path());
        age(evil.path());
        let store = MemStore::default();
        let wanted = take(&store, good.path()).await.unwrap();
        take(&store, evil.path()).await.unwrap();
        let manifest: crate::snapshot::Manifest =
            crate::get_json(&store, &wanted.id).await.unwrap();
        let crate::snapshot::Entry::File { blob, .. } = &manifest.entries["a.txt"] else {
            panic!("a.txt is a file");
        };
        let path = evil.path().join(LOCAL_DIR).join(STATE_FILE);
        let mut state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        state["files"]["a.txt"]["blob"] = serde_json::Value::String(blob.clone());
        std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();

        forget_local_state(evil.path()).unwrap();
        assert_eq!(local_snapshot(evil.path()), None);
        let restored = restore(&store, evil.path(), &wanted.id).await.unwrap();
        assert_eq!(restored.written, 1);
        assert_eq!(
            std::fs::read_to_string(evil.path().join("a.txt")).unwrap(),
            "good\n"
        );
    }

    /// A tool replaced `.baton` with a link to a directory outside. Neither take nor
    /// restore writes through it; the link is replaced by a real directory of the worker's.
    #[tokio::test]
    async fn a_state_directory_swapped_for_a_link_is_never_written_through() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let outside = tempfile::tempdir().unwrap();
        sample(src.path());
        let store = MemStore::default();
        for root in [src.path(), dst.path()] {
            let _ = std::fs::remove_dir_all(root.join(LOCAL_DIR));
            std::os::unix::fs::symlink(outside.path(), root.join(LOCAL_DIR)).unwrap();
        }
        let taken = take(&store, src.path()).await.unwrap();
        restore(&store, dst.path(), &taken.id).await.unwrap();
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "written outside"
        );
        for root in [src.path(), dst.path()] {
            let meta = std::fs::symlink_metadata(root.join(LOCAL_DIR)).unwrap();
            assert!(meta.is_dir(), "{}", root.display());
            assert_eq!(local_snapshot(root), Some(taken.id.clone()));
        }
        // A forged state in a link's place is not read either.
        std::fs::write(outside.path().join(STATE_FILE), "{}").unwrap();
        std::fs::remove_dir_all(src.path().join(LOCAL_DIR)).unwrap();
        std::os::unix::fs::symlink(outside.path(), src.path().join(LOCAL_DIR)).unwrap();
        assert_eq!(local_snapshot(src.path()), None);
    }
}
