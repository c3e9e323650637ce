//! The CI examples in `deploy/ci/` stay runnable: every `baton` command in them parses with
//! this CLI's flags.

use clap::Parser;

use crate::cli::Cli;

/// The `baton ...` commands of a CI file: continuation lines joined (`\` at the end, or a
/// `- baton ...` list item continued on a more indented line), GitHub's `${{ .. }}` replaced by a word,
/// cut at `;`, `|`, `>`, `)` and `&&`.
fn commands(yaml: &str) -> Vec<Vec<String>> {
    let mut lines: Vec<String> = Vec::new();
    let mut continuing = false;
    let mut indent_of_item = usize::MAX;
    for raw in yaml.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let indent = raw.len() - raw.trim_start().len();
        let line = raw.trim();
        let yaml_continuation =
            !line.starts_with("- ") && indent > indent_of_item && !line.is_empty();
        match lines.last_mut() {
            Some(last) if continuing || yaml_continuation => {
                last.push(' ');
                last.push_str(line.trim_end_matches('\\'));
            }
            _ => lines.push(line.trim_end_matches('\\').to_owned()),
        }
        continuing = line.ends_with('\\');
        if line.starts_with("- baton ") {
            indent_of_item = indent;
        } else if !yaml_continuation && !continuing {
            indent_of_item = usize::MAX;
        }
    }
    let mut out = Vec::new();
    for line in lines {
        let line = substitute(&line);
        let mut rest = line.as_str();
        while let Some(at) = find_baton(rest) {
            let cmd = &rest[at..];
            let end = cmd
                .find([';', '|', '>', ')'])
                .or_else(|| cmd.find("&&"))
                .unwrap_or(cmd.len());
            out.push(words(&cmd[..end]));
            rest = &cmd[end..];
        }
    }
    out
}

/// Where `baton ` starts a command in `s`: outside quotes (an `echo "baton run .."` is
/// text), at the start or after a space, `(` or `;`.
fn find_baton(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut before: Option<char> = None;
    for (at, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if s[at..].starts_with("baton ")
                && matches!(before, None | Some(' ' | '(' | ';' | '-')) =>
            {
                return Some(at);
            }
            None => {}
        }
        before = Some(c);
    }
    None
}

fn substitute(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        match rest[start..].find("}}") {
            Some(end) => {
                out.push('X');
                rest = &rest[start + end + 2..];
            }
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Shell-like words: whitespace-separated, double or single quotes grouping.
fn words(cmd: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in cmd.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[test]
fn every_baton_command_in_the_ci_examples_parses() {
    for (name, yaml, main_command) in [
        (
            "github-actions.yml",
            include_str!("../../deploy/ci/github-actions.yml"),
            "submit",
        ),
        (
            "gitlab-ci.yml",
            include_str!("../../deploy/ci/gitlab-ci.yml"),
            "submit",
        ),
        (
            "replay-gate.yml",
            include_str!("../../deploy/ci/replay-gate.yml"),
            "replay-check",
        ),
    ] {
        let cmds = commands(yaml);
        assert!(
            cmds.iter()
                .any(|c| c.get(1).is_some_and(|s| s == main_command)),
            "{name}: no {main_command} found in {cmds:?}"
        );
        for cmd in &cmds {
            if let Err(e) = Cli::try_parse_from(cmd) {
                panic!("{name}: `{}` does not parse: {e}", cmd.join(" "));
            }
        }
    }
}

#[test]
fn the_examples_cover_upload_apply_and_delivery() {
    let all: Vec<Vec<String>> = [
        include_str!("../../deploy/ci/github-actions.yml"),
        include_str!("../../deploy/ci/gitlab-ci.yml"),
    ]
    .iter()
    .flat_map(|y| commands(y))
    .collect();
    let has = |flag: &str| all.iter().any(|c| c.iter().any(|w| w == flag));
    for flag in [
        "--workspace-from",
        "--git",
        "--deliver",
        "apply",
        "--stat",
        "--check",
    ] {
        assert!(has(flag), "no CI example uses {flag}");
    }
}
