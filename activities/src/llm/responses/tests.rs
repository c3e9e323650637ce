//! The Responses provider against a local HTTP server and the documented shapes in
//! `fixtures/`: request bodies (reasoning items replayed as they arrived), whole and streamed
//! answers, terminal and error events, HTTP error classification.

use std::time::Duration;

use super::*;
use crate::llm::test_items::*;
use crate::llm::{
    LlmError, Provider,
    test_server::{Reply, serve_once},
};
use baton_proto::{
    AssistantMessage, FinishReason, Item, LlmResponse, ModelConfig, ReasoningPart, ToolCall,
    ToolDefinition, Usage, item,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const TOOL_CALL_JSON: &str = include_str!("fixtures/tool_call.json");
const TOOL_CALL_SSE: &str = include_str!("fixtures/tool_call.sse");
const INCOMPLETE_JSON: &str = include_str!("fixtures/incomplete.json");
const REFUSAL_JSON: &str = include_str!("fixtures/refusal.json");
const FAILED_SSE: &str = include_str!("fixtures/failed.sse");
const ERROR_SSE: &str = include_str!("fixtures/error.sse");

/// A reasoning item as the API sends it (keys deliberately not in sorted order).
const REASONING_ITEM: &str = r#"{"id":"rs_a","type":"reasoning","summary":[{"type":"summary_text","text":"Read a.rs."}],"encrypted_content":"gAAAAABopaque=="}"#;

fn part(provider: &str, data: &str, position: u32) -> ReasoningPart {
    ReasoningPart {
        provider: provider.into(),
        kind: "reasoning".into(),
        data: data.into(),
        position,
        ..Default::default()
    }
}

/// A message item kept beside reasoning items ([`super::MESSAGE_KIND`]).
fn message_part(text: &str, position: u32) -> ReasoningPart {
    ReasoningPart {
        provider: PROVIDER.into(),
        kind: super::MESSAGE_KIND.into(),
        data: json!({
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        })
        .to_string(),
        position,
        ..Default::default()
    }
}

fn assistant(text: &str, calls: &[(&str, &str, &str)], parts: Vec<ReasoningPart>) -> Item {
    assistant_item(AssistantMessage {
        text: text.into(),
        tool_calls: crate::llm::test_items::calls(calls),
        finish_reason: FinishReason::ToolCalls as i32,
        reasoning: "summary, not sent back".into(),
        text_stored: None,
        reasoning_parts: parts,
    })
}

fn sample_request() -> LlmRequest {
    LlmRequest {
        model: Some(ModelConfig {
            provider: PROVIDER.into(),
            model: "gpt-5".into(),
            max_output_tokens: 2048,
            reasoning_effort: "low".into(),
            temperature: Some(0.5),
            ..Default::default()
        }),
        system_prompt: "You are baton.".into(),
        cache_key: "run-42".into(),
        conversation: vec![
            user("fix the bug"),
            assistant(
                "Looking.",
                &[
                    ("call_1", "read_file", r#"{"path":"src/a.rs"}"#),
                    ("call_2", "shell", "{not json"),
                ],
                vec![
                    part(PROVIDER, REASONING_ITEM, 0),
                    // Another provider's part (a run that switched provider): dropped.
                    part("anthropic", r#"{"type":"thinking"}"#, 0),
                    part(
                        PROVIDER,
                        r#"{"id":"rs_b","type":"reasoning","summary":[],"encrypted_content":"gAAB"}"#,
                        2,
                    ),
                ],
            ),
            result("call_1", "fn a() {}", false),
            result("call_2", "not valid JSON", true),
            user("thanks"),
        ],
        tools: vec![ToolDefinition {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: r#"{"type":"object","properties":{"path":{"type":"string"}}}"#.into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn expected_body(stream: bool) -> Value {
    json!({
        "model": "gpt-5",
        "instructions": "You are baton.",
        "input": [
            {"role": "user", "content": "fix the bug"},
            serde_json::from_str::<Value>(REASONING_ITEM).unwrap(),
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Looking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "read_file",
             "arguments": r#"{"path":"src/a.rs"}"#},
            {"id": "rs_b", "type": "reasoning", "summary": [], "encrypted_content": "gAAB"},
            {"type": "function_call", "call_id": "call_2", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "fn a() {}"},
            {"type": "function_call_output", "call_id": "call_2", "output": "ERROR: not valid JSON"},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{
            "type": "function",
            "name": "read_file",
            "description": "Reads a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            "strict": false,
        }],
        "max_output_tokens": 2048,
        "reasoning": {"effort": "low"},
        // gpt-5 is a reasoning model: the run's temperature is not sent.
        "prompt_cache_key": "run-42",
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "stream": stream,
    })
}

fn provider(base: &str) -> OpenAiResponses {
    OpenAiResponses::new(
        format!("{base}/v1"),
        Some("sk-test".into()),
        Duration::from_secs(10),
    )
    .unwrap()
}

#[test]
fn request_body_maps_the_conversation_and_replays_reasoning_at_its_place() {
    assert_eq!(
        request_body_for(&sample_request(), false),
        expected_body(false)
    );
    // Defaults: no optional field, the default model.
    let bare = LlmRequest {
        conversation: vec![user("hi")],
        ..Default::default()
    };
    assert_eq!(
        request_body_for(&bare, true),
        json!({
            "model": DEFAULT_MODEL,
            "input": [{"role": "user", "content": "hi"}],
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "stream": true,
        })
    );
}

#[tokio::test]
async fn an_unknown_reasoning_effort_is_refused_before_sending() {
    let mut request = sample_request();
    if let Some(m) = request.model.as_mut() {
        m.reasoning_effort = "extreme".into();
    }
    // Nothing listens there: a request sent would be a transport error.
    let err = provider("http://127.0.0.1:9")
        .generate(&request)
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Config(_)), "{err}");
    assert!(!err.is_retryable());
    let message = err.to_string();
    assert!(
        message.contains("'extreme'")
            && message.contains("none, minimal, low, medium, high, xhigh"),
        "{message}"
    );
    // Each listed effort goes to a model that takes it; gpt-5 takes `minimal` not `none`,
    // gpt-5.1 `none` not `minimal`.
    let with = |model: &str, effort: &str| {
        let mut r = request.clone();
        if let Some(m) = r.model.as_mut() {
            m.model = model.into();
            m.reasoning_effort = effort.into();
        }
        check_request(&r)
    };
    for effort in REASONING_EFFORTS {
        assert!(with("o3", effort).is_ok(), "{effort}");
    }
    assert!(with("gpt-5", "minimal").is_ok());
    assert!(with("gpt-5.1", "none").is_ok());
    let err = with("gpt-5.1-codex", "minimal").unwrap_err();
    assert!(
        err.to_string().contains("it takes none, low, medium, high"),
        "{err}"
    );
    let err = with("gpt-5-mini-2025-08-07", "none").unwrap_err();
    assert!(err.to_string().contains("it takes minimal, low"), "{err}");
    assert!(with("gpt-5", "xhigh").is_err());
}

/// The JSON text of `output[index]` exactly as it is written in `fixture`.
fn raw_output_item(fixture: &str, index: usize) -> String {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        output: Vec<&'a serde_json::value::RawValue>,
    }
    let body: Body<'_> = serde_json::from_str(fixture).unwrap();
    body.output[index].get().to_owned()
}

fn expected_tool_call_message() -> LlmResponse {
    LlmResponse {
        message: Some(AssistantMessage {
            text: "Reading the file.".into(),
            reasoning: "**Finding the bug**\n\nI should read src/a.rs first.".into(),
            tool_calls: vec![ToolCall {
                id: "call_12345xyz".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"src/a.rs"}"#.into(),
                ..Default::default()
            }],
            finish_reason: FinishReason::ToolCalls as i32,
            text_stored: None,
            reasoning_parts: vec![
                part(PROVIDER, &raw_output_item(TOOL_CALL_JSON, 0), 0),
                message_part("Reading the file.", 0),
            ],
        }),
        usage: Some(Usage {
            input_tokens: 1200,
            output_tokens: 300,
            total_tokens: 1500,
            cache_read_tokens: 1024,
            reasoning_tokens: 256,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn parses_a_whole_response_keeping_the_reasoning_item_as_it_arrived() {
    let r = parse_response(TOOL_CALL_JSON).unwrap();
    assert_eq!(r, expected_tool_call_message());
    let data = &r.message.as_ref().unwrap().reasoning_parts[0].data;
    // Byte for byte the fixture's text (its line breaks and key order included).
    assert!(TOOL_CALL_JSON.contains(data.as_str()), "{data}");
    assert!(data.contains('\n'));
}

#[test]
fn incomplete_and_refused_responses() {
    let r = parse_response(INCOMPLETE_JSON).unwrap();
    let m = r.message.unwrap();
    assert_eq!(m.text, "The answer is");
    assert_eq!(m.finish_reason, FinishReason::Length as i32);
    assert_eq!(
        m.reasoning_parts
            .iter()
            .map(|p| p.kind.as_str())
            .collect::<Vec<_>>(),
        ["reasoning", "message"]
    );
    assert_eq!(r.usage.map(|u| u.reasoning_tokens), Some(12));
    let r = parse_response(REFUSAL_JSON).unwrap();
    let m = r.message.unwrap();
    assert_eq!(m.text, "I can't help with that.");
    assert_eq!(m.finish_reason, FinishReason::ContentFilter as i32);
    let filtered = INCOMPLETE_JSON.replace("max_output_tokens", "content_filter");
    let m = parse_response(&filtered).unwrap().message.unwrap();
    assert_eq!(m.finish_reason, FinishReason::ContentFilter as i32);
    let err = parse_response(r#"{"id":"x","object":"list"}"#).unwrap_err();
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err}");
}

fn expected_stream_message() -> LlmResponse {
    LlmResponse {
        message: Some(AssistantMessage {
            text: "Searching now.".into(),
            reasoning: "Look for main.".into(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "search".into(),
                arguments: r#"{"pattern": "fn main", "path": "src"}"#.into(),
                ..Default::default()
            }],
            finish_reason: FinishReason::ToolCalls as i32,
            text_stored: None,
            reasoning_parts: vec![
                part(
                    PROVIDER,
                    r#"{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Look for main."}],"encrypted_content":"gAAAAABstream1=="}"#,
                    0,
                ),
                message_part("Searching now.", 0),
            ],
        }),
        usage: Some(Usage {
            input_tokens: 37,
            output_tokens: 11,
            total_tokens: 48,
            reasoning_tokens: 4,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn streams_reasoning_text_and_fragmented_function_calls() {
    // 7-byte HTTP chunks: records and escapes split everywhere.
    let (base, server) = serve_once(Reply::sse_chunked(TOOL_CALL_SSE, 7, true)).await;
    let response = provider(&base).generate(&sample_request()).await.unwrap();
    assert_eq!(response, expected_stream_message());
    let req = server.await.unwrap();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/responses")
    );
    assert_eq!(
        req.headers.get("authorization").map(String::as_str),
        Some("Bearer sk-test")
    );
    assert_eq!(req.body, expected_body(true));
}

#[tokio::test]
async fn a_stream_without_item_events_or_done_items_still_gives_the_message() {
    let records: Vec<&str> = TOOL_CALL_SSE.split_inclusive("\n\n").collect();
    // Only `response.created` and `response.completed`: the output comes from the latter.
    let terminal_only = format!("{}{}", records[0], records[19]);
    let (base, _server) = serve_once(Reply::sse_chunked(&terminal_only, 64, true)).await;
    let response = provider(&base).generate(&sample_request()).await.unwrap();
    assert_eq!(response, expected_stream_message());
    // Items added and streamed but never done: text and call from their deltas; a reasoning
    // item without its done event has no encrypted content to keep.
    let no_done: String = records
        .iter()
        .filter(|r| !r.contains("response.output_item.done") && !r.contains("response.completed"))
        .copied()
        .chain(std::iter::once(
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"output\":[]}}\n\n",
        ))
        .collect();
    let (base, _server) = serve_once(Reply::sse_chunked(&no_done, 64, true)).await;
    let m = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap()
        .message
        .unwrap();
    assert_eq!(m.text, "Searching now.");
    assert_eq!(
        m.tool_calls,
        expected_stream_message().message.unwrap().tool_calls
    );
    assert_eq!(m.reasoning_parts, Vec::<ReasoningPart>::new());
    assert_eq!(m.finish_reason, FinishReason::ToolCalls as i32);
}

#[tokio::test]
async fn the_reasoning_of_one_turn_goes_back_in_the_next_unchanged() {
    let (base, _server) = serve_once(Reply::sse_chunked(TOOL_CALL_SSE, 64, true)).await;
    let first = provider(&base).generate(&sample_request()).await.unwrap();
    let message = first.message.unwrap();
    let data = message.reasoning_parts[0].data.clone();
    let next = LlmRequest {
        conversation: vec![
            user("find main"),
            Item {
                kind: Some(item::Kind::Assistant(message)),
            },
            result("call_1", "src/main.rs:1", false),
        ],
        ..Default::default()
    };
    let body = request_body_for(&next, true);
    let input = body["input"].as_array().unwrap();
    assert_eq!(input[1], serde_json::from_str::<Value>(&data).unwrap());
    assert_eq!(input[2]["type"], "message");
    assert_eq!(input[3]["type"], "function_call");
    assert_eq!(input[4]["type"], "function_call_output");
}

#[tokio::test]
async fn a_stream_cut_before_its_terminal_event_is_retryable() {
    let cut = TOOL_CALL_SSE
        .split_inclusive("\n\n")
        .take(15)
        .collect::<String>();
    let (base, _server) = serve_once(Reply::sse_chunked(&cut, 40, false)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport { .. }), "{err}");
    assert!(err.is_retryable());
    // Closed cleanly after the last item but before `response.completed`: still cut.
    let almost = TOOL_CALL_SSE
        .split_inclusive("\n\n")
        .take(19)
        .collect::<String>();
    let (base, _server) = serve_once(Reply::sse_until_close(&almost)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("the stream was cut after"),
        "{err}"
    );
}

#[tokio::test]
async fn failed_responses_and_error_events_are_classified() {
    let (base, _server) = serve_once(Reply::sse_chunked(FAILED_SSE, 64, true)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::Unavailable { status: 500, message, .. }
            if message == "The model failed to generate a response."),
        "{err}"
    );
    let (base, _server) = serve_once(Reply::sse_chunked(ERROR_SSE, 64, true)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::RateLimited { .. }), "{err}");
    let overflow = ERROR_SSE.replace("rate_limit_exceeded", "context_length_exceeded");
    let (base, _server) = serve_once(Reply::sse_chunked(&overflow, 64, true)).await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::ContextOverflow { .. }), "{err}");
    let failed_body = r#"{"id":"r","object":"response","status":"failed","error":{"code":"invalid_prompt","message":"Invalid prompt."},"output":[]}"#;
    let (base, _server) = serve_once(Reply::json(200, failed_body)).await;
    let err = provider(&base)
        .streaming(false)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LlmError::Rejected { status: 400, .. }),
        "{err}"
    );
}

fn error_body(message: &str, kind: &str, code: Option<&str>) -> String {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}}).to_string()
}

