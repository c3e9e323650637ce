//! The Chat Completions answer: a whole `chat.completion` body ([`parse_response`]) or a
//! stream of `chat.completion.chunk` events ([`StreamState`]), as baton's [`LlmResponse`].
//!
//! Reasoning state the server wants back is kept as `ReasoningPart`s: DeepSeek's
//! `reasoning_content` (also the message's `reasoning` text) and each tool call's
//! `extra_content` (Gemini's `google.thought_signature`). A `refusal` (structured outputs)
//! is the answer's text with finish `ContentFilter`.

use baton_proto::{FinishReason, LlmResponse, ReasoningPart, ToolCall, Usage};
use serde::Deserialize;
use serde_json::Value;

use super::{KIND_EXTRA_CONTENT, KIND_REASONING_CONTENT, PROVIDER};
use crate::llm::{
    LlmError,
    error::{ErrorDetail, classify, snippet},
    live::Live,
    provider::{assistant_response, default_finish},
    sse::SseEvent,
    transport::{Flow, ResponseParser},
};

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChatMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChatMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ChatToolCall>>,
}

#[derive(Deserialize)]
struct ChatToolCall {
    #[serde(default)]
    id: Option<String>,
    function: ChatFunction,
    /// Gemini: `{"google": {"thought_signature": ..}}`, to be sent back on this call.
    #[serde(default)]
    extra_content: Option<Value>,
}

#[derive(Deserialize)]
struct ChatFunction {
    name: String,
    /// A JSON string as documented; llama.cpp `--tool-args-object` sends the object itself.
    #[serde(default)]
    arguments: Option<Value>,
}

/// Chat Completions `usage`: `prompt_tokens` counts every prompt token (the cached ones in
/// `prompt_tokens_details.cached_tokens` included), `completion_tokens` the reasoning ones in
/// `completion_tokens_details.reasoning_tokens` included: baton's convention already. Two
/// servers differ: Gemini's `completion_tokens` leaves its thinking tokens
/// out while `total_tokens` counts them (its thoughts bill as output), so output is
/// `total - prompt` when that is more; DeepSeek reports cache hits as
/// `prompt_cache_hit_tokens` (part of `prompt_tokens`), not in `prompt_tokens_details`.
#[derive(Deserialize, Clone, Copy)]
struct ChatUsage {
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    total_tokens: Option<u32>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Deserialize, Clone, Copy)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u32>,
}

#[derive(Deserialize, Clone, Copy)]
struct CompletionTokensDetails {
    #[serde(default)]
    reasoning_tokens: Option<u32>,
}

impl ChatUsage {
    fn to_usage(self) -> Usage {
        let input = self.prompt_tokens.unwrap_or(0);
        let total = self
            .total_tokens
            .filter(|t| *t > 0)
            .unwrap_or(input + self.completion_tokens.unwrap_or(0));
        // Gemini: thinking tokens are in the total, not in completion_tokens.
        let output = self
            .completion_tokens
            .unwrap_or(0)
            .max(total.saturating_sub(input));
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: total.max(input.saturating_add(output)),
            llm_calls: 0,
            cache_read_tokens: self
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(self.prompt_cache_hit_tokens)
                .unwrap_or(0)
                .min(input),
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
            ..Default::default()
        }
    }
}

fn bad(message: String) -> LlmError {
    LlmError::BadResponse {
        provider: PROVIDER.to_owned(),
        message,
    }
}

/// The `reasoning_content` (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama) text.
fn reasoning_of(reasoning_content: Option<String>, reasoning: Option<String>) -> Option<String> {
    reasoning_content
        .filter(|r| !r.is_empty())
        .or(reasoning)
        .filter(|r| !r.is_empty())
}

/// The reasoning parts of a message: its `reasoning_content` (before any other block), then
/// each call's `extra_content` (`calls` = id and `extra_content`, in order; position = the
/// blocks before that call: the text, if any, and the earlier calls).
fn reasoning_parts(
    reasoning_content: &str,
    has_text: bool,
    calls: &[(&str, Option<&Value>)],
) -> Vec<ReasoningPart> {
    let part = |kind: &str, data: String, position: usize, call_id: &str| ReasoningPart {
        provider: PROVIDER.to_owned(),
        kind: kind.to_owned(),
        data,
        position: u32::try_from(position).unwrap_or(u32::MAX),
        call_id: call_id.to_owned(),
        ..Default::default()
    };
    let mut parts = Vec::new();
    if !reasoning_content.is_empty() {
        let data = Value::String(reasoning_content.to_owned()).to_string();
        parts.push(part(KIND_REASONING_CONTENT, data, 0, ""));
    }
    for (i, (id, extra)) in calls.iter().enumerate() {
        if let Some(extra) = extra.filter(|e| !e.is_null()) {
            let position = usize::from(has_text) + i;
            parts.push(part(KIND_EXTRA_CONTENT, extra.to_string(), position, id));
        }
    }
    parts
}

