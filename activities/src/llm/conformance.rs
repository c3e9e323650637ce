//! The provider conformance suite: the same checks run over every HTTP wire format (OpenAI
//! Chat Completions, an OpenAI-compatible server with its quirks, Anthropic Messages, OpenAI
//! Responses), each answering with a recorded-shape stream written from its documentation,
//! and each captured request checked for what the real API needs:
//!
//! - the cacheable prefix (tools and system prompt) is byte-identical across three turns and
//!   a compaction, and the request asks for caching the provider's way;
//! - the provider's opaque reasoning parts come back unchanged in the next request, and are
//!   dropped when the run's provider is another;
//! - tool-call arguments that are not a JSON object go back as `{}`;
//! - cache reads are reported in the usage.
//!
//! Checks particular to one wire format (`max_completion_tokens`, object-form arguments,
//! thinking settings) live in that provider's `tests.rs`.

use std::time::Duration;

use crate::llm::test_items::*;
use baton_core::view;
use baton_proto::{AssistantMessage, Item, LlmRequest, ModelConfig, ToolDefinition, ViewSpec};
use serde_json::{Value, json};

use super::{
    Provider, anthropic, openai, responses,
    test_server::{Reply, serve_once},
};

/// One wire format under test.
struct Case {
    name: &'static str,
    /// The provider's name (`ModelConfig.provider`, `ReasoningPart.provider`).
    provider: &'static str,
    model: &'static str,
    make: fn(&str) -> Box<dyn Provider>,
    /// Settings the run needs for the provider to send reasoning back (Anthropic: thinking on).
    configure: fn(&mut ModelConfig),
    /// A streamed answer with reasoning parts and one tool call (`call_1`, `read_file`).
    reasoning_stream: &'static str,
    /// How many reasoning parts that answer carries.
    reasoning_parts: usize,
    /// A streamed plain-text answer.
    text_stream: &'static str,
    /// The part of a request body a provider caches across turns.
    prefix: fn(&Value) -> Value,
    /// Whether a request body asks for prompt caching.
    asks_for_caching: fn(&Value) -> bool,
    /// The arguments sent back for call `id`, as JSON.
    sent_arguments: fn(&Value, &str) -> Option<Value>,
}

const ANTHROPIC_REASONING: &str = include_str!("conformance/anthropic_thinking.sse");
const ANTHROPIC_TEXT: &str = include_str!("conformance/anthropic_text.sse");
const OPENAI_REASONING: &str = include_str!("conformance/openai_tool_call.sse");
const OPENAI_TEXT: &str = include_str!("conformance/openai_text.sse");
const QUIRKS_REASONING: &str = include_str!("conformance/quirks_reasoning.sse");
const RESPONSES_REASONING: &str = include_str!("conformance/responses_reasoning.sse");
const RESPONSES_TEXT: &str = include_str!("conformance/responses_text.sse");

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "anthropic",
            provider: anthropic::PROVIDER,
            model: "claude-sonnet-4-5",
            make: |base| {
                Box::new(
                    anthropic::Anthropic::new(base, None, "", Duration::from_secs(10))
                        .expect("provider"),
                )
            },
            configure: |model| {
                model.thinking_budget_tokens = 1024;
                model.max_output_tokens = 4096;
            },
            reasoning_stream: ANTHROPIC_REASONING,
            reasoning_parts: 2,
            text_stream: ANTHROPIC_TEXT,
            prefix: |body| json!({"tools": body["tools"], "system": body["system"]}),
            asks_for_caching: |body| contains_key(body, "cache_control"),
            sent_arguments: |body, id| {
                find_object(body, &|v| v["type"] == "tool_use" && v["id"] == id)
                    .map(|block| block["input"].clone())
            },
        },
        openai_case("openai", OPENAI_REASONING, 0),
        openai_case("openai-compatible quirks", QUIRKS_REASONING, 2),
        Case {
            name: "openai-responses",
            provider: responses::PROVIDER,
            model: "gpt-5",
            make: |base| {
                Box::new(
                    responses::OpenAiResponses::new(
                        format!("{base}/v1"),
                        None,
                        Duration::from_secs(10),
                    )
                    .expect("provider"),
                )
            },
            configure: |model| model.reasoning_effort = "medium".into(),
            reasoning_stream: RESPONSES_REASONING,
            reasoning_parts: 1,
            text_stream: RESPONSES_TEXT,
            prefix: |body| json!({"tools": body["tools"], "instructions": body["instructions"]}),
            asks_for_caching: |body| body["prompt_cache_key"] == "run-conformance",
            sent_arguments: |body, id| {
                find_object(body, &|v| {
                    v["type"] == "function_call" && v["call_id"] == id
                })
                .map(|call| {
                    let text = call["arguments"].as_str().unwrap_or("<not text>");
                    serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()))
                })
            },
        },
    ]
}

