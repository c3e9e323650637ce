//! Network for tools (`baton-bench network`): what the network namespace and the
//! worker's proxy cost a tool call.
//!
//! 1. **Start-up**: one tool process as the shell tool starts it (`Sandbox::prepare` on a
//!    blocking thread, `apply`, spawn, `spawned()`, wait) of `sh -c true` in a workspace, with
//!    `Network::Off`, `Network::Proxied` (a namespace of its own and its proxy) and
//!    `Network::Unfiltered`, next to the same process started without any sandbox; the
//!    variants interleaved, each start timed on its own.
//! 2. **Per request**: inside ONE confined `sh -c` call, a loop of `curl` to a local HTTPS
//!    (and a plain HTTP) site, through the proxy (`Network::Proxied` allowing that site) and
//!    direct (`Network::Unfiltered`). curl reports its own `time_connect`, `time_appconnect`
//!    and `time_total` per request, which exclude its process start: the difference between
//!    the two paths is what the proxy adds. The proxied passes are checked to have gone
//!    through the proxy (its count of allowed requests) and every pass to have reached the
//!    site (its request count).

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, anyhow, bail, ensure};
use baton_sandbox::net::{NetGuard, NetPolicy};
use baton_sandbox::{Network, Prepared, Sandbox, SandboxMode, SandboxSettings};
use baton_tests::net_targets::{Site, TlsSite};
use tempfile::TempDir;

use crate::stats::{median, percentile};

/// The worker's state directory at the top of a workspace, as the tools name it.
const STATE_DIR: &str = ".baton";
/// Unmeasured starts of each variant before the timed ones.
const WARM_UP: u32 = 3;

/// How many of each measurement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Timed starts of each start-up variant.
    pub(crate) starts: u32,
    /// Requests of each request pass, in all.
    pub(crate) requests: u32,
    /// Rounds the requests are split into (each round runs every pass once, in turn).
    pub(crate) rounds: u32,
}

impl Settings {
    /// The figures of BENCHMARKS.md.
    pub(crate) const FULL: Settings = Settings {
        starts: 200,
        requests: 200,
        rounds: 4,
    };
    /// The CI smoke size (a few seconds).
    pub(crate) const SHORT: Settings = Settings {
        starts: 30,
        requests: 30,
        rounds: 1,
    };
}

/// How a tool process is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// No sandbox at all: the floor.
    Unconfined,
    /// The sandbox, `Network::Off`.
    Off,
    /// The sandbox, `Network::Proxied`: a network namespace and a proxy.
    Proxied,
    /// The sandbox, `Network::Unfiltered`.
    Unfiltered,
}

impl Start {
    const ALL: [Start; 4] = [
        Start::Unconfined,
        Start::Off,
        Start::Proxied,
        Start::Unfiltered,
    ];

    fn label(self) -> &'static str {
        match self {
            Start::Unconfined => "no sandbox (floor)",
            Start::Off => "sandbox, `Network::Off`",
            Start::Proxied => "sandbox, `Network::Proxied` (namespace + proxy)",
            Start::Unfiltered => "sandbox, `Network::Unfiltered`",
        }
    }
}

/// One pass of requests: which site, which path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pass {
    https: bool,
    proxied: bool,
}

impl Pass {
    const ALL: [Pass; 4] = [
        Pass {
            https: true,
            proxied: true,
        },
        Pass {
            https: true,
            proxied: false,
        },
        Pass {
            https: false,
            proxied: true,
        },
        Pass {
            https: false,
            proxied: false,
        },
    ];

    fn label(self) -> String {
        format!(
            "{} GET, {}",
            if self.https { "HTTPS" } else { "HTTP" },
            if self.proxied {
                "through the proxy"
            } else {
                "direct"
            }
        )
    }
}

/// What curl said about one request, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Timing {
    connect: f64,
    tls_ready: f64,
    total: f64,
}

/// curl's `-w` line for [`Timing`].
const CURL_FORMAT: &str = r"%{time_connect} %{time_appconnect} %{time_total}\n";

