//! (b) The bare Temporal floor: [`BareLoop`], a workflow that does what an agent turn needs
//! from Temporal and nothing else — two no-op activities per turn (a stand-in for the model
//! call and one for the tool call) — on an in-process worker set up like `baton-worker`'s.
//!
//! With [`BareInput::status_upserts`] it also keeps a status memo and baton's search
//! attributes current before every model call (one memo and one search-attribute upsert per
//! turn, as `AgentRun` did before patch `status-on-change-v1`): the ablation that tells what
//! those upserts cost.

// The workflow/activity macros generate `pub` items of their own.
#![allow(unreachable_pub)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use baton_workflows::workflow::{SA_AWAITING_APPROVAL, SA_STATE, SA_TURNS, STATUS_MEMO_KEY};
use serde::{Deserialize, Serialize};
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, Url, WorkflowGetResultOptions,
};
use temporalio_macros::{activities, workflow, workflow_methods};
use temporalio_sdk::{
    ActivityOptions, MemoValue, Runtime, Worker, WorkerOptions, WorkflowContext, WorkflowResult,
    activities::{ActivityContext, ActivityError},
    runtime::RuntimeOptions,
};

/// Workflow type name.
pub const WORKFLOW_TYPE: &str = "BareLoop";
/// The activity standing in for the model call; a turn starts when it is scheduled.
pub const TURN_ACTIVITY: &str = "bare_llm";

/// Same as `baton-worker`'s default `sticky_queue_timeout_secs`.
const STICKY_QUEUE_TIMEOUT: Duration = Duration::from_secs(3);

/// Input of [`BareLoop`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct BareInput {
    /// Turns to run.
    pub turns: u32,
    /// Upsert a status memo and baton's search attributes before every step, like
    /// `AgentRun`'s `publish_status`.
    pub status_upserts: bool,
}

/// `turns` turns of: a no-op "model call", then (except in the last turn, where the model
/// answers) a no-op "tool call". The same activity sequence as an `AgentRun` whose model calls
/// one tool per turn and answers at turn `turns`, minus baton's own work.
#[workflow]
#[derive(Default)]
pub struct BareLoop;

#[workflow_methods]
impl BareLoop {
    /// Runs the loop; returns the number of turns.
    #[run(name = "BareLoop")]
    pub async fn run(ctx: &mut WorkflowContext<Self>, input: BareInput) -> WorkflowResult<u32> {
        let turns = input.turns;
        for turn in 1..=turns {
            if input.status_upserts {
                publish_status(ctx, "THINKING", turn);
            }
            ctx.execute_activity(Noop::bare_llm, turn, options())
                .await?;
            if turn < turns {
                ctx.execute_activity(Noop::bare_tool, turn, options())
                    .await?;
            }
        }
        if input.status_upserts {
            publish_status(ctx, "COMPLETED", turns);
        }
        Ok(turns)
    }
}

/// What `AgentRun` sends before each step: its status as a memo (about the size of baton's
/// `RunStatus`) and the search attributes state / awaiting approval / turns.
fn publish_status(ctx: &mut WorkflowContext<BareLoop>, state: &str, turn: u32) {
    let status = serde_json::json!({
        "run_id": "bench",
        "state": state,
        "turn": turn,
        "pending": [],
        "usage": {"input_tokens": 42 * turn, "output_tokens": 10 * turn, "llm_calls": turn},
        "last_event": format!("turn {turn}: read_file {{\"path\":\"notes.txt\"}}"),
    });
    ctx.set_current_details(format!("{state} · turn {turn}"));
    let _ = ctx.upsert_memo([(STATUS_MEMO_KEY, Some(MemoValue::new(status)))]);
    let updates: Vec<_> = [
        SA_STATE.try_value_set(state.to_owned()).ok(),
        SA_AWAITING_APPROVAL.try_value_set(false).ok(),
        SA_TURNS.try_value_set(i64::from(turn)).ok(),
    ]
    .into_iter()
    .flatten()
    .collect();
    ctx.upsert_search_attributes(updates);
}

fn options() -> ActivityOptions {
    ActivityOptions::start_to_close_timeout(Duration::from_secs(60))
}

/// The no-op activities.
pub struct Noop;

#[activities]
impl Noop {
    /// Stands in for `llm_generate`.
    #[activity(name = "bare_llm")]
    pub async fn bare_llm(_ctx: ActivityContext, turn: u32) -> Result<u32, ActivityError> {
        Ok(turn)
    }

    /// Stands in for `run_tool`.
    #[activity(name = "bare_tool")]
    pub async fn bare_tool(_ctx: ActivityContext, turn: u32) -> Result<u32, ActivityError> {
        Ok(turn)
    }
}

