//! Git's smart HTTP protocol on loopback: a small axum server in front of the real
//! `git http-backend` (run as a CGI program per request), which asks for HTTP Basic auth
//! with the token as password on every request, as a git host with a token does.

use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use anyhow::{Context, bail};
use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use temporalio_client::tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::repos::{GitRepos, git_command, repo_name};
use crate::http_thread::HttpThread;
use crate::process::die_with_parent_thread;

/// The realm of the server's `WWW-Authenticate` challenge.
pub const GIT_HTTP_REALM: &str = "baton-test";

/// Largest request body the server takes (a push of a test repository is far smaller).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// Decides on a password other than the server's own token, for a repository (`acme/parser`):
/// e.g. a GitHub App's installation tokens, which the GitHub stand-in issues.
pub type AcceptToken = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

struct Shared {
    root: PathBuf,
    token: String,
    also: Option<AcceptToken>,
    requests: AtomicUsize,
    refused: AtomicUsize,
    refused_credentials: AtomicUsize,
    /// One line per request: method, path and query, user, status. Never a credential.
    log: Mutex<Vec<String>>,
}

impl Shared {
    fn note(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }
}

/// An HTTP server on 127.0.0.1 serving the repositories of a [`GitRepos`] through
/// `git http-backend` (fetch and push). Every request needs HTTP Basic auth whose password is
/// the token (any user name); others get 401 with `WWW-Authenticate: Basic
/// realm="baton-test"`, so git asks its credential helper. Stopped on drop; its request log
/// is printed when the test panics.
pub struct GitHttp {
    server: HttpThread,
    shared: Arc<Shared>,
}

impl GitHttp {
    /// Starts the server; `token` is the only password it accepts.
    pub fn start(repos: &GitRepos, token: &str) -> anyhow::Result<GitHttp> {
        Self::start_accepting(repos, token, None)
    }

    /// [`GitHttp::start`], also accepting the passwords `also` accepts for the repository.
    pub fn start_accepting(
        repos: &GitRepos,
        token: &str,
        also: Option<AcceptToken>,
    ) -> anyhow::Result<GitHttp> {
        let shared = Arc::new(Shared {
            root: repos.root().to_path_buf(),
            token: token.to_owned(),
            also,
            requests: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            refused_credentials: AtomicUsize::new(0),
            log: Mutex::default(),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let server = HttpThread::start("git http", app)?;
        Ok(GitHttp { server, shared })
    }

    /// `http://127.0.0.1:<port>/<name>`, the name ending in `.git` (added when missing, see
    /// [`GitRepos::create`]): `http://127.0.0.1:<port>/acme/parser.git`.
    ///
    /// # Panics
    /// If `name` is not a repository name [`GitRepos::create`] takes.
    pub fn url(&self, name: &str) -> String {
        match repo_name(name) {
            Ok(name) => format!("{}/{name}", self.base_url()),
            Err(e) => panic!("GitHttp::url: {e:#}"),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.server.addr().port()
    }

    /// How many requests it got, answered or refused.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// How many requests it answered 401. Git's first request carries no credentials and is
    /// refused even when the helper then gives the right token, so a successful clone counts
    /// one here; see [`GitHttp::refused_credentials`].
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// How many requests carried credentials that were wrong (a 401 with an `Authorization`
    /// header): refused tokens.
    pub fn refused_credentials(&self) -> usize {
        self.shared.refused_credentials.load(Ordering::SeqCst)
    }

    /// One line per request so far: `GET /acme/parser.git/info/refs?service=... user=x -> 200`,
    /// `(chunked body)` at the end of a request sent in chunks.
    pub fn log(&self) -> String {
        self.shared
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        self.server.stop();
        if thread::panicking() {
            eprintln!("=== git http {} log ===\n{}", self.base_url(), self.log());
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    let target = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let repo = repo_of_path(parts.uri.path());
    let accepts = |password: &str| {
        password == shared.token
            || shared
                .also
                .as_ref()
                .is_some_and(|also| also(password, &repo))
    };
    let user = match authorized_user(&parts.headers, &accepts) {
        Ok(user) => user,
        Err(presented) => {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            if presented {
                shared.refused_credentials.fetch_add(1, Ordering::SeqCst);
            }
            let why = if presented {
                "wrong credentials"
            } else {
                "no credentials"
            };
            shared.note(format!("{} {target} ({why}) -> 401", parts.method));
            return unauthorized();
        }
    };
    let chunked = parts
        .headers
        .get(header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("chunked"));
    let answer = match to_bytes(body, MAX_BODY).await {
        Ok(bytes) => match request_body(&parts.headers, bytes) {
            Ok(bytes) => cgi(Arc::clone(&shared), &parts, &user, bytes).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(anyhow::anyhow!("reading the request body: {e}")),
    };
    let response = answer.unwrap_or_else(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("git http test server: {e:#}\n"),
        )
            .into_response()
    });
    shared.note(format!(
        "{} {target} user={user} -> {}{}",
        parts.method,
        response.status().as_u16(),
        if chunked { " (chunked body)" } else { "" }
    ));
    response
}

fn unauthorized() -> Response {
    let challenge = format!("Basic realm=\"{GIT_HTTP_REALM}\"");
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        "authentication required: give the token as the password\n",
    )
        .into_response()
}

/// `acme/parser` of `/acme/parser.git/info/refs`.
fn repo_of_path(path: &str) -> String {
    let mut parts = path.trim_start_matches('/').split('/');
    let owner = parts.next().unwrap_or("");
    let name = parts.next().unwrap_or("");
    format!("{owner}/{}", name.strip_suffix(".git").unwrap_or(name))
}

/// The user name of a request whose Basic credentials carry a password `accepts` takes;
/// `Err(presented)` otherwise, `presented` telling whether it had credentials at all.
fn authorized_user(headers: &HeaderMap, accepts: &dyn Fn(&str) -> bool) -> Result<String, bool> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(false);
    };
    let credentials = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b64| {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok());
    match credentials.as_deref().and_then(|c| c.split_once(':')) {
        Some((user, password)) if accepts(password) => Ok(user.to_owned()),
        _ => Err(true),
    }
}

/// The body as git http-backend wants it: gunzipped when the client sent it gzipped.
fn request_body(headers: &HeaderMap, bytes: Bytes) -> anyhow::Result<Bytes> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match encoding {
        "" | "identity" => Ok(bytes),
        "gzip" | "x-gzip" => {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut plain)
                .context("gunzipping the request body")?;
            Ok(Bytes::from(plain))
        }
        other => bail!("unsupported Content-Encoding {other:?}"),
    }
}

