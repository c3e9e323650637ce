//! Repository environments, end to end: a repository's `.baton/environment.toml`
//! is set up once per cache key by a real worker (setup reaches its `setup_hosts` host on
//! loopback through the egress proxy and reads a worker-side secret), later runs with the same
//! lockfile start from the cached environment without running setup, a changed lockfile sets
//! up again; the secret is in no history event, tool output or file of the final tree, and the
//! run's own tools reach neither the secret nor the setup host. A failing setup ends the run
//! `setup_failed` before any model call.

#![allow(clippy::unwrap_used)]

use std::{path::Path, time::Duration};

use crate::common;

use baton_tests::net_targets::Site;
use baton_tests::*;
use common::*;
use pretty_assertions::assert_eq;
use serde_json::json;
use sha2::Digest;

const SECRET: &str = "setup-secret-5be1c07a9d";

/// The environment file of the test repository: setup fetches from `site` (counting its runs
/// there), writes a marker into the ignored `node_modules/`, and keeps only a hash of the
/// secret (proof that it was there).
fn environment_toml(site_port: u16) -> String {
    format!(
        "setup = [\n  \"curl -sS -m 20 -o /dev/null http://127.0.0.1:{site_port}/\",\n  \
         \"mkdir -p node_modules && echo installed > node_modules/marker.txt\",\n  \
         \"printf %s \\\"$SETUP_TOKEN\\\" | sha256sum | cut -c1-16 > node_modules/token.sha\",\n  \
         \"echo token is $SETUP_TOKEN\",\n]\n\
         cache_key = [\"package-lock.json\"]\n\
         setup_hosts = [\"127.0.0.1:{site_port}\"]\n\
         setup_secrets = [\"SETUP_TOKEN\"]\n\
         maintenance = [\"echo maintained > node_modules/maintenance.txt\"]\n\
         verify = [\"test -f node_modules/marker.txt\"]\n"
    )
}

/// A worker offering the secret to setup commands.
fn worker(server: &DevServer, queue: &str, dir: &Path) -> Worker {
    let config = dir.join(format!("{queue}.toml"));
    std::fs::write(
        &config,
        "[git]\nauthor_name = \"baton\"\nauthor_email = \"baton@example.invalid\"\n\
         [environments]\nsecrets = [\"SETUP_TOKEN\"]\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let mut w = Worker::spawn(
        server,
        queue,
        &[("BATON_CONFIG", config.as_str()), ("SETUP_TOKEN", SECRET)],
    )
    .unwrap();
    w.wait_ready_blocking(Duration::from_secs(30)).unwrap();
    w
}

