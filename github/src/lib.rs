//! GitHub for baton: the credentials runs push and comment with, the webhooks `baton serve`
//! takes, and the REST calls both make.
//!
//! - [`app`]: a GitHub App's JWT (RS256) and installation tokens scoped to one repository,
//!   cached until shortly before expiry; [`verify_jwt`] is what a stand-in checks.
//! - [`rest`]: [`GitHub`], the REST calls (permission, repository, pull request, comments)
//!   with [`Auth`] (a token, or the app).
//! - [`signature`]: `X-Hub-Signature-256`, checked in constant time.
//! - [`webhook`]: the events read from deliveries.
//! - [`error`]: [`GitHubError`], refused or transient.

pub mod app;
pub mod error;
pub mod rest;
pub mod signature;
pub mod webhook;

pub use app::{App, InstallationToken, JwtClaims, KeyError, public_key_of, verify_jwt};
pub use error::GitHubError;
pub use rest::{
    Auth, CheckRun, Comment, GitHub, IssueComment, Permission, PullRequest, Repository,
};
pub use signature::SignatureError;
pub use webhook::Event;

/// The last two path components of a git URL, `.git` stripped (`https://h/o/r.git`,
/// `git@h:o/r.git`).
pub fn owner_and_repo(url: &str) -> Option<(String, String)> {
    let mut parts = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .filter(|part| !part.is_empty());
    let repo = parts.next()?;
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    let owner = parts.next()?;
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    (valid(owner) && valid(repo)).then(|| (owner.to_owned(), repo.to_owned()))
}
