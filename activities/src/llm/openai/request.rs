//! The Chat Completions request: baton's conversation as `messages` (system prompt, user
//! text, assistant text and `tool_calls`, `tool` results), tool schemas as `functions`.

use baton_proto::{LlmRequest, item};
use serde_json::{Value, json};

use super::DEFAULT_MODEL;
use crate::llm::provider::replayed_arguments_text;

/// Model-name prefixes of the reasoning models by default (worker `[openai]
/// reasoning_models`): the o-series and gpt-5.
pub const DEFAULT_REASONING_MODELS: &[&str] = &["o1", "o3", "o4", "gpt-5"];

/// [`DEFAULT_REASONING_MODELS`] as owned strings.
pub fn default_reasoning_models() -> Vec<String> {
    DEFAULT_REASONING_MODELS
        .iter()
        .map(|p| (*p).to_owned())
        .collect()
}

/// Whether `model` is a reasoning model: its name (after any `vendor/` part, as OpenRouter
/// spells them: `openai/o3-mini`) starts with one of `prefixes`. Reasoning models reject
/// `max_tokens` ("use max_completion_tokens") and `temperature`.
pub fn is_reasoning_model(model: &str, prefixes: &[String]) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    prefixes
        .iter()
        .any(|p| !p.is_empty() && name.starts_with(p.as_str()))
}

/// The non-streaming Chat Completions request body for a baton request.
pub fn request_body(request: &LlmRequest) -> Value {
    request_body_for(request, false)
}

/// The Chat Completions request body, streaming (with usage in the last chunk) or not, with
/// the default reasoning models.
pub fn request_body_for(request: &LlmRequest, stream: bool) -> Value {
    request_body_with(request, stream, &default_reasoning_models())
}

/// The Chat Completions request body, streaming or not; a model named by one of
/// `reasoning_models` (prefixes, see [`is_reasoning_model`]) gets the output limit as
/// `max_completion_tokens` and no `temperature`, any other `max_tokens` and `temperature`.
pub fn request_body_with(request: &LlmRequest, stream: bool, reasoning_models: &[String]) -> Value {
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
                                // Invalid arguments go back as `{}`: vLLM answers 400 to
                                // the raw text (the tool result says it was invalid).
                                "function": {
                                    "name": c.name,
                                    "arguments": replayed_arguments_text(&c.arguments),
                                },
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
    let reasoning = is_reasoning_model(&name, reasoning_models);
    if model.max_output_tokens > 0 {
        let field = if reasoning {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[field] = json!(model.max_output_tokens);
    }
    if let Some(t) = model.temperature
        && !reasoning
    {
        body["temperature"] = json!(t);
    }
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}
