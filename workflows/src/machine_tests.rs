//! Unit tests of the state machine: whole runs driven step by step, no server.

use baton_proto::{
    ApprovalDecision, ApprovalPolicy, ApprovalTimeoutAction, ApproverRule, AssistantMessage,
    FinishReason, Item, Limits, LlmResponse, RunSpec, RunState as StateName, TerminationReason,
    ToolCall, ToolResult, Usage, item,
};
use pretty_assertions::assert_eq;

use super::*;

const T0: i64 = 1_700_000_000_000;

fn spec(require_approval: &[&str]) -> RunSpec {
    RunSpec {
        task: "do the thing".into(),
        approval: Some(ApprovalPolicy {
            require_approval: require_approval.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn call(id: &str, name: &str, args: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.into(),
        ..Default::default()
    }
}

fn reply(text: &str, calls: Vec<ToolCall>, finish: FinishReason) -> LlmResponse {
    LlmResponse {
        message: Some(AssistantMessage {
            text: text.into(),
            tool_calls: calls,
            finish_reason: finish as i32,
            ..Default::default()
        }),
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            llm_calls: 0,
        }),
        ..Default::default()
    }
}

fn ok_result(content: &str) -> ToolResult {
    ToolResult {
        content: content.into(),
        ..Default::default()
    }
}

/// The next step, an LLM call, with the model's view filled in as the activity builds it
/// (these runs never store anything, so the whole conversation travels inline).
fn expect_llm(state: &mut RunState) -> LlmRequest {
    match state.next_step(T0) {
        Step::CallLlm(mut req) => {
            let history = req.history.clone().unwrap();
            assert!(history.head.is_empty() && history.stored_items == 0);
            assert_eq!(history.added, state.conversation);
            req.conversation = crate::view::model_view(&history.added, &req.view.clone().unwrap());
            req
        }
        other => panic!("expected an LLM call, got {other:?}"),
    }
}

fn expect_tools(state: &mut RunState) -> Vec<ToolRequest> {
    match state.next_step(T0) {
        Step::RunTools { requests, .. } => requests,
        other => panic!("expected tool execution, got {other:?}"),
    }
}

fn expect_finish(state: &mut RunState) -> RunResult {
    match state.next_step(T0) {
        Step::Finish(result) => result,
        other => panic!("expected the run to finish, got {other:?}"),
    }
}

fn tool_results(state: &RunState) -> Vec<ToolResult> {
    state
        .conversation
        .iter()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::ToolResult(r)) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn two_tool_turns_then_a_final_answer() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    let req = expect_llm(&mut s);
    assert_eq!(req.conversation.len(), 1);
    assert_eq!(req.tools.len(), tools::BUILTIN_TOOLS.len());
    assert!(req.system_prompt.starts_with(crate::prompt::BASE_PROMPT));
    assert!(req.system_prompt.contains("Today's date is 2023-11-14"));

    s.on_llm_response(
        reply(
            "",
            vec![call("a", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "a");
    s.on_tool_results(vec![ok_result("README.md")], T0);

    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "read_file", r#"{"path":"README.md"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("# hello")], T0);

    let req = expect_llm(&mut s);
    // task, assistant, tool result, assistant, tool result
    assert_eq!(req.conversation.len(), 5);
    s.on_llm_response(reply("All done.", vec![], FinishReason::Stop), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Completed);
    assert_eq!(result.reason(), TerminationReason::Completed);
    assert_eq!(result.answer, "All done.");
    assert_eq!(result.turns, 3);
    assert_eq!(result.usage.unwrap().total_tokens, 45);
    assert_eq!(result.usage.unwrap().llm_calls, 3);
    let results = tool_results(&s);
    assert_eq!(results[0].call_id, "a");
    assert_eq!(results[0].name, "list_files");
    assert_eq!(results[1].call_id, "b");
}

#[test]
fn length_is_continued_three_times_then_the_run_fails() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    for i in 1..=MAX_LENGTH_CONTINUATIONS {
        expect_llm(&mut s);
        // Partial tool calls of a cut-off reply are dropped.
        s.on_llm_response(
            reply(
                &format!("part{i} "),
                vec![call("x", "shell", r#"{"comm"#)],
                FinishReason::Length,
            ),
            T0,
        );
        let last = s.conversation.last().unwrap();
        match &last.kind {
            Some(item::Kind::User(u)) => {
                assert!(u.synthetic);
                assert_eq!(u.text, CONTINUE_PROMPT);
            }
            other => panic!("expected a continue prompt, got {other:?}"),
        }
    }
    for i in &s.conversation {
        if let Some(item::Kind::Assistant(a)) = &i.kind {
            assert!(
                a.tool_calls.is_empty(),
                "partial tool calls must be dropped"
            );
        }
    }
    expect_llm(&mut s);
    s.on_llm_response(reply("part4", vec![], FinishReason::Length), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Failed);
    assert_eq!(result.reason(), TerminationReason::OutputTruncated);
    assert_eq!(result.turns, 4);
}

#[test]
fn a_continued_reply_is_joined_into_the_answer() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(reply("The answer ", vec![], FinishReason::Length), T0);
    expect_llm(&mut s);
    s.on_llm_response(reply("is 42.", vec![], FinishReason::Stop), T0);
    let result = expect_finish(&mut s);
    assert_eq!(result.reason(), TerminationReason::Completed);
    assert_eq!(result.answer, "The answer is 42.");
    assert_eq!(s.consecutive_length, 0);
}

#[test]
fn one_call_needing_approval_holds_the_whole_batch() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("r", "read_file", r#"{"path":"a"}"#),
                call("s", "shell", r#"{"command":"make"}"#),
                call("w", "write_file", r#"{"path":"b","content":"x"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0 + 5,
    );
    assert_eq!(
        s.next_step(T0),
        Step::AwaitApproval {
            timeout_seconds: None
        }
    );
    let status = s.status();
    assert_eq!(status.state(), StateName::AwaitingApproval);
    assert_eq!(status.pending.len(), 1);
    assert_eq!(status.pending[0].call_id, "s");
    assert_eq!(status.pending[0].tool, "shell");
    assert_eq!(status.pending[0].arguments, r#"{"command":"make"}"#);
    assert_eq!(status.pending[0].requested_at_ms, T0 + 5);
    // Still waiting: nothing of the batch runs.
    assert!(!s.approvals_settled());
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));

    let outcome = s
        .on_decision(
            ApprovalDecision {
                call_id: "s".into(),
                approved: true,
                approver: "alice".into(),
                reason: String::new(),
                remember: false,
                identity: String::new(),
            },
            T0,
        )
        .unwrap();
    assert_eq!(outcome.call_ids, vec!["s".to_string()]);
    assert_eq!(outcome.still_pending, 0);
    assert!(s.approvals_settled());
    let ids: Vec<String> = expect_tools(&mut s)
        .into_iter()
        .map(|r| r.call.unwrap().id)
        .collect();
    assert_eq!(ids, vec!["r", "s", "w"]);
    s.on_tool_results(vec![ok_result("1"), ok_result("2"), ok_result("3")], T0);
    let results: Vec<(String, String)> = tool_results(&s)
        .into_iter()
        .map(|r| (r.call_id, r.content))
        .collect();
    assert_eq!(
        results,
        vec![
            ("r".to_string(), "1".to_string()),
            ("s".to_string(), "2".to_string()),
            ("w".to_string(), "3".to_string())
        ]
    );
}

#[test]
fn a_denial_becomes_an_error_observation_and_the_run_goes_on() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("s", "shell", r#"{"command":"rm -rf build"}"#),
                call("l", "list_files", "{}"),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    s.on_decision(
        ApprovalDecision {
            call_id: "s".into(),
            approved: false,
            approver: "bob".into(),
            reason: "not on main".into(),
            remember: false,
            identity: String::new(),
        },
        T0,
    )
    .unwrap();
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1, "only the list_files call runs");
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "l");
    s.on_tool_results(vec![ok_result("a.txt")], T0);
    let results = tool_results(&s);
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].call_id, "s");
    assert!(results[0].is_error);
    assert!(results[0].content.contains("denied by bob: not on main"));
    assert!(!results[1].is_error);
    // The model is asked again, with the denial in view.
    let req = expect_llm(&mut s);
    assert!(
        req.conversation
            .iter()
            .any(|i| matches!(&i.kind, Some(item::Kind::ToolResult(r)) if r.content.contains("denied by bob")))
    );
}

