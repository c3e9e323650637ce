//! Plumbing shared by the scripted LLM mocks ([`crate::MockOpenAi`],
//! [`crate::MockAnthropic`], [`crate::MockResponses`]): scripted answers, request capture, the server
//! thread, and the streaming machinery (SSE transcripts, keep-alives, cut
//! connections).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::header::{HeaderName, HeaderValue};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
// `baton-tests` has no direct `futures`/`tokio-stream` dependency; tonic's
// codegen re-export (public API, reached through `temporalio-client`) gives
// us a `Stream` over a tokio channel, which is all `Body::from_stream` needs.
use temporalio_client::tonic::codegen::tokio_stream::wrappers::ReceiverStream;

use crate::http_thread::{HttpThread, header_map};

/// Interval between two keep-alive comments of a [`MockResponse::slow_stream`].
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// The SSE keep-alive record sent by [`MockResponse::slow_stream`].
const KEEPALIVE_RECORD: &str = ": ping\n\n";

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

/// Which server a Chat Completions mock plays: the API's own rules differ by server
/// (`mock_checks.rs` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// OpenAI itself (and every mock of the other wire formats).
    #[default]
    OpenAi,
    /// Ollama's `/v1` (OpenAI compatibility): refuses `content: null` on any message.
    Ollama,
    /// Gemini's OpenAI compatibility (`/v1beta/openai`): refuses fields it does not know,
    /// with Google's error shape.
    Gemini,
}

/// The Chat Completions path of Gemini's OpenAI compatibility.
pub(crate) const GEMINI_CHAT_COMPLETIONS_PATH: &str = "/v1beta/openai/chat/completions";

/// Which wire format a [`MockServer`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    OpenAi,
    Anthropic,
    Responses,
}

impl Flavor {
    fn name(self) -> &'static str {
        match self {
            Flavor::OpenAi => "mock OpenAI",
            Flavor::Anthropic => "mock Anthropic",
            Flavor::Responses => "mock OpenAI Responses",
        }
    }

    fn endpoint(self, dialect: Dialect) -> &'static str {
        match self {
            Flavor::OpenAi if dialect == Dialect::Gemini => GEMINI_CHAT_COMPLETIONS_PATH,
            Flavor::OpenAi => crate::mock_openai::CHAT_COMPLETIONS_PATH,
            Flavor::Anthropic => crate::mock_anthropic::MESSAGES_PATH,
            Flavor::Responses => crate::mock_responses::RESPONSES_PATH,
        }
    }

    fn not_found_body(self, dialect: Dialect, method: &Method, path: &str) -> Value {
        let endpoint = self.endpoint(dialect);
        let message = format!("mock: unknown endpoint {method} {path} (only POST {endpoint})");
        match self {
            Flavor::OpenAi | Flavor::Responses => {
                crate::MockOpenAi::error_body(&message, "invalid_request_error")
            }
            Flavor::Anthropic => crate::MockAnthropic::error_body("not_found_error", &message),
        }
    }

    fn bad_request_body(self, dialect: Dialect, message: &str) -> Value {
        match self {
            // Google's error, in a JSON array, as its OpenAI compatibility answers a field it
            // does not know (quoted in google-gemini issues and the review's finding 2).
            Flavor::OpenAi if dialect == Dialect::Gemini => serde_json::json!([{
                "error": {
                    "code": 400,
                    "message": message,
                    "status": "INVALID_ARGUMENT",
                    "details": [{
                        "@type": "type.googleapis.com/google.rpc.BadRequest",
                        "fieldViolations": [{"description": message}]
                    }]
                }
            }]),
            Flavor::OpenAi | Flavor::Responses => {
                crate::MockOpenAi::error_body(message, "invalid_request_error")
            }
            Flavor::Anthropic => crate::MockAnthropic::error_body("invalid_request_error", message),
        }
    }

    fn exhausted_body(self) -> Value {
        match self {
            Flavor::OpenAi | Flavor::Responses => serde_json::json!({
                "error": {"message": "mock: no scripted response left", "type": "server_error"}
            }),
            Flavor::Anthropic => {
                crate::MockAnthropic::error_body("api_error", "mock: no scripted response left")
            }
        }
    }

    fn is_streamable(self, body: &Value) -> bool {
        match self {
            Flavor::OpenAi => body.get("choices").is_some(),
            Flavor::Anthropic => body.get("type").and_then(Value::as_str) == Some("message"),
            Flavor::Responses => crate::mock_responses::is_response(body),
        }
    }

    fn transcript(self, body: &Value, request: &Value) -> Transcript {
        match self {
            Flavor::OpenAi => crate::mock_openai::sse_transcript(body, request),
            Flavor::Anthropic => crate::mock_anthropic::sse_transcript(body),
            Flavor::Responses => crate::mock_responses::sse_transcript(body),
        }
    }

    fn error_record(self, error: &Value) -> String {
        match self {
            Flavor::OpenAi => sse_data(error),
            Flavor::Anthropic => sse_event("error", error),
            Flavor::Responses => crate::mock_responses::error_record(error),
        }
    }
}