/// Runs `git http-backend` for one request (CGI/1.1): the body on its stdin, its headers
/// (`Status:` and the rest) parsed, the rest of its stdout streamed back as the body.
async fn cgi(
    shared: Arc<Shared>,
    parts: &Parts,
    user: &str,
    body: Bytes,
) -> anyhow::Result<Response> {
    let header = |name: HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let mut cmd = git_command();
    cmd.arg("http-backend")
        .env("GIT_PROJECT_ROOT", &shared.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header(header::CONTENT_TYPE))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", user)
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let protocol = header(HeaderName::from_static("git-protocol"));
    if !protocol.is_empty() {
        // Protocol v2 is asked for in this header; CGI passes it as HTTP_GIT_PROTOCOL.
        cmd.env("HTTP_GIT_PROTOCOL", protocol);
    }
    // Children of this server's thread: killed when the server stops or the test dies.
    die_with_parent_thread(&mut cmd);
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .context("spawning `git http-backend`; is git installed with it (Debian package `git`)?")?;
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        bail!("git http-backend started without its pipes");
    };
    tokio::spawn(async move {
        // http-backend may answer (an error) without reading all of it.
        let _ = stdin.write_all(&body).await;
    });
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut stdout = BufReader::new(stdout);
    let mut response = Response::builder();
    let mut status = StatusCode::OK;
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).await? == 0 {
            let _ = child.wait().await;
            let errors = errors.await.unwrap_or_default();
            bail!("git http-backend ended before the end of its CGI headers; stderr: {errors}");
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            bail!("git http-backend wrote a CGI header without a colon: {line:?}");
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or_default();
            status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .with_context(|| format!("git http-backend's CGI status {value:?}"))?;
        } else {
            response = response.header(
                HeaderName::from_bytes(name.trim().as_bytes())?,
                HeaderValue::from_str(value)?,
            );
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match stdout.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => {
                    if tx
                        .send(Ok(Bytes::copy_from_slice(&chunk[..n])))
                        .await
                        .is_err()
                    {
                        break; // the client went away
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    break;
                }
            }
        }
        let exit = child.wait().await;
        let errors = errors.await.unwrap_or_default();
        if !exit.as_ref().is_ok_and(|s| s.success()) || !errors.trim().is_empty() {
            shared.note(format!("  git http-backend ({exit:?}): {}", errors.trim()));
        }
    });
    Ok(response
        .status(status)
        .body(Body::from_stream(ReceiverStream::new(rx)))?)
}
