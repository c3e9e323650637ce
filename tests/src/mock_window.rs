//! Prompts within what the model takes, checked by every mock the way the
//! real APIs check them, with the prompt's size counted as the mocks bill it: a token is ~4
//! bytes of the request JSON ([`prompt_tokens`]).
//!
//! * **OpenAI's gpt-5 family caps prompts below its window**: the window is 400K tokens of
//!   prompt and output together, but a prompt over 272K is `400 Input tokens exceed the
//!   configured limit of 272,000 tokens. Your messages resulted in N tokens. Please reduce the
//!   length of the messages.` (the models page lists 400K context / 128K output; the refusal
//!   is quoted in the OpenAI community thread "Huge GPT-5 documentation gap" and openai/codex
//!   pins these models to 272,000 input tokens). gpt-5-pro's 272K output leaves 128K by the
//!   same rule. Both APIs (Chat Completions, Responses).
//! * **Anthropic counts the prompt plus `max_tokens` against the window**: `400 input length
//!   and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or
//!   `max_tokens` and try again` (Messages API, quoted in docker/docker-agent#569 and
//!   Aider-AI/aider#3618; the models overview gives every Claude model a 200K window), and a
//!   prompt over the window alone is `400 prompt is too long: N tokens > 200000 maximum`.

use serde_json::Value;

use crate::mock_http::Flavor;

/// The prompt of `body` in tokens as the mocks count and bill them: the bytes of its tools,
/// system prompt and messages (or Responses `instructions` and `input`) as JSON, over 4.
pub(crate) fn prompt_tokens(flavor: Flavor, body: &Value) -> u64 {
    let fields: &[&str] = match flavor {
        Flavor::OpenAi => &["tools", "messages"],
        Flavor::Anthropic => &["tools", "system", "messages"],
        Flavor::Responses => &["tools", "instructions", "input"],
    };
    let bytes: usize = fields
        .iter()
        .filter_map(|f| body.get(*f))
        .map(|v| v.to_string().len())
        .sum();
    (bytes as u64).div_ceil(4).max(1)
}

/// Input caps of OpenAI models, by name prefix (the longest match wins).
const OPENAI_INPUT_CAPS: &[(&str, u64)] = &[("gpt-5", 272_000), ("gpt-5-pro", 128_000)];

/// The window of every Claude model the tests use.
const ANTHROPIC_WINDOW: u64 = 200_000;

/// `272000` as OpenAI writes it: `272,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What `body` breaks of the rules above for a mock of `flavor`.
pub(crate) fn window(flavor: Flavor, body: &Value, found: &mut Vec<String>) {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let model = model.rsplit('/').next().unwrap_or(model);
    let tokens = prompt_tokens(flavor, body);
    match flavor {
        Flavor::OpenAi | Flavor::Responses => {
            let cap = OPENAI_INPUT_CAPS
                .iter()
                .filter(|(prefix, _)| model.starts_with(prefix))
                .max_by_key(|(prefix, _)| prefix.len())
                .map(|(_, cap)| *cap);
            if let Some(cap) = cap
                && tokens > cap
            {
                found.push(format!(
                    "Input tokens exceed the configured limit of {} tokens. Your messages \
                     resulted in {tokens} tokens. Please reduce the length of the messages.",
                    thousands(cap)
                ));
            }
        }
        Flavor::Anthropic => {
            if !model.starts_with("claude-") {
                return;
            }
            let max_tokens = body.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
            if tokens > ANTHROPIC_WINDOW {
                found.push(format!(
                    "prompt is too long: {tokens} tokens > {ANTHROPIC_WINDOW} maximum"
                ));
            } else if tokens + max_tokens > ANTHROPIC_WINDOW {
                found.push(format!(
                    "input length and `max_tokens` exceed context limit: {tokens} + \
                     {max_tokens} > {ANTHROPIC_WINDOW}, decrease input length or `max_tokens` \
                     and try again"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(flavor: Flavor, body: &Value) -> Vec<String> {
        let mut found = Vec::new();
        window(flavor, body, &mut found);
        found
    }

    /// A body whose prompt is about `tokens` tokens (4 bytes each).
    fn sized(field: &str, tokens: usize, extra: Value) -> Value {
        let mut body = extra;
        body[field] = json!([{"role": "user", "content": "x".repeat(tokens * 4)}]);
        body
    }

    #[test]
    fn gpt_5_prompts_over_272k_are_refused_on_both_apis() {
        let over = sized("messages", 272_100, json!({"model": "gpt-5"}));
        let found = check(Flavor::OpenAi, &over);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("Input tokens exceed the configured limit of 272,000 tokens."),
            "{found:?}"
        );
        let over = sized("input", 272_100, json!({"model": "openai/gpt-5.1-codex"}));
        assert_eq!(check(Flavor::Responses, &over).len(), 1);
        // Under the cap, another model or gpt-5-pro's own cap.
        let under = sized("messages", 271_000, json!({"model": "gpt-5"}));
        assert!(check(Flavor::OpenAi, &under).is_empty());
        let other = sized("messages", 300_000, json!({"model": "gpt-4.1"}));
        assert!(check(Flavor::OpenAi, &other).is_empty());
        let pro = sized("messages", 130_000, json!({"model": "gpt-5-pro"}));
        assert!(check(Flavor::OpenAi, &pro)[0].contains("limit of 128,000 tokens"));
    }

    #[test]
    fn anthropic_counts_max_tokens_against_the_window() {
        let body = sized(
            "messages",
            170_000,
            json!({"model": "claude-sonnet-4-5", "max_tokens": 32_000}),
        );
        let found = check(Flavor::Anthropic, &body);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("input length and `max_tokens` exceed context limit: 1700"),
            "{found:?}"
        );
        let fits = sized(
            "messages",
            160_000,
            json!({"model": "claude-sonnet-4-5", "max_tokens": 32_000}),
        );
        assert!(check(Flavor::Anthropic, &fits).is_empty());
        let too_long = sized(
            "messages",
            200_100,
            json!({"model": "claude-sonnet-4-5", "max_tokens": 1}),
        );
        assert!(check(Flavor::Anthropic, &too_long)[0].starts_with("prompt is too long"));
    }

    #[test]
    fn thousands_are_grouped_as_openai_writes_them() {
        assert_eq!(thousands(272_000), "272,000");
        assert_eq!(thousands(1_048_576), "1,048,576");
        assert_eq!(thousands(999), "999");
    }
}
