//! Conversation items for the provider tests: one way to write a user message, an assistant
//! turn with tool calls, a tool result and a usage with cache tokens, shared by every wire
//! format's tests and the price table's.

use baton_proto::{AssistantMessage, Item, ToolCall, ToolResult, Usage, UserMessage, item};

/// A user message.
pub(crate) fn user(text: &str) -> Item {
    Item {
        kind: Some(item::Kind::User(UserMessage {
            text: text.into(),
            synthetic: false,
        })),
    }
}

/// One tool call.
pub(crate) fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
        ..Default::default()
    }
}

/// Tool calls from `(id, name, arguments)`.
pub(crate) fn calls(calls: &[(&str, &str, &str)]) -> Vec<ToolCall> {
    calls
        .iter()
        .map(|(id, name, args)| call(id, name, args))
        .collect()
}

/// An assistant turn.
pub(crate) fn assistant_item(message: AssistantMessage) -> Item {
    Item {
        kind: Some(item::Kind::Assistant(message)),
    }
}

/// The result of call `call_id` (tool `tool`).
pub(crate) fn result(call_id: &str, content: &str, is_error: bool) -> Item {
    Item {
        kind: Some(item::Kind::ToolResult(ToolResult {
            call_id: call_id.into(),
            name: "tool".into(),
            content: content.into(),
            is_error,
            ..Default::default()
        })),
    }
}

/// Baton's usage: `input` counts the cache's `read` and `write` tokens.
pub(crate) fn usage(input: u32, output: u32, read: u32, write: u32) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        cache_read_tokens: read,
        cache_write_tokens: write,
        ..Default::default()
    }
}
