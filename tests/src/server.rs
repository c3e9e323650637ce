//! A real Temporal dev server (`temporal server start-dev`) per test.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::process::{
    CmdOutput, check_still_starting, clean_command, keep_dirs, run_cmd, send_signal, spawn_tied,
    tail_file, temporal_bin, wait_child_timeout,
};

/// How long [`DevServer::start`] waits for the server to become ready.
pub const SERVER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`DevServer::stop`] waits after SIGTERM before sending SIGKILL.
pub const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of each [`DevServer::temporal`] invocation.
pub const TEMPORAL_CMD_TIMEOUT: Duration = Duration::from_secs(60);

const NAMESPACE: &str = "default";

/// A Temporal dev server child process on free loopback ports, with its
/// SQLite database and log file in a private temp dir. Stopped on drop.
pub struct DevServer {
    child: Option<Child>,
    pid: u32,
    port: u16,
    ui_port: u16,
    http_port: u16,
    extra_args: Vec<String>,
    log_path: PathBuf,
    db_path: PathBuf,
    dir: Option<TempDir>,
}

impl DevServer {
    /// Starts a dev server and waits (up to 30 s) until it serves the
    /// `default` namespace.
    /// Registers baton's search attributes (`BatonState`, ...), like `scripts/demo.sh`.
    pub fn start() -> anyhow::Result<DevServer> {
        Self::start_baton(&[])
    }

    /// Like [`DevServer::start`] (baton's search attributes registered) with extra
    /// `temporal server start-dev` flags, e.g. `&["--dynamic-config-value",
    /// "history.transferProcessorMaxPollRPS=1000"]`.
    pub fn start_baton(extra_args: &[&str]) -> anyhow::Result<DevServer> {
        let defs: Vec<String> = baton_workflows::workflow::SEARCH_ATTRIBUTE_DEFINITIONS
            .iter()
            .map(|(name, kind)| format!("{name}={kind}"))
            .collect();
        let mut args = Vec::new();
        for d in &defs {
            args.push("--search-attribute");
            args.push(d.as_str());
        }
        args.extend_from_slice(extra_args);
        Self::start_with_args(&args)
    }

