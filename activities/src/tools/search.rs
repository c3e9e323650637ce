//! The `search_files` tool: a regular-expression search through the workspace's text files.

use std::io::{ErrorKind, Read};
use std::ops::ControlFlow;
use std::path::Path;

use baton_core::tools::OUTPUT_CAP_BYTES;
use baton_store::beneath::{Beneath, OpenError};
use globset::{GlobBuilder, GlobMatcher};
use nix::fcntl::OFlag;
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::output::cap;
use super::walk::{Entry, walk_files};
use super::workspace::{open_message, resolve};
use super::{Outcome, ToolContext};

/// Matching lines returned unless the call sets `max_results`.
pub const DEFAULT_MAX_RESULTS: usize = 200;
/// Files larger than this are not searched.
pub const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;
/// A file with a NUL byte in its first this many bytes is taken for binary and not searched.
pub const BINARY_PROBE_BYTES: usize = 8 * 1024;
/// Matching lines are cut to this many characters.
pub const MAX_LINE_CHARS: usize = 300;
/// Directories that are never searched (unless given as `path`).
pub const SKIPPED_DIRS: [&str; 3] = [".git", "target", "node_modules"];

/// Arguments of the `search_files` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// The regular expression (Rust `regex` syntax).
    pub pattern: String,
    /// Directory or file to search, relative to the workspace (default: the workspace).
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose path matches this glob.
    #[serde(default)]
    pub glob: Option<String>,
    /// Ignore case (default false).
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// Stop after this many matching lines (default [`DEFAULT_MAX_RESULTS`]).
    #[serde(default)]
    pub max_results: Option<usize>,
}

/// Searches the text files under `path` (the workspace by default), or the one file `path`,
/// for lines matching `pattern`. Returns `path:line: text` lines (paths relative to the
/// workspace) sorted by path then line, at most `max_results` of them, then notes on what was
/// left out. Symbolic links to directories are not followed, nor links to files outside the
/// workspace; `.git`, `target` and `node_modules` directories, binary files and files over
/// [`MAX_FILE_BYTES`] are skipped.
///
/// `glob` filters the files searched in a directory: a glob without `/` (`*.rs`) is matched
/// against the file name, one with `/` (`src/**/*.rs`) against the path relative to the
/// workspace or to `path`. It does not apply when `path` is a file.
pub async fn search_files(ctx: &ToolContext, args: SearchFilesArgs) -> Outcome {
    let max = args.max_results.unwrap_or(DEFAULT_MAX_RESULTS);
    if max == 0 {
        return Outcome::error("max_results must be at least 1 (it is a number of lines)");
    }
    let regex = match RegexBuilder::new(&args.pattern)
        .case_insensitive(args.case_insensitive.unwrap_or(false))
        .build()
    {
        Ok(regex) => regex,
        Err(e) => {
            return Outcome::error(format!(
                "invalid regular expression '{}': {e}\nFix the pattern (Rust regex syntax; put a \
                 backslash before special characters such as ( [ {{ . * + ? | to match them \
                 literally) and search again.",
                args.pattern
            ));
        }
    };
    let filter = match args.glob.as_deref().map(Filter::new).transpose() {
        Ok(filter) => filter,
        Err(message) => return Outcome::error(message),
    };
    let shown = args.path.as_deref().unwrap_or(".");
    let (root, target) = match (resolve(&ctx.workspace, ""), resolve(&ctx.workspace, shown)) {
        (Ok(root), Ok(target)) => (root, target),
        (Err(message), _) | (_, Err(message)) => return Outcome::error(message),
    };
    let meta = match tokio::fs::metadata(&target).await {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Outcome::error(format!(
                "'{shown}' does not exist; give a directory or file of the workspace as path (or \
                 none to search the whole workspace), e.g. use glob or list_files to find it"
            ));
        }
        Err(e) => return Outcome::error(format!("cannot search '{shown}': {e}")),
    };

    let cancel = ctx.cancel.clone();
    let search = if meta.is_dir() {
        let shown = shown.to_owned();
        tokio::task::spawn_blocking(move || {
            search_dir(&root, &target, filter.as_ref(), &regex, max, &cancel)
                .map_err(|e| format!("cannot search '{shown}': {e}"))
        })
        .await
    } else {
        let rel = target
            .strip_prefix(&root)
            .unwrap_or(&target)
            .to_string_lossy()
            .into_owned();
        let shown = shown.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut search = Search::default();
            let file = match Beneath::open(&root)
                .map_err(OpenError::Io)
                .and_then(|root| root.open_regular(Path::new(&rel)))
            {
                Ok(file) => file,
                Err(e) => return Err(open_message(&shown, "search", &e)),
            };
            match search_file(file, &rel, &regex, max, &mut search) {
                FileResult::Searched => Ok(search),
                FileResult::TooBig => Err(format!(
                    "'{shown}' is larger than {} MiB, too big for search_files; search it with \
                     the shell tool instead, e.g. `grep -n PATTERN '{shown}'`",
                    MAX_FILE_BYTES / 1024 / 1024
                )),
                FileResult::Binary => Err(format!(
                    "'{shown}' looks like a binary file (it has NUL bytes); search_files only \
                     searches text files"
                )),
                FileResult::Unreadable(e) => Err(format!("cannot read '{shown}': {e}")),
            }
        })
        .await
    };
    let search = match search {
        Ok(Ok(search)) => search,
        Ok(Err(message)) => return Outcome::error(message),
        Err(e) => return Outcome::error(format!("searching '{shown}' failed: {e}")),
    };

    let mut lines = search.lines;
    if lines.is_empty() {
        let mut message = format!("no matches for '{}'", args.pattern);
        if args.path.is_some() {
            message.push_str(&format!(" in '{shown}'"));
        }
        if let Some(glob) = &args.glob {
            message.push_str(&format!(" in files matching '{glob}'"));
        }
        lines.push(message);
    }
    if search.stopped {
        lines.push(format!(
            "[stopped after {max} matches; narrow the pattern or path]"
        ));
    }
    if search.too_big > 0 {
        lines.push(format!(
            "[skipped {} file(s) larger than {} MiB; search them with the shell tool]",
            search.too_big,
            MAX_FILE_BYTES / 1024 / 1024
        ));
    }
    if search.unreadable > 0 {
        lines.push(format!(
            "[skipped {} file(s) or directories that could not be read]",
            search.unreadable
        ));
    }
    Outcome::ok(cap(&lines.join("\n"), OUTPUT_CAP_BYTES))
}