/// Parses curl's `-w` lines (seconds) into timings (ms); any other line is an error.
fn parse_timings(stdout: &str) -> anyhow::Result<Vec<Timing>> {
    stdout
        .lines()
        .map(|line| {
            let fields: Vec<f64> = line
                .split_whitespace()
                .map(str::parse::<f64>)
                .collect::<Result<_, _>>()
                .with_context(|| format!("not a curl timing line: {line:?}"))?;
            match fields[..] {
                [connect, tls_ready, total] => Ok(Timing {
                    connect: connect * 1e3,
                    tls_ready: tls_ready * 1e3,
                    total: total * 1e3,
                }),
                _ => bail!("expected 3 curl timings, got {line:?}"),
            }
        })
        .collect()
}

/// What the scenario measured.
pub(crate) struct Report {
    settings: Settings,
    /// Whose ids the sandbox switched to: as root, the sandbox user.
    as_root: bool,
    /// Why nothing was measured (the host cannot sandbox or make network namespaces).
    skipped: Option<String>,
    /// Start-up times (ms) per variant, in [`Start::ALL`] order.
    starts: Vec<(Start, Vec<f64>)>,
    /// Request timings per pass, in [`Pass::ALL`] order.
    requests: Vec<(Pass, Vec<Timing>)>,
}

/// Runs both measurements (see the module docs).
pub(crate) async fn run(settings: Settings) -> anyhow::Result<Report> {
    let as_root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    let mut report = Report {
        settings,
        as_root,
        skipped: None,
        starts: Vec::new(),
        requests: Vec::new(),
    };
    if let Err(reason) = baton_sandbox::probe_host().and_then(|()| baton_sandbox::probe_network()) {
        report.skipped = Some(reason);
        return Ok(report);
    }
    let dir = TempDir::new().context("creating the bench workspace")?;
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).context("creating the bench workspace")?;
    report.starts = startups(&workspace, settings).await?;
    report.requests = requests(&workspace, settings).await?;
    Ok(report)
}

/// A `workspace-write` sandbox with `network`.
fn sandbox(network: Network, guard: Arc<NetGuard>) -> Sandbox {
    Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network,
        settings: Arc::new(SandboxSettings {
            guard,
            ..SandboxSettings::default()
        }),
    }
}

fn proxied(hosts: &[String]) -> anyhow::Result<Sandbox> {
    let guard = Arc::new(NetGuard::default());
    let policy = NetPolicy::new(hosts, guard.clone()).context("the bench's host rules")?;
    Ok(sandbox(Network::Proxied(Arc::new(policy)), guard))
}

/// What one confined `sh -c` printed, and what its proxy let through.
struct Ran {
    stdout: String,
    allowed: Option<u64>,
}

/// Runs `sh -c script` in `workspace` as the shell tool does (confined by `sandbox` unless
/// `None`), failing unless it exits 0.
async fn sh(sandbox: Option<&Sandbox>, workspace: &Path, script: &str) -> anyhow::Result<Ran> {
    let mut prepared = match sandbox {
        None => None,
        Some(sandbox) => {
            let (sandbox, workspace) = (sandbox.clone(), workspace.to_owned());
            tokio::task::spawn_blocking(move || sandbox.prepare(&workspace, STATE_DIR))
                .await
                .context("the sandbox's preparation panicked")??
        }
    };
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(script)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(prepared) = &mut prepared {
        prepared.apply(&mut command);
    }
    let child = command.spawn().context("spawning sh")?;
    if let Some(prepared) = &mut prepared {
        prepared.spawned()?;
    }
    let output = child.wait_with_output().await.context("waiting for sh")?;
    let allowed = prepared
        .as_ref()
        .and_then(Prepared::network_report)
        .map(|r| r.allowed);
    // The temp dir goes off the async threads, outside the caller's timer.
    tokio::task::spawn_blocking(move || drop(prepared));
    ensure!(
        output.status.success(),
        "sh -c {script:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(Ran {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        allowed,
    })
}

