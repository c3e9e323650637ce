//! The HTTP transport the streaming providers share: one POST to the provider, its answer
//! classified ([`LlmError`]), and the body read whole or as an event stream until the wire
//! format's end-of-stream rule ([`StreamEnd`]) says the message is complete.
//!
//! A provider is an [`HttpProvider`] of its wire format ([`WireFormat`]): the request body
//! and headers it sends, its answer parser (a whole JSON body or a stream,
//! [`ResponseParser`]) and its end-of-stream rule. The transport never retries: every failure
//! is an [`LlmError`] whose class decides whether Temporal retries the activity.

use std::time::Duration;

use baton_proto::{LlmRequest, LlmResponse};

use super::{
    LlmError,
    error::classify_http,
    live::{Live, LiveSink},
    provider::{GenerateFuture, Provider},
    sse::{EventStream, SseEvent},
};

/// Whether a stream goes on after an event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read the next event.
    Continue,
    /// The wire format's terminal event: the message is complete.
    Done,
}

/// When a stream counts as complete: at its terminal event ([`Flow::Done`]) always; what the
/// end (or a break) of the body before it means differs between the wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// Only the terminal event completes the stream; a body that ends before it is cut.
    TerminalEvent,
    /// The terminal event, or the end (or a break) of the body once a finish reason came.
    TerminalOrFinishReason,
}

/// Reads a provider's answer: a whole JSON body ([`parse_body`](Self::parse_body)), or a
/// stream whose events it assembles into a message.
pub(crate) trait ResponseParser: Default + Send {
    /// Parses a whole (non-streaming) JSON body.
    fn parse_body(body: &str) -> Result<LlmResponse, LlmError>;

    /// Reads one event: [`Flow::Done`] at the wire format's terminal event; an in-stream error
    /// event is classified like an HTTP error.
    fn on_event(&mut self, event: &SseEvent) -> Result<Flow, LlmError>;

    /// Whether the provider has sent its finish (stop) reason.
    fn has_finish_reason(&self) -> bool;

    /// What the stream has received so far, for watchers.
    fn live(&self) -> &Live;

    /// The message assembled so far.
    fn into_response(self) -> LlmResponse;
}

/// An HTTP provider's wire format: what [`HttpProvider`] needs to make one call.
pub(crate) trait WireFormat: Send + Sync + std::fmt::Debug {
    /// The provider's name (`ModelConfig.provider`, and in errors).
    const PROVIDER: &'static str;
    /// The end-of-stream rule of this wire format.
    const END: StreamEnd;
    /// The answer's parser.
    type Response: ResponseParser;

    /// Refuses a request this wire format cannot send (a setting it does not take, or one
    /// the provider would refuse: a [`LlmError::Config`]), before anything is sent;
    /// [`body`](Self::body) cannot fail. Accepts everything by default.
    fn check(&self, _request: &LlmRequest) -> Result<(), LlmError> {
        Ok(())
    }

    /// The JSON request body, asking for a stream or not.
    fn body(&self, request: &LlmRequest, stream: bool) -> serde_json::Value;

    /// Adds the provider's headers to a request for `request`: the key, when one is set, and
    /// any the API requires. By default the key as a bearer token (OpenAI's APIs).
    fn headers(
        &self,
        http: reqwest::RequestBuilder,
        api_key: Option<&str>,
        _request: &LlmRequest,
    ) -> reqwest::RequestBuilder {
        match api_key {
            Some(key) => http.bearer_auth(key),
            None => http,
        }
    }
}

/// A model provider over HTTP speaking wire format `W` (e.g.
/// [`OpenAi`](super::openai::OpenAi), [`Anthropic`](super::anthropic::Anthropic)): its
/// endpoint, key, whether to stream, and the HTTP client. `Debug` never prints the key.
#[derive(Clone)]
pub struct HttpProvider<W> {
    url: String,
    api_key: Option<String>,
    stream: bool,
    /// The longest wait for the next event of a stream.
    stream_idle: Duration,
    http: reqwest::Client,
    wire: W,
}

impl<W: std::fmt::Debug> std::fmt::Debug for HttpProvider<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProvider")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("stream", &self.stream)
            .field("stream_idle", &self.stream_idle)
            .field("wire", &self.wire)
            .finish()
    }
}

impl<W> HttpProvider<W> {
    /// A streaming provider calling `path` under `base_url` (a trailing `/` is dropped); an
    /// empty key is none.
    pub(crate) fn with_wire(
        wire: W,
        base_url: impl Into<String>,
        path: &str,
        api_key: Option<String>,
        request_timeout: Duration,
    ) -> Result<Self, LlmError> {
        Ok(Self {
            url: format!("{}{path}", base_url.into().trim_end_matches('/')),
            api_key: api_key.filter(|k| !k.is_empty()),
            stream: true,
            stream_idle: crate::llm::retry::DEFAULT_STREAM_IDLE,
            http: http_client(request_timeout)?,
            wire,
        })
    }

