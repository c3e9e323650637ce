//! What a run cost, end to end: a real worker with a `[models]` price for the mock's model,
//! MockOpenAi billing as OpenAI's automatic prompt caching does, and the run's
//! `result --json` usage (cache reads from turn 2 on, `cost_usd` to the cent); `--max-cost`
//! ending a run as `budget_exceeded`.

#![allow(clippy::unwrap_used)]

use crate::common;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::Value;

/// The mock's model and its price in the worker's settings (USD per million tokens): large,
/// so that a few thousand tokens cost whole cents.
const MODEL: &str = "mock-cached";
const INPUT: f64 = 100.0;
const CACHED: f64 = 10.0;
const OUTPUT: f64 = 400.0;

/// A dev server, MockOpenAi billing as prompt caching does with a three-tool-turn script
/// queued, and a worker pointed at it with the price of [`MODEL`] in its settings file.
struct Priced {
    server: DevServer,
    llm: MockOpenAi,
    queue: String,
    _worker: Worker,
    _settings: tempfile::TempDir,
}

impl Priced {
    fn start(name: &str) -> Self {
        let server = DevServer::start().unwrap();
        let queue = unique(name);
        let llm = MockOpenAi::start().unwrap();
        llm.enable_prompt_caching();
        script_turns(&llm);
        let settings = tempfile::tempdir().unwrap();
        let file = settings.path().join("baton.toml");
        std::fs::write(
            &file,
            format!(
                "[models.\"{MODEL}\"]\ncontext_window = 64000\ninput_usd_per_mtok = {INPUT:?}\n\
                 cached_input_usd_per_mtok = {CACHED:?}\noutput_usd_per_mtok = {OUTPUT:?}\n"
            ),
        )
        .unwrap();
        let base = llm.base_url();
        let worker = worker(
            &server,
            &queue,
            &[
                ("OPENAI_BASE_URL", base.as_str()),
                ("BATON_CONFIG", file.to_str().unwrap()),
            ],
        );
        Self {
            server,
            llm,
            queue,
            _worker: worker,
            _settings: settings,
        }
    }

    /// Submits [`long_task`] to [`MODEL`] without approvals, with `extra` flags.
    fn submit(&self, name: &str, extra: &[&str]) -> String {
        let mut args = vec!["--provider", "openai", "--model", MODEL, "--no-approval"];
        args.extend_from_slice(extra);
        submit(
            &self.server,
            &self.queue,
            &unique(name),
            &args,
            &long_task(),
        )
    }
}

/// A task long enough (with the system prompt and tools) to pass the 1024-token minimum of
/// prompt caching on the first call.
fn long_task() -> String {
    let line = "List the files of the workspace, one turn at a time, and report what you see.\n";
    line.repeat(60)
}

