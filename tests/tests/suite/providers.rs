//! Providers end to end: real worker and dev server against local servers speaking the OpenAI
//! and Anthropic wire formats, including every class of provider failure.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

fn openai_worker(server: &DevServer, llm: &MockOpenAi, queue: &str) -> Worker {
    let base = llm.base_url();
    worker(server, queue, &[("OPENAI_BASE_URL", base.as_str())])
}

/// Submits with the openai provider and waits for the result with the given exit code.
pub(super) fn run_openai(
    server: &DevServer,
    queue: &str,
    name: &str,
    code: i32,
) -> (String, Value) {
    let run = unique(name);
    let out = baton_with_timeout(
        server,
        &[
            "submit",
            "--task-queue",
            queue,
            "--id",
            &run,
            "--provider",
            "openai",
            "--no-approval",
            "--wait",
            "--json",
            "go",
        ],
        &[],
        None,
        Duration::from_secs(150),
    )
    .unwrap();
    assert_eq!(out.code, code, "{out}");
    (run, out.json().unwrap())
}

/// Attempts of the `llm_generate` activity recorded in a run's history.
pub(super) fn llm_attempts(server: &DevServer, run: &str) -> Vec<u64> {
    let history = server.workflow_history_json(run, None).unwrap();
    let events = history["events"].as_array().cloned().unwrap_or_default();
    let llm_ids: Vec<String> = events
        .iter()
        .filter(|e| {
            e["activityTaskScheduledEventAttributes"]["activityType"]["name"] == "llm_generate"
        })
        .map(|e| e["eventId"].to_string().trim_matches('"').to_owned())
        .collect();
    events
        .iter()
        .filter_map(|e| {
            let a = &e["activityTaskStartedEventAttributes"];
            let scheduled = a["scheduledEventId"]
                .to_string()
                .trim_matches('"')
                .to_owned();
            llm_ids
                .contains(&scheduled)
                .then(|| a["attempt"].as_u64().unwrap_or(1))
        })
        .collect()
}

#[test]
fn rate_limits_and_server_errors_are_ridden_through() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("transient");
    let _w = openai_worker(&server, &llm, &queue);

    // 429 with Retry-After: 2, then success: the retry waits as asked.
    llm.push_response(
        MockResponse::error(429, MockOpenAi::rate_limit_body()).header("retry-after", "2"),
    );
    llm.push_text("after the rate limit");
    let (_, r) = run_openai(&server, &queue, "run-429", 0);
    assert_eq!(r["answer"], "after the rate limit");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let gap = reqs[1].received_at - reqs[0].received_at;
    assert!(gap >= Duration::from_secs(2), "retried after {gap:?}");

    // Three 500s, then success.
    for _ in 0..3 {
        llm.push_error(
            500,
            MockOpenAi::error_body("upstream exploded", "server_error"),
        );
    }
    llm.push_text("after three 500s");
    let (run, r) = run_openai(&server, &queue, "run-500", 0);
    assert_eq!(r["answer"], "after three 500s");
    assert_eq!(llm.request_count(), 2 + 4);
    assert_eq!(llm_attempts(&server, &run), vec![4]);

    // A stream cut mid-way is retried.
    llm.push_response(MockResponse::cut_stream(MockOpenAi::text_reply(
        "this never arrives whole",
    )));
    llm.push_text("after the cut");
    let (_, r) = run_openai(&server, &queue, "run-cut", 0);
    assert_eq!(r["answer"], "after the cut");
    assert_eq!(llm.request_count(), 6 + 2);
    assert_eq!(
        llm.requests()[6].body["stream"],
        true,
        "streaming is the default"
    );
}

