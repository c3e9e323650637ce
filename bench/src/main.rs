//! `baton-bench`: what durability costs. See BENCHMARKS.md for the method and the results.
//!
//! Scenario 1, per-turn orchestration overhead (`baton-bench per-turn`): the same agent turns
//! (one model call to an instant mock model + one `read_file` call) measured side by side:
//!
//! - [`agent`]: (a) baton, a real `baton-worker` process running `AgentRun`;
//! - [`bare`]: (b) the bare Temporal floor, a minimal workflow with two no-op activities per
//!   turn on an in-process worker;
//! - [`inprocess`]: (c) the in-process floor, baton's state machine, provider and tool code
//!   called directly, no Temporal.
//!
//! [`per_turn`] runs them against one dev server, [`history`] reads each run's history with
//! the `temporal` CLI (turn times by the server's clock, bytes and events per turn),
//! [`report`] prints the tables, [`scenario`] holds what the mock model says, [`stats`] the
//! percentiles, [`host`] the machine description.
//!
//! Scenario 6, peer comparison (`baton-bench peer`, [`peer`]): the same task run by the OpenAI
//! Agents SDK's Temporal integration and by a plain Temporal Python SDK loop (scripts in
//! `bench/peer/`, run in a venv from PyPI), next to baton and the bare Rust loop.
//!
//! Scenarios 2 to 4: [`throughput`] (concurrent runs), [`handoff`] (SIGKILL/SIGTERM to retry,
//! cold replay, and [`heartbeats`]: heartbeat calls per tool-minute) and [`density`] (worker memory with many waiting runs); [`procfs`] reads CPU
//! time and resident memory.
//!
//! Scenario 7, workspace upload (`baton-bench upload`, [`upload`]): a 10,000-file, 100 MiB tree
//! uploaded as `--workspace-from` does, then again with its largest file changed; then
//! [`first_call`]: that tree submitted with the real CLI, submit to the first model call,
//! cold and warm.
//!
//! Prompt caching (`baton-bench caching`, [`caching`]): billed input tokens of a
//! 50-turn conversation behind a 40k-token prefix, with the Anthropic provider's
//! `cache_control` breakpoints and with them stripped, against a local server that accounts
//! like Anthropic's cache.
//!
//! Replay gate (`baton-bench replay-check`, [`replay_check`]): `baton replay-check`
//! over runs of ~1,000 history events, cold and against a warm cache.
//!
//! Network for tools (`baton-bench network`, [`network`]): tool start-up with and
//! without a network namespace, and the latency the proxy adds per HTTP/HTTPS request.
//!
//! Environments (`baton-bench environment`, [`environment`]): submit to the first
//! model call for a repository whose setup writes 200 MB, cold, from the environment cache on
//! another worker, and on the same worker (its local blob cache), on an S3 store.
//!
//! `baton-bench all [--short]` runs every scenario: per-turn on a default and on a fast dev
//! server, the others on the fast one; `--short` is the CI smoke mode. Set `BATON_BENCH_HISTORIES` to a
//! directory to keep the event histories the numbers were read from.

mod agent;
mod bare;
mod caching;
mod density;
mod environment;
mod eval;
mod first_call;
mod handoff;
mod heartbeats;
mod history;
mod host;
mod inprocess;
mod network;
mod peer;
mod per_turn;
mod procfs;
mod replay_check;
mod report;
mod scenario;
mod stats;
mod throughput;
mod upload;

use std::time::Instant;

use clap::{Args, Parser, Subcommand};

/// Benchmarks of baton: the cost of durability.
#[derive(Debug, Parser)]
#[command(name = "baton-bench", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Per-turn orchestration overhead: baton vs a bare Temporal loop vs the same loop
    /// without Temporal.
    PerTurn(PerTurnArgs),
    /// Throughput: many concurrent runs on one worker (baton vs bare Temporal), then on two.
    Throughput(ThroughputArgs),
    /// Density: worker memory with many runs waiting for approval, cached and evicted.
    Density(DensityArgs),
    /// Evaluation: `baton eval` of many runs at a concurrency on one worker, its wall time
    /// beside the runs' own, and what the harness adds.
    Eval(EvalArgs),
    /// Hand-off latency: SIGKILL/SIGTERM of the worker running a tool, cold replay.
    Handoff(HandoffArgs),
    /// Peer comparison: the same 20-turn task with the OpenAI Agents SDK's Temporal
    /// integration (Python) and a plain Temporal Python SDK loop, next to baton and the bare
    /// Rust loop.
    Peer(PeerArgs),
    /// Workspace upload (`--workspace-from`): a generated tree into a fresh local store, then
    /// the same tree with its largest file changed; then submit to the first model call with
    /// that tree, cold and warm.
    Upload(UploadArgs),
    /// Prompt caching: billed input tokens of a 50-turn Anthropic conversation behind a
    /// 40k-token prefix, with and without `cache_control` breakpoints.
    Caching(CachingArgs),
    /// Replay gate: `baton replay-check` over runs of ~1,000 events, cold and with a warm cache.
    ReplayCheck(ReplayCheckArgs),
    /// Network for tools: tool start-up with and without a network namespace, and the
    /// latency the proxy adds per HTTP/HTTPS request (curl in a confined shell call).
    Network(NetworkArgs),
    /// Environments: submit to the first model call for a repository whose setup writes a
    /// large output, on an S3 store (moto): cold, from the cache on another worker, from the
    /// cache on the same worker.
    Environment(EnvironmentArgs),
    /// Every scenario: per-turn on a default and on a fast dev server, then the others.
    All(AllArgs),
}