/// The answer once any `refusal` is taken in: the refusal is the text (after any content)
/// and the finish reason `ContentFilter`, so the run ends saying why instead of answering
/// nothing.
fn with_refusal(text: String, refusal: &str, finish: FinishReason) -> (String, FinishReason) {
    if refusal.is_empty() {
        return (text, finish);
    }
    let text = if text.is_empty() {
        refusal.to_owned()
    } else {
        format!("{text}\n{refusal}")
    };
    (text, FinishReason::ContentFilter)
}

/// Baton's response with the reasoning parts and refusal of the message.
fn response(
    text: String,
    refusal: &str,
    reasoning: (String, String),
    tool_calls: Vec<ToolCall>,
    extra: &[Option<Value>],
    finish: FinishReason,
    usage: Option<Usage>,
) -> LlmResponse {
    let (reasoning_text, reasoning_content) = reasoning;
    let calls: Vec<(&str, Option<&Value>)> = tool_calls
        .iter()
        .zip(extra)
        .map(|(c, e)| (c.id.as_str(), e.as_ref()))
        .collect();
    let parts = reasoning_parts(&reasoning_content, !text.is_empty(), &calls);
    let (text, finish) = with_refusal(text, refusal, finish);
    let mut response = assistant_response(text, reasoning_text, tool_calls, finish, usage);
    if let Some(message) = response.message.as_mut() {
        message.reasoning_parts = parts;
    }
    response
}

fn finish_reason(reason: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match reason {
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("stop") if !has_tool_calls => FinishReason::Stop,
        _ => default_finish(has_tool_calls),
    }
}

/// The text of an `arguments` field: a string as it is (the documented form, or a fragment of
/// it), any other JSON value (an object sent by llama.cpp `--tool-args-object`) as its JSON
/// text; `null` is nothing.
fn arguments_fragment(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

/// Tool-call arguments as sent to the workflow: an empty string means no arguments.
fn arguments_text(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        arguments
    }
}

/// Parses a (non-streaming) Chat Completions response body.
pub fn parse_response(body: &str) -> Result<LlmResponse, LlmError> {
    let parsed: ChatResponse = serde_json::from_str(body)
        .map_err(|e| bad(format!("invalid JSON ({e}): {}", snippet(body))))?;
    let Some(choice) = parsed.choices.unwrap_or_default().into_iter().next() else {
        return Err(bad(format!(
            "no choices in the response: {}",
            snippet(body)
        )));
    };
    let message = choice.message;
    let (tool_calls, extra): (Vec<ToolCall>, Vec<Option<Value>>) = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            let call = ToolCall {
                id: c.id.unwrap_or_default(),
                name: c.function.name,
                arguments: arguments_text(arguments_fragment(c.function.arguments)),
                ..Default::default()
            };
            (call, c.extra_content)
        })
        .unzip();
    let finish = finish_reason(choice.finish_reason.as_deref(), !tool_calls.is_empty());
    let reasoning_content = message.reasoning_content.unwrap_or_default();
    let reasoning = reasoning_of(Some(reasoning_content.clone()), message.reasoning);
    Ok(response(
        message.content.unwrap_or_default(),
        message.refusal.as_deref().unwrap_or_default(),
        (reasoning.unwrap_or_default(), reasoning_content),
        tool_calls,
        &extra,
        finish,
        parsed.usage.map(ChatUsage::to_usage),
    ))
}

/// One `chat.completion.chunk` (or an error object) of a stream.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<ChunkChoice>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Deserialize)]
struct DeltaToolCall {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<DeltaFunction>,
    /// Gemini sends it on the call's (one) delta.
    #[serde(default)]
    extra_content: Option<Value>,
}

#[derive(Deserialize)]
struct DeltaFunction {
    #[serde(default)]
    name: Option<String>,
    /// A fragment of the JSON text, or (llama.cpp `--tool-args-object`) a JSON value.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Default)]
struct PartialCall {
    /// The `index` it was streamed under.
    index: u32,
    id: String,
    name: String,
    arguments: String,
    /// Its `extra_content`; the keys of later fragments (if a server splits it) added.
    extra_content: Option<Value>,
}

/// The message being assembled from a stream's chunks.
#[derive(Default)]
pub(crate) struct StreamState {
    text: String,
    reasoning: String,
    /// DeepSeek's `reasoning_content` alone (sent back), apart from `reasoning`.
    reasoning_content: String,
    refusal: String,
    /// Tool calls in the order they started.
    calls: Vec<PartialCall>,
    finish: Option<String>,
    usage: Option<ChatUsage>,
    live: Live,
}

impl StreamState {
    /// The call a tool-call fragment belongs to. A fragment extends the last call of its
    /// `index`, unless it carries an id other than that call's and a function name (the
    /// start of a call): servers that number every parallel call `0` tell them apart by id
    /// only, and some change the id in the middle of one call (poolsideai/pool#9, vLLM's
    /// harmony streaming), which without a name is still the same call. Without an index
    /// (some servers omit it) the same rule applies to the last call.
    fn call_for(&mut self, index: Option<u32>, id: Option<&str>, named: bool) -> &mut PartialCall {
        let last = match index {
            Some(index) => self.calls.iter().rposition(|c| c.index == index),
            None => self.calls.len().checked_sub(1),
        };
        let continues = last.filter(|&at| {
            let call = &self.calls[at];
            !named || id.is_none_or(|id| call.id.is_empty() || call.id == id)
        });
        let at = match continues {
            Some(at) => at,
            None => {
                let index = index
                    .unwrap_or_else(|| self.calls.iter().map(|c| c.index + 1).max().unwrap_or(0));
                self.calls.push(PartialCall {
                    index,
                    ..Default::default()
                });
                self.calls.len() - 1
            }
        };
        &mut self.calls[at]
    }

