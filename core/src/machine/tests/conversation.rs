//! Conversations: a run that answered waits for the next message, which becomes its next
//! task; message ids are taken once; each task delivers on top of the last.

use baton_proto::{
    Changes, Delivered, Delivery, GitSource, PreparedWorkspace, WorkspaceSource, workspace_source,
};
use pretty_assertions::assert_eq;

use super::*;

fn conversation(idle: u32) -> RunSpec {
    RunSpec {
        idle_timeout_seconds: idle,
        task_message_id: "delivery-1".into(),
        workspace: Some(WorkspaceSource {
            source: Some(workspace_source::Source::Git(GitSource {
                url: "https://github.com/acme/parser.git".into(),
                r#ref: "main".into(),
            })),
        }),
        deliver: Some(Delivery {
            mode: "pr".into(),
            ..Default::default()
        }),
        ..spec(&[])
    }
}

fn started(spec: RunSpec) -> RunState {
    let mut s = RunState::new("gh-acme-parser-7", spec, T0).unwrap();
    s.on_workspace_prepared(
        PreparedWorkspace {
            snapshot: "a".repeat(64),
            commit: "c".repeat(40),
            files: 3,
            base_branch: "main".into(),
            ..Default::default()
        },
        T0,
    );
    s
}

/// One turn writing a file (the tree ends at `snapshot`), one answering `answer`.
fn edit_and_answer(s: &mut RunState, snapshot: &str, answer: &str) {
    expect_llm(s);
    let id = format!("w{}", s.turn);
    s.on_llm_response(
        reply(
            "",
            vec![call(
                &id,
                "write_file",
                r#"{"path": "a.txt", "content": "x"}"#,
            )],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(s);
    s.on_tool_results(
        vec![ToolResult {
            snapshot: snapshot.into(),
            ..ok_result("written")
        }],
        T0,
    );
    expect_llm(s);
    s.on_llm_response(reply(answer, vec![], FinishReason::Stop), T0);
}

/// Collects and delivers (pushed as `commit`), returning the delivery's request.
fn deliver(s: &mut RunState, commit: &str) -> baton_proto::DeliverRequest {
    let Step::CollectChanges(collect) = s.next_step(T0) else {
        panic!("the change set is collected first");
    };
    s.on_changes(
        Changes {
            files_changed: 1,
            base_commit: collect.base_commit.clone(),
            base_snapshot: collect.base_snapshot.clone(),
            final_snapshot: collect.final_snapshot.clone(),
            patch: "p".repeat(64),
            ..Default::default()
        },
        T0,
    );
    let Step::Deliver(request) = s.next_step(T0) else {
        panic!("then delivered");
    };
    s.on_delivered(
        Delivered {
            mode: "pr".into(),
            branch: "baton/gh-acme-parser-7".into(),
            commit: commit.into(),
            pull_request_number: 3,
            ..Default::default()
        },
        T0,
    );
    request
}

#[test]
fn an_answered_conversation_waits_and_a_message_is_its_next_task_delivered_on_top() {
    let mut s = started(conversation(600));
    edit_and_answer(&mut s, &"b".repeat(64), "Fixed the parser.");
    let first = deliver(&mut s, &"d".repeat(40));
    assert_eq!(first.changes.unwrap().base_commit, "c".repeat(40));

    assert_eq!(
        s.next_step(T0),
        Step::AwaitMessage {
            timeout_seconds: 600
        }
    );
    let status = s.status();
    assert_eq!(status.state(), StateName::Idle);
    assert_eq!(
        (status.task, status.answer.as_str()),
        (1, "Fixed the parser.")
    );
    assert!(
        !s.events_since(0).finished,
        "watchers keep following an idle run"
    );

    let outcome = s.on_message("Also handle tabs.".into(), "delivery-2", T0 + 10);
    assert_eq!(
        (outcome.accepted, outcome.duplicate, outcome.task),
        (true, false, 2)
    );
    let request = expect_llm(&mut s);
    assert!(
        matches!(request.conversation.last().and_then(|i| i.kind.as_ref()),
            Some(item::Kind::User(u)) if u.text == "Also handle tabs."),
        "the message is the next task"
    );
    assert_eq!(s.status().task, 2);
    assert_eq!(s.status().state(), StateName::Thinking);
    s.on_llm_response(
        reply(
            "",
            vec![call(
                "w9",
                "write_file",
                r#"{"path": "b.txt", "content": "y"}"#,
            )],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(
        vec![ToolResult {
            snapshot: "e".repeat(64),
            ..ok_result("written")
        }],
        T0,
    );
    expect_llm(&mut s);
    s.on_llm_response(reply("Tabs too.", vec![], FinishReason::Stop), T0);
    let second = deliver(&mut s, &"f".repeat(40));
    let changes = second.changes.unwrap();
    assert_eq!(
        (changes.base_commit.as_str(), changes.base_snapshot.as_str()),
        ("d".repeat(40).as_str(), "b".repeat(64).as_str()),
        "the second task's commit goes on top of the first's"
    );
    assert_eq!(second.message, "Tabs too.");

    assert!(matches!(s.next_step(T0), Step::AwaitMessage { .. }));
    s.on_idle_timeout(T0 + 700_000);
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Completed);
    assert_eq!(result.answer, "Tabs too.");
    assert_eq!(result.delivered.unwrap().commit, "f".repeat(40));
    assert!(s.events_since(0).finished);
    assert!(!s.on_message("late".into(), "delivery-3", T0).accepted);
}

#[test]
fn a_message_id_is_taken_once_and_the_tasks_own_id_after_its_first_coming() {
    let mut s = started(conversation(600));
    let own = s.on_message("do the thing".into(), "delivery-1", T0);
    assert!(
        !own.duplicate && own.accepted,
        "update-with-start's own message"
    );
    assert_eq!(own.task, 1);
    assert!(s.inbox.is_empty(), "it is the task already");
    let redelivered = s.on_message("do the thing".into(), "delivery-1", T0);
    assert!(redelivered.duplicate && redelivered.accepted);
    assert!(s.inbox.is_empty());
    assert!(s.on_message("more".into(), "delivery-2", T0).accepted);
    let again = s.on_message("more".into(), "delivery-2", T0);
    assert!(again.duplicate && again.accepted);
    assert!(s.on_message("no id".into(), "", T0).accepted);
    assert!(
        s.on_message("no id".into(), "", T0).accepted,
        "no id: no check"
    );
    assert_eq!(s.inbox, vec!["more", "no id", "no id"]);
    // Remembered across continue-as-new.
    let carried = s.checkpoint().unwrap();
    let resumed = RunState::resume("gh-acme-parser-7", conversation(600), &carried).unwrap();
    assert!(resumed.is_duplicate_message("delivery-2"));
    // Bounded.
    for i in 0..(MAX_MESSAGE_IDS + 10) {
        s.on_message("m".into(), &format!("id-{i}"), T0);
    }
    assert_eq!(s.follow_ups.message_ids.len(), MAX_MESSAGE_IDS);
}

#[test]
fn a_message_that_arrives_while_the_task_ends_starts_the_next_at_once() {
    let mut s = started(conversation(600));
    edit_and_answer(&mut s, &"b".repeat(64), "Done.");
    // Between the answer and the delivery.
    assert!(s.on_message("next".into(), "delivery-2", T0).accepted);
    deliver(&mut s, &"d".repeat(40));
    expect_llm(&mut s);
    assert_eq!(s.status().task, 2);
}

#[test]
fn the_turn_limit_counts_each_task_and_a_cancel_between_tasks_ends_with_the_answer() {
    let mut spec = conversation(60);
    spec.limits = Some(Limits {
        max_turns: 2,
        ..Default::default()
    });
    let mut s = started(spec);
    edit_and_answer(&mut s, &"b".repeat(64), "One.");
    deliver(&mut s, &"d".repeat(40));
    assert!(matches!(s.next_step(T0), Step::AwaitMessage { .. }));
    s.on_message("again".into(), "x", T0);
    edit_and_answer(&mut s, &"e".repeat(64), "Two.");
    assert_eq!(s.turn, 4, "two turns per task, within a limit of 2 each");
    deliver(&mut s, &"f".repeat(40));
    assert!(matches!(s.next_step(T0), Step::AwaitMessage { .. }));
    s.on_cancelled(Some("done for today".into()), T0);
    let result = expect_finish(&mut s);
    assert_eq!(
        (result.status(), result.answer.as_str()),
        (StateName::Completed, "Two.")
    );
}

#[test]
fn a_run_that_is_not_a_conversation_ends_at_its_answer_and_takes_no_message_after() {
    let mut s = started(RunSpec {
        idle_timeout_seconds: 0,
        ..conversation(0)
    });
    edit_and_answer(&mut s, &"b".repeat(64), "Done.");
    deliver(&mut s, &"d".repeat(40));
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Completed);
    assert!(!s.takes_messages());
    assert!(!s.on_message("more".into(), "", T0).accepted);
    assert_eq!(s.status().task, 0);
}

#[test]
fn a_conversation_that_failed_its_task_ends_there() {
    let mut spec = conversation(60);
    spec.limits = Some(Limits {
        max_turns: 1,
        ..Default::default()
    });
    let mut s = started(spec);
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("r1", "read_file", r#"{"path": "a"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::MaxTurnsExceeded);
}
