//! The Messages answer: a whole `message` body ([`parse_response`]) or its stream of
//! content-block events ([`StreamState`]), as baton's [`LlmResponse`]: text, tool calls,
//! thinking blocks as [`ReasoningPart`]s (their text also in `reasoning`, for people), usage
//! with the prompt cache's reads and writes.

use std::collections::BTreeMap;

use baton_proto::{FinishReason, LlmResponse, ReasoningPart, ToolCall, Usage};
use serde::Deserialize;
use serde_json::{Value, value::RawValue};

use super::{PROVIDER, thinking::StreamedThinking};
use crate::llm::{
    LlmError,
    error::{ErrorDetail, classify, snippet},
    live::Live,
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
        Some("max_tokens") => FinishReason::Length,
        Some("refusal") => FinishReason::ContentFilter,
        _ => default_finish(has_tool_calls),
    }
}

/// `stop_reason: "model_context_window_exceeded"`: the conversation filled the model's
/// context window, so the workflow elides and compacts ([`LlmError::ContextOverflow`]) instead
/// of asking the model to continue.
fn overflow(stop_reason: Option<&str>) -> Result<(), LlmError> {
    match stop_reason {
        Some("model_context_window_exceeded") => Err(LlmError::ContextOverflow {
            message: "anthropic stopped with stop_reason model_context_window_exceeded".to_owned(),
        }),
        _ => Ok(()),
    }
}

#[derive(Deserialize, Default, Clone, Copy)]
pub(super) struct AnthropicUsage {
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

    /// Takes the counts `later` reports (a stream's `message_delta` is cumulative); an
    /// `input_tokens` of 0 after a real count is ignored.
    fn merge(&mut self, later: AnthropicUsage) {
        if later.input_tokens.is_some_and(|i| i > 0) || self.input_tokens.is_none() {
            self.input_tokens = later.input_tokens.or(self.input_tokens);
        }
        let keep = |new: Option<u32>, old: Option<u32>| new.or(old);
        self.cache_creation_input_tokens = keep(
            later.cache_creation_input_tokens,
            self.cache_creation_input_tokens,
        );
        self.cache_read_input_tokens =
            keep(later.cache_read_input_tokens, self.cache_read_input_tokens);
        self.output_tokens = keep(later.output_tokens, self.output_tokens);
    }

    fn is_empty(&self) -> bool {
        self.input().unwrap_or(0) == 0 && self.output_tokens.is_none()
    }

    /// Baton's usage: `input_tokens` counts the cache's reads and writes too.
    pub(super) fn usage(&self) -> Usage {
        let input = self.input().unwrap_or(0);
        let output = self.output_tokens.unwrap_or(0);
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            cache_read_tokens: self.cache_read_input_tokens.unwrap_or(0),
            cache_write_tokens: self.cache_creation_input_tokens.unwrap_or(0),
            ..Default::default()
        }
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
    RedactedThinking,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageResponse {
    /// Raw, so a thinking block is kept exactly as it arrived.
    content: Vec<Box<RawValue>>,
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
    overflow(parsed.stop_reason.as_deref())?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    let mut parts = Vec::new();
    for raw in parsed.content {
        let block: Block = serde_json::from_str(raw.get()).map_err(|e| {
            bad(format!(
                "invalid content block ({e}): {}",
                snippet(raw.get())
            ))
        })?;
        let position = position(!text.is_empty(), tool_calls.len());
        match block {
            Block::Text { text: t } => text.push_str(&t),
            Block::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                id,
                name,
                arguments: input_text(&input),
                ..Default::default()
            }),
            Block::Thinking { thinking } => {
                reasoning.push_str(&thinking);
                parts.push(super::thinking::part(
                    "thinking",
                    raw.get().to_owned(),
                    position,
                ));
            }
            Block::RedactedThinking => parts.push(super::thinking::part(
                "redacted_thinking",
                raw.get().to_owned(),
                position,
            )),
            Block::Other => {}
        }
    }
    let finish = finish_reason(parsed.stop_reason.as_deref(), !tool_calls.is_empty());
    let usage = parsed.usage.map(|u| u.usage());
    Ok(with_parts(
        assistant_response(text, reasoning, tool_calls, finish, usage),
        parts,
    ))
}

