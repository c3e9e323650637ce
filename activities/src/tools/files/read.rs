//! `read_file`: a UTF-8 text file, whole or a range of its lines, under the output cap.

use std::io::ErrorKind;

use baton_core::tools::OUTPUT_CAP_BYTES;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::tools::output::cap;
use baton_store::beneath::{OpenError, is_link_error};

use crate::tools::workspace::{confine, open_message};
use crate::tools::{Outcome, ToolContext};

/// `read_file` refuses to hold more than this many bytes of a file in memory; larger files
/// have to be read in parts (`offset` and `limit`).
pub const MAX_READ_BYTES: usize = 8 * 1024 * 1024;

/// Arguments of the `read_file` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path of the file, relative to the workspace.
    pub path: String,
    /// First line to return, 1-based.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Number of lines to return.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Reads a UTF-8 text file, or the lines `offset..offset + limit` of it (1-based), exactly as
/// they are in the file (with their line ends). The result is capped at
/// [`OUTPUT_CAP_BYTES`], with a hint on how to read the part that was cut.
pub async fn read_file(ctx: &ToolContext, args: ReadFileArgs) -> Outcome {
    let shown = &args.path;
    if args.offset == Some(0) {
        return Outcome::error("offset is a 1-based line number; use 1 for the first line");
    }
    if args.limit == Some(0) {
        return Outcome::error("limit must be at least 1 (it is a number of lines)");
    }
    let confined = match confine(&ctx.workspace, shown) {
        Ok(confined) => confined,
        Err(message) => return Outcome::error(message),
    };
    let file = match confined.root.open_regular(&confined.rel) {
        Ok(file) => tokio::fs::File::from_std(file),
        Err(OpenError::Directory) => {
            return Outcome::error(format!(
                "'{shown}' is a directory, not a file; use list_files to see what it contains"
            ));
        }
        Err(OpenError::Io(e)) if !is_link_error(&e) => {
            return Outcome::error(not_readable(shown, &e));
        }
        Err(e) => return Outcome::error(open_message(shown, "read", &e)),
    };

    let first = args.offset.unwrap_or(1);
    let end = args.limit.map(|limit| first.saturating_add(limit)); // exclusive
    let lines = match select_lines(file, first, end).await {
        Ok(lines) => lines,
        Err(SelectError::TooBig) => {
            return Outcome::error(format!(
                "the requested part of '{shown}' is more than {MAX_READ_BYTES} bytes, too much to \
                 read at once; read it in parts with offset and limit (1-based line numbers), or \
                 search it with the shell tool (e.g. `grep -n PATTERN '{shown}'`)"
            ));
        }
        Err(SelectError::Io(e)) => return Outcome::error(not_readable(shown, &e)),
    };

    if lines.text.is_empty() {
        return if args.offset.is_some() && lines.lines_in_file < first {
            Outcome::error(format!(
                "offset {first} is past the end of '{shown}', which has {} lines",
                lines.lines_in_file
            ))
        } else {
            Outcome::ok(format!("(the file '{shown}' is empty)"))
        };
    }
    let text = match String::from_utf8(lines.text) {
        Ok(text) => text,
        Err(e) => {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = first + valid.iter().filter(|&&b| b == b'\n').count();
            return Outcome::error(format!(
                "'{shown}' is not UTF-8 text (invalid bytes on line {line}); it is probably a \
                 binary file. Inspect it with the shell tool instead, e.g. `file '{shown}'` or \
                 `od -c '{shown}' | head`"
            ));
        }
    };
    if text.len() <= OUTPUT_CAP_BYTES {
        return Outcome::ok(text);
    }
    let count = text.lines().count();
    let hint = format!(
        "\n[{} lines ({}-{}), {} bytes in all: too long for one result, so the middle was cut; \
         read it with offset and limit (1-based line numbers)]",
        count,
        first,
        first + count - 1,
        text.len()
    );
    let mut content = cap(&text, OUTPUT_CAP_BYTES.saturating_sub(hint.len()));
    content.push_str(&hint);
    Outcome::ok(content)
}

