//! (a) baton: a real `baton-worker` process (the binary from `cargo build --workspace
//! --bins`) running `AgentRun` with provider `openai` against the mock model, one model call
//! and one `read_file` call per turn, submitted with the SDK client like `baton submit` does.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use baton_proto::{RunResult, RunSpec, RunState};
use baton_tests::{DevServer, MockOpenAi, Worker, unique};
use baton_workflows::AgentRun;
use temporalio_client::{Client, WorkflowGetResultOptions};

use crate::scenario;

/// The activity of a model call; a turn starts when it is scheduled.
pub(crate) const TURN_ACTIVITY: &str = "llm_generate";

/// How long the worker may take to start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A `baton-worker` process on its own task queue, and a client to submit runs with.
pub(crate) struct BatonWorker {
    worker: Worker,
    client: Client,
}

impl BatonWorker {
    /// Starts `baton-worker` against `server`, with the mock as its OpenAI endpoint, streamed
    /// or not (default settings otherwise: local blob store, workspace snapshots on).
    pub(crate) async fn start(
        server: &DevServer,
        llm: &MockOpenAi,
        stream: bool,
    ) -> anyhow::Result<Self> {
        let queue = unique("bench-baton");
        let env = [
            ("OPENAI_BASE_URL", llm.base_url()),
            ("BATON_OPENAI__STREAM", stream.to_string()),
        ];
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut worker = Worker::spawn(server, &queue, &env)?;
        worker.wait_ready(READY_TIMEOUT).await?;
        let client = crate::bare::connect(&server.url(), "baton-bench").await?;
        Ok(Self { worker, client })
    }

    /// Runs one `AgentRun` of `turns` turns as run `id`; returns the wall time from the start
    /// request to the result.
    pub(crate) async fn run(
        &self,
        llm: &MockOpenAi,
        id: &str,
        turns: u32,
    ) -> anyhow::Result<Duration> {
        self.run_with(llm, id, turns, false).await
    }

    /// [`Self::run`], with the run's read-only tool calls as regular activities if `remote`
    /// (`--remote-read-tools`; the default runs them as local activities).
    pub(crate) async fn run_with(
        &self,
        llm: &MockOpenAi,
        id: &str,
        turns: u32,
        remote: bool,
    ) -> anyhow::Result<Duration> {
        scenario::push_replies(llm, turns);
        scenario::write_notes(&self.worker.workspace_root().join(id))?;
        let calls_before = llm.request_count();
        let spec = RunSpec {
            remote_read_tools: remote,
            ..scenario::spec(turns)
        };
        let wall = run_spec(&self.client, self.worker.task_queue(), id, spec, turns)
            .await
            .with_context(|| format!("worker log {}", self.worker.log_path().display()))?;
        let calls = llm.request_count() - calls_before;
        ensure!(
            calls == turns as usize,
            "{id} made {calls} model calls, not {turns}"
        );
        Ok(wall)
    }
}

/// Runs one `AgentRun` of [`scenario::spec`]`(turns)` (read-only tools as regular activities
/// if `remote_reads`) as run `id` on `task_queue` and checks
/// it completed all its turns; returns the wall time from the start request to the result.
/// The run's workspace must hold [`scenario::NOTES_FILE`].
pub(crate) async fn run_agent(
    client: &Client,
    task_queue: &str,
    id: &str,
    turns: u32,
    remote_reads: bool,
) -> anyhow::Result<Duration> {
    let spec = RunSpec {
        remote_read_tools: remote_reads,
        ..scenario::spec(turns)
    };
    run_spec(client, task_queue, id, spec, turns).await
}

/// Runs `spec` as run `id` and checks it completed `turns` turns; returns its wall time.
async fn run_spec(
    client: &Client,
    task_queue: &str,
    id: &str,
    spec: RunSpec,
    turns: u32,
) -> anyhow::Result<Duration> {
    let options = crate::scenario::start_options(task_queue, id);
    let started = Instant::now();
    let handle = client
        .start_workflow(AgentRun::run, spec, options)
        .await
        .with_context(|| format!("starting AgentRun {id}"))?;
    let result: RunResult = handle
        .get_result(WorkflowGetResultOptions::default())
        .await
        .with_context(|| format!("waiting for AgentRun {id}"))?;
    let wall = started.elapsed();
    ensure!(
        result.status() == RunState::Completed && result.turns == turns,
        "AgentRun {id} did not complete {turns} turns: {result:?}"
    );
    Ok(wall)
}