/// Which files of a directory are searched.
struct Filter {
    matcher: GlobMatcher,
    /// The glob has no `/` and is matched against file names.
    by_name: bool,
}

impl Filter {
    fn new(glob: &str) -> Result<Self, String> {
        let pattern = glob.strip_prefix("./").unwrap_or(glob);
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| {
                format!(
                    "invalid glob '{glob}': {e}; use a pattern such as *.rs (file names) or \
                     src/**/*.py (paths)"
                )
            })?
            .compile_matcher();
        Ok(Self {
            matcher,
            by_name: !pattern.contains('/'),
        })
    }

    fn matches(&self, entry: &Entry<'_>) -> bool {
        if self.by_name {
            self.matcher.is_match(entry.name)
        } else {
            self.matcher.is_match(entry.from_root) || self.matcher.is_match(entry.from_base)
        }
    }
}

/// What a search found.
#[derive(Debug, Default)]
struct Search {
    /// `path:line: text`, in order.
    lines: Vec<String>,
    /// There were more than `max` matching lines.
    stopped: bool,
    /// Files skipped for their size.
    too_big: usize,
    /// Files and directories that could not be read.
    unreadable: usize,
}

/// Searches the files below `base`.
fn search_dir(
    root: &Path,
    base: &Path,
    filter: Option<&Filter>,
    regex: &Regex,
    max: usize,
    cancel: &CancellationToken,
) -> std::io::Result<Search> {
    let mut search = Search::default();
    let workspace = Beneath::open(root)?;
    let summary = walk_files(root, base, &SKIPPED_DIRS, cancel, |entry| {
        if filter.is_some_and(|f| !f.matches(entry)) {
            return ControlFlow::Continue(());
        }
        let file = if entry.is_symlink {
            // Only follow links to files inside the workspace: open what the link resolves to
            // beneath the root, so a link swapped in meanwhile leads nowhere.
            let target = std::fs::canonicalize(entry.path)
                .ok()
                .and_then(|target| Some(target.strip_prefix(root).ok()?.to_path_buf()));
            match target {
                Some(target) => workspace.open_regular(&target),
                None => return ControlFlow::Continue(()),
            }
        } else {
            entry
                .dir
                .open_regular_entry(entry.file_name, OFlag::O_RDONLY)
        };
        let file = match file {
            Ok(file) => file,
            Err(OpenError::Io(e)) => {
                search.unreadable += 1;
                tracing::debug!(path = entry.from_root, error = %e, "search_files: unreadable");
                return ControlFlow::Continue(());
            }
            // Met through a link: not a regular file after all.
            Err(_) => return ControlFlow::Continue(()),
        };
        match search_file(file, entry.from_root, regex, max, &mut search) {
            FileResult::Searched | FileResult::Binary => {}
            FileResult::TooBig => search.too_big += 1,
            FileResult::Unreadable(_) => search.unreadable += 1,
        }
        if search.stopped {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    search.unreadable += summary.unreadable_dirs;
    Ok(search)
}

enum FileResult {
    Searched,
    TooBig,
    Binary,
    Unreadable(std::io::Error),
}

/// Adds the matching lines of the file at `path` (shown as `rel`) to `search`, setting
/// `search.stopped` instead of going beyond `max` lines.
fn search_file(
    mut file: std::fs::File,
    rel: &str,
    regex: &Regex,
    max: usize,
    search: &mut Search,
) -> FileResult {
    match file.metadata() {
        Ok(meta) if meta.len() > MAX_FILE_BYTES => return FileResult::TooBig,
        Ok(_) => {}
        Err(e) => return FileResult::Unreadable(e),
    }
    let mut bytes = Vec::new();
    // `take` guards against a file that grew since its size was checked.
    if let Err(e) = (&mut file).take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
        return FileResult::Unreadable(e);
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return FileResult::TooBig;
    }
    if bytes[..bytes.len().min(BINARY_PROBE_BYTES)].contains(&0) {
        return FileResult::Binary;
    }
    let text = String::from_utf8_lossy(&bytes);
    for (i, line) in text.lines().enumerate() {
        let Some(found) = regex.find(line) else {
            continue;
        };
        if search.lines.len() == max {
            search.stopped = true;
            break;
        }
        search
            .lines
            .push(format!("{rel}:{}: {}", i + 1, excerpt(line, found.start())));
    }
    FileResult::Searched
}

/// `line` without trailing whitespace, cut to [`MAX_LINE_CHARS`] characters around the match
/// starting at byte `at`, with `…` where it was cut.
fn excerpt(line: &str, at: usize) -> String {
    let line = line.trim_end();
    let total = line.chars().count();
    if total <= MAX_LINE_CHARS {
        return line.to_owned();
    }
    // Start a little before the match when it lies near or beyond the end of the first
    // MAX_LINE_CHARS characters.
    let before = line[..at.min(line.len())].chars().count();
    let skip = if before + MAX_LINE_CHARS / 6 <= MAX_LINE_CHARS {
        0
    } else {
        (before - MAX_LINE_CHARS / 3).min(total - MAX_LINE_CHARS)
    };
    let mut indices = line.char_indices().map(|(i, _)| i).skip(skip);
    let start = indices.next().unwrap_or(line.len());
    let end = indices.nth(MAX_LINE_CHARS - 1).unwrap_or(line.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&line[start..end]);
    if end < line.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::execute;
    use crate::tools::tests::{call, context};
    use baton_core::tools::SEARCH_FILES;
    use baton_proto::ToolResult;
    use pretty_assertions::assert_eq;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    async fn search(dir: &TempDir, arguments: serde_json::Value) -> ToolResult {
        execute(&context(dir), &call(SEARCH_FILES, arguments))
            .await
            .unwrap()
    }

    fn assert_error(result: &ToolResult, expected: &str) {
        assert!(result.is_error, "not an error: {}", result.content);
        assert!(
            result.content.contains(expected),
            "{:?} does not contain {expected:?}",
            result.content
        );
    }

    fn tree(dir: &TempDir) {
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/bin")).unwrap();
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::write(
            root.join("src/lib.rs"),
            "pub fn hello() {}\n\nfn helper() -> u8 {\n    7\n}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("src/bin/main.rs"),
            "fn main() {\n    hello();\n}\n",
        )
        .unwrap();
        std::fs::write(root.join("docs/guide.md"), "# Hello\n\nSay hello.\n").unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]\nname = \"hello\"\n").unwrap();
    }

    #[tokio::test]
    async fn finds_matching_lines_sorted_by_path_and_line() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = search(&dir, serde_json::json!({"pattern": r"hel+o\b"})).await;
        assert!(!result.is_error, "{}", result.content);
        assert_eq!(
            result.content,
            "Cargo.toml:2: name = \"hello\"\ndocs/guide.md:3: Say hello.\n\
             src/bin/main.rs:2:     hello();\nsrc/lib.rs:1: pub fn hello() {}"
        );
    }

    #[tokio::test]
    async fn searches_case_insensitively() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = search(
            &dir,
            serde_json::json!({"pattern": "^# hello", "case_insensitive": true}),
        )
        .await;
        assert_eq!(result.content, "docs/guide.md:1: # Hello");
        let result = search(&dir, serde_json::json!({"pattern": "^# hello"})).await;
        assert_eq!(result.content, "no matches for '^# hello'");
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn glob_filters_by_name_or_path() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let by_name = search(
            &dir,
            serde_json::json!({"pattern": "hello", "glob": "*.rs"}),
        )
        .await;
        assert_eq!(
            by_name.content,
            "src/bin/main.rs:2:     hello();\nsrc/lib.rs:1: pub fn hello() {}"
        );
        let by_path = search(
            &dir,
            serde_json::json!({"pattern": "hello", "glob": "src/bin/**"}),
        )
        .await;
        assert_eq!(by_path.content, "src/bin/main.rs:2:     hello();");
        // `*` does not cross directories.
        let shallow = search(
            &dir,
            serde_json::json!({"pattern": "hello", "glob": "src/*.rs"}),
        )
        .await;
        assert_eq!(shallow.content, "src/lib.rs:1: pub fn hello() {}");
        // Relative to `path` too.
        let below = search(
            &dir,
            serde_json::json!({"pattern": "hello", "path": "src", "glob": "bin/*.rs"}),
        )
        .await;
        assert_eq!(below.content, "src/bin/main.rs:2:     hello();");
        let none = search(
            &dir,
            serde_json::json!({"pattern": "hello", "glob": "*.py"}),
        )
        .await;
        assert_eq!(
            none.content,
            "no matches for 'hello' in files matching '*.py'"
        );
        assert!(!none.is_error);
    }

    #[tokio::test]
    async fn searches_a_directory_or_a_single_file() {
        let dir = TempDir::new().unwrap();
        tree(&dir);
        let result = search(
            &dir,
            serde_json::json!({"pattern": "fn", "path": "src/bin"}),
        )
        .await;
        assert_eq!(result.content, "src/bin/main.rs:1: fn main() {");
        let result = search(
            &dir,
            serde_json::json!({"pattern": "fn", "path": "src/lib.rs"}),
        )
        .await;
        assert_eq!(
            result.content,
            "src/lib.rs:1: pub fn hello() {}\nsrc/lib.rs:3: fn helper() -> u8 {"
        );
        let result = search(&dir, serde_json::json!({"pattern": "zzz", "path": "src"})).await;
        assert_eq!(result.content, "no matches for 'zzz' in 'src'");
        let result = search(&dir, serde_json::json!({"pattern": "x", "path": "nope"})).await;
        assert_error(&result, "'nope' does not exist;");
    }

    #[tokio::test]
    async fn stops_after_max_results() {
        let dir = TempDir::new().unwrap();
        let text: String = (1..=50).map(|i| format!("item {i}\n")).collect();
        std::fs::write(dir.path().join("a.txt"), &text).unwrap();
        std::fs::write(dir.path().join("b.txt"), &text).unwrap();
        let result = search(
            &dir,
            serde_json::json!({"pattern": "item", "max_results": 3}),
        )
        .await;
        assert_eq!(
            result.content,
            "a.txt:1: item 1\na.txt:2: item 2\na.txt:3: item 3\n[stopped after 3 matches; \
             narrow the pattern or path]"
        );
        // Exactly max_results matches: no note.
        let result = search(
            &dir,
            serde_json::json!({"pattern": "item 50", "max_results": 2}),
        )
        .await;
        assert_eq!(result.content, "a.txt:50: item 50\nb.txt:50: item 50");
        // The default is 200, across files; the output stays within the cap.
        let result = search(&dir, serde_json::json!({"pattern": "item"})).await;
        assert_eq!(result.content, cap(&result.content, OUTPUT_CAP_BYTES));
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(!result.content.contains("stopped after"));
        let result = search(
            &dir,
            serde_json::json!({"pattern": "item", "max_results": 0}),
        )
        .await;
        assert_error(&result, "max_results must be at least 1");
    }

    #[tokio::test]
    async fn long_output_is_capped_keeping_the_note() {
        let dir = TempDir::new().unwrap();
        let line = format!("match {}\n", "x".repeat(200));
        std::fs::write(dir.path().join("big.txt"), line.repeat(500)).unwrap();
        let result = search(&dir, serde_json::json!({"pattern": "match"})).await;
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(result.content.contains("bytes cut from the middle of"));
        assert!(result.content.starts_with("big.txt:1: match "));
        assert!(
            result
                .content
                .ends_with("\n[stopped after 200 matches; narrow the pattern or path]")
        );
    }

    #[tokio::test]
    async fn long_lines_are_cut_around_the_match() {
        let dir = TempDir::new().unwrap();
        let long = format!("{}NEEDLE{}", "a".repeat(1000), "b".repeat(1000));
        std::fs::write(dir.path().join("min.js"), format!("{long}\nshort NEEDLE\n")).unwrap();
        let result = search(&dir, serde_json::json!({"pattern": "NEEDLE"})).await;
        let lines: Vec<&str> = result.content.lines().collect();
        assert_eq!(lines.len(), 2);
        let shown = lines[0].strip_prefix("min.js:1: ").unwrap();
        assert_eq!(shown.chars().count(), MAX_LINE_CHARS + 2);
        assert!(shown.starts_with("…aaa"), "{shown}");
        assert!(shown.ends_with("bbb…"), "{shown}");
        assert!(shown.contains("NEEDLE"));
        assert_eq!(lines[1], "min.js:2: short NEEDLE");
        let head = format!("NEEDLE{}", "c".repeat(400));
        assert_eq!(excerpt(&head, 0), format!("{}…", &head[..MAX_LINE_CHARS]));
    }

    #[tokio::test]
    async fn invalid_regex_is_an_error() {
        let dir = TempDir::new().unwrap();
        let result = search(&dir, serde_json::json!({"pattern": "fn main("})).await;
        assert_error(
            &result,
            "invalid regular expression 'fn main(': regex parse error",
        );
        assert_error(&result, "unclosed group");
        let result = search(&dir, serde_json::json!({"pattern": "x", "glob": "a[b"})).await;
        assert_error(&result, "invalid glob 'a[b'");
    }

    #[tokio::test]
    async fn skips_binary_big_and_ignored_files() {
        let dir = TempDir::new().unwrap();
        let root = dir.path();
        for skipped in [".git", "target/debug", "node_modules/x", "sub/.git"] {
            std::fs::create_dir_all(root.join(skipped)).unwrap();
            std::fs::write(root.join(skipped).join("f"), "needle\n").unwrap();
        }
        std::fs::write(root.join("bin.dat"), b"needle\n\0\x01\x02").unwrap();
        let mut big = "needle\n".repeat(100);
        big.push_str(&"z".repeat(MAX_FILE_BYTES as usize));
        std::fs::write(root.join("big.log"), big).unwrap();
        std::fs::write(root.join("text.txt"), "needle\n").unwrap();
        std::fs::write(root.join("latin1.txt"), b"caf\xe9 needle\n").unwrap();
        let result = search(&dir, serde_json::json!({"pattern": "needle"})).await;
        assert_eq!(
            result.content,
            "latin1.txt:1: caf\u{fffd} needle\ntext.txt:1: needle\n[skipped 1 file(s) larger \
             than 5 MiB; search them with the shell tool]"
        );
        assert!(!result.is_error);
        // Given explicitly, an ignored directory is searched, a binary file is refused.
        let result = search(
            &dir,
            serde_json::json!({"pattern": "needle", "path": "target"}),
        )
        .await;
        assert_eq!(result.content, "target/debug/f:1: needle");
        let result = search(
            &dir,
            serde_json::json!({"pattern": "needle", "path": "bin.dat"}),
        )
        .await;
        assert_error(&result, "'bin.dat' looks like a binary file");
        let result = search(
            &dir,
            serde_json::json!({"pattern": "needle", "path": "big.log"}),
        )
        .await;
        assert_error(&result, "'big.log' is larger than 5 MiB");
    }

    #[tokio::test]
    async fn does_not_follow_symlinks_out_or_into_directories() {
        let dir = TempDir::new().unwrap();
        let outside = TempDir::new().unwrap();
        std::fs::write(outside.path().join("secret"), "needle\n").unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.txt"), "needle\n").unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        symlink("src", dir.path().join("src-link")).unwrap();
        symlink(
            outside.path().join("secret"),
            dir.path().join("secret-link"),
        )
        .unwrap();
        symlink("src/a.txt", dir.path().join("alias.txt")).unwrap();
        let result = search(&dir, serde_json::json!({"pattern": "needle"})).await;
        assert_eq!(result.content, "alias.txt:1: needle\nsrc/a.txt:1: needle");
        let result = search(
            &dir,
            serde_json::json!({"pattern": "needle", "path": "out"}),
        )
        .await;
        assert_eq!(
            result.content,
            "path 'out' is outside the workspace; use a path relative to the workspace root"
        );
        assert!(result.is_error);
    }

    #[tokio::test]
    async fn search_outside_the_workspace_is_an_error() {
        let dir = TempDir::new().unwrap();
        for path in ["..", "/etc", "../x/y"] {
            let result = search(&dir, serde_json::json!({"pattern": "x", "path": path})).await;
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
