//! The cost acceptance table: for fixed usage as each provider reports it
//! (cache writes, cache reads, reasoning tokens), parsed by that provider's wire format and
//! priced by the model table, `cost_usd` equals the dollars computed by hand from the
//! published prices (OpenAI platform pricing, Anthropic "Pricing", Google Gemini API pricing,
//! DeepSeek "Models & Pricing"; the shipped rows' dates are in `models.rs`).

use std::collections::BTreeMap;

use baton_proto::ModelConfig;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{ModelSettings, ModelTable, anthropic, openai, responses};

/// Whole millionths of a dollar (finer than the cent the acceptance asks for).
fn micro(usd: f64) -> i64 {
    (usd * 1e6).round() as i64
}

fn chat(model: &str, usage: Value) -> String {
    json!({"id": "c", "object": "chat.completion", "model": model, "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": usage})
    .to_string()
}

fn table() -> ModelTable {
    // Models the shipped table does not carry, priced as their providers publish them.
    let priced = |input, cached, output| ModelSettings {
        input_usd_per_mtok: Some(input),
        cached_input_usd_per_mtok: Some(cached),
        cache_write_usd_per_mtok: Some(input),
        output_usd_per_mtok: Some(output),
        ..Default::default()
    };
    let settings = BTreeMap::from([
        // Gemini 2.5 Flash: $0.30 input, $0.03 cached, $2.50 output (thinking included).
        ("gemini-2.5-flash".to_owned(), priced(0.30, 0.03, 2.50)),
        // DeepSeek V3.2 (deepseek-chat): $0.28 cache miss, $0.028 cache hit, $0.42 output.
        ("deepseek-chat".to_owned(), priced(0.28, 0.028, 0.42)),
    ]);
    ModelTable::defaults().with_settings(&settings).unwrap()
}

#[test]
fn cost_usd_equals_the_published_prices_for_each_providers_usage() {
    let t = table();
    let rows: Vec<(&str, &str, &str, String, f64)> = vec![
        // gpt-4.1 $2 / $0.50 cached / $8: 60k plain + 40k cached in, 20k out.
        (
            "openai",
            "gpt-4.1",
            "",
            chat(
                "gpt-4.1",
                json!({"prompt_tokens": 100_000, "completion_tokens": 20_000,
                "total_tokens": 120_000, "prompt_tokens_details": {"cached_tokens": 40_000}}),
            ),
            0.12 + 0.02 + 0.16,
        ),
        // gpt-5-mini $0.25 / $0.025 / $2: reasoning bills as output (inside completion).
        (
            "openai",
            "gpt-5-mini",
            "",
            chat(
                "gpt-5-mini",
                json!({"prompt_tokens": 200_000, "completion_tokens": 50_000,
                "total_tokens": 250_000, "prompt_tokens_details": {"cached_tokens": 100_000},
                "completion_tokens_details": {"reasoning_tokens": 40_000}}),
            ),
            0.025 + 0.0025 + 0.10,
        ),
        // gpt-5.1-codex-mini is its own row ($0.25 / $2), not gpt-5.1-codex ($1.25 / $10).
        (
            "openai",
            "gpt-5.1-codex-mini",
            "",
            chat(
                "gpt-5.1-codex-mini",
                json!({"prompt_tokens": 100_000, "completion_tokens": 10_000,
                "total_tokens": 110_000}),
            ),
            0.025 + 0.02,
        ),
        // Gemini: completion_tokens leaves out 40k thinking tokens that total_tokens counts.
        (
            "openai",
            "gemini-2.5-flash",
            "",
            chat(
                "gemini-2.5-flash",
                json!({"prompt_tokens": 100_000, "completion_tokens": 10_000,
                "total_tokens": 150_000, "completion_tokens_details": {"reasoning_tokens": 40_000}}),
            ),
            0.03 + 0.125,
        ),
        // DeepSeek: cache hits as prompt_cache_hit_tokens.
        (
            "openai",
            "deepseek-chat",
            "",
            chat(
                "deepseek-chat",
                json!({"prompt_tokens": 100_000, "completion_tokens": 10_000,
                "total_tokens": 110_000, "prompt_cache_hit_tokens": 60_000,
                "prompt_cache_miss_tokens": 40_000}),
            ),
            0.0112 + 0.00168 + 0.0042,
        ),
        // Responses gpt-5 $1.25 / $0.125 / $10: 200k plain + 800k cached in, 100k out.
        (
            "openai-responses",
            "gpt-5",
            "",
            json!({"id": "r", "object": "response", "status": "completed", "model": "gpt-5",
                "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
                "usage": {"input_tokens": 1_000_000, "output_tokens": 100_000,
                    "total_tokens": 1_100_000, "input_tokens_details": {"cached_tokens": 800_000},
                    "output_tokens_details": {"reasoning_tokens": 60_000}}})
            .to_string(),
            0.25 + 0.10 + 1.00,
        ),
    ];
    // Anthropic claude-sonnet-4-5: $3 input, $0.30 read, $3.75 5-minute write ($6 1-hour),
    // $15 output; `input_tokens` excludes the cache.
    let message = json!({"id": "msg", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 10_000,
        "cache_creation_input_tokens": 100_000, "cache_read_input_tokens": 200_000,
        "output_tokens": 5_000}})
    .to_string();
    let anthropic_rows = [
        ("5m", 0.03 + 0.06 + 0.375 + 0.075),
        ("1h", 0.03 + 0.06 + 0.60 + 0.075),
    ];
    let mut all = rows;
    for (ttl, usd) in anthropic_rows {
        all.push(("anthropic", "claude-sonnet-4-5", ttl, message.clone(), usd));
    }
    for (provider, model, ttl, body, expected) in all {
        let mut response = match provider {
            "openai" => openai::parse_response(&body),
            "openai-responses" => responses::parse_response(&body),
            _ => anthropic::parse_response(&body),
        }
        .unwrap();
        let config = ModelConfig {
            provider: provider.into(),
            model: model.into(),
            cache_ttl: ttl.into(),
            ..Default::default()
        };
        t.annotate(Some(&config), &mut response);
        let cost = response.usage.unwrap().cost_usd;
        assert_eq!(micro(cost), micro(expected), "{provider} {model} {ttl}");
    }
}

#[test]
fn newer_models_never_take_a_familys_price() {
    let t = ModelTable::defaults();
    // claude-opus-4-6 ($5 / $25) is not claude-opus-4 ($15 / $75): unknown price, not 3x.
    assert_eq!(t.lookup("claude-opus-4-6"), None);
    assert_eq!(t.lookup("claude-opus-4-7"), None);
    let mini = t.lookup("gpt-5.1-codex-mini").unwrap();
    assert_eq!(
        (mini.input_usd_per_mtok, mini.output_usd_per_mtok),
        (0.25, 2.0)
    );
    // Snapshots still resolve to their model.
    assert!(t.lookup("claude-opus-4-20250514").is_some());
    assert!(t.lookup("gpt-4o-2024-08-06").is_some());
    assert!(t.lookup("claude-3-7-sonnet-latest").is_some());
    assert_eq!(t.lookup("gpt-4o-mini-search-preview"), None);
}
