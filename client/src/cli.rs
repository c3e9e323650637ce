//! Command-line interface definition (clap): the commands and their arguments here; the
//! flags' value sets in `cli/values.rs`, their parsers in `cli/parse.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod parse;
mod submit;
mod values;

pub(crate) use parse::*;
pub(crate) use submit::*;
pub(crate) use values::*;

/// baton: AI agents as durable Temporal workflows.
///
/// Connection settings follow the `temporal` CLI: TEMPORAL_ADDRESS (default localhost:7233),
/// TEMPORAL_NAMESPACE (default "default"), and profiles in temporal.toml.
///
/// Exit codes: 0 completed; 1 the agent ended without completing (or its --deliver failed); 2
/// usage or invalid input;
/// 3 --wait timed out (run still going); 4 cancelled or terminated; 5 cannot reach Temporal or
/// other infrastructure error.
///
/// Colour and spinners only when stdout is a terminal and NO_COLOR is unset or empty.
#[derive(Debug, Parser)]
#[command(name = "baton", version, about, long_about)]
pub(crate) struct Cli {
    /// Print JSON on stdout instead of text: one object (`watch`: one line per event), also
    /// when the command fails (`{"error", "exit_code"}`). The objects are in
    /// docs/src/reference/json.md.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Command {
    /// The command with the global `--json` in its arguments; a usage error for a command
    /// that prints no JSON.
    pub(crate) fn with_json(mut self, json: bool) -> Result<Self, String> {
        let set = match &mut self {
            Command::Submit(a) => &mut a.json,
            Command::Fork(a) => &mut a.json,
            Command::Status(a) | Command::Transcript(a) => &mut a.json,
            Command::Approve(a) | Command::Deny(a) => &mut a.json,
            Command::Result(a) => &mut a.json,
            Command::Watch(a) => &mut a.json,
            Command::Send(a) => &mut a.json,
            Command::Show(a) => &mut a.json,
            Command::List(a) => &mut a.json,
            Command::Pending(a) => &mut a.json,
            Command::Diff(a) => &mut a.json,
            Command::Download(a) => &mut a.json,
            Command::ReplayCheck(a) => &mut a.json,
            Command::Eval(a) => &mut a.json,
            Command::Fleet {
                command: FleetCommand::Status(a) | FleetCommand::Patches(a),
            } => &mut a.json,
            Command::Schedule { command } => match command {
                ScheduleCommand::List(a) => &mut a.json,
                ScheduleCommand::Describe(a) | ScheduleCommand::Trigger(a) => &mut a.json,
                ScheduleCommand::Delete(a) => &mut a.json,
                ScheduleCommand::Pause(a) | ScheduleCommand::Unpause(a) => &mut a.json,
                ScheduleCommand::Backfill(a) => &mut a.json,
                ScheduleCommand::Create(a) => &mut a.run.json,
            },
            Command::Cancel(_)
            | Command::Apply(_)
            | Command::CodecServer(_)
            | Command::Serve(_)
            | Command::Completions { .. } => {
                return if json {
                    Err("this command prints no JSON; run it without --json".to_owned())
                } else {
                    Ok(self)
                };
            }
        };
        *set = json;
        Ok(self)
    }
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub(crate) enum Command {
    /// Start a run.
    Submit(SubmitArgs),
    /// Start a new run from turn N of another: RUN's conversation up to the end of that turn
    /// (carried by reference, not replayed) and RUN's workspace as it was then, to try another
    /// instruction from a known state without paying for the turns before it again. The
    /// fork's turns count on from N, so RUN's turn limit applies to the total (--max-turns).
    Fork(ForkArgs),
    /// Show a run's state, pending approvals and token use (answers even with no worker up).
    Status(RunArgs),
    /// Approve pending tool calls (no CALL_ID on a terminal: asks per call).
    Approve(DecideArgs),
    /// Deny pending tool calls; the model is told why (no CALL_ID on a terminal: asks per call).
    Deny(DecideArgs),
    /// Print a finished run's result.
    Result(ResultArgs),
    /// Follow a run live: each turn's text, tool calls, approvals, results and token use.
    /// Re-attach any time; Ctrl-C detaches (exit 3), the run goes on.
    Watch(WatchArgs),
    /// Cancel a run (running tools are stopped).
    Cancel(CancelArgs),
    /// Send guidance to a running agent; it sees it before its next model call.
    Send(SendArgs),
    /// Print the whole conversation, with full tool outputs (needs a worker to answer).
    Transcript(RunArgs),
    /// Print one call's whole arguments (those over 1 KiB are cut in `pending`/`status`: the
    /// whole is in the workers' blob store; needs a worker to answer and the store).
    Show(ShowArgs),
    /// List runs (newest first), found through Temporal visibility.
    List(ListArgs),
    /// Runs waiting for approval, with each pending call and how long it has waited.
    Pending(PendingArgs),
    /// Print a run's change set as a git-style patch (binary files as git binary patches).
    Diff(DiffArgs),
    /// Apply a run's change set to the current directory (a git checkout or not), atomically:
    /// on a conflict nothing changes (exit 2).
    Apply(ApplyArgs),
    /// Write a run's final files into a directory. Nothing at or under a `.git` directory
    /// (at any depth) is written: such entries are listed on stderr and in `--json`
    /// (`left_out`), and leaving them out alone does not fail the command (exit 0).
    Download(DownloadArgs),
    /// Replay the histories of open and recent runs against this build's workflow code, before
    /// rolling it out: exits 1 naming each run that would fail, and the event where it parts.
    ReplayCheck(ReplayCheckArgs),
    /// The worker fleet: `baton fleet status` shows each build of the deployment and the runs
    /// pinned to it.
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
    },
    /// Runs on a schedule (Temporal Schedules): create, list, describe, pause, unpause,
    /// trigger, delete.
    Schedule {
        #[command(subcommand)]
        command: ScheduleCommand,
    },
    /// Evaluate configurations on a suite of tasks: every task under every configuration,
    /// --repeat times, as ordinary runs graded by the tasks' verification commands; prints
    /// pass rate, pass@k, turns, tokens, cost and time per configuration
    /// (docs/src/guide/evaluating.md).
    Eval(EvalArgs),
    /// Serve Temporal's remote codec endpoint (POST /{namespace}/encode|decode) with the keys in
    /// BATON_CODEC_KEYS, for `temporal --codec-endpoint` and the Web UI.
    CodecServer(CodecServerArgs),
    /// Serve GitHub webhooks: an issue labelled `baton`, or a `/baton <task>` comment on an
    /// issue or pull request, from a user with the permission, starts (or continues) that
    /// issue's run; docs/src/guide/github.md.
    Serve(ServeArgs),
    /// Print a shell completion script: `baton completions bash > /etc/bash_completion.d/baton`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The run to fork, running or ended (a worker must answer for it, as for `transcript`;
    /// its stored conversation is read from the workers' blob store, BATON_STORE__*).
    pub(crate) run: String,
    /// Fork after this turn (model call) of RUN, counted from 1 as `status` counts them: the
    /// fork gets that call's reply and the results of its tool calls, not a message a user sent
    /// after them. The fork's turns count on from N.
    #[arg(long, value_name = "N")]
    pub(crate) at_turn: u32,
    /// What the fork should do from there: a user message the model gets before the fork's
    /// first call (unlike `submit --instructions`, which adds to the system prompt). Needed
    /// when turn N is RUN's final answer.
    #[arg(long, value_name = "TEXT")]
    pub(crate) instructions: Option<String>,
    /// The fork's run id (default: a new unique id); no run may have it yet.
    #[arg(long, value_parser = parse_run_id)]
    pub(crate) id: Option<String>,
    /// The fork's limit on model calls, RUN's first N included (default: RUN's limit, itself
    /// 50 unless RUN was submitted with --max-turns).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_turns: Option<u32>,
    /// Label the fork (repeatable), on top of RUN's labels; `baton.fork_of` names RUN.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub(crate) labels: Vec<(String, String)>,
    /// Task queue the workers poll (default: RUN's).
    #[arg(long)]
    pub(crate) task_queue: Option<String>,
    #[command(flatten)]
    pub(crate) waiting: WaitArgs,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The suite (TOML): [[task]] entries (a git URL and ref or a directory, a prompt, verify
    /// commands) and [[config]] entries (provider, model, script, policy, limits).
    pub(crate) suite: PathBuf,
    /// The evaluation's id (default: a new one, printed first). Given again, it resumes the
    /// evaluation: runs that exist are waited for, never started twice.
    #[arg(long, value_parser = parse_eval_id)]
    pub(crate) id: Option<String>,
    /// Runs per task and configuration (default: the suite's `repeat`, else 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) repeat: Option<u32>,
    /// At most this many of the evaluation's runs going at once.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) concurrency: u32,
    /// Only this configuration (repeatable; default: every one in the suite).
    #[arg(long = "config", value_name = "NAME")]
    pub(crate) configs: Vec<String>,
    /// Print configuration B against A: the differences in pass rate, turns and cost, and
    /// task by task.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub(crate) compare: Vec<String>,
    /// Task queue the workers poll.
    #[arg(long, env = "BATON_TASK_QUEUE", default_value = "baton")]
    pub(crate) task_queue: String,
    /// Stop waiting after this long and print what has ended (exit 3); the runs go on, and
    /// --id picks the evaluation up again.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub(crate) wait_timeout: Option<std::time::Duration>,
    /// Counterfactual replay: fork the closed runs this visibility query finds (e.g.
    /// "BatonLabels = 'team=infra' AND ExecutionStatus = 'Completed'") at --at-turn under the
    /// one --config, instead of the suite's tasks, and compare each fork with its original.
    #[arg(long, value_name = "QUERY", requires = "at_turn")]
    pub(crate) from_runs: Option<String>,
    /// With --from-runs: the turn to fork at, or `each` (every turn but the last).
    #[arg(long, value_name = "N|each", value_parser = parse_at_turn, requires = "from_runs")]
    pub(crate) at_turn: Option<AtTurn>,
    /// With --from-runs: at most this many original runs (newest first).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000), requires = "from_runs")]
    pub(crate) limit: u32,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

/// Where `eval --from-runs` forks each run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum AtTurn {
    Turn(u32),
    Each,
}

impl std::fmt::Display for AtTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AtTurn::Turn(n) => write!(f, "{n}"),
            AtTurn::Each => f.write_str("each"),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct CodecServerArgs {
    /// Address to listen on (host:port). Anyone who can reach it can decrypt: keep it on
    /// loopback or behind a token and TLS.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8888")]
    pub(crate) listen: std::net::SocketAddr,
    /// Require `Authorization: Bearer TOKEN` on encode/decode requests.
    #[arg(long, env = "BATON_CODEC_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Browser origin allowed by CORS, e.g. the Web UI's `http://localhost:8233` (repeatable;
    /// `*` allows any).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub(crate) cors_origin: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The settings file (TOML: [github], [[repos]]; docs/src/guide/github.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: std::path::PathBuf,
    /// Address to listen on (host:port), instead of the file's `listen`.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Run id.
    pub(crate) run: String,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// Run id.
    pub(crate) run: String,
    /// The call's id (as `baton pending` lists it).
    pub(crate) call_id: String,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DecideArgs {
    /// Run id.
    pub(crate) run: String,
    /// Call ids to decide (see `baton status RUN`). Without any (and without --all), on a
    /// terminal: shows each pending call and asks approve / deny / skip.
    #[arg(conflicts_with = "all")]
    pub(crate) call_ids: Vec<String>,
    /// Decide every call pending now: they are listed (stderr) and decided one by one, by
    /// id, so a batch that comes later is never decided unseen; a listed call decided
    /// meanwhile (by someone else) is skipped with a note.
    #[arg(long)]
    pub(crate) all: bool,
    /// Why (the model sees the reason of a denial).
    #[arg(long, default_value = "")]
    pub(crate) reason: String,
    /// Who decides, as recorded with the decision (default: the local user, $USER).
    #[arg(long)]
    pub(crate) approver: Option<String>,
    /// With approve: allow the same tool and command/path pattern for the rest of the run.
    #[arg(long)]
    pub(crate) remember: bool,
    /// Send as a fire-and-forget signal instead of a validated update (works with no worker
    /// running; applied when a worker picks the run up).
    #[arg(long)]
    pub(crate) signal: bool,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only runs in this state: THINKING, EXECUTING, AWAITING_APPROVAL, COMPACTING, VERIFYING
    /// (open), COMPLETED, FAILED, CANCELLED (ended; CANCELLED includes terminated runs).
    #[arg(long, value_parser = parse_state)]
    pub(crate) state: Option<baton_proto::RunState>,
    /// Only runs with this label (repeatable), e.g. --label repo=acme/api.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub(crate) labels: Vec<(String, String)>,
    /// At most this many runs.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReplayCheckArgs {
    /// Only runs that also match this visibility query, e.g. "BatonLabels = 'team=a'".
    #[arg(long)]
    pub(crate) query: Option<String>,
    /// Closed runs count when they closed within this long (open runs always count).
    #[arg(long, default_value = "7d", value_parser = parse_duration)]
    pub(crate) since: std::time::Duration,
    /// At most this many runs, newest first.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// The build id the cache files results under (default: this binary's).
    #[arg(long)]
    pub(crate) build_id: Option<String>,
    /// Cache of runs already replayed (default: $XDG_CACHE_HOME/baton/replay-check.json).
    #[arg(long)]
    pub(crate) cache: Option<std::path::PathBuf>,
    /// Replay every run, and record nothing.
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ScheduleCommand {
    /// A schedule that submits the run the flags describe (as `submit` does, validated now):
    /// `baton schedule create nightly --cron '0 3 * * *' --git URL "Update the deps"`.
    Create(Box<ScheduleCreateArgs>),
    /// Every schedule: name, paused, the next start, the last runs.
    List(ScheduleListArgs),
    /// One schedule: its state, recent runs and next starts.
    Describe(ScheduleNameArgs),
    /// Starts no more runs until unpaused (the note says why).
    Pause(ScheduleNoteArgs),
    /// Starts runs again.
    Unpause(ScheduleNoteArgs),
    /// Starts one run now (under the schedule's overlap policy).
    Trigger(ScheduleNameArgs),
    /// Deletes the schedule (runs it started go on).
    Delete(ScheduleNameArgs),
    /// Starts the runs the schedule would have started between two times (RFC 3339, e.g.
    /// 2026-12-01T00:00:00Z), as if it had been running then.
    Backfill(ScheduleBackfillArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleBackfillArgs {
    /// The schedule's name.
    pub(crate) name: String,
    /// From (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub(crate) from: std::time::SystemTime,
    /// To (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub(crate) to: std::time::SystemTime,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleCreateArgs {
    /// The schedule's name (its id; each run's id is NAME-<start time>).
    #[arg(value_parser = parse_run_id)]
    pub(crate) name: String,
    /// When to start a run: a cron expression (UTC unless --timezone), e.g. '0 3 * * *'.
    #[arg(long, required_unless_present = "every", conflicts_with = "every")]
    pub(crate) cron: Option<String>,
    /// Or every this long, e.g. 6h, 30m, 90s.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub(crate) every: Option<std::time::Duration>,
    /// IANA time zone of --cron (default UTC).
    #[arg(long, value_name = "ZONE", requires = "cron")]
    pub(crate) timezone: Option<String>,
    /// A start due while the last run still runs: skip it (default), buffer one to run after,
    /// or allow runs side by side.
    #[arg(long, value_enum, default_value = "skip")]
    pub(crate) on_overlap: OnOverlap,
    /// Create it paused.
    #[arg(long)]
    pub(crate) paused: bool,
    /// Starts missed while the server was down are made up for within this long after (e.g.
    /// 1h; the server's default is a year).
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub(crate) catchup_window: Option<std::time::Duration>,
    /// Pause the schedule when one of its runs' workflows fails (Temporal's own policy: a
    /// run that ends without completing, e.g. max_turns_exceeded, is not a failed workflow;
    /// see --pause-after-failures); unpause to go on.
    #[arg(long)]
    pub(crate) pause_on_failure: bool,
    /// Pause the schedule once N of its runs in a row ended without completing (any reason
    /// but completed; checked by the worker that ends a run, the note names the runs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) pause_after_failures: Option<u32>,
    /// The run each start submits: every `submit` flag and the task.
    #[command(flatten)]
    pub(crate) run: SubmitArgs,
}

/// What a start due during a run does (`schedule create --on-overlap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnOverlap {
    Skip,
    BufferOne,
    Allow,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleListArgs {
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleNameArgs {
    /// The schedule's name.
    pub(crate) name: String,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleNoteArgs {
    /// The schedule's name.
    pub(crate) name: String,
    /// Why (shown by describe and list).
    #[arg(long)]
    pub(crate) note: Option<String>,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum FleetCommand {
    /// The deployment's current and ramping builds, and for each build the open runs pinned to
    /// it (from visibility) and whether it has drained.
    Status(FleetStatusArgs),
    /// This build's patch markers and the open runs that lack each: which can be deprecated or
    /// retired (AGENTS.md "Patches").
    Patches(FleetStatusArgs),
}

#[derive(Debug, Args)]
pub(crate) struct FleetStatusArgs {
    /// The Worker Deployment (the workers' `deployment.name`).
    #[arg(long, default_value = "baton")]
    pub(crate) deployment: String,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

/// `--wait` and `--wait-timeout`, the same on every command that can follow a run to its end
/// (`submit`, `fork`, `result`).
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct WaitArgs {
    /// Wait for the run to end and print its result (Ctrl-C stops waiting: exit 3, the run
    /// goes on).
    #[arg(long)]
    pub(crate) wait: bool,
    /// With --wait: give up waiting after this long (exit 3; the run goes on).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "wait")]
    pub(crate) wait_timeout: Option<std::time::Duration>,
}

#[derive(Debug, Args)]
pub(crate) struct PendingArgs {
    /// At most this many runs.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ResultArgs {
    /// Run id.
    pub(crate) run: String,
    #[command(flatten)]
    pub(crate) waiting: WaitArgs,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// Run id.
    pub(crate) run: String,
    /// Show events from this turn on (default: from the start). The end is always shown.
    #[arg(long, value_name = "TURN", default_value_t = 0)]
    pub(crate) since: u32,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
    /// Follow the run's subagents inline too (their events indented under their run id; JSON
    /// lines carry the child's run_id).
    #[arg(long)]
    pub(crate) children: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// Run id.
    pub(crate) run: String,
    /// Print a summary (files, insertions, deletions) instead of the patch.
    #[arg(long)]
    pub(crate) stat: bool,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ApplyArgs {
    /// Run id.
    pub(crate) run: String,
    /// Only check that the change set applies; change nothing.
    #[arg(long)]
    pub(crate) check: bool,
    /// Apply in this directory instead of the current one.
    #[arg(long, short = 'C', value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct DownloadArgs {
    /// Run id.
    pub(crate) run: String,
    /// Directory to write the files into (created if missing; existing files are overwritten,
    /// nothing is deleted).
    pub(crate) dir: PathBuf,
    /// Only paths matching this glob (repeatable), e.g. --path 'src/**'.
    #[arg(long = "path", value_name = "GLOB")]
    pub(crate) paths: Vec<String>,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// Run id.
    pub(crate) run: String,
    /// Why.
    #[arg(long, default_value = "cancelled from baton CLI")]
    pub(crate) reason: String,
}

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// `RUN TEXT`; with `--id`, just `TEXT`.
    #[arg(value_name = "RUN TEXT", num_args = 1..=2, required = true)]
    pub(crate) words: Vec<String>,
    /// The run (instead of RUN); with --start, the run to start when there is none.
    #[arg(long, value_parser = parse_run_id)]
    pub(crate) id: Option<String>,
    /// A conversation: when run --id does not exist (or has ended), start it with this message
    /// as its task (update-with-start: two sends at once make one run, the other message its
    /// next). After each answer the run waits --idle-timeout for the next message, which
    /// becomes its next task. Flags for the new run's spec (as for `baton submit`) go after
    /// `--`, e.g. `-- --git URL --deliver pr`.
    #[arg(long, requires = "id")]
    pub(crate) start: bool,
    /// With --start: how long the run waits for the next message after an answer, then ends
    /// (e.g. 30m, 1h, 2d).
    #[arg(long, value_parser = parse_idle_timeout, default_value = "1h", requires = "start")]
    pub(crate) idle_timeout: std::time::Duration,
    /// This message's id: a message sent again with the same id is taken once (a retried
    /// send, a redelivered webhook). Default: a new id.
    #[arg(long, value_name = "ID")]
    pub(crate) message_id: Option<String>,
    /// Wait for the answer to this message (the run is idle again, or has ended) and print
    /// it; exit codes as `result`.
    #[arg(long)]
    pub(crate) wait: bool,
    /// With --wait: stop waiting after this long (exit 3; the run goes on).
    #[arg(long, value_parser = humantime::parse_duration, requires = "wait")]
    pub(crate) wait_timeout: Option<std::time::Duration>,
    /// From the global `--json`.
    #[arg(skip)]
    pub(crate) json: bool,
    /// With --start: `baton submit` flags for the new run (after `--`).
    #[arg(last = true, value_name = "SUBMIT FLAGS")]
    pub(crate) submit: Vec<String>,
}

fn parse_idle_timeout(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e}; e.g. 30m, 1h, 2d"))?;
    if d.as_secs() == 0 || d.as_secs() > u64::from(u32::MAX) {
        return Err("the idle timeout must be at least 1s".to_owned());
    }
    Ok(d)
}
