//! The provider error taxonomy (`docs/src/architecture/design.md` §5) and its mapping to
//! Temporal failures: whether a retry can help, and when the next attempt comes (under the
//! provider's [`RetryBudget`]), is decided here, once; Temporal does the retrying.

use std::time::{Duration, SystemTime};

use super::retry::{NextAttempt, RetryBudget};
use baton_workflows::activities::FailureType;
use temporalio_common::{ActivityError, error::ApplicationFailure};
use thiserror::Error;

/// Why an LLM call failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LlmError {
    /// 429: retry, after `retry_after` when the provider said so.
    #[error("rate limited by {provider} (HTTP 429): {message}")]
    RateLimited {
        /// Provider name.
        provider: String,
        /// The provider's message.
        message: String,
        /// From `Retry-After` / `retry-after-ms`.
        retry_after: Option<Duration>,
    },
    /// 5xx, 529 overloaded, 408: retry with backoff.
    #[error("{provider} is unavailable (HTTP {status}): {message}")]
    Unavailable {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
        /// From `Retry-After`, if sent.
        retry_after: Option<Duration>,
    },
    /// Timeouts, refused or reset connections, truncated bodies: retry.
    #[error("could not reach {provider} at {url}: {message}")]
    Transport {
        /// Provider name.
        provider: String,
        /// The endpoint.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The request does not fit the model's context window.
    #[error("the conversation is too long for the model's context window: {message}")]
    ContextOverflow {
        /// The provider's message.
        message: String,
    },
    /// 401/403, other 400s, unknown model: retrying cannot help.
    #[error("{provider} rejected the request (HTTP {status}): {message}")]
    Rejected {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The run asks for something the worker cannot serve (unknown provider, no key, script
    /// exhausted).
    #[error("{0}")]
    Config(String),
    /// The provider answered 200 with a body we cannot use.
    #[error("{provider} sent a response baton cannot read: {message}")]
    BadResponse {
        /// Provider name.
        provider: String,
        /// What was wrong.
        message: String,
    },
}

impl LlmError {
    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. }
                | Self::Unavailable { .. }
                | Self::Transport { .. }
                | Self::BadResponse { .. }
        )
    }

    /// The provider named by a retryable error.
    fn provider(&self) -> Option<&str> {
        match self {
            Self::RateLimited { provider, .. }
            | Self::Unavailable { provider, .. }
            | Self::Transport { provider, .. }
            | Self::BadResponse { provider, .. }
            | Self::Rejected { provider, .. } => Some(provider),
            Self::ContextOverflow { .. } | Self::Config(_) => None,
        }
    }

    /// The Temporal failure of this error on a first attempt under the default budget (what a
    /// provider's own tests look at); the activity uses [`LlmError::into_failure`].
    pub fn into_activity_error(self) -> ActivityError {
        self.into_failure(1, &RetryBudget::default())
    }

    /// The Temporal failure for this error on attempt `attempt` (1-based) of a call under
    /// `budget`: typed; non-retryable when no retry can help or `attempt` was the budget's
    /// last (the message then says so and names the setting); otherwise with the next retry
    /// delay the budget decides ([`RetryBudget::next`]: backoff, or the provider's
    /// `Retry-After`).
    pub fn into_failure(self, attempt: u32, budget: &RetryBudget) -> ActivityError {
        let (type_name, retry_after) = match &self {
            Self::RateLimited { retry_after, .. } => (FailureType::RateLimited, *retry_after),
            Self::Unavailable { retry_after, .. } => {
                (FailureType::ProviderUnavailable, *retry_after)
            }
            Self::Transport { .. } => (FailureType::ProviderUnreachable, None),
            Self::BadResponse { .. } => (FailureType::ProviderBadResponse, None),
            Self::ContextOverflow { .. } => (FailureType::ContextOverflow, None),
            Self::Rejected { .. } => (FailureType::ProviderFatal, None),
            Self::Config(_) => (FailureType::BadInput, None),
        };
        let mut message = self.to_string();
        let next = if self.is_retryable() {
            budget.next(attempt, retry_after)
        } else {
            NextAttempt::GiveUp { attempts: attempt }
        };
        // The worker's settings section of the provider (`openai-responses` -> `[openai_responses]`).
        let section = self.provider().unwrap_or_default().replace('-', "_");
        let delay = match next {
            NextAttempt::After(delay) => {
                // The workflow's attempt limit is only an envelope: say which one counts.
                message.push_str(&format!(
                    "; attempt {attempt} of {} (worker setting [{section}] max_attempts)",
                    budget.max_attempts
                ));
                Some(delay)
            }
            NextAttempt::GiveUp { attempts } if self.is_retryable() => {
                message.push_str(&format!(
                    "; gave up after {attempts} attempts (worker setting [{section}] max_attempts)"
                ));
                None
            }
            NextAttempt::GiveUp { .. } => None,
        };
        ActivityError::application(
            ApplicationFailure::builder(message)
                .type_name(type_name.as_str().to_owned())
                .non_retryable(delay.is_none())
                .maybe_next_retry_delay(delay)
                .build(),
        )
    }
}

