//! [`deliver`]: a run's change set as one commit on its base commit, pushed to a branch, then
//! (mode `pr`) a pull request. The commit is built without a work tree (a temp index,
//! `read-tree`, `apply --cached`, `write-tree`, `commit-tree`) from fixed inputs (identity from
//! the settings, dates = the run's end), so a retry makes the same sha and pushes nothing new.

use std::path::Path;

use baton_proto::{DeliverRequest, Delivered};

use super::GitError;
use super::clone::fetch_commit;
use super::command::Git;
use super::github;
use super::settings::GitSettings;

/// Longest subject line of a delivered commit.
const SUBJECT_CHARS: usize = 72;

/// Why delivery stopped: refused for good (goes into `Delivered.error`) or worth a retry.
pub(crate) enum Stop {
    Refused(String),
    Transient(String),
}

impl From<GitError> for Stop {
    fn from(err: GitError) -> Self {
        match err {
            GitError::Transient(message) => Self::Transient(message),
            GitError::Unavailable(message) => Self::Refused(message),
        }
    }
}

/// Commits `patch` (the change set, a git-style patch; empty = nothing changed) on
/// `request.changes.base_commit` and pushes it to `request.delivery.branch` (default
/// `baton/<run_id>`) of `request.git.url`; with mode `pr` then finds or opens the pull request
/// into `request.base_branch` with `body`. `scratch` is a fresh directory for a bare
/// repository, removed at the end. Anything that will not get better (a refused push, a patch
/// that does not apply, an API error) comes back as `Ok(Delivered { error, .. })`; only
/// failures worth retrying are `Err(GitError::Transient)`.
pub async fn deliver(
    settings: &GitSettings,
    request: &DeliverRequest,
    patch: &[u8],
    run_id: &str,
    body: &str,
    scratch: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Delivered, GitError> {
    let delivery = request.delivery.clone().unwrap_or_default();
    let mut delivered = Delivered {
        mode: delivery.mode.clone(),
        branch: branch_name(&delivery.branch, run_id),
        ..Delivered::default()
    };
    let outcome = if patch.is_empty() {
        delivered.nothing_to_deliver = true;
        Ok(())
    } else {
        let delivered = &mut delivered;
        async move {
            check_protected(settings, request, &delivered.branch)?;
            let (git, url, base) = checked(settings, request, &delivered.mode, env)?;
            check_branch(&git, &delivered.branch).await?;
            let (subject, message) = commit_message(&request.message, run_id);
            let commit = make_commit(
                &git,
                settings,
                scratch,
                base,
                patch,
                &message,
                request.at_ms,
            )
            .await?;
            delivered.commit = commit.clone();
            push(&git, scratch, &commit, &delivered.branch).await?;
            if delivered.mode == "pr" {
                let pull = github::pull_request(
                    &settings.github,
                    github::Wanted {
                        git_url: url,
                        branch: &delivered.branch,
                        base: &request.base_branch,
                        title: &subject,
                        body,
                        draft: delivery.draft,
                    },
                    env,
                )
                .await?;
                delivered.pull_request_url = pull.url;
                delivered.pull_request_number = pull.number;
            }
            Ok::<(), Stop>(())
        }
        .await
    };
    // A scratch repository left behind only costs disk; the answer stands either way.
    let _ = tokio::fs::remove_dir_all(scratch).await;
    match outcome {
        Ok(()) => Ok(delivered),
        Err(Stop::Refused(reason)) => Ok(Delivered {
            error: reason,
            ..delivered
        }),
        Err(Stop::Transient(message)) => Err(GitError::Transient(message)),
    }
}

/// The mode is known and the request names a git source at a commit: git for its URL, the
/// URL and the base commit.
fn checked<'a>(
    settings: &GitSettings,
    request: &'a DeliverRequest,
    mode: &str,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(Git, &'a str, &'a str), Stop> {
    if !matches!(mode, "branch" | "pr") {
        return Err(Stop::Refused(format!(
            "unknown delivery mode '{mode}': use \"branch\" or \"pr\""
        )));
    }
    let url = request.git.as_ref().map_or("", |git| git.url.as_str());
    let base = request
        .changes
        .as_ref()
        .map_or("", |changes| changes.base_commit.as_str());
    if url.is_empty() || base.is_empty() {
        return Err(Stop::Refused(
            "delivery needs a git source: the run did not start from a --git repository at a \
             known commit"
                .into(),
        ));
    }
    Ok((Git::for_url(settings, url, env)?, url, base))
}

/// Refuses a delivery to a protected branch (`main`, `master`, the source ref, the base
/// branch, `[git] protected_branches`) unless the settings allow it: a submitter must not push
/// straight to them with the worker's token (and trigger their CI) before any review.
fn check_protected(
    settings: &GitSettings,
    request: &DeliverRequest,
    branch: &str,
) -> Result<(), Stop> {
    let source_ref = request.git.as_ref().map_or("", |git| git.r#ref.as_str());
    let onto_source = request.delivery.as_ref().is_some_and(|d| d.onto_source);
    match settings.protected_branch(branch, source_ref, &request.base_branch, onto_source) {
        None => Ok(()),
        Some(why) => Err(Stop::Refused(format!(
            "refusing to deliver to branch {branch}: it is protected ({why}); deliver to another \
             branch (--branch NAME, or none for baton/<run id>), or let runs deliver there: \
             deliver_to_protected_branches = true in the worker's [git] settings"
        ))),
    }
}

/// The commit of `patch` on `base` in a bare repository at `scratch`; its sha.
async fn make_commit(
    git: &Git,
    settings: &GitSettings,
    scratch: &Path,
    base: &str,
    patch: &[u8],
    message: &str,
    at_ms: i64,
) -> Result<String, Stop> {
    // A half-done earlier attempt may have left things behind: start clean.
    let _ = tokio::fs::remove_dir_all(scratch).await;
    tokio::fs::create_dir_all(scratch).await.map_err(|e| {
        Stop::Transient(format!(
            "cannot make scratch dir {}: {e}",
            scratch.display()
        ))
    })?;
    git.call(Some(scratch), &["init", "-q", "--bare"])
        .ok()
        .await?;
    let base = fetch_commit(git, scratch, base).await?;
    let index = scratch.join("baton-index");
    let indexed = |args: &[&str]| git.call(Some(scratch), args).env("GIT_INDEX_FILE", &index);
    indexed(&["read-tree", &base]).ok().await?;
    let applied = indexed(&["apply", "--cached", "--binary", "-"])
        .stdin(patch)
        .output()
        .await?;
    if !applied.success {
        return Err(Stop::Refused(format!(
            "the change set does not apply on base commit {base}: {}",
            super::classify::detail(&applied.stderr)
        )));
    }
    let tree = indexed(&["write-tree"]).ok().await?;
    let date = format!("@{} +0000", at_ms.div_euclid(1000));
    let commit = git
        .call(
            Some(scratch),
            &["commit-tree", tree.trim(), "-p", &base, "-F", "-"],
        )
        .env("GIT_AUTHOR_NAME", &settings.author_name)
        .env("GIT_AUTHOR_EMAIL", &settings.author_email)
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_NAME", &settings.author_name)
        .env("GIT_COMMITTER_EMAIL", &settings.author_email)
        .env("GIT_COMMITTER_DATE", &date)
        .stdin(message.as_bytes())
        .ok()
        .await?;
    Ok(commit.trim().to_owned())
}

/// Pushes `commit` to `branch` unless it is there already; a normal push, so a branch at an
/// unrelated commit is refused rather than overwritten.
async fn push(git: &Git, scratch: &Path, commit: &str, branch: &str) -> Result<(), Stop> {
    let target = format!("refs/heads/{branch}");
    let listed = git.ls_remote(Some(scratch), &[&target]).ok().await?;
    let current = listed
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .find(|(_, name)| *name == target)
        .map(|(sha, _)| sha);
    if current == Some(commit) {
        return Ok(());
    }
    let pushed = git
        .call(
            Some(scratch),
            &["push", "-q", git.url(), &format!("{commit}:{target}")],
        )
        .output()
        .await?;
    if pushed.success {
        return Ok(());
    }
    match refusal(&pushed.stderr, branch) {
        Some(reason) => Err(Stop::Refused(reason)),
        None => Err(git.failure("push", &pushed.stderr).into()),
    }
}

/// The reason in words when the remote refused the push (a hook, a protected branch, not a
/// fast-forward); `None` for other failures (the network, credentials).
fn refusal(stderr: &str, branch: &str) -> Option<String> {
    let rejected = stderr
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("! [rejected]") || line.starts_with("! [remote rejected]"))?;
    let why = rejected
        .rsplit_once('(')
        .map(|(_, why)| why.trim_end_matches(')'))
        .unwrap_or("refused");
    let remote: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("remote:"))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let mut reason = if why.contains("fetch first") || why.contains("non-fast-forward") {
        format!(
            "the git server refused the push to branch {branch}: it already exists at a commit \
             this change set does not build on (not a fast-forward); deliver to another branch, \
             or delete that one"
        )
    } else {
        format!("the git server refused the push to branch {branch}: {why}")
    };
    if !remote.is_empty() {
        reason.push_str(&format!("; it said: {}", remote.join(" ")));
    }
    Some(reason)
}

