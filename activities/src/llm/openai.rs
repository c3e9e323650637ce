//! The `openai` provider: Chat Completions (`POST {base_url}/chat/completions`) against any
//! OpenAI-compatible server (OpenAI, Azure, OpenRouter, vLLM, Ollama, llama.cpp).
//!
//! Streams by default (`"stream": true` with `stream_options.include_usage`), assembling the
//! message from the deltas; a server that answers a streaming request with a plain JSON body is
//! read as a non-streaming answer. The HTTP client never retries on its own: every failure is
//! classified ([`LlmError`]) and Temporal's retry policy decides.

use std::{collections::BTreeMap, time::Duration};

use baton_proto::{AssistantMessage, FinishReason, LlmRequest, LlmResponse, ToolCall, Usage, item};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    LlmError,
    error::{ErrorDetail, classify_http, snippet},
    provider::{GenerateFuture, Provider, default_finish, http_client, is_event_stream},
    sse::{EventStream, SseEvent},
};

/// Default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Model used when the run names none.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The provider's name in `ModelConfig.provider`.
pub const PROVIDER: &str = "openai";

/// A configured OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAi {
    base_url: String,
    api_key: Option<String>,
    stream: bool,
    http: reqwest::Client,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("OpenAi")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("stream", &self.stream)
            .finish()
    }
}

impl OpenAi {
    /// A streaming provider talking to `base_url` (e.g. `https://api.openai.com/v1`).
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        request_timeout: Duration,
    ) -> Result<Self, LlmError> {
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
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
        format!("{}/chat/completions", self.base_url)
    }

    /// One Chat Completions call.
    pub async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let body = request_body_for(request, self.stream);
        let url = self.url();
        let mut http = self.http.post(&url).json(&body);
        if let Some(key) = &self.api_key {
            http = http.bearer_auth(key);
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
            return Err(classify(status.as_u16(), &headers, &text));
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

impl Provider for OpenAi {
    fn name(&self) -> &'static str {
        PROVIDER
    }

    fn generate<'a>(&'a self, request: &'a LlmRequest) -> GenerateFuture<'a> {
        Box::pin(OpenAi::generate(self, request))
    }
}

/// The non-streaming Chat Completions request body for a baton request.
pub fn request_body(request: &LlmRequest) -> Value {
    request_body_for(request, false)
}

/// The Chat Completions request body, streaming (with usage in the last chunk) or not.
pub fn request_body_for(request: &LlmRequest, stream: bool) -> Value {
    let model = request.model.clone().unwrap_or_default();
    let mut messages = Vec::with_capacity(request.conversation.len() + 1);
    if !request.system_prompt.is_empty() {
        messages.push(json!({"role": "system", "content": request.system_prompt}));
    }
    for entry in &request.conversation {
        match &entry.kind {
            Some(item::Kind::User(u)) => messages.push(json!({"role": "user", "content": u.text})),
            Some(item::Kind::Assistant(a)) => {
                let mut m = json!({
                    "role": "assistant",
                    "content": if a.text.is_empty() { Value::Null } else { Value::String(a.text.clone()) },
                });
                if !a.tool_calls.is_empty() {
                    m["tool_calls"] = a
                        .tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            })
                        })
                        .collect();
                }
                messages.push(m);
            }
            Some(item::Kind::ToolResult(r)) => {
                let content = if r.is_error {
                    format!("ERROR: {}", r.content)
                } else {
                    r.content.clone()
                };
                messages
                    .push(json!({"role": "tool", "tool_call_id": r.call_id, "content": content}));
            }
            // Stubs never reach a provider (the activity loads real items).
            Some(item::Kind::Stub(_)) | None => {}
        }
    }
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| {
            let parameters: Value = serde_json::from_str(&t.parameters)
                .unwrap_or_else(|_| json!({"type": "object"}));
            json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": parameters},
            })
        })
        .collect();
    let name = if model.model.is_empty() {
        DEFAULT_MODEL.to_owned()
    } else {
        model.model.clone()
    };
    let mut body = json!({"model": name, "messages": messages});
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if model.max_output_tokens > 0 {
        body["max_tokens"] = json!(model.max_output_tokens);
    }
    if let Some(t) = model.temperature {
        body["temperature"] = json!(t);
    }
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChatMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChatMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ChatToolCall>>,
}