/// Measurement 1: the variants of [`Start::ALL`] interleaved, the order rotated every round.
async fn startups(workspace: &Path, settings: Settings) -> anyhow::Result<Vec<(Start, Vec<f64>)>> {
    let any_public = proxied(&[])?;
    let off = sandbox(Network::Off, Arc::new(NetGuard::default()));
    let unfiltered = sandbox(Network::Unfiltered, Arc::new(NetGuard::default()));
    let confinement = |start: Start| match start {
        Start::Unconfined => None,
        Start::Off => Some(&off),
        Start::Proxied => Some(&any_public),
        Start::Unfiltered => Some(&unfiltered),
    };
    let mut samples: Vec<(Start, Vec<f64>)> = Start::ALL.iter().map(|s| (*s, Vec::new())).collect();
    for round in 0..WARM_UP + settings.starts {
        for i in 0..Start::ALL.len() {
            let k = (i + round as usize) % Start::ALL.len();
            let started = Instant::now();
            sh(confinement(Start::ALL[k]), workspace, "true").await?;
            let ms = started.elapsed().as_secs_f64() * 1e3;
            if round >= WARM_UP {
                samples[k].1.push(ms);
            }
        }
    }
    Ok(samples)
}

/// Measurement 2: the passes of [`Pass::ALL`], `settings.requests / settings.rounds` requests
/// each per round, against one HTTPS and one HTTP site.
async fn requests(
    workspace: &Path,
    settings: Settings,
) -> anyhow::Result<Vec<(Pass, Vec<Timing>)>> {
    let tls = TlsSite::start().context("starting the HTTPS site")?;
    let plain = Site::start().context("starting the HTTP site")?;
    let through_proxy = proxied(&[
        format!("127.0.0.1:{}", tls.port()),
        format!("127.0.0.1:{}", plain.port()),
    ])?;
    let direct = sandbox(Network::Unfiltered, Arc::new(NetGuard::default()));
    let per_round = settings.requests.div_ceil(settings.rounds.max(1));
    let mut timings: Vec<(Pass, Vec<Timing>)> =
        Pass::ALL.iter().map(|p| (*p, Vec::new())).collect();
    for _ in 0..settings.rounds.max(1) {
        for (pass, samples) in &mut timings {
            let site_hits = || if pass.https { tls.hits() } else { plain.hits() };
            let url = if pass.https { tls.url() } else { plain.url() };
            let hits_before = site_hits();
            // Direct: no proxy whatever the environment says; proxied: the sandbox's variables.
            let noproxy = if pass.proxied { "" } else { "--noproxy '*'" };
            let script = format!(
                "i=0; while [ $i -lt {per_round} ]; do \
                 curl -sS -f -o /dev/null {noproxy} --cacert '{ca}' -w '{CURL_FORMAT}' {url} \
                 || exit 1; i=$((i+1)); done",
                ca = tls.ca_cert().display(),
            );
            let sandbox = if pass.proxied {
                &through_proxy
            } else {
                &direct
            };
            let ran = sh(Some(sandbox), workspace, &script)
                .await
                .with_context(|| pass.label())?;
            let got = parse_timings(&ran.stdout).with_context(|| pass.label())?;
            let hits = site_hits() - hits_before;
            ensure!(
                got.len() == per_round as usize && hits == got.len(),
                "{}: {} timings and {hits} requests at the site, expected {per_round}",
                pass.label(),
                got.len()
            );
            match (pass.proxied, ran.allowed) {
                (true, Some(allowed)) if allowed == u64::from(per_round) => {}
                (false, None) => {}
                (_, allowed) => {
                    return Err(anyhow!(
                        "{}: the proxy let {allowed:?} requests through, expected {}",
                        pass.label(),
                        if pass.proxied { per_round } else { 0 }
                    ));
                }
            }
            samples.extend(got);
        }
    }
    Ok(timings)
}

