//! Heartbeating while an activity's work runs, so a dead worker's call is retried elsewhere
//! within the heartbeat timeout (`workflows/src/workflow/options.rs`), and a superseded attempt
//! learns it is cancelled within one beat.
//!
//! The beats come from a task of their own ([`Heartbeat`]), not from the activity's future: a
//! tool that keeps its future busy (a long poll doing sync work, a blob store read) cannot hold
//! them back, and the whole activity beats, its set-up (workspace restore) and wrap-up
//! (snapshot, output upload) included.
//!
//! Temporal core throttles heartbeats per activity: the first goes to the server at once, later
//! ones at most every `min(0.8 x heartbeat timeout, max_heartbeat_throttle_interval)`, carrying
//! the latest details. The worker sets that maximum to [`HEARTBEAT_THROTTLE`], no longer than
//! any interval below, so each beat is one `RecordActivityTaskHeartbeat` call and the interval
//! here, not 0.8 x the timeout, decides how close to the timeout a heartbeat arrives. A
//! streaming model call beats up to ten times a second while text arrives
//! ([`Heartbeat::start_on_change`], `llm::live`): its details are what `baton watch` shows.

use std::time::{Duration, SystemTime};

use temporalio_common::data_converters::TemporalSerializable;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use tokio::{sync::watch, task::JoinHandle, time::Instant};

/// The worker's `max_heartbeat_throttle_interval`: at most this between two heartbeat calls
/// of one activity, so no beat of the activities (every 1 s or more, a streaming model call's
/// every `llm::live::STREAM_BEAT`) is held back.
pub const HEARTBEAT_THROTTLE: Duration = Duration::from_millis(100);

/// Leeway for the difference between this host's clock and the server's.
const CLOCK_LEEWAY: Duration = Duration::from_secs(2);

/// Whether the server has timed this attempt out before it began here: it was handed to this
/// worker (`started`, the server's clock) longer ago than its heartbeat timeout plus
/// [`CLOCK_LEEWAY`], and it has not heartbeated yet. That is a worker that stalled while it held
/// the task (a frozen VM, a stopped process: its polls stay open and take retries); the server
/// has retried the call since, so running it here would run it twice.
pub(crate) fn timed_out_before_start(
    heartbeat_timeout: Option<Duration>,
    started: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    let (Some(timeout), Some(started)) = (heartbeat_timeout, started) else {
        return false;
    };
    !timeout.is_zero()
        && now
            .duration_since(started)
            .is_ok_and(|waited| waited > timeout + CLOCK_LEEWAY)
}

/// How long an attempt that looks timed out waits for the server to confirm it.
const CONFIRM_STALE: Duration = Duration::from_secs(3);

/// Whether the server has superseded this attempt before it began: it looks timed out by the
/// clocks ([`timed_out_before_start`]), and the server confirms it. A heartbeat with `details`
/// (the previous attempt's, so a retry loses nothing) asks; the server's "not found" cancels
/// the attempt. A worker whose clock runs ahead sees no cancellation and runs the attempt,
/// [`CONFIRM_STALE`] late, instead of refusing every attempt.
pub(crate) async fn superseded<T>(ctx: &ActivityContext, details: T) -> bool
where
    T: TemporalSerializable + Send + Sync + 'static,
{
    let info = ctx.info();
    if !timed_out_before_start(info.heartbeat_timeout, info.started_time, SystemTime::now()) {
        return false;
    }
    if ctx.record_heartbeat(details).await.is_err() {
        return false;
    }
    tokio::time::timeout(CONFIRM_STALE, ctx.cancelled())
        .await
        .is_ok()
}

/// Heartbeats of one activity attempt, sent every `every` from a task of their own until
/// dropped. The first beat comes after one period: a quick call sends none at all (a beat at
/// once would only re-arm the server's heartbeat timer, so a dead worker's call would be
/// retried later).
pub(crate) struct Heartbeat {
    task: JoinHandle<()>,
}

