//! Waiting on a run without holding it: `--wait-timeout` and Ctrl-C end the wait, never the
//! run (exit 3). `submit --wait`, `result --wait` and `watch` all wait through
//! [`until_detached`], and say how to come back with [`stopped`] or [`detached`].

use std::{future::Future, time::Duration};

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited<T> {
    /// What was awaited finished.
    Done(T),
    /// The time limit passed.
    TimedOut,
    /// The user pressed Ctrl-C.
    Detached,
}

/// Awaits `work` for up to `limit` (no limit: `None`), or until Ctrl-C. `work` is dropped when
/// the wait ends early (and with it a spinner line it drew).
pub(crate) async fn until_detached<T>(
    limit: Option<Duration>,
    work: impl Future<Output = T>,
) -> Waited<T> {
    let limited = async {
        match limit {
            Some(limit) => tokio::time::timeout(limit, work).await.ok(),
            None => Some(work.await),
        }
    };
    tokio::select! {
        done = limited => done.map_or(Waited::TimedOut, Waited::Done),
        _ = tokio::signal::ctrl_c() => Waited::Detached,
    }
}

/// What to say when `submit --wait` or `result --wait` stops waiting for a run that goes on
/// (also the `detail` of their `--json` object).
pub(crate) fn stopped(run: &str) -> String {
    format!("stopped waiting for {run}; it goes on (`baton result {run} --wait` waits again)")
}

/// What to print when the user detaches (Ctrl-C) from a run that goes on, having seen up to
/// `turn`.
pub(crate) fn detached(run: &str, turn: u32) -> String {
    format!(
        "detached from {run}; the run goes on. Re-attach with: baton watch {run}{}",
        if turn > 0 {
            format!(" --since {turn}")
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[tokio::test]
    async fn a_wait_ends_with_the_work_or_at_its_limit() {
        assert_eq!(until_detached(None, async { 7 }).await, Waited::Done(7));
        assert_eq!(
            until_detached(Some(Duration::from_secs(60)), async { 7 }).await,
            Waited::Done(7)
        );
        assert_eq!(
            until_detached(
                Some(Duration::from_millis(10)),
                std::future::pending::<()>()
            )
            .await,
            Waited::TimedOut
        );
    }

    #[test]
    fn detaching_says_how_to_re_attach() {
        assert_eq!(
            detached("r1", 3),
            "detached from r1; the run goes on. Re-attach with: baton watch r1 --since 3"
        );
        assert!(detached("r1", 0).ends_with("baton watch r1"));
        assert_eq!(
            stopped("r1"),
            "stopped waiting for r1; it goes on (`baton result r1 --wait` waits again)"
        );
    }
}
