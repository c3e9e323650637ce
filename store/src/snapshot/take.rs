//! Taking a snapshot: walk the tree, hash what the cache cannot vouch for, upload the blobs
//! the store lacks, then the manifest.

use std::{
    collections::BTreeMap,
    fs, io,
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use super::{
    Entry, LOCAL_DIR, SnapshotError, SnapshotId, blocking,
    cache::{
        CacheEntry, LocalState, RACY_WINDOW_NS, STATE_VERSION, Stamp, read_state, write_state,
    },
    child_path, executable, hash_beneath, io_err, libc_errno,
    send::{send_blobs, send_manifest},
};
use crate::{BlobId, BlobStore};

/// Files larger than this are left out of snapshots by default (64 MiB).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 * 1024 * 1024;

/// How [`take_with`] snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Files larger than this are left out and listed in [`Taken::skipped`].
    pub max_file_size: u64,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        Self {
            max_file_size: DEFAULT_MAX_FILE_SIZE,
        }
    }
}

/// What [`take`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The snapshot id.
    pub id: SnapshotId,
    /// Regular files in the snapshot.
    pub files: usize,
    /// File blobs uploaded (the store lacked them); the manifest is not counted.
    pub uploaded: usize,
    /// Bytes of the uploaded file blobs.
    pub uploaded_bytes: u64,
    /// Files whose content was read and hashed (not found unchanged in the local cache).
    pub hashed: usize,
    /// Paths left out of the snapshot, sorted: files over the size limit, unreadable files
    /// and directories, names or link targets that are not UTF-8, sockets, pipes and devices.
    /// Worth a warning: a restore elsewhere will not have them, and a restore of this
    /// snapshot here deletes them.
    pub skipped: Vec<String>,
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Snapshots the workspace at `root` with [`SnapshotOptions::default`]; see [`take_with`].
pub async fn take(store: &dyn BlobStore, root: &Path) -> Result<Taken, SnapshotError> {
    take_with(store, root, &SnapshotOptions::default()).await
}

/// Snapshots the workspace at `root` into `store` and records it as the local snapshot.
///
/// Walks `root` without following symbolic links (skipping `.baton` at the root), hashes the
/// files not found unchanged in the local cache, uploads the blobs the store lacks, then the
/// manifest. Files changed or removed while the snapshot is taken are recorded as found when
/// uploaded. Nothing in the workspace is modified except the local state in `.baton`.
pub async fn take_with(
    store: &dyn BlobStore,
    root: &Path,
    options: &SnapshotOptions,
) -> Result<Taken, SnapshotError> {
    let max = options.max_file_size;
    let Scan {
        mut entries,
        mut files,
        mut skipped,
        hashed,
        last_snapshot,
    } = {
        let owned = root.to_path_buf();
        blocking(root, move || scan_tree(&owned, max)).await?
    };

    // Blobs named by the cache were in the store when the last snapshot was taken or restored;
    // if its manifest is still there (manifests are written after their blobs), so are they.
    let last_present = match &last_snapshot {
        Some(id) => store.contains(id).await?,
        None => false,
    };
    let mut unsure: BTreeMap<BlobId, Vec<String>> = BTreeMap::new();
    for (path, file) in &files {
        if !(file.from_cache && last_present) {
            unsure
                .entry(file.blob.clone())
                .or_default()
                .push(path.clone());
        }
    }
    let sent = send_blobs(store, root, unsure, max, &mut entries, &mut skipped).await?;
    for path in &sent.changed {
        files.remove(path);
    }
    skipped.sort();

    let known = last_snapshot.as_ref().filter(|_| last_present);
    let (id, file_count) = send_manifest(store, root, entries, known).await?;

    let state = LocalState {
        version: STATE_VERSION,
        last_snapshot: Some(id.to_string()),
        files: files
            .into_iter()
            .filter(|(_, f)| f.cacheable)
            .map(|(path, f)| (path, CacheEntry::new(f.stamp, &f.blob)))
            .collect(),
    };
    let owned = root.to_path_buf();
    blocking(root, move || write_state(&owned, &state)).await?;
    if !skipped.is_empty() {
        tracing::debug!(skipped = skipped.len(), root = %root.display(), "files left out of the workspace snapshot");
    }
    Ok(Taken {
        id,
        files: file_count,
        uploaded: sent.uploaded,
        uploaded_bytes: sent.bytes,
        hashed,
        skipped,
    })
}

