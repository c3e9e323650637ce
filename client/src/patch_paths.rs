//! What `baton apply` checks before `git apply` runs: every path a change set's patch names
//! stays inside the target directory and outside git's own directory. The patch comes from
//! the run (the workers' blob store), so it is not trusted: a path under `.git/` (a
//! `.git/config` with `core.fsmonitor`, a hook) would run commands on this machine, a `..`
//! component or an absolute path would write elsewhere, and a link in the target directory
//! standing for a parent directory would be written through. `git apply` refuses most of
//! this itself (depending on its version and settings); this check does not depend on it.
//!
//! The names are read from every header line of every entry (`diff --git`, `---`, `+++`,
//! `rename from/to`, `copy from/to`), hunk bodies skipped by their line counts and binary
//! bodies up to the next entry, so the names checked are a superset of what git uses.

use std::path::Path;

use baton_store::changes::git_dir_of;

/// Why `patch` may not be applied in `dir` (one line per refused path, at most 20), or
/// `Ok` when every path it names is a plain relative path outside any `.git` directory whose
/// parents in `dir` are real directories (or missing).
pub(crate) fn check(dir: &Path, patch: &[u8]) -> Result<(), String> {
    let mut refused: Vec<String> = Vec::new();
    for path in names(patch) {
        if let Some(why) = unsafe_path(&path).or_else(|| through_link(dir, &path)) {
            let line = format!("'{}': {why}", path.escape_debug());
            if !refused.contains(&line) {
                refused.push(line);
            }
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    let more = refused.len().saturating_sub(20);
    refused.truncate(20);
    let mut text = refused.join("\n  ");
    if more > 0 {
        text.push_str(&format!("\n  ... and {more} more"));
    }
    Err(text)
}

/// What is wrong with `path` (a name from the patch, `a/`/`b/` prefix removed), if anything.
fn unsafe_path(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("an empty path");
    }
    if path.contains('\0') {
        return Some("a path with a NUL byte");
    }
    if path.starts_with('/') {
        return Some("an absolute path, outside the target directory");
    }
    if path
        .split('/')
        .any(|c| c == ".." || c == "." || c.is_empty())
    {
        return Some(
            "a path with a '..', '.' or empty component, which may leave the target directory",
        );
    }
    if git_dir_of(path).is_some() {
        return Some(
            "inside a .git directory, which baton never writes (config and hooks run commands)",
        );
    }
    None
}

/// Whether a parent of `path` in `dir` is something other than a real directory (a link
/// would be written through).
fn through_link(dir: &Path, path: &str) -> Option<&'static str> {
    let mut at = dir.to_path_buf();
    let components: Vec<&str> = path.split('/').collect();
    for component in &components[..components.len().saturating_sub(1)] {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) if meta.is_symlink() => {
                return Some(
                    "a parent directory is a symbolic link in the target directory; it would be written through",
                );
            }
            Ok(_) => return Some("a parent directory is a file in the target directory"),
            Err(_) => return None,
        }
    }
    None
}