/// The SSE records of a streamed answer.
pub(crate) struct Transcript {
    /// Complete SSE records (`event: …\ndata: …\n\n` or `data: …\n\n`).
    pub(crate) records: Vec<String>,
    /// How many leading records a cut stream sends (never includes the
    /// finish event).
    pub(crate) cut_at: usize,
}

/// `data: <json>\n\n`.
pub(crate) fn sse_data(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// `event: <name>\ndata: <json>\n\n`.
pub(crate) fn sse_event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Splits `text` into word-ish pieces (each keeps its trailing whitespace);
/// concatenating them gives `text` back. Empty text gives no piece.
pub(crate) fn text_pieces(text: &str) -> Vec<String> {
    text.split_inclusive(char::is_whitespace)
        .map(str::to_owned)
        .collect()
}

/// Splits `text` into at least 2 fragments (when it has at least 2 chars) of
/// at most ~16 chars, on char boundaries; concatenating them gives `text`.
pub(crate) fn fragments(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let pieces = chars.len().div_ceil(16).max(2).min(chars.len());
    let size = chars.len().div_ceil(pieces);
    chars
        .chunks(size)
        .map(|c| c.iter().collect::<String>())
        .collect()
}

/// Answers a request when the queue is empty (see [`MockServer::set_responder`]).
pub type Responder = Arc<dyn Fn(&CapturedRequest) -> Option<MockResponse> + Send + Sync>;

/// More rules a mock's requests must keep (see [`MockServer::set_check`]): what `body`
/// breaks, one reason each; empty when it is fine.
pub(crate) type Check = Arc<dyn Fn(&Value) -> Vec<String> + Send + Sync>;

#[derive(Default)]
struct MockState {
    queue: VecDeque<MockResponse>,
    requests: Vec<CapturedRequest>,
    responder: Option<Responder>,
    check: Option<Check>,
    /// Keep only the count of requests, not the requests (long benchmarks).
    count_only: bool,
    count: usize,
    /// Requests that broke [`crate::mock_checks`]: "request #n: reason".
    violations: Vec<String>,
    /// The reasoning items a Responses mock answered with, by `encrypted_content`.
    issued: BTreeMap<String, Value>,
    /// Bill successful answers as OpenAI's automatic prompt caching does (None: the fixed
    /// usage of the scripted bodies).
    prompt_cache: Option<crate::mock_openai::PromptCache>,
    /// Report each Anthropic answer's `usage.input_tokens` as the request's size
    /// (`mock_window::prompt_tokens`) instead of the scripted figure.
    bill_prompt_size: bool,
}

struct Inner {
    flavor: Flavor,
    dialect: Dialect,
    state: Mutex<MockState>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, MockState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The server behind both mocks: a FIFO of [`MockResponse`]s served on the
/// flavor's endpoint, on its own thread and tokio runtime. [`crate::MockOpenAi`]
/// and [`crate::MockAnthropic`] deref to it for the queue and the captured
/// requests.
pub struct MockServer {
    server: HttpThread,
    inner: Arc<Inner>,
}

impl MockServer {
    pub(crate) fn start(flavor: Flavor) -> anyhow::Result<MockServer> {
        Self::start_as(flavor, Dialect::OpenAi)
    }

    /// Starts a mock of `flavor` that plays the server `dialect` (its endpoint and rules).
    pub(crate) fn start_as(flavor: Flavor, dialect: Dialect) -> anyhow::Result<MockServer> {
        let inner = Arc::new(Inner {
            flavor,
            dialect,
            state: Mutex::default(),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&inner));
        let server = HttpThread::start(flavor.name(), app)?;
        Ok(MockServer { server, inner })
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The server this mock plays.
    pub fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// Queues an arbitrary [`MockResponse`] (extra headers, delay, cut /
    /// slow / in-stream-error delivery).
    pub fn push_response(&self, response: MockResponse) {
        self.inner.lock().queue.push_back(response);
    }

    /// Queues a 200 answer with `body`.
    pub fn push(&self, body: Value) {
        self.push_response(MockResponse::ok(body));
    }

    /// Queues an error answer with `status` and `body`.
    pub fn push_error(&self, status: u16, body: Value) {
        self.push_response(MockResponse::error(status, body));
    }

    /// From now on, successful answers report usage as OpenAI's automatic prompt caching
    /// would for each request (see `mock_openai::PromptCache`; OpenAI flavor only).
    pub fn enable_prompt_caching(&self) {
        self.inner.lock().prompt_cache = Some(Default::default());
    }

    /// From now on, successful Anthropic answers report the request's size as their
    /// `usage.input_tokens` (~4 bytes of the request JSON a token), so a client's context
    /// estimate follows what it sends.
    pub fn bill_prompt_size(&self) {
        self.inner.lock().bill_prompt_size = true;
    }

    /// The usage objects sent since [`MockServer::enable_prompt_caching`], in order.
    pub fn reported_usage(&self) -> Vec<Value> {
        self.inner
            .lock()
            .prompt_cache
            .as_ref()
            .map(|c| c.reported())
            .unwrap_or_default()
    }

    /// Number of scripted answers not yet consumed.
    pub fn pending(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// Answers endpoint requests that find the queue empty with `responder(request)` (None:
    /// the usual "queue empty" error). Lets many concurrent runs each get the answer their
    /// conversation calls for, which one FIFO cannot do.
    pub fn set_responder(&self, responder: Responder) {
        self.inner.lock().responder = Some(responder);
    }

    /// Refuses endpoint requests that break `check` as well as `mock_checks.rs`'s rules (400
    /// with the reasons, kept as violations): a server's own rules (e.g. the OpenAI quirks
    /// mode, [`crate::MockOpenAi::start_quirks`]).
    pub(crate) fn set_check(&self, check: Check) {
        self.inner.lock().check = Some(check);
    }

    /// Stops keeping the requests received (only their count): for benchmarks that send
    /// thousands of requests.
    pub fn count_requests_only(&self) {
        let mut st = self.inner.lock();
        st.count_only = true;
        st.requests.clear();
    }

    /// Drops all scripted answers not yet consumed.
    pub fn clear_queue(&self) {
        self.inner.lock().queue.clear();
    }

    /// All requests received so far, in arrival order.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.inner.lock().requests.clone()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        let st = self.inner.lock();
        if st.count_only {
            st.count
        } else {
            st.requests.len()
        }
    }

    /// The requests so far that a real API would refuse or that leaked the API key (see
    /// `mock_checks.rs`), one line each; each was answered 400 with the reason. A mock
    /// dropped with violations panics (failing the test) unless they were taken with
    /// [`MockServer::take_violations`].
    pub fn violations(&self) -> Vec<String> {
        self.inner.lock().violations.clone()
    }

    /// Returns and forgets the violations so far: for a test that sends a bad request on
    /// purpose.
    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.inner.lock().violations)
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
                    "{} got {} request(s), expected at least {n} within {timeout:?}",
                    self.inner.flavor.name(),
                    reqs.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.server.stop();
        let violations = self.take_violations();
        if !violations.is_empty() && !thread::panicking() {
            panic!(
                "{} got requests the real API would refuse:\n{}",
                self.inner.flavor.name(),
                violations.join("\n")
            );
        }
    }
}

async fn handle(State(inner): State<Arc<Inner>>, req: Request) -> Response {
    let received_at = Instant::now();
    let flavor = inner.flavor;
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let headers = header_map(req.headers());
    let bytes = match to_bytes(req.into_body(), 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &flavor.bad_request_body(inner.dialect, &format!("mock: cannot read body: {e}")),
            );
        }
    };
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    let dialect = inner.dialect;
    let is_endpoint = method == Method::POST && path == flavor.endpoint(dialect);
    let mut broken = if is_endpoint {
        let mut broken = crate::mock_checks::violations(flavor, dialect, &headers, &bytes, &body);
        let check = inner.lock().check.clone();
        broken.extend(check.map(|c| c(&body)).unwrap_or_default());
        broken
    } else {
        Vec::new()
    };

    let captured = CapturedRequest {
        method: method.to_string(),
        path: path.clone(),
        headers,
        body,
        received_at,
    };
    let wants_stream = captured.is_stream();
    let request_body = captured.body.clone();
    let scripted = {
        let mut st = inner.lock();
        st.count += 1;
        let number = st.count;
        if is_endpoint && flavor == Flavor::Responses {
            broken.extend(crate::mock_responses::violations(
                &captured.body,
                &st.issued,
            ));
        }
        for reason in &broken {
            eprintln!("{}: request #{number} refused: {reason}", flavor.name());
            st.violations.push(format!("request #{number}: {reason}"));
        }
        let mut scripted = if !is_endpoint || !broken.is_empty() {
            None
        } else if let Some(next) = st.queue.pop_front() {
            Some(next)
        } else {
            st.responder.clone().and_then(|r| r(&captured))
        };
        if let Some(reply) = &scripted
            && flavor == Flavor::Responses
        {
            crate::mock_responses::issue(&reply.body, &mut st.issued);
        }
        if let (Some(resp), Some(cache), Flavor::OpenAi) =
            (scripted.as_mut(), st.prompt_cache.as_mut(), flavor)
            && (200..300).contains(&resp.status)
            && resp.body.get("choices").is_some()
        {
            cache.bill(&request_body, &mut resp.body);
        }
        if let (Some(resp), true, Flavor::Anthropic) =
            (scripted.as_mut(), st.bill_prompt_size, flavor)
            && (200..300).contains(&resp.status)
            && resp.body.get("usage").is_some()
        {
            resp.body["usage"]["input_tokens"] =
                serde_json::json!(crate::mock_window::prompt_tokens(flavor, &request_body));
        }
        if !st.count_only {
            st.requests.push(captured);
        }
        scripted
    };

    if !is_endpoint {
        return json_response(
            StatusCode::NOT_FOUND,
            &flavor.not_found_body(dialect, &method, &path),
        );
    }
    if !broken.is_empty() {
        let reason = format!(
            "mock: the real API would refuse this: {}",
            broken.join("; ")
        );
        return json_response(
            StatusCode::BAD_REQUEST,
            &flavor.bad_request_body(dialect, &reason),
        );
    }
    let Some(resp) = scripted else {
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, &flavor.exhausted_body());
    };
    if !resp.delay.is_zero() {
        tokio::time::sleep(resp.delay).await;
    }
    let mut response = respond(flavor, &resp, wants_stream, &request_body).await;
    for (name, value) in &resp.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

