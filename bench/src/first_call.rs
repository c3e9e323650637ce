//! Scenario 7, second part: time from `baton submit --workspace-from DIR` to the run's first
//! model call, for the tree of the upload part. A fast dev server, a real `baton-worker`
//! process and the real `baton` CLI sharing the server's blob directory as the store; the
//! scripted provider (one turn, no tools), so the first model call is the run's only one.
//!
//! Three submits of the same tree, one after the other:
//!
//! - cold: a fresh worker (empty workspace root), an empty store: the CLI uploads every blob,
//!   the worker restores every file;
//! - warm: a new run id on the same worker (its page cache warm, the first run's workspace on
//!   disk): the CLI sends no blob; the new run's workspace takes over the first run's idle tree,
//!   whose snapshot state is forgotten on the way, so the restore hashes
//!   every file and writes none;
//! - warm, same workspace: the second run's id again (after it ended): its workspace is at that
//!   snapshot already (`.baton/snapshot-state.json`), so `prepare_workspace` skips the restore.
//!
//! From each run's history (server clock): `WorkflowExecutionStarted` to the first
//! `llm_generate` scheduled, and its parts `prepare_workspace` and `read_instructions`
//! (scheduled -> completed). The worker's log says how many times each workspace was restored.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use baton_tests::{DevServer, Worker, baton_with_timeout, unique};

use crate::{
    history::{self, ms_between},
    per_turn::{self, FAST_SERVER_CONFIG},
};

/// How long the worker may take to start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one CLI call may take (a 100 MiB upload in a debug build on a loaded machine).
const CLI_TIMEOUT: Duration = Duration::from_secs(600);
/// The scripted model's only answer.
const ANSWER: &str = "Nothing to change.";
/// What the worker logs each time it restores a snapshot into a workspace.
const RESTORED_LOG: &str = "workspace restored";
/// What the worker logs when a new workspace takes over another run's idle tree.
const REUSED_LOG: &str = "workspace reused";

/// Longer than the worker's `workspace_idle_secs` (1 s in these benches): the previous run's
/// tree is idle by then.
pub(crate) const IDLE_WAIT: Duration = Duration::from_millis(1500);

/// One submit of the tree.
#[derive(Debug)]
pub(crate) struct Start {
    /// Which of the three it was.
    pub(crate) label: &'static str,
    /// Wall time of `baton submit` (walk, hash, upload what the store lacks, start the run).
    pub(crate) cli: Duration,
    /// Files the submit added to the blob store (the blobs it sent, plus the manifest if new).
    pub(crate) blobs_added: usize,
    /// `WorkflowExecutionStarted` -> first `llm_generate` scheduled (ms, server clock).
    pub(crate) to_first_call_ms: f64,
    /// `prepare_workspace` scheduled -> completed (ms).
    pub(crate) prepare_ms: f64,
    /// `read_instructions` scheduled -> completed (ms).
    pub(crate) instructions_ms: f64,
    /// Restores of this run's workspace the worker logged during this run.
    pub(crate) restores: usize,
    /// Bytes of file content those restores wrote (from the worker's log).
    pub(crate) bytes_written: u64,
    /// The workspace took over an idle tree of an earlier run (the worker's log).
    pub(crate) reused: bool,
}

/// The result of the submit-to-first-call part.
#[derive(Debug)]
pub(crate) struct FirstCallReport {
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    pub(crate) starts: Vec<Start>,
}

/// What every submit shares.
struct Bench<'a> {
    server: &'a DevServer,
    worker: &'a Worker,
    queue: String,
    script: PathBuf,
    tree: &'a Path,
    files: usize,
    max_bytes: u64,
}

