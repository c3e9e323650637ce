//! The Messages answer: a whole `message` body ([`parse_response`]) or its stream of
//! content-block events ([`StreamState`]), as baton's [`LlmResponse`].

use std::collections::BTreeMap;

use baton_proto::{FinishReason, LlmResponse, ToolCall, Usage};
use serde::Deserialize;
use serde_json::Value;

use super::PROVIDER;
use crate::llm::{
    LlmError,
    error::{ErrorDetail, classify, snippet},
    provider::{assistant_response, default_finish},
    sse::SseEvent,
    transport::{Flow, ResponseParser},
};

fn bad(message: String) -> LlmError {
    LlmError::BadResponse {
        provider: PROVIDER.to_owned(),
        message,
    }
}

/// Baton's finish reason for an Anthropic `stop_reason`.
fn finish_reason(stop_reason: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match stop_reason {
        Some("end_turn") | Some("stop_sequence") | Some("pause_turn") if !has_tool_calls => {
            FinishReason::Stop
        }
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens") | Some("model_context_window_exceeded") => FinishReason::Length,
        Some("refusal") => FinishReason::ContentFilter,
        _ => default_finish(has_tool_calls),
    }
}

#[derive(Deserialize, Default, Clone, Copy)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u32>,
    #[serde(default)]
    cache_read_input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
}

impl AnthropicUsage {
    /// All input tokens: uncached, written to and read from the prompt cache.
    fn input(&self) -> Option<u32> {
        self.input_tokens.map(|i| {
            i + self.cache_creation_input_tokens.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0)
        })
    }
}

pub(super) fn usage(input: u32, output: u32) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        llm_calls: 0,
        ..Default::default()
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageResponse {
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

/// The `input` of a complete `tool_use` block as `ToolCall.arguments` text.
fn input_text(input: &Value) -> String {
    match input {
        Value::Null => "{}".to_owned(),
        v => v.to_string(),
    }
}

/// Parses a (non-streaming) Messages response body.
pub fn parse_response(body: &str) -> Result<LlmResponse, LlmError> {
    let parsed: MessageResponse = serde_json::from_str(body)
        .map_err(|e| bad(format!("invalid message ({e}): {}", snippet(body))))?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    for block in parsed.content {
        match block {
            Block::Text { text: t } => text.push_str(&t),
            Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input_text(&input),
                ..Default::default()
            }),
            Block::Thinking { thinking } => reasoning.push_str(&thinking),
            Block::Other => {}
        }
    }
    let finish = finish_reason(parsed.stop_reason.as_deref(), !tool_calls.is_empty());
    let usage = parsed
        .usage
        .map(|u| usage(u.input().unwrap_or(0), u.output_tokens.unwrap_or(0)));
    Ok(assistant_response(
        text, reasoning, tool_calls, finish, usage,
    ))
}

/// A `tool_use` block being streamed.
#[derive(Default)]
struct ToolBlock {
    id: String,
    name: String,
    /// `input` of `content_block_start`, used when no `partial_json` follows.
    start_input: Option<Value>,
    partial_json: String,
}

/// The message being assembled from a stream's events.
#[derive(Default)]
pub(crate) struct StreamState {
    text: String,
    reasoning: String,
    tools: BTreeMap<u64, ToolBlock>,
    stop_reason: Option<String>,
    input_tokens: u32,
    output_tokens: u32,
    saw_usage: bool,
}

fn str_at<'v>(v: &'v Value, pointer: &str) -> Option<&'v str> {
    v.pointer(pointer).and_then(Value::as_str)
}

impl StreamState {
    /// Usage of `message_start` (input, first output count) and `message_delta` (cumulative).
    fn on_usage(&mut self, u: &Value) {
        let Ok(u) = serde_json::from_value::<AnthropicUsage>(u.clone()) else {
            return;
        };
        if let Some(input) = u.input().filter(|i| *i > 0) {
            self.input_tokens = input;
            self.saw_usage = true;
        }
        if let Some(output) = u.output_tokens {
            self.output_tokens = output;
            self.saw_usage = true;
        }
    }
}

impl ResponseParser for StreamState {
    fn parse_body(body: &str) -> Result<LlmResponse, LlmError> {
        parse_response(body)
    }

    fn on_event(&mut self, event: &SseEvent) -> Result<Flow, LlmError> {
        if event.data.trim().is_empty() {
            return Ok(Flow::Continue);
        }
        let v: Value = serde_json::from_str(&event.data).map_err(|e| {
            bad(format!(
                "invalid JSON in the stream ({e}): {}",
                snippet(&event.data)
            ))
        })?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.on_usage(u);
                }
            }
            "content_block_start" => {
                let block = v.get("content_block").unwrap_or(&Value::Null);
                match str_at(block, "/type") {
                    Some("text") => self.text.push_str(str_at(block, "/text").unwrap_or("")),
                    Some("thinking") => self
                        .reasoning
                        .push_str(str_at(block, "/thinking").unwrap_or("")),
                    Some("tool_use") => {
                        self.tools.insert(
                            index,
                            ToolBlock {
                                id: str_at(block, "/id").unwrap_or("").to_owned(),
                                name: str_at(block, "/name").unwrap_or("").to_owned(),
                                start_input: block.get("input").cloned(),
                                partial_json: String::new(),
                            },
                        );
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                match str_at(delta, "/type") {
                    Some("text_delta") => self.text.push_str(str_at(delta, "/text").unwrap_or("")),
                    Some("thinking_delta") => self
                        .reasoning
                        .push_str(str_at(delta, "/thinking").unwrap_or("")),
                    Some("input_json_delta") => {
                        let Some(tool) = self.tools.get_mut(&index) else {
                            return Err(bad(format!(
                                "input_json_delta for block {index}, which is not a tool_use"
                            )));
                        };
                        tool.partial_json
                            .push_str(str_at(delta, "/partial_json").unwrap_or(""));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = str_at(&v, "/delta/stop_reason") {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    self.on_usage(u);
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => {
                let detail = ErrorDetail::from_value(&v).unwrap_or_else(|| ErrorDetail {
                    message: snippet(&event.data),
                    ..Default::default()
                });
                return Err(classify(PROVIDER, detail.implied_status(), None, detail));
            }
            // `ping`, `content_block_stop`, and event types added later.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn has_finish_reason(&self) -> bool {
        self.stop_reason.is_some()
    }

    fn into_response(self) -> LlmResponse {
        let tool_calls: Vec<ToolCall> = self
            .tools
            .into_values()
            .map(|t| ToolCall {
                id: t.id,
                name: t.name,
                arguments: if !t.partial_json.trim().is_empty() {
                    t.partial_json
                } else {
                    match t.start_input {
                        Some(Value::Object(m)) if !m.is_empty() => Value::Object(m).to_string(),
                        _ => "{}".to_owned(),
                    }
                },
                ..Default::default()
            })
            .collect();
        let finish = finish_reason(self.stop_reason.as_deref(), !tool_calls.is_empty());
        let usage = self
            .saw_usage
            .then(|| usage(self.input_tokens, self.output_tokens));
        assistant_response(self.text, self.reasoning, tool_calls, finish, usage)
    }
}