/// Queues three turns of read-only tool calls (each different: the loop guard stops a run
/// that repeats itself), then a final answer.
fn script_turns(llm: &MockOpenAi) {
    llm.push_tool_calls(&[("call_0", "list_files", "{}")]);
    llm.push_tool_calls(&[("call_1", "glob", r#"{"pattern":"*"}"#)]);
    llm.push_tool_calls(&[("call_2", "search_files", r#"{"pattern":"files"}"#)]);
    llm.push_text("Done: I listed the files.");
}

/// What the price table makes of the usage the mock reported, recomputed here.
fn expected_cost(reported: &[Value]) -> f64 {
    reported
        .iter()
        .map(|u| {
            let prompt = u["prompt_tokens"].as_f64().unwrap();
            let cached = u["prompt_tokens_details"]["cached_tokens"]
                .as_f64()
                .unwrap();
            let output = u["completion_tokens"].as_f64().unwrap();
            ((prompt - cached) * INPUT + cached * CACHED + output * OUTPUT) / 1e6
        })
        .sum()
}

fn cents(usd: f64) -> i64 {
    (usd * 100.0).round() as i64
}

#[test]
fn cached_prompt_tokens_and_the_cost_of_a_run_match_the_price_table() {
    let priced = Priced::start("cost");
    let (server, llm) = (&priced.server, &priced.llm);
    let run = priced.submit("run-cost", &[]);
    let done = result(server, &run, 0);
    assert_eq!(done["reason"], "completed", "{done}");
    assert_eq!(done["turns"], 4, "{done}");
    assert_eq!(llm.violations(), Vec::<String>::new());

    // Per turn, as the mock billed it: nothing cached on the first call, a cached prefix
    // from the second on.
    let reported = llm.reported_usage();
    assert_eq!(reported.len(), 4, "{reported:?}");
    let cached: Vec<u64> = reported
        .iter()
        .map(|u| {
            u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(cached[0], 0, "{reported:?}");
    for (turn, tokens) in cached.iter().enumerate().skip(1) {
        assert!(
            *tokens >= 1024 && tokens % 128 == 0,
            "turn {}: {tokens} cached tokens; {reported:?}",
            turn + 1
        );
    }

    // The run's totals: the cached tokens summed, the cost as the price table gives it.
    let usage = &done["usage"];
    assert_eq!(
        usage["cache_read_tokens"].as_u64().unwrap(),
        cached.iter().sum::<u64>(),
        "{done}"
    );
    let prompt: u64 = reported
        .iter()
        .map(|u| u["prompt_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(usage["input_tokens"].as_u64().unwrap(), prompt, "{done}");
    let expected = expected_cost(&reported);
    let cost = usage["cost_usd"].as_f64().unwrap();
    assert!(expected > 0.05, "the prices make whole cents: {expected}");
    assert_eq!(cents(cost), cents(expected), "{cost} vs {expected}: {done}");
    assert!((cost - expected).abs() < 1e-5, "{cost} vs {expected}");

    // status shows the same, in JSON and for people.
    let status = baton(server, &["status", &run, "--json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["usage"]["cost_usd"], usage["cost_usd"], "{status}");
    let human = baton(server, &["status", &run]).unwrap();
    let share = cached.iter().sum::<u64>() * 100 / prompt;
    assert!(
        human
            .stdout
            .contains(&format!("cost:    ~${:.2} (cache read {share}", cost))
            || human
                .stdout
                .contains(&format!("cost:    ~${:.2} (cache read {}", cost, share + 1)),
        "{human}"
    );
}

#[test]
fn max_cost_ends_a_run_as_budget_exceeded() {
    let priced = Priced::start("cost-budget");
    let (server, llm) = (&priced.server, &priced.llm);
    let run = priced.submit("run-cost-budget", &["--max-cost", "0.05"]);
    let ended = result(server, &run, 1);
    assert_eq!(ended["reason"], "budget_exceeded", "{ended}");
    // The first call alone costs more than $0.05 (its ~1100+ prompt tokens at $100 per
    // million): the guard before the second call ends the run.
    let reported = llm.reported_usage();
    assert_eq!(reported.len(), 1, "{reported:?}");
    let cost = expected_cost(&reported);
    assert!(cost > 0.05, "{cost}");
    assert_eq!(
        ended["detail"],
        format!("the run cost ${cost:.2}, its budget is $0.05"),
        "{ended}"
    );
    assert_eq!(
        cents(ended["usage"]["cost_usd"].as_f64().unwrap()),
        cents(cost)
    );
}

/// `reply` without its `usage` (what llama.cpp-style servers and some proxies answer).
fn without_usage(mut reply: Value) -> Value {
    reply.as_object_mut().unwrap().remove("usage");
    reply
}

/// A server that reports no usage. The run's usage is estimated from the
/// text, never 0 tokens, and says how many calls were estimated (`estimated_calls`); a token
/// budget still ends the run (it would never trip on 0 tokens).
#[test]
fn usage_a_server_does_not_send_is_estimated_marked_and_budgets_hold() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("no-usage");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let calls = MockOpenAi::tool_calls_reply(&[("call_1", "list_files", "{}")]);
    llm.push(without_usage(calls.clone()));
    llm.push(without_usage(MockOpenAi::text_reply("Nothing here.")));
    let run = submit(
        &server,
        &queue,
        &unique("run-no-usage"),
        &["--provider", "openai", "--no-approval"],
        "look",
    );
    let done = result(&server, &run, 0);
    let usage = &done["usage"];
    assert_eq!(usage["estimated_calls"], 2, "{done}");
    let input = usage["input_tokens"].as_u64().unwrap();
    let output = usage["output_tokens"].as_u64().unwrap();
    // The system prompt alone is a few KB: hundreds of tokens at ~4 bytes a token.
    assert!(input > 200 && output > 0, "{done}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), input + output);
    // Both requests streamed and asked for usage in the stream.
    for req in llm.requests() {
        assert_eq!(req.body["stream_options"]["include_usage"], true);
    }

    // The same server under a token budget: the estimate of the first call trips it.
    llm.push(without_usage(calls));
    llm.push(without_usage(MockOpenAi::text_reply("never sent")));
    let run = submit(
        &server,
        &queue,
        &unique("run-no-usage-budget"),
        &[
            "--provider",
            "openai",
            "--no-approval",
            "--max-tokens",
            "100",
        ],
        "look",
    );
    let ended = ended(&server, &run, 1);
    assert_eq!(ended.reason, "budget_exceeded", "{ended:?}");
    assert_eq!(
        ended.usage.as_ref().unwrap().estimated_calls,
        1,
        "{ended:?}"
    );
    assert_eq!(llm.pending(), 1, "the second call was never made");
}

/// An Anthropic reply that reports `input` prompt tokens.
fn reporting(mut reply: Value, input: u32) -> Value {
    reply["usage"]["input_tokens"] = serde_json::json!(input);
    reply
}

/// A run on MockAnthropic whose first model call is cut twice by an in-stream
/// `overloaded_error` after `message_start` reported 100,000 prompt tokens (billed), then
/// answered with a tool call; the second call answers. Returns the run's result.
fn billed_twice_then_answered(extra: &[&str], expect_code: i32) -> Value {
    let server = DevServer::start().unwrap();
    let llm = MockAnthropic::start().unwrap();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    llm.set_responder(std::sync::Arc::new(move |_req| {
        let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tool = reporting(
            MockAnthropic::tool_use_reply(&[("toolu_1", "list_files", "{}")]),
            100_000,
        );
        Some(match n {
            0 | 1 => MockResponse::stream_error(tool, MockAnthropic::overloaded_body()),
            2 => MockResponse::ok(tool),
            _ => MockResponse::ok(MockAnthropic::text_reply("Done.")),
        })
    }));
    let queue = unique("billed");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("ANTHROPIC_BASE_URL", base.as_str())]);
    let mut args = vec![
        "--provider",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
        "--no-approval",
    ];
    args.extend_from_slice(extra);
    let run = submit(&server, &queue, &unique("billed"), &args, "look around");
    let r = result(&server, &run, expect_code);
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) >= 3, "{r}");
    r
}

#[test]
fn attempts_the_provider_billed_before_failing_count_in_usage_cost_and_the_budget() {
    // Without a budget: three attempts of 100,000 prompt tokens, then the short second call.
    let r = billed_twice_then_answered(&[], 0);
    assert_eq!(r["reason"], "completed", "{r}");
    let input = r["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        (300_000..310_000).contains(&input),
        "the two billed attempts count: {r}"
    );
    assert_eq!(r["usage"]["llm_calls"], 2, "answered calls: {r}");
    // $3 per million prompt tokens (claude-sonnet-4-5): at least $0.90, not the $0.30 of the
    // answered attempt alone.
    let cost = r["usage"]["cost_usd"].as_f64().unwrap();
    assert!((0.90..0.95).contains(&cost), "{r}");

    // A budget between what the answered attempt cost and what was billed: the run stops.
    let r = billed_twice_then_answered(&["--max-cost", "0.5"], 1);
    assert_eq!(r["reason"], "budget_exceeded", "{r}");
}
