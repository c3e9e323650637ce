//! The Messages request: baton's conversation as strictly alternating user/assistant
//! messages of content blocks (`text`, `tool_use`, `tool_result`), the system prompt and the
//! tool schemas (`input_schema`), with prompt-caching breakpoints ([`super::cache`]) and
//! extended thinking ([`super::thinking`]).

use baton_proto::{LlmRequest, ModelConfig, item};
use serde_json::{Value, json};

use super::{
    DEFAULT_MODEL,
    cache::{add_breakpoints, cache_control},
    thinking::{
        Thinking, ThinkingRules, thinking_with, turn_starts_with_thinking, with_thinking_blocks,
    },
};
use crate::llm::{
    LlmError,
    provider::{replayed_arguments, tool_schema},
};

/// What a request's `ModelConfig` asks of the body, checked ([`Options::of`]).
pub(super) struct Options {
    /// The `cache_control` of every breakpoint.
    cache_control: Value,
    pub(super) thinking: Thinking,
}

impl Options {
    /// The options of `model`; a `cache_ttl` or thinking budget the API would refuse is a
    /// [`LlmError::Config`] saying what to set instead.
    pub(super) fn of(model: &ModelConfig, rules: &ThinkingRules) -> Result<Self, LlmError> {
        Ok(Self {
            cache_control: cache_control(&model.cache_ttl)?,
            thinking: thinking_with(model, rules)?,
        })
    }

    /// No thinking, the default cache: only for a body that [`Options::of`] refused, which
    /// the transport never sends (`WireFormat::check` runs first).
    pub(super) fn fallback() -> Self {
        Self {
            cache_control: json!({"type": "ephemeral"}),
            thinking: Thinking {
                max_tokens: super::DEFAULT_MAX_TOKENS,
                param: None,
                effort: None,
                beta: None,
            },
        }
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

/// The Messages request body, streaming or not; a `ModelConfig` the API would refuse is a
/// [`LlmError::Config`] ([`Options::of`]).
pub fn request_body_for(request: &LlmRequest, stream: bool) -> Result<Value, LlmError> {
    let model = request.model.clone().unwrap_or_default();
    Ok(body_with(
        request,
        stream,
        &Options::of(&model, &ThinkingRules::default())?,
    ))
}

/// The body under checked options. Thinking blocks of earlier turns go back only when
/// thinking is on (the API takes them as the turns' own; with thinking off they are dropped).
pub(super) fn body_with(request: &LlmRequest, stream: bool, options: &Options) -> Value {
    let model = request.model.clone().unwrap_or_default();
    let thinking_on = options.thinking.param.is_some();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for entry in &request.conversation {
        match &entry.kind {
            Some(item::Kind::User(u)) => {
                // The API refuses whitespace-only text blocks ("text content blocks must
                // contain non-whitespace text"), and once one is stored every later request
                // would carry it: such text is left out.
                let blocks = if u.text.trim().is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "text", "text": u.text})]
                };
                push_message(&mut messages, "user", blocks);
            }
            Some(item::Kind::Assistant(a)) => {
                let mut blocks = Vec::with_capacity(a.tool_calls.len() + 1);
                if !a.text.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": a.text}));
                }
                for call in &a.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": replayed_arguments(&call.arguments),
                    }));
                }
                if thinking_on {
                    blocks = with_thinking_blocks(a, blocks);
                }
                push_message(&mut messages, "assistant", blocks);
            }
            Some(item::Kind::ToolResult(r)) => {
                let mut block = json!({"type": "tool_result", "tool_use_id": r.call_id});
                if !r.content.trim().is_empty() {
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
    let max_tokens = options.thinking.max_tokens;
    let mut body = json!({"model": name, "max_tokens": max_tokens, "messages": messages});
    if !request.system_prompt.is_empty() {
        body["system"] = json!(request.system_prompt);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                let schema = tool_schema(t);
                json!({"name": t.name, "description": t.description, "input_schema": schema})
            })
            .collect();
    }
    let continues_thinking = turn_starts_with_thinking(
        body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default(),
    );
    match &options.thinking.param {
        // The API refuses `temperature` with thinking on.
        Some(thinking) if continues_thinking => {
            body["thinking"] = thinking.clone();
            if let Some(effort) = &options.thinking.effort {
                body["output_config"] = json!({"effort": effort});
            }
        }
        Some(_) => tracing::info!(
            model = %body["model"],
            "the assistant turn this request continues does not start with a thinking block \
             (after a compaction, or a call that did not think): thinking is off for this request"
        ),
        None => {
            if let Some(t) = model.temperature {
                body["temperature"] = json!(t);
            }
        }
    }
    // A one-off prompt (compaction's summary) is never read back from the cache: writing it
    // would cost 1.25x (or 2x for 1 h) its input price for nothing.
    if !request.one_off {
        add_breakpoints(&mut body, &options.cache_control);
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}
