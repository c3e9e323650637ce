//! Prompt caching and reasoning effort on the Chat Completions wire: `prompt_cache_key`,
//! `reasoning_effort`, a prefix
//! that stays byte-identical across turns, DeepSeek `reasoning_content` and Gemini
//! `extra_content` kept as reasoning parts and sent back, `refusal` as a content-filtered
//! answer. The answers are the documented shapes in `fixtures/`, read whole and streamed.

use std::time::Duration;

use crate::llm::test_items::*;
use baton_proto::{
    AssistantMessage, FinishReason, Item, LlmRequest, LlmResponse, ModelConfig, ReasoningPart,
    ToolDefinition, ToolResult, item,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;
use crate::llm::{
    Provider,
    test_server::{Reply, serve_once},
};

const DEEPSEEK_JSON: &str = include_str!("fixtures/deepseek_thinking_tool_call.json");
const DEEPSEEK_SSE: &str = include_str!("fixtures/deepseek_thinking_tool_call.sse");
const GEMINI_JSON: &str = include_str!("fixtures/gemini_thought_signature.json");
const GEMINI_SSE: &str = include_str!("fixtures/gemini_thought_signature.sse");
const REFUSAL_JSON: &str = include_str!("fixtures/refusal.json");
const REFUSAL_SSE: &str = include_str!("fixtures/refusal.sse");

fn provider(base: &str) -> OpenAi {
    OpenAi::new(format!("{base}/v1"), None, Duration::from_secs(10)).unwrap()
}

fn request(effort: &str, cache_key: &str) -> LlmRequest {
    LlmRequest {
        model: Some(ModelConfig {
            provider: PROVIDER.into(),
            model: "deepseek-reasoner".into(),
            reasoning_effort: effort.into(),
            ..Default::default()
        }),
        system_prompt: "You are baton.".into(),
        conversation: vec![user("weather in Hangzhou tomorrow?")],
        tools: vec![ToolDefinition {
            name: "get_date".into(),
            description: "today's date".into(),
            parameters: r#"{"type":"object","properties":{}}"#.into(),
            read_only: true,
            mcp: None,
        }],
        cache_key: cache_key.into(),
        ..Default::default()
    }
}

fn tool_result(call_id: &str) -> Item {
    Item {
        kind: Some(item::Kind::ToolResult(ToolResult {
            call_id: call_id.into(),
            name: "get_date".into(),
            content: "2026-12-01".into(),
            ..Default::default()
        })),
    }
}

/// The request of the next turn: `request` with `answer` and a result for each of its calls.
fn next_turn(mut request: LlmRequest, answer: &LlmResponse) -> LlmRequest {
    let message = answer.message.clone().unwrap();
    let ids: Vec<String> = message.tool_calls.iter().map(|c| c.id.clone()).collect();
    request.conversation.push(Item {
        kind: Some(item::Kind::Assistant(message)),
    });
    request
        .conversation
        .extend(ids.iter().map(|id| tool_result(id)));
    request
}

/// The first choice's message of a fixture.
fn fixture_message(fixture: &str) -> Value {
    let body: Value = serde_json::from_str(fixture).unwrap();
    body["choices"][0]["message"].clone()
}

/// The fixture answered whole and streamed (in 5-byte HTTP chunks), each read by the provider.
async fn both_ways(json_body: &str, sse: &str) -> [LlmResponse; 2] {
    let mut out = Vec::new();
    for reply in [
        Reply::json(200, json_body),
        Reply::sse_chunked(sse, 5, true),
    ] {
        let (base, server) = serve_once(reply).await;
        out.push(provider(&base).generate(&request("", "")).await.unwrap());
        server.await.unwrap();
    }
    [out.remove(0), out.remove(0)]
}

/// What the provider sends for `request`, captured.
async fn sent(request: &LlmRequest) -> Value {
    let body = r#"{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}"#;
    let (base, server) = serve_once(Reply::json(200, body)).await;
    provider(&base).generate(request).await.unwrap();
    server.await.unwrap().body
}

#[tokio::test]
async fn prompt_cache_key_is_the_runs_key_unless_the_worker_turns_it_off() {
    let body = sent(&request("", "run-7f3a")).await;
    assert_eq!(body["prompt_cache_key"], json!("run-7f3a"));
    assert_eq!(sent(&request("", "")).await.get("prompt_cache_key"), None);
    let wire = ChatCompletions {
        prompt_cache_key: false,
        ..Default::default()
    };
    let off = wire.body(&request("", "run-7f3a"), true);
    assert_eq!(off.get("prompt_cache_key"), None);
    assert_eq!(off["messages"], body["messages"]);
}

#[tokio::test]
async fn reasoning_effort_is_sent_and_an_unknown_one_is_refused_before_sending() {
    for effort in REASONING_EFFORTS {
        assert_eq!(
            sent(&request(effort, "")).await["reasoning_effort"],
            json!(effort)
        );
    }
    assert_eq!(sent(&request("", "")).await.get("reasoning_effort"), None);
    // Nothing listens there: a request sent would be a transport error, not this one.
    let p = provider("http://127.0.0.1:9");
    let err = p.generate(&request("extreme", "")).await.unwrap_err();
    assert!(matches!(err, LlmError::Config(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("\"extreme\"") && text.contains("none, minimal, low, medium, high, xhigh"),
        "{text}"
    );
}

/// The body's JSON text up to its first conversation message (the system message included).
fn prefix_text(body: &Value) -> String {
    let text = body.to_string();
    let first = body["messages"][1].to_string();
    let at = text.find(&first).unwrap();
    text[..at].to_owned()
}

/// The body without its conversation (model, settings, system message, tools) as JSON text.
fn settings_text(body: &Value) -> String {
    let mut body = body.clone();
    body["messages"].as_array_mut().unwrap().truncate(1);
    body.to_string()
}

#[tokio::test]
async fn the_prefix_before_the_conversation_is_byte_identical_across_three_turns() {
    let wire = ChatCompletions::default();
    let [deepseek, _] = both_ways(DEEPSEEK_JSON, DEEPSEEK_SSE).await;
    let [gemini, _] = both_ways(GEMINI_JSON, GEMINI_SSE).await;
    let turn1 = request("high", "run-1");
    let turn2 = next_turn(turn1.clone(), &deepseek);
    let turn3 = next_turn(turn2.clone(), &gemini);
    let bodies: Vec<Value> = [&turn1, &turn2, &turn3]
        .iter()
        .map(|r| wire.body(r, true))
        .collect();
    assert_eq!(bodies[0]["messages"][0]["role"], json!("system"));
    for body in &bodies[1..] {
        assert_eq!(prefix_text(body), prefix_text(&bodies[0]));
        assert_eq!(settings_text(body), settings_text(&bodies[0]));
    }
    // Every earlier message goes again as the same bytes (its reasoning state included).
    for pair in bodies.windows(2) {
        let (before, after) = (
            pair[0]["messages"].as_array(),
            pair[1]["messages"].as_array(),
        );
        let (before, after) = (before.unwrap(), after.unwrap());
        for (i, m) in before.iter().enumerate() {
            assert_eq!(after[i].to_string(), m.to_string(), "message {i}");
        }
    }
    assert_eq!(bodies[2]["tools"], bodies[0]["tools"]);
}

/// The part a message's `reasoning_content` of `text` is kept as (before any other block).
pub(super) fn reasoning_content_part(text: &str) -> ReasoningPart {
    ReasoningPart {
        provider: PROVIDER.into(),
        kind: KIND_REASONING_CONTENT.into(),
        data: Value::String(text.into()).to_string(),
        position: 0,
        ..Default::default()
    }
}

fn deepseek_part(fixture: &Value) -> ReasoningPart {
    let part = reasoning_content_part(fixture["reasoning_content"].as_str().unwrap());
    // `data` is the field's JSON as the fixture has it.
    assert_eq!(part.data, fixture["reasoning_content"].to_string());
    part
}

#[tokio::test]
async fn deepseek_reasoning_content_is_kept_and_sent_back_on_the_tool_call_turn() {
    let fixture = fixture_message(DEEPSEEK_JSON);
    for answer in both_ways(DEEPSEEK_JSON, DEEPSEEK_SSE).await {
        let m = answer.message.clone().unwrap();
        assert_eq!(m.reasoning, fixture["reasoning_content"].as_str().unwrap());
        assert_eq!(m.reasoning_parts, vec![deepseek_part(&fixture)]);
        assert_eq!(m.finish_reason, FinishReason::ToolCalls as i32);
        let next = sent(&next_turn(request("", ""), &answer)).await;
        let assistant = &next["messages"][2];
        assert_eq!(assistant["role"], json!("assistant"));
        assert_eq!(assistant["reasoning_content"], fixture["reasoning_content"]);
        assert_eq!(
            assistant["tool_calls"][0]["id"],
            fixture["tool_calls"][0]["id"]
        );
    }
}

#[tokio::test]
async fn gemini_extra_content_is_kept_per_call_and_sent_back_on_that_call() {
    let fixture = fixture_message(GEMINI_JSON);
    let extra = &fixture["tool_calls"][0]["extra_content"];
    for answer in both_ways(GEMINI_JSON, GEMINI_SSE).await {
        let m = answer.message.clone().unwrap();
        assert_eq!(
            m.reasoning_parts,
            vec![ReasoningPart {
                provider: PROVIDER.into(),
                kind: KIND_EXTRA_CONTENT.into(),
                data: extra.to_string(),
                position: 0,
                call_id: "function-call-7807419446263435104".into(),
                ..Default::default()
            }]
        );
        assert_eq!(m.tool_calls[0].arguments, r#"{"flight":"AA100"}"#);
        let next = sent(&next_turn(request("", ""), &answer)).await;
        let call = &next["messages"][2]["tool_calls"][0];
        assert_eq!(&call["extra_content"], extra);
        assert_eq!(call["function"]["name"], json!("check_flight"));
    }
}

#[test]
fn streamed_extra_content_in_two_deltas_is_merged_and_other_calls_get_none() {
    use crate::llm::{sse::SseEvent, transport::ResponseParser};
    let chunk = |calls: Value, finish: Value| {
        SseEvent {
        event: String::new(),
        data: json!({"choices": [{"index": 0, "delta": {"content": "Checking.", "tool_calls": calls}, "finish_reason": finish}]}).to_string(),
        id: None,
    }
    };
    let mut state = response::StreamState::default();
    let events = [
        chunk(
            json!([{"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}, "extra_content": {"google": {"thought_signature": "S1"}}}]),
            Value::Null,
        ),
        chunk(
            json!([{"index": 0, "extra_content": {"vendor": {"x": 1}}}]),
            Value::Null,
        ),
        chunk(
            json!([{"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]),
            json!("tool_calls"),
        ),
    ];
    for event in &events {
        state.on_event(event).unwrap();
    }
    let m = state.into_response().message.unwrap();
    assert_eq!(m.tool_calls.len(), 2);
    let part = &m.reasoning_parts[..];
    assert_eq!(part.len(), 1, "{part:?}");
    assert_eq!((part[0].call_id.as_str(), part[0].position), ("a", 1));
    let data: Value = serde_json::from_str(&part[0].data).unwrap();
    assert_eq!(
        data,
        json!({"google": {"thought_signature": "S1"}, "vendor": {"x": 1}})
    );
}

#[tokio::test]
async fn reasoning_parts_of_another_provider_are_not_sent() {
    let fixture = fixture_message(DEEPSEEK_JSON);
    let mut part = deepseek_part(&fixture);
    part.provider = "openai-responses".into();
    let mut req = request("", "");
    req.conversation.push(Item {
        kind: Some(item::Kind::Assistant(AssistantMessage {
            text: "done".into(),
            reasoning_parts: vec![part],
            ..Default::default()
        })),
    });
    let body = sent(&req).await;
    assert_eq!(
        body["messages"][2],
        json!({"role": "assistant", "content": "done"})
    );
}

#[tokio::test]
async fn openrouter_reasoning_stays_text_only() {
    let body = r#"{"choices":[{"message":{"content":"hi","reasoning":"thinking aloud"},"finish_reason":"stop"}]}"#;
    let (base, server) = serve_once(Reply::json(200, body)).await;
    let answer = provider(&base).generate(&request("", "")).await.unwrap();
    server.await.unwrap();
    let m = answer.message.unwrap();
    assert_eq!(
        (m.reasoning.as_str(), m.reasoning_parts.len()),
        ("thinking aloud", 0)
    );
}

#[tokio::test]
async fn a_refusal_is_the_answer_with_finish_content_filter() {
    let fixture = fixture_message(REFUSAL_JSON);
    for answer in both_ways(REFUSAL_JSON, REFUSAL_SSE).await {
        let m = answer.message.unwrap();
        assert_eq!(m.text, fixture["refusal"].as_str().unwrap());
        assert_eq!(m.finish_reason, FinishReason::ContentFilter as i32);
        assert_eq!(answer.usage.unwrap().input_tokens, 81);
    }
}

/// An assistant item of `text` with the given tool calls (no reasoning).
fn assistant_turn(text: &str, calls: &[&str]) -> Item {
    Item {
        kind: Some(item::Kind::Assistant(AssistantMessage {
            text: text.into(),
            tool_calls: calls
                .iter()
                .map(|id| baton_proto::ToolCall {
                    id: (*id).into(),
                    name: "get_date".into(),
                    arguments: "{}".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })),
    }
}

#[test]
fn an_empty_assistant_turn_is_left_out_and_a_tool_call_turn_has_the_content_the_server_takes() {
    // After a `length` stop with no text the turn has neither text nor tool
    // calls; OpenAI refuses it as `content: null`, Ollama refuses `null` even with calls.
    let mut r = request("", "");
    r.conversation.extend([
        assistant_turn("", &[]),
        user("continue"),
        assistant_turn("", &["c1"]),
        tool_result("c1"),
        assistant_turn("partial", &[]),
        user("continue"),
    ]);
    let body = ChatCompletions::default().body(&r, true);
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ]
    );
    assert_eq!(body["messages"][3]["content"], Value::Null);
    assert_eq!(body["messages"][5]["content"], json!("partial"));
    let ollama = ChatCompletions {
        tool_call_content: ToolCallContent::EmptyString,
        ..Default::default()
    };
    let body = ollama.body(&r, true);
    assert_eq!(body["messages"][3]["content"], json!(""));
    assert!(body["messages"][3]["tool_calls"].is_array());
}
