//! A counting TCP relay: listens on a loopback port, forwards every connection to an upstream
//! loopback port (a thread per direction), and counts the JSON-RPC methods `tools/list` and
//! `tools/call` in the bytes clients send, so a test can tell how many listings and calls
//! reached the MCP server behind it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use anyhow::Context;

/// The method markers counted, with and without a space after the colon (JSON encoders
/// differ), each with the counter it feeds: 0 = `tools/list`, 1 = `tools/call`.
const MARKERS: [(&[u8], usize); 4] = [
    (br#""method":"tools/list""#, 0),
    (br#""method": "tools/list""#, 0),
    (br#""method":"tools/call""#, 1),
    (br#""method": "tools/call""#, 1),
];

/// How many requests of each kind clients sent through a [`Relay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct McpCounts {
    /// `tools/list` requests.
    pub lists: usize,
    /// `tools/call` requests.
    pub calls: usize,
}

/// State shared by the relay's threads.
#[derive(Default)]
struct Shared {
    counts: [AtomicUsize; 2],
    stopping: AtomicBool,
    /// Both ends of every open connection, shut down when the relay stops.
    open: Mutex<Vec<TcpStream>>,
}

/// The relay; stops accepting and cuts every connection on drop.
pub(crate) struct Relay {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `127.0.0.1:<free port>` and forwards to `127.0.0.1:upstream`.
    pub(crate) fn start(upstream: u16) -> anyhow::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the relay")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let state = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("mcp-relay".into())
            .spawn(move || accept_loop(&listener, upstream, &state))
            .context("starting the relay thread")?;
        Ok(Relay {
            port,
            shared,
            accept: Some(accept),
        })
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn counts(&self) -> McpCounts {
        McpCounts {
            lists: self.shared.counts[0].load(Ordering::SeqCst),
            calls: self.shared.counts[1].load(Ordering::SeqCst),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stopping`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let open = self.shared.open.lock().unwrap_or_else(|e| e.into_inner());
        for stream in open.iter() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, upstream: u16, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
            // The server is down (killed by the test): the client sees the connection close.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let (Ok(client_w), Ok(server_w)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        {
            let mut open = shared.open.lock().unwrap_or_else(|e| e.into_inner());
            open.retain(|s| s.peer_addr().is_ok());
            open.extend(client.try_clone().ok());
            open.extend(server.try_clone().ok());
        }
        let counting = Arc::clone(shared);
        let _ = thread::Builder::new()
            .name("mcp-relay-up".into())
            .spawn(move || copy(client, server_w, Some(&counting)));
        let _ = thread::Builder::new()
            .name("mcp-relay-down".into())
            .spawn(move || copy(server, client_w, None));
    }
}

/// Copies `from` to `to` until either end closes, counting the markers when `counting`;
/// then shuts `to` down for writing so the peer sees the end too.
fn copy(mut from: TcpStream, mut to: TcpStream, counting: Option<&Shared>) {
    let keep = MARKERS.iter().map(|(m, _)| m.len()).max().unwrap_or(1) - 1;
    let mut window: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(shared) = counting {
            // The window is the last `keep` bytes of earlier reads (shorter than any marker,
            // so no marker counted before lies wholly inside it) plus this read.
            window.extend_from_slice(&buf[..n]);
            for (marker, counter) in MARKERS {
                let found = window
                    .windows(marker.len())
                    .filter(|w| *w == marker)
                    .count();
                shared.counts[counter].fetch_add(found, Ordering::SeqCst);
            }
            let cut = window.len().saturating_sub(keep);
            window.drain(..cut);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_split_across_reads_are_counted_once() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = Relay::start(upstream.local_addr().unwrap().port()).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", relay.port())).unwrap();
        let (mut server, _) = upstream.accept().unwrap();
        let body = br#"{"method":"tools/list"}{"method": "tools/call"}{"method":"tools/call"}"#;
        for piece in body.chunks(7) {
            client.write_all(piece).unwrap();
            client.flush().unwrap();
            thread::sleep(std::time::Duration::from_millis(5));
        }
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        assert_eq!(got, body.to_vec());
        assert_eq!(relay.counts(), McpCounts { lists: 1, calls: 2 });
    }
}