#[derive(Deserialize)]
struct ChatToolCall {
    #[serde(default)]
    id: Option<String>,
    function: ChatFunction,
}

#[derive(Deserialize)]
struct ChatFunction {
    name: String,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize, Clone, Copy)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    total_tokens: Option<u32>,
}

impl ChatUsage {
    fn to_usage(self) -> Usage {
        let input = self.prompt_tokens.unwrap_or(0);
        let output = self.completion_tokens.unwrap_or(0);
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: self
                .total_tokens
                .filter(|t| *t > 0)
                .unwrap_or(input + output),
            llm_calls: 0,
        }
    }
}

fn bad(message: String) -> LlmError {
    LlmError::BadResponse {
        provider: PROVIDER.to_owned(),
        message,
    }
}

/// The `reasoning_content` (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama) text.
fn reasoning_of(reasoning_content: Option<String>, reasoning: Option<String>) -> Option<String> {
    reasoning_content
        .filter(|r| !r.is_empty())
        .or(reasoning)
        .filter(|r| !r.is_empty())
}

fn finish_reason(reason: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("stop") if !has_tool_calls => FinishReason::Stop,
        _ => default_finish(has_tool_calls),
    }
}

/// Tool-call arguments as sent to the workflow: an empty string means no arguments.
fn arguments_text(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        arguments
    }
}

/// Parses a (non-streaming) Chat Completions response body.
pub fn parse_response(body: &str) -> Result<LlmResponse, LlmError> {
    let parsed: ChatResponse = serde_json::from_str(body)
        .map_err(|e| bad(format!("invalid JSON ({e}): {}", snippet(body))))?;
    let Some(choice) = parsed.choices.unwrap_or_default().into_iter().next() else {
        return Err(bad(format!(
            "no choices in the response: {}",
            snippet(body)
        )));
    };
    let tool_calls: Vec<ToolCall> = choice
        .message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| ToolCall {
            id: c.id.unwrap_or_default(),
            name: c.function.name,
            arguments: arguments_text(c.function.arguments.unwrap_or_default()),
            ..Default::default()
        })
        .collect();
    let finish = finish_reason(choice.finish_reason.as_deref(), !tool_calls.is_empty());
    Ok(LlmResponse {
        message: Some(AssistantMessage {
            text: choice.message.content.unwrap_or_default(),
            tool_calls,
            finish_reason: finish as i32,
            reasoning: reasoning_of(choice.message.reasoning_content, choice.message.reasoning)
                .unwrap_or_default(),
        }),
        usage: parsed.usage.map(ChatUsage::to_usage),
        ..Default::default()
    })
}

/// One `chat.completion.chunk` (or an error object) of a stream.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<ChunkChoice>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Deserialize)]
struct DeltaToolCall {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<DeltaFunction>,
}

#[derive(Deserialize)]
struct DeltaFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Whether a stream goes on after an event.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Done,
}

/// The message being assembled from a stream's chunks.
#[derive(Default)]
struct StreamState {
    text: String,
    reasoning: String,
    calls: BTreeMap<u32, PartialCall>,
    finish: Option<String>,
    usage: Option<ChatUsage>,
}