/// A reasoning part's position: the blocks baton sends back before it (the text, merged into
/// one block, then the tool calls).
fn position(has_text: bool, tool_calls: usize) -> u32 {
    u32::try_from(usize::from(has_text) + tool_calls).unwrap_or(u32::MAX)
}

fn with_parts(mut response: LlmResponse, parts: Vec<ReasoningPart>) -> LlmResponse {
    if let Some(m) = response.message.as_mut() {
        m.reasoning_parts = parts;
    }
    response
}

impl ToolBlock {
    /// The call: the streamed input, or the start event's when no fragment came.
    fn into_call(self) -> ToolCall {
        ToolCall {
            id: self.id,
            name: self.name,
            arguments: if !self.partial_json.trim().is_empty() {
                self.partial_json
            } else {
                match self.start_input {
                    Some(Value::Object(m)) if !m.is_empty() => Value::Object(m).to_string(),
                    _ => "{}".to_owned(),
                }
            },
            ..Default::default()
        }
    }
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

/// One streamed content block baton keeps, by index.
enum Streamed {
    Text,
    Tool(ToolBlock),
    Thinking(StreamedThinking),
}

/// The message being assembled from a stream's events.
#[derive(Default)]
pub(crate) struct StreamState {
    text: String,
    blocks: BTreeMap<u64, Streamed>,
    stop_reason: Option<String>,
    usage: Option<AnthropicUsage>,
    live: Live,
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
        let usage = self.usage.get_or_insert_default();
        usage.merge(u);
        // Billed even if the stream fails later (an `overloaded_error` event mid-way).
        self.live.usage(usage.usage());
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
                let kept = match str_at(block, "/type") {
                    Some("text") => {
                        let text = str_at(block, "/text").unwrap_or("");
                        self.live.text(text);
                        self.text.push_str(text);
                        Streamed::Text
                    }
                    Some("thinking") | Some("redacted_thinking") => {
                        Streamed::Thinking(StreamedThinking::start(block))
                    }
                    Some("tool_use") => Streamed::Tool(ToolBlock {
                        id: str_at(block, "/id").unwrap_or("").to_owned(),
                        name: {
                            let name = str_at(block, "/name").unwrap_or("");
                            self.live.tool_call(name);
                            name.to_owned()
                        },
                        start_input: block.get("input").cloned(),
                        partial_json: String::new(),
                    }),
                    _ => return Ok(Flow::Continue),
                };
                self.blocks.insert(index, kept);
            }
            "content_block_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                match str_at(delta, "/type") {
                    Some("text_delta") => {
                        let text = str_at(delta, "/text").unwrap_or("");
                        self.live.text(text);
                        self.text.push_str(text);
                    }
                    Some(kind @ ("thinking_delta" | "signature_delta")) => {
                        let Some(Streamed::Thinking(block)) = self.blocks.get_mut(&index) else {
                            return Err(bad(format!(
                                "{kind} for block {index}, which is not a thinking block"
                            )));
                        };
                        if kind == "thinking_delta" {
                            let thinking = str_at(delta, "/thinking").unwrap_or("");
                            self.live.reasoning(thinking);
                            block.thinking.push_str(thinking);
                        } else {
                            block
                                .signature
                                .push_str(str_at(delta, "/signature").unwrap_or(""));
                        }
                    }
                    Some("input_json_delta") => {
                        let Some(Streamed::Tool(tool)) = self.blocks.get_mut(&index) else {
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
                    overflow(Some(reason))?;
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

    fn live(&self) -> &Live {
        &self.live
    }

    fn into_response(self) -> LlmResponse {
        let mut tool_calls: Vec<ToolCall> = Vec::new();
        let mut parts = Vec::new();
        let mut reasoning = String::new();
        let mut has_text = false;
        for block in self.blocks.into_values() {
            match block {
                Streamed::Text => has_text = true,
                Streamed::Tool(t) => tool_calls.push(t.into_call()),
                Streamed::Thinking(t) => {
                    let (part, text) = t.into_part(position(has_text, tool_calls.len()));
                    reasoning.push_str(&text);
                    parts.push(part);
                }
            }
        }
        let finish = finish_reason(self.stop_reason.as_deref(), !tool_calls.is_empty());
        let usage = self.usage.filter(|u| !u.is_empty()).map(|u| u.usage());
        with_parts(
            assistant_response(self.text, reasoning, tool_calls, finish, usage),
            parts,
        )
    }
}
