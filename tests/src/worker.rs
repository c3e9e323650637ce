//! The `baton-worker` binary as a child process.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{RwLock, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::process::{
    bin_path, clean_command, describe_status, keep_dirs, send_signal, spawn_tied, tail_file,
    wait_child_timeout,
};
use crate::server::DevServer;

/// Log line that marks a worker as ready (polling its task queue).
pub const WORKER_READY_MARKER: &str = "worker started";
/// Default timeout of [`Worker::terminate`].
pub const WORKER_TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);

/// Logged by the SDK once the worker is past its start-up sweep of orphaned tool processes.
const PAST_ORPHAN_SWEEP: &str = "Initializing worker";

/// Held (shared) by every worker start-up until the worker is past its sweep of orphans.
static STARTS: RwLock<()> = RwLock::new(());

/// Holds back every worker start-up (in this test process) until dropped.
///
/// A starting worker kills the tool processes of every dead worker on the host
/// (`orphans::kill_orphans`). A test that kills a worker and checks that the *retry* finds
/// and kills the dead worker's processes holds this from the kill until the retry did, so
/// that a worker started meanwhile by another test (all suites share one process) does
/// not sweep them first. Keep it short: other tests' [`Worker::spawn`] calls wait.
pub fn pause_worker_starts() -> RwLockWriteGuard<'static, ()> {
    STARTS.write().unwrap_or_else(|e| e.into_inner())
}

/// A `baton-worker` child process. stdout+stderr go to a log file. SIGKILLed
/// on drop if still running (and its log tail printed if the test panicked).
pub struct Worker {
    child: Option<Child>,
    exit: Option<ExitStatus>,
    pid: u32,
    task_queue: String,
    workspace_root: PathBuf,
    log_path: PathBuf,
    /// Holds the log file (and the workspace root for [`Worker::spawn`]).
    dir: Option<TempDir>,
}

/// Adds search permission for others (`o+x`) to `root` and each of its parents inside the
/// system temp dir: temp dirs are `0700`, and a root worker refuses to start with a workspace
/// root its sandbox user cannot traverse (what an operator is told to do, done for tests).
fn traversable_in_temp(root: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // tempfile's temp dir: the benchmarks point it elsewhere (`/dev/shm`).
    let temp =
        std::fs::canonicalize(tempfile::env::temp_dir()).context("resolving the temp dir")?;
    let root =
        std::fs::canonicalize(root).with_context(|| format!("resolving {}", root.display()))?;
    for dir in root
        .ancestors()
        .filter(|d| d.starts_with(&temp) && *d != temp)
    {
        let mode = std::fs::metadata(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o001))
                .with_context(|| format!("chmod o+x {}", dir.display()))?;
        }
    }
    Ok(())
}

