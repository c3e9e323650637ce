//! Connection security (part 5): the worker and the `baton` CLI reach Temporal over
//! TLS, mutual TLS and with an API key through Temporal's envconfig settings (`TEMPORAL_TLS_*`,
//! `TEMPORAL_API_KEY`, `TEMPORAL_CONFIG_FILE`/`TEMPORAL_PROFILE`). The dev server speaks
//! plaintext, so a TLS-terminating proxy ([`TlsProxy`]) stands in front of it; certificates are
//! generated per test ([`TestPki`]). docs/src/security/tls.md.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use baton_tests::tls_proxy::{TestPki, TlsProxy};
use baton_tests::*;
use common::*;
use serde_json::json;

/// The exit code of the CLI for infrastructure errors (`client/src/exit.rs`).
const EXIT_INFRA: i32 = 5;

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// `TEMPORAL_*` settings for a client of `proxy` trusting `pki`'s CA, with its client
/// certificate when `client_cert`.
fn tls_env(proxy: &TlsProxy, pki: &TestPki, client_cert: bool) -> Vec<(String, String)> {
    let mut env = vec![
        ("TEMPORAL_ADDRESS".to_owned(), proxy.address()),
        (
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH".to_owned(),
            path(&pki.ca_cert),
        ),
        (
            "TEMPORAL_TLS_SERVER_NAME".to_owned(),
            "localhost".to_owned(),
        ),
    ];
    if client_cert {
        env.push((
            "TEMPORAL_TLS_CLIENT_CERT_PATH".to_owned(),
            path(&pki.client_cert),
        ));
        env.push((
            "TEMPORAL_TLS_CLIENT_KEY_PATH".to_owned(),
            path(&pki.client_key),
        ));
    }
    env
}

fn borrow(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// `env` without the variables named in `drop`, with `add` appended.
fn edit<'a>(
    env: &'a [(String, String)],
    drop: &[&str],
    add: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> = borrow(env)
        .into_iter()
        .filter(|(k, _)| !drop.contains(k))
        .collect();
    out.extend_from_slice(add);
    out
}

