//! Scenario 4, density: how much worker memory runs that wait for a human cost. N runs each
//! ask, in their first turn, for a shell call that needs approval, and then wait. Measured
//! twice on fresh `baton-worker` processes: with a workflow cache large enough to keep every
//! waiting run, and with a cache of [`SMALL_CACHE`] runs, so that all but a few are evicted
//! (what a worker holding thousands of waiting runs looks like). Memory is the worker's
//! resident set (`VmRSS`) after the runs are all waiting, minus its resident set with one
//! waiting run.

use std::time::{Duration, Instant};

use anyhow::Context;
use baton_tests::{DevServer, MockOpenAi, Worker, unique};
use baton_workflows::AgentRun;
use futures::future::try_join_all;
use temporalio_client::{Client, WorkflowCountOptions};

use crate::{bare, history, per_turn, procfs, scenario};

/// Workflow cache of the eviction measurement.
pub(crate) const SMALL_CACHE: usize = 10;
/// How long the runs may take to reach their approval wait.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Pause before reading the worker's memory: its last workflow tasks finish.
const SETTLE_PAUSE: Duration = Duration::from_secs(1);
/// Runs started at once.
const START_CHUNK: usize = 100;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Runs waiting for approval.
    pub(crate) runs: u32,
    pub(crate) fast_server: bool,
}

/// One worker's measurement.
#[derive(Debug)]
pub(crate) struct Phase {
    /// The worker's `max_cached_workflows`.
    pub(crate) cache: usize,
    /// Resident set with one run waiting, bytes.
    pub(crate) baseline_rss: u64,
    /// Resident set with half the runs waiting, bytes.
    pub(crate) half_rss: u64,
    /// Resident set with all runs waiting, bytes.
    pub(crate) rss: u64,
    /// From the first start request until every run waited, seconds.
    pub(crate) settle_s: f64,
}

/// The result of the density scenario.
#[derive(Debug)]
pub(crate) struct DensityReport {
    pub(crate) settings: Settings,
    pub(crate) cached: Phase,
    pub(crate) evicted: Phase,
    /// History of one waiting run (JSON as the CLI shows it), bytes, and its events.
    pub(crate) history_bytes: f64,
    pub(crate) history_events: f64,
}

/// Runs the scenario on a fresh dev server.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<DensityReport> {
    anyhow::ensure!(settings.runs >= 1, "runs must be at least 1");
    let server = per_turn::start_server(settings.fast_server)?;
    let llm = MockOpenAi::start()?;
    llm.count_requests_only();
    llm.set_responder(scenario::waiting_responder());
    let client = bare::connect(&server.url(), "baton-bench").await?;
    eprintln!(
        "density: {} runs waiting for approval, cache {} then {SMALL_CACHE}",
        settings.runs,
        settings.runs as usize + 100
    );
    let cached = phase(
        &server,
        &client,
        &llm,
        settings.runs,
        settings.runs as usize + 100,
    )
    .await?;
    let evicted = phase(&server, &client, &llm, settings.runs, SMALL_CACHE).await?;
    let sample = history::fetch(&server, &cached.sample_id)?.profile();
    Ok(DensityReport {
        settings,
        cached: cached.phase,
        evicted: evicted.phase,
        history_bytes: sample.json_bytes,
        history_events: sample.events,
    })
}

struct Measured {
    phase: Phase,
    sample_id: String,
}