/// `requested`, or `baton/<run_id>`, made a valid branch name (invalid characters and
/// sequences replaced by `-`).
pub(crate) fn branch_name(requested: &str, run_id: &str) -> String {
    let raw = match requested.trim() {
        "" => format!("baton/{run_id}"),
        given => given.to_owned(),
    };
    let parts: Vec<String> = raw
        .split('/')
        .map(|part| {
            let mut clean: String = part
                .chars()
                .map(|c| {
                    if c.is_ascii_control() || " ~^:?*[\\".contains(c) {
                        '-'
                    } else {
                        c
                    }
                })
                .collect();
            while clean.contains("..") {
                clean = clean.replace("..", ".");
            }
            clean = clean.replace("@{", "-{");
            let clean = clean.trim_start_matches('.');
            let clean = clean.strip_suffix(".lock").unwrap_or(clean);
            clean.to_owned()
        })
        .filter(|part| !part.is_empty())
        .collect();
    let joined = parts.join("/");
    let joined = joined.trim_start_matches('-').trim_end_matches('.');
    match joined {
        "" | "@" => format!(
            "baton/{}",
            run_id.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        ),
        name => name.to_owned(),
    }
}

/// git agrees the branch name is valid.
async fn check_branch(git: &Git, branch: &str) -> Result<(), Stop> {
    let checked = git
        .call(None, &["check-ref-format", &format!("refs/heads/{branch}")])
        .output()
        .await?;
    if checked.success {
        Ok(())
    } else {
        Err(Stop::Refused(format!(
            "'{branch}' is not a valid branch name: give another --branch"
        )))
    }
}

