//! Scenario 2, throughput: many concurrent runs of the per-turn scenario's agent (20 turns,
//! one model call + one `read_file` per turn) on one `baton-worker` process, against the same
//! number of bare Temporal loops ([`crate::bare::BareLoop`]) on a worker process of their own,
//! then on two `baton-worker` processes. Reports turns per second and the CPU each worker
//! process and the dev server spent per turn.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use baton_tests::{DevServer, MockOpenAi, Worker, unique};
use futures::future::try_join_all;
use temporalio_client::Client;

use crate::{agent, bare, per_turn, procfs, scenario, stats};

/// How long a worker process may take to start.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What to measure.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Concurrent runs of each measurement (e.g. 50 and 200).
    pub(crate) concurrency: Vec<u32>,
    /// Turns per run.
    pub(crate) turns: u32,
    /// Start the dev server with [`per_turn::FAST_SERVER_CONFIG`].
    pub(crate) fast_server: bool,
    /// Also measure baton on this many `baton-worker` processes each (at the highest
    /// concurrency: where the server, not the worker, becomes the limit).
    pub(crate) scale_out: Vec<usize>,
    /// Also measure the bare loop with one status memo and search-attribute upsert per turn
    /// (what the visibility writes cost at each concurrency).
    pub(crate) ablation: bool,
    /// Also measure baton with read-only tools as regular activities.
    pub(crate) remote_reads: bool,
}

/// Which workflow a measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// `AgentRun` on `baton-worker` processes.
    Baton,
    /// `AgentRun` with its read-only tools as regular activities (`--remote-read-tools`, the
    /// default before local read-only tools).
    BatonRemoteReads,
    /// `BareLoop` (no status upserts) on a bench worker process.
    Bare,
    /// `BareLoop` with a status memo and search-attribute upsert per turn.
    BareUpserts,
}

/// One measurement: `runs` concurrent runs of `turns` turns.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) variant: Variant,
    pub(crate) workers: usize,
    pub(crate) runs: u32,
    pub(crate) turns: u32,
    /// From the first start request to the last result, in seconds.
    pub(crate) wall_s: f64,
    /// Each run's own wall time, in seconds.
    pub(crate) run_s: Vec<f64>,
    /// CPU time of the worker processes (summed), in seconds.
    pub(crate) worker_cpu_s: f64,
    /// CPU time of the dev server, in seconds.
    pub(crate) server_cpu_s: f64,
}

impl Row {
    fn total_turns(&self) -> f64 {
        f64::from(self.runs) * f64::from(self.turns)
    }

    /// Turns completed per second of wall time.
    pub(crate) fn turns_per_s(&self) -> f64 {
        self.total_turns() / self.wall_s
    }

    fn worker_cpu_ms_per_turn(&self) -> f64 {
        self.worker_cpu_s * 1000.0 / self.total_turns()
    }

    fn server_cpu_ms_per_turn(&self) -> f64 {
        self.server_cpu_s * 1000.0 / self.total_turns()
    }
}

/// The result of the throughput scenario.
#[derive(Debug)]
pub(crate) struct ThroughputReport {
    pub(crate) settings: Settings,
    pub(crate) rows: Vec<Row>,
}

/// Runs the scenario, each measurement on a dev server of its own: a server slows down as
/// the histories of finished runs pile up (the 50-run measurement after the 200-run ones took
/// 1.6x the server CPU per turn), so one shared server favours whichever variant runs first.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<ThroughputReport> {
    anyhow::ensure!(
        settings.turns >= 1 && settings.concurrency.iter().all(|&c| c >= 1),
        "turns and concurrency must be at least 1"
    );
    let mut variants = vec![Variant::Bare, Variant::Baton];
    if settings.ablation {
        variants.push(Variant::BareUpserts);
    }
    if settings.remote_reads {
        variants.push(Variant::BatonRemoteReads);
    }
    let mut rows = Vec::new();
    for &runs in &settings.concurrency {
        for &variant in &variants {
            let cell = Settings {
                concurrency: vec![runs],
                scale_out: Vec::new(),
                ..settings.clone()
            };
            rows.extend(run_on_one_server(cell, &[variant]).await?.rows);
        }
    }
    let runs = settings.concurrency.iter().copied().max().unwrap_or(1);
    for &n in &settings.scale_out {
        let cell = Settings {
            concurrency: vec![runs],
            scale_out: vec![n],
            ..settings.clone()
        };
        rows.extend(run_on_one_server(cell, &[]).await?.rows);
    }
    Ok(ThroughputReport { settings, rows })
}

