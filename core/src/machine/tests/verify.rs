//! The verification gate: the answer waits for the run's checks; a failure goes back to the
//! model for a bounded number of rounds; delivery only after a pass.

use baton_proto::{Verification, workspace_source};
use pretty_assertions::assert_eq;

use super::*;

fn verified_spec(commands: &[&str], attempts: u32) -> RunSpec {
    RunSpec {
        verify: commands.iter().map(|c| (*c).to_owned()).collect(),
        verify_attempts: attempts,
        ..spec(&[])
    }
}

fn check(command: &str, exit_code: i32, tail: &str) -> Verification {
    Verification {
        command: command.into(),
        exit_code,
        duration_ms: 1_500,
        output_tail: tail.into(),
        status: format!("exit code: {exit_code}"),
        ..Default::default()
    }
}

fn expect_verify(s: &mut RunState) -> baton_proto::VerifyRequest {
    match s.next_step(T0) {
        Step::Verify(request) => request,
        other => panic!("expected a verification, got {other:?}"),
    }
}

fn answer(s: &mut RunState, text: &str) {
    expect_llm(s);
    s.on_llm_response(reply(text, vec![], FinishReason::Stop), T0);
}

/// One model turn that writes a file; the tool leaves the workspace at `snapshot`.
fn write_a_file(s: &mut RunState, snapshot: &str) {
    expect_llm(s);
    s.on_llm_response(
        reply(
            "",
            vec![call("w1", "write_file", r#"{"path":"a","content":"b"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(s);
    s.on_tool_results(
        vec![ToolResult {
            snapshot: snapshot.to_owned(),
            ..ok_result("ok")
        }],
        T0,
    );
}

#[test]
fn an_answer_waits_for_every_check_and_completes_with_the_evidence() {
    let mut s = RunState::new(
        "run-1",
        verified_spec(&["cargo build", "cargo test"], 0),
        T0,
    )
    .unwrap();
    answer(&mut s, "Fixed.");
    assert_eq!(s.status().state(), StateName::Verifying);
    let first = expect_verify(&mut s);
    assert_eq!(
        (first.command.as_str(), first.round, first.index),
        ("cargo build", 1, 1)
    );
    assert_eq!(first.timeout_seconds, DEFAULT_TOOL_TIMEOUT_SECONDS);
    // Asked again before the outcome (a replayed loop): the same step, one started event.
    assert_eq!(expect_verify(&mut s), first);
    s.on_verified(check("cargo build", 0, "Finished"), T0);
    let second = expect_verify(&mut s);
    assert_eq!((second.command.as_str(), second.index), ("cargo test", 2));
    s.on_verified(check("cargo test", 0, "test result: ok. 3 passed"), T0);

    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::Completed);
    assert_eq!(result.answer, "Fixed.");
    assert_eq!(result.verification.len(), 2);
    assert_eq!(
        result.verification[1].output_tail,
        "test result: ok. 3 passed"
    );
    assert!(result.verification.iter().all(|v| v.round == 1));
    let started = s
        .events
        .iter()
        .filter(|e| matches!(e.kind, Some(run_event::Kind::VerificationStarted(_))))
        .count();
    assert_eq!(started, 2, "one verification_started per command");
}

#[test]
fn a_failure_goes_back_to_the_model_and_the_last_round_ends_the_run() {
    let mut s =
        RunState::new("run-1", verified_spec(&["npm test", "npm run lint"], 2), T0).unwrap();
    answer(&mut s, "Done, tests pass.");
    expect_verify(&mut s);
    s.on_verified(
        check("npm test", 1, "1 failing\n  parse() returns null"),
        T0,
    );
    // The model is told, with the command, the exit code and the output's end.
    let request = expect_llm(&mut s);
    let told = request
        .history
        .unwrap()
        .added
        .iter()
        .rev()
        .find_map(|i| match &i.kind {
            Some(item::Kind::User(u)) => Some(u.clone()),
            _ => None,
        })
        .unwrap();
    assert!(told.synthetic);
    for needle in [
        "`npm test`",
        "exit code: 1",
        "parse() returns null",
        "round 1 of 2",
    ] {
        assert!(
            told.text.contains(needle),
            "{needle} missing from {}",
            told.text
        );
    }
    s.on_llm_response(reply("Fixed for real.", vec![], FinishReason::Stop), T0);
    let again = expect_verify(&mut s);
    assert_eq!(
        (again.round, again.index),
        (2, 1),
        "round 2 starts from the first command"
    );
    s.on_verified(check("npm test", 0, "ok"), T0);
    s.on_verified(check("npm run lint", 2, "lint: 4 problems"), T0);

    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Failed);
    assert_eq!(result.reason(), TerminationReason::VerificationFailed);
    assert!(
        result.detail.contains("round 2 of 2") && result.detail.contains("npm run lint"),
        "{}",
        result.detail
    );
    assert_eq!(result.verification.len(), 2, "the last round's results");
    assert_eq!(result.verification[1].exit_code, 2);
    assert_eq!(result.turns, 2);
}

#[test]
fn one_attempt_ends_at_the_first_failure_and_a_timeout_is_a_failure() {
    let mut s = RunState::new("run-1", verified_spec(&["make check"], 1), T0).unwrap();
    answer(&mut s, "Done.");
    expect_verify(&mut s);
    s.on_verified(
        Verification {
            timed_out: true,
            exit_code: -1,
            status: "timed out after 600 s".into(),
            ..check("make check", -1, "")
        },
        T0,
    );
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::VerificationFailed);
    assert!(result.detail.contains("timed out"), "{}", result.detail);
}

#[test]
fn a_check_that_cannot_run_ends_the_run_unverified() {
    let mut s = RunState::new("run-1", verified_spec(&["cargo test"], 0), T0).unwrap();
    answer(&mut s, "Done.");
    expect_verify(&mut s);
    s.on_verify_failed("cannot restore the workspace: blob missing", T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::VerificationFailed);
    assert!(
        result.detail.contains("could not be verified"),
        "{}",
        result.detail
    );
}

#[test]
fn checks_run_on_the_latest_snapshot() {
    let mut s = RunState::new("run-1", verified_spec(&["pytest"], 0), T0).unwrap();
    write_a_file(&mut s, &"f".repeat(64));
    answer(&mut s, "Done.");
    assert_eq!(expect_verify(&mut s).snapshot, "f".repeat(64));
}

#[test]
fn a_run_that_failed_verification_is_not_delivered_but_its_changes_are_collected() {
    let spec = RunSpec {
        workspace: Some(baton_proto::WorkspaceSource {
            source: Some(workspace_source::Source::Git(baton_proto::GitSource {
                url: "git://127.0.0.1/acme/parser.git".into(),
                r#ref: String::new(),
            })),
        }),
        deliver: Some(baton_proto::Delivery {
            mode: "branch".into(),
            ..Default::default()
        }),
        ..verified_spec(&["cargo test"], 1)
    };
    for exit_code in [0, 101] {
        let mut s = RunState::new("run-1", spec.clone(), T0).unwrap();
        s.on_workspace_prepared(
            baton_proto::PreparedWorkspace {
                snapshot: "a".repeat(64),
                commit: "c".repeat(40),
                files: 1,
                base_branch: "main".into(),
                ..Default::default()
            },
            T0,
        );
        write_a_file(&mut s, &"b".repeat(64));
        answer(&mut s, "Done.");
        expect_verify(&mut s);
        s.on_verified(check("cargo test", exit_code, "..."), T0);
        let Step::CollectChanges(_) = s.next_step(T0) else {
            panic!("the change set is collected either way");
        };
        s.on_changes(
            baton_proto::Changes {
                files_changed: 1,
                base_commit: "c".repeat(40),
                patch: "p".repeat(64),
                ..Default::default()
            },
            T0,
        );
        match s.next_step(T0) {
            Step::Deliver(_) => assert_eq!(exit_code, 0, "delivered only after a pass"),
            Step::Finish(result) => {
                assert_eq!(exit_code, 101);
                assert_eq!(result.reason(), TerminationReason::VerificationFailed);
                let delivered = result.delivered.unwrap();
                assert!(
                    delivered.error.contains("verification did not pass"),
                    "{}",
                    delivered.error
                );
                assert_eq!(result.changes.unwrap().patch, "p".repeat(64));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_verification_result_outside_verifying_is_a_note() {
    let mut s = RunState::new("run-1", verified_spec(&["true"], 0), T0).unwrap();
    s.on_verified(check("true", 0, ""), T0);
    s.on_verify_failed("x", T0);
    assert_eq!(s.status().state(), StateName::Thinking);
    let notes: Vec<_> = s
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(run_event::Kind::Note(n)) if n.contains("ignored") => Some(n.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
}

#[test]
fn bad_verification_specs_are_refused_with_what_to_do() {
    let refused = |spec: RunSpec| RunState::new("run-1", spec, T0).unwrap_err().to_string();
    assert!(refused(verified_spec(&["  "], 0)).contains("command 1 is empty"));
    assert!(refused(verified_spec(&["true"], 11)).contains("--verify-attempts 11"));
    let many: Vec<String> = (0..40).map(|i| format!("test {i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(refused(verified_spec(&many, 0)).contains("at most 32"));
}

#[test]
fn a_verifying_run_survives_a_checkpoint() {
    let mut s = RunState::new("run-1", verified_spec(&["a", "b"], 0), T0).unwrap();
    answer(&mut s, "Done.");
    expect_verify(&mut s);
    s.on_verified(check("a", 0, ""), T0);
    let spec = s.spec.clone();
    let resumed = RunState::resume("run-1", spec, &s.checkpoint().unwrap()).unwrap();
    let mut resumed = resumed;
    assert_eq!(expect_verify(&mut resumed).command, "b");
}
