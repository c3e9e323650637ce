//! The `shell` tool: `sh -c <command>` in the workspace, in a process group of its own that is
//! killed as a whole when the command ends, times out, is cancelled or abandoned.
//!
//! No process started by a command outlives the call: after the `sh` leader exits, whatever is
//! left in its process group (background jobs such as `sleep 300 &`) is killed with `SIGKILL`;
//! on timeout, cancellation or when the future is dropped, the whole group is. The leader also
//! gets `SIGKILL` should the worker die (`PR_SET_PDEATHSIG` on Linux; note that the kernel ties
//! it to the *thread* that spawned `sh`, a long-lived tokio worker thread). Processes that
//! leave the group on purpose (`setsid`, `setpgid`) are out of reach; the output is not
//! waited for forever on their account.
//!
//! Unless the run's sandbox is `off`, `sh` starts confined (see [`super::sandbox`]): Landlock,
//! seccomp, resource limits, a private `TMPDIR` removed after the call, and the sandbox user when
//! the worker is root.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_workflows::tools::{FULL_OUTPUT_CAP_BYTES, OUTPUT_CAP_BYTES};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::task::JoinHandle;

use super::output::{self, join_cut, note_reserve, split_budget};
use super::sandbox::Prepared;
use super::{Outcome, ToolContext, ToolError};

/// Arguments of the `shell` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The command line, run with `sh -c`.
    pub command: String,
    /// Overrides [`ToolContext::timeout`].
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// Bytes of the start of each output stream kept in memory.
const HEAD_KEEP: usize = 256 * 1024;
/// Bytes of the end of each output stream kept in memory (the buffer holding them grows to
/// twice that before it is compacted).
const TAIL_KEEP: usize = 256 * 1024;
/// How long to keep reading output after the command ended and its group was killed, in case
/// a process that left the group still holds the pipes open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for `sh` to be reaped after `SIGKILL` (a process in uninterruptible sleep
/// can take longer; the runtime reaps it later then).
const REAP_GRACE: Duration = Duration::from_secs(5);

