//! Scenario 8, environments (`baton-bench environment`): time from submit to the
//! first model call for a repository (a 10,000-file tree served by a real `git daemon`) whose
//! `.baton/environment.toml` setup writes a 200 MB `node_modules`-like output, on an S3 store
//! (moto) shared by two real workers, each on a task queue of its own so that the bench
//! chooses which one runs:
//!
//! - cold: worker A, the cache is empty: setup runs, and what it wrote goes to the store;
//! - warm, another worker: worker B, same lockfile: the cached overlay is laid over the clone
//!   and restored, downloaded from S3;
//! - warm, same worker: worker A again, a new run id: its local blob cache (`[store]
//!   cache_bytes`) holds the overlay's blobs, so nothing is downloaded.
//!
//! From each run's history (server clock): `WorkflowExecutionStarted` to the first
//! `llm_generate` scheduled, and `setup_environment` (scheduled -> completed); from its events:
//! the bytes written into the workspace and downloaded from the store.

use std::{fmt::Write as _, path::Path, time::Duration};

use anyhow::{Context, ensure};
use baton_tests::{
    DevServer, GitDaemon, GitRepos, Worker, baton_with_timeout,
    moto::{MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer},
    unique,
};

use crate::{
    history::{self, ms_between},
    per_turn,
};

const BUCKET: &str = "baton-bench-env";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const CLI_TIMEOUT: Duration = Duration::from_secs(900);
const ANSWER: &str = "Nothing to change.";

/// How big the tree and the setup output are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Files in the repository.
    pub(crate) files: usize,
    /// Files setup writes, and the bytes of each.
    pub(crate) setup_files: usize,
    pub(crate) setup_file_bytes: usize,
}

impl Settings {
    /// The figures of BENCHMARKS.md: 10,000 files, 2,000 x 100 KB = 200 MB of setup output.
    pub(crate) const FULL: Settings = Settings {
        files: 10_000,
        setup_files: 2_000,
        setup_file_bytes: 100_000,
    };
    /// The CI smoke size.
    pub(crate) const SHORT: Settings = Settings {
        files: 1_000,
        setup_files: 200,
        setup_file_bytes: 50_000,
    };
}

/// One submit.
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) label: &'static str,
    /// Started -> first `llm_generate` scheduled (ms).
    pub(crate) to_first_call_ms: f64,
    /// `prepare_workspace` (the clone and its snapshot) scheduled -> completed (ms).
    pub(crate) prepare_ms: f64,
    /// `setup_environment` scheduled -> completed (ms).
    pub(crate) setup_ms: f64,
    /// Setup ran (a cache miss).
    pub(crate) set_up: bool,
    /// Bytes written into the workspace, and read from the store, while setting up.
    pub(crate) bytes_written: u64,
    pub(crate) bytes_downloaded: u64,
}

#[derive(Debug)]
pub(crate) struct EnvironmentReport {
    pub(crate) settings: Settings,
    pub(crate) starts: Vec<Start>,
}

/// Runs the three submits; see the module doc.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<EnvironmentReport> {
    let moto = MotoServer::start().context("moto (pip install 'moto[server]')")?;
    moto.create_bucket(BUCKET)?;
    let server = per_turn::start_server(true)?;
    let repos = GitRepos::new()?;
    let files: Vec<(String, String)> = (0..settings.files)
        .map(|i| {
            (
                format!("src/m{:02}/f{i:05}.js", i % 100),
                format!("module.exports = {i};\n"),
            )
        })
        .chain([
            (
                "package-lock.json".to_owned(),
                "{\"lockfileVersion\": 3}\n".to_owned(),
            ),
            (".gitignore".to_owned(), "node_modules/\n".to_owned()),
            (
                ".baton/environment.toml".to_owned(),
                environment_toml(settings),
            ),
        ])
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    repos.create("acme/app.git", &refs)?;
    let daemon = GitDaemon::start(&repos)?;
    let url = daemon.url("acme/app.git");
    let endpoint = moto.endpoint();
    let env = [
        ("BATON_STORE__BACKEND", "s3"),
        ("BATON_STORE__S3__BUCKET", BUCKET),
        ("BATON_STORE__S3__ENDPOINT", endpoint.as_str()),
        ("BATON_STORE__S3__ALLOW_HTTP", "true"),
        ("BATON_STORE__S3__REGION", MOTO_REGION),
        ("AWS_ACCESS_KEY_ID", MOTO_ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", MOTO_SECRET_ACCESS_KEY),
    ];
    let (queue_a, queue_b) = (unique("bench-env-a"), unique("bench-env-b"));
    // The runs change nothing: a tree is idle after `workspace_idle_secs` (see first_call.rs).
    let idle = [env.as_slice(), &[("BATON_WORKSPACE_IDLE_SECS", "1")]].concat();
    let mut a = Worker::spawn(&server, &queue_a, &idle)?;
    let mut b = Worker::spawn(&server, &queue_b, &env)?;
    a.wait_ready(READY_TIMEOUT).await?;
    b.wait_ready(READY_TIMEOUT).await?;
    let scratch = tempfile::tempdir()?;
    let script = scratch.path().join("script.json");
    std::fs::write(
        &script,
        serde_json::json!({"turns": [{"text": ANSWER}]}).to_string(),
    )?;
    let setup_bytes = (settings.setup_files * settings.setup_file_bytes) as u64;
    eprintln!(
        "environment: {} files, setup writes {} files ({setup_bytes} bytes); cold, other worker, same worker",
        settings.files, settings.setup_files
    );
    let submit = |label, queue: &str| start(&server, queue, &url, &script, label);
    let cold = submit("cold: setup runs (worker A)", &queue_a)?;
    let other = submit("warm: environment cache, another worker (B)", &queue_b)?;
    std::thread::sleep(crate::first_call::IDLE_WAIT);
    let same = submit("warm: environment cache, same worker (A)", &queue_a)?;
    ensure!(
        cold.set_up && !other.set_up && !same.set_up,
        "setup ran once, on the first run: {cold:?} {other:?} {same:?}"
    );
    ensure!(
        other.bytes_downloaded >= setup_bytes * 9 / 10,
        "another worker downloads the environment: {} of {setup_bytes} bytes",
        other.bytes_downloaded
    );
    ensure!(
        same.bytes_downloaded <= setup_bytes / 100,
        "the same worker's blob cache holds the environment, yet {} bytes were downloaded",
        same.bytes_downloaded
    );
    ensure!(
        same.bytes_written <= setup_bytes / 100,
        "the same worker keeps the first run's set-up tree (issue 32 item 3), yet {} bytes were \
         written",
        same.bytes_written
    );
    drop((a, b, daemon, moto));
    Ok(EnvironmentReport {
        settings,
        starts: vec![cold, other, same],
    })
}

