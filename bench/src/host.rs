//! What the numbers were measured on: CPU, memory, load, tool versions.

use std::fmt::Write as _;

/// A description of this machine and run, a few lines of text.
pub(crate) fn describe() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = field(&cpuinfo, "model name").unwrap_or_else(|| "unknown CPU".to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let ram = field(&meminfo, "MemTotal")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| format!("{:.1} GiB", kib as f64 / (1024.0 * 1024.0)))
        .unwrap_or_else(|| "?".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned());
    let temporal = baton_tests::temporal_bin()
        .ok()
        .and_then(|bin| {
            std::process::Command::new(bin)
                .arg("--version")
                .output()
                .ok()
        })
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "temporal CLI not found".to_owned());
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut out = String::new();
    let _ = writeln!(out, "machine:  nproc {cpus}, {model}, RAM {ram}");
    let _ = writeln!(out, "load:     {load} (1/5/15 min load average at start)");
    let _ = writeln!(
        out,
        "software: {temporal}; temporalio-sdk 1.1.1; baton binaries: {profile} build"
    );
    let command: Vec<String> = std::env::args().collect();
    let _ = write!(out, "command:  {}", command.join(" "));
    out
}

/// The value of the first `key: value` line of a /proc file.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_fields() {
        let text = "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\nMemTotal:  1024 kB\n";
        assert_eq!(
            field(text, "model name").as_deref(),
            Some("Some CPU @ 2.0GHz")
        );
        assert_eq!(field(text, "MemTotal").as_deref(), Some("1024 kB"));
        assert_eq!(field(text, "flags"), None);
    }
}