/// A regular file met by [`scan_tree`].
struct ScannedFile {
    stamp: Stamp,
    blob: BlobId,
    /// The blob came from the local cache (the file was not read).
    from_cache: bool,
    /// The stamp can be trusted to identify this content next time.
    cacheable: bool,
}

struct Scan {
    entries: BTreeMap<String, Entry>,
    files: BTreeMap<String, ScannedFile>,
    skipped: Vec<String>,
    hashed: usize,
    last_snapshot: Option<BlobId>,
}

impl Scan {
    /// Records the regular file `rel`: `size` bytes, the content of `file.blob`.
    fn add_file(&mut self, rel: String, size: u64, executable: bool, file: ScannedFile) {
        let entry = Entry::File {
            blob: file.blob.to_string(),
            size,
            executable,
        };
        self.entries.insert(rel.clone(), entry);
        self.files.insert(rel, file);
    }
}

fn scan_tree(root: &Path, max: u64) -> Result<Scan, SnapshotError> {
    let state = read_state(root);
    let meta = fs::metadata(root).map_err(|e| io_err(root, "read the workspace root", e))?;
    if !meta.is_dir() {
        return Err(SnapshotError::Io {
            path: root.to_path_buf(),
            detail: "the workspace root is not a directory".to_owned(),
        });
    }
    let mut scan = Scan {
        entries: BTreeMap::new(),
        files: BTreeMap::new(),
        skipped: Vec::new(),
        hashed: 0,
        last_snapshot: state
            .last_snapshot
            .as_deref()
            .and_then(|id| BlobId::parse(id).ok()),
    };
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let listing = match fs::read_dir(&dir) {
            Ok(listing) => listing,
            Err(e) if !rel.is_empty() && e.kind() == io::ErrorKind::NotFound => {
                scan.entries.remove(&rel);
                continue;
            }
            Err(e) if !rel.is_empty() && e.kind() == io::ErrorKind::PermissionDenied => {
                scan.entries.remove(&rel);
                scan.skipped.push(rel);
                continue;
            }
            Err(e) => return Err(io_err(&dir, "list the directory", e)),
        };
        for item in listing {
            let item = item.map_err(|e| io_err(&dir, "list the directory", e))?;
            let name = item.file_name();
            if rel.is_empty() && name == LOCAL_DIR {
                continue;
            }
            let Some(name) = name.to_str() else {
                scan.skipped.push(child_path(&rel, &name.to_string_lossy()));
                continue;
            };
            let child = child_path(&rel, name);
            let path = item.path();
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path, "inspect", e)),
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                scan.entries.insert(child.clone(), Entry::Dir);
                stack.push(child);
            } else if kind.is_symlink() {
                match fs::read_link(&path) {
                    Ok(target) => match target.into_os_string().into_string() {
                        Ok(target) => {
                            scan.entries.insert(child, Entry::Symlink { target });
                        }
                        Err(_) => scan.skipped.push(child),
                    },
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(&path, "read the symbolic link", e)),
                }
            } else if kind.is_file() {
                scan_file(&mut scan, root, &state, child, &path, &meta, max)?;
            } else {
                scan.skipped.push(child);
            }
        }
    }
    Ok(scan)
}

