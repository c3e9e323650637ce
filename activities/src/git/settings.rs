//! The worker's `[git]` settings: commit identity, per-host credentials (by the name of the
//! environment variable holding the token, never the token; scoped to repositories, never over
//! plain HTTP but to loopback when allowed), protected branches, the GitHub API and timeouts.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `[git]` in the worker settings.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct GitSettings {
    /// Author and committer name of delivered commits.
    pub author_name: String,
    /// Author and committer email of delivered commits.
    pub author_email: String,
    /// Credentials by host (`host:port` or `host` of the URL), e.g.
    /// `[git.credentials."github.com"]`.
    pub credentials: BTreeMap<String, GitCredential>,
    /// `[git.github]`: the REST API for pull requests.
    pub github: GitHubSettings,
    /// Longest a fetch or push may take, in seconds (`ls-remote` is bounded by 30 s).
    pub timeout_seconds: u64,
    /// Allow `file://` sources: repositories on the worker's own disk (default false: a
    /// submitter could otherwise clone whatever repository the worker can read).
    pub allow_file_urls: bool,
    /// More branch names (or patterns: `*` within a path segment, `**` across them, e.g.
    /// `"release/*"`) no run may deliver to, besides `main`, `master`, the run's source
    /// branch and its base branch.
    pub protected_branches: Vec<String>,
    /// Let runs deliver to protected branches (default false: a submitter could otherwise
    /// push straight to `main` with the worker's token, and trigger its CI before any review).
    pub deliver_to_protected_branches: bool,
}

impl Default for GitSettings {
    fn default() -> Self {
        Self {
            author_name: "baton".into(),
            author_email: "baton@localhost".into(),
            credentials: BTreeMap::new(),
            github: GitHubSettings::default(),
            timeout_seconds: 600,
            allow_file_urls: false,
            protected_branches: Vec::new(),
            deliver_to_protected_branches: false,
        }
    }
}

/// How to authenticate to one host over HTTP(S).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GitCredential {
    /// Name of the worker's environment variable that holds the token ("" with
    /// `github_app`).
    #[serde(default)]
    pub token_env: String,
    /// Use the GitHub App of `[git.github]` instead: an installation token made for the
    /// repository at hand (pushes then trigger CI, and commits show the app's bot).
    #[serde(default)]
    pub github_app: bool,
    /// User name sent with the token.
    #[serde(default = "default_username")]
    pub username: String,
    /// The repositories (URL paths without `.git`, e.g. `"acme/*"`: `*` within a path
    /// segment, `**` across them; compared case-insensitively) the token is used for; empty =
    /// every repository of the host. Other repositories of the host are reached without it.
    #[serde(default)]
    pub repos: Vec<String>,
    /// Send the token over plain `http://` to this host when it is a loopback address
    /// (`127.0.0.0/8`, `::1`, `localhost`): a git server on the worker's own host. Never for
    /// other hosts: a plain-HTTP token is readable by anyone on the way.
    #[serde(default)]
    pub allow_plain_http_on_loopback: bool,
}

fn default_username() -> String {
    "x-access-token".into()
}

/// `[git.github]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct GitHubSettings {
    /// Base URL of the REST API.
    pub api_url: String,
    /// Name of the worker's environment variable that holds the API token (not used when
    /// `app_id` is set).
    pub token_env: String,
    /// A GitHub App's id: pull requests are opened with the app's installation token for the
    /// repository (and credentials with `github_app = true` push with it).
    pub app_id: String,
    /// The app's private key (PEM, as GitHub downloads it), a file on the worker...
    pub private_key_file: String,
    /// ... or the name of an environment variable holding it.
    pub private_key_env: String,
}

impl Default for GitHubSettings {
    fn default() -> Self {
        Self {
            api_url: "https://api.github.com".into(),
            token_env: "GITHUB_TOKEN".into(),
            app_id: String::new(),
            private_key_file: String::new(),
            private_key_env: String::new(),
        }
    }
}

/// The name under which an app's installation token is looked up where a credential's token
/// is: no environment variable can have it (it holds a NUL).
pub(crate) const APP_TOKEN_VAR: &str = "\0github-app-installation-token";

impl GitHubSettings {
    /// Whether a GitHub App is configured.
    pub fn uses_app(&self) -> bool {
        !self.app_id.trim().is_empty()
    }

    /// Where the API token is looked up: the app's installation token, else `token_env`.
    pub(crate) fn token_var(&self) -> &str {
        if self.uses_app() {
            APP_TOKEN_VAR
        } else {
            &self.token_env
        }
    }