#[tokio::test]
async fn http_errors_are_classified_like_the_other_providers() {
    type Case = (Reply, fn(&LlmError) -> bool);
    let cases: Vec<Case> = vec![
        (
            Reply::json(
                401,
                &error_body(
                    "Incorrect API key provided",
                    "invalid_request_error",
                    Some("invalid_api_key"),
                ),
            ),
            |e| matches!(e, LlmError::Rejected { status: 401, .. }),
        ),
        (
            Reply::json(
                400,
                &error_body("Unsupported parameter", "invalid_request_error", None),
            ),
            |e| matches!(e, LlmError::Rejected { status: 400, .. }),
        ),
        (
            Reply::json(
                400,
                &error_body(
                    "Your input exceeds the context window of this model.",
                    "invalid_request_error",
                    Some("context_length_exceeded"),
                ),
            ),
            |e| matches!(e, LlmError::ContextOverflow { .. }),
        ),
        (
            Reply::json(
                429,
                &error_body(
                    "Rate limit reached",
                    "requests",
                    Some("rate_limit_exceeded"),
                ),
            )
            .header("retry-after", "2"),
            |e| matches!(e, LlmError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(2)),
        ),
        (
            Reply::json(
                500,
                &error_body("The server had an error", "server_error", None),
            ),
            |e| matches!(e, LlmError::Unavailable { status: 500, .. }),
        ),
    ];
    for (reply, expected) in cases {
        let status = reply.status;
        let (base, _server) = serve_once(reply).await;
        let err = provider(&base)
            .generate(&sample_request())
            .await
            .unwrap_err();
        assert!(expected(&err), "HTTP {status}: {err:?}");
        assert_eq!(
            err.is_retryable(),
            status == 429 || status == 500,
            "{status}"
        );
    }
}

