//! A scripted mock of the OpenAI Chat Completions HTTP API, and (quirks mode) of the
//! OpenAI-compatible servers that refuse a tool loop that drops their reasoning state
//! (`quirks.rs`).

mod quirks;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::mock_http::{
    Dialect, Flavor, MockResponse, MockServer, Transcript, fragments, sse_data, text_pieces,
};

/// The endpoint the mock scripts.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// A local HTTP server speaking the OpenAI Chat Completions wire format.
///
/// `POST /v1/chat/completions` answers with the next queued [`MockResponse`]
/// (FIFO); when the queue is empty it answers 500 with
/// `{"error":{"message":"mock: no scripted response left","type":"server_error"}}`.
/// Any other path answers 404 (OpenAI-style error). Every request is captured
/// ([`MockOpenAi::requests`]) with its arrival time.
///
/// If the request has `"stream": true` and the scripted answer is a 2xx
/// `chat.completion`, it is sent as the equivalent `text/event-stream`, the
/// way OpenAI does it: a role chunk; any `reasoning_content` (DeepSeek) in
/// word-sized deltas; the content (or a `refusal`) in word-sized deltas; per tool call a first chunk with `index`, `id`, `type`,
/// `function.name`, `arguments: ""` (and the call's `extra_content`, if any), then >= 2 chunks with only `index` +
/// `function.arguments` fragments; a chunk with `delta: {}` and the
/// `finish_reason`; a usage chunk (`choices: []`) when
/// `stream_options.include_usage` is true; then `data: [DONE]`.
/// [`MockResponse::cut_stream`], [`MockResponse::slow_stream`] and
/// [`MockResponse::stream_error`] alter the delivery (see
/// [`crate::ResponseMode`]).
///
/// The server runs on its own thread with its own tokio runtime, so it works
/// from sync tests and from any `#[tokio::test]` flavor, and it can be dropped
/// anywhere. Drop stops it.
pub struct MockOpenAi {
    server: MockServer,
    /// Quirks mode: the reasoning state the queued answers give, checked on every request.
    quirks: Option<quirks::Shared>,
}

impl std::ops::Deref for MockOpenAi {
    type Target = MockServer;

    fn deref(&self) -> &MockServer {
        &self.server
    }
}

impl MockOpenAi {
    /// Starts the server on `127.0.0.1:<free port>`, playing OpenAI itself.
    pub fn start() -> anyhow::Result<MockOpenAi> {
        Self::start_as(Dialect::OpenAi)
    }

    /// Starts the server playing Ollama's `/v1`: it refuses `content: null` on any message,
    /// even one with `tool_calls` (see `mock_checks.rs`).
    pub fn start_ollama() -> anyhow::Result<MockOpenAi> {
        Self::start_as(Dialect::Ollama)
    }

    /// Starts the server playing Gemini's OpenAI compatibility: served under
    /// `/v1beta/openai` (its [`MockOpenAi::base_url`] ends so), refusing request fields it
    /// does not know with Google's error shape (see `mock_checks.rs`).
    pub fn start_gemini() -> anyhow::Result<MockOpenAi> {
        Self::start_as(Dialect::Gemini)
    }

    /// Starts the server playing `dialect`.
    pub fn start_as(dialect: Dialect) -> anyhow::Result<MockOpenAi> {
        Ok(MockOpenAi {
            server: MockServer::start_as(Flavor::OpenAi, dialect)?,
            quirks: None,
        })
    }

    /// Starts the server in quirks mode: it also refuses (400, a violation) what DeepSeek,
    /// Gemini and vLLM refuse (see `mock_openai/quirks.rs`): an assistant tool-call message
    /// without the `reasoning_content` its answer carried, a tool call without the
    /// `extra_content` it carried, `arguments` that are not the JSON text of an object. It
    /// knows what it gave from the answers queued with [`MockOpenAi::push`] /
    /// [`MockOpenAi::push_response`] (not from a responder's).
    pub fn start_quirks() -> anyhow::Result<MockOpenAi> {
        let mut mock = Self::start()?;
        let given = quirks::Shared::default();
        let check = Arc::clone(&given);
        mock.server
            .set_check(Arc::new(move |body| quirks::violations(&check, body)));
        mock.quirks = Some(given);
        Ok(mock)
    }