#[test]
fn max_turns_ends_the_run() {
    let mut spec = spec(&[]);
    spec.limits = Some(Limits {
        max_turns: 2,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    for i in 0..2 {
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call(&format!("c{i}"), "list_files", "{}")],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        expect_tools(&mut s);
        s.on_tool_results(vec![ok_result("x")], T0);
    }
    let result = expect_finish(&mut s);
    assert_eq!(result.status(), StateName::Failed);
    assert_eq!(result.reason(), TerminationReason::MaxTurnsExceeded);
    assert_eq!(result.turns, 2);
}

#[test]
fn token_budget_and_deadline_end_the_run() {
    let mut budget = spec(&[]);
    budget.limits = Some(Limits {
        max_total_tokens: 20,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", budget, T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    expect_llm(&mut s); // 15 < 20
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::BudgetExceeded
    );

    let mut deadline = spec(&[]);
    deadline.limits = Some(Limits {
        deadline_seconds: 60,
        ..Default::default()
    });
    let mut s = RunState::new("run-2", deadline, T0).unwrap();
    assert!(matches!(s.next_step(T0 + 59_000), Step::CallLlm(_)));
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    match s.next_step(T0 + 60_000) {
        Step::Finish(r) => assert_eq!(r.reason(), TerminationReason::BudgetExceeded),
        other => panic!("expected finish, got {other:?}"),
    }
}

#[test]
fn malformed_arguments_and_unknown_tools_become_error_observations() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("bad", "shell", r#"{"command": "ls"#),
                call("nope", "teleport", "{}"),
                call("arr", "read_file", "[1,2]"),
                call("ok", "list_files", ""),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    // The malformed shell call needs no approval: it can never run.
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "ok");
    s.on_tool_results(vec![ok_result("files")], T0);
    let results = tool_results(&s);
    assert!(results[0].is_error);
    assert!(
        results[0].content.contains("not valid JSON"),
        "{}",
        results[0].content
    );
    assert!(results[1].is_error);
    assert!(results[1].content.contains("Unknown tool 'teleport'"));
    assert!(results[1].content.contains("shell"));
    assert!(results[2].is_error);
    assert!(results[2].content.contains("must be a JSON object"));
    assert!(!results[3].is_error);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn decisions_are_validated() {
    let mut s = RunState::new("run-1", spec(&["shell", "write_file"]), T0).unwrap();
    let d = |id: &str, ok: bool| ApprovalDecision {
        call_id: id.into(),
        approved: ok,
        approver: "carol".into(),
        reason: "r".into(),
        remember: false,
        identity: String::new(),
    };
    assert_eq!(
        s.validate_decision(&d("s", true)),
        Err(DecisionError::NothingPending)
    );
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("s", "shell", r#"{"command":"x"}"#),
                call("w", "write_file", r#"{"path":"a","content":""}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(matches!(
        s.validate_decision(&d("zzz", true)),
        Err(DecisionError::UnknownCall { .. })
    ));
    s.on_decision(d("s", true), T0).unwrap();
    assert_eq!(
        s.validate_decision(&d("s", false)),
        Err(DecisionError::AlreadyDecided {
            call_id: "s".into()
        })
    );
    // A duplicate sent as a signal is ignored and changes nothing.
    assert!(s.on_decision(d("s", false), T0).is_err());
    assert!(!s.approvals_settled());
    let outcome = s.on_decision(d("*", false), T0).unwrap();
    assert_eq!(outcome.call_ids, vec!["w".to_string()]);
    let reqs = expect_tools(&mut s);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].call.as_ref().unwrap().id, "s");
}

