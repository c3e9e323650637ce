//! Connecting to Temporal the way the `temporal` CLI does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
//! profiles), with errors that say what to do; with `BATON_CODEC_KEYS` set, payloads are
//! encrypted and decrypted with baton's codec (docs/src/security/codec.md).

use std::time::Duration;

use baton_codec::{BatonCodec, Keyring};
use baton_workflows::AgentRun;
use temporalio_client::{
    Client, ClientOptions, Connection, WorkflowHandle, envconfig::LoadClientConfigProfileOptions,
    errors::WorkflowInteractionError,
};

use crate::exit::Exit;

/// How long to try to reach the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected client.
pub(crate) async fn connect() -> Result<Client, Exit> {
    connect_as(None).await
}

/// A connected client whose Temporal identity (what approval policies match) is `identity`,
/// else this process's ([`client_identity`]). `baton serve` decides as `github:<login>` once
/// GitHub said who commented.
pub(crate) async fn connect_as(identity: Option<String>) -> Result<Client, Exit> {
    let (mut conn_opts, mut client_opts) =
        ClientOptions::load_from_config(LoadClientConfigProfileOptions::default())
            .map_err(|e| Exit::usage(format!("invalid Temporal connection settings: {e}")))?;
    client_opts.data_converter = match codec_keys()? {
        Some(keys) => baton_codec::data_converter(BatonCodec::new(keys)),
        None => baton_codec::plain_converter(),
    };
    let address = conn_opts.target.to_string();
    let env = |k: &str| std::env::var(k).ok();
    conn_opts.identity =
        identity.unwrap_or_else(|| client_identity(&env, &hostname(), &local_user(&env)));
    conn_opts.connect_timeout = Some(CONNECT_TIMEOUT);
    let unreachable = |detail: String| {
        Exit::infra(format!(
            "cannot reach Temporal at {address}: {detail}\n  start a local server with \
             `temporal server start-dev` (or `scripts/demo.sh`), or set TEMPORAL_ADDRESS to your \
             cluster's frontend (host:port)"
        ))
    };
    let connection =
        match tokio::time::timeout(CONNECT_TIMEOUT * 2, Connection::connect(conn_opts)).await {
            Err(_) => return Err(unreachable("timed out".to_owned())),
            Ok(Err(e)) => return Err(unreachable(plain_cause(&short(&e.to_string())))),
            Ok(Ok(c)) => c,
        };
    Client::new(connection, client_opts)
        .map_err(|e| Exit::infra(format!("cannot create the Temporal client: {e}")))
}

/// A connection error in words first, then as the transport reported it (the raw cause
/// names TLS problems precisely: see docs/src/security/tls.md).
fn plain_cause(raw: &str) -> String {
    let plain = if raw.contains("ConnectionRefused") || raw.contains("Connection refused") {
        "connection refused: nothing listens at that address"
    } else if raw.contains("dns error") || raw.contains("failed to lookup address") {
        "the host name does not resolve"
    } else {
        return raw.to_owned();
    };
    format!("{plain} ({raw})")
}

/// The payload encryption keys from `BATON_CODEC_KEYS` / `BATON_CODEC_ACTIVE_KEY`, or `None`
/// (payloads stay plain). The same keys as the workers': runs are written and read with them.
pub(crate) fn codec_keys() -> Result<Option<Keyring>, Exit> {
    Keyring::from_env().map_err(|e| Exit::usage(e.to_string()))
}

/// Whether payloads are encrypted (keys configured). Fields the SDK does not pass through the
/// codec (a workflow's static summary) must then stay free of run content.
pub(crate) fn encrypting() -> bool {
    matches!(codec_keys(), Ok(Some(_)))
}

/// A handle on a run (workflow id).
pub(crate) fn handle(client: &Client, run: &str) -> WorkflowHandle<Client, AgentRun> {
    client.get_workflow_handle::<AgentRun>(run.to_owned())
}

/// Maps a describe/signal/cancel error: not found is the user's mistake (2), the rest is
/// infrastructure (5).
pub(crate) fn interaction_error(run: &str, e: WorkflowInteractionError) -> Exit {
    match e {
        WorkflowInteractionError::NotFound(_) => not_found(run),
        WorkflowInteractionError::Rpc(status) if crate::inspect::transient(status.code()) => Exit {
            transient: true,
            ..Exit::infra(format!(
                "Temporal request failed: {}",
                short(&status.to_string())
            ))
        },
        other => Exit::infra(format!(
            "Temporal request failed: {}",
            short(&other.to_string())
        )),
    }
}

/// The run does not exist.
pub(crate) fn not_found(run: &str) -> Exit {
    Exit::usage(format!(
        "no run with id '{run}' in this namespace; check the id (and TEMPORAL_NAMESPACE)"
    ))
}