/// An in-process worker hosting [`BareLoop`], on its own thread and multi-threaded tokio
/// runtime (like a `baton-worker` process, so the bench's own work cannot stall it), and a
/// client to start runs with. Shut down on drop.
pub(crate) struct BareWorker {
    client: Client,
    task_queue: String,
    shutdown: Option<Box<dyn Fn() + Send>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl BareWorker {
    /// Connects to the server at `url` and starts polling `task_queue`.
    pub(crate) async fn start(url: &str, task_queue: &str) -> anyhow::Result<BareWorker> {
        let (tx, rx) = mpsc::channel::<anyhow::Result<Box<dyn Fn() + Send>>>();
        let (worker_url, queue) = (url.to_owned(), task_queue.to_owned());
        let thread = std::thread::Builder::new()
            .name("bare-worker".to_owned())
            .spawn(move || -> anyhow::Result<()> {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .context("building the bare worker's tokio runtime")?;
                rt.block_on(async move {
                    // The Temporal runtime must outlive the worker.
                    let (_runtime, mut worker) = match new_worker(&worker_url, &queue).await {
                        Ok(w) => w,
                        Err(e) => {
                            let _ = tx.send(Err(anyhow!("{e:#}")));
                            return Err(e);
                        }
                    };
                    let _ = tx.send(Ok(Box::new(worker.shutdown_handle())));
                    worker
                        .run()
                        .await
                        .map_err(|e| anyhow!("bare worker stopped with an error: {e}"))
                })
            })
            .context("spawning the bare worker thread")?;
        let shutdown = tokio::task::spawn_blocking(move || rx.recv())
            .await
            .context("waiting for the bare worker")?
            .context("the bare worker thread ended before starting")??;
        Ok(BareWorker {
            client: connect(url, "baton-bench").await?,
            task_queue: task_queue.to_owned(),
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// Runs one [`BareLoop`] of `turns` turns as workflow `id` (with status upserts or not);
    /// returns the wall time from the start request to the result.
    pub(crate) async fn run(
        &self,
        id: &str,
        turns: u32,
        status_upserts: bool,
    ) -> anyhow::Result<Duration> {
        run_loop(&self.client, &self.task_queue, id, turns, status_upserts).await
    }

    /// Stops the worker and waits for its thread.
    pub(crate) fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(shutdown) = self.shutdown.take() {
            shutdown();
        }
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(anyhow!("the bare worker thread panicked")),
            None => Ok(()),
        }
    }
}

/// Runs one [`BareLoop`] of `turns` turns as workflow `id` on `task_queue` (with status
/// upserts or not); returns the wall time from the start request to the result.
pub(crate) async fn run_loop(
    client: &Client,
    task_queue: &str,
    id: &str,
    turns: u32,
    status_upserts: bool,
) -> anyhow::Result<Duration> {
    let options = crate::scenario::start_options(task_queue, id);
    let started = Instant::now();
    let handle = client
        .start_workflow(
            BareLoop::run,
            BareInput {
                turns,
                status_upserts,
            },
            options,
        )
        .await
        .with_context(|| format!("starting {WORKFLOW_TYPE} {id}"))?;
    let done = handle
        .get_result(WorkflowGetResultOptions::default())
        .await
        .with_context(|| format!("waiting for {WORKFLOW_TYPE} {id}"))?;
    let wall = started.elapsed();
    anyhow::ensure!(done == turns, "{id} ran {done} turns, not {turns}");
    Ok(wall)
}

/// Set in the environment of a bench process that should be a bare worker ([`serve_from_env`]).
pub(crate) const SERVE_ENV: &str = "BATON_BENCH_BARE_WORKER";

/// The bench binary as a worker process of its own ([`SERVE_ENV`]` = 1`, with
/// `TEMPORAL_ADDRESS` and `BATON_TASK_QUEUE` as `baton-worker` takes them): runs [`BareLoop`]
/// until SIGTERM, so its CPU time can be read apart from the bench's.
pub(crate) async fn serve_from_env() -> anyhow::Result<()> {
    let address = std::env::var("TEMPORAL_ADDRESS").context("TEMPORAL_ADDRESS is not set")?;
    let queue = std::env::var("BATON_TASK_QUEUE").context("BATON_TASK_QUEUE is not set")?;
    let mut worker = BareWorker::start(&format!("http://{address}"), &queue).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    println!("{}", baton_tests::WORKER_READY_MARKER);
    term.recv().await;
    worker.stop()
}

impl Drop for BareWorker {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("baton-bench: {e:#}");
        }
    }
}

/// A client of the server at `url` (namespace `default`).
pub(crate) async fn connect(url: &str, identity: &str) -> anyhow::Result<Client> {
    let target = Url::parse(url).with_context(|| format!("bad server URL {url}"))?;
    let connection = Connection::connect(
        ConnectionOptions::new(target)
            .identity(identity.to_owned())
            .build(),
    )
    .await
    .with_context(|| format!("cannot reach Temporal at {url}"))?;
    Client::new(connection, ClientOptions::new("default").build())
        .context("cannot create the Temporal client")
}

/// A worker for [`BareLoop`] and [`Noop`], configured like `baton-worker`'s (default cache
/// size, 3 s sticky queue timeout), in the current tokio runtime.
async fn new_worker(url: &str, task_queue: &str) -> anyhow::Result<(Runtime, Worker)> {
    let client = connect(url, "baton-bench-bare-worker").await?;
    let runtime_options = RuntimeOptions::builder()
        .build()
        .map_err(|e| anyhow!("bad Temporal runtime options: {e}"))?;
    let runtime = Runtime::from_current_tokio(runtime_options)
        .map_err(|e| anyhow!("cannot start the Temporal runtime: {e}"))?;
    let options = WorkerOptions::new(task_queue.to_owned())
        .register_workflow::<BareLoop>()
        .map_err(|e| anyhow!("cannot register {WORKFLOW_TYPE}: {e}"))?
        .register_activities(Noop)
        .sticky_queue_schedule_to_start_timeout(STICKY_QUEUE_TIMEOUT)
        .build();
    let worker = Worker::new(&runtime, client, options)
        .map_err(|e| anyhow!("cannot create the worker: {e}"))?;
    Ok((runtime, worker))
}
