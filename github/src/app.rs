//! GitHub App credentials: the app's private key signs a short JWT (RS256) that asks GitHub
//! for installation tokens; an installation token, scoped to one repository, is what pushes,
//! opens pull requests and comments (so pushes trigger CI and commits show the app's bot).
//! Tokens are cached per repository until [`REFRESH_BEFORE`] their expiry.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, RsaKeyPair};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

use crate::GitHubError;
use crate::rest::{Endpoint, said};

/// A cached installation token is fetched again this long before it expires (GitHub's last
/// one hour; an activity may run for minutes with the token it was handed).
pub const REFRESH_BEFORE: Duration = Duration::from_secs(10 * 60);

/// How far back a JWT's `iat` is set, for clock drift (GitHub's recommendation: 60 s).
const JWT_BACKDATE: Duration = Duration::from_secs(60);
/// A JWT's lifetime after `iat` (GitHub refuses more than 10 minutes).
const JWT_LIFETIME: Duration = Duration::from_secs(9 * 60);

/// Why a private key could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

/// A GitHub App: its id and private key, and the installation tokens it has fetched.
pub struct App {
    app_id: String,
    key: Arc<RsaKeyPair>,
    endpoint: Endpoint,
    cache: Mutex<HashMap<String, InstallationToken>>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key or a token.
        f.debug_struct("App").field("app_id", &self.app_id).finish()
    }
}

/// An installation token and when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct InstallationToken {
    /// The token (`ghs_...`): a secret.
    pub token: String,
    /// When GitHub stops accepting it.
    pub expires_at: SystemTime,
    /// The installation it belongs to.
    pub installation_id: u64,
}

impl std::fmt::Debug for InstallationToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstallationToken")
            .field("expires_at", &self.expires_at)
            .field("installation_id", &self.installation_id)
            .finish_non_exhaustive()
    }
}

impl App {
    /// The app `app_id` with the PEM private key `pem` (PKCS#1 `RSA PRIVATE KEY`, as GitHub
    /// hands it out, or PKCS#8 `PRIVATE KEY`), talking to the REST API at `api_url`.
    pub fn new(app_id: &str, pem: &str, api_url: &str) -> Result<Self, KeyError> {
        if app_id.trim().is_empty() {
            return Err(KeyError("the GitHub App id is empty".into()));
        }
        Ok(Self {
            app_id: app_id.trim().to_owned(),
            key: Arc::new(key_pair(pem)?),
            endpoint: Endpoint::new(api_url),
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// [`App::new`] with the key read from `path`.
    pub fn from_key_file(app_id: &str, path: &Path, api_url: &str) -> Result<Self, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|e| {
            KeyError(format!(
                "cannot read the GitHub App's private key {}: {e}",
                path.display()
            ))
        })?;
        Self::new(app_id, &pem, api_url)
            .map_err(|KeyError(e)| KeyError(format!("{}: {e}", path.display())))
    }

    /// The app id.
    pub fn id(&self) -> &str {
        &self.app_id
    }

    /// A JWT for the app's own endpoints, valid from a minute before `now` for nine minutes.
    pub fn jwt(&self, now: SystemTime) -> Result<String, GitHubError> {
        let iat = unix(now).saturating_sub(JWT_BACKDATE.as_secs());
        let claims = json!({
            "iat": iat,
            "exp": iat + JWT_BACKDATE.as_secs() + JWT_LIFETIME.as_secs(),
            "iss": self.app_id,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut sig = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &signature::RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut sig,
            )
            .map_err(|_| GitHubError::Refused("cannot sign the GitHub App's JWT".into()))?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig)))
    }

    /// An installation token for `owner/repo` only: the cached one while it has more than
    /// [`REFRESH_BEFORE`] left, else a new one (`GET /repos/{owner}/{repo}/installation`, then
    /// `POST /app/installations/{id}/access_tokens` with `repositories: [repo]`).
    pub async fn installation_token(
        &self,
        owner: &str,
        repo: &str,
    ) -> Result<InstallationToken, GitHubError> {
        let key = format!("{owner}/{repo}").to_ascii_lowercase();
        let mut cache = self.cache.lock().await;
        if let Some(token) = cache.get(&key)
            && fresh(token, SystemTime::now())
        {
            return Ok(token.clone());
        }
        let token = self.fetch(owner, repo).await?;
        cache.insert(key, token.clone());
        Ok(token)
    }

    async fn fetch(&self, owner: &str, repo: &str) -> Result<InstallationToken, GitHubError> {
        #[derive(Deserialize)]
        struct Installation {
            id: u64,
        }
        #[derive(Deserialize)]
        struct AccessToken {
            token: String,
            expires_at: String,
        }
        let jwt = self.jwt(SystemTime::now())?;
        let what = format!("find the GitHub App's installation on {owner}/{repo}");
        let response = self
            .endpoint
            .send(
                self.endpoint
                    .get(&format!("/repos/{owner}/{repo}/installation")),
                &jwt,
                &what,
            )
            .await?;
        if !response.status().is_success() {
            let status = response.status();
            let said = said(response).await;
            let advice = if status.as_u16() == 404 {
                format!(
                    " (install the GitHub App {} on {owner}/{repo}, or check the repository)",
                    self.app_id
                )
            } else {
                format!(
                    " (check [github] app_id {} and its private key)",
                    self.app_id
                )
            };
            return Err(GitHubError::Refused(format!(
                "GitHub refused to {what} (HTTP {}): {said}{advice}",
                status.as_u16()
            )));
        }
        let installation: Installation = self.endpoint.parse(response, &what).await?;
        let what = format!("make an installation token for {owner}/{repo}");
        let response = self
            .endpoint
            .send(
                self.endpoint
                    .post(&format!(
                        "/app/installations/{}/access_tokens",
                        installation.id
                    ))
                    .json(&json!({ "repositories": [repo] })),
                &jwt,
                &what,
            )
            .await?;
        let response = self.endpoint.success(response, &what).await?;
        let made: AccessToken = self.endpoint.parse(response, &what).await?;
        let expires_at = humantime::parse_rfc3339(&made.expires_at).map_err(|e| {
            GitHubError::Transient(format!(
                "GitHub's installation token expiry '{}' did not parse: {e}",
                made.expires_at
            ))
        })?;
        Ok(InstallationToken {
            token: made.token,
            expires_at,
            installation_id: installation.id,
        })
    }
}

