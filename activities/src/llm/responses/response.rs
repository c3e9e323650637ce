//! The Responses answer: a whole `response` object ([`parse_response`]) or its stream of
//! `response.*` events ([`StreamState`]), as baton's [`LlmResponse`]. Both end as a list of
//! output items, assembled the same way ([`assemble`]): `message` items give the text (a
//! `refusal` part too, with finish `content_filter`), `function_call` items the tool calls,
//! `reasoning` items a [`ReasoningPart`] each (the item's JSON as it arrived) and their
//! summaries the reasoning text.

use std::collections::BTreeMap;

use baton_proto::{FinishReason, LlmResponse, ReasoningPart, ToolCall, Usage};
use serde::Deserialize;
use serde_json::{Value, json, value::RawValue};

use super::{MESSAGE_KIND, PROVIDER, REASONING_KIND};
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

/// A `response` object (the whole body, or the `response` of a terminal event), its output
/// items kept as the JSON text they arrived as.
#[derive(Deserialize)]
struct ResponseObject<'a> {
    #[serde(default)]
    status: Option<String>,
    #[serde(default, borrow)]
    output: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
    #[serde(default)]
    usage: Option<ResponsesUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize, Clone, Copy, Default)]
struct TokenDetails {
    #[serde(default)]
    cached_tokens: u32,
    #[serde(default)]
    reasoning_tokens: u32,
}

#[derive(Deserialize, Clone, Copy)]
struct ResponsesUsage {
    #[serde(default)]
    input_tokens: u32,
    #[serde(default)]
    input_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    output_tokens: u32,
    #[serde(default)]
    output_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    total_tokens: Option<u32>,
}

impl ResponsesUsage {
    /// Baton's usage: `input_tokens` already counts the cached ones, `output_tokens` the
    /// reasoning ones.
    fn to_usage(self) -> Usage {
        let (input, output) = (self.input_tokens, self.output_tokens);
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: self
                .total_tokens
                .filter(|t| *t > 0)
                .unwrap_or(input + output),
            cache_read_tokens: self.input_tokens_details.unwrap_or_default().cached_tokens,
            reasoning_tokens: self
                .output_tokens_details
                .unwrap_or_default()
                .reasoning_tokens,
            ..Default::default()
        }
    }
}

