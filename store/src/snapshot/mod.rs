//! Workspace snapshots in the blob store.
//!
//! After every mutating tool call the worker snapshots the run's workspace ([`take`]) and the
//! tool result records the snapshot id; a worker that picks the run up on another machine and
//! finds its copy missing or at an older snapshot ([`local_snapshot`]) restores it first
//! ([`restore`]).
//!
//! A snapshot is a [`Manifest`], stored as a JSON blob, listing every directory, regular file
//! and symbolic link under the workspace root by '/'-separated relative path; files point at
//! the blob holding their content. The manifest's blob id is the snapshot id, so identical
//! trees have identical ids.
//!
//! Snapshots are incremental: a file's blob is uploaded only when the store lacks it, and a
//! local cache (`.baton/snapshot-state.json`: size, mtime, ctime and inode -> blob, plus the
//! snapshot the tree is known to match) spares re-hashing files that did not change since the
//! last [`take`] or [`restore`]. Files modified within [`RACY_WINDOW_NS`] of being hashed are
//! not cached (a later write in the same timestamp tick would go unnoticed), so they are
//! hashed again next time.
//!
//! The directory `.baton` at the root holds local state: it is never snapshotted, restored
//! over or deleted. Only `.baton` at the root is special; deeper ones are ordinary files.
//!
//! Unix only (executable bits, inode numbers, symbolic links).

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::{self, Read, Write},
    os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use futures::{StreamExt, TryStreamExt, stream};
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::{BlobId, BlobStore, StoreError, get_json};

/// The manifest format written by [`take`] and the only one [`restore`] reads.
pub const MANIFEST_VERSION: u32 = 1;

/// Files larger than this are left out of snapshots by default (64 MiB).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 * 1024 * 1024;

/// The directory at the workspace root that holds local state; never snapshotted or restored.
pub const LOCAL_DIR: &str = ".baton";

/// The local state file, inside [`LOCAL_DIR`].
pub const STATE_FILE: &str = "snapshot-state.json";

/// A file whose mtime is within this many nanoseconds of the moment it was hashed is not
/// cached: a write right after hashing could leave its timestamp unchanged.
pub const RACY_WINDOW_NS: i64 = 2_000_000_000;

const STATE_VERSION: u32 = 1;
/// Concurrent `contains` calls while taking a snapshot.
const CHECK_CONCURRENCY: usize = 16;
/// Concurrent uploads (or downloads while restoring); each holds one file in memory.
const TRANSFER_CONCURRENCY: usize = 4;
const HASH_BUFFER: usize = 64 * 1024;

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

/// What [`restore`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files whose content was written and symbolic links (re)created.
    pub written: usize,
    /// Entries removed because the snapshot does not have them (or has something of another
    /// kind there); a removed directory counts once, with its contents.
    pub deleted: usize,
    /// Directories created.
    pub dirs_created: usize,
    /// Files whose content was right but whose execute bits were changed.
    pub modes_fixed: usize,
    /// Files already matching the snapshot.
    pub unchanged: usize,
}

/// Failures of taking or restoring a snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The blob store failed.
    #[error("workspace snapshot: {0}")]
    Store(#[from] StoreError),
    /// The workspace could not be read or written.
    #[error("workspace snapshot: {}: {detail}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What failed and why.
        detail: String,
    },
    /// The manifest is malformed or unsafe (paths outside the root, unknown version, ..);
    /// nothing was written.
    #[error("workspace snapshot manifest rejected: {0}")]
    BadManifest(String),
}

fn io_err(path: &Path, what: &str, err: io::Error) -> SnapshotError {
    SnapshotError::Io {
        path: path.to_path_buf(),
        detail: format!("cannot {what}: {err}"),
    }
}

/// Runs blocking filesystem work off the async threads.
async fn blocking<T: Send + 'static>(
    root: &Path,
    work: impl FnOnce() -> Result<T, SnapshotError> + Send + 'static,
) -> Result<T, SnapshotError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SnapshotError::Io {
            path: root.to_path_buf(),
            detail: format!("background filesystem task failed: {e}"),
        })?
}

