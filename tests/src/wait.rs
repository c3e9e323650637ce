//! Polling helpers and small utilities.

use std::time::{Duration, Instant};

use anyhow::bail;

/// Interval between two polls of [`wait_until`] / [`wait_until_blocking`].
pub const POLL_INTERVAL: Duration = Duration::from_millis(150);

/// Polls `f` every ~150 ms until it returns `Ok(Some(value))`, and returns
/// that value. `Ok(None)` means "not yet"; an `Err` is also treated as "not
/// yet" (the last error is reported if the deadline passes). On timeout the
/// error says what was awaited: `timed out after 30s waiting for <what>`.
///
/// Use an async closure so that `?` works inside without type annotations:
///
/// ```ignore
/// let status = wait_until(Duration::from_secs(30), "workflow to complete", async || {
///     let s = server.workflow_status(&id)?;
///     Ok((s != "WORKFLOW_EXECUTION_STATUS_RUNNING").then_some(s))
/// }).await?;
/// ```
pub async fn wait_until<T, F>(timeout: Duration, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: AsyncFnMut() -> anyhow::Result<Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last_err = match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        if Instant::now() >= deadline {
            return Err(timeout_error(timeout, what, last_err));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Blocking variant of [`wait_until`] for non-async tests.
pub fn wait_until_blocking<T, F>(timeout: Duration, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> anyhow::Result<Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last_err = match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        if Instant::now() >= deadline {
            return Err(timeout_error(timeout, what, last_err));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn timeout_error(timeout: Duration, what: &str, last_err: Option<anyhow::Error>) -> anyhow::Error {
    match last_err {
        Some(e) => {
            anyhow::anyhow!("timed out after {timeout:?} waiting for {what}; last error: {e:#}")
        }
        None => anyhow::anyhow!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// Fails unless `f` keeps returning `Ok(true)` for the whole `duration`
/// (polled every ~150 ms): for asserting that something does *not* happen,
/// e.g. a workflow staying blocked.
pub async fn assert_holds_for<F>(duration: Duration, what: &str, mut f: F) -> anyhow::Result<()>
where
    F: AsyncFnMut() -> anyhow::Result<bool>,
{
    let deadline = Instant::now() + duration;
    loop {
        if !f().await? {
            bail!("expected {what} to hold for {duration:?}, but it stopped holding");
        }
        if Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// `name` plus a short random suffix (`"<name>-1a2b3c4d"`), for task queues
/// and workflow ids that must not collide between tests.
pub fn unique(name: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{name}-{}", &id[..8])
}
