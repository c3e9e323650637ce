//! The model table: what the worker knows of each model — its context window, its output
//! limit and its prices — so a run without `--context-window` compacts against the real
//! window and every call's usage gets an estimated cost.
//!
//! [`ModelTable::defaults`] ships the figures below; worker settings (`[models."<name>"]`,
//! [`ModelSettings`]) override single fields of a known model or add models. A model is found
//! by its exact name, then by a known name it extends with a snapshot suffix only: a date
//! (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`) or `-latest`. Any other suffix names
//! another model (`claude-opus-4-6` is not `claude-opus-4`, `gpt-5.1-codex-mini` is not
//! `gpt-5.1-codex`: other prices), which the table does not know: its cost is 0 ("unknown
//! price") until `[models."<name>"]` gives it.
//!
//! Cost of one call ([`ModelInfo::cost_usd`]), prices in USD per million tokens:
//! `(input - cache_read - cache_write) x input + cache_read x cached + cache_write x write +
//! output x output` (baton's `Usage.input_tokens` counts every prompt token, cache reads and
//! writes included; `output_tokens` includes reasoning, which bills as output).

use std::collections::BTreeMap;

use baton_proto::{LlmResponse, ModelConfig, Usage};
use serde::Deserialize;

/// What the worker knows of one model. Prices in USD per million tokens; 0 = unknown / free.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ModelInfo {
    /// Context window in tokens (prompt and output together); 0 = unknown.
    pub context_window: u32,
    /// Most output tokens one call may produce; 0 = unknown.
    pub max_output_tokens: u32,
    /// Most prompt tokens one request may carry, when the provider caps the input below the
    /// window (gpt-5: a 400K window, `Input tokens exceed the configured limit of 272,000
    /// tokens`); 0 = only the window limits it.
    pub max_input_tokens: u32,
    /// Uncached prompt tokens.
    pub input_usd_per_mtok: f64,
    /// Prompt tokens read from the provider's prompt cache.
    pub cached_input_usd_per_mtok: f64,
    /// Prompt tokens written to the prompt cache (Anthropic's 5-minute write price; OpenAI
    /// caches for free, so its models carry the plain input price here, never billed since
    /// OpenAI reports no cache writes).
    pub cache_write_usd_per_mtok: f64,
    /// Output tokens, reasoning included.
    pub output_usd_per_mtok: f64,
}

impl ModelInfo {
    /// The estimated cost of one call's `usage` under these prices.
    pub fn cost_usd(&self, usage: &Usage) -> f64 {
        let read = f64::from(usage.cache_read_tokens);
        let write = f64::from(usage.cache_write_tokens);
        let plain = f64::from(
            usage
                .input_tokens
                .saturating_sub(usage.cache_read_tokens)
                .saturating_sub(usage.cache_write_tokens),
        );
        let output = f64::from(usage.output_tokens);
        (plain * self.input_usd_per_mtok
            + read * self.cached_input_usd_per_mtok
            + write * self.cache_write_usd_per_mtok
            + output * self.output_usd_per_mtok)
            / 1_000_000.0
    }

    /// Whether this model has any price (a cost of 0 then means "free", not "unknown").
    pub fn is_priced(&self) -> bool {
        self.input_usd_per_mtok > 0.0 || self.output_usd_per_mtok > 0.0
    }

    fn overridden(mut self, with: &ModelSettings) -> Self {
        let set = |field: &mut f64, value: Option<f64>| {
            if let Some(v) = value {
                *field = v;
            }
        };
        if let Some(v) = with.context_window {
            self.context_window = v;
        }
        if let Some(v) = with.max_output_tokens {
            self.max_output_tokens = v;
        }
        if let Some(v) = with.max_input_tokens {
            self.max_input_tokens = v;
        }
        set(&mut self.input_usd_per_mtok, with.input_usd_per_mtok);
        set(
            &mut self.cached_input_usd_per_mtok,
            with.cached_input_usd_per_mtok,
        );
        set(
            &mut self.cache_write_usd_per_mtok,
            with.cache_write_usd_per_mtok,
        );
        set(&mut self.output_usd_per_mtok, with.output_usd_per_mtok);
        self
    }
}

