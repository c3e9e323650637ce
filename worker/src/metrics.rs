//! Metrics export: one meter for Temporal's own worker metrics (`temporal_*`) and baton's
//! (`baton_*`, see [`crate::observers`]), served as Prometheus text on
//! `GET /metrics` at `metrics_addr`, or (worker built with the `otel` feature) pushed every 10 s
//! to an OTLP/HTTP collector at `<otel_endpoint>/v1/metrics`.
//!
//! The meter is Temporal core's own Prometheus exporter: the runtime records its worker metrics
//! on it and baton's instruments are created on the same meter, so one registry serves both
//! from one endpoint. Counters carry the `_total` suffix and durations are in seconds
//! (Prometheus conventions).
//!
//! Gauges of what is open now (runs by `BatonState`, runs awaiting approval) come from a
//! poller of Temporal visibility scoped to the worker's task queue: workflow code cannot keep
//! a gauge (it replays and moves between workers), visibility is the fleet-wide truth. Every
//! worker of a queue reports the same value; aggregate with `max`.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use baton_workflows::WORKFLOW_TYPE;
use temporalio_client::{Client, WorkflowCountOptions};
use temporalio_common::telemetry::{
    HistogramBucketOverrides, PrometheusExporterOptions, metrics::CoreMeter,
    start_prometheus_metric_exporter,
};
use tracing::{info, warn};

use crate::observers::BatonMetrics;
use crate::settings::Settings;

/// Open-run states counted by the poller (terminal states are not "open").
const OPEN_STATES: [baton_proto::RunState; 5] = [
    baton_proto::RunState::Thinking,
    baton_proto::RunState::Executing,
    baton_proto::RunState::AwaitingApproval,
    baton_proto::RunState::Compacting,
    baton_proto::RunState::Verifying,
];

/// The exporter's meter and baton's instruments on it.
pub(crate) struct Metrics {
    /// Given to Temporal's runtime for its worker metrics.
    pub(crate) meter: Arc<dyn CoreMeter>,
    /// baton's instruments.
    pub(crate) baton: Arc<BatonMetrics>,
}

/// Starts the exporter the settings ask for; `None` when metrics are off.
pub(crate) fn start(settings: &Settings) -> anyhow::Result<Option<Metrics>> {
    let meter = match (&settings.metrics_addr, &settings.otel_endpoint) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            anyhow::bail!("set either metrics_addr (Prometheus) or otel_endpoint (OTLP), not both")
        }
        (Some(addr), None) => {
            let options = PrometheusExporterOptions::builder()
                .socket_addr(*addr)
                .counters_total_suffix(true)
                .use_seconds_for_durations(true)
                .histogram_bucket_overrides(HistogramBucketOverrides {
                    overrides: crate::observers::histogram_buckets(),
                })
                .build();
            let started = start_prometheus_metric_exporter(options)
                .with_context(|| format!("cannot serve metrics on {addr}"))?;
            info!(addr = %started.bound_addr, "metrics endpoint listening on /metrics");
            started.meter as Arc<dyn CoreMeter>
        }
        (None, Some(endpoint)) => otel_meter(endpoint)?,
    };
    Ok(Some(Metrics {
        baton: Arc::new(BatonMetrics::new(meter.clone())),
        meter,
    }))
}

#[cfg(feature = "otel")]
fn otel_meter(endpoint: &str) -> anyhow::Result<Arc<dyn CoreMeter>> {
    use temporalio_common::telemetry::{
        OtelCollectorOptions, OtlpProtocol, build_otlp_metric_exporter,
    };
    let url = crate::otel::signal_url(endpoint, "metrics");
    let url = url
        .parse()
        .with_context(|| format!("otel_endpoint {endpoint:?} is not a URL"))?;
    let options = OtelCollectorOptions::builder()
        .url(url)
        .protocol(OtlpProtocol::Http)
        .metric_periodicity(Duration::from_secs(10))
        .use_seconds_for_durations(true)
        .histogram_bucket_overrides(HistogramBucketOverrides {
            overrides: crate::observers::histogram_buckets(),
        })
        .build();
    let meter = build_otlp_metric_exporter(options)
        .with_context(|| format!("cannot export metrics to {endpoint}"))?;
    info!(endpoint, "exporting metrics over OTLP");
    Ok(Arc::new(meter))
}

#[cfg(not(feature = "otel"))]
fn otel_meter(endpoint: &str) -> anyhow::Result<Arc<dyn CoreMeter>> {
    anyhow::bail!(
        "otel_endpoint is set ({endpoint}) but this worker was built without the `otel` feature; \
         rebuild with `cargo build -p baton-worker --features otel` or use metrics_addr"
    )
}

/// Visibility query of the open `AgentRun`s of `task_queue` matching `filter`.
fn open_runs_query(task_queue: &str, filter: &str) -> String {
    let queue = task_queue.replace('\\', "\\\\").replace('\'', "\\'");
    format!(
        "WorkflowType = '{WORKFLOW_TYPE}' AND TaskQueue = '{queue}' AND ExecutionStatus = 'Running' AND {filter}"
    )
}

/// Every `every`, sets the gauges of open runs by state and runs awaiting approval from
/// Temporal visibility, and the gauge of this worker's resident workflow instances. Runs until the process exits; failures are logged and retried.
pub(crate) fn spawn_visibility_poller(
    client: Client,
    task_queue: String,
    metrics: Arc<BatonMetrics>,
    every: Duration,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tick.tick().await;
            metrics.set_workflows_resident(
                u64::try_from(crate::observers::Resident::count()).unwrap_or(u64::MAX),
            );
            match poll_once(&client, &task_queue, &metrics).await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    warn!(
                        cause = format!("{e:#}"),
                        "cannot count runs in visibility for metrics; retrying"
                    );
                }
                Err(_) => {}
            }
        }
    });
}

async fn poll_once(
    client: &Client,
    task_queue: &str,
    metrics: &BatonMetrics,
) -> anyhow::Result<()> {
    let count = async |filter: &str| -> anyhow::Result<u64> {
        let query = open_runs_query(task_queue, filter);
        let counted = client
            .count_workflows(query.clone(), WorkflowCountOptions::default())
            .await
            .with_context(|| format!("count {query}"))?;
        Ok(counted.count() as u64)
    };
    // Count everything first, then publish: a scrape between two queries would otherwise
    // see the gauges of two different moments (a run pending approval but not yet counted
    // in AWAITING_APPROVAL).
    let pending = count("BatonAwaitingApproval = true").await?;
    let mut open = Vec::with_capacity(OPEN_STATES.len());
    for state in OPEN_STATES {
        let name = state.as_str_name();
        open.push((name, count(&format!("BatonState = '{name}'")).await?));
    }
    metrics.set_approvals_pending(pending);
    for (name, n) in open {
        metrics.set_runs_open(name, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_quote_the_task_queue() {
        assert_eq!(
            open_runs_query("q'1", "BatonAwaitingApproval = true"),
            "WorkflowType = 'AgentRun' AND TaskQueue = 'q\\'1' AND ExecutionStatus = 'Running' \
             AND BatonAwaitingApproval = true"
        );
    }
}