/// One output item, as far as baton reads it.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputItem {
    Message {
        #[serde(default)]
        content: Vec<ContentPart>,
    },
    FunctionCall {
        #[serde(default)]
        call_id: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        arguments: String,
    },
    Reasoning {
        #[serde(default)]
        summary: Vec<SummaryPart>,
    },
    /// Built-in tool calls and item types added later: not baton's.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentPart {
    OutputText {
        #[serde(default)]
        text: String,
    },
    Refusal {
        #[serde(default)]
        refusal: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct SummaryPart {
    #[serde(default)]
    text: String,
}

/// How a response ended: its `status` and `incomplete_details.reason`, and its usage.
#[derive(Default)]
struct Ending {
    status: Option<String>,
    incomplete_reason: Option<String>,
    usage: Option<Usage>,
}

/// Baton's finish reason: a refusal is `content_filter`; an incomplete response is `length`
/// (out of output tokens) or `content_filter`; a completed one ends with its tool calls or
/// stops.
fn finish_reason(ending: &Ending, refused: bool, has_tool_calls: bool) -> FinishReason {
    if refused {
        return FinishReason::ContentFilter;
    }
    match (
        ending.status.as_deref(),
        ending.incomplete_reason.as_deref(),
    ) {
        (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Length,
        (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
        _ => default_finish(has_tool_calls),
    }
}

/// The message of a list of output items (`(item, its JSON text)`, in output order).
///
/// baton keeps one text (all message items' text) and the tool calls. When the output has
/// reasoning items, each is kept as a [`ReasoningPart`] at its place among the other items
/// (`position` = how many message items with text and function calls came before it), and
/// each message item with text is kept too ([`MESSAGE_KIND`], at its index among those
/// items), so the request can replay the items in their order, each reasoning item before
/// the item that followed it: the API refuses a reasoning item without its follower.
fn assemble(items: Vec<(OutputItem, String)>, ending: &Ending) -> LlmResponse {
    let mut text = String::new();
    let mut summaries: Vec<String> = Vec::new();
    let mut tool_calls = Vec::new();
    let mut parts = Vec::new();
    let mut messages = Vec::new();
    let mut refused = false;
    // Message items with text and function calls so far.
    let mut blocks = 0usize;
    let position = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    for (item, raw) in items {
        match item {
            OutputItem::Message { content } => {
                let mut own = String::new();
                for part in content {
                    match part {
                        ContentPart::OutputText { text: t } => own.push_str(&t),
                        ContentPart::Refusal { refusal } => {
                            refused = true;
                            own.push_str(&refusal);
                        }
                        ContentPart::Other => {}
                    }
                }
                if own.is_empty() {
                    continue;
                }
                messages.push(ReasoningPart {
                    provider: PROVIDER.to_owned(),
                    kind: MESSAGE_KIND.to_owned(),
                    data: json!({
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": own}],
                    })
                    .to_string(),
                    position: position(blocks),
                    ..Default::default()
                });
                text.push_str(&own);
                blocks += 1;
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                arguments,
            } => {
                tool_calls.push(ToolCall {
                    id: call_id,
                    name,
                    arguments: if arguments.trim().is_empty() {
                        "{}".to_owned()
                    } else {
                        arguments
                    },
                    ..Default::default()
                });
                blocks += 1;
            }
            OutputItem::Reasoning { summary } => {
                summaries.extend(
                    summary
                        .into_iter()
                        .map(|s| s.text)
                        .filter(|s| !s.is_empty()),
                );
                parts.push(ReasoningPart {
                    provider: PROVIDER.to_owned(),
                    kind: REASONING_KIND.to_owned(),
                    data: raw,
                    position: position(blocks),
                    ..Default::default()
                });
            }
            OutputItem::Other => {}
        }
    }
    // Without reasoning, the one text and the calls replay as they always did.
    if !parts.is_empty() {
        parts.extend(messages);
    }
    let finish = finish_reason(ending, refused, !tool_calls.is_empty());
    let mut response = assistant_response(
        text,
        summaries.join("\n\n"),
        tool_calls,
        finish,
        ending.usage,
    );
    if let Some(message) = response.message.as_mut() {
        message.reasoning_parts = parts;
    }
    response
}

/// Parses output items given as JSON text.
fn parse_items(
    raw: impl IntoIterator<Item = String>,
) -> Result<Vec<(OutputItem, String)>, LlmError> {
    raw.into_iter()
        .map(|raw| {
            serde_json::from_str::<OutputItem>(&raw)
                .map(|item| (item, raw.clone()))
                .map_err(|e| bad(format!("invalid output item ({e}): {}", snippet(&raw))))
        })
        .collect()
}

/// The error of a `failed` response (`error: {code, message}`), classified like an HTTP
/// error of the status it implies.
fn failed(error: Option<&Value>, body: &str) -> LlmError {
    let detail = error
        .and_then(ErrorDetail::from_value)
        .unwrap_or_else(|| ErrorDetail {
            message: format!("the response failed: {}", snippet(body)),
            ..Default::default()
        });
    classify(PROVIDER, detail.implied_status(), None, detail)
}

impl ResponseObject<'_> {
    fn ending(&self) -> Ending {
        Ending {
            status: self.status.clone(),
            incomplete_reason: self
                .incomplete_details
                .as_ref()
                .and_then(|d| d.reason.clone()),
            usage: self.usage.map(ResponsesUsage::to_usage),
        }
    }

    fn output_texts(&self) -> Vec<String> {
        self.output
            .iter()
            .flatten()
            .map(|raw| raw.get().to_owned())
            .collect()
    }
}

/// Parses a (non-streaming) `response` body.
pub fn parse_response(body: &str) -> Result<LlmResponse, LlmError> {
    let parsed: ResponseObject<'_> = serde_json::from_str(body)
        .map_err(|e| bad(format!("invalid response ({e}): {}", snippet(body))))?;
    if parsed.status.as_deref() == Some("failed") {
        return Err(failed(parsed.error.as_ref(), body));
    }
    if parsed.output.is_none() {
        return Err(bad(format!("no output in the response: {}", snippet(body))));
    }
    let items = parse_items(parsed.output_texts())?;
    Ok(assemble(items, &parsed.ending()))
}

/// One event of a stream, as far as baton reads it.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default, borrow)]
    item: Option<&'a RawValue>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
}

/// An output item of a stream: being streamed (from `response.output_item.added` and the
/// deltas), or done (its JSON from `response.output_item.done`).
enum StreamItem {
    Building {
        kind: String,
        call_id: String,
        name: String,
        text: String,
        refusal: String,
        arguments: String,
    },
    Done(OutputItem, String),
}

impl StreamItem {
    fn started(item: &Value) -> Self {
        let s = |key: &str| {
            item.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        StreamItem::Building {
            kind: s("type"),
            call_id: s("call_id"),
            name: s("name"),
            text: String::new(),
            refusal: String::new(),
            arguments: s("arguments"),
        }
    }

    /// The item: as it was done, or (a stream whose terminal event came without the item's
    /// `done`) as far as its deltas built it.
    fn into_item(self) -> (OutputItem, String) {
        match self {
            StreamItem::Done(item, raw) => (item, raw),
            StreamItem::Building {
                kind,
                call_id,
                name,
                text,
                refusal,
                arguments,
            } => {
                let item = match kind.as_str() {
                    "message" => {
                        let mut content = vec![ContentPart::OutputText { text }];
                        if !refusal.is_empty() {
                            content.push(ContentPart::Refusal { refusal });
                        }
                        OutputItem::Message { content }
                    }
                    "function_call" => OutputItem::FunctionCall {
                        call_id,
                        name,
                        arguments,
                    },
                    // A reasoning item is only usable whole (its encrypted content).
                    _ => OutputItem::Other,
                };
                (item, String::new())
            }
        }
    }
}

/// The message being assembled from a stream's events.
#[derive(Default)]
pub(crate) struct StreamState {
    /// Output items by `output_index`.
    items: BTreeMap<u64, StreamItem>,
    /// The terminal event's status, reason and usage.
    ending: Option<Ending>,
    /// The terminal event's output, for a stream that sent no item events.
    final_output: Vec<(OutputItem, String)>,
    live: Live,
}

impl StreamState {
    fn building(&mut self, index: Option<u64>) -> Option<&mut StreamItem> {
        self.items
            .get_mut(&index?)
            .filter(|i| matches!(i, StreamItem::Building { .. }))
    }

    fn on_delta(&mut self, kind: &str, index: Option<u64>, delta: &str) {
        let Some(StreamItem::Building {
            text,
            refusal,
            arguments,
            ..
        }) = self.building(index)
        else {
            return;
        };
        match kind {
            "response.output_text.delta" => text.push_str(delta),
            "response.refusal.delta" => refusal.push_str(delta),
            "response.function_call_arguments.delta" => arguments.push_str(delta),
            _ => {}
        }
    }

    /// A terminal event: `response.failed` is an error; the others end the message.
    fn on_terminal(&mut self, response: Option<&RawValue>, data: &str) -> Result<(), LlmError> {
        let raw = response.map(RawValue::get).unwrap_or("{}");
        let parsed: ResponseObject<'_> = serde_json::from_str(raw).map_err(|e| {
            bad(format!(
                "invalid response in the stream ({e}): {}",
                snippet(raw)
            ))
        })?;
        if parsed.status.as_deref() == Some("failed") {
            return Err(failed(parsed.error.as_ref(), data));
        }
        self.final_output = parse_items(parsed.output_texts())?;
        self.ending = Some(parsed.ending());
        Ok(())
    }
}