#[test]
fn status_shows_a_model_call_riding_out_a_rate_limit() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("retrying");
    let keys = format!("k1={}", codec_key());
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[
            ("OPENAI_BASE_URL", base.as_str()),
            ("BATON_CODEC_KEYS", keys.as_str()),
        ],
    );
    // A 429 asking for a minute: the run waits for its second attempt long enough to look at.
    llm.push_response(
        MockResponse::error(429, MockOpenAi::rate_limit_body()).header("retry-after", "60"),
    );
    let run = unique("run-retrying");
    let with_keys = [("BATON_CODEC_KEYS", keys.as_str())];
    let out = baton_with(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--provider",
            "openai",
            "--no-approval",
            "go",
        ],
        &with_keys,
        None,
    )
    .unwrap();
    assert_eq!(out.code, 0, "{out}");

    let status = wait_until_blocking(T, "the model call waiting for its retry", || {
        let v = baton_with(&server, &["status", &run, "--json"], &with_keys, None)?.json()?;
        Ok((v["activities"][0]["attempt"] == 2).then_some(v))
    })
    .unwrap();
    assert_eq!(status["state"], "THINKING", "{status}");
    let a = &status["activities"][0];
    assert_eq!(a["activity"], "llm_generate", "{status}");
    assert_eq!(a["state"], "SCHEDULED", "{status}");
    // The workflow's envelope; the worker's budget is in the failure.
    assert_eq!(a["maximum_attempts"], 100, "{status}");
    assert_eq!(
        a["last_failure"],
        "rate limited by openai (HTTP 429): Rate limit reached for requests (mock); \
         attempt 1 of 8 (worker setting [openai] max_attempts)",
        "{status}"
    );
    let wait_ms = a["next_attempt_at_ms"].as_i64().unwrap() - now_ms();
    assert!(
        (30_000..=61_000).contains(&wait_ms),
        "next attempt in {wait_ms} ms"
    );

    let human = baton_with(&server, &["status", &run], &with_keys, None).unwrap();
    assert_eq!(human.code, 0, "{human}");
    assert!(
        human
            .stdout
            .contains("now:     model call: retrying: attempt 2 in ")
            && human
                .stdout
                .contains("; last error: rate limited by openai (HTTP 429)"),
        "{human}"
    );
    // `watch` tells about the retry too (on stderr: its stdout stays the run's events).
    let mut watching = baton_spawn(&server, &["watch", &run], &with_keys).unwrap();
    wait_until_blocking(T, "watch to tell about the retry", || {
        let told = watching.stderr_so_far();
        Ok((told.contains("· model call: retrying: attempt 2 in ")
            && told.contains("last error: rate limited by openai"))
        .then_some(()))
    })
    .unwrap();
    watching.signal(Signal::SIGINT).unwrap();
    let watched = watching.wait(T).unwrap();
    assert_eq!(watched.code, 3, "Ctrl-C detaches: {watched}");
    assert!(
        watched
            .stderr
            .contains("· model call: retrying: attempt 2 in ")
            && watched
                .stderr
                .contains("last error: rate limited by openai"),
        "{watched}"
    );

    let out = baton_with(&server, &["cancel", &run], &with_keys, None).unwrap();
    assert_eq!(out.code, 0, "{out}");
    let ended = wait_until_blocking(T, "the run cancelled", || {
        let v = baton_with(&server, &["status", &run, "--json"], &with_keys, None)?.json()?;
        Ok((v["state"] == "CANCELLED").then_some(v))
    })
    .unwrap();
    assert_eq!(ended["activities"], json!([]), "{ended}");
    assert_eq!(
        llm.request_count(),
        1,
        "the retry never came within the test"
    );
}

/// Milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn an_auth_error_ends_the_run_at_once_without_retries() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("auth");
    let _w = openai_worker(&server, &llm, &queue);
    llm.push_error(
        401,
        json!({"error": {"message": "Incorrect API key provided: sk-***", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    );
    let started = Instant::now();
    let (run, r) = run_openai(&server, &queue, "run-401", 1);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r["reason"], "provider_error");
    assert!(
        r["detail"]
            .as_str()
            .unwrap()
            .contains("Incorrect API key provided"),
        "{r}"
    );
    assert_eq!(llm.request_count(), 1);
    assert_eq!(
        llm_attempts(&server, &run),
        vec![1],
        "no retries in the history"
    );
}

#[test]
fn a_context_overflow_trims_old_tool_outputs_then_summarizes_and_retries() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("overflow");
    let _w = openai_worker(&server, &llm, &queue);
    let big = |i: usize| {
        json!({ "command": format!("head -c 3000 /dev/zero | tr '\\0' x # {i}") }).to_string()
    };
    for i in 0..3 {
        llm.push_tool_calls(&[(&format!("c{i}"), "shell", &big(i))]);
    }
    let overflow = json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}});
    llm.push_error(400, overflow.clone());
    llm.push_text("fits now");
    let (run, r) = run_openai(&server, &queue, "run-overflow", 0);
    assert_eq!(r["answer"], "fits now");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 5);
    let tool_contents = |req: &CapturedRequest| -> Vec<String> {
        req.messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    };
    let failed = tool_contents(&reqs[3]);
    let retried = tool_contents(&reqs[4]);
    assert!(failed[0].contains("xxxxxxxx"));
    assert!(
        retried[0].contains("were removed to fit the context window"),
        "{}",
        retried[0]
    );
    assert_eq!(retried[1], failed[1], "recent outputs stay intact");
    assert_eq!(retried[2], failed[2]);
    // The trim is one of the run's events (the status memo is refreshed only on state
    // changes, so the history need not carry its text).
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    assert!(
        watch
            .stdout
            .contains("context overflow: removed 1 old tool outputs"),
        "{watch}"
    );

    // Overflowing again after the trim summarizes the older turns and retries;
    // a third overflow in the same turn ends the run with context_overflow.
    for i in 0..3 {
        llm.push_tool_calls(&[(&format!("d{i}"), "shell", &big(i))]);
    }
    llm.push_error(400, overflow.clone());
    llm.push_error(400, overflow.clone());
    llm.push_text("SUMMARY: three shell calls printed x's.");
    llm.push_error(400, overflow);
    let before = llm.requests().len();
    let (run, r) = run_openai(&server, &queue, "run-overflow-2", 1);
    assert_eq!(r["reason"], "context_overflow");
    let reqs = llm.requests();
    assert_eq!(
        reqs.len() - before,
        7,
        "three turns, two overflows, the summary, the last"
    );
    assert!(
        reqs[before + 5].body.get("tools").is_none(),
        "the summary request"
    );
    let last = serde_json::to_string(&reqs[before + 6].messages()).unwrap();
    assert!(last.contains("SUMMARY: three shell calls"), "{last}");
    let watch = baton(&server, &["watch", &run, "--json"]).unwrap();
    assert!(
        watch.stdout.contains("summarizing the older turns"),
        "{watch}"
    );
}

#[test]
fn killing_the_worker_during_a_streaming_call_moves_it_to_another_worker() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    let queue = unique("stream-kill");
    let base = llm.base_url();
    let workspace = tempfile::tempdir().unwrap();
    let mut workers = fleet(
        &server,
        &queue,
        2,
        workspace.path(),
        &[("OPENAI_BASE_URL", base.as_str())],
    );
    llm.push_response(MockResponse::slow_stream(
        MockOpenAi::text_reply("too slow to matter"),
        Duration::from_secs(120),
    ));
    llm.push_text("answered by the survivor");
    let run = unique("run-stream-kill");
    submit(
        &server,
        &queue,
        &run,
        &["--provider", "openai", "--no-approval"],
        "go",
    );
    let needle = format!("llm call started run_id=\"{run}\"");
    let victim = wait_until_blocking(T, "a worker to start the call", || {
        Ok(workers.iter().position(|w| w.log().contains(&needle)))
    })
    .unwrap();
    // Kill only once the stream is open: the log line comes before the activity has loaded
    // the conversation and sent its request.
    wait_until_blocking(T, "the stream to open", || {
        Ok((llm.request_count() >= 1).then_some(()))
    })
    .unwrap();
    workers[victim].kill9();
    let out = baton_with_timeout(
        &server,
        &["result", &run, "--wait", "--json"],
        &[],
        None,
        Duration::from_secs(150),
    );
    let Ok(out) = out.and_then(|o| o.ensure_success()) else {
        // Say where it stood: the survivor's log and the run's history.
        panic!(
            "the run did not finish on the survivor.\n--- survivor log ---\n{}\n--- history \
             ---\n{}",
            workers[1 - victim].log(),
            server.workflow_history_text(&run).unwrap_or_default()
        );
    };
    let r = out.json().unwrap();
    assert_eq!(r["answer"], "answered by the survivor");
    assert!(workers[1 - victim].log().contains(&needle));
    assert_eq!(llm.request_count(), 2);
}

