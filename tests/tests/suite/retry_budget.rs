//! The worker's retry budget per provider (`[openai] max_attempts`, `backoff_initial_secs`,
//! ...) end to end: real worker and dev server against MockOpenAi answering 503s. The
//! workflow's retry policy is only an envelope; the worker's settings decide.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;

use super::providers::{llm_attempts, run_openai};

/// OpenAI's documented 503 ("The server is overloaded or not ready yet.").
fn unavailable() -> MockResponse {
    MockResponse::error(
        503,
        MockOpenAi::error_body("The server is overloaded or not ready yet.", "server_error"),
    )
}

fn budget_worker(
    server: &DevServer,
    llm: &MockOpenAi,
    queue: &str,
    env: &[(&str, &str)],
) -> Worker {
    let base = llm.base_url();
    let mut all = vec![("OPENAI_BASE_URL", base.as_str())];
    all.extend_from_slice(env);
    worker(server, queue, &all)
}

#[test]
fn a_provider_down_longer_than_the_workers_budget_ends_the_run_after_max_attempts() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("budget");
    let _w = budget_worker(
        &server,
        &llm,
        &queue,
        &[("BATON_OPENAI__MAX_ATTEMPTS", "2")],
    );
    llm.push_response(unavailable());
    llm.push_response(unavailable());
    // What a third attempt would get: it must never be asked for.
    llm.push_text("a third attempt was made");
    let (run, r) = run_openai(&server, &queue, "run-gave-up", 1);
    assert_eq!(r["reason"], "provider_error", "{r}");
    let detail = r["detail"].as_str().unwrap();
    assert!(
        detail.contains("openai is unavailable (HTTP 503): The server is overloaded"),
        "{r}"
    );
    assert!(
        detail.contains("gave up after 2 attempts (worker setting [openai] max_attempts)"),
        "{r}"
    );
    assert_eq!(llm.request_count(), 2);
    assert_eq!(llm.pending(), 1, "the third answer is still queued");
    assert_eq!(llm_attempts(&server, &run), vec![2]);
}

#[test]
fn the_first_retry_waits_the_workers_initial_backoff() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("backoff");
    let _w = budget_worker(
        &server,
        &llm,
        &queue,
        &[("BATON_OPENAI__BACKOFF_INITIAL_SECS", "3")],
    );
    llm.push_response(unavailable());
    llm.push_text("after a 3 s backoff");
    let (_, r) = run_openai(&server, &queue, "run-backoff", 0);
    assert_eq!(r["answer"], "after a 3 s backoff");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let gap = reqs[1].received_at - reqs[0].received_at;
    // The workflow's own policy would retry after 1 s.
    assert!(gap >= Duration::from_secs(3), "retried after {gap:?}");
}

/// A budget that cannot work stops the worker at start-up (exit 2), naming the key.
#[tokio::test(flavor = "multi_thread")]
async fn an_absurd_budget_stops_the_worker_naming_the_key() {
    let server = DevServer::start().unwrap();
    for (env, says) in [
        (
            ("BATON_OPENAI__MAX_ATTEMPTS", "0"),
            "openai.max_attempts = 0 is out of range: between 1 and 100",
        ),
        (
            ("BATON_ANTHROPIC__REQUEST_TIMEOUT_SECS", "86400"),
            "anthropic.request_timeout_secs = 86400 is out of range: between 1 and 3300",
        ),
    ] {
        let mut w = Worker::spawn(&server, &unique("bad-budget"), &[env]).unwrap();
        let exit = w.wait_exit(Duration::from_secs(60)).await;
        let log = w.log();
        assert_eq!(exit.and_then(|e| e.code()), Some(2), "{env:?}: {log}");
        assert!(log.contains(says), "{env:?}: {log}");
    }
}

/// OpenAI's 429 "Request too large ... on tokens per min" refuses one
/// request that is over the per-minute limit, however long one waits. It ends the run at once
/// with the reason, instead of 8 attempts over minutes.
#[test]
fn a_request_too_large_for_the_rate_limit_is_not_retried() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("too-large");
    let _w = budget_worker(&server, &llm, &queue, &[]);
    let body = serde_json::json!({"error": {
        "message": "Request too large for gpt-4o in organization org-mock on tokens per min \
                    (TPM): Limit 30000, Requested 36278. The input or output tokens must be \
                    reduced in order to run successfully.",
        "type": "tokens", "param": null, "code": "rate_limit_exceeded"}});
    llm.push_response(MockResponse::error(429, body).header("retry-after", "1"));
    llm.push_text("a retry was made");
    let (run, r) = run_openai(&server, &queue, "run-too-large", 1);
    assert_eq!(r["reason"], "provider_error", "{r}");
    let detail = r["detail"].as_str().unwrap();
    assert!(
        detail.contains("Requested 36278") && detail.contains("retrying cannot help"),
        "{r}"
    );
    assert_eq!(llm_attempts(&server, &run), vec![1]);
    assert_eq!(llm.pending(), 1, "no second attempt");
}
