//! A PEP 503 "simple" package index on loopback with one package, [`PROBE_PACKAGE`], whose
//! only file is a real wheel built when the index starts (by `/usr/bin/python3` and its
//! `zipfile`), linked with its `#sha256=` so pip checks what it downloaded.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;

use super::{Served, not_found};
use crate::process::{clean_command, run_cmd};

/// The package the index serves, as `pip download` names it.
pub const PROBE_PACKAGE: &str = "probe-pkg";

/// The file name of its wheel (version 0.1, pure Python).
pub const PROBE_WHEEL: &str = "probe_pkg-0.1-py3-none-any.whl";

/// The value of `probe_pkg.GREETING` once the wheel is installed.
pub const PROBE_WHEEL_GREETING: &str = "probe-pkg 0.1 from the baton test index";

/// The Python interpreter that builds the wheel (the system one, which the sandbox user can
/// run too).
const PYTHON: &str = "/usr/bin/python3";

/// Builds the wheel at `argv[1]` (module, METADATA, WHEEL, RECORD with hashes) and prints its
/// SHA-256 in hex.
const BUILD_WHEEL: &str = r#"
import base64, hashlib, sys, zipfile
info = "probe_pkg-0.1.dist-info"
files = {
    "probe_pkg/__init__.py": "GREETING = %r\n" % sys.argv[2],
    info + "/METADATA": "Metadata-Version: 2.1\nName: probe-pkg\nVersion: 0.1\n"
        "Summary: A wheel the baton tests fetch through the proxy\n",
    info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: baton-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
}
def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join("%s,sha256=%s,%d\n" % (name, digest(text.encode()), len(text.encode()))
                 for name, text in files.items())
files[info + "/RECORD"] = record + info + "/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as wheel:
    for name, text in files.items():
        wheel.writestr(name, text)
with open(sys.argv[1], "rb") as built:
    print(hashlib.sha256(built.read()).hexdigest())
"#;

struct Wheel {
    bytes: Vec<u8>,
    sha256: String,
    downloads: AtomicUsize,
}

/// A PEP 503 simple index on 127.0.0.1: `/simple/` lists [`PROBE_PACKAGE`],
/// `/simple/probe-pkg/` links `/files/`[`PROBE_WHEEL`]`#sha256=<hex>`, and that path serves
/// the wheel. Stopped on drop.
pub struct PackageIndex {
    served: Served,
    wheel: Arc<Wheel>,
}

impl PackageIndex {
    /// Builds the wheel and starts the index on a free port.
    pub fn start() -> anyhow::Result<PackageIndex> {
        let wheel = Arc::new(build_wheel()?);
        let app = Router::new()
            .route("/simple/", get(root_page))
            .route(&format!("/simple/{PROBE_PACKAGE}/"), get(project_page))
            .route(&format!("/files/{PROBE_WHEEL}"), get(wheel_file))
            .fallback(not_found)
            .with_state(Arc::clone(&wheel));
        Ok(PackageIndex {
            served: Served::start("package index", app, None)?,
            wheel,
        })
    }

    /// `http://127.0.0.1:<port>/simple/`, for `pip --index-url`.
    pub fn index_url(&self) -> String {
        format!("http://127.0.0.1:{}/simple/", self.port())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.served.port()
    }

    /// The wheel's SHA-256 (hex), as the project page links it.
    pub fn wheel_sha256(&self) -> &str {
        &self.wheel.sha256
    }

    /// How many times the wheel was downloaded.
    pub fn downloads(&self) -> usize {
        self.wheel.downloads.load(Ordering::SeqCst)
    }

    /// HTTP requests that reached it (any path).
    pub fn requests(&self) -> usize {
        self.served.requests()
    }
}

async fn root_page() -> Html<String> {
    Html(format!(
        "<!DOCTYPE html>\n<html><body>\n<a href=\"/simple/{PROBE_PACKAGE}/\">{PROBE_PACKAGE}</a>\n</body></html>\n"
    ))
}

async fn project_page(State(wheel): State<Arc<Wheel>>) -> Html<String> {
    Html(format!(
        "<!DOCTYPE html>\n<html><body>\n<a href=\"/files/{PROBE_WHEEL}#sha256={}\">{PROBE_WHEEL}</a>\n</body></html>\n",
        wheel.sha256
    ))
}

async fn wheel_file(State(wheel): State<Arc<Wheel>>) -> impl IntoResponse {
    wheel.downloads.fetch_add(1, Ordering::SeqCst);
    (
        [(header::CONTENT_TYPE, "application/octet-stream")],
        wheel.bytes.clone(),
    )
}

fn build_wheel() -> anyhow::Result<Wheel> {
    let dir = tempfile::tempdir().context("creating a directory for the wheel")?;
    let path = dir.path().join(PROBE_WHEEL);
    let mut cmd = clean_command(PYTHON);
    cmd.arg("-c")
        .arg(BUILD_WHEEL)
        .arg(&path)
        .arg(PROBE_WHEEL_GREETING);
    let out = run_cmd(cmd, None, Duration::from_secs(60))
        .with_context(|| format!("running {PYTHON} to build {PROBE_WHEEL}"))?;
    if !out.success() {
        bail!("building {PROBE_WHEEL} with {PYTHON} failed (is python3 installed?): {out}");
    }
    let bytes =
        std::fs::read(&path).with_context(|| format!("reading the built {}", path.display()))?;
    Ok(Wheel {
        bytes,
        sha256: out.stdout.trim().to_owned(),
        downloads: AtomicUsize::new(0),
    })
}