/// OpenAI Chat Completions, against api.openai.com's shapes or an OpenAI-compatible server's.
fn openai_case(name: &'static str, reasoning_stream: &'static str, parts: usize) -> Case {
    Case {
        name,
        provider: openai::PROVIDER,
        model: "gpt-4.1",
        make: |base| {
            Box::new(
                openai::OpenAi::new(format!("{base}/v1"), None, Duration::from_secs(10))
                    .expect("provider"),
            )
        },
        configure: |_| {},
        reasoning_stream,
        reasoning_parts: parts,
        text_stream: OPENAI_TEXT,
        prefix: |body| json!({"tools": body["tools"], "system": body["messages"][0]}),
        asks_for_caching: |body| body["prompt_cache_key"] == "run-conformance",
        sent_arguments: |body, id| {
            find_object(body, &|v| v["type"] == "function" && v["id"] == id).map(|call| {
                let text = call["function"]["arguments"]
                    .as_str()
                    .unwrap_or("<not text>");
                serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()))
            })
        },
    }
}

fn call(id: &str, arguments: &str) -> AssistantMessage {
    AssistantMessage {
        tool_calls: vec![crate::llm::test_items::call(id, "read_file", arguments)],
        ..Default::default()
    }
}

fn result(id: &str, content: &str) -> Item {
    crate::llm::test_items::result(id, content, false)
}

fn request(case: &Case, conversation: Vec<Item>) -> LlmRequest {
    let mut model = ModelConfig {
        provider: case.provider.into(),
        model: case.model.into(),
        max_output_tokens: 1024,
        ..Default::default()
    };
    (case.configure)(&mut model);
    LlmRequest {
        model: Some(model),
        system_prompt: "You are baton's agent. Work in the repository.".into(),
        conversation,
        tools: vec![
            ToolDefinition {
                name: "read_file".into(),
                description: "Read a file".into(),
                parameters: r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#.into(),
                read_only: true,
                mcp: None,
            },
            ToolDefinition {
                name: "shell".into(),
                description: "Run a command".into(),
                parameters: r#"{"type":"object","properties":{"command":{"type":"string"}}}"#.into(),
                read_only: false,
                mcp: None,
            },
        ],
        cache_key: "run-conformance".into(),
        ..Default::default()
    }
}

/// Sends `request` to `case`'s provider, answered with `stream`; the captured body and the
/// parsed answer.
async fn exchange(
    case: &Case,
    request: &LlmRequest,
    stream: &str,
) -> (Value, baton_proto::LlmResponse) {
    let (base, server) = serve_once(Reply::sse_chunked(stream, 64, true)).await;
    let provider = (case.make)(&base);
    let response = provider
        .generate(request)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let captured = server.await.expect("server");
    (captured.body, response)
}

fn contains_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(map) => map.contains_key(key) || map.values().any(|v| contains_key(v, key)),
        Value::Array(items) => items.iter().any(|v| contains_key(v, key)),
        _ => false,
    }
}

fn contains_value(v: &Value, wanted: &Value) -> bool {
    v == wanted
        || match v {
            Value::Object(map) => map.values().any(|v| contains_value(v, wanted)),
            Value::Array(items) => items.iter().any(|v| contains_value(v, wanted)),
            _ => false,
        }
}

fn find_object<'a>(v: &'a Value, matches: &dyn Fn(&Value) -> bool) -> Option<&'a Value> {
    if v.is_object() && matches(v) {
        return Some(v);
    }
    match v {
        Value::Object(map) => map.values().find_map(|v| find_object(v, matches)),
        Value::Array(items) => items.iter().find_map(|v| find_object(v, matches)),
        _ => None,
    }
}

