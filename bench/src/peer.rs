//! Scenario 6, peer comparison: the same scripted task (`turns` turns of one model call to the
//! instant mock + one `read_file` call, the answer at the last turn) run by
//!
//! - baton (`AgentRun` on a `baton-worker` process, as in the per-turn scenario),
//! - the bare Rust Temporal loop ([`crate::bare::BareLoop`], in-process worker),
//! - the OpenAI Agents SDK's Temporal integration (Python, `bench/peer/openai_agents_temporal.py`:
//!   `OpenAIAgentsPlugin`, the tool an activity via `activity_as_tool`, in-process worker),
//! - a plain Temporal Python SDK loop with two no-op activities per turn
//!   (`bench/peer/temporal_python_loop.py`, the Python analogue of `BareLoop`),
//!
//! all against one dev server and one mock model, repetitions interleaved. The Python scripts
//! run in a venv that `bench/peer/setup.sh` creates from `bench/peer/requirements.txt` (PyPI).
//! A Python variant that cannot be installed or run is reported with its error; the others
//! still run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use baton_tests::{MockOpenAi, unique};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::{agent::BatonWorker, bare::BareWorker, per_turn, scenario, stats::median};

/// Turns of the untimed warm-up runs of the Rust variants (the Python scripts warm up with
/// one full run of their own).
const WARMUP_TURNS: u32 = 3;
/// How long `bench/peer/setup.sh` may take (creating the venv and installing from PyPI).
const SETUP_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a Python script may take to start, connect and finish its warm-up run.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Overrides where the venv lives (default `<target dir>/peer-venv`).
const VENV_ENV: &str = "BATON_BENCH_PEER_VENV";

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Turns per run.
    pub(crate) turns: u32,
    /// Timed runs of each variant.
    pub(crate) reps: u32,
    /// Start the dev server with [`per_turn::FAST_SERVER_CONFIG`].
    pub(crate) fast_server: bool,
}

impl Settings {
    fn server_label(&self) -> String {
        if self.fast_server {
            format!("fast ({})", per_turn::FAST_SERVER_CONFIG)
        } else {
            "default".to_owned()
        }
    }
}

/// The directory of the Python scripts and their requirements.
fn peer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peer")
}

/// Where the venv lives: `$BATON_BENCH_PEER_VENV`, else `peer-venv` in the target directory
/// this binary was built into (`<target>/<profile>/baton-bench`), else `target/peer-venv` of
/// the workspace.
fn venv_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(VENV_ENV) {
        return PathBuf::from(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("peer-venv")))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peer-venv"))
}

/// Creates or updates the venv with `bench/peer/setup.sh` (quiet and quick when it is already
/// set up); returns its Python. The error says why it could not be set up (pip's last words).
pub(crate) async fn prepare() -> anyhow::Result<PathBuf> {
    let venv = venv_dir();
    let script = peer_dir().join("setup.sh");
    let mut command = Command::new("bash");
    command
        .arg(&script)
        .arg(&venv)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(SETUP_TIMEOUT, command.output())
        .await
        .map_err(|_| {
            anyhow!(
                "{} did not finish within {SETUP_TIMEOUT:?} (PyPI slow?)",
                script.display()
            )
        })?
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} {} failed ({}): {}",
            script.display(),
            venv.display(),
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr), 12)
        );
    }
    let python = venv.join("bin/python");
    ensure!(
        python.is_file(),
        "{} is missing after setup",
        python.display()
    );
    Ok(python)
}

/// The error in a Python script's stderr: the last line of its last traceback (the exception,
/// e.g. `ModuleNotFoundError: No module named 'agents'`), else its last 6 lines.
fn stderr_summary(stderr: &str) -> String {
    match stderr.rfind("Traceback (most recent call last):") {
        Some(at) => tail(&stderr[at..], 1),
        None => tail(stderr, 6),
    }
}

/// The last `n` non-empty lines of `text`, joined with " | ".
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// One measured variant.
#[derive(Debug)]
pub(crate) struct Variant {
    /// What ran.
    label: &'static str,
    /// Wall ms per turn of each timed run, or why the variant did not run.
    ms_per_turn: Result<Vec<f64>, String>,
}

impl Variant {
    fn new(label: &'static str) -> Self {
        Self {
            label,
            ms_per_turn: Ok(Vec::new()),
        }
    }

