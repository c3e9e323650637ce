//! The `anthropic` provider: the Messages API (`POST {base_url}/v1/messages`).
//!
//! Streams by default (`"stream": true`), assembling the message from the content-block
//! events. Baton's conversation becomes strictly alternating user/assistant messages: tool
//! results travel as `tool_result` blocks of a user message, merged with any user text that
//! follows them. The HTTP client never retries on its own: every failure is classified
//! ([`LlmError`]) and Temporal's retry policy decides.

use std::{collections::BTreeMap, time::Duration};

use baton_proto::{AssistantMessage, FinishReason, LlmRequest, LlmResponse, ToolCall, Usage, item};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{
    LlmError,
    error::{ErrorDetail, classify, classify_http, snippet},
    provider::{GenerateFuture, Provider, default_finish, http_client, is_event_stream},
    sse::{EventStream, SseEvent},
};

/// Default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// Default `anthropic-version` header.
pub const DEFAULT_VERSION: &str = "2023-06-01";
/// Model used when the run names none.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
/// `max_tokens` when the run sets none (the API requires it).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// The provider's name in `ModelConfig.provider`.
pub const PROVIDER: &str = "anthropic";

/// A configured Messages API endpoint.
#[derive(Clone)]
pub struct Anthropic {
    base_url: String,
    api_key: Option<String>,
    version: String,
    stream: bool,
    http: reqwest::Client,
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("Anthropic")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("version", &self.version)
            .field("stream", &self.stream)
            .finish()
    }
}

impl Anthropic {
    /// A streaming provider talking to `base_url` (e.g. `https://api.anthropic.com`), sending
    /// `version` as `anthropic-version` and the key (when set) as `x-api-key`.
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        version: impl Into<String>,
        request_timeout: Duration,
    ) -> Result<Self, LlmError> {
        let version = version.into();
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
            version: if version.is_empty() {
                DEFAULT_VERSION.to_owned()
            } else {
                version
            },
            stream: true,
            http: http_client(request_timeout)?,
        })
    }

    /// Whether to stream (the default) or ask for one JSON body.
    pub fn streaming(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// The endpoint this provider calls.
    pub fn url(&self) -> String {
        format!("{}/v1/messages", self.base_url)
    }

    /// One Messages call.
    pub async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let body = request_body_for(request, self.stream);
        let url = self.url();
        let mut http = self
            .http
            .post(&url)
            .header("anthropic-version", &self.version)
            .json(&body);
        if let Some(key) = &self.api_key {
            http = http.header("x-api-key", key);
        }
        let response = http
            .send()
            .await
            .map_err(|e| LlmError::transport(PROVIDER, &url, &e))?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let text = response
                .text()
                .await
                .map_err(|e| LlmError::transport(PROVIDER, &url, &e))?;
            return Err(classify_http(PROVIDER, status.as_u16(), &headers, &text));
        }
        if self.stream && is_event_stream(&response) {
            return read_stream(response, &url).await;
        }
        let text = response
            .text()
            .await
            .map_err(|e| LlmError::transport(PROVIDER, &url, &e))?;
        parse_response(&text)
    }
}

impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        PROVIDER
    }

    fn generate<'a>(&'a self, request: &'a LlmRequest) -> GenerateFuture<'a> {
        Box::pin(Anthropic::generate(self, request))
    }
}

/// A tool call's stored arguments as a `tool_use` input: the parsed JSON object, or `{}` when
/// the model produced something that is not one.
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

