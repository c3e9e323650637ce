//! The Chat Completions request: baton's conversation as `messages` (system prompt, user
//! text, assistant text and `tool_calls`, `tool` results), tool schemas as `functions`; the
//! run's `prompt_cache_key` and `reasoning_effort`; the reasoning state this provider gave
//! back on assistant turns (DeepSeek `reasoning_content`, Gemini `tool_calls[].extra_content`).
//!
//! The body is stable across turns: `model`, the system message and `tools` come from the
//! run's settings only, so everything before the first conversation message is the same on
//! every call (prompt caching keys on that prefix).

use baton_proto::{AssistantMessage, LlmRequest, ModelConfig, item};
use serde_json::{Value, json};

use super::{DEFAULT_MODEL, PROVIDER};
use crate::llm::{
    LlmError,
    provider::{reasoning_parts_for, replayed_arguments_text, tool_schema},
};

pub use crate::llm::provider::REASONING_EFFORTS;

/// `ReasoningPart.kind` of DeepSeek's `reasoning_content` (data: the JSON string).
pub const KIND_REASONING_CONTENT: &str = "reasoning_content";
/// `ReasoningPart.kind` of a tool call's `extra_content` (Gemini thought signatures; data: the
/// JSON object, `call_id`: the call).
pub const KIND_EXTRA_CONTENT: &str = "extra_content";

/// What a Chat Completions body is built with besides the request: the worker's settings.
#[derive(Clone, Debug)]
pub(super) struct BodyOptions<'a> {
    /// Model-name prefixes of reasoning models (see [`is_reasoning_model`]).
    pub(super) reasoning_models: &'a [String],
    /// Whether to send `prompt_cache_key` (worker `[openai] prompt_cache_key`, default on;
    /// off for OpenAI-compatible servers that reject unknown fields).
    pub(super) prompt_cache_key: bool,
    /// The `content` of an assistant message that has tool calls and no text.
    pub(super) tool_call_content: ToolCallContent,
}

/// What a text-less assistant message with tool calls carries as `content` (worker `[openai]
/// tool_call_content`): OpenAI documents `null` ("required unless `tool_calls` is
/// specified"); Ollama's `/v1` refuses `null` on any message ("invalid message content type:
/// <nil>") and takes `""`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolCallContent {
    /// `"content": null` (what OpenAI documents; the default for OpenAI's own API).
    #[default]
    Null,
    /// `"content": ""` (the default for other servers: Ollama and llama-cpp-python refuse
    /// `null`).
    EmptyString,
}

/// What an endpoint gets when the worker's `[openai] tool_call_content` is unset: `null` for
/// OpenAI's own API (`api.openai.com`, Azure OpenAI), which documents it, and `""` for every
/// other server: Ollama's `/v1` refuses `null` ("invalid message content type: <nil>") and
/// so does llama-cpp-python's server (HTTP 500, "Input should be a valid string"; leaving
/// `content` out breaks its chat templates), while a string is what every server takes.
pub fn default_tool_call_content(base_url: &str) -> ToolCallContent {
    let openai_host = reqwest::Url::parse(base_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_ascii_lowercase))
        .is_some_and(|h| h == "api.openai.com" || h.ends_with(".openai.azure.com"));
    if openai_host {
        ToolCallContent::Null
    } else {
        ToolCallContent::EmptyString
    }
}

/// The run's `reasoning_effort`, if it set one: `Err` (a configuration error naming the
/// allowed values) for a value Chat Completions does not take, checked before anything is
/// sent.
pub fn reasoning_effort(model: &ModelConfig) -> Result<Option<&str>, LlmError> {
    let effort = model.reasoning_effort.trim();
    if effort.is_empty() {
        return Ok(None);
    }
    if REASONING_EFFORTS.contains(&effort) {
        if let Some(why) = crate::llm::provider::effort_refused_by(&model.model, effort) {
            return Err(LlmError::Config(why));
        }
        return Ok(Some(effort));
    }
    Err(LlmError::Config(format!(
        "reasoning effort {:?} is not one the openai provider accepts: use one of {} (or none)",
        model.reasoning_effort,
        REASONING_EFFORTS.join(", ")
    )))
}

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
    let options = BodyOptions {
        reasoning_models,
        prompt_cache_key: true,
        tool_call_content: ToolCallContent::Null,
    };
    build_body(request, stream, &options)
}

/// The assistant message of a turn: text (or, with tool calls and no text, what
/// `empty` says), its tool calls (each with the `extra_content` it came with) and the
/// `reasoning_content` it came with. None for a turn with neither text nor tool calls (what a
/// `length` stop that produced no text leaves): no server takes it (OpenAI refuses
/// `content: null` without `tool_calls`), and it tells the model nothing.
fn assistant_message(a: &AssistantMessage, empty: ToolCallContent) -> Option<Value> {
    if a.text.is_empty() && a.tool_calls.is_empty() {
        return None;
    }
    let content = match (a.text.is_empty(), empty) {
        (false, _) => Value::String(a.text.clone()),
        (true, ToolCallContent::Null) => Value::Null,
        (true, ToolCallContent::EmptyString) => Value::String(String::new()),
    };
    let mut m = json!({"role": "assistant", "content": content});
    let parts: Vec<_> = reasoning_parts_for(PROVIDER, a).collect();
    // The value as it arrived (a JSON string; an object): DeepSeek and Gemini compare it.
    let value = |kind: &str, call_id: &str| {
        parts
            .iter()
            .find(|p| p.kind == kind && p.call_id == call_id)
            .and_then(|p| serde_json::from_str::<Value>(&p.data).ok())
    };
    if let Some(reasoning) = value(KIND_REASONING_CONTENT, "") {
        m["reasoning_content"] = reasoning;
    }
    if !a.tool_calls.is_empty() {
        m["tool_calls"] = a
            .tool_calls
            .iter()
            .map(|c| {
                let mut call = json!({
                    "id": c.id,
                    "type": "function",
                    // Invalid arguments go back as `{}`: vLLM answers 400 to
                    // the raw text (the tool result says it was invalid).
                    "function": {
                        "name": c.name,
                        "arguments": replayed_arguments_text(&c.arguments),
                    },
                });
                if let Some(extra) = value(KIND_EXTRA_CONTENT, &c.id) {
                    call["extra_content"] = extra;
                }
                call
            })
            .collect();
    }
    Some(m)
}

/// The body of `request` under `options`; see [`request_body_with`].
pub(super) fn build_body(request: &LlmRequest, stream: bool, options: &BodyOptions<'_>) -> Value {
    let reasoning_models = options.reasoning_models;
    let model = request.model.clone().unwrap_or_default();
    let mut messages = Vec::with_capacity(request.conversation.len() + 1);
    if !request.system_prompt.is_empty() {
        messages.push(json!({"role": "system", "content": request.system_prompt}));
    }
    for entry in &request.conversation {
        match &entry.kind {
            Some(item::Kind::User(u)) => messages.push(json!({"role": "user", "content": u.text})),
            Some(item::Kind::Assistant(a)) => {
                messages.extend(assistant_message(a, options.tool_call_content));
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
            let parameters = tool_schema(t);
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
    // Checked before sending (`ChatCompletions::check`); an invalid value is never sent.
    if let Ok(Some(effort)) = reasoning_effort(&model) {
        body["reasoning_effort"] = json!(effort);
    }
    if options.prompt_cache_key && !request.cache_key.is_empty() {
        body["prompt_cache_key"] = json!(request.cache_key);
    }
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}