#[test]
fn debug_never_prints_the_key() {
    let shown = format!("{:?}", provider("http://127.0.0.1:1"));
    assert!(!shown.contains("sk-test"), "{shown}");
    assert!(shown.contains("/v1/responses"), "{shown}");
}

#[test]
fn temperature_goes_only_to_models_that_take_it() {
    // Reasoning models answer 400 "Unsupported parameter: 'temperature'".
    let mut request = sample_request();
    for (model, sent) in [
        ("gpt-5", false),
        ("gpt-5.1-codex-mini", false),
        ("o4-mini", false),
        ("gpt-4.1", true),
    ] {
        request.model.as_mut().unwrap().model = model.into();
        let body = request_body_for(&request, true);
        assert_eq!(body.get("temperature").is_some(), sent, "{model}");
    }
}

/// The `input` items of the request that follows `output` (a whole response's output
/// items), as (type, text or call id or encrypted content).
fn replayed_after(output: Value) -> Vec<(String, String)> {
    let body =
        json!({"id": "resp_1", "object": "response", "status": "completed", "output": output});
    let message = parse_response(&body.to_string()).unwrap().message.unwrap();
    let request = LlmRequest {
        conversation: vec![user("go"), assistant_item(message), user("next")],
        ..sample_request()
    };
    request_body_for(&request, false)["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let kind = item["type"].as_str().unwrap_or("user").to_owned();
            let what = match kind.as_str() {
                "message" => item["content"][0]["text"].as_str().unwrap_or_default(),
                "function_call" => item["call_id"].as_str().unwrap_or_default(),
                "reasoning" => item["encrypted_content"].as_str().unwrap_or_default(),
                _ => item["content"].as_str().unwrap_or_default(),
            };
            (kind, what.to_owned())
        })
        .collect()
}