fn scan_file(
    scan: &mut Scan,
    root: &Path,
    state: &LocalState,
    rel: String,
    path: &Path,
    meta: &fs::Metadata,
    max: u64,
) -> Result<(), SnapshotError> {
    if meta.len() > max {
        scan.skipped.push(rel);
        return Ok(());
    }
    let stamp = Stamp::of(meta);
    let executable = executable(meta);
    if let Some(blob) = state.files.get(&rel).and_then(|c| c.blob_if(stamp)) {
        let file = ScannedFile {
            stamp,
            blob,
            from_cache: true,
            cacheable: true,
        };
        scan.add_file(rel, stamp.size, executable, file);
        return Ok(());
    }
    let started = now_ns();
    match hash_beneath(root, &rel, max) {
        Ok(Some((blob, size))) => {
            scan.hashed += 1;
            let after = fs::symlink_metadata(path).ok().map(|m| Stamp::of(&m));
            let cacheable = after == Some(stamp)
                && size == stamp.size
                && stamp.mtime_ns < started.saturating_sub(RACY_WINDOW_NS);
            let file = ScannedFile {
                stamp,
                blob,
                from_cache: false,
                cacheable,
            };
            scan.add_file(rel, size, executable, file);
        }
        Ok(None) => scan.skipped.push(rel),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => scan.skipped.push(rel),
        // It became a link or something else since it was listed: a later snapshot takes it.
        Err(e)
            if crate::beneath::is_link_error(&e)
                || matches!(
                    e.raw_os_error(),
                    Some(libc_errno::EISDIR | libc_errno::EINVAL)
                ) =>
        {
            scan.skipped.push(rel)
        }
        Err(e) => return Err(io_err(path, "read", e)),
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::{
        get_json,
        snapshot::{
            Manifest, restore,
            test_support::{MemStore, age, sample, write},
        },
    };

    #[tokio::test]
    async fn changing_one_file_uploads_exactly_one_blob() {
        let src = tempfile::tempdir().unwrap();
        sample(src.path());
        age(src.path());
        let store = MemStore::default();
        let first = take(&store, src.path()).await.unwrap();

        write(src.path(), "src/lib/mod.rs", "pub fn g() {}\n");
        let second = take(&store, src.path()).await.unwrap();
        assert_ne!(second.id, first.id);
        assert_eq!(second.uploaded, 1);
        assert_eq!(second.uploaded_bytes, 14);
        assert_eq!(second.hashed, 1);
    }

    #[tokio::test]
    async fn the_local_state_directory_is_neither_snapshotted_nor_deleted() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(src.path(), ".baton/secret", "src state\n");
        write(src.path(), "a.txt", "a\n");
        let store = MemStore::default();
        let taken = take(&store, src.path()).await.unwrap();
        let manifest: Manifest = get_json(&store, &taken.id).await.unwrap();
        assert_eq!(
            manifest.entries.keys().collect::<Vec<_>>(),
            vec!["a.txt"],
            "only a.txt"
        );

        write(dst.path(), ".baton/mine", "dst state\n");
        restore(&store, dst.path(), &taken.id).await.unwrap();
        assert_eq!(
            fs::read_to_string(dst.path().join(".baton/mine")).unwrap(),
            "dst state\n"
        );
        assert!(!dst.path().join(".baton/secret").exists());
    }

    #[tokio::test]
    async fn files_over_the_size_limit_are_skipped_and_listed() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "small.txt", "tiny");
        write(src.path(), "big/blob.bin", "far more than ten bytes");
        let store = MemStore::default();
        let options = SnapshotOptions { max_file_size: 10 };
        let taken = take_with(&store, src.path(), &options).await.unwrap();
        assert_eq!(taken.skipped, vec!["big/blob.bin".to_owned()]);
        assert_eq!(taken.files, 1);
        let manifest: Manifest = get_json(&store, &taken.id).await.unwrap();
        assert_eq!(
            manifest.entries.keys().collect::<Vec<_>>(),
            vec!["big", "small.txt"]
        );
    }

    /// While a process swaps a directory with a link to a directory outside
    /// (`renameat2(RENAME_EXCHANGE)`), no snapshot takes in a file from outside.
    #[tokio::test]
    async fn a_directory_swapped_for_a_link_meanwhile_brings_nothing_outside_into_a_snapshot() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write(ws.path(), "d/inside.txt", "inside\n");
        std::fs::write(outside.path().join("inside.txt"), "OUTSIDE-MARKER\n").unwrap();
        std::fs::write(outside.path().join("secret"), "OUTSIDE-MARKER\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("e")).unwrap();
        let racer = crate::beneath::testing::Racer::start(ws.path(), "d", "e").unwrap();
        let store = MemStore::default();
        let mut taken = 0;
        for _ in 0..300 {
            if take(&store, ws.path()).await.is_ok() {
                taken += 1;
            }
        }
        assert!(racer.stop() > 100);
        assert!(taken > 0);
        let marker = BlobId::of(b"OUTSIDE-MARKER\n");
        assert!(
            !store.contains(&marker).await.unwrap(),
            "a file from outside is in the store"
        );
    }
}
