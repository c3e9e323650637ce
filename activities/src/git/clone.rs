//! [`clone_into`]: a run's `--git` source into its workspace. `git init` + `git fetch` +
//! checkout (the workspace already exists and keeps its `.baton/` state dir), shallow when the
//! server allows, everything but `.baton/` replaced on every attempt.

use std::io::ErrorKind;
use std::path::Path;

use baton_proto::GitSource;

use super::GitError;
use super::command::Git;
use super::refs::{Listing, Wanted};
use super::settings::GitSettings;

/// The workspace's local state dir, kept across a clone and excluded from git.
const STATE_DIR: &str = ".baton";

/// What was checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cloned {
    /// Full sha of the commit checked out.
    pub commit: String,
    /// The branch checked out, or the remote's default branch for a tag or a commit ("" when
    /// the remote does not say).
    pub base_branch: String,
}

/// Fetches `source` into `dest` (the run's workspace, which exists) and checks it out: a branch
/// as a local branch of that name, a tag or a commit as a detached `HEAD`. Remote `origin` is
/// the URL, without credentials. `env` reads the worker's environment: tokens are looked up in
/// it by the names `settings.credentials` gives.
pub async fn clone_into(
    settings: &GitSettings,
    source: &GitSource,
    dest: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Cloned, GitError> {
    let git = Git::for_url(settings, &source.url, env)?;
    let listing = list(&git).await?;
    let wanted = listing.resolve(&source.r#ref, git.url())?;
    clear(dest).await?;
    init(&git, dest).await?;
    let default_branch = listing.default_branch();
    let (commit, base_branch) = match &wanted {
        Wanted::Branch(name) => {
            let tracking = format!("refs/remotes/origin/{name}");
            let from = format!("refs/heads/{name}");
            (fetch_ref(&git, dest, &from, &tracking).await?, name.clone())
        }
        Wanted::Tag(name) => {
            let tag = format!("refs/tags/{name}");
            (fetch_ref(&git, dest, &tag, &tag).await?, default_branch)
        }
        Wanted::Commit(sha) => {
            let full = listing
                .commit_starting_with(sha)
                .map_or_else(|| sha.clone(), str::to_owned);
            (fetch_commit(&git, dest, &full).await?, default_branch)
        }
    };
    let checkout: Vec<&str> = match &wanted {
        Wanted::Branch(name) => vec!["checkout", "-q", "-B", name, &commit],
        Wanted::Tag(_) | Wanted::Commit(_) => vec!["checkout", "-q", "--detach", &commit],
    };
    git.call(Some(dest), &checkout).ok().await?;
    Ok(Cloned {
        commit,
        base_branch,
    })
}

/// `ls-remote --symref`: whether the repository exists and what it has.
pub(crate) async fn list(git: &Git) -> Result<Listing, GitError> {
    let output = git.ls_remote(None, &[]).ok().await?;
    Ok(Listing::parse(&output))
}

/// Fetches one commit into the repository at `dir` (a bare one or a work tree) and returns its
/// full sha: shallow first, then (a server that will not serve it so, or an abbreviated sha)
/// every branch and tag.
pub(crate) async fn fetch_commit(git: &Git, dir: &Path, sha: &str) -> Result<String, GitError> {
    if sha.len() == 40 {
        match git
            .call(
                Some(dir),
                &["fetch", "-q", "--depth", "1", "--no-tags", git.url(), sha],
            )
            .ok()
            .await
        {
            Ok(_) => {
                if let Some(commit) = try_commit_of(git, dir, sha).await? {
                    return Ok(commit);
                }
            }
            Err(GitError::Unavailable(_)) => {}
            Err(transient) => return Err(transient),
        }
    }
    git.call(
        Some(dir),
        &[
            "fetch",
            "-q",
            "--no-tags",
            git.url(),
            "+refs/heads/*:refs/remotes/origin/*",
            "+refs/tags/*:refs/tags/*",
        ],
    )
    .ok()
    .await?;
    try_commit_of(git, dir, sha).await?.ok_or_else(|| {
        GitError::Unavailable(format!(
            "commit {sha} not found in {} (none of its branches or tags has it): check the sha",
            git.url()
        ))
    })
}

/// Shallow fetch of the remote's ref `from` into `to`; the commit it names.
async fn fetch_ref(git: &Git, dest: &Path, from: &str, to: &str) -> Result<String, GitError> {
    let refspec = format!("+{from}:{to}");
    git.call(
        Some(dest),
        &[
            "fetch",
            "-q",
            "--depth",
            "1",
            "--no-tags",
            "origin",
            &refspec,
        ],
    )
    .ok()
    .await?;
    commit_of(git, dest, to).await
}

async fn commit_of(git: &Git, dir: &Path, name: &str) -> Result<String, GitError> {
    try_commit_of(git, dir, name).await?.ok_or_else(|| {
        GitError::Transient(format!(
            "git fetched {name} from {} but it names no commit",
            git.url()
        ))
    })
}

/// The full sha of the commit `name` names in the repository at `dir`, if it has one.
async fn try_commit_of(git: &Git, dir: &Path, name: &str) -> Result<Option<String>, GitError> {
    let output = git
        .call(
            Some(dir),
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{name}^{{commit}}"),
            ],
        )
        .output()
        .await?;
    let sha = output.stdout.trim();
    Ok((output.success && !sha.is_empty()).then(|| sha.to_owned()))
}

/// Removes everything in `dest` but `.baton/` (an earlier, half-done attempt included).
async fn clear(dest: &Path) -> Result<(), GitError> {
    let failed = |what: &str, e: std::io::Error| {
        GitError::Transient(format!(
            "cannot {what} in workspace {}: {e}",
            dest.display()
        ))
    };
    let mut entries = tokio::fs::read_dir(dest)
        .await
        .map_err(|e| failed("list the files", e))?;
    while let Some(entry) = entries
        .next_entry()
        .await
        .map_err(|e| failed("list the files", e))?
    {
        if entry.file_name() == STATE_DIR {
            continue;
        }
        let path = entry.path();
        let is_dir = entry
            .file_type()
            .await
            .map_err(|e| failed("inspect a file", e))?
            .is_dir();
        let removed = if is_dir {
            tokio::fs::remove_dir_all(&path).await
        } else {
            tokio::fs::remove_file(&path).await
        };
        match removed {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                return Err(failed(&format!("remove {}", path.display()), e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A fresh repository at `dest` with `origin` = the URL and `.baton/` excluded.
async fn init(git: &Git, dest: &Path) -> Result<(), GitError> {
    git.call(Some(dest), &["init", "-q", "--initial-branch=main"])
        .ok()
        .await?;
    git.call(Some(dest), &["remote", "add", "origin", git.url()])
        .ok()
        .await?;
    let exclude = dest.join(".git").join("info").join("exclude");
    let mut text = tokio::fs::read_to_string(&exclude)
        .await
        .unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("/{STATE_DIR}/\n"));
    if let Some(parent) = exclude.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| GitError::Transient(format!("cannot write {}: {e}", exclude.display())))?;
    }
    tokio::fs::write(&exclude, text)
        .await
        .map_err(|e| GitError::Transient(format!("cannot write {}: {e}", exclude.display())))
}