/// Submits `tree` (`files` files, `bytes` bytes) three times (cold, warm, warm with the same
/// workspace) on a fresh dev server and worker; see the module doc.
pub(crate) async fn run(tree: &Path, files: usize, bytes: u64) -> anyhow::Result<FirstCallReport> {
    let server = per_turn::start_server(true)?;
    let queue = unique("bench-upload");
    // The scripted run changes nothing, so it never tells the worker it ended (no
    // `collect_changes`): its tree is idle after `workspace_idle_secs`, 1 s here (600 by
    // default), and the bench waits that long before the next submit (outside the figures).
    let mut worker = Worker::spawn(&server, &queue, &[("BATON_WORKSPACE_IDLE_SECS", "1")])?;
    worker.wait_ready(READY_TIMEOUT).await?;
    let scratch = tempfile::tempdir().context("temporary directory")?;
    let script = scratch.path().join("script.json");
    let turns = serde_json::json!({ "turns": [{ "text": ANSWER }] });
    fs::write(&script, turns.to_string()).with_context(|| format!("write {}", script.display()))?;
    ensure!(
        count_files(worker.workspace_root(), false)? == 0,
        "the fresh worker's workspace root {} is not empty",
        worker.workspace_root().display()
    );
    let bench = Bench {
        server: &server,
        worker: &worker,
        queue,
        script,
        tree,
        files,
        max_bytes: bytes,
    };
    eprintln!("upload: submit to first model call, {files} files, cold then warm");
    let (first, second) = (unique("bench-cold"), unique("bench-warm"));
    let cold = bench.start("cold: fresh worker, new run id", &first)?;
    std::thread::sleep(IDLE_WAIT);
    let warm = bench.start("warm: same worker, new run id", &second)?;
    let same = bench.start("warm: same run id (same workspace)", &second)?;
    ensure!(
        cold.restores == 1 && warm.restores == 1,
        "a new workspace is restored once; logged: cold {}, warm {}",
        cold.restores,
        warm.restores
    );
    ensure!(
        !cold.reused && warm.reused && warm.bytes_written == 0 && cold.bytes_written >= bytes,
        "the warm run takes over the cold run's tree and writes nothing: cold wrote {} bytes \
         (reused {}), warm {} (reused {})",
        cold.bytes_written,
        cold.reused,
        warm.bytes_written,
        warm.reused
    );
    ensure!(
        same.restores == 0,
        "the same run id found its workspace at the snapshot, yet it was restored {} times",
        same.restores
    );
    ensure!(
        warm.blobs_added == 0 && same.blobs_added == 0,
        "an unchanged tree added blobs to the store: {} then {}",
        warm.blobs_added,
        same.blobs_added
    );
    Ok(FirstCallReport {
        files,
        bytes,
        starts: vec![cold, warm, same],
    })
}