async fn phase(
    server: &DevServer,
    client: &Client,
    llm: &MockOpenAi,
    runs: u32,
    cache: usize,
) -> anyhow::Result<Measured> {
    let queue = unique("density");
    let cache_setting = cache.to_string();
    let url = llm.base_url();
    let mut env = vec![
        ("OPENAI_BASE_URL", url.as_str()),
        ("BATON_MAX_CACHED_WORKFLOWS", cache_setting.as_str()),
    ];
    // For profiling: a heap profiler's preload for the worker only, e.g.
    // `BATON_BENCH_WORKER_PRELOAD=/usr/lib/heaptrack/libheaptrack_preload.so` with
    // `DUMP_HEAPTRACK_OUTPUT=/tmp/hp/worker.$$` (then `heaptrack_interpret`).
    let preload = std::env::var("BATON_BENCH_WORKER_PRELOAD").unwrap_or_default();
    if !preload.is_empty() {
        env.push(("LD_PRELOAD", preload.as_str()));
    }
    let mut worker = Worker::spawn(server, &queue, &env)?;
    worker.wait_ready(Duration::from_secs(60)).await?;
    start(client, &queue, &[format!("{queue}-warmup")]).await?;
    wait_waiting(client, &queue, 1).await?;
    // Let the worker finish the first run's last task before reading its memory.
    tokio::time::sleep(SETTLE_PAUSE).await;
    let baseline_rss = procfs::rss_bytes(worker.pid())?;

    let ids: Vec<String> = (0..runs).map(|i| format!("{queue}-{i}")).collect();
    let half = ids.len() / 2;
    let started = Instant::now();
    let mut half_rss = baseline_rss;
    for (n, part) in [(half, &ids[..half]), (ids.len(), &ids[half..])] {
        for chunk in part.chunks(START_CHUNK) {
            start(client, &queue, chunk).await?;
        }
        wait_waiting(client, &queue, n + 1).await?;
        if n == half {
            tokio::time::sleep(SETTLE_PAUSE).await;
            half_rss = procfs::rss_bytes(worker.pid())?;
        }
    }
    let settle_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE_PAUSE).await;
    let rss = procfs::rss_bytes(worker.pid())?;
    eprintln!(
        "  cache {cache}: {runs} runs waiting after {settle_s:.1} s; worker RSS {:.1} MiB \
         (baseline {:.1} MiB)",
        rss as f64 / MIB,
        baseline_rss as f64 / MIB
    );
    if let Some(secs) = std::env::var("BATON_BENCH_HOLD_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        // For profiling: the worker stays up with every run waiting (attach a profiler).
        eprintln!("  holding worker pid {} for {secs} s", worker.pid());
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    worker.terminate()?;
    Ok(Measured {
        phase: Phase {
            cache,
            baseline_rss,
            half_rss,
            rss,
            settle_s,
        },
        sample_id: ids[0].clone(),
    })
}

const MIB: f64 = 1024.0 * 1024.0;

async fn start(client: &Client, queue: &str, ids: &[String]) -> anyhow::Result<()> {
    try_join_all(ids.iter().map(|id| async move {
        let options = scenario::start_options(queue, id);
        client
            .start_workflow(AgentRun::run, scenario::waiting_spec(), options)
            .await
            .with_context(|| format!("starting {id}"))
    }))
    .await?;
    Ok(())
}

/// Waits until `n` runs on `queue` wait for approval (visibility).
async fn wait_waiting(client: &Client, queue: &str, n: usize) -> anyhow::Result<()> {
    let query = format!("TaskQueue = '{queue}' AND BatonAwaitingApproval = true");
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let count = client
            .count_workflows(query.clone(), WorkflowCountOptions::default())
            .await
            .context("counting waiting runs")?
            .count();
        if count >= n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {count} of {n} runs on {queue} waited for approval within {SETTLE_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl DensityReport {
    /// The report as Markdown.
    pub(crate) fn render(&self) -> String {
        let n = f64::from(self.settings.runs);
        let second_half = n - (n / 2.0).floor();
        let row = |label: &str, p: &Phase| {
            format!(
                "| {label} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.1} |\n",
                p.cache,
                p.baseline_rss as f64 / MIB,
                p.half_rss as f64 / MIB,
                p.rss as f64 / MIB,
                (p.rss as f64 - p.baseline_rss as f64) / n,
                (p.rss as f64 - p.half_rss as f64) / second_half,
                p.settle_s
            )
        };
        format!(
            "### Density ({} runs waiting for approval, {} dev server)\n\n\
             | worker | max_cached_workflows | RSS with 1 run, MiB | RSS with half, MiB | \
             RSS with all, MiB | bytes per run (all - 1) / N | bytes per run, second half | \
             seconds until all waited |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|\n{}{}\n\
             History of one waiting run: {:.0} bytes as JSON, {:.0} events.\n",
            self.settings.runs,
            if self.settings.fast_server {
                "fast"
            } else {
                "default"
            },
            row("every run cached", &self.cached),
            row("runs evicted", &self.evicted),
            self.history_bytes,
            self.history_events
        )
    }
}
