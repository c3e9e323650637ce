//! The Anthropic provider against a local HTTP server: request bodies, whole and streamed
//! answers (cut streams, in-stream error events), HTTP error classification.

use super::*;
use crate::llm::test_items::*;
use crate::llm::{
    LlmError, Provider,
    error::classify_http,
    test_server::{Reply, serve_once},
};
use baton_proto::{
    AssistantMessage, FinishReason, Item, LlmResponse, ModelConfig, ReasoningPart, ToolCall,
    ToolDefinition,
};
use pretty_assertions::assert_eq;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

/// An anthropic reasoning part.
pub(super) fn part(kind: &str, data: &str, position: u32) -> ReasoningPart {
    ReasoningPart {
        provider: "anthropic".into(),
        kind: kind.into(),
        data: data.into(),
        position,
        ..Default::default()
    }
}

pub(super) fn assistant(text: &str, calls: &[(&str, &str, &str)]) -> Item {
    assistant_item(AssistantMessage {
        text: text.into(),
        tool_calls: crate::llm::test_items::calls(calls),
        finish_reason: FinishReason::ToolCalls as i32,
        reasoning: "not sent back".into(),
        ..Default::default()
    })
}

pub(super) fn sample_request() -> LlmRequest {
    LlmRequest {
        model: Some(ModelConfig {
            provider: "anthropic".into(),
            model: "claude-test".into(),
            temperature: Some(0.5),
            ..Default::default()
        }),
        system_prompt: "You are baton.".into(),
        conversation: vec![
            user("fix the bug"),
            user("in src/"),
            assistant(
                "Looking.",
                &[
                    ("toolu_1", "read_file", r#"{"path":"src/a.rs"}"#),
                    ("toolu_2", "shell", "{not json"),
                ],
            ),
            result("toolu_1", "fn a() {}", false),
            result("toolu_2", "denied by policy", true),
            user("also check b.rs"),
            assistant("", &[("toolu_3", "list_files", "")]),
            result("toolu_3", "", false),
        ],
        tools: vec![
            ToolDefinition {
                name: "read_file".into(),
                description: "Reads a file.".into(),
                parameters: r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#.into(),
                read_only: true,
                mcp: None,
            },
            ToolDefinition {
                name: "list_files".into(),
                description: "Lists files.".into(),
                parameters: "not a schema".into(),
                read_only: true,
                mcp: None,
            },
        ],
        ..Default::default()
    }
}

fn expected_body() -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 8192,
        "temperature": 0.5,
        "system": [{"type": "text", "text": "You are baton.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "fix the bug"},
                {"type": "text", "text": "in src/"},
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "src/a.rs"}},
                {"type": "tool_use", "id": "toolu_2", "name": "shell", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn a() {}"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "denied by policy", "is_error": true},
                {"type": "text", "text": "also check b.rs", "cache_control": {"type": "ephemeral"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_3", "name": "list_files", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_3", "cache_control": {"type": "ephemeral"}},
            ]},
        ],
        "tools": [
            {"name": "read_file", "description": "Reads a file.", "input_schema": {
                "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
            }},
            {"name": "list_files", "description": "Lists files.", "input_schema": {"type": "object"},
             "cache_control": {"type": "ephemeral"}},
        ],
    })
}

pub(super) fn provider(base: &str) -> Anthropic {
    Anthropic::new(
        base,
        Some("sk-ant-test".into()),
        DEFAULT_VERSION,
        Duration::from_secs(10),
    )
    .unwrap()
}

#[test]
fn request_body_alternates_roles_and_links_tool_results() {
    assert_eq!(
        request_body_for(&sample_request(), false).unwrap(),
        expected_body()
    );
    let mut streaming = expected_body();
    streaming["stream"] = json!(true);
    assert_eq!(
        request_body_for(&sample_request(), true).unwrap(),
        streaming
    );
}

