//! git for a run's source and delivery: [`clone_into`] fetches a `--git` source into the run's
//! workspace (shallow when it can) at a branch, tag or commit; [`deliver`] commits a change set
//! on its base commit without a work tree and pushes it to a branch, then (`pr`) opens a pull
//! request through GitHub's REST API. Plain async functions over real `git` processes; the
//! Temporal activities that call them live with the worker's other activities.
//!
//! - `settings.rs`: [`GitSettings`] (`[git]` of the worker settings: identity, credentials by
//!   host (scoped to `repos` patterns; plain `http://` only to loopback with
//!   `allow_plain_http_on_loopback`), protected branches, `[git.github]`, timeout).
//! - `command.rs`: one git process (scrubbed environment, private `HOME`, timeout, process group
//!   killed on drop; the token only through a credential helper).
//! - `classify.rs`: git's stderr -> [`GitError::Unavailable`] / [`GitError::Transient`].
//! - `refs.rs`: `ls-remote --symref` listing and what a ref names (branch, tag, commit).
//! - `clone.rs`: [`clone_into`].
//! - `deliver.rs`: [`deliver`] (commit, branch name, push).
//! - `github.rs`: the pull request (find by head branch, else open one).
//! - `tests/`: against real git (`file://` bare repos, a `git daemon` on loopback, a loopback
//!   HTTP server recording the credentials it is sent) and an in-test stand-in of GitHub's
//!   pulls API.

mod classify;
mod clone;
mod command;
mod deliver;
mod github;
mod refs;
mod settings;
#[cfg(test)]
mod tests;

pub use clone::{Cloned, clone_into};
pub use deliver::deliver;
pub use settings::{GitCredential, GitHubSettings, GitSettings};

/// The repository a URL names, as patterns match it (`https://h/Acme/Tool.git` -> `acme/tool`).
pub(crate) fn repo_path_of(url: &str) -> String {
    settings::repo_path(url)
}

/// Whether `text` matches `pattern` (`*` within a component, `**` across).
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    settings::glob(pattern.as_bytes(), text.as_bytes())
}

/// The installation token of the GitHub App `app` for the repository of `url`, when the
/// settings use the app for it: the URL's credential says `github_app = true`, or (`pr`) a
/// pull request is to be opened and `[git.github]` names an app. Fetched (or taken from the
/// app's cache) per activity, never kept in a run's history.
pub async fn app_token(
    settings: &GitSettings,
    app: Option<&baton_github::App>,
    url: &str,
    pr: bool,
) -> Result<Option<String>, GitError> {
    let for_git = settings
        .credential_for(url)
        .is_some_and(|(_, credential)| credential.github_app);
    let for_pr = pr && settings.github.uses_app();
    if !(for_git || for_pr) {
        return Ok(None);
    }
    let Some(app) = app else {
        return Err(GitError::Unavailable(
            "the worker settings use a GitHub App ([git.github] app_id, or github_app = true), \
             but the worker has none: set [git.github] app_id and private_key_file"
                .into(),
        ));
    };
    let (owner, repo) = baton_github::owner_and_repo(url).ok_or_else(|| {
        GitError::Unavailable(format!(
            "cannot tell the GitHub owner and repository from {url}: the GitHub App's token is \
             made for one repository, named by a URL ending in /<owner>/<repo>"
        ))
    })?;
    match app.installation_token(&owner, &repo).await {
        Ok(token) => Ok(Some(token.token)),
        Err(e) if e.is_transient() => Err(GitError::Transient(e.to_string())),
        Err(e) => Err(GitError::Unavailable(e.to_string())),
    }
}

/// The worker's environment, with the app's installation token (when there is one) where a
/// credential of the app looks for its token.
pub fn credential_env<'a>(
    worker: &'a (dyn Fn(&str) -> Option<String> + Sync),
    app_token: Option<String>,
) -> impl Fn(&str) -> Option<String> + Sync + 'a {
    move |name: &str| {
        if name == settings::APP_TOKEN_VAR {
            app_token.clone()
        } else {
            worker(name)
        }
    }
}

/// Why a git operation failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GitError {
    /// Will not get better by retrying: no such repository, URL, ref or host; credentials
    /// missing or refused.
    #[error("{0}")]
    Unavailable(String),
    /// May get better: connection refused or reset, timeout, a server error.
    #[error("{0}")]
    Transient(String),
}

/// Whether `r` reads as a commit sha (7 to 40 hex digits) rather than a branch or tag name.
pub fn looks_like_sha(r: &str) -> bool {
    (7..=40).contains(&r.len()) && r.chars().all(|c| c.is_ascii_hexdigit())
}

impl GitSettings {
    /// The environment variables these settings name as holding tokens (to keep them from
    /// the commands tools run).
    pub fn secret_env_names(&self) -> Vec<String> {
        self.credentials
            .values()
            .map(|c| c.token_env.clone())
            .chain([
                self.github.token_env.clone(),
                self.github.private_key_env.clone(),
            ])
            .filter(|n| !n.is_empty())
            .collect()
    }
}
