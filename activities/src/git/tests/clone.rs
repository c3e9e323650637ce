//! `clone_into` against real git.

use std::path::Path;

use baton_proto::GitSource;
use pretty_assertions::assert_eq;
use tempfile::TempDir;

use super::super::command::Git;
use super::super::{Cloned, GitCredential, GitError, clone_into};
use super::{Daemon, Origin, free_port, git, git_ok, no_env, settings};

fn source(url: &str, r#ref: &str) -> GitSource {
    GitSource {
        url: url.into(),
        r#ref: r#ref.into(),
    }
}

/// A workspace holding local state and a stray file from an earlier attempt.
fn workspace() -> TempDir {
    let dest = TempDir::new().unwrap();
    std::fs::create_dir_all(dest.path().join(".baton/cache")).unwrap();
    std::fs::write(dest.path().join(".baton/cache/state"), "kept").unwrap();
    std::fs::write(dest.path().join("stray.txt"), "old").unwrap();
    dest
}

async fn clone(url: &str, r#ref: &str, dest: &Path) -> Result<Cloned, GitError> {
    clone_into(&settings(), &source(url, r#ref), dest, &no_env).await
}

fn is_detached(dest: &Path) -> bool {
    !git_ok(dest, &["symbolic-ref", "-q", "HEAD"])
}

#[tokio::test]
async fn default_branch_keeps_the_state_dir_and_a_retry_starts_clean() {
    let origin = Origin::new();
    let dest = workspace();
    let cloned = clone(&origin.url(), "", dest.path()).await.unwrap();
    assert_eq!(
        cloned,
        Cloned {
            commit: origin.second.clone(),
            base_branch: "main".into()
        }
    );
    let check = |dest: &Path| {
        assert_eq!(
            std::fs::read_to_string(dest.join("a.txt")).unwrap(),
            "one\ntwo\n"
        );
        assert_eq!(
            std::fs::read_to_string(dest.join(".baton/cache/state")).unwrap(),
            "kept"
        );
        assert!(!dest.join("stray.txt").exists());
        assert_eq!(git(dest, &["rev-parse", "--abbrev-ref", "HEAD"]), "main");
        assert_eq!(git(dest, &["status", "--porcelain"]), "");
        assert_eq!(git(dest, &["remote", "get-url", "origin"]), origin.url());
        // Shallow: only the commit asked for.
        assert_eq!(git(dest, &["rev-list", "--count", "HEAD"]), "1");
    };
    check(dest.path());
    // A second attempt over the first (or over a half-done one) gives the same workspace.
    std::fs::write(dest.path().join("stray.txt"), "again").unwrap();
    std::fs::write(dest.path().join(".git/HEAD"), "garbage").unwrap();
    let again = clone(&origin.url(), "", dest.path()).await.unwrap();
    assert_eq!(again, cloned);
    check(dest.path());
}

#[tokio::test]
async fn branch_annotated_tag_and_sha_over_git_daemon() {
    let origin = Origin::new();
    let daemon = Daemon::start(origin.root.path());
    let url = daemon.url("acme/tool.git");

    let dest = workspace();
    let cloned = clone(&url, "dev", dest.path()).await.unwrap();
    assert_eq!(cloned.commit, origin.dev);
    assert_eq!(cloned.base_branch, "dev");
    assert_eq!(
        git(dest.path(), &["rev-parse", "--abbrev-ref", "HEAD"]),
        "dev"
    );
    assert!(dest.path().join("dev.txt").exists());

    let dest = workspace();
    let cloned = clone(&url, "v1", dest.path()).await.unwrap();
    assert_eq!(
        cloned.commit, origin.first,
        "the tag is peeled to its commit"
    );
    assert_eq!(cloned.base_branch, "main");
    assert!(is_detached(dest.path()));
    assert_eq!(
        std::fs::read_to_string(dest.path().join("a.txt")).unwrap(),
        "one\n"
    );

    let dest = workspace();
    let cloned = clone(&url, &origin.first, dest.path()).await.unwrap();
    assert_eq!(cloned.commit, origin.first);
    assert_eq!(cloned.base_branch, "main");
    assert!(is_detached(dest.path()));
    assert_eq!(git(dest.path(), &["rev-parse", "HEAD"]), origin.first);
}

#[tokio::test]
async fn an_abbreviated_sha_nothing_advertises_takes_a_full_fetch() {
    let origin = Origin::new();
    let dest = workspace();
    let short = &origin.first[..9];
    let cloned = clone(&origin.url(), short, dest.path()).await.unwrap();
    assert_eq!(cloned.commit, origin.first);
    assert!(is_detached(dest.path()));
    assert!(
        dest.path().join(".baton/cache/state").exists(),
        "state kept"
    );
}

#[tokio::test]
async fn missing_repository_ref_and_commit_are_unavailable_with_clear_words() {
    let origin = Origin::new();
    let dest = workspace();
    let missing = format!("file://{}/nope.git", origin.root.path().display());
    let err = clone(&missing, "", dest.path()).await.unwrap_err();
    assert!(
        matches!(&err, GitError::Unavailable(m) if m.contains("check the URL") && m.contains(&missing)),
        "{err:?}"
    );

    let daemon = Daemon::start(origin.root.path());
    let err = clone(&daemon.url("acme/nope.git"), "", dest.path())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitError::Unavailable(m) if m.contains("check the URL")),
        "{err:?}"
    );

    let err = clone(&origin.url(), "v9", dest.path()).await.unwrap_err();
    assert_eq!(
        err,
        GitError::Unavailable(format!(
            "ref 'v9' not found in {}; it has branches dev, main and tags v1",
            origin.url()
        ))
    );

    let err = clone(&origin.url(), "deadbeef", dest.path())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        GitError::Unavailable(format!(
            "commit deadbeef not found in {} (none of its branches or tags has it): check the sha",
            origin.url()
        ))
    );
    assert_eq!(
        std::fs::read_to_string(dest.path().join(".baton/cache/state")).unwrap(),
        "kept"
    );
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let dest = workspace();
    let url = format!("git://127.0.0.1:{}/acme/tool.git", free_port());
    let err = clone(&url, "", dest.path()).await.unwrap_err();
    assert!(
        matches!(&err, GitError::Transient(m) if m.contains("onnection refused")),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_option_for_a_url_is_refused() {
    let dest = workspace();
    let err = clone("--upload-pack=touch /tmp/x", "", dest.path())
        .await
        .unwrap_err();
    assert!(matches!(&err, GitError::Unavailable(_)), "{err:?}");
}

const TOKEN: &str = "tok-5ecret-f00";

fn with_token(host: &str) -> super::super::GitSettings {
    let mut settings = settings();
    settings.credentials.insert(
        host.into(),
        GitCredential {
            token_env: "BATON_TEST_GIT_TOKEN".into(),
            github_app: false,
            username: "x-access-token".into(),
            repos: Vec::new(),
            allow_plain_http_on_loopback: false,
        },
    );
    settings
}

fn token_env(name: &str) -> Option<String> {
    (name == "BATON_TEST_GIT_TOKEN").then(|| TOKEN.to_owned())
}

#[tokio::test]
async fn a_missing_token_variable_is_named() {
    let dest = workspace();
    let err = clone_into(
        &with_token("127.0.0.1"),
        &source("https://127.0.0.1:1/acme/tool.git", ""),
        dest.path(),
        &no_env,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        GitError::Unavailable(
            "git credentials for 127.0.0.1: environment variable BATON_TEST_GIT_TOKEN is not \
             set on the worker"
                .into()
        )
    );
}

/// `git credential fill` for `host`: what the configured helpers answer.
async fn fill(git: &Git, host: &str) -> super::super::command::Output {
    let input = format!("protocol=https\nhost={host}\n\n");
    git.call(None, &["credential", "fill"])
        .stdin(input.as_bytes())
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_token_reaches_git_only_through_the_helper_for_its_host() {
    let settings = with_token("git.example");
    let git = Git::for_url(&settings, "https://git.example/acme/tool.git", &token_env).unwrap();
    let filled = fill(&git, "git.example").await;
    assert!(filled.success, "{}", filled.stderr);
    assert!(
        filled.stdout.contains("username=x-access-token\n"),
        "{}",
        filled.stdout
    );
    assert!(
        filled.stdout.contains("password=***\n"),
        "scrubbed: {}",
        filled.stdout
    );
    // Another host (a redirect, say) gets nothing: git then finds no password to use.
    let other = fill(&git, "evil.example").await;
    assert!(!other.success);
    assert!(!other.stdout.contains(TOKEN) && !other.stderr.contains(TOKEN));
}

#[tokio::test]
async fn the_token_is_not_in_the_clone_nor_in_errors() {
    let origin = Origin::new();
    let daemon = Daemon::start(origin.root.path());
    let settings = with_token("127.0.0.1");
    let dest = workspace();
    clone_into(
        &settings,
        &source(&daemon.url("acme/tool.git"), "main"),
        dest.path(),
        &token_env,
    )
    .await
    .unwrap();
    let config = std::fs::read_to_string(dest.path().join(".git/config")).unwrap();
    assert!(
        !config.contains(TOKEN) && !config.contains("credential"),
        "{config}"
    );
    let err = clone_into(
        &settings,
        &source(&daemon.url("acme/nope.git"), ""),
        dest.path(),
        &token_env,
    )
    .await
    .unwrap_err();
    assert!(!err.to_string().contains(TOKEN), "{err}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_as_transient() {
    // Accepts connections and says nothing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut settings = settings();
    settings.timeout_seconds = 1;
    let dest = workspace();
    let started = std::time::Instant::now();
    let err = clone_into(
        &settings,
        &source(&format!("git://127.0.0.1:{port}/acme/tool.git"), ""),
        dest.path(),
        &no_env,
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(
        matches!(&err, GitError::Transient(m) if m.contains("timed out after 1 s")),
        "{err:?}"
    );
    drop(listener);
}

#[tokio::test]
async fn a_url_with_a_password_is_refused_without_echoing_it() {
    let dest = workspace();
    let err = clone("https://user:hunter2@git.example/a.git", "", dest.path())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitError::Unavailable(m) if m.contains("carries a password") && !m.contains("hunter2")),
        "{err:?}"
    );
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
        })
        .count()
}

#[tokio::test]
async fn dropping_the_call_kills_git() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "git://127.0.0.1:{}/dropped/tool.git",
        listener.local_addr().unwrap().port()
    );
    let dest = workspace();
    let call = clone(&url, "", dest.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    tokio::select! {
        result = call => panic!("the clone ended: {result:?}"),
        () = async {
            while processes_with(&url) == 0 {
                assert!(std::time::Instant::now() < deadline, "git never started");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        } => {}
    }
    // The clone's future is dropped here.
    while processes_with(&url) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "git outlived its call"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(listener);
}
