//! Repository environments: `.baton/environment.toml` read into an
//! [`EnvironmentSpec`] and checked, the same way for the CLI (`--environment FILE`, the
//! uploaded tree's file) and the worker (a git source's file, a worker's pin). Pure: the
//! callers read the files.
//!
//! ```toml
//! setup = ["npm ci"]                      # once per cache key, before the first model call
//! cache_key = ["package-lock.json"]       # files whose contents key the cache
//! maintenance = ["npm ci --prefer-offline"]  # on a cache hit from another commit
//! verify = ["npm test"]                   # the default --verify commands
//! setup_hosts = ["registry.npmjs.org"]    # network for setup and maintenance only
//! setup_secrets = ["NPM_TOKEN"]           # worker-side secrets for setup and maintenance
//! setup_timeout_seconds = 1800
//! ```
//!
//! `verify` may also be a table: `[verify]` with `commands = [...]` and `attempts = N`.

use baton_proto::EnvironmentSpec;
use serde::Deserialize;

/// Where a repository keeps its environment, relative to its root.
pub const ENVIRONMENT_FILE: &str = ".baton/environment.toml";
/// Seconds a setup or maintenance command may run when the file does not say.
pub const DEFAULT_SETUP_TIMEOUT_SECONDS: u32 = 1800;
/// Most commands in one list (setup, maintenance, verify).
const MAX_COMMANDS: usize = 32;
/// Most cache-key files, hosts or secrets.
const MAX_ENTRIES: usize = 64;
/// Longest command line, in bytes.
const MAX_COMMAND_BYTES: usize = 4096;
/// Largest environment file, in bytes.
pub const MAX_FILE_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    setup: Vec<String>,
    #[serde(default)]
    cache_key: Vec<String>,
    #[serde(default)]
    maintenance: Vec<String>,
    #[serde(default)]
    verify: Option<Verify>,
    #[serde(default)]
    setup_hosts: Vec<String>,
    #[serde(default)]
    setup_secrets: Vec<String>,
    #[serde(default)]
    setup_timeout_seconds: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Verify {
    Commands(Vec<String>),
    Table(VerifyTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyTable {
    #[serde(default)]
    commands: Vec<String>,
    #[serde(default)]
    attempts: Option<u32>,
}

/// Parses an environment file's `text`; `origin` says where it came from (errors name it).
pub fn parse(text: &str, origin: &str) -> Result<EnvironmentSpec, String> {
    if text.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{origin}: {} bytes, over {MAX_FILE_BYTES}; keep long scripts in the repository and \
             call them",
            text.len()
        ));
    }
    let file: File = toml::from_str(text).map_err(|e| {
        format!(
            "{origin} is not a valid environment file: {}; see \
             docs/src/guide/environments.md",
            e.message()
        )
    })?;
    let (verify, verify_attempts) = match file.verify {
        None => (Vec::new(), 0),
        Some(Verify::Commands(c)) => (c, 0),
        Some(Verify::Table(t)) => (t.commands, t.attempts.unwrap_or(0)),
    };
    let spec = EnvironmentSpec {
        setup: file.setup,
        cache_key: file.cache_key,
        maintenance: file.maintenance,
        verify,
        setup_hosts: file.setup_hosts,
        setup_secrets: file.setup_secrets,
        setup_timeout_seconds: file.setup_timeout_seconds.unwrap_or(0),
        origin: origin.to_owned(),
        verify_attempts,
    };
    validate(&spec)?;
    Ok(spec)
}