#[derive(Debug, Args)]
struct PerTurnArgs {
    /// Turns per run (the model answers at the last one).
    #[arg(long, default_value_t = 200)]
    turns: u32,
    /// Timed runs of each variant.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Start the dev server with `--dynamic-config-value
    /// history.transferProcessorMaxPollRPS=1000`.
    #[arg(long)]
    fast_server: bool,
    /// Let the mock model stream its answers (SSE). Off by default: the harness mock writes a
    /// stream in many small TCP writes without TCP_NODELAY, which adds a delayed-ACK stall of
    /// ~40 ms per call that no real "instant" model would have.
    #[arg(long)]
    stream: bool,
}

#[derive(Debug, Args)]
struct ThroughputArgs {
    /// Concurrent runs (repeatable).
    #[arg(long = "runs", default_values_t = [50, 200])]
    runs: Vec<u32>,
    /// Turns per run.
    #[arg(long, default_value_t = 20)]
    turns: u32,
    /// Start the dev server with `--dynamic-config-value
    /// history.transferProcessorMaxPollRPS=1000`.
    #[arg(long)]
    fast_server: bool,
    /// Also run the bare loop with one status upsert pair per turn.
    #[arg(long)]
    ablation: bool,
    /// Also run baton on this many worker processes, at the highest --runs (repeatable).
    #[arg(long = "workers", default_values_t = [2])]
    scale_out: Vec<usize>,
    /// Also run baton with read-only tools as regular activities (`--remote-read-tools`).
    #[arg(long)]
    remote_reads: bool,
}

#[derive(Debug, Args)]
struct DensityArgs {
    /// Runs waiting for approval.
    #[arg(long, default_value_t = 1000)]
    runs: u32,
    /// Start the dev server with `--dynamic-config-value
    /// history.transferProcessorMaxPollRPS=1000`.
    #[arg(long)]
    fast_server: bool,
}

#[derive(Debug, Args)]
struct EvalArgs {
    /// Runs in all.
    #[arg(long, default_value_t = eval::Settings::FULL.runs)]
    runs: u32,
    /// Runs going at once.
    #[arg(long, default_value_t = eval::Settings::FULL.concurrency)]
    concurrency: u32,
}

#[derive(Debug, Args)]
struct HandoffArgs {
    /// Kills of each kind.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Turns of the cold-replay run.
    #[arg(long, default_value_t = 500)]
    replay_turns: u32,
    /// Start the dev server with `--dynamic-config-value
    /// history.transferProcessorMaxPollRPS=1000`.
    #[arg(long)]
    fast_server: bool,
    /// Seconds of the model call and of the tool call whose heartbeat calls are counted
    /// (0: skip).
    #[arg(long, default_value_t = 60)]
    traffic_secs: u32,
}

#[derive(Debug, Args)]
struct PeerArgs {
    /// Turns per run (the model answers at the last one).
    #[arg(long, default_value_t = 20)]
    turns: u32,
    /// Timed runs of each variant.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Start the dev server with `--dynamic-config-value
    /// history.transferProcessorMaxPollRPS=1000`.
    #[arg(long)]
    fast_server: bool,
}

#[derive(Debug, Args)]
struct UploadArgs {
    /// Files in the generated tree.
    #[arg(long, default_value_t = upload::Settings::FULL.files)]
    files: usize,
    /// MiB in the generated tree.
    #[arg(long, default_value_t = upload::Settings::FULL.bytes / (1024 * 1024))]
    mib: u64,
    /// The CI smoke size (2,000 files, 10 MiB) instead of --files and --mib.
    #[arg(long, conflicts_with_all = ["files", "mib"])]
    short: bool,
}

