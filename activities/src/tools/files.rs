//! The file tools: `read_file`, `write_file` and `list_files`, all confined to the workspace.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use baton_workflows::tools::OUTPUT_CAP_BYTES;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::output::cap;
use super::workspace::{is_local_state, resolve};
use super::{Outcome, ToolContext};

/// `read_file` refuses to hold more than this many bytes of a file in memory; larger files
/// have to be read in parts (`offset` and `limit`).
pub const MAX_READ_BYTES: usize = 8 * 1024 * 1024;
/// `list_files` stops after this many entries.
pub const MAX_LIST_ENTRIES: usize = 2000;

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

/// Arguments of the `write_file` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path of the file, relative to the workspace.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

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
    let path = match resolve(&ctx.workspace, shown) {
        Ok(path) => path,
        Err(message) => return Outcome::error(message),
    };
    match tokio::fs::metadata(&path).await {
        Ok(meta) if meta.is_dir() => {
            return Outcome::error(format!(
                "'{shown}' is a directory, not a file; use list_files to see what it contains"
            ));
        }
        Ok(meta) if !meta.is_file() => {
            return Outcome::error(format!(
                "'{shown}' is not a regular file (it is a device, socket or pipe) and cannot be read"
            ));
        }
        Ok(_) => {}
        Err(e) => return Outcome::error(not_readable(shown, &e)),
    }
    let file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(e) => return Outcome::error(not_readable(shown, &e)),
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

/// Creates or overwrites a file with `content`, creating its parent directories.
pub async fn write_file(ctx: &ToolContext, args: WriteFileArgs) -> Outcome {
    let shown = &args.path;
    let path = match resolve(&ctx.workspace, shown) {
        Ok(path) => path,
        Err(message) => return Outcome::error(message),
    };
    if tokio::fs::metadata(&path).await.is_ok_and(|m| m.is_dir()) {
        return Outcome::error(format!(
            "'{shown}' is a directory; give the path of a file to write, e.g. '{}/file.txt'",
            shown.trim_end_matches('/')
        ));
    }
    if let Some(parent) = path.parent()
        && let Err(e) = tokio::fs::create_dir_all(parent).await
    {
        return Outcome::error(format!(
            "cannot create the directories for '{shown}': {e}; check that no part of the path is \
             an existing file"
        ));
    }
    match tokio::fs::write(&path, args.content.as_bytes()).await {
        Ok(()) => Outcome::ok(format!("wrote {} bytes to {shown}", args.content.len())),
        Err(e) => Outcome::error(format!("cannot write '{shown}': {e}")),
    }
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
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = match entry.file_type() {
            Ok(t) if t.is_dir() => Kind::Dir,
            Ok(t) if t.is_symlink() && std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) => {
                Kind::LinkToDir
            }
            _ => Kind::Other,
        };
        entries.push((path, kind));
    }
    entries.sort_by(|a, b| a.0.file_name().cmp(&b.0.file_name()));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::execute;
    use crate::tools::tests::{call, context};
    use baton_proto::ToolResult;
    use baton_workflows::tools::{LIST_FILES, READ_FILE, WRITE_FILE};
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use tempfile::TempDir;

    async fn run(dir: &TempDir, tool: &str, arguments: serde_json::Value) -> ToolResult {
        execute(&context(dir), &call(tool, arguments))
            .await
            .unwrap()
    }

    fn outside_message(path: &str) -> String {
        format!("path '{path}' is outside the workspace; use a path relative to the workspace root")
    }

    fn assert_error(result: &ToolResult, expected: &str) {
        assert!(result.is_error, "not an error: {}", result.content);
        assert!(
            result.content.contains(expected),
            "{:?} does not contain {expected:?}",
            result.content
        );
    }

    fn running_as_root() -> bool {
        use std::os::unix::fs::MetadataExt;
        let probe = tempfile::NamedTempFile::new().unwrap();
        probe.as_file().metadata().unwrap().uid() == 0
    }

    // --- read_file ---

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

    // --- write_file ---

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

    // --- list_files ---

    fn tree(dir: &TempDir) {
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

    #[tokio::test]
    async fn lists_the_workspace() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = run(&dir, LIST_FILES, serde_json::json!({})).await;
        assert_eq!(result.content, ".git/\nCargo.toml\na-b.txt\nempty/\nsrc/");
        assert!(!result.is_error);
    }

    /// The worker's state directory at the workspace root (snapshot cache) is neither shown
    /// nor readable nor writable through any file tool; a `.baton` deeper down is ordinary.
    #[tokio::test]
    async fn the_workers_state_directory_is_hidden_from_every_file_tool() {
        use baton_workflows::tools::{EDIT_FILE, GLOB, SEARCH_FILES};
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
