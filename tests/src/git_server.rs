//! Real git servers on loopback for the e2e tests: bare repositories in a private temp dir
//! ([`GitRepos`], [`BareRepo`]), served by the real `git daemon` over `git://`
//! ([`GitDaemon`]) and by the real `git http-backend` behind a token-checking HTTP server
//! ([`GitHttp`]). Both accept pushes.
//!
//! Layout: `repos.rs` (repositories, commits, and the isolated `git` command),
//! `daemon.rs` (`git daemon`), `http.rs` (`git http-backend` over CGI, Basic auth).
//!
//! ```ignore
//! let repos = GitRepos::new()?;
//! let repo = repos.create("acme/parser.git", &[("src/lib.rs", "pub fn f() {}\n")])?;
//! let daemon = GitDaemon::start(&repos)?;
//! let http = GitHttp::start(&repos, "s3cret")?;
//! // git clone daemon.url("acme/parser.git") / http.url("acme/parser.git") ...
//! assert_eq!(repo.commits("main")?.len(), 1);
//! ```

mod daemon;
mod http;
mod repos;

pub(crate) use repos::repo_name;

pub use daemon::{GIT_DAEMON_START_TIMEOUT, GitDaemon};
pub use http::{AcceptToken, GIT_HTTP_REALM, GitHttp};
pub use repos::{
    BareRepo, GIT_AUTHOR, GIT_DATE, GIT_ISOLATION_ENV, GitRepos, MAIN_BRANCH,
    TOKEN_CREDENTIAL_HELPER, TOKEN_ENV, git_command, run_git,
};
