//! Work in, results out: the workspace source, the change set and delivery.

use baton_proto::{
    Changes, Delivered, Delivery, GitSource, PreparedWorkspace, SnapshotSource, WorkspaceSource,
    workspace_source,
};
use pretty_assertions::assert_eq;

use super::*;

fn git_spec(deliver: &str) -> RunSpec {
    RunSpec {
        workspace: Some(WorkspaceSource {
            source: Some(workspace_source::Source::Git(GitSource {
                url: "git://127.0.0.1/acme/parser.git".into(),
                r#ref: "v1".into(),
            })),
        }),
        deliver: (!deliver.is_empty()).then(|| Delivery {
            mode: deliver.into(),
            ..Default::default()
        }),
        ..spec(&[])
    }
}

fn prepared() -> PreparedWorkspace {
    PreparedWorkspace {
        snapshot: "a".repeat(64),
        commit: "c".repeat(40),
        files: 3,
        base_branch: "main".into(),
        ..Default::default()
    }
}

/// A run that edits a file and answers.
fn edit_and_answer(s: &mut RunState) {
    edit_and_answer_from(s, &"a".repeat(64));
}

/// [`edit_and_answer`], the workspace starting at snapshot `base`.
fn edit_and_answer_from(s: &mut RunState, base: &str) {
    expect_llm(s);
    s.on_llm_response(
        reply(
            "",
            vec![call(
                "e1",
                "write_file",
                r#"{"path": "a.txt", "content": "x"}"#,
            )],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let requests = expect_tools(s);
    assert_eq!(requests[0].snapshot, base, "calls start from the source");
    s.on_tool_results(
        vec![ToolResult {
            snapshot: "b".repeat(64),
            ..ok_result("written")
        }],
        T0 + 1,
    );
    expect_llm(s);
    s.on_llm_response(
        reply("Fixed the parser.\n\nDetails.", vec![], FinishReason::Stop),
        T0 + 2,
    );
}

fn collected(patch: &str) -> Changes {
    Changes {
        files_changed: 1,
        insertions: 1,
        deletions: 0,
        base_commit: "c".repeat(40),
        patch: patch.into(),
        ..Default::default()
    }
}

#[test]
fn a_git_run_prepares_collects_delivers_and_finishes_with_all_of_it() {
    let mut s = RunState::new("run-1", git_spec("pr"), T0).unwrap();
    let request = s.prepare_request().expect("a source to prepare");
    assert!(matches!(
        request.source.and_then(|w| w.source),
        Some(workspace_source::Source::Git(g)) if g.r#ref == "v1"
    ));
    s.on_workspace_prepared(prepared(), T0);
    assert!(s.prepare_request().is_none(), "prepared once");
    assert_eq!(s.instructions_request().snapshot, "a".repeat(64));
    edit_and_answer(&mut s);

    let Step::CollectChanges(collect) = s.next_step(T0 + 3) else {
        panic!("the change set is collected first");
    };
    assert_eq!(collect.base_snapshot, "a".repeat(64));
    assert_eq!(collect.final_snapshot, "b".repeat(64));
    assert_eq!(collect.base_commit, "c".repeat(40));
    s.on_changes(collected("p".repeat(64).as_str()), T0 + 4);

    let Step::Deliver(deliver) = s.next_step(T0 + 5) else {
        panic!("then delivered");
    };
    assert_eq!(deliver.base_branch, "main");
    assert_eq!(deliver.message, "Fixed the parser.\n\nDetails.");
    assert_eq!(
        deliver.at_ms,
        T0 + 2,
        "the commit time is the run's end: a retry matches"
    );
    assert_eq!(deliver.git.unwrap().url, "git://127.0.0.1/acme/parser.git");
    s.on_delivered(
        Delivered {
            mode: "pr".into(),
            branch: "baton/run-1".into(),
            commit: "d".repeat(40),
            pull_request_url: "https://github.com/acme/parser/pull/1".into(),
            pull_request_number: 1,
            ..Default::default()
        },
        T0 + 6,
    );
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Completed);
    assert_eq!(result.changes.unwrap().files_changed, 1);
    assert_eq!(result.delivered.unwrap().pull_request_number, 1);
    assert!(s.events.iter().any(|e| matches!(&e.kind,
        Some(run_event::Kind::Note(n)) if n.contains("pull request https://github.com/acme/parser/pull/1"))));
}

#[test]
fn a_run_that_changed_nothing_needs_no_activity_and_delivers_nothing() {
    let mut s = RunState::new("run-1", git_spec("branch"), T0).unwrap();
    s.on_workspace_prepared(prepared(), T0);
    expect_llm(&mut s);
    s.on_llm_response(reply("Nothing to do.", vec![], FinishReason::Stop), T0);
    let result = expect_finish(&mut s);
    let changes = result.changes.unwrap();
    assert_eq!(changes.files_changed, 0);
    assert_eq!(changes.base_snapshot, changes.final_snapshot);
    assert!(result.delivered.unwrap().nothing_to_deliver);
}

#[test]
fn an_empty_change_set_is_not_delivered_and_a_failed_collection_is_said() {
    let mut s = RunState::new("run-1", git_spec("branch"), T0).unwrap();
    s.on_workspace_prepared(prepared(), T0);
    edit_and_answer(&mut s);
    assert!(matches!(s.next_step(T0), Step::CollectChanges(_)));
    s.on_changes_failed("the blob store is down", T0);
    let result = expect_finish(&mut s);
    assert_eq!(
        result.status(),
        StateName::Completed,
        "the run's result stands"
    );
    assert_eq!(result.changes.unwrap().error, "the blob store is down");
    let delivered = result.delivered.unwrap();
    assert!(
        delivered.error.contains("could not be collected"),
        "{}",
        delivered.error
    );
}

#[test]
fn a_failed_source_ends_the_run_before_any_turn() {
    let mut s = RunState::new("run-1", git_spec(""), T0).unwrap();
    s.on_workspace_failed("ref 'v9' not found in git://h/r", T0);
    assert!(s.prepare_request().is_none());
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::WorkspaceUnavailable);
    assert!(
        result.detail.contains("ref 'v9' not found"),
        "{}",
        result.detail
    );
    assert_eq!(result.changes.unwrap().files_changed, 0);
}