    fn median(&self) -> Option<f64> {
        self.ms_per_turn.as_ref().ok().map(|v| median(v))
    }

    fn push(&mut self, ms_per_turn: f64) {
        if let Ok(samples) = &mut self.ms_per_turn {
            samples.push(ms_per_turn);
        }
    }

    fn fail(&mut self, error: &anyhow::Error) {
        self.ms_per_turn = Err(format!("{error:#}"));
    }
}

/// The result of one peer-comparison run.
#[derive(Debug)]
pub(crate) struct PeerReport {
    settings: Settings,
    baton: Variant,
    rust_bare: Variant,
    agents: Variant,
    python_bare: Variant,
    /// Python and package versions the Python scripts reported, or why none did.
    versions: Result<BTreeMap<String, String>, String>,
}

/// Runs the scenario. `python` is the venv's interpreter ([`prepare`]), or why there is none
/// (then only the Rust variants run, and the report says why).
pub(crate) async fn run(
    settings: Settings,
    python: Result<PathBuf, String>,
) -> anyhow::Result<PeerReport> {
    let Settings { turns, reps, .. } = settings;
    ensure!(
        turns >= 1 && reps >= 1,
        "--turns and --reps must be at least 1"
    );
    let server = per_turn::start_server(settings.fast_server)?;
    let llm = MockOpenAi::start()?;
    // The Python agent's requests are answered by the conversation's length (baton's runs push
    // their replies onto the queue, which comes first, and use them all up).
    llm.set_responder(scenario::responder(turns));
    let notes = tempfile::tempdir().context("creating the notes directory")?;
    scenario::write_notes(notes.path())?;
    let baton = BatonWorker::start(&server, &llm, false).await?;
    let mut bare = BareWorker::start(&server.url(), &unique("bench-peer-bare")).await?;

    let mut report = PeerReport {
        settings,
        baton: Variant::new("baton AgentRun (Rust, baton-worker process)"),
        rust_bare: Variant::new("bare Temporal loop, Rust SDK (BareLoop, in-process worker)"),
        agents: Variant::new(
            "OpenAI Agents SDK + Temporal integration (Python, OpenAIAgentsPlugin, \
             in-process worker)",
        ),
        python_bare: Variant::new("bare Temporal loop, Python SDK (in-process worker)"),
        versions: Err("no Python script ran".to_owned()),
    };

    eprintln!(
        "peer [{}]: warm-up, then {reps} x {turns} turns of each variant",
        settings.server_label()
    );
    let address = server.address();
    let base_url = llm.base_url();
    let mut agents = None;
    let mut python_bare = None;
    match &python {
        Err(why) => {
            let error = anyhow!("the Python venv could not be set up: {why}");
            report.agents.fail(&error);
            report.python_bare.fail(&error);
            report.versions = Err(why.clone());
        }
        Ok(python) => {
            let common = |script: &str| {
                let mut args = vec![
                    peer_dir().join(script).display().to_string(),
                    "--address".to_owned(),
                    address.clone(),
                    "--turns".to_owned(),
                    turns.to_string(),
                    "--stdin-reps".to_owned(),
                ];
                if script == AGENTS_SCRIPT {
                    args.extend([
                        "--base-url".to_owned(),
                        base_url.clone(),
                        "--notes".to_owned(),
                        notes.path().display().to_string(),
                    ]);
                }
                args
            };
            // Started one after the other: each warms up (one full run) before the next starts.
            let before = llm.request_count();
            match PythonPeer::start(python, &common(AGENTS_SCRIPT)).await {
                Ok(peer) => {
                    let calls = llm.request_count() - before;
                    if calls == turns as usize {
                        agents = Some(peer);
                    } else {
                        report.agents.fail(&anyhow!(
                            "its warm-up run made {calls} model calls, not {turns}"
                        ));
                    }
                }
                Err(e) => report.agents.fail(&e),
            }
            match PythonPeer::start(python, &common(BARE_SCRIPT)).await {
                Ok(peer) => python_bare = Some(peer),
                Err(e) => report.python_bare.fail(&e),
            }
        }
    }
    let tag = unique("bench-peer");
    baton
        .run(&llm, &format!("{tag}-a-warmup"), WARMUP_TURNS)
        .await?;
    bare.run(&format!("{tag}-b-warmup"), WARMUP_TURNS, false)
        .await?;

    let per_turn = |ms: f64| ms / f64::from(turns);
    for rep in 1..=reps {
        let wall = baton.run(&llm, &format!("{tag}-a-{rep}"), turns).await?;
        report.baton.push(per_turn(wall.as_secs_f64() * 1000.0));
        let wall = bare.run(&format!("{tag}-b-{rep}"), turns, false).await?;
        report.rust_bare.push(per_turn(wall.as_secs_f64() * 1000.0));
        for (peer, row, calls) in [
            (&mut agents, &mut report.agents, turns as usize),
            (&mut python_bare, &mut report.python_bare, 0),
        ] {
            let Some(p) = peer else { continue };
            let before = llm.request_count();
            let result = p.rep().await.and_then(|ms| {
                let made = llm.request_count() - before;
                ensure!(made == calls, "a run made {made} model calls, not {calls}");
                Ok(ms)
            });
            match result {
                Ok(ms) => row.push(per_turn(ms)),
                Err(e) => {
                    row.fail(&e);
                    *peer = None;
                }
            }
        }
        let last = |v: &Variant| {
            v.ms_per_turn
                .as_ref()
                .ok()
                .and_then(|s| s.last().copied())
                .map_or_else(|| "–".to_owned(), |ms| format!("{ms:.1}"))
        };
        eprintln!(
            "  rep {rep}/{reps}: ms/turn: baton {}, Rust bare loop {}, OpenAI Agents SDK + \
             Temporal {}, Python bare loop {}",
            last(&report.baton),
            last(&report.rust_bare),
            last(&report.agents),
            last(&report.python_bare),
        );
    }
    bare.stop()?;

    for (peer, row) in [
        (agents, &mut report.agents),
        (python_bare, &mut report.python_bare),
    ] {
        let Some(p) = peer else { continue };
        match p.finish(turns, reps).await {
            Ok(versions) => {
                if let Ok(all) = &mut report.versions {
                    all.extend(versions);
                } else {
                    report.versions = Ok(versions);
                }
            }
            Err(e) => row.fail(&e),
        }
    }
    Ok(report)
}

