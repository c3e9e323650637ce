//! `deliver` (branch mode) against real git: a bare origin over `file://` and `git daemon`.

use std::path::Path;

use baton_proto::{Changes, DeliverRequest, Delivered, Delivery, GitSource};
use pretty_assertions::assert_eq;
use tempfile::TempDir;

use super::super::{GitError, deliver};
use super::{Daemon, Origin, free_port, git, no_env, settings};

/// 2026-01-02T03:04:05Z.
const AT_MS: i64 = 1_767_323_045_678;

pub(super) fn request(url: &str, base: &str, mode: &str, branch: &str) -> DeliverRequest {
    DeliverRequest {
        delivery: Some(Delivery {
            mode: mode.into(),
            branch: branch.into(),
            draft: false,
            onto_source: false,
        }),
        git: Some(GitSource {
            url: url.into(),
            r#ref: String::new(),
        }),
        changes: Some(Changes {
            base_commit: base.into(),
            ..Changes::default()
        }),
        base_branch: "main".into(),
        message: "Fix the parser so that the failing test passes\n\nIt was an off-by-one.".into(),
        at_ms: AT_MS,
    }
}

async fn run(request: &DeliverRequest, patch: &[u8], scratch: &Path) -> Delivered {
    deliver(
        &settings(),
        request,
        patch,
        "run-1",
        "the body",
        scratch,
        &no_env,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn twice_with_the_same_inputs_makes_one_commit_and_pushes_once() {
    let origin = Origin::new();
    origin.hook(
        "post-receive",
        &format!("cat >> {}/pushes.log", origin.root.path().display()),
    );
    let daemon = Daemon::start(origin.root.path());
    let request = request(&daemon.url("acme/tool.git"), &origin.first, "branch", "");
    let patch = origin.patch();
    let scratch = TempDir::new().unwrap();

    let delivered = run(&request, &patch, &scratch.path().join("one")).await;
    assert_eq!(delivered.error, "");
    assert_eq!(delivered.mode, "branch");
    assert_eq!(delivered.branch, "baton/run-1");
    assert_eq!(delivered.commit.len(), 40);
    assert!(!scratch.path().join("one").exists(), "scratch removed");

    let bare = origin.bare();
    let commit = &delivered.commit;
    assert_eq!(
        git(&bare, &["rev-parse", "refs/heads/baton/run-1"]),
        *commit
    );
    assert_eq!(
        git(&bare, &["rev-parse", &format!("{commit}^")]),
        origin.first
    );
    assert_eq!(
        git(&bare, &["show", &format!("{commit}:a.txt")]),
        "one\nfixed"
    );
    assert_eq!(
        git(&bare, &["ls-tree", "--name-only", commit]),
        "a.txt\nblob.bin"
    );
    assert_eq!(
        blob(&bare, &format!("{commit}:blob.bin")),
        vec![0u8, 159, 146, 150, 0, 1, 2]
    );
    assert_eq!(
        git(
            &bare,
            &["log", "-1", "--format=%an <%ae> %at|%cn <%ce> %ct", commit]
        ),
        "baton <baton@localhost> 1767323045|baton <baton@localhost> 1767323045"
    );
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%B", commit]),
        "Fix the parser so that the failing test passes\n\nFix the parser so that the \
         failing test passes\n\nIt was an off-by-one.\n\nBaton-Run: run-1"
    );

    let again = run(&request, &patch, &scratch.path().join("two")).await;
    assert_eq!(again, delivered, "the same commit");
    assert_eq!(
        git(
            &bare,
            &[
                "rev-list",
                "--count",
                &format!("{}..baton/run-1", origin.first)
            ]
        ),
        "1"
    );
    let pushes = std::fs::read_to_string(origin.root.path().join("pushes.log")).unwrap();
    assert_eq!(pushes.lines().count(), 1, "pushed once: {pushes}");
}

#[tokio::test]
async fn a_declining_hook_comes_back_as_the_error_with_its_words() {
    let origin = Origin::new();
    origin.hook(
        "pre-receive",
        "echo 'pushes are frozen until Monday' >&2; exit 1",
    );
    let scratch = TempDir::new().unwrap();
    let delivered = run(
        &request(&origin.url(), &origin.first, "branch", "fix/parser"),
        &origin.patch(),
        scratch.path(),
    )
    .await;
    assert_eq!(delivered.branch, "fix/parser");
    assert_eq!(
        delivered.error,
        "the git server refused the push to branch fix/parser: pre-receive hook declined; it \
         said: pushes are frozen until Monday"
    );
    assert!(!git_has_branch(&origin.bare(), "fix/parser"));
}

#[tokio::test]
async fn a_patch_that_does_not_apply_and_a_branch_elsewhere_are_errors() {
    let origin = Origin::new();
    let scratch = TempDir::new().unwrap();
    // The patch is against `first`; `dev` has other content in none of its files, but
    // `second` changed a.txt.
    let delivered = run(
        &request(&origin.url(), &origin.second, "branch", ""),
        &origin.patch(),
        scratch.path(),
    )
    .await;
    assert!(
        delivered.error.starts_with(&format!(
            "the change set does not apply on base commit {}: ",
            origin.second
        )),
        "{}",
        delivered.error
    );
    assert!(
        delivered
            .error
            .ends_with("patch failed: a.txt:1; a.txt: patch does not apply"),
        "{}",
        delivered.error
    );

    // `dev` exists at a commit ours does not build on: refused, not overwritten.
    let delivered = run(
        &request(&origin.url(), &origin.first, "branch", "dev"),
        &origin.patch(),
        scratch.path(),
    )
    .await;
    assert!(
        delivered
            .error
            .starts_with("the git server refused the push to branch dev: it already exists at a commit this change set does not build on"),
        "{}",
        delivered.error
    );
    assert_eq!(git(&origin.bare(), &["rev-parse", "dev"]), origin.dev);
}

/// `main`, `master`, the run's source ref and base branch and the
/// worker's `protected_branches` are refused before anything is pushed, unless the worker's
/// `[git] deliver_to_protected_branches` allows them.
#[tokio::test]
async fn protected_branches_are_refused_unless_the_worker_allows_them() {
    let origin = Origin::new();
    let log = origin.root.path().join("pushes.log");
    origin.hook("post-receive", &format!("cat >> {}", log.display()));
    let daemon = Daemon::start(origin.root.path());
    let url = daemon.url("acme/tool.git");
    let patch = origin.patch();
    let scratch = TempDir::new().unwrap();
    let mut settings = settings();
    settings.protected_branches = vec!["release/*".into()];
    let deliver_to = |branch: &str, source_ref: &str, base: &str| {
        let mut wanted = request(&url, &origin.first, "branch", branch);
        wanted.git.as_mut().unwrap().r#ref = source_ref.into();
        wanted.base_branch = base.into();
        wanted
    };
    let advice = "deliver to another branch (--branch NAME, or none for baton/<run id>), or \
                  let runs deliver there: deliver_to_protected_branches = true in the worker's \
                  [git] settings";
    for (wanted, branch, why) in [
        (
            deliver_to("main", "", "main"),
            "main",
            "main and master always are",
        ),
        (
            deliver_to("MASTER", "", "main"),
            "MASTER",
            "main and master always are",
        ),
        (
            deliver_to("dev", "refs/heads/dev", "dev"),
            "dev",
            "it is the run's source ref",
        ),
        (
            deliver_to("trunk", "v1", "trunk"),
            "trunk",
            "it is the run's base branch",
        ),
        (
            deliver_to("release/1.0", "", "main"),
            "release/1.0",
            "it matches the worker's [git] protected_branches (release/*)",
        ),
    ] {
        let delivered = deliver(
            &settings,
            &wanted,
            &patch,
            "run-1",
            "",
            &scratch.path().join("s"),
            &no_env,
        )
        .await
        .unwrap();
        assert_eq!(
            delivered.error,
            format!("refusing to deliver to branch {branch}: it is protected ({why}); {advice}")
        );
        assert_eq!(delivered.commit, "", "nothing was committed");
    }
    assert!(!log.exists(), "something was pushed");
    assert_eq!(git(&origin.bare(), &["rev-parse", "main"]), origin.second);

    settings.deliver_to_protected_branches = true;
    let delivered = deliver(
        &settings,
        &deliver_to("master", "", "main"),
        &patch,
        "run-1",
        "",
        &scratch.path().join("s"),
        &no_env,
    )
    .await
    .unwrap();
    assert_eq!(delivered.error, "");
    assert_eq!(
        git(&origin.bare(), &["rev-parse", "master"]),
        delivered.commit
    );
}

#[tokio::test]
async fn nothing_changed_means_nothing_to_deliver_and_no_server_is_needed() {
    let scratch = TempDir::new().unwrap();
    let url = format!("git://127.0.0.1:{}/acme/tool.git", free_port());
    let delivered = run(&request(&url, "abc", "branch", ""), b"", scratch.path()).await;
    assert!(delivered.nothing_to_deliver);
    assert_eq!(delivered.error, "");
}

#[tokio::test]
async fn an_unreachable_server_is_transient() {
    let scratch = TempDir::new().unwrap();
    let url = format!("git://127.0.0.1:{}/acme/tool.git", free_port());
    let origin = Origin::new();
    let err = deliver(
        &settings(),
        &request(&url, &origin.first, "branch", ""),
        &origin.patch(),
        "run-1",
        "",
        scratch.path(),
        &no_env,
    )
    .await
    .unwrap_err();
    assert!(matches!(&err, GitError::Transient(_)), "{err:?}");
}

fn git_has_branch(bare: &Path, branch: &str) -> bool {
    super::git_ok(
        bare,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ],
    )
}

/// The bytes of a blob.
fn blob(bare: &Path, spec: &str) -> Vec<u8> {
    let output = std::process::Command::new("git")
        .args(["cat-file", "blob", spec])
        .current_dir(bare)
        .output()
        .unwrap();
    assert!(output.status.success());
    output.stdout
}