#[test]
fn anthropic_approval_flow_and_wire_format() {
    const KEY: &str = "sk-ant-test-4c1d-never-in-history";
    let server = DevServer::start().unwrap();
    let llm = MockAnthropic::start().unwrap();
    let queue = unique("anthropic");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", KEY),
        ],
    );
    llm.push_tool_use(&[
        ("toolu_01", "list_files", "{}"),
        ("toolu_02", "shell", r#"{"command":"echo from-anthropic"}"#),
        ("toolu_03", "shell", r#"{"command":"touch denied.txt"}"#),
    ]);
    llm.push_text("Listed, echoed, and respected the denial.");
    let run = unique("run-anthropic");
    submit(
        &server,
        &queue,
        &run,
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-test",
            "--require-approval",
            "shell",
        ],
        "Use the tools.",
    );
    let status = wait_state(&server, &run, "AWAITING_APPROVAL", T);
    let pending: Vec<&str> = status["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(pending, vec!["toolu_02", "toolu_03"]);
    assert_eq!(
        baton(&server, &["approve", &run, "toolu_02"]).unwrap().code,
        0
    );
    assert_eq!(
        baton(
            &server,
            &[
                "deny",
                &run,
                "toolu_03",
                "--reason",
                "no files",
                "--approver",
                "ann"
            ]
        )
        .unwrap()
        .code,
        0
    );
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "Listed, echoed, and respected the denial.");

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    for req in &reqs {
        assert_eq!(req.path, "/v1/messages");
        assert_eq!(req.headers.get("x-api-key").map(String::as_str), Some(KEY));
        assert!(req.headers.contains_key("anthropic-version"));
        assert_eq!(req.body["model"], "claude-test");
        assert!(
            req.body["max_tokens"].as_u64().unwrap() > 0,
            "max_tokens is always sent"
        );
        assert!(
            req.body["system"][0]["text"]
                .as_str()
                .unwrap()
                .contains("baton")
        );
        let names: Vec<&str> = req.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec![
                "shell",
                "read_file",
                "write_file",
                "edit_file",
                "list_files",
                "search_files",
                "glob"
            ]
        );
        assert_eq!(req.body["tools"][0]["input_schema"]["type"], "object");
        let roles: Vec<&str> = req.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert!(!roles.contains(&"system"), "system is top-level");
    }
    let messages = reqs[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(
        messages.len(),
        3,
        "user, assistant, user(tool results): {messages:?}"
    );
    let uses: Vec<&Value> = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .collect();
    assert_eq!(uses.len(), 3);
    assert_eq!(uses[1]["input"], json!({"command": "echo from-anthropic"}));
    let results: Vec<&Value> = messages[2]["content"].as_array().unwrap().iter().collect();
    assert_eq!(results.len(), 3);
    assert_eq!(results[1]["tool_use_id"], "toolu_02");
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("from-anthropic")
    );
    assert!(results[1].get("is_error").is_none_or(|e| e == false));
    assert_eq!(results[2]["tool_use_id"], "toolu_03");
    assert_eq!(results[2]["is_error"], true);
    assert!(
        results[2]["content"]
            .as_str()
            .unwrap()
            .contains("denied by ann: no files")
    );
    assert!(!history_text(&server, &run).contains(KEY));
}