    /// Queues a 200 answer with `body` (remembering its reasoning state in quirks mode).
    pub fn push(&self, body: Value) {
        self.push_response(MockResponse::ok(body));
    }

    /// Queues `response` (remembering its reasoning state in quirks mode).
    pub fn push_response(&self, response: MockResponse) {
        if let Some(given) = &self.quirks {
            quirks::remember(given, &response.body);
        }
        self.server.push_response(response);
    }

    /// `reply` whose message also carries DeepSeek's `reasoning_content` `text`.
    pub fn with_reasoning_content(mut reply: Value, text: &str) -> Value {
        reply["choices"][0]["message"]["reasoning_content"] = json!(text);
        reply
    }

    /// `reply` whose tool call number `call` also carries Gemini's thought signature:
    /// `extra_content: {"google": {"thought_signature": signature}}`.
    pub fn with_thought_signature(mut reply: Value, call: usize, signature: &str) -> Value {
        reply["choices"][0]["message"]["tool_calls"][call]["extra_content"] =
            json!({"google": {"thought_signature": signature}});
        reply
    }

    /// A `chat.completion` body whose message is a `refusal` (structured outputs), as the
    /// OpenAI docs show it: `content: null`, `finish_reason: "stop"`.
    pub fn refusal_reply(refusal: &str) -> Value {
        completion(
            json!({"role": "assistant", "content": null, "refusal": refusal}),
            "stop",
            refusal.split_whitespace().count().max(1),
        )
    }

    /// `http://127.0.0.1:<port>/v1` (an OpenAI-compatible base URL);
    /// `http://127.0.0.1:<port>/v1beta/openai` for [`MockOpenAi::start_gemini`].
    pub fn base_url(&self) -> String {
        let root = match self.server.dialect() {
            Dialect::Gemini => "v1beta/openai",
            Dialect::OpenAi | Dialect::Ollama => "v1",
        };
        format!("http://{}/{root}", self.server.addr())
    }

    /// Queues `text_reply(text)`.
    pub fn push_text(&self, text: &str) {
        self.push(Self::text_reply(text));
    }

    /// Queues `tool_calls_reply(calls)`.
    pub fn push_tool_calls(&self, calls: &[(&str, &str, &str)]) {
        self.push(Self::tool_calls_reply(calls));
    }

    /// A `chat.completion` body whose assistant message is `text`
    /// (`finish_reason: "stop"`), exactly as the real API returns it.
    pub fn text_reply(text: &str) -> Value {
        let completion_tokens = text.split_whitespace().count().max(1);
        completion(
            json!({
                "role": "assistant",
                "content": text,
                "refusal": null
            }),
            "stop",
            completion_tokens,
        )
    }

    /// A `chat.completion` body cut by the output limit (`finish_reason: "length"`) with
    /// `text` as its content: `""` is what OpenAI answers when a reasoning model spent the
    /// whole budget on reasoning.
    pub fn length_reply(text: &str) -> Value {
        completion(
            json!({"role": "assistant", "content": text, "refusal": null}),
            "length",
            text.split_whitespace().count().max(1),
        )
    }