async fn respond(
    flavor: Flavor,
    resp: &MockResponse,
    wants_stream: bool,
    request: &Value,
) -> Response {
    let status = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let stream = wants_stream && status.is_success() && flavor.is_streamable(&resp.body);
    match (&resp.mode, stream) {
        (ResponseMode::Complete, true) => {
            let t = flavor.transcript(&resp.body, request);
            sse_response(status, None, t.records, false)
        }
        (ResponseMode::Complete, false) => json_response(status, &resp.body),
        (ResponseMode::Cut, true) => {
            let mut t = flavor.transcript(&resp.body, request);
            t.records.truncate(t.cut_at);
            sse_response(status, None, t.records, true)
        }
        (ResponseMode::Cut, false) => {
            let text = resp.body.to_string();
            let half = text.len() / 2;
            let cut = (0..=half)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            let total = text.len();
            let mut response = streamed_response(status, None, vec![text[..cut].to_owned()], true);
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(total));
            response
        }
        (ResponseMode::Slow { total }, true) => {
            let t = flavor.transcript(&resp.body, request);
            sse_response(status, Some(*total), t.records, false)
        }
        (ResponseMode::Paced { total }, true) => {
            let t = flavor.transcript(&resp.body, request);
            paced_sse_response(status, *total, t.records)
        }
        (ResponseMode::Slow { total } | ResponseMode::Paced { total }, false) => {
            tokio::time::sleep(*total).await;
            json_response(status, &resp.body)
        }
        (ResponseMode::StreamError { error }, true) => {
            let mut t = flavor.transcript(&resp.body, request);
            t.records.truncate(t.cut_at);
            t.records.push(flavor.error_record(error));
            sse_response(status, None, t.records, false)
        }
        (ResponseMode::StreamError { error }, false) => {
            json_response(status_for_error(error), error)
        }
    }
}

