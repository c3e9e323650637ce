//! The `anthropic` provider: the Messages API (`POST {base_url}/v1/messages`).
//!
//! Streams by default (`"stream": true`), assembling the message from the content-block
//! events. Baton's conversation becomes strictly alternating user/assistant messages: tool
//! results travel as `tool_result` blocks of a user message, merged with any user text that
//! follows them. The HTTP client never retries on its own: every failure is classified
//! ([`LlmError`]) and Temporal's retry policy decides.

//!
//! - [`request`]: baton's request as a Messages body.
//! - [`cache`]: prompt-caching breakpoints (`cache_control`) and their TTL.
//! - [`thinking`]: extended thinking: the request parameter, thinking blocks sent back.
//! - [`response`]: a whole message or its event stream as baton's response.
//! - Sending, stream reading and the end-of-stream rule: `llm/transport.rs`.

pub mod cache;
mod request;
mod response;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cache;
#[cfg(test)]
mod tests_thinking;
pub mod thinking;

use std::time::Duration;

use baton_proto::{LlmRequest, ModelConfig};
use reqwest::RequestBuilder;
use serde_json::Value;

pub use request::request_body_for;
pub use response::parse_response;

use thinking::ThinkingRules;

use super::{
    LlmError,
    transport::{HttpProvider, StreamEnd, WireFormat},
};

/// Default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// Default `anthropic-version` header.
pub const DEFAULT_VERSION: &str = "2023-06-01";
/// Model used when the run names none.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
/// `max_tokens` when the run sets none (the API requires it).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// The provider's name in `ModelConfig.provider`.
pub const PROVIDER: &str = "anthropic";

/// A configured Messages API endpoint.
pub type Anthropic = HttpProvider<Messages>;

impl Anthropic {
    /// A streaming provider talking to `base_url` (e.g. `https://api.anthropic.com`), sending
    /// `version` as `anthropic-version` and the key (when set) as `x-api-key`.
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        version: impl Into<String>,
        request_timeout: Duration,
    ) -> Result<Self, LlmError> {
        let version = version.into();
        let wire = Messages {
            version: if version.is_empty() {
                DEFAULT_VERSION.to_owned()
            } else {
                version
            },
            rules: ThinkingRules::default(),
            betas: Vec::new(),
        };
        Self::with_wire(wire, base_url, "/v1/messages", api_key, request_timeout)
    }
}

impl Anthropic {
    /// More model-name prefixes that take adaptive thinking (worker setting `[anthropic]
    /// adaptive_thinking_models`; [`thinking::ADAPTIVE_THINKING_MODELS`] always do).
    pub fn adaptive_thinking_models(mut self, prefixes: Vec<String>) -> Self {
        self.wire_mut().rules.adaptive = prefixes;
        self
    }

    /// `anthropic-beta` values sent with every request (worker setting `[anthropic]
    /// betas`), beside the ones a request needs (interleaved thinking).
    pub fn betas(mut self, betas: Vec<String>) -> Self {
        self.wire_mut().betas = betas;
        self
    }
}

/// The Messages wire format: the key as `x-api-key`, the API version as
/// `anthropic-version`, betas as one `anthropic-beta` (comma-separated).
#[derive(Clone, Debug)]
pub struct Messages {
    version: String,
    rules: ThinkingRules,
    betas: Vec<String>,
}

impl Messages {
    fn options(&self, request: &LlmRequest) -> Result<request::Options, LlmError> {
        request::Options::of(
            request.model.as_ref().unwrap_or(&ModelConfig::default()),
            &self.rules,
        )
    }
}

impl WireFormat for Messages {
    const PROVIDER: &'static str = PROVIDER;
    /// A Messages stream's documented event flow always ends with `message_stop`, after the
    /// `message_delta` that carries the `stop_reason` and the final usage; a body that ends,
    /// or breaks, before it is cut, whatever came first.
    const END: StreamEnd = StreamEnd::TerminalEvent;
    type Response = response::StreamState;

    /// The caching TTL and the thinking budget ([`request::Options::of`]), refused before
    /// anything is sent.
    fn check(&self, request: &LlmRequest) -> Result<(), LlmError> {
        self.options(request).map(drop)
    }

    /// The body; [`check`](WireFormat::check) has refused a config the options cannot take,
    /// so the fallback (no caching, thinking off) is never sent.
    fn body(&self, request: &LlmRequest, stream: bool) -> Value {
        match self.options(request) {
            Ok(options) => request::body_with(request, stream, &options),
            Err(_) => request::body_with(request, stream, &request::Options::fallback()),
        }
    }

    fn headers(
        &self,
        http: RequestBuilder,
        api_key: Option<&str>,
        request: &LlmRequest,
    ) -> RequestBuilder {
        let mut http = http.header("anthropic-version", &self.version);
        let needed = self.options(request).ok().and_then(|o| o.thinking.beta);
        let betas: Vec<&str> = self
            .betas
            .iter()
            .map(String::as_str)
            .chain(needed)
            .filter(|b| !b.trim().is_empty())
            .collect();
        if !betas.is_empty() {
            http = http.header("anthropic-beta", betas.join(","));
        }
        match api_key {
            Some(key) => http.header("x-api-key", key),
            None => http,
        }
    }
}
