//! `baton codec-server`: Temporal's remote codec endpoint over baton's payload codec, so the
//! `temporal` CLI (`--codec-endpoint`) and the Web UI (Settings > Codec Server) show decrypted
//! payloads to those who can reach it (and hold the token, when one is set).
//!
//! `POST [/{namespace}]/encode` and `POST [/{namespace}]/decode` take and return
//! `{"payloads": [...]}` in proto3 JSON (`metadata` values and `data` base64). Browsers get CORS
//! answers for the configured origins only; preflights (`OPTIONS`) need no token.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{DefaultBodyLimit, State},
    http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, header},
};
use baton_codec::BatonCodec;
use serde_json::json;
use temporalio_common::protos::temporal::api::common::v1::Payloads;

use crate::{cli::CodecServerArgs, connect::codec_keys, exit::Exit};

/// Largest request body accepted (a batch of payloads).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Headers a browser may send (the Web UI sends `X-Namespace`, and `Authorization` when it
/// passes the user's access token).
const ALLOW_HEADERS: &str = "Content-Type, Authorization, X-Namespace";
/// How long a browser may cache a preflight answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "600";

/// `baton codec-server`.
pub(crate) async fn run(args: CodecServerArgs) -> Result<i32, Exit> {
    let keys = codec_keys()?.ok_or_else(|| {
        Exit::usage(format!(
            "the codec server needs the keys the workers use: set {} (docs/src/security/codec.md)",
            baton_codec::KEYS_ENV
        ))
    })?;
    let ids: Vec<&str> = keys.ids().collect();
    let summary = format!("active key '{}', keys {}", keys.active_id(), ids.join(", "));
    let service = Arc::new(CodecService {
        codec: BatonCodec::new(keys),
        token: args.token.filter(|t| !t.is_empty()),
        origins: args.cors_origin,
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Exit::infra(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr: SocketAddr = listener.local_addr().unwrap_or(args.listen);
    eprintln!(
        "codec server on http://{addr} ({summary}; token {}; CORS origins: {})",
        if service.token.is_some() {
            "required"
        } else {
            "not required"
        },
        if service.origins.is_empty() {
            "none".to_owned()
        } else {
            service.origins.join(", ")
        }
    );
    let app = Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(service);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|e| Exit::infra(format!("codec server failed: {e}")))?;
    Ok(crate::exit::COMPLETED)
}

async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

struct CodecService {
    codec: BatonCodec,
    token: Option<String>,
    origins: Vec<String>,
}

/// Which way a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Encode,
    Decode,
}

async fn handle(
    State(service): State<Arc<CodecService>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let (status, extra, text) = service.answer(&method, uri.path(), &headers, &body);
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    *response.headers_mut() = extra;
    response
}

impl CodecService {
    /// The whole exchange, without I/O: status, response headers, body.
    fn answer(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> (StatusCode, HeaderMap, String) {
        let mut out = self.cors(headers);
        let Some(direction) = route(path) else {
            return (StatusCode::NOT_FOUND, out, "not found\n".to_owned());
        };
        if method == Method::OPTIONS {
            out.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("POST, OPTIONS"),
            );
            out.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(ALLOW_HEADERS),
            );
            out.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static(PREFLIGHT_MAX_AGE),
            );
            return (StatusCode::NO_CONTENT, out, String::new());
        }
        if method != Method::POST {
            out.insert(header::ALLOW, HeaderValue::from_static("POST, OPTIONS"));
            return (StatusCode::METHOD_NOT_ALLOWED, out, "use POST\n".to_owned());
        }
        if !self.authorized(headers) {
            out.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return (
                StatusCode::UNAUTHORIZED,
                out,
                "missing or wrong bearer token (Authorization: Bearer <token>)\n".to_owned(),
            );
        }
        let request: Payloads = match serde_json::from_slice(body) {
            Ok(p) => p,
            Err(e) => {
                return (
                    StatusCode::BAD_REQUEST,
                    out,
                    format!("expected {{\"payloads\": [...]}} in proto3 JSON: {e}\n"),
                );
            }
        };
        let result = match direction {
            Direction::Encode => self.codec.encode_all(request.payloads),
            Direction::Decode => self.codec.decode_all(request.payloads),
        };
        match result {
            Ok(payloads) => {
                out.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                (
                    StatusCode::OK,
                    out,
                    json!({ "payloads": payloads }).to_string(),
                )
            }
            Err(e) => (StatusCode::BAD_REQUEST, out, format!("{e}\n")),
        }
    }

    /// CORS response headers: only for a configured origin (or any, with `*`).
    fn cors(&self, headers: &HeaderMap) -> HeaderMap {
        let mut out = HeaderMap::new();
        let Some(origin) = headers.get(header::ORIGIN) else {
            return out;
        };
        let origin_text = origin.to_str().unwrap_or_default();
        let any = self.origins.iter().any(|o| o == "*");
        if !any && !self.origins.iter().any(|o| o == origin_text) {
            return out;
        }
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        out.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        out.insert(header::VARY, HeaderValue::from_static("Origin"));
        out
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .unwrap_or_default();
        constant_time_eq(given.trim().as_bytes(), token.as_bytes())
    }
}

