//! The worker's `[mcp]` settings: the MCP servers this worker can start or reach, by name.
//! Secrets only by the name of the environment variable holding them, never their values.
//!
//! ```toml
//! [mcp]
//! idle_secs = 300                      # a pooled connection unused this long is closed
//!
//! [mcp.servers.fs]                     # stdio: a child process per worker
//! command = "node"
//! args = ["/opt/mcp/server-filesystem/dist/index.js", "/srv/shared"]
//! env = ["FS_TOKEN"]                   # names of worker variables passed through
//! cwd = "/srv"
//! startup_timeout_secs = 30
//!
//! [mcp.servers.ws]                     # stdio, one process per run: in its workspace+sandbox
//! command = "node"
//! args = ["/opt/mcp/server-filesystem/dist/index.js", "."]
//! sandbox = true
//!
//! [mcp.servers.tracker]                # streamable HTTP
//! url = "https://mcp.example.com/mcp"
//! bearer_token_env = "TRACKER_TOKEN"   # sent as `Authorization: Bearer <value>`
//! headers = { "X-Api-Key" = "TRACKER_API_KEY" }   # header -> variable name
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Variables a stdio server's environment keeps from the worker's besides the ones it names
/// (the rest of the worker's environment is cleared).
pub const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// Default of [`McpServerSettings::startup_timeout_secs`].
pub const DEFAULT_STARTUP_TIMEOUT_SECS: u64 = 30;

/// Default of [`McpSettings::idle_secs`].
pub const DEFAULT_IDLE_SECS: u64 = 300;

/// Headers the HTTP transport sets itself; a `headers` entry may not name them.
const RESERVED_HEADERS: [&str; 4] = ["accept", "mcp-session-id", "last-event-id", "content-type"];

/// `[mcp]` in the worker settings.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct McpSettings {
    /// A pooled connection nobody used for this many seconds is closed (its process stopped).
    pub idle_secs: u64,
    /// The servers, by the name runs use (`--mcp NAME`): `[mcp.servers.NAME]`.
    pub servers: BTreeMap<String, McpServerSettings>,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            idle_secs: DEFAULT_IDLE_SECS,
            servers: BTreeMap::new(),
        }
    }
}

/// `[mcp.servers.NAME]`: one server, either a stdio program (`command`) or a streamable HTTP
/// endpoint (`url`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerSettings {
    /// stdio: the program to start (looked up on `PATH`).
    pub command: Option<String>,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: names of the worker's environment variables passed to it; its environment is
    /// otherwise cleared except [`BASE_ENV`].
    pub env: Vec<String>,
    /// stdio: its working directory (default: the worker's).
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP: the endpoint (`http://` or `https://`).
    pub url: Option<String>,
    /// Streamable HTTP: name of the variable whose value is sent as `Authorization: Bearer`.
    pub bearer_token_env: Option<String>,
    /// Streamable HTTP: extra headers, header name -> name of the variable holding the value.
    pub headers: BTreeMap<String, String>,
    /// stdio: start the server once per run, in the run's workspace (its working directory,
    /// instead of `cwd`) and under the run's sandbox, like a built-in tool's process; the
    /// workspace is restored before each call and snapshotted after each mutating one.
    /// Default false: one process per worker, shared by all runs, outside any sandbox.
    pub sandbox: bool,
    /// Seconds the server may take to start and answer `initialize` (default 30).
    pub startup_timeout_secs: Option<u64>,
}

/// How a server is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio,
    /// Streamable HTTP.
    Http,
}

impl McpServerSettings {
    /// The transport (`command` set: stdio; else HTTP). Valid after [`McpSettings::check`].
    pub fn transport(&self) -> Transport {
        if self.command.is_some() {
            Transport::Stdio
        } else {
            Transport::Http
        }
    }

