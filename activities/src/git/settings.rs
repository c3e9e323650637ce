//! The worker's `[git]` settings: commit identity, per-host credentials (by the name of the
//! environment variable holding the token, never the token), the GitHub API and timeouts.

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
        }
    }
}

/// How to authenticate to one host over HTTP(S).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GitCredential {
    /// Name of the worker's environment variable that holds the token.
    pub token_env: String,
    /// User name sent with the token.
    #[serde(default = "default_username")]
    pub username: String,
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
    /// Name of the worker's environment variable that holds the API token.
    pub token_env: String,
}

impl Default for GitHubSettings {
    fn default() -> Self {
        Self {
            api_url: "https://api.github.com".into(),
            token_env: "GITHUB_TOKEN".into(),
        }
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
                    username: default_username(),
                },
            );
        }
        settings
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
