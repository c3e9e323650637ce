//! The OpenAI provider against a local HTTP server: request bodies, whole and streamed
//! answers (cut streams, in-stream errors), HTTP error classification.

use super::{wire_tests::reasoning_content_part, *};
use crate::llm::test_items::*;
use crate::llm::{
    Provider,
    test_server::{Reply, serve_once},
};
use baton_proto::{
    AssistantMessage, FinishReason, Item, LlmResponse, ModelConfig, ToolCall, ToolDefinition,
    ToolResult, Usage, item,
};
use pretty_assertions::assert_eq;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

pub(super) fn sample_request() -> LlmRequest {
    LlmRequest {
        model: Some(ModelConfig {
            provider: "openai".into(),
            model: "gpt-test".into(),
            max_output_tokens: 100,
            temperature: Some(0.25),
            ..Default::default()
        }),
        system_prompt: "sys".into(),
        conversation: vec![
            user("hi"),
            Item {
                kind: Some(item::Kind::Assistant(AssistantMessage {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "shell".into(),
                        arguments: r#"{"command":"ls"}"#.into(),
                        ..Default::default()
                    }],
                    finish_reason: FinishReason::ToolCalls as i32,
                    reasoning: "private thoughts".into(),
                    ..Default::default()
                })),
            },
            Item {
                kind: Some(item::Kind::ToolResult(ToolResult {
                    call_id: "c1".into(),
                    name: "shell".into(),
                    content: "denied".into(),
                    is_error: true,
                    full_output: String::new(),
                    ..Default::default()
                })),
            },
        ],
        tools: vec![ToolDefinition {
            name: "shell".into(),
            description: "d".into(),
            parameters: r#"{"type":"object","properties":{"command":{"type":"string"}}}"#.into(),
            read_only: false,
            mcp: None,
        }],
        ..Default::default()
    }
}

pub(super) fn provider(base: &str) -> OpenAi {
    OpenAi::new(
        format!("{base}/v1/"),
        Some("sk-test".into()),
        Duration::from_secs(10),
    )
    .unwrap()
}

fn expected_body() -> Value {
    json!({
        "model": "gpt-test",
        "max_tokens": 100,
        "temperature": 0.25,
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "ERROR: denied"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "shell",
            "description": "d",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        }}],
    })
}

#[test]
fn request_body_has_messages_tool_results_and_schemas() {
    assert_eq!(request_body(&sample_request()), expected_body());
    let mut streaming = expected_body();
    streaming["stream"] = json!(true);
    streaming["stream_options"] = json!({"include_usage": true});
    assert_eq!(request_body_for(&sample_request(), true), streaming);
    // Defaults: model name, no max_tokens, no temperature, no tools, no system message.
    let bare = LlmRequest {
        conversation: vec![user("x")],
        ..Default::default()
    };
    assert_eq!(
        request_body(&bare),
        json!({"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "x"}]})
    );
}

#[test]
fn parses_tool_calls_usage_and_reasoning() {
    let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"hmm","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}},{"id":"call_2","type":"function","function":{"name":"list_files","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
    assert_eq!(
        parse_response(body).unwrap(),
        LlmResponse {
            message: Some(AssistantMessage {
                text: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "call_1".into(),
                        name: "read_file".into(),
                        arguments: r#"{"path":"a"}"#.into(),
                        ..Default::default()
                    },
                    ToolCall {
                        id: "call_2".into(),
                        name: "list_files".into(),
                        arguments: "{}".into(),
                        ..Default::default()
                    },
                ],
                finish_reason: FinishReason::ToolCalls as i32,
                reasoning: "hmm".into(),
                text_stored: None,
                reasoning_parts: vec![reasoning_content_part("hmm")],
            }),
            usage: Some(Usage {
                input_tokens: 12,
                output_tokens: 3,
                total_tokens: 15,
                llm_calls: 0,
                ..Default::default()
            }),
            ..Default::default()
        }
    );
    let cut =
        r#"{"choices":[{"message":{"content":"abc","reasoning":"r"},"finish_reason":"length"}]}"#;
    let m = parse_response(cut).unwrap().message.unwrap();
    assert_eq!(m.finish_reason, FinishReason::Length as i32);
    assert_eq!((m.text.as_str(), m.reasoning.as_str()), ("abc", "r"));
    let filtered = r#"{"choices":[{"message":{"content":""},"finish_reason":"content_filter"}]}"#;
    assert_eq!(
        parse_response(filtered)
            .unwrap()
            .message
            .unwrap()
            .finish_reason,
        FinishReason::ContentFilter as i32
    );
    let err = parse_response("<html>").unwrap_err();
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err}");
    assert!(parse_response(r#"{"choices":[]}"#).is_err());
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({
        "id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "usage": null,
    });
    format!("data: {c}\n\n")
}

fn tool_delta(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut call = json!({"index": index, "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    json!({"tool_calls": [call]})
}

/// A recorded-style stream: reasoning, text, two tool calls whose arguments arrive in
/// fragments, the finish reason, a usage chunk, `[DONE]`.
fn transcript_events() -> Vec<String> {
    vec![
        ": OPENROUTER PROCESSING\n\n".to_owned(),
        chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ),
        chunk(json!({"reasoning_content": "The user wants "}), None),
        chunk(json!({"reasoning_content": "two files."}), None),
        chunk(json!({"content": "I'll read "}), None),
        chunk(json!({"content": "both — ✓ 🦀."}), None),
        chunk(tool_delta(0, Some("call_A"), Some("read_file"), ""), None),
        chunk(tool_delta(0, None, None, "{\"pa"), None),
        chunk(tool_delta(0, None, None, "th\": \"src/"), None),
        chunk(tool_delta(0, None, None, "main.rs\"}"), None),
        chunk(
            tool_delta(1, Some("call_B"), Some("search_files"), ""),
            None,
        ),
        chunk(tool_delta(1, None, None, "{\"pattern\""), None),
        chunk(tool_delta(1, None, None, ": \"fn main\", "), None),
        chunk(tool_delta(1, None, None, "\"path\": \"src\"}"), None),
        chunk(json!({}), Some("tool_calls")),
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "choices": [],
                   "usage": {"prompt_tokens": 120, "completion_tokens": 45, "total_tokens": 165,
                             "completion_tokens_details": {"reasoning_tokens": 9}}})
        ),
        "data: [DONE]\n\n".to_owned(),
    ]
}

