//! Scenario 3, hand-off latency: how long a run takes to move on when the worker running it
//! goes away.
//!
//! - SIGKILL: a run's shell call is running on one of two `baton-worker` processes; the bench
//!   SIGKILLs that worker and measures until the call's retry starts on the other one. The
//!   call writes `<ns since epoch> <worker pid>` to a file outside the workspace when each
//!   attempt starts, so the start time is the tool's own clock reading.
//! - SIGTERM: the same with SIGTERM: the worker stops polling, lets the call run for its grace
//!   period ([`GRACE`]), then cancels it; measured from the end of the grace period.
//! - Cold replay: a run of N turns (one segment: the history budget is raised so it does not
//!   continue as new) waits for approval at turn N; both workers are SIGKILLed and a fresh one
//!   started; the approval arrives. The workflow task that follows replays the whole history
//!   on the cold worker: its started -> completed time, from the server's history, is the
//!   replay time.
//! - Heartbeat traffic ([`crate::heartbeats`]): heartbeat calls per minute of a tool call and
//!   of a model call, the price of a short heartbeat timeout.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use baton_core::tools::{READ_FILE, SHELL};
use baton_proto::{ApprovalPolicy, Limits, ModelConfig, RunSpec, SandboxPolicy};
use baton_tests::{DevServer, MockOpenAi, Signal, Worker, baton, unique};
use baton_workflows::{AgentRun, workflow::TOOL_HEARTBEAT};
use temporalio_client::{Client, WorkflowGetResultOptions, WorkflowHandle};

use crate::heartbeats::{self, Traffic};
use crate::{bare, history, per_turn, scenario, stats};

/// `graceful_shutdown_secs` of the workers in the SIGTERM measurement.
pub(crate) const GRACE: Duration = Duration::from_secs(2);
/// How long the first attempt of the shell call would run if nothing stopped it.
const LONG_CALL_SECS: u32 = 120;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Kills of each kind.
    pub(crate) reps: u32,
    /// Turns of the cold-replay run.
    pub(crate) replay_turns: u32,
    pub(crate) fast_server: bool,
    /// Seconds of the model call and of the tool call whose heartbeats are counted (0: none).
    pub(crate) traffic_secs: u32,
}

/// The result of the hand-off scenario.
#[derive(Debug)]
pub(crate) struct HandoffReport {
    pub(crate) settings: Settings,
    /// SIGKILL to the retry's start, seconds.
    pub(crate) kill_s: Vec<f64>,
    /// End of the grace period after SIGTERM to the retry's start, seconds.
    pub(crate) term_s: Vec<f64>,
    /// Events in the replayed history.
    pub(crate) replay_events: usize,
    /// Started -> completed of the workflow task that replayed it, ms.
    pub(crate) replay_ms: f64,
    /// The approval update sent -> the approved call started, seconds.
    pub(crate) approval_to_call_s: f64,
    /// Heartbeat calls of a model call and a tool call (`traffic_secs` > 0).
    pub(crate) traffic: Option<Traffic>,
}

/// Runs the scenario on a fresh dev server.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<HandoffReport> {
    let server = per_turn::start_server(settings.fast_server)?;
    let llm = MockOpenAi::start()?;
    let client = bare::connect(&server.url(), "baton-bench").await?;
    let root = tempfile::tempdir().context("creating the workspace root")?;
    let marks = tempfile::tempdir().context("creating the marks dir")?;
    let queue = unique("handoff");
    let pool = Pool {
        server: &server,
        llm: &llm,
        queue: &queue,
        root: root.path(),
    };
    let traffic = if settings.traffic_secs > 0 {
        eprintln!(
            "hand-off: heartbeat calls of a {} s model call and a {} s tool call",
            settings.traffic_secs, settings.traffic_secs
        );
        let t = heartbeats::measure(
            &llm,
            root.path(),
            settings.fast_server,
            settings.traffic_secs,
        )
        .await
        .context("heartbeat traffic")?;
        eprintln!(
            "  {:.1} per tool-minute, {:.1} per model-minute",
            t.per_tool_minute(),
            t.per_llm_minute()
        );
        Some(t)
    } else {
        None
    };
    let mut workers = vec![pool.spawn().await?, pool.spawn().await?];
    eprintln!(
        "hand-off: {} x SIGKILL, {} x SIGTERM (grace {GRACE:?}), cold replay of {} turns",
        settings.reps, settings.reps, settings.replay_turns
    );
    let (mut kill_s, mut term_s) = (Vec::new(), Vec::new());
    for rep in 1..=settings.reps {
        for signal in [Signal::SIGKILL, Signal::SIGTERM] {
            let marks_file = marks.path().join(format!("{rep}-{signal}"));
            let id = format!("{queue}-{signal}-{rep}");
            let secs = pool
                .interrupt(&client, &mut workers, &id, &marks_file, signal)
                .await
                .with_context(|| format!("{signal} rep {rep}"))?;
            eprintln!("  {signal} rep {rep}: retry started {secs:.2} s after");
            match signal {
                Signal::SIGKILL => kill_s.push(secs),
                _ => term_s.push(secs),
            }
        }
    }
    let replay = pool
        .cold_replay(&client, &mut workers, settings.replay_turns)
        .await
        .context("cold replay")?;
    for mut w in workers {
        w.terminate()?;
    }
    Ok(HandoffReport {
        settings,
        kill_s,
        term_s,
        replay_events: replay.0,
        replay_ms: replay.1,
        approval_to_call_s: replay.2,
        traffic,
    })
}

