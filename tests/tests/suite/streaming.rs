//! Live model output: while `llm_generate` streams, `baton watch --json` shows
//! `assistant_delta` lines read from the call's heartbeat details, then the final `assistant`
//! line; a worker killed mid-stream gives attempt 2's deltas from its start, never a mix; the
//! deltas write nothing to the run's history.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use baton_tests::*;
use common::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(90);
/// How long the mock takes to write an answer.
const WRITING: Duration = Duration::from_secs(5);

/// A 2,000-word answer (one token a word for the mock), each word naming `tag`.
fn answer(tag: &str) -> String {
    (0..2_000)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The lines of `out` of `kind`.
fn of_kind<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["kind"] == kind).collect()
}

/// The text of the `assistant_delta` lines of `attempt`, joined.
fn streamed(lines: &[Value], attempt: u64) -> String {
    of_kind(lines, "assistant_delta")
        .iter()
        .filter(|l| l["assistant_delta"]["attempt"] == attempt)
        .map(|l| l["assistant_delta"]["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts the run's history has no event per delta: no signal or update at all, and far
/// fewer events than the `deltas` watch showed (a run of one model call has ~30).
fn assert_no_event_per_delta(server: &DevServer, run: &str, deltas: usize) {
    let history = server.workflow_history_json(run, None).unwrap();
    let events = history["events"].as_array().cloned().unwrap_or_default();
    let types: Vec<&str> = events
        .iter()
        .filter_map(|e| e["eventType"].as_str())
        .collect();
    assert!(
        !types
            .iter()
            .any(|t| t.contains("SIGNALED") || t.contains("UPDATE")),
        "{types:?}"
    );
    eprintln!("{deltas} deltas, {} history events", events.len());
    assert!(events.len() < 40, "{types:?}");
}

/// The `watch --json` lines up to the run's end; asserts the final `assistant` line says
/// `expected` and comes after at least 5 deltas, and returns the lines.
fn watched_to_the_end(watching: RunningCmd, expected: &str) -> Vec<Value> {
    let out = watching.wait(T).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let lines = out.json_lines().unwrap();
    let at = lines
        .iter()
        .position(|l| l["kind"] == "assistant")
        .expect("an assistant line");
    assert_eq!(lines[at]["assistant"]["text"], expected);
    let before = of_kind(&lines[..at], "assistant_delta").len();
    assert!(before >= 5, "{before} deltas before the assistant line");
    assert!(
        of_kind(&lines[at..], "assistant_delta").is_empty(),
        "no delta after the reply"
    );
    for d in of_kind(&lines, "assistant_delta") {
        assert_eq!(d["turn"], 1, "{d}");
        assert_eq!(d["seq"], Value::Null, "not an event: {d}");
        assert_eq!(d["at_ms"], Value::Null, "{d}");
    }
    lines
}

/// `n` workers calling `llm`, and their workspace root.
fn openai_fleet(
    server: &DevServer,
    llm: &MockOpenAi,
    queue: &str,
    n: usize,
) -> (tempfile::TempDir, Vec<Worker>) {
    let workspace = tempfile::tempdir().unwrap();
    let base = llm.base_url();
    let workers = fleet(
        server,
        queue,
        n,
        workspace.path(),
        &[("OPENAI_BASE_URL", base.as_str())],
    );
    (workspace, workers)
}

fn submit_openai(server: &DevServer, queue: &str, name: &str) -> String {
    submit(
        server,
        queue,
        &unique(name),
        &["--provider", "openai", "--no-approval"],
        "write a long answer",
    )
}

#[test]
fn watch_json_shows_the_answer_as_the_model_writes_it() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("streaming");
    let _workers = openai_fleet(&server, &llm, &queue, 1);
    let text = answer("w");
    llm.push_response(MockResponse::paced_stream(
        MockOpenAi::text_reply(&text),
        WRITING,
    ));
    let run = submit_openai(&server, &queue, "run-stream");
    let watching = baton_spawn(&server, &["watch", &run, "--json"], &[]).unwrap();
    let people = baton_spawn(&server, &["watch", &run], &[]).unwrap();
    // People see the text before the reply ends, and once.
    wait_until_blocking(T, "the start of the answer on screen", || {
        Ok(people.stdout_so_far().contains("w0 w1 w2").then_some(()))
    })
    .unwrap();
    assert!(
        !people.stdout_so_far().contains("w1999"),
        "streamed, not at the end"
    );
    let lines = watched_to_the_end(watching, &text);
    assert_eq!(streamed(&lines, 1), text, "the deltas add up to the answer");
    let shown = people.wait(T).unwrap();
    assert_eq!(shown.code, 0, "{shown}");
    assert_eq!(shown.stdout.matches("w1999").count(), 1, "{shown}");
    assert_eq!(shown.stdout.matches("w0 w1 w2").count(), 1, "{shown}");
    assert_eq!(shown.stdout.matches("── turn 1 ──").count(), 1, "{shown}");
    assert!(
        of_kind(&lines, "assistant_delta")
            .iter()
            .all(|l| l["assistant_delta"]["attempt"] == 1)
    );
    // Thousands of tokens, heartbeats ten times a second: not one history event for them.
    assert_no_event_per_delta(&server, &run, of_kind(&lines, "assistant_delta").len());
}

#[test]
fn a_worker_killed_mid_stream_gives_attempt_2_from_its_start_never_a_mix() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("stream-kill");
    let (_workspace, mut workers) = openai_fleet(&server, &llm, &queue, 2);
    let first = answer("a");
    let second = answer("b");
    for text in [&first, &second] {
        llm.push_response(MockResponse::paced_stream(
            MockOpenAi::text_reply(text),
            WRITING,
        ));
    }
    let run = submit_openai(&server, &queue, "run-stream-kill");
    let watching = baton_spawn(&server, &["watch", &run, "--json"], &[]).unwrap();
    let people = baton_spawn(&server, &["watch", &run], &[]).unwrap();
    // Mid-stream (some deltas shown), kill the worker writing it.
    wait_until_blocking(T, "deltas of attempt 1", || {
        let shown = watching.stdout_so_far();
        Ok((shown.matches("\"kind\":\"assistant_delta\"").count() >= 3).then_some(()))
    })
    .unwrap();
    let needle = format!("llm call started run_id=\"{run}\"");
    let victim = workers
        .iter()
        .position(|w| w.log().contains(&needle))
        .expect("a worker started the call");
    workers[victim].kill9();
    let lines = watched_to_the_end(watching, &second);

    let one = streamed(&lines, 1);
    assert!(
        !one.is_empty() && first.starts_with(&one),
        "attempt 1: a prefix of its text"
    );
    assert!(one.len() < first.len(), "attempt 1 was cut");
    assert_eq!(
        streamed(&lines, 2),
        second,
        "attempt 2 from its start, whole"
    );
    // Deltas never go back to an attempt once a later one has shown.
    let attempts: Vec<u64> = of_kind(&lines, "assistant_delta")
        .iter()
        .map(|l| l["assistant_delta"]["attempt"].as_u64().unwrap())
        .collect();
    assert!(attempts.windows(2).all(|w| w[0] <= w[1]), "{attempts:?}");
    assert!(attempts.contains(&2), "{attempts:?}");
    assert_eq!(llm.request_count(), 2);
    assert_no_event_per_delta(&server, &run, attempts.len());
    // People see attempt 1's text abandoned, then attempt 2's from its start, whole, once.
    let shown = people.wait(T).unwrap();
    assert_eq!(shown.code, 0, "{shown}");
    let (before, after) = shown
        .stdout
        .split_once("(model call retried, attempt 2: the text above is abandoned)")
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        before.contains("a0 a1") && !before.contains("b0 "),
        "{shown}"
    );
    assert!(!after.contains("a0 "), "{shown}");
    assert_eq!(after.matches(second.as_str()).count(), 1, "{shown}");
}