/// The Python script of the OpenAI Agents SDK's Temporal integration.
const AGENTS_SCRIPT: &str = "openai_agents_temporal.py";
/// The Python script of the plain Temporal Python SDK loop.
const BARE_SCRIPT: &str = "temporal_python_loop.py";

/// A line a Python script prints on stdout (see `bench/peer/peer_common.py`).
#[derive(Debug, PartialEq)]
enum PeerLine {
    /// Warm-up done, waiting for reps on stdin.
    Ready,
    /// One timed rep: wall ms from the start request to the result.
    Rep(f64),
    /// The final line.
    Done(PeerOutput),
    /// The script failed.
    Error(String),
}

/// The final line of a Python script.
#[derive(Debug, PartialEq)]
struct PeerOutput {
    variant: String,
    turns: u32,
    wall_ms: Vec<f64>,
    versions: BTreeMap<String, String>,
}

/// Parses one stdout line of a Python script; `None` for anything else (the Temporal core
/// logs its warnings on stdout too).
fn parse_line(line: &str) -> Option<PeerLine> {
    let value: Value = serde_json::from_str(line.trim()).ok()?;
    let object = value.as_object()?;
    if let Some(error) = object.get("error") {
        let error = error
            .as_str()
            .map_or_else(|| error.to_string(), str::to_owned);
        return Some(PeerLine::Error(error));
    }
    match object.get("event").and_then(Value::as_str) {
        Some("ready") => return Some(PeerLine::Ready),
        Some("rep") => return object.get("wall_ms")?.as_f64().map(PeerLine::Rep),
        Some(_) => return None,
        None => {}
    }
    let versions = object
        .get("versions")?
        .as_object()?
        .iter()
        .map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect::<Option<BTreeMap<_, _>>>()?;
    Some(PeerLine::Done(PeerOutput {
        variant: object.get("variant")?.as_str()?.to_owned(),
        turns: u32::try_from(object.get("turns")?.as_u64()?).ok()?,
        wall_ms: object
            .get("wall_ms")?
            .as_array()?
            .iter()
            .map(Value::as_f64)
            .collect::<Option<Vec<_>>>()?,
        versions,
    }))
}