    /// A `chat.completion` body whose assistant message calls tools:
    /// `calls` = `[(tool_call_id, function_name, arguments_json_text)]`;
    /// `content: null`, `finish_reason: "tool_calls"`.
    pub fn tool_calls_reply(calls: &[(&str, &str, &str)]) -> Value {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, arguments)| {
                json!({
                    "id": id,
                    "type": "function",
                    "function": { "name": name, "arguments": arguments }
                })
            })
            .collect();
        let completion_tokens = 10 * calls.len().max(1);
        completion(
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": tool_calls,
                "refusal": null
            }),
            "tool_calls",
            completion_tokens,
        )
    }

    /// An OpenAI-style error body:
    /// `{"error":{"message":…,"type":…,"param":null,"code":null}}`.
    pub fn error_body(message: &str, error_type: &str) -> Value {
        json!({
            "error": { "message": message, "type": error_type, "param": null, "code": null }
        })
    }

    /// The body of a real 429 rate-limit answer.
    pub fn rate_limit_body() -> Value {
        json!({
            "error": {
                "message": "Rate limit reached for requests (mock)",
                "type": "requests",
                "param": null,
                "code": "rate_limit_exceeded"
            }
        })
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn completion(message: Value, finish_reason: &str, completion_tokens: usize) -> Value {
    let prompt_tokens = 42;
    json!({
        "id": format!("chatcmpl-mock{}", uuid::Uuid::new_v4().simple()),
        "object": "chat.completion",
        "created": unix_now(),
        "model": "mock",
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens
        },
        "system_fingerprint": null
    })
}

/// The smallest prompt OpenAI's automatic prompt caching caches, in tokens.
pub(crate) const CACHE_MIN_PROMPT_TOKENS: u64 = 1024;
/// Cache hits come in whole blocks of this many tokens.
pub(crate) const CACHE_BLOCK_TOKENS: u64 = 128;

/// OpenAI's automatic prompt caching as its "Prompt caching" guide documents it, for
/// [`MockServer::enable_prompt_caching`](crate::MockServer::enable_prompt_caching): a prompt of
/// at least [`CACHE_MIN_PROMPT_TOKENS`] tokens reads from the cache the longest prefix it
/// shares with an earlier request, in whole [`CACHE_BLOCK_TOKENS`]-token blocks, reported as
/// `usage.prompt_tokens_details.cached_tokens` (part of `prompt_tokens`). The prompt is what
/// the model is shown in the order the API builds it (tools, then the messages), each part
/// as its request JSON; a token is ~4 bytes of it.
#[derive(Default)]
pub(crate) struct PromptCache {
    prompts: Vec<String>,
    reported: Vec<Value>,
}

impl PromptCache {
    /// Sets `completion`'s `usage` for `request` (its completion tokens kept) and remembers
    /// the prompt for later requests.
    pub(crate) fn bill(&mut self, request: &Value, completion: &mut Value) {
        let mut prompt = request
            .get("tools")
            .map(Value::to_string)
            .unwrap_or_default();
        for message in request
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            prompt.push_str(&message.to_string());
        }
        let tokens = |bytes: usize| (bytes as u64).div_ceil(4);
        let prompt_tokens = tokens(prompt.len()).max(1);
        let shared = self
            .prompts
            .iter()
            .map(|earlier| common_prefix(earlier, &prompt))
            .max()
            .unwrap_or(0);
        let shared_tokens = (shared as u64) / 4;
        let cached_tokens = if prompt_tokens >= CACHE_MIN_PROMPT_TOKENS
            && shared_tokens >= CACHE_MIN_PROMPT_TOKENS
        {
            (shared_tokens / CACHE_BLOCK_TOKENS * CACHE_BLOCK_TOKENS).min(prompt_tokens)
        } else {
            0
        };
        self.prompts.push(prompt);
        let completion_tokens = completion
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let usage = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0
            }
        });
        self.reported.push(usage.clone());
        completion["usage"] = usage;
    }

    /// The usage objects sent so far, in order.
    pub(crate) fn reported(&self) -> Vec<Value> {
        self.reported.clone()
    }
}

