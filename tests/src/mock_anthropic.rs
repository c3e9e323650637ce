//! A scripted mock of the Anthropic Messages HTTP API.

use serde_json::{Value, json};

use crate::mock_http::{
    Flavor, MockResponse, MockServer, Transcript, fragments, sse_event, text_pieces,
};

/// The endpoint the mock scripts.
pub const MESSAGES_PATH: &str = "/v1/messages";

/// Input tokens reported by every scripted reply.
const INPUT_TOKENS: u64 = 42;

/// A local HTTP server speaking the Anthropic Messages wire format.
///
/// `POST /v1/messages` answers with the next queued [`MockResponse`] (FIFO);
/// when the queue is empty it answers 500 with
/// `{"type":"error","error":{"type":"api_error","message":"mock: no scripted response left"}}`.
/// Any other path answers 404 (`not_found_error`). Every request is captured
/// ([`MockAnthropic::requests`]) with its arrival time.
///
/// If the request has `"stream": true` and the scripted answer is a 2xx
/// `message`, it is sent as the real SSE event sequence (each record
/// `event: <type>\ndata: <json>\n\n`): `message_start` (empty `content`,
/// `usage.input_tokens`); per content block `content_block_start` (text with
/// `text: ""` / tool_use with `id`, `name`, `input: {}` / thinking with
/// `thinking: ""`; redacted_thinking whole), its deltas (word-sized
/// `text_delta`s / >= 2 `input_json_delta` `partial_json` fragments of the
/// input / word-sized `thinking_delta`s then one `signature_delta`) and
/// `content_block_stop`; one `ping` (after the
/// first `content_block_start`); `message_delta` (`stop_reason`,
/// `stop_sequence: null`, `usage.output_tokens`); `message_stop`.
/// [`MockResponse::cut_stream`], [`MockResponse::slow_stream`] and
/// [`MockResponse::stream_error`] (e.g. [`MockAnthropic::overloaded_stream`])
/// alter the delivery (see [`crate::ResponseMode`]).
///
/// Like the API, it refuses (400, `invalid_request_error`, see `mock_checks.rs`) a request
/// with thinking on whose last assistant `tool_use` message does not start with a thinking
/// block, a thinking block whose signature is not one it issued for that text
/// ([`MockAnthropic::sign`]), `temperature` with thinking, `max_tokens` at or under the
/// budget, and more than 4 `cache_control` breakpoints.
///
/// Runs on its own thread and tokio runtime like [`crate::MockOpenAi`]; drop
/// stops it.
pub struct MockAnthropic {
    server: MockServer,
}

impl std::ops::Deref for MockAnthropic {
    type Target = MockServer;

    fn deref(&self) -> &MockServer {
        &self.server
    }
}

impl MockAnthropic {
    /// Starts the server on `127.0.0.1:<free port>`.
    pub fn start() -> anyhow::Result<MockAnthropic> {
        Ok(MockAnthropic {
            server: MockServer::start(Flavor::Anthropic)?,
        })
    }

    /// `http://127.0.0.1:<port>` (no `/v1`: clients append `/v1/messages`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Queues `text_reply(text)`.
    pub fn push_text(&self, text: &str) {
        self.push(Self::text_reply(text));
    }

    /// Queues `tool_use_reply(calls)`.
    pub fn push_tool_use(&self, calls: &[(&str, &str, &str)]) {
        self.push(Self::tool_use_reply(calls));
    }

    /// A `message` body whose only content block is the text `text`
    /// (`stop_reason: "end_turn"`).
    pub fn text_reply(text: &str) -> Value {
        let output_tokens = text.split_whitespace().count().max(1);
        message(
            vec![json!({"type": "text", "text": text})],
            "end_turn",
            output_tokens,
        )
    }

    /// A `message` body calling tools: `calls` = `[(tool_use_id, name,
    /// input_json_text)]` become `tool_use` blocks (`input` parsed into a JSON
    /// object); `stop_reason: "tool_use"`.
    ///
    /// # Panics
    /// If an `input_json_text` is not valid JSON.
    pub fn tool_use_reply(calls: &[(&str, &str, &str)]) -> Value {
        Self::tool_use_reply_with_text(None, calls)
    }

