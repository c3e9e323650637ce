//! The worker's file tools against a process that swaps a workspace directory with a
//! link to a directory outside (`renameat2(RENAME_EXCHANGE)`) while they run.

use std::os::unix::fs::symlink;

use baton_core::tools::{EDIT_FILE, READ_FILE, SEARCH_FILES, WRITE_FILE};
use baton_store::beneath::testing::Racer;
use tempfile::TempDir;

use super::tests::run;

const OUTSIDE: &str = "OUTSIDE-MARKER-7f3a";

#[tokio::test]
async fn two_thousand_calls_beside_a_racer_touch_nothing_outside() {
    let ws = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/secret"), "inside\n").unwrap();
    std::fs::write(ws.path().join("d/edit.txt"), "v0\n").unwrap();
    std::fs::write(outside.path().join("secret"), format!("{OUTSIDE}\n")).unwrap();
    std::fs::write(outside.path().join("edit.txt"), "v0\n").unwrap();
    symlink(outside.path(), ws.path().join("e")).unwrap();

    let racer = Racer::start(ws.path(), "d", "e").unwrap();
    let mut done = [0usize; 4];
    for i in 0..2000 {
        let path = format!("d/new-{i}.txt");
        let (tool, arguments) = match i % 4 {
            0 => (
                WRITE_FILE,
                serde_json::json!({"path": path, "content": "x"}),
            ),
            1 => (READ_FILE, serde_json::json!({"path": "d/secret"})),
            2 => (
                SEARCH_FILES,
                serde_json::json!({"pattern": "MARKER|inside", "path": "d"}),
            ),
            _ => (
                EDIT_FILE,
                serde_json::json!({"path": "d/edit.txt", "old_text": "v", "new_text": "v"
                    .repeat(1 + i % 2), "replace_all": true}),
            ),
        };
        let result = run(&ws, tool, arguments).await;
        assert!(
            !result.content.contains(OUTSIDE),
            "read outside: {}",
            result.content
        );
        if !result.is_error {
            done[i % 4] += 1;
        }
    }
    let swaps = racer.stop();

    let mut names: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["edit.txt", "secret"], "written outside");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("edit.txt")).unwrap(),
        "v0\n",
        "edited outside"
    );
    assert!(swaps > 1000, "the racer ran: {swaps} swaps");
    // The calls that found `d` a directory did their work.
    assert!(done.iter().all(|&n| n > 0), "{done:?}");
}
