//! `baton serve`: GitHub webhooks in, runs out. One HTTP service (`/healthz`, and
//! `POST /github/webhook`) that:
//!
//! - refuses a delivery whose `X-Hub-Signature-256` is not the body's HMAC under the webhook
//!   secret with 401, before reading anything of it;
//! - on an issue labelled with the repository's label, or a comment starting with its command
//!   (`/baton <task>`) or mentioning it, checks the author's repository permission, then sends
//!   the task to the run `gh-<owner>-<repo>-<number>` with update-with-start: the
//!   first message starts the run (a conversation that waits for the next comment after each
//!   answer), a later one is its next task;
//! - is idempotent on `X-GitHub-Delivery`: the delivery id is the message's id (and the
//!   update's), which the run takes once, so a redelivered event changes nothing;
//! - answers a user without the permission with a comment saying why, and starts nothing.
//!
//! - on `/approve <call id>`, `/approve all` or `/deny <call id> <reason>` from a user with the
//!   permission, decides the run's pending calls as `github:<login>`.
//!
//! - `settings.rs`: the settings file ([`ServeSettings`]).
//! - `decide.rs`: approvals from comments.
//! - `trigger.rs`: what an event asks for ([`Trigger`]), and the run it goes to.

mod decide;
mod settings;
mod trigger;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use baton_github::{Event, GitHub, signature};
use serde_json::{Value, json};
use temporalio_client::Client;

pub(crate) use self::settings::ServeSettings;
use crate::{cli::ServeArgs, connect::connect, exit::Exit};

/// GitHub caps webhook payloads at 25 MB.
const MAX_BODY: usize = 25 * 1024 * 1024;

/// What the handlers share.
pub(crate) struct Serve {
    pub(crate) settings: ServeSettings,
    pub(crate) secret: Vec<u8>,
    pub(crate) github: GitHub,
    pub(crate) client: Client,
}

/// `baton serve`.
pub(crate) async fn run(args: ServeArgs) -> Result<i32, Exit> {
    let settings = ServeSettings::load(&args.config).map_err(Exit::usage)?;
    let env = |name: &str| std::env::var(name).ok();
    let secret = settings.webhook_secret(&env).map_err(Exit::usage)?;
    let github = settings.github(&env).map_err(Exit::usage)?;
    let listen = args
        .listen
        .clone()
        .unwrap_or_else(|| settings.listen.clone());
    let client = connect().await?;
    let repos: Vec<String> = settings.repos.iter().map(|r| r.name.clone()).collect();
    let serve = Arc::new(Serve {
        settings,
        secret,
        github,
        client,
    });
    let app = router(serve);
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| Exit::infra(format!("cannot listen on {listen}: {e}")))?;
    let addr: SocketAddr = listener
        .local_addr()
        .map_err(|e| Exit::infra(format!("cannot listen on {listen}: {e}")))?;
    eprintln!(
        "baton serve on http://{addr}: POST /github/webhook, GET /healthz; repositories: {}",
        if repos.is_empty() {
            "none (add [[repos]] entries)".to_owned()
        } else {
            repos.join(", ")
        }
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|e| Exit::infra(format!("the server failed: {e}")))?;
    Ok(crate::exit::COMPLETED)
}

async fn shutdown() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn router(serve: Arc<Serve>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/github/webhook", post(webhook))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(serve)
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

async fn webhook(State(serve): State<Arc<Serve>>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // Nothing of an unsigned body is read.
    if let Err(e) = signature::verify(&serve.secret, &body, header("x-hub-signature-256")) {
        eprintln!("refused a delivery (401): {e}");
        return answer(StatusCode::UNAUTHORIZED, json!({ "error": e.to_string() }));
    }
    let (Some(event), Some(delivery)) = (header("x-github-event"), header("x-github-delivery"))
    else {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({ "error": "X-GitHub-Event and X-GitHub-Delivery are required" }),
        );
    };
    let parsed = match Event::parse(event, &body) {
        Ok(parsed) => parsed,
        Err(e) => return answer(StatusCode::BAD_REQUEST, json!({ "error": e.to_string() })),
    };
    // One line per delivery for the operator (GitHub's own log has the payloads).
    match trigger::handle(&serve, parsed, delivery).await {
        Ok(outcome) => {
            eprintln!("delivery {delivery} ({event}): {outcome}");
            answer(StatusCode::OK, outcome)
        }
        Err(trigger::Failed::Unavailable(e)) => {
            eprintln!("delivery {delivery} ({event}) failed, GitHub may redeliver it: {e}");
            // GitHub shows the failure; the delivery can be redelivered.
            answer(StatusCode::SERVICE_UNAVAILABLE, json!({ "error": e }))
        }
    }
}