/// Checks an environment (as parsed, or as a spec carries it).
pub fn validate(env: &EnvironmentSpec) -> Result<(), String> {
    let origin = if env.origin.is_empty() {
        "the environment"
    } else {
        env.origin.as_str()
    };
    for (name, list) in [
        ("setup", &env.setup),
        ("maintenance", &env.maintenance),
        ("verify", &env.verify),
    ] {
        if list.len() > MAX_COMMANDS {
            return Err(format!(
                "{origin}: {name} has {} commands, over {MAX_COMMANDS}; put them in a script",
                list.len()
            ));
        }
        if let Some(i) = list.iter().position(|c| c.trim().is_empty()) {
            return Err(format!("{origin}: {name} command {} is empty", i + 1));
        }
        if list.iter().any(|c| c.len() > MAX_COMMAND_BYTES) {
            return Err(format!(
                "{origin}: a {name} command is over {MAX_COMMAND_BYTES} bytes; put it in a script"
            ));
        }
    }
    for (name, list) in [
        ("cache_key", &env.cache_key),
        ("setup_hosts", &env.setup_hosts),
        ("setup_secrets", &env.setup_secrets),
    ] {
        if list.len() > MAX_ENTRIES {
            return Err(format!(
                "{origin}: {name} has {} entries, over {MAX_ENTRIES}",
                list.len()
            ));
        }
    }
    if let Some(bad) = env.cache_key.iter().find(|p| !is_relative_path(p)) {
        return Err(format!(
            "{origin}: cache_key entry '{bad}' is not a path inside the repository (relative, \
             '/'-separated, without '.' or '..' components)"
        ));
    }
    if let Some(bad) = env.setup_secrets.iter().find(|s| !is_env_name(s)) {
        return Err(format!(
            "{origin}: setup_secrets entry '{bad}' is not an environment variable name \
             ([A-Za-z_][A-Za-z0-9_]*)"
        ));
    }
    if let Some(bad) = env.setup_hosts.iter().find(|h| h.trim().is_empty()) {
        return Err(format!("{origin}: setup_hosts has an empty entry '{bad}'"));
    }
    if env.verify_attempts > crate::machine::MAX_VERIFY_ATTEMPTS {
        return Err(format!(
            "{origin}: verify attempts {} is over {}",
            env.verify_attempts,
            crate::machine::MAX_VERIFY_ATTEMPTS
        ));
    }
    if !env.maintenance.is_empty() && env.setup.is_empty() {
        return Err(format!(
            "{origin}: maintenance runs on a cached setup, but there is no setup; move the \
             commands to setup"
        ));
    }
    if (!env.setup_hosts.is_empty() || !env.setup_secrets.is_empty()) && env.setup.is_empty() {
        return Err(format!(
            "{origin}: setup_hosts and setup_secrets are for setup commands, but there are none"
        ));
    }
    Ok(())
}

/// Whether the environment has anything to set up (setup commands).
pub fn needs_setup(env: &EnvironmentSpec) -> bool {
    !env.setup.is_empty()
}

fn is_relative_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_full_file_reads_into_the_spec() {
        let env = parse(
            "setup = [\"npm ci\"]\ncache_key = [\"package-lock.json\"]\n\
             maintenance = [\"npm ci --prefer-offline\"]\nverify = [\"npm test\"]\n\
             setup_hosts = [\"registry.npmjs.org\"]\nsetup_secrets = [\"NPM_TOKEN\"]\n\
             setup_timeout_seconds = 600\n",
            "the repository's .baton/environment.toml",
        )
        .unwrap();
        assert_eq!(env.setup, ["npm ci"]);
        assert_eq!(env.cache_key, ["package-lock.json"]);
        assert_eq!(env.verify, ["npm test"]);
        assert_eq!(env.setup_secrets, ["NPM_TOKEN"]);
        assert_eq!(env.setup_timeout_seconds, 600);
        assert_eq!(env.origin, "the repository's .baton/environment.toml");
        let table = parse("[verify]\ncommands = [\"cargo test\"]\nattempts = 3\n", "f").unwrap();
        assert_eq!(
            (table.verify.as_slice(), table.verify_attempts),
            (&["cargo test".to_owned()][..], 3)
        );
    }

    #[test]
    fn mistakes_are_refused_naming_the_file_and_the_fix() {
        for (text, said) in [
            ("setup = \"npm ci\"\n", "not a valid environment file"),
            ("setpu = [\"npm ci\"]\n", "unknown field `setpu`"),
            ("setup = [\"\"]\n", "setup command 1 is empty"),
            (
                "setup = [\"x\"]\ncache_key = [\"../lock\"]\n",
                "not a path inside",
            ),
            (
                "setup = [\"x\"]\ncache_key = [\"/etc/passwd\"]\n",
                "not a path inside",
            ),
            (
                "setup = [\"x\"]\nsetup_secrets = [\"NPM-TOKEN\"]\n",
                "not an environment variable",
            ),
            ("maintenance = [\"x\"]\n", "there is no setup"),
            ("setup_secrets = [\"A\"]\n", "there are none"),
            ("[verify]\nattempts = 99\n", "over 10"),
        ] {
            let e = parse(text, "env.toml").unwrap_err();
            assert!(e.contains(said), "{text}: {e}");
            assert!(e.starts_with("env.toml"), "{e}");
        }
    }
}
