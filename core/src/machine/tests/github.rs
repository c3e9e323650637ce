//! Progress reports to GitHub: each state once, the calls waiting for approval whole, the
//! result with its changes; nothing for runs without `github`.

use baton_proto::{GitHubThread, PreparedWorkspace};
use pretty_assertions::assert_eq;

use super::*;

fn reporting(require_approval: &[&str]) -> RunState {
    let spec = RunSpec {
        github: Some(GitHubThread {
            repo: "acme/parser".into(),
            number: 7,
            pull_request: false,
            head_sha: String::new(),
        }),
        ..spec(require_approval)
    };
    let mut s = RunState::new("gh-acme-parser-7", spec, T0).unwrap();
    s.on_workspace_prepared(
        PreparedWorkspace {
            snapshot: "a".repeat(64),
            commit: "c".repeat(40),
            base_branch: "main".into(),
            ..Default::default()
        },
        T0,
    );
    s
}

#[test]
fn each_state_is_reported_once_with_what_a_person_needs() {
    let mut s = reporting(&["shell"]);
    let step = s.next_step(T0);
    let first = s.progress_request(&step).expect("working is reported");
    assert_eq!(
        (first.check_status.as_str(), first.head_sha.as_str()),
        ("in_progress", "c".repeat(40).as_str())
    );
    assert_eq!(first.check_external_id, "gh-acme-parser-7/task-1");
    assert!(
        first
            .comment
            .ends_with("<!-- baton-run: gh-acme-parser-7 -->")
    );
    assert_eq!(
        s.progress_request(&step),
        None,
        "the same state is not reported twice"
    );
    s.on_progress_reported(baton_proto::ProgressReported {
        comment_id: 11,
        check_run_id: 22,
    });

    s.on_llm_response(
        reply(
            "",
            vec![call("c1", "shell", r#"{"command":"rm -rf build"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let step = s.next_step(T0);
    assert!(matches!(step, Step::AwaitApproval { .. }));
    let waiting = s.progress_request(&step).unwrap();
    assert_eq!((waiting.comment_id, waiting.check_run_id), (11, 22));
    assert!(
        waiting.comment.contains("`c1` **shell**"),
        "{}",
        waiting.comment
    );
    assert!(waiting.comment.contains(r#"{"command":"rm -rf build"}"#));
    assert!(waiting.comment.contains("/approve"));
    assert_eq!(waiting.check_status, "in_progress");
}

#[test]
fn a_run_without_a_github_thread_reports_nothing() {
    let mut s = RunState::new("r", spec(&[]), T0).unwrap();
    let step = s.next_step(T0);
    assert_eq!(s.progress_request(&step), None);
}

#[test]
fn a_run_is_queued_once_on_the_commit_serve_saw() {
    let spec = RunSpec {
        github: Some(GitHubThread {
            repo: "acme/parser".into(),
            number: 7,
            pull_request: false,
            head_sha: "d".repeat(40),
        }),
        ..spec(&[])
    };
    let mut s = RunState::new("gh-acme-parser-7", spec, T0).unwrap();
    let queued = s.progress_queued().expect("queued first");
    assert_eq!(
        (queued.check_status.as_str(), queued.head_sha.as_str()),
        ("queued", "d".repeat(40).as_str())
    );
    assert_eq!(s.progress_queued(), None, "once");
    s.on_progress_reported(baton_proto::ProgressReported {
        comment_id: 5,
        check_run_id: 6,
    });
    let step = s.next_step(T0);
    let working = s.progress_request(&step).unwrap();
    assert_eq!(
        (working.check_run_id, working.check_status.as_str()),
        (6, "in_progress"),
        "the queued check run goes on"
    );
}
