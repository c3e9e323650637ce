//! One path's entry in the patch, written as `git diff --full-index` would: the `diff --git`
//! header, mode lines, the `index` line with git blob ids, then text hunks with 3 lines of
//! context or a `GIT binary patch`.

use std::{collections::HashMap, fmt::Write as _};

use sha1::{Digest, Sha1};
use similar::{Algorithm, DiffOp, DiffTag, capture_diff_slices, group_diff_ops};

use super::{ChangesError, FileDiff, FileStatus, Item, binary};

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Git looks this far for a NUL byte to call a file binary.
const BINARY_PROBE: usize = 8000;
/// The id of an absent blob on an `index` line.
const NO_BLOB: &str = "0000000000000000000000000000000000000000";

/// A file or link with its content.
pub(super) type Side<'a> = Option<(&'a Item, &'a [u8])>;

/// Appends the patch entry for `path` going from `old` to `new` (not both absent, not equal)
/// to `out` and describes it.
pub(super) fn render(
    path: &str,
    old: Side<'_>,
    new: Side<'_>,
    out: &mut Vec<u8>,
) -> Result<FileDiff, ChangesError> {
    let type_change = matches!((old, new), (Some((a, _)), Some((b, _)))
        if matches!(a, Item::Link { .. }) != matches!(b, Item::Link { .. }));
    if type_change {
        // Git cannot express a type change in one entry: delete, then add.
        let gone = entry(path, old, None, out)?;
        let came = entry(path, None, new, out)?;
        return Ok(FileDiff {
            path: path.to_owned(),
            status: FileStatus::Type,
            insertions: gone.insertions + came.insertions,
            deletions: gone.deletions + came.deletions,
            binary: gone.binary || came.binary,
        });
    }
    entry(path, old, new, out)
}

/// One `diff --git` entry.
fn entry(
    path: &str,
    old: Side<'_>,
    new: Side<'_>,
    out: &mut Vec<u8>,
) -> Result<FileDiff, ChangesError> {
    let (old_bytes, new_bytes) = (old.map_or(&[][..], |s| s.1), new.map_or(&[][..], |s| s.1));
    let same_content = old.is_some() && new.is_some() && old_bytes == new_bytes;
    let status = match (old, new) {
        (None, _) => FileStatus::Added,
        (_, None) => FileStatus::Deleted,
        _ if same_content => FileStatus::Mode,
        _ => FileStatus::Modified,
    };
    let mut head = String::new();
    let (a, b) = (quote("a/", path), quote("b/", path));
    let _ = writeln!(head, "diff --git {a} {b}");
    let (old_mode, new_mode) = (old.map(|s| s.0.mode()), new.map(|s| s.0.mode()));
    match (old_mode, new_mode) {
        (None, Some(mode)) => {
            let _ = writeln!(head, "new file mode {mode}");
        }
        (Some(mode), None) => {
            let _ = writeln!(head, "deleted file mode {mode}");
        }
        (Some(from), Some(to)) if from != to => {
            let _ = writeln!(head, "old mode {from}\nnew mode {to}");
        }
        _ => {}
    }
    let mut diff = FileDiff {
        path: path.to_owned(),
        status,
        insertions: 0,
        deletions: 0,
        binary: false,
    };
    if same_content {
        out.extend_from_slice(head.as_bytes());
        return Ok(diff);
    }
    let id = |side: Side<'_>| side.map_or_else(|| NO_BLOB.to_owned(), |s| git_blob_id(s.1));
    let _ = write!(head, "index {}..{}", id(old), id(new));
    match (old_mode, new_mode) {
        (Some(from), Some(to)) if from == to => {
            let _ = writeln!(head, " {from}");
        }
        _ => head.push('\n'),
    }

    let texts = (text(old_bytes), text(new_bytes));
    let (Some(old_text), Some(new_text)) = texts else {
        diff.binary = true;
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(b"GIT binary patch\n");
        binary::literal(path, new_bytes, out)?;
        binary::literal(path, old_bytes, out)?;
        return Ok(diff);
    };
    if old_text.is_empty() && new_text.is_empty() {
        // An empty file added or deleted: git writes no ---/+++ lines.
        out.extend_from_slice(head.as_bytes());
        return Ok(diff);
    }
    let tab = if path.contains(' ') { "\t" } else { "" };
    let label = |side: Side<'_>, name: &str| match side {
        Some(_) => format!("{name}{tab}"),
        None => "/dev/null".to_owned(),
    };
    let _ = writeln!(head, "--- {}", label(old, &a));
    let _ = writeln!(head, "+++ {}", label(new, &b));
    let (insertions, deletions) = hunks(old_text, new_text, &mut head);
    out.extend_from_slice(head.as_bytes());
    diff.insertions = insertions;
    diff.deletions = deletions;
    Ok(diff)
}

