//! Unit tests of the state machine: whole runs driven step by step, no server. Shared helpers
//! here, one file per concern below (as in `machine/`), `phases.rs` for inputs in the wrong
//! phase.

use baton_proto::{
    ApprovalDecision, ApprovalPolicy, ApprovalTimeoutAction, ApproverRule, AssistantMessage,
    FinishReason, Item, Limits, LlmResponse, RunSpec, RunState as StateName, TerminationReason,
    ToolCall, ToolResult, Usage, item, run_event,
};
use pretty_assertions::assert_eq;

use super::*;
use crate::error::{DecisionError, StateError};

const T0: i64 = 1_700_000_000_000;

mod approvals;
mod batch;
mod checkpoint;
mod context;
mod conversation;
mod cost;
mod environment;
mod fork;
mod github;
mod mcp;
mod network;
mod outputs;
mod phases;
mod subagents;
mod turn;
mod verify;

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
            ..Default::default()
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

fn err_result(content: &str) -> ToolResult {
    ToolResult {
        content: content.into(),
        is_error: true,
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

/// Model turn `i` at `now`: the reply calls `shell` (call `c{i}`, `echo {i}`), its history
/// stored at head `head{i}` and its context at `context`.
fn shell_reply(s: &mut RunState, i: u32, context: &str, now: i64) {
    let Step::CallLlm(req) = s.next_step(now) else {
        panic!("expected an LLM call");
    };
    let history = req.history.unwrap();
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
    response.history_items = history.stored_items + history.added.len() as u32;
    response.context = context.into();
    s.on_llm_response(response, now);
}

/// Call `c{i}` approved by "ann" (`remember`: as a rule too), run, and answered with `out`.
fn approve_and_run(s: &mut RunState, i: u32, remember: bool, out: &str, now: i64) {
    s.on_decision(
        ApprovalDecision {
            call_id: format!("c{i}"),
            approved: true,
            approver: "ann".into(),
            remember,
            ..Default::default()
        },
        now,
    )
    .unwrap();
    expect_tools(s);
    s.on_tool_results(vec![ok_result(out)], now);
}

/// A turn of `shell` with output `out`, answered by the "activity" with a stored head.
fn stored_turn(s: &mut RunState, i: u32, out: &str) {
    shell_reply(s, i, "ctx", T0);
    expect_tools(s);
    s.on_tool_results(vec![ok_result(out)], T0);
}