    fn on_tool_call_delta(&mut self, call: DeltaToolCall) {
        let id = call.id.filter(|id| !id.is_empty());
        let mut started = None;
        let named = call
            .function
            .as_ref()
            .and_then(|f| f.name.as_deref())
            .is_some_and(|n| !n.is_empty());
        let entry = self.call_for(call.index, id.as_deref(), named);
        if let Some(id) = id
            && entry.id.is_empty()
        {
            entry.id = id;
        }
        if let Some(f) = call.function {
            if let Some(name) = f.name.filter(|n| !n.is_empty())
                && name != entry.name
            {
                if entry.name.is_empty() {
                    started = Some(name.clone());
                }
                // Sent once by OpenAI; some servers repeat it (skipped) or split it (appended).
                entry.name.push_str(&name);
            }
            entry.arguments.push_str(&arguments_fragment(f.arguments));
        }
        match (call.extra_content, &mut entry.extra_content) {
            (None | Some(Value::Null), _) => {}
            (Some(Value::Object(more)), Some(Value::Object(have))) => have.extend(more),
            (Some(extra), slot) => *slot = Some(extra),
        }
        if let Some(name) = started {
            self.live.tool_call(&name);
        }
    }
}

impl ResponseParser for StreamState {
    fn parse_body(body: &str) -> Result<LlmResponse, LlmError> {
        parse_response(body)
    }

    fn on_event(&mut self, event: &SseEvent) -> Result<Flow, LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            bad(format!(
                "invalid JSON in the stream ({e}): {}",
                snippet(data)
            ))
        })?;
        if chunk.error.as_ref().is_some_and(|e| !e.is_null()) || event.event == "error" {
            let detail = serde_json::from_str::<Value>(data)
                .ok()
                .and_then(|v| ErrorDetail::from_value(&v))
                .unwrap_or_else(|| ErrorDetail {
                    message: snippet(data),
                    ..Default::default()
                });
            return Err(classify(PROVIDER, detail.implied_status(), None, detail));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        let choices = chunk.choices.unwrap_or_default();
        let Some(choice) = choices.into_iter().find(|c| c.index.unwrap_or(0) == 0) else {
            return Ok(Flow::Continue);
        };
        if let Some(delta) = choice.delta {
            if let Some(text) = delta.content {
                self.live.text(&text);
                self.text.push_str(&text);
            }
            if let Some(refusal) = delta.refusal {
                self.refusal.push_str(&refusal);
            }
            if let Some(r) = &delta.reasoning_content {
                self.reasoning_content.push_str(r);
            }
            if let Some(r) = reasoning_of(delta.reasoning_content, delta.reasoning) {
                self.live.reasoning(&r);
                self.reasoning.push_str(&r);
            }
            for call in delta.tool_calls.unwrap_or_default() {
                self.on_tool_call_delta(call);
            }
        }
        if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
            self.finish = Some(reason);
        }
        Ok(Flow::Continue)
    }

    fn has_finish_reason(&self) -> bool {
        self.finish.is_some()
    }

    fn live(&self) -> &Live {
        &self.live
    }

    fn into_response(self) -> LlmResponse {
        // By index, then (calls that shared one) in the order they started.
        let mut calls = self.calls;
        calls.sort_by_key(|c| c.index);
        let (tool_calls, extra): (Vec<ToolCall>, Vec<Option<Value>>) = calls
            .into_iter()
            .map(|c| {
                let call = ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: arguments_text(c.arguments),
                    ..Default::default()
                };
                (call, c.extra_content)
            })
            .unzip();
        let finish = finish_reason(self.finish.as_deref(), !tool_calls.is_empty());
        let usage = self.usage.map(ChatUsage::to_usage);
        response(
            self.text,
            &self.refusal,
            (self.reasoning, self.reasoning_content),
            tool_calls,
            &extra,
            finish,
            usage,
        )
    }
}