/// A Python script running in `--stdin-reps` mode: its own worker, one rep per line we send.
struct PythonPeer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Its stderr (tracebacks, logs), kept for error messages.
    stderr: tempfile::NamedTempFile,
}

impl PythonPeer {
    /// Starts `python args..` and waits until it has warmed up.
    async fn start(python: &Path, args: &[String]) -> anyhow::Result<Self> {
        let name = Path::new(&args[0])
            .file_name()
            .map_or_else(|| args[0].clone(), |n| n.to_string_lossy().into_owned());
        let stderr = tempfile::NamedTempFile::new().context("creating a log file")?;
        let mut child = Command::new(python)
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            // No __pycache__ in the source tree.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().context("opening the log file")?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {name}", python.display()))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let mut peer = Self {
            name,
            child,
            stdin,
            stdout,
            stderr,
        };
        match peer.next(READY_TIMEOUT).await? {
            PeerLine::Ready => Ok(peer),
            other => Err(peer.unexpected(other)),
        }
    }

    /// Runs one timed rep; returns its wall ms.
    async fn rep(&mut self) -> anyhow::Result<f64> {
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        stdin.write_all(b"run\n").await?;
        stdin.flush().await?;
        match self.next(READY_TIMEOUT).await? {
            PeerLine::Rep(ms) => Ok(ms),
            other => Err(self.unexpected(other)),
        }
    }

    /// Ends the script (end of its stdin) and checks its final line against the reps it ran;
    /// returns the versions it reports.
    async fn finish(mut self, turns: u32, reps: u32) -> anyhow::Result<BTreeMap<String, String>> {
        drop(self.stdin.take());
        let output = match self.next(READY_TIMEOUT).await? {
            PeerLine::Done(output) => output,
            other => return Err(self.unexpected(other)),
        };
        let status = tokio::time::timeout(READY_TIMEOUT, self.child.wait())
            .await
            .context("waiting for the script to exit")??;
        ensure!(status.success(), "{} exited with {status}", self.name);
        ensure!(
            output.turns == turns && output.wall_ms.len() == reps as usize,
            "{} ({}) reports {} reps of {} turns, not {reps} of {turns}",
            self.name,
            output.variant,
            output.wall_ms.len(),
            output.turns
        );
        Ok(output.versions)
    }

    /// The next line that means something, within `timeout`.
    async fn next(&mut self, timeout: Duration) -> anyhow::Result<PeerLine> {
        let read = async {
            while let Some(line) = self.stdout.next_line().await? {
                if let Some(parsed) = parse_line(&line) {
                    return Ok(Some(parsed));
                }
            }
            Ok::<_, std::io::Error>(None)
        };
        match tokio::time::timeout(timeout, read).await {
            Err(_) => bail!(
                "{} said nothing for {timeout:?}; its stderr: {}",
                self.name,
                self.stderr_tail()
            ),
            Ok(Err(e)) => Err(e).with_context(|| format!("reading from {}", self.name)),
            Ok(Ok(None)) => bail!(
                "{} ended without a result; its stderr: {}",
                self.name,
                self.stderr_tail()
            ),
            Ok(Ok(Some(line))) => Ok(line),
        }
    }

    fn unexpected(&self, line: PeerLine) -> anyhow::Error {
        match line {
            PeerLine::Error(error) => anyhow!("{}: {error}", self.name),
            other => anyhow!("{}: unexpected output {other:?}", self.name),
        }
    }

    /// What the script's stderr says: the exception of a Python traceback, else its last lines.
    fn stderr_tail(&self) -> String {
        stderr_summary(&std::fs::read_to_string(self.stderr.path()).unwrap_or_default())
    }
}

impl PeerReport {
    /// OpenAI Agents SDK Temporal integration / baton, by ms per turn: the headline.
    pub(crate) fn headline(&self) -> Option<f64> {
        Some(self.agents.median()? / self.baton.median()?)
    }