#[derive(Debug, Args)]
struct EnvironmentArgs {
    /// The CI smoke size (1,000 files, 200 x 50 KB of setup output) instead of 10,000 files and
    /// 200 MB.
    #[arg(long)]
    short: bool,
}

#[derive(Debug, Args)]
struct CachingArgs {
    /// Turns (requests) of the conversation.
    #[arg(long, default_value_t = caching::Settings::FULL.turns)]
    turns: u32,
    /// Approximate tokens of the system prompt + tools.
    #[arg(long, default_value_t = caching::Settings::FULL.prefix_tokens)]
    prefix_tokens: usize,
}

#[derive(Debug, Args)]
struct ReplayCheckArgs {
    /// Runs to replay.
    #[arg(long, default_value_t = replay_check::Settings::FULL.runs)]
    runs: u32,
    /// Tool turns per run (~12 history events each).
    #[arg(long, default_value_t = replay_check::Settings::FULL.turns)]
    turns: u32,
}

#[derive(Debug, Args)]
struct NetworkArgs {
    /// Timed starts of each start-up variant.
    #[arg(long, default_value_t = network::Settings::FULL.starts)]
    starts: u32,
    /// Requests of each request row.
    #[arg(long, default_value_t = network::Settings::FULL.requests)]
    requests: u32,
    /// The CI smoke size (30 starts, 30 requests) instead of --starts and --requests.
    #[arg(long, conflicts_with_all = ["starts", "requests"])]
    short: bool,
}

#[derive(Debug, Args)]
struct AllArgs {
    /// CI smoke mode: every scenario at a few seconds' size (numbers are printed, not checked).
    #[arg(long)]
    short: bool,
    /// Turns per run of the per-turn scenario (default 50 on the default server and 100 on the
    /// fast one, or 10 with --short).
    #[arg(long)]
    turns: Option<u32>,
    /// Timed runs of each per-turn variant (default 3, or 1 with --short).
    #[arg(long)]
    reps: Option<u32>,
}

