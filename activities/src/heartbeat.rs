//! Heartbeating while an activity's work runs, so a dead worker's call is retried elsewhere
//! within the heartbeat timeout.

use std::time::Duration;

use temporalio_sdk::activities::{ActivityContext, ActivityError};

/// Runs `work`, heartbeating every `every`; returns `Err(cancelled)` if the activity is
/// cancelled first. The first beat comes after one period: a quick call sends none at all.
pub(crate) async fn with_heartbeat<T>(
    ctx: &ActivityContext,
    every: Duration,
    work: impl std::future::Future<Output = T>,
) -> Result<T, ActivityError> {
    tokio::pin!(work);
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            r = &mut work => return Ok(r),
            _ = ctx.cancelled() => return Err(ActivityError::cancelled()),
            _ = beat.tick() => { let _ = ctx.record_heartbeat(()).await; }
        }
    }
}