/// The subject (first line of the answer, at most 72 characters) and the whole message: the
/// subject, the whole answer when the subject is not all of it, and the `Baton-Run` trailer.
pub(crate) fn commit_message(answer: &str, run_id: &str) -> (String, String) {
    let answer = answer.trim();
    let first = answer
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("");
    let subject: String = if first.is_empty() {
        format!("baton run {run_id}")
    } else {
        first
            .chars()
            .take(SUBJECT_CHARS)
            .collect::<String>()
            .trim_end()
            .to_owned()
    };
    let mut message = subject.clone();
    message.push_str("\n\n");
    if !answer.is_empty() && answer != subject {
        message.push_str(answer);
        message.push_str("\n\n");
    }
    message.push_str(&format!("Baton-Run: {run_id}\n"));
    (subject, message)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn branch_names_are_made_valid() {
        assert_eq!(branch_name("", "run-1"), "baton/run-1");
        assert_eq!(branch_name("fix/parser", "r"), "fix/parser");
        assert_eq!(branch_name("a b:c~d^e?f*g[h\\i", "r"), "a-b-c-d-e-f-g-h-i");
        assert_eq!(branch_name("x..y/.hidden/z.lock/", "r"), "x.y/hidden/z");
        assert_eq!(branch_name("-lead/a@{b}.", "r"), "lead/a-{b}");
        assert_eq!(branch_name("..", "r 1"), "baton/r-1");
    }

    #[test]
    fn messages_cut_the_subject_and_keep_the_answer() {
        let (subject, message) = commit_message("Fix the parser\n", "run-1");
        assert_eq!(subject, "Fix the parser");
        assert_eq!(message, "Fix the parser\n\nBaton-Run: run-1\n");
        let long = "x".repeat(80);
        let (subject, message) = commit_message(&format!("{long}\n\nDetails."), "r");
        assert_eq!(subject, "x".repeat(72));
        assert_eq!(
            message,
            format!("{}\n\n{long}\n\nDetails.\n\nBaton-Run: r\n", "x".repeat(72))
        );
        assert_eq!(commit_message("  ", "r").1, "baton run r\n\nBaton-Run: r\n");
    }

    #[test]
    fn refusals_say_why() {
        let stderr = "remote: no pushes on fridays        \nTo file:///s.git\n ! [remote rejected] abc -> baton/r (pre-receive hook declined)\nerror: failed to push some refs to 'file:///s.git'\n";
        assert_eq!(
            refusal(stderr, "baton/r").as_deref(),
            Some(
                "the git server refused the push to branch baton/r: pre-receive hook declined; \
                 it said: no pushes on fridays"
            )
        );
        assert_eq!(
            refusal("fatal: unable to connect to x: Connection refused", "b"),
            None
        );
    }
}