    /// Like [`DevServer::start`] with extra `temporal server start-dev` flags,
    /// e.g. `&["--dynamic-config-value", "limit.blobSize.error=1000000"]` or
    /// `&["--search-attribute", "BatonAgent=Keyword"]`.
    pub fn start_with_args(extra_args: &[&str]) -> anyhow::Result<DevServer> {
        let dir = tempfile::Builder::new()
            .prefix("baton-temporal-")
            .tempdir()
            .context("creating temp dir for the dev server")?;
        let mut server = DevServer {
            child: None,
            pid: 0,
            port: 0,
            ui_port: 0,
            http_port: 0,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            log_path: dir.path().join("temporal.log"),
            db_path: dir.path().join("temporal.db"),
            dir: Some(dir),
        };
        // A free port found by binding :0 can be grabbed by someone else before
        // the server binds it; retry with fresh ports if the server dies early.
        let mut last_err = None;
        for _attempt in 0..3 {
            let ports = free_ports(3)?;
            server.port = ports[0];
            server.ui_port = ports[1];
            server.http_port = ports[2];
            match server.spawn_and_wait() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.stop();
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("dev server did not start")))
    }

    fn spawn_and_wait(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let mut cmd = clean_command(temporal_bin()?);
        cmd.args(["server", "start-dev", "--ip", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--ui-port")
            .arg(self.ui_port.to_string())
            // The HTTP API (grpc-gateway) listens anyway, on a random port unless told one.
            .arg("--http-port")
            .arg(self.http_port.to_string())
            .arg("--headless")
            .arg("--db-filename")
            .arg(&self.db_path)
            .args(["--log-level", "error"])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("dup log fd")?)
            .stderr(log);
        let child = spawn_tied(cmd).context("spawning `temporal server start-dev`")?;
        self.pid = child.id();
        self.child = Some(child);
        self.wait_ready(SERVER_START_TIMEOUT)
    }

    fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut last = String::from("port not open yet");
        loop {
            check_still_starting(self.child.as_mut(), "temporal dev server", &self.log_path)?;
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                let out = self.temporal_with_timeout(
                    &[
                        "operator",
                        "namespace",
                        "describe",
                        "--namespace",
                        NAMESPACE,
                    ],
                    Duration::from_secs(5),
                );
                match out {
                    Ok(o) if o.success() => return Ok(()),
                    Ok(o) => last = o.to_string(),
                    Err(e) => last = format!("{e:#}"),
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "temporal dev server on {} not ready after {timeout:?}; last check: {last}\n\
                     server log {}:\n{}",
                    self.address(),
                    self.log_path.display(),
                    tail_file(&self.log_path, 8 * 1024)
                );
            }
            thread::sleep(Duration::from_millis(150));
        }
    }

    /// `"127.0.0.1:<port>"`, the frontend gRPC address.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `"http://127.0.0.1:<port>"`, for SDK clients that want a URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The frontend gRPC port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The frontend's HTTP API port (`/api/v1/...`), on 127.0.0.1 like the gRPC port.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// The blob store directory the harness's workers of this server share
    /// (`BATON_STORE__DIR`), next to the server's database.
    pub fn blob_dir(&self) -> PathBuf {
        self.db_path
            .parent()
            .map(|p| p.join("blobs"))
            .unwrap_or_else(|| PathBuf::from("blobs"))
    }

    /// Always `"default"`.
    pub fn namespace(&self) -> &str {
        NAMESPACE
    }

    /// Pid of the server process (of the last started one after a stop).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `true` while the server process is alive.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Path of the server's log file (stdout+stderr, log level `error`).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Contents of the server log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Path of the SQLite database file.
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// Stops the server: SIGTERM, wait up to 10 s, then SIGKILL. Idempotent.
    /// Once it returns, the process has exited and been reaped.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = send_signal(self.pid, Signal::SIGTERM);
        if matches!(
            wait_child_timeout(&mut child, SERVER_STOP_TIMEOUT),
            Ok(Some(_))
        ) {
            return;
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the server and starts it again on the same ports with the same
    /// database file (workflows survive), waiting until it is ready.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.spawn_and_wait()
            .context("restarting the dev server on the same port/db")
    }

    /// Runs the `temporal` CLI against this server (`--address` appended and
    /// `TEMPORAL_ADDRESS`/`TEMPORAL_NAMESPACE` set), e.g.
    /// `server.temporal(&["workflow", "describe", "-w", id, "-o", "json"])`.
    /// Times out after 60 s. A non-zero exit is *not* an error; check
    /// [`CmdOutput::code`] or use [`CmdOutput::ensure_success`].
    pub fn temporal(&self, args: &[&str]) -> anyhow::Result<CmdOutput> {
        self.temporal_with_timeout(args, TEMPORAL_CMD_TIMEOUT)
    }

    /// [`DevServer::temporal`] with an explicit timeout.
    pub fn temporal_with_timeout(
        &self,
        args: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<CmdOutput> {
        let address = self.address();
        let mut cmd = clean_command(temporal_bin()?);
        cmd.args(args)
            .env("TEMPORAL_ADDRESS", &address)
            .env("TEMPORAL_NAMESPACE", NAMESPACE);
        let has_address = args
            .iter()
            .any(|a| *a == "--address" || a.starts_with("--address="));
        let has_separator = args.contains(&"--");
        let is_server_cmd = args.first() == Some(&"server");
        if !has_address && !has_separator && !is_server_cmd {
            cmd.args(["--address", &address]);
        }
        run_cmd(cmd, None, timeout)
    }

    /// Raw event history of a workflow as JSON (`temporal workflow show -o json
    /// --no-json-shorthand-payloads`, so payload `data` stays base64; use
    /// [`crate::decode_history_payloads`] / [`crate::history_search_text`]).
    /// `run_id` selects a run; `None` = latest run.
    pub fn workflow_history_json(
        &self,
        workflow_id: &str,
        run_id: Option<&str>,
    ) -> anyhow::Result<serde_json::Value> {
        let mut args = vec![
            "workflow",
            "show",
            "--workflow-id",
            workflow_id,
            "-o",
            "json",
            "--no-json-shorthand-payloads",
        ];
        if let Some(run_id) = run_id {
            args.extend(["--run-id", run_id]);
        }
        self.temporal(&args)?.ensure_success()?.json()
    }

    /// `temporal workflow describe -o json` of a workflow (latest run).
    pub fn workflow_describe_json(&self, workflow_id: &str) -> anyhow::Result<serde_json::Value> {
        self.temporal(&[
            "workflow",
            "describe",
            "--workflow-id",
            workflow_id,
            "-o",
            "json",
        ])?
        .ensure_success()?
        .json()
    }

    /// The workflow's status string from describe, e.g.
    /// `"WORKFLOW_EXECUTION_STATUS_RUNNING"` / `..._COMPLETED` / `..._FAILED`.
    pub fn workflow_status(&self, workflow_id: &str) -> anyhow::Result<String> {
        let v = self.workflow_describe_json(workflow_id)?;
        v.pointer("/workflowExecutionInfo/status")
            .and_then(|s| s.as_str())
            .map(str::to_owned)
            .with_context(|| format!("no workflowExecutionInfo.status in describe output: {v}"))
    }

    /// Everything searchable about a workflow's history: the raw JSON plus all
    /// decoded payloads (see [`crate::history_search_text`]). Use it to assert
    /// that a secret does (not) appear in the history.
    pub fn workflow_history_text(&self, workflow_id: &str) -> anyhow::Result<String> {
        Ok(crate::history_search_text(
            &self.workflow_history_json(workflow_id, None)?,
        ))
    }
}

impl Drop for DevServer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "=== temporal dev server {} log ({}) ===\n{}",
                self.address(),
                self.log_path.display(),
                tail_file(&self.log_path, 8 * 1024)
            );
        }
        self.stop();
        if keep_dirs()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping dev server dir {}", dir.keep().display());
        }
    }
}

/// `n` distinct currently-free loopback TCP ports (bind 127.0.0.1:0).
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    // Keep all listeners open until every port is chosen so they are distinct.
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// `true` when something accepts TCP connections on 127.0.0.1:`port` (within 500 ms).
pub fn port_accepts(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}

/// One currently-free loopback TCP port.
pub fn free_port() -> anyhow::Result<u16> {
    free_ports(1)?.first().copied().context("no port allocated")
}
