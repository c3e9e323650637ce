//! Self-tests of the git servers and the GitHub stand-in of the harness (no baton binaries):
//! real `git clone`/`push` over `git daemon` and over `git http-backend` with a token, and the
//! stand-in's answers to reqwest.

#![allow(clippy::unwrap_used)]

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use baton_tests::*;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const TOKEN: &str = "tok-8f2c41d9e7";

fn project() -> [(&'static str, &'static str); 2] {
    [
        ("README.md", "# parser\n"),
        ("src/lib.rs", "pub fn parse() -> u32 {\n    1\n}\n"),
    ]
}

/// `git <args>` in `dir`, with the token helper when `token` is given.
fn git_in(dir: &Path, token: Option<&str>, args: &[&str]) -> CmdOutput {
    let mut cmd = git_command();
    cmd.current_dir(dir);
    if let Some(token) = token {
        cmd.arg("-c")
            .arg(format!("credential.helper={TOKEN_CREDENTIAL_HELPER}"))
            .env(TOKEN_ENV, token);
    }
    cmd.args(args);
    run_cmd(cmd, None, Duration::from_secs(60)).unwrap()
}

fn ok(out: CmdOutput) -> String {
    out.ensure_success().unwrap().stdout.trim().to_owned()
}

/// Clones `url` into `dir/name`, commits `file` there and pushes it to `branch`; returns the
/// new commit's sha.
fn clone_commit_push(dir: &Path, token: Option<&str>, url: &str, branch: &str) -> String {
    ok(git_in(dir, token, &["clone", "--quiet", url, "clone"]));
    let clone = dir.join("clone");
    assert_eq!(
        std::fs::read_to_string(clone.join("src/lib.rs")).unwrap(),
        project()[1].1
    );
    std::fs::write(
        clone.join("src/lib.rs"),
        "pub fn parse() -> u32 {\n    2\n}\n",
    )
    .unwrap();
    ok(git_in(
        &clone,
        None,
        &["commit", "--quiet", "-am", "Return 2"],
    ));
    let refspec = format!("HEAD:refs/heads/{branch}");
    ok(git_in(
        &clone,
        token,
        &["push", "--quiet", "origin", &refspec],
    ));
    ok(git_in(&clone, None, &["rev-parse", "HEAD"]))
}

#[test]
fn bare_repos_commit_tag_and_read_back() {
    let repos = GitRepos::new().unwrap();
    let repo = repos.create("acme/parser", &project()).unwrap();
    assert_eq!(repo.name(), "acme/parser.git");
    assert!(repo.path().starts_with(repos.root()));
    let first = repo.branch_head("main").unwrap().unwrap();
    let second = repo
        .commit(&[("src/new.rs", "// new\n")], "Add new.rs\n\nWith a body.")
        .unwrap();
    assert_eq!(
        repo.commits("main").unwrap(),
        vec![
            (second.clone(), "Add new.rs".to_owned()),
            (first.clone(), "Initial commit".to_owned()),
        ]
    );
    // The second commit keeps the first one's files.
    assert_eq!(repo.show(&second, "README.md").unwrap(), "# parser\n");
    assert_eq!(repo.show("main", "src/new.rs").unwrap(), "// new\n");
    repo.tag("v1", &first).unwrap();
    assert_eq!(repo.git(&["cat-file", "-t", "v1"]).unwrap(), "tag");
    assert_eq!(repo.git(&["rev-parse", "v1^{commit}"]).unwrap(), first);
    assert_eq!(
        repo.git(&["log", "-1", "--format=%an <%ae>", "main"])
            .unwrap(),
        format!("{} <{}>", GIT_AUTHOR.0, GIT_AUTHOR.1)
    );
    // Same files, same author and date: the same commit in another set of repositories.
    let other = GitRepos::new().unwrap();
    let again = other.create("acme/parser.git", &project()).unwrap();
    assert_eq!(again.branch_head("main").unwrap(), Some(first));

    assert_eq!(repo.branch_head("nope").unwrap(), None);
    let err = repo.commits("nope").unwrap_err().to_string();
    assert!(
        err.contains("no branch nope") && err.contains("main"),
        "{err}"
    );
    let err = repo.show("main", "missing.txt").unwrap_err().to_string();
    assert!(err.contains("no file missing.txt"), "{err}");
    let err = repos
        .create("acme/parser.git", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("already exists"), "{err}");
    for bad in ["../escape", "/abs", "a//b", "sp ace", ""] {
        let err = repos.create(bad, &[]).unwrap_err().to_string();
        assert!(err.contains("bad git repository name"), "{bad}: {err}");
    }
    assert_eq!(repos.repo("acme/parser").unwrap().path(), repo.path());
    assert!(repos.repo("acme/other").is_err());
}

