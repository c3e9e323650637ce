//! Prompt caching (`baton-bench caching`): a 50-turn conversation (each turn one
//! tool call and a result of a few hundred tokens) behind a 40k-token prefix (system prompt +
//! tools), sent through the real Anthropic provider (request builder, HTTP, stream parser) to
//! a local Messages server that accounts like Anthropic's prompt cache:
//!
//! - the cacheable units are the request's blocks in the API's cache order (each tool, each
//!   system block, each message's content blocks), `cache_control` left out of their identity;
//! - a prefix ending at a breakpoint that an earlier request also marked, within the TTL
//!   (5 minutes, refreshed on a read), is **read**; the longest such prefix counts;
//! - the part after the read up to the request's last breakpoint is **written**;
//! - prefixes under 1,024 tokens are never cached; the rest of the prompt is plain input;
//! - tokens are estimated as bytes / 4 of the serialized blocks (the same rule both ways).
//!
//! The baseline sends the same requests, which the server reads with their breakpoints
//! stripped (`cache::strip_breakpoints`), so everything is plain input. Billed input tokens
//! weight Anthropic's documented multipliers: cache write 1.25x (5-minute TTL), cache read 0.1x,
//! plain input 1x.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use baton_activities::llm::{
    Provider,
    anthropic::{Anthropic, cache::strip_breakpoints},
};
use baton_proto::{
    AssistantMessage, FinishReason, Item, LlmRequest, ModelConfig, ToolDefinition, ToolResult,
    Usage, UserMessage, item,
};
use baton_tests::{MockAnthropic, MockResponse};
use serde_json::{Value, json};

/// What the scenario sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Turns (requests) of the conversation.
    pub(crate) turns: u32,
    /// Approximate tokens of the stable prefix (system prompt + tools).
    pub(crate) prefix_tokens: usize,
    /// Approximate tokens of each tool result.
    pub(crate) result_tokens: usize,
}

impl Settings {
    /// The prompt-caching scenario.
    pub(crate) const FULL: Settings = Settings {
        turns: 50,
        prefix_tokens: 40_000,
        result_tokens: 300,
    };
}

/// Smallest prefix the cache keeps, in tokens.
const MIN_CACHEABLE_TOKENS: usize = 1024;
/// The default (5-minute) cache lifetime.
const TTL: Duration = Duration::from_secs(300);
/// The model of the shipped price table the passes are priced as.
const PRICED_AS: &str = "claude-sonnet-4-5";
/// Anthropic's multipliers on the base input price.
const WRITE_5M: f64 = 1.25;
const READ: f64 = 0.1;