/// One `[models."<name>"]` table of the worker settings: every field optional; an unset one
/// keeps the shipped figure of the model the name resolves to (exact, then longest prefix),
/// or 0 for a model the table does not know.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSettings {
    /// Context window in tokens.
    pub context_window: Option<u32>,
    /// Output limit in tokens.
    pub max_output_tokens: Option<u32>,
    /// Input cap in tokens, when the provider caps prompts below the window (0: none).
    pub max_input_tokens: Option<u32>,
    /// USD per million uncached prompt tokens.
    pub input_usd_per_mtok: Option<f64>,
    /// USD per million prompt tokens read from the cache.
    pub cached_input_usd_per_mtok: Option<f64>,
    /// USD per million prompt tokens written to the cache.
    pub cache_write_usd_per_mtok: Option<f64>,
    /// USD per million output tokens.
    pub output_usd_per_mtok: Option<f64>,
}

/// A `[models]` entry the worker refuses.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ModelTableError {
    /// A price that is negative or not a number.
    #[error(
        "[models.\"{model}\"] {field} = {value} is not a price; give USD per million tokens, 0 or more"
    )]
    BadPrice {
        /// The model's name.
        model: String,
        /// The field.
        field: &'static str,
        /// What it was set to.
        value: f64,
    },
    /// An empty model name.
    #[error("[models.\"\"] names no model; use the model's name as the provider knows it")]
    EmptyName,
}

/// The models a worker knows, by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelTable {
    by_name: BTreeMap<String, ModelInfo>,
}