/// Appends content blocks as a message of `role`, merged into the previous message when it
/// has the same role (the API requires alternation).
fn push_message(
    messages: &mut Vec<(&'static str, Vec<Value>)>,
    role: &'static str,
    blocks: Vec<Value>,
) {
    if blocks.is_empty() {
        return;
    }
    match messages.last_mut() {
        Some((last, content)) if *last == role => content.extend(blocks),
        _ => messages.push((role, blocks)),
    }
}

/// The Messages request body, streaming or not.
pub fn request_body_for(request: &LlmRequest, stream: bool) -> Value {
    let model = request.model.clone().unwrap_or_default();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for entry in &request.conversation {
        match &entry.kind {
            Some(item::Kind::User(u)) => {
                let blocks = if u.text.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "text", "text": u.text})]
                };
                push_message(&mut messages, "user", blocks);
            }
            Some(item::Kind::Assistant(a)) => {
                let mut blocks = Vec::with_capacity(a.tool_calls.len() + 1);
                if !a.text.is_empty() {
                    blocks.push(json!({"type": "text", "text": a.text}));
                }
                for call in &a.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.arguments),
                    }));
                }
                push_message(&mut messages, "assistant", blocks);
            }
            Some(item::Kind::ToolResult(r)) => {
                let mut block = json!({"type": "tool_result", "tool_use_id": r.call_id});
                if !r.content.is_empty() {
                    block["content"] = json!(r.content);
                }
                if r.is_error {
                    block["is_error"] = json!(true);
                }
                push_message(&mut messages, "user", vec![block]);
            }
            // Stubs never reach a provider (the activity loads real items).
            Some(item::Kind::Stub(_)) | None => {}
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, mut content)| {
            if role == "user" {
                // Tool results must come first in a user message; stable, so order is kept.
                content.sort_by_key(|b| b.get("type") != Some(&json!("tool_result")));
            }
            json!({"role": role, "content": content})
        })
        .collect();
    let name = if model.model.is_empty() {
        DEFAULT_MODEL.to_owned()
    } else {
        model.model.clone()
    };
    let max_tokens = if model.max_output_tokens > 0 {
        model.max_output_tokens
    } else {
        DEFAULT_MAX_TOKENS
    };
    let mut body = json!({"model": name, "max_tokens": max_tokens, "messages": messages});
    if !request.system_prompt.is_empty() {
        body["system"] = json!(request.system_prompt);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                let schema: Value = serde_json::from_str(&t.parameters)
                    .unwrap_or_else(|_| json!({"type": "object"}));
                json!({"name": t.name, "description": t.description, "input_schema": schema})
            })
            .collect();
    }
    if let Some(t) = model.temperature {
        body["temperature"] = json!(t);
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}

fn bad(message: String) -> LlmError {
    LlmError::BadResponse {
        provider: PROVIDER.to_owned(),
        message,
    }
}

/// Baton's finish reason for an Anthropic `stop_reason`.
fn finish_reason(stop_reason: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match stop_reason {
        Some("end_turn") | Some("stop_sequence") | Some("pause_turn") if !has_tool_calls => {
            FinishReason::Stop
        }
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens") | Some("model_context_window_exceeded") => FinishReason::Length,
        Some("refusal") => FinishReason::ContentFilter,
        _ => default_finish(has_tool_calls),
    }
}

#[derive(Deserialize, Default, Clone, Copy)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u32>,
    #[serde(default)]
    cache_read_input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
}

impl AnthropicUsage {
    /// All input tokens: uncached, written to and read from the prompt cache.
    fn input(&self) -> Option<u32> {
        self.input_tokens.map(|i| {
            i + self.cache_creation_input_tokens.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0)
        })
    }
}

fn usage(input: u32, output: u32) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        llm_calls: 0,
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageResponse {
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

/// The `input` of a complete `tool_use` block as `ToolCall.arguments` text.
fn input_text(input: &Value) -> String {
    match input {
        Value::Null => "{}".to_owned(),
        v => v.to_string(),
    }
}

/// Parses a (non-streaming) Messages response body.
pub fn parse_response(body: &str) -> Result<LlmResponse, LlmError> {
    let parsed: MessageResponse = serde_json::from_str(body)
        .map_err(|e| bad(format!("invalid message ({e}): {}", snippet(body))))?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    for block in parsed.content {
        match block {
            Block::Text { text: t } => text.push_str(&t),
            Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input_text(&input),
                ..Default::default()
            }),
            Block::Thinking { thinking } => reasoning.push_str(&thinking),
            Block::Other => {}
        }
    }
    let finish = finish_reason(parsed.stop_reason.as_deref(), !tool_calls.is_empty());
    Ok(LlmResponse {
        message: Some(AssistantMessage {
            text,
            tool_calls,
            finish_reason: finish as i32,
            reasoning,
        }),
        usage: parsed
            .usage
            .map(|u| usage(u.input().unwrap_or(0), u.output_tokens.unwrap_or(0))),
        ..Default::default()
    })
}