// ---------------------------------------------------------------------------------------------
// Local state

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Self {
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
struct CacheEntry {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
    blob: String,
}

impl CacheEntry {
    fn new(stamp: Stamp, blob: &BlobId) -> Self {
        Self {
            size: stamp.size,
            mtime_ns: stamp.mtime_ns,
            ctime_ns: stamp.ctime_ns,
            ino: stamp.ino,
            blob: blob.to_string(),
        }
    }

    /// The cached blob, if `stamp` is what was cached.
    fn blob_if(&self, stamp: Stamp) -> Option<BlobId> {
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
struct LocalState {
    version: u32,
    /// The snapshot the tree is known to match.
    last_snapshot: Option<String>,
    /// Path -> what its content hashed to, for files whose stamp can be trusted.
    files: BTreeMap<String, CacheEntry>,
}

fn state_path(root: &Path) -> PathBuf {
    root.join(LOCAL_DIR).join(STATE_FILE)
}

/// The local state; empty if missing or unreadable (everything is then hashed again).
fn read_state(root: &Path) -> LocalState {
    fs::read(state_path(root))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<LocalState>(&bytes).ok())
        .filter(|state| state.version == STATE_VERSION)
        .unwrap_or_default()
}

fn write_state(root: &Path, state: &LocalState) -> Result<(), SnapshotError> {
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
pub fn local_snapshot(root: &Path) -> Option<SnapshotId> {
    read_state(root)
        .last_snapshot
        .and_then(|id| BlobId::parse(&id).ok())
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn temp_name() -> String {
    format!(
        ".baton-tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn child_path(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}/{name}")
    }
}

/// Hashes the file at `path`; `None` if it holds more than `max` bytes.
fn hash_file(path: &Path, max: u64) -> io::Result<Option<(BlobId, u64)>> {
    let mut file = fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; HASH_BUFFER];
    let mut total = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        if total > max {
            return Ok(None);
        }
        hasher.update(&buf[..n]);
    }
    let id = BlobId::parse(&hex::encode(hasher.finalize()))
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(Some((id, total)))
}

/// The content of the file at `path`; `None` if it holds more than `max` bytes.
fn read_limited(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

fn executable(meta: &fs::Metadata) -> bool {
    meta.mode() & 0o111 != 0
}

// ---------------------------------------------------------------------------------------------
// take

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
    let missing: Vec<(BlobId, Vec<String>)> = stream::iter(unsure)
        .map(|(id, paths)| async move {
            let present = store.contains(&id).await?;
            Ok::<_, SnapshotError>((!present).then_some((id, paths)))
        })
        .buffer_unordered(CHECK_CONCURRENCY)
        .try_filter_map(|found| async move { Ok(found) })
        .try_collect()
        .await?;
    let uploads: Vec<Upload> = stream::iter(missing)
        .map(|(id, paths)| upload(store, root, id, paths, max))
        .buffer_unordered(TRANSFER_CONCURRENCY)
        .try_collect()
        .await?;

    let (mut uploaded, mut uploaded_bytes) = (0, 0);
    for upload in uploads {
        uploaded += upload.uploaded;
        uploaded_bytes += upload.bytes;
        for (path, change) in upload.changed {
            files.remove(&path);
            match change {
                Changed::Now { blob, size } => {
                    let executable = matches!(
                        entries.get(&path),
                        Some(Entry::File {
                            executable: true,
                            ..
                        })
                    );
                    entries.insert(
                        path,
                        Entry::File {
                            blob: blob.to_string(),
                            size,
                            executable,
                        },
                    );
                }
                Changed::Gone => {
                    entries.remove(&path);
                }
                Changed::Skipped => {
                    entries.remove(&path);
                    skipped.push(path);
                }
            }
        }
    }
    skipped.sort();

    let manifest = Manifest {
        version: MANIFEST_VERSION,
        entries,
    };
    let file_count = manifest
        .entries
        .values()
        .filter(|e| matches!(e, Entry::File { .. }))
        .count();
    let bytes = serde_json::to_vec(&manifest).map_err(|e| SnapshotError::Io {
        path: root.to_path_buf(),
        detail: format!("cannot encode the snapshot manifest: {e}"),
    })?;
    let expected = BlobId::of(&bytes);
    let id = if last_present && last_snapshot.as_ref() == Some(&expected) {
        expected
    } else {
        store.put(bytes).await?
    };

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
        uploaded,
        uploaded_bytes,
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
                scan_file(&mut scan, &state, child, &path, &meta, max)?;
            } else {
                scan.skipped.push(child);
            }
        }
    }
    Ok(scan)
}

