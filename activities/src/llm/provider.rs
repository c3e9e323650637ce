//! The [`Provider`] trait every model backend implements.

use std::{future::Future, pin::Pin};

use baton_proto::{AssistantMessage, FinishReason, LlmRequest, LlmResponse, ToolCall, Usage};

use super::{LlmError, live::LiveSink};

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

    /// One model call that publishes what its stream has received so far to `live` (for
    /// `baton watch`). By default [`generate`](Self::generate), publishing nothing.
    fn generate_live<'a>(
        &'a self,
        request: &'a LlmRequest,
        live: &'a LiveSink,
    ) -> GenerateFuture<'a> {
        let _ = live;
        self.generate(request)
    }
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
            ..Default::default()
        }),
        usage,
        ..Default::default()
    }
}

/// A tool call's stored arguments as a JSON object, or `None` when the model produced
/// something that is not one (invalid JSON, or JSON that is not an object). The workflow
/// answered such a call with an error observation ("not valid JSON", the call did not run),
/// so the assistant turn is replayed with `{}` instead: servers reject the raw text (vLLM
/// with a 400, Anthropic for a `tool_use.input` that is not an object).
fn arguments_object(arguments: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// A tool call's arguments as an object to send back (Anthropic `tool_use.input`): the parsed
/// object, or `{}` (see [`arguments_object`]).
pub(crate) fn replayed_arguments(arguments: &str) -> serde_json::Value {
    serde_json::Value::Object(arguments_object(arguments).unwrap_or_default())
}

/// A tool call's arguments as JSON text to send back (Chat Completions
/// `function.arguments`): the stored text unchanged when it is an object (byte-stable
/// across turns), else `{}` (see [`arguments_object`]).
pub(crate) fn replayed_arguments_text(arguments: &str) -> &str {
    if arguments_object(arguments).is_some() {
        arguments
    } else {
        "{}"
    }
}

/// The reasoning parts of `message` that `provider` produced, in order: the only ones it may
/// be sent back. Parts of another provider (a run that switched provider) are dropped; the
/// text and tool calls of the message still go.
pub(crate) fn reasoning_parts_for<'a>(
    provider: &'a str,
    message: &'a baton_proto::AssistantMessage,
) -> impl Iterator<Item = &'a baton_proto::ReasoningPart> + 'a {
    message
        .reasoning_parts
        .iter()
        .filter(move |p| p.provider == provider && !p.data.is_empty())
}

/// A tool's JSON Schema as a value for a request body; a schema that is not valid JSON (a
/// catalog bug) becomes the empty object schema rather than failing every call.
pub(crate) fn tool_schema(tool: &baton_proto::ToolDefinition) -> serde_json::Value {
    serde_json::from_str(&tool.parameters).unwrap_or_else(|_| serde_json::json!({"type": "object"}))
}

/// The `reasoning_effort` values OpenAI's APIs take (`ModelConfig.reasoning_effort`), for
/// Chat Completions and Responses alike.
pub const REASONING_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

/// Why OpenAI's `model` refuses `effort` although the API lists it, by the
/// models' documented support: gpt-5.1 and later take `none` but no longer `minimal`; gpt-5
/// (and its mini, nano, codex and pro) takes `minimal` but not `none`, nor `xhigh` (added
/// with gpt-5.1-codex-max). `None`: sent as is (a model this does not know decides).
pub(crate) fn effort_refused_by(model: &str, effort: &str) -> Option<String> {
    let name = model.rsplit('/').next().unwrap_or(model);
    // `gpt-5.<minor>`, any minor version (gpt-5.1, gpt-5.1-codex, gpt-5.2, ...).
    let gpt_5_1_or_later = name
        .strip_prefix("gpt-5.")
        .is_some_and(|minor| minor.starts_with(|c: char| c.is_ascii_digit()));
    let gpt_5 = !gpt_5_1_or_later && (name == "gpt-5" || name.starts_with("gpt-5-"));
    let takes = if gpt_5_1_or_later && effort == "minimal" {
        "none, low, medium, high"
    } else if gpt_5 && (effort == "none" || effort == "xhigh") {
        "minimal, low, medium, high"
    } else {
        return None;
    };
    Some(format!(
        "{name} does not take reasoning effort '{effort}' (it takes {takes}): pick one of \
         those with submit --reasoning-effort, or leave it unset for the model's default"
    ))
}
