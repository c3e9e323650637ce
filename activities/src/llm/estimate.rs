//! Usage a server did not report: some OpenAI-compatible servers send no
//! `usage` (llama.cpp's streams without `stream_options.include_usage`, proxies that drop
//! it, a stream cut after its finish reason). Counting such a call as 0 tokens would let
//! `--max-tokens` and `--max-cost` fail open, so its tokens are estimated from the text
//! (about [`BYTES_PER_TOKEN`] bytes a token, as baton's compaction estimate counts) and the
//! usage says so: `Usage.estimated_calls` is 1, which the run's total adds up and the result
//! shows.

use baton_proto::{LlmRequest, LlmResponse, Usage, item};

/// Bytes of text per token in an estimate (English prose and code run 3.5 to 4.5 bytes a
/// token in the OpenAI and Anthropic tokenizers).
pub const BYTES_PER_TOKEN: usize = 4;

/// Whether `usage` carries no count at all (absent, or every token count 0).
fn unreported(usage: Option<&Usage>) -> bool {
    usage.is_none_or(|u| u.input_tokens == 0 && u.output_tokens == 0 && u.total_tokens == 0)
}

fn tokens(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(BYTES_PER_TOKEN)).unwrap_or(u32::MAX)
}

/// Bytes of what `request` shows the model: system prompt, tool schemas, every item's text,
/// tool-call arguments and tool results.
fn prompt_bytes(request: &LlmRequest) -> usize {
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.len())
        .sum();
    let items: usize = request
        .conversation
        .iter()
        .map(|entry| match &entry.kind {
            Some(item::Kind::User(u)) => u.text.len(),
            Some(item::Kind::Assistant(a)) => {
                a.text.len()
                    + a.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Some(item::Kind::ToolResult(r)) => r.content.len(),
            Some(item::Kind::Stub(_)) | None => 0,
        })
        .sum();
    request.system_prompt.len() + tools + items
}

/// Fills in `response.usage` when the server reported none: input from the request's text,
/// output from the reply's text and tool calls, `estimated_calls: 1`. A reported usage is
/// left as it is.
pub fn fill_unreported_usage(request: &LlmRequest, response: &mut LlmResponse) {
    if !unreported(response.usage.as_ref()) {
        return;
    }
    let output_bytes = response.message.as_ref().map_or(0, |m| {
        m.text.len()
            + m.tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum::<usize>()
    });
    let input_tokens = tokens(prompt_bytes(request)).max(1);
    let output_tokens = tokens(output_bytes).max(1);
    let kept = response.usage.take().unwrap_or_default();
    response.usage = Some(Usage {
        input_tokens,
        output_tokens,
        total_tokens: input_tokens.saturating_add(output_tokens),
        estimated_calls: 1,
        ..kept
    });
}

/// The usage of two calls made for one answer (a call asked again with a larger
/// `max_tokens`): every count added, so budgets and the bill see both.
pub(crate) fn sum_usage(first: Option<Usage>, second: Option<Usage>) -> Usage {
    let (a, b) = (first.unwrap_or_default(), second.unwrap_or_default());
    Usage {
        input_tokens: a.input_tokens.saturating_add(b.input_tokens),
        output_tokens: a.output_tokens.saturating_add(b.output_tokens),
        total_tokens: a.total_tokens.saturating_add(b.total_tokens),
        llm_calls: a.llm_calls.saturating_add(b.llm_calls),
        cache_read_tokens: a.cache_read_tokens.saturating_add(b.cache_read_tokens),
        cache_write_tokens: a.cache_write_tokens.saturating_add(b.cache_write_tokens),
        reasoning_tokens: a.reasoning_tokens.saturating_add(b.reasoning_tokens),
        cost_usd: a.cost_usd + b.cost_usd,
        estimated_calls: a.estimated_calls.saturating_add(b.estimated_calls),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::test_items::*;
    use baton_proto::AssistantMessage;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_reply_without_usage_is_estimated_from_the_text_and_marked() {
        let request = LlmRequest {
            system_prompt: "s".repeat(400),
            conversation: vec![user(&"u".repeat(400))],
            ..Default::default()
        };
        let mut response = LlmResponse {
            message: Some(AssistantMessage {
                text: "a".repeat(80),
                ..Default::default()
            }),
            ..Default::default()
        };
        fill_unreported_usage(&request, &mut response);
        let u = response.usage.unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.total_tokens,
                u.estimated_calls
            ),
            (200, 20, 220, 1)
        );
        // All zeros is no report either (llama.cpp-style servers send zeros).
        let mut zeros = LlmResponse {
            usage: Some(Usage::default()),
            ..response.clone()
        };
        fill_unreported_usage(&request, &mut zeros);
        assert_eq!(zeros.usage.unwrap().estimated_calls, 1);
        // A reported usage stays.
        let mut reported = LlmResponse {
            usage: Some(usage(7, 3, 0, 0)),
            ..response
        };
        fill_unreported_usage(&request, &mut reported);
        let u = reported.usage.unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.estimated_calls),
            (7, 3, 0)
        );
    }
}