/// The content as text, or `None` if git would call it binary (a NUL byte in the first
/// 8000 bytes) or it is not UTF-8.
fn text(bytes: &[u8]) -> Option<&str> {
    if bytes[..bytes.len().min(BINARY_PROBE)].contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// Writes the unified hunks from `old` to `new`; returns (insertions, deletions).
fn hunks(old: &str, new: &str, out: &mut String) -> (u32, u32) {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = line_ops(&a, &b);
    let (mut insertions, mut deletions) = (0u32, 0u32);
    for group in group_diff_ops(ops, CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (old_start, new_start) = (first.old_range().start, first.new_range().start);
        let old_len = last.old_range().end - old_start;
        let new_len = last.new_range().end - new_start;
        let _ = writeln!(
            out,
            "@@ -{} +{} @@",
            range(old_start, old_len),
            range(new_start, new_len)
        );
        for op in &group {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            match tag {
                DiffTag::Equal => lines(out, ' ', &a[old_range]),
                DiffTag::Delete => lines(out, '-', &a[old_range]),
                DiffTag::Insert => lines(out, '+', &b[new_range]),
                DiffTag::Replace => {
                    lines(out, '-', &a[old_range]);
                    lines(out, '+', &b[new_range]);
                }
            }
            let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            match tag {
                DiffTag::Equal => {}
                DiffTag::Delete => deletions += count(op.old_range().len()),
                DiffTag::Insert => insertions += count(op.new_range().len()),
                DiffTag::Replace => {
                    deletions += count(op.old_range().len());
                    insertions += count(op.new_range().len());
                }
            }
        }
    }
    (insertions, deletions)
}

/// The edit script from lines `a` to lines `b` (Myers, minimal). Lines are compared as
/// numbers, and lines found on one side only are set aside before the search (as git's
/// xdiff does): they cannot match, and a rewritten file would otherwise cost the search
/// time quadratic in its length.
fn line_ops<'t>(a: &[&'t str], b: &[&'t str]) -> Vec<DiffOp> {
    let mut ids: HashMap<&'t str, usize> = HashMap::new();
    let mut intern = |lines: &[&'t str]| -> Vec<usize> {
        lines
            .iter()
            .map(|&line| {
                let next = ids.len();
                *ids.entry(line).or_insert(next)
            })
            .collect()
    };
    let a_ids = intern(a);
    let b_ids = intern(b);
    let (mut in_a, mut in_b) = (vec![false; ids.len()], vec![false; ids.len()]);
    a_ids.iter().for_each(|&id| in_a[id] = true);
    b_ids.iter().for_each(|&id| in_b[id] = true);
    let a_kept: Vec<usize> = (0..a.len()).filter(|&i| in_b[a_ids[i]]).collect();
    let b_kept: Vec<usize> = (0..b.len()).filter(|&j| in_a[b_ids[j]]).collect();
    let a_seq: Vec<usize> = a_kept.iter().map(|&i| a_ids[i]).collect();
    let b_seq: Vec<usize> = b_kept.iter().map(|&j| b_ids[j]).collect();

    // Matched lines, as indices into `a` and `b`, in order; then a sentinel at the ends.
    let mut matched = Vec::new();
    for op in capture_diff_slices(Algorithm::Myers, &a_seq, &b_seq) {
        if let DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = op
        {
            matched.extend((0..len).map(|k| (a_kept[old_index + k], b_kept[new_index + k])));
        }
    }
    matched.push((a.len(), b.len()));

    let mut ops = Vec::new();
    let (mut i, mut j) = (0, 0);
    for (x, y) in matched {
        match (x - i, y - j) {
            (0, 0) => {}
            (old_len, 0) => ops.push(DiffOp::Delete {
                old_index: i,
                old_len,
                new_index: j,
            }),
            (0, new_len) => ops.push(DiffOp::Insert {
                old_index: i,
                new_index: j,
                new_len,
            }),
            (old_len, new_len) => ops.push(DiffOp::Replace {
                old_index: i,
                old_len,
                new_index: j,
                new_len,
            }),
        }
        if x == a.len() {
            break;
        }
        match ops.last_mut() {
            Some(DiffOp::Equal {
                old_index,
                new_index,
                len,
            }) if *old_index + *len == x && *new_index + *len == y => *len += 1,
            _ => ops.push(DiffOp::Equal {
                old_index: x,
                new_index: y,
                len: 1,
            }),
        }
        (i, j) = (x + 1, y + 1);
    }
    ops
}