/// Workers of one queue sharing a workspace root, with the mock model.
pub(crate) struct Pool<'a> {
    pub(crate) server: &'a DevServer,
    pub(crate) llm: &'a MockOpenAi,
    pub(crate) queue: &'a str,
    pub(crate) root: &'a Path,
}

impl Pool<'_> {
    async fn spawn(&self) -> anyhow::Result<Worker> {
        self.spawn_with(&[]).await
    }

    /// A ready worker of the pool with `extra` environment.
    pub(crate) async fn spawn_with(&self, extra: &[(&str, &str)]) -> anyhow::Result<Worker> {
        let url = self.llm.base_url();
        let grace = GRACE.as_secs().to_string();
        let mut env = vec![
            ("OPENAI_BASE_URL", url.as_str()),
            ("BATON_GRACEFUL_SHUTDOWN_SECS", grace.as_str()),
            // The runs write marks outside their workspace (`--sandbox off`).
            ("BATON_ALLOW_SANDBOX_OFF", "true"),
        ];
        env.extend_from_slice(extra);
        let mut worker = Worker::spawn_with_workspace(self.server, self.queue, self.root, &env)?;
        worker.wait_ready(Duration::from_secs(60)).await?;
        Ok(worker)
    }

    /// Runs one shell call, sends `signal` to the worker running it, and returns the seconds
    /// from the signal (SIGKILL) or from the end of the grace period (SIGTERM) until the
    /// retry started. Replaces the stopped worker.
    async fn interrupt(
        &self,
        client: &Client,
        workers: &mut Vec<Worker>,
        id: &str,
        marks: &Path,
        signal: Signal,
    ) -> anyhow::Result<f64> {
        let command = format!(
            "echo \"$(date +%s%N) $PPID\" >> '{}'; \
             if [ \"$BATON_ATTEMPT\" = 1 ]; then sleep {LONG_CALL_SECS}; fi",
            marks.display()
        );
        let arguments = serde_json::json!({ "command": command }).to_string();
        self.llm.clear_queue();
        self.llm
            .push_tool_calls(&[("call_1", SHELL, arguments.as_str())]);
        self.llm.push_text("done");
        let handle = start(client, self.queue, id, shell_spec()).await?;
        let first = wait_lines(marks, 1).await?;
        let pid: u32 = first[0].1;
        let at = workers
            .iter()
            .position(|w| w.pid() == pid)
            .with_context(|| format!("the call runs in pid {pid}, which is not a worker"))?;
        let sent = SystemTime::now();
        workers[at].signal(signal)?;
        let lines = wait_lines(marks, 2).await?;
        let (retry_ns, retry_pid) = lines[1];
        ensure!(retry_pid != pid, "the retry ran on the stopped worker");
        let mut from = sent.duration_since(UNIX_EPOCH)?.as_nanos() as f64 / 1e9;
        if signal == Signal::SIGTERM {
            from += GRACE.as_secs_f64();
        }
        let secs = retry_ns as f64 / 1e9 - from;
        let _ = handle
            .get_result(WorkflowGetResultOptions::default())
            .await
            .with_context(|| format!("waiting for {id}"))?;
        let mut stopped = workers.remove(at);
        if signal != Signal::SIGKILL {
            stopped.terminate()?;
        }
        workers.push(self.spawn().await?);
        Ok(secs)
    }

    /// Returns (events, replay ms, approval -> call start seconds).
    async fn cold_replay(
        &self,
        client: &Client,
        workers: &mut Vec<Worker>,
        turns: u32,
    ) -> anyhow::Result<(usize, f64, f64)> {
        let id = format!("{}-replay", self.queue);
        scenario::write_notes(&self.root.join(&id))?;
        self.llm.clear_queue();
        for turn in 1..turns {
            self.llm.push(scenario::reply(turn, u32::MAX));
        }
        let marks = self.root.join(format!("{id}.marks"));
        let command = format!("date +%s%N > '{}'", marks.display());
        let arguments = serde_json::json!({ "command": command }).to_string();
        self.llm
            .push_tool_calls(&[("call_last", SHELL, arguments.as_str())]);
        self.llm.push_text("done");
        let mut spec = shell_spec();
        spec.tools.push(READ_FILE.to_owned());
        spec.approval = Some(ApprovalPolicy {
            require_approval: vec![SHELL.to_owned()],
            ..Default::default()
        });
        spec.limits = Some(Limits {
            max_turns: turns + 2,
            history_events_budget: 1_000_000,
            ..Default::default()
        });
        let handle = start(client, self.queue, &id, spec).await?;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let out = baton(self.server, &["status", &id, "--json"])?;
            if out
                .json()
                .ok()
                .and_then(|v| v["pending"].as_array().map(|p| !p.is_empty()))
                == Some(true)
            {
                break;
            }
            ensure!(Instant::now() < deadline, "{id} never waited for approval");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        for w in workers.iter_mut() {
            w.kill9();
        }
        workers.clear();
        workers.push(self.spawn().await?);
        let approved = SystemTime::now();
        baton(self.server, &["approve", &id, "--all", "--signal"])?.ensure_success()?;
        let _ = handle
            .get_result(WorkflowGetResultOptions::default())
            .await
            .with_context(|| format!("waiting for {id}"))?;
        let started_ns: u128 = std::fs::read_to_string(&marks)?.trim().parse()?;
        let approval_to_call =
            started_ns as f64 / 1e9 - approved.duration_since(UNIX_EPOCH)?.as_secs_f64();
        let h = history::fetch(self.server, &id)?;
        let replay_ms = h
            .first_task_after_signal()
            .context("no workflow task after the approval")?;
        Ok((h.events.len(), replay_ms, approval_to_call))
    }
}

