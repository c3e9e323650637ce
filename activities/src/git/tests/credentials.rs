//! Where a host's token goes, against real git and a loopback
//! HTTP server that asks for credentials and records every `Authorization` it is sent: never
//! over plain `http://` unless the host is loopback and the credential opts in, only to the
//! repositories the credential is scoped to, and only to the protocol it was set up for.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use baton_proto::GitSource;
use pretty_assertions::assert_eq;
use tempfile::TempDir;

use super::super::command::Git;
use super::super::{GitCredential, GitError, GitSettings, clone_into};
use super::settings;

const TOKEN: &str = "tok-plain-http-7d1";
const TOKEN_ENV: &str = "BATON_TEST_GIT_TOKEN";

fn token_env(name: &str) -> Option<String> {
    (name == TOKEN_ENV).then(|| TOKEN.to_owned())
}

/// `"Basic <base64 of x-access-token:TOKEN>"`, what git sends with the token.
fn basic_auth() -> String {
    use base64::Engine;
    let pair = format!("x-access-token:{TOKEN}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A loopback HTTP server answering every request `401` with a Basic challenge, recording the
/// request lines and `Authorization` headers it got. Stopped on drop.
struct AskingServer {
    port: u16,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
    authorizations: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl AskingServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = Self {
            port,
            connections: Arc::default(),
            requests: Arc::default(),
            authorizations: Arc::default(),
            stop: Arc::default(),
        };
        let (connections, requests, authorizations, stop) = (
            server.connections.clone(),
            server.requests.clone(),
            server.authorizations.clone(),
            server.stop.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                connections.fetch_add(1, Ordering::SeqCst);
                answer(stream, &requests, &authorizations);
            }
        });
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn authorizations(&self) -> Vec<String> {
        self.authorizations.lock().unwrap().clone()
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for AskingServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Reads one request head at a time on `stream` (git keeps connections alive) and answers 401.
fn answer(stream: TcpStream, requests: &Mutex<Vec<String>>, authorizations: &Mutex<Vec<String>>) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        requests.lock().unwrap().push(line.trim_end().to_owned());
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("authorization")
            {
                authorizations.lock().unwrap().push(value.trim().to_owned());
            }
        }
        let reply = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"test\"\r\n\
                     Content-Length: 0\r\n\r\n";
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn credential(host: &str, tune: impl FnOnce(&mut GitCredential)) -> GitSettings {
    let mut settings = settings();
    let mut credential = GitCredential {
        token_env: TOKEN_ENV.into(),
        github_app: false,
        username: "x-access-token".into(),
        repos: Vec::new(),
        allow_plain_http_on_loopback: false,
    };
    tune(&mut credential);
    settings.credentials.insert(host.into(), credential);
    settings
}

async fn clone(settings: &GitSettings, url: &str) -> Result<(), GitError> {
    let dest = TempDir::new().unwrap();
    let source = GitSource {
        url: url.into(),
        r#ref: String::new(),
    };
    clone_into(settings, &source, dest.path(), &token_env)
        .await
        .map(drop)
}

#[tokio::test]
async fn a_token_is_never_sent_over_plain_http_without_the_loopback_opt_in() {
    let server = AskingServer::start();
    let url = server.url("acme/tool.git");
    let err = clone(&credential("127.0.0.1", |_| {}), &url)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        GitError::Unavailable(format!(
            "refusing to send the git token for 127.0.0.1 over plain http:// ({url}): anyone on \
             the way could read it; use an https:// URL, or, for a git server on the worker's \
             own loopback, set allow_plain_http_on_loopback = true in the worker's \
             [git.credentials.\"127.0.0.1\"]"
        ))
    );
    assert_eq!(server.connections(), 0, "{:?}", server.requests());
    // A host that is not loopback is refused even with the opt-in (nothing is sent: the name
    // does not even resolve).
    let opted = credential("git.example", |c| c.allow_plain_http_on_loopback = true);
    let err = clone(&opted, "http://git.example/acme/tool.git")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitError::Unavailable(m) if m.starts_with("refusing to send the git token for git.example over plain http://") && m.contains("use an https:// URL") && !m.contains(TOKEN)),
        "{err:?}"
    );
}

#[tokio::test]
async fn with_the_loopback_opt_in_the_token_reaches_a_loopback_http_server() {
    let server = AskingServer::start();
    let opted = credential("127.0.0.1", |c| c.allow_plain_http_on_loopback = true);
    let err = clone(&opted, &server.url("acme/tool.git"))
        .await
        .unwrap_err();
    // The server refuses whatever it gets; what matters is what it got.
    assert!(
        matches!(&err, GitError::Unavailable(m) if m.contains("the credentials were refused")),
        "{err:?}"
    );
    assert!(
        server.authorizations().contains(&basic_auth()),
        "{:?}",
        server.authorizations()
    );
}

#[tokio::test]
async fn a_credential_scoped_to_repositories_is_used_for_those_only() {
    let server = AskingServer::start();
    let scoped = credential("127.0.0.1", |c| {
        c.allow_plain_http_on_loopback = true;
        c.repos = vec!["acme/*".into(), "team/**".into()];
    });
    for path in ["other/tool.git", "acme/sub/tool.git", "acmex/tool"] {
        let err = clone(&scoped, &server.url(path)).await.unwrap_err();
        assert!(
            matches!(&err, GitError::Unavailable(m) if m.contains(&format!(
                "no token was sent: the worker's [git.credentials.\"127.0.0.1\"] repos (acme/*, \
                 team/**) does not include {}", path.trim_end_matches(".git")
            ))),
            "{path}: {err:?}"
        );
    }
    assert_eq!(server.authorizations(), Vec::<String>::new());
    assert!(server.connections() > 0, "git did ask the server");
    for path in ["ACME/Tool.git", "team/a/b/tool.git", "acme/tool"] {
        let _ = clone(&scoped, &server.url(path)).await.unwrap_err();
        assert!(
            server.authorizations().contains(&basic_auth()),
            "{path}: {:?}",
            server.authorizations()
        );
        server.authorizations.lock().unwrap().clear();
    }
}

/// `git credential fill`: what the helper answers for `protocol` and `host`.
async fn fill(git: &Git, protocol: &str, host: &str) -> super::super::command::Output {
    let input = format!("protocol={protocol}\nhost={host}\n\n");
    git.call(None, &["credential", "fill"])
        .stdin(input.as_bytes())
        .output()
        .await
        .unwrap()
}

/// An https remote that redirects to http:// (git follows the first redirect) gets nothing from
/// the helper over http.
#[tokio::test]
async fn the_helper_answers_only_for_the_protocol_it_was_set_up_for() {
    let settings = credential("git.example", |_| {});
    let git = Git::for_url(&settings, "https://git.example/acme/tool.git", &token_env).unwrap();
    let https = fill(&git, "https", "git.example").await;
    assert!(
        https.success && https.stdout.contains("password=***"),
        "{}",
        https.stderr
    );
    let http = fill(&git, "http", "git.example").await;
    assert!(!http.success, "{}", http.stdout);
    assert!(!http.stdout.contains(TOKEN) && !http.stderr.contains(TOKEN));
}