    /// The REST client runs report progress with: the app's installation tokens when there is
    /// an app, else the token in `token_env` when set; `None` without either.
    pub fn client(
        &self,
        app: Option<std::sync::Arc<baton_github::App>>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<baton_github::GitHub> {
        let auth = match app {
            Some(app) => baton_github::Auth::App(app),
            None => baton_github::Auth::Token(env(&self.token_env).filter(|t| !t.is_empty())?),
        };
        Some(baton_github::GitHub::new(&self.api_url, auth))
    }

    /// The configured GitHub App (`None` without `app_id`), its key read now: a worker with a
    /// key it cannot use refuses to start.
    pub fn app(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<baton_github::App>, String> {
        if !self.uses_app() {
            return Ok(None);
        }
        let app = match (self.private_key_file.trim(), self.private_key_env.trim()) {
            ("", "") => {
                return Err(format!(
                    "[git.github] app_id = \"{}\" needs the app's private key: set \
                     private_key_file (a PEM file) or private_key_env (a variable holding it)",
                    self.app_id
                ));
            }
            (file, "") => baton_github::App::from_key_file(
                &self.app_id,
                std::path::Path::new(file),
                &self.api_url,
            ),
            ("", var) => {
                let pem = env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
                    format!(
                        "[git.github] private_key_env = \"{var}\": that variable is not set on \
                         the worker"
                    )
                })?;
                baton_github::App::new(&self.app_id, &pem, &self.api_url)
            }
            _ => {
                return Err(
                    "[git.github]: set private_key_file or private_key_env, not both".into(),
                );
            }
        };
        app.map(Some)
            .map_err(|e| format!("[git.github] the GitHub App's private key: {e}"))
    }
}

impl GitSettings {
    /// The credential for `url`'s host: `host:port` first, then `host`. `None` for URLs
    /// without a host (`file://`, local paths) or hosts without an entry.
    pub(crate) fn credential_for(&self, url: &str) -> Option<(String, &GitCredential)> {
        let (host, port) = host_of(url)?;
        if let Some(port) = port {
            let key = format!("{host}:{port}");
            if let Some(credential) = self.credentials.get(&key) {
                return Some((key, credential));
            }
        }
        self.credentials
            .get(&host)
            .map(|credential| (host.clone(), credential))
    }
}

impl GitCredential {
    /// Where the token is looked up: the app's installation token, or `token_env`.
    pub(crate) fn token_var(&self) -> &str {
        if self.github_app {
            APP_TOKEN_VAR
        } else {
            &self.token_env
        }
    }

    /// Whether the token may be used for `repo` (a URL path as [`repo_path`] gives it).
    pub(crate) fn covers(&self, repo: &str) -> bool {
        self.repos.is_empty()
            || self
                .repos
                .iter()
                .any(|pattern| glob(pattern.to_ascii_lowercase().as_bytes(), repo.as_bytes()))
    }
}

impl GitSettings {
    /// Why `branch` is one runs may not deliver to (`source_ref` = the run's `--ref`, `base` =
    /// its base branch), in words; `None` when it is not protected or the settings allow it.
    pub(crate) fn protected_branch(
        &self,
        branch: &str,
        source_ref: &str,
        base: &str,
        onto_source: bool,
    ) -> Option<String> {
        if self.deliver_to_protected_branches {
            return None;
        }
        let name = branch.to_ascii_lowercase();
        let same = |other: &str| {
            let other = other.trim();
            let other = other.strip_prefix("refs/heads/").unwrap_or(other);
            !other.is_empty() && other.to_ascii_lowercase() == name
        };
        if name == "main" || name == "master" {
            Some("main and master always are".to_owned())
        } else if same(source_ref) && !onto_source {
            Some("it is the run's source ref".to_owned())
        } else if same(base) && !(onto_source && same(source_ref)) {
            Some("it is the run's base branch".to_owned())
        } else {
            self.protected_branches
                .iter()
                .find(|pattern| glob(pattern.to_ascii_lowercase().as_bytes(), name.as_bytes()))
                .map(|pattern| {
                    format!("it matches the worker's [git] protected_branches ({pattern})")
                })
        }
    }
}

/// Whether `text` matches `pattern`: `**` matches anything, `*` anything but `/`, every other
/// byte itself.
pub(crate) fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern {
        [] => text.is_empty(),
        [b'*', b'*', rest @ ..] => (0..=text.len()).any(|at| glob(rest, &text[at..])),
        [b'*', rest @ ..] => (0..=text.len())
            .take_while(|&at| at == 0 || text[at - 1] != b'/')
            .any(|at| glob(rest, &text[at..])),
        [byte, rest @ ..] => text.first() == Some(byte) && glob(rest, &text[1..]),
    }
}

/// The repository a URL names, as credentials' `repos` patterns match it: its path without
/// leading or trailing `/` and `.git`, lowercase (`https://h/Acme/Tool.git` -> `acme/tool`,
/// `git@h:acme/tool.git` -> `acme/tool`).
pub(crate) fn repo_path(url: &str) -> String {
    let path = match reqwest::Url::parse(url) {
        Ok(parsed) if parsed.scheme().len() > 1 => parsed.path().to_owned(),
        _ => url
            .split_once(':')
            .map_or(String::new(), |(_, path)| path.to_owned()),
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    path.trim_end_matches('/').to_ascii_lowercase()
}

/// Whether `url` is plain `http://`, and if so whether its host is loopback.
pub(crate) fn plain_http(url: &str) -> Option<bool> {
    let parsed = reqwest::Url::parse(url).ok()?;
    if parsed.scheme() != "http" {
        return None;
    }
    let host = parsed.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    Some(match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    })
}

