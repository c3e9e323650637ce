//! Prompt caching: `cache_control` breakpoints on the stable prefix (the last tool definition,
//! the system prompt) and on the moving end of the conversation (the last content block of the
//! last message, and of the user message before it, so a turn that adds several messages still
//! reads the previous turn's prefix). At most [`MAX_BREAKPOINTS`] (the API refuses more).
//!
//! The TTL comes from `ModelConfig.cache_ttl`: `""`/`"5m"` is the default ephemeral cache,
//! `"1h"` the one-hour cache.

use serde_json::{Value, json};

use crate::llm::LlmError;

/// The most `cache_control` breakpoints one request may carry (the API refuses more).
pub const MAX_BREAKPOINTS: usize = 4;

/// The accepted `ModelConfig.cache_ttl` values.
const ACCEPTED_TTLS: &str = r#""" (5 minutes), "5m" or "1h""#;

/// The `cache_control` object of `cache_ttl`, or a [`LlmError::Config`] naming the accepted
/// values.
pub fn cache_control(cache_ttl: &str) -> Result<Value, LlmError> {
    match cache_ttl {
        "" | "5m" => Ok(json!({"type": "ephemeral"})),
        "1h" => Ok(json!({"type": "ephemeral", "ttl": "1h"})),
        other => Err(LlmError::Config(format!(
            "cache_ttl {other:?} is not one the anthropic provider accepts: use {ACCEPTED_TTLS}"
        ))),
    }
}

/// Whether a block may carry `cache_control` (thinking blocks may not).
fn cacheable(block: &Value) -> bool {
    !matches!(
        block.get("type").and_then(Value::as_str),
        Some("thinking") | Some("redacted_thinking")
    )
}

/// Puts `cache_control` on the last cacheable block of `message`; false when it has none.
fn mark_message(message: &mut Value, control: &Value) -> bool {
    let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) else {
        return false;
    };
    match blocks.iter_mut().rev().find(|b| cacheable(b)) {
        Some(block) => {
            block["cache_control"] = control.clone();
            true
        }
        None => false,
    }
}

/// Adds the breakpoints to a Messages body whose `system` is still a string: the system
/// prompt becomes one text block carrying `control`, the last tool carries it, then the last
/// message and the user message before it (while fewer than [`MAX_BREAKPOINTS`]).
pub fn add_breakpoints(body: &mut Value, control: &Value) {
    let mut used = 0;
    if let Some(last) = body
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .and_then(|t| t.last_mut())
    {
        last["cache_control"] = control.clone();
        used += 1;
    }
    if let Some(system) = body.get("system").and_then(Value::as_str) {
        body["system"] =
            json!([{"type": "text", "text": system, "cache_control": control.clone()}]);
        used += 1;
    }
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return;
    };
    let Some(last) = messages.len().checked_sub(1) else {
        return;
    };
    if mark_message(&mut messages[last], control) {
        used += 1;
    }
    // The user message before the last one: the previous request's moving end.
    let previous_user = messages[..last]
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    if let Some(i) = previous_user
        && used < MAX_BREAKPOINTS
    {
        mark_message(&mut messages[i], control);
    }
}

/// Removes every `cache_control` from a body (the no-caching baseline of the caching
/// benchmark).
pub fn strip_breakpoints(body: &mut Value) {
    match body {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip_breakpoints);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_breakpoints),
        _ => {}
    }
}

/// The number of `cache_control` breakpoints in a body.
pub fn count_breakpoints(body: &Value) -> usize {
    match body {
        Value::Object(map) => {
            usize::from(map.contains_key("cache_control"))
                + map.values().map(count_breakpoints).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_breakpoints).sum(),
        _ => 0,
    }
}
