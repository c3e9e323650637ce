//! `write_file`: creates or overwrites a file, with its parent directories.

use baton_store::beneath::{OpenError, is_link_error};
use nix::fcntl::OFlag;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::tools::workspace::{Confined, confine, io_message, open_message};
use crate::tools::{Outcome, ToolContext};

/// Arguments of the `write_file` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path of the file, relative to the workspace.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// Creates or overwrites a file with `content`, creating its parent directories.
pub async fn write_file(ctx: &ToolContext, args: WriteFileArgs) -> Outcome {
    let shown = &args.path;
    let Confined { root, rel } = match confine(&ctx.workspace, shown) {
        Ok(confined) => confined,
        Err(message) => return Outcome::error(message),
    };
    let is_dir = || {
        format!(
            "'{shown}' is a directory; give the path of a file to write, e.g. '{}/file.txt'",
            shown.trim_end_matches('/')
        )
    };
    if root.symlink_metadata(&rel).is_ok_and(|m| m.is_dir()) {
        return Outcome::error(is_dir());
    }
    let (parent, name) = match rel.parent().zip(rel.file_name()) {
        Some(parts) => parts,
        None => return Outcome::error(is_dir()),
    };
    let dir = match root.create_dirs(parent) {
        Ok(dir) => dir,
        Err(e) if is_link_error(&e) => return Outcome::error(io_message(shown, "write", &e)),
        Err(e) => {
            return Outcome::error(format!(
                "cannot create the directories for '{shown}': {e}; check that no part of the \
                 path is an existing file"
            ));
        }
    };
    let file = match dir.open_regular_entry(name, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC)
    {
        Ok(file) => file,
        Err(OpenError::Directory) => return Outcome::error(is_dir()),
        Err(e) => return Outcome::error(open_message(shown, "write", &e)),
    };
    let mut file = tokio::fs::File::from_std(file);
    let written = async {
        file.write_all(args.content.as_bytes()).await?;
        file.flush().await
    };
    match written.await {
        Ok(()) => Outcome::ok(format!("wrote {} bytes to {shown}", args.content.len())),
        Err(e) => Outcome::error(format!("cannot write '{shown}': {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, outside_message, run, running_as_root};
    use baton_core::tools::WRITE_FILE;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use tempfile::TempDir;

    #[tokio::test]
    async fn writes_a_file_creating_directories() {
        let dir = TempDir::new().unwrap();
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": "a/b/c.txt", "content": "héllo\n"}),
        )
        .await;
        assert_eq!(result.content, "wrote 7 bytes to a/b/c.txt");
        assert!(!result.is_error);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "héllo\n"
        );
    }

    #[tokio::test]
    async fn overwrites_a_file() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("f"), "old content that is longer").unwrap();
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": "f", "content": "new"}),
        )
        .await;
        assert_eq!(result.content, "wrote 3 bytes to f");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f")).unwrap(),
            "new"
        );
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": "f", "content": ""}),
        )
        .await;
        assert_eq!(result.content, "wrote 0 bytes to f");
        assert_eq!(std::fs::read_to_string(dir.path().join("f")).unwrap(), "");
    }

    #[tokio::test]
    async fn writing_over_a_directory_is_an_error() {
        let dir = TempDir::new().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": "sub/", "content": "x"}),
        )
        .await;
        assert_eq!(
            result.content,
            "'sub/' is a directory; give the path of a file to write, e.g. 'sub/file.txt'"
        );
        assert!(result.is_error);
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": ".", "content": "x"}),
        )
        .await;
        assert_error(&result, "'.' is a directory");
    }

    #[tokio::test]
    async fn writing_below_a_file_is_an_error() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": "file/sub/new.txt", "content": "x"}),
        )
        .await;
        assert_error(
            &result,
            "cannot create the directories for 'file/sub/new.txt'",
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("file")).unwrap(),
            "x"
        );
    }

    #[tokio::test]
    async fn writing_without_permission_is_an_error() {
        if running_as_root() {
            return;
        }
        let dir = TempDir::new().unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": "locked/f", "content": "x"}),
        )
        .await;
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_error(&result, "cannot write 'locked/f': Permission denied");
    }

    #[tokio::test]
    async fn writing_outside_the_workspace_is_an_error() {
        let dir = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        symlink(outside.path(), dir.path().join("out-dir")).unwrap();
        // A dangling link: writing through it would create the target.
        symlink(outside.path().join("created"), dir.path().join("dangling")).unwrap();
        let abs = outside
            .path()
            .join("abs.txt")
            .to_string_lossy()
            .into_owned();
        for path in [
            "../escaped.txt",
            abs.as_str(),
            "out-dir/new.txt",
            "dangling",
            "a/../../x",
        ] {
            let result = run(
                &dir,
                WRITE_FILE,
                serde_json::json!({"path": path, "content": "x"}),
            )
            .await;
            assert_eq!(result.content, outside_message(path));
            assert!(result.is_error);
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(!dir.path().parent().unwrap().join("escaped.txt").exists());
    }

    #[tokio::test]
    async fn writes_with_an_absolute_path_inside() {
        let dir = TempDir::new().unwrap();
        let abs = dir.path().join("abs.txt").to_string_lossy().into_owned();
        let result = run(
            &dir,
            WRITE_FILE,
            serde_json::json!({"path": abs, "content": "ok"}),
        )
        .await;
        assert_eq!(result.content, format!("wrote 2 bytes to {abs}"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("abs.txt")).unwrap(),
            "ok"
        );
    }
}
