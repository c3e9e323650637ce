//! The retry budget of a provider: how long one request may take, how many attempts a model
//! call gets and how long it waits between them. The worker's operator sets it per provider
//! section (`[openai]`, `[anthropic]`, ...); the activity applies it. The workflow's retry
//! policy is only an envelope around it ([`LLM_MAX_ATTEMPTS`], [`LLM_START_TO_CLOSE`]).

use std::time::Duration;

use baton_workflows::workflow::{LLM_MAX_ATTEMPTS, LLM_START_TO_CLOSE};
use thiserror::Error;

/// Default timeout of one HTTP request, a whole streamed answer included: generous (a
/// 64K-token answer at 50 tokens/s takes 21 min), since a stalled stream is cut by
/// [`DEFAULT_STREAM_IDLE`] long before it.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);
/// Default longest silence of a stream between two events (keep-alive comments count): a
/// stream that stalls is cut after this, while one that keeps sending may run up to the
/// request timeout.
pub const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(300);
/// Default attempts of one model call.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
/// Default wait before the first retry.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Default cap of the doubling wait.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The longest a provider's `Retry-After` is honoured for.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(15 * 60);
/// The longest `backoff_max_secs` accepted.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60 * 60);
/// What an attempt needs besides its HTTP request (resolving and storing the conversation):
/// the request timeout must leave this much of the activity's start-to-close timeout.
pub const ATTEMPT_MARGIN: Duration = Duration::from_secs(5 * 60);

/// One provider's timeouts and retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBudget {
    /// Timeout of one HTTP request (a streamed answer included).
    pub request_timeout: Duration,
    /// Attempts of one model call, the first included.
    pub max_attempts: u32,
    /// Wait before the first retry; it doubles with each attempt.
    pub backoff_initial: Duration,
    /// Cap of the doubling wait.
    pub backoff_max: Duration,
    /// Longest silence of a stream between two reads before it is cut (retryable).
    pub stream_idle: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_initial: DEFAULT_BACKOFF_INITIAL,
            backoff_max: DEFAULT_BACKOFF_MAX,
            stream_idle: DEFAULT_STREAM_IDLE,
        }
    }
}

/// What to do after a retryable failure of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAttempt {
    /// Try again after this long.
    After(Duration),
    /// That was the last allowed attempt.
    GiveUp {
        /// Attempts made.
        attempts: u32,
    },
}

/// A budget the worker refuses to start with; names the key (`<section>.<key>`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// Outside the accepted range.
    #[error("{section}.{key} = {value} is out of range: {rule}")]
    OutOfRange {
        /// The settings section (`openai`, `anthropic`, ...).
        section: String,
        /// The key within it.
        key: &'static str,
        /// The value given.
        value: u64,
        /// What is accepted.
        rule: String,
    },
}

