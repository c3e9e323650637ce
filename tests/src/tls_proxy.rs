//! A TLS-terminating TCP proxy in front of a plaintext dev server, and a throwaway PKI for it.
//!
//! `temporal server start-dev` only speaks plaintext gRPC. [`TlsProxy`] listens on
//! `127.0.0.1:0`, does the TLS handshake with rustls (ALPN `h2`, optionally requiring a client
//! certificate signed by a given CA: mutual TLS), then copies the decrypted bytes to the dev
//! server's port and back. gRPC over TLS and gRPC over h2c with prior knowledge are the same
//! HTTP/2 bytes, so the server answers as if the client had connected directly.
//!
//! The proxy sees TCP and TLS, not HTTP/2: it cannot check an API key (an `authorization`
//! header inside HPACK-compressed HTTP/2 frames). Tests only show that a client with an API key
//! connects over TLS; the dev server ignores the header.
//!
//! [`TestPki`] makes a CA, a server certificate for `localhost`/`127.0.0.1`, a client
//! certificate signed by the CA and one signed by an unrelated CA (rcgen, ECDSA P-256), and
//! writes them as PEM files for `TEMPORAL_TLS_*_PATH` settings.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

use anyhow::{Context, anyhow};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tempfile::TempDir;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// PEM files of a throwaway PKI (removed on drop).
pub struct TestPki {
    dir: TempDir,
    /// The CA that signed the server and client certificates (`TEMPORAL_TLS_SERVER_CA_CERT_PATH`,
    /// and the CA the proxy trusts for client certificates).
    pub ca_cert: PathBuf,
    /// Server certificate for `localhost` and `127.0.0.1`.
    pub server_cert: PathBuf,
    /// The server certificate's private key (PKCS#8).
    pub server_key: PathBuf,
    /// Client certificate (CN `baton-test-client`) signed by [`TestPki::ca_cert`].
    pub client_cert: PathBuf,
    /// The client certificate's private key (PKCS#8).
    pub client_key: PathBuf,
    /// A client certificate signed by another CA, which the proxy does not trust.
    pub rogue_client_cert: PathBuf,
    /// The rogue certificate's private key.
    pub rogue_client_key: PathBuf,
}