impl Heartbeat {
    /// Starts beating with the details `details` returns at each beat.
    pub(crate) fn start<T, F>(ctx: &ActivityContext, every: Duration, details: F) -> Self
    where
        T: TemporalSerializable + Send + Sync + 'static,
        F: Fn() -> T + Send + 'static,
    {
        let ctx = ctx.clone();
        let task = tokio::spawn(async move {
            let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            // A beat held up (a starved runtime) is sent once, not in a burst.
            beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                beat.tick().await;
                let _ = ctx.record_heartbeat(details()).await;
            }
        });
        Self { task }
    }

    /// Starts beating every `every`, and soon after each change of `changes`: at most one
    /// beat per `min_gap` (changes in between are coalesced into the next beat), with the
    /// details `details` makes of the latest value. Once the sender is gone, every `every`.
    pub(crate) fn start_on_change<S, T, F>(
        ctx: &ActivityContext,
        every: Duration,
        min_gap: Duration,
        mut changes: watch::Receiver<S>,
        details: F,
    ) -> Self
    where
        S: Send + Sync + 'static,
        T: TemporalSerializable + Send + Sync + 'static,
        F: Fn(&S) -> T + Send + 'static,
    {
        let ctx = ctx.clone();
        let task = tokio::spawn(async move {
            let mut open = true;
            let mut idle = Instant::now() + every;
            loop {
                tokio::select! {
                    changed = changes.changed(), if open => {
                        if changed.is_err() {
                            open = false;
                            continue;
                        }
                    }
                    () = tokio::time::sleep_until(idle) => {}
                }
                let beat = details(&changes.borrow_and_update());
                let _ = ctx.record_heartbeat(beat).await;
                idle = Instant::now() + every;
                tokio::time::sleep(min_gap).await;
            }
        });
        Self { task }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `work` until it ends or the activity is cancelled (`Err(cancelled)`).
pub(crate) async fn until_cancelled<T>(
    ctx: &ActivityContext,
    work: impl std::future::Future<Output = T>,
) -> Result<T, ActivityError> {
    tokio::select! {
        r = work => Ok(r),
        _ = ctx.cancelled() => Err(ActivityError::cancelled()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_workflows::workflow::{LLM_HEARTBEAT, TOOL_HEARTBEAT};

    /// Every beat goes out (the core throttle is no longer than any interval), and at least
    /// three beats fit in each heartbeat timeout: a heartbeat may be two beats late before a
    /// live attempt is timed out.
    #[test]
    fn every_beat_is_sent_and_several_fit_in_each_timeout() {
        for (every, timeout) in [
            (crate::tools::HEARTBEAT_EVERY, TOOL_HEARTBEAT),
            (crate::llm::HEARTBEAT_EVERY, LLM_HEARTBEAT),
        ] {
            assert!(HEARTBEAT_THROTTLE <= every, "{every:?} would be throttled");
            assert!(every * 3 <= timeout, "{every:?} against {timeout:?}");
        }
        // A streaming model call's beats are not held back either.
        assert!(HEARTBEAT_THROTTLE <= crate::llm::live::STREAM_BEAT);
    }

    #[test]
    fn an_attempt_handed_over_longer_ago_than_its_timeout_is_not_run() {
        let now = SystemTime::now();
        let ago = |secs| Some(now - Duration::from_secs(secs));
        let timeout = Some(TOOL_HEARTBEAT);
        assert!(!timed_out_before_start(timeout, ago(0), now));
        // Within the timeout plus the clock leeway: run.
        assert!(!timed_out_before_start(timeout, ago(4), now));
        assert!(timed_out_before_start(timeout, ago(6), now));
        assert!(timed_out_before_start(timeout, ago(60), now));
        // No heartbeat timeout, no start time, or a start in this host's future: run.
        assert!(!timed_out_before_start(None, ago(60), now));
        assert!(!timed_out_before_start(Some(Duration::ZERO), ago(60), now));
        assert!(!timed_out_before_start(timeout, None, now));
        assert!(!timed_out_before_start(
            timeout,
            Some(now + Duration::from_secs(60)),
            now
        ));
    }
}
