//! Smoke tests of the E2E harness itself (no baton binaries needed).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use baton_tests::*;
use pretty_assertions::assert_eq;
use serde_json::json;

#[test]
fn dev_server_starts_serves_restarts_and_stops() {
    let mut server = DevServer::start().unwrap();
    let port = server.port();
    assert_eq!(server.address(), format!("127.0.0.1:{port}"));
    assert_eq!(server.namespace(), "default");
    assert!(server.is_running());
    assert!(port_accepts(port));

    let list = server.temporal(&["workflow", "list"]).unwrap();
    assert!(list.success(), "{list}");

    // A workflow without a worker: its input payload is in the history.
    let wf = unique("harness-wf");
    let q = unique("harness-tq");
    server
        .temporal(&[
            "workflow",
            "start",
            "--type",
            "Nope",
            "--task-queue",
            &q,
            "--workflow-id",
            &wf,
            "--input",
            r#"{"secret":"s3cr3t-in-input"}"#,
        ])
        .unwrap()
        .ensure_success()
        .unwrap();
    assert_eq!(
        server.workflow_status(&wf).unwrap(),
        "WORKFLOW_EXECUTION_STATUS_RUNNING"
    );
    let history = server.workflow_history_json(&wf, None).unwrap();
    assert!(!history.to_string().contains("s3cr3t-in-input"));
    assert!(decode_history_payloads(&history).contains("s3cr3t-in-input"));
    assert!(
        server
            .workflow_history_text(&wf)
            .unwrap()
            .contains("s3cr3t-in-input")
    );

    // Restart on the same port and db: the workflow survives.
    let old_pid = server.pid();
    server.restart().unwrap();
    assert_ne!(server.pid(), old_pid);
    assert_eq!(server.port(), port);
    assert_eq!(
        server.workflow_status(&wf).unwrap(),
        "WORKFLOW_EXECUTION_STATUS_RUNNING"
    );

    let pid = server.pid();
    server.stop();
    assert!(!server.is_running());
    assert!(!port_accepts(port), "port {port} still accepts connections");
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    server.stop(); // idempotent
}