/// Host and explicit port of a URL (`scheme://[user@]host[:port]/..` or scp-like
/// `user@host:path`).
fn host_of(url: &str) -> Option<(String, Option<u16>)> {
    if let Ok(parsed) = reqwest::Url::parse(url) {
        if parsed.scheme() == "file" {
            return None;
        }
        // Single-letter "schemes" are scp-like `host:path` misread, handled below.
        if parsed.scheme().len() > 1 {
            let host = parsed.host_str().filter(|host| !host.is_empty())?;
            return Some((host.to_ascii_lowercase(), parsed.port()));
        }
    }
    let (before, _) = url.split_once(':')?;
    if before.contains('/') {
        return None;
    }
    let host = before.rsplit('@').next()?;
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(keys: &[&str]) -> GitSettings {
        let mut settings = GitSettings::default();
        for key in keys {
            settings.credentials.insert(
                (*key).into(),
                GitCredential {
                    token_env: format!("TOKEN_{}", key.len()),
                    github_app: false,
                    username: default_username(),
                    repos: Vec::new(),
                    allow_plain_http_on_loopback: false,
                },
            );
        }
        settings
    }

    #[test]
    fn onto_source_allows_the_source_branch_and_nothing_more() {
        let settings = GitSettings {
            protected_branches: vec!["release/*".into()],
            ..GitSettings::default()
        };
        let protected = |branch: &str, onto: bool| {
            settings
                .protected_branch(branch, "feature/x", "feature/x", onto)
                .is_some()
        };
        assert!(protected("feature/x", false), "the source ref is protected");
        assert!(!protected("feature/x", true), "unless onto_source");
        assert!(protected("main", true));
        assert!(protected("release/1", true));
        assert!(
            settings
                .protected_branch("dev", "feature/x", "dev", true)
                .is_some(),
            "a base branch that is not the source stays protected"
        );
    }

    #[test]
    fn host_and_port_first_then_host() {
        let settings = with(&["git.example:8443", "git.example"]);
        let found = |url: &str| settings.credential_for(url).map(|(key, _)| key);
        assert_eq!(
            found("https://git.example:8443/a/b.git").as_deref(),
            Some("git.example:8443")
        );
        assert_eq!(
            found("https://GIT.example/a/b.git").as_deref(),
            Some("git.example")
        );
        assert_eq!(
            found("http://git.example:9000/a/b").as_deref(),
            Some("git.example")
        );
        assert_eq!(
            found("git@git.example:a/b.git").as_deref(),
            Some("git.example")
        );
        assert_eq!(found("file:///srv/git.example/a.git"), None);
        assert_eq!(found("/srv/a.git"), None);
        assert_eq!(found("https://other.example/a.git"), None);
    }

    #[test]
    fn repositories_and_patterns() {
        assert_eq!(repo_path("https://h.example/Acme/Tool.git"), "acme/tool");
        assert_eq!(repo_path("https://h.example/acme/tool/"), "acme/tool");
        assert_eq!(repo_path("git@h.example:acme/tool.git"), "acme/tool");
        assert_eq!(repo_path("ssh://git@h.example:22/g/sub/r.git"), "g/sub/r");
        for (pattern, text, matches) in [
            ("acme/*", "acme/tool", true),
            ("acme/*", "acme/sub/tool", false),
            ("acme/*", "acmex/tool", false),
            ("acme/**", "acme/sub/tool", true),
            ("*/tool", "x/tool", true),
            ("acme/tool", "acme/tool", true),
            ("acme/tool", "acme/tools", false),
            ("release/*", "release/1.0", true),
        ] {
            assert_eq!(
                glob(pattern.as_bytes(), text.as_bytes()),
                matches,
                "{pattern} {text}"
            );
        }
        assert_eq!(plain_http("http://127.0.0.1:8/a"), Some(true));
        assert_eq!(plain_http("http://[::1]:8/a"), Some(true));
        assert_eq!(plain_http("http://LOCALHOST/a"), Some(true));
        assert_eq!(plain_http("http://127.0.0.1.nip.io/a"), Some(false));
        assert_eq!(plain_http("http://git.example/a"), Some(false));
        assert_eq!(plain_http("https://git.example/a"), None);
        assert_eq!(plain_http("git@git.example:a"), None);
    }

    #[test]
    fn defaults_and_toml_shape() {
        let settings: GitSettings = serde_json::from_value(serde_json::json!({
            "credentials": { "github.com": { "token_env": "GH_PUSH" } },
            "github": { "api_url": "http://127.0.0.1:1" },
        }))
        .unwrap();
        assert_eq!(settings.author_name, "baton");
        assert_eq!(settings.timeout_seconds, 600);
        assert_eq!(settings.github.token_env, "GITHUB_TOKEN");
        assert_eq!(
            settings.credentials["github.com"].username,
            "x-access-token"
        );
        assert!(serde_json::from_value::<GitSettings>(serde_json::json!({ "tokens": 1 })).is_err());
    }
}