fn transcript() -> String {
    transcript_events().concat()
}

fn expected_stream_response() -> LlmResponse {
    LlmResponse {
        message: Some(AssistantMessage {
            text: "I'll read both — ✓ 🦀.".into(),
            tool_calls: vec![
                ToolCall {
                    id: "call_A".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path": "src/main.rs"}"#.into(),
                    ..Default::default()
                },
                ToolCall {
                    id: "call_B".into(),
                    name: "search_files".into(),
                    arguments: r#"{"pattern": "fn main", "path": "src"}"#.into(),
                    ..Default::default()
                },
            ],
            finish_reason: FinishReason::ToolCalls as i32,
            reasoning: "The user wants two files.".into(),
            text_stored: None,
            reasoning_parts: vec![reasoning_content_part("The user wants two files.")],
        }),
        usage: Some(Usage {
            input_tokens: 120,
            output_tokens: 45,
            total_tokens: 165,
            llm_calls: 0,
            reasoning_tokens: 9,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn streams_text_reasoning_and_two_fragmented_tool_calls() {
    // 7-byte HTTP chunks: events, CRLFs and UTF-8 sequences are split everywhere.
    let (base, server) = serve_once(Reply::sse_chunked(&transcript(), 7, true)).await;
    let response = provider(&base).generate(&sample_request()).await.unwrap();
    assert_eq!(response, expected_stream_response());
    let req = server.await.unwrap();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        req.headers.get("authorization").map(String::as_str),
        Some("Bearer sk-test")
    );
    assert_eq!(req.body["stream"], json!(true));
    assert_eq!(req.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn trait_object_dispatch_and_no_key_means_no_header() {
    let (base, server) = serve_once(Reply::sse_until_close(&transcript())).await;
    let p: Box<dyn Provider> = Box::new(OpenAi::new(base, None, Duration::from_secs(10)).unwrap());
    assert_eq!(p.name(), "openai");
    assert_eq!(
        p.generate(&sample_request()).await.unwrap(),
        expected_stream_response()
    );
    let req = server.await.unwrap();
    assert_eq!(req.path, "/chat/completions");
    assert!(!req.headers.contains_key("authorization"));
}

#[tokio::test]
async fn a_finished_stream_without_done_is_complete() {
    let events = transcript_events();
    let without_done = events[..events.len() - 1].concat();
    let (base, _server) = serve_once(Reply::sse_until_close(&without_done)).await;
    assert_eq!(
        provider(&base).generate(&sample_request()).await.unwrap(),
        expected_stream_response()
    );
}

#[tokio::test]
async fn a_cut_stream_is_a_retryable_transport_error() {
    let events = transcript_events();
    // The connection drops inside the chunked body (no terminating chunk), mid-tool-call.
    let first_half = events[..9].concat();
    let (base, _server) = serve_once(Reply::sse_chunked(&first_half, 64, false)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport { .. }), "{err}");
    assert!(err.is_retryable());
    assert!(
        err.to_string().contains("the stream was cut after"),
        "{err}"
    );
    // The server closes cleanly, but before the finish reason and `[DONE]`.
    let (base, _server) = serve_once(Reply::sse_until_close(&first_half)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport { .. }), "{err}");
    let bytes = first_half.len();
    assert!(
        err.to_string()
            .contains(&format!("the stream was cut after {bytes} bytes")),
        "{err}"
    );
    // A partial last line (cut inside a JSON chunk) is not mistaken for an event.
    let mid_json = format!("{}data: {{\"choices\":[{{\"ind", events[..4].concat());
    let (base, _server) = serve_once(Reply::sse_until_close(&mid_json)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport { .. }), "{err}");
}

async fn stream_error(error_event: &str) -> LlmError {
    let body = format!("{}{error_event}", transcript_events()[..5].concat());
    let (base, _server) = serve_once(Reply::sse_chunked(&body, 50, true)).await;
    provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err()
}

#[tokio::test]
async fn in_stream_errors_are_classified() {
    let err = stream_error(
        "data: {\"error\":{\"message\":\"Rate limit reached for gpt-4o\",\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}\n\n",
    )
    .await;
    assert!(matches!(err, LlmError::RateLimited { .. }), "{err}");
    assert!(err.to_string().contains("Rate limit reached"), "{err}");
    // OpenRouter: a numeric code carries the upstream status.
    let err = stream_error(
        "data: {\"error\":{\"code\":502,\"message\":\"Provider returned error\"}}\n\n",
    )
    .await;
    assert!(
        matches!(err, LlmError::Unavailable { status: 502, .. }),
        "{err}"
    );
    let err = stream_error(
        "event: error\ndata: {\"error\":{\"message\":\"This model's maximum context length is 8192 tokens\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}\n\n",
    )
    .await;
    assert!(matches!(err, LlmError::ContextOverflow { .. }), "{err}");
    assert!(!err.is_retryable());
    // An unknown error mid-stream is a server-side failure: retryable.
    let err = stream_error("data: {\"error\":{\"message\":\"boom\"}}\n\n").await;
    assert!(
        matches!(err, LlmError::Unavailable { status: 500, .. }),
        "{err}"
    );
    // Garbage in the stream.
    let err = stream_error("data: {not json\n\n").await;
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err}");
}

#[tokio::test]
async fn a_json_answer_to_a_streaming_request_is_read_whole() {
    let body = r#"{"choices":[{"message":{"content":"plain"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#;
    let (base, _server) = serve_once(Reply::json(200, body)).await;
    let r = provider(&base).generate(&sample_request()).await.unwrap();
    assert_eq!(r.message.unwrap().text, "plain");
    assert_eq!(r.usage.unwrap().total_tokens, 3);
}

#[tokio::test]
async fn non_streaming_sends_no_stream_flag() {
    let body = r#"{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}"#;
    let (base, server) = serve_once(Reply::json(200, body)).await;
    let p = provider(&base).streaming(false);
    assert_eq!(
        p.generate(&sample_request())
            .await
            .unwrap()
            .message
            .unwrap()
            .text,
        "ok"
    );
    assert_eq!(server.await.unwrap().body, expected_body());
}

#[tokio::test]
async fn http_errors_before_the_stream_are_classified() {
    let reply = Reply::json(
        429,
        r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
    )
    .header("retry-after", "12");
    let (base, _server) = serve_once(reply).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    match &err {
        LlmError::RateLimited { retry_after, .. } => {
            assert_eq!(*retry_after, Some(Duration::from_secs(12)));
        }
        other => panic!("{other:?}"),
    }
    let temporalio_common::ActivityError::Application(failure) = err.into_activity_error() else {
        panic!("not an application failure");
    };
    assert!(!failure.is_non_retryable());
    assert_eq!(failure.next_retry_delay(), Some(Duration::from_secs(12)));
    assert_eq!(failure.type_name(), Some("RateLimited"));

    let (base, _server) = serve_once(Reply::json(
        401,
        r#"{"error":{"message":"Incorrect API key provided"}}"#,
    ))
    .await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LlmError::Rejected { status: 401, .. }),
        "{err}"
    );
}

