//! `baton serve`'s settings file (TOML): where it listens, how it reaches GitHub, and per
//! repository what starts a run, who may start one, and the run's flags.
//!
//! ```toml
//! listen = "0.0.0.0:8080"
//!
//! [github]
//! api_url = "https://api.github.com"
//! app_id = "123456"
//! private_key_file = "/etc/baton/app.pem"
//! webhook_secret_env = "BATON_WEBHOOK_SECRET"
//!
//! [[repos]]
//! name = "acme/*"
//! min_permission = "write"
//! submit = ["--provider", "anthropic", "--model", "claude-sonnet-4-5", "--verify", "cargo test"]
//! ```

use std::path::Path;
use std::time::Duration;

use baton_github::{App, Auth, GitHub, Permission};
use serde::Deserialize;

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServeSettings {
    /// Address to listen on (`--listen` overrides).
    #[serde(default = "default_listen")]
    pub(crate) listen: String,
    /// How to reach GitHub.
    pub(crate) github: GitHubAccess,
    /// Repositories served, first match wins; a repository no entry names is ignored.
    #[serde(default)]
    pub(crate) repos: Vec<RepoRule>,
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

/// `[github]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GitHubAccess {
    /// The REST API's base URL.
    #[serde(default = "default_api_url")]
    pub(crate) api_url: String,
    /// The GitHub App's id (its installation tokens read permissions and write comments).
    #[serde(default)]
    pub(crate) app_id: String,
    /// The app's private key (PEM)...
    #[serde(default)]
    pub(crate) private_key_file: String,
    /// ... or the variable holding it.
    #[serde(default)]
    pub(crate) private_key_env: String,
    /// Without an app: the variable holding a token (fine-grained or classic).
    #[serde(default)]
    pub(crate) token_env: String,
    /// The variable holding the webhook secret (required: unsigned deliveries are refused).
    #[serde(default = "default_secret_env")]
    pub(crate) webhook_secret_env: String,
}

fn default_api_url() -> String {
    "https://api.github.com".into()
}

fn default_secret_env() -> String {
    "BATON_WEBHOOK_SECRET".into()
}

/// Where a run started on a pull request delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum OnPullRequest {
    /// Commits pushed onto the pull request's head branch (fast-forward only).
    #[default]
    Push,
    /// A pull request from `baton/<run>` into the pull request's head branch.
    PullRequest,
}

/// `[[repos]]`: one repository pattern and its triggers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RepoRule {
    /// `owner/repo`, `owner/*` or `*` (case-insensitive).
    pub(crate) name: String,
    /// The label that starts a run on an issue.
    #[serde(default = "default_label")]
    pub(crate) label: String,
    /// The comment command: a comment that starts with it starts (or continues) the run of
    /// its issue or pull request, the rest of the comment being the task.
    #[serde(default = "default_command")]
    pub(crate) command: String,
    /// Also a comment that mentions this (e.g. `@baton-bot`), when set.
    #[serde(default)]
    pub(crate) mention: String,
    /// The least repository permission of a user whose label or comment starts a run (or
    /// whose `/approve` is taken): read, triage, write, maintain or admin.
    #[serde(default = "default_permission")]
    pub(crate) min_permission: String,
    /// Runs on a pull request: `push` onto its head branch, or `pull-request` into it.
    #[serde(default)]
    pub(crate) on_pull_request: OnPullRequest,
    /// How long a run waits for the next comment after an answer (e.g. `1h`, `2d`).
    #[serde(default = "default_idle", with = "humantime_serde_like")]
    pub(crate) idle_timeout: Duration,
    /// The run's `baton submit` flags (provider, model, policy, limits, task queue, ...).
    #[serde(default)]
    pub(crate) submit: Vec<String>,
}

fn default_label() -> String {
    "baton".into()
}

fn default_command() -> String {
    "/baton".into()
}

fn default_permission() -> String {
    "write".into()
}

fn default_idle() -> Duration {
    Duration::from_secs(3600)
}

/// `"1h"`-style durations in the file.
mod humantime_serde_like {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text)
            .map_err(|e| serde::de::Error::custom(format!("'{text}': {e}; e.g. 30m, 1h, 2d")))
    }
}

impl RepoRule {
    /// Whether this rule serves `full_name` (`owner/repo`).
    pub(crate) fn serves(&self, full_name: &str) -> bool {
        let pattern = self.name.to_ascii_lowercase();
        let name = full_name.to_ascii_lowercase();
        match pattern.split_once('/') {
            None => pattern == "*",
            Some((owner, "*")) => name.split_once('/').is_some_and(|(o, _)| o == owner),
            Some(_) => pattern == name,
        }
    }

    /// The least permission, parsed.
    pub(crate) fn min_permission(&self) -> Permission {
        Permission::parse(&self.min_permission).unwrap_or(Permission::Admin)
    }
}

impl ServeSettings {
    /// Reads and checks `path`: unknown keys, bad permissions and bad submit flags are refused
    /// with the file's name.
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let settings: ServeSettings =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for rule in &settings.repos {
            if Permission::parse(&rule.min_permission).is_none() {
                return Err(format!(
                    "{}: repos \"{}\": min_permission \"{}\" is not one of read, triage, \
                     write, maintain, admin",
                    path.display(),
                    rule.name,
                    rule.min_permission
                ));
            }
            if !rule.command.starts_with('/') || rule.command.contains(char::is_whitespace) {
                return Err(format!(
                    "{}: repos \"{}\": command \"{}\" must be one word starting with /",
                    path.display(),
                    rule.name,
                    rule.command
                ));
            }
        }
        Ok(settings)
    }

    /// The rule for `full_name`, if one serves it.
    pub(crate) fn rule_for(&self, full_name: &str) -> Option<&RepoRule> {
        self.repos.iter().find(|rule| rule.serves(full_name))
    }

    /// The webhook secret, from its variable.
    pub(crate) fn webhook_secret(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<u8>, String> {
        let var = &self.github.webhook_secret_env;
        env(var)
            .filter(|s| !s.is_empty())
            .map(String::into_bytes)
            .ok_or_else(|| {
                format!(
                    "the webhook secret is not set: put the secret configured in the GitHub \
                     App's (or repository's) webhook settings in {var}"
                )
            })
    }

    /// The GitHub client: the app's installation tokens, or a token.
    pub(crate) fn github(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<GitHub, String> {
        let access = &self.github;
        if !access.app_id.trim().is_empty() {
            let app = match (
                access.private_key_file.trim(),
                access.private_key_env.trim(),
            ) {
                (file, "") if !file.is_empty() => {
                    App::from_key_file(&access.app_id, Path::new(file), &access.api_url)
                }
                ("", var) if !var.is_empty() => {
                    let pem = env(var)
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| format!("[github] private_key_env {var} is not set"))?;
                    App::new(&access.app_id, &pem, &access.api_url)
                }
                _ => {
                    return Err(
                        "[github] app_id needs one of private_key_file or private_key_env".into(),
                    );
                }
            }
            .map_err(|e| format!("[github] the app's private key: {e}"))?;
            return Ok(GitHub::new(
                &access.api_url,
                Auth::App(std::sync::Arc::new(app)),
            ));
        }
        if access.token_env.is_empty() {
            return Err(
                "[github]: set app_id (with private_key_file) or token_env to reach GitHub".into(),
            );
        }
        let token = env(&access.token_env)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("[github] token_env {} is not set", access.token_env))?;
        Ok(GitHub::new(&access.api_url, Auth::Token(token)))
    }
}