impl TestPki {
    /// Generates the certificates into a fresh temp dir.
    pub fn generate() -> anyhow::Result<TestPki> {
        let dir = tempfile::Builder::new()
            .prefix("baton-pki-")
            .tempdir()
            .context("creating PKI temp dir")?;
        let ca = new_ca("baton test CA")?;
        let rogue_ca = new_ca("someone else's CA")?;
        let (server_cert, server_key) = leaf(
            &ca,
            "localhost",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_cert, client_key) = leaf(
            &ca,
            "baton-test-client",
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let (rogue_cert, rogue_key) = leaf(
            &rogue_ca,
            "baton-test-client",
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let write = |name: &str, pem: &str| -> anyhow::Result<PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        Ok(TestPki {
            ca_cert: write("ca.pem", &ca.pem())?,
            server_cert: write("server.pem", &server_cert)?,
            server_key: write("server.key", &server_key)?,
            client_cert: write("client.pem", &client_cert)?,
            client_key: write("client.key", &client_key)?,
            rogue_client_cert: write("rogue-client.pem", &rogue_cert)?,
            rogue_client_key: write("rogue-client.key", &rogue_key)?,
            dir,
        })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The DER bytes of [`TestPki::client_cert`], to compare with [`TlsProxy::client_certs`].
    pub fn client_cert_der(&self) -> anyhow::Result<Vec<u8>> {
        let pem = std::fs::read(&self.client_cert)?;
        Ok(CertificateDer::from_pem_slice(&pem)
            .map_err(|e| anyhow!("parsing the client certificate: {e}"))?
            .to_vec())
    }
}

fn new_ca(name: &str) -> anyhow::Result<CertifiedIssuer<'static, KeyPair>> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(CertifiedIssuer::self_signed(params, KeyPair::generate()?)?)
}

/// A certificate signed by `ca`: (certificate PEM, private key PEM).
fn leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    common_name: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> anyhow::Result<(String, String)> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &**ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[derive(Default)]
struct Stats {
    /// Completed TLS handshakes.
    handshakes: AtomicUsize,
    /// Completed handshakes where the client presented a certificate (verified against the
    /// client CA: rustls refuses the handshake otherwise).
    with_client_cert: AtomicUsize,
    /// First certificate of each client that presented one, in arrival order (deduplicated).
    client_certs: Mutex<Vec<Vec<u8>>>,
    /// Handshakes that failed, with rustls's reason.
    failures: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A TLS-terminating TCP proxy to a plaintext upstream (see the module docs). Runs on its own
/// thread and tokio runtime; stopped (connections dropped) on drop.
pub struct TlsProxy {
    addr: SocketAddr,
    stats: Arc<Stats>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TlsProxy {
    /// TLS with the server certificate of `pki`, no client certificate asked for.
    pub fn tls(upstream: &str, pki: &TestPki) -> anyhow::Result<TlsProxy> {
        Self::start(upstream, &pki.server_cert, &pki.server_key, None)
    }

    /// Mutual TLS: like [`TlsProxy::tls`], and the client must present a certificate signed by
    /// `pki`'s CA.
    pub fn mtls(upstream: &str, pki: &TestPki) -> anyhow::Result<TlsProxy> {
        Self::start(
            upstream,
            &pki.server_cert,
            &pki.server_key,
            Some(&pki.ca_cert),
        )
    }

    /// Listens on `127.0.0.1:0` with `cert`/`key` (PEM files), requiring client certificates
    /// signed by `client_ca` when given, and forwards every connection to `upstream`
    /// (`host:port`).
    pub fn start(
        upstream: &str,
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> anyhow::Result<TlsProxy> {
        let acceptor = TlsAcceptor::from(Arc::new(server_config(cert, key, client_ca)?));
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding the TLS proxy")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Stats::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the TLS proxy runtime")?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let upstream = upstream.to_owned();
        let thread_stats = Arc::clone(&stats);
        let thread = thread::Builder::new()
            .name(format!("tls-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            eprintln!("TLS proxy: cannot register listener: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        () = serve(listener, acceptor, upstream, thread_stats) => {}
                        _ = rx => {}
                    }
                });
                // Dropping the runtime aborts the connection tasks.
            })
            .context("spawning the TLS proxy thread")?;
        Ok(TlsProxy {
            addr,
            stats,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// `"127.0.0.1:<port>"`, for `TEMPORAL_ADDRESS`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// The socket address the proxy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Number of completed TLS handshakes.
    pub fn handshakes(&self) -> usize {
        self.stats.handshakes.load(Ordering::SeqCst)
    }

    /// Number of completed handshakes with a verified client certificate.
    pub fn verified_client_handshakes(&self) -> usize {
        self.stats.with_client_cert.load(Ordering::SeqCst)
    }

    /// The distinct client certificates (DER) seen in completed handshakes.
    pub fn client_certs(&self) -> Vec<Vec<u8>> {
        lock(&self.stats.client_certs).clone()
    }

    /// Why handshakes failed (rustls's messages), in order.
    pub fn handshake_failures(&self) -> Vec<String> {
        lock(&self.stats.failures).clone()
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub(crate) fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> anyhow::Result<ServerConfig> {
    // Explicit provider: rustls is built with both ring and aws-lc-rs in this workspace, so
    // there is no process-wide default to rely on.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the key {}", key.display()))?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("reading {}", ca.display()))?
            {
                roots
                    .add(c.with_context(|| format!("parsing {}", ca.display()))?)
                    .context("adding the client CA")?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("building the client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .context("server certificate and key")?;
    // gRPC clients (tonic) insist on HTTP/2 being negotiated.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

async fn serve(listener: TcpListener, acceptor: TlsAcceptor, upstream: String, stats: Arc<Stats>) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                eprintln!("TLS proxy: accept failed: {e}");
                continue;
            }
        };
        tokio::spawn(proxy(
            tcp,
            acceptor.clone(),
            upstream.clone(),
            Arc::clone(&stats),
        ));
    }
}

async fn proxy(tcp: TcpStream, acceptor: TlsAcceptor, upstream: String, stats: Arc<Stats>) {
    let mut tls = match acceptor.accept(tcp).await {
        Ok(tls) => tls,
        Err(e) => {
            lock(&stats.failures).push(e.to_string());
            return;
        }
    };
    stats.handshakes.fetch_add(1, Ordering::SeqCst);
    if let Some(first) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
        stats.with_client_cert.fetch_add(1, Ordering::SeqCst);
        let mut seen = lock(&stats.client_certs);
        if !seen.iter().any(|c| c.as_slice() == first.as_ref()) {
            seen.push(first.to_vec());
        }
    }
    let mut up = match TcpStream::connect(&upstream).await {
        Ok(up) => up,
        Err(e) => {
            eprintln!("TLS proxy: cannot reach {upstream}: {e}");
            return;
        }
    };
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
}
