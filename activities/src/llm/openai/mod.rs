//! The `openai` provider: Chat Completions (`POST {base_url}/chat/completions`) against any
//! OpenAI-compatible server (OpenAI, Azure, OpenRouter, vLLM, Ollama, llama.cpp).
//!
//! Streams by default (`"stream": true` with `stream_options.include_usage`), assembling the
//! message from the deltas; a server that answers a streaming request with a plain JSON body is
//! read as a non-streaming answer. The HTTP client never retries on its own: every failure is
//! classified ([`LlmError`]) and Temporal's retry policy decides.

//!
//! - [`request`]: baton's request as a Chat Completions body (`prompt_cache_key`,
//!   `reasoning_effort`, reasoning state sent back).
//! - [`response`]: a whole body or a chunk stream as baton's response.
//! - Sending, stream reading and the end-of-stream rule: `llm/transport.rs`.

mod request;
mod response;

use std::time::Duration;

use baton_proto::LlmRequest;
use serde_json::Value;

pub use request::{
    DEFAULT_REASONING_MODELS, KIND_EXTRA_CONTENT, KIND_REASONING_CONTENT, REASONING_EFFORTS,
    ToolCallContent, default_reasoning_models, default_tool_call_content, is_reasoning_model,
    reasoning_effort, request_body, request_body_for, request_body_with,
};
pub use response::parse_response;

use super::{
    LlmError,
    error::classify_http,
    transport::{HttpProvider, StreamEnd, WireFormat},
};

/// Default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Model used when the run names none.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The provider's name in `ModelConfig.provider`.
pub const PROVIDER: &str = "openai";

/// A configured OpenAI-compatible endpoint.
pub type OpenAi = HttpProvider<ChatCompletions>;

impl OpenAi {
    /// A streaming provider talking to `base_url` (e.g. `https://api.openai.com/v1`).
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        request_timeout: Duration,
    ) -> Result<Self, LlmError> {
        Self::with_wire(
            ChatCompletions::default(),
            base_url,
            "/chat/completions",
            api_key,
            request_timeout,
        )
    }

    /// The model-name prefixes of reasoning models (default [`DEFAULT_REASONING_MODELS`]):
    /// they get `max_completion_tokens` instead of `max_tokens`, and no `temperature`.
    pub fn reasoning_models(mut self, prefixes: Vec<String>) -> Self {
        self.wire_mut().reasoning_models = prefixes;
        self
    }

    /// Whether to send the run's `prompt_cache_key` (default true): OpenAI routes requests
    /// with the same key to the same prompt cache; some OpenAI-compatible servers reject
    /// fields they do not know, so a worker can turn it off (`[openai] prompt_cache_key`).
    pub fn prompt_cache_key(mut self, send: bool) -> Self {
        self.wire_mut().prompt_cache_key = send;
        self
    }

    /// What a text-less assistant message with tool calls carries as `content` (default
    /// `null`; `""` for Ollama, which refuses `null`).
    pub fn tool_call_content(mut self, content: ToolCallContent) -> Self {
        self.wire_mut().tool_call_content = content;
        self
    }
}

/// The Chat Completions wire format: the key as a bearer token; the reasoning models' names;
/// whether `prompt_cache_key` is sent; the content of a text-less tool-call message.
#[derive(Clone, Debug)]
pub struct ChatCompletions {
    reasoning_models: Vec<String>,
    prompt_cache_key: bool,
    tool_call_content: ToolCallContent,
}

impl Default for ChatCompletions {
    fn default() -> Self {
        Self {
            reasoning_models: default_reasoning_models(),
            prompt_cache_key: true,
            tool_call_content: ToolCallContent::Null,
        }
    }
}

impl WireFormat for ChatCompletions {
    const PROVIDER: &'static str = PROVIDER;
    /// A Chat Completions stream ends with `data: [DONE]`, a sentinel outside the chunk
    /// schema; the chunk carrying `finish_reason` is the message's last (only the usage chunk
    /// may follow). The format has many server implementations, so baton does not insist on
    /// the sentinel: a body that ends, or breaks, after a finish reason is complete too.
    const END: StreamEnd = StreamEnd::TerminalOrFinishReason;
    type Response = response::StreamState;

    /// A `reasoning_effort` Chat Completions does not take is a configuration error.
    fn check(&self, request: &LlmRequest) -> Result<(), LlmError> {
        request
            .model
            .as_ref()
            .map_or(Ok(None), reasoning_effort)
            .map(|_| ())
    }

    fn body(&self, request: &LlmRequest, stream: bool) -> Value {
        let options = request::BodyOptions {
            reasoning_models: &self.reasoning_models,
            prompt_cache_key: self.prompt_cache_key,
            tool_call_content: self.tool_call_content,
        };
        request::build_body(request, stream, &options)
    }
}

/// Classifies a non-2xx answer.
pub fn classify(status: u16, headers: &reqwest::header::HeaderMap, body: &str) -> LlmError {
    classify_http(PROVIDER, status, headers, body)
}

#[cfg(test)]
mod compat_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wire_tests;
