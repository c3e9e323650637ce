//! The per-turn scenario shared by the baton run (a) and the in-process loop (c): what the
//! model says, the run's spec, and the workspace file the tool reads.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use baton_proto::{ApprovalPolicy, Limits, ModelConfig, RunSpec};
use std::sync::Arc;

use baton_core::tools::{READ_FILE, SHELL};
use baton_tests::{CapturedRequest, MockOpenAi, MockResponse, Responder};
use serde_json::Value;

/// The file every turn's tool call reads (one line of it), in the run's workspace.
pub(crate) const NOTES_FILE: &str = "notes.txt";
/// Lines of [`NOTES_FILE`]. Turn `i` reads line `i % NOTES_LINES + 1`, so consecutive calls
/// differ and baton's loop guard (the same calls three times in a row) never fires.
pub(crate) const NOTES_LINES: u32 = 8;
/// The model's final answer.
pub(crate) const ANSWER: &str = "All notes read.";

/// Queues the model's replies for one run of `turns` turns on the mock: a `read_file` tool
/// call in each turn but the last, the final answer in the last.
pub(crate) fn push_replies(llm: &MockOpenAi, turns: u32) {
    llm.clear_queue();
    for turn in 1..=turns {
        llm.push(reply(turn, turns));
    }
}

/// The model's reply at `turn` (1-based) of a run of `turns` turns.
pub(crate) fn reply(turn: u32, turns: u32) -> Value {
    if turn >= turns {
        return MockOpenAi::text_reply(ANSWER);
    }
    let id = format!("call_{turn}");
    let arguments = format!(
        r#"{{"path":"{NOTES_FILE}","offset":{},"limit":1}}"#,
        turn % NOTES_LINES + 1
    );
    MockOpenAi::tool_calls_reply(&[(&id, READ_FILE, &arguments)])
}

/// Answers each request with [`reply`] for the turn its conversation is at (one more than
/// the assistant messages it holds): many concurrent runs of `turns` turns on one mock.
pub(crate) fn responder(turns: u32) -> Responder {
    Arc::new(move |request: &CapturedRequest| {
        let done = request
            .messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count();
        Some(MockResponse::ok(reply(done as u32 + 1, turns)))
    })
}

/// Writes [`NOTES_FILE`] into `workspace` (created if missing).
pub(crate) fn write_notes(workspace: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(workspace)
        .with_context(|| format!("creating workspace {}", workspace.display()))?;
    let text: String = (1..=NOTES_LINES)
        .map(|i| format!("note {i}: nothing to see here\n"))
        .collect();
    let path = workspace.join(NOTES_FILE);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// The run: provider `openai` (the mock), only the `read_file` tool, nothing needs approval
/// (like `baton submit --no-approval`; `read_file` is read-only anyway), enough turns.
pub(crate) fn spec(turns: u32) -> RunSpec {
    RunSpec {
        task: format!("Read {NOTES_FILE} one line at a time, then say you are done."),
        model: Some(ModelConfig {
            provider: "openai".to_owned(),
            model: "mock".to_owned(),
            ..Default::default()
        }),
        tools: vec![READ_FILE.to_owned()],
        approval: Some(ApprovalPolicy::default()),
        limits: Some(Limits {
            max_turns: turns + 1,
            ..Default::default()
        }),
        labels: HashMap::from([("submitter".to_owned(), "baton-bench".to_owned())]),
        ..Default::default()
    }
}

/// The command every run of the density scenario asks to run (and waits for approval of).
pub(crate) const WAITING_COMMAND: &str = "echo density";

/// A run that asks, in its first turn, to run a shell command that needs approval (the
/// default policy), then waits for a human: the density scenario.
pub(crate) fn waiting_spec() -> RunSpec {
    RunSpec {
        task: "Say hello with the shell.".to_owned(),
        model: Some(ModelConfig {
            provider: "openai".to_owned(),
            model: "mock".to_owned(),
            ..Default::default()
        }),
        tools: vec![SHELL.to_owned()],
        approval: Some(ApprovalPolicy {
            require_approval: vec![SHELL.to_owned()],
            ..Default::default()
        }),
        labels: HashMap::from([("submitter".to_owned(), "baton-bench".to_owned())]),
        ..Default::default()
    }
}

/// Answers every request with a call to [`WAITING_COMMAND`].
pub(crate) fn waiting_responder() -> Responder {
    Arc::new(|_: &CapturedRequest| {
        let arguments = serde_json::json!({ "command": WAITING_COMMAND }).to_string();
        Some(MockResponse::ok(MockOpenAi::tool_calls_reply(&[(
            "call_1", SHELL, &arguments,
        )])))
    })
}

/// Start options of every workflow the bench starts: `task_queue`, id `id`, and the workflow
/// task timeout `baton submit` sets (5 s: a dead worker's task moves on within seconds).
pub(crate) fn start_options(task_queue: &str, id: &str) -> temporalio_client::WorkflowStartOptions {
    temporalio_client::WorkflowStartOptions::new(task_queue.to_owned(), id.to_owned())
        .task_timeout(std::time::Duration::from_secs(5))
        .build()
}
