//! What a GitHub call can come to besides success.

/// Why a call to GitHub failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GitHubError {
    /// Will not get better by retrying: a refusal (401, 403, 404, 422) with GitHub's words
    /// and what to check, or settings that cannot work.
    #[error("{0}")]
    Refused(String),
    /// May get better: a network failure, a timeout, a 5xx, a secondary rate limit.
    #[error("{0}")]
    Transient(String),
}

impl GitHubError {
    /// Whether a retry may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}
