//! The OpenAI-compatible servers' own refusals, for [`crate::MockOpenAi::start_quirks`]: what
//! DeepSeek, Gemini and vLLM answer 400 to when a tool loop does not send back what they
//! gave.
//!
//! * DeepSeek thinking mode: the assistant message of a tool-call turn without the
//!   `reasoning_content` it came with (or with another one) -> "Missing `reasoning_content`
//!   field ..." (DeepSeek API docs, thinking mode, tool calls).
//! * Gemini (OpenAI compatibility): a tool call sent back without the
//!   `extra_content.google.thought_signature` it came with -> "Function call is missing a
//!   thought_signature ..." (Gemini docs, thought signatures).
//! * vLLM: a tool call whose `function.arguments` is not JSON text of an object -> 400.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// What the mock's answers gave the client, by tool-call id.
#[derive(Default)]
pub(crate) struct Given {
    /// The `reasoning_content` of the message that made the call.
    reasoning: BTreeMap<String, Value>,
    /// The call's `extra_content`.
    extra: BTreeMap<String, Value>,
}

/// [`Given`] shared by the mock (which records its answers) and its check.
pub(crate) type Shared = Arc<Mutex<Given>>;

fn lock(given: &Shared) -> std::sync::MutexGuard<'_, Given> {
    given.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records the reasoning state of a `chat.completion` answer the mock will give.
pub(crate) fn remember(given: &Shared, body: &Value) {
    let mut given = lock(given);
    let choices = body.get("choices").and_then(Value::as_array);
    for message in choices
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("message"))
    {
        let reasoning = message
            .get("reasoning_content")
            .filter(|r| r.as_str().is_some_and(|r| !r.is_empty()));
        let calls = message.get("tool_calls").and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
            if let Some(r) = reasoning {
                given.reasoning.insert(id.to_owned(), r.clone());
            }
            if let Some(extra) = call.get("extra_content").filter(|e| !e.is_null()) {
                given.extra.insert(id.to_owned(), extra.clone());
            }
        }
    }
}

/// What a request breaks of the quirks above, worded as those servers word it.
pub(crate) fn violations(given: &Shared, body: &Value) -> Vec<String> {
    let given = lock(given);
    let mut found = Vec::new();
    let messages = body.get("messages").and_then(Value::as_array);
    for (i, m) in messages.into_iter().flatten().enumerate() {
        let calls = m.get("tool_calls").and_then(Value::as_array);
        let Some(calls) = calls.filter(|c| !c.is_empty()) else {
            continue;
        };
        let wanted = calls.iter().find_map(|c| {
            let id = c.get("id").and_then(Value::as_str)?;
            given.reasoning.get(id)
        });
        match (wanted, m.get("reasoning_content")) {
            (Some(_), None | Some(Value::Null)) => found.push(format!(
                "Missing `reasoning_content` field in the assistant message at message index {i}. For more information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
            )),
            (Some(wanted), Some(sent)) if sent != wanted => found.push(format!(
                "DeepSeek: the `reasoning_content` of the assistant message at message index {i} is not the one the model produced"
            )),
            _ => {}
        }
        for (j, call) in calls.iter().enumerate() {
            let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if let Some(extra) = given.extra.get(id)
                && call.get("extra_content") != Some(extra)
            {
                found.push(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    j + 1
                ));
            }
            let arguments = call.pointer("/function/arguments");
            let parsed = arguments
                .and_then(Value::as_str)
                .map(serde_json::from_str::<Value>);
            if !matches!(parsed, Some(Ok(Value::Object(_)))) {
                found.push(format!(
                    "vLLM: messages[{i}].tool_calls[{j}].function.arguments is not the JSON text of an object: {}",
                    arguments.map(Value::to_string).unwrap_or_default()
                ));
            }
        }
    }
    found
}
