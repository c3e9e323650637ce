//! One `git` subprocess: a scrubbed environment (only `PATH`, a private `HOME`, no system or
//! global config, no prompts), a timeout, its process group killed on every way out, and a
//! token (when the URL's host has one) that reaches git only through a credential helper
//! reading a variable of the child's environment. Output put into errors has the token
//! scrubbed out.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::unistd::Pid;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::GitError;
use super::classify::{Failure, classify};
use super::settings::{GitSettings, plain_http, repo_path};
use crate::tools::shell::group::{GroupGuard, set_parent_death_signal};

/// `ls-remote` is cheap: bounded apart from fetches and pushes (by the smaller of the two).
const LS_REMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Answers `get` for the credential's host and protocol only (an `https://` remote that
/// redirects to `http://` gets nothing), from the child's environment.
const HELPER: &str = "!f() { test \"$1\" = get || exit 0; h=; p=; while read -r l; do \
case \"$l\" in host=*) h=\"${l#host=}\";; protocol=*) p=\"${l#protocol=}\";; esac; done; \
h=$(printf %s \"${h%%:*}\" | tr A-Z a-z); test \"$h\" = \"$BATON_GIT_HOST\" || exit 0; \
test \"$p\" = \"$BATON_GIT_PROTOCOL\" || exit 0; \
echo \"username=$BATON_GIT_USERNAME\"; echo \"password=$BATON_GIT_PASSWORD\"; }; f";

/// The token for the URL's host, looked up on the worker.
struct Token {
    host: String,
    /// `https`, or `http` for a loopback host whose credential allows plain HTTP.
    protocol: &'static str,
    username: String,
    value: String,
    env: String,
}

/// Runs git against one remote URL.
pub(crate) struct Git {
    url: String,
    home: TempDir,
    token: Option<Token>,
    /// Why the host's token was not used for this repository (its credential's `repos`).
    unscoped: Option<String>,
    timeout: Duration,
}

/// What a finished git process left.
pub(crate) struct Output {
    pub(crate) success: bool,
    pub(crate) stdout: String,
    /// Token scrubbed.
    pub(crate) stderr: String,
}