#[test]
fn approvers_restrict_who_may_decide_which_tool() {
    let mut spec = spec(&["shell", "write_file"]);
    spec.approval.as_mut().unwrap().approvers = vec![ApproverRule {
        tool: "shell".into(),
        identities: vec!["alice@*".into()],
    }];
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    let d = |id: &str, identity: &str| ApprovalDecision {
        call_id: id.into(),
        approved: true,
        approver: "alice".into(),
        identity: identity.into(),
        ..Default::default()
    };
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("s", "shell", r#"{"command":"x"}"#),
                call("w", "write_file", r#"{"path":"a","content":""}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    // The claimed approver name does not count; the identity does.
    let refused = DecisionError::NotAllowed {
        identity: "bob@box".into(),
        tool: "shell".into(),
        allowed: vec!["alice@*".into()],
    };
    assert_eq!(
        s.validate_decision(&d("s", "bob@box")),
        Err(refused.clone())
    );
    assert!(
        refused
            .to_string()
            .contains("identity 'bob@box' may not decide calls of tool 'shell'")
    );
    // "*" covers the shell call too, so bob may not decide everything at once...
    assert!(s.validate_decision(&d("*", "bob@box")).is_err());
    // ...but write_file has no entry: anyone may decide it.
    s.on_decision(d("w", "bob@box"), T0).unwrap();
    // A refused signal leaves the call pending and says why.
    assert!(s.on_decision(d("s", ""), T0).is_err());
    assert!(!s.approvals_settled());
    assert!(
        s.status()
            .last_event
            .contains("a client with no identity may not decide"),
        "{}",
        s.status().last_event
    );
    s.on_decision(d("s", "alice@laptop"), T0).unwrap();
    assert_eq!(expect_tools(&mut s).len(), 2);
}

#[test]
fn approval_timeout_denies_or_fails_by_policy() {
    for (action, expect_fail) in [
        (ApprovalTimeoutAction::Deny, false),
        (ApprovalTimeoutAction::Fail, true),
    ] {
        let mut sp = spec(&["shell"]);
        let approval = sp.approval.as_mut().unwrap();
        approval.timeout_seconds = 30;
        approval.on_timeout = action as i32;
        let mut s = RunState::new("run-1", sp, T0).unwrap();
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call("s", "shell", r#"{"command":"x"}"#)],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        assert_eq!(
            s.next_step(T0),
            Step::AwaitApproval {
                timeout_seconds: Some(30)
            }
        );
        s.on_approval_timeout(T0 + 30_000);
        if expect_fail {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::ApprovalTimedOut);
        } else {
            assert!(expect_tools(&mut s).is_empty());
            s.on_tool_results(vec![], T0);
            let results = tool_results(&s);
            assert!(results[0].is_error);
            assert!(results[0].content.contains("approval timed out"));
        }
    }
}

#[test]
fn content_filter_and_provider_errors_fail_the_run() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(reply("", vec![], FinishReason::ContentFilter), T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::ContentFiltered
    );

    let mut s = RunState::new("run-2", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_failure(LlmFailure::Fatal, "401 invalid api key".into(), T0);
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::ProviderError);
    assert_eq!(r.detail, "401 invalid api key");

    // The worker's blob store failing is not the provider's doing.
    let mut s = RunState::new("run-3", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_failure(
        LlmFailure::Infrastructure,
        "store: permission denied".into(),
        T0,
    );
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::InternalError);
    assert_eq!(r.detail, "store: permission denied");
}

