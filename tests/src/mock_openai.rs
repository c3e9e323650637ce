//! A scripted mock of the OpenAI Chat Completions HTTP API.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The endpoint the mock scripts.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// One scripted HTTP answer.
#[derive(Debug, Clone)]
pub struct MockResponse {
    /// HTTP status code.
    pub status: u16,
    /// JSON body.
    pub body: Value,
    /// Sleep this long before answering (e.g. to trigger client timeouts).
    pub delay: Duration,
}

impl MockResponse {
    /// 200 with `body`, no delay.
    pub fn ok(body: Value) -> MockResponse {
        MockResponse {
            status: 200,
            body,
            delay: Duration::ZERO,
        }
    }

    /// `status` with `body`, no delay.
    pub fn error(status: u16, body: Value) -> MockResponse {
        MockResponse {
            status,
            body,
            delay: Duration::ZERO,
        }
    }

    /// Same response, answered after `delay`.
    pub fn delayed(mut self, delay: Duration) -> MockResponse {
        self.delay = delay;
        self
    }
}

/// A request received by the mock.
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
}

impl CapturedRequest {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The `messages` array of a chat completion request (empty if absent).
    pub fn messages(&self) -> Vec<Value> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct MockState {
    queue: VecDeque<MockResponse>,
    requests: Vec<CapturedRequest>,
}

type Shared = Arc<Mutex<MockState>>;

fn lock(state: &Shared) -> MutexGuard<'_, MockState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// A local HTTP server speaking the OpenAI Chat Completions wire format.
///
/// `POST /v1/chat/completions` answers with the next queued [`MockResponse`]
/// (FIFO); when the queue is empty it answers 500 with
/// `{"error":{"message":"mock: no scripted response left","type":"server_error"}}`.
/// If the request has `"stream": true` and the scripted answer is a 2xx
/// `chat.completion`, it is sent as the equivalent `text/event-stream` of
/// `chat.completion.chunk`s ending in `data: [DONE]`. Any other path answers
/// 404 (OpenAI-style error). Every request is captured ([`MockOpenAi::requests`]).
///
/// The server runs on its own thread with its own tokio runtime, so it works
/// from sync tests and from any `#[tokio::test]` flavor, and it can be dropped
/// anywhere. Drop stops it.
pub struct MockOpenAi {
    addr: SocketAddr,
    state: Shared,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MockOpenAi {
    /// Starts the server on `127.0.0.1:<free port>`.
    pub fn start() -> anyhow::Result<MockOpenAi> {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding mock OpenAI server")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state: Shared = Arc::default();
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building mock OpenAI runtime")?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name(format!("mock-openai-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("mock OpenAI: cannot register listener: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        res = axum::serve(listener, app) => {
                            if let Err(e) = res {
                                eprintln!("mock OpenAI server error: {e}");
                            }
                        }
                        _ = rx => {}
                    }
                });
                // Dropping the runtime here aborts in-flight connections.
            })
            .context("spawning mock OpenAI thread")?;
        Ok(MockOpenAi {
            addr,
            state,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>/v1` (an OpenAI-compatible base URL).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a 200 answer with `body` (e.g. [`MockOpenAi::text_reply`]).
    pub fn push(&self, body: Value) {
        self.push_response(MockResponse::ok(body));
    }

    /// Queues `text_reply(text)`.
    pub fn push_text(&self, text: &str) {
        self.push(Self::text_reply(text));
    }

    /// Queues `tool_calls_reply(calls)`.
    pub fn push_tool_calls(&self, calls: &[(&str, &str, &str)]) {
        self.push(Self::tool_calls_reply(calls));
    }

    /// Queues an error answer with `status` and `body` (e.g.
    /// [`MockOpenAi::error_body`]).
    pub fn push_error(&self, status: u16, body: Value) {
        self.push_response(MockResponse::error(status, body));
    }

    /// Queues an arbitrary [`MockResponse`].
    pub fn push_response(&self, response: MockResponse) {
        lock(&self.state).queue.push_back(response);
    }

    /// Number of scripted answers not yet consumed.
    pub fn pending(&self) -> usize {
        lock(&self.state).queue.len()
    }

    /// Drops all scripted answers not yet consumed.
    pub fn clear_queue(&self) {
        lock(&self.state).queue.clear();
    }

    /// All requests received so far, in arrival order.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        lock(&self.state).requests.clone()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.state).requests.len()
    }

    /// Waits until at least `n` requests were received and returns them all.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<CapturedRequest>> {
        let deadline = Instant::now() + timeout;
        loop {
            let reqs = self.requests();
            if reqs.len() >= n {
                return Ok(reqs);
            }
            if Instant::now() >= deadline {
                bail!(
                    "mock OpenAI got {} request(s), expected at least {n} within {timeout:?}",
                    reqs.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

impl Drop for MockOpenAi {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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

async fn handle(State(state): State<Shared>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in req.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    let bytes = match to_bytes(req.into_body(), 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &MockOpenAi::error_body(
                    &format!("mock: cannot read body: {e}"),
                    "invalid_request_error",
                ),
            );
        }
    };
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let is_chat = method == Method::POST && path == CHAT_COMPLETIONS_PATH;

    let scripted = {
        let mut st = lock(&state);
        st.requests.push(CapturedRequest {
            method: method.to_string(),
            path: path.clone(),
            headers,
            body,
        });
        if is_chat { st.queue.pop_front() } else { None }
    };

    if !is_chat {
        return json_response(
            StatusCode::NOT_FOUND,
            &MockOpenAi::error_body(
                &format!(
                    "mock: unknown endpoint {method} {path} (only POST {CHAT_COMPLETIONS_PATH})"
                ),
                "invalid_request_error",
            ),
        );
    }
    let Some(resp) = scripted else {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": {"message": "mock: no scripted response left", "type": "server_error"}}),
        );
    };
    if !resp.delay.is_zero() {
        tokio::time::sleep(resp.delay).await;
    }
    let status = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if stream && status.is_success() && resp.body.get("choices").is_some() {
        return sse_response(status, &resp.body, include_usage);
    }
    json_response(status, &resp.body)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Converts a `chat.completion` body into the equivalent SSE stream.
fn sse_response(status: StatusCode, completion: &Value, include_usage: bool) -> Response {
    let base = |choices: Value| {
        json!({
            "id": completion.get("id").cloned().unwrap_or(Value::Null),
            "object": "chat.completion.chunk",
            "created": completion.get("created").cloned().unwrap_or(Value::Null),
            "model": completion.get("model").cloned().unwrap_or(Value::Null),
            "system_fingerprint": null,
            "choices": choices
        })
    };
    let mut chunks = Vec::new();
    let choices = completion
        .get("choices")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, choice) in choices.iter().enumerate() {
        let index = choice.get("index").cloned().unwrap_or(json!(i));
        let delta = |d: Value| json!([{ "index": index, "delta": d, "logprobs": null, "finish_reason": null }]);
        let message = choice.get("message").cloned().unwrap_or(Value::Null);
        chunks.push(base(delta(
            json!({"role": "assistant", "content": "", "refusal": null}),
        )));
        if let Some(text) = message.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            chunks.push(base(delta(json!({ "content": text }))));
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for (ci, call) in calls.iter().enumerate() {
                chunks.push(base(delta(json!({
                    "tool_calls": [{
                        "index": ci,
                        "id": call.get("id"),
                        "type": "function",
                        "function": {
                            "name": call.pointer("/function/name"),
                            "arguments": call.pointer("/function/arguments")
                        }
                    }]
                }))));
            }
        }
        chunks.push(base(json!([{
            "index": index,
            "delta": {},
            "logprobs": null,
            "finish_reason": choice.get("finish_reason").cloned().unwrap_or(json!("stop"))
        }])));
    }
    if include_usage {
        let mut usage_chunk = base(json!([]));
        usage_chunk["usage"] = completion.get("usage").cloned().unwrap_or(Value::Null);
        chunks.push(usage_chunk);
    }
    let mut text = String::new();
    for c in chunks {
        text.push_str("data: ");
        text.push_str(&c.to_string());
        text.push_str("\n\n");
    }
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from(text))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