impl LlmError {
    /// A transport failure of `provider` at `url` (timeout, refused or reset connection,
    /// unreadable body), with the whole error chain in the message.
    pub fn transport(provider: &str, url: &str, e: &reqwest::Error) -> Self {
        let kind = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "connection failed"
        } else {
            "request failed"
        };
        Self::Transport {
            provider: provider.to_owned(),
            url: url.to_owned(),
            message: format!("{kind}: {}", error_chain(e)),
        }
    }

    /// A stream that ended (or broke, `cause`) before the provider said it was complete.
    pub fn cut_stream(
        provider: &str,
        url: &str,
        bytes: u64,
        cause: Option<&reqwest::Error>,
    ) -> Self {
        let mut message = format!("the stream was cut after {bytes} bytes");
        if let Some(e) = cause {
            if e.is_timeout() {
                message.push_str(" (timed out)");
            }
            message.push_str(": ");
            message.push_str(&error_chain(e));
        }
        Self::Transport {
            provider: provider.to_owned(),
            url: url.to_owned(),
            message,
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message = format!("{message}: {s}");
        source = s.source();
    }
    message
}

/// What a provider said about an error: from an HTTP error body or an error event inside a
/// stream. Understands both OpenAI-style (`{"error": {"message", "type", "code"}}`) and
/// Anthropic-style (`{"type": "error", "error": {"type", "message"}}`) bodies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorDetail {
    /// The human-readable message (or a snippet of the body when there is none).
    pub message: String,
    /// `error.type` (e.g. `invalid_request_error`, `overloaded_error`).
    pub kind: Option<String>,
    /// `error.code` when it is a string (e.g. `context_length_exceeded`).
    pub code: Option<String>,
    /// `error.code` when it is an HTTP-like number (OpenRouter puts the status there).
    pub status: Option<u16>,
}

impl ErrorDetail {
    /// Reads an error body; anything unreadable becomes the message as a snippet.
    pub fn from_body(body: &str) -> Self {
        match serde_json::from_str::<serde_json::Value>(body) {
            Ok(v) => Self::from_value(&v).unwrap_or_else(|| Self {
                message: snippet(body),
                ..Default::default()
            }),
            Err(_) => Self {
                message: snippet(body),
                ..Default::default()
            },
        }
    }

