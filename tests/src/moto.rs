//! A real S3-compatible server per test: moto's standalone server (`moto_server` from
//! `pip install 'moto[server]'`), on a free loopback port, stopped on drop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tempfile::TempDir;

use crate::http_thread::loopback_request;
use crate::process::{
    check_still_starting, clean_command, keep_dirs, spawn_tied, stop_child, tail_file,
};
use crate::server::free_port;

/// How long [`MotoServer::start`] waits for the server to answer.
pub const MOTO_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`MotoServer::stop`] waits after SIGTERM before sending SIGKILL.
pub const MOTO_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// What to run when moto is missing.
pub const MOTO_INSTALL_HINT: &str = "pip install 'moto[server]'";

/// Access key id moto accepts (it accepts any).
pub const MOTO_ACCESS_KEY_ID: &str = "testing";
/// Secret access key moto accepts (it accepts any).
pub const MOTO_SECRET_ACCESS_KEY: &str = "testing";
/// Region the harness uses with moto.
pub const MOTO_REGION: &str = "us-east-1";

/// A moto S3 server child process on a free loopback port, logging to a file in a private
/// temp dir. Stopped (SIGTERM, then SIGKILL) on drop; only this process is signalled.
pub struct MotoServer {
    child: Option<Child>,
    pid: u32,
    port: u16,
    log_path: PathBuf,
    dir: Option<TempDir>,
}

impl MotoServer {
    /// Starts moto and waits (up to 30 s) until it answers S3 requests. Fails with a
    /// message saying to run `pip install 'moto[server]'` when moto is not installed
    /// (`$MOTO_SERVER` may name the `moto_server` executable).
    pub fn start() -> anyhow::Result<MotoServer> {
        let launcher = moto_launcher()?;
        let dir = tempfile::Builder::new()
            .prefix("baton-moto-")
            .tempdir()
            .context("creating temp dir for moto")?;
        let mut server = MotoServer {
            child: None,
            pid: 0,
            port: 0,
            log_path: dir.path().join("moto.log"),
            dir: Some(dir),
        };
        // A free port can be taken by someone else before moto binds it: retry.
        let mut last_err = None;
        for _attempt in 0..3 {
            server.port = free_port()?;
            match server.spawn_and_wait(&launcher) {
                Ok(()) => return Ok(server),
                Err(e) => {
                    server.stop();
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("moto did not start")))
    }

    fn spawn_and_wait(&mut self, launcher: &[PathBuf]) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let (program, pre_args) = launcher.split_first().context("empty moto launcher")?;
        let mut cmd = clean_command(program);
        cmd.args(pre_args)
            .args(["-H", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("dup log fd")?)
            .stderr(log);
        let child = spawn_tied(cmd).with_context(|| {
            format!(
                "spawning moto's server ({}); is moto installed? run `{MOTO_INSTALL_HINT}`",
                program.display()
            )
        })?;
        self.pid = child.id();
        self.child = Some(child);
        self.wait_ready(MOTO_START_TIMEOUT)
    }

    fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            check_still_starting(self.child.as_mut(), "moto_server", &self.log_path)?;
            // ListBuckets answers 200 once the S3 backend is up.
            let last = match self.http("GET", "/") {
                Ok(200) => return Ok(()),
                Ok(code) => format!("GET / answered HTTP {code}"),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() >= deadline {
                bail!(
                    "moto on {} not ready after {timeout:?}; last check: {last}\nlog {}:\n{}",
                    self.endpoint(),
                    self.log_path.display(),
                    tail_file(&self.log_path, 8 * 1024)
                );
            }
            thread::sleep(Duration::from_millis(150));
        }
    }

    /// One anonymous HTTP/1.1 request to the server; returns the status code.
    fn http(&self, method: &str, path: &str) -> anyhow::Result<u16> {
        self.http_with_body(method, path, &[], "")
    }