#[test]
fn cancellation_user_messages_and_duplicate_ids() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    s.on_user_message("also check\nthe tests".into(), T0);
    assert_eq!(s.status().last_event, "user message: also check the tests");
    s.on_user_message("x".repeat(500), T0);
    assert_eq!(
        s.status().last_event,
        format!("user message: {}…", "x".repeat(200))
    );
    let req = expect_llm(&mut s);
    assert!(matches!(
        &req.conversation.last().unwrap().kind,
        Some(item::Kind::User(u)) if u.text == "x".repeat(500) && !u.synthetic
    ));
    // Providers that send empty or repeated ids get unique ones.
    s.on_llm_response(
        reply(
            "",
            vec![call("", "list_files", "{}"), call("", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let ids: Vec<String> = expect_tools(&mut s)
        .into_iter()
        .map(|r| r.call.unwrap().id)
        .collect();
    assert_eq!(ids, vec!["call_1_1", "call_1_2"]);
    // The workflow tells when calls start; only then does `watch` see them running.
    let started = |s: &RunState| {
        s.events_since(0)
            .events
            .into_iter()
            .filter(|e| matches!(e.kind, Some(run_event::Kind::ToolStarted(_))))
            .count()
    };
    assert_eq!(started(&s), 0);
    s.on_tools_started(&["call_1_1".to_owned()], T0);
    s.on_tools_started(&["call_1_1".to_owned()], T0);
    assert_eq!(started(&s), 1, "a call starts once");
    s.on_cancelled(Some("user asked".into()), T0);
    let r = expect_finish(&mut s);
    assert_eq!(r.status(), StateName::Cancelled);
    assert_eq!(r.reason(), TerminationReason::Cancelled);
    assert_eq!(r.detail, "cancelled: user asked");
    // Every call has an outcome: a transcript never shows a call without one.
    let closed = tool_results(&s);
    assert_eq!(
        closed
            .iter()
            .map(|r| (r.call_id.as_str(), r.content.as_str(), r.is_error))
            .collect::<Vec<_>>(),
        [
            (
                "call_1_1",
                "stopped: the run ended while this call ran (cancelled: user asked); it may \
                 have taken effect in part",
                true
            ),
            (
                "call_1_2",
                "not run: the run ended before this call ran (cancelled: user asked)",
                true
            ),
        ]
    );
    let finished_events: Vec<_> = s
        .events_since(0)
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            Some(run_event::Kind::ToolFinished(r)) => Some(r.call_id),
            Some(run_event::Kind::Finished(_)) => Some("END".to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(finished_events, ["call_1_1", "call_1_2", "END"]);
}

#[test]
fn a_stopped_batch_keeps_the_results_of_the_calls_that_completed() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("w", "write_file", r#"{"path":"a","content":"x"}"#),
                call("s", "shell", r#"{"command":"sleep 60"}"#),
                call("r", "read_file", r#"{"path":"a"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tools_started(&["w".to_owned()], T0);
    s.on_tools_started(&["s".to_owned()], T0 + 1);
    s.on_tools_finished(
        &[ToolResult {
            call_id: "w".into(),
            name: "write_file".into(),
            content: "wrote 1 byte to a".into(),
            ..Default::default()
        }],
        T0 + 1,
    );
    s.on_deadline_passed(T0 + 2);
    expect_finish(&mut s);
    let closed = tool_results(&s);
    let by_id = |id: &str| closed.iter().find(|r| r.call_id == id).unwrap().clone();
    assert_eq!(by_id("w").content, "wrote 1 byte to a");
    assert!(!by_id("w").is_error);
    let told: Vec<String> = s
        .events_since(0)
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            Some(run_event::Kind::ToolFinished(r)) => Some(r.call_id),
            _ => None,
        })
        .collect();
    assert_eq!(told, ["w", "s", "r"], "each call's end is told once");
    assert!(
        by_id("s")
            .content
            .starts_with("stopped: the run ended while this call ran")
    );
    assert!(
        by_id("r")
            .content
            .starts_with("not run: the run ended before this call ran"),
        "{:?}",
        by_id("r")
    );
}

#[test]
fn a_run_ending_while_calls_await_a_decision_answers_each_call() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("r", "read_file", r#"{"path":"a"}"#),
                call("s", "shell", r#"{"command":"make"}"#),
                call("x", "no_such_tool", "{}"),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    s.on_cancelled(None, T0 + 1);
    expect_finish(&mut s);
    let closed = tool_results(&s);
    let by_id = |id: &str| {
        closed
            .iter()
            .find(|r| r.call_id == id)
            .unwrap()
            .content
            .clone()
    };
    assert_eq!(closed.len(), 3);
    assert_eq!(
        by_id("r"),
        "not run: the run ended before this call ran (cancelled)"
    );
    assert_eq!(
        by_id("s"),
        "not run: the run ended before this call was decided (cancelled)"
    );
    assert!(by_id("x").contains("no_such_tool"), "{}", by_id("x"));
}

#[test]
fn state_and_wire_types_round_trip_as_json_with_proto_field_names() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("s", "shell", r#"{"command":"x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let json = serde_json::to_string(&s).unwrap();
    let back: RunState = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
    let status = serde_json::to_value(s.status()).unwrap();
    assert_eq!(status["state"], "AWAITING_APPROVAL");
    assert_eq!(status["pending"][0]["call_id"], "s");
    let decision: ApprovalDecision =
        serde_json::from_str(r#"{"call_id":"*","approved":true,"approver":"dan","reason":"ok"}"#)
            .unwrap();
    assert_eq!(decision.call_id, "*");
    assert!(decision.approved);
    let item: Item = serde_json::from_str(r#"{"user":{"text":"hi"}}"#).unwrap();
    assert!(matches!(item.kind, Some(item::Kind::User(_))));
    let finished = RunResult {
        reason: TerminationReason::MaxTurnsExceeded as i32,
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&finished).unwrap()["reason"],
        "max_turns_exceeded"
    );
}

#[test]
fn context_overflow_elides_old_tool_outputs_and_retries_once() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    let big = "x".repeat(10_000);
    for i in 0..3 {
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call(
                    &format!("c{i}"),
                    "list_files",
                    &format!(r#"{{"path":"d{i}"}}"#),
                )],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        expect_tools(&mut s);
        s.on_tool_results(vec![ok_result(&big)], T0);
    }
    let before = expect_llm(&mut s);
    s.on_llm_failure(LlmFailure::ContextOverflow, "prompt is too long".into(), T0);
    // The turn is retried with the oldest output elided; the last two turns stay intact.
    let after = expect_llm(&mut s);
    assert_eq!(after.conversation.len(), before.conversation.len());
    let contents: Vec<String> = after
        .conversation
        .iter()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::ToolResult(r)) => Some(r.content.clone()),
            _ => None,
        })
        .collect();
    assert!(
        contents[0].starts_with("[10000 bytes of output from list_files were removed"),
        "{}",
        contents[0]
    );
    assert_eq!(contents[1], big);
    assert_eq!(contents[2], big);
    // The full output is kept in the conversation itself.
    assert_eq!(tool_results(&s)[0].content, big);
    // A second overflow in the same turn ends the run.
    s.on_llm_failure(LlmFailure::ContextOverflow, "prompt is too long".into(), T0);
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::ContextOverflow);
    assert_eq!(r.detail, "prompt is too long");
}

#[test]
fn context_overflow_with_nothing_to_elide_fails_at_once() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_failure(LlmFailure::ContextOverflow, "too long".into(), T0);
    assert_eq!(
        expect_finish(&mut s).reason(),
        TerminationReason::ContextOverflow
    );
}