fn not_readable(shown: &str, e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::NotFound => {
            format!("file '{shown}' does not exist; use list_files to see which files there are")
        }
        ErrorKind::PermissionDenied => {
            format!("cannot read '{shown}': permission denied")
        }
        _ => format!("cannot read '{shown}': {e}"),
    }
}

/// The selected lines of a file.
struct Lines {
    /// The selected lines, with their line ends.
    text: Vec<u8>,
    /// Lines in the file; only complete when the file was read to its end (when the selection
    /// is empty, it was).
    lines_in_file: usize,
}

enum SelectError {
    TooBig,
    Io(std::io::Error),
}

/// Reads lines `first..end` (1-based, `end` exclusive, `None` meaning to the end) of `file`,
/// streaming, so that skipped lines of any length cost no memory.
async fn select_lines(
    file: tokio::fs::File,
    first: usize,
    end: Option<usize>,
) -> Result<Lines, SelectError> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut text = Vec::new();
    let mut line = 1usize; // number of the line the next byte belongs to
    let mut line_started = false; // bytes of `line` were seen
    let mut done = false;
    while !done {
        let buf = reader.fill_buf().await.map_err(SelectError::Io)?;
        if buf.is_empty() {
            break;
        }
        let mut consumed = 0;
        while consumed < buf.len() {
            let rest = &buf[consumed..];
            let (piece, ends_line) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            if line >= first && end.is_none_or(|end| line < end) {
                if text.len() + piece.len() > MAX_READ_BYTES {
                    return Err(SelectError::TooBig);
                }
                text.extend_from_slice(piece);
            }
            consumed += piece.len();
            if ends_line {
                line += 1;
                line_started = false;
                if end.is_some_and(|end| line >= end) {
                    done = true;
                    break;
                }
            } else {
                line_started = true;
            }
        }
        reader.consume(consumed);
    }
    Ok(Lines {
        text,
        lines_in_file: line - 1 + usize::from(line_started),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, outside_message, run, running_as_root};
    use super::*;
    use baton_core::tools::READ_FILE;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use tempfile::TempDir;

    #[tokio::test]
    async fn reads_a_whole_file() {
        let dir = TempDir::new().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.txt"), "one\ntwo\nthree\n").unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "src/a.txt"})).await;
        assert_eq!(result.content, "one\ntwo\nthree\n");
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn reads_a_range_of_lines() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("a.txt"), "1\n2\n3\n4\n5").unwrap();
        let read = |args| run(&dir, READ_FILE, args);
        assert_eq!(
            read(serde_json::json!({"path": "a.txt", "offset": 2, "limit": 2}))
                .await
                .content,
            "2\n3\n"
        );
        assert_eq!(
            read(serde_json::json!({"path": "a.txt", "offset": 4}))
                .await
                .content,
            "4\n5"
        );
        assert_eq!(
            read(serde_json::json!({"path": "a.txt", "limit": 1}))
                .await
                .content,
            "1\n"
        );
        assert_eq!(
            read(serde_json::json!({"path": "a.txt", "offset": 5, "limit": 10}))
                .await
                .content,
            "5"
        );
        let past = read(serde_json::json!({"path": "a.txt", "offset": 6})).await;
        assert_error(
            &past,
            "offset 6 is past the end of 'a.txt', which has 5 lines",
        );
    }

    #[tokio::test]
    async fn range_skips_invalid_utf8_outside_of_it() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("mixed"), b"\xff\xfe\nok\n").unwrap();
        let result = run(
            &dir,
            READ_FILE,
            serde_json::json!({"path": "mixed", "offset": 2}),
        )
        .await;
        assert_eq!(result.content, "ok\n");
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn empty_file_says_so() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("empty"), "").unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "empty"})).await;
        assert_eq!(result.content, "(the file 'empty' is empty)");
        assert!(!result.is_error);
        let result = run(
            &dir,
            READ_FILE,
            serde_json::json!({"path": "empty", "offset": 1}),
        )
        .await;
        assert_error(
            &result,
            "offset 1 is past the end of 'empty', which has 0 lines",
        );
    }

    #[tokio::test]
    async fn zero_offset_or_limit_is_an_error() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("a"), "x").unwrap();
        let result = run(
            &dir,
            READ_FILE,
            serde_json::json!({"path": "a", "offset": 0}),
        )
        .await;
        assert_error(&result, "offset is a 1-based line number");
        let result = run(
            &dir,
            READ_FILE,
            serde_json::json!({"path": "a", "limit": 0}),
        )
        .await;
        assert_error(&result, "limit must be at least 1");
    }

    #[tokio::test]
    async fn reading_a_missing_file_is_an_error() {
        let dir = TempDir::new().unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "nope.txt"})).await;
        assert_eq!(
            result.content,
            "file 'nope.txt' does not exist; use list_files to see which files there are"
        );
        assert!(result.is_error);
    }

    #[tokio::test]
    async fn reading_a_directory_is_an_error() {
        let dir = TempDir::new().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "sub"})).await;
        assert_eq!(
            result.content,
            "'sub' is a directory, not a file; use list_files to see what it contains"
        );
        assert!(result.is_error);
    }

    #[tokio::test]
    async fn reading_binary_is_an_error() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("bin"), b"line one\nline two \xff\x00\x01").unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "bin"})).await;
        assert_error(&result, "'bin' is not UTF-8 text (invalid bytes on line 2)");
        assert_error(&result, "Inspect it with the shell tool");
    }

    #[tokio::test]
    async fn reading_a_fifo_is_an_error() {
        let dir = TempDir::new().unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("fifo"))
            .status()
            .unwrap();
        assert!(status.success());
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "fifo"})).await;
        assert_error(&result, "'fifo' is not a regular file");
    }

    #[tokio::test]
    async fn reading_without_permission_is_an_error() {
        if running_as_root() {
            return; // root reads anything
        }
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "x").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "secret"})).await;
        assert_eq!(result.content, "cannot read 'secret': permission denied");
        assert!(result.is_error);
    }

    #[tokio::test]
    async fn long_file_is_capped_with_a_hint() {
        let dir = TempDir::new().unwrap();
        let text: String = (1..=10_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("long.txt"), &text).unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "long.txt"})).await;
        assert!(!result.is_error);
        assert!(
            result.content.len() <= OUTPUT_CAP_BYTES,
            "{}",
            result.content.len()
        );
        assert!(result.content.starts_with("line 1\nline 2\n"));
        assert!(
            result
                .content
                .contains(&format!("bytes cut from the middle of {} ...]", text.len()))
        );
        assert!(result.content.contains("line 10000\n"));
        assert!(result.content.ends_with(&format!(
            "[10000 lines (1-10000), {} bytes in all: too long for one result, so the middle was \
             cut; read it with offset and limit (1-based line numbers)]",
            text.len()
        )));

        let range = run(
            &dir,
            READ_FILE,
            serde_json::json!({"path": "long.txt", "offset": 5000, "limit": 3}),
        )
        .await;
        assert_eq!(range.content, "line 5000\nline 5001\nline 5002\n");
    }

    #[tokio::test]
    async fn huge_file_must_be_read_in_parts() {
        let dir = TempDir::new().unwrap();
        let line = "x".repeat(1023) + "\n";
        std::fs::write(
            dir.path().join("huge"),
            line.repeat(MAX_READ_BYTES / 1024 + 10),
        )
        .unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "huge"})).await;
        assert_error(
            &result,
            "too much to read at once; read it in parts with offset and limit",
        );
        let result = run(
            &dir,
            READ_FILE,
            serde_json::json!({"path": "huge", "offset": 8000, "limit": 1}),
        )
        .await;
        assert_eq!(result.content, line);
    }

    #[tokio::test]
    async fn reading_outside_the_workspace_is_an_error() {
        let dir = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        let abs = outside.path().join("secret").to_string_lossy().into_owned();
        for path in ["../secret", "/etc/passwd", abs.as_str(), "link"] {
            let result = run(&dir, READ_FILE, serde_json::json!({"path": path})).await;
            assert_eq!(result.content, outside_message(path));
            assert!(result.is_error);
        }
    }

    #[tokio::test]
    async fn reads_through_a_symlink_inside_the_workspace() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("real.txt"), "real").unwrap();
        symlink("real.txt", dir.path().join("alias.txt")).unwrap();
        let result = run(&dir, READ_FILE, serde_json::json!({"path": "alias.txt"})).await;
        assert_eq!(result.content, "real");
    }
}