    /// Reads an error value (the whole body, or the `error` object itself); `None` when it
    /// carries no message.
    pub fn from_value(v: &serde_json::Value) -> Option<Self> {
        use serde_json::Value;
        let err = v.get("error").unwrap_or(v);
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| err.as_str().map(str::to_owned))?;
        let kind = err.get("type").and_then(Value::as_str).map(str::to_owned);
        let code_value = err.get("code");
        let code = code_value.and_then(Value::as_str).map(str::to_owned);
        let status = code_value
            .and_then(|c| {
                c.as_u64()
                    .or_else(|| c.as_str().and_then(|s| s.parse::<u64>().ok()))
            })
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| (400..=599).contains(n));
        Some(Self {
            message,
            kind,
            code,
            status,
        })
    }

    /// The HTTP status this error stands for when it arrived without one (inside a stream):
    /// from a numeric code, else from the error type, else 500 (a server-side failure).
    pub fn implied_status(&self) -> u16 {
        if let Some(status) = self.status {
            return status;
        }
        let names = [self.code.as_deref(), self.kind.as_deref()];
        for name in names.into_iter().flatten() {
            let status = match name {
                "invalid_request_error"
                | "context_length_exceeded"
                | "invalid_request"
                | "invalid_prompt" => 400,
                "authentication_error" | "invalid_api_key" => 401,
                "permission_error" | "permission_denied" => 403,
                "not_found_error" | "model_not_found" => 404,
                "request_too_large" => 413,
                "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => 429,
                "overloaded_error" | "overloaded" => 529,
                "api_error" | "server_error" | "internal_error" => 500,
                _ => continue,
            };
            return status;
        }
        500
    }
}

/// Classifies a provider error: an HTTP error `status` with its `detail` (for an error event
/// inside a stream, pass [`ErrorDetail::implied_status`]) and the delay the provider asked for.
///
/// - 413, a `context_length_exceeded` code, or a 400 whose message says the prompt does not
///   fit the context: [`LlmError::ContextOverflow`].
/// - 429: [`LlmError::RateLimited`] (except an exhausted quota: [`LlmError::Rejected`]).
/// - 408, 409, 5xx, 529 and `overloaded_error`: [`LlmError::Unavailable`].
/// - Anything else (401, 403, 404, other 400s): [`LlmError::Rejected`].
pub fn classify(
    provider: &str,
    status: u16,
    retry_after: Option<Duration>,
    detail: ErrorDetail,
) -> LlmError {
    let lower = detail.message.to_lowercase();
    let says_too_long = [
        "context length",
        "context_length",
        "context window",
        "context limit",
        "maximum context",
        "prompt is too long",
        "prompt too long",
        "input is too long",
        "too many input tokens",
        // OpenAI gpt-5: "Input tokens exceed the configured limit of 272,000 tokens."
        "input tokens exceed",
        // Gemini: "The input token count (1200293) exceeds the maximum number of tokens
        // allowed (1048576)." (google-gemini/gemini-cli#6678)
        "input token count",
        // SiliconFlow-style servers: "... has exceeded max_prompt_tokens"
        "max_prompt_tokens",
        // llama.cpp's server: "the request exceeds the available context size, try
        // increasing it" (type `exceed_context_size_error`)
        "context size",
    ]
    .iter()
    .any(|p| lower.contains(p));
    let context_overflow = status == 413
        || detail.code.as_deref() == Some("context_length_exceeded")
        || detail.kind.as_deref() == Some("exceed_context_size_error")
        || (status == 400 && says_too_long);
    let provider = provider.to_owned();
    let message = detail.message;
    if context_overflow {
        return LlmError::ContextOverflow { message };
    }
    let overloaded = detail.kind.as_deref() == Some("overloaded_error");
    let quota =
        [detail.code.as_deref(), detail.kind.as_deref()].contains(&Some("insufficient_quota"));
    // OpenAI's "Request too large for <model> ... on tokens per min (TPM): Limit 30000,
    // Requested 36278": one request over the per-minute limit, refused however long one waits
    // (Aider-AI/aider#1880: "you will always get this error"). Not a rate limit to ride out.
    let too_large = status == 429 && message.to_ascii_lowercase().contains("request too large");
    match status {
        429 if quota => LlmError::Rejected {
            provider,
            status,
            message,
        },
        429 if too_large => LlmError::Rejected {
            provider,
            status,
            message: format!(
                "{message} (one request larger than the per-minute token limit: retrying cannot \
                 help; lower --max-output-tokens, let the run compact sooner with a smaller \
                 --context-window, or raise the organization's rate limit)"
            ),
        },
        429 => LlmError::RateLimited {
            provider,
            message,
            retry_after,
        },
        408 | 409 | 500..=599 => LlmError::Unavailable {
            provider,
            status,
            message,
            retry_after,
        },
        _ if overloaded => LlmError::Unavailable {
            provider,
            status: 529,
            message,
            retry_after,
        },
        _ => LlmError::Rejected {
            provider,
            status,
            message,
        },
    }
}

