//! The [`Provider`] trait every model backend implements, and what the HTTP ones share.

use std::{future::Future, pin::Pin, time::Duration};

use baton_proto::{FinishReason, LlmRequest, LlmResponse};

use super::LlmError;

/// The future of one model call.
pub type GenerateFuture<'a> =
    Pin<Box<dyn Future<Output = Result<LlmResponse, LlmError>> + Send + 'a>>;

/// A model backend. Object-safe: [`Providers`](super::Providers) holds them as
/// `Box<dyn Provider>` and dispatches on `request.model.provider`.
///
/// A provider makes exactly one attempt: it never retries on its own; every failure is an
/// [`LlmError`] whose class decides whether Temporal retries the activity.
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The name runs select it by (`ModelConfig.provider`).
    fn name(&self) -> &'static str;

    /// One model call (for a streaming provider: the whole stream, consumed).
    fn generate<'a>(&'a self, request: &'a LlmRequest) -> GenerateFuture<'a>;
}

/// The HTTP client of a provider: bounded connect and total time (a streamed answer
/// included), no retries (reqwest never retries on its own), and no redirects, so a key sent
/// as a custom header (`x-api-key`) cannot follow a redirect to another host; a 3xx is
/// classified like any other non-2xx answer.
pub fn http_client(request_timeout: Duration) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(request_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))
}

/// Whether a 2xx response is an event stream (a server may ignore `"stream": true` and answer
/// with one JSON body instead).
pub fn is_event_stream(response: &reqwest::Response) -> bool {
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

/// The finish reason when the provider gave none: tool calls if there are any, else stop.
pub fn default_finish(has_tool_calls: bool) -> FinishReason {
    if has_tool_calls {
        FinishReason::ToolCalls
    } else {
        FinishReason::Stop
    }
}