    /// One HTTP/1.1 request with `extra_headers` (each ending in CRLF); returns the status.
    fn http_with_body(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        extra_headers: &str,
    ) -> anyhow::Result<u16> {
        loopback_request(self.port, method, path, body, extra_headers).map(|(status, _)| status)
    }

    /// Creates bucket `name` (a plain path-style `PUT /<name>`, which moto accepts
    /// unsigned).
    pub fn create_bucket(&self, name: &str) -> anyhow::Result<()> {
        match self.http("PUT", &format!("/{name}"))? {
            200 => Ok(()),
            code => bail!(
                "creating bucket {name} on moto answered HTTP {code}; log {}:\n{}",
                self.log_path.display(),
                tail_file(&self.log_path, 4 * 1024)
            ),
        }
    }

    /// Writes object `key` of `bucket` directly (`PUT /<bucket>/<key>`), bypassing any
    /// store: for tampering with blobs in tests. Moto does not check signatures, but it
    /// refuses anonymous overwrites of objects written with credentials, so the request
    /// carries a syntactically valid, unverified SigV4 `Authorization` header.
    pub fn put_object(&self, bucket: &str, key: &str, body: &[u8]) -> anyhow::Result<()> {
        let auth = format!(
            "Authorization: AWS4-HMAC-SHA256 Credential={MOTO_ACCESS_KEY_ID}/20240101/\
             {MOTO_REGION}/s3/aws4_request, SignedHeaders=host, Signature=00\r\n"
        );
        match self.http_with_body("PUT", &format!("/{bucket}/{key}"), body, &auth)? {
            200 => Ok(()),
            code => bail!("writing {bucket}/{key} on moto answered HTTP {code}"),
        }
    }

    /// Contents of moto's log: one line per request (`"PUT /bucket/key HTTP/1.1" 200 -`),
    /// e.g. to count uploads.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// `"http://127.0.0.1:<port>"`, the S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port moto listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Pid of the moto process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `true` while the moto process is alive.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Path of moto's log file (its stdout + stderr, one line per request).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Stops moto: SIGTERM to its pid, wait up to 5 s, then SIGKILL. Idempotent; once it
    /// returns the process has exited and been reaped.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, MOTO_STOP_TIMEOUT);
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "=== moto {} log ({}) ===\n{}",
                self.endpoint(),
                self.log_path.display(),
                tail_file(&self.log_path, 8 * 1024)
            );
        }
        self.stop();
        if keep_dirs()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping moto dir {}", dir.keep().display());
        }
    }
}

/// The command that runs moto's server: `$MOTO_SERVER`, else `moto_server` from `PATH`
/// (a pyenv shim resolved to the real script), else `python3 -m moto.server` when that
/// Python has moto's server installed.
fn moto_launcher() -> anyhow::Result<Vec<PathBuf>> {
    if let Some(p) = std::env::var_os("MOTO_SERVER") {
        return Ok(vec![PathBuf::from(p)]);
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("moto_server"))
        .find(|p| is_executable(p));
    if let Some(found) = on_path {
        let is_pyenv_shim = found
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "shims");
        if is_pyenv_shim
            && let Ok(out) = Command::new("pyenv")
                .args(["which", "moto_server"])
                .stderr(Stdio::null())
                .output()
        {
            let real = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if out.status.success() && is_executable(&real) {
                return Ok(vec![real]);
            }
            // A shim for a Python version that does not have moto: try the fallback.
        } else {
            return Ok(vec![found]);
        }
    }
    let python_has_moto = Command::new("python3")
        .args(["-c", "import moto.server, flask"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if python_has_moto {
        return Ok(["python3", "-m", "moto.server"]
            .iter()
            .map(PathBuf::from)
            .collect());
    }
    bail!(
        "moto's S3 server is not installed (no `moto_server` on PATH and python3 cannot import \
         moto.server): run `{MOTO_INSTALL_HINT}` (scripts/test.sh does), or set MOTO_SERVER \
         to the moto_server executable"
    )
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
