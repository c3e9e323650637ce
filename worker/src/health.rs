//! gRPC health service (grpc.health.v1) for Kubernetes probes.
//!
//! - `""` and `baton.worker` (startup and readiness): NOT_SERVING until the worker is connected
//!   to Temporal and polling, while Temporal has been unreachable for [`UNREACHABLE_AFTER`]
//!   (checked every [`CHECK_EVERY`]), and from the moment it starts shutting down.
//! - `baton.worker.liveness`: SERVING as long as the process answers, through outages and
//!   draining alike: restarting workers does not bring Temporal back, and a draining worker
//!   must be left to finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use temporalio_client::{Client, NamespacedClient, grpc::WorkflowService};
use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeNamespaceRequest;
use tonic::transport::{Server, server::TcpIncoming};
use tonic_health::{ServingStatus, server::HealthReporter};
use tracing::{info, warn};

/// Name of the worker's own readiness entry (besides the overall "" entry probes ask for).
pub(crate) const SERVICE: &str = "baton.worker";
/// Name of the liveness entry.
pub(crate) const LIVENESS: &str = "baton.worker.liveness";
/// How often the connection to Temporal is checked.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(5);
/// How long Temporal must have been unreachable before the worker reports NOT_SERVING (a
/// frontend restart or a load balancer's hiccup should not flip readiness).
pub(crate) const UNREACHABLE_AFTER: Duration = Duration::from_secs(15);
/// One check's budget.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Reports the worker's health.
pub(crate) struct Health {
    reporter: HealthReporter,
    /// Connected and polling (set once).
    started: AtomicBool,
    /// Temporal answered the last check (or the failures are younger than UNREACHABLE_AFTER).
    reachable: AtomicBool,
    /// Shutting down: never SERVING again.
    draining: AtomicBool,
}

impl Health {
    /// Binds `addr` (failing at once if it cannot) and serves NOT_SERVING until told otherwise.
    pub(crate) async fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        let (reporter, service) = tonic_health::server::health_reporter();
        let health = Self {
            reporter,
            started: AtomicBool::new(false),
            reachable: AtomicBool::new(true),
            draining: AtomicBool::new(false),
        };
        health.publish().await;
        health
            .reporter
            .set_service_status(LIVENESS, ServingStatus::Serving)
            .await;
        let incoming = TcpIncoming::bind(addr)
            .with_context(|| format!("cannot listen for health checks on {addr}"))?;
        tokio::spawn(async move {
            if let Err(e) = Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
            {
                warn!(cause = %e, "health service stopped");
            }
        });
        info!(%addr, "health service listening");
        Ok(health)
    }

    /// Connected and polling.
    pub(crate) async fn serving(&self) {
        self.started.store(true, Ordering::SeqCst);
        self.publish().await;
    }

    /// Shutting down: NOT_SERVING from now on.
    pub(crate) async fn draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.publish().await;
    }

    async fn publish(&self) {
        let status = if self.started.load(Ordering::SeqCst)
            && self.reachable.load(Ordering::SeqCst)
            && !self.draining.load(Ordering::SeqCst)
        {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status("", status).await;
        self.reporter.set_service_status(SERVICE, status).await;
    }

    /// Checks the connection to Temporal every [`CHECK_EVERY`] (describing the worker's
    /// namespace, which also fails on a revoked credential) for as long as the process runs,
    /// and reports NOT_SERVING while it has failed for [`UNREACHABLE_AFTER`]. Logs each change.
    pub(crate) fn watch_temporal(self: Arc<Self>, client: Client) {
        tokio::spawn(async move {
            let mut failing_since: Option<Instant> = None;
            let mut ticks = tokio::time::interval(CHECK_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let outcome = check(&client).await;
                let was = self.reachable.load(Ordering::SeqCst);
                let reachable = match &outcome {
                    Ok(()) => {
                        failing_since = None;
                        true
                    }
                    Err(_) => {
                        failing_since.get_or_insert_with(Instant::now).elapsed() < UNREACHABLE_AFTER
                    }
                };
                if reachable == was {
                    continue;
                }
                match outcome {
                    Ok(()) => info!("Temporal is reachable again: health SERVING"),
                    Err(e) => warn!(
                        cause = %e,
                        failing_secs = UNREACHABLE_AFTER.as_secs(),
                        "Temporal is unreachable: health NOT_SERVING until it answers again"
                    ),
                }
                self.reachable.store(reachable, Ordering::SeqCst);
                self.publish().await;
            }
        });
    }
}

/// One check of the connection: describe the client's namespace, within [`CHECK_TIMEOUT`].
async fn check(client: &Client) -> Result<(), String> {
    match describe_namespace(client, CHECK_TIMEOUT).await {
        Ok(()) => Ok(()),
        Err(Some(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Err(None) => Err(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
    }
}

/// Describes the client's namespace within `timeout`: the server's error status, or `None`
/// when it did not answer in time.
pub(crate) async fn describe_namespace(
    client: &Client,
    timeout: Duration,
) -> Result<(), Option<tonic::Status>> {
    let mut client = client.clone();
    let request = DescribeNamespaceRequest {
        namespace: client.namespace(),
        ..Default::default()
    };
    match tokio::time::timeout(
        timeout,
        WorkflowService::describe_namespace(&mut client, tonic::Request::new(request)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(Some(status)),
        Err(_) => Err(None),
    }
}
