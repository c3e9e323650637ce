//! The Anthropic wire end to end: a worker and a dev server running a
//! `--provider anthropic` run with extended thinking against MockAnthropic, which refuses (400)
//! a request whose last `tool_use` turn lacks its thinking block or carries one it did not
//! sign. The run's `ModelConfig.thinking_budget_tokens` has no CLI flag on this branch, so the
//! test starts `AgentRun` with a RunSpec through the Temporal client, as `baton submit` does.

use std::time::Duration;

use baton_proto::{ApprovalPolicy, ModelConfig, RunSpec};
use baton_tests::*;
use baton_workflows::AgentRun;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, WorkflowStartOptions,
};

use crate::common;

/// Starts `AgentRun` with `spec` on `queue` as run `id` (what `baton submit` does).
async fn start_run(server: &DevServer, queue: &str, id: &str, spec: RunSpec) -> anyhow::Result<()> {
    let url = server.url().parse::<temporalio_client::Url>()?;
    let conn = Connection::connect(ConnectionOptions::new(url).build()).await?;
    let client = Client::new(conn, ClientOptions::new("default").build())?;
    let options = WorkflowStartOptions::new(queue.to_owned(), id.to_owned())
        .task_timeout(Duration::from_secs(5))
        .build();
    client
        .start_workflow(AgentRun::run, spec, options)
        .await
        .map_err(|e| anyhow::anyhow!("cannot start {id}: {e}"))?;
    Ok(())
}

/// The assistant message `i` of a captured request.
fn message(req: &CapturedRequest, i: usize) -> &Value {
    &req.body["messages"][i]
}

#[test]
fn thinking_blocks_survive_a_three_turn_tool_loop_with_cache_breakpoints() {
    let server = DevServer::start().unwrap();
    let llm = MockAnthropic::start().unwrap();
    let queue = unique("anthropic-wire");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-wire-test"),
        ],
    );
    let replies = [
        MockAnthropic::thinking_tool_use_reply(
            "List the workspace first.",
            Some("hidden reasoning"),
            &[("toolu_w1", "list_files", "{}")],
        ),
        MockAnthropic::thinking_tool_use_reply(
            "Empty; look for a README.",
            None,
            &[("toolu_w2", "glob", r#"{"pattern":"README*"}"#)],
        ),
        MockAnthropic::thinking_text_reply("Nothing there either.", "The workspace is empty."),
    ];
    for r in &replies {
        llm.push(r.clone());
    }
    let run = unique("run-anthropic-wire");
    let spec = RunSpec {
        task: "Describe the workspace.".into(),
        model: Some(ModelConfig {
            provider: "anthropic".into(),
            model: "claude-test".into(),
            thinking_budget_tokens: 2048,
            ..Default::default()
        }),
        approval: Some(ApprovalPolicy::default()),
        ..Default::default()
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(start_run(&server, &queue, &run, spec))
        .unwrap();
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "The workspace is empty.");

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3);
    let blocks = |reply: &Value, n: usize| -> Vec<Value> {
        reply["content"].as_array().unwrap()[..n].to_vec()
    };
    for (i, req) in reqs.iter().enumerate() {
        assert_eq!(
            req.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert!(req.body.get("temperature").is_none());
        assert!(req.body["max_tokens"].as_u64().unwrap() > 2048);
        // Breakpoints: the last tool, the system block, the moving end; never more than 4.
        let tools = req.body["tools"].as_array().unwrap();
        assert_eq!(
            tools.last().unwrap()["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(
            req.body["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        let messages = req.body["messages"].as_array().unwrap();
        let last = messages.last().unwrap()["content"].as_array().unwrap();
        assert!(
            last.last().unwrap().get("cache_control").is_some(),
            "request {i}"
        );
        assert!(
            MockAnthropic::count_breakpoints(&req.body) <= 4,
            "request {i}"
        );
        assert_eq!(
            format!("{}{}", req.body["tools"], req.body["system"]),
            format!("{}{}", reqs[0].body["tools"], reqs[0].body["system"]),
            "the cached prefix is stable"
        );
    }
    // Turn 1's thinking + redacted blocks, verbatim, lead its assistant message in requests 2
    // and 3; turn 2's in request 3.
    assert_eq!(
        message(&reqs[1], 1)["content"].as_array().unwrap()[..2].to_vec(),
        blocks(&replies[0], 2)
    );
    assert_eq!(
        message(&reqs[2], 1)["content"].as_array().unwrap()[..2].to_vec(),
        blocks(&replies[0], 2)
    );
    assert_eq!(
        message(&reqs[2], 3)["content"].as_array().unwrap()[..1].to_vec(),
        blocks(&replies[1], 1)
    );
    assert!(llm.violations().is_empty());
}

/// Claude often writes "\n\n" before a tool call. The strict mock refuses a
/// whitespace-only text block as the Messages API does; the run's later requests leave it
/// out, so the tool loop finishes.
#[test]
fn a_whitespace_only_text_before_a_tool_call_is_not_sent_back() {
    let server = DevServer::start().unwrap();
    let llm = MockAnthropic::start().unwrap();
    let queue = unique("anthropic-ws");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-ws-test"),
        ],
    );
    llm.push(MockAnthropic::tool_use_reply_with_text(
        Some("\n\n"),
        &[("toolu_1", "list_files", "{}")],
    ));
    llm.push_text("Nothing here.");
    let run = unique("run-anthropic-ws");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "anthropic", "--no-approval"],
        "Look around.",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Nothing here.", "{r:?}");
    assert_eq!(llm.take_violations(), Vec::<String>::new());
    let second = &llm.requests()[1];
    assert_eq!(
        second.body["messages"][1]["content"][0]["type"], "tool_use",
        "{}",
        second.body
    );
}

/// Claude-3-haiku's output limit is 4,096 tokens; the provider's default
/// `max_tokens` (8,192) is refused on every call (the strict mock says so as the API does).
/// The worker takes the limit from its model table.
#[test]
fn max_tokens_stays_within_the_models_output_limit() {
    let server = DevServer::start().unwrap();
    let llm = MockAnthropic::start().unwrap();
    let queue = unique("anthropic-max");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-max-test"),
        ],
    );
    llm.push_text("Small model, small answer.");
    let run = unique("run-anthropic-max");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-3-haiku-20240307",
            "--no-approval",
        ],
        "Say hi.",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Small model, small answer.", "{r:?}");
    assert_eq!(llm.take_violations(), Vec::<String>::new());
    assert_eq!(llm.requests()[0].body["max_tokens"], 4096);
}