fn reasoning_item(id: &str, encrypted: Option<&str>) -> Value {
    let mut item = json!({"id": id, "type": "reasoning", "summary": []});
    if let Some(e) = encrypted {
        item["encrypted_content"] = json!(e);
    }
    item
}

fn message_item(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(id: &str) -> Value {
    json!({"type": "function_call", "call_id": id, "name": "list_files", "arguments": "{}"})
}

/// Each reasoning item goes back right before the item that followed it,
/// as the API requires ("Item 'rs_..' of type 'reasoning' was provided without its required
/// following item").
#[test]
fn reasoning_items_replay_before_the_items_that_followed_them() {
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut all = vec![("user".to_owned(), "go".to_owned())];
        all.extend(v.iter().map(|(a, b)| (a.to_string(), b.to_string())));
        all.push(("user".to_owned(), "next".to_owned()));
        all
    };
    // Two message items, each after its own reasoning: not merged into one.
    assert_eq!(
        replayed_after(json!([
            reasoning_item("rs_1", Some("E1")),
            message_item("First part. "),
            reasoning_item("rs_2", Some("E2")),
            message_item("Second part."),
        ])),
        pairs(&[
            ("reasoning", "E1"),
            ("message", "First part. "),
            ("reasoning", "E2"),
            ("message", "Second part."),
        ])
    );
    // A call before a message, a reasoning item between: the order as issued.
    assert_eq!(
        replayed_after(json!([
            reasoning_item("rs_1", Some("E1")),
            call_item("call_a"),
            reasoning_item("rs_2", Some("E2")),
            message_item("Done listing."),
            call_item("call_b"),
        ])),
        pairs(&[
            ("reasoning", "E1"),
            ("function_call", "call_a"),
            ("reasoning", "E2"),
            ("message", "Done listing."),
            ("function_call", "call_b"),
        ])
    );
    // A reasoning-only answer (`incomplete`, out of output tokens): nothing to pair it with.
    assert_eq!(
        replayed_after(json!([reasoning_item("rs_1", Some("E1"))])),
        pairs(&[])
    );
    // A reasoning item left last, and one without its encrypted content (store=false cannot
    // look it up): not sent.
    assert_eq!(
        replayed_after(json!([
            reasoning_item("rs_1", None),
            message_item("Answer."),
            reasoning_item("rs_2", Some("E2")),
        ])),
        pairs(&[("message", "Answer.")])
    );
}
