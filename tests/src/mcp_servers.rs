//! The reference MCP servers for the end-to-end tests: where they are installed
//! ([`servers_dir`], installed once per test process by `scripts/mcp-servers.sh` from the pins in
//! `tests/mcp/package-lock.json`), the "everything" server over streamable HTTP on loopback behind
//! a counting relay ([`EverythingServer`]), and the worker settings that name them
//! ([`fs_server_toml`], [`http_server_toml`], [`command_server_toml`], [`worker_config`]).

mod relay;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::process::{check_still_starting, spawn_tied, stop_child, tail_file};
use crate::server::{free_port, port_accepts};

pub use relay::McpCounts;
use relay::Relay;

/// How long [`EverythingServer::start`] waits for the server to accept connections.
pub const MCP_SERVER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The repository's root (the parent of the `tests` crate).
fn repo_root() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// The directory holding `node_modules` with the pinned reference servers. The first call in a
/// test process runs `scripts/mcp-servers.sh` (a no-op when the install is up to date; needs
/// node and npm otherwise); later calls return its answer.
pub fn servers_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| install().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn install() -> anyhow::Result<PathBuf> {
    let script = repo_root().join("scripts/mcp-servers.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).stdin(Stdio::null());
    let out = cmd
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for entry in [FILESYSTEM_ENTRY, EVERYTHING_ENTRY] {
        if !dir.join(entry).is_file() {
            bail!(
                "{} did not install {entry} in {}",
                script.display(),
                dir.display()
            );
        }
    }
    Ok(dir)
}

const FILESYSTEM_ENTRY: &str = "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js";
const EVERYTHING_ENTRY: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// The entry point of `@modelcontextprotocol/server-filesystem` (stdio; the allowed directories
/// are its arguments).
pub fn filesystem_entry() -> anyhow::Result<PathBuf> {
    Ok(servers_dir()?.join(FILESYSTEM_ENTRY))
}

/// The entry point of `@modelcontextprotocol/server-everything` (`stdio`, `sse` or
/// `streamableHttp` as its argument).
pub fn everything_entry() -> anyhow::Result<PathBuf> {
    Ok(servers_dir()?.join(EVERYTHING_ENTRY))
}

/// `tests/mcp/loopback.cjs`: preloaded with `node -r` to keep a server that listens on every
/// interface on 127.0.0.1.
pub fn loopback_preload() -> PathBuf {
    repo_root().join("tests/mcp/loopback.cjs")
}

/// `@modelcontextprotocol/server-everything` over streamable HTTP on a loopback port, behind a
/// [counting relay](McpCounts) on another loopback port; [`EverythingServer::url`] is the
/// relay's. Its environment is only `PATH`, `HOME` and `PORT` (its `get-env` tool returns it).
/// Drop stops the node process (by its pid) and the relay.
pub struct EverythingServer {
    child: Option<Child>,
    port: u16,
    relay: Relay,
    log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl EverythingServer {
    /// Starts the server and its relay; waits until the server accepts connections.
    pub fn start() -> anyhow::Result<EverythingServer> {
        let dir = tempfile::Builder::new()
            .prefix("baton-mcp-everything-")
            .tempdir()
            .context("creating the server's temp dir")?;
        let port = free_port()?;
        let mut server = EverythingServer {
            child: None,
            port,
            relay: Relay::start(port)?,
            log_path: dir.path().join("everything.log"),
            _dir: dir,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let mut cmd = Command::new("node");
        cmd.env_clear()
            .envs(
                ["PATH", "HOME"]
                    .iter()
                    .filter_map(|k| Some((k, std::env::var_os(k)?))),
            )
            .env("PORT", self.port.to_string())
            .arg("-r")
            .arg(loopback_preload())
            .arg(everything_entry()?)
            .arg("streamableHttp")
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("dup log fd")?)
            .stderr(log);
        self.child = Some(spawn_tied(cmd).context("spawning node (server-everything)")?);
        let deadline = Instant::now() + MCP_SERVER_START_TIMEOUT;
        while !port_accepts(self.port) {
            check_still_starting(self.child.as_mut(), "server-everything", &self.log_path)?;
            if Instant::now() >= deadline {
                bail!(
                    "server-everything did not listen on 127.0.0.1:{} within {MCP_SERVER_START_TIMEOUT:?}; log:\n{}",
                    self.port,
                    self.log()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The MCP endpoint, through the relay: `http://127.0.0.1:<relay port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.relay.port())
    }

    /// The `tools/list` and `tools/call` requests that reached the server so far.
    pub fn counts(&self) -> McpCounts {
        self.relay.counts()
    }

    /// The node process's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the server wrote to stdout and stderr.
    pub fn log(&self) -> String {
        tail_file(&self.log_path, 64 * 1024)
    }

    /// Kills the server (SIGKILL, by pid); the relay stays and refuses connections meanwhile.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port (the relay's URL is unchanged;
    /// sessions of the old process are gone).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for EverythingServer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "=== server-everything log ({}) ===\n{}",
                self.log_path.display(),
                tail_file(&self.log_path, 8 * 1024)
            );
        }
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, Duration::from_secs(2));
        }
    }
}

/// `s` as a TOML basic string (JSON's string escapes are valid TOML).
fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// `s` quoted for `sh` (single quotes).
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A `[mcp.servers.NAME]` table for a stdio server.
pub fn command_server_toml(name: &str, command: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| toml_string(a)).collect();
    format!(
        "[mcp.servers.{name}]\ncommand = {}\nargs = [{}]\n",
        toml_string(command),
        args.join(", ")
    )
}

/// A `[mcp.servers.NAME]` table for a streamable HTTP server at `url`.
pub fn http_server_toml(name: &str, url: &str) -> String {
    format!("[mcp.servers.{name}]\nurl = {}\n", toml_string(url))
}

/// The command and arguments that run server-filesystem over stdio with `data_dir` as its one
/// allowed directory, through `sh -c "tee -a LOG | exec node …"`: `log` receives every
/// JSON-RPC message sent to it (see [`count_methods`]).
pub fn fs_server_command(data_dir: &Path, log: &Path) -> anyhow::Result<(String, Vec<String>)> {
    let script = format!(
        "tee -a {} | exec node {} {}",
        sh_quote(&log.display().to_string()),
        sh_quote(&filesystem_entry()?.display().to_string()),
        sh_quote(&data_dir.display().to_string()),
    );
    Ok(("sh".to_owned(), vec!["-c".to_owned(), script]))
}

/// A `[mcp.servers.NAME]` table for [`fs_server_command`].
pub fn fs_server_toml(name: &str, data_dir: &Path, log: &Path) -> anyhow::Result<String> {
    let (command, args) = fs_server_command(data_dir, log)?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(command_server_toml(name, &command, &args))
}

/// How many JSON-RPC requests of `method` (e.g. `"tools/list"`) the text holds (with or
/// without a space after the colon): for a log written by [`fs_server_toml`].
pub fn count_methods(text: &str, method: &str) -> usize {
    [
        format!(r#""method":"{method}""#),
        format!(r#""method": "{method}""#),
    ]
    .iter()
    .map(|m| text.matches(m.as_str()).count())
    .sum()
}

/// Writes `servers` (tables from the `*_toml` helpers) and `extra` TOML into `dir/worker.toml`
/// and returns its path, for a worker's `BATON_CONFIG`.
pub fn worker_config(dir: &Path, servers: &[String], extra: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("worker.toml");
    let mut text = String::from(extra);
    for server in servers {
        text.push('\n');
        text.push_str(server);
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
