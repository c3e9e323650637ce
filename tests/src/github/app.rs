//! The GitHub App side of the stand-in: `GET /repos/{owner}/{repo}/installation` and
//! `POST /app/installations/{id}/access_tokens`, both only with a JWT that verifies under the
//! app's public key, names the app (`iss`) and has not expired (as GitHub checks them); the
//! installation tokens it issues (`ghs_...`, one hour, scoped to the repositories asked for)
//! are then accepted for those repositories' REST routes and, through
//! [`super::GitHubStandIn::token_check`], by a [`crate::GitHttp`] for pushes.

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, StatusCode, header};
use serde_json::{Value, json};

use super::{Answer, Hub, served_repo};

/// The app the stand-in knows.
pub(crate) struct AppIdentity {
    pub(crate) app_id: String,
    /// The account it is installed on.
    pub(crate) owner: String,
    pub(crate) public_key: Vec<u8>,
    pub(crate) installation_id: u64,
}

/// An installation token the stand-in issued.
#[derive(Debug, Clone, PartialEq)]
pub struct IssuedToken {
    /// The token.
    pub token: String,
    /// The repositories it may act on (`acme/parser`, lowercase).
    pub repos: Vec<String>,
    /// When it stops working.
    pub expires_at: SystemTime,
}

/// How long an installation token lives (GitHub: one hour).
pub(crate) const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// The app routes: `Some(answer)` for them, `None` for other paths.
pub(crate) fn route(
    hub: &Hub,
    method: &str,
    segments: &[&str],
    headers: &HeaderMap,
    body: &Value,
) -> Option<Answer> {
    let installation = matches!(segments, ["repos", _, _, "installation"]) && method == "GET";
    let tokens =
        matches!(segments, ["app", "installations", _, "access_tokens"]) && method == "POST";
    if !installation && !tokens {
        return None;
    }
    let Some(app) = &hub.app else {
        return Some(Answer::not_found());
    };
    if let Err(why) = jwt_of(headers).and_then(|jwt| {
        baton_github::verify_jwt(&app.public_key, jwt, SystemTime::now())
            .map_err(|e| e.to_string())
            .and_then(|claims| {
                (claims.iss == app.app_id)
                    .then_some(())
                    .ok_or_else(|| "'Issuer' claim ('iss') must be an Integer".to_owned())
            })
    }) {
        return Some(Answer::message(StatusCode::UNAUTHORIZED, &why));
    }
    Some(match segments {
        ["repos", owner, name, "installation"] => match served_repo(hub, owner, name) {
            Some(_) => Answer::new(
                StatusCode::OK,
                json!({"id": app.installation_id, "app_id": app.app_id.parse::<u64>().unwrap_or(0),
                       "account": {"login": owner}, "repository_selection": "selected"}),
            ),
            None => Answer::not_found(),
        },
        ["app", "installations", id, "access_tokens"] => {
            if id.parse::<u64>().ok() != Some(app.installation_id) {
                return Some(Answer::not_found());
            }
            issue_token(hub, app, body)
        }
        _ => Answer::not_found(),
    })
}

fn jwt_of(headers: &HeaderMap) -> Result<&str, String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            "A JSON web token could not be decoded (send it as Authorization: Bearer)".to_owned()
        })
}

/// A token for the repositories `body` names (all of the owner's if none; every one must be
/// served).
fn issue_token(hub: &Hub, app: &AppIdentity, body: &Value) -> Answer {
    let names: Vec<String> = body
        .get("repositories")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if names.is_empty() {
        // Every repository of the installation: the stand-in asks the tests to scope tokens.
        return Answer::custom("the stand-in issues tokens for named repositories only");
    }
    let owner = app.owner.clone();
    let mut repos = Vec::new();
    for name in &names {
        if served_repo(hub, &owner, name).is_none() {
            return Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"message": "There is at least one repository that does not exist or is \
                       not accessible to the parent installation.",
                       "documentation_url": super::DOCS, "status": "422"}),
            );
        }
        repos.push(format!("{owner}/{name}").to_ascii_lowercase());
    }
    let token = format!("ghs_{}", uuid::Uuid::new_v4().simple());
    let expires_at = SystemTime::now() + TOKEN_LIFETIME;
    hub.lock().tokens.push(IssuedToken {
        token: token.clone(),
        repos: repos.clone(),
        expires_at,
    });
    Answer::new(
        StatusCode::CREATED,
        json!({
            "token": token,
            "expires_at": humantime::format_rfc3339_seconds(expires_at).to_string(),
            "permissions": {"contents": "write", "pull_requests": "write", "issues": "write",
                            "checks": "write", "metadata": "read"},
            "repository_selection": "selected",
            "repositories": names.iter().map(|n| json!({"name": n, "full_name": format!("{owner}/{n}")})).collect::<Vec<_>>(),
        }),
    )
}

/// Whether `token` is an unexpired installation token for `repo` (`acme/parser`).
pub(crate) fn token_valid(tokens: &[IssuedToken], token: &str, repo: &str) -> bool {
    let repo = repo.to_ascii_lowercase();
    tokens
        .iter()
        .any(|t| t.token == token && t.expires_at > SystemTime::now() && t.repos.contains(&repo))
}