fn environment_toml(s: Settings) -> String {
    format!(
        "setup = [\"mkdir -p node_modules && i=0 && while [ $i -lt {} ]; do head -c {} /dev/urandom > node_modules/pkg$i.js; i=$((i+1)); done\"]\n\
         cache_key = [\"package-lock.json\"]\n",
        s.setup_files, s.setup_file_bytes
    )
}

fn start(
    server: &DevServer,
    queue: &str,
    url: &str,
    script: &Path,
    label: &'static str,
) -> anyhow::Result<Start> {
    let id = unique("bench-env");
    let script = script.to_str().context("script path")?;
    let args = [
        "submit",
        "--task-queue",
        queue,
        "--id",
        &id,
        "--provider",
        "scripted",
        "--script",
        script,
        "--no-approval",
        "--git",
        url,
        "Change nothing; say so.",
    ];
    baton_with_timeout(server, &args, &[], None, CLI_TIMEOUT)?
        .ensure_success()
        .context("baton submit")?;
    let result = baton_with_timeout(
        server,
        &["result", &id, "--wait", "--json"],
        &[],
        None,
        CLI_TIMEOUT,
    )?
    .ensure_success()
    .context("baton result")?
    .json()?;
    ensure!(
        result["status"] == "COMPLETED",
        "run {id} did not complete: {result}"
    );
    let events = baton_with_timeout(server, &["watch", &id], &[], None, CLI_TIMEOUT)?.stdout;
    let note = events
        .lines()
        .find(|l| {
            l.contains("environment set up") || l.contains("environment ready from the cache")
        })
        .with_context(|| format!("no environment note in the events of {id}:\n{events}"))?
        .to_owned();
    let h = history::fetch(server, &id)?;
    let (t0, t1) = h.first_activity("setup_environment")?;
    let (p0, p1) = h.first_activity("prepare_workspace")?;
    let start = Start {
        label,
        to_first_call_ms: ms_between(
            h.started_at()?,
            h.scheduled_at(crate::agent::TURN_ACTIVITY)?,
        ),
        prepare_ms: ms_between(p0, p1),
        setup_ms: ms_between(t0, t1),
        set_up: note.contains("environment set up"),
        bytes_written: number_before(&note, " bytes written")?,
        bytes_downloaded: number_before(&note, " bytes downloaded")?,
    };
    eprintln!(
        "  {label}: started -> first model call {:.0} ms (prepare_workspace {:.0} ms, setup_environment {:.0} ms), {} bytes written, {} downloaded",
        start.to_first_call_ms,
        start.prepare_ms,
        start.setup_ms,
        start.bytes_written,
        start.bytes_downloaded
    );
    Ok(start)
}

/// The number right before `suffix` in `text`.
fn number_before(text: &str, suffix: &str) -> anyhow::Result<u64> {
    let at = text
        .find(suffix)
        .with_context(|| format!("'{suffix}' not in: {text}"))?;
    let digits: String = text[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits
        .parse()
        .with_context(|| format!("no number before '{suffix}' in: {text}"))
}

impl EnvironmentReport {
    pub(crate) fn render(&self) -> String {
        let s = self.settings;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## Environments: submit to first model call ({} files, setup output {} x {} bytes, S3 store)\n",
            s.files, s.setup_files, s.setup_file_bytes
        );
        let _ = writeln!(
            out,
            "| start | started -> first model call | prepare_workspace (clone) | setup_environment | bytes written | bytes downloaded |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for st in &self.starts {
            let _ = writeln!(
                out,
                "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} |",
                st.label,
                st.to_first_call_ms,
                st.prepare_ms,
                st.setup_ms,
                st.bytes_written,
                st.bytes_downloaded
            );
        }
        out
    }
}
