//! The `openai` provider: Chat Completions (`POST {base_url}/chat/completions`) against any
//! OpenAI-compatible server (OpenAI, Azure, OpenRouter, vLLM, Ollama, llama.cpp).
//!
//! Non-streaming for now. The HTTP client never retries on its own: every failure is
//! classified ([`LlmError`]) and Temporal's retry policy decides.

use std::time::Duration;

use baton_proto::{AssistantMessage, FinishReason, LlmRequest, LlmResponse, ToolCall, Usage, item};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{LlmError, error::retry_after};

/// Default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Model used when the run names none.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
const PROVIDER: &str = "openai";

/// A configured OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAi {
    base_url: String,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("OpenAi")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl OpenAi {
    /// A provider talking to `base_url` (e.g. `https://api.openai.com/v1`).
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        request_timeout: Duration,
    ) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(request_timeout)
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: api_key.filter(|k| !k.is_empty()),
            http,
        })
    }

    /// The endpoint this provider calls.
    pub fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url)
    }

    /// One Chat Completions call.
    pub async fn generate(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let body = request_body(request);
        let url = self.url();
        let mut http = self.http.post(&url).json(&body);
        if let Some(key) = &self.api_key {
            http = http.bearer_auth(key);
        }
        let response = http.send().await.map_err(|e| transport(&url, &e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.map_err(|e| transport(&url, &e))?;
        if !status.is_success() {
            return Err(classify(status.as_u16(), &headers, &text));
        }
        parse_response(&text)
    }
}

fn transport(url: &str, e: &reqwest::Error) -> LlmError {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let mut message = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message = format!("{message}: {s}");
        source = s.source();
    }
    LlmError::Transport {
        provider: PROVIDER.to_owned(),
        url: url.to_owned(),
        message,
    }
}

/// The Chat Completions request body for a baton request.
pub fn request_body(request: &LlmRequest) -> Value {
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
            None => {}
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
    body
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
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
    tool_calls: Vec<ChatToolCall>,
}

#[derive(Deserialize)]
struct ChatToolCall {
    #[serde(default)]
    id: String,
    function: ChatFunction,
}

#[derive(Deserialize)]
struct ChatFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: u32,
    #[serde(default)]
    completion_tokens: u32,
    #[serde(default)]
    total_tokens: u32,
}

/// Parses a Chat Completions response body.
pub fn parse_response(body: &str) -> Result<LlmResponse, LlmError> {
    let bad = |message: String| LlmError::BadResponse {
        provider: PROVIDER.to_owned(),
        message,
    };
    let parsed: ChatResponse = serde_json::from_str(body)
        .map_err(|e| bad(format!("invalid JSON ({e}): {}", snippet(body))))?;
    let Some(choice) = parsed.choices.into_iter().next() else {
        return Err(bad(format!(
            "no choices in the response: {}",
            snippet(body)
        )));
    };
    let tool_calls: Vec<ToolCall> = choice
        .message
        .tool_calls
        .into_iter()
        .map(|c| ToolCall {
            id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
        })
        .collect();
    let finish = match choice.finish_reason.as_deref() {
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("stop") => FinishReason::Stop,
        _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    };
    let usage = parsed.usage.map(|u| Usage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
        total_tokens: if u.total_tokens > 0 {
            u.total_tokens
        } else {
            u.prompt_tokens + u.completion_tokens
        },
        llm_calls: 0,
    });
    Ok(LlmResponse {
        message: Some(AssistantMessage {
            text: choice.message.content.unwrap_or_default(),
            tool_calls,
            finish_reason: finish as i32,
            ..Default::default()
        }),
        usage,
    })
}