/// Runs `args.command` with `sh -c` in the workspace.
///
/// Returns the exit code and the output (see the module docs for how processes are stopped).
/// A non-zero exit, death by a signal and a timeout are ordinary errors; `Err` means `sh`
/// could not be started or waited for, or [`ToolContext::cancel`] fired
/// ([`ToolError::Cancelled`], after everything was killed and `sh` reaped).
pub async fn run(ctx: &ToolContext, args: ShellArgs) -> Result<Outcome, ToolError> {
    if args.command.trim().is_empty() {
        return Ok(Outcome::error(
            "the command is empty; pass the command line to run in `command`",
        ));
    }
    let timeout = match args.timeout_seconds {
        Some(0) => {
            return Ok(Outcome::error(
                "timeout_seconds must be at least 1; leave it out to use the default timeout",
            ));
        }
        Some(seconds) => Duration::from_secs(seconds),
        None => ctx.timeout,
    };

    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(&args.command)
        .current_dir(&ctx.workspace);
    for (name, _) in std::env::vars_os() {
        if let Some(name) = name.to_str()
            && is_secret_env(name)
        {
            command.env_remove(name);
        }
    }
    command
        // Finds the call's processes again if this worker dies without killing them.
        .env(super::orphans::WORKER_ENV, this_worker())
        .envs(ctx.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Kept until the call ends: the sandbox's temp dir lives as long.
    let mut confinement = Confinement(confine(ctx).await?);
    let what = match &mut confinement.0 {
        Some(prepared) => {
            // Before the death signal: that hook must run after the change of user.
            prepared.apply(&mut command);
            format!(
                "cannot start `sh` in the sandbox ({})",
                ctx.sandbox.mode.as_str()
            )
        }
        None => "cannot start `sh`".to_owned(),
    };
    set_parent_death_signal(&mut command);

    let spawned = command.spawn();
    if let Some(prepared) = &mut confinement.0 {
        prepared.spawned();
    }
    let mut child = spawned.map_err(|e| ToolError::io(what, e))?;
    let pgid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| {
            ToolError::io(
                "cannot get the process id of `sh`",
                std::io::Error::other("no process id"),
            )
        })?;
    // From here on, returning or being dropped kills the whole group.
    let mut group = GroupGuard::new(pgid);

    let stdout = Arc::new(Mutex::new(Capture::default()));
    let stderr = Arc::new(Mutex::new(Capture::default()));
    let readers = Readers(
        [
            child
                .stdout
                .take()
                .map(|pipe| spawn_reader(pipe, Arc::clone(&stdout))),
            child
                .stderr
                .take()
                .map(|pipe| spawn_reader(pipe, Arc::clone(&stderr))),
        ]
        .into_iter()
        .flatten()
        .collect(),
    );

    let ended = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => Ended::Cancelled,
        () = tokio::time::sleep(timeout) => Ended::TimedOut,
        status = child.wait() => Ended::Exited(status),
    };
    // Whatever happened, nothing of the command may survive it.
    group.kill();

    let status_line = match ended {
        Ended::Cancelled => {
            let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            group.disarm();
            return Err(ToolError::Cancelled);
        }
        Ended::TimedOut => {
            let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            format!(
                "command timed out after {} s and was stopped (it and every process it started \
                 were killed). If it needs more time, call it again with a larger \
                 timeout_seconds; if it waits for input, provide the input (e.g. with a pipe) or \
                 use a non-interactive option; run servers in the background only within one \
                 command, as nothing outlives a call. Output so far:",
                timeout.as_secs_f64()
            )
        }
        Ended::Exited(Ok(status)) => describe(status),
        Ended::Exited(Err(e)) => return Err(ToolError::io("cannot wait for `sh`", e)),
    };

    let complete = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => {
            // The group was killed and `sh` reaped already.
            group.disarm();
            return Err(ToolError::Cancelled);
        }
        complete = readers.finish(DRAIN_GRACE) => complete,
    };
    group.disarm();

    let is_error = !matches!(ended, Ended::Exited(Ok(status)) if status.success());
    let stdout = lock(&stdout);
    let stderr = lock(&stderr);
    let incomplete = if complete {
        ""
    } else {
        "\n[output may be incomplete: a process that left the command's process group kept \
         the output open]"
    };
    let preview = render(&status_line, &stdout, &stderr, OUTPUT_CAP_BYTES) + incomplete;
    let full = render(&status_line, &stdout, &stderr, FULL_OUTPUT_CAP_BYTES) + incomplete;
    Ok(Outcome {
        is_error,
        full: (full != preview).then(|| output::cap(&full, FULL_OUTPUT_CAP_BYTES)),
        content: output::cap(&preview, OUTPUT_CAP_BYTES),
    })
}

/// Prepares the run's sandbox for `sh` (off the async threads: it may walk the workspace).
async fn confine(ctx: &ToolContext) -> Result<Option<Prepared>, ToolError> {
    let sandbox = ctx.sandbox.clone();
    let workspace = ctx.workspace.clone();
    tokio::task::spawn_blocking(move || sandbox.prepare(&workspace))
        .await
        .map_err(|e| ToolError::io("cannot prepare the sandbox", std::io::Error::other(e)))?
        .map_err(ToolError::from)
}

/// A sandbox set-up, dropped (its temp dir removed) off the async threads.
struct Confinement(Option<Prepared>);

impl Drop for Confinement {
    fn drop(&mut self) {
        if let Some(prepared) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn_blocking(move || drop(prepared));
                }
                Err(_) => drop(prepared),
            }
        }
    }
}

/// How the wait for the command ended.
enum Ended {
    Cancelled,
    TimedOut,
    Exited(std::io::Result<ExitStatus>),
}

/// The first line of the result: the exit code, or the signal that killed `sh`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("exit code: none (killed by signal {})", signal.as_str()),
            Err(_) => format!("exit code: none (killed by signal {signal})"),
        },
        (None, None) => "exit code: none".to_owned(),
    }
}

