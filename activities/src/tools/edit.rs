//! The `edit_file` tool: replaces an exact piece of text in a workspace file, writing the
//! result atomically (a temporary file in the same directory, renamed over the original).

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs::Permissions;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};

use baton_store::beneath::{Beneath, OpenError, read_bounded};
use nix::fcntl::OFlag;
use serde::Deserialize;

use super::files::MAX_READ_BYTES;
use super::workspace::{Confined, confine, io_message, open_message};
use super::{Outcome, ToolContext};

/// Lines of context shown around the changed region in the result.
const CONTEXT_LINES: usize = 2;
/// Longest snippet in the result, in lines; a longer one keeps its start and end.
const MAX_SNIPPET_LINES: usize = 12;
/// Lines in the snippet are cut at this many characters.
const MAX_SNIPPET_LINE_CHARS: usize = 300;
/// At most this many line numbers are listed when `old_text` is not unique.
const MAX_LISTED_LINES: usize = 20;

/// Arguments of the `edit_file` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// Path of the file, relative to the workspace.
    pub path: String,
    /// The exact text to replace, whitespace included.
    pub old_text: String,
    /// The replacement.
    pub new_text: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// Replaces `old_text` with `new_text` in a UTF-8 file: the one occurrence, or every one with
/// `replace_all`. Changes nothing (and says why) when the text is missing or not unique. The
/// file keeps its permissions. The result names the number of replacements and shows the
/// changed region (the first one) with line numbers.
pub async fn edit_file(ctx: &ToolContext, args: EditFileArgs) -> Outcome {
    let shown = &args.path;
    if args.old_text.is_empty() {
        return Outcome::error(
            "old_text is empty; give the exact text to replace, copied from the file (read it \
             with read_file). To create a file or replace its whole content, use write_file",
        );
    }
    if args.old_text == args.new_text {
        return Outcome::error(
            "old_text and new_text are identical, so nothing would change; put the changed text \
             in new_text",
        );
    }
    let Confined { root, rel } = match confine(&ctx.workspace, shown) {
        Ok(confined) => confined,
        Err(message) => return Outcome::error(message),
    };
    let is_dir =
        || format!("'{shown}' is a directory, not a file; give the path of the file to edit");
    let Some((dir, name)) = rel.file_name().and_then(|name| {
        let dir = root.open_dir(rel.parent()?);
        Some((dir, name.to_os_string()))
    }) else {
        return Outcome::error(is_dir());
    };
    let opened = dir
        .map_err(OpenError::Io)
        .and_then(|dir| Ok((dir.open_regular_entry(&name, OFlag::O_RDONLY)?, dir)));
    let (file, dir) = match opened {
        Ok(opened) => opened,
        Err(OpenError::Io(e)) if e.kind() == ErrorKind::NotFound => {
            return Outcome::error(format!(
                "file '{shown}' does not exist; use write_file to create it, or glob or \
                 list_files to find the right path"
            ));
        }
        Err(OpenError::Directory) => return Outcome::error(is_dir()),
        Err(OpenError::Special) => {
            return Outcome::error(format!(
                "'{shown}' is not a regular file (it is a device, socket or pipe) and cannot be \
                 edited"
            ));
        }
        Err(e) => return Outcome::error(open_message(shown, "read", &e)),
    };
    let too_big = || {
        format!(
            "'{shown}' is more than {MAX_READ_BYTES} bytes, too big for edit_file; change it with \
             the shell tool instead (e.g. sed)"
        )
    };
    let meta = match file.metadata() {
        Ok(meta) if meta.len() > MAX_READ_BYTES as u64 => return Outcome::error(too_big()),
        Ok(meta) => meta,
        Err(e) => return Outcome::error(format!("cannot read '{shown}': {e}")),
    };
    let bytes = match tokio::task::spawn_blocking(move || read_bounded(file, MAX_READ_BYTES)).await
    {
        Ok(Ok((_, true))) => return Outcome::error(too_big()),
        Ok(Ok((bytes, false))) => bytes,
        Ok(Err(e)) => return Outcome::error(format!("cannot read '{shown}': {e}")),
        Err(e) => return Outcome::error(format!("cannot read '{shown}': {e}")),
    };
    let content = match String::from_utf8(bytes) {
        Ok(content) => content,
        Err(e) => {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = 1 + valid.iter().filter(|&&b| b == b'\n').count();
            return Outcome::error(format!(
                "'{shown}' is not UTF-8 text (invalid bytes on line {line}); edit_file only edits \
                 text files. Change it with the shell tool instead"
            ));
        }
    };

    let old = args.old_text.as_str();
    let positions: Vec<usize> = content.match_indices(old).map(|(i, _)| i).collect();
    let replace_all = args.replace_all.unwrap_or(false);
    match positions.len() {
        0 => return Outcome::error(not_found(shown, &content, old)),
        1 => {}
        n if !replace_all => {
            return Outcome::error(format!(
                "old_text occurs {n} times in {shown} ({}); include more surrounding lines to \
                 make it unique, or set replace_all to replace every occurrence",
                list_lines(&line_numbers(&content, &positions))
            ));
        }
        _ => {}
    }

    // One call must not grow a file (and the worker's memory) without bound: the result is
    // held whole before it is written.
    let new_len = positions.len().saturating_mul(args.new_text.len())
        + (content.len() - positions.len() * old.len());
    if new_len > MAX_READ_BYTES {
        return Outcome::error(format!(
            "replacing {} occurrences would make '{shown}' {new_len} bytes, over edit_file's \
             limit of {MAX_READ_BYTES} bytes; nothing was changed. Replace fewer occurrences \
             (without replace_all, with more context), or change the file with the shell tool",
            positions.len()
        ));
    }
    // Refuse to replace a file we may not write (the rename would succeed anyway).
    if let Err(e) = dir.open_regular_entry(&name, OFlag::O_WRONLY) {
        return Outcome::error(format!(
            "{}; nothing was changed",
            open_message(shown, "write", &e)
        ));
    }
    let (new_content, first_start) = replace(&content, &positions, old, &args.new_text);
    drop(content);
    // The snippet first, so the new content moves into the write without a copy.
    let shown_region = snippet(&new_content, first_start, args.new_text.len());
    let bytes = new_content.into_bytes();
    let written =
        tokio::task::spawn_blocking(move || write_atomically(&dir, &name, &bytes, &meta)).await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Outcome::error(io_message(shown, "write", &e)),
        Err(e) => return Outcome::error(format!("cannot write '{shown}': {e}")),
    }

    let count = positions.len();
    let plural = if count == 1 { "" } else { "s" };
    let which = if count == 1 { "" } else { " (the first shown)" };
    Outcome::ok(format!(
        "replaced {count} occurrence{plural} in {shown}{which}:\n{shown_region}"
    ))
}