impl Git {
    /// Looks up the credential for `url`'s host (`env` reads the worker's environment).
    pub(crate) fn for_url(
        settings: &GitSettings,
        url: &str,
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Self, GitError> {
        if url.trim().is_empty() {
            return Err(GitError::Unavailable(
                "the git URL is empty: give the repository's clone URL".into(),
            ));
        }
        if url.starts_with('-') {
            return Err(GitError::Unavailable(format!(
                "'{url}' is not a git URL: give the repository's clone URL"
            )));
        }
        if reqwest::Url::parse(url).is_ok_and(|parsed| parsed.password().is_some()) {
            return Err(GitError::Unavailable(
                "the git URL carries a password: give it without, and put the token in an \
                 environment variable named by the worker's [git.credentials.\"<host>\"] \
                 token_env"
                    .into(),
            ));
        }
        let mut unscoped = None;
        let token = match settings.credential_for(url) {
            None => None,
            Some((key, credential)) if !credential.covers(&repo_path(url)) => {
                unscoped = Some(format!(
                    "no token was sent: the worker's [git.credentials.\"{key}\"] repos ({}) \
                     does not include {}; add it there if that token may be used for it",
                    credential.repos.join(", "),
                    repo_path(url)
                ));
                None
            }
            Some((key, credential)) => {
                let protocol = match plain_http(url) {
                    None => "https",
                    Some(true) if credential.allow_plain_http_on_loopback => "http",
                    Some(loopback) => {
                        let opt_in = if loopback {
                            format!(
                                ", or, for a git server on the worker's own loopback, set \
                                 allow_plain_http_on_loopback = true in the worker's \
                                 [git.credentials.\"{key}\"]"
                            )
                        } else {
                            String::new()
                        };
                        return Err(GitError::Unavailable(format!(
                            "refusing to send the git token for {key} over plain http:// \
                             ({url}): anyone on the way could read it; use an https:// \
                             URL{opt_in}"
                        )));
                    }
                };
                let (var, label) = if credential.github_app {
                    (
                        credential.token_var(),
                        "the GitHub App's installation token ([git.github] app_id)".to_owned(),
                    )
                } else {
                    (credential.token_var(), credential.token_env.clone())
                };
                let value = env(var).filter(|value| !value.is_empty()).ok_or_else(|| {
                    GitError::Unavailable(if credential.github_app {
                        format!(
                            "git credentials for {key}: github_app = true, but the worker has \
                             no GitHub App ([git.github] app_id and its private key)"
                        )
                    } else if credential.token_env.is_empty() {
                        format!(
                            "git credentials for {key}: set token_env (the variable holding \
                             the token) or github_app = true"
                        )
                    } else {
                        format!(
                            "git credentials for {key}: environment variable {} is not set on \
                             the worker",
                            credential.token_env
                        )
                    })
                })?;
                let host = key.split(':').next().unwrap_or(&key).to_owned();
                Some(Token {
                    host,
                    protocol,
                    username: credential.username.clone(),
                    value,
                    env: label,
                })
            }
        };
        let home = tempfile::Builder::new()
            .prefix("baton-git-home-")
            .tempdir()
            .map_err(|e| GitError::Transient(format!("cannot make a temp dir for git: {e}")))?;
        Ok(Self {
            url: url.to_owned(),
            home,
            token,
            unscoped,
            timeout: Duration::from_secs(settings.timeout_seconds.max(1)),
        })
    }

    /// `git ls-remote --symref <url> <patterns>`, with the shorter timeout.
    pub(crate) fn ls_remote<'a>(&'a self, dir: Option<&'a Path>, patterns: &[&str]) -> Call<'a> {
        let mut args = vec!["ls-remote", "--symref", &self.url];
        args.extend_from_slice(patterns);
        self.call(dir, &args)
            .timeout(self.timeout.min(LS_REMOTE_TIMEOUT))
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// `git <args>` in `dir` (or the private `HOME`), with the fetch/push timeout.
    pub(crate) fn call<'a>(&'a self, dir: Option<&'a Path>, args: &[&str]) -> Call<'a> {
        Call {
            git: self,
            dir,
            args: args.iter().map(OsString::from).collect(),
            envs: Vec::new(),
            stdin: None,
            timeout: self.timeout,
        }
    }

    /// Removes the token from text that may be shown.
    pub(crate) fn scrub(&self, text: &str) -> String {
        match &self.token {
            Some(token) => text.replace(&token.value, "***"),
            None => text.to_owned(),
        }
    }

    /// Classifies a failed `action` from its (scrubbed) stderr.
    pub(crate) fn failure(&self, action: &str, stderr: &str) -> GitError {
        classify(Failure {
            action,
            url: &self.url,
            stderr,
            token_env: self.token.as_ref().map(|token| token.env.as_str()),
            unscoped: self.unscoped.as_deref(),
        })
    }
}

/// One git invocation being set up.
pub(crate) struct Call<'a> {
    git: &'a Git,
    dir: Option<&'a Path>,
    args: Vec<OsString>,
    envs: Vec<(&'static str, OsString)>,
    stdin: Option<&'a [u8]>,
    timeout: Duration,
}

impl<'a> Call<'a> {
    pub(crate) fn env(mut self, key: &'static str, value: impl Into<OsString>) -> Self {
        self.envs.push((key, value.into()));
        self
    }

    pub(crate) fn stdin(mut self, input: &'a [u8]) -> Self {
        self.stdin = Some(input);
        self
    }

    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs it; `Err` only when git could not run or ran out of time.
    pub(crate) async fn output(self) -> Result<Output, GitError> {
        let git = self.git;
        let action = self.action();
        let mut command = Command::new("git");
        command
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            )
            .env("HOME", git.home.path())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
            .env("LANG", "C")
            .env("LC_ALL", "C")
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // Not the worker's own directory: a repository there would lend git its config.
        command.current_dir(self.dir.unwrap_or(git.home.path()));
        if let Some(token) = &git.token {
            command
                .env("BATON_GIT_HOST", &token.host)
                .env("BATON_GIT_PROTOCOL", token.protocol)
                .env("BATON_GIT_USERNAME", &token.username)
                .env("BATON_GIT_PASSWORD", &token.value)
                .args(["-c", "credential.helper=", "-c"])
                .arg(format!("credential.helper={HELPER}"));
        }
        command.args(&self.args);
        set_parent_death_signal(&mut command);

        let mut child = command
            .spawn()
            .map_err(|e| GitError::Transient(format!("cannot start git ({action}): {e}")))?;
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| GitError::Transient(format!("git ({action}) has no process id")))?;
        // From here on, returning, timing out or being dropped kills the whole group.
        let mut group = GroupGuard::new(pgid);
        let input = child.stdin.take();
        let stdin = self.stdin;
        let feed = async move {
            if let (Some(mut pipe), Some(bytes)) = (input, stdin) {
                // git may stop reading early (a patch it rejects); its exit says why.
                let _ = pipe.write_all(bytes).await;
            }
        };
        let finished = tokio::time::timeout(self.timeout, async {
            let ((), output) = tokio::join!(feed, child.wait_with_output());
            output
        })
        .await;
        let output = match finished {
            Err(_) => {
                return Err(GitError::Transient(format!(
                    "git {action} {} timed out after {} s and was stopped (a slow or stuck \
                     server; raise [git] timeout_seconds on the worker for big repositories)",
                    git.url,
                    self.timeout.as_secs()
                )));
            }
            Ok(output) => output
                .map_err(|e| GitError::Transient(format!("git ({action}) failed to run: {e}")))?,
        };
        group.disarm();
        Ok(Output {
            success: output.status.success(),
            stdout: git.scrub(&String::from_utf8_lossy(&output.stdout)),
            stderr: git.scrub(&String::from_utf8_lossy(&output.stderr)),
        })
    }

    /// Runs it and returns its stdout; a failure is classified from its stderr.
    pub(crate) async fn ok(self) -> Result<String, GitError> {
        let git = self.git;
        let action = self.action();
        let output = self.output().await?;
        if output.success {
            Ok(output.stdout)
        } else {
            Err(git.failure(&action, &output.stderr))
        }
    }

    fn action(&self) -> String {
        self.args
            .first()
            .map(|arg| arg.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}