/// Bytes `a` and `b` share from their start.
fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Converts a `chat.completion` body into the equivalent SSE records of
/// `chat.completion.chunk`s, ending in `data: [DONE]`. `request` is the
/// request body (for `stream_options.include_usage`).
pub(crate) fn sse_transcript(completion: &Value, request: &Value) -> Transcript {
    let include_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let chunk = |choices: Value| {
        let mut c = json!({
            "id": completion.get("id").cloned().unwrap_or(Value::Null),
            "object": "chat.completion.chunk",
            "created": completion.get("created").cloned().unwrap_or(Value::Null),
            "model": completion.get("model").cloned().unwrap_or(Value::Null),
            "system_fingerprint": null,
            "choices": choices
        });
        if include_usage {
            // The real API sends `usage: null` on every chunk but the last.
            c["usage"] = Value::Null;
        }
        c
    };
    let mut records = Vec::new();
    let mut cut_at = None;
    let choices = completion
        .get("choices")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, choice) in choices.iter().enumerate() {
        let index = choice.get("index").cloned().unwrap_or(json!(i));
        let delta = |d: Value| {
            sse_data(&chunk(json!([{
                "index": index, "delta": d, "logprobs": null, "finish_reason": null
            }])))
        };
        let message = choice.get("message").cloned().unwrap_or(Value::Null);
        let text = message.get("content").and_then(Value::as_str);
        let first = records.len();
        records.push(delta(json!({
            "role": "assistant",
            "content": if text.is_some() { json!("") } else { Value::Null },
            "refusal": null
        })));
        let reasoning = message.get("reasoning_content").and_then(Value::as_str);
        for piece in text_pieces(reasoning.unwrap_or_default()) {
            records.push(delta(json!({ "reasoning_content": piece })));
        }
        for piece in text_pieces(text.unwrap_or_default()) {
            records.push(delta(json!({ "content": piece })));
        }
        let refusal = message.get("refusal").and_then(Value::as_str);
        for piece in text_pieces(refusal.unwrap_or_default()) {
            records.push(delta(json!({ "refusal": piece })));
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for (ci, call) in calls.iter().enumerate() {
                let mut first = json!({
                    "index": ci,
                    "id": call.get("id"),
                    "type": "function",
                    "function": { "name": call.pointer("/function/name"), "arguments": "" }
                });
                if let Some(extra) = call.get("extra_content") {
                    first["extra_content"] = extra.clone();
                }
                records.push(delta(json!({ "tool_calls": [first] })));
                let arguments = call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                for fragment in fragments(arguments) {
                    records.push(delta(json!({
                        "tool_calls": [{ "index": ci, "function": { "arguments": fragment } }]
                    })));
                }
            }
        }
        // A cut stream stops around the middle of the first choice's deltas:
        // at least the role chunk and one delta, never the finish chunk.
        let before_finish = records.len() - first;
        cut_at.get_or_insert(first + (before_finish / 2 + 1).max(2).min(before_finish));
        records.push(sse_data(&chunk(json!([{
            "index": index,
            "delta": {},
            "logprobs": null,
            "finish_reason": choice.get("finish_reason").cloned().unwrap_or(json!("stop"))
        }]))));
    }
    if include_usage {
        let mut usage_chunk = chunk(json!([]));
        usage_chunk["usage"] = completion.get("usage").cloned().unwrap_or(Value::Null);
        records.push(sse_data(&usage_chunk));
    }
    records.push("data: [DONE]\n\n".to_owned());
    Transcript {
        cut_at: cut_at.unwrap_or(0),
        records,
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    fn request(messages: &[&str]) -> Value {
        json!({"tools": [], "messages": messages.iter().map(|m| json!({"role": "user", "content": m})).collect::<Vec<_>>()})
    }

    fn cached(usage: &Value) -> u64 {
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
    }

    #[test]
    fn prefixes_of_1024_tokens_or_more_are_read_in_128_token_blocks() {
        let mut cache = PromptCache::default();
        let long = "a".repeat(4 * 1100);
        let mut body = MockOpenAi::text_reply("ok");
        cache.bill(&request(&[&long]), &mut body);
        assert_eq!(cached(&body["usage"]), 0, "nothing earlier");
        cache.bill(&request(&[&long, "next"]), &mut body);
        // ~1104 shared tokens (the long message's JSON) -> 8 blocks of 128 = 1024.
        assert_eq!(cached(&body["usage"]), 1024);
        assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 1024);
        // A short prompt is never cached, however much it shares.
        cache.bill(&request(&["short"]), &mut body);
        cache.bill(&request(&["short"]), &mut body);
        assert_eq!(cached(&body["usage"]), 0);
        assert_eq!(cache.reported().len(), 4);
    }
}
