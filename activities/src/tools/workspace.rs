//! Confinement of tool paths to the run's workspace: [`resolve`] decides which file a path
//! means (following links that stay inside), [`confine`] gives it as a [`Beneath`] root + a
//! link-free relative path, so the worker opens exactly that file even if the tree changes
//! meanwhile (a process left behind by a command can swap a directory for a link
//! between the check and the use).

use std::path::{Component, Path, PathBuf};

use baton_store::beneath::{Beneath, OpenError, is_link_error};
use baton_store::snapshot::LOCAL_DIR;

/// A path the model gave, resolved inside the workspace: open it with `root`'s methods and
/// `rel`, never by name.
#[derive(Debug)]
pub struct Confined {
    /// The workspace, open.
    pub root: Beneath,
    /// The resolved path relative to the workspace, without links (empty: the root).
    pub rel: PathBuf,
}

/// [`resolve`]s `rel` and opens the workspace for it. The error is a message for the model.
pub fn confine(workspace: &Path, rel: &str) -> Result<Confined, String> {
    let root = canonical_root(workspace)?;
    let resolved = resolve_in(&root, rel)?;
    let inner = resolved
        .strip_prefix(&root)
        .map_err(|_| format!("path '{rel}' is outside the workspace"))?
        .to_path_buf();
    let root = Beneath::open(&root).map_err(|e| not_accessible(workspace, &e))?;
    Ok(Confined { root, rel: inner })
}

/// The message for an error of an operation on the confined path `shown` (`what`: "read",
/// "write", ..): a link found on the way is named as what it is, a change under way.
pub fn io_message(shown: &str, what: &str, err: &std::io::Error) -> String {
    if is_link_error(err) {
        format!(
            "cannot {what} '{shown}': a symbolic link appeared on its path while it was being \
             opened (something is changing the workspace, e.g. a process a command left \
             running); nothing was done through the link. Try again, or use a plain path"
        )
    } else {
        format!("cannot {what} '{shown}': {err}")
    }
}

/// [`io_message`] for [`OpenError`]s.
pub fn open_message(shown: &str, what: &str, err: &OpenError) -> String {
    match err {
        OpenError::Io(e) => io_message(shown, what, e),
        OpenError::Directory => format!("'{shown}' is a directory, not a file"),
        OpenError::Special => format!(
            "'{shown}' is not a regular file (it is a device, socket or pipe) and cannot be {what}"
        ),
    }
}

fn canonical_root(workspace: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(workspace).map_err(|e| not_accessible(workspace, &e))
}

fn not_accessible(workspace: &Path, e: &std::io::Error) -> String {
    format!(
        "the workspace '{}' is not accessible ({e}); this is not something you can fix",
        workspace.display()
    )
}

/// How many symbolic links to dangling targets [`resolve`] follows by hand before giving up
/// (the kernel's own limit is 40).
const MAX_SYMLINK_HOPS: usize = 40;

/// Resolves `rel`, a path the model gave, to a path inside `workspace`.
///
/// Relative paths are taken from the workspace root; absolute paths are allowed only if they
/// lie inside the workspace. `..` and symbolic links are resolved: the deepest existing
/// ancestor is canonicalized and the part that does not exist yet is appended again (a `..`
/// in that part is rejected). A symbolic link inside the workspace pointing outside of it is
/// rejected, also when its target does not exist yet (writing through it would create a file
/// outside). The empty path means the workspace root.
///
/// The result is absolute, starts with the canonicalized workspace and does not need to exist
/// (so it serves for writing too). The error is a message for the model.
pub fn resolve(workspace: &Path, rel: &str) -> Result<PathBuf, String> {
    resolve_in(&canonical_root(workspace)?, rel)
}