#[test]
fn classifies_errors() {
    let h = HeaderMap::new();
    let overflow = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#;
    assert!(matches!(
        classify(400, &h, overflow),
        LlmError::ContextOverflow { .. }
    ));
    let overflow_by_message =
        r#"{"error":{"message":"Requested tokens exceed context window of 4096"}}"#;
    assert!(matches!(
        classify(400, &h, overflow_by_message),
        LlmError::ContextOverflow { .. }
    ));
    assert!(matches!(
        classify(413, &h, "Request Entity Too Large"),
        LlmError::ContextOverflow { .. }
    ));
    let mut retry = HeaderMap::new();
    retry.insert("retry-after-ms", HeaderValue::from_static("1500"));
    assert!(matches!(
        classify(429, &retry, "{}"),
        LlmError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_millis(1500)
    ));
    let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
    assert!(matches!(
        classify(429, &h, quota),
        LlmError::Rejected { status: 429, .. }
    ));
    // A request over the per-minute token limit is refused on every retry.
    let too_large = r#"{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 36278. The input or output tokens must be reduced in order to run successfully.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
    let err = classify(429, &h, too_large);
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("Requested 36278")
            && err.to_string().contains("retrying cannot help"),
        "{err}"
    );
    let ordinary = r#"{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.","type":"tokens","code":"rate_limit_exceeded"}}"#;
    assert!(classify(429, &h, ordinary).is_retryable());
    assert!(matches!(
        classify(500, &h, "<html>oops</html>"),
        LlmError::Unavailable { status: 500, .. }
    ));
    assert!(matches!(
        classify(503, &h, "{}"),
        LlmError::Unavailable { .. }
    ));
    let auth = classify(
        401,
        &h,
        r#"{"error":{"message":"Incorrect API key provided"}}"#,
    );
    assert!(!auth.is_retryable());
    assert!(auth.to_string().contains("Incorrect API key provided"));
    let model = classify(
        404,
        &h,
        r#"{"error":{"message":"The model `gpt-9` does not exist","code":"model_not_found"}}"#,
    );
    assert!(matches!(model, LlmError::Rejected { status: 404, .. }));
    assert!(matches!(
        classify(
            400,
            &h,
            r#"{"error":{"message":"Invalid value for 'temperature'"}}"#
        ),
        LlmError::Rejected { status: 400, .. }
    ));
}