    /// Whether to stream (the default) or ask for one JSON body.
    pub fn streaming(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// The longest wait for the next event of a stream (default
    /// [`crate::llm::retry::DEFAULT_STREAM_IDLE`]): a stream silent that long is cut (a
    /// retryable transport error), however long the request may take in all.
    pub fn stream_idle_timeout(mut self, idle: Duration) -> Self {
        self.stream_idle = idle;
        self
    }

    /// The wire format, to configure it.
    pub(crate) fn wire_mut(&mut self) -> &mut W {
        &mut self.wire
    }

    /// The endpoint this provider calls.
    pub fn url(&self) -> String {
        self.url.clone()
    }
}

impl<W: WireFormat> Provider for HttpProvider<W> {
    fn name(&self) -> &'static str {
        W::PROVIDER
    }

    fn generate<'a>(&'a self, request: &'a LlmRequest) -> GenerateFuture<'a> {
        Box::pin(call(self, request, None))
    }

    fn generate_live<'a>(
        &'a self,
        request: &'a LlmRequest,
        live: &'a LiveSink,
    ) -> GenerateFuture<'a> {
        Box::pin(call(self, request, Some(live)))
    }
}

/// One call: POSTs the body and reads the answer. A non-2xx status is classified with its
/// headers (`Retry-After`) and body; a 2xx event stream (when streaming) is read to its end;
/// any other 2xx body is parsed whole. A stream's progress goes to `live` after each event.
async fn call<W: WireFormat>(
    provider: &HttpProvider<W>,
    request: &LlmRequest,
    live: Option<&LiveSink>,
) -> Result<LlmResponse, LlmError> {
    let url = provider.url.as_str();
    provider.wire.check(request)?;
    let http = provider
        .http
        .post(url)
        .json(&provider.wire.body(request, provider.stream));
    let http = provider
        .wire
        .headers(http, provider.api_key.as_deref(), request);
    let transport = |e: reqwest::Error| LlmError::transport(W::PROVIDER, url, &e);
    let response = http.send().await.map_err(transport)?;
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let text = response.text().await.map_err(transport)?;
        return Err(classify_http(W::PROVIDER, status.as_u16(), &headers, &text));
    }
    if provider.stream && is_event_stream(&response) {
        return read_stream::<W>(response, url, live, provider.stream_idle).await;
    }
    let text = response.text().await.map_err(transport)?;
    W::Response::parse_body(&text)
}

/// Consumes an event stream under the wire format's end-of-stream rule; a stream that ends or
/// breaks before it is complete, or sends nothing (not even a keep-alive comment) for `idle`,
/// is a cut stream (a retryable transport error).
async fn read_stream<W: WireFormat>(
    response: reqwest::Response,
    url: &str,
    live: Option<&LiveSink>,
    idle: Duration,
) -> Result<LlmResponse, LlmError> {
    let mut events = EventStream::new(Box::pin(response.bytes_stream()));
    let mut state = W::Response::default();
    loop {
        // Waiting is cancel-safe (a chunk read is kept by the parser); bytes that arrived
        // without making an event (keep-alive comments) count as life.
        let mut seen = events.bytes_read();
        let next = loop {
            match tokio::time::timeout(idle, events.next_event()).await {
                Ok(next) => break Some(next),
                Err(_) if events.bytes_read() > seen => seen = events.bytes_read(),
                Err(_) => break None,
            }
        };
        let Some(next) = next else {
            return Err(LlmError::Transport {
                provider: W::PROVIDER.to_owned(),
                url: url.to_owned(),
                message: format!(
                    "the stream sent nothing for {} s after {} bytes (stream idle timeout, \
                     worker setting stream_idle_secs)",
                    idle.as_secs(),
                    events.bytes_read()
                ),
            });
        };
        let cause = match next {
            Ok(Some(event)) => {
                let flow = state.on_event(&event)?;
                if let Some(live) = live {
                    live.publish(state.live());
                }
                match flow {
                    Flow::Done => break,
                    Flow::Continue => continue,
                }
            }
            Ok(None) => None,
            Err(e) => Some(e),
        };
        if W::END == StreamEnd::TerminalOrFinishReason && state.has_finish_reason() {
            if let Some(e) = cause {
                tracing::debug!(provider = W::PROVIDER, cause = %e, "stream broke after its finish reason; keeping the message");
            }
            break;
        }
        return Err(LlmError::cut_stream(
            W::PROVIDER,
            url,
            events.bytes_read(),
            cause.as_ref(),
        ));
    }
    Ok(state.into_response())
}

/// The HTTP client of a provider: bounded connect and total time (a streamed answer
/// included), no retries (reqwest never retries on its own), and no redirects, so a key sent
/// as a custom header (`x-api-key`) cannot follow a redirect to another host; a 3xx is
/// classified like any other non-2xx answer.
fn http_client(request_timeout: Duration) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(request_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))
}

/// Whether a 2xx response is an event stream (a server may ignore `"stream": true` and answer
/// with one JSON body instead).
fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}
