//! Workspace snapshots in the blob store.
//!
//! After every mutating tool call the worker snapshots the run's workspace ([`take`]) and the
//! tool result records the snapshot id; a worker that picks the run up on another machine and
//! finds its copy missing or at an older snapshot ([`local_snapshot`]) restores it first
//! ([`restore`]). The CLI uploads the user's directory as a run's starting snapshot
//! ([`upload_dir`]: under its `.gitignore`/`.batonignore` rules, without `.git`, refused whole
//! over a size limit).
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
//!
//! - `manifest`: the format ([`Manifest`], [`Entry`]) and its validation.
//! - `cache`: the local state in `.baton` ([`local_snapshot`]).
//! - `send`: sending a scanned tree (the blobs the store lacks, then the manifest), shared by
//!   `take` and `upload`.
//! - `take`: [`take`]/[`take_with`].
//! - `restore`: [`restore`].
//! - `overlay`: what an environment's setup added to a tree ([`overlay_of`]), laid over another
//!   ([`apply_overlay`]).
//! - `upload`: [`upload_dir`] (a directory of the submitting machine, for `--workspace-from`).
//!
//! [`take`]: fn@take
//! [`restore`]: fn@restore

mod cache;
mod manifest;
mod overlay;
mod restore;
mod send;
mod take;
#[cfg(test)]
pub(crate) mod test_support;
mod upload;

use std::{
    fs,
    io::{self, Read},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use sha2::Digest;

pub use cache::{RACY_WINDOW_NS, STATE_FILE, forget_local_state, local_snapshot};
pub use manifest::{Entry, MANIFEST_VERSION, Manifest, SnapshotId};
pub(crate) use manifest::{Target, check_manifest};
pub use overlay::{apply_overlay, file_stats, overlay_of};
pub use restore::{Restored, restore};
pub use take::{DEFAULT_MAX_FILE_SIZE, SnapshotOptions, Taken, take, take_with};
pub use upload::{
    DEFAULT_MAX_UPLOAD, IGNORE_FILE, UploadError, UploadOptions, Uploaded, human_size, upload_dir,
};

use crate::{BlobId, StoreError};

/// The directory at the workspace root that holds local state; never snapshotted or restored.
pub const LOCAL_DIR: &str = ".baton";

/// Concurrent uploads (or downloads while restoring); each holds one file in memory.
const TRANSFER_CONCURRENCY: usize = 4;
const HASH_BUFFER: usize = 64 * 1024;

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

// Helpers shared by the cache, take, restore and upload.

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

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn temp_name() -> String {
    format!(
        ".baton-tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
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
    hash_open(fs::File::open(path)?, max)
}

/// Hashes the regular file `rel` beneath `root`, reached without following links (the
/// workspace may be changed meanwhile by the run's processes); a link on the way is
/// an error ([`crate::beneath::is_link_error`]).
fn hash_beneath(root: &Path, rel: &str, max: u64) -> io::Result<Option<(BlobId, u64)>> {
    let file = crate::beneath::open_regular_in(root, Path::new(rel)).map_err(|e| e.into_io())?;
    hash_open(file, max)
}

fn hash_open(mut file: fs::File, max: u64) -> io::Result<Option<(BlobId, u64)>> {
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

/// The error numbers [`crate::beneath::OpenError::into_io`] gives for what is not a regular
/// file.
mod libc_errno {
    pub(super) const EISDIR: i32 = nix::errno::Errno::EISDIR as i32;
    pub(super) const EINVAL: i32 = nix::errno::Errno::EINVAL as i32;
}

fn executable(meta: &fs::Metadata) -> bool {
    meta.mode() & 0o111 != 0
}