/// Classifies a non-2xx HTTP answer of `provider`, with the delay its headers ask for
/// ([`retry_after`]; on a 429 without one, [`rate_limit_reset`]).
pub fn classify_http(
    provider: &str,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &str,
) -> LlmError {
    let wait = retry_after(headers).or_else(|| {
        if status == 429 {
            rate_limit_reset(headers)
        } else {
            None
        }
    });
    classify(provider, status, wait, ErrorDetail::from_body(body))
}

/// The first 500 bytes of a body (on a character boundary), for error messages.
pub fn snippet(body: &str) -> String {
    let mut end = body.len().min(500);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    body[..end].to_owned()
}

/// The delay a provider asked for: `retry-after-ms` (milliseconds), else `Retry-After` as
/// seconds or as an HTTP date (RFC 9110; the time from now until then, none for a date that
/// has passed).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    retry_after_at(headers, SystemTime::now())
}

/// [`retry_after`] with the clock read at `now`.
fn retry_after_at(headers: &reqwest::header::HeaderMap, now: SystemTime) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return (ms >= 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
    let value = get("retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs >= 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    at.duration_since(now).ok().filter(|d| !d.is_zero())
}

/// When a rate limit resets, from OpenAI's `x-ratelimit-reset-requests` and
/// `x-ratelimit-reset-tokens` (durations such as `1s`, `6m0s`, `20ms`): the later of the two.
/// Read on a 429 that carries no `Retry-After`.
pub fn rate_limit_reset(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .into_iter()
        .filter_map(|name| headers.get(name)?.to_str().ok())
        .filter_map(parse_reset)
        .max()
}

/// A duration as OpenAI writes it: numbers with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`
/// (`6m0s`, `1.5s`, `20ms`); `None` for anything else.
fn parse_reset(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let (unit, seconds) = [
            ("ms", 1e-3),
            ("us", 1e-6),
            ("\u{b5}s", 1e-6),
            ("\u{3bc}s", 1e-6),
            ("ns", 1e-9),
            ("h", 3600.0),
            ("m", 60.0),
            ("s", 1.0),
        ]
        .into_iter()
        .find(|(unit, _)| rest.starts_with(unit))?;
        rest = &rest[unit.len()..];
        total += number * seconds;
    }
    total.is_finite().then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn retry_after_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn retry_after_as_an_http_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let mut h = HeaderMap::new();
        for (date, wait) in [
            (
                "Sun, 06 Nov 1994 08:49:40 GMT",
                Some(Duration::from_secs(3)),
            ),
            (
                "Sun, 06 Nov 1994 09:49:37 GMT",
                Some(Duration::from_secs(3600)),
            ),
            // The obsolete forms RFC 9110 says a recipient must accept.
            (
                "Sunday, 06-Nov-94 08:49:47 GMT",
                Some(Duration::from_secs(10)),
            ),
            ("Sun Nov  6 08:49:38 1994", Some(Duration::from_secs(1))),
            // Past or now: no delay asked.
            ("Sun, 06 Nov 1994 08:49:37 GMT", None),
            ("Sat, 05 Nov 1994 08:49:37 GMT", None),
            ("tomorrow", None),
        ] {
            h.insert("retry-after", HeaderValue::from_static(date));
            assert_eq!(retry_after_at(&h, now), wait, "{date}");
        }
        // A date an hour from the real clock.
        let later = SystemTime::now() + Duration::from_secs(3600);
        h.insert(
            "retry-after",
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let wait = retry_after(&h).unwrap();
        assert!(wait > Duration::from_secs(3590) && wait <= Duration::from_secs(3600));
    }

    #[test]
    fn rate_limit_reset_durations() {
        for (text, wait) in [
            ("1s", Some(Duration::from_secs(1))),
            ("6m0s", Some(Duration::from_secs(360))),
            ("20ms", Some(Duration::from_millis(20))),
            ("1h2m3.5s", Some(Duration::from_millis(3_723_500))),
            ("0.5s", Some(Duration::from_millis(500))),
            ("", None),
            ("soon", None),
            ("5", None),
            ("5x", None),
        ] {
            assert_eq!(parse_reset(text), wait, "{text:?}");
        }
        let mut h = HeaderMap::new();
        assert_eq!(rate_limit_reset(&h), None);
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("1s"));
        h.insert("x-ratelimit-reset-tokens", HeaderValue::from_static("6m0s"));
        assert_eq!(rate_limit_reset(&h), Some(Duration::from_secs(360)));
        // Only a 429 without Retry-After reads them.
        let body = r#"{"error":{"message":"slow down","type":"requests"}}"#;
        let wait = |e: LlmError| match e {
            LlmError::RateLimited { retry_after, .. } => retry_after,
            LlmError::Unavailable { retry_after, .. } => retry_after,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            wait(classify_http("p", 429, &h, body)),
            Some(Duration::from_secs(360))
        );
        assert_eq!(wait(classify_http("p", 503, &h, body)), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(
            wait(classify_http("p", 429, &h, body)),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn classes() {
        let rl = LlmError::RateLimited {
            provider: "openai".into(),
            message: "slow down".into(),
            retry_after: None,
        };
        assert!(rl.is_retryable());
        let auth = LlmError::Rejected {
            provider: "openai".into(),
            status: 401,
            message: "bad key".into(),
        };
        assert!(!auth.is_retryable());
        assert!(
            !LlmError::ContextOverflow {
                message: "x".into()
            }
            .is_retryable()
        );
    }

    #[test]
    fn error_details_from_both_body_styles() {
        let openai = ErrorDetail::from_body(
            r#"{"error":{"message":"m","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        );
        assert_eq!(
            openai,
            ErrorDetail {
                message: "m".into(),
                kind: Some("invalid_request_error".into()),
                code: Some("context_length_exceeded".into()),
                status: None,
            }
        );
        assert_eq!(openai.implied_status(), 400);
        let anthropic = ErrorDetail::from_body(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(anthropic.kind.as_deref(), Some("overloaded_error"));
        assert_eq!(anthropic.implied_status(), 529);
        let openrouter = ErrorDetail::from_body(r#"{"error":{"code":502,"message":"upstream"}}"#);
        assert_eq!(openrouter.implied_status(), 502);
        let plain = ErrorDetail::from_body("<html>Bad Gateway</html>");
        assert_eq!(plain.message, "<html>Bad Gateway</html>");
        assert_eq!(plain.implied_status(), 500);
        let long = "é".repeat(400);
        assert_eq!(ErrorDetail::from_body(&long).message.len(), 500);
    }

    #[test]
    fn classification_table() {
        let d = |message: &str| ErrorDetail {
            message: message.into(),
            ..Default::default()
        };
        let wait = Some(Duration::from_secs(3));
        assert!(matches!(
            classify("p", 429, wait, d("slow")),
            LlmError::RateLimited { retry_after, .. } if retry_after == wait
        ));
        assert!(matches!(
            classify("p", 529, wait, d("Overloaded")),
            LlmError::Unavailable { status: 529, retry_after, .. } if retry_after == wait
        ));
        for status in [408, 409, 500, 502, 503, 504] {
            assert!(
                classify("p", status, None, d("x")).is_retryable(),
                "{status}"
            );
        }
        assert!(matches!(
            classify("p", 413, None, d("too large")),
            LlmError::ContextOverflow { .. }
        ));
        assert!(matches!(
            classify(
                "p",
                400,
                None,
                d("prompt is too long: 5 tokens > 4 maximum")
            ),
            LlmError::ContextOverflow { .. }
        ));
        for status in [400, 401, 403, 404, 422] {
            let e = classify("p", status, None, d("no"));
            assert!(matches!(e, LlmError::Rejected { .. }), "{status}");
            assert!(!e.is_retryable());
        }
        // The overflow messages of the real servers, as their error bodies
        // carry them.
        for body in [
            // OpenAI gpt-5 (input cap under the window)
            r#"{"error":{"message":"Input tokens exceed the configured limit of 272,000 tokens. Your messages resulted in 280123 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":null}}"#,
            // OpenAI Chat Completions (window)
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            // Anthropic (prompt + max_tokens)
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208917 tokens > 200000 maximum"}}"#,
            // Gemini
            r#"[{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]"#,
            // vLLM
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
            // llama.cpp server
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#,
        ] {
            assert!(
                matches!(
                    classify("p", 400, None, ErrorDetail::from_body(body)),
                    LlmError::ContextOverflow { .. }
                ),
                "{body}"
            );
        }
        // A context message on a non-400 status is not an overflow (e.g. a 500 mentioning it).
        assert!(classify("p", 500, None, d("context window service down")).is_retryable());
        let failure = |e: LlmError| match e.into_activity_error() {
            ActivityError::Application(f) => f,
            _ => panic!("not an application failure"),
        };
        let f = failure(classify("p", 429, wait, d("slow")));
        assert_eq!(f.next_retry_delay(), wait);
        assert!(!f.is_non_retryable());
        let f = failure(classify("p", 401, None, d("bad key")));
        assert!(f.is_non_retryable());
        assert_eq!(f.type_name(), Some(FailureType::ProviderFatal.as_str()));
        let f = failure(classify("p", 413, None, d("big")));
        assert_eq!(f.type_name(), Some(FailureType::ContextOverflow.as_str()));
        let f = failure(LlmError::cut_stream("p", "http://u", 42, None));
        assert!(!f.is_non_retryable());
        assert_eq!(f.type_name(), Some("ProviderUnreachable"));
    }

    #[test]
    fn the_budget_sets_the_delay_and_ends_the_call_on_its_last_attempt() {
        let budget = RetryBudget {
            max_attempts: 3,
            backoff_initial: Duration::from_secs(2),
            ..Default::default()
        };
        let unavailable = |retry_after: Option<Duration>| LlmError::Unavailable {
            provider: "openai".into(),
            status: 503,
            message: "down".into(),
            retry_after,
        };
        let failure = |e: LlmError, attempt: u32| match e.into_failure(attempt, &budget) {
            ActivityError::Application(f) => f,
            _ => panic!("not an application failure"),
        };
        let f = failure(unavailable(None), 1);
        assert!(!f.is_non_retryable());
        assert_eq!(f.next_retry_delay(), Some(Duration::from_secs(2)));
        let f = failure(unavailable(None), 2);
        assert_eq!(f.next_retry_delay(), Some(Duration::from_secs(4)));
        assert_eq!(
            f.source_error().to_string(),
            "openai is unavailable (HTTP 503): down; attempt 2 of 3 \
             (worker setting [openai] max_attempts)"
        );
        let f = failure(unavailable(Some(Duration::from_secs(30))), 2);
        assert_eq!(f.next_retry_delay(), Some(Duration::from_secs(30)));
        let f = failure(unavailable(None), 3);
        assert!(f.is_non_retryable());
        assert_eq!(f.next_retry_delay(), None);
        assert_eq!(
            f.type_name(),
            Some(FailureType::ProviderUnavailable.as_str())
        );
        assert_eq!(
            f.source_error().to_string(),
            "openai is unavailable (HTTP 503): down; gave up after 3 attempts \
             (worker setting [openai] max_attempts)"
        );
        // Not retryable at all: the message does not blame the budget.
        let rejected = LlmError::Rejected {
            provider: "anthropic".into(),
            status: 401,
            message: "bad key".into(),
        };
        let f = failure(rejected, 1);
        assert!(f.is_non_retryable());
        assert_eq!(
            f.source_error().to_string(),
            "anthropic rejected the request (HTTP 401): bad key"
        );
    }
}