/// A `tool_use` block being streamed.
#[derive(Default)]
struct ToolBlock {
    id: String,
    name: String,
    /// `input` of `content_block_start`, used when no `partial_json` follows.
    start_input: Option<Value>,
    partial_json: String,
}

/// The message being assembled from a stream's events.
#[derive(Default)]
struct StreamState {
    text: String,
    reasoning: String,
    tools: BTreeMap<u64, ToolBlock>,
    stop_reason: Option<String>,
    input_tokens: u32,
    output_tokens: u32,
    saw_usage: bool,
    done: bool,
}

fn str_at<'v>(v: &'v Value, pointer: &str) -> Option<&'v str> {
    v.pointer(pointer).and_then(Value::as_str)
}

impl StreamState {
    fn on_event(&mut self, event: &SseEvent) -> Result<(), LlmError> {
        if event.data.trim().is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(&event.data).map_err(|e| {
            bad(format!(
                "invalid JSON in the stream ({e}): {}",
                snippet(&event.data)
            ))
        })?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.on_usage(u);
                }
            }
            "content_block_start" => {
                let block = v.get("content_block").unwrap_or(&Value::Null);
                match str_at(block, "/type") {
                    Some("text") => self.text.push_str(str_at(block, "/text").unwrap_or("")),
                    Some("thinking") => self
                        .reasoning
                        .push_str(str_at(block, "/thinking").unwrap_or("")),
                    Some("tool_use") => {
                        self.tools.insert(
                            index,
                            ToolBlock {
                                id: str_at(block, "/id").unwrap_or("").to_owned(),
                                name: str_at(block, "/name").unwrap_or("").to_owned(),
                                start_input: block.get("input").cloned(),
                                partial_json: String::new(),
                            },
                        );
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                match str_at(delta, "/type") {
                    Some("text_delta") => self.text.push_str(str_at(delta, "/text").unwrap_or("")),
                    Some("thinking_delta") => self
                        .reasoning
                        .push_str(str_at(delta, "/thinking").unwrap_or("")),
                    Some("input_json_delta") => {
                        let Some(tool) = self.tools.get_mut(&index) else {
                            return Err(bad(format!(
                                "input_json_delta for block {index}, which is not a tool_use"
                            )));
                        };
                        tool.partial_json
                            .push_str(str_at(delta, "/partial_json").unwrap_or(""));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = str_at(&v, "/delta/stop_reason") {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    self.on_usage(u);
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                let detail = ErrorDetail::from_value(&v).unwrap_or_else(|| ErrorDetail {
                    message: snippet(&event.data),
                    ..Default::default()
                });
                return Err(classify(PROVIDER, detail.implied_status(), None, detail));
            }
            // `ping`, `content_block_stop`, and event types added later.
            _ => {}
        }
        Ok(())
    }

    /// Usage of `message_start` (input, first output count) and `message_delta` (cumulative).
    fn on_usage(&mut self, u: &Value) {
        let Ok(u) = serde_json::from_value::<AnthropicUsage>(u.clone()) else {
            return;
        };
        if let Some(input) = u.input().filter(|i| *i > 0) {
            self.input_tokens = input;
            self.saw_usage = true;
        }
        if let Some(output) = u.output_tokens {
            self.output_tokens = output;
            self.saw_usage = true;
        }
    }

    fn into_response(self) -> LlmResponse {
        let tool_calls: Vec<ToolCall> = self
            .tools
            .into_values()
            .map(|t| ToolCall {
                id: t.id,
                name: t.name,
                arguments: if !t.partial_json.trim().is_empty() {
                    t.partial_json
                } else {
                    match t.start_input {
                        Some(Value::Object(m)) if !m.is_empty() => Value::Object(m).to_string(),
                        _ => "{}".to_owned(),
                    }
                },
                ..Default::default()
            })
            .collect();
        let finish = finish_reason(self.stop_reason.as_deref(), !tool_calls.is_empty());
        LlmResponse {
            message: Some(AssistantMessage {
                text: self.text,
                tool_calls,
                finish_reason: finish as i32,
                reasoning: self.reasoning,
            }),
            usage: self
                .saw_usage
                .then(|| usage(self.input_tokens, self.output_tokens)),
            ..Default::default()
        }
    }
}

/// Consumes a Messages event stream; it is complete at `message_stop`, and anything shorter is
/// a cut stream (retryable).
async fn read_stream(response: reqwest::Response, url: &str) -> Result<LlmResponse, LlmError> {
    let mut events = EventStream::new(Box::pin(response.bytes_stream()));
    let mut state = StreamState::default();
    while !state.done {
        match events.next_event().await {
            Ok(Some(event)) => state.on_event(&event)?,
            Ok(None) => {
                return Err(LlmError::cut_stream(
                    PROVIDER,
                    url,
                    events.bytes_read(),
                    None,
                ));
            }
            Err(e) => {
                return Err(LlmError::cut_stream(
                    PROVIDER,
                    url,
                    events.bytes_read(),
                    Some(&e),
                ));
            }
        }
    }
    Ok(state.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::test_server::{Reply, serve_once};
    use baton_proto::{Item, ModelConfig, ToolDefinition, ToolResult, UserMessage};
    use pretty_assertions::assert_eq;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn user(text: &str) -> Item {
        Item {
            kind: Some(item::Kind::User(UserMessage {
                text: text.into(),
                synthetic: false,
            })),
        }
    }

    fn assistant(text: &str, calls: &[(&str, &str, &str)]) -> Item {
        Item {
            kind: Some(item::Kind::Assistant(AssistantMessage {
                text: text.into(),
                tool_calls: calls
                    .iter()
                    .map(|(id, name, args)| ToolCall {
                        id: (*id).into(),
                        name: (*name).into(),
                        arguments: (*args).into(),
                        ..Default::default()
                    })
                    .collect(),
                finish_reason: FinishReason::ToolCalls as i32,
                reasoning: "not sent back".into(),
            })),
        }
    }

    fn result(call_id: &str, content: &str, is_error: bool) -> Item {
        Item {
            kind: Some(item::Kind::ToolResult(ToolResult {
                call_id: call_id.into(),
                name: "tool".into(),
                content: content.into(),
                is_error,
                full_output: String::new(),
                ..Default::default()
            })),
        }
    }

    fn sample_request() -> LlmRequest {
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
                },
                ToolDefinition {
                    name: "list_files".into(),
                    description: "Lists files.".into(),
                    parameters: "not a schema".into(),
                    read_only: true,
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
            "system": "You are baton.",
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
                    {"type": "text", "text": "also check b.rs"},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_3", "name": "list_files", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_3"},
                ]},
            ],
            "tools": [
                {"name": "read_file", "description": "Reads a file.", "input_schema": {
                    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
                }},
                {"name": "list_files", "description": "Lists files.", "input_schema": {"type": "object"}},
            ],
        })
    }

    fn provider(base: &str) -> Anthropic {
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
        assert_eq!(request_body_for(&sample_request(), false), expected_body());
        let mut streaming = expected_body();
        streaming["stream"] = json!(true);
        assert_eq!(request_body_for(&sample_request(), true), streaming);
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
            request_body_for(&req, false),
            json!({
                "model": DEFAULT_MODEL,
                "max_tokens": 1000,
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "t1", "name": "shell", "input": {"command": "make"}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                        {"type": "text", "text": "stop after this"},
                    ]},
                ],
            })
        );
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
                }),
                usage: Some(usage(125, 30)),
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
            }),
            usage: Some(usage(500, 89)),
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
        assert_eq!(r.usage, Some(usage(3, 2)));
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
        let reply = Reply::json(429, &error_body("rate_limit_error", "slow down"))
            .header("retry-after", "7");
        let (base, _server) = serve_once(reply).await;
        let err = provider(&base)
            .generate(&sample_request())
            .await
            .unwrap_err();
        let temporalio_common::ActivityError::Application(failure) = err.into_activity_error()
        else {
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
        let temporalio_common::ActivityError::Application(failure) = err.into_activity_error()
        else {
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
}