/// An answer cut at the default `max_tokens` is asked again, in the same
/// model call, with the model's output limit before it counts as a truncation; both calls
/// are billed. A run that set `--max-output-tokens` keeps its limit.
#[test]
fn a_max_tokens_stop_is_asked_again_with_the_models_limit() {
    let server = DevServer::start().unwrap();
    let llm = MockAnthropic::start().unwrap();
    let queue = unique("anthropic-raise");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-raise-test"),
        ],
    );
    let mut cut = MockAnthropic::text_reply("The long answer starts");
    cut["stop_reason"] = json!("max_tokens");
    llm.push(cut.clone());
    llm.push_text("The long answer, whole this time.");
    let run = unique("run-anthropic-raise");
    let args = [
        "--provider",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
        "--no-approval",
    ];
    submit(&server, &queue, &run, &args, "Write a lot.");
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "The long answer, whole this time.", "{r:?}");
    assert_eq!(
        r.usage.as_ref().unwrap().llm_calls,
        1,
        "one model call of the run: {r:?}"
    );
    assert_eq!(r.turns, 1, "{r:?}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["max_tokens"], 8192);
    assert_eq!(reqs[1].body["max_tokens"], 64_000);
    assert_eq!(reqs[0].body["messages"], reqs[1].body["messages"]);
    // Both calls billed: the two replies' output tokens (4 words + 6 words) and both prompts
    // (the mock's 42 input tokens each).
    assert_eq!(r.usage.as_ref().unwrap().output_tokens, 10, "{r:?}");
    assert_eq!(r.usage.as_ref().unwrap().input_tokens, 84, "{r:?}");
    assert_eq!(llm.take_violations(), Vec::<String>::new());

    // With the run's own limit, the cut answer stands (a `length` stop: continued by a turn).
    llm.push(cut);
    llm.push_text("Continued.");
    let run = unique("run-anthropic-own-limit");
    let mut own = args.to_vec();
    own.extend(["--max-output-tokens", "1000"]);
    submit(&server, &queue, &run, &own, "Write a lot.");
    let r = ended(&server, &run, 0);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 4, "{r:?}");
    assert_eq!(reqs[3].body["max_tokens"], 1000);
}
