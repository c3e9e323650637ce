//! What a process used, read from `/proc`: CPU time and resident memory.

use anyhow::Context;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU time (user + system) process `pid` has used so far, in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat)
        .map(|ticks| ticks as f64 / TICKS_PER_SECOND)
        .with_context(|| format!("unexpected /proc/{pid}/stat: {stat}"))
}

/// Resident memory of process `pid` (`VmRSS`), in bytes.
pub(crate) fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_rss_kib(&status)
        .map(|kib| kib * 1024)
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is fields[n - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn parse_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_and_status() {
        let stat = "1234 (baton (w) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 8 0";
        assert_eq!(parse_cpu_ticks(stat), Some(281));
        let status = "Name:\tbaton\nVmPeak:\t  9000 kB\nVmRSS:\t   5120 kB\n";
        assert_eq!(parse_rss_kib(status), Some(5120));
        assert!(cpu_seconds(std::process::id()).unwrap() >= 0.0);
        assert!(rss_bytes(std::process::id()).unwrap() > 1024 * 1024);
    }
}