#[test]
fn fake_worker_lifecycle() {
    let server = DevServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fake-worker.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         trap 'echo got TERM; exit 7' TERM\n\
         echo \"addr=$TEMPORAL_ADDRESS ns=$TEMPORAL_NAMESPACE q=$BATON_TASK_QUEUE ws=$BATON_WORKSPACE_ROOT log=$RUST_LOG extra=$EXTRA\"\n\
         echo 'worker started' >&2\n\
         while :; do sleep 0.1; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = dir.path().join("shared-ws");

    let q = unique("fake-tq");
    let mut w = Worker::spawn_program(&script, &server, &q, Some(&ws), &[("EXTRA", "x1")]).unwrap();
    w.wait_ready_blocking(Duration::from_secs(10)).unwrap();
    assert!(w.is_running());
    let log = w.log();
    assert!(
        log.contains(&format!(
            "addr={} ns=default q={q} ws={} log=info extra=x1",
            server.address(),
            ws.display()
        )),
        "{log}"
    );
    assert!(ws.is_dir());
    let status = w.terminate().unwrap();
    assert_eq!(status.code(), Some(7));
    assert!(!w.is_running());
    assert!(w.log().contains("got TERM"));

    let mut w2 = Worker::spawn_program(&script, &server, &q, Some(&ws), &[]).unwrap();
    w2.wait_ready_blocking(Duration::from_secs(10)).unwrap();
    let pid = w2.pid();
    w2.kill9();
    assert!(!w2.is_running());
    assert_eq!(
        w2.exit_status().map(|s| describe_status(&s)).unwrap(),
        "signal 9 (SIGKILL)"
    );
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());

    // A worker that dies before logging readiness fails wait_ready fast.
    let bad = dir.path().join("bad.sh");
    std::fs::write(&bad, "#!/bin/sh\necho boom >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut w3 = Worker::spawn_program(&bad, &server, &q, None, &[]).unwrap();
    let err = w3
        .wait_ready_blocking(Duration::from_secs(10))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("exited before becoming ready") && err.contains("boom"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mock_openai_scripts_and_captures() {
    let mock = MockOpenAi::start().unwrap();
    assert!(mock.base_url().starts_with("http://127.0.0.1:"));
    assert!(mock.base_url().ends_with("/v1"));
    mock.push_text("hello from mock");
    mock.push_error(429, MockOpenAi::rate_limit_body());
    assert_eq!(mock.pending(), 2);

    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", mock.base_url());
    let req_body = json!({
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hi"}]
    });
    let post = || {
        client
            .post(&url)
            .header("Authorization", "Bearer sk-test-123")
            .json(&req_body)
            .send()
    };

    let r1 = post().await.unwrap();
    assert_eq!(r1.status().as_u16(), 200);
    let b1: serde_json::Value = r1.json().await.unwrap();
    assert_eq!(b1["object"], "chat.completion");
    assert_eq!(b1["choices"][0]["message"]["role"], "assistant");
    assert_eq!(b1["choices"][0]["message"]["content"], "hello from mock");
    assert_eq!(b1["choices"][0]["finish_reason"], "stop");
    assert!(b1["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let usage = &b1["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );

    let r2 = post().await.unwrap();
    assert_eq!(r2.status().as_u16(), 429);
    let b2: serde_json::Value = r2.json().await.unwrap();
    assert_eq!(b2["error"]["code"], "rate_limit_exceeded");

    // Queue exhausted: 500 with an OpenAI-style error.
    let r3 = post().await.unwrap();
    assert_eq!(r3.status().as_u16(), 500);
    let b3: serde_json::Value = r3.json().await.unwrap();
    assert_eq!(
        b3,
        json!({"error": {"message": "mock: no scripted response left", "type": "server_error"}})
    );

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, CHAT_COMPLETIONS_PATH);
    assert_eq!(reqs[0].body, req_body);
    assert_eq!(
        reqs[0].headers.get("authorization").unwrap(),
        "Bearer sk-test-123"
    );
    assert_eq!(reqs[0].header("Content-Type"), Some("application/json"));
    assert_eq!(reqs[0].messages().len(), 1);

    // Tool calls reply, exact shape.
    mock.push_tool_calls(&[("call_1", "read_file", r#"{"path":"a.txt"}"#)]);
    let b4: serde_json::Value = post().await.unwrap().json().await.unwrap();
    let msg = &b4["choices"][0]["message"];
    assert_eq!(msg["content"], serde_json::Value::Null);
    assert_eq!(
        msg["tool_calls"],
        json!([{"id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}])
    );
    assert_eq!(b4["choices"][0]["finish_reason"], "tool_calls");

    // Streaming requests get SSE chunks.
    mock.push_text("streamed");
    let sse = client
        .post(&url)
        .json(&json!({"model": "m", "messages": [], "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let text = sse.text().await.unwrap();
    assert!(
        text.contains("chat.completion.chunk") && text.contains("\"streamed\""),
        "{text}"
    );
    assert!(text.trim_end().ends_with("data: [DONE]"));

    // Unknown endpoints: 404, still captured.
    let r5 = client
        .get(format!("{}/models", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r5.status().as_u16(), 404);
    let reqs = mock
        .wait_for_requests(6, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(reqs[5].path, "/v1/models");
    assert_eq!(reqs[5].body, serde_json::Value::Null);

    // Delayed responses.
    mock.push_response(
        MockResponse::ok(MockOpenAi::text_reply("late")).delayed(Duration::from_millis(300)),
    );
    let t = std::time::Instant::now();
    let b6: serde_json::Value = post().await.unwrap().json().await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert_eq!(b6["choices"][0]["message"]["content"], "late");
    drop(mock); // dropping inside an async context must not panic
}

#[test]
fn decode_history_payloads_finds_base64_payload_text() {
    let secret = "sk-very-secret-token";
    let data =
        base64::engine::general_purpose::STANDARD.encode(format!("{{\"key\":\"{secret}\"}}"));
    let nested_inner = base64::engine::general_purpose::STANDARD.encode("inner-text");
    let nested = base64::engine::general_purpose::STANDARD
        .encode(json!({"metadata": {}, "data": nested_inner}).to_string());
    let history = json!({
        "events": [
            {"eventId": "1", "workflowExecutionStartedEventAttributes": {
                "input": {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": data}]}
            }},
            {"eventId": "2", "other": {"data": "!!! not base64 !!!"}},
            {"eventId": "3", "p": {"data": nested}}
        ]
    });
    assert!(!history.to_string().contains(secret));
    let decoded = decode_history_payloads(&history);
    assert!(decoded.contains(secret), "{decoded}");
    assert!(decoded.contains("inner-text"), "{decoded}");
    assert!(!decoded.contains("json/plain"));
    let all = history_search_text(&history);
    assert!(all.contains(secret) && all.contains("\"eventId\""));
    assert_eq!(decode_history_payloads(&json!({"no": "payloads"})), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_until_polls_and_times_out() {
    let mut n = 0;
    let v = wait_until(Duration::from_secs(5), "n to reach 3", async || {
        n += 1;
        let parsed: u32 = "7".parse()?; // `?` works without annotations
        Ok((n >= 3).then_some(parsed + n))
    })
    .await
    .unwrap();
    assert_eq!(v, 10);

    let err = wait_until(Duration::from_millis(300), "the impossible", async || {
        Ok(None::<()>)
    })
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("waiting for the impossible"),
        "{err}"
    );

    let err = wait_until(Duration::from_millis(300), "a failing probe", async || {
        anyhow::bail!("probe exploded");
        #[allow(unreachable_code)]
        Ok(Some(()))
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains("probe exploded"), "{err}");

    assert_holds_for(Duration::from_millis(300), "truth", async || Ok(true))
        .await
        .unwrap();
    assert!(
        assert_holds_for(Duration::from_secs(5), "falsehood", async || Ok(false))
            .await
            .is_err()
    );

    let mut m = 0;
    let got = wait_until_blocking(Duration::from_secs(5), "m to reach 2", || {
        m += 1;
        Ok((m >= 2).then_some(m))
    })
    .unwrap();
    assert_eq!(got, 2);
}

#[test]
fn commands_processes_and_utilities() {
    let a = unique("tq");
    let b = unique("tq");
    assert!(a.starts_with("tq-") && a.len() == "tq-".len() + 8);
    assert_ne!(a, b);

    let err = bin_path("definitely-not-a-baton-binary")
        .unwrap_err()
        .to_string();
    assert!(err.contains("run `cargo build --workspace` first"), "{err}");

    let mut sh = clean_command("sh");
    sh.args(["-c", "cat; echo err >&2; exit 3"]);
    let out = run_cmd(sh, Some("from stdin"), Duration::from_secs(10)).unwrap();
    assert_eq!(out.code, 3);
    assert_eq!(out.stdout, "from stdin");
    assert_eq!(out.stderr, "err\n");
    assert!(!out.success());
    assert!(out.clone().ensure_success().is_err());

    let mut js = clean_command("sh");
    js.args(["-c", "echo '{\"a\":1}'"]);
    let out = run_cmd(js, None, Duration::from_secs(10)).unwrap();
    assert_eq!(out.json().unwrap(), json!({"a": 1}));

    let mut slow = clean_command("sleep");
    slow.arg("30");
    let t = std::time::Instant::now();
    let err = run_cmd(slow, None, Duration::from_millis(200))
        .unwrap_err()
        .to_string();
    assert!(err.contains("timed out"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10));

    // process_exists_matching sees a process we started, and not after it died.
    let marker = format!("{}", 1000 + std::process::id() % 1000);
    let pattern = format!("^sleep 9{marker}$");
    let mut child = Command::new("sleep")
        .arg(format!("9{marker}"))
        .spawn()
        .unwrap();
    wait_until_blocking(Duration::from_secs(5), "sleep to show up", || {
        Ok(process_exists_matching(&pattern).then_some(()))
    })
    .unwrap();
    assert_eq!(pids_matching(&pattern), vec![child.id()]);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!process_exists_matching(&pattern));
}

#[tokio::test]
async fn wait_until_accepts_plain_closures_returning_async_blocks() {
    let v = wait_until(Duration::from_secs(5), "a value", || async {
        let parsed: u32 = "5".parse()?;
        Ok(Some(parsed))
    })
    .await
    .unwrap();
    assert_eq!(v, 5);
}

/// Reads a body chunk by chunk: the text received, and whether the body ended
/// cleanly (`Err` when the connection was cut).
async fn read_body(mut resp: reqwest::Response) -> (String, Result<(), reqwest::Error>) {
    let mut buf = Vec::new();
    let end = loop {
        match resp.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    (String::from_utf8_lossy(&buf).into_owned(), end)
}

/// SSE records as `(event name or "", data)` (comments are skipped).
fn sse_records(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter(|r| !r.trim().is_empty())
        .filter_map(|record| {
            let mut event = String::new();
            let mut data = None;
            for line in record.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = e.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(d.to_owned());
                }
            }
            data.map(|d| (event, d))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn mock_anthropic_replies_streams_and_cuts() {
    let mock = MockAnthropic::start().unwrap();
    assert!(mock.base_url().starts_with("http://127.0.0.1:"));
    assert!(!mock.base_url().ends_with("/v1"));
    let client = reqwest::Client::new();
    let url = format!("{}/v1/messages", mock.base_url());
    let post = |body: serde_json::Value| {
        client
            .post(&url)
            .header("x-api-key", "sk-ant-test")
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
    };
    let req = json!({"model": "claude-test", "max_tokens": 100,
                     "messages": [{"role": "user", "content": "hi"}]});
    let stream_req = {
        let mut r = req.clone();
        r["stream"] = json!(true);
        r
    };

    // Non-streaming text reply, exact shape.
    mock.push_text("hello from claude");
    let before = std::time::Instant::now();
    let r = post(req.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let b: serde_json::Value = r.json().await.unwrap();
    assert!(b["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(b["type"], "message");
    assert_eq!(b["role"], "assistant");
    assert_eq!(
        b["content"],
        json!([{"type": "text", "text": "hello from claude"}])
    );
    assert_eq!(b["stop_reason"], "end_turn");
    assert_eq!(b["stop_sequence"], serde_json::Value::Null);
    assert!(b["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(b["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, MESSAGES_PATH);
    assert_eq!(reqs[0].header("X-Api-Key"), Some("sk-ant-test"));
    assert_eq!(reqs[0].body, req);
    assert_eq!(reqs[0].messages().len(), 1);
    assert!(!reqs[0].is_stream());
    assert!(reqs[0].received_at >= before && reqs[0].received_at <= std::time::Instant::now());

    // Non-streaming tool use.
    mock.push_tool_use(&[("toolu_1", "read_file", r#"{"path":"a.txt"}"#)]);
    let b: serde_json::Value = post(req.clone()).await.unwrap().json().await.unwrap();
    assert_eq!(
        b["content"],
        json!([{"type": "tool_use", "id": "toolu_1", "name": "read_file",
                "input": {"path": "a.txt"}}])
    );
    assert_eq!(b["stop_reason"], "tool_use");

    // Errors: scripted, exhausted queue, unknown endpoint.
    mock.push_response(
        MockResponse::error(529, MockAnthropic::overloaded_body()).header("retry-after", "1"),
    );
    let r = post(req.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 529);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    let r = post(req.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 500);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        MockAnthropic::error_body("api_error", "mock: no scripted response left")
    );
    let r = client
        .post(format!("{}/v1/complete", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["error"]["type"],
        "not_found_error"
    );

    // Streaming: the real event sequence.
    let input = r#"{"path":"src/main.rs","limit":200,"note":"ünïcode"}"#;
    mock.push(MockAnthropic::tool_use_reply_with_text(
        Some("Let me look at that file."),
        &[("toolu_2", "read_file", input)],
    ));
    let r = post(stream_req.clone()).await.unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let (text, end) = read_body(r).await;
    end.unwrap();
    let records = sse_records(&text);
    let events: Vec<&str> = records.iter().map(|(e, _)| e.as_str()).collect();
    let text_deltas = events
        .iter()
        .filter(|e| **e == "content_block_delta")
        .count();
    assert!(text_deltas >= 2 + 5, "{events:?}");
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    for (e, _) in &records[3..] {
        if e != "content_block_delta" {
            break;
        }
        expected.push("content_block_delta");
    }
    expected.extend(["content_block_stop", "content_block_start"]);
    let n_json = records
        .iter()
        .filter(|(_, d)| d.contains("input_json_delta"))
        .count();
    assert!(n_json >= 2, "{text}");
    expected.extend(std::iter::repeat_n("content_block_delta", n_json));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(events, expected);
    let data: Vec<serde_json::Value> = records
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    for ((event, _), d) in records.iter().zip(&data) {
        assert_eq!(d["type"], event.as_str());
    }
    let start = &data[0]["message"];
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["role"], "assistant");
    assert!(start["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        data[1]["content_block"],
        json!({"type": "text", "text": ""})
    );
    let streamed_text: String = data
        .iter()
        .filter(|d| d["delta"]["type"] == "text_delta")
        .map(|d| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed_text, "Let me look at that file.");
    let tool_start = data
        .iter()
        .find(|d| d["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(
        tool_start,
        &json!({"type": "content_block_start", "index": 1, "content_block":
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}}})
    );
    let partial: String = data
        .iter()
        .filter(|d| d["delta"]["type"] == "input_json_delta")
        .map(|d| d["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&partial).unwrap(),
        serde_json::from_str::<serde_json::Value>(input).unwrap()
    );
    let message_delta = &data[data.len() - 2];
    assert_eq!(
        message_delta["delta"],
        json!({"stop_reason": "tool_use", "stop_sequence": null})
    );
    assert!(message_delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));

    // Cut stream: some deltas, then the connection drops.
    mock.push_response(MockResponse::cut_stream(MockAnthropic::text_reply(
        "one two three four five six",
    )));
    let (text, end) = read_body(post(stream_req.clone()).await.unwrap()).await;
    assert!(end.is_err(), "cut stream ended cleanly: {text}");
    assert!(text.contains("event: content_block_delta"), "{text}");
    assert!(text.contains("one "), "{text}");
    assert!(!text.contains("six"), "{text}");
    assert!(!text.contains("message_delta") && !text.contains("message_stop"));

    // Cut non-streaming answer: truncated JSON, then the connection drops.
    mock.push_response(MockResponse::cut_stream(MockAnthropic::text_reply("x")));
    let r = post(req.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.bytes().await.is_err());

    // In-stream overloaded error.
    mock.push_response(MockAnthropic::overloaded_stream(MockAnthropic::text_reply(
        "a b c d",
    )));
    let (text, end) = read_body(post(stream_req.clone()).await.unwrap()).await;
    end.unwrap();
    let records = sse_records(&text);
    let (last_event, last_data) = records.last().unwrap();
    assert_eq!(last_event, "error");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(last_data).unwrap(),
        MockAnthropic::overloaded_body()
    );
    assert!(!text.contains("message_stop"));
    // …and as a plain 529 when the request does not stream.
    mock.push_response(MockAnthropic::overloaded_stream(MockAnthropic::text_reply(
        "a",
    )));
    assert_eq!(post(req.clone()).await.unwrap().status().as_u16(), 529);
    assert_eq!(mock.pending(), 0);
    assert_eq!(mock.request_count(), 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn mock_openai_streams_tool_calls_headers_cuts_and_slow_streams() {
    let mock = MockOpenAi::start().unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", mock.base_url());
    let post = |body: serde_json::Value| client.post(&url).json(&body).send();
    let stream_req = json!({"model": "m", "messages": [], "stream": true,
                            "stream_options": {"include_usage": true}});

    // Streamed tool calls arrive as OpenAI sends them.
    let args0 = r#"{"path":"src/lib.rs","start":1,"end":40}"#;
    let args1 = r#"{"cmd":"ls"}"#;
    mock.push_tool_calls(&[("call_a", "read_file", args0), ("call_b", "shell", args1)]);
    let (text, end) = read_body(post(stream_req.clone()).await.unwrap()).await;
    end.unwrap();
    let records = sse_records(&text);
    assert_eq!(records.last().unwrap().1, "[DONE]");
    let chunks: Vec<serde_json::Value> = records[..records.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for (index, (id, name, args)) in [("call_a", "read_file", args0), ("call_b", "shell", args1)]
        .into_iter()
        .enumerate()
    {
        let parts: Vec<&serde_json::Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
            .filter(|tc| tc["index"] == index)
            .collect();
        assert!(parts.len() >= 3, "{parts:?}");
        assert_eq!(parts[0]["id"], id);
        assert_eq!(parts[0]["type"], "function");
        assert_eq!(parts[0]["function"]["name"], name);
        assert_eq!(parts[0]["function"]["arguments"], "");
        for p in &parts[1..] {
            assert_eq!(p.as_object().unwrap().len(), 2, "{p}");
            assert_eq!(p["function"].as_object().unwrap().len(), 1, "{p}");
        }
        let joined: String = parts
            .iter()
            .map(|p| p["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(joined, args);
    }
    for c in &chunks[..chunks.len() - 2] {
        assert_eq!(c["choices"][0]["finish_reason"], serde_json::Value::Null);
    }

    // Extra headers, and arrival times.
    mock.push_response(
        MockResponse::error(429, MockOpenAi::rate_limit_body()).header("retry-after", "2"),
    );
    mock.push_text("after the retry");
    let r = post(json!({"model": "m", "messages": []})).await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    // Time must pass between the two requests: the test checks their arrival times.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = post(json!({"model": "m", "messages": []})).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let reqs = mock
        .wait_for_requests(3, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].is_stream() && !reqs[1].is_stream());
    assert!(reqs[0].received_at <= reqs[1].received_at);
    assert!(reqs[2].received_at.duration_since(reqs[1].received_at) >= Duration::from_millis(200));

    // Cut stream: role + some content, no finish_reason, no [DONE], an error.
    mock.push_response(MockResponse::cut_stream(MockOpenAi::text_reply(
        "alpha beta gamma delta epsilon",
    )));
    let (text, end) = read_body(post(stream_req.clone()).await.unwrap()).await;
    assert!(end.is_err(), "cut stream ended cleanly: {text}");
    assert!(
        text.contains("\"role\":\"assistant\"") && text.contains("alpha"),
        "{text}"
    );
    assert!(!text.contains("epsilon"), "{text}");
    assert!(!text.contains("[DONE]") && !text.contains("\"finish_reason\":\"stop\""));

    // Cut non-streaming answer.
    mock.push_response(MockResponse::cut_stream(MockOpenAi::text_reply("x")));
    assert!(
        post(json!({"model": "m", "messages": []}))
            .await
            .unwrap()
            .bytes()
            .await
            .is_err()
    );

    // In-stream error.
    mock.push_response(MockResponse::stream_error(
        MockOpenAi::text_reply("a b c"),
        MockOpenAi::error_body("server overloaded", "server_error"),
    ));
    let (text, end) = read_body(post(stream_req.clone()).await.unwrap()).await;
    end.unwrap();
    let last = sse_records(&text).pop().unwrap().1;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&last).unwrap()["error"]["message"],
        "server overloaded"
    );
    assert!(!text.contains("[DONE]"));

    // Slow stream: keep-alive comments, then the whole stream.
    mock.push_response(MockResponse::slow_stream(
        MockOpenAi::text_reply("finally"),
        Duration::from_millis(1200),
    ));
    let t = std::time::Instant::now();
    let r = post(stream_req.clone()).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "headers came late"
    );
    let (text, end) = read_body(r).await;
    end.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(1200));
    assert!(text.starts_with(": ping\n\n: ping\n\n"), "{text}");
    assert!(text.contains("\"finally\"") && text.ends_with("data: [DONE]\n\n"));
    assert_eq!(mock.pending(), 0);
}

/// Both mocks check every request: a tool result answering no call, or a body carrying the
/// API key the client authenticates with, is answered 400 with the reason and kept as a
/// violation (a mock dropped with violations panics, failing the test).
#[tokio::test(flavor = "multi_thread")]
async fn the_mocks_refuse_orphan_tool_results_and_keys_in_the_body() {
    let client = reqwest::Client::new();
    let openai = MockOpenAi::start().unwrap();
    openai.push_text("never sent");
    let orphan = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_nobody_made", "content": "output"}
    ]});
    let r = client
        .post(format!("{}/chat/completions", openai.base_url()))
        .json(&orphan)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("call_nobody_made"), "{message}");
    assert_eq!(
        openai.pending(),
        1,
        "a refused request consumes no scripted answer"
    );
    let violations = openai.take_violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].starts_with("request #1: ") && violations[0].contains("call_nobody_made"),
        "{violations:?}"
    );

    let anthropic = MockAnthropic::start().unwrap();
    let leaky = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "the key is sk-ant-leaked-42"}
    ]});
    let r = client
        .post(format!("{}/v1/messages", anthropic.base_url()))
        .header("x-api-key", "sk-ant-leaked-42")
        .json(&leaky)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let violations = anthropic.take_violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("API key"), "{violations:?}");
    assert!(
        !violations[0].contains("sk-ant-leaked-42"),
        "the reason does not repeat the key"
    );

    // Left in place, a violation fails the test at the mock's drop.
    let mock = MockOpenAi::start().unwrap();
    let r = client
        .post(format!("{}/chat/completions", mock.base_url()))
        .json(&orphan)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let dropped = std::thread::spawn(move || drop(mock)).join();
    let panic = dropped.expect_err("dropping a mock with violations panics");
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("the real API would refuse"), "{text}");
}
