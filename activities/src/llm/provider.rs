//! The [`Provider`] trait every model backend implements.

use std::{future::Future, pin::Pin};

use baton_proto::{AssistantMessage, FinishReason, LlmRequest, LlmResponse, ToolCall, Usage};

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

/// The finish reason when the provider gave none: tool calls if there are any, else stop.
pub fn default_finish(has_tool_calls: bool) -> FinishReason {
    if has_tool_calls {
        FinishReason::ToolCalls
    } else {
        FinishReason::Stop
    }
}

/// Baton's response for a provider's answer: the assistant message and, when the provider
/// reported it, the usage.
pub(crate) fn assistant_response(
    text: String,
    reasoning: String,
    tool_calls: Vec<ToolCall>,
    finish: FinishReason,
    usage: Option<Usage>,
) -> LlmResponse {
    LlmResponse {
        message: Some(AssistantMessage {
            text,
            tool_calls,
            finish_reason: finish as i32,
            reasoning,
        }),
        usage,
        ..Default::default()
    }
}