/// `/encode`, `/decode`, `/{namespace}/encode`, `/{namespace}/decode` (a trailing `/` is fine).
fn route(path: &str) -> Option<Direction> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let last = match segments.as_slice() {
        [last] | [_, last] => *last,
        _ => return None,
    };
    match last {
        "encode" => Some(Direction::Encode),
        "decode" => Some(Direction::Decode),
        _ => None,
    }
}

/// Compares without stopping at the first difference (the token's length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_codec::Keyring;
    use serde_json::Value;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn service(token: Option<&str>, origins: &[&str]) -> CodecService {
        CodecService {
            codec: BatonCodec::new(Keyring::parse(&format!("k1={K1}"), None).unwrap().unwrap()),
            token: token.map(str::to_owned),
            origins: origins.iter().map(|o| o.to_string()).collect(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    /// `"hello"` as a json/plain payload in proto3 JSON.
    const PLAIN: &str =
        r#"{"payloads":[{"metadata":{"encoding":"anNvbi9wbGFpbg=="},"data":"ImhlbGxvIg=="}]}"#;

    #[test]
    fn encode_then_decode_round_trips_with_or_without_namespace() {
        let s = service(None, &[]);
        let (status, h, body) = s.answer(
            &Method::POST,
            "/default/encode",
            &HeaderMap::new(),
            PLAIN.as_bytes(),
        );
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(h[header::CONTENT_TYPE], "application/json");
        let encoded: Value = serde_json::from_str(&body).unwrap();
        // "binary/encrypted" and "k1", base64.
        assert_eq!(
            encoded["payloads"][0]["metadata"]["encoding"],
            "YmluYXJ5L2VuY3J5cHRlZA=="
        );
        assert_eq!(
            encoded["payloads"][0]["metadata"]["encryption-key-id"],
            "azE="
        );
        let (status, _, body) =
            s.answer(&Method::POST, "/decode", &HeaderMap::new(), body.as_bytes());
        assert_eq!(status, StatusCode::OK, "{body}");
        let decoded: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(decoded, serde_json::from_str::<Value>(PLAIN).unwrap());
    }

    #[test]
    fn empty_batches_and_plain_payloads_decode() {
        let s = service(None, &[]);
        let (status, _, body) = s.answer(&Method::POST, "/decode/", &HeaderMap::new(), b"{}");
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, r#"{"payloads":[]}"#)
        );
        let (_, _, body) = s.answer(
            &Method::POST,
            "/ns/decode",
            &HeaderMap::new(),
            PLAIN.as_bytes(),
        );
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            serde_json::from_str::<Value>(PLAIN).unwrap()
        );
    }

    #[test]
    fn token_is_required_when_set_but_not_for_preflight() {
        let s = service(Some("s3cret"), &["http://ui.example"]);
        for auth in [None, Some("Bearer wrong"), Some("s3cret")] {
            let h = match auth {
                Some(a) => headers(&[("authorization", a)]),
                None => HeaderMap::new(),
            };
            let (status, _, _) = s.answer(&Method::POST, "/decode", &h, PLAIN.as_bytes());
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
        }
        let h = headers(&[("authorization", "Bearer s3cret")]);
        let (status, _, _) = s.answer(&Method::POST, "/decode", &h, PLAIN.as_bytes());
        assert_eq!(status, StatusCode::OK);
        let h = headers(&[("origin", "http://ui.example")]);
        let (status, out, _) = s.answer(&Method::OPTIONS, "/default/decode", &h, b"");
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(
            out[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "http://ui.example"
        );
        assert_eq!(out[header::ACCESS_CONTROL_ALLOW_HEADERS], ALLOW_HEADERS);
    }

    #[test]
    fn cors_only_for_configured_origins() {
        let s = service(None, &["http://localhost:8233"]);
        let h = headers(&[("origin", "http://evil.example")]);
        let (_, out, _) = s.answer(&Method::OPTIONS, "/decode", &h, b"");
        assert!(out.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
        let h = headers(&[("origin", "http://localhost:8233")]);
        let (_, out, _) = s.answer(&Method::POST, "/decode", &h, PLAIN.as_bytes());
        assert_eq!(
            out[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "http://localhost:8233"
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let s = service(None, &[]);
        let (status, _, _) = s.answer(&Method::POST, "/a/b/decode", &HeaderMap::new(), b"{}");
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _, _) = s.answer(&Method::GET, "/decode", &HeaderMap::new(), b"");
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, _, body) = s.answer(&Method::POST, "/decode", &HeaderMap::new(), b"nope");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("payloads"), "{body}");
        // Encrypted with a key this server lacks ("k9").
        let other = BatonCodec::new(Keyring::parse(&format!("k9={K1}"), None).unwrap().unwrap());
        let sealed = other
            .encode_all(serde_json::from_str::<Payloads>(PLAIN).unwrap().payloads)
            .unwrap();
        let body_in = json!({ "payloads": sealed }).to_string();
        let (status, _, body) = s.answer(
            &Method::POST,
            "/decode",
            &HeaderMap::new(),
            body_in.as_bytes(),
        );
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.contains("'k9'") && body.contains("BATON_CODEC_KEYS"),
            "{body}"
        );
    }
}
