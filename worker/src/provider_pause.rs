//! A provider's `Retry-After` applied to the whole fleet: when a model call
//! meets a 429 that says when to come back, the worker sets the provider's task queue
//! (`activities::model_queue`) to a server-side rate of 0 until then, so no worker of the fleet
//! takes another call to that provider meanwhile, and removes the limit when the time is up
//! (the queue's own `max_requests_per_second` then applies again).
//!
//! The reason stored with the limit says until when (`paused until <RFC 3339>`), so a pause
//! whose worker died before lifting it is lifted by any other worker: each one looks at its
//! provider queues every [`SWEEP_EVERY`] and lifts pauses that are over.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use baton_activities::llm::ProviderPause;
use temporalio_client::{Client, NamespacedClient, grpc::WorkflowService};
use temporalio_common::protos::temporal::api::{
    enums::v1::TaskQueueType,
    taskqueue::v1::{RateLimit, TaskQueue},
    workflowservice::v1::{
        DescribeTaskQueueRequest, UpdateTaskQueueConfigRequest,
        update_task_queue_config_request::RateLimitUpdate,
    },
};
use tracing::{info, warn};

/// How often a worker looks for pauses that are over.
const SWEEP_EVERY: Duration = Duration::from_secs(15);
/// The words before the end time in a pause's reason.
const UNTIL: &str = "paused until ";
/// The longest pause one answer may cause.
const MAX_PAUSE: Duration = Duration::from_secs(15 * 60);

/// The fleet-wide pauses of one worker's provider queues.
#[derive(Clone)]
pub(crate) struct QueuePauses(Arc<Inner>);

struct Inner {
    client: Client,
    /// Provider name -> its task queue.
    queues: HashMap<String, String>,
    /// Provider name -> end of the pause this worker set last.
    until: Mutex<HashMap<String, SystemTime>>,
}

impl QueuePauses {
    /// Pauses of `queues` (provider name -> task queue) through `client`.
    pub(crate) fn new(client: Client, queues: HashMap<String, String>) -> Self {
        Self(Arc::new(Inner {
            client,
            queues,
            until: Mutex::new(HashMap::new()),
        }))
    }

    /// Lifts, now and every [`SWEEP_EVERY`], the pauses of the provider queues that are over
    /// (set by a worker that is gone).
    pub(crate) fn start_sweeper(&self) {
        let inner = self.0.clone();
        tokio::spawn(async move {
            loop {
                for queue in inner.queues.values() {
                    if let Some(until) = inner.paused_until(queue).await
                        && until <= SystemTime::now()
                    {
                        info!(task_queue = %queue, "lifting a provider pause that is over");
                        inner.set(queue, None, LIFTED.into()).await;
                    }
                }
                tokio::time::sleep(SWEEP_EVERY).await;
            }
        });
    }
}

/// The reason stored when a pause is lifted.
const LIFTED: &str = "baton: the provider's pause is over";

impl Inner {
    /// The end of the pause `queue` is under, from the reason stored with its rate limit.
    async fn paused_until(&self, queue: &str) -> Option<SystemTime> {
        let mut service = self.client.clone();
        let request = DescribeTaskQueueRequest {
            namespace: self.client.namespace(),
            task_queue: Some(TaskQueue {
                name: queue.to_owned(),
                ..Default::default()
            }),
            task_queue_type: TaskQueueType::Activity as i32,
            report_config: true,
            ..Default::default()
        };
        let described =
            WorkflowService::describe_task_queue(&mut service, tonic::Request::new(request))
                .await
                .ok()?
                .into_inner();
        let limit = described.config?.queue_rate_limit?;
        // A lifted pause leaves its reason; only a limit in force counts.
        limit.rate_limit?;
        paused_until(&limit.metadata?.reason)
    }

    /// Sets (`Some`) or removes (`None`) the server-side rate limit of `queue`.
    async fn set(&self, queue: &str, rate: Option<f32>, reason: String) -> bool {
        let mut service = self.client.clone();
        let request = UpdateTaskQueueConfigRequest {
            namespace: self.client.namespace(),
            identity: self.client.identity(),
            task_queue: queue.to_owned(),
            task_queue_type: TaskQueueType::Activity as i32,
            update_queue_rate_limit: Some(RateLimitUpdate {
                rate_limit: rate.map(|requests_per_second| RateLimit {
                    requests_per_second,
                }),
                reason,
            }),
            ..Default::default()
        };
        match WorkflowService::update_task_queue_config(&mut service, tonic::Request::new(request))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                warn!(task_queue = %queue, error = %e.message(), "cannot change the rate of a provider's task queue");
                false
            }
        }
    }
}

impl ProviderPause for QueuePauses {
    fn pause(&self, provider: &str, wait: Duration) {
        let Some(queue) = self.0.queues.get(provider).cloned() else {
            return;
        };
        let wait = wait.min(MAX_PAUSE);
        let end = SystemTime::now() + wait;
        {
            let Ok(mut until) = self.0.until.lock() else {
                return;
            };
            if until.get(provider).is_some_and(|t| *t >= end) {
                return;
            }
            until.insert(provider.to_owned(), end);
        }
        let inner = self.0.clone();
        let provider = provider.to_owned();
        tokio::spawn(async move {
            let reason = format!(
                "baton: {provider} answered 429 with Retry-After {}s; {UNTIL}{}",
                wait.as_secs_f64().ceil(),
                humantime::format_rfc3339_millis(end)
            );
            if !inner.set(&queue, Some(0.0), reason).await {
                return;
            }
            info!(provider = %provider, task_queue = %queue, wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "provider paused for the fleet");
            tokio::time::sleep(wait).await;
            // A later pause (this worker's or another's) moved the end: that one lifts it.
            if inner.paused_until(&queue).await.is_some_and(|t| t > end) {
                return;
            }
            inner.set(&queue, None, LIFTED.into()).await;
        });
    }
}

/// The end of a pause from the reason stored with a queue's rate limit.
fn paused_until(reason: &str) -> Option<SystemTime> {
    let at = reason.find(UNTIL)? + UNTIL.len();
    let time = reason[at..].split_whitespace().next()?;
    humantime::parse_rfc3339_weak(time).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_reason_gives_its_end() {
        let end = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_529_028_475);
        let reason = format!(
            "baton: openai answered 429 with Retry-After 3s; {UNTIL}{}",
            humantime::format_rfc3339_millis(end)
        );
        assert_eq!(paused_until(&reason), Some(end));
        assert_eq!(paused_until("set by an operator"), None);
        assert_eq!(paused_until("paused until never"), None);
    }
}
