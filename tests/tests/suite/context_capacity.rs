//! Context capacity: a run compacts against what the provider takes as a
//! prompt, not the model's window. The strict mocks refuse a gpt-5 prompt over 272K tokens
//! and an Anthropic prompt whose `max_tokens` does not fit the window beside it, with the
//! real APIs' messages (`tests/src/mock_window.rs`); both count ~4 bytes of request JSON a
//! token and bill the prompt at that size, so the worker's usage follows what it sends.
//! Each run writes assistant texts of ~100K (or 60K) tokens, so eliding old tool outputs
//! frees nothing and only a summary brings the prompt back under the cap.

#![allow(clippy::unwrap_used)]

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common;

/// Text `n` of about `tokens` tokens (4 bytes each, in 400-byte words; texts differ, as
/// the same reply thrice would be a loop).
fn text_of(n: usize, tokens: usize) -> String {
    let word = format!("{n}{}", "x".repeat(398));
    vec![word; tokens / 100].join(" ")
}

/// Three different listings of the (empty) workspace: the same call thrice would be a loop.
const LISTINGS: [&str; 3] = ["{}", r#"{"path":"."}"#, r#"{"recursive":true}"#];

/// Whether the run's events say it summarized the conversation.
fn compacted(server: &DevServer, run: &str) -> bool {
    let watch = baton(server, &["watch", run, "--json"]).unwrap();
    watch.stdout.contains("summarized the conversation")
}

#[test]
fn a_gpt_5_run_growing_past_272k_input_tokens_compacts_and_completes() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    llm.enable_prompt_caching();
    let queue = unique("cap-gpt5");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    for (i, args) in LISTINGS.into_iter().enumerate() {
        let mut reply = MockOpenAi::tool_calls_reply(&[(&format!("call_{i}"), "list_files", args)]);
        reply["choices"][0]["message"]["content"] = json!(text_of(i, 100_000));
        reply["usage"] =
            json!({"prompt_tokens": 1, "completion_tokens": 100_000, "total_tokens": 100_001});
        llm.push(reply);
    }
    llm.push_text("SUMMARY: three listings of an empty workspace.");
    llm.push_text("Done within the cap.");
    let run = unique("run-cap-gpt5");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "openai", "--model", "gpt-5", "--no-approval"],
        "inspect the workspace",
    );
    let r = result(&server, &run, 0);
    assert_eq!(r["answer"], "Done within the cap.", "{r}");
    // No request went over the cap (the mock would have refused it and kept the violation).
    assert_eq!(llm.take_violations(), Vec::<String>::new());
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 5, "three turns, the summary, the answer");
    let sizes: Vec<u64> = reqs
        .iter()
        .map(|r| r.body.to_string().len() as u64 / 4)
        .collect();
    assert!(
        sizes[2] > 190_000,
        "the third turn carried two long texts: {sizes:?}"
    );
    assert!(sizes.iter().all(|s| *s < 272_000), "{sizes:?}");
    assert!(
        reqs[3].body.get("tools").is_none(),
        "the fourth request is the summary"
    );
    assert!(compacted(&server, &run));
}

#[test]
fn an_anthropic_run_compacts_before_prompt_and_max_tokens_pass_the_window() {
    let server = DevServer::start().unwrap();
    let llm = MockAnthropic::start().unwrap();
    llm.bill_prompt_size();
    let queue = unique("cap-claude");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-cap-test"),
        ],
    );
    for (i, args) in LISTINGS.into_iter().enumerate() {
        let mut reply = MockAnthropic::tool_use_reply_with_text(
            Some(&text_of(i, 60_000)),
            &[(&format!("toolu_{i}"), "list_files", args)],
        );
        reply["usage"]["output_tokens"] = json!(60_000);
        llm.push(reply);
    }
    llm.push_text("SUMMARY: three listings of an empty workspace.");
    llm.push_text("Done within the window.");
    let run = unique("run-cap-claude");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "--max-output-tokens",
            "32000",
            "--no-approval",
        ],
        "inspect the workspace",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Done within the window.", "{r:?}");
    assert_eq!(llm.take_violations(), Vec::<String>::new());
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 5, "three turns, the summary, the answer");
    // Each turn's request asked for the run's 32,000 output tokens: at 180K tokens of prompt
    // the third turn's answer would not have fit.
    assert_eq!(reqs[2].body["max_tokens"], 32_000);
    assert!(
        reqs[3].body.get("tools").is_none(),
        "the fourth request is the summary"
    );
    assert!(compacted(&server, &run));
}

/// A server whose window the worker does not know refuses a prompt as too long (vLLM's
/// message): the run summarizes its older turns and retries the turn (patch
/// `compact-on-overflow-v1`), where it used to end `context_overflow`.
#[test]
fn an_overflow_on_an_unknown_window_compacts_and_retries_the_turn() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("cap-overflow");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    for (i, args) in LISTINGS.into_iter().enumerate() {
        let mut reply = MockOpenAi::tool_calls_reply(&[(&format!("call_{i}"), "list_files", args)]);
        reply["choices"][0]["message"]["content"] = json!(format!("Listing {i}."));
        llm.push(reply);
    }
    llm.push_error(
        400,
        json!({"object": "error", "message": "This model's maximum context length is 4096 tokens. \
However, you requested 4200 tokens (4200 in the messages, 0 in the completion). Please reduce \
the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}),
    );
    llm.push_text("SUMMARY: listed the workspace.");
    llm.push_text("Done after the overflow.");
    let run = unique("run-cap-overflow");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--provider",
            "openai",
            "--model",
            "local-model",
            "--no-approval",
        ],
        "inspect the workspace",
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Done after the overflow.", "{r:?}");
    let reqs = llm.requests();
    assert_eq!(
        reqs.len(),
        6,
        "three turns, the refused one, the summary, the retry"
    );
    assert!(
        reqs[4].body.get("tools").is_none(),
        "the fifth request is the summary"
    );
    let retried = serde_json::to_string(&reqs[5].messages()).unwrap();
    assert!(
        retried.contains("SUMMARY: listed the workspace."),
        "{retried}"
    );
    assert!(
        !retried.contains("call_0"),
        "the oldest turn is summarized: {retried}"
    );
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    assert!(
        watch.stdout.contains("context overflow: nothing left"),
        "{watch}"
    );
}
