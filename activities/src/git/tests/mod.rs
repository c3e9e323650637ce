//! Tests of `git/` against real git: an origin repository (bare, served over `file://` and by
//! a `git daemon` on loopback) made by the test, and a recording stand-in of GitHub's pulls API.

mod clone;
mod credentials;
mod deliver;
mod github;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::GitSettings;

/// `git <args>` in `dir` for test set-up and checks, with a fixed identity; panics on failure.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@localhost"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Whether `git <args>` in `dir` succeeds.
pub(super) fn git_ok(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap()
        .status
        .success()
}

/// A bare repository `acme/tool.git` with history:
/// `first` (tag `v1`, annotated) <- `second` (`main`), and `dev` branching off `first`.
pub(super) struct Origin {
    pub(super) root: TempDir,
    pub(super) first: String,
    pub(super) second: String,
    pub(super) dev: String,
}

impl Origin {
    pub(super) fn new() -> Self {
        let root = TempDir::new().unwrap();
        let work = root.path().join("work");
        std::fs::create_dir(&work).unwrap();
        git(&work, &["init", "-q"]);
        std::fs::write(work.join("a.txt"), "one\n").unwrap();
        std::fs::write(work.join("gone.txt"), "to delete\n").unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-qm", "first"]);
        let first = git(&work, &["rev-parse", "HEAD"]);
        git(&work, &["tag", "-a", "v1", "-m", "release 1"]);
        std::fs::write(work.join("a.txt"), "one\ntwo\n").unwrap();
        git(&work, &["commit", "-qam", "second"]);
        let second = git(&work, &["rev-parse", "HEAD"]);
        git(&work, &["checkout", "-q", "-b", "dev", &first]);
        std::fs::write(work.join("dev.txt"), "dev\n").unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-qm", "dev work"]);
        let dev = git(&work, &["rev-parse", "HEAD"]);
        git(&work, &["checkout", "-q", "main"]);
        let bare = root.path().join("acme").join("tool.git");
        std::fs::create_dir_all(&bare).unwrap();
        git(&bare, &["init", "-q", "--bare"]);
        git(
            &work,
            &["push", "-q", bare.to_str().unwrap(), "main", "dev", "v1"],
        );
        Self {
            root,
            first,
            second,
            dev,
        }
    }

    pub(super) fn bare(&self) -> PathBuf {
        self.root.path().join("acme").join("tool.git")
    }

    pub(super) fn url(&self) -> String {
        format!("file://{}", self.bare().display())
    }

    /// A git-style patch against `first`: `a.txt` changed, `gone.txt` deleted, a binary file
    /// added.
    pub(super) fn patch(&self) -> Vec<u8> {
        let work = self.root.path().join("patch-work");
        if !work.exists() {
            git(
                self.root.path(),
                &["clone", "-q", &self.url(), work.to_str().unwrap()],
            );
        }
        git(&work, &["checkout", "-q", "--detach", &self.first]);
        std::fs::write(work.join("a.txt"), "one\nfixed\n").unwrap();
        std::fs::remove_file(work.join("gone.txt")).unwrap();
        std::fs::write(work.join("blob.bin"), [0u8, 159, 146, 150, 0, 1, 2]).unwrap();
        git(&work, &["add", "-A"]);
        let patch = git(&work, &["diff", "--cached", "--binary", &self.first]);
        git(&work, &["reset", "-q", "--hard"]);
        format!("{patch}\n").into_bytes()
    }

    /// Makes `hook` (a shell script body) the bare repository's hook `name`.
    pub(super) fn hook(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.bare().join("hooks").join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A `git daemon` serving `base` on a loopback port, push enabled; stopped on drop. `git
/// daemon` runs `git-daemon` as a child, so it gets a process group of its own and the whole
/// group is stopped (killing only the `git` wrapper's PID left `git-daemon` running).
pub(super) struct Daemon {
    child: Child,
    pub(super) port: u16,
}

impl Daemon {
    pub(super) fn start(base: &Path) -> Self {
        // A port found free may be taken by another process before the daemon binds it (tests
        // of other binaries run at the same time): then the daemon exits, and a connect that
        // succeeded reached someone else. Try again on another port.
        for _ in 0..5 {
            if let Some(daemon) = Self::try_start(base) {
                return daemon;
            }
        }
        panic!("git daemon did not start");
    }

    fn try_start(base: &Path) -> Option<Self> {
        let port = free_port();
        let child = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--enable=receive-pack",
                "--export-all",
                "--informative-errors",
                &format!("--base-path={}", base.display()),
                "--listen=127.0.0.1",
                &format!("--port={port}"),
            ])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut daemon = Self { child, port };
        // Ours once the daemon itself listens on the port (a connect could reach whoever took
        // the port first); a daemon that lost the port exits. `git daemon` runs `git-daemon`
        // as its child, in the process group it leads.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !group_listens_on(daemon.child.id(), port) {
            assert!(Instant::now() < deadline, "git daemon did not start");
            if daemon.child.try_wait().unwrap().is_some() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(daemon)
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("git://127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (just now).
pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(super) fn no_env(_: &str) -> Option<String> {
    None
}

pub(super) fn settings() -> GitSettings {
    GitSettings::default()
}

/// The activities that call these run them on a multi-threaded runtime.
#[test]
fn the_futures_are_send() {
    fn send<T: Send>(_: T) {}
    let settings = settings();
    let dir = std::env::temp_dir();
    send(super::clone_into(
        &settings,
        &baton_proto::GitSource::default(),
        &dir,
        &no_env,
    ));
    send(super::deliver(
        &settings,
        &baton_proto::DeliverRequest::default(),
        b"",
        "run",
        "",
        &dir.join("never-made"),
        &no_env,
    ));
}

/// Whether a process of process group `pgid` holds a socket listening on 127.0.0.1:`port`
/// (`/proc/net/tcp`, state `0A`, matched to the socket inodes among its file descriptors).
fn group_listens_on(pgid: u32, port: u16) -> bool {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let listening: Vec<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (_, local_port) = fields.get(1)?.split_once(':')?;
            (u16::from_str_radix(local_port, 16).ok()? == port && fields.get(3)? == &"0A")
                .then(|| format!("socket:[{}]", fields.get(9).copied().unwrap_or_default()))
        })
        .collect();
    if listening.is_empty() {
        return false;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|proc| {
        crate::tools::orphans::process_group(&proc.path()) == Some(pgid)
            && std::fs::read_dir(proc.path().join("fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|target| {
                        listening.iter().any(|l| target.as_os_str() == l.as_str())
                    })
                })
            })
    })
}
