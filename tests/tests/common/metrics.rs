//! Reading a worker's Prometheus endpoint: a worker serving `/metrics`, a scrape over plain
//! HTTP/1.1, and the samples parsed from the text format.

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

use baton_tests::*;

/// How long to wait for a worker, or for the metrics to show what a test waits for.
const T: Duration = Duration::from_secs(60);

/// One sample of a Prometheus text exposition.
#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the text format (enough of it for our metrics: no escaped quotes in label values).
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_owned(), v.trim_matches('"').to_owned()))
                })
                .collect();
            Some(Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().ok()?,
            })
        })
        .collect()
}

/// Sum of the samples named `name` whose labels include all of `labels`.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// `GET /metrics` over plain HTTP/1.1: the body and its samples.
pub fn scrape(addr: &str) -> anyhow::Result<(String, Vec<Sample>)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("not an HTTP response: {response}"))?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "{head}");
    anyhow::ensure!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "chunked response: {head}"
    );
    Ok((body.to_owned(), parse(body)))
}

/// Scrapes until `ready` holds for the samples; returns that scrape.
pub fn scrape_until(
    addr: &str,
    what: &str,
    ready: impl Fn(&[Sample]) -> bool,
) -> (String, Vec<Sample>) {
    wait_until_blocking(T, what, || {
        let (text, samples) = scrape(addr)?;
        Ok(ready(&samples).then_some((text, samples)))
    })
    .unwrap()
}

/// A ready worker on `queue` serving /metrics (visibility polled every second) with one more
/// setting; returns it and the metrics address.
pub fn metrics_worker(server: &DevServer, queue: &str, extra: &[(&str, &str)]) -> (Worker, String) {
    let addr = format!("127.0.0.1:{}", free_port().unwrap());
    let mut env = vec![
        ("BATON_METRICS_ADDR", addr.as_str()),
        ("BATON_METRICS_POLL_SECS", "1"),
    ];
    env.extend_from_slice(extra);
    let mut w = Worker::spawn(server, queue, &env).unwrap();
    w.wait_ready_blocking(T).unwrap();
    (w, addr)
}
