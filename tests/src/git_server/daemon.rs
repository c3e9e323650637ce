//! The real `git daemon` serving a [`GitRepos`] over `git://` on loopback, pushes allowed.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tempfile::TempDir;

use super::repos::{GitRepos, git_command, repo_name};
use crate::process::{check_still_starting, keep_dirs, spawn_tied, stop_child, tail_file};
use crate::server::free_port;

/// How long [`GitDaemon::start`] waits for the daemon to accept connections.
pub const GIT_DAEMON_START_TIMEOUT: Duration = Duration::from_secs(15);

/// `git daemon --reuseaddr --export-all --enable=receive-pack --informative-errors
/// --base-path=<root> --listen=127.0.0.1 --port=<free>` over the repositories of a
/// [`GitRepos`], logging (`--verbose`) to a file in a private temp dir. Stopped by its pid
/// on drop (SIGTERM, then SIGKILL); its log is printed when the test panics.
pub struct GitDaemon {
    child: Option<Child>,
    port: u16,
    log_path: PathBuf,
    dir: Option<TempDir>,
}

impl GitDaemon {
    /// Starts the daemon and waits until it accepts connections. Retries on another port
    /// when the free port it picked was taken meanwhile.
    pub fn start(repos: &GitRepos) -> anyhow::Result<GitDaemon> {
        let dir = tempfile::Builder::new()
            .prefix("baton-git-daemon-")
            .tempdir()
            .context("creating a temp dir for git daemon's log")?;
        let mut daemon = GitDaemon {
            child: None,
            port: 0,
            log_path: dir.path().join("git-daemon.log"),
            dir: Some(dir),
        };
        let mut last_err = None;
        for _attempt in 0..3 {
            daemon.port = free_port()?;
            match daemon.spawn_and_wait(repos) {
                Ok(()) => return Ok(daemon),
                Err(e) => {
                    daemon.stop();
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("git daemon did not start")))
    }

    fn spawn_and_wait(&mut self, repos: &GitRepos) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let mut cmd = git_command();
        cmd.args([
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--informative-errors",
            "--verbose",
            "--log-destination=stderr",
            "--listen=127.0.0.1",
        ])
        .arg(format!("--base-path={}", repos.root().display()))
        .arg(format!("--port={}", self.port))
        .current_dir(repos.root())
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("dup log fd")?)
        .stderr(log);
        let child = spawn_tied(cmd).context(
            "spawning `git daemon`; is git installed with its daemon (Debian package `git`)?",
        )?;
        self.child = Some(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + GIT_DAEMON_START_TIMEOUT;
        loop {
            check_still_starting(self.child.as_mut(), "git daemon", &self.log_path)?;
            if TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "git daemon on {addr} accepts no connection after \
                     {GIT_DAEMON_START_TIMEOUT:?}; log {}:\n{}",
                    self.log_path.display(),
                    tail_file(&self.log_path, 8 * 1024)
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// `git://127.0.0.1:<port>/<name>`, with `.git` added to `name` when missing (see
    /// [`GitRepos::create`]).
    ///
    /// # Panics
    /// If `name` is not a repository name [`GitRepos::create`] takes.
    pub fn url(&self, name: &str) -> String {
        match repo_name(name) {
            Ok(name) => format!("git://127.0.0.1:{}/{name}", self.port),
            Err(e) => panic!("GitDaemon::url: {e:#}"),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The daemon's pid (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Its log so far (one line per connection and service, with `--verbose`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Stops the daemon (SIGTERM to its pid, then SIGKILL after 5 s). Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, Duration::from_secs(5));
        }
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "=== git daemon :{} log ({}) ===\n{}",
                self.port,
                self.log_path.display(),
                tail_file(&self.log_path, 8 * 1024)
            );
        }
        self.stop();
        if keep_dirs()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping git daemon dir {}", dir.keep().display());
        }
    }
}