/// `content` with `old` at each of `positions` (non-overlapping, ascending) replaced by `new`,
/// and where the first replacement starts in it.
fn replace(content: &str, positions: &[usize], old: &str, new: &str) -> (String, usize) {
    let grown = positions.len() * new.len();
    let mut out = String::with_capacity(content.len() + grown);
    let mut copied = 0;
    let mut first_start = None;
    for &at in positions {
        out.push_str(&content[copied..at]);
        first_start.get_or_insert(out.len());
        out.push_str(new);
        copied = at + old.len();
    }
    out.push_str(&content[copied..]);
    (out, first_start.unwrap_or(0))
}

/// The message for an `old_text` that does not occur, with a hint when it nearly does.
fn not_found(shown: &str, content: &str, old: &str) -> String {
    let mut message = format!(
        "old_text was not found in {shown}; read the file and copy the exact text, whitespace \
         included"
    );
    let trimmed = old.trim();
    if trimmed.is_empty() {
        return message;
    }
    if trimmed != old {
        let positions: Vec<usize> = content.match_indices(trimmed).map(|(i, _)| i).collect();
        if !positions.is_empty() {
            let _ = write!(
                message,
                ". Without its leading and trailing whitespace (line breaks, indentation) it \
                 occurs at {}; copy it from there",
                list_lines(&line_numbers(content, &positions))
            );
            return message;
        }
    }
    let stripped_content: String = content.chars().filter(|c| !c.is_whitespace()).collect();
    let stripped_old: String = old.chars().filter(|c| !c.is_whitespace()).collect();
    let positions: Vec<usize> = stripped_content
        .match_indices(&stripped_old)
        .map(|(i, _)| original_offset(content, i))
        .take(MAX_LISTED_LINES + 1)
        .collect();
    if !positions.is_empty() {
        let _ = write!(
            message,
            ". Text that differs from old_text only in whitespace (indentation, spaces, tabs or \
             line breaks) starts at {}; read those lines with read_file and copy them exactly",
            list_lines(&line_numbers(content, &positions))
        );
        if content.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
            message.push_str(" (the file has Windows line ends, \\r\\n)");
        }
    }
    message
}