fn scan_file(
    scan: &mut Scan,
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
        scan.entries.insert(
            rel.clone(),
            Entry::File {
                blob: blob.to_string(),
                size: stamp.size,
                executable,
            },
        );
        scan.files.insert(
            rel,
            ScannedFile {
                stamp,
                blob,
                from_cache: true,
                cacheable: true,
            },
        );
        return Ok(());
    }
    let started = now_ns();
    match hash_file(path, max) {
        Ok(Some((blob, size))) => {
            scan.hashed += 1;
            let after = fs::symlink_metadata(path).ok().map(|m| Stamp::of(&m));
            let cacheable = after == Some(stamp)
                && size == stamp.size
                && stamp.mtime_ns < started.saturating_sub(RACY_WINDOW_NS);
            scan.entries.insert(
                rel.clone(),
                Entry::File {
                    blob: blob.to_string(),
                    size,
                    executable,
                },
            );
            scan.files.insert(
                rel,
                ScannedFile {
                    stamp,
                    blob,
                    from_cache: false,
                    cacheable,
                },
            );
        }
        Ok(None) => scan.skipped.push(rel),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => scan.skipped.push(rel),
        Err(e) => return Err(io_err(path, "read", e)),
    }
    Ok(())
}

/// A file found different while uploading from what was hashed.
enum Changed {
    /// It now holds this (already stored) content.
    Now { blob: BlobId, size: u64 },
    /// It is gone.
    Gone,
    /// It became unreadable or too big.
    Skipped,
}

#[derive(Default)]
struct Upload {
    uploaded: usize,
    bytes: u64,
    changed: Vec<(String, Changed)>,
}

enum FileRead {
    Bytes(Vec<u8>, BlobId),
    Gone,
    Skipped,
}