fn tokens(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// The local server's cache: prefix hash -> expiry.
#[derive(Default)]
struct Cache {
    entries: HashMap<u64, Instant>,
}

/// What one request cost, as the server reports it in `usage`.
struct Accounted {
    plain: usize,
    read: usize,
    written: usize,
}

impl Cache {
    /// Accounts one request body like Anthropic's cache and remembers its breakpoints.
    fn account(&mut self, body: &Value) -> Accounted {
        let mut units: Vec<(String, bool)> = Vec::new();
        let mut unit = |v: &Value, tag: &str| {
            let mut v = v.clone();
            let marked = v.get("cache_control").is_some();
            strip_breakpoints(&mut v);
            units.push((format!("{tag}:{v}"), marked));
        };
        for t in body["tools"].as_array().into_iter().flatten() {
            unit(t, "tool");
        }
        match &body["system"] {
            Value::String(s) => unit(&json!({"type": "text", "text": s}), "system"),
            Value::Array(blocks) => blocks.iter().for_each(|b| unit(b, "system")),
            _ => {}
        }
        for m in body["messages"].as_array().into_iter().flatten() {
            let role = m["role"].as_str().unwrap_or_default();
            for b in m["content"].as_array().into_iter().flatten() {
                unit(b, role);
            }
        }
        let now = Instant::now();
        self.entries.retain(|_, expiry| *expiry > now);
        let mut hasher = DefaultHasher::new();
        let mut bytes = 0;
        // (prefix hash, prefix tokens) at each breakpoint.
        let mut breakpoints = Vec::new();
        for (text, marked) in &units {
            text.hash(&mut hasher);
            bytes += text.len();
            if *marked && tokens(bytes) >= MIN_CACHEABLE_TOKENS {
                breakpoints.push((hasher.finish(), tokens(bytes)));
            }
        }
        let total = tokens(bytes);
        let read = breakpoints
            .iter()
            .rev()
            .find(|(h, _)| self.entries.contains_key(h))
            .map_or(0, |(_, t)| *t);
        let cached_end = breakpoints.last().map_or(0, |(_, t)| *t).max(read);
        for (h, _) in &breakpoints {
            self.entries.insert(*h, now + TTL);
        }
        Accounted {
            plain: total - cached_end,
            read,
            written: cached_end - read,
        }
    }
}

/// A server that answers every request with the next tool call, its usage accounted by
/// [`Cache`]; `strip` reads the requests without their breakpoints (the baseline).
fn server(strip: bool) -> anyhow::Result<MockAnthropic> {
    let mock = MockAnthropic::start()?;
    mock.count_requests_only();
    let cache = Arc::new(Mutex::new(Cache::default()));
    mock.set_responder(Arc::new(move |req| {
        let mut body = req.body.clone();
        if strip {
            strip_breakpoints(&mut body);
        }
        let turn = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let used = cache.lock().ok()?.account(&body);
        let mut reply = MockAnthropic::tool_use_reply(&[(
            &format!("toolu_{turn:03}"),
            "read_file",
            &format!(r#"{{"path":"src/module_{turn}.rs"}}"#),
        )]);
        reply["usage"] = json!({
            "input_tokens": used.plain,
            "cache_creation_input_tokens": used.written,
            "cache_read_input_tokens": used.read,
            "output_tokens": 20,
        });
        Some(MockResponse::ok(reply))
    }));
    Ok(mock)
}

/// Filler text of about `tokens` tokens (4 bytes each).
fn filler(label: &str, tokens: usize) -> String {
    let sentence = format!("{label}: keep changes small, run the tests, explain each step. ");
    sentence.repeat((tokens * 4).div_ceil(sentence.len()))
}

/// The stable prefix: a system prompt of 3/4 of it, 20 tools sharing the rest.
fn base_request(settings: &Settings) -> LlmRequest {
    let tools = 20;
    LlmRequest {
        model: Some(ModelConfig {
            provider: "anthropic".into(),
            model: "claude-bench".into(),
            ..Default::default()
        }),
        system_prompt: filler("system", settings.prefix_tokens * 3 / 4),
        tools: (0..tools)
            .map(|i| ToolDefinition {
                name: format!("tool_{i}"),
                description: filler(&format!("tool {i}"), settings.prefix_tokens / 4 / tools),
                parameters: r#"{"type":"object","properties":{"path":{"type":"string"}}}"#.into(),
                read_only: true,
                mcp: None,
            })
            .collect(),
        conversation: vec![Item {
            kind: Some(item::Kind::User(UserMessage {
                text: "Review every module of the crate.".into(),
                synthetic: false,
            })),
        }],
        ..Default::default()
    }
}

/// Sums of one pass, from the usage the provider parsed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Pass {
    input: u64,
    read: u64,
    written: u64,
    elapsed: Duration,
}

impl Pass {
    /// Input tokens weighted by Anthropic's multipliers.
    fn billed(&self) -> f64 {
        let plain = self.input - self.read - self.written;
        plain as f64 + WRITE_5M * self.written as f64 + READ * self.read as f64
    }

    /// The pass's input cost in US dollars under the shipped price table (Claude Sonnet 4.5:
    /// input $3, cache write $3.75, cache read $0.30 per million tokens).
    fn input_cost_usd(&self) -> f64 {
        let price = baton_activities::llm::ModelTable::defaults()
            .lookup(PRICED_AS)
            .unwrap_or_default();
        price.cost_usd(&Usage {
            input_tokens: u32::try_from(self.input).unwrap_or(u32::MAX),
            cache_read_tokens: u32::try_from(self.read).unwrap_or(u32::MAX),
            cache_write_tokens: u32::try_from(self.written).unwrap_or(u32::MAX),
            ..Default::default()
        })
    }

    fn add(&mut self, u: &Usage) {
        self.input += u64::from(u.input_tokens);
        self.read += u64::from(u.cache_read_tokens);
        self.written += u64::from(u.cache_write_tokens);
    }
}

/// One pass: `settings.turns` requests, each answered with a tool call whose result joins
/// the conversation.
async fn pass(settings: &Settings, strip: bool) -> anyhow::Result<Pass> {
    let mock = server(strip)?;
    let provider = Anthropic::new(
        mock.base_url(),
        Some("sk-ant-bench".into()),
        "",
        Duration::from_secs(30),
    )?;
    let mut request = base_request(settings);
    let mut sums = Pass::default();
    let started = Instant::now();
    for turn in 0..settings.turns {
        let response = provider.generate(&request).await?;
        let usage = response
            .usage
            .ok_or_else(|| anyhow::anyhow!("turn {turn}: no usage"))?;
        sums.add(&usage);
        let message: AssistantMessage = response
            .message
            .ok_or_else(|| anyhow::anyhow!("turn {turn}: no message"))?;
        anyhow::ensure!(
            message.finish_reason == FinishReason::ToolCalls as i32,
            "turn {turn}: no tool call"
        );
        let call = message.tool_calls[0].clone();
        request.conversation.push(Item {
            kind: Some(item::Kind::Assistant(message)),
        });
        request.conversation.push(Item {
            kind: Some(item::Kind::ToolResult(ToolResult {
                call_id: call.id,
                name: call.name,
                content: filler(&format!("result {turn}"), settings.result_tokens),
                ..Default::default()
            })),
        });
    }
    sums.elapsed = started.elapsed();
    let violations = mock.take_violations();
    anyhow::ensure!(violations.is_empty(), "the server refused: {violations:?}");
    Ok(sums)
}

/// The scenario's result.
pub(crate) struct CachingReport {
    settings: Settings,
    cached: Pass,
    uncached: Pass,
}

/// Runs both passes.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<CachingReport> {
    Ok(CachingReport {
        settings,
        cached: pass(&settings, false).await?,
        uncached: pass(&settings, true).await?,
    })
}

