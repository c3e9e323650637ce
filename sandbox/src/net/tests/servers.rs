//! Real loopback counterparts for the proxy tests: an HTTP site that records the request heads
//! it got, an echo server that reports EOF, a TLS site (rustls, self-signed by rcgen), and a raw
//! HTTP/1.1 response reader for clients that speak to the proxy by hand.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// Aborts its task when dropped.
pub(super) struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A path's content type and bytes.
pub(super) type Files = HashMap<String, (&'static str, Vec<u8>)>;

/// An HTTP site answering with its files, other paths with `hello from <path>`, each with
/// `Connection: close`.
pub(super) struct Site {
    pub(super) addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    connections: Arc<Mutex<usize>>,
    _task: Task,
}

impl Site {
    pub(super) async fn start() -> Site {
        Site::serve(None, Files::new()).await
    }

    /// A site serving `files`.
    pub(super) async fn with_files(files: Files) -> Site {
        Site::serve(None, files).await
    }

    /// The same site over TLS.
    pub(super) async fn start_tls() -> Site {
        Site::serve(
            Some(TlsAcceptor::from(Arc::new(tls_config()))),
            Files::new(),
        )
        .await
    }

    async fn serve(tls: Option<TlsAcceptor>, files: Files) -> Site {
        let files = Arc::new(files);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (seen, count) = (Arc::clone(&heads), Arc::clone(&connections));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                *count.lock().unwrap() += 1;
                let (seen, tls, files) = (Arc::clone(&seen), tls.clone(), Arc::clone(&files));
                tokio::spawn(async move {
                    match tls {
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                answer(stream, seen, &files).await;
                            }
                        }
                        None => answer(stream, seen, &files).await,
                    }
                });
            }
        });
        Site {
            addr,
            heads,
            connections,
            _task: Task(task),
        }
    }

    /// The request heads received so far.
    pub(super) fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    /// How many TCP connections were accepted.
    pub(super) fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    seen: Arc<Mutex<Vec<String>>>,
    files: &Files,
) {
    let Some(head) = read_head(&mut stream).await else {
        return;
    };
    let path = head.split(' ').nth(1).unwrap_or("?").to_owned();
    seen.lock().unwrap().push(head);
    let (content_type, body) = match files.get(&path) {
        Some((content_type, body)) => (*content_type, body.clone()),
        None => ("text/plain", format!("hello from {path}").into_bytes()),
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: {content_type}\r\n\
         Connection: close\r\nKeep-Alive: timeout=5\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(&[head.as_bytes(), &body].concat()).await;
    let _ = stream.shutdown().await;
}

/// Reads up to the end of an HTTP head (`\r\n\r\n`); `None` on EOF before it.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Reads one HTTP/1.1 response with a `Content-Length`: (head, body).
pub(super) async fn read_response<S: AsyncRead + Unpin>(stream: &mut S) -> (String, String) {
    let head = read_head(stream).await.expect("a response head");
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    (head, String::from_utf8(body).unwrap())
}

/// An echo server for one connection; the receiver gets `()` when the far side closed it.
pub(super) async fn echo() -> (SocketAddr, mpsc::Receiver<()>, Task) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (eof, seen_eof) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut buf = [0u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if stream.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = eof.send(()).await;
    });
    (addr, seen_eof, Task(task))
}

fn tls_config() -> ServerConfig {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap()
}