    /// The report as Markdown.
    pub(crate) fn render(&self) -> String {
        let s = &self.settings;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### Peer comparison, server: {}, mock model: non-streamed answers (Chat \
             Completions), N = {} turns, R = {} reps\n",
            s.server_label(),
            s.turns,
            s.reps
        );
        let _ = writeln!(
            out,
            "| variant | ms/turn (wall / N, median of reps) | / baton | / Rust bare loop |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|");
        let (baton, bare) = (self.baton.median(), self.rust_bare.median());
        let ratio = |ms: f64, base: Option<f64>| {
            base.map_or_else(|| "–".to_owned(), |b| format!("{:.2}x", ms / b))
        };
        for v in [
            &self.baton,
            &self.rust_bare,
            &self.agents,
            &self.python_bare,
        ] {
            match (&v.ms_per_turn, v.median()) {
                (Ok(_), Some(ms)) => {
                    let _ = writeln!(
                        out,
                        "| {} | {ms:.1} | {} | {} |",
                        v.label,
                        ratio(ms, baton),
                        ratio(ms, bare)
                    );
                }
                (Err(why), _) => {
                    let why = why.replace('|', "\\|").replace('\n', " ");
                    let _ = writeln!(out, "| {} | not run: {why} | – | – |", v.label);
                }
                (Ok(_), None) => {}
            }
        }
        out.push('\n');
        match self.headline() {
            Some(h) => {
                let _ = writeln!(
                    out,
                    "OpenAI Agents SDK Temporal integration / baton per turn: **{h:.2}x**"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "OpenAI Agents SDK Temporal integration / baton per turn: not measured (see \
                     the table)"
                );
            }
        }
        match &self.versions {
            Ok(versions) => {
                let list: Vec<String> = versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
                let _ = writeln!(out, "Python side: {}", list.join(", "));
            }
            Err(why) => {
                let _ = writeln!(out, "Python side: none ran ({why})");
            }
        }
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let _ = writeln!(
            out,
            "Builds: baton and the Rust loop are {profile} builds; the Python SDK's Temporal Core \
             (Rust) is the release build its wheel ships."
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_protocol_lines() {
        assert_eq!(parse_line(r#"{"event": "ready"}"#), Some(PeerLine::Ready));
        assert_eq!(
            parse_line(r#"{"event": "rep", "wall_ms": 812.5}"#),
            Some(PeerLine::Rep(812.5))
        );
        assert_eq!(
            parse_line(
                r#"{"variant": "openai-agents-temporal", "error": "WorkflowFailureError: x <- ApplicationError: y"}"#
            ),
            Some(PeerLine::Error(
                "WorkflowFailureError: x <- ApplicationError: y".to_owned()
            ))
        );
        let done = r#"{"variant": "python-bare-loop", "turns": 20, "wall_ms": [1000.5, 990],
            "versions": {"python": "3.11.7", "temporalio": "1.35.0"}}"#
            .replace('\n', " ");
        assert_eq!(
            parse_line(&done),
            Some(PeerLine::Done(PeerOutput {
                variant: "python-bare-loop".to_owned(),
                turns: 20,
                wall_ms: vec![1000.5, 990.0],
                versions: BTreeMap::from([
                    ("python".to_owned(), "3.11.7".to_owned()),
                    ("temporalio".to_owned(), "1.35.0".to_owned()),
                ]),
            }))
        );
    }

    #[test]
    fn ignores_other_output() {
        // The Temporal core's log lines go to stdout.
        assert_eq!(
            parse_line("2026-11-30T01:07:50Z  WARN temporalio_sdk_core: Failing workflow task"),
            None
        );
        assert_eq!(parse_line(""), None);
        assert_eq!(parse_line("[1, 2]"), None);
        assert_eq!(parse_line(r#"{"event": "later"}"#), None);
        // A final line that lacks a field is not taken for one.
        assert_eq!(
            parse_line(r#"{"variant": "x", "turns": 3, "wall_ms": [1.0]}"#),
            None
        );
        assert_eq!(
            parse_line(r#"{"variant": "x", "turns": -3, "wall_ms": [], "versions": {}}"#),
            None
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\n\nb\nc\n", 2), "b | c");
        assert_eq!(tail("", 3), "");
    }

    #[test]
    fn stderr_summary_is_the_exception() {
        let stderr = "WARN something\nTraceback (most recent call last):\n  File \"x.py\", line 26, \
                      in <module>\n    from agents import Agent\nModuleNotFoundError: No module \
                      named 'agents'\n";
        assert_eq!(
            stderr_summary(stderr),
            "ModuleNotFoundError: No module named 'agents'"
        );
        assert_eq!(stderr_summary("a\nb\n"), "a | b");
    }
}