/// The byte offset in `content` of the character at byte `stripped_at` of `content` with its
/// whitespace removed.
fn original_offset(content: &str, stripped_at: usize) -> usize {
    let mut seen = 0;
    for (i, c) in content.char_indices() {
        if c.is_whitespace() {
            continue;
        }
        if seen == stripped_at {
            return i;
        }
        seen += c.len_utf8();
    }
    content.len()
}

/// The 1-based line numbers of the byte offsets `positions` (ascending) in `content`.
fn line_numbers(content: &str, positions: &[usize]) -> Vec<usize> {
    let mut lines = Vec::with_capacity(positions.len());
    let mut line = 1;
    let mut counted = 0;
    for &at in positions {
        line += content.as_bytes()[counted..at]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        counted = at;
        lines.push(line);
    }
    lines
}

/// "line 3" or "lines 3, 7 and 12", at most [`MAX_LISTED_LINES`] of them.
fn list_lines(lines: &[usize]) -> String {
    let mut numbers: Vec<String> = lines
        .iter()
        .take(MAX_LISTED_LINES)
        .map(ToString::to_string)
        .collect();
    if lines.len() > MAX_LISTED_LINES {
        numbers.push("more".to_owned());
    }
    match numbers.as_slice() {
        [one] => format!("line {one}"),
        [init @ .., last] => format!("lines {} and {last}", init.join(", ")),
        [] => String::new(),
    }
}

/// The lines around the region `start..start + len` of `content`, numbered like ` 12: text`.
fn snippet(content: &str, start: usize, len: usize) -> String {
    let lines: Vec<&str> = content.lines().collect();
    if lines.is_empty() {
        return "(the file is now empty)".to_owned();
    }
    let positions = [start, start + len.saturating_sub(1)];
    let [first, last] = match line_numbers(content, &positions).as_slice() {
        [first, last] => [*first, *last],
        _ => [1, 1],
    };
    let from = first.saturating_sub(CONTEXT_LINES).max(1);
    let to = (last + CONTEXT_LINES).min(lines.len());
    let from = from.min(to);
    let width = to.to_string().len();
    let numbered = |n: usize| {
        let text = lines.get(n - 1).copied().unwrap_or_default();
        format!("{n:>width$}: {}", cut_line(text))
    };
    let mut out: Vec<String> = Vec::new();
    if to - from < MAX_SNIPPET_LINES {
        out.extend((from..=to).map(numbered));
    } else {
        let head = MAX_SNIPPET_LINES / 2;
        let tail = MAX_SNIPPET_LINES - head - 1;
        out.extend((from..from + head).map(numbered));
        out.push(format!(
            "{:>width$}  [... {} lines not shown ...]",
            "",
            to - from + 1 - head - tail
        ));
        out.extend((to + 1 - tail..=to).map(numbered));
    }
    out.join("\n")
}

