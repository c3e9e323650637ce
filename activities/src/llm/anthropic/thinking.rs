//! Extended thinking: the `thinking` request parameter and its `max_tokens` rule, and the
//! thinking blocks (`thinking` with its `signature`, `redacted_thinking` with its `data`) kept
//! as [`ReasoningPart`]s and sent back unchanged, at their positions, in later requests (the
//! API requires the last assistant turn with `tool_use` to start with its thinking block).

use baton_proto::{AssistantMessage, ModelConfig, ReasoningPart};
use serde_json::{Value, json};

use super::{DEFAULT_MAX_TOKENS, PROVIDER};
use crate::llm::{LlmError, provider::reasoning_parts_for};

/// The smallest `budget_tokens` the API accepts.
pub const MIN_BUDGET_TOKENS: u32 = 1024;

/// The beta that lets Claude 4 models think between tool calls with budgeted thinking
/// (docs.claude.com, extended thinking, "Interleaved thinking"); adaptive thinking
/// interleaves without it.
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";

/// Models that take adaptive thinking (`{"type":"adaptive"}`), by name prefix: Claude Opus
/// 4.7 takes nothing else ("Manual extended thinking (thinking.type: "enabled" with
/// budget_tokens) is not supported on these models and will return a 400 error"), and on
/// Opus 4.6 / Sonnet 4.6 `budget_tokens` is deprecated (Anthropic's adaptive thinking page;
/// AWS Bedrock "Adaptive thinking"). Older models take only budgeted thinking.
pub const ADAPTIVE_THINKING_MODELS: &[&str] = &[
    "claude-opus-4-6",
    "claude-sonnet-4-6",
    "claude-opus-4-7",
    "claude-mythos",
];

/// The efforts adaptive thinking takes (`output_config.effort`).
pub const ADAPTIVE_EFFORTS: &[&str] = &["low", "medium", "high", "max"];

/// Which thinking shape each model takes: [`ADAPTIVE_THINKING_MODELS`] plus the worker's
/// `[anthropic] adaptive_thinking_models`.
#[derive(Debug, Clone, Default)]
pub struct ThinkingRules {
    /// More model-name prefixes that take adaptive thinking.
    pub adaptive: Vec<String>,
}

impl ThinkingRules {
    /// Whether `model` takes adaptive thinking.
    pub fn is_adaptive(&self, model: &str) -> bool {
        ADAPTIVE_THINKING_MODELS
            .iter()
            .copied()
            .chain(self.adaptive.iter().map(String::as_str))
            .any(|prefix| model.starts_with(prefix))
    }
}

/// `max_tokens` and the `thinking` parameter of a request.
pub struct Thinking {
    /// `max_tokens` to send.
    pub max_tokens: u32,
    /// `{"type":"enabled","budget_tokens":N}` or `{"type":"adaptive"}`, or `None` when
    /// thinking is off.
    pub param: Option<Value>,
    /// `output_config.effort` of adaptive thinking (the run's `reasoning_effort`).
    pub effort: Option<String>,
    /// The `anthropic-beta` the request needs: interleaved thinking for budgeted thinking on
    /// a Claude 4 model.
    pub beta: Option<&'static str>,
}

/// Whether `model` is a Claude 4 model (interleaved thinking needs its beta with a budget).
fn is_claude_4(model: &str) -> bool {
    ["claude-opus-4", "claude-sonnet-4", "claude-haiku-4"]
        .iter()
        .any(|p| model.starts_with(p))
}

/// [`thinking_with`] under the shipped rules (`max_tokens` is the same under any rules).
pub fn thinking_for(model: &ModelConfig) -> Result<Thinking, LlmError> {
    thinking_with(model, &ThinkingRules::default())
}

/// `max_tokens` and `thinking` for `model`, checked. With thinking off, `max_tokens` is
/// `max_output_tokens` or [`DEFAULT_MAX_TOKENS`]. With `thinking_budget_tokens` > 0,
/// `max_tokens` must exceed the budget (the budget is part of it): an unset
/// `max_output_tokens` becomes budget + [`DEFAULT_MAX_TOKENS`], so the answer after the thinking
/// still has the default room; one set explicitly at or under the budget, or a budget under
/// [`MIN_BUDGET_TOKENS`], is a [`LlmError::Config`]. A model that takes adaptive thinking
/// ([`ThinkingRules::is_adaptive`]) gets `{"type":"adaptive"}` instead (the budget then
/// only turns thinking on and sizes `max_tokens`), with the run's `reasoning_effort` as its
/// effort; budgeted thinking on a Claude 4 model asks for interleaved thinking.
pub fn thinking_with(model: &ModelConfig, rules: &ThinkingRules) -> Result<Thinking, LlmError> {
    let budget = model.thinking_budget_tokens;
    if budget == 0 {
        let max_tokens = match model.max_output_tokens {
            0 => DEFAULT_MAX_TOKENS,
            n => n,
        };
        return Ok(Thinking {
            max_tokens,
            param: None,
            effort: None,
            beta: None,
        });
    }
    if rules.is_adaptive(&model.model) {
        let effort = model.reasoning_effort.trim();
        if !effort.is_empty() && !ADAPTIVE_EFFORTS.contains(&effort) {
            return Err(LlmError::Config(format!(
                "reasoning effort '{effort}' is not one adaptive thinking takes on {}: use one \
                 of {}, or leave it unset for the model's default (high)",
                model.model,
                ADAPTIVE_EFFORTS.join(", ")
            )));
        }
        let max_tokens = match model.max_output_tokens {
            0 => budget.saturating_add(DEFAULT_MAX_TOKENS),
            n => n,
        };
        return Ok(Thinking {
            max_tokens,
            param: Some(json!({"type": "adaptive"})),
            effort: (!effort.is_empty()).then(|| effort.to_owned()),
            beta: None,
        });
    }
    if budget < MIN_BUDGET_TOKENS {
        return Err(LlmError::Config(format!(
            "thinking_budget_tokens {budget} is under the {MIN_BUDGET_TOKENS} the anthropic API \
             accepts: raise it to at least {MIN_BUDGET_TOKENS}, or set 0 to turn thinking off"
        )));
    }
    let max_tokens = match model.max_output_tokens {
        0 => budget.saturating_add(DEFAULT_MAX_TOKENS),
        n if n > budget => n,
        n => {
            return Err(LlmError::Config(format!(
                "max_output_tokens {n} must be greater than thinking_budget_tokens {budget} \
                 (the thinking budget is part of max_tokens): raise max_output_tokens, lower the \
                 budget, or leave max_output_tokens unset ({budget} + {DEFAULT_MAX_TOKENS})"
            )));
        }
    };
    Ok(Thinking {
        max_tokens,
        param: Some(json!({"type": "enabled", "budget_tokens": budget})),
        effort: None,
        beta: is_claude_4(&model.model).then_some(INTERLEAVED_THINKING_BETA),
    })
}