/// First line of an error, without gRPC noise.
pub(crate) fn short(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(400)
        .collect()
}

/// The Temporal client identity of this process: what the server records as the sender of its
/// signals and updates, and what approval policies (`approvers`) match. In CI, the job:
/// `ci:github:<actor>@<repo>/runs/<run id>`, `ci:gitlab:<user>@<project>/jobs/<job id>`,
/// `ci:<host>` for another CI; elsewhere `<user>@<host>` ([`local_user`]).
pub(crate) fn client_identity(
    env: &dyn Fn(&str) -> Option<String>,
    host: &str,
    user: &str,
) -> String {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    let or_unknown = |k: &str| var(k).unwrap_or_else(|| "unknown".to_owned());
    if var("GITHUB_ACTIONS").as_deref() == Some("true") {
        return format!(
            "ci:github:{}@{}/runs/{}",
            or_unknown("GITHUB_ACTOR"),
            or_unknown("GITHUB_REPOSITORY"),
            or_unknown("GITHUB_RUN_ID")
        );
    }
    if var("GITLAB_CI").is_some() {
        return format!(
            "ci:gitlab:{}@{}/jobs/{}",
            or_unknown("GITLAB_USER_LOGIN"),
            or_unknown("CI_PROJECT_PATH"),
            or_unknown("CI_JOB_ID")
        );
    }
    if var("CI").is_some_and(|v| v == "true" || v == "1") {
        return format!("ci:{host}");
    }
    format!("{user}@{host}")
}

/// The account this process runs as: `$USER`, else `$LOGNAME`, else the name `/etc/passwd`
/// gives the process's uid (containers, cron and services often set neither variable), else
/// `uid-<n>`.
pub(crate) fn local_user(env: &dyn Fn(&str) -> Option<String>) -> String {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(user) = var("USER").or_else(|| var("LOGNAME")) {
        return user;
    }
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| process_uid(&status));
    let Some(uid) = uid else {
        return "unknown".to_owned();
    };
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| passwd_name(&passwd, uid))
        .unwrap_or_else(|| format!("uid-{uid}"))
}

/// The real uid in the text of `/proc/self/status` (`Uid:\treal\teffective\t...`).
fn process_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The name of `uid` in the text of `/etc/passwd` (`name:x:uid:gid:...`).
fn passwd_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields
            .next()
            .filter(|n| !n.is_empty() && !n.starts_with('#'))?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid).then(|| name.to_owned())
    })
}

/// This machine's host name (`unknown-host` if it cannot be read).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    fn id(vars: &[(&str, &str)]) -> String {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let user = env("USER").unwrap_or_else(|| "someone".to_owned());
        client_identity(&env, "box", &user)
    }

    #[test]
    fn the_local_user_comes_from_the_environment_or_the_uid() {
        assert_eq!(local_user(&|k| (k == "USER").then(|| "ana".into())), "ana");
        assert_eq!(local_user(&|k| (k == "LOGNAME").then(|| "bo".into())), "bo");
        let status = "Name:\tbaton\nUmask:\t0022\nUid:\t1001\t1001\t1001\t1001\nGid:\t5\n";
        assert_eq!(process_uid(status), Some(1001));
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\n# comment\nana:x:1001:1001::/home/ana:/bin/sh\n";
        assert_eq!(passwd_name(passwd, 1001).as_deref(), Some("ana"));
        assert_eq!(passwd_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(passwd_name(passwd, 7), None);
        // Neither variable set: this process's own account, never "unknown" on Linux.
        let own = local_user(&|_| None);
        assert!(!own.is_empty() && own != "unknown", "{own}");
    }

    #[test]
    fn identities_name_the_person_or_the_ci_job() {
        assert_eq!(id(&[("USER", "ana")]), "ana@box");
        assert_eq!(id(&[]), "someone@box");
        assert_eq!(
            id(&[
                ("GITHUB_ACTIONS", "true"),
                ("GITHUB_ACTOR", "ana"),
                ("GITHUB_REPOSITORY", "acme/app"),
                ("GITHUB_RUN_ID", "42"),
                ("USER", "runner"),
            ]),
            "ci:github:ana@acme/app/runs/42"
        );
        assert_eq!(
            id(&[
                ("GITLAB_CI", "true"),
                ("GITLAB_USER_LOGIN", "bo"),
                ("CI_PROJECT_PATH", "g/p"),
                ("CI_JOB_ID", "7")
            ]),
            "ci:gitlab:bo@g/p/jobs/7"
        );
        assert_eq!(id(&[("CI", "true"), ("USER", "x")]), "ci:box");
    }
}