impl Worker {
    /// Spawns `baton-worker` against `server` on `task_queue`, with a fresh
    /// workspace root (`<worker tempdir>/workspace`) owned by this `Worker`.
    ///
    /// Environment: `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE=default`,
    /// `BATON_TASK_QUEUE`, `BATON_WORKSPACE_ROOT`, `RUST_LOG=info`,
    /// `RUST_BACKTRACE=1`, `NO_COLOR=1`, then `env` (which overrides any of
    /// them). Inherited `TEMPORAL_*`, `BATON_*` and `OPENAI_*` variables are
    /// removed. Call [`Worker::wait_ready`] before starting workflows.
    pub fn spawn(
        server: &DevServer,
        task_queue: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Worker> {
        Self::spawn_inner(server, task_queue, None, env)
    }

    /// Like [`Worker::spawn`] but with a caller-owned workspace root (created
    /// if missing), so that several workers of one test (e.g. a replacement
    /// after [`Worker::kill9`]) share it.
    pub fn spawn_with_workspace(
        server: &DevServer,
        task_queue: &str,
        workspace_root: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Worker> {
        Self::spawn_inner(server, task_queue, Some(workspace_root), env)
    }

    fn spawn_inner(
        server: &DevServer,
        task_queue: &str,
        workspace_root: Option<&Path>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Worker> {
        Self::spawn_program(
            &bin_path("baton-worker")?,
            server,
            task_queue,
            workspace_root,
            env,
        )
    }

    /// Like [`Worker::spawn`] / [`Worker::spawn_with_workspace`] but runs
    /// `program` instead of `baton-worker` (same environment and log
    /// handling), e.g. a stand-in script. `workspace_root: None` = a fresh one.
    pub fn spawn_program(
        program: &Path,
        server: &DevServer,
        task_queue: &str,
        workspace_root: Option<&Path>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Worker> {
        let bin = program.to_path_buf();
        let dir = tempfile::Builder::new()
            .prefix("baton-worker-")
            .tempdir()
            .context("creating worker temp dir")?;
        let workspace_root = match workspace_root {
            Some(p) => p.to_path_buf(),
            None => dir.path().join("workspace"),
        };
        std::fs::create_dir_all(&workspace_root)
            .with_context(|| format!("creating {}", workspace_root.display()))?;
        traversable_in_temp(&workspace_root)?;
        let log_path = dir.path().join("worker.log");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;

        let mut cmd = clean_command(&bin);
        cmd.env("TEMPORAL_ADDRESS", server.address())
            .env("TEMPORAL_NAMESPACE", server.namespace())
            .env("BATON_TASK_QUEUE", task_queue)
            .env("BATON_WORKSPACE_ROOT", &workspace_root)
            .env("BATON_STORE__DIR", server.blob_dir())
            .env("RUST_LOG", "info")
            .env("RUST_BACKTRACE", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().context("dup log fd")?)
            .stderr(log);
        let starting = STARTS.read().unwrap_or_else(|e| e.into_inner());
        let child = spawn_tied(cmd).with_context(|| format!("spawning {}", bin.display()))?;
        let mut worker = Worker {
            pid: child.id(),
            child: Some(child),
            exit: None,
            task_queue: task_queue.to_owned(),
            workspace_root,
            log_path,
            dir: Some(dir),
        };
        // See `pause_worker_starts`: the start-up is done with orphans once the SDK worker
        // initialises (or the process is ready or gone).
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && worker.is_running() {
            let log = worker.log();
            if log.contains(PAST_ORPHAN_SWEEP) || log.contains(WORKER_READY_MARKER) {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        drop(starting);
        Ok(worker)
    }

    /// Waits until the log contains [`WORKER_READY_MARKER`] (`"worker
    /// started"`). Fails early, with the log, if the worker exits first, and on
    /// timeout.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.check_ready(deadline, timeout)? {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Blocking variant of [`Worker::wait_ready`] for non-async tests.
    pub fn wait_ready_blocking(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.check_ready(deadline, timeout)? {
            thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn check_ready(&mut self, deadline: Instant, timeout: Duration) -> anyhow::Result<bool> {
        if self.log().contains(WORKER_READY_MARKER) {
            return Ok(true);
        }
        if let Some(status) = self.poll_exit() {
            bail!(
                "baton-worker (pid {}) exited before becoming ready ({}); log {}:\n{}",
                self.pid,
                describe_status(&status),
                self.log_path.display(),
                tail_file(&self.log_path, 16 * 1024)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "baton-worker (pid {}) did not log {WORKER_READY_MARKER:?} within {timeout:?}; \
                 log {}:\n{}",
                self.pid,
                self.log_path.display(),
                tail_file(&self.log_path, 16 * 1024)
            );
        }
        Ok(false)
    }

    /// Pid of the worker process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The task queue it was started on.
    pub fn task_queue(&self) -> &str {
        &self.task_queue
    }

    /// The `BATON_WORKSPACE_ROOT` it was started with.
    pub fn workspace_root(&self) -> &Path {
        &self.workspace_root
    }

    /// Path of the log file (stdout+stderr).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Current contents of the log file.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// `true` while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.poll_exit().is_none() && self.child.is_some()
    }

    /// The exit status, once the process has exited (and been reaped).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.poll_exit()
    }

    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none()
            && let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.exit = Some(status);
        }
        self.exit
    }

    /// Sends `sig` to the worker if it is still running (e.g. `Signal::SIGINT`).
    pub fn signal(&mut self, sig: Signal) -> anyhow::Result<()> {
        if self.is_running() {
            send_signal(self.pid, sig)?;
        }
        Ok(())
    }

    /// Crash simulation: SIGKILL the worker and reap it. No-op if it already
    /// exited.
    pub fn kill9(&mut self) {
        if self.is_running() {
            let _ = send_signal(self.pid, Signal::SIGKILL);
        }
        if self.exit.is_none()
            && let Some(child) = self.child.as_mut()
            && let Ok(status) = child.wait()
        {
            self.exit = Some(status);
        }
    }

    /// Graceful stop: SIGTERM, then wait up to 30 s for exit and return the
    /// exit status. If it does not exit in time it is SIGKILLed and an error
    /// is returned. Returns the status directly if it had already exited.
    pub fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        self.terminate_timeout(WORKER_TERMINATE_TIMEOUT)
    }

    /// [`Worker::terminate`] with an explicit timeout.
    pub fn terminate_timeout(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        self.signal_and_wait(Signal::SIGTERM, timeout)
    }

    /// Sends `sig` and waits up to `timeout` for the process to exit (SIGKILL
    /// and error if it does not).
    pub fn signal_and_wait(
        &mut self,
        sig: Signal,
        timeout: Duration,
    ) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.poll_exit() {
            return Ok(status);
        }
        let child = self.child.as_mut().context("worker has no child process")?;
        send_signal(self.pid, sig)?;
        if let Some(status) = wait_child_timeout(child, timeout)? {
            self.exit = Some(status);
            return Ok(status);
        }
        self.kill9();
        bail!(
            "baton-worker (pid {}) did not exit within {timeout:?} after {sig}; killed. log:\n{}",
            self.pid,
            tail_file(&self.log_path, 16 * 1024)
        )
    }

    /// Waits up to `timeout` for the worker to exit by itself (e.g. after a
    /// signal sent with [`Worker::signal`]); `None` on timeout.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "=== baton-worker pid {} (task queue {}) log ({}) ===\n{}",
                self.pid,
                self.task_queue,
                self.log_path.display(),
                tail_file(&self.log_path, 16 * 1024)
            );
        }
        self.kill9();
        if keep_dirs()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping worker dir {}", dir.keep().display());
        }
    }
}