/// A hunk range as git writes it: 1-based start (the line before when empty), length
/// omitted when 1.
fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

fn lines(out: &mut String, prefix: char, lines: &[&str]) {
    for line in lines {
        out.push(prefix);
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push_str("\n\\ No newline at end of file\n");
        }
    }
}

/// The git blob id of `content`: SHA-1 of `blob <len>\0<content>`.
pub(super) fn git_blob_id(content: &[u8]) -> String {
    let mut hasher = Sha1::new();
    hasher.update(format!("blob {}\0", content.len()).as_bytes());
    hasher.update(content);
    hex::encode(hasher.finalize())
}

/// `prefix` + `path`, C-quoted the way git quotes names with control characters, `"`, `\`
/// or non-ASCII bytes (`core.quotePath`).
pub(super) fn quote(prefix: &str, path: &str) -> String {
    let name = format!("{prefix}{path}");
    let special = |b: u8| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\';
    if !name.bytes().any(special) {
        return name;
    }
    let mut quoted = String::from("\"");
    for b in name.bytes() {
        match b {
            b'\x07' => quoted.push_str("\\a"),
            b'\x08' => quoted.push_str("\\b"),
            b'\t' => quoted.push_str("\\t"),
            b'\n' => quoted.push_str("\\n"),
            b'\x0b' => quoted.push_str("\\v"),
            b'\x0c' => quoted.push_str("\\f"),
            b'\r' => quoted.push_str("\\r"),
            b'"' => quoted.push_str("\\\""),
            b'\\' => quoted.push_str("\\\\"),
            b if special(b) => {
                let _ = write!(quoted, "\\{b:03o}");
            }
            b => quoted.push(char::from(b)),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_ids_match_git_hash_object() {
        assert_eq!(git_blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(
            git_blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[test]
    fn names_are_quoted_like_git() {
        assert_eq!(quote("a/", "plain name.txt"), "a/plain name.txt");
        assert_eq!(quote("a/", "na\u{ef}ve"), "\"a/na\\303\\257ve\"");
        assert_eq!(quote("b/", "q\"t\\\n"), "\"b/q\\\"t\\\\\\n\"");
    }

    #[test]
    fn ranges_follow_git() {
        assert_eq!(range(0, 0), "0,0");
        assert_eq!(range(4, 1), "5");
        assert_eq!(range(2, 6), "3,6");
    }
}