/// Uploads blob `id` from the first of `paths` that still holds it; paths found holding
/// something else are reported (with their new content stored).
async fn upload(
    store: &dyn BlobStore,
    root: &Path,
    id: BlobId,
    paths: Vec<String>,
    max: u64,
) -> Result<Upload, SnapshotError> {
    let mut out = Upload::default();
    for path in paths {
        let abs = root.join(&path);
        let read = blocking(root, move || match read_limited(&abs, max) {
            Ok(Some(bytes)) => {
                let id = BlobId::of(&bytes);
                Ok(FileRead::Bytes(bytes, id))
            }
            Ok(None) => Ok(FileRead::Skipped),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(FileRead::Gone),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(FileRead::Skipped),
            Err(e) => Err(io_err(&abs, "read", e)),
        })
        .await?;
        match read {
            FileRead::Bytes(bytes, actual) => {
                let size = bytes.len() as u64;
                if actual == id {
                    store.put(bytes).await?;
                    out.uploaded += 1;
                    out.bytes += size;
                    return Ok(out);
                }
                if !store.contains(&actual).await? {
                    store.put(bytes).await?;
                    out.uploaded += 1;
                    out.bytes += size;
                }
                out.changed
                    .push((path, Changed::Now { blob: actual, size }));
            }
            FileRead::Gone => out.changed.push((path, Changed::Gone)),
            FileRead::Skipped => out.changed.push((path, Changed::Skipped)),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// restore

/// A validated manifest entry.
enum Target {
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
fn check_manifest(manifest: Manifest) -> Result<BTreeMap<String, Target>, SnapshotError> {
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

/// Makes the workspace at `root` match snapshot `id` exactly, then records `id` as the local
/// snapshot.
///
/// The manifest is validated before anything is touched ([`SnapshotError::BadManifest`] for
/// absolute paths, `.`/`..`/empty components, entries under `.baton`, entries whose parent is
/// not a directory of the snapshot). Then: entries the snapshot lacks or has as another kind
/// are deleted; directories are created; files whose content differs are written (temporary
/// file + rename) with their execute bits; symbolic links are recreated. Symbolic links in the
/// tree are never written through: one standing where the snapshot has a directory is removed.
/// `.baton` at the root is left alone. `root` is created if missing.
///
/// Expects no one else to write the tree meanwhile (the local cache is refreshed from what
/// was written). If it fails halfway, [`local_snapshot`] is `None` until a restore succeeds.
pub async fn restore(
    store: &dyn BlobStore,
    root: &Path,
    id: &SnapshotId,
) -> Result<Restored, SnapshotError> {
    let manifest: Manifest = get_json(store, id).await?;
    let targets = Arc::new(check_manifest(manifest)?);

    let (mut restored, writes) = {
        let (owned, targets) = (root.to_path_buf(), Arc::clone(&targets));
        blocking(root, move || reconcile(&owned, &targets)).await?
    };

    let written: Vec<usize> = stream::iter(writes)
        .map(|(blob, dests)| async move {
            let bytes = store.get(&blob).await?;
            let owned = root.to_path_buf();
            blocking(root, move || {
                for (rel, executable) in &dests {
                    write_file(&owned, rel, &bytes, *executable)?;
                }
                Ok(dests.len())
            })
            .await
        })
        .buffer_unordered(TRANSFER_CONCURRENCY)
        .try_collect()
        .await?;
    restored.written += written.iter().sum::<usize>();

    let (owned, id) = (root.to_path_buf(), id.clone());
    blocking(root, move || record_restored(&owned, &targets, &id)).await?;
    Ok(restored)
}

/// Files still to write: blob -> (path, executable).
type Writes = BTreeMap<BlobId, Vec<(String, bool)>>;

/// Deletes what the snapshot lacks, fixes modes, creates directories and links; returns the
/// files whose content must be written.
fn reconcile(
    root: &Path,
    targets: &BTreeMap<String, Target>,
) -> Result<(Restored, Writes), SnapshotError> {
    fs::create_dir_all(root).map_err(|e| io_err(root, "create the workspace root", e))?;
    let mut state = read_state(root);
    if state.last_snapshot.take().is_some() {
        write_state(root, &state)?;
    }

    let mut restored = Restored::default();
    let mut writes = Writes::new();
    // Entries already right (or scheduled for writing in place).
    let mut settled = BTreeSet::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let listing = fs::read_dir(&dir).map_err(|e| io_err(&dir, "list the directory", e))?;
        for item in listing {
            let item = item.map_err(|e| io_err(&dir, "list the directory", e))?;
            let name = item.file_name();
            if rel.is_empty() && name == LOCAL_DIR {
                continue;
            }
            let path = item.path();
            let Some(name) = name.to_str() else {
                remove_any(&path)?;
                restored.deleted += 1;
                continue;
            };
            let child = child_path(&rel, name);
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path, "inspect", e)),
            };
            let kind = meta.file_type();
            let keep = match targets.get(&child) {
                Some(Target::Dir) if kind.is_dir() => {
                    stack.push(child.clone());
                    true
                }
                Some(Target::Symlink { target }) if kind.is_symlink() => fs::read_link(&path)
                    .map(|t| t.as_os_str() == target.as_str())
                    .unwrap_or(false),
                Some(Target::File {
                    blob,
                    size,
                    executable: exec,
                }) if kind.is_file() => {
                    if meta.len() == *size
                        && current_blob(&state, &child, &path, &meta)?.as_ref() == Some(blob)
                    {
                        if executable(&meta) != *exec {
                            set_executable(&path, &meta, *exec)?;
                            restored.modes_fixed += 1;
                        } else {
                            restored.unchanged += 1;
                        }
                    } else {
                        writes
                            .entry(blob.clone())
                            .or_default()
                            .push((child.clone(), *exec));
                    }
                    true
                }
                _ => false,
            };
            if keep {
                settled.insert(child);
            } else {
                remove_any(&path)?;
                restored.deleted += 1;
            }
        }
    }

    // Parents sort before their children, so directories are created top-down.
    for (rel, target) in targets {
        if settled.contains(rel) {
            continue;
        }
        match target {
            Target::Dir => {
                let path = prepare_parents(root, rel)?;
                if make_real_dir(&path)? {
                    restored.dirs_created += 1;
                }
            }
            Target::Symlink { target } => {
                let path = prepare_parents(root, rel)?;
                if fs::symlink_metadata(&path).is_ok() {
                    remove_any(&path)?;
                }
                std::os::unix::fs::symlink(target, &path)
                    .map_err(|e| io_err(&path, "create the symbolic link", e))?;
                restored.written += 1;
            }
            Target::File {
                blob, executable, ..
            } => writes
                .entry(blob.clone())
                .or_default()
                .push((rel.clone(), *executable)),
        }
    }
    Ok((restored, writes))
}

/// The blob the file at `path` holds (from the cache when its stamp matches); `None` if it
/// cannot be read (it is then rewritten).
fn current_blob(
    state: &LocalState,
    rel: &str,
    path: &Path,
    meta: &fs::Metadata,
) -> Result<Option<BlobId>, SnapshotError> {
    if let Some(blob) = state
        .files
        .get(rel)
        .and_then(|c| c.blob_if(Stamp::of(meta)))
    {
        return Ok(Some(blob));
    }
    match hash_file(path, u64::MAX) {
        Ok(found) => Ok(found.map(|(blob, _)| blob)),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(None),
        Err(e) => Err(io_err(path, "read", e)),
    }
}

/// Removes whatever is at `path` without following symbolic links.
fn remove_any(path: &Path) -> Result<(), SnapshotError> {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    result.map_err(|e| io_err(path, "remove", e))
}

/// Makes `path` a real directory (removing a file or symbolic link there); whether it was
/// created.
fn make_real_dir(path: &Path) -> Result<bool, SnapshotError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(false),
        Ok(_) => remove_any(path)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(path, "inspect", e)),
    }
    fs::create_dir(path).map_err(|e| io_err(path, "create the directory", e))?;
    Ok(true)
}