/// Measures `variants` (and, with `settings.scale_out = [n]`, baton on n workers) at each of
/// `settings.concurrency` on one fresh dev server.
async fn run_on_one_server(
    settings: Settings,
    variants: &[Variant],
) -> anyhow::Result<ThroughputReport> {
    let server = per_turn::start_server(settings.fast_server)?;
    let llm = MockOpenAi::start()?;
    llm.count_requests_only();
    llm.set_responder(scenario::responder(settings.turns));
    // Both baton workers share one workspace root, so either can read a run's notes.
    let root = tempfile::tempdir().context("creating the workspace root")?;
    let queue = unique("tp-baton");
    // Only the workers this server's measurements use (an idle one would still poll it).
    let scale_out = settings.scale_out.first().copied();
    let is_baton = |v: &Variant| matches!(v, Variant::Baton | Variant::BatonRemoteReads);
    let needs_baton = variants.iter().any(is_baton) || scale_out.is_some();
    let needs_bare = variants.iter().any(|v| !is_baton(v));
    let mut workers = Vec::new();
    if needs_baton {
        workers.push(spawn_baton(&server, &llm, &queue, root.path()).await?);
    }
    let bare_queue = unique("tp-bare");
    let mut bare_worker = None;
    if needs_bare {
        let exe = std::env::current_exe().context("locating baton-bench")?;
        let mut w =
            Worker::spawn_program(&exe, &server, &bare_queue, None, &[(bare::SERVE_ENV, "1")])?;
        w.wait_ready(READY_TIMEOUT).await?;
        bare_worker = Some(w);
    }
    let bare_pids: Vec<u32> = bare_worker.iter().map(Worker::pid).collect();
    let client = bare::connect(&server.url(), "baton-bench").await?;
    let tag = unique("tp");

    eprintln!(
        "throughput [{}]: {:?} concurrent runs of {} turns",
        server_label(settings.fast_server),
        settings.concurrency,
        settings.turns
    );
    // Warm-up: a few runs of each, untimed.
    let mut m = Measure {
        client: &client,
        server: &server,
        turns: settings.turns,
    };
    let pids: Vec<u32> = workers.iter().map(Worker::pid).collect();
    if needs_bare {
        m.batch(
            Variant::Bare,
            &bare_queue,
            &bare_pids,
            None,
            4,
            &format!("{tag}-bw"),
        )
        .await?;
    }
    if needs_baton {
        m.batch(
            Variant::Baton,
            &queue,
            &pids,
            Some(root.path()),
            4,
            &format!("{tag}-aw"),
        )
        .await?;
    }

    let mut rows = Vec::new();
    for &runs in &settings.concurrency {
        for &variant in variants {
            let (q, pids, notes) = match variant {
                Variant::Bare | Variant::BareUpserts => {
                    (bare_queue.as_str(), bare_pids.clone(), None)
                }
                Variant::Baton | Variant::BatonRemoteReads => {
                    (queue.as_str(), pids.clone(), Some(root.path()))
                }
            };
            let id = format!("{tag}-{variant:?}-{runs}");
            let row = m.batch(variant, q, &pids, notes, runs, &id).await?;
            eprintln!(
                "  {variant:?} x{runs} on {} worker(s): {:.1} turns/s",
                row.workers,
                row.turns_per_s()
            );
            rows.push(row);
        }
    }
    if let Some(n) = scale_out {
        // n baton workers on the same task queue.
        while workers.len() < n {
            workers.push(spawn_baton(&server, &llm, &queue, root.path()).await?);
        }
        let pids: Vec<u32> = workers.iter().map(Worker::pid).collect();
        let runs = settings.concurrency.iter().copied().max().unwrap_or(1);
        let row = m
            .batch(
                Variant::Baton,
                &queue,
                &pids,
                Some(root.path()),
                runs,
                &format!("{tag}-{n}w-{runs}"),
            )
            .await?;
        eprintln!(
            "  Baton x{runs} on {n} workers: {:.1} turns/s",
            row.turns_per_s()
        );
        rows.push(row);
    }
    for mut w in workers {
        w.terminate()?;
    }
    if let Some(mut w) = bare_worker {
        w.terminate()?;
    }
    Ok(ThroughputReport { settings, rows })
}