/// Turns 1-3 of a tool loop, then the same run after a compaction: the cacheable prefix is
/// the same bytes every time, and every request asks for caching.
#[tokio::test]
async fn the_cached_prefix_is_byte_identical_across_three_turns_and_a_compaction() {
    for case in cases() {
        let mut items = vec![user("Fix the failing test in crates/parser.")];
        let mut conversations = vec![items.clone()];
        for turn in 1..=2 {
            let id = format!("call_{turn}");
            items.push(assistant_item(call(&id, r#"{"path":"src/lib.rs"}"#)));
            items.push(result(&id, &"fn parse() {}\n".repeat(20)));
            conversations.push(items.clone());
        }
        let spec = ViewSpec {
            summary: "The agent read src/lib.rs twice.".into(),
            summary_upto: 3,
            elide_before: 0,
        };
        conversations.push(view::model_view(&items, &spec));
        let mut prefixes = Vec::new();
        for conversation in conversations {
            let (body, _) = exchange(&case, &request(&case, conversation), case.text_stream).await;
            assert!(
                (case.asks_for_caching)(&body),
                "{}: the request does not ask for caching: {body}",
                case.name
            );
            prefixes.push(serde_json::to_vec(&(case.prefix)(&body)).expect("json"));
        }
        assert!(
            prefixes.windows(2).all(|w| w[0] == w[1]),
            "{}: the cached prefix changed: {:?}",
            case.name,
            prefixes
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect::<Vec<_>>()
        );
        assert!(prefixes[0].len() > 100, "{}: no prefix", case.name);
    }
}

/// A reply with reasoning parts, then the next request: each part is in it unchanged; with
/// the parts marked as another provider's, none is.
#[tokio::test]
async fn reasoning_parts_come_back_unchanged_and_only_to_their_provider() {
    for case in cases() {
        let task = vec![user("Fix the failing test in crates/parser.")];
        let (_, response) =
            exchange(&case, &request(&case, task.clone()), case.reasoning_stream).await;
        let message = response.message.expect("message");
        assert_eq!(
            message.reasoning_parts.len(),
            case.reasoning_parts,
            "{}: {:?}",
            case.name,
            message.reasoning_parts
        );
        assert_eq!(message.tool_calls.len(), 1, "{}: {message:?}", case.name);
        let call_id = message.tool_calls[0].id.clone();
        for part in &message.reasoning_parts {
            assert_eq!(part.provider, case.provider, "{}: {part:?}", case.name);
        }
        let next = |message: AssistantMessage| {
            let mut conversation = task.clone();
            conversation.push(assistant_item(message));
            conversation.push(result(&call_id, "fn parse() {}"));
            request(&case, conversation)
        };
        let (body, _) = exchange(&case, &next(message.clone()), case.text_stream).await;
        for part in &message.reasoning_parts {
            let data: Value = serde_json::from_str(&part.data).expect("part data is JSON");
            assert!(
                contains_value(&body, &data),
                "{}: the {} part did not come back unchanged: {data} not in {body}",
                case.name,
                part.kind
            );
        }
        let mut foreign = message.clone();
        for part in &mut foreign.reasoning_parts {
            part.provider = "another-provider".into();
        }
        let (body, _) = exchange(&case, &next(foreign), case.text_stream).await;
        for part in &message.reasoning_parts {
            let data: Value = serde_json::from_str(&part.data).expect("part data is JSON");
            assert!(
                !contains_value(&body, &data),
                "{}: another provider's {} part was sent: {body}",
                case.name,
                part.kind
            );
        }
        assert!(
            (case.sent_arguments)(&body, &call_id).is_some(),
            "{}: the tool call itself must still go: {body}",
            case.name
        );
    }
}

/// Arguments that are not a JSON object (invalid JSON, an array) go back as `{}`: servers
/// refuse them (vLLM with a 400; Anthropic requires an object).
#[tokio::test]
async fn arguments_that_are_not_an_object_go_back_as_an_empty_object() {
    for case in cases() {
        for (id, bad) in [("call_bad", r#"{"path": "src/li"#), ("call_arr", "[1,2]")] {
            let conversation = vec![
                user("Fix it."),
                assistant_item(call(id, bad)),
                result(id, "ERROR: not valid JSON"),
            ];
            let (body, _) = exchange(&case, &request(&case, conversation), case.text_stream).await;
            assert_eq!(
                (case.sent_arguments)(&body, id),
                Some(json!({})),
                "{}: {bad} was sent back as is: {body}",
                case.name
            );
        }
    }
}

/// Every fixture reports prompt-cache reads; the usage carries them.
#[tokio::test]
async fn cache_reads_are_reported_in_the_usage() {
    for case in cases() {
        let (_, response) =
            exchange(&case, &request(&case, vec![user("hi")]), case.text_stream).await;
        let usage = response.usage.expect("usage");
        assert!(
            usage.cache_read_tokens > 0 && usage.cache_read_tokens <= usage.input_tokens,
            "{}: {usage:?}",
            case.name
        );
    }
}

/// Every wire format publishes what its stream received, for `baton watch`: at the end, the
/// text, the names of the tool calls and the reasoning of the message it assembled.
#[tokio::test]
async fn every_stream_publishes_its_text_tool_names_and_reasoning_as_it_goes() {
    let mut with_reasoning = Vec::new();
    for case in cases() {
        for stream in [case.text_stream, case.reasoning_stream] {
            let request = request(&case, vec![user("hi")]);
            let (base, server) = serve_once(Reply::sse_chunked(stream, 64, true)).await;
            let (sink, mut changes) = super::live::LiveSink::channel();
            let response = (case.make)(&base)
                .generate_live(&request, &sink)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            server.await.expect("server");
            assert!(changes.has_changed().unwrap_or(false), "{}", case.name);
            let live = changes.borrow_and_update().progress(3);
            let message = response.message.expect("message");
            assert_eq!(live.attempt, 3);
            assert_eq!(live.text_tail, message.text, "{}", case.name);
            assert_eq!(live.text_chars as usize, message.text.chars().count());
            let names: Vec<&str> = message.tool_calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(live.tool_calls, names, "{}", case.name);
            assert!(
                message.reasoning.contains(&live.reasoning_tail),
                "{}: {live:?}",
                case.name
            );
            assert!(live.seq > 0, "{}", case.name);
            if !live.reasoning_tail.is_empty() {
                with_reasoning.push(case.name);
            }
        }
    }
    // Thinking (Anthropic) and reasoning_content (the quirks server) at least.
    assert!(with_reasoning.len() >= 2, "{with_reasoning:?}");
}
