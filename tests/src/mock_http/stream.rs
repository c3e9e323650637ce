//! Delivering an answer: whole, as an SSE transcript, paced, with keep-alives or cut.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::header::HeaderValue;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
// `baton-tests` has no direct `futures`/`tokio-stream` dependency; tonic's
// codegen re-export (public API, reached through `temporalio-client`) gives
// us a `Stream` over a tokio channel, which is all `Body::from_stream` needs.
use temporalio_client::tonic::codegen::tokio_stream::wrappers::ReceiverStream;

use super::*;

/// Interval between two keep-alive comments of a [`MockResponse::slow_stream`].
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// The SSE keep-alive record sent by [`MockResponse::slow_stream`].
const KEEPALIVE_RECORD: &str = ": ping\n\n";

pub(super) async fn respond(
    flavor: Flavor,
    resp: &MockResponse,
    wants_stream: bool,
    request: &Value,
) -> Response {
    let status = StatusCode::from_u16(resp.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let stream = wants_stream && status.is_success() && flavor.is_streamable(&resp.body);
    match (&resp.mode, stream) {
        (ResponseMode::Complete, true) => {
            let t = flavor.transcript(&resp.body, request);
            sse_response(status, None, t.records, false)
        }
        (ResponseMode::Complete, false) => json_response(status, &resp.body),
        (ResponseMode::Cut, true) => {
            let mut t = flavor.transcript(&resp.body, request);
            t.records.truncate(t.cut_at);
            sse_response(status, None, t.records, true)
        }
        (ResponseMode::Cut, false) => {
            let text = resp.body.to_string();
            let half = text.len() / 2;
            let cut = (0..=half)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            let total = text.len();
            let mut response = streamed_response(status, None, vec![text[..cut].to_owned()], true);
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(total));
            response
        }
        (ResponseMode::Slow { total }, true) => {
            let t = flavor.transcript(&resp.body, request);
            sse_response(status, Some(*total), t.records, false)
        }
        (ResponseMode::Paced { total }, true) => {
            let t = flavor.transcript(&resp.body, request);
            paced_sse_response(status, *total, t.records)
        }
        (ResponseMode::Slow { total } | ResponseMode::Paced { total }, false) => {
            tokio::time::sleep(*total).await;
            json_response(status, &resp.body)
        }
        (ResponseMode::StreamError { error }, true) => {
            let mut t = flavor.transcript(&resp.body, request);
            t.records.truncate(t.cut_at);
            t.records.push(flavor.error_record(error));
            sse_response(status, None, t.records, false)
        }
        (ResponseMode::StreamError { error }, false) => {
            json_response(status_for_error(error), error)
        }
    }
}

/// 529 for overloaded errors, 429 for rate limits, else 500.
fn status_for_error(error: &Value) -> StatusCode {
    let kind = error
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let code = error
        .pointer("/error/code")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind == "overloaded_error" {
        StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
    } else if kind == "rate_limit_error" || code == "rate_limit_exceeded" {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn sse_response(
    status: StatusCode,
    keepalive: Option<Duration>,
    records: Vec<String>,
    abort: bool,
) -> Response {
    event_stream(streamed_response(status, keepalive, records, abort))
}

/// `response` as an event stream (its content type and no caching).
fn event_stream(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// An event stream whose `records` are written one by one, evenly over `total`.
fn paced_sse_response(status: StatusCode, total: Duration, records: Vec<String>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        let start = Instant::now();
        let n = records.len().max(1) as u32;
        for (i, record) in records.into_iter().enumerate() {
            tokio::time::sleep_until((start + total * i as u32 / n).into()).await;
            if tx.send(Ok(Bytes::from(record))).await.is_err() {
                return; // client went away
            }
        }
    });
    event_stream(
        Response::builder()
            .status(status)
            .body(Body::from_stream(ReceiverStream::new(rx)))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
    )
}

/// A response whose body is written piece by piece by a task: first
/// keep-alive comments for `keepalive` (if any), then `parts`, then — if
/// `abort` — an error that makes hyper drop the connection without a clean
/// end of body (no terminating chunk).
fn streamed_response(
    status: StatusCode,
    keepalive: Option<Duration>,
    parts: Vec<String>,
    abort: bool,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        if let Some(total) = keepalive {
            let end = Instant::now() + total;
            loop {
                if tx
                    .send(Ok(Bytes::from_static(KEEPALIVE_RECORD.as_bytes())))
                    .await
                    .is_err()
                {
                    return; // client went away
                }
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(KEEPALIVE_INTERVAL)).await;
            }
        }
        for part in parts {
            if tx.send(Ok(Bytes::from(part))).await.is_err() {
                return;
            }
        }
        if abort {
            // Let hyper flush what was sent before tearing the connection down.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = tx
                .send(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "mock: connection cut",
                )))
                .await;
        }
    });
    Response::builder()
        .status(status)
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