impl ResponseParser for StreamState {
    fn parse_body(body: &str) -> Result<LlmResponse, LlmError> {
        parse_response(body)
    }

    fn on_event(&mut self, event: &SseEvent) -> Result<Flow, LlmError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let parsed: Event<'_> = serde_json::from_str(data).map_err(|e| {
            bad(format!(
                "invalid JSON in the stream ({e}): {}",
                snippet(data)
            ))
        })?;
        let kind = if parsed.kind.is_empty() {
            event.event.as_str()
        } else {
            parsed.kind.as_str()
        };
        match kind {
            "response.output_item.added" => {
                if let (Some(index), Some(item)) = (parsed.output_index, parsed.item) {
                    let item: Value = serde_json::from_str(item.get()).unwrap_or_default();
                    if item.get("type").and_then(Value::as_str) == Some("function_call") {
                        self.live
                            .tool_call(item.get("name").and_then(Value::as_str).unwrap_or(""));
                    }
                    self.items.insert(index, StreamItem::started(&item));
                }
            }
            "response.output_text.delta"
            | "response.refusal.delta"
            | "response.function_call_arguments.delta" => {
                let delta = parsed.delta.as_ref().and_then(Value::as_str).unwrap_or("");
                if kind == "response.output_text.delta" {
                    self.live.text(delta);
                }
                self.on_delta(kind, parsed.output_index, delta);
            }
            "response.reasoning_summary_text.delta" => {
                let delta = parsed.delta.as_ref().and_then(Value::as_str).unwrap_or("");
                self.live.reasoning(delta);
            }
            "response.output_item.done" => {
                if let (Some(index), Some(item)) = (parsed.output_index, parsed.item) {
                    let raw = item.get().to_owned();
                    let item = serde_json::from_str::<OutputItem>(&raw).map_err(|e| {
                        bad(format!("invalid output item ({e}): {}", snippet(&raw)))
                    })?;
                    self.items.insert(index, StreamItem::Done(item, raw));
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.on_terminal(parsed.response, data)?;
                return Ok(Flow::Done);
            }
            "error" => {
                let detail = ErrorDetail::from_body(data);
                return Err(classify(PROVIDER, detail.implied_status(), None, detail));
            }
            // `response.created`, `response.in_progress`, content parts, summaries (read
            // from the done item), `.done` events of deltas, and event types added later.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn has_finish_reason(&self) -> bool {
        self.ending.is_some()
    }

    fn live(&self) -> &Live {
        &self.live
    }

    fn into_response(self) -> LlmResponse {
        let ending = self.ending.unwrap_or_default();
        let items = if self.items.is_empty() {
            self.final_output
        } else {
            self.items
                .into_values()
                .map(StreamItem::into_item)
                .collect()
        };
        assemble(items, &ending)
    }
}
