//! `list_files`: a directory's entries, optionally recursive, sorted and bounded; symbolic
//! links are listed, never followed.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use baton_core::tools::OUTPUT_CAP_BYTES;
use serde::Deserialize;

use crate::tools::output::cap;
use crate::tools::walk::sorted_entries;
use crate::tools::workspace::{is_local_state, resolve};
use crate::tools::{Outcome, ToolContext};

/// `list_files` stops after this many entries.
pub const MAX_LIST_ENTRIES: usize = 2000;

/// Arguments of the `list_files` tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory to list, relative to the workspace (default: the workspace itself).
    #[serde(default)]
    pub path: Option<String>,
    /// List subdirectories too (default false).
    #[serde(default)]
    pub recursive: Option<bool>,
}

/// Lists a directory (the workspace by default), optionally recursively, as paths relative to
/// the workspace, sorted, directories with a trailing `/`. Symbolic links are listed but never
/// followed into. At most [`MAX_LIST_ENTRIES`] entries, then a note.
pub async fn list_files(ctx: &ToolContext, args: ListFilesArgs) -> Outcome {
    let shown = args.path.as_deref().unwrap_or(".");
    let (root, dir) = match (resolve(&ctx.workspace, ""), resolve(&ctx.workspace, shown)) {
        (Ok(root), Ok(dir)) => (root, dir),
        (Err(message), _) | (_, Err(message)) => return Outcome::error(message),
    };
    match tokio::fs::metadata(&dir).await {
        Ok(meta) if !meta.is_dir() => {
            return Outcome::error(format!(
                "'{shown}' is a file, not a directory; use read_file to read it"
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Outcome::error(format!(
                "directory '{shown}' does not exist; list the workspace root (no path) to see \
                 what there is"
            ));
        }
        Err(e) => return Outcome::error(format!("cannot list '{shown}': {e}")),
    }

    let recursive = args.recursive.unwrap_or(false);
    let listing =
        tokio::task::spawn_blocking(move || walk(&root, &dir, recursive, MAX_LIST_ENTRIES)).await;
    let listing = match listing {
        Ok(Ok(listing)) => listing,
        Ok(Err(e)) => return Outcome::error(format!("cannot list '{shown}': {e}")),
        Err(e) => return Outcome::error(format!("listing '{shown}' failed: {e}")),
    };

    let mut lines = listing.entries;
    if lines.is_empty() && listing.problems.is_empty() {
        return Outcome::ok(format!("(the directory '{shown}' is empty)"));
    }
    lines.extend(listing.problems);
    if listing.truncated {
        lines.push(format!(
            "[listing stopped after {MAX_LIST_ENTRIES} entries; list subdirectories one at a time \
             instead]"
        ));
    }
    Outcome::ok(cap(&lines.join("\n"), OUTPUT_CAP_BYTES))
}

/// The result of walking a directory.
struct Listing {
    entries: Vec<String>,
    /// Notes about subdirectories that could not be read.
    problems: Vec<String>,
    truncated: bool,
}

/// Lists `dir` (depth first, siblings sorted by name) as paths relative to `root`.
fn walk(root: &Path, dir: &Path, recursive: bool, max: usize) -> std::io::Result<Listing> {
    let mut listing = Listing {
        entries: Vec::new(),
        problems: Vec::new(),
        truncated: false,
    };
    let mut stack = vec![read_sorted(dir)?.into_iter()];
    while let Some(level) = stack.last_mut() {
        let Some((path, kind)) = level.next() else {
            stack.pop();
            continue;
        };
        if is_local_state(root, &path) {
            continue;
        }
        if listing.entries.len() == max {
            listing.truncated = true;
            break;
        }
        let relative = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
        let shown = if kind.is_dir() {
            format!("{relative}/")
        } else {
            relative.into_owned()
        };
        if recursive && kind == Kind::Dir {
            match read_sorted(&path) {
                Ok(children) => stack.push(children.into_iter()),
                Err(e) => listing
                    .problems
                    .push(format!("[cannot read '{shown}': {e}]")),
            }
        }
        listing.entries.push(shown);
    }
    Ok(listing)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    /// A symbolic link to a directory: shown as a directory, never descended into.
    LinkToDir,
    Other,
}

impl Kind {
    fn is_dir(self) -> bool {
        matches!(self, Kind::Dir | Kind::LinkToDir)
    }
}

/// The entries of `dir`, sorted by name.
fn read_sorted(dir: &Path) -> std::io::Result<Vec<(PathBuf, Kind)>> {
    sorted_entries(dir, |path, file_type| match file_type {
        Ok(t) if t.is_dir() => Kind::Dir,
        Ok(t) if t.is_symlink() && std::fs::metadata(path).is_ok_and(|m| m.is_dir()) => {
            Kind::LinkToDir
        }
        _ => Kind::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{outside_message, run, running_as_root, tree};
    use super::*;
    use baton_core::tools::LIST_FILES;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use tempfile::TempDir;

    #[tokio::test]
    async fn lists_the_workspace() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = run(&dir, LIST_FILES, serde_json::json!({})).await;
        assert_eq!(result.content, ".git/\nCargo.toml\na-b.txt\nempty/\nsrc/");
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn lists_recursively_in_sorted_order() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = run(&dir, LIST_FILES, serde_json::json!({"recursive": true})).await;
        assert_eq!(
            result.content,
            ".git/\n.git/HEAD\nCargo.toml\na-b.txt\nempty/\nsrc/\nsrc/bin/\nsrc/bin/main.rs\nsrc/lib.rs"
        );
    }

    #[tokio::test]
    async fn lists_a_subdirectory_relative_to_the_workspace() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = run(
            &dir,
            LIST_FILES,
            serde_json::json!({"path": "src", "recursive": false}),
        )
        .await;
        assert_eq!(result.content, "src/bin/\nsrc/lib.rs");
        let result = run(
            &dir,
            LIST_FILES,
            serde_json::json!({"path": "src/bin", "recursive": true}),
        )
        .await;
        assert_eq!(result.content, "src/bin/main.rs");
    }

    #[tokio::test]
    async fn empty_directory_says_so() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = run(&dir, LIST_FILES, serde_json::json!({"path": "empty"})).await;
        assert_eq!(result.content, "(the directory 'empty' is empty)");
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn does_not_follow_symlinked_directories() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret"), "").unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        symlink("src", dir.path().join("src-link")).unwrap();
        symlink("Cargo.toml", dir.path().join("toml-link")).unwrap();
        symlink("missing", dir.path().join("broken")).unwrap();
        let result = run(&dir, LIST_FILES, serde_json::json!({"recursive": true})).await;
        assert_eq!(
            result.content,
            ".git/\n.git/HEAD\nCargo.toml\na-b.txt\nbroken\nempty/\nout/\nsrc/\nsrc/bin/\n\
             src/bin/main.rs\nsrc/lib.rs\nsrc-link/\ntoml-link"
        );
    }

    #[tokio::test]
    async fn long_listing_is_bounded() {
        let dir = TempDir::new().unwrap();
        for i in 0..(MAX_LIST_ENTRIES + 10) {
            std::fs::write(dir.path().join(format!("file-number-{i:05}")), "").unwrap();
        }
        let result = run(&dir, LIST_FILES, serde_json::json!({})).await;
        assert!(!result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result
                .content
                .starts_with("file-number-00000\nfile-number-00001\n")
        );
        assert!(result.content.contains("bytes cut from the middle of"));
        assert!(result.content.ends_with(&format!(
            "file-number-{:05}\n[listing stopped after {MAX_LIST_ENTRIES} entries; list subdirectories one \
             at a time instead]",
            MAX_LIST_ENTRIES - 1
        )));
    }

    #[tokio::test]
    async fn unreadable_subdirectory_is_noted() {
        if running_as_root() {
            return;
        }
        let dir = TempDir::new().unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("f"), "").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let result = run(&dir, LIST_FILES, serde_json::json!({"recursive": true})).await;
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(!result.is_error);
        assert!(
            result
                .content
                .starts_with("locked/\n[cannot read 'locked/': "),
            "{}",
            result.content
        );
    }

    #[tokio::test]
    async fn listing_errors() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let outside = TempDir::new().unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        let result = run(&dir, LIST_FILES, serde_json::json!({"path": "nope"})).await;
        assert_eq!(
            result.content,
            "directory 'nope' does not exist; list the workspace root (no path) to see what there is"
        );
        assert!(result.is_error);
        let result = run(&dir, LIST_FILES, serde_json::json!({"path": "Cargo.toml"})).await;
        assert_eq!(
            result.content,
            "'Cargo.toml' is a file, not a directory; use read_file to read it"
        );
        assert!(result.is_error);
        for path in ["..", "/", "out", "src/../../"] {
            let result = run(&dir, LIST_FILES, serde_json::json!({"path": path})).await;
            assert_eq!(result.content, outside_message(path));
            assert!(result.is_error);
        }
    }
}
