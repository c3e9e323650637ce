//! [`diffstat`]: a change set's files the way `git diff --stat` shows them.

use std::fmt::Write as _;

use super::{FileDiff, patch::quote};

/// Widest `+`/`-` bar; longer bars are scaled down (each non-zero side keeps one mark).
const GRAPH_WIDTH: u64 = 50;

/// `git diff --stat`-like text: one ` path | N +++--` line per file (` path | Bin` for binary
/// files), names padded to one column, then ` N files changed, X insertions(+), Y
/// deletions(-)`. Empty when `files` is.
pub fn diffstat(files: &[FileDiff]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let names: Vec<String> = files.iter().map(|f| quote("", &f.path)).collect();
    let name_width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let total = |f: &FileDiff| u64::from(f.insertions) + u64::from(f.deletions);
    let widest = files.iter().map(total).max().unwrap_or(0);
    let count_width = files
        .iter()
        .map(|f| {
            if f.binary {
                3
            } else {
                total(f).to_string().len()
            }
        })
        .max()
        .unwrap_or(1);
    let mut out = String::new();
    let (mut insertions, mut deletions) = (0u64, 0u64);
    for (file, name) in files.iter().zip(&names) {
        insertions += u64::from(file.insertions);
        deletions += u64::from(file.deletions);
        if file.binary {
            let _ = writeln!(out, " {name:<name_width$} | {:>count_width$}", "Bin");
            continue;
        }
        let (plus, minus) = bars(
            u64::from(file.insertions),
            u64::from(file.deletions),
            widest,
        );
        let line = format!(
            " {name:<name_width$} | {:>count_width$} {}{}",
            total(file),
            "+".repeat(plus),
            "-".repeat(minus)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let plural = |n: u64, one: &str, many: &str| {
        if n == 1 {
            one.to_owned()
        } else {
            many.to_owned()
        }
    };
    let _ = write!(
        out,
        " {} {}",
        files.len(),
        plural(files.len() as u64, "file changed", "files changed")
    );
    if insertions > 0 || deletions == 0 {
        let _ = write!(
            out,
            ", {insertions} {}",
            plural(insertions, "insertion(+)", "insertions(+)")
        );
    }
    if deletions > 0 || insertions == 0 {
        let _ = write!(
            out,
            ", {deletions} {}",
            plural(deletions, "deletion(-)", "deletions(-)")
        );
    }
    out.push('\n');
    out
}

/// The `+` and `-` marks for a file, scaled so the widest file gets [`GRAPH_WIDTH`].
fn bars(insertions: u64, deletions: u64, widest: u64) -> (usize, usize) {
    let scale = |n: u64| {
        if widest <= GRAPH_WIDTH || n == 0 {
            n
        } else {
            (n * GRAPH_WIDTH / widest).max(1)
        }
    };
    let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    (to_usize(scale(insertions)), to_usize(scale(deletions)))
}
