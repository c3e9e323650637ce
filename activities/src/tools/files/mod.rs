//! The file tools: `read_file` ([`read`]), `write_file` ([`write`]) and `list_files`
//! ([`list`]), all confined to the workspace.

mod list;
#[cfg(test)]
mod race_tests;
mod read;
mod write;

pub use list::{ListFilesArgs, MAX_LIST_ENTRIES, list_files};
pub use read::{MAX_READ_BYTES, ReadFileArgs, read_file};
pub use write::{WriteFileArgs, write_file};

#[cfg(test)]
pub(super) mod tests {
    use crate::tools::execute;
    use crate::tools::tests::{call, context};
    use baton_core::tools::{LIST_FILES, READ_FILE, WRITE_FILE};
    use baton_proto::ToolResult;
    use pretty_assertions::assert_eq;
    use tempfile::TempDir;

    pub(super) async fn run(dir: &TempDir, tool: &str, arguments: serde_json::Value) -> ToolResult {
        execute(&context(dir), &call(tool, arguments))
            .await
            .unwrap()
    }

    pub(super) fn outside_message(path: &str) -> String {
        format!("path '{path}' is outside the workspace; use a path relative to the workspace root")
    }

    pub(super) fn assert_error(result: &ToolResult, expected: &str) {
        assert!(result.is_error, "not an error: {}", result.content);
        assert!(
            result.content.contains(expected),
            "{:?} does not contain {expected:?}",
            result.content
        );
    }

    pub(super) fn running_as_root() -> bool {
        use std::os::unix::fs::MetadataExt;
        let probe = tempfile::NamedTempFile::new().unwrap();
        probe.as_file().metadata().unwrap().uid() == 0
    }

    pub(super) fn tree(dir: &TempDir) {
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/bin")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(root.join("src/bin/main.rs"), "").unwrap();
        std::fs::write(root.join("Cargo.toml"), "").unwrap();
        std::fs::write(root.join(".git/HEAD"), "").unwrap();
        std::fs::write(root.join("a-b.txt"), "").unwrap();
    }

    /// The worker's state directory at the workspace root (snapshot cache) is neither shown
    /// nor readable nor writable through any file tool; a `.baton` deeper down is ordinary.
    #[tokio::test]
    async fn the_workers_state_directory_is_hidden_from_every_file_tool() {
        use baton_core::tools::{EDIT_FILE, GLOB, SEARCH_FILES};
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let root = dir.path();
        std::fs::create_dir_all(root.join(".baton")).unwrap();
        std::fs::write(root.join(".baton/snapshot-state.json"), "needle-state\n").unwrap();
        std::fs::create_dir_all(root.join("src/.baton")).unwrap();
        std::fs::write(root.join("src/.baton/kept.txt"), "needle-kept\n").unwrap();

        let listed = run(&dir, LIST_FILES, serde_json::json!({"recursive": true})).await;
        assert!(
            !listed.content.contains("snapshot-state"),
            "{}",
            listed.content
        );
        assert!(
            !listed.content.lines().any(|l| l.starts_with(".baton")),
            "{}",
            listed.content
        );
        assert!(
            listed.content.contains("src/.baton/kept.txt"),
            "{}",
            listed.content
        );
        let globbed = run(&dir, GLOB, serde_json::json!({"pattern": "**/*"})).await;
        assert!(
            !globbed.content.contains("snapshot-state"),
            "{}",
            globbed.content
        );
        assert!(
            globbed.content.contains("src/.baton/kept.txt"),
            "{}",
            globbed.content
        );
        let found = run(&dir, SEARCH_FILES, serde_json::json!({"pattern": "needle"})).await;
        assert!(!found.content.contains("needle-state"), "{}", found.content);
        assert!(found.content.contains("needle-kept"), "{}", found.content);

        let state = ".baton/snapshot-state.json";
        for (tool, arguments) in [
            (READ_FILE, serde_json::json!({"path": state})),
            (
                WRITE_FILE,
                serde_json::json!({"path": state, "content": "{}"}),
            ),
            (
                EDIT_FILE,
                serde_json::json!({"path": state, "old_text": "needle", "new_text": "x"}),
            ),
            (LIST_FILES, serde_json::json!({"path": ".baton"})),
            (
                SEARCH_FILES,
                serde_json::json!({"pattern": "needle", "path": ".baton"}),
            ),
            (GLOB, serde_json::json!({"pattern": "*", "path": ".baton"})),
        ] {
            let result = run(&dir, tool, arguments).await;
            assert_error(&result, "the worker's own state directory");
        }
        assert_eq!(
            std::fs::read_to_string(root.join(state)).unwrap(),
            "needle-state\n"
        );
    }
}
