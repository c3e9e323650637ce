//! The `glob` tool: the workspace's files whose path matches a glob pattern.

use std::io::ErrorKind;
use std::ops::ControlFlow;

use baton_core::tools::OUTPUT_CAP_BYTES;
use globset::GlobBuilder;
use serde::Deserialize;

use super::output::cap;
use super::walk::walk_files;
use super::workspace::resolve;
use super::{Outcome, ToolContext};

/// `glob` returns at most this many paths.
pub const MAX_GLOB_RESULTS: usize = 1000;
/// Directories that are never searched (unless given as `path`).
pub const SKIPPED_DIRS: [&str; 1] = [".git"];

/// Arguments of the `glob` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// The glob pattern, matched against paths relative to `path`.
    pub pattern: String,
    /// Directory to search from, relative to the workspace (default: the workspace).
    #[serde(default)]
    pub path: Option<String>,
}

/// Lists the files below `path` (the workspace by default) whose path relative to `path`
/// matches `pattern` (`*` and `?` stay within one path component, `**` spans any number of
/// them), as paths relative to the workspace, sorted. Directories are not listed, `.git`
/// directories and symbolic links to directories are not searched. At most
/// [`MAX_GLOB_RESULTS`] paths, then a note.
pub async fn glob(ctx: &ToolContext, args: GlobArgs) -> Outcome {
    let pattern = args.pattern.strip_prefix("./").unwrap_or(&args.pattern);
    let matcher = match GlobBuilder::new(pattern).literal_separator(true).build() {
        Ok(glob) => glob.compile_matcher(),
        Err(e) => {
            return Outcome::error(format!(
                "invalid glob pattern '{}': {e}; use a pattern such as **/*.rs or src/*.toml",
                args.pattern
            ));
        }
    };
    let shown = args.path.as_deref().unwrap_or(".");
    let (root, base) = match (resolve(&ctx.workspace, ""), resolve(&ctx.workspace, shown)) {
        (Ok(root), Ok(base)) => (root, base),
        (Err(message), _) | (_, Err(message)) => return Outcome::error(message),
    };
    match tokio::fs::metadata(&base).await {
        Ok(meta) if !meta.is_dir() => {
            return Outcome::error(format!(
                "'{shown}' is a file, not a directory; give a directory as path (or none for the \
                 whole workspace)"
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Outcome::error(format!(
                "directory '{shown}' does not exist; give a directory of the workspace as path \
                 (or none for the whole workspace)"
            ));
        }
        Err(e) => return Outcome::error(format!("cannot search '{shown}': {e}")),
    }

    let cancel = ctx.cancel.clone();
    let found = tokio::task::spawn_blocking(move || {
        let mut paths = Vec::new();
        let mut truncated = false;
        let summary = walk_files(&root, &base, &SKIPPED_DIRS, &cancel, |entry| {
            if !matcher.is_match(entry.from_base) {
                return ControlFlow::Continue(());
            }
            if paths.len() == MAX_GLOB_RESULTS {
                truncated = true;
                return ControlFlow::Break(());
            }
            paths.push(entry.from_root.to_owned());
            ControlFlow::Continue(())
        })?;
        Ok::<_, std::io::Error>((paths, truncated, summary.unreadable_dirs))
    })
    .await;
    let (mut lines, truncated, unreadable) = match found {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return Outcome::error(format!("cannot search '{shown}': {e}")),
        Err(e) => return Outcome::error(format!("searching '{shown}' failed: {e}")),
    };

    if lines.is_empty() {
        let mut message = format!("no files match '{}'", args.pattern);
        if args.path.is_some() {
            message.push_str(&format!(" in '{shown}'"));
        }
        if !pattern.contains('/') {
            message.push_str(&format!(
                " (a pattern without '/' only matches files directly in the directory; use \
                 '**/{pattern}' to look in subdirectories too)"
            ));
        }
        lines.push(message);
    }
    if truncated {
        lines.push(format!(
            "[stopped after {MAX_GLOB_RESULTS} files; use a more specific pattern or path]"
        ));
    }
    if unreadable > 0 {
        lines.push(format!(
            "[skipped {unreadable} directories that could not be read]"
        ));
    }
    Outcome::ok(cap(&lines.join("\n"), OUTPUT_CAP_BYTES))
}

#[cfg(test)]
mod tests {
    use crate::tools::execute;
    use crate::tools::tests::{call, context};
    use baton_core::tools::{GLOB, OUTPUT_CAP_BYTES};
    use baton_proto::ToolResult;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    use super::MAX_GLOB_RESULTS;

    async fn glob(dir: &TempDir, arguments: serde_json::Value) -> ToolResult {
        execute(&context(dir), &call(GLOB, arguments))
            .await
            .unwrap()
    }

    fn tree(dir: &TempDir) {
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/bin")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::create_dir_all(root.join("dir.rs")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(root.join("src/bin/main.rs"), "").unwrap();
        std::fs::write(root.join("src/config.toml"), "").unwrap();
        std::fs::write(root.join("src/bin/extra.toml"), "").unwrap();
        std::fs::write(root.join("build.rs"), "").unwrap();
        std::fs::write(root.join("Cargo.toml"), "").unwrap();
        std::fs::write(root.join(".git/hook.rs"), "").unwrap();
        std::fs::write(root.join("target/debug/gen.rs"), "").unwrap();
    }

    #[tokio::test]
    async fn matches_recursively_sorted_without_directories() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = glob(&dir, serde_json::json!({"pattern": "**/*.rs"})).await;
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(
            result.content,
            "build.rs\nsrc/bin/main.rs\nsrc/lib.rs\ntarget/debug/gen.rs"
        );
        let result = glob(&dir, serde_json::json!({"pattern": "./*.rs"})).await;
        assert_eq!(result.content, "build.rs");
    }

    #[tokio::test]
    async fn star_stays_within_a_directory() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = glob(&dir, serde_json::json!({"pattern": "src/*.toml"})).await;
        assert_eq!(result.content, "src/config.toml");
        let result = glob(&dir, serde_json::json!({"pattern": "src/**/*.toml"})).await;
        assert_eq!(result.content, "src/bin/extra.toml\nsrc/config.toml");
        let result = glob(&dir, serde_json::json!({"pattern": "{Cargo,build}.*"})).await;
        assert_eq!(result.content, "Cargo.toml\nbuild.rs");
    }

    #[tokio::test]
    async fn matches_relative_to_the_base_path() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = glob(&dir, serde_json::json!({"pattern": "*.rs", "path": "src"})).await;
        assert_eq!(result.content, "src/lib.rs");
        let result = glob(
            &dir,
            serde_json::json!({"pattern": "bin/*", "path": "src/"}),
        )
        .await;
        assert_eq!(result.content, "src/bin/extra.toml\nsrc/bin/main.rs");
        let result = glob(&dir, serde_json::json!({"pattern": "*", "path": ".git"})).await;
        assert_eq!(result.content, ".git/hook.rs");
        let result = glob(&dir, serde_json::json!({"pattern": "*", "path": "nope"})).await;
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("directory 'nope' does not exist;")
        );
        let result = glob(
            &dir,
            serde_json::json!({"pattern": "*", "path": "build.rs"}),
        )
        .await;
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("'build.rs' is a file, not a directory;")
        );
    }

    #[tokio::test]
    async fn no_match_is_not_an_error() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = glob(&dir, serde_json::json!({"pattern": "**/*.py"})).await;
        assert_eq!(result.content, "no files match '**/*.py'");
        assert!(!result.is_error);
        let result = glob(
            &dir,
            serde_json::json!({"pattern": "main.rs", "path": "src"}),
        )
        .await;
        assert_eq!(
            result.content,
            "no files match 'main.rs' in 'src' (a pattern without '/' only matches files \
             directly in the directory; use '**/main.rs' to look in subdirectories too)"
        );
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn does_not_follow_symlinked_directories() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret.rs"), "").unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        symlink("src", dir.path().join("src-link")).unwrap();
        symlink("build.rs", dir.path().join("alias.rs")).unwrap();
        let result = glob(&dir, serde_json::json!({"pattern": "**/*.rs"})).await;
        assert_eq!(
            result.content,
            "alias.rs\nbuild.rs\nsrc/bin/main.rs\nsrc/lib.rs\ntarget/debug/gen.rs"
        );
    }

    #[tokio::test]
    async fn stops_after_the_maximum() {
        let dir = TempDir::new().unwrap();
        for i in 0..(MAX_GLOB_RESULTS + 5) {
            std::fs::write(dir.path().join(format!("f{i:04}.txt")), "").unwrap();
        }
        let result = glob(&dir, serde_json::json!({"pattern": "*.txt"})).await;
        assert!(!result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(result.content.starts_with("f0000.txt\nf0001.txt\n"));
        assert!(result.content.ends_with(&format!(
            "f{:04}.txt\n[stopped after {MAX_GLOB_RESULTS} files; use a more specific pattern \
             or path]",
            MAX_GLOB_RESULTS - 1
        )));
    }

    #[tokio::test]
    async fn invalid_pattern_is_an_error() {
        let dir = TempDir::new().unwrap();
        let result = glob(&dir, serde_json::json!({"pattern": "src/[a-"})).await;
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("invalid glob pattern 'src/[a-': "),
            "{}",
            result.content
        );
        assert!(
            result
                .content
                .ends_with("use a pattern such as **/*.rs or src/*.toml")
        );
    }

    #[tokio::test]
    async fn paths_outside_the_workspace_are_errors() {
        let dir = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        for path in ["..", "/", "out", "src/../../"] {
            let result = glob(&dir, serde_json::json!({"pattern": "*", "path": path})).await;
            assert_eq!(
                result.content,
                format!(
                    "path '{path}' is outside the workspace; use a path relative to the \
                     workspace root"
                )
            );
            assert!(result.is_error);
        }
    }
}
