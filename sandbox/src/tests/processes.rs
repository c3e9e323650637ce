//! What a call's processes can reach and how long they live (issue 30 items 2 and 8): nothing a
//! call started outlives it.

use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{sandbox, sh};
use crate::{SandboxMode, SandboxSettings};

/// Live (non-zombie) processes whose command line contains `marker`, seen from the test
/// process (the host's `/proc`).
fn live_with(marker: &str) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
            .unwrap_or(true);
        if cmdline.contains(marker) && !zombie {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Kills what a failing test left behind (by pid, each one found by its marker).
struct Reap(Vec<String>);

impl Drop for Reap {
    fn drop(&mut self) {
        for marker in &self.0 {
            for (pid, _) in live_with(marker) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// A `sleep` duration no other process uses: `30.<pid><n>`.
fn marker(n: u32) -> String {
    format!("30.{}{n}", std::process::id())
}

#[tokio::test]
async fn nothing_a_call_started_outlives_it() {
    let dir = TempDir::new().unwrap();
    let [a, b, c, d] = [1, 2, 3, 4].map(marker);
    let _reap = Reap(vec![a.clone(), b.clone(), c.clone(), d.clone()]);
    // Each one leaves the process group (and the session) in its own way.
    let command = format!(
        "{{ setsid sh -c 'sleep {a}' & setsid -f sleep {b}; \
         nohup sh -c '(sleep {c} &) &'; ( setsid sleep {d} & ); }} > /dev/null 2>&1; \
         sleep 0.3; echo started"
    );
    let sandbox = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings::default(),
    );
    let result = sh(&sandbox, &dir.path().join("ws"), &command).await;
    assert_eq!(result.stdout, "started\n", "{result:?}");
    // The kernel takes a moment to kill a namespace's processes after its init is gone.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut left = Vec::new();
    while Instant::now() < deadline {
        left = [&a, &b, &c, &d].iter().flat_map(|m| live_with(m)).collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(left.is_empty(), "outlived the call: {left:?}");
}