/// `baton submit --script <one turn answering "secure"> --wait --json` with `env`; the output.
fn submit_and_wait(
    server: &DevServer,
    queue: &str,
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> CmdOutput {
    let s = path(&script(dir, "secure", json!([{"text": "secure"}])));
    let run = unique("tls-run");
    baton_with_timeout(
        server,
        &[
            "submit",
            "--task-queue",
            queue,
            "--id",
            &run,
            "--script",
            &s,
            "--wait",
            "--json",
            "say secure",
        ],
        env,
        None,
        Duration::from_secs(120),
    )
    .unwrap()
}

fn assert_completed(out: &CmdOutput) {
    assert_eq!(out.code, 0, "{out}");
    let v = out.json().unwrap();
    assert_eq!(v["status"], "COMPLETED", "{v}");
    assert_eq!(v["answer"], "secure", "{v}");
}

/// A refused connection: exit 5, and stderr names the address and says it cannot reach it.
fn assert_refused(out: &CmdOutput, address: &str) {
    assert_eq!(out.code, EXIT_INFRA, "{out}");
    assert!(
        out.stderr.contains("cannot reach Temporal at") && out.stderr.contains(address),
        "stderr should name {address}: {out}"
    );
}

#[test]
fn mtls_worker_and_cli_run_through_the_proxy() {
    let server = DevServer::start().unwrap();
    let pki = TestPki::generate().unwrap();
    let proxy = TlsProxy::mtls(&server.address(), &pki).unwrap();
    let env = tls_env(&proxy, &pki, true);
    let queue = unique("mtls");
    let _w = worker(&server, &queue, &borrow(&env));
    let after_worker = proxy.verified_client_handshakes();
    assert!(
        after_worker > 0,
        "the worker connected without mTLS through the proxy?"
    );

    let out = submit_and_wait(&server, &queue, pki.dir(), &borrow(&env));
    assert_completed(&out);
    assert!(
        proxy.verified_client_handshakes() > after_worker,
        "the CLI did not connect through the proxy with its certificate"
    );
    assert_eq!(
        proxy.client_certs(),
        vec![pki.client_cert_der().unwrap()],
        "the proxy saw another client certificate"
    );
    assert!(
        proxy.handshake_failures().is_empty(),
        "{:?}",
        proxy.handshake_failures()
    );
}

/// Waits until the proxy has recorded a handshake failure matching `matches`: the proxy's
/// thread records it concurrently with the client reporting its own error, so a single read
/// right after the CLI exits can miss it.
fn await_failure(proxy: &TlsProxy, what: &str, matches: impl Fn(&str) -> bool) {
    let found = wait_until_blocking(Duration::from_secs(10), what, || {
        Ok(proxy
            .handshake_failures()
            .iter()
            .any(|f| matches(f))
            .then_some(()))
    });
    if let Err(e) = found {
        panic!("{e:#}; failures recorded: {:?}", proxy.handshake_failures());
    }
}

#[test]
fn mtls_refuses_clients_without_a_trusted_certificate_or_the_ca() {
    let server = DevServer::start().unwrap();
    let pki = TestPki::generate().unwrap();
    let proxy = TlsProxy::mtls(&server.address(), &pki).unwrap();
    let address = proxy.address();
    let env = tls_env(&proxy, &pki, true);
    let status = |env: &[(&str, &str)]| baton_with(&server, &["status", "no-such-run"], env, None);

    // The full settings reach the server: it answers that the run does not exist (exit 2).
    let ok = status(&borrow(&env)).unwrap();
    assert_eq!(ok.code, 2, "{ok}");
    assert!(ok.stderr.contains("no run with id"), "{ok}");

    // No client certificate: the proxy refuses the handshake.
    let no_cert = status(&edit(
        &env,
        &[
            "TEMPORAL_TLS_CLIENT_CERT_PATH",
            "TEMPORAL_TLS_CLIENT_KEY_PATH",
        ],
        &[],
    ))
    .unwrap();
    assert_refused(&no_cert, &address);
    await_failure(
        &proxy,
        "a handshake refused for no client certificate",
        |f| f.contains("no certificates"),
    );

    // A client certificate from a CA the proxy does not trust.
    let rogue_cert = path(&pki.rogue_client_cert);
    let rogue_key = path(&pki.rogue_client_key);
    let rogue = status(&edit(
        &env,
        &[
            "TEMPORAL_TLS_CLIENT_CERT_PATH",
            "TEMPORAL_TLS_CLIENT_KEY_PATH",
        ],
        &[
            ("TEMPORAL_TLS_CLIENT_CERT_PATH", &rogue_cert),
            ("TEMPORAL_TLS_CLIENT_KEY_PATH", &rogue_key),
        ],
    ))
    .unwrap();
    assert_refused(&rogue, &address);
    await_failure(&proxy, "a handshake refused for an untrusted issuer", |f| {
        f.contains("UnknownIssuer")
    });

    // Without the CA the client does not trust the proxy's certificate (the system roots
    // do not know the test CA).
    let before = proxy.handshake_failures().len();
    let no_ca = status(&edit(&env, &["TEMPORAL_TLS_SERVER_CA_CERT_PATH"], &[])).unwrap();
    assert_refused(&no_ca, &address);
    assert!(
        no_ca.stderr.contains("UnknownIssuer") || no_ca.stderr.contains("certificate"),
        "stderr should say the certificate is not trusted: {no_ca}"
    );
    // The client aborts this handshake, so the proxy's thread may record it after the CLI exits.
    wait_until_blocking(
        Duration::from_secs(10),
        "the proxy to record the handshake the client aborted",
        || Ok((proxy.handshake_failures().len() > before).then_some(())),
    )
    .unwrap();

    // Plaintext gRPC to the TLS port fails too.
    let plain = baton_with(
        &server,
        &["status", "no-such-run"],
        &[("TEMPORAL_ADDRESS", &address)],
        None,
    )
    .unwrap();
    assert_refused(&plain, &address);

    // Only the good client certificate was ever accepted.
    assert!(proxy.verified_client_handshakes() >= 1);
    assert_eq!(
        proxy.client_certs(),
        vec![pki.client_cert_der().unwrap()],
        "the rogue certificate was accepted"
    );
}

#[test]
fn toml_profile_sets_address_namespace_and_tls_files() {
    let server = DevServer::start().unwrap();
    let pki = TestPki::generate().unwrap();
    let proxy = TlsProxy::mtls(&server.address(), &pki).unwrap();
    let queue = unique("profile");
    let file = pki.dir().join("temporal.toml");
    let tls = format!(
        "server_ca_cert_path = {ca:?}\nserver_name = \"localhost\"\n",
        ca = path(&pki.ca_cert)
    );
    std::fs::write(
        &file,
        format!(
            "[profile.default]\naddress = {addr:?}\nnamespace = {ns:?}\n\n\
             [profile.default.tls]\n{tls}client_cert_path = {cert:?}\nclient_key_path = {key:?}\n\n\
             [profile.nocert]\naddress = {addr:?}\nnamespace = {ns:?}\n\n\
             [profile.nocert.tls]\n{tls}",
            addr = proxy.address(),
            ns = server.namespace(),
            cert = path(&pki.client_cert),
            key = path(&pki.client_key),
        ),
    )
    .unwrap();
    let file = path(&file);
    let blobs = path(&server.blob_dir());
    // The harness's runners set TEMPORAL_ADDRESS/TEMPORAL_NAMESPACE, which override a
    // profile: run `baton` with the profile alone.
    let baton_profile = |args: &[&str], profile: Option<&str>| {
        let mut cmd = clean_command(bin_path("baton").unwrap());
        cmd.args(args)
            .env("TEMPORAL_CONFIG_FILE", &file)
            .env("BATON_STORE__DIR", &blobs);
        if let Some(p) = profile {
            cmd.env("TEMPORAL_PROFILE", p);
        }
        RunningCmd::spawn(cmd, None)
            .unwrap()
            .wait(DEFAULT_CMD_TIMEOUT)
            .unwrap()
    };

    // A run submitted through the profile (no worker: it waits for one) ...
    let s = path(&script(pki.dir(), "secure", json!([{"text": "secure"}])));
    let run = unique("profile-run");
    let out = baton_profile(
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &s,
            "x",
        ],
        None,
    );
    assert_eq!(out.code, 0, "{out}");
    // ... is visible to `baton status` through the profile, and on the server itself.
    let st = baton_profile(&["status", &run, "--json"], None);
    assert_eq!(st.code, 0, "{st}");
    assert_eq!(st.json().unwrap()["run_id"], run.as_str(), "{st}");
    let direct = baton(&server, &["status", &run, "--json"]).unwrap();
    assert_eq!(direct.code, 0, "{direct}");
    assert!(proxy.verified_client_handshakes() >= 2);

    // TEMPORAL_PROFILE picks another profile: this one has no client certificate.
    let nocert = baton_profile(&["status", &run], Some("nocert"));
    assert_refused(&nocert, &proxy.address());
}

#[test]
fn api_key_travels_over_tls() {
    let server = DevServer::start().unwrap();
    let pki = TestPki::generate().unwrap();
    // API-key deployments (Temporal Cloud) use server-side TLS only.
    let proxy = TlsProxy::tls(&server.address(), &pki).unwrap();
    let env = tls_env(&proxy, &pki, false);
    let key = "baton-test-api-key";
    let env = edit(&env, &[], &[("TEMPORAL_API_KEY", key)]);
    let queue = unique("apikey");
    let _w = worker(&server, &queue, &env);
    let out = submit_and_wait(&server, &queue, pki.dir(), &env);
    assert_completed(&out);
    assert!(proxy.handshakes() >= 2, "worker and CLI went through TLS");
    assert_eq!(proxy.verified_client_handshakes(), 0);

    // An API key turns TLS on by itself: against the plaintext dev server port, the client
    // attempts a TLS handshake and fails rather than sending the key in clear text.
    let plain = baton_with(
        &server,
        &["status", "no-such-run"],
        &[("TEMPORAL_API_KEY", key)],
        None,
    )
    .unwrap();
    assert_refused(&plain, &server.address());
}
