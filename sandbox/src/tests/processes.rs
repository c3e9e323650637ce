//! What a call's processes can reach and how long they live: nothing a
//! call started outlives it, and concurrent calls see neither each other's private temp dirs
//! nor each other's command lines.

use std::path::{Path, PathBuf};
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

/// The private temp dir of the call whose `TMPDIR` file `f` exists, found from the host.
async fn temp_dir_holding(file: &str) -> PathBuf {
    let root = crate::temp::temp_root().unwrap();
    let prefix = crate::temp::temp_prefix(std::process::id());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(entries) = std::fs::read_dir(&root) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name.to_string_lossy().starts_with(&prefix) && entry.path().join(file).exists() {
                    return entry.path();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no private temp dir holds {file}");
}

#[tokio::test]
async fn concurrent_calls_see_neither_each_others_temp_files_nor_command_lines() {
    let dir = TempDir::new().unwrap();
    let sandbox = sandbox(
        SandboxMode::WorkspaceWrite,
        false,
        SandboxSettings::default(),
    );
    let mark = format!("MARK-91c2-{}", std::process::id());
    let file = format!("f-{}", std::process::id());
    let _reap = Reap(vec![mark.clone()]);
    let a_ws = dir.path().join("a");
    let command_a = format!("echo s3cret > \"$TMPDIR/{file}\"; sleep 5 # {mark}");
    let a = sh(&sandbox, &a_ws, &command_a);
    let b = async {
        let a_temp = temp_dir_holding(&file).await;
        // A's command line is visible from the host: the test is meaningful.
        assert!(!live_with(&mark).is_empty(), "call A is not running");
        let root = a_temp.parent().unwrap_or(Path::new("/"));
        let command_b = format!(
            "cat {a}/{file}; cat {root}/baton-tool-*/{file}; ls {root}; \
             cat /proc/*/cmdline | tr '\\0' ' '; echo; echo \"pid=$$\"; \
             head -1 /proc/self/status; echo end",
            a = a_temp.display(),
            root = root.display(),
        );
        sh(&sandbox, &dir.path().join("b"), &command_b).await
    };
    let (a, b) = tokio::join!(a, b);
    assert_eq!(a.code, Some(0), "{a:?}");
    // B has a /proc of its own, where its shell is pid 2 (after the namespace's init).
    assert!(b.stdout.ends_with("pid=2\nName:\thead\nend\n"), "{b:?}");
    let seen = format!("{}{}", b.stdout, b.stderr);
    assert!(!seen.contains("s3cret"), "B read A's temp file: {seen}");
    assert!(!seen.contains(&mark), "B saw A's command line: {seen}");
}
