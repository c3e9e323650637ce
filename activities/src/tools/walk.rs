//! Walking a directory of the workspace for `search_files` and `glob`: depth first, siblings
//! sorted by name (so files come out sorted by path), never following symbolic links to
//! directories.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use baton_store::beneath::Beneath;
use tokio_util::sync::CancellationToken;

use super::workspace::is_local_state;

/// A file (anything but a directory or a link to one) met by [`walk_files`].
pub(crate) struct Entry<'a> {
    /// Absolute path, below the canonical workspace root. For a symbolic link, the link
    /// itself: its target may lie outside the workspace.
    pub(crate) path: &'a Path,
    /// The directory holding it, open: open the file as `dir`'s entry `file_name`, never by
    /// `path`.
    pub(crate) dir: &'a Beneath,
    /// The file name, exactly.
    pub(crate) file_name: &'a std::ffi::OsStr,
    /// Path relative to the workspace root.
    pub(crate) from_root: &'a str,
    /// Path relative to the directory the walk started from.
    pub(crate) from_base: &'a str,
    /// The file name.
    pub(crate) name: &'a str,
    /// The entry is a symbolic link (to a file, or dangling).
    pub(crate) is_symlink: bool,
}

/// How a walk went.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    /// Subdirectories that could not be read (and were skipped).
    pub(crate) unreadable_dirs: usize,
}

/// Calls `visit` for every file below `base` (a canonical directory inside the canonical
/// `root`), in path order, until it returns [`ControlFlow::Break`] or `cancel` is cancelled.
/// Directories named in `skip_dirs` are not entered (`base` itself always is); symbolic links
/// to directories are neither entered nor visited; devices, sockets and pipes are skipped.
///
/// Only an unreadable `base` is an error; unreadable subdirectories are counted in the
/// [`Summary`].
pub(crate) fn walk_files(
    root: &Path,
    base: &Path,
    skip_dirs: &[&str],
    cancel: &CancellationToken,
    mut visit: impl FnMut(&Entry<'_>) -> ControlFlow<()>,
) -> std::io::Result<Summary> {
    let mut summary = Summary::default();
    // Each level holds its directory open: a directory swapped for a link meanwhile is not
    // entered, and files are opened from their directory ([`Entry::dir`]).
    let base_dir =
        Beneath::open(root)?.open_dir(base.strip_prefix(root).unwrap_or(Path::new("")))?;
    let first = read_sorted(&base_dir, base)?;
    let mut stack = vec![(base_dir, first.into_iter())];
    while let Some((dir, level)) = stack.last_mut() {
        if cancel.is_cancelled() {
            break;
        }
        let Some((path, kind)) = level.next() else {
            stack.pop();
            continue;
        };
        if is_local_state(root, &path) {
            continue;
        }
        let file_name = path.file_name().unwrap_or_default().to_os_string();
        let name = file_name.to_string_lossy();
        match kind {
            Kind::Dir => {
                if !skip_dirs.contains(&name.as_ref()) {
                    let child = dir
                        .open_dir(Path::new(&file_name))
                        .and_then(|child| Ok((read_sorted(&child, &path)?, child)));
                    match child {
                        Ok((children, child)) => stack.push((child, children.into_iter())),
                        Err(_) => summary.unreadable_dirs += 1,
                    }
                }
            }
            Kind::File | Kind::Symlink => {
                let from_root = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
                let from_base = path.strip_prefix(base).unwrap_or(&path).to_string_lossy();
                let entry = Entry {
                    path: &path,
                    dir,
                    file_name: &file_name,
                    from_root: &from_root,
                    from_base: &from_base,
                    name: &name,
                    is_symlink: kind == Kind::Symlink,
                };
                if visit(&entry).is_break() {
                    break;
                }
            }
            Kind::Skipped => {}
        }
    }
    Ok(summary)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    /// A symbolic link to a file, or a dangling one.
    Symlink,
    /// A symbolic link to a directory, a device, a socket or a pipe.
    Skipped,
}

/// The entries of `dir`, sorted by name, each with what `classify` makes of its path and type.
/// Shared by the walk here and by `list_files` (which classifies links differently).
pub(crate) fn sorted_entries<K>(
    dir: &Path,
    classify: impl Fn(&Path, std::io::Result<std::fs::FileType>) -> K,
) -> std::io::Result<Vec<(PathBuf, K)>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = classify(&path, entry.file_type());
        entries.push((path, kind));
    }
    entries.sort_by(|a, b| a.0.file_name().cmp(&b.0.file_name()));
    Ok(entries)
}

/// The entries of `dir` (open, at `path`), sorted by name, with their kind (the entry itself:
/// a link is classified by what it points to, but never entered).
fn read_sorted(dir: &Beneath, path: &Path) -> std::io::Result<Vec<(PathBuf, Kind)>> {
    let mut names = dir.entries()?;
    names.sort();
    Ok(names
        .into_iter()
        .map(|name| {
            let kind = match dir.symlink_metadata(Path::new(&name)) {
                Ok(m) if m.is_dir() => Kind::Dir,
                Ok(m) if m.is_file() => Kind::File,
                Ok(m) if m.is_symlink() => {
                    if std::fs::metadata(path.join(&name)).is_ok_and(|m| m.is_dir()) {
                        Kind::Skipped
                    } else {
                        Kind::Symlink
                    }
                }
                _ => Kind::Skipped,
            };
            (path.join(name), kind)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    fn collect(root: &Path, base: &Path, skip: &[&str]) -> Vec<(String, String, bool)> {
        let mut out = Vec::new();
        walk_files(root, base, skip, &CancellationToken::new(), |e| {
            out.push((e.from_root.to_owned(), e.from_base.to_owned(), e.is_symlink));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }

    #[test]
    fn walks_files_in_path_order_skipping_and_not_following() {
        let dir = TempDir::new().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("src/bin")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "").unwrap();
        std::fs::write(root.join("src/bin/main.rs"), "").unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(root.join("src-notes.txt"), "").unwrap();
        symlink("src", root.join("src-link")).unwrap();
        symlink("src/lib.rs", root.join("lib-link.rs")).unwrap();
        let names: Vec<(String, bool)> = collect(&root, &root, &[".git"])
            .into_iter()
            .map(|(r, _, l)| (r, l))
            .collect();
        assert_eq!(
            names,
            vec![
                ("lib-link.rs".to_owned(), true),
                ("src/bin/main.rs".to_owned(), false),
                ("src/lib.rs".to_owned(), false),
                ("src-notes.txt".to_owned(), false),
            ]
        );
        let from_src = collect(&root, &root.join("src"), &[]);
        assert_eq!(
            from_src,
            vec![
                (
                    "src/bin/main.rs".to_owned(),
                    "bin/main.rs".to_owned(),
                    false
                ),
                ("src/lib.rs".to_owned(), "lib.rs".to_owned(), false),
            ]
        );
    }

    #[test]
    fn stops_when_told_or_cancelled() {
        let dir = TempDir::new().unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let mut seen = 0;
        walk_files(
            dir.path(),
            dir.path(),
            &[],
            &CancellationToken::new(),
            |_| {
                seen += 1;
                if seen == 2 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )
        .unwrap();
        assert_eq!(seen, 2);
        let cancel = CancellationToken::new();
        cancel.cancel();
        walk_files(dir.path(), dir.path(), &[], &cancel, |_| {
            panic!("visited after cancellation")
        })
        .unwrap();
    }
}