/// Whether the assistant turn a request continues starts with a thinking block, as the API
/// requires with thinking on ("a final assistant message must start with a thinking block
/// (preceding the lastmost set of tool_use and tool_result blocks)"; refused with `Expected
/// thinking or redacted_thinking, but found text`). The turn starts after the last user
/// message that is not only tool results; a request that ends with such a message
/// continues no turn. After a compaction, or a turn whose first call did not think, the
/// first kept assistant message may have no thinking block: that request goes without
/// thinking.
pub fn turn_starts_with_thinking(messages: &[Value]) -> bool {
    let is_turn_start = |m: &Value| {
        m["role"] == "user"
            && match &m["content"] {
                Value::Array(blocks) => blocks.iter().any(|b| b["type"] != "tool_result"),
                _ => true,
            }
    };
    let start = messages
        .iter()
        .rposition(is_turn_start)
        .map_or(0, |i| i + 1);
    match messages[start..].iter().find(|m| m["role"] == "assistant") {
        None => true,
        Some(first) => matches!(
            first["content"][0]["type"].as_str(),
            Some("thinking" | "redacted_thinking")
        ),
    }
}

/// The content blocks of an assistant message as sent back: `others` (text, then the
/// `tool_use` blocks) with this provider's thinking blocks inserted at their positions, each
/// the block exactly as it was received (parsed from `data`; a part whose `data` is not JSON
/// is dropped with a warning: the API would refuse it).
pub fn with_thinking_blocks(message: &AssistantMessage, others: Vec<Value>) -> Vec<Value> {
    let mut parts: Vec<&ReasoningPart> = reasoning_parts_for(PROVIDER, message).collect();
    if parts.is_empty() {
        return others;
    }
    parts.sort_by_key(|p| p.position);
    let mut blocks = Vec::with_capacity(others.len() + parts.len());
    let mut parts = parts.into_iter().peekable();
    for (i, block) in others.into_iter().enumerate() {
        while let Some(part) = parts.next_if(|p| p.position as usize <= i) {
            push_part(&mut blocks, part);
        }
        blocks.push(block);
    }
    parts.for_each(|p| push_part(&mut blocks, p));
    blocks
}

fn push_part(blocks: &mut Vec<Value>, part: &ReasoningPart) {
    match serde_json::from_str::<Value>(&part.data) {
        Ok(block) => blocks.push(block),
        Err(e) => tracing::warn!(
            kind = %part.kind,
            cause = %e,
            "dropping a stored anthropic thinking block that is not JSON"
        ),
    }
}

/// A thinking block being streamed.
#[derive(Default)]
pub(super) struct StreamedThinking {
    /// `true` for `redacted_thinking`.
    pub(super) redacted: bool,
    pub(super) thinking: String,
    pub(super) signature: String,
    /// `data` of a `redacted_thinking` block.
    pub(super) data: String,
}

impl StreamedThinking {
    /// The `content_block_start` block of a thinking or redacted thinking block.
    pub(super) fn start(block: &Value) -> Self {
        let field = |name: &str| {
            block
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Self {
            redacted: block.get("type").and_then(Value::as_str) == Some("redacted_thinking"),
            thinking: field("thinking"),
            signature: field("signature"),
            data: field("data"),
        }
    }

    /// The whole block, in the documented key order of a non-streamed message.
    pub(super) fn into_part(self, position: u32) -> (ReasoningPart, String) {
        let text = |s: &str| Value::String(s.to_owned()).to_string();
        let (kind, data) = if self.redacted {
            (
                "redacted_thinking",
                format!(
                    r#"{{"type":"redacted_thinking","data":{}}}"#,
                    text(&self.data)
                ),
            )
        } else {
            (
                "thinking",
                format!(
                    r#"{{"type":"thinking","thinking":{},"signature":{}}}"#,
                    text(&self.thinking),
                    text(&self.signature)
                ),
            )
        };
        (part(kind, data, position), self.thinking)
    }
}

/// A [`ReasoningPart`] of this provider.
pub(super) fn part(kind: &str, data: String, position: u32) -> ReasoningPart {
    ReasoningPart {
        provider: PROVIDER.to_owned(),
        kind: kind.to_owned(),
        data,
        position,
        ..Default::default()
    }
}