impl StreamState {
    fn on_event(&mut self, event: &SseEvent) -> Result<Flow, LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            bad(format!(
                "invalid JSON in the stream ({e}): {}",
                snippet(data)
            ))
        })?;
        if chunk.error.as_ref().is_some_and(|e| !e.is_null()) || event.event == "error" {
            let detail = serde_json::from_str::<Value>(data)
                .ok()
                .and_then(|v| ErrorDetail::from_value(&v))
                .unwrap_or_else(|| ErrorDetail {
                    message: snippet(data),
                    ..Default::default()
                });
            return Err(super::error::classify(
                PROVIDER,
                detail.implied_status(),
                None,
                detail,
            ));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        let choices = chunk.choices.unwrap_or_default();
        let Some(choice) = choices.into_iter().find(|c| c.index.unwrap_or(0) == 0) else {
            return Ok(Flow::Continue);
        };
        if let Some(delta) = choice.delta {
            if let Some(text) = delta.content {
                self.text.push_str(&text);
            }
            if let Some(r) = reasoning_of(delta.reasoning_content, delta.reasoning) {
                self.reasoning.push_str(&r);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                self.on_tool_call_delta(call);
            }
        }
        if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
            self.finish = Some(reason);
        }
        Ok(Flow::Continue)
    }

    fn on_tool_call_delta(&mut self, call: DeltaToolCall) {
        let index = call.index.unwrap_or_else(|| {
            // Servers that omit the index: a new id starts a new call, fragments extend the last.
            let last = self.calls.keys().next_back().copied();
            match (&call.id, last) {
                (Some(id), Some(last)) if self.calls.get(&last).is_some_and(|c| &c.id == id) => {
                    last
                }
                (Some(id), _) if !id.is_empty() => last.map_or(0, |l| l + 1),
                (_, Some(last)) => last,
                (_, None) => 0,
            }
        });
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = call.id.filter(|id| !id.is_empty())
            && entry.id.is_empty()
        {
            entry.id = id;
        }
        if let Some(f) = call.function {
            if let Some(name) = f.name.filter(|n| !n.is_empty())
                && name != entry.name
            {
                // Sent once by OpenAI; some servers repeat it (skipped) or split it (appended).
                entry.name.push_str(&name);
            }
            if let Some(arguments) = f.arguments {
                entry.arguments.push_str(&arguments);
            }
        }
    }

    fn into_response(self) -> LlmResponse {
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_values()
            .map(|c| ToolCall {
                id: c.id,
                name: c.name,
                arguments: arguments_text(c.arguments),
                ..Default::default()
            })
            .collect();
        let finish = finish_reason(self.finish.as_deref(), !tool_calls.is_empty());
        LlmResponse {
            message: Some(AssistantMessage {
                text: self.text,
                tool_calls,
                finish_reason: finish as i32,
                reasoning: self.reasoning,
            }),
            usage: self.usage.map(ChatUsage::to_usage),
            ..Default::default()
        }
    }
}

/// Consumes a Chat Completions event stream. It is complete at `data: [DONE]`, or at the end
/// of the body once a finish reason came; anything shorter is a cut stream (retryable).
async fn read_stream(response: reqwest::Response, url: &str) -> Result<LlmResponse, LlmError> {
    let mut events = EventStream::new(Box::pin(response.bytes_stream()));
    let mut state = StreamState::default();
    loop {
        match events.next_event().await {
            Ok(Some(event)) => {
                if state.on_event(&event)? == Flow::Done {
                    break;
                }
            }
            Ok(None) if state.finish.is_some() => break,
            Ok(None) => {
                return Err(LlmError::cut_stream(
                    PROVIDER,
                    url,
                    events.bytes_read(),
                    None,
                ));
            }
            Err(e) if state.finish.is_some() => {
                tracing::debug!(cause = %e, "openai stream broke after its finish reason; keeping the message");
                break;
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

/// Classifies a non-2xx answer.
pub fn classify(status: u16, headers: &reqwest::header::HeaderMap, body: &str) -> LlmError {
    classify_http(PROVIDER, status, headers, body)
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

    fn sample_request() -> LlmRequest {
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
                parameters: r#"{"type":"object","properties":{"command":{"type":"string"}}}"#
                    .into(),
                read_only: false,
            }],
            ..Default::default()
        }
    }

    fn provider(base: &str) -> OpenAi {
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
                }),
                usage: Some(Usage {
                    input_tokens: 12,
                    output_tokens: 3,
                    total_tokens: 15,
                    llm_calls: 0,
                }),
                ..Default::default()
            }
        );
        let cut = r#"{"choices":[{"message":{"content":"abc","reasoning":"r"},"finish_reason":"length"}]}"#;
        let m = parse_response(cut).unwrap().message.unwrap();
        assert_eq!(m.finish_reason, FinishReason::Length as i32);
        assert_eq!((m.text.as_str(), m.reasoning.as_str()), ("abc", "r"));
        let filtered =
            r#"{"choices":[{"message":{"content":""},"finish_reason":"content_filter"}]}"#;
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
            }),
            usage: Some(Usage {
                input_tokens: 120,
                output_tokens: 45,
                total_tokens: 165,
                llm_calls: 0,
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
        let p: Box<dyn Provider> =
            Box::new(OpenAi::new(base, None, Duration::from_secs(10)).unwrap());
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
        let temporalio_common::ActivityError::Application(failure) = err.into_activity_error()
        else {
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
}