/// Where the dev servers' databases, the workers' workspaces and the blob stores go:
/// `BATON_BENCH_TMPDIR`, else `/dev/shm` when it exists (memory: the server's SQLite writes
/// then cost no disk I/O, whose latency on a shared VM disk is the largest source of noise
/// between runs; this is an "in-memory dev server"), else the system's temp dir.
fn scratch_dir() -> String {
    let wanted = std::env::var_os("BATON_BENCH_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/dev/shm".into());
    if wanted.is_dir() && tempfile::env::override_temp_dir(&wanted).is_ok() {
        return wanted.display().to_string();
    }
    format!("{} (system temp dir)", std::env::temp_dir().display())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var_os(bare::SERVE_ENV).is_some() {
        return bare::serve_from_env().await;
    }
    let cli = Cli::parse();
    let started = Instant::now();
    let scratch = scratch_dir();
    println!("{}", host::describe());
    println!("scratch:  {scratch}\n");
    match cli.command {
        Command::PerTurn(args) => {
            let report = per_turn::run(per_turn::Settings {
                turns: args.turns,
                reps: args.reps,
                fast_server: args.fast_server,
                stream: args.stream,
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Throughput(args) => {
            let report = throughput::run(throughput::Settings {
                concurrency: args.runs,
                turns: args.turns,
                fast_server: args.fast_server,
                scale_out: args.scale_out,
                ablation: args.ablation,
                remote_reads: args.remote_reads,
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Density(args) => {
            let report = density::run(density::Settings {
                runs: args.runs,
                fast_server: args.fast_server,
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Eval(args) => {
            let report = eval::run(eval::Settings {
                runs: args.runs,
                concurrency: args.concurrency,
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Handoff(args) => {
            let report = handoff::run(handoff::Settings {
                reps: args.reps,
                replay_turns: args.replay_turns,
                fast_server: args.fast_server,
                traffic_secs: args.traffic_secs,
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Peer(args) => {
            let python = peer::prepare().await.map_err(|e| format!("{e:#}"));
            let report = peer::run(
                peer::Settings {
                    turns: args.turns,
                    reps: args.reps,
                    fast_server: args.fast_server,
                },
                python,
            )
            .await?;
            println!("{}", report.render());
        }
        Command::Upload(args) => {
            let report = upload::run(if args.short {
                upload::Settings::SHORT
            } else {
                upload::Settings {
                    files: args.files,
                    bytes: args.mib * 1024 * 1024,
                }
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Caching(args) => {
            let report = caching::run(caching::Settings {
                turns: args.turns,
                prefix_tokens: args.prefix_tokens,
                ..caching::Settings::FULL
            })
            .await?;
            println!("{}", report.render());
        }
        Command::ReplayCheck(args) => {
            let report = replay_check::run(replay_check::Settings {
                runs: args.runs,
                turns: args.turns,
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Environment(args) => {
            let report = environment::run(if args.short {
                environment::Settings::SHORT
            } else {
                environment::Settings::FULL
            })
            .await?;
            println!("{}", report.render());
        }
        Command::Network(args) => {
            let report = network::run(if args.short {
                network::Settings::SHORT
            } else {
                network::Settings {
                    starts: args.starts,
                    requests: args.requests,
                    ..network::Settings::FULL
                }
            })
            .await?;
            println!("{}", report.render());
        }
        Command::All(args) => {
            // The whole table of BENCHMARKS.md in under 10 minutes on 2 cores: per-turn on both
            // dev-server settings (the headline), every other scenario on the fast one.
            let short = args.short;
            let mut reports = Vec::new();
            let lap = |what: &str| {
                eprintln!("[{what} done at {:.0} s]", started.elapsed().as_secs_f64());
            };
            for fast_server in [false, true] {
                // The default server's figures are its 100 ms poll slots: fewer turns show
                // them as well.
                let (turns, reps) = match (short, fast_server) {
                    (true, _) => (10, 1),
                    (false, false) => (30, 2),
                    (false, true) => (100, 3),
                };
                let report = per_turn::run(per_turn::Settings {
                    turns: args.turns.unwrap_or(turns),
                    reps: args.reps.unwrap_or(reps),
                    fast_server,
                    stream: false,
                })
                .await?;
                println!("{}", report.render());
                reports.push(report);
                lap("per-turn");
            }
            println!("{}", report::summary(&reports));
            // 50 concurrent 20-turn runs (and 2 workers), then 200 concurrent 20-turn runs.
            let throughput = if short {
                vec![(5, 5)]
            } else {
                vec![(50, 20), (200, 20)]
            };
            for (i, (runs, turns)) in throughput.into_iter().enumerate() {
                let report = throughput::run(throughput::Settings {
                    concurrency: vec![runs],
                    turns,
                    fast_server: true,
                    scale_out: if i == 0 { vec![2] } else { Vec::new() },
                    ablation: false,
                    remote_reads: false,
                })
                .await?;
                println!("{}", report.render());
                lap("throughput");
            }
            let report = handoff::run(handoff::Settings {
                reps: if short { 1 } else { 3 },
                replay_turns: if short { 20 } else { 500 },
                fast_server: true,
                traffic_secs: if short { 5 } else { 60 },
            })
            .await?;
            println!("{}", report.render());
            lap("hand-off");
            let report = density::run(density::Settings {
                runs: if short { 20 } else { 1000 },
                fast_server: true,
            })
            .await?;
            println!("{}", report.render());
            lap("density");
            let report = eval::run(if short {
                eval::Settings::SHORT
            } else {
                eval::Settings::FULL
            })
            .await?;
            println!("{}", report.render());
            lap("eval");
            let report = upload::run(if short {
                upload::Settings::SHORT
            } else {
                upload::Settings::FULL
            })
            .await?;
            println!("{}", report.render());
            lap("upload");
            // A few seconds at full size: the same in short mode.
            let report = caching::run(caching::Settings::FULL).await?;
            println!("{}", report.render());
            lap("caching");
            let report = replay_check::run(if short {
                replay_check::Settings::SHORT
            } else {
                replay_check::Settings::FULL
            })
            .await?;
            println!("{}", report.render());
            lap("replay-check");
            let report = network::run(if short {
                network::Settings::SHORT
            } else {
                network::Settings::FULL
            })
            .await?;
            println!("{}", report.render());
            lap("network");
            let report = environment::run(if short {
                environment::Settings::SHORT
            } else {
                environment::Settings::FULL
            })
            .await?;
            println!("{}", report.render());
            lap("environment");
            // Scenario 6 needs a venv from PyPI: when it cannot be set up (PyPI slow or
            // unreachable), say why and go on, so that CI does not fail for it.
            match peer::prepare().await {
                Err(e) => println!("### Peer comparison skipped: no Python venv: {e:#}\n"),
                Ok(python) => {
                    let settings = peer::Settings {
                        turns: if short { 3 } else { 20 },
                        reps: if short { 1 } else { 3 },
                        fast_server: true,
                    };
                    let report = peer::run(settings, Ok(python)).await?;
                    println!("{}", report.render());
                }
            }
            lap("peer");
        }
    }
    println!("total time: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
