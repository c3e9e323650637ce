//! The shape of every `--json` object, pinned: keys and values as they have always been
//! printed, and the watch lines exactly as docs/src/reference/json.md shows them.

use std::{borrow::Cow, collections::BTreeSet};

use baton_proto::{
    ApprovalDecision, AssistantMessage, FinishReason, Item, PendingCall, RunEvent, RunResult,
    RunState, RunStatus, TerminationReason, ToolCall, ToolResult, Usage, UserMessage, item,
    run_event,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use temporalio_client::WorkflowExecutionStatus;
use temporalio_common::protos::temporal::api::enums::v1::PendingActivityState;

use super::*;

/// `x` as JSON, once the JSON has read back as the same object: the `--json` types are a
/// library that other programs (the e2e tests among them) deserialize.
fn value<T: Serialize + serde::de::DeserializeOwned>(x: &T) -> Value {
    let v = serde_json::to_value(x).unwrap();
    let back: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
    assert_eq!(serde_json::to_value(&back).unwrap(), v);
    v
}

fn event(seq: u32, turn: u32, kind: run_event::Kind) -> RunEvent {
    RunEvent {
        seq,
        turn,
        at_ms: 1_700_000_000_000,
        kind: Some(kind),
    }
}

fn call() -> ToolCall {
    ToolCall {
        id: "call_1_1".to_owned(),
        name: "shell".to_owned(),
        arguments: r#"{"command":"ls"}"#.to_owned(),
        ..Default::default()
    }
}

fn pending_call() -> PendingCall {
    PendingCall {
        call_id: "call_2_1".to_owned(),
        tool: "shell".to_owned(),
        arguments: r#"{"command":"ls"}"#.to_owned(),
        requested_at_ms: 1_700_000_000_000,
    }
}

fn awaiting() -> RunStatus {
    RunStatus {
        parent_run_id: String::new(),
        state: RunState::AwaitingApproval as i32,
        turn: 2,
        pending: vec![pending_call()],
        usage: Some(Usage {
            input_tokens: 100,
            output_tokens: 20,
            total_tokens: 120,
            llm_calls: 2,
            ..Default::default()
        }),
        last_event: "awaiting approval".to_owned(),
        reason: 0,
        task: 0,
        answer: String::new(),
    }
}

fn failed() -> RunResult {
    RunResult {
        run_id: "r1".to_owned(),
        status: RunState::Failed as i32,
        reason: TerminationReason::MaxTurnsExceeded as i32,
        answer: "Running the tests now.".to_owned(),
        turns: 50,
        usage: None,
        detail: "d".to_owned(),
        ..RunResult::default()
    }
}

fn usage_json(input: u32, output: u32, llm_calls: u32) -> Value {
    json!({"input_tokens": input, "output_tokens": output, "total_tokens": input + output, "llm_calls": llm_calls,
           "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0, "cost_usd": 0.0})
}

#[test]
fn a_failure_and_a_submitted_run() {
    assert_eq!(
        line(&Failure {
            error: Cow::from("no such run"),
            exit_code: 2
        })
        .unwrap(),
        r#"{"error":"no such run","exit_code":2}"#
    );
    assert_eq!(
        line(&Submitted::new("r1", "baton")).unwrap(),
        r#"{"run_id":"r1","status":"RUNNING","task_queue":"baton"}"#
    );
    let forked = Forked {
        run_id: Cow::from("r2"),
        status: Cow::from("RUNNING"),
        task_queue: Cow::from("baton"),
        fork_of: Cow::from("r1"),
        at_turn: 3,
    };
    assert_eq!(
        line(&forked).unwrap(),
        r#"{"run_id":"r2","status":"RUNNING","task_queue":"baton","fork_of":"r1","at_turn":3}"#
    );
}

/// `result --json`: in the README's order; `answer` only when completed, `last_text` ("" when
/// the agent said nothing) otherwise, `usage` when recorded.
#[test]
fn a_result() {
    let completed = RunResult {
        status: RunState::Completed as i32,
        reason: TerminationReason::Completed as i32,
        answer: "There are 3 files.".to_owned(),
        turns: 4,
        usage: Some(Usage {
            input_tokens: 812,
            output_tokens: 64,
            total_tokens: 876,
            llm_calls: 4,
            cache_read_tokens: 768,
            reasoning_tokens: 16,
            cost_usd: 0.000_865_4,
            ..Default::default()
        }),
        detail: String::new(),
        ..failed()
    };
    assert_eq!(
        line(&Ended::result(&completed)).unwrap(),
        r#"{"run_id":"r1","status":"COMPLETED","reason":"completed","answer":"There are 3 files.","turns":4,"usage":{"input_tokens":812,"output_tokens":64,"total_tokens":876,"llm_calls":4,"cache_read_tokens":768,"cache_write_tokens":0,"reasoning_tokens":16,"cost_usd":0.000865},"detail":""}"#
    );
    assert_eq!(
        value(&Ended::result(&failed())),
        json!({
            "run_id": "r1", "status": "FAILED", "reason": "max_turns_exceeded", "answer": "",
            "turns": 50, "detail": "d", "last_text": "Running the tests now."
        })
    );
    let silent = RunResult {
        answer: String::new(),
        usage: Some(Usage::default()),
        ..failed()
    };
    assert_eq!(
        value(&Ended::result(&silent)),
        json!({
            "run_id": "r1", "status": "FAILED", "reason": "max_turns_exceeded", "answer": "",
            "turns": 50, "usage": usage_json(0, 0, 0), "detail": "d", "last_text": ""
        })
    );
}

/// `status --json`: the run's status (reason null while it goes on, times as numbers), where
/// it came from, and the activities in flight.
#[test]
fn a_status() {
    let snap = Snapshot {
        temporal_status: WorkflowExecutionStatus::Running,
        status: awaiting(),
        source: "query",
        activities: vec![InFlight {
            activity: "llm_generate".to_owned(),
            activity_id: "1".to_owned(),
            state: PendingActivityState::Scheduled,
            attempt: 3,
            maximum_attempts: 10,
            last_failure: Some("rate limited".to_owned()),
            scheduled_at_ms: Some(5),
            started_at_ms: None,
            last_heartbeat_at_ms: None,
            next_attempt_at_ms: Some(9),
        }],
    };
    assert_eq!(
        value(&Status::new("r1", &snap)),
        json!({
            "run_id": "r1", "state": "AWAITING_APPROVAL", "turn": 2,
            "pending": [{"call_id": "call_2_1", "tool": "shell", "arguments": "{\"command\":\"ls\"}", "requested_at_ms": 1_700_000_000_000_i64}],
            "usage": usage_json(100, 20, 2), "last_event": "awaiting approval", "reason": null,
            "source": "query", "temporal_status": "Running",
            "activities": [{
                "activity": "llm_generate", "activity_id": "1", "state": "SCHEDULED",
                "attempt": 3, "maximum_attempts": 10, "last_failure": "rate limited",
                "scheduled_at_ms": 5, "started_at_ms": null, "last_heartbeat_at_ms": null,
                "next_attempt_at_ms": 9
            }]
        })
    );
    let ended = RunStatus {
        usage: None,
        reason: TerminationReason::Cancelled as i32,
        pending: Vec::new(),
        ..awaiting()
    };
    assert_eq!(
        value(&StatusFields::from(&ended)),
        json!({
            "state": "AWAITING_APPROVAL", "turn": 2, "pending": [],
            "last_event": "awaiting approval", "reason": "cancelled"
        })
    );
}

/// One object for `submit --wait` and `result --wait` when they stop waiting, `detail`
/// included; without the status when it could not be read.
#[test]
fn a_wait_that_stopped() {
    let status = awaiting();
    let detail = "stopped waiting for r1; it goes on (`baton result r1 --wait` waits again)";
    assert_eq!(
        value(&StoppedWaiting::new("r1", Some(&status))),
        json!({
            "run_id": "r1", "status": "AWAITING_APPROVAL", "waited": true, "detail": detail,
            "state": "AWAITING_APPROVAL", "turn": 2,
            "pending": [{"call_id": "call_2_1", "tool": "shell", "arguments": "{\"command\":\"ls\"}", "requested_at_ms": 1_700_000_000_000_i64}],
            "usage": usage_json(100, 20, 2), "last_event": "awaiting approval", "reason": null
        })
    );
    assert_eq!(
        value(&StoppedWaiting::new("r1", None)),
        json!({"run_id": "r1", "waited": true, "detail": detail})
    );
    assert_eq!(
        value(&NotEnded {
            run_id: Cow::from("r1"),
            status: Cow::from("THINKING"),
            detail: Cow::from("run r1 has not ended")
        }),
        json!({"run_id": "r1", "status": "THINKING", "detail": "run r1 has not ended"})
    );
}

#[test]
fn a_transcript() {
    let items = [Item {
        kind: Some(item::Kind::User(UserMessage {
            text: "hi".to_owned(),
            ..Default::default()
        })),
    }];
    let v = value(&Transcript {
        run_id: Cow::from("r1"),
        items: Cow::from(&items),
    });
    assert_eq!(v["run_id"], "r1");
    assert_eq!(v["items"], value(&items));
    assert_eq!(v["items"][0]["user"]["text"], "hi");
}

/// A decision sent as the update, and one sent as the signal: the same fields, with what only
/// the update tells null, and `call_id` besides.
#[test]
fn decisions() {
    let decisions = [
        Decision::update(
            vec!["call_1_1".to_owned()],
            true,
            1,
            vec!["shell ls *".to_owned()],
        ),
        Decision::signal("call_1_2", true),
    ];
    assert_eq!(
        value(&Decided {
            run_id: Cow::from("r1"),
            approved: true,
            decisions: Cow::from(&decisions)
        }),
        json!({"run_id": "r1", "approved": true, "decisions": [
            {"call_ids": ["call_1_1"], "approved": true, "still_pending": 1, "remembered": ["shell ls *"], "sent_as": "update"},
            {"call_ids": ["call_1_2"], "call_id": "call_1_2", "approved": true, "still_pending": null, "remembered": [], "sent_as": "signal"}
        ]})
    );
}

#[test]
fn listed_and_pending_runs() {
    let listed = Runs {
        runs: vec![ListedRun {
            run_id: Cow::from("r1"),
            state: Cow::from("FAILED"),
            reason: Some(Cow::from("max_turns_exceeded")),
            turn: 50,
            temporal_status: "Completed".to_owned(),
            task_queue: Cow::from("baton"),
        }],
    };
    assert_eq!(
        value(&listed),
        json!({"runs": [{"run_id": "r1", "state": "FAILED", "reason": "max_turns_exceeded", "turn": 50, "temporal_status": "Completed", "task_queue": "baton"}]})
    );
    let pending = Runs {
        runs: vec![
            PendingRun {
                run_id: Cow::from("r1"),
                turn: 2,
                parent_run_id: String::new(),
                pending: vec![WaitingCall::new(pending_call(), 1_700_000_061_999)],
            },
            PendingRun {
                run_id: Cow::from("r1.sub-1"),
                turn: 1,
                parent_run_id: "r1".to_owned(),
                pending: Vec::new(),
            },
        ],
    };
    assert_eq!(
        value(&pending),
        json!({"runs": [{"run_id": "r1", "turn": 2, "pending": [
            {"call_id": "call_2_1", "tool": "shell", "arguments": "{\"command\":\"ls\"}", "waiting_seconds": 61}
        ]}, {"run_id": "r1.sub-1", "turn": 1, "parent_run_id": "r1", "pending": []}]})
    );
}

/// The README's example lines, byte for byte.
#[test]
fn watch_lines_are_the_documented_ones() {
    let assistant = RunEvent {
        at_ms: 1_767_225_600_123,
        ..event(
            2,
            1,
            run_event::Kind::Assistant(AssistantMessage {
                text: "Let me look.".to_owned(),
                tool_calls: vec![call()],
                finish_reason: FinishReason::ToolCalls as i32,
                reasoning: String::new(),
                ..Default::default()
            }),
        )
    };
    let requested = RunEvent {
        at_ms: 1_767_225_600_130,
        ..event(
            3,
            1,
            run_event::Kind::ApprovalRequested(PendingCall {
                call_id: "call_1_1".to_owned(),
                requested_at_ms: 1_767_225_600_130,
                ..pending_call()
            }),
        )
    };
    let result = RunResult {
        run_id: "run-1a2b".to_owned(),
        status: RunState::Completed as i32,
        reason: TerminationReason::Completed as i32,
        answer: "There are 3 files.".to_owned(),
        turns: 2,
        usage: Some(Usage {
            input_tokens: 812,
            output_tokens: 64,
            total_tokens: 876,
            llm_calls: 2,
            cache_read_tokens: 768,
            cost_usd: 0.000_984,
            ..Default::default()
        }),
        detail: String::new(),
        ..RunResult::default()
    };
    let finished = RunEvent {
        at_ms: 1_767_225_631_002,
        ..event(9, 2, run_event::Kind::Finished(result))
    };
    let delta = crate::live::Delta {
        attempt: 1,
        text: "Let me".to_owned(),
        ..Default::default()
    };
    let mut lines = vec![line(&WatchLine::delta("run-1a2b", 1, &delta)).unwrap()];
    lines.extend(
        [assistant, requested, finished]
            .iter()
            .map(|e| line(&WatchLine::of("run-1a2b", e).unwrap()).unwrap()),
    );
    let documented_page = include_str!("../../docs/src/reference/json.md");
    let documented: Vec<&str> = documented_page
        .lines()
        .filter(|l| l.starts_with(r#"{"run_id":"run-1a2b""#))
        .collect();
    assert_eq!(lines, documented);
    // A program reading them gets the same lines back.
    for l in documented {
        let read: WatchLine = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert_eq!(line(&read).unwrap(), l);
    }
}

#[test]
fn each_kind_of_watch_line() {
    let body = |kind: run_event::Kind| {
        let e = event(4, 1, kind);
        let line = WatchLine::of("r1", &e).unwrap();
        // `kind` names the key the event is under.
        let v = value(&line);
        let keys: BTreeSet<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["run_id", "seq", "turn", "at_ms", "kind", &line.kind])
        );
        (
            v["kind"].as_str().unwrap().to_owned(),
            v[line.kind.as_ref()].clone(),
        )
    };
    assert_eq!(
        body(run_event::Kind::Assistant(AssistantMessage {
            text: "Looking.".to_owned(),
            tool_calls: vec![call()],
            finish_reason: FinishReason::Unspecified as i32,
            reasoning: "hm".to_owned(),
            ..Default::default()
        })),
        (
            "assistant".to_owned(),
            json!({"text": "Looking.", "reasoning": "hm", "finish_reason": "",
                "tool_calls": [{"call_id": "call_1_1", "tool": "shell", "arguments": "{\"command\":\"ls\"}"}]})
        )
    );
    assert_eq!(
        body(run_event::Kind::ApprovalRequested(PendingCall {
            call_id: "call_1_1".to_owned(),
            arguments: "{}".to_owned(),
            requested_at_ms: 5,
            ..pending_call()
        })),
        (
            "approval_requested".to_owned(),
            json!({"call_id": "call_1_1", "tool": "shell", "arguments": "{}", "requested_at_ms": 5})
        )
    );
    assert_eq!(
        body(run_event::Kind::ApprovalDecided(ApprovalDecision {
            call_id: "call_1_1".to_owned(),
            approved: false,
            approver: "bob".to_owned(),
            reason: "no".to_owned(),
            remember: false,
            identity: String::new(),
        })),
        (
            "approval_decided".to_owned(),
            json!({"call_id": "call_1_1", "approved": false, "approver": "bob", "identity": "", "reason": "no", "remember": false})
        )
    );
    assert_eq!(
        body(run_event::Kind::SubagentStarted(
            baton_proto::SubagentStarted {
                call_id: "call_1_1".to_owned(),
                run_id: "r1.sub-1".to_owned(),
                task: "write the tests".to_owned(),
            }
        )),
        (
            "subagent_started".to_owned(),
            json!({"call_id": "call_1_1", "child_run_id": "r1.sub-1", "task": "write the tests"})
        )
    );
    assert_eq!(
        body(run_event::Kind::SubagentFinished(
            baton_proto::SubagentFinished {
                call_id: "call_1_1".to_owned(),
                outcome: Some(baton_proto::SubagentOutcome {
                    run_id: "r1.sub-1".to_owned(),
                    status: RunState::Completed as i32,
                    reason: TerminationReason::Completed as i32,
                    usage: Some(Usage {
                        total_tokens: 420,
                        ..Default::default()
                    }),
                    turns: 3,
                    files_changed: 2,
                    merge: "merged".to_owned(),
                }),
                answer: "Tests written.".to_owned(),
            }
        )),
        (
            "subagent_finished".to_owned(),
            json!({"call_id": "call_1_1", "child_run_id": "r1.sub-1", "status": "COMPLETED",
                "reason": "completed", "turns": 3, "total_tokens": 420, "files_changed": 2,
                "merge": "merged", "answer": "Tests written."})
        )
    );
    assert_eq!(
        body(run_event::Kind::ToolStarted(call())),
        (
            "tool_started".to_owned(),
            json!({"call_id": "call_1_1", "tool": "shell", "arguments": "{\"command\":\"ls\"}"})
        )
    );
    assert_eq!(
        body(run_event::Kind::ToolFinished(ToolResult {
            call_id: "call_1_1".to_owned(),
            name: "shell".to_owned(),
            content: "exit code: 0".to_owned(),
            is_error: false,
            full_output: "not shown".to_owned(),
            ..Default::default()
        })),
        (
            "tool_finished".to_owned(),
            json!({"call_id": "call_1_1", "tool": "shell", "is_error": false, "content": "exit code: 0"})
        )
    );
    assert_eq!(
        body(run_event::Kind::ToolFinished(ToolResult {
            call_id: "call_1_2".to_owned(),
            name: "shell".to_owned(),
            content: "403".to_owned(),
            is_error: true,
            network_refusals: vec![baton_proto::NetworkRefusal {
                host: "169.254.169.254".to_owned(),
                port: 80,
                kind: "private".to_owned(),
                reason: "link-local".to_owned(),
            }],
            network_refused: 3,
            network_allowed: 1,
            ..Default::default()
        })),
        (
            "tool_finished".to_owned(),
            json!({"call_id": "call_1_2", "tool": "shell", "is_error": true, "content": "403",
                   "network_refusals": [{"host": "169.254.169.254", "port": 80,
                                         "kind": "private", "reason": "link-local"}],
                   "network_refused": 3})
        )
    );
    assert_eq!(
        body(run_event::Kind::Note("run started".to_owned())),
        ("note".to_owned(), json!({"text": "run started"}))
    );
    assert_eq!(
        body(run_event::Kind::Finished(failed())).0,
        "finished".to_owned()
    );
    assert!(WatchLine::of("r1", &RunEvent::default()).is_none());
}

/// The `finished` line: the result with its exit code and usage (zeros when unknown);
/// `last_text` only when the agent said something. Built from the result (no worker replayed
/// the events), `seq` and `at_ms` are null and the object is the same.
#[test]
fn the_finished_line_carries_the_result_and_exit_code() {
    let r = RunResult {
        status: RunState::Cancelled as i32,
        reason: TerminationReason::Cancelled as i32,
        answer: String::new(),
        turns: 2,
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            llm_calls: 2,
            ..Default::default()
        }),
        detail: "cancelled: why".to_owned(),
        ..failed()
    };
    let e = event(9, 2, run_event::Kind::Finished(r.clone()));
    let from_event = value(&WatchLine::of("r1", &e).unwrap());
    let built = value(&WatchLine::finished("r1", &r));
    assert_eq!(from_event["finished"], built["finished"]);
    assert_eq!(
        built,
        json!({
            "run_id": "r1", "seq": null, "turn": 2, "at_ms": null, "kind": "finished",
            "finished": {
                "status": "CANCELLED", "reason": "cancelled", "answer": "", "turns": 2,
                "usage": usage_json(10, 5, 2), "detail": "cancelled: why", "exit_code": 4
            }
        })
    );
    assert_eq!(
        value(&Ended::finished(&failed())),
        json!({
            "status": "FAILED", "reason": "max_turns_exceeded", "answer": "", "turns": 50,
            "usage": usage_json(0, 0, 0), "detail": "d", "exit_code": 1,
            "last_text": "Running the tests now."
        })
    );
    let silent = RunResult {
        answer: String::new(),
        ..failed()
    };
    assert_eq!(value(&Ended::finished(&silent)).get("last_text"), None);
}