#[test]
fn request_body_defaults_and_tool_results_first() {
    // No model, no system prompt, no tools, no temperature; max_tokens is always sent.
    // A user message that arrived before the tool results still goes after them.
    let req = LlmRequest {
        model: Some(ModelConfig {
            max_output_tokens: 1000,
            ..Default::default()
        }),
        conversation: vec![
            user("go"),
            assistant("", &[("t1", "shell", r#"{"command":"make"}"#)]),
            user("stop after this"),
            result("t1", "ok", false),
        ],
        ..Default::default()
    };
    assert_eq!(
        request_body_for(&req, false).unwrap(),
        json!({
            "model": DEFAULT_MODEL,
            "max_tokens": 1000,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "go", "cache_control": {"type": "ephemeral"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "shell", "input": {"command": "make"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {"type": "text", "text": "stop after this", "cache_control": {"type": "ephemeral"}},
                ]},
            ],
        })
    );
}

#[test]
fn whitespace_only_text_is_never_sent() {
    // The API refuses a text block of only whitespace; a model's "\n\n"
    // before a tool call, stored with the turn, would otherwise fail every later request.
    let req = LlmRequest {
        conversation: vec![
            user("go"),
            assistant("\n\n", &[("t1", "shell", "{}")]),
            result("t1", " \n", false),
            assistant("  ", &[]),
            user("\t"),
            assistant("done", &[]),
        ],
        ..Default::default()
    };
    let body = request_body_for(&req, false).unwrap();
    let texts: Vec<&Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter(|b| b["type"] == "text")
        .map(|b| &b["text"])
        .collect();
    assert_eq!(texts, [&json!("go"), &json!("done")]);
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "t1", "name": "shell", "input": {}}])
    );
    assert_eq!(body["messages"][2]["content"][0].get("content"), None);
    let roles: Vec<&Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["role"])
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
}

#[test]
fn parses_a_message() {
    let body = r#"{
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "Need both files.", "signature": "sig"},
            {"type": "text", "text": "Reading them."},
            {"type": "tool_use", "id": "toolu_A", "name": "read_file", "input": {"path": "a.rs"}},
            {"type": "tool_use", "id": "toolu_B", "name": "list_files", "input": {}},
            {"type": "redacted_thinking", "data": "xyz"}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 30}
    }"#;
    assert_eq!(
        parse_response(body).unwrap(),
        LlmResponse {
            message: Some(AssistantMessage {
                text: "Reading them.".into(),
                tool_calls: vec![
                    ToolCall {
                        id: "toolu_A".into(),
                        name: "read_file".into(),
                        arguments: r#"{"path":"a.rs"}"#.into(),
                        ..Default::default()
                    },
                    ToolCall {
                        id: "toolu_B".into(),
                        name: "list_files".into(),
                        arguments: "{}".into(),
                        ..Default::default()
                    },
                ],
                finish_reason: FinishReason::ToolCalls as i32,
                reasoning: "Need both files.".into(),
                // Exactly as they arrived, at the blocks before them (text, two tool calls).
                text_stored: None,
                reasoning_parts: vec![
                    part(
                        "thinking",
                        r#"{"type": "thinking", "thinking": "Need both files.", "signature": "sig"}"#,
                        0
                    ),
                    part(
                        "redacted_thinking",
                        r#"{"type": "redacted_thinking", "data": "xyz"}"#,
                        3
                    ),
                ],
            }),
            usage: Some(usage(125, 30, 5, 20)),
            ..Default::default()
        }
    );
    let finish = |reason: &str| {
        let body = format!(
            r#"{{"content":[{{"type":"text","text":"x"}}],"stop_reason":"{reason}","usage":{{"input_tokens":1,"output_tokens":1}}}}"#
        );
        parse_response(&body)
            .unwrap()
            .message
            .unwrap()
            .finish_reason
    };
    assert_eq!(finish("end_turn"), FinishReason::Stop as i32);
    assert_eq!(finish("stop_sequence"), FinishReason::Stop as i32);
    assert_eq!(finish("pause_turn"), FinishReason::Stop as i32);
    assert_eq!(finish("max_tokens"), FinishReason::Length as i32);
    assert_eq!(finish("refusal"), FinishReason::ContentFilter as i32);
    assert_eq!(finish("tool_use"), FinishReason::ToolCalls as i32);
    let err = parse_response("<html>").unwrap_err();
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err}");
}

fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\r\ndata: {data}\r\n\r\n")
}

fn delta(index: u32, delta: Value) -> String {
    sse(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn stop(index: u32) -> String {
    sse(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn json_delta(index: u32, partial: &str) -> String {
    delta(
        index,
        json!({"type": "input_json_delta", "partial_json": partial}),
    )
}

/// A recorded-style stream: thinking, text, two tool calls whose input arrives in
/// fragments (the second with an empty first fragment), pings, usage, `message_stop`.
fn transcript_events() -> Vec<String> {
    vec![
        sse(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 472, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 28, "output_tokens": 2},
            }}),
        ),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "Two files; "}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "read both."}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"}),
        ),
        stop(0),
        sse("ping", json!({"type": "ping"})),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        ),
        delta(1, json!({"type": "text_delta", "text": "Okay — reading "})),
        delta(1, json!({"type": "text_delta", "text": "both ✓ 🦀."})),
        stop(1),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": {}}}),
        ),
        json_delta(2, ""),
        json_delta(2, "{\"path\": "),
        json_delta(2, "\"src/ma"),
        json_delta(2, "in.rs\"}"),
        stop(2),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 3,
            "content_block": {"type": "tool_use", "id": "toolu_01B", "name": "search_files", "input": {}}}),
        ),
        json_delta(3, "{\"pattern\": \"fn"),
        json_delta(3, " main\", \"path\""),
        json_delta(3, ": \"src\"}"),
        stop(3),
        sse(
            "content_block_start",
            json!({"type": "content_block_start", "index": 4,
            "content_block": {"type": "tool_use", "id": "toolu_01C", "name": "list_files", "input": {}}}),
        ),
        stop(4),
        sse(
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 89}}),
        ),
        sse("message_stop", json!({"type": "message_stop"})),
    ]
}