#[test]
fn openai_provider_round_trip_and_no_key_in_history() {
    const KEY: &str = "sk-test-8f3a2c9d1e-never-in-history";
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    llm.push_tool_calls(&[
        ("call_a", "list_files", "{}"),
        (
            "call_b",
            "shell",
            r#"{"command":"echo hello-from-shell key=[$OPENAI_API_KEY]"}"#,
        ),
    ]);
    llm.push_text("The workspace is empty and the shell said hello.");
    let queue = unique("openai");
    let base = llm.base_url();
    let _w = worker(
        &server,
        &queue,
        &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", KEY)],
    );
    let run = submit(
        &server,
        &queue,
        &unique("run-openai"),
        &[
            "--provider",
            "openai",
            "--model",
            "gpt-test",
            "--require-approval",
            "shell",
        ],
        "Say hello from the shell.",
    );
    let status = wait_status(&server, &run, "AWAITING_APPROVAL", T);
    assert_eq!(status.status.pending[0].call_id, "call_b");
    assert_eq!(baton(&server, &["approve", &run, "--all"]).unwrap().code, 0);
    let r = ended(&server, &run, 0);
    assert_eq!(r.answer, "The workspace is empty and the shell said hello.");

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    for req in &reqs {
        assert_eq!(req.path, "/v1/chat/completions");
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(req.body["model"], "gpt-test");
        let tools: Vec<&str> = req.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            tools,
            vec![
                "shell",
                "read_file",
                "write_file",
                "edit_file",
                "list_files",
                "search_files",
                "glob"
            ]
        );
        let shell = &req.body["tools"][0]["function"];
        assert_eq!(shell["parameters"]["type"], "object");
        assert_eq!(shell["parameters"]["required"], json!(["command"]));
    }
    let first = reqs[0].messages();
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["role"], "system");
    assert_eq!(
        first[1],
        json!({"role": "user", "content": "Say hello from the shell."})
    );
    let second = reqs[1].messages();
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_a");
    assert_eq!(second[2]["tool_calls"][1]["function"]["name"], "shell");
    assert_eq!(second[3]["tool_call_id"], "call_a");
    assert_eq!(second[4]["tool_call_id"], "call_b");
    let out = second[4]["content"].as_str().unwrap();
    assert!(
        out.contains("exit code: 0") && out.contains("hello-from-shell"),
        "{out}"
    );
    assert!(
        out.contains("key=[]"),
        "the worker's API key leaked into a tool's environment: {out}"
    );

    // The key reached the provider but never the history (payloads decoded before the grep).
    let text = history_text(&server, &run);
    assert!(text.contains("hello-from-shell"), "decoding works");
    assert!(
        !text.contains(KEY),
        "the API key is in the workflow history"
    );
    let raw = serde_json::to_string(&server.workflow_history_json(&run, None).unwrap()).unwrap();
    assert!(!raw.contains(KEY));
}

#[test]
fn provider_errors_end_the_run_with_the_provider_message() {
    let server = DevServer::start().unwrap();
    let llm = MockOpenAi::start().unwrap();
    llm.push_error(
        401,
        json!({"error": {"message": "Incorrect API key provided: sk-bad", "type": "invalid_request_error"}}),
    );
    let queue = unique("autherr");
    let base = llm.base_url();
    let _w = worker(&server, &queue, &[("OPENAI_BASE_URL", base.as_str())]);
    let run = submit(
        &server,
        &queue,
        &unique("run-401"),
        &["--provider", "openai"],
        "go",
    );
    let r = ended(&server, &run, 1);
    assert_eq!(r.status, "FAILED");
    assert_eq!(r.reason, "provider_error");
    assert!(r.detail.contains("Incorrect API key provided"), "{r:?}");
    assert_eq!(llm.request_count(), 1, "a 401 is not retried");
}