fn fresh(token: &InstallationToken, now: SystemTime) -> bool {
    token
        .expires_at
        .duration_since(now)
        .is_ok_and(|left| left > REFRESH_BEFORE)
}

fn unix(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The RSA key pair in PEM text `pem`.
fn key_pair(pem: &str) -> Result<RsaKeyPair, KeyError> {
    let (label, der) = pem_block(pem)?;
    match label.as_str() {
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
        other => {
            return Err(KeyError(format!(
                "expected an RSA private key (BEGIN RSA PRIVATE KEY, as GitHub downloads it), \
                 found BEGIN {other}"
            )));
        }
    }
    .map_err(|e| KeyError(format!("not a usable RSA private key: {e}")))
}

/// The label and bytes of the first PEM block in `text`.
fn pem_block(text: &str) -> Result<(String, Vec<u8>), KeyError> {
    let missing = || KeyError("no PEM block (-----BEGIN ...-----) in the private key".into());
    let start = text.find("-----BEGIN ").ok_or_else(missing)?;
    let rest = &text[start + "-----BEGIN ".len()..];
    let (label, rest) = rest.split_once("-----").ok_or_else(missing)?;
    let end = format!("-----END {label}-----");
    let (body, _) = rest
        .split_once(&end)
        .ok_or_else(|| KeyError(format!("the PEM block has no {end} line")))?;
    let base64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let der = STANDARD
        .decode(base64)
        .map_err(|e| KeyError(format!("the PEM block is not base64: {e}")))?;
    Ok((label.to_owned(), der))
}

/// The claims of a JWT the app signed, checked against the app's public key: what a GitHub
/// stand-in checks before it hands out a token.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct JwtClaims {
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// The app id (or client id).
    pub iss: String,
}

/// The public key (DER `RSAPublicKey`) of the PEM private key `pem`.
pub fn public_key_of(pem: &str) -> Result<Vec<u8>, KeyError> {
    Ok(key_pair(pem)?.public().as_ref().to_vec())
}

/// Checks `jwt` as GitHub does: RS256 under `public_key` (DER `RSAPublicKey`), not expired at
/// `now`, not issued in the future, and living at most 10 minutes.
pub fn verify_jwt(public_key: &[u8], jwt: &str, now: SystemTime) -> Result<JwtClaims, String> {
    let malformed = || "A JSON web token could not be decoded".to_owned();
    let (signing_input, sig) = jwt.rsplit_once('.').ok_or_else(malformed)?;
    let (header, claims) = signing_input.split_once('.').ok_or_else(malformed)?;
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| malformed());
    let header: serde_json::Value =
        serde_json::from_slice(&decode(header)?).map_err(|_| malformed())?;
    if header.get("alg").and_then(|a| a.as_str()) != Some("RS256") {
        return Err("'alg' must be RS256".into());
    }
    signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, public_key)
        .verify(signing_input.as_bytes(), &decode(sig)?)
        .map_err(|_| "A JSON web token could not be decoded: bad signature".to_owned())?;
    let claims: JwtClaims = serde_json::from_slice(&decode(claims)?).map_err(|_| malformed())?;
    let now = unix(now);
    if claims.exp <= now {
        return Err(
            "'Expiration time' claim ('exp') must be a numeric value representing the \
                    future time at which the assertion expires"
                .into(),
        );
    }
    if claims.iat > now + 60 {
        return Err(
            "'Issued at' claim ('iat') must be an Integer representing the time that \
                    the assertion was issued"
                .into(),
        );
    }
    if claims.exp.saturating_sub(claims.iat) > 600 {
        return Err("'Expiration time' claim ('exp') is too far in the future".into());
    }
    Ok(claims)
}

#[cfg(test)]
#[path = "app/tests.rs"]
mod tests;