#[test]
fn debug_never_prints_the_key() {
    let p = OpenAi::new(
        DEFAULT_BASE_URL,
        Some("sk-secret".into()),
        Duration::from_secs(1),
    )
    .unwrap();
    let shown = format!("{p:?}");
    assert!(!shown.contains("sk-secret"), "{shown}");
    assert!(shown.contains("<set>"), "{shown}");
}

/// A server that writes an event stream's `head`, then `pings` keep-alive comments 100 ms
/// apart, then (when `tail` is set) the rest and closes; without `tail` it holds the
/// connection open, silent, for 10 s.
async fn stalling_server(head: String, pings: usize, tail: Option<String>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        // Headers, then the JSON body (its end: the request's last `}`).
        while !request.ends_with(b"}") {
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
        }
        let headers =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        socket.write_all(headers.as_bytes()).await.unwrap();
        socket.write_all(head.as_bytes()).await.unwrap();
        for _ in 0..pings {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            socket.write_all(b": ping\n\n").await.unwrap();
        }
        match tail {
            Some(tail) => socket.write_all(tail.as_bytes()).await.unwrap(),
            None => tokio::time::sleep(std::time::Duration::from_secs(10)).await,
        }
    });
    base
}

#[tokio::test]
async fn a_stream_silent_longer_than_the_idle_timeout_is_cut_but_keep_alives_keep_it() {
    // One total timeout cut long legitimate streams; a silent one is cut by
    // the idle timeout instead, long before the total.
    let events = transcript_events();
    let idle = Duration::from_millis(300);
    let base = stalling_server(events[..4].concat(), 0, None).await;
    let started = std::time::Instant::now();
    let err = provider(&base)
        .stream_idle_timeout(idle)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("sent nothing for 0 s")
            && err.to_string().contains("stream_idle_secs"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Keep-alive comments for 1 s (3x the idle timeout), then the rest: the answer arrives.
    let base = stalling_server(events[..4].concat(), 10, Some(events[4..].concat())).await;
    let response = provider(&base)
        .stream_idle_timeout(idle)
        .generate(&sample_request())
        .await
        .unwrap();
    assert_eq!(response, expected_stream_response());
}
