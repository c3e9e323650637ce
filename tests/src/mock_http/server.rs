//! The mock server: its state, the request handler (checks, capture, scripted answers).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::bail;
use axum::Router;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::header::{HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

use crate::http_thread::{HttpThread, header_map};

use super::*;

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