/// `status_line`, then the non-empty streams in sections, sharing the output cap.
fn render(status_line: &str, stdout: &Capture, stderr: &Capture, cap: usize) -> String {
    const STDOUT: &str = "\n--- stdout ---\n";
    const STDERR: &str = "\n--- stderr ---\n";
    let available = cap.saturating_sub(status_line.len() + STDOUT.len() + STDERR.len());
    let (out_len, err_len) = (stdout.total, stderr.total);
    let (out_budget, err_budget) = if out_len + err_len <= available {
        (available - err_len, available - out_len)
    } else if out_len <= available / 2 {
        (out_len, available - out_len)
    } else if err_len <= available / 2 {
        (available - err_len, err_len)
    } else {
        (available / 2, available - available / 2)
    };

    let mut content = status_line.to_owned();
    for (header, stream, budget) in [(STDOUT, stdout, out_budget), (STDERR, stderr, err_budget)] {
        if stream.total > 0 {
            let text = stream.render(budget);
            content.push_str(header);
            content.push_str(text.strip_suffix('\n').unwrap_or(&text));
        }
    }
    content
}

/// This worker's [`super::orphans::WORKER_ENV`] value, computed once.
fn this_worker() -> &'static str {
    static WORKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    WORKER.get_or_init(super::orphans::this_worker)
}

