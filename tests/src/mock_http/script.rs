//! Scripted answers ([`MockResponse`], [`ResponseMode`]) and captured requests.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::http::header::{HeaderName, HeaderValue};
use serde_json::Value;

/// How a scripted answer is delivered.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseMode {
    /// The whole answer (as SSE when the request streams and the body is a
    /// success reply).
    Complete,
    /// Only the first part of the answer, then the connection is aborted:
    /// a streaming request gets the first events (e.g. role + some content
    /// deltas) without any finish event / `[DONE]` / `message_stop`; a
    /// non-streaming request gets half of the JSON body (with a
    /// `content-length` announcing the full one).
    Cut,
    /// For a streaming request: headers at once, then an SSE comment
    /// `: ping` every second for `total`, then the whole transcript normally.
    /// A non-streaming request gets the whole JSON answer after `total`.
    Slow {
        /// How long to hold the connection open before answering.
        total: Duration,
    },
    /// For a streaming request: the records spread evenly over `total` (a
    /// model writing its answer, e.g. 2,000 words over 5 s). A non-streaming
    /// request gets the whole JSON answer after `total`.
    Paced {
        /// How long writing the whole stream takes.
        total: Duration,
    },
    /// For a streaming request: the same prefix as [`ResponseMode::Cut`],
    /// then an in-stream error event carrying `error` (OpenAI:
    /// `data: {"error":…}`; Anthropic: `event: error`), then a clean end of
    /// the body. A non-streaming request gets `error` as a JSON body with
    /// status 529 (`overloaded_error`), 429 (`rate_limit_error` /
    /// `rate_limit_exceeded`) or 500.
    StreamError {
        /// The full error body, e.g. [`crate::MockAnthropic::overloaded_body`].
        error: Value,
    },
}

/// One scripted HTTP answer.
#[derive(Debug, Clone)]
pub struct MockResponse {
    /// HTTP status code.
    pub status: u16,
    /// JSON body.
    pub body: Value,
    /// Sleep this long before answering (e.g. to trigger client timeouts).
    pub delay: Duration,
    /// Extra response headers, e.g. `("retry-after", "2")`.
    pub headers: Vec<(String, String)>,
    /// How the answer is delivered (complete, cut, slow, in-stream error).
    pub mode: ResponseMode,
}

impl MockResponse {
    /// 200 with `body`, no delay.
    pub fn ok(body: Value) -> MockResponse {
        MockResponse::error(200, body)
    }

    /// `status` with `body`, no delay.
    pub fn error(status: u16, body: Value) -> MockResponse {
        MockResponse {
            status,
            body,
            delay: Duration::ZERO,
            headers: Vec::new(),
            mode: ResponseMode::Complete,
        }
    }

    /// 200 with `reply`, delivered as [`ResponseMode::Cut`]: the client sees
    /// an incomplete stream (or a truncated JSON body) and a dropped
    /// connection.
    pub fn cut_stream(reply: Value) -> MockResponse {
        MockResponse::ok(reply).mode(ResponseMode::Cut)
    }

    /// 200 with `reply`, delivered as [`ResponseMode::Slow`]: `: ping`
    /// keep-alives every second for `total`, then the whole stream.
    pub fn slow_stream(reply: Value, total: Duration) -> MockResponse {
        MockResponse::ok(reply).mode(ResponseMode::Slow { total })
    }

    /// 200 with `reply`, delivered as [`ResponseMode::Paced`]: its records
    /// written one by one over `total`.
    pub fn paced_stream(reply: Value, total: Duration) -> MockResponse {
        MockResponse::ok(reply).mode(ResponseMode::Paced { total })
    }

    /// 200 with `reply`, delivered as [`ResponseMode::StreamError`]: some
    /// events of `reply`, then an in-stream error event with `error`.
    pub fn stream_error(reply: Value, error: Value) -> MockResponse {
        MockResponse::ok(reply).mode(ResponseMode::StreamError { error })
    }

    /// Same response, answered after `delay`.
    pub fn delayed(mut self, delay: Duration) -> MockResponse {
        self.delay = delay;
        self
    }

    /// Same response with an extra header (e.g. `header("retry-after", "2")`).
    ///
    /// # Panics
    /// If `name` or `value` is not a valid HTTP header name / value.
    pub fn header(mut self, name: &str, value: &str) -> MockResponse {
        if HeaderName::from_bytes(name.as_bytes()).is_err() || HeaderValue::from_str(value).is_err()
        {
            panic!("MockResponse::header: invalid header {name:?}: {value:?}");
        }
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Same response delivered with `mode`.
    pub fn mode(mut self, mode: ResponseMode) -> MockResponse {
        self.mode = mode;
        self
    }
}

/// A request received by a mock.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedRequest {
    /// HTTP method, e.g. `"POST"`.
    pub method: String,
    /// Request path, e.g. `"/v1/chat/completions"` (without query string).
    pub path: String,
    /// Headers with lowercase names (repeated headers joined with `", "`).
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON; a JSON string holding the raw text if it is
    /// not valid JSON; `Null` if empty.
    pub body: Value,
    /// When the request arrived (its headers were parsed), by the mock's clock.
    pub received_at: Instant,
}

impl CapturedRequest {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The `messages` array of the request body (empty if absent). Works for
    /// both Chat Completions and Anthropic Messages requests.
    pub fn messages(&self) -> Vec<Value> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether the request asked for a streamed answer (`"stream": true`).
    pub fn is_stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }
}