/// [`resolve`] in the already canonical workspace `root`.
fn resolve_in(root: &Path, rel: &str) -> Result<PathBuf, String> {
    let root = root.to_path_buf();
    let outside = || {
        format!("path '{rel}' is outside the workspace; use a path relative to the workspace root")
    };

    let mut path = root.join(rel); // `join` with an absolute path replaces `root`.
    for _ in 0..MAX_SYMLINK_HOPS {
        let (base, tail) = split_existing(&path);
        let mut tail_parts: Vec<&Path> = Vec::new();
        for component in &tail {
            match component {
                Component::Normal(part) => tail_parts.push(Path::new(part)),
                Component::CurDir => {}
                Component::ParentDir => {
                    return if lexically_inside(&base, &tail, &root) {
                        Err(format!(
                            "path '{rel}' uses '..' after a directory that does not exist; \
                             write the path without '..', relative to the workspace root"
                        ))
                    } else {
                        Err(outside())
                    };
                }
                // `split_existing` always canonicalizes at least the root, so the tail has
                // neither a root nor a prefix; be strict anyway.
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        if !base.starts_with(&root) {
            return Err(outside());
        }
        // The first missing component may still be a symbolic link whose target is missing
        // (canonicalize fails on it); the kernel would follow it when creating the file.
        if let Some((first, rest)) = tail_parts.split_first() {
            let candidate = base.join(first);
            if let Ok(meta) = std::fs::symlink_metadata(&candidate)
                && meta.file_type().is_symlink()
            {
                let target = std::fs::read_link(&candidate)
                    .map_err(|e| format!("cannot read the symbolic link '{rel}': {e}"))?;
                // A relative target is relative to the link's directory; `join` keeps an
                // absolute one as is.
                let mut next = base.join(target);
                next.extend(rest);
                path = next;
                continue;
            }
        }
        let mut resolved = base;
        resolved.extend(&tail_parts);
        return if !resolved.starts_with(&root) {
            Err(outside())
        } else if is_local_state(&root, &resolved) {
            Err(format!(
                "path '{rel}' is in '{LOCAL_DIR}/', the worker's own state directory in the \
                 workspace (workspace snapshots); tools cannot read or change it, use another path"
            ))
        } else {
            Ok(resolved)
        };
    }
    Err(format!(
        "path '{rel}' goes through too many symbolic links; use a plain path inside the workspace"
    ))
}

/// Whether `path` (resolved, inside the canonical `root`) is the worker's state directory at
/// the workspace root ([`LOCAL_DIR`]) or inside it. File tools neither show nor touch it: it
/// holds the snapshot cache that decides what a hand-off restores.
pub(crate) fn is_local_state(root: &Path, path: &Path) -> bool {
    path.strip_prefix(root)
        .is_ok_and(|rel| rel.components().next() == Some(Component::Normal(LOCAL_DIR.as_ref())))
}

/// Whether `base` followed by `tail`, with `..` applied textually, stays inside `root`.
fn lexically_inside(base: &Path, tail: &[Component<'_>], root: &Path) -> bool {
    let mut path = base.to_path_buf();
    for component in tail {
        match component {
            Component::Normal(part) => path.push(part),
            Component::ParentDir => {
                path.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    path.starts_with(root)
}

/// Splits `path` (absolute) into its deepest canonicalizable ancestor, canonicalized, and the
/// components after it.
fn split_existing(path: &Path) -> (PathBuf, Vec<Component<'_>>) {
    let components: Vec<Component<'_>> = path.components().collect();
    for split in (1..=components.len()).rev() {
        let prefix: PathBuf = components[..split].iter().collect();
        // On failure (missing, not a directory, not searchable) look one level higher; the
        // operation on the final path will report the real problem.
        if let Ok(base) = std::fs::canonicalize(&prefix) {
            return (base, components[split..].to_vec());
        }
    }
    // Only reachable if even the filesystem root cannot be canonicalized.
    (PathBuf::from("/"), components.into_iter().skip(1).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    fn setup() -> (TempDir, PathBuf) {
        let dir = TempDir::new().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
        (dir, root)
    }

    fn assert_outside(result: Result<PathBuf, String>, rel: &str) {
        assert_eq!(
            result,
            Err(format!(
                "path '{rel}' is outside the workspace; use a path relative to the workspace root"
            ))
        );
    }

    #[test]
    fn relative_path_is_resolved_in_the_workspace() {
        let (dir, root) = setup();
        assert_eq!(
            resolve(dir.path(), "src/main.rs"),
            Ok(root.join("src/main.rs"))
        );
        assert_eq!(
            resolve(dir.path(), "./src/./main.rs"),
            Ok(root.join("src/main.rs"))
        );
        assert_eq!(
            resolve(dir.path(), "src/../src/main.rs"),
            Ok(root.join("src/main.rs"))
        );
        // `PathBuf` equality ignores a trailing `/`, which would make the file a directory.
        let resolved = resolve(dir.path(), "src/main.rs").unwrap();
        assert_eq!(resolved.to_str(), root.join("src/main.rs").to_str());
        let resolved = resolve(dir.path(), "src/new.rs").unwrap();
        assert_eq!(resolved.to_str(), root.join("src/new.rs").to_str());
    }

    #[test]
    fn empty_and_dot_mean_the_workspace_root() {
        let (dir, root) = setup();
        assert_eq!(resolve(dir.path(), ""), Ok(root.clone()));
        assert_eq!(resolve(dir.path(), "."), Ok(root.clone()));
        assert_eq!(resolve(dir.path(), "src/.."), Ok(root));
    }

    #[test]
    fn parent_dir_escape_is_rejected() {
        let (dir, _) = setup();
        assert_outside(resolve(dir.path(), "../x"), "../x");
        assert_outside(resolve(dir.path(), ".."), "..");
        assert_outside(resolve(dir.path(), "src/../../x"), "src/../../x");
        assert_outside(
            resolve(dir.path(), "../../../../../../etc/passwd"),
            "../../../../../../etc/passwd",
        );
    }

    #[test]
    fn sibling_with_common_prefix_is_outside() {
        let (dir, root) = setup();
        let sibling = format!("{}-other/x", root.display());
        assert_outside(resolve(dir.path(), &sibling), &sibling);
    }

    #[test]
    fn parent_dir_after_a_missing_directory_is_rejected() {
        let (dir, _) = setup();
        let err = resolve(dir.path(), "new/../x").unwrap_err();
        assert!(
            err.contains("uses '..' after a directory that does not exist"),
            "{err}"
        );
        assert_outside(resolve(dir.path(), "new/../../x"), "new/../../x");
    }

    #[test]
    fn the_workers_state_directory_is_off_limits() {
        let (dir, root) = setup();
        std::fs::create_dir(root.join(".baton")).unwrap();
        std::fs::write(root.join(".baton/snapshot-state.json"), "{}").unwrap();
        symlink(root.join(".baton"), root.join("state-link")).unwrap();
        for rel in [
            ".baton",
            ".baton/snapshot-state.json",
            "./.baton/new",
            "src/../.baton/x",
            "state-link/snapshot-state.json",
        ] {
            let err = resolve(dir.path(), rel).unwrap_err();
            assert!(
                err.contains("the worker's own state directory"),
                "{rel}: {err}"
            );
        }
        let absolute = root.join(".baton/x").display().to_string();
        assert!(resolve(dir.path(), &absolute).is_err());
        // Only the root's `.baton` is the worker's; others are ordinary files.
        assert_eq!(
            resolve(dir.path(), "src/.baton/x"),
            Ok(root.join("src/.baton/x"))
        );
        assert_eq!(resolve(dir.path(), ".batons"), Ok(root.join(".batons")));
    }

    #[test]
    fn absolute_path_outside_is_rejected() {
        let (dir, _) = setup();
        assert_outside(resolve(dir.path(), "/etc/passwd"), "/etc/passwd");
        assert_outside(resolve(dir.path(), "/"), "/");
        assert_outside(
            resolve(dir.path(), "/nonexistent/dir/f"),
            "/nonexistent/dir/f",
        );
    }

    #[test]
    fn absolute_path_inside_is_allowed() {
        let (dir, root) = setup();
        let abs = root.join("src/main.rs");
        assert_eq!(resolve(dir.path(), abs.to_str().unwrap()), Ok(abs.clone()));
        // Also when spelled through the non-canonical workspace path.
        let spelled = dir.path().join("src/main.rs");
        assert_eq!(resolve(dir.path(), spelled.to_str().unwrap()), Ok(abs));
        let new = dir.path().join("new/file.txt");
        assert_eq!(
            resolve(dir.path(), new.to_str().unwrap()),
            Ok(root.join("new/file.txt"))
        );
    }

    #[test]
    fn symlink_escaping_the_workspace_is_rejected() {
        let (dir, root) = setup();
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path(), root.join("link")).unwrap();
        symlink(outside.path().join("secret"), root.join("secret-link")).unwrap();
        assert_outside(resolve(dir.path(), "link"), "link");
        assert_outside(resolve(dir.path(), "link/secret"), "link/secret");
        assert_outside(resolve(dir.path(), "link/new-file"), "link/new-file");
        assert_outside(resolve(dir.path(), "secret-link"), "secret-link");
    }

    #[test]
    fn dangling_symlink_escaping_the_workspace_is_rejected() {
        let (dir, root) = setup();
        let outside = TempDir::new().unwrap();
        let target = outside.path().join("not-yet");
        symlink(&target, root.join("dangling")).unwrap();
        assert_outside(resolve(dir.path(), "dangling"), "dangling");
        assert_outside(resolve(dir.path(), "dangling/x"), "dangling/x");
        symlink(
            "../../../../../../../../tmp/nope",
            root.join("rel-dangling"),
        )
        .unwrap();
        assert_outside(resolve(dir.path(), "rel-dangling"), "rel-dangling");
    }

    #[test]
    fn symlink_inside_the_workspace_is_followed() {
        let (dir, root) = setup();
        symlink("src", root.join("code")).unwrap();
        symlink("src/new.rs", root.join("dangling-inside")).unwrap();
        assert_eq!(
            resolve(dir.path(), "code/main.rs"),
            Ok(root.join("src/main.rs"))
        );
        assert_eq!(
            resolve(dir.path(), "dangling-inside"),
            Ok(root.join("src/new.rs"))
        );
    }

    #[test]
    fn symlink_loop_is_rejected() {
        let (dir, root) = setup();
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        let err = resolve(dir.path(), "a").unwrap_err();
        assert!(err.contains("too many symbolic links"), "{err}");
    }

    #[test]
    fn missing_nested_path_is_allowed_for_writing() {
        let (dir, root) = setup();
        assert_eq!(
            resolve(dir.path(), "a/b/c/new.txt"),
            Ok(root.join("a/b/c/new.txt"))
        );
        assert_eq!(
            resolve(dir.path(), "src/sub/x.rs"),
            Ok(root.join("src/sub/x.rs"))
        );
    }

    #[test]
    fn workspace_that_does_not_exist_is_reported() {
        let dir = TempDir::new().unwrap();
        let err = resolve(&dir.path().join("missing"), "x").unwrap_err();
        assert!(err.contains("is not accessible"), "{err}");
    }
}