/// Makes every parent of `rel` (a checked path) a real directory below `root`, so nothing is
/// written through a symbolic link; returns the absolute path of `rel`.
fn prepare_parents(root: &Path, rel: &str) -> Result<PathBuf, SnapshotError> {
    let mut path = root.to_path_buf();
    let mut components = rel.split('/').peekable();
    while let Some(component) = components.next() {
        path.push(component);
        if components.peek().is_some() {
            make_real_dir(&path)?;
        }
    }
    Ok(path)
}

/// Sets the execute bits of a file to its read bits (`exec`) or clears them.
fn set_executable(path: &Path, meta: &fs::Metadata, exec: bool) -> Result<(), SnapshotError> {
    let mode = meta.mode() & 0o7777;
    let mode = if exec {
        mode | ((mode & 0o444) >> 2) | 0o100
    } else {
        mode & !0o111
    };
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| io_err(path, "change the mode of", e))
}

/// Writes `bytes` to `rel` below `root` through a temporary file in the same directory.
fn write_file(root: &Path, rel: &str, bytes: &[u8], exec: bool) -> Result<(), SnapshotError> {
    let path = prepare_parents(root, rel)?;
    let parent = path.parent().unwrap_or(root);
    let tmp = parent.join(temp_name());
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if exec { 0o755 } else { 0o644 })
            .open(&tmp)?;
        file.write_all(bytes)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(&tmp, "write", e));
    }
    if let Ok(meta) = fs::symlink_metadata(&path)
        && meta.is_dir()
    {
        remove_any(&path)?;
    }
    fs::rename(&tmp, &path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err(&path, "replace", e)
    })
}