#[test]
fn a_run_without_a_source_diffs_against_the_empty_tree() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("e1", "write_file", r#"{"path": "a", "content": "x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("written")], T0);
    expect_llm(&mut s);
    s.on_llm_response(reply("done", vec![], FinishReason::Stop), T0);
    let Step::CollectChanges(collect) = s.next_step(T0) else {
        panic!("a run that wrote collects its changes");
    };
    assert_eq!(
        collect.base_snapshot, "",
        "no snapshot at the start: the empty tree"
    );
}

#[test]
fn a_run_without_a_source_diffs_against_its_workspace_at_the_start() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    s.on_instructions(
        Some(baton_proto::WorkspaceInstructions {
            snapshot: "e".repeat(64),
            ..Default::default()
        }),
        T0,
    );
    assert!(
        s.prepare_request().is_none(),
        "nothing to prepare without a source"
    );
    assert_eq!(s.instructions_request().snapshot, "e".repeat(64));
    edit_and_answer_from(&mut s, &"e".repeat(64));
    let Step::CollectChanges(collect) = s.next_step(T0) else {
        panic!("a run that wrote collects its changes");
    };
    assert_eq!(collect.base_snapshot, "e".repeat(64));
    assert_eq!(collect.final_snapshot, "b".repeat(64));
}

#[test]
fn delivery_needs_a_git_repository_and_a_known_mode() {
    let upload = |mode: &str| RunSpec {
        workspace: Some(WorkspaceSource {
            source: Some(workspace_source::Source::Snapshot(SnapshotSource {
                id: "a".repeat(64),
                ..Default::default()
            })),
        }),
        deliver: Some(Delivery {
            mode: mode.into(),
            ..Default::default()
        }),
        ..spec(&[])
    };
    let err = RunState::new("run-1", upload("pr"), T0).unwrap_err();
    assert!(
        matches!(&err, StateError::InvalidWorkspace { detail } if detail.contains("--git URL")),
        "{err}"
    );
    let err = RunState::new("run-1", git_spec("merge"), T0).unwrap_err();
    assert!(
        err.to_string().contains("unknown delivery mode 'merge'"),
        "{err}"
    );
    assert!(RunState::new("run-1", git_spec("branch"), T0).is_ok());
}

const SCHEMA: &str =
    r#"{"type":"object","required":["fixed"],"properties":{"fixed":{"type":"boolean"}}}"#;

fn schema_spec() -> RunSpec {
    RunSpec {
        output_schema: SCHEMA.into(),
        ..spec(&[])
    }
}

#[test]
fn an_answer_matching_the_schema_is_the_output_and_the_prompt_asks_for_it() {
    let mut s = RunState::new("run-1", schema_spec(), T0).unwrap();
    assert!(s.system_prompt().contains(SCHEMA));
    expect_llm(&mut s);
    s.on_llm_response(reply(r#"{"fixed": true}"#, vec![], FinishReason::Stop), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Completed);
    assert_eq!(result.output, r#"{"fixed":true}"#);
}

#[test]
fn a_mismatch_gets_one_corrective_turn_then_fails_with_the_reason() {
    let mut s = RunState::new("run-1", schema_spec(), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(reply("All fixed!", vec![], FinishReason::Stop), T0);
    let request = expect_llm(&mut s);
    let last = request.conversation.last().unwrap();
    assert!(
        matches!(&last.kind, Some(item::Kind::User(u)) if u.text.contains("does not match the required JSON Schema")),
        "{last:?}"
    );
    s.on_llm_response(reply(r#"{"fixed": "yes"}"#, vec![], FinishReason::Stop), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::OutputInvalid);
    assert!(result.detail.contains("/fixed"), "{}", result.detail);
    assert_eq!(result.output, "");

    let mut fixed = RunState::new("run-2", schema_spec(), T0).unwrap();
    expect_llm(&mut fixed);
    fixed.on_llm_response(reply("All fixed!", vec![], FinishReason::Stop), T0);
    expect_llm(&mut fixed);
    fixed.on_llm_response(reply(r#"{"fixed": true}"#, vec![], FinishReason::Stop), T0);
    assert_eq!(expect_finish(&mut fixed).status(), StateName::Completed);
}

#[test]
fn a_bad_schema_is_refused_at_the_start() {
    let spec = RunSpec {
        output_schema: r#"{"type": 5}"#.into(),
        ..spec(&[])
    };
    let err = RunState::new("run-1", spec, T0).unwrap_err();
    assert!(err.to_string().contains("not a valid JSON Schema"), "{err}");
}
