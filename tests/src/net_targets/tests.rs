//! The targets against real clients: curl, pip and a raw TCP connect.

#![allow(clippy::unwrap_used)]

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use pretty_assertions::assert_eq;

use super::*;
use crate::process::{CmdOutput, clean_command, run_cmd};
use crate::wait::wait_until_blocking;

const T: Duration = Duration::from_secs(60);

fn run(program: &str, args: &[&str], home: Option<&Path>) -> CmdOutput {
    let mut cmd = clean_command(program);
    cmd.args(args);
    if let Some(home) = home {
        cmd.env("HOME", home);
    }
    run_cmd(cmd, None, T).unwrap()
}

fn curl(args: &[&str]) -> CmdOutput {
    run("curl", args, None)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn site_serves_its_page_and_counts_every_request() {
    let site = Site::start().unwrap();
    assert_eq!((site.hits(), site.connections()), (0, 0));
    let out = curl(&["-sS", &site.url()]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, SITE_PAGE);
    let missing = format!("{}nope", site.url());
    let out = curl(&["-sS", "-o", "/dev/null", "-w", "%{http_code}", &missing]);
    assert_eq!(out.stdout, "404", "{out}");
    assert_eq!((site.hits(), site.connections()), (2, 2));
}

#[test]
fn tls_site_serves_its_page_to_curl_trusting_its_world_readable_ca() {
    let site = TlsSite::start().unwrap();
    let ca = site.ca_cert();
    assert!(ca.starts_with("/tmp"), "{}", ca.display());
    assert_eq!(mode(ca), 0o644);
    assert_eq!(mode(ca.parent().unwrap()), 0o755);
    assert!(
        std::fs::read_to_string(ca)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );

    let out = curl(&["-sS", "--cacert", ca.to_str().unwrap(), &site.url()]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, SITE_PAGE);
    assert_eq!(site.hits(), 1);

    // Without the CA curl refuses the certificate: the connection arrived, no request did.
    let out = curl(&["-sS", &site.url()]);
    assert_eq!(out.code, 60, "certificate problem expected: {out}");
    assert_eq!(site.hits(), 1);
    assert_eq!(site.connections(), 2);
}

#[test]
fn package_index_serves_a_wheel_pip_downloads_and_installs() {
    let index = PackageIndex::start().unwrap();
    assert_eq!(index.wheel_sha256().len(), 64, "{}", index.wheel_sha256());
    let home = tempfile::tempdir().unwrap();
    let dest = home.path().join("downloads");
    let url = index.index_url();
    let pip = |args: &[&str]| {
        let mut all = vec!["-m", "pip", "--disable-pip-version-check"];
        all.extend_from_slice(args);
        run("/usr/bin/python3", &all, Some(home.path()))
    };
    let download = |project: &str| {
        let dest = dest.to_str().unwrap();
        pip(&[
            "download",
            "--no-deps",
            "--index-url",
            &url,
            "-d",
            dest,
            project,
        ])
    };

    let out = download(PROBE_PACKAGE);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains(PROBE_WHEEL), "{out}");
    assert_eq!(index.downloads(), 1);
    let wheel = dest.join(PROBE_WHEEL);
    assert!(wheel.is_file(), "{out}");

    // The wheel is a real one: pip installs it and Python imports it.
    let target = home.path().join("site");
    let out = pip(&[
        "install",
        "--no-index",
        "--no-deps",
        "--target",
        target.to_str().unwrap(),
        wheel.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out}");
    let import = format!(
        "import sys; sys.path.insert(0, {:?}); import probe_pkg; print(probe_pkg.GREETING)",
        target.display().to_string()
    );
    let out = run("/usr/bin/python3", &["-c", &import], None);
    assert_eq!(out.stdout.trim(), PROBE_WHEEL_GREETING, "{out}");

    // An unknown project is a 404 pip reports, and nothing more is downloaded.
    let out = download("no-such-pkg");
    assert_ne!(out.code, 0, "{out}");
    assert_eq!(index.downloads(), 1);
}

#[test]
fn tcp_counter_counts_raw_connections() {
    let counter = TcpCounter::start().unwrap();
    assert_eq!(counter.connections(), 0);
    let _a = TcpStream::connect(("127.0.0.1", counter.port())).unwrap();
    let _b = TcpStream::connect(("127.0.0.1", counter.port())).unwrap();
    wait_until_blocking(T, "two connections counted", || {
        Ok((counter.connections() == 2).then_some(()))
    })
    .unwrap();
}