/// Every path named in the headers of `patch`, without the `a/`/`b/` prefix.
fn names(patch: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(patch);
    let mut out = Vec::new();
    // Lines of the current hunk still to read (old side, new side).
    let mut hunk: Option<(u64, u64)> = None;
    let mut binary = false;
    for line in text.split('\n') {
        if let Some((old, new)) = &mut hunk {
            match line.as_bytes().first() {
                Some(b' ') => {
                    *old = old.saturating_sub(1);
                    *new = new.saturating_sub(1);
                }
                Some(b'-') => *old = old.saturating_sub(1),
                Some(b'+') => *new = new.saturating_sub(1),
                Some(b'\\') => {}
                // An empty line is an empty context line to git.
                None => {
                    *old = old.saturating_sub(1);
                    *new = new.saturating_sub(1);
                }
                _ => hunk = None,
            }
            match hunk {
                Some((0, 0)) => {
                    hunk = None;
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(rest) = line.strip_prefix("diff --git ") {
            binary = false;
            out.extend(git_header_names(rest));
        } else if binary {
            continue;
        } else if line == "GIT binary patch" {
            binary = true;
        } else if let Some(counts) = line.strip_prefix("@@ ") {
            hunk = hunk_counts(counts);
        } else if let Some(name) = ["--- ", "+++ "].iter().find_map(|p| line.strip_prefix(p)) {
            let name = if name.starts_with('"') {
                unquote(name).map(|(n, _)| n)
            } else {
                // Other tools put a tab and a date after the name.
                Some(name.split('\t').next().unwrap_or(name).to_owned())
            };
            if let Some(name) = name.filter(|n| n != "/dev/null") {
                out.push(strip_side(&name));
            }
        } else if let Some(name) = [
            "rename from ",
            "rename to ",
            "copy from ",
            "copy to ",
            "rename old ",
            "rename new ",
        ]
        .iter()
        .find_map(|p| line.strip_prefix(p))
        {
            match unquote(name) {
                Some((n, _)) => out.push(n),
                None => out.push(name.to_owned()),
            }
        }
    }
    out
}

/// The names of a `diff --git A B` line: quoted ones decoded; for an unquoted pair (which
/// may hold spaces), every way of splitting it at " b/".
fn git_header_names(rest: &str) -> Vec<String> {
    if rest.starts_with('"') {
        let Some((a, after)) = unquote(rest) else {
            return vec![rest.to_owned()];
        };
        let b = after.trim_start();
        let b = match unquote(b) {
            Some((b, _)) => b,
            None => b.to_owned(),
        };
        return vec![strip_side(&a), strip_side(&b)];
    }
    let mut names = Vec::new();
    if let Some(at) = rest.find(" \"") {
        // `a/x "b/y"`.
        names.push(strip_side(&rest[..at]));
        if let Some((b, _)) = unquote(&rest[at + 1..]) {
            names.push(strip_side(&b));
        }
        return names;
    }
    for (at, _) in rest.match_indices(" b/") {
        names.push(strip_side(&rest[..at]));
        names.push(strip_side(&rest[at + 1..]));
    }
    if names.is_empty() {
        names.push(strip_side(rest));
    }
    names
}

/// `a/x` -> `x` (git's default `-p1`).
fn strip_side(name: &str) -> String {
    name.strip_prefix("a/")
        .or_else(|| name.strip_prefix("b/"))
        .unwrap_or(name)
        .to_owned()
}

/// The old and new line counts of a hunk header's rest (`-1,3 +1,4 @@`).
fn hunk_counts(rest: &str) -> Option<(u64, u64)> {
    let mut parts = rest.split(' ');
    let count = |part: Option<&str>, sign: char| -> Option<u64> {
        let range = part?.strip_prefix(sign)?;
        match range.split_once(',') {
            Some((_, n)) => n.parse().ok(),
            None => range.parse::<u64>().ok().map(|_| 1),
        }
    };
    let old = count(parts.next(), '-')?;
    let new = count(parts.next(), '+')?;
    (old > 0 || new > 0).then_some((old, new))
}

/// A C-style quoted name at the start of `s` (as git writes names with special bytes):
/// the name and what follows the closing quote.
fn unquote(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let bytes = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let name = String::from_utf8_lossy(&out).into_owned();
                return Some((name, &body[i + 1..]));
            }
            b'\\' => {
                let next = *bytes.get(i + 1)?;
                i += 2;
                out.push(match next {
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'v' => 0x0b,
                    b'f' => 0x0c,
                    b'r' => b'\r',
                    b'0'..=b'7' => {
                        let digits = body.get(i - 1..i + 2)?;
                        i += 2;
                        u8::from_str_radix(digits, 8).ok()?
                    }
                    other => other,
                });
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn names_come_from_every_header_and_not_from_hunk_bodies() {
        let patch = concat!(
            "diff --git a/src/lib.rs b/src/lib.rs\n",
            "index 1111..2222 100644\n",
            "--- a/src/lib.rs\n",
            "+++ b/src/lib.rs\n",
            "@@ -1,3 +1,3 @@\n",
            " a\n",
            "--- /etc/passwd\n",
            "+++ b/.git/config\n",
            "\n",
            "diff --git a/old name b/new name\n",
            "similarity index 100%\n",
            "rename from old name\n",
            "rename to new name\n",
            "diff --git \"a/q\\\"x\\303\\251\" \"b/q\\\"x\\303\\251\"\n",
            "new file mode 100644\n",
            "--- /dev/null\n",
            "+++ \"b/q\\\"x\\303\\251\"\n",
            "@@ -0,0 +1 @@\n",
            "+x\n",
            "diff --git a/bin b/bin\n",
            "GIT binary patch\n",
            "literal 3\n",
            "KcmZQzfB*mh00961\n",
            "\n",
            "literal 0\n",
            "HcmV?d00001\n",
            "\n",
        );
        let mut got = names(patch.as_bytes());
        got.sort();
        got.dedup();
        assert_eq!(got, ["bin", "new name", "old name", "q\"xé", "src/lib.rs"]);
        assert_eq!(check(Path::new("/nonexistent"), patch.as_bytes()), Ok(()));
    }

    #[test]
    fn paths_outside_the_target_or_in_git_dirs_are_refused() {
        for (patch, path) in [
            ("diff --git a/.git/config b/.git/config\n", ".git/config"),
            (
                "diff --git a/x b/x\n--- a/x\n+++ b/sub/.GIT/hooks/pre-commit\n",
                "sub/.GIT/hooks/pre-commit",
            ),
            ("diff --git a/../x b/../x\n", "../x"),
            (
                "diff --git a/x b/x\nrename from x\nrename to /etc/cron.d/x\n",
                "/etc/cron.d/x",
            ),
            (
                "diff --git \"a/\\056git/config\" \"b/\\056git/config\"\n",
                ".git/config",
            ),
        ] {
            let err = check(Path::new("/nonexistent"), patch.as_bytes()).unwrap_err();
            assert!(err.contains(&format!("'{path}'")), "{patch}: {err}");
        }
    }

    #[test]
    fn a_link_in_the_target_standing_for_a_parent_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/tmp", tmp.path().join("l")).unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        let err = check(tmp.path(), b"diff --git a/l/x b/l/x\n").unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(check(tmp.path(), b"diff --git a/d/x b/d/x\n"), Ok(()));
        // The link itself may be changed (git replaces it, never writes through it).
        assert_eq!(check(tmp.path(), b"diff --git a/l b/l\n"), Ok(()));
    }
}
