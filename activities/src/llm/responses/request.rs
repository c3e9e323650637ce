//! The Responses request: baton's conversation as `input` items (user messages, assistant
//! `message` items with `output_text`, `function_call` and `function_call_output` items, and
//! the `reasoning` items of earlier turns replayed unchanged at their places), the system
//! prompt as `instructions`, tool schemas as flat `function` tools.

use baton_proto::{AssistantMessage, LlmRequest, ReasoningPart, item};
use serde_json::{Value, json};

use super::{DEFAULT_MODEL, MESSAGE_KIND, PROVIDER};
use crate::llm::{
    LlmError,
    provider::{reasoning_parts_for, replayed_arguments_text, tool_schema},
};

pub use crate::llm::provider::REASONING_EFFORTS;

/// Checks what the body cannot express: a `reasoning_effort` the API does not take is a
/// [`LlmError::Config`] (not retried) naming the values it does.
pub fn check_request(request: &LlmRequest) -> Result<(), LlmError> {
    let effort = request
        .model
        .as_ref()
        .map(|m| m.reasoning_effort.as_str())
        .unwrap_or_default();
    if effort.is_empty() {
        return Ok(());
    }
    if REASONING_EFFORTS.contains(&effort) {
        let model = request
            .model
            .as_ref()
            .map(|m| m.model.as_str())
            .filter(|m| !m.is_empty())
            .unwrap_or(DEFAULT_MODEL);
        return match crate::llm::provider::effort_refused_by(model, effort) {
            Some(why) => Err(LlmError::Config(why)),
            None => Ok(()),
        };
    }
    Err(LlmError::Config(format!(
        "reasoning effort '{effort}' is not one the {PROVIDER} provider takes: use one of {} \
         (submit --reasoning-effort), or leave it unset for the model's default",
        REASONING_EFFORTS.join(", ")
    )))
}

/// The input items of one assistant message, in the order the API gave them: its text as
/// an output `message` (or, when kept, each message item as it came: [`MESSAGE_KIND`]
/// parts), its tool calls as `function_call` items, and its reasoning items (of this
/// provider) at their positions among those. A reasoning item is sent only with the item
/// that followed it and with its `encrypted_content` (with `store: false` the API cannot
/// look up any other): one left last (a reasoning-only `incomplete` answer) or without its
/// content is dropped, as the API would refuse the request ("provided without its required
/// following item", "Item with id 'rs_..' not found").
fn assistant_items(a: &AssistantMessage, input: &mut Vec<Value>) {
    let (mut messages, mut reasoning): (Vec<&ReasoningPart>, Vec<&ReasoningPart>) =
        reasoning_parts_for(PROVIDER, a).partition(|p| p.kind == MESSAGE_KIND);
    messages.sort_by_key(|p| p.position);
    reasoning.sort_by_key(|p| p.position);
    let calls = a.tool_calls.iter().map(|call| {
        json!({
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            // Invalid arguments go back as `{}` (the tool result says they were invalid).
            "arguments": replayed_arguments_text(&call.arguments),
        })
    });
    let mut blocks = Vec::with_capacity(a.tool_calls.len() + messages.len().max(1));
    if messages.is_empty() {
        if !a.text.is_empty() {
            blocks.push(json!({
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": a.text}],
            }));
        }
        blocks.extend(calls);
    } else {
        // Each message item at its index among the items, the calls in order around them.
        let mut messages = messages
            .into_iter()
            .filter_map(|p| Some((p.position as usize, parsed(&p.data)?)))
            .peekable();
        let mut calls = calls.peekable();
        loop {
            let at = blocks.len();
            let next = match (messages.peek(), calls.peek()) {
                (None, None) => break,
                (Some((position, _)), Some(_)) if *position > at => calls.next(),
                (Some(_), _) => messages.next().map(|(_, m)| m),
                (None, Some(_)) => calls.next(),
            };
            blocks.extend(next);
        }
    }
    let mut reasoning = reasoning.into_iter().peekable();
    for (at, block) in blocks.into_iter().enumerate() {
        while let Some(part) = reasoning.next_if(|p| p.position as usize <= at) {
            if let Some(item) = replayable(&part.data) {
                input.push(item);
            }
        }
        input.push(block);
    }
    // Parts after every block: no follower, not sent.
    for part in reasoning {
        tracing::debug!(
            provider = PROVIDER,
            position = part.position,
            "a reasoning item with no item after it is not sent back"
        );
    }
}

/// A stored part's JSON. One that is not JSON (it cannot be: it was stored from the
/// provider's answer) is dropped with a warning rather than failing every later turn.
fn parsed(data: &str) -> Option<Value> {
    serde_json::from_str::<Value>(data)
        .inspect_err(|e| {
            tracing::warn!(
                provider = PROVIDER,
                error = %e,
                "a stored output item is not JSON; it is not sent back"
            )
        })
        .ok()
}

/// A stored reasoning item as the same JSON value it arrived as, if it can be sent back:
/// with `store: false` only an item carrying its `encrypted_content` can.
fn replayable(data: &str) -> Option<Value> {
    let item = parsed(data)?;
    let encrypted = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty());
    if !encrypted {
        tracing::warn!(
            provider = PROVIDER,
            "a reasoning item without encrypted_content is not sent back (store=false)"
        );
        return None;
    }
    Some(item)
}

/// The Responses request body, streaming or not.
pub fn request_body_for(request: &LlmRequest, stream: bool) -> Value {
    let model = request.model.clone().unwrap_or_default();
    let mut input = Vec::with_capacity(request.conversation.len());
    for entry in &request.conversation {
        match &entry.kind {
            Some(item::Kind::User(u)) => input.push(json!({"role": "user", "content": u.text})),
            Some(item::Kind::Assistant(a)) => assistant_items(a, &mut input),
            Some(item::Kind::ToolResult(r)) => {
                let output = if r.is_error {
                    format!("ERROR: {}", r.content)
                } else {
                    r.content.clone()
                };
                input.push(json!({
                    "type": "function_call_output",
                    "call_id": r.call_id,
                    "output": output,
                }));
            }
            // Stubs never reach a provider (the activity loads real items).
            Some(item::Kind::Stub(_)) | None => {}
        }
    }
    let name = if model.model.is_empty() {
        DEFAULT_MODEL.to_owned()
    } else {
        model.model.clone()
    };
    let mut body = json!({
        "model": name,
        "input": input,
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "stream": stream,
    });
    if !request.system_prompt.is_empty() {
        body["instructions"] = json!(request.system_prompt);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                let parameters = tool_schema(t);
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": parameters,
                    // The API defaults to strict schemas, which require every property
                    // and no others; baton's tool schemas have optional ones.
                    "strict": false,
                })
            })
            .collect();
    }
    if model.max_output_tokens > 0 {
        body["max_output_tokens"] = json!(model.max_output_tokens);
    }
    if !model.reasoning_effort.is_empty() {
        body["reasoning"] = json!({"effort": model.reasoning_effort});
    }
    // Reasoning models refuse it: "Unsupported parameter: 'temperature' is not supported
    // with this model" (the same model-name rule as Chat Completions' default list).
    let reasoning = crate::llm::openai::is_reasoning_model(
        &name,
        &crate::llm::openai::default_reasoning_models(),
    );
    if let Some(t) = model.temperature.filter(|_| !reasoning) {
        body["temperature"] = json!(t);
    }
    if !request.cache_key.is_empty() {
        body["prompt_cache_key"] = json!(request.cache_key);
    }
    body
}