/// The script of every run: one shell call looking at the environment, then an answer.
fn probe_script(dir: &Path, site_port: u16) -> String {
    let command = format!(
        "cat node_modules/marker.txt; cat node_modules/maintenance.txt 2>/dev/null; \
         echo \"token=[$SETUP_TOKEN]\"; \
         curl -sS -m 5 -o /dev/null http://127.0.0.1:{site_port}/ && echo reached || echo unreachable"
    );
    script(
        dir,
        "probe",
        json!([
            {"text": "Looking.", "tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
            {"text": "Looked."}
        ]),
    )
    .display()
    .to_string()
}

fn tool_output(server: &DevServer, run: &str) -> String {
    let out = baton(server, &["transcript", run, "--json"]).unwrap();
    assert_eq!(out.code, 0, "{out}");
    out.stdout
}

#[test]
fn an_environment_is_set_up_once_per_lockfile_and_its_secret_reaches_only_setup() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let site = Site::start().unwrap();
    let repos = GitRepos::new().unwrap();
    let repo = repos
        .create(
            "acme/web.git",
            &[
                ("package-lock.json", "{\"lockfileVersion\": 3, \"v\": 1}\n"),
                (".gitignore", "node_modules/\n"),
                ("index.js", "module.exports = 1;\n"),
                (".baton/environment.toml", &environment_toml(site.port())),
            ],
        )
        .unwrap();
    let daemon = GitDaemon::start(&repos).unwrap();
    let url = daemon.url("acme/web.git");
    let queue = unique("env");
    let w = worker(&server, &queue, tmp.path());
    let probe = probe_script(tmp.path(), site.port());
    let run_on = |name: &str| {
        let run = unique(name);
        submit(
            &server,
            &queue,
            &run,
            &["--script", &probe, "--no-approval", "--git", &url],
            "look",
        );
        let r = result(&server, &run, 0);
        assert_eq!(r["reason"], "completed", "{r}\n{}", w.log());
        assert_eq!(
            r["verification"][0]["exit_code"], 0,
            "the environment's verify ran: {r}"
        );
        run
    };

    // First run: setup runs once, reaching the site through the proxy.
    let first = run_on("env-first");
    assert_eq!(
        site.hits(),
        1,
        "setup reached its setup_hosts host once (the tool did not)"
    );
    let out = tool_output(&server, &first);
    assert!(
        out.contains("installed"),
        "the tool found setup's marker: {out}"
    );
    assert!(out.contains("token=[]"), "no tool sees the secret: {out}");
    assert!(
        out.contains("unreachable"),
        "no tool reaches the setup host: {out}"
    );
    let events = baton(&server, &["watch", &first]).unwrap().stdout;
    assert!(
        events.contains("environment set up: 4 command(s)"),
        "{events}"
    );

    // Second run, same lockfile: no setup (the counter stands), the marker is there.
    let second = run_on("env-second");
    assert_eq!(site.hits(), 1, "a cache hit runs no setup");
    let out = tool_output(&server, &second);
    assert!(out.contains("installed"), "restored from the cache: {out}");
    let events = baton(&server, &["watch", &second]).unwrap().stdout;
    assert!(
        events.contains("environment ready from the cache"),
        "{events}"
    );

    assert!(
        !out.contains("maintained"),
        "same commit: no maintenance: {out}"
    );

    // A later commit with the same lockfile: the cache, then maintenance.
    repo.commit(&[("index.js", "module.exports = 2;\n")], "feature")
        .unwrap();
    let maintained = run_on("env-maintained");
    assert_eq!(site.hits(), 1, "still no setup");
    let out = tool_output(&server, &maintained);
    assert!(
        out.contains("maintained"),
        "maintenance ran on the cached environment: {out}"
    );
    let events = baton(&server, &["watch", &maintained]).unwrap().stdout;
    assert!(events.contains("1 maintenance command(s)"), "{events}");

    // Third run, after the lockfile changed: setup again.
    repo.commit(
        &[("package-lock.json", "{\"lockfileVersion\": 3, \"v\": 2}\n")],
        "bump",
    )
    .unwrap();
    let third = run_on("env-third");
    assert_eq!(site.hits(), 2, "a new cache key sets up again");

    // The secret: setup had it (its hash), nothing else does.
    let hash = hex::encode(sha2::Sha256::digest(SECRET.as_bytes()));
    for run in [&first, &second, &maintained, &third] {
        let history = history_text(&server, run);
        assert!(
            !history.contains(SECRET),
            "the secret is in the history of {run}"
        );
        assert!(
            history.contains("[secret SETUP_TOKEN]") || run != &first,
            "setup's output scrubbed"
        );
        let dir = tmp.path().join(format!("dl-{run}"));
        let out = baton(&server, &["download", run, dir.to_str().unwrap()]).unwrap();
        assert_eq!(out.code, 0, "{out}");
    }
    // The final tree of a run (its snapshot, restored by a fresh worker-side restore) holds the
    // hash setup wrote and never the value.
    let store = baton_store::LocalStore::new(server.blob_dir()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = result(&server, &third, 0);
    let final_snapshot = r["changes"]["final_snapshot"].as_str().unwrap().to_owned();
    let tree = tmp.path().join("final-tree");
    rt.block_on(baton_store::snapshot::restore(
        &store,
        &tree,
        &baton_store::BlobId::parse(&final_snapshot).unwrap(),
    ))
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(tree.join("node_modules/token.sha"))
            .unwrap()
            .trim(),
        &hash[..16],
        "setup read the secret"
    );
    for file in files_under(&tree) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "the secret is in {}",
            file.display()
        );
    }
    // Nor is it anywhere in the blob store: conversations (what the model was sent), stored
    // outputs (setup's, scrubbed), snapshots, the environment cache.
    for file in files_under(&server.blob_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !contains_bytes(&bytes, SECRET.as_bytes()),
            "the secret is in the blob store: {}",
            file.display()
        );
    }
    // The change set leaves out what setup added.
    assert_eq!(r["changes"]["files_changed"], 0, "{r}");
}

#[test]
fn a_failing_setup_ends_the_run_before_any_model_call_with_its_output() {
    let server = DevServer::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let queue = unique("env-fail");
    let _w = worker(&server, &queue, tmp.path());
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "x\n").unwrap();
    let env = tmp.path().join("env.toml");
    std::fs::write(
        &env,
        "setup = [\"echo preparing\", \"echo broken dependency >&2; exit 7\", \"echo never\"]\n",
    )
    .unwrap();
    let answer = script(tmp.path(), "never", json!([{"text": "unreachable"}]))
        .display()
        .to_string();
    let run = unique("env-fail");
    let out = baton_with_timeout(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--id",
            &run,
            "--script",
            &answer,
            "--no-approval",
            "--workspace-from",
            project.to_str().unwrap(),
            "--environment",
            env.to_str().unwrap(),
            "build it",
            "--wait",
            "--json",
        ],
        &[],
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    assert_eq!(out.code, 1, "{out}");
    let r = out.json().unwrap();
    assert_eq!(r["reason"], "setup_failed", "{r}");
    assert_eq!(r["turns"], 0, "no model call: {r}");
    assert_eq!(r["usage"]["llm_calls"], 0, "{r}");
    let detail = r["detail"].as_str().unwrap();
    for needle in [
        "echo broken dependency >&2; exit 7",
        "exit code: 7",
        "broken dependency",
        "--environment",
    ] {
        assert!(detail.contains(needle), "{needle} missing: {detail}");
    }
    assert!(
        !detail.contains("never"),
        "setup stopped at the failure: {detail}"
    );

    // A malformed environment file is refused before anything is submitted.
    std::fs::write(&env, "setpu = [\"npm ci\"]\n").unwrap();
    let out = baton(
        &server,
        &[
            "submit",
            "--task-queue",
            &queue,
            "--script",
            &answer,
            "--environment",
            env.to_str().unwrap(),
            "x",
        ],
    )
    .unwrap();
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("unknown field `setpu`"), "{out}");
}
