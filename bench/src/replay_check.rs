//! `baton-bench replay-check`: how long the replay gate takes. N scripted runs of
//! about 1,000 history events each (one segment: `--history-budget` above their length) run to
//! the end on one `baton-worker`; then the real `baton replay-check` replays them all from the
//! server (fetch + replay), once with `--no-cache`, and once more against a warm cache (every
//! run skipped). The time per 1,000-event history is the cold run's wall time over its events.

use std::{path::Path, time::Duration};

use anyhow::Context;
use baton_tests::{DevServer, Worker, baton_with_timeout, unique};
use serde_json::{Value, json};

use crate::per_turn;

/// How long one CLI command may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(600);

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Runs to replay.
    pub(crate) runs: u32,
    /// Tool turns per run (a shell turn is ~12 events).
    pub(crate) turns: u32,
}

impl Settings {
    pub(crate) const FULL: Self = Self {
        runs: 20,
        turns: 82,
    };
    pub(crate) const SHORT: Self = Self { runs: 3, turns: 20 };
}

/// The result.
#[derive(Debug)]
pub(crate) struct ReplayCheckReport {
    settings: Settings,
    events: f64,
    cold_s: f64,
    warm_s: f64,
    warm_skipped: f64,
}

/// Runs the scenario on a fresh fast dev server.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<ReplayCheckReport> {
    anyhow::ensure!(
        settings.runs >= 1 && settings.turns >= 1,
        "runs and turns >= 1"
    );
    let server = per_turn::start_server(true)?;
    let queue = unique("replay-check");
    let mut worker = Worker::spawn(&server, &queue, &[])?;
    worker.wait_ready(Duration::from_secs(60)).await?;
    let scratch = tempfile::tempdir()?;
    let script = write_script(scratch.path(), settings.turns)?;
    eprintln!(
        "replay-check: {} runs of {} turns, then `baton replay-check`",
        settings.runs, settings.turns
    );
    let script = script.to_str().context("script path")?.to_owned();
    let ids: Vec<String> = (0..settings.runs).map(|_| unique("replayed")).collect();
    for id in &ids {
        cli(
            &server,
            &[
                "submit",
                "--task-queue",
                &queue,
                "--id",
                id,
                "--script",
                &script,
                "--no-approval",
                "--max-turns",
                "1000",
                "--history-budget",
                "100000",
                "bench",
            ],
        )?;
    }
    for id in &ids {
        cli(&server, &["result", id, "--wait", "--json"])?;
    }
    let cache = scratch.path().join("cache.json");
    let cache = cache.to_str().context("cache path")?;
    cli(&server, &["replay-check", "--no-cache", "--json"])?; // warms the server's caches
    let cold = cli(&server, &["replay-check", "--no-cache", "--json"])?;
    anyhow::ensure!(
        cold["diverged"] == json!([]),
        "runs of this build did not replay: {cold}"
    );
    cli(&server, &["replay-check", "--cache", cache, "--json"])?;
    let warm = cli(&server, &["replay-check", "--cache", cache, "--json"])?;
    worker.terminate()?;
    Ok(ReplayCheckReport {
        settings,
        events: cold["events"].as_f64().unwrap_or_default(),
        cold_s: cold["seconds"].as_f64().unwrap_or_default(),
        warm_s: warm["seconds"].as_f64().unwrap_or_default(),
        warm_skipped: warm["skipped"].as_f64().unwrap_or_default(),
    })
}

fn write_script(dir: &Path, turns: u32) -> anyhow::Result<std::path::PathBuf> {
    let mut steps: Vec<Value> = (0..turns)
        .map(|i| json!({"text": format!("step {i}"), "tool_calls": [{"name": "shell", "arguments": {"command": format!("echo step {i}")}}]}))
        .collect();
    steps.push(json!({"text": "done"}));
    let path = dir.join("script.json");
    std::fs::write(&path, json!({ "turns": steps }).to_string())?;
    Ok(path)
}

/// `baton ARGS --json` on `server`, exit 0 or 1 (replay-check's "diverged"), parsed.
fn cli(server: &DevServer, args: &[&str]) -> anyhow::Result<Value> {
    let out = baton_with_timeout(server, args, &[], None, CLI_TIMEOUT)?;
    anyhow::ensure!(out.code <= 1, "baton {} failed: {out}", args.join(" "));
    if args[0] == "submit" {
        return Ok(Value::Null);
    }
    out.json()
}

impl ReplayCheckReport {
    pub(crate) fn render(&self) -> String {
        let per_history = self.events / f64::from(self.settings.runs);
        let per_thousand = if self.events > 0.0 {
            self.cold_s / self.events * 1000.0
        } else {
            0.0
        };
        format!(
            "### Replay gate (`baton replay-check`)\n\n\
             {} runs of {} turns ({per_history:.0} events each, {:.0} in all), fetched from a \
             fast dev server and replayed by the real CLI (debug or release as built).\n\n\
             | pass | runs replayed | wall s | s per 1,000-event history |\n\
             |---|--:|--:|--:|\n\
             | cold (`--no-cache`) | {} | {:.2} | {per_thousand:.3} |\n\
             | warm cache (same build, nothing changed) | 0 ({:.0} skipped) | {:.2} | - |\n",
            self.settings.runs,
            self.settings.turns,
            self.events,
            self.settings.runs,
            self.cold_s,
            self.warm_skipped,
            self.warm_s,
        )
    }
}