    /// The start-up (initialize) timeout.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(
            self.startup_timeout_secs
                .unwrap_or(DEFAULT_STARTUP_TIMEOUT_SECS)
                .max(1),
        )
    }

    /// What the server is, for messages: the command line or the URL (never a secret: the
    /// settings hold none).
    pub fn describe(&self) -> String {
        match (&self.command, &self.url) {
            (Some(command), _) => std::iter::once(command.as_str())
                .chain(self.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            (None, Some(url)) => url.clone(),
            (None, None) => String::new(),
        }
    }

    /// Names of the environment variables this server's settings refer to.
    pub fn env_names(&self) -> impl Iterator<Item = &str> {
        self.env
            .iter()
            .chain(self.bearer_token_env.iter())
            .chain(self.headers.values())
            .map(String::as_str)
    }

    fn check(&self, name: &str) -> Result<(), String> {
        let key = format!("mcp.servers.{name}");
        match (&self.command, &self.url) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(format!(
                    "{key}: set exactly one of `command` (a stdio server) or `url` (a streamable \
                     HTTP server)"
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{key}.command is empty; name the server's program"));
                }
                if self.bearer_token_env.is_some() || !self.headers.is_empty() {
                    return Err(format!(
                        "{key}: `bearer_token_env` and `headers` are for HTTP servers (`url`); \
                         pass a stdio server its secrets with `env`"
                    ));
                }
            }
            (None, Some(url)) => {
                let parsed = reqwest::Url::parse(url)
                    .map_err(|e| format!("{key}.url = {url:?} is not a URL: {e}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!(
                        "{key}.url = {url:?}: the scheme must be http or https (streamable HTTP)"
                    ));
                }
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(format!(
                        "{key}: `args`, `env` and `cwd` are for stdio servers (`command`)"
                    ));
                }
                for header in self.headers.keys() {
                    let lower = header.to_ascii_lowercase();
                    if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                        return Err(format!("{key}.headers: {header:?} is not a header name"));
                    }
                    if RESERVED_HEADERS.contains(&lower.as_str()) {
                        return Err(format!(
                            "{key}.headers: {header} is set by the MCP transport itself"
                        ));
                    }
                    if lower == "authorization" && self.bearer_token_env.is_some() {
                        return Err(format!(
                            "{key}: both `bearer_token_env` and headers.{header} set Authorization; \
                             keep one"
                        ));
                    }
                }
            }
        }
        for var in self.env_names() {
            let ok = !var.is_empty()
                && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !var.starts_with(|c: char| c.is_ascii_digit());
            if !ok {
                return Err(format!(
                    "{key}: {var:?} is not an environment variable name (the settings name \
                     variables, they never hold secrets themselves)"
                ));
            }
        }
        if self.startup_timeout_secs == Some(0) {
            return Err(format!("{key}.startup_timeout_secs must be at least 1"));
        }
        if self.sandbox && self.command.is_none() {
            return Err(format!(
                "{key}.sandbox = true is for stdio servers (`command`): an HTTP server runs \
                 elsewhere"
            ));
        }
        Ok(())
    }
}

impl McpSettings {
    /// Refuses settings the worker must not start with; the error names the key.
    pub fn check(&self) -> Result<(), String> {
        for (name, server) in &self.servers {
            baton_core::mcp::check_server_name(name)
                .map_err(|e| format!("mcp.servers.{name}: {e}"))?;
            server.check(name)?;
        }
        Ok(())
    }

    /// The idle timeout of pooled connections.
    pub fn idle(&self) -> Duration {
        Duration::from_secs(self.idle_secs.max(1))
    }

    /// `(server, variable)` for each variable the settings name that `lookup` does not have:
    /// the worker warns about them at start-up (by name only).
    pub fn unset_env(&self, lookup: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
        let mut unset = Vec::new();
        for (name, server) in &self.servers {
            for var in server.env_names() {
                if lookup(var).is_none_or(|v| v.is_empty()) {
                    unset.push((name.clone(), var.to_owned()));
                }
            }
        }
        unset
    }

    /// Names of every variable the settings name (they hold secrets: never in a built-in
    /// tool's environment).
    pub fn secret_env_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .servers
            .values()
            .flat_map(|s| s.env_names().map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings from JSON (the worker's tests read them from TOML).
    fn parse(json: &str) -> McpSettings {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn every_mistake_is_refused_naming_the_key() {
        let refused = |json: &str| parse(json).check().unwrap_err();
        assert!(
            refused(r#"{"servers": {"fs": {}}}"#)
                .starts_with("mcp.servers.fs: set exactly one of `command`"),
        );
        assert!(
            refused(r#"{"servers": {"fs": {"command": "x", "url": "http://h/mcp"}}}"#)
                .starts_with("mcp.servers.fs: set exactly one"),
        );
        assert!(
            refused(r#"{"servers": {"web": {"url": "ftp://h/mcp"}}}"#)
                .contains("scheme must be http or https"),
        );
        assert!(refused(r#"{"servers": {"a__b": {"command": "x"}}}"#).contains("a__b"));
        assert!(
            refused(r#"{"servers": {"fs": {"command": "x", "env": ["NOT A NAME"]}}}"#)
                .contains("not an environment variable name"),
        );
        assert!(
            refused(r#"{"servers": {"web": {"url": "http://h/", "headers": {"Accept": "X"}}}}"#)
                .contains("set by the MCP transport"),
        );
        assert!(
            refused(r#"{"servers": {"web": {"url": "http://h/", "sandbox": true}}}"#)
                .contains("sandbox = true is for stdio servers"),
        );
        parse(
            r#"{"servers": {"fs": {"command": "node", "args": ["a"], "env": ["T"]},
                "web": {"url": "https://h/mcp", "bearer_token_env": "TOK", "headers": {"X-Key": "K"}}}}"#,
        )
        .check()
        .unwrap();
    }

    #[test]
    fn unset_variables_are_reported_by_name() {
        let s = parse(
            r#"{"servers": {"web": {"url": "https://h/mcp", "bearer_token_env": "TOK", "headers": {"X-Key": "K"}}}}"#,
        );
        let unset = s.unset_env(|v| (v == "K").then(|| "value".to_owned()));
        assert_eq!(unset, [("web".to_owned(), "TOK".to_owned())]);
        assert_eq!(s.secret_env_names(), ["K", "TOK"]);
        assert_eq!(s.servers["web"].describe(), "https://h/mcp");
    }
}