async fn spawn_baton(
    server: &DevServer,
    llm: &MockOpenAi,
    queue: &str,
    root: &Path,
) -> anyhow::Result<Worker> {
    let url = llm.base_url();
    let mut worker =
        Worker::spawn_with_workspace(server, queue, root, &[("OPENAI_BASE_URL", url.as_str())])?;
    worker.wait_ready(READY_TIMEOUT).await?;
    Ok(worker)
}

struct Measure<'a> {
    client: &'a Client,
    server: &'a DevServer,
    turns: u32,
}

impl Measure<'_> {
    /// Starts `runs` runs of `variant` at once (ids `<tag>-<i>`) and waits for all of them.
    async fn batch(
        &mut self,
        variant: Variant,
        queue: &str,
        worker_pids: &[u32],
        notes_root: Option<&Path>,
        runs: u32,
        tag: &str,
    ) -> anyhow::Result<Row> {
        let ids: Vec<String> = (0..runs).map(|i| format!("{tag}-{i}")).collect();
        if let Some(root) = notes_root {
            for id in &ids {
                scenario::write_notes(&root.join(id))?;
            }
        }
        let cpu = |pids: &[u32]| -> anyhow::Result<f64> {
            pids.iter().map(|&p| procfs::cpu_seconds(p)).sum()
        };
        let (worker0, server0) = (cpu(worker_pids)?, procfs::cpu_seconds(self.server.pid())?);
        let started = Instant::now();
        let turns = self.turns;
        let client = self.client;
        let walls = try_join_all(ids.iter().map(|id| async move {
            match variant {
                Variant::Baton => agent::run_agent(client, queue, id, turns, false).await,
                Variant::BatonRemoteReads => agent::run_agent(client, queue, id, turns, true).await,
                Variant::Bare => bare::run_loop(client, queue, id, turns, false).await,
                Variant::BareUpserts => bare::run_loop(client, queue, id, turns, true).await,
            }
        }))
        .await?;
        let wall = started.elapsed();
        Ok(Row {
            variant,
            workers: worker_pids.len(),
            runs,
            turns,
            wall_s: wall.as_secs_f64(),
            run_s: walls.iter().map(|w| w.as_secs_f64()).collect(),
            worker_cpu_s: cpu(worker_pids)? - worker0,
            server_cpu_s: procfs::cpu_seconds(self.server.pid())? - server0,
        })
    }
}

fn server_label(fast: bool) -> String {
    if fast {
        format!("fast ({})", per_turn::FAST_SERVER_CONFIG)
    } else {
        "default".to_owned()
    }
}

impl ThroughputReport {
    /// The report as Markdown.
    pub(crate) fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "### Throughput, {} dev server ({} turns per run)\n\n\
             | variant | worker processes | concurrent runs | wall s | turns/s | run p50 s | \
             run p95 s | worker CPU ms/turn | server CPU ms/turn |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
            server_label(self.settings.fast_server),
            self.settings.turns
        );
        for r in &self.rows {
            let name = match r.variant {
                Variant::Baton => "baton AgentRun (baton-worker), default: local read-only tools",
                Variant::BatonRemoteReads => {
                    "baton AgentRun, read-only tools as activities (--remote-read-tools)"
                }
                Variant::Bare => "bare Temporal BareLoop (bench worker process)",
                Variant::BareUpserts => {
                    "ablation: BareLoop + one memo and search-attribute upsert per turn"
                }
            };
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} |",
                r.workers,
                r.runs,
                r.wall_s,
                r.turns_per_s(),
                stats::median(&r.run_s),
                stats::percentile(&r.run_s, 95.0),
                r.worker_cpu_ms_per_turn(),
                r.server_cpu_ms_per_turn(),
            );
        }
        out.push('\n');
        for &runs in &self.settings.concurrency {
            let find = |v: Variant| {
                self.rows
                    .iter()
                    .find(|r| r.variant == v && r.runs == runs && r.workers == 1)
            };
            for (v, what) in [
                (Variant::Baton, "baton"),
                (Variant::BatonRemoteReads, "baton with reads as activities"),
            ] {
                if let (Some(a), Some(b)) = (find(v), find(Variant::Bare)) {
                    let _ = writeln!(
                        out,
                        "{what} / bare Temporal at {runs} concurrent runs: turns/s **{:.2}x**, \
                         worker CPU per turn {:.2}x, server CPU per turn {:.2}x",
                        a.turns_per_s() / b.turns_per_s(),
                        a.worker_cpu_ms_per_turn() / b.worker_cpu_ms_per_turn(),
                        a.server_cpu_ms_per_turn() / b.server_cpu_ms_per_turn()
                    );
                }
            }
        }
        out
    }
}