impl RetryBudget {
    /// The wait before the attempt after `attempt` (1-based) without a provider's hint:
    /// `backoff_initial` x 2^(attempt-1), capped by `backoff_max`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.backoff_initial
            .saturating_mul(1u32 << doublings)
            .min(self.backoff_max)
    }

    /// After a retryable failure of `attempt` (1-based): give up on the last allowed attempt,
    /// else wait the backoff, or the provider's `retry_after` when it asks for longer (capped
    /// by [`MAX_RETRY_AFTER`]).
    pub fn next(&self, attempt: u32, retry_after: Option<Duration>) -> NextAttempt {
        if attempt >= self.max_attempts {
            return NextAttempt::GiveUp { attempts: attempt };
        }
        let backoff = self.backoff(attempt);
        let asked = retry_after.map_or(Duration::ZERO, |d| d.min(MAX_RETRY_AFTER));
        NextAttempt::After(asked.max(backoff))
    }

    /// Refuses zero and absurd values, naming the key of `section`.
    pub fn check(&self, section: &str) -> Result<(), BudgetError> {
        let out = |key: &'static str, value: u64, rule: String| BudgetError::OutOfRange {
            section: section.to_owned(),
            key,
            value,
            rule,
        };
        let secs = |d: Duration| d.as_secs();
        let longest_request = LLM_START_TO_CLOSE.saturating_sub(ATTEMPT_MARGIN);
        if self.request_timeout.is_zero() || self.request_timeout > longest_request {
            return Err(out(
                "request_timeout_secs",
                secs(self.request_timeout),
                format!(
                    "between 1 and {} (the model activity's start-to-close timeout is {} s, \
                     of which {} s are kept for the rest of the call)",
                    secs(longest_request),
                    secs(LLM_START_TO_CLOSE),
                    secs(ATTEMPT_MARGIN)
                ),
            ));
        }
        if self.stream_idle.is_zero() || self.stream_idle > longest_request {
            return Err(out(
                "stream_idle_secs",
                secs(self.stream_idle),
                format!("between 1 and {}", secs(longest_request)),
            ));
        }
        if self.max_attempts == 0 || self.max_attempts > LLM_MAX_ATTEMPTS {
            return Err(out(
                "max_attempts",
                u64::from(self.max_attempts),
                format!(
                    "between 1 and {LLM_MAX_ATTEMPTS} (the workflow's attempt limit of the \
                     model activities)"
                ),
            ));
        }
        if self.backoff_initial.is_zero() || self.backoff_initial > MAX_BACKOFF {
            return Err(out(
                "backoff_initial_secs",
                secs(self.backoff_initial),
                format!("between 1 and {}", secs(MAX_BACKOFF)),
            ));
        }
        if self.backoff_max < self.backoff_initial || self.backoff_max > MAX_BACKOFF {
            return Err(out(
                "backoff_max_secs",
                secs(self.backoff_max),
                format!(
                    "between backoff_initial_secs ({}) and {}",
                    secs(self.backoff_initial),
                    secs(MAX_BACKOFF)
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn budget(max_attempts: u32, initial: u64, max: u64) -> RetryBudget {
        RetryBudget {
            max_attempts,
            backoff_initial: S(initial),
            backoff_max: S(max),
            ..Default::default()
        }
    }

    #[test]
    fn backoff_doubles_from_the_initial_wait_up_to_the_cap() {
        let b = budget(100, 1, 60);
        let waits: Vec<u64> = (1..=9).map(|a| b.backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(budget(100, 3, 10).backoff(1), S(3));
        assert_eq!(budget(100, 3, 10).backoff(2), S(6));
        assert_eq!(budget(100, 3, 10).backoff(3), S(10));
        // No overflow however far the attempts go.
        assert_eq!(b.backoff(u32::MAX), S(60));
        assert_eq!(budget(100, 3600, 3600).backoff(99), S(3600));
    }

    #[test]
    fn the_last_allowed_attempt_gives_up() {
        let b = budget(2, 1, 60);
        assert_eq!(b.next(1, None), NextAttempt::After(S(1)));
        assert_eq!(b.next(2, None), NextAttempt::GiveUp { attempts: 2 });
        // A budget lowered while a call was retrying: the next failure ends it.
        assert_eq!(b.next(5, None), NextAttempt::GiveUp { attempts: 5 });
        let one = budget(1, 1, 60);
        assert_eq!(one.next(1, Some(S(5))), NextAttempt::GiveUp { attempts: 1 });
    }

    #[test]
    fn retry_after_is_honoured_capped_and_never_below_the_backoff() {
        let b = budget(8, 3, 60);
        assert_eq!(b.next(1, Some(S(20))), NextAttempt::After(S(20)));
        assert_eq!(b.next(1, Some(S(1))), NextAttempt::After(S(3)), "floor");
        assert_eq!(
            b.next(4, Some(S(2))),
            NextAttempt::After(S(24)),
            "floor at attempt 4: 3 x 2^3"
        );
        assert_eq!(
            b.next(1, Some(S(24 * 3600))),
            NextAttempt::After(MAX_RETRY_AFTER),
            "a day is capped at 15 min"
        );
        assert_eq!(
            b.next(1, Some(Duration::from_millis(3500))),
            NextAttempt::After(Duration::from_millis(3500))
        );
    }

    #[test]
    fn absurd_budgets_are_refused_naming_the_key() {
        assert_eq!(RetryBudget::default().check("openai"), Ok(()));
        let key = |b: RetryBudget| match b.check("anthropic") {
            Err(BudgetError::OutOfRange { section, key, .. }) => format!("{section}.{key}"),
            Ok(()) => "ok".to_owned(),
        };
        assert_eq!(key(budget(0, 1, 60)), "anthropic.max_attempts");
        assert_eq!(key(budget(101, 1, 60)), "anthropic.max_attempts");
        assert_eq!(key(budget(100, 1, 60)), "ok");
        assert_eq!(key(budget(8, 0, 60)), "anthropic.backoff_initial_secs");
        assert_eq!(key(budget(8, 10, 5)), "anthropic.backoff_max_secs");
        assert_eq!(key(budget(8, 1, 7200)), "anthropic.backoff_max_secs");
        assert_eq!(key(budget(8, 5, 5)), "ok");
        let timeout = |secs: u64| RetryBudget {
            request_timeout: S(secs),
            ..Default::default()
        };
        assert_eq!(key(timeout(0)), "anthropic.request_timeout_secs");
        assert_eq!(key(timeout(3300)), "ok");
        assert_eq!(key(timeout(3301)), "anthropic.request_timeout_secs");
        let Err(e) = budget(8, 10, 5).check("openai") else {
            panic!("accepted");
        };
        assert_eq!(
            e.to_string(),
            "openai.backoff_max_secs = 5 is out of range: between backoff_initial_secs (10) and 3600"
        );
    }
}
