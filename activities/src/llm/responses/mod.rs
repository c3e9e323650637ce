//! The `openai-responses` provider: OpenAI's Responses API (`POST {base_url}/responses`).
//!
//! Stateless (`"store": false`): every request carries the whole conversation as `input`
//! items, and asks for the model's reasoning back encrypted (`include:
//! ["reasoning.encrypted_content"]`). Each `reasoning` output item is kept on the assistant
//! message as a [`ReasoningPart`](baton_proto::ReasoningPart) (the item's JSON as it arrived)
//! and sent back unchanged, at its place, in the next request: reasoning survives tool loops
//! without OpenAI storing anything. Streams by default, assembling the message from the
//! `response.*` events; the `response.completed` / `response.incomplete` /
//! `response.failed` event ends a stream. The HTTP client never retries on its own: every
//! failure is classified ([`LlmError`]) and Temporal's retry policy decides.
//!
//! - [`request`]: baton's request as a Responses body (and the checks it must pass first).
//! - [`response`]: a whole `response` object or its event stream as baton's response.
//! - Sending, stream reading and the end-of-stream rule: `llm/transport.rs`.

mod request;
mod response;
#[cfg(test)]
mod tests;

use std::time::Duration;

use baton_proto::LlmRequest;
use serde_json::Value;

pub use request::{REASONING_EFFORTS, check_request, request_body_for};
pub use response::parse_response;

use super::{
    LlmError,
    transport::{HttpProvider, StreamEnd, WireFormat},
};

/// Default base URL (the same host and key as the `openai` provider).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Model used when the run names none.
pub const DEFAULT_MODEL: &str = "gpt-5-mini";
/// The provider's name in `ModelConfig.provider`.
pub const PROVIDER: &str = "openai-responses";
/// `ReasoningPart.kind` of an encrypted reasoning item.
pub const REASONING_KIND: &str = "reasoning";
/// `ReasoningPart.kind` of an output `message` item kept beside reasoning items, so the
/// items replay in their order (several message items are one text in baton's message).
pub const MESSAGE_KIND: &str = "message";

/// A configured Responses API endpoint.
pub type OpenAiResponses = HttpProvider<Responses>;

impl OpenAiResponses {
    /// A streaming provider talking to `base_url` (e.g. `https://api.openai.com/v1`), sending
    /// the key (when set) as a bearer token.
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        request_timeout: Duration,
    ) -> Result<Self, LlmError> {
        Self::with_wire(
            Responses::default(),
            base_url,
            "/responses",
            api_key,
            request_timeout,
        )
    }

    /// Whether to send the run's `prompt_cache_key` (default true; worker
    /// `[openai_responses] prompt_cache_key`).
    pub fn prompt_cache_key(mut self, send: bool) -> Self {
        self.wire_mut().prompt_cache_key = send;
        self
    }
}

/// The Responses wire format: the key as a bearer token; whether `prompt_cache_key` is sent.
#[derive(Clone, Copy, Debug)]
pub struct Responses {
    prompt_cache_key: bool,
}

impl Default for Responses {
    fn default() -> Self {
        Self {
            prompt_cache_key: true,
        }
    }
}

impl WireFormat for Responses {
    const PROVIDER: &'static str = PROVIDER;
    /// A Responses stream always ends with one of its terminal events
    /// (`response.completed`, `response.incomplete`, `response.failed`), which carry the
    /// status and the usage; a body that ends, or breaks, before one is cut.
    const END: StreamEnd = StreamEnd::TerminalEvent;
    type Response = response::StreamState;

    /// A `reasoning_effort` the API does not take is refused before anything is sent.
    fn check(&self, request: &LlmRequest) -> Result<(), LlmError> {
        check_request(request)
    }

    fn body(&self, request: &LlmRequest, stream: bool) -> Value {
        let mut body = request_body_for(request, stream);
        if !self.prompt_cache_key
            && let Some(fields) = body.as_object_mut()
        {
            fields.remove("prompt_cache_key");
        }
        body
    }
}
