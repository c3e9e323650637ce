//! A one-shot HTTP/1.1 server for provider tests: accepts one connection, captures the request,
//! writes a raw response (whole, chunked, or until close; optionally cut mid-stream), so the
//! real reqwest (streaming) path runs.

use std::{collections::BTreeMap, time::Duration};

use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    task::JoinHandle,
};

/// How the response body is sent.
pub(crate) enum Body {
    /// With a `Content-Length`.
    Full(String),
    /// `Transfer-Encoding: chunked`, one HTTP chunk per piece; `complete: false` drops the
    /// connection before the terminating chunk.
    Chunked {
        pieces: Vec<Vec<u8>>,
        complete: bool,
    },
    /// No length: the body, then the server closes the connection.
    UntilClose(Vec<u8>),
}

/// The response to write.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Body,
}

impl Reply {
    /// A JSON body with a length.
    pub(crate) fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: Body::Full(body.to_owned()),
        }
    }

    /// An event stream, chunked, the transcript split into pieces of `piece` bytes (at byte
    /// offsets: UTF-8 sequences and CRLFs get split too).
    pub(crate) fn sse_chunked(transcript: &str, piece: usize, complete: bool) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body: Body::Chunked {
                pieces: split_bytes(transcript, piece),
                complete,
            },
        }
    }

    /// An event stream without a length, ended by closing the connection.
    pub(crate) fn sse_until_close(transcript: &str) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body: Body::UntilClose(transcript.as_bytes().to_vec()),
        }
    }

    /// Adds a header.
    pub(crate) fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }
}

fn split_bytes(s: &str, size: usize) -> Vec<Vec<u8>> {
    s.as_bytes()
        .chunks(size.max(1))
        .map(<[u8]>::to_vec)
        .collect()
}

/// The request the server received.
#[derive(Debug)]
pub(crate) struct Captured {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Lower-cased names.
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) body: Value,
}

/// Serves one request with `reply`; returns the base URL (`http://127.0.0.1:port`) and the
/// captured request.
pub(crate) async fn serve_once(reply: Reply) -> (String, JoinHandle<Captured>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let captured = read_request(&mut socket).await;
        let reason = match reply.status {
            200 => "OK",
            429 => "Too Many Requests",
            500 => "Internal Server Error",
            _ => "Status",
        };
        let mut head = format!("HTTP/1.1 {} {reason}\r\n", reply.status);
        for (name, value) in &reply.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        // Write errors are ignored: a client may stop reading once it has what it needs.
        let _ = write_reply(&mut socket, head, &reply.body).await;
        socket.shutdown().await.ok();
        captured
    });
    (format!("http://{addr}"), handle)
}

async fn write_reply(
    socket: &mut tokio::net::TcpStream,
    mut head: String,
    body: &Body,
) -> std::io::Result<()> {
    match body {
        Body::Full(body) => {
            head.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
            socket.write_all(head.as_bytes()).await?;
        }
        Body::Chunked { pieces, complete } => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            for piece in pieces {
                let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                chunk.extend_from_slice(piece);
                chunk.extend_from_slice(b"\r\n");
                socket.write_all(&chunk).await?;
                socket.flush().await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if *complete {
                socket.write_all(b"0\r\n\r\n").await?;
            }
        }
        Body::UntilClose(body) => {
            head.push_str("connection: close\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body).await?;
        }
    }
    socket.flush().await
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Captured {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut tmp).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut tmp).await.unwrap();
        assert!(n > 0, "client closed mid-body");
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    Captured {
        method,
        path,
        headers,
        body,
    }
}
