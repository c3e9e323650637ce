//! The provider error taxonomy (DESIGN.md §5) and its mapping to Temporal failures: whether a
//! retry can help is decided here, once, and Temporal's retry policy does the retrying.

use std::time::Duration;

use baton_workflows::activities::{BAD_INPUT, CONTEXT_OVERFLOW, PROVIDER_FATAL};
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

    /// The Temporal failure for this error: typed, retryable or not, with the provider's
    /// requested delay as the next retry delay.
    pub fn into_activity_error(self) -> ActivityError {
        let (type_name, retry_after) = match &self {
            Self::RateLimited { retry_after, .. } => ("RateLimited", *retry_after),
            Self::Unavailable { retry_after, .. } => ("ProviderUnavailable", *retry_after),
            Self::Transport { .. } => ("ProviderUnreachable", None),
            Self::BadResponse { .. } => ("ProviderBadResponse", None),
            Self::ContextOverflow { .. } => (CONTEXT_OVERFLOW, None),
            Self::Rejected { .. } => (PROVIDER_FATAL, None),
            Self::Config(_) => (BAD_INPUT, None),
        };
        let non_retryable = !self.is_retryable();
        let message = self.to_string();
        ActivityError::application(
            ApplicationFailure::builder(message)
                .type_name(type_name.to_owned())
                .non_retryable(non_retryable)
                .maybe_next_retry_delay(retry_after)
                .build(),
        )
    }
}

/// Parses `retry-after-ms` (milliseconds) or `Retry-After` (seconds; HTTP dates are ignored).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return (ms >= 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
    get("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s >= 0.0)
        .map(Duration::from_secs_f64)
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
}