/// 529 for overloaded errors, 429 for rate limits, else 500.
fn status_for_error(error: &Value) -> StatusCode {
    let kind = error
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let code = error
        .pointer("/error/code")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind == "overloaded_error" {
        StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
    } else if kind == "rate_limit_error" || code == "rate_limit_exceeded" {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn sse_response(
    status: StatusCode,
    keepalive: Option<Duration>,
    records: Vec<String>,
    abort: bool,
) -> Response {
    event_stream(streamed_response(status, keepalive, records, abort))
}

/// `response` as an event stream (its content type and no caching).
fn event_stream(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// An event stream whose `records` are written one by one, evenly over `total`.
fn paced_sse_response(status: StatusCode, total: Duration, records: Vec<String>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        let start = Instant::now();
        let n = records.len().max(1) as u32;
        for (i, record) in records.into_iter().enumerate() {
            tokio::time::sleep_until((start + total * i as u32 / n).into()).await;
            if tx.send(Ok(Bytes::from(record))).await.is_err() {
                return; // client went away
            }
        }
    });
    event_stream(
        Response::builder()
            .status(status)
            .body(Body::from_stream(ReceiverStream::new(rx)))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
    )
}

/// A response whose body is written piece by piece by a task: first
/// keep-alive comments for `keepalive` (if any), then `parts`, then — if
/// `abort` — an error that makes hyper drop the connection without a clean
/// end of body (no terminating chunk).
fn streamed_response(
    status: StatusCode,
    keepalive: Option<Duration>,
    parts: Vec<String>,
    abort: bool,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        if let Some(total) = keepalive {
            let end = Instant::now() + total;
            loop {
                if tx
                    .send(Ok(Bytes::from_static(KEEPALIVE_RECORD.as_bytes())))
                    .await
                    .is_err()
                {
                    return; // client went away
                }
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(KEEPALIVE_INTERVAL)).await;
            }
        }
        for part in parts {
            if tx.send(Ok(Bytes::from(part))).await.is_err() {
                return;
            }
        }
        if abort {
            // Let hyper flush what was sent before tearing the connection down.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = tx
                .send(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "mock: connection cut",
                )))
                .await;
        }
    });
    Response::builder()
        .status(status)
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
