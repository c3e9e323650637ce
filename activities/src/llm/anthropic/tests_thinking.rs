//! Extended thinking (the request parameter, `max_tokens`, thinking blocks parsed from the
//! docs' whole and streamed examples and sent back unchanged at their positions) and the stop
//! reasons that are not a plain finish (`model_context_window_exceeded`, `refusal`).

use baton_proto::{AssistantMessage, FinishReason, Item, LlmRequest, ModelConfig, item};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{
    DEFAULT_MAX_TOKENS, parse_response, request_body_for,
    tests::{part, provider, sample_request},
    thinking::thinking_for,
};
use crate::llm::test_items::{result, user};
use crate::llm::{
    LlmError, Provider,
    test_server::{Reply, serve_once},
};

const TOOL_USE: &str = include_str!("fixtures/thinking_tool_use.json");
const STREAM: &str = include_str!("fixtures/thinking_stream.sse");

fn thinking_model(budget: u32, max_output_tokens: u32) -> ModelConfig {
    ModelConfig {
        provider: "anthropic".into(),
        model: "claude-test".into(),
        thinking_budget_tokens: budget,
        max_output_tokens,
        temperature: Some(0.5),
        ..Default::default()
    }
}

#[test]
fn the_thinking_parameter_and_max_tokens() {
    let mut req = sample_request();
    req.model = Some(thinking_model(2048, 0));
    // A request that continues no turn (it ends with the user's words): thinking applies.
    req.conversation.truncate(2);
    let body = request_body_for(&req, false).unwrap();
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    // Raised to the budget + the default; no temperature (the API refuses it with thinking).
    assert_eq!(body["max_tokens"], json!(2048 + DEFAULT_MAX_TOKENS));
    assert!(body.get("temperature").is_none(), "{body}");

    assert_eq!(
        thinking_for(&thinking_model(2048, 4096))
            .unwrap()
            .max_tokens,
        4096
    );
    assert_eq!(
        thinking_for(&thinking_model(0, 0)).unwrap().max_tokens,
        DEFAULT_MAX_TOKENS
    );
    assert!(thinking_for(&thinking_model(0, 0)).unwrap().param.is_none());

    for (budget, max, says) in [
        (
            2048,
            2048,
            "must be greater than thinking_budget_tokens 2048",
        ),
        (2048, 1000, "raise max_output_tokens"),
        (512, 0, "at least 1024"),
    ] {
        let err = thinking_for(&thinking_model(budget, max)).err().unwrap();
        assert!(matches!(err, LlmError::Config(_)), "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
    let body = request_body_for(&sample_request(), false).unwrap();
    assert!(body.get("thinking").is_none());
    assert_eq!(body["temperature"], json!(0.5));
}

/// The message of `sse`, served in `piece`-byte chunks.
async fn streamed(sse: &str, piece: usize) -> AssistantMessage {
    let (base, _server) = serve_once(Reply::sse_chunked(sse, piece, true)).await;
    let r = provider(&base).generate(&sample_request()).await.unwrap();
    r.message.unwrap()
}

fn fixture_blocks() -> Vec<Value> {
    let v: Value = serde_json::from_str(TOOL_USE).unwrap();
    v["content"].as_array().unwrap().clone()
}

#[test]
fn whole_thinking_and_redacted_blocks_become_reasoning_parts() {
    let m = parse_response(TOOL_USE).unwrap().message.unwrap();
    assert_eq!(m.reasoning_parts.len(), 2);
    assert_eq!(
        (
            m.reasoning_parts[0].kind.as_str(),
            m.reasoning_parts[0].position
        ),
        ("thinking", 0)
    );
    assert_eq!(
        (
            m.reasoning_parts[1].kind.as_str(),
            m.reasoning_parts[1].position
        ),
        ("redacted_thinking", 0)
    );
    // Exactly the bytes that arrived.
    let thinking_text = &TOOL_USE[TOOL_USE.find("{\n      \"type\": \"thinking\"").unwrap()..];
    assert!(thinking_text.starts_with(&m.reasoning_parts[0].data));
    for (part, block) in m.reasoning_parts.iter().zip(fixture_blocks()) {
        assert_eq!(serde_json::from_str::<Value>(&part.data).unwrap(), block);
        assert_eq!(part.provider, "anthropic");
    }
    assert!(
        m.reasoning
            .starts_with("The user wants to know the current weather")
    );
    assert_eq!(m.tool_calls[0].id, "toolu_01CswdEQBMshySk6Y9DFKrfq");
    assert_eq!(m.finish_reason, FinishReason::ToolCalls as i32);
}

#[tokio::test]
async fn the_docs_thinking_stream() {
    let m = streamed(STREAM, 9).await;
    let thinking = "I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n\
                    1071 = 2 × 462 + 147\n462 = 3 × 147 + 21\n147 = 7 × 21 + 0\n\nSo GCD(1071, 462) = 21";
    assert_eq!(m.reasoning, thinking);
    assert_eq!(
        m.text,
        "The greatest common divisor of 1071 and 462 is **21**."
    );
    let data = json!({
        "type": "thinking",
        "thinking": thinking,
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...",
    });
    assert_eq!(m.reasoning_parts.len(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(&m.reasoning_parts[0].data).unwrap(),
        data
    );
    assert!(
        m.reasoning_parts[0]
            .data
            .starts_with(r#"{"type":"thinking","thinking":"#)
    );
    assert_eq!(m.reasoning_parts[0].position, 0);
    assert_eq!(m.finish_reason, FinishReason::Stop as i32);
}

#[tokio::test]
async fn a_streamed_redacted_block_and_interleaved_positions() {
    let events = [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "shell", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "thinking_delta", "thinking": "then"}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "signature_delta", "signature": "s2"}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ];
    let sse: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    let m = streamed(&sse, 11).await;
    assert_eq!(
        m.reasoning_parts,
        vec![
            part(
                "redacted_thinking",
                r#"{"type":"redacted_thinking","data":"EmwKAhgB"}"#,
                0
            ),
            part(
                "thinking",
                r#"{"type":"thinking","thinking":"then","signature":"s2"}"#,
                1
            ),
        ]
    );
    assert_eq!(m.reasoning, "then");
}

/// The fixture's turn, its tool result, and the next request with `model`.
fn next_request(model: ModelConfig, previous: AssistantMessage) -> LlmRequest {
    LlmRequest {
        model: Some(model),
        conversation: vec![
            user("What's the weather in Paris?"),
            Item {
                kind: Some(item::Kind::Assistant(previous)),
            },
            result(
                "toolu_01CswdEQBMshySk6Y9DFKrfq",
                "Current temperature: 88°F",
                false,
            ),
        ],
        ..sample_request()
    }
}

#[tokio::test]
async fn thinking_blocks_go_back_unchanged_at_their_positions() {
    let previous = parse_response(TOOL_USE).unwrap().message.unwrap();
    let (base, server) = serve_once(Reply::json(200, TOOL_USE)).await;
    provider(&base)
        .streaming(false)
        .generate(&next_request(thinking_model(2048, 0), previous.clone()))
        .await
        .unwrap();
    let sent = server.await.unwrap().body;
    let content = sent["messages"][1]["content"].as_array().unwrap().clone();
    // thinking, redacted_thinking, text, tool_use: the fixture's blocks, as they came.
    assert_eq!(content, fixture_blocks());

    // Thinking off: the blocks stay out (text and tool calls still go).
    let body =
        request_body_for(&next_request(thinking_model(0, 0), previous.clone()), false).unwrap();
    assert_eq!(body["messages"][1]["content"].as_array().unwrap().len(), 2);

    // Another provider's parts never go to anthropic.
    let mut foreign = previous;
    for p in &mut foreign.reasoning_parts {
        p.provider = "openai-responses".into();
    }
    let body = request_body_for(&next_request(thinking_model(2048, 0), foreign), false).unwrap();
    assert_eq!(body["messages"][1]["content"][0]["type"], json!("text"));
}

#[tokio::test]
async fn context_window_exceeded_is_an_overflow_and_refusal_a_content_filter() {
    let whole = |reason: &str| {
        format!(
            r#"{{"content":[{{"type":"text","text":"x"}}],"stop_reason":"{reason}","usage":{{"input_tokens":1,"output_tokens":1}}}}"#
        )
    };
    let err = parse_response(&whole("model_context_window_exceeded")).unwrap_err();
    assert!(matches!(err, LlmError::ContextOverflow { .. }), "{err}");
    assert!(!err.is_retryable());
    let m = parse_response(&whole("refusal")).unwrap().message.unwrap();
    assert_eq!(m.finish_reason, FinishReason::ContentFilter as i32);

    let stream = |reason: &str| {
        STREAM.replace(
            r#""stop_reason": "end_turn""#,
            &format!(r#""stop_reason": "{reason}""#),
        )
    };
    let (base, _s) = serve_once(Reply::sse_chunked(
        &stream("model_context_window_exceeded"),
        64,
        true,
    ))
    .await;
    let err = provider(&base)
        .generate(&sample_request())
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::ContextOverflow { .. }), "{err}");
    let m = streamed(&stream("refusal"), 64).await;
    assert_eq!(m.finish_reason, FinishReason::ContentFilter as i32);
}

fn model_named(name: &str, budget: u32, effort: &str) -> ModelConfig {
    ModelConfig {
        provider: "anthropic".into(),
        model: name.into(),
        thinking_budget_tokens: budget,
        reasoning_effort: effort.into(),
        ..Default::default()
    }
}

/// Opus 4.7 takes only adaptive thinking (4.6 prefers it); budgeted
/// thinking on Claude 4 asks for interleaved thinking.
#[test]
fn each_model_gets_its_thinking_shape() {
    let mut req = sample_request();
    req.model = Some(model_named("claude-opus-4-7", 4096, "medium"));
    req.conversation.truncate(2);
    let body = request_body_for(&req, false).unwrap();
    assert_eq!(body["thinking"], json!({"type": "adaptive"}));
    assert_eq!(body["output_config"], json!({"effort": "medium"}));
    assert_eq!(body["max_tokens"], json!(4096 + DEFAULT_MAX_TOKENS));
    assert!(body.get("temperature").is_none());
    let t =
        super::thinking::thinking_for(&model_named("claude-opus-4-6-20260101", 2048, "")).unwrap();
    assert_eq!(
        (t.param, t.effort, t.beta),
        (Some(json!({"type": "adaptive"})), None, None)
    );
    let err = super::thinking::thinking_for(&model_named("claude-opus-4-7", 2048, "minimal"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("low, medium, high, max"), "{err}");
    // A worker can name more adaptive models.
    let rules = super::thinking::ThinkingRules {
        adaptive: vec!["claude-opus-5".into()],
    };
    let t =
        super::thinking::thinking_with(&model_named("claude-opus-5", 2048, ""), &rules).unwrap();
    assert_eq!(t.param, Some(json!({"type": "adaptive"})));
    // Budgeted on Claude 4: interleaved thinking; on 3.7: none; thinking off: none.
    let beta = |name: &str, budget: u32| {
        super::thinking::thinking_for(&model_named(name, budget, ""))
            .unwrap()
            .beta
    };
    assert_eq!(
        beta("claude-sonnet-4-5", 2048),
        Some(super::thinking::INTERLEAVED_THINKING_BETA)
    );
    assert_eq!(beta("claude-3-7-sonnet-latest", 2048), None);
    assert_eq!(beta("claude-sonnet-4-5", 0), None);
}

#[tokio::test]
async fn interleaved_thinking_and_configured_betas_go_in_one_header() {
    let (base, server) = serve_once(Reply::json(200, TOOL_USE)).await;
    let mut req = sample_request();
    req.model = Some(model_named("claude-sonnet-4-5", 2048, ""));
    provider(&base)
        .betas(vec!["context-1m-2025-08-07".into()])
        .generate(&req)
        .await
        .unwrap();
    let seen = server.await.unwrap();
    assert_eq!(
        seen.headers.get("anthropic-beta").map(String::as_str),
        Some("context-1m-2025-08-07,interleaved-thinking-2025-05-14")
    );
}

/// After a compaction the turn the request continues starts at the
/// summary; when its first assistant message has no thinking block (it was a later call of
/// its turn), the API would refuse the request with thinking on, so it goes without.
#[test]
fn a_turn_that_does_not_start_with_thinking_is_sent_without_thinking() {
    let call = |id: &str| baton_proto::ToolCall {
        id: id.into(),
        name: "list_files".into(),
        arguments: "{}".into(),
        ..Default::default()
    };
    let assistant = |id: &str, parts| Item {
        kind: Some(item::Kind::Assistant(AssistantMessage {
            tool_calls: vec![call(id)],
            finish_reason: FinishReason::ToolCalls as i32,
            reasoning_parts: parts,
            ..Default::default()
        })),
    };
    let thinking = part(
        "thinking",
        r#"{"type":"thinking","thinking":"look","signature":"sig"}"#,
        0,
    );
    let request = |first_parts| LlmRequest {
        model: Some(model_named("claude-sonnet-4-5", 2048, "")),
        conversation: vec![
            user("task"),
            user("summary of the older turns"),
            assistant("t1", first_parts),
            result("t1", "a", false),
            assistant("t2", vec![]),
            result("t2", "b", false),
        ],
        ..sample_request()
    };
    let body = request_body_for(&request(vec![]), false).unwrap();
    assert!(body.get("thinking").is_none(), "{body}");
    let body = request_body_for(&request(vec![thinking]), false).unwrap();
    assert_eq!(body["thinking"]["type"], "enabled");
}