fn transcript() -> String {
    transcript_events().concat()
}

fn expected_stream_response() -> LlmResponse {
    LlmResponse {
        message: Some(AssistantMessage {
            text: "Okay — reading both ✓ 🦀.".into(),
            tool_calls: vec![
                ToolCall {
                    id: "toolu_01A".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path": "src/main.rs"}"#.into(),
                    ..Default::default()
                },
                ToolCall {
                    id: "toolu_01B".into(),
                    name: "search_files".into(),
                    arguments: r#"{"pattern": "fn main", "path": "src"}"#.into(),
                    ..Default::default()
                },
                ToolCall {
                    id: "toolu_01C".into(),
                    name: "list_files".into(),
                    arguments: "{}".into(),
                    ..Default::default()
                },
            ],
            finish_reason: FinishReason::ToolCalls as i32,
            reasoning: "Two files; read both.".into(),
            text_stored: None,
            reasoning_parts: vec![part(
                "thinking",
                r#"{"type":"thinking","thinking":"Two files; read both.","signature":"EqQBCgIYAhIM"}"#,
                0,
            )],
        }),
        usage: Some(usage(500, 89, 28, 0)),
        ..Default::default()
    }
}

#[tokio::test]
async fn streams_text_thinking_and_fragmented_tool_calls() {
    // 5-byte HTTP chunks: CRLFs and UTF-8 sequences split everywhere.
    let (base, server) = serve_once(Reply::sse_chunked(&transcript(), 5, true)).await;
    let response = provider(&format!("{base}/"))
        .generate(&sample_request())
        .await
        .unwrap();
    assert_eq!(response, expected_stream_response());
    let req = server.await.unwrap();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(
        req.headers.get("x-api-key").map(String::as_str),
        Some("sk-ant-test")
    );
    assert_eq!(
        req.headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert_eq!(
        req.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert!(!req.headers.contains_key("authorization"));
    let mut body = expected_body();
    body["stream"] = json!(true);
    assert_eq!(req.body, body);
}

#[tokio::test]
async fn no_key_means_no_header_and_trait_dispatch() {
    let (base, server) = serve_once(Reply::sse_until_close(&transcript())).await;
    let p: Box<dyn Provider> =
        Box::new(Anthropic::new(base, None, "", Duration::from_secs(10)).unwrap());
    assert_eq!(p.name(), "anthropic");
    assert_eq!(
        p.generate(&sample_request()).await.unwrap(),
        expected_stream_response()
    );
    let req = server.await.unwrap();
    assert!(!req.headers.contains_key("x-api-key"));
    assert_eq!(
        req.headers.get("anthropic-version").map(String::as_str),
        Some(DEFAULT_VERSION)
    );
}

#[tokio::test]
async fn non_streaming_round_trip() {
    let body = r#"{"content":[{"type":"text","text":"Hello."}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":2}}"#;
    let (base, server) = serve_once(Reply::json(200, body)).await;
    let r = provider(&base)
        .streaming(false)
        .generate(&sample_request())
        .await
        .unwrap();
    let m = r.message.unwrap();
    assert_eq!(
        (m.text.as_str(), m.finish_reason),
        ("Hello.", FinishReason::Stop as i32)
    );
    assert_eq!(r.usage, Some(usage(3, 2, 0, 0)));
    assert_eq!(server.await.unwrap().body, expected_body());
}

#[tokio::test]
async fn a_cut_stream_is_a_retryable_transport_error() {
    let events = transcript_events();
    // Dropped inside the chunked body, in the middle of the second tool call.
    let cut = events[..19].concat();
    let (base, _server) = serve_once(Reply::sse_chunked(&cut, 40, false)).await;
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
    // Closed cleanly after `message_delta` but before `message_stop`: still cut.
    let almost = events[..events.len() - 1].concat();
    let (base, _server) = serve_once(Reply::sse_until_close(&almost)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("the stream was cut after {} bytes", almost.len())),
        "{err}"
    );
    assert!(err.is_retryable());
}

async fn stream_error(error_event: &str) -> LlmError {
    let body = format!("{}{error_event}", transcript_events()[..9].concat());
    let (base, _server) = serve_once(Reply::sse_chunked(&body, 64, true)).await;
    provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err()
}

#[tokio::test]
async fn in_stream_error_events_are_classified() {
    let err = stream_error(
        "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n",
    )
    .await;
    assert!(
        matches!(err, LlmError::Unavailable { status: 529, .. }),
        "{err}"
    );
    assert!(err.is_retryable());
    assert!(err.to_string().contains("Overloaded"), "{err}");
    let err = stream_error(
        "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"api_error\", \"message\": \"Internal server error\"}}\n\n",
    )
    .await;
    assert!(
        matches!(err, LlmError::Unavailable { status: 500, .. }),
        "{err}"
    );
    let err = stream_error(
        "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"rate_limit_error\", \"message\": \"slow down\"}}\n\n",
    )
    .await;
    assert!(matches!(err, LlmError::RateLimited { .. }), "{err}");
    let err = stream_error(
        "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"invalid_request_error\", \"message\": \"messages: bad\"}}\n\n",
    )
    .await;
    assert!(
        matches!(err, LlmError::Rejected { status: 400, .. }),
        "{err}"
    );
    assert!(!err.is_retryable());
}

fn error_body(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"})
        .to_string()
}

#[test]
fn classifies_http_errors() {
    let h = HeaderMap::new();
    let c = |status, kind: &str, message: &str| {
        classify_http(PROVIDER, status, &h, &error_body(kind, message))
    };
    let mut retry = HeaderMap::new();
    retry.insert("retry-after", HeaderValue::from_static("30"));
    let rl = classify_http(
        PROVIDER,
        429,
        &retry,
        &error_body(
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        ),
    );
    assert!(
        matches!(&rl, LlmError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(30)),
        "{rl:?}"
    );
    let overloaded = c(529, "overloaded_error", "Overloaded");
    assert!(matches!(
        overloaded,
        LlmError::Unavailable { status: 529, .. }
    ));
    assert!(overloaded.is_retryable());
    assert!(matches!(
        c(500, "api_error", "Internal server error"),
        LlmError::Unavailable { status: 500, .. }
    ));
    assert!(matches!(
        c(
            400,
            "invalid_request_error",
            "prompt is too long: 208923 tokens > 200000 maximum"
        ),
        LlmError::ContextOverflow { .. }
    ));
    assert!(matches!(
        c(
            400,
            "invalid_request_error",
            "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"
        ),
        LlmError::ContextOverflow { .. }
    ));
    assert!(matches!(
        c(
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes."
        ),
        LlmError::ContextOverflow { .. }
    ));
    let auth = c(401, "authentication_error", "invalid x-api-key");
    assert!(matches!(auth, LlmError::Rejected { status: 401, .. }));
    assert!(auth.to_string().contains("invalid x-api-key"), "{auth}");
    assert!(matches!(
        c(403, "permission_error", "no access"),
        LlmError::Rejected { status: 403, .. }
    ));
    assert!(matches!(
        c(404, "not_found_error", "model: claude-9"),
        LlmError::Rejected { status: 404, .. }
    ));
    let other = c(
        400,
        "invalid_request_error",
        "messages.1.content: Field required",
    );
    assert!(matches!(other, LlmError::Rejected { status: 400, .. }));
    assert!(!other.is_retryable());
}

#[tokio::test]
async fn http_errors_arrive_before_the_stream() {
    let reply =
        Reply::json(429, &error_body("rate_limit_error", "slow down")).header("retry-after", "7");
    let (base, _server) = serve_once(reply).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    let temporalio_common::ActivityError::Application(failure) = err.into_activity_error() else {
        panic!("not an application failure");
    };
    assert_eq!(failure.next_retry_delay(), Some(Duration::from_secs(7)));
    assert!(!failure.is_non_retryable());

    let (base, _server) = serve_once(Reply::json(
        529,
        &error_body("overloaded_error", "Overloaded"),
    ))
    .await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LlmError::Unavailable { status: 529, .. }),
        "{err}"
    );

    let (base, _server) = serve_once(Reply::json(
        400,
        &error_body(
            "invalid_request_error",
            "prompt is too long: 250000 tokens > 200000 maximum",
        ),
    ))
    .await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    let temporalio_common::ActivityError::Application(failure) = err.into_activity_error() else {
        panic!("not an application failure");
    };
    assert!(failure.is_non_retryable());
    assert_eq!(
        failure.type_name(),
        Some(baton_workflows::activities::FailureType::ContextOverflow.as_str())
    );
}

#[test]
fn debug_never_prints_the_key() {
    let shown = format!("{:?}", provider("http://x"));
    assert!(!shown.contains("sk-ant-test"), "{shown}");
}