impl Report {
    /// The tables, in the Markdown of BENCHMARKS.md.
    pub(crate) fn render(&self) -> String {
        let mut out = String::from("### Network for tools (issue 19)\n\n");
        if let Some(reason) = &self.skipped {
            let _ = writeln!(out, "Skipped: this host cannot sandbox tools: {reason}\n");
            return out;
        }
        let user = if self.as_root {
            "the worker is root: tools run as the sandbox user (uid 65534), the namespace made \
             before the change of user"
        } else {
            "the worker is not root: the namespace is made in a user namespace of its own"
        };
        let _ = writeln!(
            out,
            "Tool start-up: `sh -c true` in an empty workspace, `workspace-write`, prepare + \
             spawn + wait, n = {} each, interleaved ({user}).\n\n\
             | start | median ms | p90 ms | median over `Network::Off` |\n|---|--:|--:|--:|",
            self.settings.starts
        );
        let off = self
            .starts
            .iter()
            .find(|(s, _)| *s == Start::Off)
            .map(|(_, ms)| median(ms))
            .unwrap_or(f64::NAN);
        for (start, ms) in &self.starts {
            let m = median(ms);
            let _ = writeln!(
                out,
                "| {} | {m:.2} | {:.2} | {:+.2} |",
                start.label(),
                percentile(ms, 90.0),
                m - off
            );
        }
        let _ = writeln!(
            out,
            "\nPer request: curl inside one confined `sh -c` call, a new connection each, in {} \
             round(s); curl's own times (its process start excluded).\n\n\
             | request | n | connect median ms | TLS ready median ms | total median ms | total p90 ms |\n\
             |---|--:|--:|--:|--:|--:|",
            self.settings.rounds.max(1)
        );
        for (pass, t) in &self.requests {
            let of = |f: fn(&Timing) -> f64| t.iter().map(f).collect::<Vec<f64>>();
            let total = of(|t| t.total);
            let tls_ready = if pass.https {
                format!("{:.2}", median(&of(|t| t.tls_ready)))
            } else {
                "–".to_owned()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {tls_ready} | {:.2} | {:.2} |",
                pass.label(),
                t.len(),
                median(&of(|t| t.connect)),
                median(&total),
                percentile(&total, 90.0)
            );
        }
        for https in [true, false] {
            let total = |proxied: bool| {
                self.requests
                    .iter()
                    .find(|(p, _)| *p == Pass { https, proxied })
                    .map(|(_, t)| t.iter().map(|t| t.total).collect::<Vec<f64>>())
                    .unwrap_or_default()
            };
            let (through, direct) = (total(true), total(false));
            let _ = writeln!(
                out,
                "{}Added by the proxy per {} request: {:+.2} ms median, {:+.2} ms p90.",
                if https { "\n" } else { "" },
                if https { "HTTPS" } else { "HTTP" },
                median(&through) - median(&direct),
                percentile(&through, 90.0) - percentile(&direct, 90.0),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_lines_become_milliseconds() {
        let got = parse_timings("0.000120 0.004500 0.006000\n0.001 0.000000 0.002\n").unwrap();
        assert_eq!(got.len(), 2);
        assert!((got[0].connect - 0.12).abs() < 1e-9);
        assert!((got[0].tls_ready - 4.5).abs() < 1e-9);
        assert!((got[1].total - 2.0).abs() < 1e-9);
        let err = parse_timings("curl: (7) Failed to connect\n").unwrap_err();
        assert!(
            format!("{err:#}").contains("not a curl timing line"),
            "{err:#}"
        );
        assert!(parse_timings("1 2\n").is_err());
    }

    /// The scenario at its smallest, for real: every variant starts, every request pass
    /// reaches its site (and the proxied ones through the proxy: `requests` checks both).
    #[tokio::test]
    async fn every_variant_is_measured() {
        let settings = Settings {
            starts: 2,
            requests: 4,
            rounds: 2,
        };
        let report = run(settings).await.unwrap();
        if let Some(reason) = &report.skipped {
            // Only a host without Landlock or namespaces skips; say so rather than pass.
            panic!("this host cannot run the network bench: {reason}");
        }
        let starts: Vec<(Start, usize)> =
            report.starts.iter().map(|(s, v)| (*s, v.len())).collect();
        assert_eq!(starts, Start::ALL.map(|s| (s, 2)));
        let passes: Vec<(Pass, usize)> =
            report.requests.iter().map(|(p, t)| (*p, t.len())).collect();
        assert_eq!(passes, Pass::ALL.map(|p| (p, 4)));
        let table = report.render();
        assert!(
            table.contains("Added by the proxy per HTTPS request"),
            "{table}"
        );
    }
}