#[test]
fn git_daemon_serves_clones_and_pushes_and_hooks_refuse() {
    let repos = GitRepos::new().unwrap();
    let repo = repos.create("acme/parser.git", &project()).unwrap();
    let first = repo.branch_head("main").unwrap().unwrap();
    repo.tag("v1", &first).unwrap();
    let second = repo.commit(&[("NEWS", "2\n")], "Second").unwrap();
    let mut daemon = GitDaemon::start(&repos).unwrap();
    let url = daemon.url("acme/parser");
    assert_eq!(
        url,
        format!("git://127.0.0.1:{}/acme/parser.git", daemon.port())
    );

    let dir = tempfile::tempdir().unwrap();
    let pushed = clone_commit_push(dir.path(), None, &url, "baton/run-1");
    assert_eq!(
        repo.branch_head("baton/run-1").unwrap(),
        Some(pushed.clone())
    );
    assert_eq!(
        repo.commits("baton/run-1").unwrap()[..2],
        [
            (pushed, "Return 2".to_owned()),
            (second.clone(), "Second".to_owned())
        ]
    );

    // Shallow fetches at a tag and at a commit sha, as a worker starting a run does.
    let shallow = dir.path().join("shallow");
    ok(git_in(dir.path(), None, &["init", "--quiet", "shallow"]));
    ok(git_in(
        &shallow,
        None,
        &["fetch", "--quiet", "--depth=1", &url, "tag", "v1"],
    ));
    assert_eq!(
        ok(git_in(&shallow, None, &["rev-parse", "v1^{commit}"])),
        first
    );
    ok(git_in(
        &shallow,
        None,
        &["fetch", "--quiet", "--depth=1", &url, &first],
    ));
    assert_eq!(
        ok(git_in(&shallow, None, &["rev-parse", "FETCH_HEAD"])),
        first
    );

    // A pre-receive hook refuses a push, as a protected branch does.
    repo.set_hook(
        "pre-receive",
        "echo 'refusing: main is protected' >&2\nexit 1\n",
    )
    .unwrap();
    let clone = dir.path().join("clone");
    let out = git_in(&clone, None, &["push", "origin", "HEAD:refs/heads/main"]);
    assert!(!out.success(), "{out}");
    assert!(out.stderr.contains("refusing: main is protected"), "{out}");
    assert_eq!(repo.branch_head("main").unwrap(), Some(second));

    // A repository that does not exist.
    let out = git_in(
        dir.path(),
        None,
        &["clone", &daemon.url("acme/nope"), "nope"],
    );
    assert!(!out.success(), "{out}");

    let port = daemon.port();
    let pid = daemon.pid();
    assert!(daemon.log().contains("Connection from"), "{}", daemon.log());
    daemon.stop();
    assert!(!port_accepts(port), "port {port} still accepts connections");
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn git_http_needs_the_token_for_clone_and_push() {
    let repos = GitRepos::new().unwrap();
    let repo = repos.create("acme/parser.git", &project()).unwrap();
    let http = GitHttp::start(&repos, TOKEN).unwrap();
    let url = http.url("acme/parser");
    assert_eq!(url, format!("{}/acme/parser.git", http.base_url()));

    let dir = tempfile::tempdir().unwrap();
    let pushed = clone_commit_push(dir.path(), Some(TOKEN), &url, "baton/run-2");
    assert_eq!(repo.branch_head("baton/run-2").unwrap(), Some(pushed));
    // Git asks without credentials first (refused), then with the helper's token.
    assert!(http.refused() >= 1, "{}", http.log());
    assert_eq!(http.refused_credentials(), 0, "{}", http.log());
    assert!(
        http.log().contains("git-receive-pack user=x -> 200"),
        "{}",
        http.log()
    );

    let requests = http.requests();
    let out = git_in(dir.path(), None, &["clone", &url, "anonymous"]);
    assert!(!out.success(), "{out}");
    assert!(!dir.path().join("anonymous").exists());
    let out = git_in(dir.path(), Some("wrong-token"), &["clone", &url, "wrong"]);
    assert!(!out.success(), "{out}");
    assert!(out.stderr.contains("Authentication failed"), "{out}");
    assert!(http.refused_credentials() >= 1, "{}", http.log());
    assert!(http.requests() > requests);

    // A push with a wrong token leaves the branch alone.
    let clone = dir.path().join("clone");
    std::fs::write(clone.join("README.md"), "x\n").unwrap();
    ok(git_in(&clone, None, &["commit", "--quiet", "-am", "x"]));
    let out = git_in(
        &clone,
        Some("wrong-token"),
        &["push", "origin", "HEAD:refs/heads/other"],
    );
    assert!(!out.success(), "{out}");
    assert_eq!(repo.branch_head("other").unwrap(), None);

    // A push larger than git's 1 MiB post buffer goes as a chunked request body.
    let mut noise = vec![0u8; 3 * 1024 * 1024];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for byte in &mut noise {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    std::fs::write(clone.join("noise.bin"), &noise).unwrap();
    ok(git_in(&clone, None, &["add", "noise.bin"]));
    ok(git_in(&clone, None, &["commit", "--quiet", "-m", "Noise"]));
    ok(git_in(
        &clone,
        Some(TOKEN),
        &["push", "--quiet", "origin", "HEAD:refs/heads/big"],
    ));
    let big = ok(git_in(&clone, None, &["rev-parse", "HEAD"]));
    assert_eq!(repo.branch_head("big").unwrap(), Some(big));
    let stored = repo.git(&["cat-file", "-s", "big:noise.bin"]).unwrap();
    assert_eq!(stored, noise.len().to_string());
    assert!(
        http.log()
            .contains("git-receive-pack user=x -> 200 (chunked body)"),
        "{}",
        http.log()
    );
    assert!(
        !http.log().contains(TOKEN),
        "the token is in the log:\n{}",
        http.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn git_http_takes_gzipped_bodies_and_challenges_with_basic() {
    let repos = GitRepos::new().unwrap();
    let repo = repos.create("acme/parser.git", &project()).unwrap();
    let head = repo.branch_head("main").unwrap().unwrap();
    let http = GitHttp::start(&repos, TOKEN).unwrap();
    let client = reqwest::Client::new();
    let endpoint = format!("{}/git-upload-pack", http.url("acme/parser"));

    let refused = client.post(&endpoint).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(
        refused.headers()["www-authenticate"],
        "Basic realm=\"baton-test\""
    );

    // A protocol v0 fetch request, gzipped as git sends large ones.
    let pkt = |line: &str| format!("{:04x}{line}", line.len() + 4);
    let request = format!("{}0000{}", pkt(&format!("want {head}\n")), pkt("done\n"));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(request.as_bytes()).unwrap();
    let answer = client
        .post(&endpoint)
        .basic_auth("anyone", Some(TOKEN))
        .header("Content-Type", "application/x-git-upload-pack-request")
        .header("Content-Encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    assert_eq!(
        answer.headers()["content-type"],
        "application/x-git-upload-pack-result"
    );
    let body = answer.bytes().await.unwrap();
    assert!(body.starts_with(b"0008NAK\n"), "{body:?}");
    assert!(
        body.windows(4).any(|w| w == b"PACK"),
        "no pack in the answer"
    );

    // The CGI status comes through: no such repository.
    let missing = client
        .get(format!("{}/info/refs", http.url("acme/nope")))
        .basic_auth("x", Some(TOKEN))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(http.refused(), 1);
    assert_eq!(http.requests(), 3);
}

async fn api(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    auth: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client
        .request(method, url)
        .header("User-Agent", "baton-test");
    if let Some(auth) = auth {
        req = req.header("Authorization", auth);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn github_stand_in_answers_like_github() {
    let repos = GitRepos::new().unwrap();
    let repo = repos.create("acme/parser.git", &project()).unwrap();
    let base_sha = repo.branch_head("main").unwrap().unwrap();
    let hub = GitHubStandIn::start(TOKEN, &repos).unwrap();
    let client = reqwest::Client::new();
    let pulls = format!("{}/repos/acme/parser/pulls", hub.api_url());
    let bearer = format!("Bearer {TOKEN}");
    let auth = Some(bearer.as_str());
    let post = |body: Value| api(&client, reqwest::Method::POST, &pulls, auth, Some(body));

    // No User-Agent (reqwest sends none by default), no token, a wrong one, no such repo.
    let no_ua = client.get(&pulls).header("Authorization", &bearer).send();
    assert_eq!(no_ua.await.unwrap().status().as_u16(), 403);
    let (status, body) = api(&client, reqwest::Method::GET, &pulls, None, None).await;
    assert_eq!((status, &body["message"]), (401, &json!("Bad credentials")));
    let wrong = Some("Bearer nope");
    let (status, _) = api(&client, reqwest::Method::GET, &pulls, wrong, None).await;
    assert_eq!(status, 401);
    let other = format!("{}/repos/acme/other/pulls", hub.api_url());
    let (status, body) = api(&client, reqwest::Method::GET, &other, auth, None).await;
    assert_eq!((status, &body["message"]), (404, &json!("Not Found")));

    // Validation: missing title, a head that is no branch, no commits between head and base.
    let (status, body) = post(json!({"head": "acme:feature", "base": "main"})).await;
    assert_eq!(status, 422);
    assert_eq!(
        body["errors"],
        json!([{"resource": "PullRequest", "code": "missing_field", "field": "title"}])
    );
    let pr = json!({"title": "Fix", "head": "acme:baton/run-1", "base": "main", "body": "b"});
    let (status, body) = post(pr.clone()).await;
    assert_eq!((status, &body["errors"][0]["field"]), (422, &json!("head")));
    let (status, body) = post(json!({"title": "t", "head": "main", "base": "main"})).await;
    assert_eq!(status, 422);
    assert_eq!(
        body["errors"][0]["message"],
        "No commits between main and main"
    );
    let (status, body) = post(json!({"title": "t", "head": "acme:main", "base": "dev"})).await;
    assert_eq!((status, &body["errors"][0]["field"]), (422, &json!("base")));

    // The branch exists now: 201, then a second one for the same head is refused.
    repo.git(&["branch", "baton/run-1", "main"]).unwrap();
    let (status, _) = post(pr.clone()).await;
    assert_eq!(status, 422, "no commits ahead of main yet");
    let work = repo.commit(&[("NEWS", "x\n")], "Work").unwrap();
    repo.git(&["update-ref", "refs/heads/baton/run-1", &work])
        .unwrap();
    repo.git(&["update-ref", "refs/heads/main", &base_sha])
        .unwrap();
    let (status, created) = post(pr.clone()).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["number"], 1);
    assert_eq!(created["html_url"], "https://github.com/acme/parser/pull/1");
    assert_eq!(created["url"], format!("{pulls}/1"));
    assert_eq!(created["state"], "open");
    assert_eq!(created["draft"], false);
    assert_eq!(created["head"]["ref"], "baton/run-1");
    assert_eq!(created["head"]["sha"], work.as_str());
    assert_eq!(created["head"]["label"], "acme:baton/run-1");
    assert_eq!(created["base"]["ref"], "main");
    let token_auth = format!("token {TOKEN}");
    let (status, body) = api(
        &client,
        reqwest::Method::POST,
        &pulls,
        Some(&token_auth),
        Some(pr),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(
        body["errors"][0]["message"],
        "A pull request already exists for acme:baton/run-1."
    );

    // Listing by head (with the owner), and a head filter without it is ignored.
    let list = |query: &'static str| {
        let url = format!("{pulls}?{query}");
        let client = client.clone();
        async move { api(&client, reqwest::Method::GET, &url, auth, None).await }
    };
    let (status, found) = list("head=acme:baton/run-1&state=open").await;
    assert_eq!((status, found.as_array().map(Vec::len)), (200, Some(1)));
    assert_eq!(found[0]["number"], 1);
    let (_, found) = list("head=acme:baton/run-2&state=all").await;
    assert_eq!(found, json!([]));
    let (_, found) = list("head=baton/run-2").await;
    assert_eq!(found.as_array().map(Vec::len), Some(1));
    hub.close_pull("acme/parser", 1).unwrap();
    let (_, found) = list("head=acme:baton/run-1").await;
    assert_eq!(found, json!([]));
    let (_, found) = list("head=acme:baton/run-1&state=all").await;
    assert_eq!(found[0]["state"], "closed");
    let one = format!("{pulls}/1");
    let (status, body) = api(&client, reqwest::Method::GET, &one, auth, None).await;
    assert_eq!((status, &body["number"]), (200, &json!(1)));

    let opened = hub.pulls();
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].title, "Fix");
    assert_eq!(opened[0].body.as_deref(), Some("b"));
    assert_eq!(opened[0].head_sha, work);
    let requests = hub.requests();
    let creates: Vec<&ApiRequest> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.status == 201)
        .collect();
    assert_eq!(creates.len(), 1);
    assert_eq!(creates[0].body["head"], "acme:baton/run-1");
    assert_eq!(creates[0].header("user-agent"), Some("baton-test"));
    let listed = requests
        .iter()
        .find(|r| r.query.contains_key("head"))
        .unwrap();
    assert_eq!(listed.query["head"], "acme:baton/run-1");
}

#[tokio::test(flavor = "multi_thread")]
async fn github_stand_in_opens_the_pull_request_before_a_delayed_answer() {
    let repos = GitRepos::new().unwrap();
    let repo = repos.create("acme/parser.git", &project()).unwrap();
    repo.git(&["branch", "feature", "main"]).unwrap();
    let work = repo.commit(&[("NEWS", "x\n")], "Work").unwrap();
    repo.git(&["update-ref", "refs/heads/feature", &work])
        .unwrap();
    repo.git(&["update-ref", "refs/heads/main", "main~1"])
        .unwrap();
    let hub = GitHubStandIn::start(TOKEN, &repos).unwrap();
    let delay = Duration::from_millis(1500);
    hub.delay_create(delay);
    assert_eq!(hub.create_started(), None);

    let client = reqwest::Client::new();
    let url = format!("{}/repos/acme/parser/pulls", hub.api_url());
    let sent = Instant::now();
    let create = tokio::spawn({
        let client = client.clone();
        async move {
            let body = json!({"title": "t", "head": "feature", "base": "main", "draft": true});
            let auth = format!("Bearer {TOKEN}");
            api(
                &client,
                reqwest::Method::POST,
                &url,
                Some(&auth),
                Some(body),
            )
            .await
        }
    });
    let started = hub
        .wait_create_started(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!create.is_finished(), "the answer came before the delay");
    assert_eq!(hub.pulls().len(), 1);
    assert!(hub.pulls()[0].draft);
    let (status, _) = create.await.unwrap();
    assert_eq!(status, 201);
    assert!(sent.elapsed() >= delay);
    assert!(started >= sent);

    let err = GitHubStandIn::start(TOKEN, &repos)
        .unwrap()
        .wait_create_started(Duration::from_millis(200))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no pull request was created"), "{err}");
}

#[test]
fn git_command_ignores_the_developers_git_config() {
    let mut cmd = git_command();
    cmd.args(["config", "--list", "--show-origin"]);
    let out = run_cmd(cmd, None, Duration::from_secs(10)).unwrap();
    assert!(!out.stdout.contains("file:/etc/gitconfig"), "{out}");
    assert!(!out.stdout.contains(".gitconfig"), "{out}");
    let cmd = git_command();
    let env: Vec<(String, String)> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
        .collect();
    for (k, v) in GIT_ISOLATION_ENV {
        assert!(env.contains(&((*k).to_owned(), (*v).to_owned())), "{env:?}");
    }
}