/// `line` cut at [`MAX_SNIPPET_LINE_CHARS`] characters.
fn cut_line(line: &str) -> String {
    match line.char_indices().nth(MAX_SNIPPET_LINE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// Distinguishes the temporary files of concurrent edits in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces the content of the file `name` in `dir` with `data`: writes a temporary file
/// next to it, with the original's owner (when the worker may set it) and permission bits
/// (without set-user-id, set-group-id and sticky: the worker must not make a set-id file of its
/// own), and renames it over the original. If no temporary file can be created there (a
/// directory we may not write to), writes the file in place instead.
fn write_atomically(
    dir: &Beneath,
    name: &OsStr,
    data: &[u8],
    original: &std::fs::Metadata,
) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{MetadataExt, fchown};

    let Some((temp_name, mut file)) = create_temp(dir, name) else {
        let mut file = dir
            .open_regular_entry(name, OFlag::O_WRONLY | OFlag::O_TRUNC)
            .map_err(|e| match e {
                OpenError::Io(e) => e,
                other => std::io::Error::other(other.to_string()),
            })?;
        return file.write_all(data);
    };
    let written = (|| {
        if nix::unistd::geteuid().is_root() {
            fchown(&file, Some(original.uid()), Some(original.gid()))?;
        }
        file.set_permissions(Permissions::from_mode(original.mode() & 0o777))?;
        file.write_all(data)?;
        file.sync_all()?;
        drop(file);
        dir.rename_entry(&temp_name, name)
    })();
    if written.is_err() {
        let _ = dir.remove_entry(&temp_name, false);
    }
    written
}

/// A new, empty, private file in `dir` next to `name`, or `None` if none can be created.
fn create_temp(dir: &Beneath, name: &OsStr) -> Option<(OsString, std::fs::File)> {
    let shown = name.to_string_lossy();
    for _ in 0..100 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp_name = OsString::from(format!(
            ".{shown}.baton-edit-{}-{n}.tmp",
            std::process::id()
        ));
        match dir.open_entry(
            &temp_name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            0o600,
        ) {
            Ok(file) => return Some((temp_name, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::execute;
    use crate::tools::tests::{call, context};
    use baton_core::tools::EDIT_FILE;
    use baton_proto::ToolResult;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use tempfile::TempDir;

    async fn edit(dir: &TempDir, arguments: serde_json::Value) -> ToolResult {
        execute(&context(dir), &call(EDIT_FILE, arguments))
            .await
            .unwrap()
    }

    fn read(dir: &TempDir, name: &str) -> String {
        std::fs::read_to_string(dir.path().join(name)).unwrap()
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

    const SOURCE: &str = "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n";

    #[tokio::test]
    async fn replaces_a_unique_text() {
        let dir = TempDir::new().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), SOURCE).unwrap();
        let result = edit(
            &dir,
            serde_json::json!({
                "path": "src/main.rs",
                "old_text": "let x = 1;",
                "new_text": "let x = 2;\n    let y = 3;",
            }),
        )
        .await;
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(
            result.content,
            "replaced 1 occurrence in src/main.rs:\n1: fn main() {\n2:     let x = 2;\n3:     \
             let y = 3;\n4:     println!(\"{x}\");\n5: }"
        );
        assert_eq!(
            read(&dir, "src/main.rs"),
            "fn main() {\n    let x = 2;\n    let y = 3;\n    println!(\"{x}\");\n}\n"
        );
        // No temporary file is left behind.
        assert_eq!(
            std::fs::read_dir(dir.path().join("src")).unwrap().count(),
            1
        );
    }

    #[tokio::test]
    async fn deleting_text_shows_the_surroundings() {
        let dir = TempDir::new().unwrap();
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("f.txt"), &text).unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "line 10\n", "new_text": ""}),
        )
        .await;
        assert_eq!(
            result.content,
            "replaced 1 occurrence in f.txt:\n 8: line 8\n 9: line 9\n10: line 11\n11: line 12\n\
             12: line 13"
        );
    }

    #[tokio::test]
    async fn long_replacement_snippet_is_shortened() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("f.txt"), "a\nMARK\nb\n").unwrap();
        let new: String = (1..=30).map(|i| format!("new {i}\n")).collect();
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "MARK\n", "new_text": new}),
        )
        .await;
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(
            result.content,
            "replaced 1 occurrence in f.txt:\n 1: a\n 2: new 1\n 3: new 2\n 4: new 3\n 5: new 4\n \
             6: new 5\n    [... 21 lines not shown ...]\n28: new 27\n29: new 28\n30: new 29\n\
             31: new 30\n32: b"
        );
    }

    #[tokio::test]
    async fn missing_text_is_an_error_that_changes_nothing() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("main.rs"), SOURCE).unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "main.rs", "old_text": "let z = 1;", "new_text": "x"}),
        )
        .await;
        assert_eq!(
            result.content,
            "old_text was not found in main.rs; read the file and copy the exact text, \
             whitespace included"
        );
        assert!(result.is_error);
        assert_eq!(read(&dir, "main.rs"), SOURCE);
    }

    #[tokio::test]
    async fn missing_text_hints_at_a_whitespace_insensitive_match() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("main.rs"), SOURCE).unwrap();
        // Wrong indentation.
        let result = edit(
            &dir,
            serde_json::json!({
                "path": "main.rs",
                "old_text": "  let x = 1;\n  println!(\"{x}\");",
                "new_text": "x",
            }),
        )
        .await;
        assert_eq!(
            result.content,
            "old_text was not found in main.rs; read the file and copy the exact text, \
             whitespace included. Text that differs from old_text only in whitespace \
             (indentation, spaces, tabs or line breaks) starts at line 2; read those lines with \
             read_file and copy them exactly"
        );
        assert!(result.is_error);
        // Extra line breaks around it.
        let result = edit(
            &dir,
            serde_json::json!({"path": "main.rs", "old_text": "\nprintln!(\"{x}\");\n\n", "new_text": "x"}),
        )
        .await;
        assert_error(
            &result,
            ". Without its leading and trailing whitespace (line breaks, indentation) it occurs \
             at line 3; copy it from there",
        );
        assert_eq!(read(&dir, "main.rs"), SOURCE);
    }

    #[tokio::test]
    async fn missing_text_mentions_windows_line_ends() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("w.txt"), "a\r\nb\r\nc\r\n").unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "w.txt", "old_text": "b\nc", "new_text": "x"}),
        )
        .await;
        assert_error(
            &result,
            "starts at line 2; read those lines with read_file and copy them exactly (the file \
             has Windows line ends, \\r\\n)",
        );
    }

    #[tokio::test]
    async fn ambiguous_text_is_an_error_listing_the_lines() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("f.txt"), "x = 1\ny = 2\nx = 1\n\nx = 1\n").unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "x = 1", "new_text": "x = 9"}),
        )
        .await;
        assert_eq!(
            result.content,
            "old_text occurs 3 times in f.txt (lines 1, 3 and 5); include more surrounding \
             lines to make it unique, or set replace_all to replace every occurrence"
        );
        assert!(result.is_error);
        assert_eq!(read(&dir, "f.txt"), "x = 1\ny = 2\nx = 1\n\nx = 1\n");
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "x = 1", "new_text": "x = 9", "replace_all": false}),
        )
        .await;
        assert!(result.is_error);
    }

    #[tokio::test]
    async fn replace_all_replaces_every_occurrence() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("f.txt"), "x = 1\ny = 2\nx = 1\n\nx = 1\n").unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "x = 1", "new_text": "x = 9", "replace_all": true}),
        )
        .await;
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(
            result.content,
            "replaced 3 occurrences in f.txt (the first shown):\n1: x = 9\n2: y = 2\n3: x = 9"
        );
        assert_eq!(read(&dir, "f.txt"), "x = 9\ny = 2\nx = 9\n\nx = 9\n");
        // Also when there is only one.
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "y = 2", "new_text": "y = 0", "replace_all": true}),
        )
        .await;
        assert!(
            result
                .content
                .starts_with("replaced 1 occurrence in f.txt:"),
            "{}",
            result.content
        );
    }

    #[tokio::test]
    async fn empty_old_text_is_an_error() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("f.txt"), "abc").unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "", "new_text": "x"}),
        )
        .await;
        assert_error(&result, "old_text is empty;");
        assert_error(
            &result,
            "To create a file or replace its whole content, use write_file",
        );
        assert_eq!(read(&dir, "f.txt"), "abc");
    }

    #[tokio::test]
    async fn identical_texts_are_an_error() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("f.txt"), "abc").unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "f.txt", "old_text": "b", "new_text": "b"}),
        )
        .await;
        assert_eq!(
            result.content,
            "old_text and new_text are identical, so nothing would change; put the changed text \
             in new_text"
        );
        assert!(result.is_error);
    }

    #[tokio::test]
    async fn bad_files_are_errors() {
        let dir = TempDir::new().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("bin"), b"ab\n\xff\xfe").unwrap();
        let args = |path: &str| serde_json::json!({"path": path, "old_text": "a", "new_text": "b"});
        let result = edit(&dir, args("nope.txt")).await;
        assert_eq!(
            result.content,
            "file 'nope.txt' does not exist; use write_file to create it, or glob or list_files \
             to find the right path"
        );
        assert!(result.is_error);
        let result = edit(&dir, args("sub")).await;
        assert_error(&result, "'sub' is a directory, not a file");
        let result = edit(&dir, args("bin")).await;
        assert_error(&result, "'bin' is not UTF-8 text (invalid bytes on line 2)");
        assert_eq!(
            std::fs::read(dir.path().join("bin")).unwrap(),
            b"ab\n\xff\xfe"
        );
        assert!(!dir.path().join("nope.txt").exists());
    }

    #[tokio::test]
    async fn editing_outside_the_workspace_is_an_error() {
        let dir = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret"), "a").unwrap();
        symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        for path in ["../secret", "link", "/etc/passwd"] {
            let result = edit(
                &dir,
                serde_json::json!({"path": path, "old_text": "a", "new_text": "b"}),
            )
            .await;
            assert_eq!(
                result.content,
                format!(
                    "path '{path}' is outside the workspace; use a path relative to the \
                     workspace root"
                )
            );
            assert!(result.is_error);
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "a"
        );
    }

    #[tokio::test]
    async fn edits_through_a_symlink_inside_keeping_the_link() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("real.txt"), "old").unwrap();
        symlink("real.txt", dir.path().join("alias.txt")).unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "alias.txt", "old_text": "old", "new_text": "new"}),
        )
        .await;
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(read(&dir, "real.txt"), "new");
        let link = std::fs::symlink_metadata(dir.path().join("alias.txt")).unwrap();
        assert!(link.file_type().is_symlink());
    }

    #[tokio::test]
    async fn replacing_into_a_huge_file_is_refused_in_bounded_memory() {
        let dir = TempDir::new().unwrap();
        let original = "a".repeat(1024 * 1024);
        std::fs::write(dir.path().join("big"), &original).unwrap();
        let before = peak_rss_kib();
        let result = edit(
            &dir,
            serde_json::json!({"path": "big", "old_text": "a", "new_text": "b".repeat(256),
                "replace_all": true}),
        )
        .await;
        let grown = peak_rss_kib().saturating_sub(before);
        assert!(result.is_error, "{}", result.content);
        assert!(
            result.content.contains(
                "replacing 1048576 occurrences would make 'big' 268435456 bytes, over edit_file's \
                 limit of 8388608 bytes; nothing was changed"
            ),
            "{}",
            result.content
        );
        assert!(read(&dir, "big") == original, "the file changed");
        // The high-water mark of the whole test process: other tests only make it rise sooner.
        assert!(grown < 100 * 1024, "peak memory grew by {grown} KiB");
    }

    fn peak_rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[tokio::test]
    async fn an_edited_file_loses_set_id_bits_and_keeps_its_owner() {
        use std::os::unix::fs::MetadataExt;
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("tool");
        std::fs::write(&path, "#!/bin/sh\necho old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6755)).unwrap();
        let root = nix::unistd::geteuid().is_root();
        if root {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        }
        let result = edit(
            &dir,
            serde_json::json!({"path": "tool", "old_text": "old", "new_text": "new"}),
        )
        .await;
        assert!(!result.is_error, "{}", result.content);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o755);
        if root {
            assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
        }
    }

    #[tokio::test]
    async fn keeps_the_permissions() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("run.sh");
        for mode in [0o755, 0o600, 0o640] {
            std::fs::write(&path, "echo old\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let result = edit(
                &dir,
                serde_json::json!({"path": "run.sh", "old_text": "old", "new_text": "new"}),
            )
            .await;
            assert!(!result.is_error, "{}", result.content);
            assert_eq!(read(&dir, "run.sh"), "echo new\n");
            let got = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(got, mode, "{got:o} != {mode:o}");
        }
    }

    #[tokio::test]
    async fn read_only_file_is_not_replaced() {
        if running_as_root() {
            return;
        }
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("ro.txt");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "ro.txt", "old_text": "old", "new_text": "new"}),
        )
        .await;
        assert_error(&result, "cannot write 'ro.txt': Permission denied");
        assert_error(&result, "nothing was changed");
        assert_eq!(read(&dir, "ro.txt"), "old");
    }

    #[tokio::test]
    async fn writable_file_in_a_read_only_directory_is_edited_in_place() {
        if running_as_root() {
            return;
        }
        let dir = TempDir::new().unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("f.txt"), "old").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let result = edit(
            &dir,
            serde_json::json!({"path": "locked/f.txt", "old_text": "old", "new_text": "new"}),
        )
        .await;
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(read(&dir, "locked/f.txt"), "new");
    }

    #[test]
    fn lists_line_numbers() {
        assert_eq!(list_lines(&[4]), "line 4");
        assert_eq!(list_lines(&[1, 2]), "lines 1 and 2");
        let many: Vec<usize> = (1..=25).collect();
        assert!(list_lines(&many).ends_with("19, 20 and more"));
        assert_eq!(line_numbers("a\nb\nc", &[0, 2, 3, 4]), vec![1, 2, 2, 3]);
    }

    #[test]
    fn maps_offsets_of_whitespace_free_text_back() {
        let content = "a b\n  cd";
        assert_eq!(original_offset(content, 0), 0);
        assert_eq!(original_offset(content, 1), 2);
        assert_eq!(original_offset(content, 2), 6);
        assert_eq!(original_offset(content, 4), content.len());
    }
}