impl CachingReport {
    /// The scenario's table.
    pub(crate) fn render(&self) -> String {
        let row = |label: &str, p: &Pass| {
            format!(
                "| {label} | {} | {} | {} | {} | {:.0} | ${:.2} | {:.2} |\n",
                p.input,
                p.input - p.read - p.written,
                p.written,
                p.read,
                p.billed(),
                p.input_cost_usd(),
                p.elapsed.as_secs_f64()
            )
        };
        let ratio = self.cached.billed() / self.uncached.billed();
        let cost_ratio = self.cached.input_cost_usd() / self.uncached.input_cost_usd();
        format!(
            "### Prompt caching ({} turns, ~{}-token prefix, ~{}-token tool results; tokens ~ bytes/4)\n\n\
             | pass | input tokens | plain | cache writes | cache reads | billed (write 1.25x, read 0.1x) | input cost ({PRICED_AS}, shipped price table) | seconds |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|\n{}{}\n\
             Billed input with caching / without: {ratio:.3}x; input cost under the shipped price table: {cost_ratio:.3}x (goal under 0.2x).\n",
            self.settings.turns,
            self.settings.prefix_tokens,
            self.settings.result_tokens,
            row("cache_control breakpoints", &self.cached),
            row("breakpoints stripped", &self.uncached),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_reads_what_an_earlier_request_marked() {
        let big = "x".repeat(8_000);
        let body = |extra: &[Value]| {
            let mut content =
                vec![json!({"type": "text", "text": big, "cache_control": {"type": "ephemeral"}})];
            content.extend(extra.iter().cloned());
            json!({"messages": [{"role": "user", "content": content}]})
        };
        let mut cache = Cache::default();
        let first = cache.account(&body(&[]));
        // The unit is `user:` + the block without its cache_control.
        let unit = format!("user:{}", json!({"type": "text", "text": big}));
        assert_eq!(
            (first.plain, first.read, first.written),
            (0, 0, tokens(unit.len()))
        );
        let tail = json!({"type": "text", "text": "more"});
        let second = cache.account(&body(&[tail]));
        assert_eq!(second.read, first.written);
        assert_eq!(second.written, 0);
        assert!(second.plain > 0);
        let mut stripped = body(&[]);
        strip_breakpoints(&mut stripped);
        let plain = Cache::default().account(&stripped);
        assert_eq!((plain.read, plain.written), (0, 0));
    }
}