/// Records `id` as the local snapshot, caching the stamps of the files just restored.
fn record_restored(
    root: &Path,
    targets: &BTreeMap<String, Target>,
    id: &SnapshotId,
) -> Result<(), SnapshotError> {
    let mut files = BTreeMap::new();
    for (rel, target) in targets {
        if let Target::File { blob, .. } = target {
            let path = root.join(rel);
            let meta =
                fs::symlink_metadata(&path).map_err(|e| io_err(&path, "inspect restored", e))?;
            files.insert(rel.clone(), CacheEntry::new(Stamp::of(&meta), blob));
        }
    }
    write_state(
        root,
        &LocalState {
            version: STATE_VERSION,
            last_snapshot: Some(id.to_string()),
            files,
        },
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::{
        os::unix::fs::symlink,
        sync::{Mutex, atomic::AtomicUsize},
        time::Duration,
    };

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::put_json;

    /// An in-memory store counting puts.
    #[derive(Debug, Default)]
    struct MemStore {
        blobs: Mutex<BTreeMap<BlobId, Vec<u8>>>,
        puts: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl BlobStore for MemStore {
        async fn put(&self, bytes: Vec<u8>) -> Result<BlobId, StoreError> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            let id = BlobId::of(&bytes);
            self.blobs.lock().unwrap().insert(id.clone(), bytes);
            Ok(id)
        }

        async fn get(&self, id: &BlobId) -> Result<Vec<u8>, StoreError> {
            self.blobs
                .lock()
                .unwrap()
                .get(id)
                .cloned()
                .ok_or_else(|| StoreError::NotFound(id.clone()))
        }

        async fn contains(&self, id: &BlobId) -> Result<bool, StoreError> {
            Ok(self.blobs.lock().unwrap().contains_key(id))
        }

        fn describe(&self) -> String {
            "memory".to_owned()
        }
    }

    fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn chmod(root: &Path, rel: &str, mode: u32) {
        fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Everything under `root` but `.baton` at the root, as path -> description.
    fn tree(root: &Path) -> BTreeMap<String, String> {
        fn walk(root: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
            for item in fs::read_dir(root.join(rel)).unwrap() {
                let name = item.unwrap().file_name().into_string().unwrap();
                if rel.is_empty() && name == LOCAL_DIR {
                    continue;
                }
                let child = child_path(rel, &name);
                let path = root.join(&child);
                let meta = fs::symlink_metadata(&path).unwrap();
                let description = if meta.is_symlink() {
                    format!("link -> {}", fs::read_link(&path).unwrap().display())
                } else if meta.is_dir() {
                    walk(root, &child, out);
                    "dir".to_owned()
                } else {
                    let exec = if executable(&meta) { " (exec)" } else { "" };
                    format!("file{exec}: {}", fs::read_to_string(&path).unwrap())
                };
                out.insert(child, description);
            }
        }
        let mut out = BTreeMap::new();
        walk(root, "", &mut out);
        out
    }

    /// Sets every file's mtime an hour back, so the cache may trust it.
    fn age(root: &Path) {
        let past = SystemTime::now() - Duration::from_secs(3600);
        for rel in tree(root).keys() {
            let path = root.join(rel);
            if fs::symlink_metadata(&path).unwrap().is_file() {
                fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(past)
                    .unwrap();
            }
        }
    }

    /// A workspace with a bit of everything.
    fn sample(root: &Path) {
        write(root, "README.md", "hello\n");
        write(root, "copy.md", "hello\n");
        write(root, "bin/run.sh", "#!/bin/sh\necho hi\n");
        chmod(root, "bin/run.sh", 0o755);
        write(root, "src/lib/mod.rs", "pub fn f() {}\n");
        write(root, "sub/.baton/kept", "only the root .baton is special\n");
        fs::create_dir_all(root.join("empty/inner")).unwrap();
        symlink("README.md", root.join("link")).unwrap();
        symlink("../nowhere", root.join("src/dangling")).unwrap();
        write(root, ".baton/private", "local state\n");
    }

    fn puts(store: &MemStore) -> usize {
        store.puts.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn take_then_restore_elsewhere_gives_an_identical_tree() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        sample(src.path());
        let store = MemStore::default();

        let taken = take(&store, src.path()).await.unwrap();
        assert_eq!(taken.files, 5);
        // README.md and copy.md share a blob.
        assert_eq!(taken.uploaded, 4);
        assert_eq!(taken.skipped, Vec::<String>::new());
        let manifest: Manifest = get_json(&store, &taken.id).await.unwrap();
        assert!(manifest.entries.keys().all(|p| !p.starts_with(".baton")));
        assert_eq!(manifest.entries.get("empty/inner"), Some(&Entry::Dir));

        let target = dst.path().join("elsewhere/ws");
        let restored = restore(&store, &target, &taken.id).await.unwrap();
        assert_eq!(tree(&target), tree(src.path()));
        assert_eq!(
            tree(&target).get("bin/run.sh").map(String::as_str),
            Some("file (exec): #!/bin/sh\necho hi\n")
        );
        assert_eq!(
            restored,
            Restored {
                written: 7,
                dirs_created: 7,
                ..Restored::default()
            }
        );
        assert!(!target.join(".baton/private").exists());
    }

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
    async fn restore_fixes_extra_modified_and_misplaced_entries() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        sample(src.path());
        let store = MemStore::default();
        let taken = take(&store, src.path()).await.unwrap();

        let d = dst.path();
        sample(d);
        write(d, "extra.txt", "not in the snapshot\n");
        write(d, "extra-dir/deep/file", "nor this\n");
        write(d, "README.md", "modified\n");
        chmod(d, "bin/run.sh", 0o644);
        // A file where a directory should be, a directory where a file should be.
        fs::remove_dir_all(d.join("src")).unwrap();
        write(d, "src", "I am a file\n");
        fs::remove_file(d.join("copy.md")).unwrap();
        write(d, "copy.md/inside", "I am a directory\n");
        // A link where a file should be, a link with the wrong target.
        fs::remove_file(d.join("sub/.baton/kept")).unwrap();
        symlink("/etc/hostname", d.join("sub/.baton/kept")).unwrap();
        fs::remove_file(d.join("link")).unwrap();
        symlink("copy.md", d.join("link")).unwrap();
        fs::remove_dir_all(d.join("empty")).unwrap();

        let restored = restore(&store, d, &taken.id).await.unwrap();
        assert_eq!(tree(d), tree(src.path()));
        assert_eq!(
            restored,
            Restored {
                // README.md, copy.md, src/lib/mod.rs, sub/.baton/kept, link, src/dangling
                written: 6,
                // extra.txt, extra-dir, src (file), copy.md (dir), sub/.baton/kept, link
                deleted: 6,
                // src, src/lib, empty, empty/inner
                dirs_created: 4,
                modes_fixed: 1,
                unchanged: 0,
            }
        );
        assert_eq!(
            fs::read_to_string(d.join(".baton/private")).unwrap(),
            "local state\n"
        );
    }

    #[tokio::test]
    async fn restore_over_a_matching_tree_changes_nothing() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        sample(src.path());
        sample(dst.path());
        let store = MemStore::default();
        let taken = take(&store, src.path()).await.unwrap();
        let restored = restore(&store, dst.path(), &taken.id).await.unwrap();
        assert_eq!(
            restored,
            Restored {
                unchanged: 5,
                ..Restored::default()
            }
        );
    }

    #[tokio::test]
    async fn restore_never_writes_through_a_symbolic_link() {
        let (src, dst, outside) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        write(src.path(), "d/f", "content\n");
        let store = MemStore::default();
        let taken = take(&store, src.path()).await.unwrap();

        symlink(outside.path(), dst.path().join("d")).unwrap();
        restore(&store, dst.path(), &taken.id).await.unwrap();
        assert_eq!(tree(dst.path()), tree(src.path()));
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
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

    #[tokio::test]
    async fn a_failed_restore_clears_the_local_snapshot() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(src.path(), "a.txt", "a\n");
        let store = MemStore::default();
        let first = take(&store, src.path()).await.unwrap();
        restore(&store, dst.path(), &first.id).await.unwrap();

        // A manifest whose blob is missing from the store.
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            entries: [(
                "b.txt".to_owned(),
                Entry::File {
                    blob: BlobId::of(b"absent").to_string(),
                    size: 6,
                    executable: false,
                },
            )]
            .into(),
        };
        let id = put_json(&store, &manifest).await.unwrap();
        let err = restore(&store, dst.path(), &id).await.unwrap_err();
        assert!(matches!(err, SnapshotError::Store(StoreError::NotFound(_))));
        assert_eq!(local_snapshot(dst.path()), None);
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
