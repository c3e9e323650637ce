//! Scenario: an evaluation (`baton eval`) of N runs at concurrency C on one worker. Wall time
//! of the `baton eval` process beside the runs' own times (by the server's clock), and what the
//! harness adds: the lead before its first run starts, the tail after its last run closes, the
//! gaps where fewer than C runs were going although runs were left, and the CPU the CLI used.
//! The runs are the example suite's `add` task (a directory upload, three scripted turns and
//! a verification command) repeated.

use std::{path::Path, time::Duration, time::Instant, time::SystemTime};

use anyhow::Context;
use baton_tests::{Worker, baton_spawn, unique};
use futures::StreamExt;
use nix::sys::resource::{UsageWho, getrusage};
use temporalio_client::WorkflowListOptions;

use crate::{bare, per_turn, stats};

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Runs in all: tasks x repeat, one config.
    pub(crate) runs: u32,
    pub(crate) concurrency: u32,
}

impl Settings {
    pub(crate) const FULL: Settings = Settings {
        runs: 100,
        concurrency: 20,
    };
    pub(crate) const SHORT: Settings = Settings {
        runs: 12,
        concurrency: 4,
    };
}

/// Most tasks of the suite (the runs are spread over them, `repeat` each).
const TASKS: u32 = 10;

#[derive(Debug)]
pub(crate) struct EvalReport {
    pub(crate) settings: Settings,
    /// The `baton eval` process, start to exit.
    pub(crate) wall_s: f64,
    /// The runs' start-to-close times.
    pub(crate) run_s: Vec<f64>,
    /// From the process's start to its first run's start, and from the last run's close to
    /// its exit.
    pub(crate) lead_s: f64,
    pub(crate) tail_s: f64,
    /// First start to last close.
    pub(crate) span_s: f64,
    /// User + system CPU of the `baton eval` process.
    pub(crate) cli_cpu_s: f64,
    pub(crate) passed: usize,
}

fn suite(dir: &Path, runs: u32) -> anyhow::Result<std::path::PathBuf> {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/eval");
    // As many tasks as divide the runs evenly, up to TASKS.
    let tasks = (1..=TASKS.min(runs))
        .rev()
        .find(|t| runs.is_multiple_of(*t))
        .unwrap_or(1);
    let repeat = runs / tasks;
    let mut text = format!("name = \"bench\"\nrepeat = {repeat}\n");
    for t in 0..tasks {
        text.push_str(&format!(
            "\n[[task]]\nid = \"add{t}\"\ndir = \"{}\"\nprompt = \"fix add()\"\n\
             verify = [\"sh test.sh\"]\nverify_attempts = 1\n",
            example.join("repos/add").display()
        ));
    }
    text.push_str(&format!(
        "\n[[config]]\nname = \"fixer\"\nscript = \"{}\"\n",
        example.join("scripts/fixer-add.json").display()
    ));
    let path = dir.join("bench.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

fn children_cpu_s() -> anyhow::Result<f64> {
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Ok(secs(usage.user_time()) + secs(usage.system_time()))
}

/// Runs the scenario on a fresh (fast) dev server and one worker.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<EvalReport> {
    let server = per_turn::start_server(true)?;
    let queue = unique("eval");
    let mut worker = Worker::spawn(&server, &queue, &[])?;
    worker.wait_ready(Duration::from_secs(60)).await?;
    let dir = tempfile::tempdir()?;
    let suite = suite(dir.path(), settings.runs)?;
    let suite = suite.display().to_string();
    let concurrency = settings.concurrency.to_string();
    eprintln!(
        "eval: {} runs at concurrency {} on one worker",
        settings.runs, settings.concurrency
    );
    let cpu_before = children_cpu_s()?;
    let launched = SystemTime::now();
    let started = Instant::now();
    let cmd = baton_spawn(
        &server,
        &[
            "eval",
            &suite,
            "--id",
            "bench",
            "--task-queue",
            &queue,
            "--concurrency",
            &concurrency,
            "--json",
        ],
        &[],
    )?;
    let out = cmd.wait_async(Duration::from_secs(1800)).await?;
    let wall_s = started.elapsed().as_secs_f64();
    let exited = SystemTime::now();
    let cli_cpu_s = children_cpu_s()? - cpu_before;
    anyhow::ensure!(out.code == 0, "baton eval failed: {out}");
    let eval: baton_cli::json::Eval = out.parse()?;
    let client = bare::connect(&server.url(), "baton-bench").await?;
    // Visibility records a close a moment after it happens: read until every run shows one.
    let listed = Instant::now();
    let (first, last, run_s) = loop {
        let mut stream = client.list_workflows(
            "BatonLabels = 'baton.eval.id=bench'".to_owned(),
            WorkflowListOptions::builder().limit(10_000).build(),
        );
        let (mut first, mut last) = (None::<SystemTime>, None::<SystemTime>);
        let mut run_s = Vec::new();
        while let Some(run) = stream.next().await {
            let run = run.context("listing the evaluation's runs")?;
            if let (Some(start), Some(close)) = (run.start_time(), run.close_time()) {
                run_s.push(close.duration_since(start)?.as_secs_f64());
                first = Some(first.map_or(start, |f| f.min(start)));
                last = Some(last.map_or(close, |l| l.max(close)));
            }
        }
        if run_s.len() == eval.runs.len() {
            break (first, last, run_s);
        }
        anyhow::ensure!(
            listed.elapsed() < Duration::from_secs(30),
            "visibility shows {} of the report's {} runs closed after 30 s",
            run_s.len(),
            eval.runs.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (first, last) = (first.context("no runs")?, last.context("no runs")?);
    let secs = |a: SystemTime, b: SystemTime| b.duration_since(a).map_or(0.0, |d| d.as_secs_f64());
    worker.terminate()?;
    Ok(EvalReport {
        settings,
        wall_s,
        lead_s: secs(launched, first),
        tail_s: secs(last, exited),
        span_s: secs(first, last),
        run_s,
        cli_cpu_s,
        passed: eval.runs.iter().filter(|r| r.passed).count(),
    })
}

impl EvalReport {
    pub(crate) fn render(&self) -> String {
        let n = self.run_s.len();
        let sum: f64 = self.run_s.iter().sum();
        let ideal = sum / f64::from(self.settings.concurrency);
        let median = stats::median(&self.run_s);
        let p95 = stats::percentile(&self.run_s, 95.0);
        format!(
            "### Evaluation: {n} runs at concurrency {} on one worker (fast dev server)\n\n\
             | measure | value |\n|---|--:|\n\
             | `baton eval` wall time | {:.1} s |\n\
             | runs passed | {} of {n} |\n\
             | run time (start to close), median / p95 | {median:.2} s / {p95:.2} s |\n\
             | runs' time summed / concurrency (perfect packing) | {ideal:.1} s |\n\
             | first run start to last close | {:.1} s |\n\
             | harness lead (process start to first run start) | {:.2} s |\n\
             | harness tail (last close to report printed) | {:.2} s |\n\
             | `baton eval` CPU (user + system) | {:.2} s ({:.0} ms a run) |\n",
            self.settings.concurrency,
            self.wall_s,
            self.passed,
            self.span_s,
            self.lead_s,
            self.tail_s,
            self.cli_cpu_s,
            self.cli_cpu_s * 1000.0 / n.max(1) as f64,
        )
    }
}