/// Sets `PR_SET_PDEATHSIG` to `SIGKILL` in the child, so `sh` dies with the worker.
#[cfg(target_os = "linux")]
fn set_parent_death_signal(command: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before `exec`; it only makes the
    // async-signal-safe system calls prctl(2) and getppid(2) and does not allocate.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The parent may have died before the signal was armed.
            if nix::unistd::getppid() != parent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal(_command: &mut Command) {}

/// Kills the process group with `SIGKILL` when told to and when dropped, unless disarmed.
struct GroupGuard {
    pgid: Pid,
    armed: bool,
}

impl GroupGuard {
    fn new(pgid: Pid) -> Self {
        Self { pgid, armed: true }
    }

    fn kill(&self) {
        if self.armed {
            // ESRCH (the group is already empty) is the usual, fine outcome.
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
    }

    /// Once the group was killed and `sh` reaped: never signal that group id again, as it may
    /// be reused.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The tasks draining the pipes; aborted if still running when dropped.
struct Readers(Vec<JoinHandle<()>>);

impl Readers {
    /// Waits for both pipes to reach end of file, at most `grace`. Returns whether they did.
    async fn finish(mut self, grace: Duration) -> bool {
        let handles = std::mem::take(&mut self.0);
        let all = futures::future::join_all(handles);
        tokio::time::timeout(grace, all).await.is_ok()
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}

fn spawn_reader(
    pipe: impl AsyncRead + Unpin + Send + 'static,
    capture: Arc<Mutex<Capture>>,
) -> JoinHandle<()> {
    tokio::spawn(drain(pipe, capture))
}

/// Reads `pipe` to its end, keeping a bounded part of it in `capture`.
async fn drain(mut pipe: impl AsyncRead + Unpin, capture: Arc<Mutex<Capture>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => lock(&capture).push(&buf[..n]),
        }
    }
}

fn lock(capture: &Mutex<Capture>) -> std::sync::MutexGuard<'_, Capture> {
    capture.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One output stream: its start and its end, and how many bytes it had in all.
#[derive(Debug, Default)]
struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: usize,
}

impl Capture {
    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        if self.head.len() < HEAD_KEEP {
            let n = bytes.len().min(HEAD_KEEP - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if !bytes.is_empty() {
            self.tail.extend_from_slice(bytes);
            if self.tail.len() > 2 * TAIL_KEEP {
                let excess = self.tail.len() - TAIL_KEEP;
                self.tail.drain(..excess);
            }
        }
    }

    fn kept_tail(&self) -> &[u8] {
        &self.tail[self.tail.len().saturating_sub(TAIL_KEEP)..]
    }

    /// The stream as (lossy) UTF-8 text of at most about `budget` bytes, cut in the middle
    /// with a note giving the true sizes.
    fn render(&self, budget: usize) -> String {
        let tail = self.kept_tail();
        let dropped = self.total - self.head.len() - tail.len();
        if dropped == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(tail);
            return output::cap(&String::from_utf8_lossy(&all), budget);
        }
        let (head_budget, tail_budget) =
            split_budget(budget.saturating_sub(note_reserve(self.total)));

        let head_bytes = &self.head[..self.head.len().min(head_budget)];
        let mut head = String::from_utf8_lossy(head_bytes).into_owned();
        head.truncate(head.floor_char_boundary(head_budget));

        let mut tail_bytes = &tail[tail.len() - tail.len().min(tail_budget)..];
        // Do not start in the middle of a character.
        while let Some((&first, rest)) = tail_bytes.split_first() {
            if first & 0b1100_0000 != 0b1000_0000 {
                break;
            }
            tail_bytes = rest;
        }
        let tail = String::from_utf8_lossy(tail_bytes);
        let tail = &tail[tail.ceil_char_boundary(tail.len().saturating_sub(tail_budget))..];

        let cut = self.total.saturating_sub(head.len() + tail.len());
        join_cut(&head, tail, cut, self.total)
    }
}

/// Whether a worker environment variable must not reach model-chosen commands: provider keys,
/// Temporal credentials, worker settings, and anything that looks like a secret.
pub fn is_secret_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    const PREFIXES: [&str; 6] = [
        "OPENAI_",
        "ANTHROPIC_",
        "TEMPORAL_",
        "BATON_",
        "AWS_",
        "AZURE_",
    ];
    const PARTS: [&str; 6] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];
    PREFIXES.iter().any(|p| upper.starts_with(p)) || PARTS.iter().any(|p| upper.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::{call, context};
    use crate::tools::{ToolContext, execute};
    use baton_workflows::tools::SHELL;
    use pretty_assertions::assert_eq;
    use std::time::Instant;
    use tempfile::TempDir;

    async fn sh(ctx: &ToolContext, command: &str) -> baton_proto::ToolResult {
        execute(ctx, &call(SHELL, serde_json::json!({ "command": command })))
            .await
            .unwrap()
    }

    /// A `sleep` argument no other process has: 300.<our pid><n>.
    fn marker(n: u32) -> String {
        format!("sleep 300.{}{n:02}", std::process::id())
    }

    /// Live (non-zombie) processes whose command line contains `marker`.
    fn live_processes(marker: &str) -> Vec<i32> {
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if !cmdline.contains(marker) {
                continue;
            }
            let zombie = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit_once(')')
                        .map(|(_, rest)| rest.trim_start().starts_with('Z'))
                })
                .unwrap_or(true);
            if !zombie {
                found.push(pid);
            }
        }
        found
    }

    async fn wait_for(marker: &str, present: bool) -> bool {
        for _ in 0..200 {
            if live_processes(marker).is_empty() != present {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    /// Kills (by pid) whatever a failed test left behind with our unique marker.
    struct Cleanup(String);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            for pid in live_processes(&self.0) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    async fn assert_no_process_left(marker: &str) {
        assert!(
            wait_for(marker, false).await,
            "processes left running: {:?}",
            live_processes(marker)
        );
    }

    #[tokio::test]
    async fn reports_exit_code_stdout_and_stderr() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "echo out; echo err >&2").await;
        assert_eq!(
            result.content,
            "exit code: 0\n--- stdout ---\nout\n--- stderr ---\nerr"
        );
        assert!(!result.is_error);
    }

    #[tokio::test]
    async fn empty_streams_are_omitted() {
        let dir = TempDir::new().unwrap();
        let ctx = context(&dir);
        assert_eq!(sh(&ctx, "true").await.content, "exit code: 0");
        assert_eq!(
            sh(&ctx, "echo only-err >&2").await.content,
            "exit code: 0\n--- stderr ---\nonly-err"
        );
        assert_eq!(
            sh(&ctx, "printf 'a\\nb'").await.content,
            "exit code: 0\n--- stdout ---\na\nb"
        );
    }

    #[tokio::test]
    async fn non_zero_exit_is_an_error() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "echo partial; echo oops >&2; exit 3").await;
        assert!(result.is_error);
        assert_eq!(
            result.content,
            "exit code: 3\n--- stdout ---\npartial\n--- stderr ---\noops"
        );
    }

    #[tokio::test]
    async fn death_by_signal_is_an_error() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "kill -9 $$").await;
        assert!(result.is_error);
        assert_eq!(result.content, "exit code: none (killed by signal SIGKILL)");
    }

    #[tokio::test]
    async fn runs_in_the_workspace() {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("here.txt"), "found me").unwrap();
        let result = sh(&context(&dir), "pwd; cat here.txt").await;
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            result.content,
            format!("exit code: 0\n--- stdout ---\n{}\nfound me", root.display())
        );
    }

    #[tokio::test]
    async fn passes_extra_env_and_inherits_the_rest() {
        let dir = TempDir::new().unwrap();
        let mut ctx = context(&dir);
        ctx.env = vec![
            ("BATON_TEST_VAR".into(), "hello world".into()),
            ("BATON_OTHER".into(), "2".into()),
        ];
        let result = sh(&ctx, "printf '%s|%s|' \"$BATON_TEST_VAR\" \"$BATON_OTHER\"; test -n \"$PATH\" && echo path-set").await;
        assert_eq!(
            result.content,
            "exit code: 0\n--- stdout ---\nhello world|2|path-set"
        );
    }

    #[tokio::test]
    async fn big_output_keeps_a_preview_for_the_model_and_more_for_the_transcript() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "head -c 100000 /dev/zero | tr '\\0' a; echo; echo THE-END",
        )
        .await;
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result.full_output.len() > 100_000,
            "{}",
            result.full_output.len()
        );
        assert!(result.full_output.len() <= FULL_OUTPUT_CAP_BYTES);
        assert!(result.full_output.ends_with("THE-END"));
        let small = sh(&context(&dir), "echo hi").await;
        assert!(
            small.full_output.is_empty(),
            "nothing was cut, nothing extra is kept"
        );
    }

    #[test]
    fn secrets_are_recognised() {
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "TEMPORAL_API_KEY",
            "GITHUB_TOKEN",
            "db_password",
            "BATON_CONFIG",
            "AWS_ACCESS_KEY_ID",
        ] {
            assert!(is_secret_env(name), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "CARGO_HOME", "TERM"] {
            assert!(!is_secret_env(name), "{name}");
        }
    }

    #[tokio::test]
    async fn stdin_is_empty() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "cat; read line; echo \"read=$?\"").await;
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nread=1");
    }

    #[tokio::test]
    async fn non_utf8_output_is_replaced() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "printf 'ab\\377cd'").await;
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nab\u{FFFD}cd");
    }

    #[tokio::test]
    async fn empty_command_and_zero_timeout_are_rejected() {
        let dir = TempDir::new().unwrap();
        let ctx = context(&dir);
        let result = sh(&ctx, "  ").await;
        assert!(result.is_error);
        assert!(result.content.contains("the command is empty"));
        let result = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({"command": "true", "timeout_seconds": 0}),
            ),
        )
        .await
        .unwrap();
        assert!(result.is_error);
        assert!(
            result
                .content
                .contains("timeout_seconds must be at least 1")
        );
        let result = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({"command": "true", "timeout_seconds": -1}),
            ),
        )
        .await
        .unwrap();
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("invalid arguments for tool 'shell'")
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = TempDir::new().unwrap();
        let marker = marker(1);
        let _cleanup = Cleanup(marker.clone());
        let started = Instant::now();
        let result = execute(
            &context(&dir),
            &call(
                SHELL,
                serde_json::json!({
                    "command": format!("echo started; echo warn >&2; {marker} & {marker}"),
                    "timeout_seconds": 1,
                }),
            ),
        )
        .await
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("command timed out after 1 s and was stopped"),
            "{}",
            result.content
        );
        assert!(
            result
                .content
                .ends_with("Output so far:\n--- stdout ---\nstarted\n--- stderr ---\nwarn"),
            "{}",
            result.content
        );
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn sandboxed_command_is_killed_as_a_whole_too() {
        let dir = TempDir::new().unwrap();
        let marker = marker(6);
        let _cleanup = Cleanup(marker.clone());
        let mut ctx = context(&dir);
        ctx.sandbox = crate::tools::sandbox::Sandbox::resolve(
            None,
            std::sync::Arc::new(crate::tools::sandbox::SandboxSettings::default()),
        )
        .unwrap();
        let result = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({
                    "command": format!("echo started; {marker} & {marker}"),
                    "timeout_seconds": 1,
                }),
            ),
        )
        .await
        .unwrap();
        assert!(
            result
                .content
                .starts_with("command timed out after 1 s and was stopped"),
            "{}",
            result.content
        );
        assert!(result.content.ends_with("--- stdout ---\nstarted"));
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn default_timeout_comes_from_the_context() {
        let dir = TempDir::new().unwrap();
        let marker = marker(2);
        let _cleanup = Cleanup(marker.clone());
        let mut ctx = context(&dir);
        ctx.timeout = Duration::from_millis(300);
        let result = sh(&ctx, &marker).await;
        assert!(result.is_error);
        assert!(
            result.content.starts_with("command timed out after 0.3 s"),
            "{}",
            result.content
        );
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn cancellation_kills_the_whole_group() {
        let dir = TempDir::new().unwrap();
        let marker = marker(3);
        let _cleanup = Cleanup(marker.clone());
        let ctx = context(&dir);
        let cancel = ctx.cancel.clone();
        let watched = marker.clone();
        let canceller = tokio::spawn(async move {
            // Both sleeps (and `sh`, whose command line has the marker too) are running.
            assert!(wait_for(&watched, true).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let err = execute(
            &ctx,
            &call(
                SHELL,
                serde_json::json!({ "command": format!("{marker} & {marker}") }),
            ),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Cancelled), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        canceller.await.unwrap();
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_whole_group() {
        let dir = TempDir::new().unwrap();
        let marker = marker(4);
        let _cleanup = Cleanup(marker.clone());
        let ctx = context(&dir);
        let command = call(
            SHELL,
            serde_json::json!({ "command": format!("{marker} & {marker}") }),
        );
        tokio::select! {
            result = execute(&ctx, &command) => panic!("the command ended: {result:?}"),
            present = wait_for(&marker, true) => assert!(present),
        }
        // The `execute` future is dropped here.
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn background_jobs_do_not_keep_the_call_waiting() {
        let dir = TempDir::new().unwrap();
        let marker = marker(5);
        let _cleanup = Cleanup(marker.clone());
        let started = Instant::now();
        let result = sh(&context(&dir), &format!("echo hi; {marker} &")).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nhi");
        assert!(!result.is_error);
        assert_no_process_left(&marker).await;
    }

    #[tokio::test]
    async fn output_of_background_jobs_written_before_exit_is_kept() {
        let dir = TempDir::new().unwrap();
        let result = sh(&context(&dir), "(echo from-job) & wait").await;
        assert_eq!(result.content, "exit code: 0\n--- stdout ---\nfrom-job");
    }

    #[tokio::test]
    async fn big_output_is_capped_keeping_head_and_tail() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "echo FIRST; head -c 1000000 /dev/zero | tr '\\0' a; echo; echo LAST",
        )
        .await;
        assert!(!result.is_error);
        assert!(
            result.content.len() <= OUTPUT_CAP_BYTES,
            "{}",
            result.content.len()
        );
        assert!(
            result
                .content
                .starts_with("exit code: 0\n--- stdout ---\nFIRST\naaaa")
        );
        assert!(
            result.content.ends_with("aaaa\nLAST"),
            "{}",
            &result.content[result.content.len() - 50..]
        );
        // The note gives the true size of the stream and of the cut: FIRST\n, the a's, \n, LAST\n.
        let total = 6 + 1_000_000 + 1 + 5;
        let prefix = "exit code: 0\n--- stdout ---\n";
        let note_start = result.content.find("\n[... ").unwrap();
        let note_end = result.content.find(" ...]\n").unwrap() + " ...]\n".len();
        let note = &result.content[note_start..note_end];
        let cut: usize = note["\n[... ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(note, output::cut_note(cut, total));
        let kept = result.content.len() - prefix.len() - note.len();
        // + 1: the stream's final newline is not shown.
        assert_eq!(kept + cut + 1, total);
    }

    #[tokio::test]
    async fn huge_output_is_drained_without_deadlock() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "head -c 20000000 /dev/zero | tr '\\0' o; head -c 3000000 /dev/zero | tr '\\0' e >&2; echo done >&2",
        )
        .await;
        assert!(!result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 20000000 ...]")
        );
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 3000005 ...]")
        );
        assert!(
            result.content.ends_with("eeedone"),
            "{}",
            &result.content[result.content.len() - 100..]
        );
        // Both streams get a fair share of the cap.
        let stderr_at = result.content.find("\n--- stderr ---\n").unwrap();
        assert!(stderr_at > OUTPUT_CAP_BYTES / 3, "{stderr_at}");
        assert!(stderr_at < OUTPUT_CAP_BYTES * 2 / 3, "{stderr_at}");
    }

    #[tokio::test]
    async fn small_stream_is_kept_whole_next_to_a_big_one() {
        let dir = TempDir::new().unwrap();
        let result = sh(
            &context(&dir),
            "head -c 100000 /dev/zero | tr '\\0' o; echo 'error: the one line that matters' >&2; exit 1",
        )
        .await;
        assert!(result.is_error);
        assert!(result.content.len() <= OUTPUT_CAP_BYTES);
        assert!(
            result
                .content
                .contains("bytes cut from the middle of 100000 ...]")
        );
        assert!(
            result
                .content
                .ends_with("ooo\n--- stderr ---\nerror: the one line that matters")
        );
    }

    #[tokio::test]
    async fn cannot_start_is_an_infrastructure_error() {
        let dir = TempDir::new().unwrap();
        let mut ctx = context(&dir);
        ctx.workspace = dir.path().join("missing"); // `run` does not create it, `execute` does
        let err = run(
            &ctx,
            ShellArgs {
                command: "true".into(),
                timeout_seconds: None,
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Io { .. }), "{err:?}");
        assert!(err.to_string().starts_with("cannot start `sh`: "), "{err}");
    }

    #[test]
    fn capture_keeps_head_and_tail_and_counts_everything() {
        let mut capture = Capture::default();
        for i in 0..100u8 {
            capture.push(&[b'a' + i % 26; 64 * 1024]);
        }
        assert_eq!(capture.total, 100 * 64 * 1024);
        assert_eq!(capture.head.len(), HEAD_KEEP);
        assert!(capture.tail.len() <= 2 * TAIL_KEEP);
        assert_eq!(capture.kept_tail().len(), TAIL_KEEP);
        assert_eq!(capture.kept_tail().last(), Some(&(b'a' + 99 % 26)));
        let text = capture.render(1000);
        assert!(text.len() <= 1000);
        assert!(text.starts_with("aaaa"));
        assert!(text.ends_with("vvvv"));
        assert!(text.contains(&format!("cut from the middle of {} ...]", 100 * 64 * 1024)));
    }

    #[test]
    fn capture_tail_does_not_start_inside_a_character() {
        let mut capture = Capture::default();
        capture.push(&vec![b'x'; HEAD_KEEP]);
        capture.push("é".repeat(TAIL_KEEP).as_bytes());
        let text = capture.render(301);
        assert!(!text.contains('\u{FFFD}'), "{text}");
        assert!(text.ends_with("éé"));
    }
}