/// One shipped row: name, context window, max output, input, cached input, cache write,
/// output (USD per million tokens).
type Row = (&'static str, u32, u32, f64, f64, f64, f64);

// Shipped defaults, as published on the providers' pricing and model pages (OpenAI
// platform.openai.com/docs/pricing + /docs/models, Anthropic docs.claude.com "Pricing" and
// "Models overview"), written down on 2026-12-01 from those pages as they stood in late 2025.
// Prices change and newer models appear: check them against the pages and override in
// `[models."<name>"]` (docs/src/operations/configuration.md). Uncertain: gpt-5-pro's output limit;
// OpenAI publishes no cache-write price (caching is automatic and free: the input price is
// used, never billed); the write price is Anthropic's 5-minute one, scaled for 1-hour
// writes by [`ONE_HOUR_WRITE_FACTOR`].
const SHIPPED: &[Row] = &[
    // OpenAI
    ("gpt-5", 400_000, 128_000, 1.25, 0.125, 1.25, 10.0),
    ("gpt-5-mini", 400_000, 128_000, 0.25, 0.025, 0.25, 2.0),
    ("gpt-5-nano", 400_000, 128_000, 0.05, 0.005, 0.05, 0.4),
    ("gpt-5-codex", 400_000, 128_000, 1.25, 0.125, 1.25, 10.0),
    ("gpt-5-pro", 400_000, 272_000, 15.0, 15.0, 15.0, 120.0),
    ("gpt-5.1", 400_000, 128_000, 1.25, 0.125, 1.25, 10.0),
    ("gpt-5.1-codex", 400_000, 128_000, 1.25, 0.125, 1.25, 10.0),
    // benbencodes/llm-prices (v0.1.41).
    (
        "gpt-5.1-codex-mini",
        400_000,
        128_000,
        0.25,
        0.025,
        0.25,
        2.0,
    ),
    ("gpt-4.1", 1_047_576, 32_768, 2.0, 0.5, 2.0, 8.0),
    ("gpt-4.1-mini", 1_047_576, 32_768, 0.4, 0.1, 0.4, 1.6),
    ("gpt-4.1-nano", 1_047_576, 32_768, 0.1, 0.025, 0.1, 0.4),
    ("gpt-4o", 128_000, 16_384, 2.5, 1.25, 2.5, 10.0),
    ("gpt-4o-mini", 128_000, 16_384, 0.15, 0.075, 0.15, 0.6),
    ("o1", 200_000, 100_000, 15.0, 7.5, 15.0, 60.0),
    ("o3", 200_000, 100_000, 2.0, 0.5, 2.0, 8.0),
    ("o3-mini", 200_000, 100_000, 1.1, 0.55, 1.1, 4.4),
    ("o3-pro", 200_000, 100_000, 20.0, 20.0, 20.0, 80.0),
    ("o4-mini", 200_000, 100_000, 1.1, 0.275, 1.1, 4.4),
    // Anthropic (cache write = the 5-minute price, 1.25x input; cache read 0.1x input)
    ("claude-opus-4-5", 200_000, 64_000, 5.0, 0.5, 6.25, 25.0),
    ("claude-opus-4-1", 200_000, 32_000, 15.0, 1.5, 18.75, 75.0),
    ("claude-opus-4", 200_000, 32_000, 15.0, 1.5, 18.75, 75.0),
    ("claude-sonnet-4-5", 200_000, 64_000, 3.0, 0.3, 3.75, 15.0),
    ("claude-sonnet-4", 200_000, 64_000, 3.0, 0.3, 3.75, 15.0),
    ("claude-haiku-4-5", 200_000, 64_000, 1.0, 0.1, 1.25, 5.0),
    ("claude-3-7-sonnet", 200_000, 64_000, 3.0, 0.3, 3.75, 15.0),
    ("claude-3-5-sonnet", 200_000, 8_192, 3.0, 0.3, 3.75, 15.0),
    ("claude-3-5-haiku", 200_000, 8_192, 0.8, 0.08, 1.0, 4.0),
    ("claude-3-haiku", 200_000, 4_096, 0.25, 0.03, 0.3, 1.25),
];

/// Prompt caps below the window. OpenAI's gpt-5 family takes 400K tokens of prompt and
/// output together but refuses prompts over 272K (`Input tokens exceed the configured limit
/// of 272,000 tokens`: the window minus the 128K output limit; openai/codex pins 272,000 for
/// these models); gpt-5-pro, with a 272K output limit, by the same rule 128K (not confirmed).
const INPUT_CAPS: &[(&str, u32)] = &[
    ("gpt-5", 272_000),
    ("gpt-5-mini", 272_000),
    ("gpt-5-nano", 272_000),
    ("gpt-5-codex", 272_000),
    ("gpt-5-pro", 128_000),
    ("gpt-5.1", 272_000),
    ("gpt-5.1-codex", 272_000),
    ("gpt-5.1-codex-mini", 272_000),
];

/// Whether `rest` (what follows a known model name) names a snapshot of that model, not
/// another model: `-YYYY-MM-DD` (OpenAI), `-YYYYMMDD` (Anthropic) or `-latest`.
fn is_snapshot_suffix(rest: &str) -> bool {
    let Some(rest) = rest.strip_prefix('-') else {
        return false;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let dashed = {
        let parts: Vec<&str> = rest.split('-').collect();
        parts.len() == 3 && digits(parts[0], 4) && digits(parts[1], 2) && digits(parts[2], 2)
    };
    rest == "latest" || digits(rest, 8) || dashed
}

/// Anthropic bills 1-hour cache writes at 2x the input price, 5-minute ones at 1.25x: the
/// table's write price is the 5-minute one, so a `1h` run's writes cost 2 / 1.25 times it.
pub const ONE_HOUR_WRITE_FACTOR: f64 = 2.0 / 1.25;

impl ModelTable {
    /// The shipped table (see the dated note on its figures in this module's source).
    pub fn defaults() -> Self {
        let by_name = SHIPPED
            .iter()
            .map(|&(name, window, max_out, input, cached, write, output)| {
                let max_input_tokens = INPUT_CAPS
                    .iter()
                    .find(|(capped, _)| *capped == name)
                    .map_or(0, |(_, cap)| *cap);
                let info = ModelInfo {
                    context_window: window,
                    max_output_tokens: max_out,
                    max_input_tokens,
                    input_usd_per_mtok: input,
                    cached_input_usd_per_mtok: cached,
                    cache_write_usd_per_mtok: write,
                    output_usd_per_mtok: output,
                };
                (name.to_owned(), info)
            })
            .collect();
        Self { by_name }
    }

    /// This table with the worker's `[models]` tables applied: a known name (or one that
    /// resolves to a known model by prefix) starts from that model's figures, a new one from
    /// zeros; the fields set replace them.
    pub fn with_settings(
        mut self,
        settings: &BTreeMap<String, ModelSettings>,
    ) -> Result<Self, ModelTableError> {
        for (name, with) in settings {
            if name.is_empty() {
                return Err(ModelTableError::EmptyName);
            }
            for (field, value) in [
                ("input_usd_per_mtok", with.input_usd_per_mtok),
                ("cached_input_usd_per_mtok", with.cached_input_usd_per_mtok),
                ("cache_write_usd_per_mtok", with.cache_write_usd_per_mtok),
                ("output_usd_per_mtok", with.output_usd_per_mtok),
            ] {
                if let Some(value) = value.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                    return Err(ModelTableError::BadPrice {
                        model: name.clone(),
                        field,
                        value,
                    });
                }
            }
            let base = self.lookup(name).unwrap_or_default();
            self.by_name.insert(name.clone(), base.overridden(with));
        }
        Ok(self)
    }

    /// The model `name` is: its own row, else the known name it extends with a snapshot
    /// suffix ([`is_snapshot_suffix`]: `gpt-4o-2024-08-06` -> `gpt-4o`,
    /// `claude-3-7-sonnet-latest` -> `claude-3-7-sonnet`; `claude-opus-4-6` is not
    /// `claude-opus-4`). `None` for a model the table does not know (its cost is then 0,
    /// "unknown price", and its window the run's own).
    pub fn lookup(&self, name: &str) -> Option<ModelInfo> {
        if let Some(info) = self.by_name.get(name) {
            return Some(*info);
        }
        self.by_name
            .iter()
            .filter(|(known, _)| {
                name.strip_prefix(known.as_str())
                    .is_some_and(is_snapshot_suffix)
            })
            .max_by_key(|(known, _)| known.len())
            .map(|(_, info)| *info)
    }

    /// Keeps an Anthropic request's `max_tokens` within the model's output limit:
    /// the API refuses more ("max_tokens: 8192 > 4096, which is the maximum allowed
    /// number of output tokens for claude-3-haiku-20240307"). An unset limit becomes what the
    /// provider would send (its default, budget + default with thinking) clamped to the
    /// table's `max_output_tokens`; a set one is clamped too. Nothing changes for a model the
    /// table does not know, or another provider (OpenAI's APIs take no limit as the model's
    /// own). The default is not raised to the model's limit: a larger `max_tokens` would count
    /// against Anthropic's window (prompt + `max_tokens`) before compaction starts.
    pub fn clamp_output_limit(&self, model: &mut ModelConfig) {
        if model.provider != crate::llm::anthropic::PROVIDER {
            return;
        }
        let Some(limit) = self
            .lookup(&model.model)
            .map(|m| m.max_output_tokens)
            .filter(|l| *l > 0)
        else {
            return;
        };
        let default = crate::llm::anthropic::DEFAULT_MAX_TOKENS;
        let wanted = match (model.max_output_tokens, model.thinking_budget_tokens) {
            (0, 0) => default,
            (0, budget) => budget.saturating_add(default),
            (n, _) => n,
        };
        if wanted > limit {
            model.max_output_tokens = limit;
        }
    }

    /// The most prompt tokens a request for `model` may carry (0 =
    /// unknown): the input cap if the provider has one, and never more than the window less
    /// the output the request reserves, since the APIs count prompt + requested output
    /// against the window (Anthropic: `input length and max_tokens exceed context limit:
    /// 178959 + 64000 > 200000`; Chat Completions: `you requested N tokens (A in the messages,
    /// B in the completion)`). The window is the run's `context_window` when it set one, else
    /// the table's; Anthropic always reserves the `max_tokens` it sends (a default when the
    /// run sets none), other providers only the run's `max_output_tokens`.
    pub fn prompt_capacity(&self, model: &ModelConfig) -> u32 {
        let info = self.lookup(&model.model).unwrap_or_default();
        let window = match model.context_window {
            0 => info.context_window,
            set => set,
        };
        if window == 0 {
            return 0;
        }
        let reserved = if model.provider == crate::llm::anthropic::PROVIDER {
            crate::llm::anthropic::thinking::thinking_for(model)
                .map_or(model.max_output_tokens, |t| t.max_tokens)
        } else {
            model.max_output_tokens
        };
        let input = match info.max_input_tokens {
            0 => window,
            cap => cap.min(window),
        };
        input.min(window.saturating_sub(reserved))
    }

    /// A larger `max_tokens` to ask again with after an Anthropic answer that stopped at
    /// `max_tokens`, before the stop counts as a truncation: the model's
    /// output limit, within what the window leaves beside the prompt the answer reported.
    /// `None` when the run set its own limit (`asked` > 0), the answer ended otherwise, the
    /// table does not know the model, or nothing larger fits.
    pub fn raised_output_limit(
        &self,
        model: &ModelConfig,
        asked: u32,
        response: &LlmResponse,
    ) -> Option<u32> {
        if model.provider != crate::llm::anthropic::PROVIDER || asked > 0 {
            return None;
        }
        let stopped = response
            .message
            .as_ref()
            .is_some_and(|m| m.finish_reason == baton_proto::FinishReason::Length as i32);
        if !stopped {
            return None;
        }
        let info = self.lookup(&model.model)?;
        let sent = crate::llm::anthropic::thinking::thinking_for(model)
            .ok()?
            .max_tokens;
        let prompt = response.usage.as_ref().map_or(0, |u| u.input_tokens);
        let room = info.context_window.saturating_sub(prompt);
        let raised = info.max_output_tokens.min(room);
        (raised > sent).then_some(raised)
    }

    /// Fills in what the table knows of the run's `model` on a provider's `response`: the
    /// usage's `cost_usd` (left 0 for a model without a price), `context_window` (0 =
    /// unknown) and `prompt_capacity` ([`ModelTable::prompt_capacity`]). With `cache_ttl =
    /// "1h"` cache writes cost [`ONE_HOUR_WRITE_FACTOR`] times the (5-minute) write price.
    pub fn annotate(&self, model: Option<&ModelConfig>, response: &mut LlmResponse) {
        let Some(config) = model else {
            return;
        };
        response.prompt_capacity = self.prompt_capacity(config);
        let Some(mut info) = self.lookup(&config.model) else {
            return;
        };
        if config.cache_ttl == "1h" {
            info.cache_write_usd_per_mtok *= ONE_HOUR_WRITE_FACTOR;
        }
        response.context_window = info.context_window;
        if let Some(usage) = response.usage.as_mut() {
            usage.cost_usd = info.cost_usd(usage);
        }
    }

    /// Sets `usage.cost_usd` for calls to `model` (left as it is for a model without a price).
    pub fn price(&self, model: Option<&ModelConfig>, usage: &mut Usage) {
        let mut response = LlmResponse {
            usage: Some(std::mem::take(usage)),
            ..Default::default()
        };
        self.annotate(model, &mut response);
        if let Some(priced) = response.usage {
            *usage = priced;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::test_items::usage;
    use baton_proto::FinishReason;
    use pretty_assertions::assert_eq;

    /// Rounded to a thousandth of a cent.
    fn rounded(usd: f64) -> i64 {
        (usd * 100_000.0).round() as i64
    }

    #[test]
    fn prompt_capacity_is_the_input_cap_and_the_window_less_reserved_output() {
        let t = ModelTable::defaults();
        let capacity = |provider: &str, model: &str, window: u32, max: u32, budget: u32| {
            t.prompt_capacity(&ModelConfig {
                provider: provider.into(),
                model: model.into(),
                context_window: window,
                max_output_tokens: max,
                thinking_budget_tokens: budget,
                ..Default::default()
            })
        };
        // gpt-5: a 400K window, prompts capped at 272K (snapshots too).
        assert_eq!(capacity("openai", "gpt-5", 0, 0, 0), 272_000);
        assert_eq!(
            capacity("openai-responses", "gpt-5.1-codex-mini", 0, 0, 0),
            272_000
        );
        assert_eq!(capacity("openai", "gpt-5-2025-08-07", 0, 0, 0), 272_000);
        // The window less a requested output, when that is smaller.
        assert_eq!(capacity("openai", "gpt-5", 0, 200_000, 0), 200_000);
        assert_eq!(capacity("openai", "gpt-4o", 0, 0, 0), 128_000);
        assert_eq!(capacity("openai", "gpt-4o", 0, 16_000, 0), 112_000);
        // Anthropic counts the max_tokens it is sent: the default, the run's, budget + default.
        assert_eq!(
            capacity("anthropic", "claude-sonnet-4-5", 0, 0, 0),
            200_000 - 8_192
        );
        assert_eq!(
            capacity("anthropic", "claude-sonnet-4-5", 0, 32_000, 0),
            168_000
        );
        assert_eq!(
            capacity("anthropic", "claude-sonnet-4-5", 0, 0, 10_000),
            200_000 - 10_000 - 8_192
        );
        // The run's own window wins over the table's, the cap still holds.
        assert_eq!(capacity("openai", "gpt-5", 100_000, 0, 0), 100_000);
        assert_eq!(
            capacity("openai", "my-local-model", 32_768, 4_096, 0),
            28_672
        );
        // Nothing known: 0.
        assert_eq!(capacity("openai", "my-local-model", 0, 0, 0), 0);
        // A worker's `[models]` entry sets a cap.
        let capped = t
            .with_settings(&BTreeMap::from([(
                "my-local-model".to_owned(),
                ModelSettings {
                    context_window: Some(64_000),
                    max_input_tokens: Some(50_000),
                    ..Default::default()
                },
            )]))
            .unwrap();
        let m = ModelConfig {
            provider: "openai".into(),
            model: "my-local-model".into(),
            ..Default::default()
        };
        assert_eq!(capped.prompt_capacity(&m), 50_000);
        let mut response = LlmResponse::default();
        capped.annotate(Some(&m), &mut response);
        assert_eq!(
            (response.context_window, response.prompt_capacity),
            (64_000, 50_000)
        );
    }

    #[test]
    fn a_max_tokens_stop_at_the_default_asks_again_with_the_models_limit() {
        let t = ModelTable::defaults();
        let model = |name: &str| ModelConfig {
            provider: "anthropic".into(),
            model: name.into(),
            ..Default::default()
        };
        let stopped = |finish: FinishReason, input: u32| LlmResponse {
            message: Some(baton_proto::AssistantMessage {
                finish_reason: finish as i32,
                ..Default::default()
            }),
            usage: Some(Usage {
                input_tokens: input,
                ..Default::default()
            }),
            ..Default::default()
        };
        let sonnet = model("claude-sonnet-4-5");
        let length = stopped(FinishReason::Length, 1_000);
        assert_eq!(t.raised_output_limit(&sonnet, 0, &length), Some(64_000));
        // Within the window beside the prompt.
        let long = stopped(FinishReason::Length, 150_000);
        assert_eq!(t.raised_output_limit(&sonnet, 0, &long), Some(50_000));
        // Not for a run that set its limit, another finish, a model at its limit already,
        // an unknown model or another provider.
        assert_eq!(t.raised_output_limit(&sonnet, 8_192, &length), None);
        let stop = stopped(FinishReason::Stop, 1_000);
        assert_eq!(t.raised_output_limit(&sonnet, 0, &stop), None);
        let mut haiku = model("claude-3-haiku-20240307");
        t.clamp_output_limit(&mut haiku);
        assert_eq!(t.raised_output_limit(&haiku, 0, &length), None);
        assert_eq!(
            t.raised_output_limit(&model("claude-new"), 0, &length),
            None
        );
        let mut openai = model("gpt-4o");
        openai.provider = "openai".into();
        assert_eq!(t.raised_output_limit(&openai, 0, &length), None);
    }

    #[test]
    fn anthropic_output_limits_come_from_the_table() {
        let t = ModelTable::defaults();
        let clamped = |model: &str, max: u32, budget: u32| {
            let mut m = ModelConfig {
                provider: "anthropic".into(),
                model: model.into(),
                max_output_tokens: max,
                thinking_budget_tokens: budget,
                ..Default::default()
            };
            t.clamp_output_limit(&mut m);
            m.max_output_tokens
        };
        // claude-3-haiku takes 4,096: the 8,192 default would be refused on every call.
        assert_eq!(clamped("claude-3-haiku-20240307", 0, 0), 4_096);
        assert_eq!(clamped("claude-3-haiku-20240307", 10_000, 0), 4_096);
        // Within the limit: unchanged (0 = the provider's default).
        assert_eq!(clamped("claude-sonnet-4-5", 0, 0), 0);
        assert_eq!(clamped("claude-sonnet-4-5", 20_000, 0), 20_000);
        // Thinking: budget + default over opus-4-1's 32,000 is clamped to it.
        assert_eq!(clamped("claude-opus-4-1", 0, 30_000), 32_000);
        assert_eq!(clamped("unknown-model", 100_000, 0), 100_000);
        // Other providers are left alone.
        let mut openai = ModelConfig {
            provider: "openai".into(),
            model: "gpt-4o".into(),
            max_output_tokens: 100_000,
            ..Default::default()
        };
        t.clamp_output_limit(&mut openai);
        assert_eq!(openai.max_output_tokens, 100_000);
    }

    #[test]
    fn exact_names_win_then_the_longest_prefix_before_a_dash() {
        let t = ModelTable::defaults();
        let window = |name: &str| t.lookup(name).map(|m| m.context_window);
        assert_eq!(window("gpt-4o"), Some(128_000));
        assert_eq!(window("gpt-4o-2024-08-06"), Some(128_000));
        // gpt-4o-mini is its own row, longer than gpt-4o.
        let mini = t.lookup("gpt-4o-mini-2024-07-18").unwrap();
        assert_eq!(mini.input_usd_per_mtok, 0.15);
        assert_eq!(
            t.lookup("claude-sonnet-4-5-20250929")
                .unwrap()
                .cache_write_usd_per_mtok,
            3.75
        );
        assert_eq!(
            t.lookup("claude-opus-4-5-20251101")
                .unwrap()
                .output_usd_per_mtok,
            25.0
        );
        assert_eq!(
            t.lookup("claude-opus-4-20250514")
                .unwrap()
                .output_usd_per_mtok,
            75.0
        );
        assert_eq!(window("gpt-4.1-mini-2025-04-14"), Some(1_047_576));
        // Not a dash after the known name: a different model, not a snapshot of it.
        assert_eq!(window("gpt-5.2"), None);
        assert_eq!(window("o3x"), None);
        assert_eq!(window("llama-3.1-8b"), None);
        assert_eq!(window(""), None);
    }

    #[test]
    fn cost_of_one_call_against_hand_computed_figures() {
        let t = ModelTable::defaults();
        // claude-sonnet-4-5: 100k prompt tokens of which 80k read from cache and 15k written,
        // 2k output: 5k x $3 + 80k x $0.30 + 15k x $3.75 + 2k x $15, per million
        // = 0.015 + 0.024 + 0.05625 + 0.03 = $0.12525.
        let sonnet = t.lookup("claude-sonnet-4-5").unwrap();
        assert_eq!(
            rounded(sonnet.cost_usd(&usage(100_000, 2_000, 80_000, 15_000))),
            rounded(0.12525)
        );
        // gpt-4o: 10,000 prompt tokens, 6,144 cached, 500 output:
        // 3,856 x $2.50 + 6,144 x $1.25 + 500 x $10 = 0.00964 + 0.00768 + 0.005 = $0.02232.
        let gpt4o = t.lookup("gpt-4o").unwrap();
        assert_eq!(
            rounded(gpt4o.cost_usd(&usage(10_000, 500, 6_144, 0))),
            rounded(0.02232)
        );
        // No cache: 1M in, 1M out of gpt-5 = $1.25 + $10.
        let gpt5 = t.lookup("gpt-5").unwrap();
        assert_eq!(
            rounded(gpt5.cost_usd(&usage(1_000_000, 1_000_000, 0, 0))),
            rounded(11.25)
        );
        // A provider that reports more cached than prompt tokens never gives a negative part.
        assert!(gpt4o.cost_usd(&usage(100, 0, 200, 0)) > 0.0);
        assert_eq!(ModelInfo::default().cost_usd(&usage(1000, 1000, 0, 0)), 0.0);
    }

    #[test]
    fn annotate_sets_the_window_and_the_cost_of_known_models_only() {
        let t = ModelTable::defaults();
        let reply = || LlmResponse {
            usage: Some(usage(10_000, 500, 6_144, 0)),
            ..Default::default()
        };
        let config = |model: &str, ttl: &str| ModelConfig {
            model: model.into(),
            cache_ttl: ttl.into(),
            ..Default::default()
        };
        let mut known = reply();
        t.annotate(Some(&config("gpt-4o-2024-08-06", "")), &mut known);
        assert_eq!(known.context_window, 128_000);
        assert_eq!(rounded(known.usage.unwrap().cost_usd), rounded(0.02232));
        let mut unknown = reply();
        t.annotate(Some(&config("my-local-model", "")), &mut unknown);
        assert_eq!(unknown, reply());
        t.annotate(None, &mut unknown);
        assert_eq!(unknown, reply());
        // claude-haiku-4-5, 10k written to a 1-hour cache, nothing else: 10k x $2 (2x input).
        let written = || LlmResponse {
            usage: Some(usage(10_000, 0, 0, 10_000)),
            ..Default::default()
        };
        let mut hour = written();
        t.annotate(Some(&config("claude-haiku-4-5", "1h")), &mut hour);
        assert_eq!(rounded(hour.usage.unwrap().cost_usd), rounded(0.02));
        let mut minutes = written();
        t.annotate(Some(&config("claude-haiku-4-5", "5m")), &mut minutes);
        assert_eq!(rounded(minutes.usage.unwrap().cost_usd), rounded(0.0125));
    }

    #[test]
    fn settings_override_fields_and_add_models() {
        let settings = BTreeMap::from([
            (
                "gpt-4o".to_owned(),
                ModelSettings {
                    input_usd_per_mtok: Some(5.0),
                    ..Default::default()
                },
            ),
            (
                "claude-sonnet-4-5-20250929".to_owned(),
                ModelSettings {
                    context_window: Some(1_000_000),
                    ..Default::default()
                },
            ),
            (
                "local-llama".to_owned(),
                ModelSettings {
                    context_window: Some(32_768),
                    output_usd_per_mtok: Some(0.5),
                    ..Default::default()
                },
            ),
        ]);
        let t = ModelTable::defaults().with_settings(&settings).unwrap();
        let gpt4o = t.lookup("gpt-4o-2024-11-20").unwrap();
        assert_eq!(
            (gpt4o.input_usd_per_mtok, gpt4o.cached_input_usd_per_mtok),
            (5.0, 1.25)
        );
        // A dated snapshot added by name starts from its family's figures.
        let sonnet = t.lookup("claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(
            (sonnet.context_window, sonnet.output_usd_per_mtok),
            (1_000_000, 15.0)
        );
        assert_eq!(
            t.lookup("claude-sonnet-4-5").unwrap().context_window,
            200_000
        );
        assert_eq!(
            t.lookup("local-llama"),
            Some(ModelInfo {
                context_window: 32_768,
                output_usd_per_mtok: 0.5,
                ..Default::default()
            })
        );
    }

    #[test]
    fn bad_settings_are_refused_with_what_to_do() {
        let bad = BTreeMap::from([(
            "gpt-4o".to_owned(),
            ModelSettings {
                output_usd_per_mtok: Some(-1.0),
                ..Default::default()
            },
        )]);
        let err = ModelTable::defaults().with_settings(&bad).unwrap_err();
        assert_eq!(
            err.to_string(),
            "[models.\"gpt-4o\"] output_usd_per_mtok = -1 is not a price; give USD per million tokens, 0 or more"
        );
        let empty = BTreeMap::from([(String::new(), ModelSettings::default())]);
        assert_eq!(
            ModelTable::defaults().with_settings(&empty).unwrap_err(),
            ModelTableError::EmptyName
        );
    }
}