impl Bench<'_> {
    /// Submits the tree as run `id`, waits for the run to complete, reads its history.
    fn start(&self, label: &'static str, id: &str) -> anyhow::Result<Start> {
        let restored_before = self.restores_of(id);
        let (written_before, reused_before) = (self.bytes_written_of(id), self.reuses_of(id));
        let blobs_before = count_files(&self.server.blob_dir(), true)?;
        let (tree, script) = (path_arg(self.tree)?, path_arg(&self.script)?);
        let max = self.max_bytes.to_string();
        let args = [
            "submit",
            "--task-queue",
            &self.queue,
            "--id",
            id,
            "--provider",
            "scripted",
            "--script",
            script,
            "--no-approval",
            "--workspace-from",
            tree,
            "--max-upload-size",
            &max,
            "Change nothing; say so.",
        ];
        let started = Instant::now();
        let out = baton_with_timeout(self.server, &args, &[], None, CLI_TIMEOUT)?;
        let cli = started.elapsed();
        let out = out.ensure_success().context("baton submit")?;
        let blobs_added = count_files(&self.server.blob_dir(), true)? - blobs_before;

        let waited = baton_with_timeout(
            self.server,
            &["result", id, "--wait", "--json"],
            &[],
            None,
            CLI_TIMEOUT,
        )?
        .ensure_success()
        .with_context(|| {
            format!(
                "baton result {id}; worker log {}",
                self.worker.log_path().display()
            )
        })?;
        let result = waited.json()?;
        ensure!(
            result["status"] == "COMPLETED" && result["answer"] == ANSWER,
            "run {id} did not complete with the scripted answer: {result}"
        );
        let workspace = self.worker.workspace_root().join(id);
        let restored = count_files(&workspace, false)?;
        ensure!(
            restored == self.files,
            "the workspace {} holds {restored} files, the tree {}",
            workspace.display(),
            self.files
        );

        let h = history::fetch(self.server, id).with_context(|| format!("history of {id}"))?;
        let begun = h.started_at()?;
        let first_call = h.scheduled_at(crate::agent::TURN_ACTIVITY)?;
        let span = |name: &str| -> anyhow::Result<f64> {
            let (t0, t1) = h.first_activity(name)?;
            Ok(ms_between(t0, t1))
        };
        let start = Start {
            label,
            cli,
            blobs_added,
            to_first_call_ms: ms_between(begun, first_call),
            prepare_ms: span("prepare_workspace")?,
            instructions_ms: span("read_instructions")?,
            restores: self.restores_of(id) - restored_before,
            bytes_written: self.bytes_written_of(id) - written_before,
            reused: self.reuses_of(id) > reused_before,
        };
        eprintln!(
            "  {label}: CLI {:.2} s ({}), started -> first model call {:.0} ms",
            cli.as_secs_f64(),
            out.stderr
                .lines()
                .find(|l| l.starts_with("uploaded"))
                .unwrap_or("no upload line"),
            start.to_first_call_ms
        );
        Ok(start)
    }

    /// Lines of the worker's log that say it restored run `id`'s workspace.
    fn restores_of(&self, id: &str) -> usize {
        self.log_lines(RESTORED_LOG, id).len()
    }

    /// Bytes the worker's log says its restores of run `id`'s workspace wrote.
    fn bytes_written_of(&self, id: &str) -> u64 {
        self.log_lines(RESTORED_LOG, id)
            .iter()
            .filter_map(|l| {
                let (_, rest) = l.split_once("bytes_written=")?;
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// Lines of the worker's log that say run `id`'s workspace took over another tree.
    fn reuses_of(&self, id: &str) -> usize {
        self.log_lines(REUSED_LOG, id).len()
    }

    fn log_lines(&self, what: &str, id: &str) -> Vec<String> {
        self.worker
            .log()
            .lines()
            .filter(|l| l.contains(what) && l.contains(id))
            .map(str::to_owned)
            .collect()
    }
}

fn path_arg(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// Regular files under `dir` (0 if it does not exist), leaving out `.baton` unless `all`.
fn count_files(dir: &Path, all: bool) -> anyhow::Result<usize> {
    if !dir.exists() {
        return Ok(0);
    }
    let mut count = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let entry = entry.with_context(|| format!("read {}", d.display()))?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if all || entry.file_name() != ".baton" {
                    pending.push(entry.path());
                }
            } else if kind.is_file() {
                count += 1;
            }
        }
    }
    Ok(count)
}

impl FirstCallReport {
    /// The part's table.
    pub(crate) fn render(&self) -> String {
        let mut out = format!(
            "### Submit to first model call ({} files, {:.0} MiB; dev server: fast ({FAST_SERVER_CONFIG}), \
             one baton-worker, scripted model)\n\n\
             | run | submit -> first model call s | `baton submit` s (upload + start) | blobs added | \
             started -> first llm_generate ms | prepare_workspace ms | read_instructions ms | rest ms | \
             restores | bytes written | tree reused |\n\
             |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
            self.files,
            self.bytes as f64 / (1024.0 * 1024.0),
        );
        for s in &self.starts {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} |",
                s.label,
                s.cli.as_secs_f64() + s.to_first_call_ms / 1000.0,
                s.cli.as_secs_f64(),
                s.blobs_added,
                s.to_first_call_ms,
                s.prepare_ms,
                s.instructions_ms,
                s.to_first_call_ms - s.prepare_ms - s.instructions_ms,
                s.restores,
                s.bytes_written,
                if s.reused { "yes" } else { "no" }
            );
        }
        out.push_str(
            "\nsubmit -> first model call: the CLI's wall time plus started -> first llm_generate (the \
             run starts during the CLI's start request, so the sum is high by that request's way \
             back). \"rest\": workflow tasks and dispatch between the activities. A new run id is a new \
             workspace directory: the warm run takes over the cold run's idle tree (issue 32) and \
             its restore hashes every file but writes none; the same run id skips the restore.\n",
        );
        out
    }
}