/// Classifies a non-2xx answer.
pub fn classify(status: u16, headers: &reqwest::header::HeaderMap, body: &str) -> LlmError {
    let (message, code) = error_message(body);
    let provider = PROVIDER.to_owned();
    let lower = message.to_lowercase();
    let context_overflow = status == 413
        || code.as_deref() == Some("context_length_exceeded")
        || (status == 400
            && (lower.contains("maximum context length")
                || lower.contains("context length")
                || lower.contains("context window")));
    if context_overflow {
        return LlmError::ContextOverflow { message };
    }
    match status {
        429 => LlmError::RateLimited {
            provider,
            message,
            retry_after: retry_after(headers),
        },
        408 | 409 | 500..=599 => LlmError::Unavailable {
            provider,
            status,
            message,
            retry_after: retry_after(headers),
        },
        _ => LlmError::Rejected {
            provider,
            status,
            message,
        },
    }
}

/// The provider's error message (and code) from an OpenAI-style error body.
fn error_message(body: &str) -> (String, Option<String>) {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let err = v.get("error").unwrap_or(&v);
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| err.as_str().map(str::to_owned));
        let code = err.get("code").and_then(Value::as_str).map(str::to_owned);
        if let Some(m) = message {
            return (m, code);
        }
    }
    (snippet(body), None)
}

fn snippet(body: &str) -> String {
    let mut end = body.len().min(500);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    body[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::{Item, ModelConfig, ToolDefinition, ToolResult, UserMessage};
    use pretty_assertions::assert_eq;
    use reqwest::header::HeaderMap;

    #[test]
    fn request_body_has_messages_tool_results_and_schemas() {
        let req = LlmRequest {
            model: Some(ModelConfig {
                model: "gpt-test".into(),
                max_output_tokens: 100,
                ..Default::default()
            }),
            system_prompt: "sys".into(),
            conversation: vec![
                Item {
                    kind: Some(item::Kind::User(UserMessage {
                        text: "hi".into(),
                        synthetic: false,
                    })),
                },
                Item {
                    kind: Some(item::Kind::Assistant(AssistantMessage {
                        text: String::new(),
                        tool_calls: vec![ToolCall {
                            id: "c1".into(),
                            name: "shell".into(),
                            arguments: r#"{"command":"ls"}"#.into(),
                        }],
                        finish_reason: FinishReason::ToolCalls as i32,
                        ..Default::default()
                    })),
                },
                Item {
                    kind: Some(item::Kind::ToolResult(ToolResult {
                        call_id: "c1".into(),
                        name: "shell".into(),
                        content: "denied".into(),
                        is_error: true,
                    })),
                },
            ],
            tools: vec![ToolDefinition {
                name: "shell".into(),
                description: "d".into(),
                parameters: r#"{"type":"object"}"#.into(),
                read_only: false,
            }],
        };
        let body = request_body(&req);
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "max_tokens": 100,
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "ERROR: denied"},
                ],
                "tools": [{"type": "function", "function": {"name": "shell", "description": "d", "parameters": {"type": "object"}}}],
            })
        );
    }

    #[test]
    fn parses_tool_calls_and_usage() {
        let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        let r = parse_response(body).unwrap();
        let m = r.message.unwrap();
        assert_eq!(m.tool_calls[0].name, "read_file");
        assert_eq!(m.tool_calls[0].arguments, r#"{"path":"a"}"#);
        assert_eq!(m.finish_reason, FinishReason::ToolCalls as i32);
        assert_eq!(r.usage.unwrap().total_tokens, 15);
        let cut = r#"{"choices":[{"message":{"content":"abc"},"finish_reason":"length"}]}"#;
        assert_eq!(
            parse_response(cut).unwrap().message.unwrap().finish_reason,
            FinishReason::Length as i32
        );
        assert!(parse_response("<html>").is_err());
    }

    #[test]
    fn classifies_errors() {
        let h = HeaderMap::new();
        let overflow = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            classify(400, &h, overflow),
            LlmError::ContextOverflow { .. }
        ));
        assert!(matches!(
            classify(429, &h, "{}"),
            LlmError::RateLimited { .. }
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
    }
}
