//! What OpenAI-compatible servers and reasoning models need of the Chat Completions wire:
//! object-form arguments (llama.cpp), arguments that are not an object sent back as `{}`
//! (vLLM), parallel calls sharing a stream index, `max_completion_tokens` for reasoning
//! models, and the cached/reasoning token details of the usage.

use super::{
    tests::{provider, sample_request},
    *,
};
use crate::llm::test_items::*;
use crate::llm::{
    Provider,
    test_server::{Reply, serve_once},
};
use baton_proto::{
    AssistantMessage, FinishReason, Item, LlmRequest, ModelConfig, ToolResult, Usage, item,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// Feeds `data:` payloads to a stream parser and returns its message.
fn parse_stream(chunks: &[Value]) -> AssistantMessage {
    use crate::llm::{sse::SseEvent, transport::ResponseParser};
    let mut state = response::StreamState::default();
    for c in chunks {
        let event = SseEvent {
            event: String::new(),
            data: c.to_string(),
            id: None,
        };
        state.on_event(&event).unwrap();
    }
    state.into_response().message.unwrap()
}

/// A `chat.completion.chunk` carrying `tool_calls` deltas (and a finish reason).
fn calls_chunk(calls: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "m", "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": finish}],
    })
}

#[test]
fn object_arguments_are_taken_as_their_json_text() {
    // llama.cpp `--tool-args-object`: `function.arguments` is the object itself.
    let body = json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a", "limit": 3}}},
                {"id": "call_2", "type": "function", "function": {"name": "list_files", "arguments": null}},
            ],
        }}],
    });
    let m = parse_response(&body.to_string()).unwrap().message.unwrap();
    assert_eq!(
        m.tool_calls,
        vec![
            // As serde_json writes it (keys sorted); the meaning is the model's.
            call("call_1", "read_file", r#"{"limit":3,"path":"a"}"#),
            call("call_2", "list_files", "{}"),
        ]
    );
    assert_eq!(m.finish_reason, FinishReason::ToolCalls as i32);

    // Streamed: the object in one delta, or string fragments after an object-less start.
    let m = parse_stream(&[
        calls_chunk(
            json!([{"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a"}}}]),
            None,
        ),
        calls_chunk(
            json!([{"index": 1, "id": "call_2", "type": "function", "function": {"name": "grep", "arguments": ""}}]),
            None,
        ),
        calls_chunk(
            json!([{"index": 1, "function": {"arguments": "{\"pattern\":"}}]),
            None,
        ),
        calls_chunk(
            json!([{"index": 1, "function": {"arguments": "\"x\"}"}}]),
            Some("tool_calls"),
        ),
    ]);
    assert_eq!(
        m.tool_calls,
        vec![
            call("call_1", "read_file", r#"{"path":"a"}"#),
            call("call_2", "grep", r#"{"pattern":"x"}"#),
        ]
    );
}

#[test]
fn invalid_arguments_are_sent_back_as_an_empty_object() {
    let mut request = sample_request();
    let calls = [
        ("c1", r#"{"command": "ls",}"#), // invalid JSON (trailing comma)
        ("c2", r#"["ls"]"#),             // JSON, but not an object
        ("c3", r#"{"command": "ls"}"#),  // valid: sent back byte for byte
    ];
    request.conversation = vec![
        user("hi"),
        Item {
            kind: Some(item::Kind::Assistant(AssistantMessage {
                tool_calls: calls
                    .iter()
                    .map(|(id, args)| call(id, "shell", args))
                    .collect(),
                finish_reason: FinishReason::ToolCalls as i32,
                ..Default::default()
            })),
        },
    ];
    request
        .conversation
        .extend(
            calls.iter().map(|(id, _)| Item {
                kind: Some(item::Kind::ToolResult(ToolResult {
                    call_id: (*id).into(),
                    name: "shell".into(),
                    content:
                        "The arguments of 'shell' are not valid JSON (..). The call did not run."
                            .into(),
                    is_error: true,
                    ..Default::default()
                })),
            }),
        );
    let body = request_body_for(&request, true);
    let sent: Vec<Value> = body["messages"][2]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["arguments"].clone())
        .collect();
    assert_eq!(
        sent,
        vec![json!("{}"), json!("{}"), json!(r#"{"command": "ls"}"#)]
    );
    // The tool results still tell the model what was wrong.
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "tool_call_id": "c1", "content":
            "ERROR: The arguments of 'shell' are not valid JSON (..). The call did not run."})
    );
}

#[test]
fn parallel_calls_sharing_an_index_are_split_by_id() {
    // Servers that number every parallel call `index: 0`; fragments without an id extend the
    // last call of their index, a repeated id continues its call.
    let start = |id: &str, name: &str| json!([{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]);
    let args = |text: &str| json!([{"index": 0, "function": {"arguments": text}}]);
    let m = parse_stream(&[
        calls_chunk(start("call_a", "read_file"), None),
        calls_chunk(args("{\"path\":"), None),
        calls_chunk(args("\"a\"}"), None),
        calls_chunk(start("call_b", "read_file"), None),
        calls_chunk(args("{\"path\":\"b\"}"), None),
        calls_chunk(
            json!([{"index": 0, "id": "call_c", "function": {"name": "list_files", "arguments": "{}"}}]),
            None,
        ),
        calls_chunk(
            json!([{"index": 0, "id": "call_c", "function": {"arguments": ""}}]),
            None,
        ),
        calls_chunk(json!([]), Some("tool_calls")),
    ]);
    assert_eq!(
        m.tool_calls,
        vec![
            call("call_a", "read_file", r#"{"path":"a"}"#),
            call("call_b", "read_file", r#"{"path":"b"}"#),
            call("call_c", "list_files", "{}"),
        ]
    );
    // Distinct indexes still order the calls by index, whatever order they start in.
    let m = parse_stream(&[
        calls_chunk(
            json!([{"index": 1, "id": "call_2", "function": {"name": "b", "arguments": "{}"}}]),
            None,
        ),
        calls_chunk(
            json!([{"index": 0, "id": "call_1", "function": {"name": "a", "arguments": "{}"}}]),
            Some("tool_calls"),
        ),
    ]);
    assert_eq!(
        m.tool_calls,
        vec![call("call_1", "a", "{}"), call("call_2", "b", "{}")]
    );
}

/// A server that changes the id in the middle of one call (no function
/// name in the later fragments) still gives one call, under its first id.
#[test]
fn an_id_changing_within_one_call_does_not_split_it() {
    let m = parse_stream(&[
        calls_chunk(
            json!([{"index": 0, "id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"pa"}}]),
            None,
        ),
        calls_chunk(
            json!([{"index": 0, "id": "chatcmpl-tool-x", "function": {"arguments": "th\":\"a\"}"}}]),
            None,
        ),
        calls_chunk(
            json!([{"index": 0, "id": "call_b", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]),
            None,
        ),
        calls_chunk(json!([]), Some("tool_calls")),
    ]);
    assert_eq!(
        m.tool_calls,
        vec![
            call("call_a", "read_file", r#"{"path":"a"}"#),
            call("call_b", "list_files", "{}"),
        ]
    );
}

fn model_request(model: &str) -> LlmRequest {
    LlmRequest {
        model: Some(ModelConfig {
            provider: "openai".into(),
            model: model.into(),
            max_output_tokens: 2048,
            temperature: Some(0.2),
            ..Default::default()
        }),
        conversation: vec![user("x")],
        ..Default::default()
    }
}

#[test]
fn reasoning_models_get_max_completion_tokens_and_no_temperature() {
    for model in [
        "o1",
        "o1-mini",
        "o3-mini",
        "o4-mini",
        "gpt-5",
        "gpt-5-mini",
        "openai/o3",
    ] {
        assert_eq!(
            request_body(&model_request(model)),
            json!({
                "model": model,
                "max_completion_tokens": 2048,
                "messages": [{"role": "user", "content": "x"}],
            }),
            "{model}"
        );
    }
    for model in [
        "gpt-4o",
        "gpt-4.1-mini",
        "llama-3.1-8b",
        "Qwen/Qwen2.5-Coder-7B-Instruct",
    ] {
        assert_eq!(
            request_body(&model_request(model)),
            json!({
                "model": model,
                "max_tokens": 2048,
                "temperature": 0.2,
                "messages": [{"role": "user", "content": "x"}],
            }),
            "{model}"
        );
    }
    // The worker's list replaces the default one (e.g. an Azure deployment name).
    let mine = vec!["my-reasoner".to_owned()];
    let body = request_body_with(&model_request("my-reasoner-eu"), false, &mine);
    assert_eq!(body["max_completion_tokens"], json!(2048));
    assert_eq!(
        (body.get("max_tokens"), body.get("temperature")),
        (None, None)
    );
    let body = request_body_with(&model_request("o3"), false, &mine);
    assert_eq!(
        (body["max_tokens"].clone(), body["temperature"].clone()),
        (json!(2048), json!(0.2))
    );
}

#[tokio::test]
async fn the_provider_sends_its_reasoning_models_list() {
    let body = r#"{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}"#;
    let (base, server) = serve_once(Reply::json(200, body)).await;
    let p = provider(&base).reasoning_models(vec!["gpt-test".into()]);
    p.generate(&sample_request()).await.unwrap();
    let sent = server.await.unwrap().body;
    assert_eq!(sent["max_completion_tokens"], json!(100));
    assert_eq!(
        (sent.get("max_tokens"), sent.get("temperature")),
        (None, None)
    );
}

/// The usage object of OpenAI's prompt-caching guide (`prompt_tokens_details.cached_tokens`,
/// `completion_tokens_details.reasoning_tokens`): cached and reasoning tokens are parts of the
/// prompt and completion counts, as in baton's `Usage`.
#[tokio::test]
async fn cached_and_reasoning_tokens_are_read_from_the_usage_details() {
    let body = include_str!("fixtures/chat_cached_usage.json");
    let (base, _server) = serve_once(Reply::json(200, body)).await;
    let r = provider(&base).generate(&sample_request()).await.unwrap();
    assert_eq!(
        r.usage.unwrap(),
        Usage {
            input_tokens: 2006,
            output_tokens: 300,
            total_tokens: 2306,
            cache_read_tokens: 1920,
            reasoning_tokens: 64,
            ..Default::default()
        }
    );
}
