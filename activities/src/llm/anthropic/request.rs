//! The Messages request: baton's conversation as strictly alternating user/assistant
//! messages of content blocks (`text`, `tool_use`, `tool_result`), the system prompt and the
//! tool schemas (`input_schema`).

use baton_proto::{LlmRequest, item};
use serde_json::{Value, json};

use super::{DEFAULT_MAX_TOKENS, DEFAULT_MODEL};
use crate::llm::provider::replayed_arguments;

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
                        "input": replayed_arguments(&call.arguments),
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