    /// Like [`MockAnthropic::tool_use_reply`], with a leading text block when
    /// `text` is `Some`.
    ///
    /// # Panics
    /// If an `input_json_text` is not valid JSON.
    pub fn tool_use_reply_with_text(text: Option<&str>, calls: &[(&str, &str, &str)]) -> Value {
        let mut content = Vec::new();
        if let Some(text) = text {
            content.push(json!({"type": "text", "text": text}));
        }
        for (id, name, input) in calls {
            let input: Value = serde_json::from_str(input).unwrap_or_else(|e| {
                panic!("MockAnthropic::tool_use_reply: input of {name} is not JSON ({e}): {input}")
            });
            content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
        message(content, "tool_use", 10 * calls.len().max(1))
    }

    /// The signature the mock gives a thinking block of `thinking` (the real API's is
    /// opaque; this one is a keyed hash, so an altered text or signature fails
    /// [`MockAnthropic::verify`]).
    pub fn sign(thinking: &str) -> String {
        format!("mocksig1{:016x}", keyed_hash(b"thinking", thinking))
    }

    /// Whether `signature` is the mock's for `thinking`.
    pub fn verify(thinking: &str, signature: &str) -> bool {
        signature == Self::sign(thinking)
    }

    /// The `data` of a redacted thinking block hiding `secret`: opaque text with a check the
    /// mock verifies ([`MockAnthropic::verify_redacted`]).
    pub fn redacted_data(secret: &str) -> String {
        let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{hex}.{:016x}", keyed_hash(b"redacted", &hex))
    }

    /// Whether `data` is a redacted block's data the mock issued, unaltered.
    pub fn verify_redacted(data: &str) -> bool {
        data.rsplit_once('.')
            .is_some_and(|(hex, check)| check == format!("{:016x}", keyed_hash(b"redacted", hex)))
    }

    /// A signed `thinking` block.
    pub fn thinking_block(thinking: &str) -> Value {
        json!({"type": "thinking", "thinking": thinking, "signature": Self::sign(thinking)})
    }

    /// A `redacted_thinking` block hiding `secret`.
    pub fn redacted_block(secret: &str) -> Value {
        json!({"type": "redacted_thinking", "data": Self::redacted_data(secret)})
    }

    /// A `message` body calling tools after its thinking: `thinking` (a signed thinking
    /// block), a redacted block when `redacted` is `Some`, then the `tool_use` blocks.
    ///
    /// # Panics
    /// If an `input_json_text` is not valid JSON.
    pub fn thinking_tool_use_reply(
        thinking: &str,
        redacted: Option<&str>,
        calls: &[(&str, &str, &str)],
    ) -> Value {
        let mut reply = Self::tool_use_reply(calls);
        let mut content = vec![Self::thinking_block(thinking)];
        content.extend(redacted.map(Self::redacted_block));
        if let Some(blocks) = reply["content"].as_array() {
            content.extend(blocks.iter().cloned());
        }
        reply["content"] = Value::Array(content);
        reply
    }

    /// A final text `message` after a signed thinking block.
    pub fn thinking_text_reply(thinking: &str, text: &str) -> Value {
        let mut reply = Self::text_reply(text);
        reply["content"] = json!([Self::thinking_block(thinking), {"type": "text", "text": text}]);
        reply
    }

    /// Queues [`MockAnthropic::thinking_tool_use_reply`].
    pub fn push_thinking_tool_use(
        &self,
        thinking: &str,
        redacted: Option<&str>,
        calls: &[(&str, &str, &str)],
    ) {
        self.push(Self::thinking_tool_use_reply(thinking, redacted, calls));
    }

    /// Queues [`MockAnthropic::thinking_text_reply`].
    pub fn push_thinking_text(&self, thinking: &str, text: &str) {
        self.push(Self::thinking_text_reply(thinking, text));
    }

    /// How many `cache_control` breakpoints a request body carries (the API takes at most 4).
    pub fn count_breakpoints(body: &Value) -> usize {
        let mut n = 0;
        let mut pending = vec![body];
        while let Some(v) = pending.pop() {
            match v {
                Value::Object(map) => {
                    n += usize::from(map.contains_key("cache_control"));
                    pending.extend(map.values());
                }
                Value::Array(items) => pending.extend(items),
                _ => {}
            }
        }
        n
    }

    /// An Anthropic error body:
    /// `{"type":"error","error":{"type":…,"message":…}}`.
    pub fn error_body(error_type: &str, message: &str) -> Value {
        json!({"type": "error", "error": {"type": error_type, "message": message}})
    }

    /// The body of a real 529 answer (`overloaded_error`, `"Overloaded"`),
    /// also the payload of the in-stream `event: error`.
    pub fn overloaded_body() -> Value {
        Self::error_body("overloaded_error", "Overloaded")
    }

    /// The body of a 429 answer (`rate_limit_error`).
    pub fn rate_limit_body() -> Value {
        Self::error_body(
            "rate_limit_error",
            "This request would exceed the rate limit (mock)",
        )
    }

    /// `reply` streamed up to the middle of its first content block, then an
    /// in-stream `event: error` with [`MockAnthropic::overloaded_body`]
    /// (non-streaming requests get 529 with that body).
    pub fn overloaded_stream(reply: Value) -> MockResponse {
        MockResponse::stream_error(reply, Self::overloaded_body())
    }
}

/// FNV-1a over `key` then `text`: the mock's signature (not cryptographic; it only has to
/// change when the text does).
fn keyed_hash(key: &[u8], text: &str) -> u64 {
    key.iter()
        .chain(b"\0")
        .chain(text.as_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
}

fn message(content: Vec<Value>, stop_reason: &str, output_tokens: usize) -> Value {
    json!({
        "id": format!("msg_mock{}", uuid::Uuid::new_v4().simple()),
        "type": "message",
        "role": "assistant",
        "model": "mock",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": output_tokens}
    })
}

/// Converts a `message` body into the equivalent Messages SSE records.
pub(crate) fn sse_transcript(message: &Value) -> Transcript {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["stop_sequence"] = Value::Null;
    // The reply's usage (input and cache counts) as the API sends it first, output 1.
    let mut usage = message.get("usage").cloned().unwrap_or(json!({}));
    if usage.get("input_tokens").is_none() {
        usage["input_tokens"] = json!(INPUT_TOKENS);
    }
    usage["output_tokens"] = json!(1);
    start["usage"] = usage;
    let mut records = vec![sse_event(
        "message_start",
        &json!({"type": "message_start", "message": start}),
    )];
    let ping = sse_event("ping", &json!({"type": "ping"}));
    let mut cut_at = None;
    let blocks = message
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (index, block) in blocks.iter().enumerate() {
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (start_block, deltas): (Value, Vec<Value>) = match kind {
            "text" => (
                json!({"type": "text", "text": ""}),
                text_pieces(
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                )
                .into_iter()
                .map(|t| json!({"type": "text_delta", "text": t}))
                .collect(),
            ),
            "tool_use" => {
                let input = block.get("input").cloned().unwrap_or(json!({}));
                (
                    json!({
                        "type": "tool_use",
                        "id": block.get("id"),
                        "name": block.get("name"),
                        "input": {}
                    }),
                    fragments(&input.to_string())
                        .into_iter()
                        .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                        .collect(),
                )
            }
            "thinking" => {
                let text = block
                    .get("thinking")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let mut deltas: Vec<Value> = text_pieces(text)
                    .into_iter()
                    .map(|t| json!({"type": "thinking_delta", "thinking": t}))
                    .collect();
                deltas
                    .push(json!({"type": "signature_delta", "signature": block.get("signature")}));
                (json!({"type": "thinking", "thinking": ""}), deltas)
            }
            // Other block types (redacted_thinking) are sent whole in their start event.
            _ => (block.clone(), Vec::new()),
        };
        records.push(sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start_block}),
        ));
        if index == 0 {
            records.push(ping.clone());
        }
        let n = deltas.len();
        for (i, delta) in deltas.into_iter().enumerate() {
            records.push(sse_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
            // A cut stream stops after about half of the first block's deltas.
            if cut_at.is_none() && i + 1 >= n.div_ceil(2) {
                cut_at = Some(records.len());
            }
        }
        records.push(sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if blocks.is_empty() {
        records.push(ping);
    }
    let cut_at = cut_at.unwrap_or(records.len());
    records.push(sse_event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {
                "stop_reason": message.get("stop_reason").cloned().unwrap_or(json!("end_turn")),
                "stop_sequence": message.get("stop_sequence").cloned().unwrap_or(Value::Null)
            },
            "usage": {
                "output_tokens": message.pointer("/usage/output_tokens").cloned().unwrap_or(json!(1))
            }
        }),
    ));
    records.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    Transcript { records, cut_at }
}
