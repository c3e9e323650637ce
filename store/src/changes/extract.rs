//! [`extract`]: write chosen files of a snapshot into a directory (`baton download`),
//! without deleting anything, never writing through a symbolic link, and never writing
//! anything under a `.git` directory ([`git_dir_of`]): a run's tree can hold a `.git/config`
//! whose `core.fsmonitor` runs a command on the user's next `git status`, or hooks.

use std::{
    collections::BTreeMap,
    fs,
    io::{self, Write as _},
    os::unix::fs::{OpenOptionsExt, symlink},
    path::{Path, PathBuf},
};

use super::{ChangesError, load};
use crate::{
    BlobStore,
    snapshot::{SnapshotId, Target, temp_name},
};

/// What [`extract`] wrote, and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extracted {
    /// Files and symbolic links written.
    pub files: usize,
    /// Bytes of the files written.
    pub bytes: u64,
    /// Entries left out because they are a `.git` directory (or file) or lie under one: the
    /// `.git` path (`.git`, `a/.git`) -> how many matching entries (files, links, the `.git`
    /// entry itself when it is a file or link) it held.
    pub left_out: BTreeMap<String, usize>,
}

/// Writes the files and symbolic links of snapshot `id` whose path matches `filter` into
/// `dir` (created if missing), creating their parent directories and replacing files or
/// links already there (links are written as links). Nothing else in `dir` is touched.
///
/// Nothing at or under a `.git` component, at any depth and however it is spelt
/// ([`git_dir_of`]), is written: such entries are counted in [`Extracted::left_out`].
///
/// The snapshot's paths are validated first (none may leave `dir`). A file or symbolic link
/// standing where a parent directory is needed, or a directory where a file goes, is an
/// error ([`ChangesError::Io`]) rather than being removed or written through.
pub async fn extract(
    store: &dyn BlobStore,
    id: &SnapshotId,
    dir: &Path,
    filter: &dyn Fn(&str) -> bool,
) -> Result<Extracted, ChangesError> {
    let targets = load(store, id).await?;
    let mut extracted = Extracted::default();
    for (rel, target) in targets.into_iter().filter(|(rel, _)| filter(rel)) {
        if let Some(git) = git_dir_of(&rel) {
            if !matches!(target, Target::Dir) {
                *extracted.left_out.entry(git.to_owned()).or_default() += 1;
            }
            continue;
        }
        let content = match target {
            Target::Dir => continue,
            Target::File {
                blob, executable, ..
            } => {
                let bytes = store.get(&blob).await?;
                extracted.bytes += bytes.len() as u64;
                Content::File { bytes, executable }
            }
            Target::Symlink { target } => Content::Link(target),
        };
        let root = dir.to_path_buf();
        tokio::task::spawn_blocking(move || write_one(&root, &rel, &content))
            .await
            .map_err(|e| io_err(dir, format!("background filesystem task failed: {e}")))??;
        extracted.files += 1;
    }
    Ok(extracted)
}

/// The leading part of `path` up to and including its first component that git takes for
/// its own directory (`a/.git` for `a/.git/hooks/x`), or `None`. Like git's own
/// `verify_path`, it matches `.git` in any letter case (case-insensitive file systems),
/// with the code points HFS+ ignores removed (`.g\u{200c}it`), and the NTFS short name
/// `git~1`, so that no spelling lands in a `.git` directory on any file system.
pub fn git_dir_of(path: &str) -> Option<&str> {
    let mut end = 0;
    for component in path.split('/') {
        end += component.len();
        if is_git_name(component) {
            return Some(&path[..end]);
        }
        end += 1;
    }
    None
}

/// Whether one path component names git's directory (see [`git_dir_of`]).
fn is_git_name(component: &str) -> bool {
    // The code points HFS+ ignores in names (git's `is_hfs_dotgit`).
    let hfs_ignored = |c: char| matches!(c, '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}');
    let name: String = component
        .chars()
        .filter(|c| !hfs_ignored(*c))
        .collect::<String>()
        .to_ascii_lowercase();
    // NTFS drops trailing dots and spaces.
    let name = name.trim_end_matches(['.', ' ']);
    name == ".git" || name == "git~1"
}

enum Content {
    File { bytes: Vec<u8>, executable: bool },
    Link(String),
}

fn io_err(path: &Path, detail: String) -> ChangesError {
    ChangesError::Io {
        path: path.to_path_buf(),
        detail,
    }
}

/// Writes `content` at `rel` (a checked path) below `root` through a temporary file (or
/// link) in the same directory, renamed over what is there.
fn write_one(root: &Path, rel: &str, content: &Content) -> Result<(), ChangesError> {
    let path = real_parents(root, rel)?;
    if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
        return Err(io_err(
            &path,
            "a directory stands where the snapshot has a file; move it away or extract \
             elsewhere"
                .to_owned(),
        ));
    }
    let tmp = path.parent().unwrap_or(root).join(temp_name());
    let written = match content {
        Content::File { bytes, executable } => fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if *executable { 0o755 } else { 0o644 })
            .open(&tmp)
            .and_then(|mut file| file.write_all(bytes)),
        Content::Link(target) => symlink(target, &tmp),
    };
    written.and_then(|()| fs::rename(&tmp, &path)).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err(&path, format!("cannot write: {e}"))
    })
}

/// Creates the missing parent directories of `rel` below `root` (and `root`); returns the
/// absolute path of `rel`. Refuses to pass through anything but a real directory.
fn real_parents(root: &Path, rel: &str) -> Result<PathBuf, ChangesError> {
    fs::create_dir_all(root).map_err(|e| io_err(root, format!("cannot create: {e}")))?;
    let mut path = root.to_path_buf();
    let mut components = rel.split('/').peekable();
    while let Some(component) = components.next() {
        path.push(component);
        if components.peek().is_none() {
            break;
        }
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(io_err(
                    &path,
                    format!(
                        "a file or symbolic link stands where '{rel}' needs a directory; \
                         move it away or extract elsewhere"
                    ),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(&path)
                .map_err(|e| io_err(&path, format!("cannot create the directory: {e}")))?,
            Err(e) => return Err(io_err(&path, format!("cannot inspect: {e}"))),
        }
    }
    Ok(path)
}