/// A run with only the shell tool, no approval needed, no sandbox (its marks file lies outside
/// the workspace).
pub(crate) fn shell_spec() -> RunSpec {
    RunSpec {
        task: "Run the command.".to_owned(),
        model: Some(ModelConfig {
            provider: "openai".to_owned(),
            model: "mock".to_owned(),
            ..Default::default()
        }),
        tools: vec![SHELL.to_owned()],
        approval: Some(ApprovalPolicy::default()),
        sandbox: Some(SandboxPolicy {
            mode: "off".to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) async fn start(
    client: &Client,
    queue: &str,
    id: &str,
    spec: RunSpec,
) -> anyhow::Result<WorkflowHandle<Client, AgentRun>> {
    let options = scenario::start_options(queue, id);
    client
        .start_workflow(AgentRun::run, spec, options)
        .await
        .with_context(|| format!("starting {id}"))?;
    Ok(client.get_workflow_handle::<AgentRun>(id.to_owned()))
}

/// Waits until `path` has `n` lines of `<ns> <pid>` and returns them.
async fn wait_lines(path: &Path, n: usize) -> anyhow::Result<Vec<(u128, u32)>> {
    let deadline = Instant::now() + TOOL_HEARTBEAT * 6;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<(u128, u32)> = text
            .lines()
            .filter_map(|l| {
                let (ns, pid) = l.split_once(' ')?;
                Some((ns.parse().ok()?, pid.parse().ok()?))
            })
            .collect();
        if lines.len() >= n {
            return Ok(lines);
        }
        if Instant::now() > deadline {
            bail!("{} has {} of {n} lines", path.display(), lines.len());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl HandoffReport {
    /// The report as Markdown.
    pub(crate) fn render(&self) -> String {
        let cell = |xs: &[f64]| {
            format!(
                "{:.2} | {:.2} | {:.2}",
                stats::median(xs),
                stats::percentile(xs, 95.0),
                xs.iter().copied().fold(f64::NAN, f64::max)
            )
        };
        format!(
            "### Hand-off latency ({} reps, {} dev server)\n\n\
             | event | measured from | median s | p95 s | max s | target |\n\
             |---|---|--:|--:|--:|---|\n\
             | SIGKILL of the worker running a shell call | the kill | {} | < 5 s (this build's \
             heartbeat timeout: {} s) |\n\
             | SIGTERM of that worker (grace {}s) | the end of the grace period | {} | < 2 s |\n\n\
             Cold replay: a {}-turn run ({} events, one segment) on a new worker: the workflow \
             task after the approval took **{:.0} ms** (started -> completed, server clock); the \
             approved call started {:.2} s after the approval was sent (including the {}s \
             sticky-queue timeout of the dead worker).\n{}",
            self.settings.reps,
            if self.settings.fast_server {
                "fast"
            } else {
                "default"
            },
            cell(&self.kill_s),
            TOOL_HEARTBEAT.as_secs(),
            GRACE.as_secs(),
            cell(&self.term_s),
            self.settings.replay_turns,
            self.replay_events,
            self.replay_ms,
            self.approval_to_call_s,
            3,
            self.traffic.map(render_traffic).unwrap_or_default()
        )
    }
}

fn render_traffic(t: Traffic) -> String {
    format!(
        "\nHeartbeat calls (`RecordActivityTaskHeartbeat` at the server's frontend): {:.0} in a \
         {} s tool call = **{:.1} per tool-minute**; {:.0} in a {} s model call = **{:.1} per \
         model-minute**.\n",
        t.tool_calls,
        t.secs,
        t.per_tool_minute(),
        t.llm_calls,
        t.secs,
        t.per_llm_minute()
    )
}