#[test]
fn remember_allows_the_same_pattern_for_the_rest_of_the_run() {
    let mut s = RunState::new("run-1", spec(&["shell"]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"cargo test --lib"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    s.on_decision(
        ApprovalDecision {
            call_id: "a".into(),
            approved: true,
            approver: "eve".into(),
            reason: String::new(),
            remember: true,
            identity: String::new(),
        },
        T0,
    )
    .unwrap();
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("ok")], T0);
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("b", "shell", r#"{"command":"cargo test -p other"}"#),
                call("c", "shell", r#"{"command":"cargo publish"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let pending: Vec<String> = s.pending_calls().into_iter().map(|p| p.call_id).collect();
    assert_eq!(
        pending,
        vec!["c".to_string()],
        "cargo test* is remembered, cargo publish is not"
    );
}

#[test]
fn never_ask_denies_without_blocking() {
    let mut sp = spec(&["shell"]);
    sp.approval.as_mut().unwrap().mode = crate::policy::MODE_NEVER_ASK.into();
    let mut s = RunState::new("run-1", sp, T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"make deploy"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert!(
        expect_tools(&mut s).is_empty(),
        "nothing runs and nothing waits"
    );
    s.on_tool_results(vec![], T0);
    let r = &tool_results(&s)[0];
    assert!(
        r.is_error && r.content.contains("never_ask"),
        "{}",
        r.content
    );
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn an_invalid_policy_is_refused_at_start() {
    let mut sp = spec(&[]);
    sp.approval
        .as_mut()
        .unwrap()
        .rules
        .push(baton_proto::ToolRule {
            tool: "shell".into(),
            pattern: String::new(),
            action: "perhaps".into(),
            reason: String::new(),
        });
    let err = RunState::new("run-1", sp, T0).unwrap_err();
    assert!(err.contains("unknown action 'perhaps'"), "{err}");
}

fn err_result(content: &str) -> ToolResult {
    ToolResult {
        content: content.into(),
        is_error: true,
        ..Default::default()
    }
}

/// One turn whose single (distinct) tool call fails or succeeds.
fn failing_turn(s: &mut RunState, i: u32, fails: bool) {
    expect_llm(s);
    s.on_llm_response(
        reply(
            &format!("attempt {i}"),
            vec![call(
                &format!("t{i}"),
                "read_file",
                &format!(r#"{{"path":"f{i}"}}"#),
            )],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(s);
    let r = if fails {
        err_result("not found")
    } else {
        ok_result("ok")
    };
    s.on_tool_results(vec![r], T0);
}

fn breaker_alerts(s: &RunState) -> usize {
    s.conversation
        .iter()
        .filter(|i| matches!(&i.kind, Some(item::Kind::User(u)) if u.synthetic && u.text.contains("circuit breaker")))
        .count()
}

#[test]
fn the_breaker_alerts_after_three_failing_turns_and_a_success_resets_it() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    failing_turn(&mut s, 1, true);
    failing_turn(&mut s, 2, true);
    assert_eq!(breaker_alerts(&s), 0, "two failing turns are not enough");
    failing_turn(&mut s, 3, false);
    assert_eq!(s.error_streak, 0);
    for i in 4..=6 {
        failing_turn(&mut s, i, true);
    }
    assert_eq!(breaker_alerts(&s), 1);
    let req = expect_llm(&mut s);
    assert!(matches!(
        &req.conversation.last().unwrap().kind,
        Some(item::Kind::User(u)) if u.text.contains("change strategy")
    ));
}

#[test]
fn the_breaker_pauses_for_a_human_who_can_continue_or_abort() {
    for approve in [true, false] {
        let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
        for i in 1..=6 {
            failing_turn(&mut s, i, true);
        }
        assert_eq!(breaker_alerts(&s), 1);
        let status = s.status();
        assert_eq!(status.state(), StateName::AwaitingApproval);
        assert_eq!(status.pending[0].tool, QUESTION_TOOL);
        assert!(status.pending[0].arguments.contains("Continue the run"));
        let id = status.pending[0].call_id.clone();
        s.on_decision(
            ApprovalDecision {
                call_id: id,
                approved: approve,
                approver: "op".into(),
                reason: "enough".into(),
                remember: false,
                identity: String::new(),
            },
            T0,
        )
        .unwrap();
        if approve {
            assert_eq!(s.error_streak, 0);
            assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
        } else {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::LoopDetected);
            assert!(r.detail.contains("ended by op: enough"), "{}", r.detail);
            // Not the text written for the model.
            assert!(!r.detail.contains("Do not retry"), "{}", r.detail);
        }
    }
}

#[test]
fn repeated_batches_stop_the_run_or_ask_by_policy() {
    for ask in [false, true] {
        let mut sp = spec(&[]);
        if ask {
            sp.approval.as_mut().unwrap().loops = Some(baton_proto::LoopPolicy {
                on_loop: "ask".into(),
                ..Default::default()
            });
        }
        let mut s = RunState::new("run-1", sp, T0).unwrap();
        for i in 0..2 {
            expect_llm(&mut s);
            s.on_llm_response(
                reply(
                    "",
                    vec![call(&format!("x{i}"), "list_files", "{}")],
                    FinishReason::ToolCalls,
                ),
                T0,
            );
            expect_tools(&mut s);
            s.on_tool_results(vec![ok_result("same")], T0);
        }
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call("x2", "list_files", "{}")],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        if ask {
            assert_eq!(s.status().pending[0].tool, QUESTION_TOOL);
        } else {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::LoopDetected);
            assert!(r.detail.contains("same tool calls"));
        }
    }
}

#[test]
fn loop_guards_can_be_disabled() {
    let mut sp = spec(&[]);
    sp.approval.as_mut().unwrap().loops = Some(baton_proto::LoopPolicy {
        disabled: true,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", sp, T0).unwrap();
    for i in 0..4 {
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "",
                vec![call(&format!("x{i}"), "list_files", "{}")],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        expect_tools(&mut s);
        s.on_tool_results(vec![err_result("boom")], T0);
    }
    assert_eq!(breaker_alerts(&s), 0);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

fn windowed(window: u32) -> RunSpec {
    let mut sp = spec(&[]);
    // These runs repeat themselves on purpose.
    sp.approval.as_mut().unwrap().loops = Some(baton_proto::LoopPolicy {
        disabled: true,
        ..Default::default()
    });
    sp.model = Some(baton_proto::ModelConfig {
        provider: "scripted".into(),
        context_window: window,
        ..Default::default()
    });
    sp
}

fn shrink_window(s: &mut RunState, window: u32) {
    if let Some(m) = s.spec.model.as_mut() {
        m.context_window = window;
    }
}

/// A turn whose tool returns `out`, with `text` as the assistant's words.
fn turn_with_output(s: &mut RunState, i: u32, text: &str, out: &str) {
    expect_llm(s);
    s.on_llm_response(
        LlmResponse {
            message: Some(AssistantMessage {
                text: text.into(),
                tool_calls: vec![call(
                    &format!("k{i}"),
                    "read_file",
                    &format!(r#"{{"path":"f{i}"}}"#),
                )],
                finish_reason: FinishReason::ToolCalls as i32,
                ..Default::default()
            }),
            usage: None,
            ..Default::default()
        },
        T0,
    );
    expect_tools(s);
    s.on_tool_results(vec![ok_result(out)], T0);
}

#[test]
fn no_context_window_means_no_compaction() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    for i in 0..4 {
        turn_with_output(&mut s, i, "", &"y".repeat(50_000));
    }
    assert_eq!(s.compaction_threshold(), None);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

#[test]
fn over_the_threshold_old_tool_outputs_go_first() {
    // Window 8000 -> buffer 2000 -> threshold 6000 tokens (~24 KB).
    let mut s = RunState::new("run-1", windowed(1_000_000), T0).unwrap();
    for i in 0..4 {
        turn_with_output(&mut s, i, "", &"y".repeat(7_000));
    }
    shrink_window(&mut s, 8_000);
    assert_eq!(s.compaction_threshold(), Some(6_000));
    assert!(s.estimate_tokens() > 6_000, "{}", s.estimate_tokens());
    let req = expect_llm(&mut s);
    // The two oldest outputs are placeholders now; the last two turns are intact.
    let outs: Vec<usize> = req
        .conversation
        .iter()
        .filter_map(|i| match &i.kind {
            Some(item::Kind::ToolResult(r)) => Some(r.content.len()),
            _ => None,
        })
        .collect();
    assert!(outs[0] < 200 && outs[1] < 200, "{outs:?}");
    assert_eq!(&outs[2..], &[7_000, 7_000]);
    assert!(s.estimate_tokens() <= 6_000);
    let notes = s
        .events
        .iter()
        .filter(|e| matches!(&e.kind, Some(baton_proto::run_event::Kind::Note(n)) if n.starts_with("compaction: removed")))
        .count();
    assert!(notes > 0, "a compaction event is recorded");
    // The conversation itself keeps everything.
    assert!(tool_results(&s).iter().all(|r| r.content.len() == 7_000));
}

#[test]
fn when_elision_is_not_enough_the_older_turns_are_summarized() {
    let mut s = RunState::new("run-1", windowed(1_000_000), T0).unwrap();
    let long_text = "z".repeat(6_000);
    for i in 0..5 {
        turn_with_output(&mut s, i, &long_text, "small output");
    }
    shrink_window(&mut s, 8_000);
    let step = s.next_step(T0);
    let Step::Compact(mut req) = step else {
        panic!("expected compaction, got {step:?}");
    };
    let history = req.history.clone().unwrap();
    req.items = crate::view::compaction_input(
        &history.added,
        &req.view.clone().unwrap(),
        req.from as usize,
        req.upto as usize,
    );
    assert_eq!(s.status().state(), StateName::Compacting);
    assert_eq!(req.task, "do the thing");
    // Everything but the task and the last two turns goes to the summary.
    assert!(matches!(&req.items[0].kind, Some(item::Kind::Assistant(_))));
    let summarized_assistants = req
        .items
        .iter()
        .filter(|i| matches!(i.kind, Some(item::Kind::Assistant(_))))
        .count();
    assert_eq!(summarized_assistants, 3);
    s.on_compacted(
        baton_proto::CompactResponse {
            summary: "Read f0..f2; nothing found yet.".into(),
            usage: None,
        },
        T0,
    );
    let req = expect_llm(&mut s);
    match (&req.conversation[0].kind, &req.conversation[1].kind) {
        (Some(item::Kind::User(task)), Some(item::Kind::User(summary))) => {
            assert_eq!(task.text, "do the thing");
            assert!(summary.synthetic && summary.text.contains("Read f0..f2; nothing found yet."));
        }
        other => panic!("unexpected view start {other:?}"),
    }
    let kept = req
        .conversation
        .iter()
        .filter(|i| matches!(i.kind, Some(item::Kind::Assistant(_))))
        .count();
    assert_eq!(kept, 2);
    assert!(s.estimate_tokens() < 6_000);
    assert!(s.status().last_event.starts_with("compaction: summarized"));
    assert_eq!(s.conversation.len(), 11, "the full conversation is kept");
}

#[test]
fn a_failed_compaction_is_not_retried_in_the_same_turn() {
    let mut s = RunState::new("run-1", windowed(1_000_000), T0).unwrap();
    let long_text = "z".repeat(6_000);
    for i in 0..5 {
        turn_with_output(&mut s, i, &long_text, "small");
    }
    shrink_window(&mut s, 8_000);
    assert!(matches!(s.next_step(T0), Step::Compact(_)));
    s.on_compaction_failed("provider down", T0);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));
}

fn decide(s: &mut RunState, approved: bool) {
    let id = s.status().pending[0].call_id.clone();
    s.on_decision(
        ApprovalDecision {
            call_id: id,
            approved,
            approver: "boss".into(),
            reason: "budget".into(),
            remember: false,
            identity: String::new(),
        },
        T0,
    )
    .unwrap();
}

#[test]
fn exhausted_limits_can_ask_for_an_extension() {
    for approve in [true, false] {
        let mut sp = spec(&[]);
        sp.limits = Some(Limits {
            max_turns: 2,
            on_exhausted: "ask".into(),
            ..Default::default()
        });
        let mut s = RunState::new("run-1", sp, T0).unwrap();
        for i in 0..2 {
            failing_turn(&mut s, i, false);
        }
        assert_eq!(
            s.next_step(T0),
            Step::AwaitApproval {
                timeout_seconds: None
            }
        );
        assert!(s.status().pending[0].arguments.contains("Extend the limit"));
        decide(&mut s, approve);
        if approve {
            // Two more turns.
            failing_turn(&mut s, 2, false);
            failing_turn(&mut s, 3, false);
            assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
        } else {
            let r = expect_finish(&mut s);
            assert_eq!(r.reason(), TerminationReason::MaxTurnsExceeded);
            assert!(r.detail.contains("ended by boss: budget"), "{}", r.detail);
        }
    }
}

#[test]
fn token_budget_extension_and_deadline_interruption() {
    let mut sp = spec(&[]);
    sp.limits = Some(Limits {
        max_total_tokens: 20,
        on_exhausted: "ask".into(),
        ..Default::default()
    });
    let mut s = RunState::new("run-1", sp, T0).unwrap();
    // Each reply reports 15 tokens: after two, 30 >= 20.
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "list_files", "{}")],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "glob", r#"{"pattern":"*"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(vec![ok_result("x")], T0);
    assert!(matches!(s.next_step(T0), Step::AwaitApproval { .. }));
    decide(&mut s, true);
    assert_eq!(s.spec.limits.as_ref().unwrap().max_total_tokens, 50);
    assert!(matches!(s.next_step(T0), Step::CallLlm(_)));

    let mut sp = spec(&[]);
    sp.limits = Some(Limits {
        deadline_seconds: 30,
        ..Default::default()
    });
    let mut s = RunState::new("run-2", sp, T0).unwrap();
    assert_eq!(s.deadline_ms(), Some(T0 + 30_000));
    assert!(s.deadline_interrupts());
    expect_llm(&mut s);
    s.on_deadline_passed(T0 + 30_000);
    let r = expect_finish(&mut s);
    assert_eq!(r.reason(), TerminationReason::BudgetExceeded);
    assert!(r.detail.contains("deadline of 30 s"));
}

#[test]
fn full_outputs_are_kept_in_the_conversation_but_not_sent_to_the_model() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    s.on_tool_results(
        vec![ToolResult {
            content: "preview".into(),
            full_output: "the whole thing".into(),
            ..Default::default()
        }],
        T0,
    );
    let req = expect_llm(&mut s);
    let sent = req
        .conversation
        .iter()
        .find_map(|i| match &i.kind {
            Some(item::Kind::ToolResult(r)) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(sent.content, "preview");
    assert!(sent.full_output.is_empty());
    assert_eq!(tool_results(&s)[0].full_output, "the whole thing");
}

/// A turn of `shell` with output `out`, answered by the "activity" with a stored head.
fn stored_turn(s: &mut RunState, i: u32, out: &str) {
    let Step::CallLlm(req) = s.next_step(T0) else {
        panic!("expected an LLM call");
    };
    let history = req.history.unwrap();
    let items = history.stored_items as usize + history.added.len();
    let mut response = reply(
        &format!("turn {i}"),
        vec![call(
            &format!("c{i}"),
            "shell",
            &format!("{{\"command\":\"echo {i}\"}}"),
        )],
        FinishReason::ToolCalls,
    );
    response.history_head = format!("head{i}");
    response.history_items = items as u32;
    response.context = "ctx".into();
    s.on_llm_response(response, T0);
    expect_tools(s);
    s.on_tool_results(vec![ok_result(out)], T0);
}

#[test]
fn requests_carry_only_what_is_new_once_stored() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    for i in 0..5 {
        stored_turn(&mut s, i, "some output");
    }
    let Step::CallLlm(req) = s.next_step(T0) else {
        panic!("expected an LLM call");
    };
    let history = req.history.unwrap();
    assert_eq!(history.head, "head4");
    // The last reply and its tool result are all that travel.
    assert_eq!(history.added.len(), 2);
    assert_eq!(history.stored_items as usize + 2, s.conversation.len());
    assert_eq!(req.context, "ctx");
    assert!(req.system_prompt.is_empty() && req.tools.is_empty());
}

#[test]
fn a_script_travels_one_turn_at_a_time() {
    let mut spec = spec(&[]);
    spec.model = Some(baton_proto::ModelConfig {
        provider: "scripted".into(),
        script: Some(baton_proto::Script {
            turns: (0..3)
                .map(|i| baton_proto::ScriptedTurn {
                    text: format!("t{i}"),
                    ..Default::default()
                })
                .collect(),
            first_turn: 0,
        }),
        ..Default::default()
    });
    let mut s = RunState::new("run-1", spec, T0).unwrap();
    stored_turn(&mut s, 0, "x");
    let Step::CallLlm(req) = s.next_step(T0) else {
        panic!("expected an LLM call");
    };
    let script = req.model.unwrap().script.unwrap();
    assert_eq!(req.turn, 1);
    assert_eq!(script.first_turn, 1);
    assert_eq!(script.turns.len(), 1);
    assert_eq!(script.turns[0].text, "t1");
}

#[test]
fn a_checkpoint_carries_the_run_by_reference_and_resumes_it() {
    let mut spec = spec(&["shell"]);
    spec.limits = Some(Limits {
        max_turns: 100,
        segment_turns: 30,
        ..Default::default()
    });
    let mut s = RunState::new("run-1", spec.clone(), T0).unwrap();
    assert!(!s.wants_continue_as_new(10, false));
    assert!(s.wants_continue_as_new(10, true));
    assert!(s.wants_continue_as_new(DEFAULT_HISTORY_EVENTS_BUDGET, false));
    for i in 0..30 {
        // Approve each call so the batch runs.
        let Step::CallLlm(req) = s.next_step(T0) else {
            panic!("expected an LLM call");
        };
        let h = req.history.unwrap();
        let mut r = reply(
            &format!("turn {i}"),
            vec![call(
                &format!("c{i}"),
                "shell",
                &format!("{{\"command\":\"echo {i}\"}}"),
            )],
            FinishReason::ToolCalls,
        );
        r.history_head = format!("head{i}");
        r.history_items = h.stored_items + h.added.len() as u32;
        s.on_llm_response(r, T0);
        if i == 29 {
            break;
        }
        s.on_decision(
            ApprovalDecision {
                call_id: format!("c{i}"),
                approved: true,
                approver: "ann".into(),
                ..Default::default()
            },
            T0,
        )
        .unwrap();
        expect_tools(&mut s);
        s.on_tool_results(vec![ok_result(&"o".repeat(2000))], T0);
    }
    // Turn 30 waits for a human, and the segment used its turn budget.
    assert_eq!(s.status().state(), StateName::AwaitingApproval);
    assert!(s.wants_continue_as_new(100, false));
    let carried = s.checkpoint().unwrap();
    assert_eq!(carried.segment, 1);
    assert!(carried.state.len() < MAX_CHECKPOINT_BYTES);
    let mut next = RunState::resume("run-1", spec, &carried).unwrap();
    assert!(
        !next.wants_continue_as_new(100, false),
        "the budget restarts"
    );
    assert_eq!(next.turn, 30);
    assert_eq!(next.conversation.len(), s.conversation.len());
    assert_eq!(next.estimate_tokens(), s.estimate_tokens());
    let stubs = next
        .conversation
        .iter()
        .filter(|i| matches!(i.kind, Some(item::Kind::Stub(_))))
        .count();
    assert!(stubs > 40, "older items are stubs: {stubs}");
    assert!(next.events.len() <= CARRIED_EVENTS);
    // The pending approval survives the boundary and is applied.
    assert_eq!(next.status().pending.len(), 1);
    next.on_decision(
        ApprovalDecision {
            call_id: "c29".into(),
            approved: true,
            approver: "ann".into(),
            ..Default::default()
        },
        T0,
    )
    .unwrap();
    let requests = expect_tools(&mut next);
    assert_eq!(requests[0].call.as_ref().unwrap().id, "c29");
    next.on_tool_results(vec![ok_result("done")], T0);
    let Step::CallLlm(req) = next.next_step(T0) else {
        panic!("expected an LLM call");
    };
    let h = req.history.unwrap();
    assert_eq!(h.head, "head29");
    assert!(
        h.added
            .iter()
            .all(|i| !matches!(i.kind, Some(item::Kind::Stub(_)))),
        "stubs never travel"
    );
}

#[test]
fn an_interrupted_call_waits_for_a_human_who_reruns_or_skips_it() {
    let mut spec = spec(&[]);
    spec.approval.as_mut().unwrap().on_retry = "ask".into();
    for approve in [true, false] {
        let mut s = RunState::new("run-1", spec.clone(), T0).unwrap();
        expect_llm(&mut s);
        s.on_llm_response(
            reply(
                "two things",
                vec![
                    call("a", "shell", r#"{"command":"make deploy"}"#),
                    call("b", "read_file", r#"{"path":"x"}"#),
                ],
                FinishReason::ToolCalls,
            ),
            T0,
        );
        let requests = expect_tools(&mut s);
        assert!(requests[0].confirm_retries && requests[0].mutating);
        assert!(!requests[0].retry_confirmed);
        s.on_tool_results(
            vec![
                ToolResult {
                    interrupted: true,
                    content: "not run again".into(),
                    ..Default::default()
                },
                ok_result("file x"),
            ],
            T0,
        );
        // The read went through; the cut-off call waits for a human.
        assert_eq!(tool_results(&s).len(), 1);
        let status = s.status();
        assert_eq!(status.state(), StateName::AwaitingApproval);
        assert_eq!(status.pending[0].call_id, "a");
        s.on_decision(
            ApprovalDecision {
                call_id: "a".into(),
                approved: approve,
                approver: "ann".into(),
                reason: "already deployed".into(),
                ..Default::default()
            },
            T0,
        )
        .unwrap();
        if approve {
            let again = expect_tools(&mut s);
            assert_eq!(again.len(), 1);
            assert!(again[0].retry_confirmed);
            s.on_tool_results(vec![ok_result("deployed")], T0);
            let all = tool_results(&s);
            assert_eq!(all.len(), 2, "{all:?} {:?}", s.phase);
            assert_eq!(all[1].content, "deployed");
        } else {
            // Nothing runs; the skip is the call's result.
            assert!(expect_tools(&mut s).is_empty());
            s.on_tool_results(Vec::new(), T0);
            let skipped = &tool_results(&s)[1];
            assert!(skipped.is_error);
            assert!(
                skipped.content.contains("may or may not have taken effect")
                    && skipped.content.contains("already deployed"),
                "{}",
                skipped.content
            );
        }
        expect_llm(&mut s);
    }
}

/// The snapshot `read_instructions` took is the base of the run's first tool calls, so even
/// the first mutating call carries it in its input; a mutating call's snapshot replaces it.
#[test]
fn the_initial_snapshot_is_the_first_calls_base_until_a_call_changes_the_workspace() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    s.on_instructions(
        Some(WorkspaceInstructions {
            workspace: "/w/run-1".into(),
            snapshot: "s0".into(),
            ..Default::default()
        }),
        T0,
    );
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"touch x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    let reqs = expect_tools(&mut s);
    assert_eq!((reqs[0].snapshot.as_str(), reqs[0].mutating), ("s0", true));
    s.on_tool_results(
        vec![ToolResult {
            snapshot: "s1".into(),
            ..ok_result("")
        }],
        T0,
    );
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![call("b", "read_file", r#"{"path":"x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert_eq!(expect_tools(&mut s)[0].snapshot, "s1");

    // Without one (snapshots off, or not taken in time), the first call has no base.
    let mut off = RunState::new("run-2", spec(&[]), T0).unwrap();
    off.on_instructions(Some(WorkspaceInstructions::default()), T0);
    expect_llm(&mut off);
    off.on_llm_response(
        reply(
            "",
            vec![call("a", "shell", r#"{"command":"touch x"}"#)],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    assert_eq!(expect_tools(&mut off)[0].snapshot, "");
}

#[test]
fn calls_finished_during_a_batch_are_told_once() {
    let mut s = RunState::new("run-1", spec(&[]), T0).unwrap();
    expect_llm(&mut s);
    s.on_llm_response(
        reply(
            "",
            vec![
                call("a", "write_file", r#"{"path":"a","content":"x"}"#),
                call("b", "write_file", r#"{"path":"b","content":"y"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        T0,
    );
    expect_tools(&mut s);
    let result = |id: &str| ToolResult {
        call_id: id.into(),
        name: "write_file".into(),
        content: format!("wrote {id}"),
        ..Default::default()
    };
    s.on_tools_started(&["a".to_owned()], T0);
    s.on_tools_finished(&[result("a")], T0 + 1);
    s.on_tools_started(&["b".to_owned()], T0 + 1);
    s.on_tools_finished(&[result("b")], T0 + 2);
    s.on_tool_results(vec![result("a"), result("b")], T0 + 2);
    let kinds: Vec<String> = s
        .events_since(0)
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            Some(run_event::Kind::ToolStarted(c)) => Some(format!("start {}", c.id)),
            Some(run_event::Kind::ToolFinished(r)) => Some(format!("end {}", r.call_id)),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["start a", "end a", "start b", "end b"]);
    assert_eq!(tool_results(&s).len(), 2);
    expect_llm(&mut s);
}
